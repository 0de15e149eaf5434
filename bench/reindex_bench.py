"""Reindex with 1% of documents changed against a full run: embedded tokens and wall time.

    python bench/reindex_bench.py --docs 400 --changed 0.01 --out bench/results_reindex.md

A synthetic corpus of manuals (headings, several sections each) is indexed in full; then 1% of
the documents get one new sentence in one section and the job runs again into the same output,
reusing the previous run's vectors by content key. Both runs are fresh processes' worth of work
(the model loads in each), so wall time includes fixed costs; the embedding work is what the
reuse saves and what the target (<= 5% of a full run's) is about.

`--nightly` measures what a nightly rerun costs, each run a fresh `chunkline run` process into
one output (the demo config, `--allow-shrink`, everything else default):

    python bench/reindex_bench.py --nightly --corpus readmes --out bench/results_reindex.md
    python bench/reindex_bench.py --nightly --corpus scale --mb 20 80 --out bench/results_reindex.md

Per corpus: a full run; a rerun with nothing changed; a rerun with 1 % of the documents changed;
one with 10 % changed (each a fresh seeded sample, cumulative on the same corpus and output; a
changed document gets one new sentence after its first blank line); and the floor, the same
command on a one-document corpus (full run and unchanged rerun). Each row is the median of
`--repeat` (default 3) runs from the same state (the corpus and output copied aside and put back
before each), every run's pipeline time listed: on a virtual machine two identical runs differ by
up to a third. `readmes` is the long
descriptions of the venv's installed distributions (plus README files in site-packages), about
`--mb` (default 1.5) MB, embedded with the real model; `scale` is bench/scale_bench.py's corpus
at each `--mb` (default 20 80), with `embed=null`. Pipeline time is the manifest's
`wall_seconds`; wall, CPU (user + system) and peak RSS are the process's (wait4); run dir MB is
the run folder's size, written MB the part of it the run wrote (less any shard hard-linked
from the run before), index MB the size of every file the run's manifest lists (a rerun lists
earlier runs' files for its unchanged rows), written / index their ratio (issue 49's targets:
<= 0.02 with nothing changed, <= 0.05 with 1 %).

`--nights N` (with `--nightly`) measures what merge-on-read leaves behind: a full run, then N
successive 1 % nights into the same output (each a fresh seeded sample, one run each), then a
full rebuild of the last night's corpus into a fresh output (carry off, the last run as
`output.previous`, so it takes the same BM25 reference length). It checks that the last run's
live rows are the rebuild's, row for row (chunks, documents, rejected, terms), and reports the
bytes of the files the last run's manifest lists (its tables and deletion files, the memo
aside: a rebuild without carry keeps none) over the rebuild's (issue 49: <= 1.3), with what
each night wrote:

    python bench/reindex_bench.py --nightly --corpus scale --mb 20 --nights 30
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_bench import generate  # noqa: E402
from chunkline.index.manifest import Manifest, load_manifest  # noqa: E402

WORDS = ("robot arm calibration sensor firmware battery dock mission route map lidar torque "
         "encoder gripper payload controller network latency safety zone charger floor aisle "
         "shelf pallet scanner camera operator ticket alert restart update rollback").split()


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 18))).capitalize() + "."
                    for _ in range(sentences))


def write_corpus(root: Path, docs: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(docs):
        parts = [f"# Manual {i:05d}\n\n{paragraph(rng, 4)}"]
        for s in range(rng.randint(2, 5)):
            parts.append(f"## Section {s}\n\n{paragraph(rng, rng.randint(3, 10))}")
        (root / f"doc{i:05d}.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")


def timed_run(corpus: Path, output: Path, *overrides: str):
    # Imported here: --nightly runs the pipeline in child processes only, so this process
    # neither pays for nor depends on importing it.
    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run

    config = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", *overrides])
    started = time.perf_counter()
    summary = run(config)
    return summary, time.perf_counter() - started


# --- --nightly: what a nightly rerun costs, in fresh processes -------------------------------

COUNT_KEYS = ("documents", "kept", "chunks", "embedded", "reused", "documents_carried",
              "documents_recomputed", "documents_new", "documents_gone", "chunks_carried")
README_SUFFIXES = {".md": ".md", ".rst": ".txt"}
DEFAULT_MB = {"readmes": [1.5], "scale": [20.0, 80.0]}


@dataclass
class Measured:
    """One `chunkline run` process: the manifest's view and the operating system's."""
    pipeline_s: float
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    run_dir_mb: float
    written_mb: float = 0.0  # the run's folder's own files, plus what it added under _iceberg/
    index_mb: float = 0.0  # the run's tables: every file its manifest lists, wherever it lies
    iceberg_mb: float = 0.0  # of written_mb: the Iceberg metadata, manifests and delete files
    counts: dict = field(default_factory=dict)
    each: list = field(default_factory=list)  # every repetition's pipeline s (--repeat)

    @property
    def outside_s(self) -> float:
        # Interpreter start, imports, model load, Beam setup and teardown: what a process
        # spends that the pipeline's own clock does not see.
        return self.wall_s - self.pipeline_s


def normalized_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def long_description(dist: metadata.Distribution) -> str:
    """The distribution's long description: the METADATA body, else the Description field
    (whose continuation lines carry 8 spaces, or 7 and a pipe, under Metadata 1.x)."""
    message = dist.metadata
    if message is None:
        return ""
    body = message.get_payload() if hasattr(message, "get_payload") else None
    if isinstance(body, str) and body.strip():
        return body
    header = message.get("Description") or ""
    return re.sub(r"\n(?: {7}\|| {8})", "\n", header)


def readme_documents() -> list[tuple[str, str]]:
    """(file name, text): each installed distribution's long description sorted by name, then
    the README files in site-packages by path; the same name or the same text only once."""
    found: list[tuple[str, str]] = []
    for dist in sorted(metadata.distributions(), key=lambda d: normalized_name(d.metadata["Name"] or "")):
        name = normalized_name(dist.metadata["Name"] or "")
        if not name:
            continue
        kind = (dist.metadata.get("Description-Content-Type") or "").lower()
        suffix = ".md" if "markdown" in kind else ".txt"
        found.append((name + suffix, long_description(dist)))
    site = Path(sysconfig.get_paths()["purelib"])
    for path in sorted(site.rglob("README*")):
        if path.suffix.lower() in README_SUFFIXES and path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            stem = "__".join(path.relative_to(site).with_suffix("").parts)
            found.append((stem + README_SUFFIXES[path.suffix.lower()], text))
    names: set[str] = set()
    digests: set[str] = set()
    unique = []
    for name, text in found:
        digest = hashlib.blake2b(text.strip().encode("utf-8"), digest_size=16).hexdigest()
        if not text.strip() or name in names or digest in digests:
            continue
        names.add(name)
        digests.add(digest)
        unique.append((name, text))
    return unique


def write_readmes(directory: Path, megabytes: float) -> tuple[int, int]:
    """Write READMEs in order until about ``megabytes``; returns (documents, bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = int(megabytes * 1_000_000)
    written = count = 0
    for name, text in readme_documents():
        if written >= target:
            break
        data = text.encode("utf-8")
        (directory / name).write_bytes(data)
        written += len(data)
        count += 1
    return count, written


def corpus_files(corpus: Path) -> list[Path]:
    return sorted(path for path in corpus.rglob("*") if path.is_file())


def with_sentence(text: str, sentence: str, suffix: str) -> str:
    """``text`` with ``sentence`` as a new paragraph after its first blank line (else after
    its middle line): the text changes, the file name does not. A comment in source files, so
    a file that parsed still parses."""
    line = f"# {sentence}" if suffix == ".py" else sentence
    cut = text.find("\n\n")
    if cut >= 0:
        return text[:cut + 2] + line + "\n\n" + text[cut + 2:]
    lines = text.splitlines(keepends=True)
    middle = len(lines) // 2
    return "".join(lines[:middle]) + "\n" + line + "\n\n" + "".join(lines[middle:])


def change_documents(corpus: Path, fraction: float, seed: int, label: str) -> int:
    """Edit a fresh seeded sample of ``fraction`` of the documents; returns how many.
    ``label`` goes into the sentence, so a document sampled again changes again."""
    files = corpus_files(corpus)
    rng = random.Random(seed)
    chosen = rng.sample(files, max(1, round(len(files) * fraction)))
    for index, path in enumerate(chosen):
        text = path.read_text(encoding="utf-8")
        sentence = f"The nightly {label} edit adds this sentence, number {index}, to the text."
        path.write_text(with_sentence(text, sentence, path.suffix), encoding="utf-8")
    return len(chosen)


def directory_bytes(directory: Path) -> int:
    # Regular files only: a link would be bytes some other run wrote.
    return sum(path.stat().st_size for path in directory.rglob("*")
               if path.is_file() and not path.is_symlink())


def written_bytes(directory: Path) -> int:
    """What the run wrote: its folder's files (a rerun references the files that hold its
    unchanged rows, in earlier runs' folders), less any hard-linked from the run before (an
    older chunkline linked a shard whose rows did not change)."""
    return sum(stat.st_size for stat in (path.stat() for path in directory.rglob("*")
                                         if path.is_file() and not path.is_symlink())
               if stat.st_nlink == 1)


def index_bytes(output: Path, run_id: str, manifest: Manifest, skip: tuple[str, ...] = ()) -> int:
    """The bytes of every file the run's manifest lists (format 2: relative to OUTPUT, an
    earlier run's folder included, and its deletion files; format 1: its own folder), the
    tables of ``skip`` aside."""
    from chunkline.index.tables import live_files

    run_dir = str(output / run_id)
    return sum(Path(file.path).stat().st_size for table in manifest.listing.table_names() if table not in skip
               for file in live_files(run_dir, manifest, table)) + \
        sum((output / described.path).stat().st_size
            for table, files in manifest.listing.deletes.items() if table not in skip for described in files)


def run_process(corpus: Path, output: Path, overrides: list[str]) -> Measured:
    """One fresh `chunkline run` process (bench/scale_bench.py's run_once, with CPU time, the
    manifest's pipeline time and the run directory's size)."""
    command = [
        sys.executable, "-c", "import sys; from chunkline.pipeline.cli import main; sys.exit(main())",
        "run", "--config", "configs/local.yaml",
        "--set", f"input.pattern={corpus}/**", "--set", f"output.path={output}",
        *[part for override in overrides for part in ("--set", override)], "--allow-shrink",
    ]
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    # A run adds its snapshots' metadata, manifests and position-delete files under _iceberg/
    # and removes nothing there (gc does): what it wrote there is the growth.
    iceberg_before = directory_bytes(output / "_iceberg") if (output / "_iceberg").is_dir() else 0
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # Drain the log before wait4: a child whose log fills the pipe would otherwise never exit.
    log = process.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"run failed (exit {code}): {shlex.join(command)}\n{log[-4000:]}")
    run_id = (output / "LATEST").read_text().strip()
    manifest = load_manifest(str(output / run_id))
    iceberg = (directory_bytes(output / "_iceberg") if (output / "_iceberg").is_dir() else 0) - iceberg_before
    return Measured(
        pipeline_s=float(manifest.wall_seconds or 0), wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime, peak_rss_mb=usage.ru_maxrss / 1024,
        run_dir_mb=directory_bytes(output / run_id) / 1e6,
        written_mb=(written_bytes(output / run_id) + iceberg) / 1e6, iceberg_mb=iceberg / 1e6,
        index_mb=index_bytes(output, run_id, manifest) / 1e6, counts=dict(manifest.counts))


