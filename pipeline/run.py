"""Run the job: plan on the driver (pipeline/plan.py), run on the configured runner, then
account for every document, write the manifest (last) and switch LATEST."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import shutil
import time
from datetime import datetime, timezone
from typing import Any, NamedTuple, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner

import chunkline
from chunkline.records import DUPLICATE, KEPT, REJECTED
from chunkline.context import COUNTERS as CONTEXT_COUNTERS
from chunkline.context import METRICS_NAMESPACE as CONTEXT_NAMESPACE
from chunkline.context import estimate_cost, over_failure_budget, summary_lines
from chunkline.index import storage
from chunkline.index.layout import LATEST, MANIFEST, STAGED_LATEST
from chunkline.index.manifest_types import (FORMAT, INLINE_FORMAT, Listing, Manifest, Model, Split, access_from,
                                            bm25_from, parse_listing, to_json)
from chunkline.index.tables import listed_deletions, read_table, relative_path
from chunkline.pipeline.runners import IN_PROCESS, job_runner
from chunkline.pipeline.build import build, context_cache_dir, ocr_cache_dir
from chunkline.pipeline.config import Config, to_dict
from chunkline.pipeline.lease import OutputLease
from chunkline.pipeline.manifest import ManifestError, latest_run, load_manifest, resolve_run
from chunkline.pipeline.plan import absolute_paths, new_run_id, plan, preflight
from chunkline.pipeline.redact import redacted, redacted_config
from chunkline.pipeline.summary import (
    RunSummary, access_lines, bm25_lines, credential_lines, ocr_lines, suggested_question,
)
from chunkline.pipeline.timing import stage_seconds
from chunkline.transforms.dofn_specs import kept_dofn_specs
from chunkline.transforms.memory import release_freed_memory
from chunkline.transforms.spill import remove_dead_spills, remove_spill
from chunkline.transforms.write import LISTING_DIR
from chunkline.transforms.memo import NAMESPACE as MEMO_NAMESPACE, SEGMENTS_NAMESPACE as MEMO_SEGMENTS
from chunkline.memo import KINDS as MEMO_KINDS, MEMO_DIR, MEMO_TABLE, Listed, MemoSource
from chunkline.carry import CARRY_TABLE
from chunkline.state import STATE_TABLE
from chunkline.transforms.counters import (
    CARRY_COUNTERS, CHUNKS_CARRIED, CHUNKS_EMBEDDED, CHUNKS_REUSED, READ_DOCUMENTS, READ_REJECTED, READ_SETTLED,
    REUSE_REJECTED, TOKENS_EMBEDDED, committed,
    TOKENS_PADDED,
)

log = logging.getLogger("chunkline.run")


def shrink_guard(counts: dict[str, int], output: str, max_shrink: float,
                 baseline: str | None = None) -> list[str]:
    """Why this run must not replace the run LATEST names (or, with no LATEST, ``baseline``:
    the run ``--previous`` named): no document kept, or kept documents or chunks fell by more
    than ``max_shrink`` (an unmounted disk or a bad pattern looks like a corpus that emptied
    overnight)."""
    reasons = []
    if counts.get("kept", 0) == 0:
        reasons.append(f"no document kept ({counts.get('documents', 0)} read)")
    try:
        previous = latest_run(output) or baseline
        before = load_manifest(previous).counts if previous else None
    except ManifestError as exc:
        # Nothing to compare with is no licence to publish: the damage may be the same fault
        # (a bad mount) that emptied this run. The operator decides, with --allow-shrink.
        reasons.append(f"cannot compare with the published run ({exc})")
        return reasons
    if before is None:
        return reasons
    for name in ("kept", "chunks"):
        old, new = before.get(name, 0), counts.get(name, 0)
        if old and new < old * (1 - max_shrink):
            reasons.append(f"{name} fell from {old:,} to {new:,} ({(new - old) / old:+.0%}) "
                           f"against {previous}, more than output.max_shrink {max_shrink:g}")
    return reasons


def _baseline(config: Config) -> str | None:
    """The run ``--previous`` names, when no LATEST exists: what a run after a lost LATEST is
    compared with (``chunkline.pipeline.plan.check_latest``)."""
    if not config.output.previous:
        return None
    try:
        return resolve_run(config.output.previous)
    except ManifestError:
        return None


# CPython collects its youngest generation every 700 net allocations, and the older ones in
# proportion; the in-process runner keeps the graph, the memo and the stages' buffers alive, so
# a rerun of 20 MB spent ~0.3 s of its ~4 s in collections (measured with gc.callbacks). A
# larger young threshold makes every generation's collections rarer; cycles are still
# collected, later (the tuning Instagram describes for its web servers).
YOUNG_COLLECTION_THRESHOLD = 50_000


@contextlib.contextmanager
def _fewer_collections():
    """Also ``gc.freeze()``: what exists when the job starts (modules, the graph, the plan) is
    never garbage, and a full collection that walks it costs ~60 ms each time (four per rerun
    of 20 MB); frozen, full collections walk only what the job made (CPython's gc.freeze, as
    Instagram uses it before forking its workers)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *thresholds[1:])
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


