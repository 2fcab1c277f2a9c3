"""The core process on the real (embedded) broker: hosting, decisions, dead letters, snapshots, failover.

Core processes run in-process here (a task each); the chaos tests run them as real subprocesses. Every
wait is on a condition (decisions received, an assignment) bounded by ``anyio.fail_after``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from sniper.cluster.logread import read_partition
from sniper.cluster.process import CoreOptions, CoreProcess, HostedPartition
from sniper.core.recovery import CLOCK_REFUSED, DurableCache
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.deadletter import DeadLetter, deadletter_msgpack
from sniper.messages.snapshot import snapshot_msgpack
from sniper.messages.wire import CONTENT_TYPE
from sniper.transport.bus import DECISIONS, FEED, SNAPSHOTS
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_process_support import (
    WAIT,
    Decisions,
    config_event,
    options,
    read_dead_letters,
    read_decisions,
    workload,
)

pytestmark = pytest.mark.kafka


async def test_a_core_hosts_partitions_and_answers_with_stamped_decisions(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    with anyio.fail_after(WAIT):
        reader = await read_decisions(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            process = CoreProcess(kafka_settings, options())
            await tg.start(process.run)
            for event in workload("p1", 3) + workload("p2", 2):
                await bus.publish(FEED, event.partition, event)
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 5)
            assert {x.epoch for x in reader.items} == {1}
            assert all(x.feed_offset >= 0 for x in reader.items)
            assert set(process.hosts) == {"p1", "p2"}
            # Bad input: an unknown app (rejected by the state), an absurd node (refused at the edge), an
            # event on the wrong Kafka partition, an event keyed by another partition's name: the last
            # three are dead-lettered, once each.
            await bus.publish(
                FEED, "p1", f.AskAdded(partition="p1", id="x1", app="nope", ask="k", resource={"memory": 1})
            )
            await bus.publish(FEED, "p1", f.NodeAdded(partition="p1", id="x2", node="big", capacity={"memory": 2**41}))
            wrong = next(k for k in (f"w{i}" for i in range(100)) if bus.partition_for(k) != bus.partition_for("p1"))
            misplaced = f.AppAdded(partition=wrong, id="x3", app="z", queue="root.a")
            await bus.publish_many(FEED, [(wrong, misplaced)], partition=bus.partition_for("p1"))
            await bus.publish(FEED, "p1", f.AppAdded(partition="p2", id="x4", app="z", queue="root.a"))
            await reader.until(lambda _: len(reader.of(d.Rejected, "p1")) == 1)
            assert "unknown app nope" in reader.of(d.Rejected, "p1")[0].reason
            letters = await read_dead_letters(bus)
            got = sorted([await letters.receive() for _ in range(3)], key=lambda letter: letter.offset)
            reasons = [letter.reason for letter in got]  # in the order of the feed records
            assert "sanity cap" in reasons[0], reasons
            assert f"partition {wrong!r} belongs on Kafka partition" in reasons[1], reasons
            assert "record key 'p1' is not the partition its event names ('p2')" in reasons[2], reasons
            # Raw garbage on the feed is dead-lettered by the transport; the core carries on.
            producer = AIOKafkaProducer(bootstrap_servers=kafka_settings.bootstrap)
            await producer.start()
            try:
                await producer.send_and_wait(kafka_settings.topic(FEED), b"\xc1garbage", key=b"p1")
            finally:
                await producer.stop()
            second = await letters.receive()
            assert "undecodable" in second.reason
            await bus.publish(
                FEED, "p1", f.AskAdded(partition="p1", id="late", app="app", ask="late", resource={"memory": 4})
            )
            await reader.until(lambda _: any(x.ask == "late" for x in reader.of(d.Allocated)))
            await letters.aclose()
            tg.cancel_scope.cancel()
    assert deadletter_msgpack is not None


async def test_a_dead_letter_carries_the_json_record_as_its_producer_wrote_it(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    """Records that decode but are not applied (the wrong Kafka partition, one partition too many, a time
    too far ahead) are dead-lettered with their bytes, not an encoding of the event they decoded to."""
    home = bus.partition_for("p1")
    wrong = next(k for k in (f"w{i}" for i in range(100)) if bus.partition_for(k) != home)
    extra = next(k for k in (f"x{i}" for i in range(100)) if bus.partition_for(k) != home)

    def app_added(partition: str, app: str, t: float = 0.0) -> bytes:  # as a producer writes it by hand
        event = {"type": "app_added", "partition": partition, "id": app, "app": app, "queue": "root.a", "t": t}
        return json.dumps(event, indent=1).encode()

    sent = [
        (wrong, home, app_added(wrong, "misplaced")),  # on p1's Kafka partition, keyed by its own name
        (extra, bus.partition_for(extra), app_added(extra, "one-too-many")),  # max_partitions=1 hosts p1 only
        ("p1", home, app_added("p1", "far", t=1e9)),  # beyond admission.max_clock_skew
    ]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_settings.bootstrap, acks="all", enable_idempotence=False)
    with anyio.fail_after(WAIT):
        reader = await read_decisions(bus)
        letters = await read_dead_letters(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            process = CoreProcess(kafka_settings, options(max_partitions=1))
            await tg.start(process.run)
            await bus.publish_many(FEED, [("p1", e) for e in workload("p1", 1)])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 1)
            await producer.start()
            try:
                for key, partition, value in sent:
                    await producer.send_and_wait(
                        kafka_settings.topic(FEED),
                        value,
                        key=key.encode(),
                        partition=partition,
                        headers=[(CONTENT_TYPE, b"application/json")],
                    )
            finally:
                await producer.stop()
            got: dict[str, DeadLetter] = {}
            while len(got) < len(sent):
                letter = await letters.receive()
                letters.ack()
                got[letter.key] = letter
            await letters.aclose()
            tg.cancel_scope.cancel()
    assert f"partition {wrong!r} belongs on Kafka partition" in got[wrong].reason
    assert "hosts its maximum of 1 partitions" in got[extra].reason
    assert got["p1"].reason.startswith(CLOCK_REFUSED)
    for key, partition, value in sent:
        letter = got[key]
        assert letter.payload == value, key
        assert (letter.topic, letter.partition) == (FEED, partition)
    assert [x.reason for x in reader.of(d.Rejected, "p1")] == [got["p1"].reason]


async def test_a_retired_partition_gives_its_place_under_max_partitions_to_a_new_one(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    """With ``max_partitions=2``: two partitions run; one is retired (``partition_removed``), so a third is
    served; the retired one, configured again, holds nothing while the other two run, so its records
    are dead-lettered (a partition that holds something is never stopped to make room)."""
    first, second, third = "r1", "r2", "r3"
    with anyio.fail_after(WAIT):
        reader = await read_decisions(bus)
        letters = await read_dead_letters(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            process = CoreProcess(kafka_settings, options(max_partitions=2))
            await tg.start(process.run)
            await bus.publish_many(FEED, [(e.partition, e) for e in workload(first, 1) + workload(second, 1)])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 2)
            await bus.publish(FEED, first, f.PartitionRemoved(partition=first, id="retire"))
            await reader.until(lambda _: len(reader.of(d.PartitionRemoved, first)) == 1)
            await bus.publish_many(FEED, [(third, e) for e in workload(third, 2)])
            await reader.until(lambda _: len(reader.of(d.Allocated, third)) == 2)
            assert set(process.hosts) == {second, third}
            await bus.publish(FEED, first, config_event(first))
            letter = await letters.receive()
            await letters.aclose()
            tg.cancel_scope.cancel()
    assert (letter.key, letter.offset >= 0) == (first, True)
    assert "hosts its maximum of 2 partitions" in letter.reason
    assert reader.of(d.Rejected) == []


async def test_integers_ids_and_names_out_of_their_bounds_are_dead_lettered_with_the_field_path(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    """A priority of 10^400, a 600-character event id (a ``sync``'s too), a 900 KB app name: each record is
    refused at the edge with its field's path, and the partition goes on with the records around them."""
    home = bus.partition_for("p1")
    base = {"partition": "p1", "queue": "root.a"}
    sent = {
        "priority": {"type": "app_added", "id": "big-priority", "app": "x", **base, "priority": 10**400},
        "sync-id": {"type": "sync", "partition": "p1", "id": "s" * 600},
        "app-name": {"type": "app_added", "id": "long-name", "app": "a" * 900_000, **base},
        "group": {"type": "app_added", "id": "long-group", "app": "g", **base, "groups": ["g" * 513]},
    }
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_settings.bootstrap, acks="all", enable_idempotence=False, max_request_size=2 << 20
    )
    with anyio.fail_after(WAIT):
        reader = await read_decisions(bus)
        letters = await read_dead_letters(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            await tg.start(CoreProcess(kafka_settings, options()).run)
            await bus.publish_many(FEED, [("p1", e) for e in workload("p1", 1)])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 1)
            await producer.start()
            try:
                for value in sent.values():
                    await producer.send_and_wait(
                        kafka_settings.topic(FEED), json.dumps(value).encode(), key=b"p1", partition=home
                    )
            finally:
                await producer.stop()
            await bus.publish(FEED, "p1", f.Sync(partition="p1", id="after"))
            await reader.until(lambda _: any(isinstance(x, d.Synced) for x in reader.items))
            got = []
            while len(got) < len(sent):
                got.append(await letters.receive())
                letters.ack()
            await letters.aclose()
            tg.cancel_scope.cancel()
    reasons = [letter.reason for letter in sorted(got, key=lambda letter: letter.offset)]
    assert "<= 2147483647 - at `$.priority`" in reasons[0], reasons[0]
    assert "length <= 512 - at `$.id`" in reasons[1], reasons[1]
    assert "length <= 512 - at `$.app`" in reasons[2], reasons[2][:200]
    assert "length <= 512 - at `$.groups[0]`" in reasons[3], reasons[3]
    assert [x.event for x in reader.of(d.Synced)] == ["after"] and reader.of(d.Rejected) == []


