"""Finding and reading a run: ``OUTPUT/LATEST`` names the published run, ``manifest.json`` says
what it holds. Everything that reads a previous run (reuse, the publish guard, ``query``) goes
through here, so a malformed manifest is one clear error naming the file, never a traceback.

Beam-free (``chunkline.index.storage``): the job reads its previous run through here as a
search service does, and both read the same paths the same way."""

from __future__ import annotations

import json
import math
from typing import Any

from chunkline.index import storage
from chunkline.index.layout import LATEST, MANIFEST, TABLES
from chunkline.index.tables import listing_problem, live_files, manifest_format, table_names


class ManifestError(ValueError):
    """A manifest, or the LATEST pointer to one, is missing or malformed; the message names the
    file."""


def _read_text(path: str) -> str:
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - a directory, no permission: each filesystem its own
        raise ManifestError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text ({exc})") from None


def latest_run(output: str) -> str | None:
    """The run directory ``output/LATEST`` names, or None when ``output`` has no LATEST (nothing
    published yet). A LATEST naming a run without a manifest is an error."""
    latest = storage.join(output, LATEST)
    if not storage.exists(latest):
        return None
    run_id = _read_text(latest).strip()
    if not run_id or "/" in run_id or run_id in (".", ".."):
        raise ManifestError(f"{latest}: does not name a run (holds {run_id!r})")
    run_dir = storage.join(output, run_id)
    if not storage.exists(storage.join(run_dir, MANIFEST)):
        raise ManifestError(f"{latest} names {run_id!r}, which has no {MANIFEST}")
    return run_dir


def resolve_run(path: str) -> str | None:
    """``path`` itself when it is a run directory (holds a manifest), else the run its LATEST
    names; None when it is neither."""
    if storage.exists(storage.join(path, MANIFEST)):
        return path
    return latest_run(path)


def complete_runs(output: str) -> list[str]:
    """The run directories of ``output`` that could have been published (a valid manifest,
    reconciled, not held back), newest first (run ids begin with their UTC start time). What a
    lost LATEST leaves behind."""
    try:
        matched = storage.files_named(output, MANIFEST)
    except Exception:  # noqa: BLE001 - an output that cannot be listed has no runs to offer
        return []
    runs = []
    for found in matched:
        run_dir = found[: -len(MANIFEST) - 1]
        try:
            manifest = load_manifest(run_dir)
        except (ManifestError, FileNotFoundError):
            continue
        if manifest.get("reconciled", True) and not manifest.get("held_back"):
            runs.append(run_dir)
    return sorted(runs, key=lambda path: path.rstrip("/").rsplit("/", 1)[-1], reverse=True)


def load_manifest(run_dir: str) -> dict[str, Any]:
    """The run's manifest, checked for the fields every reader relies on."""
    path = storage.join(run_dir, MANIFEST)
    try:
        manifest = json.loads(_read_text(path))
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: truncated or not JSON ({exc})") from None
    problem = _problem(manifest)
    if problem:
        raise ManifestError(f"{path}: not a chunkline manifest: {problem}")
    return manifest


def _problem(manifest: Any) -> str | None:
    if not isinstance(manifest, dict):
        return f"expected a JSON object, got {type(manifest).__name__}"
    if not isinstance(manifest.get("run_id"), str):
        return "run_id is missing or not a string"
    problem = listing_problem(manifest, TABLES)
    if problem:
        return problem
    counts = manifest.get("counts")
    if not isinstance(counts, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()):
        return "counts is missing or not an object of non-negative integers"
    missing = [name for name in ("documents", "kept", "chunks") if name not in counts]
    if missing:
        return f"counts has no {', '.join(missing)}"
    model = manifest.get("model")
    if model is not None:
        if not isinstance(model, dict):
            return "model is not an object"
        dim = model.get("dim")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            return "model.dim is missing or not a positive integer"
    if not isinstance(manifest.get("embedding_signature", ""), str):
        return "embedding_signature is not a string"
    if not isinstance(manifest.get("config"), dict):
        return "config is missing or not an object"
    return _bm25_problem(manifest.get("bm25"), manifest)


def _bm25_problem(bm25: Any, manifest: dict) -> str | None:
    """What a query's IDF and the next run's reference length read from ``bm25``, and the
    terms table a query and a sync read its document frequencies from."""
    if bm25 is None:
        return None
    if not isinstance(bm25, dict):
        return "bm25 is not an object"
    if "terms" not in table_names(manifest):
        listing = "tables" if manifest_format(manifest) >= 2 else "files"
        return f"{listing}.terms is missing (the run has BM25 statistics)"
    chunks = bm25.get("chunks")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 0:
        return "bm25.chunks is missing or not a non-negative integer"
    reference = bm25.get("reference_avgdl")
    if reference is not None and (isinstance(reference, bool) or not isinstance(reference, (int, float))
                                  or not math.isfinite(reference) or reference < 0):
        return "bm25.reference_avgdl is not a non-negative number"
    return None


def table_files(run_dir: str, manifest: dict[str, Any], table: str) -> list[str]:
    """Full paths of a table's files as the manifest lists them (never a glob: a stray file in
    the run directory is not part of the run). Only the paths: which of their rows are live is
    :func:`chunkline.index.tables.live_files`'s to say, and :func:`chunkline.index.tables.read_table`
    reads only those."""
    return [file.path for file in live_files(run_dir, manifest, table)]
