"""Bridges from live partition state to the preemption snapshot model, and the ideal Sniper uses.

:func:`snapshot_from_figures` is the one place that turns a queue config plus per-queue usage and demand
into a :class:`ClusterSnapshot` (root guaranteed = cluster capacity, guarantees composed as absolute
guarantees: :func:`composed_guarantees`; a missing ``max`` inherits the parent's, the root's is the
capacity). The cache's replica (:func:`snapshot_from_state`) and the
simulator's independent model both go through it, so they agree on what "ideal" means.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from sniper.core import resources as res
from sniper.core.config import PartitionConfig, QueueConfig
from sniper.core.limits import pending_demand
from sniper.core.preemption.app_snapshots import AppSnapshots
from sniper.core.preemption.calculator import DominantCalculator
from sniper.core.preemption.ideal import IdealAssignment, compute_ideal
from sniper.core.preemption.ideal_memo import IdealMemo
from sniper.core.preemption.model import AppSnapshot, ClusterSnapshot, QueueSnapshot
from sniper.core.resources import Resource
from sniper.core.state import PartitionState


def snapshot_from_figures(
    config: PartitionConfig,
    capacity: Resource,
    used: Mapping[str, Resource],
    pending: Mapping[str, Resource],
    *,
    smallest_ask: Mapping[str, Resource] | None = None,
    apps: Mapping[str, tuple[AppSnapshot, ...]] | None = None,
    compose: bool = True,
) -> ClusterSnapshot:
    """``compose`` (Sniper) gives every queue its guarantee as :func:`composed_guarantees` reads the config
    and leaves out every resource no node has: a guarantee naming one, or an ask using one, says nothing
    about the others (such an ask can never run). Without it each queue keeps the figures as given (YARN's
    baseline)."""
    queues: list[QueueSnapshot] = []
    effective = composed_guarantees(config, capacity, used, pending) if compose else None

    def known(r: Mapping[str, int] | None) -> Resource:
        if r is None:
            return {}
        return {k: v for k, v in r.items() if k in capacity} if compose else dict(r)

    def visit(q: QueueConfig, parent: QueueConfig | None, parent_max: Resource) -> None:
        # A resource the queue's max does not name is limited by the parent's only (config semantics).
        own_max = dict(parent_max)
        for k, v in (q.max or {}).items():
            own_max[k] = min(v, own_max.get(k, v))
        if parent is None:
            guaranteed = dict(capacity)
        else:
            guaranteed = dict(q.guaranteed) if effective is None else known(effective[q.path])
        queues.append(
            QueueSnapshot(
                path=q.path,
                parent=None if parent is None else parent.path,
                children=tuple(c.path for c in q.children),
                is_leaf=q.is_leaf,
                guaranteed=guaranteed,
                max=own_max,
                used=known(used.get(q.path)),
                pending=known(pending.get(q.path)),
                pending_considering_reserved=known(pending.get(q.path)),
                reserved={},
                priority=q.priority_offset,
                preemption_disabled=q.preemption_policy == "disabled",
                fenced=q.preemption_policy == "fence",
                apps=(apps or {}).get(q.path, ()),
                smallest_pending_ask=None
                if smallest_ask is None or q.path not in smallest_ask
                else known(smallest_ask[q.path]),
            )
        )
        for child in q.children:
            visit(child, q, own_max)

    visit(config.root, None, dict(capacity))
    return ClusterSnapshot(resource=dict(capacity), queues=tuple(queues))


def composed_guarantees(
    config: PartitionConfig, capacity: Resource, used: Mapping[str, Resource], pending: Mapping[str, Resource]
) -> Mapping[str, Resource]:
    """Every queue's guarantee as absolute guarantees compose (YuniKorn's; architecture: Vocabulary).

    A queue without ``guaranteed`` whose subtree names some guarantees guarantees their sum (so a leaf's
    guarantee counts when its ancestors have none), and limits nothing. A queue whose subtree names none
    shares, by demand (``used + pending``), what its parent's guarantee (the root's: the capacity) leaves
    over its siblings' guarantees, never more than its demand on any resource.

    When every queue below the root names a guarantee in its subtree the answer reads no demand: it is
    kept per config (by identity) and capacity, and shared between callers, who never change it.
    """
    declared = _declared_guarantees(config)
    if all(declared.values()):
        key = tuple(capacity.items())
        known = _COMPOSED.get(id(config))
        if known is None or known[0] is not config or known[1] != key:
            known = _COMPOSED[id(config)] = (config, key, _composed(config, declared, capacity, {}, {}))
            while len(_COMPOSED) > _KEPT_CONFIGS:
                del _COMPOSED[next(iter(_COMPOSED))]
        return known[2]
    return _composed(config, declared, capacity, used, pending)


# The last configs' guarantees as their trees name them (``declared``) and, where those read no demand,
# their composition for the last capacity: the callers see a handful of configs, each for a whole run.
_KEPT_CONFIGS = 8
_DECLARED: dict[int, tuple[PartitionConfig, dict[str, Resource]]] = {}
_COMPOSED: dict[int, tuple[PartitionConfig, tuple[tuple[str, int], ...], dict[str, Resource]]] = {}


def _declared_guarantees(config: PartitionConfig) -> dict[str, Resource]:
    """Each queue below the root's own guarantee, or the sum of its subtree's when it names none."""
    known = _DECLARED.get(id(config))
    if known is not None and known[0] is config:
        return known[1]
    declared: dict[str, Resource] = {}

    def up(q: QueueConfig) -> Resource:
        below = res.total(up(c) for c in q.children)
        own = res.normalized(q.guaranteed)
        declared[q.path] = own if own else below
        return declared[q.path]

    for top in config.root.children:
        up(top)
    _DECLARED[id(config)] = (config, declared)
    while len(_DECLARED) > _KEPT_CONFIGS:
        del _DECLARED[next(iter(_DECLARED))]
    return declared


def _composed(
    config: PartitionConfig,
    declared: Mapping[str, Resource],
    capacity: Resource,
    used: Mapping[str, Resource],
    pending: Mapping[str, Resource],
) -> dict[str, Resource]:
    out: dict[str, Resource] = {config.root.path: dict(capacity)}

    def down(q: QueueConfig) -> None:
        guaranteed = out[q.path]
        named = [c for c in q.children if declared[c.path]]
        unnamed = [c for c in q.children if not declared[c.path]]
        for c in named:
            out[c.path] = declared[c.path]
        # What is left over the named children is never more than the cluster has: a parent guaranteed more
        # than the capacity must not hand its unnamed children a share that covers all they hold.
        within = {k: min(v, capacity.get(k, 0)) for k, v in guaranteed.items()}
        left = res.clamp_min_zero(res.sub(within, res.total(declared[c.path] for c in named)))
        demand = {c.path: res.add(used.get(c.path, {}), pending.get(c.path, {})) for c in unnamed}
        wanted = res.total(demand.values())
        for c in unnamed:
            out[c.path] = res.normalized(
                {k: min(v, left.get(k, 0) * v // wanted[k]) for k, v in demand[c.path].items() if wanted.get(k)}
            )
        for c in q.children:
            down(c)

    down(config.root)
    return out


# Sniper's ideals of recent snapshots: the policy's rounds and the simulator's samples often see figures
# they saw a few changes before (a container ends, another of the same shape starts).
SNIPER_IDEALS = IdealMemo(256)


def computed_ideal(snapshot: ClusterSnapshot, avoid_ineffective: bool = True) -> IdealAssignment:
    """Sniper's ideal: YARN's fix-point under DRF, layered by business priority, computed afresh."""
    return compute_ideal(
        snapshot,
        DominantCalculator(snapshot.resource_names),
        priority_layers=True,
        avoid_ineffective=avoid_ineffective,
        cap_by_demand=True,
    )


def ideal_of(snapshot: ClusterSnapshot, *, avoid_ineffective: bool = True) -> IdealAssignment:
    """:func:`computed_ideal`, memoized by :data:`SNIPER_IDEALS` on the snapshot's exact figures."""
    return SNIPER_IDEALS.get(
        snapshot, avoid_ineffective, functools.partial(computed_ideal, avoid_ineffective=avoid_ineffective)
    )


