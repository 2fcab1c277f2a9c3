"""Observability of a core process: a Prometheus endpoint, a read-only state endpoint, structured logs.

Owns the process's :class:`prometheus_client.CollectorRegistry` (one per :class:`CoreMetrics`, so
several in-process cores in tests do not collide) with the ``process_`` and ``python_`` collectors, the
histograms of :class:`sniper.cluster.timings.CoreHistograms` (an ask fetched to its first decision, allocation cycle,
preemption round, the event loop's lag, in seconds) and a collector that reads the hosted partitions at scrape time:
per-queue used, pending, guaranteed and maximum resources in base units (``_memory_bytes``,
``_vcore_cores``, ``_gpu_milli_gpus`` for milli-GPUs in GPUs; other resources in their own plain
units, labelled ``resource``), allocations,
preemptions, kills and rejections (counters), consumer lag per Kafka partition and actor inbox depths.
The collector reads plain ints from dicts the event loop mutates, without locks: a scrape may see a
state a few messages old, and a dict resized during the scrape is retried once, then skipped.

``GET /healthz`` answers 200 ``{"healthy": true, "failing": {}}`` while every partition the process owns
is served, else 503 with the failing partitions and why (a partition that stopped on an error until it
is restored, or one that could not be restored); ``sniper_partition_failed`` says the same per partition.

The same port serves ``GET /ws/v1/state`` (JSON, like YuniKorn's REST API under ``/ws/v1``): per
partition the queues (guaranteed, max, used, pending, ideal), nodes, preemption and node reservations,
preemptions in flight and the last preemptions with their reasons, each list capped with its total
beside it; :class:`sniper.cluster.state_view.StateView` builds it at most once per interval, whatever
the number of clients, so scrapes never slow decisions.

Logs: :func:`setup_logging` installs one handler writing JSON lines (``--log-format json``) or
``key=value`` lines (``kv``); records of actors carry their ``partition`` and ``actor``. A value holding
a space, a quote or a character that is not printable (a name with ESC in it) is written as a JSON
string, its control characters escaped: no feed name reaches a log raw.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socketserver
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, get_args
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sniper.cluster.member import Host
from sniper.cluster.state_view import STATE_INTERVAL, STATE_LIMIT, StateView, hosted_caches
from sniper.cluster.timings import CoreHistograms
from sniper.core.admission import QueueState, queue_state
from sniper.core.resources import Resource, ResourceLike
from sniper.core.units import BASE_UNITS, each_in_base_units

if TYPE_CHECKING:
    from sniper.cluster.process import CoreProcess
    from sniper.cluster.roles import ReplicaProcess

STATE_PATH = "/ws/v1/state"
HEALTH_PATH = "/healthz"


# Seconds: a feed record's decisions are acknowledged in ms; a preemption round may take a second.
def _metric_suffix(name: str, unit: str) -> str:
    """The end of a metric's name for a resource in its base unit: ``_memory_bytes``, ``_vcore_cores``,
    ``_gpu_milli_gpus`` (Prometheus names are ``[a-zA-Z0-9_]``, lower case by convention)."""
    return re.sub(r"[^a-z0-9_]", "_", f"_{name}_{unit}".lower())


# The metric name suffix of each resource with a base unit of its own.
METRIC_SUFFIXES = {name: _metric_suffix(name, unit) for name, (unit, _) in BASE_UNITS.items()}


def _in_base_units(resource: ResourceLike) -> Iterator[tuple[str, str | None, float]]:
    """(metric name suffix or "", resource label or None, value) of each resource in base units."""
    for name, _unit, value in each_in_base_units(resource):
        if name in METRIC_SUFFIXES:
            yield METRIC_SUFFIXES[name], None, value
        else:
            yield "", name, value


class _QueueFamilies:
    """The gauges of one per-queue figure (used, pending, ...): one per base unit, one for the rest."""

    def __init__(self, what: str, help_text: str) -> None:
        self.what = what
        self.help = help_text
        self.by_unit: dict[str, GaugeMetricFamily] = {}
        for name, (unit, _factor) in BASE_UNITS.items():
            suffix = METRIC_SUFFIXES[name]
            self.by_unit[suffix] = GaugeMetricFamily(
                f"sniper_queue_{what}{suffix}", f"{help_text} ({name}, {unit})", labels=["partition", "queue"]
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
        for host in hosted_caches(process):
            for queue in list(host.core.state.queues.values()):
                figures["used"].add(host.name, queue.path, dict(queue.allocated))
                figures["pending"].add(host.name, queue.path, dict(queue.pending))
                figures["guaranteed"].add(host.name, queue.path, dict(queue.guaranteed))
                if queue.max is not None:
                    figures["max"].add(host.name, queue.path, dict(queue.max))
        for figure in figures.values():
            yield from figure.families()
        yield from _queue_activity(process)
        yield from _preempted_per_queue(process)
        yield from _policy_figures(process)
        counters = {
            "allocations": "Allocations decided",
            "preemptions": "Victims preempted",
            "preemptions_cancelled": "Preemptions cancelled (the victim's reservation no longer needed it)",
            "rejected": "Rejected decisions (bad events, asks that can never fit)",
            "kills": "Victims killed after their grace",
            "lost": "Allocations lost with their node",
            "snapshots": "Snapshots published",
            "snapshots_failed": "Snapshots that could not be published (alert: too large or refused)",
            "decisions_unpublishable": "Decision batches too large to publish (alert: the partition stops)",
        }
        for name, help_text in counters.items():
            family = CounterMetricFamily(f"sniper_{name}", help_text, labels=["partition"])
            for partition, c in list(process.counters.items()):
                family.add_metric([partition], getattr(c, name))
            yield family
        rejections = CounterMetricFamily(
            "sniper_proposals_rejected", "Placements the cache rejected (stale view)", labels=["partition"]
        )
        for host in hosted_caches(process):
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


def _queue_activity(process: CoreProcess | ReplicaProcess) -> Iterator[GaugeMetricFamily]:
    """Per queue: apps waiting for containers, apps running containers, reservations its apps hold, and
    its state (``queue.state``: 1 for the one it is in, 0 for the others)."""
    states = GaugeMetricFamily(
        "sniper_queue_state",
        "A queue's state: running, draining (stopped, apps still run) or stopped; 1 for the one it is in",
        labels=["partition", "queue", "state"],
    )
    apps = GaugeMetricFamily(
        "sniper_queue_apps",
        "Apps of a queue: pending (some ask waits for containers), running (holds containers)",
        labels=["partition", "queue", "state"],
    )
    reservations = GaugeMetricFamily(
        "sniper_queue_reservations",
        "Reservations held for a queue's asks: preemption reservations (kind=preemption) and node reservations",
        labels=["partition", "queue", "kind"],
    )
    for host in hosted_caches(process):
        state = host.core.state
        pending: dict[str, int] = dict.fromkeys(state.queues, 0)
        running: dict[str, int] = dict.fromkeys(state.queues, 0)
        for app in list(state.apps.values()):
            path = app.queue.path
            if app.pending_asks:
                pending[path] = pending.get(path, 0) + 1
            if app.allocations:
                running[path] = running.get(path, 0) + 1
        held: dict[tuple[str, str], int] = {(q, k): 0 for q in state.queues for k in ("preemption", "node")}
        owners = [("preemption", r.app) for r in list(state.reservations.values())]
        owners += [("node", r.app) for r in list(state.node_reservations.values())]
        for kind, app_name in owners:
            owner = state.apps.get(app_name)
            if owner is not None:
                held[(owner.queue.path, kind)] = held.get((owner.queue.path, kind), 0) + 1
        for path, queue in list(state.queues.items()):
            now_in = queue_state(queue)
            for name in get_args(QueueState):
                states.add_metric([host.name, path, name], float(name == now_in))
            apps.add_metric([host.name, path, "pending"], pending[path])
            apps.add_metric([host.name, path, "running"], running[path])
        for (path, kind), count in held.items():
            reservations.add_metric([host.name, path, kind], count)
    yield apps
    yield reservations
    yield states


def _preempted_per_queue(process: CoreProcess | ReplicaProcess) -> Iterator[CounterMetricFamily]:
    """Per queue and role (victim: taken from it; beneficiary: freed for it), containers and resources."""
    labels = ["partition", "queue", "role"]
    containers = CounterMetricFamily(
        "sniper_queue_preempted_containers",
        "Containers preempted from a queue (role=victim) or for it (role=beneficiary)",
        labels=labels,
    )
    by_unit = {
        METRIC_SUFFIXES[name]: CounterMetricFamily(
            f"sniper_queue_preempted{METRIC_SUFFIXES[name]}",
            f"Resources preempted from a queue (role=victim) or for it (role=beneficiary) ({name}, {unit})",
            labels=labels,
        )
        for name, (unit, _) in BASE_UNITS.items()
    }
    other = CounterMetricFamily(
        "sniper_queue_preempted",
        "Other resources preempted from a queue (role=victim) or for it (role=beneficiary), in their own units",
        labels=[*labels, "resource"],
    )
    for partition, counters in list(process.counters.items()):
        for (queue, role), tally in list(counters.preempted.by_queue.items()):
            containers.add_metric([partition, queue, role], tally.containers)
            for suffix, label, value in _in_base_units(dict(tally.resource)):
                if label is None:
                    by_unit[suffix].add_metric([partition, queue, role], value)
                else:
                    other.add_metric([partition, queue, role, label], value)
    yield containers
    yield from by_unit.values()
    yield other


def _policy_figures(process: CoreProcess | ReplicaProcess) -> Iterator[Any]:
    """Per partition: preemption rounds and masked asks of each policy; missed allocation opportunities."""
    from sniper.actors.allocator import AllocatorActor
    from sniper.actors.policy import PolicyActor

    rounds = CounterMetricFamily(
        "sniper_preemption_rounds", "Rounds a preemption policy ran", labels=["partition", "policy"]
    )
    masked_now = GaugeMetricFamily(
        "sniper_masked_asks",
        "Asks a policy skips until room changes (no victim set could help them)",
        labels=["partition", "policy"],
    )
    masked = CounterMetricFamily("sniper_asks_masked", "Asks a policy put in its mask", labels=["partition", "policy"])
    wake = GaugeMetricFamily(
        "sniper_preemption_wake_at_seconds",
        "Partition time when the first container too young to take (preemption.min.runtime) comes of age, "
        "after a round that only such containers could serve; absent otherwise",
        labels=["partition", "policy"],
    )
    missed = GaugeMetricFamily(
        "sniper_missed_opportunities",
        "Allocation cycles the waiting asks went through without a placement, summed over the asks",
        labels=["partition"],
    )
    waiting = GaugeMetricFamily(
        "sniper_asks_missing_opportunities",
        "Waiting asks that went through at least one allocation cycle without a placement",
        labels=["partition"],
    )
    hosts: list[Host] = list(process.hosts.values())
    for host in hosts:
        for actor in list(host.actors):
            if isinstance(actor, PolicyActor):
                policy = actor.replica_of.policy
                if policy is None:
                    continue
                rounds.add_metric([host.name, actor.replica_of.name], getattr(policy, "rounds", 0))
                if policy.mask is not None:
                    masked_now.add_metric([host.name, actor.replica_of.name], len(policy.mask))
                    masked.add_metric([host.name, actor.replica_of.name], policy.mask.masked)
                if policy.wake_at is not None:
                    wake.add_metric([host.name, actor.replica_of.name], policy.wake_at)
            elif isinstance(actor, AllocatorActor):
                counts = list(actor.core.missed.values())
                missed.add_metric([host.name], sum(counts))
                waiting.add_metric([host.name], sum(1 for c in counts if c))
    yield from (rounds, masked_now, masked, wake, missed, waiting)


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

    def __init__(
        self,
        process: CoreProcess | ReplicaProcess,
        *,
        state_interval: float = STATE_INTERVAL,
        state_limit: int = STATE_LIMIT,
    ) -> None:
        self.process = process
        self.registry = CollectorRegistry()
        self.registry.register(_CoreCollector(process))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.histograms = CoreHistograms(self.registry)
        from sniper.cluster.process import CoreProcess

        if isinstance(process, CoreProcess):  # split replica processes time no partition work
            process.histograms = self.histograms
        process.loop_lag = self.histograms.loop_lag  # every process times its event loop
        process.longest_hold_cpu = self.histograms.longest_hold_cpu
        self.state = StateView(process, interval=state_interval, limit=state_limit)
        self.port: int | None = None
        self._server: _Server | None = None

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Start the HTTP endpoint (``port`` 0 picks a free one); returns the port.

        Call it on the process's event loop: ``/ws/v1/state`` is built there.
        """
        try:
            self.state.attach(asyncio.get_running_loop())
        except RuntimeError:
            self.state.attach(None)
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
        try:
            body = self.state.body()
        except Exception as err:  # the loop stopped or the build failed: say so, keep serving
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [f"state unavailable: {err!r}\n".encode()]
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
    """One value of a ``kv`` line: a mapping or list as compact JSON (``{"memory":4294967296}``); text
    quoted (JSON, control characters escaped) when it is empty or holds a space, ``=``, ``"`` or anything
    not printable, so that no name reaches the log raw."""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    text = str(value)
    if not text or not text.isprintable() or any(c.isspace() or c in '="' for c in text):
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
