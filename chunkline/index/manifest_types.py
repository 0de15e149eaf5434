"""A run's manifest as typed, frozen values: :func:`parse` (the JSON object ``manifest.json``
holds -> :class:`Manifest`, validated) and :func:`to_json` (:class:`Manifest` -> the file's
text), the one place the manifest's fields are named. The job writes through :func:`to_json`
and every reader reads through :func:`parse` (``chunkline.index.manifest.load_manifest``), so
a field is spelled, defaulted and checked once.

The JSON is the format the tables' files are listed in (``chunkline.index.tables``: format 1
``files``, format 2 ``tables`` with inline deletions, format 3 with one deletion file per table,
format 4 with one per table and shard, each written by its shard's writer) around the
run's record (its config, counts, model, BM25 statistics, access policy, ...). A manifest of a
newer format than :data:`FORMAT` is refused, naming both formats, never read as if it were
one this version knows. A manifest written before a field existed reads with the field's
default (``reconciled``: true, lists: empty, the rest: None); :func:`to_json` writes every
field in the order ``pipeline/run.py`` has always written them, so the manifest of a run of
this version reads back and writes out byte for byte (the round trip the tests check).

Sections the job produces whole and readers only show or look up by name stay JSON objects:
``config`` (``chunkline.pipeline.config.to_dict``, redacted: its schema is the job's, which this
Beam-free library does not import; :meth:`Manifest.setting` looks a value up), ``context``,
``boilerplate``, ``credentials``, ``ocr``, ``memo`` (recalled/computed per kind) and
``stage_seconds``. Keys this version does not know are kept (:attr:`Manifest.extra`) and written
back after the known ones.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from chunkline.memo import MEMO_TABLE, Listed, listed_from

FORMAT = 4  # the newest manifest format this version reads (and writes, with deletion files)
FIRST_FORMAT = 1  # a manifest without ``format``
INLINE_FORMAT = 2  # every deleted position inline in the manifest (what the job writes when few)
TABLE_DELETES_FORMAT = 3  # one deletion file per table (read, no longer written)


class ManifestError(ValueError):
    """A manifest, or the LATEST pointer to one, is missing or malformed; the message names the
    file."""


# --- the values --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TableFile:
    """One file of a table as a format-2/3 manifest lists it: ``path`` relative to OUTPUT
    (``<run folder>/<file name>``), the ``rows`` it holds, ``deleted`` (the ascending positions
    no longer live, inline; None when the entry states none: its table has a deletion file, or
    an entry of a table written whole), the ``shard`` it belongs to, its ``bytes`` and
    ``digest`` when stated, and ``deleted_rows`` (how many of its rows the deletion file of its
    table, format 3, or of its table and shard, format 4, deletes)."""

    path: str
    rows: int
    deleted: tuple[int, ...] | None = None
    shard: int | None = None
    bytes: int | None = None
    digest: str | None = None
    deleted_rows: int | None = None


@dataclass(frozen=True)
class DeletionFile:
    """A deletion file: ``path`` relative to OUTPUT, the positions it holds (``rows``), its size
    and BLAKE2b-128 digest (``chunkline.index.tables.file_digest``), and the ``shard`` whose
    files' deletions it holds (format 4); None: every file of its table (format 3)."""

    path: str
    rows: int
    bytes: int
    digest: str
    shard: int | None = None


@dataclass(frozen=True)
class Listing:
    """Which files hold a run's tables (``chunkline.index.tables`` reads them): ``format``;
    format 1: ``files``, each table's file names in the run's own folder; format 2 to 4:
    ``tables``, each table's :class:`TableFile`\\ s in the manifest's order, and ``deletes``, the
    deletion files by table (format 3: one, for the whole table; format 4: one per shard with
    deletions, in shard order). ``memo``: the memo segments the run lists (the ``memo`` table,
    written last among the tables), None when it lists none."""

    format: int
    tables: Mapping[str, tuple[TableFile, ...]] = field(default_factory=dict)
    deletes: Mapping[str, tuple[DeletionFile, ...]] = field(default_factory=dict)
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    memo: tuple[Listed, ...] | None = None

    def table_names(self) -> list[str]:
        """The tables listed, in the manifest's order (the memo table last)."""
        if self.format < INLINE_FORMAT:
            return list(self.files)
        return [*self.tables, *([MEMO_TABLE] if self.memo is not None else [])]


