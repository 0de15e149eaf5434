"""The run report: ``OUTPUT/<run_id>/report.html``, one self-contained page about a run (the
document funnel by format, rejections, duplicate clusters, boilerplate removed, chunk sizes
against the budget, vectors reused and embedded, context cost, time, and one sample document
per format with its chunk boundaries drawn over its text).

``gather.py`` reads the run (manifest and tables, bounded), ``render.py`` and ``svg.py`` write
the page. ``pipeline/run.py`` writes it beside the manifest when a run publishes;
``chunkline report OUTPUT [--run RUN_ID]`` rebuilds it for any run.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from chunkline.index import storage
from chunkline.pipeline.manifest import ManifestError, resolve_run
from chunkline.pipeline.report.gather import ShardError, gather
from chunkline.pipeline.report.render import render

REPORT = "report.html"


def write_report(run_dir: str) -> str:
    """Write ``run_dir/report.html`` and return its path."""
    # Written through Beam's filesystems (any scheme a run can write to); reading the run and
    # the command's arguments need no Beam: `chunkline query` and `runs` start without it.
    from apache_beam.io.filesystems import FileSystems

    page = render(gather(run_dir))
    path = FileSystems.join(run_dir, REPORT)
    with FileSystems.create(path) as handle:
        # Text from files may hold lone surrogates (decoded with surrogateescape upstream):
        # written as U+FFFD rather than failing the report.
        handle.write(page.encode("utf-8", "replace"))
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", help="output directory (holding LATEST) or a run directory")
    parser.add_argument("--run", metavar="RUN_ID",
                        help="the run under OUTPUT to report on (default: the one LATEST names)")


def _run_dir(output: str, run_id: str | None) -> str:
    if run_id is not None:
        if not run_id or "/" in run_id or run_id in (".", ".."):
            raise ManifestError(f"--run expects a run id, got {run_id!r}")
        return storage.join(output, run_id)
    found = resolve_run(output)
    if found is None:
        raise ManifestError(f"{output}: neither a run directory nor an output with a LATEST run")
    return found


def report_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``chunkline report``: 0 and the report's path, or 2 and why the run could not be read
    (its manifest, or a shard the manifest lists), on one line."""
    try:
        path = write_report(_run_dir(args.output, args.run))
    except (ManifestError, ShardError) as exc:
        print(f"chunkline report: {exc}", file=err)
        return 2
    print(path, file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chunkline report", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return report_command(args, sys.stdout, sys.stderr)


__all__ = ["REPORT", "ShardError", "add_arguments", "main", "report_command", "write_report"]
