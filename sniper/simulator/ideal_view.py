"""The ideal assignment as the simulator's independent model sees it (for fairness and plots).

A settled partition's ideal is read off its figures (:func:`settled_ideal`); any other goes through the
snapshot and Sniper's memoized computation, so both give what the computation gives.
"""

from __future__ import annotations

from sniper.core.preemption.settled_ideal import settled_ideal
from sniper.core.preemption.view import ideal_of, snapshot_from_figures
from sniper.core.resources import Resource
from sniper.simulator.model import ClusterModel


def ideal_for_model(model: ClusterModel) -> dict[str, Resource]:
    if model.config is None:
        return {}
    capacity = model.capacity()
    if not capacity:
        return {}
    usage, demand = model.queue_usage(), model.queue_demand()
    settled = settled_ideal(model.config, capacity, usage, demand)
    if settled is not None:
        return settled
    snapshot = snapshot_from_figures(model.config, capacity, usage, demand)
    return {q.path: q.ideal_assigned for q in ideal_of(snapshot, avoid_ineffective=False)}
