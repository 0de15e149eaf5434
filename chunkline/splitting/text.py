"""Prose and Markdown splitting: :func:`split`, on the engine of ``splitting.core``.

The engine's atoms, packing, overlap, character bound and unknown-word cuts (see
``chunkline.splitting.core``), with what Markdown adds:

1. Headings: a Markdown heading starts a new chunk, so every chunk's heading path is true for
   all of its text; a heading is kept with the first sentences after it.
2. Tables: a pipe table that fits is one atom; one that does not is cut between rows only, and
   a piece that starts among its rows carries the header row and delimiter row in
   ``Chunk.table_header``, counted against the budget (the piece's own span stays exact). Docling's
   ``HybridChunker`` (``repeat_table_header``) repeats a split table's header the same way, so
   every piece reads as a table with its column names. The character bound covers the span
   alone, not a repeated table header (that is bounded by tokens, at most half the budget).

Invariants (tested as properties): ``text[c.start:c.end]`` is the chunk; the first chunk starts
at 0 and the last ends at ``len(text)``; starts and ends strictly increase and each start is at or
before the previous end; ``c.tokens`` is the exact count of the chunk and is <= ``max_tokens``
unless ``c.oversized`` (a single grapheme over budget), and so is ``c.end - c.start <=
max_chars``; with a table header to repeat, ``tokens(c.table_header + text[c.start:c.end]) <=
max_tokens`` as well; no chunk holds an unknown token over more than one grapheme cluster.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import regex

from chunkline.sizers import Measure, Tokenizer, get_tokenizer
from chunkline.splitting.core import (
    SEPARATORS, Atoms, Chunk, RepeatedHeader, add_pieces, add_span, char_bound, check_arguments,
    cut_by_separators, pack, separator_cuts,
)
from chunkline.splitting.structure import (
    Heading, Section, Structure, Table, read_structure, sections_under,
)

__all__ = ["SEPARATORS", "MERGE_SECTIONS_BELOW", "heading_prefix", "merge_small_sections", "split"]

# The pipeline's default for ``merge_sections_below`` (measured in bench/RESULTS.md, "Merged
# sections"); the library's own default stays None (every section on its own).
MERGE_SECTIONS_BELOW: int | None = 64


def split(
    text: str,
    max_tokens: int = 256,
    overlap: int = 0,
    tokenizer: Tokenizer | str = "words",
    markdown: bool = True,
    *,
    max_chars: int | None = None,
    headings: Sequence[Heading] | None = None,
    merge_sections_below: int | None = None,
) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``max_tokens`` tokens of ``tokenizer`` and at most
    ``max_chars`` characters (None: :func:`default_max_chars` of ``max_tokens``).
    ``headings``: the document's headings where they come from elsewhere (a PDF's outline,
    ``chunkline.pdf.outline_headings``), in document order; the text is then not parsed as
    Markdown. ``merge_sections_below``: a section under this many tokens (a heading directly
    followed by its first sub-heading, a two-line subsection) is packed with its neighbours
    into one chunk under their common heading path (:func:`merge_small_sections`); None: every
    section is chunked on its own.

    >>> [(c.start, c.end, c.headings) for c in split("# A\\nx y\\n# B\\nz", 5)]
    [(0, 8, ('A',)), (8, 13, ('B',))]
    >>> [(c.start, c.end, c.tokens) for c in split("x" * 250, 5, max_chars=100)]
    [(0, 100, 1), (100, 200, 1), (200, 250, 1)]
    """
    check_arguments(text, max_tokens, overlap)
    max_chars = char_bound(max_tokens, max_chars)
    if isinstance(tokenizer, str):
        tokenizer = get_tokenizer(tokenizer)
    if not text:
        return []
    measure = tokenizer.measure(text)
    cuts = tokenizer.unknown_word_cuts(text)
    if headings is not None:
        found: Structure | None = Structure(tuple(headings), ())
    else:
        found = read_structure(text) if markdown else None
    parts = sections_under(text, found.headings if found is not None else ())
    if merge_sections_below and len(parts) > 1:
        parts = merge_small_sections(measure, parts, max_tokens, max_chars, merge_sections_below)
    plans = _section_plans(text, parts, list(found.tables) if found is not None else [])
    spans = [piece for plan in plans for piece in plan if isinstance(piece, tuple)]
    text_atoms = iter(_atomize_sections(measure, spans, max_tokens, max_chars))
    chunks: list[Chunk] = []
    for part, plan in zip(parts, plans):
        atoms, repeats = _section_atoms(measure, plan, text_atoms, max_tokens, max_chars)
        if part.heading_end is not None:
            tabled = [(p.table.start, p.end) for p in plan if isinstance(p, _TablePiece)]
            _keep_heading_with_text(measure, atoms, part.heading_end, max_tokens, max_chars, tabled)
        chunks.extend(
            pack(measure, atoms, max_tokens, max_chars, overlap, part.headings, repeats, cuts)
        )
    return chunks


