"""Groupings by key that send a list per key-space share, not an element per key.

A grouping of one small element per document (dedupe's joins by doc_id, the carry index,
the ids of the rejected) pays the runner's cost per element twice, where it is sent and where it
is received, and on the in-process runner that cost, not the work, is most of a rerun that
carries everything (bench/RESULTS.md, "A nightly rerun"). Here each bundle holds its elements by
``share_of(key) % shares`` and sends one list per share it saw; the receiving side groups a
share's lists by key and hands on exactly what ``beam.GroupByKey`` (or
``chunkline.transforms.coders.JoinByKey``) would: one ``(key, values)`` per key, in the same fused stage,
so no element per key crosses a shuffle. The band keys of near-duplicate detection are batched
the same way (``transforms/dedupe.py``, ``_ShareBands``).

``shares`` only trades the number of lists for their size; the output does not depend on it.
A share's keys are grouped in memory where it is received: choose shares so that a share holds
thousands of keys, not millions (``chunkline.pipeline.plan.join_shares``).

A grouping with an element per record of an input of any size (a value per record of a dump
of millions of records) parks its lists instead (``park``; boilerplate's key sets, which were
such a grouping, now go as arrays and park the same way: ``transforms/clean.py``): past the first
:data:`INLINE_ELEMENTS` of a bundle, each share's list is written to a part file
(``transforms/spill.py``) and only ``(share, path)`` crosses the grouping, since the in-process
runner holds a grouping's whole input in memory while the stage that makes it runs; the parts
are deleted once every share is read.
"""

from __future__ import annotations

import pickle
import zlib
from typing import Any, Iterable, Sequence, Union

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.transforms.spill import RemoveParts, part_path, read_packed, write_packed

# Elements a bundle holds before it sends what it has: its memory stays bounded.
HELD_ELEMENTS = 8192
# ... and before it parks them: fewer, larger part files.
PARKED_ELEMENTS = 65_536
# A parking bundle sends this many elements in the grouping itself first: a corpus of thousands
# of documents writes no part, and a dump of millions holds no more than these in memory.
INLINE_ELEMENTS = 65_536


def share_of(key: Any, shares: int) -> int:
    """Stable across processes (CRC-32 of the ``repr`` of a str, int or tuple of them, never
    ``hash()``, which Python salts per process): a share needs spread, not secrecy."""
    return zlib.crc32(repr(key).encode("utf-8", "surrogatepass")) % shares


class _ToShares(beam.DoFn):
    """``(key, value)`` -> ``(share, pickled [(key, tag, value), ...])``, a list per share per
    bundle (or per :data:`HELD_ELEMENTS`), pickled whole: one call per list, not a coder call
    per element (a value's class is importable wherever the stage runs; the share, the only
    key the shuffle compares, is an int)."""

    def __init__(self, tag: int, shares: int) -> None:
        self.tag, self.shares = tag, shares

    def start_bundle(self) -> None:
        self.held: dict[int, list] = {}
        self.count = 0

    def process(self, element: tuple[Any, Any]) -> Iterable[tuple[int, bytes | str]]:
        key, value = element
        self.held.setdefault(share_of(key, self.shares), []).append((key, self.tag, value))
        self.count += 1
        if self.count >= self._held_at_most():
            yield from self._sent()

    def _held_at_most(self) -> int:
        return HELD_ELEMENTS

    def finish_bundle(self) -> Iterable[WindowedValue]:
        for element in self._sent():
            yield WindowedValue(element, 0, (GlobalWindow(),))

    def _sent(self) -> Sequence[tuple[int, bytes | str]]:
        """What the held elements go out as: here each share's pickled list."""
        return self._pickled()

    def _pickled(self) -> list[tuple[int, bytes]]:
        sent = [(share, pickle.dumps(held, protocol=pickle.HIGHEST_PROTOCOL))
                for share, held in sorted(self.held.items())]
        self.held, self.count = {}, 0
        return sent


