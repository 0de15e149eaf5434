"""The ``chunkline`` command."""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Iterable, Sequence, TextIO

from chunkline import (
    Chunk,
    Tokenizer,
    TokenizerNotAvailable,
    get_tokenizer,
    language_for,
    split,
    split_code,
)

from chunkline.extras import MissingExtra, missing_extra_line, require, require_installed
from chunkline.pipeline import exits

DEFAULT_TOKENIZER = "hf:all-MiniLM-L6-v2"
# Another run holds the output's lease: try again later (sysexits.h EX_TEMPFAIL).
EXIT_OUTPUT_BUSY = exits.BUSY


def _split_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        tokenizer = get_tokenizer(args.tokenizer)
    except (ValueError, TokenizerNotAvailable) as exc:
        print(f"chunkline split: {exc}", file=err)
        return 2
    failed = 0
    for path in args.files:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            print(f"chunkline split: {path}: {exc}", file=err)
            failed += 1
            continue
        language = language_for(path)
        try:
            if language is not None:
                # Source files split by syntax tree, as the pipeline does; `# comment` lines are
                # not headings.
                chunks = split_code(text, language, args.max_tokens, args.overlap, tokenizer,
                                    max_chars=args.max_chars)
            else:
                chunks = split(text, args.max_tokens, args.overlap, tokenizer, not args.no_markdown,
                               max_chars=args.max_chars)
        except ValueError as exc:
            print(f"chunkline split: {exc}", file=err)
            return 2
        if args.view:
            _write_view(path, text, chunks, tokenizer, args.max_tokens, out)
        else:
            _write_jsonl(path, text, chunks, out)
    return 1 if failed else 0


def _write_jsonl(doc: str, text: str, chunks: Iterable[Chunk], out: TextIO) -> None:
    for chunk in chunks:
        record = {
            "doc": doc,
            "start": chunk.start,
            "end": chunk.end,
            "headings": list(chunk.headings),
            "tokens": chunk.tokens,
            "oversized": chunk.oversized,
            "table_header": chunk.table_header,
            "text": text[chunk.start : chunk.end],
        }
        out.write(json.dumps(record, ensure_ascii=False) + "\n")


def _write_view(
    doc: str, text: str, chunks: Sequence[Chunk], tokenizer: Tokenizer, budget: int, out: TextIO
) -> None:
    """Chunks one after another, each under a rule naming its span, size and heading path;
    text re-read from the previous chunk (overlap) is marked off."""
    out.write(f"{doc}: {len(chunks)} chunks, {len(text)} characters, budget {budget} "
              f"{tokenizer.spec} tokens\n")
    previous_end = 0
    for n, chunk in enumerate(chunks):
        path = " › ".join(chunk.headings) or "(no heading)"
        flag = "  OVERSIZED" if chunk.oversized else ""
        out.write(f"\n──── #{n} [{chunk.start}:{chunk.end}] {chunk.tokens} tokens · {path}{flag}\n")
        body = text[chunk.start : chunk.end]
        if chunk.start < previous_end:
            reread = previous_end - chunk.start
            out.write(f"┆ overlap ┆{body[:reread]}┆ end of overlap ┆")
            body = body[reread:]
        out.write(body if body.endswith("\n") else body + "⏎\n")
        previous_end = chunk.end


def runner_option(beam_args: Sequence[str]) -> tuple[str | None, list[str]]:
    """Beam's ``--runner`` among the options after ``--`` (``--runner=X`` or ``--runner X``),
    and the other options. chunkline builds the job for ``runner.name``; a runner named only to
    Beam would be ignored, so it becomes ``runner.name`` (checked with the config: one line
    naming the runners it knows)."""
    rest, runner, items = [], None, list(beam_args)
    while items:
        item = items.pop(0)
        if item == "--runner" and items:
            runner = items.pop(0)
        elif item.startswith("--runner="):
            runner = item.split("=", 1)[1]
        else:
            rest.append(item)
    return runner, rest


