"""Index generations: one table (or collection) per embedding signature, behind one alias.

A store's rows are comparable only when one model made them: the same model, weights, backend,
dtype as resolved, width and stored vector type (``vector_dtype``). A run whose signature differs
from the one the store serves is therefore synced into a *generation* of its own, and the store's
alias moves to it only once it is fully written and verified, in one step readers cannot see half
of. The previous generation stays, for a rollback, until ``chunkline sync --drop-old-generations``
removes it.

Naming: the user's table name (``?table=NAME``, default ``chunks``) is the *alias* readers use.
The first generation is the plain table ``NAME``, as every store synced before generations is
(nothing changes for a store whose signature never changes); every other generation is
``NAME_g`` + the first 7 hex digits of the signature's BLAKE2b digest (``generation_name``).
How each store aliases (``chunkline.pipeline.sync.lance``, ``pgvector``, ``qdrant``):

- PostgreSQL: views (``NAME``, ``NAME_sync``, ``NAME_terms``) over the generation's tables; the
  first switch renames the plain tables to their generation's name in the same transaction;
- Qdrant: a collection alias ``NAME``; the first switch copies the plain collection to its
  generation's name (Qdrant cannot rename), then deletes it and creates the alias;
- LanceDB: a one-row pointer table ``NAME_alias`` naming the generation, which a reader follows
  (``chunkline.pipeline.sync.lance.open_current``).

The signature is the run's own ``embedding_signature`` (``chunkline.pipeline.plan.embedding_signature``,
recorded in its manifest: what decides a vector besides the text) with the width the run's
vectors have (``dim``), as canonical JSON. Each generation records it in its sync state
(``SyncState.signature``), so a second machine syncing the store finds the generation of its run.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Protocol

from chunkline.index.manifest_types import Manifest
from chunkline.pipeline.redact import redacted

# "_g" and 7 hex digits: NAME (at most ``uri.MAX_TABLE_NAME`` = 48 characters) + 9 keeps
# PostgreSQL's longest derived name, ``<generation>_terms``, within its 63-byte identifiers.
_SUFFIX = re.compile(r"_g[0-9a-f]{7}")
DIGITS = 7


def signature_of(manifest: Manifest) -> str:
    """The store signature of a run: its manifest's ``embedding_signature`` (or, for a run of an
    older chunkline, its ``model`` record) with ``dim``, as canonical JSON, secrets masked (a
    model given as a URL may carry a token; the signature is written into the store)."""
    recorded, model = manifest.embedding_signature, manifest.model
    if recorded is not None and recorded not in ("", "none"):
        fields = json.loads(recorded)
    elif model is None:
        fields = {}
    else:
        # The model record of a run from before embedding signatures, as the signature always
        # read it: the four fields such a run wrote (vector_dtype came later, with signatures).
        fields = {"name": model.name, "dtype": model.dtype, "normalize": model.normalize,
                  "max_seq_length": model.max_seq_length,
                  **({"vector_dtype": model.vector_dtype} if model.vector_dtype is not None else {})}
    fields["dim"] = model.dim if model is not None else None
    return redacted(json.dumps(fields, sort_keys=True, separators=(",", ":")))


def digest(signature: str) -> str:
    return hashlib.blake2b(signature.encode("utf-8"), digest_size=8).hexdigest()[:DIGITS]


def generation_name(base: str, signature: str) -> str:
    """The table (collection) of ``signature``'s generation other than the first:
    ``chunks`` -> ``chunks_g1a2b3c4``."""
    return f"{base}_g{digest(signature)}"


def is_generation(base: str, name: str) -> bool:
    """Whether ``name`` is one of ``base``'s generations: ``base`` itself or ``base_g<7 hex>``."""
    return name == base or (name.startswith(base) and bool(_SUFFIX.fullmatch(name[len(base):])))


def describe(signature: str) -> str:
    """A signature in a few words, for messages: ``all-MiniLM-L6-v2 384-d float32 (int8)``."""
    try:
        fields = json.loads(signature)
    except ValueError:
        return "an unknown signature"
    if not isinstance(fields, dict):
        return "an unknown signature"
    words = [str(fields.get("model", "?")).rsplit("/", 1)[-1], f"{fields.get('dim')}-d",
             str(fields.get("dtype", ""))]
    if fields.get("vector_dtype"):
        words.append(f"stored {fields['vector_dtype']}")
    if fields.get("backend"):
        words.append(str(fields["backend"]))
    return " ".join(w for w in words if w)


class Generations(Protocol):
    """What a store offers besides ``core.Store`` to hold generations (all three do).

    ``base`` is the alias's name. ``use(name)`` points every ``core.Store`` method (open, state,
    upsert, ...) at generation ``name``; the lock stays the alias's, one sync at a time."""

    base: str

    def use(self, generation: str) -> None: ...

    def current(self) -> str | None:
        """The generation readers of the alias get now; None for an empty store. Reads only."""

    def generations(self) -> list[str]:
        """Every generation the store holds (``is_generation``), the current one included."""

    def switch(self, generation: str, previous: str | None, rename_to: str | None) -> None:
        """Point the alias at ``generation`` in one step readers cannot see half of.
        ``previous``: the generation the alias gave until now; when it is the plain table
        ``base``, it becomes ``rename_to`` (PostgreSQL and Qdrant: the alias takes its name)."""

    def drop(self, generation: str) -> None:
        """Remove a generation the alias does not give (its rows, state and terms)."""
