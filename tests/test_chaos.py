"""Chaos on the real broker: node churn, a core process killed with SIGKILL (and a third joining), and a
feed with duplicated, reordered and malformed events.

An independent checker (:class:`sniper.resource_manager.checker.OrderedChecker`, built on
``sniper.simulator.model``) reads the feed and the decisions topics and checks the invariants
(architecture: Invariants) on the order the caches committed.
Every wait is on a condition (decisions seen, a marker's decision, a snapshot), bounded by
``anyio.fail_after``; nothing asserts on timing.

Markers: an ``ask_added`` for an app that does not exist, with a known id; the cache answers it with
a ``rejected`` decision once it handled every earlier record of the partition, so when the checker
has applied that decision it has seen everything that came before.
"""

from __future__ import annotations

import random
import signal
from typing import Any

import anyio
import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from anyio.abc import TaskGroup

from sniper.bench.e2e import stop_core
from sniper.cluster.process import CoreOptions, CoreProcess
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.snapshot import Snapshot, decode_body
from sniper.transport.bus import DEADLETTER, DECISIONS, FEED, SNAPSHOTS
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_support import partition_raw, queue
from tests.kafka_support import CoreSubprocess, TopicReader

pytestmark = pytest.mark.kafka

WAIT = 90.0


class Watch(TopicReader):
    """Reads the feed and the decisions into an :class:`OrderedChecker`; wakes waiters on every change."""

    def applied(self, partition: str) -> list[d.DecisionMsg]:
        part = self.checker.parts.get(partition)
        return [] if part is None else part.accepted

    def pending(self, partitions: list[str]) -> int:
        return sum(self.checker.part(n).model.pending_containers() for n in partitions)

    async def settle(self, bus: KafkaBus, partitions: list[str], tag: str) -> None:
        """Publish a marker per partition and wait until the checker applied each marker's decision."""
        for name in partitions:
            marker = f.AskAdded(
                partition=name, id=f"marker-{tag}-{name}", app="no-such-app", ask="m", resource={"m": 1}
            )
            await bus.publish(FEED, name, marker)

        def done() -> bool:
            return all(
                any(isinstance(x, d.Rejected) and x.event == f"marker-{tag}-{n}" for x in self.applied(n))
                for n in partitions
            )

        await self.until(done)


async def watching(bus: KafkaBus) -> Watch:
    # An observer: the dead letters of bad feed records are the owning core's to write (once).
    feed = await bus.subscribe_ready(FEED, group=bus.settings.prefix + "checker-feed", capacity=1 << 15, bad="skip")
    decisions = await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "checker-decisions", capacity=1 << 15)
    return Watch(feed, decisions)


def config(name: str) -> f.PartitionConfigEvent:
    raw = partition_raw(queue("a", guaranteed={"memory": 64}), queue("b", guaranteed={"memory": 64}), name=name)
    return f.PartitionConfigEvent(partition=name, id=f"{name}-config", config=raw)


def options() -> CoreOptions:
    return CoreOptions(group="chaos", tick=0.1, snapshot_interval=0.3, stop_timeout=3.0)


def final_violations(watch: Watch) -> list[Any]:
    watch.checker.finish(0.0)
    return [v for part in watch.checker.parts.values() for v in part.model.violations]


# ------------------------------------------------------------------------------------ (a) node churn


async def test_node_churn_keeps_every_invariant(kafka_settings: KafkaSettings, bus: KafkaBus) -> None:
    rng = random.Random(7)
    name = "churn"
    with anyio.fail_after(WAIT):
        watch = await watching(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.pump_feed)
            tg.start_soon(watch.pump_decisions)
            await tg.start(CoreProcess(kafka_settings, options()).run)
            nodes = {f"n{i}" for i in range(6)}
            setup: list[f.Feed] = [config(name)]
            setup += [
                f.NodeAdded(partition=name, id=f"add-{n}-0", node=n, capacity={"memory": 16}) for n in sorted(nodes)
            ]
            setup += [f.AppAdded(partition=name, id=f"app-{q}", app=f"app-{q}", queue=f"root.{q}") for q in "ab"]
            await bus.publish_many(FEED, [(name, e) for e in setup])
            removed: set[str] = set()
            model = watch.checker.part(name).model
            for round_ in range(12):
                wave = [
                    f.AskAdded(
                        partition=name,
                        id=f"ask-{round_}-{i}",
                        app=f"app-{'ab'[i % 2]}",
                        ask=f"k{round_}-{i}",
                        resource={"memory": 2},
                        count=2,
                    )
                    for i in range(5)
                ]
                await bus.publish_many(FEED, [(name, e) for e in wave])
                # Churn while the workload runs: take away a node that holds allocations, or bring one back.
                busy = sorted({a.node for a in model.allocations.values()} - removed)
                if removed and (rng.random() < 0.4 or not busy):
                    back = rng.choice(sorted(removed))
                    removed.discard(back)
                    churn: f.Feed = f.NodeAdded(
                        partition=name, id=f"add-{back}-{round_}", node=back, capacity={"memory": 16}
                    )
                else:
                    gone = rng.choice(busy or sorted(nodes - removed))
                    removed.add(gone)
                    churn = f.NodeRemoved(partition=name, id=f"rm-{gone}-{round_}", node=gone)
                await bus.publish(FEED, name, churn)
                await watch.settle(bus, [name], f"round{round_}")
            late = [
                f.NodeAdded(partition=name, id=f"add-{n}-end", node=n, capacity={"memory": 16}) for n in sorted(removed)
            ]
            late += [f.NodeAdded(partition=name, id=f"x{i}", node=f"x{i}", capacity={"memory": 64}) for i in range(4)]
            await bus.publish_many(FEED, [(name, e) for e in late])
            await watch.until(lambda: sum(isinstance(x, d.Allocated) for x in watch.applied(name)) >= 120)
            await watch.settle(bus, [name], "end")
            tg.cancel_scope.cancel()
    decisions = watch.applied(name)
    lost = [x for x in decisions if isinstance(x, d.AllocationLost)]
    assert lost, "node churn lost no allocation: the test did not exercise node loss"
    assert final_violations(watch) == []
    assert watch.checker.part(name).model.pending_containers() == 0
    allocated = [x.allocation for x in decisions if isinstance(x, d.Allocated)]
    assert len(allocated) == len(set(allocated)) == 120


