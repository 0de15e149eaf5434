"""The splitter's options as one dataclass: what the YAML config's ``split:`` section is
generated from (``pipeline/config.py``) and what a Beam user hands the ``ChunkTexts`` composite
(``transforms/chunk.py``) or the ``MLTransform`` chunker (``transforms/mltransform.py``), so the
defaults, bounds and help live once, here (``chunkline.options``).

Two values are derived when left None, from the embedding model the chunks are made for:
the tokenizer (the model's own) and the budget (the model's max input, less its special tokens
and ``heading_reserve``). :func:`split_budget` is that rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, NamedTuple

from annotated_types import Ge

from chunkline.options import check_fields, help_text
from chunkline.splitting.core import check_budget
from chunkline.splitting.semantic import SemanticOptions
from chunkline.splitting.text import MERGE_SECTIONS_BELOW

# A derived budget under this many tokens is refused: the heading reserve (or a context
# header's) would leave chunks too small to carry meaning.
MIN_DERIVED_BUDGET = 8


@dataclass(frozen=True)
class SplitOptions:
    """How documents are cut into chunks (``chunkline.split``, ``split_code``,
    ``semantic_split``). The fields, their order, defaults and help are the config's
    ``split:`` section."""

    mode: Literal["recursive", "semantic"] = field(default="recursive", metadata=help_text(
        "semantic: cut at topic shifts found with the embedder, never over the budget (needs "
        "embed)."))
    semantic: SemanticOptions = field(default=SemanticOptions(), metadata=help_text(
        "Semantic mode: where topic shifts are cut."))
    code: bool = field(default=True, metadata=help_text(
        "Split source files (.py, .js, .ts, .go, .java, .rs) by syntax tree; the heading path "
        "is the enclosing definitions."))
    max_tokens: Annotated[int, Ge(1)] | None = field(default=None, metadata=help_text(
        "Chunk budget. None: the embedder's max input minus its special tokens minus "
        "heading_reserve."))
    overlap: Annotated[int, Ge(0)] = field(default=0, metadata=help_text(
        "Tokens re-read from the previous chunk."))
    max_chars: Annotated[int, Ge(1)] | None = field(default=None, metadata=help_text(
        "No chunk's text is longer, whatever the tokenizer counts (a WordPiece [UNK] covers any "
        "word over 100 characters). None: 32 x the token budget + 1024 "
        "(chunkline.splitting.core.default_max_chars)."))
    markdown: bool = field(default=True, metadata=help_text(
        "Read Markdown headings (paths, section cuts)."))
    merge_sections_below: Annotated[int, Ge(1)] | None = field(
        default=MERGE_SECTIONS_BELOW, metadata=help_text(
            "A Markdown section under this many tokens (a heading right before its first "
            "sub-heading) shares a chunk with its neighbours, labelled with their common heading "
            "path, never over the budget. null: every section on its own."))
    tokenizer: str | None = field(default=None, metadata=help_text(
        "Tokenizer spec. None: the embedder's own tokenizer."))
    heading_reserve: Annotated[int, Ge(0)] = field(default=32, metadata=help_text(
        "Tokens reserved for the heading path prepended for embedding."))

    def __post_init__(self) -> None:
        check_fields(self)
        if not isinstance(self.semantic, SemanticOptions):
            raise ValueError("SplitOptions.semantic must be SemanticOptions")
        if self.max_tokens is not None:  # a derived budget is checked where it is derived
            check_budget(self.max_tokens, self.overlap)


class SplitBudget(NamedTuple):
    """What the splitter counts with: a tokenizer spec (``chunkline.get_tokenizer``) and the
    chunk budget in its tokens."""

    tokenizer_spec: str
    max_tokens: int


def split_budget(options: SplitOptions, model: str, max_seq_length: int, special_tokens: int,
                 reserve: int | None = None, *, embedded: bool = True) -> SplitBudget:
    """The tokenizer and budget ``options`` split with for chunks embedded by ``model`` (its
    name or directory, ``max_seq_length`` and special-token count: ``chunkline.embedder
    .model_info``). ``reserve``: tokens kept free in the model's input for what is prepended to
    each chunk (None: ``options.heading_reserve``; the pipeline adds a context header's, and
    late chunking none). ValueError when the budget is too small, the overlap not below it, or
    (``embedded``: the chunks are embedded) a given budget and the reserve overrun the model's
    input, which would truncate every full chunk.

    >>> split_budget(SplitOptions(), "all-MiniLM-L6-v2", 256, 2)
    SplitBudget(tokenizer_spec='hf:all-MiniLM-L6-v2', max_tokens=222)
    """
    reserve = options.heading_reserve if reserve is None else reserve
    tokenizer_spec = options.tokenizer or f"hf:{model}"
    max_tokens = options.max_tokens or (max_seq_length - special_tokens - reserve)
    if options.max_tokens is None and max_tokens < MIN_DERIVED_BUDGET:
        raise ValueError(
            f"derived chunk budget is {max_tokens} tokens (max_seq_length {max_seq_length} - "
            f"{special_tokens} special - {reserve} reserved for the heading path and context "
            f"header); lower split.heading_reserve or context.max_header_tokens")
    if options.max_tokens is not None and embedded and \
            options.max_tokens + reserve > max_seq_length - special_tokens:
        raise ValueError(
            f"split.max_tokens {options.max_tokens} + {reserve} reserved for the heading path "
            f"and context header exceeds the model's input ({max_seq_length} - {special_tokens} "
            f"special tokens): embedded text would be truncated")
    try:
        check_budget(max_tokens, options.overlap)
    except ValueError as exc:
        raise ValueError(f"split: {exc} (the budget derived from the model)") from None
    return SplitBudget(tokenizer_spec, max_tokens)
