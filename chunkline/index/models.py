"""The embedding model a run names, as a local directory a search can load: a model stored at a
``gs://`` URI is copied once to a local cache, because sentence-transformers and tokenizers
read local files only.

What ``transforms/model_cache.py`` does for the job's workers, without Beam, and into the same
cache: the copy is named by a digest of the URI and the listing (paths, sizes, modification
times, as Beam's ``FileSystems.match`` gives them, which ``storage.list_files`` reproduces), so
a worker and a search on one machine share one copy, and a model replaced at the same URI is
fetched again. A copy is marked complete only after every file is in place: a process killed
mid-copy never leaves a half model behind that a later one would trust.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from chunkline.index import storage

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
    listing = sorted(storage.list_files(base + "/"))
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
            destination = staging / path[len(base) + 1:]
            destination.parent.mkdir(parents=True, exist_ok=True)
            storage.download(path, str(destination))  # bytes as stored: a .gz file is not inflated
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
