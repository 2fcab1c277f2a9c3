"""Sniper's inter-queue preemption quotas (seed 002 ``calculate-preemption-quotas``), sans-IO.

From the ideal assignment (YARN's fix-point under DRF, layered by priority, ineffective increments
dropped): a leaf queue whose net usage (victims already preempting excluded) exceeds, on some
resource, both its ideal and its guarantee plus the deadzone (YARN's ``max_ignored_over_capacity``) may
lose what it holds above its floor: its ideal on the resource it is most over relative to the cluster
(its DRF-dominant excess; containers are bundles, so the rest of its ideal elsewhere is out of reach
anyway) and its guarantee on every resource. Never anything from a ``disabled`` queue. A leaf at or
below its ideal on every resource and below it on one, with demand, is a beneficiary.
Invariant: no quota ever takes a queue below its guarantee in any resource, nor below its ideal on the
resource it is most over.
"""

from __future__ import annotations

import dataclasses

from sniper.core import resources as res
from sniper.core.config import PreemptionConfig
from sniper.core.preemption.rules import preemption_disabled
from sniper.core.preemption.view import ideal_of, snapshot_from_state
from sniper.core.resources import Resource
from sniper.core.state import PartitionState, Queue


@dataclasses.dataclass(frozen=True, slots=True)
class Quotas:
    ideal: dict[str, Resource]  # every queue path
    may_lose: dict[str, Resource]  # leaf path -> resources it may lose this round
    beneficiaries: tuple[str, ...]  # leaf paths below their ideal, with demand
    budget: Resource  # the round's cap on preempted resources

    def same_as(self, other: Quotas | None) -> bool:
        return other is not None and self.may_lose == other.may_lose and self.beneficiaries == other.beneficiaries


def net_usage(queue: Queue) -> Resource:
    return res.clamp_min_zero(res.sub(res.add(queue.allocated, queue.reserved), queue.preempting))


def floor_of(queue: Queue, usage: Resource, ideal: Resource, capacity: Resource) -> Resource:
    """What the queue keeps whatever happens: its guarantee on every resource, and its ideal on the
    resource it is most over (relative to the cluster: its DRF-dominant excess). Containers are bundles:
    a queue brought back to its ideal on that resource cannot use the rest of its ideal elsewhere."""
    g = queue.guaranteed
    floor = {k: min(v, g.get(k, 0)) for k, v in usage.items()}
    excess = {k: (v - ideal.get(k, 0)) / capacity[k] for k, v in usage.items() if capacity.get(k)}
    if excess:
        worst = max(sorted(excess), key=lambda k: excess[k])
        if excess[worst] > 0:
            floor[worst] = max(g.get(worst, 0), ideal.get(worst, 0))
    return floor


def below_ideal(usage: Resource, ideal: Resource) -> bool:
    keys = set(usage) | set(ideal)
    return all(usage.get(k, 0) <= ideal.get(k, 0) for k in keys) and any(
        usage.get(k, 0) < ideal.get(k, 0) for k in keys
    )


def over_deadzone(queue: Queue, usage: Resource, ideal: Resource, deadzone: float) -> bool:
    """Over ``max(ideal, guaranteed * (1 + deadzone))`` on some resource: YARN's and seed 000's deadzone
    (``used > (1 + max_ignored_over_capacity) * guaranteed``), and above the ideal as well."""
    g = queue.guaranteed
    return any(v > max(ideal.get(k, 0), int(g.get(k, 0) * (1.0 + deadzone))) for k, v in usage.items())


def usable_capacity(state: PartitionState) -> Resource:
    """The capacity minus free room no pending ask can use now (seed 000's ineffective room).

    Free room on a node that cannot hold even the component-wise smallest pending ask is provably
    useless at the moment: counting it, the aggregate fix-point would see room that fragmentation
    denies (a queue starving for large containers next to a queue holding every node but a sliver).
    """
    smallest: Resource | None = None
    for queue in state.queues.values():
        if not queue.is_leaf:
            continue
        for app in queue.apps.values():
            for ask in app.pending_asks:
                if smallest is None:
                    smallest = dict(ask.resource)
                else:
                    keys = set(smallest) | set(ask.resource)
                    smallest = {k: min(smallest.get(k, 0), ask.resource.get(k, 0)) for k in keys}
    if not smallest:
        return state.capacity
    unusable: Resource = {}
    for node in state.nodes.values():
        if not node.schedulable:
            continue
        free = res.clamp_min_zero(res.sub(res.sub(node.capacity, node.allocated), node.reserved))
        if free and not res.fits(smallest, free):
            # Only the resources too short for the ask: the rest becomes usable once those are freed
            # (a node full on vcores keeps its free memory; dropping it would shrink the capacity below
            # the guarantees and leave every queue "below its guarantee" under DRF).
            res.add_into(unusable, {k: v for k, v in free.items() if v < smallest.get(k, 0)})
    return res.clamp_min_zero(res.sub(state.capacity, unusable)) if unusable else state.capacity


def compute_quotas(state: PartitionState, config: PreemptionConfig) -> Quotas:
    if state.config is None or not state.capacity:
        return Quotas({}, {}, (), {})
    assignment = ideal_of(snapshot_from_state(state, capacity=usable_capacity(state)))
    ideal = {q.path: q.ideal_assigned for q in assignment}
    may_lose: dict[str, Resource] = {}
    beneficiaries: list[str] = []
    for path, queue in state.queues.items():
        if not queue.is_leaf:
            continue
        usage = net_usage(queue)
        target = ideal.get(path, {})
        if not preemption_disabled(queue) and over_deadzone(queue, usage, target, config.max_ignored_over_capacity):
            lose = res.clamp_min_zero(res.sub(usage, floor_of(queue, usage, target, state.capacity)))
            if lose:
                may_lose[path] = lose
        if res.any_positive(queue.pending) and below_ideal(usage, target):
            beneficiaries.append(path)
    budget = {k: int(v * config.total_preemption_per_round) for k, v in state.capacity.items()}
    return Quotas(ideal, may_lose, tuple(sorted(beneficiaries)), budget)
