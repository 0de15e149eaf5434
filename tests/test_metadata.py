"""Metadata: values made JSON (coercions and rejections), canonical numbers and what stores give
back, U+0000, bounds, YAML front matter, filters."""

from __future__ import annotations

import datetime
import decimal
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.metadata import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    MAX_VALUES,
    FrontMatter,
    MetadataError,
    canonical_json,
    canonical_value,
    encode_value,
    file_facts,
    front_matter,
    json_value,
    matches,
    merged,
    metadata_json,
    metadata_pairs,
    over_byte_limit,
    parse_condition,
)

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)


def as_stored(value):
    """What the metadata of a JSON value reads back as: U+0000 written U+FFFD, numbers
    canonical."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {as_stored(key): as_stored(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_stored(item) for item in value]
    return canonical_value(value)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), JSON_VALUES, max_size=6))
def test_json_metadata_round_trips(fields: dict) -> None:
    assert json.loads(metadata_json(metadata_pairs(fields.items()))) == as_stored(fields)


# --- Canonical numbers: what every store gives back --------------------------------------------

EDGE_NUMBERS = [0, -0.0, 2.0, 1e15, 1e20, 1.5e-7, 5e-324, 2.2250738585072014e-308,
                1.7976931348623157e308, -1.7976931348623157e308, 2**63 - 1, 2**63, -(2**63),
                -(2**63) - 1, 2**64 - 1, 2**64, 2**70, 2.0**63, -(2.0**63), 9007199254740993,
                float(2**53 + 2), 0.1, -1e-300, 123456789012345678901234567890]
NUMBERS = (
    st.integers()
    | st.integers(min_value=-(2**1000), max_value=2**1000)
    | st.floats(allow_nan=False, allow_infinity=False)  # huge, tiny, subnormal, -0.0
    | st.integers(min_value=-(2**80), max_value=2**80).map(float)  # integral floats
    | st.sampled_from(EDGE_NUMBERS)
).filter(lambda n: abs(n) < 2**1023)  # beyond a double's range: rejected, tested on its own
NUMBERED_VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=16)


def plain_decimal(number) -> str:
    """A number as PostgreSQL ``numeric`` (what ``jsonb`` keeps) prints it: its exact decimal
    text, never an exponent (``1e+20`` -> ``100000000000000000000``)."""
    return format(decimal.Decimal(str(number)), "f")


def as_jsonb_gives_back(text: str) -> str:
    """JSON text the way jsonb returns it: numbers in plain decimals, keys in another order,
    its own spacing."""
    def dump(value) -> str:
        if isinstance(value, dict):
            return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {dump(v)}"
                                   for k, v in sorted(value.items(), key=lambda kv: (len(kv[0]), kv[0]))) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(dump(item) for item in value) + "]"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return plain_decimal(value)
        return json.dumps(value, ensure_ascii=False)
    return dump(json.loads(text))


def as_serde_gives_back(text: str) -> str:
    """JSON text the way Qdrant's server (serde_json) returns it: integers in i64 or u64 kept,
    any other integer a double; doubles in ryu's shortest form (``1e20``, no ``+``)."""
    def dump(value) -> str:
        if isinstance(value, dict):
            return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{dump(v)}" for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ",".join(dump(item) for item in value) + "]"
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value) if -(2**63) <= value <= 2**64 - 1 else dump(float(value))
        if isinstance(value, float):
            return repr(value).replace("e+", "e")
        return json.dumps(value, ensure_ascii=False)
    return dump(json.loads(text))


@settings(max_examples=300, deadline=None)
@given(NUMBERED_VALUES)
def test_canonical_json_is_idempotent(value) -> None:
    text = canonical_json(json.dumps(value))
    assert canonical_json(text) == text


@settings(max_examples=300, deadline=None)
@given(NUMBERED_VALUES)
def test_canonical_json_survives_jsonb(value) -> None:
    text = canonical_json(json.dumps(value))
    assert canonical_json(as_jsonb_gives_back(text)) == text


@settings(max_examples=300, deadline=None)
@given(NUMBERED_VALUES)
def test_canonical_json_survives_serde_json(value) -> None:
    text = canonical_json(json.dumps(value))
    assert canonical_json(as_serde_gives_back(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6), NUMBERED_VALUES, max_size=5))
