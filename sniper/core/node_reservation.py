"""Node reservations (YARN's reserved containers), sans-IO: who reserves, what it blocks, how it ends.

A guaranteed ask (not a gang still missing members, nor one with a ``topology``) that no node's free
room holds, overtaken in the same allocation cycle by a smaller ask that did get a node it could have
used, reserves the node where it would fit soonest (the most free room
on the ask's dominant resource, ties by name) among the nodes whose capacity holds it. While reserved,
nothing but that ask is placed on the node (normal allocation, opportunistic placement and preemption
placement alike); the reservation holds no room and names no victim, so it is not a preemption
reservation (``resv-N``, ``reservation_ended``): its ids are ``nresv-N`` and its decisions
``node_reserved`` / ``node_unreserved``. Invariants: at most one node reservation per node and one per
app at a time (YARN bounds an app's reservations by what it still needs; one keeps a borrowing app of
many tasks from reserving every node); a queue reserves only within every ``max`` counting its node
reservations; every node reservation ends with one reason of :data:`REASONS`. Preemption policies
cancel the reservations of queues above their ideal assignment when a queue below its ideal has a
pending ask the node could hold (:func:`to_dereserve`), before they preempt anything: seed
004's cheapest action; a de-reserved ask does not reserve again for ``reservation.timeout``
(:func:`hold_off`), so the two do not loop.
"""

from __future__ import annotations

import typing
from collections.abc import Collection, Iterable, Mapping

from sniper.core import constraints, gang
from sniper.core import resources as res
from sniper.core.resources import Resource
from sniper.core.state import Ask, AskKey, Node, NodeReservation, PartitionState, ask_label
from sniper.core.writer import Writer
from sniper.messages import decisions as d
from sniper.messages import protocol as p

REASONS: tuple[d.NodeUnreserveReason, ...] = typing.get_args(d.NodeUnreserveReason)
ID_PREFIX = "nresv-"


# ---------------------------------------------------------------------- shared queries


def blocks(state: PartitionState, ask: Ask, node_name: str) -> bool:
    """Whether ``node_name`` is reserved for another ask than ``ask``."""
    r = state.node_reservations.get(node_name)
    return r is not None and r.key != ask.key


def refusal(state: PartitionState, ask: Ask, node_name: str) -> str | None:
    """Why ``ask`` may not be placed on ``node_name`` because of a node reservation (``None``: it may)."""
    r = state.node_reservations.get(node_name)
    if r is None or r.key == ask.key:
        return None
    return f"node {node_name} is reserved for {ask_label(r.key)} ({r.id})"


def _dominant(request: Resource, capacity: Resource) -> str:
    shares = {k: v / capacity[k] for k, v in request.items() if v > 0 and capacity.get(k, 0) > 0}
    if not shares:
        return min(request) if request else ""
    return max(sorted(shares), key=lambda k: shares[k])


def best_node(state: PartitionState, ask: Ask, taken: Collection[str] = ()) -> Node | None:
    """The node where ``ask`` would fit soonest: whose capacity holds it, not reserved (nor in ``taken``),
    with the most free room on the ask's dominant resource; ties by name."""
    dom = _dominant(ask.resource, state.capacity)
    best: Node | None = None
    best_free = 0
    for name in sorted(state.nodes):
        node = state.nodes[name]
        if (
            not node.schedulable
            or name in state.node_reservations
            or name in taken
            or not ask.accepts(node)
            or not res.fits(ask.resource, node.capacity)
            or not constraints.allows(state, ask, node)
        ):
            continue
        free = node.free_of(dom)
        if best is None or free > best_free:
            best, best_free = node, free
    return best


def within_max(state: PartitionState, ask: Ask) -> bool:
    """Whether one more container of ``ask`` stays within every ``max`` with the queues' node
    reservations counted as usage (YARN counts reserved resources in a queue's used)."""
    extra = {q.path: q.node_reserved for q in ask.app.queue.lineage() if q.node_reserved}
    return state.headroom_allows(ask.app.queue, ask.resource, extra)


# ---------------------------------------------------------------------- the allocator's side


