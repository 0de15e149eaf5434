"""Every input accounted: what a walk of the corpus meets that cannot be read is a rejected row.

Each case runs the real ``ReadDocuments`` under Beam's ``TestPipeline``. Permission cases read as
the unprivileged user ``nobody`` in a child process (root reads through ``chmod 000``), and
the FIFO case in a child with a timeout (a reader that opens a FIFO waits for a writer forever).
The child is this module run as ``python -m tests.faults.test_inputs SPEC``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterator

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter

from chunkline.readers import ReadOptions
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms.read import ReadDocuments

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
CHILD_TIMEOUT_S = 180


# --- Running a read and collecting what it gave ------------------------------------------------


def read(patterns: list[str], out: Path, follow_symlinks: bool = False,
         exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ReadDocuments; {"documents": {doc_id: (uri, text)}, "rejected": {doc_id: (uri,
    reason)}, "counters": {name: value}}; ``out``: a directory this process may write."""
    records = out / "records.json"
    pipeline = fnapi_pipeline()
    # Only what a case sets is passed: each case states the one knob it turns.
    knobs = {"follow_symlinks": True} if follow_symlinks else {}
    knobs.update({"exclude": exclude} if exclude else {})
    outputs = pipeline | ReadDocuments(patterns, ReadOptions(), **knobs)
    _ = (
        (outputs.documents | "Documents" >> beam.Map(lambda d: ["document", d.doc_id, d.uri,
                                                                d.text]),
         outputs.rejected | "Rejected" >> beam.Map(lambda r: ["rejected", r.doc_id, r.uri,
                                                              r.reason]))
        | beam.Flatten()
        | beam.combiners.ToList()
        | beam.Map(lambda rows, path=str(records): Path(path).write_text(json.dumps(rows)))
    )
    result = pipeline.run()
    result.wait_until_finish()
    found: dict[str, Any] = {"documents": {}, "rejected": {}, "counters": {}}
    for kind, doc_id, uri, detail in json.loads(records.read_text()):
        table = found["documents" if kind == "document" else "rejected"]
        assert doc_id not in table, f"{doc_id} twice"
        table[doc_id] = (uri, detail)
    for name in ("documents", "rejected", "excluded"):
        query = result.metrics().query(MetricsFilter().with_namespace("read").with_name(name))
        found["counters"][name] = sum(c.committed for c in query["counters"])
    return found


def read_in_child(patterns: list[str], work: Path, as_nobody: bool) -> dict[str, Any]:
    """:func:`read` in a child process, as ``nobody`` when asked; fails the test if the child
    runs past CHILD_TIMEOUT_S (a read that hangs)."""
    out = Path(tempfile.mkdtemp(dir=work, prefix="out-"))
    spec = out / "spec.json"
    spec.write_text(json.dumps({"patterns": patterns, "out": str(out)}))
    if as_nobody:
        os.chown(out, NOBODY, NOBODY)
    try:
        child = subprocess.run(
            [*_as_nobody(as_nobody), sys.executable, "-m", "tests.faults.test_inputs", str(spec)],
            cwd=REPO, env={**os.environ, "HOME": str(out)}, capture_output=True, text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"ReadDocuments({patterns}) did not finish in {CHILD_TIMEOUT_S} s")
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads((out / "found.json").read_text())


def _as_nobody(as_nobody: bool) -> list[str]:
    if not as_nobody:
        return []
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def _child_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    found = read(spec["patterns"], out)
    (out / "found.json").write_text(json.dumps(found))


