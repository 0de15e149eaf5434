"""Options dataclasses declare their rules once, on the field: type, bounds, help.

Every stage's options are a frozen dataclass whose fields carry their bounds as
`annotated-types <https://github.com/annotated-types/annotated-types>`_ markers
(``Annotated[int, Ge(2)]``) and their help text as ``field(metadata={"help": ...})``. The same
declaration serves two readers: :func:`check_fields`, called by each dataclass's
``__post_init__``, so a library user gets the rule when building options by hand; and the YAML
config (``pipeline/config.py``), whose schema, with pydantic, is generated from these fields
(pydantic reads annotated-types markers natively). A rule that spans fields (``bands`` and
``rows`` given together) is a check in ``__post_init__``, which the config runs too.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at

_BOUNDS = (
    (at.Ge, "ge", ">=", lambda value, bound: value >= bound),
    (at.Gt, "gt", ">", lambda value, bound: value > bound),
    (at.Le, "le", "<=", lambda value, bound: value <= bound),
    (at.Lt, "lt", "<", lambda value, bound: value < bound),
)


def default_threads() -> int | None:
    """Threads a compute library should use when its option is null: ``OMP_NUM_THREADS`` when set
    (PyTorch reads it at import; ONNX Runtime does not, so its sessions are given it), else
    ``None``, the library's own default of one thread per core. A host running one worker process
    per core (Dataflow's Python harness, pytest-xdist, Beam's multi_processing) sets it to 1 once
    instead of each library oversubscribing the cores: their spinning pool threads would take
    CPU from the other processes."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def help_text(text: str) -> dict[str, str]:
    """``field(metadata=help_text("..."))``: the description the config schema shows."""
    return {"help": text}


def check_fields(options: Any) -> None:
    """Raise ValueError naming ``Class.field`` when a value has the wrong type or breaks a bound
    its annotation declares. Handles ``Annotated``, ``X | None``, ``Literal``, ``bool``, ``int``,
    ``float``, ``str`` and ``tuple[str, ...]``, the types options use."""
    cls = type(options)
    hints = typing.get_type_hints(cls, include_extras=True)
    for spec in dataclasses.fields(cls):
        value = getattr(options, spec.name)
        problem = _problem(value, hints[spec.name])
        if problem:
            raise ValueError(f"{cls.__name__}.{spec.name} {problem}, got {value!r}")


def _problem(value: Any, hint: Any) -> str | None:
    origin = get_origin(hint)
    if origin is typing.Annotated:
        inner, *markers = get_args(hint)
        problem = _problem(value, inner)
        return problem if problem else _bound_problem(value, markers)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None and type(None) in options:
            return None
        problems = [_problem(value, option) for option in options if option is not type(None)]
        return None if any(p is None for p in problems) else problems[0]
    if origin is Literal:
        allowed = get_args(hint)
        return None if value in allowed else f"must be one of {', '.join(map(repr, allowed))}"
    if origin is tuple:
        item = get_args(hint)[0]
        if not isinstance(value, tuple):
            return "must be a tuple"
        return next((f"items {p}" for p in (_problem(v, item) for v in value) if p), None)
    if hint is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return None if ok else "must be a finite number"
    if hint is str:
        return None if isinstance(value, str) else "must be a string"
    return None


def _bound_problem(value: Any, markers: list[Any]) -> str | None:
    for marker in markers:
        if isinstance(marker, at.Interval):
            parts = [getattr(at, name.capitalize())(getattr(marker, name))
                     for name in ("ge", "gt", "le", "lt") if getattr(marker, name) is not None]
            problem = _bound_problem(value, parts)
            if problem:
                return problem
        for kind, attribute, symbol, holds in _BOUNDS:
            if isinstance(marker, kind) and not holds(value, getattr(marker, attribute)):
                return f"must be {symbol} {getattr(marker, attribute)}"
        if isinstance(marker, at.MinLen) and len(value) < marker.min_length:
            return "must not be empty" if marker.min_length == 1 else f"needs >= {marker.min_length} items"
    return None
