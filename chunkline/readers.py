"""Files to documents: bytes in, ``Document``s and ``Rejected``s out, never an exception.

Pure (no Beam): ``transforms/read.py`` matches and reads files and hands each one's bytes here.
Which decoder runs is decided by the file extension, case-insensitive:

    .txt .md .markdown   one document, the text as it is (line endings kept: chunk offsets
                         refer to this text; cleaning is another stage's job)
    .py .js .mjs .ts     one document, the source code as it is, like a text file (the uri
    .tsx .go .java .rs   keeps the extension, so a code splitter can pick its grammar)
    .html .htm           one document, the page's main content as Markdown
                         (``chunkline.html_markdown``: trafilatura); a page with none is rejected
    .pdf                 one document, the text of its pages joined by a blank line, with the
                         page-start table and the outline (``chunkline.pdf``: PDFium)
    .jsonl               one document per non-blank line (a JSON object)
    .parquet             one document per row; a file without rows is rejected as empty
    .gz .bz2 .xz .zst    the file inside, read by its own name (``a.jsonl.gz`` as ``a.jsonl``),
                         under its container's id; known by magic bytes too
    .zip .tar .tgz       each member read as a file of its own, id ``<archive id>//<member>``
                         (``chunkline.containers``: bombs, escaping paths and links refused)

Metadata (``chunkline.metadata``): a Markdown or text file's YAML front matter is parsed and cut
from the text (the document's text starts after it, so offsets stay exact); an HTML page's
title, author, date, URL and language and a PDF's title and author are recorded; a JSONL
record's metadata object and a Parquet file's metadata columns are copied, each value made
JSON. The user's own fields win over what the format declares. Every document also records its
``format`` and its file's size and modification time. A document's metadata is bounded
(``ReadOptions.max_metadata_depth``, ``max_metadata_bytes``, and ``chunkline.metadata.MAX_VALUES``
values): over a bound, the document is rejected with the bound, what was found and the key.

U+0000 (NUL), which neither PostgreSQL ``text`` nor ``jsonb`` can hold, never leaves a reader:
it is dropped from a document's text (and a PDF's outline titles; page starts move with it),
written U+FFFD in metadata (``chunkline.metadata``), and an id or file name holding one is
rejected (an id is identity: mapping it could merge two documents).

Text is decoded by :func:`decode_text`, and every document records the codec in ``encoding``.
A BOM (UTF-8, UTF-16, UTF-32) always decides, for every type above but Parquet (whose strings
are UTF-8 by definition). HTML then follows its declared charset (``<meta>``, the XML
declaration). Otherwise text is UTF-8, and bytes that are not are handed to charset-normalizer;
its answer is taken only past a confidence bar (every candidate nearly as good reads the same
text), so a legacy cp1251 or Shift_JIS text of some length is read and recorded as such, while
a few accented letters, or Western prose it cannot tell between cp1252, cp1250 and cp1257, stay
rejected with the UTF-8 error rather than indexed as mojibake. A file that looks binary (a NUL,
or mostly control bytes) is rejected before any detector sees it. JSONL without a BOM is UTF-8
only (RFC 8259 section 8.1).

A file document's id is its path relative to the input root (``manuals/arm.md``); a JSONL or
Parquet document's id is its record's id, and ``Document.position`` its line or row. Every input
is accounted for: what cannot become a document becomes a ``Rejected`` saying why (datatrove's
``base_filter.py`` keeps drops the same way). A record-level rejection is located as
``<relative path>#L<line>`` (1-based) for JSONL and ``<relative path>#row<index>`` (0-based, as
in ``table.slice``) for Parquet (:func:`locator`).
"""

from __future__ import annotations

import codecs
import io
import json
import posixpath
import re
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, BinaryIO, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from annotated_types import Ge, MinLen

from chunkline.clean import without_nul
from chunkline.containers import (
    CONTAINER_SUFFIXES,
    HEAD_BYTES,
    MEMBER_SEPARATOR,
    ContainerOptions,
    is_container,
    unpacked,
)
from chunkline.html_markdown import html_to_text, main_content, page_metadata
from chunkline.metadata import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    NUL,
    FrontMatter,
    MetadataError,
    front_matter,
    metadata_pairs,
    over_byte_limit,
)
from chunkline.options import check_fields, help_text
from chunkline.pdf import read_pdf
from chunkline.records import Document, Rejected

TEXT_EXTENSIONS = frozenset({".txt", ".md", ".markdown"})
# Source code is read as text, verbatim; the extension stays in the uri and the doc_id.
CODE_EXTENSIONS = frozenset({".py", ".js", ".mjs", ".ts", ".tsx", ".go", ".java", ".rs"})
HTML_EXTENSIONS = frozenset({".html", ".htm"})
JSONL_EXTENSIONS = frozenset({".jsonl"})
PARQUET_EXTENSIONS = frozenset({".parquet"})
PDF_EXTENSIONS = frozenset({".pdf"})
# One file, one document: the file's size is the document's size, so an oversized file can be
# rejected from its metadata without reading it. (A PDF's size is mostly fonts and images: its
# limit applies to the text read from it.)
SINGLE_DOCUMENT_EXTENSIONS = TEXT_EXTENSIONS | CODE_EXTENSIONS | HTML_EXTENSIONS
SUPPORTED_EXTENSIONS = (SINGLE_DOCUMENT_EXTENSIONS | JSONL_EXTENSIONS | PARQUET_EXTENSIONS
                        | PDF_EXTENSIONS)
