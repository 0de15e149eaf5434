"""Query an index from its Parquet shards alone: no server, no vector store.

Three rankings of the chunks of the run an output names:

- ``dense``: cosine similarity of the question's vector (the index's own model) to each chunk's;
- ``sparse``: BM25, the dot product of the question's terms with each chunk's sparse vector
  (weights written by the run, ``chunkline.sparse``; the question analyzed the same way);
- ``hybrid`` (the default): both fused by reciprocal rank (Cormack, Clarke & Büttcher,
  "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR
  2009): score = sum over the rankings of 1 / (k + rank), k = 60 as in the paper; a chunk
  without any of the question's terms takes part in the dense ranking only.

Filters (``where``) apply before ranking. Loading is columnar: vectors and sparse weights go
from Arrow buffers to numpy without a Python object per value; rows become Python objects only
for the hits.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from chunkline.metadata import matches
from chunkline.quantize import dequantized
from chunkline.sparse import SparseOptions, query_terms
from pipeline.manifest import load_manifest, resolve_run, table_files

log = logging.getLogger("chunkline.query")

Mode = Literal["hybrid", "dense", "sparse"]
MODES: tuple[str, ...] = ("hybrid", "dense", "sparse")
RRF_K = 60
_BASE_COLUMNS = ["doc_id", "chunk_id", "chunk_index", "headings", "start", "end", "text", "tokens"]
_OPTIONAL = ["metadata", "page_start", "page_end", "sparse_indices", "sparse_values", "embedding",
             "embedding_scale"]


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
    # With ``expand``: the hit with its neighbouring chunks, as a span of the document's text.
    expanded_start: int | None = None
    expanded_end: int | None = None
    expanded_text: str | None = None


def run_dir_of(output: str) -> str:
    """``output`` itself when it holds a manifest, else the run named in ``output/LATEST``."""
    run_dir = resolve_run(output)
    if run_dir is None:
        raise FileNotFoundError(f"no manifest.json or LATEST under {output}: run `chunkline run` first")
    return run_dir


def load_chunks(run_dir: str, manifest: dict) -> pa.Table:
    """Every chunk of the run with the columns a query reads (those it has)."""
    tables = []
    for path in table_files(run_dir, manifest, "chunks"):
        with FileSystems.open(path) as handle:
            shard = pq.ParquetFile(handle)
            present = set(shard.schema_arrow.names)
            tables.append(shard.read(columns=_BASE_COLUMNS + [c for c in _OPTIONAL if c in present]))
    if not tables:
        return pa.table({name: [] for name in _BASE_COLUMNS})
    return pa.concat_tables(tables, promote_options="default")


def dense_scores(table: pa.Table, manifest: dict, run_dir: str, question: str) -> np.ndarray:
    from chunkline.embedder import EmbedOptions, embed_texts, load_model
    from transforms.model_cache import local_model_dir

    embed = manifest["config"].get("embed")
    if not embed or "embedding" not in table.column_names:
        raise ValueError(f"{run_dir} was written with embed: null; it has no vectors to search")
    # The options the index was embedded with, as its manifest recorded them (the fields this
    # version knows; a field added since keeps its default).
    options = EmbedOptions(**{spec.name: embed[spec.name] for spec in dataclasses.fields(EmbedOptions)
                              if spec.name in embed})
    if options.dtype == "auto":  # what the run decided on its driver, not what this machine would
        options = dataclasses.replace(options, dtype=(manifest.get("model") or {}).get("dtype", "float32"))
    vectors = table.column("embedding").combine_chunks()
    dim = vectors.type.list_size if pa.types.is_fixed_size_list(vectors.type) else None
    flat = pc.list_flatten(vectors).to_numpy(zero_copy_only=False)
    stored = flat.reshape(len(table), dim or (flat.size // max(len(table), 1)))
    # Whatever the run stored: float32, float16, or int8 times each row's scale.
    scales = (table.column("embedding_scale").to_numpy(zero_copy_only=False)
              if "embedding_scale" in table.column_names else None)
    matrix = dequantized(stored, scales)
    local = dataclasses.replace(options, model=local_model_dir(options.model))
    query = embed_texts(load_model(local), [question], options)[0]
    if not options.normalize or stored.dtype != np.float32:  # cosine, whatever was stored
        matrix = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        query = query / np.linalg.norm(query)
    return matrix @ query


def sparse_scores(table: pa.Table, manifest: dict, run_dir: str, question: str) -> np.ndarray:
    """BM25 of every chunk for ``question``: its weights summed over the question's distinct
    terms, without a Python loop over chunks."""
    bm25 = manifest.get("bm25")
    if not bm25 or "sparse_indices" not in table.column_names:
        raise ValueError(f"{run_dir} has no sparse vectors (written with sparse: null, or before them)")
    options = SparseOptions(**{name: bm25[name] for name in ("k1", "b", "stemmer", "stop_words")})
    terms = np.asarray(query_terms(question, options), dtype=np.int64)
    indices = table.column("sparse_indices").combine_chunks()
    flat_ids = pc.list_flatten(indices).to_numpy(zero_copy_only=False)
    flat_weights = pc.list_flatten(table.column("sparse_values").combine_chunks()).to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(indices).to_numpy(zero_copy_only=False)
    rows = np.repeat(np.arange(len(table)), lengths)
    hit = np.isin(flat_ids, terms)
    return np.bincount(rows[hit], weights=flat_weights[hit].astype(np.float64), minlength=len(table))


def fused(dense: np.ndarray, sparse: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Reciprocal rank fusion of two score arrays (higher is better); a chunk with a sparse
    score of 0 (none of the question's terms) is not in the sparse ranking."""
    score = np.zeros(len(dense))
    order = np.argsort(-dense, kind="stable")
    score[order] += 1.0 / (k + 1 + np.arange(len(order)))
    matched = np.flatnonzero(sparse > 0)
    order = matched[np.argsort(-sparse[matched], kind="stable")]
    score[order] += 1.0 / (k + 1 + np.arange(len(order)))
    return score


