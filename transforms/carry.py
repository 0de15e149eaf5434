"""CARRY: an unchanged document's chunks rows taken from the previous run, not made again.

Every kept document gets a carry key where dedupe summarizes it (``chunkline.carry.carry_key``:
the processing signature and the document as the splitter would see it). The previous run's
carry sidecars say, per document, the key its rows were made under; each (chunk shard, sidecar)
pair is read once to verify it (:func:`carried_documents`: rows aligned, every chunk of the
document there, vectors finite and of the run's length, unit length when normalized, no failed
context header) and to list the documents it may lend. Dedupe marks a kept document whose key
is listed as carried (``transforms/dedupe.py``): its status is written as usual, but it is not
released to the splitter; the carried documents are grouped by the pair that holds them, and
each pair is read again to release their chunks, term counts included, straight to the
statistics and the shard writer. Only ids, keys and small integers cross a shuffle.

Counters (namespace ``carry``): documents carried, recomputed (kept before under another key),
new (no rows before), gone (rows before, not kept now); chunks carried; previous documents
whose rows failed their check (``rejected``: computed again).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable, Iterator, NamedTuple, Sequence

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection

from chunkline.carry import carry_key, embedding_prefix
from chunkline.context.writer import CACHED, FAILED, OK
from chunkline.quantize import UNIT_TOLERANCE, dequantized
from chunkline.records import KEPT, ChunkRecord, DocumentChunks
from transforms.coders import ChunkRecordCoder  # noqa: F401 - registered: how chunks shuffle
from transforms.counters import (
    DOCUMENTS_CHANGED,
    DOCUMENTS_REDONE,
    CHUNKS_CARRIED,
    DOCUMENTS_CARRIED,
    DOCUMENTS_GONE,
    DOCUMENTS_NEW,
    DOCUMENTS_RECOMPUTED,
    CARRY_REJECTED,
)
from transforms.reuse import stored_dtype, vector_problem

log = logging.getLogger("chunkline.carry")
BATCH_ROWS = 8192


class CarrySource(NamedTuple):
    """The previous run's rows that may be carried, and what this run's rows must be."""

    pairs: tuple[tuple[str, str], ...]  # (chunk shard, its carry sidecar), in shard order
    signature: str  # chunkline.carry.processing_signature of this run
    chunk_metadata: tuple[str, ...] | None  # output.chunk_metadata
    dim: int | None  # this run's vector length; None: embedding off
    normalize: bool
    # The previous run's documents shards: what each document's input was (its input digest).
    documents: tuple[str, ...] = ()


class CarryEntry(NamedTuple):
    carry_key: str
    pair: int  # index into CarrySource.pairs


class CarryKeys:
    """Document -> its carry key under this run's processing (a plain callable: dedupe calls it
    where the text is at hand, and the split output is keyed the same way)."""

    def __init__(self, source: CarrySource) -> None:
        self.signature, self.chunk_metadata = source.signature, source.chunk_metadata

    def __call__(self, doc) -> str:
        return carry_key(self.signature, doc, self.chunk_metadata)


def _rows(chunk_file: pq.ParquetFile, side_file: pq.ParquetFile) -> Iterator[tuple[dict, dict]]:
    """The two files' rows side by side (as dicts), in lockstep; a length mismatch raises."""
    chunk_batches = chunk_file.iter_batches(batch_size=BATCH_ROWS)
    side_batches = side_file.iter_batches(batch_size=BATCH_ROWS)
    pending: list[dict] = []
    for side in side_batches:
        for side_row in side.to_pylist():
            if not pending:
                batch = next(chunk_batches, None)
                if batch is None:
                    raise ValueError("the sidecar has more rows than its chunk shard")
                pending = batch.to_pylist()[::-1]
            yield pending.pop(), side_row
    if pending or next(chunk_batches, None) is not None:
        raise ValueError("the chunk shard has more rows than its sidecar")


