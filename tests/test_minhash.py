"""chunkline.minhash: signatures equal to datasketch's, LSH parameters from datasketch, band keys,
union-find components; checked against datasketch itself and plain-Python references."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from itertools import combinations

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH
from hypothesis import given
from hypothesis import strategies as st

from chunkline import minhash as mh
from chunkline.minhash import (
    Components,
    MinHasher,
    MinHashOptions,
    band_key_array,
    band_keys,
    batch_shingle_hashes,
    bucket_pairs,
    shared_keys,
    components,
    estimate_jaccard,
    is_empty,
    lsh_params,
    permutations,
    shingle_hashes,
    survivor_key,
    words,
)


def random_text(rng: random.Random, n_words: int, vocab_size: int = 5000) -> str:
    return " ".join(f"w{rng.randrange(vocab_size)}" for _ in range(n_words))


def datasketch_minhash(hashes: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """datasketch's own MinHash fed our 32-bit shingle hashes (its hashfunc is the identity)."""
    m = MinHash(num_perm=num_perm, seed=seed, hashfunc=int)
    m.update_batch(hashes.tolist())
    return m.hashvalues


# --- Same signatures, same estimate as datasketch -----------------------------------------------


@pytest.mark.parametrize(("num_perm", "seed"), [(64, 1), (128, 7), (256, 1), (256, 123456)])
def test_permutations_are_datasketchs(num_perm: int, seed: int) -> None:
    a, b = permutations(num_perm, seed)
    reference = MinHash(num_perm=num_perm, seed=seed).permutations
    assert np.array_equal(a, reference[0]) and np.array_equal(b, reference[1])


@pytest.mark.parametrize(("num_perm", "seed"), [(64, 1), (128, 7), (256, 1)])
def test_signature_equals_datasketch_value_for_value(num_perm: int, seed: int) -> None:
    rng = random.Random(seed)
    texts = [random_text(rng, rng.randrange(1, 400)) for _ in range(20)]
    texts += ["one", "Two words", "a b c d e", "!!! ???", "Über Straße, ÇA VA?"]
    hasher = MinHasher(MinHashOptions(num_perm=num_perm, seed=seed))
    signatures = hasher.signatures(texts)
    for text, signature in zip(texts, signatures, strict=True):
        assert np.array_equal(signature, datasketch_minhash(shingle_hashes(text, 5), num_perm, seed))


def test_a_document_larger_than_one_block_is_exact() -> None:
    rng = random.Random(3)
    big = random_text(rng, mh._BLOCK_COLUMNS * 2 + 100, vocab_size=10**6)
    texts = ["small one here", big, "another small text of words"]
    hasher = MinHasher(MinHashOptions(num_perm=64))
    batch = hasher.signatures(texts)
    for text, signature in zip(texts, batch, strict=True):
        assert np.array_equal(signature, datasketch_minhash(shingle_hashes(text, 5), 64, 1))


def shingle_set(text: str, n: int) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + n]) for i in range(max(1, len(w) - n + 1))} if w else set()


def test_estimate_is_as_accurate_as_datasketch_sha1() -> None:
    """Our shingle hash replaces datasketch's SHA-1 per shingle; the estimate's error against the
    true Jaccard must be as small as datasketch's own on the same pairs."""
    rng = random.Random(11)
    hasher = MinHasher(MinHashOptions(num_perm=128))
    ours, theirs = [], []
    for _ in range(60):
        base = [f"w{rng.randrange(3000)}" for _ in range(300)]
        copy = list(base)
        for _ in range(rng.randrange(0, 60)):
            copy[rng.randrange(len(copy))] = f"new{rng.randrange(10**6)}"
        a, b = " ".join(base), " ".join(copy)
        sa, sb = shingle_set(a, 5), shingle_set(b, 5)
        true = len(sa & sb) / len(sa | sb)
        ours.append(estimate_jaccard(hasher.signature(a), hasher.signature(b)) - true)
        ma, mb = MinHash(num_perm=128), MinHash(num_perm=128)
        ma.update_batch([" ".join(s).encode() for s in sa])
        mb.update_batch([" ".join(s).encode() for s in sb])
        theirs.append(ma.jaccard(mb) - true)
    ours_mae, theirs_mae = np.mean(np.abs(ours)), np.mean(np.abs(theirs))
    # Expected error ~ sqrt(J(1-J)/128) <= 0.044; both estimators are unbiased.
    assert ours_mae < 0.045 and theirs_mae < 0.045
    assert ours_mae < theirs_mae + 0.01
    assert abs(np.mean(ours)) < 0.015


