"""Record dumps: JSONL a line at a time, Parquet a batch of rows at a time (and in slices of row
groups), each record a ``Document`` or a ``Rejected`` located by its line or row."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, replace
from typing import Any, BinaryIO, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from chunkline.state import pack_place
from chunkline.metadata import NUL, MetadataError, metadata_pairs
from chunkline.readers.formats import BINARY, EMPTY, over_limit
from chunkline.readers.options import ReadOptions
from chunkline.readers.paths import locator
from chunkline.readers.text import BOMS, SNIFF_BYTES, decode_utf8, decode_with_bom, looks_binary, utf8_encodable
from chunkline.records import Document, Rejected, evolved


# --- JSON lines --------------------------------------------------------------------------------


def decode_jsonl(
    uri: str, path_id: str, data: bytes, options: ReadOptions
) -> list[Document | Rejected]:
    return list(stream_jsonl(uri, path_id, io.BytesIO(data), options))


@dataclass(frozen=True)
class LineSlice:
    """The lines of a JSONL file from byte ``start`` (a line start) up to byte ``end`` (a line
    start or the end of the file), the first of them line ``first_line`` (1-based) of the file."""

    start: int
    end: int
    first_line: int


# Bytes a slicing pass reads at a time.
_SCAN_BYTES = 1 << 22


def jsonl_slices(handle: BinaryIO, slice_bytes: int, unit_lines: int | None = None) -> list[LineSlice]:
    """A JSONL file cut at line starts about every ``slice_bytes``, with each piece's first line
    number, from one pass that only finds newlines (numpy over each block read: far below the
    cost of parsing). With ``unit_lines``, also before every line whose number is a multiple of
    it, so that no piece spans two units of the memo (``chunkline.memo.unit_share``: lines
    ``k * unit_lines`` up to the next multiple): a piece's documents then sit in one share of
    the previous memo, which its reader loads once, where a piece over sixty units of a dump
    went back and forth between shares at each unit. None (an empty list) for a file that must
    be read whole: one behind a UTF-16 or UTF-32 BOM (it has no lines before it is decoded), one
    of whitespace only (its reader rejects it as empty), or one that makes a single piece."""
    head = handle.read(4)
    if any(head.startswith(bom) for bom, name in BOMS if name != "utf-8"):
        return []
    handle.seek(0)
    slices: list[LineSlice] = []
    start, first_line, position, newlines, text_seen = 0, 1, 0, 0, False
    cut_after = slice_bytes
    next_unit = unit_lines  # the first line of the next unit (lines are numbered from 1)
    while True:
        block = handle.read(_SCAN_BYTES)
        if not block:
            break
        text_seen = text_seen or not block.isspace()
        ends = np.flatnonzero(np.frombuffer(block, np.uint8) == 0x0A)  # each newline's offset
        while True:
            # The next cut: after the first newline at or past ``cut_after``, or after the
            # newline that ends the line before the next unit, whichever comes first.
            at = int(np.searchsorted(ends, max(0, cut_after - position))) if cut_after < position + len(block) else len(ends)
            if next_unit is not None:
                at = min(at, max(0, next_unit - 2 - newlines))
            if at >= len(ends):
                break
            cut = position + int(ends[at]) + 1
            slices.append(LineSlice(start, cut, first_line))
            start, first_line, cut_after = cut, newlines + at + 2, cut + slice_bytes
            while next_unit is not None and unit_lines is not None and next_unit <= first_line:
                next_unit += unit_lines
        newlines += len(ends)
        position += len(block)
    if start < position:
        slices.append(LineSlice(start, position, first_line))
    return slices if text_seen and len(slices) > 1 else []


def stream_jsonl(uri: str, path_id: str, handle: BinaryIO, options: ReadOptions,
                 part: LineSlice | None = None, places: bool = False) -> Iterator[Document | Rejected]:
    """The records of a JSONL file read from ``handle`` a line at a time: memory holds one
    line, whatever the file's size. Only a file behind a UTF-16 or UTF-32 BOM is read whole
    (it must be decoded before it has lines). With ``part``, only that piece of the file
    (:func:`jsonl_slices`): its lines keep their file-wide numbers; the file's head decides,
    in every piece, whether it is binary (the first piece says so). With ``places`` (``handle``
    is the file itself), each record carries where its line lies in it
    (``chunkline.state.pack_place``), so that a rerun can read that record alone again."""
    encoding = "utf-8"  # RFC 8259 section 8.1: JSON exchanged between systems is UTF-8
    head = handle.read(SNIFF_BYTES)
    bom = next((name for bom, name in BOMS if head.startswith(bom)), None)
    lines: Iterator[bytes]
    if bom is not None and bom != "utf-8":
        decoded = decode_with_bom(head + handle.read(), bom)
        if isinstance(decoded, str):
            yield Rejected(uri, path_id, decoded)
            return
        # As UTF-8 again, the lines take the one path below (a decoded text re-encodes losslessly).
        text, encoding = decoded
        lines = iter(io.BytesIO(text.encode("utf-8")))
        places = False  # the lines' offsets are in the re-encoded text, not the file
    elif looks_binary(head):
        if part is None or part.start == 0:
            yield Rejected(uri, path_id, BINARY)
        return
    elif part is not None:
        handle.seek(part.start)
        lines = iter(io.BufferedReader(_Limited(handle, part.end - part.start)))
    else:
        lines = iter(io.BufferedReader(_Chained(head, handle)))
    # Split on b"\n" only (a binary file's lines): str.splitlines() would also cut at U+2028
    # and friends, which JSON allows unescaped inside strings. A trailing "\r" is JSON
    # whitespace and parses away.
    offset, found = (part.start, False) if part is not None else (0, False)
    for number, line in enumerate(lines, start=part.first_line if part is not None else 1):
        raw = line[:-1] if line.endswith(b"\n") else line
        line_start, offset = offset, offset + len(line)
        # decode_utf8 also drops a BOM: the file's, or one of a file concatenated into this one.
        text, error = decode_utf8(raw, line_start)
        if error is None and not text.strip():
            continue  # blank lines separate nothing and are no records
        result = error if error is not None else _jsonl_record(text, uri, options)
        found = True
        if isinstance(result, str):
            yield Rejected(uri, locator(path_id, number), f"line {number}: {result}")
        else:
            yield evolved(result, position=number, encoding=encoding,
                          counted=pack_place(line_start, len(line)) if places else b"")
    if not found and part is None:  # a sliced file has text: some piece yields a record
        yield Rejected(uri, path_id, f"{EMPTY} (no JSON lines)")


class _Limited(io.RawIOBase):
    """The next ``remaining`` bytes of a file, then its end: one piece of it to cut lines from."""

    def __init__(self, handle: BinaryIO, remaining: int) -> None:
        self._handle, self._remaining = handle, remaining

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._remaining <= 0:
            return 0
        data = self._handle.read(min(len(buffer), self._remaining))
        buffer[: len(data)] = data
        self._remaining -= len(data)
        return len(data)


class _Chained(io.RawIOBase):
    """The bytes already read from a file, then the rest of it: one stream to cut lines from."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = memoryview(head), rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _jsonl_record(line: str, uri: str, options: ReadOptions) -> Document | str:
    """The document on one JSON line, or the reason it is none."""
    try:
        value = json.loads(line)
    except RecursionError:
        return "not valid JSON (nested too deeply)"
    except ValueError as exc:  # JSONDecodeError, and ints past the digit limit
        detail = f"{exc.msg}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else exc
        return f"not valid JSON ({detail})"
    if not isinstance(value, dict):
        return f"not a JSON object (got {_type_name(value)})"
    id_field, text_field = options.jsonl.id_field, options.jsonl.text_field
    for name in (id_field, text_field):
        if name not in value:
            return f"no {name!r} field"
    doc_id, problem = _record_id(value[id_field], id_field)
    if problem:
        return problem
    text = value[text_field]
    if not isinstance(text, str):
        return f"{text_field!r} is {_type_name(text)}, not a string"
    metadata: tuple[tuple[str, str], ...] = ()
    meta_field = options.jsonl.metadata_field
    if meta_field is not None and value.get(meta_field) is not None:
        if not isinstance(value[meta_field], dict):
            return f"{meta_field!r} is {_type_name(value[meta_field])}, not an object"
        try:
            metadata = metadata_pairs(value[meta_field].items(), max_depth=options.max_metadata_depth)
        except RecursionError:
            return f"{meta_field!r} is nested too deeply"
        except MetadataError as exc:
            return str(exc)
    return _record_document(doc_id, uri, text, metadata, id_field, text_field, options)


