"""Markdown written by the readers of structured formats (Office files, spreadsheets, e-books,
mail, notebooks, reStructuredText): ATX headings, GFM pipe tables, list items, fenced code and
paragraphs escaped so that nothing in a cell or a paragraph reads as structure it is not.

The splitter reads these back (``chunkline.splitting.structure``: CommonMark headings, GFM
tables through markdown-it), so each helper writes exactly what those rules parse: a heading is
one line, a table cell never holds a line break or an unescaped ``|``, and a paragraph that
begins like a heading, a fence, a setext underline or an HTML block is escaped with a backslash
(CommonMark 0.31, section 2.4: any ASCII punctuation may be backslash-escaped).
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

# CommonMark block starts that would change the structure around a paragraph line: an ATX
# heading (4.2), a setext underline (4.3: it would turn the line above into a heading), a code
# fence (4.5: it would swallow every heading after it), an HTML block (4.6: types 1-5 run to
# their end marker, across blank lines) and a thematic break (4.1).
_BLOCK_START = re.compile(r"^( {0,3})(#{1,6}(?=[ \t]|$)|=+[ \t]*$|-+[ \t]*$|`{3,}|~{3,}|<|\*{3,}[ \t]*$|_{3,}[ \t]*$)")
_CLOSING_HASHES = re.compile(r"[ \t]#+[ \t]*$")
MAX_LEVEL = 6  # CommonMark ATX headings: h1 to h6


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (line breaks and Word's vertical tab included) as
    one space, and no leading or trailing space."""
    return " ".join(text.split())


def heading(level: int, title: str) -> str:
    """An ATX heading line, the level clamped to 1..6 and the title on one line. A trailing run
    of ``#`` after a space would be read as the closing sequence and dropped (CommonMark 4.2),
    so its first ``#`` is escaped.

    >>> heading(2, "Results\\n 2024"), heading(9, "Deep"), heading(1, "Notes #")
    ('## Results 2024', '###### Deep', '# Notes \\\\#')
    """
    title = one_line(title)
    closing = _CLOSING_HASHES.search(title)
    if closing:
        cut = title.index("#", closing.start())
        title = title[:cut] + "\\" + title[cut:]
    return "#" * min(max(level, 1), MAX_LEVEL) + " " + title


def cell(value: object) -> str:
    """One table cell: on one line, ``|`` escaped (GFM tables, example 200). A backslash is
    left alone: markdown-it (and GFM) take any pipe after a backslash as escaped, so doubling
    it would change the cell's text, not its bounds."""
    text = one_line("" if value is None else str(value))
    return text.replace("|", "\\|")


def pipe_table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """A GFM pipe table: the header row, the delimiter row, then one line per row, every row
    padded with empty cells to the widest (a body row wider than the header would lose its
    extra cells: GFM ignores them). No trailing line break.

    >>> print(pipe_table(["a", "b|c"], [[1], [2, 3, 4]]))
    | a | b\\|c |  |
    | --- | --- | --- |
    | 1 |  |  |
    | 2 | 3 | 4 |
    """
    body = [[cell(value) for value in row] for row in rows]
    head = [cell(value) for value in header]
    width = max([len(head), 1, *(len(row) for row in body)])
    lines = [_row(head, width), "|" + " --- |" * width]
    lines.extend(_row(row, width) for row in body)
    return "\n".join(lines)


def _row(cells: list[str], width: int) -> str:
    padded = cells + [""] * (width - len(cells))
    return "| " + " | ".join(padded) + " |"


def paragraph(text: str) -> str:
    """Prose as Markdown paragraph lines: each line stripped of trailing space, blank lines
    dropped (a paragraph is one block), and a line that would start a block escaped.

    >>> paragraph("# not a heading\\n---\\nplain")
    '\\\\# not a heading\\n\\\\---\\nplain'
    """
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(escape_block(line) for line in lines if line.strip())


def escape_block(line: str) -> str:
    """``line`` with a backslash before the character that would make it a heading, a setext
    underline, a fence, an HTML block or a thematic break."""
    match = _BLOCK_START.match(line)
    if not match:
        return line
    indent = match.group(1)
    return indent + "\\" + line[len(indent):]


def list_item(text: str, level: int = 0, marker: str = "-") -> str:
    """A list item at nesting ``level`` (0 is the outermost), its text on one line."""
    return "  " * max(level, 0) + marker + " " + one_line(text)


def fenced(code: str, info: str = "") -> str:
    """``code`` in a backtick fence longer than any backtick run inside it (CommonMark 4.5), so
    no line of it reads as a heading."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{one_line(info)}\n{code.rstrip()}\n{fence}"


def blocks(parts: Iterable[str]) -> str:
    """Non-empty blocks joined by a blank line."""
    return "\n\n".join(part for part in parts if part.strip())
