"""A carried shard's BM25 weights are computed for a whole column at once: they must be, to the
bit, what ``chunkline.sparse.document_weights`` gives each chunk."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from chunkline.sparse import SparseOptions, document_weights
from transforms.carry import stored_weights

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
