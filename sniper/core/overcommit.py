"""Over-commit from measured utilization (YARN-1011), sans-IO: what a node's reported utilization lets
opportunistic containers take, and what it makes them give back.

A node's *projected* utilization is its last ``node_utilization`` report plus the resources of every
container placed on it since (not measured yet) plus the allocator's proposals in flight. With the
partition's ``overcommit`` block, an opportunistic container that fits no free room may be placed on a
node while, for each resource ``allocate_below`` names, projected utilization plus the container stays
below that fraction of the node's capacity (the resources it does not name must fit the free room as
usual); the container is marked ``overcommit`` and counts on its node like any other, so guaranteed
placement never counts that room, and a node holding room reserved for a preemption's beneficiary
is never over-committed. When a report shows a resource ``preempt_above`` names above that
fraction of capacity, the node's running opportunistic containers are killed at once, newest first
(reason ``overcommit``), until the report, less the usage of the containers killed and not yet gone,
is at or below it; guaranteed containers are never touched.
"""

from __future__ import annotations

import math
from collections.abc import Collection

from sniper.core import node_reservation
from sniper.core import resources as res
from sniper.core.allocation import FreeRoomPlacer
from sniper.core.config import OvercommitConfig
from sniper.core.evictable import running_on
from sniper.core.resources import Resource
from sniper.core.state import Allocation, Ask, Node, PartitionState
from sniper.core.writer import Writer
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p

KILL_REASON = d.KILL_OVERCOMMIT
MAX_REPORTED = 2**53  # a larger reported amount is a corrupt report


def config_of(state: PartitionState) -> OvercommitConfig | None:
    """The partition's ``overcommit`` block (``None``: over-commit is off)."""
    return state.config.overcommit if state.config is not None else None


def projected(node: Node) -> Resource:
    """Last report plus what was placed since (taken to use all it holds) plus proposals in flight."""
    out = dict(node.utilization or {})
    res.add_into(out, node.unmeasured)
    res.add_into(out, node.allocating)
    return out


def allows(config: OvercommitConfig | None, node: Node, request: Resource, held: Resource | None = None) -> bool:
    """Whether an opportunistic ``request`` may go beyond ``node``'s allocated room: the node has
    reported its utilization and holds no room reserved for a beneficiary, every resource
    ``allocate_below`` names stays below its threshold with the request, and every other resource of
    the request fits the free room (``held``: room on the node the state does not show taken, a gang's
    members checked before, counted as in flight)."""
    if config is None or node.utilization is None or node.reservations:
        return False
    below = config.allocate_below
    use = projected(node)
    if held:
        res.add_into(use, held)
    capacity = node.capacity
    for name, amount in request.items():
        fraction = below.get(name)
        if fraction is None:
            if amount > node.free_of(name) - (held.get(name, 0) if held else 0):
                return False
        elif use.get(name, 0) + amount >= fraction * capacity.get(name, 0):
            return False
    return True


def beyond_room(config: OvercommitConfig | None, node: Node, request: Resource) -> bool:
    """An opportunistic placement that only over-commit allows (it does not fit the free room)."""
    return config is not None and not node.can_hold(request)


class OvercommitPlacer(FreeRoomPlacer):
    """Free room first, as :class:`FreeRoomPlacer`; else the first reported node, in the partition's
    node order, whose projected utilization lets the opportunistic ask over-commit it."""

    def __init__(self, config: OvercommitConfig, exclude: Collection[str] = ()) -> None:
        super().__init__(exclude)
        self.config = config

    def place(self, state: PartitionState, ask: Ask) -> Node | None:
        node = super().place(state, ask)
        if node is not None or not ask.opportunistic:
            return node
        reserved = state.node_reservations
        for name in state.node_index.ordered():
            node = state.nodes[name]
            if (
                node.utilization is not None
                and name not in self.exclude
                and ask.accepts(node)
                and (not reserved or not node_reservation.blocks(state, ask, name))
                and allows(self.config, node, ask.resource)
            ):
                return node
        return None


def placer(state: PartitionState, exclude: Collection[str] = ()) -> FreeRoomPlacer:
    """The opportunistic pass's placer: over-commit's when the partition configures it."""
    config = config_of(state)
    return FreeRoomPlacer(exclude) if config is None else OvercommitPlacer(config, exclude)


# ---------------------------------------------------------------------- reports


def report_problem(state: PartitionState, event: f.NodeUtilization) -> str | None:
    """Why a ``node_utilization`` report cannot be taken, or ``None``."""
    node = state.nodes.get(event.node)
    if node is None:
        return f"node_utilization: unknown node {event.node}"
    for name, amount in event.used.items():
        if not math.isfinite(amount):
            return f"node_utilization on {event.node}: {name}={amount} is not a finite amount"
        if amount < 0:
            return f"node_utilization on {event.node}: {name}={amount} is negative"
        if amount > MAX_REPORTED:
            return f"node_utilization on {event.node}: {name}={amount} is over the sanity cap of {MAX_REPORTED}"
    unknown = sorted(name for name in event.used if name not in node.capacity)
    if unknown:
        return f"node_utilization on {event.node}: names resources the node does not have: {', '.join(unknown)}"
    return None


def take_report(cache: Writer, event: f.NodeUtilization) -> str | None:
    """Record the report, then kill what it puts above ``preempt_above``; the refusal's reason, or ``None``."""
    why = report_problem(cache.state, event)
    if why is not None:
        return why
    used = {name: math.ceil(amount) for name, amount in event.used.items()}
    cache.commit(p.NodeUtilizationSet(node=event.node, used=used))
    state = cache.state
    config = config_of(state)
    if config is not None:
        kill(cache, victims_above(state, config, state.nodes[event.node]))
    return None


def _above(used: Resource, thresholds: dict[str, float], capacity: Resource) -> bool:
    return any(used.get(name, 0) > fraction * capacity.get(name, 0) for name, fraction in thresholds.items())


def victims_above(state: PartitionState, config: OvercommitConfig, node: Node) -> list[Allocation]:
    """The node's running opportunistic containers to kill, newest first, until its reported
    utilization less the usage of the containers killed and still there is at or below
    ``preempt_above`` (all of them when that is not enough)."""
    if node.utilization is None:
        return []
    left = dict(node.utilization)
    allocations = state.allocations
    for aid in node.allocations:
        alloc = allocations[aid]
        if alloc.opportunistic and alloc.killed:
            res.sub_into(left, alloc.usage)
    thresholds = config.preempt_above
    chosen: list[Allocation] = []
    for alloc in running_on(state, node):
        if not _above(left, thresholds, node.capacity):
            break
        chosen.append(alloc)
        res.sub_into(left, alloc.usage)
    return chosen


def kill(cache: Writer, victims: list[Allocation]) -> None:
    """Kill ``victims`` at once: marked leaving (one change), a ``kill`` with reason ``overcommit`` each."""
    if not victims:
        return
    cache.commit(p.VictimsMarked(victims=[v.id for v in victims], deadline=cache.state.now, policy=KILL_REASON))
    cache.kill(victims, "overcommit", KILL_REASON)
