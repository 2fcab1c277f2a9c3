"""Runs one trace under several policies and lays the reports side by side (table rows and a plot).

Each run is an independent simulation of the same events and config; only the policy differs. With
``jobs`` above one the policies run in parallel processes (each returns its report and metrics; the
actors stay in the worker). The table has a row per resource for utilization, fairness and stranded
capacity (idle while asks that could use it wait): preempted amounts in human units (``240 GiB``),
shares of capacity in percent (:mod:`sniper.core.units`). Runs with opportunistic containers add their
allocations, evictions and utilization; runs that over-commit add its kills and the utilization it gained;
runs with placement constraints add the placements that held them and the containers still waiting; a trace
that names a few users adds, per user, their apps' longest wait for a first allocation.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from sniper.core.config import SchedulerConfig
from sniper.core.units import human, percent
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.ideal_view import ideal_for_model
from sniper.simulator.metrics import Metrics
from sniper.simulator.plot import capacity_label, scarcest_resource, share_axis
from sniper.simulator.report import Report
from sniper.simulator.run import SimulationSettings, run_simulation


@dataclasses.dataclass(slots=True)
class PolicyRun:
    """One policy's run as compare keeps it: the report, the per-partition metrics (samples) and the
    decisions."""

    summary: Report
    metrics: dict[str, Metrics]
    decisions: list[d.DecisionMsg]

    @property
    def report(self) -> dict[str, Any]:
        """The report as JSON-ready builtins (the struct is :attr:`summary`)."""
        return self.summary.to_dict()

    @property
    def violations(self) -> int:
        return self.summary.invariant_violations


ROWS: tuple[tuple[str, Callable[[Report], Any]], ...] = (
    ("allocations", lambda r: r.allocations),
    ("preempted containers", lambda r: r.preemptions.victims),
    ("preemptions cancelled", lambda r: r.preemptions.cancelled),
    ("wasted preemptions", lambda r: r.wasted_preemptions),
    ("youngest victim (s)", lambda r: r.youngest_victim_seconds),
    ("ping-pong", lambda r: r.ping_pong),
    ("guarantee episodes unmet", lambda r: sum(v.unmet for v in r.time_to_guarantee.values())),
    ("time to guarantee max (s)", lambda r: _worst(r, "max")),
    ("time to guarantee p50 (s)", lambda r: _worst(r, "p50")),
    ("fairness gap", lambda r: r.fairness_gap),
    ("lost work (container-s)", lambda r: r.lost_work_seconds),
    ("lost work as running time (container-s)", lambda r: r.running_time_lost_seconds),
    ("pending at end", lambda r: r.pending_at_end),
    ("rejected", lambda r: r.rejected),
    ("proposals rejected", lambda r: r.proposals_rejected),
    ("budget refusals", lambda r: r.budget_refusals),
    ("invariant violations", lambda r: r.invariant_violations),
    ("wall clock (s)", lambda r: r.wall_seconds),
)
# Per resource: preempted amounts in human units, the rest shares of capacity in percent.
PER_RESOURCE: tuple[tuple[str, Callable[[Report], dict[str, Any]], bool], ...] = (
    ("preempted", lambda r: dict(r.preemptions.resources), True),
    ("utilization", lambda r: dict(r.utilization), False),
    ("fairness gap", lambda r: dict(r.fairness), False),
    ("stranded", lambda r: dict(r.stranded), False),
)


def _worst(report: Report, key: str) -> float | None:
    values = [getattr(v, key) for v in report.time_to_guarantee.values() if getattr(v, key) is not None]
    return max(values) if values else None


def _run_policy(events: list[f.Feed], config: SchedulerConfig | None, settings: SimulationSettings) -> PolicyRun:
    result = run_simulation(events, config, settings, ideal_fn=ideal_for_model)
    return PolicyRun(result.summary, result.metrics, result.decisions)


def compare(
    events: list[f.Feed],
    config: SchedulerConfig | None,
    policies: list[str],
    settings: SimulationSettings,
    progress: Callable[[str, float, float | None], None] | None = None,
    *,
    jobs: int = 1,
) -> dict[str, PolicyRun]:
    """Run every policy; ``jobs`` > 1 runs them in that many processes (progress then per finished run)."""
    per_policy = {policy: dataclasses.replace(settings, policy=policy) for policy in policies}
    if jobs > 1 and len(policies) > 1:
        with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(policies))) as pool:
            futures = {pool.submit(_run_policy, events, config, s): p for p, s in per_policy.items()}
            done: dict[str, PolicyRun] = {}
            for future in concurrent.futures.as_completed(futures):
                policy = futures[future]
                done[policy] = future.result()
                if progress is not None:
                    progress(policy, 1.0, 1.0)
        return {policy: done[policy] for policy in policies}
    results: dict[str, PolicyRun] = {}
    for policy, run_settings in per_policy.items():

        def step(now: float, end: float | None, policy: str = policy) -> None:
            if progress is not None:
                progress(policy, now, end)

        result = run_simulation(events, config, run_settings, progress=step, ideal_fn=ideal_for_model)
        results[policy] = PolicyRun(result.summary, result.metrics, result.decisions)
    return results


# Shown only when some run allocated opportunistic containers.
OPPORTUNISTIC_ROWS: tuple[tuple[str, Callable[[Report], Any]], ...] = (
    ("opportunistic allocations", lambda r: r.opportunistic.allocations),
    ("opportunistic evictions", lambda r: r.opportunistic.evictions),
)

# Shown only when some run over-committed a node.
OVERCOMMIT_ROWS: tuple[tuple[str, Callable[[Report], Any]], ...] = (
    ("over-commit kills", lambda r: r.opportunistic.overcommit_kills),
)


# Shown only when some run placed a container of an ask with placement constraints.
CONSTRAINT_ROWS: tuple[tuple[str, Callable[[Report], Any]], ...] = (
    ("constraint-satisfied placements", lambda r: r.constraint_satisfied_placements),
    ("pending by constraint at end", lambda r: r.constrained_pending_at_end),
)


# Shown only when some run sent a preemption request (YARN capacity monitor's actions, cheapest first).
ACTION_ROWS: tuple[tuple[str, Callable[[Report], Any]], ...] = (
    ("action dereservation", lambda r: r.actions.get("dereservation", 0)),
    ("action preempt_request", lambda r: r.actions.get("preempt_request", 0)),
    ("action preempt", lambda r: r.actions.get("preempt", 0)),
    ("action kill", lambda r: r.actions.get("kill", 0)),
)


# Shown only when some run saw an SLO reservation submitted.
SLO_ROWS: tuple[tuple[str, Callable[[Report], Any]], ...] = (
    ("SLO reservations accepted", lambda r: r.slo_reservations.get("accepted", 0)),
    ("SLO reservations rejected", lambda r: r.slo_reservations.get("rejected", 0)),
    ("SLO reservations met", lambda r: r.slo_reservations.get("met", 0)),
    ("SLO reservations missed", lambda r: r.slo_reservations.get("missed", 0)),
)


# The users a table shows one row each for (their apps' longest wait for a first allocation), at most.
USER_ROWS_UP_TO = 8


def table_rows(results: dict[str, PolicyRun]) -> list[list[str]]:
    reports = [r.summary for r in results.values()]
    opportunistic = any(r.opportunistic.allocations for r in reports)
    rows = [[label] + [_fmt(get(r)) for r in reports] for label, get in ROWS]
    overcommit = any(r.opportunistic.overcommit_kills or r.opportunistic.overcommit_utilization for r in reports)
    if opportunistic:
        rows += [[label] + [_fmt(get(r)) for r in reports] for label, get in OPPORTUNISTIC_ROWS]
    if overcommit:
        rows += [[label] + [_fmt(get(r)) for r in reports] for label, get in OVERCOMMIT_ROWS]
    if any(r.constraint_satisfied_placements or r.constrained_pending_at_end for r in reports):
        rows += [[label] + [_fmt(get(r)) for r in reports] for label, get in CONSTRAINT_ROWS]
    if any(r.actions.get("preempt_request") for r in reports):
        rows += [[label] + [_fmt(get(r)) for r in reports] for label, get in ACTION_ROWS]
    if any(r.slo_reservations.get("accepted") or r.slo_reservations.get("rejected") for r in reports):
        rows += [[label] + [_fmt(get(r)) for r in reports] for label, get in SLO_ROWS]
    users = sorted({u for r in reports for u in r.first_allocation_wait})
    if len(users) <= USER_ROWS_UP_TO:
        rows += [
            [f"first allocation wait max {user} (s)"]
            + [_fmt(w.max if (w := r.first_allocation_wait.get(user)) else None) for r in reports]
            for user in users
        ]
    causes = sorted({k for r in reports for k in r.lost_work_by_cause})
    rows += [
        [f"lost work {cause} (container-s)"] + [_fmt(round(r.lost_work_by_cause.get(cause, 0.0))) for r in reports]
        for cause in causes
    ]
    per_resource = PER_RESOURCE
    if opportunistic:
        per_resource += (("opportunistic utilization", lambda r: dict(r.opportunistic.utilization), False),)
    if overcommit:
        per_resource += (("over-commit utilization", lambda r: dict(r.opportunistic.overcommit_utilization), False),)
    for label, get, amounts in per_resource:
        values = [get(r) for r in reports]
        for resource in sorted({k for v in values for k in v}):
            cells = [
                "-" if resource not in v else human(resource, v[resource]) if amounts else percent(v[resource])
                for v in values
            ]
            rows.append([f"{label} {resource}", *cells])
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    return str(value)


def plot_compare(results: dict[str, PolicyRun], out: Path, title: str, resource: str | None = None) -> None:
    """Per leaf queue, its share of ``resource`` (default: the scarcest, measured on the first run) over
    time under each policy, with preemptions as ticks below."""
    first = next(iter(results.values()))
    metrics = next(iter(first.metrics.values()))
    resource = resource or scarcest_resource(metrics)
    leaves = [p for p, c in metrics.model.queue_cfg.items() if not c.children]
    fig, axes = plt.subplots(
        len(leaves) + 1, 1, figsize=(10, 2.2 * (len(leaves) + 1) + 0.6), sharex=True, squeeze=False
    )
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    for i, (policy, result) in enumerate(results.items()):
        m = next(iter(result.metrics.values()))
        times = [s.t for s in m.samples]
        for ax, path in zip(axes[:-1, 0], leaves, strict=True):
            values = [
                s.usage.get(path, {}).get(resource, 0) / s.capacity[resource] if s.capacity.get(resource) else 0.0
                for s in m.samples
            ]
            ax.plot(times, values, color=colors[i % len(colors)], label=policy, drawstyle="steps-post")
            ax.set_ylabel(path, rotation=0, ha="right", fontsize=8)
        preempt_times = [x.t for x in result.summary.preemption_log]
        axes[-1, 0].scatter(preempt_times, [i] * len(preempt_times), s=4, color=colors[i % len(colors)])
    for ax, path in zip(axes[:-1, 0], leaves, strict=True):
        cap_share = [
            metrics.model.queue_cfg[path].guaranteed.get(resource, 0) / s.capacity[resource]
            if s.capacity.get(resource)
            else 0
            for s in metrics.samples
        ]
        ax.plot(
            [s.t for s in metrics.samples], cap_share, "--", color="tab:red", label="guaranteed", drawstyle="steps-post"
        )
        share_axis(ax)
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=len(results) + 1)
    axes[-1, 0].set_yticks(range(len(results)), list(results))
    axes[-1, 0].set_ylabel("preemptions", rotation=0, ha="right", fontsize=8)
    axes[-1, 0].set_xlabel("simulated seconds")
    fig.suptitle(f"{title}: share of {capacity_label(metrics, resource)} per queue under each policy", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


# The scenario table of docs/benchmarks.md: one row per bundled scenario, each cell "sniper / proportional /
# none" (or whichever policies were run, in order).
SCENARIO_COLUMNS: tuple[tuple[str, Callable[[Report], Any]], ...] = (
    ("preempted", lambda r: r.preemptions.victims),
    ("cancelled", lambda r: r.preemptions.cancelled),
    ("wasted", lambda r: r.wasted_preemptions),
    ("guarantee episodes unmet", lambda r: sum(v.unmet for v in r.time_to_guarantee.values())),
    ("time to guarantee max (s)", lambda r: _worst(r, "max")),
    ("fairness gap", lambda r: r.fairness_gap),
    ("lost work (container-s)", lambda r: round(r.lost_work_seconds)),
    ("violations", lambda r: r.invariant_violations),
)


def scenario_row(name: str, results: dict[str, PolicyRun]) -> list[str]:
    """One scenario's row of the scenario table: every column's value under each policy, ``/``-separated."""
    reports = [run.summary for run in results.values()]
    return [f"`{name}`"] + [" / ".join(_fmt(get(r)) for r in reports) for _, get in SCENARIO_COLUMNS]