@dataclass(frozen=True)
class Split:
    """How the run cut text: the tokenizer's spec, the token budget, overlap, Markdown."""

    tokenizer: str | None = None
    max_tokens: int | None = None
    overlap: int | None = None
    markdown: bool | None = None


@dataclass(frozen=True)
class Model:
    """The embedding model a run's vectors came from: ``dim`` always; the rest as recorded
    (None in a manifest written before the field)."""

    dim: int
    name: str | None = None
    dtype: str | None = None
    normalize: bool | None = None
    max_seq_length: int | None = None
    vector_dtype: str | None = None


@dataclass(frozen=True)
class Bm25:
    """The run's BM25 statistics (``chunkline.transforms.sparse.stats_json``): ``chunks`` always;
    the analysis (``k1``, ``b``, ``stemmer``, ``stop_words``) a question is analyzed with;
    ``weights``: "tf" where stored weights leave IDF to the query (None: a run that stored IDF);
    the reference length the next run rescales against."""

    chunks: int
    total_length: int | None = None
    avgdl: float | None = None
    terms: int | None = None
    k1: float | None = None
    b: float | None = None
    method: str | None = None
    stemmer: str | None = None
    stop_words: str | None = None
    term_ids: str | None = None
    term_space: int | None = None
    analyzer: str | None = None
    weights: str | None = None
    reference_avgdl: float | None = None
    reference_drift: float | None = None
    previous_reference_avgdl: float | None = None
    rebased: bool | None = None


@dataclass(frozen=True)
class Access:
    """The access policy a protected run was written under (``chunkline.access.AccessPolicy
    .describe``: the mapping's digest, never its content) and what it rejected."""

    metadata_key: str | None = None
    default: tuple[str, ...] = ()
    public: str | None = None
    mapping_rules: int | None = None
    mapping_digest: str | None = None
    documents_rejected: int = 0
    documents_without_principals: int = 0


@dataclass(frozen=True)
class Manifest:
    """What a run holds and how it was made (``manifest.json``). ``counts``: documents, kept,
    chunks always, the other counters the run reported; ``reconciled`` false with ``problems``
    when the run did not account for every document; ``held_back``: why the publish guard kept
    LATEST from it; ``previous``: the run it reused vectors of."""

    run_id: str
    counts: Mapping[str, int]
    config: Mapping[str, Any]
    listing: Listing
    created_at: str | None = None
    chunkline_version: str | None = None
    beam_version: str | None = None
    runner: str | None = None
    split: Split | None = None
    model: Model | None = None
    embedding_signature: str | None = None
    carry_signature: str | None = None
    previous: str | None = None
    reuse_skipped: tuple[str, ...] = ()
    context: Mapping[str, Any] | None = None
    embed_mode: str | None = None
    bm25: Bm25 | None = None
    boilerplate: Mapping[str, Any] | None = None
    credentials: Mapping[str, Any] | None = None
    ocr: Mapping[str, int] | None = None
    memo: Mapping[str, Mapping[str, int]] | None = None
    access: Access | None = None
    wall_seconds: float | None = None
    stage_seconds: Mapping[str, float] | None = None
    reconciled: bool = True
    problems: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()
    held_back: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def format(self) -> int:
        return self.listing.format

    def setting(self, *path: str) -> Any:
        """The run's config value at ``path`` (``setting("dedupe", "near")``), None where a step
        is missing or null: the config as the run recorded it, masked
        (``chunkline.pipeline.redact``)."""
        value: Any = self.config
        for name in path:
            if not isinstance(value, Mapping):
                return None
            value = value.get(name)
        return value

    @property
    def publishable(self) -> bool:
        """Reconciled and not held back by the publish guard: what LATEST may name."""
        return self.reconciled and not self.held_back


