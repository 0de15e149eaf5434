"""Whole files: what a file's name and size decide, the dispatch by type, single-document
formats (text, Markdown, code, HTML, PDF; the structured formats of ``office``,
``opendocument``, ``tabular``, ``ebook``, ``notebook``, ``rst``), containers member by member,
mail with its attachments (``mail``), and the facts every document records."""

from __future__ import annotations

from dataclasses import replace
from typing import BinaryIO, Iterator

from chunkline.clean import without_nul
from chunkline.containers import CONTAINER_SUFFIXES, HEAD_BYTES, MEMBER_SEPARATOR, is_container, unpacked
from chunkline.html_markdown import html_to_text, main_content, page_metadata
from chunkline.metadata import (
    NUL, FrontMatter, MetadataError, front_matter, merged, metadata_pairs, over_byte_limit,
)
from chunkline.ocr import read_image
from chunkline.pdf import read_pdf
from chunkline.readers.ebook import read_epub
from chunkline.readers.formats import (
    DELIMITED_EXTENSIONS,
    EMPTY,
    EPUB_EXTENSIONS,
    FORMATS,
    HTML_EXTENSIONS,
    JSONL_EXTENSIONS,
    MAIL_EXTENSIONS,
    MBOX_EXTENSIONS,
    NOTEBOOK_EXTENSIONS,
    ODP_EXTENSIONS,
    ODT_EXTENSIONS,
    OPENDOCUMENT_EXTENSIONS,
    PARQUET_EXTENSIONS,
    IMAGE_EXTENSIONS,
    PDF_EXTENSIONS,
    RST_EXTENSIONS,
    SHEET_EXTENSIONS,
    SINGLE_DOCUMENT_EXTENSIONS,
    SLIDE_EXTENSIONS,
    SUPPORTED_EXTENSIONS,
    TEXT_EXTENSIONS,
    NO_MAIN_CONTENT,
    WORD_EXTENSIONS,
    over_limit,
)
from chunkline.readers.mail import mbox_messages, read_message
from chunkline.readers.notebook import read_notebook
from chunkline.readers.office import Converted, read_docx, read_pptx, read_xlsx
from chunkline.readers.opendocument import read_odp, read_ods, read_odt
from chunkline.readers.rst import read_rst
from chunkline.readers.tabular import read_delimited
from chunkline.readers.options import ReadOptions
from chunkline.readers.paths import extension, locator, name_problem, relative_id, shown_name
from chunkline.readers.records import (
    LineSlice,
    ParquetSlice,
    decode_jsonl,
    decode_parquet,
    stream_jsonl,
    stream_parquet,
)
from chunkline.readers.text import decode_text, utf8_encodable
from chunkline.records import Document, Rejected, evolved


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
        return over_limit(size, options)
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
                part: ParquetSlice | LineSlice | None = None) -> Iterator[Document | Rejected]:
    """:func:`decode_file` for a file :func:`streams` says is read from ``handle`` (seekable):
    its records one by one, with memory for one line or one batch of rows; with ``part``, only
    that slice of it (:func:`~chunkline.readers.records.parquet_slices`,
    :func:`~chunkline.readers.records.jsonl_slices`)."""
    early = reject_before_reading(uri, root, size, options)
    if early is not None:
        yield early
        return
    path_id, ext = relative_id(uri, root), extension(uri)
    if ext in PARQUET_EXTENSIONS:
        records = stream_parquet(uri, path_id, handle, options,
                                 part if isinstance(part, ParquetSlice) else None)
    else:
        records = stream_jsonl(uri, path_id, handle, options,
                               part if isinstance(part, LineSlice) else None, places=True)
    for record in records:
        yield (_finished(evolved(record, format=FORMATS.get(ext, ""), file_size=size, file_modified=modified),
                         path_id, options) if isinstance(record, Document) else record)