# glibc malloc arenas per SDK worker process (mallopt(3), M_ARENA_MAX; the MALLOC_ARENA_MAX
# variable, read when a process starts). By default each thread that allocates may get an arena
# of its own, up to eight per core, and memory freed in one arena serves only that arena: a
# worker's gRPC threads receive and send each bundle's data in theirs, so what one stage's
# data freed stayed resident beside the next stage's. With two, a worker's resident memory
# between stages stayed 25-50 MB lower on 40 MB of text (bench/RESULTS.md, "Memory per SDK
# worker process"); the workers' Python code runs under one lock, so few arenas cost it little.
WORKER_MALLOC_ARENAS = "2"


@contextlib.contextmanager
def _worker_malloc_arenas():
    """``MALLOC_ARENA_MAX`` for the SDK worker processes the runner starts (they inherit this
    process's environment: Beam's ``local_job_service.SubprocessSdkWorker``), unless it is set
    already; the environment is as it was afterwards. This process's own allocator is unchanged
    (glibc reads the variable at startup)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        yield
        return
    os.environ["MALLOC_ARENA_MAX"] = WORKER_MALLOC_ARENAS
    try:
        yield
    finally:
        os.environ.pop("MALLOC_ARENA_MAX", None)


def _keep_arrow_pages() -> None:
    """Arrow's buffers from jemalloc, where this pyarrow has it. Its default pool here is
    mimalloc, which returns freed pages to the system at once; the shard writer's reads, takes
    and writes then fault fresh pages for every shard, which on a virtual machine costs several
    times the copying (``bench/arrow_pool_bench.py``: merging a run's shards)."""
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # a build without jemalloc keeps its default
        pass


def _files(run_dir: str, table: str) -> list[str]:
    pattern = FileSystems.join(run_dir, f"{table}-*.parquet")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def _size(path: str) -> int:
    return FileSystems.match([path])[0].metadata_list[0].size_in_bytes


class RunTables(NamedTuple):
    """The run's tables as its manifest lists them (:func:`run_tables`)."""

    tables: dict[str, list[dict[str, Any]]]  # each table's entries (format 2/4)
    deletes: dict[str, list[dict[str, Any]]]  # the shards' deletion files it references, by table
    unneeded: list[str]  # deletion files whose few positions went inline (relative to OUTPUT)

    def listing(self, where: str, memo: list[dict[str, Any]] | None = None) -> Listing:
        """The listing (format 4 with deletion files, else 2), with the ``memo`` table when given."""
        return parse_listing({"format": FORMAT if self.deletes else INLINE_FORMAT,
                              "tables": {**self.tables, **({MEMO_TABLE: memo} if memo is not None else {})},
                              **({"deletes": self.deletes} if self.deletes else {})}, where=where)


def _recorded(previous_run: str | None, output: str) -> dict[str, tuple[int | None, str | None]]:
    """Each file the previous run of ``output`` lists: (its size, its digest) as recorded when
    it was written, by its path relative to OUTPUT. A file a run keeps is described as it was
    written, never as it is found now: one changed since is then refused by every reader."""
    if previous_run is None or storage.parent(previous_run) != output.rstrip("/"):
        return {}
    try:
        manifest = load_manifest(previous_run)
    except (ManifestError, OSError, ValueError):
        return {}
    listing = manifest.listing
    return {entry.path: (entry.bytes, entry.digest)
            for entries in listing.tables.values() for entry in entries}


def run_tables(run_dir: str, tables: Sequence[str], previous_run: str | None = None) -> RunTables:
    """Each of ``tables`` as the manifest (``chunkline.index.tables``) lists it: the files its
    shard writers listed (``chunkline.transforms.write.write_listing``: this run's own, and
    earlier runs' files whose rows it keeps, each counting its deleted rows, with its shard's
    deletion file), in shard order; a table written otherwise (the BM25 terms), its files in the
    run folder, every row live. Each file with its size. The positions stay in the shards'
    deletion files, never read here, except a table's few (``listed_deletions``: at most
    ``INLINE_DELETES``), which go inline."""
    output = run_dir.rstrip("/").rsplit("/", 1)[0]
    own = run_dir.rstrip("/").rsplit("/", 1)[1] + "/"
    recorded = _recorded(previous_run, output)
    found: dict[str, list[dict[str, Any]]] = {}
    deletes: dict[str, list[dict[str, Any]]] = {}
    for table in tables:
        pattern = FileSystems.join(run_dir, LISTING_DIR, f"{table}-*.json")
        listings = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
        entries: list[dict[str, Any]] = []
        for listing in listings:  # shard order: their names number the shards
            with FileSystems.open(listing) as handle:
                listed = json.loads(handle.read())
            entries.extend(listed["files"])
            if listed["deletes"] is not None:
                deletes.setdefault(table, []).append(listed["deletes"])
        if not listings:
            for path in _files(run_dir, table):
                with FileSystems.open(path) as handle:
                    rows = pq.ParquetFile(handle).metadata.num_rows
                entries.append({"path": relative_path(path), "rows": rows, "deleted": []})
        for entry in entries:
            path = FileSystems.join(output, *entry["path"].split("/"))
            size, digest = recorded.get(entry["path"], (None, None))
            if entry["path"].startswith(own) or size is None:
                # Written by this run (or by a run that recorded nothing): measured now, its bytes
                # read once more (what a run writes, never the whole index).
                with storage.parquet_source(path) as source:
                    size, digest = storage.source_size(source), storage.source_digest(source)
            entry["bytes"] = size
            if digest is not None:
                entry["digest"] = digest
        found[table] = entries
    return RunTables(*listed_deletions(output, found, deletes))


def memo_table(output: str, run_dir: str, source: MemoSource,
               used: dict[int, int] | None) -> list[dict[str, Any]]:
    """The manifest's ``memo`` table (``chunkline.memo.MEMO_TABLE``): the run's own segments
    (what it computed, and what it recalled from a retired segment) and the segments of earlier
    runs it still lists (``MemoSource.kept``, with ``used``: the entries recalled from each, by
    ordinal), each with its kind, share, rows, size, age and use, by path (no reader's rows;
    ``gc`` keeps what a kept run lists)."""
    try:
        own = sorted(m.path for m in FileSystems.match(
            [FileSystems.join(run_dir, MEMO_DIR, "*.parquet")])[0].metadata_list)
    except Exception:  # noqa: BLE001 - no memo written (nothing computed): none of its own
        own = []
    listed = source.kept(used)
    prefix = output.rstrip("/") + "/"
    for path in own:
        try:
            with FileSystems.open(path) as handle:
                rows = pq.ParquetFile(handle).metadata.num_rows
            size = _size(path)
        except Exception:  # noqa: BLE001 - a segment gone or damaged costs the next run time only
            continue
        listed.append(Listed(path[len(prefix):] if path.startswith(prefix) else path, rows, size,
                             age=0, used=rows))
    return [segment.entry() for segment in sorted(listed, key=lambda segment: segment.path)]


def _segment_counts(result) -> dict[int, int] | None:
    """Entries recalled per listed segment of the previous run (``memo_segments`` counters, by
    ordinal); None where the runner reports no metrics (a counter never incremented is not
    reported: a segment missing here recalled nothing)."""
    if not reports_metrics(result):
        return None
    try:
        found = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(MEMO_SEGMENTS))
    except Exception:  # noqa: BLE001 - some runners do not report metrics
        return None
    counts: dict[int, int] = {}
    for counter in found["counters"]:
        try:
            ordinal = int(counter.key.metric.name)
        except ValueError:
            continue
        counts[ordinal] = counts.get(ordinal, 0) + committed(counter)
    return counts


