"""Text from images of pages: scanned PDF pages and PNG/JPEG/TIFF files, by OCR.

The engine is RapidOCR (``rapidocr-onnxruntime``, Apache-2.0): PaddleOCR's PP-OCRv4 text
detector (DB, Liao et al., "Real-time Scene Text Detection with Differentiable Binarization",
AAAI 2020) and its SVTR-LCNet line recognizer (CTC), as ONNX models inside the wheel, run on
ONNX Runtime's CPU provider. Nothing is downloaded at run time. The models read Chinese and
English (the recognizer's 6,624 symbols: 6,270 CJK ideographs, ASCII letters, digits and
punctuation, full-width forms); other scripts come out wrong or not at all.

How a page is read (:func:`ocr_image`):

- lines are *found* on the page scaled to at most :attr:`OcrOptions.detect_max_side` pixels
  (a line of 10 pt text at 150 dpi is found as well as at 300 dpi, at a tenth of the cost), and
  *read* from the full-resolution image: RapidOCR's own pipeline crops the reduced image, and
  at 2000 px a page of 10 pt text lost spaces between words (CER 16 % against 0 % on it);
- RapidOCR's per-line 0/180 degree classifier is not used per line: on upright Latin lines it
  turned one line in ten upside down (and lost it). It votes for the page instead: when most
  lines read as upside down, the page is turned and read again;
- lines are put in reading order by a recursive XY-cut (Nagy and Seth, "Hierarchical
  representation of optically scanned documents", ICPR 1984) on the page's skew-corrected
  boxes: a vertical gap at least a line high through a block splits it into columns, read
  left to right; otherwise the block is cut at its widest horizontal gaps, read top to bottom.
  Boxes that share a line are joined by a space, lines by a newline;
- full-width punctuation in Latin text ("，" for ",", which the Chinese-trained recognizer
  writes) is made ASCII; in Chinese text it is kept.

A pure library: never imports Apache Beam; the engine is loaded once per process and thread
count (:func:`_engine`), on first use.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Iterator, Literal, Protocol

import numpy as np
from annotated_types import Ge, Le

from chunkline.options import check_fields, default_threads, help_text
from chunkline.pages import PdfText, join_pages
from chunkline.extras import require

if TYPE_CHECKING:
    from PIL import Image

ENGINE_PACKAGE = "rapidocr-onnxruntime"
ENGINE_MODELS = "PP-OCRv4 det+rec (ch, en)"
# A page image larger than this is rendered (or read) at a lower resolution: an A2 page at
# 300 dpi is 35 Mpx, and every pixel is 3 bytes through OpenCV, more in the detector.
MAX_PAGE_PIXELS = 40_000_000
# RapidOCR's page-turn vote: a line is upside down when its classifier says "180" at least this
# sure (RapidOCR's own cls_thresh).
_TURN_SCORE = 0.9
NO_TEXT = "no text found by OCR"
# The recognizer learned Chinese text and writes its full-width punctuation (U+FF01-FF5E:
# "，" "）") in Latin text too. Such a character with no CJK neighbour is made the ASCII one
# it is a width variant of (Unicode's own mapping, U+FF01 - 0xFEE0 = "!"); in Chinese text it
# stays.
_CJK = "\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_LATIN_FULLWIDTH = re.compile(f"(?<![{_CJK}])[\uff01-\uff5e](?![{_CJK}])")


@dataclass(frozen=True)
class OcrOptions:
    """When and how pages are read by OCR."""

    mode: Literal["auto", "always", "never"] = field(default="auto", metadata=help_text(
        "auto: a PDF page with no text layer is read by OCR; always: every PDF page is (its text "
        "layer ignored); never: no OCR (a PDF with no text layer is rejected, images are not "
        "read)."))
    dpi: Annotated[int, Ge(72), Le(600)] = field(default=300, metadata=help_text(
        "Resolution a PDF page is rendered at for OCR (at 300, 10 to 14 pt text is read at "
        "0.05 to 1 % character errors in bench/ocr_bench.py)."))
    detect_max_side: Annotated[int, Ge(736)] = field(default=2000, metadata=help_text(
        "Longest side, in pixels, of the image the text detector sees (lines are read from the "
        "full image). Higher finds smaller text, at a cost growing with its square."))
    min_confidence: Annotated[float, Ge(0), Le(1)] = field(default=0.5, metadata=help_text(
        "Recognized lines scored below this are dropped (RapidOCR's text_score)."))
    threads: Annotated[int, Ge(1)] | None = field(default=None, metadata=help_text(
        "ONNX Runtime threads per OCR call; null: OMP_NUM_THREADS when set, else one per core. "
        "Set 1 when a worker runs one process per core."))

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class _Line:
    text: str
    score: float
    # The box in skew-corrected page coordinates (x to the right, y down), end-exclusive.
    x0: float
    y0: float
    x1: float
    y1: float


def engine_name() -> str:
    """The engine and models, as recorded in a document's metadata: e.g.
    ``rapidocr-onnxruntime 1.4.4 PP-OCRv4 det+rec (ch, en)``."""
    from importlib.metadata import version

    return f"{ENGINE_PACKAGE} {version(ENGINE_PACKAGE)} {ENGINE_MODELS}"


@functools.lru_cache(maxsize=None)
def _engine(threads: int | None):
    """One RapidOCR per process and thread count: loading its three ONNX sessions takes ~0.5 s."""
    RapidOCR = require("ocr", "rapidocr_onnxruntime").RapidOCR

    # -1: RapidOCR leaves ONNX Runtime's default (a thread per core).
    threads = threads or default_threads()
    return RapidOCR(intra_op_num_threads=-1 if threads is None else threads)


class PageCache(Protocol):
    """Where a page's OCR result is kept between runs, by :func:`page_key` (a transform keeps it
    beside the index, ``OUTPUT/_cache/ocr/``): a nightly rerun reads an unchanged scan once."""

    def get(self, key: str) -> tuple[str, float | None] | None: ...

    def put(self, key: str, text: str, confidence: float | None) -> None: ...


# The cache the readers below consult, set for the span of one call by :func:`using_page_cache`
# (a context variable, as decimal's local context: each thread and task sees its own).
_PAGE_CACHE: contextvars.ContextVar[PageCache | None] = contextvars.ContextVar(
    "chunkline_ocr_page_cache", default=None)


@contextlib.contextmanager
def using_page_cache(cache: PageCache | None) -> Iterator[None]:
    """``with using_page_cache(cache): decode_file(...)``: every page OCR'd meanwhile is looked
    up in ``cache`` first and stored there after."""
    token = _PAGE_CACHE.set(cache)
    try:
        yield
    finally:
        _PAGE_CACHE.reset(token)


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """This module's source: a change to how lines are ordered and joined reads every page anew."""
    return hashlib.blake2b(Path(__file__).read_bytes(), digest_size=8).hexdigest()


