"""Issue #48: a 100,000-row CSV peaked at 1.6 GB in a pipeline run. The reader holds a few times
the file, and the splitter's Markdown parse of the CSV's one document (a pipe table of every
row) holds a few times the text, not a Python node per cell. Memory is measured with
tracemalloc (allocations, not time), at 20,000 rows; ``bench/csv_memory_bench.py`` measures the
whole run at 100,000."""

from __future__ import annotations

import tracemalloc
from typing import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.csv_memory_bench import orders_csv
from chunkline.readers.tabular import lines_of
from chunkline.splitting import structure
from chunkline.splitting.structure import mask_front_matter, read_structure
from tests.readers.helpers import document
from tests.splitting.test_tables import pipe_table, structure_doc, table_doc


def peak_bytes(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_a_csv_holds_a_few_times_its_size() -> None:
    data = orders_csv(20_000)
    doc = document("orders.csv", data)
    assert doc.text.count("\n| ") == 20_000 + 40 * 2  # each row, a header and delimiter per section
    # The bytes decoded, the sections and their join: ~3.7 times. Reading lines through
    # io.StringIO (a 4-byte-a-character copy of the whole text) made it ~7.6.
    assert peak_bytes(lambda: document("orders.csv", data)) < 5 * len(data)


def test_a_csv_documents_markdown_structure_is_read_in_bounded_memory() -> None:
    text = document("orders.csv", orders_csv(20_000)).text
    found = read_structure(text)
    assert len(found.tables) == len(found.headings) == 40
    # One parse of the whole text with the table rule made a Python node per row and cell:
    # ~53 bytes per character here, 1 GB for 100,000 rows. Window by window: ~4.
    assert peak_bytes(lambda: read_structure(text)) < 8 * len(text)


def test_lines_are_read_as_a_string_io_reads_them() -> None:
    import io

    for text in ("", "a", "a\n", "a\r\nb\rc\n\nd", 'x,"1\r\n2"\r\n', "\r\r\n\n"):
        assert list(lines_of(text)) == list(io.StringIO(text, newline="")), text


# Blocks that outlive a blank line (fences, HTML blocks, lists, indented code), tables inside
# and after them, and rows that may open a block: the places a window could be cut wrong.
WINDOW_HAZARDS = (
    "```\n| a |\n|---|\n\n| b |\n|---|\n```\n", "<pre>\n\n| a |\n|---|\n</pre>\n",
    "<!--\n\n| a |\n|---|\n-->\n", "- item\n\n  | a |\n  |---|\n  | 1 |\n",
    "| a |\n|---|\n    code\n\n    more code\n", "| a |\n|---|\n2. second\n\n3. third\n",
    "> quote\n\n| a |\n|---|\n", "| a |\n|---|\n- item\n\n  | b |\n  |---|\n",
    "1. one\n\n| a |\n|---|\n", "\n\n", "\n", "text\n", "| a |\n|---|\n| 1 |\n",
    "| a |\n|---|\n<pre>\n\n| b |\n|---|\n</pre>\n\n| c |\n|---|\n",
    "| a |\n|---|\n```\n\n| b |\n|---|\n```\n", "| a |\n|---|\n1. x\n\n   | b |\n   |---|\n",
)
hazard_doc = st.lists(
    st.one_of(st.sampled_from(WINDOW_HAZARDS), pipe_table(), table_doc), max_size=12,
).map("".join)


@pytest.mark.slow
@given(text=st.one_of(hazard_doc, table_doc, structure_doc))
def test_the_windowed_table_parse_reads_what_one_parse_reads(text: str) -> None:
    # Windows of one character: a cut at every place the windowing allows one.
    masked = mask_front_matter(text)
    assert structure._windowed_structure(masked, True, 1) == read_structure(text)