async def test_a_state_that_cannot_be_snapshot_is_counted_alerted_once_and_fails_health_until_it_can(
    kafka_settings: KafkaSettings, bus: KafkaBus, caplog: pytest.LogCaptureFixture
) -> None:
    """A state no snapshot can encode (an integer past 64 bits, which the wire refuses but a state could
    still come to hold): every snapshot fails, each is counted, one ERROR alerts the streak, and the
    health check names the partition until a snapshot is published again."""
    from sniper.cluster.obs import health_of

    caplog.set_level("DEBUG", logger="sniper.core")
    asks = iter(range(1_000))

    async def one_more_decision(reader: Decisions) -> None:  # a handled record: the cache snapshots when due
        i = next(asks)
        await bus.publish(
            FEED, "p1", f.AskAdded(partition="p1", id=f"more{i}", app="app", ask=f"more{i}", resource={"memory": 1})
        )
        await reader.until(lambda items: any(getattr(x, "ask", "") == f"more{i}" for x in items))

    with anyio.fail_after(WAIT):
        reader = await read_decisions(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            process = CoreProcess(kafka_settings, options(snapshot_interval=0.01))
            await tg.start(process.run)
            await bus.publish_many(FEED, [("p1", e) for e in workload("p1", 1)])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 1)
            host = process.hosts["p1"]
            host.core.handle_event(f.AppAdded(partition="p1", app="huge", queue="root.a", priority=10**400))
            while host.counters.snapshots_failed < 3:
                await one_more_decision(reader)
            failing = health_of(process)
            published = host.counters.snapshots
            host.core.handle_event(f.AppRemoved(partition="p1", app="huge"))
            while host.counters.snapshots == published:
                await one_more_decision(reader)
            healthy = health_of(process)
            tg.cancel_scope.cancel()
    assert "snapshots fail" in failing["p1"] and "OverflowError" in failing["p1"]
    assert healthy == {}
    alerts = [r for r in caplog.records if r.levelname == "ERROR" and "snapshot not published" in r.getMessage()]
    assert len(alerts) == 1


