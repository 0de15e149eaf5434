"""What every store's sync tests check, written once; each ``test_sync_<store>.py`` supplies
the store (a URI) and the store's own client for what only it can do (edit a row behind the
tool's back, an exact nearest-neighbour search)."""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow.parquet as pq

from pipeline.manifest import load_manifest
from pipeline.query import search
from pipeline.sync.command import main
from pipeline.sync.core import Report, sync
from pipeline.sync.rows import load_rows
from pipeline.sync.uri import open_store

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = (
    "how long should the arm warm up before calibration?",
    "what does error code E42 mean?",
    "how do I rotate the TLS certificates?",
    "steps for a database failover",
    "how to return a broken gripper (RMA)",
    "what changed in the python SDK?",
    "who do I escalate an outage to when on call?",
    "how are webhooks signed?",
    "what personal data does the privacy policy cover?",
    "how much payload can the courier carry?",
)


def cli(*argv: str) -> tuple[int, str, str]:
    """``chunkline sync`` in process: (exit status, stdout, stderr)."""
    from pipeline.sync.command import parser, run_args

    out, err = io.StringIO(), io.StringIO()
    code = run_args(parser().parse_args(list(argv)), out, err)
    return code, out.getvalue(), err.getvalue()


def synced(uri: str, run_dir: str, batch_size: int = 64) -> Report:
    manifest = load_manifest(run_dir)
    store = open_store(uri)
    try:
        return sync(store, manifest["run_id"], load_rows(run_dir, manifest), batch_size,
                    sparse=bool(manifest.get("bm25")))
    finally:
        store.close()


def parquet_rows(run_dir: str) -> dict[str, dict]:
    rows = [r for f in sorted(Path(run_dir).glob("chunks-*.parquet")) for r in pq.read_table(f).to_pylist()]
    return {r["chunk_id"]: r for r in rows}


def check_full_sync_and_idempotence(uri: str, run_dir: str) -> None:
    chunks = len(parquet_rows(run_dir))
    first = synced(uri, run_dir)
    assert first.verification.ok, first.verification.describe()
    assert (first.written, first.deleted, first.unchanged, first.previous) == (chunks, 0, 0, None)
    assert first.verification.rows == chunks
    code, out, err = cli(str(Path(run_dir).parent), "--to", uri)
    assert code == 0, err
    assert f"0 written, 0 deleted, {chunks} unchanged" in out and "verified" in out


def check_reindex(uri: str, runs) -> None:
    """First run, then the second: exactly the chunks that differ are written, the ones gone
    deleted. What differs is read from the Parquet rows themselves, every column compared."""
    old, new = parquet_rows(runs.first), parquet_rows(runs.second)
    synced_columns = ("doc_id", "chunk_index", "start", "end", "headings", "text", "search_text",
                      "tokens", "metadata", "page_start", "page_end", "content_key", "embedding",
                      "sparse_indices", "sparse_values")
    differ = {c for c, row in new.items()
              if c not in old or any(old[c][k] != row[k] for k in synced_columns)}
    gone = old.keys() - new.keys()
    # The oracle agrees with the edit: only the edited and the added documents' chunks differ,
    # only the edited and the deleted documents' chunks are gone.
    assert {new[c]["doc_id"] for c in differ} == {runs.changed, runs.added}
    assert {old[c]["doc_id"] for c in gone} == {runs.changed, runs.deleted}
    assert synced(uri, runs.first).verification.ok
    report = synced(uri, runs.second)
    assert report.verification.ok, report.verification.describe()
    assert (report.written, report.deleted, report.unchanged) == (len(differ), len(gone), len(new) - len(differ))
    assert 0 < len(differ) < len(new) // 4
    assert report.previous == Path(runs.first).name


