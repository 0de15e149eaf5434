"""``chunkline.access``: where a document's principals come from (metadata key, then the first
mapping pattern, then the default), what a principal may be, and who may read a row."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.access import (
    AccessError,
    AccessOptions,
    AccessPolicy,
    access_digest,
    caller_principals,
    check_principal,
    glob_regex,
    load_policy,
    parse_mapping,
    principals_of,
    readable,
)
from chunkline.metadata import metadata_pairs
from chunkline.records import Document
from chunkline.pipeline.config import ConfigError, load_config

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_:@.0123456789", min_size=1, max_size=12)


def doc(doc_id: str = "a.md", uri: str = "/corpus/a.md", **metadata) -> Document:
    return Document(doc_id, uri, "text", metadata_pairs(metadata.items()))


def policy(**fields) -> AccessPolicy:
    return AccessPolicy(**{"metadata_key": "groups", "root": "/corpus", **fields})


@pytest.mark.parametrize("value, expected", [
    ("eng", ("eng",)),
    (["sales", "eng", "sales"], ("eng", "sales")),  # sorted, each once
    (["public"], ("public",)),
])
def test_the_metadata_key_names_the_principals(value, expected) -> None:
    assert principals_of(doc(groups=value), policy()) == expected


@pytest.mark.parametrize("value", [None, []])
def test_a_metadata_value_naming_nobody_falls_through_to_the_mapping(value) -> None:
    rules = (("hr/**", ("hr",)),)
    assert principals_of(doc("hr/pay.md", "/corpus/hr/pay.md", groups=value), policy(rules=rules)) == ("hr",)
    assert principals_of(doc(groups=value), policy(rules=rules, default=("staff",))) == ("staff",)


def test_metadata_wins_over_the_mapping_and_the_mapping_over_the_default() -> None:
    rules = (("**", ("everyone",)),)
    assert principals_of(doc(groups="eng"), policy(rules=rules, default=("staff",))) == ("eng",)
    assert principals_of(doc(), policy(rules=rules, default=("staff",))) == ("everyone",)
    assert principals_of(doc(), policy(default=("staff",))) == ("staff",)


def test_deny_by_default_a_document_no_source_names_is_readable_by_nobody() -> None:
    found = principals_of(doc(), policy())
    assert found == ()
    assert not readable(found, ["eng", "staff", "public"])


def test_the_first_matching_pattern_decides_in_file_order() -> None:
    rules = parse_mapping("hr/private/**: [hr-leads]\nhr/**: [hr]\n'**': public\n", "acl.yaml")
    assert [pattern for pattern, _ in rules] == ["hr/private/**", "hr/**", "**"]
    at = policy(metadata_key=None, rules=rules)
    assert principals_of(doc("hr/private/x.md", "/corpus/hr/private/x.md"), at) == ("hr-leads",)
    assert principals_of(doc("hr/x.md", "/corpus/hr/x.md"), at) == ("hr",)
    assert principals_of(doc("wiki/x.md", "/corpus/wiki/x.md"), at) == ("public",)


def test_a_record_gets_the_rule_of_its_file_never_of_its_id() -> None:
    # The review's case: a ticket under hr/ whose own id names the public wiki.
    rules = parse_mapping("'hr/**': [hr]\n'wiki/public/**': public\n", "acl.yaml")
    at = policy(metadata_key=None, rules=rules)
    assert principals_of(doc("wiki/public/leak-1", "/corpus/hr/tickets.jsonl"), at) == ("hr",)
    assert principals_of(doc("T-1", "/corpus/tickets/open.jsonl"),
                         policy(metadata_key=None, rules=(("T-*", ("audit",)),))) == ()


def test_an_archive_member_is_matched_by_the_archive_and_by_its_own_path() -> None:
    rules = parse_mapping("'exports/share.zip//private/**': [leads]\n'exports/*.zip': [staff]\n",
                          "acl.yaml")
    at = policy(metadata_key=None, rules=rules)
    assert principals_of(doc("d", "/corpus/exports/share.zip//private/a.md"), at) == ("leads",)
    assert principals_of(doc("d", "/corpus/exports/share.zip//docs/a.md"), at) == ("staff",)
    # A member named like another directory stays under its archive's path.
    assert principals_of(doc("d", "/corpus/hr/x.zip//wiki/public/a.md"),
                         policy(metadata_key=None, rules=(("wiki/**", ("public",)),))) == ()


SEGMENT = st.text(alphabet="abcHR-_.0123456789", min_size=1, max_size=6)
PATHS = st.lists(SEGMENT, min_size=1, max_size=4).map("/".join)


@settings(max_examples=300)
@given(path=PATHS, member=st.none() | PATHS, first_id=st.text(max_size=30), other_id=st.text(max_size=30),
       patterns=st.lists(st.sampled_from(["**", "a*/**", "**/*.jsonl", "hr/**", "*", "wiki/public/**",
                                          "**/b*", "a/**/c", "*.zip//**", "[ab]*/**"]),
                         min_size=1, max_size=4))
def test_a_documents_id_never_changes_its_principals(path, member, first_id, other_id, patterns) -> None:
    uri = f"/corpus/{path}" + (f".zip//{member}" if member else "")
    rules = tuple((pattern, (f"p{i}",)) for i, pattern in enumerate(patterns))
    at = policy(metadata_key=None, rules=rules, default=("fallback",))
    assert principals_of(doc(first_id, uri), at) == principals_of(doc(other_id, uri), at)
    # ... and an id that is itself a path some rule names changes nothing either.
    assert principals_of(doc(path, uri), at) == principals_of(doc("wiki/public/x", uri), at)


@pytest.mark.parametrize("pattern, path, hit", [
    ("*.md", "a.md", True), ("*.md", "dir/a.md", False), ("**/*.md", "a.md", True),
    ("**/*.md", "x/y/a.md", True), ("docs/**", "docs/a/b.txt", True), ("docs/**/b.txt", "docs/b.txt", True),
    ("a?.md", "ab.md", True), ("a?.md", "a/.md", False), ("[ab].md", "b.md", True),
    ("[!ab].md", "b.md", False), ("[!ab].md", "c.md", True), ("a+b(1).md", "a+b(1).md", True),
])
def test_glob_patterns_read_like_gitignore(pattern, path, hit) -> None:
    assert bool(glob_regex(pattern).fullmatch(path)) is hit


@pytest.mark.parametrize("value, why", [
    ("eng,sales", "comma"), ("", "empty"), (" eng", "whitespace"), ("eng\n", "control"),
    ("\x1b[31mred", "control"), (5, "a number"), ({"a": 1}, "an object"), (["eng", 3], "a number"),
    ("x" * 300, "at most"),
])
def test_a_malformed_principal_rejects_the_document_naming_the_key(value, why) -> None:
    with pytest.raises(AccessError, match=why) as raised:
        principals_of(doc(groups=value), policy())
    assert "metadata 'groups'" in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("text, why", [
    ("[a, b]", "mapping of path patterns"), ("", "mapping of path patterns"),
    ("'*.md': []", "non-empty list"), ("'*.md': 'a,b'", "comma"), ("'*.md': [1]", "a number"),
    ("a: [b", "not YAML or JSON"),
])
def test_a_malformed_mapping_is_one_line_naming_the_file(text, why) -> None:
    with pytest.raises(AccessError, match=why) as raised:
        parse_mapping(text, "access.mapping acl.yaml")
    assert str(raised.value).startswith("access.mapping acl.yaml") and "\n" not in str(raised.value)


def test_json_mappings_and_files_load(tmp_path) -> None:
    path = tmp_path / "acl.json"
    path.write_text(json.dumps({"hr/**": ["hr"], "**": "public"}))
    loaded = load_policy(AccessOptions(mapping=str(path)), "/corpus")
    assert loaded.rules == (("hr/**", ("hr",)), ("**", ("public",)))
    assert pickle.loads(pickle.dumps(loaded)) == loaded  # what a worker receives
    with pytest.raises(AccessError, match="cannot read"):
        load_policy(AccessOptions(mapping=str(tmp_path / "missing.yaml")))


def test_options_need_a_source_and_valid_names() -> None:
    with pytest.raises(ValueError, match="needs a metadata_key, a mapping or a default"):
        AccessOptions()
    with pytest.raises(ValueError, match="AccessOptions.default: principal 'a,b' holds a comma"):
        AccessOptions(default=("a,b",))
    with pytest.raises(ValueError, match="AccessOptions.public"):
        AccessOptions(metadata_key="groups", public=" x")


def test_the_config_section_is_off_by_default_and_checked(tmp_path) -> None:
    assert load_config(None).access is None
    config = load_config(None, ["access.metadata_key=groups", "access.default=[staff]"])
    assert config.access.options() == AccessOptions(metadata_key="groups", default=("staff",))
    with pytest.raises(ConfigError, match=r"access\.default: principal 'a,b' holds a comma"):
        load_config(None, ["access.default=['a,b']"])
    with pytest.raises(ConfigError, match=r"access\.nope: unknown key"):
        load_config(None, ["access.nope=1", "access.default=[x]"])


def test_public_rows_are_readable_by_every_caller_and_only_when_named() -> None:
    assert readable(("public",), [])
    assert readable(("eng", "public"), ["sales"])
    assert not readable(("eng",), ["sales"])
    assert readable(("everyone",), [], public="everyone")
    assert readable(None, [])  # a row of a run written without access control


def test_caller_principals_parse_as_the_cli_takes_them() -> None:
    assert caller_principals("sales, eng,sales") == ("eng", "sales")
    with pytest.raises(AccessError, match="at least one"):
        caller_principals(" , ")
    with pytest.raises(AccessError, match="control"):
        caller_principals("eng\x07")


@settings(max_examples=200, deadline=None)
@given(st.lists(NAMES, max_size=6), st.lists(NAMES, max_size=4))
def test_principals_are_sorted_unique_and_readable_exactly_when_shared(names, caller) -> None:
    found = principals_of(doc(groups=names), policy(public="public-principal"))
    assert list(found) == sorted(set(names))
    assert all(check_principal(name, "x") == name for name in found)
    assert readable(found, caller, "public-principal") == bool(set(found) & set(caller))


@settings(max_examples=200, deadline=None)
@given(NAMES, st.sampled_from([",", "\n", "\t", "\x00", "\x1b", "\u2028"]), NAMES)
def test_every_name_with_a_separator_or_control_character_is_rejected(left, bad, right) -> None:
    with pytest.raises(AccessError):
        check_principal(left + bad + right, "x")
    assert check_principal(f"{left} {right}", "x") == f"{left} {right}"  # a space inside is a name


@given(st.lists(NAMES, max_size=4, unique=True), st.lists(NAMES, max_size=4, unique=True))
def test_access_digests_tell_sets_apart(a, b) -> None:
    a, b = sorted(a), sorted(b)
    assert (access_digest(a) == access_digest(b)) == (a == b)
    assert len(access_digest(a)) == 16  # fixed: dedupe's exact key is this + the text hash
