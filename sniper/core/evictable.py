"""Which opportunistic containers may be killed, and in what order, below the modules that kill them
(:mod:`sniper.core.opportunistic` for a guaranteed ask, :mod:`sniper.core.overcommit` for a node above its
utilization threshold), so neither imports the other for it. Invariant: YARN's LIFO order, the most
recently started first, ties broken by the newer allocation id.
"""

from __future__ import annotations

from sniper.core.state import Allocation, Node, PartitionState, allocation_number


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
