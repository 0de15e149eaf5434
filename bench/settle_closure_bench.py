"""Time and memory of a rerun's closure (``transforms/settle.py``, ``Affected``) at two sizes.

A previous state table of N documents is written as a run writes it (row groups of 8,192 rows,
23 band keys a document, 20 % of the documents in exact or near twin pairs); a 1 % night
changes N/100 of them (their rows not settled, new hashes and band keys as touches). In a
fresh process per size and way, the closure runs as the pipeline runs it:

- ``blocks``: ``Affected`` itself (a bitmap per 65,536 settled rows, the state table read a
  row group at a time, a pass per round);
- ``whole``: the same rule over the whole settled state held at once (``dedupe_affected``),
  as ``Affected`` ran before: the state's columns in memory, then the closure.

Each prints its seconds, the rows it marked and the process's peak RSS above what it held
before the closure began (the table written, the inputs made).

    python bench/settle_closure_bench.py --docs 200000 1000000 [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BANDS = 23
ROW_GROUP = 8192


def write_state(path: Path, docs: int, seed: int = 3) -> None:
    from chunkline.state import state_schema

    rng = np.random.default_rng(seed)
    ids = np.array([f"doc/{n:09d}.md" for n in range(docs)], dtype=object)
    hashes = np.array([f"{value:064x}" for value in rng.integers(0, 1 << 62, docs)], dtype=object)
    bands = rng.integers(0, 1 << 63, (docs, BANDS), dtype=np.uint64)
    survivors = ids.copy()
    twins = rng.choice(docs, size=docs // 10 * 2, replace=False).reshape(-1, 2)
    for first, second in twins.tolist():  # a near twin: half its band keys shared, a duplicate
        bands[second, : BANDS // 2] = bands[first, : BANDS // 2]
        survivors[second] = ids[first]
    status = np.where(survivors == ids, "kept", "duplicate")
    writer = pq.ParquetWriter(path, state_schema())
    for start in range(0, docs, ROW_GROUP):
        end = min(docs, start + ROW_GROUP)
        n = end - start
        writer.write_table(pa.table({
            "doc_id": ids[start:end].tolist(), "uri": ids[start:end].tolist(), "position": np.zeros(n, np.int64),
            "input_digest": ["i"] * n, "facts": ["f"] * n, "text_hash": pa.nulls(n, pa.binary(32)),
            "line_keys": pa.nulls(n, pa.list_(pa.uint64())), "doc_hash": hashes[start:end].tolist(),
            "bands": pa.FixedSizeListArray.from_arrays(pa.array(bands[start:end].reshape(-1)), BANDS).cast(
                pa.list_(pa.uint64())),
            "status": status[start:end].tolist(), "survivor": survivors[start:end].tolist()},
            schema=state_schema()), row_group_size=ROW_GROUP)
    writer.close()


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(path: Path, docs: int, way: str) -> dict:
    """In this process: the closure over the state at ``path`` with 1 % of it changed."""
    from chunkline.index.tables import Deletions
    from chunkline.settle import Csr, SettledState, Touch, dedupe_affected
    from chunkline.state import SettledBatch, state_source
    from chunkline.transforms.settle import Affected, _band_matrix, settled_mask, settled_rows

    source = state_source([(str(path), Deletions.listed(()))])
    assert source is not None
    rng = np.random.default_rng(9)
    changed = np.sort(rng.choice(docs, size=docs // 100, replace=False))
    settled = np.ones(docs, bool)
    settled[changed] = False
    touches = [(f"doc/{n:09d}.md", f"{n:064x}new", rng.integers(0, 1 << 63, BANDS, dtype=np.uint64))
               for n in changed.tolist()]
    rows = np.flatnonzero(settled)
    masks = []
    if way == "blocks":  # what the batches send, made before the closure (per bundle in a run)
        batch = SettledBatch(("",) * len(rows), ("",) * len(rows), rows, rows, rows, None,
                             np.zeros(len(rows), np.int64), rows.astype(np.int64))
        grouped: dict = {}
        for key, part in settled_rows(batch):
            grouped.setdefault(key, []).append(part)
        masks = [settled_mask(item) for item in grouped.items()]
        del batch, grouped
    before = peak_mb()
    started = time.perf_counter()
    if way == "blocks":
        outputs = list(Affected(source, BANDS, 1000, 1, 4).process(None, masks, touches, []))
        marked = len(outputs[0].value)
    else:
        table = pq.read_table(path, columns=["doc_id", "doc_hash", "bands", "status", "survivor"])
        keep, old = pa.array(settled), pa.array(~settled)
        mine, gone = table.filter(keep), table.filter(old)
        band_keys, signed = _band_matrix(mine.column("bands"), BANDS)
        old_keys, old_signed = _band_matrix(gone.column("bands"), BANDS)
        n = mine.num_rows
        state = SettledState(mine.column("doc_id").to_numpy(zero_copy_only=False).astype(object),
                             mine.column("doc_hash").to_numpy(zero_copy_only=False).astype(object),
                             band_keys, signed, mine.column("survivor").to_numpy(zero_copy_only=False).astype(object),
                             Csr(np.zeros(n + 1, np.int64), np.zeros(0, np.uint64)),
                             Csr(np.zeros(n + 1, np.int64), np.zeros(0, np.uint64)))
        touch = Touch(np.array([t[0] for t in touches] + gone.column("doc_id").to_pylist(), dtype=object),
                      np.array([t[1] for t in touches] + gone.column("doc_hash").to_pylist(), dtype=object),
                      np.concatenate([t[2] for t in touches] + [old_keys[old_signed].reshape(-1)]),
                      gone.column("survivor").to_numpy(zero_copy_only=False).astype(object))
        marked = int(dedupe_affected(state, touch, max_bucket_pairs=1000).sum())
    return {"docs": docs, "way": way, "seconds": round(time.perf_counter() - started, 2), "marked": marked,
            "peak_above_mb": round(peak_mb() - before, 1), "peak_mb": round(peak_mb(), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # PATH DOCS WAY: in a child process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(Path(args.one[0]), int(args.one[1]), args.one[2])))
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="closure-"))
    rows = []
    for docs in args.docs:
        path = work / str(docs) / "state-00000-of-00001.parquet"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_state(path, docs)
        for way in ("blocks", "whole"):
            done = subprocess.run([sys.executable, __file__, "--one", str(path), str(docs), way],
                                  check=True, capture_output=True, text=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print("| documents | way | seconds | marked | peak RSS above the start MB | peak RSS MB |")
    print("|---:|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['docs']:,} | {row['way']} | {row['seconds']} | {row['marked']:,} | "
              f"{row['peak_above_mb']} | {row['peak_mb']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
