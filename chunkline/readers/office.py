"""Office Open XML files (ECMA-376) to Markdown: Word documents (python-docx), PowerPoint
decks (python-pptx) and Excel workbooks (openpyxl), each with its core properties as metadata.

- DOCX / DOCM: paragraphs in body order; a paragraph whose outline level (its own ``w:outlineLvl``
  or its style's, inherited through ``w:basedOn``; ECMA-376 part 1, 17.3.1.20) is 0-8, or whose
  style is a built-in ``Heading N`` or ``Title``, is a heading of that level; list paragraphs
  (``w:numPr``, their own or their style's) are ``-`` items indented by ``w:ilvl``; tables are
  pipe tables, their first row the header (a merged cell repeated over the columns it spans is
  written once, then empty cells); footnotes are ``[^N]`` marks in the text and a ``Footnotes``
  section at the end. A macro-enabled ``.docm`` is read for its text only: python-docx refuses
  its main part's content type, so the package is read with that one content type renamed (the
  VBA part is never opened; nothing here runs macros).
- PPTX / PPTM: one section per slide, the slide's title (its ``title`` or ``ctrTitle``
  placeholder) its heading (``Slide N`` for an untitled slide), its shapes in reading order
  (top to bottom, then left to right), body placeholders as list items, tables as pipe tables,
  groups opened; the speaker notes under a ``Speaker notes`` sub-heading. The slide number is
  the page: ``page_starts[i]`` is where slide ``i + 1``'s section starts, as a PDF's pages
  (``chunkline.pdf``).
- XLSX / XLSM: each worksheet a section named after it, its rows a pipe table
  (``chunkline.readers.tables``), cached values (``data_only``: what Excel last computed, never
  a formula; a formula no application has computed reads as empty), read in openpyxl's
  ``read_only`` mode, which streams the sheet XML.

What cannot be read is a reason, never an exception: an encrypted file (ECMA-376 part 1 has no
encryption; Office writes a password-protected file as an OLE compound document holding an
``EncryptedPackage`` stream, MS-OFFCRYPTO 2.3.4.4), a legacy binary ``.doc``/``.ppt``/``.xls``,
a zip that is not an Office package, a package whose declared sizes pass the container limits
(``input.containers``: an Office file is a zip, and the libraries inflate every part in memory),
a damaged part, or a file with no text.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any, Iterator

from chunkline.containers import RATIO_FLOOR_BYTES, ContainerOptions
from chunkline.readers.formats import EMPTY, FOOTNOTES, SPEAKER_NOTES, untitled_slide
from chunkline.pages import join_pages
from chunkline.readers.markdown import blocks, heading, list_item, one_line, paragraph, pipe_table
from chunkline.readers.tables import sheet_sections
from chunkline.extras import require

# MS-CFB 2.2: the compound file header signature.
CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")  # MS-OFFCRYPTO 2.3.4.4
_CONTENT_TYPES = "[Content_Types].xml"
# ECMA-376 part 1, 11.3.10 / 11.2: a macro-enabled document's main part (MS-OFFMACRO2 2.1.1.6)
# and the plain one python-docx accepts.
_DOCM_MAIN = b"application/vnd.ms-word.document.macroEnabled.main+xml"
_DOCX_MAIN = b"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING_STYLE = re.compile(r"^heading ([1-9])$", re.I)
# Core property (ECMA-376 part 2, 11: Dublin Core) -> metadata key.
_CORE_KEYS = (("title", "title"), ("author", "author"), ("created", "created"),
              ("modified", "modified"), ("subject", "subject"))


@dataclass(frozen=True)
class Converted:
    """A file read to Markdown: its text, what it says about itself, and for a paged format
    where each page starts (slide ``i + 1`` at ``page_starts[i]``)."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    page_starts: tuple[int, ...] = ()


