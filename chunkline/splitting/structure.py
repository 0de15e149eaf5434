"""Markdown structure for the splitter: headings (where each section starts, and its heading
path) and pipe tables, from one block-level parse of the document.

Headings come from a CommonMark parser (markdown-it), not from a ``^#`` line scan: a ``#``
line inside a fenced or indented code block is code (LangChain #10262), setext headings
(``Title`` over ``===``) are headings, and ``#hashtag`` is not. Only top-level headings form the
path; a heading quoted inside a block quote or a list item is content.

Tables come from a GFM reading of the document (markdown-it's ``table`` rule), not from a ``|``
line scan: pipes inside a fenced or indented code block are code, and a row ends the table where
GFM says it does. Only top-level tables are reported: a table inside a list item or a block
quote has its rows indented or quoted, so repeating its header row alone would not read as a
table.

:func:`read_structure` reads both from one markdown-it-pyrs parse with GFM tables enabled. The
heading paths stay CommonMark's: where the parse found a table, the lines around it may read
differently without the table rule (table lines over ``---`` are a setext heading to
CommonMark), so only a document holding a table is read a second time, for its headings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Iterator, Literal, get_args

from markdown_it import MarkdownIt

from chunkline.metadata import FRONT_MATTER

# A line that could open an ATX heading or underline a setext one. Documents with none skip
# the parse entirely.
_HEADING_CANDIDATE = re.compile(r"^ {0,3}(?:#{1,6}(?:[ \t]|$)|=+[ \t]*$|-+[ \t]*$)", re.M)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# A delimiter row has a pipe beside a dash or colon, maybe spaced (markdown-it-pyrs reads no
# table whose delimiter row has no pipe). Documents with none skip the table rule; a false alarm
# costs the rule's tries. The plain substrings are found at memchr speed, the regex only if
# they fail.
_TIGHT_MARKS = ("|-", "-|", "|:", ":|")
_DELIMITER_MARK = re.compile(r"[-:][ \t]*\||\|[ \t]*[-:]")


def mask_front_matter(text: str) -> str:
    """``text`` with a leading YAML front matter block blanked out (line breaks kept, so every
    offset and line number is unchanged); other text is returned as is."""
    # YAML front matter (Jekyll, Hugo, MkDocs) is not CommonMark, which would read its closing
    # "---" as a setext underline and make the metadata a heading.
    found = FRONT_MATTER.match(text)
    if found is None:
        return text
    block = found.group()
    return re.sub(r"[^\r\n]", " ", block) + text[found.end() :]


@dataclass(frozen=True)
class Heading:
    """A heading whose line starts at ``start`` (a str index of the document) and whose source
    (the underline of a setext heading included) ends by ``end``."""

    start: int
    level: int
    title: str
    end: int


@dataclass(frozen=True)
class Section:
    """``text[start:end]`` belongs under ``headings`` (outermost first); ``heading_end`` is
    where the heading that opens the section ends (None before the first heading)."""

    start: int
    end: int
    headings: tuple[str, ...]
    heading_end: int | None = None


@dataclass(frozen=True)
class Table:
    """A pipe table: ``text[start:body]`` is its header row and delimiter row (whole lines,
    line breaks included); ``rows`` are the start offsets of its body rows, in order; ``end``
    is where its last line ends (its line break included). All are str indices."""

    start: int
    body: int
    end: int
    rows: tuple[int, ...]

    def header(self, text: str) -> str:
        """The header row and delimiter row as the source has them, ending with a line break:
        what a continuation piece repeats before its rows."""
        head = text[self.start : self.body]
        return head if head.endswith(("\n", "\r")) else head + "\n"

    def row_spans(self) -> list[tuple[int, int]]:
        """(start, end) of every body row, line break included."""
        bounds = list(self.rows) + [self.end]
        return list(pairwise(bounds))


@dataclass(frozen=True)
class Structure:
    """The top-level headings and pipe tables of a document, each in document order."""

    headings: tuple[Heading, ...]
    tables: tuple[Table, ...]


def read_structure(
    text: str, *, include_headings: bool = True, include_tables: bool = True
) -> Structure:
    """Top-level headings (CommonMark) and pipe tables (GFM) of ``text`` (front matter aside),
    from one parse (a text over :data:`TABLE_PARSE_WINDOW` characters that may hold a table: its
    table rule run window by window); what is not asked for comes back empty and costs nothing.

    >>> found = read_structure("# A\\n\\n| a |\\n|---|\\n| 1 |\\n")
    >>> [h.title for h in found.headings], [(t.start, t.body, t.end) for t in found.tables]
    (['A'], [(5, 17, 23)])
    """
    text = mask_front_matter(text)
    want_headings = include_headings and _may_hold_heading(text)
    want_tables = include_tables and _may_hold_table(text)
    if not want_headings and not want_tables:
        return Structure((), ())
    parser = _block_parser(want_tables)
    if parser is None:  # no markdown-it-pyrs wheel: markdown-it-py, one reading for each
        return Structure(
            tuple(_headings_markdown_it_py(text)) if want_headings else (),
            tuple(_table(text, a, b) for a, b in _table_spans_markdown_it_py(text))
            if want_tables else (),
        )
    if want_tables and len(text) > TABLE_PARSE_WINDOW:
        return _windowed_structure(text, want_headings, TABLE_PARSE_WINDOW)
    root = parser.tree(text)
    found: list[Heading] = []
    spans: list[tuple[int, int]] = []
    names = (_HEADING_NODES if want_headings else ()) + (("table",) if want_tables else ())
    for node, first, last in _top_level_blocks(root, text, names):
        if node.name == "table":
            spans.append(_table_span(text, first, last))
        else:
            found.append(_heading(text, node, first, last))
    if want_headings and want_tables and (spans or _holds_table(root)):
        # The heading paths are CommonMark's: read them again without the table rule.
        plain = _block_parser(False).tree(text)
        found = [_heading(text, node, first, last)
                 for node, first, last in _top_level_blocks(plain, text, _HEADING_NODES)]
    return Structure(
        tuple(found) if want_headings else (),
        tuple(_table(text, start, end) for start, end in spans) if want_tables else (),
    )


def _windowed_structure(text: str, want_headings: bool, window: int) -> Structure:
    """:func:`read_structure` of a long text that may hold tables, with the table rule run on
    windows of about ``window`` characters (:func:`_parse_windows`), never on the whole text.

    The headings are the table-free parse's, as :func:`read_structure` would give: it reads
    them from that parse wherever a table is found, and where none is the table rule changed
    nothing."""
    plain = _block_parser(False).tree(text)
    blocks = list(_top_level_blocks(plain, text, None))
    found = ([_heading(text, node, first, last) for node, first, last in blocks
              if node.name in _HEADING_NODES] if want_headings else [])
    starts = [first for _, first, _ in blocks]
    del plain, blocks
    spans: list[tuple[int, int]] = []
    parser = _block_parser(True)
    for lo, hi in _parse_windows(text, starts, window):
        piece = text[lo:hi]
        for _, first, last in _top_level_blocks(parser.tree(piece), piece, ("table",)):
            start, end = _table_span(piece, first, last)
            spans.append((lo + start, lo + end))
    return Structure(tuple(found), tuple(_table(text, start, end) for start, end in spans))


# Characters read with the table rule at once, at most (unless one block is longer):
# markdown-it-pyrs builds the whole tree as Python objects, a node of about 1 KB for every table
# row and cell, so a 100,000-row CSV read as one document made a 1 GB tree (issue #48).
TABLE_PARSE_WINDOW = 1 << 16
# What may begin a line that continues a block opened before a blank line (a list, indented
# code): a window never starts on such a line.
_MAY_CONTINUE = frozenset(" \t-+*>0123456789")


def _parse_windows(text: str, starts: list[int], window: int) -> list[tuple[int, int]]:
    """(lo, hi) windows tiling ``text``, each at most ``window`` characters unless one block is
    longer. A window starts only where the table-free parse starts a top-level block (``starts``,
    in order) on a line after a blank line, that line neither indented nor opening a list item
    or block quote. Past a blank line and such a line only fenced code and HTML blocks go on,
    and the table rule opens neither where the table-free parse does not (both interrupt a
    paragraph as they end a table), so there no block of either parse is open: each window
    parsed alone reads the tables the whole text's parse would."""
    cuts = [at for at in starts[1:]
            if 0 < at < len(text) and text[at] not in _MAY_CONTINUE and _after_blank_line(text, at)]
    windows: list[tuple[int, int]] = []
    lo = previous = 0
    for cut in cuts + [len(text)]:
        if cut - lo > window and previous > lo:
            windows.append((lo, previous))
            lo = previous
        previous = cut
    windows.append((lo, len(text)))
    return windows


