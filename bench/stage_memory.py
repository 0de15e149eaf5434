"""Resident memory per FnApiRunner stage of one `chunkline run`, in this process.

    python bench/stage_memory.py run --config configs/local.yaml \
        --set input.pattern='CORPUS/**' --set output.path=OUT --set embed=null --allow-shrink

Everything after the script's name is `chunkline`'s own command line. The run happens in
this process on the in-process FnApiRunner; a thread samples the resident set every 50 ms, and
each stage (a fused group of transforms, named by its first ones) is reported with the RSS
before it, the highest RSS while it ran, the RSS after it, and its seconds. That tells which
stage holds what grows with the input (bench/RESULTS.md, "Local scale").
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from apache_beam.runners.portability.fn_api_runner import fn_runner

ROOT = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
SAMPLE_SECONDS = 0.05


def rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * PAGE / 1e6


class StageMemory:
    """Wraps ``FnApiRunner._execute_bundle``: one row per bundle run."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, float, float]] = []
        self._peak = 0.0
        threading.Thread(target=self._sample, daemon=True).start()
        execute = fn_runner.FnApiRunner._execute_bundle
        probe = self

        def measured(runner, context, bundle_context_manager, bundle_input):
            before = rss_mb()
            probe._peak = before
            started = time.perf_counter()
            result = execute(runner, context, bundle_context_manager, bundle_input)
            probe.rows.append((bundle_context_manager.stage.name, before, probe._peak, rss_mb(),
                               time.perf_counter() - started))
            return result

        fn_runner.FnApiRunner._execute_bundle = measured

    def _sample(self) -> None:
        while True:
            self._peak = max(self._peak, rss_mb())
            time.sleep(SAMPLE_SECONDS)

    def table(self, min_seconds: float = 0.05) -> str:
        lines = ["| stage (first transforms) | RSS before MB | peak during | after | seconds |",
                 "|---|---:|---:|---:|---:|"]
        for name, before, peak, after, seconds in self.rows:
            if seconds >= min_seconds or peak - before > 10:
                short = name.replace("ref_AppliedPTransform_", "").strip("()")[:80]
                lines.append(f"| `{short}` | {before:.0f} | {peak:.0f} | {after:.0f} | {seconds:.1f} |")
        return "\n".join(lines)


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    probe = StageMemory()
    from chunkline.pipeline.cli import main as chunkline

    try:
        status = chunkline(argv)
    finally:
        print(probe.table())
    return status or 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
