"""Markdown structure for the splitter: where each section starts and its heading path.

Headings come from a CommonMark parser (markdown-it-py), not from a ``^#`` line scan: a ``#``
line inside a fenced or indented code block is code (LangChain #10262), setext headings
(``Title`` over ``===``) are headings, and ``#hashtag`` is not. Only top-level headings form the
path; a heading quoted inside a block quote or a list item is content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt

# A line that could open an ATX heading or underline a setext one. Documents with none skip
# the parse entirely.
_HEADING_CANDIDATE = re.compile(r"^ {0,3}(?:#{1,6}(?:[ \t]|$)|=+[ \t]*$|-+[ \t]*$)", re.M)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Heading:
    """A heading whose line starts at ``start`` (a str index of the document)."""

    start: int
    level: int
    title: str


@dataclass(frozen=True)
class Section:
    """``text[start:end]`` belongs under ``headings`` (outermost first)."""

    start: int
    end: int
    headings: tuple[str, ...]


def _block_parser() -> MarkdownIt:
    # Inline parsing (emphasis, links) costs more than the block pass and changes nothing about
    # where headings are; the raw inline source is kept as the title.
    return MarkdownIt("commonmark").disable("inline")


def headings(text: str) -> list[Heading]:
    """Top-level ATX and setext headings of ``text`` in document order."""
    if not _HEADING_CANDIDATE.search(text.replace("\r", "\n") if "\r" in text else text):
        return []
    tokens = _block_parser().parse(text)
    line_starts: list[int] | None = None
    found: list[Heading] = []
    for index, token in enumerate(tokens):
        if token.type != "heading_open" or token.level != 0 or token.map is None:
            continue
        if line_starts is None:
            # markdown-it counts lines after turning \r\n and \r into \n; count them the same.
            line_starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
        title = " ".join(tokens[index + 1].content.split())
        found.append(Heading(line_starts[token.map[0]], int(token.tag[1]), title))
    return found


def sections(text: str, markdown: bool = True) -> list[Section]:
    """Cut ``text`` at every heading line; each section carries the heading stack in force.

    Sections tile the text: the first starts at 0, each ends where the next starts, the last
    ends at len(text). A heading's own line opens its section, so the section's path includes it.
    """
    if not text:
        return []
    found = headings(text) if markdown else []
    out: list[Section] = []
    stack: list[Heading] = []
    start = 0
    for heading in found:
        if heading.start > start:
            out.append(Section(start, heading.start, tuple(h.title for h in stack)))
            start = heading.start
        while stack and stack[-1].level >= heading.level:
            stack.pop()
        stack.append(heading)
    out.append(Section(start, len(text), tuple(h.title for h in stack)))
    return out
