"""Results of pure per-text functions kept with a run, so the next run does not compute them again.

A nightly rerun sees mostly the texts it saw the night before. The corpus-wide stages must still
see every document (a line turns boilerplate, a near twin arrives: what a full rebuild decides
is decided again), but what they ask of one text is a pure function of that text and the
stage's settings: whether cleaning changes it, its boilerplate candidate keys and which lines
the frequent ones drop, its exact-duplicate hash, its MinHash signature, what the credential
scan finds in it (kinds and places, never a value). Each such result is recorded under a
128-bit key (BLAKE2b of the function's name, its settings, the code that computes it and the
text), with the document it was asked for (:func:`doc_ref`: its source and place in it), in
Parquet segments (``key``, ``value``, ``doc``) under the run's ``memo/`` folder.

The memo is a log, as a merge-on-read table is (Apache Iceberg's and Delta Lake's snapshots
listing data files that earlier commits wrote): a run writes as segments only the results it
computed, and the manifest's ``memo`` table lists the run's live segments, its own and the
earlier runs' it still recalls from (paths relative to OUTPUT, each with its kind, share, rows,
bytes, ``age`` in runs and ``used``: the entries the run recalled from it), so a rerun with
nothing changed writes none. Each recall is counted against the listed segment it came from
(:func:`pack` carries each entry's segment ordinal; Beam counters sum them, namespace
``memo_segments``). Growth is bounded by :func:`retired`: a segment the previous run used less
than :data:`MIN_USED` of (the rest is results of texts gone or changed), or that would be older
than :data:`MAX_AGE` runs, is due; a run retires due segments up to a budget (about a
thirty-second of the memo's bytes, so the rewriting spreads over nights) and every segment
past :data:`HARD_MIN_USED` or :data:`HARD_MAX_AGE`; a retired segment is not listed again and
what this run recalls from it is written again in its own segments, so nothing recalled is lost
and at most about a quarter of the listed rows (plus one run's changes; half at the hard bound)
is dead weight. ``chunkline gc`` keeps exactly the files kept
runs list, segments of earlier runs included, so a run published or rolled back to still
recalls its memo.

The memo is cut into shares by where a document is read from (:func:`unit_share`: a file, or a
block of :data:`BLOCK` records of a dump), a segment per kind, share and bundle. The reader of a
file or piece loads only the shares of what it reads (:class:`RecalledShares`, a few at a time)
and hands each document its previous results (``Document.memo``, :func:`pack`); they travel
with the document through the later stages, which look there first and add what they compute
that a later stage asks for again, so no stage needs the whole memo in memory and a result
computed in one worker process is recalled in another. The number of shares follows the
previous memo's size (:func:`shares_for`): a share is about :data:`SHARE_BYTES` on disk whatever
the corpus, so there is no size at which the memo stops being loaded; a run whose share count
changes retires every listed segment (a listing is cut one way).

A lost, damaged or mismatched segment costs time, never a wrong result: a key is only ever
equal for the same function, settings, code and text, and a segment that cannot be read is
skipped (its texts are computed again); a document that finds nothing on itself computes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from chunkline.index.compaction import rewrite_budget
from chunkline.key_sets import span_positions
from chunkline.records import framed_digest_bytes, text_digest

log = logging.getLogger("chunkline.memo")

MEMO_DIR = "memo"
# The manifest's table listing the run's memo segments (no reader's rows: publish does not
# require them, gc keeps them with their run).
MEMO_TABLE = "memo"

CREDENTIALS = "credentials"  # value b"": the scan found nothing; else JSON of each finding's kind
                             # and place (never the value)
LINE_KEYS = "line_keys"  # value: the sorted uint64 candidate keys, little-endian
SIGNATURE = "signature"  # value: the MinHash signature as little-endian uint32 (b"": no shingles)
CLEAN = "clean"  # value b"": cleaning leaves the text and its page starts as they are
DOC_HASH = "doc_hash"  # value: chunkline.records.doc_hash's 32 bytes
STRIP = "strip"  # value: JSON {"drop": line indexes, "found": {key: line shown}} for a text and
                 # the frequent keys it holds
READ = "read"  # value: what a file made (documents and rejections, Beam-encoded), under its
               # path, size and time: only with input.trust_file_metadata. Its ``doc`` is the
               # piece's, and it is looked up by key where the piece is read, never carried.
KINDS = (CREDENTIALS, LINE_KEYS, SIGNATURE, CLEAN, DOC_HASH, STRIP, READ)
# Kinds whose values are text (JSON, encoded documents): their segments are zstd-compressed. The
# others hold digests, hash keys and signatures, random bytes no codec shrinks: written plain,
# a run spends no time compressing what it rewrites every night.
COMPRESSED_KINDS = (CREDENTIALS, STRIP, READ)
# A bundle's results go to segments once they are this many, not only when the bundle ends:
# the in-process runner reads a whole input as one bundle.
SEGMENT_ENTRIES = 16_384
# Records of a dump per unit of placement: a piece of a dump (JSONL lines, Parquet rows) loads
# the shares of the blocks it spans, whatever its cut points; a whole file is one unit.
BLOCK = 4096
# On-disk bytes of the previous memo per share: what the reader of a piece holds at a time
# (times :data:`SHARES_HELD`), however big the memo.
SHARE_BYTES = 16 << 20
MIN_SHARES = 16  # so that the reads of even a small corpus spread over workers
MAX_SHARES = 1 << 16
SHARES_HELD = 4
_LENGTH = 4  # bytes of a value's length (and of its segment's ordinal) in a packed entry
# The segment ordinal of an entry this run computed, or recalled and already recorded: never
# counted as recalled from a listed segment, never recorded again (``pack``).
HERE = (1 << 32) - 1
# A run lists an earlier run's segment (instead of writing its entries again) while the run
# before it used at least this share of its rows, and for at most MAX_AGE runs after the run
# that wrote it (``retired``) -- as far as the run's rewrite budget reaches: past it, until
# the segment is HARD_MIN_USED used or HARD_MAX_AGE runs old.
MIN_USED = 0.8
MAX_AGE = 16
HARD_MIN_USED = 0.5
HARD_MAX_AGE = 4 * MAX_AGE
# What one run may rewrite of segments that are due (sparse or old) but not past the hard
# bounds: a share of the listed memo's bytes, or compaction's REWRITE_FLOOR when that is more
# (chunkline.index.compaction.rewrite_budget, the tables' budget too). A memo's
# segments age and thin out together (a nightly change is spread evenly over them), so without
# a budget one night rewrites the whole memo; with it, that work spreads over about
# MEMO_REWRITE_SHARE**-1 nights (the partial progress of Iceberg's rewrite_data_files,
# https://iceberg.apache.org/docs/latest/maintenance/#compact-data-files). 1/32 keeps up with
# 1 % of the documents changing a night at about a quarter of a segment's rows dead.
MEMO_REWRITE_SHARE = 1 / 32


def memo_schema() -> pa.Schema:
    return pa.schema([pa.field("key", pa.binary(16), nullable=False),
                      pa.field("value", pa.binary(), nullable=False),
                      pa.field("doc", pa.binary(16), nullable=False)])


def shares_for(previous_bytes: int) -> int:
    """Shares for a memo after one of ``previous_bytes`` on disk: a power of two near
    ``previous_bytes / SHARE_BYTES``, within :data:`MIN_SHARES`..:data:`MAX_SHARES`."""
    wanted = -(-previous_bytes // SHARE_BYTES)
    shares = MIN_SHARES
    while shares < wanted and shares < MAX_SHARES:
        shares *= 2
    return shares


def unit_share(uri: str, position: int, shares: int) -> int:
    """The share holding the results of the document read at ``position`` (a record's line or
    row; 0 for a whole file) of ``uri``: CRC-32 of the unit, stable across processes and runs
    (never ``hash()``, which Python salts per process)."""
    unit = f"{position // BLOCK}\0{uri}".encode("utf-8", "surrogatepass")
    return zlib.crc32(unit) % shares


def doc_ref(uri: str, position: int) -> bytes:
    """The 16 bytes naming where a document is read from, the ``doc`` of its entries: BLAKE2b of
    the position's digits, a NUL and the URI (digits hold no NUL: no two places share the
    bytes). Asked for by every stage of every document, so one plain hash call."""
    return hashlib.blake2b(f"{position}\0{uri}".encode("utf-8", "surrogatepass"),
                           digest_size=16, person=b"chunkline-memo").digest()


@dataclass(frozen=True)
class Listed:
    """A segment as a run's manifest lists it (the ``memo`` table): its ``path`` relative to
    OUTPUT (``<run folder>/memo/<name>``), its ``rows`` and ``bytes``, ``age`` (runs since
    the run that wrote it: 0 in that run's listing) and ``used`` (the entries that run used of
    it: all its rows for the run's own, the recalled ones for an earlier run's; None where the
    runner reported no counts)."""

    path: str
    rows: int
    bytes: int
    age: int = 0
    used: int | None = None

    def entry(self) -> dict:
        named = parse_segment_name(self.path)
        return {"path": self.path, "kind": named[0] if named else None,
                "share": named[2] if named else None, "rows": self.rows, "bytes": self.bytes,
                "age": self.age, **({"used": self.used} if self.used is not None else {})}


def listed_from(entry: Mapping) -> Listed | None:
    """A manifest's ``memo`` entry as :class:`Listed`; None for one that is not (a run of an
    older version listed only ``path``, ``rows`` and ``bytes``: age 0, use unknown)."""
    try:
        used = entry.get("used")
        return Listed(str(entry["path"]), int(entry["rows"]), int(entry.get("bytes") or 0),
                      int(entry.get("age") or 0), int(used) if used is not None else None)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def retired(listed: Sequence[Listed], shares: int, *, same_output: bool = True) -> frozenset[int]:
    """The ordinals of the previous run's ``listed`` segments this run no longer lists: what it
    recalls from them it writes again (:meth:`Memo.get`). A segment is retired when it is cut
    into other shares than this run's (a listing is cut one way, so a reader finds a document's
    entries in one share), when it lies in another OUTPUT (a manifest lists only its own
    output's files), or when it is past a hard bound: the run before used less than
    :data:`HARD_MIN_USED` of its rows, or it would be older than :data:`HARD_MAX_AGE` runs.
    A segment is *due* when the run before used less than :data:`MIN_USED` of its rows (the
    rest is results of texts gone or changed: dead weight every reader of its share loads) or
    it would be older than :data:`MAX_AGE` runs (each run adds a few small segments per share:
    age bounds the segments a share is read from); the due ones are retired sparsest first,
    then oldest, then smallest, while their bytes fit the run's budget (:func:`memo_rewrite_budget`),
    so the memo is rewritten a little each night, never all in one. The log-structured merge of
    Iceberg's and Delta Lake's compaction: the live rows of a file gone sparse are rewritten,
    the file dropped from the next snapshot, and removed only once no kept snapshot lists it
    (``chunkline gc``)."""
    gone: set[int] = set()
    due: list[tuple[float, int, int, int]] = []
    for ordinal, segment in enumerate(listed):
        named = parse_segment_name(segment.path)
        use = 1.0 if segment.used is None or segment.rows <= 0 else segment.used / segment.rows
        if (not same_output or named is None or named[1] != shares or use < HARD_MIN_USED
                or segment.age + 1 > HARD_MAX_AGE):
            gone.add(ordinal)
        elif use < MIN_USED or segment.age + 1 > MAX_AGE:
            due.append((use, -segment.age, segment.bytes, ordinal))
    budget = memo_rewrite_budget(listed)
    for _, _, size, ordinal in sorted(due):
        if budget <= 0:  # the last one taken may pass it: each run makes progress
            break
        budget -= size
        gone.add(ordinal)
    return frozenset(gone)


def memo_rewrite_budget(listed: Sequence[Listed]) -> int:
    """The bytes of due segments one run may retire (and so write again): :data:`MEMO_REWRITE_SHARE`
    of the listed segments' bytes, at least compaction's ``REWRITE_FLOOR``."""
    return rewrite_budget([segment.bytes for segment in listed], MEMO_REWRITE_SHARE)


@dataclass(frozen=True)
class MemoSource:
    """Where a run reads the previous run's memo and writes its own; ``settings``: what else
    decides a result (the code of ``chunkline`` and the shaping libraries' versions), fixed on
    the driver so every worker keys alike; ``shares``: this run's (:func:`shares_for`).
    ``previous``: the segments the previous run lists (full paths); ``listed``: the same as
    its manifest lists them (empty, or one per path); ``retired``: the ordinals (in
    ``previous``) whose recalled entries this run writes again (:func:`retired`)."""

    write_dir: str  # this run's memo folder
    previous: tuple[str, ...] = ()  # the previous run's segments (:func:`segment_name`)
    settings: str = ""
    shares: int = MIN_SHARES
    listed: tuple[Listed, ...] = ()
    retired: frozenset[int] = frozenset()

    @property
    def previous_shares(self) -> int | None:
        """The shares the previous run's memo was cut into; None without one."""
        for path in self.previous:
            named = parse_segment_name(path)
            if named is not None:
                return named[1]
        return None

    def segments_of(self, share: int) -> tuple[str, ...]:
        """The previous run's segments of ``share``, every kind."""
        return tuple(path for _, path in self.ordinals_of(share))

    def ordinals_of(self, share: int) -> tuple[tuple[int, str], ...]:
        """``(ordinal, path)`` of the previous run's segments of ``share``, by path."""
        found = []
        for ordinal, path in enumerate(self.previous):
            named = parse_segment_name(path)
            if named is not None and named[2] == share:
                found.append((ordinal, path))
        return tuple(sorted(found, key=lambda pair: pair[1]))

    def kept(self, used: Mapping[int, int] | None) -> list[Listed]:
        """The previous run's segments this run lists again, one run older, with the entries
        this run recalled from each (``used``: by ordinal; None: not counted)."""
        return [dataclasses.replace(segment, age=segment.age + 1,
                                    used=None if used is None else used.get(ordinal, 0))
                for ordinal, segment in enumerate(self.listed) if ordinal not in self.retired]


def memo_key(kind: str, settings: str, text: str, *more: str) -> bytes:
    """The key of ``kind``'s result for ``text`` (and ``more``: a file name, metadata) under
    ``settings``; every part framed by its length, so no two inputs share a key. The text enters
    as its own digest (:func:`text_digest`), so the several kinds a stage recalls for one text
    hash its bytes once."""
    return framed_digest_bytes((text_digest(text).hex(), *more), (kind, settings))


def segment_name(kind: str, share: int, shares: int) -> str:
    return f"{kind}-{shares}-{share}-{uuid.uuid4().hex}.parquet"


def parse_segment_name(path: str) -> tuple[str, int, int] | None:
    """``(kind, shares, share)`` of a segment's file name; None for any other name (a segment of
    an older layout: never read)."""
    parts = path.rsplit("/", 1)[-1].split("-")
    if len(parts) != 4 or parts[0] not in KINDS or not parts[3].endswith(".parquet"):
        return None
    try:
        shares, share = int(parts[1]), int(parts[2])
    except ValueError:
        return None
    return (parts[0], shares, share) if 0 <= share < shares else None


def pack(entries: Mapping[bytes, bytes], segment: int = HERE) -> bytes:
    """``entries`` (16-byte key -> value) as one ``bytes``, what ``Document.memo`` carries: each
    key, the ordinal of the listed segment it was recalled from (:attr:`MemoSource.previous`;
    :data:`HERE` for a result this run computed or already recorded), each 4 bytes
    little-endian, the value's length and the value. A key packed twice means its last entry."""
    mark = segment.to_bytes(_LENGTH, "little")
    return b"".join(key + mark + len(value).to_bytes(_LENGTH, "little") + value
                    for key, value in entries.items())


def _entries(packed: bytes) -> Iterator[tuple[bytes, int, int, int] | None]:
    """``(key, segment, start, end)`` of each packed entry, its value ``packed[start:end]``; a
    last None where the bytes end inside an entry (damage)."""
    at, head = 0, 16 + 2 * _LENGTH
    while at < len(packed):
        if at + head > len(packed):
            yield None
            return
        size = int.from_bytes(packed[at + 16 + _LENGTH:at + head], "little")
        end = at + head + size
        if end > len(packed):
            yield None
            return
        yield (packed[at:at + 16], int.from_bytes(packed[at + 16:at + 16 + _LENGTH], "little"),
               at + head, end)
        at = end


def unpack(packed: bytes) -> dict[bytes, bytes]:
    """:func:`pack`'s entries back (the last under a key); ValueError for bytes it did not make."""
    found = {}
    for entry in _entries(packed):
        if entry is None:
            raise ValueError("a damaged packed memo")
        found[entry[0]] = packed[entry[2]:entry[3]]
    return found


def packed_entry(packed: bytes, key: bytes) -> tuple[bytes, int] | None:
    """The value under ``key`` in :func:`pack`'s bytes and the segment it came from (the last
    entry under ``key``), or None (also for damaged bytes): a document carries a handful of
    entries, scanned in place."""
    # :func:`_entries` inlined: this runs for every kind a stage recalls, for every document
    # of every rerun, and a generator's step and tuple per entry were most of its cost.
    if len(key) != 16:
        return None
    found, at, total, head = None, 0, len(packed), 16 + 2 * _LENGTH
    while at < total:
        if at + head > total:
            return None
        end = at + head + int.from_bytes(packed[at + 16 + _LENGTH:at + head], "little")
        if end > total:
            return None
        if packed.startswith(key, at):
            found = (packed[at + head:end], int.from_bytes(packed[at + 16:at + 16 + _LENGTH], "little"))
        at = end
    return found


def packed_value(packed: bytes, key: bytes) -> bytes | None:
    """:func:`packed_entry`'s value alone."""
    found = packed_entry(packed, key)
    return found[0] if found is not None else None


def read_segment(path: str, open_file, columns: Sequence[str] | None = None) -> pa.Table | None:
    """One segment (or its ``columns``) read with ``open_file(path)`` (Beam's
    ``FileSystems.open``, or ``open(path, "rb")``); None, logged, for one that cannot be read."""
    expected = memo_schema() if columns is None else pa.schema([memo_schema().field(c) for c in columns])
    try:
        with open_file(path) as handle:
            # Page checksums (written with every segment): a flipped bit is a damaged
            # segment, skipped, never a wrong result recalled.
            table = pq.read_table(handle, columns=list(columns) if columns is not None else None,
                                  page_checksum_verification=True)
        if table.schema != expected:
            raise ValueError(f"columns {table.schema.names}")
        return table
    except Exception as exc:  # noqa: BLE001 - a damaged segment raises whatever arrow raises
        log.warning("memo: %s unreadable (%s: %s); its texts are computed again",
                    path, type(exc).__name__, exc)
        return None


def segment_table(rows: Mapping[tuple[bytes, bytes], bytes]) -> pa.Table:
    """``(doc, key) -> value`` as a segment's table, sorted: the same results give the same file."""
    ordered = sorted(rows)
    return pa.table({"key": pa.array([key for _, key in ordered], pa.binary(16)),
                     "value": pa.array([rows[place] for place in ordered], pa.binary()),
                     "doc": pa.array([doc for doc, _ in ordered], pa.binary(16))},
                    schema=memo_schema())


def write_segment(rows: Mapping[tuple[bytes, bytes], bytes], kind: str, handle) -> None:
    """``rows`` as a segment of ``kind`` to the open file ``handle``: page checksums (a flipped
    bit is a skipped segment, never a wrong result), no dictionary or statistics (every key
    differs, and no reader filters on them), compressed only for :data:`COMPRESSED_KINDS`."""
    pq.write_table(segment_table(rows), handle,
                   compression="zstd" if kind in COMPRESSED_KINDS else "none",
                   use_dictionary=False, write_statistics=False, write_page_checksum=True)


class Recalled:
    """One share of the previous run's memo: every entry's document (:func:`doc_ref`), key,
    value and segment ordinal as arrays, sorted by document once (a stable sort: an entry of a
    later segment after an earlier one's, as :func:`pack` orders them), and the read kind's
    entries by key, each with its segment's ordinal. A document's entries are packed when asked
    for (:meth:`entries`): a rerun that passes most documents by never builds theirs."""

    def __init__(self, refs: np.ndarray | None = None, keys: np.ndarray | None = None,
                 values: pa.Array | pa.ChunkedArray | Sequence[pa.Array] | Callable[[], _Values] | None = None,
                 ordinals: np.ndarray | None = None,
                 read: dict[bytes, tuple[bytes, int]] | None = None, size: int = 0) -> None:
        self.refs = refs if refs is not None else np.empty(0, "S16")
        self.keys = keys if keys is not None else np.empty(0, "S16")
        self.ordinals = ordinals if ordinals is not None else np.empty(0, np.int64)
        # A callable: the values are read when a value is first asked for (a rerun that passes
        # its documents by only counts their entries, by document and segment).
        self._pending = values if callable(values) else None
        self._held = None if callable(values) else _Values(values)
        self._order = np.argsort(self.refs, kind="stable")
        self._sorted = self.refs[self._order]
        self.read = read if read is not None else {}
        self.size = size

    def entries(self, ref: bytes) -> bytes:
        """The packed entries (:func:`pack`) of the document ``ref``; b"": none."""
        low = int(np.searchsorted(self._sorted, ref, "left"))
        high = int(np.searchsorted(self._sorted, ref, "right"))
        if low == high:
            return b""
        keys, ordinals, value = self.keys, self.ordinals, self._values().value
        parts = []
        for row in self._order[low:high].tolist():
            held = value(row)
            if held is None:  # its segment's values could not be read: computed again
                continue
            parts.append(keys[row].ljust(16, b"\0") + int(ordinals[row]).to_bytes(_LENGTH, "little")
                         + len(held).to_bytes(_LENGTH, "little") + held)
        return b"".join(parts)

    def rows_of(self, refs: np.ndarray) -> np.ndarray:
        """(entries,) bool: the entries of the documents ``refs`` (S16), each found by a binary
        search of the share's sorted refs (a piece asks for a few thousand of a share's
        hundreds of thousands: never a pass over the share)."""
        wanted = np.unique(np.asarray(refs, "S16"))
        marked = np.zeros(len(self.refs), bool)
        if not len(wanted) or not len(self.refs):
            return marked
        low = np.searchsorted(self._sorted, wanted, "left")
        high = np.searchsorted(self._sorted, wanted, "right")
        marked[self._order[span_positions(low, high - low)]] = True
        return marked

    def value(self, row: int) -> bytes | None:
        """The value of entry ``row``; None when its segment's values could not be read."""
        return self._values().value(row)

    def _values(self) -> _Values:
        if self._held is None:
            self._held = self._pending() if self._pending is not None else _Values(None)
            self._pending = None
        return self._held

    @property
    def by_doc(self) -> dict[bytes, bytes]:
        """Every document's packed entries (tests and small shares)."""
        return {bytes(ref).ljust(16, b"\0"): self.entries(bytes(ref).ljust(16, b"\0"))
                for ref in np.unique(self.refs)}


class _Values:
    """Binary arrays read as they lie (a segment's value column, chunk by chunk), a value taken
    by its row across them: a share's values are never concatenated nor copied into one bytes
    object (both were two thirds of loading a share, for the handful of rows a rerun asks)."""

    def __init__(self, values: pa.Array | pa.ChunkedArray | Sequence[pa.Array | pa.ChunkedArray | int] | None
                 ) -> None:
        if values is None:
            chunks: Sequence[pa.Array | int] = []
        elif isinstance(values, pa.ChunkedArray):
            chunks = values.chunks
        elif isinstance(values, pa.Array):
            chunks = [values]
        else:
            chunks = [chunk for value in values
                      for chunk in (value.chunks if isinstance(value, pa.ChunkedArray) else [value])]
        self._offsets: list[np.ndarray | None] = []
        self._data: list[memoryview] = []
        starts = [0]
        for chunk in chunks:
            if isinstance(chunk, int):  # that many rows whose values could not be read
                if chunk:
                    self._offsets.append(None)
                    self._data.append(memoryview(b""))
                    starts.append(starts[-1] + chunk)
                continue
            if not len(chunk):
                continue
            _, offsets, data = chunk.buffers()
            width = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
            self._offsets.append(np.frombuffer(offsets, width)[chunk.offset:chunk.offset + len(chunk) + 1])
            self._data.append(memoryview(data) if data is not None else memoryview(b""))
            starts.append(starts[-1] + len(chunk))
        self._starts = np.array(starts, np.int64)

    def value(self, row: int) -> bytes | None:
        at = int(np.searchsorted(self._starts, row, "right")) - 1
        offsets, local = self._offsets[at], row - int(self._starts[at])
        if offsets is None:
            return None
        return self._data[at][int(offsets[local]):int(offsets[local + 1])].tobytes()


def _segment_values(segments: Sequence[tuple[str, int]], open_file) -> Callable[[], _Values]:
    """The values of ``segments`` ((path, rows) each, in the share's row order), read when
    called: a segment whose values cannot be read (or hold other rows) gives None for each of
    its rows, computed again."""

    def read() -> _Values:
        columns: list[pa.ChunkedArray | int] = []
        for path, rows in segments:
            table = read_segment(path, open_file, ["value"])
            columns.append(table.column("value") if table is not None and table.num_rows == rows else rows)
        return _Values(columns)

    return read


def _fixed(column: pa.ChunkedArray | pa.Array, width: int) -> np.ndarray:
    """A fixed-size binary column as a numpy ``S{width}`` array, without a Python object a row."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not len(array):
        return np.empty(0, f"S{width}")
    buffer = array.buffers()[1]
    data = np.frombuffer(buffer, dtype=f"S{width}", count=array.offset + len(array))
    return data[array.offset:]


def load_share(paths: Iterable[str], open_file, *, ordinals: Sequence[int] | None = None) -> Recalled:
    """The entries of the segments at ``paths`` (one share's), unreadable ones skipped;
    ``ordinals``: each path's in the previous run's listing (:data:`HERE` without)."""
    read: dict[bytes, tuple[bytes, int]] = {}
    refs: list[np.ndarray] = []
    keys: list[np.ndarray] = []
    values: list[tuple[str, int]] = []
    marks: list[np.ndarray] = []
    size = 0
    paths = list(paths)
    for path, ordinal in zip(paths, ordinals if ordinals is not None else [HERE] * len(paths)):
        named = parse_segment_name(path)
        # The read kind's entries are looked up by key as the share loads; every other kind's
        # values wait until a document asks for its entries (_segment_values).
        table = (read_segment(path, open_file, None if named[0] == READ else ["key", "doc"])
                 if named is not None else None)
        if named is None or table is None:
            continue
        size += table.nbytes
        if named[0] == READ:
            read.update((key, (value, ordinal)) for key, value in zip(
                table.column("key").to_pylist(), table.column("value").to_pylist()))
            continue
        refs.append(_fixed(table.column("doc"), 16))
        keys.append(_fixed(table.column("key"), 16))
        values.append((path, table.num_rows))
        marks.append(np.full(table.num_rows, ordinal, np.int64))
    if not refs:
        return Recalled(read=read, size=size)
    return Recalled(np.concatenate(refs), np.concatenate(keys), _segment_values(values, open_file),
                    np.concatenate(marks), read, size)


class RecalledShares:
    """The previous memo's shares a reader asks for, loaded when first asked and held while
    they fit :data:`SHARES_HELD` (the least recently asked let go first): the pieces of one share
    are read one after another (``transforms/read.py`` spreads them by share), so each share is
    loaded about once."""

    def __init__(self, source: MemoSource, open_file, held: int = SHARES_HELD) -> None:
        self.source, self.open_file, self.held = source, open_file, held
        self.shares = source.previous_shares
        self._loaded: OrderedDict[int, Recalled] = OrderedDict()
        self.loads = 0

    def share(self, uri: str, position: int) -> Recalled | None:
        """The loaded share of the unit at ``uri`` and ``position``; None without a memo."""
        if self.shares is None:
            return None
        return self.share_at(unit_share(uri, position, self.shares))

    def share_at(self, share: int) -> Recalled:
        """The loaded share ``share`` (of :attr:`shares`)."""
        found = self._loaded.get(share)
        if found is None:
            listed = self.source.ordinals_of(share)
            found = load_share([path for _, path in listed], self.open_file,
                               ordinals=[ordinal for ordinal, _ in listed])
            self.loads += 1
            self._loaded[share] = found
            while len(self._loaded) > self.held:
                self._loaded.popitem(last=False)
        else:
            self._loaded.move_to_end(share)
        return found

    def entries_of(self, uri: str, position: int) -> bytes:
        """The packed previous entries of the document read at ``position`` of ``uri`` (b"":
        none)."""
        found = self.share(uri, position)
        return found.entries(doc_ref(uri, position)) if found is not None else b""


class Placed(Protocol):
    """A document as the memo sees it: where it was read (``uri``, ``position``) and the
    previous results it carries (``memo``, :func:`pack`'s bytes). Read-only members
    (properties), so that a frozen dataclass such as ``Document`` satisfies it: a plain
    protocol attribute is settable, which a frozen field is not (mypy's docs, "Protocols and
    structural subtyping", read-only attributes)."""

    @property
    def uri(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def memo(self) -> bytes: ...


Rows = dict[tuple[bytes, bytes], bytes]  # (doc ref, key) -> value


@dataclass
class Memo:
    """One stage's view of a memo kind: results are recalled from what a document carries
    (``Document.memo``, or a loaded share's read entries), each recall counted by the listed
    segment it came from (``recalled``); what a bundle computed, and what it recalled from a
    ``retired`` segment (:func:`retired`), is recorded by document and share (``used``),
    handed to ``spill`` (a segment per share) once it holds :data:`SEGMENT_ENTRIES` and when
    the bundle ends. A result recalled from a segment still listed is not written again: the
    run lists that segment (log-structured, as a merge-on-read table's unchanged rows)."""

    kind: str
    settings: str
    shares: int = MIN_SHARES  # this run's
    spill: Callable[[dict[int, Rows]], None] | None = None
    retired: frozenset[int] = frozenset()
    used: dict[int, Rows] = field(default_factory=dict)
    recalled: dict[int, int] = field(default_factory=dict)  # segment ordinal -> entries recalled
    held: int = 0
    hits: int = 0
    misses: int = 0
    _last: tuple[tuple[str, int], bytes, int] | None = None

    def key(self, text: str, *more: str) -> bytes:
        return memo_key(self.kind, self.settings, text, *more)

    def get(self, key: bytes, carried: bytes | Mapping[bytes, tuple[bytes, int]],
            at: tuple[str, int], width: int | None = None) -> bytes | None:
        """The result under ``key`` in ``carried`` (packed entries, or a mapping to ``(value,
        segment ordinal)``), or None (counted as a miss); ``width``: its length must be a
        multiple of it, else it is taken for damage and computed again. ``at``: the ``(uri,
        position)`` it is recorded under, when it is."""
        found = packed_entry(carried, key) if isinstance(carried, bytes) else carried.get(key)
        if found is None or (width and len(found[0]) % width):
            self.misses += 1
            return None
        value, segment = found
        self.hits += 1
        if segment != HERE:
            self.recalled[segment] = self.recalled.get(segment, 0) + 1
            if segment in self.retired:
                self.put(key, value, at)
        return value

    def take_recalled(self) -> dict[int, int]:
        recalled, self.recalled = self.recalled, {}
        return recalled

    def recall(self, doc: Placed, key: bytes, width: int | None = None) -> bytes | None:
        """:meth:`get` from what ``doc`` carries (``Document.memo``)."""
        return self.get(key, doc.memo, (doc.uri, doc.position), width)

    def keep(self, doc: Placed, key: bytes, value: bytes) -> None:
        """:meth:`put` for ``doc``."""
        self.put(key, value, (doc.uri, doc.position))

    def put(self, key: bytes, value: bytes, at: tuple[str, int]) -> None:
        """Record ``value`` under ``key`` for the document (or piece) at ``(uri, position)``."""
        if self._last is not None and self._last[0] == at:
            ref, share = self._last[1], self._last[2]
        else:
            ref, share = doc_ref(*at), unit_share(*at, self.shares)
            self._last = (at, ref, share)
        rows = self.used.get(share)
        if rows is None:
            self.used[share] = rows = {}
        if (ref, key) not in rows:
            self.held += 1
        rows[ref, key] = value
        if self.spill is not None and self.held >= SEGMENT_ENTRIES:
            self.spill(self.take_used())

    def take_used(self) -> dict[int, Rows]:
        used, self.used, self.held = self.used, {}, 0
        return used
