"""Indexes built once per session for the sync tests (``test_sync_*``): each store's module
syncs the same runs, so the model runs three times in all, not three times a store."""

from __future__ import annotations

import shutil
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.run import run

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SyncRuns:
    demo: Path  # the demo corpus indexed, BM25 on: one run
    demo_run: str  # its run directory
    reindex: Path  # a small corpus indexed twice (BM25 off), LATEST the second run
    first: str  # run directories of ``reindex``
    second: str
    changed: str  # doc ids: edited, deleted and added between ``first`` and ``second``
    deleted: str
    added: str


def _job(corpus: Path, output: Path, *overrides: str):
    return run(load_config(ROOT / "configs" / "local.yaml",
                           [f"input.pattern={corpus}/**", f"output.path={output}", *overrides]))


@pytest.fixture(scope="session")
def sync_runs(tmp_path_factory) -> SyncRuns:
    from tests.pipeline.test_reindex import write_corpus

    base = tmp_path_factory.mktemp("sync-runs")
    demo = _job(ROOT / "examples" / "corpus", base / "demo")
    corpus = base / "corpus"
    write_corpus(corpus, 30)
    # BM25 off for the reindex pair: a BM25 weight moves with the corpus statistics (every
    # chunk's, when a document comes or goes), so only with it off is "what changed" the three
    # documents' chunks.
    first = _job(corpus, base / "reindex", "sparse=null")
    edited = corpus / "doc010.md"
    edited.write_text(edited.read_text().replace("## Part 0", "## Part 0\n\nA brand new sentence about the dock.", 1))
    (corpus / "doc020.md").unlink()
    (corpus / "doc030.md").write_text("# Manual 30\n\nAn added manual on pallet scanners.\n")
    second = _job(corpus, base / "reindex", "sparse=null")
    shutil.rmtree(corpus)
    return SyncRuns(base / "demo", demo.run_dir, base / "reindex", first.run_dir, second.run_dir,
                    "doc010.md", "doc020.md", "doc030.md")


# A password that must never reach a file, a log line or a message.
SECRET = "S3CRETPW-x9"


@dataclass(frozen=True)
class OddRun:
    output: Path
    run_dir: str
    code: int  # the exit status of `chunkline run` (its sink is unreachable)
    out: str
    err: str


def write_odd_corpus(corpus: Path) -> None:
    """Metadata a store chokes on unless the run made it canonical: numbers of every size, a
    U+0000, Unicode; and metadata no store should receive (500 levels deep, 1 MB)."""
    corpus.mkdir(parents=True)
    deep: object = "bottom"
    for _ in range(500):
        deep = {"d": deep}
    records = [
        {"id": "numbers", "text": "Calibration numbers of every size, kept exactly as given.",
         "metadata": {"big": 1e20, "huge": 1e300, "tiny": 5e-324, "neg_zero": -0.0,
                      "integral": 2.0, "beyond": 123456789012345678901234, "precise": 0.1 + 0.2,
                      "nested": {"a": [1, {"b": 2.5}]}, "nul": "a\u0000b", "emoji": "\U0001f64f"}},
        {"id": "plain", "text": "A second ticket about the gripper's warranty return.",
         "metadata": {"n": 1, "s": "1"}},
        {"id": "deep", "text": "A record whose metadata is nested five hundred deep.", "metadata": deep},
        {"id": "fat", "text": "A record carrying a megabyte of metadata.", "metadata": {"blob": "x" * 1_000_000}},
    ]
    (corpus / "tickets.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (corpus / "guide.md").write_text("# Guide\n\n## Setup\n\nWarm the arm up for ten minutes.\n")


@pytest.fixture(scope="session")
def odd_run(tmp_path_factory) -> OddRun:
    """The odd corpus through `chunkline run`, with a sink whose URI carries a password and
    names a PostgreSQL socket directory that does not exist: the run publishes, the sink fails."""
    from pipeline.cli import main

    base = tmp_path_factory.mktemp("odd")
    write_odd_corpus(base / "corpus")
    output = base / "index"
    sink = f"postgresql://postgres:{SECRET}@/postgres?host={base}/no-socket&password={SECRET}"
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", "--config", str(ROOT / "configs" / "local.yaml"), "--input",
                 f"{base}/corpus/**", "--output", str(output), "--set", f"sink.to={sink}"], out, err)
    latest = (output / "LATEST").read_text().strip() if (output / "LATEST").exists() else ""
    return OddRun(output, str(output / latest), code, out.getvalue(), err.getvalue())
