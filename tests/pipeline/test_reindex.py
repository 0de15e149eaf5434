"""Incremental reindex: only changed text is embedded, the result equals a full rebuild, and a
run that dies leaves LATEST on the last complete run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from chunkline.pipeline.config import load_config
from tests.helpers import run_rows
from chunkline.pipeline.run import run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

WORDS = ("robot arm calibration sensor firmware battery dock mission route map lidar torque "
         "encoder gripper payload controller network latency safety zone charger floor aisle "
         "shelf pallet scanner camera operator ticket alert restart update rollback").split()


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."
        for _ in range(sentences)
    )


def write_corpus(root: Path, count: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        sections = [f"# Manual {i:03d}\n\n{paragraph(rng, 3)}"]
        for s in range(rng.randint(1, 3)):
            sections.append(f"## Part {s}\n\n{paragraph(rng, rng.randint(2, 8))}")
        (root / f"doc{i:03d}.md").write_text("\n\n".join(sections) + "\n", encoding="utf-8")


def job(corpus: Path, output: Path, *overrides: str):
    config = load_config(ROOT / "configs" / "local.yaml",
                         [f"input.pattern={corpus}/**", f"output.path={output}",
                          # float32: a vector then hardly depends on the pass it ran in, so a
                          # reused vector equals a fresh one to 2e-5 (bfloat16: to ~2e-3).
                          "dedupe.exact=false", "embed.dtype=float32", *overrides])
    return run(config)


def chunk_rows(run_dir: str) -> list[dict]:
    rows = run_rows(run_dir, "chunks")
    return sorted(rows, key=lambda r: r["chunk_id"])


def assert_same_rows(a: list[dict], b: list[dict]) -> None:
    assert [{k: v for k, v in r.items() if k != "embedding"} for r in a] == \
           [{k: v for k, v in r.items() if k != "embedding"} for r in b]
    # A reused vector was computed in another batch; padding makes float noise, nothing more.
    np.testing.assert_allclose(np.array([r["embedding"] for r in a]),
                               np.array([r["embedding"] for r in b]), atol=2e-5)


@pytest.fixture(scope="module")
def reindexed(tmp_path_factory):
    base = tmp_path_factory.mktemp("reindex")
    corpus, output = base / "corpus", base / "index"
    write_corpus(corpus, 100)
    first = job(corpus, output)
    old_keys = {r["content_key"] for r in chunk_rows(first.run_dir)}

    changed = corpus / "doc010.md"
    changed.write_text(changed.read_text().replace("## Part 0", "## Part 0\n\nA brand new sentence about the dock.", 1))
    (corpus / "doc020.md").unlink()
    (corpus / "doc100.md").write_text("# Manual 100\n\nAn added manual on pallet scanners.\n")
    second = job(corpus, output)
    return base, corpus, output, first, second, old_keys


def test_first_run_embeds_everything(reindexed) -> None:
    _, _, _, first, _, _ = reindexed
    assert first.counts["documents"] == 100
    assert first.counts["embedded"] == first.counts["chunks"] and first.counts["reused"] == 0


def test_the_summary_suggests_a_question_drawn_from_its_own_index(reindexed) -> None:
    """A corpus without the demo's manual: the `next` line asks about a heading this index
    holds, one document's own (not the `Part 0` every manual has), and asking it finds that
    heading's chunks first."""
    from chunkline.pipeline.query import search
    from chunkline.pipeline.summary import format_summary

    _, _, output, _, second, _ = reindexed
    headings = {title for row in chunk_rows(second.run_dir) for title in row["headings"]}
    assert second.question in headings and second.question.startswith("Manual ")
    [line] = [line for line in format_summary(second).splitlines() if line.startswith("  next")]
    assert line == f'  next       chunkline query {output} "{second.question}"'
    assert "warm up" not in line  # the demo's question, about a manual this corpus lacks
    hits = search(str(output), second.question, k=3, mode="sparse")
    assert hits[0].headings[0] == second.question


