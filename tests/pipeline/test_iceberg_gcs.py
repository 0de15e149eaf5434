"""A ``gs://`` output's Iceberg tables, against the GCS emulator (a real JSON API on 127.0.0.1):
with no catalog configured, each table's metadata and a version hint naming its current metadata
file lie in the bucket. A run, a rerun, a rollback and gc, each read by pyiceberg's scan (by
name through chunkline's catalog, and from the table's folder as a consumer without chunkline
opens it) and by Polars over pyiceberg's FileIO. DuckDB and Polars' native reader are not run
here: neither reaches the emulator (DuckDB's httpfs is not installed; Polars' object store
client takes no emulator endpoint)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from chunkline.index import iceberg
from chunkline.index.manifest import load_manifest
from chunkline.index.tables import read_table
from chunkline.pipeline.cli import main
from tests.gcs_emulator import storage_emulator
from tests.iceberg_engines import assert_engines_read, rows
from tests.pipeline.test_merge_on_read import tiny_document

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "chunkline-iceberg"
pytestmark = pytest.mark.slow


def job(corpus: Path, output: str):
    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run

    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null", "output.chunk_shards=2",
        "output.max_shrink=1"]))


def tables_of(run_dir: str) -> dict:
    manifest = load_manifest(run_dir)
    return {name: read_table(run_dir, manifest, name) for name in iceberg.TABLES}


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


def test_a_bucket_output_s_tables_through_runs_a_rollback_and_gc(tmp_path) -> None:
    from pyiceberg.table import StaticTable

    from chunkline.index import storage

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n in range(12):
        (corpus / f"doc{n:03d}.md").write_text(tiny_document(n), encoding="utf-8")
    with storage_emulator(BUCKET):
        output = f"gs://{BUCKET}/index"
        first = job(corpus, output)
        assert first.published
        assert_engines_read(output, tables_of(first.run_dir))
        (corpus / "doc002.md").write_text(tiny_document(77), encoding="utf-8")
        second = job(corpus, output)
        assert second.published
        expected = tables_of(second.run_dir)
        assert {state.run_id for state in iceberg.tables(output)} == {second.run_id}
        place = iceberg.open_catalog(output, create=False)
        summary = place.found.load_table(place.identifier("documents")).current_snapshot().summary
        # Merge-on-read: the first run's documents file kept, the edited one's row deleted by
        # position (a delete file written into the bucket).
        assert int(summary["total-position-deletes"]) == 1 and int(summary["total-delete-files"]) == 1
        assert_engines_read(output, expected)

        # A consumer without chunkline: the table's folder, its version hint naming the current
        # metadata file (pyiceberg's StaticTable; DuckDB's iceberg_scan reads the same hint).
        code, out, err = cli("tables", output, "--json")
        assert code == 0, err
        described = {t["table"]: t for t in json.loads(out)["tables"]}
        chunks = described["chunks"]
        assert chunks["catalog"] is None and chunks["metadata"].startswith(f"{output}/_iceberg/chunks/metadata/")
        folder = chunks["metadata"].rsplit("/metadata/", 1)[0]
        assert chunks["read"]["pyiceberg"] == f"StaticTable.from_metadata('{folder}').scan().to_arrow()"
        hint = storage.read_bytes(f"{folder}/metadata/{iceberg.VERSION_HINT}").decode()
        assert chunks["metadata"].endswith(f"/{hint}.metadata.json")
        static = StaticTable.from_metadata(folder, properties=iceberg._io_properties(output))
        columns = ["chunk_id", "doc_id", "chunk_index", "text"]
        assert rows(static.scan(selected_fields=tuple(columns)).to_arrow(), "chunks", columns) == \
            rows(expected["chunks"], "chunks", columns)

        code, _, err = cli("publish", output, first.run_id)
        assert code == 0, err
        assert {state.run_id for state in iceberg.tables(output)} == {first.run_id}
        assert_engines_read(output, tables_of(first.run_dir))

        code, _, err = cli("gc", output, "--keep", "0")
        assert code == 0, err
        place = iceberg.open_catalog(output, create=False)
        for _, table in place.own_tables():
            assert {s.summary[iceberg.RUN_ID_PROPERTY] for s in table.metadata.snapshots} == {first.run_id}
        # Nothing under a table's folder that its metadata does not reach (the second run's
        # delete files and manifests went with its snapshots).
        for name, table in place.own_tables():
            assert iceberg._remove_orphans(table, f"{output}/_iceberg/{name}") == 0
        assert_engines_read(output, tables_of(first.run_dir))
