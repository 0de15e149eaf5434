"""Qdrant, through qdrant-client: its local mode (a directory, no server) or a server by URL.

One point per chunk: the named dense vector ``dense`` (distance ``Dot``: the synced vectors
have unit length (``chunkline.pipeline.sync.rows``), so the dot product is the cosine, and Qdrant keeps
them as given, where ``Cosine`` would normalize them again on insert), the named sparse vector
``bm25`` (term ids and IDF-free BM25 weights, ``chunkline.sparse``), ranked with
``Modifier.IDF``: Qdrant multiplies each query term by ``ln(1 + (N - df + 0.5) / (df + 0.5))``,
Lucene's IDF as bm25s computes it, N and df counted over the collection's points holding a
``bm25`` vector (every chunk's point holds one, an empty one included; a server reads them
from its sparse index, where a deleted point counts until the optimizer drops it, as
qdrant-client's local mode notes beside its own live counts), so a reader's query vector is
1 at each term; and every other column in the payload (``metadata`` as a JSON object, so payload filters reach its keys).
Point ids must be unsigned integers or UUIDs (Qdrant docs, "Points"): a chunk's is the UUID
version 5 of its chunk_id (RFC 4122 section 4.3), the same in every process.

The sync state is the one point of the vectorless collection ``<name>_sync``. A server builds
its HNSW index itself as points arrive; local mode searches exhaustively.

One sync at a time: local mode is single-client already (qdrant-client locks the directory for
as long as a client has it open, and the operating system drops the lock with the process), so
the second sync is told the store is busy. A server has no compare-and-set to build a lock on,
so two syncs into one server collection are not kept apart: schedule one per collection.

Generations (``chunkline.pipeline.sync.generations``): the alias is a collection alias (Qdrant docs,
"Collections: aliases"), which every read and write by name resolves. A store whose embedding
signature never changed holds the plain collection ``<name>``, as before. The first sync of
another signature writes ``<name>_g<digest>``; once it verifies, the plain collection is copied
to its own generation's name (Qdrant cannot rename a collection, and an alias cannot share a
collection's name), deleted, and the alias ``<name>`` created: between that delete and the alias
(two calls, once in a store's life) a reader of a server finds no collection. Every later switch
is one ``update_collection_aliases`` call deleting the alias and creating it again, applied
atomically (Qdrant docs: "all operations in one request are applied atomically").

Access control (a run written with ``access:``, ``chunkline.access``): each point's payload
holds ``principals`` (a list of strings), with a keyword payload index on a server (Qdrant docs,
"Indexing: payload index": a filtered search uses it, and the HNSW graph is built with the
filter's cardinality in mind; local mode has no indexes and filters while it scans every point).
Qdrant has no row-level security: every reader's query must carry the filter
:func:`principals_filter` builds (``FieldCondition(key="principals", match=MatchAny(any=[...]))``,
a point matching when its list holds any of the caller's principals, the public one included),
as :func:`search_as` does. Qdrant applies a query's filter during the search, so k points come
back whenever k readable points exist. Give untrusted clients no direct access to the collection
(an API key or a JWT with collection access is all or nothing for its payloads).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from dataclasses import asdict
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
from qdrant_client import QdrantClient, models

from chunkline.pipeline.sync.core import StoreBusy, StoreError, SyncState
from chunkline.pipeline.sync.generations import is_generation
from chunkline.pipeline.sync.rows import DIGEST, PRINCIPALS, canonical_metadata, schema, vector_matrix

CHUNK_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "chunkline:chunk_id")
_PAYLOAD = ("chunk_id", "doc_id", "chunk_index", "start", "end", "headings", "text", "search_text",
            "tokens", "metadata", "page_start", "page_end", "content_key", DIGEST)
_PAGE = 5000  # points a scroll call returns: local mode sorts the collection once a call


def principals_filter(principals: Sequence[str], public: str = "public") -> models.Filter:
    """The filter every reader's query of a protected collection must carry: the points whose
    ``principals`` hold one of the caller's, or the public one. The names are checked first (a
    malformed one is an AccessError, never a filter that matches by accident)."""
    from chunkline.access import principal_set

    held = principal_set([*principals, public], "principals")
    return models.Filter(must=[models.FieldCondition(key=PRINCIPALS, match=models.MatchAny(any=list(held)))])


def search_as(client: QdrantClient, collection: str, vector: Sequence[float], k: int,
              principals: Sequence[str], public: str = "public") -> list[tuple[str, float]]:
    """The ``k`` points of ``collection`` (the alias) nearest ``vector`` by the dense vector
    among those a caller holding ``principals`` may read, as ``(chunk_id, score)``: the
    documented reader query."""
    found = client.query_points(collection, query=list(map(float, vector)), using="dense",
                                query_filter=principals_filter(principals, public), limit=k,
                                with_payload=["chunk_id"])
    return [((point.payload or {})["chunk_id"], point.score) for point in found.points]


def point_id(chunk_id: str) -> str:
    """The point id of a chunk: a UUID derived from its chunk_id alone."""
    return str(uuid.uuid5(CHUNK_NAMESPACE, chunk_id))


# A point whose id is not its chunk's is shown with its own id (``read_all``), so that it can be
# named and deleted like any other row.
_FOREIGN = re.compile(r" \(point ([0-9A-Za-z-]+)\)$")


class QdrantStore:
    def __init__(self, collection: str = "chunks", path: str | None = None, url: str | None = None,
                 api_key: str | None = None) -> None:
        self.local = path is not None
        self.path, self.url, self.api_key = path, url, api_key
        if path is not None and os.path.exists(path) and not os.path.isdir(path):
            raise ValueError(f"qdrant: {path} is a file, not a directory")
        self.client: QdrantClient | None = None
        self.base = collection
        self.use(collection)
        self.where = f"Qdrant collection {collection!r} at {path if path is not None else url}"
        self.dim = 0
        self.principals = False  # points carry who may read them (``open``)

    def use(self, generation: str) -> None:
        self.name, self.state_name = generation, generation + "_sync"

    def _collections(self) -> set[str]:
        return {c.name for c in self._connect().get_collections().collections}

    def _aliases(self) -> dict[str, str]:
        return {a.alias_name: a.collection_name for a in self._connect().get_aliases().aliases}

    def _no_directory(self) -> bool:
        """Local mode, and its directory is not there (yet): nothing is held."""
        return self.path is not None and not os.path.isdir(self.path)

    def current(self) -> str | None:
        if self._no_directory():
            return None
        found = self._aliases().get(self.base)
        if found is not None:
            return found
        return self.base if self.base in self._collections() else None

    def generations(self) -> list[str]:
        if self._no_directory():
            return []
        return sorted(name for name in self._collections() if is_generation(self.base, name))

    def switch(self, generation: str, previous: str | None, rename_to: str | None) -> None:
        client = self._connect()
        m = models
        if previous == self.base and self.base in self._collections():
            if rename_to is None:  # the alias takes the plain table's name: it must move first
                raise ValueError(f"qdrant: collection {self.base!r} needs a name to move to")
            self._copy(self.base, rename_to)
            client.delete_collection(self.base)
            client.delete_collection(self.base + "_sync")
        operations: list[models.DeleteAliasOperation | models.CreateAliasOperation] = []
        if self.base in self._aliases():
            operations.append(m.DeleteAliasOperation(delete_alias=m.DeleteAlias(alias_name=self.base)))
        operations.append(m.CreateAliasOperation(create_alias=m.CreateAlias(
            collection_name=generation, alias_name=self.base)))
        # One request: the alias is never missing nor on both (applied atomically, Qdrant docs).
        client.update_collection_aliases(change_aliases_operations=operations)

    def _copy(self, source: str, target: str) -> None:
        """Collection ``source`` and its state copied, point for point, to ``target``."""
        client = self._connect()
        params = client.get_collection(source).config.params
        client.create_collection(target, vectors_config=params.vectors,
                                 sparse_vectors_config=params.sparse_vectors)
        offset = None
        while True:
            points, offset = client.scroll(source, limit=_PAGE, offset=offset,
                                           with_payload=True, with_vectors=True)
            if points:
                client.upsert(target, [models.PointStruct(id=p.id, vector=p.vector, payload=p.payload)
                                       for p in points], wait=True)
            if offset is None:
                break
        held = [client.count(name, exact=True).count for name in (source, target)]
        if held[0] != held[1]:
            raise StoreError(f"copying {source!r} to {target!r} gave {held[1]} points of {held[0]}")
        client.create_collection(target + "_sync", vectors_config={})
        if client.collection_exists(source + "_sync"):
            state = client.retrieve(source + "_sync", [1], with_payload=True)
            if state:
                client.upsert(target + "_sync", [models.PointStruct(
                    id=1, vector={}, payload=state[0].payload)], wait=True)

    def drop(self, generation: str) -> None:
        if generation == self.current():
            raise ValueError(f"generation {generation!r} is the one readers get: not dropped")
        for name in (generation, generation + "_sync"):
            if name in self._collections():
                self._connect().delete_collection(name)

    def _connect(self) -> QdrantClient:
        if self.client is None:
            try:
                self.client = (QdrantClient(path=self.path) if self.local
                               else QdrantClient(url=self.url, api_key=self.api_key))
            except RuntimeError as exc:  # local mode: the directory is held by another client
                raise StoreBusy(f"Qdrant directory {self.path} is open in another process ({exc}); "
                                "it is free again when that process exits") from None
            except OSError as exc:
                raise ValueError(f"qdrant: cannot open {self.path}: {exc}") from None
        return self.client

    @contextlib.contextmanager
    def lock(self, holder: str) -> Iterator[None]:
        self._connect()  # local mode: the client's directory lock is the sync's
        yield

    def busy(self) -> str | None:
        if self._no_directory():
            return None
        try:
            self._connect()
        except StoreBusy as exc:
            return str(exc)
        return None

    def open(self, dim: int, sparse: bool, create: bool = True, principals: bool = False) -> bool:
        m = models
        self.dim = dim
        self.principals = principals
        if not create and self._no_directory():
            return False
        client = self._connect()
        try:
            exists = client.collection_exists(self.name)
        except Exception as exc:  # noqa: BLE001 - httpx and gRPC errors alike: no server answers
            raise StoreError(f"cannot reach Qdrant: {type(exc).__name__}: {exc}") from None
        if exists:
            vectors = client.get_collection(self.name).config.params.vectors
            have = vectors.get("dense") if isinstance(vectors, dict) else None
            if have is None or have.size != dim:
                raise ValueError(f"collection {self.name!r} has no {dim}-d 'dense' vector: sync "
                                 "into another collection (?table=NAME)")
        elif not create:
            return False
        else:
            client.create_collection(
                self.name, vectors_config={"dense": m.VectorParams(size=dim, distance=m.Distance.DOT)},
                sparse_vectors_config={"bm25": m.SparseVectorParams(modifier=m.Modifier.IDF)})
        if create and not client.collection_exists(self.state_name):
            client.create_collection(self.state_name, vectors_config={})
        return True

    def state(self) -> SyncState | None:
        client = self._connect()
        if not client.collection_exists(self.state_name):
            return None
        found = client.retrieve(self.state_name, [1], with_payload=True)
        # A state point always has its payload (save_state); one without says nothing.
        return SyncState.from_record(found[0].payload) if found and found[0].payload is not None else None

    def save_state(self, state: SyncState) -> None:
        self._connect().upsert(self.state_name, [models.PointStruct(
            id=1, vector={}, payload=asdict(state))], wait=True)

    def _scroll(self, payload: list[str] | bool, vectors: bool):
        offset = None
        while True:
            points, offset = self._connect().scroll(self.name, limit=_PAGE, offset=offset,
                                                    with_payload=payload, with_vectors=vectors)
            yield from points
            if offset is None:
                return

    def digests(self) -> list[tuple[str, str]]:
        return [(_shown_id(p.payload.get("chunk_id"), p.id), p.payload.get(DIGEST) or "")
                for p in self._scroll(["chunk_id", DIGEST], False)]

    def _payload_names(self) -> tuple[str, ...]:
        return _PAYLOAD + ((PRINCIPALS,) if self.principals else ())

    def upsert(self, rows: pa.Table) -> None:
        m = models
        names = self._payload_names()
        payload = {name: rows.column(name).to_pylist() for name in names}
        payload["metadata"] = [json.loads(text) for text in payload["metadata"]]
        vectors = vector_matrix(rows).tolist()
        indices = rows.column("sparse_indices").to_pylist()
        values = rows.column("sparse_values").to_pylist()
        points = [m.PointStruct(id=point_id(payload["chunk_id"][i]),
                                vector={"dense": vectors[i],
                                        "bm25": m.SparseVector(indices=indices[i], values=values[i])},
                                payload={name: payload[name][i] for name in names})
                  for i in range(len(rows))]
        self._connect().upsert(self.name, points, wait=True)

    def delete(self, chunk_ids: Sequence[str]) -> None:
        ids = [found.group(1) if (found := _FOREIGN.search(c)) else point_id(c) for c in chunk_ids]
        self._connect().delete(self.name, models.PointIdsList(points=ids), wait=True)

    def read_all(self) -> pa.Table:
        target = schema(self.dim, principals=self.principals)
        points = list(self._scroll(True, True))
        data = {name: [p.payload.get(name) for p in points] for name in self._payload_names()}
        data["metadata"] = [canonical_metadata(json.dumps(v)) for v in data["metadata"]]
        matrix = np.array([p.vector["dense"] for p in points], np.float32).reshape(-1, self.dim)
        sparse = [p.vector.get("bm25") for p in points]
        data["sparse_indices"] = [s.indices if s else [] for s in sparse]
        data["sparse_values"] = [s.values if s else [] for s in sparse]
        # A point whose id is not its chunk's was not written by this tool: its chunk_id lies.
        data["chunk_id"] = [_shown_id(c, p.id) for c, p in zip(data["chunk_id"], points)]
        columns = [pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1), pa.float32()), self.dim)
                   if f.name == "vector" else pa.array(data[f.name], f.type) for f in target]
        return pa.table(columns, schema=target)

    def setup_problems(self) -> list[str]:
        sparse = self._connect().get_collection(self.name).config.params.sparse_vectors or {}
        if "bm25" in sparse and sparse["bm25"].modifier != models.Modifier.IDF:
            return ["the bm25 sparse vector ranks without Modifier.IDF (its weights hold no IDF)"]
        return []

    def _idf_modifier(self) -> list[str]:
        """A collection made by an older chunkline ranks ``bm25`` without IDF (its weights held
        it): switched once its points hold the new weights, so that its readers never see the new
        weights unweighted for longer than the sync takes."""
        client = self._connect()
        sparse = client.get_collection(self.name).config.params.sparse_vectors or {}
        if "bm25" not in sparse or sparse["bm25"].modifier == models.Modifier.IDF:
            return []
        client.update_collection(self.name, sparse_vectors_config={
            "bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)})
        return ["qdrant: the bm25 sparse vector now ranks with Modifier.IDF (its weights no "
                "longer hold IDF): a reader's query vector is 1 at each term"]

    def finish(self) -> list[str]:
        notes = self._idf_modifier()
        if self.local:
            return [*notes, "qdrant local mode: no HNSW index, every search scans all points (exact)"]
        m = models
        for field in ("doc_id", "chunk_id", *((PRINCIPALS,) if self.principals else ())):
            self._connect().create_payload_index(self.name, field, m.PayloadSchemaType.KEYWORD, wait=True)
        return notes

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def _shown_id(chunk_id: str | None, point: object) -> str:
    """The chunk_id a point stands for: its own, or, for a point whose id is not derived from
    it (not written by chunkline), that id too, so it is reported and deleted as extra."""
    chunk_id = chunk_id or ""
    return chunk_id if point_id(chunk_id) == str(point) else f"{chunk_id} (point {point})"
