"""The counters the driver reads back to reconcile a run (``pipeline/run.py``): each
(namespace, name) has its home here, so a stage and the driver cannot drift apart on a string."""

from __future__ import annotations

from typing import NamedTuple


class Counter(NamedTuple):
    namespace: str
    name: str


READ_DOCUMENTS = Counter("read", "documents")
READ_REJECTED = Counter("read", "rejected")
READ_EXCLUDED = Counter("read", "excluded")  # the output root met under the input: not input
CHUNKS_EMBEDDED = Counter("chunkline.embed", "chunks_embedded")
TOKENS_EMBEDDED = Counter("chunkline.embed", "tokens_embedded")
# Positions the model computed: real tokens plus each pass's padding.
TOKENS_PADDED = Counter("chunkline.embed", "tokens_padded")
CHUNKS_REUSED = Counter("reindex", "chunks_reused")
REUSE_REJECTED = Counter("reindex", "reuse_rejected")  # stored vectors that failed their check
