"""Semantic splitting: units, cuts at distance spikes, the budget, offsets and heading paths.

The embedder is a parameter, so most tests use fakes whose distances are known; the last ones
use the real all-MiniLM-L6-v2 (slow)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import regex
from hypothesis import given, strategies as st

from chunkline import default_max_chars, split
from chunkline.splitting.semantic import SemanticOptions, model_embed, semantic_split, sentence_spans
from chunkline.splitting.structure import sections
from tests.helpers import reference_headings, reference_path, tokenizer
from tests.splitting.test_splitter_properties import any_text, glued_unknowns, markdown_doc

GRAPHEME = regex.compile(r"\X")
NO_BUFFER = SemanticOptions(buffer=0)


def hashed(texts: list[str]) -> np.ndarray:
    """A deterministic stand-in embedder: a pseudo-random vector seeded by the text."""
    return np.stack([np.random.default_rng(zlib.crc32(t.encode("utf-8", "surrogatepass")))
                     .normal(size=8) for t in texts]) if texts else np.zeros((0, 8))


def by_topic(*topics: str):
    """An embedder mapping a text to the one-hot vector of the first topic word it contains
    (and a shared axis otherwise), so the distance is 0 within a topic and 1 across."""
    def embed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(topics) + 1))
        for row, text in enumerate(texts):
            hits = [k for k, word in enumerate(topics) if word in text.lower()]
            out[row, hits[0] if hits else len(topics)] = 1.0
        return out
    return embed


def pieces(text: str, chunks) -> list[str]:
    return [text[c.start : c.end] for c in chunks]


# ------------------------------------------------------------------------------ invariants


def check_invariants(text: str, spec: str, max_tokens: int, markdown: bool,
                     options: SemanticOptions, max_chars: int | None = None) -> None:
    tok = tokenizer(spec)
    chunks = semantic_split(text, max_tokens, tok, hashed, options, markdown=markdown,
                            max_chars=max_chars)
    bound = default_max_chars(max_tokens) if max_chars is None else max_chars
    if not text:
        assert chunks == []
        return
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    found = reference_headings(text) if markdown else []
    heading_starts = [start for start, _, _ in found]
    bounds = {0} | {m.end() for m in GRAPHEME.finditer(text)}
    for n, chunk in enumerate(chunks):
        piece = text[chunk.start : chunk.end]
        assert piece and chunk.tokens == tok.count(piece), (chunk, piece)
        assert not glued_unknowns(tok, piece), (chunk, piece)
        if chunk.oversized:
            assert [m.group() for m in GRAPHEME.finditer(piece)] == [piece]
        else:
            assert chunk.tokens <= max_tokens
            assert chunk.end - chunk.start <= bound, (chunk, bound)
        if chunk.table_header:
            assert tok.count(chunk.table_header + piece) <= max_tokens
        assert chunk.headings == reference_path(found, chunk.start)
        assert not any(chunk.start < h < chunk.end for h in heading_starts), "spans a heading"
        assert chunk.start in bounds and chunk.end in bounds, "cuts a grapheme"
        if n:
            assert chunk.start == chunks[n - 1].end, "chunks tile the text"


options_strategy = st.builds(
    SemanticOptions,
    rule=st.sampled_from(["percentile", "gradient"]),
    percentile=st.floats(0, 100),
    buffer=st.integers(0, 2),
)


@pytest.mark.parametrize("spec", ["words", "chars", "hf:all-MiniLM-L6-v2"])
@given(text=any_text, max_tokens=st.integers(1, 60), markdown=st.booleans(),
       options=options_strategy, max_chars=st.one_of(st.none(), st.integers(1, 300)))
def test_invariants(spec, text, max_tokens, markdown, options, max_chars):
    check_invariants(text, spec, max_tokens, markdown, options, max_chars)


@pytest.mark.parametrize("spec", ["words", "hf:all-MiniLM-L6-v2"])
@given(text=markdown_doc, max_tokens=st.integers(4, 80), options=options_strategy)
def test_invariants_markdown_documents(spec, text, max_tokens, options):
    check_invariants(text, spec, max_tokens, True, options)


# ------------------------------------------------------------------------------ units


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("One. Two! Three? Four", ["One. ", "Two! ", "Three? ", "Four"]),
        ("It said \"stop.\" Then it went.", ["It said \"stop.\" ", "Then it went."]),
        ("A wrapped\nsentence. And\nanother.\n", ["A wrapped\nsentence. ", "And\nanother.\n"]),
        ("Ends here.\nNext line.", ["Ends here.\n", "Next line."]),
        ("Use e.g. a wrench, i.e. the 10 mm one. Done.",
         ["Use e.g. a wrench, i.e. the 10 mm one. ", "Done."]),
        ("Version 3.5 is out. Yes.", ["Version 3.5 is out. ", "Yes."]),
        ("Para one\n\n\nPara two", ["Para one\n\n\n", "Para two"]),
        ("Steps:\n1. Open it.\n2. Close it.\n- bullet\n> quote\n",
         ["Steps:\n", "1. Open it.\n", "2. Close it.\n", "- bullet\n", "> quote\n"]),
        ("Table:\n| a | b |\n|---|---|\n| 1. x | 2. y |\nAfter.",
         ["Table:\n", "| a | b |\n|---|---|\n| 1. x | 2. y |\n", "After."]),
        ("Code:\n```sh\nrun. this\n\nand. that\n```\nAfter it.",
         ["Code:\n", "```sh\nrun. this\n\nand. that\n```\n", "After it."]),
        ("   \n\nText after blank lines.", ["   \n\nText after blank lines."]),
        ("Text then blanks.\n\n  \n", ["Text then blanks.\n\n  \n"]),
        ("", []),
    ],
)
def test_sentence_units(text, units):
    found = [text[s:e] for part in sections(text, markdown=False) for s, e in
             sentence_spans(text, part)]
    assert found == units


def test_heading_line_joins_the_first_sentence():
    text = "# Title\n\nFirst sentence. Second one.\n## Empty\n"
    parts = sections(text)
    assert [text[s:e] for s, e in sentence_spans(text, parts[0])] == [
        "# Title\n\nFirst sentence. ", "Second one.\n"]
    assert [text[s:e] for s, e in sentence_spans(text, parts[1])] == ["## Empty\n"]


# ------------------------------------------------------------------------------ cuts


TOPICS = ("The cat sat on the mat. The cat purred loudly. The cat slept all day. "
          "A car needs fuel. The car drove off. "
          "A boat sails the sea. The boat has a sail. The boat came back.")


def test_cuts_exactly_where_the_topic_changes():
    chunks = semantic_split(TOPICS, 100, "words", by_topic("cat", "car", "boat"),
                            SemanticOptions(percentile=50, buffer=0))
    assert pieces(TOPICS, chunks) == [
        "The cat sat on the mat. The cat purred loudly. The cat slept all day. ",
        "A car needs fuel. The car drove off. ",
        "A boat sails the sea. The boat has a sail. The boat came back.",
    ]


def test_a_short_segment_is_not_merged_across_a_spike():
    text = "The cat sat. The cat ate. A car. The boat left. The boat sank. The boat rose."
    chunks = semantic_split(text, 100, "words", by_topic("cat", "car", "boat"),
                            SemanticOptions(percentile=50, buffer=0))
    assert "A car. " in pieces(text, chunks)


def test_percentile_100_cuts_nothing_and_0_cuts_every_change():
    embed = by_topic("cat", "car", "boat")
    whole = semantic_split(TOPICS, 100, "words", embed, SemanticOptions(percentile=100, buffer=0))
    assert pieces(TOPICS, whole) == [TOPICS]
    every = semantic_split(TOPICS, 100, "words", embed, SemanticOptions(percentile=0, buffer=0))
    assert len(every) == 3  # distances are 0 within a topic: only the changes are above


def test_gradient_rule_cuts_at_the_jump():
    # Distances rise slowly, then jump once: the jump's gradient stands out.
    angles = [0.0, 0.05, 0.1, 0.15, 1.4, 1.45, 1.5]
    sentences = [f"Sentence {k}. " for k in range(len(angles))]
    text = "".join(sentences).rstrip()
    table = {s.strip(): [np.cos(a), np.sin(a)] for s, a in zip(sentences, angles)}

    def embed(texts):
        return np.array([table[t] for t in texts])

    chunks = semantic_split(text, 100, "words", embed,
                            SemanticOptions(rule="gradient", percentile=80, buffer=0))
    assert [c.start for c in chunks][:2] == [0, text.index("Sentence 4")]


def test_buffer_embeds_each_unit_with_its_neighbours():
    seen: list[str] = []

    def spy(texts):
        seen.extend(texts)
        return hashed(texts)

    semantic_split("A one. B two. C three.", 50, "words", spy, SemanticOptions(buffer=1))
    assert seen == ["A one. B two.", "A one. B two. C three.", "B two. C three."]


def test_headings_always_cut_and_carry_their_path():
    text = "# Guide\nThe cat sat. The cat ate.\n## Setup\nThe cat left. The cat came.\n"
    chunks = semantic_split(text, 100, "words", by_topic("cat"), NO_BUFFER)
    assert [(text[c.start:c.end], c.headings) for c in chunks] == [
        ("# Guide\nThe cat sat. The cat ate.\n", ("Guide",)),
        ("## Setup\nThe cat left. The cat came.\n", ("Guide", "Setup")),
    ]


def test_a_segment_over_budget_is_split_recursively_on_its_span():
    text = "Intro line.\n\n" + " ".join(f"The cat number {k} sat down." for k in range(30))
    chunks = semantic_split(text, 20, "words", by_topic("cat"), NO_BUFFER)
    segment = text.index("The cat")
    expected = [(segment + c.start, segment + c.end) for c in split(text[segment:], 20, 0, "words")]
    assert [(c.start, c.end) for c in chunks if c.start >= segment] == expected
    assert all(c.tokens <= 20 for c in chunks)


def test_the_model_is_not_called_when_no_section_has_two_units():
    def refuse(texts):
        raise AssertionError("embed called")

    chunks = semantic_split("# A\nOne sentence.\n# B\nAnother.", 50, "words", refuse)
    assert len(chunks) == 2


def test_embed_must_return_one_row_per_text():
    with pytest.raises(ValueError, match="embed returned shape"):
        semantic_split("One. Two.", 10, "words", lambda texts: np.zeros((1, 3)))


@pytest.mark.parametrize(
    "bad", [{"rule": "kamradt"}, {"percentile": 101}, {"percentile": -1}, {"buffer": -1},
            {"buffer": 1.5}],
)
def test_options_are_validated(bad):
    with pytest.raises(ValueError):
        SemanticOptions(**bad)


def test_a_table_over_budget_is_cut_between_rows_with_its_header_repeated():
    rows = "".join(f"| cat {k} | sat on mat number {k} |\n" for k in range(12))
    text = "The cat table.\n\n| name | place |\n|---|---|\n" + rows
    chunks = semantic_split(text, 30, "words", by_topic("cat"), NO_BUFFER)
    assert len(chunks) > 2
    assert chunks[-1].table_header == "| name | place |\n|---|---|\n"
    assert all(text[c.start:c.end].endswith("|\n") for c in chunks[1:])


@pytest.mark.parametrize("max_tokens", [0, -1, True, 2.5])
def test_budget_is_validated(max_tokens):
    with pytest.raises(ValueError):
        semantic_split("text", max_tokens, "words", hashed)


# ------------------------------------------------------------------------------ real model

DOC = """# Northwind field manual

## Gripper

The G2 gripper closes in 0.7 seconds. Its fingers grip parts up to five kilograms.
Set the tool voltage to 24 volts before connecting the gripper.
Sourdough bread needs a starter fed with flour and water every day.
The dough rises slowly for twelve hours at room temperature.
Bake the loaf in a hot oven until the crust is dark brown.

## Charging

Dock the robot when the battery falls below twenty percent.
"""


@pytest.mark.slow
def test_real_model_cuts_between_unrelated_topics_within_budget():
    from chunkline.embedder import EmbedOptions, load_model

    options = EmbedOptions()
    embed = model_embed(load_model(options), options)
    tok = tokenizer("hf:all-MiniLM-L6-v2")
    chunks = semantic_split(DOC, 254, tok, embed, SemanticOptions(buffer=0))
    texts = pieces(DOC, chunks)
    # The percentile threshold cuts where the gripper turns into bread, not inside either.
    assert any(t.rstrip().endswith("connecting the gripper.") for t in texts), texts
    assert any(t.startswith("Sourdough bread") for t in texts), texts
    assert chunks[-1].headings == ("Northwind field manual", "Charging")
    assert all(c.tokens == tok.count(t) <= 254 for c, t in zip(chunks, texts))
