"""The state table's library half (chunkline/state.py): what a document carries packed, and a
reader finding the previous run's row of a document by its place."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkline.index.layout import shard_of
from chunkline.memo import BLOCK
from chunkline.state import (
    PreviousState,
    StateRow,
    pack_bands,
    pack_counted,
    pack_place,
    state_row,
    state_schema,
    state_shard_key,
    state_source,
    state_sort_key,
    state_to_row,
    unpack,
)

HASH = "ab" * 32


@given(st.lists(st.integers(0, 2**64 - 1), max_size=8), st.lists(st.integers(0, 2**64 - 1), max_size=30))
def test_what_a_document_carries_unpacks_as_packed(keys, bands) -> None:
    packed = pack_counted(HASH, np.array(keys, dtype="<u8").tobytes()) + pack_bands(np.array(bands, dtype=np.uint64))
    parts = unpack(packed)
    assert parts.text_hash == bytes.fromhex(HASH)
    assert parts.line_keys.tolist() == keys and parts.bands.tolist() == bands
    assert unpack(b"") == (None,) * 5
    placed = unpack(pack_place(2**40 + 3, 517) + packed)
    assert (placed.offset, placed.length, placed.bands.tolist()) == (2**40 + 3, 517, bands)


def test_a_damaged_pack_is_refused_not_misread() -> None:
    try:
        unpack(b"Z" + pack_bands(np.array([1], dtype=np.uint64)))
    except ValueError as exc:
        assert "damaged at byte 0" in str(exc)
    else:
        raise AssertionError("a damaged pack was read")


def rows_for(uri: str, positions) -> list[StateRow]:
    return [state_row(f"{uri}#{p}", uri, p, f"d{p}", f"f{p}", b"", "h", "kept", None, None) for p in positions]


def write_shards(folder, rows: list[StateRow], shards: int, group_rows: int = 3
                 ) -> list[tuple[str, tuple[int, ...]]]:
    """The rows as a writer lays them out: by their unit's shard, sorted by place, in row groups
    of ``group_rows`` rows (so that a lookup has groups to skip)."""
    schema = state_schema()
    files = []
    for shard in range(shards):
        mine = sorted((r for r in rows if shard_of(state_shard_key(r), shards) == shard), key=state_sort_key)
        path = folder / f"state-{shard:05d}-of-{shards:05d}.parquet"
        pq.write_table(pa.Table.from_pylist([state_to_row(r, schema) for r in mine], schema), path,
                       row_group_size=group_rows)
        files.append((str(path), ()))
    return files


def test_a_reader_finds_each_documents_row_by_place_and_skips_deleted_ones(tmp_path) -> None:
    rows = rows_for("/c/dump.jsonl", [1, 998, 1500, BLOCK + 3, 2 * BLOCK + 1]) + rows_for("/c/a.md", range(1)) \
        + rows_for("/c/b.md", range(1))
    files = write_shards(tmp_path, rows, 3)
    source = state_source(files)
    assert source is not None and source.shards == 3
    opened = []

    def open_file(path):
        opened.append(path)
        return open(path, "rb")

    state = PreviousState(source, open_file, held=16)
    for row in rows:
        assert state.row_of(row.uri, row.position) == (row.doc_id, row.input_digest)
    assert state.row_of("/c/dump.jsonl", 2) is None and state.row_of("/c/other.md", 0) is None
    # Each row group is decoded at most once while held, and asking again decodes nothing.
    groups = sum(pq.ParquetFile(path).metadata.num_row_groups for path, _ in files)
    assert 0 < state.loads <= groups
    loads = state.loads
    for row in rows:
        assert state.row_of(row.uri, row.position) == (row.doc_id, row.input_digest)
    assert state.loads == loads
    # A deleted row is not the previous run's any more.
    shard = shard_of(state_shard_key(rows[0]), 3)
    table = pq.read_table(files[shard][0])
    at = table.column("doc_id").to_pylist().index(rows[0].doc_id)
    deleted = [(path, (at,) if index == shard else ()) for index, (path, _) in enumerate(files)]
    again = PreviousState(state_source(deleted), open_file)
    assert again.row_of(rows[0].uri, rows[0].position) is None
    assert again.row_of(rows[1].uri, rows[1].position) == (rows[1].doc_id, rows[1].input_digest)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["/c/a.md", "/c/dump.jsonl", "/c/m.jsonl", "/c/z.csv"]),
                       st.sets(st.integers(0, 3 * BLOCK), min_size=1, max_size=60), min_size=1),
       st.integers(1, 7), st.integers(1, 3))
def test_every_place_is_found_among_many_row_groups_of_one_uri(tmp_path_factory, placed, group_rows,
                                                                shards) -> None:
    """Any mix of uris and row-group sizes (one dump's rows over many groups, groups that hold
    two uris): each place finds its row, a place never written finds none, and a lookup
    decodes at most the groups at its uri's two ends and the one its position falls in."""
    folder = tmp_path_factory.mktemp("state")
    rows = [row for uri, positions in sorted(placed.items()) for row in rows_for(uri, sorted(positions))]
    files = write_shards(folder, rows, shards, group_rows)
    for row in rows:
        state = PreviousState(state_source(files), lambda path: open(path, "rb"), held=1)
        assert state.row_of(row.uri, row.position) == (row.doc_id, row.input_digest)
        assert state.loads <= 3
    state = PreviousState(state_source(files), lambda path: open(path, "rb"))
    for uri, positions in placed.items():
        for position in {-1, 3 * BLOCK + 1} | {p + 1 for p in positions if p + 1 not in positions}:
            assert state.row_of(uri, position) is None
    assert state.row_of("/c/b.md", 0) is None


def test_a_damaged_state_file_reads_as_no_previous_row(tmp_path) -> None:
    rows = rows_for("/c/a.md", range(1))
    files = write_shards(tmp_path, rows, 1)
    with open(files[0][0], "r+b") as handle:
        handle.truncate(20)
    state = PreviousState(state_source(files), lambda path: open(path, "rb"))
    assert state.row_of("/c/a.md", 0) is None


def test_files_of_other_shapes_are_no_source() -> None:
    assert state_source([]) is None
    assert state_source([("run/state-00000-of-00002.parquet", ()), ("run/state-00001-of-00003.parquet", ())]) is None
    assert state_source([("run/state.parquet", ())]) is None
