"""ReadDocuments on a real directory: exact documents, exact rejections, counters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to

from chunkline.readers import ReadOptions
from chunkline.records import Document, Rejected
from chunkline.walk import walk
from chunkline.transforms.match import BeamGlob
from chunkline.transforms.read import ReadDocuments

PAGE = "<html><head><title>T</title></head><body><h1>Page</h1><p>Hello &amp; bye.</p></body></html>"
LIMIT = 200


def pipeline() -> BeamTestPipeline:
    # In-process runner: the default DirectRunner of Beam 2.77 would first try to fetch Prism.
    return BeamTestPipeline(runner=FnApiRunner())


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    (tmp_path / "guide.md").write_text("# Guide\n\nHello.\n", encoding="utf-8")
    (tmp_path / "crlf.txt").write_bytes(b"line one\r\nline two\r\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "page.html").write_text(PAGE, encoding="utf-8")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "records.jsonl").write_text(
        "\n".join([
            json.dumps({"id": "a", "text": "Alpha.", "metadata": {"lang": "en"}}),
            json.dumps({"id": 2, "text": "Two."}),
            '{"id": "broken", "text": ',
            json.dumps({"id": "c", "body": "no text field"}),
            "",
        ]),
        encoding="utf-8",
    )
    pq.write_table(
        pa.table({"id": ["p1", "p2"], "text": ["Row one.", "Row two."]}),
        tmp_path / "data" / "table.parquet",
    )
    (tmp_path / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    (tmp_path / "empty.md").write_bytes(b"")
    (tmp_path / "big.txt").write_text("x" * (LIMIT + 1), encoding="utf-8")
    (tmp_path / "manual.pdf").write_bytes(b"%PDF-1.7\n")
    return tmp_path


def rejections_are(expected: dict[str, str]) -> Callable[[list[Rejected]], None]:
    """Matcher: exactly these doc ids are rejected, each reason containing its substring."""

    def check(actual: list[Rejected]) -> None:
        found = {r.doc_id: r.reason for r in actual}
        if len(found) != len(actual) or set(found) != set(expected):
            raise BeamAssertException(f"rejected ids {sorted(found)} != {sorted(expected)}")
        for doc_id, part in expected.items():
            if part not in found[doc_id]:
                raise BeamAssertException(f"{doc_id}: {found[doc_id]!r} lacks {part!r}")

    return check


def counter(result, name: str) -> int:
    query = result.metrics().query(MetricsFilter().with_namespace("read").with_name(name))
    return sum(c.committed for c in query["counters"])


def test_read_directory(corpus: Path) -> None:
    root = str(corpus)
    p = pipeline()
    outputs = p | "Read" >> ReadDocuments(f"{root}/**", ReadOptions(max_document_bytes=LIMIT))
    assert_that(outputs.documents, equal_to([
        Document("guide.md", f"{root}/guide.md", "# Guide\n\nHello.\n"),
        Document("crlf.txt", f"{root}/crlf.txt", "line one\r\nline two\r\n"),
        Document("site/page.html", f"{root}/site/page.html", "# Page\n\nHello & bye.",
                 (("title", '"Page"'),)),  # trafilatura takes the h1 for the title
        Document("a", f"{root}/data/records.jsonl", "Alpha.", (("lang", '"en"'),)),
        Document("2", f"{root}/data/records.jsonl", "Two."),
        Document("p1", f"{root}/data/table.parquet", "Row one."),
        Document("p2", f"{root}/data/table.parquet", "Row two."),
    ]), label="Documents")
    assert_that(outputs.rejected, rejections_are({
        "data/records.jsonl#L3": "line 3: not valid JSON",
        "data/records.jsonl#L4": "line 4: no 'text' field",
        "binary.txt": "binary file",
        "latin1.txt": "not valid UTF-8 at byte 3",
        "empty.md": "empty document",
        "big.txt": f"document is {LIMIT + 1} bytes, over the limit of {LIMIT}",
        "manual.pdf": "truncated PDF (no %%EOF marker at its end)",
    }), label="Rejected")
    assert_that(outputs.rejected | beam.Map(lambda r: r.uri), equal_to([
        f"{root}/data/records.jsonl", f"{root}/data/records.jsonl", f"{root}/binary.txt",
        f"{root}/latin1.txt", f"{root}/empty.md", f"{root}/big.txt", f"{root}/manual.pdf",
    ]), label="RejectedUris")
    result = p.run()
    result.wait_until_finish()
    assert (counter(result, "documents"), counter(result, "rejected")) == (7, 7)


def test_several_patterns_each_with_its_own_root(corpus: Path) -> None:
    root = str(corpus)
    with pipeline() as p:
        outputs = p | ReadDocuments([f"{root}/*.md", f"{root}/site/*.html", f"{root}/nothing/*"])
        ids = outputs.documents | beam.Map(lambda d: d.doc_id)
        assert_that(ids, equal_to(["guide.md", "page.html"]), label="Ids")
        assert_that(outputs.rejected, rejections_are({"empty.md": "empty document"}),
                    label="Rejected")


def test_directory_named_as_a_file_is_rejected_not_a_failed_job(tmp_path: Path) -> None:
    # A directory named like a document and matched by its exact path: never opened.
    (tmp_path / "folder.md").mkdir()
    (tmp_path / "ok.md").write_text("fine", encoding="utf-8")
    with pipeline() as p:
        outputs = (
            p | "Dir" >> ReadDocuments([str(tmp_path / "folder.md"), str(tmp_path / "ok.md")])
        )
        assert_that(outputs.documents | beam.Map(lambda d: d.doc_id), equal_to(["ok.md"]),
                    label="Ids")
        assert_that(outputs.rejected,
                    rejections_are({"folder.md": "not a regular file (a directory"}),
                    label="Rejected")


def test_pattern_matching_nothing_reads_nothing(tmp_path: Path) -> None:
    with pipeline() as p:
        outputs = p | ReadDocuments(str(tmp_path / "*.md"), ReadOptions())
        assert_that(outputs.documents, equal_to([]), label="Documents")
        assert_that(outputs.rejected, equal_to([]), label="Rejected")


@pytest.mark.parametrize("patterns", ["", [], [""]])
def test_patterns_are_required(patterns) -> None:
    with pytest.raises(ValueError):
        ReadDocuments(patterns, ReadOptions())


# --- Which files a pattern matches: what Beam's LocalFileSystem.match matched -----------------

GLOB_TREE = (
    "a.md", "b.txt", ".hidden.md", "UPPER.MD", "s b/g.md", "odd[1].md", "back\\slash.md",
    "sub/c.md", "sub/deeper/d.md", "sub/deeper/e.txt", "sub/deeper/.env.txt",
    ".dir/f.md", "x/notes/y.md", "x/notes/deep/z.md", "subway/w.md",
)
GLOB_PATTERNS = (
    "**", "*", "*.md", "**/*.md", "**.md", "*/*.md", "*/notes/*.md", "sub/**", "sub/",
    "sub*/**", "su?/*.md", "[ab].*", "?.md", ".*", "**/.*", "s b/*", "sub/deeper/d.md",
    "sub/*/*.txt", "x/**/*.md", "nothing/**",
)


@pytest.fixture(scope="module")
def glob_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("glob") / "corpus"
    for name in GLOB_TREE:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"text of {name}", encoding="utf-8")
    return root


def beam_matched(pattern: str) -> list[str]:
    """The paths Beam's own FileSystems.match (os.walk + translate_pattern) gives."""
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


