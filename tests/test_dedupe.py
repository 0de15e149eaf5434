"""The Dedupe stage: exact and near duplicates on Beam, measured on a planted-duplicate corpus
(random documents plus edited copies at known true Jaccard), chains, survivors, determinism."""

from __future__ import annotations

import dataclasses
import json
import random
import tempfile
from dataclasses import dataclass
from itertools import accumulate, combinations
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.io import WriteToText
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from chunkline.minhash import MinHasher, MinHashOptions, estimate_jaccard
from chunkline.records import DUPLICATE, KEPT, Document, Rejected, doc_hash
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.dedupe import Dedupe, ExactDedupe

THRESHOLD = 0.8
NEAR = MinHashOptions(threshold=THRESHOLD)
SHINGLE = NEAR.shingle_size


# --- The planted-duplicate generator -----------------------------------------------------------


def shingles(words: list[str], n: int = SHINGLE) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(max(1, len(words) - n + 1))}


def jaccard(a: list[str], b: list[str]) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


@dataclass(frozen=True)
class Planted:
    documents: list[Document]
    words: dict[str, list[str]]  # doc_id -> the words its text is made of (the ground truth)
    pairs: dict[tuple[str, str], float]  # planted (original, copy) -> true Jaccard


class Generator:
    """Random documents over a Zipf-distributed pseudo-word vocabulary, and copies edited by
    substitutions, insertions and deletions of fresh words until their true word-5-gram Jaccard
    with the original reaches a target. Copies are also laid out anew (other sentence and
    paragraph breaks, other capitalisation), so that no copy is an exact duplicate."""

    def __init__(self, seed: int, vocab_size: int = 20_000) -> None:
        self.rng = random.Random(seed)
        syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
        vocab = {"".join(self.rng.choices(syllables, k=self.rng.randint(1, 4))) for _ in range(vocab_size)}
        self.vocab = sorted(vocab)
        self.rng.shuffle(self.vocab)
        weights = [1.0 / (rank + 1) for rank in range(len(self.vocab))]
        self.cum_weights = list(accumulate(weights))
        self.fresh = 0

    def words(self, n: int) -> list[str]:
        return self.rng.choices(self.vocab, cum_weights=self.cum_weights, k=n)

    def render(self, words: list[str]) -> str:
        """Words as prose: sentences of 6-18 words, paragraphs of 2-5 sentences."""
        sentences, i = [], 0
        while i < len(words):
            k = self.rng.randint(6, 18)
            sentence = words[i : i + k]
            if self.rng.random() < 0.5:
                sentence = [sentence[0].capitalize(), *sentence[1:]]
            sentences.append(" ".join(sentence) + self.rng.choice([".", ".", "!", ";", ","]))
            i += k
        paragraphs, j = [], 0
        while j < len(sentences):
            k = self.rng.randint(2, 5)
            paragraphs.append(" ".join(sentences[j : j + k]))
            j += k
        return "\n\n".join(paragraphs) + "\n"

    def _fresh_word(self) -> str:
        self.fresh += 1
        return f"fresh{self.fresh}x"

    def edited(self, words: list[str], target: float, at_least: bool) -> list[str]:
        """A copy whose true Jaccard with ``words`` is the closest to ``target`` from above
        (``at_least``) or from below. Each edit only destroys original shingles and adds new
        ones, so the Jaccard falls monotonically with the number of edits: binary search."""
        edits = [(self.rng.choice("sid"), self.rng.random()) for _ in range(len(words))]

        def apply(count: int) -> list[str]:
            out = list(words)
            for kind, where in edits[:count]:
                pos = int(where * len(out))
                if kind == "s" and out:
                    out[min(pos, len(out) - 1)] = self._fresh_word()
                elif kind == "i":
                    out.insert(pos, self._fresh_word())
                elif len(out) > SHINGLE:
                    del out[min(pos, len(out) - 1)]
            return out

        low, high = 0, len(edits)  # J(apply(0)) = 1
        while low < high:  # the largest count with J >= target
            mid = (low + high + 1) // 2
            if jaccard(words, apply(mid)) >= target:
                low = mid
            else:
                high = mid - 1
        return apply(low if at_least else low + 1)


