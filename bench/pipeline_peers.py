"""chunkline against the peer ingestion stacks, end to end: the same corpus of real text, the
same model, the same threads, each system a fresh process, interleaved rounds.

    python bench/pipeline_peers.py [--mb 2] [--rounds 3] [--threads 2] [--systems a,b,...]

The last column is each system's speed against the fastest peer stack, median wall time over
median wall time. chunkline's process costs a little more to start than a bare ``encode``
script (9.5 s against 7.1 s at 0.05 MB) and its own stages add ~4 s per MB, while its
bfloat16 passes embed a MB in about a third of the peers' float32 time, so its ratio grows with
the corpus: 2 MB is the size bench/RESULTS.md reports the targets at, 1.58 MB and 1 MB beside.

The corpus: the long descriptions (READMEs) of the packages installed in this virtual
environment, from their ``*.dist-info/METADATA``, in name order, up to ``--mb``; real text that
this project did not write, Markdown and reStructuredText mixed as it comes.

Systems, every one at a budget of 256 all-MiniLM-L6-v2 tokens per embedded text (special
tokens and chunkline's heading prefix included), batches of 64, float32 unless named:

- ``chunkline-*``: ``python -m chunkline.pipeline.cli run`` with configs/local.yaml (read, clean, dedupe,
  split at 222 + 32 reserved for the heading path, BM25 sparse vectors, embed, Parquet), its
  ``embed.backend``/``embed.dtype`` as named, ``embed.threads`` = ``--threads``.
- ``llamaindex``: ``IngestionPipeline([SentenceSplitter(254, 0), HuggingFaceEmbedding])``
  (``llama-index-embeddings-huggingface``), the splitter counting MiniLM tokens.
- ``langchain``: ``RecursiveCharacterTextSplitter.from_huggingface_tokenizer(254, 0)`` and one
  ``SentenceTransformer.encode`` over all chunks with batch size 64: what
  ``langchain_huggingface.HuggingFaceEmbeddings.embed_documents`` calls (that package pins
  ``huggingface_hub < 2``, which transformers 5 cannot run with, so its one call is made here).
- ``beam-ml-rag``: Beam's own RAG transforms, ``MLTransform`` with ``LangChainChunker`` (the
  same LangChain splitter; its import guard bypassed, see :func:`beam_langchain_chunker`) and
  ``HuggingfaceTextEmbeddings`` (batches of 64), on the FnApiRunner.

Tokens are counted the same way for every system, in the process, at the model:
``SentenceTransformer.forward`` is wrapped to add up each pass's attention mask (tokens read)
and its padded shape (positions computed). chunkline's ONNX rows count the same quantities in
its own embed stage (``tokens_embedded``, ``tokens_padded`` in the manifest). Wall time is the
whole process, imports and model load included, as a user waits for it; CPU time (user +
system, the process and its children) is what the system cost, and moves less than wall time
when other work shares the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from email.parser import BytesHeaderParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "all-MiniLM-L6-v2"
BUDGET = 256  # model tokens per embedded text, special tokens included
SPLIT = BUDGET - 2  # peers count tokens without [CLS] and [SEP]
BATCH = 64
CHUNKLINE = {
    "chunkline-float32": ("torch", "float32"),
    "chunkline-bfloat16": ("torch", "bfloat16"),
    "chunkline-onnx-int8": ("onnx", "int8"),
    "chunkline-onnx-float32": ("onnx", "float32"),
}
PEERS = ("llamaindex", "langchain", "beam-ml-rag")


# ------------------------------------------------------------------------------------ corpus


def readme_corpus(directory: Path, megabytes: float) -> tuple[int, int]:
    """Writes package READMEs as documents; returns (documents, bytes)."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    directory.mkdir(parents=True, exist_ok=True)
    written = count = 0
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        raw = metadata.read_bytes()
        headers = BytesHeaderParser().parsebytes(raw)
        body = raw.split(b"\n\n", 1)[1].decode("utf-8", errors="replace") if b"\n\n" in raw else ""
        if len(body) < 2000:
            continue
        suffix = ".rst" if "rst" in str(headers.get("Description-Content-Type", "")) else ".md"
        name = metadata.parent.name.split("-")[0].lower()
        # chunkline reads .md and .txt; reStructuredText goes in as text.
        (directory / f"{name}{'.md' if suffix == '.md' else '.txt'}").write_text(body, encoding="utf-8")
        written += len(body.encode("utf-8"))
        count += 1
        if written >= megabytes * 1_000_000:
            break
    return count, written


