"""chunkline.clean (per-document cleaning) and the CleanDocuments stage."""

from __future__ import annotations

import unicodedata

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chunkline.clean import (
    CleanOptions,
    clean_marked,
    clean_text,
    fenced_code_lines,
    without_lines,
    without_nul,
)
from chunkline.records import Document, Rejected
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.clean import EMPTY_AFTER_CLEANING, CleanDocuments

OFF = CleanOptions(nfc=False, drop_control=False, drop_page_numbers=False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a\r\nb\rc\n", "a\nb\nc\n"),
        ("a\u2028b\u2029c\x85d", "a\nb\nc\nd"),
        ("page one\fpage two\vend", "page one\npage two\nend"),  # a page break is a line break
        ("keep\ttab\x00\x07 and\x7f DEL\x9b", "keep\ttab and DEL"),
        ("\x1b[1;31mred\x1b[0m plain", "red plain"),  # the whole ANSI sequence, not just ESC
        ("Cafe\u0301", "Café"),
        ("e\x01\u0301", "é"),  # a control between letter and mark: dropped, then composed
        ("\ufb01 ligature", "\ufb01 ligature"),  # NFC, not NFKC: compatibility forms stay
    ],
)
def test_characters(text: str, expected: str) -> None:
    assert clean_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Intro.\n\nPage 3 of 10\n\nMore.\n", "Intro.\n\nMore.\n"),
        ("Intro.\npage 4\nMore.", "Intro.\nMore."),
        ("Intro.\n  - 7 -  \nMore.", "Intro.\nMore."),
        ("Intro.\n8 of 12\nMore.", "Intro.\nMore."),
        ("Intro.\nPAGE 9/12\nMore.", "Intro.\nMore."),
        ("Page 1\n\nText starts here.", "Text starts here."),
        ("Text ends here.\n\nPage 2 of 2\n", "Text ends here.\n"),
        # Bare numbers only as a rising series (an extracted PDF's page numbers).
        ("First page text.\n12\nSecond page text.\n13\nThird.", "First page text.\nSecond page text.\nThird."),
        ("Answer:\n3\n", "Answer:\n3\n"),  # a lone number is content
        ("Count down\n3\n2\n1\n", "Count down\n3\n2\n1\n"),  # not rising: content
        ("Founded in\n2019\nand then\n2021\n", "Founded in\n2019\nand then\n2021\n"),  # years stay
        ("Page 3 is where the story starts.", "Page 3 is where the story starts."),  # not the whole line
    ],
)
def test_page_numbers(text: str, expected: str) -> None:
    assert clean_text(text) == expected


def test_code_fences_are_never_touched() -> None:
    text = "Output:\n\n```text\n1\n2\nPage 3 of 9\n```\n\n~~~~\n4\n~~~\nstill code\n5\n~~~~\nAfter.\n"
    assert clean_text(text) == text
    assert fenced_code_lines(text.split("\n")) == [
        False, False, True, True, True, True, True, False, True, True, True, True, True, True, False, False,
    ]


def test_patterns() -> None:
    options = CleanOptions(patterns=(r"Share this (page|article)", r"(?i)printed on .*"))
    text = "Title\n\nShare this page\n\nBody text.\nPRINTED ON 2024-05-01\n  Share this article  \nEnd."
    assert clean_text(text, options) == "Title\n\nBody text.\nEnd."
    # Only whole lines: a sentence that contains the phrase stays.
    assert clean_text("Please share this page with a friend.", options) == "Please share this page with a friend."


def test_invalid_pattern_is_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="not a valid regex"):
        CleanOptions(patterns=("([unclosed",))
    with pytest.raises(ValueError):
        CleanOptions(patterns=["list, not tuple"])


@pytest.mark.parametrize(
    ("lines", "drop", "expected"),
    [
        (["a", "", "X", "", "b"], [0, 0, 1, 0, 0], "a\n\nb"),  # blank lines around: one stays
        (["a", "X", "b"], [0, 1, 0], "a\nb"),  # no blank line around: none appears
        (["a", "", "X", "b"], [0, 0, 1, 0], "a\n\nb"),
        (["X", "", "a"], [1, 0, 0], "a"),  # at the start: gone entirely
        (["a", "", "X", ""], [0, 0, 1, 0], "a\n"),  # at the end: the final newline stays
        (["a", "", "", "b"], [0, 0, 0, 0], "a\n\n\nb"),  # no drop: blank runs are kept as they are
        (["X", ""], [1, 0], ""),
    ],
)
def test_without_lines(lines: list[str], drop: list[int], expected: str) -> None:
    assert without_lines(lines, [bool(d) for d in drop]) == expected


