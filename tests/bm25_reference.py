"""A reference BM25 to test ours against: bm25s' tokenizer and its Lucene scoring functions
(``bm25s.scoring``), given the corpus statistics an index recorded (its reference mean length)
rather than the ones bm25s would compute. Independent of chunkline's hashed term ids, of how
the weights are split between document and query, and of every store."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import bm25s
import numpy as np
import Stemmer
from bm25s.scoring import _score_idf_lucene, _score_tfc_lucene

_STEMMER = Stemmer.Stemmer("english")


def tokens(texts: Sequence[str]) -> list[list[str]]:
    return bm25s.tokenize(list(texts), stopwords="en", stemmer=_STEMMER, return_ids=False,
                          show_progress=False)


def reference_scores(texts: Sequence[str], questions: Sequence[str], avgdl: float | None = None,
                     k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """``[question, text]`` Lucene BM25 scores; ``avgdl`` the mean length to normalise by (None:
    the corpus's own, as bm25s itself would)."""
    corpus = [Counter(doc) for doc in tokens(texts)]
    lengths = [sum(doc.values()) for doc in corpus]
    mean = float(np.mean(lengths)) if avgdl is None else avgdl
    df: Counter = Counter()
    for doc in corpus:
        df.update(doc.keys())
    n = len(corpus)
    out = np.zeros((len(questions), n))
    for qi, question in enumerate(tokens(questions)):
        for term in dict.fromkeys(question):
            if not df[term]:
                continue
            idf = _score_idf_lucene(df[term], n)
            for di, doc in enumerate(corpus):
                if term in doc:
                    out[qi, di] += idf * _score_tfc_lucene(doc[term], lengths[di], mean, k1, b)
    return out
