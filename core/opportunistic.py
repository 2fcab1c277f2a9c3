"""Opportunistic containers (YARN's ``ExecutionType.OPPORTUNISTIC``, seed 003), sans-IO.

An opportunistic ask gets only room no guaranteed ask can use now: the allocator places it after the
guaranteed pass of a cycle that ran to the end, never on reserved room, never on a node where that
cycle evicts (with over-commit, also on room only measured utilization leaves: :mod:`core.overcommit`).
Its containers count on their node (invariant 1) but in no queue's guarantee, ideal,
pending or ``max`` (as YARN's, which the CapacityScheduler never sees). They are the first to go: a
guaranteed ask that fits a node once the opportunistic containers there are gone has them killed at
once (no grace, reason ``opportunistic``), most recently started first as YARN's NodeManager does,
trimmed to a minimal set, and the room is reserved for that ask in the same commit; every preemption
policy takes them before any guaranteed victim (:func:`evict` is the one way preemption kills them;
over-commit kills them by measured utilization, :mod:`core.overcommit`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from core import node_reservation, overcommit
from core import resources as res
from core.allocation import hold_room
from core.resources import Resource
from core.state import Allocation, Ask, Node, PartitionState, allocation_number, ask_label
from messages import decisions as d
from messages import protocol as p

if TYPE_CHECKING:
    from core.cache import Cache

KILL_REASON = "opportunistic"
POLICY = "opportunistic"


def newest_first(allocations: list[Allocation]) -> list[Allocation]:
    """YARN's order of opportunistic kills: the most recently started first (LIFO)."""
    return sorted(allocations, key=lambda a: (-a.start, -allocation_number(a.id)))


def running_on(state: PartitionState, node: Node, exclude: set[str] | frozenset[str] = frozenset()) -> list[Allocation]:
    """Opportunistic containers on ``node`` not yet evicted (nor in ``exclude``), newest first."""
    allocations = state.allocations
    found = [
        a
        for a in (allocations[x] for x in node.allocations)
        if a.opportunistic and not a.preempting and a.id not in exclude
    ]
    return newest_first(found)


def minimal_evictions(room: Resource, need: Resource, candidates: list[Allocation]) -> list[Allocation] | None:
    """The opportunistic containers to kill so that ``need`` fits ``room`` plus theirs: ``candidates``
    in order until it fits, then trimmed (oldest first) of every one the room does not need. ``None``
    when even all of them are not enough, ``[]`` when it fits already."""
    if res.fits(need, room):
        return []
    got = dict(room)
    chosen: list[Allocation] = []
    for alloc in candidates:
        chosen.append(alloc)
        res.add_into(got, alloc.resource)
        if res.fits(need, got):
            break
    else:
        return None
    for alloc in reversed(list(chosen)):
        if len(chosen) > 1 and res.fits(need, res.sub(got, alloc.resource)):
            chosen.remove(alloc)
            res.sub_into(got, alloc.resource)
    return chosen


def first_victims(state: PartitionState, chosen: list[Allocation]) -> list[Allocation]:
    """A policy's victim list with opportunistic containers first: the partition's running ones, newest
    first, until they cover what ``chosen`` frees, then ``chosen`` (in its order) for the rest."""
    need = res.total(a.resource for a in chosen)
    running = newest_first([a for a in state.allocations.values() if a.opportunistic and not a.preempting])
    out: list[Allocation] = []
    got: Resource = {}
    for alloc in running + [a for a in chosen if not a.opportunistic]:
        if res.fits(need, got):
            break
        out.append(alloc)
        res.add_into(got, alloc.resource)
    return out


# ---------------------------------------------------------------------- the allocator's side


@dataclasses.dataclass(slots=True)
class OpportunisticPlan:
    evictions: list[tuple[Ask, Node, list[Allocation]]] = dataclasses.field(default_factory=list)
    placed: list[tuple[Ask, Node]] = dataclasses.field(default_factory=list)


