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
that names none is refused (:class:`pipeline.search.AccessRequired`). Loading is columnar: vectors and sparse weights go
from Arrow buffers to numpy without a Python object per value; rows become Python objects only
for the hits.

:func:`search_result` opens the run for its one question; a process asking many opens a
:class:`pipeline.search.Index` once and asks it (the same ranking: this module's functions are
its one code path).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from chunkline.quantize import dequantized
from chunkline.sparse import SparseOptions, query_terms, query_weights
from pipeline.manifest import resolve_run, table_files

if TYPE_CHECKING:
    from chunkline.embedder import EmbedOptions

Mode = Literal["hybrid", "dense", "sparse"]
MODES: tuple[str, ...] = ("hybrid", "dense", "sparse")
RRF_K = 60
_BASE_COLUMNS = ["doc_id", "chunk_id", "chunk_index", "headings", "start", "end", "text", "tokens"]
_OPTIONAL = ["metadata", "page_start", "page_end", "sparse_indices", "sparse_values", "embedding",
             "embedding_scale", "principals"]


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


# What a note is about (``Note.kind``), for code that reacts to one without reading its text.
EMPTY_INDEX = "empty_index"  # the run holds no chunk at all
WHERE_UNKNOWN_KEY = "where_unknown_key"  # no chunk's metadata has a key a condition names
WHERE_NO_MATCH = "where_no_match"  # the keys exist, but no chunk meets the conditions
NO_QUERY_TERMS = "no_query_terms"  # BM25: no term left after analysis (stop words, no words)
TERMS_NOT_FOUND = "terms_not_found"  # BM25: none of the question's terms is in the chunks ranked
DENSE_ONLY = "dense_only"  # hybrid asked, ranked by the dense vectors alone (says why)
SPARSE_ONLY = "sparse_only"  # hybrid asked, ranked by BM25 alone (the run has no vectors)
NOT_READABLE = "not_readable"  # access control: no chunk is readable by the caller's principals
UNPROTECTED = "unprotected"  # principals given, but the run was written without access control
NOTE_KINDS = (EMPTY_INDEX, WHERE_UNKNOWN_KEY, WHERE_NO_MATCH, NO_QUERY_TERMS, TERMS_NOT_FOUND,
              DENSE_ONLY, SPARSE_ONLY, NOT_READABLE, UNPROTECTED)


@dataclass(frozen=True)
class Note:
    """Something about a result its caller should know: ``kind`` (one of :data:`NOTE_KINDS`)
    for code, ``text`` (one line) for a person. A note about an empty result starts "no hits: "."""

    kind: str
    text: str


@dataclass(frozen=True)
class SearchResult:
    """The hits, best first; the notes about them; and ``ranking``, the ranking the hits were
    chosen by: ``"hybrid"``, ``"dense"`` or ``"sparse"`` (which may differ from the mode asked:
    hybrid on a one-sided run, or hybrid where BM25 matches nothing), None when no chunk was
    left to rank (an empty index, a filter that keeps nothing)."""

    hits: tuple[Hit, ...]
    notes: tuple[Note, ...] = ()
    ranking: str | None = None


def run_dir_of(output: str) -> str:
    """``output`` itself when it holds a manifest, else the run named in ``output/LATEST``."""
    run_dir = resolve_run(output)
    if run_dir is None:
        raise FileNotFoundError(f"no manifest.json or LATEST under {output}: run `chunkline run` first")
    return run_dir


def load_chunks(run_dir: str, manifest: dict) -> pa.Table:
    """Every chunk of the run with the columns a query reads (those it has). ValueError naming
    the file for a shard that is missing or not readable Parquet."""

    def columns_present(shard: pq.ParquetFile) -> pa.Table:
        present = set(shard.schema_arrow.names)
        return shard.read(columns=_BASE_COLUMNS + [c for c in _OPTIONAL if c in present])

    tables = [read_shard(path, columns_present) for path in table_files(run_dir, manifest, "chunks")]
    if not tables:
        return pa.table({name: [] for name in _BASE_COLUMNS})
    return pa.concat_tables(tables, promote_options="default")


def read_shard(path: str, read: Callable[[pq.ParquetFile], pa.Table]) -> pa.Table:
    """``read`` of the Parquet file at ``path``; ValueError naming the file, on one line, when it
    is missing, truncated or corrupt."""
    try:
        with FileSystems.open(path) as handle:
            return read(pq.ParquetFile(handle))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file, though the run's manifest lists it") from None
    except (pa.ArrowException, OSError, ValueError) as exc:  # pyarrow's own, or the filesystem's
        why = " ".join(str(exc).split()) or "no reason given"
        raise ValueError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {why})") from None


