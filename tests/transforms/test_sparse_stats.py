"""The corpus statistics are one element whatever the input: none of the chunks (every document
rejected), some, or chunks and statistics carried from a previous run."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to

from chunkline.records import ChunkRecord
from chunkline.sparse import CorpusStats, SparseOptions, term_counts
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.sparse import SparseCounts


def _chunk(text: str, index: int) -> ChunkRecord:
    return ChunkRecord(doc_id="d", chunk_id=f"d#{index}", chunk_index=index, start=0, end=len(text),
                       headings=(), text=text, tokens=3)


def _as_tuple(stats: CorpusStats) -> tuple:
    return stats.documents, stats.total_length, sorted(stats.df.items())


def test_statistics_of_no_chunks_are_one_empty_element() -> None:
    with fnapi_pipeline() as pipeline:
        none = pipeline | beam.Create([]).with_output_types(ChunkRecord)
        stats = none | SparseCounts(SparseOptions())
        assert_that(stats.stats | beam.Map(_as_tuple), equal_to([(0, 0, [])]))


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
        stats = (chunks, earlier) | SparseCounts(SparseOptions())
        assert_that(stats.stats | beam.Map(_as_tuple),
                    equal_to([(4, length, sorted(expected_df.items()))]))