def planted_corpus(seed: int, singletons: int, positives: int, negatives: int) -> Planted:
    """``singletons`` random documents; ``positives`` originals each with one copy at true
    Jaccard in [threshold + 0.05, 1]; ``negatives`` originals each with one copy at true
    Jaccard in [0.3, threshold - 0.15] ("neg", never to be merged), and as many again in
    [threshold - 0.1, threshold - 0.02] ("miss": near misses, which only the estimate's noise
    could merge, and which count against precision if it does)."""
    gen = Generator(seed)
    docs: dict[str, list[str]] = {}
    pairs: dict[tuple[str, str], float] = {}
    for i in range(singletons):
        docs[f"single-{i:04d}"] = gen.words(gen.rng.randint(150, 400))
    for kind, count, low, high, at_least in (
        ("pos", positives, THRESHOLD + 0.05, 1.0, True),
        ("neg", negatives, 0.3, THRESHOLD - 0.15, False),
        ("miss", negatives, THRESHOLD - 0.1, THRESHOLD - 0.02, False),
    ):
        for i in range(count):
            original = gen.words(gen.rng.randint(150, 400))
            target = gen.rng.uniform(low, high)
            copy = gen.edited(original, target, at_least)
            a, b = f"{kind}-{i:04d}-a", f"{kind}-{i:04d}-b"
            docs[a], docs[b] = original, copy
            pairs[(a, b)] = jaccard(original, copy)
    ids = list(docs)
    gen.rng.shuffle(ids)
    documents = [Document(doc_id, f"/planted/{doc_id}", gen.render(docs[doc_id])) for doc_id in ids]
    return Planted(documents, docs, pairs)


def test_generator_plants_what_it_says() -> None:
    planted = planted_corpus(1, singletons=5, positives=20, negatives=10)
    positive = [j for (a, _), j in planted.pairs.items() if a.startswith("pos")]
    negative = [j for (a, _), j in planted.pairs.items() if a.startswith("neg")]
    miss = [j for (a, _), j in planted.pairs.items() if a.startswith("miss")]
    assert len(positive) == 20 and min(positive) >= THRESHOLD + 0.05
    assert len(negative) == 10 and max(negative) <= THRESHOLD - 0.15 and min(negative) > 0.2
    assert len(miss) == 10 and THRESHOLD - 0.11 < min(miss) and max(miss) < THRESHOLD
    assert max(positive) > 0.97  # the whole range, up to reformatted-only copies
    texts = [d.text for d in planted.documents]
    assert len(set(texts)) == len(texts)  # no exact duplicates: all of it is near-dup work
    # Unrelated documents share (almost) no shingles.
    singles = [w for d, w in planted.words.items() if d.startswith("single")]
    assert max(jaccard(a, b) for a, b in combinations(singles, 2)) < 0.05


# --- Running the stage -------------------------------------------------------------------------


