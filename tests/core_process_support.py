"""What the tests of core processes on the real broker share: a small workload per partition, core
options with short intervals, and a reader of the decisions topic that keeps what it saw.

Tests wait on conditions (:meth:`Decisions.until`) bounded by ``anyio.fail_after(WAIT)``, never on time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import anyio

from sniper.cluster.process import CoreOptions
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.transport.bus import DEADLETTER, DECISIONS
from sniper.transport.kafka import KafkaBus, KafkaSubscription
from tests.core_support import partition_raw, queue

WAIT = 60.0  # a bound on a hang, never a time expected


def config_event(name: str) -> f.PartitionConfigEvent:
    """Partition ``name`` with queues a (64 MiB guaranteed) and b."""
    return f.PartitionConfigEvent(
        partition=name,
        id=f"{name}-config",
        config=partition_raw(queue("a", guaranteed={"memory": 64}), queue("b"), name=name),
    )


def workload(name: str, asks: int, tag: str = "") -> list[f.Feed]:
    """Partition ``name`` configured, two nodes of 64 MiB and one app in root.a asking ``asks`` 4 MiB
    containers (``tag`` tells the asks of two workloads on one partition apart)."""
    return [
        config_event(name),
        f.NodeAdded(partition=name, id=f"{name}-n1", node="n1", capacity={"memory": 64}),
        f.NodeAdded(partition=name, id=f"{name}-n2", node="n2", capacity={"memory": 64}),
        f.AppAdded(partition=name, id=f"{name}-app", app="app", queue="root.a"),
        *(
            f.AskAdded(partition=name, id=f"{name}-ask{tag}{i}", app="app", ask=f"k{tag}{i}", resource={"memory": 4})
            for i in range(asks)
        ),
    ]


class Decisions:
    """A reader of the decisions topic that keeps everything it saw."""

    def __init__(self, sub: KafkaSubscription) -> None:
        self.sub = sub
        self.items: list[d.DecisionMsg] = []
        self.changed = anyio.Event()

    async def pump(self) -> None:
        while True:
            try:
                dec = await self.sub.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            self.sub.ack()
            self.items.append(dec)
            self.changed.set()
            self.changed = anyio.Event()

    async def until(self, condition: Callable[[list[d.DecisionMsg]], bool]) -> None:
        while not condition(self.items):
            await self.changed.wait()

    def of(self, kind: type[Any], partition: str | None = None) -> list[Any]:
        return [x for x in self.items if isinstance(x, kind) and (partition is None or x.partition == partition)]


async def read_decisions(bus: KafkaBus) -> Decisions:
    """A :class:`Decisions` reader subscribed (and assigned) on the test's decisions topic; pump it."""
    return Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))


async def read_dead_letters(bus: KafkaBus) -> KafkaSubscription:
    """A subscription, assigned, to the test's dead-letter topic."""
    return await bus.subscribe_ready(DEADLETTER, group=bus.settings.prefix + "letters")


def options(**overrides: Any) -> CoreOptions:
    """Core options for tests: group ``cores``, ticks every 0.1 s, a snapshot every 0.5 s, 3 s to stop."""
    return dataclasses.replace(
        CoreOptions(group="cores", tick=0.1, snapshot_interval=0.5, stop_timeout=3.0), **overrides
    )
