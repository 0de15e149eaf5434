"""What every sizer shares: the :class:`Tokenizer` contract and the generic :class:`Measure`.

A tokenizer answers one question exactly: how many tokens is this string (no special tokens).
Where the real tokenizer allows it, it also hands out a :class:`Measure` for one document.

The splitter asks for many counts: every candidate atom, every candidate join, every overlap.
Re-encoding each growing slice makes tokenizer work grow with the number of candidate joins
(quadratic in the chunk length for a naive recursive splitter). A :class:`Measure` answers them
from one pass instead, and stays exact for the emitted text: both tiktoken and BERT-style
tokenizers cut text into pre-tokens first and encode each on its own, so a slice can only differ
from the document-wide pass at its edges. Each measure knows where a cut is harmless for its
tokenizer and re-encodes only the edges that are not. How long a piece is stays apart from where
text may be cut (text-splitter's ``chunk_size.rs`` vs ``splitter/*.rs``); each tokenizer family
keeps its counter and its measure in one module of this package, as text-splitter keeps
``chunk_size/tiktoken.rs`` and ``chunk_size/huggingface.rs``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np


# Below this many positions, plain Python beats numpy's per-call cost (a section of a few atoms,
# a descended paragraph).
FEW_POSITIONS = 16
# Characters of a region to cut encoded at once, at most (past a separator-free run).
REGION_WINDOW = 1 << 16
# Windows encoded in one batch (the batch runs on all cores; its encodings are held together,
# ~90 bytes a character natively for a Hugging Face tokenizer: 8 windows, ~46 MB).
WINDOWS_AT_ONCE = 2
# Characters of pieces counted in one batch, at most, for the same reason: 2**18 made ~23 MB of
# encodings a batch, in the tokenizer's worker threads, whose malloc arenas keep what they
# freed; with 2**16 a 5 MB CSV is split in the same time, its peak ~8 MB lower.
COUNT_BATCH_CHARS = 1 << 16


class TokenizerNotAvailable(RuntimeError):
    """A tokenizer spec is valid but its vocabulary is not installed here."""


class Tokenizer(ABC):
    """Exact token counts for strings. ``spec`` round-trips through
    :func:`chunkline.sizers.get_tokenizer` and through :meth:`from_spec` of the tokenizer's own
    class."""

    spec: str

    @classmethod
    def from_spec(cls, spec: str) -> "Tokenizer":
        """The tokenizer of this family that ``spec`` names, built afresh: what ``get_tokenizer``
        returns for it. Each family reads its own specs; the base class reads none."""
        raise NotImplementedError(f"{cls.__name__} cannot be rebuilt from a spec")

    @abstractmethod
    def count(self, text: str) -> int:
        """Exact number of tokens in ``text``, without special tokens."""

    def counts(self, texts: Sequence[str]) -> list[int]:
        """``[count(t) for t in texts]``; tokenizers with a batch API override it."""
        return [self.count(t) for t in texts]

    @abstractmethod
    def token_starts(self, text: str) -> np.ndarray:
        """Character offset of each token's first character, non-decreasing (int64)."""

    def measure(self, text: str) -> "Measure":
        """A per-document counter for the splitter; the generic one re-encodes slices."""
        return SliceMeasure(text, self)

    def unknown_word_cuts(self, text: str) -> list[int]:
        """Increasing positions strictly inside ``text``, each a grapheme cluster boundary, where
        a chunk must end so that no chunk reads as one unknown token spanning several grapheme
        clusters; a chunk that ends at every cut its span crosses is read token by token. []
        for tokenizers without an unknown token (byte-level BPE, words, chars)."""
        return []

    def __repr__(self) -> str:
        return f"get_tokenizer({self.spec!r})"

    def __reduce__(self):
        # Beam ships DoFns (and the tokenizer they hold) to workers by pickling: rebuild from the
        # spec there instead of pickling a Rust object. The family's own constructor, not
        # get_tokenizer: this module sits below the package that dispatches on specs.
        return (type(self).from_spec, (self.spec,))


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
        counts: list[int | None] = []
        # In batches of at most COUNT_BATCH_CHARS characters: a batch's encodings are held
        # together (~90 bytes a character natively for a Hugging Face tokenizer).
        k = 0
        while k < len(starts):
            j, size = k + 1, ends[k] - starts[k]
            while j < len(starts) and size + ends[j] - starts[j] <= COUNT_BATCH_CHARS:
                size += ends[j] - starts[j]
                j += 1
            counts.extend(self.tokenizer.counts([text[a:b] for a, b in zip(starts[k:j], ends[k:j])]))
            k = j
        return counts

    def additive_cuts(self, positions: list[int]) -> list[bool]:
        """Per position: True when count(a, b) == count(a, p) + count(p, b) for all a <= p <= b."""
        return [False] * len(positions)

    def prepare_to_cut(self, lo: int, hi: int) -> None:
        """The splitter is about to cut ``text[lo:hi]`` (over budget) into smaller pieces: a
        measure may read the region once here to answer the pieces' counts from it."""

    def packing_guide(
        self, bounds: list[int], summed: list[int], additive: list[bool]
    ) -> tuple[list[int], list[bool]]:
        """How the packer estimates a run of atoms whose edges are ``bounds`` (increasing),
        given ``summed`` (running sums of the atoms' own counts, one per bound) and
        ``additive`` (:meth:`additive_cuts` of ``bounds``).

        Returns ``(guide, exact)``: ``guide[j] - guide[i]`` estimates the tokens of
        ``text[bounds[i]:bounds[j]]`` (the packer searches it for where the budget runs out),
        and is the exact count where ``exact[i]`` and ``exact[j]`` both hold. By default the
        sums of the atoms' counts, exact nowhere (sums across additive joins are exact anyway)."""
        return summed, [False] * len(bounds)

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
        # An over-budget piece being cut: its token starts answer the counts of all the
        # smaller pieces inside it (exact where both edges are additive cuts).
        self._region: tuple[int, int, np.ndarray] | None = None

    def prepare_to_cut(self, lo: int, hi: int) -> None:
        region = self._region
        if region is not None and region[0] <= lo and hi <= region[1]:
            return
        self._region = (lo, hi, self._token_starts(lo, hi))

    def count(self, start: int, end: int) -> int:
        if end - start <= REGION_WINDOW:
            return self.tokenizer.count(self.text[start:end])
        # The sum over windows cut after separators: exact, and one enormous document counted
        # (is it over budget?) never becomes one encoding (~90 bytes per character natively for
        # a Hugging Face tokenizer).
        windows = self._windows(start, end)
        return sum(
            sum(self.tokenizer.counts([self.text[a:b] for a, b in windows[k:k + WINDOWS_AT_ONCE]]))
            for k in range(0, len(windows), WINDOWS_AT_ONCE))

    def _windows(self, lo: int, hi: int) -> list[tuple[int, int]]:
        windows = []
        start = lo
        while start < hi:
            end = self._window_end(start, hi)
            windows.append((start, end))
            start = end
        return windows

    def _token_starts(self, lo: int, hi: int) -> np.ndarray:
        """Token starts of ``text[lo:hi]``, encoded in windows that end after a separator. No
        pre-token crosses one, so the starts are those of a single encode; but an enormous
        region (a 4 MB generated source file) never becomes one encoding, whose offsets alone
        are ~40 bytes of Python objects per character."""
        windows = [self.tokenizer.token_starts(self.text[a:b]) + a for a, b in self._windows(lo, hi)]
        return np.concatenate(windows) if windows else np.zeros(0, dtype=np.int64)

    def _window_end(self, start: int, hi: int) -> int:
        if hi - start <= REGION_WINDOW or self._whitespace is None:
            return min(hi, start + REGION_WINDOW)
        text, middle, end = self.text, start + REGION_WINDOW // 2, start + REGION_WINDOW
        last = max(text.rfind(c, middle, end) for c in self._whitespace)
        if last >= 0:
            return last + 1
        # No separator in the window's second half: the next one, or the region's end.
        following = [p for p in (text.find(c, end, hi) for c in self._whitespace) if p >= 0]
        return min(following) + 1 if following else hi

    def piece_counts(self, starts: list[int], ends: list[int], limit: int) -> list[int | None]:
        region = self._region
        if region is None or not (region[0] <= starts[0] and ends[-1] <= region[1]):
            return super().piece_counts(starts, ends, limit)
        token_starts = region[2]
        additive = self.additive_cuts(starts + ends[-1:])
        between = (np.searchsorted(token_starts, ends) - np.searchsorted(token_starts, starts)).tolist()
        out: list[int | None] = []
        inside: list[int] = []  # pieces cut inside a word: encoded on their own
        for k in range(len(starts)):
            if additive[k] and additive[k + 1]:
                out.append(between[k])
            else:
                out.append(None)
                inside.append(k)
        if len(inside) < FEW_POSITIONS:
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
