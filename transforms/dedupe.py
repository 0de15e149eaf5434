"""DEDUPE: exact duplicates (same normalized text) and near duplicates (MinHash LSH), one survivor
per cluster, every other document recorded with ``duplicate_of``; never lost.

Near duplicates, as a graph of shuffles (no step ever sees all documents at once):

    documents -> signatures (batched numpy MinHash)             (node, signature)
              -> band keys -> GroupByKey per band key            candidate pairs per bucket
              -> each pair's nodes joined with their signatures   verified: est. Jaccard >= threshold
              -> edges only -> star rounds, grouped by node      node -> smallest node of its component
              -> join with the exact stage's statuses            kept | duplicate_of = final survivor

A node is ``chunkline.minhash.survivor_key(...)``: a sortable tuple ending with the doc_id, so
"the smallest node of a component" is the survivor under the configured rule, whatever order
the runner groups in.

With access control on (``chunkline.access``) documents that different principals may read
never merge: exact duplicates group by (access digest, doc_hash), a node starts with its
document's access digest, every band key is prefixed with it (so an LSH bucket holds one access
set) and a candidate pair of two sets is never verified. A public page and its restricted twin
each stay in their own cluster: merging them would drop one, and with it who may read it.

Only small records cross these shuffles: each document is parked in a part file
(``transforms/spill.py``) and summarized (ids, place, where it is parked, hashes, length,
MinHash signature) where it arrives, and every decision is taken on the summaries. The
decisions then go to the parts their documents are in, and each part is read once to release
its documents with their statuses. No document crosses a shuffle: a runner that buffers what
does (the in-process FnApiRunner keeps it in memory) holds summaries, not the corpus's text.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.access import access_digest
from chunkline.graph import final_root, label, large_star, settled, small_star, unsettled_edges
from chunkline.minhash import (
    Components,
    MinHasher,
    MinHashOptions,
    band_digests,
    band_key_array,
    bucket_pairs,
    estimate_jaccard,
    is_empty,
    shared_keys,
    survivor_key,
)
from chunkline.readers import JSONL_EXTENSIONS, locator, relative_id
from chunkline.readers.paths import record_extension
from chunkline.records import (
    DUPLICATE,
    KEPT,
    Document,
    DocumentStatus,
    Rejected,
    doc_hash,
    text_digest,
)
from chunkline.memo import DOC_HASH, SIGNATURE, MemoSource
from chunkline.state import StateRow, facts_digest, pack_bands, state_row
from chunkline.transforms import coders  # noqa: F401 - registers the record coders these shuffles use
from chunkline.transforms.shares import GroupInShares, JoinInShares
from chunkline.transforms.memo import MemoUse, recalled_doc_hash, without_memo
from chunkline.transforms.memory import release_after
from chunkline.transforms.spill import PartWriter, RemoveParts, coder_of, default_spill_dir, read_part

if TYPE_CHECKING:  # loaded when carrying is on (Dedupe.expand)
    from chunkline.transforms.carry import CarryIndexOutputs

# Documents per signature batch: numpy's per-call overhead is paid once per batch (~2.5x the
# throughput of one document per call, bench/dedupe_bench.py).
_SIGNATURE_BATCH = 64
_SIGNATURE_DTYPE = "<u4"  # fixed byte order: signatures travel between workers as bytes

class DedupeOutputs(NamedTuple):
    kept: PCollection[Document]  # one document per id and per (near) duplicate cluster
    statuses: PCollection[DocumentStatus]  # exactly one per input document not rejected
    rejected: PCollection[Rejected]  # id conflicts
    # (pair, doc_id) of each kept document whose rows are carried (not in ``kept``); None
    # without a carry index.
    carried: PCollection | None = None
    # A chunkline.state.StateRow per decided document: what the run's state table holds.
    state: PCollection[StateRow] | None = None


Occurrence = tuple[str, int]  # (part path, index): where one record read is parked


class _Summary(NamedTuple):
    """A document as dedupe decides on it, without its text."""

    doc_id: str
    uri: str
    position: int
    text_digest: bytes  # chunkline.memo.text_digest: tells two records under one id apart
    digest: str  # chunkline.records.doc_hash: equal for exact duplicates
    occurrence: Occurrence
    carry_key: str = ""  # transforms/carry.py: its rows may come from the previous run
    input_digest: str = ""  # chunkline.records.input_digest: what the reader made of its input
    access: str = ""  # chunkline.access.access_digest of its principals; "": access control off

    @property
    def ref(self) -> tuple[str, int, bytes]:
        """Which record of its doc_id this is."""
        return self.uri, self.position, self.text_digest


def _summarize(doc: Document, occurrence: Occurrence,
               carry_keys: Callable[[Document], str] | None = None,
               hash_of: Callable[[Document], str] = lambda doc: doc_hash(doc.text)) -> _Summary:
    return _Summary(doc.doc_id, doc.uri, doc.position, text_digest(doc.text), hash_of(doc),
                    occurrence, carry_keys(doc) if carry_keys is not None else "",
                    doc.input_digest,
                    access_digest(doc.principals) if doc.principals is not None else "")


def _exact_key(summary: _Summary) -> str:
    """What exact duplicates share: the normalized text's hash, within one access set (the
    access digest has a fixed length, so the two parts never run into each other)."""
    return summary.access + summary.digest


class _Decision(NamedTuple):
    """What becomes of the record parked at ``occurrence`` under ``doc_id``: KEPT, or DUPLICATE
    of ``duplicate_of``."""

    doc_id: str
    occurrence: Occurrence
    digest: str
    status: str
    duplicate_of: str | None = None
    carry_key: str = ""
    carried: bool = False  # kept, and its chunks come from the previous run: not released
    input_digest: str = ""


def _decision(summary: _Summary, status: str, duplicate_of: str | None = None) -> _Decision:
    return _Decision(summary.doc_id, summary.occurrence, summary.digest, status, duplicate_of,
                     summary.carry_key, input_digest=summary.input_digest)


def _input_order(summary: _Summary) -> tuple[tuple[str, int, bytes], Occurrence]:
    """Files by uri, records by their line or row: the order of the input itself, whatever order
    the runner groups in (a digest of the text only breaks a tie between copies of one file;
    where it is parked, between two reads of one record, which are the same)."""
    return summary.ref, summary.occurrence


def _where(path: str, record: _Summary | Document) -> str:
    """``file:line`` of a JSONL record (``dump.jsonl.gz:5`` for a compressed one), ``file#row<n>``
    of a Parquet row, the file else; ``path`` is the record's file as the reason names it."""
    if record_extension(record.uri) in JSONL_EXTENSIONS:
        return f"{path}:{record.position}"
    return locator(path, record.position)


