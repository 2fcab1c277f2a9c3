"""The topic layout is part of the contract: topics are created only with the configured partition count,
never auto-created with the broker's defaults, a layout another process did not expect is refused with
one line, and a topic that goes away while a core runs stops the core at once."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import UnknownTopicOrPartitionError
from anyio.abc import TaskStatus

from sniper.cli.app import EXIT_RUNTIME, explain
from sniper.cluster.process import CoreOptions, CoreProcess
from sniper.messages import decisions as d
from sniper.transport.broker import EmbeddedBroker, free_port
from sniper.transport.bus import DECISIONS, FEED, SNAPSHOTS
from sniper.transport.kafka import KafkaBus, KafkaSettings
from sniper.transport.layout import TopicLayoutError, TopicLost
from tests.core_process_support import Decisions, workload

pytestmark = pytest.mark.kafka


@pytest.fixture
async def admin(kafka_settings: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(**kafka_settings.client_options())
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def partition_counts(admin: AIOKafkaAdminClient, settings: KafkaSettings) -> dict[str, int]:
    listed = set(await admin.list_topics())
    names = [settings.topic(t) for t in (FEED, DECISIONS, SNAPSHOTS) if settings.topic(t) in listed]
    return {entry["topic"]: len(entry["partitions"]) for entry in await admin.describe_topics(names)}


async def test_topics_are_created_with_the_configured_partition_count(
    kafka_settings: KafkaSettings, admin: AIOKafkaAdminClient
) -> None:
    settings = dataclasses.replace(kafka_settings, partitions=7)  # not the bundled broker's default of 4
    async with KafkaBus(settings):
        pass
    assert await partition_counts(admin, settings) == {settings.topic(t): 7 for t in (FEED, DECISIONS, SNAPSHOTS)}


async def test_a_process_refuses_topics_with_another_partition_count_with_one_line(
    kafka_settings: KafkaSettings,
) -> None:
    async with KafkaBus(dataclasses.replace(kafka_settings, partitions=3)):
        pass
    with pytest.raises(TopicLayoutError) as raised:
        async with KafkaBus(dataclasses.replace(kafka_settings, partitions=5)):
            pass
    code, line = explain(raised.value)
    assert code == EXIT_RUNTIME and "\n" not in line
    assert "has 3 partitions and this process expects 5" in line and "--kafka-partitions 3" in line


async def test_no_client_has_a_missing_topic_auto_created(
    kafka_settings: KafkaSettings, admin: AIOKafkaAdminClient
) -> None:
    # Any aiokafka client of a process that uses the transport: here one the bus did not build itself.
    missing = kafka_settings.topic("never-created")
    producer = AIOKafkaProducer(**dataclasses.replace(kafka_settings, request_timeout_ms=2_000).client_options())
    await producer.start()
    try:
        with pytest.raises(UnknownTopicOrPartitionError):
            await producer.partitions_for(missing)
    finally:
        await producer.stop()
    assert missing not in await admin.list_topics()


async def test_a_core_stops_at_once_when_a_topic_it_publishes_to_is_deleted(
    kafka_settings: KafkaSettings, admin: AIOKafkaAdminClient
) -> None:
    process = CoreProcess(kafka_settings, CoreOptions(group="deleted", tick=0.1))
    failed = anyio.Event()
    failure: list[BaseException] = []

    async def run(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await process.run(task_status=task_status)
        except Exception as err:
            failure.append(err)
            failed.set()

    with anyio.fail_after(60):
        async with KafkaBus(kafka_settings) as bus, anyio.create_task_group() as tg:
            reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
            tg.start_soon(reader.pump)
            await tg.start(run)
            await bus.publish_many(FEED, [(e.partition, e) for e in workload("p1", 1)])
            await reader.until(lambda _: len(reader.of(d.Allocated, "p1")) == 1)
            deleted_at = time.monotonic()
            await admin.delete_topics([kafka_settings.topic(DECISIONS)])
            await failed.wait()
            stopped_after = time.monotonic() - deleted_at
            tg.cancel_scope.cancel()
    print(f"decisions topic deleted: the core stopped {stopped_after:.2f} s later")
    [err] = failure
    while isinstance(err, BaseExceptionGroup):
        [err] = err.exceptions
    assert isinstance(err, TopicLost)
    code, line = explain(err)
    assert code == EXIT_RUNTIME and f"topic {kafka_settings.topic(DECISIONS)} is gone" in line
    assert kafka_settings.topic(DECISIONS) not in await admin.list_topics()  # not auto-created on the way out


async def test_an_idle_core_stops_with_one_line_when_its_topics_come_back_with_another_partition_count(
    kafka_settings: KafkaSettings,
) -> None:
    # A core that read nothing has no log to miss after a restart: only the layout tells.
    broker = EmbeddedBroker(port=free_port())
    await anyio.to_thread.run_sync(broker.start)
    settings = dataclasses.replace(kafka_settings, bootstrap=broker.bootstrap, partitions=8)
    process = CoreProcess(settings, CoreOptions(group="idle", tick=0.1))
    failure: list[BaseException] = []
    failed = anyio.Event()

    async def run(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await process.run(task_status=task_status)
        except Exception as err:
            failure.append(err)
            failed.set()

    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                await tg.start(run)
                await anyio.to_thread.run_sync(broker.stop)
                await anyio.to_thread.run_sync(broker.start)
                # What a client that auto-creates topics leaves behind: the broker's default count.
                client = AIOKafkaAdminClient(**settings.client_options())
                await client.start()
                try:
                    topics = [settings.topic(t) for t in (FEED, DECISIONS, SNAPSHOTS)]
                    await client.create_topics([NewTopic(t, num_partitions=4, replication_factor=1) for t in topics])
                finally:
                    await client.close()
                await failed.wait()
                tg.cancel_scope.cancel()
    finally:
        await anyio.to_thread.run_sync(broker.stop)
    [err] = failure
    while isinstance(err, BaseExceptionGroup):
        [err] = err.exceptions
    assert isinstance(err, TopicLayoutError)
    code, line = explain(err)
    assert code == EXIT_RUNTIME and "\n" not in line
    assert "has 4 partitions and this process expects 8" in line or "is gone from the broker" in line
