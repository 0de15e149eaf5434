"""Exact token counts of slices of one document, from one tokenizer pass.

The splitter asks for many counts: every candidate atom, every candidate join, every overlap.
Re-encoding each growing slice makes tokenizer work grow with the number of candidate joins
(the seed's "Complexity" note). A :class:`Measure` answers them from one pass instead, and stays
exact for the emitted text: both tiktoken and BERT-style tokenizers cut text into pre-tokens
first and encode each on its own, so a slice can only differ from the document-wide pass at its
edges. Each measure knows where a cut is harmless for its tokenizer and re-encodes only the
edges that are not.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

import numpy as np
import regex

if TYPE_CHECKING:
    from chunkline.tokenizers import TiktokenTokenizer, Tokenizer


class Measure:
    """Counts for slices of ``text``. Subclasses must keep :meth:`count` exact."""

    def __init__(self, text: str, tokenizer: "Tokenizer") -> None:
        self.text = text
        self.tokenizer = tokenizer

    def count(self, start: int, end: int) -> int:
        """Exact tokens in ``text[start:end]``."""
        return self.tokenizer.count(self.text[start:end])

    def piece_counts(self, starts: list[int], ends: list[int], limit: int) -> list[int | None]:
        """Exact count per piece ``text[starts[k]:ends[k]]``, or None where a piece is surely
        over ``limit`` (a caller that only needs to know it does not fit is spared the encode)."""
        text = self.text
        return self.tokenizer.counts([text[a:b] for a, b in zip(starts, ends)])

    def additive_cuts(self, positions: list[int]) -> list[bool]:
        """Per position: True when count(a, b) == count(a, p) + count(p, b) for all a <= p <= b."""
        return [False] * len(positions)

    def descending(self, lo: int, hi: int) -> None:
        """The splitter is about to cut ``text[lo:hi]`` (over budget) into smaller pieces."""

    def token_starts_in(self, lo: int, hi: int) -> np.ndarray:
        """Token start offsets within ``text[lo:hi]``: a guide to where a budget runs out inside
        a long unbroken run (the caller verifies with :meth:`count`)."""
        return self.tokenizer.token_starts(self.text[lo:hi]) + lo


class SliceMeasure(Measure):
    """Any tokenizer without a locality guarantee: every count re-encodes its slice."""


class AdditiveMeasure(Measure):
    """Tokenizers whose pre-tokens never cross whitespace (words, chars, BERT WordPiece).

    Counts are additive at every cut beside whitespace, so the splitter sums the counts of pieces
    encoded once (in a batch), and encodes a slice only where it was cut mid-word.
    ``whitespace`` is the tokenizer's own set of separating characters; None means every cut is
    additive (characters).
    """

    def __init__(self, text: str, tokenizer: "Tokenizer", whitespace: str | None) -> None:
        super().__init__(text, tokenizer)
        self._whitespace = whitespace
        # An over-budget piece being cut: its token starts, from one encode, answer the counts
        # of all the smaller pieces inside it (exact where both edges are additive cuts).
        self._region: tuple[int, int, list[int]] | None = None

    def descending(self, lo: int, hi: int) -> None:
        region = self._region
        if region is not None and region[0] <= lo and hi <= region[1]:
            return
        self._region = (lo, hi, (self.tokenizer.token_starts(self.text[lo:hi]) + lo).tolist())

    def piece_counts(self, starts: list[int], ends: list[int], limit: int) -> list[int | None]:
        region = self._region
        if region is None or not (region[0] <= starts[0] and ends[-1] <= region[1]):
            return super().piece_counts(starts, ends, limit)
        token_starts = region[2]
        additive = self.additive_cuts(starts + ends[-1:])
        out: list[int | None] = []
        for k, (a, b) in enumerate(zip(starts, ends)):
            if additive[k] and additive[k + 1]:
                out.append(bisect_left(token_starts, b) - bisect_left(token_starts, a))
            else:
                out.append(self.count(a, b))
        return out

    def additive_cuts(self, positions: list[int]) -> list[bool]:
        separators = self._whitespace
        if separators is None:
            return [True] * len(positions)
        text, n = self.text, len(self.text)
        return [
            p <= 0 or p >= n or text[p - 1] in separators or text[p] in separators
            for p in positions
        ]


# Cuts where a tiktoken count (cl100k_base and o200k_base pre-token regexes) is additive:
#  (A) after a newline, before a character that is neither whitespace nor "/": no pre-token
#      crosses a newline into non-space text (o200k's punctuation pre-token may swallow "\n/");
#  (B) after a newline, before a run of spaces/tabs that ends at such a character: the newline
#      pre-token ends at the last newline of a whitespace run, and the run is read the same way
#      whether or not the text before it is there;
#  (C) before " x" (x an ASCII letter) after a non-space: the letter pre-token " x..." starts
#      exactly there, and the pre-token before it ends there whichever way the text continues.
# All three are conservative: a cut not listed is counted by re-encoding its edge. The regex
# finds cuts (A) and (C) while scanning for the nearest one; (B) cuts are found by the mask.
_ADDITIVE_CUT = r"(?<=\n)(?=[^\s/])|(?<=\S)(?= [A-Za-z])"
_NEXT_CUT = regex.compile(_ADDITIVE_CUT)
_PREV_CUT = regex.compile("(?r)" + _ADDITIVE_CUT)
# What tiktoken's regex engine takes for \s (Unicode White_Space).
_WHITESPACE_CODES = (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
                     *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
_WHITESPACE_TABLE = np.zeros(0x3001, dtype=bool)
_WHITESPACE_TABLE[list(_WHITESPACE_CODES)] = True
_WHITESPACE_CHARS = frozenset(map(chr, _WHITESPACE_CODES))
_NOT_SOLID = _WHITESPACE_CHARS | {"/"}
_ASCII_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class TiktokenMeasure(Measure):
    """tiktoken: one ``encode_to_numpy`` pass; a slice's count is the document tokens starting
    inside it, corrected at each edge that is not an additive cut by re-encoding the few
    characters between the edge and the nearest additive cut (cached per edge)."""

    def __init__(self, text: str, tokenizer: "TiktokenTokenizer") -> None:
        super().__init__(text, tokenizer)
        self._starts = tokenizer.token_starts(text)
        # bisect on a memoryview reads Python ints without converting the whole array.
        self._starts_view = memoryview(self._starts)
        # Code points for vectorized cut checks; ASCII text is its own byte string.
        if text.isascii():
            self._code_points = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        else:
            self._code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
        self._left_fix: dict[int, tuple[int, int]] = {}
        self._right_fix: dict[int, tuple[int, int]] = {}
        self._encode = tokenizer.encoding.encode_ordinary

    def _before(self, pos: int) -> int:
        """Document tokens starting before ``pos``."""
        return bisect_left(self._starts_view, pos)

    def tokens_before(self, positions: list[int]) -> list[int]:
        """Document tokens starting before each position: the estimate the packer searches."""
        return np.searchsorted(self._starts, positions).tolist()

    def token_starts_in(self, lo: int, hi: int) -> np.ndarray:
        starts = self._starts
        return starts[np.searchsorted(starts, lo) : np.searchsorted(starts, hi)]

    def _additive(self, positions: np.ndarray) -> np.ndarray:
        return _tiktoken_additive(self.text, self._code_points, positions)

    def additive_cuts(self, positions: list[int]) -> list[bool]:
        return self._additive(np.asarray(positions, dtype=np.int64)).tolist()

    def _is_additive(self, pos: int) -> bool:
        """Scalar twin of :func:`_tiktoken_additive` (a numpy call costs more than it saves)."""
        text = self.text
        n = len(text)
        if pos <= 0 or pos >= n:
            return True
        previous, current = text[pos - 1], text[pos]
        if previous == "\n":
            if current == " " or current == "\t":
                end = pos
                while end < n and (text[end] == " " or text[end] == "\t"):
                    end += 1
                return end < n and text[end] not in _NOT_SOLID
            return current not in _NOT_SOLID
        return (
            current == " " and previous not in _WHITESPACE_CHARS and pos + 1 < n
            and text[pos + 1] in _ASCII_LETTERS
        )

    def _next_cut(self, pos: int, limit: int) -> int | None:
        if self._is_additive(pos):
            return pos
        found = _NEXT_CUT.search(self.text, pos, min(limit + 2, len(self.text)))
        return found.start() if found is not None and found.start() <= limit else None

    def _prev_cut(self, pos: int, limit: int) -> int | None:
        if self._is_additive(pos):
            return pos
        # endpos=pos+1 hides text past pos from the lookaheads: a miss is possible, a false
        # cut is not, and pos itself was checked above.
        found = _PREV_CUT.search(self.text, limit, pos + 1)
        return found.start() if found is not None else None

    def _left(self, start: int, end: int) -> tuple[int, int] | None:
        """(first additive cut >= start, exact tokens of text[start:cut]), cut <= end."""
        fix = self._left_fix.get(start)
        if fix is None:
            cut = self._next_cut(start, end)
            if cut is None:
                return None
            fix = (cut, len(self._encode(self.text[start:cut])) if cut > start else 0)
            self._left_fix[start] = fix
        return fix if fix[0] <= end else None

    def _right(self, end: int, start: int) -> tuple[int, int] | None:
        """(last additive cut <= end, exact tokens of text[cut:end]), cut >= start."""
        fix = self._right_fix.get(end)
        if fix is None:
            cut = self._prev_cut(end, start)
            if cut is None:
                return None
            fix = (cut, len(self._encode(self.text[cut:end])) if cut < end else 0)
            self._right_fix[end] = fix
        return fix if fix[0] >= start else None

    def count(self, start: int, end: int) -> int:
        if end <= start:
            return 0
        left = self._left(start, end)
        right = self._right(end, start) if left is not None else None
        if left is None or right is None or left[0] > right[0]:
            return len(self._encode(self.text[start:end]))
        return left[1] + self._before(right[0]) - self._before(left[0]) + right[1]

    def _small_piece_count(self, start: int, end: int, limit: int) -> int | None:
        if self._is_additive(start) and self._is_additive(end):
            return self._before(end) - self._before(start)
        if self._before(end) - self._before(start) > 2 * limit + 16:
            return None
        return self.count(start, end)

    def piece_counts(self, starts: list[int], ends: list[int], limit: int) -> list[int | None]:
        if len(starts) < 16:
            # A handful of pieces (a descended paragraph): Python beats numpy's per-call cost.
            return [self._small_piece_count(a, b, limit) for a, b in zip(starts, ends)]
        edges = np.asarray(starts + ends[-1:], dtype=np.int64)
        before = np.searchsorted(self._starts, edges)
        estimates = before[1:] - before[:-1]
        additive = self._additive(edges)
        exact = additive[:-1] & additive[1:]  # both edges additive: the estimate is the count
        far = estimates > 2 * limit + 16  # far over by the document pass: no exact figure needed
        out: list[int | None] = estimates.tolist()
        for k in np.flatnonzero(far).tolist():
            out[k] = None
        for k in np.flatnonzero(~exact & ~far).tolist():
            out[k] = self.count(starts[k], ends[k])
        return out


def _tiktoken_additive(text: str, code_points: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Per cut position: True where a tiktoken count is additive (rules A-C above). Evaluated
    only where asked, so no pass over the whole document is needed."""
    n = len(code_points)
    out = (positions <= 0) | (positions >= n)
    inner = ~out
    at = positions[inner]
    if not len(at):
        return out
    previous = code_points[at - 1].astype(np.int64)
    current = code_points[at].astype(np.int64)
    following = code_points[np.minimum(at + 1, n - 1)].astype(np.int64)
    following[at + 1 >= n] = 0x20  # nothing after the text: never a letter
    newline_before = previous == 0x0A
    rule_a = newline_before & _solid(current)
    rule_c = (current == 0x20) & ~_space(previous) & _ascii_letter(following)
    result = rule_a | rule_c
    blank_run = newline_before & ((current == 0x20) | (current == 0x09))
    for k in np.flatnonzero(blank_run).tolist():  # rule B: the blank run is short, scan it
        end = int(at[k])
        while end < n and (text[end] == " " or text[end] == "\t"):
            end += 1
        result[k] = end < n and text[end] not in _NOT_SOLID
    out[inner] = result
    return out


def _space(cp: np.ndarray) -> np.ndarray:
    return _WHITESPACE_TABLE[np.minimum(cp, 0x3000)] & (cp <= 0x3000)


def _solid(cp: np.ndarray) -> np.ndarray:
    return ~_space(cp) & (cp != 0x2F)


def _ascii_letter(cp: np.ndarray) -> np.ndarray:
    return ((cp >= 0x41) & (cp <= 0x5A)) | ((cp >= 0x61) & (cp <= 0x7A))
