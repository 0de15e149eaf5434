"""The character bound: text a tokenizer counts as one token (a WordPiece [UNK], one long word)
cannot hide kilobytes inside a chunk whose count looks small.

all-MiniLM-L6-v2's WordPiece maps any word over 100 characters to one [UNK] (its tokenizer.json:
``max_input_chars_per_word``), so a megabyte of letters with no space counts 1 token, and before
the bound ``split`` emitted it as one chunk of 1,000,000 characters with ``tokens == 1``. The
bound alone still left ~109 chunks of 9,216 letters, each one [UNK] with the same vector; a word
the tokenizer reads as one unknown token is now cut at grapheme boundaries into pieces it reads
token by token, and no chunk reads as an [UNK] over more than one grapheme.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
from pathlib import Path

import numpy as np
import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from chunkline import char_bound, default_max_chars, split, split_code
from chunkline.sizers import HFTokenizer
from chunkline.splitting.semantic import SemanticOptions, semantic_split
from tests.helpers import TOKENIZER_SPECS, tokenizer
from tests.splitting.test_splitter_properties import glued_unknowns

MINILM = "hf:all-MiniLM-L6-v2"
ROOT = Path(__file__).resolve().parents[2]

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
    """Tiling, exact counts of every chunk, both bounds (bar a single grapheme, oversized), and
    no chunk read as one unknown token over several graphemes."""
    tok = tokenizer(spec)
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    assert all(b.start == a.end for a, b in zip(chunks, chunks[1:]))
    pieces = [text[c.start : c.end] for c in chunks]
    if isinstance(tok, HFTokenizer):
        # One batch for the counts; offsets only where an [UNK] turns up.
        unk = tok.tokenizer.token_to_id(tok.tokenizer.model.unk_token)
        fresh = tok.tokenizer.encode_batch_fast(pieces, add_special_tokens=False)
        counts = [len(e) for e in fresh]
        glued = [g for e, piece in zip(fresh, pieces) if unk in e.ids
                 for g in glued_unknowns(tok, piece)]
        assert not glued, glued[:3]
    else:
        counts = tok.counts(pieces)
    for c, piece, count in zip(chunks, pieces, counts):
        assert c.tokens == count, c
        if c.oversized:
            assert [m.group() for m in GRAPHEME.finditer(piece)] == [piece]
        else:
            assert c.tokens <= max_tokens and len(piece) <= max_chars, c


@pytest.mark.slow
@pytest.mark.parametrize("spec", MEGABYTE_SPECS)
def test_megabyte_without_spaces_is_cut_within_max_chars(spec: str, megabyte: str) -> None:
    chunks = split(megabyte, 256, 0, tokenizer(spec))
    check_bounded(megabyte, chunks, spec, 256, default_max_chars(256))
    assert not any(c.oversized for c in chunks)
    if spec == MINILM:
        # Pieces of at most max_input_chars_per_word letters, each counted token by token.
        assert max(c.end - c.start for c in chunks) == 100
        assert sum(c.tokens > 1 for c in chunks) > 0.99 * len(chunks)


def test_one_unknown_token_cannot_hide_characters() -> None:
    """The case main got wrong: 20,000 letters are one [UNK], and were one chunk (then three
    chunks of max_chars, each one [UNK]). Now they are read in pieces of 100 letters."""
    text = letters(20_000, seed=7)
    tok = tokenizer("hf:all-MiniLM-L6-v2")
    assert tok.count(text) == 1
    chunks = split(text, 256, 0, tok)
    assert [(c.start, c.end) for c in chunks] == [(k, k + 100) for k in range(0, 20_000, 100)]
    check_bounded(text, chunks, "hf:all-MiniLM-L6-v2", 256, default_max_chars(256))
    assert all(c.tokens > 20 for c in chunks)


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


def texts(text: str, chunks) -> list[str]:
    return [text[c.start : c.end] for c in chunks]


@pytest.mark.parametrize("max_tokens", [8, 256])
def test_a_character_outside_the_vocabulary_glued_to_letters_is_cut_out(max_tokens: int) -> None:
    """"wonderful🙂weather" is one [UNK] over 17 clusters for WordPiece (the emoji is not in the
    vocabulary): it is cut so the letters are read and the emoji's [UNK] covers at most the
    tolerated clusters."""
    word = "wonderful🙂weather"
    text = f"The quick brown fox {word} jumps over the lazy dog."
    tok = tokenizer(MINILM)
    assert glued_unknowns(tok, text) == [word]
    chunks = split(text, max_tokens, 0, tok)
    check_bounded(text, chunks, MINILM, max_tokens, default_max_chars(max_tokens))
    assert any(t.endswith("wonderful") for t in texts(text, chunks))
    assert any(t.startswith("🙂") for t in texts(text, chunks))


@pytest.mark.parametrize("word", ["🙏🙏", "I❤️NY", "abc🙂def", "テストケース"])
def test_short_unknown_words_stay_in_their_sentence(word: str) -> None:
    """An [UNK] over a few clusters hides little; a cut there would end a chunk mid-sentence."""
    text = f"Thanks for the fix {word} it works now. " * 3
    tok = tokenizer(MINILM)
    assert tok.unknown_word_cuts(text) == []
    assert [(c.start, c.end) for c in split(text, 256, 0, tok)] == [(0, len(text))]


def test_a_base64_blob_in_prose_is_read_in_pieces() -> None:
    # 300 characters of the base64 alphabet that BERT does not split on (no "+" or "/").
    blob = base64.b64encode(random.Random(4).randbytes(900)).decode()
    blob = "".join(ch for ch in blob if ch.isalnum())[:300]
    text = f"The attachment follows.\n\ndata:image/png;base64,{blob} and the text goes on here."
    tok = tokenizer(MINILM)
    assert glued_unknowns(tok, text) == [blob]
    chunks = split(text, 256, 0, tok)
    check_bounded(text, chunks, MINILM, 256, default_max_chars(256))
    start = text.index(blob)
    inside = [c for c in chunks if c.start < start + len(blob) and c.end > start]
    assert len(inside) == 3 and sum(c.tokens for c in inside) > 3 * 30


def test_a_dna_string_is_read_in_pieces() -> None:
    dna = "".join(random.Random(9).choices("ACGT", k=50_000))
    text = f">chr1 sample read\n{dna}\n>chr2\nACGT\n"
    chunks = split(text, 128, 0, MINILM)
    check_bounded(text, chunks, MINILM, 128, default_max_chars(128))
    start = text.index(dna)
    inside = [c for c in chunks if c.start < start + len(dna) and c.end > start]
    assert len(inside) == len(dna) // 100 and all(c.tokens > 10 for c in inside)


@pytest.mark.parametrize("spec", [s for s in TOKENIZER_SPECS if s != MINILM])
def test_tokenizers_without_an_unknown_token_name_no_cuts(spec: str) -> None:
    text = "abc🙂def " + letters(5_000, seed=2) + " 👨‍👩‍👧‍👦x"
    assert tokenizer(spec).unknown_word_cuts(text) == []


def test_documents_without_unknown_words_split_as_before() -> None:
    """Spans and counts of real documents with no [UNK] word, against a digest computed by the
    splitter before unknown words were cut (the cuts must cost them nothing, not even a
    changed boundary)."""
    files = ["examples/guide.md", "tests/golden/docs/beam-yaml.md",
             "tests/golden/docs/dataclasses-json.md", "tests/golden/docs/threadpoolctl.md",
             "examples/corpus/api/rest-api-reference.md",
             "examples/corpus/manuals/gripper-g2-manual.md"]
    tok = tokenizer(MINILM)
    digest = hashlib.sha256()
    for name in files:
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        assert tok.unknown_word_cuts(text) == []
        for max_tokens, overlap in [(32, 0), (128, 16), (512, 64)]:
            spans = [(c.start, c.end, c.tokens) for c in split(text, max_tokens, overlap, tok)]
            digest.update(json.dumps(spans).encode())
    assert digest.hexdigest() == "f39e83793821ce6861014c2f69e2cdb44e0a4cb6a9849b7e16bd12cfa51bbb2e"


def test_split_code_and_semantic_split_cut_unknown_words_too() -> None:
    source = 'def f(x):\n    return "wonderful🙂weather" + x\n\n\ndef g():\n    return 1\n'
    chunks = split_code(source, "python", 128, 0, tokenizer(MINILM))
    check_bounded(source, chunks, MINILM, 128, default_max_chars(128))
    assert any(t.startswith("🙂") for t in texts(source, chunks))
    prose = "One sentence here. Then wonderful🙂weather and " + letters(250, seed=1) + ". The end."
    flat = lambda batch: np.ones((len(batch), 4))  # noqa: E731 - no cut from distances
    chunks = semantic_split(prose, 64, tokenizer(MINILM), flat, SemanticOptions(buffer=0))
    check_bounded(prose, chunks, MINILM, 64, default_max_chars(64))
    assert any(t.startswith("🙂") for t in texts(prose, chunks))


@given(st.lists(st.sampled_from(["word", " ", "\n", "\t", "\r", "é", "🙂", "日本", "|", ".", "x" * 120,
                                 "abc🙂def", "\n\n"]), max_size=80).map("".join),
       st.integers(3, 40))
def test_unknown_words_found_window_by_window_are_the_whole_texts(text: str, window: int) -> None:
    # A long document's lines are searched for unknown words a window at a time (its separator
    # positions as int64 arrays cost ~50 bytes a character): the lines and cuts are those of one
    # pass over the whole text, a line cut by a window's edge named once.
    from chunkline.sizers import hf

    unknowns = tokenizer(MINILM)._unknown_words
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hf, "SUSPECT_WINDOW", 1 << 30)
        whole = unknowns._suspect_lines(text), unknowns.cuts(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hf, "SUSPECT_WINDOW", window)
        patch.setattr(hf, "SUSPECT_BATCH_CHARS", window)
        assert (unknowns._suspect_lines(text), unknowns.cuts(text)) == whole
