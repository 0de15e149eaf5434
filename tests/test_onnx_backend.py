"""embed.backend: onnx. The model exported here from its local directory (float32, and int8 by
ONNX Runtime's dynamic quantization), cached beside the model, and run by ONNX Runtime: its
vectors against torch's on the demo corpus's chunks; options and signatures that keep backends
apart."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from chunkline import get_tokenizer, split
from chunkline.embedder import EmbedOptions, embed_by_tokens, embed_texts, load_model, resolve_model_dir
from chunkline.onnx_encoder import cache_dirs, exported_model
from chunkline.splitting.text import heading_prefix
from chunkline.pipeline.config import ConfigError, load_config
from chunkline.pipeline.plan import embedding_signature

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_texts() -> list[str]:
    """What the pipeline embeds for the demo's Markdown and text files: heading path + chunk."""
    tok = get_tokenizer("hf:all-MiniLM-L6-v2")
    texts = []
    for path in sorted((ROOT / "examples" / "corpus").rglob("*")):
        if path.suffix not in (".md", ".txt"):
            continue
        text = path.read_text(encoding="utf-8")
        texts += [heading_prefix(c.headings, tok, 32) + text[c.start:c.end]
                  for c in split(text, 222, 0, tok)]
    assert len(texts) > 100
    return texts


@pytest.fixture(scope="module")
def torch_vectors(demo_texts) -> np.ndarray:
    options = EmbedOptions(dtype="float32")
    return embed_texts(load_model(options), demo_texts, options)


@pytest.mark.parametrize("dtype, mean_floor, min_floor", [("float32", 0.99999, 0.9999),
                                                           ("int8", 0.995, 0.985)])
def test_onnx_vectors_match_torch_on_the_demo_chunks(demo_texts, torch_vectors, dtype,
                                                     mean_floor, min_floor) -> None:
    options = EmbedOptions(backend="onnx", dtype=dtype, threads=2)
    model = load_model(options)
    vectors = embed_texts(model, demo_texts, options)
    assert vectors.shape == torch_vectors.shape and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(vectors * torch_vectors, axis=1)
    assert cosines.mean() >= mean_floor, cosines.mean()
    assert cosines.min() >= min_floor, cosines.min()
    # Nearest neighbours agree: the ranking is what retrieval reads.
    same = np.argsort(-(vectors @ vectors.T), axis=1)[:, 1]
    reference = np.argsort(-(torch_vectors @ torch_vectors.T), axis=1)[:, 1]
    assert np.mean(same == reference) >= (0.999 if dtype == "float32" else 0.9)


def test_passes_by_tokens_count_the_same_tokens_on_both_backends(demo_texts) -> None:
    texts = demo_texts[:40]
    _, on_torch = embed_by_tokens(load_model(EmbedOptions(dtype="float32")), texts, EmbedOptions(dtype="float32"))
    options = EmbedOptions(backend="onnx")
    _, on_onnx = embed_by_tokens(load_model(options), texts, options)
    assert on_torch == on_onnx


@pytest.fixture()
def model_copy(tmp_path) -> Path:
    """A private copy of the packaged model: exports go beside it, not beside the shared one."""
    target = tmp_path / "models" / "minilm"
    shutil.copytree(resolve_model_dir("all-MiniLM-L6-v2"), target)
    return target


