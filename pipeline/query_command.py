"""``chunkline query OUTPUT QUESTION``: the command around ``chunkline.pipeline.query.search_result``.

The hits go to stdout; the result's notes (no hits and why, a hybrid search that ranked by one
side) to stderr, one line each, or into the JSON object with ``--json``. Exit 0 whenever the
search ran, hits or none; 2 for a bad argument or a run that cannot be searched, and for a run
written with access control searched without ``--as`` (the caller must be named: a protected
index never answers an anonymous question, so a script that forgot ``--as`` fails loudly
instead of printing only the public chunks).

Every line printed shows what an id, heading or text holds, never what a terminal would act on:
control characters are written ``\\xNN`` and the bidirectional overrides ``\\uNNNN`` (a
newline in an id would forge a hit line, an ESC sequence rewrite one); ``--json`` keeps every
value, written with ``\\u`` escapes for the same characters."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from chunkline.pipeline.query import Hit

# What a terminal acts on rather than shows: C0 and C1 controls and DEL, the line and paragraph
# separators, and the bidirectional embeddings, overrides and isolates that reorder the rest of
# a line (Trojan Source, CVE-2021-42574).
_UNSHOWN = (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F),
            *range(0x2066, 0x206A))
_SHOWN = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in _UNSHOWN}
# json.dumps escapes C0 itself; the rest are written as \u escapes, which read back the same.
_JSON_SHOWN = {code: f"\\u{code:04x}" for code in _UNSHOWN if code >= 0x20}


def printable(text: str) -> str:
    r"""``text`` with what a terminal would act on written as escapes.

    >>> printable("a\nb\x1b[31mc\u202e")
    'a\\x0ab\\x1b[31mc\\u202e'
    """
    return text.translate(_SHOWN)


def hit_lines(rank: int, hit: Hit) -> list[str]:
    """The lines one hit prints as, each free of control characters."""
    path = " › ".join(printable(heading) for heading in hit.headings) or "(no heading)"
    snippet = " ".join(hit.text.split())
    snippet = printable(snippet if len(snippet) <= 240 else snippet[:239] + "…")
    pages = ("" if hit.page_start is None else f"  p. {hit.page_start}" if hit.page_end == hit.page_start
             else f"  pp. {hit.page_start}-{hit.page_end}")
    lines = [f"{rank}. {hit.score:.3f}  {printable(hit.doc_id)} [{hit.start}:{hit.end}]{pages}  {path}",
             f"   {snippet}"]
    if hit.expanded_text is not None:
        lines.append(f"   expanded [{hit.expanded_start}:{hit.expanded_end}]: "
                     f"{len(hit.expanded_text):,} character{'' if len(hit.expanded_text) == 1 else 's'}")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The query options, for a ``query`` subparser of the chunkline CLI."""
    parser.add_argument("output", help="output directory (holding LATEST) or a run directory")
    parser.add_argument("question")
    parser.add_argument("-k", type=int, default=5, help="hits to print (>= 1)")
    parser.add_argument(
        "--mode", choices=("hybrid", "dense", "sparse"), default="hybrid",
        help="hybrid (default): dense and BM25 rankings fused by reciprocal rank (k=60); dense: "
        "the model's vectors; sparse: BM25")
    parser.add_argument("--json", action="store_true", help="hits as JSON")
    parser.add_argument(
        "--expand", type=int, default=0, metavar="N",
        help="each hit with its neighbouring chunks, up to N tokens in all (exact offsets)")
    parser.add_argument(
        "--where", action="append", default=[], metavar="KEY=VALUE",
        help="only chunks whose metadata KEY equals VALUE as text (an array: contains it); "
        "KEY:=JSON compares JSON values, types included (n:=1 is the number, n:='\"1\"' the "
        "string); repeat to require several; applied before ranking")
    parser.add_argument(
        "--as", dest="principals", default=None, metavar="PRINCIPAL[,...]",
        help="search as a caller holding these principals (users, groups): on an index written "
        "with access control only the chunks they (or the public principal) may read are "
        "ranked, before ranking; required there")


def query_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from chunkline.pipeline.query import search_result

    if args.k < 1:
        print(f"chunkline query: -k must be at least 1, got {args.k}", file=err)
        return 2
    if not args.question.strip():
        print("chunkline query: the question is empty", file=err)
        return 2
    from chunkline.metadata import parse_condition

    try:
        where = [parse_condition(spec) for spec in args.where]
        principals = None
        if args.principals is not None:
            from chunkline.access import caller_principals

            principals = caller_principals(args.principals)
        result = search_result(args.output, args.question, args.k, where, mode=args.mode,
                               expand=args.expand, principals=principals)
    except (ValueError, FileNotFoundError) as exc:
        print(f"chunkline query: {exc}", file=err)
        return 2
    if args.json:
        import dataclasses
        import json

        rows = [dict(dataclasses.asdict(hit), rank=rank, metadata=json.loads(hit.metadata))
                for rank, hit in enumerate(result.hits, 1)]
        notes = [dataclasses.asdict(note) for note in result.notes]
        print(json.dumps({"mode": args.mode, "ranking": result.ranking, "question": args.question,
                          "notes": notes, "hits": rows}, ensure_ascii=False, indent=2).translate(_JSON_SHOWN),
              file=out)
        return 0
    for note in result.notes:
        print(f"chunkline query: {printable(note.text)}", file=err)
    for rank, hit in enumerate(result.hits, 1):
        for line in hit_lines(rank, hit):
            print(line, file=out)
    return 0
