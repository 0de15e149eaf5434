"""Live progress from the stages themselves, for the driver's display (``pipeline/progress.py``).

The in-process runner reports metrics only once the job is done, so a counter that the display
must see while the job runs is also tallied here: per worker process, in memory, and written as
``<pid>.json`` (every :data:`FLUSH_SECONDS`, at exit, and when the driver asks) into the folder
the driver names in ``CHUNKLINE_PROGRESS_DIR``. Worker processes of the multi-process local
runner inherit that variable, so their tallies reach the same folder. Without it (Dataflow,
Flink, a test pipeline) nothing is tallied: their consoles show the Beam counters instead.

A retried bundle is tallied twice here (the Beam counters, which reconciliation reads, count
committed work only): the display is a view of the work in flight, not the run's accounts.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections import Counter as Tally
from apache_beam.metrics import Metrics

PROGRESS_ENV = "CHUNKLINE_PROGRESS_DIR"
FLUSH_SECONDS = 0.25
# Tallied for the display alone (no Beam counter): what was matched (a file, or a piece of a big
# record dump) and read so far, and the rows of each table written.
PIECES_MATCHED = "read/pieces_matched"
PIECES_READ = "read/pieces_read"
WRITTEN = "write/{table}"


class _ProcessTally:
    """This process's counts for one progress folder, written by a daemon thread when they move."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.counts: Tally = Tally()
        self.lock = threading.Lock()
        self.written = 0  # the version last written
        self.version = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="chunkline-progress", daemon=True)
        self.thread.start()

    def add(self, key: str, amount: int) -> None:
        with self.lock:
            self.counts[key] += amount
            self.version += 1

    def _loop(self) -> None:
        while not self.stop.wait(FLUSH_SECONDS):
            self.flush()

    def flush(self) -> None:
        with self.lock:
            if self.version == self.written:
                return
            counts, version = dict(self.counts), self.version
        path = os.path.join(self.directory, f"{os.getpid()}.json")
        try:
            with open(path + ".tmp", "w", encoding="utf-8") as handle:
                json.dump(counts, handle)
            os.replace(path + ".tmp", path)  # the driver never reads half a file
        except OSError:
            return  # the driver has gone and removed the folder: nothing left to show
        with self.lock:
            self.written = max(self.written, version)


_tallies: dict[str, _ProcessTally] = {}
_tallies_lock = threading.Lock()


def _tally() -> _ProcessTally | None:
    directory = os.environ.get(PROGRESS_ENV)
    if not directory:
        return None
    tally = _tallies.get(directory)
    if tally is None:
        with _tallies_lock:
            tally = _tallies.get(directory)
            if tally is None:
                tally = _tallies[directory] = _ProcessTally(directory)
    return tally


def flush_progress() -> None:
    """Write this process's tallies now (the driver does, before its last look)."""
    for tally in list(_tallies.values()):
        tally.flush()


atexit.register(flush_progress)


def tally(key: str, amount: int = 1) -> None:
    """Count ``amount`` under ``key`` for the live display (nothing without a progress folder)."""
    found = _tally()
    if found is not None:
        found.add(key, amount)


class ProgressCounter:
    """A Beam counter that the live display sees too: ``inc`` counts in both."""

    def __init__(self, namespace: str, name: str) -> None:
        self.metric = Metrics.counter(namespace, name)
        self.key = f"{namespace}/{name}"

    def inc(self, amount: int = 1) -> None:
        self.metric.inc(amount)
        tally(self.key, amount)


def progress_counter(namespace: str, name: str) -> ProgressCounter:
    return ProgressCounter(namespace, name)
