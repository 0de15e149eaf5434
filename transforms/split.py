"""Split: kept documents -> each document with its chunk records (``DocumentChunks``), through
``chunkline.split`` (prose, Markdown and its tables) or ``chunkline.split_code`` (source files,
chosen by the uri's extension). The chunks travel with their document until :class:`FlattenChunks`
(before reuse, embed and write), so no stage between has to join them again by doc_id."""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from chunkline import get_tokenizer, language_for, split, split_code
from chunkline.embedder import EmbedOptions
from chunkline.metadata import metadata_json
from chunkline.pdf import outline_headings
from chunkline.readers.formats import PAGED_MARKDOWN_FORMATS
from chunkline.records import ChunkRecord, Document, DocumentChunks, chunk_id
from chunkline.splitting.core import Chunk
from chunkline.splitting.semantic import Embed, SemanticOptions, model_embed, semantic_split
from chunkline.splitting.text import heading_prefix
from chunkline.transforms.coders import DocumentChunksCoder  # noqa: F401 - registered: how elements shuffle
from chunkline.transforms.model_cache import local_model_dir, local_tokenizer_spec
from chunkline.transforms.progress import progress_counter

log = logging.getLogger("chunkline.split")


class _SplitDocument(beam.DoFn):
    def __init__(self, tokenizer_spec: str, max_tokens: int, overlap: int, markdown: bool,
                 prefix_tokenizer_spec: str, heading_reserve: int,
                 code: bool = True,
                 semantic: SemanticOptions | None = None,
                 semantic_model: EmbedOptions | None = None,
                 max_chars: int | None = None,
                 chunk_metadata: tuple[str, ...] | None = None,
                 merge_sections_below: int | None = None) -> None:
        self.tokenizer_spec = tokenizer_spec
        self.merge_sections_below = merge_sections_below
        self.chunk_metadata = chunk_metadata
        self.max_chars = max_chars
        self.max_tokens = max_tokens
        self.overlap = overlap
        self.markdown = markdown
        self.prefix_tokenizer_spec = prefix_tokenizer_spec
        self.heading_reserve = heading_reserve
        self.code = code
        self.semantic = semantic
        self.semantic_model = semantic_model
        if semantic is not None and semantic_model is None:
            raise ValueError("semantic splitting needs the embedding model's options")
        self.documents = progress_counter("split", "documents")
        self.chunks = progress_counter("split", "chunks")
        self.tokens = Metrics.counter("split", "tokens")

    def setup(self) -> None:
        self.tokenizer = get_tokenizer(local_tokenizer_spec(self.tokenizer_spec))
        self.prefix_tokenizer = (
            self.tokenizer if self.prefix_tokenizer_spec == self.tokenizer_spec
            else get_tokenizer(local_tokenizer_spec(self.prefix_tokenizer_spec))
        )
        # The semantic options with the embedding they cut by; None: cut by structure.
        self.semantic_embed: tuple[SemanticOptions, Embed] | None = None
        if self.semantic is not None and self.semantic_model is not None:  # both, or neither
            from chunkline.embedder import load_model

            options = dataclasses.replace(self.semantic_model,
                                          model=local_model_dir(self.semantic_model.model))
            self.semantic_embed = self.semantic, model_embed(load_model(options), options)

    def _split(self, doc: Document) -> list[Chunk]:
        language = language_for(doc.uri)
        if language is not None and self.code:
            # Source code: cut between syntax nodes; headings are the enclosing definitions.
            return split_code(doc.text, language, self.max_tokens, self.overlap, self.tokenizer,
                              max_chars=self.max_chars)
        # A source file read as Markdown would take its `# comment` lines for headings; a
        # PDF's text is not Markdown either: its headings are its outline. A deck's slides
        # are Markdown with pages (``PAGED_MARKDOWN_FORMATS``).
        markdown = self.markdown and language is None and (
            not doc.page_starts or doc.format in PAGED_MARKDOWN_FORMATS)
        if self.semantic_embed is not None:
            semantic, embed = self.semantic_embed
            return semantic_split(doc.text, self.max_tokens, self.tokenizer, embed,
                                  semantic, markdown, max_chars=self.max_chars)
        outline = (outline_headings(doc.text, doc.page_starts, doc.outline)
                   if doc.outline else None)
        return split(doc.text, self.max_tokens, self.overlap, self.tokenizer, markdown,
                     max_chars=self.max_chars, headings=outline,
                     merge_sections_below=self.merge_sections_below
                     if markdown or outline is not None else None)

    def process(self, doc: Document) -> Iterator[DocumentChunks]:
        pieces = self._split(doc)
        metadata = metadata_json(doc.chunk_metadata(self.chunk_metadata), self.chunk_metadata)
        prefixes: dict[tuple[str, ...], str] = {}
        records = []
        for index, piece in enumerate(pieces):
            prefix = prefixes.get(piece.headings)
            if prefix is None:
                prefix = heading_prefix(piece.headings, self.prefix_tokenizer, self.heading_reserve)
                prefixes[piece.headings] = prefix
            self.tokens.inc(piece.tokens)
            page_start, page_end = doc.page_range(piece.start, piece.end)
            records.append(ChunkRecord(
                doc_id=doc.doc_id,
                chunk_id=chunk_id(doc.doc_id, piece.start, piece.end),
                chunk_index=index,
                start=piece.start,
                end=piece.end,
                headings=piece.headings,
                text=doc.text[piece.start : piece.end],
                tokens=piece.tokens,
                prefix=prefix,
                table_header=piece.table_header,
                metadata=metadata,
                page_start=page_start,
                page_end=page_end,
                principals=doc.principals,  # who may read the document may read each chunk
            ))
        yield DocumentChunks(doc, tuple(records))
        self.documents.inc()
        self.chunks.inc(len(pieces))


