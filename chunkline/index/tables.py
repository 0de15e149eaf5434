"""A run's tables as the files that hold their live rows: the one place every reader (``query``,
:class:`chunkline.index.search.Index`, ``sync``, ``report``, ``publish``, reuse and carry)
learns which rows a run has.

A manifest of format 1 (every manifest before ``format`` existed) lists each table's files by
name in ``files``, all in the run's own folder, every row live. Format 2 lists them in
``tables``, each file by its path relative to OUTPUT, so that a rerun can reference an earlier
run's file instead of copying it, with the rows it holds and the positions of those that are no
longer live::

    "format": 2,
    "tables": {"chunks": [{"path": "<run id>/chunks-00000-of-00004.parquet", "rows": 812,
                           "bytes": 402211, "deleted": [3, 17], "shard": 0}, ...],
               "documents": [...], ...}

A file may name the ``shard`` it belongs to. A job writes each shard sorted (:data:`SORT_ORDER`);
a rerun leaves a shard's unchanged rows in their earlier files and writes its new rows as a
file of their own, so one shard may be several files, each sorted. Read together
(:func:`read_table`), a shard's files are merged in the table's order: the rows come in the
order a run that wrote the shard whole would have written them (ranking breaks ties by
position, so the order is part of what a run holds).

This is merge-on-read with position deletes, the model of Apache Iceberg v2's position delete
files (https://iceberg.apache.org/spec/#position-delete-files: a deleted row is (file, 0-based
position)), Delta Lake's deletion vectors and Lance's deletion files. Each shard writer writes
the deletions of its shard's files itself, as the shard's deletion file,
``<run id>/deletes/<table>-SSSSS.parquet`` (:func:`shard_deletion_file`; columns ``file``, the
entry's path, and ``pos``; sorted by file in the listing's order, then position), and the
manifest references each by path with its size and digest, each entry stating only how many of
its rows it deletes (format 4)::

    "format": 4,
    "deletes": {"chunks": [{"path": "<run id>/deletes/chunks-00000.parquet", "rows": 17,
                            "bytes": 877, "digest": "<BLAKE2b-128 of its bytes>", "shard": 0}, ...]},
    "tables": {"chunks": [{"path": "...", "rows": 812, "deleted_rows": 17, "shard": 0}, ...]}

A reader opens the deletion file of a shard only when it reads a file of that shard with
deleted rows (:class:`Deletions`, lazily): neither the job's driver nor a carry worker holds
more than one shard's positions, as in Iceberg v2, where each position delete file is
written beside the data files it deletes from and a scan reads only those that apply. A table
deleting few rows (:data:`INLINE_DELETES` in all) has them inline instead, the manifest a
sorted JSON list per file (format 2, as a run with no deletion file is written). Format 3, one
deletion file per table (``<run id>/deletes/<table>.parquet``, referenced as one object), is
still read. A 1 % night over 100 M documents deletes ~2 M chunk rows: megabytes of JSON in each
manifest, which every reader parses whole, where the files hold them delta-encoded (Parquet's
DELTA_BINARY_PACKED, ~1-2 bytes a position). A format-1 manifest reads as the trivial case:
each file in the run's folder, no rows deleted, counts not stated.

Beam-free: the files are opened through :mod:`chunkline.index.storage`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from chunkline.index import storage
from chunkline.memo import MEMO_TABLE
from chunkline.records import with_fixed_vectors
from chunkline.index.manifest_types import FORMAT as FORMAT  # the formats are the manifest's: re-exported
from chunkline.index.manifest_types import INLINE_FORMAT, DeletionFile, Listing, Manifest, TableFile

# Deleted positions a run keeps inline in its manifest for one table, at most (~7 KB of JSON);
# more, and the manifest references its shards' deletion files.
INLINE_DELETES = 1024
DELETES_DIR = "deletes"  # in the run's folder: <table>-SSSSS.parquet (<table>.parquet: format 3)

# The order each table's shards are sorted in, the job's shard writers' and the merge in
# read_table's: one home for both.
SORT_ORDER: dict[str, tuple[str, ...]] = {
    "chunks": ("doc_id", "chunk_index"),
    "carry": ("doc_id", "chunk_index"),
    "documents": ("doc_id", "uri", "status"),
    "rejected": ("doc_id", "uri", "reason"),
    "state": ("uri", "position", "doc_id"),  # by place: chunkline.state.state_sort_key
}


class TableFileError(ValueError):
    """A file a run's manifest lists is missing, not readable Parquet, or does not hold the rows
    the manifest states; the message names the file, on one line."""


@dataclasses.dataclass(frozen=True)
class DeletionSource:
    """A deletion file as a reader finds it: its full ``path``, what the manifest states of it
    (``described``), and ``covers``, ``(path relative to OUTPUT, rows, deleted rows)`` of each
    file whose deletions it holds (its shard's, format 4; its table's, format 3): what it holds
    must be exactly those."""

    path: str
    described: DeletionFile
    covers: tuple[tuple[str, int, int], ...]


@dataclasses.dataclass(frozen=True)
class Deletions:
    """A file's deleted positions as its run's manifest states them: ``count`` of them, either
    ``inline`` or held by the deletion file ``source`` under the file's ``name`` there, read
    the first time :meth:`positions` asks. A plan, a worker or a :class:`LiveFile` holds a
    file's deletions by reference, a few hundred bytes whatever their number."""

    count: int = 0
    inline: tuple[int, ...] = ()
    source: DeletionSource | None = None
    name: str = ""

    @classmethod
    def listed(cls, positions: Sequence[int]) -> Deletions:
        """Deletions held inline: ``positions``, ascending."""
        return cls(len(positions), tuple(positions))

    def positions(self) -> tuple[int, ...]:
        """The ascending 0-based positions deleted; :class:`TableFileError` naming the deletion
        file when it is missing, damaged, or holds other deletions than the manifest counts."""
        if self.source is None or not self.count:
            return self.inline
        return read_deletions(self.source).get(self.name, ())


