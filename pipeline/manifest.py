"""Finding and reading a run: :mod:`chunkline.index.manifest`, which reads without Beam so that a
search service can too. Re-exported here for the job's modules and every existing import."""

from chunkline.index.layout import LATEST, MANIFEST, TABLES
from chunkline.index.manifest import (Manifest, ManifestError, complete_runs, latest_run, load_manifest,
                                      resolve_run, table_files)

__all__ = ["LATEST", "MANIFEST", "TABLES", "Manifest", "ManifestError", "complete_runs", "latest_run",
           "load_manifest", "resolve_run", "table_files"]
