"""split_code: source files cut between syntax nodes (issue 5, code).

Heading paths are checked against an independent reading of the source: Python's own ``ast``
and ``tokenize`` for generated and real Python files; hand-written expectations for nested
definitions in JavaScript, TypeScript, Go, Java and Rust.
"""

from __future__ import annotations

import ast
import io
import json
import json.decoder
import os
import re
import textwrap
import tokenize
from pathlib import Path

import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from chunkline import LANGUAGES, Chunk, default_max_chars, language_for, split, split_code
from chunkline.splitting.code import _grammar
from tests.helpers import TOKENIZER_SPECS, tokenizer
from tests.splitting.test_splitter_properties import glued_unknowns

GRAPHEME = regex.compile(r"\X")
CODE = Path(__file__).resolve().parents[1] / "golden" / "code"
SAMPLES = sorted(p for p in CODE.iterdir() if p.is_file())


# ------------------------------------------------------------------------------ invariants


def check_contract(
    text: str, chunks: list[Chunk], spec: str, max_tokens: int, overlap: int,
    max_chars: int | None = None,
) -> None:
    """The splitter's contract: tiling, order, bounded overlap, exact offsets and counts, budget
    in tokens and in characters."""
    tok = tokenizer(spec)
    bound = default_max_chars(max_tokens) if max_chars is None else max_chars
    if not text:
        assert chunks == []
        return
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    for n, chunk in enumerate(chunks):
        piece = text[chunk.start : chunk.end]
        assert piece, chunk
        assert chunk.tokens == tok.count(piece), (chunk, piece)
        assert not glued_unknowns(tok, piece), (chunk, piece)
        assert chunk.table_header == ""
        if chunk.oversized:
            assert [m.group() for m in GRAPHEME.finditer(piece)] == [piece]
        else:
            assert chunk.tokens <= max_tokens, (chunk, piece)
            assert chunk.end - chunk.start <= bound, (chunk, bound)
        if n:
            previous = chunks[n - 1]
            assert previous.start < chunk.start <= previous.end < chunk.end
            if chunk.start < previous.end:
                assert tok.count(text[chunk.start : previous.end]) <= overlap


# --------------------------------------------------------------- Python reference (ast, tokenize)


def _char_offsets(text: str):
    """(line, UTF-8 byte column) as ast reports them -> str index."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]

    def at(line: int, byte_col: int) -> int:
        start = starts[line - 1]
        line_text = text[start : starts[line]] if line < len(starts) else text[start:]
        return start + len(line_text.encode("utf-8")[:byte_col].decode("utf-8"))

    return at, starts


def python_definitions(text: str) -> list[tuple[int, int, int, str]]:
    """(extent start incl. decorators, def/class keyword, end, name) of every def and class."""
    at, _ = _char_offsets(text)
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            keyword = at(node.lineno, node.col_offset)
            start = keyword
            if node.decorator_list:
                first = node.decorator_list[0]
                start = text.rindex("@", 0, at(first.lineno, first.col_offset))
            found.append((start, keyword, at(node.end_lineno, node.end_col_offset), node.name))
    return sorted(found)


_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
             tokenize.ENCODING, tokenize.ENDMARKER}


def python_tokens(text: str) -> list[tuple[int, int, int]]:
    """(start, end, type) of every token, in str indices."""
    _, starts = _char_offsets(text)
    out = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        (l1, c1), (l2, c2) = token.start, token.end
        if l1 > len(starts):  # ENDMARKER past the last line
            continue
        out.append((starts[l1 - 1] + c1, starts[min(l2, len(starts)) - 1] + c2, token.type))
    return out


def python_reference_path(text: str, tokens, definitions, start: int, end: int) -> tuple[str, ...]:
    """Names of the defs enclosing every code character of ``text[start:end]``: those holding
    both its first code character (at or after ``start``) and its last (before ``end``);
    whitespace and comments skipped, inside a string the chunk's own ends."""
    first = len(text)
    for a, b, kind in tokens:
        if b <= start or kind in _NOT_CODE:
            continue
        first = max(a, start)
        break
    last = -1
    for a, b, kind in reversed(tokens):
        if a >= end or kind in _NOT_CODE:
            continue
        last = min(b, end) - 1
        break
    # A chunk of whitespace only: the defs around the code on both sides of it hold it too.
    return tuple(name for lo, _, hi, name in definitions if lo <= first < hi and lo <= last < hi)


