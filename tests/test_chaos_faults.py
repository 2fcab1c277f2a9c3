"""Chaos on the real broker, part two: a poison record and a failover, a paused (deposed) owner, a broker
that loses everything (and topics re-created with its defaults), a flood of new partitions.

Core processes are real ``sniper core`` subprocesses (SIGKILL, SIGSTOP/SIGCONT); an independent reader
of the decisions topic (:class:`tests.kafka_support.TopicReader`) checks what they published. The
paused-owner and broker-restart tests run with another process spinning on a CPU (``other_cpu_busy``),
as on a shared host. Every wait is on a condition, bounded by ``anyio.fail_after``; nothing asserts on
timing (latencies are printed as figures).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import time
from collections.abc import AsyncIterator, Callable

import anyio
import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from anyio.abc import TaskGroup

from sniper.bench.e2e import spread_partition_names, stop_core
from sniper.cluster.logread import read_partition
from sniper.core.recovery import feed_problem
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.deadletter import DeadLetter, deadletter_msgpack
from sniper.transport.broker import EmbeddedBroker, free_port
from sniper.transport.bus import DEADLETTER, DECISIONS, FEED, SNAPSHOTS
from sniper.transport.kafka import KafkaBus, KafkaSettings, KafkaTransportError
from tests.core_support import partition_raw, queue
from tests.kafka_support import CoreSubprocess, TopicReader, until_any

pytestmark = pytest.mark.kafka

WAIT = 120.0  # a bound on a hang (a loaded machine runs these several times slower), never a time expected
POISON = "9" * 400 + "Gi"


@pytest.fixture
async def bus(kafka_settings: KafkaSettings) -> AsyncIterator[KafkaBus]:
    # The checker applies the feed records the cores accept: it judges them at the edge alike.
    async with KafkaBus(kafka_settings, validators={FEED: feed_problem}) as b:
        yield b


def config(name: str, memory: int | str = 64) -> f.PartitionConfigEvent:
    raw = partition_raw(queue("a", guaranteed={"memory": memory}), queue("b", guaranteed={"memory": 64}), name=name)
    return f.PartitionConfigEvent(partition=name, id=f"{name}-config-{str(memory)[:8]}", config=raw)


def setup(name: str, memory: int = 1_000_000) -> list[tuple[str, f.Feed]]:
    return [
        (name, config(name)),
        (name, f.NodeAdded(partition=name, id=f"{name}-node", node="n1", capacity={"memory": memory})),
        (name, f.AppAdded(partition=name, id=f"{name}-app", app="app", queue="root.a")),
    ]


def ask(name: str, tag: str) -> tuple[str, f.Feed]:
    return name, f.AskAdded(partition=name, id=f"{name}-{tag}", app="app", ask=tag, resource={"memory": 1})


async def reading(bus: KafkaBus) -> TopicReader:
    feed = await bus.subscribe_ready(FEED, group=bus.settings.prefix + "watch-feed", capacity=1 << 15, bad="skip")
    decisions = await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "watch-decisions", capacity=1 << 15)
    return TopicReader(feed, decisions)


def allocated(reader: TopicReader, name: str, tag: str) -> Callable[[], bool]:
    return lambda: any(isinstance(x, d.Allocated) and x.partition == name and x.ask == tag for x in reader.items)


@contextlib.asynccontextmanager
async def watched_cores(
    bus: KafkaBus, *, pump_feed: bool = True
) -> AsyncIterator[tuple[TopicReader, TaskGroup, list[CoreSubprocess]]]:
    """A reader of the decisions (and of the feed, unless ``pump_feed`` is false), the task group cores are
    spawned in, and the list the test records each core in as it starts: every core listed is stopped on the
    way out, whatever happened."""
    reader = await reading(bus)
    cores: list[CoreSubprocess] = []
    async with anyio.create_task_group() as tg:
        if pump_feed:
            tg.start_soon(reader.pump_feed)
        tg.start_soon(reader.pump_decisions)
        try:
            yield reader, tg, cores
        finally:
            with anyio.CancelScope(shield=True):
                for core in cores:
                    await stop_core(core.process)
        tg.cancel_scope.cancel()


async def spawn(settings: KafkaSettings, tg: TaskGroup, group: str, *options: str) -> CoreSubprocess:
    core = await CoreSubprocess.spawn(settings, tg, group, "--tick", "0.1", *options)
    await core.until_assigned()
    return core


async def two_cores_sharing(
    settings: KafkaSettings, tg: TaskGroup, cores: list[CoreSubprocess], group: str
) -> tuple[CoreSubprocess, CoreSubprocess]:
    """Two cores of ``group``, each recorded in ``cores`` as it starts (so it is stopped on the way out), once
    the second one's join has split the Kafka partitions between them (either core's line may come last)."""
    first = await spawn(settings, tg, group)
    cores.append(first)
    second = await spawn(settings, tg, group)
    cores.append(second)
    await until_any(cores, lambda: len(first.assigned) + len(second.assigned) == settings.partitions)
    return first, second


async def place_one_ask_each(bus: KafkaBus, reader: TopicReader, names: list[str], tag: str) -> None:
    """Each partition of ``names`` set up with one ask ``tag``, waited for until every one is allocated."""
    await bus.publish_many(FEED, [e for n in names for e in [*setup(n), ask(n, tag)]])
    await reader.until(lambda: all(allocated(reader, n, tag)() for n in names))


async def letters_of(settings: KafkaSettings, bus: KafkaBus, name: str) -> list[DeadLetter]:
    records = await read_partition(settings, DEADLETTER, bus.partition_for(name), key=name)
    return [deadletter_msgpack.decode(r.value or b"") for r in records]


# ---------------------------------------------------------------------------- poison record + failover


async def test_a_poison_record_is_dead_lettered_once_and_skipped_after_a_failover(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    name = "poisoned"
    with anyio.fail_after(WAIT):
        async with watched_cores(bus) as (reader, tg, cores):
            # No snapshot after the start one: the failover replays the poison record from the feed.
            quiet = ("--snapshot-interval", "3600", "--snapshot-every", "1000000")
            cores.append(await spawn(kafka_settings, tg, "poison", *quiet))
            await bus.publish_many(FEED, [*setup(name), ask(name, "before")])
            await reader.until(allocated(reader, name, "before"))
            await bus.publish_many(FEED, [(name, config(name, POISON)), ask(name, "after-poison")])
            await reader.until(allocated(reader, name, "after-poison"))
            letters: list[DeadLetter] = []
            while not letters:
                letters = await letters_of(kafka_settings, bus, name)
            # The owner dies before any snapshot; its successor replays the poison record.
            cores[0].process.send_signal(signal.SIGKILL)
            await cores[0].process.wait()
            cores.append(await spawn(kafka_settings, tg, "poison", *quiet))
            await bus.publish_many(FEED, [ask(name, "after-failover")])
            await reader.until(allocated(reader, name, "after-failover"))
            final = await letters_of(kafka_settings, bus, name)
    logs = "\n".join(cores[-1].lines[-20:])
    assert len(final) == 1, [x.reason for x in final]
    assert final[0].topic == FEED and final[0].reason.startswith("partition_config: ")  # whatever the parser said
    assert msgspec.msgpack.decode(final[0].payload)["id"] == f"{name}-config-99999999"
    assert "queue root.a.guaranteed: memory" in final[0].reason  # the path and key of what does not parse
    assert not any(isinstance(x, d.Rejected) and x.event == f"{name}-config-99999999" for x in reader.items)
    epochs = {x.epoch for x in reader.items if x.partition == name}
    assert epochs == {1, 2}, epochs  # the successor restored the partition and decides
    assert "could not be restored" not in logs and "stopped on an error" not in logs, logs
    violations = [v for part in reader.checker.parts.values() for v in part.model.violations]
    assert violations == []


# ---------------------------------------------------------------------------- paused (deposed) owner


def stale_decisions(items: list[d.DecisionMsg]) -> dict[str, int]:
    """Per partition, decisions published under an epoch lower than one already seen (a deposed owner's)."""
    top: dict[str, int] = {}
    stale: dict[str, int] = {}
    for x in items:
        if x.epoch < top.get(x.partition, 0):
            stale[x.partition] = stale.get(x.partition, 0) + 1
        top[x.partition] = max(top.get(x.partition, 0), x.epoch)
    return stale


async def test_a_core_joining_takes_only_its_share_and_the_partitions_that_stay_keep_their_epoch(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    """Two cores share four Kafka partitions (one scheduler partition each); a third joins. The sticky
    rebalance moves only what the newcomer takes: those partitions restart there at epoch 2, and every
    other one keeps running where it was, at epoch 1, deciding the next asks without a restart."""
    names = spread_partition_names(kafka_settings.partitions, kafka_settings.partitions)
    with anyio.fail_after(WAIT):
        async with watched_cores(bus) as (reader, tg, cores):
            await two_cores_sharing(kafka_settings, tg, cores, "join")
            await place_one_ask_each(bus, reader, names, "before")
            third = await spawn(kafka_settings, tg, "join")
            cores.append(third)
            everything = list(range(kafka_settings.partitions))
            await until_any(cores, lambda: sorted(kp for core in cores for kp in core.assigned) == everything)
            joined = set(third.assigned)
            await bus.publish_many(FEED, [ask(n, "after") for n in names])
            await reader.until(lambda: all(allocated(reader, n, "after")() for n in names))

    def epoch(name: str, tag: str) -> int:
        return next(x.epoch for x in reader.items if isinstance(x, d.Allocated) and (x.partition, x.ask) == (name, tag))

    taken = {n for n in names if bus.partition_for(n) in joined}
    assert 0 < len(taken) < len(names), joined
    assert {n: epoch(n, "before") for n in names} == dict.fromkeys(names, 1)
    assert {n: epoch(n, "after") for n in names} == {n: 2 if n in taken else 1 for n in names}
    assert [v for part in reader.checker.parts.values() for v in part.model.violations] == []


@pytest.mark.usefixtures("other_cpu_busy")
async def test_a_paused_owner_publishes_nothing_under_its_old_epoch_once_it_resumes(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    names = spread_partition_names(8, kafka_settings.partitions)
    with anyio.fail_after(WAIT):
        async with watched_cores(bus) as (reader, tg, cores):
            paused, _ = await two_cores_sharing(kafka_settings, tg, cores, "pause")
            moved = [n for n in names if bus.partition_for(n) in paused.assigned]
            assert moved
            await place_one_ask_each(bus, reader, names, "first")
            # Work in flight on the owner when it stops: a wave of asks on its partitions.
            await bus.publish_many(FEED, [ask(n, f"w{i}") for i in range(500) for n in moved])
            await reader.until(lambda: any(allocated(reader, n, "w0")() for n in moved))
            paused.process.send_signal(signal.SIGSTOP)
            stopped_at = len(reader.items)
            # A barrier per moved partition: whoever owns it next answers (``synced``), even if the
            # paused owner had decided the whole wave before it stopped.
            await bus.publish_many(FEED, [(n, f.Sync(partition=n, id=f"{n}-after-pause")) for n in moved])
            try:
                # The group deposes it: the other core takes its partitions over at a higher epoch.
                await reader.until(
                    lambda: all(any(x.partition == n and x.epoch >= 2 for x in reader.items) for n in moved)
                )
                resumed_lines = len(paused.lines)
            finally:
                paused.process.send_signal(signal.SIGCONT)
            at_resume = len(reader.items)

            def revoked_after_resume() -> bool:
                return any("revoked Kafka partitions" in line for line in paused.lines[resumed_lines:])

            while not revoked_after_resume():
                await paused.changed.wait()
            await bus.publish_many(FEED, [ask(n, "last") for n in names])
            await reader.until(lambda: all(allocated(reader, n, "last")() for n in names))
    stale = stale_decisions(reader.items)
    old_epoch_after_resume = [x for x in reader.items[at_resume:] if x.partition in moved and x.epoch == 1]
    print(
        f"paused owner: {len(moved)} partitions moved; decisions while paused {at_resume - stopped_at}; "
        f"stale (deposed epoch) decisions {sum(stale.values())}; epoch-1 decisions after resume "
        f"{len(old_epoch_after_resume)}"
    )
    assert stale == {}, stale
    assert old_epoch_after_resume == []
    violations = [v for part in reader.checker.parts.values() for v in part.model.violations]
    assert violations == []


@pytest.mark.usefixtures("other_cpu_busy")
async def test_a_paused_owner_leaves_one_dead_letter_per_bad_record_across_the_pause(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    names = spread_partition_names(8, kafka_settings.partitions)
    cores: list[CoreSubprocess] = []
    sent: list[tuple[str, int]] = []  # (partition, feed offset) of every bad record
    with anyio.fail_after(WAIT):
        reader = await reading(bus)
        producer = AIOKafkaProducer(**kafka_settings.client_options())
        await producer.start()
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump_decisions)

            async def burst(moved: list[str], tag: str, count: int = 40) -> None:
                """Undecodable records on the paused owner's partitions, handed over at once."""
                keys = [n for _ in range(count) for n in moved]
                futures = [
                    await producer.send(kafka_settings.topic(FEED), f"\xc1 {tag}{i}".encode(), key=n.encode())
                    for i, n in enumerate(keys)
                ]
                for n, future in zip(keys, futures, strict=True):
                    sent.append((n, (await future).offset))

            try:
                paused, _ = await two_cores_sharing(kafka_settings, tg, cores, "letters")
                moved = [n for n in names if bus.partition_for(n) in paused.assigned]
                assert moved
                await place_one_ask_each(bus, reader, names, "first")
                await burst(moved, "before", 1_000)
                while not [x for n in moved for x in await letters_of(kafka_settings, bus, n)]:
                    pass  # each read is a round trip to the broker; bounded by fail_after
                paused.process.send_signal(signal.SIGSTOP)  # mid-burst: most of its letters are still to come
                try:
                    await burst(moved, "paused")
                    await bus.publish_many(FEED, [ask(n, "taken") for n in moved])
                    await reader.until(
                        lambda: all(
                            any(
                                isinstance(x, d.Allocated) and x.partition == n and x.ask == "taken" and x.epoch >= 2
                                for x in reader.items
                            )
                            for n in moved
                        )
                    )
                    resumed_lines = len(paused.lines)
                finally:
                    paused.process.send_signal(signal.SIGCONT)
                while not any("revoked Kafka partitions" in line for line in paused.lines[resumed_lines:]):
                    await paused.changed.wait()
                await burst(moved, "after")
                await bus.publish_many(FEED, [ask(n, "last") for n in names])
                await reader.until(lambda: all(allocated(reader, n, "last")() for n in names))
                letters: list[DeadLetter] = []
                while len(letters) < len(sent):
                    letters = [x for n in moved for x in await letters_of(kafka_settings, bus, n)]
            finally:
                with anyio.CancelScope(shield=True):
                    for core in cores:
                        await stop_core(core.process)
                    await producer.stop()
            tg.cancel_scope.cancel()
    final = [x for n in moved for x in await letters_of(kafka_settings, bus, n)]  # nothing came after the stop
    print(f"bad records sent across the pause: {len(sent)}; dead letters: {len(final)}")
    assert sorted((x.key, x.offset) for x in final) == sorted(sent)


# ---------------------------------------------------------------------------- the broker loses everything


@pytest.mark.usefixtures("other_cpu_busy")
async def test_a_core_whose_broker_lost_its_log_exits_with_status_3_and_a_restart_serves_again(
    kafka_settings: KafkaSettings,
) -> None:
    port = free_port()
    broker = EmbeddedBroker(port=port)
    await anyio.to_thread.run_sync(broker.start)
    settings = dataclasses.replace(kafka_settings, bootstrap=broker.bootstrap)
    cores: list[CoreSubprocess] = []
    try:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                try:
                    cores.append(await spawn(settings, tg, "lost"))
                    async with KafkaBus(settings, validators={FEED: feed_problem}) as bus:
                        reader = await reading(bus)
                        tg.start_soon(reader.pump_decisions)
                        await bus.publish_many(FEED, [*setup("kept"), ask("kept", "a")])
                        await reader.until(allocated(reader, "kept", "a"))
                    # The in-memory broker restarts on the same address: every topic, record and group is gone.
                    await anyio.to_thread.run_sync(broker.stop)
                    await anyio.to_thread.run_sync(broker.start)
                    status = await cores[0].process.wait()
                    # What a supervisor does: start the core again; it serves what the feed says from now on.
                    cores.append(await spawn(settings, tg, "lost"))
                    async with KafkaBus(settings, validators={FEED: feed_problem}) as bus:
                        reader = await reading(bus)
                        tg.start_soon(reader.pump_decisions)
                        await bus.publish_many(FEED, [*setup("kept"), ask("kept", "b")])
                        with anyio.move_on_after(WAIT / 2):
                            await reader.until(allocated(reader, "kept", "b"))
                        served = allocated(reader, "kept", "b")()
                finally:
                    with anyio.CancelScope(shield=True):
                        for core in cores:
                            await stop_core(core.process)
                tg.cancel_scope.cancel()
    finally:
        await anyio.to_thread.run_sync(broker.stop)
    logs = " ".join(" ".join(cores[0].lines).split())  # the error line is wrapped to the terminal
    assert status == 3, logs[-3000:]
    assert "the broker lost the log of" in logs and "a supervisor restarts it" in logs, logs[-3000:]
    assert "Traceback" not in logs, logs[-3000:]  # one line says why, even in a core's INFO log
    assert served, "\n".join(cores[1].lines)


@pytest.mark.usefixtures("other_cpu_busy")
async def test_a_broker_restarted_empty_stops_every_core_loudly_refuses_a_foreign_layout_then_serves_everything(
    kafka_settings: KafkaSettings,
) -> None:
    # Eight partitions per topic, not the bundled broker's default of four: a topic auto-created by a
    # client would not have the layout every process expects.
    port = free_port()
    broker = EmbeddedBroker(port=port)
    await anyio.to_thread.run_sync(broker.start)
    settings = dataclasses.replace(kafka_settings, bootstrap=broker.bootstrap, partitions=8)
    names = spread_partition_names(8, settings.partitions)
    cores: list[CoreSubprocess] = []
    statuses: list[int] = []
    try:
        with anyio.fail_after(2 * WAIT):
            async with anyio.create_task_group() as tg:
                try:
                    for _ in range(2):  # each core recorded as it starts, so it is stopped on the way out
                        cores.append(await spawn(settings, tg, "restart"))
                    # A resource manager's reader stays connected through the restart (its client asks
                    # for the topic's metadata again on reconnecting) until it finds the log lost.
                    async with KafkaBus(settings, validators={FEED: feed_problem}) as bus:
                        reader = await reading(bus)
                        lost = anyio.Event()

                        async def follow() -> None:
                            try:
                                await reader.pump_decisions()
                            except KafkaTransportError:
                                lost.set()

                        tg.start_soon(follow)
                        await bus.publish_many(FEED, [e for n in names for e in [*setup(n), ask(n, "a")]])
                        await reader.until(lambda: all(allocated(reader, n, "a")() for n in names))
                        restarted_at = time.monotonic()
                        await anyio.to_thread.run_sync(broker.stop)
                        await anyio.to_thread.run_sync(broker.start)
                        statuses = [await core.process.wait() for core in cores[:2]]
                        stopped_after = time.monotonic() - restarted_at
                        await lost.wait()
                    # A client that does not keep the layout re-creates the topics with the broker's
                    # defaults meanwhile: a core started on them refuses them with one line.
                    admin = AIOKafkaAdminClient(**settings.client_options())
                    await admin.start()
                    try:
                        wrong = [settings.topic(t) for t in (FEED, DECISIONS, SNAPSHOTS)]
                        await admin.create_topics([NewTopic(t, num_partitions=4, replication_factor=1) for t in wrong])
                        refusing = await CoreSubprocess.spawn(settings, tg, "restart", "--tick", "0.1")
                        cores.append(refusing)
                        refused = await refusing.process.wait()
                        await admin.delete_topics(wrong)  # the operator's fix
                    finally:
                        await admin.close()
                    # What a supervisor does: start them again; they create the topics as configured.
                    for _ in range(2):  # each core recorded as it starts, so it is stopped on the way out
                        cores.append(await spawn(settings, tg, "restart"))
                    async with KafkaBus(settings, validators={FEED: feed_problem}) as bus:
                        reader = await reading(bus)
                        tg.start_soon(reader.pump_decisions)
                        await bus.publish_many(FEED, [e for n in names for e in [*setup(n), ask(n, "b")]])
                        await reader.until(lambda: all(allocated(reader, n, "b")() for n in names))
                        served_after = time.monotonic() - restarted_at
                        layout_problem = await bus.check_layout()  # every topic there, with 8 partitions
                finally:
                    with anyio.CancelScope(shield=True):
                        for core in cores:
                            await stop_core(core.process)
                tg.cancel_scope.cancel()
    finally:
        await anyio.to_thread.run_sync(broker.stop)
    print(
        f"broker restarted empty: both cores stopped {stopped_after:.1f} s after the restart began; "
        f"restarted cores served all {len(names)} partitions {served_after:.1f} s after it"
    )
    refusal = " ".join(" ".join(cores[2].lines).split())
    assert refused == 3 and "has 4 partitions and this process expects 8" in refusal, refusal[-3000:]
    for core, status in zip(cores[:2], statuses, strict=True):
        logs = " ".join(" ".join(core.lines).split())  # the error line is wrapped to the terminal
        errors = [line for line in core.lines if line.startswith("error: ")]
        assert status == 3 and len(errors) == 1, logs[-3000:]
        assert "is gone from the broker" in logs or "the broker lost" in logs, logs[-3000:]
        assert "Traceback" not in logs, logs[-3000:]
    assert "Traceback" not in refusal, refusal[-3000:]
    assert layout_problem is None


# ---------------------------------------------------------------------------- a flood of new partitions


async def latency(bus: KafkaBus, reader: TopicReader, name: str, tag: str) -> float:
    """Wall seconds from publishing one ask on ``name`` to reading its allocation back (a figure, not asserted)."""
    began = time.monotonic()
    await bus.publish_many(FEED, [ask(name, tag)])
    await reader.until(allocated(reader, name, tag))
    return time.monotonic() - began


async def test_a_flood_of_new_partitions_does_not_starve_an_existing_one(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    limit, flood = 20, 1_000
    with anyio.fail_after(WAIT):
        async with watched_cores(bus, pump_feed=False) as (reader, tg, cores):
            cores.append(await spawn(kafka_settings, tg, "flood", "--max-partitions", str(limit)))
            await bus.publish_many(FEED, [*setup("steady"), ask("steady", "warm")])
            await reader.until(allocated(reader, "steady", "warm"))
            before = [await latency(bus, reader, "steady", f"before{i}") for i in range(5)]
            await bus.publish_many(FEED, [(f"flood{i}", config(f"flood{i}")) for i in range(flood)])
            during = [await latency(bus, reader, "steady", f"during{i}") for i in range(5)]
            letters: list[DeadLetter] = []
            refused = flood - (limit - 1)
            while sum("--max-partitions" in x.reason for x in letters) < refused:
                letters = []
                for kp in range(kafka_settings.partitions):
                    letters += [
                        deadletter_msgpack.decode(r.value or b"")
                        for r in await read_partition(kafka_settings, DEADLETTER, kp)
                    ]
            after = [await latency(bus, reader, "steady", f"after{i}") for i in range(5)]
    print(
        f"flood of {flood} new partitions (limit {limit}): steady partition's ask-to-allocation latency, "
        f"median of 5 (max): before {sorted(before)[2]:.3f}s ({max(before):.3f}s), during the flood "
        f"{sorted(during)[2]:.3f}s ({max(during):.3f}s), once it is refused {sorted(after)[2]:.3f}s ({max(after):.3f}s)"
    )
    limited = [x for x in letters if "--max-partitions" in x.reason]
    assert len(limited) == refused and len({x.key for x in limited}) == refused
