"""A labelled retrieval set from real FAQs that ship with the system's packages.

    python bench/faq_set.py OUT_DIR        # writes OUT_DIR/docs/*.txt and OUT_DIR/questions.jsonl
    python bench/retrieval_eval.py --labels OUT_DIR

The text is not written by this project: the FAQs Debian installs with lsof, sed, valgrind,
zlib and xz, and the FAQ pods of Perl's standard library (``/usr/share/doc``,
``/usr/share/perl``). Their questions were written by the packages' authors and users, so they
are real questions about real documentation.

Each question is cut out of its document and becomes the query; the answer's first paragraph
(grown to a second one when the first is a line like "Yes.", cut at a sentence end past 600
characters) is the answer span. A question left in its document would be found by matching the
question against itself; removing it makes the task question-to-answer retrieval, as the
inverse cloze task removes the query sentence from its passage (Lee, Chang and Toutanova 2019,
"Latent Retrieval for Weakly Supervised Open Domain Question Answering"). Table-of-contents
lines that repeat a question are removed as well. Everything else stays: section titles,
code, version notes, the many near-identical questions per operating system in lsof's FAQ.

A question asked twice in one document with different answers cannot be answered from its
text alone and is dropped; so are questions without an answer paragraph. Offsets are character
offsets into the written documents, checked (``doc[start:end] == answer``) here and again by
``retrieval_eval.py``'s loader.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

SOURCES = {
    "lsof-faq.txt": "/usr/share/doc/lsof/00FAQ.gz",
    "sed-faq.txt": "/usr/share/doc/sed/sedfaq.txt.gz",
    "valgrind-faq.txt": "/usr/share/doc/valgrind/FAQ.txt.gz",
    "zlib-faq.txt": "/usr/share/doc/zlib1g-dev/FAQ.gz",
    "xz-faq.txt": "/usr/share/doc/xz-utils/faq.txt.gz",
    "perl-libnet-faq.txt": "/usr/share/perl/5.36.0/Net/libnetFAQ.pod",
    "perl-makemaker-faq.txt": "/usr/share/perl/5.36.0/ExtUtils/MakeMaker/FAQ.pod",
    "perl-io-compress-faq.txt": "/usr/share/perl/5.36.0/IO/Compress/FAQ.pod",
}

# A question starts a line after an outline number ("1.2.4", "7."), "Q:", or a POD command.
# Continuation lines of a title are indented with a tab or more spaces, and may start with a
# version number ("\t5.3 above maintenance level 1?"), so an entry starts within two spaces.
QUESTION_START = re.compile(r"^ {0,2}(?:\d+(?:\.\d+)*\.?|Q:|=head\d|=item)[ \t]+\S")
ANSWER_PREFIX = re.compile(r"^[ \t]*A:[ \t]+")
SHORT_ANSWER = 60
LONG_ANSWER = 600
CONTINUATION_LINES = 3


@dataclass(frozen=True)
class Question:
    id: str
    doc: str
    question: str
    answer: str
    start: int
    end: int
    needs_heading: bool = False


def read_source(path: str) -> str:
    raw = gzip.open(path).read() if path.endswith(".gz") else Path(path).read_bytes()
    return raw.decode("utf-8", errors="replace").replace("\r\n", "\n")


def _title_end(lines: list[str], first: int) -> int | None:
    """Index past the last line of a question title starting at ``first``: the title runs over
    at most three non-blank lines that do not start a new entry and ends with '?'."""
    for last in range(first, min(first + CONTINUATION_LINES, len(lines))):
        line = lines[last]
        if not line.strip() or (last > first and QUESTION_START.match(line)):
            return None
        if line.rstrip().endswith("?"):
            return last + 1
    return None


def _question_text(title_lines: list[str]) -> str:
    joined = " ".join(line.strip() for line in title_lines)
    joined = re.sub(r"^(?:\d+(?:\.\d+)*\.?|Q:|=head\d|=item)\s+", "", joined)
    return re.sub(r"\s+", " ", joined).strip()


def _paragraphs(text: str) -> list[tuple[int, int]]:
    """(start, end) of each blank-line-separated paragraph, leading indentation excluded."""
    spans = []
    for match in re.finditer(r"(?:[^\n]*\S[^\n]*(?:\n|$))+", text):
        start = match.start() + len(match.group()) - len(match.group().lstrip())
        spans.append((start, match.start() + len(match.group().rstrip())))
    return spans


def _answer_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The answer span inside ``text[start:end]`` (the answer's region)."""
    paragraphs = _paragraphs(text[start:end])
    if not paragraphs:
        return None
    first, last = paragraphs[0]
    prefix = ANSWER_PREFIX.match(text[start + first : start + last])
    if prefix:
        first += prefix.end()
    if last - first < SHORT_ANSWER and len(paragraphs) > 1:
        last = paragraphs[1][1]
    if last - first > LONG_ANSWER:
        body = text[start + first : start + last]
        ends = [m.end() for m in re.finditer(r"[.!?:](?=\s)", body[:LONG_ANSWER])]
        if ends:
            last = first + ends[-1]
    span = text[start + first : start + last]
    if QUESTION_START.match(span):  # no answer: the next outline entry follows at once
        return None
    if not re.search(r"\w", span) or span.startswith("="):
        return None
    return start + first, start + last


