"""Make a vector store equal to a run, resumably, and prove it.

The store keeps two things of its own (``Store``): each row's digest beside the row (written in
the same upsert as the row, so a row and its digest are never apart), and one state record: the
last run fully synced and verified, and the run a sync has begun (``SyncState``). A sync:

1. reads the run's rows and their digests (``pipeline.sync.rows``);
2. plans against the digests the store holds (``pipeline.sync.plan``): a sync killed between
   (or inside) batches left only whole rows with their own digests, so the next sync writes
   exactly what is still missing: it resumes;
3. marks the state as syncing that run (still naming the last verified one), deletes and upserts
   in batches, then refreshes the store's indexes;
4. reads every row back and recomputes its digest from the values the store returns, so a row
   edited or deleted behind the tool's back, or a lost write, is found; only then does the state
   name the run. A crash anywhere before leaves the state naming the previous run.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.sync.plan import Plan, batches, make_plan
from pipeline.sync.rows import DIGEST, row_digests, set_digest


class StoreError(Exception):
    """The store cannot be reached or opened (no server, refused, locked by another process)."""


@dataclass(frozen=True)
class SyncState:
    run_id: str | None  # the last run synced and verified; None before the first
    syncing: str | None = None  # a run whose sync began and did not finish (verified)
    chunks: int = 0  # rows of ``run_id``
    digest: str = ""  # ``rows.set_digest`` of ``run_id``'s rows


class Store(Protocol):
    """A vector store holding one run's rows (``rows.schema(dim)``), keyed by chunk_id."""

    def open(self, dim: int, sparse: bool) -> None:
        """Create what is missing (table, state); raise ValueError if what exists cannot hold
        these rows (another dimension)."""

    def state(self) -> SyncState | None: ...

    def save_state(self, state: SyncState) -> None: ...

    def digests(self) -> dict[str, str]:
        """chunk_id -> the ``row_digest`` stored with the row."""

    def upsert(self, rows: pa.Table) -> None:
        """Insert or replace ``rows`` (``rows.schema(dim)``, digest included) by chunk_id."""

    def delete(self, chunk_ids: Sequence[str]) -> None: ...

    def read_all(self) -> pa.Table:
        """Every row as the store holds it, in ``rows.schema(dim)``."""

    def finish(self) -> list[str]:
        """Build or refresh indexes after writing; notes for the report (an index skipped and
        why)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Verification:
    rows: int
    missing: tuple[str, ...] = ()  # in the run, not in the store
    extra: tuple[str, ...] = ()  # in the store, not in the run
    differ: tuple[str, ...] = ()  # a synced value differs from the run's
    stale: tuple[str, ...] = ()  # values right, the stored row_digest wrong

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.differ or self.stale)

    def describe(self, expected: int) -> str:
        parts = [f"store holds {self.rows} rows, the run {expected}"]
        for name, ids in (("missing", self.missing), ("not in the run", self.extra),
                          ("values differ", self.differ), ("stored row_digest wrong", self.stale)):
            if ids:
                shown = ", ".join(ids[:5]) + (f", ... ({len(ids)} in all)" if len(ids) > 5 else "")
                parts.append(f"{name}: {shown}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Report:
    run_id: str
    written: int
    deleted: int
    unchanged: int
    resumed: bool  # the store's state named an unfinished sync
    previous: str | None  # the run the store held, verified, before
    verification: Verification
    notes: tuple[str, ...] = field(default=())


def verify(store: Store, run: pa.Table) -> Verification:
    """Every row the store returns, its digest recomputed from the values, against the run's."""
    held = store.read_all()
    recomputed = dict(zip(held.column("chunk_id").to_pylist(), row_digests(held)))
    recorded = dict(zip(held.column("chunk_id").to_pylist(), held.column(DIGEST).to_pylist()))
    expected = dict(zip(run.column("chunk_id").to_pylist(), run.column(DIGEST).to_pylist()))
    return Verification(
        rows=len(held),
        missing=tuple(sorted(expected.keys() - recomputed.keys())),
        extra=tuple(sorted(recomputed.keys() - expected.keys())),
        differ=tuple(sorted(c for c, d in recomputed.items() if c in expected and expected[c] != d)),
        stale=tuple(sorted(c for c, d in recomputed.items()
                           if c in expected and expected[c] == d and recorded[c] != d)),
    )


def check(store: Store, run: pa.Table, sparse: bool) -> Verification:
    """Verify ``store`` against ``run`` and write nothing (``chunkline sync --check``)."""
    store.open(run.schema.field("vector").type.list_size, sparse)
    return verify(store, run)


def sync(store: Store, run_id: str, run: pa.Table, batch_size: int, sparse: bool,
         repair: bool = False, progress: Callable[[str], None] | None = None) -> Report:
    """Make ``store`` equal to ``run`` (``rows.load_rows``) and verify it. ``repair``: plan from
    the values the store holds (read back whole) instead of its recorded digests, so rows
    edited behind the tool's back are written again."""
    say = progress or (lambda line: None)
    dim = run.schema.field("vector").type.list_size
    store.open(dim, sparse)
    before = store.state()
    ids = run.column("chunk_id").to_pylist()
    wanted = dict(zip(ids, run.column(DIGEST).to_pylist()))
    if repair:
        held = store.read_all()
        # A row is kept only where its values and its recorded digest both agree with each
        # other; a wrong recorded digest (right values) is rewritten too, or it would stay wrong.
        holding = {chunk_id: value if value == recorded else ""
                   for chunk_id, value, recorded in zip(held.column("chunk_id").to_pylist(),
                                                        row_digests(held), held.column(DIGEST).to_pylist())}
    else:
        holding = store.digests()
    plan = make_plan(wanted, holding)
    if not plan.empty:
        # Marked before the first write: a crash from here on leaves a state that still names
        # the last verified run, and says which sync did not finish.
        store.save_state(SyncState(before.run_id if before else None, run_id,
                                   before.chunks if before else 0, before.digest if before else ""))
    _apply(store, run, plan, batch_size, say)
    notes = store.finish() if not plan.empty or before is None or before.run_id != run_id else []
    checked = verify(store, run)
    if checked.ok:
        store.save_state(SyncState(run_id, None, len(run), set_digest(ids, list(wanted.values()))))
    return Report(run_id, len(plan.upsert), len(plan.delete), plan.unchanged,
                  bool(before and before.syncing), before.run_id if before else None, checked,
                  tuple(notes))


def _apply(store: Store, run: pa.Table, plan: Plan, batch_size: int, say: Callable[[str], None]) -> None:
    total = -(-len(plan.delete) // batch_size) + -(-len(plan.upsert) // batch_size)
    done = 0
    for chunk_ids in batches(plan.delete, batch_size):
        store.delete(list(chunk_ids))
        done += 1
        say(f"batch {done}/{total}: deleted {len(chunk_ids)}")
    if not plan.upsert:
        return
    # A batch is a take of the run's rows at the positions of its chunk ids.
    positions = pc.index_in(pa.array(plan.upsert, pa.string()), run.column("chunk_id")).to_numpy()
    for part in batches(positions, batch_size):
        store.upsert(run.take(pa.array(part)))
        done += 1
        say(f"batch {done}/{total}: upserted {len(part)}")


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
