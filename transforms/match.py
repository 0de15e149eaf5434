"""MATCH: one file pattern to the files to read, and a ``Rejected`` for each matched entry that
cannot be read.

Local patterns are matched by a walk of the pattern's input root (``chunkline.walk``), with
Beam's own glob semantics (``FileSystem.translate_pattern``: ``*`` stays within a path segment,
``**`` crosses them, dotfiles are not special). Beam's ``LocalFileSystem.match`` lists with
``os.walk``, which silently skips a directory it cannot list and a dangling link, follows every
file link wherever it leads, and hands a FIFO to the reader (which then blocks); the walk
accounts for each of those instead. Other schemes (``gs://``) have no links or permissions and
keep Beam's ``FileSystems.match``.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable, Iterator, Sequence, Union

import apache_beam as beam
from apache_beam.io.filesystem import FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.fileio import ReadableFile, ReadMatches
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PBegin, PCollection

from chunkline.readers import input_root
from chunkline.records import Rejected
from chunkline.walk import Excluded, Matched, look_up, walk
from chunkline.transforms.counters import READ_EXCLUDED

_LOG = logging.getLogger(__name__)
# What Beam's FileSystem.match takes for the part of a pattern before any glob character.
_LITERAL = re.compile(r"[^[*?]*")  # no glob metacharacter: one path, nothing to walk
_SEGMENT_WILDCARDS = ("**", "?", "[")  # may match "/" in Beam's regex: no per-segment pruning
_SHOWN_EXCLUDED = 5

Found = Union[ReadableFile, Rejected]


def is_local(pattern: str) -> bool:
    """Whether Beam reads ``pattern`` with its local filesystem (no ``scheme://``)."""
    return FileSystems.get_scheme(pattern) is None


def as_beam_matches(pattern: str) -> str:
    """``pattern`` as ``FileSystem.match`` reads it: one ending in ``/`` matches its files."""
    return pattern + "*" if pattern.endswith(("/", "\\")) else pattern


class BeamGlob:
    """Which local paths ``pattern`` matches, exactly as Beam's ``FileSystem.match`` decides
    (its regex over the whole path), and which directories under ``root`` could hold such a
    path, so the walk lists no directory that cannot.

    >>> glob = BeamGlob("corpus/*/notes/*.md", "corpus")
    >>> glob.matches("corpus/a/notes/x.md"), glob.may_hold("corpus/a"), glob.may_hold("corpus/a/b")
    (True, True, False)
    """

    def __init__(self, pattern: str, root: str) -> None:
        self._match = re.compile(FileSystem.translate_pattern(pattern)).match
        self._root = root
        self._segments, self._open_ended = self._directory_segments(pattern, root)

    def matches(self, path: str) -> bool:
        return self._match(path) is not None

    def may_hold(self, path: str) -> bool:
        if self._segments is None:
            return True
        rest = self._below_root(path)
        if rest is None:
            return True
        parts = rest.split("/")
        for part, segment in zip(parts, self._segments):
            if segment.match(part) is None:
                return False
        # A closed pattern names files at one depth: a directory as deep as that holds none.
        return self._open_ended or len(parts) < len(self._segments)

    def _below_root(self, path: str) -> str | None:
        if not path.startswith(self._root):
            return None
        rest = path[len(self._root):]
        return rest[1:] if rest.startswith("/") and not self._root.endswith("/") else rest

    def _directory_segments(
        self, pattern: str, root: str
    ) -> tuple[list[re.Pattern[str]] | None, bool]:
        """Each path segment's regex up to the first one that could match across a ``/``; None
        (never prune) for a pattern spelled in a way the walk's paths cannot line up with."""
        rest = self._below_root(pattern)
        if rest is None or not rest:
            return None, True
        segments: list[re.Pattern[str]] = []
        for part in rest.split("/"):
            if not part:
                return None, True
            if any(wildcard in part for wildcard in _SEGMENT_WILDCARDS):
                return segments, True
            segments.append(re.compile(FileSystem.translate_pattern(part)))
        return segments, False


class _WalkLocal(beam.DoFn):
    """A local pattern -> a ``ReadableFile`` per file to read, a ``Rejected`` per matched entry
    that cannot be read; excluded entries are counted (``read/excluded``) and logged once."""

    def __init__(self, follow_symlinks: bool, exclude: tuple[str, ...]) -> None:
        self._follow = follow_symlinks
        self._exclude = exclude
        self._excluded = Metrics.counter(*READ_EXCLUDED)

    def process(self, pattern: str) -> Iterator[Found]:
        excluded: list[str] = []
        for item in self._items(as_beam_matches(pattern)):
            if isinstance(item, Matched):
                yield ReadableFile(FileMetadata(item.path, item.size, item.mtime))
            elif isinstance(item, Excluded):
                self._excluded.inc()
                excluded.append(item.path)
            else:
                yield item
        _log_excluded(pattern, excluded)

    def _items(self, pattern: str) -> Iterable[Matched | Rejected | Excluded]:
        root = input_root(pattern)
        if _LITERAL.fullmatch(pattern):
            return look_up(pattern, root, follow_symlinks=self._follow, exclude=self._exclude)
        if not root:
            # Beam's LocalFileSystem lists the directory "" (there is none) and matches nothing.
            _LOG.warning("read: pattern %r has no directory part and matches nothing; "
                         "write ./%s for the working directory", pattern, pattern)
            return ()
        return walk(root, BeamGlob(pattern, root), follow_symlinks=self._follow,
                    exclude=self._exclude)


class _MatchWithBeam(beam.DoFn):
    """A non-local pattern -> Beam's ``FileSystems.match`` of it, less excluded files."""

    def __init__(self, exclude: tuple[str, ...]) -> None:
        self._prefixes = tuple(path.rstrip("/") for path in exclude if not is_local(path))
        self._excluded = Metrics.counter(*READ_EXCLUDED)

    def process(self, pattern: str) -> Iterator[FileMetadata]:
        excluded: list[str] = []
        for metadata in FileSystems.match([pattern])[0].metadata_list:
            if any(_under(metadata.path, prefix) for prefix in self._prefixes):
                self._excluded.inc()
                excluded.append(metadata.path)
            else:
                yield metadata
        _log_excluded(pattern, excluded)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def _log_excluded(pattern: str, excluded: list[str]) -> None:
    if not excluded:
        return
    shown = ", ".join(excluded[:_SHOWN_EXCLUDED])
    more = f" and {len(excluded) - _SHOWN_EXCLUDED} more" if len(excluded) > _SHOWN_EXCLUDED else ""
    _LOG.info("read: pattern %r: %d excluded path(s) not read as input: %s%s",
              pattern, len(excluded), shown, more)


class MatchPattern(beam.PTransform):
    """``PBegin`` -> ``PCollection`` of ``ReadableFile`` (a file to read) and ``Rejected`` (a
    matched entry that cannot be read), for one pattern; matched once, on one worker, as Beam's
    ``MatchFiles`` does.

    Local: see :mod:`chunkline.walk`; ``follow_symlinks`` lets links leave the input root,
    ``exclude`` (paths) are never read nor walked into. Other schemes: Beam's match, files under
    an ``exclude`` prefix dropped. Excluded entries count as ``read/excluded``.
    """

    def __init__(
        self, pattern: str, follow_symlinks: bool = False, exclude: Sequence[str] = ()
    ) -> None:
        super().__init__()
        self._pattern = pattern
        self._follow = follow_symlinks
        self._exclude = tuple(exclude)

    def expand(self, begin: PBegin) -> PCollection[Found]:
        pattern = begin | "Pattern" >> beam.Create([self._pattern])
        if is_local(self._pattern):
            return pattern | "Walk" >> beam.ParDo(
                _WalkLocal(self._follow, self._exclude)
            ).with_input_types(str).with_output_types(Found)
        return (
            pattern
            | "Match" >> beam.ParDo(_MatchWithBeam(self._exclude))
            .with_input_types(str).with_output_types(FileMetadata)
            | "Open" >> ReadMatches()
        )
