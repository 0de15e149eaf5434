"""chunkline: token-budgeted splitting with exact offsets and heading paths.

The pure library under the Beam pipeline; it never imports apache_beam.

>>> from chunkline import split, get_tokenizer
>>> chunks = split("# Guide\\nSome text.", max_tokens=256, tokenizer=get_tokenizer("words"))
>>> chunks[0].headings
('Guide',)
"""

from chunkline.markdown import Heading, Section, headings, sections
from chunkline.splitter import SEPARATORS, Chunk, split
from chunkline.tokenizers import Tokenizer, TokenizerNotAvailable, get_tokenizer

__all__ = [
    "SEPARATORS",
    "Chunk",
    "Heading",
    "Section",
    "Tokenizer",
    "TokenizerNotAvailable",
    "get_tokenizer",
    "headings",
    "sections",
    "split",
]
