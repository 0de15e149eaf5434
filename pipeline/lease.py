"""One writer per output: an exclusive lease on ``OUTPUT/.lease`` held for the whole run.

Two runs writing one index would race on ``LATEST`` and on the context cache; the second run to
start fails fast instead, naming the holder. The lease is a small JSON file (run id, host, pid)
created atomically:

- local filesystem: written beside and hard-linked into place (``link(2)`` fails if the name
  exists, so exactly one creator wins, and a reader never sees a half-written file);
- ``gs://``: uploaded with the precondition ``ifGenerationMatch=0`` (create only if absent), and
  renewed, taken over and deleted with ``ifGenerationMatch=<the generation we hold>``: Cloud
  Storage's compare-and-swap (https://cloud.google.com/storage/docs/request-preconditions).

The holder renews the lease every ``renew_every`` seconds while it runs. A lease is stale, and
the next run takes it over, when it has not been renewed for ``timeout`` seconds, or at once
when its holder ran on this host and that process is gone (a SIGKILLed nightly run does not
block the next one). Before publishing, the holder checks the lease is still its own (fencing):
a run whose lease was taken over never switches LATEST.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("chunkline.lease")

LEASE_NAME = ".lease"


class LeaseHeld(RuntimeError):
    """Another run holds the output's lease."""


class LeaseLost(RuntimeError):
    """This run's lease was taken over (it stalled past the timeout): it must not publish."""


