"""The audit trail of a core process: every decision that takes room from someone, on one log line.

Each ``preempt``, ``preempt_cancelled``, ``kill``, ``preempt_request``, de-reservation
(``node_unreserved`` with reason ``dereserved``) and ``partition_removed`` a hosted partition publishes
is logged at INFO on the ``sniper.audit`` logger with structured fields: ``action``, ``partition``,
the ``victim`` (allocation, request or node reservation) with its ``victim_app`` and ``victim_queue``,
the ``node``, the ``beneficiary`` (``app/ask``) with its ``beneficiary_queue``, the ``policy`` and the
``reason``; the ``resource`` in base units (numbers: memory bytes, vcore cores, :mod:`sniper.core.units`),
the message text in human units. So ``grep victim=ALLOCATION`` on a
core's log answers "why was my container killed?". A kill names the beneficiary its preemption named
(remembered while the preemption is in flight in this process); an over-commit kill names none.
:class:`PreemptionTally` counts, per queue, the containers and resources preempted from it
(``victim``) and for it (``beneficiary``), for the metrics.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from sniper.core import resources as res
from sniper.core.units import human_resource, in_base
from sniper.messages import decisions as d

log = logging.getLogger("sniper.audit")
VICTIM = "victim"
BENEFICIARY = "beneficiary"
_IN_FLIGHT_LIMIT = 100_000  # preemptions remembered for their kill; the oldest are forgotten past it


@dataclasses.dataclass(slots=True)
class QueuePreemptions:
    """Containers and resources (Sniper's units) preempted from or for one queue."""

    containers: int = 0
    resource: res.Resource = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class PreemptionTally:
    """Per ``(queue, role)``, what was preempted; and the preemptions in flight, by allocation."""

    by_queue: dict[tuple[str, str], QueuePreemptions] = dataclasses.field(default_factory=dict)
    in_flight: dict[str, d.Preempt] = dataclasses.field(default_factory=dict)

    def count(self, queue: str, role: str, resource: res.ResourceLike) -> None:
        entry = self.by_queue.get((queue, role))
        if entry is None:
            entry = self.by_queue[(queue, role)] = QueuePreemptions()
        entry.containers += 1
        res.add_into(entry.resource, resource)

    def preempted(self, x: d.Preempt) -> None:
        self.count(x.queue, VICTIM, x.resource)
        self.count(x.for_queue, BENEFICIARY, x.resource)
        if len(self.in_flight) >= _IN_FLIGHT_LIMIT:
            self.in_flight.pop(next(iter(self.in_flight)))
        self.in_flight[x.allocation] = x


def _beneficiary(app: str, ask: str) -> str:
    return f"{app}/{ask}" if app else ""


def _taken(
    action: str,
    partition: str,
    message: str,
    victim: str,
    decision: d.Preempt | d.PreemptRequest,
    target: d.Preempt | d.ContractContainer,
    resource: res.ResourceLike,
    **more: str,
) -> None:
    """The line of a decision that takes ``victim`` from ``decision``'s app for ``target``'s beneficiary:
    the message says the resource in human units, the ``resource`` field in base units (numbers)."""
    beneficiary = _beneficiary(target.for_app, target.for_ask)
    reason = decision.reason or "no reason given"
    log.info(
        "%s (%s) for %s in %s by t=%.1f",
        message,
        human_resource(resource),
        beneficiary,
        target.for_queue,
        decision.deadline,
        extra={
            "action": action,
            "partition": partition,
            **more,
            "victim": victim,
            "victim_app": decision.app,
            "victim_queue": decision.queue,
            "node": target.node,
            "beneficiary": beneficiary,
            "beneficiary_queue": target.for_queue,
            "resource": in_base(resource),
            "policy": decision.policy,
            "deadline": round(decision.deadline, 3),
            "reason": reason,
        },
    )


def audit(partition: str, decisions: Iterable[d.DecisionMsg], tally: PreemptionTally) -> None:
    """Log the decisions that take room from someone and count the preemptions per queue."""
    info = log.isEnabledFor(logging.INFO)
    for x in decisions:
        if isinstance(x, d.Preempt):
            if x.observe_only:
                continue
            tally.preempted(x)
            if info:
                what = "opportunistic container" if x.opportunistic else "container"
                _taken(
                    "preempt",
                    partition,
                    f"preempt {what} {x.allocation} of {x.app} in {x.queue} on {x.node}",
                    x.allocation,
                    x,
                    x,
                    x.resource,
                )
        elif isinstance(x, d.Kill):
            cause = tally.in_flight.pop(x.allocation, None)
            if info:
                beneficiary = "" if cause is None else _beneficiary(cause.for_app, cause.for_ask)
                log.info(
                    "kill container %s of %s in %s on %s for %s: %s",
                    x.allocation,
                    x.app,
                    x.queue,
                    x.node,
                    beneficiary
                    or (
                        "nobody: its node's utilization is above preempt_above"
                        if d.cause_of(x) == "overcommit"
                        else "(beneficiary not known to this process)"
                    ),
                    x.reason,
                    extra={
                        "action": "kill",
                        "partition": partition,
                        "victim": x.allocation,
                        "victim_app": x.app,
                        "victim_queue": x.queue,
                        "node": x.node,
                        "beneficiary": beneficiary,
                        "beneficiary_queue": "" if cause is None else cause.for_queue,
                        "policy": "" if cause is None else cause.policy,
                        "reason": x.reason,
                    },
                )
        elif isinstance(x, d.PreemptCancelled):
            cause = tally.in_flight.pop(x.allocation, None)
            if info:
                log.info(
                    "preemption of %s cancelled: %s",
                    x.allocation,
                    x.reason,
                    extra={
                        "action": "preempt_cancelled",
                        "partition": partition,
                        "victim": x.allocation,
                        "victim_app": x.app,
                        "victim_queue": x.queue,
                        "node": x.node,
                        "beneficiary": "" if cause is None else _beneficiary(cause.for_app, cause.for_ask),
                        "reason": x.reason,
                    },
                )
        elif isinstance(x, d.Released):
            tally.in_flight.pop(x.allocation, None)
        elif isinstance(x, d.PreemptRequest) and not x.observe_only and info:
            for c in x.containers:
                message = f"preempt_request asks {x.app} in {x.queue} to give back {c.allocation} on {c.node}"
                _taken("preempt_request", partition, message, c.allocation, x, c, c.resource, request=x.request)
        elif isinstance(x, d.NodeUnreserved) and x.reason == d.DERESERVED and info:
            log.info(
                "dereserve node %s held for %s in %s by policy %s",
                x.node,
                _beneficiary(x.app, x.ask),
                x.queue,
                x.policy,
                extra={
                    "action": "dereserve",
                    "partition": partition,
                    "victim": x.reservation,
                    "victim_app": x.app,
                    "victim_queue": x.queue,
                    "node": x.node,
                    "policy": x.policy,
                    "reason": "the node reservation blocks a queue below its ideal share",
                },
            )
        elif isinstance(x, d.PartitionRemoved) and info:
            log.info(
                "partition %s removed: %d apps, %d allocations and %d nodes released",
                partition,
                x.apps,
                x.allocations,
                x.nodes,
                extra={
                    "action": "partition_removed",
                    "partition": partition,
                    "apps": x.apps,
                    "allocations": x.allocations,
                    "nodes": x.nodes,
                    "reason": x.reason,
                },
            )
