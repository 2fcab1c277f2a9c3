"""Minimum runtime before preemption (queue property ``preemption.min.runtime``, Slurm's
``PreemptExemptTime``): a guaranteed container that has run less than its queue's minimum is young, and no
policy takes a young container as a victim (:func:`sniper.core.preemption.eligibility.refusal` applies it;
opportunistic containers and the required-node preemptor stand aside). Pure functions of a container, its
queue and the partition's clock; a partition whose queues set no minimum pays one scan of its queues.
"""

from __future__ import annotations

from sniper.core.state import Allocation, PartitionState


def young(alloc: Allocation, now: float) -> bool:
    """Whether ``alloc`` has run less than its queue's ``preemption.min.runtime`` at ``now`` (never, when
    the queue sets none)."""
    minimum = alloc.queue.config.preemption_min_runtime
    return minimum > 0 and now - alloc.start < minimum


def of_age_at(alloc: Allocation) -> float:
    """When ``alloc`` comes of age: its start plus its queue's ``preemption.min.runtime``."""
    return alloc.start + alloc.queue.config.preemption_min_runtime


def aging(state: PartitionState) -> bool:
    """Whether some queue of the partition sets a minimum runtime (otherwise no container is ever young)."""
    return any(q.config.preemption_min_runtime > 0 for q in state.queues.values())


def next_of_age(state: PartitionState, now: float) -> float | None:
    """When the first guaranteed container young at ``now`` comes of age (``None``: none is young)."""
    if not aging(state):
        return None
    ages = (of_age_at(a) for a in state.allocations.values() if not a.opportunistic and young(a, now))
    return min(ages, default=None)
