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

Filters (``where``) apply before ranking. Loading is columnar: vectors and sparse weights go
from Arrow buffers to numpy without a Python object per value; rows become Python objects only
for the hits.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from chunkline.metadata import matches
from chunkline.quantize import dequantized
from chunkline.sparse import SparseOptions, analyze, query_terms, query_weights
from pipeline.manifest import load_manifest, resolve_run, table_files

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


# What a note is about (``Note.kind``), for code that reacts to one without reading its text.
EMPTY_INDEX = "empty_index"  # the run holds no chunk at all
WHERE_UNKNOWN_KEY = "where_unknown_key"  # no chunk's metadata has a key a condition names
WHERE_NO_MATCH = "where_no_match"  # the keys exist, but no chunk meets the conditions
NO_QUERY_TERMS = "no_query_terms"  # BM25: no term left after analysis (stop words, no words)
TERMS_NOT_FOUND = "terms_not_found"  # BM25: none of the question's terms is in the chunks ranked
DENSE_ONLY = "dense_only"  # hybrid asked, ranked by the dense vectors alone (says why)
SPARSE_ONLY = "sparse_only"  # hybrid asked, ranked by BM25 alone (the run has no vectors)
NOTE_KINDS = (EMPTY_INDEX, WHERE_UNKNOWN_KEY, WHERE_NO_MATCH, NO_QUERY_TERMS, TERMS_NOT_FOUND,
              DENSE_ONLY, SPARSE_ONLY)


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

    tables = [_read_shard(path, columns_present) for path in table_files(run_dir, manifest, "chunks")]
    if not tables:
        return pa.table({name: [] for name in _BASE_COLUMNS})
    return pa.concat_tables(tables, promote_options="default")


def _read_shard(path: str, read: Callable[[pq.ParquetFile], pa.Table]) -> pa.Table:
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


def _bm25_options(manifest: dict, run_dir: str, table: pa.Table) -> SparseOptions:
    bm25 = manifest.get("bm25")
    if not bm25 or "sparse_indices" not in table.column_names:
        raise ValueError(f"{run_dir} has no sparse vectors (written with sparse: null, or before them)")
    return SparseOptions(**{name: bm25[name] for name in ("k1", "b", "stemmer", "stop_words")})


def sparse_scores(table: pa.Table, manifest: dict, run_dir: str, question: str) -> np.ndarray:
    """BM25 of every chunk for ``question``: its weights times the IDF of the question's
    distinct terms, summed, without a Python loop over chunks."""
    options = _bm25_options(manifest, run_dir, table)
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
        found = _read_shard(path, matching)
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


def _holds_any(table: pa.Table, terms: Sequence[int]) -> bool:
    """Whether any chunk of ``table`` has one of the term ids ``terms``."""
    flat_ids = pc.list_flatten(table.column("sparse_indices").combine_chunks()).to_numpy(zero_copy_only=False)
    return bool(np.isin(flat_ids, np.asarray(terms, dtype=np.int64)).any())


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


def search(output: str, question: str, k: int = 5, where: Sequence[Any] = (),
           mode: Mode = "hybrid", expand: int = 0) -> list[Hit]:
    """The hits of :func:`search_result`, without its notes."""
    return list(search_result(output, question, k, where, mode, expand).hits)


