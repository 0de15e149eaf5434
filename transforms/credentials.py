"""CREDENTIALS: each document scanned for credentials right after cleaning, before boilerplate
counting, dedupe, context headers, splitting or any output (``chunkline.credentials``).

``reject``: a document holding a credential of a confirmed kind (``chunkline.credentials.
CONFIDENCE``) becomes a rejected row whose reason names each credential's kind and line, never
its value; one holding only loose kinds is redacted as below. ``redact``: each credential in the
text, and in the document's own metadata values, is replaced by a marker of its kind, page
starts moved with the text, so every later stage, file, cache and request sees only the
redacted text. ``allow``: the stage is not in the graph.

Counters (namespace ``credentials``): documents flagged, rejected and redacted, credentials
found, one ``kind:<name>`` counter per kind found (the summary and manifest list them), and per
kind what became of it: ``rejected:<name>`` (in a rejected document) or ``masked:<name>``
(redacted in an indexed one); :func:`outcomes` reads them back.
"""

from __future__ import annotations

import json
from typing import Final, Iterable, Literal

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput

from chunkline.credentials import CredentialOptions, Finding, rules_digest, scanner
from chunkline.memo import CREDENTIALS, MemoSource
from chunkline.records import Document, Rejected
from chunkline.screening import decide, file_name, scan_document
from chunkline.transforms.clean import CleanOutputs
from chunkline.transforms.memo import MemoUse

NAMESPACE = "credentials"
KIND_PREFIX = "kind:"
# What became of each credential found, by kind: in a rejected document, or masked in a kept one.
REJECTED_PREFIX, MASKED_PREFIX = "rejected:", "masked:"
REJECTED: Final = "rejected"  # Final: a Literal type, as the TaggedOutput[Literal[...]] outputs name it


def outcomes(counters: dict[str, int]) -> dict[str, dict[str, int]]:
    """``{"rejected": {kind: n}, "masked": {kind: n}}`` from the stage's counters by name (what
    the manifest's ``credentials`` section can show beside ``kinds``)."""
    return {label: {name.removeprefix(prefix): n for name, n in sorted(counters.items())
                    if name.startswith(prefix) and n}
            for label, prefix in (("rejected", REJECTED_PREFIX), ("masked", MASKED_PREFIX))}


def _as_json(findings: list[Finding]) -> list[list]:
    return [[f.kind, f.start, f.end, f.line, f.last_line] for f in findings]


def _recorded(value: bytes) -> tuple[list[Finding], list[tuple[str, list[Finding]]]]:
    """A memo entry back as findings (b"": none); raises on a damaged one."""
    if not value:
        return [], []
    entry = json.loads(value)
    return ([Finding(*row) for row in entry["text"]],
            [(key, [Finding(*row) for row in rows]) for key, rows in entry["metadata"]])


class _ScanDocument(beam.DoFn):
    """One document scanned; a text (with its file name and metadata) the previous run scanned
    is not scanned again (``chunkline.memo`` keeps each finding's kind and place, never its
    value)."""

    def __init__(self, options: CredentialOptions, memo: MemoSource | None = None) -> None:
        self.options = options
        # The rules' digest too: findings recalled from a run with other rules would be theirs.
        self.memo = MemoUse(memo, CREDENTIALS, f"{options!r} rules {rules_digest()}")
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
            key = memo.key(doc.text, file_name(doc.uri), repr(doc.metadata))
            value = memo.recall(doc, key)
            if value is not None:
                try:
                    return _recorded(value)
                except (ValueError, KeyError, TypeError):
                    pass  # a damaged entry: scanned again
        findings, in_metadata = scan_document(doc, self.options)
        if memo is not None and key is not None:
            memo.keep(doc, key, b"" if not findings and not in_metadata else json.dumps(
                {"text": _as_json(findings),
                 "metadata": [[k, _as_json(fs)] for k, fs in in_metadata]}).encode("utf-8"))
        return findings, in_metadata

    def process(self, doc: Document) -> Iterable[Document | TaggedOutput[Literal["rejected"], Rejected]]:
        decision = decide(doc, *self._findings(doc), self.options)
        if not decision.flagged:
            yield doc
            return
        self.flagged.inc()
        every = decision.findings + [f for _, fs in decision.in_metadata for f in fs]
        self.found.inc(len(every))
        outcome = MASKED_PREFIX if decision.document is not None else REJECTED_PREFIX
        for finding in every:
            Metrics.counter(NAMESPACE, KIND_PREFIX + finding.kind).inc()
            Metrics.counter(NAMESPACE, outcome + finding.kind).inc()
        if decision.document is not None:  # redact mode, or only loose kinds: masked
            self.redacted.inc()
            yield decision.document
            return
        self.rejected.inc()
        # decide() gives a reason with every rejection; the fallback only keeps the row typed.
        reason = decision.reason or "holds credentials"
        yield TaggedOutput(REJECTED, Rejected(doc.uri, doc.doc_id, reason))


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
