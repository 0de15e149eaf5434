"""Config: YAML -> typed, frozen, validated; errors name the key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import Config, ConfigError, load_config, validate

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("name", ["local.yaml", "portable.yaml", "flink.yaml", "dataflow.yaml"])
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
        ({"split": {"max_tokens": 10, "overlap": 10}}, "overlap (10) must be below"),
        ({"embed": {"dtype": "fp8"}}, "embed.dtype"),
        ({"input": {"jsonl": {"id_fild": "x"}}}, "input.jsonl.id_fild: unknown key"),
        ({"output": {"chunk_shards": 0}}, "output.chunk_shards"),
        ({"runner": {"name": "SparkRunnerX"}}, "runner.name"),
        ({"clean": {"patterns": ["(unclosed"]}}, "does not compile"),
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
