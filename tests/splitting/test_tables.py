"""Markdown pipe tables in split(): kept whole when they fit, else cut between rows with the
header row repeated in ``Chunk.table_header`` (issue 5, tables).

Tables are checked against markdown-it-py's own GFM reading (``commonmark`` + ``table``),
independent of the markdown-it-pyrs parse the splitter uses.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from chunkline import Chunk, split, tables
from chunkline.splitting.structure import headings, mask_front_matter, read_structure
from tests.helpers import TOKENIZER_SPECS, tokenizer
from tests.splitting.test_splitter_properties import FRAGMENTS, check_invariants, prose

HEADER = "| Robot | Zone | Status |\n|:------|------|-------:|\n"


def table(rows: int, header: str = HEADER, width: int = 3) -> str:
    return header + "".join(
        f"| R-{i:03d} robot | zone {i % 7} north | " + " ".join(["ok"] * width) + " |\n"
        for i in range(rows)
    )


def reference_tables(
    text: str, unread: list[tuple[int, int]] | None = None
) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """(start, body, end, row starts) of top-level tables clear of headings, read by
    markdown-it-py: tables from a GFM parse, headings from the CommonMark parse the splitter's
    heading paths follow (where both claim a line, the heading wins). Spans of tables that
    the two markdown-it ports read differently go to ``unread``."""
    text = mask_front_matter(text)
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]

    def at(line: int) -> int:
        return starts[line] if line < len(starts) else len(text)

    heading_lines = [
        t.map for t in MarkdownIt("commonmark").parse(text)
        if t.type == "heading_open" and t.level == 0
    ]
    found = []
    for token in MarkdownIt("commonmark").enable("table").parse(text):
        if token.type != "table_open" or token.level != 0:
            continue
        first, last = token.map
        if any(a < last and first < b for a, b in heading_lines):
            continue
        lead = text[at(first):at(first + 1)].lstrip(" \t")[:1]
        if lead and lead not in "|\r\n" and lead.isspace():
            # markdown-it-py strips Unicode spaces (U+3000, U+2028, NBSP, VT) before a header
            # row, markdown-it-pyrs (which the splitter uses) does not: not a table to it.
            if unread is not None:
                unread.append((at(first), at(last)))
            continue
        after = text[at(last):at(last + 1)]
        if after.strip(" \t\r\n") and after.isspace():
            # Likewise a line of only Unicode spaces is blank to markdown-it-py (it ends the
            # table there) and a row to markdown-it-pyrs (CommonMark's blank is space and tab).
            if unread is not None:
                unread.append((at(first), at(last + 1)))
            continue
        rows = tuple(at(k) for k in range(first + 2, last))
        found.append((at(first), at(first + 2), at(last), rows))
    return found


def _heading_spans(text: str) -> list[tuple[int, int]]:
    return [(h.start, h.end) for h in headings(text)]


def check_tables(text: str, spec: str, max_tokens: int, overlap: int) -> list[Chunk]:
    """split()'s contract, and for each table: whole when it fits; else cut only between rows,
    with the header repeated (and counted) wherever a chunk starts among its rows."""
    tok = tokenizer(spec)
    check_invariants(text, spec, max_tokens, overlap, markdown=True)
    chunks = split(text, max_tokens, overlap, tok)
    bounds = {c.start for c in chunks} | {c.end for c in chunks}
    unread: list[tuple[int, int]] = []
    found = reference_tables(text, unread)
    skip = _heading_spans(text) + unread
    assert [(t.start, t.body, t.end, t.rows) for t in tables(text)
            if not any(a < t.end and t.start < b for a, b in skip)] == found
    for start, body, end, rows in found:
        header = text[start:body]
        header += "" if header.endswith(("\n", "\r")) else "\n"
        inside = sorted(b for b in bounds if start < b < end)
        if tok.count(text[start:end]) <= max_tokens:
            assert not inside, ("a table that fits was cut", text[start:end], inside)
            continue
        header_tokens = tok.count(header)
        room = max_tokens - header_tokens if header_tokens <= max_tokens // 2 else max_tokens
        row_ends = list(rows[1:]) + [end]
        if rows and all(tok.count(text[a:b]) <= room for a, b in zip(rows, row_ends)) and \
                tok.count(text[start:body]) <= max_tokens:
            assert set(inside) <= set(rows), ("cut inside a row", inside, rows)
        for chunk in chunks:
            if body <= chunk.start < end and header_tokens <= max_tokens // 2:
                if chunk.table_header:
                    assert chunk.table_header == header
                else:  # dropped only where it truly could not fit
                    assert tok.count(header + text[chunk.start : chunk.end]) > max_tokens
    for chunk in chunks:
        if chunk.table_header:
            owner = [t for t in found if t[1] <= chunk.start < t[2]]
            assert owner, chunk
            assert tok.count(chunk.table_header + text[chunk.start : chunk.end]) <= max_tokens
        assert chunk.tokens == tok.count(text[chunk.start : chunk.end])
    return chunks


# ------------------------------------------------------------------------------- behaviour


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
def test_table_split_repeats_its_header(spec: str) -> None:
    text = "# Fleet\n\nThe robots and where they are.\n\n" + table(40) + "\nAfter the table.\n"
    budget = 3 * tokenizer(spec).count(HEADER)  # room for the header and two or more rows
    chunks = check_tables(text, spec, budget, 0)
    start = text.index("| Robot")
    body = start + len(HEADER)
    inside = [c for c in chunks if body <= c.start < text.index("\nAfter")]
    assert len(inside) >= 3
    assert all(c.table_header == HEADER for c in inside)
    first = next(c for c in chunks if c.start <= start < c.end)
    assert first.table_header == ""  # the first piece holds the header itself
    assert text.index(HEADER) + len(HEADER) <= first.end
    for c in inside:
        assert text[c.start : c.end].startswith("| R-")  # cut between rows
        assert tokenizer(spec).count(c.table_header + text[c.start : c.end]) <= budget


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@pytest.mark.parametrize("overlap", [0, 10])
def test_split_table_budget_counts_the_header(spec: str, overlap: int) -> None:
    text = table(30) + "\n" + "Some closing words here. " * 20 + "\n"
    budget = 3 * tokenizer(spec).count(HEADER)
    chunks = check_tables(text, spec, budget, overlap)
    assert sum(bool(c.table_header) for c in chunks) >= 3


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
def test_small_table_is_kept_whole(spec: str) -> None:
    small = table(3)
    text = "Intro sentence number one. " * 30 + "\n\n" + small + "\n" + "Outro words. " * 30
    budget = tokenizer(spec).count(small) + 2
    chunks = check_tables(text, spec, budget, 0)
    start = text.index(small)
    assert any(c.start <= start and start + len(small) <= c.end for c in chunks)
    assert all(c.table_header == "" for c in chunks)


def test_table_in_a_code_fence_is_text() -> None:
    fenced = "```\n" + table(30) + "```\n"
    assert tables(fenced) == []
    chunks = split(fenced, 40, 0, tokenizer("words"))
    assert len(chunks) > 2 and all(c.table_header == "" for c in chunks)


def test_table_in_a_list_item_is_text() -> None:
    text = "- item\n\n" + "".join("  " + line + "\n" for line in table(30).splitlines())
    assert tables(text) == []
    assert all(c.table_header == "" for c in split(text, 40, 0, tokenizer("words")))


def test_header_over_half_the_budget_is_not_repeated() -> None:
    wide = "| " + " | ".join(f"column {i}" for i in range(12)) + " |\n|" + "---|" * 12 + "\n"
    text = wide + "".join("| " + " | ".join(["x"] * 12) + " |\n" for _ in range(20))
    chunks = check_tables(text, "words", 40, 0)
    assert len(chunks) > 1 and all(c.table_header == "" for c in chunks)
    assert all(text[c.start - 1] == "\n" for c in chunks[1:])  # still cut between rows


def test_single_row_over_budget_is_cut_inside_with_the_header() -> None:
    text = HEADER + "| a | b | c |\n| " + "long " * 200 + "| x | y |\n| d | e | f |\n"
    chunks = check_tables(text, "words", 30, 0)
    assert len(chunks) > 5
    assert all(c.table_header == HEADER for c in chunks[1:])


def test_crlf_table_header_keeps_its_line_breaks() -> None:
    header = HEADER.replace("\n", "\r\n")
    text = table(30, header).replace("| ok |\n", "| ok |\r\n")
    chunks = check_tables(text, "words", 40, 0)
    assert {c.table_header for c in chunks[1:]} == {header}


def test_heading_that_is_also_a_table_header_stays_a_heading() -> None:
    text = "# a | b\n|---|---|\n" + "| 1 | 2 |\n" * 40
    assert [t.start for t in tables(text)] == [0]  # GFM reads a table ...
    chunks = split(text, 20, 0, tokenizer("words"))
    assert all(c.headings == ("a | b",) and c.table_header == "" for c in chunks)  # ... but


def test_tables_positions() -> None:
    text = "x\n\n| a | b |\n|---|---|\n| 1 | 2 |\n| é | 4 |\n\n| q |\n|---|"
    found = tables(text)
    assert [(t.start, t.body, t.end, t.rows) for t in found] == [
        (start, body, end, rows) for start, body, end, rows in reference_tables(text)]
    assert found[0].header(text) == "| a | b |\n|---|---|\n"
    assert found[1].header(text) == "| q |\n|---|\n"  # no body rows, no final line break


# ---------------------------------------------------------------------------------- property

cell = st.one_of(
    prose.map(lambda p: " ".join(p.split()[:4])),
    st.sampled_from(["`a|b`", r"a \| b", "👍🏽", "", "1.5"]),
)


@st.composite
def pipe_table(draw) -> str:
    columns = draw(st.integers(1, 4))

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    header = row(draw(st.lists(cell, min_size=columns, max_size=columns)))
    aligns = st.sampled_from(["---", ":--", "--:", ":-:"])
    delimiter = "|" + "|".join(draw(aligns) for _ in range(columns)) + "|"
    body = [row(draw(st.lists(cell, min_size=columns, max_size=columns)))
            for _ in range(draw(st.integers(0, 12)))]
    newline = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    return newline.join([header, delimiter] + body) + newline


table_doc = st.lists(
    st.one_of(
        pipe_table(), pipe_table(), prose.map(lambda p: p + "\n\n"), st.sampled_from(FRAGMENTS),
        st.tuples(st.integers(1, 3), prose).map(lambda t: "#" * t[0] + " " + t[1] + "\n"),
        pipe_table().map(lambda t: "```\n" + t + "```\n"),
        pipe_table().map(lambda t: "- " + t.replace("\n", "\n  ")),
    ),
    max_size=12,
).map("".join)


@pytest.mark.slow
@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@given(data=st.data(), text=table_doc)
def test_table_invariants(spec: str, data, text: str) -> None:
    max_tokens = data.draw(st.one_of(st.integers(1, 10), st.integers(11, 120)), label="max_tokens")
    overlap = data.draw(st.integers(0, max_tokens - 1), label="overlap")
    check_tables(text, spec, max_tokens, overlap)


def test_a_row_that_opens_a_list_item_ends_the_table_where_markdown_it_py_does() -> None:
    # markdown-it-pyrs keeps "2. second" as a row; markdown-it-py (the reference) ends the
    # table before it, as a list item may start there (found by the deep Hypothesis profile).
    text = "| The |\n|---|\nword1. first\n2. second\n"
    assert [(t.start, t.body, t.end, t.rows) for t in tables(text)] == reference_tables(text, [])
    assert reference_tables(text, []) == [(0, 14, 27, (14,))]


# Lines that look like table parts without making one (column counts that differ, a delimiter
# row with no pipe, a header row after a paragraph line, setext underlines below pipes): where
# the one parse with the table rule finds no table, its headings are CommonMark's as they are.
NEAR_TABLES = (
    "| a | b |\n|---|\n", "| a |\n---\n", "a | b\n-|-\n", "text\n| a |\n|---|\n",
    "| a |\n===\n", "|-|\n", "x |- y\n", "> | a |\n> |---|\n", "  | a |\n  |:-:|\n",
    "| a |\n|---|\n---\n", "Title\n| a |\n", "| a |\n|---|\n# H\n", "- | a |\n  |---|\n",
)
structure_doc = st.lists(
    st.one_of(st.sampled_from(NEAR_TABLES), st.sampled_from(FRAGMENTS), pipe_table(),
              prose.map(lambda p: p + "\n")),
    max_size=12,
).map("".join)


@pytest.mark.slow
@given(text=st.one_of(table_doc, structure_doc))
def test_one_parse_reads_the_same_headings_and_tables(text: str) -> None:
    found = read_structure(text)
    assert list(found.headings) == headings(text)  # the CommonMark reading, no table rule
    assert list(found.tables) == tables(text)
