"""A job's PipelineOptions keep their views (chunkline.pipeline.beam_options): they read and write
exactly as Beam's own options do, only without a parser built per view."""

from __future__ import annotations

import pickle

from apache_beam.options.pipeline_options import (DebugOptions, PipelineOptions, PortableOptions,
                                                  StandardOptions, TypeOptions)

from chunkline.pipeline.beam_options import JobOptions, job_options

FLAGS = ["--runner=PortableRunner", "--job_endpoint=embed", "--experiments=a", "--experiments=b",
         "--direct_num_workers=2", "--no_pipeline_type_check", "--some_unknown_flag=7"]


def test_a_view_is_made_once_and_reads_as_beams() -> None:
    ours, beams = job_options(FLAGS), PipelineOptions(FLAGS)
    assert ours.view_as(TypeOptions) is ours.view_as(TypeOptions)
    for cls in (TypeOptions, StandardOptions, PortableOptions, DebugOptions):
        assert ours.view_as(cls).get_all_options() == beams.view_as(cls).get_all_options()
    assert ours.get_all_options(retain_unknown_options=True) == \
        beams.get_all_options(retain_unknown_options=True)
    assert ours.view_as(TypeOptions).pipeline_type_check is False


def test_a_value_set_through_any_view_is_seen_through_every_view() -> None:
    options = job_options(["--runner=FnApiRunner"])
    options.view_as(TypeOptions).runtime_type_check = True  # the view, kept
    assert options.view_as(TypeOptions).runtime_type_check is True
    assert PipelineOptions.view_as(options, TypeOptions).runtime_type_check is True  # a fresh view
    options.view_as(StandardOptions).streaming = True
    assert options.view_as(StandardOptions).streaming is True
    assert options.get_all_options()["streaming"] is True
    options.view_as(DebugOptions).add_experiment("x")
    assert "x" in options.view_as(DebugOptions).experiments


def test_pickled_options_unpickle_with_their_values() -> None:
    options = job_options(FLAGS)
    options.view_as(TypeOptions).runtime_type_check = True
    copy = pickle.loads(pickle.dumps(options))
    assert isinstance(copy, JobOptions)
    assert copy.view_as(TypeOptions).runtime_type_check is True
    copy.view_as(TypeOptions).runtime_type_check = False  # the copy's views are its own
    assert options.view_as(TypeOptions).runtime_type_check is True
    assert copy.get_all_options() == {**options.get_all_options(), "runtime_type_check": False}
