"""The splitting engine that prose, Markdown and code splitting share: atoms, the separator
descent, and the packer.

LangChain's RecursiveCharacterTextSplitter idea (separator levels, descend only where a piece is
over budget) with text-splitter's token-exact packing, made exact for offsets and counts:

1. Atomize: cut on "\\n\\n", then "\\n", ". ", " " (:data:`SEPARATORS`, separator kept on the
   left piece so offsets stay contiguous), descending only where a piece is over budget; below
   " ", cut between grapheme clusters, so the budget holds for any text (:func:`add_span`,
   :func:`add_pieces`, :func:`cut_by_separators`).
2. Pack: greedily join consecutive atoms while the *joined* text fits (token counts are not
   additive across a join; the tokenizer's :class:`~chunkline.sizers.Measure` counts joins
   without re-encoding) (:func:`pack`).
3. Overlap: the next chunk re-reads trailing atoms of the previous one while they fit
   ``overlap`` and the next new atom still fits ``max_tokens``.
4. Characters: no chunk is longer than ``max_chars`` characters (see :func:`default_max_chars`),
   whatever the tokenizer says. A piece over it descends like a piece over the token budget,
   and packing never joins atoms past it.
5. Unknown words: where the tokenizer reads several grapheme clusters as one unknown token (a
   WordPiece word over ``max_input_chars_per_word``, or glued to a character outside the
   vocabulary), it names cuts that leave every piece read token by token
   (``Tokenizer.unknown_word_cuts``), and no chunk crosses one.

Where the atoms come from is the caller's: ``splitting.text`` cuts prose and Markdown sections,
``splitting.code`` syntax trees; both pack with :func:`pack`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import not_
from typing import Callable

import numpy as np
import regex

from chunkline.sizers import Measure

SEPARATORS = ("\n\n", "\n", ". ", " ")
_GRAPHEME = regex.compile(r"\X")
# A character that continues the grapheme cluster before it (UAX #29: Extend, SpacingMark, ZWJ):
# no cut may fall right before one.
CLUSTER_CONTINUES = regex.compile(
    r"[\p{Grapheme_Cluster_Break=Extend}\p{Grapheme_Cluster_Break=SpacingMark}\u200d]"
)


@dataclass(frozen=True, slots=True)
class Chunk:
    """``text[start:end]`` (str indices, end-exclusive) under ``headings`` (outermost first),
    ``tokens`` long by the splitter's tokenizer; ``oversized`` only when one grapheme alone is
    over budget (in tokens or in characters). ``table_header`` is the header row and delimiter row of the table the chunk
    starts inside (its rows continue a table split between rows), else "": it is embedded before
    the chunk's text and counted in its budget, but it is not part of the span."""

    start: int
    end: int
    headings: tuple[str, ...]
    tokens: int
    oversized: bool = False
    table_header: str = ""


@dataclass(slots=True)
class Atoms:
    """Atoms of one section as parallel lists (cheaper than an object per atom)."""

    starts: list[int]
    ends: list[int]
    counts: list[int]

    def add(self, start: int, end: int, count: int) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.counts.append(count)


def default_max_chars(max_tokens: int) -> int:
    """The character bound a chunk of ``max_tokens`` tokens gets when none is given:
    ``32 * max_tokens + 1024``.

    Why a bound at all: a tokenizer may count a long run as one token. BERT's WordPiece maps any
    word over ``max_input_chars_per_word`` (100 for all-MiniLM-L6-v2) to one ``[UNK]``, and the
    words tokenizer counts any run without whitespace as one word, so a token budget alone lets
    a chunk carry a megabyte whose vector says nothing. Why these figures: 32 characters per
    token is eight times English prose under BPE or WordPiece (about 4), and above what
    whitespace-heavy text reaches (Markdown tables, ASCII art and indented code measured 9-15
    characters per token at 64 tokens and up with cl100k, o200k and MiniLM, 25-35 with whole
    words, whose URLs are single tokens); the 1024 keep small budgets from cutting one long URL
    or path. So text a tokenizer reads token by token never meets the bound, and what it does
    not read is cut into pieces of at most a few kilobytes.

    >>> default_max_chars(256)
    9216
    """
    return 32 * max_tokens + 1024


