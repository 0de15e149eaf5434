"""Walk a local input root and account for every entry a pattern matches.

Pure (no Beam): ``transforms/match.py`` walks each local pattern's root with :func:`walk` (or
looks up a pattern without glob characters with :func:`look_up`) and reads what comes back.
A walk yields, in a fixed order (entries sorted by name, depth first):

    Matched    a regular file (or a link to one) to read, with the size of what it reads
    Rejected   an entry the pattern matches that cannot be read, with the reason: a directory
               that cannot be listed, a dangling symlink, a symlink loop, a symlink leaving the
               root (unless links are followed), a FIFO, socket or device
    Excluded   an entry under an excluded path (the run's own output): never read, never
               entered, not the user's corpus

Which paths a pattern matches is the caller's :class:`Glob`; the walk only asks it. A directory
the glob says can hold no match is never listed, so an unreadable directory outside what the
pattern can reach is no rejection (and costs no syscall). Beam's ``LocalFileSystem.match``
lists with ``os.walk``, which skips what it cannot list and stats each file twice; here each
matched regular file costs one ``lstat``, and a symlink one ``stat`` plus ``realpath``.

Ids: a rejection's doc_id is its path relative to the input root (``"."`` for the root itself),
like a document's; a link reads as its own path, not its target's, as ``os.walk`` gives it.
Unlike ``os.walk``, a link to a directory is walked too (under the link's path), so a file
reachable by two paths inside the root is read twice and the dedupe stage marks one copy a
duplicate: no file the pattern reaches only through a link is lost.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence, Union

from chunkline.readers import relative_id
from chunkline.records import Rejected

LEAVES_ROOT = "symlink leaves the input root"
DANGLING = "dangling symlink"
LOOP = "symlink loop"
NOT_REGULAR = "not a regular file"
UNLISTABLE = "could not list directory"
UNSTATABLE = "could not stat"


@dataclass(frozen=True)
class Matched:
    """A regular file to read: ``size`` and ``mtime`` are those of what opening ``path`` reads
    (a link's target)."""

    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class Excluded:
    """An entry under an excluded path, skipped whole."""

    path: str


WalkItem = Union[Matched, Rejected, Excluded]


class Glob(Protocol):
    """Which paths a pattern matches; paths are spelled as the walk builds them
    (``os.path.join(root, name, ...)``)."""

    def matches(self, path: str) -> bool:
        """Whether the file at ``path`` is matched."""

    def may_hold(self, path: str) -> bool:
        """Whether some path under the directory ``path`` could be matched (True when unsure)."""


def walk(
    root: str,
    glob: Glob,
    *,
    follow_symlinks: bool = False,
    exclude: Sequence[str] = (),
) -> Iterator[WalkItem]:
    """Every entry under ``root`` that ``glob`` matches, each a :data:`WalkItem`.

    A root that does not exist or is no directory matches nothing, as in Beam's local
    ``match``. A symlink inside the root is followed (a directory link is walked, a link back
    to a directory on the way down is a loop); one resolving outside the root is followed only
    with ``follow_symlinks``, and is otherwise rejected. ``exclude``: local paths whose entries
    are :class:`Excluded`, compared by identity (device, inode), so any spelling of the same
    directory is excluded.
    """
    if not root:
        return
    walker = _Walker(root, glob, follow_symlinks, exclude)
    try:
        root_stat = os.stat(root)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:  # there, but out of reach: what it holds is unaccounted for
        yield walker.reject(root, f"{UNSTATABLE} ({_describe(exc)})")
        return
    if not stat.S_ISDIR(root_stat.st_mode):
        return
    if walker.excluded_root():
        yield Excluded(root)
        return
    yield from walker.run()


def look_up(
    path: str,
    root: str,
    *,
    follow_symlinks: bool = False,
    exclude: Sequence[str] = (),
) -> Iterator[WalkItem]:
    """The one entry a pattern without glob characters names, judged like a walked entry
    (``root``: the pattern's input root, for ids and for where links may lead).

    Nothing when ``path`` does not exist, as in Beam's local ``match``; a directory is
    rejected (a pattern names files: ``DIR/**`` reads what it holds).
    """
    walker = _Walker(root, _Only(path), follow_symlinks, exclude)
    try:
        entry = _PathEntry(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        yield walker.reject(path, f"{UNSTATABLE} ({_describe(exc)})")
        return
    if walker.excluded_root():
        yield Excluded(path)
        return
    yield from walker.judge_one(entry)


class _Only:
    """The glob of a pattern without glob characters: its own path, nothing below it."""

    def __init__(self, path: str) -> None:
        self._path = path

    def matches(self, path: str) -> bool:
        return path == self._path

    def may_hold(self, path: str) -> bool:
        return False


@dataclass(frozen=True)
class _Directory:
    """A directory to list: its path as walked, its real path, and the real paths of the
    directories on the way down to it (a link back to one of them is a loop)."""

    path: str
    real: str
    above: tuple[str, ...]


class _Walker:
    def __init__(
        self, root: str, glob: Glob, follow_symlinks: bool, exclude: Sequence[str]
    ) -> None:
        self._root = root
        self._real_root = os.path.realpath(root)
        self._glob = glob
        self._follow = follow_symlinks
        self._excluded_reals: list[str] = []
        self._excluded_ids: set[tuple[int, int]] = set()
        for path in exclude:
            try:
                found = os.stat(path)
            except OSError:
                continue  # not there (yet): nothing under it to skip
            self._excluded_ids.add((found.st_dev, found.st_ino))
            self._excluded_reals.append(os.path.realpath(path))

    def excluded_root(self) -> bool:
        return any(_within(self._real_root, real) for real in self._excluded_reals)

    def reject(self, path: str, reason: str) -> Rejected:
        doc_id = "." if path == self._root else relative_id(path, self._root)
        return Rejected(path, doc_id, reason)

    def run(self) -> Iterator[WalkItem]:
        # An explicit stack, not recursion: a deep tree must not reach Python's recursion limit.
        stack = [_Directory(self._root, self._real_root, (self._real_root,))]
        while stack:
            directory = stack.pop()
            try:
                with os.scandir(directory.path) as listing:
                    entries = sorted(listing, key=lambda entry: entry.name)
            except OSError as exc:
                yield self.reject(directory.path, f"{UNLISTABLE}: {_describe(exc)}")
                continue
            below: list[_Directory] = []
            for entry in entries:
                yield from self._judge(entry, directory, below)
            # Reversed onto the stack, so directories are entered in name order.
            stack.extend(reversed(below))

    def judge_one(self, entry: _PathEntry) -> Iterator[WalkItem]:
        if entry.is_symlink():
            # Resolved only to be judged: a literal pattern names no directory to walk.
            parent = _Directory(self._root, self._real_root, (self._real_root,))
            yield from self._link(entry, parent, [], is_literal=True)
            return
        if entry.is_dir(follow_symlinks=False):
            yield self.reject(entry.path, f"{NOT_REGULAR} (a directory; a pattern names files: "
                                          f"{entry.path.rstrip('/')}/** reads the files under it)")
            return
        yield from self._file(entry)

    def _judge(
        self, entry: os.DirEntry | _PathEntry, parent: _Directory, below: list[_Directory]
    ) -> Iterator[WalkItem]:
        # d_type from the directory listing decides links and directories without a syscall.
        if entry.is_symlink():
            yield from self._link(entry, parent, below)
        elif entry.is_dir(follow_symlinks=False):
            if not self._glob.may_hold(entry.path):
                return
            if self._is_excluded(entry):
                yield Excluded(entry.path)
                return
            real = os.path.join(parent.real, entry.name)
            below.append(_Directory(entry.path, real, parent.above + (real,)))
        elif self._glob.matches(entry.path):
            yield from self._file(entry)

    def _file(self, entry: os.DirEntry | _PathEntry) -> Iterator[WalkItem]:
        try:
            found = entry.stat(follow_symlinks=False)  # the one stat a file costs
        except FileNotFoundError:
            return  # deleted since the listing: no longer an input (Beam skips it too)
        except OSError as exc:
            yield self.reject(entry.path, f"{UNSTATABLE} ({_describe(exc)})")
            return
        if (found.st_dev, found.st_ino) in self._excluded_ids:
            yield Excluded(entry.path)
        elif stat.S_ISREG(found.st_mode):
            yield Matched(entry.path, found.st_size, found.st_mtime)
        else:
            # Never handed to a reader: opening a FIFO blocks until a writer comes.
            yield self.reject(entry.path, f"{NOT_REGULAR} ({_kind(found.st_mode)})")

    def _link(
        self,
        entry: os.DirEntry | _PathEntry,
        parent: _Directory,
        below: list[_Directory],
        is_literal: bool = False,
    ) -> Iterator[WalkItem]:
        path = entry.path
        if not (self._glob.matches(path) or self._glob.may_hold(path)):
            return  # no syscall for a link the pattern cannot reach either way
        try:
            target = entry.stat(follow_symlinks=True)
        except OSError as exc:
            yield self.reject(path, self._broken_link_reason(path, exc))
            return
        is_dir = stat.S_ISDIR(target.st_mode)
        if is_dir and not is_literal and not self._glob.may_hold(path):
            return
        if not is_dir and not self._glob.matches(path):
            return
        if (target.st_dev, target.st_ino) in self._excluded_ids:
            yield Excluded(path)
            return
        real = os.path.realpath(path)
        if not self._follow and not _within(real, self._real_root):
            yield self.reject(path, f"{LEAVES_ROOT}: -> {real}")
        elif is_literal and is_dir:
            yield self.reject(path, f"{NOT_REGULAR} (a link to a directory; a pattern names "
                                    f"files: {path.rstrip('/')}/** reads the files under it)")
        elif is_dir:
            if real in parent.above:
                yield self.reject(path, f"{LOOP}: -> {real}")
            else:
                below.append(_Directory(path, real, parent.above + (real,)))
        elif stat.S_ISREG(target.st_mode):
            yield Matched(path, target.st_size, target.st_mtime)
        else:
            yield self.reject(path, f"{NOT_REGULAR} ({_kind(target.st_mode)})")

    def _broken_link_reason(self, path: str, exc: OSError) -> str:
        try:
            written = os.readlink(path)
        except OSError:
            written = "?"
        if exc.errno == errno.ENOENT:
            return f"{DANGLING}: -> {written}"
        if exc.errno == errno.ELOOP:
            return f"{LOOP}: -> {written}"
        return f"{UNSTATABLE} ({_describe(exc)})"

    def _is_excluded(self, entry: os.DirEntry | _PathEntry) -> bool:
        if not self._excluded_ids:
            return False
        # The inode comes with the listing; the device costs an lstat, paid only on a match.
        if all(entry.inode() != inode for _, inode in self._excluded_ids):
            return False
        try:
            found = entry.stat(follow_symlinks=False)
        except OSError:
            return False
        return (found.st_dev, found.st_ino) in self._excluded_ids


class _PathEntry:
    """The part of ``os.DirEntry``'s interface the walker uses, for a path given by name.

    Raises ``OSError`` from the constructor when the path cannot be ``lstat``-ed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self._lstat = os.lstat(path)

    def is_symlink(self) -> bool:
        return stat.S_ISLNK(self._lstat.st_mode)

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        mode = self.stat(follow_symlinks=follow_symlinks).st_mode
        return stat.S_ISDIR(mode)

    def inode(self) -> int:
        return self._lstat.st_ino

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if follow_symlinks and self.is_symlink():
            return os.stat(self.path)
        return self._lstat


def _within(path: str, directory: str) -> bool:
    """Whether real path ``path`` is ``directory`` or under it."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISDIR, "a directory"))
    return next((name for test, name in kinds if test(mode)), f"file mode {oct(mode)}")


def _describe(exc: OSError) -> str:
    return f"{type(exc).__name__}: {exc}"
