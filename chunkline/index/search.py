"""A run opened once and searched many times: what a service holds.

``chunkline query`` answers one question and exits, so it may read the shards for it; a
process that answers thousands should not (472 questions over ~3,000 chunks took 0.53 s each,
the ranking a few milliseconds of it). :meth:`Index.open` reads the run once and keeps what
ranking reads, in the form it is read in:

- the columns a hit is made of, as one Arrow table with one chunk per column (``take`` of k rows
  then copies k rows, not the whole column);
- the vectors as one read-only float32 matrix, dequantized and normalized as the dense ranking
  wants them;
- the sparse vectors flattened in chunk order, with an inverted index beside them: every
  (term, position) pair as one sorted 64-bit key, so a question's postings are two binary
  searches per term instead of a scan of every stored term;
- each term's document frequency (the run's ``terms`` table), for the question's IDF.

Three parts are built on first use, once: the model (the first question that needs a vector, or
:meth:`Index.load_model`), the metadata filter (the first ``where``: each distinct metadata
object parsed once, and each key's distinct values) and the documents' text (the first
``expand``). A one-shot query pays for none it does not use.

The ranking is :mod:`chunkline.index.query`'s (dense, BM25, reciprocal rank fusion, the same
notes and fallbacks); :func:`chunkline.index.query.search_result` is
``Index.open(output).search(...)``. One
difference from the per-question path as it was before this module: a chunk's dense score is
taken from one product of the whole matrix with the question and then filtered, so it is the
same with or without ``where``. The old path multiplied only the kept rows, and BLAS
gives a row's dot product to the last bit depending on where the row sits in the matrix.

A service that embeds its questions on a machine with few cores should run with
``OMP_WAIT_POLICY=PASSIVE`` in its environment: PyTorch's OpenMP threads otherwise spin after
each forward pass and hold the cores OpenBLAS's threads want for the dense product that follows
(bench/search_api_bench.py: end to end p95 ~110 ms against ~20 ms on 2 cores, 100,000 chunks).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Generic, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkline.access import PUBLIC, caller_principals, principal_set
from chunkline.metadata import matches
from chunkline.sparse import SparseOptions, analyze, query_terms, query_weights
from chunkline.index.manifest import load_manifest
from chunkline.index.manifest_types import Access, Manifest
from chunkline.index.models import local_model_dir
from chunkline.index.ranking import (
    bm25_options,
    embed_options,
    fused,
    has_bm25,
    has_vectors,
    load_chunks,
    no_bm25,
    no_vectors,
    run_dir_of,
    stored_vectors,
    top,
)
from chunkline.index.results import (
    DENSE_ONLY,
    EMPTY_INDEX,
    MODES,
    NO_QUERY_TERMS,
    NOT_READABLE,
    SPARSE_ONLY,
    TERMS_NOT_FOUND,
    UNPROTECTED,
    WHERE_NO_MATCH,
    WHERE_UNKNOWN_KEY,
    Hit,
    Mode,
    Note,
    SearchResult,
)
from chunkline.index.tables import read_table

if TYPE_CHECKING:  # the embedder's module is imported when a question is embedded
    from chunkline.embedder import EmbedOptions

# What a hit is made of, and what expansion reads of a chunk's neighbours.
_ROW_COLUMNS = ["doc_id", "chunk_id", "chunk_index", "headings", "start", "end", "text", "tokens"]
_OPTIONAL_ROW_COLUMNS = ["metadata", "page_start", "page_end"]

T = TypeVar("T")


class AccessRequired(ValueError):
    """A search of a protected run (written with access control) that names no principal."""


def check_principals(principals: Any) -> tuple[str, ...] | None:
    """The caller's principals checked, sorted, each once (a string: comma-separated names, as
    ``--as`` takes them); None stays None. AccessError (a ValueError) for a malformed name."""
    if principals is None:
        return None
    if isinstance(principals, str):
        return caller_principals(principals)
    return principal_set(principals, "principals")


def check_question(question: Any, k: Any, mode: Any, expand: Any) -> None:
    """ValueError, with the message ``chunkline query`` prints, for an argument no search takes."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the question is empty")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(expand, bool) or not isinstance(expand, int) or expand < 0:
        raise ValueError(f"expand must be an integer >= 0, got {expand!r}")


