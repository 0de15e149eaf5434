"""CLEAN: per-document cleaning, then corpus-level boilerplate removal.

Thin over ``chunkline.clean`` and ``chunkline.boilerplate``. Both stages return ``documents``
and ``rejected`` (:class:`CleanOutputs`; :class:`BoilerplateOutputs` adds what boilerplate
removal removed, for the run report), like the read stage: a document whose text
is empty after cleaning is a ``Rejected`` with that reason, never dropped silently. The text
they output is the text every chunk offset refers to (the ``documents`` table stores it).
"""

from __future__ import annotations

import dataclasses
import json
from typing import AbstractSet, Final, Iterable, Literal, NamedTuple, Union

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsSingleton, PCollection, TaggedOutput
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.state import pack_counted
from chunkline.boilerplate import (
    BoilerplateOptions,
    boilerplate_lines,
    frequency_floor,
    line_keys,
    remove_boilerplate_found,
)
from chunkline.index.layout import BOILERPLATE_FREQUENT
from chunkline.key_sets import (
    KeySets,
    checked,
    concat,
    frequent_parquet,
    from_arrays,
    one_per_text,
    split_by_share,
    text_hash,
)
from chunkline.clean import CleanOptions, clean_marked, line_indexes, without_lines_marked
from chunkline.memo import CLEAN, DOC_HASH, LINE_KEYS, STRIP, MemoSource, packed_value
from chunkline.records import Document, Rejected
from chunkline.transforms.memo import MemoUse, carrying, recalled_doc_hash
from chunkline.transforms.spill import (
    RemoveParts,
    SpillRecords,
    coder_of,
    default_spill_dir,
    part_path,
    read_packed,
    read_part,
    write_packed,
)
from chunkline.transforms.tally import SumCounts

REJECTED: Final = "rejected"  # Final: a Literal type, as the TaggedOutput[Literal[...]] outputs name it
REMOVED: Final = "removed"
KEYS: Final = "keys"
TEXTS: Final = "texts"
EMPTY_AFTER_CLEANING = "empty after cleaning"
EMPTY_AFTER_BOILERPLATE = "empty after boilerplate removal"

class CleanOutputs(NamedTuple):
    """What :class:`CleanDocuments` returns."""

    documents: PCollection[Document]
    rejected: PCollection[Rejected]


# The removed lines a run keeps (``BOILERPLATE_FILE``, read into the manifest): the most frequent
# ones, so a corpus with millions of distinct boilerplate lines still records a few kilobytes.
TOP_REMOVED = 50
BOILERPLATE_FILE = "boilerplate.json"


class BoilerplateOutputs(NamedTuple):
    """What :class:`RemoveBoilerplate` returns: :class:`CleanOutputs`' two; ``removed``, one
    element: the :data:`TOP_REMOVED` most often removed lines and blocks as
    ``{"text": first occurrence, "documents": documents it was removed from}``, most first; and
    ``frequent``, one element: the frequent keys, an ascending uint64 array (the run keeps it:
    :class:`WriteFrequentKeys`)."""

    documents: PCollection[Document]
    rejected: PCollection[Rejected]
    removed: PCollection[list[dict]]
    frequent: PCollection[np.ndarray]

class _Clean(beam.DoFn):
    """One document cleaned; a text the previous run found already clean passes untouched
    (``chunkline.memo``: only "unchanged" is recorded, never a cleaned copy of the text)."""

    def __init__(self, options: CleanOptions, memo: MemoSource | None = None) -> None:
        self._options = options
        self._memo = MemoUse(memo, CLEAN, repr(options))
        self._changed = Metrics.counter("clean", "changed")
        self._rejected = Metrics.counter("clean", "rejected")

    def setup(self) -> None:
        self._memo.setup()

    def finish_bundle(self) -> None:
        self._memo.flush()

    def process(self, doc: Document) -> Iterable[Document | TaggedOutput[Literal["rejected"], Rejected]]:
        memo, key = self._memo.memo, None
        if memo is not None:
            key = memo.key(doc.text, repr(doc.page_starts))
            if memo.recall(doc, key) is not None:
                yield doc
                return
        # A PDF's page starts move with the lines cleaning drops.
        text, page_starts = clean_marked(doc.text, doc.page_starts, self._options)
        if memo is not None and key is not None and text == doc.text \
                and page_starts == tuple(doc.page_starts) and text.strip():
            memo.keep(doc, key, b"")
        if not text.strip():
            self._rejected.inc()
            yield TaggedOutput(REJECTED, Rejected(doc.uri, doc.doc_id, EMPTY_AFTER_CLEANING))
            return
        if text != doc.text:
            self._changed.inc()
            doc = dataclasses.replace(doc, text=text, page_starts=page_starts)
        yield doc

