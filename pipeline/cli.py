"""The ``chunkline`` command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Iterable, Sequence, TextIO

from chunkline import Chunk, Tokenizer, TokenizerNotAvailable, get_tokenizer, split

DEFAULT_TOKENIZER = "hf:all-MiniLM-L6-v2"


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
        try:
            chunks = split(text, args.max_tokens, args.overlap, tokenizer, not args.no_markdown)
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
    split_parser.add_argument(
        "--tokenizer", default=DEFAULT_TOKENIZER,
        help="words | chars | tiktoken:NAME_OR_PATH | hf:MODEL (default: %(default)s)",
    )
    split_parser.add_argument("--no-markdown", action="store_true",
                              help="do not read Markdown headings")
    split_parser.add_argument("--view", action="store_true",
                              help="human-readable view instead of JSON lines")
    split_parser.set_defaults(handler=_split_command)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args, out or sys.stdout, err or sys.stderr)
    except BrokenPipeError:  # `chunkline split ... | head` is normal use, not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