def _decoded(uri: str, path_id: str, ext: str, data: bytes, options: ReadOptions,
             modified: float | None, parent: str | None = None,
             depth: int = 1) -> list[Document | Rejected]:
    """The documents of one file's (or archive member's, or attachment's) bytes, of the type
    ``ext`` says; ``parent``: the doc_id of the message a file was attached to (its documents
    record it as ``parent_id``); ``depth``: messages attached inside messages so far."""
    if ext in MAIL_EXTENSIONS | MBOX_EXTENSIONS:
        records = (_decode_mbox(uri, path_id, data, options, modified, depth)
                   if ext in MBOX_EXTENSIONS else
                   _decode_mail(uri, path_id, data, options, modified, depth))
        if parent is not None:  # the message itself was attached: its documents' parent
            records = [_with_parent(record, parent, path_id, options) for record in records]
        return records
    records = _decode_bytes(uri, path_id, ext, data, options)
    finished = [_finished(replace(record, format=FORMATS.get(ext, ""), file_size=len(data),
                                  file_modified=modified), path_id, options)
                if isinstance(record, Document) else record for record in records]
    if parent is None:
        return finished
    return [_with_parent(record, parent, path_id, options) for record in finished]


def _with_parent(record: Document | Rejected, parent: str, path_id: str,
                 options: ReadOptions) -> Document | Rejected:
    """A document read from an attachment, with ``parent_id`` (its message's doc_id) in its
    metadata; kept when a nearer message already set it."""
    if not isinstance(record, Document) or any(key == "parent_id" for key, _ in record.metadata):
        return record
    pairs = metadata_pairs([("parent_id", parent)])
    return _finished(replace(record, metadata=merged(record.metadata, pairs)), path_id, options)


def _decode_mail(uri: str, path_id: str, data: bytes, options: ReadOptions,
                 modified: float | None, depth: int) -> list[Document | Rejected]:
    """A message (``chunkline.readers.mail``) and, each read as a file of its own under
    ``<message id>//<file name>`` with ``parent_id`` the message's id, its attachments; an
    attachment no reader takes, or past ``input.containers.max_depth`` messages deep, is a
    ``Rejected``."""
    message = read_message(data)
    records: list[Document | Rejected] = [
        _finished(replace(record, format=FORMATS[".eml"], file_size=len(data), file_modified=modified),
                  path_id, options) if isinstance(record, Document)
        else record for record in _converted(uri, path_id, message.converted, options)]
    max_depth = options.containers.max_depth
    for attachment in message.attachments:
        member_uri, member_id, unnamed = _named_member(uri, path_id, attachment.name)
        if unnamed is not None:
            records.append(unnamed)
            continue
        ext = extension(attachment.name)
        data_in = attachment.data or b""
        reason = attachment.reason
        if reason is None and not is_container(attachment.name, data_in[:HEAD_BYTES]):
            reason = _early_reason(ext, len(data_in), options)
        if reason is None and ext in MAIL_EXTENSIONS and max_depth is not None and depth >= max_depth:
            reason = f"message nested deeper than input.containers.max_depth ({max_depth})"
        if reason is not None:
            records.append(Rejected(member_uri, member_id, reason))
        elif is_container(attachment.name, data_in[:HEAD_BYTES]):
            records.extend(_with_parent(record, path_id, member_id, options) for record in
                           _decode_container(member_uri, member_id, data_in, options, modified))
        else:
            records.extend(_decoded(member_uri, member_id, ext, data_in, options, modified,
                                    parent=path_id, depth=depth + 1))
    return records


def _decode_mbox(uri: str, path_id: str, data: bytes, options: ReadOptions,
                 modified: float | None, depth: int) -> list[Document | Rejected]:
    """Each message of an mbox file as ``<mbox id>//<n>.eml`` (1-based, in file order)."""
    messages = mbox_messages(data)
    if not messages:
        return [Rejected(uri, path_id, "not an mbox file (it does not begin with a \"From \" line)")]
    records: list[Document | Rejected] = []
    for number, message in enumerate(messages, start=1):
        name = f"{number}.eml"
        # The mbox's time changes with every message delivered into it: not this message's
        # fact, and on its row it would rewrite every message's row each night.
        records.extend(_decode_mail(_member(uri, name), _member(path_id, name), message, options,
                                    None, depth))
    return records


