"""Files written by each format's own writer library, for the reader tests and the bench."""

from __future__ import annotations

import io
import json
import zipfile
from email.message import EmailMessage
from pathlib import Path

from chunkline.readers import ReadOptions, decode_file
from chunkline.records import Document, Rejected

ROOT = "gs://bucket/corpus"
OPTIONS = ReadOptions()


def read(name: str, data: bytes, options: ReadOptions = OPTIONS) -> list[Document | Rejected]:
    return decode_file(f"{ROOT}/{name}", data, ROOT, options)


def document(name: str, data: bytes, options: ReadOptions = OPTIONS) -> Document:
    records = read(name, data, options)
    assert len(records) == 1 and isinstance(records[0], Document), records
    return records[0]


def rejection(name: str, data: bytes) -> str:
    """The one record ``name`` reads to: a rejection under its own id; its reason."""
    records = read(name, data)
    assert len(records) == 1 and isinstance(records[0], Rejected), records
    assert records[0].doc_id == name
    return records[0].reason


def metadata(doc: Document) -> dict:
    return {key: json.loads(value) for key, value in doc.metadata}


def docx_bytes(build) -> bytes:
    import docx

    document = docx.Document()
    build(document)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def manual_docx(document) -> None:
    """A manual: core properties, a title, headings on three levels, a list, a table, a
    paragraph that looks like a heading, a footnote-free body."""
    properties = document.core_properties
    properties.title, properties.author = "Arm manual", "Ada Lovelace"
    document.add_heading("Mounting", level=1)
    document.add_paragraph("Mount the arm on a level plate.")
    document.add_paragraph("# this line is prose, not a heading")
    document.add_heading("Bolts", level=2)
    document.add_paragraph("four M8 bolts", style="List Bullet")
    document.add_paragraph("a torque wrench", style="List Bullet")
    document.add_heading("Torque", level=3)
    table = document.add_table(rows=3, cols=2)
    for r, row in enumerate([["joint", "torque | Nm"], ["base", "40"], ["wrist", "25"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_heading("Calibration", level=1)
    document.add_paragraph("Warm the arm up for ten minutes before calibrating.")


def pptx_bytes(build) -> bytes:
    from pptx import Presentation

    deck = Presentation()
    build(deck)
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def quarterly_deck(deck) -> None:
    """Three slides: bullets with speaker notes, a table, an untitled slide with a text box."""
    from pptx.util import Inches

    deck.core_properties.title = "Quarterly review"
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Results"
    body = first.placeholders[1].text_frame
    body.text = "Revenue rose 12 %"
    item = body.add_paragraph()
    item.text, item.level = "mostly in Europe", 1
    first.notes_slide.notes_text_frame.text = "Thank the sales team."
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Regions"
    table = second.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(4), Inches(1.5)).table
    for r, row in enumerate([["region", "growth"], ["Europe", "18 %"], ["Asia", "6 %"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    third = deck.slides.add_slide(deck.slide_layouts[6])
    box = third.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1))
    box.text_frame.text = "Questions welcome."


# A slide body as LibreOffice Impress saves it on a slide without a title: a placeholder with no
# attributes (type obj, index 0 by ECMA-376's defaults), its own position, five bullets.
LIBREOFFICE_BULLETS = ("Unpack the arm", "Bolt the base to the plate", "Connect the controller",
                       "Run the self test", "Record the serial number")
_LIBREOFFICE_BODY = (
    '<p:sp xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main">'
    '<p:nvSpPr><p:cNvPr id="2" name="PlaceHolder 1"/><p:cNvSpPr><a:spLocks noGrp="1"/></p:cNvSpPr>'
    '<p:nvPr><p:ph/></p:nvPr></p:nvSpPr>'
    '<p:spPr><a:xfrm><a:off x="457200" y="1604520"/><a:ext cx="8229240" cy="3977280"/></a:xfrm>'
    '<a:prstGeom prst="rect"><a:avLst/></a:prstGeom></p:spPr>'
    '<p:txBody><a:bodyPr lIns="0" tIns="0" rIns="0" bIns="0" anchor="t"><a:normAutofit/></a:bodyPr>'
    + "".join(f'<a:p><a:r><a:rPr lang="en-US" dirty="0"/><a:t>{item}</a:t></a:r></a:p>'
              for item in LIBREOFFICE_BULLETS)
    + '</p:txBody></p:sp>'
)


def untitled_slide_deck(deck) -> None:
    """Two slides: an untitled one whose body is LibreOffice's attribute-less placeholder (the
    layout's placeholders removed, as LibreOffice writes no title shape), then a title slide
    (``ctrTitle``)."""
    from pptx.oxml import parse_xml

    untitled = deck.slides.add_slide(deck.slide_layouts[1])
    tree = untitled.shapes._spTree
    for placeholder in list(untitled.placeholders):
        tree.remove(placeholder._element)
    tree.append(parse_xml(_LIBREOFFICE_BODY))
    cover = deck.slides.add_slide(deck.slide_layouts[0])
    cover.shapes.title.text = "Roadmap"
    cover.placeholders[1].text = "Second half"


def xlsx_bytes(sheets: dict[str, list[list[object]]], title: str | None = None) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    if title:
        book.properties.title = title
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def message(subject: str = "Dock firmware", body: str = "The dock stops charging after the update.",
            attachments: tuple[tuple[str, bytes, str], ...] = ()) -> EmailMessage:
    mail = EmailMessage()
    mail["Subject"], mail["From"], mail["To"] = subject, "Ada <ada@example.com>", "ops@example.com"
    mail["Date"], mail["Message-ID"] = "Tue, 01 Oct 2024 10:00:00 +0200", "<m1@example.com>"
    mail.set_content(body)
    for name, data, kind in attachments:
        maintype, subtype = kind.split("/")
        mail.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return mail


def epub_bytes(chapters: list[tuple[str, str, str]], title: str = "Arm book") -> bytes:
    """(file name, TOC title, XHTML body) per chapter, in spine order."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("arm-book-1")
    book.set_title(title)
    book.set_language("en")
    book.add_author("Ada Lovelace")
    items = []
    for name, toc_title, body in chapters:
        item = epub.EpubHtml(title=toc_title, file_name=name, lang="en")
        item.content = body
        book.add_item(item)
        items.append(item)
    book.toc = [epub.Link(name, toc_title, name.split(".")[0]) for name, toc_title, _ in chapters]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


def notebook_bytes(cells: list[tuple[str, str]], language: str = "python") -> bytes:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": f"{language}-kernel", "language": language,
                                       "display_name": language}
    make = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell,
            "raw": nbformat.v4.new_raw_cell}
    notebook.cells = [make[kind](source) for kind, source in cells]
    return nbformat.writes(notebook).encode()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def libreoffice_converted(files: dict[str, bytes], where: Path) -> dict[str, bytes]:
    """``files`` (name -> bytes: DOCX, PPTX, XLSX) as LibreOffice saves them in its own formats
    (``arm.docx`` -> ``arm.odt``, ``.pptx`` -> ``.odp``, ``.xlsx`` -> ``.ods``), converted by
    headless ``soffice``: one call per target format, one after the other on one profile
    (~5 s for the three on 2 busy cores; three at once, each on a profile of its own, took 8 s)."""
    import shutil
    import subprocess

    soffice = shutil.which("soffice")
    assert soffice, "soffice is not installed: .ci/install-libreoffice installs it (make test runs it)"
    targets = {".docx": "odt", ".pptx": "odp", ".xlsx": "ods"}
    groups: dict[str, list[str]] = {}
    for name, data in files.items():
        (where / name).write_bytes(data)
        groups.setdefault(targets[Path(name).suffix], []).append(name)
    for target, names in groups.items():
        done = subprocess.run([soffice, f"-env:UserInstallation=file://{where}/profile", "--headless",
                               "--convert-to", target, "--outdir", str(where / "out"), *names],
                              cwd=where, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    return {path.name: path.read_bytes() for path in sorted((where / "out").iterdir())}


def office_sources() -> dict[str, bytes]:
    """The Office files the Office tests write, by name, for LibreOffice to convert: the
    OpenDocument tests read both and expect the same structure."""
    import datetime as dt

    orders = [["id", "item", "shipped", "price"],
              [1, "arm", dt.datetime(2024, 5, 1), 1200.0], [2, "dock | base", None, 0.5], [None, None]]
    # Equal cells side by side: LibreOffice writes them as one (table:number-columns-repeated).
    repeated = [["a", "b", "c", "d"], [7, 7, 7, "y"], ["x", "x", "x", "z"]]
    return {
        "arm.docx": docx_bytes(manual_docx),
        "q.pptx": pptx_bytes(quarterly_deck),
        "setup.pptx": pptx_bytes(untitled_slide_deck),
        "q2.xlsx": xlsx_bytes({"Orders": orders, "Empty": [], "Notes": [["note"], ["call back"]]}, title="Q2"),
        "squares.xlsx": xlsx_bytes({"Squares": [["n", "square"]] + [[i, i * i] for i in range(1, 8)]}),
        "readings.xlsx": xlsx_bytes({"Readings": [["station", "reading"]] + [[f"station {i}", i * 10]
                                                                             for i in range(120)]}),
        "repeated.xlsx": xlsx_bytes({"States": repeated}),
    }


ODF_MIMETYPES = {"odt": "application/vnd.oasis.opendocument.text",
                 "ods": "application/vnd.oasis.opendocument.spreadsheet",
                 "odp": "application/vnd.oasis.opendocument.presentation"}
ODF_NAMESPACES = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
                  'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
                  'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
                  'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
                  'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"')


def odf_bytes(kind: str, body: str, members: dict[str, bytes] | None = None) -> bytes:
    """A minimal OpenDocument package of ``kind`` (odt, ods, odp) whose ``office:body`` holds
    ``body`` (OASIS ODF 1.3 part 2: ``mimetype`` first and stored, the manifest, content.xml),
    with ``members`` added or replacing those."""
    element = {"odt": "office:text", "ods": "office:spreadsheet", "odp": "office:presentation"}[kind]
    content = (f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ODF_NAMESPACES} '
               f'office:version="1.3"><office:body><{element}>{body}</{element}></office:body>'
               f'</office:document-content>').encode()
    manifest = (f'<?xml version="1.0" encoding="UTF-8"?><manifest:manifest {ODF_NAMESPACES} '
                f'manifest:version="1.3"><manifest:file-entry manifest:full-path="/" '
                f'manifest:media-type="{ODF_MIMETYPES[kind]}"/><manifest:file-entry '
                f'manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
                f'</manifest:manifest>').encode()
    parts = {"mimetype": ODF_MIMETYPES[kind].encode(), "META-INF/manifest.xml": manifest,
             "content.xml": content, **(members or {})}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data, zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED)
    return out.getvalue()


# --- what the Office tests' files read as: one expectation for a format and its OpenDocument twin


def assert_the_arm_manual(doc: Document) -> None:
    """``manual_docx`` (or LibreOffice's .odt of it) as read: headings, a list, a pipe table
    whose rows are cut apart, the core metadata, chunks under the headings that enclose them."""
    from chunkline import split
    from chunkline.splitting.structure import headings, tables

    assert [(h.level, h.title) for h in headings(doc.text)] == [
        (1, "Mounting"), (2, "Bolts"), (3, "Torque"), (1, "Calibration")]
    assert "\\# this line is prose, not a heading" in doc.text
    assert "- four M8 bolts\n- a torque wrench" in doc.text
    [table] = tables(doc.text)
    assert doc.text[table.start:table.body] == "| joint | torque \\| Nm |\n| --- | --- |\n"
    assert [doc.text[a:b].strip() for a, b in table.row_spans()] == ["| base | 40 |", "| wrist | 25 |"]
    found = metadata(doc)
    assert found["title"] == "Arm manual" and found["author"] == "Ada Lovelace"
    assert {"created", "modified"} <= set(found)
    chunks = split(doc.text, 12, tokenizer="words")
    by_text = {doc.text[c.start:c.end]: c.headings for c in chunks}
    assert next(p for t, p in by_text.items() if "| base |" in t or "| wrist |" in t) == (
        "Mounting", "Bolts", "Torque")
    assert next(p for t, p in by_text.items() if "Warm the arm" in t) == ("Calibration",)


def assert_the_quarterly_deck(doc: Document) -> None:
    """``quarterly_deck`` (or LibreOffice's .odp of it) as read: a section and a page per slide,
    speaker notes under their slide, the table on its page, chunks within one slide."""
    from chunkline import split
    from chunkline.splitting.structure import headings, tables

    assert [(h.level, h.title) for h in headings(doc.text)] == [
        (1, "Results"), (2, "Speaker notes"), (1, "Regions"), (1, "Slide 3")]
    assert len(doc.page_starts) == 3
    for number, start in enumerate(doc.page_starts, start=1):
        assert doc.text.startswith("# ", start) and doc.page_range(start, start + 5) == (number, number)
    assert "- Revenue rose 12 %\n  - mostly in Europe" in doc.text
    assert "## Speaker notes\n\nThank the sales team." in doc.text
    [table] = tables(doc.text)
    assert doc.text[table.start:table.body] == "| region | growth |\n| --- | --- |\n"
    assert doc.page_range(table.start, table.end) == (2, 2)
    found = metadata(doc)
    assert found["title"] == "Quarterly review" and found["slides"] == 3
    for chunk in split(doc.text, 10, tokenizer="words"):
        first, last = doc.page_range(chunk.start, chunk.end)
        assert chunk.headings[0] == ("Results", "Regions", "Slide 3")[first - 1] and first == last


def assert_the_q2_workbook(doc: Document) -> None:
    """The Office tests' Q2 workbook (or LibreOffice's .ods of it) as read: a section per sheet
    with values, its rows a pipe table (dates as dates, a pipe escaped, an empty cell empty),
    the title and every sheet's name in the metadata."""
    from chunkline.splitting.structure import headings, tables

    assert [h.title for h in headings(doc.text)] == ["Orders", "Notes"]
    first = tables(doc.text)[0]
    assert doc.text[first.start:first.end] == (
        "| id | item | shipped | price |\n| --- | --- | --- | --- |\n"
        "| 1 | arm | 2024-05-01 | 1200 |\n| 2 | dock \\| base |  | 0.5 |\n")
    found = metadata(doc)
    assert found["title"] == "Q2" and found["sheets"] == ["Orders", "Empty", "Notes"]
