"""An example resource-manager adapter: a Kubernetes-like cluster, read from a CSV file, drives Sniper.

It is the shape docs/integration.md describes, written with confluent-kafka (librdkafka), not with
Sniper's own client: it publishes feed events as JSON, keyed by the partition's name, with
``partitioner=murmur2_random`` so they land where Sniper expects them, and acts on the decisions of
its partition (read as JSON or msgpack, whichever the ``content-type`` header says), dropping those of
a deposed owner (lower ``epoch``) and those seen before (``seq``).

The CSV source has one cluster change per line (``--follow`` keeps reading what is appended)::

    kind,name,namespace,app,cpu,memory,gpu
    node,node-1,,,16,64Gi,0          # a node joins: its allocatable
    pod,web-0,prod,web,2,4Gi,0       # a pod with schedulerName: sniper; its namespace picks the queue
    pod_done,web-0,prod,web,,,       # the pod finished
    node_gone,node-1,,,,,            # the node left

Actions are printed as JSON lines on stdout (``bind``, ``evict`` with its grace period in whole seconds,
``delete``, ``unschedulable``, and ``released`` when Sniper confirms an allocation is gone), where a real
adapter would call the Kubernetes API (Binding, Eviction, DELETE, pod status); ``sniper k8s`` is that
adapter. The loop closes: a ``kill`` deletes the pod and reports it gone (``allocation_released``), so the
preemption's beneficiaries are placed. With ``--state`` the adapter keeps its place across restarts: the
allocation id of every bound pod, the applications it announced, and the last decision it acted on (its
epoch, seq and Kafka offset), written after each change and read back at start, so a restarted adapter
acts on no decision twice and still releases a pod it bound before.

    python examples/k8s_csv_adapter.py --bootstrap 127.0.0.1:9092 --source pods.csv --queues queues.yaml \
        --state adapter-state.json
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import msgspec
import yaml

from sniper.core.resources import parse_quantity  # Kubernetes quantities ("4Gi", "500m") in Sniper's units
from sniper.transport.kafka import kafka_partition

CONTENT_TYPE = ("content-type", b"application/json")


class Adapter:
    """One scheduler partition's resource manager: feed out, decisions in."""

    def __init__(
        self, bootstrap: str, prefix: str, partition: str, kafka_partitions: int, state: Path | None = None
    ) -> None:
        self.partition = partition
        self.feed_topic = prefix + "feed"
        self.state = state
        self.producer = confluent_kafka.Producer(
            # Sniper places a partition's records with murmur2 (Kafka's Java default): so must we.
            {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "acks": "all"}
        )
        self.consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"adapter-{partition}", "enable.auto.commit": False}
        )
        self.apps: set[str] = set()
        self.allocation_of: dict[str, str] = {}  # pod -> allocation id, as a real adapter reads it off the pod
        self.epoch = 0
        self.seq = 0
        self.offset = -1  # the Kafka offset of the last decision acted on
        self.sent = 0
        self.load()
        # Our partition's decisions all lie on one Kafka partition: read just that one, after what we acted on.
        where = kafka_partition(partition, kafka_partitions)
        start = self.offset + 1 if self.offset >= 0 else confluent_kafka.OFFSET_BEGINNING
        self.consumer.assign([confluent_kafka.TopicPartition(prefix + "decisions", where, start)])

    @property
    def pods(self) -> dict[str, str]:
        """allocation id -> pod."""
        return {allocation: pod for pod, allocation in self.allocation_of.items()}

    # ---- the place it keeps across restarts
    def load(self) -> None:
        if self.state is None or not self.state.exists():
            return
        saved = json.loads(self.state.read_text())
        self.apps = set(saved["apps"])
        self.allocation_of = dict(saved["allocations"])
        self.epoch, self.seq, self.offset = saved["epoch"], saved["seq"], saved["offset"]

    def save(self) -> None:
        if self.state is None:
            return
        saved = {
            "apps": sorted(self.apps),
            "allocations": self.allocation_of,
            "epoch": self.epoch,
            "seq": self.seq,
            "offset": self.offset,
        }
        partial = self.state.with_name(self.state.name + ".partial")
        partial.write_text(json.dumps(saved))
        os.replace(partial, self.state)  # a crash leaves the old place or the new one, never half of one

    # ---- the feed
    def publish(self, event: dict[str, Any]) -> None:
        event = {"partition": self.partition, "t": time.time(), **event}
        # ``id`` makes a replayed event a no-op: Sniper remembers the ids it has seen.
        self.producer.produce(
            self.feed_topic, key=self.partition.encode(), value=json.dumps(event).encode(), headers=[CONTENT_TYPE]
        )
        self.sent += 1
        self.producer.poll(0)

    def configure(self, queues_yaml: Path) -> None:
        """The partition's queues, from a YuniKorn queues.yaml (its entry for this partition)."""
        config = yaml.safe_load(queues_yaml.read_text())
        entry = next(p for p in config["partitions"] if p.get("name", "default") == self.partition)
        self.publish({"type": "partition_config", "id": f"config-{queues_yaml.stat().st_mtime_ns}", "config": entry})

    def on_row(self, row: dict[str, str]) -> None:
        kind, name = row["kind"], row["name"]
        if kind == "node":
            self.publish({"type": "node_added", "id": f"node-{name}", "node": name, "capacity": resources(row)})
        elif kind == "node_gone":
            self.publish({"type": "node_removed", "id": f"node-gone-{name}", "node": name})
        elif kind == "pod":
            app = row["app"] or name
            if app not in self.apps:  # YuniKorn's placement rule: the namespace names the queue
                self.apps.add(app)
                queue = f"root.{row['namespace'] or 'default'}"
                self.publish({"type": "app_added", "id": f"app-{app}", "app": app, "queue": queue})
                self.save()
            self.publish(
                {"type": "ask_added", "id": f"pod-{name}", "app": app, "ask": name, "resource": resources(row)}
            )
        elif kind == "pod_done":
            allocation = self.allocation_of.pop(name, None)
            if allocation is not None:
                self.publish({"type": "allocation_released", "id": f"done-{name}", "allocation": allocation})
                self.save()
            else:
                self.publish({"type": "ask_removed", "id": f"gone-{name}", "app": row["app"] or name, "ask": name})
        else:
            print(json.dumps({"action": "skipped", "row": row, "reason": f"unknown kind {kind!r}"}), flush=True)

    # ---- the decisions
    def poll_decisions(self, timeout: float) -> list[dict[str, Any]]:
        """Act on the decisions that came in within ``timeout`` seconds; returns the actions taken."""
        actions: list[dict[str, Any]] = []
        for message in self.consumer.consume(num_messages=500, timeout=timeout):
            if message.error() is not None or message.key() != self.partition.encode():
                continue
            value, media = message.value() or b"", dict(message.headers() or []).get("content-type") or b""
            decision = decode(value, media if isinstance(media, bytes) else media.encode())
            if decision["epoch"] < self.epoch or (decision["epoch"] == self.epoch and decision["seq"] <= self.seq):
                continue  # a deposed owner's output, or one seen already
            self.epoch, self.seq = decision["epoch"], decision["seq"]
            self.offset = message.offset() or 0
            action = self.act(decision)
            self.save()
            if action is not None:
                print(json.dumps(action), flush=True)
                actions.append(action)
        return actions

    def act(self, x: dict[str, Any]) -> dict[str, Any] | None:
        kind = x["type"]
        if kind == "allocated":  # a Binding of the pod to the node
            self.allocation_of[x["ask"]] = x["allocation"]
            return {"action": "bind", "pod": x["ask"], "node": x["node"], "allocation": x["allocation"]}
        if kind == "preempt" and not x["observe_only"]:  # the Eviction API, with the time left as grace
            grace = max(0, math.ceil(x["deadline"] - x["t"]))  # gracePeriodSeconds is an integer
            return {"action": "evict", "pod": self.pods.get(x["allocation"]), "grace_seconds": grace}
        if kind == "kill":  # the grace period is over: delete the pod now, and say it is gone
            pod = self.pods.get(x["allocation"])
            self.allocation_of.pop(pod or "", None)
            self.publish(
                {"type": "allocation_released", "id": f"killed-{x['allocation']}", "allocation": x["allocation"]}
            )
            return {"action": "delete", "pod": pod, "allocation": x["allocation"], "reason": x["reason"]}
        if kind == "released":  # Sniper counts the allocation gone: its room is free again
            return {"action": "released", "allocation": x["allocation"], "app": x["app"]}
        if kind == "rejected":  # a PodScheduled=False condition with the reason
            return {"action": "unschedulable", "pod": x["ask"], "reason": x["reason"]}
        return None


