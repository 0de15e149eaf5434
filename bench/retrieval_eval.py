"""Retrieval quality of the chunking modes on a labelled set: recall@k and IoU of answer spans.

    python bench/retrieval_eval.py [--max-tokens 222 128] [--k 5] [--reserve 32]

The labelled set (``bench/retrieval/``) is ten Markdown manuals, runbooks and FAQs written for
this benchmark, and questions each with the exact span of its answer (``doc[start:end] ==
answer``, checked before anything runs). Seventeen questions are marked ``needs_heading``: their
answer sentence recurs, word for word but for a number, under another product or version
heading, so only the heading tells which one is meant.

Every row splits the same documents with the same token budget (all-MiniLM-L6-v2 tokens; 222 =
the pipeline's budget for that model: 256 - 2 special tokens - 32 reserved for the heading
path), embeds the chunks and the questions with all-MiniLM-L6-v2, and ranks all chunks of all
documents by cosine similarity:

- recursive: ``chunkline.split``; + heading: the heading path prepended for embedding
  (``heading_prefix``, at most ``--reserve`` tokens), as the pipeline does.
- semantic: ``chunkline.splitting.semantic.semantic_split`` (percentile 90, buffer 1), same two variants.
- late: the recursive chunks, vectors by late chunking over the whole document
  (``chunkline.late``: 254-token windows, stride 127), and the same for the semantic chunks.
- sparse / hybrid: the recursive + heading path chunks ranked by BM25 over their embedded text
  (``chunkline.sparse``: the weights the pipeline writes, statistics over these chunks), and by
  reciprocal rank fusion of the dense and BM25 rankings (``chunkline.pipeline.query.fused``, k = 60), as
  ``chunkline query --mode sparse`` / ``--mode hybrid`` rank.
- LangChain: ``RecursiveCharacterTextSplitter.from_huggingface_tokenizer`` with the MiniLM
  tokenizer and the same budget, overlap 0; offsets from its ``add_start_index`` (``str.find``
  from the previous chunk on), each checked against the text.

Metrics per row: R@1 and R@k (a hit is a retrieved chunk of the answer's document that contains
the whole answer span), R@1 on the ``needs_heading`` questions, IoU@k (per question the best
``|chunk ∩ answer| / |chunk ∪ answer|`` in characters among the top k, 0 if none overlaps; it
rewards chunks that are tight around the answer), "cut" (answers that no chunk contains whole:
they can never be a hit), the chunk count, and the mean and max chunk tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))  # run from a checkout without installing

from chunkline import get_tokenizer, split  # noqa: E402
from chunkline.embedder import EmbedOptions, embed_texts, load_model  # noqa: E402
from chunkline.late import LateChunker, LateOptions  # noqa: E402
from chunkline.splitting.semantic import SemanticOptions, model_embed, semantic_split  # noqa: E402
from chunkline.splitting.text import heading_prefix  # noqa: E402
from chunkline.sparse import (  # noqa: E402
    SparseOptions,
    corpus_stats,
    document_weights,
    query_terms,
    query_weights,
    term_counts,
)
from chunkline.quantize import dequantized, stored  # noqa: E402
from chunkline.pipeline.query import fused  # noqa: E402

LABELS = ROOT / "retrieval"
MODEL = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class Question:
    id: str
    doc: str
    question: str
    answer: str
    start: int
    end: int
    needs_heading: bool


@dataclass(frozen=True)
class Piece:
    """A retrievable chunk: ``docs[doc][start:end]``, embedded as ``embed_text`` (or given a
    vector directly by late chunking)."""

    doc: str
    start: int
    end: int
    headings: tuple[str, ...]
    tokens: int
    embed_text: str


def load_labels(root: Path = LABELS) -> tuple[dict[str, str], list[Question]]:
    """Documents by relative path and the questions; raises if any answer span is not exactly
    its quoted text."""
    docs = {str(p.relative_to(root)): p.read_text(encoding="utf-8")
            for p in sorted((root / "docs").iterdir()) if p.suffix in (".md", ".txt")}
    questions = [Question(**json.loads(line)) for line in
                 (root / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line]
    bad = [q.id for q in questions
           if q.doc not in docs or docs[q.doc][q.start : q.end] != q.answer]
    if bad:
        raise SystemExit(f"answer spans that do not match their quoted text: {bad}")
    if len({q.id for q in questions}) != len(questions):
        raise SystemExit("question ids are not unique")
    return docs, questions


# ------------------------------------------------------------------------------------- chunkers


def chunkline_pieces(
    docs: dict[str, str], chunker: Callable, tok, reserve: int | None
) -> list[Piece]:
    """Chunks of every document by ``chunker(text)``; with ``reserve`` the heading path is
    prepended for embedding, cut to ``reserve`` tokens."""
    out = []
    for name, text in docs.items():
        for c in chunker(text):
            prefix = heading_prefix(c.headings, tok, reserve) if reserve else ""
            out.append(Piece(name, c.start, c.end, c.headings, c.tokens,
                             prefix + c.table_header + text[c.start : c.end]))
    return out


def langchain_pieces(docs: dict[str, str], model, tok, max_tokens: int) -> tuple[list[Piece], int]:
    """LangChain's recursive splitter on the MiniLM tokenizer; returns the pieces and how many
    ``add_start_index`` offsets were wrong (then located by a forward search instead)."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        model.tokenizer, chunk_size=max_tokens, chunk_overlap=0, add_start_index=True)
    out, fixed = [], 0
    for name, text in docs.items():
        cursor = 0
        for document in splitter.create_documents([text]):
            chunk = document.page_content
            start = document.metadata["start_index"]
            if start < 0 or text[start : start + len(chunk)] != chunk:
                fixed += 1
                start = text.index(chunk, cursor)
            cursor = start + 1
            out.append(Piece(name, start, start + len(chunk), (), tok.count(chunk), chunk))
    return out, fixed


