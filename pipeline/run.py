"""Run the job: plan on the driver, run on the configured runner, then account for every
document and write the manifest (last) and LATEST."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

import chunkline
from chunkline.records import DUPLICATE, KEPT, REJECTED
from pipeline.build import Plan, build, embed_options
from pipeline.config import Config, to_dict

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


def plan(config: Config, run_id: str) -> Plan:
    """Decide the split tokenizer and budget from the embedder, on the driver, before the job:
    budget = model max input - its special tokens - the heading reserve."""
    from chunkline.embedder import EmbedOptions, model_info, resolve_model_dir

    options = embed_options(config) or EmbedOptions()  # embed: null still budgets for the model
    _, dim, max_seq_length, special = model_info(options)
    tokenizer_spec = config.split.tokenizer or f"hf:{resolve_model_dir(options.model)}"
    # The same budget with embed: null, so a dry run shows exactly the chunks that would be
    # embedded.
    reserve = config.split.heading_reserve
    max_tokens = config.split.max_tokens or (max_seq_length - special - reserve)
    if config.split.max_tokens is None and max_tokens < 8:
        raise ValueError(
            f"derived chunk budget is {max_tokens} tokens (max_seq_length {max_seq_length} - "
            f"{special} special - heading_reserve {reserve}); lower split.heading_reserve"
        )
    if config.split.overlap >= max_tokens:
        raise ValueError(f"split.overlap ({config.split.overlap}) must be below the chunk budget ({max_tokens})")
    run_dir = FileSystems.join(config.output.path, run_id)
    return Plan(run_dir, tokenizer_spec, max_tokens, dim if config.embed is not None else None)


def new_run_id(config: Config) -> str:
    digest = hashlib.sha256(json.dumps(to_dict(config), sort_keys=True).encode()).hexdigest()[:8]
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}Z-{digest}"


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


def account(run_dir: str, result) -> tuple[dict[str, int], dict[str, list[str]], list[str]]:
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
    read_docs = _metric(result, "read", "documents")
    read_rejected = _metric(result, "read", "rejected")
    if read_docs is not None and read_rejected is not None:
        counts["read"] = read_docs + read_rejected
        if counts["read"] != counts["documents"]:
            problems.append(f"read {counts['read']} documents but accounted for {counts['documents']}")
    if counts["kept"] + counts["duplicate"] + counts["rejected"] != counts["documents"]:
        problems.append("documents table has rows with an unknown status")
    if rejected_rows != counts["rejected"]:
        problems.append(f"{rejected_rows} rejected rows but {counts['rejected']} rejected documents")
    return counts, files, problems


def _write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(text.encode("utf-8"))


def run(config: Config, beam_args: Sequence[str] = ()) -> RunSummary:
    """Run the job to completion; the manifest is written only after every shard exists."""
    started = time.monotonic()
    run_id = new_run_id(config)
    job = plan(config, run_id)
    options = PipelineOptions(list(config.runner.options) + list(beam_args))
    pipeline = beam.Pipeline(runner=_runner(config), options=options)
    build(pipeline, config, job)
    log.info("running %s on %s into %s", run_id, config.runner.name, job.run_dir)
    result = pipeline.run()
    result.wait_until_finish()
    counts, files, problems = account(job.run_dir, result)
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
        "counts": counts,
        "reconciled": not problems,
        "problems": problems,
        "files": {table: [p.rsplit("/", 1)[-1] for p in paths] for table, paths in files.items()},
    }
    _write_text(FileSystems.join(job.run_dir, "manifest.json"), json.dumps(manifest, indent=2) + "\n")
    _write_text(FileSystems.join(config.output.path, "LATEST"), run_id + "\n")
    return RunSummary(run_id, job.run_dir, config.output.path, config.runner.name,
                      time.monotonic() - started, counts, files, not problems, problems, model)


def format_summary(summary: RunSummary) -> str:
    c = summary.counts
    check = "reconciled" if summary.reconciled else "NOT RECONCILED: " + "; ".join(summary.problems)
    if summary.model:
        embedded = (f"{c['tokens']:,} tokens embedded ({summary.model['name']}, "
                    f"{summary.model['dim']}-d, {summary.model['dtype']})")
    else:
        embedded = f"{c['tokens']:,} tokens (embedding off)"
    lines = [
        f"chunkline run {summary.run_id} on {summary.runner}: {summary.seconds:.1f} s",
        f"  documents  read {c['documents']} = kept {c['kept']} + duplicate {c['duplicate']} "
        f"+ rejected {c['rejected']}  ({check})",
        f"  chunks     {c['chunks']:,}, {embedded}",
        f"  shards     {len(summary.files['chunks'])} chunk, {len(summary.files['documents'])} "
        f"document, {len(summary.files['rejected'])} rejected Parquet files + manifest.json",
        f"  output     {summary.run_dir}  (named in {summary.output}/LATEST)",
    ]
    if summary.model:
        lines.append(f'  next       chunkline query {summary.output} "how long should the arm warm up before calibration?"')
    return "\n".join(lines)
