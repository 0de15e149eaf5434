"""The job's configuration: YAML -> one typed, frozen, validated config, before the job starts.

Unknown keys and wrong types are rejected with the key path (``split.max_tokens: ...``), so a
typo fails in a second on the laptop, not an hour into a Dataflow job. One model per stage,
each field with its help text; ``None`` means "off" or "derive it", never ``-1``.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, Sequence, TypeVar

import yaml
from pydantic import (
    BaseModel, ConfigDict, Field, StringConstraints, ValidationError, create_model, model_serializer,
    model_validator,
)

from chunkline.access import AccessOptions
from chunkline.boilerplate import BoilerplateOptions
from chunkline.context.options import ContextOptions
from chunkline.clean import CleanOptions
from chunkline.credentials import CredentialOptions
from chunkline.embedder import EmbedOptions
from chunkline.late import LateOptions
from chunkline.minhash import MinHashOptions
from chunkline.readers import ReadOptions
from chunkline.splitting.options import SplitOptions
from chunkline.sparse import SparseOptions


class ConfigError(ValueError):
    """The configuration is invalid; the message names every offending key path."""


_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Section(BaseModel):
    model_config = _STRICT


Options = TypeVar("Options")


class _OptionsSection(_Section, Generic[Options]):
    """A config section generated from a library options dataclass (:func:`options_section`)."""

    options_class: typing.ClassVar[type]

    def options(self) -> Options:
        """The library's options object this section describes."""
        cls = self.options_class
        values = {spec.name: getattr(self, spec.name) for spec in dataclasses.fields(cls)}
        return cls(**{name: value.options() if isinstance(value, _OptionsSection) else value
                      for name, value in values.items()})

    @model_validator(mode="before")
    @classmethod
    def _mode_alone(cls, data: Any) -> Any:
        """A section whose options have a ``mode`` may be given as its mode alone:
        ``secrets: redact`` is ``secrets: {mode: redact}``, ``input.ocr: never`` likewise."""
        fields = {spec.name for spec in dataclasses.fields(cls.options_class)}
        return {"mode": data} if isinstance(data, str) and "mode" in fields else data

    @model_validator(mode="after")
    def _rules_across_fields(self):
        self.options()  # the dataclass's own __post_init__: one home for each rule
        return self


