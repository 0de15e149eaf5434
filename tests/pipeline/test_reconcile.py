"""The read count is always in the manifest, and a run whose runner reports no metrics says so
instead of calling itself reconciled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from apache_beam.runners.runner import PipelineResult, PipelineState

from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import account, reports_metrics, run
from chunkline.pipeline.summary import RunSummary, format_summary

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, files: dict[str, str]):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in files.items():
        (corpus / name).write_text(text, encoding="utf-8")
    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={tmp_path / 'out'}", "embed=null"]))


def test_a_run_without_rejections_still_counts_what_it_read(tmp_path) -> None:
    summary = _run(tmp_path, {"a.md": "# A\n\nThe dock charger.\n", "b.md": "# B\n\nThe lidar map.\n"})
    manifest = json.loads((Path(summary.run_dir) / "manifest.json").read_text())
    assert manifest["counts"]["read"] == 2 and manifest["counts"]["rejected"] == 0
    assert manifest["reconciled"] is True and manifest["unverified"] == []
    assert "read 2 = kept 2 + duplicate 0 + rejected 0  (reconciled)" in format_summary(summary)


def test_a_runner_without_metrics_reconciles_from_its_files_and_says_so(tmp_path) -> None:
    summary = _run(tmp_path, {"a.md": "# A\n\nThe dock charger.\n", "bad.jsonl": "{not json\n"})
    # Beam's own base result: what a runner that keeps no metrics returns (metrics() raises).
    silent = PipelineResult(PipelineState.DONE)
    assert not reports_metrics(silent)
    counts, files, problems, unverified = account(summary.run_dir, silent, embedding=False)
    assert counts["read"] == counts["documents"] == 2 and problems == []
    assert len(unverified) == 1 and "reported no metrics" in unverified[0]
    shown = format_summary(RunSummary(summary.run_id, summary.run_dir, summary.output, "X", 1.0, counts,
                                      files, True, unverified=unverified))
    assert "counts unverified: " in shown and "(reconciled)" not in shown
