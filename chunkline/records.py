"""The records that flow through the pipeline, and the Parquet schemas they are written with.

Defined once, here, next to each other: a schema is never inferred from a first batch
(datatrove's inferred Parquet schema broke on later batches). Records are frozen; a stage that
changes one returns a new record (``dataclasses.replace``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from bisect import bisect_right
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa

from chunkline.metadata import (
    FILE_MODIFIED,
    FILE_SIZE,
    MetadataPairs,
    file_facts,
    merged,
    metadata_json,
)
from chunkline.quantize import stored

# What the reader calls a record of a dump (a JSONL line, a Parquet row). Its file is the dump,
# whose size and modification time change with any record in it: they are not the record's
# facts, and on its row they would make a nightly edit of one record rewrite every other
# record's row (a dump of a million tickets, 1 % of them edited, would rewrite all of them).
RECORD_FORMATS = frozenset({"jsonl", "parquet"})

KEPT = "kept"
DUPLICATE = "duplicate"
REJECTED = "rejected"


@dataclass(frozen=True)
class Document:
    """One document: ``text`` is the text every chunk offset refers to."""

    doc_id: str
    uri: str
    text: str
    metadata: tuple[tuple[str, str], ...] = ()  # sorted (key, JSON value) pairs: hashable, stable
    # Where the record sits in its file: the 1-based line of a JSONL record, the 0-based row of a
    # Parquet record, 0 for a whole-file document (``chunkline.readers.locator`` spells it out).
    # Provenance, like ``encoding``, not content: two equal texts under one id compare equal.
    position: int = field(default=0, compare=False)
    # The Python codec the file's bytes were decoded with ("utf-8", "utf-16", "windows-1251");
    # "" where no bytes were decoded (a document built in code).
    encoding: str = field(default="", compare=False)
    # What the reader made of the file: "markdown", "text", "code", "html", "pdf", "jsonl",
    # "parquet" ("" for a document built in code). Provenance, like the file's size and
    # modification time (seconds since the epoch), which enter the metadata column.
    format: str = field(default="", compare=False)
    file_size: int | None = field(default=None, compare=False)
    file_modified: float | None = field(default=None, compare=False)
    # A paged document (PDF): where each page starts in ``text`` (page 1 at index 0), kept
    # exact through cleaning and boilerplate removal; () for a document without pages.
    page_starts: tuple[int, ...] = ()
    # The document's own outline (PDF bookmarks): (page index, level, title) in outline order.
    outline: tuple[tuple[int, int, str], ...] = ()
    # What the reader made of the input (:func:`input_digest`), set once as it is read and kept
    # through cleaning: a rerun tells an edited document from one a corpus-wide change moved.
    input_digest: str = field(default="", compare=False)
    # Who may read it (``chunkline.access.principals_of``: sorted, each once), set by the access
    # stage before dedupe; None: access control is off for the run.
    principals: tuple[str, ...] | None = None
    # The previous run's results for this document, packed (``chunkline.memo.pack``): set where
    # it is read, read by the stages that would compute them, dropped before it is parked for
    # the split. Never a credential's value (``chunkline.memo``'s kinds); not content.
    memo: bytes = field(default=b"", compare=False, repr=False)
    # What the corpus-wide stages computed of it for the run's state table
    # (``chunkline.state``: the text boilerplate counted and its keys, dedupe's band keys),
    # recorded as it passes them and read where dedupe releases it. Not content.
    counted: bytes = field(default=b"", compare=False, repr=False)

    def all_metadata(self) -> MetadataPairs:
        """The file's facts (``source_uri``, ``file_size``, ``file_modified``) under the
        document's own metadata: what the documents table's ``metadata`` column holds. A record
        of a dump (:data:`RECORD_FORMATS`) has ``source_uri`` only: the size and time are the
        dump's."""
        if self.format in RECORD_FORMATS:
            return merged(file_facts(self.uri, None, None), self.metadata)
        return merged(file_facts(self.uri, self.file_size, self.file_modified), self.metadata)

    def chunk_metadata(self, keys: Sequence[str] | None = None) -> MetadataPairs:
        """What a chunk row carries: ``source_uri`` under the document's own metadata, without
        the file's size and modification time unless ``keys`` (``output.chunk_metadata``) names
        them. A row then changes only with its content or the user's metadata: a touched file,
        a fresh clone, or a record appended to its JSONL dump (which grows the file) leaves
        every other row as it was, and a store synced from the index takes only real changes.
        A record of a dump never carries them (:meth:`all_metadata`)."""
        wanted = set(keys or ()) if self.format not in RECORD_FORMATS else set()
        return merged(file_facts(self.uri, self.file_size if FILE_SIZE in wanted else None,
                                 self.file_modified if FILE_MODIFIED in wanted else None),
                      self.metadata)

    def page_range(self, start: int, end: int) -> tuple[int, int] | tuple[None, None]:
        """The 1-based first and last page holding ``text[start:end]``; (None, None) for a
        document without pages."""
        if not self.page_starts:
            return None, None
        # Judged on the text, not the whitespace around it: a chunk that starts on the blank
        # line between two pages holds text of the second only.
        first, last = start, end - 1
        while first < last and self.text[first].isspace():
            first += 1
        while last > first and self.text[last].isspace():
            last -= 1
        return bisect_right(self.page_starts, first), bisect_right(self.page_starts, max(first, last))


