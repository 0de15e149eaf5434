"""CARRY: an unchanged document's chunks rows taken from the previous run, not made again.

Every kept document gets a carry key where dedupe summarizes it (``chunkline.carry.carry_key``:
the processing signature and the document as the splitter would see it). The previous run's
carry sidecars say, per document, the key its rows were made under; each (chunk shard, sidecar)
pair is read once to verify it (:func:`verify_pair`: rows aligned, every chunk of the
document there, vectors finite and of the run's length, unit length when normalized, no failed
context header) and to list the documents it may lend. Dedupe marks a kept document whose key
is listed as carried (``transforms/dedupe.py``): its status is written as usual, but it is not
released to the splitter. The carried documents are grouped by the pair that holds them; each
pair's sidecar gives their chunks' term counts to the BM25 statistics in one partial sum, and
the chunk shard of this run each document goes to reads its rows from the pair as an Arrow
table (:class:`CarriedRows`: weights computed again, for k1 and b may change) and sorts them in
with the rows made now. Only ids, keys and small integers cross a shuffle, and no carried
chunk becomes a Python object.

Counters (namespace ``carry``): documents carried, recomputed (kept before under another key),
new (no rows before), gone (rows before, not kept now); chunks carried; previous documents
whose rows failed their check (``rejected``: computed again).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsSingleton, PCollection

from chunkline.carry import carry_key, embedding_prefix
from chunkline.context.writer import CACHED, FAILED, OK
from chunkline.index.tables import Deletions
from chunkline.index.layout import shard_name, shard_of
from chunkline.quantize import UNIT_TOLERANCE, dequantized
from chunkline.records import KEPT, DocumentChunks, parquet_schema, with_fixed_vectors
from chunkline.sparse import CorpusStats, SparseOptions
from chunkline.transforms.progress import progress_counter
from chunkline.transforms.counters import (
    DOCUMENTS_CHANGED,
    DOCUMENTS_REDONE,
    CHUNKS_CARRIED,
    DOCUMENTS_CARRIED,
    DOCUMENTS_GONE,
    DOCUMENTS_NEW,
    DOCUMENTS_RECOMPUTED,
    CARRY_REJECTED,
)
from chunkline.transforms.reuse import stored_dtype
from chunkline.transforms.elementwise import MapWith
from chunkline.transforms.shares import GroupInShares
from chunkline.index import compaction  # its bounds read where applied (a test narrows them)
from chunkline.index.compaction import Compaction, compacted
from chunkline.transforms.write import SHARD_DIGEST_KEY, file_digest, same_output

log = logging.getLogger("chunkline.carry")


class CarrySource(NamedTuple):
    """The previous run's rows that may be carried, and what this run's rows must be."""

    pairs: tuple[tuple[str, str], ...]  # (chunk shard, its carry sidecar), in shard order
    signature: str  # chunkline.carry.processing_signature of this run
    chunk_metadata: tuple[str, ...] | None  # output.chunk_metadata
    dim: int | None  # this run's vector length; None: embedding off
    normalize: bool
    # The previous run's documents shards: what each document's input was (its input digest).
    documents: tuple[str, ...] = ()
    # Per documents shard, its rows no longer live (empty: none in any). Deletions are held by
    # reference (chunkline.index.tables.Deletions: the shard's deletion file, by path), read by
    # the worker that reads that shard: the plan, pickled into every worker, holds no position.
    documents_deleted: tuple[Deletions, ...] = ()
    # Per pair, the rows the previous run's manifest deletes of its chunk shard and of its
    # sidecar (aligned row for row: the same positions, which verify_pair checks): never
    # carried, never read as live. Empty: none deleted in any pair.
    deleted: tuple[tuple[Deletions, Deletions], ...] = ()
    # The previous files (chunk shards and documents shards, full paths) this run may compact
    # (chunkline.transforms.write.compaction_allowed, per table); None: every one.
    compactable: Compaction | None = None

    def deleted_of(self, pair: int) -> tuple[int, ...]:
        """The deleted row positions of pair ``pair`` (its shard's deletion file read, once per
        process while a few are kept: ``chunkline.index.tables.read_deletions``)."""
        return self.deleted[pair][0].positions() if self.deleted else ()

    def side_deleted_of(self, pair: int) -> tuple[int, ...]:
        """The deleted row positions of pair ``pair``'s sidecar."""
        return self.deleted[pair][1].positions() if self.deleted else ()

    def document_files(self) -> tuple[tuple[str, Deletions], ...]:
        """Each previous documents shard with its deleted rows."""
        deleted = self.documents_deleted or (Deletions(),) * len(self.documents)
        return tuple(zip(self.documents, deleted))


class CarryEntry(NamedTuple):
    carry_key: str
    pair: int  # index into CarrySource.pairs


class CarryKeys:
    """Document -> its carry key under this run's processing (a plain callable: dedupe calls it
    where the text is at hand, and the split output is keyed the same way)."""

    def __init__(self, source: CarrySource) -> None:
        self.signature, self.chunk_metadata = source.signature, source.chunk_metadata

    def __call__(self, doc) -> str:
        return carry_key(self.signature, doc, self.chunk_metadata)


