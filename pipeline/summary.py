"""What a run reports: the summary the CLI prints and the exit code reads (``published``)."""

from __future__ import annotations

import os
import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from chunkline.index.manifest_types import Access, Bm25, Listing, Manifest, Model
from chunkline.index.tables import TableFileError, live_files, read_file
from chunkline.pipeline.manifest import ManifestError, latest_run
from chunkline.readers.formats import named_by_reader


@dataclass
class RunSummary:
    run_id: str
    run_dir: str
    output: str
    runner: str
    seconds: float
    counts: dict[str, int]
    files: dict[str, list[str]]
    reconciled: bool
    problems: list[str] = field(default_factory=list)
    model: Model | None = None
    previous: str | None = None
    published: bool = False
    context_lines: list[str] = field(default_factory=list)
    held_back: list[str] = field(default_factory=list)  # why a reconciled run was not published
    reuse_skipped: list[str] = field(default_factory=list)  # previous shards not trusted, why
    report: str | None = None  # report.html's path, when it was written
    bm25_lines: list[str] = field(default_factory=list)  # a BM25 re-base, said once
    carry_note: str | None = None  # why the previous run lent no rows, when it lent none
    credential_lines: list[str] = field(default_factory=list)  # documents holding credentials
    ocr_lines: list[str] = field(default_factory=list)  # pages read by OCR or from its cache
    access_lines: list[str] = field(default_factory=list)  # access control: what it decided
    unverified: list[str] = field(default_factory=list)  # what the counts could not be checked against
    question: str | None = None  # the `next` line's question, drawn from the run's own headings


def shown_path(path: str) -> str:
    """A local path under the working directory as the user would type it (``out/...``): runs
    use absolute paths (their workers work elsewhere), a person reads the short form."""
    here = os.getcwd().rstrip(os.sep) + os.sep
    return os.path.relpath(path) if "://" not in path and path.startswith(here) else path


def format_summary(summary: RunSummary) -> str:
    c = summary.counts
    check = ("NOT RECONCILED: " + "; ".join(summary.problems) if not summary.reconciled
             else "counts unverified: " + "; ".join(summary.unverified) if summary.unverified
             else "reconciled")
    if summary.model is not None:
        embedded = (f"{c['tokens']:,} tokens ({summary.model.name}, "
                    f"{summary.model.dim}-d, {summary.model.dtype})")
        if "embedded" in c:
            source = f" from {shown_path(summary.previous)}" if summary.previous else ""
            embedded += f"; vectors: {c['embedded']:,} embedded, {c['reused']:,} reused{source}"
            if c.get("reuse_rejected"):
                embedded += f" ({c['reuse_rejected']:,} stored vectors failed their check: re-embedded)"
            if c.get("tokens_embedded"):
                embedded += (f"; model read {c['tokens_embedded']:,} tokens in "
                             f"{c.get('tokens_padded', 0):,} padded positions "
                             f"({c.get('tokens_padded', 0) / c['tokens_embedded']:.2f}x)")
    else:
        embedded = f"{c['tokens']:,} tokens (embedding off)"
    lines = [
        f"chunkline run {summary.run_id} on {summary.runner}: {summary.seconds:.1f} s",
        f"  documents  read {c.get('read', c['documents'])} = kept {c['kept']} + duplicate {c['duplicate']} "
        f"+ rejected {c['rejected']}  ({check})",
        f"  chunks     {c['chunks']:,}, {embedded}",
        *_carry_lines(summary),
        *(f"  ocr        {line}" for line in summary.ocr_lines),
        *(f"  secrets    {line}" for line in summary.credential_lines),
        *(f"  access     {line}" for line in summary.access_lines),
        *summary.context_lines,
        *(f"  bm25       {line}" for line in summary.bm25_lines),
        f"  shards     {len(summary.files['chunks'])} chunk, {len(summary.files['documents'])} "
        f"document, {len(summary.files['rejected'])} rejected Parquet files + manifest.json",
        *(f"  reuse      skipped {reason}" for reason in summary.reuse_skipped),
        f"  output     {shown_path(summary.run_dir)}  " + (
            f"(named in {shown_path(summary.output)}/LATEST)" if summary.published
            else _not_published(shown_path(summary.output))),
        *(f"  held back  {reason}" for reason in summary.held_back),
        *([f"  report     {shown_path(summary.report)}"] if summary.report else []),
    ]
    if summary.held_back:
        lines.append("             check the input; if the corpus really shrank, rerun with "
                     "--allow-shrink to publish anyway")
    if summary.published and summary.model:  # a run held back is not what a query reads
        caller = " --as PRINCIPAL" if summary.access_lines else ""
        question = _quoted(summary.question) if summary.question else '"YOUR QUESTION"'
        lines.append(f"  next       chunkline query {shown_path(summary.output)}{caller} {question}")
    return "\n".join(lines)