def run_dedupe(documents: list[Document], near: MinHashOptions | None, *, exact: bool = True,
               beam_args: tuple[str, ...] = (), access: bool = False):
    """Statuses (sorted rows), kept doc_ids (sorted) and the dedupe counters of one run. The rows
    come back through files, so the same code reads a run with worker processes."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp)
        pipeline = beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(list(beam_args)))
        out = pipeline | beam.Create(documents) | Dedupe(exact=exact, near=near, access=access)
        (out.statuses
         | "StatusRow" >> beam.Map(lambda s: json.dumps([s.doc_id, s.status, s.duplicate_of]))
         | "WriteStatuses" >> WriteToText(str(target / "statuses"), shard_name_template=""))
        (out.kept
         | "KeptId" >> beam.Map(lambda d: d.doc_id)
         | "WriteKept" >> WriteToText(str(target / "kept"), shard_name_template=""))
        result = pipeline.run()
        result.wait_until_finish()
        rows = [tuple(json.loads(line)) for line in (target / "statuses").read_text().splitlines()]
        kept = (target / "kept").read_text().splitlines()
    query = result.metrics().query(MetricsFilter().with_namespace("dedupe"))
    counters: dict[str, int] = {}
    for counter in query["counters"]:
        counters[counter.key.metric.name] = counters.get(counter.key.metric.name, 0) + counter.committed
    return sorted(rows), sorted(kept), counters


def survivors(rows: list[tuple]) -> dict[str, str]:
    return {doc_id: duplicate_of or doc_id for doc_id, _, duplicate_of in rows}


@pytest.fixture(scope="module")
def planted() -> Planted:
    return planted_corpus(2024, singletons=300, positives=300, negatives=100)


@pytest.fixture(scope="module")
def planted_run(planted: Planted):
    return run_dedupe(planted.documents, NEAR)


@pytest.mark.slow
def test_every_document_has_exactly_one_status(planted: Planted, planted_run) -> None:
    rows, kept, counters = planted_run
    assert [r[0] for r in rows] == sorted(d.doc_id for d in planted.documents)
    by_id = {doc_id: (status, of) for doc_id, status, of in rows}
    assert sorted(d for d, (status, _) in by_id.items() if status == KEPT) == kept
    for status, of in by_id.values():
        assert (status == KEPT) == (of is None)
        if of is not None:
            assert by_id[of] == (KEPT, None)  # a duplicate points at a survivor, never a duplicate
    assert counters["near_duplicates"] == len(rows) - len(kept)
    assert counters.get("exact_duplicates", 0) == 0
    assert counters["candidate_pairs"] >= counters["verified_pairs"] >= counters["near_duplicates"]
    assert counters.get("near_unsettled", 0) == 0  # components from the star rounds, no fallback


def test_precision_and_recall_on_planted_pairs(planted: Planted, planted_run) -> None:
    rows, _, counters = planted_run
    clusters: dict[str, list[str]] = {}
    for doc_id, survivor in survivors(rows).items():
        clusters.setdefault(survivor, []).append(doc_id)
    predicted = [tuple(sorted(p)) for members in clusters.values() for p in combinations(members, 2)]
    true_j = {pair: jaccard(planted.words[pair[0]], planted.words[pair[1]]) for pair in predicted}
    precision = sum(j >= THRESHOLD for j in true_j.values()) / max(1, len(predicted))
    wanted = [pair for pair, j in planted.pairs.items() if j >= THRESHOLD + 0.05]
    found = set(predicted)
    recall = sum(tuple(sorted(pair)) in found for pair in wanted) / len(wanted)
    misses = sum(pair in found for pair in planted.pairs if pair[0].startswith("miss"))
    print(f"\nplanted: {len(planted.documents)} docs, {len(wanted)} pairs >= t+0.05, "
          f"{len(predicted)} predicted; precision {precision:.4f}, recall {recall:.4f}; "
          f"near misses merged {misses}/100; candidate pairs {counters['candidate_pairs']}")
    assert len(wanted) == 300 and len(predicted) > 250
    assert precision >= 0.99
    assert recall >= 0.95
    # No negative (true Jaccard <= threshold - 0.15) was merged.
    negatives = {pair for pair in planted.pairs if pair[0].startswith("neg")}
    assert not negatives & found


def chain_documents() -> tuple[list[Document], dict[str, list[str]]]:
    """A~B and B~C (true Jaccard >= threshold + 0.05), A and C too far apart to be a pair."""
    gen = Generator(7)
    a = gen.words(400)
    b = gen.edited(a, 0.86, at_least=True)
    c = gen.edited(b, 0.86, at_least=True)
    words = {"a.md": a, "b.md": b, "c.md": c}
    docs = [Document(doc_id, f"/chain/{doc_id}", gen.render(w)) for doc_id, w in words.items()]
    return docs, words


@pytest.mark.slow
def test_chain_collapses_to_one_survivor() -> None:
    docs, words = chain_documents()
    hasher = MinHasher(NEAR)
    sig = {d.doc_id: hasher.signature(d.text) for d in docs}
    assert jaccard(words["a.md"], words["b.md"]) >= 0.85 and jaccard(words["b.md"], words["c.md"]) >= 0.85
    assert jaccard(words["a.md"], words["c.md"]) < THRESHOLD
    assert estimate_jaccard(sig["a.md"], sig["c.md"]) < THRESHOLD  # no direct edge A-C
    # c-copy.md: an exact copy of C (spacing only) that wins C's exact group ("-" < ".").
    copy = Document("c-copy.md", "/chain/c-copy.md", docs[2].text.replace(" ", "  "))
    unrelated = Document("z.md", "/chain/z.md", Generator(8).render(Generator(9).words(300)))
    rows, kept, counters = run_dedupe([*reversed(docs), copy, unrelated], NEAR)
    assert rows == [
        ("a.md", KEPT, None),
        ("b.md", DUPLICATE, "a.md"),
        ("c-copy.md", DUPLICATE, "a.md"),
        ("c.md", DUPLICATE, "a.md"),  # an exact duplicate of a near duplicate: the final survivor
        ("z.md", KEPT, None),
    ]
    assert kept == ["a.md", "z.md"]
    assert counters["exact_duplicates"] == 1 and counters["near_duplicates"] == 2


@pytest.mark.slow
def test_documents_of_two_access_sets_are_never_duplicates_of_each_other() -> None:
    # The chain again, A and B readable by eng, C and its exact copy by sales, and an exact copy
    # of A readable by ops: duplicates merge within one set only (transforms/dedupe.py).
    docs, _ = chain_documents()
    eng, sales = ("eng",), ("sales",)
    a, b, c = (dataclasses.replace(d, principals=p) for d, p in zip(docs, (eng, eng, sales)))
    copy = Document("c-copy.md", "/chain/c-copy.md", c.text.replace(" ", "  "), principals=sales)
    a_ops = Document("a-ops.md", "/chain/a-ops.md", a.text, principals=("ops",))
    rows, kept, counters = run_dedupe([c, b, a, copy, a_ops], NEAR, access=True)
    assert rows == [
        ("a-ops.md", KEPT, None),  # A's exact text, another set
        ("a.md", KEPT, None),
        ("b.md", DUPLICATE, "a.md"),  # near, one set
        ("c-copy.md", KEPT, None),  # C is B's near twin, but B's set is not C's
        ("c.md", DUPLICATE, "c-copy.md"),  # exact, one set
    ]
    assert counters["exact_duplicates"] == 1 and counters["near_duplicates"] == 1


@pytest.mark.slow
def test_longest_survives_with_that_rule() -> None:
    docs, _ = chain_documents()
    longest = max(docs, key=lambda d: len(d.text)).doc_id
    rows, kept, _ = run_dedupe(docs, MinHashOptions(threshold=THRESHOLD, survivor="longest"))
    assert kept == [longest]
    assert {of for _, status, of in rows if status == DUPLICATE} == {longest}


@pytest.mark.slow
def test_near_without_exact() -> None:
    docs, _ = chain_documents()
    same = Document("a-again.md", "/chain/a-again.md", docs[0].text)
    _, kept, counters = run_dedupe([*docs, same], NEAR, exact=False)
    assert kept == ["a-again.md"]  # byte-identical texts are near duplicates too (Jaccard 1)
    assert counters["near_duplicates"] == 3 and "exact_duplicates" not in counters


@pytest.mark.slow
def test_exact_dedupe_api_is_unchanged() -> None:
    docs = [Document("b", "/b", "Same text."), Document("a", "/a", "Same  text.")]
    with fnapi_pipeline() as p:
        out = p | beam.Create(docs) | ExactDedupe(True)
        assert_that(out.statuses | beam.Map(lambda s: (s.doc_id, s.status, s.duplicate_of)),
                    equal_to([("a", KEPT, None), ("b", DUPLICATE, "a")]))


@pytest.mark.slow
def test_documents_without_words_are_never_near_duplicates() -> None:
    docs = [Document("e1", "/e1", "..."), Document("e2", "/e2", "…!"), Document("w", "/w", "Returns")]
    rows, kept, counters = run_dedupe(docs, NEAR)
    # "..." and "…!" have no word characters: their whitespace pieces are their shingles, which
    # differ, so no match.
    assert kept == ["e1", "e2", "w"]
    assert all(status == KEPT for _, status, _ in rows)
    assert counters.get("near_unsigned", 0) == 0 and counters.get("candidate_pairs", 0) == 0


@pytest.fixture(scope="module")
def small_corpus() -> list[Document]:
    planted = planted_corpus(99, singletons=40, positives=40, negatives=15)
    chain, _ = chain_documents()
    return planted.documents + chain


@pytest.fixture(scope="module")
def small_run(small_corpus: list[Document]):
    return run_dedupe(small_corpus, NEAR)


@pytest.mark.slow
def test_same_survivors_across_runs_and_input_order(small_corpus: list[Document], small_run) -> None:
    second = run_dedupe(list(reversed(small_corpus)), NEAR)
    assert second[:2] == small_run[:2]
    assert survivors(second[0])["c.md"] == "a.md"


@pytest.mark.slow
def test_same_survivors_with_two_worker_processes(small_corpus: list[Document], small_run) -> None:
    in_process = small_run
    two_workers = run_dedupe(
        small_corpus, NEAR,
        beam_args=("--direct_num_workers=2", "--direct_running_mode=multi_processing"),
    )
    assert two_workers[:2] == in_process[:2]
    assert sum(status == DUPLICATE for _, status, _ in two_workers[0]) >= 40


# --- One document per id -----------------------------------------------------------------------


def conflicts(docs: list[Document], roots: tuple[str, ...] = ()) -> tuple[list[tuple], list[Rejected]]:
    """(kept (doc_id, uri, position), rejected) of ExactDedupe(enabled=False) over ``docs``."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp)
        pipeline = beam.Pipeline(runner=FnApiRunner())
        out = pipeline | beam.Create(docs) | ExactDedupe(enabled=False, roots=roots)
        (out.kept | "Kept" >> beam.Map(lambda d: json.dumps([d.doc_id, d.uri, d.position]))
         | "WriteKept" >> WriteToText(str(target / "kept"), shard_name_template=""))
        (out.rejected | "Rejected" >> beam.Map(lambda r: json.dumps([r.uri, r.doc_id, r.reason]))
         | "WriteRejected" >> WriteToText(str(target / "rejected"), shard_name_template=""))
        pipeline.run().wait_until_finish()
        kept = sorted(tuple(json.loads(x)) for x in (target / "kept").read_text().splitlines())
        lines = (target / "rejected").read_text().splitlines()
        rejected = [Rejected(*row) for row in sorted(json.loads(x) for x in lines)]
    return kept, rejected


