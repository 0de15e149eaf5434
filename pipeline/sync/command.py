"""``chunkline sync OUTPUT --to URI``: the command around ``chunkline.pipeline.sync.core.sync``.

Exit status (``chunkline.pipeline.exits``): 0 when the store equals the run (verified); 1 when
verification found a difference (named on stderr); 2 for a usage error (no such run, a run
not published without ``--unpublished``, an unknown URI, a store that cannot hold the run, a
damaged index file); 69 when the store cannot be reached or a write failed (retry: the next sync
resumes); 75 when another sync holds the store (retry later).

``chunkline grant URI --role NAME --principals a,b`` (``--revoke``; no ``--role``: list) sets
what a PostgreSQL reader role reads, its row of the grants table row-level security reads
(``chunkline.pipeline.sync.pgvector``). Exit status: 0 done; 2 a usage error (not PostgreSQL, no such
role, a malformed principal, a role that may not write grants); 69 the store unreachable.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from typing import TYPE_CHECKING, Callable, Iterator, TextIO

if TYPE_CHECKING:
    from chunkline.index.manifest_types import Manifest
    from chunkline.pipeline.sync.core import Report


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkline sync",
        description="Make a vector store equal to a run of the index: upsert changed chunks, "
                    "delete removed ones, verify every row.")
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sync options, for a ``sync`` subparser of the chunkline CLI."""
    parser.add_argument("output", help="the index's output directory (its LATEST run is synced)")
    parser.add_argument("--to", required=True, metavar="URI",
                        help="the store: a directory or lancedb:///dir, postgresql://..., "
                             "qdrant:///dir, http(s)://host:6333; ?table=NAME (default chunks)")
    parser.add_argument("--run", metavar="RUN_ID",
                        help="sync this run of OUTPUT (a run id, a directory name under OUTPUT) "
                             "instead of the one LATEST names")
    parser.add_argument("--unpublished", action="store_true",
                        help="allow --run to name a run that was not published (held back by "
                             "the publish guard, or not reconciled)")
    parser.add_argument("--batch-size", type=int, default=1000, metavar="N",
                        help="rows per write (one transaction or commit each; default 1000)")
    parser.add_argument("--repair", action="store_true",
                        help="compare the store's values, not its recorded digests: rewrites rows "
                             "edited behind the tool's back")
    parser.add_argument("--check", action="store_true",
                        help="verify the store against the run and write nothing")
    parser.add_argument("--drop-old-generations", action="store_true",
                        help="once the store's alias gives the run, remove the store's other "
                             "generations (tables of other embedding signatures, kept until "
                             "then for a rollback)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run_args(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run a sync from parsed ``add_arguments`` options; the exit status (``chunkline.pipeline.exits``)."""
    # Imported here, not above: the chunkline CLI builds this parser for every command, and
    # Beam's filesystems and the store clients take seconds to import.
    from chunkline.pipeline import exits
    from chunkline.pipeline.manifest import ManifestError
    from chunkline.pipeline.redact import redacted
    from chunkline.pipeline.sync.core import StoreBusy, check, stderr_progress, sync
    from chunkline.pipeline.sync.generations import signature_of
    from chunkline.pipeline.sync.rows import load_rows, terms_table
    from chunkline.pipeline.sync.uri import open_store

    if args.batch_size < 1:
        print(f"error: --batch-size must be >= 1, got {args.batch_size}", file=err)
        return exits.USAGE
    drop_old = getattr(args, "drop_old_generations", False)
    if drop_old and args.check:
        print("error: --check writes nothing: it cannot --drop-old-generations", file=err)
        return exits.USAGE
    try:
        run_dir, manifest, notes = select_run(args.output, args.run, getattr(args, "unpublished", False))
        rows = load_rows(run_dir, manifest)
        terms = terms_table(run_dir, manifest)
        signature = signature_of(manifest)
    except (ManifestError, ValueError, FileNotFoundError) as exc:
        print(f"error: {redacted(str(exc))}", file=err)
        return exits.USAGE
    for line in notes:
        print(f"note: {line}", file=err)
    where, store = redacted(args.to), None
    try:
        store = open_store(args.to)
        where = store_name(store, args.to)
        if hasattr(store, "public") and manifest.access is not None:
            # PostgreSQL writes the run's public principal into its read policy.
            store.public = manifest.access.public or store.public
        if args.check:
            found = check(store, rows, sparse=manifest.bm25 is not None, terms=terms,
                          signature=signature, lookup=signature_lookup(run_dir))
        else:
            with _stop_on_interrupt() as stop:
                report = sync(store, manifest.run_id, rows, args.batch_size,
                              sparse=manifest.bm25 is not None, repair=args.repair,
                              progress=None if args.quiet else stderr_progress, stop=stop,
                              terms=terms, signature=signature, lookup=signature_lookup(run_dir),
                              drop_old=drop_old)
    except StoreBusy as exc:
        print(f"error: busy: {redacted(str(exc))}", file=err)
        return exits.BUSY
    except ValueError as exc:
        print(f"error: {where}: {redacted(str(exc))}", file=err)
        return exits.USAGE
    except Exception as exc:  # noqa: BLE001 - narrowed by _store_failure, re-raised otherwise
        if not _store_failure(exc):
            raise
        print(f"error: {where}: {redacted(_one_line(exc))}; retry: the next sync resumes", file=err)
        return exits.STORE_UNAVAILABLE
    finally:
        try:
            if store is not None:
                store.close()
        except Exception:  # noqa: BLE001 - a failed close must not hide the sync's own status
            pass
    if args.check:
        note = found.format_note()
        if not found.ok:
            print(f"error: {where} does not match run {manifest.run_id}: {found.describe()}",
                  file=err)
            return exits.NOT_DONE
        print(f"verified: {found.rows} rows match run {manifest.run_id} in {where}", file=out)
        if note:
            print(f"note: {note}", file=out)
        return exits.OK
    print(summary(report, where), file=out, flush=True)
    if not report.verification.ok:
        aside = (f" (in generation {report.generation}; the alias was not moved)"
                 if report.new_generation else "")
        print(f"error: {where} does not match run {report.run_id}{aside}: "
              f"{report.verification.describe()}. Run the sync again with --repair to "
              "rewrite those rows.", file=err)
        return exits.NOT_DONE
    return exits.OK


@contextlib.contextmanager
def _stop_on_interrupt() -> Iterator[Callable[[], bool]]:
    """The first Ctrl-C (SIGINT) asks the sync to stop before its next batch: an interrupt
    raised inside a store client's native write can abort the process. A second one
    interrupts at once, as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    asked = threading.Event()

    def ask(signum, frame) -> None:
        asked.set()
        signal.signal(signal.SIGINT, previous)
        print("chunkline sync: stopping after the batch being written (Ctrl-C again to stop now)",
              file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, ask)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def select_run(output: str, run: str | None, unpublished: bool = False) -> tuple[str, Manifest, list[str]]:
    """(run directory, manifest, notes for the operator) of the run to sync: ``run`` of
    ``output``, or the run LATEST names (``output`` may itself be a run directory). A run that
    was not published needs ``unpublished``; ManifestError naming what is wrong otherwise."""
    from apache_beam.io.filesystems import FileSystems

    from chunkline.pipeline.manifest import MANIFEST, ManifestError, complete_runs, latest_run, load_manifest, resolve_run

    latest = None
    run_dir: str | None
    if run is not None:
        if not run or "/" in run or "\\" in run or run in (".", ".."):
            raise ManifestError(f"--run takes the id of a run of {output} (a directory name under "
                                f"it), got {run!r}; to sync a run of another index, give that "
                                f"index as OUTPUT")
        run_dir = FileSystems.join(output, run)
        if not FileSystems.exists(FileSystems.join(run_dir, MANIFEST)):
            raise ManifestError(f"{output} has no run {run!r} (no {run_dir}/{MANIFEST})")
        latest = latest_run(output)
    else:
        run_dir = resolve_run(output)
        if run_dir is None:
            found = complete_runs(output)
            hint = (f"; it holds complete runs (newest {found[0].rsplit('/', 1)[-1]}): pass "
                    f"--run to sync one") if found else ": run `chunkline run` first"
            raise ManifestError(f"no manifest.json or LATEST under {output}{hint}")
        latest = run_dir
    manifest = load_manifest(run_dir)
    notes = []
    why = ([f"held back by the publish guard ({'; '.join(manifest.held_back)})"]
           if manifest.held_back else [])
    if not manifest.reconciled:
        why.append(f"not reconciled ({'; '.join(manifest.problems)})")
    latest_name = latest.rstrip("/").rsplit("/", 1)[-1] if latest else None
    named = f"LATEST names {latest_name}" if latest_name else "nothing is published"
    if why:
        if not unpublished:
            raise ManifestError(f"run {manifest.run_id} was not published: {'; '.join(why)}; "
                                f"{named}. Pass --unpublished to sync it anyway")
        notes.append(f"syncing run {manifest.run_id}, which was not published "
                     f"({'; '.join(why)}); {named}")
    elif latest_name and latest_name != manifest.run_id:
        notes.append(f"syncing run {manifest.run_id}, not the one LATEST names ({latest_name})")
    return run_dir, manifest, notes


def signature_lookup(run_dir: str) -> Callable[[str], str | None]:
    """``lookup(run_id)``: the embedding signature of another run of the index ``run_dir``
    belongs to (a sibling directory), or None where it is gone or unreadable. It tells the
    signature of a generation synced before signatures were recorded."""
    from apache_beam.io.filesystems import FileSystems

    from chunkline.pipeline.manifest import MANIFEST, ManifestError, load_manifest
    from chunkline.pipeline.sync.generations import signature_of

    root = run_dir.rstrip("/").rsplit("/", 1)[0]

    def lookup(run_id: str) -> str | None:
        other = FileSystems.join(root, run_id)
        try:
            if not FileSystems.exists(FileSystems.join(other, MANIFEST)):
                return None
            return signature_of(load_manifest(other))
        except (ManifestError, OSError, ValueError):
            return None

    return lookup


def store_name(store, uri: str) -> str:
    """The store in words, for every message: which table where (passwords masked)."""
    from chunkline.pipeline.redact import redacted

    return getattr(store, "where", None) or redacted(uri)


def _one_line(exc: BaseException) -> str:
    from chunkline.pipeline.sync.core import StoreError

    text = " ".join(str(exc).split())
    if isinstance(exc, StoreError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _store_failure(exc: BaseException) -> bool:
    """A failure of the store or its client (a connection dropped, a disk full, a refused
    write), as opposed to a bug of ours: reported in one line, worth a retry."""
    from chunkline.pipeline.sync.core import StoreError

    module = type(exc).__module__.split(".")[0]
    return (isinstance(exc, (StoreError, OSError, RuntimeError))
            or module in ("psycopg", "lance", "lancedb", "qdrant_client", "httpx", "grpc"))


def summary(report: Report, where: str = "") -> str:
    from chunkline.pipeline.sync.rows import ROW_FORMAT

    resumed = " (resumed an unfinished sync)" if report.resumed else ""
    into = f" into {where}" if where else ""
    lines = [f"synced run {report.run_id}{into}{resumed}: {report.written} written, {report.deleted} "
             f"deleted, {report.unchanged} unchanged (store held {report.previous or 'nothing'})"]
    if report.terms_written or report.terms_deleted:
        lines.append(f"BM25 terms (for IDF at query time): {report.terms_written:,} written, "
                     f"{report.terms_deleted:,} deleted")
    if report.format_from is not None:
        lines.append(f"upgraded: the store was row format {report.format_from}, now "
                     f"{ROW_FORMAT}; every row the format changed was rewritten once (counted "
                     f"in written above)")
    if report.verification.ok:
        lines.append(f"verified: {report.verification.rows} rows, every synced column of every row")
    lines.extend(report.notes)
    lines.extend(generation_lines(report))
    return "\n".join(lines)


def generation_lines(report: Report) -> list[str]:
    """What a sync did to the store's generations, in words (nothing for a sync that stayed in
    the generation readers get)."""
    lines = []
    if report.switched_from:
        made = "a new generation, " if report.new_generation else ""
        lines.append(f"generation: the alias moved from {report.switched_from} to {report.generation} "
                     f"({made}another embedding signature): readers of the alias now get run "
                     f"{report.run_id}")
    if report.kept and (report.switched_from or report.new_generation):
        lines.append(f"kept for a rollback: {', '.join(report.kept)} (`chunkline publish OUTPUT "
                     f"RUN --to URI` moves the alias back; `chunkline sync ... "
                     f"--drop-old-generations` removes them)")
    if report.dropped:
        lines.append(f"dropped generations: {', '.join(report.dropped)}")
    return lines


def add_grant_arguments(parser: argparse.ArgumentParser) -> None:
    """``chunkline grant``: a PostgreSQL reader role's principals (``chunkline.pipeline.sync.pgvector``)."""
    parser.add_argument("to", metavar="URI",
                        help="the PostgreSQL store, as given to `chunkline sync --to` "
                             "(postgresql://...; ?table=NAME, default chunks)")
    parser.add_argument("--role", metavar="NAME",
                        help="the reader role (a PostgreSQL role, neither superuser nor owner); "
                             "without it, list the grants this connection may read")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--principals", metavar="P[,P...]",
                        help="what ROLE may read from its next query on, in place of what it "
                             "held (the public principal is every reader's)")
    action.add_argument("--revoke", action="store_true", help="take ROLE's grant away")


