"""Which documents of a rerun must be processed again, decided on arrays.

A rerun keeps, per document, what the corpus-wide stages need of it (:class:`SettledState`).
A document read again with the same id and input, at the same place, is *settled*: its previous
decisions stand unless a change elsewhere reaches it. Two corpus-wide stages can reach it:

- boilerplate (``chunkline.boilerplate``): a line becomes frequent, or stops being frequent, so
  its stripped text changes (:func:`boilerplate_affected`);
- dedupe (``transforms/dedupe.py``): a changed, new or gone document shares its id, its exact
  hash or an LSH bucket with it, or a component they shared loses or gains a member
  (:func:`dedupe_affected`).

Both are numpy over the whole state, with no Python loop per document (string columns are
digested by Python's own ``hash``, called from C). The re-processed
documents (the changed, new and affected ones), deduplicated alone, get the decisions a full
run over the whole corpus gives them, and every settled document keeps its previous decision:
``tests/test_settle.py`` holds both to a full recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from chunkline.key_sets import span_positions
from chunkline.minhash import fold_bytes


@dataclass(frozen=True)
class Csr:
    """A list of uint64 arrays, one per document, as one array (compressed sparse rows):
    document ``i`` holds ``values[offsets[i]:offsets[i + 1]]``."""

    offsets: np.ndarray  # (n + 1,) int64, from 0, non-decreasing, to len(values)
    values: np.ndarray  # uint64

    def __post_init__(self) -> None:
        offsets, values = np.asarray(self.offsets), np.asarray(self.values)
        if offsets.ndim != 1 or len(offsets) == 0 or values.ndim != 1:
            raise ValueError("Csr: offsets is 1-D with at least one entry, values 1-D")
        if offsets[0] != 0 or offsets[-1] != len(values) or bool(np.any(np.diff(offsets) < 0)):
            raise ValueError(f"Csr: offsets must run from 0 to {len(values)} without going back")

    @classmethod
    def of(cls, rows: Sequence[np.ndarray | Sequence[int]]) -> Csr:
        """One row per document (a convenience for small inputs and tests)."""
        lengths = np.array([len(row) for row in rows], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        values = (np.concatenate([np.asarray(row, dtype=np.uint64) for row in rows])
                  if rows else np.empty(0, np.uint64))
        return cls(offsets, values.astype(np.uint64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def owners(self) -> np.ndarray:
        """The document of each value (int64)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.offsets))


@dataclass(frozen=True)
class SettledState:
    """Columns of the documents a rerun reads unchanged (one row each), as the previous run
    decided on them.

    ``doc_hash`` is what exact duplicates share (``chunkline.records.doc_hash``, with the
    access digest before it when access control is on) and ``band_keys`` its LSH band keys as
    ``chunkline.minhash.band_digests`` of ``band_key_array`` (prefixed with the access
    digest likewise); ``signed`` is False for a text without shingles, which has no band keys
    (its row of ``band_keys`` is ignored). ``survivor`` is the doc_id of the kept document of
    its duplicate cluster (its own when it is kept; its own too when it was rejected as a second
    record of its id). ``line_keys`` are its boilerplate candidate keys
    (``chunkline.boilerplate.line_keys`` as uint64), ``frequent_keys`` those of them that were
    frequent."""

    doc_id: np.ndarray  # (n,) str
    doc_hash: np.ndarray  # (n,) bytes (S) or any values compared by equality
    band_keys: np.ndarray  # (n, bands) uint64
    signed: np.ndarray  # (n,) bool
    survivor: np.ndarray  # (n,) str
    line_keys: Csr
    frequent_keys: Csr

    def __post_init__(self) -> None:
        n = len(self.doc_id)
        for name in ("doc_hash", "signed", "survivor"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"SettledState.{name} has {len(getattr(self, name))} rows, doc_id {n}")
        if self.band_keys.ndim != 2 or self.band_keys.shape[0] != n:
            raise ValueError(f"SettledState.band_keys must be (n, bands) with n = {n}, "
                             f"not {self.band_keys.shape}")
        for name in ("line_keys", "frequent_keys"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"SettledState.{name} has {len(getattr(self, name))} rows, doc_id {n}")

    def __len__(self) -> int:
        return len(self.doc_id)


