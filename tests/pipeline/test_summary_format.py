"""The summary ``chunkline run`` prints: what it says about LATEST after a run that did not
publish, and the query it suggests only for a run that did. Built from RunSummary values over
real output folders; no pipeline runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunkline.index.manifest_types import Model
from chunkline.pipeline.summary import RunSummary, format_summary

COUNTS = {"documents": 3, "kept": 2, "duplicate": 0, "rejected": 1, "chunks": 4, "tokens": 90,
          "embedded": 4, "reused": 0}
MODEL = Model(name="all-MiniLM-L6-v2", dim=384, dtype="float32")


def summary_of(output: Path, published: bool, held_back: tuple[str, ...] = (),
               question: str | None = None) -> RunSummary:
    run_dir = output / "run-new"
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunSummary("run-new", str(run_dir), str(output), "FnApiRunner", 1.5, COUNTS,
                      {"chunks": ["c"], "documents": ["d"], "rejected": ["r"]}, True, model=MODEL,
                      published=published, held_back=list(held_back), question=question)


def publish_old_run(output: Path) -> None:
    (output / "run-old").mkdir(parents=True)
    (output / "run-old" / "manifest.json").write_text("{}")
    (output / "LATEST").write_text("run-old\n")


def output_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("  output"))


def next_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("  next"))


def test_a_published_run_names_latest_and_suggests_a_query(tmp_path: Path) -> None:
    text = format_summary(summary_of(tmp_path, published=True, question="Pallet scanner setup"))
    assert output_line(text).endswith(f"(named in {tmp_path}/LATEST)")
    assert next_line(text) == f'  next       chunkline query {tmp_path} "Pallet scanner setup"'


@pytest.mark.parametrize(("question", "shown"), [
    (None, '"YOUR QUESTION"'),  # no heading of its own to ask about: never another corpus's
    ('The "quick" start', "'The \"quick\" start'"),
    ("Costs in $USD", "'Costs in $USD'"),
    ("It's here", '"It\'s here"'),  # an apostrophe is no special character inside double quotes
])
def test_the_question_is_the_runs_own_and_one_shell_word(tmp_path: Path, question, shown) -> None:
    line = next_line(format_summary(summary_of(tmp_path, published=True, question=question)))
    assert line == f"  next       chunkline query {tmp_path} {shown}"
    assert "arm" not in line.split(str(tmp_path))[1]


@pytest.mark.parametrize("held_back", [(), ("no document kept",)], ids=["not-reconciled", "held-back"])
def test_a_first_run_not_published_says_nothing_is_published(tmp_path: Path, held_back) -> None:
    text = format_summary(summary_of(tmp_path, published=False, held_back=held_back))
    assert output_line(text).endswith(f"(NOT published: nothing in {tmp_path} is published yet, it has no LATEST)")
    assert "previous run" not in text and "chunkline query" not in text


def test_a_later_run_not_published_names_the_run_latest_keeps(tmp_path: Path) -> None:
    publish_old_run(tmp_path)
    text = format_summary(summary_of(tmp_path, published=False, held_back=("kept fell by 60%",)))
    assert output_line(text).endswith(f"(NOT published: {tmp_path}/LATEST still names the previous run, run-old)")
    assert "chunkline query" not in text and "--allow-shrink" in text


def test_an_unreadable_latest_is_said_so(tmp_path: Path) -> None:
    (tmp_path / "LATEST").write_text("gone\n")
    text = format_summary(summary_of(tmp_path, published=False))
    assert f"(NOT published: {tmp_path}/LATEST left as it was, unreadable: " in output_line(text)
    assert "'gone', which has no manifest.json" in text
