"""One scheduler-core process on Kafka (``sniper core``): which partitions it hosts, and their recovery.

What it owns:

- **Ownership.** The process joins consumer group ``group`` on the ``feed`` topic; the Kafka partitions
  the group assigns to it decide which scheduler partitions it hosts (scheduler partition ``P`` lives
  on Kafka partition ``bus.partition_for(P)`` of every topic). A hosted partition is started lazily on
  its first feed record, or at assignment when the ``snapshots`` topic (or ``--queues``) names it; it is
  stopped, bounded in time, when its Kafka partition is revoked (a rebalance that keeps the Kafka
  partition here leaves it running: :mod:`sniper.cluster.member`).
- **The links.** Feed records are read once per process (one group member) and handed to the
  partition's cache in-process; decisions and snapshots go to Kafka. With ``role="all"`` the view,
  proposal and tick links stay on a per-partition :class:`~sniper.transport.memory.MemoryBus`; the split
  roles (``cache``, ``allocator``, ``policy``) are built on this in :mod:`sniper.cluster.roles`.
- **Recovery** (architecture: Transports). Starting a partition loads its last snapshot, reads the feed
  records after the snapshot's ``feed_offset`` and the decisions logged after its ``decision_seq`` (from
  the snapshot's ``decisions_offset`` on: no decision after it lies before), and
  replays them (:func:`sniper.core.recovery.replay`): nothing committed is decided again, lost or doubled. It
  then runs with ``epoch`` = the highest epoch seen + 1 and publishes a snapshot at once.
- **Commit points.** A feed record's offset is acknowledged (and so committed by the subscription)
  only after the cache handled it and the broker acknowledged the decisions it caused; records are
  acknowledged in fetch order. The cache hands decisions to the producer and goes on without waiting
  for the broker (the producer batches what comes meanwhile); decisions the broker never acknowledges
  stop the partition (:class:`DecisionsLost`), which is then restored from the log; so do decisions
  too large for a record (none of their batch is sent, so the log never has a gap in ``seq``; a
  restore that decides them again fails, and the health check says so). Recovery never
  depends on the committed offset: it re-reads the feed from the snapshot's own ``feed_offset``, so
  records committed but not yet in a snapshot are replayed (a stopped partition's records are
  acknowledged at once for this reason).
- **Snapshots** are taken at an idle point of the cache (everything it decided handed to the producer)
  at most every ``snapshot_interval`` seconds or every ``snapshot_every`` decisions (a random point
  from half of them on, so that partitions do not all snapshot together), if anything changed, and
  published once the broker acknowledged those decisions. The decision count is at least the state's
  size (its allocations, apps and nodes): a snapshot costs time in proportion to the state, so a busy
  large partition would otherwise spend most of its time snapshotting; this way snapshots cost O(1)
  per decision and a recovery replays at most about as many decisions as the snapshot holds records.
  A snapshot over half the broker's record size goes out in chunks (:func:`sniper.messages.snapshot.split`),
  all acknowledged together, on the partition's own Kafka partition.
- **Bad input** never stops a partition or the process, and each bad record is dead-lettered once, by
  the owner of its Kafka partition: the subscription hands over records that are too large, undecodable
  or refused by :func:`~sniper.core.recovery.feed_problem` (checked at the edge, on the record alone)
  and this process writes their dead letter; recovery skips them too, and writes the dead letters the
  previous owner had not written yet (it reads which it did). A record whose partition does not hash to
  the Kafka partition it came on, or that would start a partition beyond ``max_partitions``, is
  dead-lettered with the reason (a hosted partition that holds nothing, retired or never configured,
  is stopped first to make room: only partitions holding something count). Events the state refuses
  become ``rejected`` decisions in the cache; those it refuses for their time (too far ahead of the
  partition's clock) are dead-lettered too, by whoever judged them (the owner live, a new owner in
  replay), once, and move no clock. Every dead letter carries the record's value as its producer wrote
  it (JSON or msgpack, never re-encoded): the subscription hands each record's bytes over with it
  (:class:`Delivery` ``value``), and they go with the record once it is acknowledged.
- **Starting without blocking**: a partition's first record starts it in the background (at most
  ``STARTS_AT_ONCE`` at a time); its records wait for it in order while the other partitions go on.
- **Lease**: decisions, snapshots and dead letters are published only while the group membership is
  known current (:meth:`~sniper.transport.kafka.KafkaSubscription.leased`, checked before each batch, and
  dead letters only while their Kafka partition is still owned): a process paused past its session
  publishes nothing under its old epoch once it resumes, and its successor writes the dead letters it
  had not.
- **A lost log stops the process** (:class:`~sniper.transport.kafka.LogLost` out of :meth:`run`;
  ``sniper core`` exits 3): the hosted states were built from records and offsets the broker no longer
  has, and the decisions topic (the commit log) is gone with them, so no state here can be reconciled
  with the new log. A restarted process starts from what the broker still holds, as any new owner does.

The wall clock is read here (ticks, snapshot timers), never in ``sniper.core``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from sniper.actors.base import Actor, ActorFactory, in_slices
from sniper.actors.clock import TimeBase, clock_actor
from sniper.actors.durable_cache import Delivery, DurableCacheActor
from sniper.actors.partition import PartitionRuntime
from sniper.actors.router import Router
from sniper.cluster.audit import audit
from sniper.cluster.logread import read_partition
from sniper.cluster.member import GroupMember
from sniper.core.allocator import DEFAULT_BATCH
from sniper.core.config import PartitionConfig, SchedulerConfig
from sniper.core.recovery import (
    DurableCache,
    RefusedRecord,
    feed_problem,
    replay_in_slices,
    restore_in_slices,
    snapshot_in_slices,
    stamp,
)
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.deadletter import DeadLetter
from sniper.messages.snapshot import Snapshot, SnapshotError, chunk_key, is_chunk_key, latest, split
from sniper.transport.bus import DEADLETTER, DECISIONS, FEED, SNAPSHOTS
from sniper.transport.kafka import BadRecords, KafkaSettings, KafkaSubscription, KafkaTransportError, MessageTooLarge
from sniper.transport.memory import MemoryBus

if TYPE_CHECKING:
    from sniper.cluster.timings import CoreHistograms

log = logging.getLogger("sniper.core")
RECENT_PREEMPTIONS = 50  # the last preemption decisions a partition keeps for the state endpoint
ASKS_TIMED = 100_000  # asks waiting for their first decision whose latency is measured

ROLES = ("all", "cache", "allocator", "policy")
STARTS_AT_ONCE = 4  # partitions restored concurrently (each reads three topics), so others keep the loop


@dataclasses.dataclass(frozen=True, slots=True)
class LogRead:
    """What a restore read of a partition's decisions log: the decisions after its snapshot, in seq
    order, the highest epoch consumers accept, and an offset every decision read lies before."""

    decisions: list[d.DecisionMsg]
    epoch: int
    end: int


def _end_offset(sent: list[asyncio.Future[dict[int, int]]]) -> int:
    """One past the highest Kafka offset among acknowledged hand-overs (:meth:`KafkaBus.send_many`)."""
    return max((end for future in sent for end in future.result().values()), default=-1)


class DecisionsLost(RuntimeError):
    """The broker did not acknowledge decisions the cache committed: the partition must be restored."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CoreOptions:
    group: str = "sniper-core"
    role: str = "all"
    config: SchedulerConfig | None = None  # --queues: partitions known up front
    tick: float = 0.5  # seconds between ticks
    snapshot_interval: float = 5.0
    snapshot_every: int = 1_000
    stop_timeout: float = 5.0  # bound on stopping one partition at revocation
    recovery_timeout: float = 60.0
    batch: int = DEFAULT_BATCH
    capacity: int = 1_024
    member: str = ""  # a name for the logs
    max_partitions: int = 256  # scheduler partitions one process hosts; records of more are dead-lettered

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {self.role!r}")
        if self.tick <= 0 or self.snapshot_interval <= 0 or self.snapshot_every < 1:
            raise ValueError("tick and snapshot_interval must be positive, snapshot_every at least 1")
        if self.max_partitions < 1:
            raise ValueError("max_partitions must be at least 1")


