"""Metadata and pages end to end: JSONL and Parquet metadata, front matter, HTML, PDFs made
here (an outline, a password, no text layer, a cut file) -> every chunk row carries its
document's metadata and, for a PDF, the pages that hold its text."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pypdfium2 as pdfium
import pytest

from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.helpers import run_rows
from tests.pdfs import make_pdf

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SENTENCES = ("The arm must be mounted on a level base plate before its first start. "
             "Each joint carries an encoder that the controller reads every millisecond. ")


def manual_pages() -> list[list[str]]:
    """Four pages: a long section, a short one running over a page break into the next page,
    a sub-section starting mid-page, an appendix; each page ends with a page-number footer."""
    def steps(title: str, count: int) -> list[str]:
        return [f"{title} step {i}: " + SENTENCES[: 60 + 7 * i] for i in range(count)]

    pages = [
        ["Installation", *steps("Installation", 14)],
        ["Calibration", "Open the calibration wizard on the pendant.", "Touch each marker with the tool."],
        ["Confirm the offsets the wizard shows.", "Save them to the controller.",
         "Maintenance", *steps("Maintenance", 8)],
        ["Appendix", *steps("Appendix", 6)],
    ]
    return [lines + [f"Page {number} of 4"] for number, lines in enumerate(pages, 1)]


OUTLINE = [(0, 0, "Installation"), (1, 0, "Calibration"), (2, 1, "Maintenance"), (3, 0, "Appendix")]


def write_corpus(root: Path) -> dict[str, bytes]:
    root.mkdir(parents=True)
    records = [
        {"id": "faq-1", "text": "How do I reset the dock? Hold the button for ten seconds.",
         "metadata": {"team": "fleet", "access": ["ops", "support"], "version": 3}},
        {"id": "faq-2", "text": "Charging stops at 95 percent to protect the battery.",
         "metadata": {"team": "battery"}},
        '{"id": "faq-3", "text": "Bad metadata.", "metadata": {"score": Infinity}}',
    ]
    (root / "faq.jsonl").write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    pq.write_table(pa.table({
        "id": ["p-1", "p-2"], "text": ["The courier carries 40 kg.", "The arm lifts 7 kg."],
        "product": ["courier", "arm"],
        "released": [datetime.date(2024, 5, 1), datetime.date(2023, 11, 2)],
    }), root / "products.parquet")
    (root / "guide.md").write_text(
        "---\ntitle: Dock guide\naccess: [ops]\nreviewed: 2024-06-01\n---\n"
        "# Dock\n\nPlace the dock against a wall.\n\n## Power\n\nUse the supplied adapter.\n")
    (root / "page.html").write_text(
        "<html lang='en'><head><title>Opportunity charging</title>"
        "<meta name='author' content='Aiko Nakamura'>"
        "<meta property='article:published_time' content='2024-06-13'></head><body><article>"
        "<h1>Opportunity charging</h1><p>" + "Robots top up between missions. " * 20
        + "</p></article></body></html>")
    pdfs = {
        "manual.pdf": make_pdf(manual_pages(), OUTLINE, title="NR-7 manual", author="Ann Lee"),
        "locked.pdf": make_pdf([["secret"]], password="pw"),
        "scan.pdf": make_pdf([["x"], ["y"]], image_only=True),
    }
    pdfs["cut.pdf"] = pdfs["manual.pdf"][: len(pdfs["manual.pdf"]) - 300]
    for name, data in pdfs.items():
        (root / name).write_bytes(data)
    return pdfs


def job(corpus: Path, output: Path, *overrides: str):
    config = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null",
        "input.parquet.metadata_columns=[product, released]", "split.max_tokens=128", *overrides])
    return run(config)


def read_rows(run_dir: str, table: str) -> list[dict]:
    return run_rows(run_dir, table)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    base = tmp_path_factory.mktemp("metadata")
    pdfs = write_corpus(base / "corpus")
    summary = job(base / "corpus", base / "index")
    return base, pdfs, summary


def test_rejections_name_their_reason(indexed) -> None:
    _, _, summary = indexed
    reasons = {row["doc_id"]: row["reason"] for row in read_rows(summary.run_dir, "rejected")}
    assert reasons["locked.pdf"].startswith("encrypted PDF")
    # Image-only pages go to OCR (input.ocr: auto), which finds no text in these.
    assert reasons["scan.pdf"].startswith("no text in 2 page(s): 2 without a text layer")
    assert reasons["cut.pdf"].startswith("truncated PDF")
    assert reasons["faq.jsonl#L3"] == "line 3: metadata 'score' is inf, which JSON cannot hold"
    assert summary.counts["documents"] == summary.counts["kept"] + summary.counts["duplicate"] + summary.counts["rejected"]


def test_documents_record_format_and_metadata(indexed) -> None:
    base, _, summary = indexed
    documents = {row["doc_id"]: row for row in read_rows(summary.run_dir, "documents")
                 if row["status"] == "kept"}
    formats = {doc_id: row["format"] for doc_id, row in documents.items()}
    assert formats == {"faq-1": "jsonl", "faq-2": "jsonl", "p-1": "parquet", "p-2": "parquet",
                       "guide.md": "markdown", "page.html": "html", "manual.pdf": "pdf"}
    meta = {doc_id: json.loads(row["metadata"]) for doc_id, row in documents.items()}
    corpus = base / "corpus"
    for doc_id, fields in meta.items():
        path = corpus / ("faq.jsonl" if doc_id.startswith("faq") else
                         "products.parquet" if doc_id.startswith("p-") else doc_id)
        assert fields["source_uri"] == str(path)
        if formats[doc_id] in ("jsonl", "parquet"):
            # A record's file is its dump, whose size and time are not the record's.
            assert "file_size" not in fields and "file_modified" not in fields
            continue
        assert fields["file_size"] == path.stat().st_size
        stamp = datetime.datetime.fromtimestamp(int(path.stat().st_mtime), datetime.timezone.utc)
        assert fields["file_modified"] == stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert meta["faq-1"]["access"] == ["ops", "support"] and meta["faq-1"]["version"] == 3
    assert meta["p-2"]["product"] == "arm" and meta["p-2"]["released"] == "2023-11-02"
    assert meta["guide.md"]["title"] == "Dock guide" and meta["guide.md"]["reviewed"] == "2024-06-01"
    assert documents["guide.md"]["text"].startswith("# Dock\n")  # front matter cut
    assert meta["page.html"]["title"] == "Opportunity charging"
    assert meta["page.html"]["date"] == "2024-06-13" and meta["page.html"]["language"] == "en"
    assert meta["manual.pdf"]["title"] == "NR-7 manual" and meta["manual.pdf"]["author"] == "Ann Lee"
    assert len(documents["manual.pdf"]["page_starts"]) == 4
    assert documents["guide.md"]["page_starts"] is None


def test_every_chunk_carries_metadata_offsets_and_pages(indexed) -> None:
    _, pdfs, summary = indexed
    documents = {row["doc_id"]: row for row in read_rows(summary.run_dir, "documents")}
    chunks = read_rows(summary.run_dir, "chunks")
    pdf = pdfium.PdfDocument(pdfs["manual.pdf"])
    page_texts = [pdf[i].get_textpage().get_text_range().replace("\r\n", "\n") for i in range(len(pdf))]
    spanning = 0
    for chunk in chunks:
        document = documents[chunk["doc_id"]]
        assert document["text"][chunk["start"]:chunk["end"]] == chunk["text"]
        # The document's metadata but the file's size and mtime: those stay on the documents
        # table, so a touched file moves no chunk row (output.chunk_metadata can name them).
        facts = json.loads(document["metadata"])
        assert ("file_size" in facts and "file_modified" in facts) == (
            document["format"] not in ("jsonl", "parquet"))
        assert json.loads(chunk["metadata"]) == {k: v for k, v in facts.items()
                                                 if k not in ("file_size", "file_modified")}
        if chunk["doc_id"] != "manual.pdf":
            assert chunk["page_start"] is None and chunk["page_end"] is None
            continue
        first, last = chunk["page_start"], chunk["page_end"]
        assert 1 <= first <= last <= 4
        spanning += last > first
        lines = [line for line in chunk["text"].split("\n") if line.strip()]
        held = "\n".join(page_texts[first - 1:last])
        assert all(line in held for line in lines)
        assert lines[0] in page_texts[first - 1] and lines[-1] in page_texts[last - 1]
        assert " of 4" not in chunk["text"]  # the footers were cleaned away
        # The outline is the heading path: a chunk's first line sits under its bookmark.
        assert chunk["headings"][0] in {"Installation", "Calibration", "Appendix"}
        if lines[0].startswith(("Maintenance", "Appendix", "Installation")):
            assert chunk["headings"][-1] == lines[0].split()[0]
    assert spanning >= 1


def test_chunk_metadata_keys_are_configurable(indexed, tmp_path) -> None:
    base, _, _ = indexed
    summary = job(base / "corpus", tmp_path / "index", "output.chunk_metadata=[title, team]")
    chunks = read_rows(summary.run_dir, "chunks")
    kept = {json.dumps(json.loads(c["metadata"]), sort_keys=True) for c in chunks}
    assert kept == {'{"team": "fleet"}', '{"team": "battery"}', "{}",
                    '{"title": "Dock guide"}', '{"title": "Opportunity charging"}',
                    '{"title": "NR-7 manual"}'}


# --- Metadata in a reindex, and in a query -----------------------------------------------------


def embedded_job(corpus: Path, output: Path):
    config = load_config(ROOT / "configs" / "local.yaml",
                         [f"input.pattern={corpus}/**", f"output.path={output}"])
    return run(config)


@pytest.fixture(scope="module")
def reindexed(tmp_path_factory):
    base = tmp_path_factory.mktemp("metadata-reindex")
    corpus, output = base / "corpus", base / "index"
    corpus.mkdir()
    body = {
        "dock.md": "# Dock\n\nPlace the dock against a wall, away from heaters.\n",
        "arm.md": "# Arm\n\nMount the arm on a level base plate before its first start.\n",
        "battery.md": "# Battery\n\nCharging stops at 95 percent to protect the cells.\n",
    }
    teams = {"dock.md": "fleet", "arm.md": "arm", "battery.md": "fleet"}
    for name, text in body.items():
        (corpus / name).write_text(f"---\nteam: {teams[name]}\naccess: [ops]\n---\n{text}")
    first = embedded_job(corpus, output)
    # Only the metadata of one document changes: its text, and so its chunks, stay.
    (corpus / "arm.md").write_text(f"---\nteam: robotics\naccess: [ops, eng]\n---\n{body['arm.md']}")
    second = embedded_job(corpus, output)
    return output, first, second


def test_a_metadata_change_reuses_vectors_and_updates_rows(reindexed) -> None:
    _, first, second = reindexed
    assert first.counts["embedded"] == first.counts["chunks"] > 0
    assert second.counts["embedded"] == 0
    # The two unchanged documents are carried; arm.md is computed again and reuses its vector.
    assert second.counts["documents_carried"] == 2 and second.counts["documents_recomputed"] == 1
    assert (second.counts["reused"] + second.counts["chunks_carried"] == second.counts["chunks"]
            == first.counts["chunks"]) and second.counts["reused"] > 0
    before = {row["chunk_id"]: row for row in read_rows(first.run_dir, "chunks")}
    after = {row["chunk_id"]: row for row in read_rows(second.run_dir, "chunks")}
    assert before.keys() == after.keys()
    for chunk_id, row in after.items():
        fields = json.loads(row["metadata"])
        assert row["content_key"] == before[chunk_id]["content_key"]
        if row["doc_id"] == "arm.md":
            assert fields["team"] == "robotics" and fields["access"] == ["ops", "eng"]
            assert json.loads(before[chunk_id]["metadata"])["team"] == "arm"
        else:
            assert row["metadata"] == before[chunk_id]["metadata"]
    documents = {row["doc_id"]: json.loads(row["metadata"]) for row in read_rows(second.run_dir, "documents")}
    assert documents["arm.md"]["team"] == "robotics"


def test_query_filters_by_metadata_before_ranking(reindexed) -> None:
    from chunkline.pipeline.query import search

    output, _, _ = reindexed
    unfiltered = search(str(output), "mount the arm on a base plate", k=1)
    assert unfiltered[0].doc_id == "arm.md"
    fleet = search(str(output), "mount the arm on a base plate", k=5, where=[("team", "fleet")])
    assert {hit.doc_id for hit in fleet} == {"dock.md", "battery.md"}
    both = search(str(output), "anything", k=5, where=[("access", "eng"), ("team", "robotics")])
    assert [hit.doc_id for hit in both] == ["arm.md"]
    assert search(str(output), "anything", k=5, where=[("team", "nobody")]) == []


def test_query_cli_where(reindexed) -> None:
    import io

    from chunkline.pipeline.cli import main

    output, _, _ = reindexed
    out, err = io.StringIO(), io.StringIO()
    code = main(["query", str(output), "charging", "--where", "team=fleet", "--where", "access=ops"],
                out=out, err=err)
    assert code == 0, err.getvalue()
    assert "battery.md" in out.getvalue() and "arm.md" not in out.getvalue()
    assert main(["query", str(output), "x", "--where", "no-equals"], out=out, err=err) == 2
    assert "--where takes key=value" in err.getvalue()