def _read_column(run_dir: str, listing: Listing, table: str, column: str) -> list[Any]:
    read = read_table(run_dir, listing, table, [column])
    return [] if read is None else read.column(column).to_pylist()


def _live_rows(tables: dict[str, list[dict[str, Any]]], table: str) -> int:
    return sum(entry["rows"] - (entry.get("deleted_rows") or len(entry.get("deleted") or ()))
               for entry in tables[table])


def table_names(sparse: bool) -> tuple[str, ...]:
    """The tables a run's shard writers list (the BM25 terms with sparse vectors)."""
    return ("chunks", "documents", "rejected") + (("terms",) if sparse else ()) + (CARRY_TABLE, STATE_TABLE)


def _credentials(result, mode: str) -> dict[str, Any]:
    """What the credentials stage found: documents flagged, rejected and redacted, credentials
    found, and how many of each kind (never a value: the counters hold names and numbers)."""
    from chunkline.credentials import rules_digest
    from chunkline.transforms.credentials import KIND_PREFIX, NAMESPACE, outcomes

    found: dict[str, int] = {}
    try:
        counters = result.metrics().query(
            beam.metrics.MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except Exception:  # noqa: BLE001 - a runner without metrics: nothing to say
        counters = []
    for counter in counters:
        name = counter.key.metric.name
        found[name] = found.get(name, 0) + committed(counter)
    kinds = {name.removeprefix(KIND_PREFIX): n for name, n in sorted(found.items())
             if name.startswith(KIND_PREFIX) and n}
    # What became of each kind: in a rejected document, or masked in an indexed one. The rules'
    # digest: a later run under other rules erases what these may have let through
    # (pipeline/plan.py erases).
    rules = {} if mode == "allow" else {"rules": rules_digest()}
    return {"mode": mode, **rules, "kinds": kinds, **outcomes(found), **{
        name: found.get(name, 0) for name in ("documents_flagged", "documents_rejected",
                                              "documents_redacted", "found")}}


def _metric(result, namespace: str, name: str) -> int | None:
    try:
        found = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(namespace).with_name(name))
    except Exception:  # noqa: BLE001 - some runners do not report metrics; counts then come from files
        return None
    values = [committed(counter) for counter in found["counters"]]
    return sum(values) if values else None


