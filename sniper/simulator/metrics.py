"""The simulator's metrics (architecture: Metrics), from samples of the independent cluster model and
from the decision log. Every time here is simulated seconds, except ``allocations_per_s`` (wall clock,
measured by the caller).

A sample is taken only when the model changed since the last one (its ``version``), so the ideal
assignment is recomputed once per change, never per tick; between samples the state is constant, so
the time averages (utilization, fairness, stranded capacity) integrate exactly over the samples, and
:meth:`Metrics.finish` closes the last interval at the end of the run. Above/below questions use the
one DRF comparison, :func:`sniper.core.resources.drf_compare`.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterator

import msgspec

from sniper.core import resources as res
from sniper.core.resources import Resource
from sniper.messages import decisions as d
from sniper.simulator.model import ClusterModel
from sniper.simulator.quota_check import QUOTA as QUOTA_POLICY

# The four actions of YARN's capacity monitor, cheapest first, and the decisions that count as each.
ACTIONS: dict[str, tuple[type, ...]] = {
    "dereservation": (d.NodeUnreserved,),  # those a policy cancelled (reason ``dereserved``)
    "preempt_request": (d.PreemptRequest,),
    "preempt": (d.Preempt,),
    "kill": (d.Kill,),
}

# The ideal assignment of the model's current figures: a function of its config, capacity, queue usage
# and queue demand alone (a sample whose figures equal the last sample's reuses the last answer).
IdealFn = Callable[[ClusterModel], dict[str, Resource]]


@dataclasses.dataclass(slots=True)
class Sample:
    t: float
    usage: dict[str, Resource]
    pending: dict[str, Resource]
    capacity: Resource
    ideal: dict[str, Resource] | None
    opportunistic: Resource = dataclasses.field(default_factory=dict)  # outside every queue's usage
    overcommitted: Resource = dataclasses.field(default_factory=dict)  # the part of it on over-committed room


class TimeToGuarantee(msgspec.Struct, frozen=True):
    episodes: int
    unmet: int
    p50: float | None
    p99: float | None
    max: float | None


class FirstAllocationWait(msgspec.Struct, frozen=True):
    apps: int
    p50: float
    max: float


class Preemptions(msgspec.Struct, frozen=True):
    victims: int = 0
    resources: dict[str, int] = {}
    cancelled: int = 0


class PreemptionLogEntry(msgspec.Struct, frozen=True, kw_only=True):
    t: float
    victim: str
    victim_queue: str
    node: str
    reason: str
    beneficiary_ask: str = ""  # none for a de-reservation or a kill at a request's deadline
    beneficiary_queue: str = ""
    cost: float = 0.0
    policy: str = ""
    # The capacity monitor's action: "preempt" (a notice, killed after the grace), "preempt_request" (a container a
    # preemption request named), "kill" (killed at a request's deadline: what the AM did not give back).
    action: str = "preempt"


class Opportunistic(msgspec.Struct, frozen=True):
    """Opportunistic containers, apart from every queue's figures (docs/report.md)."""

    allocations: int = 0  # allocated decisions with opportunistic: true
    evictions: int = 0  # killed at once (reason "opportunistic") for a guaranteed ask
    promoted: int = 0  # turned guaranteed
    utilization: dict[str, float] = {}  # what they held over capacity, time-averaged, per resource
    overcommit_kills: int = 0  # killed at once (reason "overcommit") for a node above preempt_above
    overcommit_utilization: dict[str, float] = {}  # the part of ``utilization`` over-committed room held