def median_of(runs: list[Measured]) -> Measured:
    """The run of median pipeline time, every run's pipeline time kept beside it."""
    ordered = sorted(runs, key=lambda m: m.pipeline_s)
    chosen = ordered[(len(ordered) - 1) // 2]
    chosen.each = [m.pipeline_s for m in runs]
    return chosen


def repeated(corpus: Path, output: Path, overrides: list[str], repeat: int,
             change: tuple[float, int, str] | None = None, fresh: bool = False) -> Measured:
    """The same run ``repeat`` times from the same starting state: the corpus and output as
    they were (copied aside and put back), ``change`` (fraction, seed, label) applied anew
    each time, ``fresh``: into an empty output. The last run's state is kept."""
    snapshot = output.parent / (output.name + ".before")
    if repeat > 1 and not fresh:
        shutil.rmtree(snapshot, ignore_errors=True)
        snapshot.mkdir()
        subprocess.run(["cp", "-a", str(corpus), str(snapshot / "corpus")], check=True)
        if output.exists():
            subprocess.run(["cp", "-a", str(output), str(snapshot / "out")], check=True)
    runs = []
    for attempt in range(repeat):
        if attempt and fresh:
            shutil.rmtree(output)
        elif attempt:
            for target, source in ((corpus, snapshot / "corpus"), (output, snapshot / "out")):
                shutil.rmtree(target, ignore_errors=True)
                if source.exists():
                    subprocess.run(["cp", "-a", str(source), str(target)], check=True)
        if change is not None:
            changed = change_documents(corpus, *change)
            if attempt == 0:
                print(f"  changed {changed} documents", flush=True)
        runs.append(run_process(corpus, output, overrides))
    shutil.rmtree(snapshot, ignore_errors=True)
    return median_of(runs)


def nightly_corpus(corpus: Path, work: Path, overrides: list[str], seed: int,
                   repeat: int = 1) -> list[tuple[str, Measured]]:
    """Full run, three reruns into the same output, and the one-document floor; each row the
    median of ``repeat`` runs from the same starting state."""
    output = work / "out"
    rows = [("full", repeated(corpus, output, overrides, repeat, fresh=True))]
    rows.append(("no change", repeated(corpus, output, overrides, repeat)))
    for label, fraction, offset in (("1 %", 0.01, 1), ("10 %", 0.10, 2)):
        rows.append((label, repeated(corpus, output, overrides, repeat,
                                     change=(fraction, seed + offset, label.replace(" ", "")))))
        print(f"  {label}: {rows[-1][1].pipeline_s:.1f} s", flush=True)
    floor = work / "floor_corpus"
    floor.mkdir()
    # The first document as the reruns left it: the floor is the same command on one document.
    first = corpus_files(corpus)[0]
    shutil.copy2(first, floor / first.name)
    rows.append(("floor full", repeated(floor, work / "floor_out", overrides, repeat, fresh=True)))
    rows.append(("floor rerun", repeated(floor, work / "floor_out", overrides, repeat)))
    return rows


def count(counts: dict, key: str) -> str:
    value = counts.get(key)
    return "-" if value is None else f"{value:,}"


def ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.3f}" if denominator > 0 else "-"


