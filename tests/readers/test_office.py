"""Word, PowerPoint and Excel files written by python-docx, python-pptx and openpyxl, read
back: headings and heading paths, tables, slide numbers as pages, metadata, and each bad file a
rejection with its reason."""

from __future__ import annotations

import io
import zipfile

import pytest

from chunkline import split
from chunkline.readers import ReadOptions
from chunkline.splitting.structure import headings, tables
from tests.readers.helpers import (
    LIBREOFFICE_BULLETS, assert_the_arm_manual, assert_the_q2_workbook, assert_the_quarterly_deck, document, docx_bytes,
    manual_docx, metadata, pptx_bytes, quarterly_deck,
    read, rejection, untitled_slide_deck, xlsx_bytes, zip_bytes,
)







# --- Word ---------------------------------------------------------------------------------------


def test_docx_headings_tables_lists_and_metadata() -> None:
    doc = document("manuals/arm.docx", docx_bytes(manual_docx))
    assert doc.format == "docx" and doc.doc_id == "manuals/arm.docx"
    assert_the_arm_manual(doc)


def test_docx_outline_level_without_a_heading_style_is_a_heading() -> None:
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    def build(document) -> None:
        paragraph = document.add_paragraph("Appendix")
        paragraph._p.get_or_add_pPr().append(parse_xml(f'<w:outlineLvl {nsdecls("w")} w:val="1"/>'))
        document.add_paragraph("Body under the appendix.")

    doc = document("a.docx", docx_bytes(build))
    assert [(h.level, h.title) for h in headings(doc.text)] == [(2, "Appendix")]


def test_docx_footnotes_are_marked_and_listed() -> None:
    data = docx_bytes(lambda d: d.add_paragraph("Torque is in newton metres."))
    # python-docx writes no footnotes: add the part as Word does (ECMA-376 part 1, 17.11).
    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    members = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            members[name] = archive.read(name)
    members["word/footnotes.xml"] = (
        f'<w:footnotes {w}><w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r>'
        f'</w:p></w:footnote><w:footnote w:id="1"><w:p><w:r><w:t>SI unit of torque.</w:t></w:r>'
        f'</w:p></w:footnote></w:footnotes>').encode()
    members["word/document.xml"] = members["word/document.xml"].replace(
        b"newton metres.</w:t></w:r>",
        b'newton metres.</w:t></w:r><w:r><w:footnoteReference w:id="1"/></w:r>')
    rels = members["word/_rels/document.xml.rels"]
    members["word/_rels/document.xml.rels"] = rels.replace(b"</Relationships>", (
        b'<Relationship Id="rIdFn" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        b'relationships/footnotes" Target="footnotes.xml"/></Relationships>'))
    members["[Content_Types].xml"] = members["[Content_Types].xml"].replace(b"</Types>", (
        b'<Override PartName="/word/footnotes.xml" ContentType="application/vnd.openxmlformats-'
        b'officedocument.wordprocessingml.footnotes+xml"/></Types>'))
    doc = document("f.docx", zip_bytes(members))
    assert "Torque is in newton metres.[^1]" in doc.text
    assert doc.text.endswith("# Footnotes\n\n[^1]: SI unit of torque.")


def test_docm_is_read_for_its_text() -> None:
    data = docx_bytes(manual_docx)
    members = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            members[name] = archive.read(name)
    members["[Content_Types].xml"] = members["[Content_Types].xml"].replace(
        b"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
        b"application/vnd.ms-word.document.macroEnabled.main+xml")
    members["word/vbaProject.bin"] = b"\xd0\xcf\x11\xe0 never opened"
    doc = document("arm.docm", zip_bytes(members))
    assert doc.format == "docx" and "Warm the arm up" in doc.text


def _encrypted(data: bytes) -> bytes:
    from msoffcrypto.format.ooxml import OOXMLFile

    out = io.BytesIO()
    OOXMLFile(io.BytesIO(data)).encrypt("secret", out)
    return out.getvalue()


@pytest.mark.parametrize(("name", "data", "reason"), [
    ("locked.docx", lambda: _encrypted(docx_bytes(manual_docx)),
     "encrypted Word document (password-protected; not supported)"),
    ("locked.xlsx", lambda: _encrypted(xlsx_bytes({"S": [["a"], [1]]})),
     "encrypted Excel workbook (password-protected; not supported)"),
    ("old.doc.docx", lambda: b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600,
     "legacy binary Office file (an OLE compound document, not Office Open XML): not supported"),
    ("plain.docx", lambda: b"just text, renamed", "not a readable Word document (not a zip archive)"),
    ("notes.pptx", lambda: zip_bytes({"notes.txt": b"hello"}),
     "not an Office file: a zip archive without [Content_Types].xml"),
])
def test_bad_office_files_are_rejected_with_the_reason(name, data, reason) -> None:
    assert rejection(name, data()) == reason


def test_a_truncated_or_mistyped_office_file_is_rejected() -> None:
    data = docx_bytes(manual_docx)
    assert rejection("cut.docx", data[: len(data) // 2]).startswith("not a readable Word document (BadZipFile")
    # A Word package named .pptx: python-pptx refuses its main part's content type.
    assert rejection("word.pptx", data).startswith("not a readable PowerPoint deck (ValueError: file")


def test_an_empty_word_document_is_rejected() -> None:
    assert rejection("blank.docx", docx_bytes(lambda d: None)) == "empty document (no text in the Word document)"


def test_an_office_bomb_is_refused_by_its_declared_sizes() -> None:
    members = {"[Content_Types].xml": b"<Types/>", "word/document.xml": b" " * 5_000_000}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in members.items():
            archive.writestr(name, body)
    assert "a decompression bomb" in rejection("bomb.docx", out.getvalue())


def test_office_files_inside_an_archive_are_members() -> None:
    records = read("share.zip", zip_bytes({"decks/q.pptx": pptx_bytes(quarterly_deck)}))
    [doc] = records
    assert doc.doc_id == "share.zip//decks/q.pptx" and doc.format == "pptx" and doc.page_starts


# --- PowerPoint ---------------------------------------------------------------------------------


def test_pptx_slides_are_sections_and_pages() -> None:
    doc = document("decks/q.pptx", pptx_bytes(quarterly_deck))
    assert doc.format == "pptx"
    assert_the_quarterly_deck(doc)
    for chunk in split(doc.text, 10, tokenizer="words"):
        if "Thank the sales" in doc.text[chunk.start:chunk.end]:
            assert chunk.headings == ("Results", "Speaker notes")


def test_an_untitled_slide_keeps_its_body_and_is_named_by_its_number() -> None:
    # LibreOffice writes an untitled slide's body as <p:ph/> (type obj, index 0), which
    # python-pptx's shapes.title returns: only a title or ctrTitle placeholder is a title.
    doc = document("decks/setup.pptx", pptx_bytes(untitled_slide_deck))
    assert [(h.level, h.title) for h in headings(doc.text)] == [(1, "Slide 1"), (1, "Roadmap")]
    assert "# Slide 1\n\n" + "\n".join(f"- {item}" for item in LIBREOFFICE_BULLETS) in doc.text
    assert doc.page_range(doc.text.index("Record the serial"), doc.text.index("Roadmap")) == (1, 2)
    assert "Second half" in doc.text and metadata(doc)["slides"] == 2


def test_a_deck_without_text_is_rejected() -> None:
    assert rejection("empty.pptx", pptx_bytes(lambda deck: None)) == "empty document (the deck has no slides)"

    def blank(deck) -> None:
        deck.slides.add_slide(deck.slide_layouts[6])

    assert rejection("blank.pptx", pptx_bytes(blank)) == "empty document (no text on any of 1 slide(s))"


# --- Excel --------------------------------------------------------------------------------------


def test_xlsx_sheets_are_sections_with_pipe_tables() -> None:
    import datetime as dt

    rows = [["id", "item", "shipped", "price"],
            [1, "arm", dt.datetime(2024, 5, 1), 1200.0], [2, "dock | base", None, 0.5], [None, None]]
    data = xlsx_bytes({"Orders": rows, "Empty": [], "Notes": [["note"], ["call back"]]}, title="Q2")
    doc = document("q2.xlsx", data)
    assert doc.format == "xlsx"
    assert_the_q2_workbook(doc)


def test_xlsx_reads_cached_values_not_formulas() -> None:
    # openpyxl writes a formula without its value: no application has computed it.
    doc = document("f.xlsx", xlsx_bytes({"S": [["a", "b", "sum"], [1, 2, "=A2+B2"]]}))
    assert "| 1 | 2 |" in doc.text and "=A2+B2" not in doc.text


def test_a_long_sheet_is_cut_between_rows_with_the_header_each_time() -> None:
    rows = [["n", "square"]] + [[i, i * i] for i in range(1, 8)]
    doc = document("long.xlsx", xlsx_bytes({"Squares": rows}), ReadOptions(max_table_rows=3))
    assert [h.title for h in headings(doc.text)] == [
        "Squares (rows 2-4)", "Squares (rows 5-7)", "Squares (row 8)"]
    found = tables(doc.text)
    assert [len(t.rows) for t in found] == [3, 3, 1]
    assert all(doc.text[t.start:t.body] == "| n | square |\n| --- | --- |\n" for t in found)


def test_a_workbook_without_data_is_rejected() -> None:
    assert rejection("empty.xlsx", xlsx_bytes({"A": [], "B": [[None, ""]]})) == (
        "empty document (no cell of 2 sheet(s) holds a value)")


def test_the_splitter_repeats_a_sheets_header_in_every_chunk() -> None:
    rows = [["station", "reading"]] + [[f"s{i}", i * 10] for i in range(40)]
    doc = document("r.xlsx", xlsx_bytes({"Readings": rows}))
    chunks = [c for c in split(doc.text, 30, tokenizer="words") if "| s" in doc.text[c.start:c.end]]
    assert len(chunks) > 2
    assert all(c.headings == ("Readings",) for c in chunks)
    assert all(c.table_header == "| station | reading |\n| --- | --- |\n" for c in chunks[1:])
