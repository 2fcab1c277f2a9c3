"""Sniper's ideal assignment of a settled partition, read off its figures without the fix-point.

Owns :func:`settled_ideal`. A partition is settled when nothing is pending and every queue holds no more
than its composed guarantee and its parent's ideal on any resource; then every queue's ideal is its usage
(the root's: the capacity), exactly as :func:`sniper.core.preemption.view.computed_ideal` finds it on the
snapshot :func:`sniper.core.preemption.view.snapshot_from_figures` builds, whatever the options. On any
other figures it answers ``None`` and the caller computes.

Why (``compute_ideal`` with ``cap_by_demand`` and ``priority_layers``, level by level from the root, whose
ideal is its guarantee, the capacity). Let ``tot`` be a level's total: the parent's ideal, or its minimum
with the parent's usage under a fence. By induction a non-root parent's ideal is its usage, and the
condition asks ``0 <= used[n] <= min(guaranteed[n], tot[n])`` for every resource ``n`` of each queue, with
guarantees never negative.

1. ``_initial`` leaves out of the guarantee the resources ``tot`` has none of; a resource the queue uses
   has ``tot[n] >= used[n] > 0``, so the usage is component-wise at most that trimmed guarantee, and the
   calculator's order (component-wise when ``tot`` lacks a type; else shares of ``tot`` sorted largest
   first, which keep a component-wise ``<=`` at every rank) never finds it greater. The other branch
   returns ``used[n]`` or ``min(used[n], guaranteed[n] + untouchable⁺[n])``, which is ``used[n]``: the
   initial ideal is the usage, key for key.
2. Nothing is pending (a parent's pending is its children's sum), so no queue has ``ideal < used +
   pending``: no heap of either pass holds a queue and nothing is offered. Priority layers only order
   offers, and ``avoid_ineffective`` drops no one: every increment over usage is zero.
3. Preemption targets and extras do not feed back into ideals, so every queue ends at its usage.

The ideal the snapshot carries is the figures it holds: the usage restricted to the capacity's resources
(the snapshot's ``known``). This is the report's common case on a cluster that is not contended (a pod
list at a fraction of its capacity): no fix-point and no snapshot at all.
"""

from __future__ import annotations

from collections.abc import Mapping

from sniper.core.config import PartitionConfig, QueueConfig
from sniper.core.preemption.view import composed_guarantees
from sniper.core.resources import Resource, component_min


def settled_ideal(
    config: PartitionConfig, capacity: Resource, used: Mapping[str, Resource], pending: Mapping[str, Resource]
) -> dict[str, Resource] | None:
    """Every queue's ideal (``ideal_assigned``) by path in pre-order when the partition is settled, else
    ``None``; the figures are those :func:`~sniper.core.preemption.view.snapshot_from_figures` reads."""
    for demand in pending.values():
        for k, v in demand.items():
            if v and k in capacity:
                return None
    guarantees = composed_guarantees(config, capacity, used, pending)
    ideal: dict[str, Resource] = {config.root.path: dict(capacity)}

    def held(q: QueueConfig) -> Resource:
        return {k: v for k, v in used.get(q.path, {}).items() if k in capacity}

    def within(q: QueueConfig) -> bool:
        tot = ideal[q.path]
        if q.preemption_policy == "fence":
            tot = component_min(tot, held(q))
        if any(v < 0 for v in tot.values()):
            return False
        for child in q.children:
            figures = held(child)
            guaranteed = guarantees[child.path]
            if any(v < 0 for v in guaranteed.values()):
                return False
            for k, v in figures.items():
                if v < 0 or v > guaranteed.get(k, 0) or v > tot.get(k, 0):
                    return False
            ideal[child.path] = figures
            if not within(child):
                return False
        return True

    return ideal if within(config.root) else None
