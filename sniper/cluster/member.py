"""A consumer-group member that hosts scheduler partitions: what every ``sniper core`` process shares.

:class:`GroupMember` owns one subscription to its ``topic`` in its consumer group, the set of Kafka
partitions the group gave it (``owned``) and the hosted scheduler partitions (``hosts``, by name).
Invariant: a host lives on an owned Kafka partition; when the group revokes one, its hosts are
forgotten and stopped (each host bounds its own stop), and shutdown stops every host before the bus
closes. A rebalance stops only the hosts of the partitions it moves elsewhere: while it is under way
every output waits, and the hosts of moved partitions publish nothing more (their new owner may
already read the log), so those kept run on without a restart. Hosts publish their output
(decisions, snapshots and dead letters) only under the membership's lease (:meth:`GroupMember.leased`;
records still buffered when it lapses are held until a heartbeat renews it, and failed, never sent,
when a rebalance begins meanwhile: ``KafkaBus.fence``), and only for Kafka
partitions still owned (:meth:`GroupMember.may_write`).
A member with a metrics endpoint observes its event loop's lag (:func:`~sniper.cluster.timings.watch_loop_lag`).
A member also watches its topics (:mod:`sniper.transport.layout`): one that is gone or has another partition
count, seen on two checks in a row, stops it (the error leaves :meth:`GroupMember.run`).
What a record does and how a host starts belongs to the subclasses (:mod:`sniper.cluster.process` on
the feed, :mod:`sniper.cluster.roles` on the view).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import ClassVar, Generic, Protocol, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus
from prometheus_client import Gauge, Histogram

from sniper.actors.base import Actor
from sniper.cluster.audit import PreemptionTally
from sniper.cluster.timings import LOOP_LAG_INTERVAL, watch_loop_lag
from sniper.transport.bus import DEADLETTER, DECISIONS, FEED, SNAPSHOTS
from sniper.transport.kafka import (
    BadRecords,
    KafkaBus,
    KafkaSettings,
    KafkaSubscription,
    RebalanceListener,
    Validator,
)

log = logging.getLogger("sniper.core")
LAYOUT_CHECK_INTERVAL = 1.0  # seconds between two checks of the topics' layout on the broker


@dataclasses.dataclass(slots=True)
class PartitionCounters:
    """What one hosted partition did, for the metrics endpoint (kept across its restarts here)."""

    allocations: int = 0
    preemptions: int = 0
    preemptions_cancelled: int = 0
    rejected: int = 0
    kills: int = 0
    lost: int = 0
    decisions: int = 0
    snapshots: int = 0
    snapshots_failed: int = 0  # snapshots that could not be published (an alert: recovery replays more)
    decisions_unpublishable: int = 0  # batches with a decision too large for a record (an alert: it stops)
    recovered_feed: int = 0
    recovered_decisions: int = 0
    recovery_divergences: int = 0
    preempted: PreemptionTally = dataclasses.field(default_factory=PreemptionTally)  # per queue, for the metrics


class Host(Protocol):
    """One hosted scheduler partition, as the member sees it."""

    @property
    def name(self) -> str: ...

    @property
    def kafka_partition(self) -> int: ...

    @property
    def actors(self) -> Sequence[Actor]: ...

    async def stop(self) -> None: ...


H = TypeVar("H", bound=Host)


class GroupMember(RebalanceListener, Generic[H]):
    """Joins ``group`` on ``topic``, hosts partitions of the Kafka partitions it owns, stops them on revocation."""

    topic: ClassVar[str]
    bad_records: ClassVar[BadRecords] = "dead_letter"  # what the subscription does with bad records

    def __init__(self, settings: KafkaSettings, *, validators: Mapping[str, Validator] | None = None) -> None:
        self.settings = settings
        self.bus = KafkaBus(settings, validators=validators)
        self.hosts: dict[str, H] = {}
        self.counters: dict[str, PartitionCounters] = {}
        # Partitions this member owns but cannot serve now, with why: /healthz answers 503 while any is.
        self.failing: dict[str, str] = {}
        self.owned: frozenset[int] = frozenset()
        # A rebalance under way holds back every output until the assignment says which partitions stay;
        # those it took away (``moved``) publish nothing more: their new owner may be reading the log.
        self.rebalancing = False
        self.moved: frozenset[int] = frozenset()
        self._ownership_changed = anyio.Event()
        self.subscription: KafkaSubscription | None = None
        self.ready = anyio.Event()
        self.loop_lag: Histogram | None = None  # set by the metrics endpoint: the event loop's lag is observed
        self.longest_hold_cpu: Gauge | None = None  # with the CPU time of its longest hold
        self._hosting_changed = anyio.Event()
        self._tg: TaskGroup | None = None

    @property
    def group(self) -> str:
        """The consumer group id."""
        raise NotImplementedError

    @property
    def log_actor(self) -> str:
        """The ``actor`` field of this member's own log lines."""
        raise NotImplementedError

    async def _dispatch(self, subscription: KafkaSubscription) -> None:
        """Handle the subscription's records until it ends."""
        raise NotImplementedError

    def counters_for(self, name: str) -> PartitionCounters:
        return self.counters.setdefault(name, PartitionCounters())

    # ---- lifecycle
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Join the group and host partitions until cancelled; ``task_status`` once the group assigned."""
        try:
            await self.bus.start()
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if self.loop_lag is not None:
                    tg.start_soon(watch_loop_lag, self.loop_lag, LOOP_LAG_INTERVAL, self.longest_hold_cpu)
                linger = self.settings.feed_linger_ms if self.topic == FEED else 0
                self.subscription = self.bus.subscribe(
                    self.topic, group=self.group, capacity=4096, listener=self, bad=self.bad_records, linger_ms=linger
                )
                self.bus.fence(self.subscription, (DECISIONS, SNAPSHOTS, DEADLETTER))
                tg.start_soon(self._watch_layout)
                await self.subscription.ready()
                self.ready.set()
                task_status.started()
                await self._dispatch(self.subscription)
        finally:
            with anyio.CancelScope(shield=True):
                for host in list(self.hosts.values()):
                    await host.stop()
                self.hosts.clear()
                await self.bus.aclose()

    async def _watch_layout(self) -> None:
        """Raise the layout's problem once two checks in a row found the same (a topic gone or changed)."""
        seen = ""
        while True:
            await anyio.sleep(LAYOUT_CHECK_INTERVAL)  # the check's period, not a synchronisation
            try:
                problem = await self.bus.check_layout()
            except Exception as err:  # the broker cannot be asked now: the clients say so themselves
                log.debug("topic layout not checked: %r", err, extra={"actor": self.log_actor})
                continue
            if problem is not None and str(problem) == seen:
                log.critical("%s", problem, extra={"actor": self.log_actor})
                raise problem
            seen = "" if problem is None else str(problem)

    async def leased(self, kafka_partition: int | None = None) -> None:
        """Return once this member's group membership is known current (at once while its lease holds)
        and no rebalance is under way; for ``kafka_partition``, never if a rebalance took it away (its
        host is being stopped, and its output must not reach the log its new owner reads)."""
        await self._settled(kafka_partition)
        if kafka_partition is not None and kafka_partition in self.moved:
            await anyio.sleep_forever()
        if self.subscription is not None:
            await self.subscription.leased()

    async def may_write(self, kafka_partition: int) -> bool:
        """Wait for the lease; True if this member still owns ``kafka_partition`` (and may write for it)."""
        try:
            await self._settled(kafka_partition)
            await self.leased()
        except Exception:  # the subscription failed or closed: this member writes nothing more
            return False
        return kafka_partition in self.owned and kafka_partition not in self.moved

    async def _settled(self, kafka_partition: int | None) -> None:
        """Wait while a rebalance is under way, unless it already took ``kafka_partition`` away."""
        while self.rebalancing and (kafka_partition is None or kafka_partition not in self.moved):
            await self._ownership_changed.wait()

    def _ownership_moved(self) -> None:
        self._ownership_changed.set()
        self._ownership_changed = anyio.Event()

    # ---- the group's decisions
    async def on_rebalance(self, partitions: frozenset[int]) -> None:
        """Hold back every output until the assignment is known; what the producer holds goes out first."""
        self.rebalancing = True
        self._ownership_moved()
        log.info("rebalancing Kafka partitions %s", sorted(partitions), extra={"actor": self.log_actor})
        with anyio.move_on_after(self.settings.close_timeout):
            await self.bus.flush()

    async def on_assigned(self, partitions: frozenset[int]) -> None:
        self.owned = self.owned | partitions
        self.moved = self.moved - partitions
        self.rebalancing = False
        self._ownership_moved()
        log.info(
            "assigned Kafka partitions %s (new: %s)",
            sorted(self.owned),
            sorted(partitions),
            extra={"actor": self.log_actor},
        )

    async def on_revoked(self, partitions: frozenset[int]) -> None:
        self.owned = self.owned - partitions
        if self.rebalancing:  # taken away by a rebalance: nothing of theirs is published from now on
            self.moved = self.moved | partitions
            self._ownership_moved()
        for name in [n for n in self.failing if self.bus.partition_for(n) in partitions]:
            del self.failing[name]  # its next owner serves it (or says it cannot)
        log.info("revoked Kafka partitions %s", sorted(partitions), extra={"actor": self.log_actor})
        leaving = [h for h in self.hosts.values() if h.kafka_partition in partitions]
        for host in leaving:
            self._forget(host)
        if leaving:
            async with anyio.create_task_group() as tg:
                for host in leaving:
                    tg.start_soon(host.stop)

    # ---- the hosts
    def _host(self, host: H) -> None:
        """``host`` runs here now (waiters of :meth:`wait_hosting` wake)."""
        self.hosts[host.name] = host
        self.failing.pop(host.name, None)
        self._hosting_changed.set()
        self._hosting_changed = anyio.Event()

    def _forget(self, host: H) -> None:
        if self.hosts.get(host.name) is host:
            del self.hosts[host.name]

    # ---- introspection (metrics, tests)
    async def wait_hosting(self, name: str) -> H:
        """Wait until this process hosts partition ``name`` (callers bound the wait)."""
        while name not in self.hosts:
            await self._hosting_changed.wait()
        return self.hosts[name]

    def lag(self) -> dict[int, int]:
        return self.subscription.lag() if self.subscription is not None else {}

    def inbox_depths(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for host in list(self.hosts.values()):
            for actor in host.actors:
                out[(host.name, actor.kind)] = actor.inbox.depth()
        return out
