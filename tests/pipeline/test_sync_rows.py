"""The store-independent parts of ``chunkline sync``: row digests, the plan, batches, the URI,
and the byte forms the stores are written in. Properties over generated rows; no store."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkline.pipeline.sync.pgvector import parse_sparse, parse_vector, sparse_bytes, vector_bytes
from chunkline.pipeline.sync.plan import batches, make_plan
from chunkline.pipeline.sync.qdrant import point_id
from chunkline.pipeline.sync.rows import DIGEST, canonical_metadata, row_digests, schema, set_digest
from chunkline.pipeline.sync.uri import open_store, redacted, split_table

DIM = 4
text = st.text(max_size=12)
f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | text,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                           max_leaves=6)


@st.composite
def rows(draw) -> dict:
    terms = sorted(draw(st.sets(st.integers(0, 2**29 - 1), max_size=5)))
    start = draw(st.integers(0, 10**6))
    page = draw(st.none() | st.integers(1, 500))
    return {
        "chunk_id": draw(text), "doc_id": draw(text), "chunk_index": draw(st.integers(0, 1000)),
        "start": start, "end": start + draw(st.integers(0, 1000)), "headings": draw(st.lists(text, max_size=3)),
        "text": draw(text), "search_text": draw(text), "tokens": draw(st.integers(0, 512)),
        "metadata": canonical_metadata(json.dumps(draw(st.dictionaries(text, json_values, max_size=3)))),
        "page_start": page, "page_end": page, "content_key": draw(text),
        "vector": draw(st.lists(f32, min_size=DIM, max_size=DIM)),
        "sparse_indices": terms, "sparse_values": draw(st.lists(f32, min_size=len(terms), max_size=len(terms))),
    }


def table(items: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(items, schema=schema(DIM, with_digest=False))


@pytest.mark.slow
@given(st.lists(rows(), min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_a_rows_digest_depends_on_the_row_alone(items, rng) -> None:
    digests = row_digests(table(items))
    shuffled = list(range(len(items)))
    rng.shuffle(shuffled)
    again = row_digests(table([items[i] for i in shuffled]))
    assert [digests[i] for i in shuffled] == again
    sliced = table(items).slice(len(items) // 2)  # an offset into Arrow buffers changes nothing
    assert row_digests(sliced) == digests[len(items) // 2:]


@pytest.mark.slow
@given(rows(), st.sampled_from(["text", "metadata", "vector", "sparse_values", "headings", "page_end",
                                "search_text", "content_key", "start"]), st.data())
def test_any_change_to_a_synced_column_changes_the_digest(row, column, data) -> None:
    changed = dict(row)
    if column == "vector":
        i = data.draw(st.integers(0, DIM - 1))
        value = np.float32(row["vector"][i])
        changed["vector"] = [*row["vector"][:i], float(np.nextafter(value, np.float32(np.inf))), *row["vector"][i + 1:]]
    elif column == "sparse_values":
        if not row["sparse_values"]:
            changed["sparse_indices"], changed["sparse_values"] = [7], [1.0]
        else:
            changed["sparse_values"] = [float(np.nextafter(np.float32(row["sparse_values"][0]), np.float32(np.inf))),
                                        *row["sparse_values"][1:]]
    elif column == "metadata":
        changed["metadata"] = canonical_metadata(json.dumps({**json.loads(row["metadata"]), "\x00k": 1}))
    elif column == "headings":
        changed["headings"] = row["headings"] + [""]
    elif column in ("page_end", "start"):
        changed[column] = (row[column] or 0) + 1
    else:
        changed[column] = row[column] + "."
    assert row_digests(table([row]))[0] != row_digests(table([changed]))[0]


def test_fields_do_not_run_into_each_other() -> None:
    base = {"chunk_id": "a", "doc_id": "b", "chunk_index": 0, "start": 0, "end": 1, "headings": ["x", "y"],
            "text": "t", "search_text": "t", "tokens": 1, "metadata": "{}", "page_start": None,
            "page_end": None, "content_key": "k", "vector": [0.0] * DIM, "sparse_indices": [], "sparse_values": []}
    moved = {**base, "chunk_id": "ab", "doc_id": ""}
    joined = {**base, "headings": ["xy"]}
    digests = row_digests(table([base, moved, joined]))
    assert len(set(digests)) == 3


@given(st.dictionaries(text, json_values, max_size=5))
def test_canonical_metadata_ignores_key_order_and_spacing(obj) -> None:
    reordered = json.dumps(dict(reversed(list(obj.items()))), indent=2)
    assert canonical_metadata(reordered) == canonical_metadata(json.dumps(obj))
    assert canonical_metadata(canonical_metadata(reordered)) == canonical_metadata(reordered)
    assert json.loads(canonical_metadata(reordered)) == obj


@given(st.dictionaries(st.text(max_size=3), st.text(max_size=2), max_size=8),
       st.dictionaries(st.text(max_size=3), st.text(max_size=2), max_size=8))
def test_applying_the_plan_makes_the_store_equal_to_the_run(run, store) -> None:
    plan = make_plan(run, store)
    assert not set(plan.upsert) & set(plan.delete)
    after = {k: v for k, v in store.items() if k not in plan.delete}
    after.update({k: run[k] for k in plan.upsert})
    assert after == run
    assert plan.unchanged == sum(1 for k, v in run.items() if store.get(k) == v)
    assert make_plan(run, after).empty


@given(st.lists(st.integers(), max_size=40), st.integers(1, 9))
def test_batches_cover_in_order(items, size) -> None:
    parts = list(batches(items, size))
    assert [x for part in parts for x in part] == items
    assert all(0 < len(part) <= size for part in parts)


def test_set_digest_is_a_function_of_the_set() -> None:
    assert set_digest(["b", "a"], ["2", "1"]) == set_digest(["a", "b"], ["1", "2"])
    assert set_digest(["a", "b"], ["1", "2"]) != set_digest(["a", "b"], ["2", "1"])


@given(st.lists(f32, min_size=1, max_size=16))
def test_pgvector_vector_binary_round_trip(values) -> None:
    vector = np.asarray(values, np.float32)
    assert parse_vector(vector_bytes(vector)).tobytes() == vector.tobytes()


@pytest.mark.slow
@given(st.sets(st.integers(0, 2**29 - 1), max_size=20), st.data())
def test_pgvector_sparsevec_binary_round_trip(terms, data) -> None:
    indices = np.asarray(sorted(terms), np.int32)
    values = np.asarray(data.draw(st.lists(f32, min_size=len(indices), max_size=len(indices))), np.float32)
    back_indices, back_values = parse_sparse(sparse_bytes(indices, values))
    assert back_indices.tolist() == indices.tolist() and back_values.tobytes() == values.tobytes()


@given(st.text(), st.text())
def test_point_ids_are_uuids_fixed_by_the_chunk_id(a, b) -> None:
    assert point_id(a) == point_id(a) and uuid.UUID(point_id(a)).version == 5
    assert (point_id(a) == point_id(b)) == (a == b)


def test_the_table_option_leaves_the_rest_of_the_uri_as_written() -> None:
    assert split_table("postgresql:///db?host=/tmp/pg&table=t1") == ("postgresql:///db?host=/tmp/pg", "t1")
    assert split_table("lancedb:///data/idx") == ("lancedb:///data/idx", "chunks")
    assert split_table("http://localhost:6333?table=docs") == ("http://localhost:6333", "docs")
    for bad in ("1x", "a;drop", "a-b"):
        try:
            split_table(f"/x?table={bad}")
        except ValueError:
            continue
        raise AssertionError(bad)


def test_the_digest_column_is_last_and_ignored() -> None:
    assert schema(DIM).names[-1] == DIGEST


_SECRET = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="!$%*+-._~"),
                  min_size=6, max_size=20)


@given(_SECRET, st.sampled_from(["postgresql", "postgres", "https"]))
def test_a_password_never_reaches_a_message(secret: str, scheme: str) -> None:
    in_userinfo = f"{scheme}://me:{secret}@db.example:5432/search?table=chunks"
    assert secret not in redacted(in_userinfo)
    assert redacted(in_userinfo) == f"{scheme}://me:***@db.example:5432/search?table=chunks"
    in_query = f"{scheme}://db.example/search?user=me&password={secret}&table=chunks"
    assert secret not in redacted(in_query)
    assert redacted(in_query).endswith("password=***&table=chunks")


@given(st.sampled_from(["/data/lance", "lancedb:///data/lance?table=t", "qdrant:///q",
                        "postgresql://me@db:5432/search", "http://localhost:6333"]))
def test_a_uri_without_a_password_is_shown_as_written(uri: str) -> None:
    assert redacted(uri) == uri


def test_an_unknown_store_message_hides_the_password() -> None:
    with pytest.raises(ValueError) as caught:
        open_store("mysql://me:hunter2@db/search")
    assert "hunter2" not in str(caught.value) and "me:***@db" in str(caught.value)


@pytest.mark.slow
@given(rows(), st.lists(f32, min_size=5, max_size=5), st.booleans())
def test_an_older_format_row_is_outdated_only_where_the_format_explains_it(row, weights, named) -> None:
    """A store of row format 2 holds IDF inside its weights and the file facts in metadata: a
    row that differs only there is outdated, not drift; one whose text differs is drift; a file
    fact the run's row carries itself (``output.chunk_metadata`` names it) must match."""
    from chunkline.pipeline.sync.core import _format_only

    facts = {"file_size": 10, "file_modified": "2026-01-01T00:00:00Z"}
    now = dict(row, chunk_id="c", metadata=canonical_metadata(json.dumps(
        {**json.loads(row["metadata"]), **({"file_size": 10} if named else {})})))
    old = dict(now, sparse_values=weights[:len(now["sparse_indices"])],
               metadata=canonical_metadata(json.dumps({**json.loads(now["metadata"]), **facts})))
    run = table([now])
    assert _format_only(table([old]), run, {"c"}) == {"c"}
    assert _format_only(table([dict(old, text=old["text"] + "!")]), run, {"c"}) == set()
    moved = dict(old, metadata=canonical_metadata(json.dumps({**json.loads(old["metadata"]), "file_size": 11})))
    assert _format_only(table([moved]), run, {"c"}) == (set() if named else {"c"})
