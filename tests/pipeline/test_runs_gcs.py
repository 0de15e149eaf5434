"""``chunkline runs``, ``publish`` and ``gc`` on a gs:// output, against the GCS emulator: two
real runs into a bucket (the second naming the first as ``output.previous``), built once; each
test works on its own copy of that output (``FileSystems.copy``), with what a killed run, a
held-back run, a killed publish or preflight and a live lease holder leave added by hand."""

from __future__ import annotations

import io
import json
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from apache_beam.io.filesystems import FileSystems

from chunkline.index.manifest import load_manifest
from chunkline.index.tables import listed_paths
from chunkline.pipeline.cli import main
from chunkline.pipeline.config import load_config
from chunkline.pipeline.lease import OutputLease
from chunkline.pipeline.run import run
from chunkline.pipeline.runs import collect
from tests.gcs_emulator import storage_emulator
from tests.pipeline.test_carry import write_corpus

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "local.yaml"
BUCKET = "chunkline-runs"
pytestmark = pytest.mark.slow

PENGUIN = "# Penguins\n\nA penguin colony nests on the iceberg beside the research station.\n"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def put(path: str, data: bytes) -> None:
    with FileSystems.create(path) as handle:
        handle.write(data)


def get(path: str) -> bytes:
    with FileSystems.open(path) as handle:
        return handle.read()


def objects(prefix: str) -> dict[str, int]:
    """Each object under ``prefix`` by its name relative to it, with its size."""
    found = FileSystems.match([f"{prefix}/**"])[0].metadata_list
    return {meta.path[len(prefix) + 1:]: meta.size_in_bytes for meta in found}


def run_objects(output: str) -> list[str]:
    """The output's objects but its Iceberg metadata (``_iceberg/``, which gc expires apart:
    tests/pipeline/test_iceberg_gcs.py)."""
    return [name for name in objects(output) if not name.startswith("_iceberg/")]


def latest(output: str) -> str:
    return get(f"{output}/LATEST").decode().strip()


