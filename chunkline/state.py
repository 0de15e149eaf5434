"""What the corpus-wide stages decided on, per document, kept with each run: the ``state`` table.

Boilerplate removal and deduplication decide on the whole corpus, so a rerun cannot take one
document's result from the previous run without knowing what every other document contributed:
the line keys boilerplate counted (and the text they were counted for), the band keys and hash
dedupe grouped by, and what was decided (kept, or a duplicate of which survivor). Each run keeps
exactly that as a table, one row per document that reached dedupe, by the place it was read
(uri and position), so that a rerun can read an unchanged document's part where the document
is read and pass only what changed through the stages (docs/ARCHITECTURE.md, "A rerun whose work
follows the change"). Like the documents table, it is merged on read: a rerun's rows equal to
the previous run's stay in the previous files.

The stages that compute a part record it on the document as it travels (``Document.counted``,
:func:`pack_counted` / :func:`pack_bands`); the stage that releases a decided document makes
its row (:func:`state_row`).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import struct
from collections import OrderedDict
from typing import BinaryIO, Callable, NamedTuple, Sequence, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from chunkline.index.layout import shard_name, shard_of
from chunkline.index.tables import Deletions
from chunkline.key_sets import KeySets, from_arrays, text_hash
from chunkline.memo import BLOCK

STATE_TABLE = "state"

_COUNTED = b"B"  # what boilerplate counted: the text's doc_hash (32 bytes) and its line keys
_BANDS = b"N"  # the band keys dedupe's LSH bucketed the (stripped) text by
_PLACE = b"P"  # a record's bytes in its file (offset, length): read again from there alone
_SPAN = struct.Struct("<QI")
_LENGTH = struct.Struct("<I")


class Counted(NamedTuple):
    """A document's parts, unpacked: None where the stage is off for the run."""

    text_hash: bytes | None = None  # 32 bytes: chunkline.records.doc_hash of the text counted
    line_keys: np.ndarray | None = None  # uint64: boilerplate's candidate keys of that text
    bands: np.ndarray | None = None  # uint64: the band keys of the text dedupe signed
    offset: int | None = None  # where the reader found a record's line in its file (plain JSONL)
    length: int | None = None  # ... and its bytes there


