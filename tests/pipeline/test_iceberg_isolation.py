"""The Iceberg tables under concurrent readers and killed commits: a reader polling with DuckDB
while nightly runs commit sees, each time, exactly one published run's rows (never a mix of
two, never a missing row, never an error); a run killed in the middle of its commit leaves the
previous snapshot current, and every engine reads it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chunkline.index import iceberg
from chunkline.index.manifest import load_manifest
from chunkline.index.tables import read_table
from tests.iceberg_engines import assert_engines_read, duckdb_connection
from tests.pipeline.test_merge_on_read import tiny_document

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def job(corpus: Path, output: Path):
    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run

    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null", "output.chunk_shards=2",
        "output.max_shrink=1"]))


def chunk_ids(run_dir: str) -> frozenset[str]:
    return frozenset(read_table(run_dir, load_manifest(run_dir), "chunks", ["chunk_id"])
                     .column("chunk_id").to_pylist())


def test_a_reader_polling_while_runs_commit_sees_one_whole_run_each_time(tmp_path) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    corpus.mkdir()
    for n in range(12):
        (corpus / f"doc{n:03d}.md").write_text(tiny_document(n), encoding="utf-8")
    job(corpus, output)
    seen: list[tuple[str, frozenset[str]]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def poll() -> None:
        connection = duckdb_connection()
        while not done.is_set():
            try:
                (state,) = [s for s in iceberg.tables(str(output)) if s.name == "chunks"]
                rows = connection.execute(f"SELECT chunk_id FROM iceberg_scan('{state.metadata}')").fetchall()
                seen.append((str(state.run_id), frozenset(r[0] for r in rows)))
            except BaseException as exc:  # noqa: BLE001 - any failure of a read is what this test looks for
                errors.append(exc)
            time.sleep(0.05)

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for night in range(10):  # edits, deletes, re-adds and adds: each run keeps rows in earlier files
            (corpus / f"doc{night:03d}.md").write_text(tiny_document(50 + night), encoding="utf-8")
            (corpus / f"doc{11 - night:03d}.md").unlink(missing_ok=True)
            (corpus / f"new{night:03d}.md").write_text(tiny_document(80 + night), encoding="utf-8")
            assert job(corpus, output).published
    finally:
        done.set()
        reader.join()
    assert not errors, errors[:3]
    runs = {name: chunk_ids(str(output / name)) for name in {run_id for run_id, _ in seen}}
    assert len(runs) >= 3, "the reader saw several runs"
    for run_id, ids in seen:
        assert ids == runs[run_id], run_id  # exactly that run's rows: nothing missing, nothing mixed


KILL_IN_COMMIT = """
import os, signal, sys
from chunkline.index import iceberg
original = iceberg.commit_table
def killed(table, run_id, files, **options):
    if table.name()[-1] == "documents":  # the chunks table staged, this one not: killed here
        os.kill(os.getpid(), signal.SIGKILL)
    return original(table, run_id, files, **options)
iceberg.commit_table = killed
from chunkline.pipeline.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_killed_during_its_commit_leaves_the_previous_snapshot_current(tmp_path) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    corpus.mkdir()
    for n in range(8):
        (corpus / f"doc{n:03d}.md").write_text(tiny_document(n), encoding="utf-8")
    first = job(corpus, output)
    expected = {name: read_table(first.run_dir, load_manifest(first.run_dir), name)
                for name in ("chunks", "documents", "rejected", "terms")}
    (corpus / "doc000.md").write_text(tiny_document(70), encoding="utf-8")
    killed = subprocess.run(
        [sys.executable, "-c", KILL_IN_COMMIT, "run", "--config", str(ROOT / "configs" / "local.yaml"),
         "--input", f"{corpus}/**", "--output", str(output), "--set", "embed=null",
         "--set", "output.chunk_shards=2", "--set", "output.max_shrink=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (output / "LATEST").read_text().strip() == Path(first.run_dir).name
    # The chunks table's snapshot was staged before the kill, the documents table's not: no
    # table was switched, every one is still the first run's, whole.
    assert {state.run_id for state in iceberg.tables(str(output))} == {Path(first.run_dir).name}
    assert_engines_read(output, expected)
    again = job(corpus, output)
    assert again.published
    assert {state.run_id for state in iceberg.tables(str(output))} == {Path(again.run_dir).name}
    assert_engines_read(output, {name: read_table(again.run_dir, load_manifest(again.run_dir), name)
                                 for name in ("chunks", "documents", "rejected", "terms")})


def test_an_output_of_the_previous_layout_is_converted_by_the_next_run(tmp_path, monkeypatch) -> None:
    """An output written before the Iceberg tables (no ``_iceberg``) and with its vectors stored
    as Arrow's fixed-size list: the first run after the upgrade registers its files, rewrites
    the chunk files of the old layout (their vectors reused, not embedded again) and every
    engine, Polars' native reader included, reads exactly chunkline's rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run
    from chunkline.index.tables import live_files
    from tests.helpers import run_table

    corpus, output = tmp_path / "corpus", tmp_path / "index"
    corpus.mkdir()
    for n in range(8):
        (corpus / f"doc{n:03d}.md").write_text(tiny_document(n), encoding="utf-8")
    config = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "output.chunk_shards=2"])
    with monkeypatch.context() as old:  # the writer of the previous release: vectors as written
        old.setattr("chunkline.transforms.write.parquet_schema", lambda schema: schema)
        old.setattr("chunkline.transforms.write.to_parquet", lambda table: table)
        first = run(config)
    import shutil

    shutil.rmtree(output / iceberg.ICEBERG_DIR)
    (chunk_file,) = [f for f in live_files(first.run_dir, load_manifest(first.run_dir), "chunks") if f.rows][:1]
    assert pa.types.is_fixed_size_list(pq.read_schema(chunk_file.path).field("embedding").type)

    (corpus / "doc000.md").write_text(tiny_document(0) + "\nOne more line.\n", encoding="utf-8")
    second = run(config)
    manifest = load_manifest(second.run_dir)
    assert manifest.counts["embedded"] < manifest.counts["chunks"] / 2, manifest.counts
    for file in live_files(second.run_dir, manifest, "chunks"):
        assert pa.types.is_list(pq.read_schema(file.path).field("embedding").type), file.path
    assert_engines_read(output, {name: run_table(second.run_dir, name)
                                 for name in ("chunks", "documents", "rejected")})