pieces = st.sampled_from([
    "Page 3 of 10", "page 7", "- 4 -", "12", "13", "2024", "```", "```py", "~~~", "    ```",
    "\r\n", "\r", "\n", "\n\n", "\x0c", "\x0b", "\u2028", "\x85", "\x1b[31m", "\x1b", "\x00", "\x7f",
    "e", "\u0301", "\t", " ", "text", "Share this page", "# Heading", "Café", "\ufeff",
])
# Dense in the characters whose order matters (controls between a letter and its combining
# mark, CR before LF, ESC before "["), so the interactions are drawn, not hoped for.
hazards = st.text(alphabet="e\u0301\u0327\x00\x01\x1b[31m\r\n\x85\u2028\t Pag1-`~", max_size=30)
texts = st.lists(pieces | st.text(max_size=6), max_size=40).map("".join)
options = st.builds(
    CleanOptions, nfc=st.booleans(), drop_control=st.booleans(), drop_page_numbers=st.booleans(),
    patterns=st.sampled_from([(), (r"Share this page",), (r"\d+",)]),
)


@given(texts, options)
def test_clean_is_idempotent(text: str, opts: CleanOptions) -> None:
    once = clean_text(text, opts)
    assert clean_text(once, opts) == once


@given(hazards)
@example("e\x00\u0301")  # NFC before dropping the control would leave "e\u0301" uncomposed
def test_clean_is_idempotent_where_order_matters(text: str) -> None:
    once = clean_text(text)
    assert clean_text(once) == once


@given(texts)
def test_cleaned_text_invariants(text: str) -> None:
    cleaned = clean_text(text)
    assert "\r" not in cleaned
    assert all(ch in "\t\n" or unicodedata.category(ch) != "Cc" for ch in cleaned)
    assert unicodedata.is_normalized("NFC", cleaned)
    # Cleaning removes lines; it never edits the lines it keeps.
    normalized = clean_text(text, CleanOptions(drop_page_numbers=False))
    kept = iter(normalized.split("\n"))
    assert all(any(line == candidate for candidate in kept) for line in cleaned.split("\n") if line.strip())


@given(texts)
def test_everything_off_only_normalises_line_endings_and_drops_nul(text: str) -> None:
    expected = text.replace("\r\n", "\n").replace("\x00", "")
    for sep in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029":
        expected = expected.replace(sep, "\n")
    assert clean_text(text, OFF) == expected


def test_nul_is_dropped_even_with_controls_kept() -> None:
    # No PostgreSQL text or jsonb value holds U+0000: no chunk, heading or search text may.
    assert clean_text("# Ti\x00tle\n\nBo\x00dy\x07\n", CleanOptions(drop_control=False)) == "# Title\n\nBody\x07\n"
    assert clean_marked("a\x00\nb\n", (3,), CleanOptions(drop_control=False)) == ("a\nb\n", (2,))


@given(st.text(alphabet="ab\n\x00", max_size=30), st.data())
def test_without_nul_moves_marks_with_the_text(text: str, data) -> None:
    marks = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=4)))
    cleaned, moved = without_nul(text, marks)
    assert cleaned == text.replace("\x00", "")
    assert moved == tuple(len(text[:mark].replace("\x00", "")) for mark in marks)


def test_clean_documents_stage() -> None:
    docs = [
        Document("a.txt", "/c/a.txt", "Line one\r\nLine two\r\n"),
        Document("b.md", "/c/b.md", "# Same\n\nUnchanged.\n", (("lang", '"en"'),)),
        Document("c.txt", "/c/c.txt", "Page 1 of 1\r\n\x00\r\n"),
    ]
    with fnapi_pipeline() as p:
        out = p | beam.Create(docs) | CleanDocuments(CleanOptions())
        assert_that(out.documents, equal_to([
            Document("a.txt", "/c/a.txt", "Line one\nLine two\n"),
            Document("b.md", "/c/b.md", "# Same\n\nUnchanged.\n", (("lang", '"en"'),)),
        ]), label="documents")
        assert_that(out.rejected, equal_to([Rejected("/c/c.txt", "c.txt", EMPTY_AFTER_CLEANING)]),
                    label="rejected")


