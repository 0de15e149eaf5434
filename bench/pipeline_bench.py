"""Pipeline wall time against a bare embedding loop over the same chunk texts.

The pipeline reads, dedupes, splits, embeds and writes Parquet; the bare loop only loads the
same model and embeds the texts the pipeline embedded, in batches of the same size, with the
same dtype. Their ratio is what the pipeline costs on top of the model. Both include loading
the model. Run on a generated Markdown corpus of a few MB, one process, float32 and bfloat16.

    python bench/pipeline_bench.py [--mb 3] [--batch-size 64] [--out bench/results_pipeline.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chunkline import get_tokenizer  # noqa: E402
from chunkline.embedder import EmbedOptions, embed_texts, load_model, resolve_model_dir  # noqa: E402
from chunkline.splitter import heading_prefix  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.run import run  # noqa: E402

WORDS = (
    "the robot arm joint torque sensor calibration controller firmware update network "
    "gateway fleet battery charging dock route planner warehouse shelf picker gripper "
    "safety stop emergency operator manual procedure check verify restart log error "
    "timeout retry queue message broker database replica failover backup restore "
    "certificate rotation deployment release version rollback monitor alert page "
    "latency throughput capacity schedule maintenance inspection wear replace part"
).split()


def generate_corpus(directory: Path, megabytes: float, seed: int = 7) -> int:
    """Markdown documents with headings, paragraphs and lists; deterministic for a seed."""
    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    written = 0
    index = 0
    while written < target:
        lines = [f"# Document {index}: {' '.join(rng.choices(WORDS, k=4))}", ""]
        for section in range(rng.randint(2, 6)):
            lines += [f"## Section {section} {' '.join(rng.choices(WORDS, k=3))}", ""]
            for _ in range(rng.randint(1, 5)):
                sentences = [
                    " ".join(rng.choices(WORDS, k=rng.randint(6, 22))).capitalize() + "."
                    for _ in range(rng.randint(2, 9))
                ]
                lines += [" ".join(sentences), ""]
            if rng.random() < 0.4:
                lines += [f"- {' '.join(rng.choices(WORDS, k=5))}" for _ in range(4)] + [""]
        text = "\n".join(lines)
        (directory / f"doc-{index:05d}.md").write_text(text, encoding="utf-8")
        written += len(text.encode("utf-8"))
        index += 1
    return index


def embedded_texts(run_dir: str, tokenizer_spec: str, reserve: int) -> list[str]:
    """The exact texts the pipeline embedded: heading prefix + chunk text, in stored order."""
    tokenizer = get_tokenizer(tokenizer_spec)
    texts = []
    for path in sorted(Path(run_dir).glob("chunks-*.parquet")):
        for row in pq.read_table(path, columns=["headings", "text"]).to_pylist():
            texts.append(heading_prefix(tuple(row["headings"]), tokenizer, reserve) + row["text"])
    return texts


def bare_loop(texts: list[str], options: EmbedOptions) -> float:
    started = time.perf_counter()
    model = load_model(options)
    for first in range(0, len(texts), options.batch_size):
        embed_texts(model, texts[first : first + options.batch_size], options)
    return time.perf_counter() - started


def bench(corpus: Path, dtype: str, batch_size: int, out_dir: Path) -> dict:
    config = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={out_dir}",
        f"embed.dtype={dtype}", f"embed.batch_size={batch_size}",
    ])
    started = time.perf_counter()
    summary = run(config)
    pipeline_seconds = time.perf_counter() - started
    options = EmbedOptions(dtype=dtype, batch_size=batch_size)
    texts = embedded_texts(summary.run_dir, f"hf:{resolve_model_dir(options.model)}",
                           config.split.heading_reserve)
    loop_seconds = bare_loop(texts, options)
    return {
        "dtype": dtype, "batch": batch_size, "chunks": summary.counts["chunks"],
        "tokens": summary.counts["tokens"], "pipeline": pipeline_seconds, "loop": loop_seconds,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        documents = generate_corpus(corpus, args.mb)
        results = [bench(corpus, dtype, args.batch_size, Path(tmp) / f"out-{dtype}")
                   for dtype in args.dtypes.split(",")]
    lines = [
        f"- corpus: {documents} generated Markdown documents, {args.mb} MB",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "- pipeline: `chunkline run` with configs/local.yaml (FnApiRunner, in process), wall time "
        "incl. model load, read, dedupe, split, embed, Parquet write, manifest",
        "- bare loop: load the same model, embed the same texts (heading prefix + chunk) in "
        "consecutive batches of the same size, same dtype",
        "",
        "| dtype | batch | chunks | tokens | pipeline s | bare loop s | pipeline / loop |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['dtype']} | {r['batch']} | {r['chunks']:,} | {r['tokens']:,} | "
            f"{r['pipeline']:.1f} | {r['loop']:.1f} | {r['pipeline'] / r['loop']:.2f} |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
