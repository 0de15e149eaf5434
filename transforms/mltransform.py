"""chunkline's splitter as a chunking provider for Beam's ``MLTransform``, emitting Beam's own
``apache_beam.ml.rag.types.Chunk``, so Beam's RAG embedding and vector-store transforms
(``apache_beam.ml.rag.embeddings``, ``apache_beam.ml.rag.ingestion``) take its chunks as they
take ``LangChainChunker``'s (https://beam.apache.org/documentation/ml/rag/ ; the peer adapter is
``apache_beam/ml/rag/chunking/langchain.py``):

    from apache_beam.ml.transforms.base import MLTransform
    from apache_beam.ml.rag.embeddings.huggingface import HuggingfaceTextEmbeddings

    chunks = (p | beam.Create([{"id": "guide", "text": "# Guide\\n...", "team": "arm"}])
                | MLTransform(write_artifact_location=tmp)
                  .with_transform(ChunklineChunker(SplitOptions(), metadata_fields=("team",)))
                  .with_transform(HuggingfaceTextEmbeddings(model_name=...)))

The splitting is :class:`chunkline.transforms.chunk.ChunkTexts`' (the run's split stage); this module
only maps its records onto Beam's type.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Sequence

import apache_beam as beam
from apache_beam.ml.rag.chunking.base import ChunkIdFn, ChunkingTransformProvider
from apache_beam.ml.rag.types import Chunk, Content

from chunkline.embedder import EmbedOptions
from chunkline.readers.elements import ElementFields
from chunkline.records import ChunkRecord
from chunkline.splitting.options import SplitOptions
from chunkline.transforms.chunk import ChunkTexts

# Keys chunkline sets in each Chunk's metadata, over a document metadata key of the same name:
# where the chunk sits in its document, so a store row points back into the source.
SPAN_KEYS = ("doc_id", "start", "end", "headings", "tokens")


def beam_chunk(record: ChunkRecord, content: Literal["text", "embed_text"] = "text") -> Chunk:
    """A chunkline record as Beam's ``Chunk``: ``id`` the deterministic chunk id
    (``<doc id>#<start>-<end>``), ``index`` the chunk's position in its document, ``metadata``
    the document's metadata (``source_uri`` among it) with :data:`SPAN_KEYS`, the heading
    path's embedding prefix (``heading_prefix``), a split table's repeated header
    (``table_header``) and a paged document's ``page_start``/``page_end`` where there are any.
    ``content``: ``text`` puts the chunk's own text in ``Content.text`` (what ``start:end``
    indexes); ``embed_text`` puts what chunkline's embedder reads there (heading path, table
    header, text), for a Beam embedding transform to embed what ``chunkline run`` embeds."""
    metadata: dict[str, Any] = json.loads(record.metadata)
    metadata.update(doc_id=record.doc_id, start=record.start, end=record.end,
                    headings=list(record.headings), tokens=record.tokens)
    if record.prefix:
        metadata["heading_prefix"] = record.prefix
    if record.table_header:
        metadata["table_header"] = record.table_header
    if record.page_start is not None:
        metadata.update(page_start=record.page_start, page_end=record.page_end)
    text = record.text if content == "text" else record.embed_text()
    chunk = Chunk(content=Content(text=text), id=record.chunk_id, index=record.chunk_index,
                  metadata=metadata)
    if record.embedding is not None:
        from apache_beam.ml.rag.types import Embedding

        chunk.embedding = Embedding(dense_embedding=list(record.embedding))
    return chunk


class _SplitToBeamChunks(beam.PTransform):
    def __init__(self, chunk_texts: ChunkTexts, content: str) -> None:
        super().__init__()
        self.chunk_texts = chunk_texts
        self.content = content

    def expand(self, elements):
        # MLTransform's chain has one output: an element that makes no document is counted and
        # logged by ChunkTexts, never a failed pipeline.
        chunks = elements | "ChunkTexts" >> self.chunk_texts
        return chunks | "ToBeamChunk" >> beam.Map(beam_chunk, self.content).with_output_types(Chunk)


class ChunklineChunker(ChunkingTransformProvider):
    """A ``ChunkingTransformProvider`` for ``MLTransform`` that splits with chunkline: dicts (or
    strings, or ``chunkline.records.Document``\\ s) in, ``apache_beam.ml.rag.types.Chunk`` out,
    one per chunk, in document order (``index``), with deterministic ids (``<doc id>#<start>-<end>``
    unless ``chunk_id_fn`` is given; Beam's default is a random uuid4, which a retried bundle
    or a rerun changes) and metadata as :func:`beam_chunk` makes it.

    ``split``: chunkline's split options (the config's ``split:`` section); ``mode: semantic``
    is not offered here (it needs the embedding model inside the splitter: use
    :class:`chunkline.transforms.chunk.ChunkTexts`). ``model``: the embedding model the chunks are
    made for: its tokenizer counts and its max input bounds the budget when ``split`` leaves
    them None (None: chunkline's default, all-MiniLM-L6-v2); nothing is embedded here.
    ``text_field``, ``id_field`` (absent: the text's digest, ``chunkline.readers.elements
    .text_id``), ``uri_field``: the keys of a dict element; ``metadata_fields``: its keys
    copied into each chunk's metadata (as ``LangChainChunker``'s). ``content``: see
    :func:`beam_chunk`.

    An element that makes no document (no text, a text that is not a string or is blank, a bad
    id) is counted (``chunk_texts/elements_rejected``) and logged with its reason, and
    makes no chunk; for those elements as records, use ``ChunkTexts(...).with_rejected()``.
    Artifacts: none. ``MLTransform`` stores this provider (jsonpickle) at its
    ``write_artifact_location``, and a ``read_artifact_location`` pipeline splits the same way.
    """

    def __init__(self, split: SplitOptions = SplitOptions(), *,
                 model: EmbedOptions | None = None, text_field: str = "text",
                 id_field: str | None = "id", uri_field: str | None = "uri",
                 metadata_fields: Sequence[str] = (),
                 content: Literal["text", "embed_text"] = "text",
                 chunk_id_fn: ChunkIdFn | None = None) -> None:
        super().__init__(chunk_id_fn)
        if split.mode == "semantic":
            raise ValueError("ChunklineChunker splits without the embedding model: split.mode "
                             "semantic is ChunkTexts' (transforms/chunk.py)")
        if content not in ("text", "embed_text"):
            raise ValueError(f"content must be 'text' or 'embed_text', got {content!r}")
        self.split = split
        self.model = model
        self.fields = ElementFields(text=text_field, id=id_field, uri=uri_field, metadata=None,
                                    metadata_fields=tuple(metadata_fields))
        self.content = content

    def get_splitter_transform(self) -> beam.PTransform:
        return "Chunkline split" >> _SplitToBeamChunks(
            ChunkTexts(self.split, fields=self.fields, budget_model=self.model), self.content)
