"""Writing the headers of a document's chunks: a thread pool per worker sends one request per
chunk, ``max_concurrency`` at a time, a document's chunks back to back so the provider's prompt
cache holds the document (Anthropic, "Introducing Contextual Retrieval", 2024); retries with
exponential backoff and full jitter, a server's ``retry-after`` waited out by the whole worker,
and a failure budget after which it stops calling.

    writer = HeaderWriter(make_client(options, resolve_api_key(options)), options)
    results = writer.write(document_text, [chunk_a, chunk_b])   # [HeaderResult(status="ok", ...), ...]
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from chunkline.context.accounting import Usage
from chunkline.context.clients import CallFailed, HeaderClient
from chunkline.context.fit import normalize_header
from chunkline.context.options import ContextOptions

# The stage's logger, shared with transforms/context.py.
log = logging.getLogger("chunkline.context")

# What a chunk's ``context_status`` says (a failure adds ": <reason>").
OK = "ok"
CACHED = "cached"
FAILED = "failed"


@dataclass(frozen=True)
class HeaderResult:
    """What became of one chunk's request: ``status`` is ``ok`` or ``failed: <reason>``;
    ``text`` the answer with whitespace collapsed ("" when failed), not yet fitted to the
    reserve; the requests, retries and tokens it cost."""

    status: str
    text: str = ""
    requests: int = 0
    retries: int = 0
    usage: Usage = Usage()

    @property
    def ok(self) -> bool:
        return self.status == OK


def failed_status(reason: str) -> str:
    """The ``context_status`` of a chunk left without a header: ``failed: <reason>``."""
    return f"{FAILED}: {reason}"


def status_kind(status: str) -> str:
    """``ok``, ``cached``, ``failed`` or ``off``: a ``context_status`` without its reason."""
    return status.split(":", 1)[0]


def backoff_delay(retry: int, options: ContextOptions, rng: random.Random) -> float:
    """Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff and
    Jitter", 2015): uniform(0, min(max, base * 2**retry))."""
    return rng.uniform(0.0, min(options.backoff_max_s, options.backoff_base_s * 2.0 ** retry))


class HeaderWriter:
    """Writes the headers of one document's chunks, ``max_concurrency`` requests at a time per
    writer, retrying as ContextOptions says, and stops calling once the failure budget is spent.

    ``submit`` returns at once with a future of one HeaderResult per chunk text, in order; many
    documents may be in flight together. Build one per worker; thread-safe.
    """

    def __init__(self, client: HeaderClient, options: ContextOptions, *,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self._client = client
        self._options = options
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._pool = ThreadPoolExecutor(options.max_concurrency, thread_name_prefix="context")
        self._lock = threading.Lock()
        self._failures = 0
        self._paused_until = 0.0

    @property
    def failures(self) -> int:
        """Chunks that failed in this writer so far (the failure budget counts these)."""
        return self._failures

    def write(self, document: str, chunks: Sequence[str]) -> list[HeaderResult]:
        """``submit(...).result()``."""
        return self.submit(document, chunks).result()

    def submit(self, document: str, chunks: Sequence[str]) -> Future[list[HeaderResult]]:
        """Requests for every chunk text of ``document``, the first alone when ``prime_cache``."""
        chunks = list(chunks)
        done: Future[list[HeaderResult]] = Future()
        results: list[HeaderResult | None] = [None] * len(chunks)
        remaining = [len(chunks)]
        lock = threading.Lock()
        if not chunks:
            done.set_result([])
            return done

        def collect(index: int, future: Future) -> None:
            try:
                results[index] = future.result()
            except BaseException as exc:  # noqa: BLE001 - _write_one never raises; a cancelled future may
                results[index] = HeaderResult(failed_status(f"error {type(exc).__name__}"))
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                done.set_result(results)  # type: ignore[arg-type]  # no None: the last callback, every slot set

        def send(indices: range) -> None:
            for index in indices:
                try:
                    future = self._pool.submit(self._write_one, document, chunks[index])
                except RuntimeError:  # the pool is shut down (worker teardown)
                    future = Future()
                    future.set_result(HeaderResult(failed_status("cancelled")))
                future.add_done_callback(partial(collect, index))

        if self._options.prime_cache and len(chunks) > 1:
            def after_first(future: Future) -> None:
                collect(0, future)
                send(range(1, len(chunks)))

            try:
                first = self._pool.submit(self._write_one, document, chunks[0])
            except RuntimeError:
                first = Future()
                first.set_result(HeaderResult(failed_status("cancelled")))
            first.add_done_callback(after_first)
        else:
            send(range(len(chunks)))
        return done

    def close(self) -> None:
        """Stop: queued requests are cancelled (their chunks come back failed)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _write_one(self, document: str, chunk: str) -> HeaderResult:
        """One chunk's header, with retries. Runs on a pool thread; never raises."""
        options = self._options
        requests = retries = 0
        while True:
            if self._budget_spent():
                return HeaderResult(failed_status("failure budget exhausted"), "", requests, retries)
            self._wait_out_pause()
            requests += 1
            try:
                completion = self._client.complete(document, chunk)
            except CallFailed as exc:
                if exc.retryable and retries < options.max_retries:
                    if exc.retry_after is not None:
                        delay = min(exc.retry_after, options.max_retry_after_s)
                        self._pause(delay)  # the whole worker is being told to slow down
                    else:
                        delay = backoff_delay(retries, options, self._rng)
                    log.debug("context: %s, retry %d/%d in %.2f s", exc.reason, retries + 1,
                              options.max_retries, delay)
                    retries += 1
                    self._sleep(delay)
                    continue
                return self._count_failure(exc.reason, requests, retries)
            except Exception as exc:  # noqa: BLE001 - a chunk fails, the job goes on
                return self._count_failure(f"error {type(exc).__name__}", requests, retries)
            text = normalize_header(completion.text)
            if not text:
                return self._count_failure("empty answer", requests, retries, completion.usage)
            return HeaderResult(OK, text, requests, retries, completion.usage)

    def _count_failure(self, reason: str, requests: int, retries: int, usage: Usage = Usage()) -> HeaderResult:
        with self._lock:
            self._failures += 1
            failures = self._failures
        budget = self._options.max_failures
        log.warning("context: header request failed (%s) after %d request(s); %d failed so far%s",
                    reason, requests, failures, f" of a budget of {budget}" if budget is not None else "")
        return HeaderResult(failed_status(reason), "", requests, retries, usage)

    def _budget_spent(self) -> bool:
        budget = self._options.max_failures
        return budget is not None and self._failures >= budget

    def _pause(self, seconds: float) -> None:
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + seconds)

    def _wait_out_pause(self) -> None:
        while True:
            with self._lock:
                wait = self._paused_until - self._clock()
            if wait <= 0:
                return
            self._sleep(wait)
