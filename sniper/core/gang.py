"""Gangs (all or nothing): an ask's first ``gang_min`` containers are placed together or not at all.

The one definition every side uses: an ask still *needs a gang* while its containers held (allocated
ever, reserved, and in the allocator proposed) are fewer than ``gang_min``; its missing members then
form one unit that normal allocation, preemption placement and the cache's commit treat as a whole.
Once the gang is held the rest of the ask is ordinary. Invariant: a unit is placed, reserved or
committed in full or not at all; a failed unit leaves no trace (holds and placer state are undone);
a member beyond ``gang_min`` is committed only after its gang is (:class:`Followers`).
Checking a unit on the cache's state writes nothing: the members checked so far are tallied in a
:class:`Held` that each member's check adds to what it reads of the state.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from sniper.core import resources as res
from sniper.core.limits import Limits
from sniper.core.placing import Placer, hold_room
from sniper.core.state import Ask, AskKey, Node, PartitionState, selector_matches


def members_missing(ask: Ask) -> int:
    """How many containers the ask must still get as one unit (0: no gang, or the gang is held)."""
    if ask.gang_min <= 0:
        return 0
    return max(0, ask.gang_min - ask.allocated - ask.reserved - ask.allocating)


def unit_size(ask: Ask) -> int:
    """Containers the next placement of ``ask`` must get at once: the missing gang, or one."""
    return max(1, members_missing(ask))


def never_fits(
    state: PartitionState,
    resource: res.Resource,
    gang_min: int,
    required_node: str | None = None,
    node_selector: Mapping[str, Collection[str]] | None = None,
) -> str:
    """Why ``gang_min`` containers of ``resource`` can never run at once on the partition's schedulable
    nodes the ask may use (each node counted for as many whole containers as its capacity holds), or
    ``""``. Only meaningful once nodes are known."""
    slots = 0
    for node in state.nodes.values():
        if not node.schedulable or (required_node is not None and node.name != required_node):
            continue
        if node_selector and not selector_matches(node_selector, node.labels):
            continue
        slots += min((node.capacity.get(k, 0) // v for k, v in resource.items() if v > 0), default=0)
        if slots >= gang_min:
            return ""
    return f"its gang of {gang_min} can never fit the partition: its nodes hold at most {slots} such containers"


class UnitLimits:
    """One call's view of the limits for the gangs it places: built once, at the call's first gang (a
    view costs a walk over every app, so not one per unit), then charged with every container the call
    holds, so it answers as a view built afresh would. ``view`` is ``None`` when the partition has no limit."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self._view: Limits | None = None
        self._built = False

    @property
    def view(self) -> Limits | None:
        if not self._built:
            self._view, self._built = Limits.of(self.state), True
        return self._view

    def held(self, ask: Ask, containers: int = 1) -> None:
        """The caller holds ``containers`` more of ``ask`` (counted only once the view exists: a view
        built later sees the hold in the state)."""
        if self._view is not None:
            self._view.charge(ask, containers)


@runtime_checkable
class UnitPlacer(Protocol):
    """A placer with per-call state (preemption's victim placer) that a failed gang must roll back."""

    def open_unit(self, state: PartitionState, ask: Ask, members: int) -> bool:
        """Whether a unit of ``members`` containers of ``ask`` may be tried now; marks the state."""
        ...

    def close_unit(self, keep: bool) -> bool:
        """End the unit: keep what it took, or restore the state marked by ``open_unit``; whether it was
        kept (a placer may still refuse a complete unit, and then restores it too)."""
        ...


def place_unit(
    state: PartitionState,
    ask: Ask,
    placer: Placer,
    members: int,
    *,
    preemption: bool = False,
    limits: Limits | None = None,
) -> list[Node] | None:
    """Place ``members`` containers of ``ask`` through ``placer``, each held as it is placed, or none.

    The whole unit must stay within the user and group limits, and (outside preemption, where the
    placer counts victims leaving) within every ``max``. ``limits`` is the caller's view of the limits,
    charged with everything the caller holds (:class:`UnitLimits`); the unit charges nothing to it.
    Returns the nodes (held in the allocator's ``allocating`` counters), or ``None`` with every hold and
    the placer's own state undone.
    """
    if ask.pending < members:
        return None
    if not preemption and not state.headroom_allows(ask.app.queue, res.scale(ask.resource, members)):
        return None
    if limits is not None and not limits.holds_unit(ask, members):
        return None
    unit = placer if isinstance(placer, UnitPlacer) else None
    if unit is not None and not unit.open_unit(state, ask, members):
        return None
    nodes: list[Node] = []
    for _ in range(members):
        node = placer.place(state, ask)
        if node is None:
            break
        hold_room(state, ask, node, 1)
        nodes.append(node)
    complete = len(nodes) == members
    if unit is not None:
        complete = unit.close_unit(complete)
    if not complete:
        for node in nodes:
            hold_room(state, ask, node, -1)
    return nodes if complete else None


class _Keyed(Protocol):
    @property
    def app(self) -> str: ...

    @property
    def ask(self) -> str: ...

    @property
    def node(self) -> str: ...


_P = TypeVar("_P", bound=_Keyed)