def search_result(output: str, question: str, k: int = 5, where: Sequence[Any] = (),
                  mode: Mode = "hybrid", expand: int = 0) -> SearchResult:
    """The ``k`` best chunks of the run ``output`` names for ``question``, ranked by ``mode``,
    among those whose metadata meets every condition of ``where`` (as
    ``chunkline.metadata.parse_condition`` makes them, applied by
    ``chunkline.metadata.matches``), with notes saying why there are none or which ranking a
    hybrid search fell back to. ``expand``: each hit also with its neighbouring chunks, nearest
    first, up to that many tokens in all, as one exact span of the document's text.

    Fewer than ``k`` hits (none, even) is a result, not an error: in sparse mode only chunks
    holding one of the question's terms are hits. ValueError for bad arguments or a run that
    cannot be searched this way; FileNotFoundError when ``output`` holds no run."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the question is empty")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(expand, bool) or not isinstance(expand, int) or expand < 0:
        raise ValueError(f"expand must be an integer >= 0, got {expand!r}")
    run_dir, manifest, chunks = _load(output)
    return _rank(run_dir, manifest, chunks, question, k, list(where), mode, expand)


def _load(output: str) -> tuple[str, dict, pa.Table]:
    """What ranking reads: the run directory, its manifest and every chunk (the query columns)."""
    run_dir = run_dir_of(output)
    manifest = load_manifest(run_dir)
    return run_dir, manifest, load_chunks(run_dir, manifest)


def _rank(run_dir: str, manifest: dict, everything: pa.Table, question: str, k: int,
          where: list, mode: str, expand: int) -> SearchResult:
    """:func:`search_result` on a loaded run (``everything``: all its chunks)."""
    if len(everything) == 0:
        return SearchResult((), (Note(EMPTY_INDEX, f"no hits: {run_dir} holds no chunk"),))
    table = everything
    if where:
        if "metadata" not in table.column_names:
            raise ValueError(f"{run_dir} has no metadata column (written before metadata "
                             "support): --where cannot filter it")
        # Filtered before ranking: the k best of the matching chunks, not the matches among k.
        metadata = table.column("metadata").to_pylist()
        keep = [matches(text, where) for text in metadata]
        if not any(keep):
            return SearchResult((), (_why_nothing_matches(metadata, where),))
        table = table.filter(pa.array(keep, pa.bool_()))
    has_dense = bool(manifest["config"].get("embed")) and "embedding" in table.column_names
    has_sparse = bool(manifest.get("bm25")) and "sparse_indices" in table.column_names
    notes: list[Note] = []
    if mode == "hybrid" and not has_sparse and not has_dense:
        raise ValueError(f"{run_dir} has neither vectors (written with embed: null) nor BM25 "
                         "weights (sparse: null): nothing to rank by")
    if mode == "hybrid" and not has_sparse:
        notes.append(Note(DENSE_ONLY, f"ranked by dense vectors alone: {run_dir} has no BM25 "
                                      "weights (written with sparse: null)"))
        mode = "dense"
    elif mode == "hybrid" and not has_dense:
        notes.append(Note(SPARSE_ONLY, f"ranked by BM25 alone: {run_dir} has no vectors "
                                       "(written with embed: null)"))
        mode = "sparse"
    if mode == "dense":
        scores = dense_scores(table, manifest, run_dir, question)
        candidates = np.arange(len(table))
    else:
        options = _bm25_options(manifest, run_dir, table)
        terms = query_terms(question, options)
        sparse = _bm25(table, terms, idf_of(run_dir, manifest, terms))
        candidates = np.flatnonzero(sparse > 0)  # a chunk with none of the terms is no hit
        if len(candidates) == 0:
            why = _why_bm25_matches_nothing(question, options, terms, everything, bool(where))
            if mode == "sparse":
                return SearchResult((), (*notes, Note(why.kind, "no hits: " + why.text)), "sparse")
            notes.append(Note(DENSE_ONLY, f"ranked by dense vectors alone, since BM25 matches no "
                                          f"chunk: {why.text}"))
            mode = "dense"
            scores = dense_scores(table, manifest, run_dir, question)
            candidates = np.arange(len(table))
        elif mode == "sparse":
            scores = sparse
        else:
            scores = fused(dense_scores(table, manifest, run_dir, question), sparse)
            candidates = np.arange(len(table))
    best = candidates[np.argsort(-scores[candidates], kind="stable")[:k]]
    picked = table.take(pa.array(best, pa.int64())).to_pylist()
    hits = [_hit(float(scores[i]), row) for i, row in zip(best, picked)]
    if expand:
        hits = _expanded(hits, everything, run_dir, manifest, expand)
    return SearchResult(tuple(hits), tuple(notes), mode)


def _condition_key(condition: Any) -> str:
    """The metadata key a condition tests: ``.key`` of a condition object, else the first item
    of a ``(key, value)`` pair."""
    key = getattr(condition, "key", None)
    return key if isinstance(key, str) else condition[0]


def _describe(condition: Any) -> str:
    """A condition as the user wrote it: its ``spec`` when it keeps one, ``key=value`` for a
    pair, else its own text."""
    spec = getattr(condition, "spec", None)
    if isinstance(spec, str):
        return spec
    if type(condition) is tuple and len(condition) == 2:
        return f"{condition[0]}={condition[1]}"
    return str(condition)


def _quoted(names: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(f"'{name}'" for name in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _why_nothing_matches(metadata: list[str | None], where: list) -> Note:
    """Why no chunk meets ``where``: a key that no chunk has, else the conditions that match
    no chunk alone, else the combination. Read only for an empty result."""
    keys: set[str] = set()
    for text in metadata:
        fields = json.loads(text) if text else {}
        if isinstance(fields, dict):
            keys.update(fields)
    missing = list(dict.fromkeys(_condition_key(c) for c in where if _condition_key(c) not in keys))
    if missing:
        noun = "the key" if len(missing) == 1 else "the keys"
        return Note(WHERE_UNKNOWN_KEY, f"no hits: no chunk's metadata has {noun} {_quoted(missing)}")
    alone = [c for c in where if len(where) > 1 and not any(matches(text, [c]) for text in metadata)]
    if alone or len(where) == 1:
        shown = " ".join(f"--where {_describe(c)}" for c in (alone or where))
        return Note(WHERE_NO_MATCH, f"no hits: no chunk matches {shown}")
    shown = " ".join(f"--where {_describe(c)}" for c in where)
    return Note(WHERE_NO_MATCH, f"no hits: no chunk matches {shown} together (each alone matches some)")


def _why_bm25_matches_nothing(question: str, options: SparseOptions, terms: Sequence[int],
                              everything: pa.Table, filtered: bool) -> Note:
    """Why no chunk ranked holds a term of ``question`` (its term ids ``terms``)."""
    if not terms:
        words = list(dict.fromkeys(analyze(question, dataclasses.replace(options, stop_words=None,
                                                                         stemmer=None))))
        if words:
            return Note(NO_QUERY_TERMS, f"the question has no searchable term: every word of it is "
                                        f"a stop word ({_quoted(words)}), and BM25 indexes none")
        return Note(NO_QUERY_TERMS, "the question has no searchable term: BM25 reads words of two "
                                    "or more letters or digits, and it has none")
    analyzed = _quoted(list(dict.fromkeys(analyze(question, options))))
    if filtered and _holds_any(everything, terms):
        return Note(TERMS_NOT_FOUND, f"none of the question's terms after analysis ({analyzed}) "
                                     "occurs in the chunks that meet --where")
    return Note(TERMS_NOT_FOUND, f"none of the question's terms after analysis ({analyzed}) "
                                 "occurs in this index")


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
        table = _read_shard(path, lambda shard: shard.read(columns=["doc_id", "text", "status"]))
        table = table.filter(pc.and_(pc.is_in(table.column("doc_id"), pa.array(doc_ids)),
                                     pc.equal(table.column("status"), "kept")))
        found.update(zip(table.column("doc_id").to_pylist(), table.column("text").to_pylist()))
    return found
