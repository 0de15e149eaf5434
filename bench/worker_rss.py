"""Peak memory of each SDK worker process at two corpus sizes (issue 49: a worker's memory does
not grow with the corpus).

One fresh `chunkline run` per size (configs/local.yaml, ``embed=null``) on Beam's in-process
runner with its SDK workers in processes of their own (``--direct_num_workers=2
--direct_running_mode=multi_processing``): the runner process (the driver, which also holds
what the runner shuffles) is reported apart from the worker processes, which do the stages'
work. Every process under the run is sampled every 0.25 s (psutil; the kernel's VmHWM, the
process's own peak resident set, so a peak between two samples is not missed while the process
lives). The corpus is `bench/scale_bench.py`'s (this venv's sources, ~8 KB documents).

    python bench/worker_rss.py --mb 50 200 [--corpus-dir DIR] [--workers 2]
    python bench/worker_rss.py --mb 40 160 --rerun        # a 1 % night after each full run
    python bench/worker_rss.py --records 200000 1000000 --rerun   # bench/memo_scale_bench.py's dump

With ``--rerun``, each full run is followed by a 1 % change (a paragraph appended to 1 % of the
files; for ``--records``, ``memo_scale_bench.change``: a sentence in 1 % of the records) and a
rerun into the same output, and the rerun's peaks are the ones compared (issue 63: a rerun's
worker memory does not grow with the corpus).

Target: each worker's peak at the larger size within 1.2x + 100 MB of its peak at the smaller.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_bench import corpus_for  # noqa: E402
from bench.memo_scale_bench import change as change_records, generate as generate_records  # noqa: E402

SDK_WORKER = "sdk_worker_main"


def _peak_mb(process: psutil.Process) -> float | None:
    """VmHWM in MB (the process's peak RSS so far), None once it is gone."""
    try:
        with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def run_sampled(corpus: Path, output: Path, workers: int) -> dict:
    command = [sys.executable, "-m", "chunkline.pipeline.cli", "run", "--config", "configs/local.yaml",
               "--input", f"{corpus}/**", "--output", str(output), "--set", "embed=null", "--quiet",
               "--", f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
    started = time.perf_counter()
    runner = psutil.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peaks: dict[int, tuple[str, float]] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                family = [runner, *runner.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for process in family:
                peak = _peak_mb(process)
                if peak is None:
                    continue
                try:
                    # The SDK worker is the Python process, not the shell Beam may start it from.
                    python = process.name().startswith("python")
                    role = "worker" if python and any(SDK_WORKER in p for p in process.cmdline()) else (
                        "runner" if process.pid == runner.pid else "other")
                except psutil.Error:
                    continue
                previous = peaks.get(process.pid, (role, 0.0))[1]
                peaks[process.pid] = (role, max(previous, peak))
            time.sleep(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    log = runner.communicate()[0].decode("utf-8", "replace")
    done.set()
    sampler.join()
    wall = time.perf_counter() - started
    if runner.returncode != 0:
        raise SystemExit(f"run failed ({runner.returncode}):\n{log[-4000:]}")
    run_id = (output / "LATEST").read_text().strip()
    counts = json.loads((output / run_id / "manifest.json").read_text())["counts"]
    by_role: dict[str, list[float]] = {}
    for role, peak in peaks.values():
        by_role.setdefault(role, []).append(round(peak))
    return {"wall_s": wall, "counts": counts, "peaks": {k: sorted(v) for k, v in by_role.items()}}


def change_files(corpus: Path, fraction: float = 0.01, seed: int = 5) -> int:
    """A paragraph appended to ``fraction`` of the corpus's files; how many."""
    files = sorted(path for path in corpus.rglob("*") if path.is_file())
    rng = random.Random(seed)
    chosen = rng.sample(files, max(1, round(len(files) * fraction)))
    for n, path in enumerate(chosen):
        with path.open("a", encoding="utf-8") as handle:
            handle.write(f"\n\nA paragraph appended for the nightly rerun, number {n}.\n")
    return len(chosen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--mb", type=float, nargs=2, default=[50, 200])
    sizes.add_argument("--records", type=int, nargs=2, default=None,
                       help="Two dumps of this many records (memo_scale_bench's) instead of Markdown corpora.")
    parser.add_argument("--rerun", action="store_true", help="Compare the peaks of a 1 %% rerun.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--corpus-dir", type=Path, default=None,
                        help="Keep the generated corpora here (reused when present; --rerun changes them).")
    args = parser.parse_args(argv)
    base = args.corpus_dir or Path(tempfile.mkdtemp(prefix="chunkline-rss-"))
    labels = [f"{n:,} records" for n in args.records] if args.records else [f"{mb:g} MB" for mb in args.mb]
    results = []
    for index, label in enumerate(labels):
        if args.records:
            corpus = base / f"records_{args.records[index]}"
            if not corpus.exists():
                generate_records(corpus, args.records[index], 0)
        else:
            corpus = corpus_for(base, args.mb[index])
        with tempfile.TemporaryDirectory(prefix="chunkline-rss-out-") as output:
            result = run_sampled(corpus, Path(output), args.workers)
            print(f"{label}: full run {result['wall_s']:.0f} s, {result['counts'].get('documents')} documents, "
                  f"{result['counts'].get('chunks')} chunks; peak RSS MB by process: {result['peaks']}", flush=True)
            if args.rerun:
                changed = (change_records(corpus, 0.01, seed=11) if args.records else change_files(corpus))
                result = run_sampled(corpus, Path(output), args.workers)
                print(f"{label}: 1 % rerun ({changed} changed) {result['wall_s']:.0f} s, settled "
                      f"{result['counts'].get('documents_carried')}; peak RSS MB by process: {result['peaks']}",
                      flush=True)
        results.append(result)
    (small_label, large_label), (small, large) = labels, results
    small_worker, large_worker = max(small["peaks"].get("worker", [0])), max(large["peaks"].get("worker", [0]))
    bound = 1.2 * small_worker + 100
    print(f"largest worker peak{' of the reruns' if args.rerun else ''}: {small_worker:.0f} MB at {small_label}, "
          f"{large_worker:.0f} MB at {large_label} (bound 1.2 x {small_worker:.0f} + 100 = {bound:.0f}: "
          f"{'met' if large_worker <= bound else 'NOT met'}); runner: "
          f"{max(small['peaks'].get('runner', [0])):.0f} and {max(large['peaks'].get('runner', [0])):.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
