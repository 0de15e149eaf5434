"""How records cross a shuffle: explicit, compact, deterministic coders, and a join that uses them.

Without a coder of its own a dataclass crosses a shuffle pickled: a ChunkRecord with a 384-d
vector as a tuple of Python floats is ~4.3 KB, the vector alone ~3.5 KB of it. Here every
string is UTF-8 with its length (``surrogatepass``: a lone surrogate read from JSON survives),
every int a varint, ``None`` a flag byte, a chunk id that is ``records.chunk_id(doc id, span)``
(always, in the pipeline) one byte, and the vector float32 bytes, 4 per value: the
model's vectors are float32, so float32 -> Python float is exact. A vector that is not exactly
float32 (a float written in code) goes as float64 instead, so decoding is the identity on every
record, never a silent rounding.

The coders are registered with Beam's registry when this module is imported (the stage modules
import it), so a PCollection declared as ``ChunkRecord`` (or ``tuple[str, ChunkRecord]``) is
encoded with them. Beam's CoGroupByKey flattens its inputs into a ``Union`` type, which Beam
encodes with its pickling fallback whatever is registered: :class:`JoinByKey` is the same join
with every value encoded by its own PCollection's coder.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.coders import Coder
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
# Beam's own Tuple hint: its parameters are values here (the inputs' key type), which a builtin
# tuple[...] would be to a type checker as well.
from apache_beam.typehints import trivial_inference, typehints

from chunkline.state import StateRow
from chunkline.key_sets import KEY, TEXT_HASH, KeySets, checked
from chunkline.records import (
    ChunkRecord,
    Document,
    DocumentChunks,
    DocumentStatus,
    Rejected,
    chunk_id,
)

_NO_VECTOR, _FLOAT32, _FLOAT64 = 0, 1, 2


def _write_str(out, value: str) -> None:
    out.write(value.encode("utf-8", "surrogatepass"), True)


def _read_str(stream) -> str:
    return stream.read_all(True).decode("utf-8", "surrogatepass")


def _write_optional_str(out, value: str | None) -> None:
    out.write_byte(value is not None)
    if value is not None:
        _write_str(out, value)


def _read_optional_str(stream) -> str | None:
    return _read_str(stream) if stream.read_byte() else None


def _write_vector(out, vector: tuple[float, ...] | None) -> None:
    if vector is None:
        out.write_byte(_NO_VECTOR)
        return
    wide = np.asarray(vector, dtype="<f8")
    with np.errstate(over="ignore"):  # a float64 past float32's range: caught just below
        narrow = wide.astype("<f4")
    # Bitwise, so -0.0 and NaN payloads count too: float32 only where it decodes to the same.
    exact = narrow.astype("<f8").tobytes() == wide.tobytes()
    out.write_byte(_FLOAT32 if exact else _FLOAT64)
    out.write((narrow if exact else wide).tobytes(), True)


def _read_vector(stream) -> tuple[float, ...] | None:
    kind = stream.read_byte()
    if kind == _NO_VECTOR:
        return None
    data = stream.read_all(True)
    return tuple(np.frombuffer(data, dtype="<f4" if kind == _FLOAT32 else "<f8").tolist())


def _write_optional_int(out, value: int | None) -> None:
    out.write_byte(value is not None)
    if value is not None:
        out.write_var_int64(value)


def _read_optional_int(stream) -> int | None:
    return stream.read_var_int64() if stream.read_byte() else None


def _write_ints(out, values: tuple[int, ...]) -> None:
    out.write_var_int64(len(values))
    for value in values:
        out.write_var_int64(value)


def _read_ints(stream) -> tuple[int, ...]:
    return tuple(stream.read_var_int64() for _ in range(stream.read_var_int64()))


def _write_strs(out, values: tuple[str, ...]) -> None:
    out.write_var_int64(len(values))
    for value in values:
        _write_str(out, value)


def _read_strs(stream) -> tuple[str, ...]:
    return tuple(_read_str(stream) for _ in range(stream.read_var_int64()))


def _write_optional_strs(out, values: tuple[str, ...] | None) -> None:
    out.write_byte(values is not None)
    if values is not None:
        _write_strs(out, values)


def _read_optional_strs(stream) -> tuple[str, ...] | None:
    return _read_strs(stream) if stream.read_byte() else None


def encode_chunk(out, r: ChunkRecord) -> None:
    _write_str(out, r.doc_id)
    for number in (r.chunk_index, r.start, r.end, r.tokens):
        out.write_var_int64(number)
    # The id is the doc id and the span (records.chunk_id): sent only when it is something else.
    _write_optional_str(out, None if r.chunk_id == chunk_id(r.doc_id, r.start, r.end) else r.chunk_id)
    _write_strs(out, r.headings)
    for text in (r.text, r.prefix, r.context, r.context_status, r.table_header, r.content_key,
                 r.metadata, r.carry_key):
        _write_str(out, text)
    _write_optional_int(out, r.page_start)
    _write_optional_int(out, r.page_end)
    _write_ints(out, r.sparse_indices)
    _write_vector(out, r.sparse_values)
    _write_vector(out, r.embedding)
    _write_optional_strs(out, r.principals)


def decode_chunk(stream) -> ChunkRecord:
    doc_id = _read_str(stream)
    chunk_index, start, end, tokens = (stream.read_var_int64() for _ in range(4))
    explicit_id = _read_optional_str(stream)
    headings = _read_strs(stream)
    text, prefix, context, context_status, table_header, content_key, metadata, carry_key = (
        _read_str(stream) for _ in range(8))
    page_start, page_end = _read_optional_int(stream), _read_optional_int(stream)
    sparse_indices = _read_ints(stream)
    sparse_values = _read_vector(stream) or ()  # never None: encoded from a tuple
    embedding = _read_vector(stream)
    return ChunkRecord(
        doc_id=doc_id, chunk_id=chunk_id(doc_id, start, end) if explicit_id is None else explicit_id,
        chunk_index=chunk_index, start=start, end=end,
        headings=headings, text=text, tokens=tokens, embedding=embedding, prefix=prefix,
        context=context, context_status=context_status, table_header=table_header,
        content_key=content_key, metadata=metadata, page_start=page_start, page_end=page_end,
        sparse_indices=sparse_indices, sparse_values=sparse_values, carry_key=carry_key,
        principals=_read_optional_strs(stream))


def encode_document(out, d: Document) -> None:
    for text in (d.doc_id, d.uri, d.text, d.encoding, d.format, d.input_digest):
        _write_str(out, text)
    out.write_var_int64(d.position)
    out.write_var_int64(len(d.metadata))
    for key, value in d.metadata:
        _write_str(out, key)
        _write_str(out, value)
    _write_optional_int(out, d.file_size)
    out.write_byte(d.file_modified is not None)
    if d.file_modified is not None:
        out.write_bigendian_double(d.file_modified)
    _write_ints(out, d.page_starts)
    out.write_var_int64(len(d.outline))
    for page, level, title in d.outline:
        out.write_var_int64(page)
        out.write_var_int64(level)
        _write_str(out, title)
    _write_optional_strs(out, d.principals)
    out.write(d.counted, True)
    out.write(d.memo, True)


def decode_document(stream) -> Document:
    doc_id, uri, text, encoding, format_, digest = (_read_str(stream) for _ in range(6))
    position = stream.read_var_int64()
    metadata = tuple((_read_str(stream), _read_str(stream)) for _ in range(stream.read_var_int64()))
    file_size = _read_optional_int(stream)
    file_modified = stream.read_bigendian_double() if stream.read_byte() else None
    page_starts = _read_ints(stream)
    outline = tuple((stream.read_var_int64(), stream.read_var_int64(), _read_str(stream))
                    for _ in range(stream.read_var_int64()))
    return Document(doc_id, uri, text, metadata, position=position, encoding=encoding,
                    format=format_, file_size=file_size, file_modified=file_modified,
                    page_starts=page_starts, outline=outline, input_digest=digest,
                    principals=_read_optional_strs(stream), counted=bytes(stream.read_all(True)),
                    memo=bytes(stream.read_all(True)))


def encode_document_chunks(out, e: DocumentChunks) -> None:
    encode_document(out, e.document)
    out.write_var_int64(len(e.chunks))
    for chunk in e.chunks:
        encode_chunk(out, chunk)


def decode_document_chunks(stream) -> DocumentChunks:
    document = decode_document(stream)
    return DocumentChunks(document, tuple(decode_chunk(stream) for _ in range(stream.read_var_int64())))


# A status's string fields, in the order they are encoded (statuses_table reads them so too).
_STATUS_STRINGS = ("doc_id", "uri", "text", "doc_hash", "status", "encoding", "format", "metadata",
                   "input_digest")


def encode_status(out, s: DocumentStatus) -> None:
    for name in _STATUS_STRINGS:
        _write_str(out, getattr(s, name))
    _write_optional_str(out, s.duplicate_of)
    out.write_byte(s.page_starts is not None)
    if s.page_starts is not None:
        _write_ints(out, s.page_starts)
    _write_optional_strs(out, s.principals)


def decode_status(stream) -> DocumentStatus:
    strings = {name: _read_str(stream) for name in _STATUS_STRINGS}
    duplicate_of = _read_optional_str(stream)
    page_starts = _read_ints(stream) if stream.read_byte() else None
    return DocumentStatus(**strings, duplicate_of=duplicate_of, page_starts=page_starts,
                          principals=_read_optional_strs(stream))


def statuses_table(encoded: Sequence[bytes], schema: pa.Schema) -> pa.Table | None:
    """Encoded :class:`DocumentStatus` records as rows of ``schema`` (the documents table: what
    ``as_row`` of each decoded record gives), each string column made from the UTF-8 the coder
    wrote: the text column, most of a documents shard, is one join of the records' bytes, not a
    Python string per document converted again. None where a column cannot be made so (a string
    that is not UTF-8, a lone surrogate the coder passed through; over 2 GiB in one column): the
    caller converts record by record, as before."""
    strings: dict[str, list[bytes]] = {name: [] for name in _STATUS_STRINGS}
    duplicate_of: list[str | None] = []
    page_starts: list[list[int] | None] = []
    principals: list[list[str] | None] = []
    for data in encoded:
        stream = create_InputStream(data)
        for name in _STATUS_STRINGS:
            strings[name].append(stream.read_all(True))
        duplicate_of.append(_read_str(stream) if stream.read_byte() else None)
        page_starts.append(list(_read_ints(stream)) if stream.read_byte() else None)
        principals.append(list(_read_strs(stream)) if stream.read_byte() else None)
    columns = {name: _utf8_column(values) for name, values in strings.items()}
    if any(column is None for column in columns.values()):
        return None
    columns["duplicate_of"] = pa.array(duplicate_of, pa.string())
    columns["page_starts"] = pa.array(page_starts, pa.list_(pa.int64()))
    columns["principals"] = pa.array(principals, pa.list_(pa.string()))
    return pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema)


def _utf8_column(values: list[bytes]) -> pa.Array | None:
    """``values`` as a string array over one buffer (their join), or None when they are not all
    UTF-8 or together outgrow 32-bit offsets."""
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum([len(value) for value in values], out=offsets[1:])
    if offsets[-1] >= 2**31:
        return None
    column = pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets.astype(np.int32)),
                                         pa.py_buffer(b"".join(values)))
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return column


def encode_rejected(out, r: Rejected) -> None:
    for text in (r.uri, r.doc_id, r.reason):
        _write_str(out, text)


def decode_rejected(stream) -> Rejected:
    return Rejected(*(_read_str(stream) for _ in range(3)))


def encode_key_sets(out, batch: KeySets) -> None:
    # Each array's bytes as they lie (fixed-width, little-endian): numpy reads them back
    # without a copy, and equal batches encode equally.
    hashes, offsets, keys = checked(batch)
    out.write(np.ascontiguousarray(hashes).tobytes(), True)
    out.write(np.ascontiguousarray(offsets, dtype="<i8").tobytes(), True)
    out.write(np.ascontiguousarray(keys).tobytes(), True)


def decode_key_sets(stream) -> KeySets:
    hashes = np.frombuffer(stream.read_all(True), dtype=TEXT_HASH)
    offsets = np.frombuffer(stream.read_all(True), dtype="<i8").astype(np.int64, copy=False)
    keys = np.frombuffer(stream.read_all(True), dtype=KEY)
    return checked(KeySets(hashes, offsets, keys))


def _estimated_size(value: Any) -> int:
    """What :class:`_RecordCoder` estimates a record's encoding at: a string's UTF-8 (and its
    length), the sum over a record's fields and a tuple's items, a number, flag or None a few
    bytes (a varint, a float32)."""
    if isinstance(value, str):
        return _utf8_size(value) + 2
    if isinstance(value, (tuple, list)):
        if value and isinstance(value[0], (int, float)):  # a vector, term ids or page starts
            return 2 + _NUMBER_BYTES * len(value)
        return 2 + sum(_estimated_size(item) for item in value)
    if dataclasses.is_dataclass(value):
        return sum(_estimated_size(getattr(value, name)) for name in value.__dataclass_fields__)
    if isinstance(value, bytes):
        return len(value) + 2
    return _NUMBER_BYTES


_NUMBER_BYTES = 4
_SIZE_WINDOW = 1 << 16


def _utf8_size(text: str) -> int:
    """``len(text.encode("utf-8", "surrogatepass"))``, a window at a time: no copy of a long
    text is made to be measured."""
    if text.isascii():
        return len(text)
    return sum(len(text[start:start + _SIZE_WINDOW].encode("utf-8", "surrogatepass"))
               for start in range(0, len(text), _SIZE_WINDOW))


class _RecordCoder(Coder):
    """A deterministic coder from an ``encode(stream, record)`` / ``decode(stream)`` pair."""

    _encode: Callable[[Any, Any], None]
    _decode: Callable[[Any], Any]

    def encode(self, value: Any) -> bytes:
        out = create_OutputStream()
        type(self)._encode(out, value)
        return out.get()

    def decode(self, encoded: bytes) -> Any:
        return type(self)._decode(create_InputStream(encoded))

    def estimate_size(self, value: Any) -> int:
        """About the encoded size, without encoding: Beam asks for it to sample the mean size
        of every output (the first ten elements of each PCollection, then fewer:
        ``apache_beam/runners/worker/opcounters.py``), and ``Coder.estimate_size`` encodes the
        element to measure it, which for one 5 MB document with its 14,336 chunks made a 20 MB
        buffer for each PCollection that carries it. Beam's own docs invite "a fast estimate"
        here; this one is the record's strings' UTF-8 and a few bytes for every other field,
        what the encoding is made of."""
        return _estimated_size(value)

    def is_deterministic(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class ChunkRecordCoder(_RecordCoder):
    _encode, _decode = staticmethod(encode_chunk), staticmethod(decode_chunk)

    def to_type_hint(self):
        return ChunkRecord


class DocumentCoder(_RecordCoder):
    _encode, _decode = staticmethod(encode_document), staticmethod(decode_document)

    def to_type_hint(self):
        return Document


class DocumentChunksCoder(_RecordCoder):
    _encode, _decode = staticmethod(encode_document_chunks), staticmethod(decode_document_chunks)

    def to_type_hint(self):
        return DocumentChunks


class DocumentStatusCoder(_RecordCoder):
    _encode, _decode = staticmethod(encode_status), staticmethod(decode_status)

    def to_type_hint(self):
        return DocumentStatus


class RejectedCoder(_RecordCoder):
    _encode, _decode = staticmethod(encode_rejected), staticmethod(decode_rejected)

    def to_type_hint(self):
        return Rejected


class KeySetsCoder(_RecordCoder):
    _encode, _decode = staticmethod(encode_key_sets), staticmethod(decode_key_sets)

    def estimate_size(self, value: Any) -> int:
        return sum(array.nbytes + 4 for array in value)

    def to_type_hint(self):
        return KeySets


def _write_optional_u64s(out, values: tuple[int, ...] | None) -> None:
    out.write_byte(values is not None)
    if values is not None:
        out.write(np.asarray(values, dtype="<u8").tobytes(), True)


def _read_optional_u64s(stream) -> tuple[int, ...] | None:
    return tuple(np.frombuffer(stream.read_all(True), dtype="<u8").tolist()) if stream.read_byte() else None


def encode_state(out, r: StateRow) -> None:
    for text in (r.doc_id, r.uri, r.input_digest, r.facts, r.doc_hash, r.status, r.survivor):
        _write_str(out, text)
    out.write_var_int64(r.position)
    out.write_byte(r.text_hash is not None)
    if r.text_hash is not None:
        out.write(r.text_hash, True)
    _write_optional_u64s(out, r.line_keys)
    _write_optional_u64s(out, r.bands)
    _write_optional_strs(out, r.principals)


def decode_state(stream) -> StateRow:
    doc_id, uri, digest, facts, doc_hash, status, survivor = (_read_str(stream) for _ in range(7))
    position = stream.read_var_int64()
    text_hash = bytes(stream.read_all(True)) if stream.read_byte() else None
    line_keys, bands = _read_optional_u64s(stream), _read_optional_u64s(stream)
    return StateRow(doc_id, uri, position, digest, facts, text_hash, line_keys, doc_hash,
                    bands, status, survivor, _read_optional_strs(stream))


class StateRowCoder(_RecordCoder):
    """A state row (``chunkline.state``) as it waits in the state writer's part files: a
    pickled NamedTuple of 23 band keys and a few line keys was most of that stage's time."""

    _encode, _decode = staticmethod(encode_state), staticmethod(decode_state)

    def to_type_hint(self):
        return StateRow


