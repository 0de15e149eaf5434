"""A run's chunks as the rows a vector store holds, and the digest of each row.

One canonical table (``SCHEMA``) is what every store writes and what every store reads back
for verification, so a row's digest is computed one way, from values, whatever the store:

- ``vector``: the stored embedding as float32 (``chunkline.quantize.dequantized``), scaled to
  unit length exactly when ``chunkline.pipeline.query`` would (a run not normalized, or stored as
  float16/int8), so that inner product, cosine and L2 order the rows as ``chunkline query``
  does in every store, and a store that normalizes on insert (Qdrant's Cosine) is never
  needed;
- ``metadata``: the chunk's metadata JSON in canonical form (``chunkline.metadata.canonical_json``:
  sorted keys, no spaces, one form per number), so a store that parses it (PostgreSQL
  ``jsonb``, which gives ``1e20`` back as ``100000000000000000000``; a Qdrant payload) gives
  back the same text once canonicalized again;
- ``sparse_indices`` / ``sparse_values``: BM25 term ids (``chunkline.sparse.term_id``, below
  ``chunkline.sparse.TERM_SPACE``) ascending and their float32 stored weights, as the run wrote
  them: saturated term frequencies against the index's reference mean length, IDF left to the
  query (``chunkline.sparse``), so an unchanged chunk's row stays as it was when the corpus
  changes around it.

- ``principals``: who may read the row (``chunkline.access``), only for a run written with
  access control (its manifest's ``access``): every store then holds it as a filterable,
  indexed field, and its readers filter by it before ranking (each store's module says how).
  A run without access control has no such column, and its rows' digests are as before.

The digest (BLAKE2b, RFC 7693, 16 bytes) covers every synced column of a row with a type tag
and a length before each value, so no two different rows encode to the same bytes.

``ROW_FORMAT`` names how digests are computed; a store records the format its digests are in
(``chunkline.pipeline.sync.core.SyncState``), so a store written by an older chunkline is recognised and
rewritten once instead of being reported as drift. Formats: 1, metadata numbers as Python's
``json`` wrote them; 2, canonical JSON numbers; 3, BM25 weights without IDF and no file facts
(``file_size``, ``file_modified``) in a chunk's metadata. A store of format 2 or older holds
values the new rows do not: :func:`format_neutral_digests` tells those rows (outdated, not
drift) from rows that really differ.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkline.index.tables import TableFileError, read_table
from chunkline.metadata import canonical_json
from chunkline.quantize import dequantized
from chunkline.pipeline.manifest import Manifest, ManifestError

ROW_FORMAT = 3
# The first format whose values (not only digests) are this version's: a store of an older one
# differs in its BM25 weights and file facts by design.
VALUES_FORMAT = 3
# A chunk's metadata copied these file facts before format 3 (``chunkline.metadata``).
_FILE_FACTS = ("file_size", "file_modified")

# The synced columns other than the vectors, in digest order.
SCALARS: tuple[str, ...] = ("chunk_id", "doc_id", "chunk_index", "start", "end", "headings", "text",
                            "search_text", "tokens", "metadata", "page_start", "page_end",
                            "content_key")
DIGEST = "row_digest"
PRINCIPALS = "principals"  # who may read a row: only in the rows of a run with access control
_READ = ["chunk_id", "doc_id", "chunk_index", "start", "end", "headings", "text", "search_text",
         "tokens", "metadata", "page_start", "page_end", "content_key", "sparse_indices",
         "sparse_values", "embedding", "embedding_scale", PRINCIPALS]


def schema(dim: int, with_digest: bool = True, principals: bool = False) -> pa.Schema:
    """The canonical row: what a store writes and reads back (``row_digest`` last); with
    ``principals`` (a run written with access control) the ``principals`` column before it."""
    fields = [
        pa.field("chunk_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("chunk_index", pa.int32(), nullable=False),
        pa.field("start", pa.int64(), nullable=False),
        pa.field("end", pa.int64(), nullable=False),
        pa.field("headings", pa.list_(pa.string()), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("search_text", pa.string(), nullable=False),
        pa.field("tokens", pa.int32(), nullable=False),
        pa.field("metadata", pa.string(), nullable=False),
        pa.field("page_start", pa.int32(), nullable=True),
        pa.field("page_end", pa.int32(), nullable=True),
        pa.field("content_key", pa.string(), nullable=False),
        pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
        pa.field("sparse_indices", pa.list_(pa.int32()), nullable=False),
        pa.field("sparse_values", pa.list_(pa.float32()), nullable=False),
    ]
    if principals:
        fields.append(pa.field(PRINCIPALS, pa.list_(pa.string()), nullable=False))
    if with_digest:
        fields.append(pa.field(DIGEST, pa.string(), nullable=False))
    return pa.schema(fields)


def canonical_metadata(text: str) -> str:
    """The metadata JSON object text in canonical form: ``{"b": 1.0, "a": [2]}`` ->
    ``{"a":[2],"b":1}``. Equal objects give equal text, whichever store gave them back."""
    return canonical_json(text or "{}")


def vector_matrix(table: pa.Table, column: str = "vector") -> np.ndarray:
    """``table[column]`` (a fixed-size list) as an ``[rows, dim]`` numpy array, no copy per row."""
    vectors = table.column(column).combine_chunks()
    dim = vectors.type.list_size
    flat = pc.list_flatten(vectors).to_numpy(zero_copy_only=False)
    return flat.reshape(len(table), dim)


def has_principals(rows: pa.Table) -> bool:
    """Whether ``rows`` (``load_rows``, or a store's ``read_all``) carry who may read them."""
    return PRINCIPALS in rows.column_names


def stores_idf_free_weights(manifest: Manifest) -> bool:
    """Whether the run's sparse vectors hold IDF-free weights (``bm25.json``'s ``weights: tf``),
    or it has none; False for a run of an older chunkline, whose weights hold IDF."""
    return manifest.bm25 is None or manifest.bm25.weights == "tf"


def load_rows(run_dir: str, manifest: Manifest) -> pa.Table:
    """Every chunk of the run in ``schema(dim)``, ``row_digest`` included, sorted by chunk_id."""
    embed = manifest.setting("embed")
    if not embed:
        raise ValueError(f"{run_dir} was written with embed: null: a vector store needs its vectors")
    if not stores_idf_free_weights(manifest):
        # Its rows would mix two weightings in one store, which the stores' IDF (Qdrant's
        # modifier, pgvector's query vector) cannot rank together.
        raise ValueError(f"{run_dir}: its BM25 weights hold IDF (an older chunkline wrote them): "
                         "run `chunkline run` again to sync it; the store then takes the new "
                         "rows once")
    try:
        table = read_table(run_dir, manifest, "chunks", [], optional=_READ)
    except TableFileError as exc:
        raise ManifestError(str(exc)) from None
    if table is None:
        raise ValueError(f"{run_dir} lists no chunk shards")
    if "search_text" not in table.column_names or "content_key" not in table.column_names:
        raise ValueError(f"{run_dir}: chunk shards without search_text/content_key (an older "
                         "chunkline wrote them): run it again to sync it")
    if "embedding" not in table.column_names:
        raise ValueError(f"{run_dir}: chunk shards without an embedding column: nothing to sync")
    protected = manifest.access is not None
    if protected and PRINCIPALS not in table.column_names:
        raise ValueError(f"{run_dir} was written with access control but its chunk shards have no "
                         "principals column: damaged, or not this run's")
    stored = vector_matrix(table, "embedding")
    scales = (table.column("embedding_scale").to_numpy(zero_copy_only=False)
              if "embedding_scale" in table.column_names else None)
    matrix = dequantized(stored, scales)
    # The rule chunkline.pipeline.query.dense_scores ranks by: cosine, whatever was stored.
    if not embed.get("normalize", True) or stored.dtype != np.float32:
        norms = np.linalg.norm(matrix, axis=1, keepdims=True).astype(np.float32)
        matrix = (matrix / np.maximum(norms, np.float32(1e-12))).astype(np.float32)
    dim = matrix.shape[1]
    n = len(table)
    empty_ints = pa.array([[]] * n, pa.list_(pa.int32()))
    empty_floats = pa.array([[]] * n, pa.list_(pa.float32()))
    columns = {
        **{name: table.column(name) for name in ("chunk_id", "doc_id", "chunk_index", "start",
                                                 "end", "headings", "text", "search_text",
                                                 "tokens", "content_key")},
        "metadata": pa.array([canonical_metadata(m) for m in table.column("metadata").to_pylist()]
                             if "metadata" in table.column_names else ["{}"] * n, pa.string()),
        "page_start": table.column("page_start") if "page_start" in table.column_names else pa.nulls(n, pa.int32()),
        "page_end": table.column("page_end") if "page_end" in table.column_names else pa.nulls(n, pa.int32()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1), pa.float32()), dim),
        "sparse_indices": table.column("sparse_indices") if "sparse_indices" in table.column_names else empty_ints,
        "sparse_values": table.column("sparse_values") if "sparse_values" in table.column_names else empty_floats,
        PRINCIPALS: table.column(PRINCIPALS) if protected else None,
    }
    target = schema(dim, False, protected)
    rows = pa.table([columns[f.name] for f in target], schema=target)
    rows = rows.sort_by("chunk_id")
    return rows.append_column(DIGEST, pa.array(row_digests(rows), pa.string()))


