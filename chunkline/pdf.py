"""PDF files to text with pages: PDFium's text layer (pypdfium2, Apache-2.0/BSD-3: installs
from the package registry as a wheel, no system library), one page after another.

The document's text is the pages' texts joined by a blank line; ``page_starts[i]`` is where
page ``i + 1`` begins in it, so every chunk can name the pages it spans. The outline
(bookmarks) is kept as (page index, level, title) and becomes the heading path of what follows
each bookmark (:func:`outline_headings`). What is not read, and why, is a rejection:

- encrypted with a user password (PDFium: "Incorrect password"): no password is asked for;
- truncated: no ``%%EOF`` in the last 1024 bytes (where Acrobat looks for it, PDF Reference
  1.7, implementation note 18), or a file PDFium cannot parse;
- no text layer on any page (a scan, images only), unless OCR is asked for
  (:class:`chunkline.ocr.OcrOptions`): then a page with no text layer (``auto``) or every page
  (``always``) is rendered by PDFium and read by OCR, in its place among the pages.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from chunkline.pages import PAGE_SEPARATOR, PdfText, join_pages  # noqa: F401 - re-exported
from chunkline.splitting.structure import Heading
from chunkline.extras import require

if TYPE_CHECKING:
    from chunkline.ocr import OcrOptions

_EOF_WINDOW = 1024
# PDFium ends lines with "\r\n" and marks a hyphen it found at a line end as U+0002.
_LINE_BREAK = re.compile(r"\r\n?")
# The document information entries kept as metadata (PDF 32000-1, 14.3.3), and their keys.
INFO_KEYS = {"Title": "title", "Author": "author", "Subject": "subject"}


def read_pdf(data: bytes, ocr: OcrOptions | None = None) -> PdfText | str:
    """A PDF's text, page-start table, outline and title/author; or the reason it has none.
    ``ocr`` (None: no OCR, as ``mode="never"``): which pages are rendered and read by OCR
    instead of their text layer; their text takes the page's place, so a PDF of text pages and
    scanned pages keeps both, in page order. Never raises for bad input."""
    if not data.lstrip()[:5] == b"%PDF-":
        return "not a PDF file (no %PDF- header)"
    if b"%%EOF" not in data[-_EOF_WINDOW:]:
        return "truncated PDF (no %%EOF marker at its end)"
    pdfium = require("pdf", "pypdfium2")  # only runs that read PDFs load PDFium

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            return "encrypted PDF (a password is required; not supported)"
        return f"not a readable PDF ({exc})"
    use_ocr = ocr is not None and ocr.mode != "never"
    try:
        pages = [_page_text(pdf, index) for index in range(len(pdf))]
        outline = tuple(_outline(pdf, len(pages)))
        info = {name: value.strip() for key, name in INFO_KEYS.items()
                for value in [pdf.get_metadata_value(key)] if value and value.strip()}
        layerless = sum(1 for page in pages if not page.strip())
        if use_ocr and ocr is not None and pages:  # (use_ocr says ocr is not None)
            from chunkline.ocr import ocr_pdf_pages  # OpenCV and the models only when asked

            read = ocr_pdf_pages(pdf, pages, ocr)
            if isinstance(read, str):
                return read
            pages, ocr_pages, scores = read
    except pdfium.PdfiumError as exc:
        return f"not a readable PDF ({exc})"
    finally:
        pdf.close()
    if not pages:
        return "empty document (PDF has no pages)"
    if not any(page.strip() for page in pages):
        if use_ocr:
            return (f"no text in {len(pages)} page(s): {layerless} without a text layer, and none "
                    "found by OCR")
        if ocr is not None:
            return f"no text layer in {len(pages)} page(s) (a scanned or image-only PDF; OCR is off)"
        return f"no text layer in {len(pages)} page(s) (a scanned or image-only PDF; OCR is not supported)"
    text, starts = join_pages(pages)
    if not use_ocr:
        return PdfText(text, starts, outline, info)
    from chunkline.ocr import engine_name, mean_confidence

    return PdfText(text, starts, outline, info,
                   ocr_engine=engine_name() if ocr_pages else None,
                   ocr_confidence=mean_confidence(scores), ocr_pages=ocr_pages)


def _page_text(pdf, index: int) -> str:
    page = pdf[index]
    try:
        textpage = page.get_textpage()
        try:
            raw = textpage.get_text_range()
        finally:
            textpage.close()
    finally:
        page.close()
    # One line ending, no trailing blanks: a page starts at a line start and ends on text.
    return _LINE_BREAK.sub("\n", raw).replace("\x02", "-").strip("\n")


def _outline(pdf, page_count: int):
    for bookmark in pdf.get_toc():
        destination = bookmark.get_dest()
        index = destination.get_index() if destination is not None else None
        title = " ".join((bookmark.get_title() or "").split())
        if index is not None and 0 <= index < page_count and title:
            yield index, bookmark.level, title


def outline_headings(text: str, page_starts: tuple[int, ...],
                     outline: tuple[tuple[int, int, str], ...]) -> list[Heading]:
    """The outline as headings of ``text``, in document order. A bookmark's heading starts at
    the line of its page that begins with its title (whitespace and case aside), searched from
    the previous heading of that page on; where no line does, at the start of its page (a
    bookmark names a page, and the page is the finest place it is known to point at). Levels
    are the outline's depth, 1 for the top."""
    found: list[Heading] = []
    last_at: dict[int, int] = {}
    for index, level, title in outline:
        page_start = page_starts[index]
        page_end = page_starts[index + 1] if index + 1 < len(page_starts) else len(text)
        lo = max(page_start, last_at.get(index, page_start))
        pattern = re.compile(r"(?im)^[ \t]*" + r"\s+".join(map(re.escape, title.split())))
        match = pattern.search(text, lo, page_end)
        if match:
            start = match.start()
            line_end = text.find("\n", match.end(), page_end)
            end = line_end + 1 if line_end >= 0 else page_end
        else:
            start = end = lo
        last_at[index] = end
        found.append(Heading(start, level + 1, title, end))
    return sorted(found, key=lambda heading: heading.start)
