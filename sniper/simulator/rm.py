"""The simulator's stand-in resource manager: it answers decisions as a YARN RM and its apps would.

Each container is released ``duration`` seconds after it starts; a killed container is released at
once; a preempted, killed or lost container's work is asked for again as a new one-container ask
(unless the trace said ``"retry": false``). Apps ignore the preempt signal (as in the cross-queue design, none reacts),
so victims leave at their kill, except the application masters of apps with a preemption contract
(``app_added`` ``preemption_contract``): on a ``preempt_request`` such an AM releases its newest
containers covering the resource asked, ``am_response`` seconds later (default: half the time to the
request's deadline), all at once or, with ``am_release_gap``, one every that many seconds, as tasks
wind down one by one; their work too is asked for again. Deterministic: events come out in (time,
sequence) order.
In a partition where some ask declares ``usage``, the resource manager also reports each node's
utilization as its NodeManager would: :data:`UTILIZATION_INTERVAL` seconds after the containers
running there change, a ``node_utilization`` with the sum of their usage (declared, else their
resource), when that sum differs from the node's last report.
Apps with a ``checkpoint_interval`` (``app_added``) checkpoint every container's work that often from
its start; an ``allocation_checkpointed`` in the trace is a checkpoint too. ``lost_work`` sums, per
partition, the work every killed or lost container did since its last checkpoint
(:func:`sniper.core.checkpoints.lost_work`; its running time when its app does not checkpoint)
(architecture: Metrics, ``lost_work_seconds``), asked again or not; ``lost_work_by_cause`` splits the
same sum by what ended each container (:func:`loss_cause`), so the causes always add up to
``lost_work``; ``running_time_lost`` sums their running time, checkpoints ignored.
"""

from __future__ import annotations

import dataclasses
import heapq

import msgspec

from sniper.core import checkpoints
from sniper.core import resources as res
from sniper.core.preemption.contract import newest_covering
from sniper.core.resources import Resource
from sniper.messages import decisions as d
from sniper.messages import feed as f

UTILIZATION_INTERVAL = 1.0  # seconds from a change of a node's containers to its report (a heartbeat)

# What ended a container whose work was lost (docs/report.md, ``lost_work_by_cause``); a container killed
# at the end of its grace is counted under the policy that gave it notice (``sniper``, ``intra_queue``,
# ``proportional``).
GIVEN_BACK = "preempt_request_given_back"  # released by its application master under a preemption request
KILLED_AT_REQUEST_DEADLINE = "preempt_request_killed"  # killed at a preemption request's deadline
NODE_LOST = "node_lost"  # its node left the partition


def loss_cause(kill: d.Kill, noticed_by: str | None) -> str:
    """The cause a ``kill`` is counted under: opportunistic eviction and over-commit by the kill's cause,
    a request's deadline as :data:`KILLED_AT_REQUEST_DEADLINE`, else the policy whose notice ran out
    (``noticed_by``, ``"unknown"`` when no notice was seen)."""
    cause = d.cause_of(kill)
    if cause in ("opportunistic", "overcommit"):
        return cause
    if cause == "request_deadline":
        return KILLED_AT_REQUEST_DEADLINE
    return noticed_by or "unknown"


@dataclasses.dataclass(slots=True)
class AskInfo:
    resource: dict[str, int]
    priority: int
    am: bool
    duration: float | None
    retry: bool
    node_selector: dict[str, list[str]]
    execution_type: str = "guaranteed"
    usage: dict[str, int] | None = None
    tags: tuple[str, ...] = ()
    constraints: tuple[f.PlacementConstraint, ...] = ()
    topology: f.AskTopology | None = None


