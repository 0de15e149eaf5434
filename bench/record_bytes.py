"""Bytes per chunk record in a shuffle: the registered coder (transforms/coders.py) against what
Beam did without it (its FastPrimitivesCoder falls back to pickling a dataclass) and plain pickle.

Reads the chunks of a run's output (embed on: the vectors are the model's float32), rebuilds each
ChunkRecord as it was in the pipeline (the heading prefix, not stored, is what ``search_text``
holds before the context, table header and text), checks the coder decodes it exactly, and
prints mean and max bytes per record:

    chunkline run --config configs/local.yaml --set output.path=/tmp/demo
    python bench/record_bytes.py /tmp/demo            # its LATEST run, or a run directory
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq

from chunkline.records import ChunkRecord
from chunkline.transforms.coders import ChunkRecordCoder

TARGET = 2200  # bytes per record (2.2 KB), mean, with the demo config


def run_dir(path: Path) -> Path:
    latest = path / "LATEST"
    return path / latest.read_text().strip() if latest.is_file() else path


def _rows(directory: Path):
    """The run's chunk rows through its manifest (a rerun's may lie in earlier runs' files), or
    a folder of chunk Parquet files (``chunks/*.parquet`` or ``chunks*.parquet``)."""
    if (directory / "manifest.json").is_file():
        from chunkline.index.manifest import load_manifest
        from chunkline.index.tables import read_table

        yield from read_table(str(directory), load_manifest(str(directory)), "chunks").to_pylist()
        return
    for shard in sorted((directory / "chunks").glob("*.parquet")) or sorted(directory.glob("chunks*.parquet")):
        yield from pq.read_table(shard).to_pylist()


def records(directory: Path):
    for row in _rows(directory):
        context = row["context"] + "\n\n" if row["context"] else ""
        suffix = context + row["table_header"] + row["text"]
        search = row["search_text"]
        assert search.endswith(suffix), row["chunk_id"]
        vector = row["embedding"]
        yield ChunkRecord(
            doc_id=row["doc_id"], chunk_id=row["chunk_id"], chunk_index=row["chunk_index"],
            start=row["start"], end=row["end"], headings=tuple(row["headings"]), text=row["text"],
            tokens=row["tokens"], embedding=tuple(vector) if vector is not None else None,
            prefix=search[: len(search) - len(suffix)], context=row["context"],
            context_status=row["context_status"], table_header=row["table_header"],
            content_key=row["content_key"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="an output root (its LATEST run) or a run directory")
    args = parser.parse_args(argv)
    coder, fallback = ChunkRecordCoder(), beam.coders.FastPrimitivesCoder()
    sizes: dict[str, list[int]] = {"coder": [], "beam fallback": [], "pickle": [], "text": []}
    for record in records(run_dir(args.output)):
        encoded = coder.encode(record)
        decoded = coder.decode(encoded)
        assert decoded == record and decoded.embedding == record.embedding, record.chunk_id
        sizes["coder"].append(len(encoded))
        sizes["beam fallback"].append(len(fallback.encode(record)))
        sizes["pickle"].append(len(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)))
        sizes["text"].append(len(record.text.encode("utf-8", "surrogatepass")))
    if not sizes["coder"]:
        print("no chunks found", file=sys.stderr)
        return 2
    count = len(sizes["coder"])
    print(f"{count} chunk records, decoded exactly by the coder")
    for name, values in sizes.items():
        print(f"  {name:14s} mean {sum(values) / count:7.0f} B   max {max(values):6d} B")
    mean = sum(sizes["coder"]) / count
    print(f"coder mean {mean:.0f} B {'<=' if mean <= TARGET else '>'} target {TARGET:.0f} B")
    return 0 if mean <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
