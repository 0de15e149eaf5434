"""What an output directory holds, and the operator's commands on it: ``chunkline runs`` lists
every run with its status, ``chunkline publish`` points LATEST at another complete run (a
rollback), ``chunkline gc`` removes what neither a reader nor the next run needs.

A run's status is read from what the run itself leaves (``pipeline/run.py``): LATEST names the
published run; ``manifest.json`` is written last, so a directory without one was killed (or is
still being written: the output's lease, ``pipeline/lease.py``, names the live writer); the
manifest says whether the run reconciled (``reconciled``, ``problems``) and whether the publish
guard held it back (``held_back``). Nothing records which runs LATEST named before, so a
reconciled run that is not held back is "complete": ``run`` published it when it finished,
unless it died between its manifest and LATEST.

All three work on a local directory and on a ``gs://`` output alike. Cloud Storage has no
directories: there a run is the prefix ``OUTPUT/RUN/``, its size the sum of its objects', and
removing it deletes every object under the prefix; everything goes through Beam's filesystems,
as ``run`` writes the output, and the output's lease is the one ``run`` takes there. ``runs``
and ``gc`` refuse other schemes: the lease exists for these two only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, TextIO

from chunkline.index.layout import LATEST, MANIFEST, PROBE, RUN_ID, STAGED_LATEST
from chunkline.pipeline import exits
from chunkline.pipeline.lease import Holder, LeaseHeld, LeaseLost, OutputLease

if TYPE_CHECKING:  # the manifest module is imported where it is used (this module's CLI starts fast)
    from chunkline.index.manifest_types import Manifest

GCS = "gs://"

COMPLETE = "complete"
HELD_BACK = "held-back"
FAILED = "failed"
INCOMPLETE = "incomplete"
RUNNING = "running"
# No manifest of its own, but files a run with one still reads (gc kept exactly those): a
# folder to keep, not a killed run.
REFERENCED = "referenced"


class RunsError(ValueError):
    """A command cannot do what was asked (no such run, a run that may not be published, an
    output it cannot read); the message is one line naming the run or the output."""


class OutputBusy(RuntimeError):
    """Another process holds the output's lease in a way this command must wait for."""


def lease_timeout() -> float:
    """The default ``output.lease_timeout_s``: how stale another holder's lease must be before
    it counts as dead (the holder renews it every minute at most)."""
    from chunkline.pipeline.config import OutputConfig

    return float(OutputConfig.model_fields["lease_timeout_s"].default)


@dataclass(frozen=True)
class Writer:
    """The live holder of an output's lease: ``run_id`` is the run it writes, None for a holder
    that is not a run (a publish, a gc: they name themselves in words) or an unreadable lease."""

    description: str
    run_id: str | None


def live_writer(output: str, timeout: float | None = None) -> Writer | None:
    """Who holds ``output``'s lease now, when the holder is live (``OutputLease.live_holder``:
    not stale, its process not gone); None when the lease is free. Reads only."""
    lease = OutputLease(output, "chunkline runs", timeout or lease_timeout())
    description = lease.live_holder()
    if description is None:
        return None
    current = lease.store.read()
    holder = Holder.parse(current[0]) if current is not None else None
    if holder is None:
        return Writer(description, None)
    # Holder.describe's convention: a run id has no spaces, any other holder names itself in words.
    return Writer(description, None if " " in holder.run_id else holder.run_id)


@dataclass(frozen=True)
class Run:
    """One run directory of an output (or the run a live lease is about to write into)."""

    run_id: str
    path: str
    status: str
    started: datetime | None  # from the run id
    finished: str | None  # the manifest's created_at
    counts: dict[str, int] | None  # documents, kept, chunks: from the manifest
    size: int  # bytes stored (on disk, or the run's objects in a bucket)
    reasons: tuple[str, ...] = ()  # why held back or failed, what holds the lease
    # Bytes of every file the run's manifest references, wherever it lies (a rerun's rows mostly
    # lie in earlier runs' folders): what the run is, as an index; None without a manifest.
    referenced: int | None = None
    # The run's Iceberg snapshot of each table (chunkline.index.iceberg), while the tables keep
    # it: what `chunkline publish` makes current again, and gc expires with the run.
    snapshots: dict[str, int] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "path": self.path, "status": self.status,
                "started": self.started.isoformat() if self.started else None,
                "finished": self.finished, "counts": self.counts, "bytes": self.size,
                "referenced_bytes": self.referenced, "snapshots": self.snapshots,
                "reasons": list(self.reasons)}


def open_output(output: str) -> LocalOutput | BucketOutput:
    """``output`` as a local directory or a ``gs://`` output that exists, or RunsError."""
    if output.startswith(GCS):
        return BucketOutput(output)
    if "://" in output:
        raise RunsError(f"{output}: runs and gc read local and gs:// outputs only")
    return LocalOutput(output)


def _not_found(exc: BaseException) -> bool:
    """Whether ``exc`` says a file is not there: Beam's GCS reads raise google-cloud-storage's
    NotFound where a local read raises FileNotFoundError."""
    if isinstance(exc, FileNotFoundError):
        return True
    try:
        from google.api_core.exceptions import NotFound
    except ImportError:  # Beam without the [gcp] extra: no gs:// output to read
        return False
    return isinstance(exc, NotFound)


def _read_errors() -> tuple[type[BaseException], ...]:
    """What a read of a file of the output raises when it cannot be read (not a bug of ours)."""
    try:
        from google.api_core.exceptions import GoogleAPIError
    except ImportError:
        return (OSError, UnicodeDecodeError)
    return (OSError, UnicodeDecodeError, GoogleAPIError)


