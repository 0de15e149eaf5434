"""Do two runs hold the same index? Compares the chunks, documents, rejected and terms tables of
two run directories row by row (every column but the vectors equal, the vectors allclose), ignoring
what legitimately differs between runs (run ids, timings in the manifest).

Used to show that a restructuring changed no output:

    python bench/same_output.py out_before/<run_id> out_after/<run_id>
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SORT_KEYS = {
    "chunks": ["doc_id", "chunk_index"],
    "documents": ["doc_id", "uri", "status"],
    "rejected": ["doc_id", "uri", "reason"],
    "terms": ["term_id"],  # BM25 document frequencies, as a set: one file or several
}
OPTIONAL = {"terms"}  # a run without sparse vectors has none


def read_table(run_dir: Path, name: str) -> pa.Table:
    files = sorted((run_dir / name).glob("*.parquet")) or sorted(run_dir.glob(f"{name}*.parquet"))
    if not files:
        raise SystemExit(f"{run_dir}: no {name} Parquet files")
    table = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
    return table.sort_by([(key, "ascending") for key in SORT_KEYS[name]])


def differences(before: pa.Table, after: pa.Table, name: str, atol: float) -> list[str]:
    found = []
    if before.num_rows != after.num_rows:
        return [f"{name}: {before.num_rows} rows before, {after.num_rows} after"]
    columns = sorted(set(before.column_names) | set(after.column_names))
    for column in columns:
        if column not in before.column_names or column not in after.column_names:
            found.append(f"{name}.{column}: only in {'after' if column in after.column_names else 'before'}")
            continue
        left, right = before[column], after[column]
        if column == "embedding":
            if left.null_count != right.null_count:
                found.append(f"{name}.embedding: {left.null_count} vs {right.null_count} nulls")
                continue
            if left.null_count == left.length():
                continue
            a = np.array(left.to_pylist(), dtype=np.float64)
            b = np.array(right.to_pylist(), dtype=np.float64)
            worst = float(np.abs(a - b).max()) if a.size else 0.0
            if not np.allclose(a, b, atol=atol, rtol=0):
                found.append(f"{name}.embedding: max |diff| {worst:.2e} > {atol:.0e}")
            continue
        if not left.equals(right):
            rows = [i for i, (x, y) in enumerate(zip(left.to_pylist(), right.to_pylist())) if x != y]
            found.append(f"{name}.{column}: {len(rows)} rows differ, first at row {rows[0] if rows else '?'}"
                         f" (type {left.type} vs {right.type})")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--atol", type=float, default=1e-5, help="Vector tolerance per component.")
    args = parser.parse_args(argv)
    problems = []
    for name in SORT_KEYS:
        if name in OPTIONAL and not any(run.glob(f"{name}*.parquet") for run in (args.before, args.after)):
            continue
        before, after = read_table(args.before, name), read_table(args.after, name)
        problems += differences(before, after, name, args.atol)
        print(f"{name}: {before.num_rows} rows before, {after.num_rows} after")
    for problem in problems:
        print("DIFFERENT", problem)
    print("same output" if not problems else f"{len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
