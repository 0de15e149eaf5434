"""What a removed document leaves on disk. A document holding credentials, indexed under
``secrets.mode: allow`` (with ``input.trust_file_metadata``, so its text is in the memo too),
then rejected once the mode is ``reject``: after that run and ``chunkline gc`` no byte of it is
anywhere under the output (tables, memo, Iceberg manifests and delete files, reports). A plain
document, and the same one indexed again, deleted from the corpus: an ordinary rerun and gc
leave their dead rows in files the published run still references (position deletes), and
``chunkline run --purge`` erases them. Every file is read as its own format reads it: Parquet
row by row (binary cells as bytes), Avro (Iceberg's manifests) through DuckDB, the rest as
bytes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from chunkline.pipeline.cli import main
from tests.iceberg_engines import duckdb_connection

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "local.yaml"
pytestmark = pytest.mark.slow

AWS_KEY = "AKIAZ7Q3XW9MRT4KPL2N"
GITHUB_TOKEN = "ghp_" + "Vn3bQ8wE2rT5yU7iO9pA1sD4fG6hJ0kL2zX4"
SECRET_WORDS = "quokkamarmalade"  # the credential document's own prose, no credential in it
PLAIN_WORDS = "zanzibarpelican"  # the plain document deleted later


def write_corpus(root: Path) -> None:
    root.mkdir()
    for n in range(6):
        (root / f"manual-{n}.md").write_text(
            f"# Pump {n}\n\nPrime pump {n} before the first start and check the seals weekly.\n",
            encoding="utf-8")
    (root / "deploy.md").write_text(
        f"# Deploy notes\n\nThe {SECRET_WORDS} job reads the bucket with\n"
        f"aws_access_key_id = {AWS_KEY}\n\nand pushes with the token {GITHUB_TOKEN} every night.\n",
        encoding="utf-8")
    (root / "visitor.md").write_text(
        f"# Visitor\n\nThe {PLAIN_WORDS} visitor badge is kept at the front desk.\n", encoding="utf-8")


def chunkline(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out, err)
    return code, out.getvalue(), err.getvalue()


def run(corpus: Path, output: Path, *sets: str, purge: bool = False) -> None:
    code, out, err = chunkline(
        "run", "--config", str(CONFIG), "--input", f"{corpus}/**", "--output", str(output), "--quiet",
        *(["--purge"] if purge else []),
        *(a for s in ("embed=null", "input.trust_file_metadata=true", *sets) for a in ("--set", s)))
    assert code == 0, (out, err)


def _cells(value) -> list[bytes]:
    if isinstance(value, bytes):
        return [value]
    if isinstance(value, str):
        return [value.encode("utf-8", "surrogatepass")]
    if isinstance(value, dict):
        return [b for v in value.values() for b in _cells(v)]
    if isinstance(value, (list, tuple)):
        return [b for v in value for b in _cells(v)]
    return [str(value).encode()]


def where_found(output: Path, needles: list[str]) -> dict[str, list[str]]:
    """The needles found in each file under ``output`` (case-insensitive), by file."""
    wanted = [n.lower().encode() for n in needles]
    connection = duckdb_connection()
    found: dict[str, list[str]] = {}
    for path in sorted(output.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            cells = [b for row in pq.read_table(path).to_pylist() for b in _cells(row)]
        elif path.suffix == ".avro":
            cells = [b for row in connection.execute(f"SELECT * FROM read_avro('{path}')").fetchall()
                     for b in _cells(row)]
        else:
            cells = [path.read_bytes()]
        hits = [needle for needle, low in zip(needles, wanted) if any(low in cell.lower() for cell in cells)]
        if hits:
            found[str(path.relative_to(output))] = hits
    return found


def test_a_rejected_or_purged_document_leaves_no_byte(tmp_path) -> None:
    corpus, output = tmp_path / "corpus", tmp_path / "index"
    write_corpus(corpus)
    secret = [AWS_KEY, GITHUB_TOKEN, SECRET_WORDS]
    run(corpus, output, "secrets.mode=allow")
    indexed = where_found(output, secret)
    # The scan sees the document where a run keeps it: rows, and the memo of a trusted file.
    assert any(path.split("/")[-1].startswith("chunks-") for path in indexed), indexed
    assert any("/memo/" in path for path in indexed), indexed

    run(corpus, output, "secrets.mode=reject")
    code, _, err = chunkline("gc", str(output), "--keep", "1")
    assert code == 0, err
    assert where_found(output, secret) == {}

    # Indexed again, then deleted with a plain document: a rerun leaves their dead rows where
    # the published run's files hold them; the purge erases them.
    run(corpus, output, "secrets.mode=allow")
    (corpus / "deploy.md").unlink()
    (corpus / "visitor.md").unlink()
    run(corpus, output, "secrets.mode=allow")
    code, _, err = chunkline("gc", str(output), "--keep", "1")
    assert code == 0, err
    assert where_found(output, [*secret, PLAIN_WORDS]), "an ordinary rerun keeps dead rows"
    run(corpus, output, "secrets.mode=allow", purge=True)
    assert where_found(output, [*secret, PLAIN_WORDS]) == {}
    code, out, err = chunkline("query", str(output), "prime the pump", "--json")
    assert code == 0, err
    assert json.loads(out)["hits"], "the live documents are still searched"
