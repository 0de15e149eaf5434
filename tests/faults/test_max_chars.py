"""The character bound: text a tokenizer counts as one token (a WordPiece [UNK], one long word)
cannot hide kilobytes inside a chunk whose count looks small.

all-MiniLM-L6-v2's WordPiece maps any word over 100 characters to one [UNK] (its tokenizer.json:
``max_input_chars_per_word``), so a megabyte of letters with no space counts 1 token, and before
the bound ``split`` emitted it as one chunk of 1,000,000 characters with ``tokens == 1``.
"""

from __future__ import annotations

import random
import string

import numpy as np
import pytest
import regex

from chunkline import char_bound, default_max_chars, split, split_code
from chunkline.semantic import SemanticOptions, semantic_split
from tests.helpers import TOKENIZER_SPECS, tokenizer

GRAPHEME = regex.compile(r"\X")
MEGABYTE_SPECS = ["words", "chars", "tiktoken:cl100k_base", "hf:all-MiniLM-L6-v2"]
# Emoji ZWJ sequences, a flag and a skin tone with no space: 19 characters, one [UNK] in MiniLM.
EMOJI = "👨‍👩‍👧‍👦🏳️‍🌈👩🏽‍💻🇫🇷👍🏽"


def letters(n: int, seed: int) -> str:
    return "".join(random.Random(seed).choices(string.ascii_lowercase, k=n))


@pytest.fixture(scope="module")
def megabyte() -> str:
    return letters(1_000_000, seed=20240917)


def check_bounded(text: str, chunks, spec: str, max_tokens: int, max_chars: int) -> None:
    """Tiling, exact counts of every chunk, both bounds (bar a single grapheme, oversized)."""
    tok = tokenizer(spec)
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    assert all(b.start == a.end for a, b in zip(chunks, chunks[1:]))
    for c in chunks:
        piece = text[c.start : c.end]
        assert c.tokens == tok.count(piece), c
        if c.oversized:
            assert [m.group() for m in GRAPHEME.finditer(piece)] == [piece]
        else:
            assert c.tokens <= max_tokens and len(piece) <= max_chars, c


@pytest.mark.parametrize("spec", MEGABYTE_SPECS)
def test_megabyte_without_spaces_is_cut_within_max_chars(spec: str, megabyte: str) -> None:
    chunks = split(megabyte, 256, 0, tokenizer(spec))
    check_bounded(megabyte, chunks, spec, 256, default_max_chars(256))
    assert not any(c.oversized for c in chunks)


def test_one_unknown_token_cannot_hide_characters() -> None:
    """The case main got wrong: 20,000 letters are one [UNK], and were one chunk."""
    text = letters(20_000, seed=7)
    tok = tokenizer("hf:all-MiniLM-L6-v2")
    assert tok.count(text) == 1
    chunks = split(text, 256, 0, tok)
    assert len(chunks) == -(-len(text) // default_max_chars(256))
    check_bounded(text, chunks, "hf:all-MiniLM-L6-v2", 256, default_max_chars(256))


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@pytest.mark.parametrize("max_chars", [None, 100])
def test_emoji_zwj_run(spec: str, max_chars: int | None) -> None:
    text = EMOJI * 150  # 2,850 characters; MiniLM counts them 1 token
    chunks = split(text, 8, 0, tokenizer(spec), max_chars=max_chars)
    check_bounded(text, chunks, spec, 8, char_bound(8, max_chars))
    bounds = {0} | {m.end() for m in GRAPHEME.finditer(text)}
    assert all(c.end in bounds for c in chunks), "a chunk ends inside a grapheme cluster"


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
def test_single_grapheme_over_max_chars_is_oversized_and_alone(spec: str) -> None:
    stacked = "e" + "\u0301" * 30  # one grapheme cluster of 31 characters
    text = f"ab {stacked} cd"
    chunks = split(text, 256, 0, tokenizer(spec), max_chars=10)
    assert [text[c.start : c.end] for c in chunks if c.oversized] == [stacked]
    check_bounded(text, chunks, spec, 256, 10)


def test_overlap_stays_within_max_chars() -> None:
    text = " ".join(letters(12, seed=k) for k in range(200))
    chunks = split(text, 50, 20, "words", max_chars=60)
    assert any(b.start < a.end for a, b in zip(chunks, chunks[1:])), "no overlap at all"
    tok = tokenizer("words")
    for a, b in zip(chunks, chunks[1:]):
        assert a.start < b.start <= a.end < b.end
        assert tok.count(text[b.start : a.end]) <= 20
    assert all(c.end - c.start <= 60 for c in chunks)


def test_table_rows_are_cut_at_max_chars_and_the_header_is_not_counted() -> None:
    """The bound covers a chunk's own span; a repeated table header is bounded by tokens."""
    header = "| name | note |\n|---|---|\n"
    rows = "".join(f"| row{k} | {'x' * 30} |\n" for k in range(20))  # 42 characters each
    text = header + rows
    chunks = split(text, 256, 0, "words", max_chars=100)
    check_bounded(text, chunks, "words", 256, 100)
    repeated = [c for c in chunks if c.table_header]
    assert repeated and all(c.table_header == header for c in repeated)
    assert all(text[c.start : c.end].startswith("| row") for c in repeated), "cut inside a row"
    assert any(len(c.table_header) + c.end - c.start > 100 for c in repeated)


def test_split_code_cuts_a_long_literal_and_keeps_the_function_whole() -> None:
    source = 'BLOB = "' + letters(12_000, seed=3) + '"\n\n\ndef f(x):\n    return x + 1\n'
    spec = "hf:all-MiniLM-L6-v2"
    chunks = split_code(source, "python", 128, 0, tokenizer(spec))
    check_bounded(source, chunks, spec, 128, default_max_chars(128))
    assert len(chunks) >= 12_000 // default_max_chars(128)
    function = source.index("def f")
    assert not any(function < c.start < len(source) for c in chunks), "the function was cut"


def test_semantic_split_is_bounded_too() -> None:
    text = "A short opening sentence. " + letters(9_000, seed=5) + ". A closing sentence."
    spec = "hf:all-MiniLM-L6-v2"
    flat = lambda texts: np.ones((len(texts), 4))  # noqa: E731 - no cut from distances
    chunks = semantic_split(text, 64, tokenizer(spec), flat, SemanticOptions(buffer=0),
                            max_chars=1000)
    check_bounded(text, chunks, spec, 64, 1000)


def test_none_is_the_default_derived_from_the_budget() -> None:
    text = letters(30_000, seed=11)
    assert default_max_chars(256) == char_bound(256, None) == 32 * 256 + 1024
    spans = lambda chunks: [(c.start, c.end) for c in chunks]  # noqa: E731
    assert spans(split(text, 256, max_chars=None)) == spans(split(text, 256, max_chars=9216))
    assert spans(split(text, 256)) == spans(split(text, 256, max_chars=9216))


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "100"])
def test_bad_max_chars_is_a_value_error(bad) -> None:
    embed = lambda texts: np.ones((len(texts), 2))  # noqa: E731
    with pytest.raises(ValueError, match="max_chars"):
        split("some text", 10, max_chars=bad)
    with pytest.raises(ValueError, match="max_chars"):
        split_code("x = 1\n", "python", 10, max_chars=bad)
    with pytest.raises(ValueError, match="max_chars"):
        semantic_split("some text", 10, "words", embed, max_chars=bad)
