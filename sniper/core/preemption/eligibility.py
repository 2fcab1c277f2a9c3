"""Victim eligibility: the one home of "may this container be a victim for this ask in this round?"
(:func:`refusal`, its checks in order, as yunikorn-core's ``findEligiblePreemptionVictims`` lists its
skips) and of "how far may its queue go?" (:func:`may_take`, :func:`quota_allows`, :func:`spend`: the
quota, one whole container beyond it, never below the guarantee). The placer
(:mod:`sniper.core.preemption.placement`) and the cache's commit checks (:mod:`sniper.core.preemption.commit`,
placements and YARN's baseline alike) call them, so what is placed is what is committed; the placer's
candidate index is built from the parts of :func:`refusal` that read the container or its queue alone
(:func:`standing`, :func:`queue_refusal`, :func:`sniper.core.preemption.min_runtime.young`), never from a
copy of them. The simulator's checker keeps its own, independent copy. Pure functions of the state they are given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from sniper.core import resources as res
from sniper.core.limits import Limits
from sniper.core.preemption.min_runtime import young
from sniper.core.preemption.quotas import guarantee_floor, net_usage
from sniper.core.preemption.rules import may_preempt_for, preemption_disabled
from sniper.core.resources import Resource
from sniper.core.state import Allocation, Ask, Queue

# Why a container may not be a victim (checked in this order).
Refusal = Literal[
    "pinned", "preempting", "young", "disabled", "higher_priority", "not_lower_in_queue", "queue_relation"
]


def refusal(
    alloc: Allocation,
    ask: Ask | None,
    *,
    now: float,
    intra: bool = False,
    required_node: bool = False,
    limits: Limits | None = None,
    chosen: Sequence[Allocation] = (),
    related: Callable[[Queue, Queue], bool] = may_preempt_for,
) -> Refusal | None:
    """Why ``alloc`` may not be a victim for ``ask`` this round, or ``None`` when it may (``ask`` ``None``:
    for no ask, as YARN's proportional baseline frees room):

    1. a container placed for a required-node ask is never a victim of a placement (the baseline reads
       no required nodes: it is not asked);
    2. one already under notice is leaving (1 and 2 read the container alone: :func:`standing`);
    3. an opportunistic container may go for any guaranteed ask, and to the baseline (it counts in no queue);
    4. ``required_node`` (the ask requires the container's node, and the partition lets it preempt
       there): any queue, priority at most the ask's, any age (YuniKorn's required-node preemptor);
    5. a container that has run (by ``now``) less than its queue's ``preemption.min.runtime`` stays
       (:func:`sniper.core.preemption.min_runtime.young`, which reads the container and its queue alone);
    6. where no queue relation judges the victim (the baseline, and ``intra``), a container of a queue
       with preemption disabled stays (:func:`queue_refusal`, which reads the queue alone);
    7. ``intra`` (intra-queue policy): a lower-priority task of another app in the ask's queue
       (:func:`lower_in_queue`), or a container of a user above its limit (``limits``; ``chosen``: the
       victims already in the set);
    8. otherwise the queue relations (``related``, :func:`sniper.core.preemption.rules.may_preempt_for`,
       which a disabled queue fails too).

    How much its queue may lose is the quota's to say (:func:`may_take`), not this."""
    why = standing(alloc, placing=ask is not None)
    if why is not None or alloc.opportunistic:
        return why
    if ask is not None and required_node:
        return None if alloc.priority <= ask.priority else "higher_priority"
    if young(alloc, now):
        return "young"
    if ask is None:
        return queue_refusal(alloc.queue)
    if intra:
        why = queue_refusal(alloc.queue)
        if why is not None:
            return why
        if lower_in_queue(alloc, ask) or (limits is not None and limits.may_take(alloc, ask, chosen)):
            return None
        return "not_lower_in_queue"
    return None if related(alloc.queue, ask.app.queue) else "queue_relation"


def standing(alloc: Allocation, *, placing: bool = True) -> Refusal | None:
    """Steps 1 and 2 of :func:`refusal`, which read the container alone (``placing``: for an ask): what
    they refuse is refused whatever the ask, so a placer may leave it out of its candidates."""
    if placing and alloc.pinned:
        return "pinned"
    return "preempting" if alloc.preempt_deadline is not None else None


def queue_refusal(queue: Queue) -> Refusal | None:
    """Step 6 of :func:`refusal`, which reads the victim's queue alone: ``"disabled"`` when preemption is
    disabled in ``queue`` or above it."""
    return "disabled" if preemption_disabled(queue) else None


