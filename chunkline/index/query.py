"""Query an index from its Parquet shards alone: no server, no vector store.

Three rankings of the chunks of the run an output names:

- ``dense``: cosine similarity of the question's vector (the index's own model) to each chunk's;
- ``sparse``: BM25, the dot product of the question's IDF vector (its terms' IDF from the run's
  ``terms`` table and chunk count) with each chunk's sparse vector (IDF-free weights written by
  the run, ``chunkline.sparse``; the question analyzed the same way); a run of an older
  chunkline, whose weights hold IDF, is ranked with a vector of ones, as it was;
- ``hybrid`` (the default): both fused by reciprocal rank (Cormack, Clarke & Büttcher,
  "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR
  2009): score = sum over the rankings of 1 / (k + rank), k = 60 as in the paper; a chunk
  without any of the question's terms takes part in the dense ranking only.

A sparse hit holds at least one of the question's terms: a chunk scoring 0 is never a hit, so a
question BM25 cannot match returns no hits, and hybrid then ranks by the dense vectors alone.
What the caller should know about a result (no hits and why, a ranking that used one side only)
comes back as :class:`Note` values in a :class:`SearchResult` (:func:`search_result`), not as
log lines.

Filters (``where``) apply before ranking, and so does access control: on a run written with
``access`` (its manifest says so) a search names the caller's principals and ranks only the
chunks they may read, so ``k`` hits come back whenever ``k`` readable chunks match; a search
that names none is refused (:class:`chunkline.index.search.AccessRequired`). Loading is
columnar: vectors and sparse weights go from Arrow buffers to numpy without a Python object per
value; rows become Python objects only for the hits.

:func:`search_result` opens the run for its one question; a process asking many opens a
:class:`chunkline.index.search.Index` once and asks it (the same ranking: :func:`dense_scores`,
:func:`sparse_scores` and :func:`idf_of` rank a table the way it does, kept as its reference).
The result types are :mod:`chunkline.index.results`'s; what this module and ``search`` share is
:mod:`chunkline.index.ranking`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkline.index.manifest_types import Manifest
from chunkline.index.models import local_model_dir
from chunkline.index.ranking import bm25_options, embed_options, has_vectors, no_vectors, stored_vectors
from chunkline.index.results import Hit, Mode, SearchResult
from chunkline.index.search import Index, check_question
from chunkline.index.tables import read_table
from chunkline.sparse import query_terms, query_weights


def dense_scores(table: pa.Table, manifest: Manifest, run_dir: str, question: str) -> np.ndarray:
    """Cosine of every chunk of ``table`` to ``question``, embedded by the index's own model
    (loaded for this call)."""
    from chunkline.embedder import embed_texts, load_model

    if not has_vectors(manifest, table):
        raise ValueError(no_vectors(run_dir))
    options = embed_options(manifest)
    matrix, renormalize = stored_vectors(table, options)
    local = dataclasses.replace(options, model=local_model_dir(options.model))
    query = embed_texts(load_model(local), [question], options)[0]
    if renormalize:
        query = query / np.linalg.norm(query)
    return matrix @ query


def sparse_scores(table: pa.Table, manifest: Manifest, run_dir: str, question: str) -> np.ndarray:
    """BM25 of every chunk for ``question``: its weights times the IDF of the question's
    distinct terms, summed, without a Python loop over chunks."""
    options = bm25_options(manifest, run_dir, table)
    terms = query_terms(question, options)
    return _bm25(table, terms, idf_of(run_dir, manifest, terms))


def idf_of(run_dir: str, manifest: Manifest, terms: Sequence[int]) -> list[float]:
    """The query-side weight of each term: its IDF over the run's chunks (the ``terms`` table's
    df, the statistics' chunk count); 1 for a run whose stored weights hold IDF already."""
    bm25 = manifest.bm25
    if bm25 is None or bm25.weights != "tf" or not terms:
        return [1.0] * len(terms)
    df: dict[int, int] = {}
    found = read_table(run_dir, manifest, "terms", ["term_id", "df"],
                       filters=[("term_id", "in", sorted(set(terms)))])
    if found is not None:  # a term listed twice keeps its last entry
        df.update(zip(found.column("term_id").to_pylist(), found.column("df").to_pylist()))
    return query_weights(terms, df, bm25.chunks)


def _bm25(table: pa.Table, terms: Sequence[int], weights: Sequence[float]) -> np.ndarray:
    indices = table.column("sparse_indices").combine_chunks()
    flat_ids = pc.list_flatten(indices).to_numpy(zero_copy_only=False)
    flat_weights = pc.list_flatten(table.column("sparse_values").combine_chunks()).to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(indices).to_numpy(zero_copy_only=False)
    rows = np.repeat(np.arange(len(table)), lengths)
    order = np.argsort(np.asarray(terms, dtype=np.int64))
    sorted_terms = np.asarray(terms, dtype=np.int64)[order]
    sorted_weights = np.asarray(weights, dtype=np.float64)[order]
    hit = np.isin(flat_ids, sorted_terms)
    query = sorted_weights[np.searchsorted(sorted_terms, flat_ids[hit])]
    return np.bincount(rows[hit], weights=flat_weights[hit].astype(np.float64) * query,
                       minlength=len(table))


def search(output: str, question: str, k: int = 5, where: Sequence[Any] = (),
           mode: Mode = "hybrid", expand: int = 0,
           principals: Sequence[str] | None = None) -> list[Hit]:
    """The hits of :func:`search_result`, without its notes."""
    return list(search_result(output, question, k, where, mode, expand, principals).hits)


def search_result(output: str, question: str, k: int = 5, where: Sequence[Any] = (),
                  mode: Mode = "hybrid", expand: int = 0,
                  principals: Sequence[str] | None = None) -> SearchResult:
    """The ``k`` best chunks of the run ``output`` names for ``question``, ranked by ``mode``,
    among those whose metadata meets every condition of ``where`` (as
    ``chunkline.metadata.parse_condition`` makes them, applied by
    ``chunkline.metadata.matches``), with notes saying why there are none or which ranking a
    hybrid search fell back to. ``expand``: each hit also with its neighbouring chunks, nearest
    first, up to that many tokens in all, as one exact span of the document's text.

    ``principals``: the caller's (users, groups), required on a run written with access
    control, where only the chunks they may read are ranked (``chunkline.access.readable``).

    Fewer than ``k`` hits (none, even) is a result, not an error: in sparse mode only chunks
    holding one of the question's terms are hits. ValueError for bad arguments or a run that
    cannot be searched this way; FileNotFoundError when ``output`` holds no run.

    Reads the run for this one question: to ask many, open a
    :class:`chunkline.index.search.Index` once (this is ``Index.open(output).search(...)``)."""
    check_question(question, k, mode, expand)  # before reading anything, as the CLI expects
    return Index.open(output).search(question, k, mode=mode, where=where, expand=expand,
                                     principals=principals)