def _after_blank_line(text: str, at: int) -> bool:
    """Whether ``at`` starts a line and the line before it is blank (spaces and tabs only,
    CommonMark's blank line)."""
    if at >= 2 and text.startswith("\r\n", at - 2):
        end = at - 2
    elif text[at - 1] in "\r\n":
        end = at - 1
    else:
        return False
    while end > 0 and text[end - 1] in " \t":
        end -= 1
    return end == 0 or text[end - 1] in "\r\n"


def headings(text: str) -> list[Heading]:
    """Top-level ATX and setext headings of ``text`` in document order (front matter aside)."""
    return list(read_structure(text, include_tables=False).headings)


def tables(text: str) -> list[Table]:
    """Top-level pipe tables of ``text`` in document order (front matter aside).

    >>> [(t.start, t.body, t.rows, t.end) for t in tables("| a |\\n|---|\\n| 1 |\\n\\nx")]
    [(0, 12, (12,), 18)]
    """
    return list(read_structure(text, include_headings=False).tables)


def sections(text: str, markdown: bool = True) -> list[Section]:
    """Cut ``text`` at every heading line (none when not ``markdown``); see
    :func:`sections_under`."""
    return sections_under(text, headings(text) if markdown and text else [])


def sections_under(text: str, found: list[Heading] | tuple[Heading, ...]) -> list[Section]:
    """Cut ``text`` at every heading of ``found`` (its headings, in order); each section carries
    the heading stack in force.

    Sections tile the text: the first starts at 0, each ends where the next starts, the last
    ends at len(text). A heading's own line opens its section, so the section's path includes it.
    """
    if not text:
        return []
    out: list[Section] = []
    stack: list[Heading] = []
    start = 0
    opened_by: Heading | None = None
    for heading in found:
        if heading.start > start:
            out.append(Section(start, heading.start, tuple(h.title for h in stack),
                               opened_by.end if opened_by else None))
            start = heading.start
        while stack and stack[-1].level >= heading.level:
            stack.pop()
        stack.append(heading)
        opened_by = heading
    out.append(Section(start, len(text), tuple(h.title for h in stack),
                       opened_by.end if opened_by else None))
    return out


