"""ChunkTexts: chunkline's splitter (and embedder) as one composite for anyone's Beam pipeline.

    from chunkline.embedder import EmbedOptions
    from chunkline.records import chunk_row
    from chunkline.splitting.options import SplitOptions
    from chunkline.transforms.chunk import ChunkTexts

    chunker = ChunkTexts(SplitOptions(overlap=16), EmbedOptions(model="all-MiniLM-L6-v2"))
    schema = chunker.schema()
    (p | beam.io.ReadFromText("docs.jsonl") | beam.Map(json.loads)
       | chunker
       | beam.Map(chunk_row, schema) | beam.io.WriteToParquet("out/chunks", schema))

The stages are the run's own (``SplitDocuments``, ``FlattenChunks``, ``EmbedChunks``), given
what the run's plan derives on the driver (``pipeline/plan.py``): the tokenizer and budget from
the model (``chunkline.splitting.options.split_budget``) and the embedding dtype (``auto``
resolved once, here, for every worker). The same texts with the same ids, uris and options give
the records ``chunkline run`` writes (``tests/transforms/test_chunk_composite.py``). What the
run does around them is not here: reading files, cleaning, credential screening, boilerplate,
deduplication, contextual headers, vector reuse (``content_key`` stays ``""``), BM25.

A PTransform of any runner: it holds options only (its DoFns are made in ``expand``), the
model loads once per worker process (RunInference's shared handle), and the budget is read
from the model's config files when the graph is built.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Literal, NamedTuple, Sequence

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput

from chunkline.embedder import EmbedOptions
from chunkline.readers.elements import DICT_FIELDS, ElementFields, document_of, element_id
from chunkline.records import ChunkRecord, Document, Rejected, chunk_schema
from chunkline.splitting.options import SplitBudget, SplitOptions, split_budget
from chunkline.transforms.coders import DocumentCoder, RejectedCoder  # noqa: F401 - registered: how elements shuffle
from chunkline.transforms.split import FlattenChunks, SplitDocuments

log = logging.getLogger("chunkline.chunk")

REJECTED = "rejected"


class ChunkTextsResult(NamedTuple):
    """What :meth:`ChunkTexts.with_rejected` gives."""

    chunks: PCollection[ChunkRecord]
    rejected: PCollection[Rejected]  # each element that made no document, with the reason


class _ToDocument(beam.DoFn):
    """An element -> its Document, or a Rejected record on the ``rejected`` tag."""

    def __init__(self, fields: ElementFields, log_rejected: bool) -> None:
        self.fields = fields
        self.log_rejected = log_rejected
        self.rejected = Metrics.counter("chunk_texts", "elements_rejected")

    def process(self, element: Any):  # Documents, and Rejected records on their tag
        found = document_of(element, self.fields)
        if isinstance(found, Document):
            yield found
            return
        self.rejected.inc()
        uri = element.uri if isinstance(element, Document) and isinstance(element.uri, str) else ""
        if self.log_rejected:
            log.warning("element rejected: %s", found)
        yield TaggedOutput(REJECTED, Rejected(uri, element_id(element, self.fields), found))


class ChunkTexts(beam.PTransform):
    """``PCollection`` of texts -> ``PCollection[ChunkRecord]``: every element split by
    chunkline (prose and Markdown with heading paths and tables, source code by syntax tree,
    PDFs' pages; ``transforms/split.py``), and with ``embed`` each chunk's ``embedding`` set by
    the model (``transforms/embed.py``; None: ``embedding`` stays None).

    Elements may be:

    - ``str``: the text; its id is ``text:`` and the blake2b-128 hex digest of its UTF-8
      (``chunkline.readers.elements.text_id``: deterministic, so equal strings share an id and
      their chunks share chunk ids; nothing here deduplicates), its uri ``""``;
    - ``dict``: keys as ``fields`` names them (default ``text``, optional ``id`` (str or int;
      absent: as for a string), ``uri``, ``metadata`` (a JSON object)); other keys are ignored
      unless ``fields.metadata_fields`` names them;
    - ``chunkline.records.Document``: as it is (pages, outline and principals included).

    Chunk ids are ``<doc id>#<start>-<end>`` (``chunkline.records.chunk_id``), offsets index
    the element's text, and each record's ``metadata`` is the document's metadata as JSON with
    ``source_uri`` (the uri), only the ``chunk_metadata`` keys when given.

    An element that makes no document (not a str, dict or Document; no text or a text that is
    not a string, is blank or holds an unpaired surrogate; an id that is not a non-empty string
    or an integer; metadata JSON cannot hold) never fails the pipeline: it is counted
    (``chunk_texts/elements_rejected``) and, by default, logged with its reason and left out.
    ``ChunkTexts(...).with_rejected()`` gives a :class:`ChunkTextsResult` instead, the
    elements left out as ``chunkline.records.Rejected`` records (id when it had one, reason)
    on its ``rejected`` output (as Beam's ``ParDo.with_exception_handling()`` gives good and bad
    records apart).

    ``split``: the options of the config's ``split:`` section (one dataclass for both).
    The tokenizer and budget left None are the embedding model's (``embed``, else
    ``budget_model``, else chunkline's default model, as ``chunkline run`` with ``embed: null``
    budgets for it): its own tokenizer, its max input less its special tokens and
    ``split.heading_reserve``. ``split.mode: semantic`` needs ``embed``.
    """

    def __init__(self, split: SplitOptions = SplitOptions(), embed: EmbedOptions | None = None,
                 *, fields: ElementFields = DICT_FIELDS,
                 chunk_metadata: Sequence[str] | None = None,
                 budget_model: EmbedOptions | None = None, label: str | None = None) -> None:
        super().__init__(label)
        if not isinstance(split, SplitOptions):
            raise TypeError(f"split must be SplitOptions, got {type(split).__name__}")
        if embed is not None and not isinstance(embed, EmbedOptions):
            raise TypeError(f"embed must be EmbedOptions or None, got {type(embed).__name__}")
        if split.mode == "semantic" and embed is None:
            raise ValueError("split mode semantic needs the embedding model (embed is None)")
        self.split = split
        self.embed = embed
        self.fields = fields
        self.chunk_metadata = tuple(chunk_metadata) if chunk_metadata is not None else None
        self.budget_model = budget_model
        self._label = label
        self._with_rejected = False
        # Derived once, on the driver, when the graph is built (the model's config files).
        self._budget: SplitBudget | None = None
        self._dim: int | None = None
        self._dtype: Literal["float32", "bfloat16", "int8"] | None = None

    def with_rejected(self) -> "ChunkTexts":
        """The same transform, giving a :class:`ChunkTextsResult` (chunks, rejected)."""
        other = ChunkTexts(self.split, self.embed, fields=self.fields,
                           chunk_metadata=self.chunk_metadata, budget_model=self.budget_model,
                           label=self._label)
        other._with_rejected = True
        return other

    def budget(self) -> SplitBudget:
        """The tokenizer spec and chunk budget the splitter counts with."""
        return self._derive()

    def schema(self, vector_dtype: str = "float32") -> pa.Schema:
        """The chunks table's schema for these records (``chunkline.records.chunk_schema``:
        the embedding a fixed-size list of the model's width, or null without ``embed``), for
        ``beam.Map(chunk_row, schema) | beam.io.WriteToParquet(path, schema)``."""
        if self.embed is None:
            return chunk_schema(None, vector_dtype)
        self._derive()
        return chunk_schema(self._dim, vector_dtype)

    def _derive(self) -> SplitBudget:
        """The budget, derived (with the vector's width and dtype) on the first call."""
        if self._budget is not None:
            return self._budget
        split = self.split
        if self.embed is None and split.tokenizer is not None and split.max_tokens is not None:
            # Nothing to read from a model: a tokenizer like "words" needs none installed.
            self._budget = SplitBudget(split.tokenizer, split.max_tokens)
            return self._budget
        from chunkline.embedder import model_info, resolve_dtype
        from chunkline.transforms.model_cache import local_model_dir

        model = self.embed or self.budget_model or EmbedOptions()
        # A gs:// model is read through this process's copy, as the run's plan reads it.
        local = dataclasses.replace(model, model=local_model_dir(model.model))
        _, dim, max_seq_length, special = model_info(local)
        self._budget = split_budget(split, model.model, max_seq_length, special,
                                    embedded=self.embed is not None)
        self._dim = dim
        if self.embed is not None:
            # ``dtype: auto`` decided once on the driver, as the run does: every worker then
            # makes the same vectors whatever its CPU.
            self._dtype = resolve_dtype(self.embed)
        return self._budget

    def expand(self, elements):  # PCollection[ChunkRecord], or a ChunkTextsResult
        split, budget = self.split, self._derive()
        # _derive decides the dtype whenever embedding is on.
        embed = (dataclasses.replace(self.embed, dtype=self._dtype)
                 if self.embed is not None and self._dtype is not None else self.embed)
        semantic = split.semantic if split.mode == "semantic" else None
        documents = (elements
                     | "Documents" >> beam.ParDo(_ToDocument(self.fields, not self._with_rejected))
                     .with_output_types(Document, **{REJECTED: Rejected})
                     .with_outputs(REJECTED, main="documents"))
        # The run's split stage with the run's arguments (pipeline/build.py).
        chunks = (documents.documents
                  | "Split" >> SplitDocuments(
                      budget.tokenizer_spec, budget.max_tokens, split.overlap, split.markdown,
                      heading_reserve=split.heading_reserve, code=split.code,
                      semantic=semantic, semantic_model=embed if semantic is not None else None,
                      max_chars=split.max_chars, chunk_metadata=self.chunk_metadata,
                      merge_sections_below=split.merge_sections_below)
                  | "Chunks" >> FlattenChunks())
        if embed is not None:
            from chunkline.transforms.embed import EmbedChunks  # torch loads only when embedding is on

            chunks = chunks | "Embed" >> EmbedChunks(embed)
        if self._with_rejected:
            return ChunkTextsResult(chunks, documents[REJECTED])
        return chunks
