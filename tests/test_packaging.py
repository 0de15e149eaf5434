"""What `pip install chunkline` puts on a user's sys.path: the one package ``chunkline``; the
repository's pipeline/ and transforms/ folders inside it, as chunkline.pipeline and
chunkline.transforms, so a user's own ``pipeline`` or ``transforms`` module stays theirs."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"chunkline": ROOT / "chunkline", "chunkline.pipeline": ROOT / "pipeline",
           "chunkline.transforms": ROOT / "transforms"}


def declared_packages() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]


def test_every_package_folder_is_declared_under_chunkline() -> None:
    """pyproject.toml lists the packages by name (setuptools' discovery would find pipeline and
    transforms as top-level packages): a new subpackage must be listed too."""
    found = set()
    for name, folder in FOLDERS.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            found.add(".".join((name, *parts)))
    assert sorted(found) == sorted(declared_packages())


@pytest.mark.slow  # builds a wheel (setuptools in an isolated build environment)
def test_the_wheel_installs_only_the_chunkline_namespace(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path),
                           str(ROOT)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    wheel = next(tmp_path.glob("chunkline-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"chunkline"}
    # The folders' modules are there under their package names, and the console script's target.
    assert {"chunkline/pipeline/cli.py", "chunkline/transforms/write.py", "chunkline/pipeline/sync/lance.py",
            "chunkline/index/search.py"} <= set(names)
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    assert "chunkline = chunkline.pipeline.cli:command" in zipfile.ZipFile(wheel).read(entry_points).decode()
