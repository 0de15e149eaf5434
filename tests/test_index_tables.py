"""``chunkline.index.tables``: a run's live files from either manifest format, and their live
rows read back from real Parquet files (deleted positions dropped, filters seen after them,
only the row groups holding a wanted row read), checked against the rows computed plainly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.index import storage
from chunkline.index.manifest import ManifestError, load_manifest, table_files
from chunkline.index import tables
from chunkline.index.tables import (FORMAT, Deletions, LiveFile, TableFileError, deletion_file_bytes, file_digest,
                                    listed_deletions, listed_paths, live_files, live_rows, read_file, read_table,
                                    shard_deletion_file)


def write(path: Path, doc_ids: list[str], row_group_size: int = 3) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"doc_id": pa.array(doc_ids, pa.string()), "n": pa.array(range(len(doc_ids)), pa.int64())})
    pq.write_table(table, path, row_group_size=max(row_group_size, 1))


def manifest(run_id: str, **listing) -> dict:
    return {"run_id": run_id, "counts": {"documents": 0, "kept": 0, "chunks": 0}, "config": {},
            **listing}


def publish(run_dir: Path, content: dict) -> str:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_text(json.dumps(content))
    return str(run_dir)


def test_a_format_1_manifest_lists_its_own_folders_files_every_row_live(tmp_path) -> None:
    write(tmp_path / "r1" / "chunks-00000-of-00001.parquet", ["a", "b"])
    run_dir = publish(tmp_path / "r1", manifest("r1", files={
        "chunks": ["chunks-00000-of-00001.parquet"], "documents": [], "rejected": []}))
    loaded = load_manifest(run_dir)
    [file] = live_files(run_dir, loaded, "chunks")
    assert file == LiveFile(str(tmp_path / "r1" / "chunks-00000-of-00001.parquet"),
                            "chunks-00000-of-00001.parquet", "r1")
    assert live_rows(run_dir, loaded, "chunks") is None  # not stated: the footers say
    assert read_table(run_dir, loaded, "chunks", ["doc_id"]).column("doc_id").to_pylist() == ["a", "b"]
    assert read_table(run_dir, loaded, "documents") is None


def test_a_format_2_manifest_reads_an_earlier_runs_file_without_its_deleted_rows(tmp_path) -> None:
    write(tmp_path / "r1" / "chunks-00000-of-00001.parquet", ["a", "b", "c", "d", "e"], row_group_size=2)
    write(tmp_path / "r2" / "chunks-00000-of-00001.parquet", ["b"])
    run_dir = publish(tmp_path / "r2", manifest("r2", format=2, tables={
        "chunks": [{"path": "r1/chunks-00000-of-00001.parquet", "rows": 5, "deleted": [1, 4]},
                   {"path": "r2/chunks-00000-of-00001.parquet", "rows": 1}],
        "documents": [], "rejected": []}))
    loaded = load_manifest(run_dir)
    assert [f.folder for f in live_files(run_dir, loaded, "chunks")] == ["r1", "r2"]
    assert table_files(run_dir, loaded, "chunks")[0] == str(tmp_path / "r1" / "chunks-00000-of-00001.parquet")
    assert live_rows(run_dir, loaded, "chunks") == 4
    table = read_table(run_dir, loaded, "chunks")
    assert table.column("doc_id").to_pylist() == ["a", "c", "d", "b"]
    assert table.column("n").to_pylist() == [0, 2, 3, 0]
    # A filter sees the live rows only: the deleted "b" of r1 is not found again.
    found = read_table(run_dir, loaded, "chunks", ["n"], filters=[("doc_id", "in", ["b", "e"])])
    assert found.column_names == ["n"] and found.column("n").to_pylist() == [0]


@pytest.mark.parametrize("entry, problem", [
    ({"path": "chunks.parquet", "rows": 1}, "path is not <run folder>/<file name>"),
    ({"path": "../r1/chunks.parquet", "rows": 1}, "path is not <run folder>/<file name>"),
    ({"path": "r1/chunks.parquet"}, "rows is missing"),
    ({"path": "r1/chunks.parquet", "rows": 2, "deleted": [1, 1]}, "deleted is not an ascending list"),
    ({"path": "r1/chunks.parquet", "rows": 2, "deleted": [2]}, "deleted is not an ascending list"),
    ({"path": "r1/chunks.parquet", "rows": 2, "bytes": -1}, "bytes is not"),
])
def test_a_malformed_format_2_entry_is_a_manifest_error_naming_it(tmp_path, entry, problem) -> None:
    run_dir = publish(tmp_path / "r2", manifest("r2", format=2, tables={
        "chunks": [entry], "documents": [], "rejected": []}))
    with pytest.raises(ManifestError, match=rf"tables\.chunks\[0\] {problem}"):
        load_manifest(run_dir)


def test_a_manifest_of_a_newer_format_is_refused_in_one_line(tmp_path) -> None:
    run_dir = publish(tmp_path / "r3", manifest("r3", format=FORMAT + 1, tables={}))
    with pytest.raises(ManifestError, match=f"format {FORMAT + 1} was written by a newer chunkline"):
        load_manifest(run_dir)


def test_a_file_that_no_longer_holds_the_stated_rows_is_an_error_naming_it(tmp_path) -> None:
    path = tmp_path / "r1" / "chunks-00000-of-00001.parquet"
    write(path, ["a", "b"])
    file = LiveFile(str(path), "r1/chunks-00000-of-00001.parquet", "r1", rows=3,
                    deletions=Deletions.listed((0,)))
    with pytest.raises(TableFileError, match=f"^{path}: holds 2 rows, the run's manifest says 3"):
        read_file(file)
    with pytest.raises(TableFileError, match="no such file, though the run's manifest lists it"):
        read_file(LiveFile(str(tmp_path / "gone.parquet"), "r1/gone.parquet", "r1"))


def test_the_parent_of_a_run_folder_is_its_output() -> None:
    assert storage.parent("out/r1") == "out" and storage.parent("out/r1/") == "out"
    assert storage.parent("r1") == "."
    assert storage.parent("gs://bucket/out/r1/") == "gs://bucket/out"


@given(rows=st.lists(st.sampled_from("abcdefg"), min_size=0, max_size=40),
       data=st.data(), group=st.integers(1, 7))
def test_live_rows_are_the_file_less_its_deleted_positions_then_filtered(tmp_path_factory, rows, data,
                                                                          group) -> None:
    """Whatever the deletions, row groups and filter: the rows read are those of the file at the
    positions not deleted, in file order, that meet the filter."""
    path = tmp_path_factory.mktemp("live") / "t.parquet"
    write(path, rows, row_group_size=group)
    deleted = sorted(data.draw(st.sets(st.integers(0, len(rows) - 1), max_size=len(rows))) if rows else [])
    wanted = data.draw(st.none() | st.lists(st.sampled_from("abcdefgz"), max_size=3))
    file = LiveFile(str(path), "r/t.parquet", "r", rows=len(rows), deletions=Deletions.listed(deleted))
    filters = None if wanted is None else [("doc_id", "in", wanted)]
    got = read_file(file, ["n"], optional=["doc_id", "absent"], filters=filters)
    expected = [(doc, n) for n, doc in enumerate(rows)
                if n not in deleted and (wanted is None or doc in wanted)]
    assert got.column_names == ["n", "doc_id"]
    assert list(zip(got.column("doc_id").to_pylist(), got.column("n").to_pylist())) == expected


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "é", "z", "ab"]), st.integers(0, 3),
                          st.booleans(), st.booleans()), max_size=20, unique_by=lambda r: r[:2]))
def test_the_files_of_one_shard_read_merged_in_the_tables_order(tmp_path_factory, rows) -> None:
    """A shard kept in an earlier file, some rows deleted, and this run's new rows in a file of
    its own reads as the shard written whole, sorted by (doc_id, chunk_index); the sort columns
    are read for the merge and dropped where not asked for."""
    root = tmp_path_factory.mktemp("shards")
    earlier = sorted((d, i) for d, i, new, _ in rows if not new)
    later = sorted((d, i) for d, i, new, _ in rows if new)
    dead = {(d, i) for d, i, new, gone in rows if gone and not new}
    for folder, part in (("r1", earlier), ("r2", later)):
        (root / folder).mkdir()
        pq.write_table(pa.table({"doc_id": pa.array([d for d, _ in part], pa.string()),
                                 "chunk_index": pa.array([i for _, i in part], pa.int32()),
                                 "n": pa.array([f"{d}{i}" for d, i in part], pa.string())}),
                       root / folder / "chunks-00000-of-00001.parquet")
    deleted = [at for at, row in enumerate(earlier) if row in dead]
    run_dir = publish(root / "r2", manifest("r2", format=2, tables={
        "chunks": [{"path": "r1/chunks-00000-of-00001.parquet", "rows": len(earlier),
                    "deleted": deleted, "shard": 0},
                   {"path": "r2/chunks-00000-of-00001.parquet", "rows": len(later), "shard": 0}],
        "documents": [], "rejected": []}))
    loaded = load_manifest(run_dir)
    # Python's str order (code points) is the writer's; pyarrow's is UTF-8 bytes: the same.
    whole = sorted(row for row in earlier + later if row not in dead)
    assert read_table(run_dir, loaded, "chunks", ["n"]).column_names == ["n"]
    assert read_table(run_dir, loaded, "chunks", ["n"]).column("n").to_pylist() == [f"{d}{i}" for d, i in whole]
    both = read_table(run_dir, loaded, "chunks", [], optional=["doc_id", "chunk_index"])
    assert list(zip(*both.to_pydict().values())) == whole


# --- deletion files (format 4: per shard, as the shard writers write them; format 3: per table) ---

NAMES = ["r1/chunks-00000-of-00002.parquet", "r1/chunks-00001-of-00002.parquet", "r2/chunks-00001-of-00002.parquet"]


def table_deletion_files(run_folder: str, inline: dict, write) -> tuple[dict, dict]:
    """``inline`` (format 2) as a format-3 manifest listed them (what chunkline wrote before per-shard
    deletion files): a table deleting more than ``INLINE_DELETES`` rows in one deletion file,
    ``<run>/deletes/<table>.parquet``, its entries counting."""
    listed, deletes = {}, {}
    for table, entries in inline.items():
        total = sum(len(entry.get("deleted") or ()) for entry in entries)
        if total <= tables.INLINE_DELETES:
            listed[table] = entries
            continue
        data = deletion_file_bytes(entries)
        path = f"{run_folder}/deletes/{table}.parquet"
        write(path, data)
        deletes[table] = {"path": path, "rows": total, "bytes": len(data), "digest": file_digest(data)}
        listed[table] = [{**{k: v for k, v in entry.items() if k != "deleted"},
                          "deleted_rows": len(entry.get("deleted") or ())} for entry in entries]
    return listed, deletes


def deletion_run(root: Path, deleted: dict[str, list[int]], rows: int = 50) -> tuple[dict, dict, dict]:
    """Runs r1 (two files) and r2 (one of its own): the tables r2 lists with ``deleted``
    positions inline (format 2), as a format-3 manifest listed them, and as the job lists them
    now: each shard's deletion file written by :func:`shard_deletion_file` (its shard writer),
    the manifest made by :func:`listed_deletions` (format 4 past ``INLINE_DELETES``)."""
    for name in NAMES:  # a chunk_index too: a shard's files are read merged in the table's order
        ids = [f"{name[-20:-8]}-{n:03d}" for n in range(rows)]
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"doc_id": ids, "chunk_index": [0] * rows, "n": range(rows)}),
                       root / name, row_group_size=16)
    inline = {"chunks": [{"path": name, "rows": rows, "deleted": deleted.get(name, []),
                          "shard": int(name[-22:-17])} for name in NAMES],
              "documents": [], "rejected": []}

    def write_file(path: str, data: bytes) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)

    old_tables, old_deletes = table_deletion_files("r2", inline, write_file)
    shards: dict[str, list] = {table: [] for table in inline}
    files: dict[str, list] = {}
    for table, entries in inline.items():
        for shard in sorted({entry["shard"] for entry in entries}):
            listed, described = shard_deletion_file("r2", table, shard,
                                                    [e for e in entries if e["shard"] == shard], write_file)
            shards[table].extend(listed)
            if described is not None:
                files.setdefault(table, []).append(described)
    new_tables, new_deletes, _ = listed_deletions(str(root), shards, files)
    return (inline, {"tables": old_tables, **({"deletes": old_deletes} if old_deletes else {})},
            {"tables": new_tables, **({"deletes": new_deletes} if new_deletes else {})})


@settings(max_examples=25)
@given(st.lists(st.sets(st.integers(0, 49), max_size=50), min_size=3, max_size=3), st.integers(0, 60))
def test_a_deletion_file_reads_as_the_same_positions_inline(tmp_path_factory, chosen, threshold) -> None:
    """Whatever the deletions and the inline bound: the run reads the same live rows, counts and
    deleted positions with them inline (format 2) as with its table's deletion file (format 3)
    and its shards' (format 4), both past the bound: the entries count them, the files list them."""
    from unittest import mock

    root = tmp_path_factory.mktemp("deletes")
    deleted = {name: sorted(s) for name, s in zip(NAMES, chosen)}
    with mock.patch("chunkline.index.tables.INLINE_DELETES", threshold):
        inline, old, new = deletion_run(root, deleted)
    total = sum(map(len, chosen))
    assert ("deletes" in old) == ("deletes" in new) == (total > threshold)
    runs = [load_manifest(publish(root / "a", manifest("a", format=2, tables=inline))),
            load_manifest(publish(root / "b", manifest("b", format=3 if "deletes" in old else 2, **old))),
            load_manifest(publish(root / "c", manifest("c", format=4 if "deletes" in new else 2, **new)))]
    dirs = [str(root / name) for name in "abc"]
    for run_dir, loaded in zip(dirs, runs):
        assert [f.deleted for f in live_files(run_dir, loaded, "chunks")] == [tuple(deleted[n]) for n in NAMES]
        assert live_rows(run_dir, loaded, "chunks") == 150 - total
        assert read_table(run_dir, loaded, "chunks").equals(read_table(dirs[0], runs[0], "chunks"))
    if "deletes" in new:
        assert all("deleted" not in entry for entry in new["tables"]["chunks"])
        assert listed_paths(dirs[1], runs[1])[-1] == "r2/deletes/chunks.parquet"
        shards = [shard for shard in (0, 1) if any(deleted[n] for n in NAMES if int(n[-22:-17]) == shard)]
        assert listed_paths(dirs[2], runs[2])[-len(shards):] == [f"r2/deletes/chunks-{s:05d}.parquet" for s in shards]
        assert [f.shard for f in runs[2].listing.deletes["chunks"]] == shards


