"""The job's configuration: YAML -> one typed, frozen, validated config, before the job starts.

Unknown keys and wrong types are rejected with the key path (``split.max_tokens: ...``), so a
typo fails in a second on the laptop, not an hour into a Dataflow job. One model per stage,
each field with its help text; ``None`` means "off" or "derive it", never ``-1``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(ValueError):
    """The configuration is invalid; the message names every offending key path."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RunnerConfig(_Section):
    name: Literal["FnApiRunner", "PortableRunner", "FlinkRunner", "DataflowRunner", "DirectRunner"] = Field(
        "FnApiRunner",
        description="Beam runner. FnApiRunner is in-process (DirectRunner first tries to "
        "download the Prism binary).",
    )
    options: tuple[str, ...] = Field(
        (), description="Beam pipeline options, e.g. --direct_num_workers=2 or --project=x."
    )


class JsonlConfig(_Section):
    id_field: str = Field("id", description="Record field holding the document id.")
    text_field: str = Field("text", description="Record field holding the text.")
    metadata_field: str | None = Field("metadata", description="Record field kept as metadata.")


class ParquetConfig(_Section):
    id_column: str = "id"
    text_column: str = "text"
    metadata_columns: tuple[str, ...] = ()


class InputConfig(_Section):
    pattern: str = Field(
        "examples/corpus/**", description="File pattern (local path or gs://), Beam glob syntax."
    )
    jsonl: JsonlConfig = JsonlConfig()
    parquet: ParquetConfig = ParquetConfig()
    max_document_bytes: int | None = Field(
        10_000_000, ge=1, description="Larger documents are rejected with that reason."
    )
    follow_symlinks: bool = Field(
        False, description="Follow symlinks that lead out of the input root (links inside it "
        "are always read); off: such a link is a rejected row.")


class OutputConfig(_Section):
    path: str = Field("out", min_length=1, pattern=r"\S",
                      description="Directory (local or gs://) that receives <run_id>/.")
    chunk_shards: int = Field(4, ge=1, le=10_000, description="Number of chunk Parquet files.")
    previous: str | None = Field(
        None, min_length=1,
        description="Reuse vectors from this index: an output root (its LATEST run) or a run "
        "directory. None: this output's own LATEST run when reuse_latest is on.",
    )
    reuse_latest: bool = Field(
        True, description="With previous unset, reuse the vectors of this output's LATEST run."
    )
    max_shrink: float = Field(
        0.5, ge=0, le=1, description="Publish guard: a run whose kept documents or chunks fell "
        "by more than this fraction against the LATEST run is not published (--allow-shrink "
        "publishes it anyway).")
    lease_timeout_s: float = Field(
        600.0, gt=0, description="One writer per output: a lease not renewed for this long is "
        "taken over (the holder renews it every minute; a dead holder on the same host at once).")


class CleanConfig(_Section):
    """Per-document cleaning before anything else; the cleaned text is what offsets refer to."""

    nfc: bool = Field(True, description="Unicode NFC, so equal text has equal code points.")
    drop_control: bool = Field(True, description="Control characters and ANSI escapes (tab and "
                               "newline stay).")
    drop_page_numbers: bool = Field(True, description='"Page 3 of 10", "- 3 -" and running '
                                    "page-number lines.")
    patterns: tuple[str, ...] = Field((), description="Regexes: a line fully matching one is "
                                      "dropped (e.g. '^CONFIDENTIAL$').")

    @model_validator(mode="after")
    def _patterns_compile(self) -> "CleanConfig":
        for pattern in self.patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} does not compile: {exc}") from None
        return self


class BoilerplateConfig(_Section):
    """Lines and short blocks repeated across the corpus (headers, footers, licences)."""

    min_docs: int = Field(5, ge=2, description="A line is boilerplate in at least this many "
                          "documents...")
    min_fraction: float = Field(0.001, ge=0, le=1, description="...and this fraction of them.")
    min_line_chars: int = Field(20, ge=1, description="Shorter lines never count ('Returns', "
                                "'Example' survive).")
    max_block_lines: int = Field(6, ge=1, description="Paragraphs up to this many lines also "
                                 "count whole (signatures of short lines).")


class NearDedupeConfig(_Section):
    """MinHash LSH near-duplicate removal (bands and rows derived from the threshold)."""

    shingle_size: int = Field(5, ge=1, le=32, description="Words per shingle.")
    num_perm: int = Field(256, ge=16, le=4096, description="Signature length.")
    threshold: float = Field(0.8, gt=0, lt=1, description="Estimated Jaccard at or above which "
                             "two documents are duplicates.")
    seed: int = Field(1, ge=0, description="Permutation seed.")
    survivor: Literal["smallest_doc_id", "longest"] = Field(
        "smallest_doc_id", description="Which document of a duplicate cluster is kept.")


class DedupeConfig(_Section):
    exact: bool = Field(True, description="Drop documents whose normalized text repeats.")
    near: NearDedupeConfig | None = Field(NearDedupeConfig(), description="null: off.")


class SemanticConfig(_Section):
    rule: Literal["percentile", "gradient"] = Field(
        "percentile", description="Cut where neighbour distance (percentile) or its rise "
        "(gradient) is above the percentile of the document's values.")
    percentile: float = Field(90.0, ge=0, le=100, description="Higher cuts less.")
    buffer: int = Field(1, ge=0, le=8, description="Neighbouring sentences embedded with each.")


