"""A BERT-family sentence-transformers checkpoint run with torch and the ``tokenizers`` library
alone, without importing transformers or sentence-transformers.

Importing those two took 4.6-4.8 s of every process that loads a model, a third of a one-file
``chunkline run`` (bench/RESULTS.md, "A run's fixed cost"): transformers 5's ``modeling_utils``
pulls in ``torch.distributed.tensor``, SymPy and ``torch._dynamo``, and sentence-transformers
6's ``__init__`` its trainers and scikit-learn. The model itself is small: BERT's encoder
(Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL 2019; the layer as in Vaswani et al. 2017, post-LayerNorm) followed by
sentence-transformers' Pooling and Normalize modules (Reimers and Gurevych,
"Sentence-BERT", EMNLP 2019).

:func:`light_plan` reads a model directory's JSON files and says whether this module can run it
exactly: ``modules.json`` with Transformer -> Pooling (mean or CLS) -> optional Normalize, a
``bert`` config with exact GELU and absolute positions, float32 weights in one file, a
``tokenizer.json``, no prompts. Anything else, or weights that do not load into these modules
key for key, is left to sentence-transformers (``chunkline.embedder.load_model`` falls back):
this module never guesses what an unknown option would have done.

:class:`BertSentenceEncoder` answers the part of ``SentenceTransformer``'s interface that
chunkline calls (``encode``, ``forward``, ``tokenizer``, ``max_seq_length``, ``device``,
``get_embedding_dimension``, indexing its modules: ``model[0].auto_model`` for late chunking)
and mirrors what sentence-transformers 6.3 and transformers 5 compute, step for step, so that
its vectors equal theirs (tests/test_bert_encoder.py holds them to 1e-5 in float32).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, Sequence

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torch import nn
from torch.nn import functional

from chunkline.extras import require


class NotLight(ValueError):
    """The weights did not load into the light modules key for key: sentence-transformers is
    used instead."""


# ------------------------------------------------------------------------ what can be run here


@dataclass(frozen=True)
class BertConfig:
    """The fields of a transformers ``config.json`` that BERT's encoder reads."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    pad_token_id: int


@dataclass(frozen=True)
class LightPlan:
    """What :func:`light_plan` read: enough to build the model without looking again."""

    model_dir: Path
    config: BertConfig
    pooling: Literal["mean", "cls"]
    normalize: bool
    weights: Path


_ST = "sentence_transformers."
# The keys sentence-transformers' own files may hold that change nothing this module computes.
_ST_CONFIG_KEYS = {"__version__", "prompts", "default_prompt_name", "similarity_fn_name", "model_type"}
_TRANSFORMER_KEYS = {"max_seq_length", "do_lower_case"}
# Pooling's config, both spellings (sentence-transformers 6 reads the legacy flags too).
_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_POOLING_KEYS = {"word_embedding_dimension", "embedding_dimension", "pooling_mode", "include_prompt",
                 *_POOLING_FLAGS}
# A BertTokenizer's tokenizer_config.json fields that transformers applies over tokenizer.json's
# normalizer; where they disagree with it, the two libraries would tokenize differently.
_NORMALIZER_FIELDS = {"do_lower_case": "lowercase", "strip_accents": "strip_accents",
                      "tokenize_chinese_chars": "handle_chinese_chars"}


def light_plan(model_dir: Path) -> LightPlan | None:
    """The plan to run ``model_dir`` here, or None where sentence-transformers must: read from
    its JSON files only (no torch, no weights)."""
    try:
        return _plan(model_dir)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _plan(model_dir: Path) -> LightPlan | None:
    modules = _read(model_dir / "modules.json")
    if not isinstance(modules, list) or len(modules) not in (2, 3):
        return None
    kinds = [str(m["type"]) for m in modules]
    if not all(kind.startswith(_ST) for kind in kinds):
        return None
    short = [kind.rsplit(".", 1)[-1] for kind in kinds]
    if short[:2] != ["Transformer", "Pooling"] or short[2:] not in ([], ["Normalize"]):
        return None
    if modules[0].get("path", "") != "":
        return None
    st_config = _read(model_dir / "config_sentence_transformers.json") or {}
    if set(st_config) - _ST_CONFIG_KEYS or st_config.get("prompts") or st_config.get("default_prompt_name"):
        return None  # a prompt would be prepended by encode
    transformer = _read(model_dir / "sentence_bert_config.json") or {}
    if set(transformer) - _TRANSFORMER_KEYS or transformer.get("do_lower_case"):
        return None  # model_args, tokenizer_args, ...: options only sentence-transformers applies
    config = _bert_config(_read(model_dir / "config.json"))
    if config is None:
        return None
    pooling = _pooling(_read(model_dir / modules[1]["path"] / "config.json"), config.hidden_size)
    if pooling is None or not _tokenizer_agrees(model_dir):
        return None
    weights = _weights(model_dir)
    if weights is None:
        return None
    return LightPlan(model_dir, config, pooling, len(modules) == 3, weights)


