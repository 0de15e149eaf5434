"""Hostile inputs and damaged outputs found by trying to break a nightly run: each gives a
rejected row or a clear refusal, never a crashed, hung or wrongly published job."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.metadata import canonical_json
from chunkline.readers import decode_text
from chunkline.pipeline.cli import main
from chunkline.pipeline.query import Hit
from chunkline.pipeline.query_command import hit_lines

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "local.yaml")
NO_VECTORS = "embed=null"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


def run_job(corpus: Path, output: Path, *extra: str) -> tuple[int, str, str]:
    return cli("run", "--config", CONFIG, "--input", f"{corpus}/**", "--output", str(output),
               "--set", NO_VECTORS, *extra)


def table(output: Path, name: str) -> list[dict]:
    run_dir = output / (output / "LATEST").read_text().strip()
    return [r for f in sorted(run_dir.glob(f"{name}-*.parquet")) for r in pq.read_table(f).to_pylist()]


@pytest.mark.parametrize("label", ["base64", "rot13", "hex", "zip", "punycode", "undefined",
                                   "unicode_escape", "cp037", "cp500"])
def test_a_label_that_is_no_web_encoding_is_no_declaration(label: str) -> None:
    """Python knows these codecs, WHATWG does not: base64 and friends raised LookupError and
    failed the job; EBCDIC decoded ASCII into mojibake."""
    page = (f'<html><head><meta charset="{label}"></head><body><p>Plain words, nothing '
            f'encoded.</p></body></html>').encode("ascii")
    text, encoding = decode_text(page, html=True)
    assert encoding == "utf-8" and "Plain words, nothing encoded." in text


def test_file_names_that_are_not_utf8_are_rejected_rows(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.md").write_text("# Good\n\nA document about docking stations.\n")
    os.makedirs(os.fsencode(corpus), exist_ok=True)
    with open(os.fsencode(corpus) + b"/bad\xffname.md", "wb") as handle:
        handle.write(b"# Bad name\n\nReadable text.\n")
    with open(os.fsencode(corpus) + b"/latin\xe9.xyz", "wb") as handle:
        handle.write(b"x")
    code, out, err = run_job(corpus, tmp_path / "out")
    assert code == 0, err
    rejected = {r["doc_id"]: r["reason"] for r in table(tmp_path / "out", "rejected")}
    assert rejected == {"bad\\xffname.md": "file name is not valid UTF-8",
                        "latin\\xe9.xyz": "file name is not valid UTF-8"}
    assert [r["doc_id"] for r in table(tmp_path / "out", "documents") if r["status"] == "kept"] == ["good.md"]


def test_a_file_swapped_for_a_fifo_after_the_walk_does_not_hang_the_read(tmp_path) -> None:
    """The walk saw a regular file; by the time it is read it is a FIFO with no writer. A plain
    open() would wait for a writer forever while the run holds the output's lease."""
    fifo = tmp_path / "notes.md"
    os.mkfifo(fifo)
    script = (
        "import sys\n"
        "from apache_beam.io.fileio import ReadableFile\n"
        "from apache_beam.io.filesystem import FileMetadata\n"
        "from chunkline.readers import ReadOptions\n"
        "from chunkline.transforms.read import _DecodeFile\n"
        "found = ReadableFile(FileMetadata(sys.argv[1], 20, 0.0))\n"
        "out = list(_DecodeFile(sys.argv[2], ReadOptions()).process(found))\n"
        "print(out[0].value.reason)\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(fifo), str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "not a regular file" in result.stdout


def test_rejected_records_never_share_an_id_with_another_row(tmp_path) -> None:
    """A record emptied by cleaning was rejected under the id a later record kept; a record
    whose id equals another file's bad-line locator collided with that rejection."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "dump.jsonl").write_text(
        '{"id": "doc-1", "text": "Page 3 of 10"}\n'
        '{"id": "doc-1", "text": "The real content of document one, updated."}\n'
        '{"id": "doc-2", "text": "Another document."}\n')
    (corpus / "e.jsonl").write_text('{"id": "f.jsonl#L1", "text": "kept text here"}\n')
    (corpus / "f.jsonl").write_text("not json\n")
    code, _, err = run_job(corpus, tmp_path / "out")
    assert code == 0, err
    documents = table(tmp_path / "out", "documents")
    ids = [r["doc_id"] for r in documents]
    assert len(ids) == len(set(ids)) == 5
    kept = {r["doc_id"]: r["text"] for r in documents if r["status"] == "kept"}
    assert kept["doc-1"] == "The real content of document one, updated."
    assert "f.jsonl#L1" in kept
    rejected_ids = {r["doc_id"] for r in table(tmp_path / "out", "rejected")}
    assert rejected_ids == {r["doc_id"] for r in documents if r["status"] == "rejected"}


def test_what_a_store_would_refuse_never_reaches_the_index(tmp_path) -> None:
    """Issue 26: metadata a store refuses or chokes on, and numbers a store gives back in
    another form, were accepted: 500-deep metadata (Qdrant's client: RecursionError on every
    sync), 1 MB of metadata copied onto each chunk, U+0000 (PostgreSQL refuses it), 1e20 (jsonb
    gives back 100000000000000000000). A file modified at the epoch lost its file_modified.
    Cleaning is off: U+0000 must not depend on it."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    epoch = corpus / "epoch.md"
    epoch.write_text("# Epoch\n\nA file last modified at the epoch, as touch -d @0 leaves it.\n")
    os.utime(epoch, (0, 0))
    deep = '{"a": ' * 500 + "1" + "}" * 500
    (corpus / "records.jsonl").write_text("\n".join([
        json.dumps({"id": "nul", "text": "# Dock\u0000ing\n\nThe dock char\u0000ges robots overnight.",
                    "metadata": {"te\u0000am": "fl\u0000eet", "n": 1e15, "big": 1e20, "neg": -0.0}}),
        json.dumps({"id": "a\u0000b", "text": "An id no store can hold."}),
        '{"id": "deep", "text": "Deep metadata.", "metadata": ' + deep + "}",
        json.dumps({"id": "huge", "text": "Huge metadata.", "metadata": {"body": "x" * 70_000}}),
    ]) + "\n")
    code, _, err = run_job(corpus, tmp_path / "out", "--set", "clean=null")
    assert code == 0, err
    documents = {r["doc_id"]: r for r in table(tmp_path / "out", "documents")}
    assert json.loads(documents["epoch.md"]["metadata"])["file_modified"] == "1970-01-01T00:00:00Z"
    rejected = {r["doc_id"]: r["reason"] for r in table(tmp_path / "out", "rejected")}
    assert rejected["records.jsonl#L2"] == "line 2: 'id' contains U+0000 (NUL), which no id may hold"
    assert rejected["records.jsonl#L3"].startswith("line 3: metadata is nested 500 levels deep, over the limit of 32")
    assert rejected["records.jsonl#L4"].startswith("line 4: metadata is 70")
    assert "over the limit of 65536 (the largest value: 'body', 70002 bytes) (id 'huge')" in rejected["records.jsonl#L4"]
    chunks = [c for c in table(tmp_path / "out", "chunks") if c["doc_id"] == "nul"]
    assert chunks and documents["nul"]["text"] == "# Docking\n\nThe dock charges robots overnight."
    for chunk in chunks:
        assert not any("\x00" in text for text in (chunk["text"], chunk["search_text"], *chunk["headings"],
                                                   chunk["metadata"]))
        assert chunk["headings"] == ["Docking"]
        fields = json.loads(chunk["metadata"])
        assert fields["te\ufffdam"] == "fl\ufffdeet"
        assert (fields["n"], fields["big"], fields["neg"]) == (10**15, 1e20, 0)
        assert canonical_json(chunk["metadata"]) == json.dumps(
            fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)  # written canonical


@pytest.fixture()
def published(tmp_path):
    corpus, output = tmp_path / "corpus", tmp_path / "out"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"doc{i}.md").write_text(f"# Doc {i}\n\nText of document {i} about chargers.\n")
    code, _, err = run_job(corpus, output)
    assert code == 0, err
    return corpus, output


