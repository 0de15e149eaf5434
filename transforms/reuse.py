"""REUSE: content keys, and the join of this run's chunks with a previous run's vectors by
content key, inside the graph.

A nightly reindex of a corpus that changed a little should embed only what changed. Every chunk
carries ``content_key`` = hash(embedding signature, exact embedded text); the previous run's
chunk shards give (content_key -> embedding); a CoGroupByKey splits this run's chunks into those
whose vector can be reused and those that must be embedded. Documents gone from the corpus have
no chunks in this run, so their vectors simply do not come back.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable, NamedTuple, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput

from chunkline.quantize import UNIT_TOLERANCE as QUANTIZED_UNIT_TOLERANCE
from chunkline.quantize import dequantized
from chunkline.records import ChunkRecord, DocumentChunks, content_key, doc_hash
from chunkline.transforms.coders import JoinByKey
from chunkline.transforms.elementwise import MapWith
from chunkline.transforms.progress import progress_counter
from chunkline.transforms.counters import CHUNKS_REUSED, REUSE_REJECTED

NAMESPACE = CHUNKS_REUSED.namespace  # one home for the namespace: transforms/counters.py
PREVIOUS_COLUMNS = ["content_key", "chunk_id", "embedding"]
# float32 vectors normalized by the model are unit length to ~1e-7; a vector further off than
# this was not written by a normalizing run (or was damaged since).
UNIT_TOLERANCE = 1e-3

log = logging.getLogger("chunkline.reuse")


class ReuseOutputs(NamedTuple):
    reused: PCollection[ChunkRecord]   # embedding filled from the previous run
    missing: PCollection[ChunkRecord]  # still to embed (new text, or a vector that failed its check)


def stored_dtype(schema: pa.Schema) -> str:
    """How a chunk shard stores its vectors: "int8" (with a scale per row), "float16" or
    "float32"."""
    if "embedding_scale" in schema.names:
        return "int8"
    return "float16" if schema.field("embedding").type.value_type == pa.float16() else "float32"


def vector_problem(vector: Sequence[float] | None, dim: int, normalize: bool,
                   tolerance: float = UNIT_TOLERANCE) -> str | None:
    """Why a stored vector may not be reused (None: it may): the wrong length, a NaN or
    infinity, or, for a normalized index, not unit length."""
    if vector is None:
        return "no vector"
    array = np.asarray(vector, dtype=np.float64)
    if array.shape != (dim,):
        return f"{array.size} values, not {dim}"
    if not np.isfinite(array).all():
        return "not finite"
    if normalize and abs(float(np.linalg.norm(array)) - 1.0) > tolerance:
        return f"norm {float(np.linalg.norm(array)):.4g}, not 1"
    return None


# (content_key, (trusted, chunk_id, vector)): a trusted vector wins over an untrusted one.
Entry = tuple[bool, str, tuple[float, ...]]


class _ReadPreviousShard(beam.DoFn):
    """One previous chunk shard -> (content_key, entry) per row, each vector checked. A shard
    that fails to read part-way is logged with its path and the rest of its chunks re-embedded,
    never a failed job."""

    def __init__(self, dim: int, normalize: bool) -> None:
        self.dim, self.normalize = dim, normalize
        self.unreadable = Metrics.counter(NAMESPACE, "previous_shards_unreadable")

    def process(self, path: str) -> Iterable[tuple[str, Entry]]:
        try:
            with FileSystems.open(path) as handle:
                shard = pq.ParquetFile(handle)
                # A run that stored its vectors as int8 (with a scale per row) or float16: the
                # vector is read back as floats, and checked within that storage's error.
                dtype = stored_dtype(shard.schema_arrow)
                int8 = dtype == "int8"
                columns = PREVIOUS_COLUMNS + (["embedding_scale"] if int8 else [])
                for batch in shard.iter_batches(columns=columns):
                    values = [batch.column(name).to_pylist() for name in columns]
                    scales = values[3] if int8 else [None] * batch.num_rows
                    for key, chunk, vector, scale in zip(*values[:3], scales):
                        if int8 and vector is not None and scale is not None:
                            vector = dequantized(np.asarray([vector]), np.asarray([scale]))[0].tolist()
                        problem = vector_problem(vector, self.dim, self.normalize,
                                                 QUANTIZED_UNIT_TOLERANCE[dtype])
                        yield key, (problem is None, chunk, tuple(vector) if problem is None else ())
        except Exception as exc:  # noqa: BLE001 - a damaged file raises whatever arrow raises
            self.unreadable.inc()
            log.warning("reuse: %s unreadable part-way (%s: %s); the rest of its chunks are "
                        "re-embedded", path, type(exc).__name__, exc)


# A distinct previous vector of one key: (trusted, the chunk ids that held it, the vector).
Candidate = tuple[bool, frozenset, tuple[float, ...]]


class _Candidates(beam.CombineFn):
    """The previous vectors of one key, each distinct vector once with every chunk id that held
    it, trusted ones first (by their smallest chunk id), or one untrusted entry when none is
    trusted. The same text in several chunks has one key and, up to float noise across
    batches, one vector: a chunk takes the vector it had itself (:func:`_pick`), so its row in a
    synced store does not change because a twin's vector came out of another batch."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, accumulator: dict, entry: Entry) -> dict:
        trusted, chunk, vector = entry
        accumulator.setdefault((trusted, vector), set()).add(chunk)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        merged: dict = {}
        for accumulator in accumulators:
            for key, chunks in accumulator.items():
                merged.setdefault(key, set()).update(chunks)
        return merged

    def extract_output(self, accumulator: dict) -> tuple[Candidate, ...]:
        entries = sorted(((trusted, frozenset(chunks), vector)
                          for (trusted, vector), chunks in accumulator.items()),
                         key=lambda entry: (not entry[0], min(entry[1]), entry[2]))
        trusted = [entry for entry in entries if entry[0]]
        return tuple(trusted) if trusted else tuple(entries[:1])


