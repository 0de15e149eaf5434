"""What Arrow's memory pool costs the shard writer: a carried shard's merge, per pool.

    python bench/arrow_pool_bench.py RUN_DIR [--rounds 3]

RUN_DIR is a run directory of an index (its ``chunks-*.parquet``). For each chunk shard, what
a nightly rerun's writer does when 1 % of its documents changed: read the shard, mark the rows
of every document but each hundredth, sort, take them, write zstd Parquet. Each pool runs in a
fresh process (a pool is chosen once per process), the pools alternating for ``--rounds``;
the table gives each process's seconds. ``pipeline/run.py`` chooses jemalloc for the
in-process runner from what this shows.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

MERGE = """
import glob, io, sys, time
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
import numpy as np
pool = sys.argv[2]
pa.set_memory_pool(pa.jemalloc_memory_pool() if pool == "jemalloc" else pa.mimalloc_memory_pool())
started = time.perf_counter()
for path in sorted(glob.glob(sys.argv[1] + "/chunks-*.parquet")):
    shard = pq.read_table(path)
    ids = sorted(set(shard.column("doc_id").to_pylist()))
    kept = pa.array([doc for n, doc in enumerate(ids) if n % 100])
    keep = pc.is_in(shard.column("doc_id"), value_set=kept).to_numpy(zero_copy_only=False)
    order = pc.sort_indices(shard, sort_keys=[("doc_id", "ascending"), ("chunk_index", "ascending")]).to_numpy()
    merged = shard.take(pa.array(order[keep[order]]))
    pq.write_table(merged, io.BytesIO(), compression="zstd")
print(f"{time.perf_counter() - started:.3f}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    seconds: dict[str, list[str]] = {"mimalloc": [], "jemalloc": []}
    for _ in range(args.rounds):
        for pool in seconds:
            out = subprocess.run([sys.executable, "-c", MERGE, args.run_dir, pool],
                                 capture_output=True, text=True, check=True)
            seconds[pool].append(out.stdout.strip())
    print("| pool | seconds per process (merging every shard) |\n|---|---|")
    for pool, runs in seconds.items():
        print(f"| {pool} | {' '.join(runs)} |")


if __name__ == "__main__":
    main()