def _type_name(value: Any) -> str:
    """How a reason names a value's type, in JSON's words where JSON has one."""
    if value is None:
        return "null"
    names = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
             (list, "an array"), (dict, "an object"))
    return next((name for kind, name in names if isinstance(value, kind)), type(value).__name__)


# --- Parquet -----------------------------------------------------------------------------------


def decode_parquet(
    uri: str, path_id: str, data: bytes, options: ReadOptions
) -> list[Document | Rejected]:
    return list(stream_parquet(uri, path_id, pa.BufferReader(data), options))


# Rows decoded at a time: a batch of long texts stays a few MB.
PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class ParquetSlice:
    """Row groups ``first_group`` up to ``end_group`` of one file, whose first row is
    ``first_row`` of the file (rows keep their file-wide positions)."""

    first_group: int
    end_group: int
    first_row: int


def parquet_slices(source: Any, slice_bytes: int) -> list[ParquetSlice]:
    """A Parquet file's row groups cut into runs of about ``slice_bytes`` uncompressed bytes
    (a row group is never cut: it is Parquet's unit of reading), from its footer alone. One
    slice, or none for a file without rows, means it is read whole. Raises what arrow raises
    for a file that is no Parquet (its reader then says so in a rejected row)."""
    metadata = pq.ParquetFile(source).metadata
    slices, start, first_row, size, rows = [], 0, 0, 0, 0
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        if index > start and size + group.total_byte_size > slice_bytes:
            slices.append(ParquetSlice(start, index, first_row))
            start, first_row, size = index, first_row + rows, 0
            rows = 0
        size += group.total_byte_size
        rows += group.num_rows
    if metadata.num_row_groups and metadata.num_rows:
        slices.append(ParquetSlice(start, metadata.num_row_groups, first_row))
    return slices