# ------------------------------------------------------------------------------------ (b) SIGKILL failover


async def spawn_core(settings: KafkaSettings, tg: TaskGroup) -> CoreSubprocess:
    return await CoreSubprocess.spawn(settings, tg, "chaos", "--tick", "0.1", "--snapshot-interval", "0.3")


async def reap(core: CoreSubprocess) -> None:
    await stop_core(core.process)


def alive_in(snapshot: Snapshot) -> set[str]:
    return {c.allocation for c in decode_body(snapshot).changes if isinstance(c, p.AllocationSet)}


async def test_a_killed_core_loses_nothing_committed(kafka_settings: KafkaSettings, bus: KafkaBus) -> None:
    names = [f"part{i}" for i in range(6)]
    cores: list[CoreSubprocess] = []
    latest: dict[str, Snapshot] = {}
    with anyio.fail_after(WAIT + 60):
        watch = await watching(bus)
        snapshots = await bus.subscribe_ready(
            SNAPSHOTS, group=bus.settings.prefix + "checker-snapshots", capacity=1 << 12
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.pump_feed)
            tg.start_soon(watch.pump_decisions)

            async def pump_snapshots() -> None:
                while True:
                    raw = await snapshots.receive()
                    snapshots.ack()
                    snap = msgspec.convert(raw, Snapshot)
                    latest[snap.partition] = snap
                    watch._wake()

            tg.start_soon(pump_snapshots)
            try:
                for _ in range(2):  # each core recorded as it starts, so the finally stops it
                    cores.append(await spawn_core(kafka_settings, tg))
                for core in cores:
                    await core.until_assigned()

                def wave(tag: str, asks: int) -> list[tuple[str, f.Feed]]:
                    out: list[tuple[str, f.Feed]] = []
                    for n in names:
                        out += [
                            (
                                n,
                                f.AskAdded(
                                    partition=n, id=f"{n}-{tag}{i}", app="app", ask=f"{tag}{i}", resource={"memory": 1}
                                ),
                            )
                            for i in range(asks)
                        ]
                    return out

                setup: list[tuple[str, f.Feed]] = []
                for n in names:
                    setup += [
                        (n, config(n)),
                        (n, f.NodeAdded(partition=n, id=f"{n}-node", node="n1", capacity={"memory": 1000})),
                        (n, f.AppAdded(partition=n, id=f"{n}-app", app="app", queue="root.a")),
                    ]

                def allocated(count: int) -> Any:
                    def enough() -> bool:
                        return all(sum(isinstance(x, d.Allocated) for x in watch.applied(n)) >= count for n in names)

                    return enough

                await bus.publish_many(FEED, setup + wave("a", 20))
                await watch.until(allocated(20))
                victim_partitions = set(cores[0].assigned)
                # Kill one core mid-run, with more work in flight.
                await bus.publish_many(FEED, wave("b", 20))
                cores[0].process.send_signal(signal.SIGKILL)
                await bus.publish_many(FEED, wave("c", 20))
                await watch.until(allocated(60))
                # A third core joins: a rebalance hands partitions over cleanly.
                cores.append(await spawn_core(kafka_settings, tg))
                await cores[2].until_assigned()
                await bus.publish_many(FEED, wave("d", 20))
                await watch.until(allocated(80))
                await watch.settle(bus, names, "end")

                def snapshots_caught_up() -> bool:
                    return all(n in latest and latest[n].decision_seq >= watch.checker.parts[n].last_seq for n in names)

                await watch.until(snapshots_caught_up)
            finally:
                with anyio.CancelScope(shield=True):
                    for core in cores:
                        await reap(core)
            tg.cancel_scope.cancel()
    logs = ["\n".join(core.lines[-30:]) for core in cores]
    assert final_violations(watch) == [], logs
    moved = [n for n in names if bus.partition_for(n) in victim_partitions]
    epochs = {n: watch.checker.parts[n].max_epoch for n in names}
    assert moved and all(epochs[n] >= 2 for n in moved), (
        epochs,
        victim_partitions,
        [c.process.returncode for c in cores],
        logs,
    )
    for n in names:
        decisions = watch.applied(n)
        allocated = [x.allocation for x in decisions if isinstance(x, d.Allocated)]
        assert len(allocated) == len(set(allocated)) == 80, (n, len(allocated), len(set(allocated)))
        gone = {x.allocation for x in decisions if isinstance(x, d.Released | d.AllocationLost | d.Kill)}
        alive = alive_in(latest[n])
        # Nothing committed is lost: every allocation seen is alive in the owner's state or gone in the log.
        assert set(allocated) == alive | gone, n
        assert alive == set(watch.checker.parts[n].model.allocations), n
        seqs = [x.seq for x in decisions]
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs)), n


