"""``chunkline.pipeline.search.Index``: a run opened once gives, question after question, what the
per-question path gave (hits, scores to the bit, notes, ranking, expansion), from any number of
threads at once; a damaged run fails to open with the one-line errors ``chunkline query`` prints.

The reference below is the per-question path written plainly: the shards read again for every
question, each chunk's metadata matched with ``chunkline.metadata.matches``, BM25 summed in a
Python loop, the rankings made with Python's stable ``sorted``. One choice in it follows the
Index rather than the old code: dense scores are one product of the whole matrix, then
filtered (see ``pipeline/search.py``: BLAS rounds a row's dot product differently depending on
where the row sits, so multiplying only the kept rows moved scores in their last bit).
"""

from __future__ import annotations

from tests.helpers import record_rewritten_files


import dataclasses
import io
import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chunkline.embedder import embed_texts, load_model
from chunkline.index.tables import read_table
from chunkline.metadata import matches, parse_condition
from chunkline.quantize import quantize_int8
from chunkline.sparse import SparseOptions, query_terms, query_weights
from chunkline.pipeline.cli import main
from chunkline.pipeline.manifest import ManifestError, load_manifest
from chunkline.pipeline.query import (Hit, dense_scores, embed_options, fused, load_chunks, run_dir_of,
                            search_result, sparse_scores)
from chunkline.pipeline.search import Index
from tests.helpers import damage as damage_file

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

# Rotated over the questions: one key, two keys, typed JSON, keys that keep nothing.
WHERE = [["lang=en"], ["status=closed"], ["priority=P3", "status=closed"], ["product=NR-7"],
         ["category=fleetos"], ["slides:=4"], ["lang=xx"], ["team=fleet"], ['title:="Spare parts"']]


@pytest.fixture(scope="module")
def demo(demo_index) -> Path:
    """The default config on examples/corpus (tests/conftest.py), read-only."""
    return Path(demo_index.output)


@pytest.fixture(scope="module")
def index(demo) -> Index:
    return Index.open(str(demo))


@pytest.fixture(scope="module")
def questions(demo) -> list[str]:
    """50 questions: the opening words of every n-th chunk, and a few that BM25 cannot match
    (another script, stop words only, no words) or that say little."""
    chunks = sorted(read(run_dir_of(str(demo)), "chunks").to_pylist(), key=lambda c: c["chunk_id"])
    step = len(chunks) // 44
    asked = [" ".join(c["text"].split()[:9]) for c in chunks[::step][:44]]
    asked += ["how long should the arm warm up before calibration?", "如何校准机械臂", "The AND of",
              "? ! 7", "dock charger", "warranty"]
    assert len(asked) == 50 and all(q.strip() for q in asked)
    return asked


@pytest.fixture(scope="module")
def vectors(demo, questions) -> dict[str, np.ndarray]:
    """Each question embedded alone by the index's model, loaded here, apart from the Index."""
    options = embed_options(load_manifest(run_dir_of(str(demo))))
    model = load_model(options)
    return {q: embed_texts(model, [q], options)[0] for q in questions}


# --- the per-question path, plainly ----------------------------------------------------------


def read(run_dir: str, table: str) -> pa.Table:
    return read_table(run_dir, load_manifest(run_dir), table)


