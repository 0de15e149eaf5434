"""Near-duplicate detection parts: word n-gram shingles, MinHash signatures, LSH band keys,
estimated Jaccard, and connected components with a deterministic survivor.

Pure (no Beam): ``transforms/dedupe.py`` wires these into a job. The pieces follow Broder's
MinHash (1997) and the banding of *Mining of Massive Datasets* (Leskovec, Rajaraman, Ullman,
ch. 3): two documents whose signatures agree on every row of at least one band become a
candidate pair, and a candidate is kept only if its estimated Jaccard similarity (the share of
equal signature values) reaches the threshold.

Signatures are datasketch's own "affine32" scheme (datasketch >= 2.0), vectorized over all
shingles of a batch of documents at once: each 32-bit shingle hash is pre-mixed with the
MurmurHash3 finalizer and permuted with ``a * h + b mod 2**32`` (``a`` odd), the ``a``, ``b``
drawn from ``numpy.random.RandomState(seed)`` exactly as datasketch draws them. Given the same
shingle hashes, a signature here equals ``datasketch.MinHash(num_perm, seed).hashvalues`` value
for value (a test holds them equal), so the estimate is datasketch's estimate. What differs is
how a shingle becomes a 32-bit hash: datasketch calls SHA-1 once per shingle in Python; here the
shingles of a whole batch are hashed in a few numpy passes (a polynomial hash over the bytes,
MurmurHash3-finalized), which is where the speed comes from (``bench/dedupe_bench.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from chunkline.options import check_fields, help_text
from annotated_types import Ge, Gt, Le, Lt
from typing import TYPE_CHECKING, Annotated, Final, Literal
from typing import Iterable, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:  # typeshed's name for what sorted() takes: ordered by <
    from _typeshed import SupportsRichComparisonT

from chunkline.extras import require

# Final: each name has its literal type, the one MinHashOptions.survivor declares.
SMALLEST_DOC_ID: Final = "smallest_doc_id"
LONGEST: Final = "longest"
SURVIVOR_RULES = (SMALLEST_DOC_ID, LONGEST)

# A word is a run of Unicode word characters of the lower-cased text, so punctuation, case and
# spacing changes do not make two copies look different.
_WORD = re.compile(r"\w+")
# The same words for ASCII text, ~4x faster than the regex: ASCII non-word characters become
# spaces (str.translate has an ASCII fast path), then split.
_ASCII_NON_WORD = str.maketrans({c: " " for c in map(chr, range(128)) if not (c.isalnum() or c == "_")})
# Polynomial hash base (odd, so it has an inverse modulo 2**64: a shingle's hash can be made
# independent of where the shingle starts).
_BASE = 0x100000001B3
_BASE_INVERSE = pow(_BASE, -1, 1 << 64)
_U32_MAX = np.uint32(0xFFFFFFFF)
# Shingles of the (permutations x shingles) matrix computed at once: bounds it to 4 MB at 256
# permutations, whatever the size of a document or a batch. 16,384 held ~37 MB at the peak of
# signing a 5 MB CSV's ~800,000 shingles, 4,096 ~12 MB, in the same ~0.15 s; batches of 64
# documents of 2 KB (bench/dedupe_bench.py's) sign as fast either way.
_BLOCK_COLUMNS = 4096


@dataclass(frozen=True)
class MinHashOptions:
    """Near-duplicate detection. Two documents are near duplicates when the estimated Jaccard
    similarity of their sets of word ``shingle_size``-grams is at least ``threshold``."""

    shingle_size: Annotated[int, Ge(1), Le(32)] = field(default=5, metadata=help_text(
        "Words per shingle (datatrove and text-dedup use 5)."))
    num_perm: Annotated[int, Ge(16), Le(4096)] = field(default=256, metadata=help_text(
        "Signature length; the estimate's error is ~sqrt(J(1-J)/num_perm)."))
    threshold: Annotated[float, Gt(0), Le(1)] = field(default=0.8, metadata=help_text(
        "Estimated Jaccard at or above which two documents are duplicates."))
    seed: Annotated[int, Ge(0), Lt(2**32)] = field(default=1, metadata=help_text(
        "Permutation seed; signatures from different seeds are not comparable."))
    survivor: Literal["smallest_doc_id", "longest"] = field(default=SMALLEST_DOC_ID, metadata=help_text(
        "Which document of a duplicate cluster is kept."))
    bands: Annotated[int, Ge(1)] | None = field(default=None, metadata=help_text(
        "LSH bands; null (with rows null): derived from the threshold by datasketch's optimal "
        "parameter search, weighting a missed pair over a false candidate (which verification "
        "drops for one comparison)."))
    rows: Annotated[int, Ge(1)] | None = field(default=None, metadata=help_text(
        "LSH rows per band; given together with bands."))
    false_positive_weight: Annotated[float, Gt(0), Lt(1)] = field(default=0.1, metadata=help_text(
        "Weight of false candidates in that search."))
    max_bucket_pairs: Annotated[int, Ge(1)] = field(default=64, metadata=help_text(
        "A band bucket with more members yields only the pairs with its first member (a star), "
        "so 10,000 copies cost 10,000 comparisons, not 50 million."))

    def __post_init__(self) -> None:
        check_fields(self)
        if (self.bands is None) != (self.rows is None):
            raise ValueError("MinHashOptions.bands and rows are given together or not at all")
        if self.bands is not None and self.rows is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(
                f"MinHashOptions: bands x rows ({self.bands} x {self.rows}) exceeds num_perm "
                f"({self.num_perm})"
            )

    def lsh(self) -> tuple[int, int]:
        """(bands, rows): the configured pair, or the one derived from the threshold."""
        if self.bands is not None and self.rows is not None:
            return self.bands, self.rows
        return lsh_params(self.threshold, self.num_perm, self.false_positive_weight)


# The defaults' parameters, as datasketch's search gives them (tests/test_minhash.py holds them
# to it): a run with the default settings does not import scipy and integrate (~0.7 s) to learn
# them again.
_KNOWN_LSH: dict[tuple[float, int, float], tuple[int, int]] = {
    (0.8, 256, 0.1): (23, 11), (0.8, 128, 0.1): (14, 9), (0.8, 128, 0.5): (9, 13),
}


def lsh_params(threshold: float, num_perm: int, false_positive_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) with bands x rows <= num_perm minimising the weighted sum of the false
    positive and false negative probability mass around ``threshold``: datasketch's
    ``MinHashLSH`` optimal-parameter search itself (``_optimal_param``), not a re-derivation.

    >>> lsh_params(0.8, 128)
    (9, 13)
    """
    known = _KNOWN_LSH.get((threshold, num_perm, false_positive_weight))
    if known is not None:
        return known
    # Imported here: datasketch.lsh imports scipy, needed only where parameters are derived.
    _optimal_param = require("pipeline", "datasketch.lsh")._optimal_param

    return tuple(_optimal_param(threshold, num_perm, false_positive_weight, 1.0 - false_positive_weight))