def _bert_config(config: Any) -> BertConfig | None:
    if not isinstance(config, dict) or config.get("model_type") != "bert":
        return None
    # Exact (erf) GELU as BERT's reference code; "gelu_new" and others are left to transformers.
    if config.get("hidden_act", "gelu") != "gelu":
        return None
    if config.get("position_embedding_type", "absolute") != "absolute":
        return None
    if config.get("is_decoder") or config.get("add_cross_attention"):
        return None
    # transformers 5 loads a checkpoint in the dtype its config names; only float32 is run here.
    if config.get("torch_dtype", config.get("dtype")) not in (None, "float32"):
        return None
    fields: dict[str, Any] = {name: config.get(name, default) for name, default in
              (("vocab_size", None), ("hidden_size", None), ("num_hidden_layers", None),
               ("num_attention_heads", None), ("intermediate_size", None),
               ("max_position_embeddings", None), ("type_vocab_size", 2),
               ("layer_norm_eps", 1e-12), ("pad_token_id", 0))}
    if any(not isinstance(value, (int, float)) or isinstance(value, bool) for value in fields.values()):
        return None
    built = BertConfig(**fields)
    if built.hidden_size % built.num_attention_heads:
        return None
    return built


def _pooling(config: Any, hidden: int) -> Literal["mean", "cls"] | None:
    if not isinstance(config, dict) or set(config) - _POOLING_KEYS:
        return None
    width = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    if width != hidden or config.get("include_prompt", True) is not True:
        return None
    mode = config.get("pooling_mode")
    if mode is None:  # the legacy flags, resolved as sentence-transformers does (none: mean)
        modes = [name for flag, name in _POOLING_FLAGS.items() if config.get(flag)] or ["mean"]
    else:
        modes = [mode] if isinstance(mode, str) else list(mode)
    if modes == ["mean"]:
        return "mean"
    if modes == ["cls"]:
        return "cls"
    return None


def _tokenizer_agrees(model_dir: Path) -> bool:
    tokenizer = _read(model_dir / "tokenizer.json")
    if not isinstance(tokenizer, dict):
        return False
    settings = _read(model_dir / "tokenizer_config.json") or {}
    if settings.get("tokenizer_class", "BertTokenizer") not in ("BertTokenizer", "BertTokenizerFast"):
        return False
    normalizer = tokenizer.get("normalizer") or {}
    for field, key in _NORMALIZER_FIELDS.items():
        if field in settings and settings[field] is not None:
            if normalizer.get("type") != "BertNormalizer" or normalizer.get(key) != settings[field]:
                return False
    # transformers adds the tokens tokenizer_config.json declares to those of tokenizer.json; one
    # missing there, or under another id, would be split into word pieces here.
    added = {token["content"]: token["id"] for token in tokenizer.get("added_tokens") or []}
    declared = settings.get("added_tokens_decoder") or {}
    return all(added.get(token.get("content")) == int(token_id) for token_id, token in declared.items())


def _weights(model_dir: Path) -> Path | None:
    """The one weights file, as transformers prefers it (safetensors first); sharded
    checkpoints are left to it."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (model_dir / name).is_file():
            return model_dir / name
    return None


# ------------------------------------------------------------------------------------ the model


class _Embeddings(nn.Module):
    """Word + position + token-type embeddings, LayerNorm (BERT paper, section 3.2)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size,
                                            padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        # The sum in transformers' order (words + types, then positions): float addition is not
        # associative, and bfloat16 shows it.
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(positions)
        return self.LayerNorm(embeddings)


