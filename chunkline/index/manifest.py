"""Finding and reading a run: ``OUTPUT/LATEST`` names the published run, ``manifest.json`` says
what it holds. Everything that reads a previous run (reuse, the publish guard, ``query``) goes
through here, so a malformed manifest is one clear error naming the file, never a traceback.

Beam-free (``chunkline.index.storage``): the job reads its previous run through here as a
search service does, and both read the same paths the same way."""

from __future__ import annotations

import json

from chunkline.index import storage
from chunkline.index.layout import LATEST, MANIFEST, TABLES
from chunkline.index.manifest_types import Manifest, ManifestError, parse
from chunkline.index.tables import live_files

__all__ = ["Manifest", "ManifestError", "complete_runs", "latest_run", "load_manifest", "resolve_run",
           "table_files"]


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
        if manifest.publishable:
            runs.append(run_dir)
    return sorted(runs, key=lambda path: path.rstrip("/").rsplit("/", 1)[-1], reverse=True)


def load_manifest(run_dir: str) -> Manifest:
    """The run's manifest, parsed and checked (``chunkline.index.manifest_types.parse``): a
    ManifestError naming the file when it is missing, not JSON, of a newer format, or has a
    field every reader relies on missing or malformed."""
    path = storage.join(run_dir, MANIFEST)
    try:
        data = json.loads(_read_text(path))
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: truncated or not JSON ({exc})") from None
    return parse(data, where=path, required=TABLES)


def table_files(run_dir: str, manifest: Manifest, table: str) -> list[str]:
    """Full paths of a table's files as the manifest lists them (never a glob: a stray file in
    the run directory is not part of the run). Only the paths: which of their rows are live is
    :func:`chunkline.index.tables.live_files`'s to say, and :func:`chunkline.index.tables.read_table`
    reads only those."""
    return [file.path for file in live_files(run_dir, manifest, table)]
