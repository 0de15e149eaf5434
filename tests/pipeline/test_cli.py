"""The chunkline command: JSON lines that round-trip to the file's text, and clear errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from chunkline.pipeline.cli import main


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out, err)
    return code, out.getvalue(), err.getvalue()


def test_split_jsonl_round_trips(tmp_path) -> None:
    text = "# Title\n\nFirst paragraph here.\n\n## Part\n\n```\n# code\n```\n" * 3
    path = tmp_path / "doc.md"
    path.write_text(text, encoding="utf-8")
    code, out, err = run(["split", str(path), "--max-tokens", "8", "--tokenizer", "words"])
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert set(records[0]) == {"doc", "start", "end", "headings", "tokens", "oversized",
                               "table_header", "text"}
    assert all(text[r["start"] : r["end"]] == r["text"] for r in records)
    assert records[0]["start"] == 0 and records[-1]["end"] == len(text)
    assert all(r["tokens"] <= 8 for r in records)
    assert ["Title", "Part"] in [r["headings"] for r in records]
    assert not any("code" in r["headings"] for r in records)


def test_split_code_file_by_syntax_tree(tmp_path) -> None:
    source = ("# a comment, not a heading\n\nclass Dock:\n    def open(self):\n        return 1\n\n"
              "    def close(self):\n        return 0\n")
    path = tmp_path / "dock.py"
    path.write_text(source, encoding="utf-8")
    code, out, err = run(["split", str(path), "--max-tokens", "8", "--tokenizer", "words"])
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert all(source[r["start"] : r["end"]] == r["text"] for r in records)
    # The second chunk holds open() and close(): labelled by the class enclosing both.
    assert [r["headings"] for r in records] == [["Dock"], ["Dock"]]
    assert not any("a comment" in " ".join(r["headings"]) for r in records)


def test_split_view_marks_chunks_and_overlap(tmp_path) -> None:
    path = tmp_path / "doc.md"
    path.write_text("# A\n" + "one two three four. " * 20, encoding="utf-8")
    code, out, _ = run(["split", str(path), "--max-tokens", "10", "--overlap", "5",
                        "--tokenizer", "words", "--view"])
    assert code == 0
    assert out.count("────") >= 5
    assert "┆ overlap ┆" in out
    assert "· A" in out


def test_split_reports_bad_files_and_continues(tmp_path) -> None:
    good = tmp_path / "good.txt"
    good.write_text("fine text", encoding="utf-8")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00 not utf-8 \xc3")
    code, out, err = run(["split", str(bad), str(good), "--tokenizer", "words"])
    assert code == 1
    assert "bad.txt" in err
    assert json.loads(out.splitlines()[0])["text"] == "fine text"


def test_split_rejects_bad_arguments(tmp_path) -> None:
    path = tmp_path / "doc.md"
    path.write_text("text", encoding="utf-8")
    code, _, err = run(["split", str(path), "--tokenizer", "nope"])
    assert code == 2 and "valid forms" in err
    code, _, err = run(["split", str(path), "--max-tokens", "4", "--overlap", "4",
                        "--tokenizer", "words"])
    assert code == 2 and "overlap" in err


@pytest.mark.slow
def test_console_script_is_installed(tmp_path) -> None:
    path = tmp_path / "doc.md"
    path.write_text("# Hello\nworld\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "chunkline.pipeline.cli", "split", str(path), "--tokenizer", "words"],
        capture_output=True, text=True, check=True,
    )
    assert json.loads(result.stdout)["headings"] == ["Hello"]


def test_split_and_the_parser_load_no_heavy_package(tmp_path) -> None:
    """`chunkline split` (and every command's parser, built for each command) imports none of
    Beam, torch, transformers, pyarrow, Iceberg's or the stores' clients: a command imports
    what it uses when it runs (bench/RESULTS.md, "A run's fixed cost")."""
    path = tmp_path / "doc.md"
    path.write_text("# Hello\nworld\n", encoding="utf-8")
    heavy = ["apache_beam", "torch", "transformers", "sentence_transformers", "sklearn", "pyarrow",
             "pyiceberg", "sqlalchemy", "detect_secrets", "rapidocr_onnxruntime", "lancedb", "psycopg",
             "qdrant_client"]
    done = subprocess.run(
        [sys.executable, "-c", "import io, sys\nfrom chunkline.pipeline.cli import main\n"
         f"assert main(['split', {str(path)!r}, '--tokenizer', 'words'], io.StringIO(), sys.stderr) == 0\n"
         f"print(sorted(m for m in {heavy!r} if m in sys.modules))"],
        capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr[-2000:]


def _exit_now(body: str) -> subprocess.CompletedProcess:
    """A process that ends through the console script's exit_now after ``body``."""
    return subprocess.run([sys.executable, "-c", "import atexit, sys, threading, time\n"
                           "from chunkline.pipeline.cli import exit_now\n" + body],
                          capture_output=True, text=True, timeout=60)


def test_exit_now_keeps_the_status_the_atexit_hooks_and_the_buffered_output() -> None:
    done = _exit_now("atexit.register(lambda: print('hook ran', file=sys.stderr))\n"
                     "sys.stdout.write('buffered, no newline')\n"
                     "exit_now(3)")
    assert (done.returncode, done.stdout, done.stderr) == (3, "buffered, no newline", "hook ran\n")


def test_exit_now_waits_for_a_running_thread_as_python_does() -> None:
    """A thread still working (not a daemon) finishes before the process ends, as it does on
    Python's own exit."""
    done = _exit_now("threading.Thread(target=lambda: (time.sleep(0.5), print('thread done'))).start()\n"
                     "exit_now(0)")
    assert (done.returncode, done.stdout) == (0, "thread done\n")


@pytest.mark.slow
def test_beams_runner_flag_names_the_runner_the_job_is_built_for(tmp_path) -> None:
    """`-- --runner=X` was passed to Beam's options and ignored: the job ran on the config's
    runner. Now it is runner.name, checked with the config."""
    from chunkline.pipeline.cli import runner_option

    assert runner_option(["--runner=PortableRunner", "--x=1"]) == ("PortableRunner", ["--x=1"])
    assert runner_option(["--a", "--runner", "FlinkRunner"]) == ("FlinkRunner", ["--a"])
    assert runner_option(["--direct_num_workers=2"]) == (None, ["--direct_num_workers=2"])
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nThe dock charger needs a firmware update.\n")
    code, _, err = run(["run", "--input", f"{corpus}/**", "--output", str(tmp_path / "out"),
                        "--set", "embed=null", "--", "--runner=NoSuchRunner"])
    assert code == 2 and err.count("\n") <= 2 and "runner.name" in err and "NoSuchRunner" in err
    code, out, err = run(["run", "--input", f"{corpus}/**", "--output", str(tmp_path / "out"),
                          "--set", "embed=null", "--quiet", "--", "--runner", "PortableRunner",
                          "--job_endpoint=embed", "--environment_type=LOOPBACK"])
    assert code == 0, err
    assert "on PortableRunner" in out
    latest = (tmp_path / "out" / "LATEST").read_text().strip()
    assert json.loads((tmp_path / "out" / latest / "manifest.json").read_text())["runner"] == "PortableRunner"
