"""What a sync must write: the difference between a run's rows and what a store holds.

Pure: from the run's (chunk_id -> row digest) and the store's (chunk_id, row digest) pairs, the
chunks to upsert (new, a different digest, or held more than once), the chunks to delete (in the
store, not in the run, or held more than once: every copy goes, then one is written) and the
count left as they are; then cut into batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    upsert: tuple[str, ...]  # chunk ids, ascending
    delete: tuple[str, ...]  # chunk ids, ascending
    unchanged: int

    @property
    def empty(self) -> bool:
        return not self.upsert and not self.delete


def make_plan(run: Mapping[str, str], store: Mapping[str, str] | Iterable[tuple[str, str]]) -> Plan:
    """``run``: chunk_id -> row digest; ``store``: the same as a mapping, or the (chunk_id, row
    digest) pairs of every row the store holds, a chunk_id possibly more than once (a store
    without a unique key, written by two processes at once). Upsert what is new, differs or is
    duplicated; delete what the run no longer has and every copy of a duplicate (deletes run
    first). Applying the plan to ``store`` gives ``run``, one row a chunk."""
    pairs = store.items() if isinstance(store, Mapping) else store
    held: dict[str, str] = {}
    duplicated: set[str] = set()
    for chunk_id, digest in pairs:
        if chunk_id in held:
            duplicated.add(chunk_id)
        held[chunk_id] = digest
    upsert = tuple(sorted(cid for cid, digest in run.items()
                          if held.get(cid) != digest or cid in duplicated))
    delete = tuple(sorted(cid for cid in held if cid not in run or cid in duplicated))
    return Plan(upsert, delete, len(run) - len(upsert))


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size``."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    for start in range(0, len(items), size):
        yield items[start:start + size]
