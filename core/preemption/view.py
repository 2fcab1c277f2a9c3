"""Bridges from live partition state to the preemption snapshot model, and the ideal Sniper uses.

:func:`snapshot_from_figures` is the one place that turns a queue config plus per-queue usage and demand
into a :class:`ClusterSnapshot` (root guaranteed = cluster capacity; a missing ``max`` inherits the
parent's, the root's is the capacity). The cache's replica (:func:`snapshot_from_state`) and the
simulator's independent model both go through it, so they agree on what "ideal" means.
"""

from __future__ import annotations

from collections.abc import Mapping

from sniper.core import resources as res
from sniper.core.config import PartitionConfig, QueueConfig
from sniper.core.preemption.calculator import DominantCalculator
from sniper.core.preemption.ideal import IdealAssignment, compute_ideal
from sniper.core.preemption.model import AppSnapshot, ClusterSnapshot, ContainerSnapshot, QueueSnapshot
from sniper.core.resources import Resource
from sniper.core.state import PartitionState, allocation_number


def snapshot_from_figures(
    config: PartitionConfig,
    capacity: Resource,
    used: Mapping[str, Resource],
    pending: Mapping[str, Resource],
    *,
    smallest_ask: Mapping[str, Resource] | None = None,
    apps: Mapping[str, tuple[AppSnapshot, ...]] | None = None,
) -> ClusterSnapshot:
    queues: list[QueueSnapshot] = []

    def visit(q: QueueConfig, parent: QueueConfig | None, parent_max: Resource) -> None:
        # A resource the queue's max does not name is limited by the parent's only (config semantics).
        own_max = dict(parent_max)
        for k, v in (q.max or {}).items():
            own_max[k] = min(v, own_max.get(k, v))
        guaranteed = dict(capacity) if parent is None else dict(q.guaranteed)
        queues.append(
            QueueSnapshot(
                path=q.path,
                parent=None if parent is None else parent.path,
                children=tuple(c.path for c in q.children),
                is_leaf=q.is_leaf,
                guaranteed=guaranteed,
                max=own_max,
                used=dict(used.get(q.path, {})),
                pending=dict(pending.get(q.path, {})),
                pending_considering_reserved=dict(pending.get(q.path, {})),
                reserved={},
                priority=q.priority_offset,
                preemption_disabled=q.preemption_policy == "disabled",
                apps=(apps or {}).get(q.path, ()),
                smallest_pending_ask=None if smallest_ask is None else smallest_ask.get(q.path),
            )
        )
        for child in q.children:
            visit(child, q, own_max)

    visit(config.root, None, dict(capacity))
    return ClusterSnapshot(resource=dict(capacity), queues=tuple(queues))


def ideal_of(snapshot: ClusterSnapshot, *, avoid_ineffective: bool = True) -> IdealAssignment:
    """Sniper's ideal: YARN's fix-point under DRF, layered by business priority (seed 000)."""
    return compute_ideal(
        snapshot,
        DominantCalculator(snapshot.resource_names),
        priority_layers=True,
        avoid_ineffective=avoid_ineffective,
    )


def snapshot_from_state(
    state: PartitionState, *, with_containers: bool = False, capacity: Resource | None = None
) -> ClusterSnapshot:
    """The replica's queues as a snapshot: usage, demand, smallest asks.

    ``capacity`` overrides the partition's (the sniper policy passes its usable capacity). Without
    containers, usage is net of victims already preempting (they are leaving). With
    ``with_containers`` (YARN's baseline selects victims itself) usage is gross and every leaf carries
    its apps and running containers, those already preempting marked ``killable``.
    """
    if state.config is None:
        raise ValueError(f"partition {state.name} has no configuration")
    used: dict[str, Resource] = {}
    pending: dict[str, Resource] = {}
    smallest: dict[str, Resource] = {}
    apps: dict[str, tuple[AppSnapshot, ...]] = {}
    for path, q in state.queues.items():
        gross = res.add(q.allocated, q.reserved)
        used[path] = gross if with_containers else res.clamp_min_zero(res.sub(gross, q.preempting))
        pending[path] = dict(q.pending)
        if q.is_leaf:
            asks = [a.resource for app in q.apps.values() for a in app.pending_asks]
            if asks:
                smallest[path] = min(asks, key=lambda r: (sum(r.values()), sorted(r.items())))
            if with_containers:
                apps[path] = tuple(
                    AppSnapshot(
                        id=app.name,
                        queue=path,
                        submit_order=app.submit_seq,
                        priority=app.priority,
                        containers=tuple(
                            ContainerSnapshot(
                                id=a.id,
                                app=app.name,
                                resource=a.resource,
                                am=a.am,
                                seq=max(0, allocation_number(a.id)),
                                killable=a.preempting,
                                node=a.node,
                            )
                            for a in (state.allocations[x] for x in sorted(app.allocations))
                            if not a.opportunistic  # outside every queue: YARN's policy never sees them
                        ),
                    )
                    for app in sorted(q.apps.values(), key=lambda x: x.submit_seq)
                )
    total = state.capacity if capacity is None else capacity
    return snapshot_from_figures(state.config, total, used, pending, smallest_ask=smallest, apps=apps)