def snapshot_from_state(
    state: PartitionState,
    *,
    with_containers: bool = False,
    capacity: Resource | None = None,
    kept: AppSnapshots | None = None,
) -> ClusterSnapshot:
    """The replica's queues as a snapshot: usage, demand, smallest asks.

    Demand is pending capped by the user, group and application limits (:func:`pending_demand`: an ask a
    limit holds back cannot use room preemption frees), for both policies, as YARN's pending considering
    the user limit. Asks with ``preemption_policy: never`` are no demand either: room a policy frees is
    never theirs to take (their pending is taken off their queue's and its ancestors', down to zero).

    ``capacity`` overrides the partition's (the sniper policy passes its usable capacity). Without
    containers, usage is net of victims already preempting (they are leaving) and guarantees compose
    (:func:`composed_guarantees`). With ``with_containers`` (YARN's baseline selects victims itself) usage
    is gross, every leaf carries its apps that hold containers and their running containers (but those
    younger than their queue's ``preemption.min.runtime``, which no policy may take), those already
    preempting marked ``killable``, and every queue keeps the guarantee its config names, as
    YARN reads it. ``kept`` (a caller snapshotting round after round, told of every change) holds the
    apps' snapshots of the last round: only those a change touched since are built again.
    """
    if state.config is None:
        raise ValueError(f"partition {state.name} has no configuration")
    used: dict[str, Resource] = {}
    # Both policies see the demand the limits let run: YARN's baseline reads its leaf queues'
    # ``getTotalPendingResourcesConsideringUserLimit`` too.
    pending = pending_demand(state)
    smallest: dict[str, Resource] = {}
    apps: dict[str, tuple[AppSnapshot, ...]] = {}
    snapshots = (kept if kept is not None else AppSnapshots()) if with_containers else None
    if snapshots is not None:
        snapshots.begin(state)

    for path, q in state.queues.items():
        gross = res.add(q.allocated, q.reserved)
        used[path] = gross if with_containers else res.clamp_min_zero(res.sub(gross, q.preempting))
        if q.is_leaf:
            waiting = [a for app in q.waiting_apps() for a in app.pending_asks]
            for ask in waiting:
                if ask.never_preempts:
                    for up in q.lineage():
                        pending[up.path] = res.clamp_min_zero(
                            res.sub(pending.get(up.path, {}), res.scale(ask.resource, ask.pending))
                        )
            asks = [a.resource for a in waiting]
            if asks:
                smallest[path] = min(asks, key=lambda r: (sum(r.values()), sorted(r.items())))
            if snapshots is not None:
                # An app holding nothing offers YARN's selection nothing.
                apps[path] = tuple(snapshots.of(state, app) for app in q.holding_apps())
    if snapshots is not None:
        snapshots.end()
    total = state.capacity if capacity is None else capacity
    return snapshot_from_figures(
        state.config, total, used, pending, smallest_ask=smallest, apps=apps, compose=not with_containers
    )