def reference(output: str, question: str, vector: np.ndarray, k: int, where: list, mode: str,
              expand: int) -> tuple[tuple[Hit, ...], list[str], str | None]:
    """(hits, note kinds, ranking) as the per-question path gave them, everything read anew."""
    run_dir = run_dir_of(output)
    manifest = load_manifest(run_dir)
    table = read(run_dir, "chunks")
    rows = table.drop_columns(["embedding"]).to_pylist()
    keep = [i for i, row in enumerate(rows) if matches(row["metadata"], where)]
    if not keep:
        keys = {key for row in rows for key in json.loads(row["metadata"])}
        unknown = any((getattr(c, "key", None) or c[0]) not in keys for c in where)
        return (), ["where_unknown_key" if unknown else "where_no_match"], None
    notes = []
    # Dense: cosine, all chunks times the question at once, then the kept ones (the run stores
    # unit float32 vectors, so the dot product is the cosine as stored).
    assert manifest.setting("embed", "normalize") and manifest.setting("output", "vector_dtype") == "float32"
    matrix = stored_matrix(table)
    dense_all = matrix @ vector
    dense = [float(dense_all[i]) for i in keep]
    # BM25: the stored weights times the question's IDF, summed in stored order.
    assert manifest.bm25 is not None
    analysis = {name: getattr(manifest.bm25, name) for name in ("k1", "b", "stemmer", "stop_words")}
    terms = query_terms(question, SparseOptions(**analysis))
    df = {r["term_id"]: r["df"] for r in read(run_dir, "terms").to_pylist()}
    idf = dict(zip(terms, query_weights(terms, df, manifest.bm25.chunks)))
    sparse = []
    for i in keep:
        total = 0.0
        for term, weight in zip(rows[i]["sparse_indices"], rows[i]["sparse_values"]):
            if term in idf:
                total += weight * idf[term]
        sparse.append(total)
    positions = range(len(keep))
    if mode == "dense":
        scores, candidates = dense, list(positions)
    else:
        candidates = [p for p in positions if sparse[p] > 0]
        if not candidates:
            kind = "terms_not_found" if terms else "no_query_terms"
            if mode == "sparse":
                return (), [kind], "sparse"
            notes.append("dense_only")
            mode, scores, candidates = "dense", dense, list(positions)
        elif mode == "sparse":
            scores = sparse
        else:
            scores = [0.0] * len(keep)
            for ranking in (sorted(positions, key=lambda p: -dense[p]),
                            sorted((p for p in positions if sparse[p] > 0), key=lambda p: -sparse[p])):
                for rank, p in enumerate(ranking):
                    scores[p] += 1.0 / (60 + 1 + rank)
            candidates = list(positions)
    best = sorted(candidates, key=lambda p: -scores[p])[:k]
    hits = []
    for p in best:
        row = rows[keep[p]]
        hit = Hit(float(scores[p]), row["doc_id"], row["chunk_id"], tuple(row["headings"]), row["start"],
                  row["end"], row["text"], row["metadata"], row.get("page_start"), row.get("page_end"))
        hits.append(grown(hit, rows, run_dir, expand) if expand else hit)
    return tuple(hits), notes, mode


def stored_matrix(table: pa.Table) -> np.ndarray:
    """The vectors as rows of float32, through Python lists (not the Index's Arrow-to-numpy
    path); kept for the next question while the shard bytes are the same."""
    key = hash(table.column("chunk_id").to_pylist().__repr__())
    if key not in _MATRICES:
        _MATRICES[key] = np.array(table.column("embedding").to_pylist(), dtype=np.float32)
    return _MATRICES[key]


_MATRICES: dict[int, np.ndarray] = {}
_TEXTS: dict[str, dict[str, str]] = {}


def grown(hit: Hit, rows: list[dict], run_dir: str, budget: int) -> Hit:
    """The hit with its document's nearer chunks, before and after in turn, within ``budget``
    tokens in all; the span cut from the document's text."""
    siblings = {r["chunk_index"]: r for r in rows if r["doc_id"] == hit.doc_id}
    index = next(i for i, r in siblings.items() if (r["start"], r["end"]) == (hit.start, hit.end))
    lo = hi = index
    used = siblings[index]["tokens"]
    while True:
        before, after = siblings.get(lo - 1), siblings.get(hi + 1)
        grew = False
        for side, neighbour in (("lo", before), ("hi", after)):
            if neighbour is not None and used + neighbour["tokens"] <= budget:
                used += neighbour["tokens"]
                lo, hi = (lo - 1, hi) if side == "lo" else (lo, hi + 1)
                grew = True
        if not grew:
            break
    start = min(siblings[i]["start"] for i in range(lo, hi + 1))
    end = max(siblings[i]["end"] for i in range(lo, hi + 1))
    if run_dir not in _TEXTS:
        _TEXTS[run_dir] = {r["doc_id"]: r["text"] for r in read(run_dir, "documents").to_pylist()
                           if r["status"] == "kept"}
    text = _TEXTS[run_dir].get(hit.doc_id)
    return dataclasses.replace(hit, expanded_start=start, expanded_end=end,
                               expanded_text=None if text is None else text[start:end])


# --- the Index gives what the per-question path gave -----------------------------------------


