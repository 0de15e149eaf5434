"""Which reference mean length a run's BM25 weights carry on (``chunkline.pipeline.plan.bm25_reference``),
read from the published run's manifest, and how a query weighs an index of either kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chunkline.index.manifest_types import Manifest, parse
from chunkline.pipeline.config import load_config
from chunkline.pipeline.manifest import ManifestError, load_manifest
from chunkline.pipeline.plan import bm25_reference
from chunkline.pipeline.query import idf_of

ROOT = Path(__file__).resolve().parents[2]


def publish(output: Path, bm25: object, run_id: str = "20260101T000000Z-aaaaaaaa-000000") -> Path:
    run_dir = output / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({
        "run_id": run_id, "files": {"chunks": [], "documents": [], "rejected": [], "terms": []},
        "counts": {"documents": 1, "kept": 1, "chunks": 1}, "config": {}, "bm25": bm25}))
    (output / "LATEST").write_text(run_id + "\n")
    return run_dir


def stats(**changes: object) -> dict:
    return {"chunks": 10, "avgdl": 41.0, "weights": "tf", "reference_avgdl": 40.0,
            "stemmer": "english", "stop_words": "english", **changes}


def config(output: Path, *overrides: str):
    return load_config(ROOT / "configs" / "local.yaml", [f"output.path={output}", *overrides])


def test_a_first_run_starts_from_its_own_mean(tmp_path) -> None:
    assert bm25_reference(config(tmp_path / "out")) == (None, None)


def test_the_published_runs_reference_is_carried(tmp_path) -> None:
    publish(tmp_path / "out", stats())
    assert bm25_reference(config(tmp_path / "out")) == (40.0, None)
    # k1 and b may change (every row changes anyway); the reference is a length, theirs alike.
    assert bm25_reference(config(tmp_path / "out", "sparse.k1=1.2", "sparse.b=0.5")) == (40.0, None)


def test_output_previous_names_the_run_to_carry_from(tmp_path) -> None:
    publish(tmp_path / "other", stats(reference_avgdl=12.5))
    publish(tmp_path / "out", stats())
    assert bm25_reference(config(tmp_path / "out", f"output.previous={tmp_path / 'other'}")) == (12.5, None)


def test_an_index_whose_weights_hold_idf_is_rebased_and_says_so(tmp_path) -> None:
    publish(tmp_path / "out", {k: v for k, v in stats().items() if k not in ("weights", "reference_avgdl")})
    reference, note = bm25_reference(config(tmp_path / "out"))
    assert reference is None and "re-based" in note and "older chunkline" in note


@pytest.mark.parametrize("override", ["sparse.stemmer=null", "sparse.stop_words=null"])
def test_other_analysis_counts_other_lengths_so_it_rebases(tmp_path, override: str) -> None:
    publish(tmp_path / "out", stats())
    reference, note = bm25_reference(config(tmp_path / "out", override))
    assert reference is None and "analysis changed" in note


def test_no_sparse_vectors_no_reference(tmp_path) -> None:
    publish(tmp_path / "out", stats())
    assert bm25_reference(config(tmp_path / "out", "sparse=null")) == (None, None)
    publish(tmp_path / "bare", None)
    assert bm25_reference(config(tmp_path / "bare")) == (None, None)


@pytest.mark.parametrize("bad", [{"chunks": "ten"}, {"chunks": 10, "reference_avgdl": "forty"},
                                 {"chunks": 10, "reference_avgdl": -1.0}, ["not", "an", "object"]])
def test_a_damaged_bm25_section_is_a_manifest_error_not_a_crash(tmp_path, bad: object) -> None:
    run_dir = publish(tmp_path / "out", bad)
    with pytest.raises(ManifestError, match="bm25"):
        load_manifest(str(run_dir))
    assert bm25_reference(config(tmp_path / "out")) == (None, None)  # reuse says what is wrong


def test_bm25_statistics_without_a_terms_table_are_a_manifest_error(tmp_path) -> None:
    run_dir = publish(tmp_path / "out", stats())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    del manifest["files"]["terms"]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="files.terms"):
        load_manifest(str(run_dir))


def test_a_query_weighs_terms_by_idf_only_where_the_weights_lack_it() -> None:
    def with_bm25(bm25: dict) -> Manifest:
        return parse({"run_id": "r", "counts": {"documents": 1, "kept": 1, "chunks": 1}, "config": {},
                      "files": {"terms": []}, "bm25": bm25}, where="manifest.json")

    assert idf_of("unused", with_bm25({"chunks": 3}), [5, 7]) == [1.0, 1.0]  # IDF inside already
    assert idf_of("unused", with_bm25(stats()), []) == []
