"""The index's tables as Apache Iceberg v2 tables, so that every engine a data team points at
the index (DuckDB's ``iceberg_scan``, pyiceberg, Polars' ``scan_iceberg``, Spark, Trino,
BigQuery's BigLake tables) reads exactly the rows chunkline's own readers read.

A run's tables are merge-on-read (:mod:`chunkline.index.tables`): a rerun leaves unchanged rows
in the files earlier runs wrote and marks the rows no longer live by position. A glob over a run
folder's Parquet files therefore misses the rows kept elsewhere and counts dead ones. Iceberg v2
(https://iceberg.apache.org/spec/) says exactly the same thing in an open format: a snapshot
lists its data files, wherever they lie, and its position-delete files, each row of one a
``(file_path, pos)`` of a deleted row, applied to data files of an equal or lower sequence
number (spec, "Scan Planning").

Each published run commits one snapshot per table (``chunks``, ``documents``, ``rejected``,
``terms``), made from the run's manifest and made current (the ``main`` branch), with the run's
id in its summary (``chunkline.run-id``); ``chunkline publish`` of an earlier run (a rollback)
makes that run's snapshot current again. The metadata lives under ``OUTPUT/_iceberg/<table>``
with a SQLite catalog beside it (``OUTPUT/_iceberg/catalog.db``, pyiceberg's ``SqlCatalog``),
so that pyiceberg opens a table by name and other engines by its current metadata file.

A snapshot costs metadata in proportion to the files, not the rows: a data file an earlier
snapshot listed keeps its manifest entry (``EXISTING``, its sequence number) and a delete file
whose data file's deletions did not change since is listed again, not rewritten. Each
position-delete file covers one data file (Polars' native reader requires it; the spec allows
it and readers then skip every other file's deletes by the ``file_path`` bounds).

pyiceberg's own ``delete`` is copy-on-write (it rewrites a data file to drop a row): the
snapshots are written here over its manifest writer, whose data-manifest class is given the
content ``deletes`` (:class:`_DeleteManifestWriter`); ``tests/test_iceberg.py`` holds what this
relies on of pyiceberg 0.12.

Where the tables are catalogued (:class:`CatalogSpec`, the config's ``catalog:`` section):

- **Embedded, a local output** (no ``catalog:``): a SQLite catalog beside the metadata
  (``OUTPUT/_iceberg/catalog.db``, pyiceberg's ``SqlCatalog``), so that pyiceberg opens a
  table by name and other engines by its current metadata file. No server.
- **Embedded, a ``gs://`` output**: a SQLite file cannot be shared in a bucket (no locking, no
  atomic update of a file many processes rewrite), so the bucket holds what the Iceberg
  convention for a catalog-less table on an object store holds: each table's metadata files
  and a ``metadata/version-hint.text`` naming the current one, which DuckDB's
  ``iceberg_scan``, pyiceberg's ``StaticTable.from_metadata`` and Hadoop-style readers follow
  from the table's folder. chunkline rebuilds an in-memory SQLite catalog from the four hints
  each time it opens the output, so the same code commits and switches. The hints are switched
  one after another: for the milliseconds between the first and the last, a reader resolving
  two tables' hints can see one at the new run and one at the previous (each table itself is
  always whole: one object write replaces its hint). chunkline's own readers go through
  ``LATEST`` and never see it; a consumer needing every table at one run reads the metadata
  files ``chunkline tables`` names.
- **Configured** (``catalog:`` naming one, in pyiceberg's terms: ``load_catalog(name,
  **properties)``, type ``sql``, ``rest``, ``glue``, ...): the same metadata under the output,
  registered by name in that catalog (``<namespace>.<table_prefix><table>``). A SQL catalog
  (PostgreSQL, SQLite) switches every table in one database transaction, as the embedded one
  does. A catalog without multi-table transactions in pyiceberg 0.12 (REST: its
  ``/transactions/commit`` is not exposed; Glue, Hive, DynamoDB, BigQuery) is switched one
  table at a time through its own commit, each checked against the snapshot it moved from:
  the same window as the bucket's hints, per table, between the first commit and the last.

The catalog a run used is recorded in ``OUTPUT/_iceberg/catalog.json`` (its properties less
any holding a secret: :attr:`CatalogSpec.withheld`), so that ``chunkline publish`` (rollback),
``chunkline gc`` and ``chunkline tables``, which take the output alone, open the same one; a
withheld value comes to them from pyiceberg's own configuration (``PYICEBERG_CATALOG__<NAME>__
<KEY>``, ``~/.pyiceberg.yaml``), which ``load_catalog`` merges in.

``gs://`` is read and written through pyiceberg's ``PyArrowFileIO`` (pyarrow's
``GcsFileSystem``, the Google default credentials); against a storage emulator
(``STORAGE_EMULATOR_HOST``) its endpoint is given as ``gcs.service.host`` (pyarrow ignores the
variable) with a placeholder token, as the emulator checks none and google-cloud-cpp would
otherwise look for real credentials.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Final, Iterable, Iterator, Literal, Mapping, Sequence

from chunkline.extras import require
from chunkline.index import storage
from chunkline.index.manifest_types import Manifest

NAMESPACE = "chunkline"
CATALOG_NAME = "chunkline"
ICEBERG_DIR = "_iceberg"  # in OUTPUT: the catalog and each table's metadata and delete files
CATALOG_FILE = "catalog.db"
# Which catalog holds the output's tables when the config named one (CatalogSpec.recorded).
CATALOG_RECORD = "catalog.json"
# A bucket's embedded tables: the current metadata file of each, Hadoop tables' convention.
VERSION_HINT = "version-hint.text"
# The tables a consumer reads; the internal ones (memo, state, carry) are chunkline's own.
TABLES = ("chunks", "documents", "rejected", "terms")
RUN_ID_PROPERTY = "chunkline.run-id"
# Iceberg's reserved field ids of a position-delete file's columns (spec, "Position Delete Files").
DELETE_FILE_PATH_ID = 2147483546
DELETE_POS_ID = 2147483545
# Manifests and manifest lists are Avro; deflate is the codec every reader above decodes (DuckDB's
# Avro reader rejects zstandard's).
AVRO_CODEC: Final[Literal["deflate"]] = "deflate"
# Each commit writes a new metadata file holding every snapshot: the older ones are removed past
# the last few (Iceberg's own table properties; pyiceberg honours them on its commits, and
# :func:`switch` on its own), so a table that is never gc'd does not grow by a whole copy a night.
PREVIOUS_METADATA_FILES = 10
METADATA_RETENTION = {"write.metadata.delete-after-commit.enabled": "true",
                      "write.metadata.previous-versions-max": str(PREVIOUS_METADATA_FILES)}
# pyiceberg's catalog types a run can commit to; "in-memory" holds nothing past the process.
CATALOG_TYPES = ("sql", "rest", "glue", "hive", "dynamodb", "bigquery")


class IcebergError(RuntimeError):
    """The Iceberg metadata of an output cannot be written or read; the message is one line."""


class NoTablesYet(IcebergError):
    """The output has no Iceberg tables in its catalog yet (no run of this chunkline published)."""


def supported(output: str) -> bool:
    """Whether ``output`` gets Iceberg tables: a local folder or ``gs://``."""
    return "://" not in output or storage.is_gcs(output)


