"""The driver's decisions before the job: preflight checks that fail in a second instead of an
hour in, the split budget derived from the model, the embedding signature, and which of the
previous run's shards may lend their vectors."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata as distributions
from pathlib import Path

import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from chunkline.index import storage
from chunkline.state import STATE_TABLE
from chunkline.access import AccessPolicy, load_policy
from chunkline.carry import CARRY_TABLE
from chunkline.context import context_reserve, resolve_api_key
from chunkline.index.layout import CACHE, LATEST, PROBE, format_run_id
from chunkline.index.manifest_types import Manifest
from chunkline.index.tables import Deletions, has_table, listed_file_problem, live_files
from chunkline.records import in_memory_schema
from chunkline.memo import MEMO_DIR, Listed, MemoSource, retired, shares_for
from chunkline.sizers import model_fingerprint
from chunkline.splitting.options import split_budget
from chunkline.pipeline.config import Config, to_dict
from chunkline.pipeline.manifest import (ManifestError, complete_runs, latest_run, load_manifest, resolve_run,
                               table_files)
from chunkline.pipeline.options import StageOptions, stage_options
from chunkline.transforms.carry import CarrySource
from chunkline.index.compaction import Compaction, compaction_allowed
from chunkline.transforms.write import same_output

log = logging.getLogger("chunkline.run")


@dataclass(frozen=True)
class Plan:
    """What the driver decided before building: where, and the derived split budget."""

    run_dir: str
    tokenizer_spec: str
    max_tokens: int
    dim: int | None
    embedding_signature: str = "none"
    previous_run: str | None = None  # the run whose vectors may be reused
    previous_files: tuple[str, ...] = ()  # its chunk shards that passed the driver's checks
    reuse_skipped: tuple[str, ...] = ()  # its shards left out, and why
    normalize: bool = False  # reused vectors must then be unit length
    options: StageOptions | None = None  # the library options of every stage, from the config
    # The BM25 reference mean length of the run this one follows (its stored weights stay
    # comparable: ``chunkline.sparse.reference_length``); None: start from the corpus's own.
    bm25_reference: float | None = None
    bm25_note: str | None = None  # why the previous reference was not carried, when it was not
    # What unchanged documents' rows are carried from (transforms/carry.py); its signature is
    # written with every run, its pairs empty on a first run or when nothing may be carried.
    carry: CarrySource | None = None
    carry_note: str | None = None  # why the previous run lends no rows, when it lends none
    # Per-text results of the corpus-wide stages, recalled from the previous run and recorded
    # for the next (chunkline/memo.py); None with output.carry off.
    memo: MemoSource | None = None
    # Who may read each document (chunkline/access.py), the mapping file read here, once; None
    # with access control off.
    access: AccessPolicy | None = None
    # Key-space shares of the per-document groupings (transforms/shares.py), from the size of
    # the run this one follows.
    join_shares: int = 1024
    # The terms file of the run this one follows (output.carry on): referenced when this run's
    # document frequencies are the same.
    previous_terms: tuple[str, ...] = ()
    # The state table of the run this one follows (chunkline/state.py), each file with its
    # deleted row positions: this run's rows equal to a live one there stay there.
    previous_state: tuple[tuple[str, Deletions], ...] = ()
    # What the settled documents' decisions were made under (:func:`settle_signature`), kept
    # with this run; and the previous run's folder when its signature is this one's, so a
    # rerun passes its unchanged documents by (transforms/settle.py); None: it processes all.
    settle_signature: str = ""
    settle_from: str | None = None
    # Whether this run erases what is no longer live (:func:`erases`): every previous file
    # holding a dead row rewritten, every memo segment retired.
    erase: bool = False


SETTLE_SIGNATURE = "settle-signature"


@dataclass(frozen=True)
class Followed:
    """The run this one follows (``output.previous``'s, else the output's LATEST), resolved and
    its manifest validated once for every decision of the plan that reads it (what is reused,
    carried, recalled, settled, referenced, erased). ``manifest`` None: no such run, or one whose
    manifest does not validate (``problem``: why; reuse raises it, the rest start afresh, and the
    publish guard reports it). Each decision keeps its own switch (``output.reuse_latest``,
    ``output.carry``, ...)."""

    run_dir: str | None = None
    manifest: Manifest | None = None
    problem: str | None = None


def followed(config: Config) -> Followed:
    """:class:`Followed` of ``config``."""
    try:
        run_dir = (resolve_run(config.output.previous) if config.output.previous
                   else latest_run(config.output.path))
    except ManifestError as exc:
        return Followed(problem=str(exc))
    if run_dir is None:
        return Followed()
    try:
        return Followed(run_dir, load_manifest(run_dir))
    except ManifestError as exc:
        return Followed(run_dir, None, str(exc))


def _follows_on(config: Config) -> bool:
    """Whether the run follows one at all for its carried state: ``output.previous`` given, or
    ``output.reuse_latest`` on."""
    return bool(config.output.previous or config.output.reuse_latest)


def settle_signature(config: Config, carry: str) -> str:
    """Digest of everything that decides a document's text and fate up to dedupe (read,
    clean, credentials, boilerplate, dedupe, the shard counts the state and documents tables
    are cut into) beside ``carry`` (what decides its rows after): equal, a previous decision on
    an unchanged document holds."""
    from chunkline.carry import processing_signature

    sections = to_dict(config)
    settings = {name: sections.get(name) for name in ("input", "clean", "secrets", "boilerplate",
                                                      "dedupe")}
    settings.update({"document_shards": config.output.document_shards,
                     "chunk_shards": config.output.chunk_shards, "carry": carry,
                     "code": source_fingerprint()})
    return hashlib.blake2b(processing_signature(settings).encode(), digest_size=16).hexdigest()


def settle_from(config: Config, signature: str, state: tuple, carry: CarrySource | None,
                follows: Followed | None = None) -> str | None:
    """The previous run's folder when its settled decisions hold for this run: it kept a state
    table, its chunks may be carried, it lies in this output, and it was made under
    ``signature``. Access control leaves it off (the mapping decides principals outside the
    config)."""
    if not state or carry is None or not carry.pairs or config.access is not None:
        return None
    run_dir = (follows or followed(config)).run_dir
    try:
        # A run of another output lends its decisions to none: this run's tables can only
        # reference files of its own output (WriteParquetShards(keep=)).
        def absolute(path: str) -> str:
            return path if "://" in path else os.path.abspath(path)

        if run_dir is None or not same_output(storage.join(absolute(run_dir), "x"),
                                              storage.join(absolute(config.output.path), "run", "x")):
            return None
        kept = storage.read_bytes(storage.join(run_dir, SETTLE_SIGNATURE)).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return run_dir if kept == signature else None


class PreflightError(ValueError):
    """The config cannot run here; found on the driver before the job starts."""


def _absolute(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


def _absolute_spec(spec: str) -> str:
    """A tokenizer spec's local path made absolute (``hf:models/x``); a name stays a name."""
    kind, sep, rest = spec.partition(":")
    return f"{kind}:{os.path.abspath(rest)}" if sep and "://" not in rest and os.path.exists(rest) else spec