@dataclass(frozen=True)
class Touch:
    """What the re-processed documents bring to dedupe, old and new together, as flat arrays
    (which document each value came from does not matter): the ids, doc_hashes and band keys
    (``chunkline.minhash.band_digests``: the state table keeps them so) they have now (changed and new ones) and had in the previous run
    (changed and gone ones, from their state rows), and the survivors they had there."""

    doc_id: np.ndarray  # str
    doc_hash: np.ndarray
    band_keys: np.ndarray  # uint64, 1-D
    survivor: np.ndarray  # str


def _digests(*columns: np.ndarray) -> list[np.ndarray]:
    """Each column's values as uint64, equal for equal values across the columns (taken at
    their common dtype, so ``S32`` and ``S33`` copies of one hash agree): integers as they
    are, fixed-width bytes folded (``chunkline.minhash.fold_bytes``), strings by Python's own ``hash`` (called from
    C through ``map``: ~50 ns a string, where sorting them compares Python objects, ~8 s a
    million). Two values that differ share a digest with probability ~2^-64, and that only
    adds documents to an affected set, which stays closed."""
    arrays = [np.asarray(column) for column in columns]
    for array in arrays:
        if array.ndim != 1:
            raise ValueError(f"a column must be 1-D, not {array.shape}")
    common = np.result_type(*arrays)
    out = []
    for array in (array.astype(common) for array in arrays):
        if common.kind in "ui":
            out.append(array.astype(np.uint64))
        elif common.kind in "SV":
            out.append(fold_bytes(array))
        else:
            out.append(np.fromiter(map(hash, array.tolist()), dtype=np.int64, count=len(array)).view(np.uint64))
    return out


def holding(owners: np.ndarray, values: np.ndarray, wanted: np.ndarray, n: int) -> np.ndarray:
    """(n,) bool: the documents holding one of ``wanted`` among their ``values`` (``owners``:
    the document of each value), by a binary search of the few wanted values per value, in
    one pass, not a sort of the many."""
    wanted = np.unique(wanted)
    if len(wanted) == 0 or n == 0:
        return np.zeros(n, bool)
    index = np.minimum(np.searchsorted(wanted, values), len(wanted) - 1)
    return np.bincount(owners[wanted[index] == values], minlength=n).astype(bool)


