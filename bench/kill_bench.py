"""SIGKILL a real `chunkline run` inside each stage and prove the index is never left broken.

    python bench/kill_bench.py                       # 5 stages x 10 landed kills, ~20-25 min on 2 cores
    python bench/kill_bench.py --trials 1 --keep     # a quick pass; the work dir is kept
    python bench/kill_bench.py --stages embed,publish --trials 3 --out bench/results_kill.md

What it proves: a run killed with SIGKILL at a random moment inside read, split, embed, write or
publish leaves ``OUTPUT/LATEST`` naming a complete, reconciled run, and the next run on the same
output (same host) takes the dead run's lease over at once, exits 0 and publishes.

How: a seeded corpus (Markdown manuals with headings, tables and code, a few HTML pages) is
indexed once (the baseline, publishing LATEST). One more run, not killed, is observed to measure
how long each stage lasts; the kill moments are drawn from those durations. Then, round robin
over the stages, each trial edits, adds or deletes a few documents (so the run embeds misses),
starts a real chunkline process through this script's child mode, kills it inside the target
stage, checks the output from the files alone, runs `chunkline run` again to completion and
checks again.

Child mode (``--child STAGE AT --report FILE -- <chunkline args>``) runs ``chunkline.pipeline.cli.main``
in this process. The job runs in-process (FnApiRunner), so every stage's code runs here:

- read, split, embed, write: a daemon thread polls ``sys._current_frames()`` every 2 ms for a
  frame of the stage's DoFn (``_DecodeFile.process`` / the match DoFns, ``_SplitDocument.process``,
  ``run_inference`` / ``embed_texts``, ``_WriteShard.process``). Once the stage has worked
  ``AT`` seconds (time between polls that both found it), it SIGKILLs the process at a poll that
  finds the stage's frame on a stack. ``AT`` is uniform over 85% of the observed run's work.
- publish (the manifest write through ``publish()`` returning, under a millisecond and so too
  short to poll): ``chunkline.pipeline.run._write_text`` and ``chunkline.pipeline.run.publish`` are wrapped in this
  process only; from the manifest write on, a profile hook counts Python and C calls and returns
  on the driver thread and SIGKILLs at the ``AT``-th. The trials cycle through the four states
  the files pass through (no manifest; manifest open; manifest complete, old LATEST; LATEST
  renamed), ``AT`` uniform within each.

Nothing in pipeline/ or transforms/ knows about this. A trial whose stage was never reached, or
whose run ended before the moment came, is reported as missed and another is run in its place
(at most ``2 x --trials`` attempts per stage); it is never counted as a kill. Exit status 1 when any
check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("read", "split", "embed", "write", "publish")
POLLED = STAGES[:-1]
POLL_S = 0.002

# (file suffix, co_qualname) of the frames that mean "this stage is working"; every function
# the stage calls runs beneath one of them, so walking the stack finds the stage wherever it is.
FRAMES = {
    "read": {("transforms/read.py", "_DecodeFile.process"),
             ("transforms/match.py", "_WalkLocal.process"),
             ("transforms/match.py", "_MatchWithBeam.process")},
    "split": {("transforms/split.py", "_SplitDocument.process")},
    "embed": {("transforms/embed.py", "SentenceTransformerHandler.run_inference"),
              ("chunkline/embedder.py", "embed_texts")},
    "write": {("transforms/write.py", "_WriteShard.process")},
}

# --------------------------------------------------------------------------------------------
# Child mode: a chunkline run that kills itself inside one stage.


def _stages_on_stacks(me: int) -> dict[str, str]:
    """stage -> "file:function" of a frame of it on any thread's stack (this thread excluded)."""
    found: dict[str, str] = {}
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        while frame is not None:
            code = frame.f_code
            for stage, targets in FRAMES.items():
                if stage not in found:
                    for suffix, qualname in targets:
                        if code.co_qualname == qualname and code.co_filename.endswith(suffix):
                            found[stage] = f"{suffix}:{qualname}"
            frame = frame.f_back
    return found


