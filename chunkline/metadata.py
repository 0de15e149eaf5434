"""Document metadata: one JSON object per document, written as a JSON text column.

Where it comes from, later sources winning on a shared key:

1. the file itself: ``source_uri``, ``file_size`` (bytes), ``file_modified`` (ISO 8601, UTC);
2. what the format declares: an HTML page's title, author, date, URL and language
   (trafilatura's metadata extraction), a PDF's document information (title, author);
3. what the user wrote: a JSONL record's metadata object, a Parquet file's metadata columns,
   a Markdown or text file's YAML front matter.

Why JSON text and not an Arrow struct or map: documents disagree on their keys and on a key's
type (``version: 2`` here, ``version: "2.1"`` there), and every store the index is synced into
takes JSON (Postgres ``jsonb``, Qdrant payloads, LanceDB strings; Lance reads no Arrow map
before its format 2.2). A struct would need the fields declared up front and reject the
documents that break them; JSON keeps every value as the source had it.

Values are made JSON (:func:`json_value`), each coercion documented there; a value JSON cannot
hold (NaN, bytes) rejects the document with the key named, never a crashed job.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import yaml

MetadataPairs = tuple[tuple[str, str], ...]

SOURCE_URI = "source_uri"
FILE_SIZE = "file_size"
FILE_MODIFIED = "file_modified"

# One document's metadata may hold at most this many values (every scalar, list and object
# counted): a YAML alias bomb ("billion laughs") is a few lines that expand past any memory.
MAX_VALUES = 10_000
# Front matter longer than this is not parsed (the file's text is kept as it is, and rejected
# with the reason, rather than a parser run over megabytes of YAML).
MAX_FRONT_MATTER_CHARS = 65_536

# YAML front matter as Jekyll, Hugo and Pandoc read it: the file's first line is ``---``, the
# block ends at the next line that is ``---`` or ``...``.
FRONT_MATTER = re.compile(
    r"\A---[ \t]*\r?\n(?P<body>.*?\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
# The first line of a block meant as a mapping: ``key:`` (a YAML error in such a block is a
# broken front matter, not a thematic break followed by text).
_MAPPING_LINE = re.compile(r"^[ \t]*[\"']?[^\s:#\"'][^:\n]*[\"']?[ \t]*:(?:[ \t]|$)", re.M)


class MetadataError(ValueError):
    """A metadata value that JSON cannot hold; the message names the key."""


def json_value(value: Any, where: str = "", _budget: list[int] | None = None) -> Any:
    """``value`` as a JSON value, or :class:`MetadataError` naming ``where`` it sits.

    Coercions (documented, deterministic): NaN becomes null (pandas writes a missing number as
    NaN); dates, times and datetimes become ISO 8601 strings
    (a timezone-aware datetime keeps its offset); ``Decimal`` becomes its exact decimal string;
    tuples and sets become arrays (sets sorted by their JSON text); object keys become strings
    (``1`` -> ``"1"``, ``true`` -> ``"true"``, a date -> its ISO form). Rejected: NaN and
    infinities (and a NaN ``Decimal``), bytes, and any other type.
    """
    budget = _budget if _budget is not None else [MAX_VALUES]
    budget[0] -= 1
    if budget[0] < 0:
        raise MetadataError(f"metadata holds more than {MAX_VALUES} values")
    name = where or "value"
    if value is None or isinstance(value, (bool, int, str)):
        if isinstance(value, str) and not _utf8_encodable(value):
            raise MetadataError(f"metadata {name!r} contains an unpaired surrogate escape")
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return None  # how pandas writes a missing number: missing it stays
        if math.isinf(value):
            raise MetadataError(f"metadata {name!r} is {value}, which JSON cannot hold")
        return value
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise MetadataError(f"metadata {name!r} is {value}, which JSON cannot hold")
        return str(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            text = _key(key, name)
            out[text] = json_value(item, f"{where}.{text}" if where else text, budget)
        return out
    if isinstance(value, (list, tuple)):
        return [json_value(item, f"{name}[{index}]", budget) for index, item in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [json_value(item, f"{name}[]", budget) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise MetadataError(f"metadata {name!r} is binary (bytes), not text")
    raise MetadataError(f"metadata {name!r} is a {type(value).__name__}, which has no JSON form")


def _key(key: Any, where: str) -> str:
    if isinstance(key, str):
        if not _utf8_encodable(key):
            raise MetadataError(f"metadata key in {where!r} contains an unpaired surrogate escape")
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    if isinstance(key, (datetime.date, datetime.time)):
        return key.isoformat()
    raise MetadataError(f"metadata key {key!r} in {where!r} is a {type(key).__name__}, not text")


def _utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_value(value: Any) -> str:
    """The canonical JSON text of an already JSON value (keys sorted, non-ASCII kept)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def metadata_pairs(items: Iterable[tuple[Any, Any]]) -> MetadataPairs:
    """Sorted (key, canonical JSON text) pairs: hashable and stable. Raises
    :class:`MetadataError` for a value JSON cannot hold (see :func:`json_value`)."""
    budget = [MAX_VALUES]
    pairs = {}
    for key, value in items:
        name = _key(key, "metadata")
        pairs[name] = encode_value(json_value(value, name, budget))
    return tuple(sorted(pairs.items()))


