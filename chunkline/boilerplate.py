"""Corpus-level boilerplate: lines and short blocks that recur across many documents (headers,
footers, licence blocks, signatures, cookie notices) are removed from every document.

Two pure halves around one corpus count (a Beam combine in ``transforms/clean.py``):

    keys = line_keys(text, options)          # per document: the set of its candidate keys
    # count, over all documents, how many documents hold each key; frequent = those held by at
    # least frequency_floor(n_documents, options) documents
    text = remove_boilerplate(text, frequent, options)

A key is a short hash of a normalised line (case-folded, whitespace collapsed) or of a short
paragraph (2..``max_block_lines`` lines, e.g. a signature whose lines are each too short to
count alone). CCNet (Wenzek et al. 2020) removes repeated paragraphs across a shard the same
way; here a line must also be long enough, so short common lines a document needs
("Returns", "Example") always stay.

Never removed, and never counted: Markdown headings, table rows and fenced code (fence lines and
everything inside). A heading or a table header shared by many documents is structure, not
boilerplate (the splitter's heading paths depend on it), and a common code line ("import os",
"}") is an idiom that examples need.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from chunkline.options import check_fields, help_text
from annotated_types import Ge, Le
from typing import Annotated
from typing import AbstractSet, Sequence

from chunkline.clean import fenced_code_lines, line_indexes, without_lines_marked

_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")


@dataclass(frozen=True)
class BoilerplateOptions:
    """When a line (or short block) counts as corpus boilerplate: it occurs in at least
    ``min_docs`` documents and in at least ``min_fraction`` of all documents."""

    # At 1 every line of every document would count: repetition needs two documents.
    min_docs: Annotated[int, Ge(2)] = field(default=5, metadata=help_text(
        "A line is boilerplate in at least this many documents (protects small corpora)..."))
    min_fraction: Annotated[float, Ge(0), Le(1)] = field(default=0.001, metadata=help_text(
        "...and this fraction of all documents (protects large ones)."))
    min_line_chars: Annotated[int, Ge(1)] = field(default=20, metadata=help_text(
        "Shorter normalised lines never count, so 'Returns', 'Example', 'Parameters' survive "
        "however common; blocks must reach it in total."))
    max_block_lines: Annotated[int, Ge(1)] = field(default=6, metadata=help_text(
        "Paragraphs of 2..this many lines also count whole (signatures, address blocks, "
        "licence notices of short lines); 1: single lines only."))

    def __post_init__(self) -> None:
        check_fields(self)


def frequency_floor(n_documents: int, options: BoilerplateOptions) -> int:
    """Documents a key must occur in to be boilerplate: max(min_docs, ceil(min_fraction * n)).

    >>> frequency_floor(68, BoilerplateOptions()), frequency_floor(1_000_000, BoilerplateOptions())
    (5, 1000)
    """
    return max(options.min_docs, math.ceil(options.min_fraction * n_documents))


def normalize_line(line: str) -> str:
    """The form lines are compared in: case-folded, whitespace runs as one space, stripped."""
    return " ".join(line.casefold().split())


def _key(kind: str, normalized: str) -> str:
    # 64 bits: a chance collision among even 10^9 distinct lines is ~3%, and one costs at most
    # one line that happened to share a frequent line's hash.
    return hashlib.blake2b(f"{kind}\n{normalized}".encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _structure(lines: Sequence[str]) -> list[bool]:
    """Lines never counted nor removed: fenced code, headings, table rows."""
    code = fenced_code_lines(lines)
    return [
        in_code or bool(_HEADING.match(line)) or line.lstrip().startswith("|")
        for line, in_code in zip(lines, code, strict=True)
    ]


def _paragraphs(lines: Sequence[str]) -> list[range]:
    """Maximal runs of non-blank lines, as index ranges."""
    runs, start = [], None
    for index, line in enumerate(lines):
        if line.strip():
            start = index if start is None else start
        elif start is not None:
            runs.append(range(start, index))
            start = None
    if start is not None:
        runs.append(range(start, len(lines)))
    return runs


def _candidates(text: str, options: BoilerplateOptions) -> tuple[list[str], list[str | None], list[tuple[range, str]]]:
    """(lines, the key of each line or None, (paragraph, key) for each countable block)."""
    lines = text.split("\n")
    fixed = _structure(lines)
    normalized = [normalize_line(line) for line in lines]
    keys: list[str | None] = [
        _key("line", norm) if not keep and len(norm) >= options.min_line_chars else None
        for norm, keep in zip(normalized, fixed, strict=True)
    ]
    blocks = []
    if options.max_block_lines >= 2:
        for para in _paragraphs(lines):
            if 2 <= len(para) <= options.max_block_lines and not any(fixed[i] for i in para):
                joined = "\n".join(normalized[i] for i in para)
                if len(joined) >= options.min_line_chars:
                    blocks.append((para, _key("block", joined)))
    return lines, keys, blocks


def line_keys(text: str, options: BoilerplateOptions) -> set[str]:
    """The set of boilerplate candidate keys in one document (each counted once per document,
    however often it repeats inside it)."""
    _, keys, blocks = _candidates(text, options)
    return {key for key in keys if key is not None} | {key for _, key in blocks}


def remove_boilerplate(text: str, frequent: AbstractSet[str], options: BoilerplateOptions) -> str:
    """``text`` without its lines and short blocks whose key is in ``frequent``, each gap closed
    as :func:`chunkline.clean.without_lines` does; everything else is kept exactly.

    >>> opts = BoilerplateOptions(min_line_chars=10)
    >>> footer = "Copyright Northwind Robotics"
    >>> frequent = line_keys(footer, opts)
    >>> remove_boilerplate("# Arm\\n\\nCalibrate it.\\n\\n" + footer + "\\n", frequent, opts)
    '# Arm\\n\\nCalibrate it.\\n'
    """
    return remove_boilerplate_marked(text, (), frequent, options)[0]


def remove_boilerplate_marked(
    text: str, marks: Sequence[int], frequent: AbstractSet[str], options: BoilerplateOptions
) -> tuple[str, tuple[int, ...]]:
    """:func:`remove_boilerplate`, and where each mark (an offset at a line start: a PDF's page
    starts) lands in the text it returns."""
    stripped, moved, _ = remove_boilerplate_found(text, marks, frequent, options)
    return stripped, moved


# What a removed line or block is shown as (run report): the stage records it per document, so a
# megabyte-long "line" must not travel whole.
MAX_SHOWN_CHARS = 300


def remove_boilerplate_found(
    text: str, marks: Sequence[int], frequent: AbstractSet[str], options: BoilerplateOptions
) -> tuple[str, tuple[int, ...], dict[str, str]]:
    """:func:`remove_boilerplate_marked`, and what it removed: each frequent key found in
    ``text`` with its first occurrence (a line stripped, or a block's lines joined by newlines),
    cut to :data:`MAX_SHOWN_CHARS`.

    >>> opts = BoilerplateOptions(min_line_chars=10)
    >>> frequent = line_keys("copyright northwind", opts)
    >>> text, _, found = remove_boilerplate_found("Hi.\\n  Copyright  Northwind \\n", (), frequent, opts)
    >>> text, list(found.values())
    ('Hi.\\n', ['Copyright  Northwind'])
    """
    lines, drop, found = boilerplate_lines(text, frequent, options)
    if not any(drop):
        return text, tuple(marks), {}
    stripped, moved = without_lines_marked(lines, drop, line_indexes(text, marks))
    return stripped, moved, found


def boilerplate_lines(text: str, frequent: AbstractSet[str], options: BoilerplateOptions
                      ) -> tuple[list[str], list[bool], dict[str, str]]:
    """(the text's lines, which of them go, what was found as
    :func:`remove_boilerplate_found` reports it): the decision alone, so a caller that
    recorded it can cut the same text again with ``without_lines_marked``."""
    lines = text.split("\n")
    if not frequent:
        return lines, [False] * len(lines), {}
    lines, keys, blocks = _candidates(text, options)
    drop = [key is not None and key in frequent for key in keys]
    found: dict[str, str] = {}
    for index, key in enumerate(keys):
        if drop[index] and key is not None and key not in found:  # (a dropped line has a key)
            found[key] = lines[index].strip()[:MAX_SHOWN_CHARS]
    for para, key in blocks:
        if key in frequent:
            found.setdefault(key, "\n".join(lines[i].strip() for i in para)[:MAX_SHOWN_CHARS])
            for index in para:
                drop[index] = True
    return lines, drop, found