def _pick(candidates: Sequence[Candidate], chunk_id: str) -> Candidate | None:
    """The vector a chunk reuses: its own previous one when trusted, else the trusted vector of
    the smallest chunk id with the same text; None when no candidate is trusted."""
    if not candidates or not candidates[0][0]:
        return None
    return next((entry for entry in candidates if chunk_id in entry[1]), candidates[0])


class _AttachPrevious(beam.DoFn):
    def __init__(self) -> None:
        self.reused = progress_counter(*CHUNKS_REUSED)
        self.missing = Metrics.counter(NAMESPACE, "chunks_to_embed")
        self.rejected = Metrics.counter(*REUSE_REJECTED)

    def process(self, joined: tuple[str, dict[str, list]]):
        _, groups = joined
        candidates = next(iter(groups["previous"]), ())
        for record in groups["new"]:
            found = _pick(candidates, record.chunk_id)
            if found is not None:
                self.reused.inc()
                yield dataclasses.replace(record, embedding=found[2])
                continue
            if candidates:
                self.rejected.inc()  # there was a vector for this text, and it failed its check
            self.missing.inc()
            yield TaggedOutput("missing", record)


class _PreviousVectors(beam.PTransform):
    """The previous run's chunk shards -> ``(content_key, candidates)``, one element per key
    (:class:`_Candidates`)."""

    def __init__(self, previous_files: Sequence[str], dim: int, normalize: bool) -> None:
        super().__init__()
        self.previous_files = list(previous_files)
        self.dim, self.normalize = dim, normalize

    def expand(self, root):
        return (
            root
            | "PreviousShards" >> beam.Create(self.previous_files)
            | "ReadPrevious" >> beam.ParDo(_ReadPreviousShard(self.dim, self.normalize))
            | "OnePerKey" >> beam.CombinePerKey(_Candidates())
        )


class ReusePreviousEmbeddings(beam.PTransform):
    """``PCollection[ChunkRecord]`` (content_key set) -> :class:`ReuseOutputs`.

    ``previous_files``: a previous run's chunk shards (local or gs://), written with the same
    embedding signature in their keys. A key not there is missing; a key whose stored vector is
    not ``dim`` finite values (unit length when ``normalize``) is missing too, counted
    ``reindex/reuse_rejected``: a damaged vector is re-embedded, never copied forward.
    """

    def __init__(self, previous_files: Sequence[str], dim: int, normalize: bool) -> None:
        super().__init__()
        self.previous_files = list(previous_files)
        self.dim, self.normalize = dim, normalize

    def expand(self, chunks: PCollection[ChunkRecord]):
        previous = chunks.pipeline | "Previous" >> _PreviousVectors(
            self.previous_files, self.dim, self.normalize)
        keyed = chunks | "KeyByContent" >> beam.Map(lambda r: (r.content_key, r)).with_output_types(
            tuple[str, ChunkRecord])
        split = (
            {"new": keyed, "previous": previous}
            | "JoinPrevious" >> JoinByKey()
            | "Attach" >> beam.ParDo(_AttachPrevious()).with_outputs("missing", main="reused")
        )
        return ReuseOutputs(split.reused, split.missing)


def _with_content_keys(element: DocumentChunks, signature: str) -> DocumentChunks:
    return dataclasses.replace(element, chunks=tuple(
        dataclasses.replace(record, content_key=content_key(signature, record.embed_text()))
        for record in element.chunks))


