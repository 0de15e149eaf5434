"""gs:// end to end against a local GCS emulator: corpus, model and index all in a bucket."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems

from chunkline.embedder import resolve_model_dir
from chunkline.pipeline.config import load_config
from chunkline.pipeline.query import search
from chunkline.pipeline.run import run
from tests.gcs_emulator import storage_emulator, upload_tree

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "chunkline-test"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bucket():
    with storage_emulator(BUCKET):
        upload_tree(ROOT / "examples" / "corpus", f"gs://{BUCKET}/corpus")
        upload_tree(resolve_model_dir("all-MiniLM-L6-v2"), f"gs://{BUCKET}/models/minilm")
        yield f"gs://{BUCKET}"


def test_credentials_lookup_is_answered_up_front(bucket) -> None:
    # Without the answer Beam would probe for Google credentials (~20 s) before going anonymous.
    started = time.monotonic()
    assert FileSystems.exists(f"{bucket}/corpus/manuals/arm-calibration.md")
    assert not FileSystems.exists(f"{bucket}/corpus/no-such-file.md")
    assert time.monotonic() - started < 5


def test_index_written_to_gcs_and_queried_back(bucket, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CHUNKLINE_MODEL_CACHE", str(tmp_path / "models"))
    config = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={bucket}/corpus/**",
        f"output.path={bucket}/index",
        f"embed.model={bucket}/models/minilm",
    ])
    summary = run(config)
    assert summary.reconciled and summary.published
    # examples/corpus: one exact and one near duplicate, one malformed JSONL line.
    assert (summary.counts["documents"], summary.counts["kept"], summary.counts["duplicate"]) == (74, 71, 2)

    with FileSystems.open(f"{bucket}/index/LATEST") as handle:
        assert handle.read().decode().strip() == summary.run_id
    chunk_files = FileSystems.match([f"{summary.run_dir}/chunks-*.parquet"])[0].metadata_list
    assert len(chunk_files) == 4
    rows = 0
    for meta in chunk_files:
        with FileSystems.open(meta.path) as handle:
            table = pq.read_table(handle)
        rows += table.num_rows
        # Offsets are relative to the document text, wherever the document was read from.
        assert all(r["doc_id"] and r["end"] > r["start"] for r in table.select(["doc_id", "start", "end"]).to_pylist())
    assert rows == summary.counts["chunks"]
    # Every record parked in a part file on the bucket was deleted once read.
    assert FileSystems.match([f"{summary.run_dir}/_spill/**"])[0].metadata_list == []
    # doc ids are relative to the input root, exactly as for a local corpus.
    assert any(r.doc_id.startswith("manuals/") for r in search(f"{bucket}/index", "arm calibration warm up", k=3))

    hits = search(f"{bucket}/index", "how long should the arm warm up before calibration?", k=3)
    assert hits and "calibrat" in hits[0].text.lower()
    # The model was fetched from the bucket once into the local cache, complete.
    copies = [p for p in (tmp_path / "models").iterdir() if not p.name.startswith(".")]
    assert len(copies) == 1 and (copies[0] / "model.safetensors").stat().st_size > 1_000_000

    # A rerun on GCS carries every document of the published run, vectors and all.
    again = run(config)
    assert again.counts["embedded"] == 0 and again.counts["chunks_carried"] == again.counts["chunks"]

    # An edited document on a rerun: its old rows are deleted where they lie, in the deletion
    # file its shard's writer wrote to the bucket (the inline bound set to none), which the
    # manifest lists by path; every reader and publish's checks read them from there.
    from unittest import mock

    from chunkline.index.manifest import load_manifest
    from chunkline.pipeline.runs import file_problems

    edited = next(m.path for m in FileSystems.match([f"{bucket}/corpus/**.md"])[0].metadata_list)
    with FileSystems.open(edited) as handle:
        text = handle.read()
    with FileSystems.create(edited) as handle:
        handle.write(text + b"\n\nThe zyxquor flange needs a quarter turn after calibration.\n")
    with mock.patch("chunkline.index.tables.INLINE_DELETES", 0):
        third = run(config)
    assert third.published and third.counts["documents_changed"] == 1
    manifest = load_manifest(third.run_dir)
    filed = [f for files in manifest.listing.deletes.values() for f in files]
    assert manifest.format == 4 and filed and all(
        f.path.startswith(f"{third.run_id}/deletes/") and f.shard is not None for f in filed)
    assert all(FileSystems.exists(f"{bucket}/index/{f.path}") for f in filed)
    assert file_problems(third.run_dir, manifest) == []
    assert sum(third.counts[k] for k in ("kept", "duplicate", "rejected")) == 74
    hits = search(f"{bucket}/index", "zyxquor flange", k=3)
    assert hits and hits[0].doc_id in edited and "zyxquor" in hits[0].text
