"""Records parked in part files (transforms/spill.py): written where made, read back whole and in
order, addressed by (part, index), deleted once read; and the stages that park records."""

from __future__ import annotations

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.records import ChunkRecord, Document, chunk_schema
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms import spill
from chunkline.transforms.dedupe import Dedupe
from chunkline.transforms.spill import PartWriter, ReadSpilled, RemoveParts, SpillRecords, coder_of, read_part
from chunkline.transforms.write import WriteParquetShards

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=40, deadline=None)
@given(st.lists(texts, max_size=40), st.integers(min_value=1, max_value=200))
def test_every_record_is_where_add_said(tmp_path_factory, records, part_bytes) -> None:
    directory = str(tmp_path_factory.mktemp("parts"))
    coder = coder_of(str)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spill, "PART_BYTES", part_bytes)
        writer = PartWriter(directory, coder)
        places = [writer.add(record) for record in records]
        writer.flush()
    written = writer.drain()
    assert len(written) == len(set(written)) == len({path for path, _ in places})
    by_part = {path: [coder.decode(data) for data in read_part(path)] for path in written}
    assert [by_part[path][index] for path, index in places] == records
    assert all(by_part[path] for path in written)  # no empty part is written


def test_a_parts_last_record_is_the_callers_alone(tmp_path) -> None:
    # The records of a part are handed out by an iterator that lets the part's bytes go once
    # the last is read: a 5 MB document is split downstream while the part read stays open.
    writer = PartWriter(str(tmp_path), coder_of(bytes))
    for record in (b"first", b"x" * 100_000):
        writer.add(record)
    writer.flush()
    (path,) = writer.drain()
    records = read_part(path)
    assert next(records) == b"first" and records._stream is not None
    assert next(records) == b"x" * 100_000 and records._stream is None
    assert list(records) == []


def test_spilled_documents_come_back_and_the_parts_go(tmp_path) -> None:
    docs = [Document(f"d{i}", f"/c/d{i}.md", f"text {i} " * i, position=i,
                     metadata=(("k", str(i)),)) for i in range(30)]
    parked = str(tmp_path / "run" / "_spill" / "docs")
    with fnapi_pipeline() as p:
        back = p | beam.Create(docs) | SpillRecords(parked, Document) | ReadSpilled(Document)
        assert_that(back, equal_to(docs))
        (back | beam.combiners.Count.Globally() | beam.ParDo(RemoveParts(parked)))
    # The stage's folder and the emptied _spill folder are gone; the run folder stays.
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []


def test_shard_writer_finishes_each_record_with_the_side_input(tmp_path) -> None:
    records = [ChunkRecord(f"d{i % 5}", f"d{i % 5}#{i}", i, i, i + 1, (), f"t{i}", i) for i in range(40)]

    def times(record: ChunkRecord, factor: int) -> ChunkRecord:
        return ChunkRecord(record.doc_id, record.chunk_id, record.chunk_index, record.start,
                           record.end, record.headings, record.text, record.tokens * factor)

    with fnapi_pipeline() as p:
        factor = p | "Factor" >> beam.Create([3])
        (p | beam.Create(records)
           | WriteParquetShards(str(tmp_path), "chunks", chunk_schema(None), 2,
                                shard_key=lambda r: r.doc_id,
                                sort_key=lambda r: (r.doc_id, r.chunk_index),
                                record_type=ChunkRecord, finish=times, finish_input=factor))
    # Each shard, and the listing of the files holding its rows (for the run's manifest).
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "_listing", "chunks-00000-of-00002.parquet", "chunks-00001-of-00002.parquet"]
    rows = [r for path in sorted(tmp_path.glob("chunks-*.parquet")) for r in pq.read_table(path).to_pylist()]
    assert sorted(r["tokens"] for r in rows) == [3 * i for i in range(40)]


def test_shard_writer_spreads_many_parts_over_row_groups(tmp_path, monkeypatch) -> None:
    # Small parts and row groups: a shard is read back from many parts and written in groups,
    # and the file is still one sorted shard.
    from chunkline.transforms import write

    monkeypatch.setattr(spill, "PART_BYTES", 200)
    monkeypatch.setattr(write, "ROW_GROUP", 7)
    records = [ChunkRecord(f"d{i % 3}", f"d{i % 3}#{i}", i, i, i + 1, (), f"text {i}", 1)
               for i in range(100)]
    with fnapi_pipeline() as p:
        (p | beam.Create(list(reversed(records)))
           | WriteParquetShards(str(tmp_path), "chunks", chunk_schema(None), 1,
                                shard_key=lambda r: r.doc_id,
                                sort_key=lambda r: (r.doc_id, r.chunk_index),
                                record_type=ChunkRecord))
    shard = pq.ParquetFile(tmp_path / "chunks-00000-of-00001.parquet")
    assert shard.metadata.num_row_groups == 15
    rows = shard.read().to_pylist()
    assert [(r["doc_id"], r["chunk_index"]) for r in rows] == sorted(
        (r.doc_id, r.chunk_index) for r in records)


@pytest.mark.slow
def test_dedupe_releases_every_parked_document_and_removes_its_parts(tmp_path) -> None:
    docs = [Document(f"d{i:02d}", f"/c/d{i}.md", f"document {i % 4} text") for i in range(12)]
    parked = tmp_path / "_spill" / "dedupe"
    with fnapi_pipeline() as p:
        out = p | beam.Create(docs) | Dedupe(exact=True, spill_dir=str(parked))
        assert_that(out.kept | beam.Map(lambda d: (d.doc_id, d.text)),
                    equal_to([(f"d{i:02d}", f"document {i} text") for i in range(4)]), label="kept")
        assert_that(out.statuses | beam.Map(lambda s: s.doc_id),
                    equal_to([d.doc_id for d in docs]), label="statuses")
    assert not parked.exists() and not (tmp_path / "_spill").exists()


