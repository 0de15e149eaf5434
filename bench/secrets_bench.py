"""What the credentials stage finds and costs, beside detect-secrets' own file scan (the
`detect-secrets scan` path: every plugin, its default filters) on the same texts, one process:

- the generated set of tests/credential_cases.py (20 credentials of 14 kinds, the 10 forms of
  issue #48, 20 lookalikes): credentials found, lookalikes flagged;
- real text, package READMEs (bench/reindex_bench.py's `readmes` corpus, the first MB asked
  for): the documents each flags, with the kinds (a measure of false positives on prose and
  code samples, where nothing is a live credential), and CPU seconds per MB.

    python bench/secrets_bench.py --mb 1.5 --out bench/results_secrets.md
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.reindex_bench import readme_documents  # noqa: E402
from chunkline.credentials import CredentialOptions, Scanner  # noqa: E402
from tests.credential_cases import credentials, lookalikes, missed  # noqa: E402


def readmes(megabytes: float) -> list[tuple[str, str]]:
    found, size = [], 0
    for name, text in readme_documents():
        found.append((name, text))
        size += len(text.encode("utf-8"))
        if size >= megabytes * 1_000_000:
            break
    return found


def ours(documents: list[tuple[str, str]]) -> tuple[dict[str, list[str]], float]:
    scanner = Scanner(CredentialOptions())
    flagged, started = {}, time.process_time()
    for name, text in documents:
        findings = scanner.scan(text, name)
        if findings:
            flagged[name] = [f"{f.kind} (line {f.line})" for f in findings]
    return flagged, time.process_time() - started


def detect_secrets_scan(documents: list[tuple[str, str]]) -> tuple[dict[str, list[str]], float]:
    """`detect-secrets scan` on the texts written as files: SecretsCollection.scan_file under
    default_settings (every plugin, the default filters; nothing verified)."""
    from detect_secrets import SecretsCollection
    from detect_secrets.settings import default_settings

    with tempfile.TemporaryDirectory() as work, default_settings():
        for name, text in documents:
            Path(work, name).write_text(text, encoding="utf-8")
        collection = SecretsCollection(root=work)
        started = time.process_time()
        for name, _ in documents:
            collection.scan_file(name)
        seconds = time.process_time() - started
        flagged = {}
        for name, secret in collection:
            flagged.setdefault(name, []).append(f"{secret.type} (line {secret.line_number})")
    return flagged, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=1.5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    generated = [(c.name, c.text) for c in [*credentials(), *missed()]]
    looks = [(c.name, c.text) for c in lookalikes()]
    real = readmes(args.mb)
    size = sum(len(text.encode("utf-8")) for _, text in real) / 1e6
    lines = [f"### Credentials: the generated set and {len(real)} package READMEs ({size:.2f} MB)",
             "", f"`python bench/secrets_bench.py --mb {args.mb:g}`", "",
             f"| scanner | credentials found (of {len(generated)}) | lookalikes flagged "
             f"(of {len(looks)}) | README documents "
             "flagged | findings in READMEs | CPU s per MB (READMEs) |", "|---|---:|---:|---:|---:|---:|"]
    details = []
    for label, scan in (("chunkline (secrets stage)", ours),
                        ("detect-secrets scan (default settings)", detect_secrets_scan)):
        found, _ = scan(generated)
        flagged_looks, _ = scan(looks)
        flagged, seconds = scan(real)
        findings = sum(len(v) for v in flagged.values())
        lines.append(f"| {label} | {len(found)} | {len(flagged_looks)} | {len(flagged)} | "
                     f"{findings} | {seconds / size:.3f} |")
        kinds = Counter(kind.rsplit(" (", 1)[0] for v in flagged.values() for kind in v)
        details += ["", f"{label}: README documents flagged, by kind: "
                    + (", ".join(f"{k} {n}" for k, n in kinds.most_common()) or "none")]
        if label.startswith("chunkline"):
            details += [f"- `{name}`: {', '.join(found_kinds)}"
                        for name, found_kinds in sorted(flagged.items())]
    report = "\n".join([*lines, *details, ""])
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
