"""The split and embed modes inside the whole job: semantic splitting, late chunking and code
files, each with exact offsets, the budget held, and the manifest saying what made the vectors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chunkline import get_tokenizer
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.helpers import run_rows

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

PYTHON_SOURCE = '''"""Dock scheduling."""


class Scheduler:
    """Assigns docks."""

    class Slot:
        def free(self) -> bool:
            return True

    def assign(self, robot: str) -> str:
        return f"dock-for-{robot}"


def main() -> None:
    print(Scheduler().assign("c1"))
'''


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("modes")
    (root / "guide.md").write_text((ROOT / "examples" / "guide.md").read_text())
    (root / "gripper.md").write_text((ROOT / "examples" / "corpus" / "manuals" / "gripper-g2-manual.md").read_text())
    (root / "scheduler.py").write_text(PYTHON_SOURCE)
    (root / "courier.html").write_text((ROOT / "examples" / "corpus" / "site" / "products" / "courier-c1.html").read_text())
    return root


def job(corpus: Path, output: Path, *overrides: str):
    return run(load_config(ROOT / "configs" / "local.yaml",
                           [f"input.pattern={corpus}/**", f"output.path={output}", *overrides]))


def chunk_rows(run_dir: str) -> list[dict]:
    return run_rows(run_dir, "chunks")


def documents(run_dir: str) -> dict[str, str]:
    return {r["doc_id"]: r["text"] for r in run_rows(run_dir, "documents")}


def manifest(run_dir: str) -> dict:
    return json.loads((Path(run_dir) / "manifest.json").read_text())


@pytest.mark.parametrize("mode", [("split.mode=semantic",), ("embed.mode=late",), ()],
                         ids=["semantic", "late", "recursive"])
def test_offsets_exact_and_budget_held(corpus, tmp_path, mode) -> None:
    # Sections one by one, so that the h3 path below shows (merged, a small h3 section would
    # share a chunk labelled with its parent's path).
    summary = job(corpus, tmp_path, *mode, "split.merge_sections_below=null")
    assert summary.reconciled and summary.counts["documents"] == 4
    rows, texts = chunk_rows(summary.run_dir), documents(summary.run_dir)
    info = manifest(summary.run_dir)
    budget = info["split"]["max_tokens"]
    tokenizer = get_tokenizer(info["split"]["tokenizer"])
    for r in rows:
        assert texts[r["doc_id"]][r["start"]:r["end"]] == r["text"]
        assert r["tokens"] == tokenizer.count(r["text"])
        assert tokenizer.count(r["table_header"] + r["text"]) <= budget
        assert r["embedding"] is not None and len(r["embedding"]) == 384
    # Code chunks carry the enclosing definitions as their heading path.
    code = [r for r in rows if r["doc_id"] == "scheduler.py"]
    assert code and all(r["headings"] == [] or r["headings"][0] in ("Scheduler", "main") for r in code)
    # HTML h1-h3 become the heading path (through trafilatura's Markdown); a `#` comment in the
    # page's code block does not.
    html = [r for r in rows if r["doc_id"] == "courier.html"]
    assert ["Courier C1", "How Courier finds its way", "Top modules"] in [r["headings"] for r in html]
    assert all(r["headings"][:1] == ["Courier C1"] for r in html)
    assert info["embed_mode"] == ("late" if "embed.mode=late" in mode else "standard")


def test_late_vectors_differ_from_standard_and_reuse_by_document(corpus, tmp_path) -> None:
    standard = job(corpus, tmp_path / "standard")
    late = job(corpus, tmp_path / "late", "embed.mode=late")
    by_id = {r["chunk_id"]: r["embedding"] for r in chunk_rows(standard.run_dir)}
    late_rows = chunk_rows(late.run_dir)
    assert any(by_id.get(r["chunk_id"]) and max(abs(a - b) for a, b in zip(by_id[r["chunk_id"]], r["embedding"])) > 1e-3
               for r in late_rows)
    # Reuse never mixes modes: the late run embedded everything even beside a standard index.
    assert late.counts["reused"] == 0
    again = job(corpus, tmp_path / "late", "embed.mode=late")
    assert again.counts["embedded"] == 0 and again.counts["chunks_carried"] == len(late_rows)
    # Computed again rather than carried, every late vector is found by document.
    reused = job(corpus, tmp_path / "late", "embed.mode=late", "output.carry=false")
    assert reused.counts["embedded"] == 0 and reused.counts["reused"] == len(late_rows)
