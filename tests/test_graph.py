"""Connected components by star rounds (``chunkline.graph``): the same components as a
union-find, settled or not, whatever the edges and the number of rounds; the pipeline's
``StarComponents`` gives the same when its rounds leave nodes unsettled."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.graph import large_star, small_star, star_components, star_round
from chunkline.minhash import components
from tests.beam_helpers import fnapi_pipeline

EDGES = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)).filter(lambda e: e[0] != e[1]),
                 max_size=60)


@settings(max_examples=300, deadline=None)
@given(EDGES, st.integers(0, 4))
def test_star_components_are_the_union_find_components(edges, rounds) -> None:
    found, unsettled = star_components(edges, rounds)
    assert found == components(edges)
    if rounds == 0 and edges:
        # No round: all settled only where every component already is a star around its minimum.
        assert (unsettled == 0) == all(found[b] in (a, b) and found[a] in (a, b) for a, b in edges)


@settings(max_examples=200, deadline=None)
@given(EDGES, st.booleans())
def test_a_round_keeps_the_components(edges, large) -> None:
    assert components(star_round(edges, large)) == components(edges)


def test_the_stars_of_one_node() -> None:
    assert large_star(3, {1, 5, 7}) == [(5, 1), (7, 1)]
    assert large_star(1, {5, 7}) == [(5, 1), (7, 1)]
    assert small_star(7, {3, 5, 9}) == [(5, 3), (7, 3)]
    assert small_star(3, {5, 9}) == []


@pytest.mark.parametrize(("length", "rounds"), [(16, 3), (64, 5), (256, 7)])
def test_a_shuffled_path_settles_within_the_rounds(length, rounds) -> None:
    order = list(range(length))
    random.Random(length).shuffle(order)
    path = [(order[i], order[i + 1]) for i in range(length - 1)]
    assert star_components(path, rounds) == ({node: 0 for node in order}, 0)


def _graph(seed: int) -> list[tuple[tuple, tuple]]:
    """Random edges between nodes shaped like dedupe's: a tuple ending with the doc_id."""
    rng = random.Random(seed)
    nodes = [(rng.randrange(3), f"d{index:03d}") for index in range(40)]
    edges = [tuple(rng.sample(nodes, 2)) for _ in range(25)]
    # A chain as well, in random order: settled only with enough rounds.
    chain = rng.sample(nodes, 16)
    return edges + list(zip(chain, chain[1:]))


@pytest.mark.slow
def test_pipeline_components_with_nodes_left_unsettled_match_a_union_find() -> None:
    """The all-settled path runs in every near-duplicate test (tests/test_dedupe.py asserts no
    node is left unsettled there); here one uncontracted round leaves some unsettled."""
    from chunkline.transforms.dedupe import StarComponents

    edges = _graph(0)
    expected = sorted((node[-1], root[-1]) for node, root in components(edges).items() if node != root)
    assert star_components(edges, 1)[1] > 0
    with fnapi_pipeline() as pipeline:
        links = pipeline | beam.Create(edges) | StarComponents(1, shares=7, contract=False)
        assert_that(links, equal_to(expected))
