"""``chunkline sync`` into Qdrant through qdrant-client's local mode (the same client API a
server answers), edited and searched with the client."""

from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from chunkline.sparse import SparseOptions, query_terms
from chunkline.pipeline.sync.qdrant import point_id
from tests.pipeline import sync_cases as cases

pytestmark = pytest.mark.slow


@pytest.fixture
def uri(tmp_path) -> str:
    return f"qdrant://{tmp_path}/qdrant?table=chunks"


def client(uri: str) -> QdrantClient:
    return QdrantClient(path=uri.removeprefix("qdrant://").partition("?")[0])


def count(uri: str) -> int:
    c = client(uri)
    try:
        return c.count("chunks", exact=True).count
    finally:
        c.close()


def test_full_sync_then_a_second_writes_nothing(uri, sync_runs) -> None:
    cases.check_full_sync_and_idempotence(uri, sync_runs.demo_run)
    c = client(uri)
    try:
        some = sorted(cases.parquet_rows(sync_runs.demo_run))[0]
        point = c.retrieve("chunks", [point_id(some)], with_payload=True)[0]
        assert point.payload["chunk_id"] == some and isinstance(point.payload["metadata"], dict)
    finally:
        c.close()


def test_reindex_writes_the_changed_chunks_and_deletes_the_gone(uri, sync_runs) -> None:
    cases.check_reindex(uri, sync_runs)


def test_a_killed_sync_resumes(uri, sync_runs) -> None:
    cases.check_crash_then_resume(uri, sync_runs.demo_run, count)


def test_edits_behind_the_tools_back_are_found(uri, sync_runs) -> None:
    def edit(u: str, chunk_id: str, column: str, text: str) -> None:
        c = client(u)
        try:
            c.set_payload("chunks", {column: text}, points=[point_id(chunk_id)], wait=True)
        finally:
            c.close()

    def delete_row(u: str, chunk_id: str) -> None:
        c = client(u)
        try:
            c.delete("chunks", models.PointIdsList(points=[point_id(chunk_id)]), wait=True)
        finally:
            c.close()

    cases.check_edits_behind_the_back(uri, sync_runs.demo_run, edit, delete_row)


def test_exact_dense_search_agrees_with_chunkline_query(uri, sync_runs) -> None:
    def nearest(u: str, vector: np.ndarray) -> str:
        c = client(u)
        try:
            # exact=True: a server's brute force; local mode always searches exhaustively.
            hits = c.query_points("chunks", query=vector.tolist(), using="dense", limit=1,
                                  search_params=models.SearchParams(exact=True)).points
            return hits[0].payload["chunk_id"]
        finally:
            c.close()

    cases.check_exact_dense_search(uri, sync_runs.demo_run, nearest)


def bm25_top(uri: str, question: str, k: int) -> list[tuple[str, float]]:
    """The README's reader query: 1 at each of the question's terms; Modifier.IDF weighs them."""
    c = client(uri)
    try:
        terms = sorted(set(query_terms(question, SparseOptions())))
        points = c.query_points("chunks", query=models.SparseVector(indices=terms, values=[1.0] * len(terms)),
                                using="bm25", limit=k, with_payload=["chunk_id"]).points
        return [(p.payload["chunk_id"], p.score) for p in points if p.score > 0]
    finally:
        c.close()


def test_sparse_vector_search_is_chunkline_bm25(uri, sync_runs) -> None:
    """After a night's change of the demo corpus: Qdrant's top 10 with Modifier.IDF (its N and
    df counted over the collection's points) is ``chunkline query --mode sparse``'s and the
    reference BM25's, for 20 questions."""
    cases.check_sparse_ranking(uri, sync_runs.demo_run, bm25_top)
    c = client(uri)
    try:
        assert c.get_collection("chunks").config.params.sparse_vectors["bm25"].modifier == models.Modifier.IDF
    finally:
        c.close()


def test_usage_errors(uri, sync_runs) -> None:
    cases.check_usage_errors(uri, sync_runs.demo_run)
    holder = client(uri)  # local mode: one client a directory
    try:
        code, _, err = cases.cli(str(sync_runs.demo), "--to", uri)
    finally:
        holder.close()
    # Local mode holds one client a directory: a second sync is told the store is busy (75).
    assert code == 75 and "open in another process" in err and "Traceback" not in err


def test_check_on_an_empty_target_writes_nothing(sync_runs, tmp_path) -> None:
    target = tmp_path / "never"
    cases.check_check_writes_nothing(f"qdrant://{target}", sync_runs.demo_run, lambda u: not target.exists())


def test_metadata_of_any_json_values_round_trips(uri, sync_runs) -> None:
    cases.check_metadata_round_trips(uri, sync_runs.demo_run)


def test_odd_metadata_syncs(odd_run, tmp_path) -> None:
    cases.check_odd_metadata_syncs(f"qdrant://{tmp_path}/q", odd_run)


def test_a_store_of_the_old_row_format_is_rewritten_once_never_drift(uri, odd_run) -> None:
    def age(uri: str) -> None:  # an older chunkline made the sparse vector without IDF
        c = client(uri)
        try:
            c.update_collection("chunks", sparse_vectors_config={
                "bm25": models.SparseVectorParams(modifier=models.Modifier.NONE)})
        finally:
            c.close()

    cases.check_an_old_format_store_is_rewritten_once(uri, odd_run, age)
    c = client(uri)
    try:
        assert c.get_collection("chunks").config.params.sparse_vectors["bm25"].modifier == models.Modifier.IDF
    finally:
        c.close()


def test_check_finds_a_collection_ranking_without_idf(uri, sync_runs) -> None:
    """Modifier.IDF taken off behind the tool's back: the weights then rank as tf alone;
    ``--check`` says so, and ``--repair`` puts it back."""
    assert cases.synced(uri, sync_runs.demo_run).verification.ok
    c = client(uri)
    try:
        c.update_collection("chunks", sparse_vectors_config={
            "bm25": models.SparseVectorParams(modifier=models.Modifier.NONE)})
    finally:
        c.close()
    code, _, err = cases.cli(str(sync_runs.demo), "--to", uri, "--check")
    assert code == 1 and "without Modifier.IDF" in err, err
    code, out, err = cases.cli(str(sync_runs.demo), "--to", uri, "--repair")
    assert code == 0 and "now ranks with Modifier.IDF" in out, (out, err)
    assert cases.cli(str(sync_runs.demo), "--to", uri, "--check")[0] == 0
