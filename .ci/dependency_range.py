#!/usr/bin/env python3
"""Run the fast tests at the ends of pyproject.toml's declared ranges, beside the lock.

The venv holds the lock (requirements.lock). This script lays the versions under test over it
in a throwaway folder put first on PYTHONPATH (``pip install --no-deps --target``), runs the
tests, and throws the folder away, so one check costs a few wheels, not a second venv:

- ``lowest``: each dependency of EDGES at the lower bound pyproject.toml declares;
- ``newest``: every package the lock pins, at the newest version the ranges allow today
  (``uv pip compile --upgrade``); a package whose newest is the lock's needs no check.

When the tests fail with several packages laid over, each is tried alone, and the run ends
with one line naming the package and version that broke them. Exit 0: the tests passed (or
there was nothing to lay over), 1: a version broke them, 2: the check itself could not run.

    python .ci/dependency_range.py lowest -- tests/pipeline/test_graph_configurations.py
    python .ci/dependency_range.py newest -- -m "not slow"

A passing check writes its stamp (commit it): .ci/lowest-tested, the digest of the declared
ranges and the lock it passed against; .ci/newest-tested, that digest and the newest versions
it laid over them. With ``--if-changed`` (CI) a check runs only when its stamp no longer holds:
for ``lowest`` when the ranges or the lock changed, for ``newest`` also when a release newer
than the tested ones appeared, so a break is still seen the day a release brings it, and a day
without a release costs one resolution (seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# The dev lock: the runtime lock plus the test tools, at the same versions (what the venv holds).
LOCK = ROOT / "requirements-dev.lock"
# The dependencies whose releases changed, or may change, how the job graph is built and run:
# their lower bounds are held to a test. (Beam 2.78 began reading string annotations as type
# hints; pyarrow's and torch's ABIs move with numpy; sentence-transformers moved its loaders.)
EDGES = ("apache-beam", "pyarrow", "torch", "sentence-transformers")
# torch is held at the lock's release (.ci/torch.txt): a newer torch is a deliberate change, and
# from PyPI a multi-GB CUDA build, which this check does not install.
HELD = {"torch"}
# A folder holding a torch wheel, as the Makefile's TORCH_WHEELS: its build is what is resolved.
TORCH_WHEELS = Path(os.environ.get("TORCH_WHEELS", "/opt/wheels"))
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", re.M)


def locked() -> dict[str, str]:
    """Package name (canonical) -> version, as requirements.lock pins it."""
    return {canonicalize_name(name): version for name, version in PIN.findall(LOCK.read_text())}


def declared() -> dict[str, Requirement]:
    """pyproject.toml's requirements (the base list and every extra), by canonical name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        lines += extra
    return {canonicalize_name(r.name): r for r in map(Requirement, lines)}


def lower_bound(requirement: Requirement) -> str | None:
    """The version a ``>=`` (or ``==``) specifier names as the lowest allowed."""
    for spec in requirement.specifier:
        if spec.operator in (">=", "=="):
            return spec.version
    return None


def lowest() -> dict[str, str]:
    """The EDGES packages whose declared lower bound is not what the lock already tests."""
    pins, requirements = locked(), declared()
    wanted = {}
    for name in EDGES:
        requirement = requirements.get(canonicalize_name(name))
        if requirement is None:
            raise SystemExit(f"dependency range: {name} is not declared in pyproject.toml")
        bound = lower_bound(requirement)
        if bound is None:
            raise SystemExit(f"dependency range: {name} declares no lower bound ({requirement})")
        pinned = pins.get(canonicalize_name(name))
        # 2.13 is 2.13.0, and torch's +cpu is the build of that release, not another release.
        if pinned is None or Version(Version(pinned).public) != Version(bound):
            wanted[name] = bound
    return wanted