@dataclasses.dataclass(frozen=True)
class CatalogSpec:
    """Where an output's tables are catalogued. ``name`` None: the embedded default (a SQLite
    catalog under a local output, version hints in a bucket). Otherwise pyiceberg's
    ``load_catalog(name, **properties)``: its ``type``, ``uri``, ``warehouse`` and any other
    property, merged over what pyiceberg's own configuration holds for ``name``; each table is
    ``<namespace>.<table_prefix><table>``. ``withheld``: the properties holding a secret (a
    token, a password in the uri), never written to the record."""

    name: str | None = None
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)
    namespace: str = NAMESPACE
    table_prefix: str = ""
    withheld: frozenset[str] = frozenset()

    @property
    def embedded(self) -> bool:
        return self.name is None

    def identifier(self, table: str) -> tuple[str, ...]:
        return (*self.namespace.split("."), self.table_prefix + table)

    def readable(self) -> dict[str, str]:
        """The properties fit for a file or a message: the withheld ones left out."""
        return {key: value for key, value in self.properties.items() if key not in self.withheld}

    def scrub(self, message: str) -> str:
        """``message`` with every withheld value (and any password in one) masked."""
        for key in self.withheld:
            value = str(self.properties.get(key, ""))
            secrets = [value]
            if "://" in value and "@" in value.split("?", 1)[0]:  # user:password@host
                secrets.append(value.split("://", 1)[1].split("@", 1)[0].partition(":")[2])
            for secret in secrets:
                if len(secret) >= 3:
                    message = message.replace(secret, "***")
        return " ".join(message.split())


EMBEDDED = CatalogSpec()


def _root(output: str) -> str:
    """``OUTPUT/_iceberg``: an absolute local path, or the ``gs://`` prefix."""
    if storage.is_gcs(output):
        return storage.join(output, ICEBERG_DIR)
    return str(Path(output).resolve() / ICEBERG_DIR)


def _location(output: str, name: str) -> str:
    """Where this output's table ``name`` lies: what its metadata names as its location."""
    if storage.is_gcs(output):
        return storage.join(_root(output), name)
    return (Path(_root(output)) / name).as_uri()


def _plain(path: str) -> str:
    """A location as chunkline's storage names it: a local path without ``file://``."""
    return path.removeprefix("file://")


def _io_properties(output: str) -> dict[str, str]:
    """FileIO properties an output needs before any the user gives: against a storage emulator,
    its endpoint (pyarrow's GcsFileSystem ignores ``STORAGE_EMULATOR_HOST``) and a placeholder
    token (the emulator checks none; without one google-cloud-cpp looks for real credentials,
    the metadata server first, and waits offline)."""
    emulator = os.environ.get(storage.EMULATOR_ENV)
    if not storage.is_gcs(output) or not emulator:
        return {}
    host = emulator if "://" in emulator else f"http://{emulator}"
    return {"gcs.service.host": host, "gcs.oauth2.token": "emulator",
            "gcs.oauth2.token-expires-at": str(int((time.time() + 365 * 86400) * 1000))}


def _file_io(output: str, properties: Mapping[str, str] = {}) -> Any:
    from pyiceberg.io import load_file_io

    return load_file_io({**_io_properties(output), **properties}, location=_location(output, TABLES[0]))


def recorded(output: str) -> CatalogSpec:
    """The catalog the output's last published run used: the record under ``_iceberg``, or the
    embedded default when there is none."""
    try:
        found = json.loads(storage.read_bytes(storage.join(_root(output), CATALOG_RECORD)))
    except FileNotFoundError:
        return EMBEDDED
    except ValueError as exc:
        raise IcebergError(f"{output}: {ICEBERG_DIR}/{CATALOG_RECORD} is damaged ({exc})") from None
    return CatalogSpec(name=found["name"], properties=dict(found["properties"]), namespace=found["namespace"],
                       table_prefix=found["table_prefix"], withheld=frozenset(found["withheld"]))