def faq_questions(name: str, original: str) -> tuple[str, list[Question]]:
    """The document with its question titles removed, and its questions with answer spans."""
    lines = original.splitlines(keepends=True)
    kept: list[str] = []
    asked: list[tuple[str, int]] = []  # question text, offset in the new text where it stood
    row = 0
    while row < len(lines):
        end = _title_end(lines, row) if QUESTION_START.match(lines[row]) else None
        if end is None:
            kept.append(lines[row])
            row += 1
            continue
        asked.append((_question_text(lines[row:end]), sum(map(len, kept))))
        row = end
    text = "".join(kept)
    questions = []
    for index, (question, offset) in enumerate(asked):
        region_end = asked[index + 1][1] if index + 1 < len(asked) else len(text)
        # The answer ends where the next entry of the outline starts (a numbered section title
        # that was not a question stays in the text).
        next_entry = re.search(r"\n\n[ \t]*(?:\d+(?:\.\d+)*\.?[ \t]+\S|=head)", text[offset:region_end])
        if next_entry:
            region_end = offset + next_entry.start()
        span = _answer_span(text, offset, region_end)
        if span is None:
            continue
        start, end = span
        questions.append(Question(f"{name.removesuffix('.txt')}-{index:03d}", f"docs/{name}",
                                  question, text[start:end], start, end))
    counts: dict[str, int] = {}
    for q in questions:
        counts[q.question.lower()] = counts.get(q.question.lower(), 0) + 1
    return text, [q for q in questions if counts[q.question.lower()] == 1]


def build(out: Path, sources: dict[str, str] = SOURCES) -> tuple[int, int, list[str]]:
    """Writes the set; returns (documents, questions, sources missing on this machine)."""
    (out / "docs").mkdir(parents=True, exist_ok=True)
    missing, written, lines = [], 0, []
    for name, path in sources.items():
        if not Path(path).exists():
            missing.append(path)
            continue
        text, questions = faq_questions(name, read_source(path))
        for q in questions:
            assert text[q.start : q.end] == q.answer, q.id
        (out / "docs" / name).write_text(text, encoding="utf-8")
        written += 1
        lines += [json.dumps(asdict(q), ensure_ascii=False) for q in questions]
    (out / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return written, len(lines), missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="directory to write docs/ and questions.jsonl into")
    args = parser.parse_args(argv)
    documents, questions, missing = build(args.out)
    for path in missing:
        print(f"not on this machine, skipped: {path}", file=sys.stderr)
    print(f"{questions} questions over {documents} documents in {args.out}")
    return 0 if documents else 1


if __name__ == "__main__":
    raise SystemExit(main())
