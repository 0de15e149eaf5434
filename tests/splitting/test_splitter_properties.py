"""Invariants of split() over generated text, for every tokenizer kind."""

from __future__ import annotations

import string

import regex
from hypothesis import given, strategies as st

from chunkline import Tokenizer, default_max_chars, split
from chunkline.sizers.hf import UNKNOWN_GRAPHEMES_TOLERATED, HFTokenizer
from tests.helpers import TOKENIZER_SPECS, reference_headings, reference_path, tokenizer

import pytest

GRAPHEME = regex.compile(r"\X")

# Fragments that stress offsets, token edges and Markdown structure.
FRAGMENTS = [
    "word", "Word", "words", "the", "a", "42", "3.14", "x_y", "it's", "don't", "URL:",
    " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", ". ", "! ", "? ", ", ", "/",
    "\x00", "\x0b", "\x1c", "\xa0", "\u2028", "\u3000",
    "日本語のテキスト", "中文", "한국어", "שלום עולם", "مرحبا بالعالم", "Ελληνικά",
    "e\u0301", "a\u0308\u0323", "👨‍👩‍👧‍👦", "🇫🇷", "👍🏽", "🙂", "\ufeff",
    "<|endoftext|>", "##", "#", "===", "---", "***", "|", "`", "```", "~~~",
    "# Title\n", "## Section two\n", "### Deep *emphasis*\n", "#hashtag\n", "#\n",
    "Setext title\n===\n", "Setext sub\n---\n", "  ## indented heading ##\n",
    "```python\n# not a heading\nx = 1\n```\n", "~~~\n# also code\n~~~\n",
    "    # indented code, not a heading\n", "> # quoted heading\n",
    "- item one\n- item two\n", "1. first\n2. second\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n", "<div>\n# in html\n</div>\n",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "https://example.com/a/very/long/path?with=query&and=more#fragment",
]

# Runs a tokenizer may read as a handful of tokens, or one: hundreds of letters with no space
# (one [UNK] for WordPiece past 100 characters, one word for "words"), emoji ZWJ sequences and
# flags, CJK with no spaces, stacked combining marks (one grapheme, possibly over max_chars).
EMOJI = ["👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🇫🇷", "🇯🇵", "👍🏽", "🙂", "❤️"]
long_runs = st.one_of(
    st.text(alphabet=string.ascii_letters, min_size=100, max_size=600),
    st.lists(st.sampled_from(EMOJI), min_size=1, max_size=120).map("".join),
    st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),
            min_size=20, max_size=300),
    st.lists(st.sampled_from(["e\u0301", "a\u0308\u0323", "o\u0302\u0303\u0304", "ก\u0e49"]),
             min_size=1, max_size=100).map("".join),
    st.integers(1, 40).map(lambda k: "e" + "\u0301" * k),
)

fragment_text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12), long_runs), max_size=60
).map("".join)
any_text = st.one_of(fragment_text, st.text(max_size=300))


def glued_unknowns(tok: Tokenizer, piece: str) -> list[str]:
    """The unknown tokens of a fresh encoding of ``piece`` that span more grapheme clusters
    than a chunk may hide behind one [UNK] (``UNKNOWN_GRAPHEMES_TOLERATED``), as their text
    ("wonderful🙂weather" for WordPiece). Only Hugging Face models have one."""
    if not isinstance(tok, HFTokenizer):
        return []
    unk = tok.tokenizer.model.unk_token
    unk_id = tok.tokenizer.token_to_id(unk) if unk else None
    encoding = tok.tokenizer.encode(piece, add_special_tokens=False)
    return [
        piece[a:b]
        for token, (a, b) in zip(encoding.ids, encoding.offsets)
        if token == unk_id and len(GRAPHEME.findall(piece[a:b])) > UNKNOWN_GRAPHEMES_TOLERATED
    ]


def _budget(data) -> tuple[int, int, int | None]:
    max_tokens = data.draw(st.one_of(st.integers(1, 8), st.integers(9, 80)), label="max_tokens")
    overlap = data.draw(st.integers(0, max_tokens - 1), label="overlap")
    max_chars = data.draw(st.one_of(st.none(), st.integers(1, 12), st.integers(13, 400)),
                          label="max_chars")
    return max_tokens, overlap, max_chars