_CHECKED_COLUMNS = ("doc_id", "chunk_index", "search_text", "context", "table_header", "text",
                    "context_status")
_INTACT_COLUMNS = ("doc_id", "chunk_index", "context_status")


def _prefix_problems(chunks: pa.Table) -> np.ndarray:
    """Per row: True where ``search_text`` does not end with the row's context, table header
    and text (the heading prefix it was embedded with could not be recovered)."""
    columns = [chunks.column(name).to_pylist()
               for name in ("search_text", "context", "table_header", "text")]
    return np.fromiter((embedding_prefix(*row) is None for row in zip(*columns)),
                       dtype=bool, count=chunks.num_rows)


def _vector_problems(chunks: pa.Table, dim: int, normalize: bool) -> list[str | None]:
    """Per row: why its stored vector may not be carried (None: it may), as
    ``chunkline.transforms.reuse.vector_problem`` says it, for the whole column at once."""
    rows = chunks.num_rows
    if "embedding" not in chunks.schema.names:
        return ["no vector"] * rows
    column = chunks.column("embedding").combine_chunks()
    dtype = stored_dtype(chunks.schema)
    if not pa.types.is_fixed_size_list(column.type) or column.type.list_size != dim:
        sizes = pc.list_value_length(column).to_pylist()
        return ["no vector" if size is None else f"{size} values, not {dim}" for size in sizes]
    problems: list[str | None] = [None] * rows
    missing = column.is_null().to_numpy(zero_copy_only=False)
    scales = None
    if dtype == "int8":
        scale_column = chunks.column("embedding_scale").combine_chunks()
        missing = missing | scale_column.is_null().to_numpy(zero_copy_only=False)
        scales = scale_column.fill_null(0).to_numpy(zero_copy_only=False)
    values = column.fill_null([0] * dim) if missing.any() else column
    matrix = pc.list_flatten(values).to_numpy(zero_copy_only=False).reshape(rows, dim)
    vectors = dequantized(matrix, scales).astype(np.float64)
    finite = np.all(np.isfinite(vectors), axis=1)  # np.all: an array (numpy stubs: ndarray.all may be a scalar)
    norms = np.linalg.norm(np.where(finite[:, None], vectors, 0), axis=1)
    tolerance = UNIT_TOLERANCE[dtype]
    for row in range(rows):
        if missing[row]:
            problems[row] = "no vector"
        elif not finite[row]:
            problems[row] = "not finite"
        elif normalize and abs(norms[row] - 1.0) > tolerance:
            problems[row] = f"norm {norms[row]:.4g}, not 1"
    return problems


def _live(table: pa.Table, deleted: Sequence[int]) -> pa.Table:
    """``table`` without the rows at ``deleted`` (ascending positions)."""
    if not deleted:
        return table
    keep = np.ones(table.num_rows, dtype=bool)
    keep[np.asarray(deleted, dtype=np.int64)] = False
    return table.filter(pa.array(keep))


