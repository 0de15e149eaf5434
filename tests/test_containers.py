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
import warnings
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
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


def test_an_archives_time_is_not_its_members_but_a_compressed_files_is_its_own() -> None:
    """An archive rewritten for one edited member must not move every member's row: the
    archive's modification time is not recorded on its members (their own size is)."""
    member = b"# Arm\n\nMount the arm level.\n"
    records = decode_file("/corpus/share.zip", zipped({"arm.md": member}), "/corpus", LOW, 86_400.0)
    [doc] = [r for r in records if isinstance(r, Document)]
    assert dict(doc.all_metadata()) == {"source_uri": '"/corpus/share.zip//arm.md"',
                                        "file_size": str(len(member))}
    [single] = decode_file("/corpus/arm.md.gz", gzip.compress(member), "/corpus", LOW, 86_400.0)
    assert dict(single.all_metadata())["file_modified"] == '"1970-01-02T00:00:00Z"'


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


@pytest.mark.slow
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
        hard = tarfile.TarInfo("hard.md")
        hard.type, hard.linkname = tarfile.LNKTYPE, "ok.md"
        archive.addfile(hard)
    docs, rejected = decode("mixed.tar", buffer.getvalue())
    assert [d.doc_id for d in docs] == ["mixed.tar//ok.md"]
    reasons = {r.doc_id: r.reason for r in rejected}
    assert "climbs out" in reasons["mixed.tar//../../etc/passwd"]
    assert "absolute" in reasons["mixed.tar///abs.md"]
    assert reasons["mixed.tar//link.md"] == "symbolic link in archive: not followed"
    assert reasons["mixed.tar//hard.md"] == "hard link in archive: not followed"


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
@given(st.lists(st.sampled_from(["a", "..", ".", "b", "", "c.md"]), min_size=1, max_size=6),
       st.sampled_from(["/", "\\"]))
def test_a_refused_member_path_is_exactly_one_that_leaves_the_root_or_holds_the_separator(
        parts, separator) -> None:
    """A backslash separates as a slash does (Windows extractors, unzip for DOS archives); an
    empty part (``a//b``) would read as a nested archive's member in an id."""
    path = separator.join(parts)
    depth, escapes = 0, False
    for part in parts:
        depth = depth - 1 if part == ".." else depth + (part not in ("", "."))
        escapes = escapes or depth < 0
    absolute = path.startswith(separator)
    assert (member_problem(path) is not None) == (escapes or absolute or "//" in path)


# --- Issue 48: every record keeps its place; archives smaller ones ---------------------------

BAD_LINES = JSONL + b'{broken\n{"id": "t3"}\n\n{"id": "t1", "text": "Again."}\n'


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_a_compressed_dumps_rejected_lines_keep_their_line_numbers(suffix) -> None:
    """dump.jsonl.gz's bad lines were all rejected as ``dump.jsonl.gz`` (the locator went by the
    last extension): one id for every line, renamed #rejected-N downstream."""
    _, plain = decode("dump.jsonl", BAD_LINES)
    _, packed = decode("dump.jsonl" + suffix, COMPRESSORS[suffix](BAD_LINES))
    assert [(r.doc_id, r.reason) for r in packed] == [
        (r.doc_id.replace("dump.jsonl", "dump.jsonl" + suffix), r.reason) for r in plain]
    assert [r.doc_id for r in packed] == [f"dump.jsonl{suffix}#L3", f"dump.jsonl{suffix}#L4"]


def test_records_inside_archives_keep_their_places() -> None:
    table = io.BytesIO()
    pq.write_table(pa.table({"id": ["p1", None], "text": ["Row text.", "No id."]}), table)
    data = zipped({"t.jsonl.xz": lzma.compress(BAD_LINES), "t.jsonl": BAD_LINES,
                   "rows.parquet": table.getvalue(), "rows.parquet.zst":
                   zstandard.ZstdCompressor().compress(table.getvalue())})
    docs, rejected = decode("share.zip", data)
    assert {r.doc_id for r in rejected} == {
        "share.zip//t.jsonl.xz#L3", "share.zip//t.jsonl.xz#L4", "share.zip//t.jsonl#L3",
        "share.zip//t.jsonl#L4", "share.zip//rows.parquet#row1", "share.zip//rows.parquet.zst#row1"}
    assert sorted(d.doc_id for d in docs) == ["p1", "p1", "t1", "t1", "t1", "t1", "t2", "t2"]


