"""The provider SDK clients that send one header request each, without retrying (HeaderWriter
retries), and the requests they send: Anthropic's Messages API with the document in a
``cache_control`` block, and any OpenAI-compatible Chat Completions server (OpenAI, vLLM,
llama.cpp, Ollama). A failure comes back as ``CallFailed``: retryable or not, and how long the
server asked to wait (``retry-after``, RFC 9110 section 10.2.3).

    client = make_client(options, resolve_api_key(options))   # once per worker
    completion = client.complete(document_text, chunk_text)   # Completion(text, Usage(...))
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timezone
from typing import Any, Protocol

from chunkline.context.accounting import Usage
from chunkline.context.options import ContextOptions
from chunkline.context.prompts import PROMPTS
from chunkline.extras import require

# 408 request timeout, 409 conflict (lock contention), 429 rate limited; every 5xx (Anthropic's
# 529 overloaded included): the SDKs' own retry rule.
RETRYABLE_STATUS = frozenset({408, 409, 429})


# -------------------------------------------------------------------------------------- requests


def prompt_parts(options: ContextOptions, document: str, chunk: str) -> tuple[str, str, str]:
    """(system, document block, chunk block) for one request under ``options.prompt_version``,
    texts delimited and escaped."""
    return PROMPTS[options.prompt_version].parts(document, chunk)


def anthropic_request(options: ContextOptions, document: str, chunk: str) -> dict[str, Any]:
    """Keyword arguments of ``Anthropic().messages.create``: the document block carries
    ``cache_control`` (everything up to and including it is cached), the chunk block after it."""
    system, doc_block, chunk_block = prompt_parts(options, document, chunk)
    return {
        "model": options.model,
        "max_tokens": options.max_header_tokens,
        "system": system,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": doc_block, "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": chunk_block},
                ],
            }
        ],
    }


def openai_request(options: ContextOptions, document: str, chunk: str) -> dict[str, Any]:
    """Keyword arguments of ``OpenAI().chat.completions.create``: system, then one user message
    whose text starts with the document block, so prefix caching applies. One plain-string user
    message because some chat templates (served by vLLM, llama.cpp) reject two user turns in a
    row or content-part lists. ``max_tokens`` rather than ``max_completion_tokens``: the latter
    is not understood by every OpenAI-compatible server."""
    system, doc_block, chunk_block = prompt_parts(options, document, chunk)
    return {
        "model": options.model,
        "max_tokens": options.max_header_tokens,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": doc_block + "\n\n" + chunk_block},
        ],
    }


# ----------------------------------------------------------------------------------- the clients


@dataclass(frozen=True)
class Completion:
    """One answered request: the model's text as it came, and the tokens it cost."""

    text: str
    usage: Usage


class CallFailed(Exception):
    """One request failed: whether to retry, how long the server asked to wait, and a short
    reason from a fixed vocabulary ("http 429", "timeout", ...): never the server's message or
    anything from the request, so it is safe to log and to store in ``context_status``."""

    def __init__(self, reason: str, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after


class HeaderClient(Protocol):
    def complete(self, document: str, chunk: str) -> Completion:
        """One request, no retries; raises CallFailed."""

    def close(self) -> None: ...


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds a response asks to wait: ``retry-after-ms`` (milliseconds, as Anthropic and
    OpenAI send), else ``retry-after`` in seconds or as an HTTP date. None when absent or bad."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            seconds = float(value) / 1000
            if math.isfinite(seconds) and seconds >= 0:
                return seconds
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def _as_call_failed(exc: Exception, sdk: Any) -> CallFailed:
    """An SDK exception as CallFailed. Both SDKs share these classes' shape (Stainless)."""
    if isinstance(exc, sdk.APITimeoutError):
        return CallFailed("timeout", retryable=True)
    if isinstance(exc, sdk.APIConnectionError):
        return CallFailed("connection error", retryable=True)
    if isinstance(exc, sdk.APIStatusError):
        code = exc.status_code
        retry_after = parse_retry_after(exc.response.headers)
        return CallFailed(f"http {code}", code in RETRYABLE_STATUS or code >= 500, retry_after)
    return CallFailed(f"error {type(exc).__name__}", retryable=False)


class AnthropicHeaderClient:
    """Anthropic Messages through the official SDK, its own retries off (HeaderWriter retries,
    so that waits are counted, shared across threads and capped by ContextOptions)."""

    def __init__(self, options: ContextOptions, api_key: str | None) -> None:
        anthropic = require("context", "anthropic")

        self._sdk = anthropic
        self._options = options
        # With a key, the SDK consults no other credential source. Without one (a local
        # Messages-compatible server), its own lookup (ANTHROPIC_AUTH_TOKEN, profiles) applies.
        self._client = anthropic.Anthropic(
            api_key=api_key, base_url=options.base_url, max_retries=0, timeout=options.timeout_s
        )

    def complete(self, document: str, chunk: str) -> Completion:
        try:
            message = self._client.messages.create(**anthropic_request(self._options, document, chunk))
        except self._sdk.AnthropicError as exc:
            raise _as_call_failed(exc, self._sdk) from None  # from None: no message, no key, in logs
        text = "".join(getattr(block, "text", "") for block in message.content if block.type == "text")
        usage = message.usage
        return Completion(
            text,
            Usage(
                input_tokens=usage.input_tokens or 0,
                cached_input_tokens=usage.cache_read_input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
                output_tokens=usage.output_tokens or 0,
            ),
        )

    def close(self) -> None:
        self._client.close()


class OpenAIHeaderClient:
    """Chat Completions through the official ``openai`` SDK and ``base_url`` (OpenAI, vLLM,
    llama.cpp, Ollama); SDK retries off, as for Anthropic."""

    def __init__(self, options: ContextOptions, api_key: str | None) -> None:
        openai = require("context", "openai")

        self._sdk = openai
        self._options = options
        # Local servers take any key; the SDK insists on one.
        kwargs: dict[str, Any] = {"api_key": api_key or "no-key", "max_retries": 0, "timeout": options.timeout_s}
        if options.base_url is not None:
            kwargs["base_url"] = options.base_url
        self._client = openai.OpenAI(**kwargs)

    def complete(self, document: str, chunk: str) -> Completion:
        try:
            response = self._client.chat.completions.create(**openai_request(self._options, document, chunk))
        except self._sdk.OpenAIError as exc:
            raise _as_call_failed(exc, self._sdk) from None
        text = (response.choices[0].message.content or "") if response.choices else ""
        usage = response.usage
        prompt = (usage.prompt_tokens or 0) if usage else 0
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        cached = (getattr(details, "cached_tokens", None) or 0) if details else 0
        return Completion(
            text,
            Usage(
                input_tokens=max(prompt - cached, 0),
                cached_input_tokens=cached,
                output_tokens=(usage.completion_tokens or 0) if usage else 0,
            ),
        )

    def close(self) -> None:
        self._client.close()


def make_client(options: ContextOptions, api_key: str | None) -> HeaderClient:
    """The SDK client for ``options.provider``; build one per worker (``DoFn.setup``)."""
    if options.provider == "anthropic":
        return AnthropicHeaderClient(options, api_key)
    return OpenAIHeaderClient(options, api_key)
