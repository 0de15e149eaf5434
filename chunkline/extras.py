"""Optional features and the one line a missing one gives.

``pip install chunkline`` is the splitter and its tokenizers; each heavier feature is an extra
(pyproject.toml's ``[project.optional-dependencies]``). Every optional import goes through
:func:`require`, where the feature is used (never at ``import chunkline``), so a missing extra
reads the same everywhere:

>>> require("pdf", "pypdfium2")  # doctest: +SKIP
Traceback (most recent call last):
chunkline.extras.MissingExtra: chunkline[pdf] is not installed: pip install 'chunkline[pdf]' (pypdfium2)

Beam's optional integrations do the same (``apache_beam/ml/rag/chunking/langchain.py`` guards
its import and names the package), as do datatrove's steps (``_requires_dependencies``).
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ModuleNotFoundError):
    """An optional feature's package is not installed; ``str()`` is the one line to show.

    A ``ModuleNotFoundError`` (so an ``ImportError``): code that already handles a missing
    module keeps handling this one."""

    def __init__(self, extra: str, module: str) -> None:
        self.extra = extra
        super().__init__(
            f"chunkline[{extra}] is not installed: pip install 'chunkline[{extra}]' ({module})",
            name=module,
        )

    def __reduce__(self):  # pickled across processes (Beam workers) with its own arguments
        return type(self), (self.extra, self.name)


def require(extra: str, module: str) -> ModuleType:
    """Import ``module`` (dotted names too) for a feature of the ``extra`` extra.

    Raises :class:`MissingExtra` naming the extra when the module, or a package it imports, is
    not installed; any other import failure (a broken native library, say) propagates as is,
    since installing the extra would not fix it."""
    try:
        return importlib.import_module(module)
    except MissingExtra:
        raise
    except ModuleNotFoundError as exc:
        raise MissingExtra(extra, exc.name or module) from exc
