"""What `chunkline run` shows while it runs: a live display under a terminal, progress lines off
one, nothing with --quiet; the numbers shown last are the run's reconciled counts."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chunkline.pipeline.progress import view

ROOT = Path(__file__).resolve().parents[2]
CHUNKLINE = Path(sys.executable).with_name("chunkline")
pytestmark = pytest.mark.slow
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
DOCUMENTS = re.compile(r"documents +read ([\d,]+), kept ([\d,]+), carried ([\d,]+)")
CHUNKS = re.compile(r"chunks +made ([\d,]+), carried ([\d,]+), embedded ([\d,]+)"
                    r"(?: at [\d,]+ tokens/s)?, reused ([\d,]+)")


def write_corpus(root: Path) -> None:
    root.mkdir(parents=True)
    for i in range(4):
        sections = "\n\n".join(f"## Step {s}\n\nCalibrate arm {i} joint {s} before the shift; "
                               f"log the torque reading and the encoder offset." for s in range(3))
        (root / f"manual{i}.md").write_text(f"# Manual {i}\n\n{sections}\n", encoding="utf-8")
    (root / "copy.md").write_text((root / "manual0.md").read_text(encoding="utf-8"), encoding="utf-8")
    (root / "empty.md").write_text("   \n", encoding="utf-8")


def command(corpus: Path, output: Path, *extra: str) -> list[str]:
    return [str(CHUNKLINE), "run", "--config", str(ROOT / "configs" / "local.yaml"),
            "--input", f"{corpus}/**", "--output", str(output), *extra]


def run_in_terminal(args: list[str]) -> tuple[int, str]:
    """The command with a pseudo-terminal as its stdin, stdout and stderr: what a person sees."""
    master, slave = pty.openpty()
    process = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT)
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the other end closed: the process is done
            break
        if not data:
            break
        seen += data
    os.close(master)
    return process.wait(timeout=300), ESCAPE.sub("", seen.decode("utf-8", "replace"))


def numbers(match: re.Match) -> list[int]:
    return [int(group.replace(",", "")) for group in match.groups()]


def last(pattern: re.Pattern, text: str) -> list[int]:
    found = list(pattern.finditer(text))
    assert found, f"no {pattern.pattern!r} in:\n{text[-2000:]}"
    return numbers(found[-1])


def counts(output: Path) -> dict:
    run_id = (output / "LATEST").read_text(encoding="utf-8").strip()
    return json.loads((output / run_id / "manifest.json").read_text(encoding="utf-8"))["counts"]


def test_the_terminal_display_ends_on_the_runs_counts(tmp_path) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    write_corpus(corpus)
    code, screen = run_in_terminal(command(corpus, output))
    assert code == 0, screen[-2000:]
    c = counts(output)
    assert c["embedded"] > 0
    assert last(DOCUMENTS, screen) == [c["documents"], c["kept"], 0]
    assert last(CHUNKS, screen) == [c["chunks"], 0, c["embedded"], c["reused"]]
    assert "elapsed" in screen and "files      6 of 6 read" in screen


def test_progress_lines_off_a_terminal_end_on_the_runs_counts(tmp_path) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    write_corpus(corpus)
    first = subprocess.run(command(corpus, output, "--set", "embed=null", "--progress-interval", "0.2"),
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "\x1b[" not in first.stderr  # no terminal, no display codes
    done = [line for line in first.stderr.splitlines() if line.endswith(", done]")]
    assert done, first.stderr
    c = counts(output)
    assert last(DOCUMENTS, "\n".join(done)) == [c["documents"], c["kept"], 0]
    # The rerun carries every document: the lines say so, as its summary does.
    again = subprocess.run(command(corpus, output, "--set", "embed=null", "--progress-interval", "0.2"),
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 0, again.stderr
    c = counts(output)
    done = "\n".join(line for line in again.stderr.splitlines() if line.endswith(", done]"))
    assert last(DOCUMENTS, done) == [c["documents"], c["kept"], c["documents_carried"]]
    assert last(CHUNKS, done) == [c["chunks"], c["chunks_carried"], 0, 0]
    assert c["documents_carried"] == c["kept"] > 0


def test_quiet_shows_the_summary_alone(tmp_path) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    write_corpus(corpus)
    code, screen = run_in_terminal(command(corpus, output, "--set", "embed=null", "--quiet"))
    assert code == 0, screen
    assert not DOCUMENTS.search(screen) and "elapsed" not in screen
    assert "documents  read 6 = kept" in screen  # the summary's own line


def test_the_time_left_follows_the_embedding_rate() -> None:
    totals = {"read/pieces_matched": 10, "read/pieces_read": 10, "split/chunks": 1000,
              "chunkline.embed/chunks_embedded": 400, "reindex/chunks_reused": 100}
    rows = dict(view(totals, 65, chunk_rate=50.0, token_rate=2000.0))
    assert rows["left"] == "~0:00:10 to embed 500 chunks"
    assert rows["elapsed"] == "0:01:05" and "at 2,000 tokens/s" in rows["chunks"]
    reading = dict(view({"read/pieces_matched": 10, "read/pieces_read": 4}, 3))
    assert reading["left"] == "reading: 6 of 10 files to go"


def test_progress_lines_of_the_multi_process_runner_end_on_the_runs_counts(tmp_path) -> None:
    """Worker processes of their own: their tallies reach the driver through the folder they
    inherit, and the last lines are the run's counts."""
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    write_corpus(corpus)
    done = subprocess.run(
        command(corpus, output, "--set", "embed=null", "--progress-interval", "0.2", "--",
                "--direct_num_workers=2", "--direct_running_mode=multi_processing"),
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = "\n".join(line for line in done.stderr.splitlines() if line.endswith(", done]"))
    c = counts(output)
    assert last(DOCUMENTS, lines) == [c["documents"], c["kept"], 0]
    assert last(CHUNKS, lines) == [c["chunks"], 0, 0, 0]
    assert "files     6 of 6 read" in lines