def config_extras(config) -> list[tuple[str, str]]:
    """The extras (and the modules each brings) that what ``config`` turns on needs, checked
    before the job is built: installed, not imported (the stage that uses one imports it). The
    readers of HTML, PDF and Office files name theirs when they meet one."""
    needed = []
    if config.context is not None:
        needed.append(("context", config.context.provider))
    if config.secrets.mode != "allow":
        needed.append(("credentials", "detect_secrets"))
    if config.input.ocr.mode != "never":
        needed.append(("ocr", "rapidocr_onnxruntime"))
    if config.embed is not None:
        if config.embed.backend == "onnx":
            needed.append(("onnx", "onnxruntime"))
        # torch too: the plan imports it itself (embed.dtype auto asks torch what the CPU does).
        needed += [("embed", "sentence_transformers"), ("embed", "torch")]
    return needed


def _run_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from chunkline.pipeline.config import ConfigError, load_config
    from chunkline.pipeline.redact import redacted

    overrides = list(args.set or [])
    # `is not None`: an empty --output "" is a mistake to report, not a flag to ignore.
    if args.input is not None:
        overrides.append(f"input.pattern={json.dumps(args.input)}")
    if args.output is not None:
        overrides.append(f"output.path={json.dumps(args.output)}")
    if args.previous is not None:
        overrides.append(f"output.previous={json.dumps(args.previous)}")
    runner, args.beam_args = runner_option(args.beam_args)
    if runner is not None:  # the job is built for the config's runner: Beam's flag names it
        overrides.append(f"runner.name={json.dumps(runner)}")
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"chunkline run: {redacted(str(exc))}", file=err)
        return 2
    # Our progress lines at INFO; Beam's own chatter (type-hint notes, state cache) only when it
    # matters. First: Beam's PipelineOptions() calls logging.basicConfig() itself, and the first
    # call decides.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("chunkline").setLevel(logging.WARNING if args.quiet else logging.INFO)
    from chunkline.pipeline.runners import RunnerUnavailable, runner_flags

    try:  # a runner that cannot start here (no Prism binary): one line, before the model loads
        runner_flags(config.runner.name, list(config.runner.options) + list(args.beam_args))
    except RunnerUnavailable as exc:
        print(f"chunkline run: {redacted(str(exc))}", file=err)
        return exits.USAGE
    for extra, module in config_extras(config):  # before Beam starts: one line, exit 2
        require_installed(extra, module)
    from chunkline.embedder import ModelNotAvailable
    from chunkline.pipeline.lease import LeaseHeld
    from chunkline.pipeline.progress import RunProgress, progress_mode
    from chunkline.pipeline.run import run
    from chunkline.pipeline.summary import format_summary

    try:
        with RunProgress(err, progress_mode(err, args.quiet), args.progress_interval) as progress:
            summary = run(config, args.beam_args, allow_shrink=args.allow_shrink,
                          start_over=args.start_over, purge=args.purge)
            progress.settle(summary.counts)
    except LeaseHeld as exc:
        print(f"chunkline run: {redacted(str(exc))}", file=err)
        return EXIT_OUTPUT_BUSY
    except (ValueError, FileNotFoundError, ModelNotAvailable, TokenizerNotAvailable) as exc:
        print(f"chunkline run: {redacted(str(exc))}", file=err)
        return 2
    except RuntimeError as exc:
        # A reader in a worker met a format whose extra is missing: that line alone, exit 2.
        line = missing_extra_line(exc)
        print(f"chunkline run: {line or redacted(str(exc))}", file=err)
        return 1 if line is None else exits.USAGE
    print(format_summary(summary), file=out)
    if not summary.published:
        return 1
    if args.purge:
        # The purged run is published: every other run (and the snapshots, memo and files only
        # they reference) goes, so no byte of a removed document stays under the output.
        from chunkline.pipeline.runs import collect_and_report

        status = collect_and_report(config.output.path, 1, False, out, err, "chunkline run --purge")
        if status:
            return status
    if config.sink is None:
        return 0
    # The index is published either way; a store left behind is its own status (not "not
    # published", not "bad input"), and a rerun of `chunkline sync` (or of the run, which
    # reuses every vector) completes it.
    from chunkline.pipeline.sync.command import run_args as sync_command

    sync_args = argparse.Namespace(
        output=config.output.path, to=config.sink.to, run=summary.run_id, unpublished=False,
        batch_size=config.sink.batch_size, repair=False, check=False, quiet=True)
    status = sync_command(sync_args, out, err)
    if status:
        # sink.to is not repeated: a PostgreSQL URI may carry a password.
        print(f"chunkline run: run {summary.run_id} is published, but the sync into the sink "
              f"failed (sync exit {status}); `chunkline sync {config.output.path} --to <sink.to>` "
              f"completes it", file=err)
        return exits.PUBLISHED_SINK_FAILED
    return exits.OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chunkline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    split_parser = commands.add_parser(
        "split",
        help="split files into token-budgeted chunks (one JSON object per chunk)",
        description="Split UTF-8 text/Markdown files; prints one JSON object per chunk: "
        "doc, start, end, headings, tokens, oversized, text.",
    )
    split_parser.add_argument("files", nargs="+", metavar="FILE")
    split_parser.add_argument("--max-tokens", type=int, default=256)
    split_parser.add_argument("--overlap", type=int, default=0)
    split_parser.add_argument("--max-chars", type=int, default=None,
                              help="no chunk longer than this many characters, whatever the "
                              "tokenizer counts (default: 32 x max-tokens + 1024)")
    split_parser.add_argument(
        "--tokenizer", default=DEFAULT_TOKENIZER,
        help="words | chars | tiktoken:NAME_OR_PATH | hf:MODEL (default: %(default)s)",
    )
    split_parser.add_argument("--no-markdown", action="store_true",
                              help="do not read Markdown headings")
    split_parser.add_argument("--view", action="store_true",
                              help="human-readable view instead of JSON lines")
    split_parser.set_defaults(handler=_split_command)

    run_parser = commands.add_parser(
        "run", help="run the ingestion pipeline: read, dedupe, split, embed, write Parquet",
        description="Run the pipeline. Arguments after -- are passed to Beam as pipeline "
        "options (e.g. -- --direct_num_workers=2 --direct_running_mode=multi_processing).",
    )
    run_parser.add_argument("--config", default=None, help="YAML config (configs/local.yaml)")
    run_parser.add_argument("--input", help="file pattern; overrides input.pattern")
    run_parser.add_argument("--output", help="output directory; overrides output.path")
    run_parser.add_argument("--previous", metavar="OUTPUT",
                            help="reuse unchanged chunks' vectors from this index (an output "
                            "root or a run directory); default: the output's own LATEST run")
    run_parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                            help="override a config key, e.g. split.overlap=16 (repeatable)")
    run_parser.add_argument("--allow-shrink", action="store_true",
                            help="publish even if no document was kept or kept documents or "
                            "chunks fell by more than output.max_shrink against LATEST")
    run_parser.add_argument("--start-over", action="store_true",
                            help="the output has runs but no LATEST (it was lost): index from "
                            "nothing, reusing no vector and comparing with no run")
    run_parser.add_argument("--purge", action="store_true",
                            help="erase what is no longer live: rewrite every file holding a "
                            "removed row, write the memo anew, empty OUTPUT/_cache, then remove "
                            "every other run (gc --keep 1); for an erasure request")
    run_parser.add_argument("--quiet", action="store_true",
                            help="no live display and no progress lines; the summary only")
    run_parser.add_argument("--progress-interval", type=float, default=10.0, metavar="SECONDS",
                            help="off a terminal, a progress line per moving stage this often "
                            "(default 10)")
    run_parser.set_defaults(handler=_run_command, beam_args=[])

    from chunkline.pipeline.query_command import add_arguments as add_query_arguments, query_command

    query_parser = commands.add_parser(
        "query", help="search an index's Parquet shards with the index's own model",
    )
    add_query_arguments(query_parser)
    query_parser.set_defaults(handler=query_command)

    from chunkline.pipeline.sync.command import add_arguments as add_sync_arguments, run_args as sync_command

    sync_parser = commands.add_parser(
        "sync", help="make a vector store (LanceDB, PostgreSQL + pgvector, Qdrant) equal to the "
        "index's LATEST run, verified row by row")
    add_sync_arguments(sync_parser)
    sync_parser.set_defaults(handler=sync_command)

    from chunkline.pipeline.sync.command import add_grant_arguments, grant_args

    grant_parser = commands.add_parser(
        "grant", help="set, revoke or list a PostgreSQL reader role's principals (the grants "
        "table row-level security reads)")
    add_grant_arguments(grant_parser)
    grant_parser.set_defaults(handler=grant_args)

    from chunkline.pipeline.report import add_arguments as add_report_arguments, report_command

    report_parser = commands.add_parser(
        "report", help="write a run's report.html: funnel, rejections, duplicates, boilerplate, "
        "chunk sizes, vectors, time, sample documents with their chunk boundaries")
    add_report_arguments(report_parser)
    report_parser.set_defaults(handler=report_command)

    from chunkline.pipeline import runs

    runs_parser = commands.add_parser(
        "runs", help="list an output's runs: id, start, status (LATEST, complete, held-back, "
        "failed, incomplete, running), counts, size on disk")
    runs.add_runs_arguments(runs_parser)
    runs_parser.set_defaults(handler=runs.runs_command)
    publish_parser = commands.add_parser(
        "publish", help="point LATEST at another complete, reconciled run (a rollback), "
        "verified and under the output's lease")
    runs.add_publish_arguments(publish_parser)
    publish_parser.set_defaults(handler=runs.publish_command)
    gc_parser = commands.add_parser(
        "gc", help="remove runs beyond the N newest complete ones, held-back, failed and killed "
        "runs and leftover files; never LATEST's run or a running one")
    runs.add_gc_arguments(gc_parser)
    gc_parser.set_defaults(handler=runs.gc_command)

    from chunkline.pipeline import tables_command

    tables_parser = commands.add_parser(
        "tables", help="the output's Iceberg tables (chunks, documents, rejected, terms): current "
        "metadata file, snapshot, run, rows, and the line that reads each in DuckDB, pyiceberg, "
        "Polars and Spark")
    tables_command.add_arguments(tables_parser)
    tables_parser.set_defaults(handler=tables_command.tables_command)
    return parser


