"""The plain length functions: Python characters and whitespace-separated words."""

from __future__ import annotations

import re

import numpy as np

from chunkline.sizers.base import AdditiveMeasure, Measure, Tokenizer


class CharsTokenizer(Tokenizer):
    """Python characters (code points): ``len(text)``."""

    spec = "chars"

    @classmethod
    def from_spec(cls, spec: str) -> "CharsTokenizer":
        if spec != cls.spec:
            raise ValueError(f"not a characters tokenizer spec: {spec!r}")
        return cls()

    def count(self, text: str) -> int:
        return len(text)

    def token_starts(self, text: str) -> np.ndarray:
        return np.arange(len(text), dtype=np.int64)

    def measure(self, text: str) -> Measure:
        return AdditiveMeasure(text, self, whitespace=None)


_WORD = re.compile(r"\S+")


class WordsTokenizer(Tokenizer):
    """Whitespace-separated words: ``len(text.split())``, the simplest length function."""

    spec = "words"

    @classmethod
    def from_spec(cls, spec: str) -> "WordsTokenizer":
        if spec != cls.spec:
            raise ValueError(f"not a words tokenizer spec: {spec!r}")
        return cls()

    def count(self, text: str) -> int:
        return len(text.split())

    def token_starts(self, text: str) -> np.ndarray:
        return np.fromiter((m.start() for m in _WORD.finditer(text)), dtype=np.int64)

    def measure(self, text: str) -> Measure:
        return AdditiveMeasure(text, self, whitespace=PYTHON_WHITESPACE)


# Every character str.split() splits on (tests check this against str.isspace): a cut beside
# one never splits a word.
PYTHON_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
