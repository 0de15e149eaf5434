"""Token counters ("sizers") the splitter budgets against, all offline.

A tokenizer here answers one question exactly: how many tokens is this string (no special
tokens). Where the real tokenizer allows it, it also hands out a
:class:`~chunkline.sizers.base.Measure` for one document, which tokenizes the document once and
derives every count the splitter needs from that pass (see ``sizers/base.py``). How long a
piece is stays apart from where text may be cut (text-splitter's ``chunk_size.rs`` vs
``splitter/*.rs``). One module per family: ``simple`` (words, chars), ``tiktoken``, ``hf``.

Specs accepted by :func:`get_tokenizer`::

    words                       whitespace-separated words (str.split(), a plain length function)
    chars                       Python characters (code points)
    tiktoken:cl100k_base        an OpenAI BPE by name (cl100k_base, o200k_base, ...)
    tiktoken:/path/x.tiktoken   a BPE vocabulary file; the pre-token regex is taken from the
                                name it resembles (o200k in the name -> o200k's, else cl100k's)
    hf:all-MiniLM-L6-v2         a Hugging Face tokenizer: a packaged model name, a model
                                directory, or a tokenizer.json path
"""

from __future__ import annotations

from chunkline.sizers.base import Measure, Tokenizer, TokenizerNotAvailable
from chunkline.sizers.hf import PACKAGED_HF_MODELS, HFTokenizer, hf_model_dir, model_fingerprint
from chunkline.sizers.simple import CharsTokenizer, WordsTokenizer
from chunkline.sizers.tiktoken import TiktokenTokenizer

TOKENIZER_FORMS = (
    '"words"',
    '"chars"',
    '"tiktoken:cl100k_base"',
    '"tiktoken:o200k_base"',
    '"tiktoken:<path to a .tiktoken file>"',
    '"hf:<model dir, tokenizer.json, or packaged model name such as all-MiniLM-L6-v2>"',
)


def get_tokenizer(spec: str) -> Tokenizer:
    """A tokenizer from its spec; see the module docstring for the forms.

    >>> get_tokenizer("words").count("two words")
    2
    """
    if not isinstance(spec, str):
        raise TypeError(f"tokenizer spec must be a str, got {type(spec).__name__}")
    if spec == "words":
        return WordsTokenizer()
    if spec == "chars":
        return CharsTokenizer()
    kind, _, arg = spec.partition(":")
    if kind == "tiktoken" and arg:
        return TiktokenTokenizer.from_spec(spec)
    if kind == "hf" and arg:
        return HFTokenizer.from_spec(spec)
    raise ValueError(f"unknown tokenizer spec {spec!r}; valid forms: {', '.join(TOKENIZER_FORMS)}")


__all__ = [
    "PACKAGED_HF_MODELS",
    "TOKENIZER_FORMS",
    "CharsTokenizer",
    "HFTokenizer",
    "Measure",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerNotAvailable",
    "WordsTokenizer",
    "get_tokenizer",
    "hf_model_dir",
    "model_fingerprint",
]
