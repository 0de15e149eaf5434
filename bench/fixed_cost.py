"""Where a `chunkline run`'s wall time goes, phase by phase: imports, graph construction, Beam's
run (and the model load and stages inside it), accounting, report, Iceberg commit, LATEST,
exit.

    python bench/fixed_cost.py [--files 1] [--mb 0] [--rounds 3] [--set KEY=VALUE ...]

Each round is a fresh ``python bench/fixed_cost.py --child ...`` process, as a user's command
is: it wraps the functions each phase calls with a timer (nothing else changes), runs
``chunkline.pipeline.cli.main`` on the corpus with configs/local.yaml into a new output, and
writes the spans; the parent adds the process's start (interpreter and the CLI's imports,
from launch to ``main``) and its exit (from ``atexit`` to the process's end). The corpus:
``--files`` files of the demo (``examples/corpus``, a one-file corpus by default), or with
``--mb`` the package READMEs ``bench/pipeline_peers.py`` indexes.

Phases are wall-clock spans in the order the run meets them; imports made inside a phase are
that phase's. "Beam run" is ``Pipeline.run`` + ``wait_until_finish``; inside it, the model
load (``chunkline.embedder.load_model``) and the sum of the manifest's ``stage_seconds`` (what
Beam's execution-time metric gives the stages; the rest of the span is the runner's own
start, bundle scheduling and teardown).
"""

from __future__ import annotations

import argparse
import atexit
import importlib.abc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (phase, module, attribute): the attribute is looked up where the caller looks it up.
WRAPPED = (
    ("config + logging", "chunkline.pipeline.config", "load_config"),
    ("runner check", "chunkline.pipeline.runners", "runner_flags"),
    ("extras checked", "chunkline.pipeline.cli", "require"),
    ("preflight", "chunkline.pipeline.run", "preflight"),
    ("plan", "chunkline.pipeline.run", "plan"),
    ("graph construction", "chunkline.pipeline.run", "build"),
    ("accounting", "chunkline.pipeline.run", "run_tables"),
    ("accounting", "chunkline.pipeline.run", "account"),
    ("report", "chunkline.pipeline.run", "_write_report"),
    ("Iceberg commit", "chunkline.pipeline.run", "publish_tables"),
    ("LATEST", "chunkline.pipeline.run", "publish"),
    ("summary", "chunkline.pipeline.run", "suggested_question"),
    ("summary", "chunkline.pipeline.summary", "format_summary"),
)
INSIDE = (("model load", "chunkline.embedder", "load_model"),)


def _timed(spans: list, phase: str, function):
    def wrapper(*args, **kwargs):
        start = time.time()
        try:
            return function(*args, **kwargs)
        finally:
            spans.append((phase, start, time.time()))

    wrapper.__wrapped__ = function
    return wrapper


def child(argv: list[str], spans_path: str) -> int:
    started_main = None
    spans: list = []

    def write() -> None:
        spans.append(("exit starts", time.time(), time.time()))
        Path(spans_path).write_text(json.dumps({"main": started_main, "spans": spans}))

    atexit.register(write)
    from chunkline.pipeline import cli

    def wrap(module) -> None:
        for phase, name, attribute in WRAPPED + INSIDE:
            if name == module.__name__:
                setattr(module, attribute, _timed(spans, phase, getattr(module, attribute)))
        if module.__name__ == "chunkline.pipeline.run":
            _wrap_beam(spans)

    wanted = {name for _, name, _ in WRAPPED + INSIDE}
    for name in wanted & set(sys.modules):
        wrap(sys.modules[name])

    class Wrapping(importlib.abc.MetaPathFinder):
        """Wraps a wanted module's functions once the module has run, wherever it is imported."""

        def find_spec(self, name, path=None, target=None):
            if name not in wanted:
                return None
            for finder in sys.meta_path:
                if finder is self:
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    execute = spec.loader.exec_module

                    def exec_module(module, execute=execute):
                        execute(module)
                        wrap(module)

                    spec.loader.exec_module = exec_module
                    return spec
            return None

    sys.meta_path.insert(0, Wrapping())
    started_main = time.time()
    code = cli.main(argv)
    # As the console script ends (its exit_now, where this checkout has one).
    getattr(cli, "exit_now", sys.exit)(code)
    return code


