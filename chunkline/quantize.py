"""Stored vectors smaller than float32: float16, or int8 with one scale per vector.

int8 is symmetric scalar quantization per vector (as Qdrant's and pgvector's halfvec/bit
siblings do per collection; here per row, so no corpus statistic is needed): ``scale =
max|v| / 127``, ``q = round(v / scale)``, and ``v ~ q * scale``. A normalized 384-d vector
keeps a cosine of ~0.9999 to itself (tests/test_quantize.py). Quantizing what was dequantized
gives back the same integers, so a reused vector is stored unchanged.
"""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np

VectorDtype = Literal["float32", "float16", "int8"]
VECTOR_DTYPES: tuple[str, ...] = ("float32", "float16", "int8")
# How far from unit length a stored vector of a normalizing model may be and still be reused.
UNIT_TOLERANCE = {"float32": 1e-3, "float16": 2e-3, "int8": 2e-2}


def quantize_int8(vector: Sequence[float]) -> tuple[list[int], float]:
    """(int8 values, scale) with ``vector ~ values * scale``; a zero vector has scale 0."""
    array = np.asarray(vector, dtype=np.float64)
    peak = float(np.max(np.abs(array))) if array.size else 0.0
    if peak == 0.0:
        return [0] * array.size, 0.0
    scale = np.float32(peak / 127.0)
    values = np.clip(np.rint(array / float(scale)), -127, 127).astype(np.int64)
    # A vector read back from int8 (values * scale in float32, as a reused vector is) must
    # store as the same values and scale; peak / 127 can land one float32 step off the scale
    # it was made with, so the neighbouring scales that reproduce it exactly are tried first.
    exact = np.float32(array)
    for candidate in (scale, np.nextafter(scale, np.float32(np.inf)), np.nextafter(scale, np.float32(0))):
        if np.array_equal(values.astype(np.float32) * candidate, exact):
            return values.tolist(), float(candidate)
    return values.tolist(), float(scale)


def stored(vector: Sequence[float], dtype: str) -> tuple[list, float | None]:
    """What a vector is stored as: (values, scale or None)."""
    if dtype == "int8":
        return quantize_int8(vector)
    if dtype == "float16":
        return np.asarray(vector, dtype=np.float16).tolist(), None
    return list(vector), None


def dequantized(values: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """float32 vectors (rows) from stored values, multiplied by each row's scale for int8."""
    matrix = values.astype(np.float32)
    return matrix if scales is None else matrix * scales.astype(np.float32)[:, None]