def test_metadata_numbers_are_canonical_as_written(fields: dict) -> None:
    # Dumped as parsed, without canonicalizing, the metadata text already is canonical.
    text = metadata_json(metadata_pairs(fields.items()))
    plain = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert plain == canonical_json(text) == canonical_json(json.dumps(as_stored(fields)))
    for key, value in metadata_pairs(fields.items()):
        assert encode_value(json.loads(value)) == value


@pytest.mark.parametrize("value, text", [
    (1e15, "1000000000000000"), (2.0, "2"), (-0.0, "0"), (0.5, "0.5"), (1e20, "1e+20"),
    (1.5e-7, "1.5e-07"), (2**70, "1.1805916207174113e+21"), (2**63 - 1, "9223372036854775807"),
    (-(2**63), "-9223372036854775808"), (2**63, "9.223372036854776e+18"),
    (-(2**63) - 1, "-9223372036854775808"),  # its nearest double is -2**63, an integer
    (2.0**63, "9.223372036854776e+18"), (-(2.0**63), "-9223372036854775808"),
    (True, "true"), (False, "false"), ([1.0, {"x": -0.0}], '[1, {"x": 0}]'),
])
def test_numbers_take_one_form_wherever_metadata_is_made(value, text) -> None:
    assert metadata_pairs([("n", value)]) == (("n", text),)
    assert encode_value(value) == text
    assert json.loads(metadata_json(metadata_pairs([("n", value)])))["n"] == json.loads(text)


def test_what_stores_give_back_reads_as_what_was_written() -> None:
    written = metadata_json(metadata_pairs([("big", 1e20), ("tiny", 1.5e-7), ("zero", -0.0),
                                            ("huge", 2**70), ("id", 2**63 - 1)]))
    canonical = canonical_json(written)
    assert canonical == ('{"big":1e+20,"huge":1.1805916207174113e+21,"id":9223372036854775807,'
                         '"tiny":1.5e-07,"zero":0}')
    jsonb = ('{"id": 9223372036854775807, "big": 100000000000000000000, "huge": '
             '1180591620717411303424, "tiny": 0.00000015, "zero": -0.0}')
    serde = '{"big":1e20,"huge":1.1805916207174113e21,"id":9223372036854775807,"tiny":1.5e-7,"zero":0}'
    assert canonical_json(jsonb) == canonical_json(serde) == canonical


def test_canonical_value_leaves_booleans_and_the_rest() -> None:
    assert canonical_value({"t": True, "f": False, "s": "1.0", "n": None}) == {
        "t": True, "f": False, "s": "1.0", "n": None}
    assert type(canonical_value(True)) is bool and type(canonical_value(2.0)) is int


@pytest.mark.parametrize("value", [10**400, -(10**400), float("inf"), float("nan")])
def test_numbers_no_double_holds_are_refused(value) -> None:
    with pytest.raises(ValueError):
        canonical_value(value)
    if not (isinstance(value, float) and math.isnan(value)):  # NaN is pandas' missing number
        with pytest.raises(MetadataError, match="which JSON cannot hold"):
            metadata_pairs([("n", value)])
    with pytest.raises(ValueError):
        canonical_json("[1e400]")


# --- U+0000 ------------------------------------------------------------------------------------


def test_nul_in_strings_and_keys_is_the_replacement_character() -> None:
    pairs = metadata_pairs([("a\x00b", "x\x00y"), ("deep", {"k\x00": ["\x00"], "s": {"\x00"}})])
    assert pairs == (("a\ufffdb", '"x\ufffdy"'), ("deep", '{"k\ufffd": ["\ufffd"], "s": ["\ufffd"]}'))
    assert "\\u0000" not in metadata_json(pairs) and "\x00" not in metadata_json(pairs)
    front = front_matter('---\ntitle: "a\\0b"\n---\nBody\n')  # YAML's \0 escape is U+0000
    assert isinstance(front, FrontMatter) and front.pairs == (("title", '"a\ufffdb"'),)


# --- Bounds ------------------------------------------------------------------------------------


def nested(levels: int, leaf=1):
    """``levels`` objects one inside the other: ``nested(2)`` is ``{"a": {"a": 1}}``."""
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