def choose(
    state: PartitionState,
    failed: Iterable[Ask],
    placed: Iterable[tuple[Ask, Node]],
    inflight: Collection[AskKey],
    inflight_nodes: Collection[str],
) -> list[tuple[Ask, Node]]:
    """Node reservations to propose after a cycle: each failed ask that no free room holds and that a
    smaller ask of another app overtook on a node it accepts reserves its :func:`best_node`."""
    config = state.config
    if config is None or not config.reservation.enabled:
        return []
    failing = sorted(failed, key=lambda a: (a.sort_key, a.key))
    if not failing:
        return []
    # What the cycle placed, by app and shape (a few shapes, however many containers), with the nodes.
    shapes: dict[tuple[str, tuple[tuple[str, int], ...]], tuple[Resource, list[Node]]] = {}
    for other, where in placed:
        shape = shapes.setdefault((other.app.name, tuple(sorted(other.resource.items()))), (other.resource, []))
        shape[1].append(where)
    out: list[tuple[Ask, Node]] = []
    taken = set(inflight_nodes)
    apps = reserving_apps(state) | {key[0] for key in inflight}
    for ask in failing:
        if (
            ask.key[0] in apps
            or ask.opportunistic
            or ask.reserve_after > state.now
            or ask.key in inflight
            or ask.pending <= 0
            or gang.unit_size(ask) > 1
            or ask.topology is not None
            or not _overtaken(ask, shapes)
            or not within_max(state, ask)
            or _fits_somewhere(state, ask)
        ):
            continue
        node = best_node(state, ask, taken)
        if node is not None:
            taken.add(node.name)
            apps.add(ask.key[0])
            out.append((ask, node))
    return out


def reserving_apps(state: PartitionState) -> set[str]:
    """Apps holding a node reservation (one each at a time)."""
    return {r.app for r in state.node_reservations.values()}


def _overtaken(ask: Ask, shapes: Mapping[tuple[str, tuple[tuple[str, int], ...]], tuple[Resource, list[Node]]]) -> bool:
    """Whether another app's smaller container was placed this cycle on a node ``ask`` accepts."""
    for (app, _), (resource, nodes) in shapes.items():
        if app == ask.app.name or resource == ask.resource or not res.fits(resource, ask.resource):
            continue
        if (not ask.node_selector and ask.required_node is None) or any(ask.accepts(n) for n in nodes):
            return True
    return False


def _fits_somewhere(state: PartitionState, ask: Ask) -> bool:
    for name in state.node_index.candidates(ask.resource):
        node = state.nodes[name]
        if (
            node.can_hold(ask.resource)
            and ask.accepts(node)
            and not blocks(state, ask, name)
            and constraints.allows(state, ask, node)
        ):
            return True
    return False


# ---------------------------------------------------------------------- the cache's side


def commit_reservations(cache: Writer, proposal: p.AllocationProposal) -> tuple[int, dict[str, str]]:
    """Validate and commit the proposal's node reservations; returns (accepted, rejected)."""
    accepted = 0
    rejected: dict[str, str] = {}
    for nr in proposal.reservations:
        why = _check(cache.state, nr)
        if why is not None:
            rejected[f"{nr.app}/{nr.ask}@{nr.node}#reserve"] = why
            continue
        reserve(cache, nr.app, nr.ask, nr.node)
        accepted += 1
    return accepted, rejected


def _check(state: PartitionState, nr: p.NodeReserve) -> str | None:
    config = state.config
    if config is None or not config.reservation.enabled:
        return "node reservations are disabled"
    ask = state.ask((nr.app, nr.ask))
    if ask is None:
        return "ask is gone"
    if nr.ask_seq and ask.seq != nr.ask_seq:
        return "ask was withdrawn and asked again since (another ask of the same name)"
    if ask.opportunistic:
        return "an opportunistic ask does not reserve"
    if nr.app in reserving_apps(state):
        return f"app {nr.app} already holds a node reservation"
    if ask.reserve_after > state.now:
        return f"ask was de-reserved: no node reservation before {ask.reserve_after}"
    if ask.count - ask.allocated - ask.reserved <= 0:
        return "ask wants no more containers"
    node = state.nodes.get(nr.node)
    if node is None or not node.schedulable:
        return "node is gone or not schedulable"
    if nr.node in state.node_reservations:
        return f"node {nr.node} is already reserved"
    if not ask.accepts(node) or not res.fits(ask.resource, node.capacity):
        return f"ask can never run on node {nr.node}"
    broken = constraints.refusal(state, ask, node) if ask.constraints else None
    if broken is not None:
        return broken
    if not within_max(state, ask):
        return "queue max would be exceeded with its node reservations"
    return None


def reserve(cache: Writer, app: str, ask_name: str, node: str) -> None:
    state = cache.state
    config = state.config
    assert config is not None
    ask = state.apps[app].asks[ask_name]
    rid = f"{ID_PREFIX}{cache.next_id('node_reservation')}"
    expires = state.now + config.reservation.timeout
    cache.commit(
        p.NodeReservationSet(reservation=rid, app=app, ask=ask_name, node=node, resource=ask.resource, expires=expires)
    )
    cache.decide(
        d.NodeReserved,
        reservation=rid,
        app=app,
        ask=ask_name,
        queue=ask.app.queue.path,
        node=node,
        resource=ask.resource,
        expires=expires,
    )


