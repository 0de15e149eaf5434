"""A damaged or missing state table (the per-document record a rerun passes settled documents by)
is found before the job starts, named in one line, and every document computed again: the rerun
costs more, never fails, and its index is a rebuild's."""

from __future__ import annotations

import io
import logging
import shutil
from pathlib import Path

import pytest

from chunkline.index.manifest import load_manifest
from chunkline.index.tables import live_files
from chunkline.pipeline.cli import main
from chunkline.state import STATE_TABLE
from tests.helpers import run_rows

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "local.yaml")
pytestmark = pytest.mark.slow


def chunkline_run(corpus: Path, output: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", "--config", CONFIG, "--input", f"{corpus}/**", "--output", str(output), "--quiet",
                 "--set", "embed=null", "--set", "output.chunk_shards=2"], out, err)
    return code, err.getvalue()


def chunk_rows(output: Path) -> list[tuple]:
    run_dir = output / (output / "LATEST").read_text().strip()
    return sorted((r["chunk_id"], r["text"], tuple(r["headings"])) for r in run_rows(run_dir, "chunks"))


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A corpus, its output after a full run and an unchanged rerun (whose state rows lie in the
    first run's files), and a rebuild of the corpus as edited below."""
    base = tmp_path_factory.mktemp("state")
    corpus = base / "corpus"
    corpus.mkdir()
    for n in range(8):
        (corpus / f"doc{n}.md").write_text(f"# Dock {n}\n\nCharger {n} pairs with robot {n + 1}.\n",
                                           encoding="utf-8")
    output = base / "index"
    assert chunkline_run(corpus, output)[0] == 0
    assert chunkline_run(corpus, output)[0] == 0
    (corpus / "doc3.md").write_text("# Dock 3\n\nCharger 3 now pairs with robot 9.\n", encoding="utf-8")
    rebuild = base / "rebuild"
    assert chunkline_run(corpus, rebuild)[0] == 0
    return corpus, output, chunk_rows(rebuild)


def state_files(output: Path) -> list[Path]:
    run_dir = str(output / (output / "LATEST").read_text().strip())
    return [Path(f.path) for f in live_files(run_dir, load_manifest(run_dir), STATE_TABLE)]


@pytest.mark.parametrize("damage", ["truncated", "folder deleted"])
def test_a_damaged_state_table_is_named_and_the_rerun_is_a_rebuild(published, tmp_path, damage, caplog) -> None:
    corpus, output, rebuilt = published
    copy = tmp_path / "index"
    shutil.copytree(output, copy)
    (state,) = {path for path in state_files(copy) if path.stat().st_size}
    if damage == "truncated":
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    else:  # the earlier run's folder, which holds the state (and the chunks) the published run lists
        shutil.rmtree(state.parent)
    with caplog.at_level(logging.WARNING, logger="chunkline"):
        code, err = chunkline_run(corpus, copy)
    assert code == 0, err
    warned = [r.getMessage() for r in caplog.records if "state table is not usable" in r.getMessage()]
    assert len(warned) == 1 and state.name in warned[0], [r.getMessage() for r in caplog.records]
    assert chunk_rows(copy) == rebuilt
