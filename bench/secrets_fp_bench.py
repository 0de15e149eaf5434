"""False positives of the credentials stage on real code and prose, where nothing is a live
credential: with the default config (``secrets.mode: reject``), per set and per kind, the
matches, the documents that would be rejected whole and the documents indexed with a value
masked (issue #48).

- code: 2,000 ``.py`` files of this interpreter's site-packages (sorted paths, every k-th);
- readmes: bench/reindex_bench.py's README corpus (every installed distribution's long
  description and the README files in site-packages), whole;
- prose: Debian's documentation under /usr/share/doc (READMEs, NEWS, changelogs, copyright
  files, .txt/.md/.rst; gzip read), sorted paths, every k-th, about ``--prose-mb`` MB.

``--baseline REV`` scans the same sets with chunkline/credentials.py as it was at REV (read with
``git show``), where every finding rejected its document.

    python bench/secrets_fp_bench.py --out bench/results_secrets_fp.md
    python bench/secrets_fp_bench.py --baseline HEAD
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.reindex_bench import readme_documents  # noqa: E402

DOC = Path("/usr/share/doc")
# Debian's documentation files that are prose (not HTML, PostScript, JSON or C examples).
PROSE_NAME = re.compile(r"(?i)(?:readme|news|changelog|changes|history|copyright|faq|authors)"
                        r"[\w.+-]*|[\w.+-]+\.(?:txt|md|rst)")


@dataclass
class Tally:
    """What the stage did to one set of documents."""

    documents: int = 0
    size: int = 0
    seconds: float = 0.0
    rejected: list[str] = field(default_factory=list)  # document names
    masked: list[str] = field(default_factory=list)
    matches: Counter = field(default_factory=Counter)  # kind -> findings
    rejected_by: Counter = field(default_factory=Counter)  # kind -> documents rejected holding it
    masked_by: Counter = field(default_factory=Counter)  # kind -> documents indexed with it masked
    examples: dict[str, str] = field(default_factory=dict)  # kind -> a document holding it


def code_files(count: int) -> list[tuple[str, str]]:
    site = Path(sysconfig.get_paths()["purelib"])
    paths = sorted(p for p in site.rglob("*.py") if p.is_file())
    step = max(1, len(paths) // count)
    found = []
    for path in paths[::step]:
        try:
            found.append((str(path.relative_to(site)), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
        if len(found) == count:
            break
    return found


def prose_files(megabytes: float) -> list[tuple[str, str]]:
    texts = []
    for path in sorted(DOC.rglob("*")):
        name = path.name.removesuffix(".gz")
        if path.is_symlink() or not path.is_file() or not PROSE_NAME.fullmatch(name):
            continue
        try:
            data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
            text = data.decode("utf-8")
        except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError):
            continue
        if "\0" not in text and text.strip():
            texts.append((str(path.relative_to(DOC)).removesuffix(".gz"), text))
    total = sum(len(text.encode("utf-8")) for _, text in texts)
    step = max(1, int(total // (megabytes * 1_000_000)))  # at least about ``megabytes``
    return texts[::step]


def readme_files() -> list[tuple[str, str]]:
    return readme_documents()


def current_scanner() -> tuple[Callable, Callable]:
    from chunkline.credentials import CredentialOptions, Scanner, rejecting

    return Scanner(CredentialOptions()).scan, rejecting


def baseline_scanner(rev: str) -> tuple[Callable, Callable]:
    """The scanner at ``rev``; before issue #48 every finding rejected its document."""
    source = subprocess.run(["git", "show", f"{rev}:chunkline/credentials.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "credentials_baseline.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("credentials_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    rejecting = getattr(module, "rejecting", lambda text, findings: findings)
    return module.Scanner(module.CredentialOptions()).scan, rejecting


def tally(documents: list[tuple[str, str]], scan: Callable, rejecting: Callable) -> Tally:
    result = Tally(documents=len(documents))
    for name, text in documents:
        result.size += len(text.encode("utf-8"))
        started = time.process_time()
        findings = scan(text, name.rsplit("/", 1)[-1])
        result.seconds += time.process_time() - started
        if not findings:
            continue
        rejects = bool(rejecting(text, findings))
        (result.rejected if rejects else result.masked).append(name)
        kinds = Counter(f.kind for f in findings)
        result.matches.update(kinds)
        (result.rejected_by if rejects else result.masked_by).update(kinds.keys())
        for kind in kinds:
            result.examples.setdefault(kind, f"{name}:{next(f.line for f in findings if f.kind == kind)}")
    return result


def report(sets: dict[str, Tally], label: str, details: bool) -> list[str]:
    lines = [f"#### {label}", "",
             "| set | documents | MB | rejected (reject mode) | indexed, masked | findings | CPU s per MB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, t in sets.items():
        mb = t.size / 1e6
        lines.append(f"| {name} | {t.documents:,} | {mb:.2f} | {len(t.rejected)} "
                     f"({len(t.rejected) / max(1, t.documents):.2%}) | {len(t.masked)} | "
                     f"{sum(t.matches.values())} | {t.seconds / max(mb, 1e-9):.3f} |")
    lines += ["", "| set | kind | matches | documents rejected | documents masked | e.g. |",
              "|---|---|---:|---:|---:|---|"]
    for name, t in sets.items():
        for kind, n in sorted(t.matches.items(), key=lambda item: (-item[1], item[0])):
            lines.append(f"| {name} | {kind} | {n} | {t.rejected_by[kind]} | {t.masked_by[kind]} | "
                         f"`{t.examples[kind]}` |")
    if details:
        for name, t in sets.items():
            lines += ["", f"{name}, rejected: " + (", ".join(f"`{d}`" for d in t.rejected) or "none"),
                      "", f"{name}, masked: " + (", ".join(f"`{d}`" for d in t.masked) or "none")]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code-files", type=int, default=2000)
    parser.add_argument("--prose-mb", type=float, default=6.0)
    parser.add_argument("--baseline", metavar="REV", help="also scan with chunkline/credentials.py at REV")
    parser.add_argument("--details", action="store_true", help="name every rejected document")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    corpora = {"code (site-packages .py)": code_files(args.code_files),
               "readmes": readme_files(),
               "prose (/usr/share/doc)": prose_files(args.prose_mb)}
    scanners = [("now", current_scanner())]
    if args.baseline:
        scanners.insert(0, (f"at {args.baseline}", baseline_scanner(args.baseline)))
    command = " ".join(["python bench/secrets_fp_bench.py", *sys.argv[1:]])
    lines = ["### Credentials: false positives on code and prose (default config)", "",
             f"`{command}`", ""]
    for label, (scan, rejecting) in scanners:
        sets = {name: tally(documents, scan, rejecting) for name, documents in corpora.items()}
        lines += report(sets, f"chunkline/credentials.py {label}", args.details) + [""]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