@pytest.mark.parametrize("mode", ["hybrid", "dense", "sparse"])
@pytest.mark.parametrize("variant", ["plain", "where", "expand"])
def test_the_index_answers_as_the_per_question_path(demo, index, questions, vectors, mode, variant) -> None:
    compared = 0
    for n, question in enumerate(questions):
        where = [parse_condition(spec) for spec in WHERE[n % len(WHERE)]] if variant == "where" else []
        expand = 200 + 40 * (n % 5) if variant == "expand" else 0
        k = 1 + n % 7
        expected_hits, kinds, ranking = reference(str(demo), question, vectors[question], k, where,
                                                  mode, expand)
        # Every other question through search_vector, the rest embedded by the Index itself.
        if n % 2:
            got = index.search_vector(question, vectors[question], k, mode=mode, where=where, expand=expand)
        else:
            got = index.search(question, k, mode=mode, where=where, expand=expand)
        assert got.hits == expected_hits, (question, where)
        assert ([note.kind for note in got.notes], got.ranking) == (kinds, ranking), question
        compared += len(expected_hits)
    assert compared > 30  # hits enough to compare, narrow filters and sparse mode included


def test_the_one_shot_path_is_the_index(demo, index, questions) -> None:
    """``search_result`` (what ``chunkline query`` calls) opens an Index for its question: the
    same result, notes and all, as the Index kept open."""
    for question in questions[::25]:
        for where in ([], [("lang", "ja")]):
            assert search_result(str(demo), question, 3, where, "hybrid", 300) == \
                index.search(question, 3, where=where, expand=300)


def test_search_vector_of_embed_is_search(index, questions) -> None:
    for question in questions[:5]:
        vector = index.embed(question)
        assert vector.shape == (index.dim,) and vector.dtype == np.float32
        assert index.search_vector(question, vector, 4) == index.search(question, 4)
    with pytest.raises(ValueError, match=r"has shape \(3,\); this index's vectors have 384 values"):
        index.search_vector("arm", np.ones(3), 2)


@pytest.mark.parametrize(("arguments", "message"), [
    (("", 5), "the question is empty"),
    (("arm", 0), "k must be an integer >= 1, got 0"),
    (("arm", True), "k must be an integer >= 1, got True"),
], ids=["empty", "k-zero", "k-bool"])
def test_bad_arguments_are_refused_as_before(index, arguments, message) -> None:
    with pytest.raises(ValueError) as refused:
        index.search(*arguments)
    assert str(refused.value) == message
    with pytest.raises(ValueError, match="mode must be one of hybrid, dense, sparse, got 'fuzzy'"):
        index.search("arm", mode="fuzzy")


def test_int8_vectors_rank_as_the_per_table_scores(demo, questions, tmp_path) -> None:
    """A run storing int8 vectors with a scale per row: the Index dequantizes and re-normalizes
    them once at open, and ranks as ``chunkline.pipeline.query``'s per-table scores (dense_scores,
    sparse_scores, fused) do, recomputed here for each question."""
    copy = tmp_path / "out"
    shutil.copytree(demo, copy)
    run_dir = copy / (copy / "LATEST").read_text().strip()
    for shard in run_dir.glob("chunks-*.parquet"):
        table = pq.read_table(shard)
        stored = [quantize_int8(vector) for vector in table.column("embedding").to_pylist()]
        values = pa.array([v for v, _ in stored], pa.list_(pa.int8(), len(stored[0][0])))
        table = table.set_column(table.schema.get_field_index("embedding"), "embedding", values)
        pq.write_table(table.append_column("embedding_scale", pa.array([s for _, s in stored], pa.float32())),
                       shard)
    record_rewritten_files(run_dir)  # as a run storing int8 would have recorded its files
    index = Index.open(str(copy))
    manifest = load_manifest(str(run_dir))
    chunks = load_chunks(str(run_dir), manifest)
    ids = chunks.column("chunk_id").to_pylist()
    for question in (questions[0], questions[-6]):
        dense = dense_scores(chunks, manifest, str(run_dir), question)
        order = np.argsort(-dense, kind="stable")
        hits = index.search(question, len(ids), mode="dense").hits
        assert [(h.chunk_id, h.score) for h in hits] == [(ids[i], float(dense[i])) for i in order]
        hybrid = fused(dense, sparse_scores(chunks, manifest, str(run_dir), question))
        order = np.argsort(-hybrid, kind="stable")[:5]
        hits = index.search(question, 5).hits
        assert [(h.chunk_id, h.score) for h in hits] == [(ids[i], float(hybrid[i])) for i in order]