JSON_LINES = st.sampled_from([
    '{"id": "a", "text": "Alpha."}', '{"id": "b", "text": "Beta."}', '{"id": 7, "text": "Seven."}',
    '{broken', '[1, 2]', '{"id": "c"}', '{"id": "", "text": "x"}', "", "   ",
    '{"id": "d", "text": "   "}', '{"id": "e", "text": "Caf\u00e9."}'])


@settings(max_examples=60, deadline=None)
@given(st.lists(JSON_LINES, max_size=12), st.sampled_from(sorted(COMPRESSORS)),
       st.sampled_from(["dump.jsonl", "share.zip//dump.jsonl"]))
def test_a_compressed_record_file_gives_the_plain_files_ids_plus_its_suffix(
        lines, suffix, name) -> None:
    data = "\n".join(lines).encode()
    member = name.rsplit("//", 1)[-1]

    def ids(file_name: str, content: bytes) -> list[tuple[str, str, int]]:
        if "//" in name:
            content, file_name = zipped({file_name: content}), "share.zip"
        records = decode_file(f"/corpus/{file_name}", content, "/corpus", LOW)
        return [(r.doc_id, r.reason if isinstance(r, Rejected) else r.text,
                 r.position if isinstance(r, Document) else 0) for r in records]

    plain = ids(member, data)
    packed = ids(member + suffix, COMPRESSORS[suffix](data))
    renamed = [(doc_id.replace(member, member + suffix) if doc_id.startswith(name) else doc_id,
                detail, position) for doc_id, detail, position in plain]
    if not data:
        # A compressed file of no bytes is refused as such, the plain file as an empty document.
        assert [detail for _, detail, _ in packed] == ["empty compressed file (it unpacks to no bytes)"]
    else:
        assert packed == renamed


