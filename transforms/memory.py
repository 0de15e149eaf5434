"""Freed memory handed back to the system once a bundle has worked through large records.

glibc's malloc keeps what a process frees. Memory past its mmap threshold is a mapping of its
own and goes back at once, but the threshold rises to the size of the largest block freed so
far (up to 32 MiB, mallopt(3): M_MMAP_THRESHOLD), so after the first multi-megabyte document
every later buffer of that size comes from the heap; the heap only shrinks from its top, and
each thread's arena (the tokenizer's worker threads have theirs) keeps its own free memory. The
in-process FnApiRunner runs every stage in this one process, one after another, so what one
stage freed stayed resident under the next: for one 4 MB CSV (bench/csv_memory_bench.py) the
heap held ~100 MB free at the end of the job, and the process peaked ~30 MB higher than with
that memory returned after each stage (bench/RESULTS.md, "One 100,000-row CSV").

``malloc_trim(0)`` returns the free pages of every arena, those inside the heap too (glibc
2.8 and later, madvise(MADV_DONTNEED); malloc_trim(3)). It costs a few milliseconds, and the
next records fault fresh pages where they would have reused freed ones, so it is called where
a bundle ends that moved at least :data:`RELEASE_AFTER_BYTES`, not after every bundle.
Fixing the mmap threshold instead (mallopt) kept every large block out of the heap, but made
each block a fresh mapping: MinHash's 4 MB blocks signed a 5 MB document in twice the time.
Where the C library has no ``malloc_trim`` (macOS, musl), nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Callable

# Encoded bytes a bundle has to have moved for its end to hand freed memory back: a bundle of
# this much has done tens of milliseconds of work, against which the trim and the page faults
# after it are small.
RELEASE_AFTER_BYTES = 4 << 20


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def release_after(moved_bytes: int) -> None:
    """:func:`release_freed_memory`, where a bundle moved at least :data:`RELEASE_AFTER_BYTES`."""
    if moved_bytes >= RELEASE_AFTER_BYTES:
        release_freed_memory()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (AttributeError, OSError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim
