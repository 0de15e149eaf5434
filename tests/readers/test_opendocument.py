"""OpenDocument files written by LibreOffice itself (the Office tests' DOCX, PPTX and XLSX files
converted by headless soffice), read back with the structure their Office counterparts have:
the same Markdown, heading paths, header rows and slide pages; and each bad package a
rejection with its reason."""

from __future__ import annotations

import io
import zipfile

import pytest

from chunkline import split
from chunkline.readers import ReadOptions
from chunkline.splitting.structure import headings, tables
from tests.readers.helpers import (
    LIBREOFFICE_BULLETS, assert_the_arm_manual, assert_the_q2_workbook, assert_the_quarterly_deck, document, metadata, odf_bytes, office_sources, rejection, zip_bytes,
)


@pytest.fixture(scope="module")
def sources() -> dict[str, bytes]:
    return office_sources()


@pytest.fixture(scope="module")
def converted(libreoffice_files) -> dict[str, bytes]:
    return libreoffice_files


# --- LibreOffice's files: the structure of their Office counterparts ----------------------------


@pytest.mark.slow  # soffice converts the files (~5 s, once per session)
def test_odt_headings_tables_lists_and_metadata_as_the_docx(converted, sources) -> None:
    doc = document("manuals/arm.odt", converted["arm.odt"])
    assert doc.format == "odt" and doc.doc_id == "manuals/arm.odt"
    assert doc.text == document("manuals/arm.docx", sources["arm.docx"]).text
    assert_the_arm_manual(doc)


@pytest.mark.slow
def test_odp_slides_are_sections_and_pages_as_the_pptx(converted, sources) -> None:
    doc = document("decks/q.odp", converted["q.odp"])
    pptx = document("decks/q.pptx", sources["q.pptx"])
    assert doc.format == "odp"
    assert (doc.text, doc.page_starts) == (pptx.text, pptx.page_starts)
    assert_the_quarterly_deck(doc)


@pytest.mark.slow
def test_an_untitled_odp_slide_keeps_its_body_under_its_number(converted, sources) -> None:
    doc = document("decks/setup.odp", converted["setup.odp"])
    assert doc.text == document("decks/setup.pptx", sources["setup.pptx"]).text
    assert [(h.level, h.title) for h in headings(doc.text)] == [(1, "Slide 1"), (1, "Roadmap")]
    assert all(f"- {item}" in doc.text for item in LIBREOFFICE_BULLETS)
    assert "Second half" in doc.text and metadata(doc)["slides"] == 2


@pytest.mark.slow
def test_ods_sheets_are_sections_with_pipe_tables_as_the_xlsx(converted, sources) -> None:
    doc = document("q2.ods", converted["q2.ods"])
    assert doc.format == "ods"
    assert doc.text == document("q2.xlsx", sources["q2.xlsx"]).text
    assert_the_q2_workbook(doc)


@pytest.mark.slow
def test_a_long_ods_sheet_is_cut_between_rows_with_the_header_each_time(converted, sources) -> None:
    options = ReadOptions(max_table_rows=3)
    doc = document("squares.ods", converted["squares.ods"], options)
    assert doc.text == document("squares.xlsx", sources["squares.xlsx"], options).text
    assert [h.title for h in headings(doc.text)] == [
        "Squares (rows 2-4)", "Squares (rows 5-7)", "Squares (row 8)"]
    found = tables(doc.text)
    assert [len(t.rows) for t in found] == [3, 3, 1]
    assert all(doc.text[t.start:t.body] == "| n | square |\n| --- | --- |\n" for t in found)


@pytest.mark.slow
def test_cells_libreoffice_writes_as_one_repeated_cell_are_each_read(converted, sources) -> None:
    with zipfile.ZipFile(io.BytesIO(converted["repeated.ods"])) as archive:
        assert archive.read("content.xml").count(b'table:number-columns-repeated="3"') == 2
    doc = document("repeated.ods", converted["repeated.ods"])
    assert doc.text == document("repeated.xlsx", sources["repeated.xlsx"]).text
    assert doc.text.endswith("| 7 | 7 | 7 | y |\n| x | x | x | z |")


@pytest.mark.slow
def test_the_splitter_repeats_an_ods_sheets_header_in_every_chunk(converted) -> None:
    doc = document("readings.ods", converted["readings.ods"])
    chunks = [c for c in split(doc.text, 30, tokenizer="words") if "| station" in doc.text[c.start:c.end]]
    assert len(chunks) > 2
    assert all(c.headings == ("Readings",) for c in chunks)
    assert all(c.table_header == "| station | reading |\n| --- | --- |\n" for c in chunks[1:])


# --- packages written here: structure LibreOffice writes too, and hostile ones -------------------


