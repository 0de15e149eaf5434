"""The layering the architecture promises, read from the import statements themselves.

Every import counts, at any depth: inside functions and under ``if TYPE_CHECKING:`` too, since
a lazy import hides a dependency without removing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "chunkline"


def imports(source: str, module: str = "", is_package: bool = False) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``source``, at any depth (function bodies and
    TYPE_CHECKING blocks included); relative imports are resolved against ``module``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([target] if target else []))
            found.append((target, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
    return found


def library_modules(root: Path = LIBRARY) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) of every module under ``root``; a package's
    ``__init__.py`` is the module named after the package."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def private_imports(source: str, module: str = "", is_package: bool = False) -> list[str]:
    """Each import in ``source`` of a private name (leading underscore) from a chunkline
    module, as ``"module._name"``."""
    return [
        f"{target}.{name}"
        for target, names in imports(source, module, is_package)
        if target.split(".")[0] == "chunkline"
        for name in names
        if name.startswith("_")
    ]


def import_graph(
    modules: dict[str, str], packages: frozenset[str] = frozenset()
) -> dict[str, set[str]]:
    """module -> the modules of ``modules`` (name -> source) it imports. ``from pkg import x``
    is an edge to ``pkg.x`` where that is a module, else to ``pkg``."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, source in modules.items():
        for target, names in imports(source, name, name in packages):
            if not names:
                if target in modules:
                    graph[name].add(target)
                continue
            for imported in names:
                submodule = f"{target}.{imported}"
                if submodule in modules:
                    graph[name].add(submodule)
                elif target in modules:
                    graph[name].add(target)
        graph[name].discard(name)
    return graph


def import_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports in ``graph`` as ``[a, b, ..., a]``, or None when there is none
    (depth-first search, a node on the current path reached again closes a circle)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            following = next(stack[-1], None)
            if following is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
                continue
            if following in on_path:
                return path[path.index(following):] + [following]
            if following not in done:
                path.append(following)
                on_path.add(following)
                stack.append(iter(sorted(graph.get(following, ()))))
    return None


def _library() -> tuple[dict[str, str], frozenset[str]]:
    found = library_modules()
    sources = {name: path.read_text(encoding="utf-8") for name, (path, _) in found.items()}
    return sources, frozenset(name for name, (_, package) in found.items() if package)


def test_the_library_never_imports_beam_or_the_upper_layers() -> None:
    sources, packages = _library()
    for name, source in sources.items():
        for module, _ in imports(source, name, name in packages):
            upper = module.split(".")[0] in {"apache_beam", "transforms", "pipeline"} or \
                module.split(".")[:2] in (["chunkline", "pipeline"], ["chunkline", "transforms"])
            assert not upper, f"{name} imports {module}"


def test_library_modules_use_each_others_public_names_only() -> None:
    sources, packages = _library()
    assert "chunkline.sizers.base" in sources and "chunkline.splitting" in sources
    found = {
        name: private_imports(source, name, name in packages) for name, source in sources.items()
    }
    assert not {name: names for name, names in found.items() if names}


def test_the_private_import_check_finds_one() -> None:
    source = (
        "from chunkline.splitting.core import Chunk\n"
        "def f():\n"
        "    from chunkline.sizers.tiktoken import _cut_masks\n"
        "if TYPE_CHECKING:\n"
        "    from .base import _hidden\n"
    )
    assert private_imports(source, "chunkline.sizers.hf") == [
        "chunkline.sizers.tiktoken._cut_masks", "chunkline.sizers.base._hidden"
    ]
    assert private_imports("from numpy import _private\n") == []


def test_the_library_import_graph_has_no_circle() -> None:
    sources, packages = _library()
    graph = import_graph(sources, packages)
    assert graph["chunkline"] >= {"chunkline.sizers", "chunkline.splitting.text"}
    circle = import_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_circle_check_finds_and_names_one() -> None:
    modules = {
        "chunkline.a": "from chunkline.b import x\n",
        "chunkline.b": "def f():\n    import chunkline.pkg.c\n",
        "chunkline.pkg": "from chunkline.pkg import c\n",  # a package's own __init__
        "chunkline.pkg.c": "if TYPE_CHECKING:\n    from chunkline.a import y\n",
        "chunkline.d": "from chunkline.a import x\n",
    }
    graph = import_graph(modules, frozenset({"chunkline.pkg"}))
    assert graph["chunkline.pkg"] == {"chunkline.pkg.c"}
    assert import_circle(graph) == ["chunkline.a", "chunkline.b", "chunkline.pkg.c", "chunkline.a"]
    del modules["chunkline.pkg.c"]
    assert import_circle(import_graph(modules)) is None
    # A package's __init__ counts as a module: a member importing its package closes a circle.
    assert import_circle(import_graph({
        "chunkline.pkg": "from chunkline.pkg.c import y\n",
        "chunkline.pkg.c": "from chunkline.pkg import z\n",
    })) == ["chunkline.pkg", "chunkline.pkg.c", "chunkline.pkg"]
