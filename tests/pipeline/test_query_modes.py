"""Sparse output in the same run, and the query's modes, fusion, expansion and JSON, on the demo
corpus read back with pyarrow."""

from __future__ import annotations

from tests.helpers import record_rewritten_files

import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from chunkline.sparse import SparseOptions, query_terms, query_weights
from chunkline.pipeline.cli import main
from chunkline.pipeline.manifest import load_manifest
from chunkline.pipeline.query import RRF_K, search

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
QUESTION = "how long should the arm warm up before calibration?"


def read(run_dir: str, table: str) -> list[dict]:
    return [r for f in sorted(Path(run_dir).glob(f"{table}-*.parquet")) for r in pq.read_table(f).to_pylist()]


@pytest.fixture(scope="module")
def demo(demo_index):
    """The default config on examples/corpus (tests/conftest.py), read-only."""
    return Path(demo_index.output), demo_index, read(demo_index.run_dir, "chunks")


def test_statistics_match_the_shards(demo) -> None:
    _, summary, chunks = demo
    manifest = json.loads((Path(summary.run_dir) / "manifest.json").read_text())
    bm25 = manifest["bm25"]
    assert bm25["chunks"] == len(chunks) and manifest["tables"]["terms"]
    df = Counter(i for c in chunks for i in c["sparse_indices"])
    terms = {r["term_id"]: r["df"] for r in read(summary.run_dir, "terms")}
    assert terms == dict(df)
    assert all(c["sparse_indices"] == sorted(c["sparse_indices"]) for c in chunks)
    assert all(len(c["sparse_indices"]) == len(c["sparse_values"]) > 0 for c in chunks)


def test_sparse_mode_is_the_dot_product_with_the_question(demo) -> None:
    """The stored weights times the question's IDF vector (the run's terms table and chunk
    count), summed: what a store's sparse search computes."""
    output, summary, chunks = demo
    run_dir = summary.run_dir
    bm25 = load_manifest(run_dir).bm25
    assert bm25 is not None
    df = {r["term_id"]: r["df"] for f in sorted(Path(run_dir).glob("terms-*.parquet"))
          for r in pq.read_table(f).to_pylist()}
    terms = query_terms(QUESTION, SparseOptions())
    wanted = dict(zip(terms, query_weights(terms, df, bm25.chunks)))
    assert bm25.weights == "tf" and len(df) == bm25.terms and all(wanted.values())
    scores = {c["chunk_id"]: sum(w * wanted[i] for i, w in zip(c["sparse_indices"], c["sparse_values"])
                                 if i in wanted) for c in chunks}
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


# --- Empty results and one-sided rankings say so ---------------------------------------------