def reports_metrics(result) -> bool:
    """Whether the runner reported any metric at all. A Beam counter never incremented is not
    reported, so a missing counter means zero only where others are reported; a runner that
    reports none (or whose query fails) leaves every count unknown."""
    try:
        found = result.metrics().query()
    except Exception:  # noqa: BLE001 - each runner fails its own way when it keeps no metrics
        return False
    return any(found.get(kind) for kind in ("counters", "distributions", "gauges"))


def account(run_dir: str, result, embedding: bool = True, sparse: bool = False,
            job_carries: bool = False, found: RunTables | None = None
            ) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]], list[str], list[str]]:
    """Counts from the live rows of the files the run lists (``found``, else :func:`run_tables`;
    its tables the second value; and the read stage's counters): documents in = kept + duplicate + rejected, checked;
    with ``job_carries`` (the graph had a carry index), kept = carried + recomputed + new too.
    The fourth value names what could not be checked (a runner that reports no metrics): the
    counts are then the files' alone, and say so."""
    found = found if found is not None else run_tables(run_dir, table_names(sparse))
    files, listing = found.tables, found.listing(run_dir)
    statuses = _read_column(run_dir, listing, "documents", "status")
    tokens = _read_column(run_dir, listing, "chunks", "tokens")
    rejected_rows = _live_rows(files, "rejected")
    counts = {
        "documents": len(statuses),
        "kept": statuses.count(KEPT),
        "duplicate": statuses.count(DUPLICATE),
        "rejected": statuses.count(REJECTED),
        "chunks": len(tokens),
        "tokens": sum(tokens),
    }
    problems: list[str] = []
    unverified: list[str] = []
    metrics = reports_metrics(result)
    if metrics:
        # Zero where a counter is missing: no document (or no rejection) was counted.
        counts["read"] = (_metric(result, *READ_DOCUMENTS) or 0) + (_metric(result, *READ_REJECTED) or 0)
        if counts["read"] != counts["documents"]:
            problems.append(f"read {counts['read']} documents but accounted for {counts['documents']}")
    else:
        counts["read"] = counts["documents"]
        unverified.append(f"the {type(result).__name__} reported no metrics: 'read' is the documents "
                          "table's row count, not what the read stage counted")
    if counts["kept"] + counts["duplicate"] + counts["rejected"] != counts["documents"]:
        problems.append("documents table has rows with an unknown status")
    if rejected_rows != counts["rejected"]:
        problems.append(f"{rejected_rows} rejected rows but {counts['rejected']} rejected documents")
    if metrics:
        for counter in CARRY_COUNTERS:
            counts[counter.name] = _metric(result, *counter) or 0
        counts["documents_settled"] = _metric(result, *READ_SETTLED) or 0
        if job_carries:
            made = counts["documents_carried"] + counts["documents_recomputed"] + counts["documents_new"]
            if made != counts["kept"]:
                problems.append(f"{counts['kept']} documents kept but {made} carried, recomputed or new")
            if counts["documents_changed"] + counts["documents_redone"] != counts["documents_recomputed"]:
                problems.append("recomputed documents are not changed + redone")
    carried = counts.get(CHUNKS_CARRIED.name, 0)
    embedded = _metric(result, *CHUNKS_EMBEDDED)
    reused = _metric(result, *CHUNKS_REUSED)
    # A counter never incremented is not reported: zero, as long as the runner reports metrics.
    if embedding and metrics:
        embedded, reused = embedded or 0, reused or 0
        counts["embedded"], counts["reused"] = embedded, reused
        counts["tokens_embedded"] = _metric(result, *TOKENS_EMBEDDED) or 0
        counts["tokens_padded"] = _metric(result, *TOKENS_PADDED) or 0
        counts["reuse_rejected"] = _metric(result, *REUSE_REJECTED) or 0
        if embedded + reused + carried != counts["chunks"]:
            problems.append(f"{counts['chunks']} chunks written but {embedded} embedded + "
                            f"{reused} reused + {carried} carried")
    if files[CARRY_TABLE]:
        side_rows = _live_rows(files, CARRY_TABLE)
        if side_rows != counts["chunks"]:
            problems.append(f"{side_rows} carry sidecar rows but {counts['chunks']} chunks")
    if files[STATE_TABLE]:
        state_rows = _live_rows(files, STATE_TABLE)
        if state_rows != counts["kept"] + counts["duplicate"]:
            problems.append(f"{state_rows} state rows but {counts['kept'] + counts['duplicate']} "
                            "kept and duplicate documents")
    return counts, files, problems, unverified


