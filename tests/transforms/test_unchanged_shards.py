"""A shard whose rows the previous run already wrote is referenced, not written again
(``WriteParquetShards(previous=...)``: the shard's listing names the previous run's file, as the
manifest will); of a shard where some rows changed, only those are written, the previous rows
they replace deleted (merge-on-read by row). A previous file is read only when it reads whole,
and whatever the shard's files, its live rows are those of a fresh write."""

from __future__ import annotations

import json
import os
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.index.manifest_types import parse_listing
from chunkline.index.tables import read_table
from chunkline.records import DocumentStatus, document_schema
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.coders import statuses_table
from chunkline.index.compaction import HARD_MOST_DEAD, Compaction
from chunkline.transforms.write import ROWS_DIGEST_KEY, WriteParquetShards

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

SHARDS = 3


def statuses(edited: int | None = None) -> list[DocumentStatus]:
    return [DocumentStatus(f"d{i:03d}", f"/c/d{i:03d}.md",
                           f"text {i} " * (i + 1) + ("edited" if i == edited else ""),
                           f"h{i}", "kept", metadata='{"source_uri": "/c"}', input_digest=f"i{i}")
            for i in range(40)]


def write(directory: Path, records: list[DocumentStatus], previous_run: Path | None,
          made_under: str = "signature-1", compactable: Compaction | None = None) -> None:
    previous = None
    if previous_run is not None and (previous_run / "_listing").is_dir():
        # A run written here: the files its listings name (its own and earlier ones), with
        # the positions no longer live, as the job's plan reads them from the manifest.
        previous = (made_under, [(str(previous_run.parent / entry["path"]), tuple(entry["deleted"]))
                                 for index in range(SHARDS) for entry in listing(previous_run, index)])
    elif previous_run is not None:
        previous = (made_under, sorted(str(path) for path in previous_run.glob("documents-*")))
    with fnapi_pipeline() as p:
        (p | beam.Create(list(reversed(records)))
           | WriteParquetShards(str(directory), "documents", document_schema(), SHARDS,
                                record_type=DocumentStatus, shard_key=lambda r: r.doc_id,
                                sort_key=lambda r: (r.doc_id, r.uri, r.status), previous=previous,
                                to_table=statuses_table, compactable=compactable))


def shard(directory: Path, index: int) -> Path:
    return directory / f"documents-{index:05d}-of-{SHARDS:05d}.parquet"


def listing(directory: Path, index: int) -> list[dict]:
    """The shard's files as its listing names them (``chunkline.transforms.write.write_listing``): this
    run's own and the previous run's, paths relative to their common parent, with deletions
    (read back from the shard's deletion file, which the listing references)."""
    listed = json.loads((directory / "_listing" / f"documents-{index:05d}.json").read_text())
    positions: dict[str, list[int]] = {}
    if listed["deletes"] is not None:
        held = pq.read_table(directory.parent / listed["deletes"]["path"])
        for name, at in zip(held.column("file").to_pylist(), held.column("pos").to_pylist()):
            positions.setdefault(name, []).append(at)
    return [{**{k: v for k, v in entry.items() if k != "deleted_rows"}, "deleted": positions.get(entry["path"], [])}
            for entry in listed["files"]]


def listed(directory: Path, index: int) -> Path:
    """The one file the shard's listing names, every row of it live."""
    entries = listing(directory, index)
    assert len(entries) == 1 and entries[0]["deleted"] == [] and entries[0]["shard"] == index
    return directory.parent / entries[0]["path"]


def live(directory: Path, index: int) -> pa.Table:
    """The shard's live rows, as a reader reads them (``chunkline.index.tables``)."""
    listed = parse_listing({"format": 2, "tables": {"documents": listing(directory, index)}}, where=str(directory))
    return read_table(str(directory), listed, "documents")


@pytest.fixture()
def first(tmp_path) -> Path:
    run = tmp_path / "first"
    write(run, statuses(), previous_run=tmp_path / "none")  # no previous shard: all written
    return run


def test_unchanged_shards_are_referenced_and_equal_a_fresh_write(first, tmp_path) -> None:
    write(tmp_path / "second", statuses(), previous_run=first)
    write(tmp_path / "second", statuses(), previous_run=first)
    write(tmp_path / "fresh", statuses(), previous_run=None)
    for index in range(SHARDS):
        assert listed(tmp_path / "second", index) == shard(first, index)
        assert not shard(tmp_path / "second", index).exists()  # nothing copied or linked
        assert live(tmp_path / "second", index).equals(pq.read_table(shard(tmp_path / "fresh", index)))
        assert ROWS_DIGEST_KEY in pq.read_metadata(shard(first, index)).metadata