# --- Page starts through cleaning (PDF) --------------------------------------------------------


NOISE_LINES = st.sampled_from(["", "  ", "Page 3 of 9", "- 4 -", "12", "13", "\x1b[1m", "\r", "Cafe\u0301"])


@st.composite
def paged_texts(draw):
    """Pages of lines: each page has marker lines no cleaning drops, among noise that it may."""
    pages = []
    for page in range(draw(st.integers(1, 5))):
        lines = draw(st.lists(NOISE_LINES, max_size=6))
        for marker in range(draw(st.integers(0, 3))):
            lines.insert(draw(st.integers(0, len(lines))), f"p{page}m{marker} text")
        pages.append("\n".join(lines))
    return pages


@settings(max_examples=300, deadline=None)
@given(paged_texts(), st.booleans())
def test_page_starts_follow_the_lines_cleaning_keeps(pages: list[str], drop_numbers: bool) -> None:
    text, starts = "", []
    for page in pages:
        starts.append(len(text))
        text += page + "\n\n"
    options = CleanOptions(drop_page_numbers=drop_numbers)
    cleaned, moved = clean_marked(text, starts[1:], options)
    assert cleaned == clean_text(text, options)
    bounds = [0, *moved, len(cleaned)]
    assert bounds == sorted(bounds)
    for page, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        for line in cleaned.split("\n"):
            if line.startswith("p") and "m" in line and line.endswith(" text"):
                owner = int(line[1:line.index("m")])
                position = cleaned.index(line)
                assert (lo <= position < hi) == (owner == page), (line, page, moved)
        if page:
            assert lo == 0 or cleaned[lo - 1] == "\n"  # a page still starts a line


def test_a_mark_inside_a_line_is_an_error() -> None:
    with pytest.raises(ValueError):
        clean_marked("ab\ncd", [1])


def _without_lines_marked_by_scanning(lines, drop, mark_lines):
    """The line-by-line scan ``without_lines_marked`` replaced, kept as its reference."""
    trailing_newline = len(lines) > 1 and lines[-1] == ""
    if trailing_newline:
        lines, drop = lines[:-1], drop[:-1]
    out: list[str] = []
    # For every input line, the output line its content (or the gap it was in) starts at.
    landing: list[int] = []
    index, count = 0, len(lines)
    while index < count:
        if not drop[index] and lines[index].strip():
            landing.append(len(out))
            out.append(lines[index])
            index += 1
            continue
        # A run of blank or dropped lines: a gap if it holds a dropped line, else kept as is.
        end = index
        while end < count and (drop[end] or not lines[end].strip()):
            end += 1
        run = range(index, end)
        if not any(drop[i] for i in run):
            landing.extend(len(out) + offset for offset in range(len(run)))
            out.extend(lines[i] for i in run)
        else:
            landing.extend([len(out)] * len(run))
            if out and end < count and any(not lines[i].strip() and not drop[i] for i in run):
                out.append("")
        index = end
    text = "\n".join(out)
    if trailing_newline and text:
        text += "\n"
    line_starts = [0]
    for line in out:
        line_starts.append(line_starts[-1] + len(line) + 1)
    marks = tuple(
        min(line_starts[landing[line]] if line < len(landing) else len(text), len(text))
        for line in mark_lines
    )
    return text, marks


@given(st.lists(st.sampled_from(["", " ", "a", "b c", "  d  ", "7", "\t"]), max_size=30),
       st.data())
@settings(max_examples=400)
def test_without_lines_marked_equals_the_line_scan(lines: list[str], data) -> None:
    from chunkline.clean import without_lines_marked

    drop = data.draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
    marks = sorted(data.draw(st.sets(st.integers(0, len(lines) + 1), max_size=6)))
    assert without_lines_marked(lines, drop, marks) == \
        _without_lines_marked_by_scanning(lines, drop, marks)
