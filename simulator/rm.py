"""The simulator's stand-in resource manager: it answers decisions as a YARN RM and its apps would.

Each container is released ``duration`` seconds after it starts; a killed container is released at
once; a preempted, killed or lost container's work is asked for again as a new one-container ask
(unless the trace said ``"retry": false``). Apps ignore the preempt signal (as in the cross-queue design, none reacts),
so victims leave at their kill, except the application masters of apps with a preemption contract
(``app_added`` ``preemption_contract``): on a ``preempt_request`` such an AM releases its newest
containers covering the resource asked, ``am_response`` seconds later (default: half the time to the
request's deadline); their work too is asked for again. Deterministic: events come out in (time,
sequence) order.
``lost_work`` sums, per partition, the running time of every killed or lost container (ARCHITECTURE
section 7, ``lost_work_seconds``), asked again or not.
"""

from __future__ import annotations

import dataclasses
import heapq

from core.preemption.contract import newest_covering
from messages import decisions as d
from messages import feed as f


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
    def __init__(self, am_response: float | None = None) -> None:
        self.am_response = am_response  # seconds a contract AM takes to answer (None: half the grace)
        self.contract_apps: set[tuple[str, str]] = set()
        self.app_containers: dict[tuple[str, str], dict[str, dict[str, int]]] = {}  # running, by app
        self.giving_back: set[tuple[str, str]] = set()  # containers an AM chose to release
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
            if event.preemption_contract:
                self.contract_apps.add((event.partition, event.app))
        elif isinstance(event, f.AppRemoved):
            self.apps.discard((event.partition, event.app))
        elif isinstance(event, f.PartitionRemoved):  # its apps are gone: nothing of theirs is asked again
            self.apps = {key for key in self.apps if key[0] != event.partition}
            self.contract_apps = {key for key in self.contract_apps if key[0] != event.partition}

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
                if (dec.partition, dec.app) in self.contract_apps and not dec.am and not dec.opportunistic:
                    self.app_containers.setdefault((dec.partition, dec.app), {})[dec.allocation] = dec.resource
                info = self.asks.get((dec.partition, dec.app, dec.ask))
                if info is not None and info.duration is not None:
                    at = now + info.duration
                    self.release_at[(dec.partition, dec.allocation)] = at
                    self._schedule(at, f.AllocationReleased(t=at, partition=dec.partition, allocation=dec.allocation))
                return []
            case d.PreemptRequest() if not dec.observe_only:
                self._give_back(dec, now)
                return []
            case d.Kill():
                self._forget(dec.partition, dec.app, dec.allocation)
                self._lost(dec.partition, dec.allocation, now)
                ask = self.alloc_ask.pop((dec.partition, dec.allocation), "")
                out: list[f.Feed] = [f.AllocationReleased(t=now, partition=dec.partition, allocation=dec.allocation)]
                out.extend(self._again(dec.partition, dec.app, ask, now))
                return out
            case d.AllocationLost():
                self._forget(dec.partition, dec.app, dec.allocation)
                self._lost(dec.partition, dec.allocation, now)
                self.alloc_ask.pop((dec.partition, dec.allocation), None)
                return self._again(dec.partition, dec.app, dec.ask, now)
            case d.Released():
                self._forget(dec.partition, dec.app, dec.allocation)
                if (dec.partition, dec.allocation) in self.giving_back:
                    # Given back under a preemption request: its work is lost and asked for again.
                    self.giving_back.discard((dec.partition, dec.allocation))
                    self._lost(dec.partition, dec.allocation, now)
                    ask = self.alloc_ask.pop((dec.partition, dec.allocation), "")
                    return self._again(dec.partition, dec.app, ask, now)
                self.alloc_ask.pop((dec.partition, dec.allocation), None)
                self.release_at.pop((dec.partition, dec.allocation), None)
                self.started.pop((dec.partition, dec.allocation), None)
                return []
            case _:
                return []

    def _forget(self, partition: str, app: str, allocation: str) -> None:
        held = self.app_containers.get((partition, app))
        if held is not None:
            held.pop(allocation, None)

    def _give_back(self, dec: d.PreemptRequest, now: float) -> None:
        """A contract AM's answer: its newest containers (by start, then id) covering the resource,
        released after the response delay (a container already leaving by then is skipped)."""
        held = self.app_containers.get((dec.partition, dec.app))
        if not held:
            return
        at = now + (self.am_response if self.am_response is not None else max(0.0, dec.deadline - now) / 2)
        started = self.started
        candidates = [(aid, started.get((dec.partition, aid), 0.0), r) for aid, r in held.items()]
        chosen = newest_covering(candidates, dec.resource)
        for aid in chosen:
            del held[aid]
            self.giving_back.add((dec.partition, aid))
            self._schedule(at, f.AllocationReleased(t=at, partition=dec.partition, allocation=aid))

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
