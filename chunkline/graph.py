"""Connected components as rounds of local rewrites of an edge set, each round one grouping by
node: what a pipeline can compute without any worker holding the whole graph.

The rounds are the alternating algorithm of Kiveris, Lattanzi, Mirrokni, Rastogi and
Vassilvitskii, "Connected Components in MapReduce and Beyond" (SoCC 2014): *large-star* joins
every neighbour larger than a node to the smallest of the node and its neighbours, *small-star*
joins a node and its smaller neighbours to the smallest of them. Both keep the components, and
alternated they turn each component into a star around its smallest node in O(log^2 n) rounds
(a handful on real graphs). Whether a node's part of the graph is a star is a local check
(:func:`label`, :func:`settled`): each node's label is the smallest of itself and its
neighbours, and every neighbour of a settled node has its label. The nodes left unsettled
after a fixed number of rounds go to one union-find with their neighbourhoods
(:func:`unsettled_edges`), which holds only them. Nodes are any hashable, ordered values; edges are
``(a, b)`` pairs, either way round.

:func:`star_components` runs the same rounds in one process, for tests and as the reference the
pipeline (``transforms/dedupe.py``) follows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence, TypeVar

from chunkline.minhash import components

if TYPE_CHECKING:
    from _typeshed import SupportsDunderLT

# A node: hashable (sets and dicts hold them) and ordered (the smallest is the root). One type
# per graph, so what a caller puts in (the pipeline's tuples) is what it gets back.
# Compared with ``<`` only (as sorted() and min() compare).
Node = TypeVar("Node", bound="SupportsDunderLT[Any]")
Edge = tuple[Node, Node]


def neighbours(edges: Iterable[Edge[Node]]) -> dict[Node, set[Node]]:
    """Every node of ``edges`` -> its distinct neighbours (self-loops dropped)."""
    found: dict[Node, set[Node]] = {}
    for a, b in edges:
        if a != b:
            found.setdefault(a, set()).add(b)
            found.setdefault(b, set()).add(a)
    return found


def large_star(node: Node, adjacent: Iterable[Node]) -> list[Edge[Node]]:
    """Large-star at ``node``: each neighbour larger than it, joined to the smallest of
    ``node`` and its neighbours."""
    adjacent = set(adjacent)
    smallest = min(adjacent | {node})
    return [(other, smallest) for other in sorted(adjacent) if node < other]


def small_star(node: Node, adjacent: Iterable[Node]) -> list[Edge[Node]]:
    """Small-star at ``node``: ``node`` and each neighbour smaller than it, joined to the
    smallest of those."""
    lower = sorted(other for other in set(adjacent) if other < node)
    if not lower:
        return []
    return [(other, lower[0]) for other in (*lower[1:], node)]


def label(node: Node, adjacent: Iterable[Node]) -> Node:
    """``node``'s label: the smallest of it and its neighbours (the centre, once every
    component is a star)."""
    return min(set(adjacent) | {node})


def settled(own: Node, neighbour_labels: Iterable[Node]) -> bool:
    """Whether a node of label ``own`` is settled: every neighbour has its label. When every
    node is, each component is a star and every label is its component's smallest node (a
    label is a node of the component, no larger than the node, and one for the component)."""
    return all(other == own for other in neighbour_labels)


def unsettled_edges(node: Node, told: Iterable[tuple[Node, Node]]) -> list[Edge[Node]]:
    """What an unsettled ``node`` gives the union-find that finishes the job: its edge to each
    neighbour and each neighbour's edge to its label (``told``: ``(neighbour, its label)``).
    Edges of the graph all (a label is a node or a neighbour of it), so the union-find never
    joins two components; and enough to join, with the labels of the settled nodes around
    them, every node of a component that is not yet a star (see :func:`star_components`)."""
    return [edge for other, theirs in sorted(told) for edge in ((node, other), (other, theirs))]


def final_root(node: Node, own: Node, is_settled: bool, roots: dict[Node, Node]) -> Node:
    """A node's component root from its label (``own``) and the union-find's ``roots`` (over
    the :func:`unsettled_edges`): a settled node's label, followed through ``roots`` when its
    component is not yet a star; an unsettled node's root."""
    return roots.get(own, own) if is_settled else roots[node]


def star_round(edges: Iterable[Edge[Node]], large: bool) -> list[Edge[Node]]:
    """One round over the whole edge set: large-star or small-star at every node."""
    step = large_star if large else small_star
    return sorted({edge for node, adjacent in neighbours(edges).items() for edge in step(node, adjacent)})


def star_components(edges: Sequence[Edge[Node]], rounds: int) -> tuple[dict[Node, Node], int]:
    """(every node of ``edges`` -> the smallest node of its component, how many nodes were left
    unsettled), as the pipeline computes it: ``rounds`` alternations of large-star and
    small-star, the labels checked on the last small-star's input (its grouping serves both;
    with no round, on ``edges``).

    The unsettled nodes' :func:`unsettled_edges` go to one union-find. Why that is exact: in a
    component with an unsettled node, the settled nodes form regions (joined by edges between
    settled nodes, which share their label), each with an edge to an unsettled node, whose
    edges and whose neighbours' labels join the region's label to it; the component's smallest
    node is unsettled or the label of its own region. So the union-find's component holds the
    smallest node, every unsettled node and every region's label; a component with none
    unsettled is a star, its label the smallest node."""
    checked = current = list(edges)
    for _ in range(rounds):
        checked = star_round(current, large=True)
        current = star_round(checked, large=False)
    adjacency = neighbours(checked)
    label_of = {node: label(node, adjacent) for node, adjacent in adjacency.items()}
    pending: list[Edge[Node]] = []
    settled_nodes: set[Node] = set()
    for node, adjacent in adjacency.items():
        if settled(label_of[node], (label_of[other] for other in adjacent)):
            settled_nodes.add(node)
        else:
            pending += unsettled_edges(node, ((other, label_of[other]) for other in adjacent))
    roots = components(pending)
    found = {node: final_root(node, label_of[node], node in settled_nodes, roots) for node in adjacency}
    return found, len(adjacency) - len(settled_nodes)
