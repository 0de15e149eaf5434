"""The context stage (transforms/context.py) on the FnApiRunner, the real SDKs talking to
tests/llm_server.py: every chunk comes out, flagged, with its document; counts reconcile; a
rerun makes no request; the header fits the split budget; the key is never written or logged."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pickle
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.metrics import MetricsFilter
from apache_beam.testing.util import assert_that

from chunkline import split
from chunkline.context import COUNTERS, ContextOptions, fit_header, status_kind, summary_lines
from chunkline.embedder import EmbedOptions, model_info
from chunkline.records import ChunkRecord, Document, DocumentChunks, chunk_id
from tests.beam_helpers import fnapi_pipeline
from tests.helpers import tokenizer
from tests.llm_server import Fault, LLMServer, answer_for
from chunkline.transforms.context import ContextualHeaders
from chunkline.transforms.split import FlattenChunks, SplitDocuments

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

KEY = "sk-test-beam-4e1d0b-never-written"
KEY_ENV = "CHUNKLINE_TEST_LLM_KEY"

DOCS = [
    Document("guide.md", "/c/guide.md",
             "# Guide\n\nAlpha intro paragraph about the arm.\n\n## Setup\n\nBeta warm the arm up.\n\n"
             "Gamma calibrate the joints.\n\nDelta check the gauge.\n"),
    Document("notes.txt", "/c/notes.txt",
             "Epsilon first note on safety.\n\nZeta second note on storage.\n\nEta third note.\n"),
    # Same text as notes.txt under another id (dedupe off): its headers come from the same requests.
    Document("copy.txt", "/c/copy.txt",
             "Epsilon first note on safety.\n\nZeta second note on storage.\n\nEta third note.\n"),
    # Made no chunk: goes through untouched, counted nowhere, asks nothing.
    Document("blank.txt", "/c/blank.txt", ""),
]


def chunks_of(doc: Document, max_tokens: int = 6) -> list[ChunkRecord]:
    return [
        ChunkRecord(doc.doc_id, chunk_id(doc.doc_id, c.start, c.end), i, c.start, c.end,
                    c.headings, doc.text[c.start:c.end], c.tokens)
        for i, c in enumerate(split(doc.text, max_tokens, 0, tokenizer("words")))
    ]


CHUNKS = [c for d in DOCS for c in chunks_of(d)]


@pytest.fixture(scope="module")
def server():
    with LLMServer(expected_key=KEY) as running:
        yield running


@pytest.fixture
def llm(server, monkeypatch):
    server.reset()
    monkeypatch.setenv(KEY_ENV, KEY)
    return server


def options_for(server: LLMServer, provider: str = "anthropic", **overrides) -> ContextOptions:
    values = dict(max_concurrency=3, timeout_s=2.0, max_retries=2, backoff_base_s=0.01,
                  backoff_max_s=0.05, max_retry_after_s=2.0, max_header_tokens=40,
                  api_key_env=KEY_ENV)
    values.update(overrides)
    base_url = server.url if provider == "anthropic" else server.url + "/v1"
    return ContextOptions(provider=provider, model="test-model", base_url=base_url, **values)


def _dump(path: str):
    def write(records):
        Path(path).write_bytes(pickle.dumps(sorted(records, key=lambda r: r.chunk_id)))
    return write


def _check_elements(documents):
    """Every document comes out once, with its chunks in order, its text untouched."""
    def check(elements):
        assert sorted(e.document.doc_id for e in elements) == sorted(d.doc_id for d in documents)
        for element in elements:
            assert element.document.text == next(
                d.text for d in documents if d.doc_id == element.document.doc_id)
            assert [c.chunk_index for c in element.chunks] == list(range(len(element.chunks)))
            assert all(c.doc_id == element.document.doc_id for c in element.chunks)
    return check


def run_stage(tmp_path: Path, options: ContextOptions, run_tag: str, documents=DOCS,
              chunks=CHUNKS, cache_dir: Path | None = None) -> tuple[list[ChunkRecord], dict[str, int]]:
    """One pipeline run; the records out (by chunk_id) and the stage's counters."""
    out = tmp_path / f"records-{run_tag}.pkl"
    p = fnapi_pipeline()
    elements = p | "Elements" >> beam.Create([
        DocumentChunks(d, tuple(c for c in chunks if c.doc_id == d.doc_id)) for d in documents])
    stage = ContextualHeaders(options, str(cache_dir or tmp_path / "cache"), run_tag, "words")
    annotated = elements | "Context" >> stage
    assert_that(annotated, _check_elements(documents), label="Elements")
    (annotated | FlattenChunks() | "All" >> beam.combiners.ToList()
     | "Dump" >> beam.Map(_dump(str(out))))
    result = p.run()
    result.wait_until_finish()
    counters = dict.fromkeys(COUNTERS, 0)
    for counter in result.metrics().query(MetricsFilter().with_namespace("context"))["counters"]:
        counters[counter.key.metric.name] += counter.committed or 0
    return pickle.loads(out.read_bytes()), counters