# --- Shingles ----------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """The words shingles are made of: runs of word characters of the lower-cased text; a text
    with none (only punctuation, symbols or emoji) falls back to its whitespace-separated
    pieces, so it still has a set to compare."""
    lowered = text.lower()
    return _words_of(lowered) or lowered.split()


def _words_of(lowered: str) -> list[str]:
    return lowered.translate(_ASCII_NON_WORD).split() if lowered.isascii() else _WORD.findall(lowered)


def shingle_count(word_count: int, shingle_size: int) -> int:
    """Shingles of a text of ``word_count`` words: one per window of ``shingle_size`` words; a
    text shorter than one window is one shingle of all its words; no words, no shingles."""
    if word_count == 0:
        return 0
    return max(1, word_count - shingle_size + 1)


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer: every input bit reaches every output bit."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer, as datasketch's affine32 scheme applies it."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _powers(base: int, length: int) -> np.ndarray:
    """base**0 .. base**(length-1) modulo 2**64 (numpy's uint64 products wrap, as intended)."""
    steps = np.full(length, base, dtype=np.uint64)
    steps[0] = 1
    return np.cumprod(steps, dtype=np.uint64)


# Words hashed in one vectorized pass, at most: each costs ~100 bytes of uint64 arrays (codes,
# prefix sums, powers and their inverses), so a 5 MB document hashed whole held ~300 MB at once,
# and 65,536 words a pass still ~14 MB (16,384: ~4 MB, as fast).
_WORDS_AT_ONCE = 1 << 14


def batch_shingle_hashes(texts: Sequence[str], shingle_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Shingle hashes of many texts: ``(doc_index, hashes)``, sorted by document and hash, each
    (document, hash) once. ``hashes`` are uint32; ``doc_index`` is int64.

    A shingle is ``shingle_size`` consecutive :func:`words`; its hash is a polynomial hash of the
    shingle's bytes (words joined by one space) modulo 2**64, made independent of the shingle's
    position with the base's inverse, finalized with MurmurHash3 and cut to its top 32 bits. So
    a long text is hashed in pieces of :data:`_WORDS_AT_ONCE` words (overlapping by
    ``shingle_size - 1``) with the same hashes as whole, and texts are hashed together in
    groups of about that many words.
    """
    keyed: list[np.ndarray] = []
    group: list[list[str]] = []
    owners: list[int] = []
    size = 0
    for index, text in enumerate(texts):
        for piece in _word_runs(text, shingle_size):
            group.append(piece)
            owners.append(index)
            size += len(piece)
            if size >= _WORDS_AT_ONCE:
                keyed.append(_keyed_hashes(group, owners, shingle_size))
                group, owners, size = [], [], 0
    if group:
        keyed.append(_keyed_hashes(group, owners, shingle_size))
    if not keyed:
        return np.empty(0, np.int64), np.empty(0, np.uint32)
    # Sorted in place, and no array made twice: a 5 MB document has ~800,000 shingles, 6.4 MB
    # an array of them, and each copy of them once more was that again.
    every = np.concatenate(keyed)
    del keyed
    every.sort()
    # A set per document (sort + neighbour test: several times faster than np.unique here).
    every = every[np.concatenate(([True], every[1:] != every[:-1]))]
    # The document (below 2**32 once shifted: the same values as int64, so a view) and the
    # hash, the low 32 bits (a cast to uint32 keeps them, modulo 2**32).
    return (every >> np.uint64(32)).view(np.int64), every.astype(np.uint32)


# Characters of a text made into words at once. A whole document's words as one list cost ~60
# bytes each (a str object of 49 bytes and more, and its slot in the list): a 5 MB CSV table's
# ~800,000 words held ~50 MB, for the moment it took to hash them.
_CHARS_AT_ONCE = 1 << 16


def _windows(text: str, size: int = _CHARS_AT_ONCE) -> Iterator[str]:
    """``text`` in consecutive pieces of about ``size`` characters, each but the last ending
    with a space or a line break, so that :func:`words` of the pieces, one after the other, are
    the words of the whole text (and so are their whitespace-separated pieces): whitespace is
    never part of a word, and it ends the context ``str.lower`` reads around a capital sigma
    (Unicode's Final_Sigma condition skips only case-ignorable characters, which whitespace is
    not). A piece without whitespace in its second half runs to the next whitespace."""
    start, length = 0, len(text)
    while start < length:
        end = start + size
        if end >= length:
            yield text[start:]
            return
        cut = max(text.rfind(" ", start + size // 2, end), text.rfind("\n", start + size // 2, end))
        if cut < 0:
            following = [p for p in (text.find(" ", end), text.find("\n", end)) if p >= 0]
            cut = min(following) if following else length - 1
        yield text[start:cut + 1]
        start = cut + 1


def _word_runs(text: str, shingle_size: int) -> Iterator[list[str]]:
    """:func:`words` of ``text`` whole, or in runs of :data:`_WORDS_AT_ONCE` words whose
    shingles, together, are the text's (each run starts ``shingle_size - 1`` words before the
    last one ends). Made from the text a window at a time (:func:`_windows`): the words of a
    long text are never one list; a run and a window's words are the most held at once."""
    found = False
    for run in _runs((_words_of(piece.lower()) for piece in _windows(text)), shingle_size):
        found = True
        yield run
    if not found:  # no word character anywhere: the whitespace-separated pieces, as words() does
        yield from _runs((piece.lower().split() for piece in _windows(text)), shingle_size)


def _runs(batches: Iterable[list[str]], shingle_size: int) -> Iterator[list[str]]:
    """The concatenated ``batches`` whole when they hold at most :data:`_WORDS_AT_ONCE` words,
    else runs of that many starting every ``_WORDS_AT_ONCE - shingle_size + 1`` words, the last
    one the rest (more than ``shingle_size - 1`` words, so no shingle is cut short); nothing for
    no words."""
    step = _WORDS_AT_ONCE - shingle_size + 1
    held: list[str] = []
    for batch in batches:
        held.extend(batch)
        while len(held) > _WORDS_AT_ONCE:
            yield held[:_WORDS_AT_ONCE]
            del held[:step]
    if held:
        yield held


def _keyed_hashes(pieces: list[list[str]], owners: list[int], shingle_size: int) -> np.ndarray:
    """``document << 32 | hash`` (uint64) of every shingle of each word run in ``pieces``,
    ``owners`` the document of each, in one vectorized pass."""
    word_counts = np.array([len(piece) for piece in pieces], dtype=np.int64)
    # One byte string for the group; "\n" never occurs inside a word, so the separators
    # (" " between words, "\n" between runs) are exactly the word boundaries.
    data = np.frombuffer(b"\n".join(" ".join(piece).encode("utf-8", "surrogatepass")
                                     for piece in pieces), dtype=np.uint8)
    codes = data.astype(np.uint64) + np.uint64(1)  # no zero coefficient: "a" != "a\0"
    prefix = np.zeros(len(codes) + 1, dtype=np.uint64)
    np.cumsum(codes * _powers(_BASE, len(codes)), out=prefix[1:])
    inverse = _powers(_BASE_INVERSE, len(codes))
    boundaries = np.flatnonzero((data == 0x20) | (data == 0x0A))
    word_starts = np.concatenate(([0], boundaries + 1))
    word_ends = np.concatenate((boundaries, [len(data)]))

    first_word = np.concatenate(([0], np.cumsum(word_counts)[:-1]))
    per_piece = np.maximum(1, word_counts - shingle_size + 1)
    doc_of = np.repeat(np.asarray(owners, dtype=np.uint64), per_piece)
    local = np.arange(per_piece.sum()) - np.repeat(np.cumsum(per_piece) - per_piece, per_piece)
    start_word = np.repeat(first_word, per_piece) + local
    last_word = np.minimum(start_word + shingle_size - 1,
                           np.repeat(first_word + word_counts - 1, per_piece))
    start, end = word_starts[start_word], word_ends[last_word]
    raw = (prefix[end] - prefix[start]) * inverse[start]
    hashes = (_fmix64(raw) >> np.uint64(32)).astype(np.uint64)
    return (doc_of << np.uint64(32)) | hashes


def shingle_hashes(text: str, shingle_size: int) -> np.ndarray:
    """The sorted, distinct uint32 shingle hashes of one text (see :func:`batch_shingle_hashes`)."""
    return batch_shingle_hashes([text], shingle_size)[1]


# --- Signatures --------------------------------------------------------------------------------


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters ``(a, b)`` for ``(num_perm, seed)``: the same
    generator, the same draws, the same order (``MinHash._init_permutations``)."""
    generator = np.random.RandomState(seed)
    a = generator.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = generator.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def signatures_from_hashes(
    doc_index: np.ndarray, hashes: np.ndarray, n_docs: int, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """(n_docs, num_perm) uint32 MinHash signatures of grouped shingle hashes (as
    :func:`batch_shingle_hashes` returns them). A document without shingles gets the all-max
    row, datasketch's empty MinHash."""
    out = np.full((len(a), n_docs), _U32_MAX, dtype=np.uint32)
    mixed = _fmix32(hashes)
    for low in range(0, len(mixed), _BLOCK_COLUMNS):
        high = min(len(mixed), low + _BLOCK_COLUMNS)
        # (permutations x shingles): each document's shingles are contiguous columns, and
        # numpy's reduceat along the last axis is ~70x faster than along the first.
        permuted = np.multiply.outer(a, mixed[low:high])  # uint32: wraps modulo 2**32
        permuted += b[:, None]
        docs = doc_index[low:high]
        starts = np.flatnonzero(np.concatenate(([True], docs[1:] != docs[:-1])))
        minima = np.minimum.reduceat(permuted, starts, axis=1)
        columns = docs[starts]
        if low and columns[0] == doc_index[low - 1]:
            # The document cut by the block boundary: the minimum of its two partial minima.
            minima[:, 0] = np.minimum(minima[:, 0], out[:, columns[0]])
        out[:, columns] = minima
    return np.ascontiguousarray(out.T)


class MinHasher:
    """Signatures for one (shingle_size, num_perm, seed): the permutation parameters are drawn
    once, here, not per document.

    >>> hasher = MinHasher(MinHashOptions(num_perm=64))
    >>> sigs = hasher.signatures(["the quick brown fox jumps over the lazy dog", "hello"])
    >>> sigs.shape, sigs.dtype.name
    ((2, 64), 'uint32')
    """

    def __init__(self, options: MinHashOptions) -> None:
        self.options = options
        self._a, self._b = permutations(options.num_perm, options.seed)

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), num_perm) uint32 signatures; a batch is much faster than one by one."""
        doc_index, hashes = batch_shingle_hashes(texts, self.options.shingle_size)
        return signatures_from_hashes(doc_index, hashes, len(texts), self._a, self._b)

    def signature(self, text: str) -> np.ndarray:
        return self.signatures([text])[0]


def is_empty(signature: np.ndarray) -> bool:
    """True for the signature of a text without shingles: it takes part in no band, so it never
    matches anything (two empty texts are exact duplicates or nothing)."""
    return bool(np.all(signature == _U32_MAX))


def estimate_jaccard(first: np.ndarray, second: np.ndarray) -> float:
    """Share of equal signature values: datasketch's ``MinHash.jaccard``."""
    if first.shape != second.shape:
        raise ValueError(f"signatures differ in length: {first.shape} vs {second.shape}")
    return float(np.count_nonzero(first == second)) / float(len(first))


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[bytes]:
    """One key per band: the band's index (2 bytes) and its ``rows`` values (little-endian
    uint32). Equal keys mean equal bands. An empty signature has no keys."""
    if bands * rows > len(signature):
        raise ValueError(f"bands x rows ({bands} x {rows}) exceeds the signature length {len(signature)}")
    if is_empty(signature):
        return []
    values = signature[: bands * rows].astype("<u4").reshape(bands, rows)
    return [band.to_bytes(2, "big") + values[band].tobytes() for band in range(bands)]


