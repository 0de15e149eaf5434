"""``chunkline.readers.elements``: a string, dict or Document handed over in memory becomes a
document or the reason it cannot, never an exception."""

from __future__ import annotations

import pytest

from chunkline.readers.elements import ElementFields, document_of, element_id, text_id
from chunkline.records import Document


def test_a_string_is_its_own_text_under_an_id_of_its_content() -> None:
    doc = document_of("Some text.")
    assert (doc.doc_id, doc.uri, doc.text, doc.metadata) == (text_id("Some text."), "", "Some text.", ())
    assert text_id("Some text.") == document_of("Some text.").doc_id != text_id("Other text.")
    assert text_id("x").startswith("text:") and len(text_id("x")) == len("text:") + 32


def test_a_dict_gives_id_uri_and_metadata() -> None:
    doc = document_of({"id": 7, "uri": "/c/a.md", "text": "Hi.", "metadata": {"team": "arm"},
                       "other": "ignored"})
    assert (doc.doc_id, doc.uri, doc.metadata) == ("7", "/c/a.md", (("team", '"arm"'),))
    fields = ElementFields(text="body", id="path", uri=None, metadata=None, metadata_fields=("team",))
    doc = document_of({"path": "p", "body": "Hi.", "team": "arm", "uri": "/x"}, fields)
    assert (doc.doc_id, doc.uri, doc.metadata) == ("p", "", (("team", '"arm"'),))


def test_a_document_passes_as_it_is() -> None:
    doc = Document("a", "/a.pdf", "Page one.", page_starts=(0,))
    assert document_of(doc) is doc


@pytest.mark.parametrize("element, reason, doc_id", [
    (5, "not a str, dict or Document (got int)", ""),
    (None, "not a str, dict or Document (got null)", ""),
    ({"body": "x"}, "no 'text' key", ""),
    ({"text": 3}, "'text' is int, not a string", ""),
    ("  \n", "empty document", ""),
    ({"id": "e", "text": ""}, "empty document (id 'e')", "e"),
    ({"id": "", "text": "x"}, "'id' is an empty string", ""),
    ({"id": True, "text": "x"}, "'id' is bool, not a string or integer", ""),
    ({"id": "a\x00b", "text": "x"}, "'id' contains U+0000 (NUL), which no id may hold", ""),
    ({"text": "x\udc80"}, "'text' contains an unpaired surrogate escape", ""),
    ({"id": "u", "text": "x", "uri": 3}, "'uri' is int, not a string (id 'u')", "u"),
    ({"id": "m", "text": "x", "metadata": "team"}, "'metadata' is str, not an object (id 'm')", "m"),
    ({"id": "big", "text": "x", "metadata": {"k": "v" * 70_000}}, "over the limit", "big"),
    (Document("", "", "x"), "'doc_id' is an empty string", ""),
    (Document("d", "", None), "'text' is null, not a string (id 'd')", "d"),
])
def test_an_element_without_a_document_is_a_reason(element, reason, doc_id) -> None:
    found = document_of(element)
    assert isinstance(found, str) and reason in found
    assert element_id(element) == doc_id