def absolute_paths(config: Config) -> Config:
    """``config`` with every local path the workers open made absolute against this process's
    working directory: the input pattern, the output, the previous index, and a model or
    tokenizer given as a local directory (a name stays a name). A worker runs elsewhere (an
    EXTERNAL pool's own directory, a container): a relative path would be read, and written,
    under its working directory, not the driver's."""
    input_ = config.input.model_copy(update={"pattern": _absolute(config.input.pattern)})
    output = config.output.model_copy(update={
        "path": _absolute(config.output.path),
        "previous": None if config.output.previous is None else _absolute(config.output.previous)})
    split = config.split
    if split.tokenizer is not None:
        split = split.model_copy(update={"tokenizer": _absolute_spec(split.tokenizer)})
    embed = config.embed
    if embed is not None and "://" not in embed.model and os.path.isdir(embed.model):
        embed = embed.model_copy(update={"model": os.path.abspath(embed.model)})
    return config.model_copy(update={"input": input_, "output": output, "split": split, "embed": embed})


def embedding_signature(config: Config, model_dir: Path, max_seq_length: int) -> str:
    """Everything besides the text that decides a vector; part of every chunk's content key."""
    if config.embed is None:
        return "none"
    from chunkline.embedder import resolve_dtype

    e = config.embed
    signature = {"model": e.model, "weights": model_fingerprint(model_dir),
                 "dtype": resolve_dtype(e.options()),
                 "normalize": e.normalize, "max_seq_length": max_seq_length, "mode": e.mode}
    if e.dims is not None:
        signature["dims"] = e.dims
    if e.backend != "torch":
        # torch keeps the keys of earlier releases; vectors of two backends are never mixed.
        signature["backend"] = e.backend
    if config.output.vector_dtype != "float32":
        # Stored float32 vectors keep the keys of earlier releases; a smaller storage never
        # lends a vector to, nor takes one from, another.
        signature["vector_dtype"] = config.output.vector_dtype
    if e.mode == "late":
        # The keys of earlier releases, so a rerun still finds the vectors it may reuse.
        signature.update(late_window=e.late.window, late_stride=e.late.stride)
    return json.dumps(signature, sort_keys=True)


