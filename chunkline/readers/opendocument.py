"""OpenDocument files (OASIS OpenDocument 1.3), LibreOffice's own formats, to Markdown through
odfdo, read as their Office counterparts are (``chunkline.readers.office``), each with its
metadata (``meta.xml``: title, author, created, modified, subject).

- ODT (text): the body's blocks in order; a heading (``text:h``, part 3 section 5.1.2) at its
  ``text:outline-level`` (a heading without one is level 1), a paragraph of the ``Title``
  style level 1 as in a DOCX; lists (``text:list``, 5.3) as ``-`` items indented by how deeply
  they nest; tables as pipe tables, their first row the header (a merged cell written once,
  then empty cells: the ``table:covered-table-cell`` s that follow it); sections and indexes
  opened; footnotes and endnotes (``text:note``, 6.3) as ``[^N]`` marks and a ``Footnotes``
  section at the end, comments (``office:annotation``) and tracked deletions left out.
- ODS (spreadsheet): each sheet (``table:table``) a section named after it, its rows a pipe
  table cut between rows (``chunkline.readers.tables``), each cell's value as its type says
  (``office:value-type``: a number, date or boolean as XLSX's cached value reads; a string or
  time as shown). A run of repeated rows or cells (``table:number-rows-repeated``,
  ``table:number-columns-repeated``: LibreOffice writes a sheet's million empty rows as one) is
  counted, never expanded unless it holds a value, and the text a sheet expands to is bounded.
- ODP (presentation): one section per slide (``draw:page``), its title (the frame of
  ``presentation:class`` ``title``) its heading (``Slide N`` untitled), its shapes in reading
  order (top to bottom, then left to right; groups opened), lists as items, tables as pipe
  tables, the speaker notes (``presentation:notes``) under ``## Speaker notes``; slide ``i + 1``
  starts at ``page_starts[i]``, as a PPTX's.

What cannot be read is a reason, never an exception: not a zip, a zip without the
``mimetype`` of the kind its extension names (part 2, section 3.3), an encrypted package (its
manifest holds ``manifest:encryption-data``, part 2, section 4.8), a package whose declared sizes
pass the container limits (odfdo reads every part into memory), rows and cells whose repeats
expand past the document limit (a few bytes of XML can repeat a row a million times), a damaged
part, or no text.
"""

from __future__ import annotations

import datetime as dt
import io
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from chunkline.containers import ContainerOptions
from chunkline.extras import require
from chunkline.readers.formats import EMPTY, FOOTNOTES
from chunkline.pages import join_pages
from chunkline.readers.markdown import blocks, heading, list_item, one_line, paragraph, pipe_table
from chunkline.readers.office import Converted, slide_section, unpacked_problem
from chunkline.readers.tables import sheet_sections

EXTRA = "opendocument"
# Part 2, section 3.3: the package's first member, ``mimetype``, names its kind.
_MIMETYPES = {"text": b"application/vnd.oasis.opendocument.text",
              "spreadsheet": b"application/vnd.oasis.opendocument.spreadsheet",
              "presentation": b"application/vnd.oasis.opendocument.presentation"}
_MANIFEST = "META-INF/manifest.xml"
# The bounds on what attributes multiply: a run of spaces (``text:s c``), a row's columns
# (LibreOffice's and Excel's last column is the 16,384th) and the nesting of groups, sections and
# lists. What repeated rows and cells expand to is bounded by the reading's budget.
MAX_SPACES = 64
MAX_COLUMNS = 16_384
_MAX_DEPTH = 64
# Elements whose text is not the document's: comments, the deleted text of tracked changes,
# declarations, a list's or heading's generated number, forms, alt text.
_SKIPPED = frozenset({
    "office:annotation", "office:annotation-end", "office:forms", "text:tracked-changes",
    "text:number", "text:note-citation", "text:sequence-decls", "text:variable-decls",
    "text:user-field-decls", "text:dde-connection-decls", "table:calculation-settings",
    "table:named-expressions", "table:database-ranges", "table:content-validations",
    "svg:title", "svg:desc", "draw:image", "presentation:notes", "text:soft-page-break",
})
_LENGTH = re.compile(r"^\s*(-?[0-9.]+)\s*(cm|mm|in|pt|pc|px)?\s*$")
_MM_PER = {"cm": 10.0, "mm": 1.0, "in": 25.4, "pt": 25.4 / 72, "pc": 25.4 / 6, "px": 25.4 / 96, None: 1.0}
_META_KEYS = ("title", "author", "created", "modified", "subject")


# --- the package --------------------------------------------------------------------------------


