"""The counters the driver reads back to reconcile a run (``pipeline/run.py``): each
(namespace, name) has its home here, so a stage and the driver cannot drift apart on a string."""

from __future__ import annotations

from typing import Any, NamedTuple


class Counter(NamedTuple):
    namespace: str
    name: str


READ_DOCUMENTS = Counter("read", "documents")
READ_REJECTED = Counter("read", "rejected")
READ_EXCLUDED = Counter("read", "excluded")
READ_SLICES = Counter("read", "slices")  # pieces big record dumps were cut into  # the output root met under the input: not input
# Documents read as the previous run's state row holds them (same id, same input, same place:
# chunkline.state): those a rerun need not pass through the corpus-wide stages once it can
# take their part from that row (docs/ARCHITECTURE.md, "A rerun whose work follows the change").
READ_SETTLED = Counter("read", "settled")
CHUNKS_EMBEDDED = Counter("chunkline.embed", "chunks_embedded")
TOKENS_EMBEDDED = Counter("chunkline.embed", "tokens_embedded")
# Positions the model computed: real tokens plus each pass's padding.
TOKENS_PADDED = Counter("chunkline.embed", "tokens_padded")
CHUNKS_REUSED = Counter("reindex", "chunks_reused")
REUSE_REJECTED = Counter("reindex", "reuse_rejected")  # stored vectors that failed their check
# Documents whose chunks rows came from the previous run (transforms/carry.py), and why the
# others were made: recomputed = changed (another input) + redone (the same input, moved by a
# corpus-wide change or other processing); new (not read before); gone: kept before, not now.
# carry_rejected: previous rows that failed their check.
DOCUMENTS_CARRIED = Counter("carry", "documents_carried")
DOCUMENTS_RECOMPUTED = Counter("carry", "documents_recomputed")
DOCUMENTS_CHANGED = Counter("carry", "documents_changed")
DOCUMENTS_REDONE = Counter("carry", "documents_redone")
DOCUMENTS_NEW = Counter("carry", "documents_new")
DOCUMENTS_GONE = Counter("carry", "documents_gone")
CHUNKS_CARRIED = Counter("carry", "chunks_carried")
CARRY_REJECTED = Counter("carry", "carry_rejected")
CARRY_COUNTERS = (DOCUMENTS_CARRIED, DOCUMENTS_RECOMPUTED, DOCUMENTS_CHANGED, DOCUMENTS_REDONE,
                  DOCUMENTS_NEW, DOCUMENTS_GONE, CHUNKS_CARRIED, CARRY_REJECTED)


def committed(result: Any) -> int:
    """A counter's value as the run counts it (``result``: a ``MetricResult``): its committed
    value, the work of bundles that succeeded, a retried bundle once; its attempted value only
    where the runner keeps none committed. Never attempted first: Prism's attempted value is
    the last progress report of one bundle, not a total
    (``sdks/go/pkg/beam/runners/prism/internal/jobservices/metrics.go``)."""
    value = result.committed if result.committed is not None else result.attempted
    return int(value or 0)
