"""CONTEXT stage: each chunk gets an LLM-written header situating it in its document
(``ChunkRecord.context``), prepended to what is embedded and to ``search_text``; cached across
runs so that no header is ever paid for twice.

All prompt, client, retry and fitting work is ``chunkline.context``'s; this module adapts it to
Beam and keeps the cross-run cache. The graph::

    documents with their chunks ─ PrepareWork ─┐ (doc key: provider, model, prompt, doc hash)
                                  └ no chunk ──┼──────────────────────────────────────┐
                                               ├ JoinCache ─ WriteHeaders ─ elements ─┴ AllElements
    cache_dir/context-*.parquet ─ MatchCache ─ ReadCache ┘              └ new entries ─ WriteCache

Each element already holds a document's text and its chunks (split emits them together), so one
join on the document key brings in its cached headers: hits are answered from the cache, and the
misses of one document go to the LLM together, back to back, with the identical document prefix
(the provider's prompt cache holds it). One shuffle, against data that truly comes from
elsewhere (the cache files); the document is never joined with its own chunks again.

    elements = elements | "Context" >> ContextualHeaders(
        ContextOptions(provider="anthropic", model="claude-haiku-4-5"),
        cache_dir="out/_cache/context", run_tag=run_id, tokenizer_spec=plan.tokenizer_spec)
"""

from __future__ import annotations

import dataclasses
import logging
import re
from concurrent.futures import FIRST_COMPLETED, Future, wait
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.utils import shared
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.context import (
    CACHED, COUNTERS, METRICS_NAMESPACE, OK, ContextOptions, HeaderResult, HeaderWriter,
    cache_schema, doc_cache_key, entry_key, fit_header, make_client,
    resolve_api_key, text_hash,
)
from chunkline.records import ChunkRecord, DocumentChunks, doc_hash
from chunkline.sizers import get_tokenizer
from chunkline.transforms.coders import JoinByKey
from chunkline.transforms.model_cache import local_tokenizer_spec
from chunkline.transforms.write import shard_of

log = logging.getLogger("chunkline.context")

_NO_CHUNK = "no_chunk"
_NEW_ENTRIES = "new_entries"
_CACHE_FILE = "context-*.parquet"


def _counters() -> dict[str, Any]:
    return {name: Metrics.counter(METRICS_NAMESPACE, name) for name in COUNTERS}


class _PrepareWork(beam.DoFn):
    """A document with its chunks -> (doc key, (doc hash, element)), counting the chunks that
    enter the stage (``chunks``); an element without chunks goes around the stage (tagged
    ``no_chunk``): there is nothing to ask, and its text need not cross the cache join."""

    def __init__(self, options: ContextOptions) -> None:
        self._options = options
        self._chunks = Metrics.counter(METRICS_NAMESPACE, "chunks")

    def process(self, element: DocumentChunks):
        if not element.chunks:
            yield beam.pvalue.TaggedOutput(_NO_CHUNK, element)
            return
        self._chunks.inc(len(element.chunks))
        digest = doc_hash(element.document.text)
        o = self._options
        yield doc_cache_key(o.provider, o.model, o.prompt_version, digest), (digest, element)


class _ReadCacheFile(beam.DoFn):
    """A cache file -> (doc key, (chunk hash, answer)) for this provider, model and prompt. An
    unreadable file (a crashed writer elsewhere, a foreign file) is skipped with a warning and
    counted: its headers are simply written again."""

    def __init__(self, options: ContextOptions) -> None:
        self._options = options
        self._unreadable = Metrics.counter(METRICS_NAMESPACE, "cache_files_unreadable")

    def process(self, metadata):
        o = self._options
        path = metadata.path
        columns = ["provider", "model", "prompt_version", "doc_hash", "chunk_hash", "context"]
        try:
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                batches = list(pq.ParquetFile(handle).iter_batches(columns=columns))
        except Exception as exc:  # noqa: BLE001 - the cache is an optimisation, never a failure
            log.warning("context: cache file %s is unreadable (%s); skipped", path, type(exc).__name__)
            self._unreadable.inc()
            return
        for batch in batches:
            for row in batch.to_pylist():
                if (row["provider"], row["model"], row["prompt_version"]) != (o.provider, o.model, o.prompt_version):
                    continue
                key = doc_cache_key(o.provider, o.model, o.prompt_version, row["doc_hash"])
                yield key, (row["chunk_hash"], row["context"])


