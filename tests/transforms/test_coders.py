"""The shuffle coders (transforms/coders.py): identity on every record, compact, deterministic,
registered, and the join that uses them."""

from __future__ import annotations

import math
import pickle

import apache_beam as beam
import numpy as np
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.records import ChunkRecord, Document, DocumentChunks, DocumentStatus, Rejected, chunk_id
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.coders import (
    ChunkRecordCoder,
    DocumentChunksCoder,
    DocumentCoder,
    DocumentStatusCoder,
    JoinByKey,
    RejectedCoder,
)

# Any text, lone surrogates included (a JSON "\ud800" decodes to one), empty and non-BMP.
TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)
INTS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOAT32 = st.floats(width=32)  # what a model writes: exactly float32 (NaN, inf, -0.0 included)
VECTORS = st.none() | st.tuples() | st.lists(FLOAT32, max_size=20).map(tuple) | st.lists(
    st.floats(), max_size=20).map(tuple)  # float64 values (written in code) must survive too
PRINCIPALS = st.none() | st.lists(TEXT, max_size=3).map(tuple)  # None: access control off

CHUNKS = st.builds(
    ChunkRecord, doc_id=TEXT, chunk_id=TEXT, chunk_index=INTS, start=INTS, end=INTS,
    headings=st.lists(TEXT, max_size=4).map(tuple), text=TEXT, tokens=INTS, embedding=VECTORS,
    prefix=TEXT, context=TEXT, context_status=TEXT, table_header=TEXT, content_key=TEXT,
    carry_key=TEXT, principals=PRINCIPALS)
DOCUMENTS = st.builds(
    Document, doc_id=TEXT, uri=TEXT, text=TEXT,
    metadata=st.lists(st.tuples(TEXT, TEXT), max_size=3).map(tuple), position=INTS, encoding=TEXT,
    input_digest=TEXT, principals=PRINCIPALS, memo=st.binary(max_size=40))


def same_fields(a, b) -> bool:
    """Every field equal, including those equality leaves out (embedding, position, encoding),
    floats bitwise (NaN == NaN, -0.0 != 0.0)."""
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if name == "embedding" and x is not None and y is not None:
            if np.asarray(x, "<f8").tobytes() != np.asarray(y, "<f8").tobytes():
                return False
            assert all(type(v) is float for v in y)
        elif name == "chunks":
            if len(x) != len(y) or not all(same_fields(c, d) for c, d in zip(x, y)):
                return False
        elif name == "document":
            if not same_fields(x, y):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(CHUNKS)
def test_chunk_coder_is_the_identity(record) -> None:
    coder = ChunkRecordCoder()
    encoded = coder.encode(record)
    assert same_fields(coder.decode(encoded), record)
    assert coder.encode(coder.decode(encoded)) == encoded  # deterministic


@settings(max_examples=100, deadline=None)
@given(st.builds(DocumentChunks, document=DOCUMENTS, chunks=st.lists(CHUNKS, max_size=3).map(tuple)))
def test_document_chunks_coder_is_the_identity(element) -> None:
    coder = DocumentChunksCoder()
    assert same_fields(coder.decode(coder.encode(element)), element)


@settings(max_examples=100, deadline=None)
@given(st.builds(DocumentStatus, doc_id=TEXT, uri=TEXT, text=TEXT, doc_hash=TEXT, status=TEXT,
                 duplicate_of=st.none() | TEXT, encoding=TEXT, input_digest=TEXT,
                 principals=PRINCIPALS),
       st.builds(Rejected, uri=TEXT, doc_id=TEXT, reason=TEXT), DOCUMENTS)
def test_status_rejected_and_document_coders_are_the_identity(status, rejected, document) -> None:
    assert same_fields(DocumentStatusCoder().decode(DocumentStatusCoder().encode(status)), status)
    assert same_fields(RejectedCoder().decode(RejectedCoder().encode(rejected)), rejected)
    assert same_fields(DocumentCoder().decode(DocumentCoder().encode(document)), document)


@settings(max_examples=100, deadline=None)
@given(st.builds(DocumentChunks, document=DOCUMENTS, chunks=st.lists(CHUNKS, max_size=3).map(tuple)),
       st.builds(DocumentStatus, doc_id=TEXT, uri=TEXT, text=TEXT, doc_hash=TEXT, status=TEXT,
                 duplicate_of=st.none() | TEXT, encoding=TEXT, input_digest=TEXT, principals=PRINCIPALS))
def test_estimated_size_is_near_the_encoded_size_without_encoding(element, status) -> None:
    # Beam samples every output's size with estimate_size; encoding to measure made a buffer
    # the size of a 5 MB document's element for each PCollection that carried it. The estimate
    # is the strings' UTF-8 and a few bytes a field: near the encoded size.
    for coder, value in ((DocumentChunksCoder(), element), (DocumentStatusCoder(), status),
                         (DocumentCoder(), element.document)):
        encoded, estimated = len(coder.encode(value)), coder.estimate_size(value)
        assert encoded / 2 - 64 <= estimated <= 2 * encoded + 64