def _record(row: dict, side: dict, dtype: str, has_vectors: bool) -> ChunkRecord | None:
    prefix = embedding_prefix(row["search_text"], row["context"], row["table_header"], row["text"])
    if prefix is None:
        return None
    embedding = None
    if has_vectors and row["embedding"] is not None:
        values = np.asarray([row["embedding"]])
        scales = np.asarray([row["embedding_scale"]]) if dtype == "int8" else None
        if dtype == "int8" and row["embedding_scale"] is None:
            return None
        embedding = tuple(dequantized(values, scales)[0].tolist()) if dtype == "int8" \
            else tuple(float(v) for v in row["embedding"])
    return ChunkRecord(
        doc_id=row["doc_id"], chunk_id=row["chunk_id"], chunk_index=row["chunk_index"],
        start=row["start"], end=row["end"], headings=tuple(row["headings"]), text=row["text"],
        tokens=row["tokens"], embedding=embedding, prefix=prefix, context=row["context"],
        # A header written by an earlier run is, this run, one the cache gave back: the status a
        # rebuild reading the same cache would give it.
        context_status=CACHED if row["context_status"] == OK else row["context_status"],
        table_header=row["table_header"],
        content_key=row["content_key"], metadata=row["metadata"], page_start=row["page_start"],
        page_end=row["page_end"], sparse_indices=tuple(side["term_ids"]),
        sparse_values=tuple(float(count) for count in side["term_counts"]),
        carry_key=side["carry_key"])


def _problem(chunks: Sequence[ChunkRecord | None], sides: Sequence[dict], dim: int | None,
             normalize: bool, dtype: str) -> str | None:
    """Why one document's previous rows may not be carried (None: they may)."""
    if any(chunk is None for chunk in chunks):
        return "a row's search_text does not end with its text"
    if [side["chunk_index"] for side in sides] != list(range(len(sides))) \
            or any(side["doc_chunks"] != len(sides) for side in sides):
        return "its chunks are not all there, in order"
    if len({side["carry_key"] for side in sides}) != 1:
        return "its rows disagree on the carry key"
    if any(len(side["term_ids"]) != len(side["term_counts"]) for side in sides):
        return "term ids and counts differ in length"
    for chunk in chunks:
        if chunk.context_status.startswith(FAILED):
            return "a contextual header failed: asked for again"
        if dim is not None:
            problem = vector_problem(chunk.embedding, dim, normalize, UNIT_TOLERANCE[dtype])
            if problem is not None:
                return f"stored vector: {problem}"
    return None


def carried_documents(chunk_path: str, side_path: str, dim: int | None, normalize: bool,
                      ) -> Iterator[tuple[str, str, list[ChunkRecord] | None, str | None]]:
    """``(doc_id, carry_key, its chunks or None, why not)`` for each document of one previous
    (chunk shard, sidecar) pair, in shard order. Reading fails (raises) for a file that cannot
    be read or whose two halves do not line up."""
    with FileSystems.open(chunk_path) as chunk_handle, FileSystems.open(side_path) as side_handle:
        chunk_file, side_file = pq.ParquetFile(chunk_handle), pq.ParquetFile(side_handle)
        has_vectors = dim is not None and "embedding" in chunk_file.schema_arrow.names
        dtype = stored_dtype(chunk_file.schema_arrow) if has_vectors else "float32"
        doc_id, rows, sides = None, [], []

        def finished():
            chunks = [_record(row, side, dtype, has_vectors) for row, side in zip(rows, sides)]
            problem = _problem(chunks, sides, dim, normalize, dtype)
            return doc_id, sides[0]["carry_key"], None if problem else chunks, problem

        for row, side in _rows(chunk_file, side_file):
            if (row["doc_id"], row["chunk_index"]) != (side["doc_id"], side["chunk_index"]):
                raise ValueError(f"row {row['doc_id']}#{row['chunk_index']} of the chunk shard "
                                 f"is {side['doc_id']}#{side['chunk_index']} in its sidecar")
            if row["doc_id"] != doc_id and rows:
                yield finished()
                rows, sides = [], []
            doc_id = row["doc_id"]
            rows.append(row)
            sides.append(side)
        if rows:
            yield finished()


