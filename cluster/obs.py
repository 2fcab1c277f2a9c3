"""Observability of a core process: a Prometheus endpoint and structured logs.

Owns the process's :class:`prometheus_client.CollectorRegistry` (one per :class:`CoreMetrics`, so
several in-process cores in tests do not collide) and a collector that reads the hosted partitions at
scrape time: per-queue usage, pending and guarantee (gauges labelled partition/queue/resource),
allocations, preemptions and proposal rejections (counters), consumer lag per Kafka partition and the
inbox depth of every actor. Reading happens on the HTTP server's thread without locks: values are
plain ints read from dicts that the event loop mutates; a scrape may see a state a few messages old,
and a dict resized during the scrape is retried once, then skipped.

Logs: :func:`setup_logging` installs one handler writing JSON lines (``--log-format json``) or
``key=value`` lines (``kv``); records of actors carry their ``partition`` and ``actor``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from sniper.cluster.core import CoreProcess
    from sniper.cluster.roles import ReplicaProcess


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
        from sniper.cluster.core import HostedPartition

        process = self.process
        labels = ["partition", "queue", "resource"]
        usage = GaugeMetricFamily("sniper_queue_usage", "Committed usage of a queue", labels=labels)
        pending = GaugeMetricFamily("sniper_queue_pending", "Pending demand of a queue", labels=labels)
        guaranteed = GaugeMetricFamily("sniper_queue_guaranteed", "Guaranteed resources of a queue", labels=labels)
        hosts = list(process.hosts.values())
        caches = [host for host in hosts if isinstance(host, HostedPartition)]  # split replicas have none
        for host in caches:
            for queue in list(host.core.state.queues.values()):
                for resource, value in list(queue.allocated.items()):
                    usage.add_metric([host.name, queue.path, resource], value)
                for resource, value in list(queue.pending.items()):
                    pending.add_metric([host.name, queue.path, resource], value)
                for resource, value in list(queue.guaranteed.items()):
                    guaranteed.add_metric([host.name, queue.path, resource], value)
        yield usage
        yield pending
        yield guaranteed
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
        for host in caches:
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
        hosted.add_metric([], len(hosts))
        yield hosted
        dead = CounterMetricFamily("sniper_dead_letters", "Feed records dead-lettered by this process")
        dead.add_metric([], process.bus.dead_lettered)
        yield dead


class CoreMetrics:
    """The Prometheus registry and endpoint of one core process."""

    def __init__(self, process: CoreProcess | ReplicaProcess) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_CoreCollector(process))
        self.port: int | None = None
        self._server: Any = None

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Start the HTTP endpoint (``port`` 0 picks a free one); returns the port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        self.port = int(server.server_address[1])
        return self.port

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