def python_units(text: str, definitions) -> list[tuple[int, int, int]]:
    """(keyword, end, end past the comment and blank lines right after it) of each def: the
    tree may count trailing comments into a body, so whether a def fits is judged on the
    longer span (counting more is the safe side), and it must not be cut inside the shorter."""
    out = []
    for _, keyword, end, _ in definitions:
        tail = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\n)*").match(text, end)
        out.append((keyword, end, tail.end()))
    return out


def check_python(
    text: str, spec: str, max_tokens: int, overlap: int, max_chars: int | None = None
) -> None:
    chunks = split_code(text, "python", max_tokens, overlap, tokenizer(spec), max_chars=max_chars)
    check_contract(text, chunks, spec, max_tokens, overlap, max_chars)
    bound = default_max_chars(max_tokens) if max_chars is None else max_chars
    definitions = python_definitions(text)
    tokens = python_tokens(text)
    for chunk in chunks:
        assert chunk.headings == python_reference_path(text, tokens, definitions, chunk.start,
                                                       chunk.end), (
            chunk, text[chunk.start : chunk.end])
    # A def or class that fits is never cut: no chunk boundary falls inside it. One holding a
    # word the tokenizer reads as one unknown token over several graphemes does not fit.
    tok = tokenizer(spec)
    bounds = {c.start for c in chunks} | {c.end for c in chunks}
    for start, end, longest in python_units(text, definitions):
        unit = text[start:longest]
        if (longest - start <= bound and tok.count(unit) <= max_tokens
                and not tok.unknown_word_cuts(unit)):
            inside = [b for b in bounds if start < b < end]
            assert not inside, (text[start:end], inside)


# ---------------------------------------------------------------------- generated Python sources

SIMPLE = [
    "x = 1", "total += value * 2", "return None", "pass", 'print("héllo 👋 world")',
    '"""A docstring that says what this does."""', "# a comment about the next line",
    "", 'data = {"a": 1, "b": [1, 2, 3], "ç": (4, 5)}',
    'message = "' + "word " * 30 + '"', "données = [naïve for naïve in range(10) if naïve % 2]",
    "result = compute(alpha, beta, gamma=delta, *args, **kwargs)",
    "value = (first_operand + second_operand) * third_operand - fourth_operand / 2",
    "lambda_ = lambda q: q + 1  # trailing comment",
    # What a tokenizer may read as one token, or a few: a long no-space literal (one [UNK] for
    # WordPiece, one word), emoji ZWJ sequences and flags, CJK, stacked combining marks.
    "blob = '" + "QmFzZTY0ZGF0YQ" * 10 + "'",
    "faces = '" + "👨‍👩‍👧‍👦🏳️‍🌈🇫🇷👍🏽" * 5 + "'",
    "title = '" + "漢字仮名交じり文" * 8 + "'",
    "accents = '" + "e\u0301a\u0308\u0323" * 15 + "'  # " + "e" + "\u0301" * 30,
]
NAMES = ["alpha", "beta", "run", "Widget", "Helper", "_private", "naïve", "données"]


def _render(tree, indent: str = "") -> list[str]:
    if isinstance(tree, str):
        return [indent + tree if tree else ""]
    kind, name, decorated, body = tree
    head = {"def": f"def {name}(self, a, b=2):", "async": f"async def {name}(*args):",
            "class": f"class {name}(Base):", "if": "if condition:"}[kind]
    lines = (["", indent + "@decorator"] if decorated and kind != "if" else []) + [indent + head]
    inner = [line for item in body for line in _render(item, indent + "    ")]
    if not any(line.strip() and not line.strip().startswith("#") for line in inner):
        inner.append(indent + "    pass")
    return lines + inner


