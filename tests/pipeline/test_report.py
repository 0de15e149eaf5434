"""chunkline.pipeline.report: gathering a run (from Parquet shards written with the real schemas and a
manifest), rendering it (escaping, caps, chunk boundaries drawn over the exact text), and the
command."""

from __future__ import annotations

import html
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkline.minhash import MinHasher, MinHashOptions, estimate_jaccard
from chunkline.records import (
    DUPLICATE, KEPT, REJECTED, ChunkRecord, DocumentStatus, Rejected, as_row, chunk_row, chunk_schema,
    doc_hash, document_schema, rejected_schema,
)
from chunkline.pipeline.cli import main as cli
from chunkline.pipeline.report import REPORT, main, write_report
from chunkline.pipeline.report.gather import (
    MAX_CLUSTERS, MAX_REASON_KINDS, SAMPLE_CHARS, SampleChunk, gather, histogram, reason_kind,
)
from chunkline.pipeline.report.render import render, sample_html, segments
from chunkline.pipeline.report.svg import escape
from tests.helpers import damage as damage_file

HOSTILE = "</pre></style><script>alert('x')</script><img src=x onerror=alert(1)> \"q\" & ü 🙂 \r\n"
NEAR = dict(shingle_size=5, num_perm=256, threshold=0.8, seed=1, survivor="smallest_doc_id",
            bands=None, rows=None, false_positive_weight=0.1, max_bucket_pairs=64)


def kept(doc_id: str, text: str, fmt: str = "markdown") -> DocumentStatus:
    return DocumentStatus(doc_id, f"/corpus/{doc_id}", text, doc_hash(text), KEPT, None, "utf-8", fmt)


def duplicate(doc_id: str, text: str, of: str) -> DocumentStatus:
    return DocumentStatus(doc_id, f"/corpus/{doc_id}", text, doc_hash(text), DUPLICATE, of, "utf-8", "markdown")


def chunks_of(doc: DocumentStatus, size: int, headings: tuple[str, ...] = ("Guide",)) -> list[ChunkRecord]:
    """Consecutive chunks of ``size`` characters covering the document."""
    return [ChunkRecord(doc.doc_id, f"{doc.doc_id}#{i}", i, start, min(start + size, len(doc.text)),
                        headings, doc.text[start:start + size], max(1, min(size, len(doc.text) - start) // 4))
            for i, start in enumerate(range(0, len(doc.text), size))]


def make_run(root: Path, statuses: list[DocumentStatus], chunks: list[ChunkRecord],
             rejected: list[Rejected], **manifest: object) -> Path:
    """A run directory as the pipeline writes one: shards with the pipeline's schemas (chunks in
    two shards), a manifest whose counts come from the rows, LATEST naming it."""
    run = root / "run-1"
    run.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([as_row(s, document_schema()) for s in statuses],
                                        schema=document_schema()), run / "documents-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist([as_row(r, rejected_schema()) for r in rejected],
                                        schema=rejected_schema()), run / "rejected-00000-of-00001.parquet")
    schema = chunk_schema(None)
    half = len(chunks) // 2
    for index, part in enumerate((chunks[:half], chunks[half:])):
        pq.write_table(pa.Table.from_pylist([chunk_row(c, schema) for c in part], schema=schema),
                       run / f"chunks-{index:05d}-of-00002.parquet")
    statuses_seen = [s.status for s in statuses]
    counts = {"documents": len(statuses), "read": len(statuses), "kept": statuses_seen.count(KEPT),
              "duplicate": statuses_seen.count(DUPLICATE), "rejected": statuses_seen.count(REJECTED),
              "chunks": len(chunks), "tokens": sum(c.tokens for c in chunks)}
    body = {"run_id": "run-1", "created_at": "2024-06-04T10:00:00+00:00", "runner": "FnApiRunner",
            "config": {"dedupe": {"exact": True, "near": NEAR}}, "split": {"max_tokens": 64},
            "model": None, "embedding_signature": "", "counts": counts, "reconciled": True,
            "files": {"documents": ["documents-00000-of-00001.parquet"],
                      "rejected": ["rejected-00000-of-00001.parquet"],
                      "chunks": ["chunks-00000-of-00002.parquet", "chunks-00001-of-00002.parquet"]}}
    body.update(manifest)
    (run / "manifest.json").write_text(json.dumps(body))
    (root / "LATEST").write_text("run-1\n")
    return run