@pytest.mark.slow
def test_repeated_id_keeps_the_first_record_in_input_order() -> None:
    # The first record's text sorts last: order is the file's, never the text's.
    docs = [Document("t", "/x/a.jsonl", "zz first", position=2),
            Document("t", "/x/a.jsonl", "aa third", position=9),
            Document("t", "/x/a.jsonl", "mm second", position=5)]
    for order in (docs, docs[::-1]):
        kept, rejected = conflicts(order)
        assert kept == [("t", "/x/a.jsonl", 2)]
        assert rejected == [
            Rejected("/x/a.jsonl", "/x/a.jsonl#L5",
                     "duplicate doc_id 't': /x/a.jsonl:5 repeats the id of /x/a.jsonl:2, which is kept"),
            Rejected("/x/a.jsonl", "/x/a.jsonl#L9",
                     "duplicate doc_id 't': /x/a.jsonl:9 repeats the id of /x/a.jsonl:2, which is kept"),
        ]


def test_repeated_id_across_files_and_parquet_rows() -> None:
    docs = [Document("t", "/x/b.parquet", "row three", position=3),
            Document("t", "/x/b.parquet", "row zero", position=0),
            Document("t", "/x/a.jsonl", "line seven", position=7),
            Document("m.md", "/y/m.md", "second root"),
            Document("m.md", "/x/m.md", "first root")]
    kept, rejected = conflicts(docs)
    assert kept == [("m.md", "/x/m.md", 0), ("t", "/x/a.jsonl", 7)]
    assert rejected == [
        Rejected("/x/b.parquet", "/x/b.parquet#row0",
                 "duplicate doc_id 't': /x/b.parquet#row0 repeats the id of /x/a.jsonl:7, which is kept"),
        Rejected("/x/b.parquet", "/x/b.parquet#row3",
                 "duplicate doc_id 't': /x/b.parquet#row3 repeats the id of /x/a.jsonl:7, which is kept"),
        Rejected("/y/m.md", "/y/m.md",
                 "duplicate doc_id 'm.md': /y/m.md repeats the id of /x/m.md, which is kept"),
    ]


