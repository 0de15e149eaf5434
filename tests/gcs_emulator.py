"""A real GCS JSON API on 127.0.0.1 (gcp-storage-emulator, in memory) for gs:// tests.

Beam's gcsio, google-cloud-storage and our code all talk HTTP to it; nothing reaches Google.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from chunkline.transforms.storage import EMULATOR_ENV, use_emulator_credentials


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, name: str, seconds: float = 30) -> None:
    """Return once ``process`` accepts connections on 127.0.0.1:``port``; raise if it exits or
    takes longer than ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{name} did not start on port {port}") from None
            time.sleep(0.1)


@contextmanager
def storage_emulator(bucket: str) -> Iterator[str]:
    """Start the emulator with ``bucket`` created; yields its URL with STORAGE_EMULATOR_HOST set
    (so worker processes started afterwards inherit it)."""
    port = free_port()
    executable = Path(sys.executable).with_name("gcp-storage-emulator")
    process = subprocess.Popen(
        [str(executable), "start", "--host=127.0.0.1", f"--port={port}", "--in-memory",
         f"--default-bucket={bucket}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    previous = os.environ.get(EMULATOR_ENV)
    try:
        wait_for_port(port, process, "gcp-storage-emulator")
        os.environ[EMULATOR_ENV] = url
        use_emulator_credentials()
        yield url
    finally:
        if previous is None:
            os.environ.pop(EMULATOR_ENV, None)
        else:
            os.environ[EMULATOR_ENV] = previous
        process.terminate()
        process.wait(timeout=10)


def upload_tree(local: Path, remote: str) -> int:
    """Copy a local directory to ``remote`` (gs://bucket/prefix) through Beam's filesystems."""
    from apache_beam.io.filesystems import FileSystems

    count = 0
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        with FileSystems.create(f"{remote}/{path.relative_to(local).as_posix()}") as out:
            out.write(path.read_bytes())
        count += 1
    return count
