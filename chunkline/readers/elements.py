"""In-memory elements to documents: what a caller hands the splitter without files (a Beam
user's ``PCollection`` of strings, dicts or ``Document``\\ s, ``transforms/chunk.py``).

Each element becomes a :class:`~chunkline.records.Document` or the reason it cannot (a
string), never an exception, as each file does in ``chunkline.readers.files``. The checks are
the record readers' (``records.py``): a text every later stage can encode and chunk, an id a
column can hold, metadata JSON can hold within the same bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chunkline.metadata import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    NUL,
    MetadataError,
    metadata_pairs,
    over_byte_limit,
)
from chunkline.readers.formats import EMPTY
from chunkline.readers.paths import name_problem
from chunkline.readers.text import utf8_encodable
from chunkline.records import Document, text_digest

# The id of a bare text names where it came from: no file, only its content.
TEXT_ID_PREFIX = "text:"


def text_id(text: str) -> str:
    """The id of a text given without one: ``text:`` and the blake2b (128 bits) hex digest of
    its UTF-8. Deterministic (the same text gets the same id in every bundle, worker, retry and
    run, which Beam's own uuid4 ids do not), so equal texts share an id and their chunks share
    chunk ids: nothing here deduplicates them.

    >>> text_id("hello")
    'text:46fb7408d4f285228f4af516ea25851b'
    """
    return TEXT_ID_PREFIX + text_digest(text).hex()


@dataclass(frozen=True)
class ElementFields:
    """Which keys of a dict element hold what. ``text`` is required; ``id`` (None: not read)
    absent gives :func:`text_id`; ``uri`` (None: not read) absent gives ``""``; ``metadata``
    (None: not read) holds a JSON object of metadata; each key of ``metadata_fields`` present
    in the element is copied into the metadata too (as Beam's ``LangChainChunker`` copies its
    ``metadata_fields``), over a same-named key of the ``metadata`` object. Other keys are
    ignored."""

    text: str = "text"
    id: str | None = "id"
    uri: str | None = "uri"
    metadata: str | None = "metadata"
    metadata_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text:
            raise ValueError("ElementFields.text must name a key")
        if not isinstance(self.metadata_fields, tuple):
            raise ValueError("ElementFields.metadata_fields must be a tuple of keys")


DICT_FIELDS = ElementFields()


def element_id(element: Any, fields: ElementFields = DICT_FIELDS) -> str:
    """The id an element's rejection is reported under: its own when it names a usable one,
    else ``""``."""
    if isinstance(element, Document) and isinstance(element.doc_id, str):
        return element.doc_id
    if isinstance(element, dict) and fields.id is not None:
        value = element.get(fields.id)
        doc_id, problem = _id_of(value, fields.id) if value is not None else ("", None)
        return "" if problem else doc_id
    return ""


def document_of(element: Any, fields: ElementFields = DICT_FIELDS, *,
                max_metadata_depth: int | None = DEFAULT_MAX_DEPTH,
                max_metadata_bytes: int | None = DEFAULT_MAX_BYTES) -> Document | str:
    """``element`` as a Document, or why it is none. A ``str`` is the text (id
    :func:`text_id`, uri ``""``, no metadata); a ``dict`` is read through ``fields``; a
    ``Document`` is taken as it is once its text and id are checked. A blank text is rejected
    (``"empty document"``), as a blank file or record is.

    >>> doc = document_of({"id": 7, "text": "Hi.", "metadata": {"team": "arm"}})
    >>> doc.doc_id, doc.uri, doc.metadata
    ('7', '', (('team', '"arm"'),))
    >>> document_of({"body": "Hi."})
    "no 'text' key"
    """
    if isinstance(element, Document):
        doc_id, problem = _id_of(element.doc_id, "doc_id")
        return problem or _text_problem(element.text, "text", doc_id) or element
    if isinstance(element, str):
        return _text_problem(element, "text", None) or Document(text_id(element), "", element)
    if not isinstance(element, dict):
        return f"not a str, dict or Document (got {_type_name(element)})"
    if fields.text not in element:
        return f"no {fields.text!r} key"
    text = element[fields.text]
    if not isinstance(text, str):
        return f"{fields.text!r} is {_type_name(text)}, not a string"
    given_id: str | None = None
    if fields.id is not None and element.get(fields.id) is not None:
        given_id, problem = _id_of(element[fields.id], fields.id)
        if problem:
            return problem
    problem = _text_problem(text, fields.text, given_id)
    if problem:
        return problem
    doc_id = given_id if given_id is not None else text_id(text)
    uri = ""
    if fields.uri is not None and element.get(fields.uri) is not None:
        uri = element[fields.uri]
        if not isinstance(uri, str):
            return f"{fields.uri!r} is {_type_name(uri)}, not a string (id {doc_id!r})"
        problem = name_problem(uri) if uri else None
        if problem:
            return f"{fields.uri!r}: {problem.replace('file name', 'uri')} (id {doc_id!r})"
    items: dict[Any, Any] = {}
    if fields.metadata is not None and element.get(fields.metadata) is not None:
        metadata = element[fields.metadata]
        if not isinstance(metadata, dict):
            return f"{fields.metadata!r} is {_type_name(metadata)}, not an object (id {doc_id!r})"
        items.update(metadata)
    items.update((key, element[key]) for key in fields.metadata_fields if key in element)
    try:
        pairs = metadata_pairs(items.items(), max_depth=max_metadata_depth)
    except RecursionError:
        return f"metadata is nested too deeply (id {doc_id!r})"
    except MetadataError as exc:
        return f"{exc} (id {doc_id!r})"
    too_big = over_byte_limit(pairs, max_metadata_bytes)
    if too_big:
        return f"{too_big} (id {doc_id!r})"
    return Document(doc_id=doc_id, uri=uri, text=text, metadata=pairs)


def _text_problem(text: Any, name: str, doc_id: str | None) -> str | None:
    where = f" (id {doc_id!r})" if doc_id else ""
    if not isinstance(text, str):
        return f"{name!r} is {_type_name(text)}, not a string{where}"
    if not utf8_encodable(text):
        # No UTF-8 column (Parquet, a store) can hold a lone surrogate.
        return f"{name!r} contains an unpaired surrogate escape{where}"
    if not text.strip():
        return f"{EMPTY}{where}"
    return None


def _id_of(value: Any, name: str) -> tuple[str, str | None]:
    """(id as str, None) or ("", reason): strings and integers only, as a record's id
    (``chunkline.readers.records``): a float or a structure has no stable text form."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    if not isinstance(value, str):
        return "", f"{name!r} is {_type_name(value)}, not a string or integer"
    if not value:
        return "", f"{name!r} is an empty string"
    if not utf8_encodable(value):
        return "", f"{name!r} contains an unpaired surrogate escape"
    if NUL in value:
        return "", f"{name!r} contains U+0000 (NUL), which no id may hold"
    return value, None


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__
