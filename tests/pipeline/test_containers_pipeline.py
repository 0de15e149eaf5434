"""Compressed files and archives through the whole job: a zip of a share and a gzipped dump
are indexed member by member, the bad members are rejected rows, counts reconcile, every chunk
is its document's text at its offsets, a gzipped JSONL gives the plain file's ids and offsets
(its rejected lines the plain file's locators), and a rerun carries the members like files."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import warnings
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.helpers import run_table

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

TICKETS = "".join(json.dumps({"id": f"T-{i}", "text": f"Ticket {i}: the dock at bay {i} stops "
                              f"charging after a firmware update; rolling back restores it.",
                              "metadata": {"team": "fleet"}}) + "\n" for i in range(12))


# Another export of the same system: other ids and texts (an exact copy would be a duplicate).
# Its last lines are rejected: a broken line, a record without text, a repeated id.
DUMP = TICKETS.replace("T-", "D-").replace("Ticket", "Export row") + "{broken\n" + \
    json.dumps({"id": "D-x"}) + "\n" + json.dumps({"id": "D-3", "text": "A later export of row 3."}) + "\n"


def job(corpus: Path, output: Path, *overrides: str):
    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null",
        "dedupe.near=null", "input.containers.max_members=50", *overrides]))


def table(run_dir: str, name: str) -> pa.Table:
    return run_table(run_dir, name)


def write_share(path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manuals/arm.md", "# Arm\n\n## Mounting\n\nMount the arm on a level plate.\n\n"
                         "## Calibration\n\nWarm the arm up for ten minutes before calibrating.\n")
        archive.writestr("manuals/dock.html", "<html><head><title>Dock</title></head><body><main>"
                         "<h1>Dock</h1><p>Place the dock against a wall, away from heaters and "
                         "direct sunlight, with a clear metre in front of it.</p></main></body></html>")
        archive.writestr("tickets.jsonl.gz", gzip.compress(TICKETS.encode()))
        archive.writestr("tool.exe", b"MZ\x90\x00 not text")
        archive.writestr("../outside.md", "# Outside\n\nnever read\n")
        archive.writestr("many.zip", _many_members(60))
        # Issue 48's hostile members: each a rejected row, none a document.
        link = zipfile.ZipInfo("link.md")
        link.create_system, link.external_attr = 3, 0o120777 << 16
        archive.writestr(link, "/etc/passwd")
        archive.writestr("new\nline.md", "# Spoof\n\n1. 9.999  share.zip//manuals/arm.md\n")
        archive.writestr("empty.zip", _many_members(0))
        archive.writestr("inner.zip//nested.md", "# Fake\n\nnot a nested member\n")
        archive.writestr("..\\..\\win.md", "# Win\n\nnever read\n")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile warns of the repeated name: wanted here
            archive.writestr("notes.md", "# Notes\n\nThe first copy, overwritten on extraction.\n")
            archive.writestr("notes.md", "# Notes\n\nThe last copy, what unzip leaves.\n")
    path.write_bytes(buffer.getvalue())


def _many_members(count: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for i in range(count):
            archive.writestr(f"n{i}.txt", f"note {i}")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    base = tmp_path_factory.mktemp("containers")
    packed, plain = base / "packed", base / "plain"
    packed.mkdir()
    plain.mkdir()
    write_share(packed / "share.zip")
    (packed / "dump.jsonl.gz").write_bytes(gzip.compress(DUMP.encode()))
    body = " ".join(f"word{i * 7919 % 10007}" for i in range(3000)).encode()
    whole = gzip.compress(b"# Cut\n\n" + body)
    (packed / "cut.md.gz").write_bytes(whole[: len(whole) // 2])
    (plain / "dump.jsonl").write_text(DUMP)
    first = job(packed, base / "index")
    return base, packed, plain, first


def test_members_are_indexed_and_bad_ones_rejected(indexed) -> None:
    _, _, _, first = indexed
    assert first.published and first.reconciled
    documents = table(first.run_dir, "documents")
    kept = set(pa.compute.filter(documents.column("doc_id"),
                                 pa.compute.equal(documents.column("status"), "kept")).to_pylist())
    assert {"share.zip//manuals/arm.md", "share.zip//manuals/dock.html", "T-0", "D-11"} <= kept
    reasons = dict(zip(*table(first.run_dir, "rejected").select(["doc_id", "reason"]).to_pydict().values()))
    assert reasons["share.zip//tool.exe"] == "unsupported file type .exe"
    assert "climbs out" in reasons["share.zip//../outside.md"]
    assert "max_members (50)" in reasons["share.zip//many.zip"]
    assert reasons["cut.md.gz"] == "truncated gzip data"
    assert first.counts["documents"] == first.counts["kept"] + first.counts["duplicate"] + first.counts["rejected"]


def test_every_chunk_is_its_document_text_at_its_offsets(indexed) -> None:
    _, _, _, first = indexed
    texts = dict(zip(*table(first.run_dir, "documents").select(["doc_id", "text"]).to_pydict().values()))
    chunks = table(first.run_dir, "chunks").select(["doc_id", "start", "end", "text"]).to_pylist()
    assert chunks and all(texts[c["doc_id"]][c["start"]:c["end"]] == c["text"] for c in chunks)


def test_a_gzipped_dump_gives_the_plain_files_ids_and_offsets(indexed, reference) -> None:
    _, _, _, first = indexed
    columns = ["doc_id", "chunk_id", "start", "end", "text"]

    def rows(run_dir: str) -> list[dict]:
        return sorted((r for r in table(run_dir, "chunks").select(columns).to_pylist()
                       if r["doc_id"].startswith("D-")), key=lambda r: r["chunk_id"])

    assert rows(first.run_dir) == rows(reference.run_dir) and len(rows(reference.run_dir)) == 12


def rows_of(run_dir: str, name: str) -> dict[str, dict]:
    return {row["doc_id"]: row for row in table(run_dir, name).to_pylist()}


def test_hostile_members_are_rejected_rows_with_their_reasons(indexed) -> None:
    _, _, _, first = indexed
    reasons = {doc_id: row["reason"] for doc_id, row in rows_of(first.run_dir, "rejected").items()}
    assert reasons["share.zip//link.md"] == "symbolic link in archive: not followed"
    assert reasons["share.zip//new\\x0aline.md"] == "file name contains a control character (U+000A)"
    assert reasons["share.zip//empty.zip"] == "archive holds no members"
    assert "which in an id marks a member of a nested archive" in reasons["share.zip//inner.zip//nested.md"]
    assert "climbs out" in reasons["share.zip//..\\..\\win.md"]
    # The earlier copy of a repeated name: its id is the kept copy's, so it is renamed, and its
    # reason names both entries, never "repeats the id of" itself.
    assert reasons["share.zip//notes.md#rejected-1"].startswith(
        "repeated member name: entry 12 of the archive, replaced by entry 13 of the same name")
    documents = rows_of(first.run_dir, "documents")
    assert documents["share.zip//notes.md"]["text"] == "# Notes\n\nThe last copy, what unzip leaves.\n"
    assert not any(ord(c) < 0x20 for doc_id in documents for c in doc_id)


@pytest.fixture(scope="module")
def reference(indexed):
    base, _, plain, _ = indexed
    return job(plain, base / "plain-index")


def test_a_gzipped_dumps_rejected_lines_keep_the_plain_files_places(indexed, reference) -> None:
    """dump.jsonl.gz's bad lines were rejected as dump.jsonl.gz, #rejected-1, ...; its repeated
    id "dump.jsonl.gz repeats the id of dump.jsonl.gz"."""
    _, _, _, first = indexed
    packed = {doc_id: row["reason"] for doc_id, row in rows_of(first.run_dir, "rejected").items()
              if doc_id.startswith("dump.jsonl.gz")}
    plain = {doc_id.replace("dump.jsonl", "dump.jsonl.gz"): row["reason"].replace("dump.jsonl", "dump.jsonl.gz")
             for doc_id, row in rows_of(reference.run_dir, "rejected").items()}
    assert packed == plain
    assert packed["dump.jsonl.gz#L15"] == ("duplicate doc_id 'D-3': dump.jsonl.gz:15 repeats the id of "
                                           "dump.jsonl.gz:4, which is kept")
    assert set(packed) == {"dump.jsonl.gz#L13", "dump.jsonl.gz#L14", "dump.jsonl.gz#L15"}


def test_a_rerun_carries_members_like_files(indexed, tmp_path) -> None:
    base, packed, _, first = indexed
    output = tmp_path / "index"
    shutil.copytree(base / "index", output)
    again = job(packed, output)
    assert again.counts["documents_carried"] == again.counts["kept"] == first.counts["kept"]
    assert table(again.run_dir, "chunks").equals(table(first.run_dir, "chunks"))
