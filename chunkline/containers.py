"""Compressed files and archives: the files inside them, unpacked in memory under limits.

Pure (no Beam). A compressed file (``.gz .bz2 .xz .zst``, or a file whose first bytes are one
of those formats' magic numbers) holds one file, named by its own name less the suffix
(``tickets.jsonl.gz`` holds ``tickets.jsonl``; ``.tgz`` holds a ``.tar``). An archive (``.zip``,
``.tar``, and a compressed ``.tar``) holds members; a member that is itself compressed or an
archive is opened in turn, one level deeper. Nothing is written to disk, so a member path that
climbs out (``../../etc/passwd``) or is absolute cannot land anywhere; it is refused all the
same, as an extracting tool would be tricked by it.

Bombs are refused rather than unpacked (the zip bomb of Fifield, "A better zip bomb", WOOT 2019,
expands 46 MB to 4.5 PB by overlapping members; a gzip of zeros reaches ~1000:1): bytes are
counted as they come out of the decompressor, read in slices, so a refusal stops at the limit
and never holds more than it. The limits (:class:`ContainerOptions`) hold per input file, for
all its members together: unpacked bytes, the ratio of unpacked to packed bytes, the number of
members, and the nesting depth. A refusal names the limit; what came out before it stays.

A member's document id is the archive's own id, :data:`MEMBER_SEPARATOR`, and the member's
path: ``exports/share.zip//docs/arm.md``. A relative path never holds ``//`` (ids are normalized
paths), so a member's id can never be taken for a real file's; a member path holding ``//``
itself is refused, so it is never taken for a nested archive's member either.

An archive is read as an extracting tool would leave it on disk: a link member is refused, never
followed (tar's link types, a zip member whose Unix mode says link); of several members under
one name the last is read (tar and unzip overwrite: the last copy is what a user sees) and each
earlier one is refused naming both entries; an archive with no member is refused, as is a
compressed file holding no bytes, so every input file is accounted for.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import posixpath
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from typing import IO, Annotated, Callable, Iterator, NamedTuple

from annotated_types import Ge, Gt

from chunkline.options import check_fields, help_text
from chunkline.extras import require

MEMBER_SEPARATOR = "//"

COMPRESSED_SUFFIXES = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd"}
# A compressed tar under its one-word name: what the file inside is called.
TAR_ALIASES = {".tgz": ".tar", ".tbz2": ".tar", ".txz": ".tar"}
ARCHIVE_SUFFIXES = {".zip": "zip", ".tar": "tar"}
CONTAINER_SUFFIXES = frozenset(COMPRESSED_SUFFIXES) | frozenset(TAR_ALIASES) | frozenset(ARCHIVE_SUFFIXES)
MAGIC = (
    (b"\x1f\x8b\x08", "gzip"),  # RFC 1952: ID1 ID2, CM 8 (deflate)
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),  # RFC 8878 frame magic
)
HEAD_BYTES = 16
_SLICE = 1 << 20
# Below this many unpacked bytes the ratio is not held against a file: a 200-byte gzip of a
# short, repetitive note is no bomb.
RATIO_FLOOR_BYTES = 1 << 20


@dataclass(frozen=True)
class ContainerOptions:
    """Bounds on what one compressed file or archive may unpack to (all its members together)."""

    max_unpacked_bytes: Annotated[int, Ge(1)] | None = field(default=2_000_000_000, metadata=help_text(
        "Bytes one input file may unpack to, every member and level together; past it the rest "
        "is refused. null: no limit."))
    max_ratio: Annotated[float, Gt(0)] | None = field(default=200.0, metadata=help_text(
        "Unpacked bytes per packed byte of one input file, held once it has unpacked 1 MiB "
        "(text packs 3-10x; a bomb 1000x and more). null: no limit."))
    max_members: Annotated[int, Ge(1)] | None = field(default=100_000, metadata=help_text(
        "Members of one archive (directories aside); an archive with more is refused whole. "
        "null: no limit."))
    max_depth: Annotated[int, Ge(1)] | None = field(default=4, metadata=help_text(
        "Containers one inside another: a .zip is 1, a .jsonl.gz inside it 2. null: no limit."))

    def __post_init__(self) -> None:
        check_fields(self)


class Refused(Exception):
    """A limit or a damaged container: ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Inner(NamedTuple):
    """A file found inside a container: its path below the outermost file (``""`` for the
    file a compressed file holds, which keeps its container's id), the name its type is told
    by, and its bytes (or why it could not be had)."""

    path: str
    name: str
    data: bytes | None
    reason: str | None = None


