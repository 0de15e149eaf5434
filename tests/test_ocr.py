"""OCR of page images and scanned PDF pages with the real engine (RapidOCR's ONNX models, in the
wheel): reading order, page starts, rejections with reasons, character error rate bounds.

Pages hold a few lines each (a full A4 page takes ~5-10 s of one core); the full pages per font
are marked slow, and bench/ocr_bench.py measures the whole set."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from chunkline.ocr import (NO_TEXT, OcrOptions, _Line, _reading_order, ascii_punctuation, ocr_image,
                           read_image)
from chunkline.pdf import PAGE_SEPARATOR, read_pdf
from tests.ocr_pages import (FONTS, PROSE, character_error_rate, edit_distance, font_path,
                             render_page, scanned_pdf, text_and_scan_pdf)
from tests.pdfs import make_pdf

pytestmark = [pytest.mark.skipif(font_path("DejaVuSans") is None,
                                 reason="DejaVu fonts not installed (apt-get install fonts-dejavu-core)"),
              pytest.mark.slow]  # OCR models on rendered pages (make test-fast skips it)

# PP-OCRv4 read the bench's pages at 0.3 % CER and under (bench/RESULTS.md); a bound ten times
# looser still fails on a dropped line (~1/6 of a 6-line page) or a lost space per word (~15 %).
CER_BOUND = 0.03
OPTIONS = OcrOptions()


def _pages_of(found) -> list[str]:
    ends = [*found.page_starts[1:], len(found.text) + len(PAGE_SEPARATOR)]
    return [found.text[start:end - len(PAGE_SEPARATOR)] for start, end in zip(found.page_starts, ends)]


def _png(image: Image.Image, **save) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=save.pop("format", "PNG"), **save)
    return buffer.getvalue()


def test_edit_distance_is_levenshtein() -> None:
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("flaw", "lawn") == 2
    assert character_error_rate("a  b\nc", "a b c") == 0.0


@pytest.mark.parametrize("font, points, skew", [("DejaVuSans", 10, 0.0), ("DejaVuSerif", 12, 2.0)])
def test_a_page_is_read_under_the_error_bound(font: str, points: int, skew: float) -> None:
    image, reference, _ = render_page(PROSE, font, points, skew_degrees=skew, max_lines=6)
    text, confidence = ocr_image(image, OPTIONS)
    assert character_error_rate(reference, text) <= CER_BOUND, text
    assert len(text.splitlines()) == len(reference.splitlines())  # line breaks kept
    assert confidence is not None and 0.9 <= confidence <= 1.0


def test_two_columns_are_read_one_after_the_other() -> None:
    image, reference, _ = render_page(PROSE, columns=2, max_lines=4)
    text, _ = ocr_image(image, OPTIONS)
    # Read across the gutter line by line, the text would be ~50 % wrong.
    assert character_error_rate(reference, text) <= CER_BOUND, text


def test_an_upside_down_page_is_turned() -> None:
    image, reference, _ = render_page(PROSE, max_lines=6)
    text, _ = ocr_image(image.rotate(180), OPTIONS)
    assert character_error_rate(reference, text) <= CER_BOUND, text


@pytest.mark.parametrize("read, kept", [
    ("PROFITS，WHETHER （CWI）", "PROFITS,WHETHER (CWI)"),
    ("中文，中文", "中文，中文"),
    ("see 第3章，then", "see 第3章，then"),
])
def test_full_width_punctuation_is_ascii_in_latin_text_only(read: str, kept: str) -> None:
    assert ascii_punctuation(read) == kept


def test_reading_order_cuts_columns_below_a_full_width_title() -> None:
    def box(text: str, x0: float, y0: float, x1: float) -> _Line:
        return _Line(text, 1.0, x0, y0, x1, y0 + 40)

    title = box("title", 100, 0, 1900)
    left = [box(f"left {n}", 100, 100 + 50 * n, 950) for n in range(3)]
    right = [box(f"right {n}", 1050, 100 + 50 * n, 1900) for n in range(3)]
    footer = box("footer", 100, 400, 1900)
    # Two boxes of one line (the detector split it at a wide space) stay together.
    split = [box("half a", 100, 500, 400), box("half b", 600, 502, 900)]
    shuffled = [right[1], footer, *split[::-1], left[2], title, right[0], left[0], right[2], left[1]]
    ordered = _reading_order(shuffled, gutter=40, tolerance=10)
    assert [line.text for line in ordered] == [
        "title", "left 0", "left 1", "left 2", "right 0", "right 1", "right 2", "footer",
        "half a", "half b"]


def test_a_scanned_pdf_is_read_page_by_page() -> None:
    pages = [render_page(PROSE, max_lines=3), render_page(PROSE.upper(), "DejaVuSerif", max_lines=3)]
    data = scanned_pdf([image for image, _, _ in pages])
    found = read_pdf(data, OPTIONS)
    assert not isinstance(found, str), found
    assert found.ocr_pages == (1, 2) and found.ocr_engine.startswith("rapidocr-onnxruntime ")
    assert 0.9 <= found.ocr_confidence <= 1.0
    assert len(found.page_starts) == 2
    for (_, reference, _), text in zip(pages, _pages_of(found)):
        assert character_error_rate(reference, text) <= CER_BOUND, text


def test_without_ocr_a_scanned_pdf_is_still_rejected() -> None:
    data = scanned_pdf([render_page(PROSE, max_lines=2)[0]])
    assert read_pdf(data) == ("no text layer in 1 page(s) (a scanned or image-only PDF; OCR is "
                              "not supported)")
    assert read_pdf(data, OcrOptions(mode="never")) == (
        "no text layer in 1 page(s) (a scanned or image-only PDF; OCR is off)")


def test_text_pages_and_scanned_pages_keep_their_order() -> None:
    lines = ["Installation", "Unpack the arm and mount it on the base plate."]
    scan, reference, _ = render_page(PROSE, max_lines=3)
    data = text_and_scan_pdf(lines, scan)
    found = read_pdf(data, OPTIONS)
    assert not isinstance(found, str), found
    first, second = _pages_of(found)
    assert first == "\n".join(lines)  # the text layer, exactly: auto leaves it alone
    assert character_error_rate(reference, second) <= CER_BOUND, second
    assert found.ocr_pages == (2,) and found.page_starts == (0, len(first) + len(PAGE_SEPARATOR))
    plain = read_pdf(data)
    assert not isinstance(plain, str) and plain.text == first + PAGE_SEPARATOR  # page 2 empty
    assert plain.ocr_pages == () and plain.ocr_engine is None


def test_always_reads_text_pages_by_ocr_too() -> None:
    lines = ["Installation", "Unpack the arm and mount it on the base plate."]
    data = make_pdf([lines])
    found = read_pdf(data, OcrOptions(mode="always", dpi=200))
    assert not isinstance(found, str), found
    assert found.ocr_pages == (1,)
    assert character_error_rate("\n".join(lines), found.text) <= CER_BOUND, found.text


def test_a_pdf_of_shapes_has_no_text_even_by_ocr() -> None:
    found = read_pdf(make_pdf([["x"], ["y"]], image_only=True), OPTIONS)
    assert found == "no text in 2 page(s): 2 without a text layer, and none found by OCR"


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_an_image_file_is_one_page(fmt: str) -> None:
    image, reference, _ = render_page(PROSE, max_lines=3)
    found = read_image(_png(image, format=fmt), OPTIONS)
    assert not isinstance(found, str), found
    assert found.page_starts == (0,) and found.ocr_pages == (1,) and found.outline == ()
    assert character_error_rate(reference, found.text) <= CER_BOUND, found.text


def test_a_multipage_tiff_is_pages_in_order() -> None:
    first, ref_1, _ = render_page(PROSE, max_lines=2)
    second, ref_2, _ = render_page(" ".join(PROSE.split()[40:]), "DejaVuSansMono", max_lines=2)
    data = _png(first, format="TIFF", save_all=True, append_images=[second], compression="tiff_lzw")
    found = read_image(data, OPTIONS)
    assert not isinstance(found, str), found
    assert found.ocr_pages == (1, 2) and len(found.page_starts) == 2
    for reference, text in zip([ref_1, ref_2], _pages_of(found)):
        assert character_error_rate(reference, text) <= CER_BOUND, text


def test_text_on_a_transparent_background_is_read() -> None:
    image, reference, _ = render_page(PROSE, max_lines=2)
    # Black text, alpha 255 where inked and 0 elsewhere; the hidden colour is black everywhere.
    rgba = Image.new("RGBA", image.size, (0, 0, 0, 0))
    rgba.putalpha(image.point(lambda value: 255 - value))
    found = read_image(_png(rgba), OPTIONS)
    assert not isinstance(found, str), found
    assert character_error_rate(reference, found.text) <= CER_BOUND, found.text


@pytest.mark.parametrize("data, reason", [
    (_png(Image.new("L", (1200, 1600), 255)), NO_TEXT),
    (b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 40, "unreadable image (OSError"),  # a PNG signature, then junk
    (b"not an image at all", "unreadable image (UnidentifiedImageError"),
    (_png(render_page(PROSE, max_lines=8)[0])[:4000], "unreadable image (OSError"),  # truncated
])
def test_images_without_text_are_reasons(data: bytes, reason: str) -> None:
    found = read_image(data, OPTIONS)
    assert isinstance(found, str) and found.startswith(reason), found


def test_image_files_are_not_read_with_ocr_off() -> None:
    data = _png(render_page(PROSE, max_lines=1)[0])
    assert read_image(data, OcrOptions(mode="never")) == "image not read: OCR is off"


@pytest.mark.parametrize("kwargs", [{"mode": "sometimes"}, {"dpi": 50}, {"threads": 0},
                                    {"min_confidence": 1.5}])
def test_bad_options_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        OcrOptions(**kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("font", FONTS)
def test_a_page_per_font(font: str) -> None:
    """Sixteen lines of a full-width A4 page at 300 dpi per font, <= 1 % character errors: the
    detector sees the whole page, recognition sixteen lines (full pages, every font, size and a
    skew: bench/ocr_bench.py, RESULTS.md)."""
    image, reference, _ = render_page((PROSE + " ") * 6, font, 10, max_lines=16)
    assert reference.count("\n") == 15
    text, _ = ocr_image(image, OPTIONS)
    assert character_error_rate(reference, text) <= 0.01, text
