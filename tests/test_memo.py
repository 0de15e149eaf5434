"""The memo of per-text results: keys that never collide across kinds, settings or framing,
segments that come back exactly or not at all (a damaged one is skipped, never misread),
shares: what a document carries is its own previous results, loaded a share at a time, and the
log: a run records only what it computed (and what it recalled from a retired segment),
counting what it recalls from each listed segment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.index.compaction import REWRITE_FLOOR
from chunkline.memo import (
    BLOCK,
    CLEAN,
    HERE,
    LINE_KEYS,
    HARD_MAX_AGE,
    HARD_MIN_USED,
    MAX_AGE,
    MAX_SHARES,
    MIN_USED,
    MIN_SHARES,
    READ,
    SEGMENT_ENTRIES,
    SHARE_BYTES,
    SIGNATURE,
    Listed,
    Memo,
    MemoSource,
    RecalledShares,
    STRIP,
    doc_ref,
    load_share,
    memo_key,
    listed_from,
    pack,
    _entries,
    packed_entry,
    packed_value,
    parse_segment_name,
    retired,
    memo_rewrite_budget,
    segment_name,
    shares_for,
    unit_share,
    unpack,
    write_segment,
    text_digest,
)
from chunkline.records import framed_digest_bytes

texts = st.text(max_size=40)


@given(texts, texts, texts, texts)
def test_keys_differ_whenever_any_framed_part_differs(a, b, c, d) -> None:
    # Moving characters from one part to the next must give another key.
    if (a, b) != (c, d):
        assert memo_key("k", "s", a, b) != memo_key("k", "s", c, d)
    assert memo_key("k", "s", a) != memo_key("other", "s", a)
    assert memo_key("k", "s", a) != memo_key("k", "s2", a)
    assert len(memo_key("k", "s", a)) == 16


@given(texts, texts, texts, st.lists(texts, max_size=3))
def test_a_key_is_the_framed_digest_of_its_parts(kind, settings, text, more) -> None:
    # The kind and settings are hashed once and the state copied per key: the same digest as
    # hashing every framed part at once, so a run still finds the previous run's keys.
    expected = framed_digest_bytes((kind, settings, text_digest(text).hex(), *more))
    assert memo_key(kind, settings, text, *more) == expected
    assert memo_key(kind, settings, text, *more) == expected  # the cached state is not spent


keys = st.binary(min_size=16, max_size=16)
places = st.tuples(st.text(max_size=20), st.integers(0, 10 * BLOCK))


def _open(path: str):
    return open(path, "rb")


def _write(path: Path, rows: dict[tuple[bytes, bytes], bytes], kind: str = LINE_KEYS) -> None:
    with open(path, "wb") as handle:
        write_segment(rows, kind, handle)  # line keys written plain: a flipped bit is in the value


@given(st.dictionaries(keys, st.binary(max_size=64), max_size=20), st.integers(0, HERE))
def test_packed_entries_come_back_and_are_found_in_place(entries, segment) -> None:
    packed = pack(entries, segment)
    assert unpack(packed) == entries
    for key, value in entries.items():
        assert packed_value(packed, key) == value and packed_entry(packed, key) == (value, segment)
    assert packed_value(packed, b"\xff" * 17) is None
    assert packed_value(packed[:-1], next(iter(entries), b"")) in (None, *entries.values())


def _scanned_entry(packed: bytes, key: bytes) -> tuple[bytes, int] | None:
    """The plain reading of the packed format (the last entry under ``key``; None for damage),
    which ``packed_entry`` inlines for speed."""
    found = None
    for entry in _entries(packed):
        if entry is None:
            return None
        if entry[0] == key:
            found = (packed[entry[2]:entry[3]], entry[1])
    return found


@given(st.dictionaries(keys, st.binary(max_size=40), max_size=6), st.integers(0, HERE),
       st.integers(0, 400), st.binary(max_size=30))
def test_packed_entry_reads_any_bytes_as_the_format_does(entries, segment, cut, tail) -> None:
    # Cut short, or with bytes after it (damage): the same answer as a scan entry by entry.
    whole = pack(entries, segment) + pack(dict(list(entries.items())[:1]))
    for packed in (whole, whole[:cut], whole + tail):
        for key in (*entries, b"\x00" * 16, b"short"):
            assert packed_entry(packed, key) == _scanned_entry(packed, key)


@given(st.dictionaries(st.tuples(keys, keys), st.binary(max_size=64), max_size=30),
       st.sampled_from([LINE_KEYS, STRIP]))
def test_a_segment_reads_back_as_written(tmp_path_factory, rows, kind) -> None:
    # Plain (digests, keys, signatures) or compressed (text values): read back alike, each
    # document's entries packed together.
    path = tmp_path_factory.mktemp("memo") / segment_name(kind, 3, 16)
    _write(path, rows, kind)
    loaded = load_share([str(path)], _open)
    assert {doc: unpack(packed) for doc, packed in loaded.by_doc.items()} == {
        doc: {key: value for (d, key), value in rows.items() if d == doc} for doc, _ in rows}


def test_a_damaged_or_truncated_segment_is_skipped_not_misread(tmp_path) -> None:
    good, flipped, cut = (tmp_path / segment_name(LINE_KEYS, 0, 16) for _ in range(3))
    _write(good, {(bytes(16), bytes(16)): b"kept"})
    value = b"A" * 4000
    _write(flipped, {(bytes(16), bytes([1] * 16)): value})
    data = bytearray(flipped.read_bytes())
    at = data.find(b"A" * 100)
    data[at + 50] ^= 0x01  # one bit of the stored value
    flipped.write_bytes(bytes(data))
    _write(cut, {(bytes(16), bytes([2] * 16)): b"x"})
    cut.write_bytes(cut.read_bytes()[:-30])
    found = load_share([str(p) for p in (good, flipped, cut)], _open)
    assert {doc: unpack(packed) for doc, packed in found.by_doc.items()} == {bytes(16): {bytes(16): b"kept"}}


def test_segment_names_say_kind_and_share_and_nothing_else_is_read() -> None:
    assert parse_segment_name("/x/memo/" + segment_name(SIGNATURE, 5, 64)) == (SIGNATURE, 64, 5)
    for other in ("signature-0a1b.parquet", "nope-16-1-a.parquet", "line_keys-16-16-a.parquet",
                  "clean-16-x-a.parquet", "clean-16-1-a.json"):
        assert parse_segment_name(other) is None
    source = MemoSource("w", (segment_name(CLEAN, 1, 16), segment_name(READ, 2, 16),
                              segment_name(STRIP, 1, 16), "clean-old.parquet"))
    assert source.previous_shares == 16
    assert [parse_segment_name(p)[0] for p in source.segments_of(1)] == sorted([CLEAN, STRIP])
    assert MemoSource("w").previous_shares is None


@given(st.integers(0, 1 << 45))
def test_shares_keep_a_share_near_its_bytes_at_any_size(size) -> None:
    shares = shares_for(size)
    assert MIN_SHARES <= shares <= MAX_SHARES and shares & (shares - 1) == 0
    if MIN_SHARES < shares < MAX_SHARES:
        assert size / shares <= SHARE_BYTES < 2 * size / shares


@given(places, st.sampled_from([16, 64, 1024]))
def test_a_dump_block_is_one_unit(place, shares) -> None:
    uri, position = place
    share = unit_share(uri, position, shares)
    assert 0 <= share < shares
    assert unit_share(uri, position - position % BLOCK, shares) == share  # the piece's first record's
    assert doc_ref(uri, position) != doc_ref(uri, position + 1)


class _Doc:
    def __init__(self, uri: str, position: int, memo: bytes = b"") -> None:
        self.uri, self.position, self.memo = uri, position, memo


def test_a_value_of_the_wrong_width_is_a_miss_and_only_what_is_computed_is_recorded() -> None:
    memo = Memo(SIGNATURE, "s", shares=16)
    doc = _Doc("a.md", 0, pack({b"k" * 16: b"123", b"j" * 16: b"1234"}, segment=3))
    assert memo.recall(doc, b"k" * 16, width=4) is None and memo.misses == 1
    assert memo.recall(doc, b"j" * 16, width=4) == b"1234" and memo.hits == 1
    memo.keep(doc, b"k" * 16, b"4321")
    share = unit_share("a.md", 0, 16)
    # The recalled entry stays in segment 3, which the run lists: only the computed one is new.
    assert memo.take_used() == {share: {(doc_ref("a.md", 0), b"k" * 16): b"4321"}}
    assert memo.used == {} and memo.held == 0
    assert memo.take_recalled() == {3: 1} and memo.recalled == {}


def test_what_is_recalled_from_a_retired_segment_is_written_again() -> None:
    memo = Memo(CLEAN, "s", shares=16, retired=frozenset({3}))
    doc = _Doc("a.md", 7, pack({b"a" * 16: b"old"}, segment=3) + pack({b"b" * 16: b"kept"}, segment=5))
    assert memo.recall(doc, b"a" * 16) == b"old" and memo.recall(doc, b"b" * 16) == b"kept"
    assert memo.take_used() == {unit_share("a.md", 7, 16): {(doc_ref("a.md", 7), b"a" * 16): b"old"}}
    assert memo.take_recalled() == {3: 1, 5: 1}


def test_an_entry_of_this_run_is_neither_counted_nor_recorded_again() -> None:
    # A stage passes on what it recalled as this run's (HERE): the last entry under a key wins,
    # so the stage after it recalls the same value without counting it twice.
    packed = pack({b"h" * 16: b"v"}, segment=2) + pack({b"h" * 16: b"v"})
    assert packed_entry(packed, b"h" * 16) == (b"v", HERE)
    memo = Memo(CLEAN, "s", retired=frozenset({2}))
    assert memo.recall(_Doc("a.md", 0, packed), b"h" * 16) == b"v" and memo.hits == 1
    assert memo.take_used() == {} and memo.take_recalled() == {}


def _listed(used: int | None, *, rows: int = 100, age: int = 0, shares: int = 16) -> Listed:
    return Listed(f"run/memo/{segment_name(CLEAN, 1, shares)}", rows, 10 * rows, age, used)


@pytest.mark.parametrize(("segment", "gone"), [
    (_listed(100), False),
    (_listed(None), False),  # use not counted (a runner without metrics): age alone decides
    (_listed(int(MIN_USED * 100)), False),
    (_listed(int(MIN_USED * 100) - 1), True),  # past the bound: its live rows are written again
    (_listed(100, age=MAX_AGE - 1), False),
    (_listed(100, age=MAX_AGE), True),
    (_listed(100, shares=32), True),  # cut into other shares than this run's
    (Listed("run/memo/clean-old.parquet", 1, 1), True),
])
def test_a_segment_is_retired_when_sparse_old_or_cut_otherwise(segment, gone) -> None:
    assert retired([segment], 16) == (frozenset({0}) if gone else frozenset())
    assert retired([segment], 16, same_output=False) == frozenset({0})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, HARD_MAX_AGE + 2),
                          st.integers(1, 4 * REWRITE_FLOOR)), min_size=1, max_size=60))
def test_due_segments_are_retired_sparsest_first_within_the_budget(segments) -> None:
    listed = [Listed(f"run{i}/memo/{segment_name(CLEAN, 1, 16)}", 100, size, age, used)
              for i, (used, age, size) in enumerate(segments)]
    gone = retired(listed, 16)
    hard = {i for i, s in enumerate(listed) if s.used < HARD_MIN_USED * 100 or s.age + 1 > HARD_MAX_AGE}
    due = {i for i, s in enumerate(listed)
           if i not in hard and (s.used < MIN_USED * 100 or s.age + 1 > MAX_AGE)}
    assert hard <= gone <= hard | due  # a segment neither due nor past a bound stays listed
    chosen = gone - hard
    budget = memo_rewrite_budget(listed)
    # Within the budget (the last one taken may pass it), and never a fresher one for a sparser
    # one left out: what is taken is a prefix of the due ones in order.
    assert sum(listed[i].bytes for i in chosen) < budget + max((listed[i].bytes for i in chosen), default=0) + 1
    order = sorted(due, key=lambda i: (listed[i].used / 100, -listed[i].age, listed[i].bytes, i))
    assert chosen == set(order[:len(chosen)])
    if due and not chosen:
        raise AssertionError("a run with due segments retires at least one")


def test_a_memo_that_thins_out_together_is_rewritten_over_many_runs() -> None:
    # 320 segments of one full run, all just past MIN_USED: not all in one night.
    size = REWRITE_FLOOR
    listed = [Listed(f"run/memo/{segment_name(CLEAN, i % 16, 16)}", 100, size, 17, 79) for i in range(320)]
    assert len(retired(listed, 16)) == 10  # a thirty-second of the bytes
    assert sum(listed[i].bytes for i in retired(listed, 16)) <= memo_rewrite_budget(listed)


def test_a_run_lists_the_segments_it_keeps_one_run_older_with_what_it_recalled() -> None:
    listed = (_listed(100), _listed(10), _listed(100, age=3))
    source = MemoSource("w", ("a", "b", "c"), listed=listed, retired=retired(listed, 16))
    assert source.retired == frozenset({1})
    kept = source.kept({0: 97})
    assert [(s.age, s.used) for s in kept] == [(1, 97), (4, 0)]
    assert [listed_from(s.entry()) for s in kept] == kept
    assert kept[0].entry()["kind"] == CLEAN and kept[0].entry()["share"] == 1
    assert [s.used for s in source.kept(None)] == [None, None]
    assert listed_from({"path": "r/memo/x.parquet", "rows": 3}) == Listed("r/memo/x.parquet", 3, 0)
    assert listed_from({"rows": 3}) is None and listed_from("r/memo/x.parquet") is None


def test_a_bundles_results_are_written_as_they_accumulate() -> None:
    segments = []
    memo = Memo(SIGNATURE, "s", shares=16, spill=segments.append)
    for n in range(SEGMENT_ENTRIES + 5):
        memo.keep(_Doc(f"d{n % 7}.md", 0), n.to_bytes(16, "big"), b"abcd")
    assert [sum(map(len, spilled.values())) for spilled in segments] == [SEGMENT_ENTRIES]
    assert memo.held == 5


def test_a_reader_loads_only_the_shares_it_reads_a_few_at_a_time(tmp_path) -> None:
    shares, paths = 16, []
    documents = [(f"doc{n}.md", 0) for n in range(40)] + [("dump.jsonl", line) for line in (1, 2, BLOCK + 1)]
    memo = Memo(CLEAN, "s", shares=shares)
    for uri, position in documents:
        memo.keep(_Doc(uri, position), memo.key(uri), b"")
    for share, rows in memo.take_used().items():
        paths.append(str(tmp_path / segment_name(CLEAN, share, shares)))
        _write(Path(paths[-1]), rows, CLEAN)
    recalled = RecalledShares(MemoSource("w", tuple(paths)), _open, held=2)
    for uri, position in documents:
        # Each entry comes with the ordinal of the listed segment it was read from.
        ordinal = next(i for i, path in enumerate(paths)
                       if parse_segment_name(path)[2] == unit_share(uri, position, shares))
        assert packed_entry(recalled.entries_of(uri, position), memo.key(uri)) == (b"", ordinal)
    assert recalled.entries_of("new.md", 0) == b""
    assert recalled.loads <= len(documents) and len(recalled._loaded) <= 2
    # Asked in share order, each share is loaded once.
    again = RecalledShares(MemoSource("w", tuple(paths)), _open, held=1)
    for uri, position in sorted(documents, key=lambda d: unit_share(*d, shares)):
        again.entries_of(uri, position)
    assert again.loads == len({unit_share(*d, shares) for d in documents})


@given(st.lists(st.dictionaries(st.tuples(keys, keys), st.binary(max_size=40), max_size=12), min_size=1, max_size=3),
       st.lists(keys, max_size=4))
def test_a_share_finds_each_documents_entries_on_its_arrays(tmp_path_factory, segments, extra) -> None:
    """A share loaded as arrays (chunkline.memo.Recalled) packs each document's entries as its
    segments hold them, a later segment's after an earlier one's, each with its ordinal; and
    ``rows_of`` marks exactly the entries of the documents asked for."""
    folder = tmp_path_factory.mktemp("memo")
    paths = []
    for index, rows in enumerate(segments):
        path = folder / f"run{index}" / segment_name(LINE_KEYS, 3, 16)
        path.parent.mkdir()
        _write(path, rows, LINE_KEYS)
        paths.append(str(path))
    loaded = load_share(paths, _open, ordinals=[10 + index for index in range(len(paths))])
    docs = {doc for rows in segments for doc, _ in rows}
    for doc in docs | set(extra):
        expected = b"".join(pack({key: value for (d, key), value in sorted(rows.items()) if d == doc}, 10 + index)
                            for index, rows in enumerate(segments))
        assert loaded.entries(doc) == expected
    wanted = sorted(docs)[: len(docs) // 2] + list(extra)
    marked = loaded.rows_of(np.array(wanted, "S16")) if wanted else loaded.rows_of(np.empty(0, "S16"))
    assert sorted(bytes(ref).ljust(16, b"\0") for ref in loaded.refs[marked]) == sorted(
        doc for rows in segments for (doc, _) in rows if doc in set(wanted))
