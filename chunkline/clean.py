"""Per-document cleaning: pure functions from a text to the text that chunk offsets refer to.

``clean_text`` normalises line endings, drops control characters (tab and newline stay; U+0000
always, even with ``drop_control`` off: neither PostgreSQL ``text`` nor ``jsonb`` can hold it,
so no chunk, heading or search text may carry one), composes Unicode to NFC, and drops page-number lines and lines matching configured patterns,
closing the gap a dropped line leaves. It is idempotent: ``clean_text(clean_text(x)) ==
clean_text(x)`` (a property test holds it), so cleaning twice, or a retried bundle, never
shifts offsets.

Lines inside fenced code blocks (and the fence lines themselves) are never dropped: a ``42`` on
its own line there is program output, not a page number, and a dropped fence line would turn
the rest of the document into code.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Sequence

from chunkline.options import check_fields, help_text

# Every line ending Unicode knows (Python's str.splitlines set) becomes "\n". \v and \f count:
# a form feed is a page break in text exports, and deleting it would glue two lines together.
_LINE_BREAKS = re.compile(r"\r\n|[\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
# ANSI escape sequences (CSI ... final byte, and two-byte ESC x): dropping only the ESC would
# leave "[31m" in the text.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# C0 and C1 controls and DEL, except tab and newline (Unicode category Cc).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
NUL = "\x00"
# A whole line that is a page number by its form: "Page 3", "Page 3 of 10", "page 3/10",
# "3 of 10", "- 3 -".
_PAGE_LABEL = re.compile(
    r"page\s*\d{1,5}(?:\s*(?:of|/)\s*\d{1,5})?"
    r"|\d{1,5}\s*of\s*\d{1,5}"
    r"|[-\u2013\u2014]\s*\d{1,5}\s*[-\u2013\u2014]",
    re.IGNORECASE,
)
# A bare number line (1-3 digits: years stay) is a page number only as one of a rising series
# in the document (12, 13, 15...): a lone "3" in a short text is more likely content.
_BARE_NUMBER = re.compile(r"\d{1,3}")

# CommonMark fences: up to 3 spaces, then 3+ backticks (info string without backticks) or 3+
# tildes.
_FENCE = re.compile(r" {0,3}(`{3,}(?!.*`)|~{3,}).*")


@dataclass(frozen=True)
class CleanOptions:
    """What :func:`clean_text` does to each document (line endings are always normalised)."""

    nfc: bool = field(default=True, metadata=help_text(
        "Unicode NFC, so equal text has equal code points (and hashes equal)."))
    drop_control: bool = field(default=True, metadata=help_text(
        "Control characters and ANSI escapes (tab and newline stay). U+0000 is dropped even "
        "when false: no store can hold it."))
    drop_page_numbers: bool = field(default=True, metadata=help_text(
        '"Page 3", "Page 3 of 10", "3 of 10", "- 3 -", and bare numbers when the document has '
        "a rising series of them (12, 13, 14: an extracted PDF)."))
    patterns: tuple[str, ...] = field(default=(), metadata=help_text(
        "Regexes: a line whose text (surrounding whitespace stripped) matches one in full is "
        "dropped, e.g. '^CONFIDENTIAL$' or '(?i)printed on .*'."))

    def __post_init__(self) -> None:
        check_fields(self)
        for pattern in self.patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"CleanOptions.patterns: {pattern!r} is not a valid regex ({exc})") from exc


def clean_text(text: str, options: CleanOptions = CleanOptions()) -> str:
    """The cleaned text: ``\\r\\n``, ``\\r`` and the other line separators as ``\\n``; controls
    dropped (tab, newline kept); NFC; page-number and pattern lines dropped. Idempotent.

    >>> clean_text("Intro\\r\\n\\r\\nPage 3 of 10\\r\\n\\r\\nCafe\\u0301 \\x1b[1mbold\\x1b[0m\\r\\n")
    'Intro\\n\\nCafé bold\\n'
    """
    return clean_marked(text, (), options)[0]


def clean_marked(
    text: str, marks: Sequence[int], options: CleanOptions = CleanOptions()
) -> tuple[str, tuple[int, ...]]:
    """:func:`clean_text`, and where each mark lands in the cleaned text. A mark is an offset at
    a line start (a PDF's page starts); decisions that look at the whole document (a rising
    series of page numbers, fences) still do. Raises ValueError for a mark inside a line."""
    for mark in marks:
        if mark and text[mark - 1 : mark] != "\n":
            raise ValueError(f"mark {mark} is not at a line start")
    # Character-level steps act within a line, so a segment at a time gives the same text and
    # tells where each segment now starts.
    bounds = [*marks, len(text)]
    pieces = [_clean_characters(text[lo:hi], options) for lo, hi in pairwise([0, *bounds])]
    text = "".join(pieces)
    starts = []
    offset = len(pieces[0])
    for piece in pieces[1:]:
        starts.append(offset)
        offset += len(piece)
    patterns = [re.compile(p) for p in options.patterns]  # re's own cache makes this cheap
    if not (options.drop_page_numbers or patterns):
        return text, tuple(starts)
    lines = text.split("\n")
    code = fenced_code_lines(lines)
    stripped = [line.strip() for line in lines]
    drop = [
        not in_code and bool(line) and (
            (options.drop_page_numbers and _PAGE_LABEL.fullmatch(line) is not None)
            or any(p.fullmatch(line) for p in patterns)
        )
        for line, in_code in zip(stripped, code, strict=True)
    ]
    if options.drop_page_numbers:
        for index in _page_number_series(stripped, code):
            drop[index] = True
    if not any(drop):
        return text, tuple(starts)
    return without_lines_marked(lines, drop, line_indexes(text, starts))


def _clean_characters(text: str, options: CleanOptions) -> str:
    text = _LINE_BREAKS.sub("\n", text)
    if options.drop_control:
        # Before NFC: a control between a letter and its combining mark would otherwise block
        # the composition, and dropping it afterwards would leave an uncomposed pair.
        text = _CONTROL.sub("", _ANSI.sub("", text))
    elif NUL in text:
        text = text.replace(NUL, "")
    if options.nfc:
        text = unicodedata.normalize("NFC", text)
    return text


def without_nul(text: str, marks: Sequence[int] = ()) -> tuple[str, tuple[int, ...]]:
    """``text`` without U+0000, and where each mark (an offset into ``text``) lands in it. The
    readers apply it to every document, so a NUL reaches no chunk even with cleaning off.

    >>> without_nul("a\\x00b\\n\\x00\\x00c", [0, 3, 4, 6])
    ('ab\\nc', (0, 2, 3, 3))
    """
    if NUL not in text:
        return text, tuple(marks)
    nuls = [index for index, char in enumerate(text) if char == NUL]
    return text.replace(NUL, ""), tuple(mark - bisect_left(nuls, mark) for mark in marks)


def line_indexes(text: str, offsets: Sequence[int]) -> list[int]:
    """The index (in ``text.split("\\n")``) of the line each offset falls in."""
    found, line, position = [], 0, 0
    for offset in offsets:
        line += text.count("\n", position, offset)
        position = offset
        found.append(line)
    return found


def _page_number_series(stripped: Sequence[str], code: Sequence[bool]) -> list[int]:
    """Indexes of the bare-number lines outside code, if there are two or more and their
    values rise strictly in reading order (the page numbers of an extracted PDF); else none."""
    found = [
        (index, int(line)) for index, (line, in_code) in enumerate(zip(stripped, code, strict=True))
        if not in_code and _BARE_NUMBER.fullmatch(line)
    ]
    rising = len(found) >= 2 and all(a[1] < b[1] for a, b in pairwise(found))
    return [index for index, _ in found] if rising else []


def fenced_code_lines(lines: Sequence[str]) -> list[bool]:
    """For each line, whether it is a fence line or inside a fenced code block (CommonMark: a
    fence closes with the same character, at least as long, nothing but spaces after; an
    unclosed fence runs to the end). Fences inside list items or block quotes are not
    recognised: cleaning also reads plain text, where a deeper structure is not known."""
    flags: list[bool] = []
    fence = ""
    for line in lines:
        if fence:
            flags.append(True)
            stripped = line.strip()
            if (
                len(line) - len(line.lstrip(" ")) <= 3
                and stripped.startswith(fence)
                and set(stripped) == {fence[0]}
            ):
                fence = ""
            continue
        match = _FENCE.fullmatch(line)
        if match:
            fence = match.group(1)
        flags.append(bool(match))
    return flags


def without_lines(lines: Sequence[str], drop: Sequence[bool]) -> str:
    """``"\\n".join(lines)`` without the dropped lines, closing each gap they leave: a run of
    dropped and blank lines becomes one blank line between two kept lines if it held a blank
    line, nothing if it did not, and nothing at the start or end of the text (a final newline
    stays). Lines that are not in a gap are kept exactly.

    >>> without_lines(["a", "", "Page 2", "", "b", "12", "c", ""], [0, 0, 1, 0, 0, 1, 0, 0])
    'a\\n\\nb\\nc\\n'
    """
    return without_lines_marked(lines, drop, ())[0]


def without_lines_marked(
    lines: Sequence[str], drop: Sequence[bool], mark_lines: Sequence[int]
) -> tuple[str, tuple[int, ...]]:
    """:func:`without_lines`, and the offset in its text where each marked line (by index, in
    order) now starts; a mark on a line that went starts where the text after the gap does.

    >>> without_lines_marked(["a", "7", "b", "", "8", "c"], [0, 1, 0, 0, 1, 0], [1, 3])
    ('a\\nb\\n\\nc', (2, 4))
    """
    trailing_newline = len(lines) > 1 and lines[-1] == ""
    if trailing_newline:
        lines, drop = lines[:-1], drop[:-1]
    count = len(lines)
    # A gap is a maximal run of blank or dropped lines holding a dropped one; every other line
    # is kept exactly. The work follows the dropped lines (a few footer lines in a long
    # document), not the length of the text.
    gaps: list[tuple[int, int]] = []
    for index in (i for i, gone in enumerate(drop) if gone):
        if gaps and index < gaps[-1][1]:
            continue
        start = index
        while start > 0 and (drop[start - 1] or not lines[start - 1].strip()):
            start -= 1
        end = index + 1
        while end < count and (drop[end] or not lines[end].strip()):
            end += 1
        gaps.append((start, end))
    out: list[str] = []
    # (first input line, first output line) of each kept stretch and gap, for the marks.
    landings: list[tuple[int, int, bool]] = []
    kept_from = 0
    for start, end in gaps:
        landings.append((kept_from, len(out), False))
        out.extend(lines[kept_from:start])
        landings.append((start, len(out), True))
        if out and end < count and any(not lines[i].strip() and not drop[i] for i in range(start, end)):
            out.append("")
        kept_from = end
    landings.append((kept_from, len(out), False))
    out.extend(lines[kept_from:count])
    text = "\n".join(out)
    if trailing_newline and text:
        text += "\n"
    if not mark_lines:
        return text, ()
    line_starts = [0]
    for kept in out:
        line_starts.append(line_starts[-1] + len(kept) + 1)
    firsts = [first for first, _, _ in landings]
    marks = []
    for line in mark_lines:
        if line >= count:
            marks.append(len(text))
            continue
        first, landed, in_gap = landings[bisect_right(firsts, line) - 1]
        at = landed if in_gap else landed + (line - first)
        marks.append(min(line_starts[at], len(text)))
    return text, tuple(marks)
