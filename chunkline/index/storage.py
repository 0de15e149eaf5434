"""Reading an output without Beam: local paths, and ``gs://`` objects through
google-cloud-storage.

A reader (``chunkline query``, a search service) needs a handful of calls: join, exists, read a
small file whole, list, and open a Parquet shard. Beam's ``FileSystems`` offers them at the cost
of importing Beam (``apache_beam.io.filesystems`` alone: ~1.2 s and a peak of ~160 MB, twice
what the whole read side takes), so they are made here from what Beam itself sits on. Paths are
spelled as Beam spells them (``join`` below is its ``LocalFileSystem.join`` /
``GCSFileSystem.join``), so a path named in a message or compared with one the job wrote is the
same string.

``gs://`` goes through ``google.cloud.storage`` (the client Beam's ``gcsio`` wraps), imported
on the first ``gs://`` path only. Its ``Client`` sends every request to
``STORAGE_EMULATOR_HOST`` when that is set, with anonymous credentials (google-cloud-storage
3.x, ``Client.__init__``: "Elif the STORAGE_EMULATOR_HOST env var is set, then use that as the
endpoint"). Reads are raw (``raw_download=True``), as Beam's are: an object stored with gzip
content-encoding is read as its stored bytes, never transcoded
(https://cloud.google.com/storage/docs/transcoding).

Why not pyarrow's own ``GcsFileSystem``: it reads the emulator offline only when given
``endpoint_override`` and ``scheme="http"`` (it ignores ``STORAGE_EMULATOR_HOST``: without them
it went to storage.googleapis.com), and it finds credentials its own way (google-cloud-cpp), so
a place the job reads through Beam with the user's credentials and environment could be read
differently here, or not at all.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import threading
import time
from contextlib import contextmanager
from typing import Any, BinaryIO, Iterator

from chunkline.extras import require

GCS = "gs://"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
# Beam's gcsio.DEFAULT_READ_BUFFER_SIZE: a shard is fetched in ranges of this size as pyarrow
# seeks through it (its footer, then the columns asked for), as it was through Beam.
READ_CHUNK = 16 * 1024 * 1024

_SCHEME = re.compile(r"([a-zA-Z][-a-zA-Z0-9+.]*)://")  # how Beam's FileSystems tells a scheme
_GCS_PATH = re.compile(r"gs://([^/]+)/(.*)", re.DOTALL)


def is_gcs(path: str) -> bool:
    return path.startswith(GCS)


def _check(path: str) -> None:
    scheme = _SCHEME.match(path)
    if scheme and not is_gcs(path):
        raise ValueError(f"{path}: only local paths and gs:// can be read, not {scheme.group(1)}://")


def join(base: str, *parts: str) -> str:
    """``base`` joined with ``parts`` as Beam joins them: ``os.path.join`` for a local path,
    one ``/`` between parts for ``gs://``."""
    _check(base)
    if not is_gcs(base):
        return os.path.join(base, *parts)
    path = base
    for part in parts:
        path = path.rstrip("/") + "/" + part.lstrip("/")
    return path


def parent(path: str) -> str:
    """The directory ``path`` lies in (a trailing separator ignored): ``out`` for ``out/RUN``,
    ``gs://b/out`` for ``gs://b/out/RUN/``."""
    _check(path)
    if not is_gcs(path):
        return os.path.dirname(path.rstrip(os.sep)) or "."
    return path.rstrip("/").rsplit("/", 1)[0]


def exists(path: str) -> bool:
    """Whether ``path`` exists (a local directory counts, as for ``os.path.exists``)."""
    _check(path)
    if not is_gcs(path):
        return os.path.exists(path)
    bucket, name = _bucket_and_name(path)
    return bucket.blob(name).exists()


def read_bytes(path: str) -> bytes:
    """The whole of a (small) file. FileNotFoundError when there is none, local or not."""
    _check(path)
    if not is_gcs(path):
        with open(path, "rb") as handle:
            return handle.read()
    bucket, name = _bucket_and_name(path)
    with _missing_as_not_found(path):
        return bucket.blob(name).download_as_bytes(raw_download=True)


@contextmanager
def parquet_source(path: str) -> Iterator[str | BinaryIO]:
    """What ``pyarrow.parquet.ParquetFile`` is to open for ``path``: a local path itself
    (pyarrow reads it natively, no Python call per read), else a seekable reader of the object,
    closed on exit. FileNotFoundError for an object that does not exist; a local path's is
    pyarrow's own FileNotFoundError, raised as it opens the file."""
    _check(path)
    if not is_gcs(path):
        yield path
        return
    BlobReader = require("gcs", "google.cloud.storage.fileio").BlobReader

    bucket, name = _bucket_and_name(path)
    with _missing_as_not_found(path):
        blob = bucket.get_blob(name)  # its size, so pyarrow's seek to the footer asks nothing more
    if blob is None:
        raise FileNotFoundError(errno.ENOENT, "no such object", path)
    reader = BlobReader(blob, chunk_size=READ_CHUNK, raw_download=True)
    try:
        yield reader
    finally:
        reader.close()


