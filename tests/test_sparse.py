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
    query_terms,
    term_counts,
    term_id,
)
from tests.beam_helpers import fnapi_pipeline
from transforms.sparse import SparseVectors

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
    counted = [term_counts(text, options) for text in texts]
    stats = corpus_stats(counted)
    return [(ids, bm25_weights(ids, counts, stats, options)) for ids, counts in counted], stats


def dot(vector, question: str, options: SparseOptions = SparseOptions()) -> float:
    ids, weights = vector
    wanted = set(query_terms(question, options))
    return sum(w for i, w in zip(ids, weights) if i in wanted)


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


def test_beam_stage_weighs_every_chunk_with_corpus_statistics() -> None:
    chunks = [ChunkRecord("d", f"d#{i}", i, i, i + 1, (), text, 1) for i, text in enumerate(CORPUS)]
    vectors, stats = index([c.search_text for c in chunks])
    expected = [(c.chunk_id, ids, tuple(np.float32(w).item() for w in weights))
                for c, (ids, weights) in zip(chunks, vectors)]
    with fnapi_pipeline() as p:
        out = p | beam.Create(chunks) | SparseVectors(SparseOptions())
        assert_that(out.chunks | beam.Map(lambda c: (c.chunk_id, c.sparse_indices, c.sparse_values)),
                    equal_to(expected), label="Weights")
        assert_that(out.stats | beam.Map(lambda s: (s.documents, s.total_length, s.df)),
                    equal_to([(stats.documents, stats.total_length, stats.df)]), label="Stats")
        assert_that(out.terms, equal_to(sorted(stats.df.items())), label="Terms")
