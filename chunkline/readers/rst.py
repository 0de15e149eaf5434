"""reStructuredText (``.rst``) to Markdown through docutils' own parser (the reference
implementation of the reStructuredText specification): section titles as headings at their
nesting depth, paragraphs, bullet and enumerated lists, literal blocks fenced, grid and simple
tables as pipe tables, anything else as its text. docutils is pure Python with no dependencies.

Parsed as untrusted input: no file or URL inclusion (``include``, ``csv-table :file:``), no
``raw`` passthrough, no configuration files read, messages never printed, the top section never
promoted to a document title (so its title stays a heading). Metadata: the first
``:Author:``, ``:Authors:``, ``:Date:``, ``:Version:`` and ``:Organization:`` fields (the
bibliographic fields of the specification), which stay in the text as ``Name: value`` lines.
"""

from __future__ import annotations

import io
from typing import Any, Iterator

from chunkline.readers.formats import EMPTY
from chunkline.readers.markdown import blocks, fenced, heading, list_item, one_line, paragraph, pipe_table
from chunkline.readers.office import Converted
from chunkline.extras import require

_SETTINGS = {
    "report_level": 5, "halt_level": 5,
    "file_insertion_enabled": False, "raw_enabled": False, "_disable_config": True,
    "doctitle_xform": False, "syntax_highlight": "none", "input_encoding": "unicode",
    "output_encoding": "unicode", "traceback": False,
}
_SKIPPED = frozenset({"comment", "system_message", "substitution_definition", "target",
                      "pending", "raw", "image", "figure"})
_FIELD_KEYS = {"author": "author", "authors": "author", "date": "date", "version": "version",
                 "organization": "organization"}


def read_rst(text: str) -> Converted | str:
    """A decoded reStructuredText file as Markdown with its bibliographic fields, or the reason
    it has none. Never raises."""
    publish_doctree = require("pipeline", "docutils.core").publish_doctree  # only runs that read .rst load docutils

    try:
        tree = publish_doctree(text, settings_overrides={**_SETTINGS, "warning_stream": io.StringIO()})
        body = blocks(_blocks(tree, 0))
    except Exception as exc:  # noqa: BLE001 - docutils raises its own and Python's errors
        return f"not a readable reStructuredText file ({type(exc).__name__}: {exc})"
    if not body.strip():
        return f"{EMPTY} (no text in the reStructuredText file)"
    metadata: dict[str, Any] = {}
    for field in tree.findall(lambda node: node.tagname == "field"):
        if len(field.children) == 2:
            key = _FIELD_KEYS.get(field.children[0].astext().strip().lower())
            if key and field.children[1].astext().strip():
                metadata.setdefault(key, one_line(field.children[1].astext()))
    return Converted(body, metadata)


def _blocks(node: Any, depth: int) -> Iterator[str]:
    for child in node.children:
        tag = child.tagname
        if tag in _SKIPPED or tag == "#text":
            continue
        if tag == "section":
            titles = [c for c in child.children if c.tagname == "title"]
            if titles:
                yield heading(depth + 1, titles[0].astext())
            yield from _blocks(child, depth + 1)
        elif tag == "title":
            continue  # a section's, written above
        elif tag in ("bullet_list", "enumerated_list"):
            yield "\n".join(_items(child, 0))
        elif tag in ("literal_block", "doctest_block"):
            classes = [c for c in child.get("classes", []) if c != "code"]
            yield fenced(child.astext(), classes[0] if classes else "")
        elif tag == "field_list":
            yield "\n".join(paragraph(f"{field.children[0].astext()}: {one_line(field.children[1].astext())}")
                             for field in child.children if len(field.children) == 2)
        elif tag == "table":
            table = _table(child)
            if table:
                yield table
        elif child.children and any(c.tagname != "#text" for c in child.children) \
                and tag not in ("paragraph", "line_block"):
            yield from _blocks(child, depth)  # a container: a block quote, an admonition, ...
        else:
            text = paragraph(child.astext())
            if text:
                yield text


def _items(node: Any, level: int) -> Iterator[str]:
    for item in node.children:
        if item.tagname != "list_item":
            continue
        own = " ".join(c.astext() for c in item.children
                       if c.tagname not in ("bullet_list", "enumerated_list"))
        if own.strip():
            yield list_item(own, level)
        for nested in item.children:
            if nested.tagname in ("bullet_list", "enumerated_list"):
                yield from _items(nested, level + 1)


def _table(node: Any) -> str:
    rows = [[entry.astext() for entry in row.children if entry.tagname == "entry"]
            for row in node.findall(lambda n: n.tagname == "row")]
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    return pipe_table(rows[0], rows[1:]) if rows else ""
