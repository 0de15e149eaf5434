"""A document's input digest: it moves with what the reader made of the input, and with
nothing else (not the file's size or modification time, not where the record was parked)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.records import Document, input_digest

TEXT = st.text(max_size=30)
DOCUMENTS = st.builds(
    Document, doc_id=TEXT, uri=TEXT, text=TEXT,
    metadata=st.lists(st.tuples(TEXT, TEXT), max_size=3).map(tuple), format=TEXT,
    page_starts=st.lists(st.integers(0, 100), max_size=3).map(tuple))


@given(DOCUMENTS, st.integers(0, 2**40), st.floats(0, 2e9), st.integers(0, 10**6), TEXT)
def test_file_facts_and_provenance_leave_the_digest(doc, size, mtime, position, encoding) -> None:
    moved = dataclasses.replace(doc, file_size=size, file_modified=mtime, position=position,
                                encoding=encoding)
    assert input_digest(moved) == input_digest(doc)


@given(DOCUMENTS, st.sampled_from(["doc_id", "uri", "text", "format"]), TEXT)
def test_any_part_of_the_input_moves_it(doc, name, extra) -> None:
    changed = dataclasses.replace(doc, **{name: getattr(doc, name) + "x" + extra})
    assert input_digest(changed) != input_digest(doc)


@given(DOCUMENTS, TEXT, TEXT)
def test_metadata_moves_it_and_parts_do_not_run_together(doc, key, value) -> None:
    assert input_digest(dataclasses.replace(doc, metadata=doc.metadata + ((key, value),))) \
        != input_digest(doc)
    # The boundary between id and text is part of the digest.
    a = dataclasses.replace(doc, doc_id="ab", uri="", format="", text="c")
    b = dataclasses.replace(doc, doc_id="a", uri="", format="", text="bc")
    assert input_digest(a) != input_digest(b)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=6), st.integers(min_value=0, max_value=64))
def test_framed_digest_is_each_part_after_its_length(parts, joined_bytes) -> None:
    import hashlib

    from chunkline import records

    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records, "_JOINED_BYTES", joined_bytes)  # both paths: joined and streamed
        assert records.framed_digest_bytes(parts) == digest.digest()
        # Leading parts given as ``fixed`` (their state hashed once and copied): the same digest
        # wherever the split falls, and the cached state is never spent.
        for cut in range(len(parts) + 1):
            for _ in range(2):
                assert records.framed_digest_bytes(parts[cut:], tuple(parts[:cut])) == digest.digest()


@given(st.lists(st.sampled_from(["a", " ", "\n", "\r", "\r\n", "\t", "\u2028", "\x85", "\x1c", "e",
                                 "\u0301", "\u0327", "\u1100", "\u1161", "\n\n", "  ", "\ud800"]),
                max_size=60).map("".join),
       st.integers(1, 12))
def test_doc_hash_window_by_window_is_the_whole_texts(text: str, window: int) -> None:
    # A long text is normalized and hashed a window of whole lines at a time (its lines, and
    # their normalized forms, as lists held ~100 bytes a line): the same digest as in one piece.
    import hashlib

    from chunkline import records

    whole = hashlib.sha256(records.normalize_for_hash(text).encode("utf-8", "surrogatepass")).hexdigest()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records.line_windows, "__defaults__", (window,))
        assert "".join(records.line_windows(text)) == text
        assert records.doc_hash(text) == whole


@pytest.mark.parametrize("length", [0, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 300_001])
def test_text_digest_of_a_long_text_is_its_utf8s(length: int) -> None:
    # Past CACHED_TEXT_CHARS a text is neither cached (the cache held each form of a 5 MB
    # document to the end of the job) nor encoded whole: the digest is still its UTF-8's.
    import hashlib
    import random

    from chunkline.records import text_digest

    rng = random.Random(length)
    text = "".join(rng.choice(["a", "é", "\ud800", "😀", "\n"]) for _ in range(length))
    assert text_digest(text) == hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
