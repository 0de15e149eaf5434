"""A nightly run never publishes a broken index: empty input, a shrunken corpus and bad config
are refused before the job or held back after it, and LATEST stays on the last good run."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from chunkline.pipeline.cli import main
from chunkline.pipeline.config import ConfigError, load_config
from chunkline.pipeline.plan import PreflightError
from chunkline.pipeline.run import run

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "local.yaml")
NO_VECTORS = "embed=null"  # the guard must hold without vectors too; and it is faster


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


def write_docs(corpus: Path, count: int) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (corpus / f"doc{i:02d}.md").write_text(
            f"# Manual {i}\n\n" + " ".join(f"step{i}x{j} calibrates arm {j}." for j in range(60)) + "\n")


def latest(output: Path) -> str:
    return (output / "LATEST").read_text().strip()


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    base = tmp_path_factory.mktemp("publish")
    corpus, output = base / "corpus", base / "index"
    write_docs(corpus, 10)
    code, out, err = cli("run", "--config", CONFIG, "--input", f"{corpus}/**", "--output",
                         str(output), "--set", NO_VECTORS)
    assert code == 0, err
    return corpus, output, latest(output)


def test_pattern_matching_nothing_fails_before_the_job(published) -> None:
    _, output, _ = published
    runs_before, good = {p.name for p in output.iterdir() if p.is_dir()}, latest(output)
    code, _, err = cli("run", "--config", CONFIG, "--input", "/no/such/corpus/**", "--output",
                       str(output), "--set", NO_VECTORS)
    assert code == 2 and "matches no file" in err
    assert latest(output) == good
    assert {p.name for p in output.iterdir() if p.is_dir()} == runs_before, "no run directory made"


def test_nothing_kept_is_not_published(published, tmp_path) -> None:
    _, output, _ = published
    good = latest(output)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.md").write_text("   \n")
    (junk / "b.bin").write_bytes(b"\x00\x01")
    code, out, err = cli("run", "--config", CONFIG, "--input", f"{junk}/**", "--output",
                         str(output), "--set", NO_VECTORS)
    assert code == 1, err
    assert "no document kept" in out and "--allow-shrink" in out
    assert latest(output) == good


def test_shrink_past_the_limit_is_held_back_until_allowed(published, tmp_path) -> None:
    corpus, output, first = published
    good = latest(output)
    assert good == first, "runs before this one held back or failed, never published"
    few = tmp_path / "few"
    few.mkdir()
    for name in ("doc00.md", "doc01.md", "doc02.md"):  # 3 of 10 kept: -70%
        shutil.copy(corpus / name, few / name)
    code, out, _ = cli("run", "--config", CONFIG, "--input", f"{few}/**", "--output",
                       str(output), "--set", NO_VECTORS)
    assert code == 1
    assert "kept fell from 10 to 3" in out and "--allow-shrink" in out
    assert latest(output) == good
    manifest = json.loads(max(output.glob("*/manifest.json"), key=os.path.getmtime).read_text())
    assert manifest["reconciled"] and manifest["held_back"], "kept for inspection, marked held back"

    # A smaller shrink than max_shrink publishes; --allow-shrink publishes past it.
    code, _, err = cli("run", "--config", CONFIG, "--input", f"{few}/**", "--output",
                       str(output), "--set", NO_VECTORS, "--set", "output.max_shrink=0.8")
    assert code == 0, err
    allowed = latest(output)
    assert allowed != good
    write_docs(few, 1)  # doc00 only would be another -67% against the 3-document run
    code, _, err = cli("run", "--config", CONFIG, "--input", f"{few}/doc00.md", "--output",
                       str(output), "--set", NO_VECTORS, "--allow-shrink")
    assert code == 0, err
    assert latest(output) != allowed


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("split.tokenizer=bogus:thing", "split.tokenizer 'bogus:thing'"),
        ("split.tokenizer=tiktoken:/nonexistent.tiktoken", "/nonexistent.tiktoken"),
        ("embed.device=cuda", "no cuda device"),
        ("embed.device=tpu9", "embed.device 'tpu9'"),
        ("embed.model=/no/such/model", "/no/such/model"),
    ],
)
def test_bad_settings_fail_before_the_job(published, override, message) -> None:
    corpus, output, _ = published
    runs_before, good = sorted(p.name for p in output.iterdir()), latest(output)
    code, _, err = cli("run", "--config", CONFIG, "--input", f"{corpus}/**", "--output",
                       str(output), "--set", override)
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert sorted(p.name for p in output.iterdir()) == runs_before and latest(output) == good


def test_empty_output_path_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="output.path"):
        load_config(CONFIG, ['output.path=""'])
    code, _, err = cli("run", "--config", CONFIG, "--output", "")
    assert code == 2 and "output.path" in err


def test_previous_naming_nothing_is_an_error(published, tmp_path) -> None:
    corpus, _, _ = published
    code, _, err = cli("run", "--config", CONFIG, "--input", f"{corpus}/**", "--output",
                       str(tmp_path / "o"), "--previous", "/nonexistent")
    assert code == 2 and "/nonexistent" in err and "Traceback" not in err


def test_query_refuses_bad_k_and_empty_question(published) -> None:
    _, output, _ = published
    code, _, err = cli("query", str(output), "question", "-k", "-1")
    assert code == 2 and "-k" in err
    code, _, err = cli("query", str(output), "   ")
    assert code == 2 and "empty" in err


def test_read_only_output_fails_before_the_job(published) -> None:
    """As an unprivileged user (root ignores permissions, so as root this could not fail)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the job as an unprivileged user")
    corpus, _, _ = published
    base = Path(tempfile.mkdtemp(prefix="chunkline-ro-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        shutil.copytree(corpus, base / "corpus")
        (base / "out").mkdir(mode=0o555)
        os.chmod(base / "out", 0o555)  # read-only to everyone but root
        probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                sys.executable, "-c", "import chunkline.pipeline.run"],
                               cwd=ROOT, capture_output=True, text=True)
        if probe.returncode != 0:
            pytest.skip(f"the project is not importable as nobody: {probe.stderr[-300:]}")
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
             "chunkline.pipeline.cli", "run", "--config", CONFIG, "--input", f"{base / 'corpus'}/**",
             "--output", str(base / "out"), "--set", NO_VECTORS],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, "HOME": str(base)})
        assert result.returncode == 2, result.stderr
        assert "not writable" in result.stderr and "Traceback" not in result.stderr
        assert "running" not in result.stderr, "failed before the job, not after it"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_run_api_raises_preflight_errors(tmp_path) -> None:
    config = load_config(CONFIG, [f"input.pattern={tmp_path}/nothing/**",
                                  f"output.path={tmp_path / 'o'}", NO_VECTORS])
    with pytest.raises(PreflightError, match="matches no file"):
        run(config)


