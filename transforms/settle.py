"""A rerun's settled documents: which of them a change reaches, decided on arrays.

``ReadDocuments(settle=True)`` passes a document read as the previous run's state row holds it
(same id, input and facts at the same place) on as a row of a
:class:`~chunkline.state.SettledBatch`, not as a document, with where its state row lies. Two
corpus-wide stages can still reach it (``chunkline/settle.py`` says how, and why the sets it
computes are exact):

1. :class:`FlagBoilerplate`: once the run's frequent line keys are known, a settled document
   holding a key that became or stopped being frequent is read again (:class:`Place`) and
   goes the whole way with the changed documents.
2. :class:`Affected`: the changed (and 1.'s) documents' ids, exact hashes and band keys
   (:class:`Touches`), with the previous rows of everything no longer settled, mark the settled
   documents dedupe may decide otherwise (:class:`ReachedPlaces`: read again too). Everything
   else keeps its previous rows: the writers of the documents and state tables, and the
   carry index, are told the documents decided again (:class:`~chunkline.transforms.write.Redecided`),
   and keep every other row where it lies.

What a worker holds: the settled documents travel as bitmaps, a bit each per block of
:data:`MASK_ROWS` rows of a state file (:func:`settled_rows`, :func:`settled_mask`, grouped by
block); the closure reads the state table a row group at a time, a pass per round
(``chunkline.settle.affected_in_passes``), holding the bitmaps (12.5 MB at 100 M documents),
the values it looks for and the documents decided again: the change, not the corpus. The
batches themselves are only ever held one at a time.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

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
from chunkline.settle import StateRows, Touch, affected_in_passes, boilerplate_affected
from chunkline.state import SettledBatch, StateSource, unpack
from chunkline.transforms.dedupe import _ParkAndSummarize
from chunkline.transforms.memo import recalled_doc_hash
from chunkline.transforms.read import Place
from chunkline.transforms.write import Redecided

log = logging.getLogger("chunkline.settle")

PLACES = "places"
REACHED = "reached"
DOCUMENT_IDS = "document_ids"
STATE_IDS = "state_ids"
REDECIDED = "redecided"


def _places(batch: SettledBatch, rows: np.ndarray) -> Iterable[Place]:
    for row in rows.tolist():
        offset, length = int(batch.offset[row]), int(batch.length[row])
        yield Place(batch.uri[row], int(batch.position[row]),
                    offset if offset >= 0 else None, length if length >= 0 else None)


def _subset(batch: SettledBatch, rows: np.ndarray) -> SettledBatch:
    return SettledBatch(tuple(batch.doc_id[i] for i in rows.tolist()),
                        tuple(batch.uri[i] for i in rows.tolist()),
                        batch.position[rows], batch.offset[rows], batch.length[rows],
                        take(batch.keys, rows) if batch.keys is not None else None,
                        batch.file[rows], batch.row[rows])


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


_STATE_COLUMNS = ("doc_id", "doc_hash", "bands", "status", "survivor")
# Settled rows are sent to the closure as one bitmap per block of this many rows of a state
# file: 8 KB a block, a bit a document, whatever batches they arrived in.
MASK_ROWS = 1 << 16
# The closure reads the state table this many rows at a time (whole row groups, 8,192 rows as
# the writer makes them): each block asks every set it looks for once, so fewer, larger blocks
# cost less, and more memory (bench/settle_closure_bench.py at 1 M documents: 65,536 rows a
# block, 258 MB above the start and 12.2 s; 16,384 rows, 157 MB and 11.4 s).
BLOCK_ROWS = 1 << 14


def settled_rows(batch: SettledBatch, mask_rows: int = MASK_ROWS
                 ) -> Iterable[tuple[tuple[int, int], np.ndarray]]:
    """A settled batch -> ``((file, block), rows)``: where its documents' state rows lie, per
    block of ``mask_rows`` rows of a state file (positions within the block)."""
    if not len(batch):
        return
    blocks = batch.file * (1 << 40) + batch.row // mask_rows
    for code in np.unique(blocks).tolist():
        mine = blocks == code
        yield (code >> 40, code & ((1 << 40) - 1)), (batch.row[mine] % mask_rows).astype(np.int64)


def settled_mask(keyed: tuple[tuple[int, int], Iterable[np.ndarray]], mask_rows: int = MASK_ROWS
                 ) -> tuple[int, int, bytes]:
    """``((file, block), [rows])`` -> ``(file, block, bits)``: the block's settled rows as a
    bitmap (``numpy.packbits``, big-endian bit order)."""
    (file, block), parts = keyed
    bits = np.zeros(mask_rows, bool)
    for rows in parts:
        bits[rows] = True
    return file, block, np.packbits(bits).tobytes()


def _row_codes(file: int | np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A state row as one int64: its file (an index of StateSource.files) above its position."""
    return np.asarray(file, np.int64) * (1 << 40) + np.asarray(rows, np.int64)