def _record(output: str, spec: CatalogSpec) -> None:
    """Record ``spec`` as the output's catalog (the embedded default: no record), its secrets
    left out; what an embedded catalog left behind goes once another holds the tables."""
    path = storage.join(_root(output), CATALOG_RECORD)
    io_ = _file_io(output)
    if spec.embedded:
        if io_.new_input(path).exists():
            io_.delete(path)
        return
    data = {"name": spec.name, "namespace": spec.namespace, "table_prefix": spec.table_prefix,
            "properties": spec.readable(), "withheld": sorted(spec.withheld)}
    with io_.new_output(path).create(overwrite=True) as handle:
        handle.write(json.dumps(data, indent=2, sort_keys=True).encode())
    # The embedded catalog's pointers would go stale as the configured one moves on: a reader
    # opening the SQLite file or following a hint would read an old run without knowing it.
    stale = [storage.join(_root(output), CATALOG_FILE)] + [
        storage.join(_root(output), name, "metadata", VERSION_HINT) for name in TABLES]
    for leftover in stale:
        if io_.new_input(leftover).exists():
            io_.delete(leftover)


@dataclasses.dataclass(frozen=True)
class Catalogued:
    """An output's tables as its catalog holds them: the pyiceberg catalog ``found`` and the
    spec naming each table. ``hints``: the bucket's embedded default, whose in-memory catalog
    is rebuilt from (and its switches written to) each table's version hint."""

    output: str
    spec: CatalogSpec
    found: Any
    hints: bool = False

    def identifier(self, name: str) -> tuple[str, ...]:
        return self.spec.identifier(name)

    def own_tables(self) -> Iterator[tuple[str, Any]]:
        """(name, table) of each consumer table the catalog holds for this output; an entry of
        another output (a copied embedded catalog, or a shared catalog's) is not this one's."""
        for name in TABLES:
            identifier = self.identifier(name)
            if self.found.table_exists(identifier):
                table = self.found.load_table(identifier)
                if table.metadata.location == _location(self.output, name):
                    yield name, table

    def committed(self, table: Any) -> None:
        """Make ``table``'s current metadata durable where the catalog is rebuilt from hints."""
        if self.hints:
            hint = f"{table.metadata.location}/metadata/{VERSION_HINT}"
            with table.io.new_output(hint).create(overwrite=True) as handle:
                handle.write(table.metadata_location.rsplit("/", 1)[-1].removesuffix(".metadata.json").encode())


def open_catalog(output: str, spec: CatalogSpec | None = None, *, create: bool = True) -> Catalogued:
    """The output's tables in ``spec``'s catalog (None: the recorded one), its namespace created
    when ``create``. IcebergError, one line without a secret, when it cannot be opened."""
    require("iceberg", "pyiceberg")
    spec = recorded(output) if spec is None else spec
    if spec.embedded:
        return _embedded(output, create)
    from pyiceberg.catalog import load_catalog

    properties = {**_io_properties(output), **spec.properties}
    uri = properties.get("uri", "")
    if uri.startswith("postgresql://") and _psycopg3_only():
        # SQLAlchemy's default PostgreSQL driver is psycopg2; chunkline's is psycopg 3 (its
        # pgvector extra), which SQLAlchemy names postgresql+psycopg.
        properties["uri"] = "postgresql+psycopg://" + uri.removeprefix("postgresql://")
    try:
        found = load_catalog(spec.name, **properties)
        if create:
            found.create_namespace_if_not_exists(spec.namespace)
        else:
            found.load_namespace_properties(spec.namespace)
    except Exception as exc:  # noqa: BLE001 - any failure to reach it is the same one line
        from pyiceberg.exceptions import NoSuchNamespaceError

        if isinstance(exc, NoSuchNamespaceError):
            raise NoTablesYet(f"{output}: no Iceberg tables yet in catalog {spec.name!r} "
                               f"(no namespace {spec.namespace}): a run of this chunkline publishes them") from None
        missing = [key for key in sorted(spec.withheld) if key not in spec.properties]
        hint = (f"; its {', '.join(missing)} held a secret, which chunkline writes nowhere: give it as "
                f"pyiceberg reads it (PYICEBERG_CATALOG__{str(spec.name).upper()}__<KEY> or ~/.pyiceberg.yaml)"
                if missing else "")
        raise IcebergError(spec.scrub(f"catalog {spec.name!r} cannot be opened "
                                      f"({type(exc).__name__}: {exc}){hint}")) from None
    return Catalogued(output, spec, found)


def _psycopg3_only() -> bool:
    import importlib.util

    return importlib.util.find_spec("psycopg2") is None and importlib.util.find_spec("psycopg") is not None