class _IndexPair(beam.DoFn):
    """A pair's index -> ``(doc_id, CarryEntry)`` for each document whose rows pass their
    check; the others (and every document of a pair that cannot be read) are counted and
    computed again."""

    def __init__(self, source: CarrySource) -> None:
        self.source = source
        self.rejected = Metrics.counter(*CARRY_REJECTED)

    def process(self, pair: int) -> Iterable[tuple[str, CarryEntry]]:
        chunk_path, side_path = self.source.pairs[pair]
        try:
            found = list(
                (doc_id, key, problem) for doc_id, key, _, problem in carried_documents(
                    chunk_path, side_path, self.source.dim, self.source.normalize))
        except Exception as exc:  # noqa: BLE001 - a damaged file raises whatever arrow raises
            self.rejected.inc(_sidecar_documents(side_path))
            log.warning("carry: %s unreadable (%s: %s); its documents are computed again",
                        chunk_path, type(exc).__name__, exc)
            return
        for doc_id, key, problem in found:
            if problem is not None:
                self.rejected.inc()
                log.warning("carry: %s in %s: %s; computed again", doc_id, chunk_path, problem)
                continue
            yield doc_id, CarryEntry(key, pair)


def _sidecar_documents(side_path: str) -> int:
    try:
        with FileSystems.open(side_path) as handle:
            ids = pq.read_table(handle, columns=["doc_id"]).column("doc_id")
        return len(set(ids.to_pylist()))
    except Exception:  # noqa: BLE001 - both halves unreadable: nothing to count
        return 0


class PreviousDocument(NamedTuple):
    status: str
    input_digest: str  # "" from a run before input digests, or for a rejected document


class _PreviousDocuments(beam.DoFn):
    """A documents shard of the previous run -> ``(doc_id, PreviousDocument)`` per row. The
    shard only tells apart why documents were computed, so an unreadable one is logged and its
    documents counted as changed, never a failed run."""

    def process(self, path: str) -> Iterable[tuple[str, PreviousDocument]]:
        try:
            with FileSystems.open(path) as handle:
                names = pq.read_schema(handle).names
                handle.seek(0)
                columns = ["doc_id", "status"] + (["input_digest"] if "input_digest" in names else [])
                table = pq.read_table(handle, columns=columns)
        except Exception as exc:  # noqa: BLE001 - a damaged file raises whatever arrow raises
            log.warning("carry: %s unreadable (%s: %s); its documents count as changed",
                        path, type(exc).__name__, exc)
            return
        digests = (table.column("input_digest").to_pylist() if "input_digest" in table.schema.names
                   else [""] * table.num_rows)
        for doc_id, status, digest in zip(table.column("doc_id").to_pylist(),
                                          table.column("status").to_pylist(), digests):
            yield doc_id, PreviousDocument(status, digest or "")


class CarryIndexOutputs(NamedTuple):
    entries: PCollection  # (doc_id, CarryEntry): the previous documents whose rows may be carried
    documents: PCollection  # (doc_id, PreviousDocument): every document the previous run read


class CarryIndex(beam.PTransform):
    """root -> :class:`CarryIndexOutputs`: the previous run's carriable documents, and what it
    read."""

    def __init__(self, source: CarrySource) -> None:
        super().__init__()
        self.source = source

    def expand(self, root) -> CarryIndexOutputs:
        entries = (root
                   | "Pairs" >> beam.Create(list(range(len(self.source.pairs))))
                   | "Verify" >> beam.ParDo(_IndexPair(self.source)).with_output_types(
                       tuple[str, CarryEntry]))
        documents = (root
                     | "DocumentShards" >> beam.Create(list(self.source.documents))
                     | "ReadDocuments" >> beam.ParDo(_PreviousDocuments()).with_output_types(
                         tuple[str, PreviousDocument]))
        return CarryIndexOutputs(entries, documents)