# ------------------------------------------------------------------------------------ (c) bad feeds


async def test_duplicated_reordered_and_malformed_events(kafka_settings: KafkaSettings, bus: KafkaBus) -> None:
    name = "messy"
    with anyio.fail_after(WAIT):
        watch = await watching(bus)
        letters = await bus.subscribe_ready(DEADLETTER, group=bus.settings.prefix + "checker-letters")
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.pump_feed)
            tg.start_soon(watch.pump_decisions)
            await tg.start(CoreProcess(kafka_settings, options()).run)
            node = f.NodeAdded(partition=name, id="node", node="n1", capacity={"memory": 100})
            app = f.AppAdded(partition=name, id="app", app="app", queue="root.a")
            early = f.AskAdded(partition=name, id="early", app="app", ask="early", resource={"memory": 1}, count=3)
            asks = [
                f.AskAdded(partition=name, id=f"ask{i}", app="app", ask=f"k{i}", resource={"memory": 2}, count=2)
                for i in range(10)
            ]
            # Reordered: an ask before its app (rejected), then everything twice, asks shuffled.
            ordered: list[f.Feed] = [config(name), early, node, app]
            shuffled = list(asks)
            random.Random(3).shuffle(shuffled)
            for event in [*ordered, *shuffled]:
                await bus.publish_many(FEED, [(name, event), (name, event)])
            again = msgspec.structs.replace(early, id="early-again")
            await bus.publish(FEED, name, again)
            # Malformed: undecodable bytes, a wrong schema, a negative quantity, an empty record.
            producer = AIOKafkaProducer(bootstrap_servers=kafka_settings.bootstrap)
            await producer.start()
            try:
                topic = kafka_settings.topic(FEED)
                key = name.encode()
                await producer.send_and_wait(topic, b"\xc1\xc1 not msgpack", key=key)
                await producer.send_and_wait(topic, msgspec.msgpack.encode({"type": "ask_added", "app": 3}), key=key)
                bad = {"type": "node_added", "partition": name, "node": "neg", "capacity": {"memory": -5}}
                await producer.send_and_wait(topic, msgspec.msgpack.encode(bad), key=key)
                await producer.send_and_wait(topic, None, key=key)
            finally:
                await producer.stop()
            reasons: list[str] = []

            def kinds() -> set[str]:
                found = set()
                for r in reasons:
                    if r.startswith("undecodable"):
                        found.add("undecodable")
                    elif "$.app" in r:
                        found.add("schema")
                    elif "capacity" in r and r.startswith("invalid"):
                        found.add("negative")
                    elif "empty record" in r:
                        found.add("empty")
                return found

            while len(kinds()) < 4:  # the core dead-letters them (the checker only skips them)
                letter = await letters.receive()
                letters.ack()
                assert letter.topic == FEED and letter.reason
                reasons.append(letter.reason)
            await watch.until(lambda: watch.pending([name]) == 0 and watch.checker.part(name).model.decisions > 0)
            await watch.settle(bus, [name], "end")
            tg.cancel_scope.cancel()
    decisions = watch.applied(name)
    rejected = [x for x in decisions if isinstance(x, d.Rejected)]
    assert any(x.ask == "early" and "unknown app" in x.reason for x in rejected)
    allocated = [x for x in decisions if isinstance(x, d.Allocated)]
    per_ask: dict[str, int] = {}
    for x in allocated:
        per_ask[x.ask] = per_ask.get(x.ask, 0) + 1
    assert per_ask == {"early": 3, **{f"k{i}": 2 for i in range(10)}}  # duplicates changed nothing
    assert len(reasons) == 4, reasons  # one dead letter each
    assert final_violations(watch) == []