def band_key_array(signatures: np.ndarray, bands: int, rows: int,
                   prefixes: np.ndarray | None = None) -> np.ndarray:
    """:func:`band_keys` of many signatures at once, with no Python object per key: an
    ``(n, bands)`` array of fixed-width byte strings (numpy ``void``) whose ``[i, band]``
    element's bytes are ``band_keys(signatures[i], bands, rows)[band]``, after ``prefixes[i]``
    (an ``(n, p)`` uint8 array) when given. Every signature must be non-empty: an empty one
    takes part in no band. numpy orders and compares ``void`` values by their bytes (memcmp),
    so sorting the array sorts the keys as ``sorted`` sorts their ``bytes``."""
    signatures = np.asarray(signatures)
    count = signatures.shape[0]
    if bands * rows > signatures.shape[1]:
        raise ValueError(f"bands x rows ({bands} x {rows}) exceeds the signature length "
                         f"{signatures.shape[1]}")
    if count and bool(np.any(np.all(signatures == _U32_MAX, axis=1))):
        raise ValueError("an empty signature has no band keys")
    width = 0 if prefixes is None else prefixes.shape[1]
    keys = np.empty((count, bands, width + 2 + 4 * rows), np.uint8)
    if prefixes is not None:
        keys[:, :, :width] = prefixes[:, None, :]
    keys[:, :, width:width + 2] = np.arange(bands, dtype=">u2").view(np.uint8).reshape(bands, 2)
    values = np.ascontiguousarray(signatures[:, : bands * rows], dtype="<u4")
    keys[:, :, width + 2:] = values.view(np.uint8).reshape(count, bands, 4 * rows)
    return keys.reshape(count, bands * keys.shape[2]).view(f"V{keys.shape[2]}")


