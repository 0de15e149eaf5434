"""Metadata: values made JSON (coercions and rejections), YAML front matter, filters."""

from __future__ import annotations

import datetime
import decimal
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.metadata import (
    MAX_VALUES,
    FrontMatter,
    MetadataError,
    file_facts,
    front_matter,
    json_value,
    matches,
    merged,
    metadata_json,
    metadata_pairs,
    parse_condition,
)

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), JSON_VALUES, max_size=6))
def test_json_metadata_round_trips(fields: dict) -> None:
    assert json.loads(metadata_json(metadata_pairs(fields.items()))) == fields


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


def test_later_layers_win_and_keys_filter() -> None:
    facts = file_facts("gs://b/a.md", 12, 0.0 + 86_400)
    assert dict(facts) == {"file_modified": '"1970-01-02T00:00:00Z"', "file_size": "12",
                           "source_uri": '"gs://b/a.md"'}
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
