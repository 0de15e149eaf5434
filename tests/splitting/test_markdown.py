"""The fast heading reader (markdown-it-pyrs, block rules) equals markdown-it-py's CommonMark."""

from __future__ import annotations

from hypothesis import given, strategies as st

from chunkline.splitting.structure import _headings_markdown_it_py, headings, mask_front_matter, sections
from tests.helpers import reference_headings
from tests.splitting.test_splitter_properties import FRAGMENTS, any_text, markdown_doc

docs = st.one_of(markdown_doc, any_text, st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))


@given(text=docs)
def test_fast_reader_equals_markdown_it_py(text: str) -> None:
    want = reference_headings(text)
    assert [(h.start, h.level, h.title) for h in headings(text)] == want


@given(text=docs)
def test_fallback_reader_equals_markdown_it_py(text: str) -> None:
    want = reference_headings(text)
    got = _headings_markdown_it_py(mask_front_matter(text))
    assert [(h.start, h.level, h.title) for h in got] == want


@given(text=docs)
def test_sections_tile_the_text(text: str) -> None:
    parts = sections(text)
    if not text:
        assert parts == []
        return
    assert parts[0].start == 0 and parts[-1].end == len(text)
    assert all(a.end == b.start and a.start < a.end for a, b in zip(parts, parts[1:]))


def test_mask_front_matter_keeps_offsets() -> None:
    text = "---\r\ntitle: x\r\n---\r\n# H\n"
    masked = mask_front_matter(text)
    assert len(masked) == len(text)
    assert masked.splitlines() == ["   ", "        ", "   ", "# H"]
    assert mask_front_matter("no front matter\n---\n") == "no front matter\n---\n"
