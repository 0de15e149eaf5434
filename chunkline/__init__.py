"""chunkline: token-budgeted splitting with exact offsets and heading paths.

The pure library under the Beam pipeline; it never imports apache_beam.

>>> from chunkline import split, get_tokenizer
>>> chunks = split("# Guide\\nSome text.", max_tokens=256, tokenizer=get_tokenizer("words"))
>>> chunks[0].headings
('Guide',)
"""

from chunkline.sizers import Tokenizer, TokenizerNotAvailable, get_tokenizer
from chunkline.splitting.code import LANGUAGES, language_for, split_code
from chunkline.splitting.core import Chunk, char_bound, default_max_chars
from chunkline.splitting.structure import Heading, Section, Table, headings, sections, tables
from chunkline.splitting.text import SEPARATORS, split



def __getattr__(name: str) -> str:
    """``chunkline.__version__``, read when asked (PEP 562): importlib.metadata costs more to
    import than the rest of ``import chunkline`` together (python -X importtime)."""
    if name != "__version__":
        raise AttributeError(f"module 'chunkline' has no attribute {name!r}")
    from importlib import metadata

    try:
        # The installed distribution's version: one home (pyproject.toml), read by every manifest.
        return metadata.version("chunkline")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"

__all__ = [
    "__version__",
    "LANGUAGES",
    "SEPARATORS",
    "Chunk",
    "Heading",
    "Section",
    "Table",
    "Tokenizer",
    "TokenizerNotAvailable",
    "char_bound",
    "default_max_chars",
    "get_tokenizer",
    "headings",
    "language_for",
    "sections",
    "split",
    "split_code",
    "tables",
]
