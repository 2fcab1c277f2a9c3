"""Victim cost functions, registered by name (``preemption.victim_cost``); lower cost is preempted first.

For large containers: the sum of the victims' running time on a node (less work lost); the cross-queue design: priority,
running time, container type. AM containers are handled by the placement (last resort), not here.
Each function is pure: ``(allocation, now) -> float``.
"""

from __future__ import annotations

from collections.abc import Callable

from core.state import Allocation

VictimCost = Callable[[Allocation, float], float]


def running_time(alloc: Allocation, now: float) -> float:
    return max(0.0, now - alloc.start)


def priority_then_running_time(alloc: Allocation, now: float) -> float:
    """Lower-priority containers first, then the ones that ran least (priority dominates)."""
    return alloc.priority * 1e9 + running_time(alloc, now)


def priority(alloc: Allocation, now: float) -> float:
    return float(alloc.priority)


VICTIM_COSTS: dict[str, VictimCost] = {
    "running_time": running_time,
    "priority": priority,
    "priority_then_running_time": priority_then_running_time,
}


def victim_cost(name: str) -> VictimCost:
    try:
        return VICTIM_COSTS[name]
    except KeyError:
        raise ValueError(f"unknown victim cost {name!r}; registered: {', '.join(sorted(VICTIM_COSTS))}") from None
