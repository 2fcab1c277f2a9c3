"""The simulator's metrics (ARCHITECTURE section 7), from samples of the independent cluster model and
from the decision log. Every time here is simulated seconds, except ``allocations_per_s`` (wall clock,
measured by the caller).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sniper.core import resources as res
from sniper.core.resources import Resource
from sniper.messages import decisions as d
from sniper.simulator.model import ClusterModel

IdealFn = Callable[[ClusterModel], dict[str, Resource]]


@dataclasses.dataclass(slots=True)
class Sample:
    t: float
    usage: dict[str, Resource]
    pending: dict[str, Resource]
    capacity: Resource
    ideal: dict[str, Resource] | None
    opportunistic: Resource = dataclasses.field(default_factory=dict)  # outside every queue's usage


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


class Metrics:
    def __init__(self, model: ClusterModel, ideal_fn: IdealFn | None = None) -> None:
        self.model = model
        self.ideal_fn = ideal_fn
        self.samples: list[Sample] = []
        self.decisions: list[d.DecisionMsg] = []
        self._open: dict[str, float] = {}
        self._episodes: dict[str, list[float]] = defaultdict(list)
        self._times: list[float] | None = None

    def record(self, dec: d.DecisionMsg) -> None:
        self.decisions.append(dec)

    def sample(self, t: float) -> None:
        model = self.model
        usage = model.queue_usage()
        pending = model.queue_pending()
        ideal = self.ideal_fn(model) if self.ideal_fn is not None else None
        if self.samples and self.samples[-1].t == t:
            self.samples.pop()
        self.samples.append(Sample(t, dict(usage), dict(pending), model.capacity(), ideal, model.opportunistic_usage()))
        for path, cfg in model.queue_cfg.items():
            if cfg.children or not cfg.guaranteed:
                continue
            u, p = usage.get(path, {}), pending.get(path, {})
            satisfied = all(u.get(k, 0) >= min(g, u.get(k, 0) + p.get(k, 0)) for k, g in cfg.guaranteed.items())
            if not satisfied and path not in self._open:
                self._open[path] = t
            elif satisfied and path in self._open:
                self._episodes[path].append(t - self._open.pop(path))

    # ------------------------------------------------------------------ summaries

    def utilization(self) -> dict[str, float]:
        used: Resource = {}
        cap: Resource = {}
        weighted_used: dict[str, float] = defaultdict(float)
        weighted_cap: dict[str, float] = defaultdict(float)
        for a, b in zip(self.samples, self.samples[1:], strict=False):
            dt = b.t - a.t
            used = a.usage.get("root", {})
            cap = a.capacity
            for k, v in cap.items():
                weighted_cap[k] += v * dt
                weighted_used[k] += used.get(k, 0) * dt
        return {k: round(weighted_used[k] / c, 4) for k, c in sorted(weighted_cap.items()) if c > 0}

    def opportunistic(self) -> dict[str, Any]:
        """Opportunistic containers, reported apart: how many were allocated, killed for guaranteed asks
        (reason ``opportunistic``) and promoted, and the utilization they added (time-averaged, per
        resource, over capacity; ``utilization`` counts guaranteed containers only)."""
        weighted: dict[str, float] = defaultdict(float)
        weighted_cap: dict[str, float] = defaultdict(float)
        for a, b in zip(self.samples, self.samples[1:], strict=False):
            dt = b.t - a.t
            for k, v in a.capacity.items():
                weighted_cap[k] += v * dt
                weighted[k] += a.opportunistic.get(k, 0) * dt
        decisions = self.decisions
        return {
            "allocations": sum(1 for x in decisions if isinstance(x, d.Allocated) and x.opportunistic),
            "evictions": sum(1 for x in decisions if isinstance(x, d.Kill) and x.reason == "opportunistic"),
            "promoted": sum(1 for x in decisions if isinstance(x, d.Promoted)),
            "utilization": {k: round(weighted[k] / c, 4) for k, c in sorted(weighted_cap.items()) if c > 0},
        }

    def fairness_gap(self) -> float | None:
        leaves = [p for p, c in self.model.queue_cfg.items() if not c.children]
        total = 0.0
        span = 0.0
        for a, b in zip(self.samples, self.samples[1:], strict=False):
            if a.ideal is None or not a.capacity:
                return None
            dt = b.t - a.t
            gap_by_resource: dict[str, float] = defaultdict(float)
            for path in leaves:
                u, i = a.usage.get(path, {}), a.ideal.get(path, {})
                for k in a.capacity:
                    gap_by_resource[k] += abs(u.get(k, 0) - i.get(k, 0))
            dominant = max((g / a.capacity[k] for k, g in gap_by_resource.items() if a.capacity.get(k)), default=0.0)
            total += dominant * dt
            span += dt
        return round(total / span, 4) if span > 0 else 0.0

    def time_to_guarantee(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        paths = sorted(set(self._episodes) | set(self._open))
        for path in paths:
            done = self._episodes.get(path, [])
            out[path] = {
                "episodes": len(done) + (1 if path in self._open else 0),
                "unmet": 1 if path in self._open else 0,
                "p50": round(_percentile(done, 0.5), 3) if done else None,
                "p99": round(_percentile(done, 0.99), 3) if done else None,
                "max": round(max(done), 3) if done else None,
            }
        return out

    def _below_ideal(self, queue: str, t: float) -> bool:
        sample = self._sample_at(t)
        if sample is None:
            return False
        usage = sample.usage.get(queue, {})
        target = (sample.ideal or {}).get(queue) if sample.ideal is not None else None
        if target is None:
            cfg = self.model.queue_cfg.get(queue)
            target = cfg.guaranteed if cfg is not None else {}
        return any(usage.get(k, 0) < v for k, v in target.items())

    def _sample_at(self, t: float) -> Sample | None:
        i = (
            bisect.bisect_right([s.t for s in self.samples], t)
            if self._times is None
            else bisect.bisect_right(self._times, t)
        )
        return self.samples[i - 1] if i else None

    def preemption_outcomes(self, grace: float, cycle: float) -> tuple[int, int, int]:
        """``(wasted, ping_pong, undecided)`` over every victim in the decision log; a victim whose
        window (grace plus one cycle) had not closed when the run ended is undecided, not wasted, and
        one whose preemption was cancelled (it kept running) is neither."""
        cancelled = {(x.allocation, x.reservation) for x in self.decisions if isinstance(x, d.PreemptCancelled)}
        preempts = [
            x
            for x in self.decisions
            if isinstance(x, d.Preempt)
            and not x.observe_only
            and not x.opportunistic
            and (x.allocation, x.reservation) not in cancelled
        ]
        if not preempts:
            return 0, 0, 0
        end = self.samples[-1].t if self.samples else 0.0
        gone_at: dict[str, float] = {}
        fulfilled: dict[str, float] = {}
        allocs_on_node: dict[str, list[d.Allocated]] = defaultdict(list)
        for x in self.decisions:
            if isinstance(x, d.Kill | d.Released | d.AllocationLost):
                gone_at.setdefault(x.allocation, x.t)
            elif isinstance(x, d.Allocated):
                allocs_on_node[x.node].append(x)
                if x.reservation:
                    fulfilled.setdefault(x.reservation, x.t)
        wasted = ping_pong = undecided = 0
        self._times = [s.t for s in self.samples]
        for pre in preempts:
            t_gone = gone_at.get(pre.allocation)
            window_end = max(t_gone if t_gone is not None else pre.t, pre.t + grace) + cycle
            if window_end > end:
                undecided += 1
                continue
            if t_gone is None:
                wasted += 1  # never left: its room was never freed
                continue
            if pre.reservation:
                got = fulfilled.get(pre.reservation)
                if got is not None and t_gone <= got <= window_end:
                    continue  # its beneficiary took the room it freed
                # Its own beneficiary placed first, the cache kept it only because another reservation
                # on the node counted on its room: useful if that one got the room in the window.
                kept_for_another = got is not None and got < t_gone
                if kept_for_another and any(
                    a.reservation and t_gone <= a.t <= window_end for a in allocs_on_node.get(pre.node, [])
                ):
                    continue
                wasted += 1
                continue
            later = [a for a in allocs_on_node.get(pre.node, []) if t_gone <= a.t <= window_end]
            if any(a.queue != pre.queue and self._below_ideal(a.queue, a.t) for a in later):
                continue
            wasted += 1
            if any(a.queue == pre.queue for a in later):
                ping_pong += 1
        return wasted, ping_pong, undecided

    def preemption_totals(self) -> dict[str, Any]:
        """Victims given notice (count and resources), and how many of those notices were cancelled
        (opportunistic containers killed first are counted apart, in :meth:`opportunistic`)."""
        preempts = [x for x in self.decisions if isinstance(x, d.Preempt) and not x.opportunistic]
        cancelled = sum(1 for x in self.decisions if isinstance(x, d.PreemptCancelled))
        return {"victims": len(preempts), "resources": res.total(x.resource for x in preempts), "cancelled": cancelled}

    def preemption_log(self, limit: int = 1000) -> list[dict[str, Any]]:
        return [
            {
                "t": x.t,
                "victim": x.allocation,
                "victim_queue": x.queue,
                "node": x.node,
                "beneficiary_ask": x.for_ask,
                "beneficiary_queue": x.for_queue,
                "cost": x.cost,
                "policy": x.policy,
                "reason": x.reason,
            }
            for x in self.decisions
            if isinstance(x, d.Preempt)
        ][:limit]
