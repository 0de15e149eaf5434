"""Near-duplicate detection cost: MinHash signatures per second against datasketch's own
per-document loop, and the whole Beam dedupe stage at two corpus sizes.

1. Signatures. The same ~2 KB documents, the same word 5-gram shingles, one process:
   chunkline.minhash.MinHasher (batches of 64, and one document per call) against
   datasketch.MinHash with ``update`` once per shingle (the loop its docs show) and with
   ``update_batch``. Timed over all documents, best of ``--repeat``.
2. The stage. A generated JSONL corpus (originals, edited near copies, exact copies) is read and
   deduped (exact + near) on the in-process FnApiRunner; the same read without dedupe is timed
   too, and the difference is the stage's cost. Run at each ``--sizes``: near-linear growth
   means the 4x corpus costs about 4x.

    python bench/dedupe_bench.py [--sig-docs 2000] [--sizes 10000 40000] [--num-perm 128 256]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import apache_beam as beam  # noqa: E402
import numpy as np  # noqa: E402
from apache_beam.metrics.metric import MetricsFilter  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from datasketch import MinHash  # noqa: E402

from chunkline.minhash import MinHasher, MinHashOptions, words  # noqa: E402
from chunkline.records import Document  # noqa: E402
from chunkline.transforms.dedupe import Dedupe  # noqa: E402

SHINGLE = 5


# --- Corpus --------------------------------------------------------------------------------------


class Prose:
    """Pseudo-English: a Zipf-distributed vocabulary of syllable words, sentences, paragraphs."""

    def __init__(self, seed: int, accents: bool = False) -> None:
        self.rng = random.Random(seed)
        syllables = [c + v for c in "bdfgklmnprstvz" for v in ("aeiouäöü" if accents else "aeiou")]
        vocab = sorted({"".join(self.rng.choices(syllables, k=self.rng.randint(1, 4))) for _ in range(30_000)})
        self.rng.shuffle(vocab)
        self.vocab = vocab
        self.cum = list(accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))

    def words(self, n: int) -> list[str]:
        return self.rng.choices(self.vocab, cum_weights=self.cum, k=n)

    def render(self, tokens: list[str]) -> str:
        out, i = [], 0
        while i < len(tokens):
            k = self.rng.randint(6, 18)
            out.append(" ".join(tokens[i : i + k]).capitalize() + ".")
            i += k
            if self.rng.random() < 0.2:
                out.append("\n\n")
        return " ".join(out).replace(" \n\n ", "\n\n") + "\n"

    def document(self, chars: int) -> str:
        """A document of about ``chars`` characters."""
        tokens = self.words(max(1, int(chars / 7.4)))  # ~6.4 characters a word, with its space
        return self.render(tokens)


def corpus(n: int, seed: int = 11) -> list[Document]:
    """``n`` documents of ~2 KB: 85% originals, 10% near copies (0.5-2% of the words replaced,
    re-laid out), 5% exact copies."""
    prose = Prose(seed)
    originals: list[list[str]] = []
    docs = []
    for i in range(n):
        roll = prose.rng.random()
        if originals and roll < 0.10:
            base = list(prose.rng.choice(originals))
            # Each replaced word breaks up to 5 shingles: 0.5-2% of the words keeps the copy's
            # word-5-gram Jaccard above ~0.8.
            for _ in range(int(len(base) * prose.rng.uniform(0.005, 0.02))):
                base[prose.rng.randrange(len(base))] = f"edit{prose.rng.randrange(10**9)}"
            text = prose.render(base)
        elif originals and roll < 0.15:
            text = docs[prose.rng.randrange(len(docs))].text
        else:
            tokens = prose.words(270)
            originals.append(tokens)
            text = prose.render(tokens)
        docs.append(Document(f"doc-{i:06d}", f"/bench/doc-{i:06d}", text))
    return docs


# --- Signatures ----------------------------------------------------------------------------------


def best_of(repeat: int, run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def shingle_strings(text: str) -> list[bytes]:
    w = words(text)
    return [" ".join(w[i : i + SHINGLE]).encode() for i in range(max(1, len(w) - SHINGLE + 1))]


def datasketch_update_loop(texts: Sequence[str], num_perm: int) -> None:
    for text in texts:
        m = MinHash(num_perm=num_perm)
        for shingle in shingle_strings(text):
            m.update(shingle)


def datasketch_update_batch(texts: Sequence[str], num_perm: int) -> None:
    for text in texts:
        MinHash(num_perm=num_perm).update_batch(shingle_strings(text))


def signatures_in_batches(hasher: MinHasher, texts: Sequence[str]) -> None:
    for i in range(0, len(texts), 64):
        hasher.signatures(texts[i : i + 64])


def signatures_one_by_one(hasher: MinHasher, texts: Sequence[str]) -> None:
    for text in texts:
        hasher.signature(text)


def signature_rows(n_docs: int, num_perms: Sequence[int], repeat: int) -> list[str]:
    rows = []
    for accents in (False, True):
        prose = Prose(3, accents=accents)
        texts = [prose.document(2000) for _ in range(n_docs)]
        size = np.mean([len(t.encode()) for t in texts])
        sample = texts[: max(50, n_docs // 8)]  # datasketch is slow: time a share of the docs
        for num_perm in num_perms:
            hasher = MinHasher(MinHashOptions(num_perm=num_perm))
            batched = n_docs / best_of(repeat, partial(signatures_in_batches, hasher, texts))
            single = n_docs / best_of(repeat, partial(signatures_one_by_one, hasher, texts))
            loop = len(sample) / best_of(repeat, partial(datasketch_update_loop, sample, num_perm))
            batch = len(sample) / best_of(repeat, partial(datasketch_update_batch, sample, num_perm))
            kind = "non-ASCII" if accents else "ASCII"
            rows.append(
                f"| {num_perm} | {kind}, {size / 1000:.1f} KB | {batched:,.0f} | {single:,.0f} | "
                f"{loop:,.0f} | {batch:,.0f} | **{batched / loop:.1f}x** | {batched / batch:.1f}x |"
            )
    return rows


# --- The Beam stage ------------------------------------------------------------------------------


def to_document(line: str) -> Document:
    record = json.loads(line)
    return Document(record["id"], record["uri"], record["text"])


def run_stage(path: Path, near: MinHashOptions | None) -> tuple[float, dict[str, int]]:
    """Wall seconds of read (+ dedupe when ``near`` is given) on FnApiRunner, and counters."""
    start = time.perf_counter()
    pipeline = beam.Pipeline(runner=FnApiRunner())
    docs = pipeline | beam.io.ReadFromText(str(path)) | beam.Map(to_document)
    if near is None:
        _ = docs | beam.combiners.Count.Globally()
    else:
        out = docs | Dedupe(exact=True, near=near)
        _ = out.statuses | beam.combiners.Count.Globally()
    result = pipeline.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - start
    counters: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace("dedupe"))["counters"]:
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + c.committed
    return seconds, counters


def stage_rows(sizes: Sequence[int], num_perm: int) -> list[str]:
    rows, first = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"corpus-{n}.jsonl"
            with path.open("w", encoding="utf-8") as handle:
                for d in corpus(n):
                    handle.write(json.dumps({"id": d.doc_id, "uri": d.uri, "text": d.text}) + "\n")
            read_only, _ = run_stage(path, None)
            total, counters = run_stage(path, MinHashOptions(num_perm=num_perm))
            stage = total - read_only
            first = first or (n, stage)
            growth = (stage / first[1]) / (n / first[0])
            rows.append(
                f"| {n:,} | {num_perm} | {read_only:.1f} | {total:.1f} | **{stage:.1f}** | "
                f"{n / stage:,.0f} | {growth:.2f} | {counters.get('exact_duplicates', 0):,} | "
                f"{counters.get('near_duplicates', 0):,} | {counters.get('candidate_pairs', 0):,} |"
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sig-docs", type=int, default=2000, help="documents for the signature rows")
    parser.add_argument("--num-perm", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--repeat", type=int, default=3, help="signature timings: best of this many")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 40_000])
    parser.add_argument("--stage-num-perm", type=int, default=MinHashOptions().num_perm)
    parser.add_argument("--skip-signatures", action="store_true")
    parser.add_argument("--skip-stage", action="store_true")
    args = parser.parse_args(argv)

    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}, "
          f"numpy {np.__version__}, apache-beam {beam.__version__}\n")
    if not args.skip_signatures:
        print("MinHash signatures per second, one process (docs/s):\n")
        print("| num_perm | documents | chunkline batch 64 | chunkline 1/call | datasketch update loop "
              "| datasketch update_batch | vs loop | vs update_batch |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        for row in signature_rows(args.sig_docs, args.num_perm, args.repeat):
            print(row, flush=True)
    if not args.skip_stage:
        print("\nDedupe stage (exact + near) on FnApiRunner, in-process, seconds:\n")
        print("| documents | num_perm | read only | read + dedupe | dedupe stage | stage docs/s "
              "| growth vs linear | exact dups | near dups | candidate pairs |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for row in stage_rows(args.sizes, args.stage_num_perm):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
