"""PDF pages per second: chunkline's PDF reader against PDFium's text extraction alone.

The library alone is what any PDF reader built on pypdfium2 pays: open the file, and for each
page load it, build its text page and take the whole text. chunkline's reader
(``chunkline.readers.decode_file`` on a ``.pdf``) adds the %%EOF check, the outline, the
document information, the page-start table and the Document; with ``+ clean`` also the cleaning
stage that carries the page starts (``chunkline.clean.clean_marked``). Target: the reader
within 1.2x of the library alone.

Inputs: PDFs made here with ReportLab from the standard library's documentation text (real
prose, a bookmark per section), plus any PDF paths given on the command line (real-world files:
fonts, columns, images). Each measure is the best of ``--repeats`` interleaved rounds.

    python bench/pdf_bench.py [--docs 40] [--pages 20] [--repeats 5] [extra.pdf ...]
"""

from __future__ import annotations

import argparse
import io
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chunkline.clean import CleanOptions, clean_marked  # noqa: E402
from chunkline.readers import ReadOptions, decode_file  # noqa: E402


def prose_lines() -> list[str]:
    """Lines of real English: the standard library's module docstrings and .txt/.rst docs."""
    lines: list[str] = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.startswith('"""'):
            doc = text[3:text.find('"""', 3)]
            lines.extend(line.strip() for line in doc.splitlines() if len(line.strip()) > 20)
    return [line[:95] for line in lines]


def make_pdfs(count: int, pages: int) -> list[bytes]:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    lines = prose_lines()
    made, cursor = [], 0
    for number in range(count):
        buffer = io.BytesIO()
        pdf = canvas.Canvas(buffer, pagesize=A4, invariant=1)
        pdf.setTitle(f"Document {number}")
        for page in range(pages):
            pdf.bookmarkPage(f"p{page}")
            pdf.addOutlineEntry(f"Section {page + 1}", f"p{page}", level=0)
            y = 800
            while y > 60:
                pdf.drawString(60, y, lines[cursor % len(lines)])
                cursor += 1
                y -= 14
            pdf.showPage()
        pdf.save()
        made.append(buffer.getvalue())
    return made


def library_alone(data: bytes) -> int:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    try:
        for index in range(len(pdf)):
            page = pdf[index]
            textpage = page.get_textpage()
            textpage.get_text_range()
            textpage.close()
            page.close()
        return len(pdf)
    finally:
        pdf.close()


def reader(data: bytes) -> int:
    [doc] = decode_file("/bench/doc.pdf", data, "/bench", ReadOptions(max_document_bytes=None))
    return len(doc.page_starts)


def reader_and_clean(data: bytes) -> int:
    [doc] = decode_file("/bench/doc.pdf", data, "/bench", ReadOptions(max_document_bytes=None))
    clean_marked(doc.text, doc.page_starts, CleanOptions())
    return len(doc.page_starts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=40)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("extra", nargs="*", type=Path, help="more PDF files to read")
    args = parser.parse_args(argv)
    corpora = {"generated": make_pdfs(args.docs, args.pages)}
    extra = [path.read_bytes() for path in args.extra if path.exists()]
    if extra:
        corpora["given files"] = extra
    systems = {"pypdfium2 alone": library_alone, "chunkline reader": reader,
               "chunkline reader + clean": reader_and_clean}
    print("| corpus | PDFs | pages | system | best s | pages/s | vs library |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for name, pdfs in corpora.items():
        best = {system: float("inf") for system in systems}
        pages = 0
        for _ in range(args.repeats):
            for system, read in systems.items():  # interleaved: drift hits every system alike
                started = time.perf_counter()
                pages = sum(read(data) for data in pdfs)
                best[system] = min(best[system], time.perf_counter() - started)
        base = best["pypdfium2 alone"]
        for system, seconds in best.items():
            print(f"| {name} | {len(pdfs)} | {pages} | {system} | {seconds:.3f} | "
                  f"{pages / seconds:,.0f} | {seconds / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