def package_problem(data: bytes, kind: str, label: str, options: ContainerOptions) -> str | None:
    """Why ``data`` is no OpenDocument package of ``kind`` (``text``, ``spreadsheet``,
    ``presentation``) to open, or None; ``label`` names the kind in the reason."""
    if not data.startswith(b"PK"):
        return f"not a readable {label} (not a zip archive)"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            # Sizes first: a member is read up to its declared size, which must pass the limits.
            problem = unpacked_problem(infos, len(data), label, options)
            if problem:
                return problem
            names = {info.filename for info in infos}
            mimetype = archive.read("mimetype").strip() if "mimetype" in names else b""
            manifest = archive.read(_MANIFEST) if _MANIFEST in names else b""
    except Exception as exc:  # noqa: BLE001 - BadZipFile, a truncated member, ...
        return f"not a readable {label} ({type(exc).__name__}: {exc})"
    if mimetype != _MIMETYPES[kind]:
        found = mimetype.decode("ascii", "replace")[:80] or "none"
        return f"not an OpenDocument {kind}: a zip archive whose mimetype is {found}"
    if b"encryption-data" in manifest:
        return f"encrypted {label} (password-protected; not supported)"
    return None


class _TooLong(Exception):
    """The text read passed the reading's budget."""


@dataclass
class _Reading:
    """What one file's reading carries along: the characters repeats may still expand to
    (None: no bound), the paragraph styles that make a title, and the notes met so far."""

    budget: int | None
    titles: frozenset[str] = frozenset()
    notes: list[tuple[str, str]] = field(default_factory=list)

    def spend(self, characters: int) -> None:
        if self.budget is not None:
            self.budget -= characters
            if self.budget < 0:
                raise _TooLong


def _read(data: bytes, kind: str, label: str, options: ContainerOptions, max_chars: int | None,
          convert: Callable[[Any, _Reading], Converted | str]) -> Converted | str:
    problem = package_problem(data, kind, label, options)
    if problem:
        return problem
    odfdo = require(EXTRA, "odfdo")  # raised, not a row's reason: installing the extra fixes every one
    try:
        document = odfdo.Document(io.BytesIO(data))
        found = convert(document.body, _Reading(max_chars))
        if isinstance(found, str):
            return found
        return Converted(found.text, {**_metadata(document), **found.metadata}, found.page_starts)
    except _TooLong:
        return (f"document is over the limit of {max_chars} bytes (text read from the file, its "
                f"repeated rows and cells expanded)")
    except Exception as exc:  # noqa: BLE001 - lxml, odfdo's SecurityError, a missing part, ...
        return f"not a readable {label} ({type(exc).__name__}: {exc})"


def _metadata(document: Any) -> dict[str, Any]:
    """``meta.xml``'s title, author (the initial creator; ``dc:creator``, who saved it last,
    when none is named), created, modified and subject (part 3, section 4.3), as a DOCX's core
    properties are; nothing for a package without ``meta.xml`` (it is optional)."""
    if "meta.xml" not in document.container.get_parts():
        return {}
    meta = document.meta
    values = (meta.get_title(), meta.get_initial_creator() or meta.get_creator(),
              meta.get_creation_date(), meta.get_modification_date(), meta.get_subject())
    found: dict[str, Any] = {}
    for key, value in zip(_META_KEYS, values):
        if isinstance(value, str):
            value = value.strip()
        if value:
            found[key] = value
    return found


# --- text inside a paragraph --------------------------------------------------------------------


def _elements(element: Any) -> list[Any]:
    """The child elements of ``element`` (odfdo's ``children`` also holds XML comments and
    processing instructions, which have no tag)."""
    return element.get_elements("*")


def _attribute(element: Any, name: str) -> str | None:
    value = element.get_attribute(name)
    if isinstance(value, bool):  # odfdo reads "true" and "false" as booleans
        return "true" if value else "false"
    return None if value is None else str(value)


def _count(element: Any, name: str, bound: int) -> int:
    """A repeat count attribute (default 1), at least 1 and at most ``bound``."""
    try:
        return max(1, min(int(_attribute(element, name) or 1), bound))
    except ValueError:
        return 1


def _spaced(text: str | None) -> str:
    # Part 3, section 6.1.2: white space in text content collapses to one space; runs of
    # spaces, tabs and line breaks are elements of their own (text:s, text:tab, text:line-break).
    return re.sub(r"[ \t\r\n]+", " ", text) if text else ""


