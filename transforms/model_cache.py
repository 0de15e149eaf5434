"""A model given as a Beam filesystem URI (``gs://bucket/models/minilm``) copied once per worker
to a local directory, because sentence-transformers and tokenizers read local files only.

The cache directory is named by the URI and the listing (paths, sizes, modification times), so a
model replaced at the same URI is fetched again, and a finished copy is marked complete only
after every file is in place: a worker killed mid-copy never leaves a half model behind that a
later worker would trust.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

CACHE_ENV = "CHUNKLINE_MODEL_CACHE"
COMPLETE = ".chunkline-complete"


def is_remote(model: str) -> bool:
    return "://" in model


def default_cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "chunkline" / "models")


def local_model_dir(model: str, cache_root: str | Path | None = None) -> str:
    """``model`` itself when it is local (a directory or a packaged name); else the local copy of
    the remote model directory, fetched on first use."""
    if not is_remote(model):
        return model
    base = model.rstrip("/")
    listing = sorted(
        (m.path, m.size_in_bytes, m.last_updated_in_seconds)
        for m in FileSystems.match([base + "/**"])[0].metadata_list
    )
    if not listing:
        raise FileNotFoundError(f"no model files under {model}")
    digest = hashlib.sha256(repr((base, listing)).encode()).hexdigest()[:20]
    root = Path(cache_root) if cache_root else default_cache_root()
    target = root / digest
    if (target / COMPLETE).is_file():
        return str(target)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".fetch-", dir=root))
    try:
        for path, _, _ in listing:
            relative = path[len(base) + 1:]
            destination = staging / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            # Never decompress: a model file ending in .gz is bytes to copy, not a stream to inflate.
            source = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
            with source, open(destination, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
        (staging / COMPLETE).write_text(model + "\n")
        try:
            staging.rename(target)
        except OSError:
            # Another process on this machine finished first; its copy is equally complete.
            if not (target / COMPLETE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(target)


def local_tokenizer_spec(spec: str) -> str:
    """An ``hf:`` tokenizer spec naming a remote model directory -> the same spec on this
    worker's local copy; any other spec unchanged."""
    kind, _, argument = spec.partition(":")
    if kind == "hf" and is_remote(argument):
        return f"hf:{local_model_dir(argument)}"
    return spec
