"""Write: records -> deterministic Parquet shards through Beam's filesystems (local or gs://).

Beam's WriteToParquet spreads elements over shards as bundles arrive, so two runs of the same
input give different files. Here a record's shard is a stable hash of its key (a document's
chunks stay together), and each shard is sorted before it is written: the same input and config
give the same files, on any runner.
"""


import hashlib
from typing import Any, Callable, Iterable, Optional

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from chunkline.records import as_row
from transforms import coders  # noqa: F401 - registers the record coders the shard shuffle uses


def shard_of(key: str, shards: int) -> int:
    """Stable across processes and runs (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big") % shards


def shard_path(directory: str, table: str, index: int, shards: int) -> str:
    return FileSystems.join(directory, f"{table}-{index:05d}-of-{shards:05d}.parquet")


class _WriteShard(beam.DoFn):
    def __init__(self, directory: str, table: str, shards: int, schema: pa.Schema,
                 sort_key: Callable[[Any], Any], to_row: Callable[[Any, pa.Schema], dict]) -> None:
        self.to_row = to_row
        self.directory = directory
        self.table = table
        self.shards = shards
        self.schema = schema
        self.sort_key = sort_key

    def process(self, keyed: tuple[int, Iterable[Any]]):
        index, records = keyed
        rows = [self.to_row(r, self.schema) for r in sorted((r for r in records if r is not None), key=self.sort_key)]
        table = pa.Table.from_pylist(rows, schema=self.schema)
        path = shard_path(self.directory, self.table, index, self.shards)
        with FileSystems.create(path) as handle:
            pq.write_table(table, handle, compression="zstd")
        yield (self.table, path, table.num_rows)


class WriteParquetShards(beam.PTransform):
    """``PCollection[record]`` -> ``PCollection[(table, path, rows)]``: exactly ``shards``
    files named ``<table>-SSSSS-of-NNNNN.parquet`` (empty shards included, so a reader can
    trust the count), each sorted by ``sort_key``, zstd-compressed, with ``schema``.
    ``record_type``: the records' class, so that they cross the shard shuffle with its
    registered coder (``transforms/coders.py``) rather than pickled; None: Beam's default."""

    def __init__(self, directory: str, table: str, schema: pa.Schema, shards: int,
                 shard_key: Callable[[Any], str], sort_key: Callable[[Any], Any],
                 record_type: type | None = None,
                 to_row: Callable[[Any, pa.Schema], dict] = as_row) -> None:
        super().__init__()
        self.to_row = to_row
        self.record_type = record_type
        self.directory = directory
        self.table = table
        self.schema = schema
        self.shards = shards
        self.shard_key = shard_key
        self.sort_key = sort_key

    def expand(self, records):
        shards, shard_key = self.shards, self.shard_key
        keyed_type = tuple[int, Optional[self.record_type or Any]]
        every_shard = (
            records.pipeline
            | "EveryShard" >> beam.Create([(i, None) for i in range(shards)]).with_output_types(keyed_type)
        )
        keyed = records | "KeyByShard" >> beam.Map(
            lambda r: (shard_of(shard_key(r), shards), r)).with_output_types(keyed_type)
        return (
            (keyed, every_shard)
            | "Together" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(
                _WriteShard(self.directory, self.table, shards, self.schema, self.sort_key,
                            self.to_row)
            )
        )
