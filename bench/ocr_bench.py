"""OCR accuracy and speed (issue 30): RapidOCR (PP-OCRv4, ONNX Runtime) through chunkline.ocr.

Pages: A4 at 300 dpi, rendered with PIL from known English text (the prose paragraphs of the
Python licence, ``LICENSE.txt`` of the standard library: names, dates, URLs, all-capital
disclaimers), each page filled from where the previous one stopped, in DejaVu Sans, Serif and
Sans Mono at 10, 12 and 14 pt, straight and turned by 2 degrees, plus one two-column page
(Sans, 10 pt, 0.3 inch gutter). Accuracy: character error rate, the edit distance over the
reference's length with runs of whitespace as one space (``tests/ocr_pages.py``); target
<= 3 %. Speed: pages per second on one core (ONNX Runtime, OpenCV and OpenMP held to one
thread), of :func:`chunkline.ocr.ocr_image` on the page images and, end to end, of
:func:`chunkline.pdf.read_pdf` on the same pages as a scanned PDF (PDFium renders each at
300 dpi first).

    python bench/ocr_bench.py [--skip-pdf] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def licence_prose() -> str:
    """The licence's prose paragraphs (not its release table, not its underlines), one string."""
    text = (Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt").read_text(encoding="utf-8")
    keep = []
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines or any(line.startswith((" ", "\t")) or set(line) <= set("=-") for line in lines):
            continue
        keep.append(" ".join(" ".join(lines).split()))
    return " ".join(keep)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="threads per OCR call (1: per-core figure)")
    parser.add_argument("--skip-pdf", action="store_true", help="only the page images, not read_pdf")
    args = parser.parse_args()
    # Before numpy, OpenCV and ONNX Runtime start their pools.
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(args.threads)
    import cv2

    cv2.setNumThreads(args.threads)
    from chunkline.ocr import OcrOptions, engine_name, ocr_image
    from chunkline.pdf import PAGE_SEPARATOR, read_pdf
    from tests.ocr_pages import FONTS, character_error_rate, edit_distance, render_page, scanned_pdf

    options = OcrOptions(threads=args.threads)
    words = licence_prose().split()
    cases = [(font, points, skew, 1) for font in FONTS for points in (10, 12, 14) for skew in (0.0, 2.0)]
    cases.append(("DejaVuSans", 10, 0.0, 2))
    pages, cursor, used = [], 0, 0
    for font, points, skew, columns in cases:
        if not skew:  # a new font or size starts where the last page stopped; its turned page
            cursor = (cursor + used) % len(words)  # holds the same text, so the two compare
        text = " ".join(words[cursor:] + words[:cursor])
        image, reference, used = render_page(text, font, points, dpi=300, skew_degrees=skew,
                                             columns=columns)
        pages.append((font, points, skew, columns, image, reference))

    ocr_image(pages[0][4].crop((0, 0, 2480, 600)), options)  # load the models, warm the sessions
    print(f"engine: {engine_name()}; threads: {args.threads}; pages: {len(pages)}")
    print("| font | pt | skew | columns | chars | CER % | s |\n|---|---:|---:|---:|---:|---:|---:|")
    errors = chars = spaces = 0
    seconds = 0.0
    for font, points, skew, columns, image, reference in pages:
        start = time.perf_counter()
        found, _ = ocr_image(image, options)
        took = time.perf_counter() - start
        seconds += took
        norm = " ".join(reference.split())
        wrong = edit_distance(norm, " ".join(found.split()))
        errors, chars = errors + wrong, chars + len(norm)
        # The recognizer's commonest error: a space between words not read ("ORWARRANTY").
        spaces += max(0, norm.count(" ") - " ".join(found.split()).count(" "))
        print(f"| {font} | {points} | {skew:g} | {columns} | {len(norm)} | "
              f"{100 * character_error_rate(reference, found):.2f} | {took:.2f} |")
    print(f"\nall pages: CER {100 * errors / chars:.3f} % ({errors} edits in {chars} chars; "
          f"{100 * spaces / chars:.3f} % net missing spaces); "
          f"ocr_image {len(pages) / seconds:.3f} pages/s ({seconds / len(pages):.2f} s/page, "
          f"{chars / seconds:.0f} chars/s) on {args.threads} thread(s)")
    if args.skip_pdf:
        return
    data = scanned_pdf([page[4] for page in pages])
    start = time.perf_counter()
    found = read_pdf(data, options)
    took = time.perf_counter() - start
    assert not isinstance(found, str), found
    ends = [*found.page_starts[1:], len(found.text) + len(PAGE_SEPARATOR)]
    texts = [found.text[a:b - len(PAGE_SEPARATOR)] for a, b in zip(found.page_starts, ends)]
    wrong = sum(edit_distance(" ".join(page[5].split()), " ".join(text.split()))
                for page, text in zip(pages, texts))
    print(f"read_pdf of the {len(pages)} pages as a scanned PDF ({len(data) / 1e6:.1f} MB, "
          f"images as PIL stores them): {len(pages) / took:.3f} pages/s ({took / len(pages):.2f} "
          f"s/page), CER {100 * wrong / chars:.3f} %, mean confidence {found.ocr_confidence}")


if __name__ == "__main__":
    main()
