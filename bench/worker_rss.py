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

Target: each worker's peak at the larger size within 1.2x + 100 MB of its peak at the smaller.
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs=2, default=[50, 200])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--corpus-dir", type=Path, default=None,
                        help="Keep the generated corpora here (reused when present).")
    args = parser.parse_args(argv)
    base = args.corpus_dir or Path(tempfile.mkdtemp(prefix="chunkline-rss-"))
    results = []
    for megabytes in args.mb:
        corpus = corpus_for(base, megabytes)
        with tempfile.TemporaryDirectory(prefix="chunkline-rss-out-") as output:
            result = run_sampled(corpus, Path(output), args.workers)
        results.append(result)
        print(f"{megabytes:g} MB: {result['wall_s']:.0f} s, {result['counts'].get('documents')} documents, "
              f"{result['counts'].get('chunks')} chunks; peak RSS MB by process: {result['peaks']}", flush=True)
    (small_mb, large_mb), (small, large) = args.mb, results
    small_worker, large_worker = max(small["peaks"].get("worker", [0])), max(large["peaks"].get("worker", [0]))
    bound = 1.2 * small_worker + 100
    print(f"largest worker peak: {small_worker:.0f} MB at {small_mb:g} MB, {large_worker:.0f} MB at "
          f"{large_mb:g} MB (bound 1.2 x {small_worker:.0f} + 100 = {bound:.0f}: "
          f"{'met' if large_worker <= bound else 'NOT met'}); runner: "
          f"{max(small['peaks'].get('runner', [0])):.0f} and {max(large['peaks'].get('runner', [0])):.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
