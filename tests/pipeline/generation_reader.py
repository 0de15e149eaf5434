"""A reader of a store's alias, in a process of its own, for ``test_generations``: it queries the
alias in a loop while syncs move it, and writes one JSON line a query to its log.

``python -m tests.pipeline.generation_reader STORE TARGET KNOWN LOG STOP``:

- STORE ``lance`` (TARGET: the LanceDB directory; the reader follows the pointer with
  ``chunkline.pipeline.sync.lance.open_current``) or ``pg`` (TARGET: a libpq URI; the reader queries the
  view ``chunks``);
- KNOWN: an ``.npz`` of every generation's vectors (``<label>/ids`` and ``<label>/vectors``),
  from which each row a query returns is told to be of exactly one generation;
- a query is a "more like this" search through the alias: the nearest chunks to one chunk's
  stored vector, ``K`` rows (the alias's whole view of one generation, whichever width);
- each line: ``{"label": L}`` when all ``K`` rows are of generation L, else ``{"error": ...}``
  (an exception, fewer rows, an unknown vector, rows of two generations);
- it stops when the file STOP exists.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

K = 8
PROBE_INDEX = 3  # the probe is the known chunks' 4th id, sorted: the same chunk in every generation


def load_known(path: str) -> dict[str, dict[str, np.ndarray]]:
    data = np.load(path)
    labels = sorted({key.split("/")[0] for key in data.files})
    return {label: dict(zip(data[f"{label}/ids"].tolist(), data[f"{label}/vectors"])) for label in labels}


def classify(rows: list[tuple[str, np.ndarray]], known: dict[str, dict[str, np.ndarray]]) -> dict:
    """``{"label": L}`` when every row is exactly a vector of generation L, else why not."""
    if len(rows) != K:
        return {"error": f"{len(rows)} rows, not {K}"}
    labels = set()
    for chunk_id, vector in rows:
        mine = [label for label, vectors in known.items()
                if chunk_id in vectors and len(vectors[chunk_id]) == len(vector)
                and float(np.max(np.abs(vectors[chunk_id] - vector))) < 1e-5]
        if len(mine) != 1:
            return {"error": f"{chunk_id}: a vector of {mine or 'no known generation'}"}
        labels.update(mine)
    return {"label": labels.pop()} if len(labels) == 1 else {"error": f"rows of {sorted(labels)}"}


def lance_query(target: str, probe: str) -> list[tuple[str, np.ndarray]]:
    from chunkline.pipeline.sync.lance import open_current

    table = open_current(target, "chunks")  # one version of one generation from here on
    found = table.search().where(f"chunk_id = '{probe}'").select(["vector"]).limit(1).to_arrow()
    vector = np.asarray(found.column("vector")[0].as_py(), np.float32)
    hits = (table.search(vector, vector_column_name="vector").distance_type("cosine").limit(K)
            .select(["chunk_id", "vector"]).to_arrow())
    return [(c, np.asarray(v, np.float32)) for c, v in zip(hits.column("chunk_id").to_pylist(),
                                                            hits.column("vector").to_pylist())]


def pg_query(conn, probe: str) -> list[tuple[str, np.ndarray]]:
    # One statement: the view resolves to one generation's table for all of it. The vector is
    # selected as real[], whose type is the same in every width (a prepared statement's result
    # type must not change: psycopg prepares a query it runs five times).
    rows = conn.execute(
        "SELECT chunk_id, embedding::real[] FROM chunks ORDER BY embedding <=> "
        "(SELECT embedding FROM chunks WHERE chunk_id = %s), chunk_id LIMIT %s", (probe, K)).fetchall()
    return [(c, np.asarray(v, np.float32)) for c, v in rows]


def main(store: str, target: str, known_path: str, log_path: str, stop: str) -> int:
    known = load_known(known_path)
    probe = sorted(next(iter(known.values())))[PROBE_INDEX]
    conn = None
    if store == "pg":
        import psycopg

        conn = psycopg.connect(target, autocommit=True)
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:
        while not os.path.exists(stop):
            try:
                rows = lance_query(target, probe) if store == "lance" else pg_query(conn, probe)
                line = classify(rows, known)
            except Exception as exc:  # noqa: BLE001 - every failure is what the test counts
                line = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
            log.write(json.dumps({"t": time.time(), **line}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
