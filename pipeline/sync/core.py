"""Make a vector store equal to a run, resumably, one sync at a time, and prove it.

The store keeps three things of its own (``Store``): each row's digest beside the row (written in
the same upsert as the row, so a row and its digest are never apart), one state record (the
last run fully synced and verified, the run a sync has begun, the row format its digests were
computed in: ``SyncState``), and a lock held by the sync writing it. A sync:

1. takes the store's lock (``Store.lock``): a second sync fails at once with ``StoreBusy``;
   a lock whose holder died is taken over (each store's module says how);
2. reads the run's rows and their digests (``pipeline.sync.rows``);
3. plans against the digests the store holds (``pipeline.sync.plan``): a sync killed between
   (or inside) batches left only whole rows with their own digests, so the next sync writes
   exactly what is still missing: it resumes;
4. marks the state as syncing that run (still naming the last verified one), deletes and upserts
   in batches, then refreshes the store's indexes;
5. reads every row back and recomputes its digest from the values the store returns, so a row
   edited, deleted or duplicated behind the tool's back, or a lost write, is found; only then
   does the state name the run. A crash anywhere before leaves the state naming the previous run.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from typing import Callable, Iterable, Protocol, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.sync.plan import Plan, batches, make_plan
from pipeline.sync.rows import (
    DIGEST,
    ROW_FORMAT,
    VALUES_FORMAT,
    file_facts_absent,
    format_neutral_digests,
    row_digests,
    set_digest,
)


class StoreError(Exception):
    """The store cannot be reached, opened or written (no server, refused, a write failed):
    worth a retry, which resumes."""


class StoreBusy(Exception):
    """Another sync holds the store's lock."""


@dataclass(frozen=True)
class SyncState:
    run_id: str | None  # the last run synced and verified; None before the first
    syncing: str | None = None  # a run whose sync began and did not finish (verified)
    chunks: int = 0  # rows of ``run_id``
    digest: str = ""  # ``rows.set_digest`` of ``run_id``'s rows
    # The ``rows.ROW_FORMAT`` the stored digests were computed in; a state written before
    # formats were recorded is format 1.
    row_format: int = 1

    @classmethod
    def from_record(cls, record: dict) -> "SyncState":
        """From a stored record, keys unknown to this version ignored, missing ones defaulted."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in record.items() if k in known}
        if values.get("row_format") is None:
            values.pop("row_format", None)
        return cls(**values)


class Store(Protocol):
    """A vector store holding one run's rows (``rows.schema(dim)``), keyed by chunk_id."""

    def lock(self, holder: str) -> AbstractContextManager:
        """Held for a whole sync: raises StoreBusy on entry when another live sync holds it.
        ``holder`` names this sync in the other's message."""

    def busy(self) -> str | None:
        """Who holds the lock now (a live sync), or None; takes nothing, writes nothing."""

    def open(self, dim: int, sparse: bool, create: bool = True) -> bool:
        """Open the table and state, creating what is missing when ``create``; False when there
        is nothing (and ``create`` is off). ValueError if what exists cannot hold these rows
        (another dimension, someone else's table)."""

    def state(self) -> SyncState | None: ...

    def save_state(self, state: SyncState) -> None: ...

    def digests(self) -> Iterable[tuple[str, str]]:
        """(chunk_id, the ``row_digest`` stored with the row) for every row, duplicates kept."""

    def upsert(self, rows: pa.Table) -> None:
        """Insert or replace ``rows`` (``rows.schema(dim)``, digest included) by chunk_id."""

    def delete(self, chunk_ids: Sequence[str]) -> None: ...

    def read_all(self) -> pa.Table:
        """Every row as the store holds it, in ``rows.schema(dim)``."""

    def finish(self) -> list[str]:
        """Build or refresh indexes after writing; notes for the report (an index skipped and
        why)."""

    def close(self) -> None: ...

    # A store whose readers weigh a query by IDF themselves (pgvector's query vector) keeps the
    # run's BM25 terms beside the rows; it then has these two as well (``holds_terms``):
    #   terms() -> (term_id -> df as held, N as held or None);
    #   write_terms(upsert: list[tuple[int, int]], delete: list[int], chunks: int) -> None:
    #     the df changes and N, in one transaction.
    # A store may also name what its setup lacks for its readers (Qdrant's IDF modifier):
    #   setup_problems() -> list[str].


