"""Time per stage of a finished job, from the runner's own per-transform execution-time metrics.

Beam's SDK harness samples which transform each bundle thread is in and reports it as the
monitoring info ``beam:metric:ptransform_execution_time:total_msecs:v1`` for every leaf
transform (``apache_beam/metrics/monitoring_infos.py``); the in-process runner exposes them
through ``result.monitoring_metrics()``. A stage here is a top-level label of the graph
(``Read``, ``Dedupe``, ``Embed``...): its leaves' times summed. Time is the sampler's, exclusive
of the downstream transforms fused into the same bundle, so the stages add up to the workers'
busy time, not to wall time.
"""

from __future__ import annotations

from typing import Any

from chunkline.transforms.counters import committed

# The URN, which the Python SDK reports split at its first colon: namespace "beam", name the rest.
EXECUTION_TIME = "beam:metric:ptransform_execution_time:total_msecs:v1"


def stage_seconds(result: Any) -> dict[str, float] | None:
    """{top-level label: seconds} of a finished job, largest first, or None when the runner
    does not report execution time (Dataflow, Flink: their consoles show it instead)."""
    try:
        counters = result.monitoring_metrics().query()["counters"]
    except Exception:  # noqa: BLE001 - a runner without monitoring metrics: no breakdown
        return None
    msecs: dict[str, int] = {}
    for counter in counters:
        urn = f"{counter.key.metric.namespace}:{counter.key.metric.name}"
        # ``ref_PCollection_...`` steps are the runner's own data channels, not the graph's.
        if urn != EXECUTION_TIME or not counter.key.step or counter.key.step.startswith("ref_"):
            continue
        stage = counter.key.step.split("/", 1)[0]
        msecs[stage] = msecs.get(stage, 0) + committed(counter)
    if not msecs:
        return None
    return {stage: ms / 1000 for stage, ms in sorted(msecs.items(), key=lambda kv: (-kv[1], kv[0]))
            if ms > 0}
