"""chunkline.boilerplate and the RemoveBoilerplate stage: corpus-repeated lines and blocks go,
content and structure stay, and chunk offsets hold on the cleaned text."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.boilerplate import (
    BoilerplateOptions,
    frequency_floor,
    line_keys,
    normalize_line,
    remove_boilerplate,
    remove_boilerplate_marked,
)
from chunkline.records import Document, Rejected
from tests.beam_helpers import fnapi_pipeline
from chunkline.transforms import shares as shares_module
from chunkline.transforms.clean import EMPTY_AFTER_BOILERPLATE, TOP_REMOVED, RemoveBoilerplate
from chunkline.transforms.split import SplitDocuments

OPTIONS = BoilerplateOptions(min_docs=3, min_fraction=0.0)

HEADER = "Northwind Robotics Knowledge Base - internal use only"
COOKIE = "We use cookies to improve your experience on this site."
FOOTER = "(c) 2024 Northwind Robotics GmbH. All rights reserved."
LICENCE = (
    "Licensed under the Apache License, Version 2.0 (the \"License\");\n"
    "you may not use this file except in compliance with the License.\n"
    "You may obtain a copy of the License at\n"
    "http://www.apache.org/licenses/LICENSE-2.0"
)
SIGNATURE = "--\nJane Doe\nSupport Team"  # every line too short alone: only the block counts
SHARED_STRUCTURE = "## Troubleshooting\n\n| Name | Type |\n|---|---|\n\n```python\nimport northwind\n```"


def unique_body(i: int) -> str:
    return (
        f"# Topic {i}\n\n"
        f"This document explains procedure number {i} in detail, step by step.\n"
        f"Returns\n"  # short lines every document has: never boilerplate
        f"Example\n\n"
        f"{SHARED_STRUCTURE}\n\n"
        f"Unique closing remark {i} about the robot arm and its controller."
    )


def page(i: int) -> str:
    return f"{HEADER}\n{COOKIE}\n\n{unique_body(i)}\n\n{LICENCE}\n\n{SIGNATURE}\n\n{FOOTER}\n"


CORPUS = [Document(f"doc{i}.md", f"/c/doc{i}.md", page(i)) for i in range(6)] + [
    # In two documents only: below min_docs, so it stays in both.
    Document("pair-a.md", "/c/pair-a.md", "Rarely shared sentence that appears in two documents.\n\nA."),
    Document("pair-b.md", "/c/pair-b.md", "Rarely shared sentence that appears in two documents.\n\nB."),
    # Nothing but boilerplate: empty once it is removed, so rejected with that reason.
    Document("only-chrome.md", "/c/only-chrome.md", f"{HEADER}\n\n{FOOTER}\n"),
]
EXPECTED = {f"doc{i}.md": unique_body(i) + "\n" for i in range(6)} | {
    "pair-a.md": CORPUS[6].text,
    "pair-b.md": CORPUS[7].text,
}


# --- Pure functions ----------------------------------------------------------------------------


def test_keys_skip_short_lines_headings_tables_and_code() -> None:
    text = "Returns\n# A heading that is long enough\n| a table row that is long enough |\n```\ncode line long enough to count\n```\nA normal line long enough to count"
    keys = line_keys(text, OPTIONS)
    assert keys == line_keys("A normal line long enough to count", OPTIONS)
    assert len(keys) == 1


def test_keys_ignore_case_and_spacing() -> None:
    assert line_keys("  All Rights   Reserved by Northwind ", OPTIONS) == line_keys("all rights reserved by northwind", OPTIONS)
    assert normalize_line("  A \t B ") == "a b"


def test_short_block_counts_as_a_whole() -> None:
    keys = line_keys(SIGNATURE, OPTIONS)
    assert len(keys) == 1  # the block; none of its lines is long enough alone
    assert remove_boilerplate("Body text.\n\n" + SIGNATURE + "\n", keys, OPTIONS) == "Body text.\n"
    # The same lines inside a longer paragraph are another block: kept.
    assert remove_boilerplate("Body.\n--\nJane Doe\nSupport Team\n", keys, OPTIONS) == "Body.\n--\nJane Doe\nSupport Team\n"
    assert line_keys(SIGNATURE, BoilerplateOptions(max_block_lines=1)) == set()


def test_remove_closes_gaps_and_keeps_the_rest_exactly() -> None:
    frequent = line_keys(HEADER + "\n" + FOOTER, OPTIONS)
    text = f"{HEADER}\n\nKeep   this  spacing.\r\n\n\n{FOOTER}\nTail line.\n"
    assert remove_boilerplate(text, frequent, OPTIONS) == "Keep   this  spacing.\r\n\nTail line.\n"
    assert remove_boilerplate(text, frozenset(), OPTIONS) == text


@pytest.mark.parametrize(("n", "floor"), [(0, 3), (10, 3), (1000, 3)])
def test_frequency_floor_min_docs(n: int, floor: int) -> None:
    assert frequency_floor(n, OPTIONS) == floor


def test_frequency_floor_fraction() -> None:
    options = BoilerplateOptions(min_docs=5, min_fraction=0.01)
    assert [frequency_floor(n, options) for n in (10, 500, 501, 100_000)] == [5, 5, 6, 1000]


@given(st.lists(st.sampled_from([HEADER, FOOTER, COOKIE, "", "Returns", "# Heading", "```",
                                 "Some unique content line here", "x"]), max_size=20))
def test_removal_only_removes_lines(lines: list[str]) -> None:
    text = "\n".join(lines)
    frequent = line_keys(f"{HEADER}\n{FOOTER}\n{COOKIE}", OPTIONS)
    out = remove_boilerplate(text, frequent, OPTIONS)
    remaining = iter(text.split("\n"))
    assert all(any(line == candidate for candidate in remaining) for line in out.split("\n") if line)
    inside_code = "```" in text
    assert inside_code or not ({HEADER, FOOTER, COOKIE} & set(out.split("\n")))
    assert "Returns" in out.split("\n") or "Returns" not in lines


@pytest.mark.parametrize("bad", [{"min_docs": 0}, {"min_fraction": 1.5}, {"min_line_chars": 0},
                                 {"max_block_lines": True}])
def test_options_are_validated(bad: dict) -> None:
    with pytest.raises(ValueError):
        BoilerplateOptions(**bad)


# --- The stage ---------------------------------------------------------------------------------


def check_chunks_against(documents: dict[str, str]):
    """Matcher over (doc_id, [documents], [chunks]) groups: every chunk is its cleaned document's
    text at its offsets, the chunks tile the document, and no boilerplate reached a chunk."""

    def check(groups: list) -> None:
        seen = set()
        for doc_id, docs, chunks in groups:
            if not chunks:
                continue
            (doc,) = docs
            if doc.text != documents[doc_id]:
                raise BeamAssertException(f"{doc_id}: {doc.text!r}")
            ordered = sorted(chunks, key=lambda c: c.chunk_index)
            for chunk in ordered:
                if doc.text[chunk.start : chunk.end] != chunk.text:
                    raise BeamAssertException(f"{doc_id}: offsets {chunk.start}-{chunk.end} are not the chunk")
                if any(b in chunk.text for b in (HEADER, FOOTER, COOKIE, "Jane Doe", "Apache License")):
                    raise BeamAssertException(f"{doc_id}: boilerplate in a chunk: {chunk.text!r}")
            if ordered[0].start != 0 or ordered[-1].end != len(doc.text):
                raise BeamAssertException(f"{doc_id}: chunks do not cover the document")
            seen.add(doc_id)
        if seen != set(documents):
            raise BeamAssertException(f"chunked {sorted(seen)} != {sorted(documents)}")

    return check


@pytest.mark.slow
@pytest.mark.parametrize("inline", [65_536, 0], ids=["sets-in-the-grouping", "sets-parked"])
def test_boilerplate_corpus(inline, monkeypatch) -> None:
    # Parked: every key set waits in part files (a dump's millions do, past the first 65,536).
    monkeypatch.setattr(shares_module, "INLINE_ELEMENTS", inline)
    monkeypatch.setattr(shares_module, "PARKED_ELEMENTS", 2)
    with fnapi_pipeline() as p:
        out = p | beam.Create(CORPUS) | RemoveBoilerplate(OPTIONS)
        assert_that(out.documents | beam.Map(lambda d: (d.doc_id, d.text)),
                    equal_to(sorted(EXPECTED.items())), label="documents")
        assert_that(out.rejected,
                    equal_to([Rejected("/c/only-chrome.md", "only-chrome.md", EMPTY_AFTER_BOILERPLATE)]),
                    label="rejected")
        joined = (
            out.documents
            | SplitDocuments("words", 16, 0, True, heading_reserve=4)
            | beam.Map(lambda e: (e.document.doc_id, [e.document], list(e.chunks)))
        )
        assert_that(joined, check_chunks_against(EXPECTED), label="chunks")
    result = p.result
    query = result.metrics().query(MetricsFilter().with_namespace("boilerplate"))
    counters = {c.key.metric.name: c.committed for c in query["counters"]}
    # Lines: header, cookie, footer, the 4 licence lines. Blocks: header + cookie, the licence,
    # the signature.
    assert counters["frequent_keys"] == 10
    assert counters["documents_changed"] == 7 and counters["rejected"] == 1


@pytest.mark.slow
def test_removed_lines_are_recorded_with_the_documents_they_left() -> None:
    """Each line or block removed, shown as its first occurrence, with the number of documents
    it was removed from (the run report's boilerplate table)."""
    licence_lines = [(line, 6) for line in LICENCE.split("\n")]
    footer = CORPUS[-1].text.split("\n\n")[1].rstrip("\n")  # FOOTER is rebound below (PDF tests)
    expected = sorted([(HEADER, 7), (footer, 7), (COOKIE, 6), (f"{HEADER}\n{COOKIE}", 6),
                       (LICENCE, 6), (SIGNATURE, 6), *licence_lines])
    with fnapi_pipeline() as p:
        out = p | beam.Create(CORPUS) | RemoveBoilerplate(OPTIONS)
        shown = out.removed | beam.Map(lambda rows: sorted((r["text"], r["documents"]) for r in rows))
        assert_that(shown, equal_to([expected]))


@pytest.mark.slow
def test_removed_lines_are_capped_most_frequent_first() -> None:
    lines = [f"Boilerplate sentence number {k} that every page repeats." for k in range(TOP_REMOVED + 10)]
    # Lines 0..9 are in one more document than the rest: they must be among those kept.
    docs = [Document(f"d{i}.md", f"/c/d{i}.md", "\n\n".join(lines[: 10 if i == 3 else None]) + f"\n\nOwn text {i}.")
            for i in range(4)]
    with fnapi_pipeline() as p:
        out = p | beam.Create(docs) | RemoveBoilerplate(OPTIONS)
        def check(rows: list[dict]) -> None:
            assert len(rows) == TOP_REMOVED
            assert [r["documents"] for r in rows[:10]] == [4] * 10 and {r["text"] for r in rows[:10]} == set(lines[:10])
            assert all(r["documents"] == 3 for r in rows[10:])
        assert_that(out.removed, lambda found: check(found[0]))


@pytest.mark.slow
def test_exact_copies_count_once() -> None:
    """Four copies of one page (differing only in spacing) are one text to the count: with
    min_docs 3 their lines are not boilerplate; the shared footer of other pages still is."""
    page_text = "# Release notes\n\nVersion 3.5 adds opportunity charging to every Courier.\n"
    copies = [Document(f"copy{i}.md", f"/c/copy{i}.md", page_text.replace(" ", " " * (i + 1)))
              for i in range(4)]
    others = [Document(f"o{i}.md", f"/c/o{i}.md", f"Other page {i} with its own text.\n\n{FOOTER}\n")
              for i in range(3)]
    with fnapi_pipeline() as p:
        out = p | beam.Create(copies + others) | RemoveBoilerplate(OPTIONS)
        assert_that(out.documents | beam.Map(lambda d: (d.doc_id, d.text)), equal_to(
            [(d.doc_id, d.text) for d in copies]
            + [(f"o{i}.md", f"Other page {i} with its own text.\n") for i in range(3)]))


@pytest.mark.slow
def test_thresholds_decide() -> None:
    """With min_docs above the number of copies nothing is boilerplate; with min_fraction the
    floor follows the corpus size."""
    with fnapi_pipeline() as p:
        strict = p | "Strict" >> beam.Create(CORPUS) | "S" >> RemoveBoilerplate(
            BoilerplateOptions(min_docs=8, min_fraction=0.0))
        assert_that(strict.documents | "SIds" >> beam.Map(lambda d: (d.doc_id, d.text)),
                    equal_to([(d.doc_id, d.text) for d in CORPUS]), label="strict")
        share = p | "Share" >> beam.Create(CORPUS) | "F" >> RemoveBoilerplate(
            BoilerplateOptions(min_docs=2, min_fraction=0.2))  # 9 docs: floor max(2, 1.8)
        pairs = share.documents | "Pairs" >> beam.Filter(lambda d: d.doc_id.startswith("pair"))
        assert_that(pairs | "FIds" >> beam.Map(lambda d: (d.doc_id, d.text)),
                    equal_to([("pair-a.md", "A."), ("pair-b.md", "B.")]), label="share")


# --- Page starts through boilerplate removal (PDF) ---------------------------------------------

FOOTER = "Northwind Robotics confidential manual"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["", FOOTER, "x", "body line one", "body line two"]),
                         max_size=6), min_size=1, max_size=5))