# --- JSON -> Manifest --------------------------------------------------------------------------

# The fields in the order the job writes them (``to_json``); ``files`` (format 1) stands where
# ``format`` and ``tables`` stand from format 2.
_ORDER = ("run_id", "created_at", "chunkline_version", "beam_version", "runner", "config", "split",
          "model", "embedding_signature", "carry_signature", "previous", "reuse_skipped", "counts",
          "context", "embed_mode", "bm25", "boilerplate", "credentials", "ocr", "memo", "access",
          "wall_seconds", "stage_seconds", "reconciled", "problems", "unverified", "held_back",
          "format", "files", "tables", "deletes")
_REQUIRED = ("run_id", "counts", "config")  # with the listing; the tables every run lists: TABLES


class _Bad(Exception):
    """A field's problem, worded as the message's tail; :func:`parse` adds the file."""


def parse(data: Any, *, where: str, required: Sequence[str] = ()) -> Manifest:
    """``data`` (a decoded ``manifest.json``) as a :class:`Manifest`, checked: a manifest of a
    newer format, or a field that is missing or malformed, is a :class:`ManifestError` naming
    ``where`` (the file) and the field, in one line. ``required``: tables the manifest must
    list (``chunkline.index.layout.TABLES``)."""
    try:
        return _parse(data, required)
    except _Bad as exc:
        raise ManifestError(f"{where}: not a chunkline manifest: {exc}") from None


def _parse(data: Any, required: Sequence[str]) -> Manifest:
    if not isinstance(data, dict):
        raise _Bad(f"expected a JSON object, got {type(data).__name__}")
    if not isinstance(data.get("run_id"), str):
        raise _Bad("run_id is missing or not a string")
    listing = _listing(data, required)
    counts = data.get("counts")
    if not isinstance(counts, dict) or not all(_count(v) for v in counts.values()):
        raise _Bad("counts is missing or not an object of non-negative integers")
    missing = [name for name in ("documents", "kept", "chunks") if name not in counts]
    if missing:
        raise _Bad(f"counts has no {', '.join(missing)}")
    model = _model(data.get("model"))
    if not isinstance(data.get("embedding_signature", ""), str):
        raise _Bad("embedding_signature is not a string")
    if not isinstance(data.get("config"), dict):
        raise _Bad("config is missing or not an object")
    bm25 = _bm25(data.get("bm25"), listing)
    return Manifest(
        run_id=data["run_id"], counts=counts, config=data["config"], listing=listing,
        created_at=_optional(data, "created_at", str), chunkline_version=_optional(data, "chunkline_version", str),
        beam_version=_optional(data, "beam_version", str), runner=_optional(data, "runner", str),
        split=_split(data.get("split")), model=model,
        embedding_signature=data.get("embedding_signature"),
        carry_signature=_optional(data, "carry_signature", str), previous=_optional(data, "previous", str),
        reuse_skipped=_strings(data, "reuse_skipped"), context=_object(data, "context"),
        embed_mode=_optional(data, "embed_mode", str), bm25=bm25,
        boilerplate=_object(data, "boilerplate"), credentials=_object(data, "credentials"),
        ocr=_object(data, "ocr"), memo=_object(data, "memo"), access=_access(data.get("access")),
        wall_seconds=_number(data.get("wall_seconds"), "wall_seconds"),
        stage_seconds=_object(data, "stage_seconds"),
        reconciled=_flag(data, "reconciled"), problems=_strings(data, "problems"),
        unverified=_strings(data, "unverified"), held_back=_strings(data, "held_back"),
        extra={key: value for key, value in data.items() if key not in _ORDER})


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and "/" not in name and "\\" not in name \
        and name not in (".", "..")


def _relative_path(path: Any) -> bool:
    parts = path.split("/") if isinstance(path, str) else []
    return len(parts) >= 2 and all(_plain_name(p) for p in parts)


def _optional(data: Mapping[str, Any], key: str, kind: type, where: str = "") -> Any:
    value = data.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is not bool):
        raise _Bad(f"{where}{key} is not a {'string' if kind is str else kind.__name__}")
    return value


