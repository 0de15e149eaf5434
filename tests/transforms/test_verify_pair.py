"""``transforms/carry.py``'s ``verify_pair`` decides per document on whole columns (numpy's
``reduceat`` over each run of one doc_id): on any pair, damaged or not, it finds what a
row-by-row reading of its rules finds, document by document."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkline.carry import embedding_prefix
from chunkline.context.writer import FAILED, OK
from chunkline.transforms.carry import verify_pair

DIM = 4


def _row_by_row(chunks: dict, sides: dict, vectors: list) -> list[tuple]:
    """The rules read one document at a time, in the order verify_pair states them."""
    found, rows, start = [], len(chunks["doc_id"]), 0
    while start < rows:
        end = start + 1
        while end < rows and chunks["doc_id"][end] == chunks["doc_id"][start]:
            end += 1
        span = range(start, end)
        problem = None
        if any(embedding_prefix(chunks["search_text"][i], chunks["context"][i], chunks["table_header"][i],
                                chunks["text"][i]) is None for i in span):
            problem = "a row's search_text does not end with its text"
        elif [chunks["chunk_index"][i] for i in span] != list(range(end - start)) \
                or any(sides["doc_chunks"][i] != end - start for i in span):
            problem = "its chunks are not all there, in order"
        elif len({sides["carry_key"][i] for i in span}) != 1:
            problem = "its rows disagree on the carry key"
        elif any(len(sides["term_ids"][i]) != len(sides["term_counts"][i]) for i in span):
            problem = "term ids and counts differ in length"
        elif any(chunks["context_status"][i].startswith(FAILED) for i in span):
            problem = "a contextual header failed: asked for again"
        elif any(vectors[i] is not None for i in span):
            problem = f"stored vector: {next(vectors[i] for i in span if vectors[i] is not None)}"
        found.append((chunks["doc_id"][start], sides["carry_key"][start], problem))
        start = end
    return found


document = st.tuples(
    st.integers(1, 4),  # chunks
    st.sampled_from(["ok", "prefix", "index", "count", "key", "null key", "terms", "header", "nan", "long"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(document, max_size=12), st.booleans())
def test_each_document_gets_the_verdict_its_rows_give(tmp_path_factory, documents, embedded) -> None:
    chunks = {name: [] for name in ("doc_id", "chunk_index", "search_text", "context", "table_header",
                                    "text", "context_status")}
    sides = {name: [] for name in ("doc_id", "chunk_index", "carry_key", "doc_chunks", "term_ids",
                                   "term_counts")}
    embeddings, expected_vectors = [], []
    for number, (count, defect) in enumerate(documents):
        doc_id = f"d{number:03d}"
        for index in range(count):
            last = index == count - 1
            text = f"text {number}.{index}"
            chunks["doc_id"].append(doc_id)
            chunks["chunk_index"].append(index + (1 if defect == "index" and last else 0))
            chunks["search_text"].append(("# H\n" + text) if not (defect == "prefix" and last) else "other")
            chunks["context"].append("")
            chunks["table_header"].append("")
            chunks["text"].append(text)
            chunks["context_status"].append(FAILED + ": timeout" if defect == "header" and last else OK)
            sides["doc_id"].append(doc_id)
            sides["chunk_index"].append(chunks["chunk_index"][-1])
            sides["carry_key"].append(None if defect == "null key" and (last or count == 1)
                                      else f"k{number}" + ("x" if defect == "key" and last else ""))
            sides["doc_chunks"].append(count + (1 if defect == "count" else 0))
            sides["term_ids"].append([1, 2])
            sides["term_counts"].append([1] if defect == "terms" and last else [1, 1])
            vector = [1.0, 0.0, 0.0, 0.0]
            problem = None
            if defect == "nan" and last:
                vector, problem = [float("nan"), 0.0, 0.0, 0.0], "not finite"
            elif defect == "long" and last:
                vector, problem = [2.0, 0.0, 0.0, 0.0], "norm 2, not 1"
            embeddings.append(vector)
            expected_vectors.append(problem)
    folder = tmp_path_factory.mktemp("pair")
    chunk_table = pa.table(chunks)
    if embedded:
        chunk_table = chunk_table.append_column(
            "embedding", pa.array(embeddings, pa.list_(pa.float32(), DIM)))
    side_table = pa.table({**sides, "term_ids": pa.array(sides["term_ids"], pa.list_(pa.int64())),
                           "term_counts": pa.array(sides["term_counts"], pa.list_(pa.int64())),
                           "carry_key": pa.array(sides["carry_key"], pa.string())})
    pq.write_table(chunk_table, folder / "chunks-00000-of-00001.parquet")
    pq.write_table(side_table, folder / "carry-00000-of-00001.parquet")
    found = verify_pair(str(folder / "chunks-00000-of-00001.parquet"), str(folder / "carry-00000-of-00001.parquet"),
                        DIM if embedded else None, True)
    assert found == _row_by_row(chunks, sides, expected_vectors if embedded else [None] * len(embeddings))
    assert len(found) == len(documents)
    assert all(problem is None for (_, defect), (_, _, problem) in zip(documents, found) if defect == "ok")