def verify_pair(chunk_path: str, side_path: str, dim: int | None, normalize: bool,
                deleted: Sequence[int] = (), side_deleted: Sequence[int] | None = None
                ) -> list[tuple[str, str, str | None]]:
    """``(doc_id, carry_key, why its rows may not be carried or None)`` for each document of one
    previous (chunk shard, sidecar) pair, in shard order: every chunk index 0..n-1 there with
    its sidecar row, one carry key, each search text derivable from its text, context and
    header, term ids and counts alike in length, no failed contextual header, and each vector
    finite, of this run's length and of unit length when normalized. Checked a column at a
    time; the search texts only of a shard whose bytes are not those its sidecar recorded.
    Rows at ``deleted`` (the previous manifest's deleted positions) are no row of the pair;
    ``side_deleted``, the sidecar's (None: the same), must be the same positions.
    Reading fails (raises) for a file that cannot be read or whose halves do not line up."""
    if side_deleted is not None and tuple(side_deleted) != tuple(deleted):
        raise ValueError("the manifest deletes other rows of the sidecar than of its chunk shard")
    with FileSystems.open(side_path) as handle:
        # Page checksums (written with every sidecar): its term counts become stored weights.
        side_file = pq.ParquetFile(handle, page_checksum_verification=True)
        footer = side_file.metadata.metadata or {}
        sides = side_file.read()
    with FileSystems.open(chunk_path) as handle:
        # A shard with the digest its sidecar recorded when both were written is the file that
        # run wrote and checked: its text need not be decoded to show that its search texts
        # still end with their texts. Any other (an older run, a rewritten or damaged file) is
        # checked row by row.
        recorded = footer.get(SHARD_DIGEST_KEY)
        intact = recorded is not None and file_digest(handle) == recorded.decode("ascii", "replace")
        if recorded is not None and not intact:
            # The shard changed since it and its sidecar were written: a rewrite can keep every
            # row consistent (text and search text altered alike), so none of its rows is
            # carried; its documents are computed again.
            raise ValueError("the chunk shard's bytes are not those its sidecar recorded "
                             "(replaced or damaged since written)")
        handle.seek(0)
        names = pq.read_schema(handle).names
        handle.seek(0)
        checked = _INTACT_COLUMNS if intact else _CHECKED_COLUMNS
        wanted = list(checked) + [name for name in ("embedding", "embedding_scale")
                                  if dim is not None and name in names]
        chunks = with_fixed_vectors(pq.read_table(handle, columns=wanted))
    if chunks.num_rows != sides.num_rows:
        raise ValueError(f"the chunk shard has {chunks.num_rows} rows and its sidecar {sides.num_rows}")
    if deleted and deleted[-1] >= chunks.num_rows:
        raise ValueError(f"the manifest deletes row {deleted[-1]} of {chunks.num_rows}")
    chunks, sides = _live(chunks, deleted), _live(sides, deleted)
    ids = chunks.column("doc_id").combine_chunks()
    indexes = chunks.column("chunk_index").to_numpy()
    if not ids.equals(sides.column("doc_id").combine_chunks()) \
            or not np.array_equal(indexes, sides.column("chunk_index").to_numpy()):
        raise ValueError("the chunk shard's rows are not its sidecar's, in the same order")
    rows = chunks.num_rows
    if rows == 0:
        return []
    # Each run of rows with one doc_id is a document: checked per run with numpy's reduceat,
    # never a Python step per row (a night verifies every previous chunk shard).
    changes = pc.not_equal(ids.slice(1), ids.slice(0, rows - 1)).to_numpy(zero_copy_only=False)
    starts = np.concatenate(([0], np.flatnonzero(changes) + 1)).astype(np.int64)
    counts = np.diff(np.append(starts, rows))
    first_of_row = np.repeat(starts, counts)

    def per_document(bad: np.ndarray) -> np.ndarray:
        return np.logical_or.reduceat(np.asarray(bad, bool), starts)

    bad_prefix = per_document(np.zeros(rows, bool) if intact else _prefix_problems(chunks))
    out_of_order = per_document((indexes != np.arange(rows) - first_of_row)
                                | (sides.column("doc_chunks").to_numpy() != np.repeat(counts, counts)))
    keys = sides.column("carry_key").combine_chunks()
    firsts = keys.take(pa.array(first_of_row))
    same_key = pc.or_(pc.fill_null(pc.equal(keys, firsts), False),
                      pc.and_(pc.is_null(keys), pc.is_null(firsts)))
    mixed_keys = per_document(~same_key.to_numpy(zero_copy_only=False))
    uneven_terms = per_document(pc.not_equal(pc.list_value_length(sides.column("term_ids")),
                                             pc.list_value_length(sides.column("term_counts"))).to_numpy(
                                                 zero_copy_only=False))
    failed_header = per_document(pc.starts_with(chunks.column("context_status"), FAILED).to_numpy(
        zero_copy_only=False))
    vectors = _vector_problems(chunks, dim, normalize) if dim is not None else None
    bad_vector = (per_document(np.fromiter((v is not None for v in vectors), bool, rows))
                  if vectors is not None else np.zeros(len(starts), bool))
    doc_ids = ids.take(pa.array(starts)).to_pylist()
    first_keys = keys.take(pa.array(starts)).to_pylist()
    found = []
    for document, (doc_id, key) in enumerate(zip(doc_ids, first_keys)):
        problem = None
        if bad_prefix[document]:
            problem = "a row's search_text does not end with its text"
        elif out_of_order[document]:
            problem = "its chunks are not all there, in order"
        elif mixed_keys[document]:
            problem = "its rows disagree on the carry key"
        elif uneven_terms[document]:
            problem = "term ids and counts differ in length"
        elif failed_header[document]:
            problem = "a contextual header failed: asked for again"
        elif bad_vector[document] and vectors is not None:
            begin = int(starts[document])
            first = next(v for v in vectors[begin:begin + int(counts[document])] if v is not None)
            problem = f"stored vector: {first}"
        found.append((doc_id, key, problem))
    return found


DAMAGED = "damaged"


class PairIndex(NamedTuple):
    """The documents of one previous pair whose rows pass their check, in shard order, as
    arrays: a pair is one element, never one per document."""

    pair: int  # index into CarrySource.pairs
    doc_ids: pa.Array  # string
    keys: pa.Array  # string: each one's carry key


