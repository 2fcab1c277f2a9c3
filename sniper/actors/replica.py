"""Actors that keep a view replica (the allocator and the policies): in-order deltas, resync on gaps.

On start, and whenever it sees a gap in view sequence numbers, the actor asks the cache for a reset
and ignores deltas until that reset (addressed to it) arrives; the reset holds everything before it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from sniper.actors.base import Actor, in_slices
from sniper.actors.router import Router
from sniper.core.replica import ViewReplica
from sniper.messages import protocol as p
from sniper.transport.bus import PROPOSALS, TICK, VIEW


class ReplicaActor(Actor):
    reader = "replica"

    def __init__(
        self,
        replica: ViewReplica,
        router: Router,
        *,
        capacity: int = 1024,
        accept: Callable[[Any], bool] | None = None,
    ) -> None:
        inbox = router.inbox(
            [(VIEW, replica.partition), (TICK, None)], group=self.reader, capacity=capacity, accept=accept
        )
        super().__init__(replica.partition, inbox)
        self.replica = replica
        self.router = router
        self.awaiting_reset = False
        self.now = 0.0

    async def on_start(self) -> None:
        await self.resync()

    async def resync(self) -> None:
        self.awaiting_reset = True
        request = p.ResyncRequest(partition=self.partition, reader=self.reader, after_seq=self.replica.view_seq)
        await self.router.publish(PROPOSALS, self.partition, request)

    async def handle(self, message: Any) -> None:
        if isinstance(message, p.ViewDelta):
            if message.to and message.to != self.reader:
                return
            if self.awaiting_reset and not message.reset:
                return  # everything before the reset is in the reset
            self.awaiting_reset = False
            if message.reset:
                await in_slices(self.replica.reset_in_slices(message))
            elif not self.replica.apply_view(message):
                self.log.warning(
                    "view gap after seq %d (got %d): asking for a reset", self.replica.view_seq, message.seq
                )
                await self.resync()
        elif isinstance(message, p.Tick):
            self.now = max(self.now, message.now)
            self.on_tick(message.now)
        else:
            await self.handle_other(message)

    @abc.abstractmethod
    def on_tick(self, now: float) -> None: ...

    async def handle_other(self, message: Any) -> None:
        """Messages other than view deltas and ticks (placement requests and replies)."""
