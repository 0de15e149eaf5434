"""Contextual headers: an LLM writes a short text situating each chunk in its document, prepended
before embedding and BM25 (Anthropic, "Introducing Contextual Retrieval", 2024: top-20
retrieval failures 5.7 % -> 3.7 %, 2.9 % with contextual BM25).

The pure half of the context stage, no Beam, one module per idea:

    options     ContextOptions (every setting and its checks), the API key's lookup
    prompts     the versioned prompt templates and the delimiting of document and chunk text
    clients     the Anthropic and OpenAI-compatible SDK clients, the requests they send,
                retryable failures and ``retry-after``
    writer      HeaderWriter: the thread pool writing one document's chunks back to back (so the
                provider's prompt cache holds the document), retries, the failure budget
    fit         fitting an answer to the header's token reserve
    cache       cross-run cache keys and the cache's Parquet schema
    accounting  token usage, the stage's counters, the cost estimate and the run summary

``transforms/context.py`` adapts it to Beam and adds the cross-run cache. ::

    options = ContextOptions(provider="openai", model="qwen3-8b", base_url="http://127.0.0.1:8000/v1")
    writer = HeaderWriter(make_client(options, resolve_api_key(options)), options)
    results = writer.write(document_text, [chunk_a, chunk_b])   # [HeaderResult(status="ok", ...), ...]
    header = fit_header(results[0].text, get_tokenizer(split_spec), options.max_header_tokens)
"""

from chunkline.context.accounting import (
    COUNTERS, METRICS_NAMESPACE, Usage, estimate_cost, over_failure_budget, summary_lines,
)
from chunkline.context.cache import cache_key, cache_schema, doc_cache_key, entry_key, text_hash
from chunkline.context.clients import (
    RETRYABLE_STATUS, AnthropicHeaderClient, CallFailed, Completion, HeaderClient,
    OpenAIHeaderClient, anthropic_request, make_client, openai_request, parse_retry_after,
    prompt_parts,
)
from chunkline.context.fit import HEADER_SEPARATOR, fit_header, normalize_header
from chunkline.context.options import (
    DEFAULT_KEY_ENV, PROVIDERS, ContextOptions, context_reserve, resolve_api_key,
)
from chunkline.context.prompts import PROMPTS, PromptTemplate, escape_delimiters
from chunkline.context.writer import (
    CACHED, FAILED, OK, HeaderResult, HeaderWriter, backoff_delay, failed_status, status_kind,
)

__all__ = [
    "CACHED", "COUNTERS", "DEFAULT_KEY_ENV", "FAILED", "HEADER_SEPARATOR", "METRICS_NAMESPACE",
    "OK", "PROMPTS", "PROVIDERS", "RETRYABLE_STATUS", "AnthropicHeaderClient", "CallFailed",
    "Completion", "ContextOptions", "HeaderClient", "HeaderResult", "HeaderWriter",
    "OpenAIHeaderClient", "PromptTemplate", "Usage", "anthropic_request", "backoff_delay",
    "cache_key", "cache_schema", "context_reserve", "doc_cache_key", "entry_key",
    "escape_delimiters", "estimate_cost", "failed_status", "fit_header", "make_client",
    "normalize_header", "openai_request", "over_failure_budget", "parse_retry_after",
    "prompt_parts", "resolve_api_key", "status_kind", "summary_lines", "text_hash",
]