def search(output: str, question: str, k: int = 5, where: Sequence[tuple[str, str]] = (),
           mode: Mode = "hybrid", expand: int = 0) -> list[Hit]:
    """The ``k`` best chunks of the run ``output`` names for ``question``, ranked by ``mode``,
    among those whose metadata meets every ``(key, value)`` of ``where``
    (``chunkline.metadata.matches``: a string equals, an array contains, a number or boolean
    equals its JSON text). ``expand``: each hit also with its neighbouring chunks, nearest
    first, up to that many tokens in all, as one exact span of the document's text."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the question is empty")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(expand, bool) or not isinstance(expand, int) or expand < 0:
        raise ValueError(f"expand must be an integer >= 0, got {expand!r}")
    run_dir = run_dir_of(output)
    manifest = load_manifest(run_dir)
    everything = load_chunks(run_dir, manifest)
    table = everything
    if where:
        if len(table) and "metadata" not in table.column_names:
            raise ValueError(f"{run_dir} has no metadata column (written before metadata "
                             "support): --where cannot filter it")
        # Filtered before ranking: the k best of the matching chunks, not the matches among k.
        keep = [matches(text, where) for text in table.column("metadata").to_pylist()] if len(table) else []
        table = table.filter(pa.array(keep, pa.bool_())) if len(table) else table
    if len(table) == 0:
        return []
    scores = _scores(table, manifest, run_dir, question, mode)
    best = np.argsort(-scores, kind="stable")[:k]
    picked = table.take(pa.array(best, pa.int64())).to_pylist()
    hits = [_hit(float(scores[i]), row) for i, row in zip(best, picked)]
    return _expanded(hits, everything, run_dir, manifest, expand) if expand else hits


def _scores(table: pa.Table, manifest: dict, run_dir: str, question: str, mode: str) -> np.ndarray:
    has_dense = bool(manifest["config"].get("embed")) and "embedding" in table.column_names
    has_sparse = bool(manifest.get("bm25")) and "sparse_indices" in table.column_names
    if mode == "dense" or (mode == "hybrid" and not has_sparse):
        if mode == "hybrid":
            log.warning("%s has no sparse vectors: ranking by dense vectors alone", run_dir)
        return dense_scores(table, manifest, run_dir, question)
    if mode == "sparse" or not has_dense:
        if mode == "hybrid":
            log.warning("%s has no dense vectors: ranking by BM25 alone", run_dir)
        return sparse_scores(table, manifest, run_dir, question)
    return fused(dense_scores(table, manifest, run_dir, question),
                 sparse_scores(table, manifest, run_dir, question))


def _hit(score: float, row: dict) -> Hit:
    return Hit(score, row["doc_id"], row["chunk_id"], tuple(row["headings"]), row["start"],
               row["end"], row["text"], row.get("metadata") or "{}", row.get("page_start"),
               row.get("page_end"))


def _expanded(hits: list[Hit], chunks: pa.Table, run_dir: str, manifest: dict, budget: int) -> list[Hit]:
    """Each hit grown by its document's neighbouring chunks (the nearer first, before and after
    in turn) while the tokens of all stay within ``budget``; the span is cut from
    ``documents.text``, so its offsets are exact."""
    wanted = sorted({hit.doc_id for hit in hits})
    mine = chunks.filter(pc.is_in(chunks.column("doc_id"), pa.array(wanted)))
    by_doc: dict[str, dict[int, tuple[int, int, int]]] = {}
    for doc_id, index, start, end, tokens in zip(*(mine.column(c).to_pylist() for c in
                                                  ("doc_id", "chunk_index", "start", "end", "tokens"))):
        by_doc.setdefault(doc_id, {})[index] = (start, end, tokens)
    texts = _document_texts(run_dir, manifest, wanted)
    out = []
    for hit in hits:
        siblings = by_doc[hit.doc_id]
        index = next(i for i, (s, e, _) in siblings.items() if (s, e) == (hit.start, hit.end))
        lo = hi = index
        start, end, used = hit.start, hit.end, siblings[index][2]
        grew = True
        while grew:
            grew = False
            for neighbour in (lo - 1, hi + 1):
                if neighbour in siblings and used + siblings[neighbour][2] <= budget:
                    n_start, n_end, n_tokens = siblings[neighbour]
                    used += n_tokens
                    start, end = min(start, n_start), max(end, n_end)
                    lo, hi = min(lo, neighbour), max(hi, neighbour)
                    grew = True
        text = texts.get(hit.doc_id)
        out.append(dataclasses.replace(hit, expanded_start=start, expanded_end=end,
                                       expanded_text=text[start:end] if text is not None else None))
    return out


def _document_texts(run_dir: str, manifest: dict, doc_ids: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in table_files(run_dir, manifest, "documents"):
        with FileSystems.open(path) as handle:
            table = pq.read_table(handle, columns=["doc_id", "text", "status"])
        table = table.filter(pc.and_(pc.is_in(table.column("doc_id"), pa.array(doc_ids)),
                                     pc.equal(table.column("status"), "kept")))
        found.update(zip(table.column("doc_id").to_pylist(), table.column("text").to_pylist()))
    return found
