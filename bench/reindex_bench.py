"""Reindex with 1% of documents changed against a full run: embedded tokens and wall time.

    python bench/reindex_bench.py --docs 400 --changed 0.01 --out bench/results_reindex.md

A synthetic corpus of manuals (headings, several sections each) is indexed in full; then 1% of
the documents get one new sentence in one section and the job runs again into the same output,
reusing the previous run's vectors by content key. Both runs are fresh processes' worth of work
(the model loads in each), so wall time includes fixed costs; the embedding work is what the
reuse saves and what the target (<= 5% of a full run's) is about.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.config import load_config  # noqa: E402
from pipeline.run import run  # noqa: E402

WORDS = ("robot arm calibration sensor firmware battery dock mission route map lidar torque "
         "encoder gripper payload controller network latency safety zone charger floor aisle "
         "shelf pallet scanner camera operator ticket alert restart update rollback").split()


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 18))).capitalize() + "."
                    for _ in range(sentences))


def write_corpus(root: Path, docs: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(docs):
        parts = [f"# Manual {i:05d}\n\n{paragraph(rng, 4)}"]
        for s in range(rng.randint(2, 5)):
            parts.append(f"## Section {s}\n\n{paragraph(rng, rng.randint(3, 10))}")
        (root / f"doc{i:05d}.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")


def timed_run(corpus: Path, output: Path, *overrides: str):
    config = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", *overrides])
    started = time.perf_counter()
    summary = run(config)
    return summary, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--changed", type=float, default=0.01, help="fraction of documents edited")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus, output = Path(tmp) / "corpus", Path(tmp) / "index"
        corpus.mkdir()
        write_corpus(corpus, args.docs, args.seed)
        # Near-dedupe off: synthetic manuals share a vocabulary, not text, but keep the
        # comparison about reuse alone.
        full, full_s = timed_run(corpus, output, "dedupe.near=null")
        rng = random.Random(args.seed + 1)
        edited = rng.sample(sorted(corpus.iterdir()), max(1, round(args.docs * args.changed)))
        for path in edited:
            text = path.read_text()
            path.write_text(text.replace("## Section 1\n\n", "## Section 1\n\nA sentence added tonight. ", 1))
        reindex, reindex_s = timed_run(corpus, output, "dedupe.near=null")
        rebuild, rebuild_s = timed_run(corpus, Path(tmp) / "rebuild", "dedupe.near=null")
    rows = [
        ("full run", full, full_s),
        (f"reindex, {len(edited)} of {args.docs} documents changed", reindex, reindex_s),
        ("full rebuild of the changed corpus", rebuild, rebuild_s),
    ]
    base_tokens = rebuild.counts["tokens_embedded"]
    lines = [
        f"Corpus: {args.docs} synthetic manuals, {full.counts['chunks']} chunks, "
        f"{full.counts['tokens']:,} chunk tokens; all-MiniLM-L6-v2 float32, FnApiRunner.",
        "",
        "| run | chunks embedded | chunks reused | tokens embedded | share of a full run's tokens | wall s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, summary, seconds in rows:
        c = summary.counts
        lines.append(f"| {name} | {c['embedded']:,} | {c['reused']:,} | {c['tokens_embedded']:,} | "
                     f"{c['tokens_embedded'] / base_tokens:.1%} | {seconds:.1f} |")
    lines.append("")
    lines.append(f"Reindex wall time = {reindex_s / rebuild_s:.2f}x a full rebuild's; "
                 f"embedding work = {reindex.counts['tokens_embedded'] / base_tokens:.2%} of it.")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