# ------------------------------------------------------------------------------------- metrics


def evaluate(pieces: list[Piece], vectors: np.ndarray, questions: list[Question],
             question_vectors: np.ndarray, k: int) -> dict[str, float]:
    return evaluate_scores(pieces, question_vectors @ vectors.T, questions, k)


def bm25_scores(pieces: list[Piece], questions: list[Question], reference_scale: float = 1.0) -> np.ndarray:
    """(questions x pieces) BM25 scores as ``chunkline query`` ranks them: the stored weights
    the pipeline would write (against a reference mean length of ``reference_scale`` times the
    corpus's: 1 on a first run, up to 1 +- ``sparse.reference_drift`` on a later one that
    carried its reference), times the question's IDF."""
    options = SparseOptions()
    counted = [term_counts(p.embed_text, options) for p in pieces]
    stats = corpus_stats(counted)
    reference = stats.avgdl * reference_scale
    weights = [dict(zip(ids, document_weights(ids, counts, reference, options))) for ids, counts in counted]
    scores = np.zeros((len(questions), len(pieces)))
    for row, q in enumerate(questions):
        terms = query_terms(q.question, options)
        idf = query_weights(terms, stats.df, stats.documents)
        for column, w in enumerate(weights):
            scores[row, column] = sum(w.get(t, 0.0) * weight for t, weight in zip(terms, idf))
    return scores


def hits_at_k(pieces: list[Piece], scores: np.ndarray, questions: list[Question], k: int) -> np.ndarray:
    """Per question, whether a top-k chunk holds its whole answer span."""
    ranked = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.array([any(pieces[i].doc == q.doc and pieces[i].start <= q.start and q.end <= pieces[i].end
                         for i in top) for q, top in zip(questions, ranked)])


def evaluate_scores(pieces: list[Piece], scores: np.ndarray, questions: list[Question],
                    k: int) -> dict[str, float]:
    ranked = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    hit1, hitk, ious, heading_hits, cut = [], [], [], [], 0
    for q, top in zip(questions, ranked):
        contains = [pieces[i].doc == q.doc and pieces[i].start <= q.start and q.end <= pieces[i].end
                    for i in top]
        hit1.append(contains[0])
        hitk.append(any(contains))
        if q.needs_heading:
            heading_hits.append(contains[0])
        best = 0.0
        for i in top:
            p = pieces[i]
            if p.doc != q.doc:
                continue
            inter = max(0, min(p.end, q.end) - max(p.start, q.start))
            if inter:
                best = max(best, inter / (max(p.end, q.end) - min(p.start, q.start)))
        ious.append(best)
        cut += not any(p.doc == q.doc and p.start <= q.start and q.end <= p.end for p in pieces)
    tokens = [p.tokens for p in pieces]
    return {
        "r1": float(np.mean(hit1)), "rk": float(np.mean(hitk)),
        "r1_heading": float(np.mean(heading_hits)) if heading_hits else float("nan"),
        "iou": float(np.mean(ious)), "cut": cut, "chunks": len(pieces),
        "mean_tokens": float(np.mean(tokens)), "max_tokens": max(tokens),
    }


