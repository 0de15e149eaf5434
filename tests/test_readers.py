"""chunkline.readers: bytes to Documents, and a Rejected with its reason for everything else."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from chunkline.html_markdown import SHORT_PAGE_CHARS, html_to_markdown, html_to_text
from chunkline.splitting.structure import headings
from chunkline.readers import (
    BINARY,
    NO_MAIN_CONTENT,
    JsonlOptions,
    ParquetOptions,
    ReadOptions,
    codec_name,
    decode_file,
    decode_text,
    extension,
    input_root,
    locator,
    reject_before_reading,
    relative_id,
)
from chunkline.records import Document, Rejected

ROOT = "gs://bucket/corpus"
UNDETECTED = " (and no other encoding detected with confidence)"
OPTIONS = ReadOptions()


def decode(name: str, data: bytes, options: ReadOptions = OPTIONS) -> list[Document | Rejected]:
    return decode_file(f"{ROOT}/{name}", data, ROOT, options)


def only(records: list[Document | Rejected]) -> Document | Rejected:
    assert len(records) == 1, records
    return records[0]


def rejection(name: str, data: bytes, options: ReadOptions = OPTIONS) -> str:
    record = only(decode(name, data, options))
    assert isinstance(record, Rejected), record
    assert record.uri == f"{ROOT}/{name}" and record.doc_id == name
    return record.reason


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def jsonl(*lines: object) -> bytes:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode()


# --- Paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "root"),
    [
        ("corpus/*.md", "corpus"),
        ("corpus/**", "corpus"),
        ("corpus/**/*.md", "corpus"),
        ("corpus/man*/x.md", "corpus"),
        ("corpus/a?.md", "corpus"),
        ("corpus/[ab].md", "corpus"),
        ("corpus/sub/file.md", "corpus/sub"),  # no glob: the file's directory
        ("/abs/path/*.txt", "/abs/path"),
        ("/*.txt", "/"),
        ("*.md", ""),
        ("./docs/*", "./docs"),
        ("gs://bucket/docs/**/*.md", "gs://bucket/docs"),
        ("gs://bucket/*.md", "gs://bucket"),
        ("gs://bucket/a.md", "gs://bucket"),
    ],
)
def test_input_root(pattern: str, root: str) -> None:
    assert input_root(pattern) == root


@pytest.mark.parametrize(
    ("uri", "root", "expected"),
    [
        ("gs://bucket/corpus/manuals/arm.md", "gs://bucket/corpus", "manuals/arm.md"),
        ("corpus/a.md", "corpus", "a.md"),
        ("corpus/a.md", "corpus/", "a.md"),
        ("a.md", "", "a.md"),
        ("/a.md", "/", "a.md"),
        ("corpus-other/a.md", "corpus", "corpus-other/a.md"),  # not under root: kept whole
    ],
)
def test_relative_id(uri: str, root: str, expected: str) -> None:
    assert relative_id(uri, root) == expected


@pytest.mark.slow
@given(st.lists(st.text("abcxyz-_.", min_size=1), min_size=1, max_size=4))
def test_root_of_a_glob_pattern_gives_the_path_below_it(segments: list[str]) -> None:
    assume(all(s not in (".", "..") for s in segments))
    rel = "/".join(segments)
    for root in ("gs://bucket/corpus", "corpus", "/data/corpus"):
        assert relative_id(f"{root}/{rel}", input_root(f"{root}/**")) == rel


@pytest.mark.parametrize(
    ("uri", "ext"),
    [("a/b.MD", ".md"), ("gs://b/x.tar.gz", ".gz"), ("a.d/README", ""), ("a/.hidden", "")],
)
def test_extension(uri: str, ext: str) -> None:
    assert extension(uri) == ext


# --- Text files --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["notes.txt", "guide.md", "guide.markdown", "UPPER.TXT", "a/b.Md"])
def test_text_file_is_one_document(name: str) -> None:
    doc = only(decode(name, "# Title\n\nÜber text.\n".encode()))
    assert doc == Document(doc_id=name, uri=f"{ROOT}/{name}", text="# Title\n\nÜber text.\n")


@pytest.mark.parametrize(
    "name", ["pkg/mod.py", "web/app.js", "web/esm.mjs", "web/types.ts", "web/View.tsx",
             "cmd/main.go", "src/Main.java", "src/lib.rs", "UPPER.PY"],
)
def test_source_code_file_is_one_document_verbatim(name: str) -> None:
    code = "# not a heading\r\n\tdef f():\n    return '<p>'  # ü\n"
    doc = only(decode(name, code.encode()))
    assert doc == Document(doc_id=name, uri=f"{ROOT}/{name}", text=code)


def test_line_endings_are_kept() -> None:
    assert only(decode("a.txt", b"one\r\ntwo\rthree\n")).text == "one\r\ntwo\rthree\n"


def test_bom_is_dropped() -> None:
    assert only(decode("a.md", b"\xef\xbb\xbf# Hi\n")).text == "# Hi\n"


def test_utf8_files_record_their_encoding() -> None:
    assert only(decode("a.md", "# Ünïcode\n".encode())).encoding == "utf-8"
    assert only(decode("a.md", b"\xef\xbb\xbf# Hi\n")).encoding == "utf-8"


@pytest.mark.parametrize(
    ("codec", "encoding"),
    [("utf-8-sig", "utf-8"), ("utf-16", "utf-16"), ("utf-32", "utf-32")],
)
@pytest.mark.parametrize("name", ["a.txt", "b.md", "c.py", "d.html"])
def test_a_bom_decides_for_every_single_document_type(name: str, codec: str, encoding: str) -> None:
    text = "<p>Grüße, мир, 世界</p>\n" if name.endswith(".html") else "Grüße, мир, 世界\n"
    doc = only(decode(name, text.encode(codec)))
    assert doc.encoding == encoding
    assert doc.text == ("Grüße, мир, 世界" if name.endswith(".html") else text)


def test_a_legacy_text_file_is_detected_when_it_is_long_enough() -> None:
    text = ("Прогрев манипулятора длится десять минут; затем снимают первое измерение. "
            "Если в цехе холодно, прогрев продлевают вдвое. ") * 3
    doc = only(decode("notes.txt", text.encode("cp1251")))
    assert (doc.text, doc.encoding) == (text, "windows-1251")


def test_legacy_text_is_read_right_or_rejected_never_as_mojibake() -> None:
    # charset-normalizer 3.5 ranks cp1257 ("trčs") above cp1252 for this French prose.
    text = ("Le café était déjà servi quand les élèves sont arrivés. Très tôt, à côté de la "
            "fenêtre, le professeur expliquait l'histoire – « voilà », disait-il. ") * 4
    record = only(decode("notes.txt", text.encode("cp1252")))
    if isinstance(record, Document):
        assert record.text == text
    else:
        assert record.reason.startswith("not valid UTF-8 at byte 6")


def test_the_size_limit_is_on_the_decoded_utf8_bytes() -> None:
    text = "校正記録" * 10  # 2 bytes a character in UTF-16, 3 in UTF-8
    data = text.encode("utf-16")
    options = ReadOptions(max_document_bytes=len(data))
    assert rejection("a.txt", data, options) == f"document is 120 bytes, over the limit of {len(data)}"


def test_decode_text_order() -> None:
    # BOM before the binary sniff (UTF-16 is full of NULs), the sniff before any detector.
    assert decode_text("ab".encode("utf-16")) == ("ab", "utf-16")
    assert decode_text(b"\x89PNG\r\n\x1a\n\x00\x00") == BINARY
    assert decode_text(b"plain") == ("plain", "utf-8")


def test_codec_names_are_normalised_python_codecs() -> None:
    assert [codec_name(c) for c in ("CP1251", "windows_1252", "utf8", "utf_16_be", "sjis",
                                    "cp874", "latin1")] == [
        "windows-1251", "windows-1252", "utf-8", "utf-16-be", "shift_jis", "cp874", "iso8859-1"]
    for name in ("windows-1251", "cp874", "shift_jis"):
        assert "é".encode("cp1252").decode(name, "replace")  # every recorded name is a codec


def test_locator() -> None:
    assert locator("d/x.jsonl", 3) == "d/x.jsonl#L3"
    assert locator("gs://b/t.parquet", 0) == "gs://b/t.parquet#row0"
    assert locator("a.md", 0) == "a.md"


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("empty.md", b"", "empty document"),
        ("blank.txt", b" \r\n\t\n", "empty document"),
        ("bom-only.txt", b"\xef\xbb\xbf\n", "empty document"),
        ("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
        ("controls.md", bytes(range(1, 8)) * 10 + b"some text", "binary file"),
        # Too little evidence for detection: the UTF-8 error stands.
        ("latin1.txt", b"caf\xe9 au lait", f"not valid UTF-8 at byte 3{UNDETECTED}"),
        # A BOM decides: no detection.
        ("bom-latin1.txt", b"\xef\xbb\xbfab\xff", "not valid UTF-8 at byte 5"),
        ("truncated.md", "ab€".encode()[:-1], f"not valid UTF-8 at byte 2{UNDETECTED}"),
        ("surrogate.txt", b"a\xed\xa0\x80b", f"not valid UTF-8 at byte 1{UNDETECTED}"),
        ("bad-utf16.txt", b"\xff\xfea\x00\x00\xd8", "not valid UTF-16 at byte 4"),
        # Bytes behind a UTF-16 BOM that decode to control characters are still binary.
        ("bom-binary.txt", b"\xff\xfe" + "\x01\x02\x03\x00".encode("utf-16-le") * 20,
         "binary file"),
        ("slides.key", b"PK\x03\x04", "unsupported file type .key"),
        ("paper.pdf", b"%PDF-1.7", "truncated PDF (no %%EOF marker at its end)"),
        ("README", b"text", "unsupported file type (no extension)"),
        ("archive.jsonl.gz", b"\x1f\x8b", "truncated gzip data"),  # more in test_containers.py
    ],
)
def test_bad_files_are_rejected_with_the_reason(name: str, data: bytes, reason: str) -> None:
    assert rejection(name, data) == reason


def test_a_text_with_some_controls_is_not_binary() -> None:
    data = b"\x1b[31mred\x1b[0m\tand a form feed\x0c " + b"plain words " * 5
    assert isinstance(only(decode("log.txt", data)), Document)


@pytest.mark.parametrize("name", ["big.txt", "big.html"])
def test_oversized_document_is_rejected(name: str) -> None:
    options = ReadOptions(max_document_bytes=10)
    assert rejection(name, b"x" * 11, options) == "document is 11 bytes, over the limit of 10"
    assert isinstance(only(decode(name, b"x" * 10, options)), Document)


def test_no_size_limit() -> None:
    options = ReadOptions(max_document_bytes=None)
    assert only(decode("big.txt", b"x" * 20_000_000, options)).text == "x" * 20_000_000


@pytest.mark.parametrize(
    ("name", "size", "reason"),
    [
        ("big.md", 11, "document is 11 bytes, over the limit of 10"),
        ("empty.jsonl", 0, "empty document"),
        ("x.odg", 5, "unsupported file type .odg"),  # an OpenDocument drawing: no reader takes it
    ],
)
def test_reject_before_reading(name: str, size: int, reason: str) -> None:
    record = reject_before_reading(f"{ROOT}/{name}", ROOT, size, ReadOptions(max_document_bytes=10))
    assert record == Rejected(f"{ROOT}/{name}", name, reason)


@pytest.mark.parametrize(("name", "size"), [("ok.md", 10), ("big.jsonl", 11), ("big.parquet", 99),
                                            ("big.pdf", 99), ("big.odt", 99)])
def test_reject_before_reading_lets_through(name: str, size: int) -> None:
    # A JSONL or Parquet file holds many documents, a PDF mostly fonts and images: the limit
    # applies to the text, after reading.
    assert reject_before_reading(name, "", size, ReadOptions(max_document_bytes=10)) is None


@pytest.mark.parametrize(
    ("cls", "bad"),
    [
        (ReadOptions, {"max_document_bytes": 0}),
        (ReadOptions, {"max_document_bytes": True}),
        (ReadOptions, {"jsonl": {"id_field": "key"}}),
        (JsonlOptions, {"id_field": ""}),
        (JsonlOptions, {"metadata_field": ""}),
        (ParquetOptions, {"metadata_columns": ["a"]}),
        (ParquetOptions, {"metadata_columns": ("a", "")}),
    ],
)
def test_options_are_validated(cls: type, bad: dict) -> None:
    with pytest.raises(ValueError, match=cls.__name__):
        cls(**bad)


# --- HTML --------------------------------------------------------------------------------------

PAGE = """<!doctype html>
<html><head><title>Not text</title><style>p { color: red }</style>
<script>var x = "<p>no</p>";</script></head>
<body>
  <nav><ul><li><a href="/">Home</a></li><li>Docs</li></ul></nav>
  <h1>Arm   calibration</h1>
  <p>Warm up for <b>20</b> minutes &amp; check
     the &lt;zero&gt; pose.<br>Then start.</p>
  <h3>Steps</h3>
  <table><tr><th>Step</th><th>Time</th></tr><tr><td>Home</td><td>1 min</td></tr></table>
  <pre><code># not a heading
  indented();</code></pre>
  <!-- a comment -->
  <noscript>Enable JavaScript</noscript>
