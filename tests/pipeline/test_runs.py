"""``chunkline runs``, ``publish`` and ``gc`` on an output built by real runs: a published run,
an older complete one, one held back by the publish guard (the corpus shrank), one that failed
(its context stage went over the failure budget), one killed mid-job (SIGKILL, no manifest) and
one running (another live process holds the output's lease and writes into its directory)."""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

from chunkline.index.manifest import load_manifest
from chunkline.index.tables import listed_paths, live_files, table_names
from chunkline.pipeline.cli import main
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.helpers import run_table
from tests.llm_server import Fault, LLMServer
from tests.pipeline.test_carry import write_corpus

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "local.yaml"
KEY_ENV = "CHUNKLINE_TEST_LLM_KEY"
pytestmark = pytest.mark.slow

PENGUIN = "# Penguins\n\nA penguin colony nests on the iceberg beside the research station.\n"


def job(corpus: Path, output: Path, *overrides: str):
    """A real run with no model (the publish guard at its default, unlike test_carry's job)."""
    return run(load_config(CONFIG, [f"input.pattern={corpus}/**", f"output.path={output}",
                                    "embed=null", *overrides]))


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def runs_json(output: Path) -> dict[str, dict]:
    code, out, err = cli("runs", str(output), "--json")
    assert code == 0, err
    return {r["run_id"]: r for r in json.loads(out)}


