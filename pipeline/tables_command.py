"""``chunkline tables OUTPUT``: the output's Iceberg tables, each with its current metadata file,
snapshot, run and live rows, and how each engine reads it (:mod:`chunkline.index.iceberg`)."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from chunkline.pipeline import exits


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", help="the output directory (what output.path names)")
    parser.add_argument("--json", action="store_true", help="one JSON object, for scripts")


def reads(output: str, metadata: str, identifier: str) -> dict[str, str]:
    """One line per engine that reads the table whose current metadata file is ``metadata``."""
    from chunkline.index.iceberg import CATALOG_NAME, CATALOG_FILE, ICEBERG_DIR
    from pathlib import Path

    root = Path(output).resolve() / ICEBERG_DIR
    return {
        "duckdb": f"LOAD iceberg; SELECT * FROM iceberg_scan('{metadata}')",
        "pyiceberg": (f"SqlCatalog('{CATALOG_NAME}', uri='sqlite:///{root / CATALOG_FILE}', "
                      f"warehouse='{root.as_uri()}').load_table('{identifier}').scan().to_arrow()"),
        # Polars' native reader does not map the vector's fixed-size list (docs/engines.md).
        "polars": f"pl.scan_iceberg('{metadata}')",
        "spark": f"spark.read.format('iceberg').load('{metadata}')",
    }


def tables_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from chunkline.index.iceberg import IcebergError, supported, tables

    if not supported(args.output):
        print(f"chunkline tables: {args.output}: Iceberg tables are written for local outputs only "
              "in this release", file=err)
        return exits.USAGE
    try:
        states = tables(args.output)
    except IcebergError as exc:
        print(f"chunkline tables: {exc}", file=err)
        return exits.USAGE
    found: list[dict[str, Any]] = [{"table": state.name, "identifier": state.identifier, "metadata": state.metadata,
              "snapshot_id": state.snapshot_id, "run_id": state.run_id, "rows": state.rows,
              "read": reads(args.output, state.metadata, state.identifier)} for state in states]
    if args.json:
        print(json.dumps({"output": args.output, "tables": found}, indent=2), file=out)
        return 0
    for table in found:
        print(f"{table['identifier']}: {table['rows']:,} rows, snapshot {table['snapshot_id']} "
              f"(run {table['run_id']})", file=out)
        print(f"  metadata   {table['metadata']}", file=out)
        for engine, line in table["read"].items():
            print(f"  {engine:<10} {line}", file=out)
    return 0
