"""Config -> the library's options: the one place a validated config becomes the objects the
stages are built with."""

from __future__ import annotations

from chunkline.context.options import ContextOptions
from chunkline.embedder import EmbedOptions
from chunkline.readers import ReadOptions
from pipeline.config import Config


def read_options(config: Config) -> ReadOptions:
    return config.input.options()


def embed_options(config: Config) -> EmbedOptions | None:
    if config.embed is None:
        return None
    return config.embed.options()


def context_options(config: Config) -> ContextOptions | None:
    return config.context.options() if config.context is not None else None


