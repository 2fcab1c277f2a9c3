"""Reading one Kafka partition of a topic by offset, outside any consumer group (recovery, reports).

Owns short-lived consumers with manual assignment: :func:`read_partition` returns the records of one
partition from a start offset to its end, optionally only those of one key. The end is at least the
end offset seen when reading began, and reading goes on until a fetch past it comes back empty: the
bundled broker reports the base offset of the last batch + 1 as the high watermark, so the end offset
alone would miss the rest of a batch. Compacted topics have offset gaps; nothing counts offsets.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import anyio
from aiokafka import AIOKafkaConsumer, TopicPartition

from sniper.transport.kafka import KafkaSettings

STOP_LIMIT = 5.0  # seconds a consumer that read a log may take to stop


@dataclasses.dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


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
    try:
        await consumer.start()
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        first = (await consumer.beginning_offsets([tp]))[tp]
        begin = first if start is None else max(start, first)
        if begin >= end:
            return out
        consumer.seek(tp, begin)
        while True:
            if time.monotonic() > deadline:
                raise LogReadError(f"reading {tp.topic}[{partition}] to offset {end} took over {limit:g}s")
            batches = await consumer.getmany(tp, timeout_ms=100, max_records=10_000)
            records = batches.get(tp, [])
            for record in records:
                if wanted is None or record.key == wanted:
                    out.append(LogRecord(record.offset, record.key, record.value, tuple(record.headers)))
            # The end offset is only a lower bound (the bundled broker reports a batch's base offset + 1
            # as the high watermark): past it, read on until a fetch comes back empty.
            if not records and await consumer.position(tp) >= end:
                return out
    finally:
        await _stop(consumer)


async def end_offset(settings: KafkaSettings, topic: str, partition: int) -> int:
    """The offset the next record of that partition will get."""
    consumer: Any = AIOKafkaConsumer(**settings.client_options(), group_id=None, enable_auto_commit=False)
    try:
        await consumer.start()
        tp = TopicPartition(settings.topic(topic), partition)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await _stop(consumer)


async def _stop(consumer: Any) -> None:
    """Stop a reading consumer, also when its read was cancelled or its start failed (a restore stopped
    mid-way): shielded, so the cancellation that ended the read cannot leave its connections open, and
    bounded, so a broker that does not answer cannot hold the caller."""
    with anyio.move_on_after(STOP_LIMIT, shield=True):
        await consumer.stop()
