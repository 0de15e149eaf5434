"""Indexes built once per session for the sync tests (``test_sync_*``): each store's module
syncs the same runs, so the model runs three times in all, not three times a store."""

from __future__ import annotations

import shutil
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
