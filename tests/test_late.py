"""Late chunking: windows, the most-central rule, span runs (fast), and with the real
all-MiniLM-L6-v2 (slow): vectors equal a hand-computed mean of one forward pass's token vectors,
differ from per-chunk embeddings, and stay sound when the document needs several windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from chunkline.late import (
    LateChunker,
    LateOptions,
    _check_pipeline,
    central_window,
    late_chunk_vectors,
    token_runs,
    window_starts,
)

# ------------------------------------------------------------------------------ windows (fast)


@given(n=st.integers(0, 400), window=st.integers(1, 64), data=st.data())
def test_windows_cover_every_token_and_each_owns_one_run_in_order(n, window, data):
    stride = data.draw(st.integers(1, window))
    starts = window_starts(n, window, stride)
    assert starts[0] == 0 and starts == sorted(set(starts))
    if n > window:
        assert starts[-1] + window == n  # the last window ends at the document's end
        assert all(b - a <= stride for a, b in zip(starts, starts[1:]))  # no token unread
    owner = central_window(n, starts, window)
    assert np.all(np.diff(owner) >= 0)  # what lets the chunker stream blocks in token order
    for p in range(n):
        w = owner[p]
        assert starts[w] <= p < starts[w] + window


def brute_force_owner(n, starts, window):
    def context(p, s):
        e = min(s + window, n)
        left = p - s if s > 0 else float("inf")
        right = e - 1 - p if e < n else float("inf")
        return min(left, right)

    return [max((w for w, s in enumerate(starts) if s <= p < s + window),
                key=lambda w: (context(p, starts[w]), -w)) for p in range(n)]


@pytest.mark.parametrize(("n", "window", "stride"), [(10, 4, 2), (11, 4, 2), (30, 8, 3),
                                                     (9, 9, 1), (50, 10, 10), (17, 6, 5)])
def test_owner_is_the_window_with_the_most_context_on_the_thinner_side(n, window, stride):
    starts = window_starts(n, window, stride)
    assert central_window(n, starts, window).tolist() == brute_force_owner(n, starts, window)


def test_with_half_window_stride_every_inner_token_has_a_quarter_window_each_side():
    n, window = 200, 40
    starts = window_starts(n, window, window // 2)
    owner = central_window(n, starts, window)
    for p in range(window, n - window):
        s = starts[owner[p]]
        assert min(p - s, s + window - 1 - p) >= window // 4 - 1


def test_token_runs_are_overlapping_tokens_or_the_nearest():
    # tokens: "ab"(0,2) "cd"(3,5) "##e"(5,6) "f"(9,10)
    offsets = np.array([[0, 2], [3, 5], [5, 6], [9, 10]])
    spans = [(0, 3), (3, 9), (1, 4), (6, 9), (8, 9), (10, 12), (0, 10)]
    lo, hi = token_runs(offsets, spans)
    assert list(zip(lo.tolist(), hi.tolist())) == [
        (0, 1), (1, 3), (0, 2),
        (2, 3),  # the blanks 6..9 between "e" and "f" touch both: the earlier wins
        (3, 4),  # the blank 8..9: 2 characters after "e", right before "f"
        (3, 4),  # after the last token: the last token
        (0, 4),
    ]


@pytest.mark.parametrize(
    "bad", [{"window": 0}, {"stride": 0}, {"window": 4, "stride": 5}, {"batch_size": 0}],
)
def test_options_are_validated(bad):
    with pytest.raises(ValueError):
        LateOptions(**bad)


class Transformer:
    auto_model = None


class Pooling:
    def __init__(self, mode):
        self.pooling_mode = mode


class Dense:
    pass


class Normalize:
    pass


@pytest.mark.parametrize(
    ("modules", "error"),
    [
        ([Transformer(), Pooling("mean"), Normalize()], None),
        ([Transformer(), Pooling("cls")], "mean pooling"),
        ([Transformer(), Pooling("mean"), Dense()], "Dense"),
        ([Pooling("mean")], "Transformer first"),
    ],
)
def test_only_mean_pooled_models_are_accepted(modules, error):
    if error is None:
        _check_pipeline(modules)
    else:
        with pytest.raises(ValueError, match=error):
            _check_pipeline(modules)


# ------------------------------------------------------------------------------ real model

DOC = (
    "# Berlin\n\n"
    "Berlin is the capital and largest city of Germany. "
    "Its more than 3.85 million inhabitants make it the most populous city of the EU. "
    "The city is also one of the states of Germany.\n\n"
    "   \n"
)
_SECOND, _THIRD, _BLANKS = DOC.index("Its more"), DOC.index("The city"), DOC.index("   \n")
SPANS = [(0, _SECOND), (_SECOND, _THIRD), (_THIRD, _BLANKS)]  # three sentences, heading in 1st


@pytest.fixture(scope="module")
def model():
    from chunkline.embedder import EmbedOptions, load_model

    return load_model(EmbedOptions(dtype="float32"))


@pytest.fixture(scope="module")
def reference():
    """The same model through sentence-transformers (transformers' tokenizer and BertModel),
    where ``model`` is chunkline's own BERT encoder: the references below come from it."""
    from chunkline.embedder import EmbedOptions, load_sentence_transformer

    return load_sentence_transformer(EmbedOptions(dtype="float32"))


def single_pass(model, text):
    """Token vectors of one forward pass over the whole text, and their character offsets,
    straight from the Hugging Face tokenizer and the transformer: the reference."""
    import torch

    encoded = model.tokenizer(text, return_offsets_mapping=True, truncation=False,
                              return_special_tokens_mask=True, return_tensors="pt")
    offsets = encoded.pop("offset_mapping")[0].numpy()
    special = encoded.pop("special_tokens_mask")[0].numpy().astype(bool)
    with torch.inference_mode():
        hidden = model[0].auto_model(**encoded).last_hidden_state[0].numpy()
    return hidden[~special], offsets[~special]


def hand_mean(hidden, offsets, start, end):
    rows = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
    vector = hidden[rows].mean(axis=0)
    return vector / np.linalg.norm(vector)


@pytest.mark.slow
def test_vectors_equal_the_hand_computed_mean_of_one_pass(model, reference):
    spans = SPANS
    hidden, offsets = single_pass(reference, DOC)
    expected = np.stack([hand_mean(hidden, offsets, s, e) for s, e in spans])
    got = late_chunk_vectors(model, DOC, spans)
    assert got.dtype == np.float32 and got.shape == (3, 384)
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.slow
def test_vectors_differ_from_embedding_each_chunk_alone(model):
    from chunkline.embedder import EmbedOptions, embed_texts

    spans = SPANS
    late = late_chunk_vectors(model, DOC, spans)
    naive = embed_texts(model, [DOC[s:e] for s, e in spans], EmbedOptions(dtype="float32"))
    cosines = np.sum(late * naive, axis=1)
    # Related (same tokens) but not the same: the late vectors read the rest of the document.
    assert cosines.min() > 0.5 and cosines.max() < 0.99, cosines


@pytest.mark.slow
def test_whitespace_chunk_takes_the_nearest_token_and_empty_text_the_empty_vector(model):
    from chunkline.embedder import EmbedOptions, embed_texts

    tail = _BLANKS
    chunker = LateChunker(model)
    tokens = chunker.token_vectors(DOC)
    last = tokens.vectors[-1] / np.linalg.norm(tokens.vectors[-1])  # "." before the blanks
    np.testing.assert_allclose(chunker.vectors(DOC, [(tail, len(DOC))])[0], last, atol=1e-6)
    empty = chunker.vectors("  \n", [(0, 3), (1, 2)])
    np.testing.assert_allclose(empty, np.tile(embed_texts(model, [""], EmbedOptions(dtype="float32")), (2, 1)),
                               atol=1e-5)


LONG = " ".join(
    f"Step {k}: the {'gripper' if k % 3 else 'charger'} on cell {k % 7} reports status {k * 13}."
    for k in range(30)
)


@pytest.mark.slow
def test_a_long_document_is_read_in_windows_and_each_window_matches_its_own_pass(model, reference):
    chunker = LateChunker(model, LateOptions(window=64, stride=32))
    tokens = chunker.token_vectors(LONG)
    n = len(tokens.offsets)
    assert n > 256 and tokens.windows == len(window_starts(n, 64, 32))
    assert tokens.tokens_read == sum(min(64, n - s) + 2 for s in window_starts(n, 64, 32))
    # A token's vector is its owner window's output: check one token deep inside window 3.
    starts = window_starts(n, 64, 32)
    owner = central_window(n, starts, 64)
    p = starts[3] + 32
    assert owner[p] == 3
    import torch

    ids = reference.tokenizer(LONG, truncation=False)["input_ids"]  # [CLS] ... [SEP]
    window = ids[:1] + ids[1:-1][starts[3] : starts[3] + 64] + ids[-1:]
    with torch.inference_mode():
        hidden = reference[0].auto_model(input_ids=torch.tensor([window])).last_hidden_state[0]
    hidden = hidden[1:].numpy()  # drop [CLS]: row k is the window's k-th token
    np.testing.assert_allclose(tokens.vectors[p], hidden[32], atol=1e-4)


@pytest.mark.slow
def test_windowed_vectors_are_unit_and_equal_single_pass_when_the_window_holds_all(model, reference):
    bounds = list(range(0, len(LONG), 250)) + [len(LONG)]
    spans = list(zip(bounds, bounds[1:]))
    windowed = LateChunker(model).vectors(LONG, spans)  # 254-token windows, stride 127
    assert np.all(np.isfinite(windowed))
    np.testing.assert_allclose(np.linalg.norm(windowed, axis=1), 1.0, atol=1e-5)
    whole = LateChunker(model, LateOptions(window=510)).vectors(LONG, spans)
    hidden, offsets = single_pass(reference, LONG)
    assert len(offsets) <= 510
    expected = np.stack([hand_mean(hidden, offsets, s, e) for s, e in spans])
    np.testing.assert_allclose(whole, expected, atol=1e-5)
    # Windows change the context a token saw, so vectors move, but not far.
    assert np.sum(windowed * whole, axis=1).min() > 0.8


@pytest.mark.slow
def test_streamed_pooling_equals_pooling_the_materialized_token_vectors(model):
    chunker = LateChunker(model, LateOptions(window=48, stride=20, batch_size=3))
    spans = [(0, 100), (90, 400), (400, 401), (401, len(LONG))]
    tokens = chunker.token_vectors(LONG)
    lo, hi = token_runs(tokens.offsets, spans)
    expected = np.stack([tokens.vectors[a:b].mean(axis=0) for a, b in zip(lo, hi)])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(chunker.vectors(LONG, spans), expected, atol=1e-5)


@pytest.mark.slow
def test_window_must_fit_the_position_table(model):
    with pytest.raises(ValueError, match="positions"):
        LateChunker(model, LateOptions(window=511))


# ------------------------------------------------------------------------------ Beam transform


@pytest.mark.slow
def test_late_embed_chunks_sets_each_chunk_to_its_documents_late_vector(model):
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    from chunkline.embedder import EmbedOptions
    from chunkline.records import ChunkRecord, Document, DocumentChunks, chunk_id
    from chunkline.transforms.late_embed import METRICS_NAMESPACE, LateEmbedChunks
    from chunkline.transforms.split import FlattenChunks

    documents = [Document("berlin.md", "berlin.md", DOC), Document("steps.txt", "steps.txt", LONG),
                 Document("blank.txt", "blank.txt", "   ")]  # made no chunk: passes, counts nothing
    spans = {"berlin.md": SPANS, "steps.txt": [(0, 600), (600, len(LONG))]}
    texts = {d.doc_id: d.text for d in documents}
    chunks = [
        ChunkRecord(doc_id, chunk_id(doc_id, s, e), index, s, e, (), texts[doc_id][s:e], 1,
                    prefix="Ignored > In late mode\n")
        for doc_id, doc_spans in spans.items() for index, (s, e) in enumerate(doc_spans)
    ]
    late = LateOptions(window=128)
    expected = {c.chunk_id: v for doc_id, doc_spans in spans.items() for c, v in zip(
        [c for c in chunks if c.doc_id == doc_id],
        LateChunker(model, late).vectors(texts[doc_id], doc_spans))}

    def check(records):
        assert sorted(r.chunk_id for r in records) == sorted(expected)
        for record in records:
            assert record == next(c for c in chunks if c.chunk_id == record.chunk_id)
            assert all(type(x) is float for x in record.embedding)
            np.testing.assert_allclose(record.embedding, expected[record.chunk_id], atol=1e-5)

    elements = [DocumentChunks(d, tuple(c for c in chunks if c.doc_id == d.doc_id)) for d in documents]
    pipeline = beam.Pipeline(runner=FnApiRunner())
    embedded = (
        pipeline
        | "Elements" >> beam.Create(elements, reshuffle=False)
        | "Embed" >> LateEmbedChunks(EmbedOptions(dtype="float32"), late)
    )
    assert_that(embedded | beam.Map(lambda e: e.document.doc_id),
                equal_to([d.doc_id for d in documents]), label="documents")
    assert_that(embedded | FlattenChunks(), check)
    result = pipeline.run()
    result.wait_until_finish()

    counters = {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]}
    chunker = LateChunker(model, late)
    reads = [chunker.read_spans(texts[d], s) for d, s in spans.items()]
    assert counters["chunks_embedded"] == len(chunks)
    assert counters["documents_embedded"] == 2
    assert counters["tokens_embedded"] == sum(r.tokens_read for r in reads)
    assert counters["windows_read"] == sum(r.windows for r in reads) > 2