class _IndexPair(beam.DoFn):
    """A pair's index -> its :class:`PairIndex`: the documents whose rows pass their check; the
    others (and every document of a pair that cannot be read) are counted and computed again
    (tagged ``damaged``)."""

    def __init__(self, source: CarrySource) -> None:
        self.source = source
        self.rejected = Metrics.counter(*CARRY_REJECTED)

    def process(self, pair: int) -> Iterable[Any]:  # PairIndex, or tagged damaged
        chunk_path, side_path = self.source.pairs[pair]
        try:
            found = verify_pair(chunk_path, side_path, self.source.dim, self.source.normalize,
                                self.source.deleted_of(pair), self.source.side_deleted_of(pair))
        except Exception as exc:  # noqa: BLE001 - a damaged file raises whatever arrow raises
            self.rejected.inc(_sidecar_documents(side_path))
            log.warning("carry: %s unreadable (%s: %s); its documents are computed again",
                        chunk_path, type(exc).__name__, exc)
            # Which documents it held may be unreadable too: its shard (transforms/settle.py
            # reads every settled document of that shard again).
            named = shard_name(chunk_path)
            if named is not None:
                yield beam.pvalue.TaggedOutput(DAMAGED, named[1])
            return
        ids, keys = [], []
        for doc_id, key, problem in found:
            if problem is not None:
                self.rejected.inc()
                log.warning("carry: %s in %s: %s; computed again", doc_id, chunk_path, problem)
                yield beam.pvalue.TaggedOutput(DAMAGED, doc_id)
                continue
            ids.append(doc_id)
            keys.append(key)
        yield PairIndex(pair, pa.array(ids, pa.string()), pa.array(keys, pa.string()))


CARRIED = "carried"


def _passed_rows(doc_ids: pa.Array, redecided: pa.Array | None) -> np.ndarray:
    """Per entry of ``doc_ids``, whether the run passes the document by: with ``redecided``
    (the documents a rerun decides on again, ``transforms/settle.py``), every other one; one
    hash lookup of the whole column (``pyarrow.compute.is_in``), never a Python step per
    document. None: nothing is passed by."""
    if redecided is None or not len(doc_ids):
        return np.zeros(len(doc_ids), bool)
    return ~pc.is_in(doc_ids, value_set=redecided).to_numpy(zero_copy_only=False)


class _PairEntries(beam.DoFn):
    """A :class:`PairIndex` (and, a side input, the documents the run passes by: None, none)
    -> ``(doc_id, CarryEntry)`` for each document the run decides on, and, tagged
    ``carried``, ``(pair, doc ids)`` of the kept ones passed by: their rows are carried as
    they lie, without an element each (a kept document passed by without previous chunks has
    none to carry)."""

    def __init__(self) -> None:
        self.carried = progress_counter(*DOCUMENTS_CARRIED)

    def process(self, index: PairIndex, redecided: pa.Array | None = None) -> Iterable[Any]:
        # A pair's rows are a kept document's chunks: one passed by is carried as it lies.
        found = _passed_rows(index.doc_ids, redecided)
        if found.any():
            carried = index.doc_ids.filter(pa.array(found)).to_pylist()
            self.carried.inc(len(carried))
            yield beam.pvalue.TaggedOutput(CARRIED, (index.pair, tuple(carried)))
        ids, keys = index.doc_ids, index.keys
        if found.any():
            ids, keys = ids.filter(pa.array(~found)), keys.filter(pa.array(~found))
        for doc_id, key in zip(ids.to_pylist(), keys.to_pylist()):
            yield doc_id, CarryEntry(key, index.pair)


def _sidecar_documents(side_path: str) -> int:
    try:
        with FileSystems.open(side_path) as handle:
            ids = pq.read_table(handle, columns=["doc_id"]).column("doc_id")
        return len(set(ids.to_pylist()))
    except Exception:  # noqa: BLE001 - both halves unreadable: nothing to count
        return 0


class PreviousDocument(NamedTuple):
    status: str
    input_digest: str  # "" from a run before input digests, or for a rejected document


class _PreviousDocuments(beam.DoFn):
    """A documents shard of the previous run (with its deleted positions) -> ``(doc_id,
    PreviousDocument)`` per live row. The
    shard only tells apart why documents were computed, so an unreadable one is logged and its
    documents counted as changed, never a failed run."""

    def process(self, shard: tuple[str, Deletions], redecided: pa.Array | None = None
                ) -> Iterable[tuple[str, PreviousDocument]]:
        path, deletions = shard
        try:
            deleted = deletions.positions()  # its shard's deletion file, read here only
            with FileSystems.open(path) as handle:
                names = pq.read_schema(handle).names
                handle.seek(0)
                columns = ["doc_id", "status"] + (["input_digest"] if "input_digest" in names else [])
                table = _live(pq.read_table(handle, columns=columns), deleted)
        except Exception as exc:  # noqa: BLE001 - a damaged file raises whatever arrow raises
            log.warning("carry: %s unreadable (%s: %s); its documents count as changed",
                        path, type(exc).__name__, exc)
            return
        # A document the run passes by is decided on by no one: its row is not wanted.
        found = _passed_rows(table.column("doc_id").combine_chunks(), redecided)
        found &= pc.not_equal(table.column("status"), "rejected").to_numpy(zero_copy_only=False)
        if found.any():
            table = table.filter(pa.array(~found))
        digests = (table.column("input_digest").to_pylist() if "input_digest" in table.schema.names
                   else [""] * table.num_rows)
        for doc_id, status, digest in zip(table.column("doc_id").to_pylist(),
                                          table.column("status").to_pylist(), digests):
            yield doc_id, PreviousDocument(status, digest or "")