NO_DELETIONS = Deletions()


@dataclasses.dataclass(frozen=True)
class LiveFile:
    """One file of a table: its full ``path``; ``name`` as the manifest spells it (format 1: the
    file name; format 2: relative to OUTPUT, ``<run folder>/<file name>``); ``folder``, the run
    folder it lies in; what the manifest states of it (``rows``, ``bytes``, ``digest``: None
    when it states nothing); ``deletions``, its rows no longer live (:attr:`deleted`, the
    positions, read from a deletion file when first asked); ``shard``, the shard it belongs to
    when the manifest names one."""

    path: str
    name: str
    folder: str
    rows: int | None = None
    bytes: int | None = None
    digest: str | None = None
    deletions: Deletions = NO_DELETIONS
    shard: int | None = None

    @property
    def deleted(self) -> tuple[int, ...]:
        """The ascending 0-based positions of rows no longer live (:meth:`Deletions.positions`)."""
        return self.deletions.positions()

    @property
    def live_rows(self) -> int | None:
        """Rows of the file still live, when the manifest states its rows (no deletion file read)."""
        return None if self.rows is None else self.rows - self.deletions.count


def _not_found(exc: BaseException) -> bool:
    """Whether ``exc`` says a file is not there: Beam's GCS reads raise google-cloud-storage's
    NotFound where a local read raises FileNotFoundError."""
    if isinstance(exc, FileNotFoundError):
        return True
    try:
        from google.api_core.exceptions import NotFound
    except ImportError:  # without google-cloud-storage: no gs:// output to read
        return False
    return isinstance(exc, NotFound)