def suffix(name: str) -> str:
    return posixpath.splitext(name.rsplit("/", 1)[-1])[1].lower()


def compression_of(name: str, head: bytes) -> str | None:
    """The codec a file is compressed with: by its suffix, else by its magic bytes."""
    by_name = COMPRESSED_SUFFIXES.get(suffix(name))
    if by_name is None and suffix(name) in TAR_ALIASES:
        by_name = "gzip" if suffix(name) == ".tgz" else {".tbz2": "bzip2", ".txz": "xz"}[suffix(name)]
    if by_name is not None:
        return by_name
    for magic, codec in MAGIC:
        if head.startswith(magic):
            return codec
    # "BZh" and a block size digit, then a block's magic (pi) or the end of stream (sqrt pi):
    # three letters alone may begin a text file.
    if len(head) >= 10 and head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] in (
            b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90"):
        return "bzip2"
    return None


def is_container(name: str, head: bytes = b"") -> bool:
    return suffix(name) in CONTAINER_SUFFIXES or compression_of(name, head) is not None


def inner_name(name: str) -> str:
    """What a compressed file's content is called: ``a.jsonl.gz`` -> ``a.jsonl``,
    ``b.tgz`` -> ``b.tar``; a file compressed without saying so keeps its name."""
    ext = suffix(name)
    if ext in TAR_ALIASES:
        return name[: -len(ext)] + TAR_ALIASES[ext]
    if ext in COMPRESSED_SUFFIXES:
        return name[: -len(ext)]
    return name


class _Budget:
    """Unpacked bytes of one input file, against the limits."""

    def __init__(self, packed: int, options: ContainerOptions) -> None:
        self.packed, self.options, self.unpacked = max(packed, 1), options, 0

    def take(self, count: int) -> None:
        self.unpacked += count
        limit = self.options.max_unpacked_bytes
        if limit is not None and self.unpacked > limit:
            raise Refused(f"unpacks to more than input.containers.max_unpacked_bytes ({limit:,} bytes)")
        ratio = self.options.max_ratio
        if ratio is not None and self.unpacked > RATIO_FLOOR_BYTES and self.unpacked > ratio * self.packed:
            raise Refused(f"unpacks to more than {ratio:g} times its {self.packed:,} bytes "
                          f"(input.containers.max_ratio): a decompression bomb")


def _read_all(stream: IO[bytes] | io.BufferedIOBase | io.RawIOBase, budget: _Budget) -> bytes:
    parts: list[bytes] = []
    while True:
        piece = stream.read(_SLICE)
        if not piece:
            return b"".join(parts)
        budget.take(len(piece))
        parts.append(piece)


def _decompressor(codec: str, data: bytes):
    source = io.BytesIO(data)
    if codec == "gzip":
        return gzip.GzipFile(fileobj=source)
    if codec == "bzip2":
        return bz2.BZ2File(source)
    if codec == "xz":
        return lzma.LZMAFile(source)
    zstandard = require("pipeline", "zstandard")  # the one codec the standard library lacks (before Python 3.14)

    return zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=True)


def _unpack(codec: str, data: bytes, budget: _Budget) -> bytes:
    try:
        with _decompressor(codec, data) as stream:
            return _read_all(stream, budget)
    except Refused:
        raise
    except EOFError:
        raise Refused(f"truncated {codec} data") from None
    except Exception as exc:  # noqa: BLE001 - each codec raises its own (BadGzipFile, LZMAError, ZstdError)
        raise Refused(f"not valid {codec} data ({type(exc).__name__}: {exc})") from None