def _inline(element: Any, reading: _Reading | None, depth: int = 0) -> str:
    """The text of a paragraph, heading or span as it reads: ``text:s`` as its spaces, a tab, a
    line break, a note as ``[^N]`` (its text kept in ``reading.notes``; without a reading a
    note's mark is all that is read)."""
    parts: list[str] = []
    # Text nodes and child elements in document order (XPath's text() nodes are the element's
    # own text and every child's tail, a comment's included; comments themselves are left out).
    for node in element.xpath("text()|*"):
        if isinstance(node, str):
            parts.append(_spaced(node))
            continue
        tag = node.tag
        if tag == "text:s":
            parts.append(" " * _count(node, "text:c", MAX_SPACES))
        elif tag == "text:tab":
            parts.append("\t")
        elif tag == "text:line-break":
            parts.append("\n")
        elif tag == "text:note":
            parts.append(_note(node, reading))
        elif tag not in _SKIPPED and depth < _MAX_DEPTH:
            parts.append(_inline(node, reading, depth + 1))
    return "".join(parts)


def _note(note: Any, reading: _Reading | None) -> str:
    citation, body = "", ""
    for child in _elements(note):
        if child.tag == "text:note-citation":
            citation = one_line(_inline(child, None))
        elif child.tag == "text:note-body":
            body = one_line(" ".join(_inline(p, None) for p in _paragraphs(child)))
    if reading is None:
        return f"[^{citation}]" if citation else ""
    citation = citation or str(len(reading.notes) + 1)
    if body:
        reading.notes.append((citation, body))
    return f"[^{citation}]"


def _paragraphs(element: Any, depth: int = 0) -> Iterator[Any]:
    """The paragraphs and headings anywhere inside ``element``, in order."""
    for child in _elements(element):
        if child.tag in ("text:p", "text:h"):
            yield child
        elif child.tag not in _SKIPPED and depth < _MAX_DEPTH:
            yield from _paragraphs(child, depth + 1)


def _cell_text(cell: Any) -> str:
    return " ".join(one_line(_inline(p, None)) for p in _paragraphs(cell)).strip()


# --- tables: a text document's, a slide's, a sheet's ---------------------------------------------


def _table_rows(table: Any, depth: int = 0) -> Iterator[tuple[Any, int]]:
    """(row, times it repeats) of a table in order, through header rows and row groups."""
    for child in _elements(table):
        tag = child.tag
        if tag == "table:table-row":
            yield child, _count(child, "table:number-rows-repeated", 2**31)
        elif tag in ("table:table-header-rows", "table:table-rows", "table:table-row-group") \
                and depth < _MAX_DEPTH:
            yield from _table_rows(child, depth + 1)


def _row_cells(row: Any, value: Callable[[Any], object], reading: _Reading) -> list[object]:
    """A row's cell values (``value`` of each cell; a covered cell, hidden under a merged one,
    is empty), trailing empty cells left out: a repeated empty cell is counted and expanded
    only when a value follows it; at most :data:`MAX_COLUMNS` cells. Each cell written is
    spent from the reading's budget (its text and the ``| `` around it)."""
    cells: list[object] = []
    empty = 0
    for cell in _elements(row):
        if cell.tag not in ("table:table-cell", "table:covered-table-cell"):
            continue
        times = _count(cell, "table:number-columns-repeated", MAX_COLUMNS)
        found = value(cell) if cell.tag == "table:table-cell" else None
        if found is None or found == "":
            empty += times
            continue
        padding = min(empty, MAX_COLUMNS - len(cells))
        copies = max(0, min(times, MAX_COLUMNS - len(cells) - padding))
        reading.spend(3 * padding + (len(str(found)) + 3) * copies)
        cells.extend([None] * padding)
        cells.extend([found] * copies)
        empty = 0
    return cells


def _rows(table: Any, value: Callable[[Any], object], reading: _Reading) -> Iterator[tuple[int, list[object]]]:
    """(row number, cell values) of a table's non-empty rows, each as often as it repeats
    (spent from the budget); an empty row repeated counts its rows without being expanded, so
    the numbers are the sheet's own (LibreOffice writes a sheet's last million rows as one)."""
    number = 0
    for row, times in _table_rows(table):
        cells = _row_cells(row, value, reading)
        if not cells:
            number += times
            continue
        cost = sum(len(str(c)) + 3 for c in cells) + 2
        for copy in range(times):
            if copy:  # the first was spent as its cells were read
                reading.spend(cost)
            number += 1
            yield number, cells


def _text_table(table: Any, reading: _Reading) -> str:
    """A table of a text document or a slide as a pipe table, its first row the header."""
    rows = [cells for _, cells in _rows(table, _cell_text, reading)]
    return pipe_table(rows[0], rows[1:]) if rows else ""


# --- text documents -----------------------------------------------------------------------------