</body></html>"""


def test_html_to_text() -> None:
    assert html_to_text(PAGE) == (
        "- Home\n- Docs\n\n"
        "# Arm calibration\n\n"
        "Warm up for 20 minutes & check the <zero> pose.\nThen start.\n\n"
        "### Steps\n\n"
        "Step | Time\nHome | 1 min\n\n"
        "```\n# not a heading\n  indented();\n```"
    )


@pytest.mark.parametrize(
    ("html", "text"),
    [
        ("plain text, no tags", "plain text, no tags"),
        ("<head><title>t</title><p>body without </head> or <body>", "body without or"),
        ("<div>a<div>b</div>c</div>", "a\n\nb\n\nc"),
        ("<p>one<p>two", "one\n\ntwo"),
        ("<h2>a<br>b</h2>", "## a b"),
        ("<pre>x = ```y```</pre>", "````\nx = ```y```\n````"),
        ("&eacute;&#233;&#xE9; &nbsp;x", "ééé x"),
        ("<script>unclosed", ""),
        ("<ul><li>a<ul><li>b</li></ul></li></ul>", "- a\n- b"),
    ],
)
def test_html_cases(html: str, text: str) -> None:
    assert html_to_text(html) == text


def test_html_file_is_one_document() -> None:
    doc = only(decode("site/page.HTM", PAGE.encode()))
    assert doc.doc_id == "site/page.HTM" and doc.text == html_to_text(PAGE)


def test_html_with_no_text_is_empty() -> None:
    assert rejection("blank.html", b"<html><head><title>x</title></head><body> </body>") == (
        "empty document"
    )


# A page as sites serve them: cookie banner, header and navigation, the article, a footer.
CHROME_HEAD = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Gripper G2 | Northwind</title>
<style>body{font-family:sans-serif}</style><script>window.dataLayer=[];</script></head><body>
<div id="cookie-banner" class="cookie-consent"><p>We use cookies to improve your experience. By
continuing to browse you accept our cookie policy.</p><button>Accept all</button></div>
<header class="site-header"><a href="/">Northwind Robotics</a><nav class="main-nav"><ul>
<li><a href="/products/">Products</a></li><li><a href="/support/">Support</a></li>
<li><a href="/company/">Company</a></li><li><a href="/careers/">Careers</a></li></ul></nav></header>
"""
CHROME_FOOT = """<footer class="site-footer"><p>Northwind Robotics GmbH, Hafenstrasse 12, 20457 Hamburg.
All rights reserved.</p><ul><li><a href="/imprint">Imprint</a></li><li><a href="/privacy">Privacy</a></li>
</ul></footer></body></html>"""
ARTICLE = """<main id="main"><article>
<h1>Gripper G2 maintenance</h1>
<p>The G2 adaptive gripper needs little maintenance, but its fingertips wear with use and the force
sensor drifts slowly over months of operation. This guide explains what to check and how often.</p>
<h2>Maintenance intervals</h2>
<p>Follow the intervals in the table below; shorten them in dusty environments or when the gripper
handles abrasive parts.</p>
<table><thead><tr><th>Task</th><th>Interval</th></tr></thead>
<tbody><tr><td>Inspect fingertips</td><td>Weekly</td></tr>
<tr><td>Recalibrate force sensor</td><td>Every 3 months</td></tr></tbody></table>
<h2>Recalibrating the force sensor</h2>
<p>Run the calibration routine from the controller shell. The gripper must be empty and closed
before you start, otherwise the zero point is wrong.</p>
<pre><code>nwctl gripper calibrate --force
# wait until the LED turns green
nwctl gripper status</code></pre>
<p>When the routine reports a drift above two newtons, replace the sensor module instead of
calibrating again.</p>
</article></main>
"""


