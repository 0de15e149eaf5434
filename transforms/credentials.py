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
from typing import Iterable, Literal

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


def _scan_metadata(doc: Document, options: CredentialOptions) -> list[tuple[str, list[Finding]]]:
    """Findings per metadata key; a value is scanned as its JSON text."""
    found = []
    for key, value in doc.metadata:
        findings = scanner(options).scan(value, _name(doc.uri))
        if findings:
            found.append((key, findings))
    return found


def _redacted_metadata(doc: Document, in_metadata: list[tuple[str, list[Finding]]]
                       ) -> tuple[tuple[str, str], ...]:
    """The metadata with each credential redacted; a marker holds no quote or backslash, so a
    value stays valid JSON."""
    by_key = dict(in_metadata)
    return tuple((key, _redacted_json(value, by_key[key]) if key in by_key else value)
                 for key, value in doc.metadata)


def _as_json(findings: list[Finding]) -> list[list]:
    return [[f.kind, f.start, f.end, f.line, f.last_line] for f in findings]


def _recorded(value: bytes) -> tuple[list[Finding], list[tuple[str, list[Finding]]]]:
    """A memo entry back as findings (b"": none); raises on a damaged one."""
    if not value:
        return [], []
    entry = json.loads(value)
    return ([Finding(*row) for row in entry["text"]],
            [(key, [Finding(*row) for row in rows]) for key, rows in entry["metadata"]])


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
    """One document scanned; a text (with its file name and metadata) the previous run scanned
    is not scanned again (``chunkline.memo`` keeps each finding's kind and place, never its
    value)."""

    def __init__(self, options: CredentialOptions, memo: MemoSource | None = None) -> None:
        self.options = options
        self.memo = MemoUse(memo, CREDENTIALS, repr(options))
        self.flagged = Metrics.counter(NAMESPACE, "documents_flagged")
        self.rejected = Metrics.counter(NAMESPACE, "documents_rejected")
        self.redacted = Metrics.counter(NAMESPACE, "documents_redacted")
        self.found = Metrics.counter(NAMESPACE, "found")

    def setup(self) -> None:
        self.memo.setup()
        if self.memo.memo is None:
            scanner(self.options)  # detect-secrets' plugins, once per worker process
        # With a memo the plugins load on the first text the previous run did not scan: a
        # rerun that recalls every scan never imports detect-secrets.

    def finish_bundle(self) -> None:
        self.memo.flush()

    def _findings(self, doc: Document) -> tuple[list[Finding], list[tuple[str, list[Finding]]]]:
        """(findings in the text, findings per metadata key): recalled for a text, name and
        metadata the previous run scanned (kinds and places only, never a value), else
        scanned."""
        memo, key = self.memo.memo, None
        if memo is not None:
            key = memo.key(doc.text, _name(doc.uri), repr(doc.metadata))
            value = memo.get(key)
            if value is not None:
                try:
                    return _recorded(value)
                except (ValueError, KeyError, TypeError):
                    pass  # a damaged entry: scanned again
        findings = scanner(self.options).scan(doc.text, _name(doc.uri))
        in_metadata = _scan_metadata(doc, self.options) if doc.metadata else []
        if key is not None:
            memo.put(key, b"" if not findings and not in_metadata else json.dumps(
                {"text": _as_json(findings),
                 "metadata": [[k, _as_json(fs)] for k, fs in in_metadata]}).encode("utf-8"))
        return findings, in_metadata

    def process(self, doc: Document) -> Iterable[Document | TaggedOutput[Literal["rejected"], Rejected]]:
        findings, in_metadata = self._findings(doc)
        if not findings and not in_metadata:
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
                                      metadata=_redacted_metadata(doc, in_metadata)
                                      if in_metadata else doc.metadata)
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

    def expand(self, documents: PCollection[Document]):
        scanned = documents | "Scan" >> beam.ParDo(_ScanDocument(self.options, self.memo)).with_outputs(
            REJECTED, main="documents")
        return CleanOutputs(scanned.documents, scanned[REJECTED])
