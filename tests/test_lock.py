"""The lock files are made from pyproject.toml: every requirement it declares is pinned, at a
version its range admits, and the two locks agree wherever they pin the same package. A range
edited without `make lock` fails here, not on a user's first install."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", re.M)


def pins(name: str) -> dict[str, str]:
    return {canonicalize_name(n): v for n, v in PIN.findall((ROOT / name).read_text())}


def requirements(extra: str | None) -> list[Requirement]:
    """What the base list or an extra declares, an extra naming others (``chunkline[embed]``)
    expanded into theirs: the project itself is never pinned."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    found: list[Requirement] = []
    for requirement in map(Requirement, lines):
        if canonicalize_name(requirement.name) == project["name"]:
            for named in sorted(requirement.extras):
                found += requirements(named)
        else:
            found.append(requirement)
    return found


def test_every_extra_names_real_extras() -> None:
    """`all` reaches every feature's extra (bench, dev and `all` itself aside)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {canonicalize_name(r.name) for r in requirements("all")}
    for extra in set(extras) - {"all", "bench", "dev"}:
        assert {canonicalize_name(r.name) for r in requirements(extra)} <= names, extra


# requirements.lock is what the worker image installs: everything a configuration can turn on.
@pytest.mark.parametrize(("lock", "extras"), [("requirements.lock", [None, "all"]),
                                              ("requirements-dev.lock", [None, "all", "dev"])])
def test_every_declared_requirement_is_pinned_within_its_range(lock: str, extras: list) -> None:
    pinned = pins(lock)
    for extra in extras:
        for requirement in requirements(extra):
            name = canonicalize_name(requirement.name)
            assert name in pinned, f"{requirement.name} is declared but not in {lock}: run `make lock`"
            release = pinned[name]
            assert requirement.specifier.contains(release, prereleases=True), \
                f"{lock} pins {name}=={pinned[name]}, outside {requirement}: run `make lock`"


def test_the_two_locks_agree() -> None:
    runtime, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    assert {n: v for n, v in runtime.items() if dev.get(n) != v} == {}


def test_torch_is_pinned_by_release_not_by_build() -> None:
    """The locks name torch's release (2.13.0), which any build satisfies (PEP 440: a local label
    such as +cpu or +cu130 matches ==2.13.0): a pin of one build fails wherever the index or the
    folder that serves it is absent. Its build's own libraries (CUDA's) are never pinned, so a CPU
    build installs nothing more than the lock."""
    for lock in ("requirements.lock", "requirements-dev.lock"):
        pinned = pins(lock)
        assert Version(pinned["torch"]).local is None, f"{lock} pins torch's build {pinned['torch']}"
        assert not [n for n in pinned if n.startswith("nvidia-") or n == "triton"]


def test_the_installed_versions_are_the_locks() -> None:
    """What `make setup` installed is what the lock says (no package resolved afresh)."""
    from importlib import metadata

    for name, version in pins("requirements-dev.lock").items():
        # A build of the locked release (torch 2.13.0+cpu from a folder or PyTorch's index) is it.
        assert Version(Version(metadata.version(name)).public) == Version(version), name


def _range_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dependency_range", ROOT / ".ci" / "dependency_range.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lowest_check_lays_each_edge_at_its_declared_bound() -> None:
    script = _range_script()
    wanted = script.lowest()
    declared = {canonicalize_name(r.name): r for r in requirements("all")}
    locked = pins("requirements-dev.lock")
    for name in script.EDGES:
        bound = script.lower_bound(declared[canonicalize_name(name)])
        # Laid over exactly when the lock holds another release than the bound.
        assert (name in wanted) == (Version(Version(locked[canonicalize_name(name)]).public) != Version(bound))
        if name in wanted:
            assert wanted[name] == bound


def test_a_newest_stamp_holds_only_for_the_versions_it_tested(tmp_path, monkeypatch) -> None:
    """CI skips the newest check while its stamp holds: a release newer than the tested ones (or
    another lock) must make it run again."""
    script = _range_script()
    monkeypatch.setitem(script.STAMPS, "newest", tmp_path / "newest-tested")
    tested = {"google-auth": "2.63.1", "grpcio": "1.85.4"}
    digest = script.stamp_digest("newest", tested)
    (tmp_path / "newest-tested").write_text(f"{digest} {script._shown(tested)}\n")
    assert script._stamped(script.STAMPS["newest"], script.stamp_digest("newest", dict(tested)))
    released = {**tested, "grpcio": "1.86.0"}
    assert not script._stamped(script.STAMPS["newest"], script.stamp_digest("newest", released))
    assert not script._stamped(script.STAMPS["newest"], script.stamp_digest("newest", {**tested, "rich": "15.0"}))
    # The lowest stamp is the ranges and the lock alone: a newest digest never passes for it.
    assert script.stamp_digest("lowest", tested) == script.ranges_digest() != digest
    monkeypatch.setattr(script, "ranges_digest", lambda: "another lock")
    assert not script._stamped(script.STAMPS["newest"], script.stamp_digest("newest", tested))