class _Pending(NamedTuple):
    future: Future[list[HeaderResult]]
    doc_hash: str
    hashes: list[str]  # the chunk hashes submitted, in the order of the future's results
    # Every element waiting on them, each chunk either answered (a record) or its hash (a miss).
    elements: list[tuple[DocumentChunks, list[ChunkRecord | str]]]
    timestamp: Any
    window: Any


class _WriteHeaders(beam.DoFn):
    """(doc key, {work, cache}) -> each element with its chunks' ``context`` and
    ``context_status`` set, and the new cache rows (tagged ``new_entries``).

    Hits are answered at once (an element with no miss goes on at once). A document's misses are
    submitted to a HeaderWriter and the DoFn moves on to the next document, so requests of
    several documents are in flight; finished documents are emitted as they complete and the
    rest at the end of the bundle. At most ``4 * max_concurrency`` documents wait per DoFn
    instance (bounded memory). Counters are incremented here, on the DoFn's thread: Beam's
    metrics container is per thread, so an increment from a pool thread would be lost.

    One HeaderWriter per worker process, shared by the DoFn instances there (a runner such as
    Dataflow runs one per harness thread): ``max_concurrency``, the failure budget and a
    server's retry-after then hold for the whole worker, not per thread.
    """

    def __init__(self, options: ContextOptions, tokenizer_spec: str, run_tag: str) -> None:
        self._options = options
        self._tokenizer_spec = tokenizer_spec
        self._run_tag = run_tag
        self._max_pending = 4 * options.max_concurrency
        self._c = _counters()
        # Its key is made here, once per constructed stage: a new pipeline gets a new writer
        # (and a fresh failure budget) even in the same process.
        self._shared = shared.Shared()

    def setup(self) -> None:
        self._writer = self._shared.acquire(self._new_writer)
        self._tokenizer = get_tokenizer(local_tokenizer_spec(self._tokenizer_spec))

    def _new_writer(self) -> HeaderWriter:
        # The key is read here, on the worker, from its environment: never a constructor
        # argument, so it is never pickled into the graph; never logged.
        client = make_client(self._options, resolve_api_key(self._options))
        return HeaderWriter(client, self._options)

    def start_bundle(self) -> None:
        self._pending: list[_Pending] = []

    def process(self, element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
        _, groups = element
        cached: dict[str, str] = {}
        for chunk_hash, answer in groups["cache"]:
            cached.setdefault(chunk_hash, answer)
        misses: dict[str, str] = {}  # chunk hash -> chunk text, in document order
        waiting: list[tuple[DocumentChunks, list[ChunkRecord | str]]] = []
        document = digest = None
        # Several work items share a key only when documents have the same (normalised) text:
        # one set of requests serves them all.
        for item_hash, work in groups["work"]:
            if document is None:
                document, digest = work.document.text, item_hash
            answered: list[ChunkRecord | str] = []
            for chunk in work.chunks:
                chunk_hash = text_hash(chunk.text)
                answer = cached.get(chunk_hash)
                if answer is not None:
                    self._c["chunks_cached"].inc()
                    answered.append(dataclasses.replace(
                        chunk, context=self._fit(answer), context_status=CACHED))
                else:
                    misses.setdefault(chunk_hash, chunk.text)
                    answered.append(chunk_hash)
            if all(isinstance(a, ChunkRecord) for a in answered):
                yield dataclasses.replace(work, chunks=tuple(answered))
            else:
                waiting.append((work, answered))
        if misses and document is not None and digest is not None:  # both set with the first item
            future = self._writer.submit(document, list(misses.values()))
            self._pending.append(_Pending(future, digest, list(misses), waiting, timestamp, window))
        yield from self._emit(keep=self._max_pending)

    def finish_bundle(self):
        yield from self._emit(keep=0)

    def teardown(self) -> None:
        # Other instances may still use the shared writer: drop this reference only; the last
        # one gone lets it (its threads and connections) be collected.
        self._writer = None

    def _fit(self, answer: str) -> str:
        return fit_header(answer, self._tokenizer, self._options.max_header_tokens)

    def _emit(self, keep: int):
        """Emit every finished document; wait for one while more than ``keep`` are pending."""
        while self._pending:
            ready = [p for p in self._pending if p.future.done()]
            if not ready:
                if len(self._pending) <= keep:
                    return
                wait([p.future for p in self._pending], return_when=FIRST_COMPLETED)
                continue
            for pending in ready:
                self._pending.remove(pending)
                yield from self._finish(pending)

    def _finish(self, pending: _Pending):
        o = self._options
        results = dict(zip(pending.hashes, pending.future.result(), strict=True))
        windows = (pending.window,)
        for chunk_hash, result in results.items():
            self._c["requests"].inc(result.requests)
            self._c["retries"].inc(result.retries)
            self._c["input_tokens"].inc(result.usage.input_tokens)
            self._c["cached_input_tokens"].inc(result.usage.cached_input_tokens)
            self._c["cache_write_tokens"].inc(result.usage.cache_write_tokens)
            self._c["output_tokens"].inc(result.usage.output_tokens)
            if result.ok:  # failures are never cached: a later run tries again
                row = {
                    "key": entry_key(o.provider, o.model, o.prompt_version, pending.doc_hash, chunk_hash),
                    "provider": o.provider, "model": o.model,
                    "prompt_version": o.prompt_version, "doc_hash": pending.doc_hash,
                    "chunk_hash": chunk_hash, "context": result.text, "run_tag": self._run_tag,
                }
                yield beam.pvalue.TaggedOutput(_NEW_ENTRIES, WindowedValue(row, pending.timestamp, windows))
        fitted: dict[str, str] = {}
        for work, answered in pending.elements:
            chunks = []
            for chunk, item in zip(work.chunks, answered, strict=True):
                if isinstance(item, ChunkRecord):  # answered from the cache
                    chunks.append(item)
                    continue
                result = results[item]
                if result.ok:
                    self._c["chunks_ok"].inc()
                    if item not in fitted:
                        fitted[item] = self._fit(result.text)
                    chunks.append(dataclasses.replace(chunk, context=fitted[item], context_status=OK))
                else:
                    self._c["chunks_failed"].inc()
                    chunks.append(dataclasses.replace(chunk, context="", context_status=result.status))
            yield WindowedValue(dataclasses.replace(work, chunks=tuple(chunks)), pending.timestamp, windows)


class _WriteCacheShard(beam.DoFn):
    """(shard, rows) -> one new Parquet file of cache entries (none for an empty shard), written
    under a temporary name and renamed, so a reader never sees half a file. The name is fixed by
    run tag and shard: a retried bundle overwrites its own file."""

    def __init__(self, cache_dir: str, run_tag: str, shards: int) -> None:
        self._cache_dir = cache_dir
        self._run_tag = run_tag
        self._shards = shards

    def process(self, element: tuple[int, Iterable[dict[str, Any]]]) -> Iterator[str]:
        index, rows = element
        unique = {row["key"]: row for row in rows}
        if not unique:
            return
        table = pa.Table.from_pylist([unique[k] for k in sorted(unique)], schema=cache_schema())
        path = FileSystems.join(
            self._cache_dir, f"context-{self._run_tag}-{index:05d}-of-{self._shards:05d}.parquet")
        temporary = path + ".tmp"
        with FileSystems.create(temporary, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            pq.write_table(table, handle, compression="zstd")
        if FileSystems.exists(path):
            FileSystems.delete([path])
        FileSystems.rename([temporary], [path])
        yield path


@beam.typehints.with_input_types(DocumentChunks)
@beam.typehints.with_output_types(DocumentChunks)
class ContextualHeaders(beam.PTransform):
    """``PCollection[DocumentChunks]`` -> ``PCollection[DocumentChunks]``: every element, with
    every one of its chunks, each with ``context`` (cut to ``options.max_header_tokens`` tokens
    of ``tokenizer_spec``, separator included) and ``context_status``: ``ok`` (written now),
    ``cached`` (an earlier run's, no request) or ``failed: <reason>`` (no header; the chunk
    goes on without one). Counters (namespace ``context``): ``chunks`` in = ``chunks_ok`` +
    ``chunks_cached`` + ``chunks_failed``, requests, retries and token usage.

    cache_dir: where headers are kept across runs (local or gs://), e.g.
        ``<output>/_cache/context``. Every ``context-*.parquet`` there is read; the headers
        written in this run go to new files ``context-<run_tag>-SSSSS-of-NNNNN.parquet``.
    run_tag: unique per run (the run id), ``[A-Za-z0-9._-]+``.
    tokenizer_spec: the split (embedder) tokenizer the reserve is counted in.
    cache_shards: at most this many new cache files per run (shards with no entries are not
        written, so a rerun with nothing new writes nothing).
    """

    def __init__(self, options: ContextOptions, cache_dir: str, run_tag: str,
                 tokenizer_spec: str, cache_shards: int = 4, label: str | None = None) -> None:
        super().__init__(label)
        if not re.fullmatch(r"[A-Za-z0-9._-]+", run_tag or ""):
            raise ValueError(f"ContextualHeaders.run_tag must match [A-Za-z0-9._-]+, got {run_tag!r}")
        if cache_shards < 1:
            raise ValueError(f"ContextualHeaders.cache_shards must be >= 1, got {cache_shards}")
        self._options = options
        self._cache_dir = cache_dir
        self._run_tag = run_tag
        self._tokenizer_spec = tokenizer_spec
        self._cache_shards = cache_shards

    def expand(self, elements: beam.PCollection[DocumentChunks]) -> beam.PCollection[DocumentChunks]:
        o = self._options
        # Typed, so the elements cross JoinCache with their coder (the untyped side output
        # carries the elements without chunks, which cross no shuffle).
        work = elements | "PrepareWork" >> beam.ParDo(_PrepareWork(o)).with_output_types(
            tuple[str, tuple[str, DocumentChunks]]).with_outputs(_NO_CHUNK, main="work")
        cache = (
            elements.pipeline
            | "CachePattern" >> beam.Create([FileSystems.join(self._cache_dir, _CACHE_FILE)])
            # An empty or missing cache directory is the first run, not an error.
            | "MatchCache" >> fileio.MatchAll(fileio.EmptyMatchTreatment.ALLOW)
            | "ReadCache" >> beam.ParDo(_ReadCacheFile(o)).with_output_types(tuple[str, tuple[str, str]])
        )
        written = (
            {"work": work.work, "cache": cache}
            | "JoinCache" >> JoinByKey()
            | "WriteHeaders" >> beam.ParDo(
                _WriteHeaders(o, self._tokenizer_spec, self._run_tag)
            ).with_outputs(_NEW_ENTRIES, main="elements")
        )
        shards = self._cache_shards
        (
            written[_NEW_ENTRIES]
            | "ShardEntries" >> beam.Map(lambda row: (shard_of(row["key"], shards), row))
            | "GroupEntries" >> beam.GroupByKey()
            | "WriteCache" >> beam.ParDo(_WriteCacheShard(self._cache_dir, self._run_tag, shards))
        )
        return (written.elements, work[_NO_CHUNK]) | "AllElements" >> beam.Flatten()