def raw_zip(entries: list[tuple[zipfile.ZipInfo, bytes]]) -> bytes:
    """A zip written entry by entry as given: repeated names and link modes included."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a repeated name: wanted here
        with zipfile.ZipFile(buffer, "w") as archive:
            for info, data in entries:
                archive.writestr(info, data)
    return buffer.getvalue()


def unix_member(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system, info.external_attr = 3, mode << 16  # Info-ZIP's Unix mode
    return info


@pytest.mark.parametrize("name", ["new\nline.md", "\x1b[31mred.md", "tab\there.md", "csi\x9b2J.md",
                                  "del\x7f.md", "dir\r/ok.md"])
@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_a_member_name_with_a_control_character_is_rejected_under_a_shown_name(name, kind) -> None:
    data = (zipped if kind == "zip" else tarred)({name: b"# Fake\n\nspoofed\n", "ok.md": b"# Ok\n\nkept\n"})
    docs, rejected = decode(f"share.{kind}", data)
    assert [d.doc_id for d in docs] == [f"share.{kind}//ok.md"]
    [row] = rejected
    shown = "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 else c for c in name)
    assert row.doc_id == f"share.{kind}//{shown}" and row.uri == f"/corpus/share.{kind}//{shown}"
    assert row.reason.startswith("file name contains a control character (U+")


@settings(max_examples=80, deadline=None)
@given(st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=12))
def test_no_member_id_holds_a_control_character(stem) -> None:
    for kind in ("zip", "tar"):
        data = (zipped if kind == "zip" else tarred)({f"{stem}.md": b"# T\n\ntext\n",
                                                      f"d{stem}/x.jsonl": b'{"id": "i", "text": "t"}\n'})
        docs, rejected = decode(f"share.{kind}", data)
        for record in [*docs, *rejected]:
            assert not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in record.doc_id + record.uri)


def test_a_zip_symlink_member_is_rejected_never_followed() -> None:
    data = raw_zip([(unix_member("link.md", 0o120777), b"/etc/passwd"),
                    (unix_member("fifo.md", 0o010644), b"# F\n\nx\n"),
                    (unix_member("ok.md", 0o100644), b"# Ok\n\nkept\n")])
    docs, rejected = decode("share.zip", data)
    assert [d.doc_id for d in docs] == ["share.zip//ok.md"]
    assert {r.doc_id: r.reason for r in rejected} == {
        "share.zip//link.md": "symbolic link in archive: not followed",
        "share.zip//fifo.md": "not a regular file (device, fifo)"}


def test_an_archive_without_members_is_a_rejected_row() -> None:
    only_dirs = raw_zip([(zipfile.ZipInfo("docs/"), b"")])
    empty_tar = tarred({})
    nested = zipped({"inner.zip": zipped({}), "ok.md": b"# Ok\n\nkept\n"})
    cases = {"empty.zip": zipped({}), "dirs.zip": only_dirs, "empty.tar": empty_tar,
             "empty.tgz": gzip.compress(empty_tar)}
    for name, data in cases.items():
        docs, rejected = decode(name, data)
        assert not docs and [(r.doc_id, r.reason) for r in rejected] == [
            (name, "archive holds no members" + (" (only directories)" if name == "dirs.zip" else ""))]
    docs, rejected = decode("nested.zip", nested)
    assert [(r.doc_id, r.reason) for r in rejected] == [("nested.zip//inner.zip", "archive holds no members")]


@pytest.mark.parametrize("name", ["empty.gz", "notes.md.gz", "dump.jsonl.xz", "dump.jsonl.zst", "a.bz2"])
def test_a_compressed_file_of_no_bytes_says_so(name) -> None:
    compress = COMPRESSORS["." + name.rsplit(".", 1)[1]]
    docs, rejected = decode(name, compress(b""))
    assert not docs and [(r.doc_id, r.reason) for r in rejected] == [
        (name, "empty compressed file (it unpacks to no bytes)")]
    # A member: a file of no bytes at all, as an archive may hold one.
    docs, rejected = decode("share.zip", zipped({name: b""}))
    assert [(r.doc_id, r.reason) for r in rejected] == [
        (f"share.zip//{name}", "empty compressed file (it unpacks to no bytes)")]


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_member_names_that_would_mislead_are_refused(kind) -> None:
    members = {"inner.zip//nested.md": b"# Fake\n\nnot nested\n", "..\\..\\win.md": b"# W\n\nx\n",
               "C:\\Windows\\x.md": b"# C\n\nx\n", "docs\\ok.md": b"# Ok\n\nkept\n"}
    docs, rejected = decode(f"share.{kind}", (zipped if kind == "zip" else tarred)(members))
    assert [d.doc_id for d in docs] == [f"share.{kind}//docs\\ok.md"]
    reasons = {r.doc_id.split("//", 1)[1]: r.reason for r in rejected}
    assert "holds '//', which in an id marks a member of a nested archive" in reasons["inner.zip//nested.md"]
    assert "climbs out of the archive" in reasons["..\\..\\win.md"]
    assert "is absolute" in reasons["C:\\Windows\\x.md"]


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_a_repeated_member_name_reads_the_last_copy_as_extractors_do(kind) -> None:
    copies = [("a.md", b"# A\n\nfirst copy\n"), ("b.md", b"# B\n\nonly\n"),
              ("a.md", b"# A\n\nsecond copy\n"), ("a.md", b"# A\n\nlast copy\n")]
    if kind == "zip":
        data = raw_zip([(zipfile.ZipInfo(name), body) for name, body in copies])
    else:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for name, body in copies:
                info = tarfile.TarInfo(name)
                info.size = len(body)
                archive.addfile(info, io.BytesIO(body))
        data = buffer.getvalue()
    docs, rejected = decode(f"share.{kind}", data)
    assert {d.doc_id: d.text for d in docs} == {f"share.{kind}//a.md": "# A\n\nlast copy\n",
                                                f"share.{kind}//b.md": "# B\n\nonly\n"}
    assert [(r.doc_id, r.reason) for r in rejected] == [
        (f"share.{kind}//a.md", f"repeated member name: entry {n} of the archive, replaced by entry 4 "
                                f"of the same name (as tar and unzip, the last copy is read)")
        for n in (1, 3)]
