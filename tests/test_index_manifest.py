"""``chunkline.index.manifest_types``: the manifest as typed values, read by one ``parse`` and
written by one ``to_json``. A manifest goes to JSON and back unchanged (a property over every
field and listing format); a real run's file reads and writes back byte for byte; a manifest of
a newer format, or with a malformed field, is one ManifestError naming the file and the field."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.index.layout import TABLES
from chunkline.index.manifest import load_manifest
from chunkline.index.manifest_types import (FORMAT, Access, Bm25, DeletionFile, Listing, Manifest, ManifestError,
                                            Model, Split, TableFile, parse, to_json, to_object)
from chunkline.memo import MEMO_TABLE, Listed

_ORDER_KEYS = set(to_object(Manifest("r", {"documents": 0, "kept": 0, "chunks": 0}, {},
                                     Listing(2, tables={"t": ()}))))
_KNOWN = _ORDER_KEYS | {"files", "format", "tables", "deletes", "embedding_signature"}

names = st.text(string.ascii_letters + string.digits + "-_.", min_size=1, max_size=8).filter(
    lambda n: n not in (".", ".."))
paths = st.builds(lambda *parts: "/".join(parts), names, names)
counts = st.integers(0, 10**6)
texts = st.text(max_size=12)
maybe_texts = st.none() | texts
numbers = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10**6, 10**6)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=8)
json_objects = st.dictionaries(texts, json_values, max_size=4)
table_names = names.filter(lambda n: n != MEMO_TABLE)


@st.composite
def inline_files(draw) -> TableFile:
    rows = draw(st.integers(0, 40))
    deleted = draw(st.none() | st.sets(st.integers(0, max(rows - 1, 0)), max_size=rows).map(sorted).map(tuple))
    return TableFile(draw(paths), rows, deleted, draw(st.none() | counts), draw(st.none() | counts),
                     draw(maybe_texts))


@st.composite
def filed_files(draw) -> TableFile:
    """A file of a table whose deletions are in deletion files (format 3: the table's; format 4:
    its shard's, shards 0-2)."""
    rows = draw(st.integers(0, 40))
    return TableFile(draw(paths), rows, None, draw(st.integers(0, 2)), draw(st.none() | counts),
                     deleted_rows=draw(st.integers(0, rows)))


def deletion_files(draw, entries: tuple[TableFile, ...], version: int) -> tuple[DeletionFile, ...]:
    """The deletion files holding ``entries``' deletions: one (format 3), one per shard that
    deletes a row (format 4, in shard order)."""
    if version == 3:
        return (DeletionFile(draw(paths), sum(e.deleted_rows or 0 for e in entries), draw(counts), draw(texts)),)
    shards = sorted({e.shard for e in entries if e.deleted_rows})
    return tuple(DeletionFile(draw(paths), sum(e.deleted_rows or 0 for e in entries if e.shard == shard),
                              draw(counts), draw(texts), shard) for shard in shards)


@st.composite
def listings(draw) -> Listing:
    version = draw(st.sampled_from([1, 2, 3, 4]))
    tables = ["terms", *draw(st.lists(table_names, max_size=3, unique=True).map(
        lambda found: [t for t in found if t != "terms"]))]
    if version == 1:
        return Listing(1, files={t: tuple(draw(st.lists(names, max_size=3))) for t in tables})
    filed = set(draw(st.sets(st.sampled_from(tables)))) if version >= 3 else set()
    listed, deletes = {}, {}
    for table in tables:
        entries = tuple(draw(st.lists(filed_files() if table in filed else inline_files(), max_size=3)))
        listed[table] = entries
        if table in filed and (found := deletion_files(draw, entries, version)):
            deletes[table] = found
    memo = draw(st.none() | st.lists(st.builds(Listed, paths, counts, counts, counts, st.none() | counts),
                                     max_size=3).map(tuple))
    return Listing(version, tables=listed, deletes=deletes, memo=memo)


finite = st.floats(min_value=0, allow_nan=False, allow_infinity=False)
bm25s = st.builds(Bm25, chunks=counts, total_length=st.none() | counts, avgdl=st.none() | finite,
                  terms=st.none() | counts, k1=st.none() | finite, b=st.none() | finite,
                  method=maybe_texts, stemmer=maybe_texts, stop_words=maybe_texts, term_ids=maybe_texts,
                  term_space=st.none() | counts, analyzer=maybe_texts, weights=maybe_texts,
                  reference_avgdl=st.none() | finite, reference_drift=st.none() | finite,
                  previous_reference_avgdl=st.none() | finite, rebased=st.none() | st.booleans())
manifests = st.builds(
    Manifest,
    run_id=texts,
    counts=st.dictionaries(texts, counts, max_size=3).map(lambda c: {"documents": 3, "kept": 2, "chunks": 5, **c}),
    config=json_objects,
    listing=listings(),
    created_at=maybe_texts, chunkline_version=maybe_texts, beam_version=maybe_texts, runner=maybe_texts,
    split=st.none() | st.builds(Split, maybe_texts, st.none() | counts, st.none() | counts,
                                st.none() | st.booleans()),
    model=st.none() | st.builds(Model, st.integers(1, 4096), maybe_texts, maybe_texts, st.none() | st.booleans(),
                                st.none() | counts, maybe_texts),
    embedding_signature=maybe_texts, carry_signature=maybe_texts, previous=maybe_texts,
    reuse_skipped=st.lists(texts, max_size=2).map(tuple),
    context=st.none() | json_objects, embed_mode=maybe_texts, bm25=st.none() | bm25s,
    boilerplate=st.none() | json_objects, credentials=st.none() | json_objects,
    ocr=st.none() | st.dictionaries(texts, counts, max_size=2),
    memo=st.none() | st.dictionaries(texts, st.dictionaries(texts, counts, max_size=2), max_size=2),
    access=st.none() | st.builds(Access, maybe_texts, st.lists(texts, max_size=2).map(tuple), maybe_texts,
                                 st.none() | counts, maybe_texts, counts, counts),
    wall_seconds=st.none() | finite, stage_seconds=st.none() | st.dictionaries(texts, finite, max_size=3),
    reconciled=st.booleans(), problems=st.lists(texts, max_size=2).map(tuple),
    unverified=st.lists(texts, max_size=2).map(tuple), held_back=st.lists(texts, max_size=2).map(tuple),
    extra=st.dictionaries(texts.filter(lambda k: k not in _KNOWN), json_values, max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(manifests)
def test_a_manifest_goes_to_json_and_back_unchanged(manifest: Manifest) -> None:
    text = to_json(manifest)
    again = parse(json.loads(text), where="manifest.json")
    assert again == manifest
    assert to_json(again) == text


def a_manifest(**changes: object) -> dict:
    """A small valid manifest as JSON (a format-2 listing of every table a run lists), changed."""
    listing = Listing(2, tables={table: (TableFile("r/x.parquet", 1, ()),) for table in (*TABLES, "terms")})
    found = to_object(Manifest("r", {"documents": 1, "kept": 1, "chunks": 1}, {"embed": None}, listing,
                               bm25=Bm25(chunks=1)))
    found.update(changes)
    return found


def written(tmp_path: Path, content: dict) -> str:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps(content))
    return str(run_dir)


def test_a_manifest_of_a_newer_format_is_refused_naming_the_file_and_both_formats(tmp_path) -> None:
    run_dir = written(tmp_path, a_manifest(format=FORMAT + 1))
    with pytest.raises(ManifestError) as refused:
        load_manifest(run_dir)
    assert str(refused.value) == (f"{run_dir}/manifest.json: not a chunkline manifest: format {FORMAT + 1} "
                                  f"was written by a newer chunkline; this one reads formats up to {FORMAT}")


@pytest.mark.parametrize("change, problem", [
    ({"created_at": 5}, "created_at is not a string"),
    ({"reconciled": "yes"}, "reconciled is not true or false"),
    ({"held_back": ["fell", 1]}, "held_back is not a list of strings"),
    ({"counts": {"documents": 1, "kept": 1}}, "counts has no chunks"),
    ({"model": {"dim": 0}}, "model.dim is missing or not a positive integer"),
    ({"model": {"dim": 4, "normalize": "yes"}}, "model.normalize is not a bool"),
    ({"split": {"max_tokens": -1}}, "split.max_tokens is not a non-negative integer"),
    ({"access": {"default": "eng"}}, "access.default is not a list of principals"),
    ({"bm25": {"chunks": 1, "k1": "high"}}, "bm25.k1 is not a number"),
    ({"wall_seconds": "3 s"}, "wall_seconds is not a number"),
    ({"stage_seconds": [1.0]}, "stage_seconds is not an object"),
    ({"previous": ["r0"]}, "previous is not a string"),
])
def test_a_malformed_field_is_one_error_naming_the_file_and_the_field(tmp_path, change, problem) -> None:
    run_dir = written(tmp_path, a_manifest(**change))
    with pytest.raises(ManifestError) as refused:
        load_manifest(run_dir)
    assert str(refused.value) == f"{run_dir}/manifest.json: not a chunkline manifest: {problem}"


def test_a_malformed_memo_segment_is_an_error_naming_it(tmp_path) -> None:
    content = a_manifest()
    content["tables"][MEMO_TABLE] = [{"path": "r/memo/a.parquet", "rows": 2, "age": "old"}]
    with pytest.raises(ManifestError, match=rf"tables\.{MEMO_TABLE}\[0\] is not a memo segment$"):
        load_manifest(written(tmp_path, content))


def test_a_manifest_from_before_a_field_existed_reads_with_its_default(tmp_path) -> None:
    """A format-1 manifest with neither ``reconciled``, ``held_back`` nor ``unverified``."""
    content = {"run_id": "r", "counts": {"documents": 1, "kept": 1, "chunks": 1}, "config": {},
               "files": {table: [] for table in TABLES}, "old_field": [1]}
    manifest = load_manifest(written(tmp_path, content))
    assert manifest.format == 1 and manifest.reconciled and manifest.publishable
    assert manifest.held_back == manifest.unverified == () and manifest.extra == {"old_field": [1]}


@pytest.mark.slow
def test_a_real_runs_manifest_reads_and_writes_back_byte_for_byte(demo_index) -> None:
    """The shared demo run (embedding, BM25, memo, carry): the file the job wrote is what
    ``to_json`` writes of what ``parse`` reads."""
    text = (Path(demo_index.run_dir) / "manifest.json").read_text()
    manifest = load_manifest(demo_index.run_dir)
    assert manifest.model is not None and manifest.bm25 is not None and manifest.listing.memo
    assert to_json(manifest) == text
