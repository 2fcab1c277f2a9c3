"""Sniper's inter-queue preemption quotas (the cross-queue design's ``calculate-preemption-quotas``), sans-IO.

From the ideal assignment (YARN's fix-point under DRF, layered by priority, ineffective increments
dropped; Sniper's is capped by demand on every resource): a leaf queue whose usage (victims under notice
included, as YARN's ``used``) is above its guarantee plus the deadzone (YARN's ``max_ignored_over_capacity``,
a trigger, not a floor) in the DRF comparison (``resources.drf_compare`` against the partition's capacity,
as YARN's DominantResourceCalculator) and whose net usage (victims under notice excluded) is over its ideal
on some resource may lose what its net usage holds above its floor
(:func:`floor_of`): its guarantee's dominant share of its dominant resource, and its ideal on the resource
it is most over. Its quota (``may_lose``) is that difference, every other resource included: a
memory-heavy queue loses vcores with its containers though it holds fewer than its guarantee names. A whole
container beyond the quota is still allowed (``eligibility.may_take``) while the queue has something left to lose
and stays at or above its guarantee without it. Never anything from a ``disabled`` queue. A leaf below its
ideal (DRF), with demand its user, group and application limits let run, is a beneficiary.
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
    """What the queue holds once its containers under notice are gone."""
    return res.clamp_min_zero(res.sub(held_usage(queue), queue.preempting))


def guarantee_floor(usage: Resource, guaranteed: Resource, capacity: Resource) -> Resource:
    """What keeps a queue at or above its guarantee: as much of its dominant resource (the one it holds the
    largest share of ``capacity``; ties by name) as its guarantee's dominant share makes of it.

    Compared by ``drf_compare``, anything holding at least this is not below it: invariant 5a's "at or above
    its guarantee" is about dominant shares, so a queue at exactly its guarantee's level has lost nothing it
    is owed, even where the tie-break ranks it below its guarantee for the allocator's order.
    """
    shares = {k: usage.get(k, 0) / c for k, c in capacity.items() if c > 0}
    if not shares:
        return {}
    dominant = max(sorted(shares), key=lambda k: shares[k])
    level = res.share_vector(guaranteed, capacity)[0] if guaranteed else 0.0
    return {dominant: math.ceil(level * capacity[dominant] - 1e-9)}


def floor_of(usage: Resource, ideal: Resource, guaranteed: Resource, capacity: Resource) -> Resource:
    """What a victim queue keeps whatever happens: its guarantee by dominant share (:func:`guarantee_floor`)
    and its ideal on the resource it is most over relative to the cluster (its DRF-dominant excess, as YARN's
    selectors take containers while the excess ``used - ideal`` is positive in the dominant calculator).
    Containers are bundles: a queue brought back to its ideal there cannot be held to the rest of its ideal
    vector elsewhere (the aggregate ideal knows no container shapes). Everything else it may lose."""
    floor = guarantee_floor(usage, guaranteed, capacity)
    excess = {k: (usage.get(k, 0) - ideal.get(k, 0)) / c for k, c in capacity.items() if c > 0}
    if excess:
        worst = max(sorted(excess), key=lambda k: excess[k])
        if excess[worst] > 0:
            floor[worst] = max(floor.get(worst, 0), ideal.get(worst, 0))
    return floor


def below_ideal(usage: Resource, ideal: Resource, capacity: Resource) -> bool:
    return res.drf_below(usage, ideal, capacity)


def held_usage(queue: Queue) -> Resource:
    """What the queue holds, containers under notice included: they run until they go, and YARN's ``used``
    counts containers marked for preemption until they are killed."""
    return res.add(queue.allocated, queue.reserved)


def over_deadzone(
    queue: Queue, held: Resource, usage: Resource, ideal: Resource, deadzone: float, capacity: Resource
) -> bool:
    """Whether a queue is a victim queue this round. The deadzone is YARN's trigger, not a floor: what it
    ``held`` at the round's start (:func:`held_usage`) is above ``guaranteed * (1 + deadzone)`` in the DRF
    comparison (YARN's deadzone, ``used > (1 + max_ignored_over_capacity) * guaranteed``);
    then its net ``usage`` may go down to its floor (:func:`floor_of`), inside the band too, so a queue whose
    victims of earlier rounds brought it into the band is still taken to its ideal. And it is over its ideal
    on some resource the cluster has (YARN's excess ``used - ideal`` positive under the dominant
    calculator). Not ``drf_above(usage, ideal)``: the aggregate ideal can give a queue a dominant share on a
    resource its containers cannot use (a queue of 2 GiB / 0.5-core containers whose sibling wants memory
    only is owed 90% of the vcores and 62% of the memory); it must still give the memory back."""
    dead = {k: int(v * (1.0 + deadzone)) for k, v in queue.guaranteed.items()}
    over = any(usage.get(k, 0) > ideal.get(k, 0) for k, c in capacity.items() if c > 0)
    return over and res.drf_above(held, dead, capacity)


def within_share(queue: Queue, after: Resource, ideal: Resource, capacity: Resource) -> bool:
    """Whether a beneficiary queue holding ``after`` stays within what it is owed: at most its ideal, or at
    most its guarantee (the elastic minimum every queue keeps, however the fix-point's rounding split the
    last units between it and a sibling), in the DRF comparison. An exact fit is within it."""
    return not res.drf_above(after, ideal, capacity) or not res.drf_above(after, queue.guaranteed, capacity)


def usable_capacity(state: PartitionState) -> Resource:
    """The capacity minus free room no pending ask can use now (ineffective room).

    Free room on a node that cannot hold even the component-wise smallest pending ask is provably
    useless at the moment: counting it, the aggregate fix-point would see room that fragmentation
    denies (a queue starving for large containers next to a queue holding every node but a sliver).
    """
    smallest: Resource | None = None
    for queue in state.queues.values():
        if not queue.is_leaf:
            continue
        for app in queue.waiting_apps():
            for ask in app.pending_asks:
                smallest = dict(ask.resource) if smallest is None else res.component_min(smallest, ask.resource)
    if not smallest:
        return state.capacity
    unusable: Resource = {}
    needs = list(smallest.items())
    for node in state.nodes.values():
        if not node.schedulable:
            continue
        cap, held, reserved = node.capacity, node.allocated, node.reserved
        for k, v in needs:
            if cap.get(k, 0) - held.get(k, 0) - reserved.get(k, 0) < v:
                break
        else:
            continue  # the smallest ask fits: nothing here is unusable (checked without building dicts)
        # The positive part of capacity - allocated - reserved (a resource the node lacks is never free).
        free: Resource = {}
        for k, c in cap.items():
            f = c - held.get(k, 0) - reserved.get(k, 0)
            if f > 0:
                free[k] = f
        if not free:
            continue
        for k, v in needs:
            if v > free.get(k, 0):
                break
        else:
            continue  # the smallest ask fits the free room
        # Only the resources too short for the ask: the rest becomes usable once those are freed
        # (a node full on vcores keeps its free memory; dropping it would shrink the capacity below
        # the guarantees and leave every queue "below its guarantee" under DRF).
        for k, f in free.items():
            if f < smallest.get(k, 0):
                unusable[k] = unusable.get(k, 0) + f
    return res.clamp_min_zero(res.sub(state.capacity, unusable)) if unusable else state.capacity


def compute_quotas(state: PartitionState, config: PreemptionConfig) -> Quotas:
    if state.config is None or not state.capacity:
        return Quotas({}, {}, (), {})
    snapshot = snapshot_from_state(state, capacity=usable_capacity(state))
    demand = {q.path: q.pending for q in snapshot.queues}  # what the limits let run
    assignment = ideal_of(snapshot)
    ideal = {q.path: q.ideal_assigned for q in assignment}
    may_lose: dict[str, Resource] = {}
    beneficiaries: list[str] = []
    capacity, deadzone = state.capacity, config.max_ignored_over_capacity
    for path, queue in state.queues.items():
        if not queue.is_leaf:
            continue
        usage = net_usage(queue)
        target = ideal.get(path, {})
        held = held_usage(queue)
        if not preemption_disabled(queue) and over_deadzone(queue, held, usage, target, deadzone, capacity):
            floor = floor_of(usage, target, queue.guaranteed, capacity)
            lose = res.clamp_min_zero(res.sub(usage, floor))
            if lose:
                may_lose[path] = lose
        if res.any_positive(demand.get(path, {})) and below_ideal(usage, target, capacity):
            beneficiaries.append(path)
    budget = {k: int(v * config.total_preemption_per_round) for k, v in state.capacity.items()}
    return Quotas(ideal, may_lose, tuple(sorted(beneficiaries)), budget)
