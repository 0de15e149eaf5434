"""LanceDB (embedded, a directory of Lance files): the store for a local user.

One table holds the rows (``pipeline.sync.rows.schema``: ``vector`` a fixed-size float32 list,
``metadata`` JSON text, the BM25 sparse vector as two list columns), another (``<table>_sync``)
the one-row sync state. Every write is one Lance commit (a new table version), so a batch is
all or nothing. After writing: a full-text index on ``search_text`` (Lance's own inverted
index, BM25-ranked) and, from ``VECTOR_INDEX_MIN_ROWS`` rows, an IVF-PQ vector index with the
cosine metric; new rows reach both with ``optimize()``, and rows not yet indexed are still
searched, exhaustively (LanceDB docs, "Vector indexes" and "Full-text search").
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Sequence

import lancedb
import pyarrow as pa
from lancedb.index import FTS

from pipeline.sync.core import SyncState
from pipeline.sync.rows import DIGEST, schema

# IVF-PQ trains k-means over the vectors (256 centroids per sub-vector for PQ, ~sqrt(rows)
# partitions for IVF); on fewer rows its centroids are poor and a flat scan (a few ms for ten
# thousand 384-d rows) is exact anyway.
VECTOR_INDEX_MIN_ROWS = 10_000
_STATE_SCHEMA = pa.schema([pa.field("run_id", pa.string()), pa.field("syncing", pa.string()),
                           pa.field("chunks", pa.int64()), pa.field("digest", pa.string())])


def _quoted(values: Sequence[str]) -> str:
    """An SQL list of string literals (Lance filters are SQL expressions, DataFusion's dialect:
    a quote inside a literal is doubled)."""
    return ", ".join("'" + value.replace("'", "''") + "'" for value in values)


class LanceStore:
    def __init__(self, path: str, table: str = "chunks") -> None:
        self.path, self.name = path, table
        self.db = lancedb.connect(path)
        self.table = None
        self.dim = 0

    def _names(self) -> set[str]:
        return set(self.db.list_tables(limit=1_000_000).tables)

    def open(self, dim: int, sparse: bool) -> None:
        self.dim = dim
        if self.name in self._names():
            self.table = self.db.open_table(self.name)
            have = self.table.schema.field("vector").type.list_size
            if have != dim or self.table.schema.names != schema(dim).names:
                raise ValueError(f"lancedb table {self.name!r} at {self.path} holds {have}-d "
                                 f"vectors or other columns; this run has {dim}-d: sync into "
                                 "another table (?table=NAME)")
        else:
            self.table = self.db.create_table(self.name, schema=schema(dim))

    def state(self) -> SyncState | None:
        if self.name + "_sync" not in self._names():
            return None
        rows = self.db.open_table(self.name + "_sync").to_arrow().to_pylist()
        return SyncState(**rows[0]) if rows else None

    def save_state(self, state: SyncState) -> None:
        row = pa.Table.from_pylist([asdict(state)], schema=_STATE_SCHEMA)
        # An overwrite is one commit: readers see the old state or the new, never none.
        self.db.create_table(self.name + "_sync", row, mode="overwrite")

    def digests(self) -> dict[str, str]:
        held = self.table.search().select(["chunk_id", DIGEST]).limit(None).to_arrow()
        return dict(zip(held.column("chunk_id").to_pylist(), held.column(DIGEST).to_pylist()))

    def upsert(self, rows: pa.Table) -> None:
        (self.table.merge_insert("chunk_id").when_matched_update_all()
         .when_not_matched_insert_all().execute(rows))

    def delete(self, chunk_ids: Sequence[str]) -> None:
        self.table.delete(f"chunk_id IN ({_quoted(chunk_ids)})")

    def read_all(self) -> pa.Table:
        return self.table.to_arrow().select(schema(self.dim).names).cast(schema(self.dim))

    def finish(self) -> list[str]:
        notes = []
        indexed = {tuple(index.columns) for index in self.table.list_indices()}
        rows = self.table.count_rows()
        if ("search_text",) not in indexed:
            self.table.create_index("search_text", config=FTS())
        if ("vector",) not in indexed:
            if rows >= VECTOR_INDEX_MIN_ROWS:
                self.table.create_index(metric="cosine", vector_column_name="vector",
                                        index_type="IVF_PQ")
            else:
                notes.append(f"lancedb: no vector index on {rows} rows (IVF-PQ from "
                             f"{VECTOR_INDEX_MIN_ROWS:,}); searches scan every vector, exactly")
        # Folds the batches' small fragments together and brings new rows into the indexes.
        self.table.optimize()
        return notes

    def close(self) -> None:
        self.table = None
