"""Golden snapshots: real Markdown documents x budgets x tokenizers.

A snapshot records every chunk's span, heading path and token count, with the first words of
its text for a human reading the diff. A change in the splitter's behaviour shows up here as a
reviewable diff; regenerate deliberately with ``UPDATE_GOLDEN=1 pytest tests/splitting/test_golden.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chunkline import split
from tests.helpers import tokenizer

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
DOCS = sorted((GOLDEN / "docs").glob("*.md"))
DOCS = [d for d in DOCS if d.name != "SOURCES.md"]
CASES = [
    ("hf:all-MiniLM-L6-v2", 256, 0),
    ("hf:all-MiniLM-L6-v2", 128, 16),
    ("tiktoken:cl100k_base", 512, 64),
    ("tiktoken:o200k_base", 200, 0),
    ("words", 60, 20),
]


def snapshot(text: str, spec: str, max_tokens: int, overlap: int) -> list[dict]:
    chunks = split(text, max_tokens, overlap, tokenizer(spec))
    return [
        {
            "start": c.start,
            "end": c.end,
            "headings": list(c.headings),
            "tokens": c.tokens,
            "oversized": c.oversized,
            "head": " ".join(text[c.start : c.end].split()[:8]),
        }
        for c in chunks
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.stem)
@pytest.mark.parametrize(("spec", "max_tokens", "overlap"), CASES)
def test_golden_snapshot(doc: Path, spec: str, max_tokens: int, overlap: int) -> None:
    text = doc.read_text(encoding="utf-8")
    name = f"{doc.stem}__{spec.replace(':', '-')}__{max_tokens}_{overlap}.jsonl"
    path = GOLDEN / "snapshots" / name
    got = snapshot(text, spec, max_tokens, overlap)
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in got), "utf-8")
    want = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert got == want
