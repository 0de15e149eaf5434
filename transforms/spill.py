"""Records parked in part files instead of in a shuffle: written where they are made, read back
where they are needed, as Beam's own file sinks stage their output (``WriteToFiles`` writes each
bundle to temporary files and moves them at the end).

A part is a file of length-prefixed records (Beam's nested encoding: a varint, then the bytes)
encoded with their registered coder (``transforms/coders.py``), LZ4-framed as a whole, under a
spill folder through Beam's filesystems (local or ``gs://``). LZ4 because a part is written once
and read once: text shrinks about threefold at several hundred MB/s, and fewer bytes to write
is what parking costs (on a virtual machine's disk, writing fresh pages runs near 100 MB/s). Only the parts' paths cross a grouping, so a runner that
holds a grouping in memory (the in-process FnApiRunner keeps a stage's whole input and output)
holds paths instead of every document or chunk, and a record is addressed by ``(part, index)``.
A retried bundle writes its parts under new names; only the paths a committed bundle emitted are
ever read. The parts are deleted once everything that reads them has run (:class:`RemoveParts`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
import uuid
from typing import Any, Iterable, Iterator

import apache_beam as beam
import pyarrow as pa
from apache_beam.coders import Coder, registry
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.transforms import coders  # noqa: F401 - registers the record coders parts are written with
from chunkline.transforms.match import is_local
from chunkline.transforms.memory import release_after

SPILL_DIR = "_spill"
# A part is written once it holds this much: a bundle's memory stays bounded. The buffer a part
# grows in doubles as it fills, and is copied out and compressed when written: ~3 times the part
# at that moment, so 8 MB parts held ~25 MB per shard being written; 2 MB parts hold ~6 MB.
PART_BYTES = 2 << 20
PART_SUFFIX = ".part"
_CODEC = pa.Codec("lz4")


def spill_dir(directory: str, name: str) -> str:
    """``directory/_spill/name``: where a stage of a run parks its records."""
    return FileSystems.join(directory, SPILL_DIR, name)


# Runners whose SDK workers run on the driver's machine, so a local folder is one folder for all
# of them: Beam's in-process runners, and a portable runner whose workers run in the submitting
# process (LOOPBACK, EMBED; apache_beam/options/pipeline_options.py, PortableOptions).
_IN_PROCESS_RUNNERS = frozenset({"DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner",
                                 "FnApiRunner", "TestDirectRunner"})
_IN_PROCESS_ENVIRONMENTS = frozenset({"LOOPBACK", "EMBED"})


class SpillDirRequired(ValueError):
    """A stage that parks records was built for workers that may not share the driver's disk,
    with nowhere shared to park them."""


def workers_share_local_disk(pipeline: beam.Pipeline) -> bool:
    """Whether every SDK worker of ``pipeline``'s runner sees the driver's local files."""
    from apache_beam.options.pipeline_options import PortableOptions

    runner = type(pipeline.runner).__name__  # Pipeline() resolves its runner when made
    if runner in _IN_PROCESS_RUNNERS:
        return True
    options = pipeline.options
    environment = options.view_as(PortableOptions).environment_type if options is not None else None
    if not environment and runner == "PrismRunner":
        environment = "LOOPBACK"  # Prism's own default (apache_beam/runners/portability/prism_runner.py)
    return str(environment or "").upper() in _IN_PROCESS_ENVIRONMENTS


def default_spill_dir(pipeline: beam.Pipeline, name: str) -> str:
    """Where a transform parks records when it is not told: under the pipeline's
    ``--temp_location`` (shared storage, as a distributed runner needs), else, when the
    runner's workers share the driver's disk, a new local temporary folder; otherwise
    :class:`SpillDirRequired` (a folder on one worker's disk would be missing on the others, and
    the job would fail on a cluster only after its first stages ran)."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    temp = pipeline.options.view_as(GoogleCloudOptions).temp_location if pipeline.options else None
    if temp:
        return FileSystems.join(temp, "chunkline-spill", uuid.uuid4().hex, name)
    if not workers_share_local_disk(pipeline):
        raise SpillDirRequired(
            f"{name} parks records between stages and this runner's workers may not share this "
            f"machine's disk: give the pipeline --temp_location on shared storage (gs://...) or "
            f"the transform a spill_dir")
    # Named, not made: a graph that is built but never run leaves nothing behind.
    return os.path.join(tempfile.gettempdir(), f"chunkline-{name}-{uuid.uuid4().hex}")


