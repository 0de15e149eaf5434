"""``transforms/chunk.py`` and ``transforms/mltransform.py``: chunkline inside someone else's
Beam pipeline. A user's own pipeline (``beam.Create`` or ``ReadFromText`` -> ``ChunkTexts`` ->
``WriteToParquet``) on the in-process runner writes the chunks ``chunkline run`` writes for the
same texts (ids, offsets, heading paths, text, metadata, vectors); ``MLTransform`` with
``ChunklineChunker`` gives Beam ``Chunk``\\ s of the same spans; a bad element is a reason,
never a failed pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.ml.rag.types import Chunk
from apache_beam.ml.transforms.base import MLTransform
from apache_beam.testing.util import assert_that, equal_to

from chunkline.readers.elements import text_id
from chunkline.records import Document, chunk_row
from chunkline.splitting.options import SplitOptions
from chunkline.pipeline.config import load_config
from chunkline.pipeline.run import run
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.chunk import ChunkTexts
from chunkline.transforms.mltransform import ChunklineChunker

pytestmark = pytest.mark.slow  # runs Beam pipelines and a chunkline run

ROOT = Path(__file__).resolve().parents[2]
# Every column a chunk row holds from splitting (the run adds content keys and BM25 weights).
SPLIT_COLUMNS = ("doc_id", "chunk_id", "chunk_index", "start", "end", "headings", "text", "tokens",
                 "table_header", "context", "context_status", "search_text", "metadata",
                 "page_start", "page_end")
TOPICS = ("gripper torque", "conveyor speed", "firmware rollback", "sensor drift", "arm payload",
          "battery swap", "safety fence", "calibration jig")


def _prose(seed: int, sentences: int) -> str:
    """Distinct sentences (dedupe and boilerplate leave them alone), long enough to cut."""
    return " ".join(f"Step {seed}.{i}: check the {TOPICS[(seed + i) % len(TOPICS)]} before shift "
                    f"{i * 7 + seed} and log reading {i * 13 + seed * 3} in the binder."
                    for i in range(sentences))


FILES = {
    "manuals/gripper.md": (
        "# Gripper G2\n\n" + _prose(1, 6) + "\n\n## Torque limits\n\n" + _prose(2, 30)
        + "\n\n### Table of limits\n\n| joint | limit | unit |\n|---|---|---|\n"
        + "".join(f"| j{i} | {i * 11} | Nm for load case {i} |\n" for i in range(60))
        + "\n## Maintenance\n\n" + _prose(3, 12) + "\n"),
    "notes/shift.txt": _prose(4, 40) + "\n",
    "tools/calibrate.py": "class Calibrator:\n" + "\n".join(
        f"    def joint_{i}(self, arm, reading):\n        \"\"\"Calibrate joint {i} on the jig.\"\"\"\n"
        f"        offset = reading - {i * 3}\n        return arm.adjust({i}, offset * {i + 1})\n"
        for i in range(40)),
}
RECORDS = [
    {"id": "faq-1", "text": "# FAQ\n\n## Reset\n\n" + _prose(5, 25),
     "metadata": {"team": "arm", "rank": 1}},
    {"id": 2, "text": _prose(6, 5), "metadata": {"team": "floor"}},
    {"id": "faq-3", "text": "Short answer: " + _prose(7, 2)},
]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """The corpus as files (three of them and a JSONL dump) and what ``chunkline run``, with
    the default config (configs/local.yaml: the model's budget, vectors), made of it."""
    base = tmp_path_factory.mktemp("composite")
    corpus = base / "corpus"
    for name, text in FILES.items():
        path = corpus / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (corpus / "dump.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS),
                                       encoding="utf-8")
    config = load_config(ROOT / "configs" / "local.yaml",
                         [f"input.pattern={corpus}/**", f"output.path={base / 'index'}"])
    summary = run(config)
    assert summary.counts["kept"] == len(FILES) + len(RECORDS), summary.counts
    chunks = pa.concat_tables(pq.read_table(f) for f in summary.files["chunks"])
    return corpus, config, _rows(chunks)


def _rows(table: pa.Table) -> dict[str, dict]:
    """Chunk rows by chunk id."""
    rows = {row["chunk_id"]: row for row in table.to_pylist()}
    assert len(rows) == table.num_rows
    return rows


def _written(prefix: Path) -> dict[str, dict]:
    return _rows(pa.concat_tables(pq.read_table(f) for f in sorted(prefix.parent.glob(prefix.name + "*"))))


def _same_chunks(ours: dict[str, dict], theirs: dict[str, dict], vectors: bool) -> None:
    assert sorted(ours) == sorted(theirs)
    for chunk_id, row in ours.items():
        expected = theirs[chunk_id]
        assert {c: row[c] for c in SPLIT_COLUMNS} == {c: expected[c] for c in SPLIT_COLUMNS}, chunk_id
        if vectors:
            # The same model and dtype, other batches: equal up to the arithmetic's rounding.
            np.testing.assert_allclose(row["embedding"], expected["embedding"], atol=2e-2)
            assert float(np.dot(row["embedding"], expected["embedding"])) > 0.999
        else:
            assert row["embedding"] is None


def _file_elements(corpus: Path) -> list[dict]:
    """The files as a user hands them over: the ids and uris the run gives a file (its path
    under the input root, its absolute path)."""
    return [{"id": name, "uri": str(corpus / name), "text": text} for name, text in FILES.items()]


def test_create_to_parquet_writes_what_chunkline_run_writes(indexed, tmp_path) -> None:
    corpus, config, run_rows = indexed
    # The config's split and embed sections are the library's options objects.
    chunker = ChunkTexts(config.split.options(), config.embed.options())
    schema = chunker.schema()
    out = tmp_path / "chunks"
    with fnapi_pipeline() as p:
        (p | beam.Create(_file_elements(corpus))
           | chunker
           | beam.Map(chunk_row, schema)
           | beam.io.WriteToParquet(str(out), schema, file_name_suffix=".parquet"))
    theirs = {k: v for k, v in run_rows.items() if v["doc_id"] in FILES}
    ours = _written(out)
    _same_chunks(ours, theirs, vectors=True)
    # The corpus holds what the comparison is about: headings, a split table, code, many cuts.
    assert any(r["table_header"] for r in ours.values())
    assert any(r["headings"][:1] == ["Calibrator"] for r in ours.values())
    assert max(r["chunk_index"] for r in ours.values()) >= 3


def test_read_from_text_without_vectors_matches_the_run(indexed, tmp_path) -> None:
    corpus, config, run_rows = indexed
    dump = corpus / "dump.jsonl"
    chunker = ChunkTexts(SplitOptions())  # the defaults are the config's
    schema = chunker.schema()
    out = tmp_path / "chunks"
    with fnapi_pipeline() as p:
        (p | beam.io.ReadFromText(str(dump))
           | "Parse" >> beam.Map(json.loads)
           | "Source" >> beam.Map(lambda record: {**record, "uri": str(dump)})
           | chunker
           | beam.Map(chunk_row, schema)
           | beam.io.WriteToParquet(str(out), schema, file_name_suffix=".parquet"))
    ids = {str(r["id"]) for r in RECORDS}
    _same_chunks(_written(out), {k: v for k, v in run_rows.items() if v["doc_id"] in ids},
                 vectors=False)


def test_mltransform_with_the_chunker_gives_beam_chunks_of_the_same_spans(indexed, tmp_path) -> None:
    corpus, _, run_rows = indexed
    theirs = sorted((r["chunk_id"], r["chunk_index"], r["text"], r["start"], r["end"], r["headings"])
                    for r in run_rows.values() if r["doc_id"] in FILES)

    def spans(chunk: Chunk):
        assert isinstance(chunk, Chunk)
        m = chunk.metadata
        assert m["source_uri"] == str(corpus / m["doc_id"]) and m["kind"] == "manual"
        return chunk.id, chunk.index, chunk.content.text, m["start"], m["end"], m["headings"]

    elements = [{"path": e["id"], "uri": e["uri"], "body": e["text"], "kind": "manual"}
                for e in _file_elements(corpus)]
    chunker = ChunklineChunker(SplitOptions(), text_field="body", id_field="path",
                               metadata_fields=("kind",))
    artifacts = tmp_path / "artifacts"
    with fnapi_pipeline() as p:
        chunks = (p | beam.Create(elements)
                    | MLTransform(write_artifact_location=str(artifacts)).with_transform(chunker))
        assert_that(chunks | beam.Map(spans), equal_to(theirs))
    # The provider was stored with the transform: a consuming pipeline splits the same way.
    with fnapi_pipeline() as p:
        chunks = p | beam.Create(elements) | MLTransform(read_artifact_location=str(artifacts))
        assert_that(chunks | beam.Map(spans), equal_to(theirs))


BAD = [
    (5, "", "not a str, dict or Document (got int)"),
    ({"body": "no text key"}, "", "no 'text' key"),
    ({"id": "blank", "text": " \n "}, "blank", "empty document (id 'blank')"),
    ({"id": 1.5, "text": "a float id"}, "", "'id' is float, not a string or integer"),
    ({"id": "m", "text": "x", "metadata": ["a"]}, "m", "'metadata' is list, not an object (id 'm')"),
    (Document("d", "/d.md", "\ud800"), "d", "'text' contains an unpaired surrogate escape (id 'd')"),
]


def test_bad_elements_are_rejected_with_their_reason_and_counted() -> None:
    good = "# Title\n\nA good text."
    chunker = ChunkTexts(SplitOptions(tokenizer="words", max_tokens=50))  # no model read
    p = fnapi_pipeline()
    result = p | beam.Create([good] + [e for e, _, _ in BAD]) | chunker.with_rejected()
    assert_that(result.rejected | beam.Map(lambda r: (r.doc_id, r.reason)),
                equal_to([(doc_id, reason) for _, doc_id, reason in BAD]), label="rejected")
    assert_that(result.chunks | beam.Map(lambda c: (c.doc_id, c.chunk_id, c.headings)),
                equal_to([(text_id(good), f"{text_id(good)}#0-{len(good)}", ("Title",))]),
                label="chunks")
    # Without with_rejected: the same chunks, the bad elements counted (and logged).
    plain = p | "Plain" >> beam.Create([good] + [e for e, _, _ in BAD]) | "Chunk" >> chunker
    assert_that(plain | "Ids" >> beam.Map(lambda c: c.doc_id), equal_to([text_id(good)]),
                label="plain")
    outcome = p.run()
    outcome.wait_until_finish()
    counted = outcome.metrics().query(MetricsFilter().with_name("elements_rejected"))["counters"]
    assert sum(c.committed for c in counted) == 2 * len(BAD)
