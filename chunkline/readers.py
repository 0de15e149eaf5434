"""Files to documents: bytes in, ``Document``s and ``Rejected``s out, never an exception.

Pure (no Beam): ``transforms/read.py`` matches and reads files and hands each one's bytes here.
Which decoder runs is decided by the file extension, case-insensitive:

    .txt .md .markdown   one document, the UTF-8 text as it is (line endings kept: chunk
                         offsets refer to this text; cleaning is another stage's job)
    .py .js .mjs .ts     one document, the source code as it is, like a text file (the uri
    .tsx .go .java .rs   keeps the extension, so a code splitter can pick its grammar)
    .html .htm           one document, the page's main content as Markdown
                         (:func:`html_to_markdown`: trafilatura); a page with none is rejected
    .jsonl               one document per non-blank line (a JSON object)
    .parquet             one document per row

A file document's id is its path relative to the input root (``manuals/arm.md``); a JSONL or
Parquet document's id is its record's id. Every input is accounted for: what cannot become a
document becomes a ``Rejected`` saying why (datatrove's ``base_filter.py`` keeps drops the same
way). A record-level rejection is located as ``<relative path>#L<line>`` (1-based) for JSONL and
``<relative path>#row<index>`` (0-based, as in ``table.slice``) for Parquet.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from chunkline.records import Document, Rejected

TEXT_EXTENSIONS = frozenset({".txt", ".md", ".markdown"})
# Source code is read as text, verbatim; the extension stays in the uri and the doc_id.
CODE_EXTENSIONS = frozenset({".py", ".js", ".mjs", ".ts", ".tsx", ".go", ".java", ".rs"})
HTML_EXTENSIONS = frozenset({".html", ".htm"})
JSONL_EXTENSIONS = frozenset({".jsonl"})
PARQUET_EXTENSIONS = frozenset({".parquet"})
# One file, one document: the file's size is the document's size, so an oversized file can be
# rejected from its metadata without reading it.
SINGLE_DOCUMENT_EXTENSIONS = TEXT_EXTENSIONS | CODE_EXTENSIONS | HTML_EXTENSIONS
SUPPORTED_EXTENSIONS = SINGLE_DOCUMENT_EXTENSIONS | JSONL_EXTENSIONS | PARQUET_EXTENSIONS

EMPTY = "empty document"
BINARY = "binary file"
NO_MAIN_CONTENT = "no main content"

_GLOB_CHARS = re.compile(r"[*?\[]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_BOM = b"\xef\xbb\xbf"
# The binary sniff looks where file(1) and Perl's -B look: the first block.
_SNIFF_BYTES = 8192
_MAX_CONTROL_RATIO = 0.30
# C0 controls that do occur in text (tab, newlines, form feed, backspace, ESC of ANSI logs).
_TEXT_CONTROLS = frozenset(b"\t\n\v\f\r\x08\x1b")
_CONTROL_BYTES = frozenset(b for b in range(0x20) if b not in _TEXT_CONTROLS) | {0x7F}


@dataclass(frozen=True)
class ReadOptions:
    """How records are found in JSONL and Parquet files, and the size limit for a document."""

    jsonl_id_field: str = "id"  # JSONL: the field holding the document id (string or integer)
    jsonl_text_field: str = "text"  # JSONL: the field holding the document text (a string)
    jsonl_metadata_field: str | None = "metadata"  # JSONL: an object of metadata; None: ignore
    parquet_id_column: str = "id"
    parquet_text_column: str = "text"
    parquet_metadata_columns: tuple[str, ...] = ()  # Parquet: columns kept as metadata
    max_document_bytes: int | None = 10_000_000  # UTF-8 bytes of one document; None: no limit

    def __post_init__(self) -> None:
        for name in ("jsonl_id_field", "jsonl_text_field", "parquet_id_column",
                     "parquet_text_column"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"ReadOptions.{name} must be a non-empty string")
        if self.jsonl_metadata_field is not None and (
            not isinstance(self.jsonl_metadata_field, str) or not self.jsonl_metadata_field
        ):
            raise ValueError("ReadOptions.jsonl_metadata_field must be a non-empty string or None")
        if not isinstance(self.parquet_metadata_columns, tuple) or not all(
            isinstance(c, str) and c for c in self.parquet_metadata_columns
        ):
            raise ValueError("ReadOptions.parquet_metadata_columns must be a tuple of column names")
        if self.max_document_bytes is not None and (
            isinstance(self.max_document_bytes, bool)
            or not isinstance(self.max_document_bytes, int)
            or self.max_document_bytes < 1
        ):
            raise ValueError("ReadOptions.max_document_bytes must be a positive integer or None")


# --- Paths -------------------------------------------------------------------------------------


def input_root(pattern: str) -> str:
    """The directory part of ``pattern`` before its first glob character (``*?[``), without a
    trailing slash; the directory of the file itself when there is no glob.

    >>> input_root("gs://bucket/docs/**/*.md"), input_root("corpus/a.txt"), input_root("*.md")
    ('gs://bucket/docs', 'corpus', '')
    """
    scheme_match = _SCHEME.match(pattern)
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


def extension(uri: str) -> str:
    """The lower-cased extension of the uri's last path segment (``""`` when it has none)."""
    return posixpath.splitext(uri.rsplit("/", 1)[-1])[1].lower()


# --- Whole files -------------------------------------------------------------------------------


def reject_before_reading(
    uri: str, root: str, size: int, options: ReadOptions
) -> Rejected | None:
    """The rejection that a file's name and size alone decide (empty, unsupported, a single
    document over the limit), or None; lets a reader skip fetching such a file."""
    ext = extension(uri)
    reason = None
    if ext not in SUPPORTED_EXTENSIONS:
        reason = f"unsupported file type {ext}" if ext else "unsupported file type (no extension)"
    elif size == 0:
        reason = EMPTY
    elif ext in SINGLE_DOCUMENT_EXTENSIONS:
        reason = _over_limit(size, options)
    return Rejected(uri, relative_id(uri, root), reason) if reason else None


def decode_file(
    uri: str, data: bytes, root: str, options: ReadOptions
) -> list[Document | Rejected]:
    """Every document in one file's bytes, and a ``Rejected`` for each thing that is not one.

    Never raises for bad input. A supported file always yields at least one record, except a
    readable Parquet file with no rows (it holds no documents to account for).
    """
    early = reject_before_reading(uri, root, len(data), options)
    if early is not None:
        return [early]
    ext = extension(uri)
    doc_id = relative_id(uri, root)
    if ext in PARQUET_EXTENSIONS:
        return _decode_parquet(uri, doc_id, data, options)
    if _looks_binary(data):
        return [Rejected(uri, doc_id, BINARY)]
    if ext in JSONL_EXTENSIONS:
        return _decode_jsonl(uri, doc_id, data, options)
    text, error = _utf8(data)
    if error is not None:
        return [Rejected(uri, doc_id, error)]
    if ext in HTML_EXTENSIONS:
        plain = html_to_text(text)
        if not plain.strip():
            return [Rejected(uri, doc_id, EMPTY)]  # no text at all, not even page chrome
        text = _main_content(text, plain)
        if text is None:
            return [Rejected(uri, doc_id, NO_MAIN_CONTENT)]
    if not text.strip():
        return [Rejected(uri, doc_id, EMPTY)]
    return [Document(doc_id=doc_id, uri=uri, text=text)]


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


def _utf8(data: bytes, offset: int = 0) -> tuple[str, str | None]:
    """(text, None), or ("", reason) naming the first bad byte (counted from ``offset``, in
    the bytes as given, BOM included). A leading UTF-8 BOM is dropped, not an error."""
    skip = len(_BOM) if data.startswith(_BOM) else 0
    try:
        return data[skip:].decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return "", f"not valid UTF-8 at byte {offset + skip + exc.start}"


# --- JSON lines --------------------------------------------------------------------------------


def _decode_jsonl(
    uri: str, path_id: str, data: bytes, options: ReadOptions
) -> list[Document | Rejected]:
    records: list[Document | Rejected] = []
    # Split on b"\n" only: str.splitlines() would also cut at U+2028 and friends, which JSON
    # allows unescaped inside strings. A trailing "\r" is JSON whitespace and parses away.
    offset = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line_start, offset = offset, offset + len(raw) + 1
        # _utf8 also drops a BOM: the file's, or one of a file concatenated into this one.
        text, error = _utf8(raw, line_start)
        if error is None and not text.strip():
            continue  # blank lines separate nothing and are no records
        result = error if error is not None else _jsonl_record(text, uri, options)
        if isinstance(result, str):
            result = Rejected(uri, f"{path_id}#L{number}", f"line {number}: {result}")
        records.append(result)
    return records or [Rejected(uri, path_id, f"{EMPTY} (no JSON lines)")]


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
    id_field, text_field = options.jsonl_id_field, options.jsonl_text_field
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
    meta_field = options.jsonl_metadata_field
    if meta_field is not None and value.get(meta_field) is not None:
        if not isinstance(value[meta_field], dict):
            return f"{meta_field!r} is {_type_name(value[meta_field])}, not an object"
        try:
            metadata = _metadata(value[meta_field].items())
        except RecursionError:
            return f"{meta_field!r} is nested too deeply"
        if not all(_encodable(key) and _encodable(val) for key, val in metadata):
            return f"{meta_field!r} contains an unpaired surrogate escape"
    return _document(doc_id, uri, text, metadata, id_field, text_field, options)


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
    id_col, text_col = options.parquet_id_column, options.parquet_text_column
    wanted = list(dict.fromkeys((id_col, text_col, *options.parquet_metadata_columns)))
    try:
        table = pq.read_table(pa.BufferReader(data))
        missing = [name for name in wanted if name not in table.column_names]
        if missing:
            names = ", ".join(repr(name) for name in missing)
            return [Rejected(uri, path_id, f"Parquet file has no column {names}")]
        columns = {name: table.column(name).to_pylist() for name in wanted}
    except Exception as exc:  # noqa: BLE001 - arrow raises many types for a corrupt file
        return [Rejected(uri, path_id, f"not a readable Parquet file ({type(exc).__name__}: {exc})")]
    records: list[Document | Rejected] = []
    for row in range(table.num_rows):
        result = _parquet_row(row, columns, uri, options)
        if isinstance(result, str):
            result = Rejected(uri, f"{path_id}#row{row}", f"row {row}: {result}")
        records.append(result)
    return records


def _parquet_row(
    row: int, columns: dict[str, list[Any]], uri: str, options: ReadOptions
) -> Document | str:
    id_col, text_col = options.parquet_id_column, options.parquet_text_column
    doc_id, problem = _record_id(columns[id_col][row], id_col)
    if problem:
        return problem
    text = columns[text_col][row]
    if not isinstance(text, str):
        return f"{text_col!r} is {_type_name(text)}, not a string"
    metadata = _metadata((name, columns[name][row]) for name in options.parquet_metadata_columns)
    return _document(doc_id, uri, text, metadata, id_col, text_col, options)


# --- Shared record checks ----------------------------------------------------------------------


def _record_id(value: Any, field: str) -> tuple[str, str | None]:
    """(id as str, None) or ("", reason). Strings and integers only: a float or a structure
    has no stable text form to key chunks by."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    if not isinstance(value, str):
        return "", f"{field!r} is {_type_name(value)}, not a string or integer"
    if not value:
        return "", f"{field!r} is an empty string"
    if not _encodable(value):
        return "", f"{field!r} contains an unpaired surrogate escape"
    return value, None


def _metadata(items: Any) -> tuple[tuple[str, str], ...]:
    """Sorted (key, JSON value) pairs: hashable and stable, whatever the value's type. Values
    JSON has no form for (dates, bytes) are written as their ``str``."""
    return tuple(
        sorted(
            (str(key), json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))
            for key, value in items
        )
    )


def _document(
    doc_id: str,
    uri: str,
    text: str,
    metadata: tuple[tuple[str, str], ...],
    id_field: str,
    text_field: str,
    options: ReadOptions,
) -> Document | str:
    """The record as a Document, or why not: a text every later stage can encode and chunk."""
    if not _encodable(text):
        # JSON may escape a lone surrogate ("\ud800"); no UTF-8 file could then hold the text.
        return f"{text_field!r} contains an unpaired surrogate escape (id {doc_id!r})"
    if not text.strip():
        return f"{EMPTY} (id {doc_id!r})"
    too_big = _over_limit(len(text.encode("utf-8")), options)
    if too_big:
        return f"{too_big} (id {doc_id!r})"
    return Document(doc_id=doc_id, uri=uri, text=text, metadata=metadata)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- HTML --------------------------------------------------------------------------------------

# Pages with less visible text than this are converted whole by html_to_text. It is trafilatura's
# own MIN_EXTRACTED_SIZE: below it, trafilatura's cascade replaces its structured extraction with
# a structure-less dump of the page (core.trafilatura_sequence, stage 3 "baseline rescue"), so a
# small page would lose its headings, lists and code fences; and a page that small has no chrome
# worth separating from its content.
SHORT_PAGE_CHARS = 250
_TRAFILATURA_OPTIONS: dict[str, Any] = {
    "output_format": "markdown",
    "include_formatting": True,  # headings as "#" lines, code as fences, emphasis kept
    "include_tables": True,  # pipe tables
    "include_comments": False,  # reader comments are not the page's content
    "include_links": False,  # link text stays, targets go: URLs are noise to an embedder
    "include_images": False,
    # trafilatura's dedup keeps a process-wide LRU: results would depend on what else the worker
    # read; duplicates are the dedupe stage's job.
    "deduplicate": False,
    "with_metadata": False,
    # Precision skips the cascade's "baseline rescue", which on a page of navigation, footer and
    # cookie banner only would return that chrome as the content; with it such a page has no
    # main content and is rejected. On examples/corpus/site the output is identical to the
    # default focus.
    "favor_precision": True,
}


def html_to_markdown(html: str) -> str | None:
    """The main content of an HTML page as Markdown (``#`` headings, pipe tables, fenced code),
    without navigation, headers, footers and cookie banners; None when the page has no main
    content. Never raises.

    Extraction is trafilatura's (Barbaresi 2021); a page with under :data:`SHORT_PAGE_CHARS` of
    visible text is converted whole by :func:`html_to_text` instead (see there why), and so is a
    page trafilatura's parser raises on.
    """
    return _main_content(html, html_to_text(html))


def _main_content(html: str, plain: str) -> str | None:
    if not plain.strip():
        return None
    if len(plain) < SHORT_PAGE_CHARS:
        return plain
    import trafilatura  # heavy (lxml, justext, htmldate): only where HTML is read

    try:
        extracted = trafilatura.extract(html, **_TRAFILATURA_OPTIONS)
    except Exception:  # noqa: BLE001 - lxml raises many types on hostile markup; never fail a read
        return plain
    return extracted if extracted and extracted.strip() else None


# Structural converter for short pages (and trafilatura failures): enough structure for the
# splitter (paragraphs, headings as Markdown lines, code kept verbatim), none of the page chrome
# that is not text.
_SKIPPED = frozenset({"script", "style", "head", "noscript", "template"})
_IN_HEAD = frozenset({"title", "meta", "link", "style", "script", "base", "noscript", "template"})
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "dialog",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hgroup",
    "hr", "html", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody",
    "tfoot", "thead", "tr", "ul",
}) | frozenset(_HEADINGS)
_CELLS = frozenset({"td", "th"})


class _TextExtractor(HTMLParser):
    """Collects blocks of text; ``convert_charrefs`` unescapes entities in the data it sees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, str]] = []  # (kind, text); kind: p, li, row, h, pre
        self._parts: list[str | None] = []  # text, and None where a <br> breaks the line
        self._skipping: list[str] = []  # open skipped elements, innermost last
        self._heading = 0
        self._list_item = False
        self._pre = 0
        self._row_has_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping == ["head"] and tag not in _IN_HEAD:
            self._skipping.clear()  # </head> may be omitted: body content closes it
        if tag in _SKIPPED:
            self._skipping.append(tag)
        if self._skipping:
            return
        if tag == "br":
            self._parts.append(None)
        elif tag in _CELLS:
            if self._row_has_cell:
                self._parts.append(" | ")
            self._row_has_cell = True
        elif tag in _BLOCKS:
            self._flush()
            if tag in _HEADINGS:
                self._heading = _HEADINGS[tag]
            elif tag == "li":
                self._list_item = True
            elif tag == "pre":
                self._pre += 1
            elif tag == "tr":
                self._row_has_cell = False

    def handle_endtag(self, tag: str) -> None:
        if tag in self._skipping:
            while self._skipping.pop() != tag:
                pass  # an unclosed element inside the skipped one ends with it
            return
        if self._skipping or tag not in _BLOCKS:
            return
        self._flush()
        if tag in _HEADINGS:
            self._heading = 0
        elif tag == "li":
            self._list_item = False
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
        elif tag == "tr":
            self._row_has_cell = False

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self._parts.append(data)

    def close(self) -> None:
        super().close()
        self._flush()

    def _flush(self) -> None:
        parts, self._parts = self._parts, []
        if self._pre:
            code = "".join("\n" if part is None else part for part in parts).strip("\r\n")
            if code.strip():
                self.blocks.append(("pre", code))
            return
        # Outside <pre> a source newline is only a space; a line ends only at a <br>.
        lines: list[list[str]] = [[]]
        for part in parts:
            if part is None:
                lines.append([])
            else:
                lines[-1].append(part)
        text = "\n".join(filter(None, (" ".join("".join(line).split()) for line in lines)))
        if not text:
            return
        if self._heading:
            self.blocks.append(("h", "#" * self._heading + " " + " ".join(text.split())))
        elif self._list_item:
            self.blocks.append(("li", "- " + text))
            self._list_item = False  # only the item's first block carries the bullet
        elif self._row_has_cell:
            self.blocks.append(("row", text))
        else:
            self.blocks.append(("p", text))


def html_to_text(html: str) -> str:
    """Readable text of an HTML page: blocks separated by blank lines, ``<h1>``-``<h6>`` as
    Markdown ``#`` lines (so the splitter sees the headings), ``<pre>`` in a code fence,
    ``<script>``/``<style>``/``<head>`` dropped, entities unescaped. Never raises.

    >>> html_to_text("<h2>Setup</h2><p>Run &amp; wait.</p>")
    '## Setup\\n\\nRun & wait.'
    """
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return "".join(_joined(parser.blocks))


def _joined(blocks: list[tuple[str, str]]) -> Iterator[str]:
    previous = ""
    for kind, text in blocks:
        if previous:
            # Items of one list and rows of one table stay on consecutive lines.
            yield "\n" if kind == previous and kind in ("li", "row") else "\n\n"
        if kind == "pre":
            # A fence keeps "# comment" lines in code from reading as headings.
            longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
            fence = "`" * max(3, longest + 1)
            text = f"{fence}\n{text}\n{fence}"
        yield text
        previous = kind
