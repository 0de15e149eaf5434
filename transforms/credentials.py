"""CREDENTIALS: each document scanned for credentials right after cleaning, before boilerplate
counting, dedupe, context headers, splitting or any output (``chunkline.credentials``).

``reject``: the document becomes a rejected row whose reason names each credential's kind and
line, never its value. ``redact``: each credential in the text, and in the document's own
metadata values, is replaced by a marker of its kind, page starts moved with the text, so every
later stage, file, cache and request sees only the redacted text. ``allow``: the stage is not
in the graph.

Counters (namespace ``credentials``): documents flagged, rejected and redacted, credentials
found, and one ``kind:<name>`` counter per kind found (the summary and manifest list them).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput

from chunkline.credentials import MARKER, REDACT, CredentialOptions, Finding, describe, redact, scanner
from chunkline.memo import CREDENTIALS, MemoSource
from chunkline.records import Document, Rejected
from transforms.clean import CleanOutputs
from transforms.memo import MemoUse

NAMESPACE = "credentials"
KIND_PREFIX = "kind:"
REJECTED = "rejected"


def _name(uri: str) -> str:
    """The file name detect-secrets' keyword plugin reads assignments by (``.py``, ``.yaml``)."""
    return uri.rstrip("/").rsplit("/", 1)[-1]


def _scan_metadata(doc: Document, options: CredentialOptions
                   ) -> tuple[list[tuple[str, list[Finding]]], tuple[tuple[str, str], ...]]:
    """(findings per metadata key, the metadata with each credential redacted). A value is
    scanned as its JSON text; a marker holds no quote or backslash, so it stays valid JSON."""
    found, pairs = [], []
    for key, value in doc.metadata:
        findings = scanner(options).scan(value, _name(doc.uri))
        if findings:
            found.append((key, findings))
            value = _redacted_json(value, findings)
        pairs.append((key, value))
    return found, tuple(pairs)


def _redacted_json(value: str, findings: list[Finding]) -> str:
    """A metadata value's JSON text with each credential's marker in its place; should a span
    have cut through an escape sequence, the whole value becomes the first one's marker."""
    redacted = redact(value, findings)[0]
    try:
        json.loads(redacted)
    except ValueError:
        return json.dumps(MARKER.format(kind=findings[0].kind))
    return redacted


class _ScanDocument(beam.DoFn):
    """One document scanned; a text (with its file name and metadata) the previous run's scan
    found clean is not scanned again (``chunkline.memo``: only clean results are kept, so a
    flagged document is always described afresh)."""

    def __init__(self, options: CredentialOptions, memo: MemoSource | None = None) -> None:
        self.options = options
        self.memo = MemoUse(memo, CREDENTIALS, repr(options))
        self.flagged = Metrics.counter(NAMESPACE, "documents_flagged")
        self.rejected = Metrics.counter(NAMESPACE, "documents_rejected")
        self.redacted = Metrics.counter(NAMESPACE, "documents_redacted")
        self.found = Metrics.counter(NAMESPACE, "found")

    def setup(self) -> None:
        scanner(self.options)  # detect-secrets' plugins, once per worker process
        self.memo.setup()

    def finish_bundle(self) -> None:
        self.memo.flush()

    def process(self, doc: Document) -> Iterable[Document | TaggedOutput]:
        memo, key = self.memo.memo, None
        if memo is not None:
            key = memo.key(doc.text, _name(doc.uri), repr(doc.metadata))
            if memo.get(key) is not None:
                yield doc
                return
        findings = scanner(self.options).scan(doc.text, _name(doc.uri))
        in_metadata, metadata = _scan_metadata(doc, self.options) if doc.metadata else ([], ())
        if not findings and not in_metadata:
            if key is not None:
                memo.put(key, b"")
            yield doc
            return
        self.flagged.inc()
        every = findings + [f for _, fs in in_metadata for f in fs]
        self.found.inc(len(every))
        for finding in every:
            Metrics.counter(NAMESPACE, KIND_PREFIX + finding.kind).inc()
        if self.options.mode == REDACT:
            self.redacted.inc()
            text, page_starts = redact(doc.text, findings, doc.page_starts)
            yield dataclasses.replace(doc, text=text, page_starts=page_starts,
                                      metadata=metadata if in_metadata else doc.metadata)
            return
        self.rejected.inc()
        where = [describe(findings)] if findings else []
        where += [f"metadata {key!r}: {describe(fs)}" for key, fs in in_metadata]
        yield TaggedOutput(REJECTED, Rejected(doc.uri, doc.doc_id,
                                              f"holds credentials ({'; '.join(where)})"))


class ScanCredentials(beam.PTransform):
    """``PCollection[Document]`` -> documents and rejections (:class:`CleanOutputs`, as the
    cleaning stages return them), as ``options.mode`` says.

        scanned = cleaned.documents | "Credentials" >> ScanCredentials(CredentialOptions())
        scanned.documents, scanned.rejected
    """

    def __init__(self, options: CredentialOptions, memo: MemoSource | None = None) -> None:
        super().__init__()
        self.options = options
        self.memo = memo

    def expand(self, documents: PCollection[Document]) -> CleanOutputs:
        scanned = documents | "Scan" >> beam.ParDo(_ScanDocument(self.options, self.memo)).with_outputs(
            REJECTED, main="documents")
        return CleanOutputs(scanned.documents, scanned[REJECTED])