class CarryDecisions(beam.DoFn):
    """``(doc_id, {"decision": [dedupe decision], "previous": [CarryEntry], "documents":
    [PreviousDocument]})`` -> the decision, marked ``carried`` when the document is kept under
    the key its previous rows were made with, and, tagged ``carried``, ``(pair, doc_id)``.

    Every other kept document is counted by why it is computed: ``changed`` (its input is not
    the previous run's), ``redone`` (the same input, moved by a corpus-wide change: a line that
    turned boilerplate, a survivor that left, other processing) or ``new`` (the previous run
    did not read it); ``recomputed`` is changed + redone. ``gone``: kept then, not now."""

    def __init__(self) -> None:
        self.carried = Metrics.counter(*DOCUMENTS_CARRIED)
        self.recomputed = Metrics.counter(*DOCUMENTS_RECOMPUTED)
        self.changed = Metrics.counter(*DOCUMENTS_CHANGED)
        self.redone = Metrics.counter(*DOCUMENTS_REDONE)
        self.new = Metrics.counter(*DOCUMENTS_NEW)
        self.gone = Metrics.counter(*DOCUMENTS_GONE)

    def process(self, joined):
        doc_id, groups = joined
        previous = next(iter(groups["previous"]), None)
        read_before = next(iter(groups["documents"]), None)
        kept = False
        for decision in groups["decision"]:
            if decision.status != KEPT:
                yield decision
                continue
            kept = True
            if previous is not None and previous.carry_key == decision.carry_key:
                self.carried.inc()
                yield decision._replace(carried=True)
                yield beam.pvalue.TaggedOutput("carried", (previous.pair, doc_id))
                continue
            if read_before is None and previous is None:
                self.new.inc()
            else:
                self.recomputed.inc()
                same_input = (read_before is not None and read_before.input_digest != ""
                              and read_before.input_digest == decision.input_digest)
                (self.redone if same_input else self.changed).inc()
            yield decision
        was_kept = previous is not None or (read_before is not None and read_before.status == KEPT)
        if was_kept and not kept:
            self.gone.inc()


class _ReleasePair(beam.DoFn):
    """``(pair, doc ids)`` -> the chunks of those documents, read from the pair again. They
    passed their check when the index was read; a pair that reads differently now was changed
    under the run, which then fails rather than publish a partial index."""

    def __init__(self, source: CarrySource) -> None:
        self.source = source
        self.chunks = Metrics.counter(*CHUNKS_CARRIED)

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterable[ChunkRecord]:
        pair, doc_ids = keyed
        wanted = set(doc_ids)
        chunk_path, side_path = self.source.pairs[pair]
        released = 0
        for doc_id, _, chunks, problem in carried_documents(
                chunk_path, side_path, self.source.dim, self.source.normalize):
            if doc_id not in wanted:
                continue
            if chunks is None:
                raise RuntimeError(f"carry: {doc_id} in {chunk_path} passed its check and now "
                                   f"fails it ({problem}): the previous run changed during this one")
            released += 1
            self.chunks.inc(len(chunks))
            yield from chunks
        if released != len(wanted):
            raise RuntimeError(f"carry: {len(wanted) - released} documents of {chunk_path} are "
                               f"gone from it: the previous run changed during this one")


class CarriedChunks(beam.PTransform):
    """``PCollection[(pair, doc_id)]`` -> ``PCollection[ChunkRecord]``: every carried
    document's chunks as the previous run wrote them, ``sparse_values`` holding term counts."""

    def __init__(self, source: CarrySource) -> None:
        super().__init__()
        self.source = source

    def expand(self, carried: PCollection) -> PCollection[ChunkRecord]:
        return (carried
                | "GroupByPair" >> beam.GroupByKey()
                | "Release" >> beam.ParDo(_ReleasePair(self.source)).with_output_types(ChunkRecord))


def _with_carry_keys(element: DocumentChunks, keys: CarryKeys) -> DocumentChunks:
    key = keys(element.document)
    return dataclasses.replace(element, chunks=tuple(
        dataclasses.replace(chunk, carry_key=key) for chunk in element.chunks))


class SetCarryKeys(beam.PTransform):
    """``PCollection[DocumentChunks]`` -> the same, each chunk holding its document's carry key
    (what the sidecar keeps for the next run)."""

    def __init__(self, source: CarrySource) -> None:
        super().__init__()
        self.keys = CarryKeys(source)

    def expand(self, elements: PCollection[DocumentChunks]) -> PCollection[DocumentChunks]:
        return elements | "CarryKey" >> beam.Map(_with_carry_keys, self.keys).with_output_types(
            DocumentChunks)
