"""What a running job shows: a live display on a terminal, one log line per moving stage per
interval off one, nothing with ``--quiet``.

The numbers are the stages' own tallies (``transforms/progress.py``): the driver names a folder
in ``CHUNKLINE_PROGRESS_DIR`` before the job starts, every worker process on this machine (the
in-process runner's threads, the multi-process runner's workers) writes its counts there, and a
thread here sums them a few times a second. On Dataflow or Flink the workers run elsewhere and
the runner's console shows the same counters (docs/operations.md, "Running it every night");
there, as with an EXTERNAL worker pool, the display's last look is the run's own counts
(:meth:`RunProgress.settle`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Mapping, TextIO

from chunkline.transforms.counters import (
    CHUNKS_CARRIED,
    CHUNKS_EMBEDDED,
    CHUNKS_REUSED,
    DOCUMENTS_CARRIED,
    READ_DOCUMENTS,
    READ_REJECTED,
    TOKENS_EMBEDDED,
)
from chunkline.transforms.progress import PIECES_MATCHED, PIECES_READ, PROGRESS_ENV, WRITTEN, flush_progress

if TYPE_CHECKING:
    from rich.live import Live

log = logging.getLogger("chunkline.progress")
Mode = Literal["live", "lines", "off"]
LIVE_SECONDS = 0.25


def _key(counter) -> str:
    return f"{counter.namespace}/{counter.name}"


SPLIT_DOCUMENTS, SPLIT_CHUNKS = "split/documents", "split/chunks"


def read_totals(directory: str) -> dict[str, int]:
    """Every process's tallies summed; a file being replaced is read on the next look."""
    totals: dict[str, int] = {}
    for path in Path(directory).glob("*.json"):
        try:
            counts = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + int(value)
    return totals


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class _Rates:
    """Embedding speed over the last ~10 s, for the tokens/s shown and the time left."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int, int]] = []  # (time, chunks, tokens)

    def add(self, now: float, chunks: int, tokens: int) -> tuple[float, float]:
        self.samples.append((now, chunks, tokens))
        while len(self.samples) > 2 and now - self.samples[1][0] >= 10:
            self.samples.pop(0)
        then, first_chunks, first_tokens = self.samples[0]
        span = now - then
        if span <= 0:
            return 0.0, 0.0
        return (chunks - first_chunks) / span, (tokens - first_tokens) / span


def view(totals: dict[str, int], elapsed: float, chunk_rate: float = 0.0,
         token_rate: float = 0.0) -> list[tuple[str, str]]:
    """(label, line) rows of the display, the same words on a terminal and in the log."""
    get = totals.get
    matched, read = get(PIECES_MATCHED, 0), get(PIECES_READ, 0)
    documents = get(_key(READ_DOCUMENTS), 0) + get(_key(READ_REJECTED), 0)
    carried = get(_key(DOCUMENTS_CARRIED), 0)
    kept = get(SPLIT_DOCUMENTS, 0) + carried
    chunks_carried = get(_key(CHUNKS_CARRIED), 0)
    made = get(SPLIT_CHUNKS, 0) + chunks_carried
    embedded, reused = get(_key(CHUNKS_EMBEDDED), 0), get(_key(CHUNKS_REUSED), 0)
    # Files are known from the match stage's tallies alone (a run's counts hold documents).
    rows = [("files", f"{read:,} of {matched:,} read")] if PIECES_MATCHED in totals or not totals else []
    rows += [("documents", f"read {documents:,}, kept {kept:,}, carried {carried:,}"),
            ("chunks", f"made {made:,}, carried {chunks_carried:,}, embedded {embedded:,}"
                       + (f" at {token_rate:,.0f} tokens/s" if token_rate else "")
                       + f", reused {reused:,}")]
    written = get(WRITTEN.format(table="chunks"))
    if written is not None:
        rows.append(("written", f"{written:,} chunk rows"))
    to_embed = get(SPLIT_CHUNKS, 0) - reused - embedded
    if read < matched:
        left = f"reading: {matched - read:,} of {matched:,} files to go"
    elif to_embed > 0 and chunk_rate > 0:
        left = f"~{_clock(to_embed / chunk_rate)} to embed {to_embed:,} chunks"
    else:
        left = "-"
    rows.append(("left", left))
    rows.insert(0, ("elapsed", _clock(elapsed)))
    return rows


def totals_of_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """The display's keys from a finished run's counts (``RunSummary.counts``: its tables and
    the runner's committed counters)."""
    carried, chunks_carried = counts.get("documents_carried", 0), counts.get("chunks_carried", 0)
    return {_key(READ_DOCUMENTS): counts.get("read", counts.get("documents", 0)),
            _key(DOCUMENTS_CARRIED): carried, SPLIT_DOCUMENTS: counts.get("kept", 0) - carried,
            _key(CHUNKS_CARRIED): chunks_carried, SPLIT_CHUNKS: counts.get("chunks", 0) - chunks_carried,
            _key(CHUNKS_EMBEDDED): counts.get("embedded", 0), _key(CHUNKS_REUSED): counts.get("reused", 0),
            WRITTEN.format(table="chunks"): counts.get("chunks", 0)}


class RunProgress:
    """``with RunProgress(stream, mode):`` around a run: the job's tallies shown while it runs;
    ``final`` holds the last totals once it is done."""

    def __init__(self, stream: TextIO, mode: Mode, interval: float = 10.0) -> None:
        self.stream, self.mode, self.interval = stream, mode, interval
        self.final: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._directory: str | None = None
        self._previous_env: str | None = None
        self._live: Live | None = None
        self._handlers: list[logging.Handler] = []
        self._settled: dict[str, int] | None = None

    def __enter__(self) -> "RunProgress":
        if self.mode == "off":
            return self
        self._directory = directory = tempfile.mkdtemp(prefix="chunkline-progress-")
        self._previous_env = os.environ.get(PROGRESS_ENV)
        os.environ[PROGRESS_ENV] = directory
        self._started = time.monotonic()
        self._rates = _Rates()
        self._shown: dict[str, str] = {}
        if self.mode == "live":
            self._start_live()
        self._thread = threading.Thread(target=self._loop, args=(directory,), name="chunkline-display",
                                        daemon=True)
        self._thread.start()
        return self

    def settle(self, counts: Mapping[str, int]) -> None:
        """The run's own counts, once it is done. Where no worker's tallies reached this
        machine (an EXTERNAL pool's workers, a cluster's: they run elsewhere), the last look
        shows these rather than zeros, so that it says what the summary says."""
        self._settled = totals_of_counts(counts)

    def __exit__(self, *exc_info) -> None:
        directory = self._directory
        if self.mode == "off" or directory is None:  # off, or never entered
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        flush_progress()  # this process's own last counts (the in-process runner's workers)
        self.final = read_totals(directory)
        if self._settled is not None and not ({_key(READ_DOCUMENTS), _key(READ_REJECTED)} & set(self.final)):
            self.final = self._settled
        self._show(self.final, final=True)
        if self._live is not None:
            self._live.stop()
            root = logging.getLogger()
            for handler in self._handlers:
                root.removeHandler(handler)
            for handler in self._saved_handlers:
                root.addHandler(handler)
        if self._previous_env is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = self._previous_env
        shutil.rmtree(directory, ignore_errors=True)

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.logging import RichHandler

        console = Console(file=self.stream)
        # Refreshed by _loop alone: rich's own refresh thread would draw the same rows again.
        self._live = live = Live(console=console, auto_refresh=False, transient=False,
                                 redirect_stdout=False, redirect_stderr=False)
        live.start()
        # Log records print above the display, not through it.
        root = logging.getLogger()
        self._saved_handlers = list(root.handlers)
        for handler in self._saved_handlers:
            root.removeHandler(handler)
        handler = RichHandler(console=console, show_path=False, show_level=False)
        root.addHandler(handler)
        self._handlers = [handler]

    def _loop(self, directory: str) -> None:
        wait = LIVE_SECONDS if self.mode == "live" else self.interval
        while not self._stop.wait(wait):
            self._show(read_totals(directory))

    def _show(self, totals: dict[str, int], final: bool = False) -> None:
        now = time.monotonic()
        chunk_rate, token_rate = self._rates.add(
            now, totals.get(_key(CHUNKS_EMBEDDED), 0), totals.get(_key(TOKENS_EMBEDDED), 0))
        rows = view(totals, now - self._started, chunk_rate, 0.0 if final else token_rate)
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text("\n".join(f"{label:<10} {line}" for label, line in rows)),
                              refresh=True)
            return
        # Off a terminal: a line per row that moved since the last look, with the clock; nothing
        # before the job has counted anything.
        if not totals and not final:
            return
        clock = rows[0][1]
        for label, line in rows[1:]:
            if line != "-" and (final or self._shown.get(label) != line):
                log.info("%-9s %s  [%s%s]", label, line, clock, ", done" if final else "")
                self._shown[label] = line


def progress_mode(stream: TextIO, quiet: bool) -> Mode:
    if quiet:
        return "off"
    isatty = getattr(stream, "isatty", None)
    return "live" if isatty is not None and isatty() else "lines"