async def test_an_ask_with_a_huge_node_selector_is_rejected_in_a_decision_that_fits_and_nothing_is_lost(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    """An 850 KB ``ask_added`` whose selector no node matches (quoted whole, its rejection would be over
    1 MB): the rejection quotes the selector cut short, so it is published with the ``synced`` after
    it, and the log's seqs have no gap."""
    selector = {f"key{k}": [f"v{v:011d}" for v in range(1024)] for k in range(64)}
    huge = f.AskAdded(partition="p1", id="huge", app="app", ask="huge", resource={"memory": 1}, node_selector=selector)
    with anyio.fail_after(WAIT):
        reader = await read_decisions(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            process = CoreProcess(kafka_settings, options())
            await tg.start(process.run)
            await bus.publish_many(FEED, [("p1", e) for e in workload("p1", 1)])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 1)
            await bus.publish_many(FEED, [("p1", huge), ("p1", f.Sync(partition="p1", id="after"))])
            await reader.until(lambda _: bool(reader.of(d.Synced)))
            tg.cancel_scope.cancel()
    [rejected] = reader.of(d.Rejected)
    assert rejected.code == "no_matching_node" and "characters left out)" in rejected.reason
    assert len(rejected.reason) <= d.MAX_REASON
    assert [x.seq for x in reader.items] == list(range(1, len(reader.items) + 1))
    assert process.counters["p1"].decisions_unpublishable == 0


async def test_a_decision_too_large_to_publish_stops_the_partition_loudly_and_leaves_no_gap(
    kafka_settings: KafkaSettings, bus: KafkaBus, caplog: pytest.LogCaptureFixture
) -> None:
    """Records of 8 KB at most: a rejection that names a 512-character app and ask twice over (8.8 KB) cannot
    be published. The partition stops, its restore decides the same again and fails: an ERROR, the
    counter, the health check naming it, its later records dead-lettered; no decision after it is
    published, so the log's seqs stay whole."""
    from sniper.cluster.obs import health_of

    small = dataclasses.replace(kafka_settings, max_message_bytes=8192)
    wide = "\N{GRINNING FACE}" * 512  # 512 characters, 2 KB
    unknown = f.AskAdded(partition="p1", id="wide", app=wide, ask=wide, resource={"memory": 1})
    with anyio.fail_after(WAIT):
        reader = await read_decisions(bus)
        letters = await read_dead_letters(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            process = CoreProcess(small, options())
            await tg.start(process.run)
            await bus.publish_many(FEED, [("p1", e) for e in workload("p1", 1)])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 1)
            logged = len(reader.items)
            first = process.hosts["p1"]
            await bus.publish(FEED, "p1", unknown)
            await first.stopped.wait()
            await bus.publish(FEED, "p1", f.Sync(partition="p1", id="after"))
            letter = await letters.receive()
            health = health_of(process)
            await letters.aclose()
            tg.cancel_scope.cancel()
    assert "cannot be served" in letter.reason and "MessageTooLarge" in letter.reason
    assert "MessageTooLarge" in health["p1"]
    assert process.counters["p1"].decisions_unpublishable >= 2  # live, then again in the restore
    assert any(r.levelname == "ERROR" and "cannot be published" in r.getMessage() for r in caplog.records)
    assert len(reader.items) == logged and [x.seq for x in reader.items] == list(range(1, logged + 1))


async def test_failover_restores_the_state_and_bumps_the_epoch(kafka_settings: KafkaSettings, bus: KafkaBus) -> None:
    with anyio.fail_after(WAIT):
        reader = await read_decisions(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            first = CoreProcess(kafka_settings, options())
            async with anyio.create_task_group() as first_group:  # a task group of its own, to stop it alone
                first_group.start_soon(first.run)
                await first.ready.wait()
                for event in workload("p1", 4):
                    await bus.publish(FEED, "p1", event)
                await reader.until(lambda _: len(reader.of(d.Allocated)) == 4)
                first_group.cancel_scope.cancel()  # a clean stop: final snapshot, leaves the group
            second = CoreProcess(kafka_settings, options())
            await tg.start(second.run)
            # The partition comes back from its snapshot even before any new event.
            restored = (await second.wait_hosting("p1")).core
            assert sorted(restored.state.allocations) == sorted(x.allocation for x in reader.of(d.Allocated))
            assert restored.epoch == 2
            for event in workload("p1", 2, tag="b")[-2:]:
                await bus.publish(FEED, "p1", event)
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 6)
            later = reader.of(d.Allocated)[4:]
            assert {x.epoch for x in later} == {2}
            seqs = [x.seq for x in reader.items]
            assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
            ids = [x.allocation for x in reader.of(d.Allocated)]
            assert len(ids) == len(set(ids))
            tg.cancel_scope.cancel()
        snapshots = await read_partition(kafka_settings, SNAPSHOTS, bus.partition_for("p1"), key="p1")
        assert snapshots and snapshot_msgpack.decode(snapshots[-1].value or b"").epoch == 2


async def test_decisions_the_broker_loses_stop_the_partition_which_comes_back_from_the_log(
    kafka_settings: KafkaSettings, bus: KafkaBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    with anyio.fail_after(WAIT):
        reader = await read_decisions(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            process = CoreProcess(kafka_settings, options())
            await tg.start(process.run)
            for event in workload("p1", 2):
                await bus.publish(FEED, "p1", event)
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 2)
            first = process.hosts["p1"]
            send_many = process.bus.send_many
            lost: list[tuple[str, Any]] = []

            async def lose_once(
                topic: str, items: Iterable[tuple[str, Any]], **where: Any
            ) -> asyncio.Future[Any] | None:
                if topic != DECISIONS or lost:
                    return await send_many(topic, items, **where)
                lost.extend(items)  # never handed to the producer
                failed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                failed.set_exception(KafkaError("the broker lost them"))
                return failed

            monkeypatch.setattr(process.bus, "send_many", lose_once)
            bad = f.AskAdded(partition="p1", id="bad", app="nope", ask="k", resource={"memory": 1})
            await bus.publish(FEED, "p1", bad)
            await first.stopped.wait()
            assert first.failed is not None and [type(m) for _, m in lost] == [d.Rejected]
            # Restored at once from the snapshot and the log: the rejection the log lacks is published.
            await reader.until(lambda _: len(reader.of(d.Rejected, "p1")) == 1)
            restored = await process.wait_hosting("p1")
            assert restored is not first and restored.core.epoch == 2
            rejected = reader.of(d.Rejected, "p1")[0]
            assert rejected.event == "bad" and rejected.epoch == 2
            late = f.AskAdded(partition="p1", id="late", app="app", ask="late", resource={"memory": 4})
            await bus.publish(FEED, "p1", late)
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 3)
            ids = [x.allocation for x in reader.of(d.Allocated)]
            assert len(set(ids)) == 3 and [x.ask for x in reader.of(d.Allocated)][-1] == "late"
            # Nothing holds the acknowledgements up: every feed record can be committed.
            kp = bus.partition_for("p1")
            records = await read_partition(kafka_settings, FEED, kp)
            assert process.subscription is not None and process.subscription.committable()[kp] == records[-1].offset + 1
            tg.cancel_scope.cancel()


async def test_a_large_partition_snapshots_after_at_least_as_many_decisions_as_its_state_holds(
    kafka_settings: KafkaSettings,
) -> None:
    """Snapshots cost time in proportion to the state: their decision trigger grows with it."""
    process = CoreProcess(kafka_settings, CoreOptions(snapshot_every=100))
    core = DurableCache("p1")
    for event in workload("p1", 0):
        core.handle_event(event)
    small = HostedPartition(process, "p1", 0, core)
    assert all(50 <= small._snapshot_point()[0] <= 100 for _ in range(20))
    core.handle_event(f.NodeAdded(partition="p1", node="big", capacity={"memory": 10**6}))
    for i in range(1000):
        core.handle_event(f.AskAdded(partition="p1", app="app", ask=f"x{i}", resource={"memory": 1}))
        core.allocate("app", f"x{i}", "big")
    size = len(core.state.allocations) + len(core.state.apps) + len(core.state.nodes)
    assert size == 1004
    large = HostedPartition(process, "p1", 0, core)
    assert all(size // 2 <= large._snapshot_point()[0] <= size for _ in range(20))