def test_page_starts_follow_the_lines_boilerplate_removal_keeps(pages: list[list[str]]) -> None:
    options = BoilerplateOptions(min_line_chars=10)
    frequent = line_keys(FOOTER, options)
    text, starts = "", []
    for number, lines in enumerate(pages):
        starts.append(len(text))
        text += "\n".join([f"page {number} marker", *lines]) + "\n\n"
    stripped, moved = remove_boilerplate_marked(text, starts, frequent, options)
    assert stripped == remove_boilerplate(text, frequent, options)
    bounds = [*moved, len(stripped)]
    for number, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        assert stripped[lo:hi].startswith(f"page {number} marker\n")


@pytest.mark.slow
@given(st.lists(st.sets(st.integers(0, (1 << 64) - 1), max_size=30), max_size=40), st.integers(1, 7))
def test_key_counts_in_arrays_are_documents_per_key(key_sets, cut) -> None:
    """The stage counts uint64 arrays merged in any grouping: each key's count is the number of
    sets holding it, as a Counter over the sets says."""
    from collections import Counter

    import numpy as np

    from chunkline.transforms.clean import key_array, key_text
    from chunkline.transforms.tally import KeyCounts

    combine = KeyCounts()
    arrays = [np.frombuffer(key_array({key_text(k) for k in keys}), dtype="<u8") for keys in key_sets]
    halves = [arrays[:cut], arrays[cut:]]
    accumulators = []
    for half in halves:
        accumulator = combine.create_accumulator()
        for array in half:
            accumulator = combine.add_input(accumulator, array)
        accumulators.append(accumulator)
    keys, counts = combine.extract_output(combine.merge_accumulators(accumulators))
    expected = Counter(k for keys_ in key_sets for k in keys_)
    assert dict(zip(keys.tolist(), counts.tolist())) == dict(expected)
    assert list(keys) == sorted(expected)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sets(st.integers(0, (1 << 64) - 1), max_size=30), max_size=40),
       st.integers(1, 50), st.integers(1, 5))