def merged(*layers: MetadataPairs) -> MetadataPairs:
    """The layers' pairs in one, a later layer's value winning on a shared key."""
    combined: dict[str, str] = {}
    for layer in layers:
        combined.update(layer)
    return tuple(sorted(combined.items()))


def file_facts(uri: str, size: int | None, modified: float | None) -> MetadataPairs:
    """``source_uri``, and ``file_size`` / ``file_modified`` where known: what every file
    contributes to its documents' metadata."""
    items: list[tuple[str, Any]] = [(SOURCE_URI, uri)]
    if size is not None:
        items.append((FILE_SIZE, int(size)))
    if modified is not None:
        stamp = datetime.datetime.fromtimestamp(modified, tz=datetime.timezone.utc)
        items.append((FILE_MODIFIED, stamp.isoformat(timespec="seconds").replace("+00:00", "Z")))
    return metadata_pairs(items)


def metadata_json(pairs: MetadataPairs, keys: Sequence[str] | None = None) -> str:
    """The pairs as one JSON object text (keys sorted); only ``keys`` when given (a key the
    document lacks is left out, not written as null)."""
    wanted = None if keys is None else set(keys)
    return "{" + ", ".join(
        f"{json.dumps(key, ensure_ascii=False)}: {value}" for key, value in pairs
        if wanted is None or key in wanted
    ) + "}"


# --- Front matter ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrontMatter:
    """A leading YAML block: the text after it starts at ``body_start``; ``pairs`` its fields."""

    body_start: int
    pairs: MetadataPairs


def front_matter(text: str) -> FrontMatter | str | None:
    """The leading YAML front matter of a Markdown or text file: a :class:`FrontMatter`, the
    reason it is broken (a ``str``), or None when the text has none.

    A block is front matter only if it parses to a mapping (``yaml.safe_load``: no tags that
    build objects). A block that is not a mapping (``---`` / ``Title`` / ``---`` is a thematic
    break and a setext heading) is text. A block that reads as ``key: value`` lines but is not
    valid YAML is broken front matter: the document is rejected with the parser's message, not
    indexed without the fields its author gave it (an access group among them, perhaps).

    >>> found = front_matter("---\\ntitle: Arm\\ntags: [a, b]\\n---\\n# Arm\\n")
    >>> found.body_start, found.pairs
    (32, (('tags', '["a", "b"]'), ('title', '"Arm"')))
    """
    found = FRONT_MATTER.match(text)
    if found is None:
        return None
    block = found.group()
    if len(block) > MAX_FRONT_MATTER_CHARS:
        return f"front matter is {len(block)} characters, over the limit of {MAX_FRONT_MATTER_CHARS}"
    body = found.group("body") or ""
    try:
        value = yaml.safe_load(body) if body.strip() else {}
    except yaml.YAMLError as exc:
        if _MAPPING_LINE.search(body):
            detail = " ".join(str(exc).split())
            return f"front matter is not valid YAML ({detail})"
        return None
    except RecursionError:
        return "front matter is nested too deeply"
    if not isinstance(value, dict):
        return None
    try:
        pairs = metadata_pairs(value.items())
    except MetadataError as exc:
        return f"front matter: {exc}"
    except RecursionError:
        return "front matter is nested too deeply"
    return FrontMatter(found.end(), pairs)


# --- Filters -----------------------------------------------------------------------------------


def parse_condition(spec: str) -> tuple[str, str]:
    """``key=value`` -> (key, value); ValueError for anything else."""
    key, sep, value = spec.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--where takes key=value, got {spec!r}")
    return key.strip(), value


def matches(metadata: str, conditions: Sequence[tuple[str, str]]) -> bool:
    """Whether a metadata JSON object meets every ``(key, value)`` condition.

    A string value equals the text; a number, boolean or null equals its JSON text (``3``,
    ``true``, ``null``); an array matches when one of its elements does (tags, access groups).
    A document without the key does not match.
    """
    if not conditions:
        return True
    fields = json.loads(metadata) if metadata else {}
    return all(key in fields and _value_matches(fields[key], wanted) for key, wanted in conditions)


def _value_matches(value: Any, wanted: str) -> bool:
    if isinstance(value, list):
        return any(_value_matches(item, wanted) for item in value)
    if isinstance(value, str):
        return value == wanted
    if isinstance(value, dict):
        return encode_value(value) == wanted
    return json.dumps(value) == wanted or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and _number_equals(value, wanted))


def _number_equals(value: float, wanted: str) -> bool:
    try:
        return float(wanted) == float(value)
    except ValueError:
        return False