def cache_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache").glob("context-*.parquet"))


def test_every_chunk_comes_out_flagged_and_counts_reconcile(llm, tmp_path, caplog) -> None:
    llm.faults = [
        Fault("Gamma", status=429, times=1, retry_after="0.2"),
        Fault("Delta", status=500),  # permanently failing
    ]
    options = options_for(llm)
    with contextlib.ExitStack() as stack:
        # Debug logging of everything that sees the key (not Beam's own, which is slow to log).
        for logger in ("anthropic", "openai", "httpx", "httpx2", "httpcore", "httpcore2", "chunkline"):
            stack.enter_context(caplog.at_level(logging.DEBUG, logger=logger))
        records, counters = run_stage(tmp_path, options, "run1")
    assert any(r.name.startswith("httpcore") for r in caplog.records)

    # Never dropped: the same chunks come out, with nothing changed but the two context fields.
    assert [r.chunk_id for r in records] == sorted(c.chunk_id for c in CHUNKS)
    by_id = {r.chunk_id: r for r in records}
    for chunk in CHUNKS:
        record = by_id[chunk.chunk_id]
        assert (record.text, record.start, record.end, record.prefix) == (chunk.text, chunk.start, chunk.end, chunk.prefix)
    statuses = {r.text.split()[0]: r.context_status for r in records}
    assert statuses["Delta"] == "failed: http 500"
    assert all(s == "ok" for first, s in statuses.items() if first != "Delta")
    for record in records:
        if record.context_status == "ok":
            assert record.context == answer_for(record.text)  # landed on its own chunk
            assert record.embed_text() == record.context + "\n\n" + record.text
            assert record.search_text == record.embed_text()
        else:
            assert record.context == "" and record.embed_text() == record.text

    # Counts reconcile: chunks in = ok + cached + failed; requests as the server saw them.
    kinds = [status_kind(r.context_status) for r in records]
    assert counters["chunks"] == len(records) == len(CHUNKS)
    assert (counters["chunks_ok"], counters["chunks_cached"], counters["chunks_failed"]) == (
        kinds.count("ok"), 0, kinds.count("failed"))
    assert counters["requests"] == len(llm.requests)
    assert counters["retries"] == 1 + options.max_retries  # Gamma once, Delta to the end
    answered = [r.usage for r in llm.requests if r.status == 200]
    assert counters["output_tokens"] == sum(u["output_tokens"] for u in answered)
    assert counters["input_tokens"] == sum(u["input_tokens"] for u in answered)
    assert counters["cached_input_tokens"] == sum(u["cache_read_input_tokens"] for u in answered) > 0
    assert counters["cache_write_tokens"] == sum(u["cache_creation_input_tokens"] for u in answered) > 0
    # notes.txt and copy.txt share their text: one set of requests (3 chunks) serves both.
    assert len({r.chunk for r in llm.requests}) == len({c.text for c in CHUNKS})
    # Retry-after held inside the pipeline too.
    gamma = llm.requests_for("Gamma")
    assert len(gamma) == 2 and gamma[1].at - gamma[0].at >= 0.2
    assert "NOT RECONCILED" not in summary_lines(counters, options)[0]

    # The key went to the server and nowhere else: not in the cache files, not in the logs,
    # not in the pickled stage.
    assert all(r.key_ok for r in llm.requests)
    files = cache_files(tmp_path)
    assert files
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in caplog.text
    stage = ContextualHeaders(options, str(tmp_path / "cache"), "x", "words")
    assert KEY.encode() not in pickle.dumps(stage)  # what Beam ships to workers

    # Failed chunks are not cached: a rerun without the fault asks again for Delta only, and
    # reads a corrupt foreign file in the cache as a warning, not an error.
    llm.reset()
    (tmp_path / "cache" / "context-garbage.parquet").write_bytes(b"not parquet")
    records2, counters2 = run_stage(tmp_path, options, "run2")
    assert {r.chunk for r in llm.requests} == {next(c.text.strip() for c in CHUNKS if c.text.startswith("Delta"))}
    assert counters2["cache_files_unreadable"] == 1
    assert {r.chunk_id: r.context_status for r in records2 if r.text.startswith("Delta")} == {
        c.chunk_id: "ok" for c in CHUNKS if c.text.startswith("Delta")}
    assert counters2["chunks_cached"] == len(CHUNKS) - sum(c.text.startswith("Delta") for c in CHUNKS)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_rerun_on_an_unchanged_corpus_makes_zero_calls(llm, tmp_path, provider) -> None:
    options = options_for(llm, provider)
    first, counters1 = run_stage(tmp_path, options, "first")
    assert {r.context_status for r in first} == {"ok"}
    assert counters1["requests"] == len(llm.requests) > 0
    written = cache_files(tmp_path)
    assert written and all("context-first-" in p.name for p in written)

    llm.reset()
    second, counters2 = run_stage(tmp_path, options, "second")
    assert llm.requests == [] and counters2["requests"] == 0
    assert [r.context for r in second] == [r.context for r in first]
    assert {r.context_status for r in second} == {"cached"}
    assert counters2["chunks_cached"] == counters2["chunks"] == len(CHUNKS)
    assert cache_files(tmp_path) == written  # nothing new, no new file

    # Another model or prompt version does not reuse those headers.
    llm.reset()
    _, counters3 = run_stage(tmp_path, dataclasses.replace(options, model="other-model"), "third")
    assert counters3["chunks_cached"] == 0 and counters3["requests"] == len(llm.requests) > 0


