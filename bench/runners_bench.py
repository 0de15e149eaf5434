"""One `chunkline run` per runner on the same corpus: wall time and peak memory of the process tree.

    python bench/runners_bench.py [--mb 1.5] [--out bench/results_runners.md]

Corpora: the demo (``examples/corpus``) and a generated Markdown corpus of ``--mb`` MB
(``bench/pipeline_bench.generate_corpus``). Runners: the in-process FnApiRunner
(``configs/local.yaml``), Prism with LOOPBACK workers and with an EXTERNAL worker pool
(``configs/prism.yaml``; the pool started fresh for each run, on this machine, sharing its disk),
and Beam's Python job service (``configs/portable.yaml``, LOOPBACK). Each run is a fresh
``python -m chunkline.pipeline.cli run`` into a new output (a first run: nothing reused), with
the configs' defaults otherwise (embedding on, the default model).

Wall time is the command's, imports and model load included. Peak memory is the largest sum of
resident set sizes over the process tree (the command, Prism's binary, the SDK workers, and
for EXTERNAL the pool and its workers), sampled every 0.2 s: pages two processes share are
counted twice, as each process's RSS counts them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_bench import generate_corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNNERS: dict[str, list[str]] = {
    "FnApiRunner (in-process)": ["--config", "configs/local.yaml"],
    "Prism LOOPBACK": ["--config", "configs/prism.yaml"],
    "Prism EXTERNAL pool": ["--config", "configs/prism.yaml"],  # + the pool's flags
    "PortableRunner LOOPBACK (Python job service)": ["--config", "configs/portable.yaml"],
}


class PeakTree:
    """The largest RSS sum, in MB, over the trees of ``roots``, sampled on a thread."""

    def __init__(self, *roots: psutil.Process) -> None:
        self.roots, self.peak, self._stop = roots, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            total = 0
            for root in self.roots:
                try:
                    processes = [root, *root.children(recursive=True)]
                except psutil.Error:
                    continue
                for process in processes:
                    try:
                        total += process.memory_info().rss
                    except psutil.Error:
                        pass
            self.peak = max(self.peak, total / 1e6)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_once(name: str, corpus: Path, output: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak MB) of one run of ``name`` on ``corpus``."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = [sys.executable, "-m", "chunkline.pipeline.cli", "run", *RUNNERS[name], "--input", f"{corpus}/**",
               "--output", str(output), "--quiet"]
    roots: list[psutil.Process] = []
    pool = None
    if "EXTERNAL" in name:
        port = free_port()
        pool_dir = output.with_name(output.name + "-pool")  # in the bench's scratch folder, removed with it
        pool_dir.mkdir(parents=True)
        pool = psutil.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                             f"--service_port={port}"], cwd=pool_dir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(3)  # the pool listening before the job asks it for workers
        roots.append(pool)
        command += ["--", "--environment_type=EXTERNAL", f"--environment_config=localhost:{port}"]
    started, cpu = time.monotonic(), _children_cpu()
    process = psutil.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = PeakTree(process, *roots)
    out, _ = process.communicate()
    wall = time.monotonic() - started
    top = peak.stop()
    if pool is not None:
        pool.terminate()
        pool.wait(30)
    if process.returncode != 0:
        raise SystemExit(f"{name} failed ({process.returncode}):\n{out.decode(errors='replace')[-3000:]}")
    return wall, _children_cpu() - cpu, top


def _children_cpu() -> float:
    """User + system seconds of the waited-for children and theirs (the command reaps Prism and
    its SDK workers; the pool is reaped here): what the run cost, less moved by a busy machine."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.5)
    parser.add_argument("--runners", default=",".join(RUNNERS), help="comma-separated names from the table")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="runners-bench-") as scratch:
        generated = Path(scratch, "corpus")
        generated.mkdir()
        documents = generate_corpus(generated, args.mb)
        corpora = {"demo (examples/corpus, 0.37 MB, 38 files)": ROOT / "examples" / "corpus",
                   f"generated ({args.mb} MB, {documents} files)": generated}
        lines = ["| corpus | runner | wall s | CPU s | peak MB (tree) |", "|---|---|---|---|---|"]
        for label, corpus in corpora.items():
            for n, name in enumerate(args.runners.split(",")):
                wall, cpu, peak = run_once(name, corpus, Path(scratch, f"out-{n}-{len(lines)}"))
                lines.append(f"| {label} | {name} | {wall:.1f} | {cpu:.1f} | {peak:,.0f} |")
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
