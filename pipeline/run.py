"""Run the job: plan on the driver, run on the configured runner, then account for every
document and write the manifest (last) and LATEST."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from datetime import datetime, timezone
from typing import Any, Sequence

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

import chunkline
from chunkline.records import DUPLICATE, KEPT, REJECTED
from chunkline.context import COUNTERS as CONTEXT_COUNTERS
from chunkline.context import METRICS_NAMESPACE as CONTEXT_NAMESPACE
from chunkline.context import context_reserve, estimate_cost, over_failure_budget, resolve_api_key, summary_lines
from pipeline.build import Plan, build, context_options, embed_options
from pipeline.config import Config, to_dict
from pipeline.lease import OutputLease
from pipeline.manifest import ManifestError, latest_run, load_manifest, resolve_run, table_files
from transforms.counters import (
    CHUNKS_EMBEDDED, CHUNKS_REUSED, READ_DOCUMENTS, READ_REJECTED, REUSE_REJECTED, TOKENS_EMBEDDED,
)

log = logging.getLogger("chunkline.run")


@dataclass
class RunSummary:
    run_id: str
    run_dir: str
    output: str
    runner: str
    seconds: float
    counts: dict[str, int]
    files: dict[str, list[str]]
    reconciled: bool
    problems: list[str] = field(default_factory=list)
    model: dict[str, Any] | None = None
    previous: str | None = None
    published: bool = False
    context_lines: list[str] = field(default_factory=list)
    held_back: list[str] = field(default_factory=list)  # why a reconciled run was not published
    reuse_skipped: list[str] = field(default_factory=list)  # previous shards not trusted, why


class PreflightError(ValueError):
    """The config cannot run here; found on the driver before the job starts."""


def _fingerprint(model_dir: Path) -> str:
    """Which weights: file names and sizes of the model directory (cheap, and a replaced model
    under the same name changes it)."""
    listing = sorted((str(p.relative_to(model_dir)), p.stat().st_size)
                     for p in model_dir.rglob("*") if p.is_file())
    return hashlib.sha256(repr(listing).encode()).hexdigest()[:16]


def embedding_signature(config: Config, model_dir: Path, max_seq_length: int) -> str:
    """Everything besides the text that decides a vector; part of every chunk's content key."""
    if config.embed is None:
        return "none"
    e = config.embed
    signature = {"model": e.model, "weights": _fingerprint(model_dir), "dtype": e.dtype,
                 "normalize": e.normalize, "max_seq_length": max_seq_length, "mode": e.mode}
    if e.mode == "late":
        signature.update(late_window=e.late_window, late_stride=e.late_stride)
    return json.dumps(signature, sort_keys=True)


def previous_run(config: Config) -> str | None:
    """The run directory whose vectors may be reused: ``output.previous`` (an output root or a run
    directory; naming nothing is an error), else this output's LATEST run when ``reuse_latest``
    is on; None for a first run or with reuse off."""
    if config.embed is None:
        return None
    if config.output.previous:
        run_dir = resolve_run(config.output.previous)
        if run_dir is None:
            raise ManifestError(f"--previous / output.previous {config.output.previous}: no "
                                f"manifest.json there and no LATEST naming a run")
        return run_dir
    return latest_run(config.output.path) if config.output.reuse_latest else None


def reusable_files(run_dir: str, signature: str, dim: int) -> tuple[list[str], list[str]]:
    """(chunk shards of ``run_dir`` whose vectors may be reused, why others are not).

    The manifest is validated (ManifestError naming it when malformed); a run made with another
    model or settings has nothing to reuse; a shard whose footer cannot be read or whose schema
    has no content keys or vectors of ``dim`` is left out, named, and its chunks re-embedded.
    Every vector read is checked again in the job (``transforms/reuse.py``)."""
    manifest = load_manifest(run_dir)
    if not manifest.get("model") or not manifest["files"]["chunks"]:
        return [], []
    if manifest.get("embedding_signature") != signature:
        log.info("%s was embedded with other model settings: embedding everything", run_dir)
        return [], []
    if manifest["model"]["dim"] != dim:
        return [], [f"{run_dir}: manifest says {manifest['model']['dim']}-d vectors, the model "
                    f"gives {dim}-d: nothing reused"]
    usable, skipped = [], []
    for path in table_files(run_dir, manifest, "chunks"):
        try:
            with FileSystems.open(path) as handle:
                schema = pq.read_schema(handle)
        except Exception as exc:  # noqa: BLE001 - missing, truncated or not Parquet: all the same here
            skipped.append(f"{path}: unreadable ({type(exc).__name__}: {exc}); its chunks are re-embedded")
            continue
        vector = schema.field("embedding").type if "embedding" in schema.names else None
        if "content_key" not in schema.names or vector is None:
            skipped.append(f"{path}: no content_key or embedding column; its chunks are re-embedded")
        elif getattr(vector, "list_size", dim) != dim:
            skipped.append(f"{path}: {vector} vectors, not {dim}-d; its chunks are re-embedded")
        else:
            usable.append(path)
    for reason in skipped:
        log.warning("reuse: %s", reason)
    return usable, skipped