class SplitConfig(_Section):
    mode: Literal["recursive", "semantic"] = Field(
        "recursive", description="semantic: cut at topic shifts found with the embedder, "
        "never over the budget (needs embed).")
    semantic: SemanticConfig = SemanticConfig()
    code: bool = Field(True, description="Split source files (.py, .js, .ts, .go, .java, .rs) "
                       "by syntax tree; the heading path is the enclosing definitions.")
    max_tokens: int | None = Field(
        None, ge=1,
        description="Chunk budget. None: the embedder's max input minus its special tokens "
        "minus heading_reserve.",
    )
    overlap: int = Field(0, ge=0, description="Tokens re-read from the previous chunk.")
    max_chars: int | None = Field(
        None, ge=1, description="No chunk's text is longer, whatever the tokenizer counts (a "
        "WordPiece [UNK] covers any word over 100 characters). None: 32 x the token budget + "
        "1024 (chunkline.splitting.core.default_max_chars).")
    markdown: bool = Field(True, description="Read Markdown headings (paths, section cuts).")
    tokenizer: str | None = Field(
        None, description="Tokenizer spec. None: the embedder's own tokenizer."
    )
    heading_reserve: int = Field(
        32, ge=0, description="Tokens reserved for the heading path prepended for embedding."
    )

    @model_validator(mode="after")
    def _overlap_below_budget(self) -> "SplitConfig":
        if self.max_tokens is not None and self.overlap >= self.max_tokens:
            raise ValueError(f"overlap ({self.overlap}) must be below max_tokens ({self.max_tokens})")
        return self


class EmbedConfig(_Section):
    model: str = Field("all-MiniLM-L6-v2", description="Packaged model name or model directory.")
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="bfloat16 runs ~3x faster on CPUs with AMX."
    )
    normalize: bool = True
    batch_size: int = Field(64, ge=1, le=4096)
    max_seq_length: int | None = Field(
        None, ge=8, description="Model input limit in tokens. None: the model's own."
    )
    mode: Literal["standard", "late"] = Field(
        "standard", description="late: embed the whole document (in overlapping windows) and "
        "mean-pool each chunk's token vectors (late chunking); the heading path and context "
        "header are then not part of the vector.")
    late_window: int | None = Field(None, ge=8, description="Late mode: content tokens per "
                                    "window. None: the model's max input.")
    late_stride: int | None = Field(None, ge=1, description="Late mode: tokens between window "
                                    "starts. None: half a window.")


class ContextConfig(_Section):
    """LLM-written contextual headers (contextual retrieval); the section's presence turns the
    stage on. The API key is read from the environment variable named here, never from config."""

    provider: Literal["anthropic", "openai"] = Field(
        "anthropic", description="openai: any OpenAI-compatible server (vLLM, llama.cpp, Ollama).")
    model: str = "claude-haiku-4-5"
    base_url: str | None = Field(None, description="Server URL. None: the SDK's default.")
    api_key_env: str | None = Field(
        None, description="Environment variable holding the key. None: ANTHROPIC_API_KEY or "
        "OPENAI_API_KEY.")
    max_concurrency: int = Field(8, ge=1, le=256, description="Requests in flight per worker.")
    max_header_tokens: int = Field(
        100, ge=8, le=1000, description="Header length cap; the split budget reserves it.")
    prompt_version: str = Field("v1", description="Versioned prompt template (cache key part).")
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(6, ge=0, le=20)
    backoff_base_s: float = Field(1.0, gt=0)
    backoff_max_s: float = Field(60.0, gt=0)
    max_retry_after_s: float = Field(120.0, gt=0)
    max_failures: int | None = Field(
        100, ge=0, description="Failure budget: more failed chunks and the run is not published.")
    prime_cache: bool = Field(True, description="First request of a document alone, so the "
                              "rest read the provider's prompt cache.")
    price_input: float | None = Field(None, ge=0, description="USD per million input tokens.")
    price_cached_input: float | None = Field(None, ge=0)
    price_cache_write: float | None = Field(None, ge=0)
    price_output: float | None = Field(None, ge=0)


class Config(_Section):
    runner: RunnerConfig = RunnerConfig()
    input: InputConfig = InputConfig()
    output: OutputConfig = OutputConfig()
    clean: CleanConfig | None = Field(CleanConfig(), description="null: off.")
    boilerplate: BoilerplateConfig | None = Field(BoilerplateConfig(), description="null: off.")
    dedupe: DedupeConfig = DedupeConfig()
    split: SplitConfig = SplitConfig()
    embed: EmbedConfig | None = Field(
        EmbedConfig(), description="null writes the same shards without vectors."
    )
    context: ContextConfig | None = Field(
        None, description="LLM contextual headers; null (the default): off.")

    @model_validator(mode="after")
    def _modes_need_the_model(self) -> "Config":
        if self.split.mode == "semantic" and self.embed is None:
            raise ValueError("split.mode: semantic needs the embedding model (embed is null)")
        return self


def _format(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
        shown = "" if item["type"] == "extra_forbidden" else f" (got {item.get('input')!r})"
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


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
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
