"""SLO reservations: the plan of a reservable queue and its greedy planner (YARN's ReservationSystem).

Not a preemption reservation (room held for a beneficiary, :mod:`sniper.core.cache`) nor a node reservation
(:mod:`sniper.core.node_reservation`): an SLO reservation asks for resources inside a reservable queue between
an ``arrival`` and a ``deadline``, as stages of containers (YARN's ReservationDefinition). Pure and
deterministic, sans-IO; time is the feed's time.

What it owns:

- :class:`SloReservation`, an accepted plan: intervals ``[start, end)`` of resources, repeated every
  ``period`` seconds when it recurs (YARN's periodic reservations). Its load at ``t`` is the sum of the
  intervals (and their repetitions) that cover ``t``.
- :func:`place`, the planner. As YARN's ``AlignedPlannerWithGreedy``/``StageAllocatorGreedyRLE``: stages are
  placed last first, each as late as possible before the stage after it (the last before the deadline),
  in slots of the stage's ``duration`` walking back from its end; each slot takes as many containers as
  the queue's share leaves over the accepted plans (and this request's own slots) all along it, whole
  gangs of ``gang_min`` only (a last, smaller gang whole too; YARN wants the count a multiple of the gang),
  and the next slot ends where the tightest stretch of this one begins. A request that cannot be placed
  whole is rejected with the reason; nothing is partly accepted.
- The share (YARN's ``CapacityOverTimePolicy`` with its instantaneous maximum at 100%): at no instant
  does the sum of a queue's accepted plans exceed the queue's ``guaranteed``. Recurrences divide
  :data:`MAX_PERIODICITY` (YARN's ``max-periodicity``), so every plan repeats within it and a check over
  one such period past the last non-recurring interval covers all time.
- :func:`expand`: the configuration the state runs, where each reservable leaf becomes a parent of a
  ``default`` leaf (apps without a reservation) and one leaf per accepted reservation, guaranteed its
  load now (nothing outside its intervals: then it shares the queue's leftover by demand, as ordinary
  work). The preemption policies enforce those guarantees like any other (YARN's ReservationQueue
  under its PlanQueue).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence

from sniper.core import resources as res
from sniper.core.config import PartitionConfig, QueueConfig
from sniper.core.resources import Resource
from sniper.core.units import human_resource

MAX_PERIODICITY = 86_400.0  # seconds; a recurrence divides it (YARN's default max-periodicity, a day)
MAX_SLOTS = 10_000  # slots one request may try, over all its stages and recurrences (bounds a plan's cost)
MAX_RESERVATIONS = 1_000  # accepted SLO reservations a partition holds at once (bounds its plan)
DEFAULT_QUEUE = "default"  # the leaf of a reservable queue that runs its apps without a reservation
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # a reservation name is also its queue's name
_EPS = 1e-9


@dataclasses.dataclass(frozen=True, slots=True)
class Stage:
    resource: Resource
    count: int
    gang_min: int
    duration: float

    @property
    def gang(self) -> int:
        return max(1, min(self.gang_min, self.count))


@dataclasses.dataclass(frozen=True, slots=True)
class Interval:
    start: float
    end: float
    resource: Resource


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    name: str
    queue: str
    arrival: float
    deadline: float
    stages: tuple[Stage, ...]
    period: float = 0.0  # 0: does not recur


@dataclasses.dataclass(frozen=True, slots=True)
class SloReservation:
    """An accepted plan: its first occurrence's intervals, repeated every ``period`` when not 0."""

    name: str
    queue: str
    arrival: float
    deadline: float
    intervals: tuple[Interval, ...]
    period: float = 0.0

    def load_at(self, t: float) -> Resource:
        out: Resource = {}
        for iv in self.intervals:
            if _covers(iv, self.period, t):
                res.add_into(out, iv.resource)
        return out

    def boundaries_after(self, t: float) -> float:
        """The first instant after ``t`` at which the load may change (``inf``: never again)."""
        best = math.inf
        for iv in self.intervals:
            for edge in (iv.start, iv.end):
                if self.period:
                    k = max(0, math.floor((t - edge) / self.period) + 1)
                    edge += k * self.period
                if edge > t + _EPS:
                    best = min(best, edge)
        return best

    def over(self, t: float) -> bool:
        """No interval of it covers ``t`` or any later instant."""
        return not self.period and all(iv.end <= t for iv in self.intervals)


def _covers(iv: Interval, period: float, t: float) -> bool:
    if not period:
        return iv.start <= t < iv.end
    if t < iv.start:
        return False
    offset = (t - iv.start) % period
    return offset < iv.end - iv.start