def _cause(exc: BaseException) -> str:
    """The innermost error of a Beam filesystem error, on one line: BeamIOError nests a dict of
    per-path errors, twice for a match, around the one that says what happened."""
    while details := getattr(exc, "exception_details", None):
        exc = next(iter(details.values()))
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _literal(path: str) -> str:
    """``path`` as a Beam match pattern that matches itself only: Beam has no quoting, so each
    glob character stands alone in a class (a run named ``a*`` must not match ``ab``'s objects)."""
    return re.sub(r"([*?[])", r"[\1]", path)


class LocalOutput:
    """A local output directory, read as the OS lists it at each call."""

    def __init__(self, output: str) -> None:
        self.root = Path(output)
        if not self.root.is_dir():
            raise RunsError(f"{output}: no such output directory")

    def path(self, name: str) -> str:
        return str(self.root / name)

    def run_names(self) -> list[str]:
        return [entry.name for entry in os.scandir(self.root) if _is_run_dir(entry)]

    def has_manifest(self, name: str) -> bool:
        from chunkline.pipeline.manifest import MANIFEST

        return os.path.exists(os.path.join(self.root, name, MANIFEST))

    def size(self, name: str) -> int:
        path = self.root / name
        return disk_size(path) if path.exists() else 0

    def files(self, prefixes: tuple[str, ...]) -> Iterator[tuple[str, int, float]]:
        """(name, size, mtime) of the plain files right under the output named with one of
        ``prefixes``."""
        for entry in os.scandir(self.root):
            if entry.is_file(follow_symlinks=False) and entry.name.startswith(prefixes):
                stat = entry.stat(follow_symlinks=False)
                yield entry.name, stat.st_size, stat.st_mtime

    def folder_size(self, name: str) -> int | None:
        """Bytes under the folder ``name``; None when there is no such folder."""
        path = self.root / name
        return disk_size(path) if path.is_dir() else None

    def run_named(self, path: str) -> str | None:
        """The run of this output that ``path`` (as a config or manifest gives it) names."""
        if "://" in path:
            return None
        # A relative path is taken from here: the run's own working directory is not recorded.
        target = Path(path).resolve()
        return target.name if target.parent == self.root.resolve() else None

    def remove(self, name: str) -> None:
        _remove(self.root / name)

    def files_under(self, name: str) -> dict[str, int]:
        """Each file under the folder ``name``, by its path within it, with its size."""
        folder = self.root / name
        return {p.relative_to(folder).as_posix(): p.stat().st_size
                for p in folder.rglob("*") if p.is_file() or p.is_symlink()}

    def remove_except(self, name: str, keep: frozenset[str]) -> None:
        """Every file under the folder ``name`` but those at ``keep`` (paths within it), then
        the folders left empty."""
        folder = self.root / name
        for relative in self.files_under(name):
            if relative not in keep:
                (folder / relative).unlink(missing_ok=True)
        for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
                path.rmdir()


class BucketOutput:
    """A ``gs://`` output: what it holds is read from one listing of every object under it,
    taken at the first question asked after the existence check (gc asks once it holds the
    lease, so the listing shows the output as the lease found it)."""

    def __init__(self, output: str) -> None:
        from apache_beam.io.filesystems import FileSystems

        self.output = output.rstrip("/")
        self._objects: dict[str, Any] | None = None
        try:
            found = FileSystems.match([self._pattern("")], limits=[1])[0].metadata_list
        except Exception as exc:  # noqa: BLE001 - no bucket, no permission: one line, not a traceback
            raise RunsError(f"{output}: cannot be listed ({_cause(exc)})") from None
        if not found:
            raise RunsError(f"{output}: no such output (no object is stored under it)")

    def _pattern(self, name: str) -> str:
        """Every object under ``name`` (the output itself for "")."""
        return _literal(f"{self.output}/{name}".rstrip("/")) + "/**"

    @property
    def objects(self) -> dict[str, Any]:
        """Each object's Beam FileMetadata by its name relative to the output."""
        if self._objects is None:
            from apache_beam.io.filesystems import FileSystems

            try:
                found = FileSystems.match([self._pattern("")])[0].metadata_list
            except Exception as exc:  # noqa: BLE001 - as in __init__
                raise RunsError(f"{self.output}: cannot be listed ({_cause(exc)})") from None
            start = len(self.output) + 1
            self._objects = {meta.path[start:]: meta for meta in found}
        return self._objects

    def _under(self, name: str) -> list[Any]:
        prefix = f"{name}/"
        return [meta for key, meta in self.objects.items() if key.startswith(prefix)]

    def path(self, name: str) -> str:
        return f"{self.output}/{name}"

    def run_names(self) -> list[str]:
        from chunkline.pipeline.manifest import MANIFEST

        # The prefixes right under the output, as a local output's directories; the same rule
        # as _is_run_dir (no symlinks to tell apart here).
        names = {key.split("/", 1)[0] for key in self.objects if "/" in key}
        return [name for name in names if name and not name.startswith((".", "_"))
                and (RUN_ID.fullmatch(name) is not None or f"{name}/{MANIFEST}" in self.objects)]

    def has_manifest(self, name: str) -> bool:
        from chunkline.pipeline.manifest import MANIFEST

        return f"{name}/{MANIFEST}" in self.objects

    def size(self, name: str) -> int:
        return sum(meta.size_in_bytes for meta in self._under(name))

    def files(self, prefixes: tuple[str, ...]) -> Iterator[tuple[str, int, float]]:
        for key, meta in self.objects.items():
            if "/" not in key and key.startswith(prefixes):
                yield key, meta.size_in_bytes, meta.last_updated_in_seconds

    def folder_size(self, name: str) -> int | None:
        found = self._under(name)
        return sum(meta.size_in_bytes for meta in found) if found else None

    def run_named(self, path: str) -> str | None:
        parent, _, name = path.rstrip("/").rpartition("/")
        return name if name and parent == self.output else None

    def remove(self, name: str) -> None:
        """Delete every object under the prefix ``name`` (a run, its spill parts), or the object
        ``name``; Beam lists the prefix once and deletes in batches of 100."""
        from apache_beam.io.filesystems import FileSystems

        is_prefix = any(key.startswith(f"{name}/") for key in self.objects)
        FileSystems.delete([self._pattern(name) if is_prefix else _literal(self.path(name))])

    def files_under(self, name: str) -> dict[str, int]:
        start = len(name) + 1
        return {key[start:]: meta.size_in_bytes for key, meta in self.objects.items()
                if key.startswith(f"{name}/")}

    def remove_except(self, name: str, keep: frozenset[str]) -> None:
        from apache_beam.io.filesystems import FileSystems

        doomed = [self.path(f"{name}/{relative}") for relative in self.files_under(name)
                  if relative not in keep]
        if doomed:
            FileSystems.delete(doomed)


