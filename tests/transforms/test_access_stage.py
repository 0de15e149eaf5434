"""``transforms/access.py``: every document leaves with its principals or as a rejected record
naming why; none is lost."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to

from chunkline.access import AccessPolicy
from chunkline.metadata import metadata_pairs
from chunkline.records import Document
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.access import AssignPrincipals


def test_each_document_gets_its_principals_or_is_rejected() -> None:
    policy = AccessPolicy("groups", (("hr/**", ("hr",)),), ("staff",), "public", "/corpus")
    docs = [
        Document("a.md", "/corpus/a.md", "A", metadata_pairs([("groups", ["sales", "eng"])])),
        Document("hr/b.md", "/corpus/hr/b.md", "B"),
        Document("c.md", "/corpus/c.md", "C"),
        Document("d.md", "/corpus/d.md", "D", metadata_pairs([("groups", "eng,sales")])),
    ]
    with fnapi_pipeline() as p:
        out = p | beam.Create(docs) | AssignPrincipals(policy)
        assert_that(out.documents | beam.Map(lambda d: (d.doc_id, d.principals)),
                    equal_to([("a.md", ("eng", "sales")), ("hr/b.md", ("hr",)), ("c.md", ("staff",))]),
                    label="documents")
        assert_that(out.rejected | beam.Map(lambda r: (r.doc_id, r.reason.split(" holds")[0])),
                    equal_to([("d.md", "access: metadata 'groups': principal 'eng,sales'")]),
                    label="rejected")
