"""The Beam runner a job runs on, and the flags it needs, resolved before anything else runs.

Prism (Beam's portable runner written in Go, ``apache_beam/runners/portability/prism_runner.py``)
is a separate binary. Beam fetches it from GitHub at run time when no ``--prism_location`` is
given, and builds it with ``go install ...@latest`` on a development version: neither may happen
here (offline machines, and a run must not depend on what a download brings). So chunkline
always names the binary itself: the one ``--prism_location`` names (a local file), else the
venv's ``bin/prism`` (``make setup`` builds it there with Go), else ``prism`` on ``PATH``; with
none, the run stops in one line saying how to get one.

``DirectRunner`` is Beam's "some local runner": today Beam tries Prism and falls back to its
in-process runner when Prism fails to start. chunkline runs it as the in-process ``FnApiRunner``
always, the same runner wherever it runs (its tables equal Prism's, it needs no binary and is
the faster of the two on one machine); name ``PrismRunner`` for Prism.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, PrismRunnerOptions
from apache_beam.runners.runner import PipelineRunner
from apache_beam.version import __version__ as beam_version

from chunkline.pipeline.beam_options import job_options

PRISM = "PrismRunner"
PRISM_PACKAGE = "github.com/apache/beam/sdks/v2/go/cmd/prism"
# Runners chunkline runs in this process with its own FnApiRunner (see the module's docstring).
IN_PROCESS = frozenset({"FnApiRunner", "DirectRunner"})

# How often, at most, the in-process runner's state sampler wakes (Beam's default: 200 ms).
# Ending a bundle joins the sampler's thread, which sleeps up to this long: with 200 ms a
# stage that ran long enough waits ~100 ms for nothing, in every run, on every stage.
STATE_SAMPLING_MS = 10


class RunnerUnavailable(ValueError):
    """The runner named cannot start on this machine; the message is one line saying why and
    what to do (``chunkline run`` prints it and exits 2, as for any usage error)."""


def how_to_get_prism() -> str:
    """One sentence: the ways to give chunkline a Prism binary of this Beam's version."""
    return (f"`make setup` builds it into the venv when Go is installed, or build it with "
            f"`go install {PRISM_PACKAGE}@v{beam_version}` and put it on PATH, or pass "
            f"`-- --prism_location=/path/to/prism`")


def find_prism() -> str | None:
    """The Prism binary chunkline uses when no ``--prism_location`` is given: this environment's
    ``bin/prism`` (where ``make setup`` puts it), else the first ``prism`` on ``PATH``."""
    own = Path(sys.prefix, "bin", "prism")
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    return shutil.which("prism")


def prism_flags(flags: Sequence[str]) -> list[str]:
    """``flags`` with ``--prism_location`` naming an existing local binary: the one given (which
    must exist: Beam would otherwise take a missing path as a URL to fetch) or the one
    :func:`find_prism` finds. :class:`RunnerUnavailable` when there is none."""
    given = PipelineOptions(list(flags)).view_as(PrismRunnerOptions).prism_location
    if given:
        if "://" in given:
            raise RunnerUnavailable(f"--prism_location={given}: chunkline runs a local Prism binary "
                                    f"and never downloads one; {how_to_get_prism()}")
        if not Path(given).is_file():
            raise RunnerUnavailable(f"--prism_location={given}: no such file; {how_to_get_prism()}")
        return list(flags)
    found = find_prism()
    if found is None:
        raise RunnerUnavailable(f"PrismRunner needs the Prism binary, which is not in this venv's "
                                f"bin nor on PATH: {how_to_get_prism()}")
    return [*flags, f"--prism_location={found}"]


def in_process_runner() -> PipelineRunner:
    """The in-process ``FnApiRunner``, its state sampler waking every :data:`STATE_SAMPLING_MS`."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.runners.worker import statesampler

    # The bundle processor builds its sampler with the default period and no option to set it;
    # the in-process runner's bundles run in this process, so the default is set here.
    statesampler.StateSampler.__init__.__defaults__ = (STATE_SAMPLING_MS,)
    return FnApiRunner()


def runner_flags(name: str, flags: Sequence[str]) -> list[str]:
    """Beam's ``flags`` as the runner ``name`` runs with them (Prism's binary named);
    :class:`RunnerUnavailable` when that runner cannot start on this machine. Cheap: the CLI
    asks before it loads a model."""
    return prism_flags(flags) if name == PRISM else list(flags)


def job_runner(name: str, flags: Sequence[str]) -> tuple[PipelineRunner | str, PipelineOptions]:
    """The runner (an instance, or Beam's name for it) and the options the job runs with, for
    the runner ``name`` and Beam's ``flags``; :class:`RunnerUnavailable` before any work when
    the runner cannot start here."""
    options = job_options(runner_flags(name, flags))
    return (in_process_runner() if name in IN_PROCESS else name), options