def _relative_path(uri: str, roots: Sequence[str]) -> str:
    """``uri`` relative to the longest of ``roots`` it is under (as the read stage makes file
    ids, ``chunkline.readers.relative_id``), else the uri itself."""
    for root in sorted(roots, key=len, reverse=True):
        relative = relative_id(uri, root)
        if relative != uri:
            return relative
    return uri


class _OneDocumentPerId(beam.DoFn):
    """Two different documents under one id would make chunk ids ambiguous: the first in input
    order (:func:`_input_order`) keeps the id; each other one is rejected under its own
    locator (``file#L<line>``, ``file#row<n>``, or the file), its file relative to the input
    root it is under as every other id is, so the documents table still has one row per
    doc_id, with a reason naming where both records are."""

    def __init__(self, roots: Sequence[str] = ()) -> None:
        self.roots = tuple(roots)
        self.conflicts = Metrics.counter("dedupe", "id_conflicts")

    def process(self, keyed: tuple[str, Iterable[_Summary]]):
        _, summaries = keyed
        first, *others = sorted(summaries, key=_input_order)
        yield first
        kept_at = _where(_relative_path(first.uri, self.roots), first)
        for other in others:
            self.conflicts.inc()
            path = _relative_path(other.uri, self.roots)
            reason = (f"duplicate doc_id {other.doc_id!r}: {_where(path, other)} repeats the id "
                      f"of {kept_at}, which is kept")
            yield beam.pvalue.TaggedOutput(
                "rejected", Rejected(other.uri, locator(path, other.position), reason)
            )


class _RenameTakenIds(beam.DoFn):
    """One doc_id's kept or duplicate rows ("taken") and rejected records. Rejections made
    before dedupe (a record emptied by cleaning, a file named like another file's record
    locator) keep the id their record had, which a kept document may also hold: the kept row
    keeps it, and so does the first rejection when no row does; the others get ``<id>#rejected-N``
    so the documents table has one row per doc_id."""

    def __init__(self) -> None:
        self.renamed = Metrics.counter("dedupe", "rejected_ids_renamed")

    def process(self, joined: tuple[str, dict[str, Iterable]]):
        doc_id, groups = joined
        rejected = sorted(groups["rejected"], key=lambda r: (r.uri, r.reason))
        if not list(groups["taken"]) and rejected:
            yield rejected.pop(0)
        for number, record in enumerate(rejected, start=1):
            self.renamed.inc()
            yield dataclasses.replace(
                record, doc_id=f"{doc_id}#rejected-{number}",
                reason=f"{record.reason} (its id {doc_id!r} belongs to another row)")


class UniqueRejectedIds(beam.PTransform):
    """``(statuses of kept and duplicate documents, rejected records)`` -> the rejected records,
    renamed where their doc_id is another row's (see :class:`_RenameTakenIds`). Only ids cross
    the shuffle, never a document's text."""

    def __init__(self, shares: int = 1024) -> None:
        super().__init__()
        self.shares = shares

    def expand(self, inputs):
        statuses, rejected = inputs
        return (
            {
                "taken": statuses | "TakenIds" >> beam.Map(lambda s: (s.doc_id, None)).with_output_types(
                    tuple[str, None]),
                "rejected": rejected | "KeyRejected" >> beam.Map(lambda r: (r.doc_id, r)).with_output_types(
                    tuple[str, Rejected]),
            }
            | "JoinIds" >> JoinInShares(self.shares)
            | "Rename" >> beam.ParDo(_RenameTakenIds())
        )


