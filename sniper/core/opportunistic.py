"""Opportunistic containers (YARN's ``ExecutionType.OPPORTUNISTIC``), sans-IO.

An opportunistic ask gets only room no guaranteed ask can use now: the allocator places it after the
guaranteed pass of a cycle that ran to the end, never on reserved room, never on a node where that
cycle evicts (with over-commit, also on room only measured utilization leaves: :mod:`sniper.core.overcommit`).
Its containers count on their node (invariant 1) but in no queue's guarantee, ideal,
pending or ``max`` (as YARN's, which the CapacityScheduler never sees). They are the first to go: a
guaranteed ask that fits a node once the opportunistic containers there are gone has them killed at
once (no grace, reason ``opportunistic``), most recently started first as YARN's NodeManager does,
trimmed to a minimal set, and the room is reserved for that ask in the same commit; a gang's missing
members get their room (free or evicted) in one proposal, or none is evicted for them. Every preemption
policy takes them before any guaranteed victim (:func:`sniper.core.preemption_reservation.evict` is the one
way preemption kills them; over-commit kills them by measured utilization, :mod:`sniper.core.overcommit`).
An ask with ``preemption_policy: never`` evicts nothing; apps' disruption budgets and opt-outs do not
cover opportunistic containers (as Kubernetes' node-pressure eviction passes over budgets).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sniper.core import constraints, gang, node_reservation, overcommit, topology
from sniper.core import resources as res
from sniper.core.allocation import FreeRoomPlacer
from sniper.core.evictable import newest_first, running_on
from sniper.core.placing import hold_room
from sniper.core.preemption.rules import may_preempt
from sniper.core.preemption_reservation import preempt
from sniper.core.resources import Resource
from sniper.core.state import Allocation, Ask, Node, PartitionState, ask_label
from sniper.core.writer import Writer
from sniper.messages import decisions as d
from sniper.messages import protocol as p

KILL_REASON = d.KILL_OPPORTUNISTIC
POLICY = "opportunistic"


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


class EvictingPlacer:
    """Places a starving guaranteed ask's container where the fewest opportunistic containers must go
    (ties: the least work lost, their running time summed, then the least memory, then the node's name),
    recording each eviction. A gang's members are one unit (:class:`sniper.core.gang.UnitPlacer`): each takes
    free room when some node has it, else evictions, and a unit that does not complete leaves no
    eviction and no placement behind."""

    def __init__(self, hosts: list[Node]) -> None:
        self.hosts = hosts
        self.evictions: list[tuple[Ask, Node, list[Allocation]]] = []
        self.on_free_room: list[tuple[Ask, Node]] = []  # gang members placed beside their evictions
        self.taken: set[str] = set()
        self.freed: dict[str, Resource] = {}  # node -> opportunistic room the plan already evicts there
        self._mark = (0, 0)
        self._gang = False
        # Per ask shape, the hosts whose room plus every opportunistic container there could hold it,
        # judged once per plan: the plan's holds only shrink a node's room (a failed gang gives back what
        # it held), so a host that cannot hold a shape at first never can in the same plan, and an ask no
        # eviction can help costs one lookup, however many opportunistic containers run.
        self._hosts_for: dict[tuple[tuple[str, int], ...], list[Node]] = {}

    def open_unit(self, state: PartitionState, ask: Ask, members: int) -> bool:
        self._mark = (len(self.evictions), len(self.on_free_room))
        self._gang = members > 1
        return True

    def close_unit(self, keep: bool) -> bool:
        evicted, placed = self._mark
        if not keep:
            for _, host, chosen in self.evictions[evicted:]:
                for alloc in chosen:
                    self.taken.discard(alloc.id)
                    res.sub_into(self.freed[host.name], alloc.resource)
                if not res.any_positive(self.freed[host.name]):
                    del self.freed[host.name]  # the plan evicts nothing there: opportunistic asks may go
            del self.evictions[evicted:]
            del self.on_free_room[placed:]
        self._gang = False
        return keep

    def _hosts_of(self, state: PartitionState, ask: Ask) -> list[Node]:
        shape = tuple(sorted(ask.resource.items()))
        hosts = self._hosts_for.get(shape)
        if hosts is None:
            hosts = self._hosts_for[shape] = [
                n
                for n in self.hosts
                if res.fits(ask.resource, res.add(state.room_once_victims_leave(n), n.opportunistic))
            ]
        return hosts

    def place(self, state: PartitionState, ask: Ask) -> Node | None:
        if self._gang:
            spot = FreeRoomPlacer().place(state, ask)
            if spot is not None:
                self.on_free_room.append((ask, spot))
                return spot
        best: tuple[tuple[int, float, int, str], Node, list[Allocation]] | None = None
        for node in self._hosts_of(state, ask):
            if not ask.accepts(node) or node_reservation.blocks(state, ask, node.name):
                continue
            room = state.room_once_victims_leave(node)
            if not res.fits(ask.resource, res.add(room, node.opportunistic)):
                continue  # not even every opportunistic container here is enough: none is looked at
            res.add_into(room, self.freed.get(node.name, {}))
            chosen = minimal_evictions(room, ask.resource, running_on(state, node, self.taken))
            if not chosen:
                continue  # none needed is the guaranteed pass's room; None: not enough here
            if ask.constraints and not constraints.allows(state, ask, node, chosen):
                continue
            lost = sum(state.now - a.start for a in chosen)  # the work the kills throw away (killed at once)
            key = (len(chosen), lost, sum(a.resource.get("memory", 0) for a in chosen), node.name)
            if best is None or key < best[0]:
                best = (key, node, chosen)
        if best is None:
            return None
        _, host, chosen = best
        for alloc in chosen:
            self.taken.add(alloc.id)
            res.add_into(self.freed.setdefault(host.name, {}), alloc.resource)
        self.evictions.append((ask, host, chosen))
        return host


def plan(state: PartitionState, starving: list[Ask], budget: int) -> OpportunisticPlan:
    """After a cycle's guaranteed pass: evictions for ``starving`` guaranteed asks (those the pass could
    not place), then opportunistic placements on the room left, at most ``budget`` containers.

    A gang still missing members gets evictions for all of them in this plan, or none (its members
    that free room holds are placed there, in the same proposal). Every placement and eviction holds
    its room in the allocator's in-flight counters (``hold_room``).
    """
    out = OpportunisticPlan()
    hosts = [n for n in state.nodes.values() if n.schedulable and res.any_positive(n.opportunistic)]
    evicting = EvictingPlacer(hosts)
    limits = gang.UnitLimits(state)
    for ask in starving if hosts else ():
        if ask.opportunistic or not may_preempt(ask):
            continue  # an ask that never preempts evicts nothing, a gang's members neither
        members = gang.members_missing(ask)
        if members > 1 or ask.topology is not None:  # one unit, in the domains its topology allows
            place_unit = gang.place_unit if ask.topology is None else topology.place_unit
            if place_unit(state, ask, evicting, max(1, members), limits=limits.view) is not None:
                limits.held(ask, max(1, members))
            continue
        # One container at a time, as many as opportunistic room can make (the hold lowers pending).
        while ask.pending > 0 and state.headroom_allows(ask.app.queue, ask.resource):
            host = evicting.place(state, ask)
            if host is None:
                break
            hold_room(state, ask, host, 1)
            limits.held(ask)
    out.evictions = evicting.evictions
    out.placed = list(evicting.on_free_room)
    placer = overcommit.placer(state, exclude=evicting.freed.keys())
    # Shapes no node took in this pass: room only shrinks as it goes, so an ask of the same shape (and no
    # rule of its own) would find none either; the pass costs one search per shape, not per ask.
    unplaceable: set[tuple[tuple[str, int], ...]] = set()
    for ask in list(state.opportunistic_asks.values()):
        shape = _shape(ask)
        if shape is not None and shape in unplaceable:
            continue
        while budget > 0 and ask.pending > 0:
            spot = placer.place(state, ask)
            if spot is None:
                if shape is not None:
                    unplaceable.add(shape)
                break
            hold_room(state, ask, spot, 1)
            out.placed.append((ask, spot))
            budget -= 1
    return out


def _shape(ask: Ask) -> tuple[tuple[str, int], ...] | None:
    """What alone decides where ``ask`` may go, when that is its resource (``None``: a required node, a
    node selector, constraints or a node reservation of its own make it an ask apart)."""
    if ask.required_node is not None or ask.node_selector or ask.constraints or ask.node_reserved is not None:
        return None
    return tuple(ask.resource.items())  # unsorted: cheap, and two orders of one shape are only searched twice


# ---------------------------------------------------------------------- the cache's side


def check_eviction(
    cache: Writer, ev: p.Victimized, earlier: Sequence[p.Victimized] = (), held: gang.Held | None = None
) -> str | None:
    """Why this eviction cannot be committed now, or ``None``. ``earlier``: the evictions checked before
    it for other members of the same gang (held, not yet committed): their victims count as leaving;
    ``held``: every member of that gang checked before it, counted as taken (the state is only read)."""
    state = cache.state
    ask = state.ask((ev.app, ev.ask))
    if ask is None:
        return "ask is gone"
    if ask.opportunistic:
        return "an opportunistic ask never evicts"
    if not may_preempt(ask):
        return "the ask never preempts (preemption_policy never)"
    if ask.count - ask.allocated - ask.reserved - ask.allocating - (0 if held is None else held.count) <= 0:
        return "ask is already fully allocated"
    node = state.nodes.get(ev.node)
    if node is None or not node.schedulable:
        return "node is gone or not schedulable"
    if not ask.accepts(node):
        return f"node {ev.node} does not match the ask's required node or node selector"
    reserved_for = node_reservation.refusal(state, ask, ev.node)
    if reserved_for is not None:
        return reserved_for
    if not state.headroom_allows(ask.app.queue, ask.resource, None if held is None else held.with_queues(None)):
        return "queue max would be exceeded"
    victims: list[Allocation] = []
    for vid in ev.victims:
        v = state.allocations.get(vid)
        if v is None or v.node != ev.node or not v.opportunistic or v.preempting:
            return f"{vid} is not a running opportunistic container on {ev.node}"
        victims.append(v)
    named = [vid for e in earlier for vid in e.victims]
    if len({v.id for v in victims} - set(named)) != len(victims) or not victims:
        return "the eviction set is empty or names a container twice"
    room = state.room_once_victims_leave(node)
    if held is not None:
        res.sub_into(room, held.on(node))
    for e in earlier:
        if e.node == ev.node:
            res.add_into(room, res.total(state.allocations[vid].resource for vid in e.victims))
    res.add_into(room, res.total(v.resource for v in victims))
    if not res.fits(ask.resource, room):
        return "the evictions do not free enough room"
    if len(victims) > 1 and any(res.fits(ask.resource, res.sub(room, v.resource)) for v in victims):
        return "the eviction set is not minimal"
    if ask.constraints:
        return constraints.refusal(state, ask, node, victims, arriving=() if held is None else held.placed)
    return None


def commit_eviction(cache: Writer, ev: p.Victimized) -> None:
    """One committed record as a preemption's (victims, beneficiary, node, reservation), with no grace:
    ``preempt`` then ``kill`` for each victim, the room reserved for the guaranteed ask
    (:func:`sniper.core.preemption_reservation.preempt`)."""
    state = cache.state
    ask = state.apps[ev.app].asks[ev.ask]
    victims = [state.allocations[v] for v in ev.victims]
    reason = f"{KILL_REASON}: {ev.reason}"
    preempt(cache, ask, ev.node, victims, deadline=state.now, policy=POLICY, notice=lambda _, __: {"reason": reason})


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
