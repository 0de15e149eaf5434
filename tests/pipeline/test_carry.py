"""Carrying unchanged documents: a rerun takes their rows from the previous run, and its
tables equal those of a full rebuild of the same input with the same recorded statistics, also
when the change moves a corpus-wide fact (a line turning boilerplate, a new near twin, a
deleted cluster survivor, a metadata edit) or the previous rows are damaged."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from chunkline.pipeline.plan import SETTLE_SIGNATURE
from hypothesis import given
from hypothesis import strategies as st

from chunkline.carry import embedding_prefix
from chunkline.index.manifest import load_manifest
from chunkline.index.manifest_types import Listing, parse_listing
from chunkline.index.tables import LiveFile, live_files, read_table
from chunkline.memo import MEMO_TABLE, MIN_USED
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from chunkline.pipeline.runs import collect
from chunkline.pipeline.summary import format_summary

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

WORDS = ("robot arm calibration sensor firmware battery dock mission route map lidar torque "
         "encoder gripper payload controller network latency safety zone charger floor aisle "
         "shelf pallet scanner camera operator ticket alert restart update rollback").split()
NEWSLETTER = "Follow the robot fleet newsletter for weekly maintenance updates."
TABLES = ("chunks", "documents", "rejected", "terms", "state")


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."
                    for _ in range(sentences))


def write_corpus(root: Path, count: int = 30, seed: int = 5) -> None:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        front = f"---\ntitle: Manual {i}\n---\n" if i == 7 else ""
        sections = [f"{front}# Manual {i:03d}\n\n{paragraph(rng, 3)}"]
        if 1 <= i <= 4:  # four documents share a line: under the boilerplate bar of five
            sections.append(NEWSLETTER)
        for s in range(rng.randint(1, 3)):
            sections.append(f"## Part {s}\n\n{paragraph(rng, rng.randint(2, 6))}")
        (root / f"doc{i:03d}.md").write_text("\n\n".join(sections) + "\n", encoding="utf-8")
    shutil.copy(root / "doc005.md", root / "doc030.md")  # an exact duplicate of doc005


def change_corpus(root: Path) -> None:
    # (a) a fifth document takes the shared line: it becomes boilerplate in doc001-doc004 too.
    with (root / "doc020.md").open("a", encoding="utf-8") as handle:
        handle.write(f"\n{NEWSLETTER}\n")
    # (b) a near twin of the unchanged doc010, under a smaller id: it survives, doc010 does not.
    text = (root / "doc010.md").read_text(encoding="utf-8")
    (root / "doc009z.md").write_text(text.replace("# Manual 010", "# Manual 010 (copy)"), encoding="utf-8")
    # (c) the survivor of {doc005, doc030} is deleted: the unchanged doc030 is kept now.
    (root / "doc005.md").unlink()
    # (d) only the front matter of doc007 changes.
    path = root / "doc007.md"
    path.write_text(path.read_text(encoding="utf-8").replace("title: Manual 7", "title: Manual seven"),
                    encoding="utf-8")


def job(corpus: Path, output: Path, *overrides: str):
    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null",
        "output.max_shrink=1", *overrides]))


def table(run_dir: str, name: str) -> pa.Table:
    """The run's live rows of ``name``, through its manifest (they may lie in earlier runs'
    files, some of whose rows are deleted)."""
    return read_table(run_dir, load_manifest(run_dir), name)


def listed(run_dir: str, name: str) -> list[LiveFile]:
    return live_files(run_dir, load_manifest(run_dir), name)


def copy_published(run, copy: Path) -> Path:
    """The output ``run`` was published into, copied to ``copy`` (a run's files may lie in
    earlier runs' folders) with LATEST naming ``run``; the copy of ``run``'s folder."""
    shutil.copytree(Path(run.run_dir).parent, copy)
    (copy / "LATEST").write_text(Path(run.run_dir).name + "\n", encoding="utf-8")
    return copy / Path(run.run_dir).name


def assert_tables_equal(a: str, b: str) -> None:
    for name in TABLES:
        left, right = table(a, name), table(b, name)
        assert left.equals(right), (name, [c for c in left.schema.names
                                           if not left.column(c).equals(right.column(c))])


@pytest.fixture(scope="module", autouse=True)
def keep_state():
    """The state table (chunkline/state.py) is written here: these tests hold it to a rebuild."""
    from chunkline.pipeline import build

    before, build.KEEP_STATE = build.KEEP_STATE, True
    yield
    build.KEEP_STATE = before


@pytest.fixture(scope="module")
def carried(keep_state, tmp_path_factory):
    base = tmp_path_factory.mktemp("carry")
    corpus = base / "corpus"
    write_corpus(corpus)
    first = job(corpus, base / "index")
    change_corpus(corpus)
    second = job(corpus, base / "index")
    # The same input from nothing, weighed against the first run's recorded reference length.
    rebuild = job(corpus, base / "rebuild", "output.carry=false", f"output.previous={first.run_dir}")
    return base, corpus, first, second, rebuild


def test_a_rerun_carries_what_no_change_touches_and_equals_a_rebuild(carried) -> None:
    _, _, first, second, rebuild = carried
    assert first.counts["documents_new"] == first.counts["kept"] == 30
    assert "documents carried" not in format_summary(first)  # a first run has nothing to carry
    c = second.counts
    # Redone, their input as it was: doc001-doc004 (the line turned boilerplate) and doc030
    # (its survivor doc005 is gone). Changed: doc007 (front matter). doc020's edit is the very
    # line now stripped: its rows are those of the last run, so it is carried.
    assert (c["documents_redone"], c["documents_changed"]) == (5, 1)
    assert c["documents_recomputed"] == 6
    assert c["documents_new"] == 1  # doc009z
    assert c["documents_gone"] == 2  # doc005 deleted, doc010 now a near twin's duplicate
    assert c["documents_carried"] == c["kept"] - 7 == 23
    assert "23 documents carried" in format_summary(second) and "5 redone" in format_summary(second)
    assert c["chunks_carried"] > 0 and rebuild.counts["documents_carried"] == 0
    assert_tables_equal(second.run_dir, rebuild.run_dir)
    statuses = dict(zip(*table(second.run_dir, "documents").select(["doc_id", "status"]).to_pydict().values()))
    assert statuses["doc010.md"] == "duplicate" and statuses["doc030.md"] == "kept"
    # The memo: the rerun's own segments hold exactly the results it computed, by kind (the
    # changed and new documents'); it lists the first run's segments beside them, unwritten.
    own, earlier = {}, set()
    for entry in memo_listing(second.run_dir):
        if entry["path"].startswith(Path(second.run_dir).name + "/"):
            own[entry["kind"]] = own.get(entry["kind"], 0) + entry["rows"]
        else:
            earlier.add(entry["path"])
    memo = memo_counts(second.run_dir)
    assert all(own[kind] == memo[kind]["computed"] > 0
               for kind in ("credentials", "line_keys", "signature", "doc_hash")), (own, memo)
    # Cleaning records only "unchanged" (a text it changes is cleaned again, never stored).
    assert all(rows <= memo[kind]["computed"] for kind, rows in own.items()), (own, memo)
    assert earlier == {e["path"] for e in memo_listing(first.run_dir)}


def test_settled_documents_sent_in_many_batches_give_the_same_rerun(carried, tmp_path, monkeypatch) -> None:
    """A reader sends its settled documents a few at a time (as it does past
    ``SETTLED_BATCH``, a bundle's worth never one element): the rerun is the same."""
    from chunkline.transforms import read

    _, corpus, first, second, rebuild = carried
    copy_published(first, tmp_path / "index")
    monkeypatch.setattr(read, "SETTLED_BATCH", 3)
    again = job(corpus, tmp_path / "index")
    assert again.counts["documents_carried"] == second.counts["documents_carried"] == 23
    assert_tables_equal(again.run_dir, rebuild.run_dir)


def test_the_state_table_holds_what_the_corpus_wide_stages_decided_on(carried) -> None:
    """One state row per kept or duplicate document, by its place: the decision and survivor
    the documents table states, the exact hash, and, for a text boilerplate left alone, the
    line keys it counted and the band keys of its MinHash signature (chunkline.state)."""

    from chunkline.boilerplate import line_keys
    from chunkline.minhash import MinHasher, band_digests, band_key_array
    from chunkline.pipeline.options import stage_options
    from chunkline.records import doc_hash

    _, corpus, _, second, _ = carried
    documents = {row["doc_id"]: row for row in table(second.run_dir, "documents").to_pylist()
                 if row["status"] != "rejected"}
    state = table(second.run_dir, "state").to_pylist()
    assert sorted(row["doc_id"] for row in state) == sorted(documents)
    assert [(row["uri"], row["position"]) for row in state] == sorted(
        (row["uri"], row["position"]) for row in state)
    stages = stage_options(load_config(ROOT / "configs" / "local.yaml", [f"input.pattern={corpus}/**"]))
    near = stages.near_duplicates
    hasher, (bands, rows) = MinHasher(near), near.lsh()
    stripped = 0
    for row in state:
        document = documents[row["doc_id"]]
        assert (row["status"], row["doc_hash"], row["input_digest"]) == (
            document["status"], document["doc_hash"], document["input_digest"])
        assert row["survivor"] == (document["duplicate_of"] or row["doc_id"])
        signature = hasher.signatures([document["text"]])[0]
        expected = band_digests(band_key_array(signature[None, :], bands, rows))[0]
        assert row["bands"] == expected.tolist()
        if row["text_hash"] != bytes.fromhex(document["doc_hash"]):
            stripped += 1  # boilerplate dropped lines: the counted text was the longer one
            continue
        assert row["text_hash"] == bytes.fromhex(doc_hash(document["text"]))
        assert row["line_keys"] == sorted(int(key, 16) for key in line_keys(document["text"], stages.boilerplate))
    assert 0 < stripped < len(state)  # the newsletter line turned boilerplate in five documents
    # The reader tells each document read as the first run's state row holds it.
    before = {(row["doc_id"], row["input_digest"]) for row in table(carried[2].run_dir, "state").to_pylist()}
    expected = sum((row["doc_id"], row["input_digest"]) in before for row in state)
    assert 0 < expected < len(state)
    assert load_manifest(second.run_dir).counts["documents_settled"] == expected


def test_a_second_unchanged_rerun_carries_every_document(carried, tmp_path) -> None:
    base, corpus, _, second, _ = carried
    third = job(corpus, base / "index")
    assert third.counts["documents_carried"] == third.counts["kept"]
    assert third.counts["documents_recomputed"] == third.counts["documents_new"] == 0
    assert_tables_equal(second.run_dir, third.run_dir)
    assert table(second.run_dir, "carry").equals(table(third.run_dir, "carry"))
    # Every text was seen by the run before: nothing is scanned, keyed or signed again.
    # Every shard's rows are the last run's, as they were: the run lists the files that hold
    # them (merge-on-read) and writes none of its own.
    for name in ("chunks", "carry", "documents"):
        assert listed(third.run_dir, name) == listed(second.run_dir, name), name
    assert not list(Path(third.run_dir).glob("c*-*.parquet"))
    assert not list(Path(third.run_dir).glob("documents-*.parquet"))
    memo = memo_counts(third.run_dir)
    assert memo.pop("read") == {"recalled": 0, "computed": 0}  # files are read: not trusted
    assert all(kind["computed"] == 0 for kind in memo.values()), memo
    assert all(kind["recalled"] > 0 for kind in memo.values()), memo
    # The memo is a log: a segment the run before used less than MIN_USED of (doc005 deleted,
    # doc020 edited) is no longer listed, and what this run recalled from it is its only
    # writing; the rest it lists as they are.
    before, now = memo_listing(second.run_dir), memo_listing(third.run_dir)
    dropped = [e for e in before if e["path"] not in {n["path"] for n in now}]
    assert dropped and all(e["used"] < MIN_USED * e["rows"] for e in dropped), dropped
    assert all(e["used"] >= MIN_USED * e["rows"] for e in before if e not in dropped)
    own = [e for e in now if e["path"].startswith(Path(third.run_dir).name + "/")]
    # Every document was passed by unchanged (transforms/settle.py): each entry it holds in a
    # dropped segment is written again, one of a text it had before an edit included (which
    # entries its current texts would ask for only the stages that make them know).
    assert sum(e["rows"] for e in own) >= sum(e["used"] for e in dropped) > 0
    # The output copied and collected down to the newest run: the files it lists are exactly
    # what stays of the earlier runs' folders, and a rerun recalls every result from them and
    # writes no segment (every listed one fully used).
    copy = tmp_path / "index"
    shutil.copytree(base / "index", copy)
    collect(str(copy), keep=1)
    assert not (copy / Path(second.run_dir).name / "manifest.json").exists()
    assert all((copy / e["path"]).is_file() for e in now)
    fourth = job(corpus, copy)
    memo = memo_counts(fourth.run_dir)
    memo.pop("read")
    assert all(kind["computed"] == 0 for kind in memo.values()), memo
    assert not list((Path(fourth.run_dir) / "memo").glob("*.parquet"))
    assert [e["path"] for e in memo_listing(fourth.run_dir)] == [e["path"] for e in now]
    assert_tables_equal(third.run_dir, fourth.run_dir)


def memo_counts(run_dir: str) -> dict:
    return json.loads((Path(run_dir) / "manifest.json").read_text(encoding="utf-8"))["memo"]


def memo_listing(run_dir: str) -> list[dict]:
    """The manifest's ``memo`` table: the segments the run lists, its own and earlier runs'."""
    return json.loads((Path(run_dir) / "manifest.json").read_text(encoding="utf-8"))["tables"][MEMO_TABLE]


def test_a_damaged_memo_is_computed_again_never_misread(carried, tmp_path) -> None:
    _, corpus, _, second, rebuild = carried
    copy = tmp_path / "index"
    run_dir = copy_published(second, copy)
    # Without the run's settle signature every document is processed, none passed by on its
    # state row (transforms/settle.py): the memo is what is read.
    (run_dir / SETTLE_SIGNATURE).unlink()
    segments = sorted((run_dir / "memo").glob("*.parquet"))
    assert {s.name.split("-")[0] for s in segments} >= {"credentials", "line_keys", "signature"}
    for segment in segments:  # a byte of every stored value flipped, or the file cut short
        data = bytearray(segment.read_bytes())
        if "signature" in segment.name:
            segment.write_bytes(bytes(data[: len(data) // 2]))
        else:
            data[len(data) // 3] ^= 0xFF
            segment.write_bytes(bytes(data))
    again = job(corpus, copy)
    assert_tables_equal(again.run_dir, rebuild.run_dir)
    memo = memo_counts(again.run_dir)
    assert memo["signature"]["computed"] > 0 and memo["line_keys"]["computed"] > 0, memo


def _one_file(listing: dict) -> Listing:
    """A listing of one table file, as a manifest's ``tables`` states it."""
    return parse_listing(listing, where="a test's listing")


def test_damaged_previous_rows_are_computed_again(carried, tmp_path) -> None:
    _, corpus, _, second, rebuild = carried
    copy = tmp_path / "index"
    run_dir = copy_published(second, copy)  # other tests publish later runs beside it
    files = listed(str(run_dir), "chunks")
    shards = [Path(file.path) for file in files]
    # One row's text no longer matches its search text; another shard is cut in half.
    first_shard = pq.read_table(shards[0])
    live = read_table(str(run_dir), _one_file({"format": 2, "tables": {"chunks": [
        {"path": files[0].name, "rows": files[0].rows, "deleted": list(files[0].deleted)}]}}), "chunks")
    victim = live.column("doc_id")[0].as_py()
    at = first_shard.column("doc_id").to_pylist().index(victim)
    texts = first_shard.column("text").to_pylist()
    texts[at] = texts[at] + " tampered"
    pq.write_table(first_shard.set_column(first_shard.schema.get_field_index("text"), "text",
                                          pa.array(texts)), shards[0])
    lost = len(set(read_table(str(run_dir), _one_file({"format": 2, "tables": {"chunks": [
        {"path": files[1].name, "rows": files[1].rows, "deleted": list(files[1].deleted)}]}}),
        "chunks", ["doc_id"]).column("doc_id").to_pylist()))
    shards[1].write_bytes(shards[1].read_bytes()[: shards[1].stat().st_size // 2])
    # The tampered shard is no longer the file its sidecar recorded: none of its documents is
    # carried (a rewrite may keep each row consistent), not only the one whose row shows it.
    tampered = len(set(live.column("doc_id").to_pylist()))
    again = job(corpus, copy)
    assert again.counts["carry_rejected"] == lost + tampered
    assert again.counts["documents_carried"] == again.counts["kept"] - lost - tampered
    assert victim in set(table(again.run_dir, "chunks").column("doc_id").to_pylist())
    assert_tables_equal(again.run_dir, rebuild.run_dir)


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x10  # inside a column chunk's pages: the size stays, a checksum fails
    path.write_bytes(bytes(data))


def _rewrite_upper_cased(path: Path) -> None:
    """The same rows, each text and search text upper-cased alike: every row consistent, every
    count as the manifest states, only the bytes differ."""
    rows = pq.read_table(path)
    for name in ("text", "search_text"):
        rows = rows.set_column(rows.schema.get_field_index(name), name, pc.utf8_upper(rows.column(name)))
    pq.write_table(rows, path, compression="zstd")


@pytest.mark.parametrize("damage", [_flip_a_byte, _rewrite_upper_cased], ids=["bit-flip", "same-rows"])
def test_a_referenced_file_changed_since_written_is_never_served_and_recomputed(carried, tmp_path,
                                                                               damage) -> None:
    """A chunks file an earlier run wrote and the published run still references (its rows kept
    where they lie), changed afterwards: query, Index and publish refuse it in one line (exit 2 for
    the commands; sync reads through the same reader: test_merge_on_read), and the next run
    computes its documents again, equal to a rebuild."""
    import io

    from chunkline.index.search import Index
    from chunkline.index.tables import TableFileError
    from chunkline.pipeline.cli import main

    _, corpus, _, second, rebuild = carried
    copy = tmp_path / "index"
    run_dir = copy_published(second, copy)
    older = [file for file in listed(str(run_dir), "chunks") if file.folder != run_dir.name]
    assert older, "the rerun keeps rows in the first run's files"
    target = Path(older[0].path)
    damage(target)
    with pytest.raises(TableFileError) as refused:
        Index.open(str(copy))
    assert str(target) in str(refused.value) and "\n" not in str(refused.value)
    # Its size and digest in the manifest are those recorded when it was written, not measured
    # again by the run that kept its rows.
    (entry,) = [file for file in listed(str(run_dir), "chunks") if file.path == str(target)]
    assert entry.digest is not None and entry.bytes is not None

    def cli(*argv: str) -> tuple[int, list[str]]:
        out, err = io.StringIO(), io.StringIO()
        return main(list(argv), out, err), err.getvalue().splitlines()

    code, lines = cli("query", str(copy), "robot arm calibration", "--mode", "sparse")
    assert code == 2 and len(lines) == 1 and str(target) in lines[0], lines
    code, lines = cli("publish", str(copy), run_dir.name)
    assert code != 0 and any(target.name in line for line in lines), lines
    again = job(corpus, copy)
    assert again.published, again.problems
    assert_tables_equal(again.run_dir, rebuild.run_dir)
    # The damaged file's rows are nowhere in what the new run serves.
    assert str(target) not in {file.path for file in listed(again.run_dir, "chunks")}


def test_a_shard_with_its_recorded_digest_is_not_decoded_to_be_trusted(carried, tmp_path,
                                                                         monkeypatch) -> None:
    import hashlib

    from chunkline.transforms import carry
    from chunkline.transforms.write import SHARD_DIGEST_KEY

    _, corpus, first, second, rebuild = carried
    # Every sidecar names its shard's bytes.
    for run_dir in (first.run_dir, second.run_dir):
        for side in sorted(Path(run_dir).glob("carry-*.parquet")):
            shard = side.with_name(side.name.replace("carry", "chunks"))
            recorded = pq.read_metadata(side).metadata[SHARD_DIGEST_KEY].decode()
            assert recorded == hashlib.blake2b(shard.read_bytes(), digest_size=16).hexdigest()
    copy = tmp_path / "index"
    run_dir = copy_published(second, copy)
    chunk_file = listed(str(run_dir), "chunks")[0]
    shard = Path(chunk_file.path)
    pair = (str(shard), str(shard).replace("chunks-", "carry-"))
    decoded = []
    checked = carry._prefix_problems
    monkeypatch.setattr(carry, "_prefix_problems", lambda chunks: decoded.append(1) or checked(chunks))
    intact = carry.verify_pair(*pair, None, True, chunk_file.deleted)
    assert decoded == [] and intact and all(problem is None for _, _, problem in intact)
    # The same rows in other bytes (another codec): not the file that was written, so none of
    # it is carried (a rewrite can keep every row consistent); its documents are computed again.
    pq.write_table(pq.read_table(shard), shard, compression="snappy")
    with pytest.raises(ValueError, match="not those its sidecar recorded"):
        carry.verify_pair(*pair, None, True, chunk_file.deleted)
    monkeypatch.undo()
    rewritten = len({doc_id for doc_id, _, _ in intact})
    again = job(corpus, copy)
    assert again.counts["carry_rejected"] == rewritten
    assert again.counts["documents_carried"] == again.counts["kept"] - rewritten
    assert_tables_equal(again.run_dir, rebuild.run_dir)
    # A flipped byte in a sidecar's data pages fails its page checksum: its documents are
    # computed again, never weighed from damaged term counts.
    side_file = listed(again.run_dir, "carry")[0]
    side = Path(side_file.path)
    data = bytearray(side.read_bytes())
    data[len(data) // 3] ^= 0xFF
    side.write_bytes(bytes(data))
    lost = len(set(read_table(again.run_dir, _one_file({"format": 2, "tables": {"chunks": [
        {"path": side_file.name.replace("carry-", "chunks-"), "rows": side_file.rows,
         "deleted": list(side_file.deleted)}]}}), "chunks", ["doc_id"]).column("doc_id").to_pylist()))
    third = job(corpus, copy)
    assert third.counts["carry_rejected"] == lost
    assert_tables_equal(third.run_dir, rebuild.run_dir)


def test_other_processing_carries_nothing(carried, tmp_path) -> None:
    base, corpus, _, _, _ = carried
    changed = job(corpus, base / "index", "split.max_tokens=64")
    assert changed.counts["documents_carried"] == 0
    # No row of the previous run is even read: its signature says it was made otherwise. Its
    # documents table says the input is the same: every document is redone.
    assert changed.counts["documents_redone"] == changed.counts["kept"]
    assert "other processing" in (changed.carry_note or "")
    kept_tokens = pc.max(table(changed.run_dir, "chunks").column("tokens")).as_py()
    assert kept_tokens <= 64


def test_new_bm25_parameters_carry_the_rows_and_weigh_them_again(carried, tmp_path) -> None:
    base, corpus, first, second, _ = carried
    copy = tmp_path / "index"
    copy_published(second, copy)
    # k1 and b are applied as shards are written: the rows are carried, their weights are not.
    again = job(corpus, copy, "sparse.k1=0.6", "sparse.b=0.4")
    assert again.counts["documents_carried"] == again.counts["kept"]
    rebuild = job(corpus, tmp_path / "rebuild", "output.carry=false", "sparse.k1=0.6",
                  "sparse.b=0.4", f"output.previous={second.run_dir}")
    assert_tables_equal(again.run_dir, rebuild.run_dir)
    before = table(second.run_dir, "chunks").column("sparse_values")
    assert not before.equals(table(again.run_dir, "chunks").column("sparse_values"))


@given(st.text(max_size=30), st.text(max_size=30), st.text(max_size=30), st.text(max_size=30))
def test_the_embedding_prefix_comes_back_from_the_search_text(prefix, context, header, text) -> None:
    rest = (context + "\n\n" if context else "") + header + text
    assert embedding_prefix(prefix + rest, context, header, text) == prefix
    assert embedding_prefix(text, context, header, text + "x") is None


def test_trusted_file_metadata_skips_reading_unchanged_files(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    write_corpus(corpus, count=12)
    trust = "input.trust_file_metadata=true"
    first = job(corpus, tmp_path / "index", trust)
    second = job(corpus, tmp_path / "index", trust)
    read = memo_counts(second.run_dir)["read"]
    assert (read["recalled"], read["computed"]) == (13, 0)  # 12 documents and doc030's copy
    assert_tables_equal(first.run_dir, second.run_dir)
    # An edit that moves the modification time is read; one that keeps size and time is not
    # (the trade the setting makes, documented), until the time moves.
    edited, kept = corpus / "doc003.md", corpus / "doc004.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nA new closing line.\n", encoding="utf-8")
    stat = kept.stat()
    kept.write_text(kept.read_text(encoding="utf-8").replace("Manual 004", "Manual 444"),
                    encoding="utf-8")
    os.utime(kept, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    third = job(corpus, tmp_path / "index", trust)
    assert memo_counts(third.run_dir)["read"]["computed"] == 1
    texts = dict(zip(*table(third.run_dir, "documents").select(["doc_id", "text"]).to_pydict().values()))
    assert "A new closing line." in texts["doc003.md"] and "Manual 004" in texts["doc004.md"]
    # Without the setting every file is read: the kept edit is found.
    fourth = job(corpus, tmp_path / "index")
    texts = dict(zip(*table(fourth.run_dir, "documents").select(["doc_id", "text"]).to_pydict().values()))
    assert "Manual 444" in texts["doc004.md"]


def test_a_file_too_big_to_remember_is_read_again_not_held(tmp_path, monkeypatch) -> None:
    """Records stream through the reader; what a file made is remembered only while it fits
    ``READ_MEMO_BYTES``: a bigger one (a dump's piece) is read again by a trusted rerun, with
    the same tables."""
    from chunkline.transforms import read as read_stage

    corpus = tmp_path / "corpus"
    write_corpus(corpus, count=6)
    lines = [json.dumps({"id": f"t{n}", "text": f"Ticket {n}: the pump on line {n} stalls again."})
             for n in range(40)]
    (corpus / "tickets.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(read_stage, "READ_MEMO_BYTES", 2_000)  # the dump's 40 records, not a page
    trust = "input.trust_file_metadata=true"
    first = job(corpus, tmp_path / "index", trust)
    second = job(corpus, tmp_path / "index", trust)
    read = memo_counts(second.run_dir)["read"]
    others = len(list(corpus.iterdir())) - 1
    assert (read["recalled"], read["computed"]) == (others, 1)
    assert_tables_equal(first.run_dir, second.run_dir)
    assert table(second.run_dir, "documents").num_rows == others + 40


def test_one_edited_record_of_a_dump_writes_one_documents_row(tmp_path) -> None:
    """A dump's size and time are not its records' facts: editing one record rewrites the
    dump (its size and time change), and the rerun writes that record's row only; every other
    row stays where the first run wrote it, and the tables equal a rebuild's."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    dump = corpus / "tickets.jsonl"
    lines = [json.dumps({"id": f"t{n}", "text": f"Ticket {n}: the pump on line {n} stalls again."})
             for n in range(40)]
    dump.write_text("\n".join(lines) + "\n", encoding="utf-8")
    first = job(corpus, tmp_path / "index")
    lines[17] = json.dumps({"id": "t17", "text": "Ticket 17: the pump on line 17 was replaced."})
    dump.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.utime(dump, (1_000_000_000, 1_000_000_000))
    second = job(corpus, tmp_path / "index")
    files = listed(second.run_dir, "documents")
    mine = [f for f in files if f.folder == Path(second.run_dir).name]
    theirs = [f for f in files if f.folder == Path(first.run_dir).name]
    assert [(f.rows, len(f.deleted)) for f in theirs] == [(40, 1)], files
    assert [f.rows for f in mine] == [1], files
    metadata = json.loads(table(second.run_dir, "documents").column("metadata")[0].as_py())
    assert metadata == {"source_uri": str(dump)}
    # The 39 unchanged records were passed by (transforms/settle.py): read, never processed,
    # their state rows kept where the first run wrote them, the edited one's written anew.
    assert load_manifest(second.run_dir).counts["documents_settled"] == 39
    assert table(second.run_dir, "state").num_rows == 40
    state_files = listed(second.run_dir, "state")
    assert sorted((f.folder == Path(second.run_dir).name, f.rows, len(f.deleted)) for f in state_files) == [
        (False, 40, 1), (True, 1, 0)], state_files
    # Weighed against the first run's recorded reference length, as the rerun is.
    rebuild = job(corpus, tmp_path / "rebuild", "output.carry=false", f"output.previous={first.run_dir}")
    assert_tables_equal(second.run_dir, rebuild.run_dir)


def test_two_worker_processes_recall_what_either_computed(tmp_path, monkeypatch) -> None:
    """The memo is loaded where each piece is read and travels with its documents: a rerun by
    two SDK worker processes, each reading some of the pieces, computes nothing again, whichever
    process computed a result the night before."""
    from chunkline.transforms.progress import PIECES_READ, PROGRESS_ENV

    corpus = tmp_path / "corpus"
    write_corpus(corpus, count=6)
    rng = random.Random(3)
    with (corpus / "tickets.jsonl").open("w", encoding="utf-8") as handle:
        for n in range(60):
            handle.write(json.dumps({"id": f"t{n}", "text": f"Ticket {n}. {paragraph(rng, 2)}"}) + "\n")
    two = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")
    settings = [f"input.pattern={corpus}/**", f"output.path={tmp_path / 'index'}", "embed=null",
                "input.jsonl.slice_bytes=2000"]
    first = run(load_config(ROOT / "configs" / "local.yaml", settings), two)
    # Within the run: dedupe recalls every hash the boilerplate stage computed (no line is
    # stripped here, so the texts are the same), in whichever process each stage ran.
    hashes = memo_counts(first.run_dir)["doc_hash"]
    assert hashes["recalled"] == hashes["computed"] == first.counts["documents"], hashes
    tallies = tmp_path / "tallies"
    tallies.mkdir()
    monkeypatch.setenv(PROGRESS_ENV, str(tallies))  # the worker processes inherit it
    second = run(load_config(ROOT / "configs" / "local.yaml", settings), two)
    readers = [path for path in tallies.glob("*.json")
               if json.loads(path.read_text(encoding="utf-8")).get(PIECES_READ)]
    assert len(readers) >= 2, readers
    memo = memo_counts(second.run_dir)
    memo.pop("read")
    assert all(kind["computed"] == 0 for kind in memo.values()), memo
    # Every kind recalled (no line is frequent enough here for a strip decision), each entry
    # counted once against the segment it lies in, whichever process recalled it: the rerun
    # lists the first run's segments, every entry used, and writes none.
    assert all(kind["recalled"] > 0 for name, kind in memo.items() if name != "strip"), memo
    assert not list((Path(second.run_dir) / "memo").glob("*.parquet"))
    listed = memo_listing(second.run_dir)
    assert [e["path"] for e in listed] == [e["path"] for e in memo_listing(first.run_dir)]
    assert all(e["used"] == e["rows"] and e["age"] == 1 for e in listed), listed
    assert_tables_equal(first.run_dir, second.run_dir)


def test_each_run_keeps_its_frequent_line_keys(carried) -> None:
    """The run's frequent keys are kept beside its tables: the line that turned boilerplate is
    what tells the second run's set from the first's."""
    from chunkline.boilerplate import BoilerplateOptions, line_keys
    from chunkline.key_sets import read_frequent

    _, _, first, second, rebuild = carried
    before, after = read_frequent(first.run_dir), read_frequent(second.run_dir)
    assert list(after) == sorted(after) and after.tolist() == read_frequent(rebuild.run_dir).tolist()
    assert set(before.tolist()) ^ set(after.tolist()) == {
        int(key, 16) for key in line_keys(NEWSLETTER, BoilerplateOptions())}


def test_the_plan_hands_carry_workers_deletion_files_by_path_not_positions(tmp_path, monkeypatch) -> None:
    """A previous run deleting 60,000 rows of a pair and of a documents shard (in its shards'
    deletion files, format 4): the plan's CarrySource names those files and counts, reads none
    of them on the driver, and pickles to a few KB (the positions as Python ints would be
    ~300 KB); a worker asking for a pair's positions reads them from its shard's file."""
    import pickle

    from chunkline.index import tables
    from chunkline.index.tables import shard_deletion_file
    from chunkline.pipeline.plan import carry_source

    output, run_id, rows = tmp_path / "index", "20990101T000000Z-00000000-000001", 200_000
    run_dir = output / run_id
    run_dir.mkdir(parents=True)
    ids = pa.array([f"d{n:06d}" for n in range(rows)])
    pq.write_table(pa.table({"doc_id": ids}), run_dir / "chunks-00000-of-00001.parquet")
    pq.write_table(pa.table({"doc_id": ids}), run_dir / "carry-00000-of-00001.parquet")
    pq.write_table(pa.table({"doc_id": ids}), run_dir / "documents-00000-of-00001.parquet")
    deleted = list(range(0, rows, 3))[:60_000]

    def write(path: str, data: bytes) -> None:
        (output / path).parent.mkdir(parents=True, exist_ok=True)
        (output / path).write_bytes(data)

    listing, deletes = {}, {}
    for table in ("chunks", "carry", "documents"):
        entry = {"path": f"{run_id}/{table}-00000-of-00001.parquet", "rows": rows, "deleted": deleted, "shard": 0}
        listing[table], described = shard_deletion_file(run_id, table, 0, [entry], write)
        deletes[table] = [described]
    (run_dir / "manifest.json").write_text(json.dumps({
        "run_id": run_id, "counts": {"documents": rows, "kept": rows, "chunks": rows}, "config": {},
        "carry_signature": "sig", "format": 4, "tables": {**listing, "rejected": []}, "deletes": deletes}))
    (output / "LATEST").write_text(run_id + "\n")
    config = load_config(ROOT / "configs" / "local.yaml", [f"input.pattern={tmp_path}/in/**",
                                                            f"output.path={output}", "embed=null"])
    read = []
    real = tables._read_deletion_file
    monkeypatch.setattr(tables, "_read_deletion_file", lambda path, described: read.append(path) or real(path, described))
    monkeypatch.setattr(tables, "_READ_DELETES", type(tables._READ_DELETES)())
    source, note = carry_source(config, "sig", None, False)
    assert note is None and len(source.pairs) == 1 and read == []
    assert [(c.count, s.count) for c, s in source.deleted] == [(60_000, 60_000)]
    assert [d.count for d in source.documents_deleted] == [60_000]
    assert len(pickle.dumps(source)) < 4_000 < len(pickle.dumps(deleted)) / 50
    worker = pickle.loads(pickle.dumps(source))
    assert worker.deleted_of(0) == tuple(deleted)
    assert read == [str(output / run_id / "deletes" / "chunks-00000.parquet")]