# ------------------------------------------------------------------------------------ parsing


def _may_hold_heading(text: str) -> bool:
    """Whether a line could open an ATX heading or underline a setext one."""
    return bool(_HEADING_CANDIDATE.search(text.replace("\r", "\n") if "\r" in text else text))


def _may_hold_table(text: str) -> bool:
    """Whether a line could be a table's delimiter row."""
    return "|" in text and (
        any(mark in text for mark in _TIGHT_MARKS) or bool(_DELIMITER_MARK.search(text))
    )


def _block_parser(with_tables: bool):
    """markdown-it-pyrs (the Rust port of markdown-it) with block rules only, and GFM tables
    when ``with_tables``: ~35 MB/s where markdown-it-py's block pass runs ~2 MB/s. Tests hold
    it equal to markdown-it-py's CommonMark token stream; markdown-it-py is the fallback where
    the wheel is missing (None)."""
    try:
        import markdown_it_pyrs
    except ImportError:
        return None
    parser = markdown_it_pyrs.MarkdownIt("zero")
    parser.enable_many([*_BLOCK_RULES, "table"] if with_tables else [*_BLOCK_RULES])
    return parser


# CommonMark's block rules; inline parsing changes nothing about where headings are.
# A Literal: markdown-it-pyrs' enable_many takes its rules' names as one (its stub).
_BlockRule = Literal["blockquote", "code", "fence", "heading", "hr", "lheading", "list",
                     "paragraph", "reference", "html_block"]
_BLOCK_RULES: tuple[_BlockRule, ...] = get_args(_BlockRule)
_HEADING_NODES = ("heading", "lheading")


def _atx_title(line: str) -> str:
    """Title of an ATX heading line, as CommonMark (and markdown-it's heading rule) reads it:
    the text after the opening #s, without an optional closing # sequence."""
    rest = line.lstrip(" ")
    rest = rest[len(rest) - len(rest.lstrip("#")) :].rstrip("\r\n")
    end = len(rest)
    while end and rest[end - 1] in " \t":
        end -= 1
    closing = end
    while closing and rest[closing - 1] == "#":
        closing -= 1
    if closing and rest[closing - 1] in " \t":
        end = closing
    return rest[:end]


def _clean_title(raw: str) -> str:
    # CommonMark replaces NUL with U+FFFD; whitespace runs (line breaks of a setext title
    # included) collapse to one space.
    return " ".join(raw.replace("\x00", "\ufffd").split())
def _top_level_blocks(root, text: str,
                      names: tuple[str, ...] | None) -> Iterator[tuple[Any, int, int]]:
    """(node, first, last) for each top-level node of the markdown-it-pyrs tree ``root`` named
    in ``names`` (None: every one), its source map turned from UTF-8 byte offsets into ``str``
    indices."""
    encoded = text.encode("utf-8", "surrogatepass") if not text.isascii() else None
    byte_seen = char_seen = 0  # srcmap is in UTF-8 bytes: convert incrementally, in order
    for node in root.children:
        if names is not None and node.name not in names:
            continue
        first, last = node.srcmap
        if encoded is not None:
            char_seen += len(encoded[byte_seen:first].decode("utf-8", "surrogatepass"))
            byte_seen = first
            first, last = char_seen, char_seen + len(
                encoded[node.srcmap[0] : last].decode("utf-8", "surrogatepass")
            )
        yield node, first, last


