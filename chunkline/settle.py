"""Which documents of a rerun must be processed again, decided on arrays.

A rerun keeps, per document, what the corpus-wide stages need of it (:class:`SettledState`).
A document read again with the same id and input, at the same place, is *settled*: its previous
decisions stand unless a change elsewhere reaches it. Two corpus-wide stages can reach it:

- boilerplate (``chunkline.boilerplate``): a line becomes frequent, or stops being frequent, so
  its stripped text changes (:func:`boilerplate_affected`);
- dedupe (``transforms/dedupe.py``): a changed, new or gone document shares its id, its exact
  hash or an LSH bucket with it, or a component they shared loses or gains a member
  (:func:`dedupe_affected`).

Both are arrays with no Python step per document. Dedupe's closure reads the state in blocks,
a pass per round (:func:`affected_in_passes`): between blocks it holds what it looks for
(values of the touch and of the documents marked so far) and the marked rows, so a worker
computing it at 100 M documents holds the change, not the corpus. The re-processed
documents (the changed, new and affected ones), deduplicated alone, get the decisions a full
run over the whole corpus gives them, and every settled document keeps its previous decision:
``tests/test_settle.py`` holds both to a full recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc



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

    doc_id: np.ndarray | pa.Array  # str
    doc_hash: np.ndarray | pa.Array
    band_keys: np.ndarray  # uint64, 1-D
    survivor: np.ndarray | pa.Array  # str


def holding(owners: np.ndarray, values: np.ndarray, wanted: np.ndarray, n: int) -> np.ndarray:
    """(n,) bool: the documents holding one of ``wanted`` among their ``values`` (``owners``:
    the document of each value), by a binary search of the few wanted values per value, in
    one pass, not a sort of the many."""
    wanted = np.unique(wanted)
    if len(wanted) == 0 or n == 0:
        return np.zeros(n, bool)
    index = np.minimum(np.searchsorted(wanted, values), len(wanted) - 1)
    return np.bincount(owners[wanted[index] == values], minlength=n).astype(bool)


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


@dataclass(frozen=True)
class StateRows:
    """A block of settled documents' state rows as one pass of :func:`affected_in_passes`
    reads it: ``doc_id``, ``doc_hash`` (the exact key) and ``survivor`` as Arrow arrays of one
    type per column across blocks and the :class:`Touch` (compared by value), the band keys as
    in :class:`SettledState`, and ``extra``: documents processed again for a reason of the
    caller's (None: none)."""

    doc_id: pa.Array
    doc_hash: pa.Array
    survivor: pa.Array
    band_keys: np.ndarray  # (n, bands) uint64
    signed: np.ndarray  # (n,) bool
    extra: np.ndarray | None = None
    # What the block's other rows bring (documents changed or gone, read beside the settled
    # ones): added to the touch as they are read.
    touch: Touch | None = None

    def __len__(self) -> int:
        return len(self.doc_id)


class _Values:
    """The values of one column a pass looks for. What is added during a pass is looked for
    from the next one: a pass asks one Arrow value set (``pyarrow.compute.is_in``, a C++ hash
    set), built once, never a Python step per row or a set rebuilt per block."""

    def __init__(self, values: Iterable = ()) -> None:
        self.values: set = set(values)
        self.added = False
        self._frozen: dict[pa.DataType, pa.Array] = {}

    def add(self, values: Iterable) -> None:
        before = len(self.values)
        self.values.update(values)
        self.added |= len(self.values) != before

    def next_pass(self) -> bool:
        """Whether values were added since the last pass; they are looked for from now on."""
        added, self.added = self.added, False
        if added:
            self._frozen = {}
        return added

    def held(self, column: pa.Array) -> np.ndarray:
        if not self.values or not len(column):
            return np.zeros(len(column), bool)
        if column.type not in self._frozen:
            self._frozen[column.type] = pa.array(list(self.values), column.type)
        return pc.is_in(column, value_set=self._frozen[column.type]).to_numpy(zero_copy_only=False)