def rejected_row(uri: str, reason: str, doc_id: str | None = None) -> tuple[DocumentStatus, Rejected]:
    """A rejection as the pipeline records it: the file's uri, the record's id (a JSONL line's
    locator) or the file's."""
    doc_id = doc_id or uri
    return DocumentStatus(doc_id, uri, "", "", REJECTED, None), Rejected(uri, doc_id, reason)


@pytest.fixture
def small_run(tmp_path: Path) -> Path:
    guide = kept("guide.md", "# Guide\n\n" + "Calibrate the arm before each shift. " * 20)
    notes = kept("notes.txt", "Plain notes about the dock.\n" * 5, "text")
    copy = duplicate("guide-copy.md", guide.text, "guide.md")
    bad, bad_reason = rejected_row("/corpus/data/faq.jsonl", "line 7: not valid JSON (Expecting value)",
                                   "data/faq.jsonl#L7")
    return make_run(tmp_path, [guide, notes, copy, bad], chunks_of(guide, 200) + chunks_of(notes, 50),
                    [bad_reason], wall_seconds=12.5, stage_seconds={"Embed": 9.0, "Read": 0.5},
                    boilerplate={"top_removed": [{"text": HOSTILE, "documents": 7}],
                                 "documents_changed": 7, "chars_removed": 420, "frequent_keys": 1})


