"""The allocator actor: keeps a view replica and runs allocation cycles, a thin shell around
:class:`AllocatorCore`.

It runs a cycle as soon as its inbox runs dry after a change it can act on (a burst of deltas is
one cycle) and on every tick otherwise; each cycle's placements go to the cache as one proposal.
It also answers the policies' placement requests in preemption mode on the same replica.
"""

from __future__ import annotations

from typing import Any

from actors.base import Actor
from actors.router import Router
from core.allocator import AllocatorCore
from messages import protocol as p
from transport.bus import PROPOSALS, TICK, VIEW


class AllocatorActor(Actor):
    kind = "allocator"
    reader = "allocator"

    def __init__(self, core: AllocatorCore, router: Router, *, capacity: int = 1024) -> None:
        inbox = router.inbox([(VIEW, core.partition), (TICK, None)], group=self.reader, capacity=capacity)
        super().__init__(core.partition, inbox)
        self.core = core
        self.router = router
        self._tick_due = False
        self._awaiting_reset = False
        self._replies: list[p.PlacementReply] = []

    async def on_start(self) -> None:
        await self._resync()

    async def _resync(self) -> None:
        self._awaiting_reset = True
        await self.router.publish(
            PROPOSALS,
            self.partition,
            p.ResyncRequest(partition=self.partition, reader=self.reader, after_seq=self.core.view_seq),
        )

    async def handle(self, message: Any) -> None:
        if isinstance(message, p.ViewDelta):
            if message.to and message.to != self.reader:
                return
            if self._awaiting_reset and not message.reset:
                return  # everything before the reset is in the reset
            self._awaiting_reset = False
            if not self.core.apply_view(message):
                self.log.warning("view gap after seq %d (got %d): asking for a reset", self.core.view_seq, message.seq)
                await self._resync()
        elif isinstance(message, p.Tick):
            self._tick_due = True
        elif isinstance(message, p.PlacementRequest):
            from core.preemption.placement import answer_placement_request  # preemption plugs in here

            self._replies.append(answer_placement_request(self.core, message))
        elif isinstance(message, p.PlacementReply):
            return

    async def on_idle(self) -> None:
        for reply in self._replies:
            await self.router.publish(VIEW, self.partition, reply)
        self._replies.clear()
        if self._awaiting_reset or not (self.core.dirty or self._tick_due):
            return
        self._tick_due = False
        proposal = self.core.cycle()
        if proposal is not None:
            await self.router.publish(PROPOSALS, self.partition, proposal)
