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
from chunkline.transforms import clean as clean_module
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
@pytest.mark.parametrize("inline", [1 << 20, 0], ids=["sets-in-the-grouping", "sets-parked"])
def test_boilerplate_corpus(inline, monkeypatch, tmp_path) -> None:
    # Parked: every batch of key sets waits in part files (a dump's do, past a bundle's first
    # INLINE_KEY_BYTES), sent a few texts at a time.
    monkeypatch.setattr(clean_module, "INLINE_KEY_BYTES", inline)
    monkeypatch.setattr(clean_module, "_FLUSH_TEXTS", 2 if not inline else clean_module._FLUSH_TEXTS)
    with fnapi_pipeline() as p:
        out = p | beam.Create(CORPUS) | RemoveBoilerplate(OPTIONS, spill_dir=str(tmp_path / "parked"))
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
    assert list(tmp_path.iterdir()) == []  # the documents' parts and the key sets' removed


@pytest.mark.slow
def test_settled_batches_count_as_documents_and_no_element_per_document_is_grouped() -> None:
    """Documents the run does not process again, given as key-set batches, count towards the
    frequent set exactly as documents do (never stripped or output themselves); what the grouping
    by text receives is a few batches per bundle, not an element per document."""
    import numpy as np

    from chunkline.key_sets import key_sets, text_hash
    from chunkline.records import doc_hash

    many = [Document(f"m{i:03d}.md", f"/c/m{i:03d}.md", f"Many page {i} has its own long line.\n\n{COOKIE}\n")
            for i in range(300)]
    settled_texts = [d.text for d in CORPUS]
    texts = [d.text for d in many] + settled_texts
    options = BoilerplateOptions(min_docs=3, min_fraction=0.01)  # 309 texts: floor 4
    frequent = plain_frequent(texts, options)
    expected = sorted((d.doc_id, remove_boilerplate(d.text, {f"{k:016x}" for k in frequent}, options))
                      for d in many)
    settled = key_sets([(text_hash(doc_hash(t)), [int(k, 16) for k in line_keys(t, options)])
                        for t in settled_texts])
    with fnapi_pipeline() as p:
        batches = p | "Settled" >> beam.Create([settled])
        out = p | beam.Create(many) | RemoveBoilerplate(options, settled=batches)
        assert_that(out.documents | beam.Map(lambda d: (d.doc_id, d.text)), equal_to(expected),
                    label="documents")
        assert_that(out.frequent | beam.Map(lambda keys: (keys.dtype.str, keys.tolist())),
                    equal_to([(np.dtype("<u8").str, sorted(frequent))]), label="frequent")
    counters = {c.key.metric.name: c.committed for c in p.result.metrics().query(
        MetricsFilter().with_namespace("boilerplate"))["counters"]}
    # The cookie line (in every page) and the header's lines from the settled pages alone.
    assert {f"{k:016x}" for k in frequent} >= line_keys(f"{COOKIE}\n\n{HEADER}", options)
    assert counters["frequent_keys"] == len(frequent)
    # One batch per share of the text-hash space (16) per sending bundle, whatever the count of
    # documents: 309 texts in at most a few dozen elements.
    assert 1 <= counters["text_batches"] <= 2 * 16


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


LINE_POOL = [HEADER, COOKIE, FOOTER, "A line of its own text here, long.",
             "Another line that a few pages share today.", "Yet another sentence long enough to count.",
             "Short", "# A heading the pages share, never counted"]


def plain_frequent(texts: list[str], options: BoilerplateOptions) -> set[int]:
    """The frequent keys as a plain Python count says: one set per distinct text (doc_hash),
    each key's number of sets against the floor of the distinct texts."""
    from collections import Counter

    from chunkline.records import doc_hash

    distinct = {doc_hash(text): text for text in texts}
    counts = Counter(k for text in distinct.values() for k in line_keys(text, options))
    floor = frequency_floor(len(distinct), options)
    return {int(k, 16) for k, n in counts.items() if n >= floor}


def array_frequent(documents: list[Document], settled: list, options: BoilerplateOptions, *,
                   shares: int, buckets: int, park) -> set[int]:
    """The stage's own steps run by hand over one bundle each: the documents' key sets batched
    (_KeysOfText), every batch split by text share (_TextShares), each share's texts made
    distinct and counted by bucket (_CountTexts), the buckets' partials summed (tally)."""
    from apache_beam.pvalue import TaggedOutput

    from chunkline.transforms.clean import KEYS, TEXTS, _CountTexts, _KeysOfText, _TextShares
    from chunkline.transforms.tally import sum_counts

    def run(dofn, elements):
        outputs = []
        dofn.setup()
        dofn.start_bundle()
        for element in elements:
            outputs.extend(dofn.process(element) or ())
        for output in dofn.finish_bundle() or ():
            outputs.append(output if not hasattr(output, "windows") else output.value)
            if isinstance(output, TaggedOutput) and hasattr(output.value, "windows"):
                outputs[-1] = TaggedOutput(output.tag, output.value.value)
        return outputs

    batches = [out.value for out in run(_KeysOfText(options), documents)
               if isinstance(out, TaggedOutput) and out.tag == KEYS]
    grouped: dict[int, list] = {}
    for share, data in run(_TextShares(shares, park), batches + settled):
        grouped.setdefault(share, []).append(data)
    partials, texts = [], 0
    for share in grouped.items():
        for out in run(_CountTexts(buckets), [share]):
            if isinstance(out, TaggedOutput):
                assert out.tag == TEXTS
                texts += out.value
            else:
                partials.append(out)
    floor = frequency_floor(texts, options)
    frequent = set()
    for bucket in {bucket for bucket, _ in partials}:
        keys, counts = sum_counts([part for b, part in partials if b == bucket])
        assert list(keys) == sorted(keys) and all(int(k) % buckets == bucket for k in keys)
        frequent.update(keys[counts >= floor].tolist())
    return frequent


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(LINE_POOL), min_size=1, max_size=5), min_size=1, max_size=25),
       st.lists(st.integers(0, 24), max_size=8), st.data(), st.integers(1, 40), st.integers(1, 5),
       st.integers(1, 6), st.sampled_from([0, 1 << 30]))
