"""Behaviour of split(): a small guide split by whole words, bad input, hostile text, structure."""

from __future__ import annotations

import pytest

from chunkline import default_max_chars, split
from tests.helpers import TOKENIZER_SPECS, tokenizer


def small_guide() -> str:
    doc = "# Guide\nIntro text. It has two sentences.\n\n## Setup\n"
    for p in range(4):
        doc += (
            f"Step {p} is simple. Run the tool and check the output carefully before going on. "
            "Then wait a moment. Read the log once more. Fix anything odd.\n\n"
        )
    doc += "## Usage\n"
    for p in range(4):
        doc += (
            f"Usage note {p} talks about flags and defaults at some length, one sentence after "
            "another. Done.\n"
        )
    return doc


def words(s: str) -> int:
    return len(s.split())


def test_small_guide_by_whole_words() -> None:
    """Max 20, overlap 8, whole-word length: budget, overlap and heading paths on a tiny guide."""
    doc = small_guide()
    max_tokens, overlap = 20, 8
    chunks = split(doc, max_tokens, overlap, tokenizer("words"))
    assert (chunks[0].start, chunks[-1].end) == (0, len(doc))
    overlaps = 0
    for n, c in enumerate(chunks):
        assert words(doc[c.start : c.end]) <= max_tokens
        if n > 0:
            p = chunks[n - 1]
            assert c.start > p.start and c.end > p.end and c.start <= p.end
            ov = words(doc[c.start : p.end])
            assert ov <= overlap
            overlaps += ov > 0
    assert overlaps > 0
    assert chunks[0].headings == ("Guide",)
    assert chunks[-1].headings == ("Guide", "Usage")
    assert any(c.headings == ("Guide", "Setup") for c in chunks)


@pytest.mark.parametrize("bad", [None, b"bytes", 3, ["a"]])
def test_non_str_text_is_a_type_error(bad) -> None:
    with pytest.raises(TypeError, match="text must be a str"):
        split(bad, 10)


@pytest.mark.parametrize(
    ("max_tokens", "overlap"), [(0, 0), (-1, 0), (10, 10), (10, 11), (10, -1), (2.5, 0), (True, 0)]
)
def test_bad_budget_is_a_value_error(max_tokens, overlap) -> None:
    with pytest.raises(ValueError):
        split("some text", max_tokens, overlap)


@pytest.mark.slow
@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
def test_empty_text_gives_no_chunks(spec: str) -> None:
    assert split("", 10, 0, tokenizer(spec)) == []


def test_tokenizer_may_be_given_as_spec() -> None:
    assert split("a b c d", 2, tokenizer="words") == split("a b c d", 2, tokenizer=tokenizer("words"))


HOSTILE = {
    "crlf": "Line one.\r\nLine two is longer.\r\n\r\n# Head\r\nBody text here.\r\n" * 20,
    "tabs": "col\tcol\tcol\n\tindented\t\ttext\n" * 30,
    "nul": "before\x00after \x00\x00 nul bytes\x00" * 40,
    "cjk": "日本語の文章は空白なしで続きます。これは試験です。" * 50,
    "rtl": "שלום עולם זה טקסט בעברית. مرحبا بالعالم هذا نص عربي. " * 40,
    "emoji": "👨‍👩‍👧‍👦🇫🇷👍🏽🙂 e\u0301a\u0308\u0323 " * 60,
    "no_spaces": "x" * 20000,
    "one_long_url": "https://example.com/" + "segment/" * 3000,
}


