"""No credential survives anywhere under OUTPUT, nor in what the job prints: seeded in an OCR'd
PNG, a scanned PDF page, a JSONL record (text and metadata) and a Word file, run with OCR on and
``input.trust_file_metadata`` on (the read memo), in ``redact`` and in ``reject`` mode, twice
(the second a rerun that recalls pages and files). Every file under OUTPUT is read as stored,
unpacked (zstd, gzip) and, for Parquet, decoded column by column: the OCR cache and the memo
segments are files like the others.

A secret is looked for as every 12-character window of its random part, so a reading that
differs in a character or two (OCR) is still caught."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from tests.helpers import run_rows
from tests.ocr_pages import render_page, scanned_pdf
from tests.readers.helpers import docx_bytes

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

# Random parts only: what must never be stored (the fixed prefixes name the kind, and may stay).
PNG_TOKEN = "R7xKq2Lm9VtY4bNc8WzP3sHd6FjA1gUe5QoT"  # ghp_ + 36
PDF_TOKEN = "M3nB8vC2xZ7lK4jH9gF6dS1aP5oI0uY2tR8e"  # ghp_ + 36
AWS_ID, AWS_SECRET = "Q4VN7TXL2PRM8KZB", "9vT2kLmQ8xR4wZpN7cB3yH6fJ1sD5gA0eU2iO8tK"
METADATA_TOKEN = "Wd5Fq8Zr2Tx7Cv4Bn9Mk3Lp6Hs1Jg0Ay5Eu2Io"  # ghp_ + 36, in a record's metadata
SLACK = "284736193047-1947201938475-Qm7Rt2Vx9Kp4Lw8Zn3Bc6Hd"  # xoxb-
SECRETS = (PNG_TOKEN, PDF_TOKEN, AWS_ID, AWS_SECRET, METADATA_TOKEN, SLACK)
WINDOW = 12


def windows(secret: str) -> set[bytes]:
    return {secret[i:i + WINDOW].encode() for i in range(len(secret) - WINDOW + 1)}


NEEDLES = set().union(*(windows(s) for s in SECRETS))


def write_corpus(root: Path) -> None:
    root.mkdir(parents=True)
    prose = "Deploy notes for the dock fleet, kept with the calibration steps of the arm."
    page, _, _ = render_page(f"{prose} GITHUB_TOKEN=ghp_{PNG_TOKEN} for the nightly upload.",
                             font="DejaVuSansMono", points=12, max_lines=6)
    buffer = io.BytesIO()
    page.save(buffer, format="PNG")
    (root / "whiteboard.png").write_bytes(buffer.getvalue())
    scan, _, _ = render_page(f"{prose} The mirror job reads ghp_{PDF_TOKEN} from its config.",
                             font="DejaVuSansMono", points=12, max_lines=6)
    (root / "scanned.pdf").write_bytes(scanned_pdf([scan]))
    records = [
        {"id": "T-1", "text": f"{prose}\n\naws_access_key_id = AKIA{AWS_ID}\n"
                              f"aws_secret_access_key = {AWS_SECRET}\n"},
        {"id": "T-2", "text": f"{prose} Nothing secret here.",
         "metadata": {"note": f"rotate ghp_{METADATA_TOKEN} soon"}},
        {"id": "T-3", "text": "The lidar map of aisle four was updated after the shelf move."},
    ]
    (root / "tickets.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    def build(document) -> None:
        document.add_heading("Chat bot", level=1)
        document.add_paragraph(prose)
        document.add_paragraph(f"slack_bot = xoxb-{SLACK}")

    (root / "bot.docx").write_bytes(docx_bytes(build))
    (root / "plain.md").write_text("# Plain\n\nThe charger at dock two needs a firmware update.\n")


def readings(path: Path) -> list[bytes]:
    """The file's bytes, unpacked where they are zstd or gzip, and a Parquet file's every value."""
    data = path.read_bytes()
    found = [data]
    if data.startswith(b"\x28\xb5\x2f\xfd"):
        found.append(zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read())
    if data.startswith(b"\x1f\x8b"):
        found.append(gzip.decompress(data))
    if data.startswith(b"PAR1") and data.endswith(b"PAR1"):
        table = pq.read_table(path)
        found.append(json.dumps(table.to_pylist(), default=repr).encode())
    return found


def leaks(output: Path, printed: str) -> list[str]:
    """Every file (and the process output) holding a window of a seeded secret."""
    found = []
    for path in sorted(p for p in output.rglob("*") if p.is_file()):
        if any(needle in blob for blob in readings(path) for needle in NEEDLES):
            found.append(str(path.relative_to(output)))
    if any(needle.decode() in printed for needle in NEEDLES):
        found.append("(process output)")
    return found


def chunkline_run(corpus: Path, output: Path, mode: str, trust: bool = True) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "chunkline.pipeline.cli", "run", "--config", str(ROOT / "configs" / "local.yaml"),
         "--input", f"{corpus}/**", "--output", str(output), "--set", "embed=null",
         "--set", f"input.trust_file_metadata={str(trust).lower()}", "--set", f"secrets.mode={mode}",
         "--set", "output.max_shrink=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def manifest_of(output: Path) -> dict:
    return json.loads((output / (output / "LATEST").read_text().strip() / "manifest.json").read_text())


@pytest.mark.parametrize("mode", ["redact", "reject"])
def test_no_secret_byte_anywhere_under_output_or_in_the_output_printed(mode, tmp_path) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    write_corpus(corpus)
    first = chunkline_run(corpus, output, mode)
    assert leaks(output, first) == []
    second = chunkline_run(corpus, output, mode)  # files recalled from the read memo, not read
    assert leaks(output, second) == []
    assert manifest_of(output)["memo"]["read"]["recalled"] > 0
    third = chunkline_run(corpus, output, mode, trust=False)  # every file read, pages from the cache
    assert leaks(output, third) == []
    manifest = manifest_of(output)
    # Redacted pages are kept, masked; a page whose document is rejected is never kept.
    assert (manifest["ocr"]["cached"], manifest["ocr"]["read"]) == ((2, 0) if mode == "redact" else (0, 2))
    documents = {row["doc_id"]: row for row in run_rows(output / manifest["run_id"], "documents")}
    # The rerun's tables are the first run's: the secrets' documents redacted or rejected alike.
    kept = {d for d, row in documents.items() if row["status"] == "kept"}
    assert {"plain.md", "T-3"} <= kept
    if mode == "redact":
        assert {"whiteboard.png", "scanned.pdf", "T-1", "T-2", "bot.docx"} <= kept
        assert "[REDACTED" in documents["whiteboard.png"]["text"]
        assert "[REDACTED" in documents["scanned.pdf"]["text"]