def check_device(device: str) -> None:
    """A device this machine has, or PreflightError (torch is imported only for a non-CPU one)."""
    if device == "cpu":
        return
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError as exc:
        raise PreflightError(f"embed.device {device!r} is not a torch device: {exc}") from None
    available = {"cpu": lambda: True, "cuda": torch.cuda.is_available,
                 "mps": lambda: torch.backends.mps.is_available()}.get(parsed.type)
    if available is None or not available():
        raise PreflightError(f"embed.device {device!r}: no {parsed.type} device on this machine")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise PreflightError(f"embed.device {device!r}: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")


def check_output_writable(output: str, run_id: str) -> None:
    """Write and delete a small probe file, so a read-only or unreachable output fails now,
    not after the whole job has run."""
    probe = FileSystems.join(output, f".probe-{run_id}")
    try:
        _write_text(probe, "chunkline write probe\n")
        FileSystems.delete([probe])
    except Exception as exc:  # noqa: BLE001 - each filesystem raises its own errors
        raise PreflightError(f"output.path {output} is not writable: {exc}") from None


def check_input(pattern: str) -> None:
    """At least one file matches (one is enough to ask for: a corpus of millions is not listed
    twice)."""
    try:
        matched = FileSystems.match([pattern], limits=[1])[0].metadata_list
    except Exception as exc:  # noqa: BLE001 - a bad bucket, no permission: all say the same here
        raise PreflightError(f"input.pattern {pattern}: cannot list it: {exc}") from None
    if not matched:
        raise PreflightError(f"input.pattern {pattern} matches no file (a typo, or a disk that is "
                             f"not mounted?); nothing was run and LATEST is unchanged")


def check_output_apart(pattern: str, output: str) -> None:
    """The output may sit inside the corpus (it is never read back), but the corpus may not sit
    inside the output: every input would be excluded and the run would read nothing."""
    from chunkline.readers import input_root

    root = input_root(pattern)
    if "://" in root or "://" in output:
        if root.rstrip("/") == output.rstrip("/") or root.startswith(output.rstrip("/") + "/"):
            raise PreflightError(f"input.pattern {pattern} lies inside output.path {output}")
        return
    real_root, real_output = Path(root or ".").resolve(), Path(output).resolve()
    if real_root == real_output or real_output in real_root.parents:
        raise PreflightError(f"input.pattern {pattern} lies inside output.path {output}: every "
                             f"input would be skipped as output")


def preflight(config: Config, run_id: str) -> None:
    """Everything that can fail before the job, checked before it: the input matches files, the
    tokenizer spec loads, the device exists, the output is writable. (The model and the budget
    are checked by :func:`plan`.)"""
    from chunkline import TokenizerNotAvailable, get_tokenizer
    from transforms.model_cache import local_tokenizer_spec

    check_input(config.input.pattern)
    check_output_apart(config.input.pattern, config.output.path)
    if config.split.tokenizer is not None:
        try:
            get_tokenizer(local_tokenizer_spec(config.split.tokenizer))
        except (ValueError, TokenizerNotAvailable, OSError) as exc:
            raise PreflightError(f"split.tokenizer {config.split.tokenizer!r}: {exc}") from None
    if config.embed is not None:
        check_device(config.embed.device)
    check_output_writable(config.output.path, run_id)


