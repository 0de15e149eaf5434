"""EMBED stage: fill every ChunkRecord's ``embedding`` with a sentence-transformers model.

The model is loaded once per worker process by RunInference (its shared handle), never per
bundle or element, and only when the first batch reaches it: a rerun whose every chunk reuses
its vector never imports sentence-transformers nor reads the weights (5.5 s of a process on
this machine). Batches of chunks go through it together. All model work is
``chunkline.embedder``'s; this module only adapts it to Beam.

    chunks | "Embed" >> EmbedChunks(EmbedOptions(model="all-MiniLM-L6-v2", dtype="bfloat16"))
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, RunInference

from chunkline.embedder import EmbedOptions, embed_by_tokens, load_model
from chunkline.records import ChunkRecord
from chunkline.transforms.progress import progress_counter
from chunkline.transforms.counters import CHUNKS_EMBEDDED, TOKENS_EMBEDDED, TOKENS_PADDED
from chunkline.transforms.model_cache import local_model_dir

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

METRICS_NAMESPACE = CHUNKS_EMBEDDED.namespace
# Texts handed to the model per call: sorted there by exact token count and cut into passes by
# padded tokens, so a wider window forms fewer, fuller passes. Sixteen batches: on 1,536 real
# chunks, bfloat16 took 19 % less CPU than with windows of four (20 passes instead of 35),
# float32 15 % less; a bundle holds back at most 16 x batch_size chunks for it.
LENGTH_WINDOW = 16


class OnFirstUse:
    """A model loaded by the first caller that needs it, once, whichever thread asks first
    (RunInference shares one handle between a worker's threads)."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load, self._model, self._lock = load, None, threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def get(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model


class SentenceTransformerHandler(ModelHandler[str, np.ndarray, OnFirstUse]):
    """RunInference model handler: texts in, float32 vectors (``[dim]`` each) out, in order.

    Each call gets ``LENGTH_WINDOW * options.batch_size`` texts (fewer only at a bundle's end),
    tokenizes them once, sorts them by token count and runs them as passes of at most
    ``options.pass_tokens`` padded tokens (``chunkline.embedder.embed_by_tokens``): batching by
    length without holding a whole bundle back. The window is fixed because Beam's
    adaptive BatchElements would start at one text per call and ramp up, and a model's best
    batch size is a property of the model and the device, known up front.
    """

    def __init__(self, options: EmbedOptions) -> None:
        super().__init__()
        self._options = options
        self._tokens = progress_counter(*TOKENS_EMBEDDED)
        self._padded = Metrics.counter(*TOKENS_PADDED)
        self._truncated = Metrics.counter(METRICS_NAMESPACE, "texts_truncated")

    @property
    def options(self) -> EmbedOptions:
        return self._options

    def load_model(self) -> OnFirstUse:
        # RunInference calls this in setup, before any element: deferred to the first batch.
        return OnFirstUse(self._load_now)

    def _load_now(self) -> "SentenceTransformer":
        # A gs:// (any Beam filesystem) model is copied to this worker's disk once, here in the
        # worker, where the model is needed; the driver only read its config files.
        local = dataclasses.replace(self._options, model=local_model_dir(self._options.model))
        return load_model(local)

    def run_inference(
        self,
        batch: Sequence[str],
        model: OnFirstUse,
        inference_args: Optional[dict[str, Any]] = None,
    ) -> Iterable[np.ndarray]:
        self.validate_inference_args(inference_args)
        transformer: SentenceTransformer = model.get()
        # Each text tokenized once, passes cut by padded tokens (chunkline.embedder).
        vectors, stats = embed_by_tokens(transformer, batch, self._options)
        # Tokens the model read (special tokens included), the positions it computed, and
        # texts cut at max_seq_length: a truncated chunk is embedded from its beginning only,
        # so it is counted, not hidden.
        self._tokens.inc(stats.tokens)
        self._padded.inc(stats.padded)
        self._truncated.inc(stats.truncated)
        return list(vectors)

    def validate_inference_args(self, inference_args: Optional[dict[str, Any]]) -> None:
        if inference_args:
            raise ValueError(
                f"SentenceTransformerHandler takes no inference_args (got {sorted(inference_args)})"
                f"; set EmbedOptions instead"
            )

    def get_num_bytes(self, batch: Sequence[str]) -> int:
        return sum(len(text.encode("utf-8")) for text in batch)

    def get_metrics_namespace(self) -> str:
        return METRICS_NAMESPACE

    def batch_elements_kwargs(self) -> Mapping[str, Any]:
        window = LENGTH_WINDOW * self._options.batch_size
        return {"min_batch_size": window, "max_batch_size": window}

    def share_model_across_processes(self) -> bool:
        # A small model: one copy per process costs less than cross-process calls would.
        return False


class _AttachEmbedding(beam.DoFn):
    """(chunk, vector) -> the chunk with its embedding, a new record."""

    def __init__(self) -> None:
        self._chunks = progress_counter(*CHUNKS_EMBEDDED)

    def process(self, element: tuple[ChunkRecord, np.ndarray]) -> Iterator[ChunkRecord]:
        record, vector = element
        self._chunks.inc()
        # tolist() gives Python floats in one C pass: what the Parquet writer's
        # fixed_size_list<float32> column takes, and hashable like the rest of the record.
        yield dataclasses.replace(record, embedding=tuple(vector.tolist()))


def _keyed_text(record: ChunkRecord) -> tuple[ChunkRecord, str]:
    return record, record.embed_text()


@beam.typehints.with_input_types(ChunkRecord)
@beam.typehints.with_output_types(ChunkRecord)
class EmbedChunks(beam.PTransform[beam.PCollection[ChunkRecord], beam.PCollection[ChunkRecord]]):
    """Chunks -> the same chunks with ``embedding`` set to the model's vector of
    ``record.embed_text()`` (heading prefix + text), float32 values as a tuple of floats.

    Each chunk is its own key through RunInference (KeyedModelHandler), so the vector comes
    back attached to its record with no join. BatchElements hands the handler windows of
    ``LENGTH_WINDOW`` batches in arrival order (bounded memory, no shuffle); inside a window the
    model sorts by length, so passes pad little (Beam's SortAndBatchElements would hold a whole
    bundle instead).
    """

    def __init__(self, options: EmbedOptions = EmbedOptions(), label: str | None = None) -> None:
        super().__init__(label)
        self._options = options

    def expand(self, chunks: beam.PCollection[ChunkRecord]) -> beam.PCollection[ChunkRecord]:
        handler: KeyedModelHandler[ChunkRecord, str, np.ndarray, OnFirstUse] = (
            KeyedModelHandler(SentenceTransformerHandler(self._options)))
        return (
            chunks
            | "KeyByChunk" >> beam.Map(_keyed_text).with_output_types(tuple[ChunkRecord, str])
            | "RunInference" >> RunInference(handler)
            | "AttachEmbedding" >> beam.ParDo(_AttachEmbedding()).with_output_types(ChunkRecord)
        )
