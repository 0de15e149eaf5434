"""Stored vectors as float16 or int8: the shards hold that type, the vectors keep their direction,
a rerun reuses them unchanged, a query ranks as with float32, and the dtype is part of the
embedding signature (no reuse across dtypes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chunkline.records import in_memory_schema

from chunkline.pipeline.config import load_config
from chunkline.pipeline.query import search
from chunkline.pipeline.run import run
from tests.helpers import run_rows
from tests.pipeline.test_reindex import write_corpus

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def job(corpus: Path, output: Path, dtype: str, *overrides: str):
    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", f"output.vector_dtype={dtype}",
        *overrides]))


def vectors(run_dir: str) -> dict[str, np.ndarray]:
    rows = run_rows(run_dir, "chunks")  # a rerun's rows may stay in an earlier run's files
    return {r["chunk_id"]: np.asarray(r["embedding"], np.float32) * np.float32(r.get("embedding_scale") or 1.0)
            for r in rows}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("dtype")
    corpus = base / "corpus"
    write_corpus(corpus, 20)
    return corpus, base, {dtype: job(corpus, base / dtype, dtype) for dtype in ("float32", "float16", "int8")}


@pytest.mark.parametrize("dtype, item, floor", [("float16", pa.float16(), 0.99999), ("int8", pa.int8(), 0.9997)])
def test_stored_type_and_direction(runs, dtype, item, floor) -> None:
    _, _, done = runs
    shard = sorted(Path(done[dtype].run_dir).glob("chunks-*.parquet"))[0]
    schema = pq.read_schema(shard)
    assert schema.field("embedding").type.value_type == item
    assert ("embedding_scale" in schema.names) == (dtype == "int8")
    full, small = vectors(done["float32"].run_dir), vectors(done[dtype].run_dir)
    assert full.keys() == small.keys()
    cosines = [float(full[k] @ small[k] / np.linalg.norm(small[k])) for k in full]
    assert min(cosines) >= floor


def test_rerun_reuses_quantized_vectors_unchanged(runs) -> None:
    corpus, base, done = runs
    before = vectors(done["int8"].run_dir)
    carried = job(corpus, base / "int8", "int8")
    assert carried.counts["embedded"] == 0 and carried.counts["chunks_carried"] == carried.counts["chunks"]
    assert all(np.array_equal(before[k], v) for k, v in vectors(carried.run_dir).items())
    again = job(corpus, base / "int8", "int8", "output.carry=false")
    assert again.counts["embedded"] == 0 and again.counts["reused"] == again.counts["chunks"]
    after = vectors(again.run_dir)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_dtype_is_part_of_the_signature(runs) -> None:
    corpus, base, done = runs
    switched = run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={base / 'switched'}",
        f"output.previous={done['float32'].run_dir}", "output.vector_dtype=int8"]))
    assert switched.counts["reused"] == 0 and switched.counts["embedded"] == switched.counts["chunks"]


def test_dense_query_ranks_alike(runs) -> None:
    _, base, _ = runs
    for question in ("battery dock charger", "robot arm calibration torque", "network latency alert"):
        top = search(str(base / "float32"), question, k=1, mode="dense")[0].chunk_id
        for dtype in ("float16", "int8"):
            assert search(str(base / dtype), question, k=1, mode="dense")[0].chunk_id == top


def test_embed_dims_truncate_warn_and_sign(runs, tmp_path, caplog) -> None:
    corpus, _, done = runs
    import logging

    with caplog.at_level(logging.WARNING, logger="chunkline.run"):
        small = run(load_config(ROOT / "configs" / "local.yaml", [
            f"input.pattern={corpus}/**", f"output.path={tmp_path / 'dims'}", "embed.dims=128",
            f"output.previous={done['float32'].run_dir}"]))
    assert any("embed.dims=128" in r.getMessage() and "Spearman" in r.getMessage() for r in caplog.records)
    # A different width is a different signature: nothing reused from the 384-d run.
    assert small.counts["reused"] == 0 and small.counts["embedded"] == small.counts["chunks"]
    schema = in_memory_schema(pq.read_schema(sorted(Path(small.run_dir).glob("chunks-*.parquet"))[0]))
    assert schema.field("embedding").type.list_size == 128
    full = vectors(done["float32"].run_dir)
    for chunk_id, vector in vectors(small.run_dir).items():
        head = full[chunk_id][:128]
        np.testing.assert_allclose(vector, head / np.linalg.norm(head), atol=1e-4)
    assert search(str(tmp_path / "dims"), "battery dock charger", k=1, mode="dense")


def test_the_dims_probe_is_measured_once_per_signature(runs, tmp_path, caplog) -> None:
    """The probe's result is kept beside the index under the embedding signature: the next
    run says it again without loading the model; a damaged entry is measured again."""
    import json
    import logging

    from chunkline.pipeline.plan import dims_probe_path, plan

    corpus, _, _ = runs
    config = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={tmp_path / 'dims'}", "embed.dims=128"])
    first = plan(config, "r1")
    path = Path(dims_probe_path(str(tmp_path / "dims"), first.embedding_signature))
    kept = json.loads(path.read_text())
    assert kept["signature"] == first.embedding_signature and 0.5 < kept["agreement"] < 1
    path.write_text(json.dumps({**kept, "agreement": 0.25}))  # proves the entry is what is read
    with caplog.at_level(logging.INFO, logger="chunkline.run"):
        plan(config, "r2")
    assert any("Spearman correlation of 0.250" in r.getMessage() for r in caplog.records)
    path.write_text("{not json")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="chunkline.run"):
        plan(config, "r3")
    assert any(f"Spearman correlation of {kept['agreement']:.3f}" in r.getMessage() for r in caplog.records)
    assert json.loads(path.read_text()) == kept
    other = plan(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={tmp_path / 'dims'}", "embed.dims=256"]), "r4")
    assert dims_probe_path(str(tmp_path / "dims"), other.embedding_signature) != str(path)


def test_embed_dims_with_late_chunking_is_refused(runs, tmp_path) -> None:
    corpus, _, _ = runs
    config = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={tmp_path / 'late'}", "embed.dims=128",
        "embed.mode=late"])
    with pytest.raises(ValueError, match="not supported with embed.mode: late"):
        run(config)