def _quoted(text: str) -> str:
    """``text`` as one shell word: in double quotes where nothing inside them is special to a
    POSIX shell, else single-quoted (``shlex.quote``)."""
    return f'"{text}"' if not any(c in text for c in '"$`\\!') else shlex.quote(text)


# What the `next` line reads to find its question: the headings of the chunks table's first
# files, stopping at the first that holds a usable one (one column of one file, in all but a
# corpus with few headings).
QUESTION_FILES = 4
QUESTION_WORDS = (2, 12)
QUESTION_CHARS = 80


def suggested_question(run_dir: str, manifest: Manifest | Listing) -> str | None:
    """A question for the summary's ``next`` line, drawn from the run's own index: of the
    innermost headings of the chunks in the chunks table's first file, one that few documents
    share (a ``Part 2`` every manual has finds any of them), and of those the one the most
    chunks sit under (the first met, on a tie); 2 to 12 words, at most 80 characters, not one a
    reader writes itself (``Slide 3``, ``Speaker notes``: ``named_by_reader``). None when no
    heading qualifies or the table cannot be read: never a question about another corpus."""
    try:
        for file in live_files(run_dir, manifest, "chunks")[:QUESTION_FILES]:
            documents: dict[str, set[str]] = {}
            chunks: Counter[str] = Counter()
            table = read_file(file, ["doc_id", "headings"])
            for doc_id, path in zip(table.column("doc_id").to_pylist(), table.column("headings").to_pylist()):
                title = " ".join(path[-1].split()) if path else ""
                words = len(title.split())
                if (QUESTION_WORDS[0] <= words <= QUESTION_WORDS[1] and len(title) <= QUESTION_CHARS
                        and not named_by_reader(title)):
                    documents.setdefault(title, set()).add(doc_id)
                    chunks[title] += 1
            if documents:  # min keeps the first of equals: the order the file holds them in
                return min(documents, key=lambda title: (len(documents[title]), -chunks[title]))
    except (TableFileError, OSError, ValueError):
        return None  # a hint is never worth failing a run over
    return None


def _carry_lines(summary: RunSummary) -> list[str]:
    """What this run computed and what it took from the previous one, per kept document."""
    c = summary.counts
    if "documents_carried" not in c:
        return []
    if not (c["documents_carried"] or c["documents_recomputed"] or c["documents_gone"]
            or summary.carry_note):
        return []  # a first run: every document is new, nothing was there to carry
    line = (f"  computed   {c['documents_carried']:,} documents carried ({c['chunks_carried']:,} "
            f"chunks); {c['documents_changed']:,} changed, "
            f"{c['documents_redone']:,} redone (same input, a corpus-wide change), "
            f"{c['documents_new']:,} new, {c['documents_gone']:,} gone")
    if c.get("carry_rejected"):
        line += f"; {c['carry_rejected']:,} previous documents failed their check: computed again"
    return [line] + ([f"  carry      {summary.carry_note}"] if summary.carry_note else [])


