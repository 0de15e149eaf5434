"""Cloud Storage plumbing shared by the driver and every worker process.

Beam reads and writes ``gs://`` through ``gcsio``, which first asks
``apache_beam.internal.gcp.auth`` for Google default credentials: with none configured that
lookup probes the metadata server with 4 retries, about 20 s per process, before it falls back
to an anonymous client. Against a storage emulator (``STORAGE_EMULATOR_HOST`` set, which
google-cloud-storage itself honours) there is nothing to look up, so the answer "no
credentials" is given up front. This module is imported by ``transforms/__init__``, so it runs
in every process that unpickles one of our DoFns (multi-process and portable workers included),
not only in the driver.
"""

from __future__ import annotations

import os

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


def use_emulator_credentials() -> bool:
    """When ``STORAGE_EMULATOR_HOST`` is set, make Beam's credential lookup answer "none"
    immediately (an anonymous client, which google-cloud-storage points at the emulator).
    Returns whether it did; without the variable nothing changes and real credentials apply."""
    if not os.environ.get(EMULATOR_ENV):
        return False
    try:
        from apache_beam.internal.gcp import auth
    except ImportError:  # Beam without the [gcp] extra: gs:// is unavailable anyway
        return False
    # Beam caches the lookup's result in these two class attributes; pre-filling them is the
    # only hook it offers (no option or env var skips google.auth.default()).
    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials = None
        auth._Credentials._credentials_init = True
    return True