def plan(config: Config, run_id: str) -> Plan:
    """Decide the split tokenizer and budget from the embedder, on the driver, before the job:
    budget = model max input - its special tokens - the heading reserve."""
    from chunkline.embedder import EmbedOptions, model_info, resolve_model_dir
    from transforms.model_cache import local_model_dir

    options = embed_options(config) or EmbedOptions()  # embed: null still budgets for the model
    local = dataclasses.replace(options, model=local_model_dir(options.model))
    _, dim, max_seq_length, special = model_info(local)
    # A packaged name stays a name, so each worker resolves it in its own site-packages; a gs://
    # model stays a URI, fetched by each worker (transforms/model_cache.py).
    tokenizer_spec = config.split.tokenizer or f"hf:{options.model}"
    # The same budget with embed: null, so a dry run shows exactly the chunks that would be
    # embedded.
    # Late chunking embeds the document itself, not prefix + chunk: nothing to reserve for.
    late = config.embed is not None and config.embed.mode == "late"
    reserve = 0 if late else config.split.heading_reserve + context_reserve(context_options(config))
    max_tokens = config.split.max_tokens or (max_seq_length - special - reserve)
    if config.split.max_tokens is None and max_tokens < 8:
        raise ValueError(
            f"derived chunk budget is {max_tokens} tokens (max_seq_length {max_seq_length} - "
            f"{special} special - {reserve} reserved for the heading path and context header); "
            f"lower split.heading_reserve or context.max_header_tokens"
        )
    if config.split.max_tokens is not None and config.embed is not None and \
            config.split.max_tokens + reserve > max_seq_length - special:
        raise ValueError(
            f"split.max_tokens {config.split.max_tokens} + {reserve} reserved for the heading path "
            f"and context header exceeds the model's input ({max_seq_length} - {special} special "
            f"tokens): embedded text would be truncated")
    if config.context is not None:
        resolve_api_key(context_options(config))  # a missing key fails here, not on every worker
    if config.split.overlap >= max_tokens:
        raise ValueError(f"split.overlap ({config.split.overlap}) must be below the chunk budget ({max_tokens})")
    run_dir = FileSystems.join(config.output.path, run_id)
    signature = embedding_signature(config, resolve_model_dir(local.model), max_seq_length)
    try:
        previous = previous_run(config)
        files, skipped = reusable_files(previous, signature, dim) if previous else ([], [])
    except ManifestError as exc:
        raise ManifestError(f"{exc}\n  the previous run's vectors cannot be trusted: pass "
                            f"--set output.reuse_latest=false (or --previous another run) to "
                            f"embed everything, and --allow-shrink if it is the published run "
                            f"(the publish guard cannot compare with it either)") from None
    return Plan(run_dir, tokenizer_spec, max_tokens, dim if config.embed is not None else None,
                signature, previous, tuple(files), tuple(skipped),
                config.embed.normalize if config.embed is not None else False)


def new_run_id(config: Config) -> str:
    """Time, config digest, and a random part: two runs started in the same second with the same
    config still get different directories."""
    digest = hashlib.sha256(json.dumps(to_dict(config), sort_keys=True).encode()).hexdigest()[:8]
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}Z-{digest}-{secrets.token_hex(3)}"


def shrink_guard(counts: dict[str, int], output: str, max_shrink: float) -> list[str]:
    """Why this run must not replace the run LATEST names: no document kept, or kept documents
    or chunks fell by more than ``max_shrink`` (an unmounted disk or a bad pattern looks like a
    corpus that emptied overnight)."""
    reasons = []
    if counts.get("kept", 0) == 0:
        reasons.append(f"no document kept ({counts.get('documents', 0)} read)")
    try:
        previous = latest_run(output)
        before = load_manifest(previous)["counts"] if previous else None
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


def _runner(config: Config):
    if config.runner.name == "FnApiRunner":
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        return FnApiRunner()
    return config.runner.name


def _files(run_dir: str, table: str) -> list[str]:
    pattern = FileSystems.join(run_dir, f"{table}-*.parquet")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def _read_column(path: str, column: str) -> list[Any]:
    with FileSystems.open(path) as handle:
        return pq.read_table(handle, columns=[column]).column(column).to_pylist()


def _metric(result, namespace: str, name: str) -> int | None:
    try:
        found = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(namespace).with_name(name))
    except Exception:  # noqa: BLE001 - some runners do not report metrics; counts then come from files
        return None
    values = [c.committed if c.committed is not None else c.attempted for c in found["counters"]]
    return sum(values) if values else None


