"""The memory transport: one ordered inbox per subscriber inside one process, on asyncio.

It counts messages delivered but not yet acknowledged, so a virtual-time driver can wait until
every actor has handled everything (:meth:`MemoryBus.wait_idle`) before advancing the clock. A
subscriber may pass an ``accept`` filter: messages it refuses are never delivered to it (nor counted),
so a subscriber that would ignore most messages is not woken for them.

An inbox is a deque with asyncio futures for the tasks waiting on it. It keeps the scheduling of an
anyio memory object stream step for step (a receive or a blocking send first gives the event loop
back once; a waiting receiver is handed the message directly and woken once), so the actors run in
the same order as on such streams, and a run decides the same, without their per-message cost.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import anyio

from sniper.transport.bus import Bus, Subscription

Accept = Callable[[Any], bool]


class _MemorySubscription(Subscription):
    """A bounded FIFO with one or more receivers; the bus is its only sender."""

    __slots__ = ("_buffer", "_bus", "_capacity", "_closed", "_ended", "_receivers", "_senders", "_unacked")

    def __init__(self, bus: MemoryBus, capacity: int) -> None:
        self._bus = bus
        self._buffer: deque[Any] = deque()
        self._capacity = capacity
        self._receivers: deque[asyncio.Future[Any]] = deque()  # tasks waiting for a message
        self._senders: deque[tuple[asyncio.Future[bool], Any]] = deque()  # publishers waiting for room
        self._unacked = 0
        self._closed = False  # the receiving side is closed: sending fails
        self._ended = False  # the bus is closed: receiving an empty inbox ends

    # ---- the bus's side
    def put_nowait(self, message: Any) -> None:
        """Hand ``message`` to a waiting receiver or buffer it; ``anyio.WouldBlock`` when full."""
        if self._closed:
            raise anyio.BrokenResourceError
        receivers = self._receivers
        while receivers:
            waiter = receivers.popleft()
            if not waiter.done():  # a cancelled receiver takes nothing
                waiter.set_result(message)
                return
        if len(self._buffer) < self._capacity:
            self._buffer.append(message)
        else:
            raise anyio.WouldBlock

    async def put(self, message: Any) -> None:
        """Wait for room (backpressure), then deliver as :meth:`put_nowait`."""
        await asyncio.sleep(0)
        try:
            self.put_nowait(message)
            return
        except anyio.WouldBlock:
            pass
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (waiter, message)
        self._senders.append(entry)
        try:
            taken = await waiter  # True once a receiver took it into the buffer, False if it closed
        finally:
            if entry in self._senders:
                self._senders.remove(entry)
        if not taken:
            raise anyio.BrokenResourceError

    def end(self) -> None:
        """No more messages: waiting publishers fail, waiting receivers (and later ones, once the buffer is
        empty) get ``EndOfStream``."""
        self._ended = True
        while self._senders:
            waiter, _ = self._senders.popleft()
            if not waiter.done():
                waiter.set_result(False)
        while self._receivers:
            waiter = self._receivers.popleft()
            if not waiter.done():
                waiter.set_exception(anyio.EndOfStream())

    # ---- the subscriber's side
    def receive_nowait(self) -> Any:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._senders:  # a publisher waits for room: its message joins the buffer
            waiter, message = self._senders.popleft()
            self._buffer.append(message)
            if not waiter.done():
                waiter.set_result(True)
        if self._buffer:
            message = self._buffer.popleft()
            self._unacked += 1
            return message
        if self._ended:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> Any:
        await asyncio.sleep(0)
        try:
            return self.receive_nowait()
        except anyio.WouldBlock:
            pass
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._receivers.append(waiter)
        try:
            message = await waiter
        except anyio.EndOfStream:
            if self._closed:
                raise anyio.ClosedResourceError from None
            raise
        finally:
            if waiter in self._receivers:
                self._receivers.remove(waiter)
        self._unacked += 1
        return message

    def ack(self) -> None:
        if self._unacked:
            self._unacked -= 1
            self._bus._handled(1)

    def depth(self) -> int:
        return len(self._buffer)

    async def aclose(self) -> None:
        # Whatever is still buffered or unacknowledged will never be handled.
        dropped = len(self._buffer) + self._unacked
        self._unacked = 0
        self._buffer.clear()
        if not self._closed:
            self._closed = True
            self.end()
        self._bus._handled(dropped)


_Entry = tuple[str | None, _MemorySubscription, Accept | None]  # wanted key, inbox, filter


class MemoryBus(Bus):
    def __init__(self) -> None:
        self._subscribers: dict[str, list[_Entry]] = defaultdict(list)
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.published = 0

    async def publish(self, topic: str, key: str, message: Any) -> None:
        self.published += 1
        for entry in list(self._subscribers[topic]):
            wanted, inbox, accept = entry
            if (wanted is not None and wanted != key) or (accept is not None and not accept(message)):
                continue
            self._delivering()
            try:
                try:
                    inbox.put_nowait(message)  # room in the buffer: no scheduler round trip
                except anyio.WouldBlock:
                    await inbox.put(message)  # full: wait (backpressure)
            except anyio.BrokenResourceError:
                self._handled(1)
                self._unsubscribe(topic, entry)  # its subscriber is gone for good

    def _unsubscribe(self, topic: str, entry: _Entry) -> None:
        """Forget ``entry`` if it is still subscribed: publishers that waited on the same full inbox all
        find it gone, and :meth:`aclose` may have dropped every subscriber meanwhile."""
        subscribers = self._subscribers.get(topic)
        if subscribers is not None and entry in subscribers:
            subscribers.remove(entry)

    def subscribe(self, topic: str, *, group: str, key: str | None = None, capacity: int = 1024) -> Subscription:
        return self.subscribe_many([(topic, key)], group=group, capacity=capacity)

    def subscribe_many(
        self,
        sources: list[tuple[str, str | None]],
        *,
        group: str,
        capacity: int = 1024,
        accept: Accept | None = None,
    ) -> Subscription:
        """One inbox fed by several ``(topic, key)`` sources, in publish order (no pump in between).

        ``accept``, if given, is asked about every message before delivery (in the publisher's task:
        keep it cheap); a refused message skips this inbox.
        """
        inbox = _MemorySubscription(self, capacity)
        for topic, key in sources:
            self._subscribers[topic].append((key, inbox, accept))
        return inbox

    async def aclose(self) -> None:
        for subs in self._subscribers.values():
            for _, inbox, _ in subs:
                inbox.end()
        self._subscribers.clear()

    # ---- quiescence
    def _delivering(self) -> None:
        self._in_flight += 1
        if self._idle.is_set():  # a new event: one bound to no loop yet, as the bus may outlive a loop
            self._idle = asyncio.Event()

    def _handled(self, count: int) -> None:
        self._in_flight -= count
        if self._in_flight <= 0:
            self._in_flight = 0
            self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def wait_idle(self) -> None:
        """Return once every delivered message has been acknowledged."""
        while self._in_flight:
            await self._idle.wait()