def test_a_nights_deletions_cost_the_manifest_nothing_and_the_file_a_byte_or_two_each(tmp_path) -> None:
    """20,000 deleted positions of 200,000 rows: the manifest states a count per file, the
    shard's deletion file holds them in a few bytes each (inline they were ~6.5 bytes of JSON each)."""
    deleted = list(range(0, 200_000, 10))
    entries = [{"path": "r1/chunks-00000-of-00001.parquet", "rows": 200_000, "deleted": deleted, "shard": 0}]
    written: dict[str, bytes] = {}
    listed, described = shard_deletion_file("r2", "chunks", 0, entries, written.__setitem__)
    assert listed == [{"path": "r1/chunks-00000-of-00001.parquet", "rows": 200_000, "shard": 0,
                       "deleted_rows": 20_000}]
    data = written["r2/deletes/chunks-00000.parquet"]
    assert described == {"path": "r2/deletes/chunks-00000.parquet", "rows": 20_000, "bytes": len(data),
                         "digest": file_digest(data), "shard": 0}
    assert len(data) < 2 * 20_000 < len(json.dumps(deleted)) / 3
    assert pq.read_table(pa.BufferReader(data)).column("pos").to_pylist() == deleted


def filed_run(root: Path, version: int) -> str:
    """r2 deleting rows of each of its three files (shards 0, 1, 1), every deletion in a
    deletion file: its shards' (format 4) or its table's (format 3)."""
    from unittest import mock

    with mock.patch("chunkline.index.tables.INLINE_DELETES", 0):
        _, old, new = deletion_run(root, {NAMES[0]: [0, 1, 2, 3], NAMES[1]: [5], NAMES[2]: [7, 9]})
    return publish(root / "r2", manifest("r2", format=version, **(new if version == 4 else old)))


