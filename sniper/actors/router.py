"""Which bus carries which topic: in-process links stay on memory, what crosses processes on Kafka.

Invariant: a topic is always carried by exactly one bus within a process, so every publisher and
every subscriber of that topic in the process agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sniper.actors.base import MergedInbox
from sniper.transport.bus import Bus, Subscription
from sniper.transport.memory import MemoryBus


class Router:
    def __init__(self, default: Bus, overrides: Mapping[str, Bus] | None = None) -> None:
        self.default = default
        self.overrides = dict(overrides or {})

    def bus(self, topic: str) -> Bus:
        return self.overrides.get(topic, self.default)

    async def publish(self, topic: str, key: str, message: Any) -> None:
        await self.bus(topic).publish(topic, key, message)

    def inbox(
        self,
        topics: Sequence[tuple[str, str | None]],
        *,
        group: str,
        capacity: int = 1024,
        accept: Callable[[Any], bool] | None = None,
    ) -> Subscription:
        """One inbox over several ``(topic, key)`` sources (merged when there is more than one).

        ``accept`` is a hint: the memory bus does not deliver what it refuses, other buses deliver
        everything, so the actor must still ignore what it does not want.
        """
        bus = self.bus(topics[0][0])
        if isinstance(bus, MemoryBus) and all(self.bus(t) is bus for t, _ in topics):
            return bus.subscribe_many(list(topics), group=group, capacity=capacity, accept=accept)
        subs = [self.bus(t).subscribe(t, group=group, key=k, capacity=capacity) for t, k in topics]
        return subs[0] if len(subs) == 1 else MergedInbox(subs)
