"""A carried shard's BM25 weights are computed for a whole column at once: they must be, to the
bit, what ``chunkline.sparse.document_weights`` gives each chunk."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkline.sparse import SparseOptions, document_weights
from chunkline.transforms.carry import stored_weights
from chunkline.transforms.write import in_order

counts_lists = st.lists(st.lists(st.integers(1, 40), max_size=12), max_size=20)


@given(counts_lists, st.one_of(st.just(0.0), st.floats(0.5, 500)), st.floats(0.1, 3), st.floats(0, 1), st.integers(0, 5))
def test_column_weights_equal_each_chunks_weights(rows, reference, k1, b, cut) -> None:
    options = SparseOptions(k1=k1, b=b)
    column = pa.array(rows, pa.list_(pa.int32()))
    column = column.slice(min(cut, len(rows)))  # a filtered shard's column need not start at 0
    expected = [np.asarray(document_weights(tuple(range(len(r))), tuple(r), reference, options),
                           dtype=np.float32).tolist() for r in column.to_pylist()]
    assert stored_weights(column, reference, options).to_pylist() == expected


def test_chunked_columns_are_weighed_as_one() -> None:
    options = SparseOptions()
    column = pa.chunked_array([pa.array([[1, 2]], pa.list_(pa.int32())),
                               pa.array([[], [3]], pa.list_(pa.int32()))])
    weights = stored_weights(column, 2.0, options).to_pylist()
    assert [len(w) for w in weights] == [2, 0, 1]
    assert weights[2] == [np.float32(document_weights((0,), (3,), 2.0, options)[0]).item()]


tables_and_orders = st.integers(0, 60).flatmap(lambda rows: st.tuples(
    st.just(rows), st.lists(st.integers(1, 20), max_size=4),
    st.lists(st.integers(0, max(0, rows - 1)), max_size=rows, unique=True) if rows else st.just([]),
    st.booleans()))


@given(tables_and_orders)
def test_rows_in_order_equal_a_take(case) -> None:
    """A merged shard's rows, sliced by runs, are exactly the take's, across chunk boundaries and
    whether the order is sorted (a few runs) or shuffled (many)."""
    rows, cuts, order, keep_sorted = case
    table = pa.table({"doc_id": [f"d{i:03d}" for i in range(rows)], "n": list(range(rows)),
                      "terms": [[i] * (i % 3) for i in range(rows)]})
    pieces, start = [], 0
    for cut in cuts:  # a table of several chunks, as the concatenation of new and carried rows
        pieces.append(table.slice(start, cut))
        start += cut
    table = pa.concat_tables([*pieces, table.slice(start)])
    order = np.asarray(sorted(order) if keep_sorted else order, dtype=np.int64)
    assert in_order(table, order).equals(table.take(pa.array(order, pa.int64())))


def test_a_run_of_rows_is_not_copied() -> None:
    table = pa.table({"text": [f"text {i}" for i in range(10_000)]})
    merged = in_order(table, np.concatenate([np.arange(0, 4_000), np.arange(4_100, 10_000)]))
    assert merged.num_rows == 9_900
    source = table.column("text").chunk(0).buffers()[2].address
    assert merged.column("text").chunk(0).buffers()[2].address == source


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]),
                          st.lists(st.integers(0, 9), max_size=4, unique=True)), max_size=12),
       st.sets(st.sampled_from(["a", "b", "c", "d"])), st.integers(1, 4), st.data())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_pair_read_by_batches_gives_its_whole_stats(tmp_path, monkeypatch, rows, wanted, size, data) -> None:
    """A carried pair's sidecar read a few rows at a time (``SIDE_BATCH_ROWS``), its deleted
    rows skipped: the stats of the wanted documents' live rows, as read whole."""
    from chunkline.transforms import carry

    deleted = sorted(data.draw(st.sets(st.integers(0, max(0, len(rows) - 1)), max_size=3))) if rows else []
    path = tmp_path / f"side-{len(rows)}-{size}.parquet"
    pq.write_table(pa.table({"doc_id": pa.array([r[0] for r in rows], pa.string()),
                             "term_ids": pa.array([r[1] for r in rows], pa.list_(pa.int64())),
                             "term_counts": pa.array([[2] * len(r[1]) for r in rows], pa.list_(pa.int64()))}), path)
    live = [r for n, r in enumerate(rows) if n not in set(deleted) and r[0] in wanted]
    df: dict[int, int] = {}
    for _, terms in live:
        for term in terms:
            df[term] = df.get(term, 0) + 1
    monkeypatch.setattr(carry, "SIDE_BATCH_ROWS", size)
    stats, found = carry._pair_stats(str(path), sorted(wanted), deleted)
    assert (stats.documents, stats.total_length, dict(stats.df)) == (len(live), 2 * sum(len(t) for _, t in live), df)
    assert found == len({doc_id for doc_id, _ in live})