def read_odt(data: bytes, options: ContainerOptions, max_chars: int | None) -> Converted | str:
    """A text document's (``.odt``) body as Markdown with its metadata, or the reason it has
    none; ``max_chars`` bounds what repeated table rows and cells expand to. Never raises."""
    return _read(data, "text", "OpenDocument text", options, max_chars, _odt)


def _odt(body: Any, reading: _Reading) -> Converted | str:
    reading.titles = _title_styles(body)
    parts = list(_text_blocks(body, reading))
    if reading.notes:
        parts.append(heading(1, FOOTNOTES) + "\n\n" + "\n".join(
            f"[^{citation}]: {text}" for citation, text in reading.notes))
    text = blocks(parts)
    if not text.strip():
        return f"{EMPTY} (no text in the OpenDocument text)"
    return Converted(text)


def _title_styles(body: Any) -> frozenset[str]:
    """The paragraph styles that make a title: ``Title`` and the automatic styles derived from
    it (``style:parent-style-name``), as LibreOffice writes a title whose look was touched."""
    names = {"Title"}
    automatic = body.root.get_element("office:automatic-styles")
    for style in _elements(automatic) if automatic is not None else ():
        if style.tag == "style:style" and _attribute(style, "style:parent-style-name") in names:
            names.add(_attribute(style, "style:name") or "Title")
    return frozenset(names)


def _text_blocks(container: Any, reading: _Reading, depth: int = 0) -> Iterator[str]:
    """The Markdown blocks of a body, section, frame or text box, in order. Consecutive lists
    are one block: LibreOffice writes a list that goes one level deeper after its first items
    as a second ``text:list``, and a Markdown list read back must not be cut between them."""
    items: list[str] = []
    for child in _elements(container):
        tag = child.tag
        if tag in _SKIPPED:
            continue
        if tag == "text:list":
            for kind, block in _list_entries(child, reading, 0, depth):
                if kind == "item":
                    items.append(block)
                    continue
                if items:
                    yield "\n".join(items)
                    items = []
                if block.strip():
                    yield block
            continue
        if items:
            yield "\n".join(items)
            items = []
        if tag == "text:h":
            block = _heading(child, reading)
        elif tag == "text:p":
            text = _inline(child, reading)
            titled = _attribute(child, "text:style-name") in reading.titles and text.strip()
            block = heading(1, text) if titled else paragraph(text)
        elif tag == "table:table":
            block = _text_table(child, reading)
        elif depth < _MAX_DEPTH:  # sections, indexes, frames and text boxes: their own blocks
            yield from _text_blocks(child, reading, depth + 1)
            continue
        else:
            continue
        if block.strip():
            yield block
    if items:
        yield "\n".join(items)


def _heading(element: Any, reading: _Reading) -> str:
    """A ``text:h`` at its outline level (absent or unreadable: 1)."""
    text = _inline(element, reading)
    if not text.strip():
        return ""
    try:
        level = int(_attribute(element, "text:outline-level") or 1)
    except ValueError:
        level = 1
    return heading(level, text)


def _list_entries(element: Any, reading: _Reading, level: int, depth: int) -> Iterator[tuple[str, str]]:
    """("item", a list item's line) for each paragraph of a list, a nested list's one level
    deeper; ("block", Markdown) for a heading or a table inside one."""
    for item in _elements(element):
        if item.tag not in ("text:list-item", "text:list-header"):
            continue
        for child in _elements(item):
            tag = child.tag
            if tag == "text:list" and depth < _MAX_DEPTH:
                yield from _list_entries(child, reading, level + 1, depth + 1)
            elif tag == "text:p":
                text = _inline(child, reading)
                if text.strip():
                    yield "item", list_item(text, level)
            elif tag == "text:h":
                yield "block", _heading(child, reading)
            elif tag == "table:table":
                yield "block", _text_table(child, reading)


# --- spreadsheets -------------------------------------------------------------------------------


def read_ods(data: bytes, options: ContainerOptions, max_rows: int, max_chars: int | None) -> Converted | str:
    """A spreadsheet's (``.ods``) sheets as Markdown sections of pipe tables (at most
    ``max_rows`` rows a section) with its metadata, or the reason it has none; ``max_chars``
    bounds what repeated rows and cells expand to. Never raises."""
    return _read(data, "spreadsheet", "OpenDocument spreadsheet", options, max_chars,
                 lambda body, reading: _ods(body, reading, max_rows))