def test_odt_notes_spaces_comments_sections_and_tracked_deletions() -> None:
    body = ('<text:tracked-changes><text:changed-region><text:deletion><text:p>deleted words'
            '</text:p></text:deletion></text:changed-region></text:tracked-changes>'
            '<text:section><text:h text:outline-level="2">Torque</text:h>'
            '<text:p>Tighten<text:s text:c="2"/>to 40 Nm.<text:note text:note-class="footnote">'
            '<text:note-citation>1</text:note-citation><text:note-body><text:p>SI unit.</text:p>'
            '</text:note-body></text:note><office:annotation><text:p>a reviewer\'s comment</text:p>'
            '</office:annotation></text:p></text:section>'
            '<text:list><text:list-item><text:p>first</text:p><text:list><text:list-item>'
            '<text:p>nested<!-- an XML comment --> item<?pi x?></text:p></text:list-item></text:list>'
            '</text:list-item></text:list>')
    doc = document("n.odt", odf_bytes("odt", body))
    assert doc.text == ("## Torque\n\nTighten  to 40 Nm.[^1]\n\n- first\n  - nested item\n\n"
                        "# Footnotes\n\n[^1]: SI unit.")
    assert metadata(doc) == {}  # no meta.xml: it is optional


def test_a_repeat_bomb_is_refused_at_the_document_limit() -> None:
    # A few hundred bytes of XML: a row of 16,384 filled cells repeated a million times.
    row = ('<table:table-row table:number-rows-repeated="1000000"><table:table-cell '
           'table:number-columns-repeated="16384" office:value-type="float" office:value="7">'
           '<text:p>7</text:p></table:table-cell></table:table-row>')
    data = odf_bytes("ods", f'<table:table table:name="S">{row}</table:table>')
    assert len(data) < 2_000
    assert rejection("bomb.ods", data) == (
        "document is over the limit of 10000000 bytes (text read from the file, its repeated "
        "rows and cells expanded)")


def test_empty_rows_repeated_a_million_times_are_counted_not_read() -> None:
    rows = ('<table:table-row><table:table-cell office:value-type="string"><text:p>a</text:p>'
            '</table:table-cell></table:table-row>'
            '<table:table-row table:number-rows-repeated="2"><table:table-cell office:value-type='
            '"boolean" office:boolean-value="true"><text:p>TRUE</text:p></table:table-cell></table:table-row>'
            '<table:table-row table:number-rows-repeated="1048570"><table:table-cell '
            'table:number-columns-repeated="16384"/></table:table-row>'
            '<table:table-row><table:table-cell/><table:table-cell office:value-type="float" '
            'office:value="2"><text:p>2</text:p></table:table-cell></table:table-row>')
    doc = document("sparse.ods", odf_bytes("ods", f'<table:table table:name="S">{rows}</table:table>'),
                   ReadOptions(max_table_rows=2))
    # The rows' numbers are the sheet's: the last one is its 1,048,574th.
    assert doc.text == ("# S (rows 2-3)\n\n| a |\n| --- |\n| TRUE |\n| TRUE |\n\n"
                        "# S (row 1048574)\n\n| a |  |\n| --- | --- |\n|  | 2 |")


def _encrypted_manifest() -> bytes:
    return (b'<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0">'
            b'<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml">'
            b'<manifest:encryption-data manifest:checksum-type="SHA1/1K" manifest:checksum="x"/>'
            b'</manifest:file-entry></manifest:manifest>')


@pytest.mark.parametrize(("name", "data", "reason"), [
    ("plain.odt", lambda: b"just text, renamed", "not a readable OpenDocument text (not a zip archive)"),
    ("cut.ods", lambda: odf_bytes("ods", "")[:200],
     "not a readable OpenDocument spreadsheet (BadZipFile: File is not a zip file)"),
    ("notes.odp", lambda: zip_bytes({"notes.txt": b"hello"}),
     "not an OpenDocument presentation: a zip archive whose mimetype is none"),
    ("sheet.odt", lambda: odf_bytes("ods", ""),
     "not an OpenDocument text: a zip archive whose mimetype is application/vnd.oasis.opendocument.spreadsheet"),
    ("locked.odt", lambda: odf_bytes("odt", "", {"META-INF/manifest.xml": _encrypted_manifest()}),
     "encrypted OpenDocument text (password-protected; not supported)"),
    ("blank.odt", lambda: odf_bytes("odt", "<text:p> </text:p>"),
     "empty document (no text in the OpenDocument text)"),
    ("empty.odp", lambda: odf_bytes("odp", ""), "empty document (the presentation has no slides)"),
    ("blank.odp", lambda: odf_bytes("odp", '<draw:page draw:name="p1"/>'),
     "empty document (no text on any of 1 slide(s))"),
    ("empty.ods", lambda: odf_bytes("ods", '<table:table table:name="A"/>'),
     "empty document (no cell of 1 sheet(s) holds a value)"),
])
def test_bad_opendocument_files_are_rejected_with_the_reason(name, data, reason) -> None:
    assert rejection(name, data()) == reason


def test_a_damaged_content_part_is_rejected_with_the_parsers_error() -> None:
    data = odf_bytes("odt", "", {"content.xml": b"<office:document-content><unclosed>"})
    assert rejection("damaged.odt", data).startswith("not a readable OpenDocument text (XMLSyntaxError")


def test_an_opendocument_bomb_is_refused_by_its_declared_sizes() -> None:
    # content.xml of 5 MB of spaces packs to a few KB: over the containers' ratio.
    data = odf_bytes("odt", " " * 5_000_000)
    assert "a decompression bomb" in rejection("bomb.odt", data)
