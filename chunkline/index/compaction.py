"""Compaction of merge-on-read tables: which previous file a run rewrites rather than references.

A rerun leaves unchanged rows in the files earlier runs wrote and marks the rows no longer live
by position (:mod:`chunkline.index.tables`, Apache Iceberg v2's position deletes). A file whose
dead rows pass a bound is compacted: its live rows are written into the run's own file and the
file drops out of the run's listing (Iceberg's ``rewrite_data_files``, Delta Lake's
``OPTIMIZE``), within a per-run budget so that files thinned out together are rewritten over
several nights. One policy for every table's writer (``transforms/write.py``, ``transforms/
carry.py``) and, through :func:`rewrite_budget`, for the memo's segments (``chunkline.memo``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


class _Counted(Protocol):
    @property
    def count(self) -> int: ...


class PreviousFile(Protocol):
    """What compaction asks of a previous file (``chunkline.index.tables.LiveFile`` has it):
    its path, rows and bytes as the manifest states them, and how many of its rows are dead."""

    @property
    def path(self) -> str: ...

    @property
    def rows(self) -> int | None: ...

    @property
    def bytes(self) -> int | None: ...

    @property
    def deletions(self) -> _Counted: ...

# A previous file is rewritten once more than this share of its rows would be deleted (its dead
# rows cost every read; Iceberg's rewrite_data_files and Delta's OPTIMIZE use the same kind of
# bound) ...
MOST_DEAD = 0.2
# ... by the runs its plan allows (compaction_allowed: a run rewrites at most about this share
# of a table's bytes, its most dead files first), so that files written together (a full run's
# shards, thinned out evenly by nightly changes) are compacted over several nights rather than
# all in one, the partial progress of Iceberg's rewrite_data_files
# (https://iceberg.apache.org/docs/latest/maintenance/#compact-data-files), as the memo's segments
# are (chunkline.memo.MEMO_REWRITE_SHARE, through the same rewrite_budget); 1/16 takes a table
# through in 16 runs, before a file thinning by ~1 % a night passes the hard bound; a small table
# (up to REWRITE_FLOOR of it, as for the memo) is compacted whole in the run that finds it ...
TABLE_REWRITE_SHARE = 1 / 16
REWRITE_FLOOR = 256 << 10
# ... past which a file is rewritten in the run that finds it, allowed or not.
HARD_MOST_DEAD = 0.4
# ... and a shard lists at most this many files (a base and a few small deltas): past it, every
# file but the one with the most live rows is merged into the run's new file, so a read opens a
# bounded number per shard.
MOST_FILES = 4


def rewrite_budget(sizes: Sequence[int], share: float) -> int:
    """The bytes one run may rewrite of a table (or memo) whose files are ``sizes``: ``share``
    of them, at least :data:`REWRITE_FLOOR` (a small one is rewritten whole in one run)."""
    return max(REWRITE_FLOOR, int(share * sum(sizes)))


@dataclass(frozen=True)
class Compaction:
    """Which previous files a run may compact: ``files`` (full paths) past :data:`MOST_DEAD`,
    chosen by :func:`compaction_allowed` within the run's budget; with ``purge``, every file
    holding a dead row, whatever its share or the budget, so that no byte of a row no longer
    live remains in a file the run's snapshot references (an erasure: ``chunkline run --purge``,
    or a change of the credential settings, which may turn rows already written into rows of a
    rejected document)."""

    files: frozenset[str] = frozenset()
    purge: bool = False

    def __or__(self, other: Compaction) -> Compaction:
        return Compaction(self.files | other.files, self.purge or other.purge)


def compacted(path: str, dead: int, rows: int, allowed: Compaction | None) -> bool:
    """Whether a previous file ``path`` of ``rows`` rows, ``dead`` of them deleted once this run
    is written, is compacted (its live rows written into this run's file) rather than
    referenced: any dead row under a purge; past :data:`MOST_DEAD` when ``allowed`` holds it
    (None: every file, no budget); past :data:`HARD_MOST_DEAD` always."""
    if dead and allowed is not None and allowed.purge:
        return True
    if dead > HARD_MOST_DEAD * rows:
        return True
    return dead > MOST_DEAD * rows and (allowed is None or path in allowed.files)


def compaction_allowed(files: Sequence[PreviousFile], purge: bool = False) -> Compaction:
    """The paths of the previous run's ``files`` (one table's) a run may compact: the most dead
    first (by the share of their rows the previous manifest deletes: counts, no deletion file
    read), while their bytes fit :data:`TABLE_REWRITE_SHARE` of the table's, or
    :data:`REWRITE_FLOOR` when that is more; the last taken may pass it, so each run makes progress. Whether one is
    compacted is still :func:`compacted`'s, as the shard writer finds it."""
    budget = rewrite_budget([f.bytes or 0 for f in files], TABLE_REWRITE_SHARE)
    ranked = sorted(files, key=lambda f: (-(f.deletions.count / f.rows) if f.rows else 0.0, f.path))
    allowed = set()
    for file in ranked:
        if budget <= 0:
            break
        budget -= file.bytes or 0
        allowed.add(file.path)
    return Compaction(frozenset(allowed), purge)
