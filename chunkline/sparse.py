"""BM25 as sparse vectors: each chunk's ``search_text`` weighted once at index time, so that a
query's score is a dot product with the IDF vector of its terms (Robertson & Zaragoza,
"The Probabilistic Relevance Framework: BM25 and Beyond", 2009; the Lucene variant, as
bm25s implements it: Lù, "BM25S: Orders of magnitude faster lexical search via eager sparse
scoring", 2024).

Analysis, identical at index and query time (:func:`analyze`): lowercase; words are runs of two
or more Unicode word characters (bm25s' and scikit-learn's default pattern ``\\b\\w\\w+\\b``);
English stop words (bm25s' list, Lucene's 33 words) dropped; Snowball English stemming
(PyStemmer). Term ids are hashed, not learned (:func:`term_id`), so a query needs no vocabulary
and two runs agree on every id: the first 8 bytes of BLAKE2b of the term's UTF-8, modulo 2^29
(below pgvector's sparsevec dimension limit of 10^9; Qdrant takes any uint32). Two terms share
an id with probability ~n/2^30 per term for a vocabulary of n: 0.1 % of a million-term vocabulary.

Scores are the Lucene BM25 of bm25s (``method="lucene"``), with N chunks, ``df`` the chunks
holding the term, ``dl`` the chunk's term count and ``avgdl`` a mean length::

    idf = ln(1 + (N - df + 0.5) / (df + 0.5))
    w   = tf / (tf + k1 * (1 - b + b * dl / avgdl))
    score(q, d) = sum over the distinct terms t of q held by d of idf(t) * w(t, d)

A chunk stores ``w`` alone (:func:`document_weights`): it depends on the chunk and one number of
the index, the *reference* mean length, never on N or df. IDF is the query's side
(:func:`query_weights`), from the statistics the run records beside its shards. So a chunk whose
text is unchanged keeps its stored vector when other documents change, and a store synced every
night receives only the changed rows: the split Qdrant makes with ``Modifier.IDF`` (the engine
applies IDF at query time over the points it holds; Lucene computes it at search time as well).

The reference mean length is carried from run to run (:func:`reference_length`) and re-based
onto the corpus's own mean only when that drifts past a stated bound: BM25's length
normalisation is a ratio ``dl / avgdl``, and a mean a few percent off changes every chunk's
weight by less than ``b`` times that share, while a re-base rewrites every stored row once.
With the reference equal to the corpus mean (a first run, or a re-base) the scores equal bm25s'
exactly.

:func:`bm25_weights` keeps the full product (IDF inside) for indexes written before the split.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Iterable, Literal, Mapping

from annotated_types import Ge, Le

from chunkline.options import check_fields, help_text

TERM_SPACE = 2**29
_WORD = re.compile(r"(?u)\b\w\w+\b")
# Lucene's English stop words (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET), bm25s' "en" list.
ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)


@dataclass(frozen=True)
class SparseOptions:
    """BM25 sparse vectors of each chunk's search text."""

    k1: Annotated[float, Ge(0), Le(10)] = field(default=1.5, metadata=help_text(
        "Term frequency saturation (bm25s' default)."))
    b: Annotated[float, Ge(0), Le(1)] = field(default=0.75, metadata=help_text(
        "Length normalisation: 0 none, 1 full."))
    stemmer: Literal["english"] | None = field(default="english", metadata=help_text(
        "Snowball stemmer (PyStemmer); null: terms as written."))
    stop_words: Literal["english"] | None = field(default="english", metadata=help_text(
        "Stop words dropped (Lucene's English list); null: none."))
    reference_drift: Annotated[float, Ge(0), Le(1)] = field(default=0.05, metadata=help_text(
        "How far (a share) the corpus's mean chunk length may drift from the index's reference "
        "mean before a run re-bases it, rewriting every stored row once; 0: every change "
        "re-bases."))

    def __post_init__(self) -> None:
        check_fields(self)


@lru_cache(maxsize=4)
def _stemmer(language: str):
    import Stemmer  # PyStemmer: Snowball in C

    return Stemmer.Stemmer(language)


def analyze(text: str, options: SparseOptions = SparseOptions()) -> list[str]:
    """The terms of ``text`` in order, as both sides of the index see them.

    >>> analyze("The robots were calibrating their arms")
    ['robot', 'were', 'calibr', 'arm']
    """
    words = _WORD.findall(text.lower())
    if options.stop_words == "english":
        words = [word for word in words if word not in ENGLISH_STOP_WORDS]
    if options.stemmer is not None:
        words = _stemmer(options.stemmer).stemWords(words)
    return words


