"""SPARSE: BM25 weights of every chunk's search text, from corpus statistics computed by a Beam
combine over the run's chunks (``chunkline.sparse``).

Each chunk is analyzed once: its term ids and counts ride on the record (``sparse_indices``,
``sparse_values`` holding the counts) into the combine and on to the weighting, which reads the
statistics as a side input and replaces the counts with the chunk's stored weights (saturated
term frequencies against the reference mean length; IDF is the query's). The reference is the
previous run's, given when the graph is built, kept or re-based by the statistics
(``chunkline.sparse.reference_length``): every worker decides alike. The statistics leave the
job as ``bm25.json`` (chunks, total length, the reference, the options) and a ``terms`` table
(term_id, df), what a query needs for IDF.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any, Iterable, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.pvalue import AsSingleton, PCollection

from chunkline.records import ChunkRecord
from chunkline.sparse import (
    TERM_SPACE,
    CorpusStats,
    SparseOptions,
    document_weights,
    reference_length,
    term_counts,
)
from transforms.coders import ChunkRecordCoder  # noqa: F401 - registered: how chunks shuffle
from transforms.elementwise import MapWith

STATS_FILE = "bm25.json"
# What ``sparse_values`` hold, as bm25.json says: "tf", the saturated term frequencies (IDF at
# query time). Indexes written before the split have no "weights" key: full BM25 weights.
WEIGHTS = "tf"


def terms_schema() -> pa.Schema:
    return pa.schema([pa.field("term_id", pa.int32(), nullable=False),
                      pa.field("df", pa.int64(), nullable=False)])


class SparseOutputs(NamedTuple):
    chunks: PCollection[ChunkRecord]  # sparse_indices / sparse_values: BM25 weights
    terms: PCollection[tuple[int, int]]  # (term_id, df), one per term of the corpus
    stats: PCollection[CorpusStats]  # one element


class _CorpusStatsFn(beam.CombineFn):
    """Chunks, summed length and document frequencies; lifted before the shuffle, so each
    worker sends one partial Counter, not a row per chunk."""

    def create_accumulator(self) -> list[Any]:
        return [0, 0, Counter()]

    def add_input(self, accumulator: list[Any], chunk: ChunkRecord | CorpusStats) -> list[Any]:
        if isinstance(chunk, CorpusStats):  # the statistics of chunks counted elsewhere
            accumulator[0] += chunk.documents
            accumulator[1] += chunk.total_length
            accumulator[2].update(chunk.df)
            return accumulator
        accumulator[0] += 1
        accumulator[1] += int(sum(chunk.sparse_values))
        accumulator[2].update(chunk.sparse_indices)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list[Any]]) -> list[Any]:
        merged = self.create_accumulator()
        for documents, length, df in accumulators:
            merged[0] += documents
            merged[1] += length
            merged[2].update(df)
        return merged

    def extract_output(self, accumulator: list[Any]) -> CorpusStats:
        return CorpusStats(accumulator[0], accumulator[1], dict(accumulator[2]))


def _with_counts(chunk: ChunkRecord, options: SparseOptions) -> ChunkRecord:
    ids, counts = term_counts(chunk.search_text, options)
    return dataclasses.replace(chunk, sparse_indices=ids, sparse_values=tuple(map(float, counts)))


def lengths_only(stats: CorpusStats) -> CorpusStats:
    """The statistics without document frequencies: all a document's stored weights depend on."""
    return CorpusStats(stats.documents, stats.total_length, {})


class BM25Weights:
    """``(chunk with term counts, CorpusStats)`` -> the chunk with its stored BM25 weights; a
    plain callable, so that the shard writer can weigh each chunk as its shard is written
    (``WriteParquetShards(finish=...)``) and the chunks never wait in memory for the statistics.
    ``previous_reference``: the reference mean length of the run this one follows (None: none)."""

    def __init__(self, options: SparseOptions, previous_reference: float | None = None) -> None:
        self.options, self.previous_reference = options, previous_reference
        self._reference: tuple[tuple[int, int], float] | None = None

    def reference(self, stats: CorpusStats) -> float:
        key = (stats.documents, stats.total_length)
        if self._reference is None or self._reference[0] != key:
            found = reference_length(stats.avgdl, self.previous_reference, self.options.reference_drift)[0]
            self._reference = (key, found)
        return self._reference[1]

    def __call__(self, chunk: ChunkRecord, stats: CorpusStats) -> ChunkRecord:
        counts = tuple(int(value) for value in chunk.sparse_values)
        weights = document_weights(chunk.sparse_indices, counts, self.reference(stats), self.options)
        # float32, as stored: the record then decodes to exactly what the shard holds.
        return dataclasses.replace(
            chunk, sparse_values=tuple(np.asarray(weights, dtype=np.float32).tolist()))