def listed_file_problem(file: LiveFile, digest: bool = True) -> tuple[str | None, pq.FileMetaData | None]:
    """Why a listed file is not the file its run wrote (missing, unreadable, another size, with
    ``digest`` another digest, other rows than the manifest states), from its size, footer and
    digest alone, and its footer when it reads: ``(None, footer)`` for a file as written."""
    try:
        with storage.parquet_source(file.path) as source:
            held = storage.source_size(source)
            changed = digest and file.digest is not None and storage.source_digest(source) != file.digest
            metadata = pq.read_metadata(source)
    except Exception as exc:  # noqa: BLE001 - truncated or not Parquet: each library its own error
        if _not_found(exc):
            return f"{file.name} is missing", None
        return f"{file.name} is unreadable ({type(exc).__name__}: {exc})", None
    if file.bytes is not None and held != file.bytes:
        # Changed since its run wrote it (the same rows rewritten, a flipped bit): never read
        # as that run's, whatever its footer says.
        return f"{file.name} is {held:,} bytes, the manifest says {file.bytes:,}", metadata
    if changed:
        return f"{file.name} is not the file its run wrote (its digest differs from the manifest's)", metadata
    if file.rows is not None and metadata.num_rows != file.rows:
        return f"{file.name} holds {metadata.num_rows:,} rows, the manifest says {file.rows:,}", metadata
    return None, metadata


def listing_of(manifest: Manifest | Listing) -> Listing:
    """The file listing of ``manifest`` (a listing is its own)."""
    return manifest.listing if isinstance(manifest, Manifest) else manifest


def manifest_format(manifest: Manifest | Listing) -> int:
    """The manifest's format: 1 when it names none."""
    return listing_of(manifest).format


def table_names(manifest: Manifest | Listing) -> list[str]:
    """The tables the manifest lists files for, in its order."""
    return listing_of(manifest).table_names()


def has_table(manifest: Manifest | Listing, table: str) -> bool:
    """Whether the manifest lists ``table`` with at least one file."""
    listing = listing_of(manifest)
    if listing.format < INLINE_FORMAT:
        return bool(listing.files.get(table))
    return bool(listing.tables.get(table))


def live_files(run_dir: str, manifest: Manifest | Listing, table: str) -> list[LiveFile]:
    """The files of ``table`` in the run ``run_dir`` whose manifest is ``manifest``, in the
    manifest's order; none for a table it does not list (the memo table's segments,
    :attr:`Listing.memo`, as files every row of which is live). Never a glob: a stray file in a
    run folder is not part of any run. No deletion file is read here: a file's
    :attr:`LiveFile.deletions` reads its shard's when its positions are asked for."""
    listing = listing_of(manifest)
    if listing.format < INLINE_FORMAT:
        folder = _folder_name(run_dir)
        return [LiveFile(storage.join(run_dir, name), name, folder) for name in listing.files.get(table, ())]
    output = storage.parent(run_dir)
    if table == MEMO_TABLE and listing.memo is not None:
        return [LiveFile(storage.join(output, *segment.path.split("/")), segment.path,
                         segment.path.split("/", 1)[0], segment.rows, segment.bytes)
                for segment in listing.memo]
    entries = listing.tables.get(table, ())
    sources = _deletion_sources(output, entries, listing.deletes.get(table, ()))
    return [LiveFile(storage.join(output, *entry.path.split("/")), entry.path,
                     entry.path.split("/", 1)[0], entry.rows, entry.bytes,
                     entry.digest, _deletions_of(entry, sources), entry.shard)
            for entry in entries]


def _deletion_sources(output: str, entries: Sequence[TableFile], files: Sequence[DeletionFile]
                      ) -> dict[int | None, DeletionSource]:
    """Each deletion file of a table by the shard it serves (None: the whole table, format 3)."""
    return {described.shard: DeletionSource(
                storage.join(output, *described.path.split("/")), described,
                tuple((entry.path, entry.rows, entry.deleted_rows or 0) for entry in entries
                      if described.shard is None or entry.shard == described.shard))
            for described in files}


def _deletions_of(entry: TableFile, sources: dict[int | None, DeletionSource]) -> Deletions:
    source = sources.get(None, sources.get(entry.shard)) if sources else None
    if source is None:
        return Deletions.listed(entry.deleted or ()) if entry.deleted else NO_DELETIONS
    return Deletions(entry.deleted_rows or 0, (), source, entry.path)


def deletion_files(run_dir: str, manifest: Manifest | Listing) -> list[str]:
    """The full paths of the deletion files the manifest references, table then shard order."""
    output = storage.parent(run_dir)
    return [storage.join(output, *described.path.split("/"))
            for files in listing_of(manifest).deletes.values() for described in files]