class ContentKeys(beam.PTransform):
    """``PCollection[DocumentChunks]`` -> ``PCollection[DocumentChunks]``: every chunk's
    ``content_key`` = hash(embedding signature, exactly what the embedder reads,
    ``embed_text()``). A ParDo: nothing is joined."""

    def __init__(self, signature: str) -> None:
        super().__init__()
        self.signature = signature

    def expand(self, elements: PCollection[DocumentChunks]) -> PCollection[DocumentChunks]:
        # Not beam.Map(fn, signature): that Map would hold its last element
        # (transforms/elementwise.py).
        return elements | "Key" >> beam.ParDo(MapWith(_with_content_keys, self.signature)).with_output_types(
            DocumentChunks)


def _with_late_keys(element: DocumentChunks, signature: str) -> DocumentChunks:
    text_hash = doc_hash(element.document.text) if element.chunks else ""
    return dataclasses.replace(element, chunks=tuple(
        dataclasses.replace(record, content_key=content_key(
            signature, f"late:{text_hash}:{record.start}:{record.end}"))
        for record in element.chunks))


class LateContentKeys(beam.PTransform):
    """``PCollection[DocumentChunks]`` -> ``PCollection[DocumentChunks]``: content keys for late
    chunking. A late vector reads the whole document, so its key is the document's text hash
    plus the chunk's span, not the chunk's own text. An edit anywhere in a document re-embeds
    all of its chunks; untouched documents are reused whole. A ParDo: the document is there."""

    def __init__(self, signature: str) -> None:
        super().__init__()
        self.signature = signature

    def expand(self, elements: PCollection[DocumentChunks]) -> PCollection[DocumentChunks]:
        return elements | "LateKey" >> beam.ParDo(MapWith(_with_late_keys, self.signature)).with_output_types(
            DocumentChunks)


class _ReusableVectors(beam.DoFn):
    """(content_key, {"new": [(doc_id, chunk_index, chunk_id)], "previous": [candidates]}) -> (doc_id,
    (chunk_index, vector)) for each chunk whose key has a trusted stored vector; counted as
    :class:`_AttachPrevious` counts."""

    def __init__(self) -> None:
        self.reused = progress_counter(*CHUNKS_REUSED)
        self.missing = Metrics.counter(NAMESPACE, "chunks_to_embed")
        self.rejected = Metrics.counter(*REUSE_REJECTED)

    def process(self, joined: tuple[str, dict[str, list]]):
        _, groups = joined
        candidates = next(iter(groups["previous"]), ())
        for doc_id, chunk_index, chunk_id in groups["new"]:
            found = _pick(candidates, chunk_id)
            if found is not None:
                self.reused.inc()
                yield doc_id, (chunk_index, found[2])
                continue
            if candidates:
                self.rejected.inc()
            self.missing.inc()


def _attach_found(joined: tuple[str, dict[str, list]]) -> Iterable[DocumentChunks]:
    _, groups = joined
    found = dict(groups["found"])
    for element in groups["element"]:
        yield dataclasses.replace(element, chunks=tuple(
            dataclasses.replace(record, embedding=found[record.chunk_index])
            if record.chunk_index in found else record
            for record in element.chunks))


def _chunk_refs(element: DocumentChunks) -> Iterable[tuple[str, tuple[str, int, str]]]:
    for record in element.chunks:
        yield record.content_key, (element.document.doc_id, record.chunk_index, record.chunk_id)


class ReuseForDocuments(beam.PTransform):
    """``PCollection[DocumentChunks]`` (content keys set) -> ``PCollection[DocumentChunks]``:
    each chunk whose key has a trusted vector in ``previous_files`` gets it as its
    ``embedding``; the others keep ``embedding=None`` (to embed). For late chunking, where the
    embed stage needs each chunk's document: only (key, doc_id, index) meet the previous
    vectors, and the vectors found go to their document (a join by doc_id with data from the
    previous run). Checks and counters as :class:`ReusePreviousEmbeddings`."""

    def __init__(self, previous_files: Sequence[str], dim: int, normalize: bool) -> None:
        super().__init__()
        self.previous_files = list(previous_files)
        self.dim, self.normalize = dim, normalize

    def expand(self, elements: PCollection[DocumentChunks]) -> PCollection[DocumentChunks]:
        previous = elements.pipeline | "Previous" >> _PreviousVectors(
            self.previous_files, self.dim, self.normalize)
        found = (
            {"new": elements | "KeyByContent" >> beam.FlatMap(_chunk_refs).with_output_types(
                tuple[str, tuple[str, int, str]]),
             "previous": previous}
            | "JoinPrevious" >> JoinByKey()
            | "Reusable" >> beam.ParDo(_ReusableVectors())
        )
        return (
            {"element": elements | "KeyByDocument" >> beam.Map(
                lambda e: (e.document.doc_id, e)).with_output_types(tuple[str, DocumentChunks]),
             "found": found}
            | "JoinDocument" >> JoinByKey()
            | "Attach" >> beam.FlatMap(_attach_found).with_output_types(DocumentChunks)
        )