@pytest.mark.parametrize("spec", TOKENIZER_SPECS)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_text_stays_within_budget(spec: str, name: str) -> None:
    text = HOSTILE[name]
    tok = tokenizer(spec)
    chunks = split(text, 16, 4, tok)
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    for c in chunks:
        assert c.tokens == tok.count(text[c.start : c.end])
        assert c.tokens <= 16 or c.oversized
        assert c.end - c.start <= default_max_chars(16) or c.oversized


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["words", "chars", "tiktoken:cl100k_base", "hf:all-MiniLM-L6-v2"])
def test_five_megabyte_line_without_spaces(spec: str) -> None:
    text = ("abcdefghij" * 10 + "0123456789" * 10) * 25_000  # 5,000,000 characters, no spaces
    tok = tokenizer(spec)
    chunks = split(text, 256, 0, tok)
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    assert all(b.start == a.end for a, b in zip(chunks, chunks[1:]))
    sample = chunks[:: max(1, len(chunks) // 50)]
    assert all(c.tokens == tok.count(text[c.start : c.end]) <= 256 for c in sample)
    assert all(c.end - c.start <= default_max_chars(256) for c in chunks)
    assert not any(c.oversized for c in chunks)


@pytest.mark.parametrize(
    ("spec", "grapheme"),
    [
        ("tiktoken:cl100k_base", "👨‍👩‍👧‍👦"),  # one grapheme, byte-level BPE gives several tokens
        ("hf:all-MiniLM-L6-v2", "한"),  # NFD splits the syllable into three jamo pieces
    ],
)
def test_single_grapheme_over_budget_is_oversized_and_alone(spec: str, grapheme: str) -> None:
    family = grapheme
    text = f"a {family} b"
    tok = tokenizer(spec)
    assert tok.count(family) > 1
    chunks = split(text, 1, 0, tok)
    oversized = [c for c in chunks if c.oversized]
    assert [text[c.start : c.end] for c in oversized] == [family]
    assert all(c.tokens <= 1 for c in chunks if not c.oversized)


def test_offsets_are_exact_on_repeated_text() -> None:
    """LangChain's add_start_index lands on the first copy of a repeated passage (#21475)."""
    paragraph = "The same paragraph, word for word, appears many times.\n\n"
    text = paragraph * 50
    chunks = split(text, 12, 0, tokenizer("words"))
    assert len({c.start for c in chunks}) == len(chunks)
    assert chunks[-1].start > len(text) // 2


def test_chunk_never_spans_a_heading_and_path_is_its_own() -> None:
    text = "# A\nalpha beta\n## B\ngamma\n# C\ndelta epsilon\n"
    chunks = split(text, 100, 0, tokenizer("words"))
    assert [(text[c.start : c.end], c.headings) for c in chunks] == [
        ("# A\nalpha beta\n", ("A",)),
        ("## B\ngamma\n", ("A", "B")),
        ("# C\ndelta epsilon\n", ("C",)),
    ]


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("```\n# not a heading\n```\nafter\n", [()]),
        ("~~~md\n# not a heading\n~~~\n", [()]),
        ("    # indented code\n", [()]),
        ("Title\n=====\nbody\n\nSub\n---\nmore\n", [("Title",), ("Title", "Sub")]),
        ("#hashtag is not a heading\n", [()]),
        ("# Closed ###\ntext\n", [("Closed",)]),
        ("> # quoted\ntext\n", [()]),
        ("intro\n# One\ntext\n", [(), ("One",)]),
    ],
)
def test_markdown_structure(text: str, paths: list[tuple[str, ...]]) -> None:
    chunks = split(text, 1000, 0, tokenizer("words"))
    assert [c.headings for c in chunks] == paths


def test_markdown_false_ignores_headings() -> None:
    text = "# A\nx\n# B\ny\n"
    chunks = split(text, 1000, 0, tokenizer("words"), markdown=False)
    assert [(c.start, c.end, c.headings) for c in chunks] == [(0, len(text), ())]


def test_only_over_budget_pieces_descend() -> None:
    # Paragraph 1 fits and stays whole; paragraph 2 is over budget and is cut at sentences.
    text = "short one here.\n\n" + "A sentence. " * 10
    chunks = split(text, 6, 0, tokenizer("words"))
    assert text[chunks[0].start : chunks[0].end] == "short one here.\n\nA sentence. "
    assert all(text[c.start : c.end].endswith(". ") for c in chunks[:-1])


def test_deterministic() -> None:
    text = "\n\n".join(f"Paragraph {i} " + "word " * (i % 37) for i in range(200))
    tok = tokenizer("tiktoken:cl100k_base")
    assert split(text, 64, 8, tok) == split(text, 64, 8, tok)


@pytest.mark.parametrize(
    "front",
    ["---\ntitle: A page\ntags: [x]\n---\n", "---\r\ntitle: x\r\n...\r\n", "---\n---\n"],
)
def test_front_matter_is_not_a_heading(front: str) -> None:
    text = front + "Body text.\n\n# Real\nmore\n"
    chunks = split(text, 1000, 0, tokenizer("words"))
    assert [c.headings for c in chunks] == [(), ("Real",)]
    assert chunks[0].start == 0 and text[chunks[0].start : chunks[0].end].startswith("---")


def test_thematic_break_later_is_still_commonmark() -> None:
    text = "intro\n\n---\ntitle\n---\nbody\n"
    assert [c.headings for c in split(text, 1000, 0, tokenizer("words"))] == [(), ("title",)]


@pytest.mark.parametrize("spec", ["words", "tiktoken:cl100k_base", "hf:all-MiniLM-L6-v2"])
def test_heading_takes_the_first_sentences_along(spec: str) -> None:
    """A heading never ends up alone when the paragraph after it is just too big to join."""
    tok = tokenizer(spec)
    paragraph = "This sentence explains one step of the procedure in detail. " * 12
    text = "## Procedure\n\n" + paragraph + "\n"
    budget = tok.count(paragraph) + 1  # the paragraph fits alone, not with the heading
    chunks = split(text, budget, 0, tok)
    first = text[chunks[0].start : chunks[0].end]
    assert first.startswith("## Procedure") and "This sentence" in first
    assert all(c.tokens <= budget for c in chunks)