def test_only_new_text_is_embedded(reindexed) -> None:
    _, _, _, first, second, old_keys = reindexed
    rows = chunk_rows(second.run_dir)
    new = [r for r in rows if r["content_key"] not in old_keys]
    assert {r["doc_id"] for r in new} <= {"doc010.md", "doc100.md"}
    assert {r["doc_id"] for r in new} == {"doc010.md", "doc100.md"}
    assert second.counts["embedded"] == len(new)
    # Unchanged documents are carried whole; the changed one reuses its unchanged chunks' vectors.
    assert second.counts["reused"] + second.counts["chunks_carried"] == len(rows) - len(new)
    assert second.counts["reused"] < second.counts["chunks_carried"]
    assert (second.counts["embedded"] + second.counts["reused"] + second.counts["chunks_carried"]
            == second.counts["chunks"])
    assert second.previous == first.run_dir


def test_deleted_document_is_gone(reindexed) -> None:
    _, _, _, _, second, _ = reindexed
    doc_ids = {r["doc_id"] for r in chunk_rows(second.run_dir)}
    assert "doc020.md" not in doc_ids and "doc100.md" in doc_ids
    assert len({r["doc_id"] for r in chunk_rows(second.run_dir)}) == 100


def stored_weights_hold(rows: list[dict], run_dir: str) -> None:
    """Every chunk's stored BM25 weights are those of its own search text against the run's
    recorded reference mean length: nothing else of the corpus."""
    from chunkline.pipeline.manifest import load_manifest
    from chunkline.sparse import SparseOptions, document_weights, term_counts

    bm25 = load_manifest(run_dir).bm25
    assert bm25 is not None and bm25.reference_avgdl is not None
    options = SparseOptions()
    for row in rows:
        ids, counts = term_counts(row["search_text"], options)
        assert tuple(row["sparse_indices"]) == ids
        np.testing.assert_array_equal(np.asarray(row["sparse_values"], np.float32), np.asarray(
            document_weights(ids, counts, bm25.reference_avgdl, options), np.float32))


def test_reindex_equals_a_full_rebuild(reindexed) -> None:
    """Row for row, but the BM25 weights: the reindex weighs against the reference length it
    carried from the first run, the rebuild against its own corpus's mean; each holds exactly
    the weights of its chunk's text against its recorded reference."""
    base, corpus, _, _, second, _ = reindexed
    rebuild = job(corpus, base / "rebuild")
    assert rebuild.counts["reused"] == 0
    reindexed_rows, rebuilt_rows = chunk_rows(second.run_dir), chunk_rows(rebuild.run_dir)
    assert_same_rows([{k: v for k, v in r.items() if k != "sparse_values"} for r in reindexed_rows],
                     [{k: v for k, v in r.items() if k != "sparse_values"} for r in rebuilt_rows])
    stored_weights_hold(reindexed_rows, second.run_dir)
    stored_weights_hold(rebuilt_rows, rebuild.run_dir)


def test_a_mean_length_past_the_bound_rebases_every_row_once(tmp_path) -> None:
    """Short documents added until the corpus's mean chunk length moves past the bound (5 %):
    the run says it re-based, every row changes and the store takes each once; the next run
    with nothing changed writes nothing."""
    from chunkline.pipeline.summary import format_summary
    from tests.pipeline.sync_cases import synced

    corpus, output, store = tmp_path / "corpus", tmp_path / "index", str(tmp_path / "lance")
    write_corpus(corpus, 12)
    first = job(corpus, output)
    assert synced(store, first.run_dir).written == first.counts["chunks"]
    for i in range(12):
        (corpus / f"note{i:02d}.md").write_text(f"# Note {i}\n\nShort note {i} on the dock.\n")
    second = job(corpus, output)
    bm25 = json.loads((Path(second.run_dir) / "manifest.json").read_text())["bm25"]
    before = json.loads((Path(first.run_dir) / "manifest.json").read_text())["bm25"]
    assert bm25["rebased"] and bm25["reference_avgdl"] == bm25["avgdl"]
    assert bm25["previous_reference_avgdl"] == before["reference_avgdl"]
    assert abs(bm25["avgdl"] / before["reference_avgdl"] - 1) > bm25["reference_drift"]
    assert "BM25 re-based" in format_summary(second)
    report = synced(store, second.run_dir)
    assert report.verification.ok
    assert (report.written, report.deleted) == (second.counts["chunks"], 0)
    third = job(corpus, output)
    assert "BM25" not in format_summary(third)
    report = synced(store, third.run_dir)
    assert report.verification.ok and report.written == report.deleted == 0


