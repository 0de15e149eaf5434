"""CSV/TSV, e-mail and mbox, Jupyter notebooks, EPUB and reStructuredText, written by the
standard library, nbformat and ebooklib, read back; and the Markdown helpers' round trip."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chunkline import split
from chunkline.readers import ReadOptions
from chunkline.readers.markdown import cell, heading, paragraph, pipe_table
from chunkline.records import Document, Rejected
from chunkline.splitting.structure import headings, tables
from tests.readers.helpers import (
    document, metadata, read, rejection,
    docx_bytes, epub_bytes, manual_docx, message, notebook_bytes, zip_bytes,
)







# --- CSV and TSV --------------------------------------------------------------------------------


def test_csv_is_a_pipe_table_under_the_files_name() -> None:
    doc = document("data/parts.csv", b'part,note\narm,"two\nlines"\ndock,"a | b"\n')
    assert doc.format == "csv" and doc.encoding == "utf-8"
    assert doc.text == ("# parts.csv\n\n| part | note |\n| --- | --- |\n"
                        "| arm | two lines |\n| dock | a \\| b |")


def test_semicolon_csv_and_tsv() -> None:
    assert "| 1,5 | 2 |" in document("eu.csv", b"a;b\n1,5;2\n").text
    assert "| x y | z |" in document("t.tsv", b"h1\th2\nx y\tz\n").text
    assert document("t.tsv", b"h1\th2\n").format == "tsv"


def test_a_long_csv_is_cut_into_sections_with_the_header() -> None:
    data = "n\n" + "".join(f"{i}\n" for i in range(5))
    doc = document("n.csv", data.encode(), ReadOptions(max_table_rows=2))
    assert [h.title for h in headings(doc.text)] == ["n.csv (rows 2-3)", "n.csv (rows 4-5)", "n.csv (row 6)"]
    assert all(doc.text[t.start:t.body] == "| n |\n| --- |\n" for t in tables(doc.text))


def test_bad_csv_files_are_rejected() -> None:
    assert rejection("e.csv", b",,\n\n,\n") == "empty document (no row holds a value)"
    assert rejection("b.csv", b"a,b\x00\x00\x00") == "binary file"


# --- e-mail -------------------------------------------------------------------------------------


def test_eml_text_metadata_and_attachments_as_documents() -> None:
    report = docx_bytes(manual_docx)
    mail = message(attachments=(("report.docx", report, "application/octet-stream"),
                                ("logo.png", b"\x89PNG\r\n\x1a\n", "image/png")))
    records = read("mail/dock.eml", bytes(mail))
    by_id = {r.doc_id: r for r in records}
    assert list(by_id) == ["mail/dock.eml", "mail/dock.eml//report.docx", "mail/dock.eml//logo.png"]
    mail_doc = by_id["mail/dock.eml"]
    assert mail_doc.format == "email"
    assert mail_doc.text == "# Dock firmware\n\nThe dock stops charging after the update."
    assert metadata(mail_doc) == {
        "subject": "Dock firmware", "from": "Ada <ada@example.com>", "to": "ops@example.com",
        "date": "2024-10-01T10:00:00+02:00", "message_id": "<m1@example.com>"}
    attached = by_id["mail/dock.eml//report.docx"]
    assert attached.format == "docx" and metadata(attached)["parent_id"] == "mail/dock.eml"
    assert [h.title for h in headings(attached.text)][0] == "Mounting"
    # An image attachment is read by OCR: eight bytes of PNG signature are not an image.
    assert by_id["mail/dock.eml//logo.png"].reason.startswith("unreadable image (UnidentifiedImageError")


def test_an_html_only_mail_goes_through_the_html_path() -> None:
    mail = message(body="")
    mail.clear_content()
    mail.set_content("<html><body><h2>Status</h2><p>All docks charge again.</p></body></html>",
                     subtype="html")
    doc = document("h.eml", bytes(mail))
    assert doc.text == "# Dock firmware\n\n## Status\n\nAll docks charge again."


def test_a_forwarded_message_is_an_attachment_of_its_own() -> None:
    inner = message(subject="Earlier", body="The first report.")
    outer = message(subject="Fwd: Earlier", body="See below.")
    outer.add_attachment(inner)
    records = read("f.eml", bytes(outer))
    assert [r.doc_id for r in records] == ["f.eml", "f.eml//1.eml"]
    assert metadata(records[1])["parent_id"] == "f.eml" and "The first report." in records[1].text


def test_mbox_messages_are_members() -> None:
    first = bytes(message(attachments=(("notes.md", b"# Notes\n\nbring the torque wrench", "text/markdown"),)))
    data = (b"From ada@example.com Tue Oct  1 10:00:00 2024\n" + first + b"\n\n"
            b"From bob@example.com Tue Oct  1 11:00:00 2024\nSubject: Re: dock\n\nFixed it.\n")
    records = read("box.mbox", data)
    assert [r.doc_id for r in records] == ["box.mbox//1.eml", "box.mbox//1.eml//notes.md", "box.mbox//2.eml"]
    assert all(isinstance(r, Document) for r in records)
    assert metadata(records[1])["parent_id"] == "box.mbox//1.eml"
    assert records[2].text == "# Re: dock\n\nFixed it."
    assert rejection("x.mbox", b"no from line here\n") == 'not an mbox file (it does not begin with a "From " line)'


def test_an_mboxs_time_is_not_its_messages() -> None:
    """Mail delivered into an mbox rewrites it: its time on every message would move every
    message's row each night. A lone .eml file's time is its own."""
    from chunkline.readers import decode_file
    from tests.readers.helpers import ROOT

    data = b"From bob@example.com Tue Oct  1 11:00:00 2024\nSubject: Re: dock\n\nFixed it.\n"
    [boxed] = decode_file(f"{ROOT}/box.mbox", data, ROOT, ReadOptions(), 86_400.0)
    assert "file_modified" not in dict(boxed.all_metadata())
    [alone] = decode_file(f"{ROOT}/a.eml", data.split(b"\n", 1)[1], ROOT, ReadOptions(), 86_400.0)
    assert dict(alone.all_metadata())["file_modified"] == '"1970-01-02T00:00:00Z"'


def test_a_mail_without_a_body_is_rejected_and_its_attachments_still_read() -> None:
    mail = message(body="")
    mail.clear_content()
    mail.add_attachment(b"# Plan\n\nstep one", maintype="text", subtype="markdown", filename="plan.md")
    records = read("a.eml", bytes(mail))
    assert isinstance(records[0], Rejected) and records[0].reason == "empty document (the message has no text body)"
    assert records[1].doc_id == "a.eml//plan.md" and isinstance(records[1], Document)


GERMAN = ("Sehr geehrte Damen und Herren, die Lieferung der Greifarme verzögert sich um zwei "
          "Wochen. Die Prüfung im Werk Süd ergab Mängel an den Gelenken. Für Rückfragen stehe ich "
          "gern zur Verfügung. Mit freundlichen Grüßen, Jürgen Müller")
# charset-normalizer 3.5 ranks cp1257 ("trčs") above cp1252 for this French prose: undecided.
FRENCH = ("Le café était déjà servi quand les élèves sont arrivés. Très tôt, à côté de la "
          "fenêtre, le professeur expliquait l'histoire – « voilà », disait-il.")


def mislabelled_mail(body: str, subtype: str = "plain") -> bytes:
    """A message whose body is cp1252 bytes under a ``charset=utf-8`` header, set by hand as a
    mailer that ignores the system code page writes it."""
    mail = message(attachments=(("notes.md", b"# Notes\n\nbring the torque wrench", "text/markdown"),))
    body_part = mail.get_body(preferencelist=("plain",))
    body_part.set_content(body.encode("cp1252"), maintype="text", subtype=subtype,
                          cte="quoted-printable")
    body_part.set_param("charset", "utf-8")
    return bytes(mail)


def test_a_mail_body_mislabelled_utf8_is_read_as_a_file_would_be() -> None:
    data = mislabelled_mail(GERMAN)
    assert b"charset=\"utf-8\"" in data or b"charset=utf-8" in data
    doc = document_of(read("m.eml", data), "m.eml")
    assert doc.text == "# Dock firmware\n\n" + GERMAN and "\ufffd" not in doc.text
    page = mislabelled_mail(f"<html><body><p>{GERMAN}</p></body></html>", "html")
    html = document_of(read("h.eml", page), "h.eml")
    assert html.text == "# Dock firmware\n\n" + GERMAN


def test_an_undecidable_mail_body_is_rejected_not_indexed_as_mojibake() -> None:
    records = read("m.eml", mislabelled_mail(FRENCH))
    assert isinstance(records[0], Rejected) and records[0].reason == (
        "message body does not decode as its declared charset utf-8: not valid UTF-8 at byte 6 "
        "(and no other encoding detected with confidence)")
    assert records[1].doc_id == "m.eml//notes.md" and isinstance(records[1], Document)


def test_a_mail_body_in_its_declared_legacy_charset_is_read_with_it() -> None:
    mail = message(body="")
    mail.get_body(preferencelist=("plain",)).set_content(
        FRENCH.encode("cp1252"), maintype="text", subtype="plain", cte="8bit")
    mail.get_body(preferencelist=("plain",)).set_param("charset", "windows-1252")
    assert document("m.eml", bytes(mail)).text == "# Dock firmware\n\n" + FRENCH


def document_of(records: list, doc_id: str) -> Document:
    [found] = [r for r in records if r.doc_id == doc_id]
    assert isinstance(found, Document), found
    return found


# --- notebooks ----------------------------------------------------------------------------------


def test_notebook_markdown_cells_and_fenced_code() -> None:
    data = notebook_bytes([("markdown", "# Analysis\n\nLoad the readings."),
                           ("code", "# a comment, not a heading\nimport csv"),
                           ("raw", "raw text is left out"), ("code", "")], language="R")
    doc = document("n.ipynb", data)
    assert doc.format == "notebook"
    assert doc.text == "# Analysis\n\nLoad the readings.\n\n```r\n# a comment, not a heading\nimport csv\n```"
    assert [h.title for h in headings(doc.text)] == ["Analysis"]
    assert metadata(doc)["language"] == "r" and metadata(doc)["kernel"] == "R-kernel"


def test_bad_notebooks_are_rejected() -> None:
    assert rejection("e.ipynb", notebook_bytes([("raw", "x")])) == "empty document (no Markdown or code in 1 cell(s))"
    assert rejection("j.ipynb", b'{"cells": [').startswith("not a readable notebook (invalid JSON")
    assert rejection("l.ipynb", b"[1, 2]") == "not a readable notebook (the JSON is not an object)"


# --- EPUB ---------------------------------------------------------------------------------------


def test_epub_chapters_in_spine_order_with_toc_titles() -> None:
    data = epub_bytes([("c1.xhtml", "Introduction", "<h1>Welcome</h1><p>Arms move.</p>"),
                       ("c2.xhtml", "Care", "<p>Oil the joints monthly.</p><h2>Storage</h2><p>Dry.</p>")])
    doc = document("books/arm.epub", data)
    assert doc.format == "epub"
    assert [(h.level, h.title) for h in headings(doc.text)] == [(1, "Welcome"), (1, "Care"), (2, "Storage")]
    assert doc.text.index("Arms move.") < doc.text.index("Oil the joints")
    found = metadata(doc)
    assert found["title"] == "Arm book" and found["author"] == "Ada Lovelace" and found["language"] == "en"


def test_bad_epubs_are_rejected() -> None:
    assert rejection("x.epub", b"not a zip") == "not a readable EPUB (not a zip archive)"
    assert rejection("z.epub", zip_bytes({"a.txt": b"x"})).startswith("not a readable EPUB (")
    drm = zip_bytes({"mimetype": b"application/epub+zip", "META-INF/encryption.xml": (
        b'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        b'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:EncryptionMethod '
        b'Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/></enc:EncryptedData></encryption>')})
    assert rejection("drm.epub", drm) == "encrypted EPUB (DRM-protected content; not supported)"


# --- reStructuredText ---------------------------------------------------------------------------


RST = b"""Arm guide
=========

