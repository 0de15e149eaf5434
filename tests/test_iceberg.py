"""chunkline.index.iceberg: a run's files and deleted rows committed as Iceberg v2 snapshots over
pyiceberg's manifest writer, read back by DuckDB, pyiceberg and Polars. These tests hold what the
module relies on of pyiceberg 0.12 (its manifest writer given delete content, its catalog's
commit of a snapshot and a branch, its reading of the metadata written): an upgrade that changes
any of it fails here."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkline.index import iceberg
from chunkline.records import to_parquet
from tests.iceberg_engines import assert_engines_read

SCHEMA = pa.schema([pa.field("term_id", pa.int32(), nullable=False), pa.field("df", pa.int64(), nullable=False)])


def write_file(folder: Path, name: str, first: int, count: int) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table([pa.array(range(first, first + count), pa.int32()),
                             pa.array([n * 3 for n in range(first, first + count)], pa.int64())],
                            schema=SCHEMA), path)
    return str(path.resolve())


def live_rows(files: dict[str, tuple[int, int, set[int]]]) -> pa.Table:
    """What the model of the files says is live: every row of each file not deleted."""
    ids = [first + n for first, count, deleted in files.values() for n in range(count) if n not in deleted]
    return pa.table([pa.array(ids, pa.int32()), pa.array([i * 3 for i in ids], pa.int64())], schema=SCHEMA)


def commit(output: Path, run_id: str, files: dict[str, tuple[int, int, set[int]]]) -> int:
    first = next(iter(files))
    table = iceberg._table(iceberg.open_catalog(str(output)), "terms", first)
    return iceberg.commit_table(table, run_id, [iceberg.LiveData(path, sorted(deleted))
                                                for path, (_, _, deleted) in files.items()])


def delete_files(output: Path) -> list[Path]:
    return sorted((output / iceberg.ICEBERG_DIR / "terms" / "data").glob("*-deletes.parquet"))


def test_a_snapshot_with_position_deletes_reads_alike_in_every_engine(tmp_path) -> None:
    output = tmp_path / "out"
    a = write_file(output, "run1/terms-0.parquet", 0, 50)
    b = write_file(output, "run1/terms-1.parquet", 50, 30)
    files = {a: (0, 50, set()), b: (50, 30, set())}
    first = commit(output, "run1", files)
    assert_engines_read(output, {"terms": live_rows(files)})
    # A rerun: rows deleted from one file, a new file beside; the untouched file keeps its entry.
    c = write_file(output, "run2/terms-0.parquet", 80, 5)
    files = {a: (0, 50, {0, 7, 49}), b: (50, 30, set()), c: (80, 5, set())}
    second = commit(output, "run2", files)
    assert_engines_read(output, {"terms": live_rows(files)})
    assert len(delete_files(output)) == 1
    # Unchanged deletions are listed again, not rewritten.
    third = commit(output, "run3", files)
    assert len(delete_files(output)) == 1
    assert len({first, second, third}) == 3
    table = iceberg.catalog(str(output)).load_table((iceberg.NAMESPACE, "terms"))
    assert table.current_snapshot().snapshot_id == third
    assert table.current_snapshot().summary[iceberg.RUN_ID_PROPERTY] == "run3"
    assert iceberg.snapshot_of_run(table, "run1").snapshot_id == first
    (state,) = iceberg.tables(str(output))
    assert (state.rows, state.run_id, state.snapshot_id) == (82, "run3", third)
    # A rollback makes the first snapshot current again: every engine reads it as it was.
    iceberg.switch(str(output), [(table, first)])
    assert_engines_read(output, {"terms": live_rows({a: (0, 50, set()), b: (50, 30, set())})})


def test_the_delete_manifest_is_pyiceberg_s_own_reading(tmp_path) -> None:
    """What the module relies on of pyiceberg: its v2 manifest writer, given the delete content,
    writes a manifest its own reader takes as one of position deletes, each entry naming the
    one data file it covers by its bounds."""
    from pyiceberg.manifest import DataFileContent, ManifestContent

    output = tmp_path / "out"
    a = write_file(output, "run1/terms-0.parquet", 0, 10)
    b = write_file(output, "run1/terms-1.parquet", 10, 10)
    commit(output, "run1", {a: (0, 10, {2, 5}), b: (10, 10, {0})})
    table = iceberg.catalog(str(output)).load_table((iceberg.NAMESPACE, "terms"))
    manifests = table.current_snapshot().manifests(table.io)
    assert [m.content for m in manifests] == [ManifestContent.DATA, ManifestContent.DELETES]
    entries = manifests[1].fetch_manifest_entry(table.io)
    assert {e.data_file.content for e in entries} == {DataFileContent.POSITION_DELETES}
    assert sorted((iceberg._covered_path(e.data_file), e.data_file.record_count) for e in entries) == \
        sorted([(a, 2), (b, 1)])


OPS = st.lists(st.tuples(st.sampled_from(["add", "delete", "drop", "rollback"]), st.integers(0, 10_000)),
               min_size=1, max_size=6)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(OPS)
def test_random_runs_read_as_their_model(tmp_path_factory, ops) -> None:
    """Random runs: files added, rows deleted, files dropped (a compaction rewrote them), and
    rollbacks to an earlier run; after each, DuckDB, pyiceberg and Polars read exactly the live
    rows of the current run's model."""
    output = tmp_path_factory.mktemp("iceberg")
    files: dict[str, tuple[int, int, set[int]]] = {}
    history: list[tuple[int, dict]] = []
    next_id = 0
    for run, (op, n) in enumerate(ops):
        if op == "add" or not files:
            count = 1 + n % 40
            path = write_file(output, f"run{run}/terms-{run}.parquet", next_id, count)
            files[path] = (next_id, count, set())
            next_id += count
        elif op == "delete":
            path = sorted(files)[n % len(files)]
            first, count, deleted = files[path]
            files[path] = (first, count, deleted | {n % count, (n // 7) % count})
        elif op == "drop" and len(files) > 1:
            del files[sorted(files)[n % len(files)]]
        elif op == "rollback" and history:
            snapshot, model = history[n % len(history)]
            iceberg.switch(str(output), [(iceberg.catalog(str(output)).load_table((iceberg.NAMESPACE, "terms")),
                                          snapshot)])
            assert_engines_read(output, {"terms": live_rows(model)})
            files = {path: (f, c, set(d)) for path, (f, c, d) in model.items()}
            continue
        snapshot = commit(output, f"run{run}", files)
        history.append((snapshot, {path: (f, c, set(d)) for path, (f, c, d) in files.items()}))
        assert_engines_read(output, {"terms": live_rows(files)})


def test_an_output_without_tables_is_one_line(tmp_path) -> None:
    with pytest.raises(iceberg.IcebergError, match="no Iceberg tables yet"):
        iceberg.tables(str(tmp_path))
    assert iceberg.supported("gs://bucket/index") and iceberg.supported(str(tmp_path))
    assert not iceberg.supported("s3://bucket/index")


def test_a_copied_output_never_writes_into_the_one_it_was_copied_from(tmp_path) -> None:
    """The catalog names metadata by absolute path: a copy's first commit makes its own table
    (the copied entry dropped), and the original's metadata is left as it was."""
    import shutil

    original = tmp_path / "out"
    a = write_file(original, "run1/terms-0.parquet", 0, 10)
    commit(original, "run1", {a: (0, 10, set())})
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (original / iceberg.ICEBERG_DIR).rglob("*"))
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    assert iceberg.tables(str(copy)) == []  # the copied entry is the original's table, not the copy's
    b = str((copy / "run1" / "terms-0.parquet").resolve())
    commit(copy, "run2", {b: (0, 10, {3})})
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (original / iceberg.ICEBERG_DIR).rglob("*")) == before
    assert_engines_read(copy, {"terms": live_rows({b: (0, 10, {3})})})
    assert_engines_read(original, {"terms": live_rows({a: (0, 10, set())})})


def test_expiring_the_runs_not_kept_removes_every_file_only_they_reached(tmp_path) -> None:
    output = tmp_path / "out"
    a = write_file(output, "run1/terms-0.parquet", 0, 20)
    commit(output, "run1", {a: (0, 20, set())})
    commit(output, "run2", {a: (0, 20, {1, 2})})
    b = write_file(output, "run3/terms-0.parquet", 20, 5)
    files = {a: (0, 20, {1, 2, 3}), b: (20, 5, set())}
    commit(output, "run3", files)
    assert len(delete_files(output)) == 2
    removed = iceberg.expire(str(output), {"run3"})
    table = iceberg.catalog(str(output)).load_table((iceberg.NAMESPACE, "terms"))
    assert [s.summary[iceberg.RUN_ID_PROPERTY] for s in table.metadata.snapshots] == ["run3"]
    assert removed > 0 and len(delete_files(output)) == 1  # run2's delete file went with it
    assert_engines_read(output, {"terms": live_rows(files)})
    # Everything left under the table's folder is reached from its current metadata.
    left = {str(p) for p in (output / iceberg.ICEBERG_DIR / "terms").rglob("*") if p.is_file()}
    assert iceberg._remove_orphans(table, output / iceberg.ICEBERG_DIR / "terms") == 0
    assert left == {str(p) for p in (output / iceberg.ICEBERG_DIR / "terms").rglob("*") if p.is_file()}


def test_the_tables_command_names_each_table_s_metadata_and_how_to_read_it(tmp_path) -> None:
    import io
    import json

    from chunkline.pipeline.cli import main

    output = tmp_path / "out"
    a = write_file(output, "run1/terms-0.parquet", 0, 12)
    snapshot = commit(output, "run1", {a: (0, 12, {4})})
    out, err = io.StringIO(), io.StringIO()
    assert main(["tables", str(output), "--json"], out, err) == 0, err.getvalue()
    (described,) = json.loads(out.getvalue())["tables"]
    assert (described["identifier"], described["rows"], described["run_id"], described["snapshot_id"]) == \
        ("chunkline.terms", 11, "run1", snapshot)
    # The DuckDB line, run as printed (its extension loaded from the PyPI package), reads the rows.
    from tests.iceberg_engines import duckdb_connection

    query = described["read"]["duckdb"].split("; ", 1)[1]
    assert len(duckdb_connection().execute(query).fetchall()) == 11
    out, err = io.StringIO(), io.StringIO()
    assert main(["tables", str(tmp_path / "nothing")], out, err) == 2
    assert len(err.getvalue().splitlines()) == 1 and "no Iceberg tables yet" in err.getvalue()


def test_metadata_files_stay_bounded_without_gc(tmp_path) -> None:
    """Every commit writes a metadata file holding every snapshot: past the last few, the older
    ones go, so nightly runs never gc'd do not keep a growing copy a night."""
    output = tmp_path / "out"
    a = write_file(output, "run0/terms-0.parquet", 0, 40)
    place = iceberg.open_catalog(str(output))
    found = place.found
    table = iceberg._table(place, "terms", a)
    for night in range(8):
        snapshot = iceberg.commit_table(table, f"run{night}", [iceberg.LiveData(a, list(range(night)))],
                                        make_current=False)
        table = found.load_table((iceberg.NAMESPACE, "terms"))
        iceberg.switch(str(output), [(table, snapshot)])
        table = found.load_table((iceberg.NAMESPACE, "terms"))
    files = list((output / iceberg.ICEBERG_DIR / "terms" / "metadata").glob("*.metadata.json"))
    assert len(files) <= iceberg.PREVIOUS_METADATA_FILES + 1
    assert_engines_read(output, {"terms": live_rows({a: (0, 40, set(range(7)))})})


def test_a_column_whose_type_cannot_evolve_starts_the_table_anew(tmp_path) -> None:
    """Vectors stored as floats, then as int8 (embed.vector_dtype changed): Iceberg cannot
    evolve float into int, so the run's snapshot starts a new table, read alike by every engine."""
    output = tmp_path / "out"
    floats = tmp_path / "out" / "run1" / "chunks-0.parquet"
    floats.parent.mkdir(parents=True)
    pq.write_table(to_parquet(pa.table({"doc_id": ["a", "b"], "chunk_index": pa.array([0, 0], pa.int32()),
                                        "embedding": pa.array([[0.5, 0.5], [1.0, 0.0]],
                                                              pa.list_(pa.float32(), 2))})), floats)
    manifest_rows = {"run1": str(floats.resolve())}
    place = iceberg.open_catalog(str(output))
    found = place.found
    table = iceberg._table(place, "chunks", manifest_rows["run1"])
    iceberg.switch(str(output), [(table, iceberg.commit_table(table, "run1", [iceberg.LiveData(manifest_rows["run1"], [])],
                                                            make_current=False))])
    ints = tmp_path / "out" / "run2" / "chunks-0.parquet"
    ints.parent.mkdir(parents=True)
    written = pa.table({"doc_id": ["a", "b"], "chunk_index": pa.array([0, 0], pa.int32()),
                        "embedding": pa.array([[64, 64], [127, 0]], pa.list_(pa.int8(), 2)),
                        "embedding_scale": pa.array([0.01, 0.01], pa.float32())})
    pq.write_table(to_parquet(written), ints)
    table = iceberg._evolved(place, found.load_table((iceberg.NAMESPACE, "chunks")), str(ints.resolve()))
    snapshot = iceberg.commit_table(table, "run2", [iceberg.LiveData(str(ints.resolve()), [])], make_current=False)
    iceberg.switch(str(output), [(found.load_table((iceberg.NAMESPACE, "chunks")), snapshot)])
    assert_engines_read(output, {"chunks": written})
