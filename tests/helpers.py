"""Shared test helpers: tokenizers built once per session, and the reference heading paths."""

from __future__ import annotations

import re
from functools import lru_cache

from markdown_it import MarkdownIt

from chunkline import Tokenizer, get_tokenizer
from chunkline.splitting.structure import mask_front_matter

TOKENIZER_SPECS = (
    "words",
    "chars",
    "tiktoken:cl100k_base",
    "tiktoken:o200k_base",
    "hf:all-MiniLM-L6-v2",
)


@lru_cache(maxsize=None)
def tokenizer(spec: str) -> Tokenizer:
    return get_tokenizer(spec)


def reference_headings(text: str) -> list[tuple[int, int, str]]:
    """(line start offset, level, title) of top-level headings, straight from markdown-it-py's
    full CommonMark token stream: the oracle the splitter's heading paths must equal."""
    text = mask_front_matter(text)  # the one extension to CommonMark, tested on its own
    tokens = MarkdownIt("commonmark").parse(text)
    line_starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    out = []
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and token.level == 0:
            title = " ".join(tokens[index + 1].content.split())
            out.append((line_starts[token.map[0]], int(token.tag[1]), title))
    return out


def reference_path(found: list[tuple[int, int, str]], position: int) -> tuple[str, ...]:
    stack: list[tuple[int, str]] = []
    for start, level, title in found:
        if start > position:
            break
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
    return tuple(title for _, title in stack)


def damage(path, how: str) -> None:
    """Hand-made damage to an index file: ``truncate`` (its first half kept), ``text`` (not
    Parquet at all) or ``delete``."""
    if how == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "text":
        path.write_text("not parquet at all\n")
    elif how == "delete":
        path.unlink()
    else:
        raise ValueError(f"no such damage: {how!r}")


def run_table(run_dir, name: str, columns=None):
    """The run's live rows of table ``name`` (a pyarrow Table, None when it lists no file),
    through its manifest (``chunkline.index.tables``): a rerun's rows may lie in earlier runs'
    files, some of whose rows are deleted, so a glob of the run's folder is not its table."""
    from chunkline.index.manifest import load_manifest
    from chunkline.index.tables import read_table

    return read_table(str(run_dir), load_manifest(str(run_dir)), name, columns)


def run_rows(run_dir, name: str) -> list[dict]:
    """:func:`run_table` as a list of row dicts (empty when the run lists no file)."""
    table = run_table(run_dir, name)
    return [] if table is None else table.to_pylist()


def record_rewritten_files(run_dir) -> None:
    """Make the manifest of ``run_dir`` describe its table files as they now are (their size
    and digest), as the run that wrote them would have: for tests that make another kind of run
    by rewriting a real run's files (a reader refuses a file changed since its run recorded it)."""
    import hashlib
    import json
    from pathlib import Path

    run_dir = Path(run_dir)
    described = json.loads((run_dir / "manifest.json").read_text())
    for entries in described.get("tables", {}).values():
        for entry in entries:
            written = run_dir.parent / entry["path"]
            if "bytes" in entry:
                entry["bytes"] = written.stat().st_size
            if "digest" in entry:
                entry["digest"] = hashlib.blake2b(written.read_bytes(), digest_size=16).hexdigest()
    (run_dir / "manifest.json").write_text(json.dumps(described))
