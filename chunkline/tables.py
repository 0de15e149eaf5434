"""Markdown pipe tables (GFM) for the splitter: where each table, its header and its rows are.

Tables come from a GFM reading of the document (markdown-it's ``table`` rule, as for headings
in ``markdown.py``), not from a ``|`` line scan: pipes inside a fenced or indented code block
are code, and a row ends the table where GFM says it does. Only top-level tables are reported:
a table inside a list item or a block quote has its rows indented or quoted, so repeating its
header row alone would not read as a table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

from markdown_it import MarkdownIt

from chunkline.markdown import block_nodes, mask_front_matter

# A delimiter row has a pipe beside a dash or colon, maybe spaced (markdown-it-pyrs reads no
# table whose delimiter row has no pipe). Documents with none skip the parse; a false alarm
# costs a parse. The plain substrings are found at memchr speed, the regex only if they fail.
_TIGHT_MARKS = ("|-", "-|", "|:", ":|")
_DELIMITER_MARK = re.compile(r"[-:][ \t]*\||\|[ \t]*[-:]")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


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


def _table_parser():
    """markdown-it-pyrs with CommonMark's block rules and GFM tables (None without the wheel)."""
    try:
        import markdown_it_pyrs
    except ImportError:
        return None
    parser = markdown_it_pyrs.MarkdownIt("zero")
    parser.enable_many(["blockquote", "code", "fence", "heading", "hr", "lheading", "list",
                        "paragraph", "reference", "html_block", "table"])
    return parser


def tables(text: str) -> list[Table]:
    """Top-level pipe tables of ``text`` in document order (front matter aside).

    >>> [(t.start, t.body, t.rows, t.end) for t in tables("| a |\\n|---|\\n| 1 |\\n\\nx")]
    [(0, 12, (12,), 18)]
    """
    text = mask_front_matter(text)
    if "|" not in text or not (
        any(mark in text for mark in _TIGHT_MARKS) or _DELIMITER_MARK.search(text)
    ):
        return []
    return [_table(text, start, end) for start, end in _table_spans(text)]


def _table(text: str, start: int, end: int) -> Table:
    """The table on the whole lines of text[start:end]: header, delimiter, then body rows."""
    bounds = [start] + [m.end() for m in _LINE_BREAK.finditer(text, start, end)]
    if bounds[-1] != end:  # the last row has no line break (end of text)
        bounds.append(end)
    body = bounds[2] if len(bounds) > 2 else end
    return Table(start, body, end, tuple(bounds[2:-1]))


def _table_spans(text: str) -> list[tuple[int, int]]:
    """(start of the first line, end of the last line with its line break) of every top-level
    table."""
    parser = _table_parser()
    if parser is None:
        return _table_spans_markdown_it_py(text)
    spans: list[tuple[int, int]] = []
    for _, first, last in block_nodes(parser, text, ("table",)):
        line_start = text.rfind("\n", 0, first) + 1
        line_start = text.rfind("\r", line_start, first) + 1 or line_start  # lone-CR lines
        # srcmap ends at the last row's last character: the table ends with its line break.
        line_end = _LINE_BREAK.search(text, max(first, last - 1))
        end = line_end.end() if line_end else len(text)
        spans.append((line_start, _reference_end(text, line_start, end)))
    return spans


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
