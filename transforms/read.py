"""READ: file patterns to ``Document``s, with a ``Rejected`` for everything that is not one.

Matching and reading use only Beam's filesystems (``fileio.MatchFiles``/``ReadMatches``), so the
same graph reads local paths and ``gs://``; decoding is ``chunkline.readers.decode_file``.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.fileio import EmptyMatchTreatment, MatchFiles, ReadableFile, ReadMatches
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PBegin, PCollection, TaggedOutput

from chunkline.readers import (
    ReadOptions,
    decode_file,
    input_root,
    reject_before_reading,
    relative_id,
)
from chunkline.records import Document, Rejected

REJECTED = "rejected"


class ReadOutputs(NamedTuple):
    """What :class:`ReadDocuments` returns: ``outputs.documents``, ``outputs.rejected``."""

    documents: PCollection[Document]
    rejected: PCollection[Rejected]


class _DecodeFile(beam.DoFn):
    """One matched file -> its documents (main output) and rejections (``rejected``)."""

    def __init__(self, root: str, options: ReadOptions) -> None:
        self._root = root
        self._options = options
        self._documents = Metrics.counter("read", "documents")
        self._rejected = Metrics.counter("read", "rejected")

    def process(self, readable: ReadableFile) -> Iterable[Document | TaggedOutput]:
        uri = readable.metadata.path
        # Decided by name and size alone: an oversized or unsupported file is never fetched.
        early = reject_before_reading(uri, self._root, readable.metadata.size_in_bytes,
                                      self._options)
        records = [early] if early else self._read_and_decode(readable, uri)
        for record in records:
            if isinstance(record, Document):
                self._documents.inc()
                yield record
            else:
                self._rejected.inc()
                yield TaggedOutput(REJECTED, record)

    def _read_and_decode(self, readable: ReadableFile, uri: str) -> list[Document | Rejected]:
        try:
            # The file's own bytes: AUTO would gunzip a .gz that decode_file then calls
            # unsupported by its name.
            with readable.open(compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                data = handle.read()
        except Exception as exc:  # noqa: BLE001 - each filesystem raises its own IO errors
            # Only the read is guarded: one unreadable file is a rejection, not a failed job.
            reason = f"could not read file ({type(exc).__name__}: {exc})"
            return [Rejected(uri, relative_id(uri, self._root), reason)]
        return decode_file(uri, data, self._root, self._options)


class _ReadPattern(beam.PTransform):
    """One pattern: match, read, decode; document ids relative to the pattern's own root."""

    def __init__(self, pattern: str, options: ReadOptions) -> None:
        super().__init__()
        self._pattern = pattern
        self._options = options

    def expand(self, begin: PBegin) -> ReadOutputs:
        decoded = (
            begin
            | "Match" >> MatchFiles(self._pattern, empty_match_treatment=EmptyMatchTreatment.ALLOW)
            | "Open" >> ReadMatches()
            | "Decode" >> beam.ParDo(_DecodeFile(input_root(self._pattern), self._options))
            .with_input_types(ReadableFile)
            .with_output_types(Document, rejected=Rejected)
            .with_outputs(REJECTED, main="documents")
        )
        return ReadOutputs(decoded.documents, decoded[REJECTED])


class ReadDocuments(beam.PTransform):
    """``PBegin`` -> :class:`ReadOutputs` (``documents``, ``rejected``) for every file matched by
    ``patterns`` (one pattern or several; local paths or ``gs://``).

    Each matched file yields its documents or a ``Rejected`` naming why not (unsupported type,
    empty, binary, bad UTF-8, too large, a bad JSONL line or Parquet row, an IO error): nothing
    read is dropped silently. A pattern that matches nothing reads nothing.

        outputs = p | "Read" >> ReadDocuments("gs://bucket/docs/**", ReadOptions())
        outputs.documents, outputs.rejected
    """

    def __init__(self, patterns: str | Sequence[str], options: ReadOptions | None = None) -> None:
        super().__init__()
        self._patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
        if not self._patterns or not all(isinstance(p, str) and p for p in self._patterns):
            raise ValueError(f"ReadDocuments needs one or more non-empty patterns, got {patterns!r}")
        self._options = options if options is not None else ReadOptions()

    def expand(self, begin: PBegin) -> ReadOutputs:
        # One branch per pattern, because each pattern has its own root for relative ids.
        branches = [
            begin | f"Pattern{index}" >> _ReadPattern(pattern, self._options)
            for index, pattern in enumerate(self._patterns)
        ]
        documents = (
            [branch.documents for branch in branches]
            | "FlattenDocuments" >> beam.Flatten().with_output_types(Document)
        )
        rejected = (
            [branch.rejected for branch in branches]
            | "FlattenRejected" >> beam.Flatten().with_output_types(Rejected)
        )
        return ReadOutputs(documents, rejected)

    def display_data(self) -> dict[str, object]:
        return {"patterns": ", ".join(self._patterns)}
