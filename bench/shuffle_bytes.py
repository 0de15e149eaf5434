"""What each stage shuffles and writes per document: the figures behind docs/ARCHITECTURE.md's
scale model at 100 M documents (issue 49).

A full run and a rerun with 1 % of the documents changed, each `chunkline run`'s own code in this
process (configs/local.yaml, ``embed=null``) on Beam's in-process FnApiRunner, whose monitoring
infos give every PCollection's element count and sampled encoded size
(``beam:metric:element_count:v1``, ``beam:metric:sampled_byte_size:v1``: the mean of the
sampled elements' encoded sizes, times the count, is the PCollection's bytes). A shuffle is the
input of a ``GroupByKey`` (what a distributed runner sends across the network: Dataflow's
shuffle, Flink's network exchange) and a side input (broadcast to every worker); each is
attributed to the top-level stage that holds it. Combines are lifted by the runner (a partial
combine per bundle before the shuffle), so their shuffle is what the runner's precombine
emits: this bench counts the GroupByKey inside each combine at its measured input, which the
lifting only makes smaller. Bytes written: every file the run added under OUTPUT, by table
(the manifest's listing) and the rest (memo, report, manifest).

    python bench/shuffle_bytes.py --mb 20 [--corpus-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import apache_beam as beam  # noqa: E402

from bench.scale_bench import corpus_for  # noqa: E402

GBK = "beam:transform:group_by_key:v1"
COUNT = "beam:metric:element_count:v1"
SIZE = "beam:metric:sampled_byte_size:v1"


def _capture():
    """Patch ``beam.Pipeline.run`` to keep each run's result and pipeline proto."""
    captured: list[tuple] = []
    original = beam.Pipeline.run

    def run(self, test_runner_api="AUTO"):
        proto = self.to_runner_api()
        result = original(self, test_runner_api)
        captured.append((proto, result))
        return result

    beam.Pipeline.run = run
    return captured


def _pcollection_bytes(result) -> dict[str, tuple[int, float]]:
    """PCollection id -> (elements, bytes), from the runner's monitoring infos."""
    from apache_beam.metrics import monitoring_infos as mi

    counts: dict[str, int] = defaultdict(int)
    sizes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for info in result.monitoring_infos():
        pcollection = info.labels.get(mi.PCOLLECTION_LABEL)
        if not pcollection:
            continue
        if info.urn == COUNT:
            counts[pcollection] += mi.extract_counter_value(info)
        elif info.urn == SIZE:
            distribution = mi.extract_distribution(info)
            sizes[pcollection][0] += distribution[0]  # count sampled
            sizes[pcollection][1] += distribution[1]  # sum of sampled sizes
    out = {}
    for pcollection, elements in counts.items():
        sampled, total = sizes.get(pcollection, (0, 0))
        out[pcollection] = (elements, elements * (total / sampled) if sampled else 0.0)
    return out


def _stage_of(proto, transform_id: str, parents: dict[str, str]) -> str:
    """The top-level stage (a root transform's unique name) that holds ``transform_id``."""
    while parents.get(transform_id) in proto.components.transforms and parents[transform_id] not in proto.root_transform_ids:
        transform_id = parents[transform_id]
    return proto.components.transforms[transform_id].unique_name.split("/")[0]


def shuffles(proto, result) -> dict[str, dict[str, float]]:
    """Stage -> {"shuffle": bytes into its GroupByKeys, "side": bytes of its side inputs,
    "elements": elements into its GroupByKeys}."""
    from apache_beam.portability.api import beam_runner_api_pb2

    measured = _pcollection_bytes(result)
    transforms = proto.components.transforms
    parents = {child: tid for tid, t in transforms.items() for child in t.subtransforms}
    stages: dict[str, dict[str, float]] = defaultdict(lambda: {"shuffle": 0.0, "side": 0.0, "elements": 0})
    for tid, transform in transforms.items():
        if transform.subtransforms:
            continue
        stage = _stage_of(proto, tid, parents)
        if transform.spec.urn == GBK:
            for pcollection in transform.inputs.values():
                elements, size = measured.get(pcollection, (0, 0.0))
                stages[stage]["shuffle"] += size
                stages[stage]["elements"] += elements
        elif transform.spec.urn == "beam:transform:pardo:v1":
            payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
            for tag in payload.side_inputs:
                stages[stage]["side"] += measured.get(transform.inputs[tag], (0, 0.0))[1]
    return dict(stages)