class _PickSurvivor(beam.DoFn):
    """Smallest doc_id survives: deterministic whatever order the runner groups in."""

    def __init__(self) -> None:
        self.duplicates = Metrics.counter("dedupe", "exact_duplicates")

    def process(self, keyed: tuple[str, Iterable[_Summary]]):
        _, summaries = keyed
        ordered = sorted(summaries, key=lambda s: s.doc_id)
        survivor = ordered[0]
        yield survivor
        yield beam.pvalue.TaggedOutput("decisions", _decision(survivor, KEPT))
        for other in ordered[1:]:
            self.duplicates.inc()
            yield beam.pvalue.TaggedOutput("decisions", _decision(other, DUPLICATE, survivor.doc_id))


# --- Near duplicates ---------------------------------------------------------------------------


class _SignedRecord(NamedTuple):
    occurrence: Occurrence
    node: tuple
    signature: bytes  # b"" for a text without shingles


class _ParkAndSummarize(beam.DoFn):
    """A batch of documents -> each parked in a part under ``directory``, and its
    ``(doc_id, _Summary)`` and, with near-duplicate detection on, its ``(doc_id, _SignedRecord)``
    on the ``signed`` output: everything dedupe decides on, taken in one pass where the text is
    at hand. Exact duplicates and id conflicts are signed too: which records survive is known
    only after two groupings, when the text is no longer there; :class:`_SignedSurvivors`
    passes on the survivors' signatures."""

    def __init__(self, near: MinHashOptions | None, directory: str,
                 carry_keys: Callable[[Document], str] | None = None,
                 memo: MemoSource | None = None, access: bool = False) -> None:
        self._near = near
        self._access = access
        self._directory = directory
        self._carry_keys = carry_keys
        # A signature depends on the shingles, the permutations and their seed, not on the
        # threshold or bands: tuning those keeps every recorded signature.
        self._memo = MemoUse(memo if near is not None else None, SIGNATURE,
                             f"{near.shingle_size}/{near.num_perm}/{near.seed}" if near else "")
        self._hashes = MemoUse(memo, DOC_HASH, "")

    def setup(self) -> None:
        # Permutations drawn once per worker.
        self._hasher = MinHasher(self._near) if self._near is not None else None
        self._bands, self._rows = self._near.lsh() if self._near is not None else (0, 0)
        self._memo.setup()
        self._hashes.setup()

    def start_bundle(self) -> None:
        self._parts = PartWriter(self._directory, coder_of(Document))

    def finish_bundle(self) -> None:
        # Before the bundle commits the summaries that point into its parts.
        self._parts.flush()
        self._memo.flush()
        self._hashes.flush()
        release_after(self._parts.added_bytes)

    def _signatures(self, batch: list[Document], hasher: MinHasher, num_perm: int) -> list[bytes]:
        """Each text's signature as bytes (b"": no shingles); a text the previous run signed
        is recalled (``chunkline.memo``), the others signed together."""
        memo = self._memo.memo
        keys = [memo.key(doc.text) for doc in batch] if memo is not None else []
        width = 4 * num_perm  # a whole signature, or b"" (no shingles)
        found: list[bytes | None] = [None] * len(batch)
        if memo is not None:
            for index, (doc, key) in enumerate(zip(batch, keys, strict=True)):
                data = memo.recall(doc, key)
                found[index] = data if data is not None and len(data) in (0, width) else None
        missing = [index for index, data in enumerate(found) if data is None]
        signed: dict[int, bytes] = {}
        if missing:
            for index, signature in zip(missing, hasher.signatures([batch[index].text for index in missing]),
                                        strict=True):
                signed[index] = b"" if is_empty(signature) else signature.astype(_SIGNATURE_DTYPE).tobytes()
                if memo is not None:
                    memo.keep(batch[index], keys[index], signed[index])
        return [signed[index] if data is None else data for index, data in enumerate(found)]

    def _with_bands(self, batch: list[Document], signed: list[bytes]) -> list[Document]:
        """Each document with its band keys' digests recorded for the run's state table
        (``chunkline.state``); a text without shingles has none."""
        near, bands, rows = self._near, self._bands, self._rows
        present = [index for index, data in enumerate(signed) if data]
        if near is None or not present:
            return batch
        signatures = np.frombuffer(b"".join(signed[index] for index in present),
                                   dtype=_SIGNATURE_DTYPE).reshape(len(present), -1)
        prefixes = None
        if self._access:
            heads = [access_digest(batch[index].principals or ()).encode() for index in present]
            prefixes = np.frombuffer(b"".join(heads), np.uint8).reshape(len(present), -1)
        digests = band_digests(band_key_array(signatures, bands, rows, prefixes))
        marked = list(batch)
        for row, index in enumerate(present):
            marked[index] = dataclasses.replace(
                batch[index], counted=batch[index].counted + pack_bands(digests[row]))
        return marked

    def _signed(self, batch: list[Document]) -> tuple[list[bytes] | None, list[Document]]:
        """Each document's signature (None: near duplicates off) and the batch with its band
        keys recorded (:meth:`_with_bands`)."""
        hasher, near = self._hasher, self._near
        signed = (self._signatures(batch, hasher, near.num_perm)
                  if hasher is not None and near is not None else None)
        return signed, self._with_bands(batch, signed) if signed is not None else batch

    def process(self, batch: list[Document]):
        hashes = self._hashes.memo
        signed, parked = self._signed(batch)
        near = self._near
        # Parked without what it carries: nothing after dedupe reads the memo.
        summaries = [_summarize(doc, self._parts.add(without_memo(doc)), self._carry_keys,
                                lambda doc: recalled_doc_hash(hashes, doc))
                     for doc in parked]
        for summary in summaries:
            yield summary.doc_id, summary
        if signed is None or near is None:  # near-duplicate detection off
            return
        for doc, summary, data in zip(batch, summaries, signed, strict=True):
            node = survivor_key(doc.doc_id, len(doc.text), near.survivor)
            if self._access:
                # First in the node: a component never spans two access sets (the survivor
                # rule still orders within one, where every node starts alike).
                node = (summary.access, *node)
            yield beam.pvalue.TaggedOutput(
                "signed", (doc.doc_id, _SignedRecord(summary.occurrence, node, data)))