class VerifiedPairs(NamedTuple):
    pairs: PCollection  # PairIndex per previous pair
    # doc_ids whose rows failed their check, chunk shards (int) whose previous file is unreadable
    damaged: PCollection


class VerifyPairs(beam.PTransform):
    """root -> :class:`VerifiedPairs`: each previous pair read once and checked."""

    def __init__(self, source: CarrySource) -> None:
        super().__init__()
        self.source = source

    def expand(self, root):
        verified = (root
                    | "Pairs" >> beam.Create(list(range(len(self.source.pairs))))
                    | "Verify" >> beam.ParDo(_IndexPair(self.source)).with_outputs(DAMAGED, main="pairs"))
        return VerifiedPairs(verified.pairs, verified[DAMAGED])


class CarryIndexOutputs(NamedTuple):
    entries: PCollection  # (doc_id, CarryEntry): the previous documents whose rows may be carried
    documents: PCollection  # (doc_id, PreviousDocument): every document the previous run read
    # (pair, doc ids): the kept documents passed by, carried without a decision (None: none)
    carried: PCollection | None = None


class CarryIndex(beam.PTransform):
    """:class:`PairIndex` per pair -> :class:`CarryIndexOutputs`: the previous run's carriable
    documents, and what it read; with ``redecided`` (a singleton: the ids of the documents a
    rerun decides on again, ``transforms/settle.py``), every other document is passed by and
    leaves the index as arrays per pair (``carried``), and only those meet this run's
    decisions, one element each."""

    def __init__(self, source: CarrySource, redecided: PCollection | None = None) -> None:
        super().__init__()
        self.source, self.passed = source, redecided

    def expand(self, pairs):
        side = (AsSingleton(self.passed),) if self.passed is not None else ()
        indexed = pairs | "Entries" >> beam.ParDo(_PairEntries(), *side).with_outputs(CARRIED, main="entries")
        documents = (pairs.pipeline
                     | "DocumentShards" >> beam.Create(list(self.source.document_files()))
                     | "ReadDocuments" >> beam.ParDo(_PreviousDocuments(), *side).with_output_types(
                         tuple[str, PreviousDocument]))
        return CarryIndexOutputs(indexed.entries, documents,
                                 indexed[CARRIED] if self.passed is not None else None)


class CarryDecisions(beam.DoFn):
    """``(doc_id, {"decision": [dedupe decision], "previous": [CarryEntry], "documents":
    [PreviousDocument]})`` -> the decision, marked ``carried`` when the document is kept under
    the key its previous rows were made with, and, tagged ``carried``, ``(pair, doc_id)``.

    Every other kept document is counted by why it is computed: ``changed`` (its input is not
    the previous run's), ``redone`` (the same input, moved by a corpus-wide change: a line that
    turned boilerplate, a survivor that left, other processing) or ``new`` (the previous run
    did not read it); ``recomputed`` is changed + redone. ``gone``: kept then, not now."""

    def __init__(self) -> None:
        self.carried = progress_counter(*DOCUMENTS_CARRIED)
        self.recomputed = Metrics.counter(*DOCUMENTS_RECOMPUTED)
        self.changed = Metrics.counter(*DOCUMENTS_CHANGED)
        self.redone = Metrics.counter(*DOCUMENTS_REDONE)
        self.new = Metrics.counter(*DOCUMENTS_NEW)
        self.gone = Metrics.counter(*DOCUMENTS_GONE)

    def process(self, joined):
        doc_id, groups = joined
        previous = next(iter(groups["previous"]), None)
        read_before = next(iter(groups["documents"]), None)
        kept = False
        for decision in groups["decision"]:
            if decision.status != KEPT:
                yield decision
                continue
            kept = True
            if previous is not None and previous.carry_key == decision.carry_key:
                self.carried.inc()
                yield decision._replace(carried=True)
                yield beam.pvalue.TaggedOutput("carried", (previous.pair, doc_id))
                continue
            if read_before is None and previous is None:
                self.new.inc()
            else:
                self.recomputed.inc()
                same_input = (read_before is not None and read_before.input_digest != ""
                              and read_before.input_digest == decision.input_digest)
                (self.redone if same_input else self.changed).inc()
            yield decision
        was_kept = previous is not None or (read_before is not None and read_before.status == KEPT)
        if was_kept and not kept:
            self.gone.inc()


class CarriedPart(NamedTuple):
    """Which documents of one previous pair go into one chunk shard of this run."""

    pair: int  # index into CarrySource.pairs
    doc_ids: tuple[str, ...]  # sorted


def _flat_ints(column: pa.ChunkedArray) -> np.ndarray:
    return pc.list_flatten(column).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


# Sidecar rows a carried pair is read by at a time: a pair is a previous chunk shard, a
# share of the corpus, whose term lists are most of its bytes.
SIDE_BATCH_ROWS = 65_536


