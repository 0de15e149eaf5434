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

What every store gives back as it was given: the rules below make the metadata JSON of the
index the form that PostgreSQL ``jsonb``, Qdrant and LanceDB return unchanged (after
:func:`canonical_json`), so a row's digest survives a store round trip.

- **Numbers** (:func:`canonical_value`). A number whose value is integral and within the signed
  64-bit range [-2**63, 2**63 - 1] is an integer, exactly (the float ``1e15`` is written
  ``1000000000000000``, ``2.0`` is ``2``, ``-0.0`` is ``0``); any other number (not integral,
  or an integer beyond 64 bits) is the nearest IEEE-754 double, written as Python's shortest
  repr that reads back to it (``1e+20``, ``1.5e-07``; ``2**70`` is ``1.1805916207174113e+21``),
  and that double is then read by the same rule (``-2**63 - 1`` rounds to ``-2**63``: an
  integer), so the form is a fixed point.
  Why: ``jsonb`` keeps numbers as ``numeric`` and prints them in plain decimals
  (``1e20`` -> ``100000000000000000000``, ``1.5e-7`` -> ``0.00000015``, ``-0.0`` -> ``0``);
  Qdrant's server (serde_json) keeps integers within 64 bits and turns bigger ones into
  doubles; LanceDB keeps the text. Each of those forms reads back, through this rule, to the
  same text; a number no double holds (beyond about 1.8e308) is rejected.
- **U+0000** in a metadata string or key is written U+FFFD (the replacement character), always:
  ``jsonb`` refuses ``\\u0000`` in any string or key, and so does PostgreSQL ``text``. Ids are
  not mapped (two ids would become one): the readers reject an id that holds U+0000.
- **Bounds.** One document's metadata holds at most :data:`MAX_VALUES` values (every scalar,
  list and object counted), nests at most ``max_depth`` levels (the metadata object is level 1;
  default :data:`DEFAULT_MAX_DEPTH`), and its JSON object text, the file facts included, is at
  most ``max_bytes`` UTF-8 bytes (:func:`over_byte_limit`; default :data:`DEFAULT_MAX_BYTES`):
  every chunk carries a copy into every store (1 MB of metadata on a 493-chunk document was
  493 MB in each), and a client that walks payloads recursively (Qdrant's) fails on every
  sync past a few hundred levels. Conversion stops at the depth limit, long before Python's
  recursion limit.
"""

from __future__ import annotations

import datetime
import functools
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
# Default bounds of one document's metadata (``chunkline.readers.ReadOptions`` makes them
# settings): levels of nesting, the metadata object being level 1, and UTF-8 bytes of its JSON
# object text with the file facts.
DEFAULT_MAX_DEPTH = 32
DEFAULT_MAX_BYTES = 65_536
# Front matter longer than this is not parsed (the file's text is kept as it is, and rejected
# with the reason, rather than a parser run over megabytes of YAML).
MAX_FRONT_MATTER_CHARS = 65_536
# The integers every store keeps exact (signed 64-bit); any other number is a double.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# What U+0000 becomes in a metadata string or key (no PostgreSQL text or jsonb value holds it).
NUL, NUL_REPLACEMENT = "\x00", "\ufffd"
# A key path in a reason is cut to this many characters (a path 10,000 levels deep is no help).
_SHOWN_PATH = 120

# YAML front matter as Jekyll, Hugo and Pandoc read it: the file's first line is ``---``, the
# block ends at the next line that is ``---`` or ``...``.
FRONT_MATTER = re.compile(
    r"\A---[ \t]*\r?\n(?P<body>.*?\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
# The first line of a block meant as a mapping: ``key:`` (a YAML error in such a block is a
# broken front matter, not a thematic break followed by text).
_MAPPING_LINE = re.compile(r"^[ \t]*[\"']?[^\s:#\"'][^:\n]*[\"']?[ \t]*:(?:[ \t]|$)", re.M)


class MetadataError(ValueError):
    """A metadata value that JSON cannot hold, or metadata over a bound; the message names the
    key."""


# --- Canonical numbers -------------------------------------------------------------------------


def _canonical_number(value: int | float) -> int | float:
    """The module docstring's number rule; ValueError for what no double holds (NaN, infinity,
    an integer beyond about 1.8e308). ``value`` is an int or a float, not a bool."""
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return value
        try:
            as_float = float(value)  # correctly rounded: the nearest double
        except OverflowError:
            raise ValueError(f"{_digits(value)} is beyond the range of a double") from None
        value = as_float
        # and that double by the rule: -2**63 - 1 rounds to -2**63, an integer within range
    if not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number")
    if value.is_integer() and INT64_MIN <= value <= INT64_MAX:  # exact int/float comparison
        return int(value)
    return value


def _digits(value: int) -> str:
    """A huge integer named in a message without writing out its digits."""
    sign = "-" if value < 0 else ""
    return f"an integer of {len(str(abs(value)))} digits" if abs(value) > 10**30 else f"{sign}{abs(value)}"


def canonical_value(value: Any) -> Any:
    """``value`` (a JSON value: None, bool, int, float, str, list, dict) with every number in
    the canonical form of the module docstring; lists (and tuples, as lists) and dicts are
    walked, everything else is returned unchanged (booleans stay booleans). ValueError for NaN,
    an infinity or an integer no double holds.

    >>> canonical_value({"a": 1e15, "b": [2.0, -0.0, True, 0.5], "c": 2**70})
    {'a': 1000000000000000, 'b': [2, 0, True, 0.5], 'c': 1.1805916207174113e+21}
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return _canonical_number(value)
    if isinstance(value, dict):
        return {key: canonical_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical_value(item) for item in value]
    return value