# The ``format`` each extension's documents record.
FORMATS = {
    **{ext: "markdown" for ext in (".md", ".markdown")}, ".txt": "text",
    **{ext: "code" for ext in CODE_EXTENSIONS}, **{ext: "html" for ext in HTML_EXTENSIONS},
    ".jsonl": "jsonl", ".parquet": "parquet", ".pdf": "pdf",
}

EMPTY = "empty document"
BINARY = "binary file"
NO_MAIN_CONTENT = "no main content"

_GLOB_CHARS = re.compile(r"[*?\[]")
_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# The binary sniff looks where file(1) and Perl's -B look: the first block.
_SNIFF_BYTES = 8192
_MAX_CONTROL_RATIO = 0.30
# C0 controls that do occur in text (tab, newlines, form feed, backspace, ESC of ANSI logs).
_TEXT_CONTROLS = frozenset(b"\t\n\v\f\r\x08\x1b")
_CONTROL_BYTES = frozenset(b for b in range(0x20) if b not in _TEXT_CONTROLS) | {0x7F}


@dataclass(frozen=True)
class JsonlOptions:
    """Where a JSON Lines record keeps its id, text and metadata."""

    id_field: Annotated[str, MinLen(1)] = field(default="id", metadata=help_text(
        "Record field holding the document id (a string or an integer)."))
    text_field: Annotated[str, MinLen(1)] = field(default="text", metadata=help_text(
        "Record field holding the text (a string)."))
    metadata_field: Annotated[str, MinLen(1)] | None = field(default="metadata", metadata=help_text(
        "Record field holding an object of metadata; null: ignored."))

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class ParquetOptions:
    """Which columns of a Parquet file hold the id, text and metadata."""

    id_column: Annotated[str, MinLen(1)] = field(default="id", metadata=help_text(
        "Column holding the document id."))
    text_column: Annotated[str, MinLen(1)] = field(default="text", metadata=help_text(
        "Column holding the text."))
    metadata_columns: tuple[Annotated[str, MinLen(1)], ...] = field(default=(), metadata=help_text(
        "Columns kept as metadata."))
    slice_bytes: Annotated[int, Ge(1)] = field(default=64_000_000, metadata=help_text(
        "Uncompressed bytes of row groups read as one piece: a bigger file is cut at row group "
        "bounds into pieces that go to different workers."))

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class ReadOptions:
    """How records are found in JSONL and Parquet files, and the bounds of a document and of
    its metadata."""

    jsonl: JsonlOptions = field(default=JsonlOptions(), metadata=help_text(
        "JSON Lines records (.jsonl)."))
    parquet: ParquetOptions = field(default=ParquetOptions(), metadata=help_text(
        "Parquet records (.parquet)."))
    max_document_bytes: Annotated[int, Ge(1)] | None = field(default=10_000_000, metadata=help_text(
        "UTF-8 bytes of one document; larger ones are rejected with that reason. null: no limit."))
    max_metadata_depth: Annotated[int, Ge(1)] | None = field(default=DEFAULT_MAX_DEPTH, metadata=help_text(
        "Levels of nesting in one document's metadata (the metadata object is level 1; "
        "{\"a\": [1]} is 2); deeper ones are rejected. null: no limit."))
    max_metadata_bytes: Annotated[int, Ge(1)] | None = field(default=DEFAULT_MAX_BYTES, metadata=help_text(
        "UTF-8 bytes of one document's metadata JSON, the file facts included (every chunk "
        "carries a copy); larger ones are rejected. null: no limit."))
    containers: ContainerOptions = field(default=ContainerOptions(), metadata=help_text(
        "Compressed files (.gz .bz2 .xz .zst) and archives (.zip, .tar, .tgz): what one such "
        "file may unpack to."))

    def __post_init__(self) -> None:
        check_fields(self)
        if not isinstance(self.jsonl, JsonlOptions) or not isinstance(self.parquet, ParquetOptions):
            raise ValueError("ReadOptions.jsonl and .parquet are JsonlOptions and ParquetOptions")
        if not isinstance(self.containers, ContainerOptions):
            raise ValueError("ReadOptions.containers is a ContainerOptions")


# --- Paths -------------------------------------------------------------------------------------


def input_root(pattern: str) -> str:
    """The directory part of ``pattern`` before its first glob character (``*?[``), without a
    trailing slash; the directory of the file itself when there is no glob.

    >>> input_root("gs://bucket/docs/**/*.md"), input_root("corpus/a.txt"), input_root("*.md")
    ('gs://bucket/docs', 'corpus', '')
    """
    scheme_match = _URI_SCHEME.match(pattern)
    scheme = scheme_match.group(0) if scheme_match else ""
    path = pattern[len(scheme):]
    glob = _GLOB_CHARS.search(path)
    prefix = path[: glob.start()] if glob else path
    cut = prefix.rfind("/")
    if cut == 0 and not scheme:
        return "/"  # a pattern at the filesystem root: keep the root itself
    return scheme + (prefix[:cut] if cut > 0 else "")


def relative_id(uri: str, root: str) -> str:
    """``uri`` relative to ``root`` with ``/`` separators: the id of a file's document.

    A uri outside ``root`` (not one the root's pattern matched) keeps its full form.

    >>> relative_id("gs://bucket/docs/manuals/arm.md", "gs://bucket/docs")
    'manuals/arm.md'
    """
    base = root if root == "" or root.endswith("/") else root + "/"
    return uri[len(base):] if uri.startswith(base) and len(uri) > len(base) else uri


