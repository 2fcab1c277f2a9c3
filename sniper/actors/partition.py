"""One partition's actors wired together and supervised: the cache, the allocator and the policies.

The cache is not restartable in-process (its state is the partition: a crash stops the partition
cleanly and, on Kafka, another owner restores it from the snapshot); the allocator and the policies
are (they rebuild their replica from a reset view).
"""

from __future__ import annotations

import dataclasses

import anyio
from anyio.abc import TaskStatus

from sniper.actors.allocator import AllocatorActor
from sniper.actors.base import Actor, ActorFactory, supervise
from sniper.actors.cache import CacheActor
from sniper.actors.replica import ReplicaActor
from sniper.actors.router import Router
from sniper.core.allocator import DEFAULT_BATCH, Allocator
from sniper.core.cache import Cache
from sniper.core.config import PartitionConfig


@dataclasses.dataclass
class PartitionRuntime:
    partition: str
    router: Router
    config: PartitionConfig | None = None
    epoch: int = 0
    batch: int = DEFAULT_BATCH
    cache_core: Cache | None = None
    actors: list[Actor] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cache_core is None:
            self.cache_core = Cache(self.partition, self.config, epoch=self.epoch)

    def _factories(self) -> list[tuple[ActorFactory, bool]]:
        core = self.cache_core
        assert core is not None

        def cache() -> Actor:
            return self._track(CacheActor(core, self.router))

        def allocator() -> Actor:
            return self._track(AllocatorActor(Allocator(self.partition, batch=self.batch), self.router))

        factories: list[tuple[ActorFactory, bool]] = [(cache, False), (allocator, True)]
        from sniper.actors.policy import policy_factories  # preemption policies plug in here

        factories.extend(policy_factories(self.partition, self.router, lambda a: self._track(a), core))
        return factories

    def _track(self, actor: Actor) -> Actor:
        self.actors = [a for a in self.actors if a.kind != actor.kind] + [actor]
        return actor

    def dispose(self) -> None:
        """The partition stopped here for good: empty the cache's state and every replica's, so that
        reference counting frees them at once (:meth:`sniper.core.state.PartitionState.dispose`)."""
        if self.cache_core is not None:
            self.cache_core.state.dispose()
        for actor in self.actors:
            if isinstance(actor, ReplicaActor):
                actor.replica.state.dispose()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await supervise(f"partition {self.partition}", self._factories(), task_status=task_status)
