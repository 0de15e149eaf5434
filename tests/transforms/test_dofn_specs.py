"""Beam's state-and-timer search kept per DoFn class (transforms/dofn_specs.py): the same answers
as Beam's own search, never shared between DoFns that declare differently, stateful DoFns still
run as such, installed only around a job (importing chunkline changes nothing of Beam's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain

from chunkline.transforms.dofn_specs import kept_dofn_specs
from tests.beam_helpers import fnapi_pipeline

ROOT = Path(__file__).resolve().parents[2]

BAG = userstate.BagStateSpec("seen", VarIntCoder())
TIMER = userstate.TimerSpec("flush", TimeDomain.WATERMARK)


class Plain(beam.DoFn):
    def process(self, element):
        yield element


class Stateful(beam.DoFn):
    def process(self, element, seen=beam.DoFn.StateParam(BAG), flush=beam.DoFn.TimerParam(TIMER)):
        seen.add(element[1])
        flush.set(0)

    @userstate.on_timer(TIMER)
    def flushed(self, seen=beam.DoFn.StateParam(BAG)):
        yield sum(seen.read())


class Holder(beam.DoFn):
    """A DoFn whose instance holds a bound method of its own (as a wrapped callable can)."""

    def __init__(self, method=None) -> None:
        if method is not None:
            self.extra = method

    def process(self, element):
        yield element


class Twice(beam.DoFn):
    def process(self, element, a=beam.DoFn.StateParam(BAG), b=beam.DoFn.StateParam(BAG)):
        yield element


def _beams_own(dofn):
    return userstate.get_dofn_specs.__wrapped__(dofn)


@pytest.fixture(autouse=True)
def kept():
    with kept_dofn_specs():
        yield


def test_importing_chunkline_changes_nothing_of_beams() -> None:
    """In a fresh interpreter, as a user composing our transforms into their own pipeline."""
    script = ("import apache_beam.transforms.userstate as u; f = u.get_dofn_specs\n"
              "import chunkline, chunkline.transforms, chunkline.transforms.chunk, chunkline.pipeline.run\n"
              "assert u.get_dofn_specs is f, 'replaced on import'\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_search_is_kept_around_a_job_and_beams_own_is_back_after() -> None:
    installed = userstate.get_dofn_specs
    assert hasattr(installed, "__wrapped__")
    with kept_dofn_specs():
        assert userstate.get_dofn_specs is installed  # nested: never wrapped twice
    assert userstate.get_dofn_specs is installed
    beams = installed.__wrapped__
    userstate.get_dofn_specs = beams
    try:
        with kept_dofn_specs():
            assert hasattr(userstate.get_dofn_specs, "__wrapped__")
        assert userstate.get_dofn_specs is beams
    finally:
        userstate.get_dofn_specs = installed


@pytest.mark.parametrize("make", [Plain, Stateful, Holder, lambda: Holder(Stateful().process),
                                  lambda: Holder(Plain().process)])
def test_kept_answers_are_beams_answers_and_cannot_be_changed_by_a_caller(make) -> None:
    for _ in range(3):
        dofn = make()
        states, timers = userstate.get_dofn_specs(dofn)
        assert (states, timers) == _beams_own(dofn)
        assert userstate.is_stateful_dofn(dofn) == bool(states or timers)
        states.add("changed by a caller")
    assert "changed by a caller" not in userstate.get_dofn_specs(make())[0]


def test_an_instance_with_its_own_stateful_method_is_not_answered_for_by_its_class() -> None:
    assert userstate.get_dofn_specs(Holder()) == (set(), set())
    states, timers = userstate.get_dofn_specs(Holder(Stateful().process))
    assert states == {BAG} and timers == {TIMER}


def test_beams_refusal_of_a_malformed_dofn_is_raised_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValueError, match="duplicate"):
            userstate.validate_stateful_dofn(Twice())


@pytest.mark.slow
def test_a_stateful_dofn_keeps_its_state_per_key_on_the_in_process_runner() -> None:
    with fnapi_pipeline() as p:
        sums = (p | beam.Create([("a", 1), ("a", 2), ("b", 5), ("a", 3)]) | beam.ParDo(Stateful()))
        assert_that(sums, equal_to([6, 5]))
