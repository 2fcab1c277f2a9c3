"""The simulator's stand-in resource manager: it answers decisions as a YARN RM and its apps would.

Each container is released ``duration`` seconds after it starts; a killed container is released at
once; a preempted, killed or lost container's work is asked for again as a new one-container ask
(unless the trace said ``"retry": false``). Apps ignore the preempt signal (seed 002: none reacts),
so victims leave at their kill. Deterministic: events come out in (time, sequence) order.
``lost_work`` sums, per partition, the running time of every killed or lost container (ARCHITECTURE
section 7, ``lost_work_seconds``), asked again or not.
"""

from __future__ import annotations

import dataclasses
import heapq

from sniper.messages import decisions as d
from sniper.messages import feed as f


@dataclasses.dataclass(slots=True)
class AskInfo:
    resource: dict[str, int]
    priority: int
    am: bool
    duration: float | None
    retry: bool
    node_selector: dict[str, list[str]]
    execution_type: str = "guaranteed"


class StandInRM:
    def __init__(self) -> None:
        self.asks: dict[tuple[str, str, str], AskInfo] = {}  # (partition, app, ask)
        self.apps: set[tuple[str, str]] = set()
        self.timers: list[tuple[float, int, f.Feed]] = []
        self.release_at: dict[tuple[str, str], float] = {}
        self.started: dict[tuple[str, str], float] = {}  # (partition, allocation) -> start
        self.retries = 0
        self.lost_work: dict[str, float] = {}  # partition -> container-seconds lost to kills and node loss
        self._seq = 0
        self._retry_names: dict[tuple[str, str, str], int] = {}
        self.alloc_ask: dict[tuple[str, str], str] = {}

    def observe(self, event: f.Feed) -> None:
        """Learn from a feed event on its way to the scheduler."""
        if isinstance(event, f.AskAdded):
            self.asks[(event.partition, event.app, event.ask)] = AskInfo(
                dict(event.resource),
                event.priority,
                event.am,
                event.duration,
                event.retry,
                event.node_selector,
                event.execution_type,
            )
        elif isinstance(event, f.AppAdded):
            self.apps.add((event.partition, event.app))
        elif isinstance(event, f.AppRemoved):
            self.apps.discard((event.partition, event.app))

    def _schedule(self, t: float, event: f.Feed) -> None:
        self._seq += 1
        heapq.heappush(self.timers, (t, self._seq, event))

    def next_time(self) -> float | None:
        return self.timers[0][0] if self.timers else None

    def due(self, now: float) -> list[f.Feed]:
        out: list[f.Feed] = []
        while self.timers and self.timers[0][0] <= now:
            out.append(heapq.heappop(self.timers)[2])
        return out

    def on_decision(self, dec: d.DecisionMsg, now: float) -> list[f.Feed]:
        """React to a decision; returns feed events to publish right now."""
        match dec:
            case d.Allocated():
                self.alloc_ask[(dec.partition, dec.allocation)] = dec.ask
                self.started[(dec.partition, dec.allocation)] = now
                info = self.asks.get((dec.partition, dec.app, dec.ask))
                if info is not None and info.duration is not None:
                    at = now + info.duration
                    self.release_at[(dec.partition, dec.allocation)] = at
                    self._schedule(at, f.AllocationReleased(t=at, partition=dec.partition, allocation=dec.allocation))
                return []
            case d.Kill():
                self._lost(dec.partition, dec.allocation, now)
                ask = self.alloc_ask.pop((dec.partition, dec.allocation), "")
                out: list[f.Feed] = [f.AllocationReleased(t=now, partition=dec.partition, allocation=dec.allocation)]
                out.extend(self._again(dec.partition, dec.app, ask, now))
                return out
            case d.AllocationLost():
                self._lost(dec.partition, dec.allocation, now)
                self.alloc_ask.pop((dec.partition, dec.allocation), None)
                return self._again(dec.partition, dec.app, dec.ask, now)
            case d.Released():
                self.alloc_ask.pop((dec.partition, dec.allocation), None)
                self.release_at.pop((dec.partition, dec.allocation), None)
                self.started.pop((dec.partition, dec.allocation), None)
                return []
            case _:
                return []

    def _lost(self, partition: str, allocation: str, now: float) -> None:
        self.release_at.pop((partition, allocation), None)
        started = self.started.pop((partition, allocation), None)
        if started is not None:
            self.lost_work[partition] = self.lost_work.get(partition, 0.0) + max(0.0, now - started)

    def _again(self, partition: str, app: str, ask: str, now: float) -> list[f.Feed]:
        info = self.asks.get((partition, app, ask))
        if info is None or not info.retry or (partition, app) not in self.apps:
            return []
        base = ask.split("~", 1)[0]
        n = self._retry_names.get((partition, app, base), 0) + 1
        self._retry_names[(partition, app, base)] = n
        self.retries += 1
        duration = info.duration
        name = f"{base}~{n}"
        self.asks[(partition, app, name)] = info
        return [
            f.AskAdded(
                t=now,
                partition=partition,
                app=app,
                ask=name,
                resource=info.resource,
                count=1,
                priority=info.priority,
                am=info.am,
                duration=duration,
                retry=info.retry,
                node_selector=info.node_selector,
                execution_type="opportunistic" if info.execution_type == "opportunistic" else "guaranteed",
            )
        ]