def holds_terms(store: Store) -> bool:
    return callable(getattr(store, "write_terms", None))


@dataclass(frozen=True)
class Verification:
    rows: int  # rows the store holds
    expected: int  # rows of the run
    missing: tuple[str, ...] = ()  # in the run, not in the store
    extra: tuple[str, ...] = ()  # in the store, not in the run
    differ: tuple[str, ...] = ()  # a synced value differs from the run's
    stale: tuple[str, ...] = ()  # values right, the stored row_digest wrong
    duplicate: tuple[str, ...] = ()  # held in more than one row
    # The row format of the store's recorded digests when older than this version's: its
    # digests are expected to differ (``stale``), and the next sync rewrites those rows once.
    store_format: int = ROW_FORMAT
    terms_differ: int = 0  # BM25 terms (term_id, df) held otherwise than the run's, or missing
    # What the store is set up otherwise than its readers rely on (``Store.setup_problems``).
    setup: tuple[str, ...] = ()

    @property
    def outdated(self) -> bool:
        return self.store_format < ROW_FORMAT

    @property
    def ok(self) -> bool:
        drift = self.missing or self.extra or self.differ or self.duplicate
        older = self.store_format < VALUES_FORMAT
        terms = not (self.terms_differ or self.setup) or older
        return not drift and terms and (not self.stale or self.outdated) and self.rows == self.expected

    def describe(self) -> str:
        parts = [f"the store holds {self.rows:,} rows for the run's {self.expected:,}"]
        for name, ids in (("missing", self.missing), ("not in the run", self.extra),
                          ("values differ", self.differ), ("held more than once", self.duplicate),
                          ("stored row_digest wrong", () if self.outdated else self.stale)):
            if ids:
                shown = ", ".join(ids[:5]) + (f", ... ({len(ids)} in all)" if len(ids) > 5 else "")
                parts.append(f"{name}: {shown}")
        if self.terms_differ:
            parts.append(f"BM25 terms: {self.terms_differ:,} held otherwise than the run's")
        parts.extend(self.setup)
        return "; ".join(parts)

    def format_note(self) -> str | None:
        if not self.outdated:
            return None
        what = ("its BM25 weights hold IDF and its metadata file facts"
                if self.store_format < VALUES_FORMAT else "its digests differ")
        return (f"the store is in row format {self.store_format}, this chunkline's {ROW_FORMAT} "
                f"({what}): the next sync rewrites {len(self.stale):,} rows once (not drift)")


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
    format_from: int | None = None  # the store's older row format, rewritten by this sync
    terms_written: int = 0  # BM25 terms upserted (a store that holds them)
    terms_deleted: int = 0


