"""The allocator's free-room placer that remembers which ask shapes found no node.

An ask that found no node cannot find one until some node's room or eligibility grows, and every such
change touches the node in :class:`sniper.core.node_changes.NodeChanges`. So a shape (resource and node
selector) that failed at touch ``s`` fails again while every node touched since ``s`` still cannot take
it, and those are the only nodes re-checked. Invariant: it answers every call exactly as
:class:`sniper.core.allocation.FreeRoomPlacer` does; asks whose answer depends on more than their shape
and the nodes (a required node, placement constraints, a gang, a topology, a node reservation of their
own) are always placed afresh.
"""

from __future__ import annotations

from sniper.core import node_reservation
from sniper.core.allocation import FreeRoomPlacer
from sniper.core.state import Ask, Node, PartitionState

Shape = tuple[tuple[tuple[str, int], ...], tuple[tuple[str, frozenset[str]], ...]]


def shape_of(ask: Ask) -> Shape | None:
    """What a free-room placement of ``ask`` depends on besides the nodes; ``None`` when it depends on more.
    (Equal resources listed in another order make another shape: remembered apart, answered alike.)"""
    if (
        ask.required_node is not None
        or ask.constraints
        or ask.gang_min > 1
        or ask.topology is not None
        or ask.node_reserved is not None
    ):
        return None
    selector = ask.node_selector
    return tuple(ask.resource.items()), tuple(selector.items()) if selector else ()


class RememberingPlacer(FreeRoomPlacer):
    """:class:`FreeRoomPlacer` over the allocator's replica, answering a remembered failure without a search."""

    def __init__(self) -> None:
        super().__init__()
        self._state: PartitionState | None = None
        self._failed: dict[Shape, int] = {}  # shape -> a touch at which it found no node
        self.searched = 0  # placements that searched the nodes
        self.remembered = 0  # placements answered by a remembered failure

    def known_to_fail(self, state: PartitionState, ask: Ask) -> bool:
        """Whether a search for ``ask`` would find no node, known without one."""
        failed = self._failed
        if state is not self._state:  # a reset replica: other nodes
            self._state = state
            failed.clear()
            return False
        if not failed or (shape := shape_of(ask)) is None or (seq := failed.get(shape)) is None:
            return False
        changes = state.node_changes
        if seq != changes.seq and any(_may_take(state, ask, name) for name in changes.since(seq)):
            return False
        failed[shape] = changes.seq
        self.remembered += 1
        return True

    def place(self, state: PartitionState, ask: Ask) -> Node | None:
        if self.known_to_fail(state, ask):
            return None
        self.searched += 1
        node = super().place(state, ask)
        if node is None and (shape := shape_of(ask)) is not None:
            self._failed[shape] = state.node_changes.seq
        return node


def _may_take(state: PartitionState, ask: Ask, name: str) -> bool:
    """Whether the node ``name`` may now take one container of ``ask`` (a shape's ask: no required node, no
    constraints), as far as room, eligibility and other asks' node reservations go."""
    node = state.nodes.get(name)
    return (
        node is not None
        and node.schedulable
        and node.can_hold(ask.resource)
        and ask.accepts(node)
        and not node_reservation.blocks(state, ask, name)
    )
