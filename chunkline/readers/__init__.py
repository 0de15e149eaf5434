"""Files to documents: bytes in, ``Document``s and ``Rejected``s out, never an exception.

Pure (no Beam): ``transforms/read.py`` matches and reads files and hands each one's bytes (or,
for a record dump, its open handle) here. One module per concern: ``formats`` (extensions,
format names, shared reasons), ``options``, ``paths`` (ids, locators), ``text`` (bytes to text),
``records`` (JSONL and Parquet, streamed), ``files`` (dispatch, single-document formats,
containers through ``chunkline.containers``). A new format is one decoder and one line in
``formats``' extension sets and ``files``' dispatch.
Which decoder runs is decided by the file extension, case-insensitive:

    .txt .md .markdown   one document, the text as it is (line endings kept: chunk offsets
                         refer to this text; cleaning is another stage's job)
    .py .js .mjs .ts     one document, the source code as it is, like a text file (the uri
    .tsx .go .java .rs   keeps the extension, so a code splitter can pick its grammar)
    .html .htm           one document, the page's main content as Markdown
                         (``chunkline.html_markdown``: trafilatura); a page with none is rejected
    .pdf                 one document, the text of its pages joined by a blank line, with the
                         page-start table and the outline (``chunkline.pdf``: PDFium)
    .docx .docm .pptx    one document as Markdown (``office``: headings, pipe tables, lists;
    .pptm .xlsx .xlsm    a deck's slides as pages; a workbook's sheets as sections)
    .odt .odp .ods       the same for OpenDocument (``opendocument``: LibreOffice's formats)
    .csv .tsv            one document, the rows as pipe tables (``tabular``)
    .epub .ipynb .rst    one document as Markdown (``ebook``, ``notebook``, ``rst``)
    .eml .mbox           each message one document, its attachments read as files of their
                         own, id ``<message id>//<file name>`` (``mail``)
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

from chunkline.readers.files import (
    RECORD_EXTENSIONS,
    decode_file,
    reject_before_reading,
    stream_file,
    streams,
)
from chunkline.readers.formats import (
    BINARY,
    CODE_EXTENSIONS,
    EMPTY,
    FORMATS,
    HTML_EXTENSIONS,
    JSONL_EXTENSIONS,
    NO_MAIN_CONTENT,
    PARQUET_EXTENSIONS,
    PDF_EXTENSIONS,
    SINGLE_DOCUMENT_EXTENSIONS,
    SUPPORTED_EXTENSIONS,
    TEXT_EXTENSIONS,
)
from chunkline.readers.options import JsonlOptions, ParquetOptions, ReadOptions
from chunkline.readers.paths import extension, input_root, locator, name_problem, relative_id, shown_name
from chunkline.readers.records import (
    PARQUET_BATCH_ROWS,
    LineSlice,
    ParquetSlice,
    jsonl_slices,
    parquet_slices,
    stream_jsonl,
    stream_parquet,
)
from chunkline.readers.text import codec_name, decode_text, utf8_encodable

__all__ = [
    "BINARY", "CODE_EXTENSIONS", "EMPTY", "FORMATS", "HTML_EXTENSIONS", "JSONL_EXTENSIONS",
    "NO_MAIN_CONTENT", "PARQUET_BATCH_ROWS", "PARQUET_EXTENSIONS", "PDF_EXTENSIONS",
    "RECORD_EXTENSIONS", "SINGLE_DOCUMENT_EXTENSIONS", "SUPPORTED_EXTENSIONS", "TEXT_EXTENSIONS",
    "JsonlOptions", "LineSlice", "ParquetOptions", "ParquetSlice", "jsonl_slices", "ReadOptions", "codec_name", "decode_file",
    "decode_text", "extension", "input_root", "locator", "name_problem", "parquet_slices",
    "reject_before_reading", "relative_id", "shown_name", "stream_file", "stream_jsonl",
    "stream_parquet", "streams", "utf8_encodable",
]
