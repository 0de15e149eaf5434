"""Make a vector store equal to a run, resumably, one sync at a time, and prove it.

The store keeps three things of its own (``Store``): each row's digest beside the row (written in
the same upsert as the row, so a row and its digest are never apart), one state record (the
last run fully synced and verified, the run a sync has begun, the row format its digests were
computed in: ``SyncState``), and a lock held by the sync writing it. A sync:

1. takes the store's lock (``Store.lock``): a second sync fails at once with ``StoreBusy``;
   a lock whose holder died is taken over (each store's module says how);
2. reads the run's rows and their digests (``chunkline.pipeline.sync.rows``);
3. plans against the digests the store holds (``chunkline.pipeline.sync.plan``): a sync killed between
   (or inside) batches left only whole rows with their own digests, so the next sync writes
   exactly what is still missing: it resumes;
4. marks the state as syncing that run (still naming the last verified one), deletes and upserts
   in batches, then refreshes the store's indexes;
5. reads every row back and recomputes its digest from the values the store returns, so a row
   edited, deleted or duplicated behind the tool's back, or a lost write, is found; only then
   does the state name the run. A crash anywhere before leaves the state naming the previous run.

Given the run's embedding signature (``chunkline.pipeline.sync.generations``), steps 3 to 5 act on the
generation of that signature: the one readers get now when the signature is the same (only the
changed rows are written, as above), else another one, found or made; once it verifies, the
store's alias moves to it (``Generations.switch``), and only then.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from chunkline.pipeline.sync.generations import Generations, generation_name
from chunkline.pipeline.sync.plan import Plan, batches, make_plan
from chunkline.pipeline.sync.rows import (
    DIGEST,
    ROW_FORMAT,
    VALUES_FORMAT,
    file_facts_absent,
    format_neutral_digests,
    has_principals,
    row_digests,
    set_digest,
)

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing's own from Python 3.13


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
    # The embedding signature of the rows (``generations.signature_of``); "" in a state written
    # before generations, found again from the run it names (``_legacy_signature``).
    signature: str = ""

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

    # A store may also name what its setup lacks for its readers (Qdrant's IDF modifier):
    #   setup_problems() -> list[str].


class TermStore(Store, Protocol):
    """A store whose readers weigh a query by IDF themselves (pgvector's query vector): it keeps
    the run's BM25 terms beside the rows (``holds_terms``)."""

    def terms(self) -> tuple[dict[int, int], int | None]:
        """(term_id -> df as held, N as held or None)."""

    def write_terms(self, upsert: list[tuple[int, int]], delete: list[int], chunks: int) -> None:
        """The df changes and N, in one transaction."""


class GenerationalStore(Store, Generations, Protocol):
    """A store of generations (``generations.Generations``; every store here), which ``sync``
    uses given a signature."""


def holds_terms(store: Store) -> TypeIs[TermStore]:
    return callable(getattr(store, "write_terms", None))


def _access(run: pa.Table) -> dict[str, bool]:
    """What ``Store.open`` is told of a run written with access control: its rows carry
    ``principals``, which the store holds as a filterable, indexed field (and, in PostgreSQL,
    behind row-level security). Nothing for any other run: a store, and a store written by
    hand for the tests, is opened as before."""
    return {"principals": True} if has_principals(run) else {}


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
    generation: str | None = None  # the table (collection) synced; None: not generation-aware
    new_generation: bool = False  # made by this sync: the store held no generation of the run's signature
    switched_from: str | None = None  # the generation the alias gave before this sync moved it
    kept: tuple[str, ...] = ()  # generations the alias no longer gives, left for a rollback
    dropped: tuple[str, ...] = ()  # generations removed (``drop_old``)


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
    problems = getattr(store, "setup_problems", None)
    setup = tuple(problems()) if callable(problems) else ()
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


def generational(store: Store) -> TypeIs[GenerationalStore]:
    """Whether the store holds generations (``generations.Generations``)."""
    return callable(getattr(store, "switch", None))


@dataclass(frozen=True)
class Placement:
    """Where a run's rows belong in a store of generations."""
    current: str | None  # the generation the alias gives now; None: an empty store
    current_signature: str  # its signature; "" when not known
    target: str | None  # the generation of the run's signature; None: none yet
    existing: tuple[str, ...]  # every generation held
    # (generation, signature) of generations synced before signatures were recorded, found again
    # (``_legacy_signature``): a sync records them.
    found_again: tuple[tuple[str, str], ...] = ()


def place(store: GenerationalStore, signature: str, run: pa.Table, lookup: Callable[[str], str | None] | None,
          sparse: bool, create: bool) -> Placement:
    """The generation ``run`` (of ``signature``) belongs in: the current one when its signature
    is the run's, else another of that signature, else (``create``) a new name for it: the plain
    table for an empty store, ``generations.generation_name`` otherwise. Reads only."""
    names = store.generations()
    current = store.current()
    signatures = {}
    stateless = False
    found_again = []
    for name in names:
        store.use(name)
        state = store.state()
        found = state.signature if state else ""
        if not found and state is not None:
            found = _legacy_signature(store, state, run, signature, lookup, sparse)
            if found:
                found_again.append((name, found))
        stateless = stateless or (name == current and state is None)
        signatures[name] = found
    matches = [name for name in names if signatures[name] == signature]
    target = current if current in matches else (matches[0] if matches else None)
    if stateless:
        # A table with no sync state is not one chunkline finished writing: the rows go there, as
        # before generations, and ``Store.open`` refuses it when it is someone else's.
        target = current
    if target is None and create:
        target = store.base if not names else generation_name(store.base, signature)
    return Placement(current, signatures.get(current, "") if current else "", target, tuple(names),
                     tuple(found_again))


def _legacy_signature(store: Store, state: SyncState, run: pa.Table, signature: str,
                      lookup: Callable[[str], str | None] | None, sparse: bool) -> str:
    """The signature of a generation synced before signatures were recorded: its run's, when
    the run is still in OUTPUT (``lookup``); else the run's own when the store holds one of the
    run's rows exactly (same text, same vector bytes: the same model made it); else unknown."""
    for run_id in (state.run_id, state.syncing):
        found = lookup(run_id) if lookup and run_id else None
        if found:
            return found
    try:
        if not store.open(run.schema.field("vector").type.list_size, sparse, create=False, **_access(run)):
            return ""
    except ValueError:  # another width: another signature
        return ""
    wanted = dict(zip(run.column("chunk_id").to_pylist(), run.column(DIGEST).to_pylist()))
    return signature if any(wanted.get(c) == d for c, d in store.digests()) else ""


def check(store: Store, run: pa.Table, sparse: bool, terms: pa.Table | None = None,
          signature: str | None = None, lookup: Callable[[str], str | None] | None = None) -> Verification:
    """Verify ``store`` against ``run`` and write nothing (``chunkline sync --check``): no
    table, state or lock is created; a store with nothing in it holds 0 rows. StoreBusy while
    a sync is writing it (what it holds then is half of one run). With ``signature``, the
    generation of that signature is verified, and a generation the alias does not give fails."""
    holder = store.busy()
    if holder:
        raise StoreBusy(f"a sync is writing this store ({holder}): check again when it is done")
    nothing = Verification(rows=0, expected=len(run), missing=tuple(run.column("chunk_id").to_pylist()))
    aside: tuple[str, ...] = ()
    if generational(store):
        if signature is None:
            current = store.current()
            if current is None:
                return nothing
            store.use(current)
        else:
            placed = place(store, signature, run, lookup, sparse, create=False)
            if placed.target is None:
                return nothing
            store.use(placed.target)
            if placed.target != placed.current:
                aside = (f"readers of the alias {store.base!r} get generation {placed.current!r}, "
                         f"not this run's {placed.target!r}: a sync switches them",)
    if not store.open(run.schema.field("vector").type.list_size, sparse, create=False, **_access(run)):
        return nothing
    state = store.state()
    found = verify(store, run, state.row_format if state else ROW_FORMAT, terms)
    holder = store.busy()
    if holder:
        raise StoreBusy(f"a sync began writing this store during the check ({holder}): check "
                        "again when it is done")
    return replace(found, setup=found.setup + aside) if aside else found


def sync(store: Store, run_id: str, run: pa.Table, batch_size: int, sparse: bool,
         repair: bool = False, progress: Callable[[str], None] | None = None,
         stop: Callable[[], bool] = lambda: False, terms: pa.Table | None = None,
         signature: str | None = None, lookup: Callable[[str], str | None] | None = None,
         drop_old: bool = False) -> Report:
    """Make ``store`` equal to ``run`` (``rows.load_rows``) and verify it, holding the store's
    lock throughout. ``repair``: plan from the values the store holds (read back whole)
    instead of its recorded digests, so rows edited behind the tool's back are written again.
    ``stop()`` is asked before each batch: True raises KeyboardInterrupt there, between two
    whole batches (the next sync resumes), never inside a store client's write. ``terms``: the
    run's BM25 terms (``rows.terms_table``), written where the store holds them, changed ones
    only.

    ``signature``: the run's embedding signature (``generations.signature_of``): the rows go to
    the generation of that signature and the alias moves to it once verified (see
    ``chunkline.pipeline.sync.generations``); ``lookup(run_id)`` gives the signature of another run of the
    index, for a generation synced before signatures were recorded; ``drop_old`` removes every
    other generation once the alias gives the run. Without ``signature`` the rows go to the
    generation the alias gives (or the plain table of an empty store)."""
    with store.lock(run_id):
        if not generational(store):
            return _sync_locked(store, run_id, run, batch_size, sparse, repair, progress, stop, terms)
        if signature is None:
            store.use(store.current() or store.base)
            return _sync_locked(store, run_id, run, batch_size, sparse, repair, progress, stop, terms)
        return _sync_generation(store, run_id, run, batch_size, sparse, repair, progress, stop,
                                terms, signature, lookup, drop_old)


def _sync_generation(store: GenerationalStore, run_id: str, run: pa.Table, batch_size: int, sparse: bool,
                     repair: bool, progress: Callable[[str], None] | None, stop: Callable[[], bool],
                     terms: pa.Table | None, signature: str,
                     lookup: Callable[[str], str | None] | None, drop_old: bool) -> Report:
    say = progress or (lambda line: None)
    placed = place(store, signature, run, lookup, sparse, create=True)
    target = placed.target
    if target is None:  # place() names one whenever it may create
        raise ValueError(f"no generation for signature {signature!r}")
    if placed.current is not None and target != placed.current:
        say(f"generation {target}: the run's embedding signature differs from that of "
            f"{placed.current}, which readers get until {target} verifies")
    for name, found in placed.found_again:
        store.use(name)
        state = store.state()
        if state is not None:  # found again from its state (place), held under the lock since
            store.save_state(replace(state, signature=found))
    store.use(target)
    report = _sync_locked(store, run_id, run, batch_size, sparse, repair, progress, stop, terms,
                          signature)
    existing = list(placed.existing)
    switched = None
    if report.verification.ok and placed.current is not None and target != placed.current:
        # The plain table of a store's first generation gives its name to the alias (PostgreSQL's
        # views and Qdrant's aliases share the tables' namespace): it moves to its generation's.
        rename = (generation_name(store.base, placed.current_signature)
                  if placed.current == store.base else None)
        if rename is not None and rename in existing:
            raise ValueError(f"cannot move the first generation {store.base!r} to {rename!r}: "
                             f"a table of that name exists already")
        store.switch(target, placed.current, rename)
        switched = placed.current
        if rename is not None:
            existing = [rename if name == store.base else name for name in existing]
    others = tuple(name for name in existing if name != target)
    dropped: tuple[str, ...] = ()
    if drop_old and report.verification.ok:
        for name in others:
            store.drop(name)
        dropped = others
    return replace(report, generation=target, new_generation=target not in placed.existing,
                   switched_from=switched, kept=() if dropped else others, dropped=dropped)


def _sync_locked(store: Store, run_id: str, run: pa.Table, batch_size: int, sparse: bool,
                 repair: bool, progress: Callable[[str], None] | None,
                 stop: Callable[[], bool], terms: pa.Table | None = None,
                 signature: str | None = None) -> Report:
    say = progress or (lambda line: None)
    dim = run.schema.field("vector").type.list_size
    store.open(dim, sparse, **_access(run))
    before = store.state()
    # The rows' signature: the run's, else (a sync that is not generation-aware) what it was.
    signature = signature or (before.signature if before else "")
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
                                   before.row_format if before else ROW_FORMAT, signature))
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
    upgraded_from = before.row_format if before is not None and before.row_format < ROW_FORMAT else None
    if checked.ok:
        store.save_state(SyncState(run_id, None, len(run), set_digest(ids, list(wanted.values())),
                                   ROW_FORMAT, signature))
    return Report(run_id, len(plan.upsert), len(plan.delete), plan.unchanged,
                  bool(before and before.syncing), before.run_id if before else None, checked,
                  tuple(notes), upgraded_from, terms_written, terms_deleted)


def _write_terms(store: TermStore, terms: pa.Table, chunks: int) -> tuple[int, int]:
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