def _remove_listings(run_dir: str, unneeded: Sequence[str] = ()) -> None:
    """The shard writers' listings, once the manifest holds what they list, and the shards'
    deletion files whose positions the manifest holds inline (``unneeded``, relative to OUTPUT:
    a file the manifest does not list is no part of the run)."""
    output = run_dir.rstrip("/").rsplit("/", 1)[0]
    try:
        found = FileSystems.match([FileSystems.join(run_dir, LISTING_DIR, "*.json")])[0].metadata_list
        paths = [m.path for m in found] + [FileSystems.join(output, *path.split("/")) for path in unneeded]
        if paths:
            FileSystems.delete(paths)
    except Exception as exc:  # noqa: BLE001 - a leftover listing is a few bytes no reader reads
        log.warning("could not remove %s/%s: %s", run_dir, LISTING_DIR, exc)


def _write_text(path: str, text: str) -> None:
    _write_bytes(path, text.encode("utf-8"))


def _write_bytes(path: str, data: bytes) -> None:
    with FileSystems.create(path) as handle:
        handle.write(data)


def _write_report(run_dir: str) -> str | None:
    """``report.html`` beside the manifest, before LATEST names the run; its path, or None when
    it failed. The index is complete without it, so a report that fails is a warning, and
    ``chunkline report`` rebuilds it."""
    from chunkline.pipeline.report import write_report

    try:
        return write_report(run_dir)
    except Exception as exc:  # noqa: BLE001 - never hold back a reconciled index for its report
        log.warning("run report not written (%s: %s); rebuild it with: chunkline report %s",
                    type(exc).__name__, exc, run_dir)
        return None