def test_guard_holds_when_the_published_manifest_is_unreadable(published, tmp_path) -> None:
    corpus, output = published
    good = (output / "LATEST").read_text().strip()
    manifest = output / good / "manifest.json"
    manifest.write_text(manifest.read_text()[:50])  # truncated
    one = tmp_path / "one"
    one.mkdir()
    (one / "doc0.md").write_text((corpus / "doc0.md").read_text())
    code, out, _ = run_job(one, output)
    assert code == 1 and "cannot compare with the published run" in out and "--allow-shrink" in out
    assert (output / "LATEST").read_text().strip() == good
    code, _, err = run_job(one, output, "--allow-shrink")
    assert code == 0, err
    assert (output / "LATEST").read_text().strip() != good


def test_latest_or_lease_that_is_a_directory_is_a_clear_refusal(published) -> None:
    corpus, output = published
    good = (output / "LATEST").read_text()
    (output / "LATEST").unlink()
    (output / "LATEST").mkdir()
    code, out, err = run_job(corpus, output)
    assert code == 1 and "cannot compare with the published run" in out and "LATEST" in out
    assert "Traceback" not in err
    code, _, err = cli("query", str(output), "chargers")
    assert code == 2 and "LATEST" in err
    (output / "LATEST").rmdir()
    (output / "LATEST").write_text(good)
    (output / ".lease").mkdir()
    code, _, err = run_job(corpus, output)
    assert code == 75 and "not a readable lease file" in err