python_source = st.lists(
    st.recursive(
        st.sampled_from(SIMPLE),
        lambda children: st.tuples(
            st.sampled_from(["def", "async", "class", "if"]), st.sampled_from(NAMES), st.booleans(),
            st.lists(children, min_size=1, max_size=5),
        ),
        max_leaves=25,
    ),
    min_size=1, max_size=6,
).map(lambda items: "\n".join(line for item in items for line in _render(item)) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@given(data=st.data(), text=python_source)
def test_generated_python(spec: str, data, text: str) -> None:
    max_tokens = data.draw(st.one_of(st.integers(1, 12), st.integers(13, 120)), label="max_tokens")
    overlap = data.draw(st.integers(0, max_tokens - 1), label="overlap")
    max_chars = data.draw(st.one_of(st.none(), st.integers(1, 12), st.integers(13, 600)),
                          label="max_chars")
    check_python(text, spec, max_tokens, overlap, max_chars)


REAL_PYTHON = [textwrap.__file__, json.decoder.__file__]


@pytest.mark.parametrize("path", REAL_PYTHON, ids=os.path.basename)
@pytest.mark.parametrize(("spec", "max_tokens", "overlap"),
                         [("hf:all-MiniLM-L6-v2", 128, 16), ("tiktoken:cl100k_base", 64, 0),
                          ("words", 40, 10), ("chars", 300, 50)])
def test_real_python_files(path: str, spec: str, max_tokens: int, overlap: int) -> None:
    check_python(Path(path).read_text(encoding="utf-8"), spec, max_tokens, overlap)


# ------------------------------------------------------------------------- other languages


def definition_spans(text: str, language: str) -> list[tuple[int, int]]:
    """(start, end) str spans of the tree's definition nodes (functions, classes, ...)."""
    import tree_sitter

    from chunkline.splitting.code import _SYNTAX

    source = text.encode("utf-8")
    root = tree_sitter.Parser(_grammar(language)).parse(source).root_node
    kinds = _SYNTAX[language].definitions - {"variable_declarator"}
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        if node.type in kinds:
            start = len(source[: node.start_byte].decode())
            out.append((start, start + len(source[node.start_byte : node.end_byte].decode())))
        stack.extend(node.children)
    return out


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@pytest.mark.parametrize(("max_tokens", "overlap"), [(16, 4), (48, 0), (200, 30)])
def test_sample_files(path: Path, spec: str, max_tokens: int, overlap: int) -> None:
    text = path.read_text(encoding="utf-8")
    language = language_for(str(path))
    chunks = split_code(text, language, max_tokens, overlap, tokenizer(spec))
    check_contract(text, chunks, spec, max_tokens, overlap)
    tok = tokenizer(spec)
    bounds = {c.start for c in chunks} | {c.end for c in chunks}
    for start, end in definition_spans(text, language):
        if tok.count(text[start:end]) <= max_tokens:
            assert not [b for b in bounds if start < b < end], text[start:end]


# Nested definitions per language: the chunk starting at each marker statement carries the path.
NESTED = {
    "javascript": ("""
export class Outer {
  method(x) {
    mark_method = 1;
    const inner = (y) => {
      mark_inner = 2;
    };
  }
}
export const arrow = async (q) => { mark_arrow = 3; };
function plain() { mark_plain = 4; }
""", {"mark_method": ("Outer", "method"), "mark_inner": ("Outer", "method", "inner"),
      "mark_arrow": ("arrow",), "mark_plain": ("plain",)}),
    "typescript": ("""
namespace NS {
  export abstract class Base<T> {
    describe(prefix: string): string {
      mark_method = 1;
      return prefix;
    }
  }
  export interface Shape { mark_shape: number; }
}
""", {"mark_method": ("NS", "Base", "describe"), "mark_shape": ("NS", "Shape")}),
    "go": ("""
package main

// Start runs the server.
func (s *Server) Start(port int) error {
	mark_method := 1
	type state struct{ mark_state int }
	return nil
}

func Free() { mark_free := 2 }
""", {"mark_method": ("Server.Start",), "mark_state": ("Server.Start", "state"),
      "mark_free": ("Free",)}),
    "java": ("""
@Entity
public class Outer {
    static class Inner {
        /** Docs. */
        void method(int b) {
            int mark_method = b + 1;
        }
    }
    Outer() { mark_constructor = 1; }
    interface Listener { int mark_listener = 1; }
}
""", {"mark_method": ("Outer", "Inner", "method"), "mark_constructor": ("Outer", "Outer"),
      "mark_listener": ("Outer", "Listener")}),
    "rust": ("""
mod outer {
    impl std::fmt::Display for S {
        /// Formats.
        #[inline]
        fn fmt(&self) -> i32 {
            let mark_method = 1;
            mark_method
        }
    }
    trait T { fn mark_trait(&self); }
}
""", {"mark_method": ("outer", "impl std::fmt::Display for S", "fmt"),
      "mark_trait": ("outer", "T")}),
    "python": ("""
@decorator
class Outer:
    class Inner:
        def method(self):
            mark_method = 1

            def local():
                mark_local = 2
    # about tail
    async def tail(self):
        mark_tail = 3
""", {"mark_method": ("Outer", "Inner", "method"),
      "mark_local": ("Outer", "Inner", "method", "local"), "mark_tail": ("Outer", "tail")}),
}


@pytest.mark.parametrize("language", sorted(NESTED))
def test_nested_definition_paths(language: str) -> None:
    text, expected = NESTED[language]
    # One word per chunk: a chunk starts at every marker.
    chunks = split_code(text, language, 1, 0, tokenizer("words"))
    check_contract(text, chunks, "words", 1, 0)
    for marker, path in expected.items():
        at = [c for c in chunks if text[c.start : c.end].strip().startswith(marker)]
        assert at, marker
        assert {c.headings for c in at} == {path}, (marker, [c.headings for c in at])


@pytest.mark.parametrize("language", sorted(NESTED))
def test_nested_whole_when_it_fits(language: str) -> None:
    text, _ = NESTED[language]
    (chunk,) = split_code(text, language, 1000, 0, tokenizer("words"))
    assert (chunk.start, chunk.end) == (0, len(text))


def test_function_that_fits_is_one_chunk_with_its_comment() -> None:
    text = "x = 1\n\n# Adds.\n# Twice.\ndef add(a, b):\n    return a + b\n"
    chunks = split_code(text, "python", 12, 0, tokenizer("words"))
    assert [text[c.start : c.end] for c in chunks] == [
        "x = 1", "\n\n# Adds.\n# Twice.\ndef add(a, b):\n    return a + b\n"]
    assert [c.headings for c in chunks] == [(), ("add",)]


def test_leaf_over_budget_falls_back_to_text_cuts() -> None:
    text = 'def f():\n    return "' + "word " * 200 + '"\n'
    chunks = split_code(text, "python", 16, 0, tokenizer("words"))
    check_contract(text, chunks, "words", 16, 0)
    assert len(chunks) > 10 and all(c.headings == ("f",) for c in chunks)


def test_syntax_errors_still_split() -> None:
    text = "def broken(:\n    x = = 1\n\nclass Fine:\n    def ok(self):\n        return 1\n" * 5
    chunks = split_code(text, "python", 8, 0, tokenizer("words"))
    check_contract(text, chunks, "words", 8, 0)


def test_deep_nesting_does_not_recurse() -> None:
    text = "x = " + " + ".join(f"v{i}" for i in range(3000)) + "\n"
    chunks = split_code(text, "python", 50, 0, tokenizer("words"))
    check_contract(text, chunks, "words", 50, 0)


def test_non_ascii_offsets() -> None:
    text = (
        'def café():\n    """Ça marche 👋🏽."""\n    return "日本語"\n'
        "\n\ndef b():\n    return 2\n"
    )
    for spec in TOKENIZER_SPECS:
        chunks = split_code(text, "python", 6, 0, tokenizer(spec))
        check_contract(text, chunks, spec, 6, 0)
    chunks = split_code(text, "python", 8, 0, tokenizer("words"))
    assert [c.headings for c in chunks] == [("café",), ("b",)]


def test_missing_grammar_or_no_language_is_the_text_splitter(monkeypatch) -> None:
    text = "# not a heading\nx = 1\n\ny = 2\n"
    plain = split(text, 3, 0, tokenizer("words"), markdown=False)
    assert split_code(text, None, 3, 0, tokenizer("words")) == plain
    monkeypatch.setattr("chunkline.splitting.code._grammar", lambda language: None)
    assert split_code(text, "python", 3, 0, tokenizer("words")) == plain


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown language"):
        split_code("x", "cobol")
    with pytest.raises(ValueError):
        split_code("x", "python", 0)
    with pytest.raises(TypeError):
        split_code(b"x", "python")  # type: ignore[arg-type]
    assert split_code("", "python") == []


@pytest.mark.parametrize(("uri", "language"), [
    ("src/a.py", "python"), ("/x/types.pyi", "python"), ("gs://bucket/app/main.RS", "rust"),
    ("web/app.js", "javascript"), ("web/app.mjs", "javascript"), ("web/view.jsx", "javascript"),
    ("web/app.ts", "typescript"), ("web/view.tsx", "tsx"), ("cmd/main.go", "go"),
    ("src/Main.java", "java"), ("notes.md", None), ("Makefile", None), ("a.py.txt", None),
    ("file:///home/u/x.go?raw=1", "go"),
])
def test_language_for(uri: str, language: str | None) -> None:
    assert language_for(uri) == language


def test_every_language_has_its_grammar_installed() -> None:
    assert all(_grammar(language) is not None for language in LANGUAGES)


# ---------------------------------------------------------------------------------- snapshots

SNAPSHOT_CASES = [("hf:all-MiniLM-L6-v2", 64, 0), ("words", 24, 6)]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize(("spec", "max_tokens", "overlap"), SNAPSHOT_CASES)
def test_code_snapshot(path: Path, spec: str, max_tokens: int, overlap: int) -> None:
    """Behaviour as snapshots, as tests/splitting/test_golden.py does for Markdown; regenerate
    deliberately with ``UPDATE_GOLDEN=1``."""
    text = path.read_text(encoding="utf-8")
    chunks = split_code(text, language_for(str(path)), max_tokens, overlap, tokenizer(spec))
    got = [{"start": c.start, "end": c.end, "headings": list(c.headings), "tokens": c.tokens,
            "head": " ".join(text[c.start : c.end].split()[:8])} for c in chunks]
    name = f"{path.name}__{spec.replace(':', '-')}__{max_tokens}_{overlap}.jsonl"
    snapshot = CODE / "snapshots" / name
    if os.environ.get("UPDATE_GOLDEN"):
        snapshot.parent.mkdir(exist_ok=True)
        snapshot.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in got), "utf-8")
    assert got == [json.loads(line) for line in snapshot.read_text(encoding="utf-8").splitlines()]


