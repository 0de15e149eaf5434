"""Record dumps: memory and time of one big JSONL or Parquet file against its size.

    python bench/dump_bench.py --mb 25 100 200 --formats jsonl parquet [--repo ../before] \
        [--out bench/results_dump.md]

Each dump is one file of short records (~350 bytes of real text each: the paragraphs of the
documentation and source files shipped with this Python, as bench/scale_bench.py uses, cut into
ticket-sized pieces, each with an id and a small metadata object), the shape of a CMS or
ticket-system export. Each size is one fresh process running `bench/stage_memory.py` (the
pipeline in that process, embedding off): the Read stage's peak resident set (the highest
peak of the stages whose first transforms are the read's), the process's peak (wait4) and its
wall time. A reader that holds a whole file grows with the file; one that streams stays flat.
`--repo` runs another checkout's pipeline on the same files (before and after a change).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_bench import paragraphs, source_files  # noqa: E402

RECORD_BYTES = 350


def records(seed: int = 5) -> Iterator[dict]:
    """Ticket-sized records of real text, in a fixed order; later passes rotate the paragraphs
    so texts stay distinct (exact dedupe would otherwise drop the repeats)."""
    files = source_files()
    number = 0
    for round_number in range(1_000):
        for path in files:
            piece = ""
            for block in paragraphs(path):
                piece = f"{piece} {block}" if piece else block
                if len(piece) >= RECORD_BYTES:
                    text = piece if not round_number else f"[pass {round_number}] {piece[round_number % 50:]}"
                    yield {"id": f"R-{number:08d}", "text": text,
                           "metadata": {"team": ("fleet", "arm", "dock")[number % 3],
                                        "source": path.name}}
                    number += 1
                    piece = ""


def write_jsonl(path: Path, megabytes: float) -> int:
    target, written, count = int(megabytes * 1e6), 0, 0
    with path.open("w", encoding="utf-8") as handle:
        for record in records():
            line = json.dumps(record, ensure_ascii=False) + "\n"
            handle.write(line)
            written += len(line.encode("utf-8"))
            count += 1
            if written >= target:
                return count
    return count


def write_parquet(path: Path, megabytes: float, compression: str = "zstd") -> int:
    """Row groups of 10,000 rows, as an export tool writes them (pyarrow's writer, zstd unless
    told: ``none`` makes a file whose size on disk is about its text's)."""
    target, written, count, batch = int(megabytes * 1e6), 0, 0, []
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("team", pa.string())])
    with pq.ParquetWriter(path, schema, compression=compression) as writer:
        for record in records():
            batch.append(record)
            written += len(record["text"]) + 40
            count += 1
            if len(batch) == 10_000 or written >= target:
                writer.write_table(pa.Table.from_pylist(
                    [{"id": r["id"], "text": r["text"], "team": r["metadata"]["team"]} for r in batch],
                    schema))
                batch = []
            if written >= target:
                return count
    return count


def measured_run(repo: Path, corpus: Path, output: Path, extra: Sequence[str] = ()
                 ) -> tuple[str, float, os.struct_rusage, dict]:
    """``chunkline run`` of ``repo`` over ``corpus`` (embed null) under bench/stage_memory.py, in
    a fresh process: its log (the per-stage RSS table), wall seconds, resource usage (wait4:
    peak RSS, CPU) and the run's manifest counts."""
    command = [sys.executable, str(repo / "bench" / "stage_memory.py"), "run",
               "--config", "configs/local.yaml", "--set", f"input.pattern={corpus}/**",
               "--set", f"output.path={output}", "--set", "embed=null", "--allow-shrink", *extra]
    environment = dict(os.environ, PYTHONPATH=str(repo))
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=repo, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    log = process.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run failed ({status}):\n{log[-4000:]}")
    run_id = (output / "LATEST").read_text().strip()
    from chunkline.index.manifest import load_manifest

    return log, wall, usage, dict(load_manifest(str(output / run_id)).counts)


def run_once(repo: Path, corpus: Path, output: Path, fmt: str) -> dict:
    extra = ["--set", "input.parquet.metadata_columns=[team]"] if fmt == "parquet" else []
    log, wall, usage, counts = measured_run(repo, corpus, output, extra)
    # The read stage is the fused one whose first transforms are the Read composite's own
    # ("Read/Pattern0/..."); every stage after a shuffle also starts with a "<GBK>/Read".
    read_peaks = [float(m.group(1)) for m in re.finditer(
        r"^\| `Read/[^`]*` \| \d+ \| (\d+) \|", log, re.M)]
    stages = [(float(m.group(2)), m.group(1)) for m in re.finditer(
        r"^\| `([^`]*)` \| \d+ \| (\d+) \|", log, re.M)]
    return {"wall_s": wall, "peak_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime,
            "read_peak_mb": max(read_peaks) if read_peaks else float("nan"), "counts": counts,
            "top_stage": max(stages)[1].split(")")[0][:40] if stages else "-"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[25, 100])
    parser.add_argument("--formats", nargs="+", choices=["jsonl", "parquet"], default=["jsonl", "parquet"])
    parser.add_argument("--repo", type=Path, default=ROOT, help="Checkout whose pipeline runs.")
    parser.add_argument("--parquet-compression", default="zstd", choices=["zstd", "snappy", "none"],
                        help="How the Parquet dump is compressed (none: its size on disk is its text's).")
    parser.add_argument("--out", type=Path, help="Append the table here.")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="chunkline-dump-") as tmp:
        for fmt in args.formats:
            for megabytes in args.mb:
                corpus = Path(tmp) / f"{fmt}-{megabytes:g}"
                corpus.mkdir()
                dump = corpus / f"export.{fmt}"
                count = (write_jsonl(dump, megabytes) if fmt == "jsonl"
                         else write_parquet(dump, megabytes, args.parquet_compression))
                size = dump.stat().st_size / 1e6
                result = run_once(args.repo.resolve(), corpus, Path(tmp) / f"out-{fmt}-{megabytes:g}", fmt)
                rows.append((fmt, size, count, result))
                print(f"{fmt} {size:.0f} MB: {result['wall_s']:.1f} s, peak {result['peak_mb']:.0f} MB, "
                      f"read {result['read_peak_mb']:.0f} MB", flush=True)
    compression = (f" --parquet-compression {args.parquet_compression}"
                   if args.parquet_compression != "zstd" else "")
    lines = [f"`python bench/dump_bench.py --mb {' '.join(f'{m:g}' for m in args.mb)} "
             f"--formats {' '.join(args.formats)}{compression}` (pipeline of {args.repo.resolve().name})", "",
             "| file | MB | records | kept | Read stage peak RSS MB | process peak RSS MB | stage at the peak | wall s | CPU s | MB/s |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for fmt, size, count, r in rows:
        lines.append(f"| {fmt} | {size:.0f} | {count:,} | {r['counts']['kept']:,} | {r['read_peak_mb']:.0f} | "
                     f"{r['peak_mb']:.0f} | `{r['top_stage']}` | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {size / r['wall_s']:.2f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as handle:
            handle.write(text + "\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