def previous_run(config: Config, follows: Followed | None = None) -> str | None:
    """The run directory whose vectors may be reused: ``output.previous`` (an output root or a run
    directory; naming nothing is an error), else this output's LATEST run when ``reuse_latest``
    is on; None for a first run or with reuse off."""
    if config.embed is None:
        return None
    if not _follows_on(config):
        return None
    follows = follows or followed(config)
    if follows.run_dir is None:
        if follows.problem is not None:  # a LATEST naming no run with a manifest
            raise ManifestError(follows.problem)
        if config.output.previous:
            raise ManifestError(f"--previous / output.previous {config.output.previous}: no "
                                f"manifest.json there and no LATEST naming a run")
    return follows.run_dir


def bm25_reference(config: Config, follows: Followed | None = None) -> tuple[float | None, str | None]:
    """(the reference mean length this run's BM25 weights carry on, why none is carried): the
    published run's (``output.previous``'s when given), so that an unchanged chunk's stored
    weights, and its row in every store synced from the index, stay as they were. Not carried
    from a run with other analysis (its lengths are counted in other terms) or written before
    stored weights left IDF to the query; k1 and b may change (the rows change anyway)."""
    if config.sparse is None:
        return None, None
    follows = follows or followed(config)
    # Without a manifest that validates: reuse and the publish guard say what is wrong with it.
    run_dir = follows.run_dir
    bm25 = follows.manifest.bm25 if follows.manifest is not None else None
    if bm25 is None or run_dir is None:
        return None, None
    if bm25.weights != "tf":
        return None, (f"BM25 re-based: {run_dir.rstrip('/').rsplit('/', 1)[-1]} stored IDF in its "
                      f"weights (an older chunkline); every row is rewritten once")
    if not bm25.reference_avgdl:
        return None, None  # its chunks held no term: this run sets the reference
    if (bm25.stemmer, bm25.stop_words) != (config.sparse.stemmer, config.sparse.stop_words):
        return None, "BM25 re-based: the analysis changed (stemmer or stop words); every row is rewritten once"
    return float(bm25.reference_avgdl), None


_ROOT = Path(__file__).resolve().parents[1]


def carry_signature(config: Config, tokenizer_spec: str, max_tokens: int, embedding: str,
                    dim: int | None) -> str:
    """Digest of everything after deduplication that shapes a document's rows: the split,
    context and embed sections, the BM25 analysis (k1 and b are applied as shards are written),
    the chunk metadata and vector storage, the derived budget, the code and libraries."""
    from chunkline.carry import library_versions, processing_signature

    sections = to_dict(config)
    sparse = None if config.sparse is None else {
        "stemmer": config.sparse.stemmer, "stop_words": config.sparse.stop_words}
    settings = {
        "split": sections.get("split"), "context": sections.get("context"),
        "embed": sections.get("embed"), "sparse": sparse,
        "chunk_metadata": config.output.chunk_metadata, "vector_dtype": config.output.vector_dtype,
        "tokenizer": tokenizer_spec, "max_tokens": max_tokens, "embedding_signature": embedding,
        "dim": dim, "code": source_fingerprint(),
        "libraries": library_versions(),
        # On, the rows have a principals column (a run without one lends none); each document's
        # principals, whatever source or mapping gave them, are in its carry key.
        "access": config.access is not None,
    }
    return hashlib.blake2b(processing_signature(settings).encode(), digest_size=16).hexdigest()


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """The digest of the library's and the stages' code, read once per process: both the carry
    signature and the memo's settings name it."""
    from chunkline.carry import code_fingerprint

    return code_fingerprint([_ROOT / "chunkline", _ROOT / "transforms"])


def memo_settings() -> str:
    """What decides a memoized result besides its text and stage settings: the code (the
    library computes each result, the stages encode it) and the versions of the libraries it
    computes with."""
    from chunkline.carry import library_versions

    versions = library_versions()
    for name in ("detect-secrets", "numpy"):
        try:
            versions[name] = distributions.version(name)
        except distributions.PackageNotFoundError:
            continue
    return json.dumps({"code": source_fingerprint(), "libraries": versions}, sort_keys=True)


