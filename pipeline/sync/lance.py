"""LanceDB (embedded, a directory of Lance files): the store for a local user.

One table holds the rows (``chunkline.pipeline.sync.rows.schema``: ``vector`` a fixed-size float32 list,
``metadata`` JSON text, the BM25 sparse vector as two list columns), another (``<table>_sync``)
the one-row sync state. Every write is one Lance commit (a new table version), so a batch is
all or nothing. After writing: a full-text index on ``search_text`` (Lance's own inverted
index, BM25-ranked) and, from ``VECTOR_INDEX_MIN_ROWS`` rows, an IVF-PQ vector index with the
cosine metric; new rows reach both with ``optimize()``, and rows not yet indexed are still
searched, exhaustively (LanceDB docs, "Vector indexes" and "Full-text search").

One sync at a time: a sync holds ``<table>.sync-lock`` in the directory, the lease
``chunkline.pipeline.lease`` gives a run's output (created atomically with ``link(2)``, renewed every
minute, taken over at once when its holder's process on this host is gone, or after
``LOCK_TIMEOUT_S`` without renewal for a holder on another machine). Lance itself would let two
writers interleave their commits (each ``merge_insert`` is a valid commit of its own), which is
how two syncs at once left 409 rows for 309 chunks.

Generations (``chunkline.pipeline.sync.generations``): LanceDB has no views or aliases, so the alias is a
pointer: the one-row table ``<table>_alias`` (column ``generation``) names the table readers
should open. It is written only once the generation it names is complete and verified, as one
overwrite, which is one Lance commit (a new version of the pointer table): a reader opening it
gets the old name or the new, never a half-written table. A store that never changed its
embedding signature has no pointer, and its readers open ``<table>`` itself, as before. A reader
follows the pointer with :func:`open_current` (or the same two steps with lancedb alone: read
``<table>_alias``'s one ``generation`` value and open that table; ``<table>`` when there is no
``<table>_alias``). A table once opened stays on the version it opened, so a reader's query never
mixes generations; it sees the next generation when it opens the alias again.

Access control (a run written with ``access:``, ``chunkline.access``): the table holds
``principals`` (``list<string>``) with a ``LABEL_LIST`` scalar index (LanceDB docs, "Scalar
indexes": for list columns, used by ``array_has_any`` / ``array_has_all`` filters). LanceDB has
no row-level security: whoever can open the directory reads every row, so a reader's query must
carry :func:`principals_where` as a *prefilter* (``where(..., prefilter=True)``, the default for
vector search in recent LanceDB: the filter is applied before the nearest neighbours are
taken, so k rows come back whenever k readable rows exist; a postfilter would return the
readable ones among the k nearest of all), as :func:`search_as` does.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict
from pathlib import Path
from typing import Iterator, Sequence

import lancedb
import pyarrow as pa
from lancedb.index import FTS, LabelList

from chunkline.pipeline.lease import LeaseHeld, OutputLease
from chunkline.pipeline.sync.core import StoreBusy, SyncState
from chunkline.pipeline.sync.generations import is_generation
from chunkline.pipeline.sync.rows import DIGEST, PRINCIPALS, canonical_metadata, schema

# IVF-PQ trains k-means over the vectors (256 centroids per sub-vector for PQ, ~sqrt(rows)
# partitions for IVF); on fewer rows its centroids are poor and a flat scan (a few ms for ten
# thousand 384-d rows) is exact anyway.
VECTOR_INDEX_MIN_ROWS = 10_000
_STATE_SCHEMA = pa.schema([pa.field("run_id", pa.string()), pa.field("syncing", pa.string()),
                           pa.field("chunks", pa.int64()), pa.field("digest", pa.string()),
                           pa.field("row_format", pa.int64()), pa.field("signature", pa.string())])
# A holder on another machine cannot be seen to die: its lock is stale once unrenewed this long.
LOCK_TIMEOUT_S = 600.0
_ALIAS_SCHEMA = pa.schema([pa.field("generation", pa.string(), nullable=False)])


def principals_where(principals: Sequence[str], public: str = "public") -> str:
    """The SQL filter every reader's query of a protected table must carry: the rows whose
    ``principals`` hold one of the caller's, or the public one. Each name is checked (no quote,
    comma or control character reaches the SQL) and quoted as a string literal."""
    from chunkline.access import principal_set

    held = principal_set([*principals, public], "principals")
    return f"array_has_any({PRINCIPALS}, make_array({', '.join(_literal(p) for p in held)}))"


def search_as(table: lancedb.table.Table, vector: Sequence[float], k: int,
              principals: Sequence[str], public: str = "public") -> list[tuple[str, float]]:
    """The ``k`` rows of ``table`` (``open_current(...)``) nearest ``vector`` by cosine distance
    among those a caller holding ``principals`` may read, as ``(chunk_id, distance)``: the
    documented reader query, prefiltered."""
    found = (table.search(list(map(float, vector)), vector_column_name="vector")
             .distance_type("cosine")  # type: ignore[attr-defined]  # a vector builder; Table.search names its base
             .where(principals_where(principals, public), prefilter=True)
             .select(["chunk_id"]).limit(k).to_list())
    return [(row["chunk_id"], row["_distance"]) for row in found]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def current_generation(db: lancedb.DBConnection, name: str = "chunks") -> str:
    """The table readers of ``name`` should open in ``db``: the one ``<name>_alias`` names, or
    ``name`` itself in a store that never changed its embedding signature."""
    if f"{name}_alias" not in db.list_tables(limit=1_000_000).tables:
        return name
    try:
        pointer = db.open_table(f"{name}_alias")
    except ValueError:
        # Listed before its first version is committed: the pointer is being created, and it is
        # created naming ``name`` (``LanceStore.switch``), so ``name`` is what it will say.
        return name
    return pointer.to_arrow().column("generation")[0].as_py()


def open_current(uri: str, name: str = "chunks") -> lancedb.table.Table:
    """The generation of ``name`` readers get now, opened: ``open_current("/data/lance").search(
    vector).limit(5).to_list()``. Open it again to see a later generation."""
    db = lancedb.connect(uri)
    return db.open_table(current_generation(db, name))


def _quoted(values: Sequence[str]) -> str:
    """An SQL list of string literals (Lance filters are SQL expressions, DataFusion's dialect:
    a quote inside a literal is doubled)."""
    return ", ".join("'" + value.replace("'", "''") + "'" for value in values)


class LanceStore:
    def __init__(self, path: str, table: str = "chunks") -> None:
        # ``base``: the alias and the lock's name; ``name``: the generation written (``use``).
        self.path, self.name, self.base = path, table, table
        self.where = f"lancedb table {table!r} at {path}"
        self.db: lancedb.DBConnection | None = None  # connected on first use (_connect)
        self.table: lancedb.table.Table | None = None  # the generation ``open`` opened
        self.dim = 0
        self.principals = False  # rows carry who may read them (``open``)
        found = Path(path)
        for place in (found, *found.parents):
            if place.exists():
                if not place.is_dir():
                    raise ValueError(f"lancedb: {place} is a file, not a directory: give a "
                                     f"directory for the Lance tables (it is created if missing)")
                break

    def _lease(self, holder: str) -> OutputLease:
        return OutputLease(self.path, f"sync of run {holder}", LOCK_TIMEOUT_S,
                           name=f"{self.base}.sync-lock",
                           subject=f"lancedb table {self.base!r} at {self.path}",
                           timeout_setting="the sync lock's timeout")

    @contextlib.contextmanager
    def lock(self, holder: str) -> Iterator[None]:
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"lancedb: cannot create {self.path}: {exc}") from None
        lease = self._lease(holder)
        try:
            lease.acquire()
        except LeaseHeld as exc:
            raise StoreBusy(str(exc)) from None
        try:
            yield
        finally:
            lease.release()

    def busy(self) -> str | None:
        if not Path(self.path, f"{self.base}.sync-lock").exists():
            return None
        return self._lease("check").live_holder()

    def _connect(self) -> lancedb.DBConnection:
        if self.db is None:
            try:
                self.db = lancedb.connect(self.path)
            except OSError as exc:
                raise ValueError(f"lancedb: cannot open {self.path}: {exc}") from None
        return self.db

    def _opened(self) -> lancedb.table.Table:
        """The table ``open`` opened: every row operation comes after it (``core.Store``)."""
        if self.table is None:
            raise ValueError(f"{self.where}: not opened (Store.open comes first)")
        return self.table

    def _names(self) -> set[str]:
        return set(self._connect().list_tables(limit=1_000_000).tables)

    def use(self, generation: str) -> None:
        self.name, self.table = generation, None

    def current(self) -> str | None:
        if not Path(self.path).is_dir():
            return None
        found = current_generation(self._connect(), self.base)
        return found if found in self._names() else None

    def generations(self) -> list[str]:
        if not Path(self.path).is_dir():
            return []
        return sorted(name for name in self._names() if is_generation(self.base, name))

    def switch(self, generation: str, previous: str | None, rename_to: str | None) -> None:
        # ``rename_to`` is not needed: the pointer is its own table, so the first generation
        # keeps its plain name and a rollback to it points at ``base`` again.
        pointer = self.base + "_alias"
        if pointer not in self._names():
            # A table is listed before its first commit: made first naming the generation readers
            # get now (no pointer: ``base``), so a reader that finds it half made reads ``base``.
            self._connect().create_table(pointer, pa.Table.from_pylist([{"generation": self.base}],
                                                                       schema=_ALIAS_SCHEMA))
        row = pa.Table.from_pylist([{"generation": generation}], schema=_ALIAS_SCHEMA)
        # One overwrite, one commit: a reader opening the pointer gets the old name or the new.
        self._connect().create_table(pointer, row, mode="overwrite")

    def drop(self, generation: str) -> None:
        if generation == self.current():
            raise ValueError(f"generation {generation!r} is the one readers get: not dropped")
        names = self._names()
        for name in (generation, generation + "_sync"):
            if name in names:
                self._connect().drop_table(name)

    def open(self, dim: int, sparse: bool, create: bool = True, principals: bool = False) -> bool:
        self.dim = dim
        self.principals = principals
        if not create and not Path(self.path).is_dir():
            return False
        db = self._connect()
        if self.name in self._names():
            self.table = db.open_table(self.name)
            found = self.table.schema
            vector = found.field("vector").type if "vector" in found.names else None
            if found.names == schema(dim, principals=not principals).names:
                had = "with" if not principals else "without"
                raise ValueError(f"lancedb table {self.name!r} at {self.path} was synced from a run "
                                 f"{had} access control (principals), this run is not: sync into "
                                 "another table (?table=NAME)")
            width = getattr(vector, "list_size", None)
            if found.names != schema(dim, principals=principals).names or width != dim:
                what = f"{width}-d vectors" if width else "other columns (not a table chunkline wrote)"
                raise ValueError(f"lancedb table {self.name!r} at {self.path} holds {what}; this "
                                 f"run has {dim}-d: sync into another table (?table=NAME)")
            return True
        if not create:
            return False
        self.table = db.create_table(self.name, schema=schema(dim, principals=principals))
        return True

    def state(self) -> SyncState | None:
        if self.name + "_sync" not in self._names():
            return None
        rows = self._connect().open_table(self.name + "_sync").to_arrow().to_pylist()
        return SyncState.from_record(rows[0]) if rows else None

    def save_state(self, state: SyncState) -> None:
        row = pa.Table.from_pylist([asdict(state)], schema=_STATE_SCHEMA)
        # An overwrite is one commit: readers see the old state or the new, never none.
        self._connect().create_table(self.name + "_sync", row, mode="overwrite")

    def digests(self) -> list[tuple[str, str]]:
        held = self._opened().search().select(["chunk_id", DIGEST]).limit(None).to_arrow()
        return list(zip(held.column("chunk_id").to_pylist(), held.column(DIGEST).to_pylist()))

    def upsert(self, rows: pa.Table) -> None:
        (self._opened().merge_insert("chunk_id").when_matched_update_all()
         .when_not_matched_insert_all().execute(rows))

    def delete(self, chunk_ids: Sequence[str]) -> None:
        self._opened().delete(f"chunk_id IN ({_quoted(chunk_ids)})")

    def read_all(self) -> pa.Table:
        target = schema(self.dim, principals=self.principals)
        held = self._opened().to_arrow().select(target.names).cast(target)
        # Lance keeps the text as written; canonical again, as the other stores' JSON is, so a
        # row written by an older chunkline (``1.0``) compares by value.
        position = held.schema.get_field_index("metadata")
        texts = [canonical_metadata(t) for t in held.column("metadata").to_pylist()]
        return held.set_column(position, held.schema.field("metadata"), pa.array(texts, pa.string()))

    def finish(self) -> list[str]:
        notes = []
        table = self._opened()
        indexed = {tuple(index.columns) for index in table.list_indices()}
        rows = table.count_rows()
        if ("search_text",) not in indexed:
            table.create_index("search_text", config=FTS())
        if self.principals and (PRINCIPALS,) not in indexed:
            table.create_index(PRINCIPALS, config=LabelList())
        if ("vector",) not in indexed:
            if rows >= VECTOR_INDEX_MIN_ROWS:
                table.create_index(metric="cosine", vector_column_name="vector",
                                        index_type="IVF_PQ")
            else:
                notes.append(f"lancedb: no vector index on {rows} rows (IVF-PQ from "
                             f"{VECTOR_INDEX_MIN_ROWS:,}); searches scan every vector, exactly")
        # Folds the batches' small fragments together and brings new rows into the indexes.
        table.optimize()
        return notes

    def close(self) -> None:
        self.table = None
        self.db = None
