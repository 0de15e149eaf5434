"""How a local run grows with its input: wall time and peak RSS at two corpus sizes.

The corpus is real text: the documentation and source files shipped with this Python (the
standard library and the venv's site-packages) cut at blank lines into ~8 KB documents. When
the files run out before the size asked for, later passes shuffle the paragraphs and group them
anew, so near-duplicate removal keeps the new documents. The same interpreter and venv give the
same corpus, so two checkouts (before and after a change) are measured on identical input.

Each size is one fresh `chunkline run` process (FnApiRunner, the demo config, embedding off:
the pipeline's own work); peak RSS is that process's maximum resident set and CPU its user +
system seconds (wait4): on a machine shared with other jobs, CPU moves less than wall time.

    python bench/scale_bench.py --mb 20 80 [--repo ../other-checkout] [--out bench/results_scale.md]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {".py": ".py", ".md": ".md", ".rst": ".txt", ".txt": ".txt"}
DOCUMENT_BYTES = 8_000


def source_files() -> list[Path]:
    """Every documentation and source file of the standard library and site-packages, sorted."""
    roots = {Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])}
    found = []
    for root in sorted(roots):
        for path in root.rglob("*"):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                found.append(path)
    return sorted(found)


def paragraphs(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return [block.strip("\n") for block in text.split("\n\n") if block.strip()]


def documents(files: list[Path], seed: int) -> Iterator[tuple[str, str]]:
    """(suffix, text) of ~8 KB each: files in order on the first pass, then reshuffled passes."""
    for round_number in range(1_000):
        rng = random.Random(seed + round_number)
        order = list(files)
        if round_number:
            rng.shuffle(order)
        for path in order:
            blocks = paragraphs(path)
            if round_number:
                rng.shuffle(blocks)
            piece: list[str] = []
            size = 0
            for block in blocks:
                piece.append(block)
                size += len(block) + 2
                if size >= DOCUMENT_BYTES:
                    yield SUFFIXES[path.suffix], "\n\n".join(piece) + "\n"
                    piece, size = [], 0
            if size >= DOCUMENT_BYTES // 4:
                yield SUFFIXES[path.suffix], "\n\n".join(piece) + "\n"


def generate(directory: Path, megabytes: float, seed: int = 11) -> tuple[int, int]:
    """Write the corpus; returns (documents, bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = int(megabytes * 1_000_000)
    written = count = 0
    for suffix, text in documents(source_files(), seed):
        data = text.encode("utf-8")
        (directory / f"{count // 1000:04d}").mkdir(exist_ok=True)
        (directory / f"{count // 1000:04d}" / f"doc{count:07d}{suffix}").write_bytes(data)
        written += len(data)
        count += 1
        if written >= target:
            break
    return count, written


def corpus_for(base: Path, megabytes: float) -> Path:
    """``base/corpus_<MB>mb``, generated unless a previous run left it there."""
    corpus = base / f"corpus_{megabytes:g}mb"
    if not corpus.exists():
        docs, size = generate(corpus, megabytes)
        print(f"generated {docs} documents, {size / 1e6:.1f} MB in {corpus}", flush=True)
    return corpus


def run_once(repo: Path, corpus: Path, output: Path) -> dict:
    command = [
        sys.executable, "-c", "import sys; from chunkline.pipeline.cli import main; sys.exit(main())",
        "run", "--config", "configs/local.yaml",
        "--set", f"input.pattern={corpus}/**", "--set", f"output.path={output}",
        "--set", "embed=null", "--allow-shrink",
    ]
    environment = dict(os.environ, PYTHONPATH=str(repo))
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=repo, env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    log = process.stdout.read().decode("utf-8", "replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run failed ({status}):\n{log[-4000:]}")
    run_id = (output / "LATEST").read_text().strip()
    from chunkline.index.manifest import load_manifest

    counts = dict(load_manifest(str(output / run_id)).counts)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024, "counts": counts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[20, 80])
    parser.add_argument("--repo", type=Path, default=ROOT, help="Checkout whose pipeline runs.")
    parser.add_argument("--corpus-dir", type=Path, default=None,
                        help="Keep the generated corpora here (reused when present).")
    parser.add_argument("--out", type=Path, default=None, help="Append the table here.")
    args = parser.parse_args(argv)
    base = args.corpus_dir or Path(tempfile.mkdtemp(prefix="chunkline-scale-"))
    rows = []
    for megabytes in args.mb:
        corpus = corpus_for(base, megabytes)
        with tempfile.TemporaryDirectory(prefix="chunkline-scale-out-") as output:
            result = run_once(args.repo.resolve(), corpus, Path(output))
        counts = result["counts"]
        rows.append((megabytes, result, counts))
        print(f"{megabytes:g} MB: {result['wall_s']:.1f} s (CPU {result['cpu_s']:.1f} s), "
              f"peak RSS {result['peak_rss_mb']:.0f} MB, "
              f"{counts.get('documents')} documents, {counts.get('kept')} kept, "
              f"{counts.get('chunks')} chunks", flush=True)
    lines = [f"repo: {args.repo.resolve()} ({subprocess.run(['git', '-C', str(args.repo), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()})",
             "", "| input MB | documents | kept | chunks | wall s | peak RSS MB |",
             "|---:|---:|---:|---:|---:|---:|"]
    for megabytes, result, counts in rows:
        lines.append(f"| {megabytes:g} | {counts.get('documents')} | {counts.get('kept')} | "
                     f"{counts.get('chunks')} | {result['wall_s']:.1f} | {result['peak_rss_mb']:.0f} |")
    if len(rows) >= 2:
        (small, a, _), (large, b, _) = rows[0], rows[-1]
        lines.append("")
        lines.append(f"time ratio {large:g}/{small:g} MB: {b['wall_s'] / a['wall_s']:.2f}x; "
                     f"peak RSS growth: {(b['peak_rss_mb'] - a['peak_rss_mb']) / (large - small):.1f} MB per input MB")
    report = "\n".join(lines)
    print(report)
    if args.out:
        with args.out.open("a", encoding="utf-8") as handle:
            handle.write(report + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
