"""Scanned pages through the whole job: a PDF of a text page and a scanned page keeps both, in
order, with their page numbers on the chunks; an image file is a one-page document read by OCR
with the engine and its confidence in the metadata; with `input.ocr=never` both become rejected
rows with their reasons, and the counts reconcile either way."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.helpers import run_rows
from tests.ocr_pages import render_page, text_and_scan_pdf

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
SCANNED = ("Before entering a robot cell press the stop button and wait until the amber light "
           "is steady. Report every near miss to the safety officer on duty.")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scanned") / "corpus"
    root.mkdir()
    page, _, _ = render_page(SCANNED, points=12, max_lines=3)
    (root / "manual.pdf").write_bytes(text_and_scan_pdf(
        ["Installation", "Unpack the arm and mount it on the base plate."], page))
    buffer = io.BytesIO()
    page.save(buffer, format="PNG")
    (root / "notice.png").write_bytes(buffer.getvalue())
    (root / "blank.png").write_bytes(_blank_png())
    return root


def _blank_png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (600, 400), 255).save(buffer, format="PNG")
    return buffer.getvalue()


def job(corpus: Path, output: Path, *overrides: str):
    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null", *overrides]))


@pytest.fixture(scope="module")
def first(corpus, tmp_path_factory):
    """The first run into a fresh index: read-only here (the rerun test works on a copy)."""
    return job(corpus, tmp_path_factory.mktemp("scanned-index") / "index")


def table(run_dir: str, name: str) -> list[dict]:
    return run_rows(run_dir, name)


def test_scanned_pages_are_read_in_order_with_their_pages(first) -> None:
    summary = first
    c = summary.counts
    assert summary.published and c["documents"] == c["kept"] + c["duplicate"] + c["rejected"] == 3
    documents = {row["doc_id"]: row for row in table(summary.run_dir, "documents")}
    manual, notice = documents["manual.pdf"], documents["notice.png"]
    assert manual["text"].startswith("Installation\nUnpack the arm and mount it on the base plate.")
    assert "safety officer" in manual["text"][manual["page_starts"][1]:]
    assert json.loads(manual["metadata"])["ocr_pages"] == [2]
    meta = json.loads(notice["metadata"])
    assert meta["ocr_engine"].startswith("rapidocr-onnxruntime") and meta["ocr_confidence"] > 0.8
    assert notice["format"] == "image" and "safety officer" in notice["text"]
    rejected = {row["doc_id"]: row["reason"] for row in table(summary.run_dir, "rejected")}
    assert rejected == {"blank.png": "no text found by OCR"}
    chunks = table(summary.run_dir, "chunks")
    for row in chunks:
        text = documents[row["doc_id"]]["text"]
        assert text[row["start"]:row["end"]] == row["text"]
    pages = {(row["doc_id"], row["page_start"], row["page_end"]) for row in chunks}
    assert ("notice.png", 1, 1) in pages
    assert max(end for doc, _, end in pages if doc == "manual.pdf") == 2


def test_with_ocr_off_scanned_pages_are_rejected_with_the_reason(corpus, tmp_path) -> None:
    summary = job(corpus, tmp_path / "index", "input.ocr=never")
    c = summary.counts
    assert c["documents"] == c["kept"] + c["duplicate"] + c["rejected"] == 3
    rejected = {row["doc_id"]: row["reason"] for row in table(summary.run_dir, "rejected")}
    assert rejected["notice.png"] == "image not read: OCR is off"
    assert rejected["blank.png"] == "image not read: OCR is off"
    documents = {row["doc_id"]: row for row in table(summary.run_dir, "documents")}
    assert "safety officer" not in documents["manual.pdf"]["text"]  # page 2 has no text layer


def test_a_rerun_reads_no_unchanged_page_by_ocr_again(corpus, first, tmp_path) -> None:
    """Each OCR'd page is kept under OUTPUT/_cache/ocr by its pixels: the rerun reads it from
    there (equal text), a damaged entry is read again, and a changed scan is OCR'd."""
    output = tmp_path / "index"
    shutil.copytree(first.output, output)
    entries = sorted((output / "_cache" / "ocr").rglob("*.json"))
    assert len(entries) == 3  # the PDF's scanned page, notice.png, blank.png
    again = job(corpus, output)
    assert again.published
    text = {r["doc_id"]: r["text"] for r in table(first.run_dir, "documents")}
    assert {r["doc_id"]: r["text"] for r in table(again.run_dir, "documents")} == text
    assert _counter(again.run_dir, "ocr_pages_read") == 0
    assert _counter(again.run_dir, "ocr_pages_cached") == 3
    entries[0].write_text("{not json", encoding="utf-8")  # a damaged entry: a miss
    third = job(corpus, output)
    assert _counter(third.run_dir, "ocr_pages_read") == 1
    assert {r["doc_id"]: r["text"] for r in table(third.run_dir, "documents")} == text


def _counter(run_dir: str, name: str) -> int:
    return json.loads((Path(run_dir) / "manifest.json").read_text())["ocr"][name.removeprefix("ocr_pages_")]