class _Linear(nn.Module):
    """A dense layer, and the LayerNorm after its residual where the layer has one: the module
    names of transformers' checkpoints (``dense``, ``LayerNorm``), so weights load by name."""

    def __init__(self, inputs: int, outputs: int, eps: float | None) -> None:
        super().__init__()
        self.dense = nn.Linear(inputs, outputs)
        if eps is not None:
            self.LayerNorm = nn.LayerNorm(outputs, eps=eps)


class _SelfAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)


class _Attention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = _SelfAttention(config)
        self.output = _Linear(config.hidden_size, config.hidden_size, config.layer_norm_eps)


class _Layer(nn.Module):
    """One post-LayerNorm transformer layer: attention, then the GELU feed-forward block, each
    added to its input and normalized (Vaswani et al. 2017, as BERT uses it)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = _Attention(config)
        self.intermediate = _Linear(config.hidden_size, config.intermediate_size, None)
        self.output = _Linear(config.intermediate_size, config.hidden_size, config.layer_norm_eps)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        attention = self.attention.self
        batch, length, width = hidden.shape
        shape = (batch, length, attention.heads, width // attention.heads)
        query, key, value = (projection(hidden).view(shape).transpose(1, 2) for projection in
                             (attention.query, attention.key, attention.value))
        # PyTorch's fused attention with a boolean mask (True: attend), as transformers 5's
        # "sdpa" implementation calls it; scale 1/sqrt(head width) is its default.
        context = functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)
        context = context.transpose(1, 2).reshape(batch, length, width)
        out = self.attention.output
        hidden = out.LayerNorm(out.dense(context) + hidden)
        inner = functional.gelu(self.intermediate.dense(hidden))
        return self.output.LayerNorm(self.output.dense(inner) + hidden)


class _Encoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(config) for _ in range(config.num_hidden_layers))


class EncoderOutput(NamedTuple):
    """What transformers' ``BertModel`` returns that chunkline reads: the last hidden state."""

    last_hidden_state: torch.Tensor


class BertModel(nn.Module):
    """BERT's encoder (no pooler: sentence-transformers reads the last hidden state), with
    transformers' parameter names so a checkpoint's ``state_dict`` loads as it is."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Encoder(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> EncoderOutput:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        hidden = self.embeddings(input_ids, token_type_ids)
        mask = None
        # No mask where nothing is padded, as transformers 5 passes none then (its
        # _ignore_bidirectional_mask_sdpa): SDPA may then take its flash kernel, whose sums
        # differ in the last bits. While tracing (the ONNX export) the mask is always kept.
        if attention_mask is not None and (torch.jit.is_tracing() or not bool(attention_mask.all())):
            batch, length = attention_mask.shape
            mask = attention_mask.bool()[:, None, None, :].expand(batch, 1, length, length)
        for layer in self.encoder.layer:
            hidden = layer(hidden, mask)
        return EncoderOutput(hidden)


class Transformer(nn.Module):
    """sentence-transformers' first module: features in, ``token_embeddings`` added."""

    def __init__(self, model: BertModel) -> None:
        super().__init__()
        self.auto_model = model

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        output = self.auto_model(features["input_ids"], features.get("attention_mask"),
                                 features.get("token_type_ids"))
        return {**features, "token_embeddings": output.last_hidden_state}


class Pooling(nn.Module):
    """sentence-transformers' Pooling, mean or CLS, computed as its ``_forward_padded`` does:
    a bfloat16 or float16 mean summed in float32 and cast back."""

    def __init__(self, mode: Literal["mean", "cls"]) -> None:
        super().__init__()
        self.pooling_mode = mode

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        tokens, mask = features["token_embeddings"], features["attention_mask"]
        if self.pooling_mode == "cls":
            # Padding is on the right, so the first position is [CLS] (BERT paper, section 3).
            return {**features, "sentence_embedding": tokens[:, 0]}
        wide = torch.float32 if tokens.dtype in (torch.float16, torch.bfloat16) else tokens.dtype
        weights = mask.unsqueeze(-1).to(tokens.dtype)
        total = (tokens * weights).sum(dim=1, dtype=wide)
        count = torch.clamp(weights.sum(dim=1, dtype=wide), min=1e-9)
        return {**features, "sentence_embedding": (total / count).to(tokens.dtype)}


