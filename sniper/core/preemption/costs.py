"""Victim cost functions, registered by name (``preemption.victim_cost``); lower cost is preempted first.

For large containers: the sum of the victims' running time on a node (less work lost), or of the work
their kills really lose, since each victim's last checkpoint (:mod:`sniper.core.checkpoints`); the
cross-queue design: priority, running time, container type. AM containers are handled by the placement
(last resort), not here.
Each function is pure: ``(allocation, at) -> float``, ``at`` the moment the victim would be killed (the
round's time plus the grace, :class:`sniper.core.preemption.placement.VictimPlacer`): a victim keeps running, and
its work keeps growing, until then, so a running-time cost is the work its kill throws away and a set of
more victims pays every victim's grace. A set's cost is the sum of its victims'.
A cost may have a floor (:data:`VICTIM_COST_FLOORS`): from when the newest of some containers started, a
cost none of them is below at ``at``; the victim search bounds a node's sets with it without costing them.
"""

from __future__ import annotations

from collections.abc import Callable

from sniper.core import checkpoints
from sniper.core.state import Allocation

VictimCost = Callable[[Allocation, float], float]


def running_time(alloc: Allocation, at: float) -> float:
    """The work lost: how long the victim will have run when killed (least first)."""
    return max(0.0, at - alloc.start)


def lost_work(alloc: Allocation, at: float) -> float:
    """The work lost: how long the victim will have run since its last checkpoint when killed (least
    first); its running time when its app tells no checkpoint."""
    return checkpoints.lost_work(alloc.start, at, alloc.checkpoint_interval, alloc.checkpointed)


def priority_then_running_time(alloc: Allocation, at: float) -> float:
    """Lower-priority containers first, then the ones that ran least (priority dominates)."""
    return alloc.priority * 1e9 + running_time(alloc, at)


def priority(alloc: Allocation, at: float) -> float:
    return float(alloc.priority)


VICTIM_COSTS: dict[str, VictimCost] = {
    "running_time": running_time,
    "lost_work": lost_work,
    "priority": priority,
    "priority_then_running_time": priority_then_running_time,
}


VictimCostFloor = Callable[[float, float], float]  # (latest start, at) -> no container started by then costs less


def running_time_floor(latest_start: float, at: float) -> float:
    """:func:`running_time` is monotone in the start: the newest container costs the least."""
    return max(0.0, at - latest_start)


VICTIM_COST_FLOORS: dict[str, VictimCostFloor] = {"running_time": running_time_floor}


def victim_cost(name: str) -> VictimCost:
    try:
        return VICTIM_COSTS[name]
    except KeyError:
        raise ValueError(f"unknown victim cost {name!r}; registered: {', '.join(sorted(VICTIM_COSTS))}") from None