def nightly_report(title: str, command: str, rows: list[tuple[str, Measured]]) -> str:
    lines = [f"### {title}", "", f"`{command}`", "",
             "| run | pipeline s | wall s | outside pipeline s | CPU s | peak RSS MB | run dir MB "
             "| written MB | of it Iceberg MB | index MB | written / index | documents carried | chunks embedded "
             "| pipeline s of each repetition |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, m in rows:
        lines.append(f"| {name} | {m.pipeline_s:.2f} | {m.wall_s:.2f} | {m.outside_s:.2f} | "
                     f"{m.cpu_s:.1f} | {m.peak_rss_mb:.0f} | {m.run_dir_mb:.2f} | {m.written_mb:.2f} | "
                     f"{m.iceberg_mb:.3f} | {m.index_mb:.2f} | {ratio(m.written_mb, m.index_mb)} | "
                     f"{count(m.counts, 'documents_carried')} | {count(m.counts, 'embedded')} | "
                     + " ".join(f"{each:.2f}" for each in m.each) + " |")
    lines += ["", "| run | " + " | ".join(COUNT_KEYS) + " |",
              "|---|" + "---:|" * len(COUNT_KEYS)]
    for name, m in rows:
        lines.append(f"| {name} | " + " | ".join(count(m.counts, key) for key in COUNT_KEYS) + " |")
    by_name = dict(rows)
    full, floor_full, floor_rerun = by_name["full"], by_name["floor full"], by_name["floor rerun"]
    reruns = [(name, by_name[name]) for name in ("no change", "1 %", "10 %")]
    above = full.pipeline_s - floor_full.pipeline_s
    lines += [
        "",
        "rerun pipeline / full pipeline: " + ", ".join(
            f"{name} {ratio(m.pipeline_s, full.pipeline_s)}" for name, m in reruns),
        f"(rerun - floor) / (full - floor), floor = the one-document corpus's full-run pipeline "
        f"time ({floor_full.pipeline_s:.2f} s) in numerator and denominator: " + ", ".join(
            f"{name} {ratio(m.pipeline_s - floor_full.pipeline_s, above)}" for name, m in reruns),
        f"the same with the floor rerun's pipeline time ({floor_rerun.pipeline_s:.2f} s) taken "
        f"off each rerun (the full run's floor stays the floor full run's): " + ", ".join(
            f"{name} {ratio(m.pipeline_s - floor_rerun.pipeline_s, above)}" for name, m in reruns),
        "outside the pipeline (process wall - pipeline s): " + ", ".join(
            f"{name} {m.outside_s:.2f} s" for name, m in rows),
    ]
    return "\n".join(lines)


def git_describe() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return f"{head}{' + uncommitted changes' if dirty else ''}"


def nightly(args: argparse.Namespace) -> None:
    command = "python bench/reindex_bench.py " + shlex.join(sys.argv[1:])
    sizes = args.mb or DEFAULT_MB[args.corpus]
    # Scale runs measure the pipeline's own work; readmes run the default config, the model
    # included, as a nightly job would.
    overrides = ["embed=null"] if args.corpus == "scale" else []
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="chunkline-nightly-", dir=args.work_dir))
    reports = []
    try:
        for megabytes in sizes:
            work = base / f"{args.corpus}_{megabytes:g}mb"
            corpus = work / "corpus"
            if args.corpus == "scale":
                docs, size = generate(corpus, megabytes)
            else:
                docs, size = write_readmes(corpus, megabytes)
            print(f"{args.corpus} {megabytes:g} MB: {docs} documents, {size / 1e6:.2f} MB in {corpus}",
                  flush=True)
            rows = nightly_corpus(corpus, work, overrides, args.seed, args.repeat)
            embedding = "embed=null" if overrides else "embedding on (configs/local.yaml's model)"
            title = (f"Nightly rerun, {args.corpus} corpus {megabytes:g} MB: {docs} documents, "
                     f"{size / 1e6:.2f} MB; {embedding}; {os.cpu_count()} CPUs; {git_describe()}")
            reports.append(nightly_report(title, command, rows))
            print(reports[-1] + "\n", flush=True)
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    if args.out:
        with args.out.open("a", encoding="utf-8") as handle:
            handle.write("\n\n".join(reports) + "\n\n")


