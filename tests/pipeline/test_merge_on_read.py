"""Every reader of a run through :mod:`chunkline.index.tables`: a run whose manifest (format 2)
references the demo run's files with one document's rows deleted reads, in every reader, as the
same run written whole without that document (its own files, no row deleted): the search index and
``query``, the rows a sync writes (a store synced from one takes the other as unchanged), the
report, ``publish``'s checks; and ``gc`` keeps the folder whose files it references."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkline.carry import CARRY_TABLE
from chunkline.memo import MEMO_TABLE
from chunkline.index.manifest import latest_run, load_manifest
from chunkline.index.manifest_types import to_json
from chunkline.index.query import search_result
from chunkline.index.ranking import load_chunks
from chunkline.index.search import Index
from chunkline.index.tables import listed_paths, live_files
from chunkline.pipeline.cli import main
from chunkline.pipeline.report.gather import gather
from chunkline.pipeline.runs import collect, file_problems, publishable
from tests.iceberg_engines import assert_engines_read
from chunkline.pipeline.sync.rows import load_rows, terms_table
from tests.pipeline.sync_cases import synced

pytestmark = pytest.mark.slow

WHOLE = "20990101T000000Z-00000000-00000a"  # rewritten without the document
MERGED = "20990101T000001Z-00000000-00000b"  # the demo run's files, the document's rows deleted
QUESTIONS = ("how long should the arm warm up?", "dock charger warranty", "spare parts")


@pytest.fixture(scope="module")
def outputs(demo_index, tmp_path_factory) -> tuple[Path, str, str]:
    """(an output holding a copy of the demo run, its id, the doc_id left out) with the runs
    WHOLE and MERGED beside it; LATEST names MERGED."""
    output = tmp_path_factory.mktemp("merge-on-read") / "index"
    shutil.copytree(demo_index.output, output)
    base_dir = Path(latest_run(str(output)))
    base = json.loads((base_dir / "manifest.json").read_text())  # the JSON the runs below are made of
    # A first run: every file in its own folder, no row deleted (its memo segments aside: no
    # reader's rows).
    files = {table: [entry["path"].split("/", 1)[1] for entry in listed]
             for table, listed in base["tables"].items() if table != MEMO_TABLE}
    documents = pq.read_table(base_dir / files["documents"][0])
    chunked = {d for name in files["chunks"] for d in pq.read_table(base_dir / name,
                                                                   columns=["doc_id"]).column(0).to_pylist()}
    gone = sorted(d for d, s in zip(documents.column("doc_id").to_pylist(),
                                   documents.column("status").to_pylist()) if s == "kept" and d in chunked)[1]

    entries: dict[str, list[dict]] = {}
    whole_entries: dict[str, list[dict]] = {}
    (output / WHOLE).mkdir()
    removed = {"chunks": 0, "documents": 0}
    for table, names in files.items():
        entries[table], whole_entries[table] = [], []
        for name in names:
            rows = pq.read_table(base_dir / name)
            if table in ("chunks", "documents", CARRY_TABLE) and "doc_id" in rows.column_names:
                hit = pc.equal(rows.column("doc_id"), gone).to_numpy(zero_copy_only=False)
            elif table == CARRY_TABLE:  # aligned with its chunk shard, row for row
                shard = pq.read_table(base_dir / name.replace(CARRY_TABLE, "chunks", 1), columns=["doc_id"])
                hit = pc.equal(shard.column("doc_id"), gone).to_numpy(zero_copy_only=False)
            else:
                hit = [False] * len(rows)
            deleted = [i for i, h in enumerate(hit) if h]
            if table in removed:
                removed[table] += len(deleted)
            dropped = set(deleted)
            kept_rows = rows.take([i for i in range(len(rows)) if i not in dropped])
            pq.write_table(kept_rows, output / WHOLE / name)
            whole_entries[table].append({"path": f"{WHOLE}/{name}", "rows": len(kept_rows)})
            entries[table].append({"path": f"{base_dir.name}/{name}", "rows": len(rows),
                                   **({"deleted": deleted} if deleted else {})})
    assert removed["chunks"] > 0 and removed["documents"] == 1
    counts = dict(base["counts"], documents=base["counts"]["documents"] - 1,
                  kept=base["counts"]["kept"] - 1, chunks=base["counts"]["chunks"] - removed["chunks"])
    whole = dict(base, run_id=WHOLE, counts=counts, tables=whole_entries)
    (output / WHOLE / "manifest.json").write_text(json.dumps(whole))
    merged = whole | {"run_id": MERGED, "format": 2, "tables": entries}
    (output / MERGED).mkdir()
    (output / MERGED / "manifest.json").write_text(json.dumps(merged))
    (output / "LATEST").write_text(MERGED + "\n")
    return output, base_dir.name, gone


def test_the_index_and_query_read_the_merged_run_as_the_whole_one(outputs) -> None:
    output, _, gone = outputs
    whole, merged = str(output / WHOLE), str(output / MERGED)
    chunks = load_chunks(merged, load_manifest(merged))
    assert chunks.equals(load_chunks(whole, load_manifest(whole)))
    assert gone not in set(chunks.column("doc_id").to_pylist())
    a, b = Index.open(whole), Index.open(merged)
    assert len(a) == len(b)
    for question in QUESTIONS:
        for mode in ("sparse", "hybrid"):
            assert a.search(question, 5, mode=mode, expand=200) == b.search(question, 5, mode=mode, expand=200)
    assert search_result(str(output), QUESTIONS[0], 3).hits == a.search(QUESTIONS[0], 3).hits


def test_a_store_synced_from_the_whole_run_takes_the_merged_one_as_unchanged(outputs, tmp_path) -> None:
    output, base, _ = outputs
    whole, merged = str(output / WHOLE), str(output / MERGED)
    assert load_rows(merged, load_manifest(merged)).equals(load_rows(whole, load_manifest(whole)))
    assert terms_table(merged, load_manifest(merged)).equals(terms_table(whole, load_manifest(whole)))
    uri = str(tmp_path / "lance")
    before = synced(uri, str(output / base))
    first = synced(uri, merged)
    assert first.verification.ok and first.written == 0
    assert first.deleted == before.verification.rows - first.verification.rows > 0
    again = synced(uri, whole)
    assert again.verification.ok and (again.written, again.deleted) == (0, 0)


def test_the_report_and_publish_count_the_live_rows(outputs) -> None:
    output, _, _ = outputs
    whole, merged = gather(str(output / WHOLE)), gather(str(output / MERGED))
    assert (merged.formats, merged.samples, merged.histogram, merged.clusters) == \
        (whole.formats, whole.samples, whole.histogram, whole.clusters)
    assert not [w for w in merged.warnings if "documents table has" in w]
    assert file_problems(str(output / MERGED), load_manifest(str(output / MERGED))) == []
    assert publishable(str(output), MERGED).run_id == MERGED


def test_gc_keeps_exactly_the_files_the_published_run_references(outputs, tmp_path) -> None:
    output, base, _ = outputs
    copy = tmp_path / "index"
    shutil.copytree(output, copy)
    out, err = io.StringIO(), io.StringIO()
    assert main(["publish", str(copy), base], out, err) == 0, err.getvalue()  # rollback, then back
    assert main(["publish", str(copy), MERGED], out, err) == 0, err.getvalue()
    listed = {path.split("/", 1)[1] for path in listed_paths(str(copy / MERGED), load_manifest(str(copy / MERGED)))
              if path.split("/", 1)[0] == base}
    done = collect(str(copy), keep=0)
    # The base run is not kept: of its folder only the files the published run lists stay.
    assert {r.name for r in done.removed} == {WHOLE, base}
    assert any(k.name == base and MERGED in k.why for k in done.kept)
    assert {p.relative_to(copy / base).as_posix() for p in (copy / base).rglob("*") if p.is_file()} == listed
    assert Index.open(str(copy)).search(QUESTIONS[1], 3, mode="sparse") == \
        Index.open(str(output / MERGED)).search(QUESTIONS[1], 3, mode="sparse")
    # `chunkline runs` tells the thinned folder (files the published run reads) from a killed
    # run, and sizes the published run by what it references.
    out = io.StringIO()
    assert main(["runs", str(copy), "--json"], out, io.StringIO()) == 0
    described = {run["run_id"]: run for run in json.loads(out.getvalue())}
    assert described[base]["status"] == "referenced" and MERGED in described[base]["reasons"][0]
    merged_manifest = load_manifest(str(copy / MERGED))
    assert described[MERGED]["referenced_bytes"] == sum(
        (copy / path).stat().st_size for path in listed_paths(str(copy / MERGED), merged_manifest))
    assert described[MERGED]["referenced_bytes"] > 10 * described[MERGED]["bytes"]  # its rows lie in base
    # The base run's Iceberg snapshots expired with it; the published one reads as the run.
    from chunkline.index import iceberg

    current = {state.name: state.snapshot_id for state in iceberg.tables(str(copy))}
    assert described[MERGED]["snapshots"] == current and described[base]["snapshots"] == {}

    for table in iceberg.catalog(str(copy)).list_tables(iceberg.NAMESPACE):
        loaded = iceberg.catalog(str(copy)).load_table(table)
        assert {s.summary[iceberg.RUN_ID_PROPERTY] for s in loaded.metadata.snapshots} == {MERGED}
    assert_engines_read(copy, tables_of(str(copy / MERGED)))
    out, err = io.StringIO(), io.StringIO()
    assert main(["publish", str(copy), MERGED], out, err) == 0, err.getvalue()
    assert main(["publish", str(copy), base], out, err) != 0  # no longer a run


@pytest.mark.parametrize("damage", ["flipped bit", "same rows rewritten"])
def test_a_referenced_file_that_changed_is_refused_by_sync_query_index_and_publish(outputs, tmp_path,
                                                                                   damage) -> None:
    """The published run reads rows kept in an earlier run's file; one bit of it flipped (its
    size unchanged: its page checksums fail), or the file rewritten with the same rows, each
    text and search text upper-cased alike (every row consistent, only its bytes tell): sync,
    query and publish refuse it in one line naming it, and ``Index`` raises, never serving it."""
    from chunkline.index.tables import TableFileError

    output, base, _ = outputs
    copy = tmp_path / "index"
    shutil.copytree(output, copy)
    (target,) = [Path(f.path) for f in live_files(str(copy / MERGED), load_manifest(str(copy / MERGED)), "chunks")
                 if f.folder == base][:1]
    if damage == "flipped bit":
        data = bytearray(target.read_bytes())
        data[len(data) // 3] ^= 0x10
        target.write_bytes(bytes(data))
    else:
        table = pq.read_table(target)
        for column in ("text", "search_text"):
            table = table.set_column(table.schema.get_field_index(column), column,
                                     pa.array([t.upper() for t in table.column(column).to_pylist()]))
        pq.write_table(table, target, compression="zstd", write_page_checksum=True)
    # A rollback to the run that wrote the file is refused ...
    out, err = io.StringIO(), io.StringIO()
    assert main(["publish", str(copy), base], out, err) == 2
    assert target.name in err.getvalue() and len(err.getvalue().splitlines()) == 1, err.getvalue()
    # ... and, with that run published before the file changed (its manifest records each
    # file's size and digest; MERGED, made by this test, records none), every reader refuses it.
    (copy / "LATEST").write_text(base + "\n")
    out, err = io.StringIO(), io.StringIO()
    assert main(["sync", str(copy), "--to", f"lancedb://{tmp_path / 'store'}"], out, err) != 0
    assert len(err.getvalue().splitlines()) == 1 and str(target) in err.getvalue(), err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert main(["query", str(copy), QUESTIONS[0], "--mode", "sparse"], out, err) == 2
    assert len(err.getvalue().splitlines()) == 1 and str(target) in err.getvalue(), err.getvalue()
    with pytest.raises(TableFileError, match=target.name):
        Index.open(str(copy)).search(QUESTIONS[0], 3, mode="sparse")


# --- what the job writes: a property over sequences of changes ------------------------------

TINY_WORDS = ("robot arm dock charger sensor route map lidar torque gripper pallet scanner camera "
              "alert restart update rollback battery firmware aisle").split()


def tiny_document(n: int) -> str:
    """A short manual, one chunk or two; its words drawn by ``n``, so the same ``n`` gives the same
    text."""
    words = [TINY_WORDS[(n * 7 + i * 3) % len(TINY_WORDS)] for i in range(14)]
    return f"# Manual {n}\n\n{' '.join(words).capitalize()}.\n"


def tiny_job(corpus: Path, output: Path, *overrides: str):
    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run

    # With the model (a store needs vectors); a rerun embeds only new text, the rebuild none.
    return run(load_config(Path(__file__).resolve().parents[2] / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed.dtype=float32",
        "output.chunk_shards=2", "output.max_shrink=1", *overrides]))


def tables_of(run_dir: str) -> dict:
    from chunkline.index.tables import read_table

    manifest = load_manifest(run_dir)
    return {name: read_table(run_dir, manifest, name) for name in ("chunks", "documents", "rejected", "terms")}


def assert_same_tables(a: dict, b: dict) -> None:
    for name in a:
        assert (a[name] is None and b[name] is None) or a[name].equals(b[name]), name


CHANGES = st.lists(st.tuples(st.sampled_from(["add", "edit", "delete", "rename", "compact"]),
                             st.integers(0, 999)), min_size=1, max_size=3)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(CHANGES)
def test_a_rerun_that_writes_only_what_changed_reads_as_a_full_rebuild(changes) -> None:
    reruns_read_as_a_rebuild(changes)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(CHANGES)
def test_a_rerun_passing_settled_documents_by_reads_as_a_full_rebuild(changes) -> None:
    """The same, each rerun passing its unchanged documents by on the state rows the run
    before kept (transforms/settle.py)."""
    from unittest import mock

    with mock.patch("chunkline.pipeline.build.KEEP_STATE", True):
        reruns_read_as_a_rebuild(changes, settled=True)


def reruns_read_as_a_rebuild(changes, settled: bool = False) -> None:
    """Random adds, edits, deletes, renames and compactions, each followed by a rerun into one
    output (the rows of unchanged documents stay in earlier runs' files, those of the others
    deleted there): the last run reads, in every reader, as a full rebuild of the same corpus
    (the same reference length): the same tables row for row and in order, the same hits from
    the index and ``query``, and a store synced from the rebuild takes it as unchanged; and
    ``publish`` rolls back to the first run, which reads as it did. Each rerun's deletions are in
    its deletion files (the inline bound set to none)."""
    import contextlib
    import tempfile
    from unittest import mock

    from chunkline.index import compaction

    with tempfile.TemporaryDirectory(prefix="merge-on-read-") as scratch:
        root = Path(scratch)
        corpus, output = root / "corpus", root / "index"
        corpus.mkdir()
        for n in range(24):
            (corpus / f"doc{n:03d}.md").write_text(tiny_document(n), encoding="utf-8")
        first = tiny_job(corpus, output)
        first_view = tables_of(first.run_dir)
        first_hits = [Index.open(first.run_dir).search(q, 5, mode="sparse") for q in QUESTIONS]
        runs = [first]
        for change, n in changes:
            files = sorted(corpus.iterdir())
            path = files[n % len(files)]
            if change == "add":
                (corpus / f"new{n:03d}.md").write_text(tiny_document(100 + n), encoding="utf-8")
            elif change == "edit":
                path.write_text(path.read_text(encoding="utf-8") + f"\nAn edit about the dock, {n}.\n",
                                encoding="utf-8")
            elif change == "delete" and len(files) > 4:
                path.unlink()
            elif change == "rename":
                path.rename(path.with_name(f"r{n:03d}-{path.name}"))
            # A compaction: every file with a deleted row rewritten, a shard kept in one file.
            compacting = (mock.patch.multiple(compaction, MOST_DEAD=0.0, MOST_FILES=1) if change == "compact"
                          else contextlib.nullcontext())
            # Every deleted position in its shard's deletion file (format 4), none inline.
            with compacting, mock.patch("chunkline.index.tables.INLINE_DELETES", 0):
                runs.append(tiny_job(corpus, output))
            assert runs[-1].published, runs[-1].problems
            # DuckDB, pyiceberg and Polars read the Iceberg tables as chunkline reads the run.
            assert_engines_read(output, tables_of(runs[-1].run_dir))
            if settled:  # the previous run's documents that no change touched were passed by
                assert runs[-1].counts["documents_settled"] > 0, runs[-1].counts
            manifest = load_manifest(runs[-1].run_dir)
            # A real format-4 manifest (deletion files) reads and writes back byte for byte.
            assert to_json(manifest) == (Path(runs[-1].run_dir) / "manifest.json").read_text()
            assert not any(entry.deleted for entries in manifest.listing.tables.values() for entry in entries)
            assert bool(manifest.listing.deletes) == any(
                f.deleted for table in ("chunks", "documents") for f in live_files(runs[-1].run_dir, manifest, table))
            # One deletion file per shard that deletes a row, written by its shard writer in
            # this run's folder, none left unlisted (the listings with them).
            run_id = Path(runs[-1].run_dir).name
            for table, filed in manifest.listing.deletes.items():
                deleting = sorted({e.shard for e in manifest.listing.tables[table] if e.deleted_rows})
                assert [f.shard for f in filed] == deleting
                assert [f.path for f in filed] == [f"{run_id}/deletes/{table}-{s:05d}.parquet" for s in deleting]
            on_disk = sorted(p.name for p in (Path(runs[-1].run_dir) / "deletes").glob("*.parquet"))
            assert on_disk == sorted(f.path.rsplit("/", 1)[1] for filed in manifest.listing.deletes.values()
                                     for f in filed)
            assert not (Path(runs[-1].run_dir) / "_listing").exists() or \
                not any((Path(runs[-1].run_dir) / "_listing").iterdir())
        last = runs[-1]
        rebuild = tiny_job(corpus, root / "rebuild", "output.carry=false", f"output.previous={last.run_dir}")
        assert_same_tables(tables_of(last.run_dir), tables_of(rebuild.run_dir))
        assert last.counts["chunks"] == rebuild.counts["chunks"]
        assert last.counts["documents"] == rebuild.counts["documents"]
        a, b = Index.open(rebuild.run_dir), Index.open(last.run_dir)
        for question in QUESTIONS:
            for mode in ("sparse", "hybrid"):
                assert a.search(question, 5, mode=mode) == b.search(question, 5, mode=mode)
        assert search_result(str(output), QUESTIONS[0], 3, mode="sparse").hits == \
            a.search(QUESTIONS[0], 3, mode="sparse").hits
        uri = str(root / "lance")
        assert synced(uri, rebuild.run_dir).verification.ok
        again = synced(uri, last.run_dir)
        assert again.verification.ok and (again.written, again.deleted) == (0, 0)
        # What the job wrote: some rerun kept rows in an earlier run's file.
        assert any(f.folder != Path(r.run_dir).name for r in runs[1:]
                   for f in live_files(r.run_dir, load_manifest(r.run_dir), "chunks"))
        out, err = io.StringIO(), io.StringIO()
        assert main(["publish", str(output), first.run_id], out, err) == 0, err.getvalue()
        rolled = latest_run(str(output))
        assert Path(rolled).name == first.run_id
        assert_same_tables(tables_of(rolled), first_view)
        assert_engines_read(output, first_view)  # the rollback made the first snapshot current
        assert [Index.open(str(output)).search(q, 5, mode="sparse") for q in QUESTIONS] == first_hits
