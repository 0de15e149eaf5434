"""The rerun's closure as the pipeline runs it (``transforms/settle.py``): settled rows sent as
bitmaps per block of a state file, the state table read a row group at a time, a pass per
round, against the in-memory rule (``chunkline.settle.dedupe_affected``) over the same rows.

The state files are written with row groups of three rows, read three groups at a time, and
the bitmaps cut every five rows, so a bitmap spans groups and a group spans bitmaps; rows are deleted, ids, hashes, band keys and
survivors drawn from small pools so that every clause of the rule is reached.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.pvalue import AsList, AsSingleton
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chunkline.index.tables import Deletions
from chunkline.settle import Csr, SettledState, Touch, dedupe_affected
from chunkline.state import SettledBatch, state_schema, state_source
from chunkline.transforms.settle import (DOCUMENT_IDS, REACHED, REDECIDED, STATE_IDS, Affected, ReachedPlaces,
                                         settled_mask, settled_rows)
from tests.beam_helpers import fnapi_pipeline

BANDS = 2
MASK_ROWS = 5
BLOCK_ROWS = 7  # blocks of three row groups of three rows
SHARDS = 2


@st.composite
def states(draw):
    """Per state file, its rows (doc_id, doc_hash, bands or None, status, survivor), which rows
    are deleted and which settled; and the touches (id, hash, bands or None)."""
    files = []
    for _ in range(SHARDS):
        size = draw(st.integers(0, 14))
        rows = []
        for n in range(size):
            doc_id = draw(st.sampled_from([f"d{i}" for i in range(12)]))
            survivor = draw(st.sampled_from([doc_id, doc_id, "d0", "d1", "d2"]))
            bands = draw(st.one_of(st.none(), st.tuples(*[st.integers(0, 9)] * BANDS)))
            rows.append((doc_id, draw(st.sampled_from("hjklmnop")), bands,
                         "kept" if survivor == doc_id else "duplicate", survivor))
        deleted = draw(st.sets(st.integers(0, max(0, size - 1)), max_size=3)) if size else set()
        settled = {n for n in range(size) if n not in deleted and draw(st.booleans())}
        files.append((rows, sorted(deleted), settled))
    touches = draw(st.lists(st.tuples(st.sampled_from([f"d{i}" for i in range(14)]), st.sampled_from("hjkm"),
                                      st.one_of(st.none(), st.tuples(*[st.integers(0, 6)] * BANDS))),
                            max_size=3))
    return files, touches, draw(st.integers(1, 3))


def write_state(directory, files) -> list[str]:
    paths = []
    for shard, (rows, _, _) in enumerate(files):
        path = directory / f"state-{shard:05d}-of-{SHARDS:05d}.parquet"
        table = pa.table({
            "doc_id": [r[0] for r in rows], "uri": [f"/c/{shard}/{n}" for n in range(len(rows))],
            "position": [0] * len(rows), "input_digest": ["i"] * len(rows), "facts": ["f"] * len(rows),
            "text_hash": pa.nulls(len(rows), pa.binary(32)), "line_keys": pa.nulls(len(rows), pa.list_(pa.uint64())),
            "doc_hash": [r[1] for r in rows],
            "bands": pa.array([list(r[2]) if r[2] is not None else None for r in rows], pa.list_(pa.uint64())),
            "status": [r[3] for r in rows], "survivor": [r[4] for r in rows]}, schema=state_schema())
        pq.write_table(table, path, row_group_size=3)
        paths.append(str(path))
    return paths


def batches(files) -> list[SettledBatch]:
    """The settled rows, two batches per file in a shuffled order (as bundles send them)."""
    out = []
    for file, (rows, _, settled) in enumerate(files):
        order = sorted(settled, key=lambda n: (n * 7) % 5)
        for part in (order[::2], order[1::2]):
            if part:
                out.append(SettledBatch(tuple(rows[n][0] for n in part), tuple(f"/c/{file}/{n}" for n in part),
                                        np.zeros(len(part), np.int64), np.full(len(part), -1, np.int64),
                                        np.full(len(part), -1, np.int64), None,
                                        np.full(len(part), file, np.int64), np.array(part, np.int64)))
    return out


def reference(files, touches, cap):
    """The in-memory rule over the settled rows, the changed and gone ones (live, not settled)
    brought as touch."""
    settled = [(file, n, rows[n]) for file, (rows, deleted, chosen) in enumerate(files) for n in sorted(chosen)]
    old = [rows[n] for rows, deleted, chosen in files for n in range(len(rows))
           if n not in deleted and n not in chosen]
    state = SettledState(np.array([r[0] for _, _, r in settled], dtype=object),
                         np.array([r[1] for _, _, r in settled], dtype=object),
                         np.array([r[2] if r[2] is not None else (0,) * BANDS for _, _, r in settled],
                                  np.uint64).reshape(-1, BANDS),
                         np.array([r[2] is not None for _, _, r in settled], bool),
                         np.array([r[4] for _, _, r in settled], dtype=object),
                         Csr.of([[]] * len(settled)), Csr.of([[]] * len(settled)))
    touch = Touch(np.array([t[0] for t in touches] + [r[0] for r in old], dtype=object),
                  np.array([t[1] for t in touches] + [r[1] for r in old], dtype=object),
                  np.array([k for t in touches if t[2] is not None for k in t[2]]
                           + [k for r in old if r[2] is not None for k in r[2]], np.uint64),
                  np.array([r[4] for r in old], dtype=object))
    hit = dedupe_affected(state, touch, max_bucket_pairs=cap)
    reached = sorted((file << 40) + n for (file, n, _), marked in zip(settled, hit) if marked)
    redecided = sorted({r[0] for r in old} | {r[0] for (_, _, r), marked in zip(settled, hit) if marked})
    return reached, redecided


# A changed row whose previous survivor is a settled row's, with nothing else in common.
SURVIVOR_ONLY = ([([("d1", "h", (1, 1), "duplicate", "d0")], [], {0}),
                  ([("d5", "j", (2, 2), "duplicate", "d0")], [], set())], [], 1)


@settings(max_examples=12, deadline=None)
@example(SURVIVOR_ONLY)
@given(states())
def test_the_closure_read_by_blocks_is_the_rule_in_memory(tmp_path_factory, drawn) -> None:
    files, touches, cap = drawn
    directory = tmp_path_factory.mktemp("state")
    paths = write_state(directory, files)
    source = state_source([(path, Deletions.listed(tuple(deleted))) for path, (_, deleted, _) in zip(paths, files)])
    assert source is not None
    reached, redecided = reference(files, touches, cap)
    places = {f"/c/{file}/{n}" for code in reached for file, n in [(code >> 40, code & ((1 << 40) - 1))]}
    with fnapi_pipeline() as p:
        remaining = p | "Batches" >> beam.Create(batches(files))
        masks = (remaining
                 | beam.FlatMap(settled_rows, MASK_ROWS)
                 | beam.GroupByKey()
                 | beam.Map(settled_mask, MASK_ROWS))
        touch = p | "Touches" >> beam.Create([(t[0], t[1], None if t[2] is None else np.array(t[2], np.uint64))
                                              for t in touches])
        decided = (p | beam.Create([None])
                   | beam.ParDo(Affected(source, BANDS, cap, 1, 4, MASK_ROWS, BLOCK_ROWS), AsList(masks), AsList(touch),
                                AsList(p | "NoDamage" >> beam.Create([])))
                   .with_outputs(REACHED, DOCUMENT_IDS, STATE_IDS, REDECIDED))
        assert_that(decided[REACHED] | beam.Map(lambda codes: sorted(codes.tolist())), equal_to([reached]),
                    label="reached")
        assert_that(decided[REDECIDED] | beam.Map(lambda ids: sorted(ids.to_pylist())), equal_to([redecided]),
                    label="redecided")
        assert_that(decided[DOCUMENT_IDS] | beam.Map(lambda kv: (kv[0], sorted(kv[1].doc_ids))),
                    equal_to([(0, redecided)]), label="documents")
        assert_that(decided[STATE_IDS] | beam.Map(lambda kv: kv[0]), equal_to(list(range(SHARDS))), label="every shard")
        found = remaining | beam.ParDo(ReachedPlaces(), AsSingleton(decided[REACHED])) | beam.Map(lambda p: p.uri)
        assert_that(found, equal_to(sorted(places)), label="places")