def _converted(uri: str, doc_id: str, found: Converted | str,
               options: ReadOptions) -> list[Document | Rejected]:
    """A structured format's Markdown (``Converted``) as a document, or its reason as a
    ``Rejected``; the document limit holds for the text read, as for a PDF."""
    if isinstance(found, str):
        return [Rejected(uri, doc_id, found)]
    if not utf8_encodable(found.text):
        return [Rejected(uri, doc_id, "text contains an unpaired surrogate")]
    too_big = over_limit(len(found.text.encode("utf-8")), options)
    if too_big:
        return [Rejected(uri, doc_id, f"{too_big} (text read from the file)")]
    try:
        metadata = metadata_pairs(found.metadata.items(), max_depth=options.max_metadata_depth)
    except MetadataError as exc:
        return [Rejected(uri, doc_id, str(exc))]
    return [Document(doc_id=doc_id, uri=uri, text=found.text, metadata=metadata, encoding="",
                     page_starts=found.page_starts)]


def _decode_structured(uri: str, doc_id: str, ext: str, data: bytes,
                       options: ReadOptions) -> list[Document | Rejected]:
    """Office files, e-books, notebooks, CSV/TSV and reStructuredText: each format's module
    reads it to Markdown (``Converted``) or says why not."""
    containers = options.containers
    if ext in WORD_EXTENSIONS:
        return _converted(uri, doc_id, read_docx(data, containers), options)
    if ext in SLIDE_EXTENSIONS:
        return _converted(uri, doc_id, read_pptx(data, containers), options)
    if ext in SHEET_EXTENSIONS:
        return _converted(uri, doc_id, read_xlsx(data, containers, options.max_table_rows), options)
    if ext in OPENDOCUMENT_EXTENSIONS:
        # What repeated rows and cells may expand to: the document limit, else the containers'.
        bound = options.max_document_bytes or containers.max_unpacked_bytes
        found = (read_odt(data, containers, bound) if ext in ODT_EXTENSIONS
                 else read_odp(data, containers, bound) if ext in ODP_EXTENSIONS
                 else read_ods(data, containers, options.max_table_rows, bound))
        return _converted(uri, doc_id, found, options)
    if ext in EPUB_EXTENSIONS:
        return _converted(uri, doc_id, read_epub(data, containers), options)
    decoded = decode_text(data)
    if isinstance(decoded, str):
        return [Rejected(uri, doc_id, decoded)]
    text, encoding = decoded
    if ext in NOTEBOOK_EXTENSIONS:
        found = read_notebook(text)
    elif ext in RST_EXTENSIONS:
        found = read_rst(text)
    else:
        name = uri.rsplit("/", 1)[-1]
        found = read_delimited(text, name, ext == ".tsv", options.max_table_rows)
    return [replace(record, encoding=encoding) if isinstance(record, Document) else record
            for record in _converted(uri, doc_id, found, options)]


def _member(parent: str, path: str) -> str:
    return f"{parent}{MEMBER_SEPARATOR}{path}" if path else parent


def _named_member(uri: str, path_id: str, path: str) -> tuple[str, str, Rejected | None]:
    """(uri, id) of a member (an archive's file, a mail's attachment) under its container, and
    its rejection when the name is one no column can hold (shown with escapes)."""
    member_uri, member_id = _member(uri, path), _member(path_id, path)
    problem = name_problem(member_id)
    unnamed = Rejected(shown_name(member_uri), shown_name(member_id), problem) if problem else None
    return member_uri, member_id, unnamed