# ------------------------------------------------------------------------------------- main


@dataclass(frozen=True)
class Row:
    name: str
    metrics: dict[str, float]
    seconds: float  # splitting + embedding the corpus (semantic: its sentence embeddings too)


@dataclass(frozen=True)
class Setup:
    docs: dict[str, str]
    questions: list[Question]
    question_vectors: np.ndarray
    model: object
    tok: object
    options: EmbedOptions
    late: LateChunker
    k: int
    backends: tuple[str, ...] = ()  # "backend:dtype" rows (embed.backend, embed.dtype)
    quick: bool = False  # only the recursive + heading path rows


def run(setup: Setup, max_tokens: int, reserve: int, merge_below: list[int]) -> list[Row]:
    """Every row at one budget."""
    docs, tok = setup.docs, setup.tok
    embed = model_embed(setup.model, setup.options)

    def recursive(text: str):
        return split(text, max_tokens, 0, tok)

    def semantic(text: str):
        return semantic_split(text, max_tokens, tok, embed, SemanticOptions())

    def timed(make: Callable[[], list[Piece]]) -> tuple[list[Piece], float]:
        started = time.perf_counter()
        return make(), time.perf_counter() - started

    headed, t_headed = timed(lambda: chunkline_pieces(docs, recursive, tok, reserve))
    if setup.quick:
        return _hybrid_rows(setup, "chunkline recursive + heading path", headed, t_headed,
                            stored_as=("float16", "int8"), backends=setup.backends)
    plain, t_plain = timed(lambda: chunkline_pieces(docs, recursive, tok, None))
    sem, t_sem = timed(lambda: chunkline_pieces(docs, semantic, tok, None))
    sem_headed, t_sem_headed = timed(lambda: chunkline_pieces(docs, semantic, tok, reserve))
    merged_rows: list[Row] = []
    for below in merge_below:
        def merging(text: str, below: int = below):
            return split(text, max_tokens, 0, tok, merge_sections_below=below)

        merged, t_merged = timed(lambda: chunkline_pieces(docs, merging, tok, reserve))
        merged_rows += _hybrid_rows(
            setup, f"chunkline recursive + heading path, sections under {below} merged", merged, t_merged)
    fixed: list[int] = []
    lc, t_lc = timed(lambda: _collect(langchain_pieces(docs, setup.model, tok, max_tokens), fixed))
    reference = "LangChain RecursiveCharacterTextSplitter (reference)"
    if fixed[0]:
        reference += f" ({fixed[0]} add_start_index offsets wrong)"
    return [
        _standard_row(setup, "chunkline recursive", plain, t_plain),
        *_hybrid_rows(setup, "chunkline recursive + heading path", headed, t_headed,
                      stored_as=("float16", "int8"), backends=setup.backends),
        *merged_rows,
        _standard_row(setup, "chunkline semantic", sem, t_sem),
        _standard_row(setup, "chunkline semantic + heading path", sem_headed, t_sem_headed),
        _late_row(setup, "chunkline recursive, late chunking", plain, t_plain),
        _late_row(setup, "chunkline semantic, late chunking", sem, t_sem),
        _standard_row(setup, reference, lc, t_lc),
    ]


def _collect(made: tuple[list[Piece], int], fixed: list[int]) -> list[Piece]:
    fixed.append(made[1])
    return made[0]


def _standard_row(setup: Setup, name: str, pieces: list[Piece], seconds: float) -> Row:
    """Each chunk embedded on its own (``embed_text``: heading path, table header, text)."""
    started = time.perf_counter()
    vectors = embed_texts(setup.model, [p.embed_text for p in pieces], setup.options)
    seconds += time.perf_counter() - started
    metrics = evaluate(pieces, vectors, setup.questions, setup.question_vectors, setup.k)
    return Row(name, metrics, seconds)


