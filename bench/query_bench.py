"""Answering a question over a large index: where a query's time goes, at 100,000 chunks.

Builds the demo index (``configs/local.yaml`` on examples/corpus) once, then copies its chunk
rows until there are ``--chunks`` of them (each copy under new doc and chunk ids; same vectors
and sparse weights), written back as the run's shards, and times each step of
``chunkline.pipeline.query.search`` in one process: loading the shards, the BM25 scores, the dense
scores (the question embedded by the index's model: its load is reported apart), the fusion
and the top k. Best of ``--repeats``.

    python bench/query_bench.py [--chunks 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chunkline.index.manifest_types import to_json  # noqa: E402
from chunkline.index.tables import live_files, read_table  # noqa: E402
from chunkline.pipeline.config import load_config  # noqa: E402
from chunkline.pipeline.manifest import load_manifest  # noqa: E402
from chunkline.pipeline.query import dense_scores, fused, load_chunks, search, sparse_scores  # noqa: E402
from chunkline.pipeline.run import run  # noqa: E402

QUESTION = "how long should the arm warm up before calibration?"


def grow(run_dir: Path, target: int) -> int:
    """The run's chunks copied (doc and chunk ids suffixed) to ``target`` rows, written over its
    chunk files (as many as it lists), and its manifest made to state them."""
    manifest = load_manifest(str(run_dir))
    shards = [Path(file.path) for file in live_files(str(run_dir), manifest, "chunks")]
    base = read_table(str(run_dir), manifest, "chunks")
    copies = -(-target // len(base))
    tables = []
    for copy in range(copies):
        suffix = pa.scalar(f"~{copy}")
        table = base.set_column(base.schema.get_field_index("doc_id"), "doc_id",
                                pc.binary_join_element_wise(base.column("doc_id"), suffix, ""))
        table = table.set_column(table.schema.get_field_index("chunk_id"), "chunk_id",
                                 pc.binary_join_element_wise(table.column("chunk_id"), suffix, ""))
        tables.append(table)
    grown = pa.concat_tables(tables).slice(0, target)
    per_shard = -(-len(grown) // len(shards))
    for index, path in enumerate(shards):
        pq.write_table(grown.slice(index * per_shard, per_shard), path, compression="zstd")
    restate(run_dir, "chunks")
    return len(grown)


def restate(run_dir: Path, table: str) -> None:
    """The run's manifest made to state the rows and bytes its ``table`` files hold now (a
    bench rewrote them in place), none deleted."""
    manifest = load_manifest(str(run_dir))
    restated = tuple(dataclasses.replace(entry, rows=pq.read_metadata(file.path).num_rows,
                                         bytes=Path(file.path).stat().st_size, deleted=(), digest=None)
                     for entry, file in zip(manifest.listing.tables[table], live_files(str(run_dir), manifest, table)))
    listing = dataclasses.replace(manifest.listing, tables={**manifest.listing.tables, table: restated})
    (run_dir / "manifest.json").write_text(to_json(dataclasses.replace(manifest, listing=listing)),
                                           encoding="utf-8")


def timed(step, repeats: int):
    best, value = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        value = step()
        best = min(best, time.perf_counter() - started)
    return best, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="chunkline-query-") as scratch:
        output = Path(scratch) / "index"
        config = load_config(ROOT / "configs" / "local.yaml",
                             [f"input.pattern={ROOT}/examples/corpus/**", f"output.path={output}"])
        summary = run(config)
        run_dir = Path(summary.run_dir)
        chunks = grow(run_dir, args.chunks)
        manifest = load_manifest(str(run_dir))
        t_load, table = timed(lambda: load_chunks(str(run_dir), manifest), args.repeats)
        t_sparse, sparse = timed(lambda: sparse_scores(table, manifest, str(run_dir), QUESTION), args.repeats)
        t_dense_cold, _ = timed(lambda: dense_scores(table, manifest, str(run_dir), QUESTION), 1)
        t_dense, dense = timed(lambda: dense_scores(table, manifest, str(run_dir), QUESTION), args.repeats)
        t_fuse, scores = timed(lambda: fused(dense, sparse), args.repeats)
        t_top, _ = timed(lambda: table.take(pa.array(np.argsort(-scores, kind="stable")[:5])).to_pylist(),
                         args.repeats)
        t_search, hits = timed(lambda: search(str(output), QUESTION, k=5), 1)
    rows = [("load the shards (Arrow, columnar)", t_load), ("BM25 scores (numpy)", t_sparse),
            ("dense scores incl. model load and question embedding", t_dense_cold),
            ("dense scores, model warm", t_dense), ("reciprocal rank fusion", t_fuse),
            ("top 5 to Python rows", t_top), ("search() end to end, one call", t_search)]
    print(f"{chunks:,} chunks, 384-d float32 vectors + BM25 sparse vectors; best of {args.repeats}\n")
    print("| step | seconds |\n|---|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} |")
    print("\n" + json.dumps({"top": [h.chunk_id for h in hits]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