def plan(state: PartitionState, starving: list[Ask], budget: int) -> OpportunisticPlan:
    """After a cycle's guaranteed pass: evictions for ``starving`` guaranteed asks (those the pass could
    not place), then opportunistic placements on the room left, at most ``budget`` containers.

    Every placement and eviction holds its room in the allocator's in-flight counters (``hold_room``).
    """
    out = OpportunisticPlan()
    taken: set[str] = set()
    freed: dict[str, Resource] = {}  # node -> opportunistic room this plan already evicts there
    hosts = [n for n in state.nodes.values() if n.schedulable and res.any_positive(n.opportunistic)]
    for ask in starving if hosts else ():
        # One container at a time, as many as opportunistic room can make (the hold lowers pending).
        while not ask.opportunistic and ask.pending > 0 and state.headroom_allows(ask.app.queue, ask.resource):
            best: tuple[tuple[int, int, str], Node, list[Allocation]] | None = None
            for node in hosts:
                if not ask.accepts(node) or node_reservation.blocks(state, ask, node.name):
                    continue
                room = res.add(state.room_once_victims_leave(node), freed.get(node.name, {}))
                chosen = minimal_evictions(room, ask.resource, running_on(state, node, taken))
                if not chosen:
                    continue  # none needed is the guaranteed pass's room; None: not enough here
                key = (len(chosen), sum(a.resource.get("memory", 0) for a in chosen), node.name)
                if best is None or key < best[0]:
                    best = (key, node, chosen)
            if best is None:
                break
            _, host, chosen = best
            for alloc in chosen:
                taken.add(alloc.id)
                res.add_into(freed.setdefault(host.name, {}), alloc.resource)
            hold_room(state, ask, host, 1)
            out.evictions.append((ask, host, chosen))
    placer = overcommit.placer(state, exclude=freed.keys())
    for ask in list(state.opportunistic_asks.values()):
        while budget > 0 and ask.pending > 0:
            spot = placer.place(state, ask)
            if spot is None:
                break
            hold_room(state, ask, spot, 1)
            out.placed.append((ask, spot))
            budget -= 1
    return out


# ---------------------------------------------------------------------- the cache's side


def evict(cache: Cache, victims: list[Allocation]) -> None:
    """Kill the opportunistic ones among ``victims`` (already marked leaving by the caller's commit) at
    once: no grace, a ``kill`` with reason ``opportunistic`` each."""
    for v in victims:
        if v.opportunistic and not v.killed:
            v.killed = True
            cache.decide(d.Kill, allocation=v.id, app=v.app, queue=v.queue.path, node=v.node, reason=KILL_REASON)


def check_eviction(cache: Cache, ev: p.Victimized) -> str | None:
    """Why this eviction cannot be committed now, or ``None``."""
    state = cache.state
    ask = state.ask((ev.app, ev.ask))
    if ask is None:
        return "ask is gone"
    if ask.opportunistic:
        return "an opportunistic ask never evicts"
    if ask.count - ask.allocated - ask.reserved <= 0:
        return "ask is already fully allocated"
    node = state.nodes.get(ev.node)
    if node is None or not node.schedulable:
        return "node is gone or not schedulable"
    if not ask.accepts(node):
        return f"node {ev.node} does not match the ask's required node or node selector"
    reserved_for = node_reservation.refusal(state, ask, ev.node)
    if reserved_for is not None:
        return reserved_for
    if not state.headroom_allows(ask.app.queue, ask.resource):
        return "queue max would be exceeded"
    victims: list[Allocation] = []
    for vid in ev.victims:
        v = state.allocations.get(vid)
        if v is None or v.node != ev.node or not v.opportunistic or v.preempting:
            return f"{vid} is not a running opportunistic container on {ev.node}"
        victims.append(v)
    if len({v.id for v in victims}) != len(victims) or not victims:
        return "the eviction set is empty or names a container twice"
    room = res.add(state.room_once_victims_leave(node), res.total(v.resource for v in victims))
    if not res.fits(ask.resource, room):
        return "the evictions do not free enough room"
    if len(victims) > 1 and any(res.fits(ask.resource, res.sub(room, v.resource)) for v in victims):
        return "the eviction set is not minimal"
    return None


def commit_eviction(cache: Cache, ev: p.Victimized) -> None:
    """One committed record as a preemption's (victims, beneficiary, node, reservation), with no grace:
    ``preempt`` then ``kill`` for each victim, the room reserved for the guaranteed ask."""
    state = cache.state
    config = state.config
    assert config is not None
    app = state.apps[ev.app]
    ask = app.asks[ev.ask]
    victims = [state.allocations[v] for v in ev.victims]
    now = state.now
    rid = f"resv-{cache.next_id('reservation')}"
    for v in victims:
        cache.notice(
            v,
            for_ask=ev.ask,
            for_app=ev.app,
            for_queue=app.queue.path,
            deadline=now,
            reservation=rid,
            policy=POLICY,
            reason=f"{KILL_REASON}: {ev.reason}",
            for_resource=ask.resource,
        )
    cache.commit(
        p.ReservationSet(
            reservation=rid,
            app=ev.app,
            ask=ev.ask,
            node=ev.node,
            resource=ask.resource,
            victims=[v.id for v in victims],
            deadline=now,
            expires=now + config.preemption.reservation_timeout,
            policy=POLICY,
        )
    )
    evict(cache, victims)
    cache.fulfil_reservations(ev.node)


def as_victimized(evictions: list[tuple[Ask, Node, list[Allocation]]]) -> list[p.Victimized]:
    return [
        p.Victimized(
            app=ask.key[0],
            ask=ask.key[1],
            node=node.name,
            victims=[a.id for a in chosen],
            reason=f"{ask_label(ask.key)} fits {node.name} once its opportunistic containers are gone",
        )
        for ask, node, chosen in evictions
    ]
