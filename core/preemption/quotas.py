"""Sniper's inter-queue preemption quotas (seed 002 ``calculate-preemption-quotas``), sans-IO.

From the ideal assignment (YARN's fix-point under DRF, layered by priority, ineffective increments
dropped), with every above/below question asked by the one DRF comparison (``resources.drf_compare``
against the partition's capacity, as YARN's DominantResourceCalculator): a leaf queue whose net usage
(victims already preempting excluded) is above its ideal and above its guarantee plus the deadzone (YARN's
``max_ignored_over_capacity``) may lose containers while it stays above both its ideal and its guarantee.
Its quota (``may_lose``) says so as a vector: everything on every resource but its dominant one (the one it
holds the largest share of), and on that one what it holds beyond the level of the larger of its ideal and
its guarantee; keeping that much of its dominant resource keeps it at or above both by dominant share,
whatever else it loses (:func:`dominant_floor`). A whole container beyond the quota is still allowed
(:func:`allows`) while the queue has something left to lose and stays at or above its guarantee without it.
Never anything from a ``disabled`` queue. A leaf below its ideal (DRF), with demand, is a beneficiary.
Invariant (5a): no victim takes a queue below its guarantee; it may end below its ideal by less than the
last victim's size.
"""

from __future__ import annotations

import dataclasses
import math

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


def dominant_floor(usage: Resource, levels: tuple[Resource, ...], capacity: Resource) -> Resource:
    """What a queue keeps: as much of its dominant resource (the one it holds the largest share of
    ``capacity``; ties by name) as the largest dominant share among ``levels`` (its guarantee, its ideal).

    Compared by ``drf_compare``, anything holding at least this is not below any of ``levels`` on its
    dominant share; a victim may lose the rest of what it holds (invariant 5a's "at or above its guarantee"
    is about the dominant share: a queue at exactly its guarantee's level on it has lost nothing it is owed,
    even if the tie-break ranks it below the guarantee for the allocator's order).
    """
    shares = {k: usage.get(k, 0) / c for k, c in capacity.items() if c > 0}
    if not shares:
        return {}
    dominant = max(sorted(shares), key=lambda k: shares[k])
    level = max((res.share_vector(x, capacity)[0] for x in levels), default=0.0)
    return {dominant: math.ceil(level * capacity[dominant] - 1e-9)}


def below_ideal(usage: Resource, ideal: Resource, capacity: Resource) -> bool:
    return res.drf_below(usage, ideal, capacity)


def over_deadzone(queue: Queue, usage: Resource, ideal: Resource, deadzone: float, capacity: Resource) -> bool:
    """Above its ideal and above ``guaranteed * (1 + deadzone)`` (DRF): YARN's and seed 000's deadzone
    (``used > (1 + max_ignored_over_capacity) * guaranteed``)."""
    dead = {k: int(v * (1.0 + deadzone)) for k, v in queue.guaranteed.items()}
    return res.drf_above(usage, ideal, capacity) and res.drf_above(usage, dead, capacity)


def allows(queue: Queue, quota: Resource, taken: Resource, victim: Resource, capacity: Resource) -> bool:
    """Whether a victim queue may lose ``victim`` after losing ``taken`` this round, ``quota`` being its
    ``may_lose``: yes within the quota; beyond it, a whole container is still allowed while the queue has
    something left to lose (``taken`` within the quota: it is above its ideal) and it stays at or above its
    guarantee without it (DRF). So it may end below its ideal by less than one container (invariant 5a)."""
    after = res.add(taken, victim)
    if res.fits(after, quota):
        return True
    if not res.fits(taken, quota):
        return False
    left = res.clamp_min_zero(res.sub(net_usage(queue), after))
    return not res.drf_below(left, dominant_floor(left, (queue.guaranteed,), capacity), capacity)


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
    capacity, deadzone = state.capacity, config.max_ignored_over_capacity
    for path, queue in state.queues.items():
        if not queue.is_leaf:
            continue
        usage = net_usage(queue)
        target = ideal.get(path, {})
        if not preemption_disabled(queue) and over_deadzone(queue, usage, target, deadzone, capacity):
            floor = dominant_floor(usage, (queue.guaranteed, target), capacity)
            lose = res.clamp_min_zero(res.sub(usage, floor))
            if lose:
                may_lose[path] = lose
        if res.any_positive(queue.pending) and below_ideal(usage, target, capacity):
            beneficiaries.append(path)
    budget = {k: int(v * config.total_preemption_per_round) for k, v in state.capacity.items()}
    return Quotas(ideal, may_lose, tuple(sorted(beneficiaries)), budget)
