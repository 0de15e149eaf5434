"""Sentence embeddings for chunks with a local sentence-transformers model, never downloaded.

The pure half of the embed stage: options, where a model lives, what it is (read from its config
files, without loading weights), loading it, and embedding a list of texts. The Beam half
(``transforms/embed.py``) wraps these in a RunInference model handler so that the model is
loaded once per worker.

>>> options = EmbedOptions(dtype="float32")       # packaged all-MiniLM-L6-v2, cpu
>>> model_info(options)
ModelInfo(name='all-MiniLM-L6-v2', dim=384, max_seq_length=256, special_tokens_count=2)
>>> vectors = embed_texts(load_model(options), ["A first chunk.", "A second."], options)
>>> vectors.shape, vectors.dtype
((2, 384), dtype('float32'))
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from chunkline.options import check_fields, help_text
from annotated_types import Ge, Le, MinLen
from typing import Annotated, Literal
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

import numpy as np

from chunkline.extras import require
from chunkline.sizers import PACKAGED_HF_MODELS, TokenizerNotAvailable, hf_model_dir

if TYPE_CHECKING:  # heavy imports (torch) happen only when a model is actually loaded
    from sentence_transformers import SentenceTransformer


class ModelNotAvailable(RuntimeError):
    """An embedding model is neither a local model directory nor an installed packaged model."""


@dataclass(frozen=True)
class EmbedOptions:
    """How chunks are embedded (a sentence-transformers model; nothing is ever fetched from a hub)."""

    model: Annotated[str, MinLen(1)] = field(default="all-MiniLM-L6-v2", metadata=help_text(
        "A packaged model name (see PACKAGED_HF_MODELS) or a local sentence-transformers model "
        "directory."))
    device: Annotated[str, MinLen(1)] = field(default="cpu", metadata=help_text(
        "A torch device: cpu, cuda, cuda:1, mps."))
    backend: Literal["torch", "onnx"] = field(default="torch", metadata=help_text(
        "torch: PyTorch; a BERT-family model (all-MiniLM-L6-v2 among them) through chunkline's "
        "own encoder, the same vectors as sentence-transformers', which runs every other model. "
        "onnx: ONNX Runtime's CPU provider, the model exported here from its directory on first "
        "use and cached beside it."))
    dtype: Literal["auto", "float32", "bfloat16", "int8"] = field(default="auto", metadata=help_text(
        "Weights and activations; vectors come out float32 either way. torch: float32 or "
        "bfloat16 (~3x faster on CPUs with AMX); onnx: float32 or int8 (dynamic quantization). "
        "auto: bfloat16 where the hardware computes it natively (a CPU with AMX or AVX512-BF16, "
        "a CUDA device that supports it), else float32; decided once on the driver, recorded "
        "in the manifest and the embedding signature."))
    threads: Annotated[int, Ge(1)] | None = field(default=None, metadata=help_text(
        "Threads the model computes with in each worker process. Set it to cores / worker "
        "processes on multi-process runners so they do not oversubscribe the cores. null: the "
        "library's default (OMP_NUM_THREADS when set, else all cores)."))
    normalize: bool = field(default=True, metadata=help_text(
        "Unit L2 norm (cosine = dot product). Off: what the model outputs (all-MiniLM-L6-v2 "
        "ends in a Normalize module and gives unit vectors regardless)."))
    batch_size: Annotated[int, Ge(1), Le(4096)] = field(default=64, metadata=help_text(
        "Texts per forward pass."))
    max_seq_length: Annotated[int, Ge(8)] | None = field(default=None, metadata=help_text(
        "Tokens (special tokens included) the model reads of a text. null: the model's own "
        "(256 for all-MiniLM-L6-v2); at most its position table (512 for BERT-style models)."))
    pass_tokens: Annotated[int, Ge(1)] | None = field(default=None, metadata=help_text(
        "Padded tokens per forward pass: texts are sorted by their exact token count and cut "
        "into passes of at most this many tokens (longest in the pass x texts), so short "
        "chunks go many to a pass and long ones few. null: batch_size x max_seq_length."))
    dims: Annotated[int, Ge(1)] | None = field(default=None, metadata=help_text(
        "Keep the first dims values of each vector (then normalize): Matryoshka truncation, "
        "as sentence-transformers' truncate_dim. Lossless only for Matryoshka-trained models; "
        "for others the run measures and warns. null: all."))

    def __post_init__(self) -> None:
        check_fields(self)
        allowed = BACKEND_DTYPES[self.backend]
        if self.dtype not in allowed:
            raise ValueError(f"EmbedOptions.dtype {self.dtype!r} is not available with backend "
                             f"{self.backend!r} (it runs {' or '.join(allowed)})")
        if self.backend == "onnx" and self.device != "cpu":
            raise ValueError(f"EmbedOptions.backend 'onnx' runs on the cpu (ONNX Runtime's CPU "
                             f"provider), not on {self.device!r}; use backend torch there")


BACKEND_DTYPES = {"torch": ("auto", "float32", "bfloat16"), "onnx": ("auto", "float32", "int8")}


def native_bfloat16(device: str) -> bool:
    """Whether ``device`` multiplies bfloat16 in hardware. Without it PyTorch emulates bfloat16
    and runs slower than float32."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device != "cpu":
        return False
    cpu = torch.cpu
    return bool(getattr(cpu, "_is_amx_tile_supported", lambda: False)()
                or getattr(cpu, "_is_avx512_bf16_supported", lambda: False)())


