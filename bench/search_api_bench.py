"""A search service's latency: ``chunkline.pipeline.search.Index`` opened once over 100,000 chunks.

The setup is bench/query_bench.py's: the demo index (``configs/local.yaml`` on examples/corpus)
with its chunk rows copied under new ids to ``--chunks`` rows. Then, in one process:

- opening the Index (every shard read once, the inverted index built), and loading the model,
  each timed once;
- ranking given the question's vector (``Index.search_vector``): hybrid, dense, sparse, and
  hybrid with a ``where`` filter, p50 and p95 over ``--questions`` questions;
- end to end (``Index.search``: the question embedded, then ranked): hybrid, and hybrid with the
  filter, p50 and p95;
- end to end again in a child process started with ``OMP_WAIT_POLICY=PASSIVE``: PyTorch's
  OpenMP threads otherwise spin after each forward pass, and on a machine with few cores they
  hold the cores OpenBLAS's threads want for the dense product that follows;
- the per-question path for comparison (``chunkline.pipeline.query.search_result``, what one
  ``chunkline query`` does: the index opened and the model loaded for the question), over
  ``--per-question`` questions.

Questions are the opening words of chunks picked at random (seeded), so most share terms with
many chunks. Each is asked once per row of the table, after two unmeasured warm-up questions.

    python bench/search_api_bench.py [--chunks 100000] [--questions 300] [--per-question 8]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from chunkline.metadata import matches, parse_condition  # noqa: E402
from chunkline.index.manifest import load_manifest  # noqa: E402
from chunkline.index.tables import read_table  # noqa: E402
from chunkline.pipeline.config import load_config  # noqa: E402
from chunkline.pipeline.query import search_result  # noqa: E402
from chunkline.pipeline.run import run  # noqa: E402
from chunkline.pipeline.search import Index  # noqa: E402
from query_bench import QUESTION, grow  # noqa: E402

WHERE = "status=closed"


def questions_from(run_dir: Path, count: int, seed: int = 7) -> list[str]:
    texts = read_table(str(run_dir), load_manifest(str(run_dir)), "chunks", ["text"]).column("text").to_pylist()
    rng = random.Random(seed)
    picked = [" ".join(rng.choice(texts).split()[:rng.randint(4, 12)]) for _ in range(count - 1)]
    return [QUESTION] + [q for q in picked if q.strip()]


def percentiles(seconds: list[float]) -> tuple[float, float]:
    return float(np.percentile(seconds, 50)) * 1e3, float(np.percentile(seconds, 95)) * 1e3


def each(call, items) -> list[float]:
    took = []
    for item in items:
        started = time.perf_counter()
        call(item)
        took.append(time.perf_counter() - started)
    return took


def end_to_end(index: Index, questions: list[str]) -> list[tuple[str, tuple[float, float]]]:
    """p50/p95 of ``Index.search`` (embed + rank), without and with the filter."""
    rows = []
    for label, filters in (("end to end (embed + rank): hybrid", []),
                           (f"end to end (embed + rank): hybrid, --where {WHERE}", [parse_condition(WHERE)])):
        took = each(lambda q: index.search(q, 5, where=filters), questions)
        rows.append((label, percentiles(took)))
    return rows


def child(output: str, asked: str) -> int:
    """In this fresh (child) process: the seconds to open the index at ``output`` and to load
    the model (importing PyTorch with it), then the end-to-end rows; as JSON."""
    questions = json.loads(Path(asked).read_text())
    started = time.perf_counter()
    index = Index.open(output)
    opened = time.perf_counter() - started
    loaded = index.load_model()
    for question in questions[:2]:
        index.search(question)
    print(json.dumps({"open": opened, "model": loaded, "rows": end_to_end(index, questions)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--per-question", type=int, default=8)
    parser.add_argument("--child", nargs=2, metavar=("OUTPUT", "QUESTIONS_JSON"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child)
    where = [parse_condition(WHERE)]
    with tempfile.TemporaryDirectory(prefix="chunkline-search-") as scratch:
        output = Path(scratch) / "index"
        config = load_config(ROOT / "configs" / "local.yaml",
                             [f"input.pattern={ROOT}/examples/corpus/**", f"output.path={output}"])
        run_dir = Path(run(config).run_dir)
        chunks = grow(run_dir, args.chunks)
        questions = questions_from(run_dir, args.questions)

        started = time.perf_counter()
        index = Index.open(str(output))
        t_open = time.perf_counter() - started
        t_model = index.load_model()
        for question in questions[:2]:  # warm-up: first calls of the model and of numpy's kernels
            index.search(question, where=where, expand=300)
        t_embed = each(index.embed, questions)
        vectors = {q: index.embed(q) for q in questions}
        rows = [("embed the question (model warm)", percentiles(t_embed))]
        for label, mode, filters in (("rank given the vector: hybrid", "hybrid", []),
                                     ("rank given the vector: dense", "dense", []),
                                     ("rank given the vector: sparse (BM25)", "sparse", []),
                                     (f"rank given the vector: hybrid, --where {WHERE}", "hybrid", where)):
            took = each(lambda q: index.search_vector(q, vectors[q], 5, mode=mode, where=filters), questions)
            rows.append((label, percentiles(took)))
        rows += end_to_end(index, questions)
        asked = Path(scratch) / "questions.json"
        asked.write_text(json.dumps(questions))
        passive = subprocess.run([sys.executable, __file__, "--child", str(output), str(asked)],
                                 env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}, check=True,
                                 capture_output=True, text=True).stdout.splitlines()[-1]
        fresh = json.loads(passive)
        rows += [(label + ", OMP_WAIT_POLICY=PASSIVE", tuple(p)) for label, p in fresh["rows"]]
        t_old = each(lambda q: search_result(str(output), q, 5), questions[: args.per_question])
        metadata = read_table(str(run_dir), load_manifest(str(run_dir)), "chunks",
                              ["metadata"]).column("metadata").to_pylist()
        share = float(np.mean([matches(m, where) for m in metadata]))
        same = [h.chunk_id for h in index.search(QUESTION, 5).hits] == \
               [h.chunk_id for h in search_result(str(output), QUESTION, 5).hits]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{chunks:,} chunks, 384-d float32 vectors + BM25 sparse vectors; {len(questions)} questions, "
          f"each once; --where {WHERE} keeps {share:.1%} of the chunks\n")
    print("| once per process | seconds |\n|---|---:|")
    print(f"| Index.open (read the shards, build the inverted index) | {t_open:.2f} |")
    print(f"| Index.open, in a fresh process | {fresh['open']:.2f} |")
    print(f"| load the model (this process ran the pipeline: PyTorch imported) | {t_model:.2f} |")
    print(f"| load the model, in a fresh process (PyTorch imported for it) | {fresh['model']:.2f} |")
    print("\n| per question | p50 ms | p95 ms |\n|---|---:|---:|")
    for label, (p50, p95) in rows:
        print(f"| {label} | {p50:.1f} | {p95:.1f} |")
    p50, p95 = percentiles(t_old)
    print(f"| per-question path: `search_result` (opens the index, loads the model), "
          f"{len(t_old)} questions | {p50:.0f} | {p95:.0f} |")
    print(f"\npeak RSS of this process (the pipeline run included) {rss:,.0f} MiB; the Index and the "
          f"per-question path agree on the top 5: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