def stream_parquet(uri: str, path_id: str, source: Any, options: ReadOptions,
                   part: ParquetSlice | None = None) -> Iterator[Document | Rejected]:
    """The records of a Parquet file (``source``: a seekable file or buffer), or of one
    ``part`` of it, read a batch of rows at a time and only the columns wanted: memory holds
    one batch, whatever the file's size. A row group that cannot be read ends the file (or
    part) with a ``Rejected`` saying from which row on; the rows before it stay."""
    id_col, text_col = options.parquet.id_column, options.parquet.text_column
    wanted = list(dict.fromkeys((id_col, text_col, *options.parquet.metadata_columns)))
    try:
        parquet = pq.ParquetFile(source)
        names = parquet.schema_arrow.names
        missing = [name for name in wanted if name not in names]
        if missing:
            shown = ", ".join(repr(name) for name in missing)
            yield Rejected(uri, path_id, f"Parquet file has no column {shown}")
            return
        total = parquet.metadata.num_rows
        groups = range(part.first_group, part.end_group) if part is not None else None
        batches = parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=wanted,
                                       row_groups=groups)
    except Exception as exc:  # noqa: BLE001 - arrow raises many types for a corrupt file
        yield Rejected(uri, path_id, f"not a readable Parquet file ({type(exc).__name__}: {exc})")
        return
    if total == 0:
        yield Rejected(uri, path_id, f"{EMPTY} (Parquet file has no rows)")
        return
    row = part.first_row if part is not None else 0
    while True:
        try:
            batch = next(batches, None)
            if batch is None:
                return
            columns = {name: batch.column(name).to_pylist() for name in wanted}
        except Exception as exc:  # noqa: BLE001 - a corrupt row group, a file cut short
            yield Rejected(uri, path_id, f"not a readable Parquet file from row {row} on "
                                         f"({type(exc).__name__}: {exc})")
            return
        for index in range(batch.num_rows):
            result = _parquet_row(index, columns, uri, options)
            if isinstance(result, str):
                yield Rejected(uri, locator(path_id, row), f"row {row}: {result}")
            else:
                # Parquet's STRING logical type is UTF-8 by the format's definition.
                yield replace(result, position=row, encoding="utf-8")
            row += 1


def _parquet_row(
    row: int, columns: dict[str, list[Any]], uri: str, options: ReadOptions
) -> Document | str:
    id_col, text_col = options.parquet.id_column, options.parquet.text_column
    doc_id, problem = _record_id(columns[id_col][row], id_col)
    if problem:
        return problem
    text = columns[text_col][row]
    if not isinstance(text, str):
        return f"{text_col!r} is {_type_name(text)}, not a string"
    try:
        metadata = metadata_pairs(((name, columns[name][row]) for name in options.parquet.metadata_columns),
                                  max_depth=options.max_metadata_depth)
    except MetadataError as exc:
        return str(exc)
    except RecursionError:
        return "metadata is nested too deeply"
    return _record_document(doc_id, uri, text, metadata, id_col, text_col, options)


# --- Shared record checks ----------------------------------------------------------------------


def _record_id(value: Any, field: str) -> tuple[str, str | None]:
    """(id as str, None) or ("", reason). Strings and integers only: a float or a structure
    has no stable text form to key chunks by. An id holding U+0000 is rejected, not mapped: no
    store holds it, and mapping it could give two records one id."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    if not isinstance(value, str):
        return "", f"{field!r} is {_type_name(value)}, not a string or integer"
    if not value:
        return "", f"{field!r} is an empty string"
    if not utf8_encodable(value):
        return "", f"{field!r} contains an unpaired surrogate escape"
    if NUL in value:
        return "", f"{field!r} contains U+0000 (NUL), which no id may hold"
    return value, None


def _record_document(
    doc_id: str,
    uri: str,
    text: str,
    metadata: tuple[tuple[str, str], ...],
    id_field: str,
    text_field: str,
    options: ReadOptions,
) -> Document | str:
    """The record as a Document, or why not: a text every later stage can encode and chunk."""
    if not utf8_encodable(text):
        # JSON may escape a lone surrogate ("\ud800"); no UTF-8 file could then hold the text.
        return f"{text_field!r} contains an unpaired surrogate escape (id {doc_id!r})"
    if not text.strip():
        return f"{EMPTY} (id {doc_id!r})"
    too_big = over_limit(len(text.encode("utf-8")), options)
    if too_big:
        return f"{too_big} (id {doc_id!r})"
    return Document(doc_id=doc_id, uri=uri, text=text, metadata=metadata)
