"""A sentence-transformers model run by ONNX Runtime: exported here from the local model
directory, never downloaded, and cached beside the model.

The export traces the whole sentence-transformers module chain (transformer, pooling, any
dense or normalize modules) with ``torch.onnx.export``, so the graph gives the same
``sentence_embedding`` as ``SentenceTransformer.forward``. ``int8`` is ONNX Runtime's dynamic
quantization (``onnxruntime.quantization.quantize_dynamic``): weights int8 per output channel,
activations quantized per call, the feed-forward output projections left in float32
(:func:`after_gelu`). Per-channel weights matter: with one scale per tensor the mean cosine to
float32 vectors fell to 0.94 on all-MiniLM-L6-v2, against 0.99 per channel.

:class:`OnnxSentenceEncoder` answers the part of ``SentenceTransformer``'s interface that
``chunkline.embedder`` calls (``tokenizer``, ``max_seq_length``, ``device``, ``forward``,
``get_embedding_dimension``), so passes by padded tokens work unchanged. Once the export is
cached, a BERT-family model (``chunkline.bert_encoder.light_plan``) runs without importing
transformers or sentence-transformers.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from chunkline.extras import require
from chunkline.options import default_threads
from chunkline.sizers import model_fingerprint

CACHE_ENV = "CHUNKLINE_MODEL_CACHE"
OPSET = 17


def cache_dirs(model_dir: Path) -> list[Path]:
    """Where exports are kept, in order of preference: a sibling of the model directory (the
    model's own files, and so its fingerprint, stay untouched), else the user's model cache."""
    fallback = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "chunkline" / "models")
    return [model_dir.parent / f"{model_dir.name}.chunkline-onnx", fallback / "onnx"]


def exported_model(model_dir: Path, dtype: str, torch_model: Callable[[], Any]) -> Path:
    """The ONNX file of ``model_dir`` in ``dtype`` (float32 or int8), exported on first use
    from ``torch_model()``, the float32 ``SentenceTransformer`` of that directory.

    Files are named by the model's fingerprint and written to a temporary name then renamed, so
    workers exporting at once each end with a complete file and a killed export leaves none.
    """
    if dtype not in ("float32", "int8"):
        raise ValueError(f"ONNX models are exported in float32 or int8, not {dtype}")
    name = f"model-{model_fingerprint(model_dir)}-{dtype}.onnx"
    for directory in cache_dirs(model_dir):
        if (directory / name).is_file():
            return directory / name
    problems = []
    for directory in cache_dirs(model_dir):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            return _export(model_dir, directory, name, dtype, torch_model)
        except OSError as exc:  # a read-only model directory (or a file in the way): the next place
            problems.append(f"{directory}: {exc}")
    raise PermissionError(f"cannot write an ONNX export of {model_dir}: {'; '.join(problems)}")


def _export(model_dir: Path, directory: Path, name: str, dtype: str,
            torch_model: Callable[[], Any]) -> Path:
    target = directory / name
    if dtype == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        source = exported_model(model_dir, "float32", torch_model)
        staged = _staging(directory)
        quantize_dynamic(str(source), str(staged), weight_type=QuantType.QInt8, per_channel=True,
                         nodes_to_exclude=after_gelu(str(source)))
        os.replace(staged, target)
        return target
    import torch

    # Exported in float32 whatever the loader gives: int8 is quantized from this graph.
    model = torch_model().to(torch.float32)
    names = list(model.tokenizer.model_input_names)
    sample = model.tokenizer(["an example sentence", "a second, longer example sentence"],
                             padding=True, return_tensors="pt")
    staged = _staging(directory)
    # The TorchScript exporter: the dynamo one needs onnxscript's converters and gives the same
    # graph for a BERT-style encoder.
    torch.onnx.export(
        _sentence_module(model, names).eval(), tuple(sample[n] for n in names), str(staged),
        input_names=names, output_names=["sentence_embedding"],
        dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names},
                      "sentence_embedding": {0: "batch"}},
        opset_version=OPSET, dynamo=False,
    )
    os.replace(staged, target)
    return target


def after_gelu(onnx_path: str, depth: int = 4) -> list[str]:
    """MatMul nodes that read a GELU's output (the feed-forward block's second projection).

    Its input has the widest range of any activation in a BERT layer (Bondarenko, Nagel and
    Blankevoort 2021, "Understanding and Overcoming the Challenges of Efficient Transformer
    Quantization"), so one dynamic int8 scale per call loses the most there. Kept in float32 on
    all-MiniLM-L6-v2: the worst cosine to float32 vectors over the demo's chunks rose from 0.969
    to 0.990, the mean from 0.993 to 0.996, for ~15 % of the int8 speed-up."""
    onnx = require("onnx", "onnx")

    graph = onnx.load(onnx_path, load_external_data=False).graph
    producer = {output: node for node in graph.node for output in node.output}

    def reads_gelu(tensor: str, left: int) -> bool:
        node = producer.get(tensor)
        if node is None or left == 0:
            return False
        if node.op_type in ("Erf", "Gelu", "FastGelu"):
            return True
        return any(reads_gelu(name, left - 1) for name in node.input)

    return [node.name for node in graph.node
            if node.op_type == "MatMul" and reads_gelu(node.input[0], depth)]


def _staging(directory: Path) -> Path:
    handle, path = tempfile.mkstemp(prefix=".export-", suffix=".onnx", dir=directory)
    os.close(handle)
    return Path(path)


def _sentence_module(model: Any, names: list[str]) -> Any:
    import torch

    class SentenceModule(torch.nn.Module):
        """Positional tensors in the tokenizer's input order -> the sentence embedding."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return self.model(dict(zip(names, tensors)))["sentence_embedding"]

    return SentenceModule()


class OnnxSentenceEncoder:
    """An exported sentence-transformers model on ONNX Runtime's CPU provider."""

    device = "cpu"

    def __init__(self, model_dir: Path, dtype: str, max_seq_length: int, dim: int,
                 torch_model: Callable[[], Any], threads: int | None = None) -> None:
        onnxruntime = require("onnx", "onnxruntime")
        from chunkline.bert_encoder import WordPieceTokenizer, light_plan

        path = exported_model(model_dir, dtype, torch_model)
        session_options = onnxruntime.SessionOptions()
        # Threads inside an operator; operators run one after another (a chain of layers has
        # nothing to run beside each other), so inter-op threads would only compete.
        session_options.intra_op_num_threads = threads or default_threads() or 0
        session_options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(path), session_options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.tokenizer: Any
        if light_plan(model_dir) is not None:
            # A model chunkline's BERT encoder reads: its tokenizer gives transformers' ids
            # (tests/test_bert_encoder.py) without importing transformers, ~4 s of a process.
            self.tokenizer = WordPieceTokenizer(model_dir / "tokenizer.json", max_seq_length)
        else:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self.max_seq_length = max_seq_length
        self.dim = dim
        self.path = path

    def forward(self, features: dict[str, Any]) -> dict[str, Any]:
        import torch

        feed = {name: features[name].cpu().numpy().astype(np.int64) for name in self.inputs}
        (vectors,) = self.session.run(["sentence_embedding"], feed)
        return {"sentence_embedding": torch.from_numpy(vectors)}

    def get_embedding_dimension(self) -> int:
        return self.dim
