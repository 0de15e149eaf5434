"""What the live display costs: CPU time of `chunkline run` with the display on a terminal
against `--quiet`, on the same corpus, interleaved, each a fresh process into a fresh output.

    python bench/progress_bench.py --mb 5 --runs 3 --out bench/results_progress.md

The display run gets a pseudo-terminal as stdin, stdout and stderr (so it draws the live view,
refreshed 4 times a second, and the stages tally for it); the quiet run the same terminal and
`--quiet` (no tallies written, nothing drawn). CPU is the child's user + system time (wait4);
the target is the display's CPU within 2 % of the quiet run's, as the median of the
back-to-back pairs' ratios (the ratio of the medians is printed too).
"""

from __future__ import annotations

import argparse
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_bench import generate  # noqa: E402


def run_under_terminal(corpus: Path, output: Path, quiet: bool) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run whose terminal is a pty read here."""
    command = [sys.executable, "-c", "import sys; from chunkline.pipeline.cli import main; sys.exit(main())",
               "run", "--config", "configs/local.yaml", "--input", f"{corpus}/**",
               "--output", str(output), "--set", "embed=null", *(["--quiet"] if quiet else [])]
    master, slave = pty.openpty()
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdin=slave, stdout=slave, stderr=slave,
                               env=dict(os.environ, PYTHONPATH=str(ROOT)))
    os.close(slave)
    while True:
        try:
            if not os.read(master, 65536):
                break
        except OSError:
            break
    os.close(master)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run failed: {' '.join(command)}")
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chunkline-progress-bench-") as work:
        corpus = Path(work) / "corpus"
        documents, size = generate(corpus, args.mb)
        cpu: dict[str, list[float]] = {"display": [], "quiet": []}
        wall: dict[str, list[float]] = {"display": [], "quiet": []}
        for index in range(args.runs):
            for label in ("display", "quiet") if index % 2 == 0 else ("quiet", "display"):
                seconds, elapsed = run_under_terminal(corpus, Path(work) / f"out-{label}-{index}",
                                                      quiet=label == "quiet")
                cpu[label].append(seconds)
                wall[label].append(elapsed)
                print(f"{label} run {index}: {seconds:.2f} CPU s, {elapsed:.2f} wall s", flush=True)
    display, quiet = statistics.median(cpu["display"]), statistics.median(cpu["quiet"])
    # Each pair ran back to back, so a pair's ratio cancels the machine's slower minutes (run to
    # run noise here is several times the display's cost).
    paired = statistics.median(d / q for d, q in zip(cpu["display"], cpu["quiet"]))
    report = "\n".join([
        f"### Live display cost: {documents:,} documents, {size / 1e6:.1f} MB, embed=null, "
        f"{args.runs} runs each, interleaved",
        "",
        f"`python bench/progress_bench.py --mb {args.mb:g} --runs {args.runs}`",
        "",
        "| run | median CPU s | CPU s per run | median wall s |",
        "|---|---:|---|---:|",
        *(f"| {label} | {statistics.median(cpu[label]):.2f} | "
          f"{', '.join(f'{s:.2f}' for s in cpu[label])} | {statistics.median(wall[label]):.2f} |"
          for label in ("display", "quiet")),
        "",
        f"display / quiet: median of the pairs' CPU ratios **{paired:.3f}**, ratio of the "
        f"medians {display / quiet:.3f} (target <= 1.02)",
        "",
    ])
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
