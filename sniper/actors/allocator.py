"""The allocator actor: keeps a view replica and runs allocation cycles, a thin shell around
:class:`Allocator`.

It runs a cycle as soon as its inbox runs dry after a change it can act on (a burst of deltas is
one cycle) and on every tick otherwise; each cycle's placements go to the cache as one proposal.
It also answers the policies' placement requests in preemption mode on the same replica.
"""

from __future__ import annotations

import time
from typing import Any

from sniper.actors.replica import ReplicaActor
from sniper.actors.router import Router
from sniper.core.allocator import Allocator
from sniper.core.preemption.placement import answer_placement_request
from sniper.messages import protocol as p
from sniper.transport.bus import PROPOSALS, VIEW


class AllocatorActor(ReplicaActor):
    kind = "allocator"
    reader = "allocator"

    def __init__(self, core: Allocator, router: Router, *, capacity: int = 1024) -> None:
        super().__init__(core, router, capacity=capacity)
        self.core = core
        self._tick_due = False
        self._replies: list[p.PlacementReply] = []

    def on_tick(self, now: float) -> None:
        self._tick_due = True

    async def handle_other(self, message: Any) -> None:
        if isinstance(message, p.PlacementRequest) and not self.awaiting_reset:
            self._replies.append(answer_placement_request(self.core, message))

    async def on_idle(self) -> None:
        for reply in self._replies:
            await self.router.publish(VIEW, self.partition, reply)
        self._replies.clear()
        if self.awaiting_reset or not (self.core.dirty or self._tick_due):
            return
        self._tick_due = False
        began = time.perf_counter()
        proposal = self.core.cycle()
        self.timed("allocation_cycle", began)
        if proposal is not None:
            await self.router.publish(PROPOSALS, self.partition, proposal)
