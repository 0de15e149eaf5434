"""Write: records -> deterministic Parquet shards through Beam's filesystems (local or gs://).

Beam's WriteToParquet spreads elements over shards as bundles arrive, so two runs of the same
input give different files. Here a record's shard is a stable hash of its key (a document's
chunks stay together), and each shard is sorted before it is written: the same input and config
give the same files, on any runner.

Records are written where they are made (``transforms/spill.py``): each bundle appends its
records to part files of their shard under ``_spill/<table>``, each part sorted; only the parts'
paths cross the grouping by shard. A runner that holds a grouping in memory (the local
FnApiRunner keeps a stage's whole input and output) then holds paths, not every chunk three
times; each shard's parts are merged as its file is written (an external merge sort: no worker
holds a shard), one shard at a time, and the parts are deleted once every shard is written.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import os
from collections import Counter
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.coders import Coder
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.io.filesystems import FileSystems
from apache_beam.pvalue import AsSingleton, PCollection
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.index import compaction  # its bounds read where applied (a test narrows them)
from chunkline.index.compaction import Compaction, compacted
from chunkline.index.layout import shard_of  # noqa: F401 - where the writers and readers share it
from chunkline.index.tables import SORT_ORDER, Deletions, relative_path, shard_deletion_file
from chunkline.records import as_row, framed_state, parquet_schema, to_parquet, with_fixed_vectors
from chunkline.transforms.progress import WRITTEN, tally
from chunkline.transforms.match import is_local
from chunkline.transforms.memory import release_after
from chunkline.transforms import spill
from chunkline.transforms.spill import RemoveParts, coder_of, spill_dir

# Every shard's part is written once the bundle's buffers hold this much together: memory stays
# bounded whatever the number of shards.
BUFFERED_BYTES = 64 << 20
# A row group holds at most this many rows and about this many encoded bytes: the shard is
# converted to Arrow one group at a time.
ROW_GROUP = 8192
ROW_GROUP_BYTES = 16 << 20
# Records decoded into Python objects at a time while a row group is built.
DECODE_BATCH = 512
# Past this many runs of consecutive rows a merged shard is taken (copied) rather than sliced: a
# table of thousands of tiny chunks costs its writer more than the copy would.
MOST_SLICES = 1024


class Sidecar(NamedTuple):
    """A second table written beside each shard, a row per record in the same order:
    ``to_row(record, records sharing its shard key)``, given the record before ``finish``."""

    table: str
    schema: pa.Schema
    to_row: Callable[[Any, int], dict]


class Redecided(NamedTuple):
    """Documents a rerun decides on again (changed, gone, or reached by a change,
    ``transforms/settle.py``): their previous rows in one shard are replaced or dropped, and
    every other previous row of the shard stays where it lies (rows kept by id), a rejection
    excepted, which every run decides again. Empty for a shard of which nothing is decided
    again; a shard given none keeps no previous row."""

    doc_ids: tuple[str, ...]


def shard_path(directory: str, table: str, index: int, shards: int) -> str:
    return FileSystems.join(directory, f"{table}-{index:05d}-of-{shards:05d}.parquet")


# The sidecar's footer names the digest of its shard's bytes as written, so a later run that
# finds the shard with that digest knows it intact without decoding its text
# (transforms/carry.py, verify_pair).
SHARD_DIGEST_KEY = b"chunkline.shard_blake2b"


# A shard written with ``previous`` names, in its footer, the digest of its sorted records as
# encoded, of its schema and of what else made it: a later run whose records digest alike finds
# its shard already written, and links it instead of encoding and compressing it again.
ROWS_DIGEST_KEY = b"chunkline.rows_blake2b"


def rows_digest(made_under: str, schema: pa.Schema, encoded: Iterable[bytes]) -> str:
    """blake2b (128 bits, hex) of ``made_under`` (what besides the records decides the rows: the
    run's processing signature, with the code's fingerprint), the schema, the Arrow version that
    encodes them, and each encoded record after its length, in the shard's order."""
    digest = framed_state((made_under, schema.to_string(), pa.__version__))
    for data in encoded:
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


# ... and the length and digest of every byte before its footer, as written: a later run checks
# a shard it would link by hashing those bytes, not by decoding every page.
DATA_DIGEST_KEY = b"chunkline.data_blake2b"


def intact_with_digest(path: str, digest: str) -> bool:
    """Whether the shard at ``path`` names ``digest`` in its footer and its bytes before the
    footer are those it was written with (their length and digest, named beside it): a damaged
    or truncated file is written again, never linked."""
    try:
        with FileSystems.open(path) as handle:
            footer = pq.read_metadata(handle).metadata or {}
            if footer.get(ROWS_DIGEST_KEY) != digest.encode():
                return False
            length, _, data_digest = footer.get(DATA_DIGEST_KEY, b"").decode("ascii").partition(":")
            if int(length) < 0:
                return False
            handle.seek(0)
            # A file cut short hashes fewer bytes: another digest.
            if file_digest(handle, size=int(length)) != data_digest:
                return False
            # The footer follows at once: its length, then the magic, end the file.
            tail = handle.read()
        return (len(tail) >= 8 and tail[-4:] == b"PAR1"
                and int.from_bytes(tail[-8:-4], "little") == len(tail) - 8)
    except Exception:  # noqa: BLE001 - a damaged footer raises whatever arrow raises
        return False


