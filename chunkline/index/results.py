"""What a search returns: :class:`SearchResult` (the hits, best first, and the :class:`Note`
values about them), each :class:`Hit` a chunk with its score; and the modes a search ranks by.
Plain data, importable by a caller that only reads results (an API layer, a test)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["hybrid", "dense", "sparse"]
MODES: tuple[str, ...] = ("hybrid", "dense", "sparse")


@dataclass(frozen=True)


class Hit:
    score: float
    doc_id: str
    chunk_id: str
    headings: tuple[str, ...]
    start: int
    end: int
    text: str
    metadata: str = "{}"  # the chunk's metadata JSON ("{}" for an index written before it)
    page_start: int | None = None
    page_end: int | None = None
    # With ``expand``: the hit with its neighbouring chunks, as a span of the document's text.
    expanded_start: int | None = None
    expanded_end: int | None = None
    expanded_text: str | None = None


# What a note is about (``Note.kind``), for code that reacts to one without reading its text.
EMPTY_INDEX = "empty_index"  # the run holds no chunk at all
WHERE_UNKNOWN_KEY = "where_unknown_key"  # no chunk's metadata has a key a condition names
WHERE_NO_MATCH = "where_no_match"  # the keys exist, but no chunk meets the conditions
NO_QUERY_TERMS = "no_query_terms"  # BM25: no term left after analysis (stop words, no words)
TERMS_NOT_FOUND = "terms_not_found"  # BM25: none of the question's terms is in the chunks ranked
DENSE_ONLY = "dense_only"  # hybrid asked, ranked by the dense vectors alone (says why)
SPARSE_ONLY = "sparse_only"  # hybrid asked, ranked by BM25 alone (the run has no vectors)
NOT_READABLE = "not_readable"  # access control: no chunk is readable by the caller's principals
UNPROTECTED = "unprotected"  # principals given, but the run was written without access control
NOTE_KINDS = (EMPTY_INDEX, WHERE_UNKNOWN_KEY, WHERE_NO_MATCH, NO_QUERY_TERMS, TERMS_NOT_FOUND,
              DENSE_ONLY, SPARSE_ONLY, NOT_READABLE, UNPROTECTED)


@dataclass(frozen=True)


class Note:
    """Something about a result its caller should know: ``kind`` (one of :data:`NOTE_KINDS`)
    for code, ``text`` (one line) for a person. A note about an empty result starts "no hits: "."""

    kind: str
    text: str


@dataclass(frozen=True)


class SearchResult:
    """The hits, best first; the notes about them; and ``ranking``, the ranking the hits were
    chosen by: ``"hybrid"``, ``"dense"`` or ``"sparse"`` (which may differ from the mode asked:
    hybrid on a one-sided run, or hybrid where BM25 matches nothing), None when no chunk was
    left to rank (an empty index, a filter that keeps nothing)."""

    hits: tuple[Hit, ...]
    notes: tuple[Note, ...] = ()
    ranking: str | None = None
