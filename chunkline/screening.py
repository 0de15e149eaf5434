"""What the credential stage lets through: one decision per document, from its findings.

The stage (``transforms/credentials.py``) and everything written before it (the OCR page cache,
the read memo) decide with these functions, so that no file holds what the stage would not let
through (``docs/ARCHITECTURE.md``, "Nothing persists that the credential stage has not seen"):

- ``allow``: everything, as it is;
- ``redact``: each credential in the text and in the metadata values masked by its kind's marker;
- ``reject``: nothing of a document holding a credential of a kind that confirms itself
  (:func:`chunkline.credentials.rejecting`); a document with loose findings only is masked, as
  in ``redact``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from chunkline.credentials import (ALLOW, MARKER, REJECT, CredentialOptions, Finding, describe, redact,
                                   rejecting, rules_digest, scanner)
from chunkline.records import Document

# Findings per metadata key (a value is scanned as its JSON text).
MetadataFindings = list[tuple[str, list[Finding]]]


@dataclass(frozen=True)
class Decision:
    """The stage's decision on one document: ``document`` is what passes (itself, or masked),
    None when it is rejected, ``reason`` then saying why (kinds and lines, never a value)."""

    document: Document | None
    findings: list[Finding] = field(default_factory=list)
    in_metadata: MetadataFindings = field(default_factory=list)
    reason: str | None = None

    @property
    def flagged(self) -> bool:
        return bool(self.findings or self.in_metadata)


def file_name(uri: str) -> str:
    """The file name detect-secrets' keyword plugin reads assignments by (``.py``, ``.yaml``)."""
    return uri.rstrip("/").rsplit("/", 1)[-1]


def scan_document(doc: Document, options: CredentialOptions) -> tuple[list[Finding], MetadataFindings]:
    """Findings in the text, and per metadata key."""
    found = scanner(options)
    name = file_name(doc.uri)
    in_metadata = [(key, fs) for key, value in doc.metadata if (fs := found.scan(value, name))]
    return found.scan(doc.text, name), in_metadata


def _redacted_json(value: str, findings: list[Finding]) -> str:
    """A metadata value's JSON text with each credential's marker in its place; should a span
    have cut through an escape sequence, the whole value becomes the first one's marker."""
    redacted = redact(value, findings)[0]
    try:
        json.loads(redacted)
    except ValueError:
        return json.dumps(MARKER.format(kind=findings[0].kind))
    return redacted


def _masked(doc: Document, findings: list[Finding], in_metadata: MetadataFindings) -> Document:
    text, page_starts = redact(doc.text, findings, doc.page_starts)
    by_key = dict(in_metadata)
    metadata = tuple((key, _redacted_json(value, by_key[key]) if key in by_key else value)
                     for key, value in doc.metadata)
    return dataclasses.replace(doc, text=text, page_starts=page_starts, metadata=metadata)


def decide(doc: Document, findings: list[Finding], in_metadata: MetadataFindings,
           options: CredentialOptions) -> Decision:
    """What the stage does with ``doc``, given what was found in it (:func:`scan_document`, or
    the memo's record of it)."""
    if options.mode == ALLOW or (not findings and not in_metadata):
        return Decision(doc, findings, in_metadata)
    if options.mode == REJECT and costs_the_document(doc, findings, in_metadata):
        where = [describe(findings)] if findings else []
        where += [f"metadata {key!r}: {describe(fs)}" for key, fs in in_metadata]
        return Decision(None, findings, in_metadata, f"holds credentials ({'; '.join(where)})")
    # redact mode, or only loose kinds: masked, never the document lost
    return Decision(_masked(doc, findings, in_metadata), findings, in_metadata)


def costs_the_document(doc: Document, findings: list[Finding], in_metadata: MetadataFindings) -> bool:
    """Whether the text or a metadata value holds a credential that costs the document in
    ``reject`` mode (:func:`chunkline.credentials.rejecting`)."""
    if rejecting(doc.text, findings):
        return True
    values = dict(doc.metadata)
    return any(rejecting(values[key], fs) for key, fs in in_metadata)


def screen_document(doc: Document, options: CredentialOptions) -> Document | None:
    """What the stage would let through of ``doc``: itself, masked, or None."""
    if options.mode == ALLOW:
        return doc
    return decide(doc, *scan_document(doc, options), options).document


def screen_text(text: str, options: CredentialOptions, name: str = "") -> str | None:
    """What the stage would let through of a piece of a document's text (an OCR'd page): the
    text, masked, or None where it would reject the document holding it."""
    if options.mode == ALLOW:
        return text
    found = screen_document(Document(name or "page", name, text), options)
    return None if found is None else found.text


def screening_key(options: CredentialOptions) -> str:
    """What a screened entry depends on: the options and the detection rules. Part of the key
    of every cache and memo entry written before the stage, so that one kept under other
    options (an ``allow`` run's raw text), other rules or no screening at all is never read."""
    return f"screened {rules_digest()} {options!r}"
