#!/usr/bin/env python3
"""Type-check the ``chunkline`` namespace as it is installed, with pyproject.toml's [tool.mypy].

Installed, the repository's pipeline/ and transforms/ folders are chunkline.pipeline and
chunkline.transforms (pyproject.toml's package-dir). The editable install maps them with an
import hook (setuptools' ``__editable___chunkline_*_finder``), which mypy never runs: it finds
modules by walking folders on its search path (mypy's docs, "How imports are found"), so from
the repository's root it would see ``pipeline`` and ``transforms`` as top-level packages and find
no ``chunkline.pipeline``. This script lays the namespace out as mypy must see it, in
.cache/typecheck/chunkline/: a symbolic link to each entry of chunkline/ and one to each of the
two folders, runs mypy there, and names every error by its file in the repository.

make lint checks the whole namespace: the library (chunkline/), the Beam stages
(chunkline.transforms) and the job (chunkline.pipeline).

    python .ci/typecheck.py                # make lint
    python .ci/typecheck.py --no-incremental   # mypy's own options after the script's name

Exit status: mypy's (0: no error).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / ".cache" / "typecheck"
# The folders installed inside the chunkline package (pyproject.toml's [tool.setuptools.package-dir]).
MAPPED = ("pipeline", "transforms")
# mypy names a file by its path from the folder it runs in: chunkline/pipeline/cli.py is pipeline/cli.py.
INSIDE = re.compile(rf"^chunkline/({'|'.join(MAPPED)})/", re.M)


def lay_out() -> None:
    """.cache/typecheck/chunkline/: links to chunkline/'s entries and to the mapped folders."""
    # rmtree unlinks the links without following them (shutil's docs): the linked files stay.
    shutil.rmtree(TREE, ignore_errors=True)
    package = TREE / "chunkline"
    package.mkdir(parents=True)
    for entry in sorted((ROOT / "chunkline").iterdir()):
        if entry.name != "__pycache__" and entry.name not in MAPPED:
            (package / entry.name).symlink_to(entry)
    for name in MAPPED:
        (package / name).symlink_to(ROOT / name)


def main() -> int:
    lay_out()
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(ROOT / ".cache" / "mypy"), "-p", "chunkline", *sys.argv[1:]]
    done = subprocess.run(command, cwd=TREE, capture_output=True, text=True)
    sys.stdout.write(INSIDE.sub(r"\1/", done.stdout))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
