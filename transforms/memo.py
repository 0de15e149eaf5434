"""A DoFn's memo (``chunkline.memo``): results recalled from what each document carries (the
reader hands it the entries of the segments the previous run lists, :class:`RecalledShares`),
and the results a bundle computed (and recalled from a retired segment) written as segments,
one per share, as they accumulate and when the bundle ends, before the bundle commits.
Counters (namespace ``memo``): ``<kind>_computed`` and ``<kind>_recalled``; namespace
``memo_segments``: the entries recalled from each listed segment, by its ordinal (what the
manifest's ``memo`` table states as ``used``, and the next run retires by)."""

from __future__ import annotations

import dataclasses
import logging

from apache_beam.io.filesystems import FileSystems
import numpy as np
from apache_beam.metrics import Metrics

from chunkline.memo import (Memo, MemoSource, RecalledShares, Rows, doc_ref, pack, parse_segment_name, segment_name,
                            unit_share,
                            write_segment)
from chunkline.records import Document, doc_hash

log = logging.getLogger("chunkline.memo")

NAMESPACE = "memo"
SEGMENTS_NAMESPACE = "memo_segments"


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
        self.memo = Memo(self.kind, self.settings, self.source.shares, spill=self._write,
                         retired=self.source.retired)

    def flush(self) -> None:
        memo = self.memo
        if memo is None:
            return
        self.recalled.inc(memo.hits)
        self.computed.inc(memo.misses)
        memo.hits = memo.misses = 0
        for segment, count in sorted(memo.take_recalled().items()):
            Metrics.counter(SEGMENTS_NAMESPACE, str(segment)).inc(count)
        self._write(memo.take_used())

    def _write(self, used: dict[int, Rows]) -> None:
        """A segment per share. A retried bundle may leave its first attempt's segments beside
        the retry's: the same rows, harmless to the next run."""
        source = self.source
        if source is None:  # no memo without a source (setup), so nothing to write
            return
        for share, rows in sorted(used.items()):
            if not rows:
                continue
            path = FileSystems.join(source.write_dir, segment_name(self.kind, share, source.shares))
            try:
                with FileSystems.create(path) as handle:
                    write_segment(rows, self.kind, handle)
            except Exception as exc:  # noqa: BLE001 - a memo that cannot be kept costs time
                log.warning("memo: could not write %s (%s: %s); the next run computes these "
                            "again", path, type(exc).__name__, exc)


def recalled_shares(source: MemoSource | None) -> RecalledShares | None:
    """The previous memo's shares as the reader loads them; None without a previous memo."""
    if source is None or source.previous_shares is None:
        return None
    return RecalledShares(source, FileSystems.open)


def carrying(doc: Document, fresh: dict[bytes, bytes]) -> Document:
    """``doc`` carrying the results ``fresh`` too, for a later stage that asks for them (in
    whatever worker process it runs)."""
    return dataclasses.replace(doc, memo=doc.memo + pack(fresh)) if fresh else doc


def without_memo(doc: Document) -> Document:
    """``doc`` without the results it carries: for where nothing after reads them."""
    return dataclasses.replace(doc, memo=b"") if doc.memo else doc


def recalled_doc_hash(memo: Memo | None, doc: Document,
                      fresh: dict[bytes, bytes] | None = None) -> str:
    """``chunkline.records.doc_hash(doc.text)``, recalled when ``doc`` carries it; also put in
    ``fresh`` (key -> value), for a stage that passes it on (:func:`carrying`)."""
    if memo is None:
        return doc_hash(doc.text)
    key = memo.key(doc.text)
    value = memo.recall(doc, key, width=32)
    if value is None or len(value) != 32:
        value = bytes.fromhex(doc_hash(doc.text))
        memo.keep(doc, key, value)
    if fresh is not None:
        # Passed on as this run's (``chunkline.memo.HERE``), recalled or computed: the stage
        # after that asks again (dedupe) neither counts it against its segment a second time
        # nor records it again.
        fresh[key] = value
    return value.hex()


class SettledEntries:
    """What a rerun's settled documents (transforms/settle.py) hold in the previous memo: they
    recall nothing, but their entries stand behind the decisions they keep. Each is counted
    used (and recalled) by the listed segment it lies in, as a recall counts it, so a segment
    is not retired for want of use; one in a retired segment is written again, as a recall
    writes it, so that nothing a later run may ask for is lost. Every entry the document holds
    counts: which of them its current texts would ask for only the stages that make those texts
    know, so an entry of an older text of it (from before an edit) is kept with the rest.

    Found per share on arrays (:meth:`chunkline.memo.Recalled.rows_of`), the documents
    gathered as a piece is read (:meth:`add`) and looked up once it is (:meth:`settle`): a
    settled document's entries are never packed."""

    def __init__(self, source: MemoSource | None) -> None:
        self.source = source
        # Empty until setup (a DoFn called without it, as a test may, holds nothing to count).
        self.kinds: dict[int, str] = {}
        self.uses: dict[str, MemoUse] = {}
        self.counts: dict[int, int] = {}
        self.pending: dict[int, dict[bytes, tuple[str, int]]] = {}
        self.shares: int | None = None

    def setup(self) -> None:
        self.kinds = {}
        if self.source is not None:
            for ordinal, path in enumerate(self.source.previous):
                named = parse_segment_name(path)
                if named is not None:
                    self.kinds[ordinal] = named[0]
        self.uses, self.counts, self.pending = {}, {}, {}
        self.shares = self.source.previous_shares if self.source is not None else None

    def add(self, uri: str, position: int) -> None:
        if self.shares is None:
            return
        share = unit_share(uri, position, self.shares)
        self.pending.setdefault(share, {})[doc_ref(uri, position)] = (uri, position)

    def settle(self, recalled: RecalledShares | None) -> None:
        """Count (and write again, where retired) the entries of the documents added since."""
        pending, self.pending = self.pending, {}
        source = self.source
        if recalled is None or source is None or not pending:
            return
        for share, places in pending.items():
            loaded = recalled.share_at(share)
            rows = np.flatnonzero(loaded.rows_of(np.array(list(places), "S16")))
            if not len(rows):
                continue
            ordinals = loaded.ordinals[rows]
            found, counts = np.unique(ordinals, return_counts=True)
            for ordinal, count in zip(found.tolist(), counts.tolist()):
                self.counts[ordinal] = self.counts.get(ordinal, 0) + count
            if not source.retired:
                continue
            for row, ordinal in zip(rows.tolist(), ordinals.tolist()):
                kind = self.kinds.get(ordinal)
                if ordinal not in source.retired or kind is None:
                    continue
                use = self.uses.get(kind)
                if use is None:
                    use = self.uses[kind] = MemoUse(source, kind, "")
                    use.setup()
                value = loaded.value(row)
                if use.memo is not None and value is not None:
                    ref = bytes(loaded.refs[row]).ljust(16, b"\0")
                    use.memo.put(bytes(loaded.keys[row]).ljust(16, b"\0"), value, places[ref])

    def flush(self) -> None:
        by_kind: dict[str, int] = {}
        for segment, count in sorted(self.counts.items()):
            Metrics.counter(SEGMENTS_NAMESPACE, str(segment)).inc(count)
            kind = self.kinds.get(segment)
            if kind is not None:
                by_kind[kind] = by_kind.get(kind, 0) + count
        for kind, count in sorted(by_kind.items()):
            Metrics.counter(NAMESPACE, f"{kind}_recalled").inc(count)
        self.counts = {}
        for use in self.uses.values():
            use.flush()
