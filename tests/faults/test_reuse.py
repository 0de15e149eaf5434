"""Reuse is verified, never trusted: damaged vectors, shards and manifests of the previous run
are re-embedded or refused with the file named, never carried forward."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chunkline.pipeline.cli import main
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.helpers import run_rows

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "local.yaml")
pytestmark = pytest.mark.slow


def job(corpus: Path, output: Path, *overrides: str):
    # Carrying off: these are the checks of vectors reused by content key; carried rows have
    # their own (test_damaged_vectors_are_not_carried).
    return run(load_config(CONFIG, [f"input.pattern={corpus}/**", f"output.path={output}",
                                    "output.chunk_shards=2", "output.carry=false", *overrides]))


def assert_same_vector(run_dir: str, fresh: np.ndarray, original: np.ndarray) -> None:
    """Exact in float32; in bfloat16 a vector depends on what else shares its batch (padding
    and accumulation order), and a rerun embeds other batches: cosine >= 0.9995."""
    manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
    if json.loads(manifest["embedding_signature"])["dtype"] == "float32":
        np.testing.assert_allclose(fresh, original, atol=2e-5)
    else:
        cosine = float(fresh @ original / (np.linalg.norm(fresh) * np.linalg.norm(original)))
        assert cosine >= 0.9995, cosine


def vectors_by_key(run_dir: str) -> dict[str, np.ndarray]:
    rows = run_rows(run_dir, "chunks")
    return {r["content_key"]: np.asarray(r["embedding"], dtype=np.float32) for r in rows}


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    base = tmp_path_factory.mktemp("reuse")
    corpus = base / "corpus"
    corpus.mkdir()
    for i in range(8):
        (corpus / f"doc{i}.md").write_text(
            f"# Dock {i}\n\n" + " ".join(f"Charger {i} pairs with robot {j}." for j in range(40)) + "\n")
    output = base / "index"
    summary = job(corpus, output)
    assert summary.published and summary.counts["embedded"] == summary.counts["chunks"]
    return corpus, output, summary


def damaged_copy(first, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of the first index, its run directory and its first chunk shard."""
    corpus, output, summary = first
    copy = tmp_path / "index"
    shutil.copytree(output, copy)
    run_dir = copy / Path(summary.run_dir).name
    return copy, run_dir, sorted(run_dir.glob("chunks-*.parquet"))[0]


def rewrite_embeddings(shard: Path, make) -> int:
    table = pq.read_table(shard)
    vectors = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
    damaged = make(vectors)
    column = pa.array(list(damaged), type=pa.list_(pa.float32(), damaged.shape[1])) \
        if damaged.ndim == 2 else pa.array(damaged, type=pa.list_(pa.float32()))
    pq.write_table(table.set_column(table.schema.get_field_index("embedding"), "embedding",
                                    column.cast(table.schema.field("embedding").type)
                                    if damaged.ndim == 2 and damaged.shape[1] == vectors.shape[1]
                                    else column), shard)
    return table.num_rows


def test_nan_vectors_are_re_embedded_not_copied(first, tmp_path) -> None:
    corpus, _, summary = first
    copy, run_dir, shard = damaged_copy(first, tmp_path)
    damaged_rows = rewrite_embeddings(shard, lambda v: np.where(np.arange(v.shape[1]) == 0, np.nan, v))
    second = job(corpus, copy)
    assert second.published
    assert second.counts["reuse_rejected"] == damaged_rows > 0
    assert second.counts["embedded"] == damaged_rows
    assert second.counts["reused"] == summary.counts["chunks"] - damaged_rows
    fresh, original = vectors_by_key(second.run_dir), vectors_by_key(summary.run_dir)
    assert all(np.isfinite(v).all() for v in fresh.values())
    for key, vector in fresh.items():
        assert_same_vector(second.run_dir, vector, original[key])
    manifest = json.loads((Path(second.run_dir) / "manifest.json").read_text())
    assert manifest["counts"]["reuse_rejected"] == damaged_rows


def test_damaged_vectors_are_not_carried(first, tmp_path) -> None:
    """A document whose stored rows hold a NaN or a vector off the unit sphere is computed again
    (counted), its vectors re-embedded; the other documents are carried as they were."""
    corpus, _, summary = first
    copy, _, shard = damaged_copy(first, tmp_path)
    damaged_docs = len(set(pq.read_table(shard).column("doc_id").to_pylist()))
    damaged_rows = rewrite_embeddings(shard, lambda v: np.where(np.arange(v.shape[1]) == 0, np.nan, v))
    second = job(corpus, copy, "output.carry=true")
    assert second.published and second.counts["carry_rejected"] == damaged_docs > 0
    assert second.counts["documents_carried"] == summary.counts["kept"] - damaged_docs
    assert second.counts["embedded"] == damaged_rows
    assert second.counts["chunks_carried"] == summary.counts["chunks"] - damaged_rows
    fresh, original = vectors_by_key(second.run_dir), vectors_by_key(summary.run_dir)
    assert all(np.isfinite(v).all() for v in fresh.values())
    for key, vector in fresh.items():
        assert_same_vector(second.run_dir, vector, original[key])


def test_vectors_off_the_unit_sphere_are_re_embedded(first, tmp_path) -> None:
    corpus, _, _ = first
    copy, _, shard = damaged_copy(first, tmp_path)
    rows = rewrite_embeddings(shard, lambda v: v * 3.0)
    second = job(corpus, copy)
    assert second.counts["reuse_rejected"] == rows and second.counts["embedded"] == rows


def test_wrong_dimension_shard_is_skipped_by_name(first, tmp_path) -> None:
    corpus, _, summary = first
    copy, _, shard = damaged_copy(first, tmp_path)
    rows = rewrite_embeddings(shard, lambda v: v[:, :10])
    second = job(corpus, copy)
    assert second.published and second.counts["embedded"] == rows
    assert any(shard.name in reason for reason in second.reuse_skipped)
    assert all(v.shape == (384,) for v in vectors_by_key(second.run_dir).values())


def test_truncated_shard_is_named_and_its_chunks_re_embedded(first, tmp_path) -> None:
    corpus, _, summary = first
    copy, _, shard = damaged_copy(first, tmp_path)
    rows = pq.read_metadata(shard).num_rows
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", "--config", CONFIG, "--input", f"{corpus}/**", "--output", str(copy),
                 "--set", "output.chunk_shards=2"], out, err)
    assert code == 0, err.getvalue()
    assert shard.name in out.getvalue() and "unreadable" in out.getvalue()
    latest = json.loads((copy / (copy / "LATEST").read_text().strip() / "manifest.json").read_text())
    assert latest["counts"]["embedded"] == rows
    assert any(shard.name in reason for reason in latest["reuse_skipped"])


@pytest.mark.parametrize("content", ["[]", '{"run_id": "x"', "", '{"run_id": 5, "files": {}}'])
def test_malformed_previous_manifest_is_a_clear_error_naming_it(first, tmp_path, content) -> None:
    corpus, _, _ = first
    copy, run_dir, _ = damaged_copy(first, tmp_path)
    (run_dir / "manifest.json").write_text(content)
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", "--config", CONFIG, "--input", f"{corpus}/**", "--output", str(copy)],
                out, err)
    assert code == 2
    assert str(run_dir / "manifest.json") in err.getvalue() and "Traceback" not in err.getvalue()
    assert (copy / "LATEST").read_text().strip() == run_dir.name
    # The way out the message points to: reuse off.
    assert "reuse_latest=false" in err.getvalue()
