"""Quota preemption (YuniKorn 1.8): a queue kept above a lowered ``max`` gives containers back until it is at
or under it, with nothing pending and no beneficiary. The cache enforces it at each tick (:func:`enforce`).

A queue (leaf or parent) with a ``quota.preemption.delay``, in a partition with
``preemption.quotapreemptionenabled`` on, that has held more than its ``max`` (its running guaranteed
containers not under notice) for the delay since that ``max`` took effect (:mod:`sniper.core.quota_clock`)
loses containers of its own subtree, each with the partition's grace: gangs whole, application masters and
apps that opted out of preemption last, then by the partition's ``victim_cost`` (least running time first
by default), never one placed for a required node nor one in a queue with preemption disabled (or under
such a queue). Invariants: no victim outside the queue; the set is minimal (without any one of its units the
queue would stay above its ``max``), so the queue never goes further under it than one unit needs; the
deepest queues are settled first and their victims count for their ancestors. Opportunistic containers
count in no queue and are never chosen. Sans-IO and deterministic: feed time only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from sniper.core import resources as res
from sniper.core.preemption.contract import Requests
from sniper.core.preemption.costs import VictimCost, victim_cost
from sniper.core.preemption.rules import preemption_disabled
from sniper.core.resources import Resource
from sniper.core.state import Allocation, PartitionState, Queue, allocation_number
from sniper.core.units import human_resource
from sniper.core.writer import Writer
from sniper.messages import protocol as p

POLICY = "quota"


@dataclasses.dataclass(frozen=True, slots=True)
class QuotaVictim:
    """A container chosen to bring ``queue`` (its own or an ancestor) back to its ``max``."""

    alloc: Allocation
    queue: str


def excess(state: PartitionState, queue: Queue, taken: Resource | None = None) -> Resource:
    """How far ``queue`` holds more than its ``max`` once its containers under notice (and ``taken``)
    are gone; empty when it is at or under it."""
    if queue.max is None:
        return {}
    usage = res.sub(res.sub(queue.allocated, queue.preempting), taken or {})
    return {r: usage.get(r, 0) - cap for r, cap in queue.max.items() if usage.get(r, 0) > cap}


def due(state: PartitionState, queue: Queue) -> bool:
    """Whether the delay of ``queue`` has run since its ``max`` took effect."""
    since = state.max_since.get(queue.path)
    return since is not None and state.now >= since + queue.config.quota_preemption_delay


def pending(state: PartitionState) -> bool:
    """Whether quota preemption has work: a tracked queue above its ``max`` whose delay is still running,
    or containers it would take now."""
    for path in state.max_since:
        queue = state.queues.get(path)
        if queue is not None and not due(state, queue) and excess(state, queue):
            return True
    return bool(select(state))


def select(state: PartitionState) -> list[QuotaVictim]:
    """The containers quota preemption takes now, deepest queues first (ties by path)."""
    config = state.config
    if config is None or not state.max_since:
        return []
    cost = victim_cost(config.preemption.victim_cost)
    at = state.now + config.preemption.grace
    taken: dict[str, Resource] = {}
    chosen: set[str] = set()
    out: list[QuotaVictim] = []
    for path in sorted(state.max_since, key=lambda path: (-path.count("."), path)):
        queue = state.queues.get(path)
        if queue is None or not due(state, queue):
            continue
        over = excess(state, queue, taken.get(path))
        if not over:
            continue
        units = sorted(_units(state, queue, chosen), key=lambda u: _order(state, u, cost, at))
        for unit in _cover(units, over):
            for alloc in unit:
                out.append(QuotaVictim(alloc, path))
                chosen.add(alloc.id)
                for q in alloc.queue.lineage():
                    res.add_into(taken.setdefault(q.path, {}), alloc.resource)
    return out


def _leaves(queue: Queue) -> Iterator[Queue]:
    if queue.is_leaf:
        yield queue
    for child in queue.children:
        yield from _leaves(child)


def _units(state: PartitionState, queue: Queue, chosen: set[str]) -> list[list[Allocation]]:
    """The containers of ``queue``'s subtree that may go, a gang's members as one unit: none placed for a
    required node (a daemon set) nor in a queue with preemption disabled."""
    units: dict[tuple[str, str], list[Allocation]] = {}
    for leaf in _leaves(queue):
        if preemption_disabled(leaf):
            continue
        for app in leaf.apps.values():
            for aid in sorted(app.allocations, key=allocation_number):
                alloc = state.allocations[aid]
                if alloc.opportunistic or alloc.pinned or alloc.preempting or alloc.killed or aid in chosen:
                    continue
                ask = app.asks.get(alloc.ask)
                key = (app.name, alloc.ask) if ask is not None and ask.gang_min > 1 else (app.name, aid)
                units.setdefault(key, []).append(alloc)
    return list(units.values())


def _order(state: PartitionState, unit: list[Allocation], cost: VictimCost, at: float) -> tuple[bool, bool, float, int]:
    """Tasks before application masters, apps that allow preemption before those that opted out, then
    the lower summed victim cost, then the older allocation id."""
    app = state.apps.get(unit[0].app)
    opted_out = app is not None and not app.allow_preemption
    return (
        any(a.am for a in unit),
        opted_out,
        sum(cost(a, at) for a in unit),
        min(allocation_number(a.id) for a in unit),
    )


def _cover(units: list[list[Allocation]], over: Resource) -> list[list[Allocation]]:
    """The units, in order, that bring ``over`` to nothing, each needed: taken while some resource is
    still over and the unit holds it, then the last taken dropped first wherever the rest cover."""
    left = dict(over)
    picked: list[list[Allocation]] = []
    for unit in units:
        if not any(v > 0 for v in left.values()):
            break
        held = res.total(a.resource for a in unit)
        if any(v > 0 and held.get(r, 0) > 0 for r, v in left.items()):
            picked.append(unit)
            res.sub_into(left, held)
    for unit in reversed(list(picked)):
        rest = res.total(a.resource for u in picked if u is not unit for a in u)
        if all(rest.get(r, 0) >= v for r, v in over.items()):
            picked.remove(unit)
    return picked


def reason(state: PartitionState, path: str) -> str:
    queue = state.queues[path]
    return f"quota: queue {path} above its max {human_resource(queue.max)} for {queue.config.quota_preemption_delay:g}s"


def enforce(cache: Writer) -> None:
    """At a tick: every container :func:`select` takes gets its notice (no beneficiary, no reservation;
    a preemption request for an app with a preemption contract) and is marked leaving at the grace
    deadline. Nothing while the partition only observes."""
    state = cache.state
    config = state.config
    if config is None or config.preemption.observe_only:
        return
    chosen = select(state)
    if not chosen:
        return
    deadline = state.now + config.preemption.grace
    requests = Requests(cache, POLICY, observe_only=False)
    for victim in chosen:
        why = reason(state, victim.queue)
        if requests.wants(victim.alloc):
            requests.add(victim.alloc, why)
            continue
        cache.notice(
            victim.alloc,
            for_ask="",
            for_app="",
            for_queue="",
            deadline=deadline,
            reservation="",
            policy=POLICY,
            reason=why,
        )
    cache.commit(p.VictimsMarked(victims=[v.alloc.id for v in chosen], deadline=deadline, policy=POLICY))
    requests.publish(deadline)
