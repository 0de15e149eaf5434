"""Query an index from its Parquet shards alone: :mod:`chunkline.index.query` (the per-question
path and its reference scores), with the result types of :mod:`chunkline.index.results` and the
pieces :mod:`chunkline.index.ranking` shares with the search index. All of it reads without
Beam; re-exported here for ``chunkline query`` and every existing import."""

from chunkline.index.query import dense_scores, idf_of, search, search_result, sparse_scores
from chunkline.index.ranking import (RRF_K, bm25_options, descending, embed_options, fused, has_bm25,
                                     has_vectors, load_chunks, no_bm25, no_vectors, run_dir_of,
                                     stored_vectors, top)
from chunkline.index.results import (DENSE_ONLY, EMPTY_INDEX, MODES, NO_QUERY_TERMS, NOT_READABLE,
                                     NOTE_KINDS, SPARSE_ONLY, TERMS_NOT_FOUND, UNPROTECTED,
                                     WHERE_NO_MATCH, WHERE_UNKNOWN_KEY, Hit, Mode, Note,
                                     SearchResult)
from chunkline.index.tables import read_shard

__all__ = ["DENSE_ONLY", "EMPTY_INDEX", "MODES", "NO_QUERY_TERMS", "NOTE_KINDS", "NOT_READABLE",
           "RRF_K", "SPARSE_ONLY", "TERMS_NOT_FOUND", "UNPROTECTED", "WHERE_NO_MATCH",
           "WHERE_UNKNOWN_KEY", "Hit", "Mode", "Note", "SearchResult", "bm25_options",
           "dense_scores", "descending", "embed_options", "fused", "has_bm25", "has_vectors",
           "idf_of", "load_chunks", "no_bm25", "no_vectors", "read_shard", "run_dir_of", "search",
           "search_result", "sparse_scores", "stored_vectors", "top"]