def name_problem(uri: str) -> str | None:
    """Why a file's name cannot be an id, or None: a name no UTF-8 column can hold (Latin-1
    names from an old archive: os.fsdecode's surrogate escapes), or one holding U+0000."""
    if not utf8_encodable(uri):
        return "file name is not valid UTF-8"
    if NUL in uri:
        return "file name contains U+0000 (NUL)"
    return None


def shown_name(path: str) -> str:
    """A path readable in any column: undecodable bytes (os.fsdecode's surrogate escapes) and
    U+0000 written as ``\\xNN``.

    >>> shown_name("bad\\udcffname\\x00.md")
    'bad\\\\xffname\\\\x00.md'
    """
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text.replace(NUL, "\\x00")


def extension(uri: str) -> str:
    """The lower-cased extension of the uri's last path segment (``""`` when it has none)."""
    return posixpath.splitext(uri.rsplit("/", 1)[-1])[1].lower()


# --- Whole files -------------------------------------------------------------------------------


def reject_before_reading(
    uri: str, root: str, size: int, options: ReadOptions
) -> Rejected | None:
    """The rejection that a file's name and size alone decide (a name that cannot be an id
    (:func:`name_problem`, recorded under :func:`shown_name`), empty, unsupported, a single
    document over the limit), or None; lets a reader skip fetching such a file."""
    problem = name_problem(uri)
    if problem:
        return Rejected(shown_name(uri), relative_id(shown_name(uri), shown_name(root)), problem)
    ext = extension(uri)
    # A container's limits are on what it unpacks to: its own size says nothing yet.
    reason = (EMPTY if size == 0 else None) if ext in CONTAINER_SUFFIXES else _early_reason(ext, size, options)
    return Rejected(uri, relative_id(uri, root), reason) if reason else None


def _early_reason(ext: str, size: int, options: ReadOptions) -> str | None:
    if ext not in SUPPORTED_EXTENSIONS:
        return f"unsupported file type {ext}" if ext else "unsupported file type (no extension)"
    if size == 0:
        return EMPTY
    if ext in SINGLE_DOCUMENT_EXTENSIONS:
        return _over_limit(size, options)
    return None


def decode_file(
    uri: str, data: bytes, root: str, options: ReadOptions, modified: float | None = None
) -> list[Document | Rejected]:
    """Every document in one file's bytes, and a ``Rejected`` for each thing that is not one.
    ``modified``: the file's modification time (seconds since the epoch), where known.

    Never raises for bad input. A supported file always yields at least one record: a readable
    Parquet file with no rows yields one ``Rejected`` ("empty document (Parquet file has no
    rows)"), so no input vanishes from the accounting. A document whose metadata JSON (the
    file facts included) is over ``options.max_metadata_bytes`` is a ``Rejected``.
    """
    early = reject_before_reading(uri, root, len(data), options)
    if early is not None:
        return [early]
    path_id = relative_id(uri, root)
    if is_container(uri, data[:HEAD_BYTES]):
        return _decode_container(uri, path_id, data, options, modified)
    return _decoded(uri, path_id, extension(uri), data, options, modified)


RECORD_EXTENSIONS = JSONL_EXTENSIONS | PARQUET_EXTENSIONS


def streams(uri: str, head: bytes) -> bool:
    """Whether a file is read from an open handle (:func:`stream_file`) rather than whole: a
    record file (JSONL, Parquet) not compressed (``head``: its first bytes)."""
    return extension(uri) in RECORD_EXTENSIONS and not is_container(uri, head[:HEAD_BYTES])


def stream_file(uri: str, root: str, handle: BinaryIO, size: int, options: ReadOptions,
                modified: float | None = None,
                part: ParquetSlice | None = None) -> Iterator[Document | Rejected]:
    """:func:`decode_file` for a file :func:`streams` says is read from ``handle`` (seekable
    for Parquet): its records one by one, with memory for one line or one batch of rows;
    with ``part``, only that slice of a Parquet file (:func:`parquet_slices`)."""
    early = reject_before_reading(uri, root, size, options)
    if early is not None:
        yield early
        return
    path_id, ext = relative_id(uri, root), extension(uri)
    records = (stream_parquet(uri, path_id, handle, options, part) if ext in PARQUET_EXTENSIONS
               else stream_jsonl(uri, path_id, handle, options))
    facts = {"format": FORMATS.get(ext, ""), "file_size": size, "file_modified": modified}
    for record in records:
        yield _finished(replace(record, **facts), path_id, options) if isinstance(record, Document) else record


def _decoded(uri: str, path_id: str, ext: str, data: bytes, options: ReadOptions,
             modified: float | None) -> list[Document | Rejected]:
    """The documents of one file's (or archive member's) bytes, of the type ``ext`` says."""
    records = _decode_bytes(uri, path_id, ext, data, options)
    facts = {"format": FORMATS.get(ext, ""), "file_size": len(data), "file_modified": modified}
    return [_finished(replace(record, **facts), path_id, options)
            if isinstance(record, Document) else record for record in records]


def _member(parent: str, path: str) -> str:
    return f"{parent}{MEMBER_SEPARATOR}{path}" if path else parent


