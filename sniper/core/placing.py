"""What placing one container holds, below both the allocation loop (:mod:`sniper.core.allocation`) and gangs
(:mod:`sniper.core.gang`), so each imports it without importing the other: the :class:`Placer` protocol (a
node for one container) and :func:`hold_room`, the allocator's in-flight counters of a proposed
container. Invariant: every hold is undone by the same call with ``times=-1``, or by :func:`release_room`
with the others of its proposal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from sniper.core import resources as res
from sniper.core.resources import Resource
from sniper.core.state import Ask, Node, PartitionState, Queue


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


def release_room(state: PartitionState, placed: Iterable[tuple[Ask, Node]]) -> None:
    """Undo :func:`hold_room` for every container of an answered proposal: the counters end as one
    ``hold_room(..., -1)`` per container leaves them, each node and queue changed once."""
    on_nodes: dict[Node, Resource] = {}
    in_leaves: dict[Queue, Resource] = {}
    for ask, node in placed:
        ask.allocating -= 1
        resource = ask.resource
        held = on_nodes.get(node)
        if held is None:
            held = on_nodes[node] = {}
        res.add_into(held, resource)
        if not ask.opportunistic:  # opportunistic room counts on its node only
            leaf = ask.app.queue
            held = in_leaves.get(leaf)
            if held is None:
                held = in_leaves[leaf] = {}
            res.add_into(held, resource)
        if ask.tags:
            state.tags.add(node, ask.app.name, ask.tags, -1)
    for leaf, held in in_leaves.items():
        for q in leaf.line:
            res.sub_into(q.allocating, held)
    for node, held in on_nodes.items():
        res.sub_into(node.allocating, held)
        if state.nodes.get(node.name) is node:
            state.reindex(node)