def test_a_lost_latest_beside_complete_runs_stops_before_the_job(tmp_path) -> None:
    """LATEST deleted (a cleanup script, a partial copy): a run over 2 of the 10 documents must
    not publish as if it were the first. Exit 2 before any work, naming the newest complete
    run and the ways out; --previous compares with that run (and holds the shrunken run back);
    --start-over indexes from nothing."""
    copy = tmp_path / "index"
    write_docs(tmp_path / "corpus", 10)
    code, _, err = cli("run", "--config", CONFIG, "--input", f"{tmp_path}/corpus/**", "--output",
                       str(copy), "--set", NO_VECTORS)
    assert code == 0, err
    good = latest(copy)
    (copy / "LATEST").unlink()
    few = tmp_path / "few"
    write_docs(few, 2)
    before = sorted(p.name for p in copy.iterdir())
    argv = ["run", "--config", CONFIG, "--input", f"{few}/**", "--output", str(copy), "--set", NO_VECTORS]
    code, _, err = cli(*argv)
    assert code == 2 and f"newest {good}" in err and "--previous" in err and "--start-over" in err, err
    assert sorted(p.name for p in copy.iterdir()) == before  # nothing written, no LATEST made
    code, out, err = cli(*argv, "--previous", str(copy / good))
    assert code == 1 and "kept fell from 10 to 2" in out, out + err
    assert not (copy / "LATEST").exists()
    code, _, err = cli(*argv, "--start-over")
    assert code == 0, err
    assert latest(copy) != good
    code, _, err = cli(*argv, "--start-over")
    assert code == 2 and "nothing to start over from" in err

