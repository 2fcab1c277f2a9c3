"""Soft opt-outs (``allow_preemption: false``, YuniKorn's ``allow-preemption``): an app that opted out is
spared while other queues can still give the room down to their guarantees, not only down to their ideal.

For a beneficiary below its guarantee, a set of tasks (no application master, no container of an app that
opted out) may come from queues beyond their quotas, each kept at or above its guarantee, when the set it
replaces held an opted-out app's containers (:func:`may_spare`); for a beneficiary at its guarantee the
ask waits while such a set exists. The placer (:mod:`sniper.core.preemption.placement`) and the cache's
commit check (:mod:`sniper.core.preemption.commit`) read this one rule; the simulator's checker keeps its
own copy. Pure functions of the state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sniper.core import resources as res
from sniper.core.preemption.eligibility import keeps_guarantee
from sniper.core.preemption.rules import last_resort
from sniper.core.resources import Resource
from sniper.core.state import Allocation, PartitionState, Queue


def below_guarantee(queue: Queue, capacity: Resource) -> bool:
    """Whether ``queue`` (what it holds, reserves and is being given) is below its guarantee (DRF)."""
    return res.drf_below(queue.usage(), queue.guaranteed, capacity)


def opted_out_running(state: PartitionState, beneficiary: Queue) -> bool:
    """Whether an app that opted out, outside ``beneficiary``, holds a container not under notice: the one
    a victim set beyond the quotas may spare."""
    for app in state.guarded.values():
        if app.allow_preemption or app.queue is beneficiary:
            continue
        allocations = (state.allocations.get(a) for a in app.allocations)
        if any(a is not None and not a.opportunistic and not a.preempting for a in allocations):
            return True
    return False


def keep_guarantees(state: PartitionState, victims: Sequence[Allocation], gone: Mapping[str, Resource] | None) -> bool:
    """Whether ``victims`` (guaranteed ones) hold no victim of last resort and leave every queue they come
    from at or above its guarantee (``gone``: what each queue path lost already that its usage does not
    show yet)."""
    guarded = state.guarded
    if any(last_resort(v, guarded.get(v.app)) for v in victims):
        return False
    by_queue: dict[str, tuple[Queue, Resource]] = {}
    for v in victims:
        queue, losing = by_queue.get(v.queue.path, (v.queue, {}))
        by_queue[v.queue.path] = (queue, res.add(losing, v.resource))
    return all(
        keeps_guarantee(queue, losing, state.capacity, (gone or {}).get(path))
        for path, (queue, losing) in by_queue.items()
    )


def may_spare(
    state: PartitionState,
    beneficiary: Queue,
    victims: Sequence[Allocation],
    gone: Mapping[str, Resource] | None = None,
) -> bool:
    """Whether ``victims`` (guaranteed ones) may be taken beyond their queues' quotas to spare an app that
    opted out: ``beneficiary`` is below its guarantee, an opted-out app holds containers a policy could
    take instead, and the victims keep every guarantee (:func:`keep_guarantees`)."""
    if not victims or not below_guarantee(beneficiary, state.capacity):
        return False
    return keep_guarantees(state, victims, gone) and opted_out_running(state, beneficiary)
