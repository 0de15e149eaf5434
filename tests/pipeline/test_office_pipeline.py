"""Office files and their OpenDocument counterparts (written by LibreOffice), a workbook, a CSV,
a mail with an attachment, a notebook, an EPUB and an .rst file through the whole job: counts
reconcile, every chunk is its document's text at its offsets, a deck's chunks carry their slide
numbers as pages, a sheet's header is repeated, the bad files are rejected rows with their
reasons."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.readers.helpers import (
    LIBREOFFICE_BULLETS, docx_bytes, epub_bytes, manual_docx, message, notebook_bytes, pptx_bytes,
    quarterly_deck, untitled_slide_deck, xlsx_bytes, zip_bytes,
)
from tests.readers.test_text_formats import RST

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def table(run_dir: str, name: str) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(Path(run_dir).glob(f"{name}-*.parquet"))])


# The OpenDocument files hold the text of their Office sources: read as duplicates, they would
# not be split. Exact dedupe is off here, so both are.
OPENDOCUMENT = ("arm.odt", "q.odp", "readings.ods")


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, libreoffice_files):
    corpus = tmp_path_factory.mktemp("office") / "corpus"
    corpus.mkdir()
    for name in OPENDOCUMENT:
        (corpus / name).write_bytes(libreoffice_files[name])
    (corpus / "arm.docx").write_bytes(docx_bytes(manual_docx))
    (corpus / "q.pptx").write_bytes(pptx_bytes(quarterly_deck))
    (corpus / "setup.pptx").write_bytes(pptx_bytes(untitled_slide_deck))
    rows = [["station", "reading"]] + [[f"station {i}", i * 10] for i in range(120)]
    (corpus / "readings.xlsx").write_bytes(xlsx_bytes({"Readings": rows}))
    (corpus / "parts.csv").write_text("part,torque\nbase,40\nwrist,25\n")
    mail = message(attachments=(("plan.md", b"# Plan\n\nReplace the dock's charging board.", "text/markdown"),))
    (corpus / "dock.eml").write_bytes(bytes(mail))
    (corpus / "n.ipynb").write_bytes(notebook_bytes([("markdown", "# Readings\n\nPlot them."),
                                                     ("code", "import csv")]))
    (corpus / "arm.epub").write_bytes(epub_bytes([("c1.xhtml", "Care", "<p>Oil the joints monthly.</p>")]))
    (corpus / "guide.rst").write_bytes(RST)
    (corpus / "renamed.docx").write_bytes(b"plain text with an Office name")
    (corpus / "notes.xlsx").write_bytes(zip_bytes({"notes.txt": b"hello"}))
    result = run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={corpus.parent / 'index'}", "embed=null",
        "dedupe.exact=false", "dedupe.near=null", "split.max_tokens=48", "split.merge_sections_below=null"]))
    return result


def test_counts_reconcile_and_bad_files_are_rejected(indexed) -> None:
    assert indexed.published and indexed.reconciled
    counts = indexed.counts
    assert counts["documents"] == counts["kept"] + counts["duplicate"] + counts["rejected"] == 15
    reasons = dict(zip(*table(indexed.run_dir, "rejected").select(["doc_id", "reason"]).to_pydict().values()))
    assert reasons == {
        "renamed.docx": "not a readable Word document (not a zip archive)",
        "notes.xlsx": "not an Office file: a zip archive without [Content_Types].xml"}
    documents = table(indexed.run_dir, "documents").to_pylist()
    formats = {row["doc_id"]: row["format"] for row in documents if row["status"] == "kept"}
    assert formats == {"arm.docx": "docx", "q.pptx": "pptx", "setup.pptx": "pptx",
                       "readings.xlsx": "xlsx", "parts.csv": "csv",
                       "dock.eml": "email", "dock.eml//plan.md": "markdown", "n.ipynb": "notebook",
                       "arm.epub": "epub", "guide.rst": "rst",
                       "arm.odt": "odt", "q.odp": "odp", "readings.ods": "ods"}
    plan = next(row for row in documents if row["doc_id"] == "dock.eml//plan.md")
    assert json.loads(plan["metadata"])["parent_id"] == "dock.eml"


def test_every_chunk_is_its_document_text_at_its_offsets(indexed) -> None:
    texts = dict(zip(*table(indexed.run_dir, "documents").select(["doc_id", "text"]).to_pydict().values()))
    chunks = table(indexed.run_dir, "chunks").to_pylist()
    assert chunks and all(texts[c["doc_id"]][c["start"]:c["end"]] == c["text"] for c in chunks)


@pytest.mark.parametrize("deck", ["q.pptx", "q.odp"])
def test_slides_are_pages_and_headings(indexed, deck) -> None:
    chunks = [c for c in table(indexed.run_dir, "chunks").to_pylist() if c["doc_id"] == deck]
    titles = {1: "Results", 2: "Regions", 3: "Slide 3"}
    assert {c["page_start"] for c in chunks} == {1, 2, 3}
    for chunk in chunks:
        assert chunk["page_start"] == chunk["page_end"] and chunk["headings"][0] == titles[chunk["page_start"]]


def test_an_untitled_slide_keeps_its_bullets_under_its_number(indexed) -> None:
    chunks = [c for c in table(indexed.run_dir, "chunks").to_pylist() if c["doc_id"] == "setup.pptx"]
    first = [c for c in chunks if c["page_start"] == 1]
    assert first and all(c["headings"] == ["Slide 1"] for c in first)
    text = "".join(c["text"] for c in first)
    assert all(f"- {item}" in text for item in LIBREOFFICE_BULLETS)


@pytest.mark.parametrize(("document", "workbook"), [("arm.docx", "readings.xlsx"), ("arm.odt", "readings.ods")])
def test_word_heading_paths_and_sheet_headers(indexed, document, workbook) -> None:
    chunks = table(indexed.run_dir, "chunks").to_pylist()
    torque = next(c for c in chunks if c["doc_id"] == document and "| wrist | 25 |" in c["text"])
    assert torque["headings"] == ["Mounting", "Bolts", "Torque"] and torque["page_start"] is None
    sheet = [c for c in chunks if c["doc_id"] == workbook]
    assert len(sheet) > 2 and all(c["headings"] == ["Readings"] for c in sheet)
    assert all(c["table_header"] == "| station | reading |\n| --- | --- |\n" for c in sheet[1:])
