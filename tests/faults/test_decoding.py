"""Every input accounted, decoded as what it is: legacy-encoded and UTF-16 text, pages nested past
libxml2's depth limit, a Parquet file without rows, and records that repeat an id."""

from __future__ import annotations

import io
import json
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to

from chunkline.readers import BINARY, ReadOptions, decode_file
from chunkline.records import Document, Rejected
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.dedupe import ExactDedupe

ROOT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "local.yaml"
ROOT = "/corpus"

RUSSIAN = (
    "Калибровка манипулятора начинается с прогрева: двигатели должны проработать десять минут, "
    "прежде чем снимать первые измерения. Съешь же ещё этих мягких французских булок, да выпей "
    "чаю. Если температура в цехе ниже пятнадцати градусов, прогрев продлевают вдвое, а журнал "
    "калибровки подписывает дежурный инженер смены."
)
JAPANESE = (
    "ロボットアームの校正は暖機運転から始まります。モーターを十分間動かしてから最初の測定を行って"
    "ください。工場の温度が十五度未満の場合は、暖機時間を二倍に延長します。校正記録には当直の技術者が"
    "署名します。測定値が許容範囲を超えた場合は、作業を中止して保守担当者に連絡してください。"
    "東京工場と大阪工場では同じ手順を使用します。"
)


def page(text: str, head: str = "") -> str:
    return (f"<!doctype html><html><head>{head}<title>Калибровка</title></head><body>"
            f"<article><h1>Guide</h1><p>{text}</p></article></body></html>")


def decode(name: str, data: bytes) -> list[Document | Rejected]:
    return decode_file(f"{ROOT}/{name}", data, ROOT, ReadOptions())


def document(name: str, data: bytes) -> Document:
    (record,) = decode(name, data)
    assert isinstance(record, Document), record
    return record


# --- Decode what is text -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "codec", "head", "encoding"),
    [
        (RUSSIAN, "cp1251", '<meta charset="windows-1251">', "windows-1251"),
        (JAPANESE, "shift_jis", '<meta charset="Shift_JIS">', "shift_jis"),
        (JAPANESE, "shift_jis",
         '<meta http-equiv="Content-Type" content="text/html; charset=shift_jis">', "shift_jis"),
        (RUSSIAN, "cp1251", "", "windows-1251"),  # no declaration: detected
        (JAPANESE, "shift_jis", "", "cp932"),  # detected as the superset Windows writes
    ],
    ids=["1251-meta-charset", "sjis-meta-charset", "sjis-http-equiv", "1251-detected",
         "sjis-detected"],
)
def test_legacy_encoded_page_is_read_as_its_text(text, codec, head, encoding) -> None:
    doc = document("page.html", page(text, head).encode(codec))
    assert doc.text == f"# Guide\n\n{text}"
    assert doc.encoding == encoding


def test_xml_declaration_names_the_encoding() -> None:
    xhtml = '<?xml version="1.0" encoding="windows-1251"?>\n' + page(RUSSIAN)
    doc = document("page.xhtml.html", xhtml.encode("cp1251"))
    assert RUSSIAN in doc.text and doc.encoding == "windows-1251"


@pytest.mark.parametrize("name", ["notes.txt", "guide.md"])
@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_utf16_and_utf32_text_with_a_bom_is_read(name: str, codec: str) -> None:
    text = "# Калибровка\r\n\r\nWarm up for 10 minutes. 校正 ✓\n"
    bom = "\ufeff" if codec != "utf-16" else ""  # Python's "utf-16" writes its own BOM
    doc = document(name, (bom + text).encode(codec))
    assert doc.text == text
    assert doc.encoding == codec[:6]


def test_png_named_txt_is_still_binary() -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00" + bytes(range(256)) * 4
    (record,) = decode("image.txt", png)
    assert record == Rejected(f"{ROOT}/image.txt", "image.txt", BINARY)


# --- Pages nested past libxml2's depth limit ---------------------------------------------------