def _embedded(output: str, create: bool) -> Catalogued:
    """The embedded default: a SQLite file under a local output; for a bucket, an in-memory
    SQLite catalog holding each table whose version hint the bucket has."""
    from pyiceberg.catalog.sql import SqlCatalog

    root = _root(output)
    if not storage.is_gcs(output):
        if create:
            Path(root).mkdir(parents=True, exist_ok=True)
        elif not (Path(root) / CATALOG_FILE).is_file():
            raise NoTablesYet(f"{output}: no Iceberg tables yet (no {ICEBERG_DIR}/{CATALOG_FILE}): "
                               "a run of this chunkline publishes them")
        found = SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{Path(root) / CATALOG_FILE}",
                           warehouse=Path(root).as_uri())
        if create:
            found.create_namespace_if_not_exists(NAMESPACE)
        return Catalogued(output, EMBEDDED, found)
    found = SqlCatalog(CATALOG_NAME, uri="sqlite:///:memory:", warehouse=root, **_io_properties(output))
    found.create_namespace_if_not_exists(NAMESPACE)
    io_ = _file_io(output)
    registered = 0
    for name in TABLES:
        folder = _location(output, name)
        hint = f"{folder}/metadata/{VERSION_HINT}"
        try:
            with io_.new_input(hint).open() as handle:
                current = handle.read().decode("utf-8").strip()
        except FileNotFoundError:
            continue
        found.register_table(EMBEDDED.identifier(name), f"{folder}/metadata/{current}.metadata.json")
        registered += 1
    if not create and not registered:
        raise NoTablesYet(f"{output}: no Iceberg tables yet (no {ICEBERG_DIR}/<table>/metadata/"
                           f"{VERSION_HINT}): a run of this chunkline publishes them")
    return Catalogued(output, EMBEDDED, found, hints=True)


def catalog(output: str, *, create: bool = True) -> Any:
    """The pyiceberg catalog holding the output's tables (the recorded one, else the embedded
    default), its namespace created when ``create``."""
    return open_catalog(output, create=create).found


def check(output: str, spec: CatalogSpec) -> None:
    """Before a run: ``spec``'s catalog opens, and no table it names belongs to another output
    (a shared catalog's namespace and prefix must be this output's own). IcebergError, one line."""
    if spec.embedded:
        return
    place = open_catalog(output, spec)
    for name in TABLES:
        identifier = place.identifier(name)
        if place.found.table_exists(identifier):
            _owned(place, name, place.found.load_table(identifier))


def _owned(place: Catalogued, name: str, table: Any) -> bool:
    """Whether ``table`` (the catalog's entry for ``name``) is this output's. An embedded
    catalog's entry of another output was copied here with this one: not ours (it is replaced);
    a configured catalog's belongs to another output: IcebergError, never touched."""
    location = table.metadata.location
    if location == _location(place.output, name):
        return True
    if place.spec.embedded:
        return False
    raise IcebergError(f"catalog {place.spec.name!r}: table {'.'.join(place.identifier(name))} holds "
                       f"another output's table ({location}); give this output its own "
                       "catalog.namespace or catalog.table_prefix")


def _iceberg_schema(arrow_schema: Any) -> Any:
    """The Iceberg schema of a table whose files have ``arrow_schema``, fresh field ids. A
    vector's fixed_size_list is Iceberg's list (Iceberg has no fixed-size list)."""
    from pyiceberg.io.pyarrow import _ConvertToIcebergWithoutIDs, visit_pyarrow
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(visit_pyarrow(arrow_schema, _ConvertToIcebergWithoutIDs()))


def _read_schema(path: str) -> Any:
    """The Arrow schema of the Parquet file ``path`` (local or ``gs://``), from its footer."""
    import pyarrow.parquet as pq

    with storage.parquet_source(path) as source:
        return pq.read_schema(source)


def _table(place: Catalogued, name: str, first_file: str) -> Any:
    """The catalog's table ``name``, created from the schema of ``first_file`` when absent. The
    data files carry no Parquet field ids: their columns are found by name, through the name
    mapping every engine above honours (spec, "Column Projection")."""
    from pyiceberg.exceptions import NoSuchTableError

    identifier = place.identifier(name)
    try:
        table = place.found.load_table(identifier)
        if _owned(place, name, table):
            return table
        # The catalog of another output, copied or moved here with this one: its metadata
        # lies there, and a commit would write into that output. This output's table is made
        # afresh here (the entry dropped, the other output's files left alone).
        place.found.drop_table(identifier)
    except NoSuchTableError:
        if not place.spec.embedded and (previous := _embedded_metadata(place.output, name)) is not None:
            # Moving the output's tables into a configured catalog: registered as they are,
            # every earlier run's snapshot with them (a rollback finds them there).
            place.found.register_table(identifier, previous)
            return place.found.load_table(identifier)
    schema = _iceberg_schema(_read_schema(first_file))
    table = place.found.create_table(identifier, schema=schema, location=_location(place.output, name),
                                     properties={"format-version": "2", **METADATA_RETENTION})
    with table.transaction() as transaction:
        transaction.set_properties({"schema.name-mapping.default": schema.name_mapping.model_dump_json()})
    return place.found.load_table(identifier)


def _embedded_metadata(output: str, name: str) -> str | None:
    """The current metadata file of this output's table ``name`` in its embedded catalog (the
    SQLite file, or the bucket's hint), or None: none there, or not this output's."""
    try:
        place = _embedded(output, create=False)
        table = place.found.load_table(place.identifier(name))
    except Exception:  # noqa: BLE001 - no embedded table, or one unreadable: the table starts anew
        return None
    return table.metadata_location if table.metadata.location == _location(output, name) else None