def canonical_json(text: str) -> str:
    """JSON text in its canonical form: numbers by :func:`canonical_value`, keys sorted, no
    spaces, non-ASCII kept. Equal JSON values give equal text, and so do the forms PostgreSQL
    ``jsonb``, Qdrant and LanceDB give back of what this module wrote. ValueError for text that
    is not JSON or holds a number no double holds.

    >>> canonical_json('{"b": 100000000000000000000, "a": [0.00000015, -0.0, 1e15]}')
    '{"a":[1.5e-07,0,1000000000000000],"b":1e+20}'
    """
    return json.dumps(canonical_value(json.loads(text)), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)


# --- Values ------------------------------------------------------------------------------------


def json_value(value: Any, where: str = "", *, max_depth: int | None = DEFAULT_MAX_DEPTH) -> Any:
    """``value``, one metadata field's value (it sits in the metadata object, level 1), as a
    JSON value, or :class:`MetadataError` naming ``where`` it sits.

    Coercions (documented, deterministic): numbers take the canonical form (the module
    docstring: ``2.0`` -> ``2``, ``2**70`` -> ``1.1805916207174113e+21``); NaN becomes null
    (pandas writes a missing number as NaN); U+0000 in a string or key becomes U+FFFD; dates,
    times and datetimes become ISO 8601 strings (a timezone-aware datetime keeps its offset);
    ``Decimal`` becomes its exact decimal string; tuples and sets become arrays (sets sorted by
    their JSON text); object keys become strings (``1`` -> ``"1"``, ``true`` -> ``"true"``, a
    date -> its ISO form). Rejected: infinities (and a NaN ``Decimal``), integers beyond a
    double's range, bytes, any other type, more than :data:`MAX_VALUES` values, and nesting
    past ``max_depth`` levels (None: no limit).
    """
    return _Converter(max_depth).value(value, where, 1)


class _Converter:
    """One document's conversion: the values left in its budget and its depth limit."""

    def __init__(self, max_depth: int | None) -> None:
        self.left = MAX_VALUES
        self.max_depth = max_depth

    def value(self, value: Any, where: str, depth: int) -> Any:
        """``value`` as JSON; it sits inside ``depth`` containers (the metadata object is 1)."""
        self.left -= 1
        if self.left < 0:
            raise MetadataError(f"metadata holds more than {MAX_VALUES} values")
        name = where or "value"
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return _storable(value, f"metadata {name!r}")
        if isinstance(value, float) and math.isnan(value):
            return None  # how pandas writes a missing number: missing it stays
        if isinstance(value, (int, float)):
            try:
                return _canonical_number(value)
            except ValueError:
                shown = value if isinstance(value, float) else _digits(value)
                raise MetadataError(f"metadata {name!r} is {shown}, which JSON cannot hold") from None
        if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
            return value.isoformat()
        if isinstance(value, decimal.Decimal):
            if not value.is_finite():
                raise MetadataError(f"metadata {name!r} is {value}, which JSON cannot hold")
            return str(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            raise MetadataError(f"metadata {name!r} is binary (bytes), not text")
        if not isinstance(value, (dict, list, tuple, set, frozenset)):
            raise MetadataError(f"metadata {name!r} is a {type(value).__name__}, which has no JSON form")
        # A container, one level deeper; checked before any recursion, so deep metadata stops
        # here, far from Python's recursion limit (one frame per level).
        level = depth + 1
        if self.max_depth is not None and level > self.max_depth:
            found, exact = _nesting(value)
            deep = f"{depth + found}" if exact else f"at least {depth + found}"
            raise MetadataError(
                f"metadata is nested {deep} levels deep, over the limit of {self.max_depth} "
                f"levels ({_shown_path(name)!r} is at level {level})")
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                text = _key(key, name)
                out[text] = self.value(item, f"{where}.{text}" if where else text, level)
            return out
        if isinstance(value, (list, tuple)):
            return [self.value(item, f"{name}[{index}]", level) for index, item in enumerate(value)]
        items = [self.value(item, f"{name}[]", level) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))