def _number(value: Any, name: str) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise _Bad(f"{name} is not a number")
    return value


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, True)
    if not isinstance(value, bool):
        raise _Bad(f"{key} is not true or false")
    return value


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Bad(f"{key} is not a list of strings")
    return tuple(value)


def _object(data: Mapping[str, Any], key: str) -> Any:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise _Bad(f"{key} is not an object")
    return value


def _split(value: Any) -> Split | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Bad("split is not an object")
    max_tokens, overlap = value.get("max_tokens"), value.get("overlap")
    for name, number in (("max_tokens", max_tokens), ("overlap", overlap)):
        if number is not None and not _count(number):
            raise _Bad(f"split.{name} is not a non-negative integer")
    return Split(_optional(value, "tokenizer", str, "split."), max_tokens, overlap,
                 _optional(value, "markdown", bool, "split."))


def _model(value: Any) -> Model | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Bad("model is not an object")
    dim = value.get("dim")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise _Bad("model.dim is missing or not a positive integer")
    seq = value.get("max_seq_length")
    if seq is not None and not _count(seq):
        raise _Bad("model.max_seq_length is not a non-negative integer")
    return Model(dim, _optional(value, "name", str, "model."), _optional(value, "dtype", str, "model."),
                 _optional(value, "normalize", bool, "model."), seq,
                 _optional(value, "vector_dtype", str, "model."))