def listed_paths(run_dir: str, manifest: Manifest | Listing) -> list[str]:
    """Every file the manifest lists, as ``<run folder>/<name in it>`` relative to OUTPUT: each
    table's files (a format-1 manifest's in its own folder), its memo segments and its deletion
    files; read from the manifest alone (``gc`` keeps exactly these)."""
    listing = listing_of(manifest)
    if listing.format < INLINE_FORMAT:
        folder = _folder_name(run_dir)
        return [f"{folder}/{name}" for names in listing.files.values() for name in names]
    return [*(entry.path for entries in listing.tables.values() for entry in entries),
            *(segment.path for segment in listing.memo or ()),
            *(described.path for files in listing.deletes.values() for described in files)]


# --- deletion files ---------------------------------------------------------------------------

def deletes_schema() -> pa.Schema:
    return pa.schema([pa.field("file", pa.string(), nullable=False),
                      pa.field("pos", pa.int64(), nullable=False)])


def shard_deletion_path(run_folder: str, table: str, shard: int) -> str:
    """A shard's deletion file as a manifest spells it, relative to OUTPUT."""
    return f"{run_folder}/{DELETES_DIR}/{table}-{shard:05d}.parquet"


def file_digest(data: bytes) -> str:
    """BLAKE2b-128 of a file's bytes, hex: what a manifest states as a deletion file's digest
    (the job's own file digest, ``chunkline.transforms.write.file_digest``)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def deletion_file_bytes(entries: Sequence[dict[str, Any]]) -> bytes:
    """The deletion file of ``entries`` (each a file with its positions inline, ``deleted``):
    one row per deleted position, in the entries' order. Positions are DELTA_BINARY_PACKED (the
    Parquet encoding for sorted integers: a few bits each) and the file column dictionary
    encoded, so the file costs about a byte or two per deletion."""
    files = [entry["path"] for entry in entries for _ in entry.get("deleted") or ()]
    positions = [p for entry in entries for p in entry.get("deleted") or ()]
    table = pa.table({"file": pa.array(files, pa.string()), "pos": pa.array(positions, pa.int64())},
                     schema=deletes_schema())
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", use_dictionary=["file"],
                   column_encoding={"pos": "DELTA_BINARY_PACKED"}, row_group_size=1 << 20)
    return sink.getvalue()


def shard_deletion_file(run_folder: str, table: str, shard: int, entries: Sequence[dict[str, Any]],
                        write: Callable[[str, bytes], None]
                        ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """What a shard writer lists of shard ``shard`` of ``table``: its ``entries`` (format 2, the
    positions inline in ``deleted``) and, when any deletes a row, its deletion file, written by
    ``write(path relative to OUTPUT, bytes)`` at :func:`shard_deletion_path`, as the manifest
    references it (``path``, ``rows``, ``bytes``, ``digest``, ``shard``), the entries then
    stating only how many of their rows it deletes (``deleted_rows``)."""
    total = sum(len(entry.get("deleted") or ()) for entry in entries)
    if not total:
        return [dict(entry) for entry in entries], None
    data = deletion_file_bytes(entries)
    path = shard_deletion_path(run_folder, table, shard)
    write(path, data)
    counted = [{**{k: v for k, v in entry.items() if k != "deleted"},
                "deleted_rows": len(entry.get("deleted") or ())} for entry in entries]
    return counted, {"path": path, "rows": total, "bytes": len(data), "digest": file_digest(data),
                     "shard": shard}


def listed_deletions(output: str, tables: dict[str, list[dict[str, Any]]],
                     deletes: dict[str, list[dict[str, Any]]]
                     ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]], list[str]]:
    """The run's ``tables`` and their shards' deletion files (``deletes``, by table, each file
    as :func:`shard_deletion_file` describes it, in shard order) as its manifest lists them,
    and the deletion files it no longer needs (paths relative to OUTPUT). A table deleting at
    most :data:`INLINE_DELETES` rows in all has them read back (never more than that many) and
    inline (format 2); the others keep their shards' files and their entries only count
    (format 4: a manifest with any deletion file). No more positions are held at once than
    one shard's or :data:`INLINE_DELETES`."""
    listed: dict[str, list[dict[str, Any]]] = {}
    kept: dict[str, list[dict[str, Any]]] = {}
    unneeded: list[str] = []
    for table, entries in tables.items():
        files = deletes.get(table, [])
        if not files:
            listed[table] = entries
            continue
        sources = _deletion_sources(output, [_entry_file(entry) for entry in entries],
                                    [_described(f) for f in files])
        if sum(f["rows"] for f in files) > INLINE_DELETES:
            listed[table] = [{k: v for k, v in entry.items() if k != "deleted"} for entry in entries]
            kept[table] = files
            continue
        listed[table] = [{**{k: v for k, v in entry.items() if k not in ("deleted", "deleted_rows")},
                          "deleted": list(_deletions_of(_entry_file(entry), sources).positions())}
                         for entry in entries]
        unneeded.extend(f["path"] for f in files)
    return listed, kept, unneeded