def _occurrences(iv: Interval, period: float, start: float, end: float) -> Iterable[tuple[float, float]]:
    """The repetitions of ``iv`` that overlap ``[start, end)``."""
    if not period:
        if iv.start < end and start < iv.end:
            yield iv.start, iv.end
        return
    first = max(0, math.floor((start - iv.end) / period))
    k = first
    while iv.start + k * period < end:
        s, e = iv.start + k * period, iv.end + k * period
        if s < end and start < e:
            yield s, e
        k += 1


def _peak(plans: Iterable[SloReservation], start: float, end: float) -> Resource:
    """Component-wise largest sum of the plans' loads over ``[start, end)``: the load is piecewise
    constant, so it is enough to look at ``start`` and every interval start inside the range."""
    pieces: list[tuple[float, float, Resource]] = []
    for plan in plans:
        for iv in plan.intervals:
            for s, e in _occurrences(iv, plan.period, start, end):
                pieces.append((s, e, iv.resource))
    if not pieces:
        return {}
    out: Resource = {}
    for t in sorted({start, *(s for s, _, _ in pieces if s > start)}):
        load = res.total(r for s, e, r in pieces if s <= t < e)
        out = res.component_max(out, load)
    return res.normalized(out)


def name_refusal(name: str) -> str | None:
    if name == DEFAULT_QUEUE:
        return f"{DEFAULT_QUEUE!r} names the queue of a reservable queue's apps without a reservation"
    if not _NAME.match(name):
        return "a reservation name is letters, digits, '_' and '-', at most 64 of them (it names its queue)"
    return None


def place(request: Request, share: Resource, accepted: Sequence[SloReservation], now: float) -> SloReservation | str:
    """Plan ``request`` against the queue's ``share`` and the plans already ``accepted`` in that queue:
    the plan, or why it cannot be placed."""
    arrival = max(request.arrival, now)
    if request.deadline <= now:
        return f"deadline {request.deadline:g} is not after the current time {now:g}"
    if request.deadline <= arrival:
        return f"deadline {request.deadline:g} is not after arrival {request.arrival:g}"
    period = request.period
    if period:
        if request.deadline - request.arrival > period + _EPS:
            return f"its window ({request.deadline - request.arrival:g}s) is longer than its recurrence ({period:g}s)"
        ratio = MAX_PERIODICITY / period
        if abs(ratio - round(ratio)) > 1e-6:
            return f"recurrence {period:g}s does not divide the longest period, {MAX_PERIODICITY:g}s"
    for i, stage in enumerate(request.stages):
        whole = res.scale(stage.resource, stage.gang)
        if not res.normalized(stage.resource):
            return f"stage {i} asks for nothing"
        if not res.fits(whole, share) or not set(stage.resource) <= {k for k, v in share.items() if v > 0}:
            gang = f"a gang of {stage.gang} x {human_resource(stage.resource)}"
            return f"stage {i}: {gang} is larger than the queue's share ({human_resource(share)})"
    # Every plan repeats within MAX_PERIODICITY after the last interval that does not recur.
    horizon = max([arrival, *(iv.end for p in accepted if not p.period for iv in p.intervals)]) + MAX_PERIODICITY
    repeats = 1 if not period else max(1, math.ceil((horizon - arrival) / period))
    if not period:  # only the plans that hold something inside its window can stand in its way
        accepted = [
            p
            for p in accepted
            if p.period or any(iv.start < request.deadline and arrival < iv.end for iv in p.intervals)
        ]
    own: list[Interval] = []
    slots = 0
    end = request.deadline
    for index in range(len(request.stages) - 1, -1, -1):
        stage = request.stages[index]
        left = stage.count
        t = end
        earliest = end
        while left > 0:
            start = t - stage.duration
            if start < arrival - _EPS:
                return (
                    f"stage {index} ({stage.count} x {human_resource(stage.resource)} for {stage.duration:g}s)"
                    " does not fit"
                    f" the share of the queue ({human_resource(share)}) between {arrival:g} and {request.deadline:g}"
                    f" beside the plans accepted there; {stage.count - left} of its containers could be placed"
                )
            slots += repeats
            if slots > MAX_SLOTS:
                return f"planning it takes more than {MAX_SLOTS} slots (its durations are too short for its window)"
            mine = SloReservation(request.name, request.queue, arrival, request.deadline, _overlapping(own, start, t))
            rooms = _rooms(share, mine, accepted, start, t, period, repeats)
            fits = [(_how_many(stage.resource, room, left), at) for at, room in rooms]
            fit = min(n for n, _ in fits)
            if fit < left:
                fit -= fit % stage.gang  # whole gangs only; the last, smaller gang goes whole too
            if fit > 0:
                own.append(Interval(start, t, res.scale(stage.resource, fit)))
                left -= fit
                earliest = min(earliest, start)
            # As YARN's StageAllocatorGreedyRLE: the next slot ends where the most constraining stretch of
            # this one begins (its earliest, on a tie), at most one duration back.
            tightest = min(at for n, at in fits if n == min(m for m, _ in fits))
            t = tightest if tightest > start + _EPS else start
        end = earliest
    intervals = tuple(sorted(own, key=lambda iv: (iv.start, iv.end)))
    return SloReservation(request.name, request.queue, arrival, request.deadline, intervals, period)