def _decode_container(uri: str, path_id: str, data: bytes, options: ReadOptions,
                      modified: float | None) -> list[Document | Rejected]:
    """Every supported file inside a compressed file or archive (``chunkline.containers``),
    read as if it were a file of its own under the id ``<archive id>//<member path>`` (a
    compressed file's content keeps the file's id); each member no reader takes, each refused
    member and the limit a container met, a ``Rejected``."""
    records: list[Document | Rejected] = []
    for inner in unpacked(uri.rsplit("/", 1)[-1], data, options.containers,
                          is_wanted=lambda name: extension(name) in SUPPORTED_EXTENSIONS):
        member_uri, member_id, unnamed = _named_member(uri, path_id, inner.path)
        if unnamed is not None:
            records.append(unnamed)
            continue
        ext = extension(inner.name)
        reason = inner.reason or _early_reason(ext, len(inner.data or b""), options)
        if reason is None and inner.data is None:
            reason = f"unsupported file type {ext}" if ext else "unsupported file type (no extension)"
        if reason is not None or inner.data is None:  # (the second never without the first)
            records.append(Rejected(member_uri, member_id, reason or "unsupported file type"))
            continue
        # An archive's time is not its members' (one member edited rewrites the archive and
        # would move every member's row); a compressed single file's content is the file.
        records.extend(_decoded(member_uri, member_id, ext, inner.data, options,
                                modified if member_id == path_id else None))
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
        return decode_parquet(uri, doc_id, data, options)
    if ext in JSONL_EXTENSIONS:
        return decode_jsonl(uri, doc_id, data, options)
    if ext in PDF_EXTENSIONS | IMAGE_EXTENSIONS:
        return [_decode_pdf(uri, doc_id, data, options, image=ext in IMAGE_EXTENSIONS)]
    if ext in WORD_EXTENSIONS | SLIDE_EXTENSIONS | SHEET_EXTENSIONS | OPENDOCUMENT_EXTENSIONS \
            | EPUB_EXTENSIONS | NOTEBOOK_EXTENSIONS | RST_EXTENSIONS | DELIMITED_EXTENSIONS:
        return _decode_structured(uri, doc_id, ext, data, options)
    decoded = decode_text(data, html=ext in HTML_EXTENSIONS)
    if isinstance(decoded, str):
        return [Rejected(uri, doc_id, decoded)]
    text, encoding = decoded
    if encoding != "utf-8":
        # The limit is on UTF-8 bytes; a legacy or UTF-16 file's size on disk is not that.
        too_big = over_limit(len(text.encode("utf-8")), options)
        if too_big:
            return [Rejected(uri, doc_id, too_big)]
    metadata: tuple[tuple[str, str], ...] = ()
    if ext in HTML_EXTENSIONS:
        plain = html_to_text(text)
        if not plain.strip():
            return [Rejected(uri, doc_id, EMPTY)]  # no text at all, not even page chrome
        html = text
        main = main_content(html, plain)
        if main is None:
            return [Rejected(uri, doc_id, NO_MAIN_CONTENT)]
        text = main
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


def _decode_pdf(uri: str, doc_id: str, data: bytes, options: ReadOptions,
                image: bool = False) -> Document | Rejected:
    """A PDF (its text layers, OCR where a page has none, as ``options.ocr`` says) or an image
    file's pages (OCR): pages, outline, document info, and how OCR read it when it did."""
    found = read_image(data, options.ocr) if image else read_pdf(data, options.ocr)
    if isinstance(found, str):
        return Rejected(uri, doc_id, found)
    text = found.text
    what = "image" if image else "PDF"
    if not utf8_encodable(text):
        return Rejected(uri, doc_id, f"{what} text contains an unpaired surrogate")
    too_big = over_limit(len(text.encode("utf-8")), options)
    if too_big:
        return Rejected(uri, doc_id, f"{too_big} (text read from the {what})")
    facts: dict[str, object] = dict(found.info)
    if found.ocr_engine is not None:
        # What read the text, and how sure it was: a reader of a chunk can tell OCR from a
        # text layer, and a low confidence from a clean page.
        facts.update(ocr_engine=found.ocr_engine, ocr_confidence=found.ocr_confidence,
                     ocr_pages=list(found.ocr_pages))
    try:
        metadata = metadata_pairs(facts.items(), max_depth=options.max_metadata_depth)
    except MetadataError as exc:
        return Rejected(uri, doc_id, str(exc))
    return Document(doc_id=doc_id, uri=uri, text=text, metadata=metadata, encoding="",
                    page_starts=found.page_starts, outline=found.outline)
