"""Fitting a model's answer to the header's token reserve, so that the embedded text (heading
prefix + header + chunk) never runs past the embedder's input limit.

    header = fit_header(answer, get_tokenizer("words"), reserve=100)
"""

from __future__ import annotations

from chunkline.sizers import Tokenizer

# What ChunkRecord.embed_text() puts between the header and what follows it; the header's token
# reserve pays for it too.
HEADER_SEPARATOR = "\n\n"


def normalize_header(text: str) -> str:
    """One line: whitespace runs (newlines included) collapsed to a space, ends stripped."""
    return " ".join(text.split())


def fit_header(text: str, tokenizer: Tokenizer, reserve: int) -> str:
    """The longest start of ``normalize_header(text)`` such that
    ``tokenizer.count(header + "\\n\\n") <= reserve``, ended at a sentence or word boundary where
    one is near; "" when nothing fits. The split budget leaves ``reserve`` tokens free, so the
    embedded text (heading prefix + header + chunk) stays within the model's input.

    >>> from chunkline.sizers import get_tokenizer
    >>> fit_header("One two three. Four five six seven.", get_tokenizer("words"), 5)
    'One two three.'
    """
    text = normalize_header(text)
    if not text or reserve <= 0:
        return ""

    def fits(candidate: str) -> bool:
        return tokenizer.count(candidate + HEADER_SEPARATOR) <= reserve

    if fits(text):
        return text
    starts = [int(s) for s in tokenizer.token_starts(text)]
    cuts = sorted({s for s in starts if 0 < s < len(text)})
    # Largest token boundary whose prefix fits; a prefix's count grows with its length.
    lo, hi = 0, len(cuts)  # candidates cuts[0:hi]; answer index in [0, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(text[: cuts[mid - 1]].rstrip()):
            lo = mid
        else:
            hi = mid - 1
    kept = text[: cuts[lo - 1]].rstrip() if lo else ""
    if kept and not text[len(kept)].isspace():
        # Cut inside a word: end at the previous word.
        space = kept.rfind(" ")
        if space > 0:
            kept = kept[:space]
    # A finished sentence reads better than a longer fragment, if it keeps at least half.
    sentence = max(kept.rfind(". "), kept.rfind("! "), kept.rfind("? "), kept.rfind("; "))
    if sentence >= len(kept) // 2:
        kept = kept[: sentence + 1]
    kept = kept.rstrip()
    # Counts are not strictly monotone in every tokenizer: check, and shorten by words if needed.
    while kept and not fits(kept):
        kept = kept[: max(kept.rfind(" "), 0)].rstrip()
    return kept