def decode(value: bytes, content_type: bytes) -> Any:
    if content_type.startswith(b"application/msgpack") or (not content_type and not value.startswith(b"{")):
        return msgspec.msgpack.decode(value)
    return json.loads(value)


def resources(row: dict[str, str]) -> dict[str, int]:
    """A row's cpu, memory and gpu as Sniper's units (milli-cores, MiB, a count)."""
    out: dict[str, int] = {}
    for column, name in (("cpu", "vcore"), ("memory", "memory"), ("gpu", "nvidia.com/gpu")):
        if row.get(column):
            out[name] = parse_quantity(name, row[column])
    return out


def rows(source: Path, follow: bool) -> Iterator[dict[str, str] | None]:
    """The CSV's rows; with ``follow``, None whenever it has nothing new (the caller polls meanwhile)."""
    with source.open(newline="") as handle:
        header = next(csv.reader([handle.readline()]))
        while True:
            line = handle.readline()
            if line.strip():
                yield dict(zip(header, next(csv.reader([line])), strict=False))
            elif line == "":
                if not follow:
                    return
                yield None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", type=Path, required=True, help="the CSV of cluster changes")
    parser.add_argument("--queues", type=Path, help="a YuniKorn queues.yaml to publish as the partition's config")
    parser.add_argument("--partition", default="default")
    parser.add_argument("--prefix", default="sniper.")
    parser.add_argument("--kafka-partitions", type=int, default=8, help="partitions of Sniper's topics")
    parser.add_argument("--follow", action="store_true", help="keep reading what is appended to the CSV")
    parser.add_argument("--until-bound", type=int, default=0, help="exit once this many pods were bound")
    parser.add_argument("--state", type=Path, help="where it keeps its place (allocation ids, last decision)")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    args = parser.parse_args(argv)

    adapter = Adapter(args.bootstrap, args.prefix, args.partition, args.kafka_partitions, args.state)
    if args.queues is not None:
        adapter.configure(args.queues)
    bound = 0
    deadline = time.monotonic() + args.timeout
    try:
        for row in rows(args.source, args.follow):
            if row is not None:
                adapter.on_row(row)
                continue
            adapter.producer.flush(10)
            bound += sum(a["action"] == "bind" for a in adapter.poll_decisions(0.5))
            if (args.until_bound and bound >= args.until_bound) or time.monotonic() > deadline:
                break
        left = adapter.producer.flush(30)
        if left:
            print(f"{left} feed record(s) not delivered", file=sys.stderr)
            return 3
        while args.until_bound and bound < args.until_bound and time.monotonic() < deadline:
            bound += sum(a["action"] == "bind" for a in adapter.poll_decisions(0.5))
    finally:
        adapter.consumer.close()
    if args.until_bound and bound < args.until_bound:
        print(f"only {bound} of {args.until_bound} pods bound within {args.timeout:g} s", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