def _encode(value: object) -> bytes:
    """A scalar with its type tag and length: no two values of the synced columns share bytes."""
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        return b"S" + len(data).to_bytes(4, "little") + data
    if value is None:
        return b"N"
    if isinstance(value, bool):
        raise TypeError("no boolean column is synced")
    if isinstance(value, int):
        return b"I" + value.to_bytes(8, "little", signed=True)
    if isinstance(value, (list, tuple)):
        return b"L" + len(value).to_bytes(4, "little") + b"".join(map(_encode, value))
    raise TypeError(f"cannot digest a {type(value).__name__}")


def _blob(data: bytes) -> bytes:
    return b"B" + len(data).to_bytes(4, "little") + data


def row_digests(table: pa.Table) -> list[str]:
    """The digest of each row of ``table`` (``schema(dim)`` columns, ``row_digest`` ignored):
    hex BLAKE2b-128 over the scalars in ``SCALARS`` order, the float32 vector's bytes
    (little-endian), the sparse term ids (int32) and weights (float32), and, where the rows
    carry them, their principals (so a change of who may read a row rewrites it everywhere)."""
    n = len(table)
    if n == 0:
        return []
    names = SCALARS + ((PRINCIPALS,) if PRINCIPALS in table.column_names else ())
    scalars = [table.column(name).to_pylist() for name in names]
    vectors = np.ascontiguousarray(vector_matrix(table).astype("<f4", copy=False)).tobytes()
    width = len(vectors) // n
    index_list = table.column("sparse_indices").combine_chunks()
    value_list = table.column("sparse_values").combine_chunks()
    ids = pc.list_flatten(index_list).to_numpy(zero_copy_only=False).astype("<i4").tobytes()
    weights = pc.list_flatten(value_list).to_numpy(zero_copy_only=False).astype("<f4").tobytes()
    lengths = pc.list_value_length(index_list).to_numpy(zero_copy_only=False)
    if not np.array_equal(lengths, pc.list_value_length(value_list).to_numpy(zero_copy_only=False)):
        raise ValueError("sparse_indices and sparse_values differ in length in some row")
    bounds = np.concatenate([[0], np.cumsum(lengths)]) * 4
    bounds = bounds.tolist()
    out = []
    for i, values in enumerate(zip(*scalars)):
        # One buffer a row, one hash call: the per-call overhead dominated at 100,000 rows.
        data = b"".join([*map(_encode, values), _blob(vectors[i * width:(i + 1) * width]),
                         _blob(ids[bounds[i]:bounds[i + 1]]), _blob(weights[bounds[i]:bounds[i + 1]])])
        out.append(hashlib.blake2b(data, digest_size=16).hexdigest())
    return out


