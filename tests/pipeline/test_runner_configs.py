"""Runner configs: the Flink and Dataflow YAMLs build valid options and a graph those runners
accept (they cannot run here), and the portable path runs for real, with LOOPBACK workers
(tests/pipeline/test_pipeline_e2e.py) and with an EXTERNAL worker pool started from this venv,
in its own directory and, for the gs:// runs, with no disk it shares with the driver."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    WorkerOptions,
)
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator

from chunkline.embedder import EmbedOptions, model_info
from chunkline.index.manifest import load_manifest
from chunkline.index.tables import read_table, table_names
from chunkline.pipeline.build import build
from chunkline.pipeline.plan import Plan
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.gcs_emulator import free_port, storage_emulator, upload_tree, wait_for_port
from tests.pipeline.test_carry import write_corpus

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
BUCKET = "chunkline-external"


# Run as the pool's command: a fresh tmpfs over each folder named (in order, so a later one may
# lie inside an earlier one), then the pool in the last. Under `unshare --mount` the mounts are
# this process tree's alone (mount_namespaces(7)); the driver and the rest of the host keep theirs.
# The installed code ($KEEP: the checkout and its venv, which a CI clone may hold under /tmp) is
# bound back at its path, as on a worker built from the same image; the driver's files are not.
PRIVATE_DISK = """
stage=/run/chunkline-pool-$$; i=0
for k in $KEEP; do i=$((i+1)); mkdir -p "$stage/$i" && mount --bind "$k" "$stage/$i" || exit 1; done
for d in "$@"; do mkdir -p "$d" && mount -t tmpfs chunkline-worker "$d" || exit 1; done
i=0
for k in $KEEP; do i=$((i+1)); mkdir -p "$k" && mount --bind "$stage/$i" "$k" && umount "$stage/$i" || exit 1; done
rm -rf "$stage"
cd "$d" && exec "$0" -m apache_beam.runners.worker.worker_pool_main --service_port="$PORT"
"""


@contextlib.contextmanager
def worker_pool(cwd: Path, *, private: bool = False) -> Iterator[int]:
    """Beam's EXTERNAL worker pool, started in ``cwd``; yields its port. ``private``: the pool
    and its workers run in their own mount namespace with fresh tmpfs over /tmp and ``cwd``, so
    no file the driver writes under either (or anywhere under this test's folders) is visible
    to a worker: they share the network (the job server, the storage emulator) and the
    installed code, as workers on another machine built from the same image would."""
    port = free_port()
    # The pool starts each worker as a bare `python`: this venv's must come first on PATH.
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""), "PORT": str(port)}
    command = [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={port}"]
    if private:
        hidden = ["/tmp", *([] if cwd.is_relative_to("/tmp") else [str(cwd.parent)]), str(cwd)]
        installed = {str(ROOT), sys.prefix}
        env["KEEP"] = " ".join(sorted(k for k in installed if not any(
            k != other and Path(k).is_relative_to(other) for other in installed)))
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE_DISK,
                   sys.executable, *hidden]
    else:
        cwd.mkdir(parents=True, exist_ok=True)
    errors = tempfile.TemporaryFile()  # why a pool did not start (unshare refused, say) is said
    pool = subprocess.Popen(command, cwd=None if private else cwd, stdout=subprocess.DEVNULL,
                            stderr=errors, env=env)
    try:
        try:
            wait_for_port(port, pool, "worker pool")
        except RuntimeError as error:
            errors.seek(0)
            raise RuntimeError(f"{error}: {errors.read()[-2000:].decode(errors='replace')}") from None
        if private:  # the pool (exec'd in place of unshare and sh) sees its own disks, we do not
            pool_mounts = {tuple(line.split()[:2]) for line in Path(f"/proc/{pool.pid}/mounts").read_text().splitlines()}
            assert {("chunkline-worker", folder) for folder in hidden} <= pool_mounts
            assert "chunkline-worker" not in Path("/proc/self/mounts").read_text()
        yield port
    finally:
        pool.terminate()
        pool.wait(timeout=30)
        errors.close()


def options_of(name: str, *extra: str) -> PipelineOptions:
    config = load_config(ROOT / "configs" / name)
    return PipelineOptions(list(config.runner.options) + list(extra))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_is_valid_and_every_flag_is_known(path: Path) -> None:
    config = load_config(path)
    options = PipelineOptions(list(config.runner.options))
    known = options.get_all_options(drop_default=True)
    everything = options.get_all_options(drop_default=True, retain_unknown_options=True)
    assert set(everything) == set(known), f"unknown Beam flags in {path.name}"


def test_dataflow_config_passes_beams_own_validation() -> None:
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    # dry_run: Beam skips its bucket checks, which would call Cloud Storage.
    options = options_of("dataflow.yaml", "--dry_run=True")
    assert PipelineOptionsValidator(options, DataflowRunner()).validate() == []
    cloud = options.view_as(GoogleCloudOptions)
    assert cloud.project and cloud.region and cloud.temp_location.startswith("gs://")
    assert cloud.staging_location.startswith("gs://")
    worker = options.view_as(WorkerOptions)
    assert worker.machine_type and worker.sdk_container_image
    # The code ships as an installed package in the container, never as a pickled session.
    assert options.view_as(SetupOptions).save_main_session is False


def test_flink_config_names_master_parallelism_and_worker_image() -> None:
    options = options_of("flink.yaml")
    flink = options.view_as(FlinkRunnerOptions)
    assert flink.flink_master and flink.parallelism >= 1
    portable = options.view_as(PortableOptions)
    assert portable.environment_type == "DOCKER" and portable.environment_config


@pytest.mark.parametrize("name", ["flink.yaml", "dataflow.yaml"])
def test_graph_builds_for_the_cluster_runners(name: str) -> None:
    config = load_config(ROOT / "configs" / name)
    _, dim, max_seq, special = model_info(EmbedOptions())
    plan = Plan("gs://your-bucket/index/run", "hf:all-MiniLM-L6-v2", max_seq - special - 32, dim)
    # dry_run: Beam's option validation would otherwise check the (placeholder) buckets online.
    options = PipelineOptions(list(config.runner.options) + ["--dry_run=True"])
    pipeline = beam.Pipeline(runner=config.runner.name, options=options)
    build(pipeline, config, plan)
    # The portable form is what a Flink job server or Dataflow receives.
    proto = pipeline.to_runner_api()
    labels = {t.unique_name for t in proto.components.transforms.values()}
    for stage in ("Read", "Dedupe", "Split", "Embed", "WriteChunks", "WriteDocuments", "WriteRejected"):
        assert stage in labels


@pytest.mark.slow
@pytest.mark.timeout(600)  # a worker that cannot start leaves the job waiting, not failing
def test_external_workers_without_the_drivers_disk_match_the_in_process_runner(tmp_path) -> None:
    """Issue 49's "no shared disk": EXTERNAL workers in their own mount namespace, with fresh
    tmpfs over /tmp and their working directory, so that nothing the driver writes locally
    reaches them; corpus and index on the GCS emulator. A first run and a rerun with one
    document edited, with the default model, give the tables the in-process runner gives, read
    back through the manifests, vectors within 1e-5. (The model's first load is most of the
    test's time: with ``embed: null`` it takes a third, but then no worker would load a model.)"""
    corpus = tmp_path / "corpus"
    write_corpus(corpus, 6)  # doc000-doc005 and doc030, an exact duplicate of doc005
    with storage_emulator(BUCKET):
        upload_tree(corpus, f"gs://{BUCKET}/corpus")
        with worker_pool(tmp_path / "pool", private=True) as port:
            def both() -> tuple[Any, Any]:
                settings = [f"input.pattern=gs://{BUCKET}/corpus/**"]
                external = run(load_config(ROOT / "configs" / "portable.yaml",
                                           [*settings, f"output.path=gs://{BUCKET}/index"]),
                               ["--environment_type=EXTERNAL", f"--environment_config=localhost:{port}"])
                local = run(load_config(ROOT / "configs" / "local.yaml",
                                        [*settings, f"output.path=gs://{BUCKET}/in-process"]))
                assert external.reconciled and external.published, external.problems
                assert local.reconciled and local.published, local.problems
                assert_same_tables(external.run_dir, local.run_dir)
                return external, local

            first, _ = both()
            assert first.counts["documents"] == 7 and first.counts["duplicate"] == 1
            assert first.counts["embedded"] == first.counts["chunks"] > 0
            edited = (corpus / "doc002.md").read_text(encoding="utf-8").replace("# Manual 002", "# Manual two")
            with FileSystems.create(f"gs://{BUCKET}/corpus/doc002.md") as handle:
                handle.write(edited.encode())
            again, local_again = both()
            # The workers read the first run's rows and memo from the bucket: the unchanged
            # documents were carried and their per-text results recalled, the edited one computed.
            assert again.counts["chunks_carried"] == local_again.counts["chunks_carried"] > 0
            memo = load_manifest(again.run_dir).memo
            print("memo of the EXTERNAL rerun:", memo)
            assert memo is not None and memo == load_manifest(local_again.run_dir).memo
            assert memo["signature"] == {"recalled": 6, "computed": 1}
            assert 0 < again.counts["embedded"] < first.counts["embedded"]


def assert_same_tables(run_dir: str, expected_dir: str, *, min_cosine: float = 0.9995) -> None:
    """Every table of the two runs, read through their manifests, holds the same rows (float32
    vectors within 1e-5; bfloat16 ones in direction, cosine >= ``min_cosine``: other workers
    form other passes, and a bfloat16 pass rounds differently with its padded shape)."""
    manifest, expected = load_manifest(run_dir), load_manifest(expected_dir)
    assert table_names(manifest) == table_names(expected)
    float32 = manifest.model is not None and manifest.model.dtype == "float32"
    for table in ("chunks", "documents", "terms"):
        rows, want = (sorted_rows(read_table(d, m, table)) for d, m in ((run_dir, manifest), (expected_dir, expected)))
        assert [drop(r, "embedding") for r in rows] == [drop(r, "embedding") for r in want], table
        for row, other in zip(rows, want):
            if row.get("embedding") is not None or other.get("embedding") is not None:
                a, b = np.asarray(row["embedding"], np.float32), np.asarray(other["embedding"], np.float32)
                assert np.allclose(a, b, atol=1e-5, rtol=0) if float32 else float(a @ b) >= min_cosine, row["chunk_id"]


def sorted_rows(table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: json.dumps(drop(r, "embedding"), sort_keys=True, default=str))


def drop(row: dict, key: str) -> dict:
    return {k: v for k, v in row.items() if k != key}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_relative_paths_reach_workers_that_run_in_another_directory(tmp_path, monkeypatch) -> None:
    """The README's EXTERNAL recipe with relative paths (configs/portable.yaml's `out`): the
    pool's workers run in their own directory, so a relative output was written there and the
    driver then failed reading its own run (issue 49). Local paths are made absolute first."""
    driver, pool_dir = tmp_path / "driver", tmp_path / "pool"
    (driver / "corpus").mkdir(parents=True)
    pool_dir.mkdir()
    (driver / "corpus" / "guide.md").write_text((ROOT / "examples" / "guide.md").read_text())
    (driver / "corpus" / "notes.txt").write_text("Plain notes about robot docking.\n\nMore.\n")
    monkeypatch.chdir(driver)
    with worker_pool(pool_dir) as port:
        summary = run(load_config(ROOT / "configs" / "portable.yaml",
                                  ["input.pattern=corpus/**", "output.path=out", "embed=null"]),
                      ["--environment_type=EXTERNAL", f"--environment_config=localhost:{port}"])
    assert summary.reconciled and summary.published and summary.counts["documents"] == 2
    assert Path(summary.run_dir) == driver / "out" / Path(summary.run_dir).name
    assert not (pool_dir / "out").exists()
    from chunkline.pipeline.summary import format_summary

    assert "(named in out/LATEST)" in format_summary(summary)


def test_worker_processes_start_with_few_malloc_arenas(monkeypatch) -> None:
    # A process started during the job (as the runner starts its SDK workers) inherits
    # MALLOC_ARENA_MAX; afterwards the environment is as it was, and a value the user set wins.
    from chunkline.pipeline.run import WORKER_MALLOC_ARENAS, _worker_malloc_arenas

    def child_value() -> str:
        return subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('MALLOC_ARENA_MAX'))"],
                              capture_output=True, text=True, check=True).stdout.strip()

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    with _worker_malloc_arenas():
        assert child_value() == WORKER_MALLOC_ARENAS
    assert "MALLOC_ARENA_MAX" not in os.environ
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    with _worker_malloc_arenas():
        assert child_value() == "8"
    assert os.environ["MALLOC_ARENA_MAX"] == "8"
