"""Query an index from its Parquet shards alone: embed the question with the index's model,
rank chunks by cosine similarity. No server, no vector store."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from chunkline.embedder import EmbedOptions, embed_texts, load_model
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


def run_dir_of(output: str) -> str:
    """``output`` itself when it holds a manifest, else the run named in ``output/LATEST``."""
    if FileSystems.exists(FileSystems.join(output, "manifest.json")):
        return output
    latest = FileSystems.join(output, "LATEST")
    if not FileSystems.exists(latest):
        raise FileNotFoundError(f"no manifest.json or LATEST under {output}: run `chunkline run` first")
    with FileSystems.open(latest) as handle:
        return FileSystems.join(output, handle.read().decode("utf-8").strip())


def load_manifest(run_dir: str) -> dict:
    with FileSystems.open(FileSystems.join(run_dir, "manifest.json")) as handle:
        return json.loads(handle.read().decode("utf-8"))


def search(output: str, question: str, k: int = 5) -> list[Hit]:
    run_dir = run_dir_of(output)
    manifest = load_manifest(run_dir)
    embed = manifest["config"].get("embed")
    if not embed:
        raise ValueError(f"{run_dir} was written with embed: null; it has no vectors to search")
    options = EmbedOptions(**{key: embed[key] for key in
                              ("model", "device", "dtype", "normalize", "batch_size", "max_seq_length")})
    columns = ["doc_id", "chunk_id", "headings", "start", "end", "text", "embedding"]
    tables = []
    for name in manifest["files"]["chunks"]:
        with FileSystems.open(FileSystems.join(run_dir, name)) as handle:
            tables.append(pq.read_table(handle, columns=columns))
    rows = [row for table in tables for row in table.to_pylist()]
    if not rows:
        return []
    matrix = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
    local = EmbedOptions(**{**options.__dict__, "model": local_model_dir(options.model)})
    query = embed_texts(load_model(local), [question], options)[0]
    if not options.normalize:  # cosine, whatever the index stored
        matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        query = query / np.linalg.norm(query)
    scores = matrix @ query
    best = np.argsort(-scores, kind="stable")[:k]
    return [
        Hit(float(scores[i]), rows[i]["doc_id"], rows[i]["chunk_id"], tuple(rows[i]["headings"]),
            rows[i]["start"], rows[i]["end"], rows[i]["text"])
        for i in best
    ]
