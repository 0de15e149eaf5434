"""Results of pure per-text functions kept with a run, so the next run does not compute them again.

A nightly rerun sees mostly the texts it saw the night before. The corpus-wide stages must still
see every document (a line turns boilerplate, a near twin arrives: what a full rebuild decides
is decided again), but what they ask of one text is a pure function of that text and the
stage's settings: whether cleaning changes it, its boilerplate candidate keys and which lines
the frequent ones drop, its exact-duplicate hash, its MinHash signature, what the credential
scan finds in it (kinds and places, never a value). Each such result is recorded under a
128-bit key (BLAKE2b of the function's name, its settings, the code that computes it and the
text), in Parquet segments
(``key``, ``value``) under the run's ``memo/`` folder, one per stage and bundle. A run loads the
previous run's segments once per worker process and writes every result it used, found or
computed. A rerun does not write again what it recalls from a segment it keeps referencing
(merge-on-read, as the tables: its manifest lists those segments, in earlier runs' folders, as
the table ``memo``, and ``chunkline gc`` keeps their folders): it writes the results it computed,
and those it recalled from segments written :data:`MEMO_GENERATIONS` runs before or more, which
it no longer references (``MemoSource.kept``). So a run's memo covers the texts of that run, a
few generations' stale entries besides, and never grows with history.

A lost, damaged or mismatched segment costs time, never a wrong result: a key is only ever
equal for the same function, settings, code and text, and a segment that cannot be read is
skipped (its texts are computed again). Memory: the previous run's entries, one per distinct
text per kind, held by each worker process (about 1 KB per document with near-duplicate
detection on; a previous memo larger than :data:`MAX_LOAD_BYTES` on disk is not loaded at all).
This run's own results are written out as they accumulate (:data:`SEGMENT_ENTRIES`), and only
the kinds another stage asks for again are kept in memory beside the previous run's, within
:data:`SHARED_BYTES`: a first run over a dump of millions of records does not hold an entry per
record.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from chunkline.records import framed_digest_bytes, text_digest

log = logging.getLogger("chunkline.memo")

MEMO_DIR = "memo"
# The manifest's table listing the memo segments a run reads from (its own and those it keeps
# referencing), and how many runs' segments it references at most (its own included): a
# segment older than that is loaded once more and its entries still used are written again.
MEMO_TABLE = "memo"
MEMO_GENERATIONS = 8
# A previous memo bigger than this on disk is not loaded: a worker's memory stays bounded, and
# such a corpus is better served by a distributed runner's own workers computing afresh.
MAX_LOAD_BYTES = 1 << 30

CREDENTIALS = "credentials"  # value b"": the scan found nothing; else JSON of each finding's kind
                             # and place (never the value)
LINE_KEYS = "line_keys"  # value: the sorted uint64 candidate keys, little-endian
SIGNATURE = "signature"  # value: the MinHash signature as little-endian uint32 (b"": no shingles)
CLEAN = "clean"  # value b"": cleaning leaves the text and its page starts as they are
DOC_HASH = "doc_hash"  # value: chunkline.records.doc_hash's 32 bytes
STRIP = "strip"  # value: JSON {"drop": line indexes, "found": {key: line shown}} for a text and
                 # the frequent keys it holds
READ = "read"  # value: what a file made (documents and rejections, Beam-encoded), under its
               # path, size and time: only with input.trust_file_metadata
KINDS = (CREDENTIALS, LINE_KEYS, SIGNATURE, CLEAN, DOC_HASH, STRIP, READ)
# Kinds whose values are text (JSON, encoded documents): their segments are zstd-compressed. The
# others hold digests, hash keys and signatures, random bytes no codec shrinks: written plain,
# a run spends no time compressing what it rewrites every night.
COMPRESSED_KINDS = (CREDENTIALS, STRIP, READ)
# Kinds that a later stage of the same process asks for again (the strip reads a text's line
# keys; dedupe its hash): this run's results of these are kept beside the previous run's, up to
# SHARED_BYTES per kind and process. Past it, the later stage computes them again, the same
# result at the cost of the work; below it, the read stage's memory grows with every record.
SHARED_KINDS = (LINE_KEYS, DOC_HASH)
SHARED_BYTES = 16 << 20
# A dict entry's own cost beside its value: the key's bytes object, the value's header, the slot.
ENTRY_BYTES = 130
# A bundle's results go to a segment of their own once they are this many, not only when the
# bundle ends: the in-process runner reads a whole input as one bundle.
SEGMENT_ENTRIES = 16_384


def memo_schema() -> pa.Schema:
    return pa.schema([pa.field("key", pa.binary(16), nullable=False),
                      pa.field("value", pa.binary(), nullable=False)])


@dataclass(frozen=True)
class MemoSource:
    """Where a run reads the previous run's memo and writes its own; ``settings``: what else
    decides a result (the code of ``chunkline`` and the shaping libraries' versions), fixed on
    the driver so every worker keys alike."""

    write_dir: str  # this run's memo folder
    previous: tuple[str, ...] = ()  # the previous run's segments (each named after its kind)
    settings: str = ""
    # Those of ``previous`` this run keeps referencing: what it recalls from them is not
    # written again.
    kept: tuple[str, ...] = ()

    def segments(self, kind: str) -> tuple[str, ...]:
        return tuple(sorted(path for path in self.previous
                            if path.rsplit("/", 1)[-1].startswith(kind + "-")))

    def kept_segments(self, kind: str) -> tuple[str, ...]:
        kept = set(self.kept)
        return tuple(path for path in self.segments(kind) if path in kept)

    def expiring_segments(self, kind: str) -> tuple[str, ...]:
        kept = set(self.kept)
        return tuple(path for path in self.segments(kind) if path not in kept)


def memo_key(kind: str, settings: str, text: str, *more: str) -> bytes:
    """The key of ``kind``'s result for ``text`` (and ``more``: a file name, metadata) under
    ``settings``; every part framed by its length, so no two inputs share a key. The text enters
    as its own digest (:func:`text_digest`), so the several kinds a stage recalls for one text
    hash its bytes once."""
    return framed_digest_bytes((text_digest(text).hex(), *more), (kind, settings))


def read_segments(paths: Iterable[str], open_file) -> dict[bytes, bytes]:
    """Every (key, value) of the segments at ``paths``, read with ``open_file(path)`` (Beam's
    ``FileSystems.open``, or ``open(path, "rb")``); an unreadable segment is logged and skipped."""
    found: dict[bytes, bytes] = {}
    for path in paths:
        try:
            with open_file(path) as handle:
                # Page checksums (written with every segment): a flipped bit is a damaged
                # segment, skipped, never a wrong result recalled.
                table = pq.read_table(handle, page_checksum_verification=True)
            keys = table.column("key").to_pylist()
            values = table.column("value").to_pylist()
        except Exception as exc:  # noqa: BLE001 - a damaged segment raises whatever arrow raises
            log.warning("memo: %s unreadable (%s: %s); its texts are computed again",
                        path, type(exc).__name__, exc)
            continue
        found.update(zip(keys, values))
    return found


def segment_table(entries: Mapping[bytes, bytes]) -> pa.Table:
    keys = sorted(entries)  # the same results give the same file
    return pa.table({"key": pa.array(keys, pa.binary(16)),
                     "value": pa.array([entries[key] for key in keys], pa.binary())},
                    schema=memo_schema())


def write_segment(entries: Mapping[bytes, bytes], kind: str, handle) -> None:
    """``entries`` as a segment of ``kind`` to the open file ``handle``: page checksums (a flipped
    bit is a skipped segment, never a wrong result), no dictionary or statistics (every key
    differs, and no reader filters on them), compressed only for :data:`COMPRESSED_KINDS`."""
    pq.write_table(segment_table(entries), handle,
                   compression="zstd" if kind in COMPRESSED_KINDS else "none",
                   use_dictionary=False, write_statistics=False, write_page_checksum=True)


def segment_name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}.parquet"


class Known(dict):
    """The previous run's results of one kind, shared by every DoFn of a process, and this run's
    own within ``room`` more bytes (:data:`SHARED_KINDS`; none for the other kinds)."""

    def __init__(self, entries: Mapping[bytes, bytes] = (), room: int = 0) -> None:
        super().__init__(entries)
        self.room = room


@dataclass
class Memo:
    """One worker's view of a memo kind: the previous results in segments this run keeps
    referencing (``known``, shared by every DoFn of the process that asks for the same
    segments), those in segments it no longer references (``expiring``), and what this bundle
    must write (``used``: what it computed, and what it recalled from ``expiring``; written as a
    segment when the bundle ends, or handed to ``spill`` once it holds
    :data:`SEGMENT_ENTRIES`)."""

    kind: str
    settings: str
    known: Known
    used: dict[bytes, bytes] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    spill: Callable[[dict[bytes, bytes]], None] | None = None
    expiring: Mapping[bytes, bytes] = field(default_factory=dict)

    def key(self, text: str, *more: str) -> bytes:
        return memo_key(self.kind, self.settings, text, *more)

    def get(self, key: bytes, width: int | None = None) -> bytes | None:
        """The result under ``key``, or None (counted as a miss); ``width``: its length must be a
        multiple of it, else it is taken for damage and computed again."""
        value = self.used.get(key)
        if value is None:
            value = self.known.get(key)
            if value is not None and not (width and len(value) % width):
                self.hits += 1
                return value  # a referenced segment holds it (or this run wrote it): not again
            value = self.expiring.get(key)
            if value is None or (width and len(value) % width):
                self.misses += 1
                return None
            self.used[key] = value
            self._spill_when_full()
        self.hits += 1
        return value

    def put(self, key: bytes, value: bytes) -> None:
        self.used[key] = value
        known = self.known
        if known.room > 0 and key not in known:
            known[key] = value  # another stage of this process may ask for it
            known.room -= len(value) + ENTRY_BYTES
        self._spill_when_full()

    def _spill_when_full(self) -> None:
        if self.spill is not None and len(self.used) >= SEGMENT_ENTRIES:
            self.spill(self.take_used())

    def take_used(self) -> dict[bytes, bytes]:
        used, self.used = self.used, {}
        return used


_LOADED: dict[tuple[str, tuple[str, ...]], Known] = {}
_LOADING = threading.Lock()


def load_known(kind: str, settings: str, paths: tuple[str, ...], open_file, shared: bool = True) -> Known:
    """The previous ``kind`` results of the segments at ``paths``, read once per process: every
    DoFn and thread that asks for the same segments shares one dict, to which (``shared``)
    this run's own results of the :data:`SHARED_KINDS` are added as they are computed, within
    :data:`SHARED_BYTES` (a key names its text, settings and code, so old and new never
    clash)."""
    cache_key = (kind + "\0" + settings, paths, shared)
    with _LOADING:
        if cache_key not in _LOADED:
            _LOADED[cache_key] = Known(read_segments(paths, open_file),
                                       SHARED_BYTES if shared and kind in SHARED_KINDS else 0)
        return _LOADED[cache_key]
