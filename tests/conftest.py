import hashlib
import os
import pickle
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


def _build_demo_index(where: Path):
    from chunkline.pipeline.config import load_config
    from chunkline.pipeline.run import run

    config = load_config(ROOT / "configs" / "local.yaml",
                         [f"input.pattern={ROOT}/examples/corpus/**", f"output.path={where / 'index'}"])
    summary = run(config)
    (where / "summary.pickle").write_bytes(pickle.dumps(summary))
    (where / "digest").write_text(_tree_digest(where / "index"))


@pytest.fixture(scope="session")
def demo_index(tmp_path_factory, request):
    """The RunSummary of the default config's run on examples/corpus (``output`` is the index);
    shared and read-only."""
    from filelock import FileLock

    if not hasattr(request.config, "workerinput"):  # no xdist: this process is the session
        where = tmp_path_factory.mktemp("demo-index")
        _build_demo_index(where)
    else:
        where = tmp_path_factory.getbasetemp().parent / "demo-index"
        with FileLock(str(where) + ".lock"):
            if not (where / "digest").is_file():
                where.mkdir(exist_ok=True)
                _build_demo_index(where)
    summary = pickle.loads((where / "summary.pickle").read_bytes())
    yield summary
    assert _tree_digest(where / "index") == (where / "digest").read_text(), \
        f"a test wrote into the shared demo index {where / 'index'}: copy it before changing it"