def memo_source(config: Config, run_dir: str, erase: bool = False,
                follows: Followed | None = None) -> MemoSource | None:
    """This run's memo folder, and the segments the previous run (the run carry follows) lists
    in its manifest's ``memo`` table, at any size: each reader loads only the shares of what it
    reads (``chunkline.memo``). This run's memo is cut into shares for the listed segments'
    size (``shares_for``); the segments it will not list again are ``retired``
    (``chunkline.memo.retired``); with ``erase``, every one: what this run recalls is written
    again, and an entry no document of this run asks for (one of a document gone, or kept under
    other credential settings) is in no segment this run lists."""
    if not config.output.carry:
        return None
    write_dir = FileSystems.join(run_dir, MEMO_DIR)
    listed: list[Listed] = []
    previous = None
    if _follows_on(config):
        follows = follows or followed(config)
        previous = follows.run_dir
        # No manifest that validates (or a run of an older version): everything is computed.
        listed = list(follows.manifest.listing.memo or ()) if follows.manifest is not None else []
    if previous is None or not listed:
        return MemoSource(write_dir, settings=memo_settings(), shares=shares_for(0))
    root = previous.rstrip("/").rsplit("/", 1)[0]
    paths = tuple(FileSystems.join(root, *segment.path.split("/")) for segment in listed)
    shares = shares_for(sum(segment.bytes for segment in listed))
    # A manifest lists only its own output's files (by paths relative to it).
    same = root == run_dir.rstrip("/").rsplit("/", 1)[0]
    gone = frozenset(range(len(listed))) if erase else retired(listed, shares, same_output=same)
    return MemoSource(write_dir, paths, memo_settings(), shares, tuple(listed), gone)


def carry_pairs(config: Config, signature: str, erase: bool = False, follows: Followed | None = None
                ) -> tuple[list[tuple[str, str]], list[tuple[str, Deletions]], str | None,
                           list[tuple[Deletions, Deletions]], Compaction]:
    """(the (chunk shard, carry sidecar) pairs of the run this one follows whose rows may be
    carried, that run's documents shards with their deleted rows, why there are no pairs, each
    pair's deleted rows, of the shard and of the sidecar, the chunk and documents shards this
    run may compact: ``chunkline.transforms.write.compaction_allowed`` of each table): the published run
    (``output.previous``'s when given, none with ``reuse_latest`` off); pairs only when it was
    made under the same processing signature. A pair may lie in an earlier run's folder, and
    some of its rows may be deleted (``chunkline.index.tables``): they are never carried.
    Deleted rows are :class:`Deletions`, references to their shard's deletion file: the
    driver reads none (the worker that reads a shard reads its). Every row is checked again in
    the job; the documents tell an edited document from one only a corpus-wide change moved."""
    if not config.output.carry:
        return [], [], None, [], Compaction()
    if not _follows_on(config):
        return [], [], None, [], Compaction()
    follows = follows or followed(config)
    run_dir, manifest = follows.run_dir, follows.manifest
    if run_dir is None or manifest is None:  # reuse and the publish guard say what is wrong with it
        return [], [], None, [], Compaction()
    name = run_dir.rstrip("/").rsplit("/", 1)[-1]
    shards = live_files(run_dir, manifest, "documents")
    documents = [(file.path, file.deletions) for file in shards]
    compactable = compaction_allowed(shards, purge=erase)
    sidecars = live_files(run_dir, manifest, CARRY_TABLE)
    if not sidecars:
        return [], documents, (f"{name} has no carry sidecars (an older chunkline): every document "
                               "is computed"), [], compactable
    if manifest.carry_signature != signature:
        return [], documents, (f"{name} was made with other processing (split, context, embed or "
                               f"BM25 settings, or the code): every document is computed"), [], compactable
    # A sidecar is carry-SSSSS-of-NNNNN.parquet beside its chunks-SSSSS-of-NNNNN.parquet, its
    # rows aligned with the shard's: the same positions are deleted in both (counted here,
    # compared where the pair is verified, transforms/carry.py's verify_pair).
    by_shard = {(side.folder, side.name.rsplit("/", 1)[-1].split("-", 1)[1]): side
                for side in sidecars if "-" in side.name.rsplit("/", 1)[-1]}
    pairs, deleted = [], []
    chunk_files = live_files(run_dir, manifest, "chunks")
    for chunks in chunk_files:
        base = chunks.name.rsplit("/", 1)[-1]
        side = by_shard.get((chunks.folder, base.split("-", 1)[1])) if "-" in base else None
        if side is not None and side.deletions.count == chunks.deletions.count:
            pairs.append((chunks.path, side.path))
            deleted.append((chunks.deletions, side.deletions))
    return pairs, documents, None, deleted, compactable | compaction_allowed(chunk_files, purge=erase)


