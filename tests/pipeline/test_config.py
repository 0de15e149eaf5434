"""Config: YAML -> typed, frozen, validated; errors name the key path."""

from __future__ import annotations

import dataclasses
import re
import types
import typing

from pathlib import Path

import pytest

from chunkline.boilerplate import BoilerplateOptions
from chunkline.clean import CleanOptions
from chunkline.context.options import ContextOptions
from chunkline.embedder import EmbedOptions
from chunkline.late import LateOptions
from chunkline.minhash import MinHashOptions
from chunkline.readers import JsonlOptions, ParquetOptions, ReadOptions
from chunkline.splitting.semantic import SemanticOptions

from chunkline.pipeline.config import Config, ConfigError, load_config, validate

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["local.yaml", "portable.yaml", "prism.yaml", "flink.yaml", "dataflow.yaml"])
def test_shipped_configs_validate(name: str) -> None:
    config = load_config(CONFIGS / name)
    assert isinstance(config, Config)


def test_local_yaml_spells_out_exactly_the_defaults() -> None:
    # configs/local.yaml is the documented reference of every stage: it must not drift.
    assert load_config(CONFIGS / "local.yaml") == load_config(None)


def test_defaults() -> None:
    config = load_config(None)
    assert config.runner.name == "FnApiRunner"
    assert config.split.max_tokens is None and config.embed is not None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"split": {"max_tokn": 3}}, "split.max_tokn: unknown key"),
        ({"splitt": {}}, "splitt: unknown key"),
        ({"split": {"max_tokens": "256"}}, "split.max_tokens: Input should be a valid integer"),
        ({"split": {"overlap": -1}}, "split.overlap"),
        ({"split": {"max_tokens": 10, "overlap": 10}}, "overlap (10) must be an int >= 0 and below max_tokens (10)"),
        ({"embed": {"dtype": "fp8"}}, "embed.dtype"),
        ({"input": {"jsonl": {"id_fild": "x"}}}, "input.jsonl.id_fild: unknown key"),
        ({"output": {"chunk_shards": 0}}, "output.chunk_shards"),
        ({"runner": {"name": "SparkRunnerX"}}, "runner.name"),
        ({"clean": {"patterns": ["(unclosed"]}}, "clean.patterns: '(unclosed' is not a valid regex"),
        ({"dedupe": {"near": {"threshold": 1.5}}}, "dedupe.near.threshold"),
        ({"split": {"mode": "semantic"}, "embed": None}, "semantic needs the embedding model"),
        ({"context": {"provider": "cohere"}}, "context.provider"),
        ({"embed": {"mode": "early"}}, "embed.mode"),
    ],
)
def test_bad_config_names_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(data)
    assert message in str(info.value)


def test_config_is_frozen() -> None:
    config = load_config(None)
    with pytest.raises(Exception):
        config.split.overlap = 3  # type: ignore[misc]


def test_overrides_are_typed(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("split:\n  overlap: 4\n", encoding="utf-8")
    config = load_config(path, ["split.overlap=16", "embed=null", "runner.options=[--a=1]"])
    assert config.split.overlap == 16
    assert config.embed is None
    assert config.runner.options == ("--a=1",)
    with pytest.raises(ConfigError, match="key.path=value"):
        load_config(path, ["split.overlap"])


def test_unreadable_config_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)


# --- One home per rule: the config is generated from the library's options -----------------------

# (dotted config path, the library options dataclass it is generated from)
OPTION_SECTIONS = [
    ("clean", CleanOptions),
    ("boilerplate", BoilerplateOptions),
    ("dedupe.near", MinHashOptions),
    ("embed", EmbedOptions),
    ("embed.late", LateOptions),
    ("input", ReadOptions),
    ("input.jsonl", JsonlOptions),
    ("input.parquet", ParquetOptions),
    ("split.semantic", SemanticOptions),
    ("context", ContextOptions),
]


def _section(config, dotted: str):
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def _outside(marker) -> object | None:
    """A value just outside an annotated-types bound."""
    for name, step in (("ge", -1), ("gt", 0), ("le", 1), ("lt", 0)):
        bound = getattr(marker, name, None)
        if bound is not None:
            return bound + step
    return None