class _ToParkedShares(_ToShares):
    """As :class:`_ToShares` for a bundle's first :data:`INLINE_ELEMENTS`; after them, each
    share's pickled list written to a part under ``directory``: ``(share, part path)``."""

    def __init__(self, tag: int, shares: int, directory: str) -> None:
        super().__init__(tag, shares)
        self.directory = directory

    def start_bundle(self) -> None:
        super().start_bundle()
        self.sent_inline = 0

    def _held_at_most(self) -> int:
        return HELD_ELEMENTS if self.sent_inline < INLINE_ELEMENTS else PARKED_ELEMENTS

    def _sent(self) -> Sequence[tuple[int, bytes | str]]:
        count = self.count
        sent = self._pickled()
        if self.sent_inline + count <= INLINE_ELEMENTS:
            self.sent_inline += count
            return sent
        self.sent_inline = INLINE_ELEMENTS
        parked: list[tuple[int, bytes | str]] = []
        for share, data in sent:
            path = part_path(self.directory)
            write_packed(path, data)
            parked.append((share, path))
        return parked


class _FromShares(beam.DoFn):
    """``(share, pickled lists)`` -> ``(key, {tag: [values]})`` per key (``tags`` given) or
    ``(key, [values])`` (one unnamed input), keys in the order they first arrived. A list may
    instead be the path of the part it was parked in (a ``str``)."""

    def __init__(self, tags: tuple[str, ...] | None) -> None:
        self.tags = tags
        self.inputs = len(tags) if tags is not None else 1

    def process(self, share: tuple[int, Iterable[bytes | str]]) -> Iterable[tuple[Any, Any]]:
        grouped: dict[Any, list] = {}
        for data in share[1]:
            for key, tag, value in pickle.loads(read_packed(data) if isinstance(data, str) else data):
                values = grouped.get(key)
                if values is None:
                    values = grouped[key] = [[] for _ in range(self.inputs)]
                values[tag].append(value)
        for key, values in grouped.items():
            if self.tags is None:
                yield key, values[0]
            else:
                yield key, dict(zip(self.tags, values))


class GroupInShares(beam.PTransform):
    """``PCollection[tuple[K, V]]`` -> ``PCollection[tuple[K, list[V]]]``, as ``GroupByKey``;
    ``park``: a folder where the lists wait in part files (deleted once every share is read)."""

    def __init__(self, shares: int, park: str | None = None) -> None:
        super().__init__()
        self.shares = shares
        self.park = park

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        to_shares, sent = ((_ToShares(0, self.shares), tuple[int, bytes]) if self.park is None else
                           (_ToParkedShares(0, self.shares, self.park), tuple[int, Union[bytes, str]]))
        grouped = (pcoll
                   | "ToShares" >> beam.ParDo(to_shares).with_output_types(sent)
                   | "GroupByShare" >> beam.GroupByKey()
                   | "FromShares" >> beam.ParDo(_FromShares(None)))
        if self.park is not None:
            # Once every share is read: a part is never deleted while a retry could need it.
            (grouped
             | "CountGrouped" >> beam.combiners.Count.Globally()
             | "RemoveParts" >> beam.ParDo(RemoveParts(self.park)))
        return grouped


class JoinInShares(beam.PTransform):
    """``{tag: PCollection[tuple[K, V_tag]]}`` -> ``PCollection[tuple[K, dict[tag, list[V_tag]]]]``,
    as ``chunkline.transforms.coders.JoinByKey``."""

    def __init__(self, shares: int) -> None:
        super().__init__()
        self.shares = shares

    def expand(self, pcolls):
        tags = tuple(sorted(pcolls))
        parts = [pcolls[tag] | f"ToShares[{tag}]" >> beam.ParDo(_ToShares(index, self.shares))
                 .with_output_types(tuple[int, bytes])
                 for index, tag in enumerate(tags)]
        return (parts
                | "Flatten" >> beam.Flatten().with_output_types(tuple[int, bytes])
                | "GroupByShare" >> beam.GroupByKey()
                | "FromShares" >> beam.ParDo(_FromShares(tags)))