def package_problem(data: bytes, kind: str, options: ContainerOptions) -> str | None:
    """Why ``data`` is no Office Open XML package to open, or None: encrypted, a legacy binary
    file, not a zip, a zip without ``[Content_Types].xml`` (OPC, ECMA-376 part 2, 10.1.2.4), or
    one whose members' declared sizes pass the container limits (zipfile stops a member at its
    declared size, so the declared sum bounds what the libraries inflate)."""
    if data.startswith(CFB_MAGIC):
        if _ENCRYPTED_STREAM in data:
            return f"encrypted {kind} (password-protected; not supported)"
        return "legacy binary Office file (an OLE compound document, not Office Open XML): not supported"
    if not data.startswith(b"PK"):
        return f"not a readable {kind} (not a zip archive)"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except Exception as exc:  # noqa: BLE001 - BadZipFile, a truncated central directory, ...
        return f"not a readable {kind} ({type(exc).__name__}: {exc})"
    if not any(info.filename == _CONTENT_TYPES for info in infos):
        return f"not an Office file: a zip archive without {_CONTENT_TYPES}"
    return unpacked_problem(infos, len(data), kind, options)


def unpacked_problem(infos: list[zipfile.ZipInfo], packed: int, kind: str,
                     options: ContainerOptions) -> str | None:
    """Whether a zip-based file's members, by their declared sizes, pass the container limits
    (``input.containers``), or None."""
    unpacked = sum(info.file_size for info in infos)
    limit = options.max_unpacked_bytes
    if limit is not None and unpacked > limit:
        return f"{kind} unpacks to more than input.containers.max_unpacked_bytes ({limit:,} bytes)"
    ratio = options.max_ratio
    if ratio is not None and unpacked > RATIO_FLOOR_BYTES and unpacked > ratio * max(packed, 1):
        return (f"{kind} unpacks to more than {ratio:g} times its {packed:,} bytes "
                f"(input.containers.max_ratio): a decompression bomb")
    return None


