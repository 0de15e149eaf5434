"""Runner configs: the Flink and Dataflow YAMLs build valid options and a graph those runners
accept (they cannot run here), and the portable path runs for real, with LOOPBACK workers
(tests/pipeline/test_pipeline_e2e.py) and with an EXTERNAL worker pool started from this venv."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    WorkerOptions,
)
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator

from chunkline.embedder import EmbedOptions, model_info
from chunkline.pipeline.build import build
from chunkline.pipeline.plan import Plan
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.gcs_emulator import free_port, wait_for_port

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@contextlib.contextmanager
def worker_pool(cwd: Path) -> Iterator[int]:
    """Beam's EXTERNAL worker pool, started in ``cwd``; yields its port."""
    port = free_port()
    # The pool starts each worker as a bare `python`: this venv's must come first on PATH.
    venv_bin = str(Path(sys.executable).parent)
    pool = subprocess.Popen(
        [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={port}"],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "")},
    )
    try:
        wait_for_port(port, pool, "worker pool")
        yield port
    finally:
        pool.terminate()
        pool.wait(timeout=30)


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
def test_external_worker_pool_runs_the_job(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("guide.md",):
        (corpus / name).write_text((ROOT / "examples" / name).read_text())
    (corpus / "notes.txt").write_text("Plain notes about robot docking.\n\nAnother paragraph.\n")
    with worker_pool(ROOT) as port:
        external = load_config(ROOT / "configs" / "portable.yaml",
                               [f"input.pattern={corpus}/**", f"output.path={tmp_path / 'ext'}"])
        summary = run(external, ["--environment_type=EXTERNAL", f"--environment_config=localhost:{port}"])
    local = run(load_config(ROOT / "configs" / "local.yaml",
                            [f"input.pattern={corpus}/**", f"output.path={tmp_path / 'local'}"]))
    assert summary.reconciled and summary.counts["documents"] == 2

    def chunk_rows(run_dir: str) -> list[dict]:
        rows = [r for f in sorted(Path(run_dir).glob("chunks-*.parquet")) for r in pq.read_table(f).to_pylist()]
        return sorted(({k: v for k, v in r.items() if k != "embedding"} for r in rows), key=lambda r: r["chunk_id"])

    assert chunk_rows(summary.run_dir) == chunk_rows(local.run_dir)


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