def fold_bytes(fixed: np.ndarray) -> np.ndarray:
    """(m,) uint64 of ``m`` fixed-width byte strings (numpy ``S`` or ``V``): each one's bytes
    folded 8 at a time through MurmurHash3's finalizer (:func:`_fmix64`), its width first.
    Equal strings give equal values; two different ones share one with probability ~2^-64."""
    width = fixed.dtype.itemsize
    data = np.zeros((len(fixed), -(-width // 8) * 8), np.uint8)
    data[:, :width] = np.ascontiguousarray(fixed).view(np.uint8).reshape(len(fixed), width)
    words = data.view("<u8")
    folded = np.full(len(fixed), np.uint64(width), np.uint64)
    with np.errstate(over="ignore"):
        for column in range(words.shape[1]):
            folded = _fmix64(folded ^ words[:, column]) + np.uint64(column + 1)
    return folded


def band_digests(keys: np.ndarray) -> np.ndarray:
    """A 64-bit digest of each :func:`band_key_array` key (an ``(n, bands)`` array of
    fixed-width keys -> the same shape, uint64): what a run keeps of a document's buckets
    (``chunkline.state``), 8 bytes a key instead of ``2 + 4 x rows``. Equal keys give equal
    digests; two keys sharing one by chance (2^-64 a pair) only make a rerun look at a document
    it need not."""
    keys = np.asarray(keys)
    if keys.ndim != 2 or keys.dtype.kind != "V":
        raise ValueError(f"band keys must be an (n, bands) array of fixed-width keys, not {keys.dtype} "
                         f"{keys.shape}")
    return fold_bytes(keys.reshape(-1)).reshape(keys.shape)


def shared_keys(keys: np.ndarray) -> list[np.ndarray]:
    """The positions of each key that several elements of ``keys`` (a 1-D array of
    :func:`band_key_array` keys) share, a sorted array per key, in the keys' byte order: the
    LSH buckets with a candidate pair, found by one sort rather than a dict of every key."""
    if len(keys) < 2:
        return []
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1], [True])))
    return [order[start:end] for start, end in zip(starts[:-1], starts[1:], strict=True)
            if end - start > 1]