def coder_of(record_type: type | None) -> Coder:
    return registry.get_coder(record_type or Any)


class PartWriter:
    """Appends encoded records to the current part under ``directory``; a full part is written
    and a new one begun. ``add`` says where the record will be, ``(part path, index)``;
    ``written`` lists the parts written since it was last drained."""

    def __init__(self, directory: str, coder: Coder, prefix: str = "") -> None:
        self.directory = directory
        self.coder = coder
        self.prefix = prefix
        self.written: list[str] = []
        self.added_bytes = 0  # encoded, over every part: what the bundle moved
        self._begin()

    def _begin(self) -> None:
        self.path = part_path(self.directory, self.prefix)
        self.out = create_OutputStream()
        self.count = 0

    @property
    def size(self) -> int:
        return self.out.size()

    def add(self, record: Any) -> tuple[str, int]:
        where = self.path, self.count
        data = self.coder.encode(record)
        self.out.write(data, True)
        self.added_bytes += len(data)
        self.count += 1
        if self.size >= PART_BYTES:
            self.flush()
        return where

    def flush(self) -> None:
        if self.count:
            write_packed(self.path, self.out.get())
            self.written.append(self.path)
        self._begin()

    def drain(self) -> list[str]:
        written, self.written = self.written, []
        return written


def write_packed(path: str, data: bytes) -> None:
    """``data`` as a part file: its length (8 bytes, little-endian), then its LZ4 frame."""
    with FileSystems.create(path) as handle:
        handle.write(len(data).to_bytes(8, "little"))
        handle.write(_CODEC.compress(data, asbytes=True))


def read_packed(path: str) -> bytes:
    """The bytes :func:`write_packed` wrote to ``path``."""
    with FileSystems.open(path) as handle:
        data = handle.read()
    size = int.from_bytes(data[:8], "little")
    return _CODEC.decompress(memoryview(data)[8:], decompressed_size=size, asbytes=True)


# A part read a block at a time (:func:`write_blocks`) holds this much of its records in memory.
BLOCK_BYTES = 64 << 10


def write_blocks(path: str, blocks: Iterable[bytes]) -> None:
    """Encoded records as a part read back a block at a time (:func:`read_blocks`): each block
    (whole records, as :class:`PartWriter` lays them out) as its length and the length of its
    LZ4 frame (8 bytes each, little-endian), then the frame. An external merge reads many parts
    at once, one block of each (Knuth, TAOCP vol. 3, section 5.4.1: a buffer per input run);
    one frame for the whole part would hold each part whole, or the codec's ~1 MB buffer per
    stream."""
    with FileSystems.create(path) as handle:
        for block in blocks:
            packed = _CODEC.compress(block, asbytes=True)
            handle.write(len(block).to_bytes(8, "little") + len(packed).to_bytes(8, "little"))
            handle.write(packed)


def read_blocks(path: str) -> Iterator[bytes]:
    """The records of a part :func:`write_blocks` wrote, in order, one block in memory at a
    time (an iterator object: the block goes once its last record is handed out)."""
    return _BlockRecords(path)


class _BlockRecords:
    def __init__(self, path: str) -> None:
        self._path = path
        self._handle: Any = None
        self._records: _PartRecords | None = None
        self._done = False

    def __iter__(self) -> "_BlockRecords":
        return self

    def __next__(self) -> bytes:
        while not self._done:
            if self._records is not None:
                record = next(self._records, None)
                if record is not None:
                    return record
                self._records = None
            if self._handle is None:
                self._handle = FileSystems.open(self._path)
            header = self._handle.read(16)
            if len(header) < 16:
                self._handle.close()
                self._handle, self._done = None, True
                break
            size, packed = int.from_bytes(header[:8], "little"), int.from_bytes(header[8:], "little")
            self._records = _PartRecords(_CODEC.decompress(
                self._handle.read(packed), decompressed_size=size, asbytes=True))
        raise StopIteration


def part_path(directory: str, prefix: str = "") -> str:
    """A new part's name under ``directory``: unique, so a retried bundle never overwrites one
    that a committed bundle emitted."""
    return FileSystems.join(directory, f"{prefix}{uuid.uuid4().hex}{PART_SUFFIX}")


def read_part(path: str) -> Iterator[bytes]:
    """The encoded records of one part, in the order they were added."""
    return _PartRecords(read_packed(path))