def written(output: Path, run_id: str) -> dict[str, int]:
    """Bytes the run added under OUTPUT: per table its manifest lists from the run's own folder,
    and everything else in the folder."""
    from chunkline.index.manifest import load_manifest

    run_dir = output / run_id
    listing = load_manifest(str(run_dir)).listing
    by_table: dict[str, int] = defaultdict(int)
    mine = {f for f in run_dir.rglob("*") if f.is_file()}
    for table, entries in listing.tables.items():
        for entry in entries:
            path = output / entry.path
            if path in mine:
                by_table[table] += path.stat().st_size
                mine.discard(path)
    for segment in listing.memo or ():
        path = output / segment.path
        if path in mine:
            by_table["memo"] += path.stat().st_size
            mine.discard(path)
    by_table["other (deletions, report, manifest, statistics)"] = sum(f.stat().st_size for f in mine)
    return dict(by_table)


def change(corpus: Path, share: float, seed: int) -> int:
    files = sorted(p for p in corpus.rglob("*") if p.is_file())
    chosen = random.Random(seed).sample(files, max(1, round(share * len(files))))
    for path in chosen:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        head, sep, tail = text.partition("\n\n")
        # A sentence of its own per file: one line in many files would be boilerplate, stripped.
        path.write_text(f"{head}{sep}Tonight {path.name} gained line {seed}.\n\n{tail}",
                        encoding="utf-8", errors="surrogateescape")
    return len(chosen)


def run_once(corpus: Path, output: Path) -> tuple[dict, dict, dict]:
    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run

    captured = _capture()
    config = load_config(ROOT / "configs/local.yaml", [
        f"input.pattern={json.dumps(str(corpus) + '/**')}", f"output.path={json.dumps(str(output))}",
        "embed=null"])
    run(config, allow_shrink=True)
    proto, result = captured[-1]
    from chunkline.index.manifest import load_manifest

    run_id = (output / "LATEST").read_text().strip()
    counts = dict(load_manifest(str(output / run_id)).counts)
    return shuffles(proto, result), written(output, run_id), counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20)
    parser.add_argument("--corpus-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="chunkline-shuffle-"))
    source = corpus_for(args.corpus_dir or work, args.mb)
    corpus = work / "corpus"
    shutil.copytree(source, corpus)
    output = work / "out"
    figures = {}
    for name in ("full", "1 %"):
        changed = change(corpus, 0.01, 1) if name == "1 %" else None
        stage_shuffles, wrote, counts = run_once(corpus, output)
        documents = counts.get("documents") or counts.get("read") or 1
        figures[name] = {"documents": documents, "chunks": counts.get("chunks"), "changed": changed,
                         "stages": stage_shuffles, "written": wrote}
        print(f"== {name}: {documents} documents, {counts.get('chunks')} chunks"
              + (f", {changed} files changed" if changed else "") + f"; counts {counts}")
        for stage, got in sorted(stage_shuffles.items(), key=lambda kv: -kv[1]["shuffle"]):
            if got["shuffle"] or got["side"]:
                print(f"  {stage:40s} shuffle {got['shuffle'] / 1e6:9.2f} MB ({got['shuffle'] / documents:8.0f} B/doc, "
                      f"{got['elements']:,} elements)  side {got['side'] / 1e6:7.2f} MB")
        total = sum(g["shuffle"] for g in stage_shuffles.values())
        print(f"  {'all':40s} shuffle {total / 1e6:9.2f} MB ({total / documents:8.0f} B/doc)")
        for table, size in sorted(wrote.items(), key=lambda kv: -kv[1]):
            print(f"  written {table:36s} {size / 1e6:9.2f} MB ({size / documents:8.0f} B/doc)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