def _ods(body: Any, reading: _Reading, max_rows: int) -> Converted | str:
    sections: list[str] = []
    names: list[str] = []
    for sheet in _elements(body):
        if sheet.tag != "table:table":
            continue
        name = _attribute(sheet, "table:name") or f"Sheet{len(names) + 1}"
        names.append(name)
        sections.extend(sheet_sections(name, _rows(sheet, _cell_value, reading), max_rows))
    if not sections:
        return f"{EMPTY} (no cell of {len(names)} sheet(s) holds a value)"
    return Converted("\n\n".join(sections), {"sheets": names})


def _cell_value(cell: Any) -> object:
    """A cell's value by its ``office:value-type`` (part 3, section 19.389): a float for a
    number, percentage or currency, a datetime for a date, a bool, as an XLSX's cached values
    read; a string or a time as the cell shows it. A formula's value is the one last computed,
    stored as any other value."""
    kind = _attribute(cell, "office:value-type")
    try:
        if kind in ("float", "percentage", "currency"):
            return float(_attribute(cell, "office:value") or "")
        if kind == "date":
            return dt.datetime.fromisoformat(_attribute(cell, "office:date-value") or "")
        if kind == "boolean":
            return _attribute(cell, "office:boolean-value") == "true"
    except ValueError:
        pass  # a value this reader cannot parse: the cell as it is shown
    return "\n".join(_inline(p, None) for p in _paragraphs(cell)).strip()


# --- presentations ------------------------------------------------------------------------------


def read_odp(data: bytes, options: ContainerOptions, max_chars: int | None) -> Converted | str:
    """A presentation's (``.odp``) slides as Markdown sections with ``page_starts`` (slide
    ``i + 1`` starts at ``page_starts[i]``) and its metadata, or the reason it has none;
    ``max_chars`` bounds what repeated table rows and cells expand to. Never raises."""
    return _read(data, "presentation", "OpenDocument presentation", options, max_chars, _odp)


# Placeholders a slide repeats from its master (part 3, section 19.683 presentation:class), not
# the slide's own text.
_CHROME = frozenset({"header", "footer", "date-time", "page-number", "page", "handout"})


def _odp(body: Any, reading: _Reading) -> Converted | str:
    sections: list[str] = []
    has_text = False
    for page in _elements(body):
        if page.tag != "draw:page":
            continue
        shapes = [child for child in _elements(page) if child.tag not in _SKIPPED]
        title_shape = next((s for s in shapes if _attribute(s, "presentation:class") == "title"), None)
        title = "" if title_shape is None else \
            one_line(" ".join(_inline(p, None) for p in _paragraphs(title_shape)))
        body_blocks = list(_shape_blocks([s for s in shapes if s is not title_shape], reading, 0))
        notes = _speaker_notes(page)
        has_text = has_text or bool(title or body_blocks or notes)
        sections.append(slide_section(len(sections) + 1, title, body_blocks, notes))
    if not sections:
        return f"{EMPTY} (the presentation has no slides)"
    if not has_text:
        return f"{EMPTY} (no text on any of {len(sections)} slide(s))"
    text, starts = join_pages(sections)
    return Converted(text, {"slides": len(sections)}, starts)


def _millimetres(value: str | None) -> float:
    found = _LENGTH.match(value or "")
    try:
        return float(found.group(1)) * _MM_PER[found.group(2)] if found else 0.0
    except ValueError:
        return 0.0


def _reading_order(shape: Any) -> tuple[float, float]:
    return (_millimetres(_attribute(shape, "svg:y")), _millimetres(_attribute(shape, "svg:x")))


def _shape_blocks(shapes: list[Any], reading: _Reading, depth: int) -> Iterator[str]:
    """The blocks of a slide's shapes (or a group's) in reading order: a table, or the
    paragraphs and lists of a text box or shape."""
    for shape in sorted(shapes, key=_reading_order):
        if _attribute(shape, "presentation:class") in _CHROME:
            continue
        if shape.tag == "draw:g":
            if depth < _MAX_DEPTH:
                inner = [s for s in _elements(shape) if s.tag not in _SKIPPED]
                yield from _shape_blocks(inner, reading, depth + 1)
            continue
        table = next((c for c in _elements(shape) if c.tag == "table:table"), None)
        if table is not None:
            block = _text_table(table, reading)
            if block:
                yield block
            continue
        box = next((c for c in _elements(shape) if c.tag == "draw:text-box"), shape)
        yield from _text_blocks(box, reading, depth + 1)


def _speaker_notes(page: Any) -> str:
    """The text of a slide's notes page (its frame of ``presentation:class`` ``notes``)."""
    for child in _elements(page):
        if child.tag == "presentation:notes":
            frames = [f for f in _elements(child) if _attribute(f, "presentation:class") == "notes"]
            return paragraph("\n".join(_inline(p, None) for f in frames for p in _paragraphs(f)))
    return ""