class SparseCounts(beam.PTransform):
    """``PCollection[ChunkRecord]`` -> :class:`SparseOutputs` with the chunks still holding
    their term *counts*: weigh each with :class:`BM25Weights` and ``stats`` (the pipeline does so
    in its shard writer). Given ``(chunks, counted)``, the ``counted`` chunks (carried from a
    previous run, their counts on them) enter the statistics as they are; ``chunks`` in the
    outputs are the newly counted ones only. ``counted`` may instead hold
    :class:`CorpusStats` of chunks counted elsewhere (the carried rows, summed per shard read)."""

    def __init__(self, options: SparseOptions | None = None) -> None:
        super().__init__()
        self.options = options if options is not None else SparseOptions()

    def expand(self, chunks):
        # (chunks, counted): chunks carried from the previous run hold their counts already.
        chunks, *already = chunks if isinstance(chunks, (tuple, list)) else (chunks,)
        counted = chunks | "CountTerms" >> beam.ParDo(MapWith(_with_counts, self.options)).with_output_types(
            ChunkRecord)
        # Summed where they are counted (the combine is lifted into that stage): flattened with
        # statistics made elsewhere first, every chunk would wait whole in the in-process
        # runner's buffer for the flatten (at 100 MB of text, hundreds of MB).
        summed = counted | "ChunkStats" >> beam.CombineGlobally(_CorpusStatsFn()).without_defaults()
        # Empty statistics always enter the final combine, so it needs no default for a corpus
        # without chunks: Beam injects that default through a side input of the combined value,
        # which the worker's state cache weighs object by object (the whole term table, ~0.2 s
        # at 80 MB of text, in every run).
        nothing = chunks.pipeline | "NoChunks" >> beam.Create([CorpusStats(0, 0, {})])
        every = (summed, *already, nothing) | "EveryStats" >> beam.Flatten()
        stats = every | "CorpusStats" >> beam.CombineGlobally(_CorpusStatsFn()).without_defaults()
        terms = stats | "Terms" >> beam.FlatMap(lambda s: sorted(s.df.items()))
        return SparseOutputs(counted, terms, stats)


class SparseVectors(beam.PTransform):
    """``PCollection[ChunkRecord]`` -> :class:`SparseOutputs`: every chunk with the BM25 weights
    of its ``search_text`` as a sparse vector (term ids ascending), the corpus's terms with
    their document frequencies, and the statistics (one :class:`CorpusStats`)."""

    def __init__(self, options: SparseOptions | None = None,
                 previous_reference: float | None = None) -> None:
        super().__init__()
        self.options = options if options is not None else SparseOptions()
        self.previous_reference = previous_reference

    def expand(self, chunks: PCollection[ChunkRecord]):
        counted = chunks | "Counts" >> SparseCounts(self.options)
        weighted = counted.chunks | "Weigh" >> beam.Map(
            BM25Weights(self.options, self.previous_reference),
            AsSingleton(counted.stats)).with_output_types(ChunkRecord)
        return SparseOutputs(weighted, counted.terms, counted.stats)


def stats_json(stats: CorpusStats, options: SparseOptions,
               previous_reference: float | None = None) -> dict[str, Any]:
    """What ``bm25.json`` (and the manifest) say about the sparse vectors."""
    reference, rebased = reference_length(stats.avgdl, previous_reference, options.reference_drift)
    return {
        "chunks": stats.documents, "total_length": stats.total_length, "avgdl": stats.avgdl,
        "terms": len(stats.df), "k1": options.k1, "b": options.b, "method": "lucene",
        "stemmer": options.stemmer, "stop_words": options.stop_words,
        "term_ids": f"blake2b-64 little-endian mod {TERM_SPACE}", "term_space": TERM_SPACE,
        "analyzer": "lowercase, \\b\\w\\w+\\b words, stop words, Snowball stemmer",
        "weights": WEIGHTS, "reference_avgdl": reference, "reference_drift": options.reference_drift,
        "previous_reference_avgdl": previous_reference, "rebased": rebased,
    }


class WriteStats(beam.DoFn):
    def __init__(self, run_dir: str, options: SparseOptions,
                 previous_reference: float | None = None) -> None:
        self.run_dir, self.options, self.previous_reference = run_dir, options, previous_reference

    def process(self, stats: CorpusStats) -> Iterable[str]:
        path = FileSystems.join(self.run_dir, STATS_FILE)
        summary = stats_json(stats, self.options, self.previous_reference)
        with FileSystems.create(path) as handle:
            handle.write((json.dumps(summary, indent=2) + "\n").encode())
        yield path


class WriteTerms(beam.DoFn):
    """The statistics -> the ``terms`` table (term_id ascending, df), written in one go with
    Arrow as ``terms-00000-of-00001.parquet``: ``(table, path, rows)``; or, when ``previous``
    (the previous run's terms file, of this output) holds exactly these rows, that file,
    referenced rather than written again (listed for the manifest either way:
    ``transforms.write.write_listing``)."""

    def __init__(self, run_dir: str, previous: str | None = None) -> None:
        self.run_dir, self.previous = run_dir, previous

    def process(self, stats: CorpusStats) -> Iterable[tuple[str, str, int]]:
        from transforms.write import ROW_GROUP, same_output, shard_path, write_listing

        ids = np.fromiter(stats.df.keys(), dtype=np.int64, count=len(stats.df))
        dfs = np.fromiter(stats.df.values(), dtype=np.int64, count=len(stats.df))
        order = np.argsort(ids, kind="stable")
        table = pa.table({"term_id": pa.array(ids[order], pa.int32()), "df": pa.array(dfs[order], pa.int64())},
                         schema=terms_schema())
        path = shard_path(self.run_dir, "terms", 0, 1)
        if self.previous is not None and same_output(self.previous, path) and self._holds(table):
            write_listing(self.run_dir, "terms", 0, [(self.previous, table.num_rows, ())])
            yield "terms", self.previous, table.num_rows
            return
        with FileSystems.create(path) as handle:
            pq.write_table(table, handle, row_group_size=ROW_GROUP, compression="zstd")
        write_listing(self.run_dir, "terms", 0, [(path, table.num_rows, ())])
        yield "terms", path, table.num_rows

    def _holds(self, table: pa.Table) -> bool:
        try:
            with FileSystems.open(self.previous) as handle:
                return pq.read_table(handle).equals(table)
        except Exception:  # noqa: BLE001 - unreadable now: written again
            return False