def test_repeated_id_is_rejected_under_a_path_relative_to_its_input_root() -> None:
    # Every other id is relative to the input root; the repeated id's row named the absolute
    # path. The longest root a file is under is the one its id is relative to.
    docs = [Document("t", "/data/corpus/sub/a.jsonl", "first", position=1),
            Document("t", "/data/corpus/sub/a.jsonl", "second", position=4),
            Document("t", "/data/corpus/z.parquet", "third", position=0),
            Document("t", "/elsewhere/c.jsonl", "fourth", position=2)]
    kept, rejected = conflicts(docs, roots=("/data", "/data/corpus"))
    assert kept == [("t", "/data/corpus/sub/a.jsonl", 1)]
    assert rejected == [
        Rejected("/data/corpus/sub/a.jsonl", "sub/a.jsonl#L4",
                 "duplicate doc_id 't': sub/a.jsonl:4 repeats the id of sub/a.jsonl:1, which is kept"),
        Rejected("/data/corpus/z.parquet", "z.parquet#row0",
                 "duplicate doc_id 't': z.parquet#row0 repeats the id of sub/a.jsonl:1, which is kept"),
        Rejected("/elsewhere/c.jsonl", "/elsewhere/c.jsonl#L2",
                 "duplicate doc_id 't': /elsewhere/c.jsonl:2 repeats the id of sub/a.jsonl:1, which is kept"),
    ]


