"""Pipeline wall time against a bare embedding loop over the same chunk texts.

The pipeline reads, dedupes, splits, embeds and writes Parquet; the bare loop only loads the
same model and embeds the texts the pipeline embedded, in batches of the same size, with the
same dtype. Their ratio is what the pipeline costs on top of the model. Both include loading
the model. Run on a generated Markdown corpus of a few MB, one process, float32 and bfloat16.

    python bench/pipeline_bench.py [--mb 3] [--batch-size 64] [--out bench/results_pipeline.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
from chunkline.splitting.text import heading_prefix  # noqa: E402
from chunkline.pipeline.config import load_config  # noqa: E402

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


def bare_loop(texts_file: Path, dtype: str, batch_size: int) -> None:
    """The baseline, run in a fresh process like the pipeline: import, load, embed in batches."""
    texts = json.loads(texts_file.read_text(encoding="utf-8"))
    options = EmbedOptions(dtype=dtype, batch_size=batch_size)
    model = load_model(options)
    for first in range(0, len(texts), options.batch_size):
        embed_texts(model, texts[first : first + options.batch_size], options)


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def bench(corpus: Path, dtype: str, batch_size: int, out_dir: Path) -> dict:
    """Both sides in fresh processes, so each pays its own imports and model load."""
    overrides = [f"input.pattern={corpus}/**", f"output.path={out_dir}",
                 f"embed.dtype={dtype}", f"embed.batch_size={batch_size}"]
    command = [sys.executable, "-m", "chunkline.pipeline.cli", "run", "--config", "configs/local.yaml"]
    for item in overrides:
        command += ["--set", item]
    pipeline_seconds = timed(command)
    config = load_config(ROOT / "configs" / "local.yaml", overrides)
    run_dir = str(out_dir / (out_dir / "LATEST").read_text().strip())
    texts = embedded_texts(run_dir, f"hf:{resolve_model_dir(config.embed.model)}",
                           config.split.heading_reserve)
    texts_file = out_dir / "texts.json"
    texts_file.write_text(json.dumps(texts), encoding="utf-8")
    loop_seconds = timed([sys.executable, __file__, "--bare-loop", str(texts_file),
                          "--dtype", dtype, "--batch-size", str(batch_size)])
    tokens = sum(pq.read_table(p, columns=["tokens"]).column("tokens").to_numpy().sum()
                 for p in Path(run_dir).glob("chunks-*.parquet"))
    return {"dtype": dtype, "batch": batch_size, "chunks": len(texts), "tokens": int(tokens),
            "pipeline": pipeline_seconds, "loop": loop_seconds}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--out")
    parser.add_argument("--bare-loop", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_loop:
        bare_loop(args.bare_loop, args.dtype, args.batch_size)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        documents = generate_corpus(corpus, args.mb)
        results = [bench(corpus, dtype, args.batch_size, Path(tmp) / f"out-{dtype}")
                   for dtype in args.dtypes.split(",")]
    lines = [
        f"- corpus: {documents} generated Markdown documents, {args.mb} MB",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "- pipeline: `chunkline run` with configs/local.yaml (FnApiRunner, in process), a fresh "
        "process, wall time incl. imports, model load, read, dedupe, split, embed, Parquet write, "
        "manifest",
        "- bare loop: a fresh process that imports, loads the same model and embeds the same texts "
        "(heading prefix + chunk) in consecutive batches of the same size, same dtype",
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