# Each shard writer lists the files that hold its shard's live rows here, one JSON file per
# (table, shard): the run's manifest is made from them (pipeline/run.py).
LISTING_DIR = "_listing"


def listing_path(directory: str, table: str, index: int) -> str:
    return FileSystems.join(directory, LISTING_DIR, f"{table}-{index:05d}.json")


def same_output(path: str, other: str) -> bool:
    """Whether two files of run folders lie in the same OUTPUT (a manifest lists only files
    of its own output, by their paths relative to it)."""
    def output(p: str) -> str:
        return p.replace("\\", "/").rstrip("/").rsplit("/", 2)[0]
    return output(path) == output(other)


def write_listing(directory: str, table: str, index: int,
                  files: Sequence[tuple[str, int, Sequence[int]]]) -> None:
    """The shard ``index`` of ``table`` as the manifest lists it (``chunkline.index.tables``):
    each ``(path, rows, deleted positions)``, its path relative to OUTPUT (a file may lie in an
    earlier run's folder), in order; the positions, when any, in the shard's own deletion file
    (``chunkline.index.tables.shard_deletion_file``, in the run's ``deletes/``), which the
    listing references, so the driver that makes the manifest never reads them (Iceberg v2's
    position delete files, written by the writer of the data files they delete from). The
    listing is ``{"files": [entry...], "deletes": the deletion file or null}``. A retried bundle
    writes the same."""
    entries = [{"path": relative_path(path), "rows": rows, "deleted": list(deleted), "shard": index}
               for path, rows, deleted in files]
    output, run_folder = directory.replace("\\", "/").rstrip("/").rsplit("/", 1)

    def write(path: str, data: bytes) -> None:
        with FileSystems.create(unlinked(FileSystems.join(output, *path.split("/")))) as handle:
            handle.write(data)

    listed, deletes = shard_deletion_file(run_folder, table, index, entries, write)
    with FileSystems.create(listing_path(directory, table, index)) as handle:
        handle.write(json.dumps({"files": listed, "deletes": deletes}).encode("utf-8"))


