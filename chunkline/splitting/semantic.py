"""Semantic splitting: cut where the meaning of neighbouring sentences jumps, within the budget.

Greg Kamradt's "semantic chunking" (5 Levels of Text Splitting, 2024), as LangChain's
``SemanticChunker`` implements it, made exact and budgeted:

1. Sentences: each Markdown section (``chunkline.splitting.structure.sections``, so a chunk
   never spans a heading and carries the true heading path) is cut into units with exact
   offsets: prose sentences, list items, a whole table, a whole fenced code block. Whitespace
   after a unit stays on its left, so units tile the section; a heading line is glued to the first unit after it.
2. Distances: every unit is embedded together with ``buffer`` neighbours on each side (Kamradt's
   buffer, which damps one-sentence noise), and the cosine distance between each unit and the
   next in the same section is taken.
3. Cuts: where a distance (rule ``percentile``) or its rise over the previous distance (rule
   ``gradient``, after LangChain's variant) is above the ``percentile``-th percentile of the
   document's values.
4. Budget: a segment between cuts that fits ``max_tokens`` (and ``max_chars``, the
   character bound of ``chunkline.split``) is one chunk; one that does not is
   re-split by the recursive splitter (``chunkline.split``) on that span (a table cut between
   rows then repeats its header row in ``Chunk.table_header``, as there). Segments are never
   merged across a cut, so a short segment stays short.

Invariants (tested as properties): chunks tile the text (first start 0, last end ``len(text)``,
each start equals the previous end); ``c.tokens`` is the exact count of ``text[c.start:c.end]``
and is <= ``max_tokens`` unless ``c.oversized`` (with ``c.table_header`` prepended, too), and
so is ``c.end - c.start <= max_chars``;
``c.headings`` is the path of the section the chunk lies in, and no chunk crosses a heading.

The embedder is a plain callable (texts -> ``[n, dim]`` array) so this module stays pure and
testable; in the pipeline it is the embed stage's own model (``model_embed``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Callable, Literal

import numpy as np
from annotated_types import Ge, Le

from chunkline.options import check_fields, help_text
from chunkline.sizers import Tokenizer, get_tokenizer
from chunkline.splitting.core import CLUSTER_CONTINUES, Chunk, char_bound, check_arguments
from chunkline.splitting.structure import Section, sections
from chunkline.splitting.text import split

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from chunkline.embedder import EmbedOptions

Embed = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class SemanticOptions:
    """Where semantic splitting cuts.

    rule: ``percentile`` cuts where the cosine distance between neighbouring units is above the
        ``percentile``-th percentile of the document's distances; ``gradient`` applies the same
        test to how much each distance rises over the previous one, which finds jumps in text
        whose sentences are all alike (after LangChain's ``breakpoint_threshold_type="gradient"``,
        with a one-sided difference; see ``_rise_over_previous``).
    percentile: the threshold percentile, 0-100. Higher cuts less: at 90 about one neighbour pair
        in ten is cut (Kamradt's and LangChain's default is 95).
    buffer: neighbouring units embedded with each unit, on each side (Kamradt's buffer_size).
    """

    rule: Literal["percentile", "gradient"] = field(default="percentile", metadata=help_text(
        "Cut where neighbour distance (percentile) or its rise (gradient) is above the "
        "percentile of the document's values."))
    percentile: Annotated[float, Ge(0), Le(100)] = field(default=90.0, metadata=help_text(
        "Higher cuts less: at 90 about one neighbour pair in ten is cut (Kamradt's and "
        "LangChain's default is 95)."))
    buffer: Annotated[int, Ge(0), Le(8)] = field(default=1, metadata=help_text(
        "Neighbouring sentences embedded with each, on each side (Kamradt's buffer_size)."))

    def __post_init__(self) -> None:
        check_fields(self)


def semantic_split(
    text: str,
    max_tokens: int,
    tokenizer: Tokenizer | str,
    embed: Embed,
    options: SemanticOptions = SemanticOptions(),
    markdown: bool = True,
    *,
    max_chars: int | None = None,
) -> list[Chunk]:
    """Split ``text`` at semantic breaks into chunks of at most ``max_tokens`` tokens and
    ``max_chars`` characters (None: ``chunkline.default_max_chars(max_tokens)``).

    ``embed`` maps a list of texts to an ``[n, dim]`` array (one call per document, one row per
    unit). Returns chunks in text order that tile ``text``; see the module docstring.

    >>> import numpy as np
    >>> topic = lambda texts: np.array([[1.0, 0.0] if "cat" in t else [0.0, 1.0] for t in texts])
    >>> text = "A cat sat. The cat slept. A car drove. The car parked."
    >>> [text[c.start:c.end] for c in semantic_split(text, 50, "words", topic,
    ...                                               SemanticOptions(buffer=0))]
    ['A cat sat. The cat slept. ', 'A car drove. The car parked.']
    """
    check_arguments(text, max_tokens, 0)  # overlap does not apply to semantic splits
    max_chars = char_bound(max_tokens, max_chars)
    if isinstance(tokenizer, str):
        tokenizer = get_tokenizer(tokenizer)
    if not text:
        return []
    parts = sections(text, markdown)
    units = [sentence_spans(text, part) for part in parts]
    scores = _neighbour_scores(text, units, embed, options)
    flat = np.concatenate(scores) if scores else np.zeros(0)
    # One threshold for the whole document, not one per section: a section whose sentences
    # all belong together is then not cut just to meet a per-section quota.
    threshold = float(np.percentile(flat, options.percentile)) if flat.size else np.inf
    chunks: list[Chunk] = []
    for part, spans, score in zip(parts, units, scores):
        cuts = [k + 1 for k in np.flatnonzero(score > threshold)]
        bounds = [0] + cuts + [len(spans)]
        for a, b in zip(bounds, bounds[1:]):
            start, end = spans[a][0], spans[b - 1][1]
            chunks.extend(
                _within_budget(text, start, end, part, max_tokens, max_chars, tokenizer, markdown)
            )
    return chunks


def model_embed(model: "SentenceTransformer", options: "EmbedOptions") -> Embed:
    """The ``embed`` callable for :func:`semantic_split` from a loaded model: the same vectors the
    embed stage makes (``chunkline.embedder.embed_texts``)."""
    from chunkline.embedder import embed_texts

    def embed(texts: list[str]) -> np.ndarray:
        return embed_texts(model, texts, options)

    return embed


# ---------------------------------------------------------------------------------- sentences

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
# A line that starts its own unit: a list item, a block quote. Table rows are grouped instead.
_ITEM = re.compile(r" {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)| {0,3}>")
_TABLE_ROW = re.compile(r" {0,3}\|")
# A sentence end inside a line: terminal punctuation, closing quotes/brackets, then spaces
# before more text. The spaces stay on the left sentence.
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*[ \t]+(?=\S)")
_LINE_END_SENTENCE = re.compile(r"[.!?][\"'\u201d\u2019)\]]*[ \t]*$")
# Words whose period does not end a sentence.
_ABBREVIATION = re.compile(r"(?:^|[\s(])(?:e\.g|i\.e|etc|vs|cf|fig|dr|mr|mrs|ms|approx)$", re.I)
_LIST_NUMBER = re.compile(r"\s*\d{1,9}")


def sentence_spans(text: str, part: Section) -> list[tuple[int, int]]:
    """Units of ``text[part.start:part.end]`` as (start, end) str offsets that tile the section:
    prose sentences, list items, whole tables and whole fenced code blocks; trailing whitespace
    on the left unit; the heading line and any whitespace-only piece joined to the next unit.
    Never empty: a section with no text is one unit."""
    cuts = _unit_starts(text, part.start, part.end)
    bounds = sorted(c for c in cuts if part.start < c < part.end)
    spans = list(zip([part.start] + bounds, bounds + [part.end]))
    merged: list[tuple[int, int]] = []
    carry: int | None = None  # start of pieces waiting to join the next unit
    for start, end in spans:
        if carry is not None:
            start = carry
            carry = None
        holds_text = bool(text[start:end].strip())
        heading_only = (part.heading_end is not None and start == part.start
                        and not text[part.heading_end:end].strip())
        if not holds_text or heading_only:
            carry = start
            continue
        merged.append((start, end))
    if carry is not None:  # trailing whitespace (or a heading with no text): the last unit's
        if merged:
            merged[-1] = (merged[-1][0], part.end)
        else:
            merged.append((carry, part.end))
    return merged


def _unit_starts(text: str, lo: int, hi: int) -> set[int]:
    """Offsets in (lo, hi) where a new unit may start, from a line scan of the section."""
    cuts: set[int] = set()
    fence: str | None = None  # the opening fence while inside a fenced code block
    previous = "blank"  # the previous line: blank, prose, sentence_end, table, fence (closed)
    position = lo
    for line in text[lo:hi].splitlines(keepends=True):
        start, end = position, position + len(line)
        position = end
        body = line.rstrip("\r\n")
        if fence is not None:
            closing = _FENCE.match(body)
            if (closing and closing.group(1)[0] == fence[0]
                    and len(closing.group(1)) >= len(fence) and not body[closing.end():].strip()):
                fence = None
                previous = "fence"
            continue
        if not body.strip():
            previous = "blank"
            continue
        opening = _FENCE.match(body)
        if opening:
            cuts.add(start)
            fence = opening.group(1)
            continue
        if _TABLE_ROW.match(body):
            if previous != "table":
                cuts.add(start)
            previous = "table"
            continue
        if previous in ("blank", "fence", "table", "sentence_end") or _ITEM.match(body):
            cuts.add(start)
        for found in _SENTENCE_END.finditer(line):
            at = start + found.end()
            if not CLUSTER_CONTINUES.match(text, at) and not _is_abbreviation(line, found.start()):
                cuts.add(at)
        ends = _LINE_END_SENTENCE.search(body)
        previous = "sentence_end" if ends and not _is_abbreviation(body, ends.start()) else "prose"
    return cuts


def _is_abbreviation(line: str, period: int) -> bool:
    """Whether the punctuation at ``line[period]`` ends a known abbreviation or an ordered list
    marker (``"2. "`` at the start of the line)."""
    if line[period] != ".":
        return False
    return bool(_ABBREVIATION.search(line, 0, period) or _LIST_NUMBER.fullmatch(line, 0, period))


# ---------------------------------------------------------------------------------- distances


def _neighbour_scores(
    text: str, units: list[list[tuple[int, int]]], embed: Embed, options: SemanticOptions
) -> list[np.ndarray]:
    """Per section, one score per neighbour pair (unit k, unit k+1): the cosine distance, or
    its rise over the previous pair's under the ``gradient`` rule. All units of the document go to ``embed`` in one
    call."""
    windows: list[str] = []
    for spans in units:
        pieces = [" ".join(text[s:e].split()) for s, e in spans]
        for k in range(len(pieces)):
            lo, hi = max(0, k - options.buffer), min(len(pieces), k + options.buffer + 1)
            windows.append(" ".join(pieces[lo:hi]))
    if not any(len(spans) > 1 for spans in units):
        return [np.zeros(0) for _ in units]  # nothing to compare: skip the model
    vectors = np.asarray(embed(windows), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(windows):
        raise ValueError(f"embed returned shape {vectors.shape} for {len(windows)} texts")
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    scores: list[np.ndarray] = []
    offset = 0
    for spans in units:
        section = vectors[offset : offset + len(spans)]
        offset += len(spans)
        distances = 1.0 - np.sum(section[:-1] * section[1:], axis=1)
        if options.rule == "gradient" and distances.size:
            distances = _rise_over_previous(distances)
        scores.append(distances)
    return scores


def _rise_over_previous(distances: np.ndarray) -> np.ndarray:
    """How much each distance rises over the one before it; the first is compared with the
    section's median. A one-sided difference, not ``np.gradient``'s central one (LangChain's
    choice): a central difference is about 0 at an isolated spike and peaks on the pairs beside
    it, so it would cut next to the jump instead of at it."""
    before = np.concatenate(([np.median(distances)], distances[:-1]))
    return distances - before


# ------------------------------------------------------------------------------------- budget


def _within_budget(
    text: str, start: int, end: int, part: Section, max_tokens: int, max_chars: int,
    tokenizer: Tokenizer, markdown: bool,
) -> list[Chunk]:
    """``text[start:end]`` as one chunk when it fits both bounds, else re-split by
    ``chunkline.split`` on that span (offsets shifted back into the document; a table cut
    between rows repeats its header as the splitter does); every chunk under ``part``'s heading
    path."""
    piece = text[start:end]
    if end - start <= max_chars:
        tokens = tokenizer.count(piece)
        if tokens <= max_tokens and not tokenizer.unknown_word_cuts(piece):
            return [Chunk(start, end, part.headings, tokens)]
    # The span is read as Markdown on its own. Where that reading differs from the document's
    # (a fragment that starts inside a list item, say) only the splitter's cut points move:
    # the heading path is the section's, and the budget and offsets hold for any cuts.
    return [
        dataclasses.replace(c, start=start + c.start, end=start + c.end, headings=part.headings)
        for c in split(piece, max_tokens, 0, tokenizer, markdown=markdown, max_chars=max_chars)
    ]
