"""Query an index from its Parquet shards alone: embed the question with the index's model,
rank chunks by cosine similarity. No server, no vector store."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from chunkline.embedder import EmbedOptions, embed_texts, load_model
from chunkline.metadata import matches
from pipeline.manifest import load_manifest, resolve_run, table_files
from transforms.model_cache import local_model_dir


@dataclass(frozen=True)
class Hit:
    score: float
    doc_id: str
    chunk_id: str
    headings: tuple[str, ...]
    start: int
    end: int
    text: str
    metadata: str = "{}"  # the chunk's metadata JSON ("{}" for an index written before it)
    page_start: int | None = None
    page_end: int | None = None


def run_dir_of(output: str) -> str:
    """``output`` itself when it holds a manifest, else the run named in ``output/LATEST``."""
    run_dir = resolve_run(output)
    if run_dir is None:
        raise FileNotFoundError(f"no manifest.json or LATEST under {output}: run `chunkline run` first")
    return run_dir


def search(output: str, question: str, k: int = 5,
           where: Sequence[tuple[str, str]] = ()) -> list[Hit]:
    """The ``k`` chunks of the run ``output`` names most similar to ``question``, among those
    whose metadata meets every ``(key, value)`` of ``where`` (``chunkline.metadata.matches``:
    a string equals, an array contains, a number or boolean equals its JSON text)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the question is empty")
    run_dir = run_dir_of(output)
    manifest = load_manifest(run_dir)
    embed = manifest["config"].get("embed")
    if not embed:
        raise ValueError(f"{run_dir} was written with embed: null; it has no vectors to search")
    # The options the index was embedded with, as its manifest recorded them (the fields this
    # version knows; a field added since keeps its default).
    options = EmbedOptions(**{spec.name: embed[spec.name] for spec in dataclasses.fields(EmbedOptions)
                              if spec.name in embed})
    columns = ["doc_id", "chunk_id", "headings", "start", "end", "text", "embedding"]
    optional = ["metadata", "page_start", "page_end"]  # absent from an index written before them
    tables = []
    for path in table_files(run_dir, manifest, "chunks"):
        with FileSystems.open(path) as handle:
            shard = pq.ParquetFile(handle)
            present = shard.schema_arrow.names
            tables.append(shard.read(columns=columns + [n for n in optional if n in present]))
    rows = [row for table in tables for row in table.to_pylist()]
    if where:
        if rows and "metadata" not in rows[0]:
            raise ValueError(f"{run_dir} has no metadata column (written before metadata "
                             "support): --where cannot filter it")
        # Filtered before ranking: the k best of the matching chunks, not the matches among k.
        rows = [row for row in rows if matches(row["metadata"], where)]
    if not rows:
        return []
    matrix = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
    local = dataclasses.replace(options, model=local_model_dir(options.model))
    query = embed_texts(load_model(local), [question], options)[0]
    if not options.normalize:  # cosine, whatever the index stored
        matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        query = query / np.linalg.norm(query)
    scores = matrix @ query
    best = np.argsort(-scores, kind="stable")[:k]
    return [
        Hit(float(scores[i]), rows[i]["doc_id"], rows[i]["chunk_id"], tuple(rows[i]["headings"]),
            rows[i]["start"], rows[i]["end"], rows[i]["text"], rows[i].get("metadata", "{}"),
            rows[i].get("page_start"), rows[i].get("page_end"))
        for i in best
    ]