def carry_source(config: Config, signature: str, dim: int | None, normalize: bool, erase: bool = False,
                 follows: Followed | None = None) -> tuple[CarrySource, str | None]:
    """What the carry stage is handed (:func:`carry_pairs`, as a :class:`CarrySource`), and why
    nothing may be carried. It holds paths and, for deleted rows, references to the shards'
    deletion files, never positions: pickled into every carry worker, it stays the size of the
    previous run's file list whatever it deletes."""
    pairs, documents, note, deleted, compactable = carry_pairs(config, signature, erase, follows)
    return CarrySource(tuple(pairs), signature,
                       tuple(config.output.chunk_metadata) if config.output.chunk_metadata is not None else None,
                       dim, normalize, documents=tuple(path for path, _ in documents),
                       deleted=tuple(deleted) if any(c.count or s.count for c, s in deleted) else (),
                       documents_deleted=tuple(gone for _, gone in documents)
                       if any(gone.count for _, gone in documents) else (), compactable=compactable), note


def previous_terms(config: Config, follows: Followed | None = None) -> tuple[str, ...]:
    """The BM25 terms files of the run carry follows (those with none of their rows deleted),
    each of which this run references where its share's terms are the same; none with carry or
    sparse vectors off."""
    if not config.output.carry or config.sparse is None or not _follows_on(config):
        return ()
    follows = follows or followed(config)
    if follows.run_dir is None or follows.manifest is None:
        return ()
    files = live_files(follows.run_dir, follows.manifest, "terms")
    return tuple(file.path for file in files if not file.deletions.count)


def previous_state(config: Config, follows: Followed | None = None) -> tuple[tuple[str, Deletions], ...]:
    """The state table of the run carry follows (``chunkline.state``), each file with its
    deleted rows (by reference: read where they are needed, never here); none with carry off,
    or before a run kept one."""
    if not config.output.carry or not _follows_on(config):
        return ()
    follows = follows or followed(config)
    if follows.run_dir is None or follows.manifest is None:
        return ()
    files = live_files(follows.run_dir, follows.manifest, STATE_TABLE)
    for file in files:
        problem, _ = listed_file_problem(file, digest=False)  # its size, footer and rows
        if problem is not None:
            # Settled documents are decided from this table: without the whole of it, none is
            # passed by, and every document is computed (a rerun costs more, never fails).
            log.warning("the previous run's state table is not usable (%s): every document is "
                        "computed again", problem)
            return ()
    return tuple((file.path, file.deletions) for file in files)


def reusable_files(run_dir: str, signature: str, dim: int,
                   manifest: Manifest | None = None) -> tuple[list[str], list[str]]:
    """(chunk shards of ``run_dir`` whose vectors may be reused, why others are not).

    The manifest is validated (ManifestError naming it when malformed); a run made with another
    model or settings has nothing to reuse; a shard whose footer cannot be read or whose schema
    has no content keys or vectors of ``dim`` is left out, named, and its chunks re-embedded.
    Every vector read is checked again in the job (``transforms/reuse.py``). A file listed with
    deleted rows (a format-2 manifest, ``chunkline.index.tables``) is offered whole: a deleted
    row's vector is still the vector of its content key, made under the same signature.
    ``manifest``: the run's, when the caller has validated it already."""
    manifest = manifest if manifest is not None else load_manifest(run_dir)
    if manifest.model is None or not has_table(manifest, "chunks"):
        return [], []
    if manifest.embedding_signature != signature:
        log.info("%s was embedded with other model settings: embedding everything", run_dir)
        return [], []
    if manifest.model.dim != dim:
        return [], [f"{run_dir}: manifest says {manifest.model.dim}-d vectors, the model "
                    f"gives {dim}-d: nothing reused"]
    usable, skipped = [], []
    for path in table_files(run_dir, manifest, "chunks"):
        try:
            with FileSystems.open(path) as handle:
                schema = in_memory_schema(pq.read_schema(handle))
        except Exception as exc:  # noqa: BLE001 - missing, truncated or not Parquet: all the same here
            skipped.append(f"{path}: unreadable ({type(exc).__name__}: {exc}); its chunks are re-embedded")
            continue
        vector = schema.field("embedding").type if "embedding" in schema.names else None
        if "content_key" not in schema.names or vector is None:
            skipped.append(f"{path}: no content_key or embedding column; its chunks are re-embedded")
        elif getattr(vector, "list_size", dim) != dim:
            skipped.append(f"{path}: {vector} vectors, not {dim}-d; its chunks are re-embedded")
        else:
            usable.append(path)
    for reason in skipped:
        log.warning("reuse: %s", reason)
    return usable, skipped