# Over this share of the documents read rejected for credentials, the summary says so loudly: a
# wiki of pasted configs, where `secrets.mode: redact` is likely what the operator wants.
LARGE_REJECTED_SHARE = 0.1


def credential_lines(credentials: dict[str, Any] | None, counts: dict[str, int]) -> list[str]:
    """What the credentials stage did, in kinds and numbers (never a value)."""
    if not credentials or not credentials.get("documents_flagged"):
        return []
    kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(
        credentials["kinds"].items(), key=lambda item: (-item[1], item[0])))
    flagged, found = credentials["documents_flagged"], credentials["found"]
    rejected = credentials.get("documents_rejected", 0)
    masked = credentials.get("documents_redacted", 0)
    if credentials["mode"] == "redact":
        verb = "redacted (secrets.mode: redact)"
    elif not masked:
        verb = "rejected (secrets.mode: reject; the rejected table names kind and line)"
    else:  # loose kinds are masked in reject mode too: never the reason a document is lost
        verb = (f"{rejected:,} rejected (secrets.mode: reject, a confirmed kind; the rejected table "
                f"names kind and line), {masked:,} indexed with each loose match masked")
    lines = [f"{flagged:,} document{'s' if flagged != 1 else ''} held {found:,} "
             f"credential{'s' if found != 1 else ''} ({kinds}): {verb}"]
    if rejected and counts.get("documents") and rejected / counts["documents"] > LARGE_REJECTED_SHARE:
        lines.append(f"WARNING: {rejected / counts['documents']:.0%} of the documents read were "
                     f"rejected for credentials; `--set secrets.mode=redact` indexes them with "
                     f"each credential masked")
    return lines


def access_lines(access: Access | None) -> list[str]:
    """What access control decided (the manifest's ``access``): nothing for an unprotected run."""
    if not access:
        return []
    lines = ["protected: each row names who may read it; queries name their caller (--as)"]
    if access.documents_without_principals:
        lines.append(f"{access.documents_without_principals:,} documents name no principal: "
                     "readable by nobody (deny by default; access.default names a fallback)")
    if access.documents_rejected:
        lines.append(f"{access.documents_rejected:,} documents rejected for a malformed principal")
    return lines


def ocr_lines(ocr: dict[str, int]) -> list[str]:
    """Pages read by OCR in this run and pages taken from the OCR cache (said only when any)."""
    if not ocr.get("read") and not ocr.get("cached"):
        return []
    return [f"{ocr['read']:,} page{'s' if ocr['read'] != 1 else ''} read by OCR, "
            f"{ocr['cached']:,} from the cache beside the index (_cache/ocr)"]


def bm25_lines(bm25: Bm25 | None, note: str | None) -> list[str]:
    """What an operator must hear about the BM25 statistics: a re-base rewrites every stored row."""
    if not bm25:
        return []
    if note:
        return [note]
    if bm25.rebased and bm25.avgdl is not None and bm25.reference_drift is not None:
        previous, mean = bm25.previous_reference_avgdl, bm25.avgdl
        moved = f"{abs(mean / previous - 1):.1%}" if previous else "all the way"
        return [f"BM25 re-based: the mean chunk length ({mean:.2f} terms) moved {moved} from the "
                f"reference ({previous or 0:.2f}), past the bound of {bm25.reference_drift:.0%}: "
                f"every stored row changes once, the next sync rewrites them all"]
    return []


def _not_published(output: str) -> str:
    """What ``output/LATEST`` says after a run that did not publish, read now: the run it still
    names, or that nothing is published yet."""
    try:
        published = latest_run(output)
    except (ManifestError, OSError) as exc:
        return f"(NOT published: {output}/LATEST left as it was, unreadable: {exc})"
    if published is None:
        return f"(NOT published: nothing in {output} is published yet, it has no LATEST)"
    name = published.rstrip("/").rsplit("/", 1)[-1]
    return f"(NOT published: {output}/LATEST still names the previous run, {name})"
