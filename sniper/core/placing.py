"""What placing one container holds, below both the allocation loop (:mod:`sniper.core.allocation`) and gangs
(:mod:`sniper.core.gang`), so each imports it without importing the other: the :class:`Placer` protocol (a
node for one container) and :func:`hold_room`, the allocator's in-flight counters of a proposed
container. Invariant: every hold is undone by the same call with ``times=-1``.
"""

from __future__ import annotations

from typing import Protocol

from sniper.core import resources as res
from sniper.core.state import Ask, Node, PartitionState


class Placer(Protocol):
    """Finds a node for one container; normal mode uses free room, preemption mode adds victims."""

    def place(self, state: PartitionState, ask: Ask) -> Node | None: ...


def hold_room(state: PartitionState, ask: Ask, node: Node, times: int) -> None:
    """Add (or with ``times=-1`` remove) one proposed container to the allocator's in-flight counters."""
    ask.allocating += times
    resource = ask.resource
    res.add_into(node.allocating, resource, times)
    if not ask.opportunistic:  # opportunistic room counts on its node only
        for q in ask.app.queue.line:
            held = q.allocating
            for k, v in resource.items():
                held[k] = held.get(k, 0) + v * times
    if ask.tags:  # its containers in flight count in their scopes (a gang's members count each other)
        state.tags.add(node, ask.app.name, ask.tags, times)
    if state.nodes.get(node.name) is node:
        state.reindex(node)
