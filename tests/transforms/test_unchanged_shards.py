"""A shard whose rows the previous run already wrote is linked, not written again
(``WriteParquetShards(previous=...)``): only when the records, the schema and what made them are
the same, and only when the previous file reads whole."""

from __future__ import annotations

import os
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest

from chunkline.records import DocumentStatus, document_schema
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.coders import statuses_table
from chunkline.transforms.write import ROWS_DIGEST_KEY, WriteParquetShards

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

SHARDS = 3


def statuses(edited: int | None = None) -> list[DocumentStatus]:
    return [DocumentStatus(f"d{i:03d}", f"/c/d{i:03d}.md",
                           f"text {i} " * (i + 1) + ("edited" if i == edited else ""),
                           f"h{i}", "kept", metadata='{"source_uri": "/c"}', input_digest=f"i{i}")
            for i in range(40)]


def write(directory: Path, records: list[DocumentStatus], previous_run: Path | None,
          made_under: str = "signature-1") -> None:
    previous = None
    if previous_run is not None:
        previous = (made_under, sorted(str(path) for path in previous_run.glob("documents-*")))
    with fnapi_pipeline() as p:
        (p | beam.Create(list(reversed(records)))
           | WriteParquetShards(str(directory), "documents", document_schema(), SHARDS,
                                record_type=DocumentStatus, shard_key=lambda r: r.doc_id,
                                sort_key=lambda r: (r.doc_id, r.uri, r.status), previous=previous,
                                to_table=statuses_table))


def shard(directory: Path, index: int) -> Path:
    return directory / f"documents-{index:05d}-of-{SHARDS:05d}.parquet"


def inode(path: Path) -> int:
    return os.stat(path).st_ino


@pytest.fixture()
def first(tmp_path) -> Path:
    run = tmp_path / "first"
    write(run, statuses(), previous_run=tmp_path / "none")  # no previous shard: all written
    return run


def test_unchanged_shards_are_linked_and_equal_a_fresh_write(first, tmp_path) -> None:
    write(tmp_path / "second", statuses(), previous_run=first)
    write(tmp_path / "fresh", statuses(), previous_run=None)
    for index in range(SHARDS):
        assert inode(shard(tmp_path / "second", index)) == inode(shard(first, index))
        assert pq.read_table(shard(tmp_path / "second", index)).equals(
            pq.read_table(shard(tmp_path / "fresh", index)))
        assert ROWS_DIGEST_KEY in pq.read_metadata(shard(first, index)).metadata


def test_a_shard_with_a_changed_record_is_written_the_others_linked(first, tmp_path) -> None:
    from chunkline.transforms.write import shard_of

    edited = 7
    write(tmp_path / "second", statuses(edited=edited), previous_run=first)
    write(tmp_path / "fresh", statuses(edited=edited), previous_run=None)
    touched = shard_of(f"d{edited:03d}", SHARDS)
    for index in range(SHARDS):
        linked = inode(shard(tmp_path / "second", index)) == inode(shard(first, index))
        assert linked == (index != touched)
        assert pq.read_table(shard(tmp_path / "second", index)).equals(
            pq.read_table(shard(tmp_path / "fresh", index)))


def test_other_processing_writes_every_shard(first, tmp_path) -> None:
    write(tmp_path / "second", statuses(), previous_run=first, made_under="signature-2")
    for index in range(SHARDS):
        assert inode(shard(tmp_path / "second", index)) != inode(shard(first, index))


@pytest.mark.parametrize("damage", ["flip a byte of a page", "flip the last data byte", "truncate",
                                    "drop the footer key"])
def test_a_damaged_previous_shard_is_written_again_not_linked(first, tmp_path, damage) -> None:
    path = shard(first, 0)
    data = bytearray(path.read_bytes())
    if damage == "flip a byte of a page":
        data[len(data) // 3] ^= 0xFF  # inside the text column's pages, not the footer
    elif damage == "flip the last data byte":
        # The byte just before the footer: covered by the data digest, past every page checksum.
        footer = int.from_bytes(data[-8:-4], "little")
        data[len(data) - 8 - footer - 1] ^= 0x01
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        table = pq.read_table(path)
        pq.write_table(table.replace_schema_metadata({}), path, compression="zstd")
        data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data))
    write(tmp_path / "second", statuses(), previous_run=first)
    write(tmp_path / "fresh", statuses(), previous_run=None)
    assert inode(shard(tmp_path / "second", 0)) != inode(path)
    assert pq.read_table(shard(tmp_path / "second", 0)).equals(
        pq.read_table(shard(tmp_path / "fresh", 0)))
    for index in range(1, SHARDS):
        assert inode(shard(tmp_path / "second", index)) == inode(shard(first, index))


def test_a_retried_bundle_never_writes_into_the_previous_runs_file(first, tmp_path) -> None:
    # A first attempt linked the shards, then failed: the retry finds the links in place.
    second = tmp_path / "second"
    second.mkdir()
    before = {index: shard(first, index).read_bytes() for index in range(SHARDS)}
    for index in range(SHARDS):
        os.link(shard(first, index), shard(second, index))
    write(second, statuses(edited=7), previous_run=first)  # some shards written, the rest linked
    write(tmp_path / "fresh", statuses(edited=7), previous_run=None)
    for index in range(SHARDS):
        assert shard(first, index).read_bytes() == before[index]  # the previous run's, untouched
        assert pq.read_table(shard(second, index)).equals(pq.read_table(shard(tmp_path / "fresh", index)))
