"""The memo at any size: a full run, a no-change rerun and a 1 % rerun of many small documents.

    python bench/memo_scale_bench.py --docs 100000 [--repeat 3] [--out bench/RESULTS.md]

The corpus (generated, seeded): one JSONL dump of ``--docs`` small records (a few sentences
each from a fixed vocabulary; one in ten ends with a shared footer line, so boilerplate finds
it; one in two hundred is an exact copy of another) plus ``--files`` Markdown files. Every run
is ``chunkline.pipeline.run.run`` in this one process (configs/local.yaml, ``embed: null``, the
in-process FnApiRunner), timed by the manifest's pipeline seconds; in order, after a warm-up
run: the floor (a one-document corpus: its full run and its unchanged rerun, the fixed cost of
a run), the full run, a rerun with nothing changed, and a rerun with 1 % of the records and
files changed (one new sentence each); the floor and each rerun ``--repeat`` times, the median
reported. The figure asked of a rerun is "above the floor", as bench/reindex_bench.py defines
it: (rerun - floor rerun) / (full - floor full). The memo's recalled and computed counts (the
manifest's ``memo``) are printed for each run: a rerun should compute only what changed.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chunkline.index.manifest import load_manifest  # noqa: E402
from chunkline.pipeline.config import load_config  # noqa: E402
from chunkline.pipeline.run import run  # noqa: E402

WORDS = ("robot arm calibration sensor firmware battery dock mission route map lidar torque "
         "encoder gripper payload controller network latency safety zone charger floor aisle "
         "shelf pallet scanner camera operator ticket alert restart update rollback").split()
FOOTER = "Questions about this ticket go to the fleet operations desk."
TARGET = 0.12  # the 1 % rerun, above the floor, against a full run


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + "."


def record_text(rng: random.Random, n: int) -> str:
    text = f"Ticket {n}. " + " ".join(sentence(rng) for _ in range(rng.randint(2, 4)))
    return text + ("\n" + FOOTER if n % 10 == 0 else "")


def generate(corpus: Path, docs: int, files: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    corpus.mkdir(parents=True)
    texts = []
    with (corpus / "tickets.jsonl").open("w", encoding="utf-8") as handle:
        for n in range(docs):
            text = texts[rng.randrange(len(texts))] if n % 200 == 199 else record_text(rng, n)
            texts.append(text)
            handle.write(json.dumps({"id": f"T{n:07d}", "text": text}) + "\n")
    pages = corpus / "pages"
    pages.mkdir()
    for n in range(files):
        body = "\n\n".join(" ".join(sentence(rng) for _ in range(4)) for _ in range(3))
        (pages / f"page{n:05d}.md").write_text(f"# Page {n}\n\n{body}\n", encoding="utf-8")


def change(corpus: Path, fraction: float, seed: int) -> int:
    """One new sentence in ``fraction`` of the records and of the files; how many changed."""
    rng = random.Random(seed)
    dump = corpus / "tickets.jsonl"
    lines = dump.read_text(encoding="utf-8").splitlines()
    chosen = set(rng.sample(range(len(lines)), max(1, round(len(lines) * fraction))))
    for index in chosen:
        record = json.loads(lines[index])
        record["text"] += f" The nightly edit {index} adds this sentence."
        lines[index] = json.dumps(record)
    dump.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pages = sorted((corpus / "pages").glob("*.md"))
    picked = rng.sample(pages, max(1, round(len(pages) * fraction))) if pages else []
    for path in picked:
        path.write_text(path.read_text(encoding="utf-8") + "\nA nightly edit adds this line.\n",
                        encoding="utf-8")
    return len(chosen) + len(picked)


def measure(corpus: Path, output: Path, label: str) -> dict:
    config = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null"])
    before = iceberg_files(output)
    started = time.perf_counter()
    result = run(config)
    wall = time.perf_counter() - started
    after = iceberg_files(output)
    # What the run's Iceberg commit wrote: new metadata, manifests, delete files, and the
    # catalog's growth (SQLite rewrites pages in place).
    iceberg_written = sum(size for path, size in after.items()
                          if path not in before or (path.endswith(".db") and size != before[path]))
    manifest = load_manifest(result.run_dir)
    memo = dict(manifest.memo or {})
    row = {"run": label, "pipeline_s": float(manifest.wall_seconds or 0), "wall_s": wall,
           "documents": manifest.counts.get("documents"),
           "carried": manifest.counts.get("documents_carried"),
           # Read as the previous run's state row holds them (chunkline/state.py).
           "settled": manifest.counts.get("documents_settled"),
           "recalled": sum(kind["recalled"] for kind in memo.values()),
           "computed": sum(kind["computed"] for kind in memo.values()),
           "memo": memo, "memo_mb": sum(p.stat().st_size for p in
                                        (Path(result.run_dir) / "memo").glob("*.parquet")) / 1e6,
           "iceberg_mb": iceberg_written / 1e6, "iceberg_files": len(set(after) - set(before)),
           "index_mb": sum(after.values()) / 1e6 + index_bytes(result.run_dir) / 1e6}
    print(f"{label}: pipeline {row['pipeline_s']:.1f} s, Iceberg {row['iceberg_mb']:.3f} MB in "
          f"{row['iceberg_files']} files, memo recalled {row['recalled']:,} "
          f"computed {row['computed']:,} ({row['memo_mb']:.1f} MB) "
          + json.dumps({k: [v["recalled"], v["computed"]] for k, v in memo.items()}), flush=True)
    return row


def iceberg_files(output: Path) -> dict[str, int]:
    """Each file under ``OUTPUT/_iceberg`` (chunkline.index.iceberg) with its size."""
    return {str(p): p.stat().st_size for p in (output / "_iceberg").rglob("*") if p.is_file()}


def index_bytes(run_dir: str) -> int:
    """The bytes of the files the run's manifest lists (its index, wherever they lie)."""
    from chunkline.index.tables import listed_paths

    output = Path(run_dir).parent
    return sum((output / path).stat().st_size for path in listed_paths(run_dir, load_manifest(run_dir)))


