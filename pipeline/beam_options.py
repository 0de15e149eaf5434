"""The job's Beam ``PipelineOptions``, each view made once.

Beam builds a view (``options.view_as(TypeOptions)``) by constructing a new options object: a
fresh argparse parser with the class's arguments, then a parse of every flag. Since Beam 2.78
each type check at graph construction asks for one (``typehints.is_consistent_with`` reads
``TypeOptions.disable_beartype`` from the pipeline's options, apache/beam#38275), besides the
one per applied transform: ~2,900 views for chunkline's graph, 1.1 of its 1.8 s of CPU to build
(measured on the default config, in-process). A view is a window on the options' one shared
dictionary (``view._all_options is options._all_options``), so the same view object serves every
later request for that class: values set through any view are seen through all of them, as
with fresh views.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

from apache_beam.options.pipeline_options import PipelineOptions

View = TypeVar("View", bound=PipelineOptions)


class JobOptions(PipelineOptions):
    """``PipelineOptions`` that keep each class's view after the first ``view_as`` (it adds no
    options of its own, so Beam's parsers are unchanged)."""

    def __init__(self, flags: Sequence[str] | None = None, **kwargs) -> None:
        super().__init__(flags, **kwargs)
        # PipelineOptions.__setattr__ admits only option names: bypass it for the cache.
        object.__setattr__(self, "_views", {})

    def view_as(self, cls: type[View]) -> View:
        views = self.__dict__.setdefault("_views", {})  # an unpickled copy may predate the cache
        view = views.get(cls)
        if view is None or view._all_options is not self._all_options:
            view = views[cls] = super().view_as(cls)
        return view


def job_options(flags: Sequence[str]) -> PipelineOptions:
    """The options a chunkline job's pipeline is built and run with."""
    return JobOptions(list(flags))
