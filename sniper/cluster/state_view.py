"""The operator's view of a core's partitions (``GET /ws/v1/state``), kept off the decision path.

Owns :class:`StateView` and the state document's shape. Invariants: however many clients ask, the
document is built at most once per ``interval`` seconds (a request finds the last one fresh, waits for
the one build under way, or starts it); a partition's part is read on the event loop between two
messages (never half-applied), the loop is given back between partitions, and a partition's ideal
assignment is computed in a worker thread on a snapshot taken there; every list holds at most ``limit``
rows, and ``totals`` counts each list whole. Resources are in base units (``units`` in the answer:
memory in bytes, vcore in cores, gpu-milli in GPUs, other resources as counts; :mod:`sniper.core.units`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import anyio.lowlevel
import anyio.to_thread

from sniper.core.admission import queue_state
from sniper.core.resources import Resource
from sniper.core.state import Reservation
from sniper.core.units import BASE_UNITS, COUNT, in_base

if TYPE_CHECKING:
    from sniper.cluster.process import CoreProcess, HostedPartition
    from sniper.cluster.roles import ReplicaProcess

# The units of resources in the state document: base units, as the metrics.
STATE_UNITS = {**{name: unit for name, (unit, _) in BASE_UNITS.items()}, "other resources": COUNT}
STATE_INTERVAL = 2.0  # seconds a built document is served before the next request builds another
STATE_LIMIT = 500  # rows of each list in the document


def reservation_document(r: Reservation) -> dict[str, Any]:
    """One preemption reservation in the state document; ``held`` is room a preemption request's app
    gave back on another node, held for the same beneficiary (``None``: none)."""
    return {
        "reservation": r.id,
        "app": r.app,
        "ask": r.ask,
        "node": r.node,
        "resource": in_base(r.resource),
        "victims": list(r.victims),
        "deadline": r.deadline,
        "expires": r.expires,
        "policy": r.policy,
        "held": None
        if r.hold is None
        else {"node": r.hold[0], "resource": in_base(r.hold[1]), "request": r.hold_contract},
    }


def hosted_caches(process: CoreProcess | ReplicaProcess) -> list[HostedPartition]:
    """The hosted partitions that hold a cache (split replicas have none)."""
    from sniper.cluster.process import HostedPartition

    return [host for host in list(process.hosts.values()) if isinstance(host, HostedPartition)]


class _Rows:
    """At most ``limit`` rows of one list of the document, and how many the whole list has."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.totals: dict[str, int] = {}

    def take(self, name: str, rows: Iterable[dict[str, Any]], total: int | None = None) -> list[dict[str, Any]]:
        """The first ``limit`` of ``rows``; ``total``, when known, spares counting the rest."""
        iterator = iter(rows)
        kept = list(itertools.islice(iterator, self.limit))
        self.totals[name] = total if total is not None else len(kept) + sum(1 for _ in iterator)
        return kept