def pack_counted(text_hash_hex: str, keys: bytes) -> bytes:
    """Boilerplate's part: the counted text's hash (hex, as ``doc_hash`` gives it) and its keys
    as ``key_array`` bytes (little-endian uint64)."""
    digest = bytes.fromhex(text_hash_hex)
    if len(digest) != 32 or len(keys) % 8:
        raise ValueError("a counted text's hash is 32 bytes and its keys whole uint64s")
    return _COUNTED + digest + _LENGTH.pack(len(keys) // 8) + keys


def pack_bands(bands: np.ndarray) -> bytes:
    """Dedupe's part: the band keys of one document (uint64, in band order)."""
    data = np.ascontiguousarray(bands, dtype="<u8").tobytes()
    return _BANDS + _LENGTH.pack(len(data) // 8) + data


def pack_place(offset: int, length: int) -> bytes:
    """The reader's part: a record's line at ``offset`` of its (plain, uncompressed) file,
    ``length`` bytes with its line break, so that a rerun reads that record alone again."""
    return _PLACE + _SPAN.pack(offset, length)


def unpack(packed: bytes) -> Counted:
    """The parts a document carries. A part recorded twice (a stage run again on a retried
    bundle) is the later one's: both are of the same text."""
    text_hash = line_keys = bands = None
    offset = length = None
    at = 0
    while at < len(packed):
        tag = packed[at:at + 1]
        if tag == _PLACE:
            offset, length = _SPAN.unpack_from(packed, at + 1)
            at += 1 + _SPAN.size
        elif tag == _COUNTED:
            text_hash = packed[at + 1:at + 33]
            (count,) = _LENGTH.unpack_from(packed, at + 33)
            start = at + 37
            line_keys = np.frombuffer(packed, dtype="<u8", count=count, offset=start)
            at = start + 8 * count
        elif tag == _BANDS:
            (count,) = _LENGTH.unpack_from(packed, at + 1)
            start = at + 5
            bands = np.frombuffer(packed, dtype="<u8", count=count, offset=start)
            at = start + 8 * count
        else:
            raise ValueError(f"a document's counted parts are damaged at byte {at}")
    return Counted(text_hash, line_keys, bands, offset, length)


def state_schema(principals: bool = False) -> pa.Schema:
    """The state table: one row per document dedupe decided on (kept or duplicate)."""
    return pa.schema([
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("uri", pa.string(), nullable=False),
        pa.field("position", pa.int64(), nullable=False),
        pa.field("input_digest", pa.string(), nullable=False),
        # What the documents row holds beside the input: the file's facts and the codec
        # (:func:`facts_digest`). A touched file keeps its input digest, not its row.
        pa.field("facts", pa.string(), nullable=False),
        # Boilerplate's part (null with boilerplate off): the text it counted and that text's keys.
        pa.field("text_hash", pa.binary(32), nullable=True),
        pa.field("line_keys", pa.list_(pa.uint64()), nullable=True),
        # Dedupe's: the exact-duplicate hash of the final text, its band keys (null with near
        # duplicates off, or a text without shingles), the decision and its component's survivor.
        pa.field("doc_hash", pa.string(), nullable=False),
        pa.field("bands", pa.list_(pa.uint64()), nullable=True),
        pa.field("status", pa.string(), nullable=False),
        pa.field("survivor", pa.string(), nullable=False),
        *([pa.field("principals", pa.list_(pa.string()), nullable=True)] if principals else []),
    ])


class StateRow(NamedTuple):
    """One row of the state table, as a stage emits it."""

    doc_id: str
    uri: str
    position: int
    input_digest: str
    facts: str
    text_hash: bytes | None
    line_keys: tuple[int, ...] | None
    doc_hash: str
    bands: tuple[int, ...] | None
    status: str
    survivor: str
    principals: tuple[str, ...] | None = None


@functools.lru_cache(maxsize=1 << 12)
def facts_digest(encoding: str, metadata_json: str) -> str:
    """What a document's row in the documents table holds beside what ``input_digest`` covers:
    the codec its bytes were decoded with and its metadata with the file's facts (size, time)."""
    return hashlib.blake2b(f"{encoding}\0{metadata_json}".encode("utf-8", "surrogatepass"),
                           digest_size=16).hexdigest()


def state_row(doc_id: str, uri: str, position: int, input_digest: str, facts: str, counted: bytes,
              doc_hash: str, status: str, duplicate_of: str | None,
              principals: tuple[str, ...] | None) -> StateRow:
    """The row of a decided document: ``counted`` is what the stages recorded on it."""
    parts = unpack(counted)
    return StateRow(doc_id, uri, position, input_digest, facts, parts.text_hash,
                    tuple(parts.line_keys.tolist()) if parts.line_keys is not None else None,
                    doc_hash,
                    tuple(parts.bands.tolist()) if parts.bands is not None else None,
                    status, duplicate_of if duplicate_of is not None else doc_id, principals)


def state_shard_key(row: StateRow) -> str:
    """The rows of one unit of placement (a file, a block of a dump's records:
    ``chunkline.memo.unit_share``'s unit) share a shard, so a reader of that unit reads one."""
    return f"{row.position // BLOCK}\0{row.uri}"


def state_sort_key(row: StateRow) -> tuple[str, int, str]:
    """Rows by place, as a rerun's reader looks them up."""
    return row.uri, row.position, row.doc_id


def state_to_row(row: StateRow, schema: pa.Schema) -> dict:
    values = row._asdict()
    if "principals" not in schema.names:
        values.pop("principals")
    return values


class StateSource(NamedTuple):
    """The previous run's state table as its files (path, deleted row positions, shard) and its
    shard count; what a reader looks a document's row up in."""

    files: tuple[tuple[str, Deletions, int], ...]
    shards: int


def state_source(files: Sequence[tuple[str, Deletions | Sequence[int]]]) -> StateSource | None:
    """The source of a run's state files (``<run>/state-SSSSS-of-NNNNN.parquet``, with their
    deleted rows: by reference, read where a reader needs them, or as positions); None when
    there are none or they disagree on the shard count."""
    named = [(path, deleted if isinstance(deleted, Deletions) else Deletions.listed(tuple(deleted)),
              shard_name(path)) for path, deleted in files]
    counts = {name[2] for _, _, name in named if name is not None}
    if not named or len(counts) != 1 or any(name is None for _, _, name in named):
        return None
    return StateSource(tuple((path, deleted, name[1]) for path, deleted, name in named if name),
                       counts.pop())


_LOOKUP_COLUMNS = ("uri", "position", "doc_id", "input_digest", "facts", "text_hash", "line_keys")


class Found(NamedTuple):
    """What a reader needs of a document's previous row: whether it is the same document as
    read then (id, input, facts), and what boilerplate counted of it (None: boilerplate off)."""

    doc_id: str
    input_digest: str
    facts: str
    text_hash: bytes | None
    line_keys: np.ndarray | None  # uint64
    file: int = -1  # the row's file, as an index of StateSource.files
    row: int = -1  # ... and its position in that file


class _Group(NamedTuple):
    """A decoded row group: each live place's row, and the group's line keys as arrays. A
    group of one uri (a dump's) finds a row by binary search of its sorted positions; one of
    many uris by a dictionary of its places."""

    at: dict[tuple[str, int], int] | None
    uri: str | None  # the group's only uri
    positions: np.ndarray  # int64, sorted (a group of one uri), with a live row each
    rows: np.ndarray  # int64: the row of each of ``positions``
    doc_ids: list[str]
    digests: list[str]
    facts: list[str]
    text_hashes: list[bytes | None]
    key_offsets: np.ndarray  # int64, rows + 1
    keys: np.ndarray  # uint64
    key_valid: np.ndarray  # bool: a row with line keys

    def row(self, uri: str, position: int) -> int | None:
        if self.at is not None:
            return self.at.get((uri, position))
        if uri != self.uri:
            return None
        at = int(np.searchsorted(self.positions, position))
        return int(self.rows[at]) if at < len(self.positions) and self.positions[at] == position else None

    def found(self, row: int, file: int, first_row: int) -> Found:
        keys = (self.keys[self.key_offsets[row]:self.key_offsets[row + 1]]
                if self.key_valid[row] else None)
        return Found(self.doc_ids[row], self.digests[row], self.facts[row], self.text_hashes[row], keys,
                     file, first_row + row)


class _FileIndex(NamedTuple):
    """A state file's row groups as their statistics bound them (the file is sorted by place,
    so the uri bounds rise from group to group): what a lookup bisects instead of opening every
    group."""

    uri_min: list[str]
    uri_max: list[str]
    position_min: list[int | None]
    position_max: list[int | None]
    first_row: list[int]
    unbounded: bool = False  # a group without position statistics: no bisection by position


class PreviousState:
    """The previous run's state rows, looked up by place: each file's row-group statistics read
    once, a lookup bisecting them to the group that may hold the place (the files are sorted
    by place), and the ``held`` groups last asked for kept decoded (the documents of one unit
    are read one after another, so each group is decoded about once). A reader never holds a
    whole shard, and a document costs a hash, a bisection and a dictionary lookup."""

    def __init__(self, source: StateSource, open_file: Callable[[str], BinaryIO],
                 held: int = 8) -> None:
        self.source, self.open_file, self.held = source, open_file, held
        self._by_shard: dict[int, list[tuple[int, str, Deletions]]] = {}
        for file, (path, deleted, shard) in enumerate(source.files):
            self._by_shard.setdefault(shard, []).append((file, path, deleted))
        self._indexes: dict[str, _FileIndex | None] = {}
        self._decoded: OrderedDict[tuple[str, int], _Group] = OrderedDict()
        self._deleted: dict[str, frozenset[int]] = {}
        self.loads = 0  # row groups decoded

    def row_of(self, uri: str, position: int) -> tuple[str, str] | None:
        """(doc_id, input digest) of the previous run's row for the document read at
        ``position`` of ``uri``; None without one (or with a damaged file: then it is read as new)."""
        found = self.found(uri, position)
        return (found.doc_id, found.input_digest) if found is not None else None

    def found(self, uri: str, position: int) -> Found | None:
        """The previous run's row for the document read at ``position`` of ``uri`` (what
        :class:`Found` holds); None without one (or with a damaged file: then it is read as new)."""
        shard = shard_of(f"{position // BLOCK}\0{uri}", self.source.shards)
        for file, path, deleted in self._by_shard.get(shard, ()):
            index = self._index(path)
            if index is None:
                continue
            for group in _candidate_groups(index, uri, position):
                if not _may_hold(index, group, uri, position):
                    continue
                rows = self._rows(path, deleted, group, index)
                row = rows.row(uri, position) if rows is not None else None
                if row is not None and rows is not None:
                    return rows.found(row, file, index.first_row[group])
        return None

    def _index(self, path: str) -> _FileIndex | None:
        if path not in self._indexes:
            try:
                with self.open_file(path) as handle:
                    metadata = pq.ParquetFile(handle).metadata
                names = metadata.schema.to_arrow_schema().names
                uri_at, position_at = names.index("uri"), names.index("position")
                index = _FileIndex([], [], [], [], [])
                first = 0
                for group in range(metadata.num_row_groups):
                    columns = metadata.row_group(group)
                    uris, positions = columns.column(uri_at).statistics, columns.column(position_at).statistics
                    if uris is None or not uris.has_min_max:
                        raise ValueError("a state file without statistics")  # not ours: read as new
                    index.uri_min.append(uris.min)
                    index.uri_max.append(uris.max)
                    bounded = positions is not None and positions.has_min_max
                    index.position_min.append(positions.min if bounded else None)
                    index.position_max.append(positions.max if bounded else None)
                    index.first_row.append(first)
                    first += columns.num_rows
                if any(bound is None for bound in index.position_max):
                    index = index._replace(unbounded=True)
                self._indexes[path] = index
            except Exception:  # noqa: BLE001 - a damaged state file: its documents are read as new
                self._indexes[path] = None
        return self._indexes[path]

    def _rows(self, path: str, deleted: Deletions, group: int, index: _FileIndex) -> _Group | None:
        key = (path, group)
        found = self._decoded.get(key)
        if found is not None:
            self._decoded.move_to_end(key)
            return found
        try:
            gone = self._deleted.get(path)
            if gone is None:
                gone = self._deleted[path] = frozenset(deleted.positions())
            with self.open_file(path) as handle:
                table = pq.ParquetFile(handle).read_row_group(group, columns=list(_LOOKUP_COLUMNS))
        except Exception:  # noqa: BLE001 - a damaged state file: its documents are read as new
            return None
        self.loads += 1
        first = index.first_row[group]
        column = table.column
        live = np.ones(table.num_rows, bool)
        if gone:
            live[[at - first for at in gone if first <= at < first + table.num_rows]] = False
        single = index.uri_min[group] if index.uri_min[group] == index.uri_max[group] else None
        at: dict[tuple[str, int], int] | None = None
        positions = rows = np.zeros(0, np.int64)
        if single is None:
            places = zip(column("uri").to_pylist(), column("position").to_pylist())
            at = {place: row for row, place in enumerate(places) if live[row]}
        else:
            rows = np.flatnonzero(live)
            positions = column("position").to_numpy().astype(np.int64)[rows]
            order = np.argsort(positions, kind="stable")  # sorted as written; sorted again if not
            positions, rows = positions[order], rows[order]
        keys = column("line_keys").combine_chunks()
        valid = (np.ones(len(keys), bool) if keys.null_count == 0
                 else np.asarray(keys.is_valid().to_numpy(zero_copy_only=False), bool))
        offsets = keys.offsets.to_numpy().astype(np.int64)
        found = _Group(
            at, single, positions, rows,
            column("doc_id").to_pylist(), column("input_digest").to_pylist(), column("facts").to_pylist(),
            column("text_hash").to_pylist(), offsets - offsets[0] if len(offsets) else np.zeros(1, np.int64),
            keys.values.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)[
                offsets[0]:offsets[-1]] if len(offsets) else np.empty(0, np.uint64),
            valid)
        self._decoded[key] = found
        while len(self._decoded) > self.held:
            self._decoded.popitem(last=False)
        return found


def _candidate_groups(index: _FileIndex, uri: str, position: int) -> Sequence[int]:
    """The row groups of a file (sorted by place) that may hold ``position`` of ``uri``. The
    groups strictly between the first and the last whose uri bounds admit ``uri`` hold that
    uri alone, in position order (the file is sorted), so those are bisected by position: a
    dump of a million records is one uri over a hundred groups, and a scan of each group's
    bounds per lookup made a rerun's read quadratic in the dump's size."""
    low = bisect.bisect_left(index.uri_max, uri)
    high = bisect.bisect_right(index.uri_min, uri)
    if high - low <= 2 or index.unbounded:
        return range(low, high)
    bounds = cast(list[int], index.position_max)  # none is None: not unbounded
    inner = bisect.bisect_left(bounds, position, low + 1, high - 1)
    return (low, inner, high - 1) if inner < high - 1 else (low, high - 1)


def _may_hold(index: _FileIndex, group: int, uri: str, position: int) -> bool:
    """Whether a row group may hold the row at ``position`` of ``uri``, by its statistics."""
    if index.uri_min[group] == index.uri_max[group] == uri:
        low, high = index.position_min[group], index.position_max[group]
        return low is None or high is None or low <= position <= high
    return True


class SettledBatch(NamedTuple):
    """Documents a rerun read as the previous run's state rows hold them (same id, input and
    facts at the same place): not passed on as documents, only as these arrays. ``offset`` and
    ``length``: a plain JSONL record's line bytes as this run found them (-1: read with its
    file); ``keys``: what boilerplate counted of each, in the same order (None with boilerplate
    off)."""

    doc_id: tuple[str, ...]
    uri: tuple[str, ...]
    position: np.ndarray  # int64
    offset: np.ndarray  # int64
    length: np.ndarray  # int64
    keys: KeySets | None
    # Each one's previous state row: its file (an index of StateSource.files) and position there.
    file: np.ndarray = np.zeros(0, np.int64)
    row: np.ndarray = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.doc_id)


