"""The embed stage with the real all-MiniLM-L6-v2 (packaged, offline): vectors, dtypes, the Beam
transform, retrieval sanity, and what the driver reads of a model without loading it."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

from hypothesis import given, settings
from hypothesis import strategies as st
from chunkline.embedder import (
    EmbedOptions,
    ModelInfo,
    ModelNotAvailable,
    embed_texts,
    load_model,
    model_info,
    resolve_model_dir,
    token_lengths,
)
from chunkline.records import ChunkRecord
from chunkline.transforms.embed import METRICS_NAMESPACE, EmbedChunks

pytestmark = pytest.mark.slow

TEXTS = [
    "The Rhine rises in the Swiss Alps and flows through Germany and the Netherlands into the "
    "North Sea.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "To reset the router, hold the power button for ten seconds until the light blinks amber.",
    "The lease ends automatically if the tenant fails to pay the rent within thirty days.",
    "Sourdough rises slowly because wild yeast ferments the dough over many hours.",
]
F32 = EmbedOptions(dtype="float32", batch_size=4)
BF16 = EmbedOptions(dtype="bfloat16", batch_size=4, max_seq_length=512)


@pytest.fixture(scope="module")
def model_f32():
    return load_model(F32)


@pytest.fixture(scope="module")
def model_bf16():
    return load_model(BF16)


def chunk(n: int, text: str, prefix: str = "") -> ChunkRecord:
    doc_id = f"doc{n % 2}"
    return ChunkRecord(
        doc_id=doc_id, chunk_id=f"{doc_id}#{n}", chunk_index=n, start=0, end=len(text),
        headings=(prefix.strip(),) if prefix else (), text=text, tokens=len(text.split()),
        prefix=prefix,
    )


# ---------------------------------------------------------------------------- embed_texts


def test_vectors_are_unit_float32_of_dim_384(model_f32):
    vectors = embed_texts(model_f32, TEXTS, F32)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_vectors_are_deterministic(model_f32):
    np.testing.assert_array_equal(embed_texts(model_f32, TEXTS, F32),
                                  embed_texts(model_f32, TEXTS, F32))


def test_row_i_is_text_i_whatever_the_batch(model_f32):
    # encode sorts by length inside; rows must still come back in input order.
    alone = np.stack([embed_texts(model_f32, [t], F32)[0] for t in TEXTS])
    np.testing.assert_allclose(embed_texts(model_f32, TEXTS, F32), alone, atol=1e-5)


def test_no_texts_give_an_empty_matrix(model_f32):
    assert embed_texts(model_f32, [], F32).shape == (0, 384)


def test_bfloat16_vectors_are_close_to_float32(model_f32, model_bf16):
    f32 = embed_texts(model_f32, TEXTS, F32)
    bf16 = embed_texts(model_bf16, TEXTS, BF16)
    assert bf16.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(bf16, axis=1), 1.0, atol=1e-6)
    cosines = np.sum(f32 * bf16, axis=1)
    assert cosines.min() > 0.99, cosines


def test_load_model_applies_max_seq_length(model_f32, model_bf16):
    assert model_f32.max_seq_length == 256  # the model's own
    assert model_bf16.max_seq_length == 512  # BF16 sets it: the position table's size


# ---------------------------------------------------------------------------- Beam transform


def test_embed_chunks_matches_embed_texts(model_f32):
    long_text = " ".join(TEXTS * 8)  # > 256 tokens: embedded from its start, and counted
    chunks = [chunk(n, text, prefix="Guide > Setup\n" if n % 2 else "")
              for n, text in enumerate(TEXTS + [long_text])]
    expected = dict(zip(
        (c.chunk_id for c in chunks),
        embed_texts(model_f32, [c.embed_text() for c in chunks], F32),
    ))

    def check(records: list[ChunkRecord]) -> None:
        assert sorted(r.chunk_id for r in records) == sorted(expected)
        for record in records:
            original = next(c for c in chunks if c.chunk_id == record.chunk_id)
            assert record == original  # every other field untouched (embedding: compare=False)
            assert isinstance(record.embedding, tuple) and len(record.embedding) == 384
            assert all(type(x) is float for x in record.embedding)
            np.testing.assert_allclose(record.embedding, expected[record.chunk_id], atol=1e-5)

    pipeline = beam.Pipeline(runner=FnApiRunner())
    embedded = (pipeline
                | beam.Create(chunks, reshuffle=False)
                | "Embed" >> EmbedChunks(EmbedOptions(dtype="float32", batch_size=2)))
    assert_that(embedded, check)
    result = pipeline.run()
    result.wait_until_finish()

    counters = {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]}
    lengths = token_lengths(model_f32, [c.embed_text() for c in chunks])
    assert counters["chunks_embedded"] == len(chunks)
    assert counters["tokens_embedded"] == sum(min(n, 256) for n in lengths)
    assert counters["texts_truncated"] == 1


# ---------------------------------------------------------------------------- retrieval


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Which river flows through the Netherlands to the North Sea?", 0),
        ("How do plants turn sunlight into sugar?", 1),
        ("my wifi box is stuck, how do I restart it", 2),
        ("what happens when rent is not paid on time", 3),
        ("why does bread made with a starter take so long to rise", 4),
    ],
)
def test_query_ranks_its_chunk_first(model_f32, query, expected):
    chunks = embed_texts(model_f32, TEXTS, F32)
    scores = chunks @ embed_texts(model_f32, [query], F32)[0]
    assert int(np.argmax(scores)) == expected, scores


# ---------------------------------------------------------------------------- model_info / errors


def test_model_info_reads_the_packaged_model_without_loading_it(model_f32):
    info = model_info(EmbedOptions())
    assert info == ModelInfo("all-MiniLM-L6-v2", dim=384, max_seq_length=256,
                             special_tokens_count=2)
    assert info.dim == model_f32.get_embedding_dimension()


def test_model_info_takes_max_seq_length_up_to_the_positions():
    assert model_info(EmbedOptions(max_seq_length=512)).max_seq_length == 512
    with pytest.raises(ValueError, match="exceeds the 512 positions"):
        model_info(EmbedOptions(max_seq_length=513))


def test_model_directory_can_be_given_by_path():
    directory = resolve_model_dir("all-MiniLM-L6-v2")
    assert (directory / "modules.json").is_file()
    assert model_info(EmbedOptions(model=str(directory))).dim == 384


def test_missing_model_directory_is_a_clear_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelNotAvailable, match="not a local model directory"):
        load_model(EmbedOptions(model=str(missing)))
    with pytest.raises(ModelNotAvailable, match="not a model directory"):
        model_info(EmbedOptions(model=str(tmp_path)))  # exists, holds no model


@pytest.mark.parametrize(
    "bad",
    [{"dtype": "float16"}, {"batch_size": 0}, {"max_seq_length": 0}, {"model": ""},
     {"device": ""}],
)
def test_options_are_validated(bad):
    with pytest.raises(ValueError):
        EmbedOptions(**bad)


# --- Matryoshka truncation (embed.dims) ---------------------------------------------------------


def test_dims_keep_the_first_values_normalized() -> None:
    from chunkline.embedder import probe_texts, truncation_agreement

    full_options, cut_options = EmbedOptions(dtype="float32"), EmbedOptions(dtype="float32", dims=128)
    model = load_model(full_options)
    texts = ["The arm warms up for thirty minutes.", "Charging stops at 95 percent."]
    full = embed_texts(model, texts, full_options)
    cut = embed_texts(model, texts, cut_options)
    assert cut.shape == (2, 128)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-5)
    expected = full[:, :128] / np.linalg.norm(full[:, :128], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, expected, atol=1e-5)
    assert model_info(cut_options).dim == 128
    probes = probe_texts()
    assert len(probes) == 64
    # all-MiniLM-L6-v2 was trained at 384 only: a third of it keeps the ranking only in part.
    assert truncation_agreement(model, EmbedOptions(dims=384), probes) == pytest.approx(1.0)
    assert truncation_agreement(model, cut_options, probes) < 0.95


def test_dims_over_the_model_are_an_error() -> None:
    with pytest.raises(ValueError, match="more than"):
        model_info(EmbedOptions(dims=1000))


# --- Passes cut by padded tokens ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 300), max_size=80), st.integers(1, 5000))
def test_token_passes_partition_within_budget_and_padding(lengths: list[int], budget: int) -> None:
    from chunkline.embedder import PASS_PADDED_RATIO, token_passes

    passes = token_passes(lengths, budget)
    assert sorted(i for group in passes for i in group) == list(range(len(lengths)))
    for group in passes:
        longest = max(lengths[i] for i in group)
        assert lengths[group[0]] == longest
        if len(group) > 1:
            computed = longest * len(group)
            assert computed <= budget
            assert computed <= PASS_PADDED_RATIO * sum(lengths[i] for i in group)


def test_embed_by_tokens_equals_encode_and_counts() -> None:
    from chunkline.embedder import embed_by_tokens

    options = EmbedOptions(dtype="float32")
    model = load_model(options)
    words = "robot arm calibration sensor firmware battery dock mission route lidar".split()
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + (i * 37) % 150)) for i in range(70)]
    texts.append("torque " * 400)  # over the model's 256 tokens: truncated, and counted
    expected = embed_texts(model, texts, options)
    vectors, stats = embed_by_tokens(model, texts, options)
    np.testing.assert_allclose(vectors, expected, atol=2e-6)
    lengths = [min(n, model.max_seq_length) for n in token_lengths(model, texts)]
    assert stats.tokens == sum(lengths) and stats.truncated == 1
    assert stats.tokens <= stats.padded <= 1.25 * stats.tokens
    cut, _ = embed_by_tokens(model, texts[:5], EmbedOptions(dims=64, pass_tokens=300))
    np.testing.assert_allclose(cut, embed_texts(model, texts[:5], EmbedOptions(dims=64)), atol=2e-6)