def _pair_stats(side_path: str, wanted: Sequence[str], deleted: Sequence[int] = ()
                ) -> tuple[CorpusStats, int]:
    """The carried chunks' partial CorpusStats (their rows, summed term counts and each term's
    df) and how many of ``wanted`` the sidecar holds, read :data:`SIDE_BATCH_ROWS` rows at a
    time: the pair's term lists are never held whole."""
    value_set = pa.array(wanted, pa.string())
    gone = np.asarray(deleted, np.int64)
    rows = length = 0
    found: list[pa.Array] = []
    terms: list[np.ndarray] = []
    frequencies: list[np.ndarray] = []
    first = 0
    with FileSystems.open(side_path) as handle:
        for batch in pq.ParquetFile(handle).iter_batches(
                batch_size=SIDE_BATCH_ROWS, columns=["doc_id", "term_ids", "term_counts"]):
            keep = pc.is_in(batch.column("doc_id"), value_set=value_set).to_numpy(zero_copy_only=False)
            if len(gone):
                keep[gone[(gone >= first) & (gone < first + batch.num_rows)] - first] = False
            first += batch.num_rows
            if not keep.any():
                continue
            mine = batch.filter(pa.array(keep))
            rows += mine.num_rows
            length += int(_flat_ints(mine.column("term_counts")).sum())
            found.append(pc.unique(mine.column("doc_id")))
            ids, counts = np.unique(_flat_ints(mine.column("term_ids")), return_counts=True)
            terms.append(ids)
            frequencies.append(counts)
    held = len(pc.unique(pa.concat_arrays(found))) if found else 0
    if not terms:
        return CorpusStats(rows, length, {}), held
    every, at = np.unique(np.concatenate(terms), return_inverse=True)
    df = np.bincount(at, weights=np.concatenate(frequencies), minlength=len(every)).astype(np.int64)
    return CorpusStats(rows, length, dict(zip(every.tolist(), df.tolist()))), held


class _CarryFromPair(beam.DoFn):
    """``(pair, doc ids)`` -> ``(shard, CarriedPart)`` per chunk shard of this run those
    documents go to, and, tagged ``stats``, one partial CorpusStats of their chunks' term
    counts (read from the sidecar alone): the rows themselves are only read where their shard
    is written, as Arrow tables, never as one element per chunk."""

    def __init__(self, source: CarrySource, shards: int, shard_of: Callable[[str, int], int]) -> None:
        self.source, self.shards, self.shard_of = source, shards, shard_of
        self.chunks = progress_counter(*CHUNKS_CARRIED)

    def process(self, keyed: tuple[int, Iterable[str | tuple[str, ...]]]):
        pair, carried = keyed
        # One document a decision carried, or all those of the pair the run passed by.
        wanted = sorted({doc_id for held in carried
                         for doc_id in ((held,) if isinstance(held, str) else held)})
        _, side_path = self.source.pairs[pair]
        stats, found = _pair_stats(side_path, wanted, self.source.deleted_of(pair))
        if found != len(wanted):
            raise RuntimeError(f"carry: {len(wanted) - found} documents of {side_path} are "
                               f"gone from it: the previous run changed during this one")
        self.chunks.inc(stats.documents)
        yield beam.pvalue.TaggedOutput("stats", stats)
        named = shard_name(self.source.pairs[pair][0])
        if (named is not None and named[2] == self.shards and self.shard_of is shard_of and wanted
                and shard_of(wanted[0], self.shards) == named[1]):
            # The pair's rows were cut into this run's shard count by this very function
            # (transforms/write.py names each file by the shard of its rows): all go to its
            # shard, without a hash per document.
            yield named[1], CarriedPart(pair, tuple(wanted))
            return
        by_shard: dict[int, list[str]] = {}
        for doc_id in wanted:
            by_shard.setdefault(self.shard_of(doc_id, self.shards), []).append(doc_id)
        for shard, ids in sorted(by_shard.items()):
            yield shard, CarriedPart(pair, tuple(ids))


class CarriedOutputs(NamedTuple):
    parts: PCollection  # (shard, CarriedPart): what each chunk shard of this run takes over
    stats: PCollection  # CorpusStats of the carried chunks, one partial per previous pair


class CarriedShards(beam.PTransform):
    """``PCollection[(pair, doc_id or doc ids)]`` -> :class:`CarriedOutputs`; the shard writer
    reads the rows with :class:`CarriedRows`."""

    def __init__(self, source: CarrySource, shards: int, shard_of: Callable[[str, int], int],
                 shares: int = 1024) -> None:
        super().__init__()
        self.source, self.shards, self.shard_of, self.shares = source, shards, shard_of, shares

    def expand(self, carried: PCollection):
        parted = (carried
                  | "GroupByPair" >> GroupInShares(self.shares)
                  | "Parts" >> beam.ParDo(_CarryFromPair(self.source, self.shards, self.shard_of))
                  .with_outputs("stats", main="parts"))
        return CarriedOutputs(parted.parts, parted.stats)


