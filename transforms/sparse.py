"""SPARSE: BM25 weights of every chunk's search text, from corpus statistics computed by Beam
combines over the run's chunks (``chunkline.sparse``).

Each chunk is analyzed once: its term ids and counts ride on the record (``sparse_indices``,
``sparse_values`` holding the counts) into the combine and on to the weighting, which reads the
statistics as a side input and replaces the counts with the chunk's stored weights (saturated
term frequencies against the reference mean length; IDF is the query's). The reference is the
previous run's, given when the graph is built, kept or re-based by the statistics
(``chunkline.sparse.reference_length``): every worker decides alike. The statistics leave the
job as ``bm25.json`` (chunks, total length, the reference, the options) and a ``terms`` table
(term_id, df), what a query needs for IDF.

No worker holds the corpus's vocabulary: the document frequencies are combined per share of the
term space (a range of term ids, :func:`term_share`), each bundle sending one partial array per
share, and each share is one file of the terms table; the global statistics (chunks, total
length, distinct terms) are three numbers in a tiny global combine.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, NamedTuple, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.pvalue import AsSingleton, PCollection, TaggedOutput
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.records import ChunkRecord
from chunkline.sparse import (
    TERM_SPACE,
    CorpusStats,
    SparseOptions,
    document_weights,
    reference_length,
    term_counts,
)
from chunkline.transforms.coders import ChunkRecordCoder  # noqa: F401 - registered: how chunks shuffle
from chunkline.transforms.elementwise import MapWith
from chunkline.transforms.tally import KeyCounts

STATS_FILE = "bm25.json"
# What ``sparse_values`` hold, as bm25.json says: "tf", the saturated term frequencies (IDF at
# query time). Indexes written before the split have no "weights" key: full BM25 weights.
WEIGHTS = "tf"
LENGTHS = "lengths"


def terms_schema() -> pa.Schema:
    return pa.schema([pa.field("term_id", pa.int32(), nullable=False),
                      pa.field("df", pa.int64(), nullable=False)])


class SparseOutputs(NamedTuple):
    chunks: PCollection[ChunkRecord]  # sparse_indices / sparse_values: BM25 weights
    # (share, (term ids ascending, their df)): every term of the corpus, once, in the share of
    # the term space its id falls in (term_share); every share present, an empty one too.
    terms: PCollection[tuple[int, tuple[np.ndarray, np.ndarray]]]
    stats: PCollection[CorpusStats]  # one element: chunks, total length, vocabulary; no df


# Term ids a bundle holds before it sends them on, summed by id and split by share.
_FLUSH_TERMS = 1 << 18


def term_share(ids: np.ndarray, shares: int) -> np.ndarray:
    """The share of the term space each id falls in: contiguous ranges, so the terms table's
    shards, read in name order, hold the ids ascending."""
    return ids.astype(np.int64) * shares // TERM_SPACE


def _by_share(ids: np.ndarray, counts: np.ndarray, shares: int) -> list[tuple[int, tuple]]:
    """Ids ascending and their counts -> ``(share, (ids, counts))`` for each share they touch."""
    cuts = np.searchsorted(term_share(ids, shares), np.arange(1, shares))
    found = []
    for share, (low, high) in enumerate(zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(ids)])))):
        if high > low:
            found.append((share, (ids[low:high], counts[low:high])))
    return found


class _ShareTerms(beam.DoFn):
    """Counted chunks (or the :class:`CorpusStats` of chunks counted elsewhere) -> each term's
    document frequency among them, summed over a bundle (in-mapper combining: Lin & Dyer,
    "Data-Intensive Text Processing with MapReduce", 2010, section 3.1) and sent as
    ``(share, (ids, counts))`` per share of the term space; tagged ``lengths``, the
    ``(chunks, summed length, 0)`` of what it sent. A term is never an element of its own, and
    what a bundle holds is bounded (:data:`_FLUSH_TERMS`)."""

    def __init__(self, shares: int) -> None:
        self.shares = shares

    def start_bundle(self) -> None:
        self._ids: list[int] = []
        self._documents = self._length = 0

    def process(self, counted: ChunkRecord | CorpusStats):
        if isinstance(counted, CorpusStats):  # the statistics of chunks counted elsewhere
            ids = np.fromiter(counted.df.keys(), dtype=np.int64, count=len(counted.df))
            dfs = np.fromiter(counted.df.values(), dtype=np.int64, count=len(counted.df))
            order = np.argsort(ids, kind="stable")
            yield from _by_share(ids[order], dfs[order], self.shares)
            yield TaggedOutput(LENGTHS, (counted.documents, counted.total_length, 0))
            return
        self._ids.extend(counted.sparse_indices)  # each id once per chunk (term_counts)
        self._documents += 1
        self._length += int(sum(counted.sparse_values))
        if len(self._ids) >= _FLUSH_TERMS:
            yield from self._flush()

    def finish_bundle(self):
        for found in self._flush():
            if isinstance(found, TaggedOutput):
                yield TaggedOutput(found.tag, WindowedValue(found.value, 0, (GlobalWindow(),)))
            else:
                yield WindowedValue(found, 0, (GlobalWindow(),))

    def _flush(self) -> list:
        if not self._documents:
            return []
        ids, counts = np.unique(np.array(self._ids, dtype=np.int64), return_counts=True)
        found: list = _by_share(ids, counts.astype(np.int64), self.shares)
        found.append(TaggedOutput(LENGTHS, (self._documents, self._length, 0)))
        self._ids, self._documents, self._length = [], 0, 0
        return found


class _Totals(beam.CombineFn):
    """``(chunks, length, terms)`` partials -> one :class:`CorpusStats` without its df: three
    numbers, whatever the corpus."""

    def create_accumulator(self) -> tuple[int, int, int]:
        return 0, 0, 0

    def add_input(self, accumulator, partial):
        return tuple(a + b for a, b in zip(accumulator, partial))

    def merge_accumulators(self, accumulators):
        return tuple(map(sum, zip(*accumulators))) if accumulators else (0, 0, 0)

    def extract_output(self, accumulator) -> CorpusStats:
        documents, length, vocabulary = accumulator
        return CorpusStats(documents, length, {}, vocabulary)


def _with_counts(chunk: ChunkRecord, options: SparseOptions) -> ChunkRecord:
    ids, counts = term_counts(chunk.search_text, options)
    return dataclasses.replace(chunk, sparse_indices=ids, sparse_values=tuple(map(float, counts)))


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
    :class:`CorpusStats` of chunks counted elsewhere (the carried rows, summed per shard read).

    Document frequencies are combined per share of the term space (``shares``, one terms file
    each): a share's accumulator holds only its own terms, and each can sit on another worker.
    The global statistics are three numbers."""

    def __init__(self, options: SparseOptions | None = None, shares: int = 4) -> None:
        super().__init__()
        self.options = options if options is not None else SparseOptions()
        self.shares = shares

    def expand(self, chunks):
        # (chunks, counted): chunks carried from the previous run hold their counts already.
        chunks, *already = chunks if isinstance(chunks, (tuple, list)) else (chunks,)
        counted = chunks | "CountTerms" >> beam.ParDo(MapWith(_with_counts, self.options)).with_output_types(
            ChunkRecord)
        # Summed where they are counted (fused with the counting): flattened with statistics
        # made elsewhere first, every chunk would wait whole in the in-process runner's buffer
        # for the flatten (at 100 MB of text, hundreds of MB).
        partials = [counted | "ChunkTerms" >> beam.ParDo(_ShareTerms(self.shares)).with_outputs(
            LENGTHS, main="terms")]
        for index, earlier in enumerate(already):
            partials.append(earlier | f"CountedTerms{index}" >> beam.ParDo(
                _ShareTerms(self.shares)).with_outputs(LENGTHS, main="terms"))
        pipeline = chunks.pipeline
        # Every share gets a file, an empty one too: the table's files are its shares.
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        every_share = pipeline | "EveryShare" >> beam.Create([(share, empty) for share in range(self.shares)])
        terms = (
            (*(found.terms for found in partials), every_share)
            | "TermPartials" >> beam.Flatten()
            | "DocumentFrequencies" >> beam.CombinePerKey(KeyCounts("<i8"))
        )
        # A zero always enters the final combine, so it needs no default for a corpus without
        # chunks (Beam would inject that through a side input of the combined value).
        nothing = pipeline | "NoChunks" >> beam.Create([(0, 0, 0)])
        vocabulary = terms | "Vocabulary" >> beam.Map(lambda kv: (0, 0, len(kv[1][0])))
        stats = (
            (*(found[LENGTHS] for found in partials), vocabulary, nothing)
            | "EveryTotal" >> beam.Flatten()
            | "CorpusStats" >> beam.CombineGlobally(_Totals()).without_defaults()
        )
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
        "terms": stats.terms, "k1": options.k1, "b": options.b, "method": "lucene",
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
    """One share of the terms -> its file of the ``terms`` table (term_id ascending, df),
    ``terms-SSSSS-of-NNNNN.parquet``: ``(table, path, rows)``. The shares are ranges of the
    term space (:func:`term_share`): the files in name order hold the ids ascending, each once.
    When ``previous`` (the terms files of the run carry follows, of this output) holds a file
    of the same name with exactly these rows, that file is referenced rather than written again
    (listed for the manifest either way: ``chunkline.transforms.write.write_listing``)."""

    def __init__(self, run_dir: str, shares: int, previous: Sequence[str] = ()) -> None:
        self.run_dir, self.shares, self.previous = run_dir, shares, tuple(previous)

    def process(self, share_terms: tuple[int, tuple[np.ndarray, np.ndarray]]) -> Iterable[tuple[str, str, int]]:
        from chunkline.transforms.write import ROW_GROUP, same_output, shard_path, write_listing

        share, (ids, dfs) = share_terms
        table = pa.table({"term_id": pa.array(ids, pa.int32()), "df": pa.array(dfs, pa.int64())},
                         schema=terms_schema())
        path = shard_path(self.run_dir, "terms", share, self.shares)
        name = path.replace("\\", "/").rsplit("/", 1)[-1]
        for earlier in self.previous:
            if earlier.replace("\\", "/").rsplit("/", 1)[-1] == name and same_output(earlier, path) \
                    and self._holds(earlier, table):
                write_listing(self.run_dir, "terms", share, [(earlier, table.num_rows, ())])
                yield "terms", earlier, table.num_rows
                return
        with FileSystems.create(path) as handle:
            pq.write_table(table, handle, row_group_size=ROW_GROUP, compression="zstd", write_page_checksum=True)
        write_listing(self.run_dir, "terms", share, [(path, table.num_rows, ())])
        yield "terms", path, table.num_rows

    @staticmethod
    def _holds(previous: str, table: pa.Table) -> bool:
        try:
            with FileSystems.open(previous) as handle:
                return pq.read_table(handle).equals(table)
        except Exception:  # noqa: BLE001 - unreadable now: written again
            return False