def char_bound(max_tokens: int, max_chars: int | None) -> int:
    """The character bound of a split: ``max_chars``, or :func:`default_max_chars` when None.
    The bound cannot be switched off, only raised. ValueError for anything but an int >= 1."""
    if max_chars is None:
        return default_max_chars(max_tokens)
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be None or an int >= 1, got {max_chars!r}")
    return max_chars


def check_arguments(text: object, max_tokens: object, overlap: object) -> None:
    """TypeError / ValueError for arguments no splitter accepts."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    check_budget(max_tokens, overlap)


def check_budget(max_tokens: object, overlap: object) -> None:
    """ValueError unless ``max_tokens >= 1`` and ``0 <= overlap < max_tokens`` (ints): the one
    home of the rule, asked by every splitter, by the config when it names a budget and by the
    pipeline's plan when it derives one."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < max_tokens:
        raise ValueError(f"overlap ({overlap!r}) must be an int >= 0 and below max_tokens "
                         f"({max_tokens})")


@dataclass(frozen=True, slots=True)
class RepeatedHeader:
    """A table split between rows: a chunk starting in [start, end) embeds ``header`` (``tokens``
    long on its own) before its text (the header row and delimiter row of a Markdown table)."""

    start: int
    end: int
    header: str
    tokens: int


def _repeat_at(repeats: Sequence[RepeatedHeader], position: int) -> RepeatedHeader | None:
    """The table header a chunk starting at ``position`` repeats, if any."""
    for repeat in repeats:
        if repeat.start <= position < repeat.end:
            return repeat
    return None


# ------------------------------------------------------------------------------------ atomize


def add_span(
    measure: Measure, lo: int, hi: int, limit: int, max_chars: int, atoms: Atoms
) -> None:
    """Append ``text[lo:hi]`` to ``atoms`` as one atom when it fits ``limit`` tokens and
    ``max_chars`` characters, else as the atoms :func:`cut_by_separators` cuts it into."""
    if lo >= hi:
        return
    count = measure.count(lo, hi) if hi - lo <= max_chars else None
    if count is not None and count <= limit:
        atoms.add(lo, hi, count)
    else:
        cut_by_separators(measure, lo, hi, 0, limit, max_chars, atoms)


def add_pieces(
    measure: Measure,
    starts: list[int],
    ends: list[int],
    counts: list[int | None],
    next_level: int,
    limit: int,
    max_chars: int,
    atoms: Atoms,
) -> None:
    """Append the pieces ``text[starts[k]:ends[k]]`` (contiguous, in order; ``counts`` as
    :meth:`Measure.piece_counts` gives them) to ``atoms``: a piece that fits ``limit`` tokens
    and ``max_chars`` characters becomes one atom, the others are cut in place by
    :func:`cut_by_separators` from ``SEPARATORS[next_level]`` down."""
    over = [k for k, count in enumerate(counts) if count is None or count > limit]
    if ends[-1] - starts[0] > max_chars:  # else no piece can be over in characters
        wide = [k for k, (a, b) in enumerate(zip(starts, ends)) if b - a > max_chars]
        if wide:
            over = sorted(set(over).union(wide))
    done = 0
    for k in over + [len(starts)]:
        if k > done:  # a run of fitting pieces: one extend instead of an append per atom
            atoms.starts.extend(starts[done:k])
            atoms.ends.extend(ends[done:k])
            atoms.counts.extend(counts[done:k])  # type: ignore[arg-type]  # no None: those pieces are in `over`
        if k < len(starts):
            cut_by_separators(measure, starts[k], ends[k], next_level, limit, max_chars, atoms)
        done = k + 1