def manifest_of(output: Path) -> tuple[str, Manifest]:
    run_id = (output / "LATEST").read_text().strip()
    return run_id, load_manifest(str(output / run_id))


def live_tables(output: Path) -> dict:
    """The published run's live rows per table, as every reader reads them."""
    from chunkline.index.manifest import load_manifest
    from chunkline.index.tables import read_table

    run_dir = str(output / (output / "LATEST").read_text().strip())
    manifest = load_manifest(run_dir)
    return {table: read_table(run_dir, manifest, table) for table in ("chunks", "documents", "rejected", "terms")}


def nights(args: argparse.Namespace) -> None:
    """A full run, ``args.nights`` successive 1 % nights, then a full rebuild: the last night's
    live rows against the rebuild's, and the bytes its manifest lists against the rebuild's."""
    command = "python bench/reindex_bench.py " + shlex.join(sys.argv[1:])
    megabytes = (args.mb or [20.0])[0]
    overrides = ["embed=null"] if args.corpus == "scale" else []
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="chunkline-nights-", dir=args.work_dir))
    try:
        corpus, output = base / "corpus", base / "out"
        if args.corpus == "scale":
            docs, size = generate(corpus, megabytes)
        else:
            docs, size = write_readmes(corpus, megabytes)
        full = run_process(corpus, output, overrides)
        print(f"{docs} documents, {size / 1e6:.2f} MB; full: {full.pipeline_s:.1f} s, "
              f"{full.index_mb:.2f} MB", flush=True)
        written, seconds = [], []
        for night in range(1, args.nights + 1):
            change_documents(corpus, 0.01, args.seed + 100 + night, f"night{night}")
            m = run_process(corpus, output, overrides)
            written.append(m.written_mb)
            seconds.append(m.pipeline_s)
            print(f"  night {night}: {m.pipeline_s:.1f} s, wrote {m.written_mb:.2f} MB, index "
                  f"{m.index_mb:.2f} MB", flush=True)
        run_id, manifest = manifest_of(output)
        rebuild = base / "rebuild"
        run_process(corpus, rebuild, [*overrides, "output.carry=false",
                                      f"output.previous={output / run_id}"])
        rebuilt_id, rebuilt = manifest_of(rebuild)
        skip = ("memo",)
        last_bytes = index_bytes(output, run_id, manifest, skip)
        rebuild_bytes = index_bytes(rebuild, rebuilt_id, rebuilt, skip)
        ours, theirs = live_tables(output), live_tables(rebuild)
        same = {table: (ours[table] is None and theirs[table] is None) or
                (ours[table] is not None and theirs[table] is not None and ours[table].equals(theirs[table]))
                for table in ours}
        files = {table: len(entries) for table, entries in manifest.listing.tables.items() if table not in skip}
        deleted = sum(entry.deleted_rows if entry.deleted_rows is not None else len(entry.deleted or ())
                      for entries in manifest.listing.tables.values() for entry in entries)
        folders = len({path.split("/", 1)[0] for path in (
            *(entry.path for entries in manifest.listing.tables.values() for entry in entries),
            *(segment.path for segment in manifest.listing.memo or ()))})
        ordered = sorted(written)
        line = (f"| {args.corpus} {megabytes:g} MB ({docs:,} documents), {args.nights} nights of 1 % "
                f"| {'yes' if all(same.values()) else 'NO: ' + ', '.join(t for t, ok in same.items() if not ok)} "
                f"| {last_bytes / 1e6:.2f} | {rebuild_bytes / 1e6:.2f} | **{last_bytes / rebuild_bytes:.3f}** "
                f"| {ordered[len(ordered) // 2]:.2f} ({min(written):.2f}-{max(written):.2f}) "
                f"| {sum(written):.2f} | {deleted:,} | {folders} | "
                + ", ".join(f"{t} {n}" for t, n in files.items())
                + f" | `{command}` | {git_describe()} |")
        print("\n| corpus | live rows = rebuild's | index MB (tables + deletion files) | rebuild MB "
              "| index / rebuild | written MB per night, median (range) | written MB, all nights "
              "| rows deleted | run folders referenced | files per table | command | commit |")
        print("|---|---|---:|---:|---:|---|---:|---:|---:|---|---|---|")
        print(line, flush=True)
        print(f"pipeline s per night: median {sorted(seconds)[len(seconds) // 2]:.1f}, "
              f"range {min(seconds):.1f}-{max(seconds):.1f}", flush=True)
        if args.out:
            with args.out.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        if not all(same.values()):
            raise SystemExit("the last night's live rows differ from the rebuild's")
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--changed", type=float, default=0.01, help="fraction of documents edited")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the table here (--nightly: append)")
    parser.add_argument("--nightly", action="store_true",
                        help="measure nightly reruns in fresh processes (see above)")
    parser.add_argument("--corpus", choices=("readmes", "scale"), default="readmes",
                        help="--nightly: package READMEs (embedding on) or scale_bench's corpus (embed=null)")
    parser.add_argument("--mb", type=float, nargs="+", default=None,
                        help="--nightly: corpus size(s) in MB (default: readmes 1.5, scale 20 80)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="--nightly: make the temporary directory here (default: the system's)")
    parser.add_argument("--keep", action="store_true", help="--nightly: keep the corpora and outputs")
    parser.add_argument("--repeat", type=int, default=3,
                        help="--nightly: each row is the median of this many runs from the same state")
    parser.add_argument("--nights", type=int, default=0,
                        help="--nightly: a full run, this many successive 1 %% nights and a full "
                        "rebuild: live rows and the index's bytes against the rebuild's (see above)")
    args = parser.parse_args()
    if args.nightly and args.nights:
        nights(args)
        return
    if args.nightly:
        nightly(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        corpus, output = Path(tmp) / "corpus", Path(tmp) / "index"
        corpus.mkdir()
        write_corpus(corpus, args.docs, args.seed)
        # Near-dedupe off: synthetic manuals share a vocabulary, not text, but keep the
        # comparison about reuse alone.
        full, full_s = timed_run(corpus, output, "dedupe.near=null")
        rng = random.Random(args.seed + 1)
        edited = rng.sample(sorted(corpus.iterdir()), max(1, round(args.docs * args.changed)))
        for path in edited:
            text = path.read_text()
            path.write_text(text.replace("## Section 1\n\n", "## Section 1\n\nA sentence added tonight. ", 1))
        reindex, reindex_s = timed_run(corpus, output, "dedupe.near=null")
        rebuild, rebuild_s = timed_run(corpus, Path(tmp) / "rebuild", "dedupe.near=null")
    rows = [
        ("full run", full, full_s),
        (f"reindex, {len(edited)} of {args.docs} documents changed", reindex, reindex_s),
        ("full rebuild of the changed corpus", rebuild, rebuild_s),
    ]
    base_tokens = rebuild.counts["tokens_embedded"]
    lines = [
        f"Corpus: {args.docs} synthetic manuals, {full.counts['chunks']} chunks, "
        f"{full.counts['tokens']:,} chunk tokens; all-MiniLM-L6-v2 float32, FnApiRunner.",
        "",
        "| run | chunks embedded | chunks reused | tokens embedded | share of a full run's tokens | wall s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, summary, seconds in rows:
        c = summary.counts
        lines.append(f"| {name} | {c['embedded']:,} | {c['reused']:,} | {c['tokens_embedded']:,} | "
                     f"{c['tokens_embedded'] / base_tokens:.1%} | {seconds:.1f} |")
    lines.append("")
    lines.append(f"Reindex wall time = {reindex_s / rebuild_s:.2f}x a full rebuild's; "
                 f"embedding work = {reindex.counts['tokens_embedded'] / base_tokens:.2%} of it.")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