def test_bucketed_partials_sum_to_documents_per_key(key_sets, flush_keys, buckets) -> None:
    """The stage's senders count what they hold whenever it reaches their bound, by bucket, and
    the partials of a bucket summed where received give each key's number of sets, ascending."""
    from collections import Counter

    from chunkline.transforms import clean
    from chunkline.transforms.clean import _BucketKeys, key_array, key_text
    from chunkline.transforms.tally import sum_counts

    sender = _BucketKeys(buckets)
    sender.start_bundle()
    partials = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clean, "_FLUSH_KEYS", flush_keys)
        for keys in key_sets:
            partials.extend(sender.process(key_array({key_text(k) for k in keys})))
        partials.extend(element.value for element in sender.finish_bundle())
    expected = Counter(k for keys_ in key_sets for k in keys_)
    found = {}
    for bucket in {bucket for bucket, _ in partials}:
        keys, counts = sum_counts([part for b, part in partials if b == bucket])
        assert list(keys) == sorted(keys) and all(int(k) % buckets == bucket for k in keys)
        found.update(zip(keys.tolist(), counts.tolist()))
    assert found == dict(expected)


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(st.lists(st.lists(st.sampled_from([HEADER, COOKIE, FOOTER, "A line of its own text here, long.",
                                          "Another line that a few pages share today."]),
                         min_size=1, max_size=4), min_size=1, max_size=12))
def test_the_stage_removes_what_the_pure_functions_remove(pages) -> None:
    docs = [Document(f"d{i}.md", f"/c/d{i}.md", "\n\n".join([f"Page {i} body text, unique to it.", *lines]) + "\n")
            for i, lines in enumerate(pages)]
    from collections import Counter

    from chunkline.records import doc_hash

    distinct = {doc_hash(d.text): d.text for d in docs}
    counts = Counter(k for text in distinct.values() for k in line_keys(text, OPTIONS))
    floor = frequency_floor(len(distinct), OPTIONS)
    frequent = {k for k, n in counts.items() if n >= floor}
    expected = sorted((d.doc_id, remove_boilerplate(d.text, frequent, OPTIONS)) for d in docs)
    with fnapi_pipeline() as p:
        out = p | beam.Create(docs) | RemoveBoilerplate(OPTIONS)
        assert_that(out.documents | beam.Map(lambda d: (d.doc_id, d.text)),
                    equal_to([pair for pair in expected if pair[1].strip()]))
