"""The memo of per-text results: keys that never collide across kinds, settings or framing,
segments that come back exactly or not at all (a damaged one is skipped, never misread), and
shares: what a document carries is its own previous results, loaded a share at a time."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from chunkline.memo import (
    BLOCK,
    CLEAN,
    LINE_KEYS,
    MAX_SHARES,
    MIN_SHARES,
    READ,
    SEGMENT_ENTRIES,
    SHARE_BYTES,
    SIGNATURE,
    Memo,
    MemoSource,
    RecalledShares,
    STRIP,
    doc_ref,
    load_share,
    memo_key,
    pack,
    packed_value,
    parse_segment_name,
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


@given(st.dictionaries(keys, st.binary(max_size=64), max_size=20))
def test_packed_entries_come_back_and_are_found_in_place(entries) -> None:
    packed = pack(entries)
    assert unpack(packed) == entries
    for key, value in entries.items():
        assert packed_value(packed, key) == value
    assert packed_value(packed, b"\xff" * 17) is None
    assert packed_value(packed[:-1], next(iter(entries), b"")) in (None, *entries.values())


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


def test_a_value_of_the_wrong_width_is_a_miss_and_what_is_used_is_recorded_by_share() -> None:
    memo = Memo(SIGNATURE, "s", shares=16)
    doc = _Doc("a.md", 0, pack({b"k" * 16: b"123", b"j" * 16: b"1234"}))
    assert memo.recall(doc, b"k" * 16, width=4) is None and memo.misses == 1
    assert memo.recall(doc, b"j" * 16, width=4) == b"1234" and memo.hits == 1
    memo.keep(doc, b"k" * 16, b"4321")
    share = unit_share("a.md", 0, 16)
    assert memo.take_used() == {share: {(doc_ref("a.md", 0), b"j" * 16): b"1234",
                                        (doc_ref("a.md", 0), b"k" * 16): b"4321"}}
    assert memo.used == {} and memo.held == 0


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
        assert packed_value(recalled.entries_of(uri, position), memo.key(uri)) == b""
    assert recalled.entries_of("new.md", 0) == b""
    assert recalled.loads <= len(documents) and len(recalled._loaded) <= 2
    # Asked in share order, each share is loaded once.
    again = RecalledShares(MemoSource("w", tuple(paths)), _open, held=1)
    for uri, position in sorted(documents, key=lambda d: unit_share(*d, shares)):
        again.entries_of(uri, position)
    assert again.loads == len({unit_share(*d, shares) for d in documents})