def test_rerun_with_nothing_changed_embeds_nothing(reindexed) -> None:
    _, corpus, output, _, second, _ = reindexed
    third = job(corpus, output)
    assert third.counts["embedded"] == 0
    assert third.counts["chunks_carried"] == third.counts["chunks"] == second.counts["chunks"]
    assert third.counts["reused"] == 0 and third.counts["documents_carried"] == third.counts["kept"]
    assert_same_rows(chunk_rows(third.run_dir), chunk_rows(second.run_dir))
    assert (output / "LATEST").read_text().strip() == third.run_id


def test_a_rerun_with_nothing_to_embed_never_loads_the_model(reindexed) -> None:
    """In a fresh process, as a nightly cron job runs it: every chunk is carried, so
    the embed stage never imports sentence-transformers nor reads the weights."""
    _, corpus, output, _, _, _ = reindexed
    script = (
        "import sys\n"
        "from chunkline.pipeline.config import load_config\n"
        "from chunkline.pipeline.run import run\n"
        f"config = load_config({str(ROOT / 'configs' / 'local.yaml')!r}, ["
        f"'input.pattern={corpus}/**', 'output.path={output}', 'dedupe.exact=false', 'embed.dtype=float32'])\n"
        "summary = run(config)\n"
        "print(summary.counts['embedded'], summary.counts['chunks_carried'], summary.published,\n"
        "      'sentence_transformers' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    embedded, carried, published, loaded = done.stdout.split()[-4:]
    assert (embedded, published, loaded) == ("0", "True", "False"), done.stdout
    assert int(carried) > 0


def test_explicit_previous_and_reuse_off(reindexed, tmp_path) -> None:
    _, corpus, output, _, _, _ = reindexed
    elsewhere = job(corpus, tmp_path / "fresh", f"output.previous={output}")
    assert elsewhere.counts["embedded"] == 0
    off = job(corpus, tmp_path / "fresh", "output.reuse_latest=false")
    assert off.counts["reused"] == 0 and off.counts["embedded"] == off.counts["chunks"]


def test_killed_run_leaves_latest_on_the_last_complete_run(reindexed, tmp_path) -> None:
    _, corpus, output, _, _, _ = reindexed
    before = (output / "LATEST").read_text()
    runs_before = {p.name for p in output.iterdir() if p.is_dir()}
    # Reuse off, so the job still has real work to do when it is killed mid-way.
    process = subprocess.Popen(
        [sys.executable, "-m", "chunkline.pipeline.cli", "run", "--config", str(ROOT / "configs" / "local.yaml"),
         "--input", f"{corpus}/**", "--output", str(output), "--set", "output.reuse_latest=false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            new = [p for p in output.iterdir() if p.is_dir() and p.name not in runs_before]
            if any(any(d.iterdir()) for d in new):
                break  # the run has started writing shards
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert (output / "LATEST").read_text() == before
    crashed = [p for p in output.iterdir() if p.is_dir() and p.name not in runs_before]
    assert crashed and not any((d / "manifest.json").exists() for d in crashed)
    # The next run reuses the last complete run, not the crashed one, and removes the records
    # the crashed run had parked.
    after = job(corpus, output)
    assert after.previous == str(output / before.strip())
    assert not any((d / "_spill").exists() for d in output.iterdir() if d.is_dir())