_MODELS: dict[Any, Any] = {}
_MODELS_LOCK = threading.Lock()


def _loaded_model(options: Any) -> Any:
    """The model ``options`` name, loaded once per process: every index of one model opened in
    a process (a notebook or a test asking ``chunkline query`` many questions, one run after
    another) shares it, as the workers share theirs (transforms/model_cache.py)."""
    from chunkline.embedder import load_model

    with _MODELS_LOCK:
        if options not in _MODELS:
            _MODELS[options] = load_model(options)
        return _MODELS[options]


class Index:
    """One run of an index, loaded for searching: ``Index.open(output)``, then
    :meth:`search` as often as wanted. ``len(index)`` is its number of chunks.

    >>> index = Index.open("out")                                   # doctest: +SKIP
    >>> index.search("how long should the arm warm up?", k=3).hits  # doctest: +SKIP

    Safe to share between threads. Nothing loaded at open changes afterwards (the arrays are
    read-only, Arrow tables immutable); the parts built on first use (model, metadata filter,
    documents' text) are built once, under a lock each, and never change either. The model is
    called under a lock: a Hugging Face fast tokenizer can raise "Already borrowed" when two
    threads call it at once (huggingface/tokenizers#537), and one forward pass already uses every
    core, so little is lost; the ranking itself runs in parallel (numpy and Arrow release the GIL).
    """

    def __init__(self, run_dir: str, manifest: Manifest, chunks: pa.Table) -> None:
        """The index of the run ``run_dir`` from its manifest and its chunks as
        :func:`chunkline.index.ranking.load_chunks` reads them; :meth:`open` is the usual way in."""
        self.run_dir = run_dir
        self.run_id: str = manifest.run_id
        self._bm25_chunks = manifest.bm25.chunks if manifest.bm25 is not None else 0
        self._size = len(chunks)
        present = set(chunks.column_names)
        self._rows = chunks.select(_ROW_COLUMNS + [c for c in _OPTIONAL_ROW_COLUMNS if c in present]
                                   ).combine_chunks()
        self._vectors: np.ndarray | None = None
        self._renormalize = False
        self._embed: EmbedOptions | None = None
        self._postings: _Postings | None = None
        self._bm25: SparseOptions | None = None
        self._df: tuple[np.ndarray, np.ndarray] | None = None
        if self._size and has_vectors(manifest, chunks):
            self._embed = embed_options(manifest)
            matrix, self._renormalize = stored_vectors(chunks, self._embed)
            self._vectors = _read_only(np.ascontiguousarray(matrix, dtype=np.float32))
        if self._size and has_bm25(manifest, chunks):
            self._bm25 = bm25_options(manifest, run_dir, chunks)
            self._postings = _Postings(chunks)
            if manifest.bm25 is not None and manifest.bm25.weights == "tf":  # else the stored weights hold IDF already
                self._df = _document_frequencies(run_dir, manifest)
        # A protected run: its manifest records the access policy it was written under. Its
        # chunks without a principals column would be readable by nobody: refuse to open it.
        self._access: Access | None = manifest.access
        self._readers: _Readers | None = None
        if self._access is not None and self._size:
            if "principals" not in present:
                raise ValueError(f"{run_dir} was written with access control but its chunks have "
                                 "no principals column: the shards are damaged or not this run's")
            self._readers = _Readers(chunks.column("principals"))
        self._filters = _Once(lambda: _Filters(self._rows.column("metadata")))
        self._documents = _Once(lambda: _Documents(self._rows, run_dir, manifest))
        self._model = _Once(self._read_model)
        self._model_calls = threading.Lock()

    @classmethod
    def open(cls, output: str) -> "Index":
        """The run ``output`` names (``output/LATEST``, or ``output`` itself when it holds a
        manifest), read once. FileNotFoundError when there is none; ValueError (one line, naming
        the file) for a malformed manifest or a shard that is missing or not readable Parquet."""
        run_dir = run_dir_of(output)
        manifest = load_manifest(run_dir)
        return cls(run_dir, manifest, load_chunks(run_dir, manifest))

    def __len__(self) -> int:
        return self._size

    @property
    def dim(self) -> int | None:
        """The length of a chunk's (and a question's) vector; None for a run without vectors."""
        return None if self._vectors is None else int(self._vectors.shape[1])

    # --- the question's vector ------------------------------------------------------------

    def load_model(self) -> float:
        """Load the embedding model now rather than on the first question that needs it; the
        seconds the load took (whenever it happened). ValueError for a run without vectors."""
        if self._vectors is None:
            raise ValueError(no_vectors(self.run_dir))
        return self._model.get()[1]

    def embed(self, question: str) -> np.ndarray:
        """``question``'s vector as the index's own model makes it (float32, ``dim`` values):
        what :meth:`search_vector` takes. Loads the model on first use."""
        from chunkline.embedder import embed_texts

        if self._vectors is None or self._embed is None:  # (set together)
            raise ValueError(no_vectors(self.run_dir))
        model, _ = self._model.get()
        with self._model_calls:
            return embed_texts(model, [question], self._embed)[0]

    def _read_model(self) -> tuple[Any, float]:
        if self._embed is None:
            raise ValueError(no_vectors(self.run_dir))
        started = time.perf_counter()
        model = _loaded_model(dataclasses.replace(self._embed, model=local_model_dir(self._embed.model)))
        return model, time.perf_counter() - started

    # --- searching --------------------------------------------------------------------------

    @property
    def protected(self) -> bool:
        """Whether the run was written with access control: every search names its caller's
        principals (``principals=``), and sees only the chunks they may read."""
        return self._access is not None

    def search(self, question: str, k: int = 5, *, mode: Mode = "hybrid", where: Sequence[Any] = (),
               expand: int = 0, principals: Sequence[str] | str | None = None) -> SearchResult:
        """:func:`chunkline.index.query.search_result` on this run: the ``k`` best chunks for
        ``question`` by ``mode`` among those meeting ``where`` (and, on a protected run, those
        ``principals`` may read), each grown by ``expand`` tokens of neighbours, with the
        notes; the question embedded here when the ranking needs it. :class:`AccessRequired`
        for a protected run searched without ``principals``."""
        check_question(question, k, mode, expand)
        caller = check_principals(principals)
        return self._rank(question, None, k, list(where), mode, expand, caller)

    def search_vector(self, question: str, vector: np.ndarray, k: int = 5, *, mode: Mode = "hybrid",
                      where: Sequence[Any] = (), expand: int = 0,
                      principals: Sequence[str] | str | None = None) -> SearchResult:
        """:meth:`search` with the question's vector given (as :meth:`embed` returns it), so no
        model runs: BM25 still reads ``question``. ValueError for a vector of another length."""
        check_question(question, k, mode, expand)
        caller = check_principals(principals)
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        if self._vectors is not None and vector.shape != (self._vectors.shape[1],):
            raise ValueError(f"the question's vector has shape {vector.shape}; this index's vectors "
                             f"have {self._vectors.shape[1]} values")
        return self._rank(question, vector, k, list(where), mode, expand, caller)

    def readable(self, principals: Sequence[str] | str) -> np.ndarray:
        """For each chunk (in the run's order), whether a caller holding ``principals`` may read
        it: it names one of them or the public principal. Every chunk on an unprotected run."""
        caller = check_principals(principals) or ()
        if self._access is None:
            return np.ones(self._size, bool)
        if self._readers is None:  # a protected run without a chunk
            return np.zeros(self._size, bool)
        return self._readers.holding((*caller, self._access.public or PUBLIC))

    def _rank(self, question: str, vector: np.ndarray | None, k: int, where: list, mode: str,
              expand: int, caller: tuple[str, ...] | None = None) -> SearchResult:
        run_dir = self.run_dir
        notes: list[Note] = []
        readable = None  # every chunk, else which chunks the caller may read
        if self._access is not None:
            if caller is None:
                raise AccessRequired(f"{run_dir} is protected (written with access control): name "
                                     "the caller's principals (--as PRINCIPAL[,...])")
            readable = self.readable(caller)
        elif caller is not None:
            notes.append(Note(UNPROTECTED, f"{run_dir} was written without access control: "
                                           "every chunk is readable, the principals filter nothing"))
        if self._size == 0:
            return SearchResult((), (*notes, Note(EMPTY_INDEX, f"no hits: {run_dir} holds no chunk")))
        if readable is not None and not readable.any():
            named = ", ".join(caller or ())
            return SearchResult((), (Note(NOT_READABLE, "no hits: no chunk of this index is readable "
                                                        f"by {named or 'a caller without principals'}"),))
        rows = None if readable is None else np.flatnonzero(readable)  # ascending positions
        if where:
            if "metadata" not in self._rows.column_names:
                raise ValueError(f"{run_dir} has no metadata column (written before metadata "
                                 "support): --where cannot filter it")
            # Filtered before ranking: the k best of the matching chunks, not the matches among k.
            filters = self._filters.get()
            keep = filters.keep(where)
            if readable is not None:
                keep &= readable
            if not keep.any():
                # Said of what the caller may read only: a key or value that only chunks they
                # may not read hold is never named.
                texts = (filters.texts if readable is None
                         else [filters.texts[g] for g in np.unique(filters.group[readable])])
                return SearchResult((), (*notes, _why_nothing_matches(texts, where)))
            rows = np.flatnonzero(keep)
        # Access control, like ``where``, chooses the chunks before any ranking: the k best of
        # what the caller may read, never the readable ones among the k best of all.
        has_dense, has_sparse = self._vectors is not None, self._postings is not None
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
        candidates = None  # every chunk ranked, else the positions (among ``rows``) that may be hits
        if mode == "dense":
            scores = self._dense(question, vector, rows)
        else:
            if self._bm25 is None:
                raise ValueError(no_bm25(run_dir))
            terms = query_terms(question, self._bm25)
            sparse = self._sparse(terms, rows)
            candidates = np.flatnonzero(sparse > 0)  # a chunk with none of the terms is no hit
            if len(candidates) == 0:
                why = self._why_bm25_matches_nothing(question, terms, bool(where), readable is not None)
                if mode == "sparse":
                    return SearchResult((), (*notes, Note(why.kind, "no hits: " + why.text)), "sparse")
                notes.append(Note(DENSE_ONLY, f"ranked by dense vectors alone, since BM25 matches "
                                              f"no chunk: {why.text}"))
                mode = "dense"
                scores, candidates = self._dense(question, vector, rows), None
            elif mode == "sparse":
                scores = sparse
            else:
                scores, candidates = fused(self._dense(question, vector, rows), sparse), None
        best = top(scores, k) if candidates is None else candidates[top(scores[candidates], k)]
        chosen = best if rows is None else rows[best]  # positions in the whole run
        picked = self._rows.take(pa.array(chosen, pa.int64())).to_pylist()
        hits = [_hit(float(scores[i]), row) for i, row in zip(best, picked)]
        if expand:
            hits = self._documents.get().expanded(hits, chosen, expand, readable)
        return SearchResult(tuple(hits), tuple(notes), mode)

    def _dense(self, question: str, vector: np.ndarray | None, rows: np.ndarray | None) -> np.ndarray:
        """Cosine of each chunk (of ``rows``) to the question: one product with the whole
        matrix, then the rows kept (see the module's note on ``where``)."""
        if self._vectors is None:
            raise ValueError(no_vectors(self.run_dir))
        query = self.embed(question) if vector is None else vector
        if self._renormalize:
            query = query / np.linalg.norm(query)
        scores = self._vectors @ query
        return scores if rows is None else scores[rows]

    def _sparse(self, terms: Sequence[int], rows: np.ndarray | None) -> np.ndarray:
        """BM25 of each chunk (of ``rows``): its stored weights times the IDF of the question's
        distinct terms, summed."""
        if self._postings is None:
            raise ValueError(no_bm25(self.run_dir))
        scores = self._postings.scores(terms, self._idf(terms), self._size)
        return scores if rows is None else scores[rows]

    def _idf(self, terms: Sequence[int]) -> list[float]:
        """:func:`chunkline.index.query.idf_of` from the document frequencies read at open."""
        if self._df is None or not terms:
            return [1.0] * len(terms)
        ids, counts = self._df
        at = np.minimum(np.searchsorted(ids, terms), len(ids) - 1) if len(ids) else None
        df = {} if at is None else {t: int(counts[i]) for t, i in zip(terms, at) if ids[i] == t}
        return query_weights(terms, df, self._bm25_chunks)

    def _why_bm25_matches_nothing(self, question: str, terms: Sequence[int], filtered: bool,
                                  restricted: bool = False) -> Note:
        """Why no chunk ranked holds a term of ``question`` (its term ids ``terms``).
        ``restricted``: only what the caller may read was ranked, and the note never says
        whether the chunks they may not read hold the terms."""
        options = self._bm25
        if options is None or self._postings is None:  # (set together)
            raise ValueError(no_bm25(self.run_dir))
        if not terms:
            words = list(dict.fromkeys(analyze(question, dataclasses.replace(options, stop_words=None,
                                                                             stemmer=None))))
            if words:
                return Note(NO_QUERY_TERMS, f"the question has no searchable term: every word of it "
                                            f"is a stop word ({_quoted(words)}), and BM25 indexes none")
            return Note(NO_QUERY_TERMS, "the question has no searchable term: BM25 reads words of "
                                        "two or more letters or digits, and it has none")
        analyzed = _quoted(list(dict.fromkeys(analyze(question, options))))
        if restricted:
            among = "the chunks you may read" + (" that meet --where" if filtered else "")
            return Note(TERMS_NOT_FOUND, f"none of the question's terms after analysis ({analyzed}) "
                                         f"occurs in {among}")
        if filtered and self._postings.holds_any(terms):
            return Note(TERMS_NOT_FOUND, f"none of the question's terms after analysis ({analyzed}) "
                                         "occurs in the chunks that meet --where")
        return Note(TERMS_NOT_FOUND, f"none of the question's terms after analysis ({analyzed}) "
                                     "occurs in this index")


