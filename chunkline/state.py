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

import struct
from collections import OrderedDict
from typing import BinaryIO, Callable, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from chunkline.index.layout import shard_name, shard_of
from chunkline.index.tables import Deletions
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
        # A record of a plain JSONL file: its line's bytes there (null for any other document).
        pa.field("offset", pa.int64(), nullable=True),
        pa.field("length", pa.int64(), nullable=True),
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
    offset: int | None
    length: int | None
    text_hash: bytes | None
    line_keys: tuple[int, ...] | None
    doc_hash: str
    bands: tuple[int, ...] | None
    status: str
    survivor: str
    principals: tuple[str, ...] | None = None


def state_row(doc_id: str, uri: str, position: int, input_digest: str, counted: bytes,
              doc_hash: str, status: str, duplicate_of: str | None,
              principals: tuple[str, ...] | None) -> StateRow:
    """The row of a decided document: ``counted`` is what the stages recorded on it."""
    parts = unpack(counted)
    return StateRow(doc_id, uri, position, input_digest, parts.offset, parts.length, parts.text_hash,
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


_LOOKUP_COLUMNS = ("uri", "position", "doc_id", "input_digest")


class PreviousState:
    """The previous run's state rows of the units a reader asks for (a file, a block of a
    dump's records: :func:`state_shard_key`), loaded when first asked and held while they fit
    ``held`` units (the least recently asked let go first): the pieces of one unit are read one
    after another, so each is loaded about once. A unit's rows are found by the row groups'
    statistics (the files are sorted by place), so a reader never holds a whole shard."""

    def __init__(self, source: StateSource, open_file: Callable[[str], BinaryIO],
                 held: int = 4) -> None:
        self.source, self.open_file, self.held = source, open_file, held
        self._by_shard: dict[int, list[tuple[str, Deletions]]] = {}
        for path, deleted, shard in source.files:
            self._by_shard.setdefault(shard, []).append((path, deleted))
        self._metadata: dict[str, pq.FileMetaData] = {}
        self._loaded: OrderedDict[tuple[str, int], dict[int, tuple[str, str]]] = OrderedDict()
        self.loads = 0

    def row_of(self, uri: str, position: int) -> tuple[str, str] | None:
        """(doc_id, input digest) of the previous run's row for the document read at
        ``position`` of ``uri``; None without one (or with a damaged file: then it is read as new)."""
        unit = (uri, position // BLOCK)
        found = self._loaded.get(unit)
        if found is None:
            found = self._load(uri, unit[1])
            self._loaded[unit] = found
            while len(self._loaded) > self.held:
                self._loaded.popitem(last=False)
        else:
            self._loaded.move_to_end(unit)
        return found.get(position)

    def _load(self, uri: str, block: int) -> dict[int, tuple[str, str]]:
        self.loads += 1
        low, high = block * BLOCK, (block + 1) * BLOCK
        shard = shard_of(f"{block}\0{uri}", self.source.shards)
        rows: dict[int, tuple[str, str]] = {}
        for path, deleted in self._by_shard.get(shard, ()):
            try:
                rows.update(self._rows_in(path, frozenset(deleted.positions()), uri, low, high))
            except Exception:  # noqa: BLE001 - a damaged state file: its documents are read as new
                continue
        return rows

    def _rows_in(self, path: str, deleted: frozenset[int], uri: str, low: int, high: int
                 ) -> dict[int, tuple[str, str]]:
        with self.open_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            metadata = parquet.metadata
            names = parquet.schema_arrow.names
            uri_at, position_at = names.index("uri"), names.index("position")
            found: dict[int, tuple[str, str]] = {}
            start = 0
            for group in range(metadata.num_row_groups):
                columns = metadata.row_group(group)
                count = columns.num_rows
                first = start
                start += count
                if not _may_hold(columns.column(uri_at).statistics,
                                 columns.column(position_at).statistics, uri, low, high):
                    continue
                table = parquet.read_row_group(group, columns=list(_LOOKUP_COLUMNS))
                uris, positions = table.column("uri").to_pylist(), table.column("position").to_pylist()
                ids, digests = table.column("doc_id").to_pylist(), table.column("input_digest").to_pylist()
                for offset in range(count):
                    if (uris[offset] == uri and low <= positions[offset] < high
                            and first + offset not in deleted):
                        found[positions[offset]] = (ids[offset], digests[offset])
            return found


def _may_hold(uris: pq.Statistics | None, positions: pq.Statistics | None, uri: str, low: int,
              high: int) -> bool:
    """Whether a row group with these statistics may hold a row of ``uri`` at a position in
    [low, high): without statistics, it may."""
    if uris is None or not uris.has_min_max:
        return True
    if not uris.min <= uri <= uris.max:
        return False
    if uris.min == uris.max and positions is not None and positions.has_min_max:
        return positions.max >= low and positions.min < high
    return True
