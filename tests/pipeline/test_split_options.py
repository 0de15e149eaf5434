"""The config's ``split:`` section is the library's ``SplitOptions`` (one home for defaults,
bounds and help), which ``transforms/chunk.py``'s composite takes too."""

from __future__ import annotations

import dataclasses

import pytest

from chunkline.splitting.options import SplitOptions, split_budget
from chunkline.splitting.semantic import SemanticOptions
from chunkline.pipeline.config import ConfigError, load_config


def test_the_split_section_is_generated_from_the_library_options() -> None:
    section = load_config(None).split
    assert section.options() == SplitOptions()
    fields = type(section).model_fields
    assert list(fields) == [spec.name for spec in dataclasses.fields(SplitOptions)]
    for spec in dataclasses.fields(SplitOptions):
        assert fields[spec.name].description == spec.metadata["help"]
        if spec.name != "semantic":  # a nested section, checked by test_config
            assert fields[spec.name].default == spec.default
    configured = load_config(None, ["split.mode=semantic", "split.semantic.buffer=2",
                                    "split.max_tokens=100", "split.overlap=5"]).split.options()
    assert configured == SplitOptions(mode="semantic", semantic=SemanticOptions(buffer=2),
                                      max_tokens=100, overlap=5)


@pytest.mark.parametrize("name, value", [("max_tokens", 0), ("overlap", -1), ("max_chars", 0),
                                         ("merge_sections_below", 0), ("heading_reserve", -1)])
def test_library_and_config_refuse_the_same_values(name, value) -> None:
    with pytest.raises(ValueError, match=f"SplitOptions.{name}"):
        SplitOptions(**{name: value})
    with pytest.raises(ConfigError, match=f"split.{name}:"):
        load_config(None, [f"split.{name}={value}"])


def test_overlap_must_stay_below_a_given_budget_in_both() -> None:
    message = r"overlap \(10\) must be an int >= 0 and below max_tokens \(10\)"
    with pytest.raises(ValueError, match=message):
        SplitOptions(max_tokens=10, overlap=10)
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["split.max_tokens=10", "split.overlap=10"])


def test_the_budget_is_the_models_input_less_special_tokens_and_the_reserve() -> None:
    assert split_budget(SplitOptions(), "m", 256, 2) == ("hf:m", 222)
    assert split_budget(SplitOptions(heading_reserve=0, tokenizer="words"), "m", 256, 2) == ("words", 254)
    assert split_budget(SplitOptions(max_tokens=100), "m", 256, 2) == ("hf:m", 100)
    with pytest.raises(ValueError, match="derived chunk budget is 4 tokens"):
        split_budget(SplitOptions(heading_reserve=250), "m", 256, 2)
    with pytest.raises(ValueError, match="embedded text would be truncated"):
        split_budget(SplitOptions(max_tokens=250), "m", 256, 2)
    assert split_budget(SplitOptions(max_tokens=250), "m", 256, 2, embedded=False).max_tokens == 250
    with pytest.raises(ValueError, match="the budget derived from the model"):
        split_budget(SplitOptions(overlap=230), "m", 256, 2)