def stored_weights(counts: pa.ChunkedArray | pa.Array, reference_avgdl: float,
                   options: SparseOptions) -> pa.Array:
    """Every row's stored BM25 weights from its term counts, as
    ``chunkline.sparse.document_weights`` gives them (the same float64 operations in the same
    order, then float32), for a whole column at once."""
    counts = counts.combine_chunks() if isinstance(counts, pa.ChunkedArray) else counts
    offsets = counts.offsets.to_numpy().astype(np.int64)  # a slice's offsets need not start at 0
    offsets = offsets - offsets[0]
    tf = pc.list_flatten(counts).to_numpy(zero_copy_only=False).astype(np.float64)
    starts = offsets[:-1]
    lengths = np.zeros(len(starts), dtype=np.float64)
    filled = offsets[1:] > starts
    lengths[filled] = np.add.reduceat(tf, starts[filled]) if filled.any() else 0
    if reference_avgdl:
        norm = options.k1 * ((1 - options.b) + (options.b * lengths) / reference_avgdl)
    else:
        norm = np.full(len(starts), float(options.k1))
    per_term = np.repeat(norm, np.diff(offsets))
    weights = (tf / (tf + per_term)).astype(np.float32)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(weights, pa.float32()))


class Referenced(NamedTuple):
    """A previous pair that keeps its carried rows in place: this run lists it with ``deleted``
    (the positions of its rows no longer live, those deleted before included)."""

    pair: int
    chunk_path: str
    side_path: str
    rows: int
    deleted: tuple[int, ...]


