"""Observability of a core process: a Prometheus endpoint, a read-only state endpoint, structured logs.

Owns the process's :class:`prometheus_client.CollectorRegistry` (one per :class:`CoreMetrics`, so
several in-process cores in tests do not collide) with the ``process_`` and ``python_`` collectors, the
histograms of :class:`CoreHistograms` (an ask fetched to its first decision, allocation cycle,
preemption round, in seconds) and a collector that reads the hosted partitions at scrape time:
per-queue used, pending, guaranteed and maximum resources in base units (``_bytes`` for memory,
``_cores`` for vcore; other resources in their own plain units, labelled ``resource``), allocations,
preemptions, kills and rejections (counters), consumer lag per Kafka partition and actor inbox depths.
The collector reads plain ints from dicts the event loop mutates, without locks: a scrape may see a
state a few messages old, and a dict resized during the scrape is retried once, then skipped.

``GET /healthz`` answers 200 ``{"healthy": true, "failing": {}}`` while every partition the process owns
is served, else 503 with the failing partitions and why (a partition that stopped on an error until it
is restored, or one that could not be restored); ``sniper_partition_failed`` says the same per partition.

The same port serves ``GET /ws/v1/state`` (JSON, like YuniKorn's REST API under ``/ws/v1``): per
partition the queues (guaranteed, max, used, pending, ideal), nodes, reservations, preemptions in
flight and the last preemptions with their reasons. It is built on the event loop (the HTTP thread
hands the request over and waits), so it never races the actors: it is the state between two messages.
Resources there are in Sniper's units (``units`` in the answer: memory MiB, vcore milli-cores).

Logs: :func:`setup_logging` installs one handler writing JSON lines (``--log-format json``) or
``key=value`` lines (``kv``); records of actors carry their ``partition`` and ``actor``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from core.resources import MEMORY, VCORE, Resource

if TYPE_CHECKING:
    from cluster.process import CoreProcess, HostedPartition
    from cluster.roles import ReplicaProcess

STATE_PATH = "/ws/v1/state"
HEALTH_PATH = "/healthz"
# Sniper's integer units (core.resources) and the base unit a metric name carries.
BASE_UNITS: dict[str, tuple[str, float]] = {MEMORY: ("bytes", float(2**20)), VCORE: ("cores", 0.001)}
SNIPER_UNITS = {MEMORY: "MiB", VCORE: "millicores"}
# Seconds: a feed record's decisions are acknowledged in ms; a preemption round may take a second.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class CoreHistograms:
    """Timings of one core process, observed by its hosted partitions and their actors."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["partition"]
        self.feed_to_decision = Histogram(
            "sniper_feed_to_decision_seconds",
            "From fetching an ask to handing its first decision (allocated or rejected) to the producer",
            labels,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.work = {
            "allocation_cycle": Histogram(
                "sniper_allocation_cycle_seconds",
                "One allocation cycle of a partition's allocator",
                labels,
                registry=registry,
                buckets=LATENCY_BUCKETS,
            ),
            "preemption_round": Histogram(
                "sniper_preemption_round_seconds",
                "One round of a preemption policy",
                labels,
                registry=registry,
                buckets=LATENCY_BUCKETS,
            ),
        }

    def timer(self, partition: str) -> Callable[[str, float], None]:
        """What a partition's actors call with (work kind, seconds)."""
        children = {kind: histogram.labels(partition) for kind, histogram in self.work.items()}

        def observe(kind: str, seconds: float) -> None:
            child = children.get(kind)
            if child is not None:
                child.observe(seconds)

        return observe


def _in_base_units(resource: Resource) -> Iterator[tuple[str, str | None, float]]:
    """(unit suffix or None, resource label or None, value) of each resource in base units."""
    for name, value in resource.items():
        unit = BASE_UNITS.get(name)
        if unit is None:
            yield "", name, float(value)
        else:
            yield f"_{name}_{unit[0]}", None, value * unit[1]


class _QueueFamilies:
    """The gauges of one per-queue figure (used, pending, ...): one per base unit, one for the rest."""

    def __init__(self, what: str, help_text: str) -> None:
        self.what = what
        self.help = help_text
        self.by_unit: dict[str, GaugeMetricFamily] = {}
        for name, (unit, _factor) in BASE_UNITS.items():
            self.by_unit[f"_{name}_{unit}"] = GaugeMetricFamily(
                f"sniper_queue_{what}_{name}_{unit}", f"{help_text} ({name}, {unit})", labels=["partition", "queue"]
            )
        self.other = GaugeMetricFamily(
            f"sniper_queue_{what}",
            f"{help_text} (other resources, in their own units)",
            labels=["partition", "queue", "resource"],
        )

    def add(self, partition: str, queue: str, resource: Resource) -> None:
        for suffix, label, value in _in_base_units(resource):
            if label is None:
                self.by_unit[suffix].add_metric([partition, queue], value)
            else:
                self.other.add_metric([partition, queue, label], value)

    def families(self) -> Iterable[GaugeMetricFamily]:
        yield from self.by_unit.values()
        yield self.other


class _CoreCollector(Collector):
    def __init__(self, process: CoreProcess | ReplicaProcess) -> None:
        self.process = process

    def collect(self) -> Iterator[Any]:
        for _ in range(2):
            try:
                yield from self._collect()
                return
            except RuntimeError:  # a dict changed size while being read: try once more
                continue

    def _collect(self) -> Iterator[Any]:
        process = self.process
        figures = {
            "used": _QueueFamilies("used", "Committed usage of a queue"),
            "pending": _QueueFamilies("pending", "Pending demand of a queue"),
            "guaranteed": _QueueFamilies("guaranteed", "Guaranteed resources of a queue"),
            "max": _QueueFamilies("max", "Maximum resources of a queue (absent: no maximum)"),
        }
        for host in _caches(process):
            for queue in list(host.core.state.queues.values()):
                figures["used"].add(host.name, queue.path, dict(queue.allocated))
                figures["pending"].add(host.name, queue.path, dict(queue.pending))
                figures["guaranteed"].add(host.name, queue.path, dict(queue.guaranteed))
                if queue.max is not None:
                    figures["max"].add(host.name, queue.path, dict(queue.max))
        for figure in figures.values():
            yield from figure.families()
        counters = {
            "allocations": "Allocations decided",
            "preemptions": "Victims preempted",
            "preemptions_cancelled": "Preemptions cancelled (the victim's reservation no longer needed it)",
            "rejected": "Rejected decisions (bad events, asks that can never fit)",
            "kills": "Victims killed after their grace",
            "lost": "Allocations lost with their node",
            "snapshots": "Snapshots published",
            "snapshots_failed": "Snapshots that could not be published (alert: too large or refused)",
        }
        for name, help_text in counters.items():
            family = CounterMetricFamily(f"sniper_{name}", help_text, labels=["partition"])
            for partition, c in list(process.counters.items()):
                family.add_metric([partition], getattr(c, name))
            yield family
        rejections = CounterMetricFamily(
            "sniper_proposals_rejected", "Placements the cache rejected (stale view)", labels=["partition"]
        )
        for host in _caches(process):
            rejections.add_metric([host.name], host.core.stats.placements_rejected)
        yield rejections
        lag = GaugeMetricFamily("sniper_consumer_lag", "Feed records not yet fetched", labels=["kafka_partition"])
        for kp, value in sorted(process.lag().items()):
            lag.add_metric([str(kp)], value)
        yield lag
        depth = GaugeMetricFamily(
            "sniper_inbox_depth", "Messages waiting in an actor's inbox", labels=["partition", "actor"]
        )
        for (partition, actor), value in sorted(process.inbox_depths().items()):
            depth.add_metric([partition, actor], value)
        yield depth
        hosted = GaugeMetricFamily("sniper_partitions_hosted", "Scheduler partitions this process hosts")
        hosted.add_metric([], len(process.hosts))
        yield hosted
        dead = CounterMetricFamily("sniper_dead_letters", "Feed records dead-lettered by this process")
        dead.add_metric([], process.bus.dead_lettered)
        yield dead
        failed = GaugeMetricFamily(
            "sniper_partition_failed",
            "1 for a partition this process owns but cannot serve (alert: its records are dead-lettered)",
            labels=["partition"],
        )
        for partition in sorted(process.failing):
            failed.add_metric([partition], 1)
        yield failed


def _caches(process: CoreProcess | ReplicaProcess) -> list[HostedPartition]:
    """The hosted partitions that hold a cache (split replicas have none)."""
    from cluster.process import HostedPartition

    return [host for host in list(process.hosts.values()) if isinstance(host, HostedPartition)]


def state_of(process: CoreProcess | ReplicaProcess) -> dict[str, Any]:
    """The read-only state document of ``/ws/v1/state``; call it on the event loop (between messages)."""
    from core.preemption.quotas import usable_capacity
    from core.preemption.view import ideal_of, snapshot_from_state

    partitions: list[dict[str, Any]] = []
    for host in sorted(_caches(process), key=lambda h: h.name):
        state = host.core.state
        ideal: dict[str, Resource] = {}
        if state.config is not None and state.capacity:
            assignment = ideal_of(snapshot_from_state(state, capacity=usable_capacity(state)))
            ideal = {q.path: q.ideal_assigned for q in assignment}
        partitions.append(
            {
                "name": host.name,
                "epoch": host.core.epoch,
                "now": state.now,
                "capacity": dict(state.capacity),
                "queues": [
                    {
                        "queue": q.path,
                        "guaranteed": dict(q.guaranteed),
                        "max": None if q.max is None else dict(q.max),
                        "used": dict(q.allocated),
                        "pending": dict(q.pending),
                        "ideal": ideal.get(q.path),
                    }
                    for q in state.queues.values()
                ],
                "nodes": [
                    {
                        "node": n.name,
                        "schedulable": n.schedulable,
                        "capacity": dict(n.capacity),
                        "allocated": dict(n.allocated),
                        "reserved": dict(n.reserved),
                    }
                    for n in state.nodes.values()
                ],
                "reservations": [
                    {
                        "reservation": r.id,
                        "app": r.app,
                        "ask": r.ask,
                        "node": r.node,
                        "resource": dict(r.resource),
                        "victims": list(r.victims),
                        "deadline": r.deadline,
                        "expires": r.expires,
                        "policy": r.policy,
                    }
                    for r in state.reservations.values()
                ],
                "preemptions_in_flight": [
                    {
                        "allocation": a.id,
                        "app": a.app,
                        "queue": a.queue.path,
                        "node": a.node,
                        "resource": dict(a.resource),
                        "deadline": a.preempt_deadline,
                        "reservation": a.reservation,
                    }
                    for a in state.allocations.values()
                    if a.preempt_deadline is not None
                ],
                "recent_preemptions": [
                    {
                        "t": x.t,
                        "allocation": x.allocation,
                        "queue": x.queue,
                        "node": x.node,
                        "for_app": x.for_app,
                        "for_queue": x.for_queue,
                        "policy": x.policy,
                        "reason": x.reason,
                    }
                    for x in host.recent_preemptions
                ],
            }
        )
    return {"units": SNIPER_UNITS, "partitions": partitions}


def health_of(process: CoreProcess | ReplicaProcess) -> dict[str, str]:
    """The partitions ``process`` owns and cannot serve, with why (read from any thread: a copy)."""
    for _ in range(3):
        try:
            return dict(process.failing)
        except RuntimeError:  # changed while copied: the event loop moved on; read again
            continue
    return {"?": "the failing partitions changed too fast to read"}


class MetricsServeError(RuntimeError):
    """The metrics endpoint could not listen (its port is in use, or the address is not local)."""


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a log line each."""


class CoreMetrics:
    """The Prometheus registry and the HTTP endpoint (metrics and state) of one core process."""

    def __init__(self, process: CoreProcess | ReplicaProcess) -> None:
        self.process = process
        self.registry = CollectorRegistry()
        self.registry.register(_CoreCollector(process))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.histograms = CoreHistograms(self.registry)
        from cluster.process import CoreProcess

        if isinstance(process, CoreProcess):  # split replica processes time nothing
            process.histograms = self.histograms
        self.port: int | None = None
        self._server: _Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Start the HTTP endpoint (``port`` 0 picks a free one); returns the port.

        Call it on the process's event loop: ``/ws/v1/state`` is built there.
        """
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            if environ.get("PATH_INFO") == STATE_PATH:
                return self._state(start_response)
            if environ.get("PATH_INFO") == HEALTH_PATH:
                return self._health(start_response)
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]

        try:
            server = make_server(addr, port, app, server_class=_Server, handler_class=_Quiet)
        except OSError as err:
            raise MetricsServeError(
                f"metrics port {port} on {addr}: {err.strerror or err}; choose another --metrics-port "
                "or --metrics-address"
            ) from None
        threading.Thread(target=server.serve_forever, name="sniper-metrics", daemon=True).start()
        self._server = server
        self.port = int(server.server_address[1])
        return self.port

    def _state(self, start_response: Any) -> list[bytes]:
        loop = self._loop
        if loop is None or loop.is_closed():
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"the core's event loop is not running\n"]

        async def build() -> dict[str, Any]:
            return state_of(self.process)

        try:
            document = asyncio.run_coroutine_threadsafe(build(), loop).result(timeout=10)
        except Exception as err:  # the loop stopped or the build failed: say so, keep serving
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [f"state unavailable: {err!r}\n".encode()]
        body = json.dumps(document).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def _health(self, start_response: Any) -> list[bytes]:
        """200 when every partition this process owns is served, else 503 naming those that are not."""
        failing = health_of(self.process)
        body = json.dumps({"healthy": not failing, "failing": failing}).encode()
        status = "200 OK" if not failing else "503 Service Unavailable"
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class StructuredFormatter(logging.Formatter):
    """One line per record: JSON (``json``) or ``key=value`` pairs (``kv``), extras included."""

    def __init__(self, style_name: str = "kv") -> None:
        super().__init__()
        self.style_name = style_name

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                fields[key] = value
        fields["msg"] = record.getMessage()
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        if self.style_name == "json":
            return json.dumps(fields, default=str)
        return " ".join(f"{k}={_kv(v)}" for k, v in fields.items())


def _kv(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in '="' for c in text):
        return json.dumps(text)
    return text


def setup_logging(style_name: str = "kv", level: int = logging.INFO) -> None:
    if style_name not in ("kv", "json"):
        raise ValueError(f"log format must be kv or json, not {style_name!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter(style_name))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiokafka").setLevel(max(level, logging.WARNING))