def test_trafilatura_page_keeps_headings_table_and_code() -> None:
    doc = only(decode("site/gripper.html", (CHROME_HEAD + ARTICLE + CHROME_FOOT).encode()))
    assert isinstance(doc, Document)
    lines = doc.text.split("\n")
    # As the splitter reads them (CommonMark: the "#" line in the code block is code).
    assert [(h.level, h.title) for h in headings(doc.text)] == [
        (1, "Gripper G2 maintenance"), (2, "Maintenance intervals"), (2, "Recalibrating the force sensor"),
    ]
    table = [line.strip() for line in lines if line.lstrip().startswith("|")]
    assert table == ["| Task | Interval |", "|---|---|", "| Inspect fingertips | Weekly |",
                     "| Recalibrate force sensor | Every 3 months |"]
    fence = lines.index("```")
    assert lines[fence + 1 : fence + 5] == [
        "nwctl gripper calibrate --force", "# wait until the LED turns green", "nwctl gripper status", "```",
    ]
    for chrome in ("cookies", "Careers", "Hafenstrasse", "Imprint", "Northwind Robotics", "dataLayer"):
        assert chrome not in doc.text
    assert "replace the sensor module instead of calibrating again." in doc.text


def test_page_of_chrome_only_has_no_main_content() -> None:
    page = CHROME_HEAD + "<main></main>" + CHROME_FOOT
    assert len(html_to_text(page)) >= SHORT_PAGE_CHARS  # long enough to go to trafilatura
    assert rejection("site/empty-shell.html", page.encode()) == NO_MAIN_CONTENT
    assert html_to_markdown(page) is None


def test_short_page_keeps_its_structure() -> None:
    # Under SHORT_PAGE_CHARS of text trafilatura would return a structure-less dump; the
    # structural converter keeps the heading.
    page = "<html><head><title>T</title></head><body><h1>Page</h1><p>Hello &amp; bye.</p></body></html>"
    assert html_to_markdown(page) == "# Page\n\nHello & bye."


@given(st.lists(st.sampled_from(["<p>", "</p>", "<h2>", "</h2>", "<pre>", "<table><tr><td>", "</td>",
                                 "<nav>", "</nav>", "<article>", "<script>", "</script>", "<!--",
                                 "-->", "&amp;", "<![CDATA[", "\x00", "<", ">", "\"", "word " * 30]),
                max_size=40))
def test_html_to_markdown_never_raises(pieces: list[str]) -> None:
    text = html_to_markdown("".join(pieces))
    assert text is None or (isinstance(text, str) and text.strip())


@given(st.text())
def test_html_to_text_never_raises(html: str) -> None:
    assert isinstance(html_to_text(html), str)


@given(st.lists(st.sampled_from(["<p>", "</p>", "<h2>", "</h2>", "<pre>", "</pre>", "<br>",
                                 "<li>", "<script>", "</script>", "<head>", "<td>", "<tr>",
                                 "</tr>", "word", " ", "\n", "&amp;", "<!--", "-->", "<![CDATA["]),
                max_size=40))
def test_html_tag_soup_never_raises(pieces: list[str]) -> None:
    text = html_to_text("".join(pieces))
    assert text == text.strip() and "\n\n\n" not in text


LONG_RU = ("Прогрев манипулятора длится десять минут; затем снимают первое измерение. "
           "Если в цехе холодно, прогрев продлевают вдвое, а журнал подписывает инженер. ") * 2


def ru_page(head: str) -> str:
    return f"<html><head>{head}</head><body><article><p>{LONG_RU}</p></article></body></html>"