class _SignedSurvivors(beam.DoFn):
    """doc_id -> its exact-stage survivor (if any) and the signatures of its records: the
    survivor's ``(node, signature)``; one without shingles takes no part (counted)."""

    def __init__(self) -> None:
        self._unsigned = Metrics.counter("dedupe", "near_unsigned")

    def process(self, joined: tuple[str, dict]) -> Iterable[tuple[tuple, bytes]]:
        _, groups = joined
        for occurrence in groups["kept"]:
            signed = next(s for s in groups["signed"] if s.occurrence == occurrence)
            if not signed.signature:
                self._unsigned.inc()
                continue
            yield signed.node, signed.signature


def _signature(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=_SIGNATURE_DTYPE)


# Band keys are grouped in this many shares of the key space, a bundle's keys of one share
# travelling as one element: a key is never an element of its own (nearly every key is one
# document's alone), and each share can be paired on another worker.
BAND_SHARES = 256
# Band keys a bundle holds before it sends them on (counted as documents x bands): the
# signatures they come from, the keys' arrays and the shares' lists pickled when sent. As
# Python objects, before keys were made as arrays, 65,536 held ~20 MB and 262,144 ~75 MB, a
# size reached only by a worker's share of 20,000 documents or more.
_FLUSH_BANDS = 1 << 16


class _ShareBands(beam.DoFn):
    """``(node, signature)`` -> ``(share, (keys, nodes))``: every band key of a bundle's
    documents by share of the key space, a share's keys as one numpy array
    (``chunkline.minhash.band_key_array``) and ``nodes`` the node of each. The keys are made
    for the bundle's signatures together when it sends them (or every :data:`_FLUSH_BANDS`
    keys): a document costs a few numpy rows, not a ``bytes`` and a tuple per band to make,
    pickle and group. With ``access`` a node starts with its access digest, and each band key
    is prefixed with it: only one access set meets in a bucket."""

    def __init__(self, bands: int, rows: int, access: bool = False) -> None:
        self._bands, self._rows = bands, rows
        self._access = access

    def start_bundle(self) -> None:
        self._nodes: list[tuple] = []
        self._data: list[bytes] = []

    def process(self, signed: tuple[tuple, bytes]) -> Iterable[tuple[int, tuple]]:
        node, data = signed
        self._nodes.append(node)
        self._data.append(data)
        if len(self._nodes) * self._bands >= _FLUSH_BANDS:
            yield from self._flush()

    def finish_bundle(self) -> Iterable[WindowedValue]:
        for shared in self._flush():
            yield WindowedValue(shared, 0, (GlobalWindow(),))

    def _flush(self) -> list[tuple[int, tuple]]:
        nodes, data = self._nodes, self._data
        self._nodes, self._data = [], []
        if not nodes:
            return []
        signatures = np.frombuffer(b"".join(data), dtype=_SIGNATURE_DTYPE).reshape(len(nodes), -1)
        prefixes = None
        if self._access:
            heads = [node[0].encode() for node in nodes]
            if len({len(head) for head in heads}) != 1:
                raise ValueError("access digests of different lengths would mix band keys")
            prefixes = np.frombuffer(b"".join(heads), np.uint8).reshape(len(nodes), -1)
        keys = band_key_array(signatures, self._bands, self._rows, prefixes).reshape(-1)
        # Each band's first value is a uniform 32-bit hash: it picks the share.
        shares = (signatures[:, : self._bands * self._rows : self._rows] % BAND_SHARES).reshape(-1)
        owners = np.repeat(np.arange(len(nodes)), self._bands)
        order = np.argsort(shares, kind="stable")
        bounds = np.flatnonzero(np.diff(shares[order])) + 1
        return [(int(shares[part[0]]), (keys[part], [nodes[owner] for owner in owners[part]]))
                for part in np.split(order, bounds)]


