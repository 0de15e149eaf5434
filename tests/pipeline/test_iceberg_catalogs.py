"""The index's Iceberg tables in a catalog the config names (``catalog:``): PostgreSQL as a SQL
catalog (a real server, pgserver's), through runs, a rerun, a rollback and gc, read by DuckDB,
pyiceberg (by name, from PostgreSQL) and Polars; its switch one transaction across the tables;
its secrets in no file; a second output that would take the first's tables refused before any
work."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import psycopg
import pytest

from chunkline.index import iceberg
from chunkline.index.manifest import load_manifest
from chunkline.index.tables import read_table
from chunkline.pipeline.cli import main
from tests.iceberg_engines import assert_engines_read
from tests.pipeline.test_merge_on_read import tiny_document

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def postgres() -> str:
    from tests.conftest import postgres_server

    with postgres_server() as server:
        # pgserver's URI names its user with an empty password ("postgres:@"), which is a
        # password to chunkline (withheld from the record): the catalog's URI names none.
        yield server.get_uri().replace("postgres:@", "postgres@")


def sql_catalog(uri: str, prefix: str, name: str = "prod") -> list[str]:
    return [f"catalog.name={name}", "catalog.type=sql", f"catalog.uri={json.dumps(uri)}",
            f"catalog.table_prefix={prefix}"]


def job(corpus: Path, output: Path, *overrides: str):
    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run

    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null", "output.chunk_shards=2",
        "output.max_shrink=1", *overrides]))


def corpus_of(folder: Path, count: int) -> Path:
    folder.mkdir()
    for n in range(count):
        (folder / f"doc{n:03d}.md").write_text(tiny_document(n), encoding="utf-8")
    return folder


def tables_of(run_dir: str) -> dict:
    manifest = load_manifest(run_dir)
    return {name: read_table(run_dir, manifest, name) for name in iceberg.TABLES}


def catalog_rows(uri: str, catalog: str) -> dict[str, str]:
    """PostgreSQL's own rows of pyiceberg's catalog table: each table's current metadata file."""
    with psycopg.connect(uri, autocommit=True) as connection:
        return {f"{namespace}.{name}": location for namespace, name, location in connection.execute(
            "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables "
            "WHERE catalog_name = %s", (catalog,))}


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


def test_postgres_catalog_through_runs_a_rollback_and_gc(tmp_path, postgres) -> None:
    corpus, output = corpus_of(tmp_path / "corpus", 6), tmp_path / "index"
    settings = sql_catalog(postgres, "a_")
    first = job(corpus, output, *settings)
    assert first.published
    identifiers = {f"chunkline.a_{name}" for name in iceberg.TABLES if tables_of(first.run_dir)[name] is not None}
    rows = catalog_rows(postgres, "prod")
    assert set(rows) == identifiers  # registered by name in PostgreSQL, under the prefix
    assert all(location.startswith((output / iceberg.ICEBERG_DIR).resolve().as_uri()) for location in rows.values())
    assert not (output / iceberg.ICEBERG_DIR / iceberg.CATALOG_FILE).exists()  # no embedded catalog beside it
    assert_engines_read(output, tables_of(first.run_dir))

    (corpus / "doc001.md").write_text(tiny_document(90), encoding="utf-8")
    (corpus / "doc004.md").unlink()
    second = job(corpus, output, *settings)
    assert second.published
    assert {state.run_id for state in iceberg.tables(str(output))} == {Path(second.run_dir).name}
    assert_engines_read(output, tables_of(second.run_dir))

    # A rollback takes the output alone: the catalog is the one the output records.
    code, _, err = cli("publish", str(output), Path(first.run_dir).name)
    assert code == 0, err
    assert {state.run_id for state in iceberg.tables(str(output))} == {Path(first.run_dir).name}
    assert catalog_rows(postgres, "prod") != rows  # moved forward in PostgreSQL, to a new metadata file
    assert_engines_read(output, tables_of(first.run_dir))

    code, out, err = cli("tables", str(output), "--json")
    assert code == 0, err
    described = json.loads(out)["tables"]
    assert {t["catalog"] for t in described} == {"prod"}
    assert {t["identifier"] for t in described} == identifiers
    assert all(t["read"]["pyiceberg"].startswith("load_catalog('prod', **{") for t in described)

    # gc keeps LATEST's run (the first, rolled back to) and expires the second's snapshots.
    code, _, err = cli("gc", str(output), "--keep", "0")
    assert code == 0, err
    assert not Path(second.run_dir).exists()
    place = iceberg.open_catalog(str(output), create=False)
    for name, table in place.own_tables():
        assert {s.summary[iceberg.RUN_ID_PROPERTY] for s in table.metadata.snapshots} == {Path(first.run_dir).name}
    assert_engines_read(output, tables_of(first.run_dir))


