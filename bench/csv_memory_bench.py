"""One big CSV file: the peak resident set of a whole run, and of each stage (issue #48).

    python bench/csv_memory_bench.py [--rows 100000] [--repo ../before] [--out bench/results_csv.md]

Writes a CSV of ``--rows`` orders (five columns, ~40 bytes a row: 4 MB at 100,000 rows), then
runs the pipeline on a folder holding only that file in one fresh process running
`bench/stage_memory.py` (FnApiRunner, configs/local.yaml, embedding off): the process's peak
resident set (wait4), its wall and CPU time, and the stage table stage_memory.py prints (RSS
before, highest while running, after, per fused stage). The CSV is one document: a pipe table
of every row, cut into sections of `input.max_table_rows` rows. `--repo` runs another
checkout's pipeline on the same file (before and after a change).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.dump_bench import measured_run  # noqa: E402
CITIES = ("Paris", "Lyon", "Berlin", "Madrid", "Oslo", "Rome", "Vienna", "Prague")
# A row of the stage table bench/stage_memory.py prints: name, before, peak, after, seconds.
_STAGE_ROW = re.compile(r"^\| `([^`]*)` \| (\d+) \| (\d+) \| (\d+) \| ([\d.]+) \|$", re.M)


def orders_csv(rows: int, seed: int = 1) -> bytes:
    """``rows`` orders under a header row: id, customer, city, amount, ship date."""
    draw = random.Random(seed)
    lines = ["order_id,customer,city,amount,shipped\n"] + [
        f"{n},cust{draw.randrange(10**5):05d},{draw.choice(CITIES)},{draw.randrange(10**5) / 100},"
        f"2024-{draw.randrange(1, 13):02d}-{draw.randrange(1, 29):02d}\n"
        for n in range(1, rows + 1)]
    return "".join(lines).encode()


def run_once(repo: Path, corpus: Path, output: Path) -> dict:
    log, wall, usage, counts = measured_run(repo, corpus, output)
    stages = [(name, int(before), int(peak), int(after), float(seconds))
              for name, before, peak, after, seconds in _STAGE_ROW.findall(log)]
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_mb": usage.ru_maxrss * 1024 / 1e6, "stages": stages, "counts": counts}


def report(rows: int, size_mb: float, repo: Path, result: dict) -> str:
    stages = result["stages"]
    top = max(stages, key=lambda stage: stage[2])[0].split(")")[0] if stages else "-"
    lines = [f"`python bench/csv_memory_bench.py --rows {rows}` (pipeline of {repo.name})", "",
             "| CSV rows | CSV MB | chunks | process peak RSS MB | stage at the peak | wall s | CPU s |",
             "|---:|---:|---:|---:|---|---:|---:|",
             f"| {rows:,} | {size_mb:.1f} | {result['counts'].get('chunks', 0):,} | "
             f"{result['peak_mb']:.0f} | `{top}` | {result['wall_s']:.1f} | {result['cpu_s']:.1f} |",
             "", "| stage (first transforms) | RSS before MB | peak during | after | seconds |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| `{name}` | {before} | {peak} | {after} | {seconds:.1f} |"
              for name, before, peak, after, seconds in stages]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repo", type=Path, default=ROOT, help="Checkout whose pipeline runs.")
    parser.add_argument("--out", type=Path, help="Append the tables here.")
    args = parser.parse_args()
    repo = args.repo.resolve()
    with tempfile.TemporaryDirectory(prefix="chunkline-csv-") as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        data = orders_csv(args.rows)
        (corpus / "orders.csv").write_bytes(data)
        result = run_once(repo, corpus, Path(tmp) / "out")
    text = report(args.rows, len(data) / 1e6, repo, result)
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as handle:
            handle.write(text + "\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