def _wrap_beam(spans: list) -> None:
    import apache_beam as beam

    run = beam.Pipeline.run

    def timed_run(self, *args, **kwargs):
        start = time.time()
        result = run(self, *args, **kwargs)
        wait = result.wait_until_finish
        result.wait_until_finish = lambda *a, **k: _finish(wait, start, a, k)
        return result

    def _finish(wait, start, args, kwargs):
        try:
            return wait(*args, **kwargs)
        finally:
            spans.append(("Beam run", start, time.time()))

    beam.Pipeline.run = timed_run


def corpus(directory: Path, files: int, mb: float) -> str:
    if mb:
        sys.path.insert(0, str(ROOT / "bench"))
        from pipeline_peers import readme_corpus

        readme_corpus(directory, mb)
    else:
        demo = sorted(p for p in (ROOT / "examples" / "corpus").rglob("*.md"))[:files]
        directory.mkdir(parents=True, exist_ok=True)
        for path in demo:
            (directory / path.name).write_bytes(path.read_bytes())
    return f"{directory}/**"


def one_round(pattern: str, extra: list[str], scratch: Path) -> dict:
    output = scratch / f"out-{time.time_ns()}"
    spans_path = scratch / "spans.json"
    argv = ["run", "--config", "configs/local.yaml", "--input", pattern, "--output", str(output),
            "--quiet", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched = time.time()
    subprocess.run([sys.executable, __file__, "--child", str(spans_path), "--", *argv],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = json.loads(spans_path.read_text())
    latest = (output / "LATEST").read_text().strip()
    manifest = json.loads((output / latest / "manifest.json").read_text())
    phases: dict[str, float] = {"start: interpreter + CLI imports": found["main"] - launched}
    inside: dict[str, float] = {}
    covered = 0.0
    exit_at = ended
    for phase, start, end in found["spans"]:
        if phase == "exit starts":
            exit_at = start
            continue
        if phase in {p for p, _, _ in INSIDE}:
            inside[phase] = inside.get(phase, 0.0) + end - start
            continue
        phases[phase] = phases.get(phase, 0.0) + end - start
        covered += end - start
    phases["other (imports between phases, lease, ...)"] = exit_at - found["main"] - covered
    phases["exit: interpreter teardown"] = ended - exit_at
    inside["stages (manifest stage_seconds)"] = sum(manifest.get("stage_seconds", {}).values())
    return {"wall": ended - launched, "cpu": cpu, "phases": phases, "inside": inside}


def main() -> None:
    if "--child" in sys.argv:
        spans_path = sys.argv[sys.argv.index("--child") + 1]
        sys.exit(child(sys.argv[sys.argv.index("--") + 1 :], spans_path))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1)
    parser.add_argument("--mb", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    extra = [item for pair in args.set for item in ("--set", pair)]
    with tempfile.TemporaryDirectory(prefix="fixed-cost-") as scratch:
        pattern = corpus(Path(scratch) / "corpus", args.files, args.mb)
        rounds = [one_round(pattern, extra, Path(scratch)) for _ in range(args.rounds)]
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{args.rounds} rounds, median seconds (min-max)\n")
    print("| phase | median s | range |\n|---|---:|---:|")
    names = list(dict.fromkeys(name for r in rounds for name in r["phases"]))
    for name in names:
        values = [r["phases"].get(name, 0.0) for r in rounds]
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f}-{max(values):.2f} |")
    walls = [r["wall"] for r in rounds]
    print(f"| **wall** | **{statistics.median(walls):.2f}** | {min(walls):.2f}-{max(walls):.2f} |")
    cpus = [r["cpu"] for r in rounds]
    print(f"| CPU (user + system) | {statistics.median(cpus):.2f} | {min(cpus):.2f}-{max(cpus):.2f} |")
    for name in dict.fromkeys(n for r in rounds for n in r["inside"]):
        values = [r["inside"].get(name, 0.0) for r in rounds]
        print(f"| inside Beam run: {name} | {statistics.median(values):.2f} | "
              f"{min(values):.2f}-{max(values):.2f} |")


if __name__ == "__main__":
    main()