def _partition_part(host: HostedPartition, limit: int) -> tuple[dict[str, Any], Any]:
    """One partition's part of the document (its queues' ``ideal`` still to fill) and the snapshot its
    ideal assignment is computed from (``None``: no configuration or no capacity yet). On the event loop."""
    from sniper.core.preemption.quotas import usable_capacity
    from sniper.core.preemption.view import snapshot_from_state

    state = host.core.state
    snapshot = None
    if state.config is not None and state.capacity:
        snapshot = snapshot_from_state(state, capacity=dict(usable_capacity(state)))
    rows = _Rows(limit)
    part: dict[str, Any] = {
        "name": host.name,
        "epoch": host.core.epoch,
        "now": state.now,
        "capacity": in_base(state.capacity),
        "queues": rows.take(
            "queues",
            (
                {
                    "queue": q.path,
                    "state": queue_state(q),  # running, draining or stopped (queue.state)
                    "guaranteed": in_base(q.guaranteed),
                    "max": in_base(q.max),
                    "used": in_base(q.allocated),
                    "pending": in_base(q.pending),
                    "reserved": in_base(q.reserved),  # containers waiting on a preemption reservation
                    "ideal": None,
                }
                for q in state.queues.values()
            ),
            len(state.queues),
        ),
        "nodes": rows.take(
            "nodes",
            (
                {
                    "node": n.name,
                    "schedulable": n.schedulable,
                    "capacity": in_base(n.capacity),
                    "allocated": in_base(n.allocated),
                    "reserved": in_base(n.reserved),
                }
                for n in state.nodes.values()
            ),
            len(state.nodes),
        ),
        "reservations": rows.take(
            "reservations", map(reservation_document, state.reservations.values()), len(state.reservations)
        ),
        "node_reservations": rows.take(
            "node_reservations",
            (
                {
                    "reservation": r.id,
                    "app": r.app,
                    "ask": r.ask,
                    "node": r.node,
                    "resource": in_base(r.resource),
                    "expires": r.expires,
                }
                for r in state.node_reservations.values()
            ),
            len(state.node_reservations),
        ),
        "preemptions_in_flight": rows.take(
            "preemptions_in_flight",
            (
                {
                    "allocation": a.id,
                    "app": a.app,
                    "queue": a.queue.path,
                    "node": a.node,
                    "resource": in_base(a.resource),
                    "deadline": a.preempt_deadline,
                    "reservation": a.reservation,
                }
                for a in state.allocations.values()
                if a.preempt_deadline is not None
            ),
        ),
        "recent_preemptions": rows.take(
            "recent_preemptions",
            (
                {
                    "t": x.t,
                    "allocation": x.allocation,
                    "queue": x.queue,
                    "node": x.node,
                    "for_app": x.for_app,
                    "for_queue": x.for_queue,
                    "policy": x.policy,
                    "reason": x.reason,
                    "over_ideal": in_base(x.over_ideal),  # the figure the reason quotes, as numbers
                }
                for x in host.recent_preemptions
            ),
            len(host.recent_preemptions),
        ),
    }
    part["totals"] = rows.totals
    return part, snapshot


def _ideal(snapshot: Any) -> dict[str, Resource]:
    """Each queue's ideal assignment (in a worker thread: ``snapshot`` is the thread's own)."""
    from sniper.core.preemption.view import ideal_of

    return {q.path: q.ideal_assigned for q in ideal_of(snapshot)}


async def build_state(process: CoreProcess | ReplicaProcess, limit: int = STATE_LIMIT) -> dict[str, Any]:
    """The state document; run it on the process's event loop (it reads the partitions between messages)."""
    partitions: list[dict[str, Any]] = []
    for host in sorted(hosted_caches(process), key=lambda h: h.name):
        part, snapshot = _partition_part(host, limit)
        if snapshot is not None:
            ideal = await anyio.to_thread.run_sync(_ideal, snapshot)
            for row in part["queues"]:
                row["ideal"] = in_base(ideal.get(row["queue"]))
        else:
            await anyio.lowlevel.checkpoint()  # the loop goes on between partitions
        partitions.append(part)
    return {"units": STATE_UNITS, "limit": limit, "partitions": partitions}


class StateView:
    """The state document a core's HTTP threads serve, built at most once per ``interval`` seconds.

    ``builds`` counts the documents built. Attach it to the process's event loop (:meth:`attach`, on
    that loop) before serving.
    """

    def __init__(
        self, process: CoreProcess | ReplicaProcess, *, interval: float = STATE_INTERVAL, limit: int = STATE_LIMIT
    ) -> None:
        if interval < 0 or limit < 1:
            raise ValueError("the state interval must not be negative and the row limit at least 1")
        self.process = process
        self.interval = interval
        self.limit = limit
        self.builds = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._body: bytes | None = None
        self._built = 0.0  # time.monotonic() when the last document was built

    def attach(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop

    def body(self, timeout: float = 10.0) -> bytes:
        """The document as JSON bytes (from an HTTP thread): the last one while it is younger than
        ``interval``, else one built now; concurrent callers share one build."""
        with self._lock:
            if self._body is not None and time.monotonic() - self._built < self.interval:
                return self._body
            loop = self._loop
            if loop is None or loop.is_closed():
                raise RuntimeError("the core's event loop is not running")
            future = asyncio.run_coroutine_threadsafe(build_state(self.process, self.limit), loop)
            try:
                document = future.result(timeout=timeout)
            except BaseException:
                future.cancel()
                raise
            self.builds += 1
            self._body = json.dumps(document).encode()
            self._built = time.monotonic()
            return self._body