def test_the_array_count_is_a_plain_count_however_documents_and_batches_split(
        tmp_path_factory, pages, copies, data, flush, shares, buckets, inline) -> None:
    """Frequent keys from the stage's array steps are those of a plain Python count over the
    distinct texts, with some texts exact copies (a spacing change included) and the corpus
    split between documents and settled batches in any way, batches of any size, senders
    flushing at any bound, parked or not."""
    from chunkline.key_sets import key_sets, text_hash
    from chunkline.records import doc_hash
    from chunkline.transforms import clean

    texts = ["\n\n".join(lines) + "\n" for lines in pages]
    texts += [texts[i % len(texts)].replace(" ", "  ", i % 2) for i in copies]
    settled_at = data.draw(st.sets(st.integers(0, len(texts) - 1)), label="settled")
    cuts = data.draw(st.lists(st.integers(0, len(settled_at)), max_size=3), label="cuts")
    settled_texts = [texts[i] for i in sorted(settled_at)]
    bounds = sorted({0, len(settled_texts), *cuts})
    settled = [key_sets([(text_hash(doc_hash(t)), [int(k, 16) for k in line_keys(t, OPTIONS)])
                         for t in settled_texts[lo:hi]]) for lo, hi in zip(bounds, bounds[1:])]
    documents = [Document(f"d{i}", f"/c/d{i}.md", t) for i, t in enumerate(texts) if i not in settled_at]
    park = str(tmp_path_factory.mktemp("keys"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clean, "_FLUSH_KEYS", flush)
        patch.setattr(clean, "_FLUSH_TEXTS", flush)
        patch.setattr(clean, "INLINE_KEY_BYTES", inline)
        found = array_frequent(documents, settled, OPTIONS, shares=shares, buckets=buckets, park=park)
    assert found == plain_frequent(texts, OPTIONS)


def test_key_set_batches_keep_each_texts_keys_through_the_coder_and_a_split() -> None:
    from chunkline.key_sets import concat, key_sets, one_per_text, split_by_share
    from chunkline.transforms.coders import KeySetsCoder

    entries = [(bytes([i]) * 15 + b"\x00", [5, i, i, 2**64 - 1]) for i in range(6)] + [(b"\x07" * 16, [])]
    batch = key_sets(entries)
    coder = KeySetsCoder()
    decoded = coder.decode(coder.encode(batch))
    assert coder.encode(decoded) == coder.encode(batch)
    # An element of an S16 array reads without its trailing NUL bytes: the array's bytes are whole.
    raw = decoded.text_hashes.tobytes()
    assert [raw[i * 16:(i + 1) * 16] for i in range(decoded.texts)] == [h for h, _ in entries]
    assert [decoded.keys_of(i).tolist() for i in range(decoded.texts)] == \
        [sorted(set(keys)) for _, keys in entries]
    parts = split_by_share(batch, 3)
    assert sorted(share for share, _ in parts) == [share for share, _ in parts]
    whole = one_per_text(concat([part for _, part in parts] + [batch]))
    assert coder.encode(whole) == coder.encode(one_per_text(batch))
    with pytest.raises(ValueError, match="offsets"):
        coder.encode(batch._replace(offsets=batch.offsets[::-1].copy()))


def test_the_frequent_keys_file_round_trips_and_a_run_without_one_reads_none(tmp_path, caplog) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    from chunkline.index.layout import BOILERPLATE_FREQUENT
    from chunkline.key_sets import read_frequent
    from chunkline.transforms.clean import WriteFrequentKeys

    assert read_frequent(str(tmp_path)) is None
    keys = np.array([2**64 - 1, 7, 0, 2**63], dtype="<u8")
    (path,) = WriteFrequentKeys(str(tmp_path)).process(keys)
    assert path == str(tmp_path / BOILERPLATE_FREQUENT)
    assert pq.read_schema(path).field("key").type == "uint64"
    back = read_frequent(str(tmp_path))
    assert back.dtype == np.dtype("<u8") and back.tolist() == sorted(keys.tolist())
    (tmp_path / BOILERPLATE_FREQUENT).write_bytes(b"PAR1 cut short")
    with caplog.at_level("WARNING", logger="chunkline.key_sets"):
        assert read_frequent(str(tmp_path)) is None
    assert "is not a frequent-keys file" in caplog.text


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