def test_a_reader_of_one_shard_opens_only_that_shards_deletion_file(tmp_path, monkeypatch) -> None:
    """Listing a run's files opens no deletion file; reading a file opens its shard's, once for
    the shard's files together; a file without deleted rows opens none."""
    run_dir = filed_run(tmp_path, 4)
    loaded = load_manifest(run_dir)
    opened: list[str] = []
    read = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda path: opened.append(path) or read(path))
    monkeypatch.setattr(tables, "_READ_DELETES", type(tables._READ_DELETES)())
    first, second, third = live_files(run_dir, loaded, "chunks")
    assert opened == [] and [f.live_rows for f in (first, second, third)] == [46, 49, 48]
    assert read_file(first, ["n"]).column("n").to_pylist() == list(range(4, 50))
    assert opened == [str(tmp_path / "r2" / "deletes" / "chunks-00000.parquet")]
    read_file(second, ["n"]), read_file(third, ["n"])
    assert opened[1:] == [str(tmp_path / "r2" / "deletes" / "chunks-00001.parquet")]
    # A file of a shard that deletes nothing reads without a deletion file.
    assert read_file(dataclasses.replace(first, deletions=Deletions()), ["n"]).num_rows == 50
    assert len(opened) == 2


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("damage, problem", [
    ("missing", "no such deletion file, though the run's manifest lists it"),
    ("replaced", "not the deletion file the run's manifest names"),
    ("truncated", "not the deletion file the run's manifest names"),
    ("miscounted", "its deletions of r1/chunks-00000-of-00002.parquet are not the 3 ascending"),
])
def test_a_missing_or_damaged_deletion_file_is_a_one_line_error_naming_it(tmp_path, damage, problem,
                                                                          version) -> None:
    run_dir = filed_run(tmp_path, version)
    path = tmp_path / "r2" / "deletes" / ("chunks-00000.parquet" if version == 4 else "chunks.parquet")
    if damage == "missing":
        path.unlink()
    elif damage == "replaced":
        path.write_bytes(path.read_bytes()[:-1] + b"!")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    loaded = load_manifest(run_dir)
    if damage == "miscounted":
        # The file deletes positions 0-3 of the first file; the manifest says 3 of them, and one
        # more of another file the same deletion file holds (format 4: shard 1's is another).
        first, second, third = loaded.listing.tables["chunks"]
        other = second if version == 3 else third
        changed = {first.path: dataclasses.replace(first, deleted_rows=3),
                   other.path: dataclasses.replace(other, deleted_rows=other.deleted_rows + 1)}
        entries = tuple(changed.get(e.path, e) for e in loaded.listing.tables["chunks"])
        loaded = dataclasses.replace(loaded, listing=dataclasses.replace(
            loaded.listing, tables={**loaded.listing.tables, "chunks": entries}))
    tables._READ_DELETES.clear()
    files = live_files(run_dir, loaded, "chunks")  # lists; reads no deletion file
    with pytest.raises(TableFileError, match=problem) as raised:
        read_table(run_dir, loaded, "chunks")
    assert str(raised.value).startswith(str(path)) and "\n" not in str(raised.value)
    if version == 4 and damage != "miscounted":
        assert read_file(files[1], ["n"]).num_rows == 49  # another shard's file still reads