# The extra a command cannot start without, checked before it imports anything: a missing one is
# one line naming it (exit 2), whichever module would have imported it first. Features inside a
# command (a format, a store, the model) name their own extra where they are used.
COMMAND_EXTRAS = {
    "run": ("pipeline", "apache_beam"),
    "sync": ("pipeline", "apache_beam"),
    "report": ("pipeline", "apache_beam"),
    "runs": ("pipeline", "apache_beam"),
    "publish": ("pipeline", "apache_beam"),
    "gc": ("pipeline", "apache_beam"),
    "query": ("index", "pyarrow"),
    "tables": ("iceberg", "pyiceberg"),
}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    beam_args: list[str] = []
    if "--" in argv:  # everything after -- belongs to Beam
        beam_args = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    args = build_parser().parse_args(argv)
    if beam_args:
        args.beam_args = beam_args
    try:
        if args.command in COMMAND_EXTRAS:
            require(*COMMAND_EXTRAS[args.command])
        return args.handler(args, out or sys.stdout, err or sys.stderr)
    except MissingExtra as exc:
        print(f"chunkline {args.command}: {exc}", file=err or sys.stderr)
        return exits.USAGE
    except BrokenPipeError:  # `chunkline split ... | head` is normal use, not an error
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        # What was interrupted cleaned up on its way out (a run's lease and parts, a sync's
        # lock); a hundred lines of Beam's stack say nothing more to the person who pressed it.
        print(f"chunkline {args.command}: interrupted", file=err or sys.stderr)
        return exits.INTERRUPTED


def exit_now(code: int) -> None:
    """End the process with ``code`` once the command is done, without the interpreter's
    teardown: after a run it frees the modules of torch, transformers and Beam one object at a
    time, ~2 s that nothing needs (bench/RESULTS.md, "A run's fixed cost"). What an exit must
    still do is done first: the ``atexit`` functions (logging's flush, weakref finalizers'
    temporary folders) and the standard streams' buffers. The ordinary exit while any thread
    other than this one may still be running (Python's own shutdown would wait for it), and
    under a profiler or tracer (``python -m cProfile``, ``trace``), which writes its results
    after the program returns. uWSGI ends its workers the same way (``--skip-atexit-teardown``:
    the ``atexit`` hooks, then ``_exit``), as do Instagram's ("Dismissing Python Garbage
    Collection at Instagram", 2017)."""
    others = [thread for thread in threading.enumerate()
              if thread is not threading.current_thread() and not thread.daemon]
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)  # CPython's, the hooks os._exit skips
    if others or run_exitfuncs is None or sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`) or a closed stream: nothing to flush to
            pass
    os._exit(code)


def command() -> None:
    """The ``chunkline`` console script: :func:`main` on the process's arguments, its status the
    process's."""
    exit_now(main())


if __name__ == "__main__":
    command()
