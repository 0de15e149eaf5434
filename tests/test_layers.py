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
    for path in LIBRARY.rglob("*.py"):
        for module, _ in imports(path):
            top = module.split(".")[0]
            assert top not in {"apache_beam", "transforms", "pipeline"}, f"{path.relative_to(ROOT)} imports {module}"


def test_library_modules_use_each_others_public_names_only() -> None:
    for path in LIBRARY.rglob("*.py"):
        for module, names in imports(path):
            if module.startswith("chunkline."):
                private = [name for name in names if name.startswith("_")]
                assert not private, f"{path.relative_to(ROOT)} imports private {private} from {module}"


def module_name(path: Path) -> str:
    """``chunkline/context/writer.py`` -> ``chunkline.context.writer``; a package is its
    ``__init__.py``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_a_packages_modules_import_each_other_one_way_only() -> None:
    # Within each package of the library (chunkline/context/, ...) every import counts, at any
    # depth (under TYPE_CHECKING or in a function too): a module imported by one it imports is a
    # cycle, however it is deferred. A module of a package never imports the package itself,
    # whose __init__ re-exports it.
    for package in sorted(path.parent for path in LIBRARY.rglob("__init__.py") if path.parent != LIBRARY):
        graph = {module_name(path): path for path in package.glob("*.py")}
        edges = {
            name: {module for module, _ in imports(path) if module in graph and module != name}
            for name, path in graph.items()
        }
        package_name = module_name(package / "__init__.py")
        for name, targets in edges.items():
            assert name == package_name or package_name not in targets, f"{name} imports {package_name}"
        state: dict[str, str] = {}

        def visit(name: str, trail: list[str]) -> None:
            state[name] = "open"
            for target in sorted(edges[name]):
                assert state.get(target) != "open", "import cycle: " + " -> ".join([*trail, name, target])
                if target not in state:
                    visit(target, [*trail, name])
            state[name] = "done"

        for name in sorted(graph):
            if name not in state:
                visit(name, [])