def cut_by_separators(
    measure: Measure, lo: int, hi: int, level: int, limit: int, max_chars: int, atoms: Atoms
) -> None:
    """Append atoms tiling ``text[lo:hi]``, known to be over budget, to ``atoms``: cut on
    ``SEPARATORS[level]`` and, where a piece is still over a bound, on the levels below it,
    then between grapheme clusters. Each atom fits ``limit`` and ``max_chars`` unless it is
    a single grapheme cluster."""
    measure.prepare_to_cut(lo, hi)
    if level == len(SEPARATORS):
        _grapheme_atoms(measure, lo, hi, limit, max_chars, atoms)
        return
    ends = separator_cuts(measure, lo, hi, SEPARATORS[level])
    if len(ends) == 1:  # separator absent, or only trailing: same range, next level
        cut_by_separators(measure, lo, hi, level + 1, limit, max_chars, atoms)
        return
    starts = [lo] + ends[:-1]
    counts = measure.piece_counts(starts, ends, limit)
    add_pieces(measure, starts, ends, counts, level + 1, limit, max_chars, atoms)


def separator_cuts(measure: Measure, lo: int, hi: int, separator: str) -> list[int]:
    """Ends of the pieces of ``text[lo:hi]`` cut after each ``separator`` (kept on the left),
    increasing, the last one ``hi``; no cut falls inside a grapheme cluster.

    >>> from chunkline.sizers import get_tokenizer
    >>> separator_cuts(get_tokenizer("words").measure("a b. c"), 0, 6, ". ")
    [5, 6]
    """
    view = measure.cut_view
    if isinstance(view, bytes):
        if hi - lo > _VECTOR_CUT_MIN:
            ends = _separator_ends(view, lo, hi, separator.encode("ascii"))
        else:
            ends = _split_ends(view[lo:hi].split(separator.encode("ascii")), lo, hi, len(separator))
        maybe_wide = view.find(b"?", lo, hi) >= 0 or view.find(b"\v", lo, hi) >= 0
    else:
        # str.split: C speed, and the same cuts as a left-to-right find loop.
        ends = _split_ends(view[lo:hi].split(separator), lo, hi, len(separator))
        maybe_wide = True  # what any non-ASCII character became, in a bytes view
    text = measure.text
    if separator.endswith(" ") and maybe_wide and not text[lo:hi].isascii():
        # A space followed by a combining mark (or ZWJ) is one grapheme cluster: no cut inside
        # it. Newlines never join the next character (UAX #29 GB4), so only spaces check.
        ends = [e for e in ends if e >= hi or not CLUSTER_CONTINUES.match(text, e)]
    return ends


# Longer pieces are cut with numpy (a few passes over the bytes) rather than bytes.split, which
# makes an object per part: the first level of a 2 MB document has ~13,000.
_VECTOR_CUT_MIN = 4096


def _split_ends(parts: list, lo: int, hi: int, width: int) -> list[int]:
    ends = list(accumulate([len(part) + width for part in parts[:-1]], initial=lo))[1:]
    if parts[-1]:
        ends.append(hi)
    return ends


def _separator_ends(view: bytes, lo: int, hi: int, separator: bytes) -> list[int]:
    """_split_ends(view[lo:hi].split(separator), ...) for separators of one or two bytes."""
    if hi <= lo:
        return []
    codes = np.frombuffer(view, dtype=np.uint8, count=hi - lo, offset=lo)
    first = codes == separator[0]
    if len(separator) == 1:
        found = np.flatnonzero(first)
    else:
        found = np.flatnonzero(first[:-1] & (codes[1:] == separator[1]))
        if separator[0] == separator[1] and len(found) > 1:
            # split() takes the leftmost match and goes on after it: in a run of matches
            # ("\n\n\n\n") only every other one, counted from the run's first, is a cut.
            run_starts = np.empty(len(found), dtype=bool)
            run_starts[0] = True
            np.not_equal(found[1:], found[:-1] + 1, out=run_starts[1:])
            run_first = found[run_starts][np.cumsum(run_starts) - 1]
            found = found[((found - run_first) & 1) == 0]
    ends = (found + (lo + len(separator))).tolist()
    if not ends or ends[-1] != hi:
        ends.append(hi)
    return ends


