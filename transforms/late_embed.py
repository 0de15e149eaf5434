"""EMBED stage, late mode (``embed.mode: late``): chunk vectors pooled from the whole document.

Each chunk's vector is the mean of the contextual token vectors of its span, the model having
read the whole document (in overlapping windows when it is longer than the model's input); see
``chunkline.late``. The chunks of a document are brought together with their document by
``doc_id`` (CoGroupByKey), since one pass serves all of them. All model work is
``chunkline.late``'s; this module only adapts it to Beam.

    {"documents": kept, "chunks": chunks} | "Embed" >> LateEmbedChunks(EmbedOptions())
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.shared import Shared

from chunkline.embedder import EmbedOptions, load_model
from chunkline.late import LateChunker, LateOptions
from chunkline.records import ChunkRecord, Document
from transforms.counters import CHUNKS_EMBEDDED, TOKENS_EMBEDDED
from transforms.model_cache import local_model_dir

# The same namespace and counter names as the standard embed stage, so a run reports
# "tokens embedded" whichever mode made the vectors.
METRICS_NAMESPACE = CHUNKS_EMBEDDED.namespace


class _LateEmbedDocument(beam.DoFn):
    """(doc_id, {"documents": [Document], "chunks": [ChunkRecord, ...]}) -> the chunks with their
    late-chunked vectors, in chunk order."""

    def __init__(self, options: EmbedOptions, late: LateOptions, shared: Shared) -> None:
        self._options = options
        self._late = late
        self._shared = shared
        self._tokens = Metrics.counter(*TOKENS_EMBEDDED)
        self._chunks = Metrics.counter(*CHUNKS_EMBEDDED)
        self._documents = Metrics.counter(METRICS_NAMESPACE, "documents_embedded")
        self._windows = Metrics.counter(METRICS_NAMESPACE, "windows_read")

    def setup(self) -> None:
        # One model per worker process, shared by the DoFn instances of its threads (Beam's
        # Shared handle, as RunInference does it).
        self._chunker = self._shared.acquire(self._load, tag=repr((self._options, self._late)))

    def _load(self) -> LateChunker:
        local = dataclasses.replace(self._options, model=local_model_dir(self._options.model))
        return LateChunker(load_model(local), self._late)

    def process(
        self, element: tuple[str, dict[str, Iterable]]
    ) -> Iterator[ChunkRecord]:
        doc_id, grouped = element
        chunks = sorted(grouped["chunks"], key=lambda record: record.chunk_index)
        if not chunks:
            return  # a document that made no chunk (whitespace only): nothing to embed
        documents = list(grouped["documents"])
        if len(documents) != 1:
            # Ids are unique after dedupe; anything else is a wiring bug, not bad input.
            raise ValueError(
                f"late embedding needs exactly one document for doc_id {doc_id!r}, got "
                f"{len(documents)} for {len(chunks)} chunks"
            )
        text = documents[0].text
        read = self._chunker.read_spans(text, [(c.start, c.end) for c in chunks])
        self._tokens.inc(read.tokens_read)
        self._chunks.inc(len(chunks))
        self._documents.inc()
        self._windows.inc(read.windows)
        for record, vector in zip(chunks, read.vectors):
            # tolist(): Python floats for the fixed_size_list<float32> column, as in embed.py.
            yield dataclasses.replace(record, embedding=tuple(vector.tolist()))


def _by_doc_id(record: Document | ChunkRecord) -> tuple[str, Document | ChunkRecord]:
    return record.doc_id, record


class LateEmbedChunks(beam.PTransform):
    """``{"documents": PCollection[Document], "chunks": PCollection[ChunkRecord]}`` ->
    ``PCollection[ChunkRecord]``: every chunk with ``embedding`` set by late chunking.

    What is embedded is the *document's* tokens: the model reads ``document.text`` (in windows of
    ``late.window`` tokens when it is longer) and a chunk's vector is the normalized mean of the
    token vectors of ``text[start:end]``. A record's ``prefix`` (heading path), ``context`` and
    ``table_header`` are not read for the vector in this mode; they are not part of the document
    text, and the heading path is already in the model's view when the heading lies inside the
    window. Vectors are unit-norm float32 whatever ``options.normalize`` says;
    ``options.batch_size`` is not used (``late.batch_size`` windows go per forward pass).

    Counters (namespace ``chunkline.embed``): ``tokens_embedded`` (tokens the model read over all
    windows, special tokens included), ``chunks_embedded``, ``documents_embedded``,
    ``windows_read``.
    """

    def __init__(self, options: EmbedOptions = EmbedOptions(), late: LateOptions = LateOptions(),
                 label: str | None = None) -> None:
        super().__init__(label)
        self._options = options
        self._late = late

    def expand(self, inputs: dict[str, beam.PCollection]) -> beam.PCollection[ChunkRecord]:
        keyed = {
            "documents": inputs["documents"] | "KeyDocuments" >> beam.Map(_by_doc_id),
            "chunks": inputs["chunks"] | "KeyChunks" >> beam.Map(_by_doc_id),
        }
        return (
            keyed
            | "GroupByDocument" >> beam.CoGroupByKey()
            | "LateEmbed" >> beam.ParDo(
                _LateEmbedDocument(self._options, self._late, Shared())
            ).with_output_types(ChunkRecord)
        )
