"""chunkline's nightly reindex as an Airflow DAG: ``chunkline run``, then, only when the run
exits 3 (the index is published, the sink lags), ``chunkline sync OUTPUT --to SINK``. Airflow
retries a task only on the exit statuses that ask for a retry (docs/operations.md, "Exit codes"): 75 for
the run, 69 and 75 for the sync. On any other failure the task fails at once and pages.

Why not apache-airflow-providers-apache-beam's BeamRunPythonPipelineOperator: it runs
``python [py_options] PY_FILE --runner=RUNNER --key=value ...``, a pipeline script taking Beam
options, not a console entry point with a subcommand (``chunkline run --config ...``, Beam's
options after ``--``). It also turns every non-zero exit into one AirflowException ("Apache Beam
process failed with return code N"), so a retry could not depend on the status; and with
DataflowRunner it stops waiting for the process once the job id appears in its output and waits
on the Dataflow job instead, while chunkline publishes (manifest, LATEST, the sink) from that
process only after the job. BashOperator runs ``chunkline run`` as it is, but its
``skip_on_exit_code`` only turns a status into a skip: every other non-zero status is the same
retryable failure. So each task is a small Python callable that runs the command and raises
AirflowFailException (failed, no retry) or AirflowException (retried while retries are left).

The Airflow worker needs chunkline installed (its ``chunkline`` on PATH, or CHUNKLINE_BIN); this
file itself imports nothing of chunkline, so it also parses on a scheduler without it.
"""

from __future__ import annotations

import logging
import os
import subprocess
from datetime import datetime, timedelta

from airflow.exceptions import AirflowException, AirflowFailException, AirflowSkipException

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.decorators import task

log = logging.getLogger(__name__)

# The statuses a scheduler retries, from pipeline/exits.py; repeated here because the scheduler
# parses this file without chunkline. tests/test_schedule_examples.py holds them equal to
# exits.py and to the table in docs/operations.md.
PUBLISHED_SINK_FAILED = 3  # run: the index is published, the sink's sync failed or lags
STORE_UNAVAILABLE = 69  # sync: the store cannot be reached, or a write failed midway
BUSY = 75  # run: another run holds the output's lease; sync: another sync the store's lock

CHUNKLINE = os.environ.get("CHUNKLINE_BIN", "chunkline")
CONFIG = os.environ.get("CHUNKLINE_CONFIG", "/etc/chunkline/nightly.yaml")
OUTPUT = os.environ.get("CHUNKLINE_OUTPUT", "/var/lib/chunkline/index")
# The config's sink.to. A PostgreSQL password belongs in PGPASSWORD or ~/.pgpass, not here.
SINK = os.environ.get("CHUNKLINE_SINK", "")


def outcome(command: str, status: int) -> str:
    """What the DAG does with the exit status of ``chunkline <command>``: "ok"; "sync" (run
    only: the index is published, the sink needs ``chunkline sync``); "retry" (the task fails
    and Airflow runs it again); "fail" (the task fails without a retry and pages: 1 and 2 fail
    the same way again, and any other status is not one chunkline documents)."""
    if status == 0:
        return "ok"
    if command == "run" and status == PUBLISHED_SINK_FAILED:
        return "sync"
    if status == BUSY or (command == "sync" and status == STORE_UNAVAILABLE):
        return "retry"
    return "fail"


def _chunkline(*args: str) -> int:
    """Run ``chunkline ARGS``, its output into the task log; its exit status."""
    with subprocess.Popen([CHUNKLINE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as process:
        for line in process.stdout:
            log.info("%s", line.rstrip("\n"))
    return process.returncode


def _act(command: str, status: int) -> str:
    action = outcome(command, status)
    if action == "retry":
        raise AirflowException(f"chunkline {command} exit {status}: busy or unreachable, retried")
    if action == "fail":
        raise AirflowFailException(f"chunkline {command} exit {status}: not retried "
                                   "(docs/operations.md, 'Exit codes')")
    return action


def page(context) -> None:
    """Called when a task fails for good (no retry left, or none allowed): put your pager here
    (an Airflow notifier, a webhook)."""
    ti = context["task_instance"]
    log.error("PAGE: chunkline_nightly.%s failed for good: %s", ti.task_id, context.get("exception"))


@task(retries=6, retry_delay=timedelta(minutes=10), on_failure_callback=page)
def index() -> bool:
    """``chunkline run``. True when the index is published but the sink still needs a sync."""
    return _act("run", _chunkline("run", "--config", CONFIG, "--output", OUTPUT)) == "sync"


@task(retries=6, retry_delay=timedelta(minutes=10), on_failure_callback=page)
def sync_sink(sink_lags: bool) -> None:
    """``chunkline sync OUTPUT --to SINK``, only after a run that exited 3 (with a ``sink:``
    section, a run that exits 0 has synced and verified the store itself)."""
    if not sink_lags:
        raise AirflowSkipException("the run brought its sink level itself")
    if not SINK:
        raise AirflowFailException("chunkline run exit 3: the sink lags; set CHUNKLINE_SINK to "
                                   "the config's sink.to so this task can complete it")
    _act("sync", _chunkline("sync", OUTPUT, "--to", SINK))


with DAG(
    dag_id="chunkline_nightly",
    schedule="30 2 * * *",
    start_date=datetime.fromisoformat("2026-01-01T00:00:00+00:00"),
    catchup=False,
    max_active_runs=1,  # chunkline's lease would refuse a second run anyway (exit 75)
    tags=["chunkline"],
):
    sync_sink(index())