def _decode_container(uri: str, path_id: str, data: bytes, options: ReadOptions,
                      modified: float | None) -> list[Document | Rejected]:
    """Every supported file inside a compressed file or archive (``chunkline.containers``),
    read as if it were a file of its own under the id ``<archive id>//<member path>`` (a
    compressed file's content keeps the file's id); each member no reader takes, each refused
    member and the limit a container met, a ``Rejected``."""
    records: list[Document | Rejected] = []
    for inner in unpacked(uri.rsplit("/", 1)[-1], data, options.containers,
                          is_wanted=lambda name: extension(name) in SUPPORTED_EXTENSIONS):
        member_uri, member_id = _member(uri, inner.path), _member(path_id, inner.path)
        problem = name_problem(member_id)
        if problem:
            records.append(Rejected(shown_name(member_uri), shown_name(member_id), problem))
            continue
        ext = extension(inner.name)
        reason = inner.reason or _early_reason(ext, len(inner.data or b""), options)
        if reason is None and inner.data is None:
            reason = f"unsupported file type {ext}" if ext else "unsupported file type (no extension)"
        if reason is not None:
            records.append(Rejected(member_uri, member_id, reason))
            continue
        records.extend(_decoded(member_uri, member_id, ext, inner.data, options, modified))
    return records


def _finished(doc: Document, path_id: str, options: ReadOptions) -> Document | Rejected:
    """A decoded document with its facts, checked as a whole: U+0000 dropped from its text and
    outline titles, its metadata JSON within the byte limit."""
    if NUL in doc.text or any(NUL in title for _, _, title in doc.outline):
        text, page_starts = without_nul(doc.text, doc.page_starts)
        if not text.strip():
            return _rejected_document(doc, path_id, f"{EMPTY} (nothing but U+0000)")
        outline = tuple((page, level, title.replace(NUL, "")) for page, level, title in doc.outline)
        doc = replace(doc, text=text, page_starts=page_starts,
                      outline=tuple(entry for entry in outline if entry[2].strip()))
    too_big = over_byte_limit(doc.all_metadata(), options.max_metadata_bytes)
    if too_big:
        return _rejected_document(doc, path_id, too_big)
    return doc


def _rejected_document(doc: Document, path_id: str, reason: str) -> Rejected:
    """``doc`` rejected: a record under its locator, with its line or row and id in the reason,
    as every record-level rejection; a whole-file document under its id."""
    if doc.format == FORMATS[".jsonl"]:
        return Rejected(doc.uri, locator(path_id, doc.position),
                        f"line {doc.position}: {reason} (id {doc.doc_id!r})")
    if doc.format == FORMATS[".parquet"]:
        return Rejected(doc.uri, locator(path_id, doc.position),
                        f"row {doc.position}: {reason} (id {doc.doc_id!r})")
    return Rejected(doc.uri, doc.doc_id, reason)


def _decode_bytes(uri: str, doc_id: str, ext: str, data: bytes,
                  options: ReadOptions) -> list[Document | Rejected]:
    if ext in PARQUET_EXTENSIONS:
        return _decode_parquet(uri, doc_id, data, options)
    if ext in JSONL_EXTENSIONS:
        return _decode_jsonl(uri, doc_id, data, options)
    if ext in PDF_EXTENSIONS:
        return [_decode_pdf(uri, doc_id, data, options)]
    decoded = decode_text(data, html=ext in HTML_EXTENSIONS)
    if isinstance(decoded, str):
        return [Rejected(uri, doc_id, decoded)]
    text, encoding = decoded
    if encoding != "utf-8":
        # The limit is on UTF-8 bytes; a legacy or UTF-16 file's size on disk is not that.
        too_big = _over_limit(len(text.encode("utf-8")), options)
        if too_big:
            return [Rejected(uri, doc_id, too_big)]
    metadata: tuple[tuple[str, str], ...] = ()
    if ext in HTML_EXTENSIONS:
        plain = html_to_text(text)
        if not plain.strip():
            return [Rejected(uri, doc_id, EMPTY)]  # no text at all, not even page chrome
        html = text
        text = main_content(html, plain)
        if text is None:
            return [Rejected(uri, doc_id, NO_MAIN_CONTENT)]
        try:
            metadata = metadata_pairs(page_metadata(html).items(), max_depth=options.max_metadata_depth)
        except MetadataError as exc:
            return [Rejected(uri, doc_id, str(exc))]
    elif ext in TEXT_EXTENSIONS:
        found = front_matter(text, max_depth=options.max_metadata_depth)
        if isinstance(found, str):
            return [Rejected(uri, doc_id, found)]
        if isinstance(found, FrontMatter):
            # The fields are metadata, not content: the document's text starts after them.
            text, metadata = text[found.body_start:], found.pairs
            if not text.strip():
                return [Rejected(uri, doc_id, f"{EMPTY} (front matter only)")]
    if not text.strip():
        return [Rejected(uri, doc_id, EMPTY)]
    return [Document(doc_id=doc_id, uri=uri, text=text, metadata=metadata, encoding=encoding)]


