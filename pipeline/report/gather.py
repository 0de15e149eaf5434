"""What a run report shows, read from a run directory: the manifest and the Parquet tables it
lists, never a glob. Everything here is bounded whatever the run's size: per-format counts, a
capped list of rejection kinds and duplicate clusters, a histogram, one sample document per
format cut to :data:`SAMPLE_CHARS`. Only columns without text are read whole (status, format,
tokens); text is read for the few documents shown.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkline.index.manifest_types import Manifest
from chunkline.index.tables import LiveFile, TableFileError, live_files, read_file
from chunkline.minhash import MinHasher, MinHashOptions, estimate_jaccard
from chunkline.readers import FORMATS, extension
from chunkline.records import DUPLICATE, KEPT, REJECTED
from chunkline.pipeline.manifest import load_manifest

# Caps: a run of a million documents still makes a report of a few megabytes.
MAX_REASON_KINDS = 30
EXAMPLES_PER_REASON = 3
MAX_CLUSTERS = 50
MEMBERS_PER_CLUSTER = 10
SAMPLE_CHARS = 20_000
MAX_SAMPLE_CHUNKS = 200
HISTOGRAM_BINS = 24
MAX_SHOWN = 300  # characters of a path, a reason, a heading shown


def clip(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` with its noun, singular for exactly one: ``1 chunk``, ``2,048 chunks``,
    ``0 chunks``; ``plural`` where adding an s is wrong.

    >>> counted(1, "chunk"), counted(1234, "chunk"), counted(1, "match", "matches")
    ('1 chunk', '1,234 chunks', '1 match')
    """
    return f"{count:,} {singular if count == 1 else plural or singular + 's'}"


@dataclass(frozen=True)
class FormatRow:
    format: str
    kept: int
    duplicate: int
    rejected: int

    @property
    def read(self) -> int:
        return self.kept + self.duplicate + self.rejected


@dataclass(frozen=True)
class ReasonKind:
    kind: str  # the reason without its particulars (see :func:`reason_kind`)
    count: int
    examples: tuple[tuple[str, str], ...]  # (source, full reason), the first few by source


@dataclass(frozen=True)
class Member:
    doc_id: str
    uri: str
    exact: bool  # same normalized text as the survivor (``doc_hash``)
    similarity: float | None  # MinHash estimated Jaccard with the survivor; None: not computed


@dataclass(frozen=True)
class Cluster:
    survivor: str
    survivor_uri: str
    size: int  # duplicates of the survivor, all of them (``members`` is capped)
    members: tuple[Member, ...]


@dataclass(frozen=True)
class Histogram:
    edges: tuple[int, ...]  # bin i holds chunks with edges[i] <= tokens < edges[i + 1]
    counts: tuple[int, ...]
    budget: int | None
    chunks: int
    largest: int


@dataclass(frozen=True)
class SampleChunk:
    index: int
    start: int
    end: int
    tokens: int
    headings: tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    format: str
    doc_id: str
    uri: str
    text: str  # the document's text, cut to SAMPLE_CHARS
    length: int  # the whole text's length
    chunks: tuple[SampleChunk, ...]  # those starting within ``text``, capped
    chunk_count: int  # all of the document's chunks


@dataclass
class ReportData:
    run_id: str
    manifest: Manifest
    counts: dict[str, int]
    formats: list[FormatRow]
    reasons: list[ReasonKind]
    reason_kinds: int  # all kinds, before the cap
    clusters: list[Cluster]
    cluster_count: int
    similarity_note: str
    histogram: Histogram
    samples: list[Sample]
    warnings: list[str] = field(default_factory=list)


class ShardError(ValueError):
    """A table file the manifest lists is missing or cannot be read as Parquet (truncated,
    corrupt, without a column the report reads); the message names the file, on one line."""


def _read(files: Iterable[LiveFile], columns: list[str], filters: Any = None) -> pa.Table | None:
    """The columns of a table's live rows, concatenated; None when it has no file. Only the
    columns asked for are read, and with ``filters`` only the row groups holding a row that
    meets them (:func:`chunkline.index.tables.read_file`). :class:`ShardError` for a file that
    is not there or not readable."""
    try:
        tables = [read_file(file, columns, filters=filters) for file in files]
    except TableFileError as exc:
        raise ShardError(str(exc)) from None
    return pa.concat_tables(tables) if tables else None


