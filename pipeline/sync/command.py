"""``chunkline sync OUTPUT --to URI``: the command around ``pipeline.sync.core.sync``.

Exit status: 0 when the store equals the run (verified), 1 when verification found a
difference (named on stderr), 2 for a usage error (no run, an unknown URI, a store that cannot
hold the run or cannot be reached).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pipeline.sync.core import Report


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
    parser.add_argument("--run", metavar="RUN_ID", help="sync this run of OUTPUT instead of LATEST")
    parser.add_argument("--batch-size", type=int, default=1000, metavar="N",
                        help="rows per write (one transaction or commit each; default 1000)")
    parser.add_argument("--repair", action="store_true",
                        help="compare the store's values, not its recorded digests: rewrites rows "
                             "edited behind the tool's back")
    parser.add_argument("--check", action="store_true",
                        help="verify the store against the run and write nothing")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run_args(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run a sync from parsed ``add_arguments`` options; the exit status."""
    # Imported here, not above: the chunkline CLI builds this parser for every command, and
    # Beam's filesystems and the store clients take seconds to import.
    from apache_beam.io.filesystems import FileSystems

    from pipeline.manifest import ManifestError, load_manifest, resolve_run
    from pipeline.sync.core import StoreError, check, stderr_progress, sync
    from pipeline.sync.rows import load_rows
    from pipeline.sync.uri import open_store, redacted

    if args.batch_size < 1:
        print(f"error: --batch-size must be >= 1, got {args.batch_size}", file=err)
        return 2
    try:
        run_dir = FileSystems.join(args.output, args.run) if args.run else resolve_run(args.output)
        if run_dir is None:
            raise ManifestError(f"no manifest.json or LATEST under {args.output}: run `chunkline run` first")
        manifest = load_manifest(run_dir)
        rows = load_rows(run_dir, manifest)
        store = open_store(args.to)
    except (ManifestError, ValueError, FileNotFoundError, StoreError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    if args.check:
        try:
            found = check(store, rows, sparse=bool(manifest.get("bm25")))
        except (ValueError, StoreError) as exc:
            print(f"error: {exc}", file=err)
            return 2
        finally:
            store.close()
        if not found.ok:
            print(f"error: {redacted(args.to)} does not match run {manifest['run_id']}: "
                  f"{found.describe(len(rows))}", file=err)
            return 1
        print(f"verified: {found.rows} rows match run {manifest['run_id']}", file=out)
        return 0
    try:
        report = sync(store, manifest["run_id"], rows, args.batch_size,
                      sparse=bool(manifest.get("bm25")), repair=args.repair,
                      progress=None if args.quiet else stderr_progress)
    except (ValueError, StoreError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    finally:
        store.close()
    print(summary(report), file=out, flush=True)
    if not report.verification.ok:
        print(f"error: {redacted(args.to)} does not match run {report.run_id}: "
              f"{report.verification.describe(len(rows))}. Run the sync again with --repair to "
              "rewrite those rows.", file=err)
        return 1
    return 0


def summary(report: Report) -> str:
    resumed = " (resumed an unfinished sync)" if report.resumed else ""
    lines = [f"synced run {report.run_id}{resumed}: {report.written} written, {report.deleted} "
             f"deleted, {report.unchanged} unchanged (store held {report.previous or 'nothing'})"]
    if report.verification.ok:
        lines.append(f"verified: {report.verification.rows} rows, every synced column of every row")
    lines.extend(report.notes)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return run_args(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
