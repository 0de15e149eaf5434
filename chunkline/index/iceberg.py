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

Local outputs only in this release: an output on ``gs://`` has no Iceberg tables yet (its
SQLite catalog cannot live in a bucket); :func:`supported` says so.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from pathlib import Path
from typing import Any, Final, Iterable, Iterator, Literal, Sequence

from chunkline.extras import require
from chunkline.index.manifest_types import Manifest

NAMESPACE = "chunkline"
CATALOG_NAME = "chunkline"
ICEBERG_DIR = "_iceberg"  # in OUTPUT: the catalog and each table's metadata and delete files
CATALOG_FILE = "catalog.db"
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


class IcebergError(RuntimeError):
    """The Iceberg metadata of an output cannot be written or read; the message is one line."""


def supported(output: str) -> bool:
    """Whether ``output`` gets Iceberg tables: a local folder (not ``gs://``)."""
    return "://" not in output


def _root(output: str) -> Path:
    return Path(output).resolve() / ICEBERG_DIR


def _location(output: str, name: str) -> str:
    """Where this output's table ``name`` lies: what its metadata names as its location."""
    return (_root(output) / name).as_uri()


def _own_tables(found: Any, output: str) -> Iterator[tuple[str, Any]]:
    """(name, table) of each consumer table the catalog ``found`` holds for this output; an entry
    of another output, whose catalog was copied here with this one, is not this output's."""
    for name in TABLES:
        identifier = (NAMESPACE, name)
        if found.table_exists(identifier):
            table = found.load_table(identifier)
            if table.metadata.location == _location(output, name):
                yield name, table


def catalog(output: str, *, create: bool = True) -> Any:
    """The output's embedded catalog (pyiceberg's ``SqlCatalog`` on ``OUTPUT/_iceberg/catalog.db``),
    its namespace created when ``create``."""
    require("iceberg", "pyiceberg")
    from pyiceberg.catalog.sql import SqlCatalog

    root = _root(output)
    if create:
        root.mkdir(parents=True, exist_ok=True)
    elif not (root / CATALOG_FILE).is_file():
        raise IcebergError(f"{output}: no Iceberg tables yet (no {ICEBERG_DIR}/{CATALOG_FILE}): "
                           "a run of this chunkline publishes them")
    found = SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{root / CATALOG_FILE}", warehouse=root.as_uri())
    if create:
        found.create_namespace_if_not_exists(NAMESPACE)
    return found


def _iceberg_schema(arrow_schema: Any) -> Any:
    """The Iceberg schema of a table whose files have ``arrow_schema``, fresh field ids. A
    vector's fixed_size_list is Iceberg's list (Iceberg has no fixed-size list)."""
    from pyiceberg.io.pyarrow import _ConvertToIcebergWithoutIDs, visit_pyarrow
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(visit_pyarrow(arrow_schema, _ConvertToIcebergWithoutIDs()))


def _table(found: Any, output: str, name: str, first_file: str) -> Any:
    """The catalog's table ``name``, created from the schema of ``first_file`` when absent. The
    data files carry no Parquet field ids: their columns are found by name, through the name
    mapping every engine above honours (spec, "Column Projection")."""
    from pyiceberg.exceptions import NoSuchTableError
    import pyarrow.parquet as pq

    identifier = (NAMESPACE, name)
    location = _location(output, name)
    try:
        table = found.load_table(identifier)
        if table.metadata.location == location:
            return table
        # The catalog of another output, copied or moved here with this one: its metadata
        # lies there, and a commit would write into that output. This output's table is made
        # afresh here (the entry dropped, the other output's files left alone).
        found.drop_table(identifier)
    except NoSuchTableError:
        pass
    schema = _iceberg_schema(pq.read_schema(first_file))
    table = found.create_table(identifier, schema=schema, location=location,
                               properties={"format-version": "2", **METADATA_RETENTION})
    with table.transaction() as transaction:
        transaction.set_properties({"schema.name-mapping.default": schema.name_mapping.model_dump_json()})
    return found.load_table(identifier)