def member_problem(path: str) -> str | None:
    """Why an archive member's path is refused: absolute, climbing out of the archive (with
    ``\\`` taken as a separator too, as extractors on Windows and unzip for DOS-made archives
    take it), or holding ``//``, which in an id marks a member of a nested archive."""
    slashed = path.replace("\\", "/")
    if slashed.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return f"member path {path!r} is absolute"
    normal = posixpath.normpath(slashed)
    if normal == ".." or normal.startswith("../"):
        return f"member path {path!r} climbs out of the archive"
    if MEMBER_SEPARATOR in path:
        return (f"member path {path!r} holds {MEMBER_SEPARATOR!r}, which in an id marks a member "
                f"of a nested archive")
    return None


def _replaced(entries: list[tuple[int, str]]) -> dict[int, int]:
    """Entry number -> the later entry of the same name that replaces it, for ``(number,
    name)`` entries: tar and unzip overwrite, so the last copy is the one a user has."""
    last = {name: number for number, name in entries}
    return {number: last[name] for number, name in entries if last[name] != number}


def _replaced_reason(number: int, by: int) -> str:
    return (f"repeated member name: entry {number} of the archive, replaced by entry {by} of the "
            f"same name (as tar and unzip, the last copy is read)")


SYMLINK = "symbolic link in archive: not followed"
HARD_LINK = "hard link in archive: not followed"
NOT_REGULAR = "not a regular file (device, fifo)"