class _PairsOfBucket(beam.DoFn):
    """One share's band keys -> the candidate pairs of every key that several documents share
    (an LSH bucket, ``chunkline.minhash.shared_keys``: one sort of the share's keys), as
    ``chunkline.minhash.bucket_pairs`` makes them, buckets in the keys' byte order."""

    def __init__(self, max_bucket_pairs: int) -> None:
        self._max = max_bucket_pairs
        self._buckets = Metrics.counter("dedupe", "near_buckets_shared")

    def process(self, share: tuple[int, Iterable[tuple]]) -> Iterable[tuple[tuple, tuple]]:
        _, batches = share
        batches = list(batches)
        if not batches:
            return
        keys = np.concatenate([keys for keys, _ in batches])
        nodes = [node for _, members in batches for node in members]
        # Nearly every key is a band that no other document shares: only the others leave numpy.
        for positions in shared_keys(keys):
            self._buckets.inc()
            yield from bucket_pairs([nodes[position] for position in positions], self._max)  # (smaller node, larger node)


def _pair_ends(pair: tuple[tuple, tuple]) -> Iterable[tuple[tuple, tuple[tuple, tuple]]]:
    """A candidate pair -> ``(node, pair)`` for each of its two nodes."""
    yield pair[0], pair
    yield pair[1], pair


class _SignPairs(beam.DoFn):
    """A node, its signature and the candidate pairs it is in -> ``(pair, (node, signature))``
    for each distinct pair (a pair sharing several bands arrives several times): the one
    grouping that carries every survivor's signature, where two joins (each pair's first node,
    then its second) sent each signature twice."""

    def process(self, joined: tuple[tuple, dict]) -> Iterable[tuple[tuple, tuple[tuple, bytes]]]:
        node, groups = joined
        pairs = sorted(set(groups["pair"]))  # nearly always none: a node's bands are its own
        if pairs:
            (signature,) = groups["signature"]  # every paired node was signed, once
            for pair in pairs:
                yield pair, (node, signature)


class _Verify(beam.DoFn):
    """A candidate pair (a, b) and both its nodes' signatures -> the edge (a, b) when their
    estimated Jaccard reaches the threshold."""

    def __init__(self, threshold: float, access: bool = False) -> None:
        self._threshold = threshold
        self._access = access
        self._candidates = Metrics.counter("dedupe", "candidate_pairs")
        self._verified = Metrics.counter("dedupe", "verified_pairs")

    def process(self, keyed: tuple[tuple, Iterable[tuple[tuple, bytes]]]) -> Iterable[tuple[tuple, tuple]]:
        (first, second), signed = keyed
        self._candidates.inc()
        # Two access sets: never one cluster (their buckets never meet anyway).
        if self._access and first[0] != second[0]:
            return []
        signatures = dict(signed)
        if estimate_jaccard(_signature(signatures[first]), _signature(signatures[second])) < self._threshold:
            return []
        self._verified.inc()
        return [(first, second)]


class _ComponentsFn(beam.CombineFn):
    """Edges -> {node: smallest node of its component}. Partial union-finds merge, so edges
    combine before the shuffle; only the nodes that have an edge are ever held: here, those the
    star rounds left unsettled and their neighbours' labels."""

    def create_accumulator(self) -> Components:
        return Components()

    def add_input(self, found: Components, edge: tuple[tuple, tuple]) -> Components:
        found.union(*edge)
        return found

    def merge_accumulators(self, accumulators: Iterable[Components]) -> Components:
        merged = Components()
        for found in accumulators:
            merged.merge(found)
        return merged

    def extract_output(self, found: Components) -> dict:
        return found.roots()


def _duplicate_links(roots: dict) -> Iterable[tuple[str, str]]:
    """{node: root} -> (doc_id, survivor doc_id) for every node that is not its own root."""
    for node, root in roots.items():
        if node != root:
            yield node[-1], root[-1]


# Alternations of large-star and small-star (chunkline/graph.py) before the check. Each bundle's
# edges are contracted first (a star per component it saw), so what is left to join is where
# bundles overlap; a path of 16 nodes in random order settles in 3 (tests/test_graph.py). The
# check reads the last small-star's grouping, its input: the graph after rounds - 1 alternations
# and a large-star (chunkline.graph.star_components).
STAR_ROUNDS = 2
_CONTRACT_NODES = 1 << 16  # nodes a bundle's union-find holds before it sends its stars on


class _ContractBundle(beam.DoFn):
    """Edges -> ``(node, smallest node)`` for each node of a bundle's components but their
    smallest: the same components, each a star already (a union-find per bundle, as a lifted
    combine pre-combines: Beam's ``PartialGroupByKeyCombiningValues``), at most
    :data:`_CONTRACT_NODES` nodes held."""

    def start_bundle(self) -> None:
        self._found = Components()

    def process(self, edge: tuple[tuple, tuple]) -> Iterable[tuple[tuple, tuple]]:
        self._found.union(*edge)
        if len(self._found.parent) >= _CONTRACT_NODES:
            yield from self._flush()

    def finish_bundle(self) -> Iterable[WindowedValue]:
        for edge in self._flush():
            yield WindowedValue(edge, 0, (GlobalWindow(),))

    def _flush(self) -> list[tuple[tuple, tuple]]:
        roots, self._found = self._found.roots(), Components()
        return [(node, root) for node, root in sorted(roots.items()) if node != root]