# --- Shingles ----------------------------------------------------------------------------------


@given(st.text(alphabet=st.characters(codec="ascii"), max_size=200))
def test_ascii_fast_path_gives_the_regex_words(text: str) -> None:
    lowered = text.lower()
    assert words(text) == (re.findall(r"\w+", lowered) or lowered.split())


@given(st.lists(st.text(max_size=80), min_size=1, max_size=8), st.integers(1, 6))
def test_batch_equals_one_by_one(texts: list[str], n: int) -> None:
    index, hashes = batch_shingle_hashes(texts, n)
    for i, text in enumerate(texts):
        alone = shingle_hashes(text, n)
        assert np.array_equal(hashes[index == i], alone)
        assert np.array_equal(alone, np.unique(alone))  # sorted, each once
        assert len(alone) <= max(1, len(words(text)) - n + 1) if words(text) else len(alone) == 0


def _whole_text_runs(found: list[str], shingle_size: int) -> list[list[str]]:
    """The runs of a text's words as they were cut from one list of every word."""
    if len(found) <= mh._WORDS_AT_ONCE:
        return [found] if found else []
    step = mh._WORDS_AT_ONCE - shingle_size + 1
    return [found[first:first + mh._WORDS_AT_ONCE] for first in range(0, len(found) - shingle_size + 1, step)]


@given(st.lists(st.sampled_from(["Word", " ", "\n", "\t", "ΑΣ", "σ", "Σ ", "é", "!", "日本", "x_y",
                                 "\u0301", "K", "  ", "İ"]), max_size=80).map("".join),
       st.integers(1, 6), st.integers(2, 12), st.integers(1, 20))
def test_words_read_window_by_window_make_the_whole_texts_runs(text: str, n: int, window: int,
                                                               run: int) -> None:
    # A long text's words are read a window of characters at a time (one list of a 5 MB table's
    # words held ~60 MB): the runs, and so the shingles, are those of the whole text's words.
    run = max(run, n)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mh, "_CHARS_AT_ONCE", window)
        patch.setattr(mh._windows, "__defaults__", (window,))
        patch.setattr(mh, "_WORDS_AT_ONCE", run)
        assert list(mh._word_runs(text, n)) == _whole_text_runs(words(text), n)
        assert "".join(mh._windows(text)) == text


def test_a_text_without_word_characters_is_read_by_windows_too() -> None:
    text = "!! ?? ## " * 20_000  # no word character: its whitespace-separated pieces are its words
    assert np.array_equal(shingle_hashes(text, 5), shingle_hashes(" ".join(text.split()), 5))
    assert [len(r) for r in mh._word_runs(text, 5)] == [len(r) for r in _whole_text_runs(words(text), 5)]


@given(st.text(max_size=120), st.integers(1, 6))
def test_shingles_ignore_case_punctuation_and_spacing(text: str, n: int) -> None:
    assert np.array_equal(shingle_hashes(text, n), shingle_hashes(" ".join(words(text)), n))


@given(st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "eps", "zeta"]), min_size=1, max_size=30),
       st.integers(1, 5))
def test_distinct_hashes_per_distinct_shingle(tokens: list[str], n: int) -> None:
    expected = {tuple(tokens[i : i + n]) for i in range(max(1, len(tokens) - n + 1))}
    assert len(shingle_hashes(" ".join(tokens), n)) == len(expected)


