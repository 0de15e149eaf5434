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
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from chunkline.memo import BLOCK

STATE_TABLE = "state"

_COUNTED = b"B"  # what boilerplate counted: the text's doc_hash (32 bytes) and its line keys
_BANDS = b"N"  # the band keys dedupe's LSH bucketed the (stripped) text by
_LENGTH = struct.Struct("<I")


class Counted(NamedTuple):
    """A document's parts, unpacked: None where the stage is off for the run."""

    text_hash: bytes | None = None  # 32 bytes: chunkline.records.doc_hash of the text counted
    line_keys: np.ndarray | None = None  # uint64: boilerplate's candidate keys of that text
    bands: np.ndarray | None = None  # uint64: the band keys of the text dedupe signed


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


def unpack(packed: bytes) -> Counted:
    """The parts a document carries. A part recorded twice (a stage run again on a retried
    bundle) is the later one's: both are of the same text."""
    text_hash = line_keys = bands = None
    at = 0
    while at < len(packed):
        tag = packed[at:at + 1]
        if tag == _COUNTED:
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
    return Counted(text_hash, line_keys, bands)


def state_schema(principals: bool = False) -> pa.Schema:
    """The state table: one row per document dedupe decided on (kept or duplicate)."""
    return pa.schema([
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("uri", pa.string(), nullable=False),
        pa.field("position", pa.int64(), nullable=False),
        pa.field("input_digest", pa.string(), nullable=False),
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
    return StateRow(doc_id, uri, position, input_digest, parts.text_hash,
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