def files_of(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*") if p.is_file()}


def latest(output: Path) -> str:
    return (output / "LATEST").read_text().strip()


def new_run_id() -> str:
    """A run id of chunkline.pipeline.plan.new_run_id's form, for the directory a lease holder writes."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}Z-{'0' * 8}-{secrets.token_hex(3)}"


HOLDER = """
import sys, time
from pathlib import Path
from chunkline.pipeline.lease import OutputLease
output, run_id = sys.argv[1], sys.argv[2]
OutputLease(output, run_id, timeout=600).acquire()
if " " not in run_id:  # a run: it writes its directory, its parts first
    parts = Path(output) / run_id / "_spill" / "chunks"
    parts.mkdir(parents=True)
    (parts / "0.part").write_bytes(b"x" * 1000)
    (Path(output) / run_id / "chunks-00000-of-00004.parquet").write_bytes(b"being written")
print("holding", flush=True)
time.sleep(600)
"""


@contextmanager
def holding(output: Path, run_id: str) -> Iterator[subprocess.Popen]:
    """Another live process holding ``output``'s lease (pipeline/lease.py) as ``run_id``."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(output), run_id], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def killed_run(corpus: Path, output: Path) -> str:
    """``chunkline run`` in a child process, SIGKILLed once its first parts are on disk: a run
    directory without a manifest, its parts and its lease (of a dead pid) left behind."""
    before = set(os.listdir(output))
    # Every document processed (carry off: none passed by on its state row), so that the run
    # parks parts to be killed among.
    child = subprocess.Popen(
        [sys.executable, "-m", "chunkline.pipeline.cli", "run", "--config", str(CONFIG), "--input",
         f"{corpus}/**", "--output", str(output), "--set", "embed=null", "--set", "output.carry=false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, found = time.monotonic() + 120, []
    while child.poll() is None and time.monotonic() < deadline:
        found = [d for d in output.iterdir() if d.is_dir() and d.name not in before]
        if found and any((found[0] / "_spill").rglob("*.part")):
            child.kill()
            break
        time.sleep(0.005)
    child.wait()
    assert found and not (found[0] / "manifest.json").exists(), "the run finished before the kill"
    return found[0].name


@dataclass(frozen=True)
class Built:
    output: Path  # a template: each test works on its own copy
    corpus: Path  # as the LATEST run read it
    older: object  # RunSummary: complete, published before LATEST, holds penguin.md
    published: object  # LATEST
    held_back: object
    failed: object
    killed: str

    def copy(self, tmp_path: Path) -> Path:
        target = tmp_path / "index"
        shutil.copytree(self.output, target, symlinks=True)
        return target


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    base = tmp_path_factory.mktemp("runs")
    corpus, small, output = base / "corpus", base / "small", base / "index"
    write_corpus(corpus, 8)
    (corpus / "penguin.md").write_text(PENGUIN, encoding="utf-8")
    older = job(corpus, output)
    (corpus / "penguin.md").unlink()
    published = job(corpus, output)
    small.mkdir()
    for name in ("doc000.md", "doc001.md"):
        shutil.copy(corpus / name, small / name)
    held_back = job(small, output)  # 8 kept documents fell to 2: the guard holds it back
    with LLMServer(expected_key="sk-test") as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, "sk-test")
        # Two documents' headers fail, over a budget of one; the headers written before are
        # cached in OUTPUT/_cache/context, which the next run reads and gc must keep.
        server.faults += [Fault(match="Manual 006", status=500), Fault(match="Manual 007", status=500)]
        failed = job(corpus, output, f"context={{provider: openai, base_url: '{server.url}', "
                     f"api_key_env: {KEY_ENV}, model: test-model, max_retries: 0, "
                     f"max_failures: 1, backoff_base_s: 0.01}}")
    killed = killed_run(corpus, output)
    assert older.published and published.published and latest(output) == published.run_id
    assert held_back.reconciled and not held_back.published and held_back.held_back
    assert not failed.reconciled and not failed.published
    assert list((output / "_cache" / "context").rglob("*.parquet"))
    return Built(output, corpus, older, published, held_back, failed, killed)


def test_runs_names_each_status_with_counts_and_size(built, tmp_path) -> None:
    output = built.copy(tmp_path)
    running = new_run_id()
    with holding(output, running):
        found = runs_json(output)
        code, table, err = cli("runs", str(output))
    assert code == 0 and not err
    assert {name: r["status"] for name, r in found.items()} == {
        built.older.run_id: "complete", built.published.run_id: "LATEST",
        built.held_back.run_id: "held-back", built.failed.run_id: "failed",
        built.killed: "incomplete", running: "running"}
    for summary in (built.older, built.published, built.held_back, built.failed):
        assert found[summary.run_id]["counts"] == {k: summary.counts[k] for k in ("documents", "kept", "chunks")}
    assert found[built.killed]["counts"] is None and found[running]["counts"] is None
    for name, row in found.items():
        assert row["bytes"] == sum(files_of(output / name).values()) > 0
        assert row["started"].startswith(datetime.strptime(name[:15], "%Y%m%dT%H%M%S").strftime("%Y-%m-%dT%H:%M:%S"))
    assert "kept fell from 8 to 2" in found[built.held_back.run_id]["reasons"][0]
    assert any("failure budget" in reason for reason in found[built.failed.run_id]["reasons"])
    assert "pid" in found[running]["reasons"][0]
    # The table: a header, one line per run newest first, then why a run is held back or failed.
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["RUN", "STARTED", "(UTC)"]
    assert [line.split()[0] for line in lines[1:7]] == sorted(found, reverse=True)
    assert any(line.startswith(f"  {built.held_back.run_id}: kept fell") for line in lines)


def sparse_hits(output: Path, question: str) -> list[str]:
    code, out, err = cli("query", str(output), question, "--mode", "sparse", "--json")
    assert code == 0, err
    return [hit["doc_id"] for hit in json.loads(out)["hits"]]


def test_publish_rolls_back_and_query_answers_from_that_run(built, tmp_path) -> None:
    output = built.copy(tmp_path)
    assert "penguin.md" not in sparse_hits(output, "penguin colony iceberg")
    code, out, err = cli("publish", str(output), built.older.run_id)
    assert code == 0, err
    assert f"{built.published.run_id} -> {built.older.run_id}" in out
    assert "sync" not in out  # no sink recorded
    assert latest(output) == built.older.run_id
    assert sparse_hits(output, "penguin colony iceberg")[0] == "penguin.md"
    statuses = {name: r["status"] for name, r in runs_json(output).items()}
    assert statuses[built.older.run_id] == "LATEST" and statuses[built.published.run_id] == "complete"
    assert not any(p.name.startswith((".LATEST.", ".lease")) for p in output.iterdir())
    code, out, _ = cli("publish", str(output), built.older.run_id)
    assert code == 0 and "nothing changed" in out


@pytest.mark.parametrize("which, phrase", [
    ("killed", "is incomplete"),
    ("held_back", "held back by the publish guard"),
    ("failed", "failed (not reconciled"),
    ("missing", "does not exist"),
    # A format-2 manifest names a file by its run folder and name (it may lie in an earlier
    # run's folder).
    ("damaged", "/chunks-00001-of-00004.parquet is missing"),
    ("truncated", "/documents-00000-of-00001.parquet is unreadable"),
])
def test_publish_refuses_a_run_that_is_not_complete(built, tmp_path, which, phrase) -> None:
    output = built.copy(tmp_path)
    run_id = {"killed": built.killed, "held_back": built.held_back.run_id,
              "failed": built.failed.run_id, "missing": "20260101T000000Z-00000000-000000"}.get(
        which, built.older.run_id)
    if which == "damaged":  # hand-made: a shard the manifest lists, deleted
        (output / run_id / "chunks-00001-of-00004.parquet").unlink()
    if which == "truncated":  # hand-made: a shard cut short
        shard = output / run_id / "documents-00000-of-00001.parquet"
        shard.write_bytes(shard.read_bytes()[:100])
    code, out, err = cli("publish", str(output), run_id)
    assert code == 2 and not out
    assert len(err.splitlines()) == 1 and run_id in err and phrase in err, err
    assert which not in ("damaged", "truncated") or f"is damaged: {run_id}{phrase}" in err, err
    assert "Traceback" not in err
    assert latest(output) == built.published.run_id


def test_publish_of_a_held_back_run_needs_the_flag(built, tmp_path) -> None:
    output = built.copy(tmp_path)
    code, out, err = cli("publish", str(output), built.held_back.run_id, "--allow-held-back")
    assert code == 0, err
    assert latest(output) == built.held_back.run_id and "published although held back" in out


def test_publish_waits_for_the_lease(built, tmp_path) -> None:
    output = built.copy(tmp_path)
    with holding(output, new_run_id()) as holder:
        code, out, err = cli("publish", str(output), built.older.run_id)
    assert code == 75 and not out
    assert f"pid {holder.pid}" in err and len(err.splitlines()) == 1
    assert latest(output) == built.published.run_id


def referenced_by(run_dir: Path) -> set[str]:
    """The other run folders whose files the run's manifest lists (a rerun keeps its unchanged
    rows in the earlier run's files): gc keeps those files while the run is kept."""
    manifest = load_manifest(str(run_dir))
    return {file.folder for table in table_names(manifest)
            for file in live_files(str(run_dir), manifest, table)} - {run_dir.name}


def listed_in(run_dir: Path, folder: str) -> set[str]:
    """The names within ``folder`` of the files the run's manifest lists there."""
    return {path.split("/", 1)[1] for path in listed_paths(str(run_dir), load_manifest(str(run_dir)))
            if path.split("/", 1)[0] == folder}


def test_gc_beside_a_running_run_leaves_it_alone(built, tmp_path) -> None:
    output = built.copy(tmp_path)
    staged = output / f".LATEST.{built.held_back.run_id}"
    staged.write_text(built.held_back.run_id + "\n")  # hand-made: as a publish killed mid-rename
    running = new_run_id()
    published = output / built.published.run_id
    kept = referenced_by(published)
    assert kept <= {built.older.run_id}  # the run the published one followed, nothing else
    # Of a folder whose files the published run lists, all but those go (its manifest too).
    doomed = {built.older.run_id, built.held_back.run_id, built.failed.run_id, built.killed}
    with holding(output, running):
        before = {name: files_of(output / name) for name in (running, built.published.run_id)}
        sizes = {name: sum(size for file, size in files_of(output / name).items()
                           if file not in listed_in(published, name)) for name in doomed}
        code, out, err = cli("gc", str(output), "--keep", "1", "--dry-run")
        assert code == 0, err
        listed = {line.split()[2]: line for line in out.splitlines() if line.startswith("would remove")}
        assert set(listed) == doomed  # the staged LATEST may be the running run's: not without the lease
        assert "would free" in out and f"({sum(sizes.values()):,} bytes) in {len(doomed)} entries" in out
        assert all((output / name).exists() for name in doomed)
        code, out, err = cli("gc", str(output), "--keep", "1")
        assert code == 0, err
        assert "freed" in out and f"({sum(sizes.values()):,} bytes) in {len(doomed)} entries" in out
        assert {name: files_of(output / name) for name in before} == before
    assert not any((output / name).exists() for name in doomed - kept)
    assert all(set(files_of(output / name)) == listed_in(published, name) for name in kept)
    assert staged.exists()
    assert sorted(p.name for p in output.iterdir() if p.is_dir()) == \
        sorted([built.published.run_id, running, "_cache", "_iceberg", *kept])
    assert files_of(output / "_cache") == files_of(built.output / "_cache")


def test_gc_under_its_lease_then_a_rerun_carries_every_document(built, tmp_path) -> None:
    output = built.copy(tmp_path)
    staged = output / f".LATEST.{built.held_back.run_id}"
    staged.write_text(built.held_back.run_id + "\n")  # hand-made, as above
    probe = output / f".probe-{built.killed}"
    probe.write_bytes(b"chunkline write probe\n")  # hand-made: a preflight killed mid-probe
    os.utime(probe, (time.time() - 3600, time.time() - 3600))
    assert list((output / built.killed / "_spill").rglob("*.part"))  # what the kill left
    kept = referenced_by(output / built.published.run_id)
    code, out, err = cli("gc", str(output), "--keep", "1")
    assert code == 0, err
    removed = {line.split()[1] for line in out.splitlines() if line.startswith("removed")}
    # A folder whose files the published run lists is removed but for those.
    assert removed == {built.older.run_id, built.held_back.run_id, built.failed.run_id,
                       built.killed, staged.name, probe.name}
    assert all(set(files_of(output / name)) == listed_in(output / built.published.run_id, name)
               for name in kept)
    # The killed run's lease was taken over by gc and released with it.
    assert sorted(p.name for p in output.iterdir()) == sorted(["LATEST", built.published.run_id, "_cache", "_iceberg",
                                                               *kept])
    assert files_of(output / "_cache") == files_of(built.output / "_cache")
    again = job(built.corpus, output)
    assert again.published
    assert again.counts["documents_carried"] == again.counts["kept"] == built.published.counts["kept"]
    assert again.counts["chunks_carried"] == again.counts["chunks"]


def test_gc_after_a_rollback_keeps_latest_and_the_newest(built, tmp_path) -> None:
    output = built.copy(tmp_path)
    assert cli("publish", str(output), built.older.run_id)[0] == 0
    code, out, err = cli("gc", str(output), "--keep", "1")
    assert code == 0, err
    assert sorted(p.name for p in output.iterdir() if p.is_dir() and not p.name.startswith("_")) == \
        sorted([built.older.run_id, built.published.run_id])
    code, out, err = cli("gc", str(output), "--keep", "0")
    assert code == 0, err
    assert [p.name for p in output.iterdir() if p.is_dir() and not p.name.startswith("_")] == [built.older.run_id]


def test_gc_waits_for_a_holder_that_is_not_a_run(built, tmp_path) -> None:
    output = built.copy(tmp_path)
    names = sorted(os.listdir(output))
    with holding(output, f"chunkline publish of run {built.older.run_id}"):
        code, out, err = cli("gc", str(output), "--keep", "1")
    assert code == 75 and "nothing removed" in err and not out
    assert sorted(os.listdir(output)) == names


@pytest.mark.parametrize("argv, phrase", [
    (["gc", "s3://bucket/index", "--keep", "1"], "local and gs:// outputs only"),
    (["gc", "{missing}", "--keep", "1"], "no such output directory"),
    (["gc", "{output}", "--keep", "-1"], "--keep must be 0 or more"),
    (["runs", "{missing}"], "no such output directory"),
    (["publish", "{missing}", "20260101T000000Z-00000000-000000"], "no such output directory"),
    (["publish", "{output}", "../elsewhere"], "is not a run id"),
])
def test_usage_errors_are_one_line(tmp_path, argv, phrase) -> None:
    (tmp_path / "index").mkdir()
    argv = [a.format(output=tmp_path / "index", missing=tmp_path / "nothing") for a in argv]
    code, out, err = cli(*argv)
    assert code == 2 and not out and len(err.splitlines()) == 1 and phrase in err, err


@pytest.fixture(scope="module")
def embedded(tmp_path_factory) -> tuple[Path, Path, object, object]:
    """Two runs with the real model and a sink recorded in their config (run() never syncs:
    only `chunkline run` does)."""
    base = tmp_path_factory.mktemp("embedded")
    corpus, output = base / "corpus", base / "index"
    write_corpus(corpus, 6)
    overrides = (f"input.pattern={corpus}/**", f"output.path={output}", f"sink.to=lancedb://{base}/store")
    first = run(load_config(CONFIG, list(overrides)))
    with open(corpus / "doc002.md", "a", encoding="utf-8") as handle:
        handle.write("\n## Addendum\n\nThe dock charger now resets after a firmware update.\n")
    second = run(load_config(CONFIG, list(overrides)))
    assert first.published and second.published and second.counts["embedded"] > 0
    return corpus, output, first, second


def test_publish_says_to_sync_the_recorded_sink(embedded, tmp_path) -> None:
    _, output, first, _ = embedded
    copy = tmp_path / "index"
    shutil.copytree(output, copy)
    code, out, err = cli("publish", str(copy), first.run_id)
    assert code == 0, err
    assert f"chunkline sync {copy} --to <sink.to>" in out and "lancedb://" in out


def test_a_rerun_after_gc_reuses_every_vector(embedded, tmp_path) -> None:
    corpus, output, first, second = embedded
    copy = tmp_path / "index"
    shutil.copytree(output, copy)
    code, out, err = cli("gc", str(copy), "--keep", "1")
    assert code == 0, err
    # The first run's folder stays exactly when the kept run still lists a file of it (its
    # unchanged documents' rows, referenced rather than copied).
    referenced = {file.folder for table in ("chunks", "documents")
                  for file in live_files(second.run_dir, load_manifest(second.run_dir), table)}
    assert first.run_id in referenced
    assert (copy / first.run_id).exists() and (copy / second.run_id).exists()
    config = [f"input.pattern={corpus}/**", f"output.path={copy}"]
    carried = run(load_config(CONFIG, config))
    assert carried.counts["documents_carried"] == carried.counts["kept"]
    assert carried.counts["embedded"] == 0
    reused = run(load_config(CONFIG, [*config, "output.carry=false"]))
    assert reused.counts["reused"] == reused.counts["chunks"] and reused.counts["embedded"] == 0


def test_publish_to_a_sink_makes_the_store_answer_from_that_run(embedded, tmp_path) -> None:
    """The rollback with --to: LATEST names the older run and the store holds its rows (the
    addendum of the newer run gone), as `chunkline sync --check` then verifies."""
    import lancedb

    _, output, first, second = embedded
    copy, store = tmp_path / "index", tmp_path / "store"
    shutil.copytree(output, copy)
    assert cli("sync", str(copy), "--to", f"lancedb://{store}")[0] == 0  # the store holds LATEST
    def held() -> set[tuple[str, str]]:
        table = lancedb.connect(store).open_table("chunks").to_arrow()
        return set(zip(table.column("chunk_id").to_pylist(), table.column("text").to_pylist()))

    def chunks_of(run_id: str) -> set[tuple[str, str]]:
        table = run_table(copy / run_id, "chunks", ["chunk_id", "text"])
        return set(zip(table.column("chunk_id").to_pylist(), table.column("text").to_pylist()))

    assert held() == chunks_of(second.run_id) != chunks_of(first.run_id)
    code, out, err = cli("publish", str(copy), first.run_id, "--to", f"lancedb://{store}")
    assert code == 0, err
    assert latest(copy) == first.run_id and "chunkline sync" not in out
    assert held() == chunks_of(first.run_id)
    assert lancedb.connect(store).open_table("chunks").count_rows() == first.counts["chunks"]
    assert cli("sync", str(copy), "--to", f"lancedb://{store}", "--check")[0] == 0
