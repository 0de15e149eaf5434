"""CLEAN: per-document cleaning, then corpus-level boilerplate removal.

Thin over ``chunkline.clean`` and ``chunkline.boilerplate``. Both stages return
:class:`CleanOutputs` (``documents``, ``rejected``), like the read stage: a document whose text
is empty after cleaning is a ``Rejected`` with that reason, never dropped silently. The text
they output is the text every chunk offset refers to (the ``documents`` table stores it).
"""

from __future__ import annotations

import dataclasses
from typing import AbstractSet, Iterable, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsSingleton, PCollection, TaggedOutput

from chunkline.boilerplate import (
    BoilerplateOptions,
    frequency_floor,
    line_keys,
    remove_boilerplate_marked,
)
from chunkline.clean import CleanOptions, clean_marked
from chunkline.records import Document, Rejected, doc_hash

REJECTED = "rejected"
EMPTY_AFTER_CLEANING = "empty after cleaning"
EMPTY_AFTER_BOILERPLATE = "empty after boilerplate removal"

class CleanOutputs(NamedTuple):
    """What :class:`CleanDocuments` and :class:`RemoveBoilerplate` return."""

    documents: PCollection[Document]
    rejected: PCollection[Rejected]

class _Clean(beam.DoFn):
    def __init__(self, options: CleanOptions) -> None:
        self._options = options
        self._changed = Metrics.counter("clean", "changed")
        self._rejected = Metrics.counter("clean", "rejected")

    def process(self, doc: Document) -> Iterable[Document | TaggedOutput]:
        # A PDF's page starts move with the lines cleaning drops.
        text, page_starts = clean_marked(doc.text, doc.page_starts, self._options)
        if not text.strip():
            self._rejected.inc()
            yield TaggedOutput(REJECTED, Rejected(doc.uri, doc.doc_id, EMPTY_AFTER_CLEANING))
            return
        if text != doc.text:
            self._changed.inc()
            doc = dataclasses.replace(doc, text=text, page_starts=page_starts)
        yield doc

class CleanDocuments(beam.PTransform):
    """``PCollection[Document]`` -> :class:`CleanOutputs`: each document's text through
    :func:`chunkline.clean.clean_text`; counters ``clean/changed``, ``clean/rejected``.

        cleaned = read.documents | "Clean" >> CleanDocuments(CleanOptions())
        cleaned.documents, cleaned.rejected
    """

    def __init__(self, options: CleanOptions | None = None) -> None:
        super().__init__()
        self._options = options if options is not None else CleanOptions()

    def expand(self, documents: PCollection[Document]) -> CleanOutputs:
        cleaned = documents | "CleanText" >> beam.ParDo(_Clean(self._options)).with_outputs(
            REJECTED, main="documents"
        )
        return CleanOutputs(cleaned.documents, cleaned[REJECTED])

class _Strip(beam.DoFn):
    def __init__(self, options: BoilerplateOptions) -> None:
        self._options = options
        self._changed = Metrics.counter("boilerplate", "documents_changed")
        self._chars = Metrics.counter("boilerplate", "chars_removed")
        self._rejected = Metrics.counter("boilerplate", "rejected")

    def process(
        self, doc: Document, frequent: AbstractSet[str]
    ) -> Iterable[Document | TaggedOutput]:
        text, page_starts = remove_boilerplate_marked(doc.text, doc.page_starts, frequent,
                                                      self._options)
        if text == doc.text:
            yield doc
            return
        self._changed.inc()
        self._chars.inc(len(doc.text) - len(text))
        if not text.strip():
            self._rejected.inc()
            yield TaggedOutput(REJECTED, Rejected(doc.uri, doc.doc_id, EMPTY_AFTER_BOILERPLATE))
            return
        yield dataclasses.replace(doc, text=text, page_starts=page_starts)

class RemoveBoilerplate(beam.PTransform):
    """``PCollection[Document]`` -> :class:`CleanOutputs`: lines and short blocks that occur in
    at least ``frequency_floor(n_documents, options)`` documents removed from every document.

    The count is a Beam combine (``Count.PerElement`` over each document's set of keys, lifted
    before the shuffle); the frequent keys reach the documents as one side input (a frozenset:
    only the frequent keys, not the corpus's lines). Counters ``boilerplate/frequent_keys``,
    ``boilerplate/documents_changed``, ``boilerplate/chars_removed``, ``boilerplate/rejected``.

    Documents are counted once per distinct text (``doc_hash``), so it can run before dedupe:
    five exact copies of a page do not make every line of it "occur in five documents". Near
    copies do count apiece; ``min_docs`` and ``min_fraction`` must stay above the number of
    versions one document is likely to have in the corpus.
    """

    def __init__(self, options: BoilerplateOptions | None = None) -> None:
        super().__init__()
        self._options = options if options is not None else BoilerplateOptions()

    def expand(self, documents: PCollection[Document]) -> CleanOutputs:
        options = self._options
        # One set of keys per distinct text: exact copies count once.
        key_sets = (
            documents
            | "KeysByText" >> beam.Map(
                lambda doc: (doc_hash(doc.text), tuple(sorted(line_keys(doc.text, options))))
            )
            | "OnePerText" >> beam.CombinePerKey(min)  # equal hashes: (nearly always) equal sets
            | "KeySets" >> beam.Values()
        )
        n_documents = key_sets | "CountTexts" >> beam.combiners.Count.Globally()
        floor = n_documents | "Floor" >> beam.Map(frequency_floor, options)
        frequent_counter = Metrics.counter("boilerplate", "frequent_keys")

        def as_set(keys: list[str]) -> frozenset[str]:
            frequent_counter.inc(len(keys))
            return frozenset(keys)

        frequent = (
            key_sets
            | "LineKeys" >> beam.FlatMap(lambda keys: keys)
            | "CountKeys" >> beam.combiners.Count.PerElement()
            | "KeepFrequent" >> beam.Filter(lambda kv, f: kv[1] >= f, AsSingleton(floor))
            | "Keys" >> beam.Keys()
            | "Collect" >> beam.combiners.ToList()
            | "AsSet" >> beam.Map(as_set)
        )
        stripped = documents | "Strip" >> beam.ParDo(
            _Strip(options), AsSingleton(frequent)
        ).with_outputs(REJECTED, main="documents")
        return CleanOutputs(stripped.documents, stripped[REJECTED])
