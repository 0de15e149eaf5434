"""Boilerplate's corpus count on arrays: the candidate line keys of many texts as one batch.

Boilerplate removal (``chunkline.boilerplate``) counts, for each line key, how many distinct
texts hold it. The texts arrive as :class:`KeySets` batches, never an element per document:
a batch is the texts' hashes (the first :data:`TEXT_HASH_BYTES` bytes of each
``chunkline.records.doc_hash``, a numpy ``S16`` array), CSR offsets (int64, one more than the
texts) and the texts' keys concatenated (uint64, each text's ascending and distinct): text ``i``
holds ``keys[offsets[i]:offsets[i + 1]]``. The layout is SciPy's compressed sparse rows
(``scipy.sparse.csr_matrix``'s ``indptr``/``indices``) without the values. A batch comes from
the documents a run processes (``transforms/clean.py``) or from those it does not process again
(their previous state), and both are counted the same way:

    batch = key_sets([(text_hash(doc_hash(text)), keys_as_ints), ...])
    parts = split_by_share(batch, shares)      # each share of the text-hash space on its own
    texts = one_per_text(concat(share_parts))  # exact copies count once
    # then each key's number of texts, summed per bucket of the key space (transforms/tally.py)

The run keeps the frequent keys it found as a small Parquet file in its folder
(:data:`chunkline.index.layout.BOILERPLATE_FREQUENT`, one uint64 column ``key``, ascending):
:func:`frequent_parquet` writes its bytes and :func:`read_frequent` reads a run's back.
"""

from __future__ import annotations

import io
import logging
from typing import Iterable, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from chunkline.index import layout, storage

log = logging.getLogger("chunkline.key_sets")

# 128 bits of SHA-256: two distinct texts share a hash with probability ~n^2 / 2^129, below
# 10^-20 for a billion texts (the birthday bound), so equal hashes are taken for equal texts.
TEXT_HASH_BYTES = 16
TEXT_HASH = f"S{TEXT_HASH_BYTES}"
KEY = "<u8"


class KeySets(NamedTuple):
    """The candidate keys of a run of texts (see the module's docstring): ``text_hashes``
    (``S16``), ``offsets`` (int64, ``len(text_hashes) + 1`` of them, from 0 to ``len(keys)``)
    and ``keys`` (little-endian uint64). Built with :func:`key_sets` or :func:`from_arrays`."""

    text_hashes: np.ndarray
    offsets: np.ndarray
    keys: np.ndarray

    @property
    def texts(self) -> int:
        return len(self.text_hashes)

    def keys_of(self, index: int) -> np.ndarray:
        return self.keys[self.offsets[index]:self.offsets[index + 1]]


def text_hash(doc_hash: str | bytes) -> bytes:
    """The hash a text is counted under: the first :data:`TEXT_HASH_BYTES` bytes of its
    ``doc_hash`` (hex, as ``chunkline.records.doc_hash`` gives it, or its bytes)."""
    digest = bytes.fromhex(doc_hash) if isinstance(doc_hash, str) else doc_hash
    if len(digest) < TEXT_HASH_BYTES:
        raise ValueError(f"a text hash needs {TEXT_HASH_BYTES} bytes of doc_hash, got {len(digest)}")
    return digest[:TEXT_HASH_BYTES]


def empty() -> KeySets:
    return KeySets(np.empty(0, dtype=TEXT_HASH), np.zeros(1, dtype=np.int64), np.empty(0, dtype=KEY))


def from_arrays(hashes: Sequence[bytes], key_arrays: Sequence[np.ndarray]) -> KeySets:
    """A batch of ``hashes`` (each :data:`TEXT_HASH_BYTES` bytes) with their key arrays, each
    already ascending and distinct (``transforms/clean.py``'s ``key_array``)."""
    if len(hashes) != len(key_arrays):
        raise ValueError(f"{len(hashes)} text hashes for {len(key_arrays)} key sets")
    if any(len(h) != TEXT_HASH_BYTES for h in hashes):
        raise ValueError(f"a text hash is {TEXT_HASH_BYTES} bytes (text_hash)")
    offsets = np.zeros(len(key_arrays) + 1, dtype=np.int64)
    np.cumsum([len(keys) for keys in key_arrays], out=offsets[1:])
    keys = np.concatenate(key_arrays).astype(KEY, copy=False) if len(key_arrays) else np.empty(0, dtype=KEY)
    return KeySets(np.array(hashes, dtype=TEXT_HASH), offsets, keys)


def key_sets(entries: Iterable[tuple[bytes, Iterable[int]]]) -> KeySets:
    """A batch from Python values: ``(text hash, its keys as ints)`` per text; each text's keys
    are sorted and repeats dropped (a key counts once per text).

        key_sets([(text_hash(doc_hash(text)), [int(k, 16) for k in line_keys(text, options)])])
    """
    hashes, arrays = [], []
    for hashed, keys in entries:
        hashes.append(bytes(hashed))
        arrays.append(np.unique(np.array(list(keys), dtype=np.uint64)).astype(KEY))
    return from_arrays(hashes, arrays)


