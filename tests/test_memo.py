"""The memo of per-text results: keys that never collide across kinds, settings or framing, and
segments that come back exactly or not at all (a damaged one is skipped, never misread)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from chunkline.memo import (
    CLEAN,
    ENTRY_BYTES,
    LINE_KEYS,
    SEGMENT_ENTRIES,
    SHARED_BYTES,
    SIGNATURE,
    Known,
    Memo,
    MemoSource,
    load_known,
    memo_key,
    read_segments,
    STRIP,
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


@given(st.dictionaries(st.binary(min_size=16, max_size=16), st.binary(max_size=64), max_size=30),
       st.sampled_from([LINE_KEYS, STRIP]))
def test_a_segment_reads_back_as_written(tmp_path_factory, entries, kind) -> None:
    # Plain (digests, keys, signatures) or compressed (text values): read back alike.
    path = tmp_path_factory.mktemp("memo") / f"{kind}-a.parquet"
    with open(path, "wb") as handle:
        write_segment(entries, kind, handle)
    assert read_segments([str(path)], lambda p: open(p, "rb")) == entries


def _write(path: Path, entries: dict[bytes, bytes]) -> None:
    with open(path, "wb") as handle:
        write_segment(entries, LINE_KEYS, handle)  # written plain: the flipped bit is in the value


def test_a_damaged_or_truncated_segment_is_skipped_not_misread(tmp_path) -> None:
    good, flipped, cut = (tmp_path / f"line_keys-{n}.parquet" for n in ("good", "flipped", "cut"))
    _write(good, {bytes(16): b"kept"})
    value = b"A" * 4000
    _write(flipped, {bytes([1] * 16): value})
    data = bytearray(flipped.read_bytes())
    at = data.find(b"A" * 100)
    data[at + 50] ^= 0x01  # one bit of the stored value
    flipped.write_bytes(bytes(data))
    _write(cut, {bytes([2] * 16): b"x"})
    cut.write_bytes(cut.read_bytes()[:-30])
    found = read_segments([str(p) for p in (good, flipped, cut)], lambda p: open(p, "rb"))
    assert found == {bytes(16): b"kept"}


def test_a_value_of_the_wrong_width_is_a_miss() -> None:
    memo = Memo("signature", "s", Known({b"k" * 16: b"123"}))
    assert memo.get(b"k" * 16, width=4) is None and memo.misses == 1
    memo.put(b"j" * 16, b"1234")
    assert memo.get(b"j" * 16, width=4) == b"1234" and memo.hits == 1
    assert memo.take_used() == {b"j" * 16: b"1234"} and memo.used == {}


def test_this_runs_results_are_shared_within_the_room_of_their_kind() -> None:
    """A later stage finds this run's line keys in the process, until the kind's room is spent;
    a kind no later stage asks for keeps none, whatever the number of records."""
    shared = Memo(LINE_KEYS, "s", Known(room=3 * (8 + ENTRY_BYTES)))
    for n in range(10):
        shared.put(bytes([n]) * 16, b"k" * 8)
    assert sorted(shared.known) == [bytes([n]) * 16 for n in range(3)]
    assert len(shared.used) == 10
    alone = Memo(CLEAN, "s", load_known(CLEAN, "alone", (), lambda p: open(p, "rb")))
    alone.put(b"c" * 16, b"")
    assert alone.known == {} and alone.used == {b"c" * 16: b""}
    assert load_known(LINE_KEYS, "fresh", (), lambda p: open(p, "rb")).room == SHARED_BYTES


def test_a_bundles_results_are_written_as_they_accumulate() -> None:
    segments: list[dict[bytes, bytes]] = []
    memo = Memo(SIGNATURE, "s", Known({b"old" + bytes(13): b"1234"}), spill=segments.append)
    for n in range(SEGMENT_ENTRIES + 5):
        memo.put(n.to_bytes(16, "big"), b"abcd")
    assert [len(segment) for segment in segments] == [SEGMENT_ENTRIES] and len(memo.used) == 5
    # Recalled from a segment this run keeps referencing: not written again.
    assert memo.get(b"old" + bytes(13), width=4) == b"1234"
    assert set(memo.take_used()) == {n.to_bytes(16, "big") for n in range(SEGMENT_ENTRIES, SEGMENT_ENTRIES + 5)}


def test_only_results_of_segments_no_longer_referenced_are_written_again() -> None:
    """A result recalled from a segment the run keeps referencing stays there; one recalled
    from a segment it drops (written generations ago) goes into this run's segment, as a
    computed one does."""
    kept, dropped, new = b"k" * 16, b"d" * 16, b"n" * 16
    memo = Memo(SIGNATURE, "s", Known({kept: b"1111"}), expiring={dropped: b"2222"})
    assert memo.get(kept, width=4) == b"1111" and memo.get(dropped, width=4) == b"2222"
    assert memo.get(new, width=4) is None
    memo.put(new, b"3333")
    assert (memo.hits, memo.misses) == (2, 1)
    assert memo.take_used() == {dropped: b"2222", new: b"3333"}
    source = MemoSource("out/r3/memo", ("out/r1/memo/signature-a.parquet", "out/r2/memo/signature-b.parquet",
                                        "out/r2/memo/clean-c.parquet"), "s",
                        kept=("out/r2/memo/signature-b.parquet",))
    assert source.kept_segments(SIGNATURE) == ("out/r2/memo/signature-b.parquet",)
    assert source.expiring_segments(SIGNATURE) == ("out/r1/memo/signature-a.parquet",)
