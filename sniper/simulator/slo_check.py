"""SLO reservations as an outside observer sees them (architecture: invariant 14), and whether each met its
deadline (docs/report.md ``slo_reservations``, ``slo_reservation_log``).

Part of :class:`~sniper.simulator.model.ClusterModel`; it reads only the feed and the decisions, never the
planner (:mod:`sniper.core.slo_plan`):

- a ``reservation_accepted`` is checked against what was submitted: its queue is reservable, every
  interval lies inside the window, the intervals hold exactly the container-seconds the stages asked
  for, and at no instant do the plans accepted in the queue hold more together than the queue's
  ``guaranteed`` (the share); recurring plans are checked over one day past the last plan that does not
  recur (every recurrence divides a day);
- :meth:`SloTracker.guarantee` is a reservation queue's guarantee at an instant, its planned load, so
  the model judges a victim taken from a reservation's apps against it (invariant 5);
- an app that runs against a reservation is done when as many of its containers finished (released,
  not killed or lost) as its asks asked for; a killed or lost container of an ask that retries
  (``retry``, the default) leaves its share of the work to the ask the resource manager adds again for
  it, so it is not required twice, while one of an ask that does not retry is work never done; the
  reservation met its deadline when every app that ran
  against it was done by the deadline of the window it was submitted in (a recurring reservation: that
  occurrence's), missed it when one was not, and is undecided while a deadline is still ahead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Protocol

from sniper.core import resources as res
from sniper.core.config import QueueConfig
from sniper.core.resources import Resource
from sniper.core.units import human_resource
from sniper.messages import decisions as d
from sniper.messages import feed as f

DAY = 86_400.0
_EPS = 1e-6


class Model(Protocol):
    """What the tracker reads of the model (:class:`sniper.simulator.model.ClusterModel`), and how it reports."""

    @property
    def queue_cfg(self) -> Mapping[str, QueueConfig]: ...

    @property
    def apps(self) -> Mapping[str, str]: ...

    def _violate(self, t: float, invariant: int, reason: str) -> None: ...


@dataclasses.dataclass(slots=True)
class _Plan:
    queue: str
    arrival: float
    deadline: float
    period: float
    intervals: list[tuple[float, float, Resource]]

    def load_at(self, t: float) -> Resource:
        out: Resource = {}
        for s, e, r in self.intervals:
            if t < s:
                continue
            offset = (t - s) % self.period if self.period else t - s
            if offset < e - s:
                res.add_into(out, r)
        return out

    def starts(self, until: float) -> list[float]:
        out: list[float] = []
        for s, _, _ in self.intervals:
            k = 0
            while s + k * self.period <= until:
                out.append(s + k * self.period)
                if not self.period:
                    break
                k += 1
        return out

    def deadline_for(self, t: float) -> float:
        if not self.period or t <= self.deadline:
            return self.deadline
        return self.deadline + math.ceil((t - self.deadline) / self.period) * self.period


@dataclasses.dataclass(slots=True)
class _App:
    plan: _Plan
    submitted: float
    work: int = 0
    finished: int = 0
    done_at: float | None = None
    refused: bool = False  # an ask of it was rejected: its work can never be done


class SloTracker:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.submitted: dict[str, f.ReservationSubmitted] = {}
        self.plans: dict[str, _Plan] = {}  # the partition's accepted plans (a retired partition has none)
        self.accepted: list[tuple[str, _Plan]] = []  # every plan accepted in the run, in order
        self.rejections: list[tuple[str, str, str]] = []  # (reservation, queue, reason), in order
        self.apps: dict[str, _App] = {}
        self.alloc_ask: dict[str, tuple[str, str]] = {}  # allocation -> (app, ask) of the apps tracked
        self.retrying: set[tuple[str, str]] = set()  # (app, ask): asks whose lost work is asked for again
        self.killed: set[str] = set()
        self.last_t = 0.0

    # ---------------------------------------------------------------------------------------- inputs

    def on_event(self, event: f.Feed) -> None:
        self.last_t = max(self.last_t, event.t)
        match event:
            case f.ReservationSubmitted():
                self.submitted[event.reservation] = event
            case f.AppAdded(app=app, reservation=name) if name is not None and app not in self.apps:
                plan = self.plans.get(name)
                if plan is not None:  # else the cache rejects it
                    self.apps[app] = _App(plan, event.t)
            case f.PartitionRemoved():
                self.plans.clear()
            case f.AskAdded(app=app, ask=ask, count=count, retry=retry) if app in self.apps:
                self.apps[app].work += count
                if retry:
                    self.retrying.add((app, ask))
            case _:
                pass

    def on_decision(self, dec: d.DecisionMsg) -> None:
        self.last_t = max(self.last_t, dec.t)
        match dec:
            case d.ReservationAccepted():
                self._accepted(dec)
            case d.ReservationRejected(reservation=name, queue=queue, reason=reason):
                self.rejections.append((name, queue, reason))
            case d.Rejected(app=app, ask=ask) if app in self.apps:
                if ask:
                    self.apps[app].refused = True
                elif app not in self.model.apps or self.apps[app].work == 0:
                    del self.apps[app]  # the app itself was refused: it never ran against the reservation
            case d.Allocated(allocation=aid, app=app, ask=ask) if app in self.apps:
                self.alloc_ask[aid] = (app, ask)
            case d.Kill(allocation=aid) | d.AllocationLost(allocation=aid) if aid not in self.killed:
                self.killed.add(aid)
                unit = self.alloc_ask.pop(aid, None)
                if unit is not None and unit in self.retrying and unit[0] in self.apps:
                    self.apps[unit[0]].work -= 1  # the ask added again for it carries this share
            case d.Released(allocation=aid, t=t):
                owner = self.alloc_ask.pop(aid, ("", ""))[0]
                if owner in self.apps and aid not in self.killed:
                    a = self.apps[owner]
                    a.finished += 1
                    if a.finished >= a.work and a.done_at is None:
                        a.done_at = t
            case _:
                pass

    # ---------------------------------------------------------------------------------------- checks

    def _accepted(self, dec: d.ReservationAccepted) -> None:
        t, name = dec.t, dec.reservation
        intervals = [(iv.start, iv.end, res.normalized(iv.resource)) for iv in dec.intervals]
        plan = _Plan(dec.queue, dec.arrival, dec.deadline, dec.recurrence or 0.0, intervals)
        cfg = self.model.queue_cfg.get(dec.queue)
        if cfg is None or not cfg.reservable:
            self.model._violate(t, 13, f"reservation {name} accepted in {dec.queue}, not a reservable queue")
            return
        for s, e, _ in intervals:
            if not dec.arrival - _EPS <= s < e <= dec.deadline + _EPS:
                self.model._violate(t, 13, f"reservation {name}: interval [{s}, {e}) outside its window")
        asked = self.submitted.get(name)
        if asked is not None:
            want: dict[str, float] = {}
            for stage in asked.stages:
                for k, v in stage.resource.items():
                    want[k] = want.get(k, 0.0) + v * stage.count * stage.duration
            got: dict[str, float] = {}
            for s, e, r in intervals:
                for k, v in r.items():
                    got[k] = got.get(k, 0.0) + v * (e - s)
            if any(abs(got.get(k, 0.0) - v) > 1e-6 * max(v, 1.0) for k, v in want.items() if v):
                self.model._violate(t, 13, f"reservation {name}: planned {got}, its stages ask for {want}")
        self.plans[name] = plan
        self.accepted.append((name, plan))
        share = cfg.guaranteed
        mine = [p for p in self.plans.values() if p.queue == dec.queue]
        last_once = max([dec.arrival, *(e for p in mine if not p.period for _, e, _ in p.intervals)])
        until = last_once + DAY
        for instant in sorted({x for p in mine for x in p.starts(until)}):
            load = res.total(p.load_at(instant) for p in mine)
            if not res.fits(load, share):
                self.model._violate(
                    t,
                    13,
                    f"plans of {dec.queue} hold {human_resource(load)} at {instant:g}, "
                    f"over its share {human_resource(share)}",
                )
                break

    def next_change(self, t: float) -> float | None:
        """The first instant after ``t`` at which a planned interval begins or ends (``None``: none)."""
        best: float | None = None
        for plan in self.plans.values():
            for s, e, _ in plan.intervals:
                for edge in (s, e):
                    if plan.period and edge <= t:
                        edge += (math.floor((t - edge) / plan.period) + 1) * plan.period
                    if edge > t + _EPS and (best is None or edge < best):
                        best = edge
        return best

    def guarantee(self, queue: str, t: float) -> Resource | None:
        """The guarantee of a reservation queue at ``t`` (its planned load), ``None`` for other queues."""
        parent, _, name = queue.rpartition(".")
        plan = self.plans.get(name)
        if plan is None or plan.queue != parent:
            return None
        return plan.load_at(t)

    # ---------------------------------------------------------------------------------------- report

    def finish(self, t: float) -> None:
        """The run ended at ``t``: deadlines up to then are judged."""
        self.last_t = max(self.last_t, t)

    def counts(self) -> dict[str, int]:
        out = {"accepted": len(self.accepted), "rejected": len(self.rejections), "met": 0, "missed": 0}
        for entry in self.log():
            if entry["met"] is True:
                out["met"] += 1
            elif entry["met"] is False:
                out["missed"] += 1
        return out

    def log(self) -> list[dict[str, Any]]:
        """Per reservation accepted: its apps that met and missed their deadline, and whether it met its
        deadlines (``None``: no app ran against it, or a deadline is still ahead); then every rejection."""
        out: list[dict[str, Any]] = []
        for name, plan in self.accepted:
            met = missed = ahead = 0
            for app in (a for a in self.apps.values() if a.plan is plan):
                due = plan.deadline_for(app.submitted)
                if app.done_at is not None and app.done_at <= due + _EPS and not app.refused:
                    met += 1
                elif app.refused or app.done_at is not None or self.last_t >= due:
                    missed += 1
                else:
                    ahead += 1
            verdict = False if missed else (True if met and not ahead else None)
            entry = {"reservation": name, "queue": plan.queue, "accepted": True, "reason": ""}
            out.append({**entry, "apps_met": met, "apps_missed": missed, "met": verdict})
        for name, queue, reason in self.rejections:
            entry = {"reservation": name, "queue": queue, "accepted": False, "reason": reason}
            out.append({**entry, "apps_met": 0, "apps_missed": 0, "met": None})
        return out