@dataclasses.dataclass(eq=False)
class _Runtime(PartitionRuntime):
    host: HostedPartition | None = None

    def _track(self, actor: Actor) -> Actor:
        histograms = self.host.process.histograms if self.host is not None else None
        if histograms is not None:
            actor.timer = histograms.timer(self.partition)
        return super()._track(actor)

    def _factories(self) -> list[tuple[ActorFactory, bool]]:
        factories = super()._factories()
        host = self.host
        assert host is not None

        def cache() -> Actor:
            return self._track(DurableCacheActor(host, self.router))

        factories[0] = (cache, False)
        return factories


class HostedPartition:
    """One scheduler partition this process owns: its durable cache, actors, memory bus and clock."""

    def __init__(self, process: CoreProcess, name: str, kafka_partition: int, core: DurableCache) -> None:
        self.process = process
        self.name = name
        self.kafka_partition = kafka_partition
        self.core = core
        self.memory = MemoryBus()
        self.router = Router(self.memory, {DECISIONS: process.bus})
        self.runtime = _Runtime(name, self.router, cache_core=core, batch=process.options.batch, host=self)
        self.applied_offset = core.feed_offset  # feed records up to here are in the core already
        self.counters = process.counters_for(name)
        self.scope = anyio.CancelScope()
        self.stopped = anyio.Event()
        self.failed: BaseException | None = None
        self._closed = False
        self._last_snapshot = time.monotonic()
        self._decisions_since_snapshot = 0
        self._next_snapshot = self._snapshot_point()
        self._snapshotting = False  # a snapshot taken waits for its decisions to be acknowledged
        self._snapshots_failing = 0  # snapshots not published since the last one that was
        self._serial = 0  # snapshots published in this epoch (their chunks' keys alternate on its parity)
        # Where the decisions log stands: every decision of this partition acknowledged so far lies before
        # offset ``log_end`` of its Kafka partition, and ``log_epoch`` is the highest epoch among them.
        self.log_end = -1
        self.log_epoch = 0
        self._unconfirmed: set[asyncio.Future[Any]] = set()  # decisions handed over, not yet acknowledged
        self.send_error: BaseException | None = None
        self._send_failed = anyio.Event()
        self._tg: TaskGroup | None = None
        # The partition's clock goes on from its restored time; a partition that has accepted no feed
        # event yet has no clock (no ticks) until its first event sets it.
        self.time = TimeBase(core.state.now if core.feed_time is not None else None)
        self.recent_preemptions: deque[d.Preempt] = deque(maxlen=RECENT_PREEMPTIONS)
        self.asked: dict[tuple[str, str], float] = {}  # (app, ask) -> when its ask_added was fetched

    @property
    def actors(self) -> list[Actor]:
        return self.runtime.actors

    @property
    def cache_actor(self) -> DurableCacheActor | None:
        for actor in self.actors:
            if isinstance(actor, DurableCacheActor):
                return actor
        return None

    def holds_nothing(self) -> bool:
        """The partition has no configuration, node or app (retired by ``partition_removed``, or never
        configured) and no work under way: stopping it loses nothing."""
        state = self.core.state
        actor = self.cache_actor
        idle = actor is None or not actor.busy
        return state.config is None and not state.nodes and not state.apps and idle and not self._unconfirmed

    @property
    def times_asks(self) -> bool:
        """Whether the feed-to-decision latency is measured (a metrics endpoint is up)."""
        return self.process.histograms is not None

    async def dead_letter_refused(self, refused: list[RefusedRecord], values: Mapping[int, bytes]) -> None:
        """Dead-letter the records this partition refused for their time (``values``: their bytes by offset)."""
        await self.process.dead_letter_refused(self.kafka_partition, self.name, refused, values)

    def ask_fetched(self, event: f.AskAdded, fetched: float) -> None:
        """Remember when an ask came in, for the feed-to-decision latency (the oldest go past a bound)."""
        asked = self.asked
        asked[(event.app, event.ask)] = fetched
        if len(asked) > ASKS_TIMED:
            del asked[next(iter(asked))]

    def follow(self, t: float) -> None:
        """A feed event stamped ``t`` ahead of the clock moves the clock there: the partition keeps the
        feed's time base (a feed replayed ten times faster runs grace periods ten times faster too); the
        first one starts the clock."""
        now = self.time.now()
        if now is None or t > now:
            self.time.anchor(t)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            with self.scope:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    await tg.start(self.runtime.run)
                    tg.start_soon(clock_actor, self.memory, self.name, self.process.options.tick, self.time)
                    tg.start_soon(self._stop_on_lost_decisions)
                    task_status.started()
                    started = True
        except Exception as err:  # the partition's cache crashed or lost decisions: it is restored
            self.failed = err
            self.process.failing[self.name] = f"stopped on an error: {err!r}"[:1000]
            log.exception(
                "ALERT partition %s stopped on an error; restoring it", self.name, extra={"partition": self.name}
            )
            self.process._lost(self)
            with anyio.CancelScope(shield=True):
                await self.close_inboxes()
            self.runtime.dispose()  # restored from the log, never from these states: freed now
            if not started:  # a second call would raise into the process's task group
                task_status.started()
        finally:
            self.stopped.set()

    async def _stop_on_lost_decisions(self) -> None:
        await self._send_failed.wait()
        raise DecisionsLost(f"decisions of partition {self.name} were not published") from self.send_error

    # ---- output
    async def publish_decisions(self, decisions: list[d.DecisionMsg]) -> None:
        """Publish ``decisions`` and wait until the broker acknowledged them."""
        sent = await self._hand_over(decisions)
        if sent is not None:
            await sent

    async def send_decisions(self, decisions: list[d.DecisionMsg], deliveries: list[Delivery]) -> None:
        """Hand ``decisions`` to the producer without waiting for the broker; the cache goes on meanwhile.

        ``deliveries``, the feed records handled before these decisions, are done (and acknowledged, in
        fetch order) once the broker acknowledged the decisions. If it never does, the partition stops
        (:class:`DecisionsLost`) and is restored from the log, which publishes the decisions it lacks.
        """
        sent = await self._hand_over(decisions)
        if sent is None:
            for delivery in deliveries:
                delivery.done = True
            self.process.advance_acks()
            return
        self._unconfirmed.add(sent)
        sent.add_done_callback(functools.partial(self._acknowledged, deliveries))

    def _logged(self, sent: asyncio.Future[Any]) -> None:
        """Decisions the broker acknowledged move :attr:`log_end` past them."""
        if not sent.cancelled() and sent.exception() is None:
            self.log_end = max(self.log_end, _end_offset([sent]))
            self.log_epoch = max(self.log_epoch, self.core.epoch)

    def _acknowledged(self, deliveries: list[Delivery], sent: asyncio.Future[Any]) -> None:
        self._unconfirmed.discard(sent)
        error = asyncio.CancelledError() if sent.cancelled() else sent.exception()
        if error is not None:
            if self.send_error is None:
                self.send_error = error
                log.error("publishing decisions failed: %r", error, extra={"partition": self.name})
            self._send_failed.set()
            return
        for delivery in deliveries:
            delivery.done = True
        self.process.advance_acks()

    async def _hand_over(self, decisions: list[d.DecisionMsg]) -> asyncio.Future[Any] | None:
        if not decisions:
            return None
        await self.process.leased(self.kafka_partition)  # a deposed owner waits here until it is stopped
        if self.send_error is not None:  # decisions before these are lost: none after them may be logged
            raise DecisionsLost(f"decisions of partition {self.name} were not published") from self.send_error
        sent: asyncio.Future[Any] | None
        try:
            sent = await self.process.bus.send_many(DECISIONS, [(self.name, x) for x in decisions])
        except MessageTooLarge as err:  # none of them was handed over: lost like those the broker refuses
            self.counters.decisions_unpublishable += 1
            log.error(
                "ALERT a decision cannot be published, the partition stops (%s)", err, extra={"partition": self.name}
            )
            self.send_error = err
            self._send_failed.set()
            sent = asyncio.get_running_loop().create_future()
            sent.set_exception(err)
        if sent is not None:
            sent.add_done_callback(self._logged)  # first: it runs before anyone waiting for ``sent`` wakes
        asked = self.asked
        histograms = self.process.histograms
        if asked and histograms is not None:
            child = histograms.feed_to_decision.labels(self.name)
            now = time.perf_counter()
            for x in decisions:
                if isinstance(x, d.Allocated | d.Rejected):
                    fetched = asked.pop((x.app, x.ask), None)
                    if fetched is not None:
                        child.observe(now - fetched)
        c = self.counters
        audit(self.name, decisions, c.preempted)
        c.decisions += len(decisions)
        self._decisions_since_snapshot += len(decisions)
        for x in decisions:
            if isinstance(x, d.Allocated):
                c.allocations += 1
            elif isinstance(x, d.Preempt) and not x.observe_only:
                c.preemptions += 1
                self.recent_preemptions.append(x)
            elif isinstance(x, d.PreemptCancelled):
                c.preemptions_cancelled += 1
            elif isinstance(x, d.Rejected):
                c.rejected += 1
            elif isinstance(x, d.Kill):
                c.kills += 1
            elif isinstance(x, d.AllocationLost):
                c.lost += 1
        return sent

    def confirmed(self) -> bool:
        """Every decision handed to the producer so far was acknowledged by the broker."""
        return self.send_error is None and all(
            f.done() and not f.cancelled() and f.exception() is None for f in self._unconfirmed
        )

    def _snapshot_point(self) -> tuple[int, float]:
        """After how many decisions or seconds the next snapshot is due.

        A random point between half and all of ``snapshot_every`` and ``snapshot_interval``: partitions
        fed alike would otherwise all come due together and stall the event loop with back-to-back
        snapshots.
        """
        options = self.process.options
        state = self.core.state
        every = max(options.snapshot_every, len(state.allocations) + len(state.apps) + len(state.nodes))
        spread = random.uniform(0.5, 1.0)
        return max(1, int(every * spread)), options.snapshot_interval * spread

    def snapshot_due(self) -> bool:
        every, interval = self._next_snapshot
        return not self._snapshotting and (
            self._decisions_since_snapshot >= every or time.monotonic() - self._last_snapshot >= interval
        )

    async def snapshot_soon(self) -> None:
        """Take a snapshot now (in slices) and publish it once the broker acknowledged every decision
        before it.

        Call it only at an idle point of the cache (every decision handed to the producer), from the
        cache actor (which handles nothing until the snapshot is taken); the cache goes on while it is
        published.
        """
        tg = self._tg
        if tg is None:
            return
        self._decisions_since_snapshot = 0
        self._last_snapshot = time.monotonic()
        self._next_snapshot = self._snapshot_point()
        snapshot = await self._take_snapshot()
        if snapshot is None:
            return
        self._snapshotting = True
        tg.start_soon(self._publish_when_confirmed, snapshot, list(self._unconfirmed))

    async def _publish_when_confirmed(self, snapshot: Snapshot, before: list[asyncio.Future[Any]]) -> None:
        try:
            if before:
                await asyncio.wait(before)
            if any(f.cancelled() or f.exception() is not None for f in before):
                return  # those decisions are lost: the partition stops, the snapshot must not claim them
            if before:  # the decisions it covers are in the log now, and no later one lies before them
                end = max(snapshot.decisions_offset, _end_offset(before))
                snapshot = msgspec.structs.replace(snapshot, decisions_offset=end, decisions_epoch=self.core.epoch)
            await self._publish(snapshot)
        except Exception as err:  # a missed snapshot only makes the next recovery replay more
            self._snapshot_failed(err)
        finally:
            self._snapshotting = False

    async def publish_snapshot(self) -> None:
        """Publish the core's state now (call only at an idle point: every decision published)."""
        self._decisions_since_snapshot = 0
        self._next_snapshot = self._snapshot_point()
        snapshot = await self._take_snapshot()
        if snapshot is not None:
            await self._publish(snapshot)

    async def _take_snapshot(self) -> Snapshot | None:
        """The core's state (listed in slices: no writer touches it meanwhile), with where a restore from it
        starts reading the decisions log (None, counted and alerted, when the state cannot be encoded)."""
        try:
            snapshot = await in_slices(
                snapshot_in_slices(self.core, kafka_partition=self.kafka_partition, wall_time=time.time())
            )
        except (TypeError, ValueError, OverflowError) as err:  # what msgspec raises on a value it cannot encode
            self._snapshot_failed(err)
            return None
        return msgspec.structs.replace(snapshot, decisions_offset=self.log_end, decisions_epoch=self.log_epoch)

    def _snapshot_failed(self, err: BaseException) -> None:
        """A snapshot was not published: count it, alert once per streak, and fail the health check
        until one is (a successor would restore from an older snapshot, replaying ever more)."""
        self.counters.snapshots_failed += 1
        self._snapshots_failing += 1
        if self._snapshots_failing == 1:
            log.error(
                "ALERT snapshot not published (recovery replays from the previous one): %r",
                err,
                extra={"partition": self.name},
            )
        else:
            log.debug("snapshot not published again: %r", err, extra={"partition": self.name})
        why = f"snapshots fail ({self._snapshots_failing} in a row): {err!r}"
        self.process.failing[self.name] = why[:1000]

    def _snapshot_published(self) -> None:
        self._last_snapshot = time.monotonic()
        self.counters.snapshots += 1
        if self._snapshots_failing:
            self._snapshots_failing = 0
            self.process.failing.pop(self.name, None)
            log.info("snapshots are published again", extra={"partition": self.name})

    async def _publish(self, snapshot: Snapshot) -> None:
        if self.send_error is not None:
            return  # the state holds decisions the log lacks: the restore must not start from it
        self._serial += 1
        bus = self.process.bus
        header, chunks = split(
            msgspec.structs.replace(snapshot, serial=self._serial), bus.settings.max_message_bytes // 2
        )
        records: list[tuple[str, Any]] = [(chunk_key(self.name, c.serial, c.index), c) for c in chunks]
        try:
            await self.process.leased(self.kafka_partition)
            await bus.publish_many(SNAPSHOTS, [*records, (self.name, header)], partition=self.kafka_partition)
        except KafkaTransportError as err:  # the log is lost: this process is on its way out
            log.warning("snapshot not published: %s", err, extra={"partition": self.name})
            return
        except MessageTooLarge as err:
            self._snapshot_failed(err)
            return
        self._snapshot_published()

    async def stop(self, *, final_snapshot: bool = True) -> None:
        """Stop the actors (bounded by ``stop_timeout``) and, at a clean idle point, publish a snapshot."""
        limit = self.process.options.stop_timeout
        moved = self.kafka_partition in self.process.moved  # its output may not reach the log any more
        if not self.stopped.is_set() and not moved:
            with anyio.move_on_after(limit / 2):
                await self.memory.wait_idle()
        self.scope.cancel()
        with anyio.move_on_after(limit / 2):
            await self.stopped.wait()
        # Records handed to the producer before the cancellation must be in the log before the next
        # owner reads it (it would decide them again otherwise).
        with anyio.move_on_after(limit):
            await self.process.bus.flush()
        actor = self.cache_actor
        clean = actor is not None and not actor.busy and not self.core.has_output() and self.confirmed()
        if final_snapshot and self.failed is None and clean and not moved:
            with anyio.move_on_after(limit / 2):
                await self.publish_snapshot()
        await self.close_inboxes()
        self.runtime.dispose()  # its states are freed now, without a full collection

    async def close_inboxes(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.memory.aclose()
        for actor in self.runtime.actors:
            await actor.inbox.aclose()


class CoreProcess(GroupMember[HostedPartition]):
    """A scheduler-core group member on the feed, hosting the partitions its Kafka partitions carry."""

    topic = FEED
    bad_records: ClassVar[BadRecords] = "deliver"  # this process writes the dead letters of its feed records (once)
    hosts_role: ClassVar[str] = "all"  # the role this class runs (cluster.roles.core_process picks the class)

    def __init__(self, settings: KafkaSettings, options: CoreOptions | None = None) -> None:
        super().__init__(settings, validators={FEED: feed_problem})
        self.options = options or CoreOptions()
        if self.options.role != self.hosts_role:
            raise ValueError(f"role {self.options.role!r} runs in the process cluster.roles.core_process builds")
        self._starting: dict[str, anyio.Event] = {}
        self._start_slots = anyio.Semaphore(STARTS_AT_ONCE)
        self._waiting: dict[str, deque[Delivery]] = {}  # records of partitions being started, in order
        self._lettered: dict[int, set[int]] = {}  # per owned Kafka partition: feed offsets dead-lettered
        self._lettered_lock = anyio.Lock()
        self._inflight: deque[Delivery] = deque()
        self._configured: dict[str, PartitionConfig] = {
            part.name: part for part in (self.options.config.partitions if self.options.config else ())
        }
        self.histograms: CoreHistograms | None = None  # set by the metrics endpoint, if any

    @property
    def group(self) -> str:
        """The consumer group id: the topic prefix plus ``--group`` (clusters sharing a broker stay apart)."""
        return self.settings.prefix + self.options.group

    @property
    def log_actor(self) -> str:
        return "core"

    # ---- the group's decisions
    async def on_assigned(self, partitions: frozenset[int]) -> None:
        await super().on_assigned(partitions)
        tg = self._tg
        if tg is not None and partitions:
            try:
                tg.start_soon(self._discover, partitions)
            except RuntimeError:  # shutting down: the task group no longer takes tasks
                log.debug("assignment during shutdown ignored")

    async def on_revoked(self, partitions: frozenset[int]) -> None:
        await super().on_revoked(partitions)
        for kp in partitions:
            self._lettered.pop(kp, None)  # the next owner writes them
        for delivery in self._inflight:
            if delivery.kafka_partition in partitions:
                delivery.done = True  # the new owner reads it again
        self.advance_acks()

    async def _discover(self, partitions: frozenset[int]) -> None:
        """Start the partitions known to live on newly assigned Kafka partitions (snapshots, --queues)."""
        names: dict[str, int] = {}
        for name in self._configured:
            kp = self.bus.partition_for(name)
            if kp in partitions:
                names[name] = kp
        for kp in sorted(partitions):
            try:
                records = await read_partition(self.settings, SNAPSHOTS, kp)
            except Exception as err:
                log.warning("cannot read snapshots of Kafka partition %d: %r", kp, err)
                continue
            for record in records:
                key = (record.key or b"").decode(errors="replace")
                if key and not is_chunk_key(key):
                    names.setdefault(key, kp)
        for name, kp in sorted(names.items()):
            if kp in self.owned and self.bus.partition_for(name) == kp:
                if not self._room_for(name):
                    log.warning("partition %s not started: this process hosts its maximum already", name)
                    continue
                await self.ensure(name, kp)

    # ---- feed dispatch
    async def _dispatch(self, feed: KafkaSubscription) -> None:
        while True:
            try:
                kp, offset, event, value = await feed.receive_record()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            if isinstance(event, DeadLetter):
                delivery = Delivery(None, offset, kp, key=event.key)
                self._inflight.append(delivery)
                await self._bad_record(delivery, event)
                continue
            delivery = Delivery(event, offset, kp, key=event.partition, value=value or b"", fetched=time.perf_counter())
            self._inflight.append(delivery)
            try:
                await self._deliver(delivery, event)
            finally:
                self.advance_acks()

    async def _deliver(self, delivery: Delivery, event: f.Feed) -> None:
        kp = delivery.kafka_partition
        name = event.partition
        if self.bus.partition_for(name) != kp:
            reason = f"partition {name!r} belongs on Kafka partition {self.bus.partition_for(name)}, not {kp}"
            self._dead_letter(delivery, reason)
            return
        if kp not in self.owned:
            delivery.done = True
            return
        waiting = self._waiting.get(name)
        if waiting is not None:  # the partition is starting: its records keep their order behind it
            waiting.append(delivery)
            return
        host = self.hosts.get(name)
        if host is not None:
            await self._hand(host, delivery)
            return
        if not self._room_for(name) and not await self._make_room():
            reason = (
                f"partition {name!r} not started: this process hosts its maximum of "
                f"{self.options.max_partitions} partitions (--max-partitions)"
            )
            self._dead_letter(delivery, reason)
            return
        assert self._tg is not None
        self._waiting[name] = deque([delivery])
        self._tg.start_soon(self._start_then_deliver, name, kp)

    def _room_for(self, name: str) -> bool:
        """``name`` runs or starts here already, or one more partition stays within ``max_partitions``."""
        known = self.hosts.keys() | self._waiting.keys() | self._starting.keys()
        return name in known or len(known) < self.options.max_partitions

    async def _make_room(self) -> bool:
        """Stop one hosted partition that holds nothing (retired, or never configured) and is idle, to
        make room for another; False if every one holds something. The stopped partition starts again
        at its next record, from the snapshot it published on stopping."""
        idle = next((h for h in self.hosts.values() if h.holds_nothing() and h.name not in self._waiting), None)
        if idle is None:
            return False
        log.info(
            "partition %s holds nothing: stopped to make room for another", idle.name, extra={"partition": idle.name}
        )
        self._forget(idle)
        await idle.stop()
        for delivery in self._inflight:
            if delivery.key == idle.name:
                delivery.done = True  # in its final snapshot, or replayed from the feed when it starts again
        self.advance_acks()
        return True

    async def _start_then_deliver(self, name: str, kp: int) -> None:
        """Start partition ``name``, then hand it the records that came meanwhile, in order."""
        waiting = self._waiting[name]
        try:
            host = await self.ensure(name, kp)
            while waiting:
                delivery = waiting.popleft()
                failing = self.failing.get(name)
                if host is None and failing is not None:
                    reason = f"partition {name!r} cannot be served ({failing}); the record is replayed once it is"
                    self._dead_letter(delivery, reason)
                elif host is None or kp not in self.owned or self.hosts.get(name) is not host:
                    delivery.done = True  # the partition was revoked meanwhile: its next owner reads it
                else:
                    await self._hand(host, delivery)
                self.advance_acks()
        finally:
            for delivery in waiting:
                delivery.done = True
            del self._waiting[name]
            self.advance_acks()

    async def _hand(self, host: HostedPartition, delivery: Delivery) -> None:
        if delivery.offset <= host.applied_offset:
            delivery.done = True  # already in the state (recovery replayed it)
            return
        host.applied_offset = delivery.offset
        await host.memory.publish(FEED, host.name, delivery)

    async def _bad_record(self, delivery: Delivery, letter: DeadLetter) -> None:
        """A record the subscription found bad: dead-letter it unless this or a previous owner did."""
        written = await self._lettered_offsets(delivery.kafka_partition)
        if delivery.offset in written:
            delivery.done = True
            self.advance_acks()
            return
        written.add(delivery.offset)
        self._send_dead_letter(delivery, letter)

    async def _lettered_offsets(self, kp: int) -> set[int]:
        """Offsets of the feed records of Kafka partition ``kp`` dead-lettered so far (read once per assignment).

        A bad record's dead letter is keyed like the record, so it is on the same Kafka partition of the
        deadletter topic; records delivered again after a failover find their letter here.
        """
        async with self._lettered_lock:
            written = self._lettered.get(kp)
            if written is None:
                written = set()
                for record in await read_partition(self.settings, DEADLETTER, kp):
                    old, _ = self.bus.decode(DEADLETTER, record.value)
                    if isinstance(old, DeadLetter) and old.topic == FEED and old.partition == kp:
                        written.add(old.offset)
                self._lettered[kp] = written
            return written

    def _dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Dead-letter a good record this process will not apply, with its bytes as produced."""
        self._send_dead_letter(
            delivery, self._letter(delivery.kafka_partition, delivery.offset, delivery.key, reason, delivery.value)
        )

    @staticmethod
    def _letter(kp: int, offset: int, key: str, reason: str, payload: bytes) -> DeadLetter:
        return DeadLetter(
            topic=FEED, partition=kp, offset=offset, key=key, reason=reason, payload=payload, t=time.time()
        )

    async def _dead_letter_once(self, kp: int, letters: list[DeadLetter]) -> None:
        """Publish those of ``letters`` (bad feed records of Kafka partition ``kp``) not written yet."""
        written = await self._lettered_offsets(kp)
        for letter in letters:
            if letter.offset not in written:
                written.add(letter.offset)
                await self._write_letter(kp, letter)

    async def dead_letter_refused(
        self, kp: int, name: str, refused: list[RefusedRecord], values: Mapping[int, bytes]
    ) -> None:
        """Dead-letter the records partition ``name`` refused for their time, once (live or on replay).

        ``values``: the bytes of each refused record as produced, by offset (those it handled since the
        refusals were last taken).
        """
        # A record whose bytes are not at hand (never expected) is lettered as its event, re-encoded.
        letters = [
            self._letter(kp, r.offset, name, r.reason, values.get(r.offset) or msgspec.msgpack.encode(r.event))
            for r in refused
        ]
        await self._dead_letter_once(kp, letters)

    def _send_dead_letter(self, delivery: Delivery, letter: DeadLetter) -> None:
        """Publish ``letter`` in the background; ``delivery`` is done once it is out (or given up)."""

        async def send() -> None:
            try:
                await self._write_letter(delivery.kafka_partition, letter)
            finally:
                delivery.done = True
                self.advance_acks()

        assert self._tg is not None
        self._tg.start_soon(send)

    async def _write_letter(self, kp: int, letter: DeadLetter) -> None:
        """Publish a dead letter of Kafka partition ``kp`` under the lease, while ``kp`` is owned here.

        A deposed owner writes none (the partition's next owner writes those not yet written), so a
        paused process that resumes republishes nothing.
        """
        await self.bus.dead_letter(letter, may_write=functools.partial(self.may_write, kp))

    def advance_acks(self) -> None:
        """Acknowledge feed records, in fetch order, as far as every one of them is done."""
        feed = self.subscription
        inflight = self._inflight
        while inflight and inflight[0].done:
            inflight.popleft()
            if feed is not None:
                feed.ack()

    def _lost(self, host: HostedPartition) -> None:
        """``host`` stopped on an error: forget it, release its feed records and restore it.

        The restore (now, else on the partition's next feed record) re-reads those records from the
        log after the snapshot (recovery never depends on the committed offset) and publishes the
        decisions the log lacks; held, the records would stop the acknowledgements of every partition
        behind them.
        """
        self._forget(host)
        for delivery in self._inflight:
            if delivery.key == host.name:
                delivery.done = True
        self.advance_acks()
        if self._tg is not None and host.kafka_partition in self.owned:
            try:
                self._tg.start_soon(self.ensure, host.name, host.kafka_partition)
            except RuntimeError:  # shutting down
                log.debug("no restore of %s during shutdown", host.name)

    # ---- starting a partition
    async def ensure(self, name: str, kafka_partition: int) -> HostedPartition | None:
        """The hosted partition ``name``, restored and started if it is not running yet (None on failure)."""
        while True:
            host = self.hosts.get(name)
            if host is not None:
                return host
            if kafka_partition not in self.owned:
                return None
            starting = self._starting.get(name)
            if starting is None:
                break
            await starting.wait()  # another start attempt ended: look again
        event = self._starting[name] = anyio.Event()
        try:
            async with self._start_slots:
                with anyio.fail_after(self.options.recovery_timeout):
                    return await self._start(name, kafka_partition)
        except Exception as err:
            if kafka_partition in self.owned:
                self.failing[name] = f"could not be restored: {err!r}"[:1000]
            log.exception(
                "ALERT partition %s could not be restored; its records are dead-lettered until it is",
                name,
                extra={"partition": name},
            )
            return None
        finally:
            del self._starting[name]
            event.set()

    async def _start(self, name: str, kp: int) -> HostedPartition | None:
        began = time.monotonic()
        records = await read_partition(self.settings, SNAPSHOTS, kp)
        snapshot, problems = latest(((r.key, r.value) for r in records), name)
        for problem in problems:
            log.warning("%s", problem, extra={"partition": name})
        log_read = await self._read_log(name, kp, snapshot)
        logged, top_epoch = log_read.decisions, log_read.epoch
        if snapshot is not None:
            top_epoch = max(top_epoch, snapshot.epoch)
        epoch = top_epoch + 1
        try:
            core = await in_slices(restore_in_slices(snapshot, epoch=epoch)) if snapshot is not None else None
        except SnapshotError as err:
            log.error("%s; replaying from the start of the feed", err, extra={"partition": name})
            core, snapshot = None, None
            log_read = await self._read_log(name, kp, None)
            logged = log_read.decisions
        if core is None:
            core = DurableCache(name, self._configured.get(name), epoch=epoch)
        feed: list[tuple[int, f.Feed]] = []
        bad: list[DeadLetter] = []
        records = await read_partition(self.settings, FEED, kp, start=core.feed_offset + 1, key=name)
        for record in records:
            event, reason = self.bus.decode(FEED, record.value, record.headers, record.key or b"")
            if event is None:  # skipped as live; its dead letter is written below unless it was already
                bad.append(self._letter(kp, record.offset, name, reason, record.value or b""))
            else:  # keyed by its partition's name: the decode refuses any other key
                feed.append((record.offset, event))
        if bad:
            await self._dead_letter_once(kp, bad)
        result = await in_slices(replay_in_slices(core, feed, logged))
        if result.refused:
            refused = {r.offset for r in result.refused}
            values = {r.offset: r.value or b"" for r in records if r.offset in refused}
            await self.dead_letter_refused(kp, name, result.refused, values)
        del records  # the bytes are not kept past the replay
        if kp not in self.owned:
            return None
        host = self._new_host(name, kp, core)
        host.log_end, host.log_epoch = log_read.end, log_read.epoch
        host.applied_offset = max(core.feed_offset, feed[-1][0] if feed else -1, bad[-1].offset if bad else -1)
        counters = host.counters
        counters.recovered_feed += result.feed_replayed
        counters.recovered_decisions += result.decisions_applied
        counters.recovery_divergences += len(result.divergences)
        for problem in result.divergences[:20]:
            log.warning("replay diverged: %s", problem, extra={"partition": name})
        await host.publish_decisions(stamp(result.fresh, epoch=epoch))
        await host.publish_snapshot()  # claims the epoch; the next owner starts from here
        self._host(host)
        assert self._tg is not None
        await self._tg.start(host.run)
        log.info(
            "partition %s started at epoch %d: snapshot %s, %d feed records and %d decisions replayed in %.3fs",
            name,
            epoch,
            "none" if snapshot is None else f"seq {snapshot.decision_seq} feed offset {snapshot.feed_offset}",
            result.feed_replayed,
            result.decisions_applied,
            time.monotonic() - began,
            extra={"partition": name},
        )
        return host

    def _new_host(self, name: str, kafka_partition: int, core: DurableCache) -> HostedPartition:
        """The hosted partition object for a restored ``core`` (split roles host fewer actors)."""
        return HostedPartition(self, name, kafka_partition, core)

    async def _read_log(self, name: str, kp: int, snapshot: Snapshot | None) -> LogRead:
        """Decisions of ``name`` after ``snapshot`` (all of them without one) as consumers accept them.

        The read starts at the snapshot's ``decisions_offset`` (no decision after the snapshot lies
        before it), so a restore reads what came since the snapshot, not the whole log's history.
        """
        after_seq, start, top_epoch = 0, None, 0
        if snapshot is not None:
            after_seq, top_epoch = snapshot.decision_seq, snapshot.decisions_epoch
            start = snapshot.decisions_offset if snapshot.decisions_offset >= 0 else None
        by_seq: dict[int, d.DecisionMsg] = {}
        records = await read_partition(self.settings, DECISIONS, kp, start=start, key=name)
        for record in records:
            dec, _ = self.bus.decode(DECISIONS, record.value, record.headers)
            if dec is None:
                continue
            if dec.partition != name or dec.epoch < top_epoch:
                continue  # a deposed owner's late output: consumers drop it too
            top_epoch = dec.epoch
            if dec.seq > after_seq:
                by_seq[dec.seq] = dec
        end = records[-1].offset + 1 if records else (start if start is not None else -1)
        return LogRead([by_seq[s] for s in sorted(by_seq)], top_epoch, end)
