"""READ: file patterns to ``Document``s, with a ``Rejected`` for everything that is not one.

Matching is ``chunkline.transforms.match`` (a walk of the input root for local patterns, Beam's match for
``gs://``); reading uses Beam's filesystems for ``gs://`` and opens local files directly, checked
again at open (a path swapped for a FIFO after the walk must not hang the job); decoding is
``chunkline.readers.decode_file``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import threading
from typing import Any, BinaryIO, Final, Iterable, Iterator, Literal, NamedTuple, Sequence, Union

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.fileio import ReadableFile
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PBegin, PCollection, TaggedOutput
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.state import PreviousState, SettledBatch, SettledBuilder, StateSource, facts_digest
from chunkline.containers import HEAD_BYTES, MEMBER_SEPARATOR
from chunkline.credentials import CredentialOptions
from chunkline.screening import screen_document, screen_text, screening_key
from chunkline.ocr import using_page_cache
from chunkline.readers import (
    JSONL_EXTENSIONS,
    PARQUET_EXTENSIONS,
    SINGLE_DOCUMENT_EXTENSIONS,
    LineSlice,
    ParquetSlice,
    ReadOptions,
    decode_file,
    extension,
    input_root,
    jsonl_slices,
    name_problem,
    parquet_slices,
    reject_before_reading,
    relative_id,
    shown_name,
    stream_file,
    streams,
)
from chunkline.memo import BLOCK, READ, MemoSource, RecalledShares, unit_share
from chunkline.records import Document, Rejected, evolved, input_digest, metadata_json
from chunkline.transforms.memo import MemoUse, SettledEntries, recalled_shares
from chunkline.transforms.spill import coder_of
from chunkline.transforms.progress import PIECES_MATCHED, PIECES_READ, progress_counter, tally
from chunkline.transforms.counters import READ_DOCUMENTS, READ_REJECTED, READ_SETTLED, READ_SLICES
from chunkline.transforms.match import MatchPattern, is_local
from chunkline.transforms.shares import GroupInShares, share_of

log = logging.getLogger("chunkline.read")

SETTLED: Final = "settled"
# Settled documents a batch holds before it is sent: a runner's bundle may be a worker's whole
# share of the corpus (FnApiRunner's is), and a batch of it one element every later stage
# decodes whole (~0.5 KB a document with its line keys: 32 MB at this size).
SETTLED_BATCH: Final = 65_536


def _settled_output(batch: SettledBatch) -> Any:
    """The ``settled`` output of a batch (ReadDocuments names its type)."""
    return TaggedOutput(SETTLED, batch)
REJECTED: Final = "rejected"  # Final: a Literal type, as the TaggedOutput[Literal[...]] outputs name it


class ReadOutputs(NamedTuple):
    """What :class:`ReadDocuments` returns: ``outputs.documents``, ``outputs.rejected``."""

    documents: PCollection[Document]
    rejected: PCollection[Rejected]
    # With ``settle``: the documents read as the previous state rows hold them, as batches.
    settled: PCollection[SettledBatch] | None = None


class _DecodeFile(beam.DoFn):
    """One matched file -> its documents (main output) and rejections (``rejected``); a
    ``Rejected`` from matching passes through, counted here like every other.

    ``trusted``: a memo source (``chunkline.memo``, kind ``read``) when the user trusts file
    metadata (``input.trust_file_metadata``): a file listed with the size and modification time
    (local) or update time (gs://, which changes with every new generation of the object) the
    previous run read it with is not opened; what it made then (documents and rejections) is
    recalled.

    ``credentials``: the credential stage's options. The OCR cache and the memo are written
    here, before that stage sees the text, so they keep only what it would let through
    (``docs/ARCHITECTURE.md``, "Nothing persists that the credential stage has not seen")."""

    def __init__(self, root: str, options: ReadOptions, ocr_cache: str | None = None,
                 trusted: MemoSource | None = None,
                 credentials: CredentialOptions = CredentialOptions(),
                 memo: MemoSource | None = None, state: StateSource | None = None,
                 settle: bool = False) -> None:
        self._root = root
        self._state_source = state
        # With ``settle``, a document read as its previous state row holds it is not passed on:
        # it joins its bundle's SettledBatch (tagged ``settled``), as arrays.
        self._settle = settle and state is not None
        self._batch = SettledBuilder()
        self._settled_entries = SettledEntries(memo if memo is not None else trusted)
        self._counts_pieces = True
        self._state: PreviousState | None = None  # set up per worker (setup)
        self._settled = Metrics.counter(*READ_SETTLED)
        self._options = options
        self._ocr_cache_dir = ocr_cache
        self._credentials = credentials
        self._documents: Any = progress_counter(*READ_DOCUMENTS)
        self._rejected: Any = progress_counter(*READ_REJECTED)
        # The credential options are part of every key: entries kept under other options (or,
        # unscreened, by an earlier version) are never recalled.
        self._memo = MemoUse(trusted, READ, repr(options) + "\0" + screening_key(credentials))
        self._source = memo if memo is not None else trusted
        self._recalled: RecalledShares | None = None  # set up per worker (setup)

    def setup(self) -> None:
        self._ocr_cache = (OcrPageCache(self._ocr_cache_dir, self._credentials)
                           if self._ocr_cache_dir is not None else None)
        self._memo.setup()
        # The previous memo's shares, loaded as the pieces that need them are read: each
        # document leaves with its own previous results (chunkline/memo.py).
        self._recalled = recalled_shares(self._source)
        self._coders = (coder_of(Document), coder_of(Rejected))
        self._state = (PreviousState(self._state_source, FileSystems.open)
                       if self._state_source is not None else None)
        self._settled_entries.setup()

    def start_bundle(self) -> None:
        self._batch = SettledBuilder()

    def finish_bundle(self):
        self._memo.flush()
        self._settled_entries.flush()
        if len(self._batch):
            return [TaggedOutput(SETTLED, WindowedValue(self._batch.take(), 0, (GlobalWindow(),)))]
        return None

    def _recalled_or_read(self, found: ReadableFile, uri: str,
                          part: ParquetSlice | LineSlice | None) -> Iterable[Document | Rejected]:
        """The file's (or piece's) records as they are read: a piece of a dump is never held
        whole (a list of its documents would be the piece several times over)."""
        memo = self._memo.memo
        if memo is None:
            return self._read_and_decode(found, uri, part)
        facts = (uri, str(found.metadata.size_in_bytes),
                 repr(found.metadata.last_updated_in_seconds), repr(part))
        key = memo.key(*facts)
        at = (uri, first_position(part))
        share = self._recalled.share(*at) if self._recalled is not None else None
        value = memo.get(key, share.read if share is not None else {}, at)
        if value is not None:
            try:
                return _records_from(value, *self._coders)
            except Exception:  # noqa: BLE001 - a damaged entry: the file is read again
                pass
        return self._remembered(self._read_and_decode(found, uri, part), memo, key, at)

    def _remembered(self, records: Iterable[Document | Rejected], memo, key: bytes,
                    at: tuple[str, int]) -> Iterator[Document | Rejected]:
        """``records`` passed on as they come, and kept encoded for the memo while they fit in
        :data:`READ_MEMO_BYTES`: a bigger piece is read again next time, never held."""
        value: bytearray | None = bytearray()
        for record in records:
            if value is not None:
                kept = record if isinstance(record, Rejected) else screen_document(record, self._credentials)
                if isinstance(record, Rejected) and record.reason.startswith(_UNREADABLE):
                    value = None  # an IO failure is not what the file holds
                elif kept is None:
                    value = None  # a document the credential stage rejects is never kept
                else:
                    value += _record_value(kept, *self._coders)
                    if len(value) > READ_MEMO_BYTES:
                        value = None
            yield record
        if value is not None:
            memo.put(key, bytes(value), at)

    def process(self, found: ReadableFile | Rejected | tuple[ReadableFile, ParquetSlice | LineSlice]
                ) -> Iterable[Document | TaggedOutput[Literal["rejected"], Rejected]]:
        part = None
        if isinstance(found, tuple):
            found, part = found
        uri = found.uri if isinstance(found, Rejected) else found.metadata.path
        problem = name_problem(uri)
        if problem:
            # A name no column can hold (Latin-1 names from an old archive, a NUL): the file is
            # accounted for under a readable form of its name, never read.
            shown = shown_name(uri)
            reason = problem + (f"; {found.reason}" if isinstance(found, Rejected) else "")
            records: Iterable[Document | Rejected] = [
                Rejected(shown, relative_id(shown, shown_name(self._root)), reason)]
        elif isinstance(found, Rejected):
            records = [found]
        else:
            # Decided by name and size alone: an oversized or unsupported file is never fetched.
            early = reject_before_reading(uri, self._root, found.metadata.size_in_bytes,
                                          self._options)
            records = [early] if early else self._recalled_or_read(found, uri, part)
        recalled, state = self._recalled, self._state
        # Counted once a piece: a counter's step for each of a million records was seconds.
        documents = settled = rejected = 0
        for record in records:
            if isinstance(record, Document):
                documents += 1
                digest = input_digest(record)
                row = state.found(record.uri, record.position) if state is not None else None
                if (row is not None and row.doc_id == record.doc_id and row.input_digest == digest
                        and row.facts == facts_digest(record.encoding, metadata_json(record.all_metadata()))):
                    settled += 1
                    if self._settle:
                        self._batch.add(record.doc_id, record.uri, record.position, record.counted, row)
                        self._settled_entries.add(record.uri, record.position)
                        if len(self._batch) >= SETTLED_BATCH:
                            yield _settled_output(self._batch.take())
                        continue
                # A document whose input is not the one its place held (an edit) asks nothing
                # of the previous memo: its entries are of texts it no longer has (a change of
                # its metadata alone computes its text's results again), and its share's
                # values stay unread.
                edited = row is not None and row.input_digest != digest
                yield evolved(
                    record, input_digest=digest,
                    memo=recalled.entries_of(record.uri, record.position) if recalled and not edited else b"")
            else:
                rejected += 1
                yield TaggedOutput(REJECTED, record)
        for counter, count in ((self._documents, documents), (self._settled, settled), (self._rejected, rejected)):
            if count:
                counter.inc(count)
        # The piece's settled documents' entries, while its share is loaded.
        self._settled_entries.settle(recalled)
        if self._counts_pieces:
            tally(PIECES_READ)

    def _read_and_decode(self, readable: ReadableFile, uri: str,
                         part: ParquetSlice | LineSlice | None = None) -> Iterator[Document | Rejected]:
        try:
            handle, modified, size = _open(readable)
        except _NotRegular as exc:
            yield Rejected(uri, relative_id(uri, self._root), str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - each filesystem raises its own IO errors
            yield self._unreadable(uri, exc)
            return
        with handle:
            try:
                head = handle.read(HEAD_BYTES)
                handle.seek(0)
                if streams(uri, head):
                    # A record dump of any size: a line or a batch of rows at a time.
                    yield from stream_file(uri, self._root, handle, size, self._options, modified,
                                           part)
                    return
                limit = _read_limit(uri, self._options)
                data = handle.read() if limit is None else handle.read(limit)
            except Exception as exc:  # noqa: BLE001 - each filesystem raises its own IO errors
                yield self._unreadable(uri, exc)
                return
        with using_page_cache(self._ocr_cache):
            found = decode_file(uri, data, self._root, self._options, modified)
        yield from found

    def _unreadable(self, uri: str, exc: Exception) -> Rejected:
        # Only the read is guarded: one unreadable file is a rejection, not a failed job.
        reason = f"{_UNREADABLE} ({type(exc).__name__}: {exc})"
        return Rejected(uri, relative_id(uri, self._root), reason)


_UNREADABLE = "could not read file"
# What a file (or a piece of a dump) made is remembered (input.trust_file_metadata) only up to
# this many encoded bytes: the records stream through, and a bigger piece would be held whole.
READ_MEMO_BYTES = 16 << 20


def _record_value(record: Document | Rejected, documents, rejections) -> bytes:
    """One record of what a file made, as a memo value holds it: tagged and length-prefixed."""
    tag, coder = (b"D", documents) if isinstance(record, Document) else (b"R", rejections)
    data = coder.encode(record)
    return tag + len(data).to_bytes(4, "little") + data


def _records_from(value: bytes, documents, rejections) -> list[Document | Rejected]:
    records, at = [], 0
    while at < len(value):
        tag, size = value[at:at + 1], int.from_bytes(value[at + 1:at + 5], "little")
        data = value[at + 5:at + 5 + size]
        if tag not in (b"D", b"R") or len(data) != size:
            raise ValueError("a damaged read memo entry")
        records.append((documents if tag == b"D" else rejections).decode(data))
        at += 5 + size
    return records


class OcrPageCache:
    """OCR results beside the index, one small JSON file per page under ``directory`` (named by
    ``chunkline.ocr.page_key``: the page's pixels, the engine and the OCR code, and by the
    credential options), through Beam's filesystems. An entry that cannot be read or parsed is a
    miss: the page is read again and the entry written anew. Counters ``read/ocr_pages_cached``
    and ``read/ocr_pages_read``.

    A page is kept as the credential stage would let it through (:func:`screen_text`): its
    credentials masked, or not kept at all where the stage would reject its document."""

    def __init__(self, directory: str, credentials: CredentialOptions = CredentialOptions()) -> None:
        self.directory = directory
        self.credentials = credentials
        self._salt = screening_key(credentials).encode()
        self.hits = Metrics.counter(READ_DOCUMENTS.namespace, "ocr_pages_cached")
        self.misses = Metrics.counter(READ_DOCUMENTS.namespace, "ocr_pages_read")

    def _path(self, key: str) -> str:
        named = hashlib.blake2b(key.encode() + b"\x00" + self._salt, digest_size=20).hexdigest()
        return FileSystems.join(self.directory, named[:2], f"{named}.json")

    def get(self, key: str) -> tuple[str, float | None] | None:
        try:
            with FileSystems.open(self._path(key)) as handle:
                entry = json.loads(handle.read().decode("utf-8"))
            text, confidence = entry["text"], entry["confidence"]
            if not isinstance(text, str) or not (confidence is None or isinstance(confidence, float)):
                return None
        except Exception:  # noqa: BLE001 - missing, truncated, not JSON: read the page again
            return None
        self.hits.inc()
        return text, confidence

    def put(self, key: str, text: str, confidence: float | None) -> None:
        self.misses.inc()
        screened = screen_text(text, self.credentials)
        if screened is None:
            return  # read by OCR again next time, and rejected again
        text, path = screened, self._path(key)
        try:
            # Written whole to a name of its own, then renamed: a reader never sees half an
            # entry, and two workers reading one page write the same bytes.
            staged = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
            with FileSystems.create(staged) as handle:
                handle.write(json.dumps({"text": text, "confidence": confidence}).encode("utf-8"))
            FileSystems.rename([staged], [path])
        except Exception as exc:  # noqa: BLE001 - a cache that cannot be written costs time, not the run
            log.warning("could not keep an OCR result in %s: %s", self.directory, exc)


def _open(readable: ReadableFile) -> tuple[BinaryIO, float | None, int]:
    """A matched file open for reading, its modification time and its size."""
    uri = readable.metadata.path
    if is_local(uri):
        # The modification time of what was read, from the open file: 0.0 is the epoch
        # (touch -d @0), not an unknown time.
        return _open_local(uri)
    # The file's own bytes: decode_file unpacks a .gz itself, under the limits on what it may
    # unpack to (AUTO would gunzip it without any). Beam's FileMetadata says 0.0 where a
    # filesystem did not report the time.
    handle = readable.open(compression_type=CompressionTypes.UNCOMPRESSED)
    return handle, readable.metadata.last_updated_in_seconds or None, readable.metadata.size_in_bytes


class _SliceRecordFiles(beam.DoFn):
    """A matched record dump bigger than its slice -> one ``(file, slice)`` per piece, so the
    shuffle after spreads one big file over the workers (as Beam's own sources split Parquet by
    row group and text by byte range); every other element passes through. A Parquet file's
    pieces come from its footer; a JSONL file's from one pass counting newlines (its line
    numbers must stay the file's). A file that cannot be sliced passes whole, and its reader
    says what is wrong with it."""

    def __init__(self, options: ReadOptions) -> None:
        self._options = options
        self._slices = Metrics.counter(*READ_SLICES)

    def _slice_bytes(self, uri: str) -> int | None:
        ext = extension(uri)
        if ext in PARQUET_EXTENSIONS:
            return self._options.parquet.slice_bytes
        if ext in JSONL_EXTENSIONS:
            return self._options.jsonl.slice_bytes
        return None

    def _slices_of(self, found: ReadableFile) -> Sequence[ParquetSlice | LineSlice]:
        """The file's pieces; fewer than two: it is read whole."""
        slice_bytes = self._slice_bytes(found.metadata.path)
        # A Parquet file an eighth of a slice on disk holds about one slice of text (zstd packs
        # text 3-8x), a JSONL file under a slice is one: read whole, never opened here.
        parquet = slice_bytes is not None and extension(found.metadata.path) in PARQUET_EXTENSIONS
        if slice_bytes is None or found.metadata.size_in_bytes <= (
                slice_bytes // 8 if parquet else slice_bytes):
            return []
        try:
            with _open(found)[0] as handle:
                head = handle.read(HEAD_BYTES)
                handle.seek(0)
                if not streams(found.metadata.path, head):
                    return []
                if parquet:
                    return parquet_slices(handle, slice_bytes)
                return jsonl_slices(handle, slice_bytes, BLOCK)
        except Exception:  # noqa: BLE001 - not Parquet, unreadable, gone: the reader says which
            return []

    def process(self, found: ReadableFile | Rejected) -> Iterable:
        slices = [] if isinstance(found, Rejected) else self._slices_of(found)
        if len(slices) < 2:
            tally(PIECES_MATCHED)
            yield found
            return
        tally(PIECES_MATCHED, len(slices))
        self._slices.inc(len(slices))
        for part in slices:
            yield found, part


class _NotRegular(Exception):
    """The path no longer names a regular file (swapped for a FIFO or device after the walk)."""


def _read_limit(uri: str, options: ReadOptions) -> int | None:
    """Bytes worth reading: a single document one byte past its limit (enough to reject it
    as oversized) even if the file grew after it was listed; record files whole."""
    limit = options.max_document_bytes
    return limit + 1 if limit is not None and extension(uri) in SINGLE_DOCUMENT_EXTENSIONS else None


def _open_local(path: str) -> tuple[BinaryIO, float, int]:
    """A local file open for reading, its modification time (seconds since the epoch) and
    size, checked again at open: the walk saw a regular file, but the path may have been
    replaced since. O_NONBLOCK so that opening a FIFO returns instead of waiting for a writer
    forever (open(2)), then fstat on the open descriptor decides."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    handle = os.fdopen(fd, "rb")
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode):
        handle.close()
        raise _NotRegular("not a regular file (it changed after it was listed)")
    return handle, found.st_mtime, found.st_size


def first_position(part: ParquetSlice | LineSlice | None) -> int:
    """The position (``Document.position``) of a piece's first record; 0 for a whole file."""
    if isinstance(part, LineSlice):
        return part.first_line
    if isinstance(part, ParquetSlice):
        return part.first_row
    return 0


def _spread_key(found: ReadableFile | Rejected | tuple[ReadableFile, ParquetSlice | LineSlice],
                shares: int, memo_shares: int | None = None) -> tuple[int, Any]:
    """``(share, piece)``: a file by its path, a slice of one by its path and place, so one big
    file's slices go to many shares (and workers). With a previous memo, by the memo's share of
    the piece (``chunkline.memo.unit_share``): the pieces whose documents' results sit in one
    share of the memo are read one after another, and the share is loaded once."""
    if isinstance(found, Rejected):
        name = found.uri
    elif memo_shares is not None:
        whole, part = found if isinstance(found, tuple) else (found, None)
        return unit_share(whole.metadata.path, first_position(part), memo_shares), found
    elif isinstance(found, tuple):
        name = f"{found[0].metadata.path}#{found[1]!r}"
    else:
        name = found.metadata.path
    return share_of(name, shares), found


class _ReadPattern(beam.PTransform):
    """One pattern: match, read, decode; document ids relative to the pattern's own root."""

    def __init__(
        self, pattern: str, options: ReadOptions, follow_symlinks: bool, exclude: tuple[str, ...],
        ocr_cache: str | None = None, trusted: MemoSource | None = None, shares: int = 1024,
        credentials: CredentialOptions = CredentialOptions(), memo: MemoSource | None = None,
        state: StateSource | None = None, settle: bool = False,
    ) -> None:
        super().__init__()
        self._state, self._settle = state, settle
        self._memo = memo if memo is not None else trusted
        self._shares = shares
        self._trusted = trusted
        self._credentials = credentials
        self._pattern = pattern
        self._options = options
        self._follow = follow_symlinks
        self._exclude = exclude
        self._ocr_cache = ocr_cache

    def expand(self, begin: PBegin):
        memo_shares = self._memo.previous_shares if self._memo is not None else None
        decoded = (
            begin
            | "Match" >> MatchPattern(self._pattern, self._follow, self._exclude)
            | "SliceRecordFiles" >> beam.ParDo(_SliceRecordFiles(self._options))
            # Matching runs on one worker; without a shuffle every file would be read there too.
            # Spread by a share of each piece's name, a list per share (transforms/shares.py):
            # not an element per file through a shuffle.
            | "ByShare" >> beam.Map(_spread_key, self._shares, memo_shares).with_output_types(tuple[int, Any])
            | "Spread" >> GroupInShares(self._shares)
            | "Unspread" >> beam.FlatMap(lambda shared: shared[1]).with_output_types(Any)
            | "Decode" >> beam.ParDo(_DecodeFile(input_root(self._pattern), self._options,
                                                 self._ocr_cache, self._trusted, self._credentials,
                                                 self._memo, self._state, self._settle))
            .with_input_types(Union[ReadableFile, Rejected,
                                    tuple[ReadableFile, Union[ParquetSlice, LineSlice]]])
            .with_output_types(Document, rejected=Rejected, settled=SettledBatch)
            .with_outputs(REJECTED, SETTLED, main="documents")
        )
        return ReadOutputs(decoded.documents, decoded[REJECTED], decoded[SETTLED])


class Place(NamedTuple):
    """Where a document was read (``Document.uri`` and ``position``) and, for a record of a
    plain JSONL file, its line's bytes there (``chunkline.state.unpack(doc.counted)``'s offset and
    length, as this run's read found them): what :class:`ReadPlaces` reads again."""

    uri: str
    position: int
    offset: int | None = None
    length: int | None = None


def file_of(uri: str) -> str:
    """The file a document's uri lies in: an archive member's or attachment's
    (``<file>//<member>``, ``chunkline.containers.MEMBER_SEPARATOR``) is its container's."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        scheme, rest = "", uri
    path = rest.split(MEMBER_SEPARATOR, 1)[0]
    return f"{scheme}://{path}" if sep else path


class _PlacePieces(beam.DoFn):
    """``(file, places)`` -> ``(piece, wanted places)``: a record whose line's bytes are known is
    read alone (a one-line :class:`LineSlice`); any other document, with the whole file it lies
    in. A file no longer there gives nothing: its documents are gone."""

    def process(self, keyed: tuple[str, Iterable[Place]]):
        path, places = keyed
        try:
            matched = FileSystems.match([path])[0].metadata_list
        except Exception:  # noqa: BLE001 - each filesystem says "not there" its own way
            matched = []
        if not matched:
            return
        readable = ReadableFile(matched[0])
        whole: set[tuple[str, int]] = set()
        for place in places:
            if place.offset is not None and place.length is not None and place.uri == path:
                yield ((readable, LineSlice(place.offset, place.offset + place.length, place.position)),
                       frozenset({(place.uri, place.position)}))
            else:
                whole.add((place.uri, place.position))
        if whole:
            yield readable, frozenset(whole)


class _DecodePlaces(_DecodeFile):
    """:class:`_DecodeFile` of a piece, keeping only the documents at the places asked for.
    Counted apart (``read_again``): each was counted once, where the run read it first."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._documents = Metrics.counter("read_again", "documents")
        self._rejected = Metrics.counter("read_again", "rejected")
        self._counts_pieces = False

    def process(self, element):
        piece, wanted = element
        for record in super().process(piece):
            if isinstance(record, Document) and (record.uri, record.position) in wanted:
                yield record


class ReadPlaces(beam.PTransform):
    """``PCollection[Place]`` -> ``PCollection[Document]``: the documents at those places read
    again, each exactly as :class:`ReadDocuments` of ``pattern`` with the same arguments makes
    it (ids, facts, input digest, the memo entries it carries). A rerun reads again only the
    unchanged documents a change affected (docs/ARCHITECTURE.md, "A rerun whose work follows
    the change"): a JSONL record from its line's bytes alone, any other document from its file
    (a Parquet row, an archive member or a page of a PDF with its whole file). A place whose file
    is gone, or that no longer holds a document, gives nothing: the caller compares what it
    asked for with what came back."""

    def __init__(self, pattern: str, options: ReadOptions | None = None, ocr_cache: str | None = None,
                 trusted: MemoSource | None = None, credentials: CredentialOptions = CredentialOptions(),
                 memo: MemoSource | None = None) -> None:
        super().__init__()
        self._pattern = pattern
        self._options = options if options is not None else ReadOptions()
        self._ocr_cache, self._trusted, self._credentials, self._memo = ocr_cache, trusted, credentials, memo

    def expand(self, places: PCollection[Place]):
        memo = self._memo if self._memo is not None else self._trusted
        return (
            places
            | "ByFile" >> beam.Map(lambda place: (file_of(place.uri), place))
            | "GroupByFile" >> beam.GroupByKey()
            | "Pieces" >> beam.ParDo(_PlacePieces())
            | "Decode" >> beam.ParDo(_DecodePlaces(input_root(self._pattern), self._options,
                                                   self._ocr_cache, self._trusted,
                                                   self._credentials, memo))
            .with_output_types(Document)
        )


class ReadDocuments(beam.PTransform):
    """``PBegin`` -> :class:`ReadOutputs` (``documents``, ``rejected``) for every file matched by
    ``patterns`` (one pattern or several; local paths or ``gs://``).

    Each matched file yields its documents or a ``Rejected`` naming why not (unsupported type,
    empty, binary, bad UTF-8, too large, a bad JSONL line or Parquet row, an IO error), and so
    does each matched entry that cannot be read at all (a directory that cannot be listed, a
    dangling symlink or loop, a FIFO, socket or device, a symlink leaving the input root):
    nothing matched is dropped silently. A pattern that matches nothing reads nothing.

    ``follow_symlinks``: also read what links leading out of a local pattern's input root point
    at (links inside it are always followed; a link reads as its own path). ``exclude``: paths
    (the run's output root) never read as input nor walked into; not rejections, counted as
    ``read/excluded``. ``ocr_cache``: a directory (local or gs://) keeping each OCR'd page's
    text by its pixels (:class:`OcrPageCache`), so an unchanged scan is read by OCR once.
    ``trusted``: a memo source: a file whose listed size and time are what the previous run
    read is not opened, its records recalled (``input.trust_file_metadata``). ``memo``: the
    run's memo source (``trusted``'s when not given): each document leaves the reader carrying
    the previous run's results for it (``Document.memo``). ``credentials``:
    the credential stage's options, which screen what the OCR cache and the memo keep (the
    default: the stage's defaults, never nothing). ``state``: the previous run's state table
    (``chunkline.state``): a document read as its row there holds it is counted
    (``read/settled``); with ``settle`` too it is not passed on as a document but in the
    ``settled`` output's batches (:class:`~chunkline.state.SettledBatch`).

        outputs = p | "Read" >> ReadDocuments("gs://bucket/docs/**", ReadOptions())
        outputs.documents, outputs.rejected
    """

    def __init__(
        self,
        patterns: str | Sequence[str],
        options: ReadOptions | None = None,
        follow_symlinks: bool = False,
        exclude: Sequence[str] = (),
        ocr_cache: str | None = None,
        trusted: MemoSource | None = None,
        shares: int = 1024,
        credentials: CredentialOptions = CredentialOptions(),
        memo: MemoSource | None = None,
        state: StateSource | None = None,
        settle: bool = False,
    ) -> None:
        super().__init__()
        self._state, self._settle = state, settle
        self._shares = shares
        self._trusted = trusted
        self._memo = memo
        self._credentials = credentials
        self._ocr_cache = ocr_cache
        self._patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
        if not self._patterns or not all(isinstance(p, str) and p for p in self._patterns):
            raise ValueError(f"ReadDocuments needs one or more non-empty patterns, got {patterns!r}")
        self._exclude = () if isinstance(exclude, str) else tuple(exclude)
        if isinstance(exclude, str) or not all(isinstance(e, str) and e for e in self._exclude):
            raise ValueError(f"ReadDocuments exclude must be a sequence of paths, got {exclude!r}")
        self._options = options if options is not None else ReadOptions()
        self._follow = follow_symlinks

    def expand(self, begin: PBegin):
        # One branch per pattern, because each pattern has its own root for relative ids.
        branches = [
            begin | f"Pattern{index}" >> _ReadPattern(pattern, self._options, self._follow,
                                                      self._exclude, self._ocr_cache, self._trusted,
                                                      self._shares, self._credentials, self._memo,
                                                      self._state, self._settle)
            for index, pattern in enumerate(self._patterns)
        ]
        documents = (
            [branch.documents for branch in branches]
            | "FlattenDocuments" >> beam.Flatten().with_output_types(Document)
        )
        rejected = (
            [branch.rejected for branch in branches]
            | "FlattenRejected" >> beam.Flatten().with_output_types(Rejected)
        )
        settled = (
            [branch.settled for branch in branches]
            | "FlattenSettled" >> beam.Flatten().with_output_types(SettledBatch)
        ) if self._settle and self._state is not None else None
        return ReadOutputs(documents, rejected, settled)

    def display_data(self) -> dict[str, object]:
        return {"patterns": ", ".join(self._patterns), "follow_symlinks": self._follow,
                "exclude": ", ".join(self._exclude)}