def _evolved(found: Any, output: str, table: Any, first_file: str) -> Any:
    """``table`` able to hold ``first_file``'s columns: as it is when they match; its schema grown
    by name when the file adds columns (a config that adds one, e.g. ``embedding_scale`` of int8
    vectors), as pyiceberg evolves it; made anew when a column's type changed in a way Iceberg
    cannot evolve (float vectors stored as int8 now): the run's snapshot is then the new table's
    first, and ``chunkline publish`` of an earlier run registers that run again."""
    import pyarrow.parquet as pq
    from pyiceberg.exceptions import ResolveError, ValidationError
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible

    arrow = pq.read_schema(first_file)

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
    name = table.name()[-1]
    found.drop_table((NAMESPACE, name))
    return _table(found, output, name, first_file)


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
    Path(where).parent.mkdir(parents=True, exist_ok=True)
    # Page checksums on: a reader verifying them refuses a changed page instead of applying it.
    pq.write_table(rows, where, compression="zstd", write_page_checksum=True)
    encoded = path.encode("utf-8")
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=where, file_format=FileFormat.PARQUET,
        partition=Record(), record_count=len(positions), file_size_in_bytes=os.path.getsize(where),
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
    from chunkline.index import storage
    from chunkline.index.tables import live_files

    run_dir = storage.join(output, manifest.run_id)
    return [LiveData(str(Path(found.path).resolve()), found.deleted)
            for found in live_files(run_dir, manifest, table)]


def publish_run(output: str, manifest: Manifest) -> dict[str, int]:
    """Make the run ``manifest`` describes current in every consumer table it lists, all at
    once. Write-audit-publish: each table's snapshot is committed first without becoming current
    (staged; an existing snapshot of the run, as a rollback finds it, is reused), then every
    table's ``main`` branch is switched to it in one catalog transaction (:func:`switch`), so
    a reader of the catalog never sees one table at this run and another at the previous one,
    and a process killed before the switch leaves every table as it was. A run of an earlier
    format is registered as it lies: nothing is rewritten. The snapshot ids by table."""
    from chunkline.index.tables import has_table

    if not supported(output):
        return {}
    found = catalog(output)
    staged: dict[str, tuple[Any, int]] = {}
    for name in TABLES:
        if not has_table(manifest, name):
            continue
        files = run_files(output, manifest, name)
        table = _evolved(found, output, _table(found, output, name, files[0].path), files[0].path)
        existing = snapshot_of_run(table, manifest.run_id)
        snapshot_id = (existing.snapshot_id if existing is not None
                       else commit_table(table, manifest.run_id, files, make_current=False))
        staged[name] = (found.load_table((NAMESPACE, name)), snapshot_id)
    switch(output, list(staged.values()))
    return {name: snapshot_id for name, (_, snapshot_id) in staged.items()}