def _entry_file(entry: dict[str, Any]) -> TableFile:
    return TableFile(entry["path"], entry["rows"], None, entry.get("shard"),
                     deleted_rows=entry.get("deleted_rows"))


def _described(found: dict[str, Any]) -> DeletionFile:
    return DeletionFile(found["path"], found["rows"], found["bytes"], found["digest"], found.get("shard"))


# A few deletion files' positions, so that a shard's files (read one after the other) or a
# table read after its live rows were counted read a deletion file once; keyed by its digest,
# so a rewritten file is read anew. Per-shard files: a few shards' positions at most.
_READ_DELETES: OrderedDict[tuple[str, str], dict[str, tuple[int, ...]]] = OrderedDict()
_KEEP_READ = 4


def read_deletions(source: DeletionSource) -> dict[str, tuple[int, ...]]:
    """The positions ``source``'s deletion file holds, by the file they delete from, checked
    against what the manifest states (its size, digest and rows; exactly the deletions each
    file it covers counts, below its rows); :class:`TableFileError` naming it, on one line."""
    key = (source.path, source.described.digest)
    if key not in _READ_DELETES:
        found = _read_deletion_file(source.path, source.described)
        for name, rows, stated in source.covers:
            got = found.get(name, ())
            if len(got) != stated or (got and got[-1] >= rows):
                raise TableFileError(f"{source.path}: its deletions of {name} are not the "
                                     f"{stated:,} ascending positions below "
                                     f"{rows:,} the run's manifest states")
        if set(found) - {name for name, _, _ in source.covers}:
            raise TableFileError(f"{source.path}: deletes rows of a file the run's manifest does "
                                 "not list" + ("" if source.described.shard is None else " in its shard"))
        _READ_DELETES[key] = found
        while len(_READ_DELETES) > _KEEP_READ:
            _READ_DELETES.popitem(last=False)
    _READ_DELETES.move_to_end(key)
    return _READ_DELETES[key]


def _read_deletion_file(path: str, described: DeletionFile) -> dict[str, tuple[int, ...]]:
    """A deletion file's positions by the file they delete from, each ascending; checked
    against what the manifest states of it (size, digest, rows)."""
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        raise TableFileError(f"{path}: no such deletion file, though the run's manifest lists it") from None
    if len(data) != described.bytes or file_digest(data) != described.digest:
        raise TableFileError(f"{path}: not the deletion file the run's manifest names (its size or "
                             "digest differs: replaced or damaged since the run)")
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TableFileError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None
    if table.schema.names != ["file", "pos"] or table.num_rows != described.rows:
        raise TableFileError(f"{path}: holds {table.num_rows:,} deletions, the run's manifest "
                             f"says {described.rows:,}")
    files = table.column("file").combine_chunks().dictionary_encode()
    codes = files.indices.to_numpy(zero_copy_only=False)
    positions = table.column("pos").to_numpy()
    # Runs of one file: each must be ascending from 0 up, and each file one run.
    starts = np.flatnonzero(np.diff(codes, prepend=-1) != 0)
    ends = np.append(starts[1:], len(codes))
    names = files.dictionary.to_pylist()
    found: dict[str, tuple[int, ...]] = {}
    for start, end in zip(starts.tolist(), ends.tolist()):
        name, part = names[codes[start]], positions[start:end]
        if name in found or part[0] < 0 or (len(part) > 1 and not np.all(np.diff(part) > 0)):
            raise TableFileError(f"{path}: its deletions of {name} are not ascending positions, "
                                 "listed together")
        found[name] = tuple(part.tolist())
    return found


