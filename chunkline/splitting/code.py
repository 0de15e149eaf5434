"""Source code split by syntax tree, cut by depth (cAST-style: a node whole when it fits).

The splitter's contract holds unchanged (exact offsets, chunks that tile the text, ``tokens``
exact and within budget, bounded overlap); only the atoms differ. They come from a tree-sitter
parse, cut by depth as text-splitter's ``CodeSplitter`` and LlamaIndex's ``CodeSplitter`` do:

1. A node that fits the budget is one atom, never cut: a function or class that fits stays
   whole. Whitespace before a node belongs to it, and comments (and Rust attributes) travel
   with the node after them, so a doc comment is not parted from its function.
2. A node that does not fit is replaced by its children, its body opened in place (a class or
   function: its header tokens, then its body's statements), and so on down.
3. A leaf still over budget (a huge string literal) is cut by the text splitter's separators.
4. Atoms are packed greedily into chunks, with overlap, exactly as ``split`` packs them.

Heading path: the names of the definitions (class, function, method, module, impl, ...)
enclosing all of the chunk's code, outermost first: the innermost definition holding both its
first and its last code character and those around it (a chunk packing ``helper_1`` ..
``helper_4`` is labelled by the module: empty). Whitespace and comments at the chunk's ends
are skipped, and a definition's decorators (Python), ``export`` (JS/TS) or
attributes (Rust) count as part of it. Names are bare (``("Outer", "Inner", "method")``),
except a Go method, named ``Type.Method`` after its receiver, and a Rust impl block,
``impl Trait for Type``. tree-sitter is error-tolerant: source with syntax errors is still
split by the tree it yields. Where a grammar wheel is not installed, ``split_code`` falls back
to the plain text splitter (empty paths).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from chunkline.sizers import Measure, Tokenizer, get_tokenizer
from chunkline.splitting.core import Atoms, Chunk, add_span, char_bound, check_arguments, pack
from chunkline.splitting.text import split

if TYPE_CHECKING:
    from tree_sitter import Language, Node

# File extension -> language. The grammars are the per-language wheels (tree-sitter-python,
# ...): tree-sitter-language-pack >= 1 downloads grammars at run time and fails offline.
EXTENSIONS = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".go": "go", ".java": "java", ".rs": "rust",
}
# Language -> (module of its grammar wheel, function returning the grammar pointer).
_GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "java": ("tree_sitter_java", "language"),
    "rust": ("tree_sitter_rust", "language"),
}
LANGUAGES = tuple(_GRAMMARS)


@dataclass(frozen=True)
class _Syntax:
    """What a language's tree calls definitions, wrappers and trivia.

    ``wrappers`` maps a node type that wraps one definition (a decorated Python function, a JS
    ``export``) to the field holding it, or None for its only named child. ``trivia`` are node
    types, besides comments, that belong to the node after them."""

    definitions: frozenset[str]
    wrappers: dict[str, str | None]
    trivia: frozenset[str] = frozenset()


_JS_DEFINITIONS = frozenset({
    "function_declaration", "generator_function_declaration", "class_declaration",
    "method_definition", "variable_declarator",
})
_JS_WRAPPERS: dict[str, str | None] = {
    "export_statement": "declaration", "lexical_declaration": None, "variable_declaration": None,
}
_TS_SYNTAX = _Syntax(
    _JS_DEFINITIONS | {"abstract_class_declaration", "interface_declaration", "enum_declaration",
                       "internal_module", "module"},
    {**_JS_WRAPPERS, "ambient_declaration": None, "expression_statement": None},
)
_SYNTAX = {
    "python": _Syntax(frozenset({"function_definition", "class_definition"}),
                      {"decorated_definition": "definition"}),
    "javascript": _Syntax(_JS_DEFINITIONS, _JS_WRAPPERS),
    "typescript": _TS_SYNTAX,
    "tsx": _TS_SYNTAX,
    "go": _Syntax(frozenset({"function_declaration", "method_declaration", "type_spec"}),
                  {"type_declaration": None}),
    "java": _Syntax(frozenset({"class_declaration", "interface_declaration", "enum_declaration",
                               "record_declaration", "annotation_type_declaration",
                               "method_declaration", "constructor_declaration"}), {}),
    "rust": _Syntax(frozenset({"function_item", "impl_item", "trait_item", "mod_item",
                               "struct_item", "enum_item", "union_item", "macro_definition"}),
                    {}, frozenset({"attribute_item", "inner_attribute_item"})),
}
# A JS/TS variable is a definition when it holds one of these: `const f = () => {...}`.
_FUNCTION_VALUES = frozenset({"arrow_function", "function_expression", "function",
                              "generator_function", "class"})
_SPACE = re.compile(rb"[ \t\n\r\x0b\x0c]*")


def language_for(path_or_uri: str) -> str | None:
    """The language of a source file by its extension (``"x/y.py"`` -> ``"python"``), or None
    for anything that is not code this module splits. URIs (``gs://b/x.rs``) work too.

    >>> language_for("gs://bucket/src/main.RS"), language_for("notes.md")
    ('rust', None)
    """
    path = re.sub(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^/]*", "", path_or_uri).split("?")[0]
    return EXTENSIONS.get(os.path.splitext(path)[1].lower())


@functools.cache
def _grammar(language: str) -> Language | None:
    """The tree-sitter grammar of ``language``, or None where its wheel is not installed.
    Built once per process: loading a grammar is pure, and every parse reuses it."""
    module_name, function = _GRAMMARS[language]
    try:
        import tree_sitter

        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return tree_sitter.Language(getattr(module, function)())


def split_code(
    text: str,
    language: str | None,
    max_tokens: int = 256,
    overlap: int = 0,
    tokenizer: Tokenizer | str = "words",
    *,
    max_chars: int | None = None,
) -> list[Chunk]:
    """Split source ``text`` in ``language`` (one of :data:`LANGUAGES`, or None for plain
    text) into chunks of at most ``max_tokens`` tokens and ``max_chars`` characters (None:
    ``default_max_chars(max_tokens)``), cut between syntax nodes; a node over either bound is
    taken apart.

    >>> src = "class A:\\n  def f(self):\\n    return 1\\n\\n  def g(self):\\n    return 2\\n"
    >>> [(src[c.start:c.end].split()[:2], c.headings) for c in split_code(src, "python", 8)]
    [(['class', 'A:'], ('A',)), (['def', 'g(self):'], ('A', 'g'))]
    """
    check_arguments(text, max_tokens, overlap)
    max_chars = char_bound(max_tokens, max_chars)
    if language is not None and language not in _GRAMMARS:
        raise ValueError(f"unknown language {language!r}; known: {', '.join(LANGUAGES)}")
    if isinstance(tokenizer, str):
        tokenizer = get_tokenizer(tokenizer)
    grammar = _grammar(language) if language is not None else None
    if not text or language is None or grammar is None:
        return split(text, max_tokens, overlap, tokenizer, markdown=False, max_chars=max_chars)
    import tree_sitter

    source = text.encode("utf-8", "surrogatepass")
    root = tree_sitter.Parser(grammar).parse(source).root_node
    tree = _Tree(root, source, _SYNTAX[language], _Offsets(text, source))
    measure = tokenizer.measure(text)
    atoms = _atoms(tree, measure, max_tokens, max_chars)
    cuts = tokenizer.unknown_word_cuts(text)
    chunks = pack(measure, atoms, max_tokens, max_chars, overlap, (), (), cuts)
    return [replace(c, headings=tree.span_path(c.start, c.end)) for c in chunks]


# ------------------------------------------------------------------------------------ offsets


class _Offsets:
    """str index <-> UTF-8 byte offset (tree-sitter works in bytes); identity for ASCII."""

    def __init__(self, text: str, source: bytes) -> None:
        self._byte_at: np.ndarray | None = None
        if len(source) != len(text):
            points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            widths = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)
            self._byte_at = np.concatenate(([0], np.cumsum(widths, dtype=np.int64)))

    def char(self, byte: int) -> int:
        """The str index at ``byte``; a byte inside a character (invalid UTF-8 that
        tree-sitter cut) rounds up to the next character boundary."""
        if self._byte_at is None:
            return byte
        return int(np.searchsorted(self._byte_at, byte))

    def byte(self, char: int) -> int:
        return char if self._byte_at is None else int(self._byte_at[char])


# --------------------------------------------------------------------------------------- tree


class _Tree:
    """A parsed source: what its nodes are called and where they are, in str indices."""

    def __init__(self, root: Node, source: bytes, syntax: _Syntax, offsets: _Offsets) -> None:
        self.root = root
        self.source = source
        self.syntax = syntax
        self.offsets = offsets

    def span(self, node: Node) -> tuple[int, int]:
        return self.offsets.char(node.start_byte), self.offsets.char(node.end_byte)

    def is_trivia(self, node: Node) -> bool:
        return node.type.endswith("comment") or node.type in self.syntax.trivia

    def name(self, node: Node) -> str | None:
        """The path entry of a definition node, or None when ``node`` is no named definition."""
        kind = node.type
        if kind not in self.syntax.definitions:
            return None
        if kind == "variable_declarator":
            value = node.child_by_field_name("value")
            if value is None or value.type not in _FUNCTION_VALUES:
                return None
        if kind == "impl_item":
            trait = node.child_by_field_name("trait")
            target = self._text(node.child_by_field_name("type"))
            if trait is None:
                return f"impl {target}"
            return f"impl {self._text(trait)} for {target}"
        name = self._text(node.child_by_field_name("name"))
        receiver = node.child_by_field_name("receiver")  # a Go method
        if receiver is not None and name:
            base = _receiver_type(receiver)
            return f"{self._text(base)}.{name}" if base is not None else name
        return name or None

    def _text(self, node: Node | None) -> str:
        if node is None:
            return ""
        raw = self.source[node.start_byte : node.end_byte].decode("utf-8", "replace")
        return " ".join(raw.split())

    def wrapped(self, node: Node) -> Node | None:
        """The definition a wrapper node (``@decorator``, ``export``) holds, if any."""
        while node.type in self.syntax.wrappers:
            field = self.syntax.wrappers[node.type]
            if field is not None:
                inner = node.child_by_field_name(field)
            else:
                named = [c for c in node.named_children if not self.is_trivia(c)]
                inner = named[0] if len(named) == 1 else None
            if inner is None:
                return None
            node = inner
        return node if self.name(node) is not None else None

    def path(self, start: int) -> tuple[str, ...]:
        """Names of the definitions enclosing the first code character at or after ``start``."""
        return tuple(name for _, name in self._definitions(self._first_code(self.offsets.byte(start))))

    def span_path(self, start: int, end: int) -> tuple[str, ...]:
        """Names of the definitions enclosing every code character of ``[start, end)``: those
        around both its first and its last code character (compared as nodes, not names: two
        overloads of one name are two definitions)."""
        first = self._definitions(self._first_code(self.offsets.byte(start)))
        last = self._definitions(self._last_code(self.offsets.byte(end)))
        common: list[str] = []
        for (a, name), (b, _) in zip(first, last):
            if a != b:
                break
            common.append(name)
        return tuple(common)

    def _definitions(self, chain: list[Node]) -> list[tuple[int, str]]:
        """(node id, name) of the named definitions of a chain, outermost first."""
        found: list[tuple[int, str]] = []
        named: set[int] = set()  # nested wrappers (export const f = ...) reach one definition
        for node in chain:
            definition = node if node.type not in self.syntax.wrappers else self.wrapped(node)
            if definition is not None and definition.id not in named:
                name = self.name(definition)
                if name is not None:
                    found.append((definition.id, name))
                    named.add(definition.id)
        return found

    def _last_code(self, end: int) -> list[Node]:
        """The nodes holding the last byte before ``end`` that is neither whitespace nor inside
        trivia, outermost first; [] when there is none."""
        at = end - 1
        while at >= 0:
            while at >= 0 and self.source[at : at + 1].isspace():
                at -= 1
            if at < 0:
                return []
            chain = self._chain(at)
            trivia = next((node for node in chain if self.is_trivia(node)), None)
            if trivia is None:
                return chain
            at = min(trivia.start_byte, at) - 1
        return []

    def _first_code(self, at: int) -> list[Node]:
        """The nodes holding the first byte at or after ``at`` that is neither whitespace nor
        inside trivia, outermost first; [] when only whitespace and trivia remain."""
        size = len(self.source)
        while True:
            at = _SPACE.match(self.source, at).end()  # type: ignore[union-attr]  # a \s* pattern: always a match
            if at >= size:
                return []
            chain = self._chain(at)
            trivia = next((node for node in chain if self.is_trivia(node)), None)
            if trivia is None:
                return chain
            at = max(trivia.end_byte, at + 1)

    def _chain(self, at: int) -> list[Node]:
        """The nodes that hold byte ``at``, root first. Walked down with a cursor: walking up
        (``node.parent`` searches down from the root each time) is quadratic in a deep tree
        such as a long ``a + b + ...`` chain, and py-tree-sitter 0.26's
        ``Node.first_child_for_byte`` crashes on some nodes."""
        cursor = self.root.walk()
        chain = [self.root]
        while cursor.goto_first_child_for_byte(at) is not None:
            node = cursor.node
            if node is None or node.start_byte > at or node.end_byte <= at:
                break
            chain.append(node)
        return chain


def _receiver_type(receiver: Node) -> Node | None:
    """The type name in a Go receiver such as ``(s *Server[T])``."""
    for parameter in receiver.named_children:
        kind = parameter.child_by_field_name("type")
        while kind is not None and kind.type in {"pointer_type", "generic_type"}:
            kind = kind.named_children[0] if kind.named_children else None
        if kind is not None:
            return kind
    return None


# -------------------------------------------------------------------------------------- atoms

# Work items of the descent, done in order from a stack: syntax trees nest deeper than Python's
# recursion limit (a long ``a + b + ...`` is one level per operand). Each covers text[lo:hi],
# and ``lo`` may be before its first node: the whitespace before a node is the node's.


@dataclass(frozen=True, slots=True)
class _SiblingNodes:
    """Sibling nodes; with ``group``, trivia are taken together with the node after them."""

    nodes: list[Node]
    lo: int
    hi: int
    group: bool


@dataclass(frozen=True, slots=True)
class _OverBudgetNode:
    """One node that, with the whitespace around it, is over budget."""

    node: Node
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class _TextSpan:
    """Text to add as it is: one atom of ``count`` tokens, or (``count`` None) cut as text."""

    lo: int
    hi: int
    count: int | None = None


_DescentStep = _SiblingNodes | _OverBudgetNode | _TextSpan


def _atoms(tree: _Tree, measure: Measure, limit: int, max_chars: int) -> Atoms:
    """Atoms tiling the whole text, in order, each within ``limit`` tokens and ``max_chars``
    characters (bar single graphemes)."""
    atoms = Atoms([], [], [])
    stack: list[_DescentStep] = [_SiblingNodes([tree.root], 0, len(measure.text), False)]
    while stack:
        task = stack.pop()
        if isinstance(task, _TextSpan):
            if task.count is not None:
                atoms.add(task.lo, task.hi, task.count)
            else:
                add_span(measure, task.lo, task.hi, limit, max_chars, atoms)
        elif isinstance(task, _OverBudgetNode):
            stack.extend(reversed(_over_budget_node_steps(tree, measure, limit, max_chars, task)))
        else:
            stack.extend(reversed(_sibling_steps(tree, measure, limit, max_chars, task)))
    return atoms


def _sibling_steps(
    tree: _Tree, measure: Measure, limit: int, max_chars: int, task: _SiblingNodes
) -> list[_DescentStep]:
    """Each group of siblings (a node, with the trivia before it when ``task.group``) that fits
    is an atom; the others are taken apart. Groups tile text[lo:hi]: each starts where the
    one before it ends, and the last runs to ``hi``."""
    if task.group:
        groups = list(_with_leading_trivia(tree, task.nodes))
    else:
        groups = [[node] for node in task.nodes]
    starts: list[int] = []
    ends: list[int] = []
    kept: list[list[Node]] = []
    at = task.lo
    for index, members in enumerate(groups):
        last = index == len(groups) - 1
        end = task.hi if last else max(at, tree.offsets.char(members[-1].end_byte))
        if end > at:
            starts.append(at)
            ends.append(end)
            kept.append(members)
        at = end
    if not kept:
        return [_TextSpan(task.lo, task.hi)]
    measure.prepare_to_cut(task.lo, task.hi)
    counts = measure.piece_counts(starts, ends, limit)
    tasks: list[_DescentStep] = []
    for members, start, end, count in zip(kept, starts, ends, counts):
        if count is not None and count <= limit and end - start <= max_chars:
            tasks.append(_TextSpan(start, end, count))
        elif len(members) > 1:
            tasks.append(_SiblingNodes(members, start, end, False))
        else:
            tasks.append(_OverBudgetNode(members[0], start, end))
    return tasks


def _over_budget_node_steps(
    tree: _Tree, measure: Measure, limit: int, max_chars: int, task: _OverBudgetNode
) -> list[_DescentStep]:
    """The node alone when it fits (a function is never cut for the blank lines before it),
    else its parts, else (a leaf) the text splitter's cuts."""
    start, end = tree.span(task.node)
    if start < end and (task.lo < start or end < task.hi) and end - start <= max_chars:
        count = measure.piece_counts([start], [end], limit)[0]  # from the region's one encode
        if count is not None and count <= limit:
            return [_TextSpan(task.lo, start), _TextSpan(start, end, count), _TextSpan(end, task.hi)]
    parts = _opened_parts(task.node)
    if not parts:
        return [_TextSpan(task.lo, task.hi)]
    if len(parts) == 1:  # the same text, known to be over budget: no need to count it again
        return [_OverBudgetNode(parts[0], task.lo, task.hi)]
    return [_SiblingNodes(parts, task.lo, task.hi, True)]


def _opened_parts(node: Node) -> list[Node]:
    """The children a node over budget is taken apart into, its body opened in place: a class
    or function that does not fit becomes its header tokens and its body's statements, so the
    header packs with the first of them instead of making a chunk of its own beside a body
    that fits whole. (Go wraps a body's statements once more, in a statement_list.)"""
    body = node.child_by_field_name("body")
    parts: list[Node] = []
    for child in node.children:
        if body is not None and child.id == body.id:
            for inner in child.children:
                parts.extend(inner.children if inner.type == "statement_list" else [inner])
        else:
            parts.append(child)
    return [part for part in parts if part.end_byte > part.start_byte]


def _with_leading_trivia(tree: _Tree, nodes: list[Node]) -> Iterator[list[Node]]:
    """Siblings grouped so that trivia (comments, attributes) go with the node after them;
    trivia at the end form a group of their own."""
    pending: list[Node] = []
    for node in nodes:
        pending.append(node)
        if not tree.is_trivia(node):
            yield pending
            pending = []
    if pending:
        yield pending