def _grapheme_atoms(
    measure: Measure, lo: int, hi: int, limit: int, max_chars: int, atoms: Atoms
) -> None:
    """Below the last separator: maximal runs of whole grapheme clusters that fit (in tokens
    and in characters).

    Equivalent to packing single graphemes greedily, without an object per grapheme: the
    document-wide token positions say roughly where the budget runs out, and exact counts of
    the candidate run (encoding at most about one chunk) settle it.
    """
    bounds = [lo] + [m.end() for m in _GRAPHEME.finditer(measure.text, lo, hi)]
    token_starts = measure.token_starts_in(lo, hi)
    last = len(bounds) - 1
    first = 0
    while first < last:
        start = bounds[first]
        at = int(np.searchsorted(token_starts, start))
        if at + limit < len(token_starts):
            guess = bisect_right(bounds, int(token_starts[at + limit])) - 1
        else:
            guess = last
        # The run may not pass max_chars: below it a WordPiece [UNK] or a whole word counts the
        # same however long it grows, so the token count alone would never stop it.
        widest = min(bisect_right(bounds, start + max_chars, first) - 1, last)
        if widest <= first:  # one grapheme alone is over the character bound
            end_index: int | None = first + 1
        else:
            end_index = _largest_fitting(
                first + 1, widest, min(max(guess, first + 1), widest),
                lambda j: measure.count(start, bounds[j]) <= limit,
            )
        if end_index is None:  # one grapheme alone is over budget
            end_index = first + 1
        atoms.add(start, bounds[end_index], measure.count(start, bounds[end_index]))
        first = end_index


def _largest_fitting(lo: int, hi: int, guess: int, fits: Callable[[int], bool]) -> int | None:
    """Largest j in [lo, hi] with fits(j), searching out from ``guess`` (galloping, then
    bisecting), or None if fits(lo) is false. Counts grow with the slice in practice; the
    result is verified either way, so a non-monotone tokenizer can only cost budget, never
    exceed it."""
    if fits(guess):
        good, step = guess, 1
        while True:
            if good == hi:
                return good
            probe = min(good + step, hi)
            if not fits(probe):
                bad = probe
                break
            good, step = probe, step * 2
    else:
        bad, step = guess, 1
        while True:
            if bad == lo:
                return None
            probe = max(bad - step, lo)
            if fits(probe):
                good = probe
                break
            bad, step = probe, step * 2
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


# --------------------------------------------------------------------------------------- pack