def _core_metadata(properties: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for attribute, key in _CORE_KEYS:
        value = getattr(properties, attribute, None)
        if attribute == "author" and not value:
            value = getattr(properties, "creator", None)  # openpyxl's name for dc:creator
        if isinstance(value, str):
            value = value.strip()
        if value:
            found[key] = value
    return found


def _guarded(kind: str, read) -> Converted | str:
    """``read()``, with a library's exception on a damaged file as the reason."""
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 - lxml, zipfile, KeyError on a missing part, ...
        return f"not a readable {kind} ({type(exc).__name__}: {exc})"


# --- Word ---------------------------------------------------------------------------------------


def read_docx(data: bytes, options: ContainerOptions) -> Converted | str:
    """A Word document's (``.docx``, ``.docm``) text as Markdown with its core properties, or
    the reason it has none. Never raises."""
    problem = package_problem(data, "Word document", options)
    if problem:
        return problem
    require("office", "docx")  # raised, not a row's reason: installing the extra fixes every one
    return _guarded("Word document", lambda: _docx(data))


def _as_docx(data: bytes) -> bytes:
    """The package with a macro-enabled main part's content type renamed to the plain one;
    ``data`` itself when it has none."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        types = archive.read(_CONTENT_TYPES)
        if _DOCM_MAIN not in types:
            return data
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as copy:
            for info in archive.infolist():
                body = archive.read(info)
                copy.writestr(info, types.replace(_DOCM_MAIN, _DOCX_MAIN)
                              if info.filename == _CONTENT_TYPES else body)
    return out.getvalue()


@dataclass(frozen=True)
class _Style:
    level: int | None  # heading level 1-9, None for body text
    listed: bool  # its paragraphs are list items
    list_level: int


def _styles(document: Any) -> dict[str, _Style]:
    """Paragraph style id -> what it makes a paragraph: its outline level (its own or a base
    style's), else a built-in heading's level by name; whether it numbers its paragraphs."""
    found: dict[str, _Style] = {}
    for style in document.styles:
        element = getattr(style, "element", None)
        if element is None or style.type is None or int(style.type) != 1:  # WD_STYLE_TYPE.PARAGRAPH
            continue
        level, listed, list_level, current, seen = None, False, 0, style, set()
        while current is not None and current.style_id not in seen:
            seen.add(current.style_id)
            ppr = current.element.find(f"{_W}pPr")
            if ppr is not None:
                outline = ppr.find(f"{_W}outlineLvl")
                if level is None and outline is not None:
                    level = _outline_level(outline)
                num = ppr.find(f"{_W}numPr")
                if not listed and num is not None:
                    listed, list_level = True, _ilvl(num)
            if level is None:
                named = _HEADING_STYLE.match(current.name or "")
                if named:
                    level = int(named.group(1))
                elif (current.name or "").lower() == "title":
                    level = 1
            current = current.base_style
        found[style.style_id] = _Style(level, listed, list_level)
    return found


def _outline_level(element: Any) -> int | None:
    """``w:outlineLvl`` 0-8 as a heading level 1-9; 9 (body text) and junk as None."""
    try:
        value = int(element.get(f"{_W}val"))
    except (TypeError, ValueError):
        return None
    return value + 1 if 0 <= value <= 8 else None


def _ilvl(num_pr: Any) -> int:
    ilvl = num_pr.find(f"{_W}ilvl")
    try:
        return max(0, int(ilvl.get(f"{_W}val"))) if ilvl is not None else 0
    except (TypeError, ValueError):
        return 0


def _run_text(element: Any) -> str:
    """The text of a paragraph (or any element) in document order: text, tabs and breaks, a
    footnote reference as ``[^N]``; deleted text (``w:delText``) and field codes
    (``w:instrText``) are other elements and stay out."""
    parts: list[str] = []
    for node in element.iter(f"{_W}t", f"{_W}tab", f"{_W}br", f"{_W}cr",
                             f"{_W}footnoteReference", f"{_W}noBreakHyphen"):
        tag = node.tag
        if tag == f"{_W}t":
            parts.append(node.text or "")
        elif tag == f"{_W}tab":
            parts.append("\t")
        elif tag in (f"{_W}br", f"{_W}cr"):
            parts.append("\n")
        elif tag == f"{_W}noBreakHyphen":
            parts.append("-")
        else:
            parts.append(f"[^{node.get(f'{_W}id')}]")
    return "".join(parts)


def _docx(data: bytes) -> Converted | str:
    docx = require("office", "docx")  # only runs that read Word documents load python-docx

    document = docx.Document(io.BytesIO(_as_docx(data)))
    styles = _styles(document)
    default = _Style(None, False, 0)
    parts = list(_docx_blocks(document.element.body, styles, default))
    notes = _footnotes(document)
    if notes:
        parts.append(heading(1, FOOTNOTES) + "\n\n" + "\n".join(
            f"[^{number}]: {one_line(text)}" for number, text in notes))
    text = blocks(parts)
    if not text.strip():
        return f"{EMPTY} (no text in the Word document)"
    return Converted(text, _core_metadata(document.core_properties))


def _docx_blocks(container: Any, styles: dict[str, _Style], default: _Style) -> Iterator[str]:
    """Markdown blocks of a body (or a content control's content), in order; consecutive list
    items are one block."""
    items: list[str] = []
    for child in container.iterchildren():
        tag = child.tag
        if tag == f"{_W}p":
            block = _docx_paragraph(child, styles, default)
            if block is None:
                continue
            if block[0] == "item":
                items.append(block[1])
                continue
            if items:
                yield "\n".join(items)
                items = []
            yield block[1]
        elif tag in (f"{_W}tbl", f"{_W}sdt"):
            if items:
                yield "\n".join(items)
                items = []
            if tag == f"{_W}tbl":
                table = _docx_table(child)
                if table:
                    yield table
            else:
                content = child.find(f"{_W}sdtContent")
                if content is not None:
                    yield from _docx_blocks(content, styles, default)
    if items:
        yield "\n".join(items)


def _docx_paragraph(element: Any, styles: dict[str, _Style], default: _Style) -> tuple[str, str] | None:
    text = _run_text(element)
    if not text.strip():
        return None
    ppr = element.find(f"{_W}pPr")
    style = default
    level, num = None, None
    if ppr is not None:
        style_ref = ppr.find(f"{_W}pStyle")
        if style_ref is not None:
            style = styles.get(style_ref.get(f"{_W}val"), default)
        outline = ppr.find(f"{_W}outlineLvl")
        if outline is not None:
            level = _outline_level(outline)
        num = ppr.find(f"{_W}numPr")
    level = level if level is not None else style.level
    if level is not None:
        return "heading", heading(level, text)
    if num is not None or style.listed:
        return "item", list_item(text, _ilvl(num) if num is not None else style.list_level)
    return "paragraph", paragraph(text)


def _docx_table(element: Any) -> str:
    rows: list[list[str]] = []
    for row in element.iterchildren(f"{_W}tr"):
        cells: list[str] = []
        for cell in row.iterchildren(f"{_W}tc"):
            cells.append(" ".join(_run_text(p) for p in cell.iter(f"{_W}p")))
            span = cell.find(f"{_W}tcPr/{_W}gridSpan")
            try:
                extra = int(span.get(f"{_W}val")) - 1 if span is not None else 0
            except (TypeError, ValueError):
                extra = 0
            cells.extend([""] * max(0, min(extra, 63)))  # ECMA-376 caps a table at 63 columns
        if any(c.strip() for c in cells):
            rows.append(cells)
    if not rows:
        return ""
    return pipe_table(rows[0], rows[1:])


def _footnotes(document: Any) -> list[tuple[str, str]]:
    """(id, text) of the document's footnotes, separators aside (python-docx 1.2 has no footnote
    API: the part's XML, ECMA-376 part 1, 17.11.10)."""
    from docx.opc.constants import RELATIONSHIP_TYPE
    from lxml import etree

    for rel in document.part.rels.values():
        if rel.reltype == RELATIONSHIP_TYPE.FOOTNOTES and not rel.is_external:
            root = etree.fromstring(rel.target_part.blob,
                                    etree.XMLParser(resolve_entities=False, no_network=True))
            return [(note.get(f"{_W}id"), text)
                    for note in root.iterchildren(f"{_W}footnote")
                    if note.get(f"{_W}type") in (None, "normal")
                    for text in [" ".join(_run_text(p) for p in note.iter(f"{_W}p")).strip()]
                    if text]
    return []


# --- PowerPoint ---------------------------------------------------------------------------------


def slide_section(number: int, title: str, body: list[str], notes: str) -> str:
    """Slide ``number`` (1-based) as a section: its title, or its number when it has none, as
    the heading, its body's blocks, and its speaker notes under a heading of their own."""
    parts = [heading(1, title or untitled_slide(number)), *body]
    if notes:
        parts.append(heading(2, SPEAKER_NOTES) + "\n\n" + notes)
    return blocks(parts)


def read_pptx(data: bytes, options: ContainerOptions) -> Converted | str:
    """A deck's (``.pptx``, ``.pptm``) slides as Markdown sections with ``page_starts`` (slide
    ``i + 1`` starts at ``page_starts[i]``) and its core properties, or the reason it has none.
    Never raises."""
    problem = package_problem(data, "PowerPoint deck", options)
    if problem:
        return problem
    require("office", "pptx")
    return _guarded("PowerPoint deck", lambda: _pptx(data))


def _pptx(data: bytes) -> Converted | str:
    Presentation = require("office", "pptx").Presentation  # only runs that read decks load python-pptx

    deck = Presentation(io.BytesIO(data))
    sections: list[str] = []
    has_text = False
    for number, slide in enumerate(deck.slides, start=1):
        title_shape = _title_placeholder(slide)
        title = one_line(title_shape.text_frame.text) if title_shape is not None and \
            title_shape.has_text_frame else ""
        body = list(_shape_blocks(slide.shapes, skip=title_shape.shape_id if title_shape is not None else None))
        notes = ""
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = paragraph(slide.notes_slide.notes_text_frame.text.replace("\v", "\n"))
        has_text = has_text or bool(title or body or notes)
        sections.append(slide_section(number, title, body, notes))
    if not sections:
        return f"{EMPTY} (the deck has no slides)"
    if not has_text:
        return f"{EMPTY} (no text on any of {len(sections)} slide(s))"
    text, starts = join_pages(sections)
    metadata = _core_metadata(deck.core_properties)
    metadata["slides"] = len(sections)
    return Converted(text, metadata, starts)


def _title_placeholder(slide: Any) -> Any | None:
    """The slide's title placeholder (type ``title`` or ``ctrTitle``), or None.

    Not python-pptx's ``shapes.title``, which takes the first placeholder of index 0: a ``p:ph``
    without attributes is type ``obj`` and index 0 (ECMA-376 part 1, 19.3.1.36; the types are
    19.7.10 ST_PlaceholderType), which is how LibreOffice writes the body of a slide that has
    no title, and taking it for the title would fold the body's bullets into one heading."""
    from pptx.enum.shapes import PP_PLACEHOLDER

    for shape in slide.placeholders:
        if shape.placeholder_format.type in (PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE):
            return shape
    return None


def _reading_order(shape: Any) -> tuple[int, int]:
    return (shape.top or 0, shape.left or 0)


def _shape_blocks(shapes: Any, skip: int | None) -> Iterator[str]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE, PP_PLACEHOLDER

    for shape in sorted(shapes, key=_reading_order):
        if skip is not None and shape.shape_id == skip:
            continue
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _shape_blocks(shape.shapes, None)
        elif getattr(shape, "has_table", False) and shape.has_table:
            rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
            rows = [row for row in rows if any(c.strip() for c in row)]
            if rows:
                yield pipe_table(rows[0], rows[1:])
        elif shape.has_text_frame:
            bulleted = shape.is_placeholder and shape.placeholder_format.type in (
                PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT)
            lines = [(p.level, p.text.replace("\v", "\n")) for p in shape.text_frame.paragraphs]
            lines = [(level, text) for level, text in lines if text.strip()]
            if bulleted:
                if lines:
                    yield "\n".join(list_item(text, level) for level, text in lines)
            else:
                text = blocks(paragraph(text) for _, text in lines)
                if text:
                    yield text


# --- Excel --------------------------------------------------------------------------------------


def read_xlsx(data: bytes, options: ContainerOptions, max_rows: int) -> Converted | str:
    """A workbook's (``.xlsx``, ``.xlsm``) worksheets as Markdown sections of pipe tables (at
    most ``max_rows`` rows a section) with its core properties, or the reason it has none.
    Never raises."""
    problem = package_problem(data, "Excel workbook", options)
    if problem:
        return problem
    require("office", "openpyxl")
    return _guarded("Excel workbook", lambda: _xlsx(data, max_rows))


def _xlsx(data: bytes, max_rows: int) -> Converted | str:
    openpyxl = require("office", "openpyxl")  # only runs that read workbooks load openpyxl

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True, keep_links=False)
    try:
        sections: list[str] = []
        names = []
        for sheet in book.worksheets:
            names.append(sheet.title)
            rows = enumerate(sheet.iter_rows(values_only=True), start=1)
            sections.extend(sheet_sections(sheet.title, rows, max_rows))
        metadata = _core_metadata(book.properties)
    finally:
        book.close()
    if not sections:
        return f"{EMPTY} (no cell of {len(names)} sheet(s) holds a value)"
    metadata["sheets"] = names
    return Converted("\n\n".join(sections), metadata)
