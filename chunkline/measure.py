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

    def piece_counts(self, spans: Sequence[tuple[int, int]], limit: int) -> list[int | None]:
        """Exact count per span, or None where the span is surely over ``limit`` (a caller that
        only needs to know it does not fit is spared the encode)."""
        return self.tokenizer.counts([self.text[a:b] for a, b in spans])

    def additive_at(self, pos: int) -> bool:
        """True when count(a, b) == count(a, pos) + count(pos, b) for every a <= pos <= b."""
        return False

    def token_starts_in(self, lo: int, hi: int) -> np.ndarray:
        """Token start offsets within ``text[lo:hi]``: a guide to where a budget runs out inside
        a long unbroken run (the caller verifies with :meth:`count`)."""
        return self.tokenizer.token_starts(self.text[lo:hi]) + lo


class SliceMeasure(Measure):
    """Any tokenizer without a locality guarantee: every count re-encodes its slice."""


class AdditiveMeasure(Measure):
    """Tokenizers whose pre-tokens never cross whitespace (words, chars, BERT WordPiece).

    Counts are additive at every whitespace-adjacent cut, so the splitter sums the counts of
    pieces encoded once (in a batch), and encodes a slice only where it was cut mid-word.
    """

    def __init__(
        self, text: str, tokenizer: "Tokenizer", cut_is_additive: Callable[[str, int], bool]
    ) -> None:
        super().__init__(text, tokenizer)
        self._cut_is_additive = cut_is_additive

    def additive_at(self, pos: int) -> bool:
        return self._cut_is_additive(self.text, pos)


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
#  - after a newline, before printable ASCII other than "/": no pre-token crosses a newline into
#    non-space text (o200k's punctuation pre-token may swallow "\n/", hence the exclusion);
#  - before " x" where x is an ASCII letter and the character before is printable ASCII: the
#    letter pre-token " x..." starts exactly there, and the pre-token before it ends there
#    whichever way the text continues.
# Both are conservative: a cut that is not listed is handled by re-encoding the edge.
_ADDITIVE_CUT = r"(?<=\n)(?=[!-.0-~])|(?<=[!-~])(?= [A-Za-z])"
_NEXT_CUT = regex.compile(_ADDITIVE_CUT)
_PREV_CUT = regex.compile("(?r)" + _ADDITIVE_CUT)


class TiktokenMeasure(Measure):
    """tiktoken: one ``encode_to_numpy`` pass; a slice's count is the document tokens starting
    inside it, corrected at each edge that is not an additive cut by re-encoding the few
    characters between the edge and the nearest additive cut (cached per edge)."""

    def __init__(self, text: str, tokenizer: "TiktokenTokenizer") -> None:
        super().__init__(text, tokenizer)
        ids = tokenizer.token_ids(text)
        lengths = tokenizer.token_byte_lengths()[ids]
        self._token_byte_starts = np.cumsum(lengths) - lengths
        self._ascii = text.isascii()
        self._char_bytes: np.ndarray | None = None
        self._starts: np.ndarray | None = None
        self._left_fix: dict[int, tuple[int, int]] = {}
        self._right_fix: dict[int, tuple[int, int]] = {}
        self._encode = tokenizer.encoding.encode_ordinary

    def _byte(self, pos: int) -> int:
        if self._ascii:
            return pos
        if self._char_bytes is None:
            self._char_bytes = np.concatenate(([0], np.cumsum(_utf8_lengths(self.text))))
        return int(self._char_bytes[pos])

    def _before(self, pos: int) -> int:
        """Document tokens starting before ``pos``."""
        return int(np.searchsorted(self._token_byte_starts, self._byte(pos)))

    def tokens_before(self, positions: Sequence[int]) -> list[int]:
        """Document tokens starting before each position (vectorized :meth:`_before`)."""
        if self._ascii:
            byte_positions = np.asarray(positions, dtype=np.int64)
        else:
            self._byte(0)
            byte_positions = self._char_bytes[np.asarray(positions, dtype=np.int64)]
        return np.searchsorted(self._token_byte_starts, byte_positions).tolist()

    def token_starts_in(self, lo: int, hi: int) -> np.ndarray:
        if self._starts is None:
            self._starts = byte_to_char_starts(self.text, self._token_byte_starts)
        return self._starts[np.searchsorted(self._starts, lo) : np.searchsorted(self._starts, hi)]

    def additive_at(self, pos: int) -> bool:
        text = self.text
        if pos <= 0 or pos >= len(text):
            return True
        return _NEXT_CUT.match(text, pos) is not None

    def _next_cut(self, pos: int, limit: int) -> int | None:
        if self.additive_at(pos):
            return pos
        found = _NEXT_CUT.search(self.text, pos, min(limit + 2, len(self.text)))
        return found.start() if found is not None and found.start() <= limit else None

    def _prev_cut(self, pos: int, limit: int) -> int | None:
        if self.additive_at(pos):
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

    def piece_counts(self, spans: Sequence[tuple[int, int]], limit: int) -> list[int | None]:
        out: list[int | None] = []
        for a, b in spans:
            # Far over the limit by the document pass: no need for an exact figure.
            if self._before(b) - self._before(a) > 2 * limit + 16:
                out.append(None)
            else:
                out.append(self.count(a, b))
        return out