def cli_query(*argv: str) -> tuple[int, str, list[str]]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["query", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue().splitlines()


@pytest.mark.parametrize(("where", "note"), [
    (["missing=x"], "no hits: no chunk's metadata has the key 'missing'"),
    (["lang=en", "missing=x", "other=y"], "no hits: no chunk's metadata has the keys 'missing', 'other'"),
    (["lang=xx"], "no hits: no chunk matches --where lang=xx"),
    (["lang=en", "priority=P9"], "no hits: no chunk matches --where priority=P9"),
    (["lang=en", "priority=P1"],
     "no hits: no chunk matches --where lang=en --where priority=P1 together (each alone matches some)"),
], ids=["unknown-key", "unknown-keys", "no-value", "one-of-two", "not-together"])
def test_a_filter_that_keeps_nothing_says_why(demo, where, note) -> None:
    output, _, _ = demo
    flags = [arg for condition in where for arg in ("--where", condition)]
    assert cli_query(str(output), QUESTION, *flags) == (0, "", [f"chunkline query: {note}"])
    code, out, err = cli_query(str(output), QUESTION, "--json", *flags)
    answer = json.loads(out)
    assert (code, err, answer["hits"], answer["ranking"]) == (0, [], [], None)
    assert [n["text"] for n in answer["notes"]] == [note]
    assert answer["notes"][0]["kind"] in ("where_unknown_key", "where_no_match")


@pytest.mark.parametrize(("question", "kind", "why"), [
    ("如何校准机械臂", "terms_not_found",
     "none of the question's terms after analysis ('如何校准机械臂') occurs in this index"),
    ("The AND of", "no_query_terms",
     "the question has no searchable term: every word of it is a stop word ('the', 'and', 'of'), "
     "and BM25 indexes none"),
    ("? ! 7", "no_query_terms",
     "the question has no searchable term: BM25 reads words of two or more letters or digits, "
     "and it has none"),
], ids=["other-script", "stop-words", "no-words"])
def test_sparse_without_a_term_of_the_question_is_no_hit(demo, question, kind, why) -> None:
    from chunkline.pipeline.query import search_result

    output, _, _ = demo
    result = search_result(str(output), question, k=5, mode="sparse")
    assert (result.hits, result.ranking) == ((), "sparse")
    assert [(n.kind, n.text) for n in result.notes] == [(kind, f"no hits: {why}")]
    assert cli_query(str(output), question, "--mode", "sparse") == (0, "", [f"chunkline query: no hits: {why}"])


def test_sparse_hits_hold_a_term_of_the_question(demo) -> None:
    output, _, chunks = demo
    wanted = set(query_terms("dock charger", SparseOptions()))
    holding = {c["chunk_id"] for c in chunks if wanted & set(c["sparse_indices"])}
    hits = search(str(output), "dock charger", k=len(chunks), mode="sparse")
    assert 0 < len(holding) < len(chunks)
    assert {h.chunk_id for h in hits} == holding and all(h.score > 0 for h in hits)
    filtered = search(str(output), "calibration", k=len(chunks), mode="sparse", where=[("lang", "ja")])
    assert filtered == []


def test_terms_outside_the_filtered_chunks_are_named_as_such(demo) -> None:
    from chunkline.pipeline.query import search_result

    output, _, _ = demo
    result = search_result(str(output), "calibration", mode="sparse", where=[("lang", "ja")])
    assert [n.text for n in result.notes] == [
        "no hits: none of the question's terms after analysis ('calibr') occurs in the chunks that meet --where"]


def test_hybrid_where_bm25_matches_nothing_ranks_by_dense_alone(demo) -> None:
    from chunkline.pipeline.query import search_result

    output, _, _ = demo
    result = search_result(str(output), "如何校准机械臂", k=3)
    dense = search(str(output), "如何校准机械臂", k=3, mode="dense")
    assert result.ranking == "dense" and list(result.hits) == dense
    assert [n.kind for n in result.notes] == ["dense_only"]
    assert result.notes[0].text.startswith("ranked by dense vectors alone, since BM25 matches no chunk: "
                                           "none of the question's terms")


@pytest.fixture(scope="module")
def one_sided(demo, tmp_path_factory) -> dict[str, Path]:
    """Copies of the demo run as a run with ``sparse: null`` and one with ``embed: null`` write
    them: the manifest without BM25 statistics (or without model and embed config, the vectors
    null); no pipeline run."""
    import shutil

    import pyarrow as pa

    _, summary, _ = demo
    base = tmp_path_factory.mktemp("one-sided")
    made = {}
    for name in ("no-sparse", "no-vectors"):
        run_dir = base / name / Path(summary.run_dir).name
        shutil.copytree(summary.run_dir, run_dir)
        (run_dir.parent / "LATEST").write_text(run_dir.name + "\n")
        manifest = json.loads((run_dir / "manifest.json").read_text())
        if name == "no-sparse":
            manifest["bm25"] = manifest["config"]["sparse"] = None
        else:
            manifest["model"] = manifest["config"]["embed"] = None
            for shard in run_dir.glob("chunks-*.parquet"):
                table = pq.read_table(shard)
                at = table.schema.get_field_index("embedding")
                nulls = pa.nulls(len(table), pa.list_(pa.float32()))
                pq.write_table(table.set_column(at, pa.field("embedding", nulls.type), nulls), shard)
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
        record_rewritten_files(run_dir)  # as a run written with embed: null recorded its files
        made[name] = run_dir.parent
    return made


@pytest.mark.parametrize(("run", "ranking", "note"), [
    ("no-sparse", "dense", "ranked by dense vectors alone: {run} has no BM25 weights (written with sparse: null)"),
    ("no-vectors", "sparse", "ranked by BM25 alone: {run} has no vectors (written with embed: null)"),
], ids=["sparse-null", "embed-null"])
def test_hybrid_on_a_one_sided_run_says_which_side_ranked(one_sided, run, ranking, note) -> None:
    output = one_sided[run]
    run_dir = str(next(output.glob("2*")))
    code, out, err = cli_query(str(output), QUESTION, "-k", "2")
    assert code == 0 and err == [f"chunkline query: {note.format(run=run_dir)}"]
    assert out.startswith("1. ") and "warm-up" in out.lower()
    code, out, err = cli_query(str(output), QUESTION, "-k", "2", "--json")
    answer = json.loads(out)
    assert (code, err, answer["mode"], answer["ranking"]) == (0, [], "hybrid", ranking)
    assert [n["text"] for n in answer["notes"]] == [note.format(run=run_dir)]
    alone = search(str(output), QUESTION, k=2, mode=ranking)
    assert [h["chunk_id"] for h in answer["hits"]] == [h.chunk_id for h in alone]


def test_hybrid_on_a_run_without_vectors_and_no_term_found_says_both(one_sided) -> None:
    output = one_sided["no-vectors"]
    code, out, err = cli_query(str(output), "如何校准机械臂")
    assert (code, out) == (0, "")
    assert [line.split(": ", 2)[1] for line in err] == ["ranked by BM25 alone", "no hits"]