class CleanDocuments(beam.PTransform):
    """``PCollection[Document]`` -> :class:`CleanOutputs`: each document's text through
    :func:`chunkline.clean.clean_text`; counters ``clean/changed``, ``clean/rejected``.

        cleaned = read.documents | "Clean" >> CleanDocuments(CleanOptions())
        cleaned.documents, cleaned.rejected
    """

    def __init__(self, options: CleanOptions | None = None, memo: MemoSource | None = None) -> None:
        super().__init__()
        self._options = options if options is not None else CleanOptions()
        self._memo = memo

    def expand(self, documents: PCollection[Document]):
        cleaned = documents | "CleanText" >> beam.ParDo(_Clean(self._options, self._memo)).with_outputs(
            REJECTED, main="documents"
        )
        return CleanOutputs(cleaned.documents, cleaned[REJECTED])

def _recalled_drop(value: bytes | None, lines: int) -> tuple[list[bool], dict[str, str]] | None:
    """A recorded strip decision (``{"drop": line indexes, "found": {key: line}}``) as the
    drop flags of a text of ``lines`` lines and what was found; None when there is none or it
    is damaged (the text is then cut afresh)."""
    if value is None:
        return None
    try:
        recalled = json.loads(value)
        drop = [False] * lines
        for index in recalled["drop"]:
            drop[index] = True
        return drop, dict(recalled["found"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


class _Strip(beam.DoFn):
    """A part of parked documents -> each document without its frequent lines (one left with
    nothing is rejected). Its candidate keys, when this process or the previous run computed
    them (:class:`_KeysOfText`), say whether it holds any: most documents hold none and pass
    untouched without being split into lines again."""

    def __init__(self, options: BoilerplateOptions, memo: MemoSource | None = None) -> None:
        self._options = options
        self._memo = MemoUse(memo, LINE_KEYS, repr(options))
        self._strips = MemoUse(memo, STRIP, repr(options))
        self._changed = Metrics.counter("boilerplate", "documents_changed")
        self._chars = Metrics.counter("boilerplate", "chars_removed")
        self._rejected = Metrics.counter("boilerplate", "rejected")
        self._frequent_of: tuple[int, np.ndarray] | None = None
        self._coder = coder_of(Document)

    def setup(self) -> None:
        self._memo.setup()
        self._strips.setup()

    def finish_bundle(self) -> None:
        self._strips.flush()

    def _frequent_array(self, frequent: AbstractSet[str]) -> np.ndarray:
        # The side input is one object per run: converted once.
        if self._frequent_of is None or self._frequent_of[0] != id(frequent):
            self._frequent_of = (id(frequent), np.array(sorted(int(key, 16) for key in frequent),
                                                        dtype="<u8"))
        return self._frequent_of[1]

    def _frequent_held(self, doc: Document, frequent: AbstractSet[str]) -> np.ndarray | None:
        """The frequent keys ``doc`` holds, or None when its keys are not at hand."""
        memo = self._memo.memo
        if memo is None:
            return None
        # Looked up without counting: the keys were recorded where they were computed, and the
        # document carries them from there (transforms/memo.py, ``carrying``).
        keys = packed_value(doc.memo, memo.key(doc.text))
        if keys is None or len(keys) % 8:
            return None
        held = np.frombuffer(keys, dtype="<u8")
        frequent_keys = self._frequent_array(frequent)
        if not len(frequent_keys):
            return held[:0]
        # The frequent keys sorted once: a binary search per held key (np.isin sorts both
        # arrays together on every call).
        at = np.searchsorted(frequent_keys, held)
        np.minimum(at, len(frequent_keys) - 1, out=at)
        return held[frequent_keys[at] == held]

    def _stripped(self, doc: Document, frequent: AbstractSet[str]
                  ) -> tuple[str, tuple[int, ...], dict[str, str]]:
        held = self._frequent_held(doc, frequent) if frequent else np.empty(0, dtype="<u8")
        if held is not None and not len(held):
            return doc.text, tuple(doc.page_starts), {}
        memo = self._strips.memo
        if held is None or memo is None:
            return remove_boilerplate_found(doc.text, doc.page_starts, frequent, self._options)
        # Which lines go is a function of the text and the frequent keys it holds: recalled as
        # line indexes, and the text cut here as the function would cut it.
        key = memo.key(doc.text, held.tobytes().hex())
        lines = doc.text.split("\n")
        recalled = _recalled_drop(memo.recall(doc, key), len(lines))
        if recalled is None:
            lines, drop, found = boilerplate_lines(doc.text, frequent, self._options)
            memo.keep(doc, key, json.dumps({"drop": [i for i, gone in enumerate(drop) if gone],
                                      "found": found}, ensure_ascii=False).encode("utf-8"))
        else:
            drop, found = recalled
        if not any(drop):
            return doc.text, tuple(doc.page_starts), {}
        text, page_starts = without_lines_marked(lines, drop, line_indexes(doc.text, doc.page_starts))
        return text, page_starts, found

    def process(
        self, part: str, frequent: frozenset[str]
    ) -> Iterable[Document | TaggedOutput[Literal["removed"], tuple[str, str]]
                  | TaggedOutput[Literal["rejected"], Rejected]]:
        # The part's documents are read here, not by a step before: a DoFn with a side input
        # holds its last element until the job ends (transforms/elementwise.py), and so holds
        # a part's path, not a document.
        for doc in map(self._coder.decode, read_part(part)):
            yield from self._strip(doc, frequent)

    def _strip(self, doc: Document, frequent: frozenset[str]):
        text, page_starts, found = self._stripped(doc, frequent)
        if text == doc.text:
            yield doc
            return
        for removed in found.items():
            yield TaggedOutput(REMOVED, removed)
        self._changed.inc()
        self._chars.inc(len(doc.text) - len(text))
        if not text.strip():
            self._rejected.inc()
            yield TaggedOutput(REJECTED, Rejected(doc.uri, doc.doc_id, EMPTY_AFTER_BOILERPLATE))
            return
        yield dataclasses.replace(doc, text=text, page_starts=page_starts)

# Frequent-key counting is spread over combine keys, each a bucket of the key space, as many as
# the run's key-space shares over this (``chunkline.pipeline.plan.join_shares``, which scale with the
# corpus: 64 for a first run, 4,096 past 17 M documents), never fewer than KEY_BUCKETS: a bucket's
# count holds that bucket's distinct keys alone, and each bucket can be counted on another worker.
KEY_BUCKETS = 16
SHARES_PER_BUCKET = 16
# Fewest shares of the text-hash space the key sets are grouped in (more for a corpus whose
# previous run was bigger): each share's texts are made distinct in one worker's memory.
KEY_SET_SHARES = 16
# What a bundle holds before it sends a batch on: keys (2 MB) or texts (their hashes, 1 MB).
_FLUSH_KEYS = 1 << 18
_FLUSH_TEXTS = 1 << 16
# Encoded batches a bundle sends in the grouping itself before it parks the rest in part files:
# a corpus of a few hundred thousand texts writes no part.
INLINE_KEY_BYTES = 16 << 20


def key_array(keys: AbstractSet[str]) -> bytes:
    """A document's candidate keys (16 hex digits each) as sorted little-endian uint64 bytes:
    compact to shuffle, and comparable, so equal texts keep one set whatever the order."""
    return np.array(sorted(int(key, 16) for key in keys), dtype="<u8").tobytes()


def key_text(key: int) -> str:
    """The hex form ``chunkline.boilerplate`` gives a key."""
    return format(key, "016x")


class _KeysOfText(beam.DoFn):
    """A document -> the document itself, carrying what was computed (main), and its text's
    hash with its candidate keys gathered into :class:`~chunkline.key_sets.KeySets` batches
    (``keys``), one sent whenever the bundle holds :data:`_FLUSH_KEYS` keys or
    :data:`_FLUSH_TEXTS` texts, and at its end; the keys of a text the previous run saw are
    recalled (``chunkline.memo``), not computed."""

    def __init__(self, options: BoilerplateOptions, memo: MemoSource | None = None) -> None:
        self._options = options
        self._memo = MemoUse(memo, LINE_KEYS, repr(options))
        self._hashes = MemoUse(memo, DOC_HASH, "")

    def setup(self) -> None:
        self._memo.setup()
        self._hashes.setup()

    def start_bundle(self) -> None:
        self._held_hashes: list[bytes] = []
        self._held_keys: list[np.ndarray] = []
        self._held = 0

    def finish_bundle(self) -> Iterable[TaggedOutput]:
        self._memo.flush()
        self._hashes.flush()
        for batch in self._flush():
            yield TaggedOutput(KEYS, WindowedValue(batch, 0, (GlobalWindow(),)))

    def process(self, doc: Document) -> Iterable[Document | TaggedOutput[Literal["keys"], KeySets]]:
        memo = self._memo.memo
        key = memo.key(doc.text) if memo is not None else None
        keys = memo.recall(doc, key, width=8) if memo is not None and key is not None else None
        fresh: dict[bytes, bytes] = {}
        if keys is None:
            keys = key_array(line_keys(doc.text, self._options))
            if memo is not None and key is not None:
                memo.keep(doc, key, keys)
                fresh[key] = keys
        hashed = recalled_doc_hash(self._hashes.memo, doc, fresh)
        self._held_hashes.append(text_hash(hashed))
        self._held_keys.append(np.frombuffer(keys, dtype="<u8"))
        self._held += len(keys) // 8
        if self._held >= _FLUSH_KEYS or len(self._held_hashes) >= _FLUSH_TEXTS:
            for batch in self._flush():
                yield TaggedOutput(KEYS, batch)
        # What was computed here travels on with the document, and the hash even when recalled
        # (marked as this run's, so dedupe neither counts nor records it again): the strip reads
        # its keys and dedupe its hash, in whatever worker process they run. What was counted
        # goes on to the run's state table (chunkline.state).
        yield carrying(dataclasses.replace(doc, counted=doc.counted + pack_counted(hashed, keys)), fresh)

    def _flush(self) -> list[KeySets]:
        if not self._held_hashes:
            return []
        batch = from_arrays(self._held_hashes, self._held_keys)
        self.start_bundle()
        return [batch]


class _TextShares(beam.DoFn):
    """Key-set batches -> ``(share, encoded batch)``: each batch's texts split by share of the
    text-hash space (:func:`chunkline.key_sets.split_by_share`), a share's parts held together
    and sent as one batch whenever the bundle holds :data:`_FLUSH_KEYS` keys or
    :data:`_FLUSH_TEXTS` texts, and at its end. Past the bundle's first
    :data:`INLINE_KEY_BYTES`, a share's batch is parked in a part file under ``directory`` and
    only ``(share, its path)`` is sent: the in-process runner holds a grouping's whole input in
    memory while the stage that makes it runs (as ``transforms/shares.py`` parks)."""

    def __init__(self, shares: int, directory: str) -> None:
        self.shares, self.directory = shares, directory
        self._batches = Metrics.counter("boilerplate", "text_batches")

    def setup(self) -> None:
        self._coder = coder_of(KeySets)

    def start_bundle(self) -> None:
        self._sent_inline = 0
        self._clear()

    def _clear(self) -> None:
        self._held_parts: dict[int, list[KeySets]] = {}
        self._held_keys = self._held_texts = 0

    def process(self, batch: KeySets) -> Iterable[tuple[int, bytes | str]]:
        # A batch that crossed a coder other than KeySets' (pickled as a plain tuple) is one again.
        batch = checked(KeySets(*batch))
        for share, part in split_by_share(batch, self.shares):
            self._held_parts.setdefault(share, []).append(part)
        self._held_keys += len(batch.keys)
        self._held_texts += batch.texts
        if self._held_keys >= _FLUSH_KEYS or self._held_texts >= _FLUSH_TEXTS:
            yield from self._sent()

    def finish_bundle(self) -> Iterable[WindowedValue]:
        for element in self._sent():
            yield WindowedValue(element, 0, (GlobalWindow(),))

    def _sent(self) -> list[tuple[int, bytes | str]]:
        sent: list[tuple[int, bytes | str]] = []
        for share, parts in sorted(self._held_parts.items()):
            data = self._coder.encode(concat(parts))
            if self._sent_inline < INLINE_KEY_BYTES:
                self._sent_inline += len(data)
                sent.append((share, data))
            else:
                path = part_path(self.directory)
                write_packed(path, data)
                sent.append((share, path))
        self._batches.inc(len(sent))
        self._clear()
        return sent


class _CountTexts(beam.DoFn):
    """``(share, its batches)`` -> the share's distinct texts' keys counted by bucket of the key
    space, ``(bucket, (keys, count of each))``, and the number of its distinct texts
    (``texts``). A text hash is in one share only, so a text is counted once in the corpus."""

    def __init__(self, buckets: int) -> None:
        self.buckets = buckets

    def setup(self) -> None:
        self._coder = coder_of(KeySets)

    def process(self, share: tuple[int, Iterable[bytes | str]]
                ) -> Iterable[tuple[int, tuple[np.ndarray, np.ndarray]] | TaggedOutput[Literal["texts"], int]]:
        batches = [self._coder.decode(read_packed(data) if isinstance(data, str) else data)
                   for data in share[1]]
        texts = one_per_text(concat(batches))
        yield TaggedOutput(TEXTS, texts.texts)
        yield from bucket_counts(texts.keys, self.buckets)


def bucket_counts(keys: np.ndarray, buckets: int) -> list[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """Keys (one per text holding it) -> ``(bucket, (distinct keys ascending, count of each))``
    per bucket of the key space (``key % buckets``) that holds any."""
    if not len(keys):
        return []
    keys, counts = np.unique(keys, return_counts=True)
    of = keys % np.uint64(buckets)
    return [(int(bucket), (keys[of == bucket], counts[of == bucket].astype(np.int64)))
            for bucket in np.unique(of)]


def key_buckets(shares: int) -> int:
    """How many buckets the line keys are counted in for a run of ``shares`` key-space shares."""
    return max(KEY_BUCKETS, shares // SHARES_PER_BUCKET)


class _CountWithSample(beam.CombineFn):
    """(key, shown text) -> (documents, shown text): the smallest text seen, so the line shown
    does not depend on the order the runner combines in (variants differ in case or spacing)."""

    def create_accumulator(self) -> tuple[int, str | None]:
        return 0, None

    def add_input(self, acc: tuple[int, str | None], text: str) -> tuple[int, str | None]:
        return acc[0] + 1, text if acc[1] is None else min(acc[1], text)

    def merge_accumulators(self, accs: Iterable[tuple[int, str | None]]) -> tuple[int, str | None]:
        count, texts = 0, []
        for n, text in accs:
            count += n
            if text is not None:
                texts.append(text)
        return count, min(texts) if texts else None

    def extract_output(self, acc: tuple[int, str | None]) -> tuple[int, str | None]:
        return acc


def _top_removed(top: list[tuple[str, tuple[int, str]]]) -> list[dict]:
    return [{"text": text, "documents": count} for _, (count, text) in top]


class WriteRemovedLines(beam.DoFn):
    """The stage's ``removed`` list as ``run_dir/boilerplate.json`` (the driver reads it into the
    manifest, as it does ``bm25.json``)."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir

    def process(self, removed: list[dict]) -> Iterable[str]:
        path = FileSystems.join(self.run_dir, BOILERPLATE_FILE)
        with FileSystems.create(path) as handle:
            handle.write((json.dumps(removed, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
        yield path


class WriteFrequentKeys(beam.DoFn):
    """The stage's ``frequent`` keys as ``run_dir/boilerplate-frequent.parquet``
    (:func:`chunkline.key_sets.frequent_parquet`; read back with
    :func:`chunkline.key_sets.read_frequent`)."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir

    def process(self, frequent: np.ndarray) -> Iterable[str]:
        path = FileSystems.join(self.run_dir, BOILERPLATE_FREQUENT)
        with FileSystems.create(path) as handle:
            handle.write(frequent_parquet(frequent))
        yield path


def _sorted_keys(parts: list[np.ndarray]) -> np.ndarray:
    return np.sort(np.concatenate(parts)) if parts else np.empty(0, dtype="<u8")


class RemoveBoilerplate(beam.PTransform):
    """``PCollection[Document]`` -> :class:`BoilerplateOutputs`: lines and short blocks that occur in
    at least ``frequency_floor(n_documents, options)`` documents removed from every document.

    The count is on arrays, never an element per document or per line: each bundle's texts go
    on as :class:`~chunkline.key_sets.KeySets` batches (text hashes, CSR offsets, uint64 keys),
    split by share of the text-hash space and grouped by share, where each share's texts are
    made distinct (:func:`~chunkline.key_sets.one_per_text`) and their keys counted per bucket
    of the key space (:func:`key_buckets`), summed where received (``tally.SumCounts``). The
    frequent keys reach the documents as one side input (a frozenset: only the frequent keys,
    not the corpus's lines). Counters ``boilerplate/frequent_keys``,
    ``boilerplate/documents_changed``, ``boilerplate/chars_removed``, ``boilerplate/rejected``,
    ``boilerplate/text_batches`` (the batches the grouping by text received).

    ``settled``: more texts to count, as batches of their key sets: documents the run does not
    process again (a rerun's unchanged ones, their previous state). They are counted exactly as
    the documents' texts are, and never stripped or output.

    The documents wait for the frequent keys in part files under ``spill_dir`` (default:
    ``default_spill_dir``; deleted once every document is stripped), not in a shuffle.

    Documents are counted once per distinct text (``doc_hash``), so it can run before dedupe:
    five exact copies of a page do not make every line of it "occur in five documents". Near
    copies do count apiece; ``min_docs`` and ``min_fraction`` must stay above the number of
    versions one document is likely to have in the corpus.
    """

    def __init__(self, options: BoilerplateOptions | None = None,
                 spill_dir: str | None = None, memo: MemoSource | None = None,
                 shares: int = 1024, *, settled: PCollection[KeySets] | None = None) -> None:
        super().__init__()
        self._options = options if options is not None else BoilerplateOptions()
        self._spill_dir = spill_dir
        self._memo = memo
        self._shares = shares  # the run's key-space shares (plan.join_shares): the text shares and key buckets follow
        self._settled = settled
        # Set by expand: the frequent keys, as a set for StripLate and as an array.
        self.frequent_set: PCollection | None = None
        self.frequent: PCollection | None = None

    def expand(self, documents: PCollection[Document]):
        options = self._options
        parked = self._spill_dir or default_spill_dir(documents.pipeline, "boilerplate")
        keyed = documents | "KeysByText" >> beam.ParDo(_KeysOfText(options, self._memo)).with_outputs(
            KEYS, main="documents")
        documents = keyed.documents
        batches = [keyed[KEYS]] + ([self._settled] if self._settled is not None else [])
        # One set of keys per distinct text, found per share of the text-hash space: exact copies
        # count once, wherever they come from. A dump of millions of records sends a few hundred
        # batches; past a bundle's first INLINE_KEY_BYTES they wait in part files.
        key_parts = parked.rstrip("/") + "-keys"
        counted = (
            batches
            | "AllTexts" >> beam.Flatten().with_output_types(KeySets)
            | "ToTextShares" >> beam.ParDo(_TextShares(max(KEY_SET_SHARES, self._shares // 64), key_parts))
            .with_output_types(tuple[int, Union[bytes, str]])
            | "ByText" >> beam.GroupByKey()
            | "CountTexts" >> beam.ParDo(_CountTexts(key_buckets(self._shares))).with_outputs(
                TEXTS, main="keys")
        )
        # Once every share is read: a part is never deleted while a retry could need it.
        (counted[TEXTS]
         | "CountShares" >> beam.combiners.Count.Globally()
         | "RemoveKeyParts" >> beam.ParDo(RemoveParts(key_parts)))
        n_documents = counted[TEXTS] | "SumTexts" >> beam.CombineGlobally(sum)
        floor = n_documents | "Floor" >> beam.Map(frequency_floor, options)
        frequent_counter = Metrics.counter("boilerplate", "frequent_keys")

        def as_set(keys: np.ndarray) -> frozenset[str]:
            frequent_counter.inc(len(keys))
            return frozenset(key_text(key) for key in keys.tolist())

        # Summed where received, not in a lifted combine: a sending bundle never holds every
        # distinct line it saw (tally.SumCounts).
        frequent = (
            counted.keys
            | "CountKeys" >> SumCounts()
            | "KeepFrequent" >> beam.Map(lambda kv, f: kv[1][0][kv[1][1] >= f], AsSingleton(floor))
            | "Collect" >> beam.combiners.ToList()
            | "Sorted" >> beam.Map(_sorted_keys).with_output_types(np.ndarray)
        )
        frequent_set = frequent | "AsSet" >> beam.Map(as_set).with_output_types(frozenset[str])
        self.frequent_set, self.frequent = frequent_set, frequent
        # The side input is known only once every document is counted: until then the
        # documents wait in part files, and only the parts' paths wait in memory.
        stripped = (
            documents
            | "Park" >> SpillRecords(parked, Document)
            | "Spread" >> beam.Reshuffle()
            | "Strip" >> beam.ParDo(_Strip(options, self._memo), AsSingleton(frequent_set))
            .with_outputs(REJECTED, REMOVED, main="documents")
        )
        (stripped.documents
         | "CountStripped" >> beam.combiners.Count.Globally()
         | "RemoveParts" >> beam.ParDo(RemoveParts(parked)))
        removed = (
            stripped[REMOVED]
            | "CountRemoved" >> beam.CombinePerKey(_CountWithSample())
            # Ties broken by key: the same run gives the same list.
            | "TopRemoved" >> beam.combiners.Top.Of(TOP_REMOVED, key=lambda kv: (kv[1][0], kv[0]))
            | "AsRows" >> beam.Map(_top_removed)
        )
        return BoilerplateOutputs(stripped.documents, stripped[REJECTED], removed, frequent)


class _StripOne(_Strip):
    """:class:`_Strip` of one document, not of a part."""

    def process(self, doc: Document, frequent: frozenset[str]):  # type: ignore[override]
        yield from self._strip(doc, frequent)


class StripLate(beam.PTransform):
    """``PCollection[Document]`` -> :class:`CleanOutputs`: documents a rerun reads again once
    ``counted``'s frequent keys are known (transforms/settle.py), stripped with them and never
    counted (their texts were counted as the previous run's state rows held them). Their keys
    are taken as the counted documents' are, so the run's state table records them."""

    def __init__(self, counted: RemoveBoilerplate) -> None:
        super().__init__()
        if counted.frequent_set is None:
            raise ValueError("StripLate follows an applied RemoveBoilerplate")
        self._counted = counted

    def expand(self, documents: PCollection[Document]):
        counted = self._counted
        frequent_set = counted.frequent_set
        if frequent_set is None:
            raise ValueError("StripLate follows an applied RemoveBoilerplate")
        keyed = documents | "Keys" >> beam.ParDo(_KeysOfText(counted._options, counted._memo)).with_outputs(
            KEYS, main="documents")
        stripped = keyed.documents | "Strip" >> beam.ParDo(
            _StripOne(counted._options, counted._memo), AsSingleton(frequent_set)
        ).with_outputs(REJECTED, REMOVED, main="documents")
        return CleanOutputs(stripped.documents, stripped[REJECTED])
