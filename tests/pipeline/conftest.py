"""Indexes built once per session for the sync tests (``test_sync_*``): each store's module
syncs the same runs, so the model runs three times in all, not three times a store."""

from __future__ import annotations

import shutil
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SyncRuns:
    demo: Path  # the demo corpus indexed twice, three documents edited between
    demo_run: str  # its second run (LATEST): BM25 weighed against the first run's reference
    reindex: Path  # a small corpus indexed four times, LATEST the fourth run
    first: str  # run directories of ``reindex``
    second: str  # three documents edited, deleted and added
    touched: str  # every file's mtime moved, nothing else
    appended: str  # one record appended to the corpus's JSONL dump
    changed: str  # doc ids: edited, deleted and added between ``first`` and ``second``
    deleted: str
    added: str
    appended_id: str  # the record appended between ``touched`` and ``appended``
    demo_first: str = ""  # the demo's first run


def _job(corpus: Path, output: Path, *overrides: str):
    return run(load_config(ROOT / "configs" / "local.yaml",
                           [f"input.pattern={corpus}/**", f"output.path={output}", *overrides]))


DEMO_EDITS = ("manuals/gripper-g2-manual.md", "runbooks/on-call-handbook.md", "wiki/team-onboarding.md")


@pytest.fixture(scope="session")
def sync_runs(tmp_path_factory) -> SyncRuns:
    import os

    from tests.pipeline.test_reindex import write_corpus

    base = tmp_path_factory.mktemp("sync-runs")
    demo_corpus = base / "demo-corpus"
    shutil.copytree(ROOT / "examples" / "corpus", demo_corpus)
    demo_first = _job(demo_corpus, base / "demo")
    for name in DEMO_EDITS:  # 3 of 74 files, as a night's edits
        with open(demo_corpus / name, "a", encoding="utf-8") as handle:
            handle.write(f"\n\nA paragraph added tonight on torque limits and firmware ({name}).\n")
    demo = _job(demo_corpus, base / "demo")
    shutil.rmtree(demo_corpus)
    corpus = base / "corpus"
    write_corpus(corpus, 30)
    dump = corpus / "tickets.jsonl"
    dump.write_text("".join(json.dumps({"id": f"T-{i}", "text": f"Ticket {i}: the dock at site {i} "
                                        f"reports a stuck pallet scanner, attempt {i}."}) + "\n"
                            for i in range(5)), encoding="utf-8")
    first = _job(corpus, base / "reindex")
    edited = corpus / "doc010.md"
    edited.write_text(edited.read_text().replace("## Part 0", "## Part 0\n\nA brand new sentence about the dock.", 1))
    (corpus / "doc020.md").unlink()
    (corpus / "doc030.md").write_text("# Manual 30\n\nAn added manual on pallet scanners.\n")
    second = _job(corpus, base / "reindex")
    for path in corpus.iterdir():  # a fresh clone, an rsync without -t: new mtimes, same bytes
        stat = path.stat()
        os.utime(path, (stat.st_atime + 86_400, stat.st_mtime + 86_400))
    touched = _job(corpus, base / "reindex")
    with open(dump, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "T-new", "text": "A new ticket: the courier waits at the "
                                 "loading dock door after the firmware update."}) + "\n")
    appended = _job(corpus, base / "reindex")
    shutil.rmtree(corpus)
    return SyncRuns(base / "demo", demo.run_dir, base / "reindex", first.run_dir, second.run_dir,
                    touched.run_dir, appended.run_dir, "doc010.md", "doc020.md", "doc030.md",
                    "T-new", demo_first.run_dir)


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
    from chunkline.pipeline.cli import main

    base = tmp_path_factory.mktemp("odd")
    write_odd_corpus(base / "corpus")
    output = base / "index"
    sink = f"postgresql://postgres:{SECRET}@/postgres?host={base}/no-socket&password={SECRET}"
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", "--config", str(ROOT / "configs" / "local.yaml"), "--input",
                 f"{base}/corpus/**", "--output", str(output), "--set", f"sink.to={sink}"], out, err)
    latest = (output / "LATEST").read_text().strip() if (output / "LATEST").exists() else ""
    return OddRun(output, str(output / latest), code, out.getvalue(), err.getvalue())
