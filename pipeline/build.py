"""Assemble the job graph: read -> dedupe -> split -> embed -> write, from a validated config."""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from chunkline.embedder import EmbedOptions
from chunkline.records import (
    REJECTED,
    ChunkRecord,
    DocumentStatus,
    Rejected,
    chunk_schema,
    content_key,
    document_schema,
    rejected_schema,
)
from pipeline.config import Config
from pipeline.options import context_options, embed_options, read_options
from pipeline.plan import Plan
from transforms.clean import CleanDocuments, RemoveBoilerplate
from transforms.dedupe import Dedupe, UniqueRejectedIds
from transforms.read import ReadDocuments
from transforms.reuse import LateContentKeys, ReusePreviousEmbeddings
from transforms.split import SplitDocuments
from transforms.write import WriteParquetShards


def _rejected_status(record: Rejected) -> DocumentStatus:
    return DocumentStatus(record.doc_id, record.uri, "", "", REJECTED, None)


def context_cache_dir(config: Config) -> str:
    """Next to the index, shared by every run that writes there: a rerun pays for no header twice."""
    return FileSystems.join(config.output.path, "_cache", "context")


class _EmbedTheirDocuments(beam.PTransform):
    """Late chunking needs each chunk's whole document beside it."""

    def __init__(self, options: EmbedOptions, late, documents) -> None:
        super().__init__()
        self.options, self.late, self.documents = options, late, documents

    def expand(self, chunks):
        from transforms.late_embed import LateEmbedChunks

        return {"documents": self.documents, "chunks": chunks} | LateEmbedChunks(self.options, self.late)


def _embedder(config: Config, options: EmbedOptions, documents) -> beam.PTransform:
    if config.embed.mode == "late":
        late = config.embed.late.options()
        return _EmbedTheirDocuments(options, late, documents)
    from transforms.embed import EmbedChunks  # torch loads only when embedding is on

    return EmbedChunks(options)


def _with_content_key(record: ChunkRecord, signature: str) -> ChunkRecord:
    return dataclasses.replace(record, content_key=content_key(signature, record.embed_text()))


def build(pipeline: beam.Pipeline, config: Config, plan: Plan) -> None:
    """Add the whole job to ``pipeline``; every document read ends in the documents table."""
    # The output root may sit inside the input pattern (out/ under the corpus): never read back.
    read = pipeline | "Read" >> ReadDocuments(
        config.input.pattern, read_options(config),
        follow_symlinks=config.input.follow_symlinks, exclude=(config.output.path,))
    documents, rejected_parts = read.documents, [read.rejected]
    # Clean, then drop corpus boilerplate, then dedupe: duplicates are judged on the text that
    # is chunked, and the documents table stores exactly the text chunk offsets refer to.
    if config.clean is not None:
        cleaned = documents | "Clean" >> CleanDocuments(config.clean.options())
        documents = cleaned.documents
        rejected_parts.append(cleaned.rejected)
    if config.boilerplate is not None:
        stripped = documents | "Boilerplate" >> RemoveBoilerplate(
            config.boilerplate.options())
        documents = stripped.documents
        rejected_parts.append(stripped.rejected)
    near = config.dedupe.near
    deduped = documents | "Dedupe" >> Dedupe(
        config.dedupe.exact, near.options() if near is not None else None)
    semantic = None
    if config.split.mode == "semantic":
        semantic = config.split.semantic.options()
    chunks = deduped["kept"] | "Split" >> SplitDocuments(
        plan.tokenizer_spec,
        plan.max_tokens,
        config.split.overlap,
        config.split.markdown,
        heading_reserve=config.split.heading_reserve,
        code=config.split.code,
        semantic=semantic,
        semantic_model=embed_options(config) if semantic is not None else None,
        max_chars=config.split.max_chars,
    )
    kept = deduped["kept"]
    if config.context is not None:
        from transforms.context import ContextualHeaders  # the LLM SDKs load only when on

        chunks = {"documents": kept, "chunks": chunks} | "Context" >> ContextualHeaders(
            context_options(config), context_cache_dir(config), plan.run_dir.rstrip("/").rsplit("/", 1)[-1],
            plan.tokenizer_spec,
        )
    late = config.embed is not None and config.embed.mode == "late"
    if late:
        chunks = {"documents": kept, "chunks": chunks} | "ContentKey" >> LateContentKeys(
            plan.embedding_signature)
    else:
        chunks = chunks | "ContentKey" >> beam.Map(_with_content_key, plan.embedding_signature)
    options = embed_options(config)
    if options is not None:
        to_embed = chunks
        if plan.previous_files:
            reuse = chunks | "Reuse" >> ReusePreviousEmbeddings(
                plan.previous_files, plan.dim, plan.normalize)
            to_embed = reuse.missing
        embedded = to_embed | "Embed" >> _embedder(config, options, kept)
        chunks = ((reuse.reused, embedded) | "ReusedAndEmbedded" >> beam.Flatten()
                  if plan.previous_files else embedded)

    rejected = (
        (deduped["statuses"], (*rejected_parts, deduped["rejected"]) | "AllRejected" >> beam.Flatten())
        | "UniqueIds" >> UniqueRejectedIds()
    )
    statuses = (
        deduped["statuses"],
        rejected | "RejectedStatus" >> beam.Map(_rejected_status),
    ) | "AllStatuses" >> beam.Flatten()

    chunks | "WriteChunks" >> WriteParquetShards(
        plan.run_dir, "chunks", chunk_schema(plan.dim), config.output.chunk_shards,
        shard_key=lambda r: r.doc_id, sort_key=lambda r: (r.doc_id, r.chunk_index),
    )
    statuses | "WriteDocuments" >> WriteParquetShards(
        plan.run_dir, "documents", document_schema(), 1,
        shard_key=lambda r: r.doc_id, sort_key=lambda r: (r.doc_id, r.uri, r.status),
    )
    rejected | "WriteRejected" >> WriteParquetShards(
        plan.run_dir, "rejected", rejected_schema(), 1,
        shard_key=lambda r: r.doc_id, sort_key=lambda r: (r.doc_id, r.uri, r.reason),
    )