def test_lease_with_wrong_field_types_is_judged_by_its_age(published) -> None:
    corpus, output = published
    lease = output / ".lease"
    lease.write_text(json.dumps({"run_id": "x", "host": "elsewhere", "pid": 10**20,
                                 "started": "yesterday"}))
    code, _, err = run_job(corpus, output)
    assert code == 75 and "unknown run" in err and "Traceback" not in err
    os.utime(lease, (0, 0))  # silent for decades: stale
    code, _, err = run_job(corpus, output)
    assert code == 0, err


def test_output_that_contains_the_input_is_refused(tmp_path) -> None:
    corpus = tmp_path / "data" / "corpus"
    corpus.mkdir(parents=True)
    (corpus / "a.md").write_text("# A\n\ntext\n")
    code, _, err = run_job(corpus, tmp_path / "data")
    assert code == 2 and "lies inside output.path" in err
    assert not (tmp_path / "data" / "LATEST").exists()


# What a terminal acts on: C0, DEL, C1, the line and paragraph separators, the bidi overrides.
UNSHOWN = frozenset([*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u2028", "\u2029",
                     *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30), st.lists(st.text(max_size=20), max_size=3), st.text(max_size=300),
       st.one_of(st.none(), st.text(max_size=40)))
def test_a_printed_hit_never_holds_what_a_terminal_acts_on(doc_id, headings, text, expanded) -> None:
    hit = Hit(score=1.0, doc_id=doc_id, chunk_id=f"{doc_id}#0-1", headings=tuple(headings),
              start=0, end=1, text=text, expanded_start=0, expanded_end=1, expanded_text=expanded)
    lines = hit_lines(1, hit)
    assert len(lines) == (2 if expanded is None else 3)
    assert not any(char in UNSHOWN for line in lines for char in line)


def test_query_prints_no_control_character_from_the_index(tmp_path) -> None:
    """Issue 48: an archive member named with an ESC sequence was indexed and its id printed raw
    by ``chunkline query`` (a forged or erased result line); a record's id and a heading may
    still hold one, and are printed escaped. ``--json`` keeps the values, escaped."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    forged = "\x1b[2K\r1. 9.999  secrets.md [0:10]\u202e"
    (corpus / "records.jsonl").write_text(json.dumps(
        {"id": forged, "text": "The dock charges the robot overnight."}) + "\n")
    (corpus / "esc.md").write_text("# \x1b[31mDock\x9b0m\n\nThe dock charges robots at night.\n")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("evil\x1b[2K.md", "# Evil\n\nThe dock is unsafe.\n")
    (corpus / "share.zip").write_bytes(buffer.getvalue())
    # Cleaning off: it would drop the heading's controls, and a query must not rely on it.
    code, _, err = run_job(corpus, tmp_path / "out", "--set", "clean=null")
    assert code == 0, err
    assert {r["doc_id"] for r in table(tmp_path / "out", "rejected")} == {"share.zip//evil\\x1b[2K.md"}
    code, out, err = cli("query", str(tmp_path / "out"), "dock charges", "--mode", "sparse")
    assert code == 0, err
    assert not any(char in UNSHOWN for line in out.splitlines() for char in line)
    assert "\\x1b[2K\\x0d1. 9.999  secrets.md [0:10]\\u202e [0:" in out
    assert "\\x1b[31mDock\\x9b0m" in out
    code, out, err = cli("query", str(tmp_path / "out"), "dock charges", "--mode", "sparse", "--json")
    assert code == 0, err
    assert not any(char in UNSHOWN - {"\n"} for char in out)
    hits = json.loads(out)["hits"]
    assert {hit["doc_id"] for hit in hits} == {forged, "esc.md"}
    assert next(hit for hit in hits if hit["doc_id"] == "esc.md")["headings"] == ["\x1b[31mDock\x9b0m"]