def grant_args(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run ``chunkline grant`` from parsed ``add_grant_arguments`` options; its exit status."""
    from chunkline.pipeline import exits
    from chunkline.pipeline.redact import redacted
    from chunkline.pipeline.sync.uri import open_store, scheme_and_rest, split_table

    if (args.role is None) != (args.principals is None and not args.revoke):
        print("error: --role NAME goes with --principals P[,P...] or --revoke (alone, no option "
              "lists the grants)", file=err)
        return exits.USAGE
    where, store = redacted(args.to), None
    try:
        bare, table = split_table(args.to)
        if scheme_and_rest(bare)[0] not in ("postgresql", "postgres"):
            raise ValueError("grants are PostgreSQL's (row-level security); LanceDB and Qdrant "
                             "readers filter with principals_where / principals_filter")
        store = open_store(args.to)
        where = store_name(store, args.to)
        from chunkline.pipeline.sync.pgvector import PgvectorStore  # loaded by open_store

        if not isinstance(store, PgvectorStore):  # the scheme is PostgreSQL's: it is one
            raise ValueError(f"{where} is not a PostgreSQL store")
        if args.role is None:
            held = store.grants()
            for role, principals in held:
                print(f"{role}\t{','.join(principals)}", file=out)
            if not held:
                print(f"no grant in {table}_grants that this role may read ({where})", file=err)
        elif args.revoke:
            done = store.revoke(args.role)
            print(f"{'revoked' if done else 'held no grant:'} {args.role} in {where}", file=out)
        else:
            granted, notes = store.grant(args.role, [p.strip() for p in args.principals.split(",")
                                                     if p.strip()])
            print(f"granted {args.role}: {','.join(granted)} (and the public rows) in {where}",
                  file=out)
            for note in notes:
                print(f"note: {note}", file=err)
    except ValueError as exc:
        print(f"error: {where}: {redacted(str(exc))}", file=err)
        return exits.USAGE
    except Exception as exc:  # noqa: BLE001 - narrowed by _store_failure, re-raised otherwise
        if getattr(exc, "sqlstate", None) == "42501":  # insufficient_privilege
            print(f"error: {where}: {redacted(_one_line(exc))}; grant as the role that syncs "
                  "(the grants table's owner)", file=err)
            return exits.USAGE
        if not _store_failure(exc):
            raise
        print(f"error: {where}: {redacted(_one_line(exc))}", file=err)
        return exits.STORE_UNAVAILABLE
    finally:
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
    return exits.OK


def main(argv: list[str] | None = None) -> int:
    return run_args(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
