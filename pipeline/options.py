"""Config -> the library's options: the one place a validated config becomes the objects the
stages are built with."""

from __future__ import annotations

from chunkline.embedder import EmbedOptions
from chunkline.readers import ReadOptions
from pipeline.config import Config


def read_options(config: Config) -> ReadOptions:
    source = config.input
    return ReadOptions(
        jsonl_id_field=source.jsonl.id_field,
        jsonl_text_field=source.jsonl.text_field,
        jsonl_metadata_field=source.jsonl.metadata_field,
        parquet_id_column=source.parquet.id_column,
        parquet_text_column=source.parquet.text_column,
        parquet_metadata_columns=tuple(source.parquet.metadata_columns),
        max_document_bytes=source.max_document_bytes,
    )


def embed_options(config: Config) -> EmbedOptions | None:
    if config.embed is None:
        return None
    return config.embed.options()


def context_options(config: Config):  # -> ContextOptions | None
    from chunkline.context import ContextOptions

    return ContextOptions(**config.context.model_dump()) if config.context is not None else None


