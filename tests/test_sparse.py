"""BM25 sparse vectors against bm25s (an independent implementation) and the formula."""

from __future__ import annotations

import math

import apache_beam as beam
import bm25s
import numpy as np
import pytest
import Stemmer
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.records import ChunkRecord
from chunkline.sparse import (
    ENGLISH_STOP_WORDS,
    TERM_SPACE,
    SparseOptions,
    analyze,
    bm25_weights,
    corpus_stats,
    document_weights,
    query_terms,
    query_weights,
    reference_length,
    term_counts,
    term_id,
)
from tests.bm25_reference import reference_scores
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.sparse import SparseVectors

CORPUS = [
    "The NR-7 arm must warm up for 30 minutes before calibration.",
    "Calibration of the arm: run the wizard, touch every marker, save the offsets.",
    "Charging stops at 95 percent to protect the battery cells of the courier.",
    "The courier robot carries 40 kg; the arm lifts 7 kg at full reach.",
    "Protective stop E-3112 during calibration: the arm was not warm.",
    "Robots calibrating robots: a short history of automated calibration routines.",
]
QUESTIONS = ["how long should the arm warm up before calibration", "battery charging limit",
             "courier payload kg", "protective stop E-3112", "unrelated words entirely"]


def index(texts: list[str], options: SparseOptions = SparseOptions()):
    """Full BM25 weights (IDF inside), as indexes before the split stored them."""
    counted = [term_counts(text, options) for text in texts]
    stats = corpus_stats(counted)
    return [(ids, bm25_weights(ids, counts, stats, options)) for ids, counts in counted], stats


def dot(vector, question: str, options: SparseOptions = SparseOptions()) -> float:
    ids, weights = vector
    wanted = set(query_terms(question, options))
    return sum(w for i, w in zip(ids, weights) if i in wanted)


def split_scores(texts: list[str], questions: list[str], reference: float | None = None,
                 options: SparseOptions = SparseOptions()) -> np.ndarray:
    """Scores as chunkline ranks now: stored IDF-free weights against ``reference`` (None: the
    corpus mean), the query's IDF from the statistics."""
    counted = [term_counts(text, options) for text in texts]
    stats = corpus_stats(counted)
    reference = stats.avgdl if reference is None else reference
    stored = [dict(zip(ids, document_weights(ids, counts, reference, options))) for ids, counts in counted]
    out = np.zeros((len(questions), len(texts)))
    for qi, question in enumerate(questions):
        terms = query_terms(question, options)
        for term, weight in zip(terms, query_weights(terms, stats.df, stats.documents)):
            for di, doc in enumerate(stored):
                out[qi, di] += weight * doc.get(term, 0.0)
    return out


def test_stop_words_are_bm25s_list() -> None:
    assert ENGLISH_STOP_WORDS == set(bm25s.stopwords.STOPWORDS_EN)


def test_scores_equal_bm25s() -> None:
    vectors, _ = index(CORPUS)
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    retriever.index(bm25s.tokenize(CORPUS, stopwords="en", stemmer=stemmer, show_progress=False),
                    show_progress=False)
    for question in QUESTIONS:
        tokens = bm25s.tokenize([question], stopwords="en", stemmer=stemmer, return_ids=False,
                                show_progress=False)[0]
        tokens = [t for t in dict.fromkeys(tokens) if t in retriever.vocab_dict]
        expected = retriever.get_scores(tokens) if tokens else np.zeros(len(CORPUS))
        ours = np.array([dot(vector, question) for vector in vectors])
        np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_split_weights_score_as_bm25s_on_its_own_statistics() -> None:
    np.testing.assert_allclose(split_scores(CORPUS, QUESTIONS), reference_scores(CORPUS, QUESTIONS),
                               rtol=1e-9, atol=1e-12)
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    retriever.index(bm25s.tokenize(CORPUS, stopwords="en", stemmer=stemmer, show_progress=False),
                    show_progress=False)
    # The reference itself is bm25s: its own retriever agrees where the mean is the corpus's.
    for qi, question in enumerate(QUESTIONS):
        tokens = bm25s.tokenize([question], stopwords="en", stemmer=stemmer, return_ids=False,
                                show_progress=False)[0]
        tokens = [t for t in dict.fromkeys(tokens) if t in retriever.vocab_dict]
        expected = retriever.get_scores(tokens) if tokens else np.zeros(len(CORPUS))
        np.testing.assert_allclose(reference_scores(CORPUS, [question])[0], expected, rtol=1e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="arm robot calibration battery warm the of ", max_size=60),
                min_size=1, max_size=8),
       st.floats(min_value=0.5, max_value=40))
def test_split_weights_score_as_the_reference_on_a_recorded_mean(texts: list[str], reference: float) -> None:
    """Any corpus, any recorded reference length: stored weights times the query's IDF are
    bm25s' Lucene BM25 with that mean length."""
    np.testing.assert_allclose(split_scores(texts, QUESTIONS, reference),
                               reference_scores(texts, QUESTIONS, reference), rtol=1e-9, atol=1e-12)