# --- Clusters ----------------------------------------------------------------------------------


def survivor_key(doc_id: str, length: int, rule: str) -> tuple:
    """The order a cluster's survivor is chosen by (the smallest key survives); the doc_id is
    always last, so keys are unique and ties are broken the same way on every runner."""
    if rule == SMALLEST_DOC_ID:
        return (doc_id,)
    if rule == LONGEST:
        return (-length, doc_id)
    raise ValueError(f"unknown survivor rule {rule!r}; expected one of {SURVIVOR_RULES}")


def bucket_pairs(members: Sequence[SupportsRichComparisonT], max_bucket_pairs: int
                 ) -> list[tuple[SupportsRichComparisonT, SupportsRichComparisonT]]:
    """Candidate pairs of one LSH bucket, members in sorted order, each pair (smaller, larger):
    all pairs up to ``max_bucket_pairs`` members, else a star from the smallest member."""
    ordered = sorted(set(members))
    if len(ordered) <= max_bucket_pairs:
        return [(x, y) for i, x in enumerate(ordered) for y in ordered[i + 1 :]]
    return [(ordered[0], y) for y in ordered[1:]]


class Components:
    """Union-find over hashable, ordered nodes; each set's root is its smallest node, so the
    result does not depend on the order edges arrive in (Tarjan 1975, union by minimum root,
    path halving). Also a Beam combine accumulator: :meth:`merge` folds another one in."""

    def __init__(self) -> None:
        self.parent: dict = {}

    def find(self, node):
        parent = self.parent
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]  # path halving
            node = parent[node]
        return node

    def union(self, first, second) -> None:
        root_a, root_b = self.find(first), self.find(second)
        if root_a != root_b:
            low, high = (root_a, root_b) if root_a < root_b else (root_b, root_a)
            self.parent[high] = low

    def merge(self, other: Components) -> Components:
        for node, parent in other.parent.items():
            self.union(node, parent)
        return self

    def roots(self) -> dict:
        """Every node seen -> the smallest node of its component (a root maps to itself)."""
        return {node: self.find(node) for node in list(self.parent)}


def components(edges: Iterable[tuple]) -> dict:
    """Every node of ``edges`` -> the smallest node of its connected component.

    >>> components([("b", "c"), ("a", "b"), ("x", "y")])
    {'b': 'a', 'c': 'a', 'a': 'a', 'x': 'x', 'y': 'x'}
    """
    found = Components()
    for first, second in edges:
        found.union(first, second)
    return found.roots()