def within_guarantee(after: Resource, guaranteed: Resource, capacity: Resource) -> bool:
    """Whether a queue holding ``after`` is not beyond its guarantee: the DRF comparison on the resources the
    guarantee names (the others are not guaranteed). A queue whose every pending container would take it
    beyond its guarantee is at it: containers are whole."""
    return not res.drf_above({k: after.get(k, 0) for k in guaranteed}, guaranteed, capacity)


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
        self._sampled_version = -1
        self._last_ideal: tuple[tuple[object, ...], dict[str, Resource] | None] | None = None  # (figures, ideal)

    def record(self, dec: d.DecisionMsg) -> None:
        self.decisions.append(dec)

    def sample(self, t: float) -> bool:
        """Sample the model at ``t`` if it changed since the last sample (else the last one holds);
        returns whether it did."""
        model = self.model
        if model.version == self._sampled_version:
            return False
        self._sampled_version = model.version
        derived = model.derived()
        usage, pending, capacity = derived.usage, derived.pending, derived.capacity
        ideal = self._ideal(model, (model.config, capacity, usage, derived.demand))
        if self.samples and self.samples[-1].t == t:
            self.samples.pop()
        self.samples.append(Sample(t, usage, pending, capacity, ideal, derived.opportunistic, derived.overcommitted))
        for path, cfg in model.queue_cfg.items():
            if cfg.children or not cfg.guaranteed:
                continue
            u, p = usage.get(path, {}), derived.demand.get(path, {})  # asks a limit holds back are no demand
            if res.any_positive(p):
                target = res.component_min(cfg.guaranteed, res.add(u, p))
                satisfied = not res.drf_below(u, target, capacity) or not any(
                    within_guarantee(res.add(u, shape), cfg.guaranteed, capacity)
                    for shape in derived.shapes.get(path, ())
                )
            else:
                # Without demand the target is at most the usage on every resource: never DRF-below it.
                satisfied = True
            if not satisfied and path not in self._open:
                self._open[path] = t
            elif satisfied and path in self._open:
                self._episodes[path].append(t - self._open.pop(path))
        return True

    def _ideal(self, model: ClusterModel, figures: tuple[object, ...]) -> dict[str, Resource] | None:
        """The ideal of ``figures`` (config, capacity, usage, demand): the last one's when they are equal
        (the config by identity), as churn often returns the model to the figures it just left."""
        if self.ideal_fn is None:
            return None
        last = self._last_ideal
        if last is not None and last[0][0] is figures[0] and last[0][1:] == figures[1:]:
            return last[1]
        ideal = self.ideal_fn(model)
        self._last_ideal = (figures, ideal)
        return ideal

    def finish(self, t: float) -> None:
        """Close the run at ``t``: the last state held until then."""
        self.model.slo.finish(t)
        if self.samples and self.samples[-1].t < t:
            last = self.samples[-1]
            self.samples.append(Sample(t, last.usage, last.pending, last.capacity, last.ideal))

    # ------------------------------------------------------------------ summaries

    def _intervals(self) -> Iterator[tuple[Sample, float]]:
        for a, b in zip(self.samples, self.samples[1:], strict=False):
            if b.t > a.t:
                yield a, b.t - a.t

    def utilization(self) -> dict[str, float]:
        """Time-averaged allocated over capacity, per resource."""
        weighted_used: dict[str, float] = defaultdict(float)
        weighted_cap: dict[str, float] = defaultdict(float)
        for a, dt in self._intervals():
            used = a.usage.get("root", {})
            for k, v in a.capacity.items():
                weighted_cap[k] += v * dt
                weighted_used[k] += used.get(k, 0) * dt
        return {k: round(weighted_used[k] / c, 4) for k, c in sorted(weighted_cap.items()) if c > 0}

    def opportunistic(self) -> Opportunistic:
        """Opportunistic containers, reported apart: how many were allocated, killed for guaranteed asks
        (reason ``opportunistic``) and promoted, and the utilization they added (time-averaged, per
        resource, over capacity; ``utilization`` counts guaranteed containers only); of it, what
        over-commit gained (those placed on over-committed room), and its kills (reason ``overcommit``)."""
        weighted: dict[str, float] = defaultdict(float)
        gained: dict[str, float] = defaultdict(float)
        weighted_cap: dict[str, float] = defaultdict(float)
        for a, dt in self._intervals():
            for k, v in a.capacity.items():
                weighted_cap[k] += v * dt
                weighted[k] += a.opportunistic.get(k, 0) * dt
                gained[k] += a.overcommitted.get(k, 0) * dt
        decisions = self.decisions
        return Opportunistic(
            allocations=sum(1 for x in decisions if isinstance(x, d.Allocated) and x.opportunistic),
            evictions=sum(1 for x in decisions if isinstance(x, d.Kill) and d.cause_of(x) == "opportunistic"),
            promoted=sum(1 for x in decisions if isinstance(x, d.Promoted)),
            utilization={k: round(weighted[k] / c, 4) for k, c in sorted(weighted_cap.items()) if c > 0},
            overcommit_kills=sum(1 for x in decisions if isinstance(x, d.Kill) and d.cause_of(x) == "overcommit"),
            overcommit_utilization={
                k: round(gained[k] / c, 4) for k, c in sorted(weighted_cap.items()) if c > 0 and gained[k] > 0
            },
        )

    def stranded(self) -> dict[str, float]:
        """Time-averaged share of each resource left idle while waiting asks could use it: free capacity
        up to the waiting demand for that resource (idle GPUs while GPU asks wait, fragmentation
        included), over capacity."""
        weighted: dict[str, float] = defaultdict(float)
        weighted_cap: dict[str, float] = defaultdict(float)
        for a, dt in self._intervals():
            used, waiting = a.usage.get("root", {}), a.pending.get("root", {})
            for k, cap in a.capacity.items():
                weighted_cap[k] += cap * dt
                weighted[k] += min(max(0, cap - used.get(k, 0)), waiting.get(k, 0)) * dt
        return {k: round(weighted[k] / c, 4) for k, c in sorted(weighted_cap.items()) if c > 0}

    def _gaps(self) -> Iterator[tuple[Sample, float, dict[str, float]]]:
        """Per interval: the sum over leaf queues of |usage - ideal| per resource, as a share of capacity."""
        leaves = [p for p, c in self.model.queue_cfg.items() if not c.children]
        for a, dt in self._intervals():
            if a.ideal is None:
                continue
            gaps: dict[str, float] = {}
            for k, cap in a.capacity.items():
                if cap:
                    gap = sum(abs(a.usage.get(p, {}).get(k, 0) - a.ideal.get(p, {}).get(k, 0)) for p in leaves)
                    gaps[k] = gap / cap
            yield a, dt, gaps

    def fairness(self) -> dict[str, float]:
        """Time-averaged fairness gap per resource (empty without an ideal assignment)."""
        total: dict[str, float] = defaultdict(float)
        span = 0.0
        for _, dt, gaps in self._gaps():
            span += dt
            for k, g in gaps.items():
                total[k] += g * dt
        return {k: round(v / span, 4) for k, v in sorted(total.items())} if span > 0 else {}

    def fairness_gap(self) -> float | None:
        """Time-averaged fairness gap of the dominant resource at each moment (None without an ideal)."""
        if self.ideal_fn is None:
            return None
        total = span = 0.0
        for _, dt, gaps in self._gaps():
            total += max(gaps.values(), default=0.0) * dt
            span += dt
        return round(total / span, 4) if span > 0 else 0.0

    def time_to_guarantee(self) -> dict[str, TimeToGuarantee]:
        out: dict[str, TimeToGuarantee] = {}
        for path in sorted(set(self._episodes) | set(self._open)):
            done = self._episodes.get(path, [])
            out[path] = TimeToGuarantee(
                episodes=len(done) + (1 if path in self._open else 0),
                unmet=1 if path in self._open else 0,
                p50=round(_percentile(done, 0.5), 3) if done else None,
                p99=round(_percentile(done, 0.99), 3) if done else None,
                max=round(max(done), 3) if done else None,
            )
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
        return res.drf_below(usage, target, sample.capacity)

    def _sample_at(self, t: float) -> Sample | None:
        i = (
            bisect.bisect_right([s.t for s in self.samples], t)
            if self._times is None
            else bisect.bisect_right(self._times, t)
        )
        return self.samples[i - 1] if i else None

    def preemption_outcomes(self, grace: float, cycle: float) -> tuple[int, int, int]:
        """``(wasted, ping_pong, undecided)`` over every victim in the decision log.

        A victim's window is grace plus one cycle from its notice (or from when it left, if later). It
        is wasted when its room was not used in that window by its beneficiary (reserved victims) or by
        a queue below its ideal (untargeted ones), or when it was killed although its beneficiary had
        already been placed on other room; it ping-pongs when, wasted, its room went back to its own
        queue. A quota victim (policy ``quota``) is useful once it left. Undecided: the window had not
        closed when the run ended. A cancelled notice (the victim kept running) is neither wasted nor
        undecided.
        """
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
        placed_at: dict[tuple[str, str], list[tuple[float, str | None]]] = defaultdict(list)  # -> (t, reservation)
        allocs_on_node: dict[str, list[d.Allocated]] = defaultdict(list)
        for x in self.decisions:
            if isinstance(x, d.Kill | d.Released | d.AllocationLost):
                gone_at.setdefault(x.allocation, x.t)
            elif isinstance(x, d.Allocated):
                allocs_on_node[x.node].append(x)
                placed_at[(x.app, x.ask)].append((x.t, x.reservation))
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
            if pre.policy == QUOTA_POLICY:
                continue  # it left: its queue is that much nearer its max, which is all it was for
            later = [a for a in allocs_on_node.get(pre.node, []) if t_gone <= a.t <= window_end]
            if pre.reservation and self._reserved_victim_useful(pre, t_gone, window_end, fulfilled, placed_at, later):
                continue
            if not pre.reservation and any(a.queue != pre.queue and self._below_ideal(a.queue, a.t) for a in later):
                continue
            wasted += 1
            if any(a.queue == pre.queue for a in later):
                ping_pong += 1
        return wasted, ping_pong, undecided

    @staticmethod
    def _reserved_victim_useful(
        pre: d.Preempt,
        t_gone: float,
        window_end: float,
        fulfilled: dict[str, float],
        placed_at: dict[tuple[str, str], list[tuple[float, str | None]]],
        later: list[d.Allocated],
    ) -> bool:
        elsewhere = any(
            pre.t <= t <= t_gone and reservation != pre.reservation
            for t, reservation in placed_at.get((pre.for_app, pre.for_ask), [])
        )
        got = fulfilled.get(pre.reservation)
        if got is not None and t_gone <= got <= window_end:
            return True  # its beneficiary took the room it freed
        if elsewhere and got is None:
            return False  # killed although its beneficiary had been placed on other room
        # Its own beneficiary placed first, the cache kept it only because another reservation on the
        # node counted on its room: useful if that one got the room in the window.
        return got is not None and got < t_gone and any(a.reservation for a in later)

    def preemption_totals(self) -> Preemptions:
        """Victims given notice (count and resources), and how many of those notices were cancelled
        (opportunistic containers killed first are counted apart, in :meth:`opportunistic`; containers a
        preemption request named, in :meth:`actions`)."""
        preempts = [x for x in self.decisions if isinstance(x, d.Preempt) and not x.opportunistic]
        noticed = {x.allocation for x in preempts}  # a preemption request's containers got no notice
        cancelled = sum(1 for x in self.decisions if isinstance(x, d.PreemptCancelled) and x.allocation in noticed)
        resources = res.total(x.resource for x in preempts)
        return Preemptions(victims=len(preempts), resources=resources, cancelled=cancelled)

    def youngest_victim(self) -> float | None:
        """How long the youngest guaranteed victim had run when it got its notice (``None``: no victim):
        what ``preemption.min.runtime`` bounds from below."""
        started = {x.allocation: x.t for x in self.decisions if isinstance(x, d.Allocated)}
        ages = [
            x.t - started[x.allocation]
            for x in self.decisions
            if isinstance(x, d.Preempt) and not x.opportunistic and x.allocation in started
        ]
        return round(min(ages), 3) if ages else None

    def first_allocation_wait(self) -> dict[str, FirstAllocationWait]:
        """Per user named in ``app_added``, how long their apps waited from submission to their first
        allocation (apps never served are not counted): who a queue's order served first."""
        first: dict[str, float] = {}
        for x in self.decisions:
            if isinstance(x, d.Allocated):
                first.setdefault(x.app, x.t)
        waits: dict[str, list[float]] = defaultdict(list)
        submitted, users = self.model.app_submitted, self.model.app_user
        for app, t in first.items():
            user = users.get(app, "")
            if user and app in submitted:
                waits[user].append(t - submitted[app])
        return {
            user: FirstAllocationWait(apps=len(w), p50=round(_percentile(w, 0.5), 3), max=round(max(w), 3))
            for user, w in sorted(waits.items())
        }

    def actions(self) -> dict[str, int]:
        """The capacity monitor's actions, cheapest first: de-reservations, preemption requests, notices (without
        the opportunistic containers killed at once, counted in :meth:`opportunistic`) and kills."""
        out = dict.fromkeys(ACTIONS, 0)
        for x in self.decisions:
            if isinstance(x, d.PreemptRequest | d.Preempt) and x.observe_only:
                continue
            if (isinstance(x, d.Preempt) and x.opportunistic) or (
                isinstance(x, d.Kill) and d.cause_of(x) in ("opportunistic", "overcommit")
            ):
                continue
            if isinstance(x, d.NodeUnreserved) and x.reason != d.DERESERVED:
                continue
            for action, kinds in ACTIONS.items():
                if isinstance(x, kinds):
                    out[action] += 1
        return out

    def preemption_log(self, limit: int = 1000) -> list[PreemptionLogEntry]:
        """Every de-reservation, every notice, every container a preemption request named, and every kill
        at a request's deadline, in decision order, each naming its action."""
        out: list[PreemptionLogEntry] = []
        for x in self.decisions:
            if isinstance(x, d.Preempt):
                out.append(
                    PreemptionLogEntry(
                        t=x.t,
                        victim=x.allocation,
                        victim_queue=x.queue,
                        node=x.node,
                        beneficiary_ask=x.for_ask,
                        beneficiary_queue=x.for_queue,
                        cost=x.cost,
                        policy=x.policy,
                        reason=x.reason,
                    )
                )
            elif isinstance(x, d.PreemptRequest):
                out.extend(
                    PreemptionLogEntry(
                        t=x.t,
                        victim=c.allocation,
                        victim_queue=x.queue,
                        node=c.node,
                        beneficiary_ask=c.for_ask,
                        beneficiary_queue=c.for_queue,
                        cost=0.0,
                        policy=x.policy,
                        reason=f"{x.request}: {x.reason}",
                        action="preempt_request",
                    )
                    for c in x.containers
                )
            elif isinstance(x, d.NodeUnreserved) and x.reason == d.DERESERVED:
                out.append(
                    PreemptionLogEntry(
                        t=x.t,
                        victim=x.reservation,
                        victim_queue=x.queue,
                        node=x.node,
                        policy=x.policy,
                        reason=f"node reservation of {x.app}/{x.ask} cancelled: {x.queue} above its ideal",
                        action="dereservation",
                    )
                )
            elif isinstance(x, d.Kill) and d.cause_of(x) == "request_deadline":
                out.append(
                    PreemptionLogEntry(
                        t=x.t,
                        victim=x.allocation,
                        victim_queue=x.queue,
                        node=x.node,
                        reason=x.reason,
                        action="kill",
                    )
                )
            if len(out) >= limit:
                break
        return out[:limit]