class SettledBuilder:
    """A bundle's settled documents gathered into one :class:`SettledBatch`."""

    def __init__(self) -> None:
        self._rows: list[tuple[str, str, int, int, int, int, int]] = []
        self._hashes: list[bytes] = []
        self._keys: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, doc_id: str, uri: str, position: int, counted: bytes, found: Found) -> None:
        place = unpack(counted) if counted else Counted()
        self._rows.append((doc_id, uri, position,
                           -1 if place.offset is None else place.offset,
                           -1 if place.length is None else place.length, found.file, found.row))
        if found.text_hash is not None:
            self._hashes.append(text_hash(found.text_hash))
            self._keys.append(found.line_keys if found.line_keys is not None else np.empty(0, np.uint64))

    def take(self) -> SettledBatch:
        rows, hashes, keys = self._rows, self._hashes, self._keys
        self._rows, self._hashes, self._keys = [], [], []
        if hashes and len(hashes) != len(rows):
            raise ValueError("settled documents with and without boilerplate's keys in one batch")
        doc_ids, uris, positions, offsets, lengths, files, at = zip(*rows) if rows else ((),) * 7
        return SettledBatch(tuple(doc_ids), tuple(uris), np.array(positions, np.int64),
                            np.array(offsets, np.int64), np.array(lengths, np.int64),
                            from_arrays(hashes, keys) if hashes else None,
                            np.array(files, np.int64), np.array(at, np.int64))
