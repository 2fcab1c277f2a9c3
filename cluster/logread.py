"""Reading one Kafka partition of a topic by offset, outside any consumer group (recovery, reports).

Owns short-lived consumers with manual assignment: :func:`read_partition` returns the records of one
partition from a start offset up to the end offset it saw when it began (records appended later are
not waited for), optionally only those of one key. Compacted topics have offset gaps; the end is
detected by the consumer's position, not by counting.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from transport.kafka import KafkaSettings


@dataclasses.dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    key: bytes | None
    value: bytes | None


class LogReadError(RuntimeError):
    """A partition could not be read to its end in time."""


async def read_partition(
    settings: KafkaSettings,
    topic: str,
    partition: int,
    *,
    start: int | None = None,
    key: str | None = None,
    limit: float = 30.0,
) -> list[LogRecord]:
    """Records of ``settings.topic(topic)``[``partition``] from ``start`` (default: the beginning)."""
    consumer: Any = AIOKafkaConsumer(
        **settings.client_options(),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        max_partition_fetch_bytes=max(settings.max_message_bytes, 1 << 20),
        fetch_max_bytes=max(settings.max_message_bytes, 50 << 20),
    )
    wanted = key.encode() if key is not None else None
    tp = TopicPartition(settings.topic(topic), partition)
    out: list[LogRecord] = []
    deadline = time.monotonic() + limit
    await consumer.start()
    try:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        first = (await consumer.beginning_offsets([tp]))[tp]
        begin = first if start is None else max(start, first)
        if begin >= end:
            return out
        consumer.seek(tp, begin)
        while await consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise LogReadError(f"reading {tp.topic}[{partition}] to offset {end} took over {limit:g}s")
            batches = await consumer.getmany(tp, timeout_ms=200, max_records=10_000)
            for record in batches.get(tp, []):
                if record.offset >= end:
                    break
                if wanted is None or record.key == wanted:
                    out.append(LogRecord(record.offset, record.key, record.value))
        return out
    finally:
        await consumer.stop()


async def end_offset(settings: KafkaSettings, topic: str, partition: int) -> int:
    """The offset the next record of that partition will get."""
    consumer: Any = AIOKafkaConsumer(**settings.client_options(), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic(topic), partition)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()
