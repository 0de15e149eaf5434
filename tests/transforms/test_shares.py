"""Groupings in key-space shares (transforms/shares.py) give what Beam's own GroupByKey and
CoGroupByKey give, whatever the number of shares and however the elements fall into bundles."""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms import shares
from chunkline.transforms.shares import GroupInShares, JoinInShares, share_of

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

keys = st.one_of(st.text(max_size=6), st.tuples(st.text(max_size=3), st.integers(-5, 5)))
pairs = st.lists(st.tuples(keys, st.integers(-100, 100)), max_size=40)


def _sorted_groups(grouped):
    return sorted(((repr(key), sorted(values)) for key, values in grouped))


@settings(max_examples=16, deadline=None)
@given(pairs, st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=7),
       st.booleans(), st.integers(min_value=0, max_value=12))
def test_group_in_shares_is_group_by_key(tmp_path_factory, elements, share_count, held, parked,
                                         inline) -> None:
    park = str(tmp_path_factory.mktemp("park") / "keys") if parked else None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shares, "HELD_ELEMENTS", held)  # lists sent mid-bundle too
        patch.setattr(shares, "PARKED_ELEMENTS", held)  # parts written mid-bundle too
        patch.setattr(shares, "INLINE_ELEMENTS", inline)  # some lists inline, the rest parked
        with fnapi_pipeline() as pipeline:
            source = pipeline | beam.Create(elements).with_output_types(tuple[object, int])
            ours = (source | "Ours" >> GroupInShares(share_count, park=park)
                    | "SortOurs" >> beam.combiners.ToList() | "A" >> beam.Map(_sorted_groups))
            beams = (source | "Beams" >> beam.GroupByKey()
                     | "SortBeams" >> beam.combiners.ToList() | "B" >> beam.Map(_sorted_groups))
            expected = {}
            for key, value in elements:
                expected.setdefault(repr(key), []).append(value)
            wanted = [sorted((key, sorted(values)) for key, values in expected.items())]
            assert_that(ours, equal_to(wanted), label="ours")
            assert_that(beams, equal_to(wanted), label="beams")
    if park is not None:  # every part read, then removed with its folder
        assert not os.path.exists(park)


@settings(max_examples=10, deadline=None)
@given(pairs, pairs, st.integers(min_value=1, max_value=40))
def test_join_in_shares_is_co_group_by_key(left, right, share_count) -> None:
    def joined(grouped):
        return sorted((repr(key), sorted(groups["left"]), sorted(groups["right"]))
                      for key, groups in grouped)

    with fnapi_pipeline() as pipeline:
        inputs = {"left": pipeline | "L" >> beam.Create(left).with_output_types(tuple[object, int]),
                  "right": pipeline | "R" >> beam.Create(right).with_output_types(tuple[object, int])}
        ours = inputs | "Ours" >> JoinInShares(share_count) | "ListOurs" >> beam.combiners.ToList()
        beams = inputs | "Beams" >> beam.CoGroupByKey() | "ListBeams" >> beam.combiners.ToList()
        assert_that(ours | "JoinedOurs" >> beam.Map(joined),
                    equal_to([joined([(k, {"left": list(g["left"]), "right": list(g["right"])})
                                      for k, g in _co_grouped(left, right)])]), label="ours")
        assert_that(beams | "JoinedBeams" >> beam.Map(
            lambda grouped: joined([(k, {t: list(v) for t, v in g.items()}) for k, g in grouped])),
            equal_to([joined([(k, g) for k, g in _co_grouped(left, right)])]), label="beams")


def _co_grouped(left, right):
    found: dict = {}
    for tag, elements in (("left", left), ("right", right)):
        for key, value in elements:
            found.setdefault(repr(key), (key, {"left": [], "right": []}))[1][tag].append(value)
    return list(found.values())


def test_a_key_has_one_share_in_every_process() -> None:
    # repr, not hash(): Python salts str hashes per process, and two workers must agree.
    import os
    import subprocess
    import sys

    probe = "from chunkline.transforms.shares import share_of; print([share_of(k, 1024) for k in ('doc-1', ('a', 3))])"
    seen = {subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert seen == {f"{[share_of('doc-1', 1024), share_of(('a', 3), 1024)]}\n"}
    assert len({share_of(f"doc-{n}", 16) for n in range(400)}) == 16