@pytest.mark.parametrize("relative", GLOB_PATTERNS + ("../corp*/*.md",))
def test_local_patterns_match_what_beam_matched(glob_tree: Path, relative: str) -> None:
    pattern = f"{glob_tree}/{relative}"
    expected = beam_matched(pattern)
    if relative != "nothing/**":
        assert expected, f"{relative} should match something in the tree"
    with pipeline() as p:
        outputs = p | ReadDocuments(pattern)
        uris = (
            (outputs.documents | "DocUris" >> beam.Map(lambda d: d.uri),
             outputs.rejected | "RejectedUris" >> beam.Map(lambda r: r.uri))
            | beam.Flatten()
        )
        assert_that(uris, equal_to(expected))


def test_ids_are_relative_to_the_input_root_as_before(glob_tree: Path) -> None:
    with pipeline() as p:
        outputs = p | ReadDocuments(f"{glob_tree}/x/**")
        assert_that(outputs.documents | beam.Map(lambda d: (d.doc_id, d.text)), equal_to([
            ("notes/y.md", "text of x/notes/y.md"),
            ("notes/deep/z.md", "text of x/notes/deep/z.md"),
        ]))


def test_walk_order_is_fixed_by_names(glob_tree: Path) -> None:
    root = str(glob_tree)
    pattern = f"{root}/**"
    first = [item.path for item in walk(root, BeamGlob(pattern, root))]
    again = [item.path for item in walk(root, BeamGlob(pattern, root))]
    assert first == again
    assert sorted(first) == beam_matched(pattern)
    # A directory's files (by name) before its subdirectories (by name, depth first).
    assert [p[len(root) + 1:] for p in first][:6] == [
        ".hidden.md", "UPPER.MD", "a.md", "b.txt", "back\\slash.md", "odd[1].md"]


