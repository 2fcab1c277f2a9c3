"""The memory bus's inboxes: order, backpressure, cancelled receivers and closing, with the quiescence
count kept exact through all of them."""

from __future__ import annotations

import anyio
import pytest

from sniper.transport.memory import MemoryBus

GUARD = 30.0  # seconds before a hang becomes a failure


async def test_a_subscriber_receives_every_message_in_publish_order_and_acks_make_the_bus_idle() -> None:
    bus = MemoryBus()
    inbox = bus.subscribe("t", group="g")
    for n in range(5):
        await bus.publish("t", "p", n)
    assert inbox.depth() == 5
    assert bus.in_flight == 5
    got = [inbox.receive_nowait() for _ in range(5)]
    assert got == [0, 1, 2, 3, 4]
    for _ in got:
        inbox.ack()
    assert bus.in_flight == 0
    with anyio.fail_after(GUARD):
        await bus.wait_idle()


async def test_a_publisher_waits_for_room_and_its_message_follows_what_was_buffered() -> None:
    bus = MemoryBus()
    inbox = bus.subscribe("t", group="g", capacity=1)
    await bus.publish("t", "p", "first")
    published: list[str] = []

    async def publish() -> None:
        await bus.publish("t", "p", "second")
        published.append("second")

    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:
            tg.start_soon(publish)
            await anyio.wait_all_tasks_blocked()
            assert published == []  # the inbox is full: the publisher waits
            assert await inbox.receive() == "first"
            assert await inbox.receive() == "second"
    assert published == ["second"]


async def test_a_receiver_cancelled_while_waiting_leaves_the_next_message_in_the_inbox() -> None:
    bus = MemoryBus()
    inbox = bus.subscribe("t", group="g")
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:
            tg.start_soon(inbox.receive)
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        await bus.publish("t", "p", "kept")
        assert inbox.depth() == 1
        assert await inbox.receive() == "kept"


async def test_a_closed_subscription_counts_what_it_held_as_handled_and_drops_later_messages() -> None:
    bus = MemoryBus()
    closed = bus.subscribe("t", group="gone")
    kept = bus.subscribe("t", group="kept")
    await bus.publish("t", "p", "held")
    closed.receive_nowait()  # received, never acknowledged
    await bus.publish("t", "p", "buffered")
    await closed.aclose()
    assert bus.in_flight == 2  # the two messages the other subscriber holds
    await bus.publish("t", "p", "after")
    assert kept.depth() == 3
    with pytest.raises(anyio.ClosedResourceError):
        closed.receive_nowait()


async def test_a_waiting_receiver_ends_when_the_bus_closes() -> None:
    bus = MemoryBus()
    inbox = bus.subscribe("t", group="g")
    ended: list[bool] = []

    async def receive() -> None:
        try:
            await inbox.receive()
        except anyio.EndOfStream:
            ended.append(True)

    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:
            tg.start_soon(receive)
            await anyio.wait_all_tasks_blocked()
            await bus.aclose()
    assert ended == [True]


async def test_a_subscriber_refusing_a_message_is_not_woken_nor_counted() -> None:
    bus = MemoryBus()
    inbox = bus.subscribe_many([("t", None)], group="g", accept=lambda m: m != "refused")
    await bus.publish("t", "p", "refused")
    await bus.publish("t", "p", "taken")
    assert inbox.depth() == 1
    assert bus.in_flight == 1
    assert inbox.receive_nowait() == "taken"
