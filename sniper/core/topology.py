"""Topology-aware placement: the domains an ask with a ``topology`` places its containers in.

A domain of a level is the set of schedulable nodes sharing that level's label value (the partition's
``topology.levels``); a node lacking the label is in no domain of that level. Each try places the unit
through :func:`sniper.core.gang.place_unit` with the ask narrowed to one domain (or a chosen set of
domains), so a failed try leaves no trace. Under preemption, a placer that can weigh a unit
(:class:`WeighingPlacer`) tries each domain that could hold it without taking anything, and the unit
goes to the domain whose victims cost least (ties in the node sort policy's order). Invariant: every
container of a ``required`` ask is placed in the domain of its level its other live or in-flight
containers are in, or, holding none, in one domain with room for the whole unit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

from sniper.core import gang
from sniper.core import resources as res
from sniper.core.limits import Limits
from sniper.core.placing import Placer
from sniper.core.preemption.rules import last_resort
from sniper.core.state import Ask, Node, PartitionState

UnitCost = tuple[bool, float]
"""What a unit's victims cost: whether any is of last resort, then their total cost (the lower the better)."""


@runtime_checkable
class WeighingPlacer(Protocol):
    """A unit placer that can weigh a unit without taking it (preemption's victim placer)."""

    def weigh(self, place: Callable[[], object]) -> UnitCost | None:
        """Run ``place`` (one unit placed through this placer) as a trial that takes nothing: what its
        unit's victims would cost, or ``None`` when no unit would be kept."""
        ...


def domains(state: PartitionState, level: str) -> dict[str, list[Node]]:
    """The domains of ``level``: label value -> its schedulable nodes."""
    out: dict[str, list[Node]] = {}
    for node in state.nodes.values():
        value = node.labels.get(level)
        if value is not None and node.schedulable:
            out.setdefault(value, []).append(node)
    return out