def _hybrid_rows(setup: Setup, name: str, pieces: list[Piece], seconds: float,
                 stored_as: tuple[str, ...] = (), backends: tuple[str, ...] = ()) -> list[Row]:
    """The same chunks ranked dense, by BM25, and by both fused; with ``stored_as``, also dense
    and hybrid over the vectors as stored in those dtypes (``output.vector_dtype``); with
    ``backends``, also embedded (chunks and questions) by those ``embed.backend:dtype``, each
    alone and with int8 storage."""
    started = time.perf_counter()
    vectors = embed_texts(setup.model, [p.embed_text for p in pieces], setup.options)
    dense = setup.question_vectors @ vectors.T
    embedded = seconds + time.perf_counter() - started
    started = time.perf_counter()
    sparse = bm25_scores(pieces, setup.questions)
    weighed = time.perf_counter() - started
    hybrid = np.stack([fused(d, s) for d, s in zip(dense, sparse)])
    smaller = []
    for dtype in stored_as:
        rows = [stored(v, dtype) for v in vectors]
        back = dequantized(np.asarray([r[0] for r in rows], dtype=np.float32),
                           np.asarray([r[1] for r in rows]) if dtype == "int8" else None)
        back /= np.linalg.norm(back, axis=1, keepdims=True)
        small_dense = setup.question_vectors @ back.T
        small_hybrid = np.stack([fused(d, s) for d, s in zip(small_dense, sparse)])
        lost_dense = int(np.sum(hits_at_k(pieces, dense, setup.questions, setup.k)
                                & ~hits_at_k(pieces, small_dense, setup.questions, setup.k)))
        lost_hybrid = int(np.sum(hits_at_k(pieces, hybrid, setup.questions, setup.k)
                                 & ~hits_at_k(pieces, small_hybrid, setup.questions, setup.k)))
        smaller += [
            Row(name + f" (dense, {dtype} vectors; questions lost at {setup.k} vs float32: {lost_dense})",
                evaluate_scores(pieces, small_dense, setup.questions, setup.k), embedded),
            Row(name + f", hybrid (RRF), {dtype} vectors; questions lost at {setup.k} vs float32: {lost_hybrid}",
                evaluate_scores(pieces, small_hybrid, setup.questions, setup.k), embedded + weighed),
        ]
    for spec in backends:
        backend, dtype = spec.split(":")
        options = dataclasses.replace(setup.options, backend=backend, dtype=dtype)
        model = load_model(options)
        started = time.perf_counter()
        other = embed_texts(model, [p.embed_text for p in pieces], options)
        took = time.perf_counter() - started
        asked = embed_texts(model, [q.question for q in setup.questions], options)
        cosine = float(np.mean(np.sum(other * vectors, axis=1)))
        for stored_dtype in ("float32", "int8"):
            kept = other
            if stored_dtype == "int8":
                rows = [stored(v, "int8") for v in other]
                kept = dequantized(np.asarray([r[0] for r in rows], dtype=np.float32),
                                   np.asarray([r[1] for r in rows]))
                kept /= np.linalg.norm(kept, axis=1, keepdims=True)
            other_dense = asked @ kept.T
            other_hybrid = np.stack([fused(d, s) for d, s in zip(other_dense, sparse)])
            lost = [int(np.sum(hits_at_k(pieces, base, setup.questions, setup.k)
                               & ~hits_at_k(pieces, new, setup.questions, setup.k)))
                    for base, new in ((dense, other_dense), (hybrid, other_hybrid))]
            label = (f"{name}, embed {backend} {dtype}, {stored_dtype} vectors (mean cosine to "
                     f"torch float32 {cosine:.4f}; questions lost at {setup.k}: dense {lost[0]}, "
                     f"hybrid {lost[1]})")
            smaller += [
                Row(label + " dense", evaluate_scores(pieces, other_dense, setup.questions, setup.k), took),
                Row(label + " hybrid", evaluate_scores(pieces, other_hybrid, setup.questions, setup.k),
                    took + weighed),
            ]
    drifted = []
    drift = SparseOptions().reference_drift
    for scale in (1 - drift, 1 + drift):
        # The worst a carried reference may be off before a run re-bases it.
        off = bm25_scores(pieces, setup.questions, scale)
        off_hybrid = np.stack([fused(d, s) for d, s in zip(dense, off)])
        drifted += [
            Row(name + f", sparse BM25, reference mean x{scale:.2f}",
                evaluate_scores(pieces, off, setup.questions, setup.k), seconds + weighed),
            Row(name + f", hybrid (RRF), reference mean x{scale:.2f}",
                evaluate_scores(pieces, off_hybrid, setup.questions, setup.k), embedded + weighed),
        ]
    return [
        Row(name + " (dense)", evaluate_scores(pieces, dense, setup.questions, setup.k), embedded),
        Row(name + ", sparse BM25", evaluate_scores(pieces, sparse, setup.questions, setup.k),
            seconds + weighed),
        Row(name + ", hybrid (RRF)", evaluate_scores(pieces, hybrid, setup.questions, setup.k),
            embedded + weighed),
        *drifted,
        *smaller,
    ]