def test_short_and_empty_documents() -> None:
    hasher = MinHasher(MinHashOptions(num_perm=64))
    # Fewer words than a shingle: one shingle of all of them, a real signature.
    short = hasher.signature("Returns")
    assert not is_empty(short) and len(shingle_hashes("Returns", 5)) == 1
    assert estimate_jaccard(short, hasher.signature("returns!")) == 1.0  # same word
    assert estimate_jaccard(short, hasher.signature("Example")) < 0.2
    assert estimate_jaccard(hasher.signature("a b"), hasher.signature("a b c")) < 0.2
    # No word characters: the whitespace pieces are the words.
    assert not is_empty(hasher.signature("!!! ???"))
    assert estimate_jaccard(hasher.signature("!!! ???"), hasher.signature("*** ###")) < 0.2
    # Nothing at all: the empty signature, which has no band keys and so matches nothing.
    for text in ("", " \n\t "):
        empty = hasher.signature(text)
        assert is_empty(empty) and band_keys(empty, 8, 8) == []


# --- LSH ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
@pytest.mark.parametrize("num_perm", [128, 256])
def test_lsh_params_are_datasketchs(threshold: float, num_perm: int) -> None:
    reference = MinHashLSH(threshold=threshold, num_perm=num_perm)
    assert lsh_params(threshold, num_perm) == (reference.b, reference.r)
    weighted = MinHashLSH(threshold=threshold, num_perm=num_perm, weights=(0.1, 0.9))
    assert lsh_params(threshold, num_perm, 0.1) == (weighted.b, weighted.r)


def test_default_banding_favours_recall() -> None:
    options = MinHashOptions()
    bands, rows = options.lsh()
    assert bands * rows <= options.num_perm
    # A pair at threshold + 0.05 becomes a candidate with probability >= 0.98.
    assert 1 - (1 - 0.85**rows) ** bands >= 0.98
    assert MinHashOptions(bands=4, rows=8).lsh() == (4, 8)


@given(st.lists(st.integers(0, 3), min_size=32, max_size=32), st.lists(st.integers(0, 3), min_size=32, max_size=32))
def test_band_keys_equal_exactly_when_bands_equal(a: list[int], b: list[int]) -> None:
    sa, sb = np.array(a, np.uint32), np.array(b, np.uint32)
    ka, kb = band_keys(sa, 4, 8), band_keys(sb, 4, 8)
    assert len(ka) == 4 and len(set(ka)) == 4  # the band index keeps equal values apart
    for band in range(4):
        assert (ka[band] == kb[band]) == bool(np.array_equal(sa[band * 8 : band * 8 + 8], sb[band * 8 : band * 8 + 8]))


@given(st.lists(st.lists(st.integers(0, 2**32 - 2), min_size=12, max_size=12), max_size=12),
       st.booleans())
def test_band_key_array_is_band_keys_and_shared_keys_its_buckets(rows_of: list[list[int]],
                                                                  prefixed: bool) -> None:
    """The array form gives each signature's keys byte for byte (a prefix before each), and
    its buckets are those a dict of every key would hold, in sorted key order. Values repeat
    (a few per list) so that buckets form, and high bytes test the byte order."""
    signatures = np.array([[v % 3 * 0x7F7F7F7F for v in row] for row in rows_of],
                          np.uint32).reshape(len(rows_of), 12)
    prefixes = (np.array([[n % 2, 0xFF] for n in range(len(rows_of))], np.uint8).reshape(-1, 2)
                if prefixed else None)
    keys = band_key_array(signatures, 3, 4, prefixes)
    assert keys.shape == (len(rows_of), 3)
    for n, signature in enumerate(signatures):
        head = bytes(prefixes[n]) if prefixed else b""
        assert [key.tobytes() for key in keys[n]] == [head + k for k in band_keys(signature, 3, 4)]
    flat = keys.reshape(-1)
    members: dict[bytes, list[int]] = {}
    for position, key in enumerate(flat):
        members.setdefault(key.tobytes(), []).append(position)
    expected = [positions for key, positions in sorted(members.items()) if len(positions) > 1]
    assert [list(found) for found in shared_keys(flat)] == expected


def test_band_key_array_rejects_an_empty_signature() -> None:
    with pytest.raises(ValueError):
        band_key_array(np.full((1, 8), 0xFFFFFFFF, np.uint32), 2, 4)
    with pytest.raises(ValueError):
        band_key_array(np.zeros((1, 16), np.uint32), 3, 6)