def latest_name(output: str) -> tuple[str | None, str | None]:
    """(the run name ``output/LATEST`` holds, what is wrong with it): read as text whatever it
    names, so that even a LATEST naming a damaged run protects that run from gc."""
    from apache_beam.io.filesystems import FileSystems

    path = FileSystems.join(output, LATEST)
    try:
        with FileSystems.open(path) as handle:
            name = handle.read().decode("utf-8").strip()
    except Exception as exc:  # noqa: BLE001 - sorted below: each filesystem raises its own
        if _not_found(exc):
            return None, None
        if isinstance(exc, _read_errors()):
            return None, f"{path}: cannot be read ({exc})"
        raise
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        return None, f"{path}: does not name a run (holds {name!r})"
    return name, None


def _started(run_id: str) -> datetime | None:
    found = RUN_ID.fullmatch(run_id)
    if found is None:
        return None
    return datetime.strptime(found.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)


def disk_size(path: Path) -> int:
    """Bytes of every file under ``path`` (links not followed); files that vanish meanwhile, as
    a running run's parts do, count nothing."""
    if path.is_file() or path.is_symlink():
        try:
            return path.lstat().st_size
        except FileNotFoundError:
            return 0
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                pass
    return total


def _is_run_dir(entry: os.DirEntry) -> bool:
    """A run directory: a real directory (not ``_cache``, not a dot name) holding a manifest or
    named as run ids are."""
    if entry.name.startswith((".", "_")) or not entry.is_dir(follow_symlinks=False):
        return False
    return RUN_ID.fullmatch(entry.name) is not None or os.path.exists(os.path.join(entry.path, MANIFEST))


def _judge(run_dir: str, has_manifest: bool) -> tuple[str, Manifest | None, tuple[str, ...]]:
    """(status from the directory alone, its manifest, why) for a run no live lease writes."""
    from chunkline.pipeline.manifest import ManifestError, load_manifest

    if not has_manifest:
        return INCOMPLETE, None, ("no manifest.json: killed before it finished",)
    try:
        manifest = load_manifest(run_dir)
    except ManifestError as exc:
        return FAILED, None, (str(exc),)
    if not manifest.reconciled:
        return FAILED, manifest, manifest.problems or ("not reconciled",)
    if manifest.held_back:
        return HELD_BACK, manifest, manifest.held_back
    return COMPLETE, manifest, ()


def describe_run(tree: LocalOutput | BucketOutput, name: str, latest: str | None,
                 writer: Writer | None) -> Run:
    """One run's row: its status (a live writer first, then LATEST, then its manifest), counts
    and size."""
    path = tree.path(name)
    reasons: tuple[str, ...]
    if writer is not None and writer.run_id == name:
        # Its manifest may be half-written: the lease, not the directory, says it is not done.
        status, manifest, reasons = RUNNING, None, (f"writing: {writer.description}",)
    else:
        status, manifest, reasons = _judge(path, tree.has_manifest(name))
        if name == latest:
            status = LATEST
    counts = None
    if manifest is not None:
        counts = {key: manifest.counts[key] for key in ("documents", "kept", "chunks")}
    return Run(name, path, status, _started(name),
               manifest.created_at if manifest else None, counts, tree.size(name), reasons,
               _referenced_bytes(tree, path, manifest) if manifest is not None else None)


def _referenced_bytes(tree: LocalOutput | BucketOutput, run_dir: str, manifest: Manifest) -> int:
    """Bytes of the files ``manifest`` lists, wherever they lie: as it states them, and a file
    it states no size of (an older format) as it is found."""
    from chunkline.index.tables import listed_paths

    listing = manifest.listing
    stated = {entry.path: entry.bytes for entries in listing.tables.values() for entry in entries}
    stated.update({segment.path: segment.bytes for segment in listing.memo or ()})
    stated.update({described.path: described.bytes for files in listing.deletes.values() for described in files})
    found: dict[str, dict[str, int]] = {}
    total = 0
    for path in listed_paths(run_dir, manifest):
        size = stated.get(path)
        if size is None:
            folder, _, name = path.partition("/")
            if folder not in found:
                found[folder] = tree.files_under(folder)
            size = found[folder].get(name, 0)
        total += size
    return total


