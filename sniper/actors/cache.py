"""The cache actor: the single writer of a partition's state, a thin shell around :class:`Cache`.

It takes feed events, proposals, resync requests and ticks, and when its inbox runs dry publishes
one view delta (strictly increasing ``seq``) and the decisions of everything it handled.
"""

from __future__ import annotations

from typing import Any

from sniper.actors.base import Actor
from sniper.actors.router import Router
from sniper.core.cache import Cache
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.transport.bus import DECISIONS, FEED, PROPOSALS, TICK, VIEW


class CacheActor(Actor):
    kind = "cache"

    def __init__(self, core: Cache, router: Router, *, capacity: int = 1024) -> None:
        inbox = router.inbox(
            [(FEED, core.partition), (PROPOSALS, core.partition), (TICK, None)], group="cache", capacity=capacity
        )
        super().__init__(core.partition, inbox)
        self.core = core
        self.router = router
        self._resets: list[str] = []

    async def handle(self, message: Any) -> None:
        core = self.core
        if isinstance(message, f.FeedEvent):
            core.handle_event(message)  # type: ignore[arg-type]
        elif isinstance(message, p.AllocationProposal | p.PreemptionProposal):
            core.handle_proposal(message)
        elif isinstance(message, p.Tick):
            core.tick(message.now)
        elif isinstance(message, p.ResyncRequest):
            self._resets.append(message.reader)
        else:
            self.log.warning("cache ignores unexpected %s", type(message).__name__)

    async def on_idle(self) -> None:
        out = self.core.drain()
        key = self.partition
        if out.view is not None:
            await self.router.publish(VIEW, key, out.view)
        for reader in self._resets:
            reset = self.core.full_view()
            await self.router.publish(VIEW, key, p.ViewDelta(**{**_fields(reset), "to": reader}))
        self._resets.clear()
        for decision in out.decisions:
            await self.router.publish(DECISIONS, key, decision)


def _fields(delta: p.ViewDelta) -> dict[str, Any]:
    return {name: getattr(delta, name) for name in delta.__struct_fields__}
