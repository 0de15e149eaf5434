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
import pytest
from hypothesis import strategies as st

from chunkline.pipeline.manifest import load_manifest
from chunkline.pipeline.query import search
from chunkline.pipeline.sync.command import main
from chunkline.pipeline.sync.core import Report, sync
from chunkline.pipeline.sync.rows import load_rows, terms_table
from chunkline.pipeline.sync.uri import open_store
from tests.helpers import run_rows

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
    from chunkline.pipeline.sync.command import parser, run_args

    out, err = io.StringIO(), io.StringIO()
    code = run_args(parser().parse_args(list(argv)), out, err)
    return code, out.getvalue(), err.getvalue()


def synced(uri: str, run_dir: str, batch_size: int = 64) -> Report:
    manifest = load_manifest(run_dir)
    store = open_store(uri)
    try:
        return sync(store, manifest.run_id, load_rows(run_dir, manifest), batch_size,
                    sparse=manifest.bm25 is not None, terms=terms_table(run_dir, manifest))
    finally:
        store.close()


def parquet_rows(run_dir: str) -> dict[str, dict]:
    rows = run_rows(run_dir, "chunks")
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
    # Every file's mtime moved, no byte changed: not one row written. BM25 is on: the chunks'
    # stored weights hold no corpus statistic, and no chunk row holds file_modified.
    report = synced(uri, runs.touched)
    assert report.verification.ok, report.verification.describe()
    assert (report.written, report.deleted, report.unchanged) == (0, 0, len(new))
    # One record appended to a JSONL dump: its chunks alone are written, its neighbours'
    # rows (same file, a new file_size) stay as they were.
    touched, appended = parquet_rows(runs.touched), parquet_rows(runs.appended)
    added = {c for c in appended if c not in touched}
    assert added and {appended[c]["doc_id"] for c in added} == {runs.appended_id}
    report = synced(uri, runs.appended)
    assert report.verification.ok, report.verification.describe()
    assert (report.written, report.deleted, report.unchanged) == (len(added), 0, len(touched))


SPARSE_QUESTIONS = QUESTIONS + (
    "gripper torque limits and firmware",
    "certificate expiry alert",
    "opportunity charging of the courier battery",
    "protective stop during calibration",
    "warranty terms for the NR-7 arm",
    "dispatcher cost design notes",
    "fleet controller outage runbook",
    "team onboarding checklist",
    "REST API rate limits and pagination",
    "incident on 2024-05-21 status page",
)


def check_sparse_ranking(uri: str, run_dir: str, top: Callable[[str, str, int], list[tuple[str, float]]]) -> None:
    """After a change, three rankers agree on the top 10 of 20 questions: ``chunkline query
    --mode sparse``, a reference BM25 (bm25s' scoring on the run's search texts, with the
    mean length the run recorded) and the store's own sparse search (``top(uri, question,
    k)``: (chunk_id, score) best first). Scores to 1e-5; ids the same but for ties within it."""
    from tests.bm25_reference import reference_scores

    assert synced(uri, run_dir).verification.ok
    manifest = load_manifest(run_dir)
    bm25 = manifest.bm25
    assert bm25 is not None
    rows = parquet_rows(run_dir)
    ids = sorted(rows)
    reference = reference_scores([rows[c]["search_text"] for c in ids], SPARSE_QUESTIONS,
                                 avgdl=bm25.reference_avgdl, k1=bm25.k1, b=bm25.b)
    output = str(Path(run_dir).parent)
    for question, expected in zip(SPARSE_QUESTIONS, reference):
        ours = [(h.chunk_id, h.score) for h in search(output, question, k=10, mode="sparse")]
        best = np.sort(expected[expected > 0])[::-1][:10]
        assert ours, question
        np.testing.assert_allclose([s for _, s in ours], best[:len(ours)], rtol=1e-5, err_msg=question)
        assert len(ours) == min(10, len(best)), question
        for chunk_id, score in ours:  # each hit's own score, not only the list of scores
            assert expected[ids.index(chunk_id)] == pytest.approx(score, rel=1e-5)
        theirs = top(uri, question, 10)
        assert len(theirs) == len(ours), question
        np.testing.assert_allclose([s for _, s in theirs], [s for _, s in ours], rtol=1e-5, err_msg=question)
        for (a, sa), (b, sb) in zip(ours, theirs):
            assert a == b or abs(sa - sb) <= 1e-5 * max(abs(sa), 1.0), (question, a, b)