def _zip_type_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a zip member is no regular file, by the Unix mode in its external attributes
    (Info-ZIP stores a link as a member whose bytes are the target path); None without a mode."""
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind == stat.S_IFLNK:
        return SYMLINK
    return None if kind in (0, stat.S_IFREG) else NOT_REGULAR


def _no_members(count: int, entries: int) -> None:
    if count == 0:
        raise Refused("archive holds no members" + (" (only directories)" if entries else ""))


def _skipped(name: str, is_wanted: Callable[[str], bool]) -> bool:
    """A member no reader takes, and no container by its name: never unpacked."""
    return suffix(name) not in CONTAINER_SUFFIXES and not is_wanted(name)


def _read_member(name: str, open_member: Callable[[], IO[bytes] | None], budget: _Budget,
                 kind: str) -> Inner:
    """One member's bytes under the budget, or why it could not be read (a bad CRC, an
    unsupported method, a member cut short); a limit still stops the whole container."""
    try:
        stream = open_member()
        if stream is None:  # tarfile's extractfile for what is not a regular file
            raise ValueError("not a regular file")
        with stream:
            return Inner(name, name, _read_all(stream, budget))
    except Refused:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile and tarfile raise many types
        return Inner(name, name, None, f"unreadable {kind} member ({type(exc).__name__}: {exc})")


def _zip_members(data: bytes, budget: _Budget, options: ContainerOptions,
                 is_wanted: Callable[[str], bool]) -> Iterator[Inner]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = list(enumerate(archive.infolist(), start=1))
    except Exception as exc:  # noqa: BLE001 - BadZipFile, a truncated central directory, ...
        raise Refused(f"not a readable zip archive ({type(exc).__name__}: {exc})") from None
    infos = [(number, info) for number, info in entries if not info.is_dir()]
    _check_members(len(infos), options)
    _no_members(len(infos), len(entries))
    replaced = _replaced([(number, info.filename) for number, info in infos])
    for number, info in infos:
        problem = member_problem(info.filename)
        if problem is None and number in replaced:
            problem = _replaced_reason(number, replaced[number])
        problem = problem or _zip_type_problem(info)
        if problem:
            yield Inner(info.filename, info.filename, None, problem)
        elif _skipped(info.filename, is_wanted):
            yield Inner(info.filename, info.filename, None)
        elif info.flag_bits & 0x1:
            yield Inner(info.filename, info.filename, None, "encrypted zip member")
        else:
            yield _read_member(info.filename, functools.partial(archive.open, info), budget, "zip")


def _tar_members(data: bytes, budget: _Budget, options: ContainerOptions,
                 is_wanted: Callable[[str], bool]) -> Iterator[Inner]:
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
        entries = list(enumerate(archive.getmembers(), start=1))
    except Exception as exc:  # noqa: BLE001 - ReadError, a truncated header, ...
        raise Refused(f"not a readable tar archive ({type(exc).__name__}: {exc})") from None
    members = [(number, member) for number, member in entries if not member.isdir()]
    _check_members(len(members), options)
    _no_members(len(members), len(entries))
    replaced = _replaced([(number, member.name) for number, member in members])
    for number, member in members:
        problem = member_problem(member.name)
        if problem is None and number in replaced:
            problem = _replaced_reason(number, replaced[number])
        if problem:
            yield Inner(member.name, member.name, None, problem)
        elif member.issym() or member.islnk():
            yield Inner(member.name, member.name, None, SYMLINK if member.issym() else HARD_LINK)
        elif not member.isfile():
            yield Inner(member.name, member.name, None, NOT_REGULAR)
        elif _skipped(member.name, is_wanted):
            yield Inner(member.name, member.name, None)
        else:
            yield _read_member(member.name, functools.partial(archive.extractfile, member), budget, "tar")


def _check_members(count: int, options: ContainerOptions) -> None:
    if options.max_members is not None and count > options.max_members:
        raise Refused(f"archive has {count:,} members, more than input.containers.max_members "
                      f"({options.max_members:,})")


def unpacked(name: str, data: bytes, options: ContainerOptions,
             is_wanted: Callable[[str], bool] = lambda name: True) -> Iterator[Inner]:
    """Every file inside the container ``name`` holding ``data``, depth first, in archive
    order: a plain file's bytes, or its reason. ``is_wanted(name)``: whether a member not
    itself a container is worth unpacking (a reader exists for it); one that is not comes
    out with ``data`` None and no reason, for the caller to name. A limit or damage that
    stops the whole container ends the iteration with a last ``Inner`` holding the reason,
    at the path of the container it stopped in."""
    budget = _Budget(len(data), options)
    yield from _walk("", name, data, 1, budget, options, is_wanted)


def _join(parent: str, path: str) -> str:
    return f"{parent}{MEMBER_SEPARATOR}{path}" if parent else path


def _walk(path: str, name: str, data: bytes, depth: int, budget: _Budget,
          options: ContainerOptions, is_wanted: Callable[[str], bool]) -> Iterator[Inner]:
    if options.max_depth is not None and depth > options.max_depth:
        yield Inner(path, name, None, f"nested deeper than input.containers.max_depth ({options.max_depth})")
        return
    try:
        codec = compression_of(name, data[:HEAD_BYTES])
        if codec is not None:
            # A file of no bytes is no truncated stream (xz and bzip2 would call it one).
            content = _unpack(codec, data, budget) if data else b""
            if not content:
                # Whatever the name inside says, there is nothing to read: not its type's fault.
                raise Refused("empty compressed file (it unpacks to no bytes)")
            inside = inner_name(name)
            if is_container(inside, content[:HEAD_BYTES]):
                yield from _walk(path, inside, content, depth + 1, budget, options, is_wanted)
            else:
                yield Inner(path, inside, content)
            return
        kind = ARCHIVE_SUFFIXES.get(suffix(name))
        read = _zip_members if kind == "zip" else _tar_members
        members = read(data, budget, options, is_wanted)
        for member in members:
            member_path = _join(path, member.path)
            if member.data is not None and is_container(member.name, member.data[:HEAD_BYTES]):
                yield from _walk(member_path, member.name, member.data, depth + 1, budget, options,
                                 is_wanted)
            else:
                yield member._replace(path=member_path)
    except Refused as refused:
        yield Inner(path, name, None, refused.reason)
