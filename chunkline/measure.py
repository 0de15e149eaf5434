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
from typing import TYPE_CHECKING, Callable, Sequence

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


def byte_to_char_starts(text: str, byte_starts: np.ndarray) -> np.ndarray:
    """Map UTF-8 byte offsets into ``text`` to the index of the character holding each byte.

    Lone surrogates count 3 bytes: tiktoken replaces them with U+FFFD, which is 3 bytes too.
    """
    if text.isascii():
        return byte_starts.astype(np.int64, copy=False)
    char_of_byte = np.repeat(np.arange(len(text), dtype=np.int64), _utf8_lengths(text))
    return char_of_byte[byte_starts]


def _utf8_lengths(text: str) -> np.ndarray:
    code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return (
        1
        + (code_points >= 0x80).astype(np.int64)
        + (code_points >= 0x800)
        + (code_points >= 0x10000)
    )


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
_WHITESPACE_TABLE = np.zeros(0x3001, dtype=bool)
_WHITESPACE_TABLE[
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
     0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
] = True


class TiktokenMeasure(Measure):
    """tiktoken: one ``encode_to_numpy`` pass; a slice's count is the document tokens starting
    inside it, corrected at each edge that is not an additive cut by re-encoding the few
    characters between the edge and the nearest additive cut (cached per edge)."""

    def __init__(self, text: str, tokenizer: "TiktokenTokenizer") -> None:
        super().__init__(text, tokenizer)
        ids = tokenizer.token_ids(text)
        lengths = tokenizer.token_byte_lengths()[ids]
        self._token_byte_starts = np.cumsum(lengths) - lengths
        if text.isascii():
            self._char_bytes = None
            code_points = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        else:
            code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
            self._char_bytes = np.concatenate(([0], np.cumsum(_utf8_lengths(text))))
        self._additive = _tiktoken_additive_mask(code_points).tobytes()
        self._starts: np.ndarray | None = None
        self._byte_starts_list: list[int] | None = None
        self._left_fix: dict[int, tuple[int, int]] = {}
        self._right_fix: dict[int, tuple[int, int]] = {}
        self._encode = tokenizer.encoding.encode_ordinary

    def _before(self, pos: int) -> int:
        """Document tokens starting before ``pos``."""
        if self._byte_starts_list is None:
            # bisect on a list beats a scalar numpy call by ~10x; built once, on first use.
            self._byte_starts_list = self._token_byte_starts.tolist()
        byte = pos if self._char_bytes is None else int(self._char_bytes[pos])
        return bisect_left(self._byte_starts_list, byte)

    def _tokens_before(self, positions: list[int]) -> np.ndarray:
        where = np.asarray(positions, dtype=np.int64)
        if self._char_bytes is not None:
            where = self._char_bytes[where]
        return np.searchsorted(self._token_byte_starts, where)

    def tokens_before(self, positions: list[int]) -> list[int]:
        """Document tokens starting before each position: the estimate the packer searches."""
        return self._tokens_before(positions).tolist()

    def token_starts_in(self, lo: int, hi: int) -> np.ndarray:
        if self._starts is None:
            self._starts = byte_to_char_starts(self.text, self._token_byte_starts)
        return self._starts[np.searchsorted(self._starts, lo) : np.searchsorted(self._starts, hi)]

    def additive_cuts(self, positions: list[int]) -> list[bool]:
        additive = self._additive
        return [additive[p] == 1 for p in positions]

    def _next_cut(self, pos: int, limit: int) -> int | None:
        if self._additive[pos]:
            return pos
        found = _NEXT_CUT.search(self.text, pos, min(limit + 2, len(self.text)))
        return found.start() if found is not None and found.start() <= limit else None

    def _prev_cut(self, pos: int, limit: int) -> int | None:
        if self._additive[pos]:
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

    def piece_counts(self, starts: list[int], ends: list[int], limit: int) -> list[int | None]:
        estimates = self._tokens_before(ends) - self._tokens_before(starts)
        additive = self._additive
        out: list[int | None] = estimates.tolist()
        for k in np.flatnonzero(estimates > 2 * limit + 16).tolist():
            out[k] = None  # far over by the document pass: an exact figure is not needed
        for k, (a, b) in enumerate(zip(starts, ends)):
            # The estimate is exact when both edges are additive cuts.
            if out[k] is not None and not (additive[a] and additive[b]):
                out[k] = self.count(a, b)
        return out


def _tiktoken_additive_mask(code_points: np.ndarray) -> np.ndarray:
    """uint8 per cut position 0..n: 1 where a tiktoken count is additive (see _ADDITIVE_CUT)."""
    n = len(code_points)
    mask = np.zeros(n + 1, dtype=np.uint8)
    mask[0] = mask[n] = 1
    if n < 2:
        return mask
    cp = code_points.astype(np.int64, copy=False)
    space = _WHITESPACE_TABLE[np.minimum(cp, 0x3000)] & (cp <= 0x3000)
    letter = ((cp >= 0x41) & (cp <= 0x5A)) | ((cp >= 0x61) & (cp <= 0x7A))
    solid = ~space & (cp != 0x2F)
    newline_before = cp[:-1] == 0x0A  # for cuts 1..n-1
    mask[1:n] |= newline_before & solid[1:]  # (A)
    blank = (cp == 0x20) | (cp == 0x09)
    candidates = np.flatnonzero(newline_before & blank[1:]) + 1  # (B): cuts before a blank run
    if len(candidates):
        not_blank = np.flatnonzero(~blank)
        after = np.searchsorted(not_blank, candidates)
        inside = after < len(not_blank)
        # A run that reaches the end of the text is not a cut: there "\s++$" takes the newline
        # and the run as one pre-token.
        run_end = not_blank[after[inside]]
        mask[candidates[inside][solid[run_end]]] = 1
    mask[1 : n - 1] |= ~space[:-2] & (cp[1:-1] == 0x20) & letter[2:]  # (C)
    return mask