@pytest.mark.parametrize(
    "head",
    [
        "<meta charset=windows-1251>",
        "<META CHARSET='cp1251'/>",
        '<meta http-equiv="content-type" content="text/html;charset=windows-1251">',
        "<meta content='text/html; charset=\"windows-1251\"' http-equiv='Content-Type'>",
    ],
)
def test_html_declared_charset(head: str) -> None:
    doc = only(decode("p.html", ru_page(head).encode("cp1251")))
    assert (doc.text, doc.encoding) == (LONG_RU.strip(), "windows-1251")


def test_html_declaration_in_a_comment_or_unknown_is_passed_over() -> None:
    for head in ("<!-- <meta charset=koi8-r> -->", "<meta charset=no-such-encoding>"):
        doc = only(decode("p.html", ru_page(head).encode("utf-8")))
        assert (doc.text, doc.encoding) == (LONG_RU.strip(), "utf-8")


def test_html_declared_utf16_in_ascii_bytes_means_utf8() -> None:
    doc = only(decode("p.html", ru_page("<meta charset=utf-16>").encode("utf-8")))
    assert doc.encoding == "utf-8"


def test_html_declared_latin1_is_windows_1252_as_browsers_read_it() -> None:
    text = "Price: 10 \u20ac \u2013 \u201cquoted\u201d. " + "Plain words in a paragraph. " * 10
    html = f"<html><head><meta charset=iso-8859-1></head><body><p>{text}</p></body></html>"
    doc = only(decode("p.html", html.encode("cp1252")))
    assert (doc.text, doc.encoding) == (text.strip(), "windows-1252")


def test_html_declared_shift_jis_with_nec_extensions_uses_cp932() -> None:
    text = "①から⑩までの手順に従ってください。" * 12  # circled digits: NEC row 13, not JIS X 0208
    html = f"<html><head><meta charset=Shift_JIS></head><body><p>{text}</p></body></html>"
    doc = only(decode("p.html", html.encode("cp932")))
    assert (doc.text, doc.encoding) == (text, "cp932")


def test_deep_article_under_a_shallow_intro_is_not_lost() -> None:
    # trafilatura alone returns the intro only: libxml2 dropped the article below depth 256.
    intro = "Welcome to the documentation portal, where every manual is published. " * 3
    article = "Warm the arm up for ten minutes before the first measurement. " * 6
    html = (f"<html><body><p>{intro}</p>{'<div>' * 300}<h2>Warm-up</h2><p>{article}</p>"
            f"{'</div>' * 300}</body></html>")
    doc = only(decode("deep.html", html.encode()))
    assert doc.text == f"{intro.strip()}\n\n## Warm-up\n\n{article.strip()}"


# --- JSON lines --------------------------------------------------------------------------------


def test_jsonl_records() -> None:
    data = jsonl(
        {"id": "a", "text": "Alpha.", "metadata": {"lang": "en", "tags": ["x", "é"], "n": 1}},
        "",
        {"id": 7, "text": "Seven.\r\nLines kept."},
        "   ",
        {"id": "a", "text": "Same id again.", "metadata": None},
    )
    assert decode("data/docs.jsonl", data) == [
        Document("a", f"{ROOT}/data/docs.jsonl", "Alpha.",
                 (("lang", '"en"'), ("n", "1"), ("tags", '["x", "é"]'))),
        Document("7", f"{ROOT}/data/docs.jsonl", "Seven.\r\nLines kept."),
        Document("a", f"{ROOT}/data/docs.jsonl", "Same id again."),
    ]


def test_jsonl_metadata_values_are_canonical_json() -> None:
    data = jsonl({"id": "a", "text": "t", "metadata": {"z": {"b": 1, "a": [True, None]}, "a": 1.5}})
    assert only(decode("m.jsonl", data)).metadata == (
        ("a", "1.5"), ("z", '{"a": [true, null], "b": 1}'),
    )


def test_jsonl_crlf_and_bom() -> None:
    data = b'\xef\xbb\xbf{"id": "a", "text": "A"}\r\n{"id": "b", "text": "B"}\r\n'
    assert [d.doc_id for d in decode("w.jsonl", data)] == ["a", "b"]


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32", "utf-32-be"])
def test_jsonl_with_a_utf16_or_utf32_bom(codec: str) -> None:
    lines = '{"id": "a", "text": "Grüße"}\r\n\n{"id": "b", "text": "мир"}\n{"id": 3}\n'
    bom = "" if codec in ("utf-16", "utf-32") else "\ufeff"
    records = decode("w.jsonl", (bom + lines).encode(codec))
    docs = [r for r in records if isinstance(r, Document)]
    assert [(d.doc_id, d.text, d.position, d.encoding) for d in docs] == [
        ("a", "Grüße", 1, codec[:6]), ("b", "мир", 3, codec[:6])]
    assert records[-1] == Rejected(f"{ROOT}/w.jsonl", "w.jsonl#L4", "line 4: no 'text' field")


def test_jsonl_documents_know_their_line() -> None:
    docs = decode("p.jsonl", jsonl({"id": "a", "text": "A"}, "", {"id": "b", "text": "B"}))
    assert [(d.doc_id, d.position, d.encoding) for d in docs] == [("a", 1, "utf-8"), ("b", 3, "utf-8")]


def test_jsonl_line_separator_inside_a_string_is_not_a_line_break() -> None:
    data = jsonl({"id": "a", "text": "one\u2028two\x85three"}).replace(b"\\u2028", "\u2028".encode())
    assert only(decode("s.jsonl", data)).text == "one\u2028two\x85three"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"id": "a", "text": ', "line 2: not valid JSON (Expecting value, column 21)"),
        ("[1, 2]", "line 2: not a JSON object (got an array)"),
        ('"just a string"', "line 2: not a JSON object (got a string)"),
        ('{"text": "no id"}', "line 2: no 'id' field"),
        ('{"id": "b"}', "line 2: no 'text' field"),
        ('{"id": "b", "text": 3}', "line 2: 'text' is an integer, not a string"),
        ('{"id": "b", "text": null}', "line 2: 'text' is null, not a string"),
        ('{"id": "b", "text": ["x"]}', "line 2: 'text' is an array, not a string"),
        ('{"id": null, "text": "x"}', "line 2: 'id' is null, not a string or integer"),
        ('{"id": 1.5, "text": "x"}', "line 2: 'id' is a number, not a string or integer"),
        ('{"id": true, "text": "x"}', "line 2: 'id' is a boolean, not a string or integer"),
        ('{"id": {"k": 1}, "text": "x"}', "line 2: 'id' is an object, not a string or integer"),
        ('{"id": "", "text": "x"}', "line 2: 'id' is an empty string"),
        ('{"id": "b", "text": " \\n "}', "line 2: empty document (id 'b')"),
        ('{"id": "b", "text": "x", "metadata": [1]}', "line 2: 'metadata' is an array, not an object"),
        ('{"id": "b", "text": "\\ud800"}', "line 2: 'text' contains an unpaired surrogate escape (id 'b')"),
        ('{"id": "\\udc00", "text": "x"}', "line 2: 'id' contains an unpaired surrogate escape"),
        ('{"id": "b", "text": "x", "metadata": {"k": "\\ud800"}}',
         "line 2: metadata 'k' contains an unpaired surrogate escape"),
        ("[" * 100_000, "line 2: not valid JSON (nested too deeply)"),
        ('{"id": ' + "9" * 5000 + ', "text": "x"}', "line 2: not valid JSON (Exceeds the limit"),
    ],
)
def test_bad_jsonl_line_is_rejected_alone(line: str, reason: str) -> None:
    good = {"id": "ok", "text": "Fine."}
    records = decode("data/x.jsonl", jsonl(good, line, good))
    assert records[0] == records[2] == Document("ok", f"{ROOT}/data/x.jsonl", "Fine.")
    bad = records[1]
    assert isinstance(bad, Rejected)
    assert bad.doc_id == "data/x.jsonl#L2" and bad.uri == f"{ROOT}/data/x.jsonl"
    assert bad.reason.startswith(reason), bad.reason


