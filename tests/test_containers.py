"""Compressed files and archives (chunkline/containers.py through chunkline.readers): every
supported member read as a file of its own, each bad one and each bomb a rejected row with its
reason, the good members of a partly bad archive kept. Archives are written by Python's own
zipfile/tarfile/gzip/bz2/lzma, zstandard, and GNU tar and gzip."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.containers import ContainerOptions, compression_of, member_problem
from chunkline.readers import ReadOptions, decode_file
from chunkline.records import Document, Rejected

JSONL = b'{"id": "t1", "text": "The dock charges the robot."}\n{"id": "t2", "text": "Reset the arm."}\n'
LOW = ReadOptions(containers=ContainerOptions(max_unpacked_bytes=2_000_000, max_ratio=50,
                                              max_members=100, max_depth=3))


def decode(name: str, data: bytes, options: ReadOptions = LOW) -> tuple[list[Document], list[Rejected]]:
    records = decode_file(f"/corpus/{name}", data, "/corpus", options)
    return ([r for r in records if isinstance(r, Document)],
            [r for r in records if isinstance(r, Rejected)])


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def tarred(members: dict[str, bytes], mode: str = "w") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


COMPRESSORS = {
    ".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
    ".zst": lambda data: zstandard.ZstdCompressor().compress(data),
}


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_a_compressed_jsonl_reads_as_the_plain_file(suffix) -> None:
    plain, _ = decode("tickets.jsonl", JSONL)
    packed, rejected = decode("tickets.jsonl" + suffix, COMPRESSORS[suffix](JSONL))
    assert not rejected
    assert [(d.doc_id, d.text, d.position, d.format) for d in packed] == \
        [(d.doc_id, d.text, d.position, d.format) for d in plain]
    # Known by its bytes alone too: an export that lost its suffix.
    assert compression_of("export.bin", COMPRESSORS[suffix](JSONL)[:16]) == \
        {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd"}[suffix]


def test_archive_members_are_documents_under_the_archive_id() -> None:
    data = zipped({"docs/arm.md": b"# Arm\n\nMount the arm level.\n", "logo.bmp": b"BM\x00\x00",
                   "tickets.jsonl.gz": gzip.compress(JSONL), "empty.txt": b""})
    docs, rejected = decode("share.zip", data)
    assert {d.doc_id: d.uri for d in docs} == {
        "share.zip//docs/arm.md": "/corpus/share.zip//docs/arm.md",
        "t1": "/corpus/share.zip//tickets.jsonl.gz", "t2": "/corpus/share.zip//tickets.jsonl.gz"}
    assert {r.doc_id: r.reason for r in rejected} == {
        "share.zip//logo.bmp": "unsupported file type .bmp", "share.zip//empty.txt": "empty document"}
    assert next(d for d in docs if d.doc_id.endswith("arm.md")).format == "markdown"


def test_gnu_tar_and_gzip_write_what_is_read(tmp_path: Path) -> None:
    source = tmp_path / "share"
    (source / "manuals").mkdir(parents=True)
    (source / "manuals" / "dock.md").write_text("# Dock\n\nPlace the dock on a wall.\n")
    (source / "notes.txt").write_text("Charge overnight.\n")
    subprocess.run(["tar", "-czf", str(tmp_path / "share.tgz"), "-C", str(source), "."], check=True)
    subprocess.run(["gzip", "-k", str(source / "notes.txt")], check=True)
    docs, rejected = decode("share.tgz", (tmp_path / "share.tgz").read_bytes())
    assert not rejected
    assert sorted(d.doc_id for d in docs) == ["share.tgz//./manuals/dock.md", "share.tgz//./notes.txt"]
    docs, rejected = decode("notes.txt.gz", (source / "notes.txt.gz").read_bytes())
    assert [(d.doc_id, d.text) for d in docs] == [("notes.txt.gz", "Charge overnight.\n")]


def test_a_gzip_bomb_is_refused_at_either_limit() -> None:
    bomb = gzip.compress(b"\0" * 100 * 2_000_000)  # 100x the unpacked limit, ~1000:1
    docs, rejected = decode("dump.jsonl.gz", bomb)
    assert not docs and len(rejected) == 1 and "max_unpacked_bytes (2,000,000" in rejected[0].reason
    ratio_only = ReadOptions(containers=ContainerOptions(max_unpacked_bytes=None, max_ratio=50))
    docs, rejected = decode("dump.jsonl.gz", bomb, ratio_only)
    assert not docs and len(rejected) == 1 and "a decompression bomb" in rejected[0].reason


def test_the_unpacked_limit_holds_across_members() -> None:
    # Random bytes do not compress: each member is under the ratio, together over the limit.
    import random
    rng = random.Random(3)
    member = "".join(rng.choice("abcdefghij klmnop\n") for _ in range(600_000)).encode()
    docs, rejected = decode("big.zip", zipped({f"part{i}.txt": member for i in range(5)}))
    assert len(docs) == 3 and "max_unpacked_bytes" in rejected[-1].reason
    assert rejected[-1].doc_id == "big.zip"


def test_too_many_members_refuse_the_archive() -> None:
    docs, rejected = decode("many.zip", zipped({f"n{i}.txt": b"x" for i in range(101)}))
    assert not docs and [r.reason for r in rejected] == [
        "archive has 101 members, more than input.containers.max_members (100)"]


def test_nesting_past_the_depth_is_refused() -> None:
    data = b"# Deep\n\nbottom\n"
    name = "deep.md"
    for level in range(50):
        data, name = zipped({name: data}), f"level{level}.zip"
    docs, rejected = decode(name, data)
    assert not docs and len(rejected) == 1 and "max_depth (3)" in rejected[0].reason
    shallow, none = decode("two.zip", zipped({"one.zip": zipped({"deep.md": b"# Deep\n\nbottom\n"})}))
    assert not none and [d.doc_id for d in shallow] == ["two.zip//one.zip//deep.md"]


def test_escaping_and_link_members_are_refused_and_the_rest_kept() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in {"../../etc/passwd": b"root:x:0:0\n", "/abs.md": b"# Abs\n\nx\n",
                           "ok.md": b"# Ok\n\nkept\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("link.md")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        archive.addfile(link)
    docs, rejected = decode("mixed.tar", buffer.getvalue())
    assert [d.doc_id for d in docs] == ["mixed.tar//ok.md"]
    reasons = {r.doc_id: r.reason for r in rejected}
    assert "climbs out" in reasons["mixed.tar//../../etc/passwd"]
    assert "absolute" in reasons["mixed.tar///abs.md"]
    assert reasons["mixed.tar//link.md"] == "link member: not followed"


def test_damaged_containers_are_rejected_with_the_reason() -> None:
    good = gzip.compress(JSONL * 50)
    _, cut = decode("dump.jsonl.gz", good[: len(good) // 2])
    assert [r.reason for r in cut] == ["truncated gzip data"]
    _, fake = decode("dump.jsonl.gz", b"{\"id\": 1}\n")
    assert "not valid gzip data" in fake[0].reason
    _, broken = decode("share.zip", b"PK\x03\x04 not really")
    assert "not a readable zip archive" in broken[0].reason
    # A zip member whose bytes were damaged: its CRC fails; the other member is kept.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("a.md", b"# A\n\n" + b"alpha " * 200)
        archive.writestr("b.md", b"# B\n\nbeta\n")
    data = bytearray(buffer.getvalue())
    at = data.find(b"alpha alpha") + 100
    data[at:at + 8] = b"\xff" * 8
    docs, rejected = decode("share.zip", bytes(data))
    assert [d.doc_id for d in docs] == ["share.zip//b.md"] and "unreadable zip member" in rejected[0].reason


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "..", ".", "b", "", "c.md"]), min_size=1, max_size=6))
def test_a_refused_member_path_is_exactly_one_that_leaves_the_root(parts) -> None:
    path = "/".join(parts)
    depth, escapes = 0, False
    for part in parts:
        depth = depth - 1 if part == ".." else depth + (part not in ("", "."))
        escapes = escapes or depth < 0
    assert (member_problem(path) is not None) == (escapes or path.startswith("/"))