def switch(output: str, targets: Sequence[tuple[Any, int]]) -> None:
    """Point the ``main`` branch of each ``(table, snapshot id)`` at that snapshot, in one
    transaction of the output's SQLite catalog: each table's new metadata file is written
    first (immutable, unread until the catalog names it), then every catalog row moves at once,
    each only if it still names the metadata the switch was made from (optimistic concurrency,
    as pyiceberg's SqlCatalog commits one table). IcebergError when another writer moved one."""
    import sqlite3

    from pyiceberg.serializers import ToOutputFile
    from pyiceberg.table.update import update_table_metadata

    moves = []
    targets = [(table.refresh(), snapshot_id) for table, snapshot_id in targets]  # as committed now
    for table, snapshot_id in targets:
        current = table.current_snapshot()
        if current is not None and current.snapshot_id == snapshot_id:
            continue
        before = table.metadata_location
        metadata = update_table_metadata(table.metadata, (_main_branch_at(snapshot_id),),
                                         metadata_location=before)
        version = int(before.rsplit("/", 1)[-1].split("-", 1)[0]) + 1
        after = table.location_provider().new_table_metadata_file_location(new_version=version)
        ToOutputFile.table_metadata(metadata, table.io.new_output(after))
        moves.append((after, before, table.name()[-1]))
    if not moves:
        return
    connection = sqlite3.connect(_root(output) / CATALOG_FILE, timeout=60, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        for after, before, name in moves:
            moved = connection.execute(
                "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? "
                "WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ?",
                (after, before, CATALOG_NAME, NAMESPACE, name, before)).rowcount
            if moved != 1:
                connection.execute("ROLLBACK")
                raise IcebergError(f"{output}: the Iceberg table {NAMESPACE}.{name} was changed by another "
                                   "writer meanwhile; nothing was switched")
        connection.execute("COMMIT")
    finally:
        connection.close()
    for table, _ in targets:
        _trim_metadata(table.refresh())


def _trim_metadata(table: Any) -> None:
    """Remove ``table``'s metadata files older than the last :data:`PREVIOUS_METADATA_FILES` its
    metadata log names (readers holding one of those still read it)."""
    kept = {table.metadata_location.removeprefix("file://")}
    kept |= {entry.metadata_file.removeprefix("file://")
             for entry in table.metadata.metadata_log[-PREVIOUS_METADATA_FILES:]}
    folder = Path(table.metadata.location.removeprefix("file://")) / "metadata"
    for path in folder.glob("*.metadata.json"):
        if str(path) not in kept:
            path.unlink(missing_ok=True)


def run_snapshots(output: str) -> dict[str, dict[str, int]]:
    """Each run's snapshot id per table, of the snapshots the tables keep (the run's id is in
    each one's summary); empty for an output without Iceberg tables."""
    if not supported(output) or not (_root(output) / CATALOG_FILE).is_file():
        return {}
    found: dict[str, dict[str, int]] = {}
    try:
        for name, table in _own_tables(catalog(output, create=False), output):
            for snapshot in table.metadata.snapshots:
                run_id = (snapshot.summary or {}).get(RUN_ID_PROPERTY)
                if run_id is not None:
                    found.setdefault(run_id, {})[name] = snapshot.snapshot_id
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


def tables(output: str) -> list[TableState]:
    """The output's Iceberg tables as they are now: current metadata file, snapshot, its run and
    live rows (records less position deletes, from the snapshot's summary)."""
    states = []
    for name, table in _own_tables(catalog(output, create=False), output):
        snapshot = table.current_snapshot()
        summary = snapshot.summary if snapshot is not None and snapshot.summary is not None else {}
        rows = int(summary.get("total-records", 0)) - int(summary.get("total-position-deletes", 0))
        states.append(TableState(name, f"{NAMESPACE}.{name}", table.metadata_location.removeprefix("file://"),
                                 snapshot.snapshot_id if snapshot else None,
                                 summary.get(RUN_ID_PROPERTY), rows))
    return states


def expire(output: str, keep_runs: set[str]) -> int:
    """Expire every snapshot whose run is not in ``keep_runs`` (the current one never), then
    remove the files under each table's folder that no remaining snapshot and no current
    metadata file references (old metadata files, manifests, position-delete files), as
    Iceberg's ``expire_snapshots`` and ``remove_orphan_files`` do: nothing a kept snapshot
    reads is removed, and nothing a dropped one alone held stays. The number of files removed.
    Data files lie in run folders: ``chunkline gc`` removes those."""
    from pyiceberg.table.update import AssertRefSnapshotId, RemoveSnapshotsUpdate

    if not supported(output) or not (_root(output) / CATALOG_FILE).is_file():
        return 0
    found = catalog(output, create=False)
    removed = 0
    for name, table in _own_tables(found, output):
        current = table.current_snapshot()
        dropped = [snapshot.snapshot_id for snapshot in table.metadata.snapshots
                   if (current is None or snapshot.snapshot_id != current.snapshot_id)
                   and (snapshot.summary or {}).get(RUN_ID_PROPERTY) not in keep_runs]
        if dropped:
            table.catalog.commit_table(
                table, (AssertRefSnapshotId(snapshot_id=current.snapshot_id if current else None, ref="main"),),
                (RemoveSnapshotsUpdate(snapshot_ids=dropped),))
            table = table.refresh()
        removed += _remove_orphans(table, _root(output) / name)
    return removed


def _remove_orphans(table: Any, folder: Path) -> int:
    """Remove the files under ``folder`` that ``table``'s current metadata does not reach."""
    from pyiceberg.manifest import DataFileContent

    reached = {table.metadata_location.removeprefix("file://")}
    for snapshot in table.metadata.snapshots:
        reached.add(snapshot.manifest_list.removeprefix("file://"))
        for manifest in snapshot.manifests(table.io):
            reached.add(manifest.manifest_path.removeprefix("file://"))
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.data_file.content != DataFileContent.DATA:
                    reached.add(entry.data_file.file_path.removeprefix("file://"))
    removed = 0
    for path in sorted(folder.rglob("*")):
        if path.is_file() and str(path) not in reached:
            path.unlink()
            removed += 1
    return removed