class Normalize(nn.Module):
    """sentence-transformers' Normalize: unit L2 norm."""

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {**features,
                "sentence_embedding": functional.normalize(features["sentence_embedding"], p=2, dim=-1)}


# -------------------------------------------------------------------------------- the tokenizer


class BatchTokens(dict):
    """``input_ids``, ``token_type_ids``, ``attention_mask`` (and ``length`` when asked): lists
    of lists, or tensors with ``return_tensors="pt"``; a dict, as transformers' BatchEncoding."""


class WordPieceTokenizer:
    """The model's ``tokenizer.json`` through the ``tokenizers`` library, answering the calls of
    transformers' fast tokenizer that chunkline makes (``__call__``, ``pad``,
    ``backend_tokenizer``, ``pad_token_id``, ``model_input_names``, ``model_max_length``).

    Truncation and padding are per call, as transformers applies them: a tokenizer.json may set
    both (all-MiniLM-L6-v2's truncates and pads at 128), so they are switched off here and each
    call truncates its own encodings. No state changes after construction, so threads may share
    it."""

    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(self, tokenizer_json: Path, model_max_length: int) -> None:
        tokenizer = Tokenizer.from_file(str(tokenizer_json))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.backend_tokenizer = tokenizer
        self.model_max_length = model_max_length
        self._specials = tokenizer.num_special_tokens_to_add(is_pair=False)
        pad = _read(tokenizer_json.parent / "special_tokens_map.json") or {}
        pad_token = pad.get("pad_token", "[PAD]")
        pad_token = pad_token.get("content") if isinstance(pad_token, dict) else pad_token
        self.pad_token_id = tokenizer.token_to_id(pad_token) if pad_token else None

    def __call__(self, texts: Sequence[str], *, add_special_tokens: bool = True,
                 truncation: bool | str = False, max_length: int | None = None,
                 padding: bool = False, return_tensors: str | None = None,
                 return_attention_mask: bool = True, return_token_type_ids: bool = True,
                 return_length: bool = False, verbose: bool = True) -> BatchTokens:
        encodings = self.encode(texts, add_special_tokens=add_special_tokens,
                                max_length=(max_length or self.model_max_length) if truncation else None)
        batch = BatchTokens(input_ids=[e.ids for e in encodings])
        if return_token_type_ids:
            batch["token_type_ids"] = [e.type_ids for e in encodings]
        if return_attention_mask:
            batch["attention_mask"] = [e.attention_mask for e in encodings]
        if return_length:
            batch["length"] = [len(e.ids) for e in encodings]
        return self.pad(batch, return_tensors=return_tensors) if padding else batch

    def encode(self, texts: Sequence[str], *, add_special_tokens: bool = True,
               max_length: int | None = None) -> list[Encoding]:
        """Encodings of ``texts``, each cut to ``max_length`` tokens special tokens included:
        the content truncated from the right, then the special tokens added, which is what
        transformers' ``truncation="longest_first"`` does to a single text."""
        if max_length is None:
            return self.backend_tokenizer.encode_batch_fast(list(texts), add_special_tokens=add_special_tokens)
        encodings = self.backend_tokenizer.encode_batch(list(texts), add_special_tokens=False)
        keep = max(max_length - (self._specials if add_special_tokens else 0), 0)
        for encoding in encodings:
            encoding.truncate(keep)
        if not add_special_tokens:
            return encodings
        return [self.backend_tokenizer.post_process(e, add_special_tokens=True) for e in encodings]

    def pad(self, batch: dict[str, list[list[int]]], padding: bool = True,
            return_tensors: str | None = None) -> BatchTokens:
        """Rows padded on the right to the longest (pad id, type 0, mask 0), with an attention
        mask; tensors with ``return_tensors="pt"``."""
        rows = batch["input_ids"]
        width = max((len(row) for row in rows), default=0)
        pad = self.pad_token_id or 0
        out = BatchTokens(input_ids=[list(row) + [pad] * (width - len(row)) for row in rows])
        if "token_type_ids" in batch:
            out["token_type_ids"] = [list(row) + [0] * (width - len(row)) for row in batch["token_type_ids"]]
        out["attention_mask"] = [[1] * len(row) + [0] * (width - len(row)) for row in rows]
        for name, value in batch.items():
            out.setdefault(name, value)
        if return_tensors == "pt":
            return BatchTokens({name: torch.tensor(value, dtype=torch.long) for name, value in out.items()})
        if return_tensors is not None:
            raise ValueError(f"return_tensors {return_tensors!r}: only 'pt' is answered here")
        return out