def account(run_dir: str, result, embedding: bool = True) -> tuple[dict[str, int], dict[str, list[str]], list[str]]:
    """Counts from the files actually written (and the read stage's counters): documents in =
    kept + duplicate + rejected, checked."""
    files = {table: _files(run_dir, table) for table in ("chunks", "documents", "rejected")}
    statuses = [s for path in files["documents"] for s in _read_column(path, "status")]
    tokens = [t for path in files["chunks"] for t in _read_column(path, "tokens")]
    rejected_rows = sum(pq.ParquetFile(FileSystems.open(p)).metadata.num_rows for p in files["rejected"])
    counts = {
        "documents": len(statuses),
        "kept": statuses.count(KEPT),
        "duplicate": statuses.count(DUPLICATE),
        "rejected": statuses.count(REJECTED),
        "chunks": len(tokens),
        "tokens": sum(tokens),
    }
    problems = []
    read_docs = _metric(result, *READ_DOCUMENTS)
    read_rejected = _metric(result, *READ_REJECTED)
    if read_docs is not None and read_rejected is not None:
        counts["read"] = read_docs + read_rejected
        if counts["read"] != counts["documents"]:
            problems.append(f"read {counts['read']} documents but accounted for {counts['documents']}")
    if counts["kept"] + counts["duplicate"] + counts["rejected"] != counts["documents"]:
        problems.append("documents table has rows with an unknown status")
    if rejected_rows != counts["rejected"]:
        problems.append(f"{rejected_rows} rejected rows but {counts['rejected']} rejected documents")
    embedded = _metric(result, *CHUNKS_EMBEDDED)
    reused = _metric(result, *CHUNKS_REUSED)
    # A counter never incremented is not reported: zero, as long as the runner reports metrics.
    if embedding and read_docs is not None:
        embedded, reused = embedded or 0, reused or 0
        counts["embedded"], counts["reused"] = embedded, reused
        counts["tokens_embedded"] = _metric(result, *TOKENS_EMBEDDED) or 0
        counts["reuse_rejected"] = _metric(result, *REUSE_REJECTED) or 0
        if embedded + reused != counts["chunks"]:
            problems.append(f"{counts['chunks']} chunks written but {embedded} embedded + {reused} reused")
    return counts, files, problems


def _write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(text.encode("utf-8"))


def publish(output: str, run_id: str) -> None:
    """Point ``output/LATEST`` at ``run_id`` so that a reader (or a crash) sees the old name or
    the new one, never a torn file: an object store's write is atomic by itself; a local file is
    written beside and renamed over (Beam's local rename is ``os.rename``, atomic on POSIX)."""
    latest = FileSystems.join(output, "LATEST")
    if "://" in output:
        _write_text(latest, run_id + "\n")
        return
    staged = FileSystems.join(output, f".LATEST.{run_id}")
    _write_text(staged, run_id + "\n")
    FileSystems.rename([staged], [latest])


def run(config: Config, beam_args: Sequence[str] = (), allow_shrink: bool = False) -> RunSummary:
    """Run the job to completion under the output's lease; the manifest is written only after
    every shard exists, and LATEST switched only for a run that reconciles and passes the
    publish guard (:func:`shrink_guard`; ``allow_shrink`` overrides the guard, nothing else)."""
    started = time.monotonic()
    run_id = new_run_id(config)
    preflight(config, run_id)
    with OutputLease(config.output.path, run_id, config.output.lease_timeout_s) as lease:
        return _run_leased(config, beam_args, allow_shrink, run_id, lease, started)


