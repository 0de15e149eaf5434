"""Reusing a previous run's vectors: each chunk takes the vector it had itself, so its row in a
store synced from the index stays as it was (twins of one text may differ by batch noise)."""

from __future__ import annotations

import math

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.records import ChunkRecord
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.reuse import ReusePreviousEmbeddings, _Candidates, _pick


def unit(angle: float) -> tuple[float, float]:
    return (math.cos(angle), math.sin(angle))


V1, V2, NEW = unit(0.1), unit(0.1001), unit(1.0)  # V1, V2: one text embedded in two batches


def previous_shard(path, rows: list[tuple[str, str, tuple[float, float]]]) -> str:
    table = pa.table({"content_key": [r[0] for r in rows], "chunk_id": [r[1] for r in rows],
                      "embedding": pa.array([list(r[2]) for r in rows], pa.list_(pa.float32(), 2))})
    pq.write_table(table, path)
    return str(path)


def test_each_twin_keeps_its_own_vector(tmp_path) -> None:
    """A, B and C share a text: A's vector came from one batch, B's and C's from another.
    Each takes its own back; D, a new chunk of that text, the smallest chunk id's; E, another
    text never seen, is embedded."""
    shard = previous_shard(tmp_path / "chunks-0.parquet",
                           [("k", "doc#a", V1), ("k", "doc#b", V2), ("k", "doc#c", V2)])
    chunks = [ChunkRecord("doc", f"doc#{name}", i, i, i + 1, (), "same text", 2, content_key=key)
              for i, (name, key) in enumerate([("a", "k"), ("b", "k"), ("c", "k"), ("d", "k"), ("e", "x")])]
    as_stored = {name: tuple(float(x) for x in pa.array([list(v)], pa.list_(pa.float32(), 2))[0].as_py())
                 for name, v in (("v1", V1), ("v2", V2))}
    with fnapi_pipeline() as p:
        out = p | beam.Create(chunks) | ReusePreviousEmbeddings([shard], 2, normalize=True)
        assert_that(out.reused | beam.Map(lambda c: (c.chunk_id, c.embedding)), equal_to([
            ("doc#a", as_stored["v1"]), ("doc#b", as_stored["v2"]), ("doc#c", as_stored["v2"]),
            ("doc#d", as_stored["v1"])]), label="Reused")
        assert_that(out.missing | beam.Map(lambda c: c.chunk_id), equal_to(["doc#e"]), label="Missing")


entries = st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c", "d"]),
                             st.sampled_from([V1, V2, NEW])), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(entries, st.integers(min_value=1, max_value=4))
def test_candidates_do_not_depend_on_how_the_runner_groups(found, parts: int) -> None:
    """A combine is lifted and merged in any grouping: the same candidates, the same pick."""
    combine = _Candidates()
    whole = combine.extract_output(combine.add_inputs(combine.create_accumulator(), found))
    pieces = [combine.add_inputs(combine.create_accumulator(), found[i::parts]) for i in range(parts)]
    merged = combine.extract_output(combine.merge_accumulators(pieces))
    assert whole == merged
    for chunk_id in "abcde":
        picked = _pick(merged, chunk_id)
        own = [v for trusted, c, v in found if trusted and c == chunk_id]
        if picked is not None and own:
            assert picked[2] in own  # a trusted vector of its own always wins
        assert (picked is None) == (not any(trusted for trusted, _, _ in found))