def newest() -> dict[str, str]:
    """Every locked package whose newest version within the declared ranges is not the lock's."""
    with tempfile.TemporaryDirectory() as folder:
        fresh = Path(folder) / "newest.txt"
        torch = Path(folder) / "torch.txt"
        torch.write_text(f"torch=={locked()['torch']}\n")
        command = [sys.executable, "-m", "uv", "pip", "compile", "pyproject.toml", "--extra", "dev",
                   "--upgrade", "--quiet", "--python-version", "3.11", "--python-platform",
                   "x86_64-manylinux_2_28", "-c", str(torch), "-o", str(fresh)]
        if any(TORCH_WHEELS.glob("torch-*.whl")):
            command += ["--find-links", str(TORCH_WHEELS)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            raise SystemExit(2)
        now = {canonicalize_name(n): v for n, v in PIN.findall(fresh.read_text())}
    pins = locked()
    # Only what the lock pins: a package the lock never holds (a torch build's own CUDA
    # libraries, resolved with PyPI's torch) is not a newer release of anything the tests ran.
    return {name: version for name, version in sorted(now.items())
            if name in pins and pins[name] != version and name not in HELD}


def overlay(packages: dict[str, str], folder: Path) -> None:
    """Install ``packages`` (exact versions, no dependencies) into ``folder``."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder),
               *(f"{name}=={version}" for name, version in packages.items())]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"dependency range: could not install {', '.join(f'{n} {v}' for n, v in packages.items())}")


def tests_pass(packages: dict[str, str], pytest_args: list[str], folder: Path) -> tuple[bool, str]:
    """Run pytest with ``packages`` laid over the venv; (passed, the first failing test)."""
    overlay(packages, folder)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    print(output[-3000:] if done.returncode else output.strip().splitlines()[-1])
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    return done.returncode == 0, failed.group(1) if failed else f"pytest exited {done.returncode}"


# What the last passing check of each end was run against (committed): the declared ranges and
# the lock, and for the newest end the versions it laid over them.
STAMPS = {"lowest": ROOT / ".ci" / "lowest-tested", "newest": ROOT / ".ci" / "newest-tested"}


def ranges_digest() -> str:
    """A digest of what the lowest check depends on beside the code: pyproject.toml's declared
    requirements and the dev lock (the versions laid beside the bounds)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = json.dumps([project["dependencies"], project.get("optional-dependencies", {})],
                          sort_keys=True)
    return hashlib.blake2b(declared.encode() + LOCK.read_bytes(), digest_size=16).hexdigest()


def stamp_digest(end: str, packages: dict[str, str]) -> str:
    """What a passing check of ``end`` stamps: the ranges and the lock, and for the newest end the
    versions laid over them (a new release changes them: the check runs again)."""
    if end == "lowest":
        return ranges_digest()
    laid = json.dumps(sorted(packages.items())).encode()
    return hashlib.blake2b(ranges_digest().encode() + laid, digest_size=16).hexdigest()


def _stamped(stamp: Path, digest: str) -> bool:
    return stamp.is_file() and stamp.read_text().split()[:1] == [digest]


def _shown(packages: dict[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in packages.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("end", choices=("lowest", "newest"))
    parser.add_argument("--if-changed", action="store_true",
                        help="skip when the ranges and the lock (and, newest, the newest versions) "
                             "are those the end's stamp, .ci/<end>-tested, names (a passing check "
                             "writes it)")
    # What follows -- is pytest's, taken apart here: argparse gives a trailing positional list
    # nothing once an option stands between it and the first positional.
    argv = sys.argv[1:]
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.pytest_args = pytest_args
    stamp = STAMPS[args.end]
    if args.end == "lowest" and args.if_changed and _stamped(stamp, ranges_digest()):
        print("dependency range (lowest): the declared ranges and the lock are the ones "
              ".ci/lowest-tested was tested against; not run again (make test-lowest runs it)")
        return 0
    packages = lowest() if args.end == "lowest" else newest()
    if not packages:
        print(f"dependency range ({args.end}): the lock already holds these versions; nothing to lay over")
        return 0
    tested = stamp_digest(args.end, packages)
    if args.end == "newest" and args.if_changed and _stamped(stamp, tested):
        print(f"dependency range (newest): {_shown(packages)} over this lock passed before "
              "(.ci/newest-tested) and no newer release appeared; not run again (make test-newest runs it)")
        return 0
    shown = _shown(packages)
    print(f"dependency range ({args.end}): testing {shown}", flush=True)
    # A folder of this run's own: two checks at once never lay their versions over each other.
    (ROOT / ".cache").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"range-{args.end}-", dir=ROOT / ".cache"))
    try:
        passed, first = tests_pass(packages, args.pytest_args, folder)
        if passed:
            print(f"dependency range ({args.end}): passed with {shown}")
            stamp.write_text(f"{tested} {shown}\n")
            return 0
        culprits = [f"{name} {version}" for name, version in packages.items()
                    if len(packages) == 1 or not tests_pass({name: version}, args.pytest_args, folder)[0]]
        named = ", ".join(culprits) or f"{shown} together (none alone)"
        print(f"dependency range ({args.end}): {named} breaks the tests ({first})")
        return 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