def test_a_chunks_stored_weights_do_not_move_with_the_corpus() -> None:
    """What lets a store take only changed rows: with the reference carried, a chunk's stored
    weights depend on its own text alone."""
    options = SparseOptions()
    before = [term_counts(text, options) for text in CORPUS]
    after = [term_counts(text, options) for text in CORPUS[:-1] + ["a new chunk about the arm arm arm"]]
    reference = corpus_stats(before).avgdl
    carried, rebased = reference_length(corpus_stats(after).avgdl, reference, options.reference_drift)
    assert not rebased and carried == reference
    for (ids, counts), (ids_after, counts_after) in zip(before[:-1], after[:-1]):
        assert document_weights(ids, counts, reference, options) == \
            document_weights(ids_after, counts_after, carried, options)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.01, max_value=1e6), st.none() | st.floats(min_value=0.01, max_value=1e6),
       st.floats(min_value=0, max_value=1))
def test_reference_is_kept_within_the_bound_and_rebased_past_it(avgdl: float, previous: float | None,
                                                               drift: float) -> None:
    reference, rebased = reference_length(avgdl, previous, drift)
    # A corpus whose chunks hold no term weighs nothing: it keeps the reference for the next.
    assert reference_length(0.0, previous, drift) == ((previous, False) if previous else (0.0, False))
    if previous is None:
        assert (reference, rebased) == (avgdl, False)
    elif abs(avgdl / previous - 1) <= drift:
        assert (reference, rebased) == (previous, False)
    else:
        assert (reference, rebased) == (avgdl, True)
        # A re-based reference is the corpus's own: the next run with the same mean keeps it.
        assert reference_length(avgdl, reference, drift) == (avgdl, False)


def test_weights_follow_the_formula() -> None:
    texts = ["arm arm calibration", "arm battery", "courier"]
    vectors, stats = index(texts)
    avgdl = (3 + 2 + 1) / 3
    arm = term_id("arm")
    ids, weights = vectors[0]
    weight = dict(zip(ids, weights))[arm]
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    assert weight == pytest.approx(idf * 2 / (2 + 1.5 * (1 - 0.75 + 0.75 * 3 / avgdl)))
    assert stats.avgdl == pytest.approx(avgdl) and stats.df[arm] == 2


def test_analysis_is_the_same_at_both_ends() -> None:
    assert analyze("The Robots were CALIBRATING their arms!") == ["robot", "were", "calibr", "arm"]
    assert analyze("naïve café façade Øresund") == ["naïv", "café", "façad", "øresund"]
    plain = SparseOptions(stemmer=None, stop_words=None)
    assert analyze("The robots", plain) == ["the", "robots"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_term_counts_are_sorted_positive_and_in_range(text: str) -> None:
    ids, counts = term_counts(text)
    assert list(ids) == sorted(set(ids)) and all(c > 0 for c in counts)
    assert all(0 <= i < TERM_SPACE for i in ids)
    assert sum(counts) == len(analyze(text))


@pytest.mark.slow
@pytest.mark.parametrize("previous", [None, 8.7, 30.0])
def test_beam_stage_weighs_every_chunk_with_corpus_statistics(previous: float | None) -> None:
    """The stage stores IDF-free weights against the reference: the previous one when the
    corpus mean is within the bound (8.7 here, the mean 8.5), else the corpus's own."""
    chunks = [ChunkRecord("d", f"d#{i}", i, i, i + 1, (), text, 1) for i, text in enumerate(CORPUS)]
    options = SparseOptions()
    counted = [term_counts(c.search_text, options) for c in chunks]
    stats = corpus_stats(counted)
    reference = reference_length(stats.avgdl, previous, options.reference_drift)[0]
    assert reference == (8.7 if previous == 8.7 else stats.avgdl)
    expected = [(c.chunk_id, ids, tuple(np.float32(w).item()
                                        for w in document_weights(ids, counts, reference, options)))
                for c, (ids, counts) in zip(chunks, counted)]
    with fnapi_pipeline() as p:
        out = p | beam.Create(chunks) | SparseVectors(options, previous)
        assert_that(out.chunks | beam.Map(lambda c: (c.chunk_id, c.sparse_indices, c.sparse_values)),
                    equal_to(expected), label="Weights")
        assert_that(out.stats | beam.Map(lambda s: (s.documents, s.total_length, s.terms)),
                    equal_to([(stats.documents, stats.total_length, len(stats.df))]), label="Stats")
        assert_that(out.terms | beam.FlatMap(lambda kv: zip(kv[1][0].tolist(), kv[1][1].tolist())),
                    equal_to(sorted(stats.df.items())), label="Terms")