def _whole(resource: res.Resource, room: res.Resource) -> int:
    """How many containers of ``resource`` fit in ``room``."""
    return min((room.get(k, 0) // v for k, v in resource.items() if v > 0), default=0)


def _takes(ask: Ask, nodes: list[Node], free: bool) -> int:
    """Containers of ``ask`` the ``nodes`` can take: in their free room, or (``free`` false: what runs
    there may leave) in their capacity."""
    return sum(_whole(ask.resource, node.free() if free else node.capacity) for node in nodes)


def _without_last_resort(state: PartitionState, ask: Ask, nodes: list[Node]) -> int:
    """Containers of ``ask`` the ``nodes`` can take once every victim but those of last resort
    (application masters, apps that opted out of preemption) left."""
    total = 0
    for node in nodes:
        room = dict(node.capacity)
        for alloc_id in node.allocations:
            alloc = state.allocations.get(alloc_id)
            if alloc is not None and last_resort(alloc, state.apps.get(alloc.app)):
                res.sub_into(room, alloc.resource)
        total += _whole(ask.resource, room)
    return total


def ordered(state: PartitionState, groups: dict[str, list[Node]]) -> list[str]:
    """Domain names in the node sort policy's order: ``binpacking``, the fullest (least free memory
    over its nodes) first; ``fair``, the emptiest first; ties by name."""
    sign = -1 if state.node_index.policy == "fair" else 1
    free = {name: sum(node.free_of(res.MEMORY) for node in nodes) for name, nodes in groups.items()}
    return sorted(groups, key=lambda name: (sign * free[name], name))


def pinned(state: PartitionState, ask: Ask, level: str) -> str | None:
    """The domain of ``level`` the ask's live containers are in, else the one its preemption
    reservations are in, else the one its members in flight went to, else ``None``."""
    held = [state.allocations.get(alloc_id) for alloc_id in ask.app.allocations]
    nodes = [alloc.node for alloc in held if alloc is not None and alloc.ask == ask.name]
    if ask.reserved:
        app = ask.app.name
        nodes += [r.node for r in state.reservations.values() if r.app == app and r.ask == ask.name]
    for name in nodes:
        node = state.nodes.get(name)
        value = None if node is None else node.labels.get(level)
        if value is not None:
            return value
    return ask.domain if ask.allocating or ask.reserved else None


@contextmanager
def _narrowed(ask: Ask, level: str, values: Collection[str]) -> Iterator[None]:
    """While open, ``ask`` accepts only nodes in the domains ``values`` of ``level`` (and its own selector)."""
    selector = ask.node_selector
    narrowed = frozenset(values)
    ask.node_selector = {**selector, level: narrowed & selector[level] if level in selector else narrowed}
    try:
        yield
    finally:
        ask.node_selector = selector


def place_beside(state: PartitionState, ask: Ask, placer: Placer) -> Node | None:
    """A node for one more container of ``ask`` (a reserved beneficiary competing for free room) in
    the domain its other containers are pinned to: ``required``, there or nowhere; ``preferred``,
    there first. Nothing is held."""
    topology = ask.topology
    pin = None if topology is None else pinned(state, ask, topology.level)
    if topology is None or pin is None:
        return placer.place(state, ask)
    with _narrowed(ask, topology.level, (pin,)):
        node = placer.place(state, ask)
    if node is None and topology.mode == "preferred":
        node = placer.place(state, ask)
    return node


def place_unit(
    state: PartitionState,
    ask: Ask,
    placer: Placer,
    members: int,
    *,
    preemption: bool = False,
    limits: Limits | None = None,
) -> list[Node] | None:
    """:func:`sniper.core.gang.place_unit` for an ask with a ``topology``: ``members`` containers in
    the domains its mode allows (the module's rule), or none."""
    topology = ask.topology
    if topology is None:
        raise ValueError(f"ask {ask.key} has no topology")
    level = topology.level
    # Free room bounds what a placer that frees none can use; the placers that free room (victims,
    # evictions) are those with per-unit state, and only capacity bounds them.
    free = not preemption and not isinstance(placer, gang.UnitPlacer)

    def within(at: str, values: Collection[str]) -> list[Node] | None:
        with _narrowed(ask, at, values):
            return gang.place_unit(state, ask, placer, members, preemption=preemption, limits=limits)

    def first_fit(at: str) -> list[Node] | None:
        groups = domains(state, at)
        names = ordered(state, groups)
        if preemption:  # as single asks: victims of last resort only where no domain has others
            names.sort(key=lambda name: _without_last_resort(state, ask, groups[name]) < members)
        names = [name for name in names if _takes(ask, groups[name], free) >= members]
        if isinstance(placer, WeighingPlacer) and len(names) > 1:
            names = _cheapest_first(names, lambda name: placer.weigh(lambda: within(at, (name,))))
        for name in names:
            nodes = within(at, (name,))
            if nodes is not None:
                return nodes
        return None

    pin = pinned(state, ask, level)
    if topology.mode == "required":
        placed = first_fit(level) if pin is None else within(level, (pin,))
    else:
        placed = None if pin is None else within(level, (pin,))
        levels = state.config.topology.levels if state.config is not None and state.config.topology else ()
        inward = levels[levels.index(level) :] if level in levels else (level,)
        for at in reversed(inward):
            if placed is not None:
                break
            placed = first_fit(at)
        if placed is None:
            placed = _fewest_domains(state, ask, level, members, free, within)
        if placed is None:
            placed = gang.place_unit(state, ask, placer, members, preemption=preemption, limits=limits)
    if placed is not None:
        ask.domain = placed[0].labels.get(level)
    return placed


def _cheapest_first(names: list[str], weigh: Callable[[str], UnitCost | None]) -> list[str]:
    """The domains ``names`` (in order) whose unit ``weigh`` finds, cheapest first, ties in order."""
    weighed = [(cost, i, name) for i, name in enumerate(names) if (cost := weigh(name)) is not None]
    return [name for _, _, name in sorted(weighed)]


def _fewest_domains(
    state: PartitionState,
    ask: Ask,
    level: str,
    members: int,
    free: bool,
    within: Callable[[str, Collection[str]], list[Node] | None],
) -> list[Node] | None:
    """``members`` containers in the fewest domains of ``level``: those that take the most first."""
    groups = domains(state, level)
    takes = {name: _takes(ask, nodes, free) for name, nodes in groups.items()}
    chosen: list[str] = []
    total = 0
    for name in sorted(ordered(state, groups), key=lambda name: -takes[name]):
        if total >= members or takes[name] == 0:
            break
        chosen.append(name)
        total += takes[name]
    return within(level, chosen) if total >= members and len(chosen) > 1 else None