def relative_path(path: str) -> str:
    """A file's path as a format-2 manifest spells it: ``<run folder>/<file name>``, relative to
    OUTPUT (the file lies in a run folder of OUTPUT)."""
    return "/".join(path.replace("\\", "/").rstrip("/").rsplit("/", 2)[-2:])


def live_rows(run_dir: str, manifest: Manifest | Listing, table: str) -> int | None:
    """Live rows of ``table`` as the manifest states them; None for a format-1 manifest (its
    files' footers say)."""
    files = live_files(run_dir, manifest, table)
    counts = [f.live_rows for f in files if f.live_rows is not None]
    return sum(counts) if len(counts) == len(files) else None


def read_shard(path: str, read: Callable[[pq.ParquetFile], pa.Table], *, size: int | None = None,
               digest: str | None = None) -> pa.Table:
    """``read`` of the Parquet file at ``path``; :class:`TableFileError` naming the file, on one
    line, when it is missing, truncated or corrupt, when it is not ``size`` bytes or its bytes'
    BLAKE2b-128 is not ``digest`` (what its run's manifest recorded as it was written: a file
    changed since is never served, however well it parses), or when a page's checksum fails
    (pages are written with their CRC)."""
    try:
        with storage.parquet_source(path) as source:
            if size is not None:
                held = storage.source_size(source)
                if held != size:
                    raise TableFileError(f"{path}: {held:,} bytes, the run's manifest says {size:,} "
                                         "(replaced or damaged since the run wrote it)")
            if digest is not None and storage.source_digest(source) != digest:
                raise TableFileError(f"{path}: its bytes are not those the run's manifest recorded "
                                     "(replaced or damaged since the run wrote it)")
            with pq.ParquetFile(source, page_checksum_verification=True) as shard:
                return with_fixed_vectors(read(shard))
    except FileNotFoundError:
        raise TableFileError(f"{path}: no such file, though the run's manifest lists it") from None
    except TableFileError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:  # pyarrow's own, or the filesystem's
        why = " ".join(str(exc).split()) or "no reason given"
        raise TableFileError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {why})") from None


Filters = Sequence[tuple[str, str, Any]]


def read_file(file: LiveFile, columns: Sequence[str] | None = None, *, optional: Sequence[str] = (),
              filters: Filters | None = None) -> pa.Table:
    """The live rows of ``file`` in file order: ``columns`` (None: every column) and those of
    ``optional`` the file has; with ``filters`` (pyarrow's form, conditions all met), only the
    rows meeting them. The deleted positions are dropped before the filter, so it sees what a
    reader of the live rows sees. With ``filters`` only the filtered columns are read whole, and
    of the others only the row groups holding a row that meets them (a few documents' text, not
    every document's). :class:`TableFileError` for a file that is missing, unreadable, or holds
    another number of rows than the manifest states, or whose deletion file is (only its
    shard's deletion file is read, and only when the file has deleted rows)."""
    deleted = file.deleted

    def read(shard: pq.ParquetFile) -> pa.Table:
        held = shard.metadata.num_rows
        if file.rows is not None and held != file.rows:
            raise TableFileError(f"{file.path}: holds {held:,} rows, the run's manifest says {file.rows:,} "
                                 "(replaced or damaged since the run)")
        if deleted and deleted[-1] >= held:
            raise TableFileError(f"{file.path}: the run's manifest deletes row {deleted[-1]:,} "
                                 f"of {held:,}")
        present = shard.schema_arrow.names
        wanted = None if columns is None else [*columns, *(c for c in optional
                                                           if c in present and c not in columns)]
        if not filters:
            table = shard.read(columns=wanted)
            return table.filter(pa.array(_live_mask(held, deleted))) if deleted else table
        keep = _live_mask(held, deleted)
        tested = shard.read(columns=list(dict.fromkeys(name for name, _, _ in filters)))
        keep &= _met(tested, filters)
        return _rows_at(shard, np.flatnonzero(keep), wanted)

    # A whole file read is checked against its recorded digest too (one more pass over bytes
    # about to be read anyway); a filtered read of a few rows, by its size and page checksums.
    return read_shard(file.path, read, size=file.bytes, digest=None if filters else file.digest)