def test_a_changed_record_is_written_alone_the_old_row_deleted(first, tmp_path) -> None:
    """Merge-on-read by row: the touched shard keeps the previous file with the edited row's
    position deleted, and this run's file holds that one row; read, it is the fresh shard."""
    from chunkline.transforms.write import shard_of

    edited = 7
    write(tmp_path / "second", statuses(edited=edited), previous_run=first)
    write(tmp_path / "fresh", statuses(edited=edited), previous_run=None)
    touched = shard_of(f"d{edited:03d}", SHARDS)
    for index in range(SHARDS):
        fresh = pq.read_table(shard(tmp_path / "fresh", index))
        assert live(tmp_path / "second", index).equals(fresh)
        if index != touched:
            assert listed(tmp_path / "second", index) == shard(first, index)
            continue
        previous, own = listing(tmp_path / "second", index)
        at = pq.read_table(shard(first, index)).column("doc_id").to_pylist().index(f"d{edited:03d}")
        assert previous == {"path": f"first/{shard(first, index).name}", "rows": len(fresh),
                            "deleted": [at], "shard": index}
        assert own["path"] == f"second/{shard(first, index).name}" and own["rows"] == 1


def test_other_processing_keeps_only_rows_equal_by_value(first, tmp_path) -> None:
    """Another signature: no shard is taken by its digest, but rows are compared value for
    value, so equal rows stay where they are."""
    write(tmp_path / "second", statuses(edited=3), previous_run=first, made_under="signature-2")
    write(tmp_path / "fresh", statuses(edited=3), previous_run=None)
    for index in range(SHARDS):
        assert live(tmp_path / "second", index).equals(pq.read_table(shard(tmp_path / "fresh", index)))


@pytest.mark.parametrize("damage", ["flip a byte of a page", "flip the last data byte", "truncate",
                                    "drop the footer key"])
def test_a_damaged_previous_shard_is_never_read_as_intact(first, tmp_path, damage) -> None:
    """A page whose checksum fails or a file cut short is written again, whole; a file that
    reads back whole (its footer key dropped, a byte no value holds) may stay, row for row the
    fresh shard's."""
    path = shard(first, 0)
    data = bytearray(path.read_bytes())
    if damage == "flip a byte of a page":
        data[len(data) // 3] ^= 0xFF  # inside the text column's pages, not the footer
    elif damage == "flip the last data byte":
        # The byte just before the footer: covered by the data digest, past every page checksum.
        footer = int.from_bytes(data[-8:-4], "little")
        data[len(data) - 8 - footer - 1] ^= 0x01
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        table = pq.read_table(path)
        pq.write_table(table.replace_schema_metadata({}), path, compression="zstd")
        data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data))
    write(tmp_path / "second", statuses(), previous_run=first)
    write(tmp_path / "fresh", statuses(), previous_run=None)
    if damage in ("flip a byte of a page", "truncate"):
        assert listed(tmp_path / "second", 0) == shard(tmp_path / "second", 0)
    for index in range(SHARDS):
        assert live(tmp_path / "second", index).equals(pq.read_table(shard(tmp_path / "fresh", index)))
    for index in range(1, SHARDS):
        assert listed(tmp_path / "second", index) == shard(first, index)


def test_a_retried_bundle_never_writes_into_the_previous_runs_file(first, tmp_path) -> None:
    # Hard links to the previous run's shards where this run writes (what a first attempt by an
    # older chunkline, which linked unchanged shards, left): a write never goes through them.
    second = tmp_path / "second"
    second.mkdir()
    before = {index: shard(first, index).read_bytes() for index in range(SHARDS)}
    for index in range(SHARDS):
        os.link(shard(first, index), shard(second, index))
    write(second, statuses(edited=7), previous_run=first)  # some written, the rest referenced
    write(tmp_path / "fresh", statuses(edited=7), previous_run=None)
    for index in range(SHARDS):
        assert shard(first, index).read_bytes() == before[index]  # the previous run's, untouched
        assert live(second, index).equals(pq.read_table(shard(tmp_path / "fresh", index)))


def status(doc_id: str, text: str) -> DocumentStatus:
    return DocumentStatus(doc_id, f"/c/{doc_id}.md", text, f"h{doc_id}", "kept",
                          metadata='{"source_uri": "/c"}', input_digest=f"i{doc_id}")