def test_jsonl_invalid_utf8_rejects_only_its_line_with_the_file_offset() -> None:
    data = b'{"id": "a", "text": "A"}\n{"id": "b", "text": "caf\xe9"}\n'
    records = decode("x.jsonl", data)
    assert records[0].doc_id == "a"
    assert records[1] == Rejected(f"{ROOT}/x.jsonl", "x.jsonl#L2", "line 2: not valid UTF-8 at byte 49")
    assert data[49:50] == b"\xe9"


def test_jsonl_record_over_the_limit() -> None:
    data = jsonl({"id": "big", "text": "é" * 6}, {"id": "ok", "text": "é" * 5})
    records = decode("x.jsonl", data, ReadOptions(max_document_bytes=10))
    assert records[0].reason == "line 1: document is 12 bytes, over the limit of 10 (id 'big')"
    assert records[1].doc_id == "ok"


def test_jsonl_custom_fields() -> None:
    options = ReadOptions(JsonlOptions(id_field="key", text_field="body", metadata_field=None))
    data = jsonl({"key": "k", "body": "B", "metadata": "ignored, not an object"})
    assert only(decode("x.jsonl", data, options)) == Document("k", f"{ROOT}/x.jsonl", "B")


@pytest.mark.parametrize("data", [b"\n\n  \n", b"\xef\xbb\xbf"])
def test_jsonl_with_no_lines_is_empty(data: bytes) -> None:
    assert rejection("e.jsonl", data).startswith("empty document")


def test_binary_jsonl_is_rejected_whole() -> None:
    assert rejection("x.jsonl", b'{"id": "a", "text": "\x00"}') == "binary file"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
json_lines = st.one_of(
    json_values.map(json.dumps),
    st.fixed_dictionaries({"id": json_values, "text": json_values},
                          optional={"metadata": json_values}).map(json.dumps),
    st.text(),
)


def blank(raw: bytes) -> bool:
    try:
        return not raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8").strip()
    except UnicodeDecodeError:
        return False


@pytest.mark.slow
@given(st.lists(json_lines, max_size=8))
def test_every_jsonl_line_is_a_document_or_a_rejection(lines: list[str]) -> None:
    data = "\n".join(line.replace("\n", " ") for line in lines).encode("utf-8", "surrogatepass")
    records = decode("p.jsonl", data)
    assert all(isinstance(r, (Document, Rejected)) for r in records)
    if records and isinstance(records[0], Rejected) and records[0].doc_id == "p.jsonl":
        return  # judged as a whole file: binary, or no lines at all
    nonblank = [n for n, raw in enumerate(data.split(b"\n"), 1) if not blank(raw)]
    assert len(records) == len(nonblank)
    for number, record in zip(nonblank, records):
        if isinstance(record, Rejected):
            assert record.doc_id == f"p.jsonl#L{number}" and record.reason.startswith(f"line {number}: ")
        else:
            record.text.encode("utf-8")  # every document can be written as UTF-8


# --- Parquet -----------------------------------------------------------------------------------


def test_parquet_rows() -> None:
    table = pa.table({
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "text": ["One.", None, "Three.", "  "],
        "lang": ["en", "de", None, "fr"],
    })
    records = decode("t.parquet", parquet_bytes(table), ReadOptions(parquet=ParquetOptions(metadata_columns=("lang",))))
    uri = f"{ROOT}/t.parquet"
    assert records == [
        Document("1", uri, "One.", (("lang", '"en"'),)),
        Rejected(uri, "t.parquet#row1", "row 1: 'text' is null, not a string"),
        Document("3", uri, "Three.", (("lang", "null"),)),
        Rejected(uri, "t.parquet#row3", "row 3: empty document (id '4')"),
    ]


def test_parquet_custom_columns_and_typed_metadata() -> None:
    import datetime

    table = pa.table({
        "doc": ["a"], "body": ["Body."], "when": [datetime.date(2024, 6, 1)], "tags": [["x", "y"]],
    })
    options = ReadOptions(parquet=ParquetOptions(id_column="doc", text_column="body",
                                                 metadata_columns=("when", "tags")))
    assert only(decode("t.parquet", parquet_bytes(table), options)) == Document(
        "a", f"{ROOT}/t.parquet", "Body.", (("tags", '["x", "y"]'), ("when", '"2024-06-01"'))
    )


def test_parquet_dictionary_encoded_text() -> None:
    table = pa.table({"id": ["a"], "text": pa.array(["Dict."]).dictionary_encode()})
    assert only(decode("t.parquet", parquet_bytes(table))).text == "Dict."


def test_parquet_missing_columns_reject_the_file() -> None:
    table = pa.table({"key": ["a"], "text": ["x"]})
    options = ReadOptions(parquet=ParquetOptions(metadata_columns=("lang",)))
    assert rejection("t.parquet", parquet_bytes(table), options) == (
        "Parquet file has no column 'id', 'lang'"
    )


def test_parquet_bad_id_and_text_types() -> None:
    table = pa.table({"id": [1.5, None], "text": [1, 2]})
    assert [r.reason for r in decode("t.parquet", parquet_bytes(table))] == [
        "row 0: 'id' is a number, not a string or integer",
        "row 1: 'id' is null, not a string or integer",
    ]
    table = pa.table({"id": ["a"], "text": [1]})
    assert only(decode("t.parquet", parquet_bytes(table))).reason == (
        "row 0: 'text' is an integer, not a string"
    )


@pytest.mark.parametrize("data", [b"not parquet at all", b"PAR1" + b"\x00" * 20 + b"PAR1"])
def test_unreadable_parquet_is_rejected(data: bytes) -> None:
    assert rejection("t.parquet", data).startswith("not a readable Parquet file (")


def test_parquet_row_over_the_limit() -> None:
    table = pa.table({"id": ["a", "b"], "text": ["x" * 11, "x" * 10]})
    records = decode("t.parquet", parquet_bytes(table), ReadOptions(max_document_bytes=10))
    assert records[0].reason == "row 0: document is 11 bytes, over the limit of 10 (id 'a')"
    assert records[1].doc_id == "b"