def _overlapping(own: list[Interval], start: float, end: float) -> tuple[Interval, ...]:
    """The request's own intervals that overlap ``[start, end)``: slots end ever earlier, so they are the
    latest placed, found from the tail (a request's cost grows with its slots, not their square)."""
    out: list[Interval] = []
    for iv in reversed(own):
        if iv.start >= end:
            break
        if iv.end > start:
            out.append(iv)
    return tuple(out)


def _rooms(
    share: Resource,
    own: SloReservation,
    accepted: Sequence[SloReservation],
    start: float,
    end: float,
    period: float,
    repeats: int,
) -> list[tuple[float, Resource]]:
    """The room the share leaves over ``[start, end)``, as stretches of constant room (each by its
    start): what the request's own intervals leave, less the most the accepted plans hold at the same
    offset of each of its ``repeats`` occurrences."""
    cuts = {start}
    for k in range(repeats):
        shift = k * period
        for plan in (own, *accepted) if k == 0 else accepted:
            for iv in plan.intervals:
                for s, e in _occurrences(iv, plan.period, start + shift, end + shift):
                    cuts.update(x - shift for x in (s, e) if start < x - shift < end)
    out: list[tuple[float, Resource]] = []
    for at in sorted(cuts):
        used: Resource = {}
        for k in range(repeats):
            used = res.component_max(used, res.total(p.load_at(at + k * period) for p in accepted))
        room = res.sub(res.sub(share, own.load_at(at)), used)
        out.append((at, res.clamp_min_zero(room)))
    return out


def over_share(plans: Sequence[SloReservation], share: Resource, now: float) -> str | None:
    """Why ``plans`` (of one queue) hold more than ``share`` together at some instant from ``now`` on, or
    ``None``: every plan repeats within :data:`MAX_PERIODICITY` past the last interval that does not recur."""
    horizon = max([now, *(iv.end for p in plans if not p.period for iv in p.intervals)]) + MAX_PERIODICITY
    peak = _peak(plans, now, horizon)
    if res.fits(peak, share):
        return None
    return f"its SLO reservations hold up to {human_resource(peak)} together, more than {human_resource(share)}"


def _how_many(unit: Resource, room: Resource, most: int) -> int:
    n = most
    for k, v in unit.items():
        if v > 0:
            n = min(n, room.get(k, 0) // v)
    return max(n, 0)


def share_of(queue: QueueConfig) -> Resource:
    """What a reservable queue's plans may hold together at any instant: its guarantee."""
    return dict(queue.guaranteed)


def reservation_queue(queue: str, reservation: str) -> str:
    """The path of the dynamic leaf an accepted reservation's apps run in."""
    return f"{queue}.{reservation}"


def expand(config: PartitionConfig, plans: Mapping[str, SloReservation], now: float) -> PartitionConfig:
    """``config`` as the state runs it at ``now``: every reservable leaf a parent of its ``default`` leaf
    and of one leaf per accepted reservation, guaranteed the reservation's load at ``now``."""
    if not any(q.reservable for q in config.queues()):
        return config
    by_queue: dict[str, list[SloReservation]] = {}
    for plan in sorted(plans.values(), key=lambda p: p.name):
        by_queue.setdefault(plan.queue, []).append(plan)

    def rebuild(q: QueueConfig) -> QueueConfig:
        if q.reservable:
            leaf = dataclasses.replace(q, guaranteed={}, max=None, limits=(), max_applications=None, reservable=False)
            children = [dataclasses.replace(leaf, name=DEFAULT_QUEUE, path=f"{q.path}.{DEFAULT_QUEUE}")]
            for plan in by_queue.get(q.path, ()):
                children.append(
                    dataclasses.replace(
                        leaf,
                        name=plan.name,
                        path=reservation_queue(q.path, plan.name),
                        guaranteed=res.normalized(plan.load_at(now)),
                    )
                )
            return dataclasses.replace(q, children=tuple(children))
        if not q.children:
            return q
        return dataclasses.replace(q, children=tuple(rebuild(c) for c in q.children))

    return dataclasses.replace(config, root=rebuild(config.root))


def next_change(plans: Iterable[SloReservation], now: float) -> float:
    """The first instant after ``now`` at which some plan's load changes (``inf``: none)."""
    return min((p.boundaries_after(now) for p in plans), default=math.inf)