def _both_ways(edge: tuple[tuple, tuple]) -> Iterable[tuple[tuple, tuple]]:
    a, b = edge
    yield a, b
    yield b, a


class _Star(beam.DoFn):
    """A node and its neighbours -> the edges large-star (``large``) or small-star makes there."""

    def __init__(self, large: bool) -> None:
        self.large = large

    def process(self, keyed: tuple[tuple, Iterable[tuple]]) -> Iterable[tuple[tuple, tuple]]:
        node, adjacent = keyed
        yield from (large_star if self.large else small_star)(node, adjacent)


class _Labels(beam.DoFn):
    """A node and its neighbours -> ``(sender, its label)`` to itself and to each neighbour."""

    def process(self, keyed: tuple[tuple, Iterable[tuple]]) -> Iterable[tuple[tuple, tuple[tuple, tuple]]]:
        node, adjacent = keyed
        adjacent = set(adjacent)
        own = label(node, adjacent)
        yield node, (node, own)
        for other in sorted(adjacent):
            yield other, (node, own)


class _Settled(beam.DoFn):
    """A node, its label and its neighbours' -> ``(node, label, settled)``; an unsettled one
    (a neighbour has another label; counter ``dedupe/near_unsettled``) also sends its
    ``chunkline.graph.unsettled_edges``, tagged ``pending``, to the union-find."""

    def __init__(self) -> None:
        self._unsettled = Metrics.counter("dedupe", "near_unsettled")

    def process(self, keyed: tuple[tuple, Iterable[tuple[tuple, tuple]]]):
        node, told = keyed
        told = set(told)
        (own,) = [found for sender, found in told if sender == node]
        around = [(sender, found) for sender, found in told if sender != node]
        is_settled = settled(own, (found for _, found in around))
        yield node, own, is_settled
        if not is_settled:
            self._unsettled.inc()
            for edge in unsettled_edges(node, around):
                yield beam.pvalue.TaggedOutput("pending", edge)


def _linked(labelled: tuple[tuple, tuple, bool], roots: dict) -> Iterable[tuple[str, str]]:
    """``(node, label, settled)`` -> ``(doc_id, survivor doc_id)`` unless it is its own root."""
    node, own, is_settled = labelled
    root = final_root(node, own, is_settled, roots)
    if root != node:
        yield node[-1], root[-1]


class StarComponents(beam.PTransform):
    """``PCollection[(node, node)]`` edges -> ``(doc_id, survivor doc_id)`` for every node not
    the smallest of its connected component (nodes end with their doc_id).

    Each bundle's edges become a star per component it saw (``contract``), then ``rounds``
    alternations of large-star and small-star (``chunkline.graph``, Kiveris et al., SoCC 2014),
    each a grouping by node: a worker holds one share of the nodes and their neighbours at a
    time, never the graph. Then each node's label is checked against its neighbours'; a
    settled node's label is its root (the rule on real near-duplicate graphs). The unsettled
    nodes' neighbourhoods go to one union-find (:class:`_ComponentsFn`, counter
    ``dedupe/near_unsettled``), whose roots, a side input as small as they are, finish their
    components: the same answer as a union-find over every edge
    (``chunkline.graph.star_components``)."""

    def __init__(self, rounds: int = STAR_ROUNDS, shares: int = 1024, contract: bool = True) -> None:
        super().__init__()
        self.rounds, self.shares, self.contract = rounds, shares, contract

    def _grouped(self, edges: PCollection, label: str) -> PCollection:
        return (edges
                | f"BothWays{label}" >> beam.FlatMap(_both_ways)
                | f"ByNode{label}" >> GroupInShares(self.shares))

    def expand(self, edges: PCollection):
        if self.contract:
            edges = edges | "ContractBundle" >> beam.ParDo(_ContractBundle())
        grouped = None
        for round_number in range(self.rounds):
            for large in (True, False):
                step = f"{'Large' if large else 'Small'}{round_number}"
                grouped = self._grouped(edges, step)
                edges = grouped | f"{step}Star" >> beam.ParDo(_Star(large))
        # The labels of the last small-star's input, from its own grouping (one grouping less):
        # settled there, they are the answer; else its output holds the same components.
        checked = (
            (grouped if grouped is not None else self._grouped(edges, "Labels"))
            | "Labels" >> beam.ParDo(_Labels())
            | "ByLabelled" >> GroupInShares(self.shares)
            | "Settled" >> beam.ParDo(_Settled()).with_outputs("pending", main="labels")
        )
        # Only the unsettled nodes' neighbourhoods: none where every component is a star. No
        # combine default: Beam would inject it through a side input of its own.
        roots = checked.pending | "Unsettled" >> beam.CombineGlobally(_ComponentsFn()).without_defaults()
        return checked.labels | "Links" >> beam.FlatMap(
            _linked, beam.pvalue.AsSingleton(roots, default_value={}))


