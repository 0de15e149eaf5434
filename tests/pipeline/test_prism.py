"""Prism, Beam's portable runner written in Go (``configs/prism.yaml``), run for real: a first run
and a rerun (one document edited, one deleted, one near duplicate added) with LOOPBACK workers
through the ``chunkline run`` command, and with an EXTERNAL worker pool that shares no disk with
the driver (corpus and index on the storage emulator, as
``tests/pipeline/test_runner_configs.py`` does for Beam's Python job service), each giving the
in-process runner's chunks and documents tables. Prism fuses and bundles on its own, shuffles
between stages itself and reports metrics once the job ends: what FnApiRunner hides.

And the lines a user gets when no Prism can run: no binary, ``--prism_location`` naming a missing
file or a URL. chunkline never lets Beam download Prism.

Skipped where no Prism binary is found: ``make setup`` builds one when Go is installed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from apache_beam.io.filesystems import FileSystems

from chunkline.index.manifest import load_manifest
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from chunkline.pipeline.runners import RunnerUnavailable, find_prism, job_runner, runner_flags
from chunkline.pipeline.summary import RunSummary
from tests.gcs_emulator import storage_emulator, upload_tree
from tests.pipeline.test_carry import write_corpus
from tests.pipeline.test_runner_configs import assert_same_tables, worker_pool

pytestmark = pytest.mark.slow  # runs Beam pipelines (make test-fast skips it)

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "chunkline-prism"
needs_prism = pytest.mark.skipif(find_prism() is None, reason="no Prism binary in the venv or on PATH: "
                                 "`make setup` builds it when Go is installed")
# Vectors made by other passes (Prism bundles the chunks differently, so a bfloat16 pass pads
# them to another shape and rounds differently) agree in direction, not to the last bit.
MIN_COSINE = 0.9999
# A small corpus: 8 manuals and an exact duplicate (tests/pipeline/test_carry.py), embedded.
DOCUMENTS = 8


def change(corpus: Path) -> None:
    """One document edited, one deleted, one near duplicate (of an unchanged one) added."""
    edited = corpus / "doc002.md"
    edited.write_text(edited.read_text(encoding="utf-8").replace("# Manual 002", "# Manual two"),
                      encoding="utf-8")
    (corpus / "doc004.md").unlink()
    text = (corpus / "doc006.md").read_text(encoding="utf-8")
    (corpus / "doc006b.md").write_text(text.replace("# Manual 006", "# Manual 006 (copy)"), encoding="utf-8")


def cli(*argv: str) -> tuple[int, str, str]:
    """``chunkline run ...`` as a user runs it, in its own process (its logging its own)."""
    result = subprocess.run([sys.executable, "-m", "chunkline.pipeline.cli", "run", *argv],
                            capture_output=True, text=True, timeout=540)
    return result.returncode, result.stdout, result.stderr


# Positions the model computed, padding included: each pass pads to its longest text, and
# Prism's bundles hold other chunks together than the in-process runner's.
BATCHING = frozenset({"tokens_padded"})


def same_counts(counts: dict[str, int], expected: dict[str, int]) -> None:
    assert set(counts) == set(expected)
    assert {k: v for k, v in counts.items() if k not in BATCHING} == \
        {k: v for k, v in expected.items() if k not in BATCHING}


def check_same(run_dir: str, expected: RunSummary) -> None:
    """The run in ``run_dir`` (Prism's) was published with the counts and the tables of
    ``expected`` (the in-process runner's), its counts checked against Prism's metrics."""
    manifest = load_manifest(run_dir)
    assert manifest.runner == "PrismRunner" and manifest.reconciled, manifest.problems
    assert not manifest.unverified, manifest.unverified
    same_counts(dict(manifest.counts), expected.counts)
    assert_same_tables(run_dir, expected.run_dir, min_cosine=MIN_COSINE)


def progress_done(err: str) -> dict[str, str]:
    """The progress display's last look (off a terminal: one log line per row, ``, done]``)."""
    done = {}
    for line in err.splitlines():
        if line.endswith(", done]") and "chunkline.progress " in line:
            label, rest = line.split("chunkline.progress ", 1)[1].split(None, 1)
            done[label] = rest.rsplit("  [", 1)[0]
    return done


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """First run and rerun of one corpus on local disk: in-process, and on Prism with LOOPBACK
    workers through ``chunkline run --config configs/prism.yaml`` and no other flag. The
    command's output and its progress lines (off a terminal: a log line per row) come along."""
    base = tmp_path_factory.mktemp("prism-local")
    corpus = base / "corpus"
    write_corpus(corpus, DOCUMENTS)
    found: dict[str, Any] = {}
    for step in ("first", "rerun"):
        if step == "rerun":
            change(corpus)
        found[step, "in-process"] = run(load_config(ROOT / "configs" / "local.yaml", [
            f"input.pattern={corpus}/**", f"output.path={base / 'in-process'}"]))
        found[step, "prism"] = cli("--config", str(ROOT / "configs" / "prism.yaml"), "--input", f"{corpus}/**",
                                   "--output", str(base / "prism"), "--progress-interval", "1000")
    yield found


@needs_prism
@pytest.mark.timeout(600)
@pytest.mark.parametrize("step", ["first", "rerun"])
def test_prism_with_loopback_workers_gives_the_in_process_tables(local_runs, step: str) -> None:
    local = local_runs[step, "in-process"]
    code, out, err = local_runs[step, "prism"]
    assert code == 0, err
    assert " on PrismRunner: " in out
    check_same(out.split("output", 1)[1].split()[0], local)
    counts = local.counts
    if step == "first":
        assert counts["documents"] == DOCUMENTS + 1 and counts["duplicate"] == 1
        assert counts["embedded"] == counts["chunks"] > 0
    else:  # the rerun computes the change alone: the edited document (the near twin of doc006
        # is a duplicate, doc006 surviving by its smaller id)
        assert counts["documents_carried"] == DOCUMENTS - 2 and counts["documents_changed"] == 1
        assert counts["documents_new"] == 0 and counts["duplicate"] == 2
        assert 0 < counts["embedded"] < counts["chunks"]
    # The display's last look says what the summary says: the stages' tallies, which Prism's
    # LOOPBACK workers (in the driver's process) make as the in-process runner's do.
    done = progress_done(err)
    carried, chunks_carried = counts.get("documents_carried", 0), counts.get("chunks_carried", 0)
    assert done["documents"] == f"read {counts['read']:,}, kept {counts['kept']:,}, carried {carried:,}"
    assert done["chunks"] == (f"made {counts['chunks']:,}, carried {chunks_carried:,}, "
                              f"embedded {counts['embedded']:,}, reused {counts['reused']:,}")
    assert f"read {counts['read']} = kept {counts['kept']}" in out


@needs_prism
@pytest.mark.timeout(600)  # a worker that cannot start leaves the job waiting, not failing
def test_prism_with_external_workers_without_the_drivers_disk(tmp_path) -> None:
    """EXTERNAL workers in their own mount namespace (fresh tmpfs over /tmp and their working
    directory): they read the corpus and write the index on the storage emulator, the previous
    run's rows and memo included, and side inputs reach them from Prism, not from this process.
    Their tallies never reach the driver: the display's last look is the run's counts."""
    corpus = tmp_path / "corpus"
    write_corpus(corpus, DOCUMENTS)
    with storage_emulator(BUCKET):  # its address in this process's environment: the command's too
        upload_tree(corpus, f"gs://{BUCKET}/corpus")
        with worker_pool(tmp_path / "pool", private=True) as port:
            def both() -> dict[str, int]:
                settings = [f"input.pattern=gs://{BUCKET}/corpus/**"]
                code, out, err = cli("--config", str(ROOT / "configs" / "prism.yaml"), "--input", f"gs://{BUCKET}/corpus/**",
                                     "--output", f"gs://{BUCKET}/external", "--progress-interval", "1000", "--",
                                     "--environment_type=EXTERNAL", f"--environment_config=localhost:{port}")
                assert code == 0, err
                local = run(load_config(ROOT / "configs" / "local.yaml",
                                        [*settings, f"output.path=gs://{BUCKET}/in-process"]))
                check_same(out.split("output", 1)[1].split()[0], local)
                counts = local.counts
                done = progress_done(err)
                assert "files" not in done  # what the match stage tallied stayed with the workers
                assert done["documents"] == (f"read {counts['read']:,}, kept {counts['kept']:,}, "
                                             f"carried {counts.get('documents_carried', 0):,}")
                assert done["chunks"].startswith(f"made {counts['chunks']:,}, ")
                return counts

            first = both()
            assert first["documents"] == DOCUMENTS + 1 and first["duplicate"] == 1
            change(corpus)
            FileSystems.delete([f"gs://{BUCKET}/corpus/doc004.md"])
            upload_tree(corpus, f"gs://{BUCKET}/corpus")
            again = both()
            assert again["documents_carried"] == DOCUMENTS - 2 and again["duplicate"] == 2
            assert 0 < again["embedded"] < first["embedded"]


def test_a_missing_prism_location_is_one_line_without_a_download(tmp_path) -> None:
    """The command ends in one line, exit 2, within 30 s (before the model loads), and Beam
    never reached for its download cache (~/.apache_beam/cache/prism)."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "chunkline.pipeline.cli", "run", "--config", str(ROOT / "configs" / "prism.yaml"),
         "--output", str(tmp_path / "out"), "--", f"--prism_location={tmp_path / 'no-such-prism'}"],
        capture_output=True, text=True, env={**os.environ, "HOME": str(tmp_path)}, timeout=60)
    assert time.monotonic() - started < 30
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert "no such file" in result.stderr and "make setup" in result.stderr
    assert not (tmp_path / ".apache_beam").exists() and not (tmp_path / "out").exists()


def test_no_prism_anywhere_says_how_to_get_one(tmp_path, monkeypatch) -> None:
    # Another environment (its bin without prism) and a PATH without one.
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_prism() is None
    with pytest.raises(RunnerUnavailable, match="make setup builds it|`make setup`") as error:
        job_runner("PrismRunner", [])
    assert "\n" not in str(error.value) and "go install github.com/apache/beam" in str(error.value)
    # A binary on PATH is found, and named to Beam.
    prism = tmp_path / "prism"
    prism.write_text("#!/bin/sh\n")
    prism.chmod(0o755)
    assert runner_flags("PrismRunner", ["--x=1"]) == ["--x=1", f"--prism_location={prism}"]


def test_a_prism_url_is_refused_never_fetched() -> None:
    url = "https://github.com/apache/beam/releases/tag/v2.78.0"
    with pytest.raises(RunnerUnavailable, match="never downloads"):
        runner_flags("PrismRunner", [f"--prism_location={url}"])


def test_direct_runner_runs_in_process() -> None:
    # Beam's DirectRunner would try Prism first (and download it): chunkline's runs in-process.
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    runner, options = job_runner("DirectRunner", ["--direct_num_workers=2"])
    assert isinstance(runner, FnApiRunner)
    assert options.get_all_options()["direct_num_workers"] == 2
