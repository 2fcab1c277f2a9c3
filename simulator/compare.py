"""Runs one trace under several policies and lays the reports side by side (table rows and a plot).

Each run is an independent simulation of the same events and config; only the policy differs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from sniper.core.config import SchedulerConfig
from sniper.core.resources import MEMORY
from sniper.messages import feed as f
from sniper.simulator.ideal_view import ideal_for_model
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation

ROWS: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("allocations", lambda r: r["allocations"]),
    ("preempted containers", lambda r: r["preemptions"]["victims"]),
    ("preempted memory (MiB)", lambda r: r["preemptions"]["resources"].get(MEMORY, 0)),
    ("preemptions cancelled", lambda r: r["preemptions"]["cancelled"]),
    ("wasted preemptions", lambda r: r["wasted_preemptions"]),
    ("ping-pong", lambda r: r["ping_pong"]),
    ("guarantee episodes unmet", lambda r: sum(v["unmet"] for v in r["time_to_guarantee"].values())),
    ("time to guarantee max (s)", lambda r: _worst(r, "max")),
    ("time to guarantee p50 (s)", lambda r: _worst(r, "p50")),
    ("fairness gap", lambda r: r["fairness_gap"]),
    ("utilization memory", lambda r: r["utilization"].get(MEMORY)),
    ("lost work (container-s)", lambda r: r["lost_work_seconds"]),
    ("pending at end", lambda r: r["pending_at_end"]),
    ("proposals rejected", lambda r: r["proposals_rejected"]),
    ("invariant violations", lambda r: r["invariant_violations"]),
)


def _worst(report: dict[str, Any], key: str) -> float | None:
    values = [v[key] for v in report["time_to_guarantee"].values() if v[key] is not None]
    return max(values) if values else None


def compare(
    events: list[f.Feed],
    config: SchedulerConfig | None,
    policies: list[str],
    settings: SimulationSettings,
    progress: Callable[[str, float, float | None], None] | None = None,
) -> dict[str, SimulationResult]:
    results: dict[str, SimulationResult] = {}
    for policy in policies:
        run_settings = SimulationSettings(
            until=settings.until, seed=settings.seed, tick=settings.tick, policy=policy, batch=settings.batch
        )

        def step(now: float, end: float | None, policy: str = policy) -> None:
            if progress is not None:
                progress(policy, now, end)

        results[policy] = run_simulation(events, config, run_settings, progress=step, ideal_fn=ideal_for_model)
    return results


# Shown only when some run allocated opportunistic containers.
OPPORTUNISTIC_ROWS: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("opportunistic allocations", lambda r: r.get("opportunistic", {}).get("allocations")),
    ("opportunistic evictions", lambda r: r.get("opportunistic", {}).get("evictions")),
    ("opportunistic utilization memory", lambda r: r.get("opportunistic", {}).get("utilization", {}).get(MEMORY)),
)


def table_rows(results: dict[str, SimulationResult]) -> list[list[str]]:
    rows = []
    shown = ROWS
    if any(r.report.get("opportunistic", {}).get("allocations") for r in results.values()):
        shown = ROWS + OPPORTUNISTIC_ROWS
    for label, get in shown:
        rows.append([label] + [_fmt(get(r.report)) for r in results.values()])
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    return str(value)


def plot_compare(results: dict[str, SimulationResult], out: Path, title: str) -> None:
    """Per leaf queue, memory usage over time under each policy, with preemptions as ticks below."""
    first = next(iter(results.values()))
    metrics = next(iter(first.metrics.values()))
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
                s.usage.get(path, {}).get(MEMORY, 0) / s.capacity[MEMORY] if s.capacity.get(MEMORY) else 0.0
                for s in m.samples
            ]
            ax.plot(times, values, color=colors[i % len(colors)], label=policy)
            ax.set_ylabel(path, rotation=0, ha="right", fontsize=8)
        preempt_times = [x["t"] for x in result.report.get("preemption_log", [])]
        axes[-1, 0].scatter(preempt_times, [i] * len(preempt_times), s=4, color=colors[i % len(colors)])
    for ax, path in zip(axes[:-1, 0], leaves, strict=True):
        cap_share = [
            metrics.model.queue_cfg[path].guaranteed.get(MEMORY, 0) / s.capacity[MEMORY]
            if s.capacity.get(MEMORY)
            else 0
            for s in metrics.samples
        ]
        ax.plot([s.t for s in metrics.samples], cap_share, "--", color="tab:red", label="guaranteed")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=len(results) + 1)
    axes[-1, 0].set_yticks(range(len(results)), list(results))
    axes[-1, 0].set_ylabel("preemptions", rotation=0, ha="right", fontsize=8)
    axes[-1, 0].set_xlabel("simulated seconds")
    fig.suptitle(f"{title}: memory share per queue under each policy", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