@pytest.mark.slow
def test_statuses_carry_the_encoding() -> None:
    docs = [Document("a", "/a", "Same text.", encoding="windows-1251"),
            Document("b", "/b", "Same  text.", encoding="utf-16"),
            Document("c", "/c", "Other text.")]
    with fnapi_pipeline() as p:
        out = p | beam.Create(docs) | Dedupe(exact=True, near=NEAR)
        assert_that(out.statuses | beam.Map(lambda s: (s.doc_id, s.status, s.encoding)),
                    equal_to([("a", KEPT, "windows-1251"), ("b", DUPLICATE, "utf-16"),
                              ("c", KEPT, "")]))


@pytest.mark.slow
def test_one_record_twice_gets_one_status_and_one_rejection() -> None:
    # The same record twice (one id, one place, one text): each copy is parked in its own place
    # and the decision names one of them; exactly one is kept, the other is an id conflict.
    same = Document("a", "/x/a.md", "Twice the same text.")
    kept, rejected = conflicts([same, same])
    assert kept == [("a", "/x/a.md", 0)]
    assert [r.doc_id for r in rejected] == ["/x/a.md"]
    rows, kept_ids, counters = run_dedupe([same, same, Document("b", "/x/b.md", "Twice the same text.")],
                                          NEAR)
    assert rows == [("a", KEPT, None), ("b", DUPLICATE, "a")]
    assert kept_ids == ["a"] and counters["id_conflicts"] == 1


@pytest.mark.slow
def test_the_decided_record_is_the_one_released() -> None:
    # Two records under one id with different texts: the first in input order keeps the id,
    # and it is that record's text (not its twin's) that goes on, with that text's status.
    first = Document("t", "/x/a.jsonl", "The first record, kept under the id.", position=1)
    second = Document("t", "/x/a.jsonl", "A second record under the same id.", position=2)
    with fnapi_pipeline() as p:
        out = p | beam.Create([second, first]) | Dedupe(exact=True, near=NEAR)
        assert_that(out.kept | beam.Map(lambda d: (d.doc_id, d.text)),
                    equal_to([("t", first.text)]), label="kept")
        assert_that(out.statuses | beam.Map(lambda s: (s.doc_id, s.text, s.doc_hash)),
                    equal_to([("t", first.text, doc_hash(first.text))]), label="statuses")