def source_size(source: str | BinaryIO) -> int:
    """The size in bytes of what :func:`parquet_source` gave: a local file's, or the object's
    (its reader left at the start)."""
    if isinstance(source, str):
        return os.path.getsize(source)
    size = source.seek(0, os.SEEK_END)
    source.seek(0)
    return size


def source_digest(source: str | BinaryIO) -> str:
    """BLAKE2b-128 of what :func:`parquet_source` gave, hex (``chunkline.index.tables.file_digest``
    of its bytes), streamed; an object's reader is left at the start."""
    digest = hashlib.blake2b(digest_size=16)
    handle = open(source, "rb") if isinstance(source, str) else source
    try:
        while block := handle.read(1 << 20):
            digest.update(block)
    finally:
        if isinstance(source, str):
            handle.close()
        else:
            source.seek(0)
    return digest.hexdigest()


def files_named(directory: str, name: str) -> list[str]:
    """``directory/<child>/name`` for each child of ``directory`` holding a file ``name``: what
    Beam's ``FileSystems.match([join(directory, "*", name)])`` finds, from one listing. Empty
    when ``directory`` does not exist."""
    _check(directory)
    if not is_gcs(directory):
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return []
        # As os.walk (Beam's listing) sees them: a child is a directory not reached by a symlink.
        return [path for entry in entries
                if entry.is_dir(follow_symlinks=False)
                and os.path.isfile(path := os.path.join(directory, entry.name, name))]
    found = []
    for path, _, _ in list_files(directory.rstrip("/") + "/"):
        run, slash, last = path[len(directory.rstrip("/")) + 1:].partition("/")
        if slash and last == name and run and "\\" not in run:
            found.append(path)
    return found


def list_files(prefix: str) -> list[tuple[str, int, float]]:
    """(path, size in bytes, last modified in seconds) of every file under ``prefix`` (a
    directory, or for ``gs://`` a name prefix), with the values Beam's ``FileSystems.match``
    gives for ``prefix + "**"``, so a digest of them is the digest Beam's listing gives."""
    _check(prefix)
    if not is_gcs(prefix):
        found = []
        for root, _, files in os.walk(prefix):
            for file in files:
                path = os.path.join(root, file)
                try:
                    found.append((path, os.path.getsize(path), os.path.getmtime(path)))
                except OSError:  # removed while listed
                    pass
        return found
    bucket, name = _bucket_and_name(prefix, object_optional=True)
    return [(f"{GCS}{bucket.name}/{blob.name}", blob.size, _updated_to_seconds(blob.updated))
            for blob in bucket.client.list_blobs(bucket, prefix=name)]


def download(path: str, destination: str) -> None:
    """Copy the file at ``path`` to the local file ``destination``, its bytes as stored."""
    _check(path)
    if not is_gcs(path):
        shutil.copyfile(path, destination)
        return
    bucket, name = _bucket_and_name(path)
    with _missing_as_not_found(path):
        bucket.blob(name).download_to_filename(destination, raw_download=True)


def _updated_to_seconds(updated: Any) -> float:
    # Beam's gcsio.GcsIO._updated_to_seconds, to the bit: the model cache names its copy by a
    # digest of these values, and the job's workers (through Beam) and a reader (through this
    # module) must name one copy alike.
    return time.mktime(updated.timetuple()) - time.timezone + updated.microsecond / 1000000.0


# --- the client -----------------------------------------------------------------------------

_CLIENTS: dict[str | None, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _client() -> Any:
    """One client per process and emulator address (a test may start emulators one after
    another in one process); google-cloud-storage clients are safe to share between threads."""
    emulator = os.environ.get(EMULATOR_ENV) or None
    with _CLIENTS_LOCK:
        if emulator not in _CLIENTS:
            _CLIENTS[emulator] = _new_client(emulator)
        return _CLIENTS[emulator]


def _new_client(emulator: str | None) -> Any:
    storage = require("gcs", "google.cloud.storage")

    if emulator:
        # The emulator checks no credentials, and an anonymous client never looks for any: no
        # probe of the metadata server (what tests/gcs_emulator.py spares Beam's lookup too).
        # The client sends its requests to STORAGE_EMULATOR_HOST by itself.
        return storage.Client.create_anonymous_client()
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, project = google.auth.default()
    except DefaultCredentialsError:
        # What Beam's gcsio.create_storage_client does without credentials: public objects only.
        return storage.Client.create_anonymous_client()
    return storage.Client(project=project, credentials=credentials)


def _bucket_and_name(path: str, object_optional: bool = False) -> tuple[Any, str]:
    matched = _GCS_PATH.fullmatch(path) or (_GCS_PATH.fullmatch(path + "/") if object_optional else None)
    if matched is None or (not matched.group(2) and not object_optional):
        raise ValueError(f"GCS path must be in the form gs://<bucket>/<object>. Encountered {path!r}")
    return _client().bucket(matched.group(1)), matched.group(2)


@contextmanager
def _missing_as_not_found(path: str) -> Iterator[None]:
    """google-cloud-storage's NotFound as FileNotFoundError, the error a local path gives, so a
    reader handles one kind of missing file."""
    from google.api_core.exceptions import NotFound

    try:
        yield
    except NotFound:
        raise FileNotFoundError(errno.ENOENT, "no such object", path) from None
