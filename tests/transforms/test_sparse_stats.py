"""The corpus statistics are one element whatever the input: none of the chunks (every document
rejected), some, or chunks and statistics carried from a previous run; the document frequencies
come per share of the term space, every share once, each term in its own share."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.testing.util import assert_that, equal_to

from chunkline.records import ChunkRecord
from chunkline.sparse import CorpusStats, SparseOptions, term_counts
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.sparse import SparseCounts, term_share


def _chunk(text: str, index: int) -> ChunkRecord:
    return ChunkRecord(doc_id="d", chunk_id=f"d#{index}", chunk_index=index, start=0, end=len(text),
                       headings=(), text=text, tokens=3)


def _as_tuple(stats: CorpusStats) -> tuple:
    return stats.documents, stats.total_length, stats.terms


def _share_rows(share_terms) -> list[tuple[int, int, int]]:
    share, (ids, dfs) = share_terms
    return [(share, int(i), int(d)) for i, d in zip(ids, dfs)] or [(share, -1, -1)]


def test_statistics_of_no_chunks_are_one_empty_element() -> None:
    with fnapi_pipeline() as pipeline:
        none = pipeline | beam.Create([]).with_output_types(ChunkRecord)
        stats = none | SparseCounts(SparseOptions(), shares=3)
        assert_that(stats.stats | beam.Map(_as_tuple), equal_to([(0, 0, 0)]), label="Stats")
        assert_that(stats.terms | beam.FlatMap(_share_rows),
                    equal_to([(0, -1, -1), (1, -1, -1), (2, -1, -1)]), label="Shares")


def test_statistics_sum_new_and_carried_chunks() -> None:
    texts = ["pumps stall at night", "the night shift restarts pumps"]
    carried = CorpusStats(2, 7, {11: 2, 12: 1})
    expected_df: dict[int, int] = {11: 2, 12: 1}
    length = 7
    for text in texts:
        ids, counts = term_counts(_chunk(text, 0).search_text, SparseOptions())
        length += sum(counts)
        for term in ids:
            expected_df[term] = expected_df.get(term, 0) + 1
    with fnapi_pipeline() as pipeline:
        chunks = pipeline | "Chunks" >> beam.Create([_chunk(t, i) for i, t in enumerate(texts)])
        earlier = pipeline | "Carried" >> beam.Create([carried])
        stats = (chunks, earlier) | SparseCounts(SparseOptions(), shares=5)
        assert_that(stats.stats | beam.Map(_as_tuple),
                    equal_to([(4, length, len(expected_df))]), label="Stats")
        rows = [(int(term_share(np.array([t]), 5)[0]), t, df) for t, df in expected_df.items()]
        present = {share for share, _, _ in rows}
        assert_that(stats.terms | beam.FlatMap(_share_rows),
                    equal_to(rows + [(s, -1, -1) for s in range(5) if s not in present]), label="Shares")