def test_depth_limit_counts_the_metadata_object() -> None:
    # The metadata object is level 1: its value may hold DEFAULT_MAX_DEPTH - 1 more levels.
    assert DEFAULT_MAX_DEPTH == 32
    metadata_pairs(nested(DEFAULT_MAX_DEPTH).items())
    with pytest.raises(MetadataError) as caught:
        metadata_pairs(nested(DEFAULT_MAX_DEPTH + 1).items())
    path = ".".join(["a"] * DEFAULT_MAX_DEPTH)
    assert str(caught.value) == (f"metadata is nested 33 levels deep, over the limit of 32 levels "
                                 f"({path!r} is at level 33)")
    assert metadata_pairs([("x", [[1]])], max_depth=3) and json_value([[1]], max_depth=3) == [[1]]
    with pytest.raises(MetadataError, match="nested 3 levels deep, over the limit of 2"):
        metadata_pairs([("x", [[1]])], max_depth=2)


@pytest.mark.parametrize("levels", [500, 5000])
def test_deep_metadata_is_a_reason_never_a_recursion_error(levels: int) -> None:
    with pytest.raises(MetadataError) as caught:
        metadata_pairs(nested(levels).items())
    assert str(caught.value).startswith(f"metadata is nested {levels} levels deep, over the limit of 32")
    assert len(str(caught.value)) < 300  # the path is shown cut
    assert metadata_pairs(nested(100).items(), max_depth=None)  # no limit: as deep as Python goes


def test_yaml_that_holds_itself_stops_at_the_depth_limit() -> None:
    reason = front_matter("---\na: &x [*x]\n---\nBody\n")
    assert isinstance(reason, str) and reason.startswith("front matter: metadata is nested at least ")
    assert "over the limit of 32 levels" in reason
    deep = "---\nk: " + "[" * 40 + "]" * 40 + "\n---\nBody\n"
    assert front_matter(deep).startswith("front matter: metadata is nested 41 levels deep")
    assert isinstance(front_matter(deep, max_depth=None), FrontMatter)


def test_byte_limit_counts_the_whole_json_object() -> None:
    pairs = metadata_pairs([("body", "é" * 100), ("team", "arm")])
    size = len(metadata_json(pairs).encode("utf-8"))
    assert over_byte_limit(pairs, size) is None and over_byte_limit(pairs, None) is None
    assert over_byte_limit(pairs, size - 1) == (
        f"metadata is {size} bytes of JSON, over the limit of {size - 1} "
        f"(the largest value: 'body', 202 bytes)")
    assert DEFAULT_MAX_BYTES == 65_536


def test_coercions_are_documented_and_deterministic() -> None:
    value = {
        "day": datetime.date(2024, 6, 1),
        "at": datetime.datetime(2024, 6, 1, 8, 30, tzinfo=datetime.timezone.utc),
        "price": decimal.Decimal("12.50"),
        "tags": {"b", "a"},
        2: "two",
        True: "yes",
    }
    assert json_value(value) == {
        "day": "2024-06-01", "at": "2024-06-01T08:30:00+00:00", "price": "12.50",
        "tags": ["a", "b"], "2": "two", "true": "yes",
    }


@pytest.mark.parametrize("value, reason", [
    (float("-inf"), "metadata 'score' is -inf, which JSON cannot hold"),
    (decimal.Decimal("NaN"), "metadata 'score' is NaN, which JSON cannot hold"),
    (float("inf"), "metadata 'score' is inf, which JSON cannot hold"),
    (b"\x00\x01", "metadata 'score' is binary (bytes), not text"),
    ({"deep": [object()]}, "metadata 'score.deep[0]' is a object, which has no JSON form"),
    ("\ud800", "metadata 'score' contains an unpaired surrogate escape"),
])
def test_values_json_cannot_hold_are_rejected_by_name(value, reason) -> None:
    with pytest.raises(MetadataError) as caught:
        metadata_pairs([("score", value)])
    assert str(caught.value) == reason


@given(st.text(min_size=1, max_size=30), st.one_of(st.none(), st.integers(0, 2**62)),
       st.one_of(st.none(), st.floats(0, 4e9)))
def test_file_facts_are_the_metadata_pairs_of_the_facts(uri, size, modified) -> None:
    # Each fact's pair is cached on its own: together they must be what metadata_pairs makes.
    try:
        expected = metadata_pairs([("source_uri", uri)])
    except MetadataError:
        with pytest.raises(MetadataError):
            file_facts(uri, size, modified)
        return
    items = [("source_uri", uri)]
    if size is not None:
        items.append(("file_size", size))
    if modified is not None:
        stamp = datetime.datetime.fromtimestamp(modified, tz=datetime.timezone.utc)
        items.append(("file_modified", stamp.isoformat(timespec="seconds").replace("+00:00", "Z")))
    expected = metadata_pairs(items)
    assert file_facts(uri, size, modified) == expected
    assert file_facts(uri, size, modified) == expected


