"""A rerun's settled documents: which of them a change reaches, decided on arrays.

``ReadDocuments(settle=True)`` passes a document read as the previous run's state row holds it
(same id, input and facts at the same place) on as a row of a
:class:`~chunkline.state.SettledBatch`, not as a document. Two corpus-wide stages can still
reach it (``chunkline/settle.py`` says how, and why the sets it computes are exact):

1. :class:`FlagBoilerplate`: once the run's frequent line keys are known, a settled document
   holding a key that became or stopped being frequent is read again (:class:`Place`) and
   goes the whole way with the changed documents.
2. :class:`Affected`: the changed (and 1.'s) documents' ids, exact hashes and band keys
   (:class:`Touches`), with the previous rows of everything no longer settled, mark the settled
   documents dedupe may decide otherwise; they are read again too. Every other settled
   document keeps its previous rows: ids per shard for the documents and state writers
   (:class:`~chunkline.transforms.write.KeptIds`), their ids (:class:`~chunkline.transforms.carry.Passed`) for the carry of its
   chunks.

Each step is one worker's numpy over the whole settled state (about 210 bytes a document:
ids, hashes, survivors and band keys as 64-bit digests), so a worker holds that much at the
corpus's size: 210 MB at 1 M documents.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, NamedTuple, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from chunkline.access import access_digest
from chunkline.index.layout import shard_of
from chunkline.key_sets import take
from chunkline.records import Document, Rejected
from chunkline.settle import Csr, SettledState, Touch, boilerplate_affected, dedupe_affected
from chunkline.state import SettledBatch, StateSource, unpack
from chunkline.transforms.dedupe import _ParkAndSummarize
from chunkline.transforms.memo import recalled_doc_hash
from chunkline.transforms.read import Place
from chunkline.transforms.carry import Passed
from chunkline.transforms.write import KeptIds

log = logging.getLogger("chunkline.settle")

PLACES = "places"
DOCUMENT_IDS = "document_ids"
STATE_IDS = "state_ids"
PASSED = "passed"


def _places(batch: SettledBatch, rows: np.ndarray) -> Iterable[Place]:
    for row in rows.tolist():
        offset, length = int(batch.offset[row]), int(batch.length[row])
        yield Place(batch.uri[row], int(batch.position[row]),
                    offset if offset >= 0 else None, length if length >= 0 else None)


def _subset(batch: SettledBatch, rows: np.ndarray) -> SettledBatch:
    return SettledBatch(tuple(batch.doc_id[i] for i in rows.tolist()),
                        tuple(batch.uri[i] for i in rows.tolist()),
                        batch.position[rows], batch.offset[rows], batch.length[rows],
                        take(batch.keys, rows) if batch.keys is not None else None)


class FlagBoilerplate(beam.DoFn):
    """A settled batch, with the run's frequent keys -> the places of the documents holding a key
    of the symmetric difference with the previous run's (tagged ``places``), and the batch of
    the others. ``before``: the previous run's frequent keys; None (not kept) counts every key
    as changed."""

    def __init__(self, before: np.ndarray | None) -> None:
        self.before = before
        self.flagged = Metrics.counter("settle", "boilerplate_affected")

    def process(self, batch: SettledBatch, frequent: np.ndarray):
        if batch.keys is None:
            yield batch
            return
        keys = batch.keys
        owners = np.repeat(np.arange(len(batch), dtype=np.int64), np.diff(keys.offsets))
        hit = boilerplate_affected(owners, keys.keys, len(batch), frequent, self.before)
        flagged = np.flatnonzero(hit)
        if len(flagged):
            self.flagged.inc(len(flagged))
            for place in _places(batch, flagged):
                yield beam.pvalue.TaggedOutput(PLACES, place)
            yield _subset(batch, np.flatnonzero(~hit))
        else:
            yield batch


class Touches(_ParkAndSummarize):
    """A batch of documents the run processes -> ``(doc_id, exact key, band digests or None)``
    each: what they bring to dedupe (``chunkline.settle.Touch``), their hashes and signatures
    recalled or computed as dedupe's own summaries are."""

    def __init__(self, near, access: bool = False) -> None:
        # No memo: their texts are new (or newly stripped), and dedupe records what it signs.
        super().__init__(near, "", None, None, access)

    def start_bundle(self) -> None:
        pass

    def finish_bundle(self) -> None:
        self._memo.flush()
        self._hashes.flush()

    def process(self, batch: list[Document]):
        hashes = self._hashes.memo
        for doc in self._signed(batch)[1]:
            access = access_digest(doc.principals) if doc.principals is not None else ""
            bands = unpack(doc.counted).bands if doc.counted else None
            yield (doc.doc_id, access + recalled_doc_hash(hashes, doc),
                   None if bands is None else np.asarray(bands, np.uint64))


def rejected_touch(record: Rejected) -> tuple[str, None, None]:
    """A rejected record's id: the settled document under it is decided again with it (a
    rejection takes a fresh id when a kept or duplicate document holds its own)."""
    return record.doc_id, None, None


