"""Split roles of ``sniper core`` (``--role cache|allocator|policy``): each actor kind in its own process.

A partition's cache, allocator and policies may live in different processes (architecture: Actors, Transports),
like YARN's capacity monitor running as a separate service. Kafka then carries the actor links the
memory bus carries inside one ``--role all`` process: view deltas, resets and the policies' placement
requests and the allocator's replies on the ``view`` topic; allocation and preemption proposals and
resync requests on the ``proposals`` topic. Ticks stay in each process (its own wall clock).

What it owns:

- :func:`core_process`, the process for a role: ``all`` is :class:`~sniper.cluster.process.CoreProcess`
  unchanged, ``cache`` a :class:`CacheProcess`, ``allocator`` and ``policy`` a :class:`ReplicaProcess`.
- **Cache role.** A :class:`~sniper.cluster.process.CoreProcess` (the feed group, recovery, snapshots, decisions
  as with ``--role all``) whose hosted partitions run only their cache actor. It publishes view deltas
  and resets (addressed ``to`` a reader, as always) on Kafka, and reads the partition's proposals with
  a consumer of its own in group ``<prefix><group>.cache.<partition>``: one member at a time (the
  partition's owner), so a new owner resumes after the proposals its predecessor handled (committed
  once their outcome was published) and none is lost in a failover. A partition starting in this
  process first publishes a reset to every reader (``to=""``): replicas that followed a previous
  owner, whose view sequence numbers may go back after a restore, start over from it.
- **Allocator and policy roles.** One consumer of the ``view`` topic per process, in group
  ``<prefix><group>.allocator`` (or ``.policy``). The Kafka partitions the group assigns decide which
  scheduler partitions the process hosts (scheduler partition ``P`` lives on Kafka partition
  ``bus.partition_for(P)``): a partition's replica actors start lazily on its first view message (a
  live cache publishes a delta every tick) and ask the cache for a reset at once, so where they start in
  the stream does not matter; they stop when the Kafka partition is revoked. The group starts a new
  member at the end of the topic (``auto_offset_reset="latest"``) for the same reason. Proposals,
  resync requests and placement requests/replies go to Kafka; what the consumer reads is handed to the
  partition's actors in memory. A replica still waiting for its reset after
  :data:`RESYNC_RETRY` seconds asks again (a request can be lost when its cache fails over).
- **Clocks.** A replica process ticks in the cache's time base: every view delta carries the cache's
  ``now``, and between deltas the local monotonic clock advances it; ticks never go backwards.

Limits: every cache partition's proposals consumer reads the whole ``proposals`` topic and skips the
other partitions' records (fine for tens of partitions per process); a view delta or reset larger than
``max_message_bytes`` is logged and dropped (its readers then keep asking for a reset); one hop
through the broker per link adds its latency to every decision that crosses it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import anyio
from anyio.abc import TaskStatus

from sniper.actors.allocator import AllocatorActor
from sniper.actors.base import Actor, ActorFactory, supervise
from sniper.actors.clock import TimeBase, clock_actor
from sniper.actors.durable_cache import DurableCacheActor
from sniper.actors.policy import PolicyActor
from sniper.actors.replica import ReplicaActor
from sniper.actors.router import Router
from sniper.cluster.member import GroupMember
from sniper.cluster.process import CoreOptions, CoreProcess, HostedPartition, _Runtime
from sniper.core.allocator import Allocator
from sniper.core.preemption.policies import REGISTRY
from sniper.core.recovery import DurableCache
from sniper.messages import protocol as p
from sniper.transport.bus import DECISIONS, PROPOSALS, VIEW, Bus, Subscription
from sniper.transport.kafka import KafkaBus, KafkaSettings, KafkaSubscription, MessageTooLarge
from sniper.transport.memory import MemoryBus

log = logging.getLogger("sniper.core")

REPLICA_ROLES = ("allocator", "policy")
RESYNC_RETRY = 10.0  # seconds a replica waits for its reset before it asks again


def core_process(settings: KafkaSettings, options: CoreOptions) -> CoreProcess | ReplicaProcess:
    """The ``sniper core`` process of ``options.role``."""
    if options.role == "cache":
        return CacheProcess(settings, options)
    if options.role in REPLICA_ROLES:
        return ReplicaProcess(settings, options)
    return CoreProcess(settings, options)


# ---------------------------------------------------------------------------------------------- cache role


class _KafkaLink(Bus):
    """A cache partition's links on Kafka: publishes as they are; subscribes in a group of its own per key."""

    def __init__(self, kafka: KafkaBus, group: str) -> None:
        self.kafka = kafka
        self.group = group

    async def publish(self, topic: str, key: str, message: Any) -> None:
        try:
            await self.kafka.publish(topic, key, message)
        except MessageTooLarge as err:  # never stop the cache (its decisions follow): readers ask again
            log.error("%s not published: %s", type(message).__name__, err, extra={"partition": key})

    def subscribe(self, topic: str, *, group: str, key: str | None = None, capacity: int = 1024) -> Subscription:
        return self.kafka.subscribe(topic, group=f"{self.group}.{group}.{key or '*'}", key=key, capacity=capacity)

    async def aclose(self) -> None:
        """Nothing to close: the process owns the Kafka bus."""