def _evolved(place: Catalogued, table: Any, first_file: str) -> Any:
    """``table`` able to hold ``first_file``'s columns: as it is when they match; its schema grown
    by name when the file adds columns (a config that adds one, e.g. ``embedding_scale`` of int8
    vectors), as pyiceberg evolves it; made anew when a column's type changed in a way Iceberg
    cannot evolve (float vectors stored as int8 now): the run's snapshot is then the new table's
    first, and ``chunkline publish`` of an earlier run registers that run again."""
    from pyiceberg.exceptions import ResolveError, ValidationError
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible

    arrow = _read_schema(first_file)

    def holds(candidate: Any) -> bool:
        try:
            _check_pyarrow_schema_compatible(candidate.schema(), arrow, format_version=2)
            return True
        except ValueError:
            return False

    if holds(table):
        return table
    try:
        with table.update_schema() as update:
            update.union_by_name(_iceberg_schema(arrow))
        with table.transaction() as transaction:
            transaction.set_properties(
                {"schema.name-mapping.default": table.schema().name_mapping.model_dump_json()})
        table = table.refresh()
        if holds(table):
            return table
    except (ValueError, ValidationError, ResolveError):  # pyiceberg's refusal of the evolution
        pass
    name = table.name()[-1].removeprefix(place.spec.table_prefix)
    place.found.drop_table(place.identifier(name))
    return _table(place, name, first_file)


@dataclasses.dataclass(frozen=True)
class LiveData:
    """A data file of a run's table as Iceberg lists it: its absolute ``path`` and the 0-based
    ``deleted`` positions no longer live (ascending)."""

    path: str
    deleted: Sequence[int]