def format_neutral_digests(table: pa.Table, drop: Sequence[Iterable[str]] | None = None) -> list[str]:
    """Row digests with what format 3 changed left out: BM25 weights zeroed, and the file facts
    ``drop[i]`` names left out of row i's metadata (None: both file facts from every row).
    Equal for a row of an older store and the same chunk's row now, where nothing but the
    format moved it."""
    n = len(table)
    if n == 0:
        return []
    metadata = []
    for i, text in enumerate(table.column("metadata").to_pylist()):
        found = json.loads(text or "{}")
        for key in (_FILE_FACTS if drop is None else drop[i]):
            found.pop(key, None)
        metadata.append(canonical_json(json.dumps(found)))
    lengths = pc.list_value_length(table.column("sparse_values").combine_chunks())
    zeros = pa.ListArray.from_arrays(
        pa.array(np.concatenate([[0], np.cumsum(lengths.to_numpy(zero_copy_only=False))]), pa.int32()),
        pa.array(np.zeros(int(pc.sum(lengths).as_py() or 0), np.float32)))
    neutral = (table.set_column(table.schema.get_field_index("metadata"), "metadata",
                                pa.array(metadata, pa.string()))
               .set_column(table.schema.get_field_index("sparse_values"), "sparse_values", zeros))
    return row_digests(neutral)


def file_facts_absent(metadata: str) -> frozenset[str]:
    """The file facts a row's metadata does not carry (``output.chunk_metadata`` may name them):
    what an older store's copy of that row may hold and the format no longer writes."""
    held = json.loads(metadata or "{}")
    return frozenset(key for key in _FILE_FACTS if key not in held)


def terms_table(run_dir: str, manifest: Manifest) -> pa.Table | None:
    """The run's BM25 terms (``term_id`` int32, ``df`` int64), what a store needs to weigh a
    query by IDF; None for a run without sparse vectors."""
    if manifest.bm25 is None:
        return None
    try:
        table = read_table(run_dir, manifest, "terms", ["term_id", "df"])
    except TableFileError as exc:
        raise ManifestError(str(exc)) from None
    if table is None:
        return pa.table({"term_id": pa.array([], pa.int32()), "df": pa.array([], pa.int64())})
    return table.sort_by("term_id")


def set_digest(chunk_ids: list[str], digests: list[str]) -> str:
    """One digest of a whole set of rows: their (chunk_id, row digest) pairs in chunk_id order."""
    digest = hashlib.blake2b(digest_size=16)
    for chunk_id, row in sorted(zip(chunk_ids, digests)):
        digest.update(_encode(chunk_id))
        digest.update(_encode(row))
    return digest.hexdigest()