class _Once(Generic[T]):
    """A value made on the first :meth:`get`, by one thread, and kept. A failed make is not
    kept: the next call tries again (a shard fixed meanwhile is read)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._made: tuple[T] | None = None

    def get(self) -> T:
        made = self._made
        if made is None:
            with self._lock:
                if self._made is None:
                    self._made = (self._make(),)
                made = self._made
        return made[0]


class _Readers:
    """Who may read each chunk: the ``principals`` column as an index from each principal to
    the chunks naming it (positions ascending), so a caller's chunks are a slice per principal
    they hold, not a scan of every chunk's list."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        lists = column.combine_chunks()
        self._size = len(lists)
        lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
        encoded = pc.dictionary_encode(pc.list_flatten(lists))
        self._names = {name: i for i, name in enumerate(encoded.dictionary.to_pylist())}
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        order = np.argsort(codes, kind="stable")
        self._chunks = _read_only(np.repeat(np.arange(self._size), lengths)[order])
        self._from = _read_only(np.searchsorted(codes[order], np.arange(len(self._names) + 1)))

    def holding(self, principals: Sequence[str]) -> np.ndarray:
        """For each chunk, whether it names one of ``principals``."""
        keep = np.zeros(self._size, bool)
        for name in principals:
            at = self._names.get(name)
            if at is not None:
                keep[self._chunks[self._from[at]:self._from[at + 1]]] = True
        return keep