def pack(
    measure: Measure, atoms: Atoms, limit: int, max_chars: int, overlap: int,
    headings: tuple[str, ...], repeats: Sequence[RepeatedHeader] = (), cuts: Sequence[int] = (),
) -> list[Chunk]:
    """Greedy packing of atoms into chunks (steps 2-3 above). A chunk that starts inside a split
    table's rows (``repeats``) packs to the budget its repeated header leaves, and the header
    plus its text is counted exactly before it is emitted. A chunk never passes ``max_chars``
    characters unless it is one atom (a single grapheme over it), and never crosses one of
    ``cuts`` (increasing positions, :meth:`Tokenizer.unknown_word_cuts`)."""
    starts, ends, counts = atoms.starts, atoms.ends, atoms.counts
    n = len(starts)
    if n == 0:
        return []
    if cuts:
        inside = cuts[bisect_right(cuts, starts[0]) : bisect_left(cuts, ends[-1])]
        if inside:
            return [
                chunk
                for group in _group_between_cuts(measure, atoms, inside, limit, max_chars)
                for chunk in pack(measure, group, limit, max_chars, overlap, headings, repeats)
            ]
    if starts[1:] != ends[:-1]:
        # The atomizer's invariant, which the counts below rely on: a break would be a bug.
        raise AssertionError("atoms of a section must be contiguous")
    # bounds[i] is where atom i starts and bounds[j] where atom j - 1 ends: one array answers
    # for both edges of any run of atoms.
    bounds = [starts[0], *ends]
    # Joins across additive cuts are plain sums; the rest are counted by the measure.
    prefix = list(accumulate(counts, initial=0))
    additive = measure.additive_cuts(bounds)
    # unsafe[m]: non-additive joins among atom starts 1..m-1 (the section start is not a join)
    unsafe = [0, 0, *accumulate(map(not_, additive[1:-1]))]
    # What estimates a run of atoms, and where that estimate is exact: the measure's answer.
    guide, exact_edge = measure.packing_guide(bounds, prefix, additive)

    def joined(i: int, j: int) -> int:
        """Exact tokens of atoms i..j-1 joined."""
        if j - i == 1:
            return counts[i]
        if unsafe[j] == unsafe[i + 1]:
            return prefix[j] - prefix[i]
        if exact_edge[i] and exact_edge[j]:
            return guide[j] - guide[i]
        return measure.count(starts[i], ends[j - 1])

    text = measure.text
    count = measure.tokenizer.count

    def with_header(repeat: RepeatedHeader, i: int, j: int) -> bool:
        """The repeated header and atoms i..j-1 fit together (counted as embedded)."""
        return count(repeat.header + text[starts[i] : ends[j - 1]]) <= limit

    def budget(i: int) -> tuple[int, RepeatedHeader | None]:
        repeat = _repeat_at(repeats, starts[i]) if repeats else None
        return (limit, None) if repeat is None else (limit - repeat.tokens, repeat)

    def fits(i: int, j: int) -> bool:
        """Atoms i..j-1 make a chunk within budget, any repeated header included."""
        if bounds[j] - bounds[i] > max_chars:
            return False
        room, repeat = budget(i)
        return joined(i, j) <= room and (repeat is None or with_header(repeat, i, j))

    chunks: list[Chunk] = []
    i = 0
    while i < n:
        room, repeat = budget(i) if repeats else (limit, None)
        # The character bound caps the run before any count: joining pieces of one long word
        # (a no-space run cut between graphemes) gives one [UNK] or one word again, so "the
        # joined text fits" would hold for the whole run.
        widest = max(bisect_right(bounds, bounds[i] + max_chars, i + 1) - 1, i + 1)
        j = min(max(bisect_right(guide, guide[i] + room) - 1, i + 1), widest)
        tokens = joined(i, j)
        if tokens > room:
            while j > i + 1:
                j -= 1
                tokens = joined(i, j)
                if tokens <= room:
                    break
        else:
            while j < widest:
                wider = joined(i, j + 1)
                if wider > room:
                    break
                j, tokens = j + 1, wider
        if repeat is not None:
            # Counts are not additive across the header's join either: settle it exactly.
            while j > i + 1 and not with_header(repeat, i, j):
                j -= 1
            tokens = joined(i, j)
            if not with_header(repeat, i, j):
                repeat = None  # one atom that fits the budget, but not beside the header
        oversized = tokens > limit or ends[j - 1] - starts[i] > max_chars
        chunks.append(Chunk(starts[i], ends[j - 1], headings, tokens, oversized,
                            repeat.header if repeat is not None else ""))
        if j == n:
            break
        k = j
        if overlap:
            while k > i + 1 and joined(k - 1, j) <= overlap and fits(k - 1, j + 1):
                k -= 1
        i = k
    return chunks


def _group_between_cuts(
    measure: Measure, atoms: Atoms, cuts: Sequence[int], limit: int, max_chars: int
) -> list[Atoms]:
    """``atoms`` in groups with every cut between two groups: an atom a cut falls inside is
    re-cut there (its pieces counted, and cut further where over a bound, as in atomizing),
    since joining the pieces back is what the cut forbids (a piece of a 20,000-letter word
    counts tens of tokens, the whole word one [UNK], so a packer that only asks whether the
    joined text fits would join them all again)."""
    groups = [Atoms([], [], [])]
    k = 0
    for start, end, count in zip(atoms.starts, atoms.ends, atoms.counts):
        if k < len(cuts) and cuts[k] == start:
            groups.append(Atoms([], [], []))
            k += 1
        inner: list[int] = []
        while k < len(cuts) and cuts[k] < end:
            inner.append(cuts[k])
            k += 1
        if not inner:
            groups[-1].add(start, end, count)
            continue
        lows, highs = [start, *inner], [*inner, end]
        counts = measure.piece_counts(lows, highs, limit)
        for lo, hi, piece in zip(lows, highs, counts):
            if lo != start:
                groups.append(Atoms([], [], []))
            add_pieces(measure, [lo], [hi], [piece], 0, limit, max_chars, groups[-1])
    return [group for group in groups if group.starts]
