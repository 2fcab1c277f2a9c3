"""The ideal assignment as the simulator's independent model sees it (for fairness and plots)."""

from __future__ import annotations

from sniper.core.preemption.view import ideal_of, snapshot_from_figures
from sniper.core.resources import Resource
from sniper.simulator.model import ClusterModel


def ideal_for_model(model: ClusterModel) -> dict[str, Resource]:
    if model.config is None:
        return {}
    capacity = model.capacity()
    if not capacity:
        return {}
    snapshot = snapshot_from_figures(model.config, capacity, model.queue_usage(), model.queue_demand())
    return {q.path: q.ideal_assigned for q in ideal_of(snapshot, avoid_ineffective=False)}
