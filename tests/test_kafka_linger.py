"""A lingering Kafka subscription (``linger_ms``, the core's ``feed_linger_ms``) against a real broker.

When a fetch brings records to an empty inbox, the subscription goes on fetching for the linger before
its reader sees any of them, without ever buffering more than its capacity or reordering a key's records.
"""

from __future__ import annotations

import anyio
import pytest

from sniper.bench.e2e import bench_e2e
from sniper.messages.feed import NodeAdded
from sniper.transport.bus import FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings

pytestmark = pytest.mark.kafka

WAIT = 30.0  # bound on the whole test (group joins take about a second on the embedded broker)
LINGER_MS = 2_000  # far longer than two back-to-back publishes take


def node(i: int) -> NodeAdded:
    return NodeAdded(partition="p0", id=f"e{i}", node=f"n{i}", capacity={})


async def test_a_waiting_reader_gets_records_published_one_after_the_other_within_the_linger_together(
    kafka_settings: KafkaSettings,
) -> None:
    seen: list[object] = []
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            sub = await bus.subscribe_ready(FEED, group="lingering", linger_ms=LINGER_MS)
            witness = await bus.subscribe_ready(FEED, group="witness")  # reads as soon as a record is there

            async def read() -> None:
                seen.append(await sub.receive())
                seen.append(sub.depth())  # what came with the first record

            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await bus.publish(FEED, "p0", node(0))
                assert await witness.receive() == node(0)  # fetched: a reader without a linger has it too
                await bus.publish(FEED, "p0", node(1))
            assert seen == [node(0), 1]  # the second came within the linger: handed over with the first
            assert sub.receive_nowait() == node(1)
            sub.ack()
            sub.ack()


async def test_a_lingering_subscription_never_buffers_more_than_its_capacity_and_keeps_the_order(
    kafka_settings: KafkaSettings,
) -> None:
    events = [node(i) for i in range(12)]
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            sub = await bus.subscribe_ready(FEED, group="lingering-small", capacity=3, linger_ms=LINGER_MS)
            await bus.publish_many(FEED, [("p0", event) for event in events])
            got = []
            for _ in events:
                got.append(await sub.receive())
                assert sub.depth() <= 3
                sub.ack()
    assert got == events


def test_a_negative_linger_or_fetch_wait_is_refused_and_the_feed_linger_comes_from_the_environment() -> None:
    assert KafkaSettings(bootstrap="x:1").feed_linger_ms == 0  # by default records are handed over at once
    env = {"SNIPER_KAFKA_BOOTSTRAP": "x:1", "SNIPER_KAFKA_FEED_LINGER_MS": "20"}
    assert KafkaSettings.from_env(env).feed_linger_ms == 20
    with pytest.raises(ValueError, match="feed_linger_ms"):
        KafkaSettings(bootstrap="x:1", feed_linger_ms=-1)
    with pytest.raises(ValueError, match="fetch_max_wait_ms"):
        KafkaSettings(bootstrap="x:1", fetch_max_wait_ms=-1)
    with pytest.raises(ValueError, match="not an integer"):
        KafkaSettings.from_env({**env, "SNIPER_KAFKA_FEED_LINGER_MS": "soon"})


async def test_subscribe_refuses_a_negative_linger(kafka_settings: KafkaSettings) -> None:
    async with KafkaBus(kafka_settings) as bus:
        with pytest.raises(ValueError, match="linger_ms"):
            bus.subscribe(FEED, group="never", linger_ms=-5)


async def test_a_core_whose_feed_lingers_decides_every_event(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SNIPER_KAFKA_FEED_LINGER_MS", "50")  # the core subprocess reads its settings from here
    result = await bench_e2e(kafka_settings, events=400, rate=2000.0, partitions=4, cores=1, limit=240.0)
    (run,) = result["runs"]
    assert run["events"] == 400  # the bench returns once it read an allocation for every event published
    assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["max_ms"]