class _Child:
    def __init__(self, stage: str, at: float, report: Path) -> None:
        self.stage, self.at, self.report = stage, at, report
        self.started = time.perf_counter()
        # Per polled stage: first and last poll that saw it, stretches, and busy seconds (polls
        # that saw it twice running): a stage can come in stretches (each table is written in
        # its own step, and the runner may order them around the embed stage).
        self.seen = {s: {"first": None, "last": None, "stretches": 0, "busy": 0.0} for s in POLLED}
        self.publish_window: dict = {}
        self.done = threading.Event()

    def _write(self, record: dict) -> None:
        # The page cache outlives the process: a plain write is on disk for the parent to read.
        self.report.write_text(json.dumps(record, indent=1))

    def kill(self, where: str, into: float, **extra) -> None:
        self._write({"landed": True, "stage": self.stage, "where": where, "into_stage": into,
                     "seconds_since_start": time.perf_counter() - self.started, **extra})
        os.kill(os.getpid(), signal.SIGKILL)

    def watch(self) -> None:
        me = threading.get_ident()
        previous, before = set(), 0.0
        while not self.done.is_set():
            now = time.perf_counter() - self.started
            found = _stages_on_stacks(me)
            for stage, seen in self.seen.items():
                if stage not in found:
                    continue
                if stage in previous:
                    seen["busy"] += now - before
                else:
                    seen["stretches"] += 1
                seen["first"] = now if seen["first"] is None else seen["first"]
                seen["last"] = now
            target = self.seen.get(self.stage)
            if self.stage in found and target["busy"] >= self.at:
                self.kill(found[self.stage], target["busy"],
                          seconds_since_stage_began=now - target["first"])
            previous, before = set(found), now
            time.sleep(POLL_S)

    def wrap_publish(self) -> None:
        import chunkline.pipeline.run as run_module

        write_text, publish = run_module._write_text, run_module.publish
        child = self
        events = 0
        landmarks: list[tuple[int, str]] = []
        window_start = 0.0

        def hook(frame, event, arg):
            nonlocal events
            if child.stage == "publish" and events >= child.at:
                sys.setprofile(None)
                name = getattr(arg, "__name__", None) if event.startswith("c_") else frame.f_code.co_qualname
                child.kill(f"{event} {name} ({frame.f_code.co_filename.rsplit('/', 1)[-1]})",
                           events, seconds_since_stage_began=time.perf_counter() - window_start)
            if event in ("c_call", "c_return") and getattr(arg, "__name__", "") in ("open", "rename"):
                landmarks.append((events, f"{event} {arg.__name__}"))
            elif event == "return" and frame.f_code.co_qualname in ("_write_text", "publish") \
                    and frame.f_code.co_filename.endswith("pipeline/run.py"):
                landmarks.append((events, f"return {frame.f_code.co_qualname}"))
            events += 1

        def traced_write_text(path: str, text: str) -> None:
            nonlocal window_start
            if path.endswith("/manifest.json"):
                window_start = time.perf_counter()
                sys.setprofile(hook)
            write_text(path, text)

        def traced_publish(output: str, run_id: str) -> None:
            publish(output, run_id)
            sys.setprofile(None)
            child.publish_window = {"events": events, "landmarks": landmarks,
                                    "seconds": time.perf_counter() - window_start}

        run_module._write_text = traced_write_text
        run_module.publish = traced_publish

    def run(self, argv: list[str]) -> int:
        sys.path.insert(0, str(ROOT))
        self.wrap_publish()
        threading.Thread(target=self.watch, name="kill-bench-watch", daemon=True).start()
        from chunkline.pipeline.cli import main

        rc = main(argv)
        self.done.set()
        reached = self.publish_window if self.stage == "publish" else \
            self.seen.get(self.stage, {}).get("first") is not None
        self._write({"landed": False, "stage": self.stage, "rc": rc,
                     "why": "the run ended before the moment came" if reached
                     else "the stage was never reached",
                     "seen": self.seen, "publish_window": self.publish_window,
                     "seconds_since_start": time.perf_counter() - self.started})
        return rc