class _Postings:
    """The run's sparse vectors flattened in chunk order (term ids, weights, each entry's chunk)
    and an inverted index over them: each entry as ``term << shift | position``, sorted, so the
    entries of one term are one contiguous, position-ordered slice."""

    def __init__(self, chunks: pa.Table) -> None:
        indices = chunks.column("sparse_indices").combine_chunks()
        self.ids = _read_only(pc.list_flatten(indices).to_numpy(zero_copy_only=False))
        self.weights = _read_only(pc.list_flatten(chunks.column("sparse_values").combine_chunks())
                                  .to_numpy(zero_copy_only=False))
        lengths = pc.fill_null(pc.list_value_length(indices), 0).to_numpy(zero_copy_only=False)
        self.chunk = _read_only(np.repeat(np.arange(len(chunks), dtype=np.int32), lengths))
        self._shift = max(len(self.ids).bit_length(), 1)
        highest = int(self.ids.max()) if len(self.ids) else 0
        if len(self.ids) and (int(self.ids.min()) < 0 or highest.bit_length() + self._shift > 63):
            raise ValueError(f"sparse term ids from {int(self.ids.min())} to {highest}: not what "
                             "chunkline writes (0 to 2^29)")
        # One sort of 64-bit keys: numpy sorts these vectorized, ~3x faster than an argsort.
        key = self.ids.astype(np.uint64)
        key <<= np.uint64(self._shift)
        key |= np.arange(len(key), dtype=np.uint64)
        key.sort()
        self._keys = _read_only(key)

    def _slices(self, terms: Sequence[int]) -> list[np.ndarray]:
        found = []
        for term in sorted({t for t in terms if 0 <= t and int(t).bit_length() + self._shift <= 63}):
            lo, hi = np.searchsorted(self._keys, [np.uint64(term) << np.uint64(self._shift),
                                                  np.uint64(term + 1) << np.uint64(self._shift)])
            if hi > lo:
                found.append(self._keys[lo:hi])
        return found

    def holds_any(self, terms: Sequence[int]) -> bool:
        return bool(self._slices(terms))

    def positions(self, terms: Sequence[int]) -> np.ndarray:
        """Where the flattened vectors hold one of ``terms``, ascending: what
        ``np.flatnonzero(np.isin(ids, terms))`` gives, without reading every id."""
        slices = self._slices(terms)
        if not slices:
            return np.zeros(0, np.intp)
        found = np.concatenate(slices) & np.uint64((1 << self._shift) - 1)
        found.sort()
        return found.astype(np.intp)

    def scores(self, terms: Sequence[int], weights: Sequence[float], size: int) -> np.ndarray:
        """Each chunk's sum of its stored weight times the question's weight over ``terms``
        (float64), the entries added in stored order as :func:`chunkline.index.query.sparse_scores`
        adds them, so the sums agree to the bit."""
        at = self.positions(terms)
        order = np.argsort(np.asarray(terms, dtype=np.int64))
        sorted_terms = np.asarray(terms, dtype=np.int64)[order]
        sorted_weights = np.asarray(weights, dtype=np.float64)[order]
        query = sorted_weights[np.searchsorted(sorted_terms, self.ids[at])]
        return np.bincount(self.chunk[at], weights=self.weights[at].astype(np.float64) * query,
                           minlength=size)


