"""ReadPlaces: a rerun reads again only the documents it asks for, each exactly as the read of
the whole input made it (transforms/read.py)."""

from __future__ import annotations

import codecs
import functools
import gzip
import io
import json
import random
import zipfile
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from chunkline.readers import JsonlOptions, ReadOptions
from chunkline.records import Document
from chunkline.state import unpack
from chunkline.transforms.read import Place, ReadDocuments, ReadPlaces, file_of

pytestmark = pytest.mark.slow
OPTIONS = ReadOptions(jsonl=JsonlOptions(slice_bytes=400))  # the dump is read in pieces


def write_corpus(root: Path) -> None:
    lines = [json.dumps({"id": f"t{n}", "text": f"Ticket {n}: the pump on line {n} stalls again."})
             for n in range(30)]
    lines[7] = ""  # a blank line and a broken one move no other record's place
    lines[12] = '{"id": "broken", '
    (root / "tickets.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    wide = "\n".join(json.dumps({"id": f"w{n}", "text": f"Wide record {n}."}) for n in range(3))
    (root / "wide.jsonl").write_bytes(codecs.BOM_UTF16_LE + wide.encode("utf-16-le"))
    (root / "packed.jsonl.gz").write_bytes(gzip.compress(b'{"id": "g1", "text": "Packed one."}\n'
                                                         b'{"id": "g2", "text": "Packed two."}\n'))
    pq.write_table(pa.table({"id": ["p1", "p2", "p3"], "text": ["Row one.", "Row two.", "Row three."]}),
                   root / "table.parquet", row_group_size=2)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("docs/arm.md", "# Arm\n\nMount the arm level.\n")
        archive.writestr("docs/dock.md", "# Dock\n\nClean the contacts.\n")
    (root / "share.zip").write_bytes(buffer.getvalue())
    (root / "guide.md").write_text("# Guide\n\nHello.\n", encoding="utf-8")


def fields(doc: Document) -> tuple:
    return (doc.doc_id, doc.uri, doc.position, doc.text, doc.metadata, doc.encoding, doc.format,
            doc.file_size, doc.file_modified, doc.page_starts, doc.outline, doc.input_digest,
            doc.counted)


_FOUND: dict[int, list[tuple]] = {}


def _keep(token: int, docs: list[tuple]) -> None:
    _FOUND[token] = list(docs)


def collected(build) -> list[tuple]:
    """What ``build`` makes, gathered by a matcher that runs in this process (a module-level
    function: pickled by reference, so it fills this module's dict)."""
    token = len(_FOUND) + 1
    p = TestPipeline(runner=FnApiRunner())
    assert_that(build(p) | beam.Map(fields), functools.partial(_keep, token))
    p.run().wait_until_finish()
    return sorted(_FOUND.pop(token), key=lambda row: (row[1], row[2]))


def test_places_read_again_equal_what_the_whole_read_made(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(corpus)
    pattern = f"{corpus}/**"
    everything = collected(lambda p: (p | ReadDocuments(pattern, OPTIONS)).documents)
    assert len(everything) == 28 + 3 + 2 + 3 + 2 + 1
    # Records of the plain dump carry their line's bytes; no other document does.
    placed = {row[0] for row in everything if unpack(row[-1]).offset is not None}
    assert placed == {f"t{n}" for n in range(30) if n not in (7, 12)}
    rng = random.Random(4)
    wanted = rng.sample(everything, 12) + [row for row in everything if row[0] in ("w1", "g2", "p3")]
    wanted = sorted(set(wanted), key=lambda row: (row[1], row[2]))
    places = [Place(row[1], row[2], unpack(row[-1]).offset, unpack(row[-1]).length) for row in wanted]
    gone = Place(str(corpus / "deleted.md"), 0)
    again = collected(lambda p: p | beam.Create(places + [gone]) | ReadPlaces(pattern, OPTIONS))
    assert again == wanted


def test_the_file_of_a_member_is_its_container() -> None:
    assert file_of("/c/share.zip//docs/arm.md") == "/c/share.zip"
    assert file_of("gs://bucket/box.mbox//1.eml//notes.md") == "gs://bucket/box.mbox"
    assert file_of("gs://bucket/a.md") == "gs://bucket/a.md" and file_of("/c/a.md") == "/c/a.md"