def _holds_table(root) -> bool:
    """Whether any node of the tree, at any depth, is a table."""
    pending = list(root.children)
    while pending:
        node = pending.pop()
        if node.name == "table":
            return True
        pending.extend(node.children)
    return False


def _heading(text: str, node, first: int, last: int) -> Heading:
    """The heading a top-level ``heading`` (ATX) or ``lheading`` (setext) node stands for."""
    line_start = text.rfind("\n", 0, first) + 1
    line_start = text.rfind("\r", line_start, first) + 1 or line_start  # lone-CR lines
    if node.name == "heading":
        line_end = _LINE_BREAK.search(text, first)
        raw = _atx_title(text[line_start : line_end.start() if line_end else len(text)])
    else:
        raw = " ".join(_LINE_BREAK.split(text[line_start:last])[:-1])
    return Heading(line_start, int(node.meta["level"]), _clean_title(raw), last)


def _headings_markdown_it_py(text: str) -> list[Heading]:
    tokens = MarkdownIt("commonmark").disable("inline").parse(text)
    line_starts: list[int] | None = None
    found: list[Heading] = []
    for index, token in enumerate(tokens):
        if token.type != "heading_open" or token.level != 0 or token.map is None:
            continue
        if line_starts is None:
            # markdown-it counts lines after turning \r\n and \r into \n; count them the same.
            line_starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
        title = _clean_title(tokens[index + 1].content)
        end = line_starts[token.map[1]] if token.map[1] < len(line_starts) else len(text)
        found.append(Heading(line_starts[token.map[0]], int(token.tag[1]), title, end))
    return found
def _table(text: str, start: int, end: int) -> Table:
    """The table on the whole lines of text[start:end]: header, delimiter, then body rows."""
    bounds = [start] + [m.end() for m in _LINE_BREAK.finditer(text, start, end)]
    if bounds[-1] != end:  # the last row has no line break (end of text)
        bounds.append(end)
    body = bounds[2] if len(bounds) > 2 else end
    return Table(start, body, end, tuple(bounds[2:-1]))


def _table_span(text: str, first: int, last: int) -> tuple[int, int]:
    """(start of the first line, end of the last line with its line break) of the top-level
    table node whose source map is (first, last)."""
    line_start = text.rfind("\n", 0, first) + 1
    line_start = text.rfind("\r", line_start, first) + 1 or line_start  # lone-CR lines
    # srcmap ends at the last row's last character: the table ends with its line break.
    line_end = _LINE_BREAK.search(text, max(first, last - 1))
    end = line_end.end() if line_end else len(text)
    return line_start, _reference_end(text, line_start, end)


# A row line that may open another block (a list item, a quote, a heading, a fence, HTML): there
# markdown-it-pyrs and markdown-it-py can disagree on whether the table goes on (pyrs keeps
# "2. second" as a row; markdown-it-py ends the table, as a list item may start there).
_MAY_OPEN_BLOCK = re.compile(r"^ {0,3}(?:\d{1,9}[.)]|[-+*>#<_=]|```|~~~)", re.MULTILINE)


def _reference_end(text: str, start: int, end: int) -> int:
    """Where markdown-it-py (the reference reading) ends the table markdown-it-pyrs found in
    text[start:end]: only its own lines are read again, and only when a row may open a block."""
    breaks = _LINE_BREAK.finditer(text, start, end)
    body = next(breaks, None) and next(breaks, None)  # after the header and delimiter rows
    if body is None or not _MAY_OPEN_BLOCK.search(text, body.end(), end):
        return end
    spans = _table_spans_markdown_it_py(text[start:end])
    if spans and spans[0][0] == 0:
        return min(end, start + spans[0][1])
    return end


def _table_spans_markdown_it_py(text: str) -> list[tuple[int, int]]:
    tokens = MarkdownIt("commonmark").enable("table").disable("inline").parse(text)
    maps = [t.map for t in tokens if t.type == "table_open" and t.level == 0 and t.map]
    if not maps:
        return []
    # markdown-it counts lines after turning \r\n and \r into \n; count them the same.
    line_starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)] + [len(text)]
    last_line = len(line_starts) - 1
    return [(line_starts[first], line_starts[min(last, last_line)]) for first, last in maps]