# --- Fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def work() -> Iterator[Path]:
    """A directory ``nobody`` can traverse (pytest's tmp_path sits under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="chunkline-faults-"))
    path.chmod(0o755)
    yield path
    for directory, _, _ in os.walk(path):
        os.chmod(directory, 0o755)  # what a test locked, so the cleanup can enter it
    shutil.rmtree(path)


@pytest.fixture(scope="module")
def unprivileged() -> bool:
    """Whether the permission cases need ``nobody`` (True) or bite on this user already;
    skips where neither holds."""
    if os.geteuid() != 0:
        return False  # chmod 000 already stops this user
    if shutil.which("setpriv") is None:
        pytest.skip("running as root, where chmod 000 stops nothing, and setpriv is missing")
    probe = subprocess.run(
        [*_as_nobody(True), sys.executable, "-c", "import chunkline.transforms.read"],
        cwd=REPO, env={**os.environ, "HOME": "/tmp"}, capture_output=True, text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot import the project from {REPO} with {sys.executable} "
                    f"(the checkout and the venv must be readable by others): "
                    f"{probe.stderr.strip()[-300:]}")
    return True


def corpus(base: Path, files: dict[str, str]) -> Path:
    root = base / "corpus"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    for directory, _, _ in os.walk(base):
        os.chmod(directory, 0o755)
    return root


def documents(found: dict[str, Any]) -> dict[str, str]:
    return {doc_id: text for doc_id, (_, text) in found["documents"].items()}


def reasons(found: dict[str, Any]) -> dict[str, str]:
    return {doc_id: reason for doc_id, (_, reason) in found["rejected"].items()}


def counted(found: dict[str, Any]) -> tuple[int, int, int]:
    counters = found["counters"]
    return counters["documents"], counters["rejected"], counters["excluded"]


# --- Permissions (as nobody) -------------------------------------------------------------------


def test_unreadable_directory_is_rejected(work: Path, unprivileged: bool) -> None:
    root = corpus(work, {"ok.md": "fine", "locked/inner.md": "never read"})
    (root / "locked").chmod(0)
    found = read_in_child([f"{root}/**"], work, unprivileged)
    assert documents(found) == {"ok.md": "fine"}
    assert reasons(found).keys() == {"locked"}
    assert reasons(found)["locked"].startswith("could not list directory: PermissionError")
    assert found["rejected"]["locked"][0] == f"{root}/locked"
    assert counted(found) == (1, 1, 0)


def test_unreadable_file_is_rejected(work: Path, unprivileged: bool) -> None:
    root = corpus(work, {"ok.md": "fine", "secret.md": "never read"})
    (root / "secret.md").chmod(0)
    found = read_in_child([f"{root}/**"], work, unprivileged)
    assert documents(found) == {"ok.md": "fine"}
    assert reasons(found).keys() == {"secret.md"}
    assert reasons(found)["secret.md"].startswith("could not read file (PermissionError")
    assert counted(found) == (1, 1, 0)


def test_unreadable_directory_the_pattern_cannot_reach_is_not_listed(
    work: Path, unprivileged: bool
) -> None:
    # corpus/*.md names no file under corpus/sub/: the walk never lists it, so its being
    # unreadable loses nothing the pattern asked for.
    root = corpus(work, {"ok.md": "fine", "sub/inner.md": "not asked for"})
    (root / "sub").chmod(0)
    found = read_in_child([f"{root}/*.md"], work, unprivileged)
    assert documents(found) == {"ok.md": "fine"}
    assert reasons(found) == {}


# --- Special files -----------------------------------------------------------------------------


def test_fifo_is_rejected_and_the_read_does_not_hang(work: Path) -> None:
    root = corpus(work, {"ok.md": "fine"})
    os.mkfifo(root / "pipe.md")
    found = read_in_child([f"{root}/**"], work, as_nobody=False)
    assert documents(found) == {"ok.md": "fine"}
    assert reasons(found) == {"pipe.md": "not a regular file (a FIFO)"}
    assert counted(found) == (1, 1, 0)


def test_socket_is_rejected(work: Path) -> None:
    root = corpus(work, {"ok.md": "fine"})
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(root / "sock.md"))
        found = read([f"{root}/**"], work)
    assert documents(found) == {"ok.md": "fine"}
    assert reasons(found) == {"sock.md": "not a regular file (a socket)"}


# --- Symlinks ----------------------------------------------------------------------------------


def test_dangling_symlink_is_rejected(work: Path) -> None:
    root = corpus(work, {"ok.md": "fine"})
    (root / "gone.md").symlink_to("moved.md")
    found = read([f"{root}/**"], work)
    assert documents(found) == {"ok.md": "fine"}
    assert reasons(found) == {"gone.md": "dangling symlink: -> moved.md"}
    assert counted(found) == (1, 1, 0)


def _outside_targets(work: Path) -> list[tuple[str, Path]]:
    sibling = work / "elsewhere" / "secret.md"
    sibling.parent.mkdir()
    sibling.write_text("outside the corpus", encoding="utf-8")
    targets = [("secret.md", sibling)]
    if Path("/etc/passwd").is_file():
        targets.append(("passwd.txt", Path("/etc/passwd")))
    return targets


def test_symlink_leaving_the_root_is_rejected(work: Path) -> None:
    root = corpus(work, {"ok.md": "fine"})
    targets = _outside_targets(work)
    for name, target in targets:
        (root / name).symlink_to(target)
    found = read([f"{root}/**"], work)
    assert documents(found) == {"ok.md": "fine"}
    assert reasons(found) == {
        name: f"symlink leaves the input root: -> {os.path.realpath(target)}"
        for name, target in targets
    }


def test_symlink_leaving_the_root_is_read_when_following(work: Path) -> None:
    root = corpus(work, {"ok.md": "fine"})
    targets = _outside_targets(work)
    for name, target in targets:
        (root / name).symlink_to(target)
    found = read([f"{root}/**"], work, follow_symlinks=True)
    assert documents(found) == {"ok.md": "fine", **{
        name: target.read_text(encoding="utf-8") for name, target in targets
    }}
    # A link reads as its own path, wherever it points.
    assert {found["documents"][name][0] for name, _ in targets} == {
        f"{root}/{name}" for name, _ in targets}
    assert reasons(found) == {}


def test_directory_symlink_leaving_the_root(work: Path) -> None:
    root = corpus(work, {"ok.md": "fine"})
    shared = work / "shared"
    shared.mkdir()
    (shared / "a.md").write_text("shared text", encoding="utf-8")
    (root / "shared").symlink_to(shared, target_is_directory=True)
    kept = read([f"{root}/**"], work)
    assert reasons(kept) == {"shared": f"symlink leaves the input root: -> {shared}"}
    followed = read([f"{root}/**"], work, follow_symlinks=True)
    assert documents(followed) == {"ok.md": "fine", "shared/a.md": "shared text"}
    assert reasons(followed) == {}


def test_symlinks_inside_the_root_still_read(work: Path) -> None:
    root = corpus(work, {"real.md": "real text", "docs/x.md": "x text"})
    (root / "alias.md").symlink_to("real.md")
    (root / "latest").symlink_to("docs", target_is_directory=True)
    found = read([f"{root}/**"], work)
    assert documents(found) == {"real.md": "real text", "alias.md": "real text",
                                "docs/x.md": "x text", "latest/x.md": "x text"}
    assert reasons(found) == {}


def test_symlink_loops_are_rejected(work: Path) -> None:
    root = corpus(work, {"ok.md": "fine", "a/x.md": "x text"})
    (root / "a" / "up").symlink_to("..", target_is_directory=True)
    (root / "self.md").symlink_to("self.md")
    found = read([f"{root}/**"], work)
    assert documents(found) == {"ok.md": "fine", "a/x.md": "x text"}
    assert reasons(found) == {"a/up": f"symlink loop: -> {os.path.realpath(root)}",
                              "self.md": "symlink loop: -> self.md"}


# --- Names a terminal would act on ----------------------------------------------------------


def test_names_with_control_characters_are_rejected_under_a_shown_name(work: Path) -> None:
    """Issue 48: a name holding a newline or an ESC sequence, printed, forges or rewrites a
    line; a local file's, a walk rejection's and an archive member's are all refused alike."""
    root = corpus(work, {"ok.md": "fine"})
    (root / "new\nline.md").write_text("# Spoof\n\nforged\n", encoding="utf-8")
    (root / "\x1b[31mred.md").write_text("# Red\n\nrecoloured\n", encoding="utf-8")
    (root / "gone\x1b.md").symlink_to("moved.md")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("evil\x1b[2K.md", "# Evil\n\nerased line\n")
        archive.writestr("good.md", "kept")
    (root / "share.zip").write_bytes(buffer.getvalue())
    found = read([f"{root}/**"], work)
    assert documents(found) == {"ok.md": "fine", "share.zip//good.md": "kept"}
    assert reasons(found) == {
        "new\\x0aline.md": "file name contains a control character (U+000A)",
        "\\x1b[31mred.md": "file name contains a control character (U+001B)",
        "gone\\x1b.md": "file name contains a control character (U+001B); dangling symlink: -> moved.md",
        "share.zip//evil\\x1b[2K.md": "file name contains a control character (U+001B)"}
    assert {uri for uri, _ in found["rejected"].values()} == {
        f"{root}/new\\x0aline.md", f"{root}/\\x1b[31mred.md", f"{root}/gone\\x1b.md",
        f"{root}/share.zip//evil\\x1b[2K.md"}


# --- The run's own output ----------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["as given", "relative", "through a symlink"])
def test_output_inside_the_input_is_not_read(work: Path, spelling: str) -> None:
    root = corpus(work, {"doc.md": "input", "out/run1/documents.md": "an output, not input",
                         "out/LATEST.txt": "run1"})
    output = root / "out"
    if spelling == "relative":
        output = Path(os.path.relpath(output))
    elif spelling == "through a symlink":
        (work / "out-alias").symlink_to(root / "out", target_is_directory=True)
        output = work / "out-alias"
    found = read([f"{root}/**"], work, exclude=(str(output),))
    assert documents(found) == {"doc.md": "input"}
    assert reasons(found) == {}
    assert counted(found) == (1, 0, 1)


if __name__ == "__main__":
    _child_main(sys.argv[1])
