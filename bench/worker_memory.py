"""What one worker holds in the three corpus-wide stages, measured per document on real text and
stated at 100 M documents (docs/ARCHITECTURE.md, "What a worker holds").

The corpus is `bench/scale_bench.py`'s (this venv's sources, ~8 KB documents). Measured here:
boilerplate candidate keys per document and distinct keys per document (the count's state),
distinct BM25 terms against documents (Heaps' law, V = K n^beta, fitted at two sizes), and the
bytes of a near-duplicate node (a survivor key) as Beam's pickling sends it and as Python holds it.

    python bench/worker_memory.py --mb 4 [--documents 100000000] [--shares 65536]
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_bench import generate  # noqa: E402
from chunkline.boilerplate import BoilerplateOptions, line_keys  # noqa: E402
from chunkline.minhash import LONGEST, survivor_key  # noqa: E402
from chunkline.sparse import TERM_SPACE, SparseOptions, term_counts  # noqa: E402
from chunkline.transforms.clean import key_buckets  # noqa: E402


def deep_size(value) -> int:
    """Bytes Python holds for a node: the tuple and what it holds (ints and strings)."""
    if isinstance(value, tuple):
        return sys.getsizeof(value) + sum(deep_size(item) for item in value)
    return sys.getsizeof(value)


def union_find_bytes_per_node(nodes: int = 100_000) -> float:
    """What the former single-worker union-find (``chunkline.minhash.Components``) held per
    node, by tracemalloc over pairs of fresh survivor keys."""
    import tracemalloc

    from chunkline.minhash import Components

    tracemalloc.start()
    found = Components()
    for index in range(0, nodes, 2):
        found.union(survivor_key(f"0001/doc{index:07d}.py", 8000, LONGEST),
                    survivor_key(f"0001/doc{index + 1:07d}.py", 8000 + index, LONGEST))
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return held / nodes


def counter_bytes_per_term(terms: int = 100_000) -> float:
    """What the former single accumulator (a ``collections.Counter`` of term id -> df) held
    per term, by tracemalloc over hashed ids."""
    import random
    import tracemalloc
    from collections import Counter

    rng = random.Random(1)
    tracemalloc.start()  # the ids made while traced: the dict holds them, as it held the chunks'
    df: Counter = Counter()
    for _ in range(terms):
        df[rng.randrange(TERM_SPACE)] += 1
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return held / len(df)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0)
    parser.add_argument("--documents", type=int, default=100_000_000)
    parser.add_argument("--near-share", type=float, default=0.2)
    parser.add_argument("--shares", type=int, default=65_536, help="chunkline.pipeline.plan.join_shares at that size")
    parser.add_argument("--term-shares", type=int, default=256, help="output.chunk_shards")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        generate(Path(directory), args.mb)
        texts = [path.read_text(encoding="utf-8") for path in sorted(Path(directory).rglob("doc*"))]
    options, sparse = BoilerplateOptions(), SparseOptions()
    keys_per_doc, distinct, vocabulary, half_vocabulary = 0, set(), set(), 0
    for index, text in enumerate(texts):
        keys = line_keys(text, options)
        keys_per_doc += len(keys)
        distinct |= keys
        vocabulary.update(term_counts(text, sparse)[0])
        if index + 1 == len(texts) // 2:
            half_vocabulary = len(vocabulary)
    n = len(texts)
    beta = math.log(len(vocabulary) / half_vocabulary) / math.log(n / (n // 2))
    at_scale = min(TERM_SPACE, len(vocabulary) * (args.documents / n) ** beta)
    node = survivor_key("0001/doc0001234.py", 8000, LONGEST)
    node_bytes, node_pickled = deep_size(node), len(pickle.dumps(node, protocol=pickle.HIGHEST_PROTOCOL))
    buckets = key_buckets(args.shares)
    distinct_per_doc = len(distinct) / n
    rows = [
        ("documents measured", f"{n:,}"),
        ("boilerplate candidate keys per document", f"{keys_per_doc / n:.1f}"),
        ("distinct keys per document", f"{distinct_per_doc:.1f}"),
        (f"count state per bucket at {args.documents:,} documents ({buckets} buckets, 16 B a key)",
         f"{args.documents * distinct_per_doc * 16 / buckets / 1e6:,.0f} MB"),
        ("distinct terms", f"{len(vocabulary):,} (Heaps beta {beta:.2f})"),
        (f"terms at {args.documents:,} documents (at most 2^29)", f"{at_scale:,.0f}"),
        (f"df state per share ({args.term_shares} shares, 16 B a term)",
         f"{at_scale * 16 / args.term_shares / 1e6:,.1f} MB (at most {TERM_SPACE * 16 / args.term_shares / 1e6:,.0f})"),
        ("near-duplicate node, held / pickled", f"{node_bytes} B / {node_pickled} B"),
        (f"edges' nodes per share at {args.documents:,} documents, {args.near_share:.0%} near",
         f"{2 * args.documents * args.near_share / args.shares:,.0f} "
         f"({2 * args.documents * args.near_share / args.shares * 2 * node_bytes / 1e6:,.1f} MB)"),
    ]
    per_term = counter_bytes_per_term()
    rows.append((f"former df accumulator on one worker: per term / at {at_scale:,.0f} terms",
                 f"{per_term:.0f} B / {at_scale * per_term / 1e9:,.1f} GB"))
    rows.append((f"former boilerplate count: per bucket at {args.documents:,} documents (16 buckets)",
                 f"{args.documents * distinct_per_doc * 16 / 16 / 1e9:,.1f} GB"))
    per_node = union_find_bytes_per_node()
    near = args.documents * args.near_share
    rows.append((f"former union-find on one worker: per node / at {near:,.0f} nodes",
                 f"{per_node:.0f} B / {near * per_node / 1e9:,.1f} GB"))
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