def check_device(device: str) -> None:
    """A device this machine has, or PreflightError (torch is imported only for a non-CPU one)."""
    if device == "cpu":
        return
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError as exc:
        raise PreflightError(f"embed.device {device!r} is not a torch device: {exc}") from None
    available = {"cpu": lambda: True, "cuda": torch.cuda.is_available,
                 "mps": lambda: torch.backends.mps.is_available()}.get(parsed.type)
    if available is None or not available():
        raise PreflightError(f"embed.device {device!r}: no {parsed.type} device on this machine")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise PreflightError(f"embed.device {device!r}: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")


def check_output_writable(output: str, run_id: str) -> None:
    """Write and delete a small probe file, so a read-only or unreachable output fails now,
    not after the whole job has run."""
    probe = FileSystems.join(output, f"{PROBE}{run_id}")
    try:
        with FileSystems.create(probe) as handle:
            handle.write(b"chunkline write probe\n")
        FileSystems.delete([probe])
    except Exception as exc:  # noqa: BLE001 - each filesystem raises its own errors
        raise PreflightError(f"output.path {output} is not writable: {exc}") from None


def check_input(pattern: str) -> None:
    """At least one file matches (one is enough to ask for: a corpus of millions is not listed
    twice)."""
    try:
        matched = FileSystems.match([pattern], limits=[1])[0].metadata_list
    except Exception as exc:  # noqa: BLE001 - a bad bucket, no permission: all say the same here
        raise PreflightError(f"input.pattern {pattern}: cannot list it: {exc}") from None
    if not matched:
        raise PreflightError(f"input.pattern {pattern} matches no file (a typo, or a disk that is "
                             f"not mounted?); nothing was run and LATEST is unchanged")


def check_output_apart(pattern: str, output: str) -> None:
    """The output may sit inside the corpus (it is never read back), but the corpus may not sit
    inside the output: every input would be excluded and the run would read nothing."""
    from chunkline.readers import input_root

    root = input_root(pattern)
    if "://" in root or "://" in output:
        if root.rstrip("/") == output.rstrip("/") or root.startswith(output.rstrip("/") + "/"):
            raise PreflightError(f"input.pattern {pattern} lies inside output.path {output}")
        return
    real_root, real_output = Path(root or ".").resolve(), Path(output).resolve()
    if real_root == real_output or real_output in real_root.parents:
        raise PreflightError(f"input.pattern {pattern} lies inside output.path {output}: every "
                             f"input would be skipped as output")


def check_latest(output: str, previous: str | None, start_over: bool) -> None:
    """A lost LATEST is not a first run: when ``output`` has no LATEST but holds complete runs
    (a cleanup script, a partial copy), a run would publish with nothing to compare with and
    reuse nothing, so it stops here, naming the newest complete run and the ways out:
    ``--previous`` to reuse and compare with a run, ``--start-over`` to index from nothing. An
    output with no run at all starts its first run."""
    if FileSystems.exists(FileSystems.join(output, LATEST)):
        if start_over:
            raise PreflightError(f"--start-over: {output}/LATEST names a run, so there is nothing "
                                 "to start over from; --set output.reuse_latest=false embeds "
                                 "everything again")
        return
    if start_over or previous:
        return
    runs = complete_runs(output)
    if runs:
        newest = runs[0].rstrip("/").rsplit("/", 1)[-1]
        raise PreflightError(
            f"{output} has no LATEST but holds {len(runs)} complete run(s), the newest {newest}: "
            f"LATEST was lost, and without it this run would reuse no vector and publish with no "
            f"guard. Restore it (echo {newest} > {output}/LATEST), or pass --previous "
            f"{FileSystems.join(output, newest)} to reuse that run and compare with it, or "
            f"--start-over to index from nothing")


def preflight(config: Config, run_id: str, start_over: bool = False) -> None:
    """Everything that can fail before the job, checked before it: the input matches files, the
    tokenizer spec loads, the device exists, the output is writable, a lost LATEST is not taken
    for a first run. (The model and the budget are checked by :func:`plan`.)"""
    from chunkline import TokenizerNotAvailable, get_tokenizer
    from chunkline.transforms.model_cache import local_tokenizer_spec

    check_input(config.input.pattern)
    check_output_apart(config.input.pattern, config.output.path)
    if config.split.tokenizer is not None:
        try:
            get_tokenizer(local_tokenizer_spec(config.split.tokenizer))
        except (ValueError, TokenizerNotAvailable, OSError) as exc:
            raise PreflightError(f"split.tokenizer {config.split.tokenizer!r}: {exc}") from None
    if config.embed is not None:
        check_device(config.embed.device)
    check_output_writable(config.output.path, run_id)
    check_latest(config.output.path, config.output.previous, start_over)
    if config.catalog is not None:  # reached, and its tables this output's, before any work
        from chunkline.index.iceberg import IcebergError, check

        try:
            check(config.output.path, config.catalog.spec())
        except IcebergError as exc:
            raise PreflightError(str(exc)) from None


