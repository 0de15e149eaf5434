"""The job graph is built under every documented configuration: for every option with a closed
set of values (a ``Literal``, a bool, a section that may be ``null``), each value in turn, the
rest left at its default. Building is where Beam checks each stage's type hints against the
PCollections it receives (``PTransform.type_check_inputs``), so a hint that is wrong under a
value no run exercised fails here, not on a user's first run with that value.

The cases are read off the config model itself (:func:`closed_set_cases`): an option added
tomorrow is covered without editing this file."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any, Literal

import apache_beam as beam
import pytest
import yaml
from apache_beam.pipeline import PipelineVisitor
from pydantic import BaseModel

from chunkline.pipeline.beam_options import job_options
from chunkline.pipeline.build import build
from chunkline.pipeline.config import Config, load_config
from chunkline.pipeline.plan import plan

pytestmark = pytest.mark.slow  # runs Beam pipelines or builds job graphs (make test-fast skips it)

ROOT = Path(__file__).resolve().parents[2]
API_KEY_ENV = "CHUNKLINE_GRAPH_TEST_KEY"

# What a section that is off by default needs to be switched on at all; its own closed options
# are then varied one at a time on top of this.
SWITCHED_ON: dict[str, dict[str, Any]] = {
    "context": {"provider": "openai", "model": "test-model", "base_url": "http://127.0.0.1:9/v1",
                "api_key_env": API_KEY_ENV},
    "access": {"default": ["public"]},
    "sink": {"to": "lancedb:///tmp/never-written"},
}
# A value that is valid only beside another: the companion documented with the option.
COMPANIONS: dict[tuple[str, Any], dict[str, Any]] = {
    ("embed.dtype", "int8"): {"embed.backend": "onnx"},
    ("embed.mode", "late"): {"embed.backend": "torch"},
}
# Each runner the README names, with the config file that gives it its required options.
RUNNER_CONFIGS = {"PortableRunner": "portable.yaml", "PrismRunner": "prism.yaml", "FlinkRunner": "flink.yaml",
                  "DataflowRunner": "dataflow.yaml"}


def _closed_values(annotation: Any) -> tuple[list[Any], type[BaseModel] | None]:
    """The finite values an annotation admits (None included when optional), and the config
    section it holds, if it is one."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    values: list[Any] = []
    section = None
    for option in typing.get_args(annotation) if union else (annotation,):
        if option is type(None):
            values.append(None)
        elif typing.get_origin(option) is Literal:
            values.extend(typing.get_args(option))
        elif option is bool:
            values.extend([False, True])
        elif isinstance(option, type) and issubclass(option, BaseModel):
            section = option
        else:
            return [], None  # an open set (a number, a string): not enumerated
    return values, section


def closed_set_cases(model: type[BaseModel] = Config, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted path, value)`` for every value but the default of every closed option under
    ``model`` (the defaults are one case of their own); a section that may be null contributes
    ``(path, None)`` or ``(path, "on")``, whichever it is not by default."""
    cases: list[tuple[str, Any]] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        values, section = _closed_values(field.annotation)
        if section is not None:
            if None in values:
                cases.append((path, "on" if field.default is None else None))
            cases += closed_set_cases(section, f"{path}.")
            continue
        cases += [(path, value) for value in dict.fromkeys(values) if value != field.default]
    return cases


# Access control's principal sources, each on its own: which one is set decides the graph's
# access stage as much as a closed option would.
ACCESS_SOURCES = [("access.metadata_key", "principals"), ("access.mapping", "MAPPING_FILE")]


def _overrides(path: str, value: Any) -> list[str]:
    """``--set`` overrides that give ``path`` its ``value``, enclosing off sections switched on."""
    sets: dict[str, Any] = {}
    parts = path.split(".")
    for depth in range(1, len(parts) + 1):
        enclosing = ".".join(parts[:depth])
        if enclosing in SWITCHED_ON and not (enclosing == path and value is None):
            sets.update({f"{enclosing}.{k}": v for k, v in SWITCHED_ON[enclosing].items()})
    if value != "on":
        sets[path] = value
    sets.update(COMPANIONS.get((path, value), {}))
    return [f"{key}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
            for key, v in sets.items()]


def _labels(pipeline: beam.Pipeline) -> set[str]:
    """The full labels of every transform applied to ``pipeline``."""
    labels: set[str] = set()

    class Visitor(PipelineVisitor):
        def enter_composite_transform(self, node) -> None:
            labels.add(node.full_label)

        def visit_transform(self, node) -> None:
            labels.add(node.full_label)

    pipeline.visit(Visitor())
    return labels


CASES = [("defaults", None), *closed_set_cases(), *ACCESS_SOURCES]


def test_the_cases_cover_the_options_users_choose_between() -> None:
    paths = {path for path, _ in CASES}
    for expected in ("secrets.mode", "input.ocr.mode", "split.mode", "split.markdown", "split.code",
                     "dedupe.exact", "dedupe.near", "context", "context.provider", "embed",
                     "embed.mode", "embed.backend", "embed.dtype", "access", "sparse",
                     "runner.name", "output.vector_dtype", "input.trust_file_metadata",
                     "output.carry"):
        assert expected in paths, expected
    assert {("secrets.mode", "allow"), ("secrets.mode", "redact"), ("access", "on"), ("embed", None),
            ("context", "on"), ("input.ocr.mode", "never"), ("input.ocr.mode", "always"),
            ("runner.name", "DataflowRunner"), ("runner.name", "FlinkRunner")} <= set(CASES)


@pytest.mark.parametrize(("path", "value"), CASES, ids=[f"{p}={v}" for p, v in CASES])
def test_the_graph_builds(path: str, value: Any, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "not-a-real-key")
    base = ROOT / "configs" / RUNNER_CONFIGS.get(value, "local.yaml") if path == "runner.name" \
        else ROOT / "configs" / "local.yaml"
    if value == "MAPPING_FILE":
        mapping = tmp_path / "access.yaml"
        mapping.write_text("'manuals/**': [eng]\n'**': [public]\n")
        value = str(mapping)
    overrides = [f"output.path={tmp_path / 'out'}", *(_overrides(path, value) if path != "defaults" else [])]
    config = load_config(base, overrides)
    job = plan(config, "graph-test")
    options = list(config.runner.options)
    if config.runner.name in ("DataflowRunner", "FlinkRunner"):
        options.append("--dry_run=True")  # Beam would otherwise check the placeholder buckets
    pipeline = beam.Pipeline(runner=config.runner.name, options=job_options(options))
    build(pipeline, config, job)  # Beam type-checks every stage's input here
    if path == "runner.name":  # the portable form is what a job server or Dataflow receives
        pipeline.to_runner_api()
    labels = _labels(pipeline)
    assert {"Read", "Dedupe", "Split", "WriteChunks", "WriteDocuments", "WriteRejected"} <= labels
    assert ("Embed" in labels) == (config.embed is not None)
    assert ("Credentials" in labels) == (config.secrets.mode != "allow")
