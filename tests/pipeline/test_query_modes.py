"""Sparse output in the same run, and the query's modes, fusion, expansion and JSON, on the demo
corpus read back with pyarrow."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from chunkline.sparse import SparseOptions, query_terms
from pipeline.cli import main
from pipeline.config import load_config
from pipeline.query import RRF_K, search
from pipeline.run import run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
QUESTION = "how long should the arm warm up before calibration?"


def read(run_dir: str, table: str) -> list[dict]:
    return [r for f in sorted(Path(run_dir).glob(f"{table}-*.parquet")) for r in pq.read_table(f).to_pylist()]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    output = tmp_path_factory.mktemp("modes") / "index"
    config = load_config(ROOT / "configs" / "local.yaml",
                         [f"input.pattern={ROOT}/examples/corpus/**", f"output.path={output}"])
    summary = run(config)
    return output, summary, read(summary.run_dir, "chunks")


def test_statistics_match_the_shards(demo) -> None:
    _, summary, chunks = demo
    manifest = json.loads((Path(summary.run_dir) / "manifest.json").read_text())
    bm25 = manifest["bm25"]
    assert bm25["chunks"] == len(chunks) and manifest["files"]["terms"]
    df = Counter(i for c in chunks for i in c["sparse_indices"])
    terms = {r["term_id"]: r["df"] for r in read(summary.run_dir, "terms")}
    assert terms == dict(df)
    assert all(c["sparse_indices"] == sorted(c["sparse_indices"]) for c in chunks)
    assert all(len(c["sparse_indices"]) == len(c["sparse_values"]) > 0 for c in chunks)


def test_sparse_mode_is_the_dot_product_with_the_question(demo) -> None:
    output, _, chunks = demo
    wanted = set(query_terms(QUESTION, SparseOptions()))
    scores = {c["chunk_id"]: sum(w for i, w in zip(c["sparse_indices"], c["sparse_values"]) if i in wanted)
              for c in chunks}
    hits = search(str(output), QUESTION, k=5, mode="sparse")
    expected = sorted(scores.values(), reverse=True)[:5]
    np.testing.assert_allclose([h.score for h in hits], expected, rtol=1e-5)
    for hit in hits:
        assert hit.score == pytest.approx(scores[hit.chunk_id], rel=1e-5)


def test_hybrid_is_reciprocal_rank_fusion(demo) -> None:
    output, _, chunks = demo
    n = len(chunks)
    dense = search(str(output), QUESTION, k=n, mode="dense")
    sparse = [h for h in search(str(output), QUESTION, k=n, mode="sparse") if h.score > 0]
    fused = Counter()
    for ranking in (dense, sparse):
        for rank, hit in enumerate(ranking, 1):
            fused[hit.chunk_id] += 1 / (RRF_K + rank)
    hybrid = search(str(output), QUESTION, k=5)
    assert [h.chunk_id for h in hybrid] == [cid for cid, _ in fused.most_common(5)]
    assert "warm-up" in hybrid[0].text.lower()


def test_expand_grows_hits_by_neighbours_with_exact_offsets(demo) -> None:
    output, summary, chunks = demo
    documents = {r["doc_id"]: r["text"] for r in read(summary.run_dir, "documents") if r["status"] == "kept"}
    tokens = {c["chunk_id"]: c["tokens"] for c in chunks}
    for hit in search(str(output), "arm calibration steps", k=5, expand=600):
        text = documents[hit.doc_id]
        assert hit.expanded_text == text[hit.expanded_start:hit.expanded_end]
        assert hit.expanded_start <= hit.start and hit.end <= hit.expanded_end
        inside = [c for c in chunks if c["doc_id"] == hit.doc_id
                  and hit.expanded_start <= c["start"] and c["end"] <= hit.expanded_end]
        assert sum(tokens[c["chunk_id"]] for c in inside) <= max(600, tokens[hit.chunk_id])
        indexes = sorted(c["chunk_index"] for c in inside)
        assert indexes == list(range(indexes[0], indexes[-1] + 1))  # contiguous around the hit
    grown = search(str(output), "arm calibration steps", k=5, expand=600)
    assert any(h.expanded_end - h.expanded_start > h.end - h.start for h in grown)


def test_cli_modes_and_json(demo) -> None:
    output, _, _ = demo
    out, err = io.StringIO(), io.StringIO()
    assert main(["query", str(output), QUESTION, "--json", "--mode", "sparse", "-k", "2",
                 "--expand", "300"], out=out, err=err) == 0, err.getvalue()
    answer = json.loads(out.getvalue())
    assert answer["mode"] == "sparse" and [h["rank"] for h in answer["hits"]] == [1, 2]
    assert {"chunk_id", "score", "start", "end", "expanded_start", "metadata"} <= set(answer["hits"][0])
    with pytest.raises(SystemExit) as exited:  # argparse's own usage error
        main(["query", str(output), QUESTION, "--mode", "fuzzy"], out=out, err=io.StringIO())
    assert exited.value.code == 2
