"""Exact duplicates: one survivor per normalized text, the rest recorded, never lost."""


from typing import Iterable

import apache_beam as beam
from apache_beam.metrics import Metrics

from chunkline.records import DUPLICATE, KEPT, Document, DocumentStatus, Rejected, doc_hash


def _status(doc: Document, digest: str, status: str, duplicate_of: str | None = None) -> DocumentStatus:
    return DocumentStatus(doc.doc_id, doc.uri, doc.text, digest, status, duplicate_of)


class _OneDocumentPerId(beam.DoFn):
    """Two different documents under one id would make chunk ids ambiguous: the first by uri
    keeps the id, the others are rejected with the reason."""

    def __init__(self) -> None:
        self.conflicts = Metrics.counter("dedupe", "id_conflicts")

    def process(self, keyed: tuple[str, Iterable[Document]]):
        _, docs = keyed
        ordered = sorted(docs, key=lambda d: (d.uri, d.text))
        yield ordered[0]
        for other in ordered[1:]:
            self.conflicts.inc()
            yield beam.pvalue.TaggedOutput(
                "rejected",
                Rejected(other.uri, other.doc_id,
                         f"duplicate doc_id {other.doc_id!r}: already used by {ordered[0].uri}"),
            )


class _PickSurvivor(beam.DoFn):
    """Smallest doc_id survives: deterministic whatever order the runner groups in."""

    def __init__(self) -> None:
        self.duplicates = Metrics.counter("dedupe", "exact_duplicates")

    def process(self, keyed: tuple[str, Iterable[Document]]):
        digest, docs = keyed
        ordered = sorted(docs, key=lambda d: d.doc_id)
        survivor = ordered[0]
        yield survivor
        yield beam.pvalue.TaggedOutput("statuses", _status(survivor, digest, KEPT))
        for other in ordered[1:]:
            self.duplicates.inc()
            yield beam.pvalue.TaggedOutput(
                "statuses", _status(other, digest, DUPLICATE, survivor.doc_id)
            )


class ExactDedupe(beam.PTransform):
    """``PCollection[Document]`` -> outputs ``kept`` (Documents), ``statuses``
    (a DocumentStatus for every input document) and ``rejected`` (id conflicts).

    With ``enabled=False`` every document is kept (ids are still made unique)."""

    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        self.enabled = enabled

    def expand(self, documents):
        unique = (
            documents
            | "KeyById" >> beam.Map(lambda d: (d.doc_id, d))
            | "GroupById" >> beam.GroupByKey()
            | "OnePerId" >> beam.ParDo(_OneDocumentPerId()).with_outputs("rejected", main="docs")
        )
        if not self.enabled:
            statuses = unique.docs | "AllKept" >> beam.Map(
                lambda d: _status(d, doc_hash(d.text), KEPT)
            )
            return {"kept": unique.docs, "statuses": statuses, "rejected": unique.rejected}
        picked = (
            unique.docs
            | "KeyByHash" >> beam.Map(lambda d: (doc_hash(d.text), d))
            | "GroupByHash" >> beam.GroupByKey()
            | "PickSurvivor" >> beam.ParDo(_PickSurvivor()).with_outputs("statuses", main="kept")
        )
        return {"kept": picked.kept, "statuses": picked.statuses, "rejected": unique.rejected}