def check_crash_then_resume(uri: str, run_dir: str, progress: Callable[[str], int]) -> None:
    """The sync process SIGKILLed after its third batch; the store holds part of the run and its
    state does not name it; a second sync writes the rest, says it resumed, and verifies.
    ``progress(uri)``: rows the store holds now, read with the store's own client."""
    chunks = len(parquet_rows(run_dir))
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.sync.command", str(Path(run_dir).parent), "--to", uri,
         "--batch-size", "8"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        if line.startswith("batch 3/"):
            process.send_signal(signal.SIGKILL)
            break
    assert process.wait(timeout=120) == -signal.SIGKILL
    process.stderr.close()
    held = progress(uri)
    assert 3 * 8 <= held < chunks
    store = open_store(uri)
    try:
        state = store.state()
    finally:
        store.close()
    assert state is not None and state.run_id is None and state.syncing == Path(run_dir).name
    report = synced(uri, run_dir)
    assert report.resumed and report.verification.ok, report.verification.describe()
    assert report.written == chunks - held and report.unchanged == held
    store = open_store(uri)
    try:
        assert store.state().run_id == Path(run_dir).name and store.state().syncing is None
    finally:
        store.close()


def check_edits_behind_the_back(uri: str, run_dir: str, edit: Callable[[str, str, str, str], None],
                                delete_row: Callable[[str, str], None]) -> None:
    """A row's text changed in the store: the next sync (which trusts its recorded digests)
    fails verification naming it, ``--repair`` rewrites it. A row deleted: ``--check`` fails
    naming it; a sync writes it back. A recorded digest changed (values right): found, and
    repaired. ``edit(uri, chunk_id, column, text)`` sets one column of one row."""
    output = str(Path(run_dir).parent)
    assert synced(uri, run_dir).verification.ok
    victims = sorted(parquet_rows(run_dir))
    edit(uri, victims[3], "text", "edited by hand")
    code, _, err = cli(output, "--to", uri)
    assert code == 1 and f"values differ: {victims[3]}" in err
    code, out, err = cli(output, "--to", uri, "--repair")
    assert code == 0 and "1 written, 0 deleted" in out, err
    delete_row(uri, victims[5])
    code, _, err = cli(output, "--to", uri, "--check")
    assert code == 1 and f"missing: {victims[5]}" in err
    code, out, err = cli(output, "--to", uri)
    assert code == 0 and "1 written, 0 deleted" in out, err
    edit(uri, victims[7], "row_digest", "0" * 32)
    code, _, err = cli(output, "--to", uri, "--check")
    assert code == 1 and f"stored row_digest wrong: {victims[7]}" in err
    code, out, err = cli(output, "--to", uri, "--repair")
    assert code == 0 and "1 written, 0 deleted" in out, err
    assert cli(output, "--to", uri, "--check")[0] == 0


def question_vectors(run_dir: str, questions: tuple[str, ...] = QUESTIONS) -> np.ndarray:
    """The questions embedded as ``pipeline.query.dense_scores`` embeds one: the index's model
    and options, from its manifest."""
    from chunkline.embedder import EmbedOptions, embed_texts, load_model
    from transforms.model_cache import local_model_dir

    embed = load_manifest(run_dir)["config"]["embed"]
    options = EmbedOptions(**{f.name: embed[f.name] for f in dataclasses.fields(EmbedOptions) if f.name in embed})
    model = load_model(dataclasses.replace(options, model=local_model_dir(options.model)))
    return embed_texts(model, list(questions), options)


def check_exact_dense_search(uri: str, run_dir: str, nearest: Callable[[str, np.ndarray], str]) -> None:
    """The store's exact nearest chunk is ``pipeline.query``'s dense top hit, for each question.
    ``nearest(uri, vector)``: the chunk_id the store's own client ranks first."""
    assert synced(uri, run_dir).verification.ok
    output = str(Path(run_dir).parent)
    for question, vector in zip(QUESTIONS, question_vectors(run_dir)):
        expected = search(output, question, k=1, mode="dense")[0].chunk_id
        assert nearest(uri, vector) == expected, question


def check_usage_errors(uri: str, run_dir: str) -> None:
    output = str(Path(run_dir).parent)
    assert main([output, "--to", uri, "--run", "no-such-run"]) == 2
    code, _, err = cli(output, "--to", uri, "--batch-size", "0")
    assert code == 2 and "--batch-size" in err
    code, _, err = cli(output, "--to", "ftp://host/index")
    assert code == 2 and "unknown store" in err
