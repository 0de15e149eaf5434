"""REUSE: join this run's chunks with a previous run's vectors by content key, inside the graph.

A nightly reindex of a corpus that changed a little should embed only what changed. Every chunk
carries ``content_key`` = hash(embedding signature, exact embedded text); the previous run's
chunk shards give (content_key -> embedding); a CoGroupByKey splits this run's chunks into those
whose vector can be reused and those that must be embedded. Documents gone from the corpus have
no chunks in this run, so their vectors simply do not come back.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput

from chunkline.records import ChunkRecord, content_key, doc_hash

NAMESPACE = "reindex"
PREVIOUS_COLUMNS = ["content_key", "chunk_id", "embedding"]


class ReuseOutputs(NamedTuple):
    reused: PCollection[ChunkRecord]   # embedding filled from the previous run
    missing: PCollection[ChunkRecord]  # still to embed


def _previous_entry(row: dict) -> tuple[str, tuple[str, tuple[float, ...]]]:
    return row["content_key"], (row["chunk_id"], tuple(row["embedding"]))


def _first_by_chunk_id(entries: Iterable[tuple[str, tuple[float, ...]]]) -> tuple[str, tuple[float, ...]]:
    # The same text in several chunks has one key and (up to float noise across batches) one
    # vector; taking the smallest chunk_id's keeps the choice independent of grouping order.
    return min(entries, key=lambda entry: entry[0])


class _AttachPrevious(beam.DoFn):
    def __init__(self) -> None:
        self.reused = Metrics.counter(NAMESPACE, "chunks_reused")
        self.missing = Metrics.counter(NAMESPACE, "chunks_to_embed")

    def process(self, joined: tuple[str, dict[str, list]]):
        _, groups = joined
        previous = list(groups["previous"])
        for record in groups["new"]:
            if previous:
                self.reused.inc()
                yield dataclasses.replace(record, embedding=previous[0][1])
            else:
                self.missing.inc()
                yield TaggedOutput("missing", record)


class ReusePreviousEmbeddings(beam.PTransform):
    """``PCollection[ChunkRecord]`` (content_key set) -> :class:`ReuseOutputs`.

    ``previous_chunks`` is the file pattern of a previous run's chunk shards (local or gs://),
    written with the same embedding signature in its keys; a key that is not there is missing.
    """

    def __init__(self, previous_chunks: str) -> None:
        super().__init__()
        self.previous_chunks = previous_chunks

    def expand(self, chunks: PCollection[ChunkRecord]) -> ReuseOutputs:
        previous = (
            chunks.pipeline
            | "ReadPrevious" >> beam.io.ReadFromParquet(self.previous_chunks, columns=PREVIOUS_COLUMNS)
            | "KeyPrevious" >> beam.Map(_previous_entry)
            | "OnePerKey" >> beam.CombinePerKey(_first_by_chunk_id)
        )
        keyed = chunks | "KeyByContent" >> beam.Map(lambda r: (r.content_key, r))
        split = (
            {"new": keyed, "previous": previous}
            | "JoinPrevious" >> beam.CoGroupByKey()
            | "Attach" >> beam.ParDo(_AttachPrevious()).with_outputs("missing", main="reused")
        )
        return ReuseOutputs(split.reused, split.missing)


class _LateKey(beam.DoFn):
    def __init__(self, signature: str) -> None:
        self.signature = signature

    def process(self, joined: tuple[str, dict[str, list]]):
        _, groups = joined
        documents = list(groups["documents"])
        text_hash = doc_hash(documents[0].text) if documents else ""
        for record in groups["chunks"]:
            span = f"late:{text_hash}:{record.start}:{record.end}"
            yield dataclasses.replace(record, content_key=content_key(self.signature, span))


class LateContentKeys(beam.PTransform):
    """Content keys for late chunking: a late vector reads the whole document, so its key is the
    document's text hash plus the chunk's span, not the chunk's own text. An edit anywhere in a
    document re-embeds all of its chunks; untouched documents are reused whole."""

    def __init__(self, signature: str) -> None:
        super().__init__()
        self.signature = signature

    def expand(self, inputs: dict[str, PCollection]) -> PCollection[ChunkRecord]:
        return (
            {
                "documents": inputs["documents"] | "DocById" >> beam.Map(lambda d: (d.doc_id, d)),
                "chunks": inputs["chunks"] | "ChunkById" >> beam.Map(lambda r: (r.doc_id, r)),
            }
            | "JoinDocument" >> beam.CoGroupByKey()
            | "LateKey" >> beam.ParDo(_LateKey(self.signature))
        )