def _run_leased(config: Config, beam_args: Sequence[str], allow_shrink: bool, run_id: str,
                lease: OutputLease, started: float) -> RunSummary:
    job = plan(config, run_id)
    options = PipelineOptions(list(config.runner.options) + list(beam_args))
    pipeline = beam.Pipeline(runner=_runner(config), options=options)
    build(pipeline, config, job)
    log.info("running %s on %s into %s", run_id, config.runner.name, job.run_dir)
    result = pipeline.run()
    state = result.wait_until_finish()
    if state is not None and str(state).upper().endswith(("FAILED", "CANCELLED")):
        raise RuntimeError(f"run {run_id} ended {state}; {config.output.path}/LATEST unchanged")
    counts, files, problems = account(job.run_dir, result, config.embed is not None)
    context = None
    if config.context is not None:
        counters = {name: _metric(result, CONTEXT_NAMESPACE, name) or 0 for name in CONTEXT_COUNTERS}
        context_opts = context_options(config)
        context = {"counters": counters, "estimated_cost_usd": estimate_cost(counters, context_opts),
                   "summary": summary_lines(counters, context_opts)}
        if over_failure_budget(counters, context_opts):
            problems.append(f"context: {counters['chunks_failed']} chunks failed, over the failure "
                            f"budget of {context_opts.max_failures}")
    held_back = [] if problems else shrink_guard(counts, config.output.path, config.output.max_shrink)
    if allow_shrink and held_back:
        log.warning("publishing despite the guard (--allow-shrink): %s", "; ".join(held_back))
        held_back = []
    model = None
    if config.embed is not None:
        model = {"name": config.embed.model, "dim": job.dim, "dtype": config.embed.dtype,
                 "normalize": config.embed.normalize, "max_seq_length": config.embed.max_seq_length}
    manifest = {
        "run_id": run_id,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "chunkline_version": getattr(chunkline, "__version__", "0.1.0"),
        "beam_version": beam.__version__,
        "runner": config.runner.name,
        "config": to_dict(config),
        "split": {"tokenizer": job.tokenizer_spec, "max_tokens": job.max_tokens,
                  "overlap": config.split.overlap, "markdown": config.split.markdown},
        "model": model,
        "embedding_signature": job.embedding_signature,
        "previous": job.previous_run,
        "reuse_skipped": list(job.reuse_skipped),
        "counts": counts,
        "context": context and {k: v for k, v in context.items() if k != "summary"},
        "embed_mode": config.embed.mode if config.embed is not None else None,
        "reconciled": not problems,
        "problems": problems,
        "held_back": held_back,
        "files": {table: [p.rsplit("/", 1)[-1] for p in paths] for table, paths in files.items()},
    }
    publishable = not problems and not held_back
    if publishable:
        lease.check()  # a run whose lease was taken over never writes a manifest LATEST may name
    # Manifest last among the run's files, LATEST after it, and only for a run that accounts for
    # every document and passes the guard: otherwise LATEST stays on the previous good run.
    _write_text(FileSystems.join(job.run_dir, "manifest.json"), json.dumps(manifest, indent=2) + "\n")
    if publishable:
        publish(config.output.path, run_id)
    return RunSummary(run_id, job.run_dir, config.output.path, config.runner.name,
                      time.monotonic() - started, counts, files, not problems, problems, model,
                      job.previous_run, publishable, context["summary"] if context else [],
                      held_back, list(job.reuse_skipped))


def format_summary(summary: RunSummary) -> str:
    c = summary.counts
    check = "reconciled" if summary.reconciled else "NOT RECONCILED: " + "; ".join(summary.problems)
    if summary.model:
        embedded = (f"{c['tokens']:,} tokens ({summary.model['name']}, "
                    f"{summary.model['dim']}-d, {summary.model['dtype']})")
        if "embedded" in c:
            source = f" from {summary.previous}" if summary.previous else ""
            embedded += f"; vectors: {c['embedded']:,} embedded, {c['reused']:,} reused{source}"
            if c.get("reuse_rejected"):
                embedded += f" ({c['reuse_rejected']:,} stored vectors failed their check: re-embedded)"
    else:
        embedded = f"{c['tokens']:,} tokens (embedding off)"
    lines = [
        f"chunkline run {summary.run_id} on {summary.runner}: {summary.seconds:.1f} s",
        f"  documents  read {c['documents']} = kept {c['kept']} + duplicate {c['duplicate']} "
        f"+ rejected {c['rejected']}  ({check})",
        f"  chunks     {c['chunks']:,}, {embedded}",
        *summary.context_lines,
        f"  shards     {len(summary.files['chunks'])} chunk, {len(summary.files['documents'])} "
        f"document, {len(summary.files['rejected'])} rejected Parquet files + manifest.json",
        *(f"  reuse      skipped {reason}" for reason in summary.reuse_skipped),
        f"  output     {summary.run_dir}  " + (
            f"(named in {summary.output}/LATEST)" if summary.published
            else f"(NOT published: {summary.output}/LATEST still names the previous run)"),
        *(f"  held back  {reason}" for reason in summary.held_back),
    ]
    if summary.held_back:
        lines.append("             check the input; if the corpus really shrank, rerun with "
                     "--allow-shrink to publish anyway")
    if summary.model:
        lines.append(f'  next       chunkline query {summary.output} "how long should the arm warm up before calibration?"')
    return "\n".join(lines)