def list_runs(output: str) -> tuple[list[Run], list[str]]:
    """(every run of ``output``, newest first, notes on what is wrong with LATEST), the
    running one told by the output's lease as it is now."""
    tree = open_output(output)
    runs, notes = runs_of(output, tree, live_writer(output))
    from chunkline.index import iceberg

    try:
        snapshots = iceberg.run_snapshots(output)
    except iceberg.IcebergError as exc:
        return runs, [*notes, str(exc)]
    return [dataclasses.replace(run, snapshots=snapshots.get(run.run_id, {})) for run in runs], notes


def runs_of(output: str, tree: LocalOutput | BucketOutput,
            writer: Writer | None) -> tuple[list[Run], list[str]]:
    """:func:`list_runs` with the lease's live holder given (None: none, or this process's)."""
    latest, note = latest_name(output)
    names = sorted(tree.run_names(), reverse=True)
    if writer is not None and writer.run_id is not None and writer.run_id not in names:
        names = sorted([*names, writer.run_id], reverse=True)  # leased, not written yet
    runs = [describe_run(tree, name, latest, writer) for name in names]
    # A folder without a manifest whose files a run with one lists is what gc left of a run.
    readers = _files_in_use(tree, [run.run_id for run in runs if run.counts is not None],
                            {run.run_id for run in runs if run.status == INCOMPLETE})
    for index, run in enumerate(runs):
        if run.run_id in readers:
            held, users = readers[run.run_id]
            runs[index] = dataclasses.replace(run, status=REFERENCED, reasons=(
                f"no manifest of its own: holds {len(held)} files run {', '.join(users)} reads "
                "(gc keeps them)",))
    notes = [note] if note else []
    if latest is not None and latest not in names:
        notes.append(f"{output}/LATEST names {latest!r}, which is not a run directory here")
    return runs, notes


# ---------------------------------------------------------------------------------------------
# publish


def _expected_rows(manifest: Manifest) -> dict[str, int]:
    """Rows each table's files hold, by what the manifest states (the checks ``account`` made
    before it was written)."""
    from chunkline.carry import CARRY_TABLE
    from chunkline.index.tables import has_table

    counts = manifest.counts
    expected = {"chunks": counts["chunks"], "documents": counts["documents"]}
    if "rejected" in counts:
        expected["rejected"] = counts["rejected"]
    if has_table(manifest, CARRY_TABLE):
        expected[CARRY_TABLE] = counts["chunks"]
    if manifest.bm25 is not None and manifest.bm25.terms is not None:
        expected["terms"] = manifest.bm25.terms
    return expected


def file_problems(run_dir: str, manifest: Manifest) -> list[str]:
    """What keeps ``run_dir``'s files from being the index its (validated) manifest describes:
    a listed file missing or unreadable, or not the bytes its run recorded (size and digest), a
    table whose files hold other row counts than the manifest states, chunk shards without
    vectors of the model's width. Footers and digests only: the rows themselves are checked by
    every reader (reuse, carry) as it reads them."""
    from chunkline.index.tables import TableFileError, listed_file_problem, live_files, table_names
    from chunkline.memo import MEMO_TABLE

    problems = []
    expected = _expected_rows(manifest)
    dim = manifest.model.dim if manifest.model is not None else None
    for table in table_names(manifest):
        if table == MEMO_TABLE:
            continue  # a lost memo segment costs the next run time, never a wrong row
        rows, unread = 0, False
        for file in live_files(run_dir, manifest, table):
            name = file.name
            # A file changed since its run wrote it is never published, whatever its footer says.
            problem, metadata = listed_file_problem(file)
            if problem is not None:
                problems.append(problem)
            if metadata is None:
                continue
            try:
                deleted = file.deleted  # its shard's deletion file, checked against the manifest
            except TableFileError as exc:  # missing or damaged: once for its shard's files
                unread = True
                if str(exc) not in problems:
                    problems.append(str(exc))
                continue
            if deleted and deleted[-1] >= metadata.num_rows:
                problems.append(f"{name}: the manifest deletes row {deleted[-1]:,} of {metadata.num_rows:,}")
            rows += metadata.num_rows - len(deleted)
            if table == "chunks" and dim is not None:
                from chunkline.records import in_memory_schema  # pyarrow: not at the parser's import

                schema = in_memory_schema(metadata.schema.to_arrow_schema())
                vector = schema.field("embedding").type if "embedding" in schema.names else None
                if vector is None or getattr(vector, "list_size", dim) != dim:
                    problems.append(f"{name} has no {dim}-d embedding column")
        if table in expected and rows != expected[table] and not unread:
            problems.append(f"{table}: its files hold {rows:,} live rows, the manifest counts {expected[table]:,}")
    return problems


def check_run_id(output: str, run_id: str) -> None:
    """RunsError unless ``run_id`` names a directory right under ``output``."""
    if not run_id or "/" in run_id or "\\" in run_id or run_id in (".", ".."):
        raise RunsError(f"{run_id!r} is not a run id (a directory name under {output})")


