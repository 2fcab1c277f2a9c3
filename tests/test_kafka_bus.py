"""The Kafka bus against a real broker (the embedded tansu unless ``SNIPER_KAFKA_BOOTSTRAP`` is set).

Every test uses its own topic prefix (``kafka_settings``), waits with ``anyio.fail_after`` bounds and
synchronises on the bus itself (``ready()``, ``receive()``), never on sleeps.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

import anyio
import msgspec
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from sniper.messages.codec import json_encoder, msgpack_encoder
from sniper.messages.deadletter import DeadLetter
from sniper.messages.decisions import Allocated, Rejected
from sniper.messages.feed import AppAdded, AskAdded, NodeAdded
from sniper.messages.protocol import AllocationProposal, Placement, ResyncRequest, ViewDelta
from sniper.transport.broker import EmbeddedBroker, free_port
from sniper.transport.bus import DEADLETTER, DECISIONS, FEED, PROPOSALS, SNAPSHOTS, VIEW
from sniper.transport.kafka import (
    KafkaBus,
    KafkaSettings,
    KafkaSubscription,
    KafkaTransportError,
    MessageTooLarge,
    RebalanceListener,
    _Partition,
    kafka_partition,
)

pytestmark = pytest.mark.kafka

WAIT = 30.0  # generous bound on any single wait (group joins take about a second on the embedded broker)


async def all_ready(*subs: KafkaSubscription) -> None:
    async with anyio.create_task_group() as tg:
        for sub in subs:
            tg.start_soon(sub.ready)


async def take(sub: KafkaSubscription, count: int, *, ack: bool = True) -> list[Any]:
    got = []
    for _ in range(count):
        got.append(await sub.receive())
        if ack:
            sub.ack()
    return got


def feed_events(keys: list[str], per_key: int) -> list[tuple[str, Any]]:
    """Interleaved feed events of several kinds, ``per_key`` for each key, with ids giving their order."""
    events: list[tuple[str, Any]] = []
    for i in range(per_key):
        for key in keys:
            kind = i % 3
            ident = f"{key}-{i}"
            if kind == 0:
                event: Any = NodeAdded(partition=key, id=ident, node=f"n{i}", capacity={"cpu": 4, "mem": 8})
            elif kind == 1:
                event = AppAdded(partition=key, id=ident, app=f"a{i}", queue="root.q")
            else:
                event = AskAdded(partition=key, id=ident, app=f"a{i}", ask="k", resource={"cpu": 1}, count=2)
            events.append((key, event))
    return events


async def test_round_trip_keeps_per_key_order(kafka_settings: KafkaSettings) -> None:
    keys = ["p0", "p1", "p2", "p3", "p4"]
    events = feed_events(keys, per_key=12)
    others: dict[str, list[Any]] = {
        DECISIONS: [
            Allocated(partition="p0", seq=1, allocation="x1", app="a", ask="k", queue="q", node="n", resource={"c": 1}),
            Rejected(partition="p0", seq=2, reason="never fits", app="a", ask="k"),
        ],
        VIEW: [ViewDelta(partition="p0", seq=7, now=1.5)],
        PROPOSALS: [
            AllocationProposal(partition="p0", id="pr1", view_seq=7, placements=[Placement("a", "k", "n")]),
            ResyncRequest(partition="p0", reader="alloc", after_seq=6),
        ],
        SNAPSHOTS: [{"partition": "p0", "seq": 3, "state": [1, 2, 3]}],
    }
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            feed = bus.subscribe(FEED, group="reader")
            subs = {topic: bus.subscribe(topic, group="reader") for topic in others}
            await all_ready(feed, *subs.values())
            assert feed.assigned == frozenset(range(kafka_settings.partitions))
            for key, event in events:
                await bus.publish(FEED, key, event)
            for topic, messages in others.items():
                for message in messages:
                    await bus.publish(topic, "p0", message)

            received = await take(feed, len(events))
            by_key: dict[str, list[Any]] = defaultdict(list)
            for event in received:
                by_key[event.partition].append(event)
            for key in keys:
                assert by_key[key] == [event for k, event in events if k == key]
            for topic, messages in others.items():
                assert await take(subs[topic], len(messages)) == messages
            assert feed.depth() == 0


async def test_two_groups_each_get_every_message(kafka_settings: KafkaSettings) -> None:
    events = feed_events(["a", "b", "c"], per_key=5)
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            first = bus.subscribe(FEED, group="cache")
            second = bus.subscribe(FEED, group="audit")
            await all_ready(first, second)
            for key, event in events:
                await bus.publish(FEED, key, event)
            got_first = await take(first, len(events))
            got_second = await take(second, len(events))
    expected = sorted(event.id for _, event in events)
    assert sorted(event.id for event in got_first) == expected
    assert sorted(event.id for event in got_second) == expected


async def test_a_subscription_from_the_latest_offset_delivers_what_is_published_once_it_is_ready(
    kafka_settings: KafkaSettings,
) -> None:
    settings = dataclasses.replace(kafka_settings, auto_offset_reset="latest")
    with anyio.fail_after(WAIT):
        async with KafkaBus(settings) as bus:
            await bus.publish(FEED, "a", NodeAdded(partition="a", id="before", node="n", capacity={}))
            for i in range(5):  # each a new group: where it starts is resolved anew
                sub = await bus.subscribe_ready(FEED, group=f"latest-{i}")
                await bus.publish(FEED, "a", NodeAdded(partition="a", id=f"after-{i}", node="n", capacity={}))
                [event] = await take(sub, 1)
                await sub.aclose()
                assert event.id == f"after-{i}"


async def test_key_filter_skips_other_keys(kafka_settings: KafkaSettings) -> None:
    events = feed_events(["p0", "p1", "p2"], per_key=6)
    wanted = [event for key, event in events if key == "p1"]
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            sub = await bus.subscribe_ready(FEED, group="only-p1", key="p1")
            for key, event in events:
                await bus.publish(FEED, key, event)
            assert await take(sub, len(wanted)) == wanted
            # Once a later p1 record arrives, every record of p1's Kafka partition before it was either
            # delivered or skipped.
            marker = NodeAdded(partition="p1", id="marker", node="m", capacity={})
            await bus.publish(FEED, "p1", marker)
            assert await sub.receive() == marker
            sub.ack()
            same_partition = [k for k in ("p0", "p2") if bus.partition_for(k) == bus.partition_for("p1")]
            assert 6 * len(same_partition) <= sub.skipped <= 12  # other partitions may still be in flight
            assert sub.depth() == 0


async def test_skipped_records_are_committed(kafka_settings: KafkaSettings) -> None:
    settings = dataclasses.replace(kafka_settings, partitions=1)  # every key shares the one partition
    with anyio.fail_after(WAIT):
        async with KafkaBus(settings) as bus:
            filtered = await bus.subscribe_ready(FEED, group="g", key="mine")
            for i in range(5):
                await bus.publish(FEED, "other", AppAdded(partition="other", id=f"o{i}", app="a", queue="q"))
            marker = AppAdded(partition="mine", id="marker", app="a", queue="q")
            await bus.publish(FEED, "mine", marker)
            assert await filtered.receive() == marker
            filtered.ack()
            assert filtered.skipped == 5 and filtered.committable() == {0: 6}
            await filtered.aclose()

            everything = await bus.subscribe_ready(FEED, group="g")
            after = AppAdded(partition="other", id="after", app="a", queue="q")
            await bus.publish(FEED, "other", after)
            assert await everything.receive() == after  # the skipped records were committed, not re-read


async def test_malformed_records_go_to_the_deadletter_topic(kafka_settings: KafkaSettings) -> None:
    garbage = b"\xc1\xc1 not msgpack at all"
    invalid = msgpack_encoder.encode({"type": "node_added", "partition": "p0"})  # no node, no capacity
    unknown = msgpack_encoder.encode({"type": "no_such_event", "partition": "p0"})
    good = NodeAdded(partition="p0", id="good", node="n1", capacity={"cpu": 1})
    raw = AIOKafkaProducer(bootstrap_servers=kafka_settings.bootstrap, acks="all", enable_idempotence=False)
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            letters = bus.subscribe(DEADLETTER, group="operator")
            feed = bus.subscribe(FEED, group="cache")
            await all_ready(letters, feed)
            await raw.start()
            try:
                for payload in (garbage, invalid, unknown):
                    await raw.send_and_wait(kafka_settings.topic(FEED), payload, key=b"p0")
            finally:
                await raw.stop()
            await bus.publish(FEED, "p0", good)

            assert await feed.receive() == good  # the consumer went on past the bad records
            feed.ack()
            dead: list[DeadLetter] = await take(letters, 3)
    assert [letter.payload for letter in dead] == [garbage, invalid, unknown]
    partition = kafka_partition("p0", kafka_settings.partitions)
    for offset, letter in enumerate(dead):
        assert isinstance(letter, DeadLetter)
        assert (letter.topic, letter.key, letter.partition, letter.offset) == (FEED, "p0", partition, offset)
    assert dead[0].reason.startswith("undecodable feed record")
    assert dead[1].reason.startswith("invalid feed message") and "node" in dead[1].reason
    assert dead[2].reason.startswith("invalid feed message") and "no_such_event" in dead[2].reason
    assert feed.dead_lettered == 3


async def test_a_record_taken_in_after_the_receiver_drained_the_inbox_during_a_dead_letter_wakes_it() -> None:
    """A fetch brings a bad record then a good one while the inbox still holds an earlier good one. The
    receiver takes that one while the bad record's dead letter is being published; the good record
    that follows must wake it, though the inbox is no longer than when the fetch began."""
    settings = KafkaSettings(bootstrap="127.0.0.1:1", prefix="sniper-test.inbox.")  # never connected
    bus = KafkaBus(settings)
    publishing = anyio.Event()
    published = anyio.Event()
    letters: list[DeadLetter] = []

    async def dead_letter(letter: DeadLetter, **_: Any) -> bool:
        letters.append(letter)
        publishing.set()
        await published.wait()
        return True

    bus.dead_letter = dead_letter  # type: ignore[method-assign]
    sub = KafkaSubscription(bus, FEED, group="cache", key=None, capacity=16, listener=None)
    tp = TopicPartition(settings.topic(FEED), 0)
    sub._parts[0] = _Partition(tp)
    first = NodeAdded(partition="p0", id="a", node="n1", capacity={"cpu": 1})
    second = NodeAdded(partition="p0", id="c", node="n2", capacity={"cpu": 1})

    def record(offset: int, value: bytes) -> ConsumerRecord[bytes, bytes]:
        return ConsumerRecord(tp.topic, 0, offset, 0, 0, b"p0", value, None, 2, len(value), [])

    await sub._ingest_all({tp: [record(0, msgpack_encoder.encode(first))]})
    got: list[Any] = []
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sub._ingest_all, {tp: [record(1, b"\xc1 bad"), record(2, msgpack_encoder.encode(second))]})
            await publishing.wait()
            got.append(await sub.receive())  # the inbox is empty again; the dead letter is still on its way
            sub.ack()

            async def receive_next() -> None:
                got.append(await sub.receive())

            tg.start_soon(receive_next)
            await anyio.wait_all_tasks_blocked()
            published.set()
    assert got == [first, second]
    assert [letter.offset for letter in letters] == [1]


async def test_a_subscription_that_delivers_bad_records_hands_over_each_records_bytes_and_keeps_none(
    kafka_settings: KafkaSettings,
) -> None:
    """The owner of the records (``bad="deliver"``) may dead-letter a good record later: it gets the bytes
    as produced with each record; the subscription holds them only until the record is received."""
    settings = dataclasses.replace(kafka_settings, feed_format="json")
    good = AppAdded(partition="p0", id="good", app="a", queue="root.q")
    garbage = b"\xc1 not a record"
    raw = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", enable_idempotence=False)
    with anyio.fail_after(WAIT):
        async with KafkaBus(settings) as bus:
            owner = bus.subscribe(FEED, group="owner", bad="deliver")
            observer = bus.subscribe(FEED, group="observer", bad="skip")
            await all_ready(owner, observer)
            await bus.publish(FEED, "p0", good)
            await raw.start()
            try:
                await raw.send_and_wait(settings.topic(FEED), garbage, key=b"p0")
            finally:
                await raw.stop()
            first = await owner.receive_record()
            second = await owner.receive_record()
            kept = [record.value for record in owner._unacked]  # received, not yet acknowledged
            seen = await observer.receive_record()
    assert (first.message, first.value) == (good, json_encoder.encode(good))
    assert isinstance(second.message, DeadLetter) and second.message.payload == second.value == garbage
    assert (first.offset, second.offset) == (0, 1)
    assert first.kafka_partition == second.kafka_partition == kafka_partition("p0", settings.partitions)
    assert kept == [None, None]
    assert seen.message == good and seen.value is None


async def test_a_record_over_max_message_bytes_is_dead_lettered_not_delivered(kafka_settings: KafkaSettings) -> None:
    settings = dataclasses.replace(kafka_settings, max_message_bytes=64 << 10)
    big = msgpack_encoder.encode(
        NodeAdded(partition="p0", id="big", node="n" * 100, capacity={f"r{i}": i for i in range(9000)})
    )
    assert len(big) > settings.max_message_bytes
    good = NodeAdded(partition="p0", id="good", node="n1", capacity={"cpu": 1})
    raw = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", enable_idempotence=False)
    with anyio.fail_after(WAIT):
        async with KafkaBus(settings) as bus:
            letters = bus.subscribe(DEADLETTER, group="operator")
            feed = bus.subscribe(FEED, group="cache")
            await all_ready(letters, feed)
            await raw.start()
            try:
                await raw.send_and_wait(settings.topic(FEED), big, key=b"p0")
            finally:
                await raw.stop()
            await bus.publish(FEED, "p0", good)
            assert await feed.receive() == good
            feed.ack()
            [letter] = await take(letters, 1)
    assert f"over max_message_bytes={64 << 10}" in letter.reason and "payload truncated" in letter.reason
    assert big.startswith(letter.payload) and len(letter.payload) < settings.max_message_bytes


async def test_ack_then_reopen_resumes_after_the_acked_records(kafka_settings: KafkaSettings) -> None:
    events = [NodeAdded(partition="p0", id=f"e{i}", node=f"n{i}", capacity={"cpu": i}) for i in range(10)]
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            first = await bus.subscribe_ready(FEED, group="cache")
            for event in events:
                await bus.publish(FEED, "p0", event)
            assert await take(first, 4) == events[:4]  # handled and acknowledged
            assert await first.receive() == events[4]  # received, never acknowledged
            await first.aclose()  # commits offsets up to the handled records
            with pytest.raises(anyio.ClosedResourceError):
                await first.receive()

            second = await bus.subscribe_ready(FEED, group="cache")
            # At-least-once: the unacknowledged record comes again, nothing is lost or skipped.
            assert await take(second, 6) == events[4:]
            assert second.depth() == 0


async def test_unacked_records_are_redelivered_to_a_new_member(kafka_settings: KafkaSettings) -> None:
    events = [AppAdded(partition="k", id=f"e{i}", app=f"a{i}", queue="q") for i in range(5)]
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            first = await bus.subscribe_ready(FEED, group="g")
            for event in events:
                await bus.publish(FEED, "k", event)
            assert await take(first, 5, ack=False) == events
            await first.aclose()
            second = await bus.subscribe_ready(FEED, group="g")
            assert await take(second, 5) == events


async def test_slow_reader_never_buffers_more_than_capacity(kafka_settings: KafkaSettings) -> None:
    events = [NodeAdded(partition="p0", id=f"e{i}", node=f"n{i}", capacity={}) for i in range(40)]
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            sub = await bus.subscribe_ready(FEED, group="slow", capacity=3)
            for event in events:
                await bus.publish(FEED, "p0", event)
            got = []
            for _ in events:
                got.append(await sub.receive())
                assert sub.depth() <= 3
                sub.ack()
    assert got == events


async def test_rebalance_listener_sees_what_a_sticky_rebalance_moves_and_nothing_it_keeps(
    kafka_settings: KafkaSettings,
) -> None:
    class Recorder(RebalanceListener):
        def __init__(self) -> None:
            self.owned: set[int] = set()
            self.log: list[tuple[str, frozenset[int]]] = []
            self.changed = anyio.Event()

        async def on_assigned(self, partitions: frozenset[int]) -> None:
            self.owned |= partitions
            self.log.append(("assigned", partitions))
            self.changed.set()

        async def on_revoked(self, partitions: frozenset[int]) -> None:
            self.owned -= partitions
            self.log.append(("revoked", partitions))
            self.changed.set()

        async def on_rebalance(self, partitions: frozenset[int]) -> None:
            self.log.append(("rebalance", partitions))

    everything = set(range(kafka_settings.partitions))
    one, two = Recorder(), Recorder()
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            first = await bus.subscribe_ready(FEED, group="core", listener=one)
            assert one.owned == everything and first.assigned == everything
            second = bus.subscribe(FEED, group="core", listener=two)
            # The group rebalances: wait until both members own a disjoint share of everything.
            while not (one.owned and two.owned and one.owned | two.owned == everything):
                one.changed, two.changed = anyio.Event(), anyio.Event()
                async with anyio.create_task_group() as tg:

                    async def wait_any(event: anyio.Event, scope: anyio.CancelScope = tg.cancel_scope) -> None:
                        await event.wait()
                        scope.cancel()

                    tg.start_soon(wait_any, one.changed)
                    tg.start_soon(wait_any, two.changed)
            assert not one.owned & two.owned
            assert first.assigned == one.owned and second.assigned == two.owned
            # Sticky: the first member gives up only what the second now owns, and keeps the rest running.
            assert one.log == [
                ("assigned", frozenset(everything)),
                ("rebalance", frozenset(everything)),
                ("revoked", frozenset(two.owned)),
                ("assigned", frozenset()),
            ]
            owned_by_two = set(two.owned)
            await second.aclose()
            assert two.log[-1] == ("revoked", frozenset(owned_by_two))
            assert two.owned == set()


async def test_close_is_bounded_and_ends_receivers(kafka_settings: KafkaSettings) -> None:
    settings = dataclasses.replace(kafka_settings, close_timeout=2.0)
    with anyio.fail_after(WAIT):
        bus = KafkaBus(settings)
        sub = await bus.subscribe_ready(FEED, group="g")
        ended = anyio.Event()

        async def reader() -> None:
            with pytest.raises(anyio.EndOfStream):
                await sub.receive()
            ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            with anyio.fail_after(3 * settings.close_timeout):
                await bus.aclose()
        assert ended.is_set()
        with pytest.raises(anyio.ClosedResourceError):
            await bus.publish(FEED, "p0", NodeAdded(partition="p0", node="n", capacity={}))


async def test_a_bus_whose_owner_is_cancelled_still_closes_and_leaves_its_groups(kafka_settings: KafkaSettings) -> None:
    """The block that owns the bus is cancelled (a deadline, a shutdown): the close still runs to its end
    within its own bound, so the member leaves its group at once and the next member gets every partition."""
    with anyio.fail_after(WAIT):
        with anyio.CancelScope() as owner:
            async with KafkaBus(kafka_settings) as bus:
                first = await bus.subscribe_ready(FEED, group="cache")
                owner.cancel()
                await anyio.lowlevel.checkpoint()
        assert owner.cancelled_caught
        assert bus.closed and first.over() and first._consumer is None
        async with KafkaBus(kafka_settings) as other:
            second = await other.subscribe_ready(FEED, group="cache")
            assert second.assigned == frozenset(range(kafka_settings.partitions))


async def test_close_is_bounded_when_the_broker_is_gone(kafka_settings: KafkaSettings) -> None:
    with anyio.fail_after(WAIT):
        async with EmbeddedBroker() as broker:
            settings = dataclasses.replace(kafka_settings, bootstrap=broker.bootstrap, close_timeout=2.0)
            bus = KafkaBus(settings)
            sub = await bus.subscribe_ready(FEED, group="g")
            await bus.publish(FEED, "p0", NodeAdded(partition="p0", node="n", capacity={}))
            await sub.receive()
            sub.ack()
        # The broker is stopped now: the final commit and the consumer's and producer's stops cannot
        # complete normally; closing must still end within its bounds.
        with anyio.fail_after(4 * settings.close_timeout):
            await bus.aclose()


async def test_unreachable_broker_fails_the_subscription_clearly(kafka_settings: KafkaSettings) -> None:
    """Nothing listens: the first contact is tried again until the connect timeout, then fails clearly."""
    settings = dataclasses.replace(kafka_settings, bootstrap=f"127.0.0.1:{free_port()}", connect_timeout=1.0)
    with anyio.fail_after(WAIT):
        bus = KafkaBus(settings)
        sub = bus.subscribe(FEED, group="g")
        with pytest.raises(KafkaTransportError, match=r"no Kafka broker answered .* within 1 s"):
            await sub.ready()
        with pytest.raises(KafkaTransportError):
            await sub.receive()
        await bus.aclose()


async def test_publish_refuses_oversized_and_unknown(kafka_settings: KafkaSettings) -> None:
    settings = dataclasses.replace(kafka_settings, max_message_bytes=16 * 1024)
    with anyio.fail_after(WAIT):
        async with KafkaBus(settings) as bus:
            with pytest.raises(MessageTooLarge):
                await bus.publish(SNAPSHOTS, "p0", b"x" * (32 * 1024))
            with pytest.raises(ValueError, match="unknown topic"):
                await bus.publish("nope", "p0", b"")
            with pytest.raises(ValueError, match="unknown topic"):
                bus.subscribe("nope", group="g")


# ---------------------------------------------------------------------------------------------- settings


def test_settings_from_env() -> None:
    env = {
        "SNIPER_KAFKA_BOOTSTRAP": "k1:9093,k2:9093",
        "SNIPER_KAFKA_PREFIX": "prod.",
        "SNIPER_KAFKA_PARTITIONS": "32",
        "SNIPER_KAFKA_SECURITY_PROTOCOL": "sasl_plaintext",
        "SNIPER_KAFKA_SASL_MECHANISM": "scram-sha-512",
        "SNIPER_KAFKA_USERNAME": "sniper",
        "SNIPER_KAFKA_PASSWORD": "secret",
        "SNIPER_KAFKA_MAX_MESSAGE_BYTES": "2097152",
        "SNIPER_KAFKA_CLIENT_ID": "core-1",
    }
    settings = KafkaSettings.from_env(env)
    assert settings.bootstrap == "k1:9093,k2:9093"
    assert settings.topic(FEED) == "prod.feed"
    assert (settings.partitions, settings.max_message_bytes, settings.client_id) == (32, 2097152, "core-1")
    options = settings.client_options()
    assert options["security_protocol"] == "SASL_PLAINTEXT"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("sniper", "secret")
    assert "secret" not in repr(settings)
    assert KafkaSettings.from_env({}, bootstrap="x:1").prefix == "sniper."


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="bootstrap"):
        KafkaSettings.from_env({})
    with pytest.raises(ValueError, match="sasl_mechanism"):
        KafkaSettings(bootstrap="x:1", security_protocol="SASL_SSL", username="u", password="p")
    with pytest.raises(ValueError, match="username"):
        KafkaSettings(bootstrap="x:1", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN")
    with pytest.raises(ValueError, match="not an integer"):
        KafkaSettings.from_env({"SNIPER_KAFKA_BOOTSTRAP": "x:1", "SNIPER_KAFKA_PARTITIONS": "many"})
    assert "ssl_context" not in KafkaSettings(bootstrap="x:1").client_options()


def test_deadletter_round_trips() -> None:
    letter = DeadLetter(topic=FEED, partition=1, offset=2, key="p0", reason="bad", payload=b"\x00\xff")
    assert msgspec.msgpack.decode(msgpack_encoder.encode(letter), type=DeadLetter) == letter
