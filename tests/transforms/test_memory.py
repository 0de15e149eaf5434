"""Freed memory handed back after large bundles (transforms/memory.py), and the ParDo that
holds no element between bundles (transforms/elementwise.py)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, SimpleInvoker

from chunkline.transforms import memory
from chunkline.transforms.elementwise import MapWith
from chunkline.transforms.write import _row_groups


def test_release_is_called_only_after_a_large_bundle(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(memory, "release_freed_memory", lambda: calls.append(1))
    memory.release_after(memory.RELEASE_AFTER_BYTES - 1)
    assert calls == []
    memory.release_after(memory.RELEASE_AFTER_BYTES)
    assert calls == [1]


def test_release_runs_where_the_c_library_has_malloc_trim_and_is_harmless_elsewhere() -> None:
    memory.release_freed_memory()  # glibc: malloc_trim(0); macOS, musl: nothing


def test_map_with_a_setting_runs_with_beams_simple_invoker() -> None:
    # beam.Map(fn, setting) runs with the per-window invoker, which keeps the last element in
    # its cached arguments until the job ends; MapWith's process takes the element alone.
    fn = MapWith(lambda element, setting: element + setting, 2)
    assert list(fn.process(3)) == [5]
    invoker = DoFnInvoker.create_invoker(DoFnSignature(fn), output_handler=None, process_invocation=True)
    assert isinstance(invoker, SimpleInvoker)
    mapped = DoFnInvoker.create_invoker(DoFnSignature(beam.Map(lambda e, s: e, 2).fn),
                                        output_handler=None, side_inputs=[], input_args=[2],
                                        input_kwargs={}, process_invocation=True,
                                        context=DoFnContext("Map"))
    assert not isinstance(mapped, SimpleInvoker)


def test_row_groups_are_handed_on_as_they_fill(monkeypatch) -> None:
    from chunkline.transforms import write

    monkeypatch.setattr(write, "ROW_GROUP", 3)
    encoded = [bytes([n]) * n for n in range(1, 9)]
    expected = [encoded[0:3], encoded[3:6], encoded[6:8]]
    pulled = []

    def merged():  # as the shard's sorted parts are merged: one record at a time
        for record in encoded:
            pulled.append(record)
            yield record

    groups, pulled_at_each = [], []
    for group in _row_groups(merged()):
        groups.append(list(group))
        pulled_at_each.append(len(pulled))
    # A group is written before the next record is read: the shard is never held whole.
    assert groups == expected and pulled_at_each == [3, 6, 8]
    assert list(_row_groups([])) == [[]]  # an empty shard is one empty group