def test_compaction_keeps_each_shard_in_few_mostly_live_files(first, tmp_path) -> None:
    """Reruns that each add a document to shard 0 pile up small files until the shard would list
    more than MOST_FILES: then all but the largest are merged into the run's file. Reruns that
    each edit another document of shard 0 delete rows of the base file until more than MOST_DEAD
    of them are dead: then its live rows are written again. Every run reads as a fresh write."""
    from chunkline.index.compaction import MOST_DEAD, MOST_FILES
    from chunkline.transforms.write import shard_of

    records = statuses()
    added = [f"n{i:03d}" for i in range(300) if shard_of(f"n{i:03d}", SHARDS) == 0][:MOST_FILES + 1]
    previous, most = first, 0
    for step, doc_id in enumerate(added):
        records = records + [status(doc_id, f"added {doc_id}")]
        run = tmp_path / f"add{step}"
        write(run, records, previous_run=previous)
        most = max(most, len(listing(run, 0)))
        assert len(listing(run, 0)) <= MOST_FILES
        previous = run
    write(tmp_path / "fresh", records, previous_run=None)
    assert most == MOST_FILES and len(listing(previous, 0)) < MOST_FILES  # it filled, then merged
    assert live(previous, 0).equals(pq.read_table(shard(tmp_path / "fresh", 0)))
    base = [r for r in statuses() if shard_of(r.doc_id, SHARDS) == 0]
    compacted = False
    for step, edited in enumerate(base[:6]):
        records = [status(r.doc_id, r.text + " edited") if r.doc_id == edited.doc_id else r for r in records]
        run = tmp_path / f"edit{step}"
        write(run, records, previous_run=previous)
        for entry in listing(run, 0):
            assert len(entry["deleted"]) <= MOST_DEAD * entry["rows"], entry
        # A file with deleted rows that the run no longer lists: its live rows were rewritten.
        paths = {entry["path"] for entry in listing(run, 0)}
        compacted |= any(entry["deleted"] and entry["path"] not in paths for entry in listing(previous, 0))
        previous = run
    write(tmp_path / "fresh2", records, previous_run=None)
    assert compacted and live(previous, 0).equals(pq.read_table(shard(tmp_path / "fresh2", 0)))


@pytest.mark.parametrize("share, allowed, purge, compacted", [
    (0.3, False, False, False),  # past MOST_DEAD, not allowed this run: referenced, its deletions grow
    (0.3, True, False, True),  # past MOST_DEAD and allowed: its live rows written again
    (0.5, False, False, True),  # past HARD_MOST_DEAD: compacted, allowed or not
    (0.0, False, False, False),  # one row dead: referenced
    (0.0, False, True, True),  # one row dead under a purge: no dead row stays in what the run lists
])
def test_compaction_waits_for_the_runs_allowance_up_to_the_hard_bound(first, tmp_path, share, allowed,
                                                                      purge, compacted) -> None:
    """A file past MOST_DEAD is compacted by a run whose plan allows it (its budget), one past
    HARD_MOST_DEAD by any run, one with any dead row by a purging run; either way the shard
    reads as a fresh write."""
    from chunkline.index.compaction import HARD_MOST_DEAD, MOST_DEAD
    from chunkline.transforms.write import shard_of

    assert MOST_DEAD < 0.3 < HARD_MOST_DEAD < 0.5
    base = [r for r in statuses() if shard_of(r.doc_id, SHARDS) == 0]
    edited = {r.doc_id for r in base[: round(share * len(base)) + 1]}
    records = [status(r.doc_id, r.text + " edited") if r.doc_id in edited else r for r in statuses()]
    path = str(shard(first, 0))
    write(tmp_path / "second", records, previous_run=first,
          compactable=Compaction(frozenset({path} if allowed else ()), purge))
    write(tmp_path / "fresh", records, previous_run=None)
    paths = [entry["path"] for entry in listing(tmp_path / "second", 0)]
    assert (f"first/{shard(first, 0).name}" not in paths) == compacted
    assert live(tmp_path / "second", 0).equals(pq.read_table(shard(tmp_path / "fresh", 0)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 1000), st.integers(1, 10**7)), max_size=12))
def test_the_allowance_is_the_most_dead_files_within_the_budget(files) -> None:
    """Most dead first, while the bytes taken stay under TABLE_REWRITE_SHARE of the table's, or the
    floor (the last may pass it); no file left out is deader than one taken."""
    from chunkline.index.tables import Deletions, LiveFile
    from chunkline.index.compaction import REWRITE_FLOOR, TABLE_REWRITE_SHARE, compaction_allowed

    live = [LiveFile(f"/o/r/f{n}", f"r/f{n}", "r", rows, size, deletions=Deletions(min(dead, rows)))
            for n, (rows, dead, size) in enumerate(files)]
    allowed = compaction_allowed(live).files
    budget = max(REWRITE_FLOOR, TABLE_REWRITE_SHARE * sum(f.bytes for f in live))
    taken = [f for f in live if f.path in allowed]
    share = {f.path: f.deletions.count / f.rows for f in live}
    assert all(share[t.path] >= share[f.path] for t in taken for f in live if f.path not in allowed)
    assert sum(f.bytes for f in taken) - max((f.bytes for f in taken), default=0) < budget
    assert bool(taken) == bool(live)
    if sum(f.bytes for f in live) <= REWRITE_FLOOR:
        assert len(taken) == len(live)  # a small table: every file may be compacted