# --- threads ---------------------------------------------------------------------------------


def test_eight_threads_at_once_get_the_serial_answers(demo, questions) -> None:
    """A fresh Index (model, metadata filter and documents not yet built) asked from 8 threads
    released together: the parts built on first use are built under contention, the model is
    called concurrently; every answer equals the one the same Index gave afterwards, serially."""
    shared = Index.open(str(demo))
    asks = [(q, mode, WHERE[n % len(WHERE)] if n % 3 else [], 300 if n % 4 == 0 else 0)
            for n, q in enumerate(questions[:24]) for mode in ("hybrid", "dense", "sparse")]
    start = threading.Barrier(8)

    def ask(share: list) -> list:
        start.wait()
        return [shared.search(q, 5, mode=mode, where=[parse_condition(s) for s in where], expand=expand)
                for q, mode, where, expand in share]

    shares = [asks[i::8] for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        concurrent = list(pool.map(ask, shares))
    for share, answers in zip(shares, concurrent):
        for (q, mode, where, expand), answer in zip(share, answers):
            assert answer == shared.search(q, 5, mode=mode, where=[parse_condition(s) for s in where],
                                           expand=expand), (q, mode, where)
    assert sum(len(a.hits) for answers in concurrent for a in answers) > 100


# --- damaged or missing runs ------------------------------------------------------------------


@pytest.fixture()
def damaged(demo, tmp_path) -> Path:
    """A copy of the demo output to break."""
    copy = tmp_path / "out"
    shutil.copytree(demo, copy)
    return copy


def cli_error(output: Path, *flags: str) -> tuple[int, list[str]]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["query", str(output), "arm calibration", *flags], out=out, err=err)
    return code, err.getvalue().splitlines()


def test_no_run_is_the_same_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        Index.open(str(tmp_path))
    assert str(missing.value) == f"no manifest.json or LATEST under {tmp_path}: run `chunkline run` first"
    assert cli_error(tmp_path) == (2, [f"chunkline query: {missing.value}"])


@pytest.mark.parametrize(("name", "damage", "why"), [
    # A file whose size is not the one recorded is refused before it is parsed.
    ("chunks-00000-of-*.parquet", "truncate", ": "),
    ("chunks-00001-of-*.parquet", "delete", ": no such file, though the run's manifest lists it"),
    ("terms-00000-of-*.parquet", "text", ": "),
    ("manifest.json", "truncate", ": truncated or not JSON ("),
], ids=["chunks-truncated", "chunks-missing", "terms-not-parquet", "manifest-truncated"])
def test_a_damaged_run_fails_to_open_with_one_line_naming_the_file(damaged, name, damage, why) -> None:
    run_dir = damaged / (damaged / "LATEST").read_text().strip()
    (path,) = run_dir.glob(name)
    damage_file(path, damage)
    with pytest.raises((ValueError, ManifestError)) as failed:
        Index.open(str(damaged))
    message = str(failed.value)
    assert message.startswith(f"{path}{why}") and "\n" not in message
    if why == ": ":
        assert "the run's manifest says" in message and "(replaced or damaged since the run wrote it)" in message
    assert cli_error(damaged) == (2, [f"chunkline query: {message}"])


def test_a_damaged_documents_shard_fails_the_expansion_only(damaged) -> None:
    """The documents' text is read on the first ``expand``, as the per-question path read it
    only then: a search without it still answers, one with it names the file, every time."""
    run_dir = damaged / (damaged / "LATEST").read_text().strip()
    (path,) = run_dir.glob("documents-*.parquet")
    path.write_text("not parquet at all\n")
    index = Index.open(str(damaged))
    assert index.search("arm calibration", 3).hits
    for _ in range(2):  # a failed build is not kept: the second asks the file again
        with pytest.raises(ValueError, match=f"^{path}: 19 bytes, the run's manifest says "):
            index.search("arm calibration", 3, expand=300)
    code, err = cli_error(damaged, "--expand", "300")
    assert code == 2 and len(err) == 1 and err[0].startswith(f"chunkline query: {path}: 19 bytes")
