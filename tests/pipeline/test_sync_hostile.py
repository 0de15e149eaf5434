"""``chunkline run`` and ``chunkline sync`` used as a hostile but realistic operator would: a
password in the sink URI, odd metadata, a path that is a file, someone else's table, a run the
guard held back, a damaged shard, Ctrl-C. Each ends in the exit status of ``chunkline.pipeline.exits``
and one line naming what is wrong, never a traceback and never a secret."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import lancedb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.pipeline import sync_cases as cases
from tests.pipeline.conftest import SECRET

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_a_run_whose_sink_fails_is_published_and_says_so_with_its_own_status(odd_run) -> None:
    assert odd_run.code == 3, odd_run.err
    assert Path(odd_run.run_dir, "manifest.json").exists()
    assert "is published, but the sync into the sink failed" in odd_run.err
    assert "Traceback" not in odd_run.err


def test_no_file_the_run_writes_holds_the_password(odd_run) -> None:
    assert SECRET not in odd_run.out and SECRET not in odd_run.err
    files = [p for p in odd_run.output.rglob("*") if p.is_file()]
    assert any(p.name == "manifest.json" for p in files) and any(p.name == "report.html" for p in files)
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
    sink = json.loads(Path(odd_run.run_dir, "manifest.json").read_text())["config"]["sink"]["to"]
    assert sink.startswith("postgresql://postgres:***@/postgres?") and sink.endswith("password=***")


def test_metadata_over_the_limits_is_rejected_with_the_reason(odd_run) -> None:
    rejected = {r["doc_id"]: r["reason"] for f in Path(odd_run.run_dir).glob("rejected-*.parquet")
                for r in pq.read_table(f).to_pylist()}
    assert "nested" in rejected["tickets.jsonl#L3"] and "32" in rejected["tickets.jsonl#L3"]
    assert "bytes" in rejected["tickets.jsonl#L4"]


def test_odd_metadata_syncs_into_lancedb(odd_run, tmp_path) -> None:
    cases.check_odd_metadata_syncs(f"{tmp_path}/lance", odd_run)


@pytest.fixture
def demo_copy(sync_runs, tmp_path) -> Path:
    copy = tmp_path / "demo"
    shutil.copytree(sync_runs.demo, copy)
    return copy


def test_a_store_path_that_is_a_file_or_under_one_is_one_line(sync_runs, tmp_path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    for target in (afile, afile / "below"):
        code, _, err = cases.cli(str(sync_runs.demo), "--to", str(target))
        assert code == 2 and "is a file, not a directory" in err and "Traceback" not in err, err


def test_someone_elses_chunks_table_is_refused_by_name(sync_runs, tmp_path) -> None:
    lancedb.connect(tmp_path / "theirs").create_table("chunks", pa.table({"id": [1, 2], "name": ["a", "b"]}))
    code, _, err = cases.cli(str(sync_runs.demo), "--to", str(tmp_path / "theirs"))
    assert code == 2 and "'chunks'" in err and "not a table chunkline wrote" in err, err
    code, _, err = cases.cli(str(sync_runs.demo), "--to", str(tmp_path / "theirs"), "--check")
    assert code == 2 and "not a table chunkline wrote" in err, err
    assert lancedb.connect(tmp_path / "theirs").open_table("chunks").count_rows() == 2


def test_uri_mistakes_are_named(sync_runs, tmp_path) -> None:
    code, _, err = cases.cli(str(sync_runs.demo), "--to", "lancedb://relative/dir")
    assert code == 2 and "absolute directory" in err
    code, _, err = cases.cli(str(sync_runs.demo), "--to", f"{tmp_path}/l?table={'t' * 70}")
    assert code == 2 and "70 characters, at most 48" in err


def test_a_relative_path_is_shown_absolute(sync_runs, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cases.cli(str(sync_runs.demo), "--to", "rel/lance")
    assert code == 0, err
    assert f"at {tmp_path}/rel/lance" in out


def test_a_held_back_run_or_another_outputs_run_needs_saying_so(demo_copy, tmp_path) -> None:
    good = (demo_copy / "LATEST").read_text().strip()
    held = demo_copy / "20991231T000000Z-heldback-000000"
    shutil.copytree(demo_copy / good, held)
    manifest = json.loads((held / "manifest.json").read_text())
    manifest.update(run_id=held.name, held_back=["kept fell from 67 to 3 (-96%)"])
    (held / "manifest.json").write_text(json.dumps(manifest))
    store = str(tmp_path / "lance")
    code, _, err = cases.cli(str(demo_copy), "--to", store, "--run", held.name)
    assert code == 2 and "was not published" in err and "--unpublished" in err and good in err
    assert not Path(store).exists()
    code, out, err = cases.cli(str(demo_copy), "--to", store, "--run", held.name, "--unpublished")
    assert code == 0 and "which was not published" in err and f"synced run {held.name}" in out, err
    code, _, err = cases.cli(str(demo_copy), "--to", store, "--run", f"../other/{good}")
    assert code == 2 and "--run takes the id of a run" in err


def test_a_truncated_shard_is_named(demo_copy, tmp_path) -> None:
    run_dir = demo_copy / (demo_copy / "LATEST").read_text().strip()
    shard = sorted(run_dir.glob("chunks-*.parquet"))[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    code, _, err = cases.cli(str(demo_copy), "--to", str(tmp_path / "lance"))
    assert code == 2 and str(shard) in err and "Traceback" not in err, err


def _sync_process(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "chunkline.pipeline.cli", "sync", *argv], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_ctrl_c_is_one_line_and_leaves_no_lock(sync_runs, tmp_path) -> None:
    store = tmp_path / "lance"
    process = _sync_process(str(sync_runs.demo), "--to", str(store), "--batch-size", "8")
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.startswith("batch 3/"):
            process.send_signal(signal.SIGINT)
            break
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 130
    process.stdout.close()
    process.stderr.close()
    assert "Traceback" not in rest and "interrupted" in rest, rest
    assert len(rest.splitlines()) <= 3, rest
    assert not (store / "chunks.sync-lock").exists()
    code, out, err = cases.cli(str(sync_runs.demo), "--to", str(store))
    assert code == 0 and "resumed an unfinished sync" in out, err


def test_quiet_is_quiet(sync_runs, tmp_path) -> None:
    process = _sync_process(str(sync_runs.demo), "--to", str(tmp_path / "fresh"), "--quiet")
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0 and "verified" in out
    assert err == ""


def test_a_config_error_about_a_uri_hides_its_password() -> None:
    import io

    from chunkline.pipeline.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["run", "--config", str(ROOT / "configs" / "local.yaml"), "--set",
                 f"sink=postgresql://me:{SECRET}@db/search"], out, err)
    assert code == 2 and "sink" in err.getvalue()
    assert SECRET not in err.getvalue() and "me:***@db" in err.getvalue()
