"""What the context stage spent and what became of its chunks: the tokens of one request
(``Usage``), the stage's counters, and from them the estimated cost, the failure-budget check
and the run summary's lines.

    lines = summary_lines({"chunks": 3, "chunks_ok": 3, "requests": 3, ...}, options)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from chunkline.context.options import ContextOptions

# Beam counters of the stage (namespace "context"); the run summary and the publish check read
# them back by these names.
METRICS_NAMESPACE = "context"
COUNTERS = (
    "chunks",  # chunks that entered the stage
    "chunks_ok",  # header written by a request in this run
    "chunks_cached",  # header reused from an earlier run's cache, no request
    "chunks_failed",  # no header; the chunk goes on without one
    "requests",  # HTTP requests sent, retries included
    "retries",
    "input_tokens",  # prompt tokens billed at the full input price
    "cached_input_tokens",  # prompt tokens read from the provider's prompt cache
    "cache_write_tokens",  # prompt tokens written to it (Anthropic)
    "output_tokens",
    "cache_files_unreadable",  # cross-run cache files skipped (their entries are redone)
)


@dataclass(frozen=True)
class Usage:
    """Tokens of one answered request, normalised across providers: ``input_tokens`` are billed
    at the full input price (cache reads and writes excluded)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0


def estimate_cost(counters: Mapping[str, int], options: ContextOptions) -> float | None:
    """Estimated USD of the run's requests from the token counters and ``options.price_*``
    (per million tokens); None without an input or output price."""
    if options.price_input is None or options.price_output is None:
        return None
    cached_price = options.price_input if options.price_cached_input is None else options.price_cached_input
    write_price = options.price_input if options.price_cache_write is None else options.price_cache_write
    total = (
        counters.get("input_tokens", 0) * options.price_input
        + counters.get("cached_input_tokens", 0) * cached_price
        + counters.get("cache_write_tokens", 0) * write_price
        + counters.get("output_tokens", 0) * options.price_output
    )
    return total / 1_000_000


def over_failure_budget(counters: Mapping[str, int], options: ContextOptions) -> bool:
    """True when the run's failed chunks exceed ``max_failures``: do not publish it."""
    return options.max_failures is not None and counters.get("chunks_failed", 0) > options.max_failures


def summary_lines(counters: Mapping[str, int], options: ContextOptions) -> list[str]:
    """Lines for the run summary, in its layout::

          context    399 chunks = ok 380 + cached 15 + failed 4  (claude-haiku-4-5, prompt v1)
                     412 requests (13 retries); tokens in 9,120 + cached 1,204,311 + written 98,120, out 31,200; est. $0.42
    """
    c = {name: int(counters.get(name, 0)) for name in COUNTERS}
    accounted = c["chunks_ok"] + c["chunks_cached"] + c["chunks_failed"]
    check = "" if accounted == c["chunks"] else f"; NOT RECONCILED: {accounted} accounted for"
    cost = estimate_cost(c, options)
    cost_text = "cost unknown (no prices set)" if cost is None else f"est. ${cost:,.2f}"
    lines = [
        (f"  context    {c['chunks']:,} chunks = ok {c['chunks_ok']:,} + cached {c['chunks_cached']:,} "
         f"+ failed {c['chunks_failed']:,}  ({options.model} via {options.provider}, prompt "
         f"{options.prompt_version}{check})"),
        (f"             {c['requests']:,} requests ({c['retries']:,} retries); tokens in "
         f"{c['input_tokens']:,} + cached {c['cached_input_tokens']:,} + written "
         f"{c['cache_write_tokens']:,}, out {c['output_tokens']:,}; {cost_text}"),
    ]
    if over_failure_budget(c, options):
        lines.append(f"             FAILED: {c['chunks_failed']:,} chunks without a header, over the "
                     f"failure budget of {options.max_failures:,}")
    if c["cache_files_unreadable"]:
        lines.append(f"             {c['cache_files_unreadable']} unreadable cache file(s) skipped")
    return lines
