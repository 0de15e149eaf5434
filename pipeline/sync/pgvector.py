"""PostgreSQL with pgvector: rows in a table, written with psycopg 3 in one transaction a batch.

Columns: the ``chunkline.pipeline.sync.rows`` names, with ``embedding vector(dim)`` (an HNSW index with
``vector_cosine_ops`` once rows are in: pgvector builds it faster over loaded rows than row by
row), ``metadata jsonb`` and the BM25 vector as ``sparse sparsevec(TERM_SPACE)``.

Sparse vectors: pgvector's ``sparsevec`` holds up to 1,000,000,000 dimensions and 16,000
non-zero elements per vector; its text form counts indices from 1, its binary form (used here,
``sparsevec_send``/``sparsevec_recv`` in pgvector's ``src/sparsevec.c``) from 0. chunkline's term
ids are below ``chunkline.sparse.TERM_SPACE`` (2**29), so the column is ``sparsevec(2**29)`` and
term id ``t`` is stored at 0-based index ``t`` -- shown as ``t + 1`` in the text form
(``'{t+1:w}/536870912'``). No index on it: pgvector's HNSW takes sparse vectors of at most 1,000
non-zero elements, and the inner product over a table scan is exact.

BM25's IDF is the query's side (``chunkline.sparse``): the stored vectors hold IDF-free weights,
and ``<table>_terms (term_id, df)`` holds the run's document frequencies, with N (the run's
chunks) as ``<table>_sync.bm25_chunks``, written in the same transaction, so a reader's query
vector is the IDF of its terms and ``<#>`` ranks by BM25. A sync writes only the terms whose df
changed.

A batch deletes the chunk ids it is about to write and COPYs the rows in binary, in one
transaction: a crash leaves the batch wholly written or not at all.

One sync at a time: a sync holds a session-level advisory lock (``pg_try_advisory_lock``) keyed
by the database's schema and table name for its whole run. PostgreSQL holds it as long as the
session lives, however long the sync takes, and releases it when the session ends, a killed
sync's connection included (the server sees the socket close), so a dead holder never blocks
the next. Its connection's ``application_name`` names the run being synced, which is how a
second sync names the holder.

Generations (``chunkline.pipeline.sync.generations``): the alias is a view. A store whose embedding
signature never changed holds the plain tables ``<table>``, ``<table>_sync``, ``<table>_terms``, as
before. The first sync of another signature writes ``<table>_g<digest>`` (and its ``_sync``,
``_terms``) beside them, and once it verifies, one transaction renames the plain tables to their
own generation's name and creates the views ``<table>``, ``<table>_sync`` and ``<table>_terms``
over the new generation's tables; a later switch replaces the views (``CREATE OR REPLACE VIEW``
where the columns keep their types, else ``DROP VIEW`` and ``CREATE VIEW``), also in one
transaction. DDL is transactional in PostgreSQL: a reader's statement waits for the switch's
locks, then resolves the view's name again and reads the new generation whole; it never sees
both, nor none. The views are made ``WITH (security_invoker = true)`` (PostgreSQL 15 and later,
"CREATE VIEW": the underlying tables are checked with the privileges, and row-level security
policies, of the user querying the view, not of the view's owner), so row-level security on the
generation tables applies to readers of the alias. The current generation is read from the
catalog (the table the view ``<table>`` depends on, ``pg_depend``), so every machine sees it.

Access control (a run written with ``access:``, ``chunkline.access``): the table gets
``principals text[]`` with a GIN index (``array_ops``: the ``&&`` overlap operator is one of its
indexable operators, PostgreSQL docs, "GIN Indexes: Built-in Operator Classes"), and row-level
security, switched on when the table is opened, before any row is written (PostgreSQL 16 docs,
5.9 "Row Security Policies", and "CREATE POLICY"):

- ``ENABLE ROW LEVEL SECURITY`` and ``FORCE ROW LEVEL SECURITY``: the policies apply to the
  table's owner too (an owner otherwise bypasses them); superusers and roles with
  ``BYPASSRLS`` always bypass them, so readers must be neither;
- policy ``chunkline_read`` (``FOR SELECT`` to every role): a row is visible when its
  principals overlap those the *reader's role* holds (below); holding none, no row is
  visible: deny by default;
- policy ``chunkline_sync`` (every command, to the role that syncs, ``CURRENT_USER`` when the
  table is opened): the sync reads, writes and verifies every row. ``COPY FROM`` is refused on
  a table whose policies apply to the writer, so a protected batch is copied into a temporary
  table (dropped at commit) and inserted from it, in the batch's one transaction.

Where a reader's principals come from (``?principals_from=`` in the store's URI, read by every
sync, which writes the policy again):

- ``grants`` (the default): the table ``<table>_grants (role regrole PRIMARY KEY, principals
  text[])`` beside the alias, one row a reader role, which the sync creates when it is missing
  and never empties. The policy is ``principals && (ARRAY[public] || the principals of the row
  whose role is current_user)``: the public principal is always held. Nothing a reader's
  session sets enters it: not a setting (``set_config``), not ``search_path`` (a policy's
  names are resolved to objects once, when it is created, "CREATE POLICY"), and ``SET ROLE``
  reaches only roles the login is a member of, whose privileges it holds anyway. Keyed by
  ``current_user``, not ``session_user``: row security checks the role whose privileges are in
  force (a pooler that logs in once and ``SET ROLE``s per request works). The role is kept as
  its OID (``regrole``, shown as its name): a role dropped and created again under the same
  name inherits no grant. The grants table has row-level security of its own, one policy
  ``FOR SELECT USING (role = current_user's OID)``, and ``SELECT`` granted to ``PUBLIC`` (the
  read policy's subquery runs with the reader's privileges): a reader reads its own row only,
  and writes none. Not forced: its owner, the syncing role, reads and writes every row; each
  sync revokes every other privilege any other role holds on it (``TRUNCATE`` ignores
  row-level security). ``chunkline grant URI --role NAME --principals a,b`` writes a row
  (:meth:`PgvectorStore.grant`); :func:`search_granted` is the reader query, with no setting.
- ``application``: *the application is trusted*. The policy reads the transaction's setting
  ``chunkline.principals`` (``string_to_array(current_setting('chunkline.principals', true),
  ',')``; unset: NULL, no row), which ANY role may set to anything: only for a table read
  through a service that alone holds the reader role's password and names each caller's
  principals, the public one included, for each transaction with ``SET LOCAL``
  (``set_config(..., true)``): :func:`search_as` does it.

The alias views are ``security_invoker`` (above), so ``current_user`` in the policy is the
reader's and its grants apply through the views; on a server older than PostgreSQL 15 a view
would read with its owner's rights, which the sync policy lets read every row, so the alias of a
protected table is not moved there (``switch`` refuses).

A reader connects as a role of its own that is not the table's owner (nor a member of it), with
``SELECT`` on the tables. Creating the role, once::

    CREATE ROLE chunkline_reader LOGIN PASSWORD '...';   -- NOSUPERUSER NOBYPASSRLS by default
    GRANT USAGE ON SCHEMA public TO chunkline_reader;
    GRANT SELECT ON chunks, chunks_terms, chunks_sync TO chunkline_reader;
    -- generation tables a later sync creates, readable through the views as they appear:
    ALTER DEFAULT PRIVILEGES FOR ROLE <the syncing role> IN SCHEMA public
        GRANT SELECT ON TABLES TO chunkline_reader;
    -- then, as the syncing role: chunkline grant postgresql://... --role chunkline_reader --principals eng

pgvector's HNSW index filters after the scan: a query whose policy (or ``WHERE``) drops most
rows would return fewer than k. :func:`search_as` sets ``hnsw.iterative_scan = strict_order``
(pgvector 0.8 and later, README "Iterative Index Scans": the scan goes on until k rows pass the
filter, in exact distance order), bounded by ``hnsw.max_scan_tuples`` (20,000 by default); an
older pgvector, or a caller who may read a tiny fraction of a large table, should use an exact
scan instead (``SET LOCAL enable_indexscan = off``). Where the planner expects the caller to
read few rows it picks the GIN index on ``principals`` and sorts those rows by exact distance
itself; both plans return k rows whenever k readable rows exist (the tests force the HNSW one).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
from typing import Any, Iterator, Sequence
from urllib.parse import parse_qsl, urlencode

import numpy as np
import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo

from chunkline.sparse import TERM_SPACE
from chunkline.pipeline.redact import redacted
from chunkline.pipeline.sync.core import StoreBusy, StoreError, SyncState
from chunkline.pipeline.sync.generations import is_generation
from chunkline.pipeline.sync.rows import DIGEST, PRINCIPALS, canonical_metadata, schema, vector_matrix

_SCALARS = ("chunk_id", "doc_id", "chunk_index", "start", "end", "headings", "text", "search_text",
            "tokens", "metadata", "page_start", "page_end", "content_key")
_TYPES = ["text", "text", "int4", "int8", "int8", "text[]", "text", "text", "int4", "jsonb", "int4",
          "int4", "text", "vector", "sparsevec", "text"]


class SparseValue(tuple):
    """(indices int32 array, values float32 array): a sparsevec to dump."""


class JsonText(str):
    """JSON text to store as ``jsonb`` as it is (psycopg's own dumper would quote a str)."""


def jsonb_bytes(text: str) -> bytes:
    """PostgreSQL's binary ``jsonb``: a version byte (1), then the JSON text (``jsonb_send``)."""
    return b"\x01" + text.encode("utf-8")


def vector_bytes(values: np.ndarray) -> bytes:
    """pgvector's binary ``vector``: int16 dim, int16 unused, big-endian float4s."""
    return struct.pack(">hh", len(values), 0) + np.asarray(values, ">f4").tobytes()


def sparse_bytes(indices: np.ndarray, values: np.ndarray, dim: int = TERM_SPACE) -> bytes:
    """pgvector's binary ``sparsevec``: int32 dim, nnz, unused; 0-based int32 indices; float4s."""
    return (struct.pack(">iii", dim, len(indices), 0) + np.asarray(indices, ">i4").tobytes()
            + np.asarray(values, ">f4").tobytes())


def parse_vector(data: bytes) -> np.ndarray:
    dim = struct.unpack_from(">h", data)[0]
    return np.frombuffer(data, ">f4", dim, 4).astype(np.float32)


def parse_sparse(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    _, nnz, _ = struct.unpack_from(">iii", data)
    indices = np.frombuffer(data, ">i4", nnz, 12).astype(np.int32)
    return indices, np.frombuffer(data, ">f4", nnz, 12 + 4 * nnz).astype(np.float32)


# What a reader sets for its transaction, where the application is trusted: its caller's
# principals, comma-separated.
PRINCIPALS_SETTING = "chunkline.principals"
_READ_POLICY = "chunkline_read"
_SYNC_POLICY = "chunkline_sync"
_OWN_GRANT_POLICY = "chunkline_own_grant"
# ``?principals_from=``: where a reader's principals come from (the module docstring).
PRINCIPALS_FROM = "principals_from"
GRANTS = "grants"
APPLICATION = "application"
# The reader's role as an OID: a policy's subquery, resolved once, when the policy is created.
_CURRENT_ROLE = "(SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)"


def principals_source(uri: str) -> tuple[str, str]:
    """(``uri`` without ``principals_from=``, which libpq would refuse, and its value:
    ``grants`` unless the URI says ``application``)."""
    base, _, query = uri.partition("?")
    params = parse_qsl(query, keep_blank_values=True)
    given = [value for key, value in params if key == PRINCIPALS_FROM]
    source = given[-1] if given else GRANTS
    if source not in (GRANTS, APPLICATION):
        raise ValueError(f"{PRINCIPALS_FROM}={source!r}: {GRANTS} (the default: each reader role's "
                         f"row of the grants table) or {APPLICATION} (the application is trusted "
                         f"to set {PRINCIPALS_SETTING})")
    rest = urlencode([(k, v) for k, v in params if k != PRINCIPALS_FROM], safe="/")
    return base + ("?" + rest if rest else ""), source


def principals_setting(principals: Sequence[str], public: str = "public") -> str:
    """The value of ``chunkline.principals`` for a caller holding ``principals``: each checked
    (no comma can split one in two), the public principal added, sorted, comma-separated."""
    from chunkline.access import principal_set

    return ",".join(principal_set([*principals, public], "principals"))


def search_as(conn: psycopg.Connection, table: str, vector: Sequence[float], k: int,
              principals: Sequence[str], public: str = "public") -> list[tuple[str, float]]:
    """The ``k`` rows of ``table`` (the alias view, or a generation) nearest ``vector`` by
    cosine distance among those a caller holding ``principals`` may read, as ``(chunk_id,
    distance)``: the reader query of a table synced with ``principals_from=application`` (the
    application is trusted). ``conn`` is the reader role's connection (not the owner's, not a
    superuser's); the principals are set for this transaction only (``SET LOCAL``), and the
    HNSW scan iterates in strict order until ``k`` readable rows are found. On a table in
    ``grants`` mode the setting is ignored: the role's grants decide."""
    with conn.transaction():
        conn.execute("SELECT set_config(%s, %s, true)",
                     (PRINCIPALS_SETTING, principals_setting(principals, public)))
        return _nearest(conn, table, vector, k)


def search_granted(conn: psycopg.Connection, table: str, vector: Sequence[float],
                   k: int) -> list[tuple[str, float]]:
    """:func:`search_as` for a table in ``grants`` mode (the default): the ``k`` nearest rows
    among those the connection's role may read by its row of ``<alias>_grants``, the public
    ones included. Nothing is set: what a session sets changes nothing it reads."""
    with conn.transaction():
        return _nearest(conn, table, vector, k)


def _nearest(conn: psycopg.Connection, table: str, vector: Sequence[float],
             k: int) -> list[tuple[str, float]]:
    # Inside the caller's transaction: SET LOCAL ends with it.
    literal = "[" + ",".join(repr(float(v)) for v in vector) + "]"
    conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
    return conn.execute(sql.SQL("SELECT chunk_id, embedding <=> %s::vector AS distance FROM {} "
                                "ORDER BY distance LIMIT %s").format(sql.Identifier(table)),
                        (literal, k)).fetchall()


class PgvectorStore:
    def __init__(self, uri: str, table: str = "chunks") -> None:
        uri, self.principals_from = principals_source(uri)
        try:
            self.conn = psycopg.connect(uri, autocommit=True, application_name="chunkline sync")
        except psycopg.OperationalError as exc:
            raise StoreError(f"cannot connect to PostgreSQL: {exc}".strip()) from None
        self.base = table
        self.where = f"PostgreSQL table {table!r} ({redacted(uri)})"
        self.use(table)
        self.dim = 0
        self.principals = False  # rows carry who may read them (``open``)
        self.public = "public"  # the run's public principal (``access.public``), every reader's
        schema_name = self._scalar("SELECT current_schema()")
        # Schema-qualified: the policies name it, and the sync's search_path decides nothing.
        self.grants_table = sql.Identifier(*([schema_name] if schema_name else []), table + "_grants")
        # Advisory lock keys are 64-bit integers shared by every application of the database:
        # derived from a name only chunkline uses, so no other lock collides by accident.
        digest = hashlib.blake2b(f"chunkline sync {schema_name}.{table}".encode(), digest_size=8)
        self.lock_key = int.from_bytes(digest.digest(), "big", signed=True)

    def use(self, generation: str) -> None:
        """Act on generation ``generation``'s tables from now on (the lock stays the alias's)."""
        self.name = generation
        self.table = sql.Identifier(generation)
        self.state_table = sql.Identifier(generation + "_sync")
        self.terms_table = sql.Identifier(generation + "_terms")

    def _index(self, generation: str) -> str:
        # The plain table keeps the index name it always had; a generation's fits in 63 bytes.
        return f"{generation}_embedding_hnsw" if generation == self.base else f"{generation}_hnsw"

    def _kind(self, name: str) -> str | None:
        """pg_class.relkind of ``name`` in the search path: 'r' a table, 'v' a view; None: none."""
        row = self.conn.execute("SELECT relkind::text FROM pg_class WHERE oid = to_regclass(%s)",
                                (sql.Identifier(name).as_string(self.conn),)).fetchone()
        return row[0] if row else None

    def current(self) -> str | None:
        kind = self._kind(self.base)
        if kind != "v":
            return self.base if kind in ("r", "p") else None
        row = self.conn.execute(
            "SELECT DISTINCT c.relname::text FROM pg_rewrite r JOIN pg_depend d ON d.objid = r.oid "
            "AND d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass "
            "JOIN pg_class c ON c.oid = d.refobjid WHERE r.ev_class = to_regclass(%s) "
            "AND c.oid <> r.ev_class AND c.relkind IN ('r', 'p')",
            (sql.Identifier(self.base).as_string(self.conn),)).fetchall()
        if len(row) != 1:
            raise ValueError(f"view {self.base!r} reads {len(row)} tables, not one generation: "
                             "not an alias chunkline made (sync into another table, ?table=NAME)")
        return row[0][0]

    def generations(self) -> list[str]:
        names = self.conn.execute(
            "SELECT relname::text FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
            "AND relkind IN ('r', 'p') AND left(relname, length(%s)) = %s",
            (self.base, self.base)).fetchall()
        return sorted(name for (name,) in names if is_generation(self.base, name))

    def _columns(self, name: str) -> list[tuple[str, str]]:
        return self.conn.execute(
            "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid "
            "= to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (sql.Identifier(name).as_string(self.conn),)).fetchall()

    def switch(self, generation: str, previous: str | None, rename_to: str | None) -> None:
        q = sql.SQL
        version = int(self._scalar("SHOW server_version_num"))
        # security_invoker: PostgreSQL 15 and later; an older server's views check the tables
        # with the view owner's privileges (and bypass row-level security for them).
        option = q(" WITH (security_invoker = true)") if version >= 150000 else q("")
        if version < 150000 and self._protected(generation):
            raise ValueError(f"{generation!r} is protected by row-level security, which a view "
                             "reads past on PostgreSQL before 15 (no security_invoker): the alias "
                             "was not moved; upgrade the server, or read the generation's table")
        try:
            with self.conn.transaction():
                if previous == self.base and self._kind(self.base) in ("r", "p"):
                    # The first switch: the plain tables take their generation's name, and the
                    # alias theirs, in this transaction (readers wait for it, then read the view).
                    if rename_to is None:
                        raise ValueError(f"table {self.base!r} needs a name to move to")
                    for suffix in ("", "_sync", "_terms"):
                        if self._kind(self.base + suffix) == "r":
                            self.conn.execute(q("ALTER TABLE {} RENAME TO {}").format(
                                sql.Identifier(self.base + suffix), sql.Identifier(rename_to + suffix)))
                    if self._kind(self._index(self.base)) == "i":
                        self.conn.execute(q("ALTER INDEX {} RENAME TO {}").format(
                            sql.Identifier(self._index(self.base)), sql.Identifier(self._index(rename_to))))
                for suffix in ("", "_sync", "_terms"):
                    self._point_view(self.base + suffix, generation + suffix, option)
        except psycopg.errors.DependentObjectsStillExist as exc:
            raise ValueError(f"cannot move the alias {self.base!r}: objects of yours depend on its "
                             f"views and the columns change ({exc.diag.message_detail or exc}); "
                             "drop them, sync, and create them again") from None

    def _point_view(self, view: str, table: str, option: sql.Composable) -> None:
        """View ``view`` reads ``table`` (or is gone where ``table`` is), inside the switch."""
        q = sql.SQL
        exists = self._kind(view) == "v"
        if self._kind(table) != "r":
            if exists:
                self.conn.execute(q("DROP VIEW {}").format(sql.Identifier(view)))
            return
        if exists and self._columns(view) != self._columns(table):
            # CREATE OR REPLACE VIEW keeps every column's name and type (PostgreSQL docs, "CREATE
            # VIEW"): another width is another type, vector(256), so the view is made again.
            self.conn.execute(q("DROP VIEW {}").format(sql.Identifier(view)))
        self.conn.execute(q("CREATE OR REPLACE VIEW {}{} AS SELECT * FROM {}").format(
            sql.Identifier(view), option, sql.Identifier(table)))

    def drop(self, generation: str) -> None:
        if generation == self.current():
            raise ValueError(f"generation {generation!r} is the one readers get: not dropped")
        with self.conn.transaction():
            for suffix in ("_terms", "_sync", ""):
                self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}")
                                  .format(sql.Identifier(generation + suffix)))

    def _holder(self) -> str | None:
        """The session holding this table's sync lock, or None."""
        row = self.conn.execute(
            "SELECT a.pid, a.application_name, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.classid::int8 = %s AND l.objid::int8 = %s AND l.objsubid = 1 "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            ((self.lock_key >> 32) & 0xFFFFFFFF, self.lock_key & 0xFFFFFFFF)).fetchone()
        if row is None:
            return None
        pid, name, since = row
        return f"{name or 'a session'} (backend pid {pid}, connected {since:%Y-%m-%d %H:%M:%S %Z})"

    @contextlib.contextmanager
    def lock(self, holder: str) -> Iterator[None]:
        self.conn.execute("SELECT set_config('application_name', %s, false)",
                          (f"chunkline sync of run {holder}"[:63],))
        if not self._scalar("SELECT pg_try_advisory_lock(%s)", (self.lock_key,)):
            who = self._holder() or "another session"
            raise StoreBusy(f"PostgreSQL table {self.base!r} is being synced by {who}; the lock "
                            "is released when that session ends (a killed sync's included)")
        try:
            yield
        finally:
            with contextlib.suppress(psycopg.Error):
                self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.lock_key,))

    def busy(self) -> str | None:
        return self._holder()

    def _adapt(self) -> None:
        """Binary dumpers and loaders for pgvector's types, by the OIDs this database gave them."""
        for name, kind, dump, load in (("vector", np.ndarray, vector_bytes, parse_vector),
                                       ("sparsevec", SparseValue, lambda v: sparse_bytes(*v), parse_sparse),
                                       ("jsonb", JsonText, jsonb_bytes, None)):
            info = TypeInfo.fetch(self.conn, name)
            if info is None:  # a table of that name, in a database without the extension
                raise ValueError(f"this database has no type {name!r}: the pgvector extension is "
                                 "not installed in it (a sync creates it; --check does not)")
            info.register(self.conn)
            dumper = type(f"{name}Dumper", (Dumper,), {"format": Format.BINARY, "oid": info.oid,
                                                      "dump": lambda self, obj, f=dump: f(obj)})
            loader = type(f"{name}Loader", (Loader,), {"format": Format.BINARY,
                                                      "load": lambda self, data, f=load: f(bytes(data))})
            self.conn.adapters.register_dumper(kind, dumper)
            if load is not None:
                self.conn.adapters.register_loader(info.oid, loader)

    def _scalar(self, query: str, params: tuple = ()) -> Any:
        """The one value of a query that returns one row (a SELECT of expressions, a SHOW)."""
        row = self.conn.execute(query, params).fetchone()
        if row is None:
            raise StoreError(f"PostgreSQL returned no row for {query!r}")
        return row[0]

    def _exists(self, table: str) -> bool:
        return self._scalar("SELECT to_regclass(%s) IS NOT NULL", (sql.Identifier(table).as_string(self.conn),))

    def open(self, dim: int, sparse: bool, create: bool = True, principals: bool = False) -> bool:
        q = sql.SQL
        self.dim = dim
        self.principals = principals
        if not create:
            if not self._exists(self.name):
                return False
        else:
            self.conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        self._adapt()
        if create:
            self.conn.execute(q(
                'CREATE TABLE IF NOT EXISTS {} (chunk_id text PRIMARY KEY, doc_id text NOT NULL, '
                'chunk_index int4 NOT NULL, "start" int8 NOT NULL, "end" int8 NOT NULL, '
                'headings text[] NOT NULL, text text NOT NULL, search_text text NOT NULL, '
                'tokens int4 NOT NULL, metadata jsonb NOT NULL, page_start int4, page_end int4, '
                'content_key text NOT NULL, embedding vector({}) NOT NULL, '
                'sparse sparsevec({}) NOT NULL, row_digest text NOT NULL)'
            ).format(self.table, sql.Literal(dim), sql.Literal(TERM_SPACE)))
        have = self.conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = 'embedding'",
            (self.table.as_string(self.conn),)).fetchone()
        if have is None or have[0] != f"vector({dim})":
            raise ValueError(f"table {self.name!r} has embedding {have[0] if have else 'missing'}, "
                             f"this run vector({dim}): sync into another table (?table=NAME)")
        if create and principals:
            self._protect()
        if create:
            self.conn.execute(q("CREATE TABLE IF NOT EXISTS {} (id int PRIMARY KEY CHECK (id = 1), "
                                "run_id text, syncing text, chunks int8 NOT NULL, digest text NOT NULL, "
                                "row_format int4 NOT NULL DEFAULT 1)").format(self.state_table))
            # A state table made before row formats were recorded: its rows are format 1.
            self.conn.execute(q("ALTER TABLE {} ADD COLUMN IF NOT EXISTS row_format int4 NOT NULL "
                                "DEFAULT 1").format(self.state_table))
            self.conn.execute(q("ALTER TABLE {} ADD COLUMN IF NOT EXISTS bm25_chunks int8")
                              .format(self.state_table))
            # A state table made before generations: its signature is found again by the sync.
            self.conn.execute(q("ALTER TABLE {} ADD COLUMN IF NOT EXISTS signature text NOT NULL "
                                "DEFAULT ''").format(self.state_table))
            if sparse:
                self.conn.execute(q("CREATE TABLE IF NOT EXISTS {} (term_id int4 PRIMARY KEY, "
                                    "df int8 NOT NULL)").format(self.terms_table))
        return True

    def _protected(self, table: str) -> bool:
        row = self.conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = to_regclass(%s)",
                                (sql.Identifier(table).as_string(self.conn),)).fetchone()
        return bool(row and row[0])

    def _protect(self) -> None:
        """The principals column and row-level security (the module docstring), in one
        transaction, before any row of a protected run is written: a reader never sees the
        table holding rows without its policies."""
        q = sql.SQL
        with self.conn.transaction():
            # The table first, then the grants table: the order a reader's query locks them in
            # (its policy's subquery is added to it after the table), so the two never deadlock.
            self.conn.execute(q("ALTER TABLE {} ADD COLUMN IF NOT EXISTS principals text[]")
                              .format(self.table))
            self._grants_table()
            self.conn.execute(q("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(self.table))
            self.conn.execute(q("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(self.table))
            for policy in (_READ_POLICY, _SYNC_POLICY):
                self.conn.execute(q("DROP POLICY IF EXISTS {} ON {}").format(
                    sql.Identifier(policy), self.table))
            self.conn.execute(q("CREATE POLICY {} ON {} FOR SELECT USING (principals && {})").format(
                sql.Identifier(_READ_POLICY), self.table, self._held()))
            self.conn.execute(q("CREATE POLICY {} ON {} TO CURRENT_USER USING (true) WITH CHECK (true)")
                              .format(sql.Identifier(_SYNC_POLICY), self.table))

    def _held(self) -> sql.Composable:
        """The principals the querying role holds, as the read policy's ``text[]`` expression."""
        if self.principals_from == APPLICATION:
            return sql.SQL("string_to_array(current_setting({}, true), ',')").format(
                sql.Literal(PRINCIPALS_SETTING))
        # An uncorrelated scalar subquery: run once a query (an InitPlan), and ``principals &&
        # $1`` keeps the GIN index usable.
        return sql.SQL("(ARRAY[{}]::text[] || coalesce((SELECT g.principals FROM {} g "
                       "WHERE g.role = {}), '{{}}'::text[]))").format(
            sql.Literal(self.public), self.grants_table, sql.SQL(_CURRENT_ROLE))

    def _grants_table(self) -> None:
        """``<alias>_grants``, made when missing; where this role owns it, its protections are
        asserted again (the module docstring). Its rows are never touched here."""
        q = sql.SQL
        self.conn.execute(q("CREATE TABLE IF NOT EXISTS {} (role regrole PRIMARY KEY, "
                            "principals text[] NOT NULL)").format(self.grants_table))
        name = self.grants_table.as_string(self.conn)
        columns = self.conn.execute(
            "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid "
            "= to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (name,)).fetchall()
        if columns[:2] != [("role", "regrole"), ("principals", "text[]")]:
            raise ValueError(f"{name} is not a grants table chunkline made (role regrole, "
                             f"principals text[]): rename it, or sync into another table")
        owner = self._scalar("SELECT pg_has_role(relowner, 'USAGE') FROM pg_class "
                             "WHERE oid = to_regclass(%s)", (name,))
        if not owner:
            return  # its owner keeps it; a sync as another role only reads it through the policy
        self.conn.execute(q("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(self.grants_table))
        self.conn.execute(q("DROP POLICY IF EXISTS {} ON {}").format(
            sql.Identifier(_OWN_GRANT_POLICY), self.grants_table))
        self.conn.execute(q("CREATE POLICY {} ON {} FOR SELECT USING (role = {})").format(
            sql.Identifier(_OWN_GRANT_POLICY), self.grants_table, q(_CURRENT_ROLE)))
        # Default privileges may have handed a reader more than SELECT; TRUNCATE, for one,
        # ignores row-level security (PostgreSQL docs, "TRUNCATE").
        others = self.conn.execute(
            "SELECT DISTINCT a.grantee = 0, r.rolname::text FROM pg_class c CROSS JOIN "
            "aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee WHERE c.oid = "
            "to_regclass(%s) AND a.grantee <> c.relowner AND a.privilege_type <> 'SELECT'",
            (name,)).fetchall()
        for public, role in others:
            self.conn.execute(q("REVOKE ALL ON {} FROM {}").format(
                self.grants_table, q("PUBLIC") if public else sql.Identifier(role)))
        self.conn.execute(q("GRANT SELECT ON {} TO PUBLIC").format(self.grants_table))

    def grant(self, role: str, principals: Sequence[str]) -> tuple[list[str], list[str]]:
        """Role ``role`` reads, from its next query on, the rows of ``principals`` and the public
        ones, in place of what it held: its row of ``<alias>_grants`` (made when missing). Run
        as the syncing role, the table's owner. (The principals granted, checked and sorted;
        notes for the operator, where the grant will not do what it says.)"""
        from chunkline.access import principal_set

        held = list(principal_set(principals, "--principals"))
        if not held:
            raise ValueError("--principals: name at least one principal (--revoke takes a role's "
                             "grants away)")
        found = self.conn.execute("SELECT oid, rolsuper OR rolbypassrls FROM pg_roles "
                                  "WHERE rolname = %s", (role,)).fetchone()
        if found is None:
            raise ValueError(f"no role {role!r} on this server: CREATE ROLE it first")
        with self.conn.transaction():
            self._grants_table()
            self.conn.execute(sql.SQL(
                "INSERT INTO {} (role, principals) VALUES (%s::oid, %s) ON CONFLICT (role) "
                "DO UPDATE SET principals = EXCLUDED.principals").format(self.grants_table),
                (found[0], held))
        return held, self._grant_notes(role, bypasses=found[1])

    def revoke(self, role: str) -> bool:
        """Role ``role`` holds no grant from now on (the public rows only); whether it held one.
        A dropped role's row is named by the OID the table shows for it."""
        if not self._exists_grants():
            return False
        # regrole prints a name quoted where it must be, and a dropped role as its OID.
        return self.conn.execute(sql.SQL("DELETE FROM {} WHERE role::text IN (%s, quote_ident(%s))")
                                 .format(self.grants_table), (role, role)).rowcount > 0

    def grants(self) -> list[tuple[str, list[str]]]:
        """(role, principals) of every grant this role may read: all of them for the owner, its
        own for a reader (the grants table's policy)."""
        if not self._exists_grants():
            return []
        return self.conn.execute(sql.SQL("SELECT role::text, principals FROM {} ORDER BY 1")
                                 .format(self.grants_table)).fetchall()

    def _exists_grants(self) -> bool:
        return self._scalar("SELECT to_regclass(%s) IS NOT NULL", (self.grants_table.as_string(self.conn),))

    def _grant_notes(self, role: str, bypasses: bool) -> list[str]:
        """Why a grant may not be what ``role`` reads: it bypasses row security, or the alias's
        table reads principals from elsewhere (or is not there yet)."""
        notes = [f"role {role!r} is a superuser or has BYPASSRLS: row-level security does not "
                 "apply to it, it reads every row whatever it is granted"] if bypasses else []
        current = self.current()
        if current is None:
            return [*notes, f"no table {self.base!r} yet: the grant applies to the rows a sync "
                            "of a run written with access control writes"]
        qual = self.conn.execute(
            "SELECT qual FROM pg_policies WHERE schemaname = current_schema() AND tablename = %s "
            "AND policyname = %s", (current, _READ_POLICY)).fetchone()
        if qual is None:
            notes.append(f"{current!r} has no chunkline read policy (its run was written without "
                         "access control): grants change nothing there")
        elif PRINCIPALS_SETTING in (qual[0] or ""):
            notes.append(f"{current!r} was synced with {PRINCIPALS_FROM}={APPLICATION}: its readers "
                         "name their own principals; grants apply once a sync without it")
        return notes

    def terms(self) -> tuple[dict[int, int], int | None]:
        if not self._exists(self.name + "_terms"):
            return {}, None
        held: dict[int, int] = dict(self.conn.execute(sql.SQL("SELECT term_id, df FROM {}")
                                                      .format(self.terms_table)).fetchall())
        row = self.conn.execute(sql.SQL("SELECT to_jsonb(s) ->> 'bm25_chunks' FROM {} s")
                                .format(self.state_table)).fetchone()
        return held, int(row[0]) if row and row[0] is not None else None

    def write_terms(self, upsert: list[tuple[int, int]], delete: list[int], chunks: int) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            if delete:
                cur.execute(sql.SQL("DELETE FROM {} WHERE term_id = ANY(%s)").format(self.terms_table),
                            (delete,))
            if upsert:
                cur.execute(sql.SQL("DELETE FROM {} WHERE term_id = ANY(%s)").format(self.terms_table),
                            ([t for t, _ in upsert],))
                with cur.copy(sql.SQL("COPY {} (term_id, df) FROM STDIN (FORMAT BINARY)")
                              .format(self.terms_table)) as copy:
                    copy.set_types(["int4", "int8"])
                    for row in upsert:
                        copy.write_row(row)
            # N beside its df, in the same transaction: a reader never weighs new df by an old N.
            cur.execute(sql.SQL("INSERT INTO {} (id, chunks, digest, bm25_chunks) VALUES (1, 0, '', %s) "
                                "ON CONFLICT (id) DO UPDATE SET bm25_chunks = EXCLUDED.bm25_chunks")
                        .format(self.state_table), (chunks,))

    def state(self) -> SyncState | None:
        if not self._exists(self.name + "_sync"):
            return None
        # As JSON, so a state table of an older chunkline (no row_format) reads the same way.
        row = self.conn.execute(sql.SQL("SELECT to_jsonb(s)::text FROM {} s")
                                .format(self.state_table)).fetchone()
        return SyncState.from_record(json.loads(row[0])) if row else None

    def save_state(self, state: SyncState) -> None:
        try:
            self._save_state(state)
        except psycopg.errors.UndefinedColumn:
            # The state table of a generation an older chunkline made, written before ``open``
            # (its signature, found again, recorded by the first generation-aware sync).
            self.conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS signature text NOT NULL "
                                      "DEFAULT ''").format(self.state_table))
            self._save_state(state)

    def _save_state(self, state: SyncState) -> None:
        self.conn.execute(sql.SQL(
            "INSERT INTO {} (id, run_id, syncing, chunks, digest, row_format, signature) "
            "VALUES (1, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
            "run_id = EXCLUDED.run_id, syncing = EXCLUDED.syncing, chunks = EXCLUDED.chunks, "
            "digest = EXCLUDED.digest, row_format = EXCLUDED.row_format, "
            "signature = EXCLUDED.signature").format(self.state_table),
            (state.run_id, state.syncing, state.chunks, state.digest, state.row_format,
             state.signature))

    def digests(self) -> list[tuple[str, str]]:
        return self.conn.execute(sql.SQL("SELECT chunk_id, row_digest FROM {}")
                                 .format(self.table)).fetchall()

    def upsert(self, rows: pa.Table) -> None:
        ids = rows.column("chunk_id").to_pylist()
        columns = [rows.column(name).to_pylist() for name in _SCALARS]
        columns[_SCALARS.index("metadata")] = [JsonText(m) for m in columns[_SCALARS.index("metadata")]]
        vectors = vector_matrix(rows)
        indices = rows.column("sparse_indices").to_pylist()
        values = rows.column("sparse_values").to_pylist()
        digests = rows.column(DIGEST).to_pylist()
        readers = [rows.column(PRINCIPALS).to_pylist()] if self.principals else []
        names = sql.SQL(", ").join(sql.Identifier(n) for n in (
            *_SCALARS, "embedding", "sparse", *([PRINCIPALS] if self.principals else []), DIGEST))
        types = [*_TYPES[:-1], *(["text[]"] if self.principals else []), _TYPES[-1]]
        # COPY FROM is refused on a table whose row-level security applies to the writer
        # (PostgreSQL docs, "COPY"): a protected table's batch is copied into a temporary table
        # (no policies; dropped at commit) and inserted from there, in the same transaction.
        target = sql.Identifier("chunkline_batch") if self.principals else self.table
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s)").format(self.table), (ids,))
            if self.principals:
                cur.execute(sql.SQL("CREATE TEMPORARY TABLE {} (LIKE {}) ON COMMIT DROP")
                            .format(target, self.table))
            with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)")
                          .format(target, names)) as copy:
                copy.set_types(types)
                for i in range(len(ids)):
                    copy.write_row([*(column[i] for column in columns), vectors[i],
                                    SparseValue((np.asarray(indices[i], np.int32),
                                                 np.asarray(values[i], np.float32))),
                                    *(column[i] for column in readers), digests[i]])
            if self.principals:
                cur.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
                    self.table, names, names, target))

    def delete(self, chunk_ids: Sequence[str]) -> None:
        with self.conn.transaction():
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s)")
                              .format(self.table), (list(chunk_ids),))

    def read_all(self) -> pa.Table:
        # A table synced before access control was on has no principals column (``--check``
        # opens it as it is): its rows are read with none, and differ from the run's.
        held = "principals" if any(name == PRINCIPALS for name, _ in self._columns(self.name)) \
            else "NULL::text[]"
        with self.conn.cursor(binary=True) as cur:
            cur.execute(sql.SQL(
                'SELECT chunk_id, doc_id, chunk_index, "start", "end", headings, text, search_text, '
                "tokens, metadata::text, page_start, page_end, content_key, embedding, sparse, "
                "row_digest{} FROM {}").format(sql.SQL(", " + held if self.principals else ""),
                                               self.table))
            fetched = cur.fetchall()
        columns: list[tuple[Any, ...]] = list(zip(*fetched)) if fetched else [() for _ in range(17)]
        target = schema(self.dim, principals=self.principals)
        data = {name: list(columns[i]) for i, name in enumerate(_SCALARS)}
        data["metadata"] = [canonical_metadata(m) for m in data["metadata"]]
        matrix = np.stack(columns[13]) if fetched else np.zeros((0, self.dim), np.float32)
        data["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1), pa.float32()), self.dim)
        data["sparse_indices"] = [s[0] for s in columns[14]]
        data["sparse_values"] = [s[1] for s in columns[14]]
        data[DIGEST] = list(columns[15])
        if self.principals:
            data[PRINCIPALS] = list(columns[16])
        return pa.table([pa.array(data[f.name], f.type) if f.name != "vector" else data["vector"]
                         for f in target], schema=target)

    def finish(self) -> list[str]:
        self.conn.execute("SET maintenance_work_mem = '256MB'")
        self.conn.execute(sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)")
            .format(sql.Identifier(self._index(self.name)), self.table))
        if self.principals:
            # The readers' policy tests ``principals && ...``: GIN's array_ops index it.
            self.conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (principals)")
                              .format(sql.Identifier(self.name + "_principals"), self.table))
        self.conn.execute(sql.SQL("ANALYZE {}").format(self.table))
        return self._ungranted()

    def _ungranted(self) -> list[str]:
        """A note where readers of a protected table in grants mode can read only public rows:
        no role holds a grant yet (as the grants table's owner sees it)."""
        if not self.principals or self.principals_from != GRANTS:
            return []
        name = self.grants_table.as_string(self.conn)
        held = self.conn.execute(sql.SQL(
            "SELECT pg_has_role(c.relowner, 'USAGE'), EXISTS (SELECT FROM {}) FROM pg_class c "
            "WHERE c.oid = to_regclass(%s)").format(self.grants_table), (name,)).fetchone()
        if held is None or not held[0] or held[1]:
            return []
        return [f"no reader role holds a grant in {name}: readers read the public rows only "
                f"(`chunkline grant URI --role NAME --principals P,...`)"]

    def close(self) -> None:
        self.conn.close()