def test_model_vectors_go_as_float32_and_decode_exactly() -> None:
    vector = np.random.default_rng(1).standard_normal(384).astype(np.float32)
    vector /= np.linalg.norm(vector)
    record = ChunkRecord("d", "d#0-1", 0, 0, 1, (), "t", 1, embedding=tuple(vector.tolist()))
    encoded = ChunkRecordCoder().encode(record)
    assert len(encoded) < 4 * 384 + 40
    decoded = ChunkRecordCoder().decode(encoded)
    assert decoded.embedding == record.embedding  # exact, not allclose
    # A value that is not float32 is kept whole (float64), never rounded.
    wide = ChunkRecord("d", "d#0-1", 0, 0, 1, (), "t", 1, embedding=(0.1, math.pi))
    assert ChunkRecordCoder().decode(ChunkRecordCoder().encode(wide)).embedding == (0.1, math.pi)


def realistic_record() -> ChunkRecord:
    """A chunk as the demo config makes them: 384-d unit float32 vector, 1 KB of text, a
    heading path, a content key."""
    rng = np.random.default_rng(7)
    vector = rng.standard_normal(384).astype(np.float32)
    vector /= np.linalg.norm(vector)
    text = ("The arm warms up for ten minutes before calibration; check the gauge. " * 15)[:1024]
    doc_id = "docs/guides/robot-arm/maintenance.md"
    return ChunkRecord(
        doc_id, chunk_id(doc_id, 10240, 11264), 12, 10240, 11264, ("Maintenance", "Calibration"),
        text, 231, embedding=tuple(vector.tolist()), prefix="Maintenance > Calibration\n",
        content_key="9f" * 32)


def test_a_realistic_record_is_compact() -> None:
    record = realistic_record()
    assert same_fields(ChunkRecordCoder().decode(ChunkRecordCoder().encode(record)), record)
    encoded = len(ChunkRecordCoder().encode(record))
    strings = sum(len(s.encode()) for s in (
        record.doc_id, record.chunk_id, record.text, record.prefix, record.context,
        record.context_status, record.table_header, record.content_key, *record.headings))
    # The payload (UTF-8 strings, 4 bytes a value) and a few bytes of framing: no per-float tag.
    assert encoded <= strings + 4 * 384 + 40
    assert encoded <= 2.2 * 1024 + 1024 + 100  # 2.2 KB for the vector and ids, plus the 1 KB text
    assert encoded * 1.6 < len(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
    assert encoded * 1.6 < len(beam.coders.FastPrimitivesCoder().encode(record))


def test_the_coders_are_registered() -> None:
    registry = beam.coders.registry
    assert isinstance(registry.get_coder(ChunkRecord), ChunkRecordCoder)
    assert isinstance(registry.get_coder(DocumentChunks), DocumentChunksCoder)
    assert isinstance(registry.get_coder(beam.typehints.Tuple[str, ChunkRecord]).value_coder(), ChunkRecordCoder)
    assert ChunkRecordCoder().is_deterministic()


def test_join_by_key_groups_like_cogroupbykey() -> None:
    a = ChunkRecord("d", "d#0-1", 0, 0, 1, (), "t", 1, embedding=(0.5, -1.0))
    b = ChunkRecord("e", "e#0-1", 0, 0, 1, (), "u", 1)
    with fnapi_pipeline() as p:
        chunks = p | "Chunks" >> beam.Create([("k", a), ("k", b), ("m", b)]).with_output_types(
            tuple[str, ChunkRecord])
        numbers = p | "Numbers" >> beam.Create([("k", 1), ("n", 2)]).with_output_types(tuple[str, int])
        joined = {"chunks": chunks, "numbers": numbers} | JoinByKey()
        assert_that(
            joined | beam.Map(lambda kv: (kv[0], sorted(c.chunk_id for c in kv[1]["chunks"]),
                                          kv[1]["numbers"], [c.embedding for c in kv[1]["chunks"]
                                                            if c.doc_id == "d"])),
            equal_to([("k", ["d#0-1", "e#0-1"], [1], [(0.5, -1.0)]), ("m", ["e#0-1"], [], []),
                      ("n", [], [2], [])]))


@given(st.text(max_size=20), st.integers(0, 2**40), st.text(max_size=32),
       st.one_of(st.none(), st.binary(min_size=32, max_size=32)),
       st.one_of(st.none(), st.lists(st.integers(0, 2**64 - 1), max_size=30).map(tuple)),
       st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=3).map(tuple)))
def test_a_state_row_round_trips_through_its_coder(doc_id, position, facts, text_hash, keys,
                                                    principals) -> None:
    from chunkline.state import StateRow
    from chunkline.transforms.coders import StateRowCoder

    row = StateRow(doc_id, "/c/d.jsonl", position, "digest", facts,
                   text_hash, keys, "hash", keys, "kept", doc_id, principals)
    coder = StateRowCoder()
    assert coder.decode(coder.encode(row)) == row
    assert coder.is_deterministic()