def publishable(output: str, run_id: str, allow_held_back: bool = False) -> Manifest:
    """The manifest of ``output``'s run ``run_id`` when LATEST may name it: its manifest valid
    (``chunkline.pipeline.manifest.load_manifest``), reconciled, not held back by the publish guard
    (unless ``allow_held_back``), every file it lists there with the rows it states. RunsError
    naming the run otherwise."""
    from apache_beam.io.filesystems import FileSystems

    from chunkline.pipeline.manifest import MANIFEST, ManifestError, load_manifest

    check_run_id(output, run_id)
    run_dir = FileSystems.join(output, run_id)
    if not FileSystems.exists(FileSystems.join(run_dir, MANIFEST)):
        what = "is incomplete (no manifest.json: killed, or still running)" \
            if _run_dir_exists(run_dir) else "does not exist"
        raise RunsError(f"run {run_id} {what}; LATEST may only name a complete run")
    try:
        manifest = load_manifest(run_dir)
    except ManifestError as exc:
        raise RunsError(f"run {run_id}: {exc}") from None
    if manifest.run_id != run_id:
        raise RunsError(f"run {run_id}: its manifest names run {manifest.run_id} (a copied "
                        f"directory?)")
    if not manifest.reconciled:
        raise RunsError(f"run {run_id} failed (not reconciled: "
                        f"{'; '.join(manifest.problems)}); it cannot be published")
    if manifest.held_back and not allow_held_back:
        raise RunsError(f"run {run_id} was held back by the publish guard "
                        f"({'; '.join(manifest.held_back)}); --allow-held-back publishes it")
    problems = file_problems(run_dir, manifest)
    if problems:
        raise RunsError(f"run {run_id} is damaged: {'; '.join(problems)}")
    return manifest


def _run_dir_exists(run_dir: str) -> bool:
    """Whether ``run_dir`` holds anything: in a bucket a prefix is no object, so Beam's exists
    says no for every run directory there."""
    from apache_beam.io.filesystems import FileSystems

    if not run_dir.startswith(GCS):
        return FileSystems.exists(run_dir)
    pattern = _literal(run_dir.rstrip("/")) + "/**"
    return bool(FileSystems.match([pattern], limits=[1])[0].metadata_list)


def _sink(manifest: Manifest | None) -> str | None:
    """The sink a run's config records (masked: the manifest holds it through pipeline/redact)."""
    if not manifest:
        return None
    sink = manifest.setting("sink")
    return sink.get("to") if isinstance(sink, dict) else None


@dataclass(frozen=True)
class Published:
    run_id: str
    previous: str | None  # what LATEST named before
    manifest: Manifest
    sink: str | None  # the (masked) sink the new or the previous run's config records
    changed: bool


def publish_run(output: str, run_id: str, allow_held_back: bool = False,
                timeout: float | None = None) -> Published:
    """Point ``output``'s LATEST at ``run_id``, under the output's lease (LeaseHeld when another
    process holds it), after :func:`publishable` verified it; LATEST is replaced atomically by
    ``chunkline.pipeline.run.publish``, as a run replaces it."""
    from apache_beam.io.filesystems import FileSystems

    from chunkline.pipeline.manifest import ManifestError, load_manifest
    from chunkline.pipeline.run import publish, publish_tables

    check_run_id(output, run_id)  # before the lease, whose staged file is named after it
    if output.startswith(GCS):
        BucketOutput(output)  # a bucket that is not there: one line, before the lease's client
    elif "://" not in output and not Path(output).is_dir():
        raise RunsError(f"{output}: no such output directory")
    with OutputLease(output, f"chunkline publish of run {run_id}", timeout or lease_timeout()) as lease:
        manifest = publishable(output, run_id, allow_held_back)
        previous, _ = latest_name(output)
        before = None
        if previous is not None and previous != run_id:
            try:
                before = load_manifest(FileSystems.join(output, previous))
            except ManifestError:
                before = None  # a damaged run is what a rollback leaves; its sink is unknown
        if previous == run_id:
            return Published(run_id, previous, manifest, _sink(manifest), False)
        lease.check()  # fencing, as a run does: a lease taken over never switches LATEST
        try:  # in the catalog the output records (the last published run's config named it)
            publish_tables(output, manifest)
        except RuntimeError as exc:  # its one line: the catalog unreachable, a commit refused
            raise RunsError(str(exc)) from None
        publish(output, run_id)
    return Published(run_id, previous, manifest, _sink(manifest) or _sink(before), True)


# ---------------------------------------------------------------------------------------------
# gc


@dataclass(frozen=True)
class Removal:
    name: str  # relative to the output
    what: str  # a run's status, or the kind of leftover file
    size: int
    # Names within the folder ``name`` that stay (files a kept run lists); empty: all goes.
    keep: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Kept:
    name: str
    why: str


@dataclass
class Collection:
    """What gc removed (or, dry, would remove) and kept; ``stopped``: why it stopped early."""

    removed: list[Removal] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)
    pending: list[Removal] = field(default_factory=list)  # planned, not removed (stopped)
    notes: list[str] = field(default_factory=list)
    stopped: str | None = None


def _referenced(tree: LocalOutput | BucketOutput, latest: str | None) -> set[str]:
    """The runs of this output that LATEST's config names as ``output.previous`` (its reuse
    and carry source, ``--previous``), as given and as that run resolved it (its manifest's
    ``previous``): a next run with the same config reads it again. Without ``output.previous``
    the manifest's ``previous`` is only history (the LATEST of its day, whose reused vectors
    and carried rows were copied into the run's own shards), so it keeps nothing."""
    from chunkline.pipeline.manifest import ManifestError, load_manifest

    if latest is None:
        return set()
    try:
        manifest = load_manifest(tree.path(latest))
    except ManifestError:
        return set()
    given = manifest.setting("output", "previous")
    if not isinstance(given, str) or not given:
        return set()
    found = set()
    for path in (given, manifest.previous):
        if isinstance(path, str) and path:
            name = tree.run_named(path)
            if name is not None:
                found.add(name)
    return found


