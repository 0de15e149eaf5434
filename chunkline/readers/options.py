"""How records are found in JSONL and Parquet files, and the bounds of a document, of its
metadata and of what a container may unpack to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from annotated_types import Ge, MinLen

from chunkline.containers import ContainerOptions
from chunkline.ocr import OcrOptions
from chunkline.metadata import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH
from chunkline.options import check_fields, help_text


@dataclass(frozen=True)
class JsonlOptions:
    """Where a JSON Lines record keeps its id, text and metadata."""

    id_field: Annotated[str, MinLen(1)] = field(default="id", metadata=help_text(
        "Record field holding the document id (a string or an integer)."))
    text_field: Annotated[str, MinLen(1)] = field(default="text", metadata=help_text(
        "Record field holding the text (a string)."))
    metadata_field: Annotated[str, MinLen(1)] | None = field(default="metadata", metadata=help_text(
        "Record field holding an object of metadata; null: ignored."))
    slice_bytes: Annotated[int, Ge(1)] = field(default=64_000_000, metadata=help_text(
        "Bytes of lines read as one piece: a bigger file is cut at line starts (found by one "
        "pass counting newlines) into pieces that go to different workers."))

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class ParquetOptions:
    """Which columns of a Parquet file hold the id, text and metadata."""

    id_column: Annotated[str, MinLen(1)] = field(default="id", metadata=help_text(
        "Column holding the document id."))
    text_column: Annotated[str, MinLen(1)] = field(default="text", metadata=help_text(
        "Column holding the text."))
    metadata_columns: tuple[Annotated[str, MinLen(1)], ...] = field(default=(), metadata=help_text(
        "Columns kept as metadata."))
    slice_bytes: Annotated[int, Ge(1)] = field(default=64_000_000, metadata=help_text(
        "Uncompressed bytes of row groups read as one piece: a bigger file is cut at row group "
        "bounds into pieces that go to different workers."))

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class ReadOptions:
    """How records are found in JSONL and Parquet files, and the bounds of a document and of
    its metadata."""

    jsonl: JsonlOptions = field(default=JsonlOptions(), metadata=help_text(
        "JSON Lines records (.jsonl)."))
    parquet: ParquetOptions = field(default=ParquetOptions(), metadata=help_text(
        "Parquet records (.parquet)."))
    max_document_bytes: Annotated[int, Ge(1)] | None = field(default=10_000_000, metadata=help_text(
        "UTF-8 bytes of one document; larger ones are rejected with that reason. null: no limit."))
    max_metadata_depth: Annotated[int, Ge(1)] | None = field(default=DEFAULT_MAX_DEPTH, metadata=help_text(
        "Levels of nesting in one document's metadata (the metadata object is level 1; "
        "{\"a\": [1]} is 2); deeper ones are rejected. null: no limit."))
    max_metadata_bytes: Annotated[int, Ge(1)] | None = field(default=DEFAULT_MAX_BYTES, metadata=help_text(
        "UTF-8 bytes of one document's metadata JSON, the file facts included (every chunk "
        "carries a copy); larger ones are rejected. null: no limit."))
    max_table_rows: Annotated[int, Ge(1)] = field(default=500, metadata=help_text(
        "Rows of one section of a spreadsheet or CSV/TSV file: a sheet with more is cut between "
        "rows into sections of this many, each with the header row and its row numbers in its "
        "heading."))
    containers: ContainerOptions = field(default=ContainerOptions(), metadata=help_text(
        "Compressed files (.gz .bz2 .xz .zst) and archives (.zip, .tar, .tgz): what one such "
        "file may unpack to."))
    ocr: OcrOptions = field(default=OcrOptions(), metadata=help_text(
        "Scanned pages: a PDF page without a text layer and an image file (.png .jpg .jpeg "
        ".tif .tiff) read by OCR (RapidOCR, models in its wheel; Chinese and English). mode "
        "auto: pages without a text layer; always: every page; never: none (an image is then "
        "a rejected row). `input.ocr: never` is short for `input.ocr: {mode: never}`."))

    def __post_init__(self) -> None:
        check_fields(self)
        if not isinstance(self.jsonl, JsonlOptions) or not isinstance(self.parquet, ParquetOptions):
            raise ValueError("ReadOptions.jsonl and .parquet are JsonlOptions and ParquetOptions")
        if not isinstance(self.containers, ContainerOptions):
            raise ValueError("ReadOptions.containers is a ContainerOptions")
        if not isinstance(self.ocr, OcrOptions):
            raise ValueError("ReadOptions.ocr is an OcrOptions")
