"""ContextOptions, the one home of every setting of the context stage and its checks, and the API
key's lookup in the environment.

    options = ContextOptions(provider="openai", model="qwen3-8b", base_url="http://127.0.0.1:8000/v1")
    api_key = resolve_api_key(options)   # on the worker, from the variable options name
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, MinLen

from chunkline.context.prompts import PROMPTS
from chunkline.options import check_fields, help_text

PROVIDERS = ("anthropic", "openai")
# Where a provider's key is looked for when ContextOptions.api_key_env is None.
DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


@dataclass(frozen=True)
class ContextOptions:
    """How contextual headers are written. The API key itself is never held here: this object
    is pickled into the job graph, so only the *name* of the environment variable travels.

    provider: ``anthropic`` (Messages API, official SDK, the document in a ``cache_control``
        block) or ``openai``: any OpenAI-compatible Chat Completions server (OpenAI, vLLM,
        llama.cpp, Ollama) through the official SDK and ``base_url``.
    model: the model name the server expects.
    base_url: the server; None: the SDK's default (api.anthropic.com, api.openai.com/v1).
        OpenAI-compatible servers usually want the ``/v1`` suffix.
    api_key_env: name of the environment variable holding the key, read on each worker in
        ``DoFn.setup``. None: the provider's usual variable (ANTHROPIC_API_KEY / OPENAI_API_KEY)
        if set, else no key (a local server). A named variable that is unset is an error.
    max_concurrency: requests in flight at once per worker (a thread pool).
    max_header_tokens: the LLM's ``max_tokens`` and the header's token reserve in the
        embedder's input, separator included: the header kept is cut so that
        ``tokenizer.count(header + "\\n\\n") <= max_header_tokens`` with the split tokenizer.
    prompt_version: key of ``PROMPTS``; part of the cache key, so a new prompt is a new version.
    timeout_s: per request; a timed-out request is retried.
    max_retries: retries after the first attempt, on 408/409/429/5xx, timeouts and connection
        errors; other 4xx fail at once.
    backoff_base_s, backoff_max_s: exponential backoff with full jitter: before retry ``n``
        (from 0) wait uniform(0, min(max, base * 2**n)), unless the server said how long.
    max_retry_after_s: a server's ``retry-after`` / ``retry-after-ms`` is waited out up to
        this long (and pauses this worker's other requests too).
    max_failures: failure budget: once this many chunks failed in one worker, it stops calling
        and flags the rest ``failed: failure budget exhausted``; the run should not be published
        when its ``chunks_failed`` exceeds it. None: no budget.
    prime_cache: send a document's first request alone and the rest once it answers: a prompt
        cache entry exists only after its first response begins (Anthropic's docs), so
        concurrent first requests would each pay the cache write.
    price_*: USD per million tokens, for the estimated cost in the run summary; None: unknown
        (cached input and cache writes then count at the input price; no input or output
        price: no estimate).
    """

    provider: Literal["anthropic", "openai"] = field(default="anthropic", metadata=help_text(
        "openai: any OpenAI-compatible server (vLLM, llama.cpp, Ollama)."))
    model: Annotated[str, MinLen(1)] = field(default="claude-haiku-4-5", metadata=help_text(
        "The model name the server expects."))
    base_url: Annotated[str, MinLen(1)] | None = field(default=None, metadata=help_text(
        "Server URL. null: the SDK's default."))
    api_key_env: Annotated[str, MinLen(1)] | None = field(default=None, metadata=help_text(
        "Environment variable holding the key. null: ANTHROPIC_API_KEY or OPENAI_API_KEY."))
    max_concurrency: Annotated[int, Ge(1), Le(256)] = field(default=8, metadata=help_text(
        "Requests in flight per worker."))
    max_header_tokens: Annotated[int, Ge(8), Le(1000)] = field(default=100, metadata=help_text(
        "Header length cap; the split budget reserves it."))
    prompt_version: str = field(default="v1", metadata=help_text(
        "Versioned prompt template (cache key part)."))
    timeout_s: Annotated[float, Gt(0)] = field(default=60.0, metadata=help_text(
        "Per request; a timed-out request is retried."))
    max_retries: Annotated[int, Ge(0), Le(20)] = field(default=6, metadata=help_text(
        "Retries after the first attempt on 408/409/429/5xx, timeouts and connection errors."))
    backoff_base_s: Annotated[float, Gt(0)] = field(default=1.0, metadata=help_text(
        "Exponential backoff with full jitter: before retry n wait uniform(0, min(max, base * 2**n))."))
    backoff_max_s: Annotated[float, Gt(0)] = field(default=60.0, metadata=help_text(
        "The cap of that backoff."))
    max_retry_after_s: Annotated[float, Gt(0)] = field(default=120.0, metadata=help_text(
        "A server's retry-after is waited out up to this long."))
    max_failures: Annotated[int, Ge(0)] | None = field(default=100, metadata=help_text(
        "Failure budget: more failed chunks and the run is not published. null: no budget."))
    prime_cache: bool = field(default=True, metadata=help_text(
        "First request of a document alone, so the rest read the provider's prompt cache."))
    price_input: Annotated[float, Ge(0)] | None = field(default=None, metadata=help_text(
        "USD per million input tokens (for the cost estimate)."))
    price_cached_input: Annotated[float, Ge(0)] | None = field(default=None, metadata=help_text(
        "USD per million cached input tokens. null: the input price."))
    price_cache_write: Annotated[float, Ge(0)] | None = field(default=None, metadata=help_text(
        "USD per million cache-write tokens. null: the input price."))
    price_output: Annotated[float, Ge(0)] | None = field(default=None, metadata=help_text(
        "USD per million output tokens."))

    def __post_init__(self) -> None:
        check_fields(self)
        if self.api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.api_key_env):
            # A guard against pasting the key itself here, where it would be pickled and logged.
            raise ValueError("ContextOptions.api_key_env must be the NAME of an environment variable")
        if self.prompt_version not in PROMPTS:
            raise ValueError(
                f"ContextOptions.prompt_version {self.prompt_version!r} is unknown; known: {sorted(PROMPTS)}"
            )


def context_reserve(options: ContextOptions | None) -> int:
    """Tokens the split budget must leave free for the header (separator included): 0 when the
    stage is off."""
    return 0 if options is None else options.max_header_tokens


def resolve_api_key(options: ContextOptions, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key from the environment (never from config or the graph). Raises ValueError,
    naming the variable and never a value, when a named variable is unset."""
    environ = os.environ if environ is None else environ
    if options.api_key_env is not None:
        key = environ.get(options.api_key_env)
        if not key:
            raise ValueError(
                f"context: environment variable {options.api_key_env} (context.api_key_env) is "
                f"not set on this machine"
            )
        return key
    key = environ.get(DEFAULT_KEY_ENV[options.provider])
    if not key and options.provider == "anthropic" and options.base_url is None:
        raise ValueError(
            "context: no API key for api.anthropic.com: set ANTHROPIC_API_KEY or name the "
            "variable in context.api_key_env"
        )
    return key or None