class NearDuplicates(beam.PTransform):
    """``PCollection[(node, signature bytes)]`` -> ``PCollection[tuple[doc_id, survivor doc_id]]``:
    one pair for every document that is a near duplicate, the survivor being the smallest node
    (by the survivor rule) of its connected component of verified pairs. Survivors and
    documents without a near duplicate yield nothing.

    Counters: ``dedupe/candidate_pairs`` (distinct pairs compared), ``dedupe/verified_pairs``,
    ``dedupe/near_buckets_shared``, ``dedupe/near_unsettled`` (:class:`StarComponents`).
    """

    def __init__(self, options: MinHashOptions, access: bool = False, shares: int = 1024) -> None:
        super().__init__()
        self._options = options
        self._access = access  # each node starts with its access digest
        self._shares = shares

    def expand(self, signed):
        options = self._options
        bands, rows = options.lsh()  # derived once, on the driver

        pairs = (
            signed
            | "BandKeys" >> beam.ParDo(_ShareBands(bands, rows, self._access))
            | "GroupByBand" >> beam.GroupByKey()
            | "CandidatePairs" >> beam.ParDo(_PairsOfBucket(options.max_bucket_pairs))
        )
        edges = (
            {"signature": signed, "pair": pairs | "PairEnds" >> beam.FlatMap(_pair_ends)}
            | "JoinPairs" >> JoinInShares(self._shares)
            | "SignPairs" >> beam.ParDo(_SignPairs())
            | "ByPair" >> GroupInShares(self._shares)
            | "Verify" >> beam.ParDo(_Verify(options.threshold, self._access))
        )
        return edges | "Components" >> StarComponents(STAR_ROUNDS, self._shares)


class _ApplySurvivors(beam.DoFn):
    """One exact-stage survivor's decisions (its own and its exact duplicates') and, if it is a
    near duplicate, its final survivor: every decision then points at that survivor."""

    def __init__(self) -> None:
        self.near = Metrics.counter("dedupe", "near_duplicates")

    def process(self, joined: tuple[str, dict]) -> Iterable[_Decision]:
        _, groups = joined
        survivor = next(iter(groups["survivor"]), None)
        if survivor is None:
            yield from groups["decision"]
            return
        for decision in groups["decision"]:
            if decision.status == KEPT:
                self.near.inc()
            yield decision._replace(status=DUPLICATE, duplicate_of=survivor)


class _ReleasePart(beam.DoFn):
    """A part and the decisions on its records -> the status of each decided record (with its
    text, for the documents table), with ``keep_state`` its state row (``chunkline.state``),
    and, when it is kept, the document itself. The records of a part without a decision were
    rejected as id conflicts already."""

    def __init__(self, keep_state: bool = False) -> None:
        self._coder = coder_of(Document)
        self._keep_state = keep_state

    def process(self, keyed: tuple[str, Iterable[_Decision]]):
        part, decisions = keyed
        by_index = {decision.occurrence[1]: decision for decision in decisions}
        # Counted by hand, and the record's bytes let go once decoded: they are not held while
        # the document goes on (split, in this stage) before the next record is read. (An
        # enumerate would hold them: it keeps its last (index, item) pair for reuse.)
        index = -1
        for data in read_part(part):
            index += 1
            decision = by_index.get(index)
            if decision is None:
                continue
            doc = self._coder.decode(data)
            del data
            status = DocumentStatus.of(doc, decision.digest, decision.status, decision.duplicate_of)
            yield beam.pvalue.TaggedOutput("statuses", status)
            if self._keep_state:
                yield beam.pvalue.TaggedOutput("state", state_row(
                    doc.doc_id, doc.uri, doc.position, doc.input_digest,
                    facts_digest(status.encoding, status.metadata), doc.counted, decision.digest,
                    decision.status, decision.duplicate_of, doc.principals))
            if decision.status == KEPT and not decision.carried:
                yield dataclasses.replace(doc, counted=b"") if doc.counted else doc


