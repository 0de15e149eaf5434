"""One writer per output: the lease refuses a second live run, is taken over from a dead or
silent one, and fences a run whose lease was taken over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from chunkline.pipeline.lease import LEASE_NAME, LeaseHeld, LeaseLost, OutputLease

ROOT = Path(__file__).resolve().parents[2]


def write_holder(output: Path, *, host: str, pid: int, age_s: float = 0.0) -> Path:
    lease = output / LEASE_NAME
    output.mkdir(parents=True, exist_ok=True)
    lease.write_text(json.dumps({"run_id": "someone-else", "host": host, "pid": pid,
                                 "started": time.time() - age_s, "process_start": ""}))
    stamp = time.time() - age_s
    os.utime(lease, (stamp, stamp))
    return lease


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_second_holder_is_refused_and_named(tmp_path) -> None:
    with OutputLease(str(tmp_path), "run-a", timeout=600):
        with pytest.raises(LeaseHeld, match="run-a"):
            OutputLease(str(tmp_path), "run-b", timeout=600).acquire()
    # Released: the next run takes it.
    with OutputLease(str(tmp_path), "run-c", timeout=600):
        assert json.loads((tmp_path / LEASE_NAME).read_text())["run_id"] == "run-c"
    assert not (tmp_path / LEASE_NAME).exists()


def test_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path) -> None:
    write_holder(tmp_path, host=socket.gethostname(), pid=dead_pid())
    with OutputLease(str(tmp_path), "run-next", timeout=600):
        assert json.loads((tmp_path / LEASE_NAME).read_text())["run_id"] == "run-next"


def test_live_holder_elsewhere_blocks_until_the_timeout(tmp_path) -> None:
    write_holder(tmp_path, host="another-machine", pid=1, age_s=30)
    with pytest.raises(LeaseHeld, match="another-machine"):
        OutputLease(str(tmp_path), "run-x", timeout=600).acquire()
    write_holder(tmp_path, host="another-machine", pid=1, age_s=700)
    with OutputLease(str(tmp_path), "run-y", timeout=600):
        assert json.loads((tmp_path / LEASE_NAME).read_text())["run_id"] == "run-y"


@pytest.mark.slow
def test_holder_renews_so_a_long_run_is_not_stale(tmp_path) -> None:
    with OutputLease(str(tmp_path), "long-run", timeout=1.0, renew_every=0.1) as lease:
        time.sleep(1.5)
        with pytest.raises(LeaseHeld):
            OutputLease(str(tmp_path), "intruder", timeout=1.0).acquire()
        lease.check()


def test_a_run_whose_lease_was_taken_over_may_not_publish(tmp_path) -> None:
    slow = OutputLease(str(tmp_path), "stalled", timeout=600, renew_every=3600)
    slow.acquire()
    try:
        stamp = time.time() - 700  # as if the holder had stalled for longer than the timeout
        os.utime(tmp_path / LEASE_NAME, (stamp, stamp))
        with OutputLease(str(tmp_path), "newcomer", timeout=600):
            with pytest.raises(LeaseLost):
                slow.check()
    finally:
        slow.release()


@pytest.mark.slow
def test_concurrent_takeovers_leave_one_holder(tmp_path) -> None:
    """Eight processes race for one stale lease: exactly one wins."""
    write_holder(tmp_path, host="another-machine", pid=1, age_s=700)
    script = (
        "import sys, time\n"
        "from chunkline.pipeline.lease import OutputLease, LeaseHeld\n"
        "lease = OutputLease(sys.argv[1], sys.argv[2], timeout=600)\n"
        "time.sleep(max(0.0, float(sys.argv[3]) - time.time()))\n"
        "try:\n"
        "    lease.acquire()\n"
        "except LeaseHeld:\n"
        "    sys.exit(75)\n"
        "time.sleep(2)\n"
        "lease.check(); lease.release()\n"
    )
    start_at = str(time.time() + 3)
    racers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), f"racer-{i}", start_at],
                               cwd=ROOT) for i in range(8)]
    codes = sorted(p.wait(timeout=60) for p in racers)
    assert codes == [0] + [75] * 7


def run_cli(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "chunkline.pipeline.cli", "run", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_concurrent_runs_leave_one_complete_run_and_one_refusal(tmp_path) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    corpus.mkdir()
    for i in range(40):
        (corpus / f"doc{i:02d}.md").write_text(f"# Doc {i}\n\n" + f"Sentence {i} about docks. " * 200)
    argv = ("--config", str(ROOT / "configs" / "local.yaml"), "--input", f"{corpus}/**",
            "--output", str(output), "--set", "embed=null")
    first, second = run_cli(*argv), run_cli(*argv)
    results = [(p.wait(timeout=300), *p.communicate()) for p in (first, second)]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 75], results
    refusal = next(err for code, _, err in results if code == 75)
    assert "is being written by run" in refusal
    # Run folders (the output's own _iceberg/ and _cache/ aside): the published run's alone.
    runs = [d for d in output.iterdir() if d.is_dir() and not d.name.startswith("_")]
    assert len(runs) == 1, "the refused run wrote nothing"
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    assert manifest["reconciled"] and (output / "LATEST").read_text().strip() == runs[0].name
    chunks = sum(pq.read_metadata(runs[0].parent / f["path"]).num_rows for f in manifest["tables"]["chunks"])
    assert chunks == manifest["counts"]["chunks"] > 0
    assert not (output / LEASE_NAME).exists()