@pytest.mark.slow
def test_exclude_applies_to_gcs_patterns(tmp_path: Path) -> None:
    from tests.gcs_emulator import storage_emulator, upload_tree

    (tmp_path / "doc.md").write_text("input", encoding="utf-8")
    (tmp_path / "out" / "run1").mkdir(parents=True)
    (tmp_path / "out" / "run1" / "chunks.md").write_text("an output", encoding="utf-8")
    (tmp_path / "outline.md").write_text("a sibling named like it", encoding="utf-8")
    bucket = "chunkline-read-exclude"
    with storage_emulator(bucket):
        upload_tree(tmp_path, f"gs://{bucket}/corpus")
        p = pipeline()
        outputs = p | ReadDocuments(f"gs://{bucket}/corpus/**",
                                    exclude=[f"gs://{bucket}/corpus/out/"])
        assert_that(outputs.documents | beam.Map(lambda d: d.doc_id),
                    equal_to(["doc.md", "outline.md"]))
        result = p.run()
        result.wait_until_finish()
    assert counter(result, "excluded") == 1



def _sliced_export(path: Path, groups: int = 12, rows_per_group: int = 50) -> list[tuple]:
    """A Parquet export in many row groups, one row with a null text (a rejected row); the
    (id, position, text) of its documents."""
    ids = [f"R-{i:05d}" for i in range(groups * rows_per_group)]
    texts = [None if i == 333 else f"Record {i}: the dock at bay {i % 17} needs a reset."
             for i in range(len(ids))]
    pq.write_table(pa.table({"id": ids, "text": texts}), path, row_group_size=rows_per_group)
    return [(doc_id, row, text) for row, (doc_id, text) in enumerate(zip(ids, texts)) if text is not None]


@pytest.mark.parametrize("slice_bytes, sliced", [(10**9, False), (2_000, True)])
def test_a_big_parquet_file_is_read_in_slices_equal_to_the_whole(tmp_path: Path, slice_bytes,
                                                                 sliced) -> None:
    from chunkline.readers import ParquetOptions

    expected = _sliced_export(tmp_path / "export.parquet")
    p = pipeline()
    outputs = p | "Read" >> ReadDocuments(
        f"{tmp_path}/**", ReadOptions(parquet=ParquetOptions(slice_bytes=slice_bytes)))
    assert_that(outputs.documents | beam.Map(lambda d: (d.doc_id, d.position, d.text)),
                equal_to(expected), label="Documents")
    assert_that(outputs.rejected | beam.Map(lambda r: (r.doc_id, r.reason)), equal_to(
        [("export.parquet#row333", "row 333: 'text' is null, not a string")]), label="Rejected")
    result = p.run()
    result.wait_until_finish()
    assert (counter(result, "slices") >= 6) is sliced


@pytest.mark.slow
@pytest.mark.parametrize("slice_bytes, sliced", [(10**9, False), (3_000, True)])
def test_a_big_jsonl_file_is_read_in_slices_equal_to_the_whole(tmp_path: Path, slice_bytes,
                                                               sliced) -> None:
    from chunkline.readers import JsonlOptions

    lines = [json.dumps({"id": f"J-{i:04d}", "text": f"Line {i}: reset the charger at dock {i % 9}."})
             if i % 97 else ("not json" if i % 2 else "") for i in range(1, 600)]
    (tmp_path / "export.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = [(f"J-{i:04d}", i) for i in range(1, 600) if i % 97]
    broken = [(f"export.jsonl#L{i}", f"line {i}: not valid JSON (Expecting value, column 1)")
              for i in range(1, 600) if not i % 97 and i % 2]
    p = pipeline()
    outputs = p | "Read" >> ReadDocuments(
        f"{tmp_path}/**", ReadOptions(jsonl=JsonlOptions(slice_bytes=slice_bytes)))
    assert_that(outputs.documents | beam.Map(lambda d: (d.doc_id, d.position)), equal_to(expected),
                label="Documents")
    assert_that(outputs.rejected | beam.Map(lambda r: (r.doc_id, r.reason)), equal_to(broken),
                label="Rejected")
    result = p.run()
    result.wait_until_finish()
    assert (counter(result, "slices") >= 10) is sliced