def checked(batch: KeySets) -> KeySets:
    """``batch`` when it is well formed (the types and offsets the module's docstring
    describes), else ValueError saying what is wrong: a batch from outside the stage is checked
    before it is counted, so a malformed one is an error and not a silent miscount."""
    hashes, offsets, keys = batch
    if not isinstance(hashes, np.ndarray) or hashes.dtype != np.dtype(TEXT_HASH) or hashes.ndim != 1:
        raise ValueError(f"KeySets.text_hashes must be a 1-d numpy {TEXT_HASH} array")
    if not isinstance(keys, np.ndarray) or keys.dtype != np.dtype(KEY) or keys.ndim != 1:
        raise ValueError("KeySets.keys must be a 1-d numpy little-endian uint64 array")
    if (not isinstance(offsets, np.ndarray) or offsets.dtype != np.int64
            or offsets.shape != (len(hashes) + 1,)):
        raise ValueError("KeySets.offsets must be int64, one more than the text hashes")
    if offsets[0] != 0 or offsets[-1] != len(keys) or np.any(np.diff(offsets) < 0):
        raise ValueError("KeySets.offsets must rise from 0 to the number of keys")
    return batch


def concat(batches: Sequence[KeySets]) -> KeySets:
    """The texts of ``batches`` in one batch, in order."""
    if not batches:
        return empty()
    if len(batches) == 1:
        return batches[0]
    shift = np.cumsum([0] + [len(batch.keys) for batch in batches[:-1]])
    offsets = np.concatenate([np.zeros(1, dtype=np.int64)]
                             + [batch.offsets[1:] + base for batch, base in zip(batches, shift)])
    return KeySets(np.concatenate([batch.text_hashes for batch in batches]), offsets,
                   np.concatenate([batch.keys for batch in batches]))


def span_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Every position ``starts[i] .. starts[i] + lengths[i] - 1``, span after span, as one int64
    array: a gather of many slices without a Python step per slice."""
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    before = np.cumsum(lengths) - lengths  # where each span begins in the result
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - before, lengths)


def take(batch: KeySets, indexes: np.ndarray) -> KeySets:
    """The texts of ``batch`` at ``indexes``, in that order."""
    starts, ends = batch.offsets[indexes], batch.offsets[np.asarray(indexes) + 1]
    lengths = ends - starts
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Each kept key's position in batch.keys: its text's start plus its place in the text.
    positions = span_positions(starts, lengths)
    return KeySets(batch.text_hashes[indexes], offsets, batch.keys[positions])


def shares_of(hashes: np.ndarray, shares: int) -> np.ndarray:
    """Each text hash's share of the text-hash space: its first 8 bytes as a little-endian
    integer modulo ``shares`` (a hash is uniform, so its bytes spread texts evenly)."""
    if not len(hashes):
        return np.empty(0, dtype=np.int64)
    head = np.ascontiguousarray(hashes).view(np.uint8).reshape(-1, TEXT_HASH_BYTES)[:, :8]
    return (np.ascontiguousarray(head).view("<u8").ravel() % np.uint64(shares)).astype(np.int64)


def split_by_share(batch: KeySets, shares: int) -> list[tuple[int, KeySets]]:
    """``batch``'s texts by share of the text-hash space (:func:`shares_of`), shares ascending,
    each share's texts in their order in ``batch``."""
    if not batch.texts:
        return []
    of = shares_of(batch.text_hashes, shares)
    order = np.argsort(of, kind="stable")
    found, starts = np.unique(of[order], return_index=True)
    bounds = [*starts.tolist(), len(order)]
    return [(int(share), take(batch, order[lo:hi])) for share, lo, hi in zip(found, bounds, bounds[1:])]


def one_per_text(batch: KeySets) -> KeySets:
    """Each distinct text hash of ``batch`` once, ascending, with one key set: equal hashes are
    equal texts and so hold equal sets; were two sets ever different, the smallest (compared as
    their little-endian bytes) is kept, so the result does not depend on the texts' order."""
    if not batch.texts:
        return empty()
    order = np.argsort(batch.text_hashes, kind="stable")
    hashes = batch.text_hashes[order]
    first = np.ones(len(hashes), dtype=bool)
    first[1:] = hashes[1:] != hashes[:-1]
    chosen = order[first]
    if len(chosen) < len(order):
        # Only exact copies get here (a few in a corpus): their sets compared one by one.
        starts = np.flatnonzero(first)
        bounds = [*starts.tolist(), len(order)]
        for at, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            if hi - lo > 1:
                candidates = order[lo:hi]
                chosen[at] = min(candidates.tolist(), key=lambda i: batch.keys_of(i).tobytes())
    return take(batch, chosen)


def frequent_schema() -> pa.Schema:
    return pa.schema([pa.field("key", pa.uint64(), nullable=False)])


def frequent_parquet(keys: np.ndarray) -> bytes:
    """The run's frequent keys (any order, each once) as the bytes of its Parquet file."""
    table = pa.table({"key": pa.array(np.sort(np.asarray(keys, dtype=KEY)), type=pa.uint64())},
                     schema=frequent_schema())
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def read_frequent(run_dir: str) -> np.ndarray | None:
    """The frequent keys the run in ``run_dir`` (local or ``gs://``) kept, ascending uint64; None
    when it kept none (a run from before the file, or with boilerplate removal off) or the file
    is damaged (a warning names it): a caller without them treats every key as changed, which
    costs time, never a wrong table."""
    path = storage.join(run_dir, layout.BOILERPLATE_FREQUENT)
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    try:
        column = pq.read_table(io.BytesIO(data), columns=["key"]).column("key")
        if column.type != pa.uint64() or column.null_count:
            raise ValueError(f"column key is {column.type} with {column.null_count} nulls, not uint64")
        keys = column.to_numpy().astype(KEY, copy=False)
        if np.any(keys[1:] <= keys[:-1]):
            raise ValueError("keys are not ascending and distinct")
    except (pa.ArrowException, ValueError, KeyError) as error:
        log.warning("%s is not a frequent-keys file (%s): read as absent", path, error)
        return None
    return keys