def end(cache: Writer, r: NodeReservation, reason: d.NodeUnreserveReason, policy: str = "") -> None:
    """End ``r`` with ``reason``; a de-reserved ask may not reserve again for ``reservation.timeout``."""
    state = cache.state
    cache.decide(
        d.NodeUnreserved,
        reservation=r.id,
        app=r.app,
        ask=r.ask,
        queue=state.apps[r.app].queue.path,
        node=r.node,
        reason=reason,
        policy=policy,
    )
    cache.commit(p.NodeReservationGone(node=r.node, no_reserve_before=hold_off(state, reason, state.now)))


def hold_off(state: PartitionState, reason: str, when: float) -> float:
    """Until when an ask whose node reservation ended at ``when`` for ``reason`` may not reserve again:
    after a de-reservation, ``reservation.timeout`` (its queue is above its ideal: reserving again at
    once would only be cancelled again); otherwise not at all."""
    if reason != d.DERESERVED or state.config is None:
        return 0.0
    return when + state.config.reservation.timeout


def expire(cache: Writer) -> None:
    now = cache.state.now
    for name in sorted(cache.state.node_reservations):
        r = cache.state.node_reservations[name]
        if r.expires <= now:
            end(cache, r, "timeout")


def end_for_ask(cache: Writer, key: AskKey, reason: d.NodeUnreserveReason) -> None:
    ask = cache.state.ask(key)
    if ask is not None and ask.node_reserved is not None:
        end(cache, cache.state.node_reservations[ask.node_reserved], reason)


def end_for_app(cache: Writer, app: str, reason: d.NodeUnreserveReason) -> None:
    for name in sorted(cache.state.node_reservations):
        r = cache.state.node_reservations[name]
        if r.app == app:
            end(cache, r, reason)


def node_changed(cache: Writer, name: str, capacity: Resource, schedulable: bool) -> None:
    """A node left, became unschedulable or shrank below its reserved ask: the reservation ends."""
    r = cache.state.node_reservations.get(name)
    if r is not None and (not schedulable or not res.fits(r.resource, capacity)):
        end(cache, r, "node_removed")


def on_allocate(cache: Writer, ask: Ask, node: str, fulfils: bool) -> None:
    """Before a container of ``ask`` is committed on ``node`` (``fulfils``: for a preemption reservation):
    its node reservation ends (``placed``) when the container lands there or is the last one it wants."""
    if ask.node_reserved is None:
        return
    wanted_after = ask.count - ask.allocated - ask.reserved - (0 if fulfils else 1)
    if ask.node_reserved == node or wanted_after <= 0:
        end(cache, cache.state.node_reservations[ask.node_reserved], "placed")


def dereserve(cache: Writer, nodes: Iterable[str], policy: str) -> int:
    """The policy's de-reservations (re-checked: only a reservation still there is cancelled)."""
    count = 0
    for name in nodes:
        r = cache.state.node_reservations.get(name)
        if r is not None:
            end(cache, r, d.DERESERVED, policy)
            count += 1
    return count


def state_changes(state: PartitionState) -> list[p.ChangeMsg]:
    """The node reservations as changes (for replica resets and snapshots), after asks and nodes."""
    return [
        p.NodeReservationSet(
            reservation=r.id, app=r.app, ask=r.ask, node=r.node, resource=r.resource, expires=r.expires
        )
        for r in state.node_reservations.values()
    ]


# ---------------------------------------------------------------------- the policies' side


def to_dereserve(state: PartitionState, usage: Mapping[str, Resource], ideal: Mapping[str, Resource]) -> list[str]:
    """Nodes whose reservation a policy cancels before preempting: held by a leaf above its ideal (DRF),
    while a leaf below its ideal has a pending ask the node accepts and could hold. As YARN's policy
    drops an over-served queue's reserved containers first, whether or not the room is free yet: a
    reservation would otherwise keep preemption off the node for the beneficiary."""
    if not state.node_reservations or not state.capacity:
        return []
    capacity = state.capacity
    below = [
        q
        for path, q in sorted(state.queues.items())
        if q.is_leaf
        and path in ideal
        and res.any_positive(q.pending)
        and res.drf_compare(usage.get(path, {}), ideal[path], capacity) < 0
    ]
    if not below:
        return []
    out: list[str] = []
    for name in sorted(state.node_reservations):
        r = state.node_reservations[name]
        holder = state.apps[r.app].queue
        if holder.path not in ideal or res.drf_compare(usage.get(holder.path, {}), ideal[holder.path], capacity) <= 0:
            continue  # a queue at or below its ideal keeps its reservation
        node = state.nodes[name]
        if any(
            res.fits(ask.resource, node.capacity) and ask.accepts(node)
            for q in below
            if q.path != holder.path
            for app in q.apps.values()
            for ask in app.pending_asks
        ):
            out.append(name)
    return out