def _nesting(value: Any) -> tuple[int, bool]:
    """Levels of containers in ``value`` (1 for a flat list), walked without recursion and over
    at most :data:`MAX_VALUES` values (a YAML alias can make a structure hold itself): (levels,
    whether the walk saw everything)."""
    deepest, left = 0, MAX_VALUES
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        left -= 1
        if left < 0:
            return deepest, False
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, (list, tuple, set, frozenset)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item)
    return deepest, True


def _shown_path(path: str) -> str:
    return path if len(path) <= _SHOWN_PATH else path[: _SHOWN_PATH // 2] + "..." + path[-_SHOWN_PATH // 2:]


def _storable(text: str, what: str) -> str:
    """``text`` with U+0000 written U+FFFD; MetadataError for a lone surrogate (no UTF-8)."""
    if not _utf8_encodable(text):
        raise MetadataError(f"{what} contains an unpaired surrogate escape")
    return text.replace(NUL, NUL_REPLACEMENT) if NUL in text else text


def _key(key: Any, where: str) -> str:
    if isinstance(key, str):
        return _storable(key, f"metadata key in {where!r}")
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
    """The JSON text of an already JSON value: numbers canonical (:func:`canonical_value`), keys
    sorted, non-ASCII kept."""
    return json.dumps(canonical_value(value), sort_keys=True, ensure_ascii=False, allow_nan=False)


def metadata_pairs(
    items: Iterable[tuple[Any, Any]], *, max_depth: int | None = DEFAULT_MAX_DEPTH
) -> MetadataPairs:
    """Sorted (key, canonical JSON text) pairs: hashable and stable. Raises
    :class:`MetadataError` for a value JSON cannot hold, more than :data:`MAX_VALUES` values or
    nesting past ``max_depth`` levels, the metadata object being level 1 (see
    :func:`json_value`)."""
    converter = _Converter(max_depth)
    pairs = {}
    for key, value in items:
        name = _key(key, "metadata")
        pairs[name] = encode_value(converter.value(value, name, 1))
    return tuple(sorted(pairs.items()))


def over_byte_limit(pairs: MetadataPairs, max_bytes: int | None) -> str | None:
    """Why ``pairs`` are too big, or None: their JSON object text (:func:`metadata_json`, what
    the ``metadata`` columns hold and each chunk carries) is over ``max_bytes`` UTF-8 bytes
    (None: no limit). The reason names the size, the limit and the largest value's key.

    >>> over_byte_limit((("body", '"' + "x" * 90 + '"'), ("team", '"arm"')), 64)
    "metadata is 117 bytes of JSON, over the limit of 64 (the largest value: 'body', 92 bytes)"
    """
    if max_bytes is None:
        return None
    size = len(metadata_json(pairs).encode("utf-8"))
    if size <= max_bytes:
        return None
    sizes = {key: len(value.encode("utf-8")) for key, value in pairs}
    largest = max(sizes, key=lambda key: (sizes[key], key))
    return (f"metadata is {size} bytes of JSON, over the limit of {max_bytes} "
            f"(the largest value: {_shown_path(largest)!r}, {sizes[largest]} bytes)")


@functools.lru_cache(maxsize=1 << 12)
def merged(*layers: MetadataPairs) -> MetadataPairs:
    """The layers' pairs in one, a later layer's value winning on a shared key. Cached (a pure
    function of tuples): the records of a dump share their file's facts, and most share their
    metadata too; a reader asks for each record's merged pairs twice."""
    combined: dict[str, str] = {}
    for layer in layers:
        combined.update(layer)
    return tuple(sorted(combined.items()))


@functools.lru_cache(maxsize=4096)
def file_facts(uri: str, size: int | None, modified: float | None) -> MetadataPairs:
    """``source_uri``, and ``file_size`` / ``file_modified`` where known (None: not known; 0.0
    is the epoch, ``1970-01-01T00:00:00Z``): what every file contributes to its documents'
    metadata. Cached (a pure function): the reader, the carry key and the documents table each
    ask for a document's facts, and a dump's records share their file's."""
    pairs = [_fact(SOURCE_URI, uri)]
    if size is not None:
        pairs.append(_fact(FILE_SIZE, int(size)))
    if modified is not None:
        stamp = datetime.datetime.fromtimestamp(modified, tz=datetime.timezone.utc)
        pairs.append(_fact(FILE_MODIFIED, stamp.isoformat(timespec="seconds").replace("+00:00", "Z")))
    return tuple(sorted(pairs))


@functools.lru_cache(maxsize=1 << 14)
def _fact(key: str, value: Any) -> tuple[str, str]:
    """One fact's pair, as :func:`metadata_pairs` makes it. Cached apart from the whole: the
    three askers use two forms of a document's facts (the carry key's leaves size and mtime
    out), which past a few thousand files evict each other from :func:`file_facts`' cache,
    while a uri's own pair is asked for in both."""
    return metadata_pairs(((key, value),))[0]


def metadata_json(pairs: MetadataPairs, keys: Sequence[str] | None = None) -> str:
    """The pairs as one JSON object text (keys sorted); only ``keys`` when given (a key the
    document lacks is left out, not written as null)."""
    if keys is None:
        return _whole_json(pairs)
    return _json_of(pairs, keys)


@functools.lru_cache(maxsize=1 << 12)
def _whole_json(pairs: MetadataPairs) -> str:
    """:func:`metadata_json` of every pair, cached as :func:`merged` is (the reader's byte
    limit and its facts digest ask for each record's)."""
    return _json_of(pairs, None)


def _json_of(pairs: MetadataPairs, keys: Sequence[str] | None) -> str:
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


def front_matter(text: str, *, max_depth: int | None = DEFAULT_MAX_DEPTH) -> FrontMatter | str | None:
    """The leading YAML front matter of a Markdown or text file: a :class:`FrontMatter`, the
    reason it is broken (a ``str``), or None when the text has none.

    A block is front matter only if it parses to a mapping (``yaml.safe_load``: no tags that
    build objects). A block that is not a mapping (``---`` / ``Title`` / ``---`` is a thematic
    break and a setext heading) is text. A block that reads as ``key: value`` lines but is not
    valid YAML is broken front matter: the document is rejected with the parser's message, not
    indexed without the fields its author gave it (an access group among them, perhaps).
    Fields nested past ``max_depth`` levels (see :func:`metadata_pairs`) are a reason too.

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
        pairs = metadata_pairs(value.items(), max_depth=max_depth)
    except MetadataError as exc:
        return f"front matter: {exc}"
    except RecursionError:
        return "front matter is nested too deeply"
    return FrontMatter(found.end(), pairs)


# --- Filters -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TypedCondition:
    """``key:=JSON``: the key's value equals that JSON value, type included (``n:=1`` matches
    the number 1, never the string "1"; ``s:="1"`` the string only); numbers compare in
    canonical form (``1.0`` is ``1``); an array matches when one of its elements equals it."""

    key: str
    value: Any
    spec: str

    def __str__(self) -> str:
        return self.spec


def parse_condition(spec: str) -> tuple[str, str] | TypedCondition:
    """``key=value`` -> (key, value), compared as text (see :func:`matches`); ``key:=JSON`` ->
    a :class:`TypedCondition`, compared as JSON values. ValueError for anything else."""
    key, sep, value = spec.partition("=")
    if not sep or not key.strip() or key.strip() == ":":
        raise ValueError(f"--where takes key=value or key:=JSON, got {spec!r}")
    if key.endswith(":"):
        try:
            wanted = canonical_value(json.loads(value))
        except ValueError as exc:
            raise ValueError(f"--where {spec!r}: after := comes a JSON value (1, true, null, "
                             f'"text"): {exc}') from None
        return TypedCondition(key[:-1].strip(), wanted, spec)
    return key.strip(), value


def matches(metadata: str | None, conditions: Sequence[tuple[str, str] | TypedCondition]) -> bool:
    """Whether a metadata JSON object meets every condition.

    ``(key, text)``: a string value equals the text; a number, boolean or null equals its JSON
    text (``3``, ``true``, ``null``) or, for a number, the number the text reads as; an array
    matches when one of its elements does (tags, access groups). A :class:`TypedCondition`
    compares JSON values, types included. A document without the key does not match.
    """
    if not conditions:
        return True
    fields = json.loads(metadata) if metadata else {}
    for condition in conditions:
        if isinstance(condition, TypedCondition):
            if condition.key not in fields or not _typed_matches(fields[condition.key], condition.value):
                return False
        else:
            key, wanted = condition
            if key not in fields or not _value_matches(fields[key], wanted):
                return False
    return True


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: bool is not a number, numbers compare canonically."""
    return encode_value(canonical_value(a)) == encode_value(canonical_value(b))


def _typed_matches(value: Any, wanted: Any) -> bool:
    if isinstance(value, list) and not isinstance(wanted, list):
        return any(_same_json(item, wanted) for item in value)
    return _same_json(value, wanted)


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