def dims_probe_path(output: str, signature: str) -> str:
    """Where the ``embed.dims`` probe's result for one embedding signature is kept, beside the
    index: the model, weights, dtype, backend and width decide it, and the signature holds them."""
    key = hashlib.blake2b(signature.encode(), digest_size=12).hexdigest()
    return FileSystems.join(output, CACHE, "dims-probe", f"{key}.json")


def _cached_agreement(path: str, signature: str) -> float | None:
    try:
        with FileSystems.open(path) as handle:
            found = json.loads(handle.read())
    except Exception:  # noqa: BLE001 - missing, unreadable or damaged: measured again
        return None
    agreement = found.get("agreement") if isinstance(found, dict) else None
    if (found.get("signature") != signature or isinstance(agreement, bool)
            or not isinstance(agreement, (int, float)) or not -1 <= agreement <= 1):
        return None
    return float(agreement)


def warn_truncation(options, cache: tuple[str, str] | None = None) -> float:
    """Measure what ``embed.dims`` costs this model (``truncation_agreement`` on real probe
    sentences) and say it: a warning below 0.99, where the model was not trained for the size.
    ``cache``: (path, embedding signature): the result of an earlier run with that signature is
    said again without loading the model; a new one is kept there."""
    from chunkline.embedder import load_model, probe_texts, truncation_agreement

    agreement = _cached_agreement(*cache) if cache else None
    if agreement is None:
        agreement = truncation_agreement(load_model(options), options, probe_texts())
        if cache:
            try:
                with FileSystems.create(cache[0]) as handle:
                    handle.write(json.dumps({"signature": cache[1], "agreement": agreement}).encode())
            except Exception as exc:  # noqa: BLE001 - a cache that cannot be written costs a probe
                log.warning("could not keep the embed.dims probe's result at %s: %s", cache[0], exc)
    message = (f"embed.dims={options.dims}: pairwise similarities of 64 probe sentences keep a "
               f"Spearman correlation of {agreement:.3f} with the full vectors")
    if agreement < 0.99:
        log.warning("%s; this model loses ranking quality at that size (not Matryoshka-trained "
                    "for it?)", message)
    else:
        log.info("%s", message)
    return agreement


