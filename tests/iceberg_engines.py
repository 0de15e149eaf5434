"""The index's Iceberg tables read as a data team reads them: DuckDB's ``iceberg_scan`` (its
Iceberg and Avro extensions loaded from their PyPI packages: nothing downloaded), pyiceberg's
scan, and Polars' native Iceberg reader; each compared with what chunkline's own reader holds."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pyarrow as pa

# The columns that identify a row of each table, to order what engines return in no set order.
KEYS = {"chunks": ("doc_id", "chunk_index"), "documents": ("doc_id", "uri", "status"),
        "rejected": ("doc_id", "uri", "reason"), "terms": ("term_id",)}


def duckdb_connection():
    import duckdb

    connection = duckdb.connect()
    for name in ("avro", "iceberg"):
        folder = Path(importlib.util.find_spec(f"duckdb_extension_{name}").origin).parent
        (extension,) = folder.glob(f"extensions/*/{name}.duckdb_extension")
        connection.execute(f"LOAD '{extension}'")
    return connection


def rows(table: pa.Table, name: str, columns: list[str]) -> list[tuple]:
    """``table``'s ``columns`` as sorted tuples (lists for list columns), comparable across engines."""
    picked = table.select(columns).to_pylist()
    found = [tuple(tuple(v) if isinstance(v, list) else v for v in (row[c] for c in columns)) for row in picked]
    keys = [columns.index(k) for k in KEYS[name]]
    return sorted(found, key=lambda row: tuple(str(row[k]) for k in keys))


def engine_tables(output: str | Path, name: str, columns: list[str]) -> dict[str, pa.Table]:
    """Table ``name`` of ``output`` as each engine reads it now, ``columns`` only; pyiceberg
    opens it by name in the output's catalog (the embedded one, or the one its config named).
    Polars reads with its native reader (no pyiceberg fallback), the vectors included. A
    ``gs://`` output (the storage emulator): DuckDB (no httpfs here) and Polars' native reader
    (its own object store client) cannot reach the emulator, so pyiceberg's scan and Polars over
    pyiceberg's FileIO read it."""
    import polars as pl

    from chunkline.index import iceberg

    (state,) = [s for s in iceberg.tables(str(output)) if s.name == name]
    place = iceberg.open_catalog(str(output), create=False)
    table = place.found.load_table(place.identifier(name))
    found = {"pyiceberg": table.scan(selected_fields=tuple(columns)).to_arrow()}
    if str(output).startswith("gs://"):
        found["polars"] = pl.scan_iceberg(table, reader_override="pyiceberg").select(columns).collect().to_arrow()
        return found
    quoted = ", ".join(f'"{c}"' for c in columns)
    found["duckdb"] = duckdb_connection().execute(f"SELECT {quoted} FROM iceberg_scan('{state.metadata}')").arrow()
    if hasattr(found["duckdb"], "read_all"):
        found["duckdb"] = found["duckdb"].read_all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the planner's note that polars_iceberg is absent
        found["polars"] = pl.scan_iceberg(state.metadata, reader_override="native").select(columns).collect().to_arrow()
    return found


def assert_engines_read(output: str | Path, expected: dict[str, pa.Table | None]) -> None:
    """Every engine reads exactly ``expected``'s rows (chunkline's reader of the run LATEST
    names) from the output's current Iceberg snapshots; a table ``expected`` lacks has none."""
    for name, want in expected.items():
        if want is None:
            continue
        columns = want.column_names
        for engine, got in engine_tables(output, name, columns).items():
            assert got.column_names == columns, (name, engine)
            assert rows(got, name, columns) == rows(want, name, columns), (name, engine)
