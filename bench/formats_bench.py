"""Throughput of chunkline's readers of structured formats (``chunkline/readers/office.py``,
``tabular.py``, ``ebook.py``, ``mail.py``, ``notebook.py``, ``rst.py``) against Microsoft's
markitdown on the same files, in one run; and the heading paths each gives for one DOCX and one
PPTX, side by side.

Both sides take bytes and return Markdown: chunkline's ``decode_file`` (which also builds the
Document: metadata, limits, page starts), markitdown's ``MarkItDown().convert_stream`` with the
file's extension as a hint (its plug-ins off). The files are generated here with each format's
own writer (python-docx, python-pptx, openpyxl, ebooklib, the standard library's email and csv,
nbformat) from real prose (the standard library's docstrings). Each figure is the best of
``--repeats`` rounds; MB/s over the file's bytes, and slides/s for the deck.

markitdown (and pandas, which its Excel converter needs) is kept out of the project's
environment; install it beside it once, then run:

    .venv/bin/pip install --target .venv/bench-markitdown 'markitdown[docx,pptx,xlsx]==0.1.9'
    .venv/bin/python bench/formats_bench.py [--scale 1] [--repeats 3]
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
# Appended, not prepended: the project's own numpy, lxml and openpyxl stay the ones imported.
sys.path.append(str(ROOT / ".venv" / "bench-markitdown"))

from chunkline.readers import ReadOptions, decode_file  # noqa: E402
from chunkline.splitting.structure import headings  # noqa: E402
from tests.readers.helpers import epub_bytes, message, notebook_bytes, xlsx_bytes  # noqa: E402


def prose(count: int) -> list[str]:
    """Paragraphs of real English: module docstrings of the standard library."""
    found: list[str] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.startswith('"""'):
            found.extend(" ".join(p.split()) for p in text[3:text.find('"""', 3)].split("\n\n") if len(p) > 80)
        if len(found) >= count:
            break
    return (found * (count // max(len(found), 1) + 1))[:count]


def make_docx(scale: int) -> bytes:
    import docx

    document = docx.Document()
    paragraphs = iter(prose(400 * scale))
    for chapter in range(1, 9 * scale + 1):
        document.add_heading(f"Chapter {chapter}", 1)
        for section in range(1, 4):
            document.add_heading(f"Section {chapter}.{section}", 2)
            for _ in range(12):
                document.add_paragraph(next(paragraphs))
            table = document.add_table(rows=6, cols=3)
            for r in range(6):
                for c in range(3):
                    table.cell(r, c).text = f"r{r} c{c}" if r else f"column {c}"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_pptx(scale: int) -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    paragraphs = iter(prose(200 * scale))
    for number in range(1, 40 * scale + 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Topic {number}"
        body = slide.placeholders[1].text_frame
        body.text = next(paragraphs)[:200]
        for level in (1, 1, 2):
            item = body.add_paragraph()
            item.text, item.level = next(paragraphs)[:120], level
        if number % 5 == 0:
            table = slide.shapes.add_table(4, 3, Inches(1), Inches(5), Inches(6), Inches(1)).table
            for r in range(4):
                for c in range(3):
                    table.cell(r, c).text = f"v{r}{c}"
        slide.notes_slide.notes_text_frame.text = f"Remember topic {number}."
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def make_files(scale: int) -> dict[str, tuple[bytes, int]]:
    """name -> (bytes, pages: slides for a deck, else 0)."""
    words = prose(300 * scale)
    rows = [["id", "station", "reading", "note"]] + [
        [i, f"station {i % 40}", i * 0.25, words[i % len(words)][:60]] for i in range(5000 * scale)]
    csv_text = "\n".join(",".join(f'"{v}"' if isinstance(v, str) else str(v) for v in row) for row in rows)
    mail = message(body="\n\n".join(words[:60]))
    deck = make_pptx(scale)
    return {
        "manual.docx": (make_docx(scale), 0),
        "deck.pptx": (deck, 40 * scale),
        "readings.xlsx": (xlsx_bytes({"Readings": rows}), 0),
        "readings.csv": (csv_text.encode(), 0),
        "note.eml": (bytes(mail), 0),
        "analysis.ipynb": (notebook_bytes([("markdown", f"## Step {i}\n\n{w}") if i % 2 else ("code", f"x{i} = {i}\nprint(x{i})")
                                           for i, w in enumerate(words[:200])]), 0),
        "book.epub": (epub_bytes([(f"c{i}.xhtml", f"Chapter {i}", f"<h1>Chapter {i}</h1>" + "".join(
            f"<p>{w}</p>" for w in words[i * 10:(i + 1) * 10])) for i in range(20)]), 0),
    }


def chunkline_read(name: str, data: bytes) -> str:
    [doc] = [r for r in decode_file(f"bench/{name}", data, "bench", ReadOptions()) if hasattr(r, "text")][:1]
    return doc.text


def markitdown_reader():
    try:
        from markitdown import MarkItDown, StreamInfo
    except ImportError as exc:
        print(f"markitdown not importable ({exc}): only chunkline is measured", file=sys.stderr)
        return None
    converter = MarkItDown(enable_plugins=False)

    def read(name: str, data: bytes) -> str:
        extension = "." + name.rsplit(".", 1)[-1]
        try:
            return converter.convert_stream(io.BytesIO(data), stream_info=StreamInfo(extension=extension)).markdown
        except Exception:
            if extension != ".docx":
                raise
        # markitdown 0.1.9's DOCX pre-processing (math to LaTeX, through BeautifulSoup's "xml"
        # parser) drops the WordprocessingML namespace here (bs4 4.13-4.15, lxml 6.2), and
        # mammoth then finds no body. Measured instead: the rest of its DOCX path, mammoth to
        # HTML and markdownify to ATX Markdown.
        import mammoth
        from markdownify import markdownify

        return markdownify(mammoth.convert_to_html(io.BytesIO(data)).value, heading_style="ATX")

    return read


def best(read, name: str, data: bytes, repeats: int) -> tuple[float, str | None, str]:
    times, text, error = [], None, ""
    for _ in range(repeats):
        start = time.perf_counter()
        try:
            text = read(name, data)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot read a format says so
            return float("nan"), None, f"{type(exc).__name__}"
        times.append(time.perf_counter() - start)
    return min(times), text, error


def heading_paths(text: str) -> list[str]:
    stack: list[str] = []
    paths = []
    for found in headings(text):
        stack = stack[: found.level - 1] + [found.title]
        paths.append(" > ".join(stack))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    files = make_files(args.scale)
    peer = markitdown_reader()
    print("| file | KB | chunkline s | chunkline MB/s | markitdown s | markitdown MB/s | ratio | chunkline headings / tables | markitdown headings / tables |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    texts: dict[str, tuple[str, str | None]] = {}
    for name, (data, pages) in files.items():
        ours, our_text, _ = best(chunkline_read, name, data, args.repeats)
        theirs, their_text, error = best(peer, name, data, args.repeats) if peer else (float("nan"), None, "absent")
        texts[name] = (our_text, their_text)
        mb = len(data) / 1e6
        def rate(t: float) -> str:
            return f"{mb / t:.2f}" + (f" ({pages / t:.0f} slides/s)" if pages else "") if t == t else error or "n/a"

        def shape(t: str) -> str:
            return f"{len(headings(t))} / {t.count(chr(10) + '| ---')}" if t else "-"
        ratio = f"{theirs / ours:.1f}x" if theirs == theirs else "-"
        print(f"| {name} | {len(data) / 1e3:,.0f} | {ours:.3f} | {rate(ours)} | "
              f"{theirs:.3f} | {rate(theirs)} | {ratio} | {shape(our_text)} | {shape(their_text)} |")
    for name in ("manual.docx", "deck.pptx"):
        ours, theirs = texts[name]
        left, right = heading_paths(ours)[:8], heading_paths(theirs or "")[:8]
        print(f"\nHeading paths of {name} (first 8): chunkline | markitdown")
        for i in range(max(len(left), len(right))):
            print(f"  {left[i] if i < len(left) else '':<40} | {right[i] if i < len(right) else ''}")


if __name__ == "__main__":
    main()