class _SplitCacheActor(DurableCacheActor):
    """The cache actor of a split cache: its first flush resets every reader of the view."""

    def __init__(self, host: HostedPartition, router: Router, *, capacity: int = 1024) -> None:
        super().__init__(host, router, capacity=capacity)
        self._resets.append("")  # to="": a reset for every reader


@dataclasses.dataclass(eq=False)
class _CacheRuntime(_Runtime):
    """A partition's runtime with the cache actor only."""

    def _factories(self) -> list[tuple[ActorFactory, bool]]:
        host = self.host
        assert host is not None

        def cache() -> Actor:
            return self._track(_SplitCacheActor(host, self.router))

        return [(cache, False)]


class _CacheHost(HostedPartition):
    """A hosted partition of a cache process: view out and proposals in on Kafka."""

    def __init__(self, process: CoreProcess, name: str, kafka_partition: int, core: DurableCache) -> None:
        super().__init__(process, name, kafka_partition, core)
        link = _KafkaLink(process.bus, process.group)
        self.router = Router(self.memory, {DECISIONS: process.bus, VIEW: link, PROPOSALS: link})
        self.runtime = _CacheRuntime(name, self.router, cache_core=core, batch=process.options.batch, host=self)


class CacheProcess(CoreProcess):
    """``--role cache``: a core process whose partitions run their cache actor only."""

    hosts_role = "cache"

    def _new_host(self, name: str, kafka_partition: int, core: DurableCache) -> HostedPartition:
        return _CacheHost(self, name, kafka_partition, core)


# ---------------------------------------------------------------------------------------------- replica roles


class _BridgeBus(MemoryBus):
    """A replica partition's bus: ``outbound`` topics are published on Kafka, the rest stay in memory.

    What the process's Kafka consumer reads for the partition comes in through :meth:`deliver`, so the
    actors subscribe as on the memory bus (view deltas and ticks in one ordered inbox).
    """

    def __init__(self, kafka: KafkaBus, outbound: frozenset[str]) -> None:
        super().__init__()
        self.kafka = kafka
        self.outbound = outbound

    async def publish(self, topic: str, key: str, message: Any) -> None:
        if topic in self.outbound:
            await self.kafka.publish(topic, key, message)
        else:
            await super().publish(topic, key, message)

    async def deliver(self, topic: str, key: str, message: Any) -> None:
        """Hand a record read from Kafka to the subscribers in this process."""
        await super().publish(topic, key, message)


class _ResyncRetry(ReplicaActor):
    """Asks for a reset again when the one it asked for has not come after :data:`RESYNC_RETRY` seconds."""

    _asked_at: float | None = None

    async def resync(self) -> None:
        self._asked_at = None  # the clock of the next tick
        await super().resync()

    async def handle(self, message: Any) -> None:
        if isinstance(message, p.Tick) and self.awaiting_reset:
            if self._asked_at is None:
                self._asked_at = message.now
            elif message.now - self._asked_at >= RESYNC_RETRY:
                self.log.warning("no reset after %.0fs: asking again", message.now - self._asked_at)
                await self.resync()
        await super().handle(message)


class _SplitAllocatorActor(_ResyncRetry, AllocatorActor):
    pass


class _SplitPolicyActor(_ResyncRetry, PolicyActor):
    """A policy actor that learns from its reset whether the config enables it (no cache to ask here)."""

    async def handle(self, message: Any) -> None:
        await super().handle(message)
        if (
            not self.active
            and isinstance(message, p.ViewDelta)
            and message.reset
            and message.to == self.reader
            and not self.awaiting_reset
        ):
            self.active = self.replica_of.current() is not None