def options_section(cls: type, **extra_fields: Any) -> type[_OptionsSection[Any]]:
    """The config section for a library options dataclass: the same fields, types, bounds
    (annotated-types markers, which pydantic reads), defaults and help text
    (``field(metadata={"help": ...})``), plus ``extra_fields`` the pipeline alone uses."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):
        hint, default = hints[spec.name], spec.default
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # options within options
            hint = options_section(hint)
            default = hint(**dataclasses.asdict(default))  # type: ignore[arg-type]  # its default: an instance
        fields[spec.name] = (hint, Field(default, description=spec.metadata.get("help")))
    fields.update(extra_fields)
    section = create_model(cls.__name__.removesuffix("Options") + "Config", __base__=_OptionsSection,
                           __doc__=cls.__doc__, **fields)
    section.options_class = cls
    return section


class RunnerConfig(_Section):
    name: Literal["FnApiRunner", "PrismRunner", "PortableRunner", "FlinkRunner", "DataflowRunner",
                  "DirectRunner"] = Field(
        "FnApiRunner",
        description="Beam runner. FnApiRunner is in-process (DirectRunner runs as it: chunkline "
        "never lets Beam download Prism). PrismRunner is Beam's portable runner in Go: the binary "
        "`make setup` builds into the venv (with Go), else `prism` on PATH, else --prism_location.",
    )
    options: tuple[str, ...] = Field(
        (), description="Beam pipeline options, e.g. --direct_num_workers=2 or --project=x."
    )


if TYPE_CHECKING:
    from chunkline.containers import ContainerOptions
    from chunkline.index.iceberg import CatalogSpec
    from chunkline.ocr import OcrOptions
    from chunkline.readers.options import JsonlOptions, ParquetOptions
    from chunkline.splitting.semantic import SemanticOptions

    # mypy never sees a class create_model() makes (a value, not a class statement). For the
    # checker each generated section is declared here as what options_section() makes of it:
    # a section with its options dataclass's fields, typed as there (a nested dataclass is a
    # section of its own), and its extra fields. Where the declaration names a field again, its
    # default is the runtime definition's (``_DEFAULTED``: the checker learns only that it has one).
    _DEFAULTED: Any = ...

    class _JsonlConfig(_OptionsSection[JsonlOptions], JsonlOptions): ...
    class _ParquetConfig(_OptionsSection[ParquetOptions], ParquetOptions): ...
    class _ContainerConfig(_OptionsSection[ContainerOptions], ContainerOptions): ...
    class _OcrConfig(_OptionsSection[OcrOptions], OcrOptions): ...

    class InputConfig(_OptionsSection[ReadOptions], ReadOptions):
        jsonl: _JsonlConfig = _DEFAULTED
        parquet: _ParquetConfig = _DEFAULTED
        containers: _ContainerConfig = _DEFAULTED
        ocr: _OcrConfig = _DEFAULTED
        pattern: str = _DEFAULTED
        follow_symlinks: bool = _DEFAULTED
        trust_file_metadata: bool = _DEFAULTED

    class CleanConfig(_OptionsSection[CleanOptions], CleanOptions): ...
    class SecretsConfig(_OptionsSection[CredentialOptions], CredentialOptions): ...
    class BoilerplateConfig(_OptionsSection[BoilerplateOptions], BoilerplateOptions): ...
    class NearDedupeConfig(_OptionsSection[MinHashOptions], MinHashOptions): ...
    class _SemanticConfig(_OptionsSection[SemanticOptions], SemanticOptions): ...

    class SplitConfig(_OptionsSection[SplitOptions], SplitOptions):
        semantic: _SemanticConfig = _DEFAULTED

    class LateConfig(_OptionsSection[LateOptions], LateOptions): ...

    class EmbedConfig(_OptionsSection[EmbedOptions], EmbedOptions):
        mode: Literal["standard", "late"] = _DEFAULTED
        late: LateConfig = _DEFAULTED

    class ContextConfig(_OptionsSection[ContextOptions], ContextOptions): ...
    class SparseConfig(_OptionsSection[SparseOptions], SparseOptions): ...
    class AccessConfig(_OptionsSection[AccessOptions], AccessOptions): ...
else:
    InputConfig = options_section(
        ReadOptions,
        pattern=(str, Field("examples/corpus/**", description="File pattern (local path or gs://), "
                            "Beam glob syntax.")),
        follow_symlinks=(bool, Field(False, description="Follow symlinks that lead out of the input "
                                     "root (links inside it are always read); off: such a link is a "
                                     "rejected row.")),
        trust_file_metadata=(bool, Field(False, description="A file listed with the size and "
                                         "modification time (gs://: update time) it had in the "
                                         "previous run is not read: what it made then is recalled. "
                                         "An edit that keeps both is then missed.")),
    )


class OutputConfig(_Section):
    path: str = Field("out", min_length=1, pattern=r"\S",
                      description="Directory (local or gs://) that receives <run_id>/.")
    chunk_shards: int = Field(4, ge=1, le=10_000, description=(
        "Number of chunk Parquet files; also of BM25 terms files, each a range of the term "
        "space whose document frequencies one worker combines."))
    document_shards: int = Field(
        1, ge=1, le=10_000, description="Number of documents Parquet files. Each holds about "
        "the corpus's text over this number, merged from sorted parts as it is written (a "
        "worker never holds a whole shard): raise it to write a corpus of many GB on more "
        "workers at once.")
    vector_dtype: Literal["float32", "float16", "int8"] = Field(
        "float32", description="How vectors are stored: float32, float16, or int8 with a scale "
        "per vector (embedding_scale). Part of the embedding signature: changing it re-embeds.")
    chunk_metadata: tuple[Annotated[str, StringConstraints(min_length=1)], ...] | None = Field(
        None, description="Metadata keys copied onto chunk rows (the documents table keeps "
        "them all). None: every key but the file's file_size and file_modified, which reach a "
        "chunk only when named here (a touched file then rewrites its rows in every store); a "
        "record of a JSONL or Parquet dump has neither (they are the dump's).")
    previous: str | None = Field(
        None, min_length=1,
        description="Reuse vectors from this index: an output root (its LATEST run) or a run "
        "directory. None: this output's own LATEST run when reuse_latest is on.",
    )
    reuse_latest: bool = Field(
        True, description="With previous unset, reuse the vectors of this output's LATEST run."
    )
    carry: bool = Field(
        True, description="Take an unchanged document's chunks rows (verified) from the run "
        "whose vectors are reused instead of splitting, embedding and analyzing it again. Off: "
        "every kept document is computed (vectors are still reused by content key).")
    max_shrink: float = Field(
        0.5, ge=0, le=1, description="Publish guard: a run whose kept documents or chunks fell "
        "by more than this fraction against the LATEST run is not published (--allow-shrink "
        "publishes it anyway).")
    lease_timeout_s: float = Field(
        600.0, gt=0, description="One writer per output: a lease not renewed for this long is "
        "taken over (the holder renews it every minute; a dead holder on the same host at once).")


if not TYPE_CHECKING:  # the checker's declarations: above
    CleanConfig = options_section(CleanOptions)
    SecretsConfig = options_section(CredentialOptions)
    BoilerplateConfig = options_section(BoilerplateOptions)
    NearDedupeConfig = options_section(MinHashOptions)


class DedupeConfig(_Section):
    exact: bool = Field(True, description="Drop documents whose normalized text repeats.")
    near: NearDedupeConfig | None = Field(NearDedupeConfig(), description="null: off.")


# Generated from the library's dataclass, which the Beam composite (transforms/chunk.py) and
# the MLTransform chunker take too: one home for the defaults, bounds and help. The rule across
# fields (overlap below a given budget) is SplitOptions.__post_init__'s; a derived budget is
# checked when the plan derives it.
if not TYPE_CHECKING:  # the checker's declarations: above
    SplitConfig = options_section(SplitOptions)


if not TYPE_CHECKING:  # the checker's declarations: above
    LateConfig = options_section(LateOptions)
    EmbedConfig = options_section(
        EmbedOptions,
        mode=(Literal["standard", "late"], Field(
            "standard", description="late: embed the whole document (in overlapping windows) and "
            "mean-pool each chunk's token vectors (late chunking); the heading path and context "
            "header are then not part of the vector.")),
        late=(LateConfig, Field(LateConfig(), description="Late mode: how the document is read.")),
    )


class SinkConfig(_Section):
    to: str = Field(
        ..., min_length=1, description="The store to sync each published run into (the URIs of "
        "`chunkline sync --to`): a directory or lancedb:///dir, postgresql://..., qdrant:///dir, "
        "http(s)://host:6333; ?table=NAME.")
    batch_size: int = Field(1000, ge=1, description="Rows per write (one transaction or commit).")


if not TYPE_CHECKING:  # the checker's declarations: above
    ContextConfig = options_section(ContextOptions)
    SparseConfig = options_section(SparseOptions)
    AccessConfig = options_section(AccessOptions)


class ReportConfig(_Section):
    audience: tuple[Annotated[str, StringConstraints(min_length=1)], ...] | None = Field(
        None, description="With access control on: the principals the run report is written "
        "for. Sample texts and duplicate clusters show only documents they may read; rejection "
        "examples and boilerplate lines are left out; counts stay those of every document. "
        "null: everything is shown (whoever reads OUTPUT reads every document anyway).")

    @model_validator(mode="after")
    def _principals(self) -> "ReportConfig":
        if self.audience is not None:
            from chunkline.access import principal_set

            principal_set(self.audience, "audience")  # AccessError: a ValueError, one line
        return self


class CatalogConfig(_Section):
    """Secrets (a token, a password in the uri) are masked in the run's manifest and report and
    never written under the output; better, keep them out of the config: pyiceberg merges its
    own configuration for `name` (`PYICEBERG_CATALOG__<NAME>__<KEY>`, `~/.pyiceberg.yaml`),
    and libpq reads `PGPASSWORD` or `~/.pgpass`. `chunkline publish`, `gc` and `tables` open
    the catalog the last published run used (`OUTPUT/_iceberg/catalog.json`, its secrets left
    out: those come from pyiceberg's configuration)."""

    name: str = Field(
        "chunkline", pattern=r"^[A-Za-z0-9_-]+$", description="The catalog's name: what "
        "pyiceberg's own configuration (~/.pyiceberg.yaml, PYICEBERG_CATALOG__<NAME>__<KEY>) "
        "knows it by; the keys given here are merged over it.")
    type: Literal["sql", "rest", "glue", "hive", "dynamodb", "bigquery"] | None = Field(
        None, description="pyiceberg's catalog type. null: pyiceberg's configuration names it, or "
        "the uri tells (postgresql:// or sqlite:// sql, http(s):// rest, thrift:// hive).")
    uri: str | None = Field(
        None, min_length=1, description="The catalog's address: postgresql://user@host/db (a SQL "
        "catalog; psycopg 3 drives it), https://host/api/catalog (REST), ...")
    warehouse: str | None = Field(
        None, min_length=1, description="The catalog's warehouse (a REST catalog's name for it, "
        "or a location); the tables themselves lie under the output either way.")
    namespace: str = Field(
        "chunkline", pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$",
        description="The namespace the tables are registered in (dotted for a nested one).")
    table_prefix: str = Field(
        "", pattern=r"^[A-Za-z0-9_]*$", description="Put before each table's name "
        "(<prefix>chunks, ...): several outputs in one namespace each need their own.")
    properties: dict[Annotated[str, StringConstraints(min_length=1)], str] = Field(
        {}, description="Any other catalog property pyiceberg takes, e.g. "
        "credential, token, s3.region, gcs.project-id, rest.sigv4-enabled (values as strings).")

    @model_validator(mode="after")
    def _one_home_per_key(self) -> "CatalogConfig":
        doubled = sorted({"type", "uri", "warehouse"} & set(self.properties))
        if doubled:
            raise ValueError(f"{', '.join(doubled)}: a key of catalog itself (catalog.{doubled[0]}), "
                             "not one of catalog.properties")
        if "py-catalog-impl" in self.properties and self.type is not None:
            raise ValueError("catalog: py-catalog-impl and type name the catalog twice; give one")
        return self

    def _given(self) -> dict[str, str]:
        return {**{key: value for key, value in (("type", self.type), ("uri", self.uri),
                                                 ("warehouse", self.warehouse)) if value is not None},
                **self.properties}

    def spec(self) -> "CatalogSpec":
        """The library's :class:`chunkline.index.iceberg.CatalogSpec` this section names, its
        secrets marked withheld (:func:`chunkline.pipeline.redact.secret_property`)."""
        from chunkline.index.iceberg import CatalogSpec
        from chunkline.pipeline.redact import secret_property

        given = self._given()
        return CatalogSpec(name=self.name, properties=given, namespace=self.namespace,
                           table_prefix=self.table_prefix,
                           withheld=frozenset(key for key, value in given.items() if secret_property(key, value)))

    @model_serializer(mode="wrap")
    def _masked(self, handler: Any) -> dict[str, Any]:
        """What the run's manifest and report record: every secret masked (``***``)."""
        from chunkline.pipeline.redact import MASK, redacted, secret_property

        data = handler(self)
        if isinstance(data, dict):
            if data.get("uri"):
                data["uri"] = redacted(data["uri"])
            data["properties"] = {key: MASK if secret_property(key, value) else value
                                  for key, value in (data.get("properties") or {}).items()}
        return data


class Config(_Section):
    runner: RunnerConfig = RunnerConfig()
    input: InputConfig = InputConfig()
    output: OutputConfig = OutputConfig()
    clean: CleanConfig | None = Field(CleanConfig(), description="null: off.")
    secrets: SecretsConfig = Field(
        SecretsConfig(), description="Credentials in documents (detect-secrets' detectors): "
        "reject the document (the default), redact each credential, or allow; `secrets: "
        "redact` is short for `secrets: {mode: redact}`.")
    boilerplate: BoilerplateConfig | None = Field(BoilerplateConfig(), description="null: off.")
    dedupe: DedupeConfig = DedupeConfig()
    split: SplitConfig = SplitConfig()
    embed: EmbedConfig | None = Field(
        EmbedConfig(), description="null writes the same shards without vectors."
    )
    context: ContextConfig | None = Field(
        None, description="LLM contextual headers; null (the default): off.")
    sparse: SparseConfig | None = Field(
        SparseConfig(), description="BM25 sparse vectors of each chunk's search text; null: off.")
    sink: SinkConfig | None = Field(
        None, description="After a run publishes, sync it into this vector store and verify it "
        "(as `chunkline sync`); null (the default): no store.")
    access: AccessConfig | None = Field(
        None, description="Access control: each document's principals (who may read it) from a "
        "metadata key, a mapping file of path patterns, or a default, written on every row; "
        "`chunkline query --as` and the stores' readers see only what a caller may read. null "
        "(the default): off, every row readable by whoever reads the index.")
    report: ReportConfig = ReportConfig()
    catalog: CatalogConfig | None = Field(
        None, description="The Iceberg catalog the index's tables are registered in, for a "
        "cluster (pyiceberg's terms: type sql, rest, glue, ...). null (the default): embedded, no "
        "server: a SQLite catalog under a local output, version hints in a bucket (docs/engines.md).")

    @model_validator(mode="after")
    def _modes_need_the_model(self) -> "Config":
        if self.split.mode == "semantic" and self.embed is None:
            raise ValueError("split.mode: semantic needs the embedding model (embed is null)")
        if self.sink is not None and self.embed is None:
            raise ValueError("sink needs vectors to sync (embed is null)")
        if self.report.audience is not None and self.access is None:
            raise ValueError("report.audience needs access control (access is null)")
        return self


def _format(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
        shown = "" if item["type"] == "extra_forbidden" else f" (got {item.get('input')!r})"
        if item["type"] == "value_error":  # a library check: its message names the field
            message, shown = str(item["ctx"]["error"]), ""
            named = re.match(r"\w+Options\.(\w+):? ", message)
            if named:
                path, message = f"{path}.{named[1]}", message[named.end():]
        lines.append(f"{path}: {message}{shown}")
    return "invalid config:\n  " + "\n  ".join(lines)


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"invalid config:\n  {dotted}: {part} is not a section")
        node = child
    node[leaf] = value


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> Config:
    """Read YAML (or defaults when ``path`` is None), apply ``key.path=value`` overrides (values
    parsed as YAML, so ``split.overlap=16`` is an int), validate."""
    data: Any = {}
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"invalid config: {path} must hold a mapping at the top level")
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key.path=value, got {item!r}")
        _set_path(data, key.strip(), yaml.safe_load(raw))
    return validate(data)


def validate(data: dict[str, Any]) -> Config:
    # Lists in YAML are tuples here (frozen); strict mode would otherwise refuse them.
    try:
        return Config.model_validate(_lists_to_tuples(data))
    except ValidationError as exc:
        raise ConfigError(_format(exc)) from None


def _lists_to_tuples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists_to_tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_lists_to_tuples(v) for v in value)
    return value


def to_dict(config: Config) -> dict[str, Any]:
    """Plain data for the manifest (tuples as lists)."""
    return config.model_dump(mode="json")