def publish_tables(output: str, manifest: Manifest, catalog: Any = None) -> None:
    """Make the run ``manifest`` describes current in the output's Iceberg tables
    (:mod:`chunkline.index.iceberg`), in ``catalog`` (a ``CatalogSpec``: a run's config's; None:
    the one the output records, as a rollback uses); a failure is a RuntimeError naming the
    output, on one line."""
    from chunkline.index import iceberg

    try:
        iceberg.publish_run(output, manifest, catalog=catalog)
    except Exception as exc:  # noqa: BLE001 - any failure of the commit leaves LATEST as it was
        raise RuntimeError(f"{output}: the Iceberg tables could not be committed "
                           f"({type(exc).__name__}: {' '.join(str(exc).split())}); LATEST unchanged") from exc


def catalog_spec(config: Config) -> Any:
    """The Iceberg catalog ``config`` names (``chunkline.index.iceberg.CatalogSpec``): its
    ``catalog`` section's, else the embedded default."""
    from chunkline.index.iceberg import EMBEDDED

    return EMBEDDED if config.catalog is None else config.catalog.spec()


def publish(output: str, run_id: str) -> None:
    """Point ``output/LATEST`` at ``run_id`` so that a reader (or a crash) sees the old name or
    the new one, never a torn file: an object store's write is atomic by itself; a local file is
    written beside and renamed over (Beam's local rename is ``os.rename``, atomic on POSIX)."""
    latest = FileSystems.join(output, LATEST)
    if "://" in output:
        _write_text(latest, run_id + "\n")
        return
    staged = FileSystems.join(output, f"{STAGED_LATEST}{run_id}")
    _write_text(staged, run_id + "\n")
    FileSystems.rename([staged], [latest])


def empty_caches(config: Config) -> None:
    """Remove the contextual headers and OCR pages cached under OUTPUT/_cache: they are keyed
    by content (a chunk's text, a page's image), so which entries a removed document made is
    not known; the purging run fills them again with what its documents ask for."""
    for folder in (context_cache_dir(config), ocr_cache_dir(config)):
        try:
            if "://" not in folder:
                shutil.rmtree(folder, ignore_errors=False)
            else:
                found = FileSystems.match([FileSystems.join(folder, "**")])[0].metadata_list
                if found:
                    FileSystems.delete([m.path for m in found])
        except FileNotFoundError:
            continue
        except Exception as exc:  # noqa: BLE001 - each filesystem raises its own
            raise RuntimeError(f"purge: could not empty {folder} ({type(exc).__name__}: {exc})") from None
        log.info("purge: emptied %s", folder)


def run(config: Config, beam_args: Sequence[str] = (), allow_shrink: bool = False,
        start_over: bool = False, purge: bool = False) -> RunSummary:
    """Run the job to completion under the output's lease; the manifest is written only after
    every shard exists, and LATEST switched only for a run that reconciles and passes the
    publish guard (:func:`shrink_guard`; ``allow_shrink`` overrides the guard, nothing else).
    ``purge``: the run erases what is no longer live (``pipeline/plan.py`` erases), and the
    caches under OUTPUT/_cache are emptied first (they are keyed by content, not by document)."""
    started = time.monotonic()
    # First: a runner that cannot start here (no Prism binary) is one line before any work.
    runner, options = job_runner(config.runner.name, list(config.runner.options) + list(beam_args))
    config = absolute_paths(config)  # the workers' working directory is not this process's
    run_id = new_run_id(config)
    preflight(config, run_id, start_over)
    with OutputLease(config.output.path, run_id, config.output.lease_timeout_s) as lease:
        return _run_leased(config, runner, options, allow_shrink, run_id, lease, started, purge)


