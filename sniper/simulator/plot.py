"""Plots of a simulation: per-queue usage against guarantee over time, with preemptions marked.

Pure rendering of samples already taken; files are PNG written with matplotlib's Agg backend. The
resource plotted defaults to the partition's scarcest, measured: the one whose demand (usage plus
waiting asks) was the largest share of its capacity, time-averaged.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import PercentFormatter

from sniper.core.resources import MEMORY
from sniper.core.units import human
from sniper.messages import decisions as d
from sniper.simulator.metrics import Metrics


def scarcest_resource(metrics: Metrics) -> str:
    """The resource whose demand (usage plus waiting asks, whole partition) was the largest share of its
    capacity, averaged over the run (memory when nothing was sampled)."""
    weighted: dict[str, float] = {}
    for a, b in zip(metrics.samples, metrics.samples[1:], strict=False):
        dt = b.t - a.t
        used, waiting = a.usage.get("root", {}), a.pending.get("root", {})
        for k, cap in a.capacity.items():
            if cap > 0:
                weighted[k] = weighted.get(k, 0.0) + (used.get(k, 0) + waiting.get(k, 0)) / cap * dt
    return max(sorted(weighted), key=lambda k: weighted[k]) if weighted else MEMORY


def share_axis(ax: Axes) -> None:
    """A y axis of shares of the cluster, labelled in percent."""
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)


def capacity_label(metrics: Metrics, resource: str) -> str:
    """``memory (cluster: 2 TiB)``: the resource and the cluster's largest capacity of it, in human units."""
    peak = max((s.capacity.get(resource, 0) for s in metrics.samples), default=0)
    return f"{resource} (cluster: {human(resource, peak)})"


def plot_usage(metrics: Metrics, out: Path, title: str, resource: str | None = None) -> None:
    """One panel per leaf queue: usage and ideal (when known) as a share of the cluster in percent, guarantee dashed;
    ``resource`` defaults to the scarcest (:func:`scarcest_resource`)."""
    resource = resource or scarcest_resource(metrics)
    model = metrics.model
    leaves = [p for p, c in model.queue_cfg.items() if not c.children]
    samples = metrics.samples
    if not samples or not leaves:
        return
    times = [s.t for s in samples]
    fig, axes = plt.subplots(len(leaves), 1, figsize=(10, 2.2 * len(leaves) + 0.8), sharex=True, squeeze=False)
    preempt_times: dict[str, list[float]] = {}
    for x in metrics.decisions:
        if isinstance(x, d.Preempt):
            preempt_times.setdefault(x.queue, []).append(x.t)
    for ax, path in zip(axes[:, 0], leaves, strict=True):

        def share(values: dict[str, dict[str, int]], s_cap: dict[str, int], path: str = path) -> float:
            cap = s_cap.get(resource, 0)
            return values.get(path, {}).get(resource, 0) / cap if cap else 0.0

        ax.plot(
            times,
            [share(s.usage, s.capacity) for s in samples],
            label="usage",
            color="tab:blue",
            drawstyle="steps-post",
        )
        pending = [share(s.pending, s.capacity) for s in samples]
        ax.plot(times, pending, label="pending", color="tab:gray", alpha=0.5, drawstyle="steps-post")
        if any(s.ideal is not None for s in samples):
            ax.plot(
                times, [share(s.ideal or {}, s.capacity) for s in samples], label="ideal", color="tab:green", alpha=0.7
            )
        guaranteed = model.queue_cfg[path].guaranteed.get(resource, 0)
        ax.plot(
            times,
            [guaranteed / s.capacity[resource] if s.capacity.get(resource) else 0.0 for s in samples],
            "--",
            color="tab:red",
            label="guaranteed",
        )
        for t in preempt_times.get(path, []):
            ax.axvline(t, color="tab:orange", alpha=0.15, linewidth=1)
        ax.set_ylabel(path, rotation=0, ha="right", fontsize=8)
        share_axis(ax)
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("simulated seconds")
    fig.suptitle(title, fontsize=10)
    axes[0, 0].set_title(
        f"share of {capacity_label(metrics, resource)}; orange lines: preemptions of that queue", fontsize=8
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
