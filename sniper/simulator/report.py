"""The report (architecture: Metrics) as one msgspec struct, built once by :func:`build_report` for the
simulator (memory and Kafka), ``sniper compare`` and ``sniper feed``; JSON is its encoding.

A run's :class:`Report` carries every :class:`PartitionReport` field: one partition's figures as they
are, or several partitions' summed (counts), merged (``time_to_guarantee`` keyed ``partition:queue``,
``first_allocation_wait`` ``partition:user``) or left empty where a sum means nothing (utilization,
fairness, stranded, opportunistic utilization: read ``partitions``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from sniper.core import resources as res
from sniper.messages import decisions as d
from sniper.simulator.metrics import (
    FirstAllocationWait,
    Metrics,
    Opportunistic,
    PreemptionLogEntry,
    Preemptions,
    TimeToGuarantee,
)

if TYPE_CHECKING:
    from sniper.simulator.model import ClusterModel


def node_reservation_figures(decisions: Iterable[d.DecisionMsg]) -> tuple[dict[str, int], int]:
    """Node reservations made and ended by reason (docs/report.md), and the de-reservations among them."""
    out: dict[str, int] = {}
    for dec in decisions:
        if isinstance(dec, d.NodeReserved):
            out["made"] = out.get("made", 0) + 1
        elif isinstance(dec, d.NodeUnreserved):
            out[dec.reason] = out.get(dec.reason, 0) + 1
    return dict(sorted(out.items())), out.get(d.DERESERVED, 0)


class PartitionReport(msgspec.Struct, kw_only=True):
    policy: str = "none"
    allocations: int = 0
    preemptions: Preemptions = Preemptions()
    # The four actions of YARN's capacity monitor, cheapest first: decisions of each kind (docs/report.md).
    actions: dict[str, int] = {}
    wasted_preemptions: int = 0
    ping_pong: int = 0
    preemptions_undecided: int = 0
    youngest_victim_seconds: float | None = None  # the shortest run of a guaranteed victim at its notice
    lost_work_seconds: float = 0.0
    lost_work_by_cause: dict[str, float] = {}  # the same seconds by what ended each container (docs/report.md)
    running_time_lost_seconds: float = 0.0  # the same containers' running time, checkpoints ignored
    time_to_guarantee: dict[str, TimeToGuarantee] = {}
    first_allocation_wait: dict[str, FirstAllocationWait] = {}  # per user named in app_added
    utilization: dict[str, float] = {}  # time-averaged allocated over capacity, per resource (guaranteed only)
    opportunistic: Opportunistic = Opportunistic()
    node_reservations: dict[str, int] = {}  # made, and ended by reason
    dereservations: int = 0  # node reservations a preemption policy cancelled (YARN capacity monitor's cheapest action)
    fairness: dict[str, float] = {}  # time-averaged sum over leaves of |usage - ideal| / capacity, per resource
    fairness_gap: float | None = None  # the same, dominant resource at each moment
    stranded: dict[str, float] = {}  # time-averaged idle capacity waiting asks could use, per resource
    pending_at_end: int = 0
    # Placement constraints (docs/feed.md#placement-constraints): placements of constrained asks that the
    # independent checker found within every constraint, and containers of such asks still waiting.
    constraint_satisfied_placements: int = 0
    constrained_pending_at_end: int = 0
    rejected: int = 0
    proposals_rejected: int | None = None  # None where the decisions do not tell (sniper feed)
    proposals: int | None = None
    mask: dict[str, int] = {}
    budget_refusals: int | None = None  # containers passed over for their app's disruption budget
    # SLO reservations (simulator.slo_check): accepted, rejected, met and missed; and one entry each.
    slo_reservations: dict[str, int] = {}
    slo_reservation_log: list[dict[str, Any]] = []
    invariant_violations: int = 0
    violations: list[dict[str, Any]] = []
    preemption_log: list[PreemptionLogEntry] = []
    counts: dict[str, int] = {}  # decisions by type


class Report(PartitionReport, kw_only=True):
    sim_seconds: float = 0.0
    seed: int | None = None
    allocations_per_s: float | None = None  # wall clock
    wall_seconds: float = 0.0
    decisions: int = 0
    retries: int = 0
    transport: str = "memory"
    topic_prefix: str | None = None
    rejections: list[dict[str, str]] = []  # every rejected event or ask, with its reason
    extra: dict[str, Any] = {}  # what only one kind of run knows (sniper feed: published, dropped decisions)
    partitions: dict[str, PartitionReport] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionFigures:
    """What :func:`partition_report` reads for one partition, whichever run produced it."""

    model: ClusterModel
    metrics: Metrics
    grace: float
    counts: Mapping[str, int]  # decisions by type name
    lost_work: float
    lost_work_by_cause: Mapping[str, float] = dataclasses.field(default_factory=dict)
    running_time_lost: float = 0.0
    proposals_rejected: int | None = None
    proposals: int | None = None
    mask: Mapping[str, int] = dataclasses.field(default_factory=dict)
    budget_refusals: int | None = None


def partition_report(fig: PartitionFigures, cycle: float) -> PartitionReport:
    model, m = fig.model, fig.metrics
    config = model.config
    wasted, ping_pong, undecided = m.preemption_outcomes(fig.grace, cycle)
    node_reservations, dereservations = node_reservation_figures(m.decisions)
    return PartitionReport(
        policy=config.preemption.policy if config is not None else "none",
        allocations=fig.counts.get("Allocated", 0),
        preemptions=m.preemption_totals(),
        actions=m.actions(),
        wasted_preemptions=wasted,
        ping_pong=ping_pong,
        preemptions_undecided=undecided,
        youngest_victim_seconds=m.youngest_victim(),
        lost_work_seconds=round(fig.lost_work, 3),
        lost_work_by_cause={k: round(v, 3) for k, v in sorted(fig.lost_work_by_cause.items())},
        running_time_lost_seconds=round(fig.running_time_lost, 3),
        time_to_guarantee=m.time_to_guarantee(),
        first_allocation_wait=m.first_allocation_wait(),
        utilization=m.utilization(),
        opportunistic=m.opportunistic(),
        node_reservations=node_reservations,
        dereservations=dereservations,
        fairness=m.fairness(),
        fairness_gap=m.fairness_gap(),
        stranded=m.stranded(),
        pending_at_end=model.pending_containers(),
        constraint_satisfied_placements=model.placement.satisfied,
        constrained_pending_at_end=model.constrained_pending(),
        rejected=fig.counts.get("Rejected", 0),
        proposals_rejected=fig.proposals_rejected,
        proposals=fig.proposals,
        mask=dict(fig.mask),
        budget_refusals=fig.budget_refusals,
        slo_reservations=model.slo.counts(),
        slo_reservation_log=model.slo.log(),
        invariant_violations=len(model.violations),
        violations=[dataclasses.asdict(v) for v in model.violations[:50]],
        preemption_log=m.preemption_log(),
        counts=dict(sorted(fig.counts.items())),
    )


def build_report(
    parts: Mapping[str, PartitionFigures],
    *,
    sim_seconds: float,
    wall: float,
    cycle: float,
    policy: str | None = None,
    seed: int | None = None,
    retries: int = 0,
    transport: str = "memory",
    topic_prefix: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Report:
    """The run's report: one partition's figures lifted to the top, or several combined."""
    per = {name: partition_report(fig, cycle) for name, fig in sorted(parts.items())}
    allocations = sum(r.allocations for r in per.values())
    run: dict[str, Any] = {
        "sim_seconds": round(sim_seconds, 3),
        "seed": seed,
        "allocations_per_s": round(allocations / wall, 1) if wall > 0 else None,
        "wall_seconds": round(wall, 3),
        "decisions": sum(sum(fig.counts.values()) for fig in parts.values()),
        "retries": retries,
        "transport": transport,
        "topic_prefix": topic_prefix,
        "extra": dict(extra or {}),
    }
    first = next(iter(per.values()), PartitionReport())
    chosen = policy or first.policy
    if len(per) <= 1:
        fields = {f: getattr(first, f) for f in first.__struct_fields__}
        return Report(**{**fields, "policy": chosen, **run})
    counts: dict[str, int] = {}
    for r in per.values():
        for k, v in r.counts.items():
            counts[k] = counts.get(k, 0) + v
    proposals_rejected = [r.proposals_rejected for r in per.values()]
    budget_refusals = [r.budget_refusals for r in per.values()]
    youngest = [r.youngest_victim_seconds for r in per.values() if r.youngest_victim_seconds is not None]
    return Report(
        policy=chosen,
        allocations=allocations,
        preemptions=Preemptions(
            victims=sum(r.preemptions.victims for r in per.values()),
            resources=res.total(r.preemptions.resources for r in per.values()),
            cancelled=sum(r.preemptions.cancelled for r in per.values()),
        ),
        actions={k: sum(r.actions.get(k, 0) for r in per.values()) for k in first.actions},
        wasted_preemptions=sum(r.wasted_preemptions for r in per.values()),
        ping_pong=sum(r.ping_pong for r in per.values()),
        preemptions_undecided=sum(r.preemptions_undecided for r in per.values()),
        youngest_victim_seconds=min(youngest, default=None),
        lost_work_seconds=round(sum(r.lost_work_seconds for r in per.values()), 3),
        lost_work_by_cause={
            k: round(sum(r.lost_work_by_cause.get(k, 0.0) for r in per.values()), 3)
            for k in sorted({k for r in per.values() for k in r.lost_work_by_cause})
        },
        running_time_lost_seconds=round(sum(r.running_time_lost_seconds for r in per.values()), 3),
        opportunistic=Opportunistic(
            allocations=sum(r.opportunistic.allocations for r in per.values()),
            evictions=sum(r.opportunistic.evictions for r in per.values()),
            promoted=sum(r.opportunistic.promoted for r in per.values()),
            overcommit_kills=sum(r.opportunistic.overcommit_kills for r in per.values()),
        ),
        node_reservations={
            k: sum(r.node_reservations.get(k, 0) for r in per.values())
            for k in sorted({k for r in per.values() for k in r.node_reservations})
        },
        dereservations=sum(r.dereservations for r in per.values()),
        time_to_guarantee={f"{name}:{q}": v for name, r in per.items() for q, v in r.time_to_guarantee.items()},
        first_allocation_wait={
            f"{name}:{user}": v for name, r in per.items() for user, v in r.first_allocation_wait.items()
        },
        pending_at_end=sum(r.pending_at_end for r in per.values()),
        constraint_satisfied_placements=sum(r.constraint_satisfied_placements for r in per.values()),
        constrained_pending_at_end=sum(r.constrained_pending_at_end for r in per.values()),
        rejected=sum(r.rejected for r in per.values()),
        proposals_rejected=None if None in proposals_rejected else sum(x or 0 for x in proposals_rejected),
        budget_refusals=None if None in budget_refusals else sum(x or 0 for x in budget_refusals),
        slo_reservations={k: sum(r.slo_reservations.get(k, 0) for r in per.values()) for k in first.slo_reservations},
        invariant_violations=sum(r.invariant_violations for r in per.values()),
        counts=dict(sorted(counts.items())),
        partitions=per,
        **run,
    )