def _document_frequencies(run_dir: str, manifest: Manifest) -> tuple[np.ndarray, np.ndarray]:
    """(term ids ascending, their df) from the run's ``terms`` table; a term listed twice keeps
    its last entry, as :func:`chunkline.index.query.idf_of` reads it."""
    found = read_table(run_dir, manifest, "terms", ["term_id", "df"])
    if found is None or not len(found):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    every = found.column("term_id").to_numpy(zero_copy_only=False).astype(np.int64)[::-1]
    df = found.column("df").to_numpy(zero_copy_only=False).astype(np.int64)[::-1]
    unique, last = np.unique(every, return_index=True)
    return _read_only(unique), _read_only(df[last])


class _Filters:
    """Which chunks meet a ``where``, each distinct metadata object parsed once.

    A condition tests one key, and :func:`chunkline.metadata.matches` is the one home of the
    rule: so each key's distinct values are kept (as JSON), and a condition is asked of each
    distinct value of its key once, as a one-key object; a chunk meets it when its metadata's
    value does. A question filtered on ``lang`` costs a ``matches`` per language, not per chunk.
    """

    def __init__(self, metadata: pa.ChunkedArray) -> None:
        encoded = pc.dictionary_encode(pc.fill_null(metadata.combine_chunks(), ""))
        self.texts: list[str] = encoded.dictionary.to_pylist()  # each distinct metadata text
        self.group = _read_only(encoded.indices.to_numpy(zero_copy_only=False))  # each chunk's
        values: dict[str, dict[str, int]] = {}
        members: dict[str, tuple[list[int], list[int]]] = {}
        self.odd: list[int] = []  # metadata that is not a JSON object: asked whole, per question
        for group, text in enumerate(self.texts):
            fields = json.loads(text) if text else {}
            if not isinstance(fields, dict):
                self.odd.append(group)
                continue
            for key, value in fields.items():
                known = values.setdefault(key, {})
                slot = known.setdefault(json.dumps(value), len(known))
                groups, slots = members.setdefault(key, ([], []))
                groups.append(group)
                slots.append(slot)
        # key -> (its distinct values as JSON, each group's value among them or -1: no such key)
        self.keys: dict[str, tuple[list[str], np.ndarray]] = {}
        for key, known in values.items():
            of_group = np.full(len(self.texts), -1, np.int64)
            groups, slots = members[key]
            of_group[groups] = slots
            self.keys[key] = (list(known), _read_only(of_group))

    def keep(self, where: Sequence[Any]) -> np.ndarray:
        """For each chunk, whether its metadata meets every condition of ``where``."""
        met = np.ones(len(self.texts), bool)
        for condition in where:
            key = _condition_key(condition)
            if key not in self.keys:
                met[:] = False
                break
            texts, of_group = self.keys[key]
            one_key = "{" + json.dumps(key) + ":"
            verdicts = [matches(one_key + value + "}", [condition]) for value in texts]
            met &= np.array(verdicts + [False])[of_group]  # -1, the key missing: never met
        for group in self.odd:
            met[group] = matches(self.texts[group], where)
        return met[self.group]


