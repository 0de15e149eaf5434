"""PDFs made by the tests themselves, with ReportLab (BSD): pages of text lines, an outline
(bookmarks), a user password, pages with an image and no text, document information."""

from __future__ import annotations

import io
from typing import Sequence

from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas


def make_pdf(
    pages: Sequence[Sequence[str]],
    outline: Sequence[tuple[int, int, str]] = (),
    *,
    password: str | None = None,
    image_only: bool = False,
    title: str = "",
    author: str = "",
) -> bytes:
    """One page per entry of ``pages`` (its lines drawn top-down); ``outline``: (page index,
    level from 0, title) bookmarks; ``password``: encrypted with it as the user password;
    ``image_only``: every page a filled shape and no text at all. Byte-stable (``invariant``)."""
    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4, encrypt=password, invariant=1)
    # ReportLab writes "untitled", "anonymous", "unspecified" where nothing is set.
    pdf.setTitle(title)
    pdf.setAuthor(author)
    pdf.setSubject("")
    for index, lines in enumerate(pages):
        y = 800
        for line in ([] if image_only else lines):
            pdf.drawString(72, y, line)
            y -= 16
        if image_only:
            pdf.rect(100, 300, 300, 300, fill=1)
        for number, (page, level, name) in enumerate(outline):
            if page == index:
                pdf.bookmarkPage(f"b{number}")
                pdf.addOutlineEntry(name, f"b{number}", level=level)
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()