def _bound_cases():
    for dotted, cls in OPTION_SECTIONS:
        hints = typing.get_type_hints(cls, include_extras=True)
        for spec in dataclasses.fields(cls):
            hint = hints[spec.name]
            if typing.get_origin(hint) in (typing.Union, types.UnionType):
                hint = next(a for a in typing.get_args(hint) if a is not type(None))
            if typing.get_origin(hint) is not typing.Annotated:
                continue
            inner, *markers = typing.get_args(hint)
            for marker in markers:
                value = _outside(marker)
                if value is not None:
                    yield pytest.param(dotted, cls, spec.name, inner(value),
                                       id=f"{dotted}.{spec.name}={value}")


@pytest.mark.parametrize(("dotted", "cls"), OPTION_SECTIONS)
def test_every_library_option_is_a_config_key_with_its_default_and_help(dotted, cls) -> None:
    section = _section(validate({"context": {}}), dotted)  # context is off unless named
    assert section.options() == cls()
    schema = type(section).model_fields
    for spec in dataclasses.fields(cls):
        assert spec.name in schema, f"{cls.__name__}.{spec.name} cannot be set from YAML"
        if not dataclasses.is_dataclass(spec.default):  # a nested section is checked on its own
            assert schema[spec.name].default == spec.default
        assert schema[spec.name].description == spec.metadata["help"]


@pytest.mark.parametrize(("dotted", "cls", "name", "value"), list(_bound_cases()))
def test_library_and_config_refuse_the_same_values(dotted, cls, name, value) -> None:
    with pytest.raises(ValueError, match=f"{cls.__name__}.{name}"):
        cls(**{name: value})
    with pytest.raises(ConfigError, match=re.escape(f"{dotted}.{name}:")):
        load_config(None, [f"{dotted}.{name}={value}"])


def test_a_rule_across_fields_is_the_library_check_named_by_its_field() -> None:
    with pytest.raises(ValueError, match="bands and rows are given together"):
        MinHashOptions(bands=4)
    with pytest.raises(ConfigError, match="dedupe.near.bands: and rows are given together"):
        load_config(None, ["dedupe.near.bands=4"])
    config = load_config(None, ["dedupe.near.bands=16", "dedupe.near.rows=8",
                                "embed.late.batch_size=2"])
    assert config.dedupe.near.options().lsh() == (16, 8)
    assert config.embed.late.options().batch_size == 2


@pytest.mark.parametrize("override, path, mode", [
    ("secrets=redact", ("secrets",), "redact"), ("input.ocr=never", ("input", "ocr"), "never")])
def test_a_section_with_a_mode_takes_the_mode_alone(override, path, mode) -> None:
    section = load_config(None, [override])
    for name in path:
        section = getattr(section, name)
    assert section.options().mode == mode
    with pytest.raises(ConfigError, match=".".join(path) + ".mode"):
        load_config(None, [override.split("=")[0] + "=sometimes"])


def test_the_type_checkers_declarations_match_the_generated_sections() -> None:
    """pipeline/config.py declares each section options_section() generates for mypy (in its
    TYPE_CHECKING block, which never runs): each declaration names the dataclass its section
    was made from, and every field it names again is one of the section's, a nested section
    declared with its own dataclass."""
    import ast
    import inspect

    from chunkline.pipeline import config

    tree = ast.parse(inspect.getsource(config))
    block = next(node for node in tree.body
                 if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    declared = {node.name: node for node in block.body if isinstance(node, ast.ClassDef)}
    made_from = {name: ast.unparse(node.bases[1]) for name, node in declared.items()}
    public = [name for name in declared if not name.startswith("_")]
    assert len(public) == 11  # input, clean, secrets, boilerplate, near, split, late, embed, ...
    for name in public:
        section = getattr(config, name)
        assert section.options_class.__name__ == made_from[name]
        for item in declared[name].body:
            if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                continue
            field = item.target.id
            assert field in section.model_fields, f"{name}.{field}"
            nested = ast.unparse(item.annotation)
            if nested in made_from:
                runtime = section.model_fields[field].annotation
                assert runtime.options_class.__name__ == made_from[nested], f"{name}.{field}"