def _previous_entries(table: Any, snapshot: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The live manifest entries of ``snapshot``: data files by path, and position-delete files
    by the one data file each covers."""
    from pyiceberg.manifest import DataFileContent

    data: dict[str, Any] = {}
    deletes: dict[str, Any] = {}
    if snapshot is None:
        return data, deletes
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.content == DataFileContent.DATA:
                data[entry.data_file.file_path] = entry
            elif entry.data_file.content == DataFileContent.POSITION_DELETES:
                covered = _covered_path(entry.data_file)
                if covered is not None:
                    deletes[covered] = entry
    return data, deletes


def _covered_path(delete_file: Any) -> str | None:
    """The one data file a position-delete file of ours covers: its ``file_path`` bounds, equal."""
    lower = (delete_file.lower_bounds or {}).get(DELETE_FILE_PATH_ID)
    upper = (delete_file.upper_bounds or {}).get(DELETE_FILE_PATH_ID)
    return lower.decode("utf-8") if lower is not None and lower == upper else None


def _same_deletions(delete_file: Any, deleted: Sequence[int]) -> bool:
    """Whether ``delete_file`` deletes exactly ``deleted``: a live file's deleted rows only grow
    from the snapshot its run builds on, so as many, from the same first to the same last, are
    the same set (read from its bounds: no delete file is opened)."""
    low = (delete_file.lower_bounds or {}).get(DELETE_POS_ID)
    high = (delete_file.upper_bounds or {}).get(DELETE_POS_ID)
    return (delete_file.record_count == len(deleted) and low is not None and high is not None
            and int.from_bytes(low, "little", signed=True) == min(deleted)
            and int.from_bytes(high, "little", signed=True) == max(deleted))


def _write_position_deletes(table: Any, path: str, positions: Sequence[int], where: str) -> Any:
    """A position-delete file at ``where`` deleting ``positions`` of the data file ``path``, and
    its ``DataFile`` (content POSITION_DELETES, bounds naming that one file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    schema = pa.schema([
        pa.field("file_path", pa.string(), nullable=False,
                 metadata={b"PARQUET:field_id": str(DELETE_FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False,
                 metadata={b"PARQUET:field_id": str(DELETE_POS_ID).encode()}),
    ])
    rows = pa.table([pa.array([path] * len(positions), pa.string()),
                     pa.array(sorted(positions), pa.int64())], schema=schema)
    # Page checksums on: a reader verifying them refuses a changed page instead of applying it.
    # Written whole (a delete file is a few KB) through the table's FileIO: local or gs://.
    buffer = io.BytesIO()
    pq.write_table(rows, buffer, compression="zstd", write_page_checksum=True)
    if "://" not in where:
        Path(where).parent.mkdir(parents=True, exist_ok=True)
    with table.io.new_output(where).create(overwrite=True) as handle:
        handle.write(buffer.getvalue())
    encoded = path.encode("utf-8")
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=where, file_format=FileFormat.PARQUET,
        partition=Record(), record_count=len(positions), file_size_in_bytes=len(buffer.getvalue()),
        lower_bounds={DELETE_FILE_PATH_ID: encoded, DELETE_POS_ID: int(min(positions)).to_bytes(8, "little", signed=True)},
        upper_bounds={DELETE_FILE_PATH_ID: encoded, DELETE_POS_ID: int(max(positions)).to_bytes(8, "little", signed=True)},
        spec_id=table.metadata.default_spec_id, sort_order_id=None, equality_ids=None, key_metadata=None)


def _delete_manifest_writer(table: Any, output_file: Any, snapshot_id: int) -> Any:
    """pyiceberg's v2 manifest writer, writing a delete manifest (content ``deletes``): the
    entries and their statistics are written alike, only the manifest's content differs."""
    from pyiceberg.manifest import ManifestContent, ManifestWriterV2

    class _DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    return _DeleteManifestWriter(table.spec(), table.schema(), output_file, snapshot_id, AVRO_CODEC)


def snapshot_of_run(table: Any, run_id: str) -> Any | None:
    """The newest snapshot of ``table`` committed for ``run_id``, or None."""
    found = [snapshot for snapshot in table.metadata.snapshots
             if snapshot.summary is not None and snapshot.summary.get(RUN_ID_PROPERTY) == run_id]
    return max(found, key=lambda snapshot: snapshot.sequence_number or 0) if found else None


def commit_table(table: Any, run_id: str, files: Iterable[LiveData], *, make_current: bool = True) -> int:
    """Commit the snapshot of ``run_id`` holding exactly ``files`` (each with its deleted rows)
    and, with ``make_current``, make it the ``main`` branch's; its snapshot id. A data or delete
    file the current snapshot already lists keeps its entry; only what changed is written."""
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, write_manifest, write_manifest_list
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId

    metadata = table.metadata
    parent = table.current_snapshot()
    previous_data, previous_deletes = _previous_entries(table, parent)
    snapshot_id = _new_snapshot_id(metadata)
    sequence_number = metadata.next_sequence_number()
    location = metadata.location.removeprefix("file://")
    commit = uuid.uuid4().hex
    added_files = added_records = added_deletes = added_delete_files = 0
    total_records = total_deletes = data_count = delete_count = 0
    data_manifest = f"{location}/metadata/{commit}-m0.avro"
    delete_manifest = f"{location}/metadata/{commit}-m1.avro"
    delete_entries: list[Any] = []
    with write_manifest(2, table.spec(), table.schema(), table.io.new_output(data_manifest),
                        snapshot_id, AVRO_CODEC) as writer:
        for n, live in enumerate(files):
            entry = previous_data.get(live.path)
            if entry is not None:
                writer.existing(entry)
                data_file = entry.data_file
            else:
                data_file = _data_file(table, metadata, live.path)
                writer.add_entry(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                                         snapshot_id=snapshot_id, data_file=data_file))
                added_files += 1
                added_records += data_file.record_count
            data_count += 1
            total_records += data_file.record_count
            if not live.deleted:
                continue
            kept = previous_deletes.get(live.path)
            if kept is not None and _same_deletions(kept.data_file, live.deleted):
                delete_entries.append((ManifestEntryStatus.EXISTING, kept))
            else:
                where = f"{location}/data/{run_id}-{commit[:8]}-{n:05d}-deletes.parquet"
                delete_file = _write_position_deletes(table, live.path, live.deleted, where)
                delete_entries.append((ManifestEntryStatus.ADDED, ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=delete_file)))
                added_delete_files += 1
                added_deletes += len(live.deleted)
            delete_count += 1
            total_deletes += len(live.deleted)
    manifests = [writer.to_manifest_file()]
    if delete_entries:
        with _delete_manifest_writer(table, table.io.new_output(delete_manifest), snapshot_id) as deletes:
            for status, entry in delete_entries:
                if status == ManifestEntryStatus.EXISTING:
                    deletes.existing(entry)
                else:
                    deletes.add_entry(entry)
        manifests.append(deletes.to_manifest_file())
    manifest_list = f"{location}/metadata/snap-{snapshot_id}-0-{commit}.avro"
    with write_manifest_list(2, table.io.new_output(manifest_list), snapshot_id,
                             parent.snapshot_id if parent is not None else None, sequence_number,
                             AVRO_CODEC) as listing:
        listing.add_manifests(manifests)
    summary = Summary(Operation.OVERWRITE, **{
        RUN_ID_PROPERTY: run_id,
        "added-data-files": str(added_files), "added-records": str(added_records),
        "added-delete-files": str(added_delete_files), "added-position-deletes": str(added_deletes),
        "total-data-files": str(data_count), "total-delete-files": str(delete_count),
        "total-records": str(total_records), "total-position-deletes": str(total_deletes),
        "total-equality-deletes": "0", "total-files-size": "0"})
    snapshot = Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=parent.snapshot_id if parent else None,
                        sequence_number=sequence_number, manifest_list=manifest_list, summary=summary,
                        schema_id=metadata.current_schema_id)
    updates: tuple[Any, ...] = (AddSnapshotUpdate(snapshot=snapshot),)
    if make_current:
        updates += (_main_branch_at(snapshot_id),)
    table.catalog.commit_table(table, (AssertRefSnapshotId(snapshot_id=parent.snapshot_id if parent else None,
                                                           ref="main"),), updates)
    return snapshot_id


def _data_file(table: Any, metadata: Any, path: str) -> Any:
    """pyiceberg's entry for a Parquet data file: its row count, sizes and column bounds from
    the footer. pyiceberg logs a warning for each column the footer has no statistics of (an
    empty file, an all-null column): expected here, and not a user's concern on every run."""
    import logging

    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    quiet = logging.getLogger("pyiceberg.io.pyarrow")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return parquet_file_to_data_file(table.io, metadata, path)
    finally:
        quiet.setLevel(level)


def _new_snapshot_id(metadata: Any) -> int:
    """A positive 63-bit id no snapshot of the table holds (Iceberg's ids are random longs)."""
    taken = {snapshot.snapshot_id for snapshot in metadata.snapshots}
    while True:
        candidate = uuid.uuid4().int & ((1 << 63) - 1)
        if candidate and candidate not in taken:
            return candidate


def _main_branch_at(snapshot_id: int) -> Any:
    """The update pointing the ``main`` branch at ``snapshot_id``, no retention of its own."""
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update import SetSnapshotRefUpdate

    return SetSnapshotRefUpdate(snapshot_id=snapshot_id, ref_name="main", type=SnapshotRefType.BRANCH,
                                max_ref_age_ms=None, max_snapshot_age_ms=None, min_snapshots_to_keep=None)


