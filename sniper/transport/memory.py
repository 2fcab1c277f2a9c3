"""The memory transport: anyio memory object streams inside one process.

It counts messages delivered but not yet acknowledged, so a virtual-time driver can wait until
every actor has handled everything (:meth:`MemoryBus.wait_idle`) before advancing the clock. A
subscriber may pass an ``accept`` filter: messages it refuses are never delivered to it (nor counted),
so a subscriber that would ignore most messages is not woken for them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from sniper.transport.bus import Bus, Subscription

Accept = Callable[[Any], bool]
_Entry = tuple[str | None, MemoryObjectSendStream[Any], Accept | None]  # wanted key, stream, filter


class _MemorySubscription(Subscription):
    def __init__(self, bus: MemoryBus, receive: MemoryObjectReceiveStream[Any]) -> None:
        self._bus = bus
        self._receive = receive
        self._unacked = 0

    async def receive(self) -> Any:
        message = await self._receive.receive()
        self._unacked += 1
        return message

    def receive_nowait(self) -> Any:
        message = self._receive.receive_nowait()
        self._unacked += 1
        return message

    def ack(self) -> None:
        if self._unacked:
            self._unacked -= 1
            self._bus._handled(1)

    def depth(self) -> int:
        return self._receive.statistics().current_buffer_used

    async def aclose(self) -> None:
        # Whatever is still buffered or unacknowledged will never be handled.
        dropped = self.depth() + self._unacked
        self._unacked = 0
        await self._receive.aclose()
        self._bus._handled(dropped)


class MemoryBus(Bus):
    def __init__(self) -> None:
        self._subscribers: dict[str, list[_Entry]] = defaultdict(list)
        self._receivers: list[MemoryObjectReceiveStream[Any]] = []
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()
        self.published = 0

    async def publish(self, topic: str, key: str, message: Any) -> None:
        self.published += 1
        for entry in list(self._subscribers[topic]):
            wanted, send, accept = entry
            if (wanted is not None and wanted != key) or (accept is not None and not accept(message)):
                continue
            self._delivering()
            try:
                try:
                    send.send_nowait(message)  # room in the buffer: no scheduler round trip
                except anyio.WouldBlock:
                    await send.send(message)  # full: wait (backpressure)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._handled(1)
                self._unsubscribe(topic, entry)
                send.close()  # its subscriber is gone for good

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
        send, receive = anyio.create_memory_object_stream[Any](capacity)
        for topic, key in sources:
            self._subscribers[topic].append((key, send, accept))
        self._receivers.append(receive)
        return _MemorySubscription(self, receive)

    async def aclose(self) -> None:
        for subs in self._subscribers.values():
            for _, send, _ in subs:
                await send.aclose()
        self._subscribers.clear()
        for receive in self._receivers:  # receivers already woke with EndOfStream; release the streams
            receive.close()
        self._receivers.clear()

    # ---- quiescence
    def _delivering(self) -> None:
        self._in_flight += 1
        if self._idle.is_set():
            self._idle = anyio.Event()

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