def _run_leased(config: Config, runner: PipelineRunner | str, options: PipelineOptions, allow_shrink: bool,
                run_id: str, lease: OutputLease, started: float, purge: bool = False) -> RunSummary:
    job = plan(config, run_id, purge)
    if purge:
        empty_caches(config)
    try:
        if removed := remove_dead_spills(config.output.path):
            log.info("removed %d parts left by a run that died", removed)
    except Exception as exc:  # noqa: BLE001 - stale temporary files must not stop a run
        log.warning("could not remove the parts of a dead run: %s", exc)
    if config.runner.name in IN_PROCESS:
        _keep_arrow_pages()
    try:
        # Beam's state-and-timer search kept per DoFn class while this job is built and run
        # in this process (transforms/dofn_specs.py): Beam's own again after.
        with kept_dofn_specs():
            pipeline = beam.Pipeline(runner=runner, options=options)
            build(pipeline, config, job)
            log.info("running %s on %s into %s", run_id, config.runner.name, job.run_dir)
            with _fewer_collections(), _worker_malloc_arenas():
                result = pipeline.run()
                state = result.wait_until_finish()
    finally:
        # Each stage deletes its parts once read; a job that failed midway leaves the rest.
        try:
            remove_spill(job.run_dir)
        except Exception as exc:  # noqa: BLE001 - a cleanup failure must not hide the job's own
            log.warning("could not remove %s/_spill: %s", job.run_dir, exc)
    if state is not None and str(state).upper().endswith(("FAILED", "CANCELLED")):
        raise RuntimeError(f"run {run_id} ended {state}; {config.output.path}/LATEST unchanged")
    # What the job freed goes back before its tables are read again for the counts and the
    # report (transforms/memory.py): on the in-process runner that is this process's heap.
    release_freed_memory()
    found = run_tables(job.run_dir, table_names(config.sparse is not None), job.previous_run)
    counts, files, problems, unverified = account(job.run_dir, result, config.embed is not None,
                                                  config.sparse is not None, job.carry is not None, found)
    bm25 = None
    if config.sparse is not None:
        from chunkline.transforms.sparse import STATS_FILE

        stats = FileSystems.join(job.run_dir, STATS_FILE)
        with FileSystems.open(stats) as handle:
            bm25 = bm25_from(json.loads(handle.read()), where=stats)
        if bm25.chunks != counts["chunks"]:
            problems.append(f"BM25 statistics count {bm25.chunks} chunks, the shards {counts['chunks']}")
    boilerplate = None
    if config.boilerplate is not None:
        from chunkline.transforms.clean import BOILERPLATE_FILE

        with FileSystems.open(FileSystems.join(job.run_dir, BOILERPLATE_FILE)) as handle:
            boilerplate = {"top_removed": json.loads(handle.read()), **{
                name: _metric(result, "boilerplate", name) or 0
                for name in ("documents_changed", "chars_removed", "frequent_keys")}}
    credentials = _credentials(result, config.secrets.mode)
    # Pages OCR read, and pages a previous run's OCR lent through OUTPUT/_cache/ocr.
    ocr = {name: _metric(result, READ_DOCUMENTS.namespace, f"ocr_pages_{name}") or 0
           for name in ("read", "cached")}
    # Per-text results of the corpus-wide stages taken from the previous run (chunkline/memo.py).
    memo = {kind: {name: _metric(result, MEMO_NAMESPACE, f"{kind}_{name}") or 0
                   for name in ("recalled", "computed")}
            for kind in MEMO_KINDS} if job.memo is not None else None
    context: dict[str, Any] | None = None
    context_opts = job.options.context if job.options is not None else None  # set with config.context
    if context_opts is not None:
        counters = {name: _metric(result, CONTEXT_NAMESPACE, name) or 0 for name in CONTEXT_COUNTERS}
        context = {"counters": counters, "estimated_cost_usd": estimate_cost(counters, context_opts),
                   "summary": summary_lines(counters, context_opts)}
        if over_failure_budget(counters, context_opts):
            problems.append(f"context: {counters['chunks_failed']} chunks failed, over the failure "
                            f"budget of {context_opts.max_failures}")
    held_back = [] if problems else shrink_guard(counts, config.output.path, config.output.max_shrink,
                                                 _baseline(config))
    if allow_shrink and held_back:
        log.warning("publishing despite the guard (--allow-shrink): %s", "; ".join(held_back))
        held_back = []
    model = None
    if config.embed is not None:
        assert job.dim is not None, "the plan of a run that embeds knows its model's width"
        assert job.options is not None and job.options.embed is not None, "and its options"
        model = Model(name=redacted(config.embed.model), dim=job.dim, dtype=job.options.embed.dtype,
                      normalize=config.embed.normalize, max_seq_length=config.embed.max_seq_length,
                      vector_dtype=config.output.vector_dtype)
    # Each table's files relative to OUTPUT (chunkline.index.tables), an earlier run's among
    # them where this run keeps rows of it, with the positions no longer live: inline while few
    # (format 2), else in the deletion files its shard writers wrote, referenced by path
    # (format 4), never gathered here.
    listing = found.listing(job.run_dir, memo_table(config.output.path, job.run_dir, job.memo,
                                                    _segment_counts(result)) if job.memo is not None else None)
    manifest = Manifest(
        run_id=run_id,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        chunkline_version=chunkline.__version__,
        beam_version=beam.__version__,
        runner=config.runner.name,
        # Store URIs and base URLs may carry passwords or tokens: the manifest travels with the
        # index (to gs://, to every reader), so it records them masked.
        config=redacted_config(to_dict(config)),
        split=Split(tokenizer=job.tokenizer_spec, max_tokens=job.max_tokens,
                    overlap=config.split.overlap, markdown=config.split.markdown),
        model=model,
        embedding_signature=job.embedding_signature,
        carry_signature=job.carry.signature if job.carry is not None else None,
        previous=job.previous_run and redacted(job.previous_run),
        reuse_skipped=tuple(job.reuse_skipped),
        counts=counts,
        context=context and {k: v for k, v in context.items() if k != "summary"},
        embed_mode=config.embed.mode if config.embed is not None else None,
        bm25=bm25,
        boilerplate=boilerplate,
        credentials=credentials,
        ocr=ocr,
        memo=memo,
        # Present: the index is protected (readers refuse a caller who names no principal).
        access=access_from({
            **job.access.describe(),
            **{name: _metric(result, "access", name) or 0
               for name in ("documents_rejected", "documents_without_principals")}}) if job.access else None,
        wall_seconds=round(time.monotonic() - started, 3),
        stage_seconds=stage_seconds(result),
        reconciled=not problems,
        problems=tuple(problems),
        unverified=tuple(unverified),
        held_back=tuple(held_back),
        listing=listing,
    )
    publishable = not problems and not held_back
    if publishable:
        lease.check()  # a run whose lease was taken over never writes a manifest LATEST may name
    # Manifest last among the run's files, LATEST after it, and only for a run that accounts for
    # every document and passes the guard: otherwise LATEST stays on the previous good run.
    _write_text(FileSystems.join(job.run_dir, MANIFEST), to_json(manifest))
    _remove_listings(job.run_dir, found.unneeded)
    report = None
    if publishable:
        report = _write_report(job.run_dir)
        # The tables' Iceberg snapshots before LATEST: an engine reading the index through Iceberg
        # and chunkline's readers through LATEST see this run from the same moment on (a crash
        # between leaves Iceberg ahead, and the next run or `chunkline publish` aligns them).
        publish_tables(config.output.path, manifest, catalog_spec(config))
        publish(config.output.path, run_id)
    paths = {table: [FileSystems.join(config.output.path, *entry["path"].split("/"))
                     for entry in entries] for table, entries in files.items()}
    return RunSummary(run_id, job.run_dir, config.output.path, config.runner.name,
                      time.monotonic() - started, counts, paths, not problems, problems, model,
                      job.previous_run, publishable, context["summary"] if context else [],
                      held_back, list(job.reuse_skipped), report, bm25_lines(bm25, job.bm25_note),
                      job.carry_note, credential_lines(credentials, counts),
                      ocr_lines=ocr_lines(ocr), access_lines=access_lines(manifest.access),
                      unverified=unverified,
                      question=suggested_question(job.run_dir, manifest) if publishable else None)