def check_crash_then_resume(uri: str, run_dir: str, progress: Callable[[str], int]) -> None:
    """The sync process SIGKILLed after its third batch; the store holds part of the run and its
    state does not name it; a second sync writes the rest, says it resumed, and verifies.
    ``progress(uri)``: rows the store holds now, read with the store's own client."""
    chunks = len(parquet_rows(run_dir))
    process = subprocess.Popen(
        [sys.executable, "-m", "chunkline.pipeline.sync.command", str(Path(run_dir).parent), "--to", uri,
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
    """The questions embedded as ``chunkline.pipeline.query.dense_scores`` embeds one: the index's model
    and options, from its manifest."""
    from chunkline.embedder import EmbedOptions, embed_texts, load_model
    from chunkline.transforms.model_cache import local_model_dir

    embed = load_manifest(run_dir).setting("embed")
    options = EmbedOptions(**{f.name: embed[f.name] for f in dataclasses.fields(EmbedOptions) if f.name in embed})
    model = load_model(dataclasses.replace(options, model=local_model_dir(options.model)))
    return embed_texts(model, list(questions), options)


def check_exact_dense_search(uri: str, run_dir: str, nearest: Callable[[str, np.ndarray], str]) -> None:
    """The store's exact nearest chunk is ``chunkline.pipeline.query``'s dense top hit, for each question.
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


def _race_one(argv: list[str], barrier, log_prefix: str) -> None:
    """One contender of :func:`race`, in a process forked from the forkserver: its stdout and
    stderr (file descriptors, so a native library's lines too) go to ``log_prefix.out/.err``."""
    out = os.open(log_prefix + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(log_prefix + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(err, 2)
    barrier.wait(timeout=120)
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def race(argv: list[str], contenders: int, logs: Path) -> list[tuple[int, str, str]]:
    """``chunkline sync argv`` in ``contenders`` processes released together by a barrier:
    (exit status, stdout, stderr) of each. The processes fork from a forkserver that imported
    the sync code once, so they start in a second, not in one interpreter start each."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["chunkline.pipeline.sync.command", "chunkline.pipeline.sync.rows",
                                    "chunkline.pipeline.sync.lance", "chunkline.pipeline.sync.pgvector",
                                    "tests.pipeline.sync_cases"])
    barrier = context.Barrier(contenders)
    logs.mkdir(parents=True, exist_ok=True)
    processes = [context.Process(target=_race_one, args=(argv, barrier, str(logs / f"sync{i}")))
                 for i in range(contenders)]
    # The forkserver imports lancedb once and never runs it, so the runtime lancedb resets in
    # each child was never in use: its warning about forking is noise here.
    os.environ["PYTHONWARNINGS"] = "ignore:lancedb fork support:RuntimeWarning"
    try:
        for process in processes:
            process.start()
    finally:
        os.environ.pop("PYTHONWARNINGS", None)
    for process in processes:
        process.join(timeout=300)
    return [(process.exitcode, (logs / f"sync{i}.out").read_text(), (logs / f"sync{i}.err").read_text())
            for i, process in enumerate(processes)]


def check_concurrent_syncs(uri: str, runs, logs: Path, rounds: int = 3, contenders: int = 4) -> None:
    """``contenders`` syncs started together, ``rounds`` times, each round a different run
    (the demo into an empty store, then a whole other corpus, then its small reindex): every
    process exits 0 (it synced) or 75 (another held the store), none prints a traceback, and
    the store ends with exactly the run's rows, each once (``--check``)."""
    for number, run_dir in enumerate((runs.demo_run, runs.first, runs.second)[:rounds]):
        output, run_id = str(Path(run_dir).parent), Path(run_dir).name
        results = race([output, "--to", uri, "--run", run_id, "--batch-size", "50"], contenders,
                       logs / f"round{number}")
        codes = sorted(code for code, _, _ in results)
        assert set(codes) <= {0, 75} and 0 in codes, results
        for code, out, err in results:
            assert "Traceback" not in err and "Traceback" not in out, err
            if code == 75:
                assert "busy" in err, err
        code, out, err = cli(output, "--to", uri, "--run", run_id, "--check")
        assert code == 0, err
        assert f"verified: {len(parquet_rows(run_dir))} rows" in out


def check_a_planted_duplicate_is_found(uri: str, run_dir: str, plant: Callable[[str, str], None]) -> None:
    """A second copy of one row added behind the tool's back (``plant(uri, chunk_id)``):
    ``--check`` names it and the row count; a sync deletes both copies and writes one."""
    output = str(Path(run_dir).parent)
    assert synced(uri, run_dir).verification.ok
    victim = sorted(parquet_rows(run_dir))[2]
    plant(uri, victim)
    code, _, err = cli(output, "--to", uri, "--check")
    rows = len(parquet_rows(run_dir))
    assert code == 1 and f"held more than once: {victim}" in err, err
    assert f"holds {rows + 1:,} rows for the run's {rows:,}" in err
    code, out, err = cli(output, "--to", uri)
    assert code == 0 and "1 written, 1 deleted" in out, err
    assert cli(output, "--to", uri, "--check")[0] == 0


def check_odd_metadata_syncs(uri: str, odd) -> None:
    """The run accepted numbers of every size, a U+0000 and Unicode in its metadata (and
    rejected metadata too deep or too big): the store takes every row, and its values come back
    with the run's digests (jsonb gives 1e20 back as 100000000000000000000)."""
    output, run_id = str(odd.output), Path(odd.run_dir).name
    chunks = len(parquet_rows(odd.run_dir))
    code, out, err = cli(output, "--to", uri, "--run", run_id)
    assert code == 0, err
    assert f"verified: {chunks} rows" in out
    code, out, err = cli(output, "--to", uri, "--run", run_id, "--check")
    assert code == 0, err
    code, out, err = cli(output, "--to", uri, "--run", run_id)
    assert code == 0 and f"0 written, 0 deleted, {chunks} unchanged" in out, err


_SCALARS = (st.none() | st.booleans() | st.integers(-10**300, 10**300)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=10)
_METADATA = st.dictionaries(st.text(min_size=1, max_size=8), _JSON, max_size=5)


def check_metadata_round_trips(uri: str, run_dir: str, examples: int = 25) -> None:
    """Hypothesis: metadata of arbitrary JSON values (integers of any size a double holds,
    floats huge, tiny, integral and negative zero, U+0000 and any other text) made as the run
    makes it (``chunkline.metadata``), written into the store and read back, gives every row
    the run's digest."""
    import pyarrow as pa
    from hypothesis import HealthCheck, given, settings

    from chunkline.metadata import metadata_json, metadata_pairs
    from chunkline.pipeline.sync.rows import DIGEST, canonical_metadata, row_digests

    manifest = load_manifest(run_dir)
    template = load_rows(run_dir, manifest).slice(0, 3).drop_columns([DIGEST])
    store = open_store(uri)
    store.open(template.schema.field("vector").type.list_size, sparse=True)
    counter = iter(range(10**9))
    try:
        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(st.lists(_METADATA, min_size=3, max_size=3))
        def round_trip(values: list[dict]) -> None:
            n = next(counter)
            texts = [canonical_metadata(metadata_json(metadata_pairs(v.items()))) for v in values]
            rows = template.set_column(template.schema.get_field_index("metadata"), "metadata",
                                       pa.array(texts, pa.string()))
            rows = rows.set_column(0, "chunk_id", pa.array([f"prop{n}#{i}" for i in range(3)]))
            rows = rows.append_column(DIGEST, pa.array(row_digests(rows), pa.string()))
            store.upsert(rows)
            held = store.read_all()
            mine = held.filter(pa.compute.starts_with(held.column("chunk_id"), f"prop{n}#"))
            mine = mine.sort_by("chunk_id")
            assert mine.column("chunk_id").to_pylist() == rows.column("chunk_id").to_pylist()
            assert row_digests(mine) == rows.column(DIGEST).to_pylist(), (
                texts, mine.column("metadata").to_pylist())
            store.delete(rows.column("chunk_id").to_pylist())

        round_trip()
    finally:
        store.close()


def check_check_writes_nothing(uri: str, run_dir: str, nothing_there: Callable[[str], bool]) -> None:
    """``--check`` on an empty target creates no table, state, lock or directory, and says
    the store holds 0 of the run's rows. ``nothing_there(uri)``: the store's own client finds
    nothing at all."""
    chunks = len(parquet_rows(run_dir))
    code, _, err = cli(str(Path(run_dir).parent), "--to", uri, "--check")
    assert code == 1 and f"holds 0 rows for the run's {chunks:,}" in err, err
    assert nothing_there(uri)


def check_an_old_format_store_is_rewritten_once(uri: str, odd, age: Callable[[str], None] = lambda uri: None) -> None:
    """A store written by a chunkline of row format 2 (BM25 weights holding IDF, the file's
    size and mtime in every chunk's metadata), its state saying so, ``age(uri)`` making the
    rest of the store as that chunkline left it (Qdrant's sparse vector without Modifier.IDF,
    no terms table in PostgreSQL): ``--check`` says the rows are of the old format (not drift),
    the next sync rewrites each once and says so, the one after writes nothing."""
    import json

    import pyarrow as pa

    from chunkline.sparse import idf
    from chunkline.pipeline.sync.core import SyncState
    from chunkline.pipeline.sync.rows import DIGEST, row_digests

    output, run_id = str(odd.output), Path(odd.run_dir).name
    manifest = load_manifest(odd.run_dir)
    rows = load_rows(odd.run_dir, manifest)
    terms = terms_table(odd.run_dir, manifest)
    df = dict(zip(terms.column("term_id").to_pylist(), terms.column("df").to_pylist()))
    assert manifest.bm25 is not None
    n = manifest.bm25.chunks
    full = [[w * idf(df[t], n) for t, w in zip(ids, weights)] for ids, weights in
            zip(rows.column("sparse_indices").to_pylist(), rows.column("sparse_values").to_pylist())]
    with_facts = [json.dumps({**json.loads(t), "file_size": 4096, "file_modified": "2026-01-01T00:00:00Z"},
                             sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                  for t in rows.column("metadata").to_pylist()]
    old = (rows.drop_columns([DIGEST])
           .set_column(rows.schema.get_field_index("metadata"), "metadata", pa.array(with_facts, pa.string()))
           .set_column(rows.schema.get_field_index("sparse_values"), "sparse_values",
                       pa.array(full, pa.list_(pa.float32()))))
    old = old.append_column(DIGEST, pa.array(row_digests(old), pa.string()))
    outdated = sum(a != b for a, b in zip(old.column(DIGEST).to_pylist(), rows.column(DIGEST).to_pylist()))
    assert outdated == len(rows)  # every row has file facts, at least
    store = open_store(uri)
    try:
        with store.lock("old"):
            store.open(rows.schema.field("vector").type.list_size, sparse=True)
            store.upsert(old)
            store.save_state(SyncState(run_id, None, len(rows), "", row_format=2))
    finally:
        store.close()
    age(uri)
    code, out, err = cli(output, "--to", uri, "--run", run_id, "--check")
    assert code == 0, err
    assert "row format 2" in out and f"rewrites {outdated:,} rows once (not drift)" in out
    code, out, err = cli(output, "--to", uri, "--run", run_id)
    assert code == 0, err
    assert f"{outdated} written, 0 deleted" in out and "was row format 2" in out
    code, out, err = cli(output, "--to", uri, "--run", run_id)
    assert code == 0 and "0 written, 0 deleted" in out and "row format" not in out, err
    # A row that differs beyond the format (its text) is drift, whatever the store's format.
    store = open_store(uri)
    try:
        with store.lock("old"):
            store.open(rows.schema.field("vector").type.list_size, sparse=True)
            edited = old.slice(0, 1)
            edited = edited.set_column(edited.schema.get_field_index("text"), "text",
                                       pa.array(["edited behind the tool's back"], pa.string()))
            store.upsert(edited.drop_columns([DIGEST]).append_column(
                DIGEST, pa.array(row_digests(edited), pa.string())))
            store.save_state(SyncState(run_id, None, len(rows), "", row_format=2))
    finally:
        store.close()
    code, out, err = cli(output, "--to", uri, "--run", run_id, "--check")
    assert code == 1 and "values differ" in err, (out, err)