def explain(why: Refusal, alloc: Allocation, ask: Ask | None) -> str:
    """A refusal as the cache's outcome states it (for no ask, the outcome names the victim itself)."""
    victim = "victim" if ask is None else f"victim {alloc.id}"
    match why:
        case "pinned":
            return "a victim was placed for a required-node ask (never a victim)"
        case "preempting":
            return f"{victim} is already preempting"
        case "disabled":
            return f"{victim}'s queue has preemption disabled"
        case "young":
            minimum = alloc.queue.config.preemption_min_runtime
            return f"{victim} has run less than its queue's preemption.min.runtime ({minimum:g} s)"
    assert ask is not None  # the rest judge a victim for an ask
    queue = ask.app.queue.path
    match why:
        case "higher_priority":
            prio = f"({alloc.priority}) than the required-node ask ({ask.priority})"
            return f"victim {alloc.id} has a higher priority {prio}"
        case "not_lower_in_queue":
            return (
                f"victim {alloc.id} is not a lower-priority container of another app in {queue}, "
                "nor of another user above its limit"
            )
        case "queue_relation":
            return f"victim {alloc.id}'s queue {alloc.queue.path} may not be preempted for {queue}"


def lower_in_queue(alloc: Allocation, ask: Ask) -> bool:
    """The intra-queue rule: a task (not an application master) of another app in the ask's own queue, of
    lower priority than the ask."""
    return alloc.queue is ask.app.queue and alloc.app != ask.app.name and alloc.priority < ask.priority and not alloc.am


def required_node_order(alloc: Allocation) -> tuple[object, ...]:
    """The required-node preemptor's order: opportunistic containers first, then tasks before application
    masters; lower priority first, then younger, then smaller (by the sum of its components), then id."""
    return (not alloc.opportunistic, alloc.am, alloc.priority, -alloc.start, sum(alloc.resource.values()), alloc.id)


def spend(left: Resource, granted: Resource, taken: Resource) -> None:
    """Charge ``taken`` to a victim queue's quota ``left`` (``granted`` at the round's start). A resource
    whose granted quota is used up is where the queue is back at its ideal (the one it was over): from
    then on it may lose nothing, though the quota on the resources it was not over has room left (that
    room only lets one victim set take them along)."""
    res.sub_into(left, taken)
    if any(left.get(k, 0) <= 0 for k, g in granted.items() if g > 0):
        for k, v in left.items():
            left[k] = min(v, 0)


def quota_allows(
    victims: list[Allocation], left: dict[str, Resource], capacity: Resource, gone: dict[str, Resource] | None = None
) -> str | None:
    """The victim queue whose quota ``victims`` break (``None``: none), each queue's victims taken in
    order, cheapest overshoot last: at most one victim per queue beyond its quota (see :func:`may_take`)."""
    by_queue: dict[str, list[Allocation]] = {}
    for v in victims:
        by_queue.setdefault(v.queue.path, []).append(v)
    for path, mine in by_queue.items():
        quota = left.get(path, {})
        total = res.total(v.resource for v in mine)
        if res.fits(total, quota):
            continue
        # The one victim allowed beyond the quota: any whose removal leaves the rest within it.
        if not any(
            may_take(v.queue, res.sub(total, v.resource), v.resource, quota, capacity, (gone or {}).get(path))
            for v in mine
        ):
            return path
    return None


def may_take(
    queue: Queue, before: Resource, victim: Resource, left: Resource, capacity: Resource, gone: Resource | None = None
) -> bool:
    """Whether ``queue``, having lost ``before`` to this set, may lose ``victim`` too with ``left`` its
    remaining quota (architecture: invariant 5a). Within the quota, yes. Containers are whole, so one
    victim may overshoot it, as YARN's selector does, while the queue was still over its floor (quota
    left on every resource the victim holds, nothing overdrawn) and stays, without it, at or above its
    guarantee: in the DRF comparison, and on each resource the guarantee names. ``gone``: what the queue already lost
    that its usage does not show yet (victims taken earlier in the same placement round)."""
    after = res.add(before, victim)
    if res.fits(after, left):
        return True
    rest = res.sub(left, before)
    if any(v < 0 for v in rest.values()) or not all(rest.get(k, 0) > 0 for k in victim):
        return False  # overdrawn already (one whole container beyond the quota at most), or at its floor
    # The overshoot is beyond what the quota granted: it must keep the guarantee.
    return keeps_guarantee(queue, after, capacity, gone)


def keeps_guarantee(queue: Queue, losing: Resource, capacity: Resource, gone: Resource | None = None) -> bool:
    """Whether ``queue``, losing ``losing`` (and ``gone``, lost already but not yet off its usage), stays at or
    above its guarantee: in the DRF comparison and, conservatively, on every resource the guarantee names
    (what the queue held of it, if less)."""
    usage = net_usage(queue) if gone is None else res.sub(net_usage(queue), gone)
    remaining = res.sub(usage, losing)
    guaranteed = queue.guaranteed
    if any(remaining.get(k, 0) < min(g, usage.get(k, 0)) for k, g in guaranteed.items()):
        return False
    # In the DRF comparison as the quotas read it (:func:`guarantee_floor`): at its guarantee's dominant level
    # it is not below it, though it holds none of a resource the guarantee names and it never used.
    return not res.drf_below(remaining, guarantee_floor(remaining, guaranteed, capacity), capacity)