def _files_in_use(tree: LocalOutput | BucketOutput, kept: list[str], doomed: set[str]
                  ) -> dict[str, tuple[set[str], list[str]]]:
    """For each of the ``doomed`` run folders that a kept run still reads: (the names within it
    that kept runs' manifests list, those runs). A rerun references an earlier run's unchanged
    files instead of copying them (``chunkline.index.tables``): exactly those stay, the rest of
    the folder (its manifest among it: it is no longer a run) goes. A manifest lists every file
    its run reads, so nothing is followed further."""
    from chunkline.index.tables import listed_paths
    from chunkline.pipeline.manifest import ManifestError, load_manifest

    found: dict[str, tuple[set[str], list[str]]] = {}
    for user in kept:
        try:
            run_dir = tree.path(user)
            manifest = load_manifest(run_dir)
        except (ManifestError, FileNotFoundError, ValueError):
            continue  # no manifest, no files listed: the run's own status decides
        for path in listed_paths(run_dir, manifest):
            folder, _, name = path.partition("/")
            if folder in doomed:
                names, users = found.setdefault(folder, (set(), []))
                names.add(name)
                if user not in users:
                    users.append(user)
    return found


def _leftovers(tree: LocalOutput | BucketOutput, runs: list[Run], doomed: set[str],
               timeout: float) -> list[Removal]:
    """Files killed processes leave: LATEST staged beside itself, write probes older than the
    lease timeout (a run in preflight, before its lease, may be writing one now), and the
    ``_spill`` parts of a run that is kept."""
    from chunkline.transforms.spill import SPILL_DIR

    found = []
    for name, size, modified in tree.files((STAGED_LATEST, PROBE)):
        if name.startswith(STAGED_LATEST):
            found.append(Removal(name, "staged LATEST", size))
        elif time.time() - modified > timeout:
            found.append(Removal(name, "write probe", size))
    for run in runs:
        if run.run_id in doomed or run.status == RUNNING:
            continue
        spilled = tree.folder_size(f"{run.run_id}/{SPILL_DIR}")
        if spilled is not None:
            found.append(Removal(f"{run.run_id}/{SPILL_DIR}", "spill parts", spilled))
    return found


def gc_plan(output: str, tree: LocalOutput | BucketOutput, keep: int, writer: Writer | None,
            holding: bool, timeout: float) -> Collection:
    """What gc removes, given the lease's live ``writer`` (None: none, or this gc holds the
    lease, ``holding``): run directories beyond the ``keep`` newest complete ones (LATEST
    counts among them), held-back, failed and incomplete runs; never LATEST's run, the run
    ``writer`` writes, or the run LATEST's config names as its previous; leftover staged files
    only under the lease (without it they may be a live run's)."""
    runs, notes = runs_of(output, tree, writer)
    latest, _ = latest_name(output)
    referenced = _referenced(tree, latest)
    plan = Collection(notes=notes)
    complete = [r.run_id for r in runs if r.status in (LATEST, COMPLETE)]
    newest = set(complete[:keep])
    doomed = set()
    for run in runs:
        if run.status == RUNNING:
            plan.kept.append(Kept(run.run_id, run.reasons[0]))
        elif run.run_id == latest:
            plan.kept.append(Kept(run.run_id, "LATEST names it"))
        elif run.run_id in referenced:
            plan.kept.append(Kept(run.run_id, "LATEST's config names it as output.previous"))
        elif run.status == COMPLETE and run.run_id in newest:
            plan.kept.append(Kept(run.run_id, f"among the newest complete runs (--keep {keep})"))
        else:
            doomed.add(run.run_id)
            plan.pending.append(Removal(run.run_id, run.status, run.size))
    in_use = _files_in_use(tree, [r.run_id for r in runs if r.run_id not in doomed], doomed)
    for name, (names, users) in sorted(in_use.items()):
        # Still doomed for the leftovers: its spill parts go with the rest of it.
        whole = next(r for r in plan.pending if r.name == name)
        files = tree.files_under(name)
        gone = sum(size for relative, size in files.items() if relative not in names)
        plan.pending = [r for r in plan.pending if r.name != name]
        if any(relative not in names for relative in files):
            plan.pending.append(Removal(name, f"{whole.what}, all but the files run "
                                        f"{', '.join(users)} lists", gone, frozenset(names)))
        plan.kept.append(Kept(name, f"{len(names)} files, which run {', '.join(users)} lists"))
    if holding:
        plan.pending.extend(_leftovers(tree, runs, doomed, timeout))
    return plan