# ----------------------------------------------------------------------------- small sections


def _common_path(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    size = 0
    while size < min(len(a), len(b)) and a[size] == b[size]:
        size += 1
    return a[:size]


def merge_small_sections(
    measure: Measure, parts: list[Section], max_tokens: int, max_chars: int, below: int
) -> list[Section]:
    """Adjacent sections joined where one of two neighbours is under ``below`` tokens and the
    two fit ``max_tokens`` (counted over the joined text: counts do not add across a join) and
    ``max_chars`` together. The joined section's path is the common path of its parts, so it
    still encloses every character (the sub-headings stay in its text); two sections join only
    when that loses at most one level of the shallower path (a heading and its sub-heading,
    two siblings), never across unrelated branches. A joined section fits one chunk, so no
    chunk carries a path that does not hold all of it.

    >>> from chunkline.sizers import get_tokenizer
    >>> from chunkline.splitting.structure import sections
    >>> text = "# A\\n\\n## B\\n\\nb text.\\n\\n## C\\n\\n" + "c words " * 40
    >>> parts = merge_small_sections(get_tokenizer("words").measure(text), sections(text), 30, 10_000, 8)
    >>> [(text[p.start:p.end].split()[:3], p.headings) for p in parts]
    [(['#', 'A', '##'], ('A',)), (['##', 'C', 'c'], ('A', 'C'))]
    """
    sizes = measure.piece_counts([p.start for p in parts], [p.end for p in parts], max_tokens)
    merged: list[Section] = [parts[0]]
    small = [sizes[0] is not None and sizes[0] < below]
    for part, size in zip(parts[1:], sizes[1:]):
        last = merged[-1]
        part_small = size is not None and size < below
        common = _common_path(last.headings, part.headings)
        related = len(common) >= min(len(last.headings), len(part.headings)) - 1
        if ((small[-1] or part_small) and related and size is not None
                and part.end - last.start <= max_chars
                and measure.count(last.start, part.end) <= max_tokens):
            merged[-1] = Section(last.start, part.end, common, last.heading_end)
            small[-1] = measure.count(last.start, part.end) < below
            continue
        merged.append(part)
        small.append(part_small)
    return merged


# ------------------------------------------------------------------------------------- tables


@dataclass(frozen=True, slots=True)
class _TablePiece:
    """A table of a section; ``end`` takes in the blank lines after it (as a "\\n\\n" cut
    would have), so the text after it starts where the next block does."""

    table: Table
    end: int


_BLANK_LINES = regex.compile(r"(?:[ \t]*(?:\r\n|\r|\n))*")


def _section_plans(
    text: str, parts: list[Section], found: list[Table]
) -> list[list[tuple[int, int] | _TablePiece]]:
    """Per section, its text spans and tables in order. A table is used only where it lies
    inside one section clear of the heading lines: where CommonMark reads a heading (which
    gives the paths) and GFM reads a table over the same lines, the heading wins."""
    plans: list[list[tuple[int, int] | _TablePiece]] = []
    k = 0
    for part in parts:
        plan: list[tuple[int, int] | _TablePiece] = []
        at = part.start
        while k < len(found) and found[k].start < part.end:
            table = found[k]
            k += 1
            if table.start < max(at, part.heading_end or part.start) or table.end > part.end:
                continue
            if table.start > at:
                plan.append((at, table.start))
            at = _BLANK_LINES.match(text, table.end, part.end).end()
            plan.append(_TablePiece(table, at))
        if at < part.end:
            plan.append((at, part.end))
        plans.append(plan)
    return plans


def _section_atoms(
    measure: Measure, plan: list[tuple[int, int] | _TablePiece], text_atoms: Iterator[Atoms],
    limit: int, max_chars: int,
) -> tuple[Atoms, list[RepeatedHeader]]:
    """Atoms of one section: its text spans' (from ``text_atoms``, in order) and its tables'."""
    if len(plan) == 1 and isinstance(plan[0], tuple):
        return next(text_atoms), []
    atoms = Atoms([], [], [])
    repeats: list[RepeatedHeader] = []
    for piece in plan:
        if isinstance(piece, tuple):
            more = next(text_atoms)
            atoms.starts.extend(more.starts)
            atoms.ends.extend(more.ends)
            atoms.counts.extend(more.counts)
        else:
            repeat = _table_atoms(measure, piece, limit, max_chars, atoms)
            if repeat is not None:
                repeats.append(repeat)
    return atoms, repeats


def _table_atoms(
    measure: Measure, piece: _TablePiece, limit: int, max_chars: int, atoms: Atoms
) -> RepeatedHeader | None:
    """A table that fits is one atom. One that does not is cut between rows: the header and
    delimiter rows travel with the first body row, and every other row is an atom that fits
    the budget left beside the repeated header (a row that alone does not is cut like any
    text). The header is repeated only while it takes at most half the budget; past that the
    rows are simply cut, since a piece would hold little but the header."""
    table = piece.table
    whole = measure.count(table.start, table.end)
    if whole <= limit and table.end - table.start <= max_chars:
        atoms.add(table.start, table.end, whole)
        add_span(measure, table.end, piece.end, limit, max_chars, atoms)
        return None
    rows = table.row_spans()
    if rows:
        rows[-1] = (rows[-1][0], piece.end)
    header = table.header(measure.text)
    header_tokens = measure.tokenizer.count(header)
    repeat = bool(rows) and header_tokens <= limit // 2
    budget = limit - header_tokens if repeat else limit
    first = measure.count(table.start, rows[0][1]) if rows else limit + 1
    if first <= limit and rows[0][1] - table.start <= max_chars:
        atoms.add(table.start, rows[0][1], first)
        rows = rows[1:]
    else:
        end = table.body if rows else piece.end
        add_span(measure, table.start, end, limit, max_chars, atoms)
    if rows:
        starts, ends = [a for a, _ in rows], [b for _, b in rows]
        counts = measure.piece_counts(starts, ends, budget)
        add_pieces(measure, starts, ends, counts, 0, budget, max_chars, atoms)
    return RepeatedHeader(table.body, table.end, header, header_tokens) if repeat else None


def _first_two_joined(measure: Measure, atoms: Atoms) -> int:
    """Tokens of the first two atoms joined: their sum where the cut between them is additive
    (no re-encoding, as in the packer), else counted by the measure."""
    if measure.additive_cuts([atoms.starts[1]])[0]:
        return atoms.counts[0] + atoms.counts[1]
    return measure.count(atoms.starts[0], atoms.ends[1])


def _keep_heading_with_text(
    measure: Measure, atoms: Atoms, heading_end: int, limit: int, max_chars: int,
    tables: Sequence[tuple[int, int]] = (),
) -> None:
    """A heading alone makes a chunk that matches every query about its section and answers
    none. When the heading's atom cannot join the next atom whole, cut that atom finer (it
    fits, but its pieces let the heading take the first sentences along). A table's atoms are
    never cut finer: a table is cut between rows or not at all."""
    text = measure.text
    if len(atoms.starts) < 2 or text[heading_end : atoms.ends[0]].strip():
        return  # the first atom already holds more than the heading
    if any(lo <= atoms.starts[1] < hi for lo, hi in tables):
        return
    while len(atoms.starts) >= 2 and (
        atoms.ends[1] - atoms.starts[0] > max_chars or _first_two_joined(measure, atoms) > limit
    ):
        finer = Atoms([], [], [])
        cut_by_separators(measure, atoms.starts[1], atoms.ends[1], 0, limit, max_chars, finer)
        if len(finer.starts) <= 1:
            return
        atoms.starts[1:2] = finer.starts
        atoms.ends[1:2] = finer.ends
        atoms.counts[1:2] = finer.counts


# ------------------------------------------------------------------------------------ atomize


def _atomize_sections(
    measure: Measure, bounds: list[tuple[int, int]], limit: int, max_chars: int
) -> list[Atoms]:
    """Atoms of every section. The first level of all sections is counted in one batch, and a
    section's own fit is judged from its pieces' counts, so no text is encoded twice just to
    learn that it is too long."""
    first = SEPARATORS[0]
    plans = [separator_cuts(measure, lo, hi, first) for lo, hi in bounds]
    all_starts: list[int] = []
    all_ends: list[int] = []
    for (lo, _), ends in zip(bounds, plans):
        all_starts.append(lo)
        all_starts.extend(ends[:-1])
        all_ends.extend(ends)
    all_counts = measure.piece_counts(all_starts, all_ends, limit)
    out: list[Atoms] = []
    offset = 0
    for (lo, hi), ends in zip(bounds, plans):
        atoms = Atoms([], [], [])
        starts = all_starts[offset : offset + len(ends)]
        counts = all_counts[offset : offset + len(ends)]
        offset += len(ends)
        whole = None
        if hi - lo <= max_chars:
            whole = _count_from_pieces(measure, lo, hi, starts, counts, limit)
        if whole is not None and whole <= limit:
            atoms.add(lo, hi, whole)
        elif len(ends) == 1:
            cut_by_separators(measure, lo, hi, 1, limit, max_chars, atoms)
        else:
            add_pieces(measure, starts, ends, counts, 1, limit, max_chars, atoms)
        out.append(atoms)
    return out


def _count_from_pieces(
    measure: Measure, lo: int, hi: int, starts: list[int], counts: list[int | None], limit: int
) -> int | None:
    """Count of text[lo:hi] from its pieces' counts; None when surely over ``limit``."""
    if len(counts) == 1:
        return counts[0]
    known = [c for c in counts if c is not None]
    if len(known) < len(counts):
        return None
    total = sum(known)
    if all(measure.additive_cuts(starts[1:])):
        return total
    if total > 2 * limit + 16:
        return None
    return measure.count(lo, hi)


def heading_prefix(headings: tuple[str, ...], tokenizer: Tokenizer, reserve: int) -> str:
    """The heading path embedded before a chunk (``"Guide > Setup\\n"``), at most ``reserve``
    tokens: outer headings are dropped first, then the innermost title is cut by words.

    The split budget leaves ``reserve`` tokens free, so prefix + chunk never exceeds the
    embedder's input: the budget is the model's input minus what is prepended, as LlamaIndex's
    ``MetadataAwareTextSplitter`` subtracts the metadata text it embeds with a chunk.
    """
    if not headings or reserve <= 0:
        return ""
    for first in range(len(headings)):
        text = " > ".join(headings[first:]) + "\n"
        if tokenizer.count(text) <= reserve:
            return text
    words = headings[-1].split()[:64]
    while words:
        words.pop()
        text = " ".join(words) + "\n"
        if words and tokenizer.count(text) <= reserve:
            return text
    return ""
