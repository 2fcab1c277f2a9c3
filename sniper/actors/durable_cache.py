"""The cache actor of a partition hosted on Kafka: feed records with their offsets in, decisions out.

Owns :class:`Delivery` (one feed record on its way from the subscription to the cache or a dead letter)
and :class:`DurableCacheActor`. Invariants: records are handled in the order they are handed over; a
batch's decisions, dead letters and snapshot trigger go to the host at the cache's idle point (or every
``FLUSH_EVERY`` records), and only a time the cache accepted moves the partition's clock. Resets and
snapshots list the state in slices (the loop goes on; this actor, its only writer, waits for them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from sniper.actors.base import in_slices
from sniper.actors.cache import CacheActor
from sniper.actors.router import Router
from sniper.core.cache import iter_state_changes
from sniper.core.recovery import DurableCache, RefusedRecord
from sniper.core.slicing import collect_in_slices
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.transport.bus import VIEW

FLUSH_EVERY = 256  # feed records a busy cache handles before it publishes their decisions anyway


@dataclasses.dataclass(slots=True, eq=False)
class Delivery:
    """One feed record on its way from the Kafka subscription to a partition's cache (or a dead letter)."""

    event: f.Feed | None  # None: a bad record, dead-lettered instead
    offset: int
    kafka_partition: int
    key: str  # the scheduler partition the record names (its Kafka key for a bad record)
    value: bytes = b""  # the record's bytes as produced, for a dead letter (a bad record's letter has them)
    done: bool = False
    fetched: float = 0.0  # time.perf_counter() when the subscription handed it over (for the latency)


class PartitionHost(Protocol):
    """What the actor needs of the process hosting its partition (``sniper.cluster.process``)."""

    @property
    def core(self) -> DurableCache: ...

    @property
    def times_asks(self) -> bool: ...

    def ask_fetched(self, event: f.AskAdded, fetched: float) -> None: ...

    def follow(self, t: float) -> None: ...

    async def dead_letter_refused(self, refused: list[RefusedRecord], values: Mapping[int, bytes]) -> None: ...

    async def send_decisions(self, decisions: list[d.DecisionMsg], deliveries: list[Delivery]) -> None: ...

    def snapshot_due(self) -> bool: ...

    async def snapshot_soon(self) -> None: ...


class DurableCacheActor(CacheActor):
    """The cache actor of a hosted partition: feed records with their offsets in, decisions to Kafka."""

    def __init__(self, host: PartitionHost, router: Router, *, capacity: int = 1024) -> None:
        super().__init__(host.core, router, capacity=capacity)
        self.host = host
        self.busy = False  # between the first message of a batch and the end of its flush
        self._batch: list[Delivery] = []
        self._dirty = False

    async def handle(self, message: Any) -> None:
        self.busy = True
        if isinstance(message, Delivery):
            host = self.host
            core = host.core
            assert message.event is not None  # bad records are dead-lettered, never delivered
            if host.times_asks and isinstance(message.event, f.AskAdded):
                host.ask_fetched(message.event, message.fetched)
            core.feed_offset = message.offset
            core.handle_event(message.event)
            if core.feed_time is not None:  # only a time the core accepted moves the clock
                host.follow(core.feed_time)
            self._batch.append(message)
            self._dirty = True
            if len(self._batch) >= FLUSH_EVERY:
                await self.flush()
            return
        if isinstance(message, p.AllocationProposal | p.PreemptionProposal):
            self._dirty = True
        await super().handle(message)

    async def on_idle(self) -> None:
        await self.flush()
        self.busy = False

    async def flush(self) -> None:
        core = self.host.core
        out = core.drain()
        key = self.partition
        if out.view is not None:
            await self.router.publish(VIEW, key, out.view)
        if self._resets:  # one listing of the state, in slices, for every reader that asked
            reset = core.full_view(await in_slices(collect_in_slices(iter_state_changes(core.state))))
            for reader in self._resets:
                await self.router.publish(VIEW, key, msgspec.structs.replace(reset, to=reader))
            self._resets.clear()
        batch, self._batch = self._batch, []
        refused = core.take_refused()
        if refused:  # refused while handling this batch, which holds their bytes
            values = {delivery.offset: delivery.value for delivery in batch}
            await self.host.dead_letter_refused(refused, values)
        await self.host.send_decisions(out.decisions, batch)
        if self._dirty and self.host.snapshot_due():
            await self.host.snapshot_soon()
            self._dirty = False