def cpu_name() -> str:
    """The CPU as /proc/cpuinfo names it, with what decides chunkline's ``dtype: auto``: AMX
    and AVX512-BF16 (bfloat16 in hardware) or neither."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform

        return platform.processor() or "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                 if line.startswith("model name")), "unknown CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines()
                      if line.startswith("flags")), []))
    return (f"{name}, {os.cpu_count()} cores, AVX512-BF16 {'yes' if 'avx512_bf16' in flags else 'no'}, "
            f"AMX {'yes' if 'amx_tile' in flags else 'no'}")


def documents(directory: Path) -> list[tuple[str, str]]:
    return [(p.name, p.read_text(encoding="utf-8")) for p in sorted(directory.iterdir())]


# ------------------------------------------------------------------------------- a system run


class PassCounter:
    """Tokens read and positions computed by every SentenceTransformer forward pass here."""

    def __init__(self) -> None:
        from sentence_transformers import SentenceTransformer

        self.tokens = self.padded = self.passes = 0
        forward = SentenceTransformer.forward
        counter = self

        def counted(model, features, *args, **kwargs):
            mask = features["attention_mask"]
            counter.tokens += int(mask.sum())
            counter.padded += int(mask.numel())
            counter.passes += 1
            return forward(model, features, *args, **kwargs)

        SentenceTransformer.forward = counted


def model_dir() -> str:
    from chunkline.embedder import resolve_model_dir

    return str(resolve_model_dir(MODEL))


def truncated_share(texts: list[str]) -> float:
    from chunkline.embedder import EmbedOptions, load_model, token_lengths

    lengths = token_lengths(load_model(EmbedOptions()), texts)
    return sum(n > BUDGET for n in lengths) / max(len(lengths), 1)


def run_chunkline(system: str, corpus: Path, threads: int) -> dict:
    backend, dtype = CHUNKLINE[system]
    with tempfile.TemporaryDirectory() as output:
        subprocess.run(
            [sys.executable, "-m", "chunkline.pipeline.cli", "run", "--config", "configs/local.yaml",
             "--input", f"{corpus}/**", "--output", output,
             "--set", f"embed.backend={backend}", "--set", f"embed.dtype={dtype}",
             "--set", f"embed.threads={threads}", "--set", f"embed.batch_size={BATCH}"],
            cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        latest = (Path(output) / "LATEST").read_text().strip()
        from chunkline.index.manifest import load_manifest

        counts = dict(load_manifest(str(Path(output) / latest)).counts)
        import pyarrow.parquet as pq

        texts = [t for p in sorted((Path(output) / latest).glob("chunks-*.parquet"))
                 for t in pq.read_table(p, columns=["search_text"]).column(0).to_pylist()]
    return {"chunks": counts["chunks"], "tokens": counts["tokens_embedded"],
            "padded": counts["tokens_padded"], "texts": texts}


def run_llamaindex(corpus: Path) -> dict:
    from llama_index.core import Document
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    splitter = SentenceSplitter(chunk_size=SPLIT, chunk_overlap=0,
                                tokenizer=lambda text: tokenizer.encode(text, add_special_tokens=False))
    embed = HuggingFaceEmbedding(model_name=model_dir(), embed_batch_size=BATCH, device="cpu",
                                 max_length=BUDGET)
    nodes = IngestionPipeline(transformations=[splitter, embed]).run(
        documents=[Document(text=text, metadata={"file": name}) for name, text in documents(corpus)])
    return {"chunks": len(nodes), "texts": [n.get_content() for n in nodes]}


def langchain_splitter():
    from langchain_text_splitters import RecursiveCharacterTextSplitter
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    return RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        tokenizer, chunk_size=SPLIT, chunk_overlap=0)


def run_langchain(corpus: Path) -> dict:
    from sentence_transformers import SentenceTransformer

    chunks = langchain_splitter().create_documents(
        [text for _, text in documents(corpus)], metadatas=[{"file": n} for n, _ in documents(corpus)])
    texts = [c.page_content for c in chunks]
    model = SentenceTransformer(model_dir(), device="cpu", local_files_only=True)
    model.max_seq_length = BUDGET
    model.encode(texts, batch_size=BATCH, show_progress_bar=False)
    return {"chunks": len(texts), "texts": texts}


def beam_langchain_chunker():
    """Beam's ``LangChainChunker`` without its import guard: it checks for
    ``langchain.text_splitter``, a module LangChain 1.0 removed (the splitters live in
    ``langchain-text-splitters`` now), so it refuses every splitter. Its own DoFn does the work."""
    import apache_beam as beam
    from apache_beam.ml.rag.chunking.base import ChunkingTransformProvider
    from apache_beam.ml.rag.chunking.langchain import _LangChainTextSplitter

    class LangChainChunker(ChunkingTransformProvider):
        def __init__(self) -> None:
            super().__init__(None)
            self.splitter = langchain_splitter()

        def get_splitter_transform(self):
            return "Langchain text split" >> beam.ParDo(
                _LangChainTextSplitter(text_splitter=self.splitter, document_field="content",
                                       metadata_fields=["file"]))

    return LangChainChunker()


def run_beam_ml_rag(corpus: Path) -> dict:
    import apache_beam as beam
    from apache_beam.ml.rag.embeddings.huggingface import HuggingfaceTextEmbeddings
    from apache_beam.ml.transforms.base import MLTransform
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    with tempfile.TemporaryDirectory() as artifacts:
        out = Path(artifacts) / "chunks.jsonl"
        with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions()) as pipeline:
            _ = (
                pipeline
                | beam.Create([{"content": text, "file": name} for name, text in documents(corpus)])
                | MLTransform(write_artifact_location=artifacts)
                .with_transform(beam_langchain_chunker())
                .with_transform(HuggingfaceTextEmbeddings(
                    model_name=model_dir(), max_seq_length=BUDGET, min_batch_size=BATCH,
                    max_batch_size=BATCH))
                | beam.Map(lambda chunk: json.dumps(chunk.content.text))
                | beam.combiners.ToList()
                | beam.Map(lambda rows: out.write_text("\n".join(rows)))
            )
        texts = [json.loads(line) for line in out.read_text().splitlines() if line]
    return {"chunks": len(texts), "texts": texts}


def child(system: str, corpus: Path, threads: int, texts_file: Path) -> dict:
    """One system in this (fresh) process. Its embedded texts go to ``texts_file``: the
    truncation check loads a model of its own, which is the bench's cost, not the system's, so
    the parent runs it after the timed process has exited."""
    if system in CHUNKLINE:  # chunkline's own process sets its threads (embed.threads)
        result = run_chunkline(system, corpus, threads)
    else:
        import torch

        torch.set_num_threads(threads)
        counter = PassCounter()
        result = {"llamaindex": run_llamaindex, "langchain": run_langchain,
                  "beam-ml-rag": run_beam_ml_rag}[system](corpus)
        result.update(tokens=counter.tokens, padded=counter.padded)
    texts_file.write_text(json.dumps(result.pop("texts")), encoding="utf-8")
    return result


# ---------------------------------------------------------------------------------- the rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=2.0, help="corpus size in MB of README text")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch / ONNX Runtime threads")
    parser.add_argument("--systems", default=",".join([*CHUNKLINE, *PEERS]))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--texts", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"
    if args.child:
        sys.path.insert(0, str(ROOT))
        print(json.dumps(child(args.child, args.corpus, args.threads, args.texts)))
        return 0
    systems = args.systems.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        docs, size = readme_corpus(corpus, args.mb)
        print(f"corpus: {docs} package READMEs, {size / 1e6:.2f} MB; {MODEL}, {args.threads} "
              f"threads, batch {BATCH}, {BUDGET} tokens per text; {args.rounds} rounds\n"
              f"CPU: {cpu_name()}\n", flush=True)
        seen: dict[str, list[dict]] = {s: [] for s in systems}
        for round_ in range(args.rounds):
            order = systems if round_ % 2 == 0 else systems[::-1]
            for system in order:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--child", system,
                     "--corpus", str(corpus), "--threads", str(args.threads),
                     "--texts", str(Path(tmp) / f"{system}.json")],
                    cwd=ROOT, capture_output=True, text=True)
                wall = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                if done.returncode:
                    print(f"{system} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
                    return 1
                result = json.loads(done.stdout.strip().splitlines()[-1])
                result["wall"], result["cpu"] = wall, cpu
                seen[system].append(result)
                print(f"round {round_ + 1} {system}: {wall:.1f} s wall, {cpu:.1f} s cpu "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
        for system, runs in seen.items():  # untimed: the last round's texts of each system
            texts = json.loads((Path(tmp) / f"{system}.json").read_text(encoding="utf-8"))
            runs[-1]["truncated"] = truncated_share(texts)
    medians = {system: statistics.median(r["wall"] for r in runs) for system, runs in seen.items()}
    peers = [medians[s] for s in seen if s in PEERS]
    fastest_peer = min(peers) if peers else None
    print("\n| system | wall s best / median | cpu s best / median | chunks | embedded tokens | "
          "padded tokens | padded / embedded | truncated | vs fastest peer |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for system, runs in seen.items():
        walls, cpus = [r["wall"] for r in runs], [r["cpu"] for r in runs]
        last = runs[-1]
        ratio = f"{fastest_peer / medians[system]:.2f}x" if fastest_peer else "-"
        print(f"| {system} | {min(walls):.1f} / {medians[system]:.1f} | "
              f"{min(cpus):.1f} / {statistics.median(cpus):.1f} | {last['chunks']:,} | "
              f"{last['tokens']:,} | {last['padded']:,} | {last['padded'] / last['tokens']:.2f}x | "
              f"{last['truncated']:.1%} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