def check_invariants(
    text: str, spec: str, max_tokens: int, overlap: int, markdown: bool,
    max_chars: int | None = None,
) -> None:
    tok = tokenizer(spec)
    chunks = split(text, max_tokens, overlap, tok, markdown=markdown, max_chars=max_chars)
    bound = default_max_chars(max_tokens) if max_chars is None else max_chars
    if not text:
        assert chunks == []
        return
    assert chunks[0].start == 0
    assert chunks[-1].end == len(text)
    found = reference_headings(text) if markdown else []
    heading_starts = [start for start, _, _ in found]
    for n, chunk in enumerate(chunks):
        piece = text[chunk.start : chunk.end]
        assert piece, chunk
        assert chunk.tokens == tok.count(piece), (chunk, piece)
        assert not glued_unknowns(tok, piece), (chunk, piece)
        if chunk.oversized:
            assert chunk.tokens > max_tokens or len(piece) > bound
            assert [m.group() for m in GRAPHEME.finditer(piece)] == [piece], "oversized > 1 grapheme"
        else:
            assert chunk.tokens <= max_tokens
            assert chunk.end - chunk.start <= bound, (chunk, bound)
        assert chunk.headings == reference_path(found, chunk.start)
        assert not any(chunk.start < h < chunk.end for h in heading_starts), "chunk spans a heading"
        if n:
            previous = chunks[n - 1]
            assert chunk.start > previous.start and chunk.end > previous.end
            assert chunk.start <= previous.end
            if chunk.start < previous.end:
                assert tok.count(text[chunk.start : previous.end]) <= overlap
    # Graphemes are never cut.
    bounds = {0} | {m.end() for m in GRAPHEME.finditer(text)}
    assert all(c.start in bounds and c.end in bounds for c in chunks)


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@given(data=st.data(), text=any_text, markdown=st.booleans())
def test_invariants(spec: str, data, text: str, markdown: bool) -> None:
    max_tokens, overlap, max_chars = _budget(data)
    check_invariants(text, spec, max_tokens, overlap, markdown, max_chars)


prose = st.lists(
    st.sampled_from(
        ["The", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs", "and", "runs", "far",
         "1999", "co-op", "e-mail", "naïve", "Straße", "über", "(aside)", "\"quoted\"", "end."]
    ),
    min_size=1, max_size=40,
).map(" ".join)
markdown_doc = st.lists(
    st.one_of(
        prose.map(lambda p: p + "\n\n"),
        prose.map(lambda p: p + ".\n"),
        st.sampled_from(FRAGMENTS[46:]),
        long_runs.map(lambda run: run + "\n"),
        st.tuples(st.integers(1, 6), prose).map(lambda t: "#" * t[0] + " " + t[1] + "\n"),
        prose.map(lambda p: p + "\n" + "=" * 3 + "\n"),
        prose.map(lambda p: "```\n# " + p + "\n```\n"),
    ),
    max_size=30,
).map("".join)


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@given(data=st.data(), text=markdown_doc)
def test_invariants_markdown_documents(spec: str, data, text: str) -> None:
    max_tokens, overlap, max_chars = _budget(data)
    check_invariants(text, spec, max_tokens, overlap, True, max_chars)


cut_text = st.lists(
    st.sampled_from(["a", "\n", "\n\n", ". ", " ", ".", "  ", "\n\n\n", "x\n", "?", "\v"]),
    max_size=60,
).map("".join)


@given(text=cut_text, data=st.data())
def test_vector_separator_cuts_equal_bytes_split(text: str, data) -> None:
    """The numpy cutter used for long pieces makes exactly the cuts of bytes.split."""
    from chunkline.splitting.core import SEPARATORS, _separator_ends, _split_ends

    view = text.encode("ascii")
    lo = data.draw(st.integers(0, len(view)))
    hi = data.draw(st.integers(lo, len(view)))
    for separator in SEPARATORS:
        sep = separator.encode("ascii")
        assert _separator_ends(view, lo, hi, sep) == _split_ends(view[lo:hi].split(sep), lo, hi, len(sep))


HEADED_DOCS = st.lists(
    st.tuples(st.integers(1, 4), st.sampled_from(["Alpha", "Beta", "Gamma"]),
              st.lists(st.sampled_from(["short line.", "a longer line of prose here.", "", "x y z"]),
                       max_size=4)),
    max_size=8,
).map(lambda sections: "".join(
    f"{'#' * level} {title}\n\n" + "\n".join(body) + ("\n\n" if body else "")
    for level, title, body in sections))


@pytest.mark.parametrize("spec", ["words", "hf:all-MiniLM-L6-v2"])
@given(text=HEADED_DOCS, data=st.data())
def test_merged_sections_keep_paths_that_enclose_every_character(spec: str, text: str, data) -> None:
    """With small sections merged, every chunk's path is a prefix of the path at each of its
    characters (it encloses all of it), and the budget still holds."""
    tok = tokenizer(spec)
    max_tokens = data.draw(st.integers(4, 80), label="max_tokens")
    below = data.draw(st.integers(1, 80), label="merge_sections_below")
    chunks = split(text, max_tokens, 0, tok, markdown=True, merge_sections_below=below)
    assert "".join(text[c.start:c.end] for c in chunks) == text
    found = reference_headings(text)
    for chunk in chunks:
        piece = text[chunk.start:chunk.end]
        assert chunk.tokens == tok.count(piece) and (chunk.tokens <= max_tokens or chunk.oversized)
        positions = [chunk.start, chunk.end - 1] + [s for s, _, _ in found if chunk.start < s < chunk.end]
        for position in positions:
            path = reference_path(found, position)
            assert path[:len(chunk.headings)] == chunk.headings, (chunk, piece, path)
    unmerged = split(text, max_tokens, 0, tok, markdown=True)
    assert len(chunks) <= len(unmerged)