class _Index:
    """A column sorted once, with the document of each value: the holders of a few values are
    then a binary search each (``np.searchsorted``) and a slice, not a pass over the column,
    however many rounds ask."""

    def __init__(self, values: np.ndarray, owners: np.ndarray) -> None:
        order = np.argsort(values)
        self.values, self.owners = values[order], owners[order]

    def _spans(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (np.searchsorted(self.values, wanted, "left"),
                np.searchsorted(self.values, wanted, "right"))

    def counts(self, wanted: np.ndarray) -> np.ndarray:
        """How many values equal each of ``wanted``."""
        low, high = self._spans(wanted)
        return high - low

    def mark(self, wanted: np.ndarray, n: int) -> np.ndarray:
        """(n,) bool: the documents holding one of ``wanted``."""
        low, high = self._spans(np.unique(wanted))
        marked = np.zeros(n, bool)
        marked[self.owners[span_positions(low, high - low)]] = True
        return marked


def boilerplate_affected(owners: np.ndarray, keys: np.ndarray, n: int, frequent_now: np.ndarray,
                         frequent_before: np.ndarray | None) -> np.ndarray:
    """(n,) bool: of ``n`` settled documents holding line ``keys`` (uint64, each owned by the
    document at its place in ``owners``), those whose stripped text changes: holding a key
    that is frequent now and was not, or was and is not (the symmetric difference of the two
    frequent sets). That covers the floor moving with the document count
    (``chunkline.boilerplate.frequency_floor``): only the set matters, not why it moved. With
    no previous set (not kept), every document holding a key."""
    owners = np.asarray(owners, np.int64)
    if frequent_before is None:
        return np.bincount(owners, minlength=n)[:n] > 0
    changed = np.setxor1d(np.asarray(frequent_now, np.uint64), np.asarray(frequent_before, np.uint64))
    return holding(owners, np.asarray(keys, np.uint64), changed, n)


def dedupe_affected(state: SettledState, touch: Touch, *, max_bucket_pairs: int,
                    extra: np.ndarray | None = None) -> np.ndarray:
    """(n,) bool: the settled documents ``touch`` may reach, closed so that the touched and
    affected documents deduplicated alone get the decisions a run over the whole corpus gives
    them, and every other settled document keeps its previous one (as ``transforms/dedupe.py``
    decides: one record per id, exact groups by doc_hash, LSH buckets of the exact survivors
    with ``max_bucket_pairs``' cap, components of the verified pairs).

    1. *Moved*: those sharing an id with the touch (which record holds the id may change) and
       those sharing a doc_hash with the touch or with them (which record of an exact group
       survives may change): the only settled documents that may become, or stop being, a node
       of the LSH graph (an exact survivor).
    2. Affected: the moved ones, and those sharing a band key with the touch or with a moved
       one: every holder of a bucket whose members may change.
    3. Then, until nothing is added (a few numpy passes; no Python step per document), those
       with the previous survivor of an affected or touched one (a previous component the
       change may split or join), those with the id of an affected one (a record rejected
       under an id has its own id as survivor, not the holder's), and those sharing with an
       affected one a band key more than ``max_bucket_pairs`` settled documents hold (such a
       bucket gives only the pairs of its smallest member, ``chunkline.minhash.bucket_pairs``;
       a part of it alone would give others).

    Why that is exact: a bucket with no touched or moved holder has the same members, so the
    same candidate pairs and verified edges, as in the previous run; an edge between an
    affected and a settled document comes from such a bucket, so it was an edge before (the
    same previous survivor) or its bucket is capped: neither is left. So each id, exact group
    and component of the new corpus lies wholly among the re-processed documents or wholly
    among the settled ones, and a wholly settled one is as it was."""
    if max_bucket_pairs < 1:
        raise ValueError(f"max_bucket_pairs must be at least 1, not {max_bucket_pairs}")
    n = len(state)
    documents = np.arange(n)
    ids, touch_ids = _digests(state.doc_id, touch.doc_id)
    survivors, touch_survivors = _digests(state.survivor, touch.survivor)
    hashes, touch_hashes = _digests(state.doc_hash, touch.doc_hash)
    by_id, by_survivor, by_hash = _Index(ids, documents), _Index(survivors, documents), _Index(hashes, documents)
    signed = np.asarray(state.signed, bool)
    keys = np.asarray(state.band_keys, np.uint64)
    signed_rows = np.flatnonzero(signed)
    by_key = _Index(keys[signed_rows].reshape(-1), np.repeat(signed_rows, keys.shape[1]))

    sharing_id = by_id.mark(touch_ids, n)
    moved = sharing_id | by_hash.mark(np.concatenate((touch_hashes, hashes[sharing_id])), n)
    affected = moved | by_key.mark(
        np.concatenate((np.asarray(touch.band_keys, np.uint64), keys[moved & signed].reshape(-1))), n)
    if extra is not None:  # processed again for a reason of the caller's: closed over like the rest
        affected |= np.asarray(extra, bool)

    # Each round takes the documents the last one added (the frontier): their survivors, ids
    # and capped band keys mark the documents holding one. Every document is expanded once.
    frontier = affected.copy()
    wanted_survivors = np.concatenate((survivors[frontier], touch_survivors))
    while True:
        frontier_keys = np.unique(keys[frontier & signed].reshape(-1))
        # A key held by more than the cap: its bucket pairs only its smallest member (a key a
        # touched document holds made every holder affected already).
        capped = frontier_keys[by_key.counts(frontier_keys) > max_bucket_pairs]
        grown = by_survivor.mark(wanted_survivors, n) | by_id.mark(ids[frontier], n) | by_key.mark(capped, n)
        frontier = grown & ~affected
        if not frontier.any():
            return affected
        affected |= frontier
        wanted_survivors = survivors[frontier]