def _live_mask(rows: int, deleted: Sequence[int]) -> np.ndarray:
    keep = np.ones(rows, dtype=bool)
    keep[np.asarray(deleted, dtype=np.int64)] = False
    return keep


def _met(table: pa.Table, filters: Filters) -> np.ndarray:
    """For each row of ``table``, whether it meets every condition (pyarrow's own reading of
    them, ``pyarrow.parquet.filters_to_expression``; a null never meets one)."""
    met = np.zeros(len(table), dtype=bool)
    if any(op == "in" and not len(values) for _, op, values in filters):
        return met  # pyarrow cannot type an empty value set; it meets nothing
    at = table.append_column("__position", pa.array(np.arange(len(table), dtype=np.int64)))
    chosen = at.filter(pq.filters_to_expression([list(filters)])).column("__position")
    met[chosen.to_numpy(zero_copy_only=False)] = True
    return met


def _rows_at(shard: pq.ParquetFile, positions: np.ndarray, columns: list[str] | None) -> pa.Table:
    """The rows at ``positions`` (ascending) with ``columns``, reading only the row groups that
    hold one of them."""
    sizes = [shard.metadata.row_group(g).num_rows for g in range(shard.metadata.num_row_groups)]
    starts = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
    group_of = np.searchsorted(starts, positions, side="right") - 1
    groups = np.unique(group_of).tolist()
    if not groups:
        return shard.schema_arrow.empty_table().select(columns) if columns is not None \
            else shard.schema_arrow.empty_table()
    read = shard.read_row_groups(groups, columns=columns)
    offsets = np.concatenate(([0], np.cumsum([sizes[g] for g in groups], dtype=np.int64)))
    local = positions - starts[group_of] + offsets[np.searchsorted(groups, group_of)]
    return read.take(pa.array(local, type=pa.int64()))


def read_table(run_dir: str, manifest: Manifest | Listing, table: str, columns: Sequence[str] | None = None,
               *, optional: Sequence[str] = (), filters: Filters | None = None) -> pa.Table | None:
    """The live rows of ``table`` (:func:`read_file` of each of its :func:`live_files`, in order,
    concatenated; columns one file lacks are null there); None when the run lists no file for
    it. The files of one shard are merged in the table's :data:`SORT_ORDER`, so the rows come
    in the order of the shard written whole."""
    files = live_files(run_dir, manifest, table)
    order = SORT_ORDER.get(table, ())
    groups: list[list[LiveFile]] = []
    for file in files:
        if groups and file.shard is not None and groups[-1][0].shard == file.shard and order:
            groups[-1].append(file)
        else:
            groups.append([file])
    parts = []
    for group in groups:
        if len(group) == 1:
            parts.append(read_file(group[0], columns, optional=optional, filters=filters))
            continue
        # The sort columns are read too (where projected away) and dropped once merged.
        extra = [] if columns is None else [c for c in order if c not in columns and c not in optional]
        wanted = None if columns is None else [*columns, *extra]
        merged = pa.concat_tables([read_file(f, wanted, optional=optional, filters=filters)
                                   for f in group], promote_options="default")
        # A stable sort: pyarrow compares strings by their UTF-8 bytes, which orders as Python
        # orders str (by code point), the order the shard writer sorts its records in.
        merged = merged.take(pc.sort_indices(merged, sort_keys=[(c, "ascending") for c in order]))
        parts.append(merged.drop_columns(extra) if extra else merged)
    return pa.concat_tables(parts, promote_options="default") if parts else None


def _folder_name(run_dir: str) -> str:
    return run_dir.rstrip("/").rstrip("\\").replace("\\", "/").rsplit("/", 1)[-1]