def run_files(output: str, manifest: Manifest, table: str) -> list[LiveData]:
    """The data files of ``table`` the run ``manifest`` describes, with their deleted positions
    (read from the run's deletion files, one shard's at a time)."""
    from chunkline.index.tables import live_files

    run_dir = storage.join(output, manifest.run_id)
    return [LiveData(found.path if storage.is_gcs(found.path) else str(Path(found.path).resolve()), found.deleted)
            for found in live_files(run_dir, manifest, table)]


def publish_run(output: str, manifest: Manifest, *, catalog: CatalogSpec | None = None) -> dict[str, int]:
    """Make the run ``manifest`` describes current in every consumer table it lists, all at
    once, in ``catalog`` (None: the one the output records; a run passes its config's), which
    is then recorded as the output's. Write-audit-publish: each table's snapshot is committed
    first without becoming current (staged; an existing snapshot of the run, as a rollback
    finds it, is reused), then every table's ``main`` branch is switched to it
    (:func:`switch`), so a process killed before the switch leaves every table as it was. A run
    of an earlier format is registered as it lies: nothing is rewritten. The snapshot ids by
    table."""
    from chunkline.index.tables import has_table

    if not supported(output):
        return {}
    place = open_catalog(output, catalog)
    staged: dict[str, tuple[Any, int]] = {}
    for name in TABLES:
        if not has_table(manifest, name):
            continue
        files = run_files(output, manifest, name)
        table = _evolved(place, _table(place, name, files[0].path), files[0].path)
        existing = snapshot_of_run(table, manifest.run_id)
        snapshot_id = (existing.snapshot_id if existing is not None
                       else commit_table(table, manifest.run_id, files, make_current=False))
        staged[name] = (place.found.load_table(place.identifier(name)), snapshot_id)
    _switch(place, list(staged.values()))
    _record(output, place.spec)
    return {name: snapshot_id for name, (_, snapshot_id) in staged.items()}


def switch(output: str, targets: Sequence[tuple[Any, int]]) -> None:
    """Point the ``main`` branch of each ``(table, snapshot id)`` at that snapshot, all at once
    in the output's recorded catalog (:func:`_switch`)."""
    _switch(open_catalog(output), targets)


def _switch(place: Catalogued, targets: Sequence[tuple[Any, int]]) -> None:
    """Point the ``main`` branch of each ``(table, snapshot id)`` at that snapshot. A SQL
    catalog (the embedded ones, PostgreSQL's) in one transaction; any other one table at a time
    through its own commit (the window the module's docstring states). Each table moves only
    from the metadata (or snapshot) the switch was made from: IcebergError when another writer
    moved one meanwhile."""
    from pyiceberg.catalog.sql import SqlCatalog

    targets = [(table.refresh(), snapshot_id) for table, snapshot_id in targets]  # as committed now
    targets = [(table, snapshot_id) for table, snapshot_id in targets
               if table.current_snapshot() is None or table.current_snapshot().snapshot_id != snapshot_id]
    if not targets:
        return
    if isinstance(place.found, SqlCatalog):
        _switch_in_one_transaction(place, targets)
    else:
        _switch_table_by_table(place, targets)
    for table, _ in targets:
        table = table.refresh()
        place.committed(table)
        _trim_metadata(table)