class _Keys:
    """Band keys a pass looks for (uint64), as :class:`_Values`."""

    def __init__(self, keys: np.ndarray | None = None) -> None:
        self.keys = np.unique(np.asarray(keys if keys is not None else [], np.uint64))
        self._pending: list[np.ndarray] = []
        self._frozen: pa.Array | None = None

    def add(self, keys: np.ndarray) -> None:
        if len(keys):
            self._pending.append(np.asarray(keys, np.uint64))

    def next_pass(self) -> bool:
        if not self._pending:
            return False
        merged = np.union1d(self.keys, np.concatenate(self._pending))
        self._pending = []
        added = len(merged) != len(self.keys)
        if added:
            self.keys, self._frozen = merged, None
        return added

    def held(self, rows: StateRows) -> np.ndarray:
        """(n,) bool: the signed rows holding one of the keys."""
        signed = np.flatnonzero(rows.signed)
        if not len(self.keys) or not len(signed):
            return np.zeros(len(rows), bool)
        if self._frozen is None:
            self._frozen = pa.array(self.keys, pa.uint64())
        width = rows.band_keys.shape[1]
        values = pa.array(np.asarray(rows.band_keys, np.uint64)[signed].reshape(-1))
        found = pc.is_in(values, value_set=self._frozen).to_numpy(zero_copy_only=False)
        hit = np.zeros(len(rows), bool)
        hit[signed[found.reshape(-1, width).any(axis=1)]] = True
        return hit


def _band_values(rows: StateRows, chosen: np.ndarray) -> np.ndarray:
    picked = chosen & np.asarray(rows.signed, bool)
    return np.asarray(rows.band_keys, np.uint64)[picked].reshape(-1)


def affected_in_passes(read: Callable[[], Iterable[StateRows]], touch: Touch, *,
                       max_bucket_pairs: int,
                       marked: Callable[[int, StateRows, np.ndarray], None] | None = None
                       ) -> list[np.ndarray]:
    """Per block of ``read()`` (the same blocks in the same order at every call), the rows the
    touch may reach (sorted int64 positions in the block), closed as :func:`dedupe_affected`
    says, reading the settled state block by block: what is held between blocks is the values
    looked for (the touch's, and those of the documents marked so far) and the marked rows'
    positions, so memory follows the change, not the corpus.

    Each pass marks every row holding a value looked for and adds the marked rows' values
    (hashes of those sharing an id with the touch; band keys of the moved ones; survivors,
    ids and band keys to count of every affected one), looked for from the next pass on (a
    pass asks one frozen set per column); a band key counted past ``max_bucket_pairs``
    holders over a pass is then looked for itself. The rules only add, so passes until one
    adds no value reach the least closed set, the one the in-memory rounds reach. A night
    whose touch reaches no settled document takes two passes (one, with no touch found in
    the blocks); one that reaches a few, three. ``marked(block, rows, hit)`` is told each
    block's marked rows at every pass: at the last, the answer's."""
    if max_bucket_pairs < 1:
        raise ValueError(f"max_bucket_pairs must be at least 1, not {max_bucket_pairs}")
    ids_of_touch = _Values(_python_values(touch.doc_id))
    moving_hashes = _Values(_python_values(touch.doc_hash))
    moving_keys = _Keys(touch.band_keys)
    survivors = _Values(_python_values(touch.survivor))
    ids = _Values()
    capped = _Keys()
    counted = np.zeros(0, np.uint64)  # sorted: keys whose holders a pass counted
    to_count = _Keys()
    looked_for = (ids_of_touch, moving_hashes, moving_keys, survivors, ids, capped)
    affected: list[np.ndarray] = []
    while True:
        counting = np.setdiff1d(to_count.keys, counted)
        counts = np.zeros(len(counting), np.int64)
        counting_set = pa.array(counting, pa.uint64()) if len(counting) else None
        for block, rows in enumerate(read()):
            if block == len(affected):
                affected.append(np.zeros(0, np.int64))
            if rows.touch is not None:
                ids_of_touch.add(_python_values(rows.touch.doc_id))
                moving_hashes.add(_python_values(rows.touch.doc_hash))
                moving_keys.add(rows.touch.band_keys)
                survivors.add(_python_values(rows.touch.survivor))
            n = len(rows)
            sharing = ids_of_touch.held(rows.doc_id)
            moved = sharing | moving_hashes.held(rows.doc_hash)
            hit = (moved | moving_keys.held(rows) | survivors.held(rows.survivor)
                   | ids.held(rows.doc_id) | capped.held(rows))
            if rows.extra is not None:
                hit |= np.asarray(rows.extra, bool)
            hit[affected[block]] = True
            affected[block] = np.flatnonzero(hit)
            if marked is not None:
                marked(block, rows, hit)
            if counting_set is not None and n:
                values = pa.array(_band_values(rows, np.ones(n, bool)))
                at = pc.index_in(values, value_set=counting_set).drop_null().to_numpy()
                counts += np.bincount(at.astype(np.int64), minlength=len(counting))
            if not hit.any():
                continue
            moving_hashes.add(rows.doc_hash.filter(pa.array(sharing)).to_pylist())
            moving_keys.add(_band_values(rows, moved))
            chosen = pa.array(hit)
            survivors.add(rows.survivor.filter(chosen).to_pylist())
            ids.add(rows.doc_id.filter(chosen).to_pylist())
            to_count.add(_band_values(rows, hit))
        counted = np.union1d(counted, counting)
        capped.add(counting[counts > max_bucket_pairs])
        grew = [values.next_pass() for values in looked_for]  # every set moves on, each asked
        to_count.next_pass()
        if not any(grew) and not len(np.setdiff1d(to_count.keys, counted)):
            return affected