class _Documents:
    """What ``expand`` reads: the kept documents' text and, for each chunk, its document's other
    chunks (by ``chunk_index``: start, end, tokens)."""

    def __init__(self, rows: pa.Table, run_dir: str, manifest: Manifest) -> None:
        encoded = pc.dictionary_encode(rows.column("doc_id").combine_chunks())
        self._doc = encoded.indices.to_numpy(zero_copy_only=False)
        self._by_doc = np.argsort(self._doc, kind="stable")  # each document's chunks in run order
        self._from = np.searchsorted(self._doc[self._by_doc], np.arange(len(encoded.dictionary) + 1))
        self._spans = [rows.column(name).to_numpy(zero_copy_only=False)
                       for name in ("chunk_index", "start", "end", "tokens")]
        kept = read_table(run_dir, manifest, "documents", ["doc_id", "text", "status"],
                          filters=[("status", "=", "kept")])
        self._texts = None if kept is None else kept.select(["doc_id", "text"])
        ids = [] if self._texts is None else self._texts.column("doc_id").to_pylist()
        self._text_row = {doc_id: row for row, doc_id in enumerate(ids)}  # a later copy wins

    def _siblings(self, row: int, readable: np.ndarray | None = None) -> dict[int, tuple[int, int, int]]:
        doc = self._doc[row]
        members = self._by_doc[self._from[doc]:self._from[doc + 1]]
        if readable is not None:
            # A document's chunks share its principals; kept apart anyway, so that expansion
            # can never reach a chunk the caller may not read, whatever the shards hold.
            members = members[readable[members]]
        index, start, end, tokens = (span[members].tolist() for span in self._spans)
        return {i: (s, e, t) for i, s, e, t in zip(index, start, end, tokens)}

    def expanded(self, hits: list[Hit], rows: np.ndarray, budget: int,
                 readable: np.ndarray | None = None) -> list[Hit]:
        """Each hit (the chunk at ``rows[i]``) grown by its document's neighbouring chunks (the
        nearer first, before and after in turn) while the tokens of all stay within ``budget``;
        the span is cut from ``documents.text``, so its offsets are exact. ``readable``: only
        those chunks may be taken (access control)."""
        out = []
        for hit, row in zip(hits, rows):
            siblings = self._siblings(int(row), readable)
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
            at = self._text_row.get(hit.doc_id)
            text = None if at is None or self._texts is None else self._texts.column("text")[at].as_py()
            out.append(dataclasses.replace(hit, expanded_start=start, expanded_end=end,
                                           expanded_text=text[start:end] if text is not None else None))
        return out


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _hit(score: float, row: dict) -> Hit:
    return Hit(score, row["doc_id"], row["chunk_id"], tuple(row["headings"]), row["start"],
               row["end"], row["text"], row.get("metadata") or "{}", row.get("page_start"),
               row.get("page_end"))


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


def _why_nothing_matches(metadata: Sequence[str | None], where: list) -> Note:
    """Why no chunk meets ``where`` (``metadata``: the run's distinct metadata texts): a key that
    no chunk has, else the conditions that match no chunk alone, else the combination. Read only
    for an empty result."""
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