def page_key(image: Image.Image, options: OcrOptions) -> str:
    """The page's pixels, the engine and the options that change what it reads: equal keys read
    equal text (``dpi`` shapes the pixels of a rendered PDF page, so it is in them)."""
    digest = hashlib.blake2b(digest_size=20)
    for part in (engine_name(), _code_digest(), image.mode, f"{image.size}",
                 f"{options.detect_max_side} {options.min_confidence}"):
        digest.update(part.encode())
        digest.update(b"\x00")
    digest.update(image.tobytes())
    return digest.hexdigest()


def _ocr_page(image: Image.Image, options: OcrOptions) -> tuple[str, float | None]:
    """:func:`ocr_image`, through the page cache when one is set."""
    cache = _PAGE_CACHE.get()
    if cache is None:
        return ocr_image(image, options)
    key = page_key(image, options)
    found = cache.get(key)
    if found is not None:
        return found
    text, confidence = ocr_image(image, options)
    cache.put(key, text, confidence)
    return text, confidence


def ocr_image(image: Image.Image | np.ndarray, options: OcrOptions = OcrOptions()
              ) -> tuple[str, float | None]:
    """The text of one page image in reading order (lines joined by newlines, columns one after
    another) and the recognizer's mean confidence over its characters, 0..1; ("", None) when no
    line is found. ``image``: a PIL image (any mode) or an RGB/grey uint8 array."""
    page = _bgr(image)
    found, upside_down = _read_lines(page, options)
    if upside_down:
        found, _ = _read_lines(np.ascontiguousarray(page[::-1, ::-1]), options)
    if not found:
        return "", None
    height = float(np.median([line.y1 - line.y0 for line in found]))
    ordered = _reading_order(found, gutter=height, tolerance=height / 4)
    text = _join(ordered)
    weights = [len(line.text.replace(" ", "")) for line in ordered]
    confidence = sum(w * line.score for w, line in zip(weights, ordered)) / max(1, sum(weights))
    return text, confidence


