"""Which store a ``--to`` URI names.

=========================================  ==============================================
``/path/to/dir`` or ``lancedb:///abs/dir``  LanceDB, embedded, in that directory
``lancedb://rel/dir``                       (a relative directory: no third slash)
``postgresql://user@host:5432/db``          PostgreSQL with pgvector (``postgres://`` too;
                                            any libpq URI, e.g. ``?host=/socket/dir``)
``qdrant:///abs/dir``                       Qdrant's local mode (qdrant-client, on disk)
``http://host:6333``, ``https://...``       a Qdrant server (API key: ``QDRANT_API_KEY``)
=========================================  ==============================================

Every form takes ``?table=NAME`` (default ``chunks``): the table, or Qdrant collection, holding
the rows; the sync state sits beside it (``NAME_sync``).
"""

from __future__ import annotations

import importlib
import os
import re
from urllib.parse import parse_qsl, urlencode

from pipeline.sync.core import Store

DEFAULT_TABLE = "chunks"
# A plain identifier: it is spliced into SQL and file names.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*):[^@/?#]*@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redacted(uri: str) -> str:
    """``uri`` fit for a message or a log: a password (``user:secret@``, ``?password=``, as
    libpq takes them) replaced by ``***``."""
    return _QUERY_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1:***@", uri))


def split_table(uri: str) -> tuple[str, str]:
    """(the URI without ``table=``, the table name). The rest of the URI stays as written
    (``urlunsplit`` would drop the empty host of ``postgresql:///db``)."""
    base, _, query = uri.partition("?")
    params = parse_qsl(query, keep_blank_values=True)
    tables = [value for key, value in params if key == "table"]
    table = tables[-1] if tables else DEFAULT_TABLE
    if not _NAME.fullmatch(table):
        raise ValueError(f"table name {table!r}: letters, digits and _ only, not starting with a digit")
    rest = urlencode([(k, v) for k, v in params if k != "table"], safe="/")
    return base + ("?" + rest if rest else ""), table


def scheme_and_rest(uri: str) -> tuple[str, str]:
    """(lower-case scheme, what follows ``://``); ("", uri) for a plain path."""
    match = _SCHEME.match(uri)
    return (match.group(1).lower(), uri[match.end():]) if match else ("", uri)


def _path(uri: str) -> str:
    scheme, rest = scheme_and_rest(uri)
    if not rest:
        raise ValueError(f"{redacted(uri)}: no directory after {scheme}://")
    return rest


def open_store(uri: str) -> Store:
    """The store ``uri`` names (see the module's table), not yet opened for a run."""
    bare, table = split_table(uri)
    scheme, _ = scheme_and_rest(bare)
    if scheme in ("", "lancedb"):
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
        return importlib.import_module(f"pipeline.sync.{name}")
    except ModuleNotFoundError as exc:
        raise ValueError(f"this store needs {client} ({exc}): pip install 'chunkline[sync]'") from None