# ----------------------------------------------------------------------------- the whole model


class BertSentenceEncoder(nn.Sequential):
    """Transformer -> Pooling -> [Normalize], as sentence-transformers chains them, with its
    tokenizer; built by :func:`load_light`."""

    def __init__(self, modules: Sequence[nn.Module], tokenizer: WordPieceTokenizer) -> None:
        super().__init__(*modules)
        self.tokenizer = tokenizer

    @property
    def max_seq_length(self) -> int:
        return self.tokenizer.model_max_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        self.tokenizer.model_max_length = value

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        for module in self:
            features = module(features)
        return features

    def get_embedding_dimension(self) -> int:
        return int(self[0].auto_model.config.hidden_size)

    def encode(self, texts: Sequence[str], *, batch_size: int = 32, convert_to_numpy: bool = True,
               show_progress_bar: bool = False, normalize_embeddings: bool = False) -> np.ndarray:
        """float32 ``[len(texts), dim]``, as ``SentenceTransformer.encode``: texts sorted by
        length (characters, longest first), batches of ``batch_size`` padded to their longest,
        truncated at ``max_seq_length``; rows in input order."""
        order = np.argsort([-len(text) for text in texts])
        out = np.zeros((len(texts), self.get_embedding_dimension()), dtype=np.float32)
        device = self.device
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                rows = order[start : start + batch_size]
                features = self.tokenizer([texts[i] for i in rows], truncation=True, padding=True,
                                          return_tensors="pt")
                vectors = self.forward({k: v.to(device) for k, v in features.items()})["sentence_embedding"]
                if normalize_embeddings:
                    vectors = functional.normalize(vectors, p=2, dim=1)
                out[rows] = vectors.float().cpu().numpy()
        return out


def load_light(plan: LightPlan, *, max_seq_length: int, device: str = "cpu") -> BertSentenceEncoder:
    """The model of ``plan`` in float32 on ``device``, in eval mode. Raises :class:`NotLight`
    when the weights are not exactly this architecture's (a missing, extra or misshapen tensor),
    for the caller to fall back to sentence-transformers."""
    bert = BertModel(plan.config)
    state = _state_dict(plan.weights)
    try:
        # assign: the loaded tensors become the parameters, where a copy into the freshly built
        # ones would write 90 MB again (~0.2 s of a one-file run on 2 loaded cores).
        bert.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise NotLight(f"{plan.weights}: {exc}") from None
    modules: list[nn.Module] = [Transformer(bert), Pooling(plan.pooling)]
    if plan.normalize:
        modules.append(Normalize())
    tokenizer = WordPieceTokenizer(plan.model_dir / "tokenizer.json", max_seq_length)
    return BertSentenceEncoder(modules, tokenizer).to(device).eval()


# What a BERT checkpoint may hold beside the encoder: the pooler (sentence-transformers reads the
# last hidden state, not it), the pre-training heads, and buffers transformers rebuilds itself.
_UNUSED = ("pooler.", "cls.", "embeddings.position_ids", "embeddings.token_type_ids")


def _state_dict(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        state = require("embed", "safetensors.torch").load_file(str(path))
    else:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    if any(not isinstance(t, torch.Tensor) or (t.is_floating_point() and t.dtype != torch.float32)
           for t in state.values()):
        raise NotLight(f"{path}: not all float32 tensors")
    # A BertForX checkpoint prefixes the encoder with its base_model_prefix, "bert.".
    if all(name.startswith("bert.") or name.startswith("cls.") for name in state):
        state = {name.removeprefix("bert."): t for name, t in state.items()}
    return {name: t for name, t in state.items() if not name.startswith(_UNUSED)}
