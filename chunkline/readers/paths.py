"""Ids from paths: the input root of a pattern, a file's id relative to it, names no column can
hold, and where a record sits in its file."""

from __future__ import annotations

import posixpath
import re

from chunkline.metadata import NUL
from chunkline.readers.formats import JSONL_EXTENSIONS, PARQUET_EXTENSIONS
from chunkline.readers.text import utf8_encodable

_GLOB_CHARS = re.compile(r"[*?\[]")
_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def input_root(pattern: str) -> str:
    """The directory part of ``pattern`` before its first glob character (``*?[``), without a
    trailing slash; the directory of the file itself when there is no glob.

    >>> input_root("gs://bucket/docs/**/*.md"), input_root("corpus/a.txt"), input_root("*.md")
    ('gs://bucket/docs', 'corpus', '')
    """
    scheme_match = _URI_SCHEME.match(pattern)
    scheme = scheme_match.group(0) if scheme_match else ""
    path = pattern[len(scheme):]
    glob = _GLOB_CHARS.search(path)
    prefix = path[: glob.start()] if glob else path
    cut = prefix.rfind("/")
    if cut == 0 and not scheme:
        return "/"  # a pattern at the filesystem root: keep the root itself
    return scheme + (prefix[:cut] if cut > 0 else "")


def relative_id(uri: str, root: str) -> str:
    """``uri`` relative to ``root`` with ``/`` separators: the id of a file's document.

    A uri outside ``root`` (not one the root's pattern matched) keeps its full form.

    >>> relative_id("gs://bucket/docs/manuals/arm.md", "gs://bucket/docs")
    'manuals/arm.md'
    """
    base = root if root == "" or root.endswith("/") else root + "/"
    return uri[len(base):] if uri.startswith(base) and len(uri) > len(base) else uri


def name_problem(uri: str) -> str | None:
    """Why a file's name cannot be an id, or None: a name no UTF-8 column can hold (Latin-1
    names from an old archive: os.fsdecode's surrogate escapes), or one holding U+0000."""
    if not utf8_encodable(uri):
        return "file name is not valid UTF-8"
    if NUL in uri:
        return "file name contains U+0000 (NUL)"
    return None


def shown_name(path: str) -> str:
    """A path readable in any column: undecodable bytes (os.fsdecode's surrogate escapes) and
    U+0000 written as ``\\xNN``.

    >>> shown_name("bad\\udcffname\\x00.md")
    'bad\\\\xffname\\\\x00.md'
    """
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text.replace(NUL, "\\x00")


def extension(uri: str) -> str:
    """The lower-cased extension of the uri's last path segment (``""`` when it has none)."""
    return posixpath.splitext(uri.rsplit("/", 1)[-1])[1].lower()


def locator(path: str, position: int) -> str:
    """Where a record sits: ``path#L<line>`` in a JSONL file, ``path#row<index>`` in a Parquet
    file, ``path`` itself for a whole-file document; ``path`` is a uri or an id relative to the
    input root, and its extension decides.

    >>> locator("data/faq.jsonl", 3), locator("t.parquet", 0), locator("a.md", 0)
    ('data/faq.jsonl#L3', 't.parquet#row0', 'a.md')
    """
    ext = extension(path)
    if ext in JSONL_EXTENSIONS:
        return f"{path}#L{position}"
    if ext in PARQUET_EXTENSIONS:
        return f"{path}#row{position}"
    return path