def _graph(runner: str, *flags: str) -> beam.Pipeline:
    """A pipeline only built, never run (no job server is asked for)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    return beam.Pipeline(runner=runner, options=PipelineOptions(list(flags)))


@pytest.mark.slow
@pytest.mark.parametrize("transform", ["dedupe", "boilerplate"])
def test_parking_stages_refuse_a_local_default_for_workers_on_other_machines(transform) -> None:
    from chunkline.transforms.clean import RemoveBoilerplate

    def build(p: beam.Pipeline) -> None:
        docs = p | beam.Create([Document("d", "/c/d.md", "text")])
        _ = docs | (Dedupe(exact=True) if transform == "dedupe" else RemoveBoilerplate())

    with pytest.raises(spill.SpillDirRequired, match="--temp_location on shared storage"):
        build(_graph("PortableRunner", "--environment_type=DOCKER"))
    build(_graph("PortableRunner", "--environment_type=LOOPBACK"))  # workers in this process
    build(_graph("PortableRunner", "--environment_type=DOCKER", "--temp_location=gs://b/tmp"))
    build(_graph("DirectRunner"))


def test_the_default_spill_dir_is_under_temp_location_else_local_for_in_process_runners() -> None:
    shared = spill.default_spill_dir(_graph("PortableRunner", "--environment_type=DOCKER",
                                            "--temp_location=gs://bucket/tmp"), "dedupe")
    assert shared.startswith("gs://bucket/tmp/chunkline-spill/") and shared.endswith("/dedupe")
    assert spill.workers_share_local_disk(_graph("DirectRunner"))
    assert not spill.workers_share_local_disk(_graph("PortableRunner", "--environment_type=DOCKER"))
    assert not spill.workers_share_local_disk(_graph("PortableRunner"))  # Beam's default: DOCKER


def test_shard_writer_bounded_by_its_bundle_budget_loses_nothing(tmp_path, monkeypatch) -> None:
    # Parts written whenever the bundle's buffers together reach a tiny budget: every record
    # still lands once, in its shard, sorted; no part is left behind.
    from chunkline.transforms import write

    monkeypatch.setattr(write, "BUFFERED_BYTES", 300)
    records = [ChunkRecord(f"d{i % 11}", f"d{i % 11}#{i}", i, i, i + 1, (), f"text {i}", 1)
               for i in range(200)]
    with fnapi_pipeline() as p:
        (p | beam.Create(records)
           | WriteParquetShards(str(tmp_path), "chunks", chunk_schema(None), 5,
                                shard_key=lambda r: r.doc_id,
                                sort_key=lambda r: (r.doc_id, r.chunk_index),
                                record_type=ChunkRecord))
    files = sorted(tmp_path.glob("chunks-*"))  # beside them, the shards' listings (_listing/)
    assert [f.name for f in files] == [f"chunks-0000{i}-of-00005.parquet" for i in range(5)]
    for path in files:
        rows = [(r["doc_id"], r["chunk_index"]) for r in pq.read_table(path).to_pylist()]
        assert rows == sorted(rows)
        assert all(write.shard_of(doc_id, 5) == int(path.name[7:12]) for doc_id, _ in rows)
    assert sorted(r for path in files for r in pq.read_table(path).column("chunk_index").to_pylist()) \
        == list(range(200))


def test_the_driver_removes_what_failed_and_killed_runs_parked(tmp_path) -> None:
    from chunkline.transforms.spill import remove_dead_spills, remove_spill

    def park(run: str, stage: str) -> None:
        writer = PartWriter(spill.spill_dir(str(tmp_path / run), stage), coder_of(str))
        writer.add("a parked record")
        writer.flush()

    for run, stage in [("failed", "dedupe"), ("failed", "chunks"), ("killed", "boilerplate")]:
        park(run, stage)
    (tmp_path / "killed" / "chunks-00000-of-00001.parquet").write_bytes(b"kept as it was")
    assert remove_spill(str(tmp_path / "failed")) == 2
    assert not (tmp_path / "failed" / "_spill").exists() and (tmp_path / "killed" / "_spill").exists()
    assert remove_dead_spills(str(tmp_path)) == 1
    assert sorted(p.name for p in (tmp_path / "killed").iterdir()) == ["chunks-00000-of-00001.parquet"]


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), texts), max_size=60),
       st.integers(min_value=1, max_value=300), st.integers(min_value=1, max_value=100))
def test_sorted_parts_merge_as_a_stable_sort(tmp_path_factory, records, part_bytes, block_bytes) -> None:
    # The write stage's external merge sort: parts written as sorted runs, read a block at a
    # time and merged, give what one stable sort of every record gives.
    from chunkline.transforms.write import _MergedParts, _SortedParts

    directory = str(tmp_path_factory.mktemp("runs"))
    coder = coder_of(tuple[int, str])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spill, "PART_BYTES", part_bytes)
        patch.setattr(spill, "BLOCK_BYTES", block_bytes)
        writer = _SortedParts(directory, coder, lambda record: record[0], "00000-")
        for record in records:
            writer.add(record)
        writer.flush()
    parts = writer.drain()
    assert all(list(spill.read_blocks(part)) for part in parts)  # no empty part
    merged = _MergedParts(parts, coder, lambda record: record[0])
    assert [coder.decode(data) for data in merged] == sorted(records, key=lambda r: r[0])
    assert [coder.decode(data) for data in merged] == sorted(records, key=lambda r: r[0])  # again