def _late_row(setup: Setup, name: str, pieces: list[Piece], seconds: float) -> Row:
    """The same chunk spans, vectors by late chunking over each whole document."""
    started = time.perf_counter()
    ordered = [p for doc in setup.docs for p in pieces if p.doc == doc]
    vectors = np.concatenate([
        setup.late.vectors(text, [(p.start, p.end) for p in ordered if p.doc == doc])
        for doc, text in setup.docs.items()
    ])
    seconds += time.perf_counter() - started
    metrics = evaluate(ordered, vectors, setup.questions, setup.question_vectors, setup.k)
    return Row(name, metrics, seconds)


def table(results: dict[int, list[Row]], k: int) -> str:
    lines = [
        (f"| budget | row | R@1 | R@{k} | R@1 heading-only | IoU@{k} | answers cut | chunks | "
         f"mean tok | max tok | s |"),
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for budget, rows in results.items():
        for row in rows:
            m = row.metrics
            lines.append(
                f"| {budget} | {row.name} | {m['r1']:.1%} | {m['rk']:.1%} | "
                f"{'n/a' if math.isnan(m['r1_heading']) else format(m['r1_heading'], '.1%')} | {m['iou']:.1%} | {m['cut']} | {m['chunks']} | "
                f"{m['mean_tokens']:.0f} | {m['max_tokens']} | {row.seconds:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[222],
                        help="split budgets in MiniLM tokens (default: 222, the pipeline's)")
    parser.add_argument("--reserve", type=int, default=32,
                        help="tokens of heading path prepended in the '+ heading path' rows")
    parser.add_argument("--k", type=int, default=5, help="retrieved chunks per question")
    parser.add_argument("--late-window", type=int, default=None,
                        help="late chunking window in tokens (default: the model's 254)")
    parser.add_argument("--merge-below", type=int, nargs="*", default=[32, 64, 111],
                        help="merged-sections rows: sections under this many tokens share chunks")
    parser.add_argument("--labels", type=Path, default=LABELS,
                        help="labelled set: docs/*.md|txt and questions.jsonl (default: "
                             "bench/retrieval; bench/faq_set.py writes one from real FAQs)")
    parser.add_argument("--backends", nargs="*", default=["torch:bfloat16", "onnx:float32", "onnx:int8"],
                        help="embed.backend:dtype rows beside torch float32")
    parser.add_argument("--quick", action="store_true",
                        help="only the recursive + heading path rows (dense, sparse, hybrid, "
                             "stored dtypes, backends)")
    parser.add_argument("--check", action="store_true",
                        help="only check the labelled set's answer spans")
    args = parser.parse_args(argv)
    docs, questions = load_labels(args.labels)
    if args.check:
        print(f"{len(questions)} questions over {len(docs)} documents: every answer span matches")
        return 0
    options = EmbedOptions(model=MODEL)
    model = load_model(options)
    tok = get_tokenizer(f"hf:{MODEL}")
    late = LateChunker(model, LateOptions(window=args.late_window))
    question_vectors = embed_texts(model, [q.question for q in questions], options)
    setup = Setup(docs, questions, question_vectors, model, tok, options, late, args.k,
                  tuple(args.backends), args.quick)
    results = {budget: run(setup, budget, args.reserve, args.merge_below) for budget in args.max_tokens}
    heading = sum(q.needs_heading for q in questions)
    tokens = sum(tok.count(t) for t in docs.values())
    print(f"{len(questions)} questions ({heading} heading-only) over {len(docs)} documents, "
          f"{tokens} MiniLM tokens; {MODEL}, cosine top-{args.k}, late chunking windows of "
          f"{late.window} tokens, stride {late.stride}\n")
    print(table(results, args.k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
