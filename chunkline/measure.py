"""Exact token counts of slices of one document, from one tokenizer pass.

The splitter asks for many counts: every candidate atom, every candidate join, every overlap.
Re-encoding each growing slice makes tokenizer work grow with the number of candidate joins
(quadratic in the chunk length for a naive recursive splitter). A :class:`Measure` answers them from one pass instead, and stays
exact for the emitted text: both tiktoken and BERT-style tokenizers cut text into pre-tokens
first and encode each on its own, so a slice can only differ from the document-wide pass at its
edges. Each measure knows where a cut is harmless for its tokenizer and re-encodes only the
edges that are not.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from chunkline.tokenizers import TiktokenTokenizer, Tokenizer


class Measure:
    """Counts for slices of ``text``. Subclasses must keep :meth:`count` exact."""

    def __init__(self, text: str, tokenizer: "Tokenizer") -> None:
        self.text = text
        self.tokenizer = tokenizer
        # What the splitter cuts on its (ASCII) separators: the text itself, or a bytes copy
        # with one byte per character and every ASCII character kept (same cut positions; a
        # bytes split is ~2x a str split, more for text stored 4 bytes per character).
        self.cut_view: str | bytes = text

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
        inside: list[int] = []  # pieces cut inside a word: encoded on their own
        for k, (a, b) in enumerate(zip(starts, ends)):
            if additive[k] and additive[k + 1]:
                out.append(bisect_left(token_starts, b) - bisect_left(token_starts, a))
            else:
                out.append(None)
                inside.append(k)
        if len(inside) < _FEW:
            for k in inside:
                out[k] = self.count(starts[k], ends[k])
        else:
            # Many at once (a long word cut into pieces that each read token by token): one
            # batch, which the Hugging Face tokenizer runs on all cores.
            text = self.text
            counts = self.tokenizer.counts([text[starts[k] : ends[k]] for k in inside])
            for k, count in zip(inside, counts):
                out[k] = count
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
#      exactly there, and the pre-token before it ends there whichever way the text continues;
#  (D) after an ASCII letter, before an ASCII character that is not a letter, a digit, "'" or
#      "?" (which may stand for a non-ASCII letter or mark): every pre-token holding a letter
#      ends at the last letter of its run (o200k's contraction suffix needs the "'"), and the
#      next one starts there ("word|.\n\n": the end of a paragraph costs one cached ".\n\n").
# All four are conservative: a cut not listed is counted by re-encoding its edge. (A), (C) and
# (D) hold for every slice around the cut, so the nearest one is searched for; (B) does not
# hold for a slice ending inside the blank run, so it is used only at a slice's own edge.
#
# The masks are computed on the text as bytes, one per character: ASCII stays itself, any other
# character becomes "?" (solid, not a letter), except White_Space, which becomes "\v" (a space
# that is neither a newline nor a blank). Solid characters come from one bytes.translate (a 0/1
# byte string numpy reads as booleans without a copy), the rest from plain comparisons.
# What tiktoken's regex engine takes for \s (Unicode White_Space).
_WHITESPACE_CODES = (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
                     *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
_WIDE_SPACE = frozenset(chr(c) for c in _WHITESPACE_CODES if c >= 0x80)
# Code point -> its byte above, for text that is mostly not ASCII (code points past the table
# are looked up at its last entry, "?").
_WIDE_TABLE = np.full(0x3002, 0x3F, dtype=np.uint8)
_WIDE_TABLE[:0x80] = np.arange(0x80, dtype=np.uint8)
_WIDE_TABLE[[c for c in _WHITESPACE_CODES if c >= 0x80]] = 0x0B


def _class_table(members: bytes) -> bytes:
    return bytes(1 if b in members else 0 for b in range(256))


_ASCII_SPACE = bytes(c for c in _WHITESPACE_CODES if c < 0x80)
_IS_SOLID = _class_table(bytes(b for b in range(256) if b not in _ASCII_SPACE and b != 0x2F))
_ENDS_A_WORD = _class_table(bytes(b for b in range(0x80) if not chr(b).isalnum() and b not in b"'?"))


def _class_bytes(text: str) -> bytes:
    """``text`` as one byte per character, as described above."""
    encoded = text.encode("ascii", "replace")
    if text.isascii():
        return encoded
    # Only a "?" can stand for a replaced character; where there are few, checking each is
    # cheaper than a regex scan of the text for the wide spaces.
    questions = np.flatnonzero(np.frombuffer(encoded, dtype=np.uint8) == 0x3F)
    if len(questions) > 4096:
        code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        return _WIDE_TABLE.take(np.minimum(code_points, 0x3001)).tobytes()
    wide = [k for k in questions.tolist() if text[k] in _WIDE_SPACE]
    if not wide:
        return encoded
    out = bytearray(encoded)
    for k in wide:
        out[k] = 0x0B
    return bytes(out)


def _flags(data: bytes, table: bytes) -> np.ndarray:
    return np.frombuffer(data.translate(table), dtype=bool)


def _cut_masks(data: bytes) -> tuple[bytearray, bytearray]:
    """(edge, scan) as one byte per cut position 0..n of the text ``data`` stands for (see
    :func:`_class_bytes`): ``edge`` marks cuts (A) to (D) and both ends of the text (exact at
    a slice's own edge); ``scan`` marks (A), (C) and (D) only (exact inside any slice), the cuts
    searched for with bytearray.find. Both are bytearrays that numpy writes in place: no copy
    of a 2 MB mask is made to hand it over."""
    n = len(data)
    scan_bytes = bytearray(n + 1)
    scan = np.frombuffer(scan_bytes, dtype=bool)
    if n < 2:
        edge_bytes = bytearray(scan_bytes)
        edge_bytes[0] = edge_bytes[n] = 1
        return edge_bytes, scan_bytes
    codes = np.frombuffer(data, dtype=np.uint8)
    # Every pass writes into one of three scratch arrays (out=): fresh 2 MB arrays cost page
    # faults, which on a busy VM cost more than the passes themselves.
    newline_before = np.equal(codes[:-1], 0x0A)
    solid = _flags(data, _IS_SOLID)
    inner = scan[1:n]  # cut k + 1 sits between codes[k] and codes[k + 1]
    # (A): after a newline, before a solid character.
    np.logical_and(newline_before, solid[1:], out=inner)
    # Plain comparisons: a few cheap passes beat one more bytes.translate.
    folded = np.bitwise_or(codes, 0x20)  # ASCII letters to lower case
    folded -= np.uint8(0x61)
    letter = np.less(folded, 26, out=folded.view(bool))
    # (D): after a letter, before a character that ends its word.
    scratch = np.logical_and(letter[:-1], _flags(data, _ENDS_A_WORD)[1:])
    inner |= scratch
    # (C): a space after a non-space, before an ASCII letter (nothing after the text is none).
    rule_c = np.equal(codes[1:-1], 0x20, out=scratch[: n - 2])
    rule_c &= letter[2:]
    not_space = np.equal(codes[:-2], 0x2F, out=letter[: n - 2])  # "/" or solid
    not_space |= solid[:-2]
    rule_c &= not_space
    inner[:-1] |= rule_c
    edge_bytes = bytearray(scan_bytes)
    edge = np.frombuffer(edge_bytes, dtype=bool)
    edge[0] = edge[n] = True
    # (B): after a newline, a blank run ending at a solid character; runs are short, so walk
    # them all together.
    blank_after = np.equal(codes[1:], 0x20, out=scratch)
    blank_after |= np.equal(codes[1:], 0x09, out=letter[: n - 1])
    blank_after &= newline_before
    run = np.flatnonzero(blank_after) + 1
    at, cuts = run, run
    while len(at):
        at = at + 1
        inside = at < n
        at, cuts = at[inside], cuts[inside]
        following = codes[at]
        blank = (following == 0x20) | (following == 0x09)
        edge[cuts[~blank]] = solid[at[~blank]]
        at, cuts = at[blank], cuts[blank]
    return edge_bytes, scan_bytes


# Below this many positions, plain Python beats numpy's per-call cost (a section of a few atoms,
# a descended paragraph).
_FEW = 16


class TiktokenMeasure(Measure):
    """tiktoken: one encode pass over the document; a slice's count is the document tokens
    starting inside it, corrected at each edge that is not an additive cut by re-encoding the
    few characters between the edge and the nearest additive cut (cached per edge, and per edge
    text: the same few characters recur)."""

    def __init__(self, text: str, tokenizer: "TiktokenTokenizer") -> None:
        super().__init__(text, tokenizer)
        self._starts = tokenizer.token_starts(text)
        # bisect reads Python ints from an array.array twice as fast as from a memoryview, and
        # filling one from the buffer is a single copy (no Python int per token).
        self._starts_view = array("i")
        self._starts_view.frombytes(self._starts.astype(np.int32, copy=False).data.cast("B"))
        # Both masks are computed once for the whole document (vectorized, a few ms for 2 MB):
        # a point check is a byte lookup and the nearest cut is a bytes.find.
        self.cut_view = _class_bytes(text)
        self._edge, self._scan = _cut_masks(self.cut_view)
        self._edge_array = np.frombuffer(self._edge, dtype=bool)
        self._left_fix: dict[int, tuple[int, int]] = {}
        self._right_fix: dict[int, tuple[int, int]] = {}
        self._edge_counts: dict[str, int] = {}
        self._encode = tokenizer.encoding.encode_ordinary

    def _positions(self, positions: list[int]) -> np.ndarray:
        """Positions as an array of the token starts' own dtype: searchsorted with another
        dtype would convert the whole token-start array on every call."""
        return np.asarray(positions, dtype=self._starts.dtype)

    def tokens_before(self, positions: list[int]) -> list[int]:
        """Document tokens starting before each position: the estimate the packer searches."""
        if len(positions) < _FEW:
            before = self._starts_view
            return [bisect_left(before, p) for p in positions]
        return np.searchsorted(self._starts, self._positions(positions)).tolist()

    def token_starts_in(self, lo: int, hi: int) -> np.ndarray:
        starts = self._starts
        return starts[np.searchsorted(starts, lo) : np.searchsorted(starts, hi)]

    def _additive(self, positions: np.ndarray) -> np.ndarray:
        # Positions outside the text are cuts at its ends: additive. (Two ufuncs: np.clip's
        # Python wrapper costs more than the lookup on the short arrays of a small section.)
        inside = np.minimum(np.maximum(positions, 0), len(self._edge) - 1)
        return self._edge_array[inside]

    def additive_cuts(self, positions: list[int]) -> list[bool]:
        if len(positions) < _FEW:
            return [self._is_additive(p) for p in positions]
        return self._additive(self._positions(positions)).tolist()

    def _is_additive(self, pos: int) -> bool:
        """Scalar twin of :meth:`additive_cuts`."""
        edge = self._edge
        return pos <= 0 or pos >= len(edge) - 1 or edge[pos] == 1

    def _edge_count(self, start: int, end: int) -> int:
        """Exact tokens of the short edge text[start:end], encoded once per distinct text."""
        piece = self.text[start:end]
        count = self._edge_counts.get(piece)
        if count is None:
            count = self._edge_counts[piece] = len(self._encode(piece))
        return count

    def _left(self, start: int, end: int) -> tuple[int, int] | None:
        """(first additive cut >= start, exact tokens of text[start:cut]), or None when that
        cut is past ``end``. Cached per start: the first cut does not depend on ``end``."""
        if self._edge[start]:
            fix = (start, 0)
        else:
            cut = self._scan.find(1, start + 1, end + 1)
            if cut < 0:
                return None
            fix = (cut, self._edge_count(start, cut))
        self._left_fix[start] = fix
        return fix

    def _right(self, end: int, start: int) -> tuple[int, int] | None:
        """(last additive cut <= end, exact tokens of text[cut:end]), or None when that cut is
        before ``start``. Cached per end."""
        if self._edge[end]:
            fix = (end, 0)
        else:
            cut = self._scan.rfind(1, start, end)
            if cut < 0:
                return None
            fix = (cut, self._edge_count(cut, end))
        self._right_fix[end] = fix
        return fix

    def _span(self, start: int, end: int) -> tuple[int, int, int] | None:
        """(left cut, right cut, exact tokens of the two edges outside them) for
        text[start:end], or None where no such pair of additive cuts lies inside it."""
        # The caches are read here, not through _left/_right: this runs thousands of times.
        left = self._left_fix.get(start) or self._left(start, end)
        if left is None:
            return None
        right = self._right_fix.get(end) or self._right(end, start)
        # left cut <= right cut also puts both cuts inside [start, end].
        if right is None or left[0] > right[0]:
            return None
        return left[0], right[0], left[1] + right[1]

    def count(self, start: int, end: int) -> int:
        if end <= start:
            return 0
        span = self._span(start, end)
        if span is None:
            return len(self._encode(self.text[start:end]))
        before = self._starts_view
        return span[2] + bisect_left(before, span[1]) - bisect_left(before, span[0])

    def _small_piece_count(self, start: int, end: int, limit: int) -> int | None:
        edge = self._edge
        before = self._starts_view
        estimate = bisect_left(before, end) - bisect_left(before, start)
        if edge[start] and edge[end]:
            return estimate
        if estimate > 2 * limit + 16:
            return None
        return self.count(start, end)

    def piece_counts(self, starts: list[int], ends: list[int], limit: int) -> list[int | None]:
        if len(starts) < _FEW:
            # A handful of pieces (a descended paragraph): Python beats numpy's per-call cost.
            return [self._small_piece_count(a, b, limit) for a, b in zip(starts, ends)]
        edges = self._positions(starts + ends[-1:])
        before = np.searchsorted(self._starts, edges)
        estimates = before[1:] - before[:-1]
        additive = self._edge_array[edges]
        exact = additive[:-1] & additive[1:]  # both edges additive: the estimate is the count
        far = estimates > 2 * limit + 16  # far over by the document pass: no exact figure needed
        out: list[int | None] = estimates.tolist()
        for k in np.flatnonzero(far).tolist():
            out[k] = None
        # The rest: edges fixed one by one (cached per position and per edge text), and the
        # document tokens between the fixed cuts counted for all of them in one searchsorted.
        fixed: list[int] = []
        cuts: list[int] = []
        edge_tokens: list[int] = []
        for k in np.flatnonzero(~exact & ~far).tolist():
            span = self._span(starts[k], ends[k]) if starts[k] < ends[k] else (0, 0, 0)
            if span is None:
                out[k] = len(self._encode(self.text[starts[k] : ends[k]]))
            else:
                fixed.append(k)
                cuts += span[:2]
                edge_tokens.append(span[2])
        if fixed:
            inside = np.diff(np.searchsorted(self._starts, self._positions(cuts)))[::2]
            for k, tokens, extra in zip(fixed, inside.tolist(), edge_tokens):
                out[k] = tokens + extra
        return out
