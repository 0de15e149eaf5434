"""A ParDo for ``fn(element, setting)``: what ``beam.Map(fn, setting)`` does, without holding on
to the last element.

Beam runs a DoFn whose ``process`` takes the element alone with its simple invoker, and one given
extra arguments, side inputs or parameter defaults with its per-window invoker
(``apache_beam/runners/common.py``, ``DoFnInvoker.create_invoker``). The per-window invoker
fills a cached argument list with each element (``PerWindowInvoker.args_for_process``) and never
empties it, and the in-process FnApiRunner keeps every stage's bundle processor for the next
bundle (``BundleProcessorCache``): each such ``Map`` held its last element until the job ended.
For one 4 MB CSV that was the 14,336 chunks of its document, twice (carry keys, content keys).
Here the setting is the DoFn's own, so ``process`` takes the element alone."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import apache_beam as beam


class MapWith(beam.DoFn):
    """``fn(element, setting)`` for each element."""

    def __init__(self, fn: Callable[[Any, Any], Any], setting: Any) -> None:
        self.fn = fn
        self.setting = setting

    def process(self, element: Any) -> Iterator[Any]:
        yield self.fn(element, self.setting)
