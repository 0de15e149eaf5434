"""What a sync must write: the difference between a run's rows and what a store holds.

Pure: from the run's (chunk_id -> row digest) and the store's, the chunks to upsert (new, or a
different digest), the chunks to delete (in the store, not in the run) and the count left as
they are; then cut into batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    upsert: tuple[str, ...]  # chunk ids, ascending
    delete: tuple[str, ...]  # chunk ids, ascending
    unchanged: int

    @property
    def empty(self) -> bool:
        return not self.upsert and not self.delete


def make_plan(run: Mapping[str, str], store: Mapping[str, str]) -> Plan:
    """``run`` and ``store``: chunk_id -> row digest. Upsert what is new or differs, delete what
    the run no longer has; the rest is unchanged. Applying the plan to ``store`` gives ``run``."""
    upsert = tuple(sorted(cid for cid, digest in run.items() if store.get(cid) != digest))
    delete = tuple(sorted(cid for cid in store if cid not in run))
    return Plan(upsert, delete, len(run) - len(upsert))


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size``."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    for start in range(0, len(items), size):
        yield items[start:start + size]
