"""Index generations (``chunkline.pipeline.sync.generations``): a run of another embedding signature goes
to a generation of its own and the store's alias moves to it once verified.

One index, four runs of one small corpus: all-MiniLM-L6-v2 (``a``), the same model storing int8
vectors (``b``: another signature, the same width), 256-d (``c``: another width) and ``c`` again
(no change). Each store: ``a`` synced, then ``b`` and ``c`` while a reader in another process
(LanceDB, PostgreSQL) queries the alias in a loop and records each answer's generation: never an
error, an empty or short answer, or rows of two generations, and never back to an older one.
Then the no-change run makes no generation, ``chunkline publish`` of ``a`` moves the alias back
(nothing written: its generation still holds it), ``--drop-old-generations`` removes the rest.
Qdrant's local mode admits one client, so its alias is read in this process between syncs.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from chunkline.pipeline.manifest import load_manifest
from chunkline.pipeline.sync.generations import generation_name, signature_of
from chunkline.pipeline.sync.rows import load_rows
from chunkline.pipeline.sync.uri import open_store
from tests.pipeline import sync_cases as cases
from tests.pipeline.generation_reader import K, classify

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Runs:
    output: Path
    a: str  # run directories: all-MiniLM-L6-v2, float32
    b: str  # output.vector_dtype: int8 (384-d)
    c: str  # embed.dims: 256
    c2: str  # c's config again, nothing changed
    known: Path  # every generation's vectors, for the reader (``generation_reader.load_known``)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run
    from tests.pipeline.test_reindex import write_corpus

    base = tmp_path_factory.mktemp("generations")
    corpus, output = base / "corpus", base / "index"
    write_corpus(corpus, 8)

    def job(*overrides: str) -> str:
        return run(load_config(ROOT / "configs" / "local.yaml", [
            f"input.pattern={corpus}/**", f"output.path={output}", *overrides])).run_dir

    a, b, c = job(), job("output.vector_dtype=int8"), job("embed.dims=256")
    c2 = job("embed.dims=256")
    known = {}
    for label, run_dir in (("a", a), ("b", b), ("c", c)):
        rows = load_rows(run_dir, load_manifest(run_dir))
        known[f"{label}/ids"] = np.array(rows.column("chunk_id").to_pylist())
        vectors = rows.column("vector").to_pylist()
        known[f"{label}/vectors"] = np.stack([np.asarray(v, np.float32) for v in vectors])
    np.savez(base / "known.npz", **known)
    return Runs(output, a, b, c, c2, base / "known.npz")


def name(run_dir: str) -> str:
    return Path(run_dir).name


def gen(run_dir: str, base: str = "chunks") -> str:
    return generation_name(base, signature_of(load_manifest(run_dir)))


def sync(runs: Runs, uri: str, run_dir: str, *extra: str) -> str:
    code, out, err = cases.cli(str(runs.output), "--to", uri, "--run", name(run_dir), *extra)
    assert code == 0, err
    return out


def layout(uri: str) -> tuple[str | None, list[str]]:
    """(the generation the alias gives, every generation), as the sync sees them."""
    store = open_store(uri)
    try:
        return store.current(), store.generations()
    finally:
        store.close()


class Reader:
    """``generation_reader`` in a process of its own, querying the alias until stopped."""

    def __init__(self, store: str, target: str, runs: Runs, logs: Path) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        self.log, self.stop = logs / "reader.jsonl", logs / "stop"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.pipeline.generation_reader", store, target,
             str(runs.known), str(self.log), str(self.stop)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "LANCEDB_LOG": "error"})

    def lines(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.endswith("}")]

    def wait_for(self, label: str, timeout: float = 60) -> None:
        """Until the reader has answered from generation ``label`` five times (the switch is
        behind it, and it kept reading after)."""
        deadline = time.monotonic() + timeout
        while sum(line.get("label") == label for line in self.lines()) < 5:
            assert self.process.poll() is None, "the reader exited"
            assert time.monotonic() < deadline, f"the reader never saw generation {label}"
            time.sleep(0.05)

    def finish(self) -> list[dict]:
        self.stop.touch()
        assert self.process.wait(timeout=60) == 0
        return self.lines()


def assert_clean(lines: list[dict], order: str) -> None:
    """No answer an error, empty, short or mixed; the generations seen in ``order``, never back."""
    errors = [line for line in lines if "error" in line]
    assert not errors, errors[:5]
    seen = [line["label"] for line in lines]
    changes = [label for i, label in enumerate(seen) if i == 0 or seen[i - 1] != label]
    assert "".join(changes) == order, changes


def check_switches_under_a_reader(runs: Runs, uri: str, reader: Reader) -> list[dict]:
    """``a`` is in the store and the reader started: ``b`` then ``c`` switch under it."""
    spans = []
    try:
        reader.wait_for("a")
        for run_dir, moved in ((runs.b, "chunks"), (runs.c, gen(runs.b))):
            started = time.time()
            out = sync(runs, uri, run_dir)
            spans.append((started, time.time()))
            assert f"the alias moved from {moved} to {gen(run_dir)}" in out, out
            reader.wait_for("b" if run_dir == runs.b else "c")
    finally:
        lines = reader.finish()
    assert_clean(lines, "abc")
    # The reader answered while each sync wrote and switched (a sync can take 0.1 s: on a loaded
    # machine the reader may answer only once in it).
    for started, ended in spans:
        assert any(started <= line["t"] <= ended for line in lines), (started, ended)
    return lines


def check_no_change_rollback_and_drop(runs: Runs, uri: str, a_gen: str) -> None:
    """After ``c``: the no-change run, a ``--check`` of ``a``, the rollback to ``a`` by
    ``chunkline publish``, the drop. ``a_gen``: the generation holding ``a``."""
    from chunkline.pipeline.cli import main

    current, held = layout(uri)
    assert current == gen(runs.c) and held == sorted([a_gen, gen(runs.b), gen(runs.c)])
    out = sync(runs, uri, runs.c2)  # the same signature: the current generation, rows unchanged
    assert " 0 written, 0 deleted" in out and "alias moved" not in out, out
    assert layout(uri) == (current, held)
    # --check of a run whose generation the alias does not give: it fails, naming both.
    code, _, err = cases.cli(str(runs.output), "--to", uri, "--run", name(runs.a), "--check")
    assert code == 1 and f"get generation {gen(runs.c)!r}, not this run's {a_gen!r}" in err, err
    # A rollback: publish a, and sync it. Its generation holds it: the alias moves, nothing written.
    out, err = io.StringIO(), io.StringIO()
    assert main(["publish", str(runs.output), name(runs.a), "--to", uri], out, err) == 0, err.getvalue()
    assert " 0 written, 0 deleted" in out.getvalue(), out.getvalue()
    assert f"the alias moved from {gen(runs.c)} to {a_gen}" in out.getvalue(), out.getvalue()
    assert layout(uri) == (a_gen, held)
    assert cases.cli(str(runs.output), "--to", uri, "--check")[0] == 0
    out = sync(runs, uri, runs.a, "--drop-old-generations")
    dropped = next(line for line in out.splitlines() if line.startswith("dropped generations: "))
    names = dropped.removeprefix("dropped generations: ").split(", ")
    assert sorted(names) == sorted([gen(runs.b), gen(runs.c)])
    assert layout(uri) == (a_gen, [a_gen])
    assert cases.cli(str(runs.output), "--to", uri, "--check")[0] == 0


def forget_signatures(uri: str) -> None:
    """The store as a chunkline before generations left it: no signature in its state."""
    store = open_store(uri)
    try:
        store.use(store.current())
        store.open(384, sparse=True, create=False)
        store.save_state(replace(store.state(), signature=""))
    finally:
        store.close()


def test_lance_generations_switch_under_a_reader_roll_back_and_drop(runs, tmp_path) -> None:
    import lancedb

    from chunkline.pipeline.sync.lance import open_current

    path = tmp_path / "lance"
    uri = f"lancedb://{path}?table=chunks"
    sync(runs, uri, runs.a)
    assert layout(uri) == ("chunks", ["chunks"]) and not (path / "chunks_alias.lance").exists()
    forget_signatures(uri)  # the first generation-aware sync of an older store finds it again
    check_switches_under_a_reader(runs, uri, Reader("lance", str(path), runs, tmp_path / "logs"))
    # The first generation keeps its plain name: the pointer names the generation readers get.
    assert layout(uri)[1] == sorted(["chunks", gen(runs.b), gen(runs.c)])
    pointer = lancedb.connect(path).open_table("chunks_alias").to_arrow()
    assert pointer.column("generation").to_pylist() == [gen(runs.c)]
    assert open_current(str(path)).count_rows() == len(cases.parquet_rows(runs.c))
    # The first generation keeps its plain name in LanceDB (the pointer is a table of its own).
    check_no_change_rollback_and_drop(runs, uri, "chunks")
    table = open_current(str(path))
    vectors = table.search().select(["chunk_id", "vector"]).limit(None).to_arrow()
    rows = sorted(zip(vectors.column("chunk_id").to_pylist(),
                      [np.asarray(v, np.float32) for v in vectors.column("vector").to_pylist()]))
    assert classify(rows[:K], _known(runs)) == {"label": "a"}


def _known(runs: Runs) -> dict:
    from tests.pipeline.generation_reader import load_known

    return load_known(str(runs.known))


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory):
    from tests.conftest import postgres_server

    with postgres_server() as server:
        yield server.get_uri()


def test_pgvector_generations_switch_under_a_reader_roll_back_and_drop(runs, pg_server, tmp_path,
                                                                      monkeypatch) -> None:
    import psycopg

    from chunkline.pipeline.sync.pgvector import PgvectorStore

    # Each view of a switch held for 0.2 s inside its transaction: the reader's queries meet
    # the switch's locks for certain, and must wait for it, then read the new generation.
    point_view = PgvectorStore._point_view

    def held(self, *args) -> None:
        point_view(self, *args)
        time.sleep(0.2)

    monkeypatch.setattr(PgvectorStore, "_point_view", held)
    uri = f"{pg_server}&table=chunks"
    sync(runs, uri, runs.a)
    assert layout(uri) == ("chunks", ["chunks"])
    with psycopg.connect(pg_server, autocommit=True) as conn:  # a state table from before generations
        conn.execute("ALTER TABLE chunks_sync DROP COLUMN signature")
    lines = check_switches_under_a_reader(runs, uri, Reader("pg", pg_server, runs, tmp_path / "logs"))
    waits = [b["t"] - a["t"] for a, b in zip(lines, lines[1:])]
    assert sum(wait > 0.4 for wait in waits) >= 2  # a query waited out each switch, then answered
    with psycopg.connect(pg_server, autocommit=True) as conn:
        kinds = dict(conn.execute("SELECT relname::text, relkind::text FROM pg_class WHERE relname = "
                                  "ANY(%s)", (["chunks", "chunks_sync", "chunks_terms"],)).fetchall())
        assert kinds == {"chunks": "v", "chunks_sync": "v", "chunks_terms": "v"}
        # Row-level security on the generation tables applies to readers of the views.
        options = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'chunks'").fetchone()[0]
        assert options == ["security_invoker=true"]
        # A reader's BM25 query through the alias: N and df of the generation it reads.
        n = conn.execute("SELECT bm25_chunks FROM chunks_sync").fetchone()[0]
        assert n == len(cases.parquet_rows(runs.c))
        assert conn.execute("SELECT count(*) FROM chunks_terms").fetchone()[0] > 0
        # The first generation's plain tables took its generation's name, index included.
        indexes = {r[0] for r in conn.execute("SELECT indexname::text FROM pg_indexes WHERE tablename = %s",
                                              (gen(runs.a),))}
        assert f"{gen(runs.a)}_hnsw" in indexes
    check_no_change_rollback_and_drop(runs, uri, gen(runs.a))
    # A view of the user's over the alias: a same-width switch keeps it (CREATE OR REPLACE VIEW);
    # a width change cannot, and says so in one line, the alias left where it was.
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute("CREATE VIEW titles AS SELECT chunk_id, headings FROM chunks")
    code, _, err = cases.cli(str(runs.output), "--to", uri, "--run", name(runs.c))
    assert code == 2 and "objects of yours depend on its views" in err and "Traceback" not in err, err
    assert layout(uri)[0] == gen(runs.a)
    sync(runs, uri, runs.b)
    assert layout(uri)[0] == gen(runs.b)


def test_qdrant_generations_alias_in_process(runs, tmp_path) -> None:
    from qdrant_client import QdrantClient

    path = tmp_path / "qdrant"
    uri = f"qdrant://{path}?table=chunks"

    def through_alias() -> dict:
        client = QdrantClient(path=str(path))
        try:
            points, _ = client.scroll("chunks", limit=10_000, with_payload=["chunk_id"], with_vectors=True)
        finally:
            client.close()
        rows = sorted((p.payload["chunk_id"], np.asarray(p.vector["dense"], np.float32)) for p in points)
        return classify(rows[:K], _known(runs))

    sync(runs, uri, runs.a)
    assert layout(uri) == ("chunks", ["chunks"]) and through_alias() == {"label": "a"}
    forget_signatures(uri)
    for run_dir, label in ((runs.b, "b"), (runs.c, "c")):
        sync(runs, uri, run_dir)
        assert layout(uri)[0] == gen(run_dir) and through_alias() == {"label": label}
    check_no_change_rollback_and_drop(runs, uri, gen(runs.a))
    assert through_alias() == {"label": "a"}