_DOCUMENT_FIELDS = frozenset(field.name for field in dataclasses.fields(Document))


def evolved(doc: Document, **changes: Any) -> Document:
    """``dataclasses.replace(doc, **changes)`` for the reader's hot path: the fields copied, not
    passed through ``__init__`` (Document has no ``__post_init__`` to run), about a tenth of the
    cost, paid two or three times by every document of every rerun. A name that is not a field
    is an error, as with ``replace``."""
    unknown = changes.keys() - _DOCUMENT_FIELDS
    if unknown:
        raise TypeError(f"Document has no field {sorted(unknown)[0]!r}")
    new = object.__new__(Document)
    fields = new.__dict__
    fields.update(doc.__dict__)
    fields.update(changes)
    return new


@dataclass(frozen=True)
class Rejected:
    """A document (or record) that could not be read, with the reason. Never dropped silently."""

    uri: str
    doc_id: str
    reason: str


@dataclass(frozen=True)
class DocumentStatus:
    """What became of one document read: kept, a duplicate of another, or rejected."""

    doc_id: str
    uri: str
    text: str
    doc_hash: str
    status: str
    duplicate_of: str | None = None
    encoding: str = ""  # the document's ``Document.encoding``; "" for a rejected document
    format: str = ""  # the document's ``Document.format``; "" for a rejected one
    metadata: str = "{}"  # JSON object text: ``Document.all_metadata()``
    page_starts: tuple[int, ...] | None = None  # a paged document's ``Document.page_starts``
    input_digest: str = ""  # the document's ``Document.input_digest``; "" for a rejected one
    principals: tuple[str, ...] | None = None  # the document's; None for a rejected one

    @classmethod
    def of(cls, doc: Document, digest: str, status: str, duplicate_of: str | None = None) -> DocumentStatus:
        return cls(doc.doc_id, doc.uri, doc.text, digest, status, duplicate_of, doc.encoding,
                   doc.format, metadata_json(doc.all_metadata()), doc.page_starts or None,
                   doc.input_digest, doc.principals)


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk of a kept document; ``embedding`` is None until the embed stage (or when
    embedding is switched off)."""

    doc_id: str
    chunk_id: str
    chunk_index: int
    start: int
    end: int
    headings: tuple[str, ...]
    text: str
    tokens: int
    embedding: tuple[float, ...] | None = field(default=None, compare=False)
    # Prepended for embedding only (the heading path, cut to its token reserve); not stored.
    prefix: str = ""
    # LLM-written header situating the chunk in its document (contextual retrieval), and what
    # became of the request: "off" (stage disabled), "ok", "cached", "failed".
    context: str = ""
    context_status: str = "off"
    # A table split between rows repeats its header row(s) in the embedded text; the chunk's own
    # span stays exact, so the header lives here, not in ``text``.
    table_header: str = ""
    # hash(model, dtype, mode, embed_text()): equal keys may reuse a previous run's vector.
    content_key: str = ""
    # The document's metadata as JSON object text (the keys ``output.chunk_metadata`` names),
    # and the 1-based pages the chunk spans in a paged document (None otherwise). Not in the
    # content key: a metadata change keeps the chunk's vector.
    metadata: str = "{}"
    page_start: int | None = None
    page_end: int | None = None
    # BM25 weights of ``search_text`` as a sparse vector: term ids ascending
    # (``chunkline.sparse.term_id``) and their weights; empty when the sparse stage is off.
    sparse_indices: tuple[int, ...] = ()
    sparse_values: tuple[float, ...] = ()
    # ``chunkline.carry.carry_key`` of its document: beside the row in the carry sidecar, so a
    # rerun can take the row instead of making it again. Not stored in the chunks table.
    carry_key: str = field(default="", compare=False)
    # Its document's principals (who may read it); None with access control off. Not in the
    # content key: a change of who may read a chunk keeps its vector.
    principals: tuple[str, ...] | None = None

    def embed_text(self) -> str:
        """What the embedder reads: heading path, contextual header, repeated table header,
        then the chunk text. Also the ``search_text`` column (for BM25)."""
        context = self.context + "\n\n" if self.context else ""
        return self.prefix + context + self.table_header + self.text

    @property
    def search_text(self) -> str:
        return self.embed_text()


@dataclass(frozen=True)
class DocumentChunks:
    """A kept document with its chunks, in chunk order: what flows from split to the embed
    stage, so that no later stage (contextual headers, late content keys, late chunking) has to
    re-join a chunk with its document by id. An empty ``chunks`` is a document that made no
    chunk (whitespace only): it flows on, and flattens to nothing."""

    document: Document
    chunks: tuple[ChunkRecord, ...] = ()


def normalize_for_hash(text: str) -> str:
    """Exact-duplicate key text: NFC, lines stripped of trailing space, runs of blank lines and
    all whitespace inside a line collapsed, case kept."""
    text = unicodedata.normalize("NFC", text)
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def doc_hash(text: str) -> str:
    """sha256 hex of :func:`normalize_for_hash`: equal for texts that differ only in spacing.

    Hashed a window of whole lines at a time: a long text's lines and their normalized forms,
    as lists, and the joined string held ~4 times the text (22 MB for a 5 MB CSV table's
    101,000 lines; 0.4 MB a window at a time). The digest is the same: each window ends after
    a "\n", which no other character composes with (NFC) or joins to a line break ("\r\n"
    ends there), so the windows' lines are the text's and their normalized forms joined are
    the whole's."""
    digest = hashlib.sha256()
    joined = False
    for piece in line_windows(text):
        normalized = normalize_for_hash(piece)
        if normalized:
            if joined:
                digest.update(b"\n")
            digest.update(normalized.encode("utf-8", "surrogatepass"))
            joined = True
    return digest.hexdigest()


