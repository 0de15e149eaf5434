"""Exit statuses of ``chunkline run`` and ``chunkline sync``: one table, so a scheduler can act
on each (docs/operations.md's "Exit codes" table says what to do on each). Where a status has a
sysexits.h meaning it is that one."""

from __future__ import annotations

OK = 0
# run: ran but not published (not reconciled, held back by the guard, over the context failure
# budget) or the job failed. sync: the store does not match the run after the sync (a row
# edited or duplicated behind its back, a lost write): --repair rewrites what differs.
NOT_DONE = 1
# A usage or input error found before any work: bad config or flags, no such run, a store URI
# that names nothing usable, a damaged index file. Retrying the same command fails the same way.
USAGE = 2
# run and publish: the index is published (LATEST names it), but the sink's sync failed or lags:
# `chunkline sync OUTPUT --to ...` completes it; its own status says why it failed.
PUBLISHED_SINK_FAILED = 3
# sync: the store cannot be reached, or a write to it failed midway (EX_UNAVAILABLE): retry;
# the next sync resumes where this one stopped.
STORE_UNAVAILABLE = 69
# Another run holds the output's lease, or another sync the store's lock (EX_TEMPFAIL): retry
# later.
BUSY = 75
# Interrupted by SIGINT (Ctrl-C), 128 + the signal number as shells report it: nothing was
# published that was not complete.
INTERRUPTED = 130