class _Exclusion:
    """gc's hold on the output: its own lease when it can take it; otherwise, beside a live run
    (whose directory the plan leaves alone), a check before every removal that the lease is
    still that run's: any other holder (a run started meanwhile, a publish) stops gc."""

    def __init__(self, output: str, timeout: float) -> None:
        self.lease = OutputLease(output, "chunkline gc", timeout)
        self.output, self.timeout = output, timeout
        self.holding = False
        self.beside: Writer | None = None

    def enter(self) -> None:
        for _ in range(2):  # once more if the holder let go between the refusal and the look
            try:
                self.lease.acquire()
                self.holding = True
                return
            except LeaseHeld:
                self.beside = live_writer(self.output, self.timeout)
            if self.beside is not None:
                break
        if self.beside is None or self.beside.run_id is None:
            who = self.beside.description if self.beside else "another process"
            raise OutputBusy(f"{self.output} is held by {who}; try again when it is done")

    def still_safe(self) -> bool:
        if self.holding:
            try:
                self.lease.check()  # a gc that stalled past the timeout has lost the output
                return True
            except LeaseLost:
                return False
        try:
            self.lease.acquire()  # the run let go: from here on gc holds the output itself
            self.holding = True
            return True
        except LeaseHeld:
            now = live_writer(self.output, self.timeout)
        beside = self.beside  # set by enter() whenever gc does not hold the lease itself
        return now is not None and beside is not None and now.run_id == beside.run_id

    def exit(self) -> None:
        if self.holding:
            self.lease.release()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def collect(output: str, keep: int, dry_run: bool = False, timeout: float | None = None) -> Collection:
    """Remove what :func:`gc_plan` plans, holding the output's lease so no run starts meanwhile
    (beside a live run when one holds it: see :class:`_Exclusion`); ``dry_run``: plan only,
    taking nothing. OutputBusy when the lease is held by something other than a run."""
    if keep < 0:
        raise RunsError(f"--keep must be 0 or more, got {keep}")
    timeout = timeout or lease_timeout()
    tree = open_output(output)
    if dry_run:
        writer = live_writer(output, timeout)
        return gc_plan(output, tree, keep, writer, writer is None, timeout)
    exclusion = _Exclusion(output, timeout)
    exclusion.enter()
    try:
        result = gc_plan(output, tree, keep, exclusion.beside if not exclusion.holding else None,
                         exclusion.holding, timeout)
        pending, result.pending = result.pending, []
        if exclusion.holding and pending:
            # First the Iceberg snapshots of the runs gc removes, with every metadata and delete
            # file only they reached, so that no snapshot a reader may open ever names a data
            # file removed below (stopped midway, the runs left are still whole runs, and
            # `publish` commits a snapshot anew for one it finds none of).
            from chunkline.index import iceberg

            gone = {removal.name for removal in pending}
            kept_runs = {run.run_id for run in runs_of(output, tree, None)[0] if run.run_id not in gone}
            try:
                if expired := iceberg.expire(output, kept_runs):
                    result.notes.append(f"{expired} Iceberg metadata and delete files no kept snapshot "
                                        "reads removed (the expired runs' snapshots)")
            except iceberg.IcebergError as exc:  # its catalog unreachable: the next gc expires them
                result.notes.append(f"the removed runs' Iceberg snapshots were not expired ({exc}); "
                                    "a later gc expires them")
        for index, removal in enumerate(pending):
            if not exclusion.still_safe():
                result.stopped = (f"the lease on {output} changed hands while gc ran (a run or "
                                  f"a publish took it); stopped before removing anything more")
                result.pending = pending[index:]
                break
            if removal.keep:
                tree.remove_except(removal.name, removal.keep)
            else:
                tree.remove(removal.name)
            result.removed.append(removal)
    finally:
        exclusion.exit()
    return result


# ---------------------------------------------------------------------------------------------
# the commands


def size_text(size: int) -> str:
    value, unit = float(size), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"


def _table(runs: list[Run]) -> Iterator[str]:
    # SIZE: what the run's folder holds on disk; INDEX: what the run references, wherever it lies.
    # SNAPSHOT: the chunks table's Iceberg snapshot of the run (`--json`: every table's).
    header = ("RUN", "STARTED (UTC)", "STATUS", "DOCUMENTS", "KEPT", "CHUNKS", "SIZE", "INDEX", "SNAPSHOT")
    rows = [(r.run_id, r.started.strftime("%Y-%m-%d %H:%M:%S") if r.started else "-", r.status,
             *(f"{r.counts[k]:,}" if r.counts else "-" for k in ("documents", "kept", "chunks")),
             size_text(r.size), size_text(r.referenced) if r.referenced is not None else "-",
             str(r.snapshots["chunks"]) if "chunks" in r.snapshots else "-") for r in runs]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        yield "  ".join(cell.ljust(w) if i < 3 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))).rstrip()


def add_runs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", help="output directory or gs:// path (holding LATEST and run "
                        "directories)")
    parser.add_argument("--json", action="store_true", help="a JSON list of runs")


def runs_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        runs, notes = list_runs(args.output)
    except RunsError as exc:
        print(f"chunkline runs: {exc}", file=err)
        return exits.USAGE
    for note in notes:
        print(f"chunkline runs: {note}", file=err)
    if args.json:
        print(json.dumps([r.to_json() for r in runs], indent=2), file=out)
        return exits.OK
    if not runs:
        print(f"{args.output}: no runs", file=out)
        return exits.OK
    for line in _table(runs):
        print(line, file=out)
    for run in runs:
        if run.reasons and run.status != INCOMPLETE:
            print(f"  {run.run_id}: {'; '.join(run.reasons)}", file=out)
    return exits.OK


def add_publish_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", help="output directory or gs:// path (holding LATEST)")
    parser.add_argument("run_id", metavar="RUN_ID", help="the run LATEST is to name (a directory "
                        "name under OUTPUT; `chunkline runs OUTPUT` lists them)")
    parser.add_argument("--allow-held-back", action="store_true",
                        help="publish a run the publish guard held back (it shrank)")
    sink = parser.add_mutually_exclusive_group()
    sink.add_argument("--to", metavar="URI",
                      help="then sync this store to the published run (as `chunkline sync`)")
    sink.add_argument("--config", metavar="FILE",
                      help="then sync the store this run config's sink.to names (its secrets "
                      "from the environment, as `chunkline run` reads them)")


def _sink_target(args: argparse.Namespace) -> tuple[str, int] | None:
    """(store URI, batch size) the published run is synced into: ``--to``, or the sink of the
    run config ``--config`` names; None for neither. RunsError for a config without a sink."""
    if args.to is not None:
        return args.to, 1000
    if args.config is None:
        return None
    from chunkline.pipeline.config import ConfigError, load_config

    try:
        config = load_config(args.config, [])
    except ConfigError as exc:
        raise RunsError(str(exc)) from None
    if config.sink is None:
        raise RunsError(f"{args.config} sets no sink.to: nothing to sync")
    return config.sink.to, config.sink.batch_size


def _sync_published(args: argparse.Namespace, target: tuple[str, int], out: TextIO,
                    err: TextIO) -> int:
    """Sync the store to the run LATEST now names, as `chunkline run` does after a publish."""
    from chunkline.pipeline.sync.command import run_args as sync_command

    to, batch_size = target
    sync_args = argparse.Namespace(
        output=args.output, to=to, run=args.run_id, unpublished=args.allow_held_back,
        batch_size=batch_size, repair=False, check=False, quiet=True)
    status = sync_command(sync_args, out, err)
    if status:
        # The URI is not repeated: a PostgreSQL URI may carry a password.
        print(f"chunkline publish: run {args.run_id} is published, but the sync into the store "
              f"failed (sync exit {status}); `chunkline sync {args.output} --to URI` completes it",
              file=err)
        return exits.PUBLISHED_SINK_FAILED
    return exits.OK


def publish_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from chunkline.pipeline.redact import redacted

    try:
        # Before the publish: a config without a sink is a usage error, not a half-done rollback.
        target = _sink_target(args)
        done = publish_run(args.output, args.run_id, args.allow_held_back)
    except LeaseHeld as exc:
        print(f"chunkline publish: run {args.run_id} not published: {exc}", file=err)
        return exits.BUSY
    except LeaseLost as exc:
        print(f"chunkline publish: run {args.run_id} not published: {exc}", file=err)
        return exits.NOT_DONE
    except (RunsError, ValueError, OSError) as exc:
        message = " ".join(redacted(str(exc)).split())  # one line, whatever the cause wrote
        print(f"chunkline publish: {message}", file=err)
        return exits.USAGE
    counts = done.manifest.counts
    what = (f"{counts['documents']:,} documents, {counts['kept']:,} kept, "
            f"{counts['chunks']:,} chunks")
    if not done.changed:
        print(f"{args.output}/LATEST already names {done.run_id} ({what}); nothing changed", file=out)
    else:
        print(f"{args.output}/LATEST: {done.previous or '(none)'} -> {done.run_id} ({what})", file=out)
    if done.changed and done.manifest.held_back:
        print(f"  published although held back: {'; '.join(done.manifest.held_back)}", file=out)
    if target is not None:
        # Also when LATEST already named the run: a rollback whose sync failed is finished so.
        return _sync_published(args, target, out, err)
    if done.changed and done.sink:
        # The sink's store still holds the run it was last synced to; only a sync changes that.
        print(f"  the sink ({done.sink}) still holds the run it was last synced to: sync it "
              f"with `chunkline sync {args.output} --to <sink.to>`, or publish with --to or "
              f"--config", file=out)
    return exits.OK


def add_gc_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", help="output directory or gs:// path (holding LATEST and run "
                        "directories)")
    parser.add_argument("--keep", type=int, required=True, metavar="N",
                        help="complete runs to keep, newest first (LATEST is kept whatever N is)")
    parser.add_argument("--dry-run", action="store_true", help="list what would go, remove nothing")


def gc_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return collect_and_report(args.output, args.keep, args.dry_run, out, err)


def collect_and_report(output: str, keep: int, dry_run: bool, out: TextIO, err: TextIO,
                       command: str = "chunkline gc") -> int:
    """:func:`collect`, each removal and kept run printed, and gc's exit status."""
    try:
        result = collect(output, keep, dry_run)
    except OutputBusy as exc:
        print(f"{command}: nothing removed: {exc}", file=err)
        return exits.BUSY
    except (RunsError, OSError) as exc:
        print(f"{command}: {' '.join(str(exc).split())}", file=err)
        return exits.USAGE
    for note in result.notes:
        print(f"{command}: {note}", file=err)
    verb = "would remove" if dry_run else "removed"
    listed = result.pending if dry_run else result.removed
    for removal in listed:
        print(f"{verb:<12} {removal.name}  {removal.what}  {size_text(removal.size)}", file=out)
    for kept in result.kept:
        print(f"{'kept':<12} {kept.name}  {kept.why}", file=out)
    total = sum(r.size for r in listed)
    print(f"{'would free' if dry_run else 'freed'} {size_text(total)} ({total:,} bytes) in "
          f"{len(listed)} entr{'y' if len(listed) == 1 else 'ies'}", file=out)
    if result.stopped:
        print(f"{command}: {result.stopped}; left: {', '.join(r.name for r in result.pending)}",
              file=err)
        return exits.BUSY
    return exits.OK
