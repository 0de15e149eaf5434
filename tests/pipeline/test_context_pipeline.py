"""The context stage inside the whole job: headers land in their columns and in the embedded
text, the budget holds, a rerun pays for nothing, and a run over its failure budget is not
published."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkline.embedder import EmbedOptions, load_model, token_lengths
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.helpers import run_rows
from tests.llm_server import Fault, LLMServer

ROOT = Path(__file__).resolve().parents[2]
KEY_ENV = "CHUNKLINE_TEST_LLM_KEY"
KEY = "sk-test-never-written"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server():
    with LLMServer(expected_key=KEY) as running:
        yield running


@pytest.fixture
def corpus(tmp_path) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    for name in ("guide.md",):
        (root / name).write_text((ROOT / "examples" / name).read_text())
    for path in sorted((ROOT / "examples" / "corpus" / "manuals").glob("*.md"))[:2]:
        (root / path.name).write_text(path.read_text())
    return root


def job(server: LLMServer, corpus: Path, output: Path, provider: str, *overrides: str):
    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}",
        f"context={{provider: {provider}, base_url: '{server.url}', api_key_env: {KEY_ENV}, "
        f"model: test-model, max_header_tokens: 48, backoff_base_s: 0.05, backoff_max_s: 0.2, "
        f"max_retry_after_s: 1}}",
        *overrides,
    ]))


def chunk_rows(run_dir: str) -> list[dict]:
    return sorted(run_rows(run_dir, "chunks"),
                  key=lambda r: r["chunk_id"])


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_headers_embedded_within_budget_and_never_paid_twice(server, corpus, tmp_path, monkeypatch, provider) -> None:
    server.reset()
    monkeypatch.setenv(KEY_ENV, KEY)
    first = job(server, corpus, tmp_path / "index", provider)
    assert first.published and first.reconciled
    rows = chunk_rows(first.run_dir)
    assert rows and all(r["context_status"] == "ok" and r["context"] for r in rows)
    assert len(server.requests) >= len(rows) and all(r.key_ok for r in server.requests)
    for r in rows:
        assert r["search_text"].endswith(r["text"]) and r["context"] in r["search_text"]
    # What the model reads (special tokens included) never exceeds its input: nothing truncated.
    model = load_model(EmbedOptions())
    assert max(token_lengths(model, [r["search_text"] for r in rows])) <= model.max_seq_length
    assert any(line.strip().startswith("context") for line in first.context_lines)

    asked = len(server.requests)
    again = job(server, corpus, tmp_path / "index", provider)
    assert len(server.requests) == asked, "a rerun on an unchanged corpus called the LLM"
    again_rows = chunk_rows(again.run_dir)
    assert all(r["context_status"] == "cached" for r in again_rows)
    assert [r["context"] for r in again_rows] == [r["context"] for r in rows]
    assert again.counts["embedded"] == 0  # same headers, same embedded text: vectors reused
    for path in (tmp_path / "index").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes()


def test_run_over_the_failure_budget_is_not_published(server, corpus, tmp_path, monkeypatch) -> None:
    server.reset()
    monkeypatch.setenv(KEY_ENV, KEY)
    good = job(server, corpus, tmp_path / "index", "openai")
    server.reset()
    server.faults.append(Fault(match="", status=500))
    bad = job(server, corpus, tmp_path / "index", "openai", "context.max_failures=2",
              "context.max_retries=0", "context.prompt_version=v1", "output.reuse_latest=false",
              "context.model=other-model")
    assert not bad.published and not bad.reconciled
    assert any("failure budget" in p for p in bad.problems)
    assert (tmp_path / "index" / "LATEST").read_text().strip() == good.run_id
    rows = chunk_rows(bad.run_dir)
    assert rows and all(r["context_status"].startswith("failed") and r["context"] == "" for r in rows)