class _PartRecords:
    """The records of a part's bytes, one at a time. An iterator object, not a generator: a
    generator's frame keeps the record it handed out, and the part's bytes, while its caller
    works on that record (a 5 MB document split into 14,336 chunks downstream, in the same
    stage); here the part's bytes go once its last record is read, and the record is the
    caller's alone."""

    def __init__(self, data: bytes) -> None:
        self._stream: create_InputStream | None = create_InputStream(data)  # the class (Beam names it so)

    def __iter__(self) -> "_PartRecords":
        return self

    def __next__(self) -> bytes:
        if self._stream is None or self._stream.size() <= 0:
            raise StopIteration
        record = self._stream.read_all(True)
        if self._stream.size() <= 0:
            self._stream = None
        return record


def remove_parts(pattern: str) -> int:
    """Deletes the parts ``pattern`` matches (a folder's ``*.part``); returns how many."""
    found = FileSystems.match([pattern])[0].metadata_list
    if found:
        FileSystems.delete([part.path for part in found])
    return len(found)


def _remove_spills(runs: str) -> int:
    """The parts (and, locally, the ``_spill`` folders) of the run folders ``runs`` matches."""
    removed = remove_parts(FileSystems.join(runs, SPILL_DIR, "*", "*" + PART_SUFFIX))
    if is_local(runs):
        for folder in glob.glob(os.path.join(runs, SPILL_DIR)):
            shutil.rmtree(folder, ignore_errors=True)
    return removed


def remove_spill(run_dir: str) -> int:
    """Every part a run left, whatever stage parked it (a run that failed midway): for the
    driver, after the job. Returns how many parts there were."""
    return _remove_spills(run_dir)


def remove_dead_spills(output: str) -> int:
    """The parts of earlier runs into ``output`` that died before removing them (killed
    mid-job). Only for the holder of the output's lease: no other run is writing there."""
    return _remove_spills(FileSystems.join(output, "*"))


class RemoveParts(beam.DoFn):
    """Any element -> the spill folder's parts deleted (and, locally, the emptied folders). Put
    after a combine of everything that reads the parts: none is deleted while a retry could
    still need it."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def process(self, _done: Any) -> Iterable[str]:
        remove_parts(FileSystems.join(self.directory, "*" + PART_SUFFIX))
        if is_local(self.directory):
            # Empty folders left in a run would only puzzle whoever lists it; rmdir leaves a
            # folder another stage still parks in.
            folder = self.directory.rstrip("/")
            with contextlib.suppress(OSError):
                os.rmdir(folder)
                if os.path.basename(os.path.dirname(folder)) == SPILL_DIR:
                    os.rmdir(os.path.dirname(folder))
        yield self.directory


class _Spill(beam.DoFn):
    def __init__(self, directory: str, coder: Coder) -> None:
        self.directory = directory
        self.coder = coder

    def start_bundle(self) -> None:
        self.writer = PartWriter(self.directory, self.coder)

    def process(self, record: Any) -> Iterable[str]:
        self.writer.add(record)
        yield from self.writer.drain()

    def finish_bundle(self):
        self.writer.flush()
        for path in self.writer.drain():
            yield WindowedValue(path, 0, (GlobalWindow(),))
        release_after(self.writer.added_bytes)


class SpillRecords(beam.PTransform):
    """``PCollection[record]`` -> ``PCollection[part path]``: every record in a part file under
    ``directory``, encoded with ``record_type``'s coder."""

    def __init__(self, directory: str, record_type: type | None = None) -> None:
        super().__init__()
        self.directory = directory
        self.record_type = record_type

    def expand(self, records):
        return records | "WriteParts" >> beam.ParDo(
            _Spill(self.directory, coder_of(self.record_type))).with_output_types(str)


class ReadSpilled(beam.PTransform):
    """``PCollection[part path]`` -> ``PCollection[record]``: the parts' records, each part read
    whole by one worker (the paths are spread first), one record decoded at a time."""

    def __init__(self, record_type: type | None = None) -> None:
        super().__init__()
        self.record_type = record_type

    def expand(self, parts):
        coder = coder_of(self.record_type)
        read = beam.FlatMap(lambda path: map(coder.decode, read_part(path)))
        return (
            parts
            | "Spread" >> beam.Reshuffle()
            | "ReadParts" >> (read.with_output_types(self.record_type) if self.record_type else read)
        )