def _switch_table_by_table(place: Catalogued, targets: Sequence[tuple[Any, int]]) -> None:
    """The switch of a catalog without multi-table transactions: each table through the
    catalog's own commit, required to move from the snapshot it was read at (Iceberg's
    ``assert-ref-snapshot-id``, which a REST catalog checks on its side)."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update import AssertRefSnapshotId

    for table, snapshot_id in targets:
        current = table.current_snapshot()
        try:
            table.catalog.commit_table(
                table, (AssertRefSnapshotId(snapshot_id=current.snapshot_id if current else None, ref="main"),),
                (_main_branch_at(snapshot_id),))
        except CommitFailedException as exc:
            raise IcebergError(f"{place.output}: the Iceberg table {'.'.join(table.name())} was changed by "
                               f"another writer meanwhile ({' '.join(str(exc).split())})") from None


def _switch_in_one_transaction(place: Catalogued, targets: Sequence[tuple[Any, int]]) -> None:
    """The switch of a SQL catalog: each table's new metadata file is written first (immutable,
    unread until the catalog names it), then every catalog row moves in one transaction, each
    only if it still names the metadata the switch was made from (optimistic concurrency, as
    pyiceberg's ``SqlCatalog.commit_table`` moves one table: the same statement, on its own
    ``iceberg_tables`` table, through its SQLAlchemy engine)."""
    from pyiceberg.catalog.sql import IcebergTables
    from pyiceberg.serializers import ToOutputFile
    from pyiceberg.table.update import update_table_metadata
    from sqlalchemy import update

    moves = []
    for table, snapshot_id in targets:
        before = table.metadata_location
        metadata = update_table_metadata(table.metadata, (_main_branch_at(snapshot_id),),
                                         metadata_location=before)
        version = int(before.rsplit("/", 1)[-1].split("-", 1)[0]) + 1
        after = table.location_provider().new_table_metadata_file_location(new_version=version)
        ToOutputFile.table_metadata(metadata, table.io.new_output(after))
        moves.append((after, before, table.name()))
    with place.found.engine.begin() as connection:  # committed on leaving, rolled back on a raise
        for after, before, identifier in moves:
            moved = connection.execute(
                update(IcebergTables)
                .where(IcebergTables.catalog_name == place.found.name,
                       IcebergTables.table_namespace == ".".join(identifier[:-1]),
                       IcebergTables.table_name == identifier[-1],
                       IcebergTables.metadata_location == before)
                .values(metadata_location=after, previous_metadata_location=before)).rowcount
            if moved != 1:
                raise IcebergError(f"{place.output}: the Iceberg table {'.'.join(identifier)} was changed by "
                                   "another writer meanwhile; nothing was switched")


def _files_under(folder: str) -> list[str]:
    """Every file under ``folder`` (a local path or a ``gs://`` prefix), by its plain path."""
    return [path for path, _, _ in storage.list_files(folder.rstrip("/") + "/")]


def _trim_metadata(table: Any) -> None:
    """Remove ``table``'s metadata files older than the last :data:`PREVIOUS_METADATA_FILES` its
    metadata log names (readers holding one of those still read it)."""
    kept = {_plain(table.metadata_location)}
    kept |= {_plain(entry.metadata_file) for entry in table.metadata.metadata_log[-PREVIOUS_METADATA_FILES:]}
    for path in _files_under(_plain(table.metadata.location) + "/metadata"):
        if path.endswith(".metadata.json") and path not in kept:
            table.io.delete(path)


def run_snapshots(output: str) -> dict[str, dict[str, int]]:
    """Each run's snapshot id per table, of the snapshots the tables keep (the run's id is in
    each one's summary); empty for an output without Iceberg tables."""
    if not supported(output):
        return {}
    try:
        place = open_catalog(output, create=False)
    except NoTablesYet:
        return {}
    found: dict[str, dict[str, int]] = {}
    try:
        for name, table in place.own_tables():
            for snapshot in table.metadata.snapshots:
                run_id = (snapshot.summary or {}).get(RUN_ID_PROPERTY)
                if run_id is not None:
                    found.setdefault(run_id, {})[name] = snapshot.snapshot_id
    except IcebergError:
        raise
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's, pyiceberg's or the filesystem's
        raise IcebergError(f"{output}: the Iceberg tables cannot be read ({type(exc).__name__}: "
                           f"{' '.join(str(exc).split())})") from None
    return found


@dataclasses.dataclass(frozen=True)
class TableState:
    """What ``chunkline tables`` shows of one table."""

    name: str
    identifier: str
    metadata: str
    snapshot_id: int | None
    run_id: str | None
    rows: int
    catalog: str | None = None  # the configured catalog's name; None: the embedded default


def tables(output: str) -> list[TableState]:
    """The output's Iceberg tables as they are now: current metadata file, snapshot, its run and
    live rows (records less position deletes, from the snapshot's summary)."""
    place = open_catalog(output, create=False)
    states = []
    for name, table in place.own_tables():
        snapshot = table.current_snapshot()
        summary = snapshot.summary if snapshot is not None and snapshot.summary is not None else {}
        rows = int(summary.get("total-records", 0)) - int(summary.get("total-position-deletes", 0))
        states.append(TableState(name, ".".join(place.identifier(name)), _plain(table.metadata_location),
                                 snapshot.snapshot_id if snapshot else None,
                                 summary.get(RUN_ID_PROPERTY), rows, place.spec.name))
    return states


def expire(output: str, keep_runs: set[str]) -> int:
    """Expire every snapshot whose run is not in ``keep_runs`` (the current one never), then
    remove the files under each table's folder that no remaining snapshot and no current
    metadata file references (old metadata files, manifests, position-delete files), as
    Iceberg's ``expire_snapshots`` and ``remove_orphan_files`` do: nothing a kept snapshot
    reads is removed, and nothing a dropped one alone held stays. The number of files removed.
    Data files lie in run folders: ``chunkline gc`` removes those."""
    from pyiceberg.table.update import AssertRefSnapshotId, RemoveSnapshotsUpdate

    if not supported(output):
        return 0
    try:
        place = open_catalog(output, create=False)
    except NoTablesYet:
        return 0
    removed = 0
    for name, table in place.own_tables():
        current = table.current_snapshot()
        dropped = [snapshot.snapshot_id for snapshot in table.metadata.snapshots
                   if (current is None or snapshot.snapshot_id != current.snapshot_id)
                   and (snapshot.summary or {}).get(RUN_ID_PROPERTY) not in keep_runs]
        if dropped:
            table.catalog.commit_table(
                table, (AssertRefSnapshotId(snapshot_id=current.snapshot_id if current else None, ref="main"),),
                (RemoveSnapshotsUpdate(snapshot_ids=dropped),))
            table = table.refresh()
            place.committed(table)
        removed += _remove_orphans(table, _plain(_location(output, name)))
    return removed


def _remove_orphans(table: Any, folder: str | Path) -> int:
    """Remove the files under ``folder`` that ``table``'s current metadata does not reach."""
    from pyiceberg.manifest import DataFileContent

    reached = {_plain(table.metadata_location),
               f"{_plain(table.metadata.location)}/metadata/{VERSION_HINT}"}
    for snapshot in table.metadata.snapshots:
        reached.add(_plain(snapshot.manifest_list))
        for manifest in snapshot.manifests(table.io):
            reached.add(_plain(manifest.manifest_path))
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.data_file.content != DataFileContent.DATA:
                    reached.add(_plain(entry.data_file.file_path))
    removed = 0
    for path in sorted(_files_under(str(folder))):
        if path not in reached:
            table.io.delete(path)
            removed += 1
    return removed
