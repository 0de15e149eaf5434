"""The package's version has one home, pyproject.toml, and every manifest records it."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import chunkline

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_the_installed_distributions() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chunkline.__version__ == metadata.version("chunkline") == declared