def verify(store: Store, run: pa.Table, store_format: int = ROW_FORMAT,
           terms: pa.Table | None = None) -> Verification:
    """Every row the store returns, its digest recomputed from the values, against the run's,
    row by row: a chunk held twice is found even where both copies are right. A store of an
    older values format (``rows.VALUES_FORMAT``): a row that differs only where the format
    changed is outdated (rewritten by the next sync), not drift. ``terms``: the run's BM25 terms,
    compared with the store's where it holds them."""
    held = store.read_all()
    held_ids = held.column("chunk_id").to_pylist()
    recomputed = row_digests(held)
    recorded = held.column(DIGEST).to_pylist()
    expected = dict(zip(run.column("chunk_id").to_pylist(), run.column(DIGEST).to_pylist()))
    seen: set[str] = set()
    duplicate, differ, stale = set(), set(), set()
    for chunk_id, value, stored in zip(held_ids, recomputed, recorded):
        if chunk_id in seen:
            duplicate.add(chunk_id)
        seen.add(chunk_id)
        if chunk_id not in expected:
            continue
        if expected[chunk_id] != value:
            differ.add(chunk_id)
        elif stored != value:
            stale.add(chunk_id)
    if differ and store_format < VALUES_FORMAT:
        outdated = _format_only(held, run, differ)
        differ -= outdated
        stale |= outdated
    terms_differ = 0
    if terms is not None and holds_terms(store):
        wanted = dict(zip(terms.column("term_id").to_pylist(), terms.column("df").to_pylist()))
        have, chunks = store.terms()
        terms_differ = (sum(have.get(t) != df for t, df in wanted.items()) + len(have.keys() - wanted.keys())
                        + (chunks != len(run)))
    setup = tuple(store.setup_problems()) if callable(getattr(store, "setup_problems", None)) else ()
    return Verification(
        rows=len(held), expected=len(run),
        missing=tuple(sorted(expected.keys() - seen)),
        extra=tuple(sorted(seen - expected.keys())),
        differ=tuple(sorted(differ)), stale=tuple(sorted(stale)),
        duplicate=tuple(sorted(duplicate)), store_format=store_format, terms_differ=terms_differ,
        setup=setup)


def _format_only(held: pa.Table, run: pa.Table, ids: set[str]) -> set[str]:
    """The chunk ids of ``ids`` whose held row equals the run's once the format's changes are
    left out (``rows.format_neutral_digests``): the BM25 weights, and a file fact only where the
    run's row does not carry it (one the user names in ``output.chunk_metadata`` still counts)."""
    wanted = pa.array(sorted(ids), pa.string())
    mine = held.filter(pc.is_in(held.column("chunk_id"), value_set=wanted))
    theirs = run.filter(pc.is_in(run.column("chunk_id"), value_set=wanted))
    theirs_ids = theirs.column("chunk_id").to_pylist()
    absent = dict(zip(theirs_ids, map(file_facts_absent, theirs.column("metadata").to_pylist())))
    expected = dict(zip(theirs_ids, format_neutral_digests(theirs, [()] * len(theirs))))
    mine_ids = mine.column("chunk_id").to_pylist()
    neutral = format_neutral_digests(mine, [absent.get(c, ()) for c in mine_ids])
    return {chunk_id for chunk_id, digest in zip(mine_ids, neutral) if expected.get(chunk_id) == digest}


def check(store: Store, run: pa.Table, sparse: bool, terms: pa.Table | None = None) -> Verification:
    """Verify ``store`` against ``run`` and write nothing (``chunkline sync --check``): no
    table, state or lock is created; a store with nothing in it holds 0 rows. StoreBusy while
    a sync is writing it (what it holds then is half of one run)."""
    holder = store.busy()
    if holder:
        raise StoreBusy(f"a sync is writing this store ({holder}): check again when it is done")
    if not store.open(run.schema.field("vector").type.list_size, sparse, create=False):
        return Verification(rows=0, expected=len(run), missing=tuple(run.column("chunk_id").to_pylist()))
    state = store.state()
    found = verify(store, run, state.row_format if state else ROW_FORMAT, terms)
    holder = store.busy()
    if holder:
        raise StoreBusy(f"a sync began writing this store during the check ({holder}): check "
                        "again when it is done")
    return found


def sync(store: Store, run_id: str, run: pa.Table, batch_size: int, sparse: bool,
         repair: bool = False, progress: Callable[[str], None] | None = None,
         stop: Callable[[], bool] = lambda: False, terms: pa.Table | None = None) -> Report:
    """Make ``store`` equal to ``run`` (``rows.load_rows``) and verify it, holding the store's
    lock throughout. ``repair``: plan from the values the store holds (read back whole)
    instead of its recorded digests, so rows edited behind the tool's back are written again.
    ``stop()`` is asked before each batch: True raises KeyboardInterrupt there, between two
    whole batches (the next sync resumes), never inside a store client's write. ``terms``: the
    run's BM25 terms (``rows.terms_table``), written where the store holds them, changed ones
    only."""
    with store.lock(run_id):
        return _sync_locked(store, run_id, run, batch_size, sparse, repair, progress, stop, terms)


