"""Markdown structure for the splitter: where each section starts and its heading path.

Headings come from a CommonMark parser (markdown-it-py), not from a ``^#`` line scan: a ``#``
line inside a fenced or indented code block is code (LangChain #10262), setext headings
(``Title`` over ``===``) are headings, and ``#hashtag`` is not. Only top-level headings form the
path; a heading quoted inside a block quote or a list item is content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

from markdown_it import MarkdownIt

# A line that could open an ATX heading or underline a setext one. Documents with none skip
# the parse entirely.
_HEADING_CANDIDATE = re.compile(r"^ {0,3}(?:#{1,6}(?:[ \t]|$)|=+[ \t]*$|-+[ \t]*$)", re.M)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# YAML front matter (Jekyll, Hugo, MkDocs): not CommonMark, which would read its closing "---"
# as a setext underline and make the metadata a heading.
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(?:.*?\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)


def mask_front_matter(text: str) -> str:
    """``text`` with a leading YAML front matter block blanked out (line breaks kept, so every
    offset and line number is unchanged); other text is returned as is."""
    found = _FRONT_MATTER.match(text)
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


def _block_parser():
    """markdown-it-pyrs (the Rust port of markdown-it) with block rules only: ~35 MB/s where
    markdown-it-py's block pass runs ~2 MB/s. Tests hold it equal to markdown-it-py's CommonMark
    token stream; markdown-it-py is the fallback where the wheel is missing."""
    try:
        import markdown_it_pyrs
    except ImportError:
        return None
    parser = markdown_it_pyrs.MarkdownIt("zero")
    parser.enable_many(list(_BLOCK_RULES))
    return parser


# CommonMark's block rules; inline parsing changes nothing about where headings are.
_BLOCK_RULES = ("blockquote", "code", "fence", "heading", "hr", "lheading", "list",
                "paragraph", "reference", "html_block")


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


def block_nodes(parser, text: str, names: tuple[str, ...]) -> Iterator[tuple[Any, int, int]]:
    """(node, first, last) for each top-level markdown-it-pyrs node named in ``names``, its
    source map turned from UTF-8 byte offsets into ``str`` indices."""
    encoded = text.encode("utf-8", "surrogatepass") if not text.isascii() else None
    byte_seen = char_seen = 0  # srcmap is in UTF-8 bytes: convert incrementally, in order
    for node in parser.tree(text).children:
        if node.name not in names:
            continue
        first, last = node.srcmap
        if encoded is not None:
            char_seen += len(encoded[byte_seen:first].decode("utf-8", "surrogatepass"))
            byte_seen = first
            first, last = char_seen, char_seen + len(
                encoded[node.srcmap[0] : last].decode("utf-8", "surrogatepass")
            )
        yield node, first, last


def headings(text: str) -> list[Heading]:
    """Top-level ATX and setext headings of ``text`` in document order (front matter aside)."""
    text = mask_front_matter(text)
    if not _HEADING_CANDIDATE.search(text.replace("\r", "\n") if "\r" in text else text):
        return []
    parser = _block_parser()
    if parser is None:
        return _headings_markdown_it_py(text)
    found: list[Heading] = []
    for node, first, last in block_nodes(parser, text, ("heading", "lheading")):
        line_start = text.rfind("\n", 0, first) + 1
        line_start = text.rfind("\r", line_start, first) + 1 or line_start  # lone-CR lines
        if node.name == "heading":
            line_end = _LINE_BREAK.search(text, first)
            raw = _atx_title(text[line_start : line_end.start() if line_end else len(text)])
        else:
            raw = " ".join(_LINE_BREAK.split(text[line_start:last])[:-1])
        found.append(Heading(line_start, int(node.meta["level"]), _clean_title(raw), last))
    return found


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
