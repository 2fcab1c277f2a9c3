"""Records handed to the producer a batch per Kafka partition (the embedded broker unless
``SNIPER_KAFKA_BOOTSTRAP`` is set): each lands once, in order, where its hand-over says it did."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import anyio
import pytest

from sniper.cluster.logread import read_partition
from sniper.messages.codec import decision_msgpack
from sniper.messages.decisions import Allocated
from sniper.transport.bus import DECISIONS
from sniper.transport.kafka import KafkaBus, KafkaSettings, kafka_partition
from sniper.transport.kafka_batch import landed

pytestmark = pytest.mark.kafka

WAIT = 30.0


def allocated(key: str, i: int) -> tuple[str, Allocated]:
    """A decision of partition ``key`` whose ``seq`` is ``i`` and whose text makes it about 300 bytes."""
    return key, Allocated(
        partition=key,
        seq=i,
        app="app",
        ask=f"ask-{i}",
        allocation=f"alloc-{i}",
        queue="root.a",
        node="n" * 200,
        resource={"m": 1},
    )


async def test_records_of_several_hand_overs_land_once_in_order_at_the_offsets_their_futures_name(
    bus: KafkaBus, kafka_settings: KafkaSettings
) -> None:
    keys = ["a", "b", "c"]
    # The first hand-over overflows one producer batch (16 KiB) on each partition; the second comes while
    # the first's batches wait for the sender, so its records join them one by one.
    first = [allocated(key, i) for i in range(120) for key in keys]
    second = [allocated(key, i) for i in range(120, 130) for key in keys]
    with anyio.fail_after(WAIT):
        sent_first = await bus.send_many(DECISIONS, first)
        sent_second = await bus.send_many(DECISIONS, second)
        assert sent_first is not None and sent_second is not None
        ends_first, ends_second = await sent_first, await sent_second
        logged: dict[str, list[tuple[int, int]]] = defaultdict(list)  # key -> (seq, offset) in log order
        for kp in sorted({kafka_partition(key, kafka_settings.partitions) for key in keys}):
            for record in await read_partition(kafka_settings, DECISIONS, kp):
                decision = decision_msgpack.decode(record.value or b"")
                assert record.key == decision.partition.encode()
                logged[decision.partition].append((decision.seq, record.offset))
    for key in keys:
        assert [seq for seq, _ in logged[key]] == list(range(130)), f"{key}: each record once, in order"
    for ends, seqs in ((ends_first, range(120)), (ends_second, range(120, 130))):
        expected: dict[int, int] = {}
        for key in keys:
            kp = kafka_partition(key, kafka_settings.partitions)
            last = max(offset for seq, offset in logged[key] if seq in seqs)
            expected[kp] = max(expected.get(kp, -1), last + 1)
        assert ends == expected


async def test_a_hand_over_fails_when_any_of_its_records_was_not_acknowledged() -> None:
    loop = asyncio.get_running_loop()
    acknowledged: asyncio.Future[Any] = loop.create_future()
    refused: asyncio.Future[Any] = loop.create_future()
    acknowledged.set_result(type("Metadata", (), {"partition": 0, "offset": 7})())
    refused.set_exception(RuntimeError("not acknowledged"))
    with pytest.raises(RuntimeError, match="not acknowledged"):
        await landed([(acknowledged, 3), (refused, 1)])