def _sync_locked(store: Store, run_id: str, run: pa.Table, batch_size: int, sparse: bool,
                 repair: bool, progress: Callable[[str], None] | None,
                 stop: Callable[[], bool], terms: pa.Table | None = None) -> Report:
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
        holding = [(chunk_id, value if value == recorded else "")
                   for chunk_id, value, recorded in zip(held.column("chunk_id").to_pylist(),
                                                        row_digests(held), held.column(DIGEST).to_pylist())]
    else:
        holding = list(store.digests())
    plan = make_plan(wanted, holding)
    if not plan.empty:
        # Marked before the first write: a crash from here on leaves a state that still names
        # the last verified run (and its row format), and says which sync did not finish.
        store.save_state(SyncState(before.run_id if before else None, run_id,
                                   before.chunks if before else 0, before.digest if before else "",
                                   before.row_format if before else ROW_FORMAT))
    _apply(store, run, plan, batch_size, say, stop)
    terms_written = terms_deleted = 0
    if terms is not None and holds_terms(store):
        terms_written, terms_deleted = _write_terms(store, terms, len(run))
        if terms_written or terms_deleted:
            say(f"BM25 terms: {terms_written:,} written, {terms_deleted:,} deleted")
    # --repair also sets up again what a store's readers rely on (indexes, Qdrant's IDF modifier).
    refresh = repair or not plan.empty or before is None or before.run_id != run_id
    notes = store.finish() if refresh else []
    checked = verify(store, run, terms=terms)
    upgraded = before is not None and before.row_format < ROW_FORMAT
    if checked.ok:
        store.save_state(SyncState(run_id, None, len(run), set_digest(ids, list(wanted.values())),
                                   ROW_FORMAT))
    return Report(run_id, len(plan.upsert), len(plan.delete), plan.unchanged,
                  bool(before and before.syncing), before.run_id if before else None, checked,
                  tuple(notes), before.row_format if upgraded else None, terms_written, terms_deleted)


def _write_terms(store: Store, terms: pa.Table, chunks: int) -> tuple[int, int]:
    """Bring the store's BM25 terms to the run's: only terms whose df changed, new or gone, and
    N (the run's chunks, which its statistics count)."""
    wanted = dict(zip(terms.column("term_id").to_pylist(), terms.column("df").to_pylist()))
    have, held_chunks = store.terms()
    upsert = sorted((t, df) for t, df in wanted.items() if have.get(t) != df)
    delete = sorted(have.keys() - wanted.keys())
    if upsert or delete or held_chunks != chunks:
        store.write_terms(upsert, delete, chunks)
    return len(upsert), len(delete)


def _apply(store: Store, run: pa.Table, plan: Plan, batch_size: int, say: Callable[[str], None],
           stop: Callable[[], bool] = lambda: False) -> None:
    total = -(-len(plan.delete) // batch_size) + -(-len(plan.upsert) // batch_size)
    done = 0

    def check_stop() -> None:
        if stop():
            raise KeyboardInterrupt(f"stopped after batch {done}/{total}")

    for chunk_ids in batches(plan.delete, batch_size):
        check_stop()
        store.delete(list(chunk_ids))
        done += 1
        say(f"batch {done}/{total}: deleted {len(chunk_ids)}")
    if not plan.upsert:
        return
    # A batch is a take of the run's rows at the positions of its chunk ids.
    positions = pc.index_in(pa.array(plan.upsert, pa.string()), run.column("chunk_id")).to_numpy()
    for part in batches(positions, batch_size):
        check_stop()
        store.upsert(run.take(pa.array(part)))
        done += 1
        say(f"batch {done}/{total}: upserted {len(part)}")


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
