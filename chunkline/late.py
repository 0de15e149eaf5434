"""Late chunking: chunk vectors pooled from one contextual pass over the whole document.

Günther et al., "Late Chunking: Contextual Chunk Embeddings Using Long-Context Embedding
Models" (arXiv 2409.04669, 2024). Instead of embedding each chunk
alone, the transformer reads the document, and each chunk's vector is the mean of the token
vectors (last hidden state) whose characters overlap the chunk's span, L2-normalized. A token
thus carries what the rest of the document says about it: "it" in a chunk knows what "it" is.

Documents longer than the model's input are read in overlapping windows of ``window`` tokens
(special tokens added around each), ``stride`` tokens apart. A token read by several windows
takes its vector from the one where it has the most context on its thinner side, a document
edge counting as full context: BERT's "max context" rule for SQuAD's sliding windows (Devlin et
al., 2019, ``run_squad.py``), rather than an average, which would blend a vector computed with
little context into one computed with plenty. Every token then has about
``(window - stride) / 2`` tokens of context or more on each side (a quarter window at the default
half-window stride), except near the document's edges where there is no more to read.
When one window holds the whole document the result is exactly the single-pass one.

Chunks with no token of their own (whitespace only) take the vector of the nearest token by
characters (the earlier one on a tie), so every row is a unit vector. A document with no token
at all gives every chunk the pooled vector of the special tokens alone, which is what the model
makes of an empty text.

The model's pooling must be mean pooling with nothing after it but normalization
(all-MiniLM-L6-v2 is Transformer -> mean Pooling -> Normalize); a Dense head or CLS pooling
would make pooled token means a different space from the model's sentence vectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from chunkline.options import check_fields, help_text
from annotated_types import Ge
from typing import Annotated
from typing import TYPE_CHECKING, Iterator, NamedTuple, Sequence

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer as RustTokenizer


@dataclass(frozen=True)
class LateOptions:
    """How the document is read for late chunking."""

    window: Annotated[int, Ge(8)] | None = field(default=None, metadata=help_text(
        "Content tokens per forward pass (special tokens come on top). null: the model's "
        "max_seq_length minus its special tokens (254 for all-MiniLM-L6-v2)."))
    stride: Annotated[int, Ge(1)] | None = field(default=None, metadata=help_text(
        "Tokens between the starts of consecutive windows, 1..window. null: half a window."))
    batch_size: Annotated[int, Ge(1)] = field(default=8, metadata=help_text(
        "Windows per forward pass."))

    def __post_init__(self) -> None:
        check_fields(self)
        if self.window is not None and self.stride is not None and self.stride > self.window:
            raise ValueError(
                f"LateOptions.stride ({self.stride}) may not exceed the window ({self.window}): "
                f"tokens between windows would never be read"
            )


@dataclass(frozen=True)
class TokenVectors:
    """Contextual vectors of a document's tokens.

    offsets: ``[n, 2]`` str offsets (start, end-exclusive) of each token in the text.
    vectors: ``[n, dim]`` float32 last hidden states, each from its most central window.
    empty: for a text with no token (n == 0), ``[dim]`` float32, the mean of the special
        tokens' vectors: what mean pooling makes of an empty text; None otherwise.
    windows: forward-pass windows read.
    tokens_read: tokens the model read over all windows, special tokens included.
    """

    offsets: np.ndarray
    vectors: np.ndarray
    empty: np.ndarray | None
    windows: int
    tokens_read: int


class SpanVectors(NamedTuple):
    """Late-chunked vectors (float32 ``[len(spans), dim]``, unit norm), the windows read, and the
    tokens the model read over all windows, special tokens included."""

    vectors: np.ndarray
    windows: int
    tokens_read: int


class LateChunker:
    """Late-chunked vectors with one loaded sentence-transformers model; build once (it copies the
    model's tokenizer) and call :meth:`vectors` per document."""

    def __init__(self, model: "SentenceTransformer", options: LateOptions = LateOptions()) -> None:
        _check_pipeline(model)
        self.model = model
        self.transformer = model[0].auto_model
        self.tokenizer = _offsets_tokenizer(model)
        self.prefix, self.suffix, self.pad_id = _special_ids(self.tokenizer, model)
        specials = len(self.prefix) + len(self.suffix)
        if options.window is not None:
            window = options.window
        elif model.max_seq_length is not None:
            window = model.max_seq_length - specials
        else:
            raise ValueError("late chunking: the model sets no max_seq_length; set the window")
        positions = getattr(self.transformer.config, "max_position_embeddings", None)
        if window < 1 or (positions is not None and window + specials > positions):
            raise ValueError(
                f"late chunking window {window} (+{specials} special tokens) does not fit the "
                f"model's {positions} positions"
            )
        self.window = window
        self.stride = options.stride if options.stride is not None else max(1, window // 2)
        if self.stride > self.window:
            raise ValueError(f"stride {self.stride} exceeds the window {self.window}")
        self.batch_size = options.batch_size
        self.accepts_token_types = "token_type_ids" in _forward_params(self.transformer)
        self.dim = int(self.transformer.config.hidden_size)

    def token_vectors(self, text: str) -> TokenVectors:
        """Every token's contextual vector, materialized (``[n, dim]``; for inspection and tests:
        :meth:`vectors` pools without holding them all)."""
        read = self._read(text)
        blocks = [block for _, block in read.blocks]
        vectors = (np.concatenate(blocks).astype(np.float32) if blocks
                   else np.zeros((0, self.dim), dtype=np.float32))
        return TokenVectors(read.offsets, vectors, read.empty(), read.windows, read.tokens_read)

    def vectors(self, text: str, spans: Sequence[tuple[int, int]]) -> np.ndarray:
        """float32 ``[len(spans), dim]``: row i the L2-normalized mean of the contextual vectors of
        the tokens whose characters overlap ``text[spans[i][0]:spans[i][1]]`` (see the module
        docstring for spans with no token).

        Memory stays ``O(window * batch_size + len(spans)) * dim`` whatever the document's length:
        windows are read in token order, each token's vector is added to a running sum once its
        window is read, and a span's sum is the difference of the running sums at its ends.
        """
        return self.read_spans(text, spans).vectors

    def read_spans(self, text: str, spans: Sequence[tuple[int, int]]) -> "SpanVectors":
        """:meth:`vectors`, with what reading the document cost (for the embed stage's
        counters)."""
        read = self._read(text)
        empty = read.empty() if len(read.offsets) == 0 else None
        if empty is not None:  # a text without a token
            rows = np.tile(empty, (len(spans), 1)).astype(np.float32)
            return SpanVectors(_normalized(rows), read.windows, read.tokens_read)
        lo, hi = token_runs(read.offsets, spans)
        # Running sums (float64) are needed only where a run starts or ends.
        wanted = np.unique(np.concatenate([lo, hi]))
        at = np.zeros((len(wanted), self.dim), dtype=np.float64)
        total = np.zeros(self.dim, dtype=np.float64)
        k = 0
        for first, block in read.blocks:
            last = first + len(block)
            sums = np.cumsum(block, axis=0, dtype=np.float64)
            while k < len(wanted) and wanted[k] <= last:
                index = wanted[k] - first  # tokens first..wanted[k]-1 are summed
                at[k] = total + (sums[index - 1] if index > 0 else 0.0)
                k += 1
            total = total + sums[-1]
        position = {int(w): j for j, w in enumerate(wanted)}
        rows = np.empty((len(spans), self.dim), dtype=np.float64)
        for row, (a, b) in enumerate(zip(lo, hi)):
            rows[row] = (at[position[int(b)]] - at[position[int(a)]]) / (b - a)
        return SpanVectors(_normalized(rows.astype(np.float32)), read.windows, read.tokens_read)

    def _read(self, text: str) -> "_Reading":
        """Tokenize ``text`` once (no truncation, padding or special tokens) and plan the windows;
        the returned reading runs the model lazily, block by block, in token order."""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        ids = np.asarray(encoding.ids, dtype=np.int64)
        offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        starts = window_starts(len(ids), self.window, self.stride)
        owner = central_window(len(ids), starts, self.window)
        # Each window owns one contiguous run, later windows later runs: what lets the blocks
        # come in token order (checked, not assumed: tests hold it for many shapes).
        if np.any(np.diff(owner) < 0):
            raise AssertionError(f"window ownership out of order for {len(ids)} tokens, {starts}")
        specials = len(self.prefix) + len(self.suffix)
        tokens_read = sum(min(self.window, len(ids) - s) + specials for s in starts)
        return _Reading(self, ids, offsets, starts, owner, tokens_read)

    def _forward(self, windows: list[np.ndarray]) -> list[np.ndarray]:
        """Last hidden states (float32, ``[len + specials, dim]``) of each window with its special
        tokens, as one batch padded to the longest (padding is masked out)."""
        import torch

        device = next(self.transformer.parameters()).device
        batch = [np.concatenate([self.prefix, w, self.suffix]) for w in windows]
        width = max(len(b) for b in batch)
        input_ids = np.full((len(batch), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, b in enumerate(batch):
            input_ids[row, : len(b)] = b
            mask[row, : len(b)] = 1
        inputs = {"input_ids": torch.from_numpy(input_ids).to(device),
                  "attention_mask": torch.from_numpy(mask).to(device)}
        if self.accepts_token_types:
            inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        with torch.inference_mode():
            hidden = self.transformer(**inputs).last_hidden_state
        hidden = hidden.float().cpu().numpy()
        return [hidden[row, : len(b)] for row, b in enumerate(batch)]


@dataclass(frozen=True)
class _Reading:
    """One document tokenized, with its windows planned; ``blocks`` runs the model."""

    chunker: LateChunker
    ids: np.ndarray
    offsets: np.ndarray
    starts: list[int]
    owner: np.ndarray
    tokens_read: int

    @property
    def windows(self) -> int:
        return len(self.starts)

    @property
    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first token index, ``[m, dim]`` vectors) of the tokens each window owns, in token
        order, ``batch_size`` windows per forward pass."""
        chunker = self.chunker
        head = len(chunker.prefix)
        size = chunker.batch_size
        for first in range(0, len(self.starts), size):
            starts = self.starts[first : first + size]
            hidden = chunker._forward([self.ids[s : s + chunker.window] for s in starts])
            for w, (start, states) in enumerate(zip(starts, hidden), start=first):
                mine = np.flatnonzero(self.owner == w)
                if mine.size:
                    yield int(mine[0]), states[head + mine - start]

    def empty(self) -> np.ndarray | None:
        """For a text with no token, the mean of the one window's special-token vectors."""
        if len(self.ids):
            return None
        return self.chunker._forward([self.ids])[0].mean(axis=0).astype(np.float32)


def late_chunk_vectors(
    model: "SentenceTransformer",
    text: str,
    spans: Sequence[tuple[int, int]],
    options: LateOptions = LateOptions(),
) -> np.ndarray:
    """float32 ``[len(spans), dim]`` late-chunked vectors of ``spans`` (str offsets into ``text``),
    unit L2 norm. Builds a :class:`LateChunker` per call; hold one to embed many documents."""
    return LateChunker(model, options).vectors(text, spans)


def window_starts(n_tokens: int, window: int, stride: int) -> list[int]:
    """Token index where each window starts: every ``stride`` tokens, the last one moved back so
    it ends at the document's end (no short tail window). One window (at 0) when the document
    fits, also when it is empty.

    >>> window_starts(10, 4, 2)
    [0, 2, 4, 6]
    >>> window_starts(11, 4, 2)
    [0, 2, 4, 6, 7]
    """
    if n_tokens <= window:
        return [0]
    starts = list(range(0, n_tokens - window + 1, stride))
    if starts[-1] + window < n_tokens:
        starts.append(n_tokens - window)
    return starts


def central_window(n_tokens: int, starts: Sequence[int], window: int) -> np.ndarray:
    """For each token, the index of the window it takes its vector from: the one where its
    thinner side of context is widest, a document edge counting as unlimited context; the
    earlier window on a tie."""
    positions = np.arange(n_tokens)
    best = np.full(n_tokens, -1, dtype=np.int64)
    best_context = np.full(n_tokens, -1, dtype=np.int64)
    unlimited = np.iinfo(np.int64).max
    for w, start in enumerate(starts):
        end = min(start + window, n_tokens)
        inside = (positions >= start) & (positions < end)
        left = positions - start if start > 0 else np.full(n_tokens, unlimited)
        right = end - 1 - positions if end < n_tokens else np.full(n_tokens, unlimited)
        context = np.where(inside, np.minimum(left, right), -1)
        better = context > best_context
        best[better] = w
        best_context[better] = context[better]
    return best


def token_runs(
    offsets: np.ndarray, spans: Sequence[tuple[int, int]]
) -> tuple[np.ndarray, np.ndarray]:
    """Per span, the run ``[lo, hi)`` of tokens whose characters overlap it
    (``token.start < span.end and token.end > span.start``); a span that no token overlaps gets
    the nearest token by characters (the earlier on a tie). ``offsets`` ``[n >= 1, 2]`` are in
    text order, as a tokenizer's are, so a span's tokens are one contiguous run."""
    starts, ends = offsets[:, 0], offsets[:, 1]
    reach = np.maximum.accumulate(ends)
    bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    lo = np.searchsorted(reach, bounds[:, 0], side="right")  # first token ending after start
    hi = np.searchsorted(starts, bounds[:, 1], side="left")  # first token starting at/after end
    for row in np.flatnonzero(hi <= lo):
        gaps = np.maximum(np.maximum(starts - bounds[row, 1], bounds[row, 0] - ends), 0)
        nearest = int(np.argmin(gaps))
        lo[row], hi[row] = nearest, nearest + 1
    return lo, hi


def _normalized(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, np.float32(1e-12))


# ----------------------------------------------------------------------------------- model parts


def _check_pipeline(model: "SentenceTransformer") -> None:
    """Late chunking pools token vectors as the model's own mean pooling does; refuse a module
    pipeline where that would not match the model's sentence vectors."""
    kinds = [type(module).__name__ for module in model]
    if not kinds or kinds[0] != "Transformer" or not hasattr(model[0], "auto_model"):
        raise ValueError(f"late chunking needs a Transformer first module, got {kinds}")
    for module in list(model)[1:]:
        kind = type(module).__name__
        if kind == "Normalize":
            continue
        if kind == "Pooling":
            mode = getattr(module, "pooling_mode", None)
            mean = getattr(module, "pooling_mode_mean_tokens", None)
            if mode == "mean" or mode == ["mean"] or (mode is None and mean):
                continue
            raise ValueError(f"late chunking needs mean pooling, the model pools by {mode!r}")
        raise ValueError(f"late chunking cannot apply the model's {kind} module to pooled tokens")


def _offsets_tokenizer(model: "SentenceTransformer") -> "RustTokenizer":
    """A copy of the model's fast tokenizer with truncation and padding off: a tokenizer.json
    often sets both (all-MiniLM-L6-v2 truncates and pads at 128), and the model's own tokenizer
    object is left as the standard embedder uses it."""
    from tokenizers import Tokenizer as RustTokenizer

    backend = getattr(model.tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("late chunking needs a fast (Rust) tokenizer for character offsets")
    tokenizer = RustTokenizer.from_str(backend.to_str())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _special_ids(tokenizer: "RustTokenizer", model: "SentenceTransformer") -> tuple[
        np.ndarray, np.ndarray, int]:
    """Token ids the model expects before and after a text ([CLS] and [SEP] for BERT), read from
    the tokenizer's post-processor on a one-token text, and the padding id."""
    encoding = tokenizer.encode("a", add_special_tokens=True)
    mask = encoding.special_tokens_mask
    content = [i for i, special in enumerate(mask) if not special]
    if len(content) != 1:
        raise ValueError(f"cannot tell the special tokens of the model's tokenizer from {mask}")
    ids = np.asarray(encoding.ids, dtype=np.int64)
    pad = model.tokenizer.pad_token_id
    return ids[: content[0]], ids[content[0] + 1 :], int(pad if pad is not None else 0)


def _forward_params(transformer) -> set[str]:
    import inspect

    return set(inspect.signature(transformer.forward).parameters)
