"""Which store a ``--to`` URI names.

=========================================  ==============================================
``/path/to/dir`` or ``lancedb:///abs/dir``  LanceDB, embedded, in that directory (a plain
                                            relative path is taken from the working directory
                                            and shown absolute; ``lancedb://rel`` is refused)
``postgresql://user@host:5432/db``          PostgreSQL with pgvector (``postgres://`` too;
                                            any libpq URI, e.g. ``?host=/socket/dir``)
``qdrant:///abs/dir``                       Qdrant's local mode (qdrant-client, on disk)
``http://host:6333``, ``https://...``       a Qdrant server (API key: ``QDRANT_API_KEY``)
=========================================  ==============================================

Every form takes ``?table=NAME`` (default ``chunks``): the table, or Qdrant collection, holding
the rows; the sync state sits beside it (``NAME_sync``). NAME is letters, digits and ``_``, at
most ``MAX_TABLE_NAME`` characters: PostgreSQL keeps 63 bytes of an identifier, and the longest
name made from it is ``NAME_embedding_hnsw``.
"""

from __future__ import annotations

import importlib
import os
import re
from urllib.parse import parse_qsl, urlencode

from chunkline.pipeline.redact import redacted
from chunkline.pipeline.sync.core import Store

DEFAULT_TABLE = "chunks"
MAX_TABLE_NAME = 63 - len("_embedding_hnsw")
# A plain identifier: it is spliced into SQL and file names.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def split_table(uri: str) -> tuple[str, str]:
    """(the URI without ``table=``, the table name). The rest of the URI stays as written
    (``urlunsplit`` would drop the empty host of ``postgresql:///db``)."""
    base, _, query = uri.partition("?")
    params = parse_qsl(query, keep_blank_values=True)
    tables = [value for key, value in params if key == "table"]
    table = tables[-1] if tables else DEFAULT_TABLE
    if not _NAME.fullmatch(table):
        raise ValueError(f"table name {table!r}: letters, digits and _ only, not starting with a digit")
    if len(table) > MAX_TABLE_NAME:
        raise ValueError(f"table name {table[:20]}... is {len(table)} characters, at most "
                         f"{MAX_TABLE_NAME} (PostgreSQL keeps 63 of {table[:8]}..._embedding_hnsw)")
    rest = urlencode([(k, v) for k, v in params if k != "table"], safe="/")
    return base + ("?" + rest if rest else ""), table


def scheme_and_rest(uri: str) -> tuple[str, str]:
    """(lower-case scheme, what follows ``://``); ("", uri) for a plain path."""
    match = _SCHEME.match(uri)
    return (match.group(1).lower(), uri[match.end():]) if match else ("", uri)


def _path(uri: str) -> str:
    """The directory a LanceDB or Qdrant local URI names, absolute."""
    scheme, rest = scheme_and_rest(uri)
    if not rest:
        raise ValueError(f"{redacted(uri)}: no directory after {scheme}://")
    if scheme and not rest.startswith("/"):
        # lancedb://data/x reads as host "data" to every other URI parser: refuse the guess.
        raise ValueError(f"{redacted(uri)}: a {scheme}:// URI takes an absolute directory "
                         f"({scheme}:///abs/dir); for a relative one give the plain path")
    return os.path.abspath(rest)


def open_store(uri: str) -> Store:
    """The store ``uri`` names (see the module's table), not yet opened for a run."""
    bare, table = split_table(uri)
    scheme, _ = scheme_and_rest(bare)
    if scheme in ("", "lancedb"):
        # Lance logs from Rust at WARN by default ("No existing dataset ... will be created" on
        # a first sync): noise beside the sync's own lines, which say what matters.
        os.environ.setdefault("LANCEDB_LOG", "error")
        return _module("lance", "lancedb").LanceStore(_path(bare), table)
    if scheme in ("postgresql", "postgres"):
        return _module("pgvector", "psycopg").PgvectorStore(bare, table)
    if scheme == "qdrant":
        return _module("qdrant", "qdrant-client").QdrantStore(table, path=_path(bare))
    if scheme in ("http", "https"):
        return _module("qdrant", "qdrant-client").QdrantStore(
            table, url=bare, api_key=os.environ.get("QDRANT_API_KEY"))
    raise ValueError(f"{redacted(uri)}: unknown store; use a directory (LanceDB), lancedb://, postgresql://, "
                     "qdrant:// or http(s):// (a Qdrant server)")


def _module(name: str, client: str):
    """A store's module, imported only when a URI names it: each needs its own client."""
    try:
        return importlib.import_module(f"chunkline.pipeline.sync.{name}")
    except ModuleNotFoundError as exc:
        raise ValueError(f"this store needs {client} ({exc}): pip install 'chunkline[sync]'") from None
