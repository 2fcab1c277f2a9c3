"""The bus interface every transport implements, and the topic names (architecture: Transports).

A bus carries msgspec messages on named topics. Messages published with the same key (the
scheduler partition) reach every subscriber group in publish order. Each group sees every message
once (at-least-once on Kafka); a subscriber acknowledges a message once handled, which lets the
memory bus tell when the system is quiescent and lets Kafka commit offsets.
"""

from __future__ import annotations

import abc
from typing import Any

FEED = "feed"
DECISIONS = "decisions"
PROPOSALS = "proposals"
VIEW = "view"
SNAPSHOTS = "snapshots"
DEADLETTER = "deadletter"
TOPICS = (FEED, DECISIONS, PROPOSALS, VIEW, SNAPSHOTS, DEADLETTER)
TICK = "tick"  # in-process only: each process's clock drives its own actors


class Subscription(abc.ABC):
    """One subscriber's ordered inbox on a topic (optionally restricted to one key)."""

    @abc.abstractmethod
    async def receive(self) -> Any:
        """The next message; raises ``anyio.EndOfStream`` once the bus is closed."""

    @abc.abstractmethod
    def receive_nowait(self) -> Any:
        """The next message if one is buffered; raises ``anyio.WouldBlock`` otherwise."""

    @abc.abstractmethod
    def ack(self) -> None:
        """The last received message has been handled."""

    @abc.abstractmethod
    def depth(self) -> int:
        """Messages buffered and not yet received (the inbox depth)."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...


class Bus(abc.ABC):
    @abc.abstractmethod
    async def publish(self, topic: str, key: str, message: Any) -> None:
        """Send ``message`` on ``topic`` keyed by ``key``; waits when a subscriber is full."""

    @abc.abstractmethod
    def subscribe(self, topic: str, *, group: str, key: str | None = None, capacity: int = 1024) -> Subscription:
        """A new subscription; ``key=None`` receives every key of the topic."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...