def unlinked(path: str) -> str:
    """``path``, with whatever a failed earlier attempt of this bundle left there removed when it
    is local: that may be a hard link to the previous run's file (an older chunkline linked
    unchanged shards), which writing into would truncate and overwrite (the previous run's
    shard, still published)."""
    if is_local(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return path


def file_digest(handle, block: int = 8 << 20, size: int | None = None) -> str:
    """blake2b (128 bits, hex) of everything ``handle`` reads from where it stands, or of its
    next ``size`` bytes (fewer where the file ends first)."""
    digest = hashlib.blake2b(digest_size=16)
    left = size
    while data := handle.read(block if left is None else min(block, left)):
        digest.update(data)
        if left is not None:
            left -= len(data)
    return digest.hexdigest()


class _DigestingFile:
    """A writable file that hashes what passes through it to ``target`` (Arrow calls ``write``,
    ``tell``, ``flush`` and ``closed`` on a Python file it writes Parquet to)."""

    def __init__(self, target) -> None:
        self.target, self.digest, self.written = target, hashlib.blake2b(digest_size=16), 0

    def write(self, data) -> int:
        self.digest.update(data)
        self.written += len(data)
        return self.target.write(data)

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        self.target.flush()

    def close(self) -> None:
        pass  # the target's owner closes it

    @property
    def closed(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def hexdigest(self) -> str:
        return self.digest.hexdigest()


class _SortedParts:
    """A shard's records of one bundle as sorted runs (Knuth, TAOCP vol. 3, section 5.4: the
    first phase of an external merge sort): records held, with their sort keys, until they
    reach :data:`chunkline.transforms.spill.PART_BYTES`, then sorted and written as a part read
    back a block at a time (``spill.write_blocks``). ``written`` lists the parts written since
    it was last drained."""

    def __init__(self, directory: str, coder: Coder, sort_key: Callable[[Any], Any],
                 prefix: str) -> None:
        self.directory, self.coder, self.sort_key, self.prefix = directory, coder, sort_key, prefix
        self.held: list[tuple[Any, bytes]] = []
        self.size = 0  # encoded bytes held
        self.added_bytes = 0  # encoded, over every part: what the bundle moved
        self.written: list[str] = []

    def add(self, record: Any) -> None:
        data = self.coder.encode(record)
        self.held.append((self.sort_key(record), data))
        self.size += len(data)
        self.added_bytes += len(data)
        if self.size >= spill.PART_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.held:
            return
        self.held.sort(key=lambda pair: pair[0])  # stable: equal keys keep their order
        path = spill.part_path(self.directory, self.prefix)
        spill.write_blocks(path, _blocks(data for _, data in self.held))
        self.written.append(path)
        self.held, self.size = [], 0

    def drain(self) -> list[str]:
        written, self.written = self.written, []
        return written


def _blocks(encoded: Iterable[bytes]) -> Iterable[bytes]:
    """Encoded records laid out as a part holds them (each after its length, Beam's nested
    encoding), cut between records into blocks of about ``spill.BLOCK_BYTES``."""
    out = create_OutputStream()
    for data in encoded:
        out.write(data, True)
        if out.size() >= spill.BLOCK_BYTES:
            yield out.get()
            out = create_OutputStream()
    if out.size():
        yield out.get()


class _WriteParts(beam.DoFn):
    """Records -> ``(shard, part path)``: each record held for its shard's next sorted part
    (:class:`_SortedParts`), parts written when full, when the bundle's buffers hold
    :data:`BUFFERED_BYTES`, and when the bundle ends."""

    def __init__(self, directory: str, shards: int, shard_key: Callable[[Any], str],
                 coder: Coder, sort_key: Callable[[Any], Any]) -> None:
        self.directory = directory
        self.shards = shards
        self.shard_key = shard_key
        self.coder = coder
        self.sort_key = sort_key

    def start_bundle(self) -> None:
        self.writers: dict[int, _SortedParts] = {}
        self.buffered = 0

    def process(self, record: Any) -> Iterable[tuple[int, str]]:
        shard = shard_of(self.shard_key(record), self.shards)
        writer = self.writers.get(shard)
        if writer is None:
            writer = self.writers[shard] = _SortedParts(self.directory, self.coder, self.sort_key,
                                                        f"{shard:05d}-")
        before = writer.size
        writer.add(record)
        self.buffered += writer.size - before  # negative when the add wrote the part out
        if self.buffered >= BUFFERED_BYTES:
            for each in self.writers.values():
                each.flush()
            self.buffered = 0
        yield from self._written()

    def finish_bundle(self) -> Iterable[WindowedValue]:
        for writer in self.writers.values():
            writer.flush()
        for written in self._written():
            yield WindowedValue(written, 0, (GlobalWindow(),))
        release_after(sum(writer.added_bytes for writer in self.writers.values()))
        self.writers = {}

    def _written(self) -> list[tuple[int, str]]:
        return [(shard, path) for shard, writer in sorted(self.writers.items())
                for path in writer.drain()]


class _MergedParts:
    """The records of a shard's sorted parts in one sorted order, merged as they are read
    (``heapq.merge``, stable: for equal keys, the parts in the order given, each in its own
    order, as a stable sort of their concatenation gives): one block of each part in memory,
    never the shard (TAOCP vol. 3, section 5.4.1, merging with a selection tree). Each
    iteration reads the parts again."""

    def __init__(self, parts: Sequence[str], coder: Coder, sort_key: Callable[[Any], Any]) -> None:
        self.parts, self.coder, self.sort_key = parts, coder, sort_key

    def _keyed(self, part: str) -> Iterator[tuple[Any, bytes]]:
        for data in spill.read_blocks(part):
            yield self.sort_key(self.coder.decode(data)), data

    def __iter__(self) -> Iterator[bytes]:
        merged = heapq.merge(*(self._keyed(part) for part in self.parts), key=lambda pair: pair[0])
        return (data for _, data in merged)


def _table_of(encoded: list[bytes], coder: Any, schema: pa.Schema,
              to_row: Callable[[Any], dict]) -> pa.Table:
    """One row group's records as an Arrow table, decoded and converted :data:`DECODE_BATCH`
    at a time: a group holds up to 16 MB of encoded records, several times that as Python
    objects (a 100,000-row CSV is one document whose 14,336 chunks share one shard), where the
    Arrow table holds about the encoded size. The table, and so the file, is the same."""
    batches = [pa.RecordBatch.from_pylist([to_row(coder.decode(data))
                                           for data in encoded[start:start + DECODE_BATCH]],
                                          schema=schema)
               for start in range(0, len(encoded), DECODE_BATCH)]
    return pa.Table.from_batches(batches, schema=schema)


def _row_groups(encoded: Iterable[bytes]) -> Iterable[list[bytes]]:
    """``encoded`` in row groups, in order, each handed on as it fills: a group's records are
    let go once the group is written, and the shard is never held whole (one document's 14,336
    chunks, ~21 MB encoded, were all held while the shard's last row group was converted and
    written)."""
    group: list[bytes] = []
    size = 0
    empty = True
    for data in encoded:
        empty = False
        group.append(data)
        size += len(data)
        if len(group) >= ROW_GROUP or size >= ROW_GROUP_BYTES:
            yield group
            group, size = [], 0
    if group or empty:  # an empty shard is one empty group: a file with the schema
        yield group


def _records_table(encoded: Iterable[bytes], coder: Any, schema: pa.Schema,
                   to_row: Callable[[Any, pa.Schema], dict],
                   to_table: Callable[[list[bytes], pa.Schema], pa.Table | None] | None) -> pa.Table:
    """The (sorted) encoded records as one Arrow table, a row group at a time."""
    parts = []
    for group in _row_groups(encoded):
        table = to_table(group, schema) if to_table is not None else None
        parts.append(table if table is not None
                     else _table_of(group, coder, schema, lambda record: to_row(record, schema)))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _row_keys(table: pa.Table) -> list[bytes]:
    """A digest of each row's every value (its Python form, lists as tuples): two rows with the
    same key hold the same values."""
    # Column by column into Python, then zipped: ``to_pylist`` of the table makes a dict per
    # row, most of the cost where a rerun merges a documents shard of the whole corpus.
    columns = [column.to_pylist() for column in table.columns]
    return [hashlib.blake2b(repr(tuple(tuple(v) if isinstance(v, list) else v for v in row)).encode(
                "utf-8", "surrogatepass"), digest_size=16).digest()
            for row in zip(*columns, strict=True)]


def in_order(table: pa.Table, order: np.ndarray) -> pa.Table:
    """``table.take(order)``, as zero-copy slices where ``order`` walks runs of consecutive rows.
    A shard merged on a rerun is the previous shard's rows in their order, a few removed and a
    few new ones sorted in: a handful of runs, where a take would copy the whole shard (on a
    machine that faults fresh pages at ~5 ms/MB, most of a merge's time)."""
    if len(order) == 0:
        return table.slice(0, 0)
    breaks = np.flatnonzero(np.diff(order) != 1) + 1
    if len(breaks) >= MOST_SLICES:
        return table.take(pa.array(order))
    starts = np.concatenate([[0], breaks])
    lengths = np.diff(np.concatenate([starts, [len(order)]]))
    return pa.concat_tables([table.slice(int(order[start]), int(length))
                             for start, length in zip(starts, lengths)])


class _WriteShard(beam.DoFn):
    """``(shard, part paths)`` -> the shard's Parquet file, its records sorted. The parts are
    sorted runs, merged as the file is written (:class:`_MergedParts`): a worker holds a block
    of each part and one row group, whatever the shard's size, and the records become Arrow
    one row group at a time."""

    def __init__(self, directory: str, table: str, shards: int, schema: pa.Schema,
                 sort_key: Callable[[Any], Any], to_row: Callable[[Any, pa.Schema], dict],
                 coder: Coder, finish: Callable[..., Any] | None, shard_key: Callable[[Any], str],
                 sidecar: Sidecar | None = None,
                 carried_rows: Callable[..., tuple[pa.Table, pa.Table | None, np.ndarray]] | None = None,
                 sort_columns: tuple[str, ...] = (),
                 previous: tuple[str, tuple[tuple[str, Deletions], ...]] | None = None,
                 to_table: Callable[[list[bytes], pa.Schema], pa.Table | None] | None = None,
                 compactable: Compaction | None = None, keep_mode: bool = False) -> None:
        self.keep_mode = keep_mode
        self.carried_rows, self.sort_columns = carried_rows, sort_columns
        self.previous, self.compactable = previous, compactable
        self.to_table = to_table
        self.sidecar = sidecar
        self.shard_key = shard_key
        self.to_row = to_row
        self.directory = directory
        self.table = table
        self.shards = shards
        self.schema = schema
        self.sort_key = sort_key
        self.coder = coder
        self.finish = finish

    def process(self, keyed, *side):  # unannotated: Beam would type-check the side inputs
        index, values = keyed
        values = list(values)
        parts = sorted(value for value in values if isinstance(value, str))
        redecided = [value for value in values if isinstance(value, Redecided)]
        carried = [value for value in values
                   if value is not None and not isinstance(value, (str, Redecided))]
        # One pass over the parts, a block at a time: how many records there are, their bytes,
        # and how many share each shard key (a document's chunks: the sidecar row says so).
        together: Counter = Counter()
        count = size = 0
        for part in parts:
            for data in spill.read_blocks(part):
                count += 1
                size += len(data)
                if self.sidecar is not None:
                    together[self.shard_key(self.coder.decode(data))] += 1
        # The parts are sorted runs (_SortedParts): merged as the shard is written, the shard's
        # records are never in memory together.
        encoded = _MergedParts(parts, self.coder, self.sort_key)
        if self.keep_mode:
            written = list(self._keep_previous(index, encoded, count, redecided))
        else:
            written = list(self._write(index, encoded, count, together, carried, side))
        for table in dict.fromkeys(table for table, *_ in written):
            write_listing(self.directory, table, index,
                          [(path, rows, deleted) for name, path, rows, deleted in written
                           if name == table])
        yield from ((table, path, rows) for table, path, rows, _ in written)
        release_after(size)

    def _write(self, index: int, encoded: Iterable[bytes], count: int, together: Counter,
               carried: list[Any], side: tuple[Any, ...]
               ) -> Iterable[tuple[str, str, int, tuple[int, ...]]]:
        """The shard ``index`` of ``encoded`` (``count`` records, sorted; iterated once per
        pass) and ``carried`` rows, as :meth:`process` describes: ``(table, path, rows, deleted
        positions)`` of each file that holds its live rows."""
        path = shard_path(self.directory, self.table, index, self.shards)
        sidecar = self.sidecar
        side_path = (shard_path(self.directory, sidecar.table, index, self.shards)
                     if sidecar is not None else None)
        # transforms/carry.py's CarriedRows has it (this module cannot import that one).
        referenced = getattr(self.carried_rows, "referenced", None)
        if carried and sidecar is not None and side_path is not None and referenced is not None:
            # Merge-on-read: carried rows stay in the previous files that hold them, only the
            # others (and this run's new rows) are written.
            kept, carried = referenced(path, carried, count > 0, *side)
            for ref in kept:
                tally(WRITTEN.format(table=self.table), ref.rows - len(ref.deleted))
                yield (self.table, ref.chunk_path, ref.rows, ref.deleted)
                yield (sidecar.table, ref.side_path, ref.rows, ref.deleted)
            if kept and not carried and not count:
                return  # nothing new in this shard: no file of this run
        if carried:
            table, sides = self._merged(encoded, together, carried, side)
            yield from self._write_tables(index, path, table,
                                          None if side_path is None or sides is None else (side_path, sides))
            return
        digest = None
        if self.previous is not None:
            made_under, previous_files = self.previous
            digest = rows_digest(made_under, self.schema, encoded)
            name = path.rsplit("/", 1)[-1]
            # This shard's files in the previous run (a base and its deltas: the same name in
            # several run folders), of this output.
            mine = [(shard, deleted) for shard, deleted in previous_files
                    if shard.rsplit("/", 1)[-1] == name and same_output(shard, path)]
            if len(mine) == 1 and not mine[0][1].count and intact_with_digest(mine[0][0], digest):
                # The previous run's file holds these rows, as written: referenced, not copied.
                tally(WRITTEN.format(table=self.table), count)
                yield (self.table, mine[0][0], count, ())
                return
            if mine:
                merged = self._merge_on_read(path, encoded, mine)
                if merged is not None:
                    yield from merged
                    return
        with contextlib.ExitStack() as side_files:
            side_writer = None if sidecar is None or side_path is None else side_files.enter_context(
                pq.ParquetWriter(side_files.enter_context(FileSystems.create(unlinked(side_path))),
                                 sidecar.schema, compression="zstd", write_page_checksum=True))
            # The shard is closed first: its digest goes into the sidecar's footer.
            with FileSystems.create(unlinked(path)) as handle:
                digesting = _DigestingFile(handle)
                # Page checksums on every table: a reader verifying them refuses a changed page.
                with pq.ParquetWriter(digesting, parquet_schema(self.schema), compression="zstd",
                                      write_page_checksum=True) as writer:
                    if digest is not None:
                        writer.add_key_value_metadata({ROWS_DIGEST_KEY: digest})
                    for group in _row_groups(encoded):
                        table = (self.to_table(group, self.schema)
                                 if self.to_table is not None and side_writer is None else None)
                        if table is not None:
                            writer.write_table(to_parquet(table))
                            continue
                        if side_writer is not None and sidecar is not None:
                            # Before ``finish``: the sidecar keeps what the finished row no
                            # longer holds.
                            side_writer.write_table(_table_of(
                                group, self.coder, sidecar.schema,
                                lambda record: sidecar.to_row(record, together[self.shard_key(record)])))
                        writer.write_table(to_parquet(_table_of(
                            group, self.coder, self.schema,
                            lambda record: self.to_row(self._finished(record, side), self.schema))))
                    if digest is not None:  # every row group is written: the footer comes next
                        writer.add_key_value_metadata(
                            {DATA_DIGEST_KEY: f"{digesting.written}:{digesting.hexdigest()}"})
            if side_writer is not None:
                side_writer.add_key_value_metadata({SHARD_DIGEST_KEY: digesting.hexdigest()})
        tally(WRITTEN.format(table=self.table), count)
        yield (self.table, path, count, ())
        if sidecar is not None and side_path is not None:
            yield (sidecar.table, side_path, count, ())

    def _keep_previous(self, index: int, encoded: Iterable[bytes], count: int, redecided: list[Redecided]
                       ) -> Iterable[tuple[str, str, int, tuple[int, ...]]]:
        """The shard as the previous files' live rows of every document but the ``redecided``
        ones, where they lie, and this run's file with its records (and the kept rows of a file
        compacted now): the redecided documents' previous rows are deleted. Only the previous
        files' ids (and statuses) are read, and the ids decided again held: a rerun that passes
        settled documents by never has their rows, or their ids, in hand. A rejected row is
        never kept by id (a rejection is decided again by every run); nor is any row of a shard
        given no :class:`Redecided` (nothing was settled)."""
        path = shard_path(self.directory, self.table, index, self.shards)
        name = path.rsplit("/", 1)[-1]
        made_under, previous_files = self.previous if self.previous is not None else ("", ())
        mine = [(shard, deleted) for shard, deleted in previous_files
                if shard.rsplit("/", 1)[-1] == name and same_output(shard, path)]
        settling = bool(redecided)
        dead_ids = pa.array(sorted({doc_id for ids in redecided for doc_id in ids.doc_ids}), pa.string())
        found = []  # path, rows, kept positions, dead positions
        for shard, deletions in mine:
            before = np.asarray(sorted(deletions.positions()), np.int64)
            # A previous file that cannot be read fails the shard: the settled documents' rows
            # are nowhere else (the plan verified these files before passing documents by).
            with FileSystems.open(shard) as handle:
                held = pq.ParquetFile(handle)
                names = held.schema_arrow.names
                table = held.read(columns=["doc_id"] + (["status"] if "status" in names else []))
            rows = table.num_rows
            keep = (np.zeros(rows, bool) if not settling else
                    ~pc.is_in(table.column("doc_id"), value_set=dead_ids).to_numpy(zero_copy_only=False))
            if "status" in names:
                keep &= pc.not_equal(table.column("status"), "rejected").to_numpy(zero_copy_only=False)
            keep[before] = False
            dead = np.flatnonzero(~keep)
            found.append((shard, rows, np.flatnonzero(keep), dead))
        again = [f for f in found if len(f[2]) and compacted(f[0], len(f[3]), f[1], self.compactable)]
        held_files = [f for f in found if len(f[2]) and f not in again]
        if len(held_files) + (1 if count or again else 0) > compaction.MOST_FILES:
            held_files.sort(key=lambda f: -len(f[2]))
            again += held_files[1:]
            held_files = held_files[:1]
        for shard, rows, live, dead in sorted(held_files, key=lambda f: f[0]):
            tally(WRITTEN.format(table=self.table), len(live))
            yield (self.table, shard, rows, tuple(dead.tolist()))
        if not count and not again:
            if not held_files:  # every row gone: the shard is written, empty, as any empty shard
                yield from self._write_tables(0, path, self.schema.empty_table(), None)
            return
        tables = [_records_table(encoded, self.coder, self.schema, self.to_row, self.to_table)] if count else []
        for shard, _, live, _ in again:
            with FileSystems.open(shard) as handle:
                whole = pq.read_table(handle, page_checksum_verification=True)
            tables.append(whole.take(pa.array(live, pa.int64())).cast(self.schema))
        delta = pa.concat_tables(tables)
        order = SORT_ORDER.get(self.table, ())
        if order:
            delta = delta.take(pc.sort_indices(delta, sort_keys=[(c, "ascending") for c in order]))
        yield from self._write_tables(0, path, delta, None)

    def _merge_on_read(self, path: str, encoded: Iterable[bytes], mine: list[tuple[str, Deletions]]
                       ) -> list[tuple[str, str, int, tuple[int, ...]]] | None:
        """The shard as the previous files that hold its rows (a row of this run equal, column
        for column, to a live row of a previous file stays there) with the positions of the
        rows gone deleted, and this run's file with the other rows, sorted; None (write the
        shard whole) when a previous file cannot be read or holds other columns. Compaction as
        for chunk shards (:func:`compacted`, :data:`MOST_FILES`)."""
        try:
            previous = []
            for shard, deletions in mine:
                deleted = deletions.positions()  # this shard's deletion file only
                with FileSystems.open(shard) as handle:
                    # Page checksums (written with every such shard): a damaged page is a
                    # shard written whole, never a row kept from garbage.
                    held = pq.read_table(handle, page_checksum_verification=True)
                # Stored as this run stores it (a file of an older layout is written anew).
                if held.schema.remove_metadata() != parquet_schema(self.schema).remove_metadata():
                    return None
                held = with_fixed_vectors(held)
                previous.append((shard, held, deleted))
        except Exception:  # noqa: BLE001 - unreadable now: the shard is written whole
            return None
        table = _records_table(encoded, self.coder, self.schema, self.to_row, self.to_table)
        wanted = Counter(_row_keys(table))
        found: list[tuple[str, pa.Table, list[int], list[int]]] = []  # path, rows, live, dead
        for shard, held, deleted in previous:
            gone = set(deleted)
            live, dead = [], []
            for at, key in enumerate(_row_keys(held)):
                if at not in gone and wanted[key] > 0:
                    wanted[key] -= 1
                    live.append(at)
                else:
                    dead.append(at)
            found.append((shard, held, live, dead))
        new_rows = np.zeros(table.num_rows, dtype=bool)
        for at, key in enumerate(_row_keys(table)):
            if wanted[key] > 0:  # no previous live row holds it
                wanted[key] -= 1
                new_rows[at] = True
        again = [f for f in found if f[2] and compacted(f[0], len(f[3]), f[1].num_rows, self.compactable)]
        kept = [f for f in found if f[2] and f not in again]
        if len(kept) + (1 if new_rows.any() or again else 0) > compaction.MOST_FILES:
            kept.sort(key=lambda f: -len(f[2]))
            again += kept[1:]
            kept = kept[:1]
        out = []
        for shard, held, live, dead in sorted(kept, key=lambda f: f[0]):
            tally(WRITTEN.format(table=self.table), len(live))
            out.append((self.table, shard, held.num_rows, tuple(dead)))
        delta = pa.concat_tables([table.filter(pa.array(new_rows)),
                                  *(held.take(pa.array(live, pa.int64())).cast(self.schema)
                                    for _, held, live, _ in again)])
        if delta.num_rows or not kept:
            order = SORT_ORDER.get(self.table, ())
            if order:
                delta = delta.take(pc.sort_indices(delta, sort_keys=[(c, "ascending") for c in order]))
            out.extend(self._write_tables(0, path, delta, None))
        return out

    def _finished(self, record: Any, side: tuple[Any, ...]) -> Any:
        return self.finish(record, *side) if self.finish is not None else record

    def _merged(self, encoded: Iterable[bytes], together: Counter, carried: list[Any],
                side: tuple[Any, ...]) -> tuple[pa.Table, pa.Table | None]:
        """The shard as Arrow tables: this run's records (finished) and the rows carried over
        (``carried_rows``, already in their final form), sorted together by ``sort_columns``."""
        tables, side_tables = [], []
        for group in _row_groups(encoded):
            records = [self.coder.decode(data) for data in group]
            if self.sidecar is not None:
                side_tables.append(pa.Table.from_pylist(
                    [self.sidecar.to_row(record, together[self.shard_key(record)])
                     for record in records], schema=self.sidecar.schema))
            tables.append(pa.Table.from_pylist(
                [self.to_row(self._finished(record, side), self.schema) for record in records],
                schema=self.schema))
        if self.carried_rows is None:  # WriteParquetShards takes carried and carried_rows together
            raise ValueError("carried rows reached a shard writer without carried_rows")
        carried_table, carried_side, taken = self.carried_rows(carried, *side)
        table = pa.concat_tables([*tables, carried_table])
        keep = np.concatenate([np.ones(table.num_rows - carried_table.num_rows, dtype=bool), taken])
        order = pc.sort_indices(table, sort_keys=[(name, "ascending") for name in self.sort_columns])
        order = order.to_numpy()
        order = order[keep[order]]
        sides = (in_order(pa.concat_tables([*side_tables, carried_side]), order)
                 if self.sidecar is not None else None)
        return in_order(table, order), sides

    def _write_tables(self, index: int, path: str, table: pa.Table,
                      side: tuple[str, pa.Table] | None) -> Iterable[tuple[str, str, int, tuple[int, ...]]]:
        """``table`` written at ``path``, and the sidecar's rows ``side`` (its path, its table)
        beside it: ``(table, path, rows, no deleted position)`` of each."""
        # Row groups by the table's own size: the same rows give the same file.
        rows = max(1, min(ROW_GROUP, ROW_GROUP_BYTES * table.num_rows // max(1, table.nbytes)))
        with FileSystems.create(unlinked(path)) as handle:
            digesting = _DigestingFile(handle)
            pq.write_table(to_parquet(table), digesting, row_group_size=rows, compression="zstd",
                           write_page_checksum=True)
        tally(WRITTEN.format(table=self.table), table.num_rows)
        yield (self.table, path, table.num_rows, ())
        if side is not None and self.sidecar is not None:
            side_path, sides = side
            with FileSystems.create(unlinked(side_path)) as handle, \
                    pq.ParquetWriter(handle, sides.schema, compression="zstd",
                                     write_page_checksum=True) as side_writer:
                side_writer.write_table(sides, row_group_size=rows)
                side_writer.add_key_value_metadata({SHARD_DIGEST_KEY: digesting.hexdigest()})
            yield (self.sidecar.table, side_path, sides.num_rows, ())


class WriteParquetShards(beam.PTransform):
    """``PCollection[record]`` (or several) -> ``PCollection[(table, path, rows)]``: exactly ``shards``
    files named ``<table>-SSSSS-of-NNNNN.parquet`` (empty shards included, so a reader can
    trust the count), each sorted by ``sort_key``, zstd-compressed, with ``schema``.
    ``record_type``: the records' class, so that they go to the part files with its registered
    coder (``transforms/coders.py``) rather than pickled; None: Beam's default.
    ``finish(record, value)``: applied to each record as its shard is written, with ``value``
    the one element of ``finish_input`` (corpus statistics known only once every record is
    made: the records wait in their part files, not in memory). ``sidecar``: a second table
    beside each shard (:class:`Sidecar`), its files among the outputs under its own name.
    ``carried``: ``(shard, part)`` elements of rows made by an earlier run, grouped with the
    shard's records and turned into Arrow tables (rows and sidecar rows, final form, with a
    mask of the rows carried) by ``carried_rows(parts, value)``; a shard with any is sorted as one table by
    ``sort_columns`` (which must order as ``sort_key`` does) and written whole.
    ``previous``: ``(made_under, the previous run's shards of this table)``, for rows made from
    the records alone: each shard names :func:`rows_digest` and the digest of its bytes before
    the footer in its footer (and is written with page checksums), and a shard whose digest the
    previous run's same-named shard names, that file's bytes as written, is referenced (listed
    as the shard's file) instead of written. Each shard's files are listed for the manifest
    (:func:`write_listing`): this run's, and the previous files whose rows it keeps, with the
    positions no longer live; with ``carried_rows`` that has ``referenced`` (merge-on-read,
    ``chunkline.transforms.carry.CarriedRows``), carried rows stay in the previous files that hold them
    and only the others are written. ``to_table(encoded records, schema)``: the rows
    of a row group made from the encoded records directly (None: decoded and converted one by
    one, as without it). ``compactable``: the previous files (full paths) this run may compact
    past :data:`MOST_DEAD` (:func:`compaction_allowed`; None: every one), any past
    :data:`HARD_MOST_DEAD` compacted whatever it holds. ``keep`` (with ``previous``):
    ``(shard, Redecided)`` elements: the previous rows of every other document stay where they lie, every
    other previous row is deleted and the records are written beside them (a rerun that passes
    its settled documents by, docs/ARCHITECTURE.md)."""

    def __init__(self, directory: str, table: str, schema: pa.Schema, shards: int,
                 shard_key: Callable[[Any], str], sort_key: Callable[[Any], Any],
                 record_type: type | None = None,
                 to_row: Callable[[Any, pa.Schema], dict] = as_row,
                 finish: Callable[[Any, Any], Any] | None = None,
                 finish_input: PCollection | None = None,
                 sidecar: Sidecar | None = None,
                 carried: PCollection | None = None,
                 carried_rows: Callable[..., tuple[pa.Table, pa.Table | None, np.ndarray]] | None = None,
                 sort_columns: tuple[str, ...] = (),
                 previous: tuple[str, Sequence[str | tuple[str, Deletions | Sequence[int]]]] | None = None,
                 keep: PCollection | None = None,
                 to_table: Callable[[list[bytes], pa.Schema], pa.Table | None] | None = None,
                 compactable: Compaction | None = None) -> None:
        super().__init__()
        self.compactable = compactable
        if keep is not None and previous is None:
            raise ValueError("WriteParquetShards takes keep only with previous")
        self.keep = keep
        if (previous is not None or to_table is not None) and (
                finish is not None or sidecar is not None or carried is not None):
            raise ValueError("WriteParquetShards takes previous and to_table only for rows made "
                             "from the records alone (no finish, sidecar or carried rows)")
        self.to_table = to_table
        # Each previous file as (path, Deletions): a reference to its shard's deletion file, read
        # by the one shard writer that needs it; a plain path: none deleted.
        self.previous = (previous[0], tuple(
            (p, Deletions()) if isinstance(p, str)
            else (p[0], p[1] if isinstance(p[1], Deletions) else Deletions.listed(tuple(p[1])))
            for p in previous[1])) if previous is not None else None
        if (carried is None) != (carried_rows is None) or (carried is not None and not sort_columns):
            raise ValueError("WriteParquetShards takes carried, carried_rows and sort_columns together")
        self.carried, self.carried_rows, self.sort_columns = carried, carried_rows, sort_columns
        self.sidecar = sidecar
        if (finish is None) != (finish_input is None):
            raise ValueError("WriteParquetShards takes finish and finish_input together")
        self.to_row = to_row
        self.record_type = record_type
        self.directory = directory
        self.table = table
        self.schema = schema
        self.shards = shards
        self.shard_key = shard_key
        self.sort_key = sort_key
        self.finish = finish
        self.finish_input = finish_input

    def expand(self, records):
        # Several inputs are each written where they are made: flattened first, they would be
        # buffered whole by a runner that materializes a Flatten of two stages' outputs.
        inputs = tuple(records) if isinstance(records, (tuple, list)) else (records,)
        coder = coder_of(self.record_type)
        parts_dir = spill_dir(self.directory, self.table)
        every_shard = (
            inputs[0].pipeline
            | "EveryShard" >> beam.Create([(i, None) for i in range(self.shards)])
            .with_output_types(tuple[int, Optional[str]])
        )
        parts = [
            part_records | ("WriteParts" if n == 0 else f"WriteParts{n}") >> beam.ParDo(
                _WriteParts(parts_dir, self.shards, self.shard_key, coder, self.sort_key)
            ).with_output_types(tuple[int, Optional[str]])
            for n, part_records in enumerate(inputs)
        ]
        side = (AsSingleton(self.finish_input),) if self.finish_input is not None else ()
        carried: tuple[PCollection, ...] = (self.carried,) if self.carried is not None else ()
        carried += (self.keep,) if self.keep is not None else ()
        written = (
            (*parts, *carried, every_shard)
            | "Together" >> beam.Flatten().with_output_types(tuple[int, Any])
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(
                _WriteShard(self.directory, self.table, self.shards, self.schema,
                            self.sort_key, self.to_row, coder, self.finish, self.shard_key,
                            self.sidecar, self.carried_rows, self.sort_columns,
                            self.previous, self.to_table, self.compactable,
                            keep_mode=self.keep is not None),
                *side)
        )
        # After every shard is written: a part is never deleted while a retry could need it.
        (written
         | "CountShards" >> beam.combiners.Count.Globally()
         | "RemoveParts" >> beam.ParDo(RemoveParts(parts_dir)))
        return written