def _bm25(value: Any, listing: Listing) -> Bm25 | None:
    """What a query's IDF and the next run's reference length read from ``bm25``, and the
    terms table a query and a sync read its document frequencies from."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Bad("bm25 is not an object")
    if "terms" not in listing.table_names():
        where = "tables" if listing.format >= INLINE_FORMAT else "files"
        raise _Bad(f"{where}.terms is missing (the run has BM25 statistics)")
    return _bm25_fields(value)


def _bm25_fields(value: dict[str, Any]) -> Bm25:
    chunks = value.get("chunks")
    if not _count(chunks):
        raise _Bad("bm25.chunks is missing or not a non-negative integer")
    reference = value.get("reference_avgdl")
    if reference is not None and (isinstance(reference, bool) or not isinstance(reference, (int, float))
                                  or not math.isfinite(reference) or reference < 0):
        raise _Bad("bm25.reference_avgdl is not a non-negative number")
    for name in ("total_length", "terms", "term_space"):
        if value.get(name) is not None and not _count(value[name]):
            raise _Bad(f"bm25.{name} is not a non-negative integer")

    def number(name: str) -> float | None:
        return _number(value.get(name), f"bm25.{name}")

    def text(name: str) -> str | None:
        return _optional(value, name, str, "bm25.")

    return Bm25(chunks=value["chunks"], total_length=value.get("total_length"), avgdl=number("avgdl"),
                terms=value.get("terms"), k1=number("k1"), b=number("b"), method=text("method"),
                stemmer=text("stemmer"), stop_words=text("stop_words"), term_ids=text("term_ids"),
                term_space=value.get("term_space"), analyzer=text("analyzer"), weights=text("weights"),
                reference_avgdl=reference, reference_drift=number("reference_drift"),
                previous_reference_avgdl=number("previous_reference_avgdl"),
                rebased=_optional(value, "rebased", bool, "bm25."))


def _access(value: Any) -> Access | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Bad("access is not an object")
    default = value.get("default") or []
    if not isinstance(default, list) or not all(isinstance(v, str) for v in default):
        raise _Bad("access.default is not a list of principals")
    rules = value.get("mapping_rules")
    counted = {name: value.get(name, 0) for name in ("documents_rejected", "documents_without_principals")}
    for name, number in [("mapping_rules", rules), *counted.items()]:
        if number is not None and not _count(number):
            raise _Bad(f"access.{name} is not a non-negative integer")
    return Access(_optional(value, "metadata_key", str, "access."), tuple(default),
                  _optional(value, "public", str, "access."), rules,
                  _optional(value, "mapping_digest", str, "access."), **counted)


def _listing(data: Mapping[str, Any], required: Sequence[str]) -> Listing:
    """The file listing (``files`` in format 1, ``tables`` from format 2), for every table of
    ``required`` and any other it lists."""
    version = data.get("format", FIRST_FORMAT)
    if isinstance(version, bool) or not isinstance(version, int) or version < FIRST_FORMAT:
        raise _Bad(f"format is not a positive integer ({version!r})")
    if version > FORMAT:
        raise _Bad(f"format {version} was written by a newer chunkline; this one reads formats "
                   f"up to {FORMAT}")
    if version == FIRST_FORMAT:
        files = data.get("files")
        if not isinstance(files, dict):
            raise _Bad("files is missing or not an object")
        for table in [*required, *(t for t in files if t not in required)]:
            names = files.get(table)
            if not isinstance(names, list) or not all(_plain_name(n) for n in names):
                raise _Bad(f"files.{table} is missing or not a list of file names")
        return Listing(version, files={table: tuple(names) for table, names in files.items()})
    tables = data.get("tables")
    if not isinstance(tables, dict):
        raise _Bad("tables is missing or not an object")
    deletes = _deletion_files(data, version, tables)
    for table in [*required, *(t for t in tables if t not in required)]:
        entries = tables.get(table)
        if not isinstance(entries, list):
            raise _Bad(f"tables.{table} is missing or not a list of files")
        for at, entry in enumerate(entries):
            problem = _entry_problem(entry)
            if not problem and table in deletes and entry.get("deleted"):
                problem = "lists deleted positions inline, though its table has a deletion file"
            if not problem and entry.get("deleted_rows") and table not in deletes:
                problem = "counts deleted rows, though its table has no deletion file"
            if problem:
                raise _Bad(f"tables.{table}[{at}] {problem}")
        if table in deletes:
            _check_counts(table, entries, deletes[table])
    memo = None
    if MEMO_TABLE in tables:
        segments = []
        for at, entry in enumerate(tables[MEMO_TABLE]):
            segment = listed_from(entry)
            if segment is None:
                raise _Bad(f"tables.{MEMO_TABLE}[{at}] is not a memo segment")
            segments.append(segment)
        memo = tuple(segments)
    return Listing(
        version,
        tables={table: tuple(_table_file(entry) for entry in entries)
                for table, entries in tables.items() if table != MEMO_TABLE},
        deletes=deletes, memo=memo)


def _deletion_files(data: Mapping[str, Any], version: int, tables: Mapping[str, Any]
                    ) -> dict[str, tuple[DeletionFile, ...]]:
    """``deletes``: format 3, one deletion file per table (an object); format 4, the deletion
    files of a table's shards (a list, each naming its ``shard``, in shard order)."""
    if "deletes" not in data:
        return {}
    if version == INLINE_FORMAT:
        raise _Bad("deletes (deletion files) needs format 3")
    deletes = data["deletes"]
    one = version == TABLE_DELETES_FORMAT
    if not isinstance(deletes, dict) or not all(
            isinstance(d, dict) if one else isinstance(d, list) and all(isinstance(f, dict) for f in d)
            for d in deletes.values()):
        raise _Bad("deletes is not an object of deletion files"
                   + ("" if one else ", a list of them per table"))
    found: dict[str, tuple[DeletionFile, ...]] = {}
    for table, described in deletes.items():
        if table not in tables:
            raise _Bad(f"deletes.{table} names a table the manifest does not list")
        files: list[DeletionFile] = []
        for at, d in enumerate([described] if one else described):
            where = f"deletes.{table}" if one else f"deletes.{table}[{at}]"
            problem = _deletion_file_problem(d)
            if problem is None and not one and not _count(d.get("shard")):
                problem = "shard is missing or not a non-negative integer"
            if problem is None and files and not one and d["shard"] <= files[-1].shard:
                problem = "is not in ascending shard order, one file a shard"
            if problem:
                raise _Bad(f"{where} {problem}")
            files.append(DeletionFile(d["path"], d["rows"], d["bytes"], d["digest"],
                                      None if one else d["shard"]))
        found[table] = tuple(files)
    return found


