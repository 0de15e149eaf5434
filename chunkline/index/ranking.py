"""What both ways of searching a run share: :func:`chunkline.index.query.search_result` (one
question) and :class:`chunkline.index.search.Index` (a run opened once). Reading the run's
chunks from its shards, the vectors and BM25 options as the run stored them, and the ranking
arithmetic (reciprocal rank fusion, best-first order). Here so that neither of those two modules
imports the other's internals: ``query`` builds on ``search``, ``search`` on this.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkline.index.manifest import resolve_run
from chunkline.index.manifest_types import Manifest
from chunkline.index.tables import read_table
from chunkline.quantize import dequantized
from chunkline.sparse import SparseOptions

if TYPE_CHECKING:
    from chunkline.embedder import EmbedOptions

RRF_K = 60
_BASE_COLUMNS = ["doc_id", "chunk_id", "chunk_index", "headings", "start", "end", "text", "tokens"]
_OPTIONAL = ["metadata", "page_start", "page_end", "sparse_indices", "sparse_values", "embedding",
             "embedding_scale", "principals"]


def run_dir_of(output: str) -> str:
    """``output`` itself when it holds a manifest, else the run named in ``output/LATEST``."""
    run_dir = resolve_run(output)
    if run_dir is None:
        raise FileNotFoundError(f"no manifest.json or LATEST under {output}: run `chunkline run` first")
    return run_dir


def load_chunks(run_dir: str, manifest: Manifest) -> pa.Table:
    """Every live chunk of the run with the columns a query reads (those it has). ValueError
    naming the file for a shard that is missing or not readable Parquet."""
    table = read_table(run_dir, manifest, "chunks", _BASE_COLUMNS, optional=_OPTIONAL)
    if table is None:
        return pa.table({name: [] for name in _BASE_COLUMNS})
    return table


def embed_options(manifest: Manifest) -> "EmbedOptions":
    """The options the index was embedded with, as its manifest recorded them (the fields this
    version knows; a field added since keeps its default), ``auto`` dtype replaced by what the
    run decided on its driver (not what this machine would)."""
    from chunkline.embedder import EmbedOptions

    embed = manifest.setting("embed")
    if not isinstance(embed, Mapping):
        raise ValueError(f"run {manifest.run_id} was written with embed: null; it has no vectors")
    options = EmbedOptions(**{spec.name: embed[spec.name] for spec in dataclasses.fields(EmbedOptions)
                              if spec.name in embed})
    if options.dtype == "auto":
        decided: Any = (manifest.model and manifest.model.dtype) or "float32"  # as the run recorded it
        options = dataclasses.replace(options, dtype=decided)
    return options


def stored_vectors(table: pa.Table, options: "EmbedOptions") -> tuple[np.ndarray, bool]:
    """(the chunks' vectors as float32 rows, whether a question's vector must be normalized
    too): whatever the run stored (float32, float16, or int8 times each row's scale), rows
    normalized where the run did not store unit float32 vectors, so that a dot product is the
    cosine."""
    vectors = table.column("embedding").combine_chunks()
    dim = vectors.type.list_size if pa.types.is_fixed_size_list(vectors.type) else None
    flat = pc.list_flatten(vectors).to_numpy(zero_copy_only=False)
    stored = flat.reshape(len(table), dim or (flat.size // max(len(table), 1)))
    scales = (table.column("embedding_scale").to_numpy(zero_copy_only=False)
              if "embedding_scale" in table.column_names else None)
    # float32 as stored is used where Arrow holds it (read-only): a 100,000 x 384 copy is 150 MB.
    matrix = stored if stored.dtype == np.float32 and scales is None else dequantized(stored, scales)
    renormalize = not options.normalize or stored.dtype != np.float32  # cosine, whatever was stored
    if renormalize:
        matrix = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    return matrix, renormalize


def has_vectors(manifest: Manifest, table: pa.Table) -> bool:
    """Whether the run can be ranked by dense vectors (written with an embed stage)."""
    return bool(manifest.setting("embed")) and "embedding" in table.column_names


def has_bm25(manifest: Manifest, table: pa.Table) -> bool:
    """Whether the run can be ranked by BM25 (written with sparse vectors and their statistics)."""
    return manifest.bm25 is not None and "sparse_indices" in table.column_names


def no_vectors(run_dir: str) -> str:
    """The error for a dense ranking asked of a run without vectors."""
    return f"{run_dir} was written with embed: null; it has no vectors to search"


def no_bm25(run_dir: str) -> str:
    """The error for a BM25 ranking asked of a run without sparse vectors."""
    return f"{run_dir} has no sparse vectors (written with sparse: null, or before them)"


def bm25_options(manifest: Manifest, run_dir: str, table: pa.Table) -> SparseOptions:
    """How the run analyzed text for BM25 (the question is analyzed alike); ValueError for a run
    without sparse vectors."""
    if manifest.bm25 is None or not has_bm25(manifest, table):
        raise ValueError(no_bm25(run_dir))
    bm25 = manifest.bm25
    if bm25.k1 is None or bm25.b is None:
        raise ValueError(f"{run_dir}: its manifest's bm25 has no k1 or b (analysis unknown)")
    return SparseOptions(k1=bm25.k1, b=bm25.b, stemmer=bm25.stemmer,  # type: ignore[arg-type]
                         stop_words=bm25.stop_words)  # type: ignore[arg-type]  # as the run wrote them


def fused(dense: np.ndarray, sparse: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Reciprocal rank fusion of two score arrays (higher is better); a chunk with a sparse
    score of 0 (none of the question's terms) is not in the sparse ranking."""
    score = np.zeros(len(dense))
    order = descending(dense)
    score[order] += 1.0 / (k + 1 + np.arange(len(order)))
    matched = np.flatnonzero(sparse > 0)
    order = matched[descending(sparse[matched])]
    score[order] += 1.0 / (k + 1 + np.arange(len(order)))
    return score


def descending(scores: np.ndarray) -> np.ndarray:
    """The positions of ``scores`` best first, ties in position order: exactly
    ``np.argsort(-scores, kind="stable")``, computed as numpy's vectorized (unstable) argsort
    whose runs of equal values are then put back in position order by one sort of
    (run, position) keys. A stable sort of 100,000 floats takes ~20 ms, this ~3."""
    if len(scores) >= 2**32:  # positions no longer fit the key's low half
        return np.argsort(-scores, kind="stable")
    negated = -scores
    order = np.argsort(negated)
    ranked = negated[order]
    new_run = ranked[1:] != ranked[:-1]
    if ranked.dtype.kind == "f":
        new_run &= ~(np.isnan(ranked[1:]) & np.isnan(ranked[:-1]))  # NaNs last, as one run
    key = np.zeros(len(scores), np.uint64)
    np.cumsum(new_run, out=key[1:])
    key <<= np.uint64(32)
    key |= order.astype(np.uint64)
    key.sort()
    return (key & np.uint64(0xFFFFFFFF)).astype(np.intp)


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """``descending(scores)[:k]`` without ordering the rest: the k-th best value by partition,
    the positions better than it and the first of those equal to it, and those ordered."""
    if k >= len(scores):
        return descending(scores)
    negated = -scores
    kth = np.partition(negated, k - 1)[k - 1]
    if np.isnan(kth):  # fewer than k numbers: NaNs make up the rest, in position order
        return descending(scores)[:k]
    better = np.flatnonzero(negated < kth)
    tied = np.flatnonzero(negated == kth)[: k - len(better)]
    chosen = np.concatenate((better, tied))
    return chosen[descending(scores[chosen])]
