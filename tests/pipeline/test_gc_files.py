"""``chunkline gc`` on an output whose published run keeps rows in an earlier run's files
(merge-on-read, ``chunkline.index.tables``): of an unkept run's folder exactly the files a kept
run lists stay, the rest goes (its manifest with it: it is no longer a run); a kept run reads as
it did. Hand-made runs, no pipeline: small and fast."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from chunkline.index.manifest import load_manifest
from chunkline.index.tables import read_table, shard_deletion_file
from chunkline.pipeline.cli import main
from chunkline.pipeline.runs import collect, file_problems, size_text

OLD, BASE, NEW = "20261201T000000Z-00000000-000000", "20261202T000000Z-00000000-000000", \
    "20261203T000000Z-00000000-000000"


def write(path: Path, doc_ids: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"doc_id": pa.array(doc_ids, pa.string())}), path)


def files_of(directory: Path) -> set[str]:
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}


def manifest(run_id: str, tables: dict, **more) -> dict:
    return {"run_id": run_id, "counts": {"documents": 0, "kept": 0, "chunks": 0}, "config": {},
            "format": 2, "tables": tables, **more}


def build(output: Path) -> None:
    """OLD: a run nothing references. BASE: two chunk shards, documents, memo, report. NEW
    (LATEST): BASE's first shard with rows deleted (in NEW's deletion file of that shard, as its
    shard writer writes it), its own second
    shard, BASE's documents file; its own memo segment."""
    write(output / OLD / "chunks-00000-of-00001.parquet", ["z"])
    (output / OLD / "manifest.json").write_text(json.dumps(manifest(OLD, {
        "chunks": [{"path": f"{OLD}/chunks-00000-of-00001.parquet", "rows": 1}], "documents": [],
        "rejected": []})))
    for name, ids in [("chunks-00000-of-00002.parquet", ["a", "b", "c", "d"]),
                      ("chunks-00001-of-00002.parquet", ["e", "f"]), ("documents-00000-of-00001.parquet", ["a"]),
                      ("memo/clean-00000-of-00016-x.parquet", ["m"])]:
        write(output / BASE / name, ids)
    (output / BASE / "report.html").write_text("<html></html>")
    (output / BASE / "manifest.json").write_text(json.dumps(manifest(BASE, {
        "chunks": [{"path": f"{BASE}/chunks-00000-of-00002.parquet", "rows": 4},
                   {"path": f"{BASE}/chunks-00001-of-00002.parquet", "rows": 2}],
        "documents": [{"path": f"{BASE}/documents-00000-of-00001.parquet", "rows": 1}], "rejected": [],
        "memo": [{"path": f"{BASE}/memo/clean-00000-of-00016-x.parquet", "rows": 1}]})))
    write(output / NEW / "chunks-00001-of-00002.parquet", ["e", "g"])
    write(output / NEW / "memo" / "clean-00000-of-00016-y.parquet", ["m"])
    first, described = shard_deletion_file(
        NEW, "chunks", 0, [{"path": f"{BASE}/chunks-00000-of-00002.parquet", "rows": 4, "deleted": [1, 3],
                            "shard": 0}],
        lambda path, data: ((output / path).parent.mkdir(parents=True, exist_ok=True),
                            (output / path).write_bytes(data)))
    tables = {"chunks": [*first, {"path": f"{NEW}/chunks-00001-of-00002.parquet", "rows": 2, "shard": 1}],
              "documents": [{"path": f"{BASE}/documents-00000-of-00001.parquet", "rows": 1}], "rejected": [],
              "memo": [{"path": f"{NEW}/memo/clean-00000-of-00016-y.parquet", "rows": 1}]}
    (output / NEW / "manifest.json").write_text(json.dumps(manifest(
        NEW, tables, format=4, deletes={"chunks": [described]}, counts={"documents": 1, "kept": 1, "chunks": 4})))
    (output / "LATEST").write_text(NEW + "\n")


def test_gc_keeps_exactly_the_files_a_kept_run_lists(tmp_path) -> None:
    output = tmp_path / "index"
    build(output)
    new_files = files_of(output / NEW)
    before = read_table(str(output / NEW), load_manifest(str(output / NEW)), "chunks")
    assert before.column("doc_id").to_pylist() == ["a", "c", "e", "g"]
    out, err = io.StringIO(), io.StringIO()
    assert main(["gc", str(output), "--keep", "0", "--dry-run"], out, err) == 0, err.getvalue()
    gone = sum((output / BASE / n).stat().st_size for n in files_of(output / BASE)
               if n not in ("chunks-00000-of-00002.parquet", "documents-00000-of-00001.parquet"))
    assert f"would remove {BASE}  complete, all but the files run {NEW} lists  {size_text(gone)}" in out.getvalue()
    assert files_of(output / BASE) != set()

    done = collect(str(output), keep=0)
    assert {r.name for r in done.removed} == {OLD, BASE}
    assert next(r for r in done.removed if r.name == BASE).size == gone
    assert not (output / OLD).exists()
    # Of BASE, the two files NEW lists; its manifest, memo, report and the shard NEW replaced gone.
    assert files_of(output / BASE) == {"chunks-00000-of-00002.parquet", "documents-00000-of-00001.parquet"}
    assert files_of(output / NEW) == new_files  # with its deletion file and memo segment
    assert "deletes/chunks-00000.parquet" in new_files
    run_dir = str(output / NEW)
    assert read_table(run_dir, load_manifest(run_dir), "chunks").equals(before)
    assert file_problems(run_dir, load_manifest(run_dir)) == []
    assert any(k.name == BASE and NEW in k.why for k in done.kept)

    again = collect(str(output), keep=0)  # BASE is no run now; what NEW lists still stays
    assert again.removed == [] and any(k.name == BASE for k in again.kept)
    assert files_of(output / BASE) == {"chunks-00000-of-00002.parquet", "documents-00000-of-00001.parquet"}