def resolve_dtype(options: "EmbedOptions") -> Literal["float32", "bfloat16", "int8"]:
    """``options.dtype`` with ``auto`` decided for this machine. ONNX's auto is float32: its
    int8 lost 1.4 points of R@5 on a 423-question set (bench/RESULTS.md), bfloat16 none."""
    if options.dtype != "auto":
        return options.dtype
    if options.backend == "torch" and native_bfloat16(options.device):
        return "bfloat16"
    return "float32"


class ModelInfo(NamedTuple):
    """What the driver needs to know of a model before the job runs: the split budget is
    ``max_seq_length - special_tokens_count - heading reserve`` and the Parquet vector is
    ``fixed_size_list<float32>[dim]``."""

    name: str
    dim: int
    max_seq_length: int
    special_tokens_count: int


def resolve_model_dir(model: str) -> Path:
    """The local directory of ``model``: a directory as given, or a packaged model's.

    Raises ModelNotAvailable when it is neither; models are never downloaded.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        if not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
            raise ModelNotAvailable(
                f"{model} is a directory but not a model directory (no modules.json or config.json)"
            )
        return path
    if model.lower() not in PACKAGED_HF_MODELS:
        raise ModelNotAvailable(
            f"embedding model {model!r} is not a local model directory (no such directory) nor a "
            f"packaged model ({', '.join(sorted(PACKAGED_HF_MODELS))}); models are never "
            f"downloaded: pass a local sentence-transformers model directory or install its package"
        )
    try:
        return hf_model_dir(model)
    except TokenizerNotAvailable as exc:
        raise ModelNotAvailable(str(exc)) from exc


def model_info(options: EmbedOptions) -> ModelInfo:
    """Name, output dimension, effective max sequence length and special-token count of
    ``options.model``, read from its config files and tokenizer; the weights are loaded only for
    a module pipeline whose output dimension the config files do not tell."""
    model_dir = resolve_model_dir(options.model)
    max_seq_length = _max_seq_length(model_dir, options)
    dim = _dim_from_configs(model_dir)
    if dim is None:
        dim = _dimension(load_model(options), options.model)
    if options.dims is not None:
        if options.dims > dim:
            raise ValueError(f"embed.dims {options.dims} is more than {options.model}'s {dim} dimensions")
        dim = options.dims
    return ModelInfo(options.model, dim, max_seq_length, _special_tokens_count(model_dir))


def load_model(options: EmbedOptions) -> "SentenceTransformer":
    """The model, from local files only, on ``options.device`` in ``options.dtype``, in eval mode,
    reading at most ``options.max_seq_length`` tokens of a text when that is set.

    A BERT-family checkpoint that :mod:`chunkline.bert_encoder` runs exactly (all-MiniLM-L6-v2
    among them) is a :class:`chunkline.bert_encoder.BertSentenceEncoder` on torch alone: what it
    saves is importing transformers and sentence-transformers, ~4.7 s of a one-file run
    (bench/RESULTS.md). Every other model, and one whose weights do not load into it key for key,
    is sentence-transformers' (:func:`load_sentence_transformer`). With ``backend: onnx`` an
    :class:`chunkline.onnx_encoder.OnnxSentenceEncoder`. All three answer the calls chunkline
    makes of a ``SentenceTransformer``."""
    if options.backend == "onnx":
        return _load_onnx(options)
    require("embed", "torch")
    model_dir = resolve_model_dir(options.model)
    from chunkline.bert_encoder import NotLight, light_plan, load_light

    plan = light_plan(model_dir)
    if plan is not None:
        _set_threads(options)
        try:
            light = load_light(plan, max_seq_length=_max_seq_length(model_dir, options),
                               device=options.device)
        except NotLight:
            pass  # sentence-transformers reads what this module does not
        else:
            return _finish_model(light, options)  # answers the calls chunkline makes
    return load_sentence_transformer(options)


def load_sentence_transformer(options: EmbedOptions) -> "SentenceTransformer":
    """:func:`load_model` with ``backend: torch`` through sentence-transformers, whatever the
    model (the ONNX export traces its module chain; the tests compare the light encoder with
    it)."""
    if options.backend != "torch":
        raise ValueError(f"load_sentence_transformer loads backend torch, not {options.backend!r}")
    require("embed", "sentence_transformers")  # brings torch and transformers
    model_dir = resolve_model_dir(options.model)
    max_seq_length = _max_seq_length(model_dir, options)
    _offline()
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    _set_threads(options)
    # Its "Loading weights" bar would print from every worker into the run's own display.
    transformers_logging.disable_progress_bar()
    model = SentenceTransformer(str(model_dir), device=options.device, local_files_only=True)
    model.max_seq_length = max_seq_length
    return _finish_model(model, options)


def _load_onnx(options: EmbedOptions) -> "SentenceTransformer":
    """The ONNX Runtime encoder; sentence-transformers is imported only to export the model, the
    first time (and, for a BERT-family model's tokenizer, not at all: chunkline.onnx_encoder)."""
    require("onnx", "onnxruntime")
    require("embed", "torch")
    model_dir = resolve_model_dir(options.model)
    max_seq_length = _max_seq_length(model_dir, options)
    _offline()
    _set_threads(options)
    from chunkline.onnx_encoder import OnnxSentenceEncoder

    dim = _dim_from_configs(model_dir)
    if dim is None:
        dim = _dimension(load_sentence_transformer(
            dataclasses.replace(options, backend="torch", dtype="float32")), options.model)

    def torch_model() -> "SentenceTransformer":
        return load_sentence_transformer(EmbedOptions(model=str(model_dir), dtype="float32"))

    return OnnxSentenceEncoder(  # type: ignore[return-value]  # a stand-in: it answers the calls chunkline makes
        model_dir, resolve_dtype(options), max_seq_length, dim, torch_model, options.threads)


def _offline() -> None:
    """Belt and braces against a hub call: the offline switches (read by huggingface_hub when it
    is first imported, so set before transformers is) plus local_files_only on every load."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _set_threads(options: EmbedOptions) -> None:
    if options.threads is not None:
        import torch

        torch.set_num_threads(options.threads)


def _finish_model(model: Any, options: EmbedOptions) -> Any:
    """``model`` in ``options``' dtype (sentence-transformers' way, ``model.to``: every
    parameter, LayerNorms included), in eval mode."""
    import torch

    if resolve_dtype(options) == "bfloat16":
        model.to(torch.bfloat16)
    model.eval()
    return model


def embed_texts(
    model: "SentenceTransformer", texts: Sequence[str], options: EmbedOptions
) -> np.ndarray:
    """float32 array ``[len(texts), dim]``, row i the embedding of ``texts[i]``, unit L2 norm when
    ``options.normalize``; forward passes of ``options.batch_size`` texts.

    sentence-transformers sorts the texts by length before cutting them into batches, so a batch
    pads to similar lengths; rows come back in input order.
    """
    if not texts:
        return np.zeros((0, options.dims or _dimension(model)), dtype=np.float32)
    if options.backend == "onnx":  # no encode() there: the same passes by padded tokens
        return embed_by_tokens(model, texts, options)[0]
    vectors = model.encode(
        list(texts),
        batch_size=options.batch_size,
        convert_to_numpy=True,
        show_progress_bar=False,
        # Normalized below, in float32: in a bfloat16 model the norm would be ~1 +- 1e-2.
        normalize_embeddings=False,
    )
    return _finish(vectors, options)


class PassStats(NamedTuple):
    """What a call of :func:`embed_by_tokens` fed the model."""

    tokens: int  # real tokens read (special tokens included, after truncation)
    padded: int  # positions computed: each pass's longest text x its texts
    truncated: int  # texts cut at max_seq_length
    passes: int


# A pass takes a text only while the positions it computes stay within this multiple of the
# real tokens in it, so the whole call stays within it too: under the 1.10x of the real tokens
# that padding is allowed, with room for the passes a short window forces.
PASS_PADDED_RATIO = 1.08


def token_passes(lengths: Sequence[int], budget: int, ratio: float = PASS_PADDED_RATIO) -> list[list[int]]:
    """Indexes of ``lengths`` grouped into passes, longest first: each pass's longest length
    times its size stays within ``budget`` (a single text over it is a pass of its own), and
    a pass takes a shorter text only while the positions it computes stay within ``ratio``
    times its real tokens.

    >>> token_passes([5, 100, 7, 98, 6], 200)
    [[1, 3], [2, 4], [0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    passes: list[list[int]] = []
    real = 0
    for index in order:
        # Sorted longest first: the pass's first text is its longest.
        if passes:
            longest, size = lengths[passes[-1][0]], len(passes[-1]) + 1
            computed = longest * size
            if computed <= budget and computed <= ratio * (real + lengths[index]):
                passes[-1].append(index)
                real += lengths[index]
                continue
        passes.append([index])
        real = lengths[index]
    return passes


def embed_by_tokens(
    model: "SentenceTransformer", texts: Sequence[str], options: EmbedOptions
) -> tuple[np.ndarray, PassStats]:
    """:func:`embed_texts`, each text tokenized once: sorted by its exact token count and cut
    into forward passes by padded tokens (``options.pass_tokens``) rather than by a count of
    texts, so a pass pads only to texts of nearly its own length. Rows in input order; the
    vectors equal ``model.encode``'s (the same tokenization, padding and pooling)."""
    import torch

    limit = model.max_seq_length
    if limit is None:  # load_model sets it; a model loaded elsewhere may not have
        raise ValueError("the model has no max_seq_length (chunkline.embedder.load_model sets it)")
    if not texts:
        return np.zeros((0, options.dims or _dimension(model)), dtype=np.float32), PassStats(0, 0, 0, 0)
    tokenizer = model.tokenizer
    encoded = tokenizer(list(texts), add_special_tokens=True, truncation=False,
                        return_attention_mask=False, verbose=False)
    ids = encoded["input_ids"]
    types = encoded.get("token_type_ids")
    over = [i for i, row in enumerate(ids) if len(row) > limit]
    if over:  # rare (chunkline's chunks fit the model): the tokenizer's own truncation for these
        again = tokenizer([texts[i] for i in over], add_special_tokens=True, truncation=True,
                          max_length=limit, return_attention_mask=False)
        for slot, i in enumerate(over):
            ids[i] = again["input_ids"][slot]
            if types is not None:
                types[i] = again["token_type_ids"][slot]
    lengths = [len(row) for row in ids]
    budget = options.pass_tokens or options.batch_size * limit
    out = np.zeros((len(texts), options.dims or _dimension(model)), dtype=np.float32)
    padded = 0
    passes = token_passes(lengths, budget)
    device = model.device
    with torch.inference_mode():
        for group in passes:
            batch = {"input_ids": [ids[i] for i in group]}
            if types is not None:
                batch["token_type_ids"] = [types[i] for i in group]
            features = tokenizer.pad(batch, padding=True, return_tensors="pt")
            padded += int(features["input_ids"].numel())
            features = {name: tensor.to(device) for name, tensor in features.items()}
            vectors = model.forward(features)["sentence_embedding"].float().cpu().numpy()
            out[group] = _finish(vectors, options)
    return out, PassStats(sum(lengths), padded, len(over), len(passes))


def _finish(vectors: np.ndarray, options: EmbedOptions) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if options.dims is not None:
        vectors = np.ascontiguousarray(vectors[:, : options.dims])  # Matryoshka: the first dims
    if options.normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.maximum(norms, np.float32(1e-12))
    return vectors


def truncation_agreement(model: "SentenceTransformer", options: EmbedOptions,
                         texts: Sequence[str]) -> float:
    """How well ``options.dims`` values keep the model's geometry: the Spearman correlation of
    all pairwise cosine similarities of ``texts``, first ``dims`` values against all. A
    Matryoshka-trained model (Kusupati et al., "Matryoshka Representation Learning", NeurIPS
    2022) stays near 1 down to its trained sizes; a model trained at one size falls off."""
    # One forward pass: both widths are cut from the same raw vectors.
    raw = embed_texts(model, texts, dataclasses.replace(options, dims=None, normalize=False))
    full = _finish(raw, dataclasses.replace(options, dims=None, normalize=True))
    cut = _finish(raw, dataclasses.replace(options, normalize=True))
    upper = np.triu_indices(len(texts), k=1)
    a = (full @ full.T)[upper]
    b = (cut @ cut.T)[upper]
    ranks_a, ranks_b = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def probe_texts(count: int = 64) -> list[str]:
    """Real sentences every Python has: the first paragraph of the standard library's module
    docstrings (read with ``ast``, nothing imported), in file order."""
    import ast
    import sysconfig

    found: list[str] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        first = " ".join((doc or "").split("\n\n")[0].split())
        if len(first) >= 40:
            found.append(first)
        if len(found) >= count:
            break
    return found


def token_lengths(model: "SentenceTransformer", texts: Sequence[str]) -> list[int]:
    """Tokens of each text as the model's tokenizer makes them, special tokens included, before
    truncation: above ``model.max_seq_length`` the model reads only the beginning."""
    if not texts:
        return []
    encoded = model.tokenizer(
        list(texts),
        add_special_tokens=True,
        truncation=False,
        return_attention_mask=False,
        return_token_type_ids=False,
        return_length=True,
        verbose=False,  # the "longer than the maximum" warning is what this function measures
    )
    return [int(n) for n in encoded["length"]]


def _dimension(model: "SentenceTransformer", name: str = "the model") -> int:
    """The model's output dimension; ModelNotAvailable where its modules do not tell it."""
    # sentence-transformers 6 renamed get_sentence_embedding_dimension (now deprecated, with a
    # FutureWarning); 3.x-5.x have only the old name.
    getter = getattr(model, "get_embedding_dimension", None)
    dim = getter() if getter else model.get_sentence_embedding_dimension()
    if dim is None:
        raise ModelNotAvailable(f"cannot tell the output dimension of {name}")
    return dim


# ------------------------------------------------------------------------------ config reading


def _read_json(path: Path) -> dict[str, Any] | list[Any] | None:
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _max_positions(model_dir: Path) -> int | None:
    config = _read_json(model_dir / "config.json")
    if isinstance(config, dict) and isinstance(config.get("max_position_embeddings"), int):
        return config["max_position_embeddings"]
    return None


def _max_seq_length(model_dir: Path, options: EmbedOptions) -> int:
    """``options.max_seq_length`` checked against the position table, or the model's own
    (sentence_bert_config.json, as sentence-transformers reads it), or the position table."""
    positions = _max_positions(model_dir)
    if options.max_seq_length is not None:
        if positions is not None and options.max_seq_length > positions:
            raise ValueError(
                f"max_seq_length {options.max_seq_length} exceeds the {positions} positions of "
                f"{options.model}"
            )
        return options.max_seq_length
    st_config = _read_json(model_dir / "sentence_bert_config.json")
    if isinstance(st_config, dict) and isinstance(st_config.get("max_seq_length"), int):
        return st_config["max_seq_length"]
    if positions is not None:
        return positions
    raise ModelNotAvailable(f"cannot tell the max sequence length of {options.model}; set it")


# Modules that leave the vector's dimension as it is.
_SAME_DIM_MODULES = ("Normalize", "Dropout", "LayerNorm")
_LEGACY_POOLING_FLAGS = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def _dim_from_configs(model_dir: Path) -> int | None:
    """Output dimension from the last module that sets it (Dense, Pooling, Transformer), walking
    modules.json backwards; None when a module it does not know stands in the way."""
    modules = _read_json(model_dir / "modules.json")
    config = _read_json(model_dir / "config.json")
    hidden = config.get("hidden_size") if isinstance(config, dict) else None
    if not isinstance(modules, list):
        # A plain transformers checkpoint: sentence-transformers adds mean pooling.
        return hidden if isinstance(hidden, int) else None
    for module in reversed(modules):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        module_config = _read_json(model_dir / module.get("path", "") / "config.json")
        if kind in _SAME_DIM_MODULES:
            continue
        if kind == "Dense" and isinstance(module_config, dict):
            return module_config.get("out_features")
        if kind == "Pooling" and isinstance(module_config, dict):
            width = module_config.get("embedding_dimension",
                                      module_config.get("word_embedding_dimension"))
            mode = module_config.get("pooling_mode")
            if isinstance(mode, str):
                modes = 1
            elif isinstance(mode, list):
                modes = len(mode)
            else:
                modes = sum(bool(module_config.get(flag)) for flag in _LEGACY_POOLING_FLAGS) or 1
            return width * modes if isinstance(width, int) else None
        if kind == "Transformer":
            return hidden if isinstance(hidden, int) else None
        return None
    return None


def _special_tokens_count(model_dir: Path) -> int:
    """Tokens the tokenizer adds around every text ([CLS] and [SEP] for BERT: 2)."""
    if (model_dir / "tokenizer.json").is_file():
        from chunkline.sizers import HFTokenizer

        return HFTokenizer(f"hf:{model_dir}", model_dir / "tokenizer.json").special_tokens_count()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    return len(tokenizer("", add_special_tokens=True)["input_ids"])