# Characters of a text a line-by-line pass takes at once, about (see line_windows).
LINE_WINDOW = 1 << 16


def line_windows(text: str, size: int = LINE_WINDOW) -> Iterator[str]:
    """``text`` in consecutive pieces of about ``size`` characters, each but the last ending with
    "\n" (a line longer than half a window: up to its end), for a pass that reads a text line
    by line to hold a window's lines at a time, not the whole text's."""
    start, length = 0, len(text)
    while start < length:
        if start + size >= length:
            yield text[start:] if start else text
            return
        cut = text.rfind("\n", start + size // 2, start + size)
        if cut < 0:
            cut = text.find("\n", start + size)
            if cut < 0:
                yield text[start:] if start else text
                return
        yield text[start:cut + 1]
        start = cut + 1


def framed_digest(parts: Iterable[str], fixed: tuple[str, ...] = ()) -> str:
    """blake2b (128 bits) of ``fixed`` then ``parts``, each preceded by its length: ("ab", "c")
    and ("a", "bc") differ."""
    return framed_digest_bytes(parts, fixed).hex()


def framed_digest_bytes(parts: Iterable[str], fixed: tuple[str, ...] = ()) -> bytes:
    """:func:`framed_digest` as its 16 bytes. ``fixed``: leading parts that thousands of calls
    share (a stage's settings, a run's processing signature, kilobytes of JSON): hashed once
    per process, each call copying that state. The framed parts are joined and hashed in one
    call: the same bytes as updating part by part, without a call per length and per part."""
    framed = []
    size = 0
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        framed.append(len(data).to_bytes(8, "little"))
        framed.append(data)
        size += len(data)
    digest = framed_state(fixed)
    if size > _JOINED_BYTES:  # a big text is hashed where it lies, not copied once more
        for data in framed:
            digest.update(data)
    else:
        digest.update(b"".join(framed))
    return digest.digest()


def framed_state(fixed: tuple[str, ...]):
    """A blake2b (128 bits) hasher that has taken ``fixed``, each part after its length, for the
    caller to go on with: its own copy of a state hashed once per process."""
    return _hashed(fixed).copy()


@functools.lru_cache(maxsize=64)
def _hashed(fixed: tuple[str, ...]):
    digest = hashlib.blake2b(digest_size=16)
    for part in fixed:
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest


_JOINED_BYTES = 1 << 20


def text_digest(text: str) -> bytes:
    """blake2b (128 bits) of the text's UTF-8. Cached per process on the string: the reader's
    input digest and the stages fused with it (clean, credentials, boilerplate keys) ask for the
    same text object, and Python keeps a string's hash on it, so a hit costs a pointer
    comparison. Only a text of at most :data:`CACHED_TEXT_CHARS` is cached: the cache holds the
    strings it was asked about, which kept each form of a 5 MB document (read, cleaned,
    stripped) alive to the end of the job; a longer text is hashed again (~2 ms a MB), a
    window of its UTF-8 at a time rather than as one more copy of it."""
    if len(text) <= CACHED_TEXT_CHARS:
        return _cached_text_digest(text)
    digest = hashlib.blake2b(digest_size=16)
    for start in range(0, len(text), CACHED_TEXT_CHARS):
        # Each code point is encoded alone (a lone surrogate too, with surrogatepass): the
        # windows' bytes, one after the other, are the whole text's.
        digest.update(text[start:start + CACHED_TEXT_CHARS].encode("utf-8", "surrogatepass"))
    return digest.digest()


CACHED_TEXT_CHARS = 1 << 16


@functools.lru_cache(maxsize=64)
def _cached_text_digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def input_digest(doc: Document) -> str:
    """The digest of what the reader made of a document's input: its id, source, format,
    decoded text, own metadata (front matter, a record's fields), pages and outline. Not the
    file's size or modification time: a touched file with the same bytes is the same input."""
    return framed_digest((doc.doc_id, doc.uri, doc.format, text_digest(doc.text).hex(),
                          repr((doc.metadata, doc.page_starts, doc.outline))))


def chunk_id(doc_id: str, start: int, end: int) -> str:
    """Deterministic chunk id from the document id and the span: a retried bundle gives the same
    ids (Beam's own ``uuid4`` chunk ids do not)."""
    return f"{doc_id}#{start}-{end}"


def content_key(embedding_signature: str, embedded_text: str) -> str:
    """Key of a vector: what made it (model, weights, dtype, mode; see
    ``chunkline.pipeline.run.embedding_signature``) and exactly what it read. Equal keys give equal vectors,
    so a reindex reuses the previous run's vector instead of embedding again."""
    digest = hashlib.sha256()
    digest.update(embedding_signature.encode("utf-8"))
    digest.update(b"\x00")
    digest.update(embedded_text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


_STORED_TYPES = {"float32": pa.float32(), "float16": pa.float16(), "int8": pa.int8()}


def chunk_schema(dim: int | None, vector_dtype: str = "float32", principals: bool = False) -> pa.Schema:
    """Chunks table; ``embedding`` is fixed_size_list<float32>[dim] (float16 or int8 with
    ``vector_dtype``; int8 adds ``embedding_scale``, see ``chunkline.quantize``), or
    absent-valued (null list) when ``dim`` is None (embedding switched off). With
    ``principals`` (access control on) a ``principals`` column: who may read each chunk.
    Without, no such column: a run with access off is written as before it existed."""
    item = _STORED_TYPES[vector_dtype]
    vector = pa.list_(item, dim) if dim else pa.list_(item)
    scale = [pa.field("embedding_scale", pa.float32(), nullable=True)] if vector_dtype == "int8" else []
    return pa.schema(
        [
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("chunk_index", pa.int32(), nullable=False),
            pa.field("start", pa.int64(), nullable=False),
            pa.field("end", pa.int64(), nullable=False),
            pa.field("headings", pa.list_(pa.string()), nullable=False),
            pa.field("text", pa.string(), nullable=False),
            pa.field("tokens", pa.int32(), nullable=False),
            pa.field("table_header", pa.string(), nullable=False),
            pa.field("context", pa.string(), nullable=False),
            pa.field("context_status", pa.string(), nullable=False),
            pa.field("search_text", pa.string(), nullable=False),
            pa.field("content_key", pa.string(), nullable=False),
            pa.field("metadata", pa.string(), nullable=False),
            pa.field("page_start", pa.int32(), nullable=True),
            pa.field("page_end", pa.int32(), nullable=True),
            pa.field("sparse_indices", pa.list_(pa.int32()), nullable=False),
            pa.field("sparse_values", pa.list_(pa.float32()), nullable=False),
            *_principals_field(principals, nullable=False),
            pa.field("embedding", vector, nullable=dim is None),
            *scale,
        ]
    )


# A vector is a fixed-size list in memory (its length is part of its type: the stores and the
# ranking take it from there) and a plain list in the Parquet files: Iceberg has no fixed-size
# list (spec, "Nested Types"), and Polars' native Iceberg reader refuses a file whose Arrow schema
# records one under a column the table calls a list. The length travels in the field's metadata.
VECTOR_SIZE_KEY = b"chunkline.vector_size"


def parquet_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as its Parquet files store it: a fixed-size ``embedding`` as a list with its
    length in the field's metadata (:func:`with_fixed_vectors` undoes it)."""
    at = schema.get_field_index("embedding")
    if at < 0 or not pa.types.is_fixed_size_list(schema.field(at).type):
        return schema
    field = schema.field(at)
    metadata = {**(field.metadata or {}), VECTOR_SIZE_KEY: str(field.type.list_size).encode()}
    return schema.set(at, pa.field(field.name, pa.list_(field.type.value_field), field.nullable, metadata))


def in_memory_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as read from a Parquet file, with its vector's fixed size restored (a file
    written before vectors were stored as lists is returned as it is)."""
    at = schema.get_field_index("embedding")
    if at < 0:
        return schema
    field = schema.field(at)
    size = (field.metadata or {}).get(VECTOR_SIZE_KEY)
    if size is None or not pa.types.is_list(field.type):
        return schema
    metadata = {k: v for k, v in field.metadata.items() if k != VECTOR_SIZE_KEY}
    fixed = pa.list_(field.type.value_field, int(size))
    return schema.set(at, pa.field(field.name, fixed, field.nullable, metadata or None))


def to_parquet(table: pa.Table) -> pa.Table:
    """``table`` in the types its Parquet file stores (:func:`parquet_schema`)."""
    stored = parquet_schema(table.schema)
    return table if stored is table.schema else table.cast(stored)


def with_fixed_vectors(table: pa.Table) -> pa.Table:
    """A table read from a Parquet file, its vectors fixed-size again (:func:`in_memory_schema`)."""
    schema = in_memory_schema(table.schema)
    return table if schema is table.schema else table.cast(schema)


def _principals_field(wanted: bool, nullable: bool) -> list[pa.Field]:
    return [pa.field("principals", pa.list_(pa.string()), nullable=nullable)] if wanted else []


def document_schema(principals: bool = False) -> pa.Schema:
    """Documents table; with ``principals`` (access control on) who may read each kept or
    duplicate document (null for a rejected one)."""
    return pa.schema(
        [
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("uri", pa.string(), nullable=False),
            pa.field("text", pa.string(), nullable=False),
            pa.field("doc_hash", pa.string(), nullable=False),
            pa.field("status", pa.string(), nullable=False),
            pa.field("duplicate_of", pa.string(), nullable=True),
            pa.field("encoding", pa.string(), nullable=False),
            pa.field("format", pa.string(), nullable=False),
            pa.field("metadata", pa.string(), nullable=False),
            pa.field("page_starts", pa.list_(pa.int64()), nullable=True),
            pa.field("input_digest", pa.string(), nullable=False),
            *_principals_field(principals, nullable=True),
        ]
    )


def rejected_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("uri", pa.string(), nullable=False),
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("reason", pa.string(), nullable=False),
        ]
    )


def chunk_row(record: ChunkRecord, schema: pa.Schema) -> dict[str, Any]:
    """A chunk as a row of ``schema``: its vector stored in the schema's type (quantized to
    int8 with its scale, or float16)."""
    names = [n for n in schema.names if n not in ("embedding", "embedding_scale")]
    row = {name: list(v) if isinstance(v := getattr(record, name), tuple) else v for name in names}
    item = schema.field("embedding").type.value_type
    dtype = next(name for name, stored_type in _STORED_TYPES.items() if stored_type == item)
    if record.embedding is None:
        row["embedding"] = None
        if dtype == "int8":
            row["embedding_scale"] = None
        return row
    values, scale = stored(record.embedding, dtype)
    row["embedding"] = values
    if dtype == "int8":
        row["embedding_scale"] = scale
    return row


def as_row(record: Any, schema: pa.Schema) -> dict[str, Any]:
    """A record as a dict with exactly the schema's columns (tuples as lists)."""
    row = {}
    for name in schema.names:
        value = getattr(record, name)
        row[name] = list(value) if isinstance(value, tuple) else value
    return row