def embed_options(manifest: dict) -> "EmbedOptions":
    """The options the index was embedded with, as its manifest recorded them (the fields this
    version knows; a field added since keeps its default), ``auto`` dtype replaced by what the
    run decided on its driver (not what this machine would)."""
    from chunkline.embedder import EmbedOptions

    embed = manifest["config"]["embed"]
    options = EmbedOptions(**{spec.name: embed[spec.name] for spec in dataclasses.fields(EmbedOptions)
                              if spec.name in embed})
    if options.dtype == "auto":
        options = dataclasses.replace(options, dtype=(manifest.get("model") or {}).get("dtype", "float32"))
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


def has_vectors(manifest: dict, table: pa.Table) -> bool:
    """Whether the run can be ranked by dense vectors (written with an embed stage)."""
    return bool(manifest["config"].get("embed")) and "embedding" in table.column_names


def has_bm25(manifest: dict, table: pa.Table) -> bool:
    """Whether the run can be ranked by BM25 (written with sparse vectors and their statistics)."""
    return bool(manifest.get("bm25")) and "sparse_indices" in table.column_names


def dense_scores(table: pa.Table, manifest: dict, run_dir: str, question: str) -> np.ndarray:
    """Cosine of every chunk of ``table`` to ``question``, embedded by the index's own model
    (loaded for this call)."""
    from chunkline.embedder import embed_texts, load_model
    from transforms.model_cache import local_model_dir

    if not has_vectors(manifest, table):
        raise ValueError(no_vectors(run_dir))
    options = embed_options(manifest)
    matrix, renormalize = stored_vectors(table, options)
    local = dataclasses.replace(options, model=local_model_dir(options.model))
    query = embed_texts(load_model(local), [question], options)[0]
    if renormalize:
        query = query / np.linalg.norm(query)
    return matrix @ query


def no_vectors(run_dir: str) -> str:
    """The error for a dense ranking asked of a run without vectors."""
    return f"{run_dir} was written with embed: null; it has no vectors to search"


def no_bm25(run_dir: str) -> str:
    """The error for a BM25 ranking asked of a run without sparse vectors."""
    return f"{run_dir} has no sparse vectors (written with sparse: null, or before them)"


def bm25_options(manifest: dict, run_dir: str, table: pa.Table) -> SparseOptions:
    """How the run analyzed text for BM25 (the question is analyzed alike); ValueError for a run
    without sparse vectors."""
    if not has_bm25(manifest, table):
        raise ValueError(no_bm25(run_dir))
    bm25 = manifest["bm25"]
    return SparseOptions(**{name: bm25[name] for name in ("k1", "b", "stemmer", "stop_words")})


def sparse_scores(table: pa.Table, manifest: dict, run_dir: str, question: str) -> np.ndarray:
    """BM25 of every chunk for ``question``: its weights times the IDF of the question's
    distinct terms, summed, without a Python loop over chunks."""
    options = bm25_options(manifest, run_dir, table)
    terms = query_terms(question, options)
    return _bm25(table, terms, idf_of(run_dir, manifest, terms))


def idf_of(run_dir: str, manifest: dict, terms: Sequence[int]) -> list[float]:
    """The query-side weight of each term: its IDF over the run's chunks (the ``terms`` table's
    df, the statistics' chunk count); 1 for a run whose stored weights hold IDF already."""
    bm25 = manifest.get("bm25") or {}
    if bm25.get("weights") != "tf" or not terms:
        return [1.0] * len(terms)
    wanted = pa.array(sorted(set(terms)), pa.int32())
    df: dict[int, int] = {}
    for path in table_files(run_dir, manifest, "terms"):
        def matching(shard: pq.ParquetFile) -> pa.Table:
            found = shard.read(columns=["term_id", "df"])
            return found.filter(pc.is_in(found.column("term_id"), value_set=wanted))
        found = read_shard(path, matching)
        df.update(zip(found.column("term_id").to_pylist(), found.column("df").to_pylist()))
    return query_weights(terms, df, int(bm25["chunks"]))


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

    Reads the run for this one question: to ask many, open a :class:`pipeline.search.Index`
    once (this is ``Index.open(output).search(...)``)."""
    # Imported here, not at the top: pipeline.search builds on this module's types and scores.
    from pipeline.search import Index, check_question

    check_question(question, k, mode, expand)  # before reading anything, as the CLI expects
    return Index.open(output).search(question, k, mode=mode, where=where, expand=expand,
                                     principals=principals)