def units(state: PartitionState, placements: Sequence[_Keyed]) -> list[tuple[list[int], int]]:
    """A proposal's placements (indices) in units, in order of each unit's first member.

    A gang still missing ``k`` members gets one unit of its first ``k`` placements in the proposal
    (fewer when the proposal has fewer: such a unit must be refused whole); every other placement is a
    unit of one. Each unit comes with the number of members it needs (1 for ordinary ones).
    """
    out: list[tuple[list[int], int]] = []
    filling: dict[AskKey, tuple[list[int], int]] = {}
    seen: set[AskKey] = set()
    apps = state.apps
    for i, pl in enumerate(placements):
        if filling:
            open_unit = filling.get((pl.app, pl.ask))
            if open_unit is not None:
                open_unit[0].append(i)
                if len(open_unit[0]) == open_unit[1]:
                    del filling[(pl.app, pl.ask)]
                continue
        app = apps.get(pl.app)
        ask = None if app is None else app.asks.get(pl.ask)
        if ask is None or ask.gang_min <= 1:
            out.append(([i], 1))
            continue
        key = (pl.app, pl.ask)
        need = 0 if key in seen else members_missing(ask)
        if need > 1:
            seen.add(key)  # its later placements, once the unit is full, are ordinary
            filling[key] = ([i], need)
            out.append(filling[key])
        else:
            out.append(([i], 1))
    return out


FOLLOWS_REFUSED_GANG = "a member beyond gang_min follows its gang, and its gang was not placed"


class Followers:
    """A proposal's commit, unit by unit (:func:`units`): a placement beyond ``gang_min`` is a unit of
    its own that comes after its gang's unit and is refused once that unit was."""

    __slots__ = ("refused",)

    def __init__(self) -> None:
        self.refused: set[AskKey] = set()

    def refusal(self, key: AskKey) -> str | None:
        """Why a unit of ``key`` may not be committed because of its gang, or ``None``."""
        return FOLLOWS_REFUSED_GANG if key in self.refused else None

    def judged(self, key: AskKey, need: int, why: str | None) -> None:
        """Record the verdict on a unit of ``need`` members of ``key`` (``why``: refused)."""
        if why is not None and need > 1:
            self.refused.add(key)


@dataclass(frozen=True, slots=True)
class HeldMember:
    """A gang member checked so far, as the constraint rule counts it (:class:`sniper.core.constraints.Placed`)."""

    app: str
    node: str
    tags: tuple[str, ...]


class Held:
    """What the members of a gang checked so far hold, tallied beside the state (which a check never
    touches), as the allocator's in-flight counters (:func:`sniper.core.placing.hold_room`) would count them:
    their room on each node (``nodes``, by name), up their queue tree (``queues``, by path; none for an
    opportunistic ask, which counts on its node only), their containers in their tags' scopes
    (``placed``, when the ask carries tags) and their number (``count``)."""

    __slots__ = ("ask", "count", "nodes", "placed", "queues")

    def __init__(self, ask: Ask) -> None:
        self.ask = ask
        self.count = 0
        self.nodes: dict[str, res.Resource] = {}
        self.queues: dict[str, res.Resource] = {}
        self.placed: list[HeldMember] = []

    @classmethod
    def freeing(cls, ask: Ask, node: Node, room: res.Resource) -> Held:
        """A tally in which ``room`` on ``node`` counts as free: what a check finds fit once the
        containers holding that room are gone."""
        tally = cls(ask)
        tally.nodes[node.name] = res.scale(room, -1)
        return tally

    def hold(self, node: Node) -> None:
        """Count one more member of the ask on ``node``."""
        ask = self.ask
        self.count += 1
        res.add_into(self.nodes.setdefault(node.name, {}), ask.resource)
        if not ask.opportunistic:
            for q in ask.app.queue.lineage():
                res.add_into(self.queues.setdefault(q.path, {}), ask.resource)
        if ask.tags:
            self.placed.append(HeldMember(ask.app.name, node.name, ask.tags))

    def on(self, node: Node) -> res.Resource:
        """What the members hold on ``node`` (empty: nothing)."""
        return self.nodes.get(node.name, {})

    def free(self, node: Node) -> res.Resource:
        """``node.free()`` with the members' room taken."""
        return res.sub(node.free(), self.on(node))

    def can_hold(self, node: Node, request: res.Resource) -> bool:
        """``node.can_hold(request)`` with the members' room taken."""
        return res.fits(request, self.free(node))

    def with_queues(self, extra: dict[str, res.Resource] | None) -> dict[str, res.Resource] | None:
        """``extra`` (per queue path, added to each queue's usage by
        :meth:`sniper.core.state.PartitionState.headroom_allows`) with the members' room added."""
        if not self.queues:
            return extra
        out = {path: dict(amount) for path, amount in (extra or {}).items()}
        for path, amount in self.queues.items():
            res.add_into(out.setdefault(path, {}), amount)
        return out


def check_unit(
    state: PartitionState, unit: Sequence[_P], need: int, check: Callable[[_P, Held], str | None]
) -> str | None:
    """Why a gang's unit cannot be committed whole, or ``None``: every member passes ``check`` with the
    members before it counted as taken (tallied in the :class:`Held` ``check`` gets; the state is only read)."""
    if len(unit) < need:
        return f"gang of {need} proposed with {len(unit)} members: all or nothing"
    ask = state.ask((unit[0].app, unit[0].ask))
    if ask is None:
        return "ask is gone"
    held = Held(ask)
    for n, pl in enumerate(unit, 1):
        why = check(pl, held)
        if why is not None:
            return f"gang member {n} of {need}: {why}"
        held.hold(state.nodes[pl.node])
    return None