# --------------------------------------------------------------------------------------------
# The corpus.

WORDS = ("robot arm calibration sensor firmware battery dock mission route map lidar torque "
         "encoder gripper payload controller network latency safety zone charger floor aisle "
         "shelf pallet scanner camera operator ticket alert restart update rollback warehouse "
         "conveyor fleet telemetry heartbeat threshold offset bracket harness voltage").split()


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))).capitalize() + "."


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rng) for _ in range(sentences))


def _manual(rng: random.Random, i: int) -> str:
    parts = [f"# Manual {i:04d}: {rng.choice(WORDS)} {rng.choice(WORDS)}\n\n{_paragraph(rng, 3)}"]
    for s in range(rng.randint(3, 6)):
        parts.append(f"## Section {s}\n\n{_paragraph(rng, rng.randint(3, 9))}")
        if rng.random() < 0.3:
            rows = "\n".join(f"| {rng.choice(WORDS)} | {rng.randint(1, 99)} | {_sentence(rng)} |"
                             for _ in range(rng.randint(3, 8)))
            parts.append(f"### Limits\n\n| part | value | note |\n|---|---:|---|\n{rows}")
        if rng.random() < 0.2:
            parts.append(f"```python\ndef check_{s}(value):\n    return value < {rng.randint(1, 9)}\n```")
    return "\n\n".join(parts) + "\n"


def _page(rng: random.Random, i: int) -> str:
    sections = "".join(f"<h2>Topic {s}</h2><p>{_paragraph(rng, rng.randint(3, 7))}</p>"
                       for s in range(rng.randint(2, 4)))
    return (f"<html><head><title>Page {i}</title></head><body><nav>Home | Docs</nav><main>"
            f"<h1>Service page {i:04d}</h1><p>{_paragraph(rng, 2)}</p>{sections}</main>"
            f"<footer>Copyright the fleet team</footer></body></html>\n")


