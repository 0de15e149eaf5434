"""ContextOptions, the one home of every setting of the context stage and its checks, and the API
key's lookup in the environment.

    options = ContextOptions(provider="openai", model="qwen3-8b", base_url="http://127.0.0.1:8000/v1")
    api_key = resolve_api_key(options)   # on the worker, from the variable options name
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from chunkline.context.prompts import PROMPTS

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

    provider: Literal["anthropic", "openai"] = "anthropic"
    model: str = "claude-haiku-4-5"
    base_url: str | None = None
    api_key_env: str | None = None
    max_concurrency: int = 8
    max_header_tokens: int = 100
    prompt_version: str = "v1"
    timeout_s: float = 60.0
    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    max_retry_after_s: float = 120.0
    max_failures: int | None = 100
    prime_cache: bool = True
    price_input: float | None = None
    price_cached_input: float | None = None
    price_cache_write: float | None = None
    price_output: float | None = None

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"ContextOptions.provider must be one of {PROVIDERS}, got {self.provider!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("ContextOptions.model must name the model")
        if self.api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.api_key_env):
            # A guard against pasting the key itself here, where it would be pickled and logged.
            raise ValueError("ContextOptions.api_key_env must be the NAME of an environment variable")
        if self.prompt_version not in PROMPTS:
            raise ValueError(
                f"ContextOptions.prompt_version {self.prompt_version!r} is unknown; known: {sorted(PROMPTS)}"
            )
        for name in ("max_concurrency", "max_header_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ContextOptions.{name} must be a positive integer, got {value!r}")
        if self.max_retries < 0:
            raise ValueError(f"ContextOptions.max_retries must be >= 0, got {self.max_retries}")
        if self.max_failures is not None and self.max_failures < 0:
            raise ValueError(f"ContextOptions.max_failures must be None or >= 0, got {self.max_failures}")
        for name in ("timeout_s", "backoff_base_s", "backoff_max_s", "max_retry_after_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value >= 0 or not math.isfinite(value):
                raise ValueError(f"ContextOptions.{name} must be a finite number >= 0, got {value!r}")
        if self.timeout_s <= 0:
            raise ValueError("ContextOptions.timeout_s must be > 0")
        for name in ("price_input", "price_cached_input", "price_cache_write", "price_output"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"ContextOptions.{name} must be None or >= 0, got {value!r}")


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
