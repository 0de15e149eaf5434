"""Beam test support: pipelines on the in-process FnApiRunner (the plain DirectRunner name
first tries to download the Prism binary, which this machine cannot), with the options a job
runs with (chunkline.pipeline.beam_options: each view made once)."""

from __future__ import annotations

from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline

from chunkline.pipeline.beam_options import job_options


def fnapi_pipeline() -> TestPipeline:
    return TestPipeline(runner=FnApiRunner(), options=job_options([]))
