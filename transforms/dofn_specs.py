"""Beam's search of a DoFn for state and timer parameters, done once per DoFn class.

``apache_beam.transforms.userstate.get_dofn_specs`` walks ``dir(dofn)`` and builds a
``MethodWrapper`` (an ``inspect.signature``) for every method, DoFn's own ~30 included, and Beam
asks it several times per ParDo: at graph construction (``ParDo.__init__``, ``to_runner_api``,
``is_stateful_dofn``) and again in each worker for every bundle processor it builds
(``runners/common.py``, ``DoFnSignature``). For chunkline's graph that is ~1,600 walks and
~52,000 signatures a run: measured on a two-document run in process, the job's CPU fell from
3.1-3.6 s to 1.8-2.1 s with the answers kept.

The answer depends on the methods' parameter defaults only (``DoFn.StateParam`` /
``DoFn.TimerParam`` defaults are how a DoFn declares state and timers), which belong to the
class, unless an instance holds bound methods of its own: the key is the class plus those.
What is kept is what Beam computed, returned as fresh sets so no caller can change it.

Replacing a function of Beam's is not something importing a library may do to its user's
process: :func:`kept_dofn_specs` applies it around one job's construction and in-process run
(``chunkline run``, pipeline/run.py) and puts Beam's own back after. SDK workers in other
processes (``--direct_running_mode=multi_processing``, Prism, Flink, Dataflow) search as Beam
does. Upstream, the same cache belongs in ``userstate.get_dofn_specs`` itself (keyed by the
DoFn's class and its instance's own bound methods, as here): docs/runners.md says so.
"""

from __future__ import annotations

import types
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from apache_beam.transforms import userstate

_Specs = tuple[set[userstate.StateSpec], set[userstate.TimerSpec]]
_KEPT: "weakref.WeakKeyDictionary[type, dict[tuple, _Specs]]" = weakref.WeakKeyDictionary()


def _own_bound_methods(dofn: Any) -> tuple:
    """The bound methods an instance holds in its own ``__dict__`` (name, function), which
    ``dir(dofn)`` finds beside the class's."""
    held = getattr(dofn, "__dict__", None) or {}
    return tuple(sorted((name, id(value.__func__)) for name, value in held.items()
                        if isinstance(value, types.MethodType)))


def _remembering(search: Callable[[Any], _Specs]) -> Callable[[Any], _Specs]:
    def get_dofn_specs(dofn: Any) -> _Specs:
        try:
            by_instance = _KEPT.setdefault(type(dofn), {})
        except TypeError:  # a class that cannot be weakly referenced: ask Beam every time
            return search(dofn)
        key = _own_bound_methods(dofn)
        found = by_instance.get(key)
        if found is None:
            found = by_instance[key] = search(dofn)  # Beam's errors (duplicate params) propagate
        return set(found[0]), set(found[1])

    get_dofn_specs.__wrapped__ = search  # type: ignore[attr-defined]
    get_dofn_specs.__doc__ = search.__doc__
    return get_dofn_specs


@contextmanager
def kept_dofn_specs() -> Iterator[None]:
    """The remembering search installed in ``userstate`` (its own callers and Beam's other
    modules look it up there at each call) for the block, Beam's own put back after; nested
    or already installed, it changes nothing."""
    current = getattr(userstate, "get_dofn_specs", None)
    if current is None or hasattr(current, "__wrapped__"):
        yield
        return
    userstate.get_dofn_specs = _remembering(current)  # type: ignore[assignment]  # Beam types it as its own def
    try:
        yield
    finally:
        userstate.get_dofn_specs = current