def _decode_pdf(uri: str, doc_id: str, data: bytes, options: ReadOptions) -> Document | Rejected:
    found = read_pdf(data)
    if isinstance(found, str):
        return Rejected(uri, doc_id, found)
    text = found.text
    if not utf8_encodable(text):
        return Rejected(uri, doc_id, "PDF text contains an unpaired surrogate")
    too_big = _over_limit(len(text.encode("utf-8")), options)
    if too_big:
        return Rejected(uri, doc_id, f"{too_big} (text read from the PDF)")
    try:
        metadata = metadata_pairs(found.info.items(), max_depth=options.max_metadata_depth)
    except MetadataError as exc:
        return Rejected(uri, doc_id, str(exc))
    return Document(doc_id=doc_id, uri=uri, text=text, metadata=metadata, encoding="",
                    page_starts=found.page_starts, outline=found.outline)


def locator(path: str, position: int) -> str:
    """Where a record sits: ``path#L<line>`` in a JSONL file, ``path#row<index>`` in a Parquet
    file, ``path`` itself for a whole-file document; ``path`` is a uri or an id relative to the
    input root, and its extension decides.

    >>> locator("data/faq.jsonl", 3), locator("t.parquet", 0), locator("a.md", 0)
    ('data/faq.jsonl#L3', 't.parquet#row0', 'a.md')
    """
    ext = extension(path)
    if ext in JSONL_EXTENSIONS:
        return f"{path}#L{position}"
    if ext in PARQUET_EXTENSIONS:
        return f"{path}#row{position}"
    return path


def _over_limit(size: int, options: ReadOptions) -> str | None:
    limit = options.max_document_bytes
    if limit is not None and size > limit:
        return f"document is {size} bytes, over the limit of {limit}"
    return None


def _looks_binary(data: bytes) -> bool:
    """NUL in the first block, or more than 30% of it control bytes that text does not use."""
    sample = data[:_SNIFF_BYTES]
    if b"\x00" in sample:
        return True
    controls = sum(1 for byte in sample if byte in _CONTROL_BYTES)
    return controls > _MAX_CONTROL_RATIO * len(sample)


def _decode_utf8(data: bytes, offset: int = 0) -> tuple[str, str | None]:
    """(text, None), or ("", reason) naming the first bad byte (counted from ``offset``, in
    the bytes as given, BOM included). A leading UTF-8 BOM is dropped, not an error."""
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return "", f"not valid UTF-8 at byte {offset + skip + exc.start}"


# --- Decoding ----------------------------------------------------------------------------------