# A term's id is asked for once per occurrence, and a few thousand terms make most of any text's
# occurrences (Zipf): 16,384 terms miss 1 % more often than 65,536 on 4.7 MB of Python's own
# sources, and no slower, where 65,536 (each a term, its int and the cache's link, ~230 bytes)
# held 15 MB for the rest of the job once a table of 100,000 customer ids had filled it.
@lru_cache(maxsize=1 << 14)
def term_id(term: str) -> int:
    """A term's index in the sparse vector: stable across processes and runs."""
    digest = hashlib.blake2b(term.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % TERM_SPACE


def term_counts(text: str, options: SparseOptions = SparseOptions()) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(term ids ascending, their counts) of ``text``: what a chunk contributes to the corpus
    statistics, and its term frequencies. Terms that hash alike count as one."""
    counts = Counter(term_id(term) for term in analyze(text, options))
    ids = tuple(sorted(counts))
    return ids, tuple(counts[i] for i in ids)


@dataclass(frozen=True)
class CorpusStats:
    """What BM25 needs of the whole corpus: chunks, their summed length, each term's document
    frequency (by term id). ``vocabulary``: how many terms have a df, when ``df`` is not held
    here (a pipeline keeps the frequencies in shares of the term space, never in one object)."""

    documents: int
    total_length: int
    df: Mapping[int, int]
    vocabulary: int | None = None

    @property
    def terms(self) -> int:
        """Distinct terms of the corpus."""
        return self.vocabulary if self.vocabulary is not None else len(self.df)

    @property
    def avgdl(self) -> float:
        return self.total_length / self.documents if self.documents else 0.0


def idf(df: int, documents: int) -> float:
    return math.log(1 + (documents - df + 0.5) / (df + 0.5))


def bm25_weights(
    ids: tuple[int, ...], counts: tuple[int, ...], stats: CorpusStats, options: SparseOptions
) -> tuple[float, ...]:
    """The BM25 weight of each term of one chunk (``ids``/``counts`` from :func:`term_counts`)."""
    length = sum(counts)
    norm = options.k1 * (1 - options.b + options.b * length / stats.avgdl) if stats.avgdl else options.k1
    return tuple(
        idf(stats.df[i], stats.documents) * tf / (tf + norm) for i, tf in zip(ids, counts)
    )


def document_weights(
    ids: tuple[int, ...], counts: tuple[int, ...], reference_avgdl: float, options: SparseOptions
) -> tuple[float, ...]:
    """The stored weight of each term of one chunk: BM25's saturated, length-normalised term
    frequency against the index's reference mean length, IDF left to the query."""
    length = sum(counts)
    norm = (options.k1 * (1 - options.b + options.b * length / reference_avgdl)
            if reference_avgdl else options.k1)
    return tuple(tf / (tf + norm) for tf in counts)  # tf >= 1: never 0 / 0


def reference_length(avgdl: float, previous: float | None, drift: float) -> tuple[float, bool]:
    """(the reference mean length a run weighs its chunks with, whether it was re-based): the
    previous run's reference while the corpus mean stays within ``drift`` of it (as a share),
    else the corpus mean itself. A first run (``previous`` None) starts from its own mean."""
    if not avgdl:
        # No chunk holds a term: nothing is weighed, and the reference waits for one that does.
        return (previous, False) if previous else (avgdl, False)
    if previous is None or previous <= 0:
        return avgdl, previous is not None
    if abs(avgdl / previous - 1) > drift:
        return avgdl, True
    return previous, False


def query_weights(terms: Iterable[int], df: Mapping[int, int], documents: int) -> list[float]:
    """The IDF of each of a question's term ids (``query_terms``), from the index's document
    frequencies (a term no chunk holds: 0, it can match nothing) and chunk count."""
    return [idf(df[t], documents) if df.get(t) else 0.0 for t in terms]


def query_terms(question: str, options: SparseOptions = SparseOptions()) -> list[int]:
    """The distinct term ids of a question, in order of first use: its sparse vector is 1 at
    each (a term asked twice counts once)."""
    return list(dict.fromkeys(term_id(term) for term in analyze(question, options)))


def corpus_stats(counted: Iterable[tuple[tuple[int, ...], tuple[int, ...]]]) -> CorpusStats:
    """The statistics of chunks given as their :func:`term_counts`, in one process (the
    pipeline computes the same with a Beam combine, ``transforms/sparse.py``)."""
    documents = length = 0
    df: Counter = Counter()
    for ids, counts in counted:
        documents += 1
        length += sum(counts)
        df.update(ids)
    return CorpusStats(documents, length, dict(df))
