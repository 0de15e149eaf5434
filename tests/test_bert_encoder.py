"""chunkline's own BERT encoder (chunkline.bert_encoder) against sentence-transformers on the real
all-MiniLM-L6-v2: the same token ids, the same vectors (float32 to 1e-5, bfloat16 to its
precision), the same late-chunked vectors; a model it does not understand goes to
sentence-transformers; and loading it imports neither transformers nor sentence-transformers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkline.bert_encoder import BertSentenceEncoder, light_plan
from chunkline.embedder import (
    EmbedOptions,
    embed_by_tokens,
    embed_texts,
    load_model,
    load_sentence_transformer,
    resolve_model_dir,
    token_lengths,
)
from chunkline.late import LateChunker, LateOptions

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
F32 = EmbedOptions(dtype="float32", batch_size=4)
BF16 = EmbedOptions(dtype="bfloat16", batch_size=4)
# Texts a tokenizer or a mask can get wrong: nothing, whitespace alone, one character, accents,
# CJK (one token per character), emoji and zero-width characters ([UNK] or dropped), control
# characters (removed by BERT's clean_text), one text far past max_seq_length (256) and one just
# past it, and ordinary sentences of different lengths in one batch (padding).
TEXTS = [
    "",
    " ",
    "\n\t\u3000\xa0",
    "a",
    "Café naïve résumé — Ångström, Straße, ÉCOLE.",
    "日本語のテキストと中文文本，한국어 텍스트.",
    "emoji 😀🤖 and zero\u200bwidth\u200djoiner \ufeffmarks",
    "control\x00chars\x07 and \x1b[0m escapes",
    "torque " * 600,
    " ".join(f"w{k}" for k in range(260)),
    "The Rhine rises in the Swiss Alps and flows through Germany into the North Sea.",
    "To reset the router, hold the power button for ten seconds until the light blinks amber. "
    "If it does not, unplug it for a minute and try again; the settings are kept.",
    "  leading and trailing spaces  ",
]
# bfloat16 keeps 8 bits of mantissa: one unit in the last place of a component near 0.1 is
# ~4e-4; kernels free to order their sums differently stay within a few of them.
BF16_ATOL = 4e-3


@pytest.fixture(scope="module")
def light32() -> BertSentenceEncoder:
    model = load_model(F32)
    assert isinstance(model, BertSentenceEncoder)
    return model


@pytest.fixture(scope="module")
def st32():
    return load_sentence_transformer(F32)


@pytest.fixture(scope="module")
def light16() -> BertSentenceEncoder:
    model = load_model(BF16)
    assert isinstance(model, BertSentenceEncoder)
    return model


@pytest.fixture(scope="module")
def st16():
    return load_sentence_transformer(BF16)


def by_tokens(model, texts, options):
    return embed_by_tokens(model, texts, options)[0]


EMBEDS: dict[str, Callable] = {"encode": embed_texts, "passes by tokens": by_tokens}


@pytest.mark.parametrize("embed", sorted(EMBEDS))
def test_float32_vectors_equal_sentence_transformers(light32, st32, embed) -> None:
    got = EMBEDS[embed](light32, TEXTS, F32)
    want = EMBEDS[embed](st32, TEXTS, F32)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("embed", sorted(EMBEDS))
def test_bfloat16_vectors_equal_sentence_transformers_to_its_precision(light16, st16, embed) -> None:
    got = EMBEDS[embed](light16, TEXTS, BF16)
    want = EMBEDS[embed](st16, TEXTS, BF16)
    np.testing.assert_allclose(got, want, atol=BF16_ATOL, rtol=0)
    assert np.sum(got * want, axis=1).min() > 0.9995


def test_raw_vectors_before_normalization_equal_too(light32, st32) -> None:
    """The Normalize module itself, not only the float32 normalization embed_texts adds."""
    raw = EmbedOptions(dtype="float32", normalize=False)
    np.testing.assert_allclose(embed_texts(light32, TEXTS, raw), embed_texts(st32, TEXTS, raw), atol=1e-5, rtol=0)


def test_token_ids_types_and_lengths_equal_transformers(light32, st32) -> None:
    for truncation in (False, True):
        kwargs = {"add_special_tokens": True, "truncation": truncation, "return_attention_mask": False}
        if truncation:
            kwargs["max_length"] = light32.max_seq_length
        got, want = light32.tokenizer(TEXTS, **kwargs), st32.tokenizer(TEXTS, **kwargs)
        assert got["input_ids"] == want["input_ids"]
        assert got["token_type_ids"] == want["token_type_ids"]
    assert token_lengths(light32, TEXTS) == token_lengths(st32, TEXTS)
    padded = light32.tokenizer.pad({"input_ids": [[101, 7, 102], [101, 102]]}, padding=True, return_tensors="pt")
    reference = st32.tokenizer.pad({"input_ids": [[101, 7, 102], [101, 102]]}, padding=True, return_tensors="pt")
    for name in ("input_ids", "attention_mask"):
        assert padded[name].tolist() == reference[name].tolist()


@pytest.mark.parametrize("limit", [8, 32, 512])
def test_max_seq_length_is_applied_as_sentence_transformers_applies_it(limit) -> None:
    options = EmbedOptions(dtype="float32", max_seq_length=limit)
    light, reference = load_model(options), load_sentence_transformer(options)
    assert light.max_seq_length == reference.max_seq_length == limit
    for embed in EMBEDS.values():
        np.testing.assert_allclose(embed(light, TEXTS, options), embed(reference, TEXTS, options), atol=1e-5, rtol=0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=400), min_size=1, max_size=6))
def test_any_text_gets_the_same_ids_and_vector(light32, st32, texts: list[str]) -> None:
    kwargs = {"truncation": True, "max_length": 256, "return_attention_mask": False}
    assert light32.tokenizer(texts, **kwargs)["input_ids"] == st32.tokenizer(texts, **kwargs)["input_ids"]
    np.testing.assert_allclose(by_tokens(light32, texts, F32), by_tokens(st32, texts, F32), atol=1e-5, rtol=0)


LONG = " ".join(
    f"Step {k}: the {'gripper' if k % 3 else 'charger'} on cell {k % 7} reports status {k * 13}, "
    f"naïve café ✓." for k in range(60)
)


@pytest.mark.parametrize("late", [LateOptions(), LateOptions(window=48, stride=16, batch_size=3)])
def test_late_chunking_gives_what_sentence_transformers_gave(light32, st32, light16, st16, late) -> None:
    bounds = list(range(0, len(LONG), 333)) + [len(LONG)]
    spans = list(zip(bounds, bounds[1:])) + [(5, 5)]
    got = LateChunker(light32, late).read_spans(LONG, spans)
    want = LateChunker(st32, late).read_spans(LONG, spans)
    assert (got.windows, got.tokens_read) == (want.windows, want.tokens_read)
    np.testing.assert_allclose(got.vectors, want.vectors, atol=1e-5, rtol=0)
    np.testing.assert_allclose(LateChunker(light32, late).vectors("", [(0, 0)]),
                               LateChunker(st32, late).vectors("", [(0, 0)]), atol=1e-5, rtol=0)
    np.testing.assert_allclose(LateChunker(light16, late).vectors(LONG, spans),
                               LateChunker(st16, late).vectors(LONG, spans), atol=BF16_ATOL, rtol=0)


# --------------------------------------------------------------------- models it leaves alone


def model_copy(tmp_path: Path) -> Path:
    """The packaged model's files, linked (the weights are 90 MB) into a folder whose JSON files
    a test may rewrite."""
    source = resolve_model_dir("all-MiniLM-L6-v2")
    target = tmp_path / "model"
    for path in source.rglob("*"):
        if path.is_file():
            (target / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            if path.suffix == ".json":
                shutil.copy(path, target / path.relative_to(source))
            else:
                (target / path.relative_to(source)).symlink_to(path)
    return target


def edit(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def dense_head(model: Path) -> None:
    modules = json.loads((model / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (model / "modules.json").write_text(json.dumps(modules))


EDITS: dict[str, Callable[[Path], None]] = {
    "a Dense module": dense_head,
    "max pooling": lambda m: edit(m / "1_Pooling" / "config.json", pooling_mode_mean_tokens=False,
                                  pooling_mode_max_tokens=True),
    "two pooling modes": lambda m: edit(m / "1_Pooling" / "config.json", pooling_mode_cls_token=True),
    "tanh GELU": lambda m: edit(m / "config.json", hidden_act="gelu_new"),
    "relative positions": lambda m: edit(m / "config.json", position_embedding_type="relative_key"),
    "float16 weights": lambda m: edit(m / "config.json", torch_dtype="float16"),
    "not BERT": lambda m: edit(m / "config.json", model_type="roberta"),
    "lower-casing by sentence-transformers": lambda m: edit(m / "sentence_bert_config.json", do_lower_case=True),
    "tokenizer arguments": lambda m: edit(m / "sentence_bert_config.json", tokenizer_args={"use_fast": False}),
    "a default prompt": lambda m: edit(m / "config_sentence_transformers.json", prompts={"query": "query: "},
                                       default_prompt_name="query"),
    "a cased tokenizer config over an uncased tokenizer.json":
        lambda m: edit(m / "tokenizer_config.json", do_lower_case=False),
    "a token declared beside tokenizer.json's": lambda m: edit(
        m / "tokenizer_config.json", added_tokens_decoder={"30522": {"content": "<doc>", "special": True}}),
    "no tokenizer.json": lambda m: (m / "tokenizer.json").unlink(),
    "no weights file": lambda m: (m / "model.safetensors").unlink(),
}


@pytest.mark.parametrize("change", sorted(EDITS))
def test_a_model_it_does_not_understand_is_left_to_sentence_transformers(tmp_path, change) -> None:
    model = model_copy(tmp_path)
    assert light_plan(model) is not None
    EDITS[change](model)
    assert light_plan(model) is None


def test_weights_that_do_not_load_key_for_key_fall_back_to_sentence_transformers(tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    model = model_copy(tmp_path)
    state = load_file(str(model / "model.safetensors"))
    (model / "model.safetensors").unlink()
    state["encoder.layer.0.extra.weight"] = state["embeddings.LayerNorm.weight"].clone()
    save_file(state, str(model / "model.safetensors"))
    assert light_plan(model) is not None
    loaded = load_model(EmbedOptions(model=str(model), dtype="float32"))
    assert type(loaded).__name__ == "SentenceTransformer"


def test_cls_pooling_without_normalize_equals_sentence_transformers(tmp_path) -> None:
    model = model_copy(tmp_path)
    edit(model / "1_Pooling" / "config.json", pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    modules = json.loads((model / "modules.json").read_text())[:2]
    (model / "modules.json").write_text(json.dumps(modules))
    options = EmbedOptions(model=str(model), dtype="float32", normalize=False)
    light, reference = load_model(options), load_sentence_transformer(options)
    assert isinstance(light, BertSentenceEncoder) and [type(m).__name__ for m in light] == ["Transformer", "Pooling"]
    np.testing.assert_allclose(embed_texts(light, TEXTS, options), embed_texts(reference, TEXTS, options),
                               atol=1e-5, rtol=0)


def test_loading_the_default_model_imports_neither_transformers_nor_sentence_transformers() -> None:
    script = (
        "import sys\n"
        "from chunkline.embedder import EmbedOptions, embed_by_tokens, load_model\n"
        "model = load_model(EmbedOptions())\n"
        "vectors, _ = embed_by_tokens(model, ['warm the arm up first'], EmbedOptions())\n"
        "assert vectors.shape == (1, 384), vectors.shape\n"
        "print(sorted(m for m in ('transformers', 'sentence_transformers', 'sklearn') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_tokens_declared_as_tokenizer_json_declares_them_keep_it_light(tmp_path) -> None:
    """What newer tokenizer_config.json files hold: the special tokens again, by id."""
    model = model_copy(tmp_path)
    added = json.loads((model / "tokenizer.json").read_text())["added_tokens"]
    edit(model / "tokenizer_config.json",
         added_tokens_decoder={str(token["id"]): {"content": token["content"], "special": True} for token in added})
    assert light_plan(model) is not None
