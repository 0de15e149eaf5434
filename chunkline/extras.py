"""Optional features and the one line a missing one gives.

chunkline alone (``pip install .`` from a checkout: it is not on PyPI) is the splitter and its
tokenizers; each heavier feature is an extra (pyproject.toml's ``[project.optional-dependencies]``).
Every optional import goes through :func:`require`, where the feature is used (never at
``import chunkline``), so a missing extra reads the same everywhere:

>>> require("pdf", "pypdfium2")  # doctest: +SKIP
Traceback (most recent call last):
chunkline.extras.MissingExtra: chunkline[pdf] is not installed: pip install 'chunkline[pdf]' (pypdfium2)

Beam's optional integrations do the same (``apache_beam/ml/rag/chunking/langchain.py`` guards
its import and names the package), as do datatrove's steps (``_requires_dependencies``).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from types import ModuleType

# The line MissingExtra says, found again inside another error's text.
_LINE = re.compile(r"chunkline\[(\w+)\] is not installed: pip install 'chunkline\[\1\]' \([\w.]+\)")


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


def require_installed(extra: str, module: str) -> None:
    """:class:`MissingExtra` naming the extra unless ``module`` is installed: found where an
    import would look, not imported (a parent package of a dotted name is). For checks made
    before the feature runs, which should cost nothing: importing sentence-transformers to see
    that it is there took 4-6 s of a one-file run, and on a runner whose workers embed, the
    process that checks never uses it. The feature's own :func:`require` imports it where it is
    used, and names the extra then if a package it needs is missing."""
    try:
        found = importlib.util.find_spec(module)
    except ModuleNotFoundError as exc:  # a parent of a dotted name, or a finder saying so
        raise MissingExtra(extra, exc.name or module) from exc
    if found is None:
        raise MissingExtra(extra, module)


def missing_extra_line(error: BaseException) -> str | None:
    """The one line of a :class:`MissingExtra` that ``error`` is or carries, else None.

    A worker's exception reaches the driver re-raised by the runner: Beam's
    ``DoFnRunner._reraise_augmented`` (``apache_beam/runners/common.py``) cannot rebuild a
    MissingExtra from one message, so it raises ``RuntimeError("chunkline.extras.MissingExtra:
    <the line> [while running '<step>']")``; the line is read back from that text."""
    if isinstance(error, MissingExtra):
        return str(error)
    found = _LINE.search(str(error))
    return found.group(0) if found else None