def _empty(columns: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({name: pa.array([], type=kind) for name, kind in columns.items()})


def format_of(fmt: str, uri: str) -> str:
    """The reader's format name; a rejected document has none, so its file's extension says
    (``FORMATS``), or "other"."""
    return fmt or FORMATS.get(extension(uri), "other")


_DIGITS = re.compile(r"([0-9]+)")


def natural_key(text: str) -> tuple:
    """A sort key that orders the numbers inside ``text`` by value ("line 7" before
    "line 10001", "doc2.md" before "doc10.md"), the rest as text, ties by the text itself.
    Numbers are compared by their digits (length without leading zeros, then the digits), so a
    run of 10,000 digits is a key like any other.

    >>> sorted(["line 10005", "line 7", "line 10001", "line 07b"], key=natural_key)
    ['line 7', 'line 07b', 'line 10001', 'line 10005']
    """
    parts: list[Any] = _DIGITS.split(text)
    for i in range(1, len(parts), 2):  # odd places hold the digit runs
        digits = parts[i].lstrip("0")
        parts[i] = (len(digits), digits)
    return tuple(parts), text


_RECORD = re.compile(r"^(?:line|row) \d+: ")  # a JSONL line's or Parquet row's own prefix
_PARENTHESES = re.compile(r"\s*\([^()]*\)")
_PARTICULARS = re.compile(r"""'[^']*'|"[^"]*"|\d+(?:\.\d+)?""")


def reason_kind(reason: str) -> str:
    """A reason without its particulars, so rejections group: no record prefix, no
    parenthesised detail, only the part before the first colon, quoted names and numbers as
    ``…``. The examples keep the whole reason.

    >>> reason_kind("document of 12000000 bytes over input.max_document_bytes 10000000")
    'document of … bytes over input.max_document_bytes …'
    >>> reason_kind("line 7: not valid JSON (Unterminated string starting at: line 1 column 27)")
    'not valid JSON'
    >>> reason_kind("duplicate doc_id 'a': data/a.jsonl:3 repeats the id of data/a.jsonl:1, which is kept")
    'duplicate doc_id …'
    """
    text = _RECORD.sub("", reason)
    previous = None
    while previous != text:  # innermost parentheses first, so nested ones go too
        previous, text = text, _PARENTHESES.sub("", text)
    head = text.split(": ", 1)[0].strip()
    return clip(_PARTICULARS.sub("…", head), 120) or clip(reason, 120)


def funnel(documents: pa.Table) -> list[FormatRow]:
    """Per format: kept, duplicate, rejected documents; formats by documents read, most first."""
    counts: dict[str, Counter] = defaultdict(Counter)
    grouped = documents.group_by(["format", "status", "ext"]).aggregate([("status", "count")])
    for row in grouped.to_pylist():
        fmt = row["format"] or FORMATS.get(row["ext"], "other")
        counts[fmt][row["status"]] += row["status_count"]
    rows = [FormatRow(fmt, c[KEPT], c[DUPLICATE], c[REJECTED]) for fmt, c in counts.items()]
    return sorted(rows, key=lambda r: (-r.read, r.format))


def reasons(rejected: pa.Table) -> tuple[list[ReasonKind], int]:
    """Rejections grouped by :func:`reason_kind`, most frequent first, capped; and how many
    kinds there were. A kind's examples are its first by source, then reason, in
    :func:`natural_key` order (line 7 before line 10001)."""
    groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
    totals: Counter = Counter()
    for uri, reason in zip(rejected.column("uri").to_pylist(), rejected.column("reason").to_pylist()):
        kind = reason_kind(reason)
        totals[kind] += 1
        examples = groups[kind]
        examples.append((uri, reason))
        if len(examples) > 4 * EXAMPLES_PER_REASON:  # keep memory bounded: the smallest few
            examples.sort(key=_example_key)
            del examples[EXAMPLES_PER_REASON:]
    kinds = sorted(totals, key=lambda k: (-totals[k], natural_key(k)))
    shown = [ReasonKind(k, totals[k], tuple((clip(u), clip(r)) for u, r in
                                            sorted(groups[k], key=_example_key)[:EXAMPLES_PER_REASON]))
             for k in kinds[:MAX_REASON_KINDS]]
    return shown, len(kinds)


def _example_key(example: tuple[str, str]) -> tuple:
    return natural_key(example[0]), natural_key(example[1])


def histogram(tokens: pa.Array, budget: int | None, bins: int = HISTOGRAM_BINS) -> Histogram:
    """Chunk sizes in ``bins`` bins of equal width from 0 up to the budget (the last one ends
    at it, inclusive), and one more for chunks over the budget when there are any; without a
    budget, up to the largest chunk.

    >>> h = histogram(pa.array([0, 5, 9, 10, 12]), budget=9, bins=2)
    >>> h.edges, h.counts
    ((0, 5, 10, 13), (1, 2, 2))
    """
    values = tokens.to_numpy(zero_copy_only=False) if len(tokens) else []
    largest = int(max(values)) if len(values) else 0
    end = (budget if budget is not None else largest) + 1  # first token count past the range
    width = max(1, -(-end // bins))
    edges = sorted({min(i * width, end) for i in range(bins + 1)} | {end})
    if largest >= end:
        edges.append(largest + 1)
    bins_of = np.searchsorted(np.asarray(edges[1:]), np.asarray(values, dtype=np.int64), side="right")
    counts = np.bincount(bins_of, minlength=len(edges) - 1).tolist()
    return Histogram(tuple(edges), tuple(int(c) for c in counts), budget, len(values), largest)


def clusters(documents: pa.Table) -> tuple[dict[str, list[dict]], int]:
    """{survivor: its duplicates' rows, by :func:`natural_key` of their ids} for the
    MAX_CLUSTERS largest clusters (ties by survivor id, the same order), and the number of
    clusters. Counted in Arrow: only the rows of the clusters
    shown become Python objects."""
    dups = documents.filter(pc.equal(documents.column("status"), DUPLICATE))
    sizes = dups.group_by("duplicate_of").aggregate([("doc_id", "count")]).to_pylist()
    largest = sorted(sizes, key=lambda r: (-r["doc_id_count"], natural_key(r["duplicate_of"])))[:MAX_CLUSTERS]
    shown = [r["duplicate_of"] for r in largest]
    rows = dups.filter(pc.is_in(dups.column("duplicate_of"), pa.array(shown, pa.string())))
    members: dict[str, list[dict]] = {s: [] for s in shown}
    for row in rows.select(["doc_id", "uri", "doc_hash", "duplicate_of"]).to_pylist():
        members[row["duplicate_of"]].append(row)
    return {s: sorted(m, key=lambda r: natural_key(r["doc_id"])) for s, m in members.items()}, len(sizes)


def near_options(manifest: Manifest) -> MinHashOptions | None:
    """The run's near-duplicate options, from its recorded config; None when near dedupe was off
    (or the config is from a version these options cannot read)."""
    near = manifest.setting("dedupe", "near")
    if not isinstance(near, dict) or not near:
        return None
    try:
        return MinHashOptions(**near)
    except (TypeError, ValueError):
        return None


def _texts(paths: list[LiveFile], doc_ids: set[str]) -> dict[str, tuple[str, str]]:
    """{doc_id: (uri, text)} of a few documents, read with a filter (row groups whose statistics
    exclude them are skipped)."""
    if not doc_ids:
        return {}
    table = _read(paths, ["doc_id", "uri", "text"], filters=[("doc_id", "in", sorted(doc_ids))])
    if table is None:
        return {}
    return {r["doc_id"]: (r["uri"], r["text"]) for r in table.to_pylist()}


def resolve_clusters(found: dict[str, list[dict]], survivor_hashes: dict[str, str],
                     doc_paths: list[LiveFile], options: MinHashOptions | None) -> list[Cluster]:
    """Clusters with their survivors' uris and each shown member's similarity: 1.0 for an exact
    copy; for a near duplicate the MinHash estimate with the run's own options (same seed, so
    the same signatures the dedupe stage compared)."""
    shown = {s: rows[:MEMBERS_PER_CLUSTER] for s, rows in found.items()}
    need_text = set(shown) | {r["doc_id"] for rows in shown.values() for r in rows}
    texts = _texts(doc_paths, need_text)
    hasher = MinHasher(options) if options is not None else None
    out = []
    for survivor, rows in shown.items():
        survivor_uri, survivor_text = texts.get(survivor, ("", ""))
        near_rows = [r for r in rows if hasher is not None and r["doc_id"] in texts
                     and survivor in texts]
        estimates: dict[str, float] = {}
        if near_rows and hasher is not None:
            sigs = hasher.signatures([survivor_text] + [texts[r["doc_id"]][1] for r in near_rows])
            estimates = {r["doc_id"]: float(estimate_jaccard(sigs[0], sig))
                         for r, sig in zip(near_rows, sigs[1:], strict=True)}
        members = []
        for row in rows:
            exact = row["doc_hash"] == survivor_hashes.get(survivor)
            members.append(Member(row["doc_id"], clip(row["uri"]), exact,
                                  1.0 if exact else estimates.get(row["doc_id"])))
        out.append(Cluster(survivor, clip(survivor_uri), len(found[survivor]), tuple(members)))
    return out


def samples(documents: pa.Table, doc_paths: list[LiveFile], chunk_paths: list[LiveFile]) -> list[Sample]:
    """One kept document per format (the smallest doc_id: the same run gives the same report),
    its text cut to SAMPLE_CHARS and its chunks that start inside that cut."""
    kept = documents.filter(pc.equal(documents.column("status"), KEPT))
    chosen: dict[str, str] = {}
    for row in kept.group_by(["format", "ext"]).aggregate([("doc_id", "min")]).to_pylist():
        name = row["format"] or FORMATS.get(row["ext"], "other")
        if name not in chosen or row["doc_id_min"] < chosen[name]:
            chosen[name] = row["doc_id_min"]
    heads = _text_heads(doc_paths, set(chosen.values()))
    ids = sorted(chosen.values())
    chunk_table = (_read(chunk_paths, ["doc_id", "chunk_index", "start", "end", "tokens", "headings"],
                         filters=[("doc_id", "in", ids)]) if ids and chunk_paths else None)
    # Counted, and cut to the chunks starting inside the sample, in Arrow: a document of 14,336
    # chunks became as many Python dicts here only to show a few dozen of them.
    chunk_counts: Counter = Counter()
    by_doc: dict[str, list[dict]] = defaultdict(list)
    if chunk_table is not None:
        chunk_counts.update(chunk_table.column("doc_id").to_pylist())
        shown = chunk_table.filter(pc.less(chunk_table.column("start"), SAMPLE_CHARS))
        for row in shown.to_pylist():
            by_doc[row["doc_id"]].append(row)
    out = []
    for fmt in sorted(chosen):
        doc_id = chosen[fmt]
        if doc_id not in heads:
            continue
        uri, head, length = heads[doc_id]
        rows = sorted(by_doc[doc_id], key=lambda r: r["chunk_index"])
        inside = [SampleChunk(r["chunk_index"], r["start"], r["end"], r["tokens"], tuple(r["headings"]))
                  for r in rows][:MAX_SAMPLE_CHUNKS]
        out.append(Sample(fmt, doc_id, clip(uri), head, length, tuple(inside), chunk_counts[doc_id]))
    return out


def _text_heads(paths: list[LiveFile], doc_ids: set[str]) -> dict[str, tuple[str, str, int]]:
    """{doc_id: (uri, its text's first SAMPLE_CHARS characters, its length)} of a few documents:
    :func:`_texts`, the text cut in Arrow (a 5 MB document is not made a Python string to show
    20,000 characters of it)."""
    if not doc_ids:
        return {}
    table = _read(paths, ["doc_id", "uri", "text"], filters=[("doc_id", "in", sorted(doc_ids))])
    if table is None:
        return {}
    text = table.column("text")
    # Both count code points, as Python's len and slices do.
    heads = pc.utf8_slice_codeunits(text, 0, SAMPLE_CHARS).to_pylist()
    lengths = pc.utf8_length(text).to_pylist()
    return {doc_id: (uri, head, length) for doc_id, uri, head, length in zip(
        table.column("doc_id").to_pylist(), table.column("uri").to_pylist(), heads, lengths)}


def audience_of(manifest: Manifest) -> tuple[str, ...] | None:
    """The principals the report of a protected run is written for (``report.audience``);
    None: everything is shown."""
    if manifest.access is None:
        return None
    audience = manifest.setting("report", "audience")
    return None if audience is None else tuple(audience)


def readable_documents(doc_paths: list[LiveFile], audience: Sequence[str], public: str) -> set[str]:
    """The doc ids of the kept and duplicate documents ``audience`` may read (their principals
    meet it, or hold the public one); a rejected document (no principals) is none of them."""
    table = _read(doc_paths, ["doc_id", "principals"])
    if table is None:
        return set()
    held = set(audience) | {public}
    return {doc_id for doc_id, principals in zip(table.column("doc_id").to_pylist(),
                                                  table.column("principals").to_pylist())
            if principals and held.intersection(principals)}


def for_audience(data: ReportData, allowed: set[str], audience: Sequence[str],
                 documents: pa.Table, doc_paths: list[LiveFile], chunk_paths: list[LiveFile]) -> ReportData:
    """``data`` as ``audience`` may see it: samples and duplicate clusters of documents it may
    read only (a cluster whose survivor it may not read is left out, and so is every member it
    may not read), rejection examples and boilerplate lines left out (a rejected document has
    no principals; a boilerplate line stands for many documents); every count as it was."""
    shown = documents.filter(pc.is_in(documents.column("doc_id"), pa.array(sorted(allowed), pa.string())))
    clusters = [dataclasses.replace(c, members=tuple(m for m in c.members if m.doc_id in allowed))
                for c in data.clusters if c.survivor in allowed]
    reasons = [dataclasses.replace(r, examples=()) for r in data.reasons]
    boilerplate = data.manifest.boilerplate
    manifest = (dataclasses.replace(data.manifest, boilerplate={**boilerplate, "top_removed": []})
                if boilerplate else data.manifest)
    note = (f"written for {', '.join(audience) or 'no principal'}: sample texts and duplicate "
            "clusters show only documents they may read; rejection examples and boilerplate "
            "lines are left out; counts are of every document")
    return dataclasses.replace(data, manifest=manifest, reasons=reasons, clusters=clusters,
                               samples=samples(shown, doc_paths, chunk_paths),
                               warnings=[*data.warnings, note])


def gather(run_dir: str) -> ReportData:
    """Everything the report shows about the run in ``run_dir`` (a run directory, with its
    manifest); for a protected run with ``report.audience``, only what that audience may read
    (:func:`for_audience`)."""
    manifest = load_manifest(run_dir)
    counts = dict(manifest.counts)
    doc_paths = live_files(run_dir, manifest, "documents")
    chunk_paths = live_files(run_dir, manifest, "chunks")
    documents = _read(doc_paths, ["doc_id", "uri", "status", "format", "duplicate_of", "doc_hash"])
    if documents is None:
        documents = _empty({"doc_id": pa.string(), "uri": pa.string(), "status": pa.string(),
                            "format": pa.string(), "duplicate_of": pa.string(), "doc_hash": pa.string()})
    exts = [extension(uri) for uri in documents.column("uri").to_pylist()]
    documents = documents.append_column("ext", pa.array(exts, type=pa.string()))
    rejected = _read(live_files(run_dir, manifest, "rejected"), ["uri", "reason"])
    tokens = _read(chunk_paths, ["tokens"])
    warnings = list(manifest.problems)

    formats = funnel(documents)
    for name in ("kept", "duplicate", "rejected"):
        total = sum(getattr(row, name) for row in formats)
        if name in counts and total != counts[name]:
            warnings.append(f"documents table has {total} {name}, the manifest {counts[name]}")

    reason_list, kinds = reasons(rejected if rejected is not None
                                 else _empty({"uri": pa.string(), "reason": pa.string()}))
    found, cluster_count = clusters(documents)
    survivors = documents.filter(pc.is_in(documents.column("doc_id"), pa.array(list(found), pa.string())))
    survivor_hashes = dict(zip(survivors.column("doc_id").to_pylist(),
                               survivors.column("doc_hash").to_pylist()))
    options = near_options(manifest)
    resolved = resolve_clusters(found, survivor_hashes, doc_paths, options)
    note = ("similarity: MinHash estimated Jaccard with the survivor, computed with the run's "
            f"options ({counted(options.num_perm, 'permutation')}, {options.shingle_size}-word shingles, "
            f"threshold {options.threshold:g})" if options is not None
            else "near-duplicate detection was off: every duplicate is an exact copy")
    budget = manifest.split.max_tokens if manifest.split is not None else None
    hist = histogram(tokens.column("tokens") if tokens is not None else pa.array([], pa.int32()), budget)
    audience = audience_of(manifest)
    if audience is not None:
        public = (manifest.access.public if manifest.access is not None else None) or "public"
        allowed = readable_documents(doc_paths, audience, public)
        data = ReportData(manifest.run_id, manifest, counts, formats, reason_list, kinds, resolved,
                          cluster_count, note, hist, [], warnings)
        return for_audience(data, allowed, audience, documents, doc_paths, chunk_paths)
    return ReportData(manifest.run_id, manifest, counts, formats, reason_list, kinds, resolved,
                      cluster_count, note, hist, samples(documents, doc_paths, chunk_paths), warnings)