class CarriedRows:
    """Where a shard's carried rows come from: :meth:`referenced` says which previous pairs keep
    them in place; ``(CarriedParts, *side)`` -> ``(chunk rows, sidecar rows)`` as Arrow tables in
    this run's schemas for the others: the carried documents' rows read from their previous
    pairs, their alignment checked again, a header written by an earlier run marked as one the cache gave back (``cached``, as a
    rebuild reading the same cache marks it), and their BM25 weights computed afresh from the
    sidecar's term counts against this run's reference (``weigh``: the shard writer's
    :class:`chunkline.transforms.sparse.BM25Weights`, with the statistics as ``side``)."""

    def __init__(self, source: CarrySource, schema: pa.Schema, side_schema: pa.Schema,
                 weights: Any = None) -> None:
        self.source, self.schema, self.side_schema, self.weights = source, schema, side_schema, weights

    def referenced(self, shard_path: str, parts: Sequence[CarriedPart], new_rows: bool, *side
                   ) -> tuple[list[Referenced], list[CarriedPart]]:
        """Which previous pairs keep the carried rows of the shard written at ``shard_path`` where
        they lie (merge-on-read: the pair is referenced, the rows of its documents not carried
        become deleted positions), and the parts whose rows this run writes again, with its new
        rows (``new_rows``: it has some). A pair is referenced when it is this shard (the same
        file name: the same shard of as many), holds this run's columns, and its carried rows
        are what this run would write: no header to mark ``cached`` and every stored weight what
        this run computes (a re-based BM25 reference changes every row: every pair is written
        again, once). Compaction: a pair more than ``chunkline.transforms.write.MOST_DEAD`` of
        whose rows would be deleted is written again when the plan allows it
        (``CarrySource.compactable``), past ``HARD_MOST_DEAD`` always
        (``chunkline.transforms.write.compacted``); and a
        shard lists at most ``chunkline.index.compaction.MOST_FILES`` files: when it would list more,
        every referenced pair but the one with the most live rows is merged into this run's
        file."""
        by_pair: dict[int, set[str]] = {}
        for part in parts:
            by_pair.setdefault(part.pair, set()).update(part.doc_ids)
        kept: list[Referenced] = []
        again: list[CarriedPart] = []
        for pair, doc_ids in sorted(by_pair.items()):
            found = self._reference(pair, doc_ids, shard_path, *side)
            if found is None:
                again.append(CarriedPart(pair, tuple(sorted(doc_ids))))
            else:
                kept.append(found)
        if len(kept) + (1 if new_rows or again else 0) > compaction.MOST_FILES:
            kept.sort(key=lambda ref: (-(ref.rows - len(ref.deleted)), ref.pair))
            for ref in kept[1:]:
                again.append(CarriedPart(ref.pair, tuple(sorted(by_pair[ref.pair]))))
            kept = kept[:1]
        return sorted(kept, key=lambda ref: ref.pair), sorted(again)

    def _reference(self, pair: int, doc_ids: set[str], shard_path: str, *side) -> Referenced | None:
        chunk_path, side_path = self.source.pairs[pair]
        if not same_output(chunk_path, shard_path):
            return None  # a run of another output (output.previous): a manifest names only its own
        if chunk_path.rsplit("/", 1)[-1] != shard_path.rsplit("/", 1)[-1]:
            return None  # another shard (the shard count changed): its rows move
        try:
            with FileSystems.open(chunk_path) as handle:
                # Stored as this run stores it: a file of an older layout (vectors as Arrow's
                # fixed-size list, which Polars' Iceberg reader refuses) is written anew.
                if pq.read_schema(handle) != parquet_schema(self.schema):
                    return None
                handle.seek(0)
                chunks = pq.read_table(handle, columns=["doc_id", "chunk_index", "context_status",
                                                       "sparse_values"])
            with FileSystems.open(side_path) as handle:
                if pq.read_schema(handle) != self.side_schema:
                    return None
                handle.seek(0)
                sides = pq.read_table(handle, columns=["doc_id", "chunk_index", "term_counts"])
        except Exception:  # noqa: BLE001 - unreadable now: the rows path says why
            return None
        if not chunks.column("doc_id").equals(sides.column("doc_id")) \
                or not chunks.column("chunk_index").equals(sides.column("chunk_index")):
            return None
        live = pc.is_in(chunks.column("doc_id"), value_set=pa.array(sorted(doc_ids), pa.string()))
        live = np.array(live.to_numpy(zero_copy_only=False), dtype=bool)
        previously = self.source.deleted_of(pair)
        live[np.asarray(previously, dtype=np.int64)] = False
        deleted = tuple(np.flatnonzero(~live).tolist())
        if compacted(chunk_path, len(deleted), chunks.num_rows, self.source.compactable):
            return None  # compacted: its live rows are written again
        mask = pa.array(live)
        if pc.any(pc.equal(chunks.column("context_status").filter(mask), OK)).as_py():
            return None
        if self.weights is not None and side:
            weights = stored_weights(sides.column("term_counts"),
                                     self.weights.reference(side[0]), self.weights.options)
            if not chunks.column("sparse_values").combine_chunks().filter(mask).equals(weights.filter(mask)):
                return None
        return Referenced(pair, chunk_path, side_path, chunks.num_rows, deleted)

    def __call__(self, parts: Sequence[CarriedPart], *side) -> tuple[pa.Table, pa.Table, np.ndarray]:
        """``(chunk rows, sidecar rows, carried)``: every row of the parts' previous pairs and,
        per row, whether its document is carried; the writer takes the carried ones in the
        same step that sorts them in, so the shard is copied once, not filtered first."""
        chunk_tables, side_tables, masks = [], [], []
        for part in sorted(parts):
            chunk_path, side_path = self.source.pairs[part.pair]
            wanted = pa.array(part.doc_ids, pa.string())
            with FileSystems.open(chunk_path) as handle:
                chunks = pq.read_table(handle)
            with FileSystems.open(side_path) as handle:
                sides = pq.read_table(handle)
            try:
                chunks = chunks.select(self.schema.names).cast(self.schema)
                sides = sides.select(self.side_schema.names).cast(self.side_schema)
            except (KeyError, ValueError, pa.ArrowInvalid) as exc:
                raise RuntimeError(f"carry: {chunk_path} does not hold this run's columns "
                                   f"({exc}): the previous run changed during this one") from None
            if not (chunks.column("doc_id").equals(sides.column("doc_id"))
                    and chunks.column("chunk_index").equals(sides.column("chunk_index"))):
                raise RuntimeError(f"carry: {chunk_path} no longer lines up with its sidecar: the "
                                   f"previous run changed during this one")
            mask = np.array(pc.is_in(chunks.column("doc_id"), value_set=wanted).to_numpy(
                zero_copy_only=False), dtype=bool)
            mask[np.asarray(self.source.deleted_of(part.pair), dtype=np.int64)] = False
            masks.append(mask)
            chunk_tables.append(chunks)
            side_tables.append(sides)
        chunks = pa.concat_tables(chunk_tables) if chunk_tables else self.schema.empty_table()
        sides = pa.concat_tables(side_tables) if side_tables else self.side_schema.empty_table()
        carried = np.concatenate(masks) if masks else np.zeros(0, dtype=bool)
        status = chunks.column("context_status")
        chunks = chunks.set_column(
            chunks.schema.get_field_index("context_status"), self.schema.field("context_status"),
            pc.if_else(pc.equal(status, OK), CACHED, status))
        if self.weights is not None and side:
            reference = self.weights.reference(side[0])
            chunks = chunks.set_column(
                chunks.schema.get_field_index("sparse_values"), self.schema.field("sparse_values"),
                stored_weights(sides.column("term_counts"), reference, self.weights.options))
            chunks = chunks.set_column(
                chunks.schema.get_field_index("sparse_indices"), self.schema.field("sparse_indices"),
                sides.column("term_ids"))
        return chunks, sides, carried


def _with_carry_keys(element: DocumentChunks, keys: CarryKeys) -> DocumentChunks:
    key = keys(element.document)
    return dataclasses.replace(element, chunks=tuple(
        dataclasses.replace(chunk, carry_key=key) for chunk in element.chunks))


class SetCarryKeys(beam.PTransform):
    """``PCollection[DocumentChunks]`` -> the same, each chunk holding its document's carry key
    (what the sidecar keeps for the next run)."""

    def __init__(self, source: CarrySource) -> None:
        super().__init__()
        self.keys = CarryKeys(source)

    def expand(self, elements: PCollection[DocumentChunks]) -> PCollection[DocumentChunks]:
        # Not beam.Map(fn, keys): that Map would hold its last element (transforms/elementwise.py).
        return elements | "CarryKey" >> beam.ParDo(MapWith(_with_carry_keys, self.keys)).with_output_types(
            DocumentChunks)