class SplitDocuments(beam.PTransform):
    """``PCollection[Document]`` -> ``PCollection[DocumentChunks]``: one element per document,
    the document with its chunk records in chunk order (none for a whitespace-only document;
    :class:`FlattenChunks` gives the records). Each record carries the
    heading-path prefix the embedder will read, cut to ``heading_reserve`` tokens, and the
    repeated header of a table split between rows (``table_header``, counted in the budget).
    With ``code`` (the default) a document whose uri names a source file (``.py``, ``.ts``,
    ``.go``, ... see ``chunkline.splitting.code.EXTENSIONS``) is split by its syntax tree, its headings
    the enclosing class and function names; without, it is split as plain text. With
    ``semantic`` (and the embedding model's options) prose is cut at topic shifts found with
    the model (``chunkline.splitting.semantic``), never over ``max_tokens``; overlap does not apply.
    No chunk is longer than ``max_chars`` characters (None: the splitter's default bound).
    Every record carries its document's metadata as JSON text (only the ``chunk_metadata``
    keys when given) and, for a paged document (PDF), the pages it spans; a PDF's outline gives
    the heading paths. With access control on, every record carries its document's
    ``principals``."""

    def __init__(self, tokenizer_spec: str, max_tokens: int, overlap: int = 0,
                 markdown: bool = True, prefix_tokenizer_spec: str | None = None,
                 heading_reserve: int = 0, code: bool = True,
                 semantic: SemanticOptions | None = None,
                 semantic_model: EmbedOptions | None = None,
                 max_chars: int | None = None,
                 chunk_metadata: tuple[str, ...] | None = None,
                 merge_sections_below: int | None = None) -> None:
        super().__init__()
        self.fn = _SplitDocument(
            tokenizer_spec, max_tokens, overlap, markdown,
            prefix_tokenizer_spec or tokenizer_spec, heading_reserve, code=code,
            semantic=semantic, semantic_model=semantic_model, max_chars=max_chars,
            chunk_metadata=chunk_metadata, merge_sections_below=merge_sections_below,
        )

    def expand(self, documents: beam.PCollection[Document]) -> beam.PCollection[DocumentChunks]:
        return documents | "SplitDocument" >> beam.ParDo(self.fn).with_output_types(DocumentChunks)


def _chunks_of(element: DocumentChunks) -> tuple[ChunkRecord, ...]:
    return element.chunks


class FlattenChunks(beam.PTransform):
    """``PCollection[DocumentChunks]`` -> ``PCollection[ChunkRecord]``: every chunk of every
    document, the document left behind. Done once, where the stages that need a chunk's whole
    document are behind it (before reuse, embed and write)."""

    def expand(self, elements: beam.PCollection[DocumentChunks]) -> beam.PCollection[ChunkRecord]:
        return elements | "Chunks" >> beam.FlatMap(_chunks_of).with_output_types(ChunkRecord)