def test_the_switch_moves_every_table_in_one_postgres_transaction(tmp_path, postgres) -> None:
    """Two tables staged at a new snapshot; another writer moves one of them meanwhile: the
    switch refuses, and neither table moved (the first table's row was rolled back with it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    output = tmp_path / "out"
    spec = iceberg.CatalogSpec(name="switch", properties={"type": "sql", "uri": postgres})
    place = iceberg.open_catalog(str(output), spec)
    staged, before = [], {}
    for n, name in enumerate(("chunks", "terms")):
        path = output / "run1" / f"{name}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"term_id": pa.array([n, n + 1], pa.int32())}), path)
        table = iceberg._table(place, name, str(path))
        first = iceberg.commit_table(table, "run1", [iceberg.LiveData(str(path), [])])
        second = iceberg.commit_table(place.found.load_table(place.identifier(name)), "run2",
                                      [iceberg.LiveData(str(path), [0])], make_current=False)
        before[name] = first
        staged.append((place.found.load_table(place.identifier(name)), second))
    # Another writer commits to the terms table after the switch was prepared from it.
    terms = place.found.load_table(place.identifier("terms"))
    with terms.transaction() as transaction:
        transaction.set_properties({"another.writer": "yes"})
    with pytest.raises(iceberg.IcebergError, match="changed by another writer"):
        iceberg._switch_in_one_transaction(place, staged)
    for name in ("chunks", "terms"):
        assert place.found.load_table(place.identifier(name)).current_snapshot().snapshot_id == before[name]


def test_a_secret_in_the_catalog_config_is_written_nowhere(tmp_path, postgres) -> None:
    """A password in the catalog's URI and a token among its properties: the run uses them;
    no file under the output holds either (the manifest and report mask them, the record leaves
    them out). ``chunkline tables`` then needs the URI from pyiceberg's configuration: without
    it, one line naming the variable; with it, the tables."""
    corpus, output = corpus_of(tmp_path / "corpus", 3), tmp_path / "index"
    secret_uri = postgres.replace("postgres@", "postgres:hunter2-pw@")  # pgserver trusts local users
    first = job(corpus, output, *sql_catalog(secret_uri, "s_", name="secretive"),
                "catalog.properties={token: tok-sekrit-42}")
    assert first.published
    for path in output.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"hunter2-pw" not in data and b"tok-sekrit-42" not in data, path
    manifest = json.loads((Path(first.run_dir) / "manifest.json").read_text())
    assert manifest["config"]["catalog"]["properties"]["token"] == "***"
    record = json.loads((output / iceberg.ICEBERG_DIR / iceberg.CATALOG_RECORD).read_text())
    assert record["withheld"] == ["token", "uri"] and "uri" not in record["properties"]

    code, out, err = cli("tables", str(output))
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "PYICEBERG_CATALOG__SECRETIVE__<KEY>" in err and "hunter2" not in err
    monkeypatch = pytest.MonkeyPatch()
    try:
        # pyiceberg's own configuration for the catalog gives the withheld URI (read at import).
        import pyiceberg.catalog as pyiceberg_catalog

        monkeypatch.setattr(pyiceberg_catalog._ENV_CONFIG, "get_catalog_config",
                            lambda name: {"uri": secret_uri, "token": "tok-sekrit-42"} if name == "secretive" else None)
        code, out, err = cli("tables", str(output))
        assert code == 0, err
        assert "secretive.chunkline.s_chunks" in out and "hunter2" not in out and "sekrit" not in out
    finally:
        monkeypatch.undo()


def test_a_second_output_taking_the_first_one_s_tables_is_refused_before_any_work(tmp_path, postgres) -> None:
    corpus = corpus_of(tmp_path / "corpus", 2)
    assert job(corpus, tmp_path / "one", *sql_catalog(postgres, "shared_", name="shared")).published
    code, _, err = cli("run", "--config", str(ROOT / "configs" / "local.yaml"), "--input", f"{corpus}/**",
                       "--output", str(tmp_path / "two"), "--set", "embed=null",
                       *[f"--set={item}" for item in sql_catalog(postgres, "shared_", name="shared")])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "another output's table" in err and "catalog.table_prefix" in err
    assert not (tmp_path / "two" / "LATEST").exists()


class PerTableCommits:
    """A catalog offering only pyiceberg's commit of one table, as its REST (0.12), Glue, Hive
    and DynamoDB catalogs do: PostgreSQL's SqlCatalog behind it, its transaction out of reach."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def test_a_catalog_without_transactions_is_switched_table_by_table(tmp_path, postgres) -> None:
    """Each table moves through the catalog's own commit, checked against the snapshot it moves
    from: both staged tables current after the switch; a table another writer moved meanwhile
    is refused (one line), never overwritten."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    output = tmp_path / "out"
    spec = iceberg.CatalogSpec(name="pertable", properties={"type": "sql", "uri": postgres})
    real = iceberg.open_catalog(str(output), spec)
    place = iceberg.Catalogued(str(output), spec, PerTableCommits(real.found))

    def stage(run_id: str) -> list:
        staged = []
        for n, name in enumerate(("chunks", "terms")):
            path = output / run_id / f"{name}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"term_id": pa.array([n, n + 1, n + 2], pa.int32())}), path)
            table = iceberg._table(place, name, str(path))
            snapshot = iceberg.commit_table(table, run_id, [iceberg.LiveData(str(path), [])], make_current=False)
            staged.append((place.found.load_table(place.identifier(name)), snapshot))
        return staged

    staged = stage("run1")
    iceberg._switch(place, staged)
    for table, snapshot in staged:
        assert table.refresh().current_snapshot().snapshot_id == snapshot
    staged = stage("run2")
    # Another writer makes its own snapshot current in the terms table first.
    terms = place.found.load_table(place.identifier("terms"))
    path = output / "other" / "terms.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"term_id": pa.array([9], pa.int32())}), path)
    theirs = iceberg.commit_table(terms, "other", [iceberg.LiveData(str(path), [])])
    with pytest.raises(iceberg.IcebergError, match="changed by another writer"):
        iceberg._switch_table_by_table(place, staged)  # as prepared: terms read before that writer
    assert place.found.load_table(place.identifier("terms")).current_snapshot().snapshot_id == theirs
    # Not atomic: the chunks table, committed before, stays at run2 (the window docs/engines.md states).
    assert place.found.load_table(place.identifier("chunks")).current_snapshot().snapshot_id == staged[0][1]


def test_moving_to_a_configured_catalog_registers_the_embedded_tables(tmp_path, postgres) -> None:
    """An output published with the embedded catalog, then with PostgreSQL's: the table is
    registered there as it was (its earlier snapshots too), and the embedded catalog goes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    output = tmp_path / "out"
    path = output / "run1" / "terms.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"term_id": pa.array([1, 2, 3], pa.int32())}), path)
    embedded = iceberg.open_catalog(str(output), iceberg.EMBEDDED)
    first = iceberg.commit_table(iceberg._table(embedded, "terms", str(path)), "run1", [iceberg.LiveData(str(path), [])])
    spec = iceberg.CatalogSpec(name="moved", properties={"type": "sql", "uri": postgres})
    place = iceberg.open_catalog(str(output), spec)
    table = iceberg._table(place, "terms", str(path))
    assert iceberg.snapshot_of_run(table, "run1").snapshot_id == first
    second = iceberg.commit_table(table, "run2", [iceberg.LiveData(str(path), [1])], make_current=False)
    iceberg._switch(place, [(place.found.load_table(place.identifier("terms")), second)])
    iceberg._record(str(output), spec)
    assert not (output / iceberg.ICEBERG_DIR / iceberg.CATALOG_FILE).exists()
    assert iceberg.recorded(str(output)) == dataclasses.replace(spec, withheld=frozenset())
    (state,) = iceberg.tables(str(output))
    assert (state.catalog, state.identifier, state.run_id, state.rows) == ("moved", "chunkline.terms", "run2", 2)