# -------------------------------------------------------------------------- the split stage


@pytest.mark.slow
def test_split_documents_dispatches_code_and_tables() -> None:
    """SplitDocuments: a .py document is split by syntax tree (paths from its definitions), a
    .md document's big table is cut between rows with its header in ``table_header``; with
    ``code=False`` the .py document is plain text (its ``#`` comments are no headings)."""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that

    from chunkline.records import Document
    from tests.beam_helpers import fnapi_pipeline
    from chunkline.transforms.split import FlattenChunks, SplitDocuments

    py_text = NESTED["python"][0] + "# not a heading\nx = 1\n"
    header = "| Robot | Zone |\n|---|---|\n"
    md_text = "# Fleet\n\n" + header + "".join(f"| R-{i} | zone {i} north |\n" for i in range(60))
    docs = [Document("src/app.py", "/repo/src/app.py", py_text),
            Document("docs/fleet.md", "/repo/docs/fleet.md", md_text)]
    words = tokenizer("words")
    want = {
        "src/app.py": [(c.start, c.end, c.headings, c.tokens, "")
                       for c in split_code(py_text, "python", 12, 0, words)],
        "docs/fleet.md": [(c.start, c.end, c.headings, c.tokens, c.table_header)
                          for c in split(md_text, 12, 0, words)],
    }
    plain = [(c.start, c.end, c.headings, c.tokens, "")
             for c in split(py_text, 12, 0, words, markdown=False)]

    def by_doc(records) -> dict[str, list[tuple]]:
        out: dict[str, list[tuple]] = {}
        for r in sorted(records, key=lambda r: (r.doc_id, r.chunk_index)):
            text = py_text if r.doc_id.endswith(".py") else md_text
            assert r.text == text[r.start : r.end]
            assert r.embed_text() == r.prefix + r.table_header + r.text
            row = (r.start, r.end, r.headings, r.tokens, r.table_header)
            out.setdefault(r.doc_id, []).append(row)
        return out

    def check(records) -> None:
        got = by_doc(records)
        assert got == want
        assert {("Outer", "Inner"), ("Outer", "tail")} <= {row[2] for row in got["src/app.py"]}
        continued = [row for row in got["docs/fleet.md"] if row[4]]
        assert len(continued) >= 3 and all(row[4] == header for row in continued)

    def check_plain(records) -> None:
        assert by_doc(records)["src/app.py"] == plain

    with fnapi_pipeline() as p:
        documents = p | beam.Create(docs)
        assert_that(documents | "Code" >> SplitDocuments("words", 12, 0) | "CodeChunks" >> FlattenChunks(),
                    check, label="code")
        assert_that(documents | "Plain" >> SplitDocuments("words", 12, 0, code=False)
                    | "PlainChunks" >> FlattenChunks() | beam.Filter(lambda r: r.doc_id.endswith(".py")), check_plain, label="plain")