class Spans(HTMLParser):
    """The text inside each ``span.seg`` of a page, character references decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.tags: list[str] = []
        self._inside = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "span" and "seg" in (dict(attrs).get("class") or "").split():
            self._inside = True
            self.texts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._inside = False

    def handle_data(self, data: str) -> None:
        if self._inside:
            self.texts[-1] += data


def spans_text(page: str) -> str:
    parser = Spans()
    parser.feed(page)
    parser.close()
    return "".join(parser.texts)


# --- Escaping and chunk boundaries --------------------------------------------------------------


@given(st.text())
def test_escape_is_exact_and_inert(text: str) -> None:
    escaped = escape(text)
    assert not set("<>\"'\r") & set(escaped)
    assert html.unescape(escaped) == text.replace("\0", "\ufffd")


@st.composite
def text_and_spans(draw) -> tuple[str, list[SampleChunk]]:
    text = draw(st.text(alphabet=st.sampled_from("ab \n\r<>&\"'ü🙂/"), max_size=80))
    spans = []
    for index in range(draw(st.integers(0, 6))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, len(text)))
        spans.append(SampleChunk(index, start, end, 1, ("H",)))
    return text, sorted(spans, key=lambda c: (c.start, c.end))


@given(text_and_spans())
def test_segments_cover_the_text_once_in_order(case) -> None:
    text, chunks = case
    pieces = segments(len(text), chunks)
    assert [p[0] for p in pieces[1:]] == [p[1] for p in pieces[:-1]]
    if text:
        assert pieces[0][0] == 0 and pieces[-1][1] == len(text)
    for start, end, covering in pieces:
        assert start < end
        assert covering == tuple(i for i, c in enumerate(chunks) if c.start <= start and end <= c.end)


@given(text_and_spans())
def test_drawn_spans_give_back_the_text(case) -> None:
    from chunkline.pipeline.report.gather import Sample

    text, chunks = case
    drawn = sample_html(Sample("markdown", "d", "d.md", text, len(text), tuple(chunks), len(chunks)))
    assert spans_text(f"<pre>{drawn}</pre>") == text


def test_each_chunk_start_is_labelled_with_its_heading_path() -> None:
    from chunkline.pipeline.report.gather import Sample

    chunks = (SampleChunk(0, 0, 4, 2, ("Guide", "<Setup>")), SampleChunk(1, 4, 8, 3, ()))
    drawn = sample_html(Sample("markdown", "d", "d.md", "abcdefgh", 8, chunks, 2))
    assert 'data-label="#0 · 2 tokens · Guide › &lt;Setup&gt;"' in drawn
    assert 'data-label="#1 · 3 tokens · (no heading)"' in drawn


# --- Gathering -----------------------------------------------------------------------------------


def test_funnel_matches_the_manifest_by_format(small_run: Path) -> None:
    data = gather(str(small_run))
    rows = {r.format: (r.kept, r.duplicate, r.rejected) for r in data.formats}
    # The rejected JSONL record has no format of its own: its file's extension names it.
    assert rows == {"markdown": (1, 1, 0), "text": (1, 0, 0), "jsonl": (0, 0, 1)}
    assert data.warnings == []
    assert [(r.kind, r.count) for r in data.reasons] == [("not valid JSON", 1)]
    assert data.reasons[0].examples == (("/corpus/data/faq.jsonl", "line 7: not valid JSON (Expecting value)"),)


def test_a_table_disagreeing_with_the_manifest_is_a_warning(small_run: Path) -> None:
    manifest = json.loads((small_run / "manifest.json").read_text())
    manifest["counts"]["kept"] += 1
    (small_run / "manifest.json").write_text(json.dumps(manifest))
    assert gather(str(small_run)).warnings == ["documents table has 2 kept, the manifest 3"]


def test_clusters_say_exact_or_estimated_similarity(tmp_path: Path) -> None:
    words = " ".join(f"w{i}" for i in range(200))
    near_text = words.replace("w100 ", "changed ")
    survivor = kept("a.md", words)
    statuses = [survivor, duplicate("b.md", words, "a.md"), duplicate("c.md", near_text, "a.md")]
    data = gather(str(make_run(tmp_path, statuses, chunks_of(survivor, 300), [])))
    (cluster,) = data.clusters
    assert (cluster.survivor, cluster.size) == ("a.md", 2)
    by_id = {m.doc_id: m for m in cluster.members}
    assert by_id["b.md"].exact and by_id["b.md"].similarity == 1.0
    hasher = MinHasher(MinHashOptions(**NEAR))
    expected = estimate_jaccard(hasher.signature(words), hasher.signature(near_text))
    assert not by_id["c.md"].exact and by_id["c.md"].similarity == pytest.approx(expected)
    assert 0.8 <= expected < 1


def test_lists_are_capped(tmp_path: Path) -> None:
    statuses, rejected = [], []
    for i in range(MAX_REASON_KINDS + 5):
        status, record = rejected_row(f"bad{i}.md", f"reason kind {chr(65 + i % 26)}{i // 26 * 'x'}")
        statuses.append(status)
        rejected.append(record)
    for i in range(MAX_CLUSTERS + 5):
        text = f"cluster {i} text"
        statuses += [kept(f"s{i:03d}.md", text), duplicate(f"t{i:03d}.md", text, f"s{i:03d}.md")]
    data = gather(str(make_run(tmp_path, statuses, [], rejected)))
    assert len(data.reasons) == MAX_REASON_KINDS and data.reason_kinds == MAX_REASON_KINDS + 5
    assert len(data.clusters) == MAX_CLUSTERS and data.cluster_count == MAX_CLUSTERS + 5
    page = render(data)
    assert "5 more kinds not shown" in page and "5 smaller clusters not shown" in page


def test_a_huge_one_line_document_gives_a_small_report(tmp_path: Path) -> None:
    doc = kept("huge.md", "x" * 3_000_000)
    run = make_run(tmp_path, [doc], chunks_of(doc, 1000), [])
    data = gather(str(run))
    (sample,) = data.samples
    assert len(sample.text) == SAMPLE_CHARS and sample.length == 3_000_000
    assert sample.chunk_count == 3000 and all(c.start < SAMPLE_CHARS for c in sample.chunks)
    path = write_report(str(run))
    assert Path(path).stat().st_size < 500_000


@pytest.mark.parametrize(("reason", "kind"), [
    ("empty document", "empty document"),
    ("row 3: text column is null", "text column is null"),
    ("not a readable Parquet file (ArrowInvalid: bad magic)", "not a readable Parquet file"),
    ("document of 12 bytes over input.max_document_bytes 10", "document of … bytes over input.max_document_bytes …"),
])
def test_reason_kinds_drop_particulars(reason: str, kind: str) -> None:
    assert reason_kind(reason) == kind


def test_histogram_ends_at_the_budget_and_counts_overflow() -> None:
    hist = histogram(pa.array([1, 64, 65, 200], pa.int32()), budget=64, bins=4)
    assert hist.edges == (0, 17, 34, 51, 65, 201)
    assert hist.counts == (1, 0, 0, 1, 2)


# --- The page ------------------------------------------------------------------------------------


def test_hostile_text_is_escaped_everywhere(tmp_path: Path) -> None:
    doc = kept("evil.md", HOSTILE * 3)
    doc_chunks = [ChunkRecord("evil.md", "evil.md#0", 0, 0, len(doc.text), (HOSTILE,), doc.text, 9)]
    bad, bad_reason = rejected_row(f"{HOSTILE}.md", HOSTILE)
    run = make_run(tmp_path, [doc, bad], doc_chunks, [bad_reason], run_id="run-1",
                   boilerplate={"top_removed": [{"text": HOSTILE, "documents": 3}]})
    page = render(gather(str(run)))
    parser = Spans()
    parser.feed(page)
    assert "script" not in parser.tags and "img" not in parser.tags
    assert parser.tags.count("style") == 1
    assert spans_text(page) == doc.text
    assert page.count("Content-Security-Policy") == 1


def test_sections_follow_what_the_run_recorded(small_run: Path) -> None:
    page = render(gather(str(small_run)))
    for chart in ("chart-funnel", "chart-tokens", "chart-stages"):
        assert f'id="{chart}"' in page
    assert "Wall time 12.5 s." in page
    assert "Embedding was off." in page and "Context headers were off." in page
    assert '<dd data-funnel="duplicate">1</dd>' in page


def test_command_writes_the_latest_run_or_the_one_named(small_run: Path, capsys) -> None:
    assert main([str(small_run.parent)]) == 0
    assert capsys.readouterr().out.strip() == str(small_run / REPORT)
    assert (small_run / REPORT).read_text().startswith("<!DOCTYPE html>")
    assert main([str(small_run.parent), "--run", "run-1"]) == 0
    capsys.readouterr()
    assert main([str(small_run.parent), "--run", "no-such-run"]) == 2
    err = capsys.readouterr().err
    assert "no-such-run/manifest.json: no such file" in err


# --- Counts in words, natural order, damaged shards, secrets ------------------------------------


def test_a_count_of_one_is_singular_everywhere(tmp_path: Path) -> None:
    doc = kept("one.md", "abcd")
    statuses, rejected = [doc], []
    for i in range(MAX_REASON_KINDS + 1):  # one kind more than the page shows
        status, record = rejected_row(f"bad{i}.md", f"reason kind {chr(65 + i % 26)}{i // 26 * 'x'}")
        statuses.append(status)
        rejected.append(record)
    for i in range(MAX_CLUSTERS + 1):  # one cluster more than the page shows
        text = f"cluster {i} text"
        statuses += [kept(f"s{i:03d}.md", text), duplicate(f"t{i:03d}.md", text, f"s{i:03d}.md")]
    run = make_run(tmp_path, statuses, chunks_of(doc, 100), rejected, split={"max_tokens": 1},
                   boilerplate={"top_removed": [], "documents_changed": 1, "chars_removed": 1,
                                "frequent_keys": 1},
                   model={"name": "m", "dim": 4, "vector_dtype": "float32"})
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["counts"].update(embedded=1, reused=0, reuse_rejected=1, tokens_embedded=1, tokens_padded=1)
    (run / "manifest.json").write_text(json.dumps(manifest))
    page = render(gather(str(run)))
    plural_of_one = re.findall(r"(?<![\d,.])1 (?:more |smaller |stored |padded |frequent )?[a-z]+s\b", page)
    assert plural_of_one == []
    for phrase in ("1 more kind not shown", "1 smaller cluster not shown", "1 document changed",
                   "1 character removed", "1 frequent line or block.", "1 chunk, largest 1 token, budget 1 token",
                   "1 stored vector failed its check", "The model read 1 token in 1 padded position.",
                   "1 chunk over 4 characters", "#0 · 1 token · Guide", "<title>1 token: 1 chunk</title>"):
        assert phrase in page, phrase


def test_examples_and_members_sort_numbers_as_numbers(tmp_path: Path) -> None:
    rows = [rejected_row("/corpus/faq.jsonl", f"line {n}: not valid JSON (Expecting value)", f"faq.jsonl#L{n}")
            for n in (10005, 7, 10001)]
    survivor = kept("s.md", "same text")
    copies = [duplicate(f"copy{n}.md", "same text", "s.md") for n in (10, 2, 1)]
    data = gather(str(make_run(tmp_path, [survivor, *copies, *(s for s, _ in rows)], [],
                               [r for _, r in rows])))
    assert [reason.split(":")[0] for _, reason in data.reasons[0].examples] == ["line 7", "line 10001", "line 10005"]
    assert [m.doc_id for m in data.clusters[0].members] == ["copy1.md", "copy2.md", "copy10.md"]
    page = render(data)
    assert page.index("line 7:") < page.index("line 10001:") < page.index("line 10005:")


@pytest.mark.parametrize(("shard", "damage", "why"), [
    ("chunks-00001-of-00002.parquet", "truncate", "not a readable Parquet file (ArrowInvalid: "),
    ("documents-00000-of-00001.parquet", "truncate", "not a readable Parquet file (ArrowInvalid: "),
    ("rejected-00000-of-00001.parquet", "text", "not a readable Parquet file (ArrowInvalid: "),
    ("chunks-00000-of-00002.parquet", "delete", "no such file, though the run's manifest lists it"),
], ids=["chunks-truncated", "documents-truncated", "rejected-not-parquet", "chunks-missing"])
def test_a_damaged_shard_is_one_line_naming_it(small_run: Path, shard: str, damage: str, why: str) -> None:
    path = small_run / shard
    damage_file(path, damage)
    out, err = io.StringIO(), io.StringIO()
    assert cli(["report", str(small_run.parent)], out, err) == 2
    (line,) = err.getvalue().splitlines()
    assert line.startswith(f"chunkline report: {path}: {why}")
    assert out.getvalue() == "" and not (small_run / REPORT).exists()


def test_the_page_shows_no_config_value(tmp_path: Path) -> None:
    """The report reads the run's config for the near-duplicate options only: a secret in it (a
    store URI's password, an API key) never reaches the page."""
    doc = kept("a.md", "text")
    config = {"dedupe": {"exact": True, "near": NEAR},
              "sink": {"to": "postgresql://me:hunter2@db.internal/search", "batch_size": 1000},
              "context": {"api_key_env": "SECRET_ENV_NAME", "base_url": "https://u:tok3n@llm.internal"}}
    page = render(gather(str(make_run(tmp_path, [doc], chunks_of(doc, 10), [], config=config))))
    assert not {"hunter2", "tok3n", "db.internal", "llm.internal"} & set(re.findall(r"[\w.]+", page))