def read_image(data: bytes, options: OcrOptions = OcrOptions()) -> PdfText | str:
    """A PNG, JPEG or TIFF file read by OCR, as a paged text (a multi-page TIFF: one page per
    frame, joined like a PDF's pages; ``ocr_pages`` all of them), or the reason it has none:
    "unreadable image (...)", "no text found by OCR", "OCR is off". Never raises for bad input."""
    if options.mode == "never":
        return "image not read: OCR is off"
    require("ocr", "rapidocr_onnxruntime")  # fail before reading, not after
    from PIL import Image, ImageOps, ImageSequence, UnidentifiedImageError

    texts: list[str] = []
    scores: list[tuple[float, int]] = []
    try:
        with Image.open(io.BytesIO(data)) as opened:
            for frame in ImageSequence.Iterator(opened):
                # A phone photo is stored sideways with an EXIF turn to apply (TIFF/EXIF 0x0112).
                page = _bounded(ImageOps.exif_transpose(frame))
                page.load()
                try:
                    text, confidence = _ocr_page(page, options)
                except Exception as exc:  # noqa: BLE001 - as in ocr_pdf_pages: a reason, not a crash
                    return f"OCR failed on page {len(texts) + 1} ({type(exc).__name__}: {exc})"
                texts.append(text)
                if confidence is not None:
                    scores.append((confidence, len(text)))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError,
            Image.DecompressionBombError) as exc:
        # PIL reports a truncated or corrupt file as OSError/SyntaxError/EOFError by format.
        return f"unreadable image ({type(exc).__name__}: {exc})"
    if not any(text.strip() for text in texts):
        return f"{NO_TEXT} in {len(texts)} page(s)" if len(texts) > 1 else NO_TEXT
    text, starts = join_pages(texts)
    return PdfText(text, starts, (), {}, ocr_engine=engine_name(),
                   ocr_confidence=mean_confidence(scores),
                   ocr_pages=tuple(range(1, len(texts) + 1)))


def ocr_pdf_pages(pdf, pages: list[str], options: OcrOptions
                  ) -> tuple[list[str], tuple[int, ...], list[tuple[float, int]]] | str:
    """For :func:`chunkline.pdf.read_pdf`: the open pypdfium2 document's page texts with the
    pages ``options`` picks (``auto``: those whose text layer is blank; ``always``: all)
    rendered at ``options.dpi`` and read by OCR instead; the 1-based pages read, and their
    (confidence, characters). A reason string when OCR fails on a page."""
    picked = [index for index, text in enumerate(pages)
              if options.mode == "always" or (options.mode == "auto" and not text.strip())]
    texts, scores = list(pages), []
    for index in picked:
        page = pdf[index]
        try:
            width, height = page.get_size()  # PDF units, 1/72 inch
            scale = options.dpi / 72
            scale = min(scale, math.sqrt(MAX_PAGE_PIXELS / max(1.0, width * height)))
            image = page.render(scale=scale).to_pil()
        finally:
            page.close()
        try:
            text, confidence = _ocr_page(image, options)
        except Exception as exc:  # noqa: BLE001 - one page's failure rejects its document with the reason, never the bundle
            return f"OCR failed on page {index + 1} ({type(exc).__name__}: {exc})"
        texts[index] = text
        if confidence is not None:
            scores.append((confidence, len(text)))
    return texts, tuple(index + 1 for index in picked), scores