def test_parquet_documents_know_their_row() -> None:
    docs = decode("t.parquet", parquet_bytes(pa.table({"id": ["x", "y"], "text": ["X", "Y"]})))
    assert [(d.doc_id, d.position, d.encoding) for d in docs] == [("x", 0, "utf-8"), ("y", 1, "utf-8")]


def test_parquet_without_rows_is_rejected_as_empty() -> None:
    table = pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())})
    assert rejection("t.parquet", parquet_bytes(table)) == "empty document (Parquet file has no rows)"


# --- Properties --------------------------------------------------------------------------------

# Text a person writes: no C0 controls but tab and the line endings (they would make it
# "binary" by design), and no leading BOM (it is dropped, by design).
written_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc",)) | st.sampled_from("\t\n\r")
).filter(lambda t: t.strip() and not t.startswith("\ufeff"))


@given(written_text, st.sampled_from(["a.txt", "b.md", "c.markdown", "D.TXT"]))
def test_any_written_text_round_trips(text: str, name: str) -> None:
    assert only(decode(name, text.encode("utf-8"))) == Document(name, f"{ROOT}/{name}", text)


@given(written_text, st.sampled_from(["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be",
                                      "utf-32", "utf-32-le", "utf-32-be"]),
       st.sampled_from(["a.txt", "b.md", "c.py"]))
def test_any_written_text_with_a_bom_round_trips(text: str, codec: str, name: str) -> None:
    bom = "\ufeff" if codec.endswith(("-le", "-be")) else ""
    assume(not any(0xD800 <= ord(c) <= 0xDFFF for c in text))
    doc = only(decode(name, (bom + text).encode(codec)))
    assert (doc.text, doc.encoding) == (text, "utf-8" if codec == "utf-8-sig" else codec[:6])


@given(st.binary(max_size=2000),
       st.sampled_from(["a.txt", "a.md", "a.html", "a.jsonl", "a.parquet", "a.bin"]),
       st.sampled_from([None, 1, 100]))
def test_any_bytes_never_raise(data: bytes, name: str, limit: int | None) -> None:
    records = decode(name, data, ReadOptions(max_document_bytes=limit))
    assert all(isinstance(r, (Document, Rejected)) for r in records)
    assert records
    for record in records:
        if isinstance(record, Document):
            record.text.encode("utf-8")
            assert record.text.strip()
            # The limit is on the file's bytes; an HTML page's text may differ from them.
            assert limit is None or name == "a.html" or len(record.text.encode("utf-8")) <= limit
        else:
            assert record.reason


def test_readers_do_not_import_beam() -> None:
    code = "import sys, chunkline.readers; sys.exit('apache_beam' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --- Metadata and format -----------------------------------------------------------------------


def meta(doc: Document) -> dict:
    return {key: json.loads(value) for key, value in doc.all_metadata()}


def test_front_matter_is_metadata_and_not_text() -> None:
    data = "---\ntitle: Arm guide\naccess: [ops]\nreviewed: 2024-06-01\n---\n# Arm\n\nBody.\n".encode()
    doc = only(decode("guides/arm.md", data))
    assert doc.text == "# Arm\n\nBody.\n" and doc.format == "markdown"
    assert meta(doc) == {"title": "Arm guide", "access": ["ops"], "reviewed": "2024-06-01",
                         "source_uri": f"{ROOT}/guides/arm.md", "file_size": len(data)}


@pytest.mark.parametrize(("data", "reason"), [
    (b"---\ntitle: [unclosed\n---\nBody\n", "front matter is not valid YAML"),
    (b"---\ntitle: x\n---\n\n  \n", "empty document (front matter only)"),
    (b"---\nscore: .inf\n---\nBody\n", "front matter: metadata 'score' is inf"),
])
def test_bad_front_matter_rejects_the_document(data: bytes, reason: str) -> None:
    assert rejection("a.md", data).startswith(reason)


def test_front_matter_is_not_read_in_code_or_html() -> None:
    source = b"---\ntitle: x\n---\nprint('hi')\n"
    assert only(decode("a.py", source)).text == source.decode()


def test_html_metadata_from_the_page() -> None:
    page = ("<html lang='de-AT'><head><title>Arm guide</title><meta name='author' content='Ann Lee'>"
            "<meta property='article:published_time' content='2024-03-05'>"
            "<link rel='canonical' href='https://example.org/arm'></head>"
            "<body><article><h1>Arm guide</h1><p>" + "Mount the arm on its base plate. " * 20
            + "</p></article></body></html>")
    doc = only(decode("site/arm.html", page.encode()))
    fields = meta(doc)
    assert doc.format == "html"
    assert {k: fields[k] for k in ("title", "author", "date", "url", "language")} == {
        "title": "Arm guide", "author": "Ann Lee", "date": "2024-03-05",
        "url": "https://example.org/arm", "language": "de-AT"}


def test_record_metadata_wins_and_the_dumps_size_and_time_are_not_the_records() -> None:
    data = jsonl({"id": "a", "text": "Alpha.", "metadata": {"source_uri": "https://wiki/a", "n": 1}})
    [doc] = decode_file(f"{ROOT}/d.jsonl", data, ROOT, OPTIONS, 86_400.0)
    assert doc.format == "jsonl"
    # The dump's size and time change with any record in it: a record's row would change
    # with every other record's edit.
    assert meta(doc) == {"source_uri": "https://wiki/a", "n": 1}
    assert dict(doc.chunk_metadata(("file_size", "file_modified"))) == dict(doc.all_metadata())
    [page] = decode_file(f"{ROOT}/d.md", b"Alpha.", ROOT, OPTIONS, 86_400.0)
    assert meta(page) == {"source_uri": f"{ROOT}/d.md", "file_size": 6,
                          "file_modified": "1970-01-02T00:00:00Z"}


def test_metadata_json_cannot_hold_rejects_the_record() -> None:
    data = jsonl({"id": "a", "text": "ok", "metadata": {"n": 1}}, '{"id": "b", "text": "x", "metadata": {"score": Infinity}}')
    good, bad = decode("d.jsonl", data)
    assert isinstance(good, Document)
    assert bad.reason == "line 2: metadata 'score' is inf, which JSON cannot hold"
    table = pa.table({"id": ["a"], "text": ["x"], "blob": [b"\x00\x01"]})
    options = ReadOptions(parquet=ParquetOptions(metadata_columns=("blob",)))
    assert only(decode("t.parquet", parquet_bytes(table), options)).reason == (
        "row 0: metadata 'blob' is binary (bytes), not text")


@pytest.mark.parametrize(("name", "expected"), [
    ("a.md", "markdown"), ("a.markdown", "markdown"), ("a.txt", "text"), ("a.py", "code"),
    ("a.go", "code"),
])
def test_format_is_recorded(name: str, expected: str) -> None:
    assert only(decode(name, b"text\n")).format == expected