# Longest first: the UTF-32 LE BOM (FF FE 00 00) begins with the UTF-16 LE one (FF FE). Python's
# "utf-16"/"utf-32" codecs read the byte order from the BOM and drop it.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# WHATWG HTML "prescan a byte stream to determine its encoding" reads at most the first 1024 bytes.
_PRESCAN_BYTES = 1024
_HTML_COMMENT = re.compile(rb"<!--.*?(?:-->|$)", re.S)
_META_TAG = re.compile(rb"<meta[\s/][^>]*>?", re.I)
# One pattern for both forms: <meta charset=X> and the "...; charset=X" inside the content of
# <meta http-equiv="Content-Type">. Labels are letters, digits and "-_.:" (WHATWG Encoding).
_CHARSET_PARAMETER = re.compile(rb"""(?:^|[\s/;"'])charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_XML_DECLARATION = re.compile(
    rb"""^\s*<\?xml[^>]*?\sencoding\s*=\s*["']([A-Za-z0-9._:-]+)["']""", re.I)
# The decoders a declared label gets, after WHATWG Encoding's label table: "iso-8859-1", "ascii"
# and "latin1" are labels of windows-1252, "iso-8859-9" of windows-1254, "gb2312" of GBK (whose
# decoder is gb18030's), and the Shift_JIS, EUC-KR and Big5 decoders are the vendors' supersets
# (cp932, cp949, Big5-HKSCS). Python's strict codecs are tried in order, so an ordinary page is
# read with the codec it names and only a page using the extensions gets the superset.
_DECLARED_DECODERS = {
    "iso8859-1": ("cp1252", "latin-1"),
    "ascii": ("cp1252", "latin-1"),
    "iso8859-9": ("cp1254", "iso8859-9"),
    "gb2312": ("gbk", "gb18030"),
    "gbk": ("gbk", "gb18030"),
    "shift_jis": ("shift_jis", "cp932"),
    "euc_kr": ("euc_kr", "cp949"),
    "big5": ("big5", "big5hkscs"),
}
# Detection's confidence bar (charset-normalizer: ``chaos`` is its mess ratio of a decoding, 0 to
# 1). A detection is used only when every candidate within this margin of the best reads the
# bytes as the same text. Measured with charset-normalizer 3.5 on French cp1252 prose: its best
# guess is cp1257 ("trčs bien", chaos 0.027) ahead of cp1252 (0.045); a long Russian cp1251 text
# has cp1251 at 0.0 and the next (mac_greek) above 0.1; a short one ties cp1251, cp1253 and
# mac_cyrillic at 0.0. The margin rejects the first and third and keeps the second.
_DETECTION_MARGIN = 0.05


def decode_text(data: bytes, *, html: bool = False) -> tuple[str, str] | str:
    """A text file's bytes -> ``(text, encoding)``, or the reason they are not text.

    ``encoding`` is the Python codec used, normalised (:func:`codec_name`): "utf-8", "utf-16",
    "utf-32", "windows-1251", "shift_jis"... The order (a later step runs only when the earlier
    ones did not decide):

    1. A BOM (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE; the Unicode Standard, section 23.8) decides, and
       is dropped; it is looked for before the binary sniff because UTF-16 text is full of NULs.
       Text that decodes to NULs or mostly controls is still a binary file.
    2. Bytes with a NUL or mostly control bytes in the first block are a binary file (a PNG
       named .txt stays one: no detector ever sees it).
    3. HTML only: the charset its head declares, as WHATWG's prescan finds it (``<meta
       charset>``, ``<meta http-equiv="Content-Type" content="...; charset=...">``, in the first
       1024 bytes), else an XML declaration's ``encoding``. A label Python does not know, or one
       the bytes do not decode under, is passed over.
    4. UTF-8, strictly.
    5. Detection by charset-normalizer, used only past a confidence bar: every candidate about
       as good as the best must read the same text (see ``_DETECTION_MARGIN``). Too little
       evidence (a few accented letters) stays undecided: the reason is then the UTF-8 error.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode_with_bom(data, encoding)
    if _looks_binary(data):
        return BINARY
    if html:
        for encoding in _declared_decoders(data):
            try:
                return data.decode(encoding), codec_name(encoding)
            except UnicodeError:  # the bytes do not decode under the label: not a declaration
                continue
    text, error = _decode_utf8(data)
    if error is None:
        return text, "utf-8"
    detected = _detect_encoding(data)
    if detected is None:
        return f"{error} (and no other encoding detected with confidence)"
    if _looks_binary_text(detected[0]):
        return BINARY
    return detected


def codec_name(encoding: str) -> str:
    """A codec's canonical Python name, with Windows code pages spelled as WHATWG and IANA do
    ("cp1251" -> "windows-1251"); a name ``bytes.decode`` accepts either way.

    >>> codec_name("CP1251"), codec_name("utf_16_le"), codec_name("sjis")
    ('windows-1251', 'utf-16-le', 'shift_jis')
    """
    name = codecs.lookup(encoding).name
    windows = "windows-" + name[2:] if re.fullmatch(r"cp12[5-9][0-9]", name) else None
    return windows if windows and _is_known_codec(windows) else name


def _is_known_codec(encoding: str) -> bool:
    try:
        codecs.lookup(encoding)
    except LookupError:
        return False
    return True


def _decode_with_bom(data: bytes, encoding: str) -> tuple[str, str] | str:
    if encoding == "utf-8":
        text, error = _decode_utf8(data)
        if error is not None:
            return error
    else:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            return f"not valid {encoding.upper()} at byte {exc.start}"
    if _looks_binary_text(text):
        return BINARY
    return text, encoding


def _looks_binary_text(text: str) -> bool:
    """:func:`_looks_binary` on decoded text (a binary file may begin with BOM-like bytes)."""
    sample = text[:_SNIFF_BYTES]
    if "\x00" in sample:
        return True
    controls = sum(1 for char in sample if ord(char) in _CONTROL_BYTES)
    return controls > _MAX_CONTROL_RATIO * len(sample)


# The encodings of the WHATWG Encoding Standard, as Python names them (codecs.lookup(...).name;
# windows-874 is cp874, x-mac-cyrillic mac-cyrillic). A page may declare only these: Python
# also knows codecs that are not text encodings of the web (base64, rot13, zlib, punycode,
# unicode_escape, EBCDIC cp037), which would fail the job or decode ASCII into mojibake.
_WHATWG_CODECS = frozenset({
    "utf-8", "cp866", "iso8859-1", "iso8859-2", "iso8859-3", "iso8859-4", "iso8859-5",
    "iso8859-6", "iso8859-7", "iso8859-8", "iso8859-9", "iso8859-10", "iso8859-11",
    "iso8859-13", "iso8859-14", "iso8859-15", "iso8859-16", "koi8-r", "koi8-u", "mac-roman",
    "cp874", "cp1250", "cp1251", "cp1252", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257",
    "cp1258", "mac-cyrillic", "gbk", "gb2312", "gb18030", "big5", "euc_jp", "iso2022_jp",
    "shift_jis", "euc_kr", "utf-16-be", "utf-16-le", "utf-16", "utf-32", "ascii", "tis-620",
})


def _declared_decoders(data: bytes) -> tuple[str, ...]:
    """The codecs to try for the charset an HTML page declares, most faithful first; () if it
    declares none Python knows."""
    head = _HTML_COMMENT.sub(b"", data[:_PRESCAN_BYTES])
    labels = [
        match.group(1)
        for tag in _META_TAG.finditer(head)
        for match in [_CHARSET_PARAMETER.search(tag.group(0))]
        if match
    ]
    xml = _XML_DECLARATION.match(data[:_PRESCAN_BYTES])
    if xml:
        labels.append(xml.group(1))
    for label in labels:
        try:
            name = codecs.lookup(label.decode("ascii")).name
        except (LookupError, UnicodeDecodeError):
            continue  # WHATWG: an unknown label is no declaration
        if name not in _WHATWG_CODECS:
            continue
        if name.startswith(("utf-16", "utf-32")):
            # WHATWG: a UTF-16 declaration read in ASCII-compatible bytes means UTF-8 (a real
            # UTF-16 page has a BOM, handled before this).
            return ("utf-8",)
        return _DECLARED_DECODERS.get(name, (name,))
    return ()


def _detect_encoding(data: bytes) -> tuple[str, str] | None:
    """(text, encoding) when charset-normalizer is confident as defined above, else None."""
    from charset_normalizer import from_bytes  # only files that are not UTF-8 pay the import

    matches = list(from_bytes(data))
    if not matches:
        return None
    best = min(matches, key=lambda match: match.chaos)
    contenders = [m for m in matches if m.chaos <= best.chaos + _DETECTION_MARGIN]
    text = str(best)
    if any(str(other) != text for other in contenders):
        return None
    return text, codec_name(best.encoding)


# --- JSON lines --------------------------------------------------------------------------------


def _decode_jsonl(
    uri: str, path_id: str, data: bytes, options: ReadOptions
) -> list[Document | Rejected]:
    return list(stream_jsonl(uri, path_id, io.BytesIO(data), options))


def stream_jsonl(uri: str, path_id: str, handle: BinaryIO,
                 options: ReadOptions) -> Iterator[Document | Rejected]:
    """The records of a JSONL file read from ``handle`` a line at a time: memory holds one
    line, whatever the file's size. Only a file behind a UTF-16 or UTF-32 BOM is read whole
    (it must be decoded before it has lines)."""
    encoding = "utf-8"  # RFC 8259 section 8.1: JSON exchanged between systems is UTF-8
    head = handle.read(_SNIFF_BYTES)
    bom = next((name for bom, name in _BOMS if head.startswith(bom)), None)
    lines: Iterator[bytes]
    if bom is not None and bom != "utf-8":
        decoded = _decode_with_bom(head + handle.read(), bom)
        if isinstance(decoded, str):
            yield Rejected(uri, path_id, decoded)
            return
        # As UTF-8 again, the lines take the one path below (a decoded text re-encodes losslessly).
        text, encoding = decoded
        lines = iter(io.BytesIO(text.encode("utf-8")))
    elif _looks_binary(head):
        yield Rejected(uri, path_id, BINARY)
        return
    else:
        lines = iter(io.BufferedReader(_Chained(head, handle)))
    # Split on b"\n" only (a binary file's lines): str.splitlines() would also cut at U+2028
    # and friends, which JSON allows unescaped inside strings. A trailing "\r" is JSON
    # whitespace and parses away.
    offset, found = 0, False
    for number, line in enumerate(lines, start=1):
        raw = line[:-1] if line.endswith(b"\n") else line
        line_start, offset = offset, offset + len(line)
        # _decode_utf8 also drops a BOM: the file's, or one of a file concatenated into this one.
        text, error = _decode_utf8(raw, line_start)
        if error is None and not text.strip():
            continue  # blank lines separate nothing and are no records
        result = error if error is not None else _jsonl_record(text, uri, options)
        if isinstance(result, str):
            result = Rejected(uri, locator(path_id, number), f"line {number}: {result}")
        else:
            result = replace(result, position=number, encoding=encoding)
        found = True
        yield result
    if not found:
        yield Rejected(uri, path_id, f"{EMPTY} (no JSON lines)")


class _Chained(io.RawIOBase):
    """The bytes already read from a file, then the rest of it: one stream to cut lines from."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = memoryview(head), rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _jsonl_record(line: str, uri: str, options: ReadOptions) -> Document | str:
    """The document on one JSON line, or the reason it is none."""
    try:
        value = json.loads(line)
    except RecursionError:
        return "not valid JSON (nested too deeply)"
    except ValueError as exc:  # JSONDecodeError, and ints past the digit limit
        detail = f"{exc.msg}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else exc
        return f"not valid JSON ({detail})"
    if not isinstance(value, dict):
        return f"not a JSON object (got {_type_name(value)})"
    id_field, text_field = options.jsonl.id_field, options.jsonl.text_field
    for name in (id_field, text_field):
        if name not in value:
            return f"no {name!r} field"
    doc_id, problem = _record_id(value[id_field], id_field)
    if problem:
        return problem
    text = value[text_field]
    if not isinstance(text, str):
        return f"{text_field!r} is {_type_name(text)}, not a string"
    metadata: tuple[tuple[str, str], ...] = ()
    meta_field = options.jsonl.metadata_field
    if meta_field is not None and value.get(meta_field) is not None:
        if not isinstance(value[meta_field], dict):
            return f"{meta_field!r} is {_type_name(value[meta_field])}, not an object"
        try:
            metadata = metadata_pairs(value[meta_field].items(), max_depth=options.max_metadata_depth)
        except RecursionError:
            return f"{meta_field!r} is nested too deeply"
        except MetadataError as exc:
            return str(exc)
    return _record_document(doc_id, uri, text, metadata, id_field, text_field, options)


def _type_name(value: Any) -> str:
    """How a reason names a value's type, in JSON's words where JSON has one."""
    if value is None:
        return "null"
    names = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
             (list, "an array"), (dict, "an object"))
    return next((name for kind, name in names if isinstance(value, kind)), type(value).__name__)


# --- Parquet -----------------------------------------------------------------------------------


def _decode_parquet(
    uri: str, path_id: str, data: bytes, options: ReadOptions
) -> list[Document | Rejected]:
    return list(stream_parquet(uri, path_id, pa.BufferReader(data), options))


# Rows decoded at a time: a batch of long texts stays a few MB.
PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class ParquetSlice:
    """Row groups ``first_group`` up to ``end_group`` of one file, whose first row is
    ``first_row`` of the file (rows keep their file-wide positions)."""

    first_group: int
    end_group: int
    first_row: int


def parquet_slices(source: Any, slice_bytes: int) -> list[ParquetSlice]:
    """A Parquet file's row groups cut into runs of about ``slice_bytes`` uncompressed bytes
    (a row group is never cut: it is Parquet's unit of reading), from its footer alone. One
    slice, or none for a file without rows, means it is read whole. Raises what arrow raises
    for a file that is no Parquet (its reader then says so in a rejected row)."""
    metadata = pq.ParquetFile(source).metadata
    slices, start, first_row, size, rows = [], 0, 0, 0, 0
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        if index > start and size + group.total_byte_size > slice_bytes:
            slices.append(ParquetSlice(start, index, first_row))
            start, first_row, size = index, first_row + rows, 0
            rows = 0
        size += group.total_byte_size
        rows += group.num_rows
    if metadata.num_row_groups and metadata.num_rows:
        slices.append(ParquetSlice(start, metadata.num_row_groups, first_row))
    return slices


def stream_parquet(uri: str, path_id: str, source: Any, options: ReadOptions,
                   part: ParquetSlice | None = None) -> Iterator[Document | Rejected]:
    """The records of a Parquet file (``source``: a seekable file or buffer), or of one
    ``part`` of it, read a batch of rows at a time and only the columns wanted: memory holds
    one batch, whatever the file's size. A row group that cannot be read ends the file (or
    part) with a ``Rejected`` saying from which row on; the rows before it stay."""
    id_col, text_col = options.parquet.id_column, options.parquet.text_column
    wanted = list(dict.fromkeys((id_col, text_col, *options.parquet.metadata_columns)))
    try:
        parquet = pq.ParquetFile(source)
        names = parquet.schema_arrow.names
        missing = [name for name in wanted if name not in names]
        if missing:
            shown = ", ".join(repr(name) for name in missing)
            yield Rejected(uri, path_id, f"Parquet file has no column {shown}")
            return
        total = parquet.metadata.num_rows
        groups = range(part.first_group, part.end_group) if part is not None else None
        batches = parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=wanted,
                                       row_groups=groups)
    except Exception as exc:  # noqa: BLE001 - arrow raises many types for a corrupt file
        yield Rejected(uri, path_id, f"not a readable Parquet file ({type(exc).__name__}: {exc})")
        return
    if total == 0:
        yield Rejected(uri, path_id, f"{EMPTY} (Parquet file has no rows)")
        return
    row = part.first_row if part is not None else 0
    while True:
        try:
            batch = next(batches, None)
            if batch is None:
                return
            columns = {name: batch.column(name).to_pylist() for name in wanted}
        except Exception as exc:  # noqa: BLE001 - a corrupt row group, a file cut short
            yield Rejected(uri, path_id, f"not a readable Parquet file from row {row} on "
                                         f"({type(exc).__name__}: {exc})")
            return
        for index in range(batch.num_rows):
            result = _parquet_row(index, columns, uri, options)
            if isinstance(result, str):
                result = Rejected(uri, locator(path_id, row), f"row {row}: {result}")
            else:
                # Parquet's STRING logical type is UTF-8 by the format's definition.
                result = replace(result, position=row, encoding="utf-8")
            row += 1
            yield result