def mean_confidence(scores: list[tuple[float, int]]) -> float | None:
    """The character-weighted mean of (confidence, characters) pairs, to 4 places; None when
    nothing was read."""
    weight = sum(chars for _, chars in scores)
    if not weight:
        return None
    return round(sum(score * chars for score, chars in scores) / weight, 4)


def _bounded(image: Image.Image) -> Image.Image:
    pixels = image.width * image.height
    if pixels <= MAX_PAGE_PIXELS:
        return image
    factor = math.sqrt(MAX_PAGE_PIXELS / pixels)
    return image.resize((max(1, int(image.width * factor)), max(1, int(image.height * factor))))


def _bgr(image) -> np.ndarray:
    """A 3-channel uint8 BGR array (OpenCV's order, what RapidOCR's models were fed)."""
    import cv2

    if not isinstance(image, np.ndarray):
        if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
            # Transparent pixels over white: a PNG of black text on nothing is black on white,
            # not black on black.
            from PIL import Image as PILImage

            rgba = image.convert("RGBA")
            background = PILImage.new("RGBA", rgba.size, (255, 255, 255, 255))
            image = PILImage.alpha_composite(background, rgba)
        if image.mode.startswith("I;16") or image.mode in ("I", "F"):
            array = np.asarray(image, dtype=np.float64)
            top = array.max() or 1.0
            image = (array * (255.0 / top)).clip(0, 255).astype(np.uint8)
        else:
            image = np.asarray(image.convert("RGB"))
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    return cv2.cvtColor(np.ascontiguousarray(image[:, :, :3]), cv2.COLOR_RGB2BGR)


def _read_lines(page: np.ndarray, options: OcrOptions) -> tuple[list[_Line], bool]:
    """Detect on a reduced copy, recognize full-resolution crops; the lines read at
    ``min_confidence`` or more, and whether the page is upside down (the classifier's vote
    over every box found, at least two: an upside-down line is mostly read below the bound)."""
    import cv2

    engine = _engine(options.threads)
    height, width = page.shape[:2]
    scale = min(1.0, options.detect_max_side / max(height, width))
    small = page if scale == 1.0 else cv2.resize(
        page, (max(1, round(width * scale)), max(1, round(height * scale))),
        interpolation=cv2.INTER_AREA)
    boxes, _ = engine.text_det(small)
    if boxes is None or len(boxes) == 0:
        return [], False
    boxes = np.asarray(boxes, dtype=np.float32) / scale
    crops = engine.get_crop_img_list(page, list(boxes))
    _, turns, _ = engine.text_cls(crops)  # only the vote: the crops are read as they are
    read, _ = engine.text_rec(crops)
    angle = _skew(boxes)
    cos, sin = math.cos(angle), math.sin(angle)
    turned = sum(label == "180" and score >= _TURN_SCORE for label, score in turns)
    lines = []
    for box, (text, score, *_) in zip(boxes, read):
        text = ascii_punctuation(" ".join(text.split()))
        if not text or float(score) < options.min_confidence:
            continue
        # Rotate by -angle: the page's lines become horizontal, columns vertical.
        xs = box[:, 0] * cos + box[:, 1] * sin
        ys = -box[:, 0] * sin + box[:, 1] * cos
        line = _Line(text, float(score), float(xs.min()), float(ys.min()), float(xs.max()),
                     float(ys.max()))
        lines.append(line)
    return lines, len(turns) >= 2 and turned * 2 > len(turns)


