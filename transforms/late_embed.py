"""EMBED stage, late mode (``embed.mode: late``): chunk vectors pooled from the whole document.

Each chunk's vector is the mean of the contextual token vectors of its span, the model having
read the whole document (in overlapping windows when it is longer than the model's input); see
``chunkline.late``. The chunks travel with their document (``DocumentChunks``, from the split
stage), so one pass over the document serves all of them and nothing is joined. All model work
is ``chunkline.late``'s; this module only adapts it to Beam.

    documents_with_chunks | "Embed" >> LateEmbedChunks(EmbedOptions())
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.shared import Shared

from chunkline.embedder import EmbedOptions, load_model
from chunkline.late import LateChunker, LateOptions
from chunkline.records import DocumentChunks
from chunkline.transforms import coders  # noqa: F401 - registers DocumentChunksCoder
from chunkline.transforms.progress import progress_counter
from chunkline.transforms.counters import CHUNKS_EMBEDDED, TOKENS_EMBEDDED
from chunkline.transforms.model_cache import local_model_dir

# The same namespace and counter names as the standard embed stage, so a run reports
# "tokens embedded" whichever mode made the vectors.
METRICS_NAMESPACE = CHUNKS_EMBEDDED.namespace


class _LateEmbedDocument(beam.DoFn):
    """A document with its chunks -> the same, every chunk without a vector given its
    late-chunked vector (a chunk that has one, reused from a previous run, is left as it is)."""

    def __init__(self, options: EmbedOptions, late: LateOptions, shared: Shared) -> None:
        self._options = options
        self._late = late
        self._shared = shared
        self._tokens = progress_counter(*TOKENS_EMBEDDED)
        self._chunks = progress_counter(*CHUNKS_EMBEDDED)
        self._documents = Metrics.counter(METRICS_NAMESPACE, "documents_embedded")
        self._windows = Metrics.counter(METRICS_NAMESPACE, "windows_read")

    def setup(self) -> None:
        # One model per worker process, shared by the DoFn instances of its threads (Beam's
        # Shared handle, as RunInference does it).
        self._chunker = self._shared.acquire(self._load, tag=repr((self._options, self._late)))

    def _load(self) -> LateChunker:
        local = dataclasses.replace(self._options, model=local_model_dir(self._options.model))
        return LateChunker(load_model(local), self._late)

    def process(self, element: DocumentChunks) -> Iterator[DocumentChunks]:
        todo = [record for record in element.chunks if record.embedding is None]
        if not todo:
            # No chunk (a whitespace-only document), or every vector reused: nothing to read.
            yield element
            return
        read = self._chunker.read_spans(element.document.text, [(c.start, c.end) for c in todo])
        self._tokens.inc(read.tokens_read)
        self._chunks.inc(len(todo))
        self._documents.inc()
        self._windows.inc(read.windows)
        # tolist(): Python floats for the fixed_size_list<float32> column, as in embed.py.
        vectors = {c.chunk_index: tuple(v.tolist()) for c, v in zip(todo, read.vectors, strict=True)}
        yield dataclasses.replace(element, chunks=tuple(
            dataclasses.replace(record, embedding=vectors[record.chunk_index])
            if record.chunk_index in vectors else record
            for record in element.chunks))


class LateEmbedChunks(beam.PTransform):
    """``PCollection[DocumentChunks]`` -> ``PCollection[DocumentChunks]``: every chunk with
    ``embedding`` set by late chunking (chunks that already have one, reused from a previous
    run, keep it and are not counted). A ParDo: each element holds its document.

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

    def expand(self, elements: beam.PCollection[DocumentChunks]) -> beam.PCollection[DocumentChunks]:
        return elements | "LateEmbed" >> beam.ParDo(
            _LateEmbedDocument(self._options, self._late, Shared())
        ).with_output_types(DocumentChunks)