def plan(config: Config, run_id: str, purge: bool = False) -> Plan:
    """Decide the split tokenizer and budget from the embedder, on the driver, before the job:
    budget = model max input - its special tokens - the heading reserve. With ``purge``, the
    run erases what is no longer live (:func:`erases`)."""
    from chunkline.embedder import EmbedOptions, model_info, resolve_dtype, resolve_model_dir
    from chunkline.transforms.model_cache import local_model_dir

    stages = stage_options(config)
    if stages.embed is not None:  # dtype auto decided here, once, for every worker
        stages = dataclasses.replace(
            stages, embed=dataclasses.replace(stages.embed, dtype=resolve_dtype(stages.embed)))
    options = stages.embed or EmbedOptions()  # embed: null still budgets for the model
    local = dataclasses.replace(options, model=local_model_dir(options.model))
    _, dim, max_seq_length, special = model_info(local)
    # A packaged name stays a name, so each worker resolves it in its own site-packages; a gs://
    # model stays a URI, fetched by each worker (transforms/model_cache.py).
    # The same budget with embed: null, so a dry run shows exactly the chunks that would be
    # embedded. Late chunking embeds the document itself, not prefix + chunk: nothing to reserve.
    late = config.embed is not None and config.embed.mode == "late"
    reserve = 0 if late else config.split.heading_reserve + context_reserve(stages.context)
    # The library's rule (the Beam composite budgets with it too); checked before the other
    # preflight errors, as it always was.
    tokenizer_spec, max_tokens = split_budget(config.split.options(), options.model, max_seq_length,
                                              special, reserve, embedded=config.embed is not None)
    if stages.context is not None:
        resolve_api_key(stages.context)  # a missing key fails here, not on every worker
    if stages.embed is not None and stages.embed.backend != "torch" and late:
        raise ValueError(f"embed.backend {stages.embed.backend} is not supported with embed.mode: "
                         f"late (late chunking reads the transformer's token vectors in torch)")
    if stages.embed is not None and stages.embed.dims is not None:
        if late:
            raise ValueError("embed.dims is not supported with embed.mode: late (late chunking "
                             "pools token vectors of the full width)")
    run_dir = FileSystems.join(config.output.path, run_id)
    signature = embedding_signature(config, resolve_model_dir(local.model), max_seq_length)
    if stages.embed is not None and stages.embed.dims is not None:
        warn_truncation(local, (dims_probe_path(config.output.path, signature), signature))
    follows = followed(config)  # the run this one follows, resolved once for every decision below
    try:
        previous = previous_run(config, follows)
        known = follows.manifest if previous == follows.run_dir else None
        files, skipped = reusable_files(previous, signature, dim, known) if previous else ([], [])
    except ManifestError as exc:
        raise ManifestError(f"{exc}\n  the previous run's vectors cannot be trusted: pass "
                            f"--set output.reuse_latest=false (or --previous another run) to "
                            f"embed everything, and --allow-shrink if it is the published run "
                            f"(the publish guard cannot compare with it either)") from None
    reference, reference_note = bm25_reference(config, follows)
    stored_dim = dim if config.embed is not None else None
    normalize = config.embed.normalize if config.embed is not None else False
    carry_key_signature = carry_signature(config, tokenizer_spec, max_tokens, signature, stored_dim)
    erase = erases(config, purge, follows)
    carry, carry_note = carry_source(config, carry_key_signature, stored_dim, normalize, erase, follows)
    state = previous_state(config, follows)
    settling = settle_signature(config, carry_key_signature)
    # A purge passes no document by: a settled document's memo entries include those of its
    # older texts, which a purge must not write again.
    return Plan(run_dir, tokenizer_spec, max_tokens, stored_dim,
                signature, previous, tuple(files), tuple(skipped), normalize, stages,
                reference, reference_note, carry, carry_note, memo_source(config, run_dir, erase, follows),
                access_policy(config), join_shares(config), previous_terms(config, follows),
                state, settling, None if purge else settle_from(config, settling, state, carry, follows), erase)


def erases(config: Config, purge: bool, follows: Followed | None = None) -> bool:
    """Whether this run leaves no byte of a row no longer live in a file its snapshot references
    (every previous file holding a dead row rewritten, :class:`Compaction`'s ``purge``) nor of
    a document gone in its memo (every segment retired): asked for (``chunkline run --purge``),
    or when the credential settings (mode, options, detection rules) differ from those of the
    run this one follows and credentials are screened now, since rows and memo entries written
    under the old settings may then hold what the new ones reject or redact."""
    if purge:
        return True
    if config.secrets.mode == "allow" or not _follows_on(config):
        return False
    manifest = (follows or followed(config)).manifest
    if manifest is None:
        return False
    from chunkline.credentials import rules_digest

    rules = (manifest.credentials or {}).get("rules")
    return manifest.config.get("secrets") != to_dict(config).get("secrets") or (
        rules is not None and rules != rules_digest())


# Documents per share of a per-document grouping: a share's keys are grouped in one worker's
# memory (thousands of small summaries), and a bundle sends a list per share it saw.
DOCUMENTS_PER_SHARE = 256


def join_shares(config: Config) -> int:
    """Shares for the per-document groupings: the published run's document count over
    :data:`DOCUMENTS_PER_SHARE`, within 16..65,536; 1,024 without one. The output does not
    depend on it, only how many lists carry the keys."""
    try:
        run_dir = latest_run(config.output.path)
        documents = load_manifest(run_dir).counts["documents"] if run_dir else None
    except (ManifestError, OSError, KeyError):
        documents = None
    if documents is None:
        return 1024
    return max(16, min(65536, documents // DOCUMENTS_PER_SHARE))


def access_policy(config: Config) -> AccessPolicy | None:
    """The run's access policy, its mapping file read on the driver (local or gs://), its paths
    relative to the input root; None with access control off. AccessError (a ValueError, one
    line) for a mapping that cannot be read or is malformed."""
    if config.access is None:
        return None
    from chunkline.readers import input_root

    def read_text(path: str) -> str:
        with FileSystems.open(path) as handle:
            return handle.read().decode("utf-8")

    return load_policy(config.access.options(), input_root(config.input.pattern), read_text)


def new_run_id(config: Config) -> str:
    """Time, config digest, and a random part: two runs started in the same second with the same
    config still get different directories."""
    digest = hashlib.sha256(json.dumps(to_dict(config), sort_keys=True).encode()).hexdigest()[:8]
    return format_run_id(datetime.now(timezone.utc), digest, secrets.token_hex(3))

