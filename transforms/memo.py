"""A DoFn's memo (``chunkline.memo``): the previous run's results loaded once per worker process
when the DoFn is set up, and the results a bundle used written as one segment when it ends,
before the bundle commits. Counters (namespace ``memo``): ``<kind>_computed`` and
``<kind>_recalled``."""

from __future__ import annotations

import logging

from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from chunkline.memo import Memo, MemoSource, load_known, segment_name, write_segment
from chunkline.records import doc_hash

log = logging.getLogger("chunkline.memo")

NAMESPACE = "memo"


class MemoUse:
    """Held by a DoFn: ``setup()`` in the DoFn's setup, ``flush()`` in its finish_bundle;
    ``memo`` is None without a source (the stage computes everything, as before)."""

    def __init__(self, source: MemoSource | None, kind: str, settings: str) -> None:
        self.source, self.kind = source, kind
        self.settings = (source.settings + "\0" + settings) if source is not None else settings
        self.memo: Memo | None = None
        self.computed = Metrics.counter(NAMESPACE, f"{kind}_computed")
        self.recalled = Metrics.counter(NAMESPACE, f"{kind}_recalled")

    def setup(self) -> None:
        if self.source is None:
            return
        known = load_known(self.kind, self.settings, self.source.kept_segments(self.kind), FileSystems.open)
        expiring = load_known(self.kind, self.settings, self.source.expiring_segments(self.kind),
                              FileSystems.open, shared=False)
        self.memo = Memo(self.kind, self.settings, known, spill=self._write, expiring=expiring)

    def flush(self) -> None:
        memo = self.memo
        if memo is None:
            return
        self.recalled.inc(memo.hits)
        self.computed.inc(memo.misses)
        memo.hits = memo.misses = 0
        self._write(memo.take_used())

    def _write(self, used: dict[bytes, bytes]) -> None:
        """One segment. A retried bundle may leave its first attempt's segment beside the
        retry's: the same keys with the same values, harmless to the next run."""
        if not used:
            return
        path = FileSystems.join(self.source.write_dir, segment_name(self.kind))
        try:
            with FileSystems.create(path) as handle:
                write_segment(used, self.kind, handle)
        except Exception as exc:  # noqa: BLE001 - a memo that cannot be kept costs the next run time
            log.warning("memo: could not write %s (%s: %s); the next run computes these again",
                        path, type(exc).__name__, exc)


def recalled_doc_hash(memo: Memo | None, text: str) -> str:
    """``chunkline.records.doc_hash(text)``, recalled when the memo holds it."""
    if memo is None:
        return doc_hash(text)
    key = memo.key(text)
    value = memo.get(key, width=32)
    if value is None or len(value) != 32:
        value = bytes.fromhex(doc_hash(text))
        memo.put(key, value)
    return value.hex()
