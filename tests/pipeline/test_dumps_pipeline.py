"""A record dump bigger than one slice is cut (Parquet at row group bounds, JSONL at line
starts) and read by several workers:
the tables equal those of a single worker reading it whole."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from chunkline.transforms.progress import PIECES_READ, PROGRESS_ENV

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
WORDS = "dock arm battery charger lidar route map firmware reset aisle shelf pallet".split()


def job(corpus: Path, output: Path, *overrides: str, beam_args: tuple[str, ...] = ()):
    return run(load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus}/**", f"output.path={output}", "embed=null", *overrides]),
        beam_args)


def table(run_dir: str, name: str) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(Path(run_dir).glob(f"{name}-*.parquet"))])


def pieces_read_per_process(directory: Path) -> dict[str, int]:
    """What each worker process tallied for the live display (transforms/progress.py)."""
    found = {}
    for path in directory.glob("*.json"):
        read = json.loads(path.read_text(encoding="utf-8")).get(PIECES_READ, 0)
        if read:
            found[path.stem] = read
    return found


@pytest.mark.parametrize("dump", ["export.parquet", "tickets.jsonl"])
def test_one_big_dump_is_read_by_both_workers(tmp_path, monkeypatch, dump) -> None:
    corpus = tmp_path / "corpus"
    write_dumps(corpus, 1_200)
    for other in corpus.iterdir():
        if other.name != dump:
            other.unlink()
    tallies = tmp_path / "tallies"
    tallies.mkdir()
    monkeypatch.setenv(PROGRESS_ENV, str(tallies))  # the worker processes inherit it
    spread = job(corpus, tmp_path / "spread", "input.parquet.metadata_columns=[team]",
                 "dedupe.near=null", "input.parquet.slice_bytes=20000",
                 "input.jsonl.slice_bytes=20000",
                 beam_args=("--direct_num_workers=2", "--direct_running_mode=multi_processing"))
    assert spread.published
    read = pieces_read_per_process(tallies)
    # Two worker processes, each having read some of the one file's pieces.
    assert len(read) >= 2 and all(count > 0 for count in read.values()), read
    assert sum(read.values()) > 2


def write_dumps(corpus: Path, rows: int) -> list[str]:
    corpus.mkdir()
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
    return texts


def test_a_sliced_dump_read_by_two_workers_equals_one_worker_reading_it_whole(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    rows = 1_200
    write_dumps(corpus, rows)
    common = ("input.parquet.metadata_columns=[team]", "dedupe.near=null")
    whole = job(corpus, tmp_path / "whole", *common)
    # The documents table in three shards too: a dump's documents are not one worker's sort.
    spread = job(corpus, tmp_path / "spread", *common, "input.parquet.slice_bytes=20000",
                 "input.jsonl.slice_bytes=20000", "output.document_shards=3",
                 beam_args=("--direct_num_workers=2", "--direct_running_mode=multi_processing"))
    assert whole.published and spread.published and whole.counts["kept"] == 2 * rows
    assert whole.counts["rejected"] == 5
    for name in ("chunks", "rejected", "terms"):
        assert table(whole.run_dir, name).equals(table(spread.run_dir, name)), name
    shards = sorted(Path(spread.run_dir).glob("documents-*.parquet"))
    assert [shard.name for shard in shards] == [f"documents-0000{i}-of-00003.parquet" for i in range(3)]
    ids = [pq.read_table(shard, columns=["doc_id"]).column("doc_id").to_pylist() for shard in shards]
    assert all(each == sorted(each) and each for each in ids)  # each shard sorted, none empty
    assert sum(map(len, ids)) == len(set().union(*map(set, ids)))  # a document in one shard
    order = [("doc_id", "ascending"), ("uri", "ascending"), ("status", "ascending")]
    assert table(whole.run_dir, "documents").equals(table(spread.run_dir, "documents").sort_by(order))
