"""A record dump bigger than one slice is cut (Parquet at row group bounds, JSONL at line
starts) and read by several workers:
the tables equal those of a single worker reading it whole."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import load_config
from pipeline.run import run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
WORDS = "dock arm battery charger lidar route map firmware reset aisle shelf pallet".split()


def job(corpus: Path, output: Path, *overrides: str, beam_args: tuple[str, ...] = ()):
    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null", *overrides]),
        beam_args)


def table(run_dir: str, name: str) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(Path(run_dir).glob(f"{name}-*.parquet"))])


def test_a_sliced_dump_read_by_two_workers_equals_one_worker_reading_it_whole(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rows = 1_200
    texts = [" ".join(WORDS[(i * k + k) % len(WORDS)] for k in range(1, 30)) + f" ticket {i}."
             for i in range(rows)]
    pq.write_table(pa.table({"id": [f"T-{i:05d}" for i in range(rows)], "text": texts,
                             "team": [("fleet", "arm")[i % 2] for i in range(rows)]}),
                   corpus / "export.parquet", row_group_size=60)
    with (corpus / "tickets.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(rows):
            handle.write(json.dumps({"id": f"J-{i:05d}", "text": texts[(i * 7) % rows] + f" line {i}.",
                                     "metadata": {"team": "dock"}}) + "\n")
            if i % 250 == 0:
                handle.write("{broken\n")  # a rejected line, numbered as in the file
    common = ("input.parquet.metadata_columns=[team]", "dedupe.near=null")
    whole = job(corpus, tmp_path / "whole", *common)
    spread = job(corpus, tmp_path / "spread", *common, "input.parquet.slice_bytes=20000",
                 "input.jsonl.slice_bytes=20000",
                 beam_args=("--direct_num_workers=2", "--direct_running_mode=multi_processing"))
    assert whole.published and spread.published and whole.counts["kept"] == 2 * rows
    assert whole.counts["rejected"] == 5
    for name in ("chunks", "documents", "rejected", "terms"):
        assert table(whole.run_dir, name).equals(table(spread.run_dir, name)), name