def _check_counts(table: str, entries: Sequence[Mapping[str, Any]], files: Sequence[DeletionFile]) -> None:
    """Each deletion file holds exactly the deletions its files count (``deleted_rows``): the
    table's (format 3) or its shard's (format 4)."""
    counted: dict[int | None, int] = {}
    for at, entry in enumerate(entries):
        if entry.get("deleted_rows"):
            shard = None if files[0].shard is None else entry.get("shard")
            if files[0].shard is not None and shard is None:
                raise _Bad(f"tables.{table}[{at}] counts deleted rows but names no shard")
            counted[shard] = counted.get(shard, 0) + entry["deleted_rows"]
    held = {f.shard: f.rows for f in files}
    for shard in sorted({*counted, *held}, key=lambda s: -1 if s is None else s):
        if counted.get(shard, 0) != held.get(shard, 0):
            which = f"deletes.{table}" + ("" if shard is None else f" (shard {shard})")
            raise _Bad(f"{which} rows is not the sum of its files' deleted_rows")


def bm25_from(data: Any, *, where: str) -> Bm25:
    """The BM25 statistics the sparse stage wrote (``bm25.json``) as :class:`Bm25`, checked as
    :func:`parse` checks a manifest's ``bm25``."""
    try:
        if not isinstance(data, dict):
            raise _Bad("bm25 is not an object")
        return _bm25_fields(data)
    except _Bad as exc:
        raise ManifestError(f"{where}: {exc}") from None


def access_from(data: Mapping[str, Any]) -> Access:
    """What the job records of its access policy (``AccessPolicy.describe`` and its counts) as
    :class:`Access`, checked as :func:`parse` checks a manifest's ``access``."""
    try:
        found = _access(dict(data))
    except _Bad as exc:
        raise ManifestError(str(exc)) from None
    assert found is not None
    return found


def parse_listing(data: Mapping[str, Any], *, where: str) -> Listing:
    """The listing keys of ``data`` (``format``, ``tables``, ``deletes``; or ``files``) as a
    :class:`Listing`, checked as :func:`parse` checks them: the job's own tables before it
    writes them into its manifest."""
    try:
        return _listing(data, ())
    except _Bad as exc:
        raise ManifestError(f"{where}: {exc}") from None


def _table_file(entry: Mapping[str, Any]) -> TableFile:
    deleted = entry.get("deleted")
    return TableFile(entry["path"], entry["rows"], None if deleted is None else tuple(deleted),
                     entry.get("shard"), entry.get("bytes"), entry.get("digest"), entry.get("deleted_rows"))


def _deletion_file_problem(described: dict[str, Any]) -> str | None:
    if not isinstance(described, dict):
        return "is not an object"
    if not _relative_path(described.get("path")):
        return "path is not <run folder>/deletes/<file name>"
    if not all(_count(described.get(key)) for key in ("rows", "bytes")):
        return "rows or bytes is missing or not a non-negative integer"
    if not isinstance(described.get("digest"), str):
        return "digest is missing or not a string"
    return None


def _entry_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return "is not an object"
    if not _relative_path(entry.get("path")):
        return "path is not <run folder>/<file name> (or <run folder>/<folder>/<file name>)"
    rows = entry.get("rows")
    if not _count(rows):
        return "rows is missing or not a non-negative integer"
    if "bytes" in entry and not _count(entry["bytes"]):
        return "bytes is not a non-negative integer"
    if "digest" in entry and not isinstance(entry["digest"], str):
        return "digest is not a string"
    if "shard" in entry and not _count(entry["shard"]):
        return "shard is not a non-negative integer"
    if "deleted_rows" in entry and not (_count(entry["deleted_rows"]) and entry["deleted_rows"] <= rows):
        return "deleted_rows is not a non-negative integer up to rows"
    deleted = entry.get("deleted", [])
    if not isinstance(deleted, list) or not all(_count(p) and p < rows for p in deleted) \
            or any(a >= b for a, b in zip(deleted, deleted[1:])):
        return "deleted is not an ascending list of row positions below rows"
    return None