def write_corpus(root: Path, docs: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(docs):
        if i % 10 == 9:
            (root / f"page{i:04d}.html").write_text(_page(rng, i), encoding="utf-8")
        else:
            (root / f"manual{i:04d}.md").write_text(_manual(rng, i), encoding="utf-8")


def mutate(root: Path, rng: random.Random, trial: int, edits: tuple[int, int]) -> tuple[str, int]:
    """Edit a few documents (a new sentence in one section), sometimes add or delete one: the
    next run embeds the changed chunks and reuses the rest."""
    files = sorted(p for p in root.iterdir() if p.suffix == ".md")
    edited = rng.sample(files, min(len(files), rng.randint(*edits)))
    for path in edited:
        text = path.read_text(encoding="utf-8")
        sections = [m.end() for m in re.finditer(r"^## Section \d+\n\n", text, re.M)]
        cut = rng.choice(sections) if sections else len(text)
        text = f"{text[:cut]}Revision {trial}: {_sentence(rng)} {text[cut:]}"
        path.write_text(text, encoding="utf-8")
    what = [f"{len(edited)} edited"]
    if rng.random() < 0.3:
        (root / f"manual_added{trial:04d}.md").write_text(_manual(rng, 5000 + trial), encoding="utf-8")
        what.append("1 added")
    if rng.random() < 0.2 and len(files) > 40:
        rng.choice([p for p in files if p not in edited]).unlink()
        what.append("1 deleted")
    return ", ".join(what), len(edited)


# --------------------------------------------------------------------------------------------
# Checking an output from its files alone.


def check_run(run_dir: Path) -> list[str]:
    """Problems with a run directory as a reader would use it (empty: complete, reconciled)."""
    import numpy as np

    from chunkline.index.manifest import load_manifest
    from chunkline.index.tables import read_table

    try:
        manifest = load_manifest(str(run_dir))
    except (OSError, ValueError) as exc:  # ManifestError is a ValueError
        return [f"{run_dir.name}/manifest.json unreadable: {exc}"]
    problems = []
    if manifest.run_id != run_dir.name:
        problems.append(f"manifest run_id {manifest.run_id!r} is not its directory {run_dir.name}")
    if not manifest.reconciled:
        problems.append(f"not reconciled: {list(manifest.problems)}")
    if manifest.held_back:
        problems.append(f"held back: {list(manifest.held_back)}")
    counts = manifest.counts
    tables = {}
    for table in ("chunks", "documents", "rejected"):
        # Through the manifest (chunkline.index.tables): a rerun's rows may lie in earlier
        # runs' files, some of their rows deleted.
        try:
            read = read_table(str(run_dir), manifest, table)
        except Exception as exc:  # noqa: BLE001 - missing or torn: both are the finding
            problems.append(f"{table}: unreadable ({type(exc).__name__}: {exc})")
            continue
        tables[table] = [read] if read is not None else []
    if problems:
        return problems
    import pyarrow as pa

    chunks = pa.concat_tables(tables["chunks"]).to_pydict() if tables["chunks"] else {}
    documents = pa.concat_tables(tables["documents"]).to_pydict() if tables["documents"] else {}
    n_chunks = len(chunks.get("chunk_id", []))
    n_docs = len(documents.get("doc_id", []))
    if n_chunks != counts.get("chunks"):
        problems.append(f"{n_chunks} chunk rows, manifest counts {counts.get('chunks')}")
    if n_docs != counts.get("documents"):
        problems.append(f"{n_docs} document rows, manifest counts {counts.get('documents')}")
    if counts.get("kept", 0) + counts.get("duplicate", 0) + counts.get("rejected", 0) != counts.get("documents"):
        problems.append(f"kept + duplicate + rejected != documents: {counts}")
    rejected_rows = sum(t.num_rows for t in tables["rejected"])
    if rejected_rows != counts.get("rejected"):
        problems.append(f"{rejected_rows} rejected rows, manifest counts {counts.get('rejected')}")
    statuses = documents.get("status", [])
    for status in ("kept", "duplicate", "rejected"):
        if statuses.count(status) != counts.get(status):
            problems.append(f"{statuses.count(status)} {status} rows, manifest counts {counts.get(status)}")
    text_of = dict(zip(documents.get("doc_id", []), documents.get("text", [])))
    wrong = [cid for cid, doc, start, end, text in zip(chunks["chunk_id"], chunks["doc_id"],
                                                        chunks["start"], chunks["end"], chunks["text"])
             if doc not in text_of or text_of[doc][start:end] != text] if n_chunks else []
    if wrong:
        problems.append(f"{len(wrong)} chunks whose text is not documents.text[start:end], e.g. {wrong[0]}")
    if n_chunks and manifest.model is not None:
        vectors = np.asarray(chunks["embedding"], dtype=np.float32)
        dim = manifest.model.dim
        if vectors.shape != (n_chunks, dim) or not np.isfinite(vectors).all():
            problems.append(f"embeddings: shape {vectors.shape} (want {(n_chunks, dim)}) or not finite")
        elif manifest.model.normalize and not np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3):
            problems.append("embeddings not unit length")
    return problems


def check_output(output: Path) -> tuple[str | None, list[str]]:
    """(run id LATEST names, problems with it)."""
    latest = output / "LATEST"
    try:
        run_id = latest.read_text(encoding="utf-8").strip()
    except OSError as exc:
        return None, [f"LATEST unreadable: {exc}"]
    if not run_id or "/" in run_id or not (output / run_id).is_dir():
        return run_id, [f"LATEST names {run_id!r}, not a run directory"]
    return run_id, check_run(output / run_id)