_STATE_COLUMNS = ("doc_id", "uri", "position", "doc_hash", "bands", "status", "survivor")


def _state_table(source: StateSource) -> pa.Table:
    """Every live row of the previous state table, the columns dedupe's closure needs."""
    tables = []
    for path, deletions, shard in source.files:
        with FileSystems.open(path) as handle:
            held = pq.ParquetFile(handle)
            names = held.schema_arrow.names
            table = held.read(columns=list(_STATE_COLUMNS) + (["principals"] if "principals" in names else []))
        gone = np.asarray(sorted(deletions.positions()), np.int64)
        if len(gone):
            live = np.ones(table.num_rows, bool)
            live[gone] = False
            table = table.filter(pa.array(live))
        if "principals" not in table.schema.names:
            table = table.append_column("principals", pa.nulls(table.num_rows, pa.list_(pa.string())))
        tables.append(table.append_column("shard", pa.array(np.full(table.num_rows, shard, np.int64))))
    if not tables:
        return pa.table({**{name: pa.array([], pa.string()) for name in _STATE_COLUMNS},
                         "principals": pa.array([], pa.list_(pa.string())), "shard": pa.array([], pa.int64())})
    return pa.concat_tables(tables, promote_options="default")


def _band_matrix(column: pa.ChunkedArray, bands: int) -> tuple[np.ndarray, np.ndarray]:
    """``(n, bands)`` uint64 and the rows that have them (a text without shingles has none)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(array)
    lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
    signed = lengths == bands if bands else np.zeros(n, bool)
    matrix = np.zeros((n, bands), np.uint64)
    if bands and signed.any():
        offsets = array.offsets.to_numpy().astype(np.int64)
        values = array.values.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
        rows = np.flatnonzero(signed)
        starts = offsets[rows]
        matrix[rows] = values[starts[:, None] + np.arange(bands)[None, :]]
    return matrix, signed


class Affected(beam.DoFn):
    """All the run's settled batches (one list) -> the places of those dedupe may decide
    otherwise (tagged ``places``), and for every other one: ``(shard, KeptIds)`` for the
    documents (``document_ids``) and state (``state_ids``) writers and, once, all their ids
    with whether each is kept (``passed``, :class:`~chunkline.transforms.carry.Passed`: the
    carry index takes their chunks per pair, as arrays). Side inputs: the touches of the documents the
    run processes (:class:`Touches`, :func:`rejected_touch`) and the doc_ids or chunk shards
    whose previous rows cannot be carried (``damaged``)."""

    def __init__(self, state: StateSource, bands: int, max_bucket_pairs: int,
                 document_shards: int, chunk_shards: int) -> None:
        self.state, self.bands, self.max_bucket_pairs = state, bands, max_bucket_pairs
        self.document_shards, self.chunk_shards = document_shards, chunk_shards
        self.passed = Metrics.counter("settle", "passed")
        self.affected = Metrics.counter("settle", "dedupe_affected")

    def process(self, batches: Sequence[SettledBatch], touches: Sequence[tuple], damaged: Sequence[Any]):
        batches = [batch for batch in batches if len(batch)]
        table = _state_table(self.state)
        settled_ids = pa.array([doc_id for batch in batches for doc_id in batch.doc_id], pa.string())
        uris = [uri for batch in batches for uri in batch.uri]
        positions = (np.concatenate([batch.position for batch in batches]) if batches
                     else np.zeros(0, np.int64))
        rows = self._rows(table, settled_ids, uris, positions)
        settled_rows = np.zeros(table.num_rows, bool)
        settled_rows[rows] = True
        keys = self._keys(table)
        bands, signed = _band_matrix(table.column("bands"), self.bands)
        survivors = table.column("survivor").to_numpy(zero_copy_only=False).astype(object)
        ids = table.column("doc_id").to_numpy(zero_copy_only=False).astype(object)
        old = np.flatnonzero(~settled_rows)
        new_ids = [t[0] for t in touches]
        new_keys = [t[1] for t in touches if t[1] is not None]
        new_bands = [t[2] for t in touches if t[2] is not None]
        touch = Touch(
            np.array(new_ids + ids[old].tolist(), dtype=object),
            np.array(new_keys + keys[old].tolist(), dtype=object),
            np.concatenate([np.zeros(0, np.uint64), *new_bands, bands[old][signed[old]].reshape(-1)]),
            survivors[old])
        state = SettledState(ids[rows], keys[rows], bands[rows], signed[rows], survivors[rows],
                             Csr(np.zeros(len(rows) + 1, np.int64), np.zeros(0, np.uint64)),
                             Csr(np.zeros(len(rows) + 1, np.int64), np.zeros(0, np.uint64)))
        kept = pc.equal(table.column("status"), "kept").to_numpy(zero_copy_only=False)[rows]
        extra = self._damaged(ids[rows], kept, damaged)
        affected = dedupe_affected(state, touch, max_bucket_pairs=self.max_bucket_pairs, extra=extra)
        self.affected.inc(int(affected.sum()))
        self.passed.inc(int((~affected).sum()))
        at = 0
        for batch in batches:
            mine = affected[at:at + len(batch)]
            if mine.any():
                yield from (beam.pvalue.TaggedOutput(PLACES, place) for place in _places(batch, np.flatnonzero(mine)))
            at += len(batch)
        passing = np.flatnonzero(~affected)
        passed_ids = settled_ids.take(pa.array(passing)) if len(passing) else pa.array([], pa.string())
        held = passed_ids.to_pylist()
        # The documents writer keeps their rows by id in the shard the id hashes to; the state
        # writer in the shard of the file each row was found in (the same count of shards:
        # the settle signature holds it).
        for shard, members in _by_shard(held, [shard_of(doc_id, self.document_shards) for doc_id in held]
                                        if self.document_shards > 1 else [0] * len(held)):
            yield beam.pvalue.TaggedOutput(DOCUMENT_IDS, (shard, KeptIds(tuple(members))))
        state_shards = table.column("shard").to_numpy()[rows][passing]
        for shard, members in _by_shard(held, state_shards.tolist()):
            yield beam.pvalue.TaggedOutput(STATE_IDS, (shard, KeptIds(tuple(members))))
        yield beam.pvalue.TaggedOutput(PASSED, Passed(passed_ids, pa.array(kept[passing], pa.bool_())))

    @staticmethod
    def _rows(table: pa.Table, settled_ids: pa.Array, uris: list[str], positions: np.ndarray) -> np.ndarray:
        """Each settled document's row of the previous state table, found by its place (as Read
        found it) and checked to hold its id."""
        if not len(settled_ids):
            return np.zeros(0, np.int64)
        places = pa.table({"uri": pa.array(uris, pa.string()), "position": pa.array(positions, pa.int64()),
                           "settled": pa.array(np.arange(len(uris), dtype=np.int64))})
        rows = pa.table({"uri": table.column("uri"), "position": table.column("position").cast(pa.int64()),
                         "row": pa.array(np.arange(table.num_rows, dtype=np.int64))})
        joined = places.join(rows, ["uri", "position"], join_type="left outer").sort_by("settled")
        found = joined.column("row")
        if found.null_count:
            # Read found each by its place in this very table: a missing one is a bug, never
            # a document passed by without its rows.
            raise RuntimeError(f"{found.null_count} settled documents have no state row")
        at = found.to_numpy()
        if len(joined) != len(settled_ids) or not table.column("doc_id").take(pa.array(at)).combine_chunks().equals(settled_ids):
            raise RuntimeError("a settled document's state row holds another id")
        return at

    @staticmethod
    def _keys(table: pa.Table) -> np.ndarray:
        """What exact duplicates share (``transforms/dedupe.py``'s exact key): the access
        digest of the principals, then the doc_hash."""
        if table.column("principals").null_count == table.num_rows:
            return table.column("doc_hash").to_numpy(zero_copy_only=False).astype(object)
        hashes = table.column("doc_hash").to_pylist()
        principals = table.column("principals").to_pylist()
        return np.array([(access_digest(p) if p is not None else "") + h
                         for h, p in zip(hashes, principals)], dtype=object)

    def _damaged(self, ids: np.ndarray, kept: np.ndarray, damaged: Sequence[Any]) -> np.ndarray:
        """The settled kept documents whose previous chunks cannot be carried: a doc_id named
        damaged, or a chunk shard (int) whose previous file could not be read."""
        if not damaged:
            return np.zeros(len(ids), bool)
        named = {d for d in damaged if isinstance(d, str)}
        shards = {d for d in damaged if isinstance(d, int)}
        return np.array([bool(is_kept) and (doc_id in named or shard_of(doc_id, self.chunk_shards) in shards)
                         for doc_id, is_kept in zip(ids.tolist(), kept.tolist())], bool)


def _by_shard(doc_ids: list[str], shards: Sequence[int]) -> Iterable[tuple[int, list[str]]]:
    grouped: dict[int, list[str]] = {}
    for doc_id, shard in zip(doc_ids, shards):
        grouped.setdefault(int(shard), []).append(doc_id)
    return sorted(grouped.items())


class SettledOutputs(NamedTuple):
    places: Any  # PCollection[Place]: settled documents dedupe may decide otherwise
    document_ids: Any  # PCollection[(shard, KeptIds)]
    state_ids: Any  # PCollection[(shard, KeptIds)]
    passed: Any  # PCollection[Passed], one element: every other settled document


class WriteSignature(beam.DoFn):
    """The settle signature (``pipeline/plan.py``) as ``<run>/settle-signature``: the next run
    passes its unchanged documents by only under the same one."""

    def __init__(self, run_dir: str, name: str) -> None:
        self.run_dir, self.name = run_dir, name

    def process(self, signature: str) -> Iterable[str]:
        path = FileSystems.join(self.run_dir, self.name)
        with FileSystems.create(path) as handle:
            handle.write(signature.encode("ascii"))
        yield path
