"""Splitting text into token-budgeted chunks with exact offsets and heading paths.

``core`` is the engine every splitter shares (atoms, the separator descent, the packer);
``text`` splits prose and Markdown (:func:`split`), ``code`` source files by syntax tree
(:func:`split_code`), ``semantic`` at meaning shifts (:func:`semantic_split`); ``structure``
reads a Markdown document's headings and tables.
"""

from chunkline.splitting.code import LANGUAGES, language_for, split_code
from chunkline.splitting.core import Chunk, char_bound, default_max_chars
from chunkline.splitting.semantic import SemanticOptions, model_embed, semantic_split
from chunkline.splitting.structure import Heading, Section, Table, headings, sections, tables
from chunkline.splitting.text import SEPARATORS, heading_prefix, split

__all__ = [
    "LANGUAGES",
    "SEPARATORS",
    "Chunk",
    "Heading",
    "Section",
    "SemanticOptions",
    "Table",
    "char_bound",
    "default_max_chars",
    "heading_prefix",
    "headings",
    "language_for",
    "model_embed",
    "sections",
    "semantic_split",
    "split",
    "split_code",
    "tables",
]
