"""Keys and rows of the cross-run header cache: a header is paid for once per (provider, model,
prompt version, document, chunk text), whatever run asks for it again.

    key = cache_key("anthropic", "claude-haiku-4-5", "v1", doc_hash(document_text), chunk_text)
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa


def text_hash(text: str) -> str:
    """sha256 hex of the exact text (UTF-8; lone surrogates kept, as the rest of chunkline)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def doc_cache_key(provider: str, model: str, prompt_version: str, doc_hash: str) -> str:
    """Key of one document's headers under one provider, model and prompt: the unit the cache is
    joined on (every entry of a document meets its chunks in one group)."""
    return text_hash(json.dumps([provider, model, prompt_version, doc_hash]))


def cache_key(provider: str, model: str, prompt_version: str, doc_hash: str, chunk_text: str) -> str:
    """Key of one cached header: (provider, model, prompt version, document hash, chunk text
    hash), sha256. ``doc_hash`` is ``chunkline.records.doc_hash`` of the document text."""
    return entry_key(provider, model, prompt_version, doc_hash, text_hash(chunk_text))


def entry_key(provider: str, model: str, prompt_version: str, doc_hash: str, chunk_hash: str) -> str:
    """:func:`cache_key` from the chunk text's hash (what a cache row holds)."""
    return text_hash(json.dumps([provider, model, prompt_version, doc_hash, chunk_hash]))


def cache_schema() -> pa.Schema:
    """Rows of the cross-run header cache. ``context`` is the model's answer with whitespace
    collapsed, before fitting: a later run with another reserve or tokenizer fits it anew."""
    return pa.schema(
        [
            pa.field("key", pa.string(), nullable=False),
            pa.field("provider", pa.string(), nullable=False),
            pa.field("model", pa.string(), nullable=False),
            pa.field("prompt_version", pa.string(), nullable=False),
            pa.field("doc_hash", pa.string(), nullable=False),
            pa.field("chunk_hash", pa.string(), nullable=False),
            pa.field("context", pa.string(), nullable=False),
            pa.field("run_tag", pa.string(), nullable=False),
        ]
    )