def _exact_keys(table: pa.Table) -> pa.Array:
    """What exact duplicates share (``transforms/dedupe.py``'s exact key): the access
    digest of the principals, then the doc_hash."""
    hashes = table.column("doc_hash").combine_chunks()
    if "principals" not in table.schema.names or table.column("principals").null_count == table.num_rows:
        return hashes
    principals = table.column("principals").to_pylist()
    return pa.array([(access_digest(p) if p is not None else "") + h
                     for h, p in zip(hashes.to_pylist(), principals)], pa.string())


def _blocks_of_groups(metadata: pq.FileMetaData, block_rows: int) -> Iterator[list[int]]:
    """A file's row groups, consecutive ones together up to ``block_rows`` rows (at least one)."""
    groups: list[int] = []
    rows = 0
    for group in range(metadata.num_row_groups):
        groups.append(group)
        rows += metadata.row_group(group).num_rows
        if rows >= block_rows:
            yield groups
            groups, rows = [], 0
    if groups:
        yield groups


class _StateBlocks:
    """The previous state table read a block of row groups at a time, as
    :func:`affected_in_passes` asks at every pass: each block's settled live rows as
    :class:`StateRows`, and (the first time) its other live rows, those of documents changed or
    gone, as the touch they bring. Held between blocks: the settled bitmaps, a bit a document."""

    def __init__(self, source: StateSource, masks: Sequence[tuple[int, int, bytes]], bands: int,
                 damaged: Sequence[Any], chunk_shards: int, mask_rows: int = MASK_ROWS,
                 block_rows: int = BLOCK_ROWS) -> None:
        self.source, self.bands, self.chunk_shards, self.mask_rows = source, bands, chunk_shards, mask_rows
        self.block_rows = block_rows
        self.masks = {(file, block): bits for file, block, bits in masks}
        self.named = {d for d in damaged if isinstance(d, str)}
        self.damaged_shards = {d for d in damaged if isinstance(d, int)}
        self.settled = 0
        # Per block of a pass: its file, first row and settled rows (a bit each).
        self.groups: list[tuple[int, int, np.ndarray]] = []
        self.gone: list[tuple[int, str]] = []  # (state shard, doc_id) of every changed or gone row
        self._first = True

    def _settled_bits(self, file: int, first: int, rows: int) -> np.ndarray:
        size = self.mask_rows
        settled = np.zeros(rows, bool)
        for block in range(first // size, (first + rows - 1) // size + 1 if rows else 0):
            bits = self.masks.get((file, block))
            if bits is None:
                continue
            unpacked = np.unpackbits(np.frombuffer(bits, np.uint8)).astype(bool)
            low, high = max(first, block * size), min(first + rows, (block + 1) * size)
            settled[low - first:high - first] = unpacked[low - block * size:high - block * size]
        return settled

    def __call__(self) -> Iterator[StateRows]:
        first_pass, self._first = self._first, False
        for file, (path, deletions, shard) in enumerate(self.source.files):
            gone = np.asarray(sorted(deletions.positions()), np.int64)
            with FileSystems.open(path) as handle:
                held = pq.ParquetFile(handle)
                names = held.schema_arrow.names
                columns = list(_STATE_COLUMNS) + (["principals"] if "principals" in names else [])
                first = 0
                for groups in _blocks_of_groups(held.metadata, self.block_rows):
                    table = held.read_row_groups(groups, columns=columns)
                    yield self._block(file, shard, first, table, gone, first_pass)
                    first += table.num_rows

    def _block(self, file: int, shard: int, first: int, table: pa.Table, gone: np.ndarray,
               first_pass: bool) -> StateRows:
        rows = table.num_rows
        live = np.ones(rows, bool)
        live[gone[(gone >= first) & (gone < first + rows)] - first] = False
        settled = self._settled_bits(file, first, rows) & live
        touch = None
        if first_pass:
            old = live & ~settled
            self.settled += int(settled.sum())
            self.groups.append((file, first, np.packbits(settled)))
            if old.any():
                mine_old = table.filter(pa.array(old))
                touch = self._touch(mine_old)
                self.gone.extend((shard, doc_id) for doc_id in mine_old.column("doc_id").to_pylist())
        mine = table.filter(pa.array(settled))
        band_keys, signed = _band_matrix(mine.column("bands"), self.bands)
        return StateRows(mine.column("doc_id").combine_chunks(), _exact_keys(mine),
                         mine.column("survivor").combine_chunks(), band_keys, signed,
                         self._extra(mine), touch)

    def _touch(self, old: pa.Table) -> Touch:
        band_keys, signed = _band_matrix(old.column("bands"), self.bands)
        return Touch(old.column("doc_id").combine_chunks(), _exact_keys(old),
                     band_keys[signed].reshape(-1), old.column("survivor").combine_chunks())

    def _extra(self, rows: pa.Table) -> np.ndarray | None:
        """The settled kept documents whose previous chunks cannot be carried: a doc_id named
        damaged, or a chunk shard (int) whose previous file could not be read."""
        if not self.named and not self.damaged_shards:
            return None
        kept = pc.equal(rows.column("status"), "kept").to_numpy(zero_copy_only=False)
        return np.array([bool(is_kept) and (doc_id in self.named
                                            or shard_of(doc_id, self.chunk_shards) in self.damaged_shards)
                         for doc_id, is_kept in zip(rows.column("doc_id").to_pylist(), kept.tolist())], bool)


def _band_matrix(column: pa.ChunkedArray | pa.Array, bands: int) -> tuple[np.ndarray, np.ndarray]:
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
    """Once (an impulse) -> the settled documents dedupe may decide otherwise, as their state
    rows (one sorted int64 array of ``file << 40 | row``, tagged ``reached``), and what every
    shard's writers do not keep: ``(shard, Redecided)`` for each documents shard
    (``document_ids``) and each state shard (``state_ids``), and all those ids once
    (``redecided``, for the carry index).

    Side inputs: the settled bitmaps (:func:`settled_mask`), the touches of the documents the
    run processes (:class:`Touches`, :func:`rejected_touch`), and the doc_ids or chunk shards
    whose previous rows cannot be carried (``damaged``). The state table is read a row group at
    a time, a pass per round of the closure (``chunkline.settle.affected_in_passes``): what
    this worker holds grows with the change and a bit per settled document, not with the
    corpus."""

    def __init__(self, state: StateSource, bands: int, max_bucket_pairs: int,
                 document_shards: int, chunk_shards: int, mask_rows: int = MASK_ROWS,
                 block_rows: int = BLOCK_ROWS) -> None:
        self.state, self.bands, self.max_bucket_pairs = state, bands, max_bucket_pairs
        self.mask_rows, self.block_rows = mask_rows, block_rows
        self.document_shards, self.chunk_shards = document_shards, chunk_shards
        self.passed = Metrics.counter("settle", "passed")
        self.affected = Metrics.counter("settle", "dedupe_affected")
        self.passes = Metrics.counter("settle", "passes")

    def process(self, _: Any, masks: Sequence[tuple[int, int, bytes]], touches: Sequence[tuple],
                damaged: Sequence[Any]):
        blocks = _StateBlocks(self.state, masks, self.bands, damaged, self.chunk_shards, self.mask_rows,
                              self.block_rows)
        touch = Touch(pa.array([t[0] for t in touches], pa.string()),
                      pa.array([t[1] for t in touches if t[1] is not None], pa.string()),
                      np.concatenate([np.zeros(0, np.uint64), *(t[2] for t in touches if t[2] is not None)]),
                      pa.array([], pa.string()))
        passes = [0]
        reached_ids: dict[int, list[str]] = {}  # per block, the ids its rows marked at the last pass

        def read() -> Iterator[StateRows]:
            passes[0] += 1
            return blocks()

        def seen(block: int, rows: StateRows, hit: np.ndarray) -> None:
            if hit.any():
                reached_ids[block] = rows.doc_id.filter(pa.array(hit)).to_pylist()

        marked = affected_in_passes(read, touch, max_bucket_pairs=self.max_bucket_pairs, marked=seen)
        self.passes.inc(passes[0])
        codes = np.sort(np.concatenate([np.zeros(0, np.int64)] + [
            _row_codes(file, first + np.flatnonzero(np.unpackbits(bits).astype(bool))[at])
            for (file, first, bits), at in zip(blocks.groups, marked) if len(at)]))
        self.affected.inc(len(codes))
        self.passed.inc(blocks.settled - len(codes))
        yield beam.pvalue.TaggedOutput(REACHED, codes)
        yield from self._redecided(blocks, reached_ids)

    def _redecided(self, blocks: _StateBlocks, reached_ids: dict[int, list[str]]) -> Iterable[Any]:
        by_state: dict[int, list[str]] = {shard: [] for shard in range(self.state.shards)}
        for shard, doc_id in blocks.gone:
            by_state[shard].append(doc_id)
        for block, ids in reached_ids.items():
            by_state[self.state.files[blocks.groups[block][0]][2]].extend(ids)
        every = sorted({doc_id for ids in by_state.values() for doc_id in ids})
        by_documents: dict[int, list[str]] = {shard: [] for shard in range(self.document_shards)}
        for doc_id in every:
            by_documents[shard_of(doc_id, self.document_shards) if self.document_shards > 1 else 0].append(doc_id)
        for shard, ids in sorted(by_documents.items()):
            yield beam.pvalue.TaggedOutput(DOCUMENT_IDS, (shard, Redecided(tuple(ids))))
        for shard, ids in sorted(by_state.items()):
            yield beam.pvalue.TaggedOutput(STATE_IDS, (shard, Redecided(tuple(sorted(set(ids))))))
        yield beam.pvalue.TaggedOutput(REDECIDED, pa.array(every, pa.string()))


class ReachedPlaces(beam.DoFn):
    """A settled batch, with the reached state rows (:class:`Affected`) -> the places of its
    documents among them: they are read again."""

    def process(self, batch: SettledBatch, reached: np.ndarray) -> Iterable[Place]:
        if not len(batch) or not len(reached):
            return
        hit = np.isin(_row_codes(batch.file, batch.row), reached)
        if hit.any():
            yield from _places(batch, np.flatnonzero(hit))


class SettledOutputs(NamedTuple):
    places: Any  # PCollection[Place]: settled documents dedupe may decide otherwise
    document_ids: Any  # PCollection[(shard, Redecided)]
    state_ids: Any  # PCollection[(shard, Redecided)]
    redecided: Any  # PCollection[pa.Array], one element: every document decided again


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
