"""Page images of known English text for the OCR tests and bench/ocr_bench.py: drawn with PIL
in the DejaVu fonts (Debian's fonts-dejavu-core), optionally skewed or in two columns; scanned
PDFs made of such images (PIL writes each image as a PDF page with no text layer); and the
character error rate of a reading against its reference."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/share/fonts/dejavu"))
FONTS = ("DejaVuSans", "DejaVuSerif", "DejaVuSansMono")
A4_INCHES = (8.27, 11.69)

PROSE = (
    "The arm is shipped folded in a crate of pine boards. Unpack it on a clean floor, lift it by "
    "the two handles on the base, and never by the forearm or the wrist. Mount the base plate on "
    "a flat surface that can carry four times the weight of the arm, and torque the six bolts to "
    "12 Nm in a star pattern. Before the first start, check that the emergency stop on the "
    "pendant cuts power to every joint, and that the cable to the controller is not bent tighter "
    "than its minimum radius of 80 mm. Calibration takes about twenty minutes: run the wizard "
    "from the pendant, move each joint to the marks engraved on its housing, and confirm each "
    "position when the pendant asks for it. Grease the joints every month, and replace the belts "
    "of the wrist after 2,000 hours of work."
)


def font_path(name: str) -> Path | None:
    """The .ttf file of a DejaVu face (``DejaVuSans``...), or None where it is not installed."""
    return next((d / f"{name}.ttf" for d in FONT_DIRS if (d / f"{name}.ttf").is_file()), None)


def wrap(words: Sequence[str], font: ImageFont.FreeTypeFont, width: float) -> list[str]:
    """Greedy line filling: as many words per line as fit in ``width`` pixels."""
    lines, line = [], ""
    for word in words:
        candidate = f"{line} {word}" if line else word
        if line and font.getlength(candidate) > width:
            lines.append(line)
            line = word
        else:
            line = candidate
    if line:
        lines.append(line)
    return lines


def render_page(text: str, font: str = "DejaVuSans", points: float = 10, dpi: int = 300,
                skew_degrees: float = 0.0, columns: int = 1, leading: float = 1.4,
                max_lines: int | None = None) -> tuple[Image.Image, str, int]:
    """An A4 page image (grey, white background, 1 inch margins) of ``text`` set in ``font`` at
    ``points``, in ``columns`` columns with a 0.3 inch gutter, turned ``skew_degrees``
    counter-clockwise; the reference text in reading order (lines joined by newlines, column 1
    before column 2), and how many words of ``text`` the page holds (the rest did not fit)."""
    path = font_path(font)
    if path is None:
        raise FileNotFoundError(f"{font}.ttf not found (Debian: apt-get install fonts-dejavu-core)")
    width, height = round(A4_INCHES[0] * dpi), round(A4_INCHES[1] * dpi)
    face = ImageFont.truetype(str(path), round(points * dpi / 72))
    step = round(points * leading * dpi / 72)
    margin, gutter = dpi, round(0.3 * dpi)
    column_width = (width - 2 * margin - (columns - 1) * gutter) / columns
    per_column = (height - 2 * margin) // step
    if max_lines is not None:
        per_column = min(per_column, max_lines)
    words = text.split()
    lines = wrap(words, face, column_width)[: per_column * columns]
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    for number, line in enumerate(lines):
        column, row = divmod(number, per_column)
        draw.text((margin + column * (column_width + gutter), margin + row * step), line,
                  font=face, fill=0)
    if skew_degrees:
        image = image.rotate(skew_degrees, resample=Image.BICUBIC, fillcolor=255)
    used = sum(len(line.split()) for line in lines)
    return image, "\n".join(lines), used


def scanned_pdf(images: Sequence[Image.Image], dpi: int = 300) -> bytes:
    """A PDF whose pages are ``images`` and nothing else (no text layer), at ``dpi``."""
    buffer = io.BytesIO()
    first, *rest = [image.convert("RGB") for image in images]
    first.save(buffer, format="PDF", save_all=True, append_images=rest, resolution=dpi)
    return buffer.getvalue()


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions of code points), one row of
    the Wagner-Fischer table at a time in numpy: the insertions within a row are a running
    minimum, ``min_k (row[k] + j - k)``."""
    if not a or not b:
        return len(a) + len(b)
    left = np.frombuffer(a.encode("utf-32-le"), dtype=np.uint32)
    right = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    index = np.arange(len(right) + 1)
    row = index.copy()
    for i, char in enumerate(left, 1):
        fresh = np.empty_like(row)
        fresh[0] = i
        fresh[1:] = np.minimum(row[:-1] + (right != char), row[1:] + 1)
        row = np.minimum.accumulate(fresh - index) + index
    return int(row[-1])


def character_error_rate(reference: str, found: str) -> float:
    """Edit distance over the reference's length, both with runs of whitespace made one space
    (a line break read as a space is no error)."""
    reference, found = " ".join(reference.split()), " ".join(found.split())
    return edit_distance(reference, found) / max(1, len(reference))


def text_and_scan_pdf(lines: Sequence[str], scan: Image.Image) -> bytes:
    """A two-page A4 PDF made with ReportLab: page 1 ``lines`` as real text (a text layer),
    page 2 the image ``scan`` over the whole page and nothing else."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4, invariant=1)
    y = 800
    for line in lines:
        pdf.drawString(72, y, line)
        y -= 16
    pdf.showPage()
    pdf.drawImage(ImageReader(scan.convert("RGB")), 0, 0, width=A4[0], height=A4[1])
    pdf.showPage()
    pdf.save()
    return buffer.getvalue()
