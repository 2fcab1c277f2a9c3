"""When each quota-preempted queue's ``max`` took effect: the clock its ``quota.preemption.delay`` runs on.

Only queues with a delay, in a partition whose ``preemption.quotapreemptionenabled`` is on and whose
preemption is not off (``policy: none``), are tracked (an empty map otherwise). A queue keeps its time
across configurations while its ``max`` stays the same; a new ``max`` (or a queue newly tracked) starts at
the configuration's time. Feed time only.
"""

from __future__ import annotations

from collections.abc import Mapping

from sniper.core.config import PartitionConfig
from sniper.core.resources import Resource


def max_since(
    config: PartitionConfig, old_max: Mapping[str, Resource | None], old_since: Mapping[str, float], now: float
) -> dict[str, float]:
    """The tracked queues of ``config`` with the time their ``max`` took effect, given the maxes and times
    of the configuration it replaces."""
    if not config.preemption.quotapreemptionenabled or config.preemption.policy == "none":
        return {}
    out: dict[str, float] = {}
    for q in config.queues():
        if q.quota_preemption_delay <= 0 or q.max is None:
            continue
        kept = q.path in old_since and old_max.get(q.path) == q.max
        out[q.path] = old_since[q.path] if kept else now
    return out
