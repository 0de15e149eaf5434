"""The dedupe, split and write stages, each under TestPipeline with assert_that."""

from __future__ import annotations

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to

from chunkline import split
from chunkline.records import (
    DUPLICATE,
    KEPT,
    ChunkRecord,
    Document,
    chunk_schema,
    doc_hash,
)
from tests.beam_helpers import fnapi_pipeline
from tests.helpers import tokenizer
from chunkline.transforms.dedupe import ExactDedupe
from chunkline.transforms.split import FlattenChunks, SplitDocuments
from chunkline.transforms.write import WriteParquetShards, shard_of


def doc(doc_id: str, text: str, uri: str | None = None) -> Document:
    return Document(doc_id, uri or f"/corpus/{doc_id}", text)


@pytest.mark.slow
def test_exact_dedupe_keeps_smallest_id_and_records_the_rest() -> None:
    docs = [
        doc("b.md", "Same text.\n"),
        doc("a.md", "Same   text.\n\n"),  # differs only in spacing
        doc("c.md", "Other text.\n"),
        doc("d.md", "Same text."),
    ]
    with fnapi_pipeline() as p:
        out = p | beam.Create(docs) | ExactDedupe()
        assert_that(out.kept | beam.Map(lambda d: d.doc_id), equal_to(["a.md", "c.md"]), label="kept")
        assert_that(
            out.statuses | beam.Map(lambda s: (s.doc_id, s.status, s.duplicate_of)),
            equal_to([("a.md", KEPT, None), ("c.md", KEPT, None),
                      ("b.md", DUPLICATE, "a.md"), ("d.md", DUPLICATE, "a.md")]),
            label="statuses",
        )
        assert_that(out.rejected, equal_to([]), label="rejected")


def test_conflicting_ids_are_rejected_not_merged() -> None:
    docs = [doc("t-1", "first record", "/x/a.jsonl"), doc("t-1", "second record", "/x/b.jsonl")]
    with fnapi_pipeline() as p:
        out = p | beam.Create(docs) | ExactDedupe(enabled=False)
        assert_that(out.kept | beam.Map(lambda d: d.uri), equal_to(["/x/a.jsonl"]), label="kept")
        assert_that(
            out.rejected | beam.Map(lambda r: (r.uri, "duplicate doc_id" in r.reason)),
            equal_to([("/x/b.jsonl", True)]), label="rejected",
        )


def test_split_documents_matches_the_library_and_offsets_hold() -> None:
    text = "# Guide\nIntro.\n\n## Setup\n" + "Step one is short. " * 30 + "\n"
    expected = [
        (c.start, c.end, c.headings, c.tokens)
        for c in split(text, 20, 4, tokenizer("words"))
    ]

    def check(records: list[ChunkRecord]) -> None:
        records = sorted(records, key=lambda r: r.chunk_index)
        assert [(r.start, r.end, r.headings, r.tokens) for r in records] == expected
        assert all(r.text == text[r.start : r.end] for r in records)
        assert all(r.chunk_id == f"g.md#{r.start}-{r.end}" for r in records)
        assert records[-1].prefix == "Guide > Setup\n"

    with fnapi_pipeline() as p:
        out = p | beam.Create([doc("g.md", text)]) | SplitDocuments(
            "words", 20, 4, True, heading_reserve=8
        ) | FlattenChunks()
        assert_that(out, check)


@pytest.mark.slow
def test_write_shards_are_complete_sorted_and_deterministic(tmp_path) -> None:
    records = [
        ChunkRecord(f"d{i % 7}", f"d{i % 7}#{i}-{i + 1}", i, i, i + 1, ("H",), f"t{i}", 1)
        for i in range(50)
    ]
    schema = chunk_schema(None)

    def write(directory) -> None:
        with fnapi_pipeline() as p:
            (p | beam.Create(list(reversed(records)))
               | WriteParquetShards(str(directory), "chunks", schema, 3,
                                    shard_key=lambda r: r.doc_id,
                                    sort_key=lambda r: (r.doc_id, r.chunk_index)))

    write(tmp_path / "one")
    write(tmp_path / "two")
    # The shards, beside the listing of the files holding each one's rows (_listing/).
    names = sorted(p.name for p in (tmp_path / "one").glob("chunks-*"))
    assert names == [f"chunks-0000{i}-of-00003.parquet" for i in range(3)]
    total = 0
    for name in names:
        first = pq.read_table(tmp_path / "one" / name)
        assert first.schema.equals(schema)
        assert first.equals(pq.read_table(tmp_path / "two" / name))
        rows = first.to_pylist()
        total += len(rows)
        assert rows == sorted(rows, key=lambda r: (r["doc_id"], r["chunk_index"]))
        assert all(shard_of(r["doc_id"], 3) == int(name[7:12]) for r in rows)
    assert total == 50


def test_doc_hash_ignores_spacing_only() -> None:
    assert doc_hash("a  b\n\n\nc  ") == doc_hash("a b\nc")
    assert doc_hash("a b") != doc_hash("a c")
    assert doc_hash("Cafe\u0301") == doc_hash("Café")