@pytest.mark.parametrize("version, change, problem", [
    (3, {"format": 2}, "deletes \\(deletion files\\) needs format 3"),
    (3, {"deletes": {"chunks": {"path": "r2/deletes/chunks.parquet", "rows": 4}}}, "deletes.chunks rows or bytes"),
    (3, {"deletes": {"terms": {"path": "r2/d.parquet", "rows": 0, "bytes": 1, "digest": "x"}}},
     "deletes.terms names a table the manifest does not list"),
    (4, {"deletes": {"chunks": {"path": "r2/d.parquet", "rows": 4, "bytes": 1, "digest": "x"}}},
     "deletes is not an object of deletion files, a list of them per table"),
    (4, {"deletes": {"chunks": [{"path": "r2/d.parquet", "rows": 4, "bytes": 1, "digest": "x"}]}},
     "deletes.chunks\\[0\\] shard is missing"),
    (4, {"deletes": {"chunks": [{"path": "r2/d.parquet", "rows": 4, "bytes": 1, "digest": "x", "shard": 1},
                                {"path": "r2/e.parquet", "rows": 3, "bytes": 1, "digest": "x", "shard": 0}]}},
     "deletes.chunks\\[1\\] is not in ascending shard order"),
    (4, {"deletes": {"chunks": [{"path": "r2/d.parquet", "rows": 7, "bytes": 1, "digest": "x", "shard": 0}]}},
     "deletes.chunks \\(shard 0\\) rows is not the sum of its files' deleted_rows"),
])
def test_a_malformed_deletion_file_reference_is_a_manifest_error(tmp_path, version, change, problem) -> None:
    from unittest import mock

    with mock.patch("chunkline.index.tables.INLINE_DELETES", 0):
        _, old, new = deletion_run(tmp_path, {NAMES[0]: [0, 1, 2, 3], NAMES[2]: [1, 2, 3]})
    run_dir = publish(tmp_path / "r2", manifest("r2", **{"format": version, **(new if version == 4 else old),
                                                         **change}))
    with pytest.raises(ManifestError, match=problem):
        load_manifest(run_dir)
