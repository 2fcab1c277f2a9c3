"""Handing records to aiokafka's producer one batch per Kafka partition, and learning where they landed.

What it owns: :func:`hand_over` and :func:`landed`. Invariants: one partition's records reach the
producer in the order given, each exactly once; handing over never waits for the broker unless the
producer's buffer for that partition is full (as a record sent on its own would); and the future of a
hand-over fails if any of its records was not acknowledged. A record sent on its own costs aiokafka a
metadata look-up, a future and an acknowledgement callback each; a batch costs them once.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

Sent = tuple["asyncio.Future[Any]", int]  # a future of record metadata, and how many records it covers


def _has_open_batch(producer: AIOKafkaProducer, tp: TopicPartition) -> bool:
    """Whether the producer holds a batch for ``tp`` its sender has not taken yet (records join it).

    aiokafka's :meth:`~aiokafka.AIOKafkaProducer.send_batch` waits for such a batch to be taken; this
    looks at its accumulator (internals, like the lease's hold-back); without them it says yes, and
    every record goes on its own.
    """
    batches = getattr(getattr(producer, "_message_accumulator", None), "_batches", None)
    return batches is None or bool(batches.get(tp))


async def hand_over(
    producer: AIOKafkaProducer,
    topic: str,
    partition: int,
    records: Sequence[tuple[bytes, bytes]],
    headers: list[tuple[str, bytes]],
) -> list[Sent]:
    """Hand ``(key, value)`` records of one Kafka partition to the producer, in order.

    One batch when the producer holds none for the partition; records that do not fit in it, or all of
    them when the producer's batch is still open, join the producer's batches one by one.
    """
    sent: list[Sent] = []
    first = 0
    tp = TopicPartition(topic, partition)
    if not _has_open_batch(producer, tp):
        batch = producer.create_batch()
        while first < len(records):
            key, value = records[first]
            if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                break  # full: the rest join the producer's next batch
            first += 1
        if first:  # left open: records sent on their own while it waits join it, after these
            sent.append((await producer.send_batch(batch, topic, partition=partition), first))
    for key, value in records[first:]:
        sent.append((await producer.send(topic, value, key=key, partition=partition, headers=headers), 1))
    return sent


def landed(sent: list[Sent]) -> asyncio.Future[dict[int, int]]:
    """A future of, per Kafka partition, one past the highest offset the records of ``sent`` got, done
    once every one of them was acknowledged; it fails with the first failure among them."""
    out: asyncio.Future[dict[int, int]] = asyncio.get_running_loop().create_future()
    ends: dict[int, int] = {}
    waiting = [len(sent)]

    def one(count: int, future: asyncio.Future[Any]) -> None:
        if out.done():
            if not future.cancelled():
                future.exception()  # retrieved: the first failure is the one reported
            return
        if future.cancelled():
            out.cancel()
            return
        error = future.exception()
        if error is not None:
            out.set_exception(error)
            return
        metadata = future.result()  # a batch's metadata names its first record's offset
        end = metadata.offset + count
        if end > ends.get(metadata.partition, -1):
            ends[metadata.partition] = end
        waiting[0] -= 1
        if not waiting[0]:
            out.set_result(ends)

    for future, count in sent:
        future.add_done_callback(functools.partial(one, count))
    return out
