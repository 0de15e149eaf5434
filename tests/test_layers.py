"""The layering the architecture promises, read from the import statements themselves."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "chunkline"


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in the file, at any depth (function bodies included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
    return found


def test_the_library_never_imports_beam_or_the_upper_layers() -> None:
    for path in LIBRARY.glob("*.py"):
        for module, _ in imports(path):
            top = module.split(".")[0]
            assert top not in {"apache_beam", "transforms", "pipeline"}, f"{path.name} imports {module}"


def test_library_modules_use_each_others_public_names_only() -> None:
    for path in LIBRARY.glob("*.py"):
        for module, names in imports(path):
            if module.startswith("chunkline."):
                private = [name for name in names if name.startswith("_")]
                assert not private, f"{path.name} imports private {private} from {module}"