def test_later_layers_win_and_keys_filter() -> None:
    facts = file_facts("gs://b/a.md", 12, 0.0 + 86_400)
    assert dict(facts) == {"file_modified": '"1970-01-02T00:00:00Z"', "file_size": "12",
                           "source_uri": '"gs://b/a.md"'}
    assert dict(file_facts("a.md", 0, 0.0))["file_modified"] == '"1970-01-01T00:00:00Z"'
    user = metadata_pairs([("source_uri", "https://wiki/a"), ("team", "arm")])
    both = merged(facts, user)
    assert json.loads(metadata_json(both))["source_uri"] == "https://wiki/a"
    assert json.loads(metadata_json(both, ["team", "missing"])) == {"team": "arm"}


def test_front_matter_is_cut_and_parsed() -> None:
    text = "---\ntitle: Arm\ndate: 2024-06-01\naccess: [ops, eng]\n---\n# Arm\n\nBody.\n"
    found = front_matter(text)
    assert isinstance(found, FrontMatter)
    assert text[found.body_start:] == "# Arm\n\nBody.\n"
    assert json.loads(metadata_json(found.pairs)) == {
        "title": "Arm", "date": "2024-06-01", "access": ["ops", "eng"]}


@pytest.mark.parametrize("text", [
    "---\nTitle\n---\nBody\n",          # a thematic break and a setext heading: text
    "--- \n- a\n- b\n---\nBody\n",      # a list is not a mapping
    "No front matter\n---\na: 1\n---\n",
])
def test_blocks_that_are_not_mappings_stay_text(text) -> None:
    assert front_matter(text) is None


def test_broken_front_matter_is_a_reason() -> None:
    reason = front_matter("---\ntitle: [unclosed\naccess: ops\n---\nBody\n")
    assert isinstance(reason, str) and reason.startswith("front matter is not valid YAML")


def test_alias_bomb_is_bounded() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 8):
        previous = chr(ord("a") + level - 1)
        name = chr(ord("a") + level)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 10) + "]")
    reason = front_matter("---\n" + "\n".join(lines) + "\n---\nBody\n")
    assert reason == f"front matter: metadata holds more than {MAX_VALUES} values"


def test_empty_front_matter() -> None:
    found = front_matter("---\n---\nBody\n")
    assert isinstance(found, FrontMatter) and found.pairs == () and found.body_start == 8


def test_where_conditions() -> None:
    doc = metadata_json(metadata_pairs([("team", "arm"), ("access", ["ops", "eng"]),
                                        ("version", 2), ("draft", False)]))
    assert matches(doc, [parse_condition("team=arm")])
    assert matches(doc, [parse_condition("access=eng"), parse_condition("version=2")])
    assert matches(doc, [parse_condition("draft=false"), parse_condition("version=2.0")])
    assert not matches(doc, [parse_condition("team=Arm")])
    assert not matches(doc, [parse_condition("missing=x")])
    assert not matches(doc, [parse_condition("team=arm"), parse_condition("access=hr")])
    with pytest.raises(ValueError):
        parse_condition("no-equals-sign")


def test_nan_is_a_missing_value() -> None:
    assert metadata_pairs([("score", float("nan"))]) == (("score", "null"),)


def test_a_typed_condition_tells_the_number_from_the_string() -> None:
    from chunkline.metadata import matches, parse_condition

    number, text = '{"n": 1, "tags": [1, "x"]}', '{"n": "1"}'
    assert matches(number, [parse_condition("n=1")]) and matches(text, [parse_condition("n=1")])
    assert matches(number, [parse_condition("n:=1")]) and not matches(text, [parse_condition("n:=1")])
    assert matches(text, [parse_condition('n:="1"')]) and not matches(number, [parse_condition('n:="1"')])
    assert matches(number, [parse_condition("n:=1.0")])
    assert not matches('{"n": true}', [parse_condition("n:=1")])
    assert matches(number, [parse_condition("tags:=1")]) and not matches(number, [parse_condition('tags:="1"')])
    assert str(parse_condition("n:=1")) == "n:=1"
    with pytest.raises(ValueError, match="JSON value"):
        parse_condition("n:=not json")
