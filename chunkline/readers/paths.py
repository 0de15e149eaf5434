"""Ids from paths: the input root of a pattern, a file's id relative to it, names no column can
hold, and where a record sits in its file."""

from __future__ import annotations

import posixpath
import re

from chunkline.containers import inner_name
from chunkline.metadata import NUL
from chunkline.readers.formats import JSONL_EXTENSIONS, PARQUET_EXTENSIONS
from chunkline.readers.text import utf8_encodable

_GLOB_CHARS = re.compile(r"[*?\[]")
_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# C0 and C1 controls and DEL (Unicode's Cc): a terminal acts on them instead of showing them (a
# newline forges a line, an ESC sequence recolours or rewrites one), so no id holds one.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


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
    names from an old archive: os.fsdecode's surrogate escapes), or one holding U+0000 or
    another control character (``new\\nline.md``, an ESC sequence: printed, they forge or
    rewrite what a terminal shows)."""
    if not utf8_encodable(uri):
        return "file name is not valid UTF-8"
    if NUL in uri:
        return "file name contains U+0000 (NUL)"
    control = _CONTROL.search(uri)
    if control:
        return f"file name contains a control character (U+{ord(control.group()):04X})"
    return None


def shown_name(path: str) -> str:
    """A path readable in any column and on any terminal: undecodable bytes (os.fsdecode's
    surrogate escapes) and control characters (U+0000 among them) written as ``\\xNN``.

    >>> shown_name("bad\\udcffname\\x00.md"), shown_name("new\\nline\\x1b[31m.md")
    ('bad\\\\xffname\\\\x00.md', 'new\\\\x0aline\\\\x1b[31m.md')
    """
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


def extension(uri: str) -> str:
    """The lower-cased extension of the uri's last path segment (``""`` when it has none)."""
    return posixpath.splitext(uri.rsplit("/", 1)[-1])[1].lower()


def record_extension(path: str) -> str:
    """The extension that says how ``path``'s records are located: its own, or for a
    compressed file the one of the file inside, as the reader reads it (``dump.jsonl.gz``,
    ``dump.jsonl.gz.bz2``: ``.jsonl``).

    >>> record_extension("share.zip//t.jsonl.zst"), record_extension("notes.md.gz")
    ('.jsonl', '.md')
    """
    name = path.rsplit("/", 1)[-1]
    while (inside := inner_name(name)) != name:
        name = inside
    return extension(name)


def locator(path: str, position: int) -> str:
    """Where a record sits: ``path#L<line>`` in a JSONL file, ``path#row<index>`` in a Parquet
    file (compressed or not: ``dump.jsonl.gz#L5``), ``path`` itself for a whole-file document;
    ``path`` is a uri or an id relative to the input root, and :func:`record_extension` decides.

    >>> locator("data/faq.jsonl", 3), locator("t.parquet", 0), locator("a.md", 0)
    ('data/faq.jsonl#L3', 't.parquet#row0', 'a.md')
    >>> locator("dump.jsonl.gz", 5), locator("share.zip//t.parquet.xz", 2)
    ('dump.jsonl.gz#L5', 'share.zip//t.parquet.xz#row2')
    """
    ext = record_extension(path)
    if ext in JSONL_EXTENSIONS:
        return f"{path}#L{position}"
    if ext in PARQUET_EXTENSIONS:
        return f"{path}#row{position}"
    return path
