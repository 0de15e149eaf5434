"""Qdrant, through qdrant-client: its local mode (a directory, no server) or a server by URL.

One point per chunk: the named dense vector ``dense`` (distance ``Dot``: the synced vectors
have unit length (``pipeline.sync.rows``), so the dot product is the cosine, and Qdrant keeps
them as given, where ``Cosine`` would normalize them again on insert), the named sparse vector
``bm25`` (term ids and BM25 weights, ranked by dot product: Qdrant's sparse vectors), and every
other column in the payload (``metadata`` as a JSON object, so payload filters reach its keys).
Point ids must be unsigned integers or UUIDs (Qdrant docs, "Points"): a chunk's is the UUID
version 5 of its chunk_id (RFC 4122 section 4.3), the same in every process.

The sync state is the one point of the vectorless collection ``<name>_sync``. A server builds
its HNSW index itself as points arrive; local mode searches exhaustively.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict
from typing import Sequence

import numpy as np
import pyarrow as pa
from qdrant_client import QdrantClient, models

from pipeline.sync.core import StoreError, SyncState
from pipeline.sync.rows import DIGEST, canonical_metadata, schema, vector_matrix

CHUNK_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "chunkline:chunk_id")
_PAYLOAD = ("chunk_id", "doc_id", "chunk_index", "start", "end", "headings", "text", "search_text",
            "tokens", "metadata", "page_start", "page_end", "content_key", DIGEST)
_PAGE = 5000  # points a scroll call returns: local mode sorts the collection once a call


def point_id(chunk_id: str) -> str:
    """The point id of a chunk: a UUID derived from its chunk_id alone."""
    return str(uuid.uuid5(CHUNK_NAMESPACE, chunk_id))


class QdrantStore:
    def __init__(self, collection: str = "chunks", path: str | None = None, url: str | None = None,
                 api_key: str | None = None) -> None:
        self.local = path is not None
        try:
            self.client = (QdrantClient(path=path) if path is not None
                           else QdrantClient(url=url, api_key=api_key))
        except RuntimeError as exc:  # local mode: the directory is held by another client
            raise StoreError(f"cannot open Qdrant at {path}: {exc}") from None
        self.name, self.state_name = collection, collection + "_sync"
        self.dim = 0

    def open(self, dim: int, sparse: bool) -> None:
        m = models
        self.dim = dim
        try:
            exists = self.client.collection_exists(self.name)
        except Exception as exc:  # noqa: BLE001 - httpx and gRPC errors alike: no server answers
            raise StoreError(f"cannot reach Qdrant: {type(exc).__name__}: {exc}") from None
        if exists:
            vectors = self.client.get_collection(self.name).config.params.vectors
            have = vectors.get("dense") if isinstance(vectors, dict) else None
            if have is None or have.size != dim:
                raise ValueError(f"collection {self.name!r} has no {dim}-d 'dense' vector: sync "
                                 "into another collection (?table=NAME)")
        else:
            self.client.create_collection(
                self.name, vectors_config={"dense": m.VectorParams(size=dim, distance=m.Distance.DOT)},
                sparse_vectors_config={"bm25": m.SparseVectorParams()})
        if not self.client.collection_exists(self.state_name):
            self.client.create_collection(self.state_name, vectors_config={})

    def state(self) -> SyncState | None:
        found = self.client.retrieve(self.state_name, [1], with_payload=True)
        return SyncState(**found[0].payload) if found else None

    def save_state(self, state: SyncState) -> None:
        self.client.upsert(self.state_name, [models.PointStruct(
            id=1, vector={}, payload=asdict(state))], wait=True)

    def _scroll(self, payload: Sequence[str] | bool, vectors: bool):
        offset = None
        while True:
            points, offset = self.client.scroll(self.name, limit=_PAGE, offset=offset,
                                                with_payload=payload, with_vectors=vectors)
            yield from points
            if offset is None:
                return

    def digests(self) -> dict[str, str]:
        return {p.payload["chunk_id"]: p.payload[DIGEST] for p in self._scroll(["chunk_id", DIGEST], False)}

    def upsert(self, rows: pa.Table) -> None:
        m = models
        payload = {name: rows.column(name).to_pylist() for name in _PAYLOAD}
        payload["metadata"] = [json.loads(text) for text in payload["metadata"]]
        vectors = vector_matrix(rows).tolist()
        indices = rows.column("sparse_indices").to_pylist()
        values = rows.column("sparse_values").to_pylist()
        points = [m.PointStruct(id=point_id(payload["chunk_id"][i]),
                                vector={"dense": vectors[i],
                                        "bm25": m.SparseVector(indices=indices[i], values=values[i])},
                                payload={name: payload[name][i] for name in _PAYLOAD})
                  for i in range(len(rows))]
        self.client.upsert(self.name, points, wait=True)

    def delete(self, chunk_ids: Sequence[str]) -> None:
        self.client.delete(self.name, models.PointIdsList(points=[point_id(c) for c in chunk_ids]),
                           wait=True)

    def read_all(self) -> pa.Table:
        target = schema(self.dim)
        points = list(self._scroll(True, True))
        data = {name: [p.payload.get(name) for p in points] for name in _PAYLOAD}
        data["metadata"] = [canonical_metadata(json.dumps(v)) for v in data["metadata"]]
        matrix = np.array([p.vector["dense"] for p in points], np.float32).reshape(-1, self.dim)
        sparse = [p.vector.get("bm25") for p in points]
        data["sparse_indices"] = [s.indices if s else [] for s in sparse]
        data["sparse_values"] = [s.values if s else [] for s in sparse]
        # A point whose id is not its chunk's was not written by this tool: its chunk_id lies.
        data["chunk_id"] = [c if point_id(c or "") == str(p.id) else f"{c} (point {p.id})"
                            for c, p in zip(data["chunk_id"], points)]
        columns = [pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1), pa.float32()), self.dim)
                   if f.name == "vector" else pa.array(data[f.name], f.type) for f in target]
        return pa.table(columns, schema=target)

    def finish(self) -> list[str]:
        if self.local:
            return ["qdrant local mode: no HNSW index, every search scans all points (exact)"]
        m = models
        for field in ("doc_id", "chunk_id"):
            self.client.create_payload_index(self.name, field, m.PayloadSchemaType.KEYWORD, wait=True)
        return []

    def close(self) -> None:
        self.client.close()