def median_row(rows: list[dict]) -> dict:
    """The row of median pipeline time, with every repetition's time beside it."""
    chosen = dict(sorted(rows, key=lambda row: row["pipeline_s"])[(len(rows) - 1) // 2])
    chosen["each"] = [row["pipeline_s"] for row in rows]
    return chosen


def bench(docs: int, files: int, work: Path, repeat: int) -> list[dict]:
    floor = work / "floor"
    floor.mkdir()
    (floor / "one.md").write_text("# One\n\nA single page: the fixed cost of a run.\n", encoding="utf-8")
    # The first run in a process pays its imports and the runner's start: not the floor's.
    measure(floor, work / "warm_out", "warm-up")
    fulls, reruns = [], []
    for attempt in range(repeat):
        shutil.rmtree(work / "floor_out", ignore_errors=True)
        fulls.append(measure(floor, work / "floor_out", "floor full"))
        reruns.append(measure(floor, work / "floor_out", "floor rerun"))
    rows = [median_row(fulls), median_row(reruns)]
    corpus = work / "corpus"
    started = time.perf_counter()
    generate(corpus, docs, files)
    print(f"corpus: {docs:,} records and {files:,} files in {time.perf_counter() - started:.0f} s",
          flush=True)
    rows.append(median_row([measure(corpus, work / "out", "full")]))
    rows.append(median_row([measure(corpus, work / "out", "no change") for _ in range(repeat)]))
    # Each repetition a fresh 1 % (cumulative on the corpus, as bench/reindex_bench.py does).
    changed = []
    for attempt in range(repeat):
        changed.append(change(corpus, 0.01, seed=11 + attempt))
        changed[-1] = measure(corpus, work / "out", f"1 % ({changed[-1]:,} changed)")
    rows.append(median_row(changed))
    return rows


def report(docs: int, files: int, repeat: int, rows: list[dict]) -> str:
    by = {row["run"].split(" (")[0]: row for row in rows}
    above = by["full"]["pipeline_s"] - by["floor full"]["pipeline_s"]

    def ratio(name: str) -> float:
        return (by[name]["pipeline_s"] - by["floor rerun"]["pipeline_s"]) / above

    lines = [f"`python bench/memo_scale_bench.py --docs {docs} --files {files} --repeat {repeat}`",
             "", "| run | pipeline s (median) | each | documents | settled | carried | memo recalled | "
             "memo computed | memo MB | Iceberg MB written | Iceberg files written | index MB |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['run']} | {row['pipeline_s']:.2f} | "
                     + " ".join(f"{each:.1f}" for each in row["each"])
                     + f" | {row['documents'] or 0:,} | {row.get('settled') or 0:,} | {row['carried'] or 0:,} | "
                     f"{row['recalled']:,} | {row['computed']:,} | {row['memo_mb']:.1f} | "
                     f"{row['iceberg_mb']:.3f} | {row['iceberg_files']:,} | {row['index_mb']:.1f} |")
    lines += ["", "(rerun - floor rerun) / (full - floor full): "
              f"no change {ratio('no change'):.3f}, 1 % {ratio('1 %'):.3f} "
              f"(target for 1 %: <= {TARGET}: {'met' if ratio('1 %') <= TARGET else 'not met'})"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1_000_000, help="records in the JSONL dump")
    parser.add_argument("--files", type=int, default=None,
                        help="Markdown files beside it (default: docs / 1000, at least 10)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of the floor and of each rerun (the median is reported)")
    parser.add_argument("--out", type=Path, help="append the table to this Markdown file")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--settle", choices=("on", "off"), default=None,
                        help="pass unchanged documents by on their state rows (pipeline/build.py "
                             "KEEP_STATE; default: as the build is)")
    args = parser.parse_args()
    if args.settle is not None:
        from chunkline.pipeline import build

        build.KEEP_STATE = args.settle == "on"
    files = args.files if args.files is not None else max(10, args.docs // 1000)
    work = Path(tempfile.mkdtemp(prefix="memo_scale_"))
    try:
        text = report(args.docs, files, args.repeat, bench(args.docs, files, work, args.repeat))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as handle:
            handle.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
