"""The whole job on examples/corpus, read back with pyarrow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from chunkline.records import chunk_schema, document_schema, parquet_schema, rejected_schema
from chunkline.pipeline.config import load_config
from chunkline.pipeline.query import search
from chunkline.pipeline.run import run
from chunkline.pipeline.summary import format_summary

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "corpus"
pytestmark = pytest.mark.slow


def run_job(output: Path, *overrides: str, beam_args: tuple[str, ...] = (), config: str = "local.yaml"):
    cfg = load_config(ROOT / "configs" / config,
                      [f"input.pattern={CORPUS}/**", f"output.path={output}", *overrides])
    return run(cfg, beam_args)


def table(run_dir: str, name: str):
    files = sorted(Path(run_dir).glob(f"{name}-*.parquet"))
    return [pq.read_table(f) for f in files]


def rows(run_dir: str, name: str) -> list[dict]:
    return [r for t in table(run_dir, name) for r in t.to_pylist()]


def comparable(run_dir: str) -> tuple[list, list, list]:
    """Rows without vectors (compared separately, with a float tolerance), sorted."""
    chunks = sorted(rows(run_dir, "chunks"), key=lambda r: r["chunk_id"])
    vectors = [r.pop("embedding") for r in chunks]
    vectors = np.asarray([v for v in vectors if v is not None], dtype=np.float32)
    documents = sorted(rows(run_dir, "documents"), key=lambda r: (r["doc_id"], r["uri"]))
    rejected = sorted(rows(run_dir, "rejected"), key=lambda r: (r["doc_id"], r["uri"]))
    return chunks, documents, rejected, vectors


@pytest.fixture(scope="module")
def first_run(demo_index):
    return demo_index  # the default config on CORPUS (tests/conftest.py), read-only


def test_schemas_are_the_defined_ones(first_run) -> None:
    for t in table(first_run.run_dir, "chunks"):
        assert t.schema.equals(parquet_schema(chunk_schema(384)))  # vectors a plain list on disk
    for t in table(first_run.run_dir, "documents"):
        assert t.schema.equals(document_schema())
    for t in table(first_run.run_dir, "rejected"):
        assert t.schema.equals(rejected_schema())
    assert len(table(first_run.run_dir, "chunks")) == 4


def test_counts_reconcile_and_manifest_is_complete(first_run) -> None:
    manifest = json.loads((Path(first_run.run_dir) / "manifest.json").read_text())
    counts = manifest["counts"]
    files_in_corpus = [p for p in CORPUS.rglob("*") if p.is_file()]
    assert manifest["reconciled"] and first_run.reconciled
    assert counts["documents"] == counts["kept"] + counts["duplicate"] + counts["rejected"]
    assert counts["read"] == counts["documents"]
    assert counts["duplicate"] >= 1  # manuals/arm-calibration-copy.md
    assert counts["rejected"] >= 1  # the malformed line of data/faq.jsonl
    assert counts["documents"] > len(files_in_corpus)  # JSONL records are documents
    assert (Path(first_run.output) / "LATEST").read_text().strip() == first_run.run_id
    assert manifest["model"]["dim"] == 384
    assert manifest["split"]["max_tokens"] == 256 - 2 - 32
    summary = format_summary(first_run)
    assert "reconciled" in summary and "chunkline query" in summary
    assert first_run.report == f"{first_run.run_dir}/report.html" and Path(first_run.report).is_file()
    assert f"report     {first_run.report}" in summary


def test_every_chunk_is_its_documents_text(first_run) -> None:
    documents = {r["doc_id"]: r for r in rows(first_run.run_dir, "documents") if r["status"] == "kept"}
    chunks = rows(first_run.run_dir, "chunks")
    assert chunks
    for r in chunks:
        assert documents[r["doc_id"]]["text"][r["start"] : r["end"]] == r["text"]
        assert r["chunk_id"] == f"{r['doc_id']}#{r['start']}-{r['end']}"
        assert r["tokens"] <= 256 - 2 - 32
    kept_with_text = {d for d, r in documents.items() if r["text"].strip()}
    assert {r["doc_id"] for r in chunks} == kept_with_text


def test_duplicates_and_rejections_are_recorded(first_run) -> None:
    documents = rows(first_run.run_dir, "documents")
    by_id = {r["doc_id"]: r for r in documents}
    # Byte-identical copies: the smallest doc_id survives ("-" sorts before ".").
    assert by_id["manuals/arm-calibration-copy.md"]["status"] == "kept"
    assert by_id["manuals/arm-calibration.md"]["status"] == "duplicate"
    assert by_id["manuals/arm-calibration.md"]["duplicate_of"] == "manuals/arm-calibration-copy.md"
    rejected = rows(first_run.run_dir, "rejected")
    assert any(r["doc_id"].startswith("data/faq.jsonl#L") for r in rejected)
    assert all(r["reason"] for r in rejected)


def test_vectors_have_model_dim_and_unit_norm(first_run) -> None:
    *_, vectors = comparable(first_run.run_dir)
    assert vectors.shape[1] == 384
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)


def test_query_with_a_chunks_text_ranks_that_chunk_first(first_run) -> None:
    """Ten chunks spread over the corpus, each queried with its own text: each comes back first,
    so every vector sits on its own row. (Retrieval quality proper: bench/retrieval_eval.py.)"""
    chunks = sorted(rows(first_run.run_dir, "chunks"), key=lambda r: r["chunk_id"])
    texts = [r["text"] for r in chunks]
    probes = [r for r in chunks if len(r["text"].split()) >= 20 and texts.count(r["text"]) == 1]
    probes = probes[:: max(1, len(probes) // 10)][:10]
    assert len(probes) == 10
    for r in probes:
        hits = search(first_run.output, r["search_text"], k=3)
        assert hits[0].chunk_id == r["chunk_id"], (r["chunk_id"], [h.chunk_id for h in hits])


def test_question_finds_its_answer(first_run) -> None:
    hits = search(first_run.output, "how long should the arm warm up before calibration?", k=3)
    assert any(h.doc_id.startswith("manuals/arm-calibration") for h in hits)
    assert "warm-up" in hits[0].text.lower()


def test_two_runs_give_identical_rows(first_run, tmp_path) -> None:
    second = run_job(tmp_path)
    a, b = comparable(first_run.run_dir), comparable(second.run_dir)
    assert a[:3] == b[:3]
    assert np.array_equal(a[3], b[3])


def test_multiprocess_run_gives_the_same_rows(first_run, tmp_path) -> None:
    other = run_job(tmp_path, beam_args=("--direct_num_workers=2", "--direct_running_mode=multi_processing"))
    a, b = comparable(first_run.run_dir), comparable(other.run_dir)
    assert a[:3] == b[:3]
    if first_run.model is not None and first_run.model.dtype == "float32":
        assert np.allclose(a[3], b[3], atol=1e-5)
    else:
        # Other workers form other passes: a bfloat16 forward pass rounds differently with the
        # padded shape (the kernels block it differently), so vectors agree in direction only.
        cosines = np.sum(a[3] * b[3], axis=1)
        assert cosines.min() >= 0.9995, cosines.min()


def test_portable_runner_gives_the_same_rows(first_run, tmp_path) -> None:
    other = run_job(tmp_path, config="portable.yaml")
    a, b = comparable(first_run.run_dir), comparable(other.run_dir)
    assert a[:3] == b[:3]
    if first_run.model is not None and first_run.model.dtype == "float32":
        assert np.allclose(a[3], b[3], atol=1e-5)
    else:
        # Other workers form other passes: a bfloat16 forward pass rounds differently with the
        # padded shape (the kernels block it differently), so vectors agree in direction only.
        cosines = np.sum(a[3] * b[3], axis=1)
        assert cosines.min() >= 0.9995, cosines.min()


def test_hostile_files_land_in_rejected_and_counts_reconcile(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.md").write_text("# Good\nA fine document.\n", encoding="utf-8")
    (corpus / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    (corpus / "binary.txt").write_bytes(b"text\x00\x00\x00more")
    (corpus / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (corpus / "empty.md").write_bytes(b"")
    (corpus / "records.jsonl").write_text(
        '{"id": "r1", "text": "first record"}\n{"id": "r2", "text": \n{"id": "r3"}\n',
        encoding="utf-8",
    )
    cfg = load_config(ROOT / "configs" / "local.yaml",
                      [f"input.pattern={corpus}/**", f"output.path={tmp_path / 'out'}", "embed=null"])
    summary = run(cfg)
    assert summary.reconciled
    c = summary.counts
    assert c["documents"] == c["kept"] + c["duplicate"] + c["rejected"] == 8
    assert c["kept"] == 2  # good.md and r1
    reasons = {r["doc_id"]: r["reason"] for r in rows(summary.run_dir, "rejected")}
    assert set(reasons) == {"image.png", "binary.txt", "latin1.txt", "empty.md",
                            "records.jsonl#L2", "records.jsonl#L3"}
    assert "UTF-8" in reasons["latin1.txt"]
    assert "empty" in reasons["empty.md"]
    assert all(t.column("embedding").null_count == t.num_rows for t in table(summary.run_dir, "chunks"))


def test_embed_null_writes_the_same_chunks_without_vectors(first_run, tmp_path) -> None:
    dry = run_job(tmp_path, "embed=null")
    a, b = comparable(first_run.run_dir), comparable(dry.run_dir)
    # The content key names what made the vector, so it differs where there is none.
    for chunk in a[0] + b[0]:
        chunk.pop("content_key")
    assert a[:3] == b[:3]
    for t in table(dry.run_dir, "chunks"):
        assert t.schema.equals(chunk_schema(None))
        assert t.column("embedding").null_count == t.num_rows
