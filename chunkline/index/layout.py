"""The names an output is laid out with, in one place for the job that writes it and every
reader (``chunkline.index.manifest``, ``pipeline/runs.py``, ``pipeline/run.py``,
``pipeline/plan.py``)::

    OUTPUT/
      LATEST                  the published run's id, one line
      .LATEST.<run id>        LATEST staged beside itself, renamed over it (local outputs)
      .probe-<run id>         the preflight's write probe, deleted at once
      _cache/                 shared by every run: context headers, OCR pages, dims probes
      <run id>/manifest.json  written last: a run without one was killed or is running
      <run id>/<table>-NNNNN-of-MMMMM.parquet, ...   (a rerun writes only new and changed
                              rows: its manifest may list earlier runs' files)
      <run id>/_listing/<table>-NNNNN.json   each shard's files, as the manifest lists them
      <run id>/boilerplate-frequent.parquet  the line keys boilerplate removal found frequent
                              (``chunkline.key_sets``): the next run compares its own with them
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

LATEST = "LATEST"
MANIFEST = "manifest.json"
CACHE = "_cache"
# Left behind only by a process killed between writing and renaming or deleting them.
STAGED_LATEST = ".LATEST."
PROBE = ".probe-"
BOILERPLATE_FREQUENT = "boilerplate-frequent.parquet"
# The tables every manifest lists (``terms`` only when the run has BM25 statistics).
TABLES = ("chunks", "documents", "rejected")

def shard_of(key: str, shards: int) -> int:
    """The shard of a row whose shard key is ``key``, of ``shards``: stable across processes
    and runs (Python's ``hash()`` is salted per process), so a reader finds a row's shard as
    the writer chose it."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "big") % shards


def shard_name(name: str) -> tuple[str, int, int] | None:
    """(table, shard, shards) of a file named ``<table>-SSSSS-of-NNNNN.parquet``; None else."""
    found = _SHARD_NAME.fullmatch(name.rsplit("/", 1)[-1])
    return (found.group(1), int(found.group(2)), int(found.group(3))) if found else None


_SHARD_NAME = re.compile(r"(.+)-(\d{5})-of-(\d{5})\.parquet")


# UTC start time, config digest, random part: the start time first, so that names sort by age.
# A directory without a manifest is taken for a run (and so for gc to remove) only when its
# name has this form; group 1 is the start time.
RUN_ID = re.compile(r"(\d{8}T\d{6})Z-[0-9a-f]{8}-[0-9a-f]{6}")
RUN_ID_TIME = "%Y%m%dT%H%M%S"


def format_run_id(started: datetime, digest: str, random: str) -> str:
    """A run id as :data:`RUN_ID` reads it: ``started`` (UTC), 8 hex digits of the config's
    digest, 6 random hex digits."""
    return f"{started:{RUN_ID_TIME}}Z-{digest}-{random}"