class StandInRM:
    def __init__(self, am_response: float | None = None, am_release_gap: float = 0.0) -> None:
        self.am_response = am_response  # seconds a contract AM takes to answer (None: half the grace)
        self.am_release_gap = am_release_gap  # seconds between the containers of one answer (0: at once)
        self.contract_apps: set[tuple[str, str]] = set()
        self.checkpoint_interval: dict[tuple[str, str], float] = {}  # (partition, app) -> seconds
        self.app_containers: dict[tuple[str, str], dict[str, dict[str, int]]] = {}  # running, by app
        self.giving_back: set[tuple[str, str]] = set()  # containers an AM chose to release
        self.asks: dict[tuple[str, str, str], AskInfo] = {}  # (partition, app, ask)
        self.apps: set[tuple[str, str]] = set()
        self.timers: list[tuple[float, int, f.Feed]] = []
        self.release_at: dict[tuple[str, str], float] = {}
        self.started: dict[tuple[str, str], float] = {}  # (partition, allocation) -> start
        self.retries = 0
        self.lost_work: dict[str, float] = {}  # partition -> container-seconds lost to kills and node loss
        self.lost_work_by_cause: dict[str, dict[str, float]] = {}  # partition -> cause -> the same seconds
        self.running_time_lost: dict[str, float] = {}  # partition -> the same containers' running time
        self.checkpointed: dict[tuple[str, str], float] = {}  # (partition, allocation) -> last reported checkpoint
        self.noticed_by: dict[tuple[str, str], str] = {}  # (partition, allocation) -> policy of its notice
        self._seq = 0
        self._retry_names: dict[tuple[str, str, str], int] = {}
        self.alloc_ask: dict[tuple[str, str], str] = {}
        # Utilization reports, for partitions whose asks declare usage: per (partition, node) what the
        # running containers use and what was last reported, and per container its node and usage.
        self.measured: set[str] = set()
        self.nodes: set[tuple[str, str]] = set()
        self.node_use: dict[tuple[str, str], Resource] = {}
        self.reported: dict[tuple[str, str], Resource] = {}
        self.report_due: set[tuple[str, str]] = set()
        self.container_use: dict[tuple[str, str], tuple[str, Resource]] = {}

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
                event.usage,
                event.tags,
                event.constraints,
                event.topology,
            )
            if event.usage is not None:
                self.measured.add(event.partition)
        elif isinstance(event, f.NodeAdded):
            self.nodes.add((event.partition, event.node))
        elif isinstance(event, f.NodeRemoved):
            key = (event.partition, event.node)
            self.nodes.discard(key)
            self.node_use.pop(key, None)
            self.reported.pop(key, None)
        elif isinstance(event, f.AppAdded):
            self.apps.add((event.partition, event.app))
            if event.preemption_contract:
                self.contract_apps.add((event.partition, event.app))
            if event.checkpoint_interval is not None:
                self.checkpoint_interval[(event.partition, event.app)] = event.checkpoint_interval
        elif isinstance(event, f.AllocationCheckpointed):
            key = (event.partition, event.allocation)
            if key in self.started and event.t > self.checkpointed.get(key, self.started[key]):
                self.checkpointed[key] = event.t
        elif isinstance(event, f.AppRemoved):
            self.apps.discard((event.partition, event.app))
            self.checkpoint_interval.pop((event.partition, event.app), None)
        elif isinstance(event, f.PartitionRemoved):  # its apps are gone: nothing of theirs is asked again
            self.apps = {key for key in self.apps if key[0] != event.partition}
            self.contract_apps = {key for key in self.contract_apps if key[0] != event.partition}
            self.nodes = {key for key in self.nodes if key[0] != event.partition}
            self.checkpoint_interval = {k: v for k, v in self.checkpoint_interval.items() if k[0] != event.partition}

    def _schedule(self, t: float, event: f.Feed) -> None:
        self._seq += 1
        heapq.heappush(self.timers, (t, self._seq, event))

    def next_time(self) -> float | None:
        return self.timers[0][0] if self.timers else None

    def due(self, now: float) -> list[f.Feed]:
        out: list[f.Feed] = []
        while self.timers and self.timers[0][0] <= now:
            event = heapq.heappop(self.timers)[2]
            if isinstance(event, f.NodeUtilization):
                report = self._utilization(event)
                if report is not None:
                    out.append(report)
                continue
            out.append(event)
        return out

    # ------------------------------------------------------------------ utilization reports

    def _started(self, dec: d.Allocated, info: AskInfo | None, now: float) -> None:
        usage = res.normalized(info.usage) if info is not None and info.usage is not None else dict(dec.resource)
        self.container_use[(dec.partition, dec.allocation)] = (dec.node, usage)
        res.add_into(self.node_use.setdefault((dec.partition, dec.node), {}), usage)
        self._report_later(dec.partition, dec.node, now)

    def _stopped(self, partition: str, allocation: str, now: float) -> None:
        held = self.container_use.pop((partition, allocation), None)
        if held is None:
            return
        node, usage = held
        use = self.node_use.get((partition, node))
        if use is not None:
            res.sub_into(use, usage)
            self._report_later(partition, node, now)

    def _report_later(self, partition: str, node: str, now: float) -> None:
        key = (partition, node)
        if key not in self.report_due:
            self.report_due.add(key)
            at = now + UTILIZATION_INTERVAL
            self._schedule(at, f.NodeUtilization(t=at, partition=partition, node=node, used={}))

    def _utilization(self, due: f.NodeUtilization) -> f.NodeUtilization | None:
        """The report ``due`` stands for, with the node's usage now; ``None`` when nothing changed since
        its last report or the node is gone."""
        key = (due.partition, due.node)
        self.report_due.discard(key)
        if key not in self.nodes:
            return None
        use = res.normalized(self.node_use.get(key, {}))
        if use == self.reported.get(key, {}):
            return None
        self.reported[key] = use
        return msgspec.structs.replace(due, used={k: float(v) for k, v in use.items()})

    def on_decision(self, dec: d.DecisionMsg, now: float) -> list[f.Feed]:
        """React to a decision; returns feed events to publish right now."""
        match dec:
            case d.Allocated():
                self.alloc_ask[(dec.partition, dec.allocation)] = dec.ask
                self.started[(dec.partition, dec.allocation)] = now
                if (dec.partition, dec.app) in self.contract_apps and not dec.am and not dec.opportunistic:
                    self.app_containers.setdefault((dec.partition, dec.app), {})[dec.allocation] = dec.resource
                info = self.asks.get((dec.partition, dec.app, dec.ask))
                if dec.partition in self.measured:
                    self._started(dec, info, now)
                if info is not None and info.duration is not None:
                    at = now + info.duration
                    self.release_at[(dec.partition, dec.allocation)] = at
                    self._schedule(at, f.AllocationReleased(t=at, partition=dec.partition, allocation=dec.allocation))
                return []
            case d.PreemptRequest() if not dec.observe_only:
                self._give_back(dec, now)
                return []
            case d.Preempt() if not dec.observe_only:
                self.noticed_by[(dec.partition, dec.allocation)] = dec.policy
                return []
            case d.PreemptCancelled():
                self.noticed_by.pop((dec.partition, dec.allocation), None)
                return []
            case d.Kill():
                self._stopped(dec.partition, dec.allocation, now)
                self._forget(dec.partition, dec.app, dec.allocation)
                noticed = self.noticed_by.pop((dec.partition, dec.allocation), None)
                self._lost(dec.partition, dec.app, dec.allocation, now, loss_cause(dec, noticed))
                ask = self.alloc_ask.pop((dec.partition, dec.allocation), "")
                out: list[f.Feed] = [f.AllocationReleased(t=now, partition=dec.partition, allocation=dec.allocation)]
                out.extend(self._again(dec.partition, dec.app, ask, now))
                return out
            case d.AllocationLost():
                self._stopped(dec.partition, dec.allocation, now)
                self._forget(dec.partition, dec.app, dec.allocation)
                self.noticed_by.pop((dec.partition, dec.allocation), None)
                self._lost(dec.partition, dec.app, dec.allocation, now, NODE_LOST)
                self.alloc_ask.pop((dec.partition, dec.allocation), None)
                return self._again(dec.partition, dec.app, dec.ask, now)
            case d.Released():
                self._stopped(dec.partition, dec.allocation, now)
                self._forget(dec.partition, dec.app, dec.allocation)
                if (dec.partition, dec.allocation) in self.giving_back:
                    # Given back under a preemption request: its work is lost and asked for again.
                    self.giving_back.discard((dec.partition, dec.allocation))
                    self.noticed_by.pop((dec.partition, dec.allocation), None)
                    self._lost(dec.partition, dec.app, dec.allocation, now, GIVEN_BACK)
                    ask = self.alloc_ask.pop((dec.partition, dec.allocation), "")
                    return self._again(dec.partition, dec.app, ask, now)
                self.alloc_ask.pop((dec.partition, dec.allocation), None)
                self.release_at.pop((dec.partition, dec.allocation), None)
                self.started.pop((dec.partition, dec.allocation), None)
                self.checkpointed.pop((dec.partition, dec.allocation), None)
                self.noticed_by.pop((dec.partition, dec.allocation), None)
                return []
            case _:
                return []

    def _forget(self, partition: str, app: str, allocation: str) -> None:
        held = self.app_containers.get((partition, app))
        if held is not None:
            held.pop(allocation, None)

    def _give_back(self, dec: d.PreemptRequest, now: float) -> None:
        """A contract AM's answer: its newest containers (by start, then id) covering the resource,
        released after the response delay, newest first, ``am_release_gap`` seconds apart (a container
        already leaving by then is skipped)."""
        held = self.app_containers.get((dec.partition, dec.app))
        if not held:
            return
        at = now + (self.am_response if self.am_response is not None else max(0.0, dec.deadline - now) / 2)
        started = self.started
        candidates = [(aid, started.get((dec.partition, aid), 0.0), r) for aid, r in held.items()]
        chosen = newest_covering(candidates, dec.resource)
        for n, aid in enumerate(chosen):
            del held[aid]
            self.giving_back.add((dec.partition, aid))
            when = at + n * self.am_release_gap
            self._schedule(when, f.AllocationReleased(t=when, partition=dec.partition, allocation=aid))

    def _lost(self, partition: str, app: str, allocation: str, now: float, cause: str) -> None:
        self.release_at.pop((partition, allocation), None)
        started = self.started.pop((partition, allocation), None)
        checkpointed = self.checkpointed.pop((partition, allocation), None)
        if started is not None:
            ran = max(0.0, now - started)
            self.running_time_lost[partition] = self.running_time_lost.get(partition, 0.0) + ran
            interval = self.checkpoint_interval.get((partition, app))
            lost = checkpoints.lost_work(started, now, interval, checkpointed)
            self.lost_work[partition] = self.lost_work.get(partition, 0.0) + lost
            by_cause = self.lost_work_by_cause.setdefault(partition, {})
            by_cause[cause] = by_cause.get(cause, 0.0) + lost

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
                usage=info.usage,
                tags=info.tags,
                constraints=info.constraints,
                topology=info.topology,
            )
        ]