def ascii_punctuation(text: str) -> str:
    """``text`` with each full-width punctuation mark or letter that has no CJK neighbour made
    ASCII: ``"PROFITS，WHETHER"`` -> ``"PROFITS,WHETHER"``; ``"中文，中文"`` unchanged."""
    return _LATIN_FULLWIDTH.sub(lambda match: chr(ord(match.group()) - 0xFEE0), text)


def _skew(boxes: np.ndarray) -> float:
    """The page's skew in radians: the median slope of the top edges of boxes that are lines
    (at least twice as wide as high; DB boxes are (top-left, top-right, bottom-right,
    bottom-left))."""
    angles = []
    for box in boxes:
        dx, dy = box[1] - box[0]
        high = float(np.linalg.norm(box[3] - box[0]))
        if math.hypot(dx, dy) >= 2 * high > 0:
            angles.append(math.atan2(dy, dx))
    return float(np.median(angles)) if angles else 0.0


def _reading_order(lines: list[_Line], gutter: float, tolerance: float) -> list[_Line]:
    """Recursive XY-cut: columns (vertical gaps at least ``gutter`` wide through the whole block)
    left to right; else the block's widest horizontal gaps (within ``tolerance`` of the widest),
    top to bottom; a block with neither is one line, read left to right."""
    if len(lines) <= 1:
        return list(lines)
    columns = _split(lines, lambda line: (line.x0, line.x1), min_gap=gutter)
    if len(columns) > 1:
        return [line for column in columns for line in _reading_order(column, gutter, tolerance)]
    # Rows by the middle half of each box: the detector pads boxes (DB's unclip), so the boxes
    # of tightly set lines touch or overlap while their middles stay apart.
    rows = _split(lines, _middle, min_gap=0.0, widest_within=tolerance)
    if len(rows) > 1:
        return [line for row in rows for line in _reading_order(row, gutter, tolerance)]
    return sorted(lines, key=lambda line: line.x0)


def _middle(line: _Line) -> tuple[float, float]:
    quarter = (line.y1 - line.y0) / 4
    return line.y0 + quarter, line.y1 - quarter


def _split(lines: list[_Line], span, min_gap: float, widest_within: float | None = None
           ) -> list[list[_Line]]:
    """``lines`` cut at the gaps of their projection on one axis (``span`` gives each line's
    interval): every gap wider than ``min_gap``, or with ``widest_within``, only those within
    that much of the widest."""
    ordered = sorted(lines, key=lambda line: span(line)[0])
    gaps = []  # (index where the next group starts, gap width)
    reach = span(ordered[0])[1]
    for index, line in enumerate(ordered[1:], 1):
        start, end = span(line)
        if start - reach > min_gap:
            gaps.append((index, start - reach))
        reach = max(reach, end)
    if widest_within is not None and gaps:
        widest = max(width for _, width in gaps)
        gaps = [(index, width) for index, width in gaps if width >= widest - widest_within]
    bounds = [0, *(index for index, _ in gaps), len(ordered)]
    return [ordered[a:b] for a, b in zip(bounds, bounds[1:])]


def _join(ordered: list[_Line]) -> str:
    """Lines in order: a box that shares most of the previous box's height and starts to its
    right continues its line (a space; the detector's padded boxes of one line may overlap),
    anything else starts a new line."""
    out = [ordered[0].text]
    for before, line in zip(ordered, ordered[1:]):
        overlap = min(before.y1, line.y1) - max(before.y0, line.y0)
        same_line = overlap > 0.5 * min(before.y1 - before.y0, line.y1 - line.y0) and line.x0 > before.x0
        out.append((" " if same_line else "\n") + line.text)
    return "".join(out)
