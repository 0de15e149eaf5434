"""ACCESS: each document's principals (who may read it), decided once before dedupe and carried
on the document to its status row and every chunk (``chunkline.access``).

A document whose metadata or mapping names a malformed principal is rejected with the reason
(a Rejected record, counted like every other rejection), never indexed with a guess."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput

from chunkline.access import AccessError, AccessPolicy, principals_of
from chunkline.records import Document, Rejected
from chunkline.transforms.coders import DocumentCoder  # noqa: F401 - registered: how elements shuffle

REJECTED = "rejected"


class AccessOutputs(NamedTuple):
    documents: PCollection[Document]  # each with its principals
    rejected: PCollection[Rejected]  # a malformed principal, with the reason


class _AssignPrincipals(beam.DoFn):
    def __init__(self, policy: AccessPolicy) -> None:
        self.policy = policy
        self.rejected = Metrics.counter("access", "documents_rejected")
        self.unreadable = Metrics.counter("access", "documents_without_principals")

    def process(self, doc: Document):
        try:
            principals = principals_of(doc, self.policy)
        except AccessError as exc:
            self.rejected.inc()
            yield TaggedOutput(REJECTED, Rejected(doc.uri, doc.doc_id, f"access: {exc}"))
            return
        if not principals:
            self.unreadable.inc()  # kept and indexed, readable by nobody: deny by default
        yield dataclasses.replace(doc, principals=principals)


class AssignPrincipals(beam.PTransform):
    """``PCollection[Document]`` -> :class:`AccessOutputs`: every document with
    ``principals`` set (``chunkline.access.principals_of`` under ``policy``), or rejected.
    Counters ``access/documents_rejected``, ``access/documents_without_principals``."""

    def __init__(self, policy: AccessPolicy) -> None:
        super().__init__()
        self.policy = policy

    def expand(self, documents: PCollection[Document]):
        assigned = (documents
                    | "Principals" >> beam.ParDo(_AssignPrincipals(self.policy))
                    .with_output_types(Document, **{REJECTED: Rejected})
                    .with_outputs(REJECTED, main="documents"))
        return AccessOutputs(assigned.documents, assigned[REJECTED])