def left_behind(output: Path, new_dirs: set[str], latest: str | None, new_staged: set[str]) -> str:
    """What a killed run left, in words: its directory's files and its manifest's state."""
    if not new_dirs:
        return "no run directory yet"
    words = []
    for name in sorted(new_dirs):
        shards = len(list((output / name).glob("*.parquet")))
        manifest = output / name / "manifest.json"
        if not manifest.exists():
            state = "no manifest"
        elif manifest.stat().st_size == 0:
            state = "empty manifest"
        else:
            try:
                json.loads(manifest.read_text(encoding="utf-8"))
                state = "complete manifest"
            except ValueError:
                state = "torn manifest"
        words.append(f"{shards} shard(s), {state}" + (", named by LATEST" if name == latest else ""))
    if new_staged:
        words.append("its staged .LATEST file")
    return "; ".join(words)


def staged(output: Path) -> set[str]:
    return {p.name for p in output.glob(".LATEST.*")}


def run_dirs(output: Path) -> set[str]:
    return {p.name for p in output.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}


# --------------------------------------------------------------------------------------------
# The parent.


@dataclass
class Trial:
    stage: str
    number: int
    change: str
    at: float
    landed: bool = False
    rc: int | None = None
    where: str = ""
    into: float | None = None  # busy seconds of the stage (publish: calls) before the kill
    into_s: float | None = None  # seconds since the stage was first seen
    left: str = ""  # what the killed run left in its directory
    kill_s: float = 0.0
    latest_ok: bool = False
    latest_after_kill: str = ""
    next_ok: bool = False
    next_s: float = 0.0
    took_over: bool = False
    problems: list[str] = field(default_factory=list)
    missed_why: str = ""


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.corpus, self.output, self.logs = work / "corpus", work / "index", work / "logs"
        for path in (self.corpus, self.logs):
            path.mkdir(parents=True)
        self.runs = 0
        self.observed_edits = 1

    def chunkline_args(self) -> list[str]:
        return ["run", "--config", str(ROOT / "configs" / "local.yaml"),
                "--input", f"{self.corpus}/**", "--output", str(self.output),
                "--set", f"output.chunk_shards={self.args.chunk_shards}",
                "--set", f"embed.batch_size={self.args.batch_size}"]

    def child(self, stage: str, at: float, timeout: float = 600) -> tuple[int, dict, str, float]:
        """Run one chunkline process through child mode: (return code, its report, stderr, s)."""
        self.runs += 1
        report = self.logs / f"run{self.runs:03d}-{stage}.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--child", stage, repr(at),
                   "--report", str(report), "--", *self.chunkline_args()]
        started = time.perf_counter()
        with open(self.logs / f"run{self.runs:03d}-{stage}.out", "w") as out, \
                open(self.logs / f"run{self.runs:03d}-{stage}.err", "w+") as err:
            # wait() reaps the child: an unreaped zombie would still answer kill(pid, 0) and
            # the next run would find its lease alive.
            rc = subprocess.run(command, cwd=ROOT, stdout=out, stderr=err, timeout=timeout).returncode
            err.seek(0)
            stderr = err.read()
        seconds = time.perf_counter() - started
        try:
            record = json.loads(report.read_text())
        except (OSError, ValueError):
            record = {}
        return rc, record, stderr, seconds

    def next_run(self) -> tuple[int, str, str, float]:
        """A plain `chunkline run`, the real entry point: (rc, stdout, stderr, seconds)."""
        self.runs += 1
        started = time.perf_counter()
        done = subprocess.run([str(Path(sys.executable).with_name("chunkline")), *self.chunkline_args()],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        seconds = time.perf_counter() - started
        (self.logs / f"run{self.runs:03d}-next.out").write_text(done.stdout)
        (self.logs / f"run{self.runs:03d}-next.err").write_text(done.stderr)
        return done.returncode, done.stdout, done.stderr, seconds

    def profile(self) -> dict:
        """Stage windows of one unkilled run with a typical change: where kill moments come from."""
        rc, record, stderr, seconds = self.child("observe", 0.0)
        if rc != 0:
            sys.exit(f"observed run failed (rc {rc}):\n{stderr[-3000:]}")
        windows = dict(record["seen"])
        for stage in POLLED:
            if windows[stage]["first"] is None:
                sys.exit(f"observed run never showed a {stage} frame; FRAMES needs updating")
        window = record["publish_window"]
        marks = {name: index for index, name in reversed(window["landmarks"])}  # first of each
        # A kill at event k stops the process before that event's call runs (after it, for a
        # return): these are the edges of what the files on disk can look like.
        edges = [0, marks["c_call open"], marks["return _write_text"], marks["c_call rename"],
                 window["events"]]
        window["strata"] = [
            ("before manifest.json exists", edges[0], edges[1]),
            ("manifest.json open, not yet closed", edges[1] + 1, edges[2] - 1),
            ("manifest.json complete, LATEST not yet renamed", edges[2], edges[3]),
            ("LATEST renamed, publish() not yet returned", edges[3] + 1, edges[4] - 1),
        ]
        windows["publish"] = window
        return {"seconds": seconds, "windows": windows}

    def moment(self, stage: str, windows: dict, rng: random.Random, number: int, edits: int) -> float:
        if stage == "publish":
            # Uniform over the window's calls would land after the rename about once in a hundred
            # trials (the manifest's and LATEST's writes are most of the calls): the trials cycle
            # through the four states the files can be in, a uniform call within each.
            _, low, high = windows["publish"]["strata"][(number - 1) % 4]
            return float(rng.randint(low, max(low, high)))
        # Uniform over the stage's observed work; the tail is left out because the trials' stage
        # lengths vary with the change and a moment past the end is a miss. Embedding is the one
        # stage whose work follows the change (only edited chunks miss the reuse), so its range
        # is scaled by this trial's edits against the observed run's.
        work = windows[stage]["busy"]
        if stage == "embed":
            work *= min(1.0, edits / self.observed_edits)
        return rng.uniform(0, 0.85 * work)

    def trial(self, stage: str, number: int, windows: dict, rng: random.Random) -> Trial:
        change, edits = mutate(self.corpus, rng, self.runs, self.args.edits)
        trial = Trial(stage, number, change, self.moment(stage, windows, rng, number, edits))
        before_latest = (self.output / "LATEST").read_text().strip()
        before_dirs = run_dirs(self.output)
        before_staged = staged(self.output)
        rc, record, stderr, trial.kill_s = self.child(stage, trial.at)
        trial.rc = rc
        trial.landed = rc == -signal.SIGKILL and record.get("landed") is True
        new_dirs = run_dirs(self.output) - before_dirs
        if not trial.landed:
            trial.missed_why = (record.get("why") or f"rc {rc}, no report") if rc != -signal.SIGKILL \
                else "killed, but not by the watcher"
            if rc not in (0, -signal.SIGKILL):
                trial.problems.append(f"unkilled run failed with rc {rc}: {stderr.strip()[-500:]}")
        else:
            trial.where = record["where"]
            trial.into = record["into_stage"]
            trial.into_s = record["seconds_since_stage_began"]
        latest, problems = check_output(self.output)
        trial.latest_after_kill = latest or ""
        allowed = {before_latest} | (new_dirs if stage == "publish" or not trial.landed else set())
        if latest not in allowed:
            problems.append(f"LATEST names {latest!r}; after a kill in {stage} it must name "
                            f"{' or '.join(sorted(allowed))}")
        trial.left = left_behind(self.output, new_dirs, latest, staged(self.output) - before_staged)
        if trial.landed:
            if len(new_dirs) > 1:
                problems.append(f"one killed run made {len(new_dirs)} run directories: {sorted(new_dirs)}")
            for name in new_dirs:
                manifest = self.output / name / "manifest.json"
                # Before the manifest write nothing may name the run; in publish the manifest
                # may exist (even torn) as long as LATEST is on a complete run.
                if manifest.exists() and stage != "publish":
                    problems.append(f"killed run {name} left a manifest.json (killed in {stage})")
        trial.latest_ok = not problems
        trial.problems += [f"after the kill: {p}" for p in problems]
        lease_left = (self.output / ".lease").exists()
        rc, stdout, stderr, trial.next_s = self.next_run()
        trial.took_over = "took over the lease" in stderr and "its process is gone" in stderr
        next_problems = []
        if rc != 0:
            next_problems.append(f"exit {rc}: {stderr.strip()[-800:]}")
        named = re.search(r"chunkline run (\S+) on ", stdout)
        latest, problems = check_output(self.output)
        next_problems += problems
        if not named or latest != named.group(1):
            next_problems.append(f"LATEST is {latest!r}, the run said {named and named.group(1)!r}")
        elif named.group(1) in before_dirs | new_dirs:
            next_problems.append(f"run directory {named.group(1)} reused")
        if lease_left and trial.landed and not trial.took_over:
            next_problems.append("the dead run's lease was left and the next run did not say it took it over")
        if (self.output / ".lease").exists():
            next_problems.append("the next run left OUTPUT/.lease behind")
        if list(self.output.glob(".lease.takeover.*")):
            next_problems.append("a takeover marker was left behind")
        trial.next_ok = not next_problems
        trial.problems += [f"next run: {p}" for p in next_problems]
        return trial


def _moment(stage: str, values: list[float]) -> str:
    if not values:
        return "-"
    if stage == "publish":
        return f"call {statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"
    return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"


def table(trials: list[Trial], stages: list[str]) -> str:
    lines = ["| stage | attempts | kills landed | missed | LATEST complete and reconciled after every kill "
             "| next run exit 0, published, checked | dead lease taken over at once | "
             "stage work before the kill: median (range) | what the killed runs left |",
             "|---|---:|---:|---:|---|---|---|---|---|"]

    def row(name: str, group: list[Trial], stage: str | None) -> str:
        landed = [t for t in group if t.landed]
        yes = lambda ok, n: f"yes ({ok}/{n})" if ok == n else f"**NO** ({ok}/{n})"  # noqa: E731
        outcomes = statistics.multimode([]) or {}
        outcomes = {}
        for t in landed:
            outcomes[t.left] = outcomes.get(t.left, 0) + 1
        left = "; ".join(f"{n}x {what}" for what, n in sorted(outcomes.items(), key=lambda kv: -kv[1]))
        return (f"| {name} | {len(group)} | {len(landed)} | {len(group) - len(landed)} | "
                f"{yes(sum(t.latest_ok for t in group), len(group))} | "
                f"{yes(sum(t.next_ok for t in group), len(group))} | "
                f"{yes(sum(t.took_over for t in landed), len(landed))} | "
                f"{_moment(stage, [t.into for t in landed]) if stage else '-'} | "
                f"{left if stage else '-'} |")

    for stage in stages:
        lines.append(row(stage, [t for t in trials if t.stage == stage], stage))
    lines.append(row("**all**", trials, None))
    return "\n".join(lines)


def details(trials: list[Trial]) -> str:
    lines = ["| # | stage | change | moment drawn | killed at (frame or call) | stage work before the kill "
             "| s since the stage began | killed run left | next run s | problems |",
             "|---:|---|---|---:|---|---:|---:|---|---:|---|"]
    for i, t in enumerate(trials, 1):
        unit = (lambda v: f"call {v:.0f}") if t.stage == "publish" else (lambda v: f"{v:.3f} s")
        where = t.where if t.landed else f"missed: {t.missed_why}"
        lines.append(f"| {i} | {t.stage} | {t.change} | {unit(t.at)} | {where} | "
                     f"{unit(t.into) if t.into is not None else '-'} | "
                     f"{f'{t.into_s:.4f}' if t.into_s is not None else '-'} | {t.left} | "
                     f"{t.next_s:.1f} | {'; '.join(t.problems) or 'none'} |")
    return "\n".join(lines)


def parent(args: argparse.Namespace) -> int:
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = set(stages) - set(STAGES)
    if unknown:
        sys.exit(f"unknown stages {sorted(unknown)}; choose from {','.join(STAGES)}")
    work = Path(tempfile.mkdtemp(prefix="kill_bench-"))
    bench = Bench(args, work)
    started = time.perf_counter()
    write_corpus(bench.corpus, args.docs, args.seed)
    rc, _, stderr, baseline_s = bench.child("observe", 0.0)
    latest, problems = check_output(bench.output)
    if rc != 0 or problems:
        sys.exit(f"baseline run failed (rc {rc}): {problems}\n{stderr[-3000:]}")
    rng = random.Random(args.seed)
    _, bench.observed_edits = mutate(bench.corpus, rng, 0, args.edits)
    profile = bench.profile()
    windows = profile["windows"]
    print(f"baseline {baseline_s:.1f} s; observed run {profile['seconds']:.1f} s; stage windows:",
          file=sys.stderr)
    for stage in stages:
        print(f"  {stage}: {json.dumps(windows[stage])}", file=sys.stderr)
    trials: list[Trial] = []
    landed = {s: 0 for s in stages}
    attempts = {s: 0 for s in stages}
    while any(landed[s] < args.trials and attempts[s] < 2 * args.trials for s in stages):
        for stage in stages:
            if landed[stage] >= args.trials or attempts[stage] >= 2 * args.trials:
                continue
            attempts[stage] += 1
            trial = bench.trial(stage, attempts[stage], windows, rng)
            trials.append(trial)
            landed[stage] += trial.landed
            print(f"[{time.perf_counter() - started:6.0f} s] {stage} #{attempts[stage]}: "
                  f"{'killed at ' + trial.where if trial.landed else 'missed: ' + trial.missed_why}"
                  f"{'' if trial.into is None else f' ({trial.into:.4f} in)'}, left {trial.left}; "
                  f"{'ok' if not trial.problems else 'FAILED: ' + '; '.join(trial.problems)}",
                  file=sys.stderr, flush=True)
    total_s = time.perf_counter() - started
    failed = [t for t in trials if t.problems] + \
        [f"{s}: {landed[s]} kills landed" for s in stages if landed[s] < args.trials]
    window_lines = []
    for stage in stages:
        w = windows[stage]
        if stage == "publish":
            strata = ", ".join(f"{name} (calls {low}-{high})" for name, low, high in w["strata"])
            window_lines.append(f"- publish: {w['events']} Python and C calls and returns on the "
                                f"driver, {w['seconds'] * 1000:.2f} ms; {strata}")
        else:
            window_lines.append(f"- {stage}: first seen {w['first']:.2f} s after the process "
                                f"started, {w['busy']:.3f} s of work in {w['stretches']} "
                                f"stretch(es) over {w['last'] - w['first']:.3f} s")
    report = "\n".join([
        table(trials, stages), "",
        f"{len(trials)} trials, {sum(t.landed for t in trials)} kills landed, "
        f"{len(trials) - sum(t.landed for t in trials)} missed; {bench.runs} chunkline processes "
        f"in {total_s / 60:.1f} min (baseline run {baseline_s:.1f} s). "
        f"Corpus: {args.docs} documents (seed {args.seed}), each trial edits "
        f"{args.edits[0]}-{args.edits[1]} of them, sometimes adds or deletes one.", "",
        "Stage windows of the observed (unkilled) run, which the kill moments are drawn from:", "",
        *window_lines, "",
        details(trials), "",
        "Result: " + ("every check passed." if not failed else f"**{len(failed)} FAILED**"),
    ])
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    if failed or args.keep:
        print(f"work dir kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        split = argv.index("--")
        child = argparse.ArgumentParser(prog="kill_bench.py --child")
        child.add_argument("--child", nargs=2, metavar=("STAGE", "AT"))
        child.add_argument("--report", type=Path, required=True)
        known = child.parse_args(argv[:split])
        stage, at = known.child
        return _Child(stage, float(at), known.report).run(argv[split + 1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10, help="kills to land per stage")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--docs", type=int, default=80)
    parser.add_argument("--edits", type=int, nargs=2, default=(6, 14), metavar=("MIN", "MAX"),
                        help="documents edited per trial")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--chunk-shards", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    return parent(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
