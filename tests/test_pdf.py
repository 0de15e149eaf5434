"""PDF reading: pages with exact starts, the outline as headings, rejections with reasons."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.pdf import PAGE_SEPARATOR, outline_headings, read_pdf
from chunkline.readers import ReadOptions, decode_file
from chunkline.records import Document, Rejected
from chunkline.splitting.text import split
from tests.pdfs import make_pdf

PAGES = [
    ["Installation", "Unpack the arm and mount it on the base plate.", "Torque the bolts to 12 Nm."],
    ["Calibration", "Run the calibration wizard from the pendant.", "Maintenance",
     "Grease the joints monthly."],
    ["Appendix text without a bookmark title line."],
]
OUTLINE = [(0, 0, "Installation"), (1, 0, "Calibration"), (1, 1, "Maintenance"), (2, 0, "Appendix A")]


def test_pages_and_starts() -> None:
    found = read_pdf(make_pdf(PAGES, OUTLINE, title="Arm manual", author="Ann Lee"))
    assert not isinstance(found, str)
    assert len(found.page_starts) == 3 and found.page_starts[0] == 0
    ends = [*found.page_starts[1:], len(found.text) + len(PAGE_SEPARATOR)]
    for lines, start, end in zip(PAGES, found.page_starts, ends):
        assert found.text[start:end - len(PAGE_SEPARATOR)] == "\n".join(lines)
    assert found.outline == ((0, 0, "Installation"), (1, 0, "Calibration"), (1, 1, "Maintenance"),
                             (2, 0, "Appendix A"))
    assert found.info == {"title": "Arm manual", "author": "Ann Lee"}


def test_outline_headings_sit_on_their_title_line_or_page_start() -> None:
    found = read_pdf(make_pdf(PAGES, OUTLINE))
    headings = outline_headings(found.text, found.page_starts, found.outline)
    text = found.text
    by_title = {h.title: h for h in headings}
    assert text[by_title["Calibration"].start:].startswith("Calibration\n")
    assert text[by_title["Maintenance"].start:].startswith("Maintenance\nGrease")
    assert by_title["Maintenance"].level == 2
    # No line of page 3 names "Appendix A": the bookmark marks its page's start.
    assert by_title["Appendix A"].start == found.page_starts[2]
    chunks = split(text, 12, 0, "words", markdown=False, headings=headings)
    for chunk in chunks:
        section = [h for h in headings if h.start <= chunk.start]
        assert chunk.headings[-1] == section[-1].title if section else chunk.headings == ()
    labelled = {c.headings for c in chunks}
    assert ("Calibration", "Maintenance") in labelled and ("Installation",) in labelled


@pytest.mark.parametrize("data, reason", [
    (make_pdf([["secret"]], password="pw"), "encrypted PDF (a password is required; not supported)"),
    (make_pdf([["x"], ["y"]], image_only=True),
     "no text layer in 2 page(s) (a scanned or image-only PDF; OCR is not supported)"),
    (make_pdf(PAGES)[:-200], "truncated PDF (no %%EOF marker at its end)"),
    (b"%PDF-1.7\n" + b"\x00garbage" * 50 + b"\n%%EOF\n", "not a readable PDF"),
    (b"hello, not a pdf", "not a PDF file (no %PDF- header)"),
])
def test_unreadable_pdfs_are_reasons(data: bytes, reason: str) -> None:
    found = read_pdf(data)
    assert isinstance(found, str) and found.startswith(reason)


def test_half_a_pdf_is_rejected() -> None:
    data = make_pdf(PAGES)
    half = data[: len(data) // 2] + b"\n%%EOF\n"  # a cut that still ends like a PDF
    assert isinstance(read_pdf(half), str)


def test_decode_file_makes_a_paged_document_with_metadata() -> None:
    data = make_pdf(PAGES, OUTLINE, title="Arm manual")
    [doc] = decode_file("/c/manuals/arm.pdf", data, "/c", ReadOptions(), modified=1_700_000_000.0)
    assert isinstance(doc, Document)
    assert doc.doc_id == "manuals/arm.pdf" and doc.format == "pdf" and doc.file_size == len(data)
    assert len(doc.page_starts) == 3 and doc.outline
    meta = dict(doc.all_metadata())
    assert json.loads(meta["title"]) == "Arm manual"
    assert json.loads(meta["file_modified"]) == "2023-11-14T22:13:20Z"
    [rejected] = decode_file("/c/locked.pdf", make_pdf([["x"]], password="pw"), "/c", ReadOptions())
    assert isinstance(rejected, Rejected) and "encrypted" in rejected.reason


def test_pdf_text_limit_applies_to_its_text() -> None:
    data = make_pdf([["word " * 80]])
    [rejected] = decode_file("/c/a.pdf", data, "/c", ReadOptions(max_document_bytes=100))
    assert isinstance(rejected, Rejected) and "text read from the PDF" in rejected.reason


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab \n", max_size=12), min_size=1, max_size=6), st.data())
def test_page_range_names_the_pages_holding_the_text(pages: list[str], data) -> None:
    starts, text = [], ""
    for page in pages:
        starts.append(len(text))
        text += page + PAGE_SEPARATOR
    doc = Document("d", "d.pdf", text, page_starts=tuple(starts))
    start = data.draw(st.integers(0, len(text) - 1))
    end = data.draw(st.integers(start + 1, len(text)))
    first, last = doc.page_range(start, end)
    held = [i for i in range(start, end) if not text[i].isspace()]
    def page_of(offset: int) -> int:
        return max(p for p, s in enumerate(starts, 1) if s <= offset)

    if held:
        assert (first, last) == (page_of(held[0]), page_of(held[-1]))
    else:
        assert first == last
    assert Document("d", "d.md", text).page_range(start, end) == (None, None)