def test_band_keys_reject_too_many_rows() -> None:
    with pytest.raises(ValueError):
        band_keys(np.zeros(16, np.uint32), 3, 6)


def test_bucket_pairs_all_or_star() -> None:
    assert bucket_pairs(["c", "a", "b", "a"], 8) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert bucket_pairs(["d", "c", "a", "b"], 3) == [("a", "b"), ("a", "c"), ("a", "d")]
    assert bucket_pairs(["a"], 8) == []


# --- Components --------------------------------------------------------------------------------


def reference_components(edges: list[tuple[int, int]]) -> dict[int, int]:
    """Breadth-first search; the root of a component is its smallest node."""
    neighbours: dict[int, set[int]] = {}
    for a, b in edges:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    result: dict[int, int] = {}
    for start in sorted(neighbours):
        if start in result:
            continue
        seen, frontier = {start}, [start]
        while frontier:
            frontier = [n for node in frontier for n in neighbours[node] if n not in seen]
            seen.update(frontier)
        for node in seen:
            result[node] = min(seen)
    return result


edge_lists = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=60)


@given(edge_lists, st.randoms())
def test_components_match_bfs_whatever_the_edge_order(edges, rnd) -> None:
    expected = reference_components(edges)
    assert components(edges) == expected
    shuffled = [(b, a) if rnd.random() < 0.5 else (a, b) for a, b in edges]
    rnd.shuffle(shuffled)
    assert components(shuffled) == expected


@given(edge_lists, st.integers(0, 60))
def test_merged_partial_components_equal_the_whole(edges, cut: int) -> None:
    first, second = Components(), Components()
    for a, b in edges[:cut]:
        first.union(a, b)
    for a, b in edges[cut:]:
        second.union(a, b)
    assert second.merge(first).roots() == reference_components(edges)


def test_chain_collapses_to_one_root() -> None:
    assert components([(("b",), ("c",)), (("a",), ("b",))]) == {("a",): ("a",), ("b",): ("a",), ("c",): ("a",)}


def test_survivor_keys() -> None:
    assert survivor_key("b", 10, "smallest_doc_id") < survivor_key("c", 99, "smallest_doc_id")
    longest = sorted([survivor_key("a", 5, "longest"), survivor_key("z", 9, "longest"),
                      survivor_key("b", 9, "longest")])
    assert [k[-1] for k in longest] == ["b", "z", "a"]  # longest first, ties by doc_id
    with pytest.raises(ValueError):
        survivor_key("a", 1, "random")


@pytest.mark.parametrize(
    "bad",
    [{"num_perm": 0}, {"shingle_size": 0}, {"threshold": 0.0}, {"threshold": 1.5},
     {"survivor": "newest"}, {"bands": 4}, {"bands": 20, "rows": 20}, {"seed": -1},
     {"false_positive_weight": 1.0}, {"max_bucket_pairs": 0}],
)
def test_options_are_validated(bad: dict) -> None:
    with pytest.raises(ValueError):
        MinHashOptions(**bad)


def test_minhash_does_not_import_beam() -> None:
    code = ("import sys, chunkline.minhash, chunkline.clean, chunkline.boilerplate; "
            "sys.exit('apache_beam' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_every_pair_in_a_small_planted_set_is_found_by_bands() -> None:
    """Near-identical texts share a band; unrelated texts share none."""
    rng = random.Random(5)
    options = MinHashOptions()
    hasher = MinHasher(options)
    bands, rows = options.lsh()
    base = [random_text(rng, 300) for _ in range(5)]
    near = [b.replace("w1", "changed", 1) + " extra words" for b in base]
    keys = [set(band_keys(s, bands, rows)) for s in hasher.signatures(base + near)]
    for i in range(5):
        assert keys[i] & keys[i + 5]
    for i, j in combinations(range(5), 2):
        assert not keys[i] & keys[j]


def test_the_known_parameters_are_what_datasketch_derives() -> None:
    from datasketch.lsh import _optimal_param

    from chunkline.minhash import _KNOWN_LSH

    for (threshold, num_perm, weight), known in _KNOWN_LSH.items():
        assert _optimal_param(threshold, num_perm, weight, 1.0 - weight) == known