def write_keeping(directory: Path, records: list[DocumentStatus], previous_run: Path,
                  kept: list[str], compactable: Compaction | None = None) -> None:
    """:func:`write` of ``records`` with ``keep``: the previous rows of the ``kept`` ids stay
    (a rerun's settled documents passed by), those of every other previous id are redecided
    (transforms/settle.py)."""
    from chunkline.transforms.write import Redecided, shard_of

    previous = ("signature-1", [(str(previous_run.parent / entry["path"]), tuple(entry["deleted"]))
                                for index in range(SHARDS) for entry in listing(previous_run, index)])
    before = {row["doc_id"] for index in range(SHARDS) for entry in listing(previous_run, index)
              for row in pq.read_table(previous_run.parent / entry["path"], columns=["doc_id"]).to_pylist()}
    by_shard: dict[int, list[str]] = {index: [] for index in range(SHARDS)}
    for doc_id in sorted(before - set(kept)):
        by_shard[shard_of(doc_id, SHARDS)].append(doc_id)
    with fnapi_pipeline() as p:
        keep = p | "Keep" >> beam.Create([(index, Redecided(tuple(ids))) for index, ids in by_shard.items()])
        (p | beam.Create(list(reversed(records)))
           | WriteParquetShards(str(directory), "documents", document_schema(), SHARDS,
                                record_type=DocumentStatus, shard_key=lambda r: r.doc_id,
                                sort_key=lambda r: (r.doc_id, r.uri, r.status), previous=previous,
                                to_table=statuses_table, keep=keep, compactable=compactable))


@settings(max_examples=6, deadline=None)
@given(st.lists(st.sampled_from(["keep", "edit", "drop", "reject"]), min_size=40, max_size=40),
       st.integers(0, 5))
def test_kept_ids_stay_where_they_lie_and_the_rest_is_this_runs(tmp_path_factory, fates, added) -> None:
    """With ``keep``, a shard is the previous live rows of the kept ids, where they lie, and this
    run's records, written beside them; every other previous row is deleted (a rejected row
    never kept by id); read, it is a fresh write of the same rows."""
    from chunkline.records import REJECTED

    base = tmp_path_factory.mktemp("keep")
    first = base / "first"
    original = statuses()
    write(first, original, previous_run=base / "none")
    kept = [row.doc_id for row, fate in zip(original, fates) if fate == "keep"]
    records = [DocumentStatus(row.doc_id, row.uri, row.text + " edited", row.doc_hash, "kept",
                              metadata=row.metadata, input_digest=row.input_digest)
               for row, fate in zip(original, fates) if fate == "edit"]
    # A rejection under a kept document's id is this run's row; the kept one stays beside it.
    records += [DocumentStatus(row.doc_id, row.uri + "#2", "", "", REJECTED)
                for row, fate in zip(original, fates) if fate == "reject"]
    records += [DocumentStatus(f"n{i}", f"/c/n{i}.md", f"new {i}", f"hn{i}", "kept", metadata="{}")
                for i in range(added)]
    # No compaction but the hard bound's: a kept row stays in its file unless that file is
    # mostly dead.
    write_keeping(base / "second", records, first, kept, compactable=Compaction())
    fresh_rows = [row for row in original if row.doc_id in set(kept)] + records
    write(base / "fresh", fresh_rows, previous_run=None)
    for index in range(SHARDS):
        assert live(base / "second", index).equals(pq.read_table(shard(base / "fresh", index)))
        entries = listing(base / "second", index)
        held = [entry for entry in entries if entry["path"].startswith("first/")]
        before = pq.read_table(shard(first, index)).num_rows
        staying = sum(1 for doc_id in kept if shard_of_id(doc_id) == index)
        if before and (before - staying) / before <= HARD_MOST_DEAD:
            # Nothing of the previous file is copied: a kept row is live where it was written.
            assert sum(entry["rows"] - len(entry["deleted"]) for entry in held) == staying
        else:  # mostly dead: compacted, its kept rows written again with this run's
            assert not held


def shard_of_id(doc_id: str) -> int:
    from chunkline.transforms.write import shard_of

    return shard_of(doc_id, SHARDS)