@pytest.mark.parametrize("depth", [300, 1000, 5000])
def test_deeply_nested_page_keeps_its_text(depth: int) -> None:
    text = "Warm the arm up for ten minutes before the first measurement. " * 6
    html = f"<html><body>{'<div>' * depth}<h2>Warm-up</h2><p>{text}</p>{'</div>' * depth}</body></html>"
    doc = document("deep.html", html.encode())
    assert doc.text == f"## Warm-up\n\n{text.strip()}"


# --- Every input accounted ---------------------------------------------------------------------


def test_parquet_file_without_rows_is_one_rejected_row() -> None:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), sink)
    assert decode("empty.parquet", sink.getvalue()) == [
        Rejected(f"{ROOT}/empty.parquet", "empty.parquet", "empty document (Parquet file has no rows)")
    ]


def duplicate_ids_jsonl() -> bytes:
    lines = [
        {"id": "a", "text": "Zebras are measured last; this is the first record with id a."},
        {"id": "b", "text": "Calibration needs a warm arm and a quiet room."},
        {"id": "a", "text": "Apples sort first, yet this record repeats id a on line three."},
    ]
    return "\n".join(json.dumps(line) for line in lines).encode()


@pytest.mark.slow
def test_first_record_of_a_repeated_id_survives_whatever_the_runner_order() -> None:
    uri = f"{ROOT}/data.jsonl"
    docs = [r for r in decode("data.jsonl", duplicate_ids_jsonl()) if isinstance(r, Document)]
    assert [d.position for d in docs] == [1, 2, 3]
    for order in (docs, docs[::-1]):
        with fnapi_pipeline() as p:
            out = p | beam.Create(order) | ExactDedupe()
            assert_that(out.kept | beam.Map(lambda d: (d.doc_id, d.text[:6])),
                        equal_to([("a", "Zebras"), ("b", "Calibr")]), label="kept")
            assert_that(out.rejected, equal_to([Rejected(
                uri, f"{uri}#L3",
                f"duplicate doc_id 'a': {uri}:3 repeats the id of {uri}:1, which is kept",
            )]), label="rejected")


@pytest.mark.slow
def test_job_documents_table_has_one_row_per_doc_id(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "data.jsonl").write_bytes(duplicate_ids_jsonl())
    (corpus / "page.html").write_bytes(page(RUSSIAN, '<meta charset="windows-1251">').encode("cp1251"))
    (corpus / "notes.txt").write_bytes("Notes in UTF-16: прогрев десять минут.\n".encode("utf-16"))
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}),
                   corpus / "empty.parquet")
    config = load_config(ROOT_CONFIG, [f"input.pattern={corpus}/**",
                                       f"output.path={tmp_path / 'out'}", "embed=null"])
    summary = run(config, ())
    assert summary.reconciled
    rows = [r for f in sorted(Path(summary.run_dir).glob("documents-*.parquet"))
            for r in pq.read_table(f).to_pylist()]
    ids = [r["doc_id"] for r in rows]
    assert len(ids) == len(set(ids)), sorted(ids)
    by_id = {r["doc_id"]: r for r in rows}
    assert by_id["a"]["status"] == "kept" and by_id["a"]["text"].startswith("Zebras")
    assert by_id["data.jsonl#L3"]["status"] == "rejected"
    assert by_id["empty.parquet"]["status"] == "rejected"
    assert (by_id["page.html"]["encoding"], by_id["notes.txt"]["encoding"]) == ("windows-1251", "utf-16")
    assert by_id["a"]["encoding"] == "utf-8"
    rejected = {r["doc_id"]: r["reason"] for f in Path(summary.run_dir).glob("rejected-*.parquet")
                for r in pq.read_table(f).to_pylist()}
    # Relative to the input root, as every other id.
    assert rejected["data.jsonl#L3"] == ("duplicate doc_id 'a': data.jsonl:3 repeats the id of "
                                         "data.jsonl:1, which is kept")
