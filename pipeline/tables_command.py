"""``chunkline tables OUTPUT``: the output's Iceberg tables, each with its current metadata file,
snapshot, run and live rows, and how each engine reads it (:mod:`chunkline.index.iceberg`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from chunkline.pipeline import exits


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", help="the output directory (what output.path names)")
    parser.add_argument("--json", action="store_true", help="one JSON object, for scripts")


def reads(output: str, metadata: str, identifier: str, catalog: Any) -> dict[str, str]:
    """One line per engine that reads the table whose current metadata file is ``metadata``,
    registered as ``identifier`` in ``catalog`` (a ``CatalogSpec``). pyiceberg opens it by name
    from the catalog (secret properties left out: pyiceberg's own configuration gives them), or
    for a bucket's embedded tables from the table's folder (its version hint)."""
    from chunkline.index.iceberg import CATALOG_FILE, CATALOG_NAME, ICEBERG_DIR

    if catalog.name is not None:
        opened = f"load_catalog({catalog.name!r}, **{catalog.readable()!r}).load_table('{identifier}')"
    elif "://" in output:
        opened = f"StaticTable.from_metadata('{metadata.rsplit('/metadata/', 1)[0]}')"
    else:
        root = Path(output).resolve() / ICEBERG_DIR
        opened = (f"SqlCatalog('{CATALOG_NAME}', uri='sqlite:///{root / CATALOG_FILE}', "
                  f"warehouse='{root.as_uri()}').load_table('{identifier}')")
    return {
        "duckdb": f"LOAD iceberg; SELECT * FROM iceberg_scan('{metadata}')",
        "pyiceberg": f"{opened}.scan().to_arrow()",
        # Polars' native reader does not map the vector's fixed-size list (docs/engines.md).
        "polars": f"pl.scan_iceberg('{metadata}')",
        "spark": f"spark.read.format('iceberg').load('{metadata}')",
    }


def tables_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from chunkline.index.iceberg import IcebergError, recorded, supported, tables
    from chunkline.pipeline.redact import redacted

    if not supported(args.output):
        print(f"chunkline tables: {args.output}: Iceberg tables are written for local and gs:// "
              "outputs only", file=err)
        return exits.USAGE
    try:
        catalog = recorded(args.output)
        states = tables(args.output)
    except IcebergError as exc:
        print(f"chunkline tables: {redacted(str(exc))}", file=err)
        return exits.USAGE
    found: list[dict[str, Any]] = [
        {"table": state.name, "catalog": state.catalog, "identifier": state.identifier,
         "metadata": state.metadata, "snapshot_id": state.snapshot_id, "run_id": state.run_id,
         "rows": state.rows, "read": reads(args.output, state.metadata, state.identifier, catalog)}
        for state in states]
    if args.json:
        print(json.dumps({"output": args.output, "tables": found}, indent=2), file=out)
        return 0
    for table in found:
        where = f"{table['catalog']}." if table["catalog"] else ""
        print(f"{where}{table['identifier']}: {table['rows']:,} rows, snapshot {table['snapshot_id']} "
              f"(run {table['run_id']})", file=out)
        print(f"  metadata   {table['metadata']}", file=out)
        for engine, line in table["read"].items():
            print(f"  {engine:<10} {line}", file=out)
    return 0
