"""JSON beside msgpack on Kafka: how records are told apart, what a bad one's dead letter says, and a
client that is not aiokafka (librdkafka, through confluent-kafka) driving a core on the embedded broker.

librdkafka runs in a child process (``tests/librdkafka_client.py``), so its threads never share this
process's event loop; every wait is on a condition, bounded by ``fail_after``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
import msgspec
import pytest
from aiokafka import AIOKafkaProducer

from sniper.bench.e2e import stop_core
from sniper.cluster.process import CoreOptions, CoreProcess
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.codec import feed_json, feed_msgpack, json_encoder, msgpack_encoder
from sniper.messages.deadletter import DeadLetter
from sniper.messages.wire import CONTENT_TYPE, WireDecoder, sniff
from sniper.transport.bus import DEADLETTER, DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings, KafkaSubscription, kafka_partition
from tests.kafka_support import CoreSubprocess
from tests.librdkafka_support import consume, produce

WAIT = 60.0
feed_decoder = WireDecoder(feed_msgpack, feed_json)


# ---------------------------------------------------------------------------------------------- formats


def test_a_json_object_and_a_msgpack_map_are_told_apart_by_their_first_byte() -> None:
    event = f.NodeAdded(partition="p", node="n1", capacity={"memory": 4})
    assert sniff(json_encoder.encode(event)) == "json"
    assert sniff(b'\n  {"type": "node_added"}') == "json"
    assert sniff(msgpack_encoder.encode(event)) == "msgpack"
    assert feed_decoder.decode(json_encoder.encode(event)) == event
    assert feed_decoder.decode(msgpack_encoder.encode(event)) == event


def test_the_content_type_header_decides_over_the_bytes() -> None:
    event = f.AppAdded(partition="p", app="a", queue="root.q")
    assert feed_decoder.decode(json_encoder.encode(event), "application/json; charset=utf-8") == event
    with pytest.raises(msgspec.DecodeError, match="JSON is malformed"):
        feed_decoder.decode(msgpack_encoder.encode(event), "application/json")
    with pytest.raises(msgspec.DecodeError, match=r"MessagePack data is malformed|Expected `object`"):
        feed_decoder.decode(json_encoder.encode(event), "application/msgpack")
    with pytest.raises(msgspec.DecodeError, match="unsupported content-type 'text/plain'"):
        feed_decoder.decode(json_encoder.encode(event), "text/plain")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'[{"type": "node_added"}]', "neither a JSON object nor a msgpack map (it starts with b'[', a JSON array?)"),
        (b"42", "it starts with b'4', a JSON number?"),
        (b"\x93\x01\x02\x03", "it starts with b'\\x93'"),
        (b"   ", "the record is empty or blank"),
    ],
)
def test_a_value_that_is_neither_names_what_it_is(value: bytes, reason: str) -> None:
    with pytest.raises(msgspec.DecodeError) as caught:
        feed_decoder.decode(value)
    assert reason in str(caught.value)
    assert "Expected" not in str(caught.value)


# ---------------------------------------------------------------------------------------------- the bus


async def take(sub: KafkaSubscription, count: int) -> list[Any]:
    out = []
    for _ in range(count):
        out.append(await sub.receive())
        sub.ack()
    return out


async def test_json_feed_records_are_read_and_bad_ones_dead_lettered_with_the_real_problem(
    kafka_settings: KafkaSettings,
) -> None:
    good_json = f.NodeAdded(partition="p0", id="j", node="n1", capacity={"memory": 8})
    good_msgpack = f.NodeAdded(partition="p0", id="m", node="n2", capacity={"memory": 8})
    records: list[tuple[bytes, list[tuple[str, bytes]]]] = [
        (json_encoder.encode(good_json), []),
        (b'{"type": "node_added", "partition": "p0", "node": "n3", "capacity": {"memory": -1}}', []),
        (b'[{"type": "node_added"}]', []),
        (msgpack_encoder.encode(good_msgpack), [(CONTENT_TYPE, b"application/json")]),
        (json_encoder.encode(good_json), [(CONTENT_TYPE, b"text/csv")]),
        (msgpack_encoder.encode(good_msgpack), [(CONTENT_TYPE, b"application/msgpack")]),
    ]
    raw = AIOKafkaProducer(bootstrap_servers=kafka_settings.bootstrap, acks="all", enable_idempotence=False)
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus:
            letters = await bus.subscribe_ready(DEADLETTER, group="operator")
            feed = await bus.subscribe_ready(FEED, group="cache")
            await raw.start()
            try:
                for value, headers in records:
                    await raw.send_and_wait(kafka_settings.topic(FEED), value, key=b"p0", headers=headers)
            finally:
                await raw.stop()
            assert await take(feed, 2) == [good_json, good_msgpack]
            dead: list[DeadLetter] = await take(letters, 4)
    reasons = [letter.reason for letter in dead]
    assert "capacity: memory: -1 is outside 0 to 2**53" in reasons[0], reasons
    assert "neither a JSON object nor a msgpack map" in reasons[1] and "a JSON array" in reasons[1], reasons
    assert "JSON is malformed" in reasons[2], reasons
    assert "unsupported content-type 'text/csv'" in reasons[3], reasons
    assert not any("Expected `object`, got `int`" in reason for reason in reasons)


async def test_every_record_names_its_format_and_decisions_go_out_as_configured(kafka_settings: KafkaSettings) -> None:
    settings = dataclasses.replace(kafka_settings, decisions_format="json")
    decision = d.Rejected(partition="p0", seq=1, reason="no such queue", app="a")
    event = f.AppRemoved(partition="p0", app="a")
    with anyio.fail_after(WAIT):
        async with KafkaBus(settings) as bus:
            await bus.publish(DECISIONS, "p0", decision)
            await bus.publish(FEED, "p0", event)
            got = await consume(settings, [DECISIONS, FEED], 2)
    by_topic = {m.topic: m for m in got}
    out = by_topic[settings.topic(DECISIONS)]
    assert out.headers == [(CONTENT_TYPE, b"application/json")]
    assert json.loads(out.value) == json.loads(json_encoder.encode(decision))
    assert by_topic[settings.topic(FEED)].headers == [(CONTENT_TYPE, b"application/msgpack")]


# ---------------------------------------------------------------------------------------------- librdkafka


@contextlib.asynccontextmanager
async def json_core(kafka_settings: KafkaSettings) -> AsyncIterator[CoreProcess]:
    """A core process that publishes its decisions in JSON, running until the block ends."""
    settings = dataclasses.replace(kafka_settings, decisions_format="json")
    process = CoreProcess(settings, CoreOptions(group="cores", tick=0.1, snapshot_interval=0.5, stop_timeout=3.0))
    async with anyio.create_task_group() as tg:
        await tg.start(process.run)
        await process.ready.wait()
        yield process
        tg.cancel_scope.cancel()


def json_workload(name: str) -> list[dict[str, Any]]:
    """Feed events as a resource manager writes them by hand: plain JSON objects, quantities in base units."""
    config = {
        "name": name,
        "queues": [{"name": "prod", "resources": {"guaranteed": {"memory": "8Gi"}}}],
    }
    return [
        {"type": "partition_config", "partition": name, "id": f"{name}-c", "config": config},
        {"type": "node_added", "partition": name, "id": f"{name}-n", "node": "n1", "capacity": {"memory": 16384}},
        {"type": "app_added", "partition": name, "id": f"{name}-a", "app": "web", "queue": "root.prod"},
        {
            "type": "ask_added",
            "partition": name,
            "id": f"{name}-k",
            "app": "web",
            "ask": "task",
            "resource": {"memory": 1024},
            "count": 3,
        },
    ]


@pytest.mark.kafka
async def test_librdkafka_with_murmur2_random_drives_a_core_in_json(kafka_settings: KafkaSettings) -> None:
    names = [f"rm-{i}" for i in range(6)]
    records = [(name, json.dumps(event).encode()) for name in names for event in json_workload(name)]
    with anyio.fail_after(WAIT):
        async with json_core(kafka_settings) as core:
            placed = await produce(kafka_settings, kafka_settings.topic(FEED), records, "murmur2_random")
            # Every key's records went where Kafka's Java client (and Sniper) puts them.
            expected = sorted(kafka_partition(name, kafka_settings.partitions) for name, _ in records)
            assert sorted(placed) == expected
            got = await consume(kafka_settings, [DECISIONS], 3 * len(names))
            # A restore reads the JSON decisions log back.
            kp = kafka_partition(names[0], kafka_settings.partitions)
            logged = await core._read_log(names[0], kp, None)
    decisions = [json.loads(m.value) for m in got]
    assert all(m.headers == [(CONTENT_TYPE, b"application/json")] for m in got)
    assert all(m.key == x["partition"] for m, x in zip(got, decisions, strict=True))
    allocated = sorted((x["partition"], x["node"]) for x in decisions if x["type"] == "allocated")
    assert allocated == sorted((name, "n1") for name in names for _ in range(3))
    assert [x.seq for x in logged.decisions] == [1, 2, 3]
    assert all(isinstance(x, d.Allocated) for x in logged.decisions)


@pytest.mark.kafka
async def test_librdkafkas_default_partitioner_misplaces_a_partition_and_the_core_says_so(
    kafka_settings: KafkaSettings,
) -> None:
    topic = kafka_settings.topic(FEED)
    with anyio.fail_after(WAIT):
        async with json_core(kafka_settings) as core:
            letters = await core.bus.subscribe_ready(DEADLETTER, group="operator")
            misplaced: str | None = None
            for i in range(50):
                name = f"crc-{i}"
                event = json.dumps(json_workload(name)[1]).encode()
                # librdkafka's default partitioner, consistent_random: CRC32 of the key
                [where] = await produce(kafka_settings, topic, [(name, event)])
                if where != kafka_partition(name, kafka_settings.partitions):
                    misplaced = name
                    break
            assert misplaced is not None, "CRC32 and murmur2 agreed on 50 keys"
            letter: DeadLetter = await letters.receive()
            await letters.aclose()
            hosted = set(core.hosts)
    right = kafka_partition(misplaced, kafka_settings.partitions)
    assert letter.key == misplaced
    assert f"partition {misplaced!r} belongs on Kafka partition {right}, not {where}" in letter.reason
    assert feed_decoder.decode(letter.payload).partition == misplaced
    assert misplaced not in hosted


@pytest.mark.kafka
async def test_sniper_core_publishes_json_decisions_when_sniper_decisions_format_says_so(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SNIPER_DECISIONS_FORMAT", "json")
    records = [("env", json.dumps(event).encode()) for event in json_workload("env")]
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            core = await CoreSubprocess.spawn(kafka_settings, tg, "cores")
            try:
                await core.until_assigned()
                await produce(kafka_settings, kafka_settings.topic(FEED), records, "murmur2_random")
                got = await consume(kafka_settings, [DECISIONS], 3)
            finally:
                with anyio.CancelScope(shield=True):
                    await stop_core(core.process)
            tg.cancel_scope.cancel()
    assert all(m.headers == [(CONTENT_TYPE, b"application/json")] for m in got)
    assert [json.loads(m.value)["type"] for m in got] == ["allocated"] * 3