class Dedupe(beam.PTransform):
    """``PCollection[Document]`` -> :class:`DedupeOutputs`: ``kept`` (Documents), ``statuses``
    (exactly one DocumentStatus for every input document that is not rejected) and ``rejected``
    (id conflicts).

    ``exact``: documents with the same normalized text (``chunkline.records.doc_hash``) keep the
    smallest doc_id. ``near``: MinHash LSH over the exact survivors (see the module docstring);
    a near duplicate, and every exact duplicate of it, gets ``duplicate_of`` = its cluster's
    survivor, so chains (A~B, B~C) collapse to one survivor. Counters ``dedupe/exact_duplicates``,
    ``dedupe/near_duplicates``, ``dedupe/candidate_pairs``, ``dedupe/id_conflicts``.

    The decisions are taken on summaries of the documents (:class:`_Summary`, signatures); the
    documents wait in part files under ``spill_dir`` (default: ``default_spill_dir``, deleted
    once every document is released) and never cross a shuffle.

    ``roots``: the input roots of the read (``chunkline.readers.input_root`` of each pattern):
    an id conflict's rejected row names its file relative to them, as every other id does
    (a uri under none is named whole).

    ``access``: the documents carry principals (``transforms/access.py``); no two documents
    of different principals are ever duplicates of each other (the module docstring).
    """

    def __init__(self, exact: bool = True, near: MinHashOptions | None = None,
                 spill_dir: str | None = None, roots: Sequence[str] = (),
                 carry_keys: Callable[[Document], str] | None = None,
                 carry_index: CarryIndexOutputs | None = None, memo: MemoSource | None = None,
                 access: bool = False, shares: int = 1024, keep_state: bool = False) -> None:
        super().__init__()
        self.keep_state = keep_state  # a state row per decided document (chunkline.state)
        self.shares = shares  # of every grouping by document (transforms/shares.py)
        self.access = access
        self.memo = memo
        self.carry_keys = carry_keys
        self.carry_index = carry_index
        self.exact = exact
        self.near = near
        self.spill_dir = spill_dir
        self.roots = (roots,) if isinstance(roots, str) else tuple(roots)

    def expand(self, documents):
        parked = self.spill_dir or default_spill_dir(documents.pipeline, "dedupe")
        summarized = (
            documents
            | "Batch" >> beam.BatchElements(min_batch_size=_SIGNATURE_BATCH,
                                            max_batch_size=_SIGNATURE_BATCH)
            | "Summarize" >> beam.ParDo(_ParkAndSummarize(self.near, parked, self.carry_keys, self.memo, self.access)).with_output_types(
                tuple[str, Any]).with_outputs("signed", main="summaries")
        )
        unique = (
            summarized.summaries
            | "GroupById" >> GroupInShares(self.shares)
            | "OnePerId" >> beam.ParDo(_OneDocumentPerId(self.roots)).with_outputs("rejected", main="summaries")
        )
        if self.exact:
            picked = (
                unique.summaries
                | "KeyByHash" >> beam.Map(lambda s: (_exact_key(s), s)).with_output_types(tuple[str, Any])
                | "GroupByHash" >> GroupInShares(self.shares)
                | "PickSurvivor" >> beam.ParDo(_PickSurvivor()).with_outputs("decisions", main="kept")
            )
            kept, decisions = picked.kept, picked.decisions
        else:
            kept = unique.summaries
            decisions = kept | "AllKept" >> beam.Map(_decision, KEPT)
        if self.near is not None:
            signed = (
                {
                    "kept": kept | "KeptRef" >> beam.Map(lambda s: (s.doc_id, s.occurrence)).with_output_types(
                        tuple[str, Any]),
                    "signed": summarized.signed,
                }
                | "JoinSignatures" >> JoinInShares(self.shares)
                | "SignedSurvivors" >> beam.ParDo(_SignedSurvivors())
            )
            links = signed | "NearDuplicates" >> NearDuplicates(self.near, self.access, self.shares)
            decisions = (
                {
                    # An exact duplicate follows its exact survivor.
                    "decision": decisions | "KeyDecision" >> beam.Map(
                        lambda d: (d.duplicate_of or d.doc_id, d)).with_output_types(tuple[str, Any]),
                    "survivor": links,
                }
                | "JoinSurvivors" >> JoinInShares(self.shares)
                | "ApplySurvivors" >> beam.ParDo(_ApplySurvivors())
            )
        carried = None
        if self.carry_index is not None:
            from chunkline.transforms.carry import CarryDecisions

            marked = (
                {"decision": decisions | "KeyDecisionById" >> beam.Map(
                    lambda d: (d.doc_id, d)).with_output_types(tuple[str, Any]),
                 "previous": self.carry_index.entries,
                 "documents": self.carry_index.documents}
                | "JoinCarryIndex" >> JoinInShares(self.shares)
                | "Carry" >> beam.ParDo(CarryDecisions()).with_outputs("carried", main="decisions")
            )
            decisions, carried = marked.decisions, marked.carried
        released = (
            decisions
            | "KeyByPart" >> beam.Map(lambda d: (d.occurrence[0], d)).with_output_types(tuple[str, Any])
            | "GroupByPart" >> GroupInShares(self.shares)
            | "Release" >> beam.ParDo(_ReleasePart(self.keep_state))
            .with_output_types(Document, statuses=DocumentStatus, state=StateRow)
            .with_outputs("statuses", "state", main="kept")
        )
        (released.statuses
         | "CountReleased" >> beam.combiners.Count.Globally()
         | "RemoveParts" >> beam.ParDo(RemoveParts(parked)))
        return DedupeOutputs(released.kept, released.statuses, unique.rejected, carried,
                             released.state if self.keep_state else None)


class ExactDedupe(Dedupe):
    """``PCollection[Document]`` -> :class:`DedupeOutputs`: ``kept`` (Documents), ``statuses``
    (a DocumentStatus for every input document) and ``rejected`` (id conflicts).

    With ``enabled=False`` every document is kept (ids are still made unique)."""

    def __init__(self, enabled: bool = True, roots: Sequence[str] = ()) -> None:
        super().__init__(exact=enabled, near=None, roots=roots)
        self.enabled = enabled