def test_parquet_metadata_types_are_made_json() -> None:
    import datetime

    table = pa.table({
        "id": ["a"], "text": ["x"], "score": pa.array([float("nan")]),
        "at": pa.array([datetime.datetime(2024, 6, 1, 8, 30)], pa.timestamp("us", tz="UTC")),
        "owner": pa.array([{"team": "arm", "size": 3}]),
    })
    options = ReadOptions(parquet=ParquetOptions(metadata_columns=("score", "at", "owner")))
    assert meta(only(decode("t.parquet", parquet_bytes(table), options))) | {"file_size": 0} == {
        "score": None, "at": "2024-06-01T08:30:00+00:00", "owner": {"size": 3, "team": "arm"},
        "source_uri": f"{ROOT}/t.parquet", "file_size": 0}


# --- Metadata bounds and U+0000 ----------------------------------------------------------------


def nested_json(levels: int) -> str:
    """``levels`` JSON objects one inside the other, as text (deeper than json.dumps goes)."""
    return '{"a": ' * levels + "1" + "}" * levels


def front_matter_file(block: str, body: str = "# Title\n\nBody.\n") -> bytes:
    return f"---\n{block}\n---\n{body}".encode()


def html_page(path: str) -> bytes:
    return (f"<html><head><title>Arm</title><link rel='canonical' href='https://e.org/{path}'></head>"
            "<body><article><h1>Arm</h1><p>"
            + "Mount the arm on its base plate. " * 20 + "</p></article></body></html>").encode()


@pytest.mark.parametrize("levels", [32, 33, 500])
def test_jsonl_metadata_depth_is_bounded(levels: int) -> None:
    # The metadata object is level 1; 500 levels were accepted, and crashed Qdrant's client.
    line = '{"id": "a", "text": "Alpha.", "metadata": ' + nested_json(levels) + "}"
    record = only(decode("d.jsonl", line.encode()))
    if levels <= 32:
        assert isinstance(record, Document)
        return
    assert record.doc_id == "d.jsonl#L1"
    assert record.reason.startswith(f"line 1: metadata is nested {levels} levels deep, over the "
                                    "limit of 32 levels ('a.a.a.")


def test_metadata_too_deep_for_the_json_parser_is_rejected() -> None:
    line = '{"id": "a", "text": "Alpha.", "metadata": ' + nested_json(2000) + "}"
    assert only(decode("d.jsonl", line.encode())).reason == "line 1: not valid JSON (nested too deeply)"


def test_depth_limit_is_a_read_option() -> None:
    line = ('{"id": "a", "text": "Alpha.", "metadata": {"tags": [["x"]]}}').encode()
    assert only(decode("d.jsonl", line, ReadOptions(max_metadata_depth=2))).reason.startswith(
        "line 1: metadata is nested 3 levels deep, over the limit of 2 levels ('tags[0]' is at level 3)")
    assert isinstance(only(decode("d.jsonl", line, ReadOptions(max_metadata_depth=3))), Document)
    deep = ('{"id": "a", "text": "Alpha.", "metadata": ' + nested_json(300) + "}").encode()
    assert isinstance(only(decode("d.jsonl", deep, ReadOptions(max_metadata_depth=None))), Document)


def test_parquet_and_front_matter_depth_are_bounded() -> None:
    value = 1
    for _ in range(32):  # 32 lists in the column: level 33 with the metadata object
        value = [value]
    table = pa.table({"id": ["a"], "text": ["x"], "deep": pa.array([value])})
    options = ReadOptions(parquet=ParquetOptions(metadata_columns=("deep",)))
    record = only(decode("t.parquet", parquet_bytes(table), options))
    assert record.doc_id == "t.parquet#row0"
    assert record.reason.startswith("row 0: metadata is nested 33 levels deep, over the limit of 32")
    block = "k: " + "[" * 33 + "]" * 33
    assert rejection("a.md", front_matter_file(block)).startswith(
        "front matter: metadata is nested 34 levels deep, over the limit of 32 levels")


def test_jsonl_metadata_over_the_byte_limit_is_rejected_alone() -> None:
    # One record's megabyte of metadata went onto each of its 493 chunks, in every store.
    big = {"id": "big", "text": "Alpha.", "metadata": {"team": "arm", "body": "x" * 70_000}}
    small = {"id": "ok", "text": "Beta.", "metadata": {"team": "arm"}}
    records = decode("d.jsonl", jsonl(big, small))
    rejected, kept = records
    assert rejected.doc_id == "d.jsonl#L1" and kept.doc_id == "ok"
    size = len(metadata_json_of(big["metadata"], "d.jsonl", None).encode())  # a record: no size
    assert rejected.reason == (
        f"line 1: metadata is {size} bytes of JSON, over the limit of 65536 "
        f"(the largest value: 'body', 70002 bytes) (id 'big')")
    assert isinstance(only(decode("d.jsonl", jsonl(big), ReadOptions(max_metadata_bytes=None))), Document)


def metadata_json_of(fields: dict, name: str, size: int | None) -> str:
    """The metadata column of a document of ``name`` with ``fields``, as the reader writes it."""
    from chunkline.metadata import file_facts, merged, metadata_json, metadata_pairs

    return metadata_json(merged(file_facts(f"{ROOT}/{name}", size, None), metadata_pairs(fields.items())))


def test_the_byte_limit_counts_the_file_facts() -> None:
    data = b"Plain text.\n"
    facts = len(metadata_json_of({}, "a.txt", len(data)).encode())
    assert isinstance(only(decode("a.txt", data, ReadOptions(max_metadata_bytes=facts))), Document)
    assert rejection("a.txt", data, ReadOptions(max_metadata_bytes=facts - 1)) == (
        f"metadata is {facts} bytes of JSON, over the limit of {facts - 1} "
        f"(the largest value: 'source_uri', {len(ROOT) + 8} bytes)")


@pytest.mark.parametrize("name, data", [
    ("a.md", front_matter_file("title: " + "T" * 600)),
    ("a.html", html_page("T" * 600)),
])
def test_front_matter_and_page_metadata_over_the_byte_limit(name: str, data: bytes) -> None:
    options = ReadOptions(max_metadata_bytes=500)
    assert rejection(name, data, options).startswith("metadata is ")
    key, size = ("title", 602) if name.endswith(".md") else ("url", 616)
    assert f"over the limit of 500 (the largest value: '{key}', {size} bytes)" in rejection(name, data, options)
    assert isinstance(only(decode(name, data)), Document)


def test_pdf_information_over_the_byte_limit() -> None:
    from tests.pdfs import make_pdf

    data = make_pdf([["Some text on the page."]], title="T" * 600)
    assert "(the largest value: 'title', 602 bytes)" in rejection("a.pdf", data, ReadOptions(max_metadata_bytes=500))
    assert isinstance(only(decode("a.pdf", data)), Document)