class ReplicaHost:
    """One scheduler partition's replica actors (the allocator, or the policies) in a replica process."""

    def __init__(self, process: ReplicaProcess, name: str, kafka_partition: int) -> None:
        self.process = process
        self.name = name
        self.kafka_partition = kafka_partition
        self.memory = _BridgeBus(process.bus, frozenset({VIEW, PROPOSALS}))
        self.router = Router(self.memory)
        self.actors: list[Actor] = []
        self.scope = anyio.CancelScope()
        self.stopped = anyio.Event()
        self.failed: BaseException | None = None
        self._closed = False
        self.time = TimeBase()  # the cache's time as this process estimates it

    def observe(self, delta: p.ViewDelta) -> None:
        """A view delta passed: the cache's clock read ``delta.now`` about now."""
        self.time.anchor(delta.now)

    def now(self) -> float | None:
        """The cache's time as this process estimates it (None before the first view delta)."""
        return self.time.now()

    def _track(self, actor: Actor) -> Actor:
        self.actors = [a for a in self.actors if a.kind != actor.kind] + [actor]
        return actor

    def _factories(self) -> list[tuple[ActorFactory, bool]]:
        name, router = self.name, self.router
        if self.process.options.role == "allocator":
            batch = self.process.options.batch

            def allocator() -> Actor:
                return self._track(_SplitAllocatorActor(Allocator(name, batch=batch), router))

            return [(allocator, True)]
        out: list[tuple[ActorFactory, bool]] = []
        for policy in sorted(REGISTRY):

            def factory(policy: str = policy) -> Actor:
                return self._track(_SplitPolicyActor(name, router, policy))  # dormant until its reset

            out.append((factory, True))
        return out

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            with self.scope:
                async with anyio.create_task_group() as tg:
                    await tg.start(supervise, f"{self.process.options.role} {self.name}", self._factories())
                    tg.start_soon(clock_actor, self.memory, self.name, self.process.options.tick, self.time)
                    started = True
                    task_status.started()
        except Exception as err:  # its actors gave up: it starts again on the partition's next message
            self.failed = err
            log.exception("replicas of %s stopped on an error", self.name, extra={"partition": self.name})
            self.process._forget(self)
            with anyio.CancelScope(shield=True):
                await self.close()
            if not started:
                task_status.started()
        finally:
            self.stopped.set()

    async def stop(self) -> None:
        """Stop the actors (bounded by ``stop_timeout``); what they had not published yet is dropped."""
        self.scope.cancel()
        with anyio.move_on_after(self.process.options.stop_timeout):
            await self.stopped.wait()
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.memory.aclose()
        for actor in self.actors:
            await actor.inbox.aclose()


class ReplicaProcess(GroupMember[ReplicaHost]):
    """``--role allocator`` or ``--role policy``: hosts the replicas of the partitions its view group assigns."""

    topic = VIEW

    def __init__(self, settings: KafkaSettings, options: CoreOptions) -> None:
        if options.role not in REPLICA_ROLES:
            raise ValueError(f"a replica process runs role {' or '.join(REPLICA_ROLES)}, not {options.role!r}")
        # A new member starts at the end of the view: its replicas ask for a reset anyway.
        super().__init__(dataclasses.replace(settings, auto_offset_reset="latest"))
        self.options = options

    @property
    def group(self) -> str:
        """The consumer group on the view topic: the prefix, ``--group`` and the role."""
        return f"{self.settings.prefix}{self.options.group}.{self.options.role}"

    @property
    def log_actor(self) -> str:
        return self.options.role

    async def _dispatch(self, view: KafkaSubscription) -> None:
        while True:
            try:
                kp, _offset, message, _value = await view.receive_record()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            try:
                await self._deliver(kp, message)
            finally:
                view.ack()  # handed over: a lost message only costs a reset or an expired request

    async def _deliver(self, kp: int, message: p.ViewDelta | p.PlacementRequest | p.PlacementReply) -> None:
        name = message.partition
        if kp not in self.owned or self.bus.partition_for(name) != kp:
            return  # revoked meanwhile, or not a record this group places here
        host = self.hosts.get(name)
        if host is None:
            host = await self._start(name, kp)
            if host is None:
                return
        if isinstance(message, p.ViewDelta):
            host.observe(message)
        await host.memory.deliver(VIEW, name, message)

    async def _start(self, name: str, kp: int) -> ReplicaHost | None:
        tg = self._tg
        if tg is None:
            return None
        host = ReplicaHost(self, name, kp)
        self.hosts[name] = host  # before it runs: a failed start forgets it
        await tg.start(host.run)
        if self.hosts.get(name) is not host:
            return None  # it failed to start (logged)
        self._host(host)
        log.info("replicas of partition %s started", name, extra={"partition": name, "actor": self.options.role})
        return host


__all__ = ["RESYNC_RETRY", "CacheProcess", "ReplicaHost", "ReplicaProcess", "core_process"]
