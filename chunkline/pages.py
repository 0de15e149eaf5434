"""Paged text: what a reader of pages (PDFium's text layers, OCR of scanned pages and image
files) returns, one home for both so that neither reader imports the other."""

from __future__ import annotations

from dataclasses import dataclass

PAGE_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class PdfText:
    """A paged document's text, where each page starts in it, its outline (page index, level,
    title) and its document information; and, where OCR read pages, the engine and models
    (``chunkline.ocr.engine_name()``), the recognizer's mean confidence over the characters it
    read (0..1) and the 1-based pages it read (None, None, () for text layers alone)."""

    text: str
    page_starts: tuple[int, ...]
    outline: tuple[tuple[int, int, str], ...]
    info: dict[str, str]
    ocr_engine: str | None = None
    ocr_confidence: float | None = None
    ocr_pages: tuple[int, ...] = ()


def join_pages(texts: list[str]) -> tuple[str, tuple[int, ...]]:
    """Page texts joined by :data:`PAGE_SEPARATOR`, and where each page starts in the result."""
    starts, offset = [], 0
    for page in texts:
        starts.append(offset)
        offset += len(page) + len(PAGE_SEPARATOR)
    return PAGE_SEPARATOR.join(texts), tuple(starts)
