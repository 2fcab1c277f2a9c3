"""A lapsed lease holds the fenced topics' records back in the producer's buffer: a loop too busy to
hear a heartbeat's answer in time loses nothing and repeats nothing. They are sent once a heartbeat
renews the lease, and failed when a rebalance begins while it is lapsed (the member may have been
deposed). Real broker; the group's heartbeats go on without renewing the lease, so that the test alone renews."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import anyio
import pytest

from sniper.messages.decisions import Allocated
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings, KafkaSubscription, LeaseLapsed

pytestmark = pytest.mark.kafka

WAIT = 30.0


def _decision(seq: int) -> Allocated:
    return Allocated(
        partition="p0", seq=seq, allocation=f"x{seq}", app="a", ask="k", queue="q", node="n", resource={"c": 1}
    )


@contextlib.asynccontextmanager
async def fenced(kafka_settings: KafkaSettings) -> AsyncIterator[tuple[KafkaBus, KafkaSubscription]]:
    """A bus whose decisions are fenced by a feed subscription's lease, lapsed (as after a long step);
    the group's heartbeats go on, but only the test renews the lease."""
    async with KafkaBus(kafka_settings) as bus:
        feed = bus.subscribe(FEED, group=f"{kafka_settings.prefix}owner")
        await feed.ready()
        bus.fence(feed, [DECISIONS])
        coordinator = feed._consumer._coordinator
        wrapper = coordinator._do_heartbeat  # the lease's: it renews after each accepted heartbeat
        cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__ or (), strict=True))
        coordinator._do_heartbeat = cells["original"].cell_contents  # aiokafka's own: no renewal
        feed._lease_until = 0.0  # the loop was held past the last heartbeat's lease
        assert not feed.lease_valid()
        yield bus, feed


def _buffered(bus: KafkaBus, topic: str) -> int:
    """Batches of ``topic`` in the producer's buffer after its sender drained it."""
    accumulator = bus._producer._message_accumulator
    accumulator.drain_by_nodes(ignore_nodes=set())  # what the producer's sender does next
    return sum(len(queue) for tp, queue in accumulator._batches.items() if tp.topic == topic)


async def test_a_record_buffered_while_the_lease_is_lapsed_is_held_then_sent_once_a_heartbeat_renews_it(
    kafka_settings: KafkaSettings,
) -> None:
    with anyio.fail_after(WAIT):
        async with fenced(kafka_settings) as (bus, feed):
            reader = bus.subscribe(DECISIONS, group=f"{bus.settings.prefix}reader")
            await reader.ready()
            sent = await bus.send_many(DECISIONS, [("p0", _decision(1))])
            assert sent is not None
            assert _buffered(bus, bus.settings.topic(DECISIONS)) == 1 and not sent.done()  # held, not failed
            feed._renew_lease(time.monotonic())  # a heartbeat the coordinator accepted
            await sent
            assert await reader.receive() == _decision(1)
            reader.ack()
            await bus.publish(DECISIONS, "p0", _decision(2))  # the next record follows it, once
            assert await reader.receive() == _decision(2)


async def test_a_record_held_when_a_rebalance_begins_with_the_lease_lapsed_fails_and_is_never_sent(
    kafka_settings: KafkaSettings,
) -> None:
    with anyio.fail_after(WAIT):
        async with fenced(kafka_settings) as (bus, feed):
            sent = await bus.send_many(DECISIONS, [("p0", _decision(1))])
            assert sent is not None
            assert _buffered(bus, bus.settings.topic(DECISIONS)) == 1
            await feed._on_revoked(feed._consumer.assignment())  # what aiokafka calls as a rebalance begins
            with pytest.raises(LeaseLapsed):
                await asyncio.wait_for(asyncio.shield(sent), WAIT)
            assert _buffered(bus, bus.settings.topic(DECISIONS)) == 0
            feed._renew_lease(time.monotonic())  # a later assignment: nothing of before is sent
            assert _buffered(bus, bus.settings.topic(DECISIONS)) == 0