def test_the_split_budget_leaves_room_for_the_header(llm, tmp_path) -> None:
    # The real split stage with the embedder's tokenizer: budget = model max input - special
    # tokens - heading reserve - header reserve. The server ignores max_tokens and answers 300
    # words; the header is cut to its reserve, so no embedded text is over the model's limit.
    _, _, max_seq_length, special = model_info(EmbedOptions())
    spec = "hf:all-MiniLM-L6-v2"
    heading_reserve, header_reserve = 16, 48
    budget = max_seq_length - special - heading_reserve - header_reserve
    text = "# Manual\n\n## Arm\n\n" + "The arm warms up for ten minutes before calibration. " * 120
    documents = [Document("manual.md", "/c/manual.md", text)]
    llm.faults = [Fault("", answer_words=300)]
    options = options_for(llm, "openai", max_header_tokens=header_reserve)
    out = tmp_path / "records.pkl"
    p = fnapi_pipeline()
    docs = p | beam.Create(documents)
    records = (
        docs
        | SplitDocuments(spec, budget, 0, True, heading_reserve=heading_reserve)
        | ContextualHeaders(options, str(tmp_path / "cache"), "budget", spec)
        | FlattenChunks()
    )
    records | beam.combiners.ToList() | beam.Map(_dump(str(out)))
    p.run().wait_until_finish()
    records = pickle.loads(out.read_bytes())

    tok = tokenizer(spec)
    assert len(records) > 3 and {r.context_status for r in records} == {"ok"}
    for record in records:
        assert record.context and tok.count(record.context + "\n\n") <= header_reserve
        assert record.context.startswith(answer_for(record.text)[:-1])
        assert record.tokens <= budget and record.prefix
        embedded = tok.count(record.embed_text())
        assert embedded <= heading_reserve + header_reserve + budget == max_seq_length - special
    assert all(len(r.body["messages"][1]["content"]) > len(text) for r in llm.requests)
    assert fit_header(" ".join(["word"] * 500), tok, header_reserve) != ""