@dataclass(frozen=True)
class Holder:
    run_id: str
    host: str
    pid: int
    started: float
    process_start: str = ""  # the kernel's start time of pid: a reused pid is not the holder

    @classmethod
    def me(cls, run_id: str) -> "Holder":
        return cls(run_id, socket.gethostname(), os.getpid(), time.time(),
                   _process_start(os.getpid()))

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def parse(cls, data: bytes) -> "Holder | None":
        """The holder, or None for a torn or foreign file (then judged by its age alone)."""
        try:
            value = json.loads(data.decode("utf-8"))
            holder = cls(**value)
        except (ValueError, TypeError, UnicodeDecodeError):
            return None
        kinds = ((holder.run_id, str), (holder.host, str), (holder.process_start, str),
                 (holder.pid, int), (holder.started, (int, float)))
        if not all(isinstance(v, k) and not isinstance(v, bool) for v, k in kinds):
            return None
        if not 0 < holder.pid < 2**22 or not 0 <= holder.started < 2**40:  # Linux pid_max
            return None
        return holder

    def is_dead_here(self) -> bool:
        """True when the holder ran on this host and its process no longer exists."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # alive, another user's
        return bool(self.process_start) and _process_start(self.pid) != self.process_start

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.started))
        # A run id has no spaces; another holder names itself in words ("sync of run ...").
        who = self.run_id if " " in self.run_id else f"run {self.run_id}"
        return f"{who} (pid {self.pid} on {self.host}, since {since} UTC)"


def _process_start(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22, starttime, after the comm field


class _LocalStore:
    def __init__(self, output: str, timeout: float, name: str = LEASE_NAME) -> None:
        self.path = Path(output) / name
        self.timeout = timeout

    def _staged(self, tag: str) -> Path:
        """A name of this process's own to write beside the lease: two holders with one tag
        (two syncs of one run) must never remove each other's staged file."""
        return self.path.with_name(f"{self.path.name}.{tag}.{os.getpid()}.{secrets.token_hex(4)}.new")

    def create(self, data: bytes, tag: str) -> bool:
        staged = self._staged(tag)
        staged.write_bytes(data)
        try:
            os.link(staged, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            staged.unlink(missing_ok=True)

    def read(self) -> tuple[bytes, float, Any] | None:
        """(content, seconds since last renewal, token identifying this version)."""
        try:
            data = self.path.read_bytes()
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:  # a directory or an unreadable file where the lease belongs
            raise LeaseHeld(f"{self.path} is not a readable lease file ({exc}); if no run is "
                            f"writing this output, remove it") from None
        return data, time.time() - stat.st_mtime, (stat.st_ino, data)

    def replace(self, token: Any, data: bytes, tag: str) -> bool:
        """Swap a stale lease for ours. One taker per stale version: a marker named after the
        stale inode is created exclusively; losers see FileExistsError."""
        marker = self.path.with_name(f"{self.path.name}.takeover.{token[0]}")
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                age = time.time() - marker.stat().st_mtime
            except FileNotFoundError:
                return False  # the winner has swapped and removed its marker meanwhile
            # A taker killed between marker and swap must not block every later run.
            if age > self.timeout:
                marker.unlink(missing_ok=True)
            return False
        os.close(fd)
        current = self.read()
        if current is None or current[2] != token:
            marker.unlink(missing_ok=True)
            return False
        staged = self._staged(tag)
        staged.write_bytes(data)
        os.replace(staged, self.path)
        marker.unlink(missing_ok=True)
        return True

    def renew(self, token: Any) -> Any:
        current = self.read()
        if current is None or current[0] != token[1]:
            return None
        os.utime(self.path)
        renewed = self.read()
        return renewed[2] if renewed is not None else None  # removed meanwhile: not ours now

    def delete(self, token: Any) -> None:
        current = self.read()
        if current is not None and current[0] == token[1]:
            self.path.unlink(missing_ok=True)

    def mine(self, token: Any) -> bool:
        current = self.read()
        return current is not None and current[0] == token[1]


class _GcsStore:
    def __init__(self, output: str, name: str = LEASE_NAME) -> None:
        import google.cloud.storage as storage  # its module (google.cloud: a namespace package)

        bucket, _, prefix = output[len("gs://"):].partition("/")
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            client = storage.Client(project="chunkline", credentials=AnonymousCredentials())
        else:
            client = storage.Client()
        path = f"{prefix.rstrip('/')}/{name}" if prefix.strip("/") else name
        self.blob = client.bucket(bucket).blob(path)

    def _upload(self, data: bytes, generation: int) -> int | None:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self.blob.upload_from_string(data, content_type="application/json",
                                         if_generation_match=generation)
        except PreconditionFailed:
            return None
        return self.blob.generation

    def create(self, data: bytes, tag: str) -> bool:
        return self._upload(data, 0) is not None

    def read(self) -> tuple[bytes, float, Any] | None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        # The holder may renew between the metadata read and the download: the generation moved,
        # so read again (a few times; a holder renews once a minute at most).
        for attempt in range(5):
            try:
                self.blob.reload()
                data = self.blob.download_as_bytes(if_generation_match=self.blob.generation)
                break
            except NotFound:
                return None
            except PreconditionFailed:
                if attempt == 4:
                    raise
        age = time.time() - self.blob.updated.timestamp() if self.blob.updated else 0.0
        return data, age, (self.blob.generation, data)

    def replace(self, token: Any, data: bytes, tag: str) -> bool:
        return self._upload(data, token[0]) is not None

    def renew(self, token: Any) -> Any:
        generation = self._upload(token[1], token[0])
        return None if generation is None else (generation, token[1])

    def delete(self, token: Any) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            self.blob.delete(if_generation_match=token[0])
        except (NotFound, PreconditionFailed):
            pass

    def mine(self, token: Any) -> bool:
        current = self.read()
        return current is not None and current[0] == token[1]


class OutputLease:
    """``with OutputLease(output, run_id, timeout): ...`` holds the output for one run.

    Raises :class:`LeaseHeld` on entry when another live run holds it; ``check()`` raises
    :class:`LeaseLost` when this run's lease was taken over. ``name`` is the lease file's name
    in ``output``; ``subject`` names what it guards in messages, ``timeout_setting`` the setting
    that sets ``timeout`` (a store's sync lock uses the same lease under its own name).
    """

    def __init__(self, output: str, run_id: str, timeout: float,
                 renew_every: float | None = None, name: str = LEASE_NAME,
                 subject: str | None = None, timeout_setting: str = "output.lease_timeout_s") -> None:
        self.output, self.run_id, self.timeout = output, run_id, timeout
        self.subject = subject or output
        self.timeout_setting = timeout_setting
        self.renew_every = renew_every if renew_every is not None else min(60.0, timeout / 5)
        self.store = (_GcsStore(output, name) if output.startswith("gs://")
                      else _LocalStore(output, timeout, name))
        self._token: Any = None
        self._lost = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def acquire(self) -> None:
        data = Holder.me(self.run_id).to_json()
        if not self.store.create(data, self.run_id):
            current = self.store.read()
            if current is not None:
                content, age, token = current
                holder = Holder.parse(content)
                stale = age > self.timeout or (holder is not None and holder.is_dead_here())
                if not stale:
                    who = holder.describe() if holder else "an unknown run"
                    raise LeaseHeld(
                        f"{self.subject} is being written by {who}; lease renewed {age:.0f} s ago. "
                        f"Wait for it, or, if that run is dead on another machine, the lease is "
                        f"taken over once it is {self.timeout:.0f} s old ({self.timeout_setting})")
                why = "its process is gone" if holder is not None and holder.is_dead_here() \
                    else f"not renewed for {age:.0f} s"
                if not self.store.replace(token, data, self.run_id):
                    raise LeaseHeld(f"{self.subject}: another run took over a stale lease first")
                log.warning("took over the lease on %s from %s (%s)", self.subject,
                            holder.describe() if holder else "an unreadable lease", why)
            elif not self.store.create(data, self.run_id):
                raise LeaseHeld(f"{self.subject}: another run took the lease at the same moment")
        taken = self.store.read()
        if taken is None:  # removed between our write and this read (a hand, or a cleanup)
            raise LeaseHeld(f"{self.subject}: the lease was removed as this run took it")
        self._token = taken[2]
        self._renewer = threading.Thread(target=self._renew_loop, name="chunkline-lease",
                                         daemon=True)
        self._renewer.start()

    def live_holder(self) -> str | None:
        """Who holds the lease now, when it is live (not stale, not dead here); None otherwise.
        Reads only: nothing is created or taken over."""
        current = self.store.read()
        if current is None:
            return None
        content, age, _ = current
        holder = Holder.parse(content)
        if age > self.timeout or (holder is not None and holder.is_dead_here()):
            return None
        return holder.describe() if holder else "an unknown holder"

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_every):
            try:
                token = self.store.renew(self._token)
            except Exception as exc:  # noqa: BLE001 - a renewal blip is retried; staleness is judged by age
                log.warning("could not renew the lease on %s: %s", self.output, exc)
                continue
            if token is None:
                self._lost = True
                log.error("the lease on %s was taken over: this run will not publish", self.output)
                return
            self._token = token

    def check(self) -> None:
        """Fencing before publish: raise LeaseLost unless this run still holds the lease."""
        if self._lost or not self.store.mine(self._token):
            raise LeaseLost(f"{self.output}: this run's lease was taken over by another run; "
                            f"not publishing (run {self.run_id})")

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        if self._token is not None and not self._lost:
            self.store.delete(self._token)
        self._token = None

    def __enter__(self) -> "OutputLease":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