def test_export_is_cached_beside_the_model_and_reused(model_copy, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CHUNKLINE_MODEL_CACHE", str(tmp_path / "cache"))
    loads = []

    def torch_model():
        loads.append(1)
        return load_model(EmbedOptions(model=str(model_copy), dtype="float32"))

    int8 = exported_model(model_copy, "int8", torch_model)
    assert int8.parent == model_copy.parent / "minilm.chunkline-onnx"
    assert sorted(p.name.rsplit("-", 1)[1] for p in int8.parent.iterdir()) == ["float32.onnx", "int8.onnx"]
    assert not list(model_copy.rglob("*.onnx"))  # the model's own files (its fingerprint) untouched
    assert not list(int8.parent.glob(".export-*"))  # no staging file left behind
    before = {p: p.stat().st_mtime_ns for p in int8.parent.iterdir()}
    assert exported_model(model_copy, "int8", torch_model) == int8
    assert exported_model(model_copy, "float32", torch_model).parent == int8.parent
    assert loads == [1]  # exported once; later calls read the cache
    assert {p: p.stat().st_mtime_ns for p in int8.parent.iterdir()} == before


def test_an_unwritable_place_beside_the_model_falls_back_to_the_user_cache(model_copy, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CHUNKLINE_MODEL_CACHE", str(tmp_path / "cache"))
    # A file where the export directory would go: mkdir fails there as on a read-only mount.
    (model_copy.parent / "minilm.chunkline-onnx").write_text("not a directory")
    path = exported_model(model_copy, "float32", lambda: load_model(EmbedOptions(model=str(model_copy), dtype="float32")))
    assert path.parent == tmp_path / "cache" / "onnx" == cache_dirs(model_copy)[1]
    options = EmbedOptions(model=str(model_copy), backend="onnx")
    assert load_model(options).path == path


def test_a_replaced_model_is_exported_again(model_copy, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CHUNKLINE_MODEL_CACHE", str(tmp_path / "cache"))
    first = exported_model(model_copy, "float32", lambda: load_model(EmbedOptions(model=str(model_copy), dtype="float32")))
    (model_copy / "README.md").write_text("a different model now\n" * 10)
    second = exported_model(model_copy, "float32", lambda: load_model(EmbedOptions(model=str(model_copy), dtype="float32")))
    assert first != second and first.is_file() and second.is_file()


@pytest.mark.parametrize("backend, dtype, device, message", [
    ("torch", "int8", "cpu", "dtype 'int8' is not available with backend 'torch'"),
    ("onnx", "bfloat16", "cpu", "dtype 'bfloat16' is not available with backend 'onnx'"),
    ("onnx", "float32", "cuda", "runs on the cpu"),
])
def test_backend_and_dtype_combinations_are_checked(backend, dtype, device, message) -> None:
    with pytest.raises(ValueError, match=message):
        EmbedOptions(backend=backend, dtype=dtype, device=device)


def test_the_backend_is_part_of_the_embedding_signature(tmp_path) -> None:
    model_dir = resolve_model_dir("all-MiniLM-L6-v2")

    def signature(*overrides: str) -> str:
        return embedding_signature(load_config(ROOT / "configs" / "local.yaml", list(overrides)),
                                   model_dir, 256)

    torch_f32 = signature("embed.dtype=float32")
    assert '"backend"' not in torch_f32  # the keys of earlier releases: their vectors reuse
    signatures = {torch_f32, signature("embed.dtype=bfloat16"), signature("embed.backend=onnx"),
                  signature("embed.backend=onnx", "embed.dtype=int8")}
    assert len(signatures) == 4
    # threads change speed, not vectors
    assert signature("embed.dtype=float32", "embed.threads=1") == torch_f32


def test_config_rejects_a_backend_dtype_mismatch_with_the_field_named() -> None:
    with pytest.raises(ConfigError, match="int8"):
        load_config(ROOT / "configs" / "local.yaml", ["embed.dtype=int8"])


def test_late_mode_refuses_the_onnx_backend(tmp_path) -> None:
    from chunkline.pipeline.plan import plan

    config = load_config(ROOT / "configs" / "local.yaml", [
        "embed.backend=onnx", "embed.mode=late", f"output.path={tmp_path}",
        f"input.pattern={ROOT}/examples/corpus/**"])
    with pytest.raises(ValueError, match="late"):
        plan(config, "run-1")


def test_threads_option_sets_torch_threads() -> None:
    import torch

    before = torch.get_num_threads()
    try:
        load_model(EmbedOptions(threads=1))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("value, expected", [("3", 3), ("1", 1), ("0", None), ("many", None), ("", None)])
def test_a_null_threads_option_follows_omp_num_threads(value, expected, monkeypatch) -> None:
    from chunkline.options import default_threads

    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert default_threads() == expected


def test_the_onnx_session_takes_omp_num_threads_when_threads_is_null(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    model = load_model(EmbedOptions(backend="onnx", dtype="float32"))
    assert model.session.get_session_options().intra_op_num_threads == 1


def test_auto_dtype_is_decided_once_on_the_driver_and_recorded(tmp_path) -> None:
    from chunkline.embedder import native_bfloat16, resolve_dtype
    from chunkline.pipeline.plan import plan

    expected = "bfloat16" if native_bfloat16("cpu") else "float32"
    assert resolve_dtype(EmbedOptions()) == expected
    assert resolve_dtype(EmbedOptions(backend="onnx")) == "float32"  # its int8 costs recall
    assert resolve_dtype(EmbedOptions(dtype="float32")) == "float32"
    config = load_config(ROOT / "configs" / "local.yaml", [
        f"output.path={tmp_path}", f"input.pattern={ROOT}/examples/corpus/**"])
    assert config.embed.dtype == "auto"
    decided = plan(config, "run-1")
    assert decided.options.embed.dtype == expected  # what every worker is handed
    assert f'"dtype": "{expected}"' in decided.embedding_signature


def test_a_cached_export_runs_without_transformers_or_sentence_transformers() -> None:
    import subprocess
    import sys

    load_model(EmbedOptions(backend="onnx", dtype="float32"))  # exported here if it is not yet
    script = (
        "import sys\n"
        "from chunkline.embedder import EmbedOptions, embed_by_tokens, load_model\n"
        "options = EmbedOptions(backend='onnx', dtype='float32')\n"
        "vectors, _ = embed_by_tokens(load_model(options), ['warm the arm up first'], options)\n"
        "assert vectors.shape == (1, 384), vectors.shape\n"
        "print(sorted(m for m in ('transformers', 'sentence_transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
