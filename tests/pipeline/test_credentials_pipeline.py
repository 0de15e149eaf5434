"""Credentials through the whole job: in ``redact`` mode no byte of any generated credential
(the ten forms of issue #48 included) reaches a file of the output (Parquet read back column by
column, the manifest, the report, the context cache), a log record, the summary, or a request to
the LLM (a local server speaking OpenAI's wire format records each); in ``reject`` mode each
document holding a confirmed kind is a rejected row naming kind and line, one holding only loose
kinds is indexed masked, the per-kind outcome counters say which, and the counts reconcile."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest

from chunkline.credentials import CONFIDENCE, CONFIRMED, CredentialOptions
from chunkline.records import Document
from chunkline.pipeline.cli import main
from tests.beam_helpers import fnapi_pipeline
from tests.credential_cases import credentials, lookalikes, missed
from tests.llm_server import LLMServer
from chunkline.transforms.credentials import KIND_PREFIX, NAMESPACE, ScanCredentials, outcomes

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "local.yaml"
KEY_ENV = "CHUNKLINE_TEST_LLM_KEY"
pytestmark = pytest.mark.slow


def write_corpus(root: Path) -> list[str]:
    """The generated credentials and lookalikes, one file each, a plain page, and a JSONL record
    whose metadata (not its text) holds a token; returns every secret value."""
    root.mkdir()
    secrets = []
    for case in [*credentials(), *missed()]:
        (root / case.name).write_text(case.text, encoding="utf-8")
        secrets.append(case.secret)
        if case.secret not in case.text:  # an AWS key id cut in two: neither half may be left
            secrets += [case.secret[:10], case.secret[10:]]
    for case in lookalikes():
        (root / case.name).write_text(case.text, encoding="utf-8")
    (root / "plain.md").write_text("# Calibration\n\nWarm the arm up for ten minutes first.\n",
                                   encoding="utf-8")
    token = "ghp_" + "Q7wE9rT2yU4iO6pA8sD0fG1hJ3kL5zX7cV9b"
    record = {"id": "ticket-1", "text": "The runner lost its credentials overnight.",
              "metadata": {"reporter": "ops", "notes": f"rotated to {token}"}}
    (root / "tickets.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    return [*secrets, token]


def leaked(secrets: list[str], text: str) -> list[str]:
    return [s[:8] + "..." for s in secrets if s in text]


def every_output_text(output: Path) -> dict[str, str]:
    """Each file under the output as text: a Parquet file's rows, every other file's bytes."""
    found = {}
    for path in output.rglob("*"):
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            found[str(path)] = json.dumps(pq.read_table(path).to_pylist(), default=str,
                                          ensure_ascii=False)
        else:
            found[str(path)] = path.read_bytes().decode("utf-8", "replace")
    return found


def run_cli(corpus: Path, output: Path, *sets: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", "--config", str(CONFIG), "--input", f"{corpus}/**", "--output",
                 str(output), "--quiet", *(a for s in sets for a in ("--set", s))], out, err)
    return code, out.getvalue(), err.getvalue()


def test_redact_mode_leaves_no_credential_anywhere(tmp_path, monkeypatch, caplog) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    secrets = write_corpus(corpus)
    monkeypatch.setenv(KEY_ENV, "sk-test")
    # INFO for every logger: more than the CLI shows (WARNING, chunkline's INFO). Beam's DEBUG
    # records print whole elements, the text as read included: never turn it on in production.
    caplog.set_level(logging.INFO)
    with LLMServer(expected_key="sk-test") as server:
        code, out, err = run_cli(
            corpus, output, "secrets=redact", "embed=null",
            f"context={{provider: openai, base_url: '{server.url}', api_key_env: {KEY_ENV}, "
            f"model: test-model, max_retries: 0}}")
        requests = json.dumps([r.body for r in server.requests])
    assert code == 0, err
    assert server.requests, "the context stage asked nothing"
    assert not leaked(secrets, requests)
    files = every_output_text(output)
    assert any("/_cache/context/" in name for name in files)
    for name, text in files.items():
        assert not leaked(secrets, text), name
    assert not leaked(secrets, out + err)
    assert not leaked(secrets, "\n".join(record.getMessage() for record in caplog.records))
    run_dir = output / (output / "LATEST").read_text().strip()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["credentials"]["documents_redacted"] == len(credentials()) + len(missed()) + 1
    assert manifest["counts"]["kept"] + manifest["counts"]["duplicate"] == manifest["counts"]["documents"]
    documents = pq.read_table(sorted(run_dir.glob("documents-*.parquet"))).to_pylist()
    by_id = {row["doc_id"]: row for row in documents}
    assert "[REDACTED Private Key]" in by_id["rsa.md"]["text"]
    assert "[REDACTED GitHub Token]" in json.loads(by_id["ticket-1"]["metadata"])["notes"]
    assert "AKIAIOSFODNN7EXAMPLE" in by_id["lookalike-04.md"]["text"]  # a documented example
    assert "secrets    31 documents held 31 credentials" in out


def test_reject_mode_names_kind_and_line(tmp_path) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    secrets = write_corpus(corpus)
    code, out, err = run_cli(corpus, output, "embed=null")
    assert code == 0, err
    run_dir = output / (output / "LATEST").read_text().strip()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["documents"] == counts["kept"] + counts["duplicate"] + counts["rejected"]
    rejected = {row["doc_id"]: row["reason"]
                for row in pq.read_table(run_dir / "rejected-00000-of-00001.parquet").to_pylist()}
    confirmed = {c.name for c in [*credentials(), *missed()] if confirmed_kind(c)} | {"ticket-1"}
    assert set(rejected) == confirmed
    loose = {c.name for c in [*credentials(), *missed()]} - confirmed
    documents = pq.read_table(sorted(run_dir.glob("documents-*.parquet"))).to_pylist()
    assert all("[REDACTED " in row["text"] for row in documents if row["doc_id"] in loose)
    assert {row["doc_id"] for row in documents} >= loose
    assert rejected["rsa.md"] == "holds credentials (1 credential: Private Key (lines 5-19))"
    assert rejected["ticket-1"].startswith("holds credentials (metadata 'notes': 1 credential: GitHub Token")
    assert not any(name.startswith("lookalike") for name in rejected)
    for name, text in every_output_text(output).items():
        assert not leaked(secrets, text), name
    assert manifest["credentials"]["kinds"]["Private Key"] == 2
    assert "rejected (secrets.mode: reject" in out
    # Over a tenth of the documents rejected for credentials: the summary says so.
    share = len(confirmed) / counts["documents"]
    assert f"WARNING: {share:.0%} of the documents read were rejected for credentials" in out
    assert "held 31 credentials" in out


def confirmed_kind(case) -> bool:
    """Whether a generated case's credential is of a confirmed kind (its one finding's)."""
    from chunkline.credentials import Scanner

    [finding] = Scanner(CredentialOptions()).scan(case.text, case.name)
    return CONFIDENCE[finding.kind] == CONFIRMED


def test_each_kind_counts_what_became_of_it() -> None:
    cases = [*credentials(), *missed()]
    docs = [Document(doc_id=c.name, uri=c.name, text=c.text) for c in cases]
    pipeline = fnapi_pipeline()
    _ = pipeline | beam.Create(docs) | ScanCredentials(CredentialOptions())
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(
        beam.metrics.MetricsFilter().with_namespace(NAMESPACE))["counters"]}
    by_outcome = outcomes(counters)
    assert by_outcome["rejected"] and all(CONFIDENCE[k] == CONFIRMED for k in by_outcome["rejected"])
    assert by_outcome["masked"] and all(CONFIDENCE[k] != CONFIRMED for k in by_outcome["masked"])
    kinds = {name.removeprefix(KIND_PREFIX): n for name, n in counters.items() if name.startswith(KIND_PREFIX)}
    for kind, n in kinds.items():  # each credential found is either rejected or masked
        assert by_outcome["rejected"].get(kind, 0) + by_outcome["masked"].get(kind, 0) == n
    assert counters["documents_rejected"] == sum(confirmed_kind(c) for c in cases)
    assert counters["documents_redacted"] == len(cases) - counters["documents_rejected"]