# --- Manifest -> JSON --------------------------------------------------------------------------

def to_json(manifest: Manifest) -> str:
    """The text of ``manifest.json`` for ``manifest``: every field in the job's order, indented
    by two, ending in a newline; :func:`parse` of it gives ``manifest`` back."""
    return json.dumps(to_object(manifest), indent=2) + "\n"


def to_object(manifest: Manifest) -> dict[str, Any]:
    """``manifest`` as the JSON object :func:`to_json` writes."""
    m = manifest
    found: dict[str, Any] = {
        "run_id": m.run_id, "created_at": m.created_at, "chunkline_version": m.chunkline_version,
        "beam_version": m.beam_version, "runner": m.runner, "config": m.config,
        "split": m.split and _fields(m.split, ("tokenizer", "max_tokens", "overlap", "markdown")),
        "model": m.model and _fields(m.model, ("name", "dim", "dtype", "normalize", "max_seq_length",
                                               "vector_dtype")),
        **({"embedding_signature": m.embedding_signature} if m.embedding_signature is not None else {}),
        "carry_signature": m.carry_signature, "previous": m.previous,
        "reuse_skipped": list(m.reuse_skipped), "counts": m.counts, "context": m.context,
        "embed_mode": m.embed_mode, "bm25": m.bm25 and _fields(m.bm25, _BM25_ORDER),
        "boilerplate": m.boilerplate, "credentials": m.credentials, "ocr": m.ocr, "memo": m.memo,
        "access": m.access and {**_fields(m.access, _ACCESS_ORDER), "default": list(m.access.default)},
        "wall_seconds": m.wall_seconds, "stage_seconds": m.stage_seconds, "reconciled": m.reconciled,
        "problems": list(m.problems), "unverified": list(m.unverified), "held_back": list(m.held_back),
        **listing_object(m.listing), **m.extra,
    }
    return found


_ACCESS_ORDER = ("metadata_key", "default", "public", "mapping_rules", "mapping_digest", "documents_rejected",
                 "documents_without_principals")
_BM25_ORDER = ("chunks", "total_length", "avgdl", "terms", "k1", "b", "method", "stemmer", "stop_words",
               "term_ids", "term_space", "analyzer", "weights", "reference_avgdl", "reference_drift",
               "previous_reference_avgdl", "rebased")


def _fields(value: Any, names: Sequence[str]) -> dict[str, Any]:
    return {name: getattr(value, name) for name in names}


def listing_object(listing: Listing) -> dict[str, Any]:
    """The listing's keys of the manifest: ``files`` (format 1), or ``format``, ``tables`` and
    (with deletion files) ``deletes``."""
    if listing.format < INLINE_FORMAT:
        return {"files": {table: list(names) for table, names in listing.files.items()}}
    tables: dict[str, list[dict[str, Any]]] = {
        table: [table_file_object(entry) for entry in entries] for table, entries in listing.tables.items()}
    if listing.memo is not None:
        tables[MEMO_TABLE] = [segment.entry() for segment in listing.memo]
    fields = ("path", "rows", "bytes", "digest")
    deletes: dict[str, Any] = {
        table: _fields(files[0], fields) if listing.format == TABLE_DELETES_FORMAT
        else [_fields(f, (*fields, "shard")) for f in files]
        for table, files in listing.deletes.items()}
    return {"format": listing.format, "tables": tables, **({"deletes": deletes} if deletes else {})}


def table_file_object(entry: TableFile) -> dict[str, Any]:
    """A table file as the manifest lists it; a field it does not state is left out."""
    found: dict[str, Any] = {"path": entry.path, "rows": entry.rows}
    if entry.deleted is not None:
        found["deleted"] = list(entry.deleted)
    for name in ("shard", "bytes", "digest", "deleted_rows"):
        if getattr(entry, name) is not None:
            found[name] = getattr(entry, name)
    return found