def test_parquet_metadata_over_the_byte_limit() -> None:
    table = pa.table({"id": ["a", "b"], "text": ["x", "y"], "note": ["n" * 100, "short"]})
    options = ReadOptions(parquet=ParquetOptions(metadata_columns=("note",)), max_metadata_bytes=150)
    rejected, kept = decode("t.parquet", parquet_bytes(table), options)
    assert rejected.doc_id == "t.parquet#row0" and kept.doc_id == "b"
    assert rejected.reason.startswith("row 0: metadata is ")
    assert rejected.reason.endswith("(the largest value: 'note', 102 bytes) (id 'a')")


def test_metadata_limits_are_validated() -> None:
    for bad in ({"max_metadata_depth": 0}, {"max_metadata_bytes": 0}, {"max_metadata_depth": "3"}):
        with pytest.raises(ValueError):
            ReadOptions(**bad)
    assert (ReadOptions().max_metadata_depth, ReadOptions().max_metadata_bytes) == (32, 65_536)


@pytest.mark.parametrize("data, reason", [
    (jsonl({"id": "a\x00b", "text": "x"}), "line 1: 'id' contains U+0000 (NUL), which no id may hold"),
    (jsonl({"id": "ok", "text": "\x00\x00"}), "line 1: empty document (nothing but U+0000) (id 'ok')"),
])
def test_nul_in_an_id_or_as_the_whole_text_rejects_the_record(data: bytes, reason: str) -> None:
    record = only(decode("d.jsonl", data))
    assert record == Rejected(f"{ROOT}/d.jsonl", "d.jsonl#L1", reason)


def test_nul_in_a_parquet_id_rejects_the_row() -> None:
    table = pa.table({"id": ["a\x00", "b"], "text": ["x", "y"]})
    rejected, kept = decode("t.parquet", parquet_bytes(table))
    assert rejected.reason == "row 0: 'id' contains U+0000 (NUL), which no id may hold"
    assert kept.doc_id == "b"


def test_nul_in_a_file_name_rejects_the_file() -> None:
    assert decode("a\x00b.md", b"Text.\n") == [
        Rejected(f"{ROOT}/a\\x00b.md", "a\\x00b.md", "file name contains U+0000 (NUL)")]


def test_nul_never_reaches_a_documents_text_or_metadata() -> None:
    data = jsonl({"id": "a", "text": "Al\x00pha.", "metadata": {"te\x00am": "a\x00rm"}})
    doc = only(decode("d.jsonl", data))
    assert doc.text == "Alpha." and meta(doc)["te\ufffdam"] == "a\ufffdrm"
    # Past the binary sniff's first block, a NUL in a text file is dropped, not kept.
    text = "# Notes\n\n" + "Plain words. " * 700 + "\x00end\n"
    doc = only(decode("a.md", text.encode()))
    assert "\x00" not in doc.text and doc.text.endswith("Plain words. end\n")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=12), st.integers(200, 5_000))
def test_parquet_slices_cover_every_row_group_once_in_order(group_rows, slice_bytes) -> None:
    from chunkline.readers import parquet_slices

    buffer = pa.BufferOutputStream()
    rows = [f"text {i} " * (i % 7 + 1) for i in range(sum(group_rows))]
    with pq.ParquetWriter(buffer, pa.schema([("id", pa.string()), ("text", pa.string())])) as writer:
        start = 0
        for count in group_rows:
            writer.write_table(pa.table({"id": [str(i) for i in range(start, start + count)],
                                         "text": rows[start:start + count]}))
            start += count
    data = buffer.getvalue()
    metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    slices = parquet_slices(pa.BufferReader(data), slice_bytes)
    assert [s.first_group for s in slices] == [0] + [s.end_group for s in slices[:-1]]
    assert slices[-1].end_group == len(group_rows)
    assert [s.first_row for s in slices] == [sum(group_rows[:s.first_group]) for s in slices]
    for s in slices:
        sizes = [metadata.row_group(g).total_byte_size for g in range(s.first_group, s.end_group)]
        assert len(sizes) == 1 or sum(sizes) <= slice_bytes


JSON_LINES = st.lists(st.one_of(
    st.builds(lambda i, t: json.dumps({"id": f"r{i}", "text": t}), st.integers(0, 50),
              st.text(alphabet="ab \u2028é", min_size=1, max_size=30)),
    st.sampled_from(["", "   ", "not json", "{\"id\": 1}", "\r"]),
), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(JSON_LINES, st.integers(1, 200), st.booleans(), st.sampled_from([None, 1, 2, 3, 7, 64]))
def test_jsonl_slices_read_as_the_whole_file(lines, slice_bytes, final_newline, unit_lines) -> None:
    import io as _io

    from chunkline.readers import jsonl_slices, stream_jsonl

    data = "\n".join(lines).encode() + (b"\n" if final_newline else b"")
    slices = jsonl_slices(_io.BytesIO(data), slice_bytes, unit_lines)
    if unit_lines is not None and slices:
        # No piece spans two units of the memo, and each is cut only where bytes or a unit say.
        for part in slices:
            last_line = part.first_line + data[part.start:part.end].count(b"\n") - (
                0 if data[part.end - 1:part.end] != b"\n" else 1)
            assert part.first_line // unit_lines == max(part.first_line, last_line) // unit_lines
        for before, after in zip(slices, slices[1:]):
            assert after.first_line % unit_lines == 0 or after.start - before.start > slice_bytes
    options = ReadOptions()
    whole = list(stream_jsonl("u.jsonl", "u.jsonl", _io.BytesIO(data), options))
    if not slices:
        assume(False)
    assert slices[0].start == 0 and slices[-1].end == len(data)
    for before, after in zip(slices, slices[1:]):
        assert before.end == after.start and data[after.start - 1:after.start] == b"\n"
    for part in slices:
        assert part.first_line == data[:part.start].count(b"\n") + 1
    pieces = [r for part in slices
              for r in stream_jsonl("u.jsonl", "u.jsonl", _io.BytesIO(data), options, part)]
    assert pieces == whole and [getattr(r, "position", None) for r in pieces] == \
        [getattr(r, "position", None) for r in whole]


def test_whitespace_and_utf16_files_are_never_sliced() -> None:
    import io as _io

    from chunkline.readers import jsonl_slices

    assert jsonl_slices(_io.BytesIO(b" \n" * 1000), 10) == []
    utf16 = "\n".join(json.dumps({"id": i, "text": "x"}) for i in range(100)).encode("utf-16")
    assert jsonl_slices(_io.BytesIO(utf16), 10) == []


@given(st.binary(max_size=9000))
def test_looks_binary_counts_control_bytes_as_a_loop_would(data: bytes) -> None:
    from chunkline.readers.text import _CONTROL_BYTES, _MAX_CONTROL_RATIO, SNIFF_BYTES, looks_binary

    sample = data[:SNIFF_BYTES]
    controls = sum(1 for byte in sample if byte in _CONTROL_BYTES)
    assert looks_binary(data) == (b"\x00" in sample or controls > _MAX_CONTROL_RATIO * len(sample))