:Author: Ada Lovelace

Intro paragraph.

Mounting
--------

- four bolts
- a wrench

  - torque type

.. code-block:: python

   # not a heading
   print(1)

.. include:: /etc/passwd

=====  ======
part   torque
=====  ======
base   40
=====  ======
"""


def test_rst_sections_lists_code_and_tables() -> None:
    doc = document("guide.rst", RST)
    assert doc.format == "rst"
    assert [(h.level, h.title) for h in headings(doc.text)] == [(1, "Arm guide"), (2, "Mounting")]
    assert "- four bolts\n- a wrench\n  - torque type" in doc.text
    assert "```python\n# not a heading\nprint(1)\n```" in doc.text
    [table] = tables(doc.text)
    assert doc.text[table.start:table.end] == "| part | torque |\n| --- | --- |\n| base | 40 |"
    assert "passwd" not in doc.text and "root:" not in doc.text  # no file inclusion
    assert metadata(doc)["author"] == "Ada Lovelace"
    chunk = next(c for c in split(doc.text, 15, tokenizer="words") if "four bolts" in doc.text[c.start:c.end])
    assert chunk.headings == ("Arm guide", "Mounting")


def test_an_empty_rst_file_is_rejected() -> None:
    assert rejection("e.rst", b".. just a comment\n") == "empty document (no text in the reStructuredText file)"


# --- the Markdown the readers write -------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)


@given(st.lists(st.lists(_TEXT, min_size=1, max_size=4), min_size=1, max_size=6))
def test_any_table_is_one_pipe_table_whose_rows_round_trip(rows) -> None:
    text = "# Sheet\n\n" + pipe_table(rows[0], rows[1:]) + "\n"
    [table] = tables(text)
    assert len(table.rows) == len(rows) - 1
    width = max(len(row) for row in rows)
    for (start, end), row in zip(table.row_spans(), rows[1:]):
        line = text[start:end].rstrip("\n")
        assert line == "| " + " | ".join([cell(v) for v in row] + [""] * (width - len(row))) + " |"
    assert [h.title for h in headings(text)] == ["Sheet"]


@given(_TEXT.filter(lambda t: t.strip()), st.integers(1, 6))
def test_any_title_is_one_heading(title, level) -> None:
    [found] = headings(heading(level, title) + "\n\nbody")
    assert found.level == level


@given(st.lists(_TEXT, max_size=5))
def test_no_paragraph_adds_a_heading(lines) -> None:
    assert headings("# Top\n\n" + paragraph("\n".join(lines)) + "\n\nend")[1:] == []
