"""Counts per key as numpy arrays: a combine whose inputs and accumulators are sorted arrays of
integer keys with their counts, so a corpus-wide count (boilerplate's line keys, BM25's term
document frequencies) never makes a key an element or a dict entry of its own.

The count is keyed by a share of the key space (a bucket of line keys, a range of term ids), so
each share is combined on its own worker; Beam lifts the combine before the shuffle
(``apache_beam/transforms/core.py``, ``CombinePerKey`` with a ``PartialGroupByKeyCombiningValues``
on the sending side), so each worker sends one partial array per share it saw, and a share's
accumulator holds only that share's distinct keys.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np

Counted = tuple[np.ndarray, np.ndarray]  # (keys ascending, their counts as int64)

# Parts an accumulator holds before they are summed into one: a part is one bundle's keys of
# one share, so summing every 64 bounds the copies to ~1/64 more than the distinct keys.
_PARTS = 64


def sum_counts(parts: list[Counted], dtype: str = "<u8") -> Counted:
    """Parts of ``(keys, counts)`` -> each distinct key once, ascending, with its summed count."""
    if not parts:
        return np.empty(0, dtype=dtype), np.empty(0, dtype=np.int64)
    keys, inverse = np.unique(np.concatenate([keys for keys, _ in parts]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([counts for _, counts in parts]),
                         minlength=len(keys)).astype(np.int64)
    return keys, counts


class KeyCounts(beam.CombineFn):
    """Key arrays -> ``(keys, count of each)``, both sorted numpy arrays. An input is a key
    array (each key counted once: a document's distinct keys) or ``(keys, counts)`` (a partial
    count, each key once)."""

    def __init__(self, dtype: str = "<u8") -> None:
        self.dtype = dtype

    def create_accumulator(self) -> list[Counted]:
        return []

    def add_input(self, accumulator: list[Counted], keys: np.ndarray | Counted) -> list[Counted]:
        if isinstance(keys, tuple):
            accumulator.append(keys)
        else:
            accumulator.append((keys, np.ones(len(keys), dtype=np.int64)))
        return [sum_counts(accumulator, self.dtype)] if len(accumulator) > _PARTS else accumulator

    def merge_accumulators(self, accumulators) -> list[Counted]:
        return [sum_counts([part for accumulator in accumulators for part in accumulator], self.dtype)]

    def compact(self, accumulator: list[Counted]) -> list[Counted]:
        return [sum_counts(accumulator, self.dtype)]

    def extract_output(self, accumulator: list[Counted]) -> Counted:
        return sum_counts(accumulator, self.dtype)


class SumCounts(beam.PTransform):
    """``(key, (keys, counts))`` partial counts -> ``(key, (keys, summed counts))`` per key: what
    ``CombinePerKey(KeyCounts())`` gives, with no combine lifted into the bundles that send. A
    lifted combine (the sending stage's ``Precombine``, Beam's
    ``PartialGroupByKeyCombiningValues``) keeps each key's accumulator until its bundle ends,
    so a bundle held every distinct key it saw, and on the multi-processing FnApiRunner a
    bundle is a worker's share of the whole corpus. The senders sum what they hold and send it
    whenever it reaches their bound (in-mapper combining with a flush: Lin & Dyer, section
    3.1); only the receiving side, a key at a time, holds a key's partials."""

    def expand(self, partials):
        return (partials
                | "Group" >> beam.GroupByKey()
                | "Sum" >> beam.MapTuple(lambda key, parts: (key, sum_counts(list(parts)))))
