"""Smaller stored vectors: int8 with a scale per vector, float16; read back within their error."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.quantize import dequantized, quantize_int8, stored
from chunkline.records import ChunkRecord, chunk_row, chunk_schema

UNIT = st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=64).filter(
    lambda v: any(abs(x) > 1e-3 for x in v)).map(lambda v: (np.asarray(v) / np.linalg.norm(v)).tolist())


@settings(max_examples=300, deadline=None)
@given(UNIT)
def test_int8_keeps_the_direction_and_requantizes_to_itself(vector: list[float]) -> None:
    values, scale = quantize_int8(vector)
    assert all(-127 <= v <= 127 for v in values) and max(abs(v) for v in values) == 127
    back = dequantized(np.asarray([values]), np.asarray([scale]))[0]
    assert np.max(np.abs(back - np.asarray(vector))) <= scale / 2 + 1e-6
    assert quantize_int8(back.tolist()) == (values, scale)  # a reused vector is stored unchanged


def test_real_384d_vectors_keep_cosine() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(200, 384))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for dtype, floor in (("int8", 0.9998), ("float16", 0.999999)):
        rows = [stored(v, dtype) for v in vectors]
        values = np.asarray([r[0] for r in rows], dtype=np.float32)
        scales = np.asarray([r[1] for r in rows]) if dtype == "int8" else None
        back = dequantized(values, scales)
        cosine = np.sum(back * vectors, axis=1) / np.linalg.norm(back, axis=1)
        assert cosine.min() >= floor, (dtype, cosine.min())


def test_zero_vector() -> None:
    assert quantize_int8([0.0, 0.0]) == ([0, 0], 0.0)


def test_chunk_rows_store_the_schema_type() -> None:
    record = ChunkRecord("d", "d#0-1", 0, 0, 1, ("A",), "x", 1, embedding=(0.6, -0.8, 0.0))
    for dtype, item in (("float32", pa.float32()), ("float16", pa.float16()), ("int8", pa.int8())):
        schema = chunk_schema(3, dtype)
        table = pa.Table.from_pylist([chunk_row(record, schema)], schema=schema)
        assert table.schema.field("embedding").type.value_type == item
        assert ("embedding_scale" in table.column_names) == (dtype == "int8")
        row = table.to_pylist()[0]
        assert row["headings"] == ["A"] and row["text"] == "x"
        vector = np.asarray(row["embedding"], np.float32) * (row.get("embedding_scale") or 1.0)
        np.testing.assert_allclose(vector, [0.6, -0.8, 0.0], atol=0.004)