def _python_values(column: np.ndarray | pa.Array) -> list:
    return column.to_pylist() if isinstance(column, (pa.Array, pa.ChunkedArray)) else np.asarray(column).tolist()


def dedupe_affected(state: SettledState, touch: Touch, *, max_bucket_pairs: int,
                    extra: np.ndarray | None = None) -> np.ndarray:
    """(n,) bool: the settled documents ``touch`` may reach, closed so that the touched and
    affected documents deduplicated alone get the decisions a run over the whole corpus gives
    them, and every other settled document keeps its previous one (as ``transforms/dedupe.py``
    decides: one record per id, exact groups by doc_hash, LSH buckets of the exact survivors
    with ``max_bucket_pairs``' cap, components of the verified pairs). The state held in memory
    as one block of :func:`affected_in_passes`, which a rerun runs over the state table's
    blocks as it reads them.

    1. *Moved*: those sharing an id with the touch (which record holds the id may change) and
       those sharing a doc_hash with the touch or with them (which record of an exact group
       survives may change): the only settled documents that may become, or stop being, a node
       of the LSH graph (an exact survivor).
    2. Affected: the moved ones, and those sharing a band key with the touch or with a moved
       one: every holder of a bucket whose members may change.
    3. Then, until nothing is added, those with the previous survivor of an affected or
       touched one (a previous component the change may split or join), those with the id of
       an affected one (a record rejected under an id has its own id as survivor, not the
       holder's), and those sharing with an affected one a band key more than
       ``max_bucket_pairs`` settled documents hold (such a bucket gives only the pairs of its
       smallest member, ``chunkline.minhash.bucket_pairs``; a part of it alone would give
       others).

    Why that is exact: a bucket with no touched or moved holder has the same members, so the
    same candidate pairs and verified edges, as in the previous run; an edge between an
    affected and a settled document comes from such a bucket, so it was an edge before (the
    same previous survivor) or its bucket is capped: neither is left. So each id, exact group
    and component of the new corpus lies wholly among the re-processed documents or wholly
    among the settled ones, and a wholly settled one is as it was."""
    n = len(state)
    if max_bucket_pairs < 1:
        raise ValueError(f"max_bucket_pairs must be at least 1, not {max_bucket_pairs}")
    if not n:
        return np.zeros(0, bool)
    rows = StateRows(pa.array(np.asarray(state.doc_id).tolist()), pa.array(np.asarray(state.doc_hash).tolist()),
                     pa.array(np.asarray(state.survivor).tolist()), np.asarray(state.band_keys, np.uint64),
                     np.asarray(state.signed, bool), extra)
    touch = Touch(pa.array(_python_values(touch.doc_id), rows.doc_id.type),
                  pa.array(_python_values(touch.doc_hash), rows.doc_hash.type),
                  np.asarray(touch.band_keys, np.uint64),
                  pa.array(_python_values(touch.survivor), rows.survivor.type))
    affected = np.zeros(n, bool)
    affected[affected_in_passes(lambda: [rows], touch, max_bucket_pairs=max_bucket_pairs)[0]] = True
    return affected