def new_run_id() -> str:
    """A run id of chunkline.pipeline.plan.new_run_id's form, newer than every run built so far."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}Z-{'0' * 8}-{secrets.token_hex(3)}"


def copy_run(output: str, source: str, target: str, leave_out: str = "") -> None:
    names = [name for name in objects(f"{output}/{source}") if name != leave_out]
    FileSystems.copy([f"{output}/{source}/{n}" for n in names], [f"{output}/{target}/{n}" for n in names])


@dataclass(frozen=True)
class Built:
    output: str  # the template: each test works on its own copy
    older: Any  # RunSummary: complete, published before LATEST, holds penguin.md
    published: Any  # LATEST; its config names ``older`` as output.previous

    def copy(self) -> str:
        target = f"gs://{BUCKET}/copy-{secrets.token_hex(4)}"
        FileSystems.copy([f"{self.output}/"], [f"{target}/"])
        return target

    def add_killed(self, output: str) -> str:
        """What a SIGKILLed run leaves: a run prefix with shards and spill parts, no manifest."""
        run_id = new_run_id()
        copy_run(output, self.published.run_id, run_id, leave_out="manifest.json")
        put(f"{output}/{run_id}/_spill/chunks/0.part", b"x" * 1000)
        return run_id

    def add_held_back(self, output: str) -> str:
        """A run the publish guard held back (its manifest says so, as run.py writes it)."""
        run_id = new_run_id()
        copy_run(output, self.older.run_id, run_id, leave_out="manifest.json")
        manifest = json.loads(get(f"{output}/{self.older.run_id}/manifest.json"))
        manifest.update(run_id=run_id, held_back=["kept fell from 7 to 2 (-71%) against the LATEST run"])
        put(f"{output}/{run_id}/manifest.json", json.dumps(manifest).encode())
        return run_id


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    with storage_emulator(BUCKET):
        corpus = tmp_path_factory.mktemp("runs-gcs") / "corpus"
        write_corpus(corpus, 6)
        (corpus / "penguin.md").write_text(PENGUIN, encoding="utf-8")
        output = f"gs://{BUCKET}/index"

        def job(*overrides: str):
            return run(load_config(CONFIG, [f"input.pattern={corpus}/**", f"output.path={output}",
                                            "embed=null", *overrides]))

        older = job()
        (corpus / "penguin.md").unlink()
        published = job(f"output.previous={output}/{older.run_id}")
        assert older.published and published.published and latest(output) == published.run_id
        yield Built(output, older, published)


def download(remote: str, local: Path) -> None:
    for name in objects(remote):
        target = local / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(get(f"{remote}/{name}"))


def test_runs_lists_a_bucket_as_it_lists_a_local_copy(built, tmp_path) -> None:
    output = built.copy()
    killed, held = built.add_killed(output), built.add_held_back(output)
    failed = new_run_id()  # hand-made: a manifest cut short
    copy_run(output, built.older.run_id, failed, leave_out="manifest.json")
    put(f"{output}/{failed}/manifest.json", b'{"run_id": ')
    local = tmp_path / "index"
    download(output, local)

    code, found, err = cli("runs", output, "--json")
    assert code == 0 and not err, err
    rows = {row["run_id"]: row for row in json.loads(found)}
    assert {name: row["status"] for name, row in rows.items()} == {
        built.older.run_id: "complete", built.published.run_id: "LATEST", held: "held-back",
        failed: "failed", killed: "incomplete"}
    for name, row in rows.items():
        assert row["path"] == f"{output}/{name}"
        assert row["bytes"] == sum(objects(f"{output}/{name}").values()) > 0
    assert rows[built.published.run_id]["counts"] == {
        k: built.published.counts[k] for k in ("documents", "kept", "chunks")}

    # The local copy: the same rows and the same table, but for the paths named.
    code, found_here, _ = cli("runs", str(local), "--json")
    assert code == 0
    assert json.loads(found.replace(output, str(local))) == json.loads(found_here)
    table = cli("runs", output)
    assert (table[0], table[1].replace(output, str(local)), table[2]) == cli("runs", str(local))


def test_gc_keeps_the_run_latest_names_as_previous(built) -> None:
    code, out, err = cli("gc", built.output, "--keep", "0", "--dry-run")
    assert code == 0, err
    assert f"kept         {built.older.run_id}  LATEST's config names it as output.previous" in out
    assert f"kept         {built.published.run_id}  LATEST names it" in out
    assert "would remove" not in out and "in 0 entries" in out


def test_publish_moves_latest_to_an_earlier_run_and_back(built) -> None:
    output = built.copy()
    killed = built.add_killed(output)
    code, out, err = cli("publish", output, built.older.run_id)
    assert code == 0, err
    assert f"{output}/LATEST: {built.published.run_id} -> {built.older.run_id}" in out
    assert latest(output) == built.older.run_id
    code, found, _ = cli("runs", output, "--json")
    statuses = {row["run_id"]: row["status"] for row in json.loads(found)}
    assert statuses == {built.older.run_id: "LATEST", built.published.run_id: "complete", killed: "incomplete"}
    assert not any(name.startswith((".LATEST.", ".lease")) for name in objects(output))
    assert cli("publish", output, built.older.run_id)[1].endswith("nothing changed\n")
    code, out, err = cli("publish", output, built.published.run_id)
    assert code == 0 and latest(output) == built.published.run_id, err

    FileSystems.delete([f"{output}/{built.older.run_id}/chunks-00001-of-00004.parquet"])
    for run_id, phrase in [(killed, "is incomplete"), ("20260101T000000Z-00000000-000000", "does not exist"),
                           (built.older.run_id,
                            f"is damaged: {built.older.run_id}/chunks-00001-of-00004.parquet is missing")]:
        code, out, err = cli("publish", output, run_id)
        assert code == 2 and not out and len(err.splitlines()) == 1 and phrase in err, err
    assert latest(output) == built.published.run_id


def test_gc_under_its_lease_removes_runs_and_leftovers(built) -> None:
    output = built.copy()
    killed, held = built.add_killed(output), built.add_held_back(output)
    staged = f".LATEST.{held}"
    # hand-made: publish writes a bucket's LATEST in place; this one came up with a local output
    put(f"{output}/{staged}", f"{held}\n".encode())
    probe = f".probe-{new_run_id()}"
    put(f"{output}/{probe}", b"chunkline write probe\n")  # hand-made: a preflight killed mid-probe
    probe_written = time.time()
    put(f"{output}/{built.published.run_id}/_spill/chunks/1.part", b"y" * 500)
    kept = objects(f"{output}/{built.published.run_id}")
    # The published run keeps its unchanged rows in the older run's files (merge-on-read): of
    # that folder gc keeps exactly the files the published run lists, the rest (its manifest
    # among them) goes.
    published = f"{output}/{built.published.run_id}"
    listed = set(listed_paths(published, load_manifest(published)))
    older = [f"{built.older.run_id}/{n}" for n in objects(f"{output}/{built.older.run_id}")
             if f"{built.older.run_id}/{n}" in listed]
    assert older
    sizes = {name: sum(objects(f"{output}/{name}").values()) for name in (killed, held)}
    sizes[built.older.run_id] = sum(size for n, size in objects(f"{output}/{built.older.run_id}").items()
                                    if f"{built.older.run_id}/{n}" not in listed)

    code, out, err = cli("gc", output, "--keep", "1")
    assert code == 0, err
    removed = {line.split()[1]: line for line in out.splitlines() if line.startswith("removed")}
    assert set(removed) == {killed, held, staged, f"{built.published.run_id}/_spill", built.older.run_id}
    assert f"{built.published.run_id}  LATEST names it" in out
    total = sum(sizes.values()) + len(f"{held}\n") + 500
    assert f"({total:,} bytes) in 5 entries" in out
    # The probe is younger than the lease timeout: a preflight may be writing it now.
    assert sorted(run_objects(output)) == sorted(
        ["LATEST", probe, *older, *(f"{built.published.run_id}/{n}" for n in kept if not n.startswith("_spill/"))])
    assert latest(output) == built.published.run_id

    # An object's update time cannot be set back: a lease timeout of 1 s makes the probe old.
    time.sleep(max(0.0, 1.2 - (time.time() - probe_written)))
    result = collect(output, 1, timeout=1.0)
    assert [r.name for r in result.removed] == [probe]
    assert sorted(run_objects(output)) == sorted(
        ["LATEST", *older, *(f"{built.published.run_id}/{n}" for n in kept if not n.startswith("_spill/"))])


def test_gc_after_a_rollback_never_removes_the_published_run(built) -> None:
    output = built.copy()
    assert cli("publish", output, built.older.run_id)[0] == 0
    code, out, err = cli("gc", output, "--keep", "1")
    assert code == 0 and "in 0 entries" in out, err
    code, out, err = cli("gc", output, "--keep", "0")
    assert code == 0, err
    assert [line.split()[1] for line in out.splitlines() if line.startswith("removed")] == [built.published.run_id]
    assert {name.split("/")[0] for name in run_objects(output)} == {"LATEST", built.older.run_id}
    # Every file the published run lists is still there, rows and all: publish verifies them.
    assert cli("publish", output, built.older.run_id)[1].endswith("nothing changed\n")


def test_gc_beside_a_live_run_plans_around_it(built) -> None:
    # Only the plan: the emulator ignores request preconditions (ifGenerationMatch), so it
    # cannot refuse gc the lease a live run holds; on Cloud Storage that compare-and-swap does.
    output = built.copy()
    running = new_run_id()
    staged = f".LATEST.{running}"
    put(f"{output}/{staged}", f"{running}\n".encode())  # without the lease: may be the live run's
    lease = OutputLease(output, running, timeout=600)
    lease.acquire()
    try:
        put(f"{output}/{running}/_spill/chunks/0.part", b"x" * 1000)
        put(f"{output}/{running}/chunks-00000-of-00004.parquet", b"being written")
        code, found, _ = cli("runs", output, "--json")
        rows = {row["run_id"]: row for row in json.loads(found)}
        assert rows[running]["status"] == "running" and "pid" in rows[running]["reasons"][0]
        assert rows[running]["bytes"] == 1000 + len(b"being written")
        names = set(objects(output))
        code, out, err = cli("gc", output, "--keep", "1", "--dry-run")
        assert code == 0, err
        planned = [line.split()[2] for line in out.splitlines() if line.startswith("would remove")]
        # Of the older run, all but its files the published run lists (its unchanged rows).
        assert planned == [built.older.run_id]
        assert f"complete, all but the files run {built.published.run_id} lists" in out
        assert f"kept         {running}  writing: run {running}" in out
        assert set(objects(output)) == names
    finally:
        lease.release()


@pytest.mark.parametrize("argv, phrase", [
    (["runs", "gs://{bucket}/nothing"], "no such output"),
    (["gc", "gs://{bucket}/nothing", "--keep", "1"], "no such output"),
    (["publish", "gs://{bucket}/nothing", "20260101T000000Z-00000000-000000"], "no such output"),
    (["runs", "gs://no-such-bucket-here/index"], "cannot be listed"),
])
def test_usage_errors_on_a_bucket_are_one_line(built, argv, phrase) -> None:
    code, out, err = cli(*(a.format(bucket=BUCKET) for a in argv))
    assert code == 2 and not out and len(err.splitlines()) == 1 and phrase in err, err
    assert "Traceback" not in err