def _parquet_row(
    row: int, columns: dict[str, list[Any]], uri: str, options: ReadOptions
) -> Document | str:
    id_col, text_col = options.parquet.id_column, options.parquet.text_column
    doc_id, problem = _record_id(columns[id_col][row], id_col)
    if problem:
        return problem
    text = columns[text_col][row]
    if not isinstance(text, str):
        return f"{text_col!r} is {_type_name(text)}, not a string"
    try:
        metadata = metadata_pairs(((name, columns[name][row]) for name in options.parquet.metadata_columns),
                                  max_depth=options.max_metadata_depth)
    except MetadataError as exc:
        return str(exc)
    except RecursionError:
        return "metadata is nested too deeply"
    return _record_document(doc_id, uri, text, metadata, id_col, text_col, options)


# --- Shared record checks ----------------------------------------------------------------------


def _record_id(value: Any, field: str) -> tuple[str, str | None]:
    """(id as str, None) or ("", reason). Strings and integers only: a float or a structure
    has no stable text form to key chunks by. An id holding U+0000 is rejected, not mapped: no
    store holds it, and mapping it could give two records one id."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    if not isinstance(value, str):
        return "", f"{field!r} is {_type_name(value)}, not a string or integer"
    if not value:
        return "", f"{field!r} is an empty string"
    if not utf8_encodable(value):
        return "", f"{field!r} contains an unpaired surrogate escape"
    if NUL in value:
        return "", f"{field!r} contains U+0000 (NUL), which no id may hold"
    return value, None


def _record_document(
    doc_id: str,
    uri: str,
    text: str,
    metadata: tuple[tuple[str, str], ...],
    id_field: str,
    text_field: str,
    options: ReadOptions,
) -> Document | str:
    """The record as a Document, or why not: a text every later stage can encode and chunk."""
    if not utf8_encodable(text):
        # JSON may escape a lone surrogate ("\ud800"); no UTF-8 file could then hold the text.
        return f"{text_field!r} contains an unpaired surrogate escape (id {doc_id!r})"
    if not text.strip():
        return f"{EMPTY} (id {doc_id!r})"
    too_big = _over_limit(len(text.encode("utf-8")), options)
    if too_big:
        return f"{too_big} (id {doc_id!r})"
    return Document(doc_id=doc_id, uri=uri, text=text, metadata=metadata)


def utf8_encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: no lone surrogate (a JSON ``\\ud800`` escape, or
    a file name's undecodable byte as os.fsdecode escapes it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