CODERS: dict[type, type[Coder]] = {
    StateRow: StateRowCoder,
    KeySets: KeySetsCoder,
    ChunkRecord: ChunkRecordCoder,
    Document: DocumentCoder,
    DocumentChunks: DocumentChunksCoder,
    DocumentStatus: DocumentStatusCoder,
    Rejected: RejectedCoder,
}

# Beam's registry is Beam's (process-wide by its design); registering on import means any module
# that builds a stage over these records, having imported this one, gets them.
for _record_type, _coder in CODERS.items():
    beam.coders.registry.register_coder(_record_type, _coder)


def _tagged(element: tuple[Any, Any], index: int, coder: Coder) -> tuple[Any, bytes]:
    key, value = element
    return key, bytes((index,)) + coder.encode(value)


def _untagged(element: tuple[Any, Iterable[bytes]], tags: tuple[str, ...],
              coders: tuple[Coder, ...]) -> tuple[Any, dict[str, list[Any]]]:
    key, encoded = element
    groups: dict[str, list[Any]] = {tag: [] for tag in tags}
    for data in encoded:
        index = data[0]
        groups[tags[index]].append(coders[index].decode(data[1:]))
    return key, groups


class JoinByKey(beam.PTransform):
    """``{tag: PCollection[tuple[K, V_tag]]}`` -> ``PCollection[tuple[K, dict[tag, list[V_tag]]]]``:
    ``beam.CoGroupByKey`` (dict form), except that each value crosses the shuffle encoded with
    the coder of its own PCollection's declared value type (a registered record coder where the
    value is a record), not pickled. Declare the inputs' types (``with_output_types``)."""

    def expand(self, pcolls):
        tags = tuple(sorted(pcolls))
        if len(tags) > 255:
            raise ValueError("JoinByKey takes at most 255 inputs")
        coders, parts, key_types = [], [], set()
        for index, tag in enumerate(tags):
            key_type, value_type = trivial_inference.key_value_types(pcolls[tag].element_type)
            key_types.add(key_type)
            coder = beam.coders.registry.get_coder(value_type)
            coders.append(coder)
            parts.append(pcolls[tag] | f"Encode[{tag}]" >> beam.Map(_tagged, index, coder)
                         .with_output_types(typehints.Tuple[key_type, bytes]))
        key_type = key_types.pop() if len(key_types) == 1 else Any
        return (
            parts
            | "Flatten" >> beam.Flatten().with_output_types(typehints.Tuple[key_type, bytes])
            | "GroupByKey" >> beam.GroupByKey()
            | "Decode" >> beam.Map(_untagged, tags, tuple(coders))
        )
