"""Split roles on the real (embedded) broker: a cache, an allocator and a policy process, each on its own.

Three in-process ``sniper core`` instances (``--role cache``, ``allocator``, ``policy``) share one
group name and a topic prefix of their own: the view deltas, resets, proposals and the policy's
placement requests cross between them on Kafka only. The trace is the ``large_containers`` shape,
small: queue b borrows both nodes with small containers, then queue a (guaranteed half) asks for one
container of almost a node. The allocator role must place b's containers, the policy role must preempt
with a reservation for a, and the reservation must end in a's allocation once the victims released
(the test plays the resource manager). An independent checker (:class:`~sniper.resource_manager.checker.OrderedChecker`
over :class:`~sniper.simulator.model.ClusterModel`), fed from the feed and decisions topics, must see no
violation. Every wait is on a condition, bounded by ``anyio.fail_after``.
"""

from __future__ import annotations

import dataclasses
import signal
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from sniper.actors.replica import ReplicaActor
from sniper.bench.e2e import stop_core
from sniper.cluster.process import CoreOptions, CoreProcess
from sniper.cluster.roles import CacheProcess, ReplicaProcess, core_process
from sniper.core.preemption.policies import REGISTRY
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.kafka_support import CoreSubprocess, TopicReader
from tests.preemption_support import two_queues

pytestmark = pytest.mark.kafka

WAIT = 90.0
P = "split"
B_CONTAINERS = 16  # 8 GiB each: both 64 GiB nodes
BIG = 56  # seven of b's containers on one node


class Observer(TopicReader):
    """Reads the feed and the decisions topics, feeds the independent checker, and keeps the decisions."""

    @classmethod
    async def start(cls, bus: KafkaBus) -> Observer:
        prefix = bus.settings.prefix
        feed = await bus.subscribe_ready(FEED, group=prefix + "observer-feed")
        return cls(feed, await bus.subscribe_ready(DECISIONS, group=prefix + "observer-decisions"))

    def of(self, kind: type[Any]) -> list[Any]:
        return [x for x in self.items if isinstance(x, kind)]

    async def play_resource_manager(self, bus: KafkaBus) -> None:
        """Release each victim as soon as it is preempted (a well-behaved resource manager)."""
        released: set[str] = set()
        seen = 0
        while True:
            while len(self.items) <= seen:
                await self.changed.wait()
            fresh, seen = self.items[seen:], len(self.items)
            for x in fresh:
                if isinstance(x, d.Preempt) and not x.observe_only and x.allocation not in released:
                    released.add(x.allocation)
                    event = f.AllocationReleased(partition=P, id=f"release-{x.allocation}", allocation=x.allocation)
                    await bus.publish(FEED, P, event)

    def assert_preempted_for_a(self, *, epochs: set[int]) -> None:
        """b's containers were preempted for a with a reservation, which ended in a's container; no violation."""
        preempts = [x for x in self.of(d.Preempt) if not x.observe_only]
        assert preempts and all(x.reservation and x.for_app == "a" and x.policy == "sniper" for x in preempts)
        assert all(x.app == "b" for x in preempts)
        (big,) = [x for x in self.of(d.Allocated) if x.app == "a"]
        assert big.reservation in {x.reservation for x in preempts}
        assert {x.epoch for x in self.items} == epochs
        assert not self.of(d.Kill)  # every victim released within its grace
        checker = self.checker
        checker.finish(0.0)
        assert checker.pending_decisions() == 0 and checker.stale == 0
        violations = [v for part in checker.parts.values() for v in part.model.violations]
        assert checker.violations == 0, [dataclasses.asdict(v) for v in violations[:5]]


class Stoppable:
    """Runs a process in a cancel scope of its own, so a test can stop that one process and wait for it."""

    def __init__(self, process: CacheProcess | ReplicaProcess) -> None:
        self.process = process
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            with self.scope:
                await self.process.run(task_status=task_status)
        finally:
            self.done.set()

    async def stop(self) -> None:
        self.scope.cancel()
        await self.done.wait()


def options(role: str) -> CoreOptions:
    return CoreOptions(group="split", role=role, tick=0.1, snapshot_interval=0.5, stop_timeout=3.0)


def setup_events() -> list[f.Feed]:
    # Every round may take all of b's share above its ideal: one round can free a whole node.
    raw = {**two_queues(64, 64, interval=0.2, natural_termination_factor=1.0, max_ignored_over_capacity=0.0), "name": P}
    return [
        f.PartitionConfigEvent(partition=P, id="config", config=raw),
        f.NodeAdded(partition=P, id="n1", node="n1", capacity={"memory": 64}),
        f.NodeAdded(partition=P, id="n2", node="n2", capacity={"memory": 64}),
        f.AppAdded(partition=P, id="app-b", app="b", queue="root.b"),
        f.AskAdded(partition=P, id="ask-b", app="b", ask="b-task", resource={"memory": 8}, count=B_CONTAINERS),
    ]


def big_ask() -> list[f.Feed]:
    return [
        f.AppAdded(partition=P, id="app-a", app="a", queue="root.a"),
        f.AskAdded(partition=P, id="ask-a", app="a", ask="a-big", resource={"memory": BIG}, count=1),
    ]


def test_core_process_builds_the_process_of_each_role(kafka_settings: KafkaSettings) -> None:
    assert type(core_process(kafka_settings, options("all"))) is CoreProcess
    assert type(core_process(kafka_settings, options("cache"))) is CacheProcess
    allocator = core_process(kafka_settings, options("allocator"))
    assert isinstance(allocator, ReplicaProcess)
    assert allocator.group == f"{kafka_settings.prefix}split.allocator"
    with pytest.raises(ValueError, match=r"cluster\.roles\.core_process"):
        CoreProcess(kafka_settings, options("cache"))
    with pytest.raises(ValueError, match="role must be one of"):
        options("scheduler")


async def test_split_roles_allocate_and_preempt_over_kafka(kafka_settings: KafkaSettings, bus: KafkaBus) -> None:
    with anyio.fail_after(WAIT):
        observer = await Observer.start(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(observer.pump_feed)
            tg.start_soon(observer.pump_decisions)
            processes = [core_process(kafka_settings, options(role)) for role in ("cache", "allocator", "policy")]
            for process in processes:
                await tg.start(process.run)
            cache, allocator, policy = processes
            assert isinstance(cache, CacheProcess)
            assert isinstance(allocator, ReplicaProcess) and isinstance(policy, ReplicaProcess)

            for event in setup_events():
                await bus.publish(FEED, P, event)
            # The allocator role places b's containers from its replica, through Kafka only.
            await observer.until(lambda: len(observer.of(d.Allocated)) == B_CONTAINERS)
            assert set(cache.hosts) == {P}
            assert [a.kind for a in cache.hosts[P].runtime.actors] == ["cache"]
            assert [a.kind for a in allocator.hosts[P].actors] == ["allocator"]

            tg.start_soon(observer.play_resource_manager, bus)
            for event in big_ask():
                await bus.publish(FEED, P, event)
            # The policy role preempts for a with a reservation; the reservation ends in a's container.
            await observer.until(lambda: any(x.app == "a" for x in observer.of(d.Allocated)))
            assert sorted(a.kind for a in policy.hosts[P].actors) == [f"policy:{name}" for name in sorted(REGISTRY)]
            tg.cancel_scope.cancel()

    observer.assert_preempted_for_a(epochs={1})


async def test_a_new_cache_owner_resets_the_replicas_of_the_other_roles(
    kafka_settings: KafkaSettings, bus: KafkaBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache process is lost mid-run, its last snapshot old; the other roles carry on with the new owner.

    The new owner restores an older view sequence number than the replicas have seen (they would take
    its deltas for duplicates): its first reset, addressed to every reader, puts them back in step.
    """
    with anyio.fail_after(WAIT):
        observer = await Observer.start(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(observer.pump_feed)
            tg.start_soon(observer.pump_decisions)
            allocator = core_process(kafka_settings, options("allocator"))
            assert isinstance(allocator, ReplicaProcess)
            await tg.start(allocator.run)
            await tg.start(core_process(kafka_settings, options("policy")).run)
            # Only the snapshot that claims the partition at its start: no periodic one.
            first = core_process(kafka_settings, dataclasses.replace(options("cache"), snapshot_interval=1e6))
            assert isinstance(first, CacheProcess)
            first_run = Stoppable(first)
            await tg.start(first_run.run)
            for event in setup_events():
                await bus.publish(FEED, P, event)
            await observer.until(lambda: len(observer.of(d.Allocated)) == B_CONTAINERS)

            async def no_snapshot() -> None:
                """As if the process died: no final snapshot."""

            monkeypatch.setattr(first.hosts[P], "publish_snapshot", no_snapshot)
            seen_seq = max(a.replica.view_seq for a in allocator.hosts[P].actors if isinstance(a, ReplicaActor))
            await first_run.stop()

            second = core_process(kafka_settings, options("cache"))
            assert isinstance(second, CacheProcess)
            await tg.start(second.run)
            restored = (await second.wait_hosting(P)).core
            assert restored.epoch == 2 and restored.view_seq < seen_seq  # behind what the replicas saw
            tg.start_soon(observer.play_resource_manager, bus)
            for event in big_ask():
                await bus.publish(FEED, P, event)
            await observer.until(lambda: any(x.app == "a" for x in observer.of(d.Allocated)))
            tg.cancel_scope.cancel()

    assert {x.epoch for x in observer.of(d.Allocated) if x.app == "b"} == {1}
    observer.assert_preempted_for_a(epochs={1, 2})


async def test_allocator_processes_hand_partitions_over_in_their_group(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    """A second allocator process joins the group, the first leaves: the second takes the partition over."""
    with anyio.fail_after(WAIT):
        observer = await Observer.start(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(observer.pump_feed)
            tg.start_soon(observer.pump_decisions)
            for role in ("cache", "policy"):
                await tg.start(core_process(kafka_settings, options(role)).run)
            first = core_process(kafka_settings, options("allocator"))
            assert isinstance(first, ReplicaProcess)
            first_run = Stoppable(first)
            await tg.start(first_run.run)
            for event in setup_events():
                await bus.publish(FEED, P, event)
            await observer.until(lambda: len(observer.of(d.Allocated)) == B_CONTAINERS)
            assert set(first.hosts) == {P}

            second = core_process(kafka_settings, options("allocator"))
            assert isinstance(second, ReplicaProcess)
            await tg.start(second.run)  # the group now splits the Kafka partitions between the two
            assert not first.owned & second.owned
            await first_run.stop()
            assert not first.hosts

            tg.start_soon(observer.play_resource_manager, bus)
            for event in big_ask():
                await bus.publish(FEED, P, event)
            await observer.until(lambda: any(x.app == "a" for x in observer.of(d.Allocated)))
            assert set(second.hosts) == {P}
            tg.cancel_scope.cancel()

    observer.assert_preempted_for_a(epochs={1})


async def test_a_sigkilled_cache_process_is_replaced_and_the_other_roles_carry_on(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    """The cache role runs as a real process and dies by SIGKILL after placing b's containers; a new
    cache process restores the partition at epoch 2 and the allocator and policy processes, never
    stopped, work with it: the preemption for a goes through, and the checker sees no violation."""
    cache_flags = ("--role", "cache", "--tick", "0.1", "--snapshot-interval", "0.5")
    caches: list[CoreSubprocess] = []
    with anyio.fail_after(WAIT + 30):
        observer = await Observer.start(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(observer.pump_feed)
            tg.start_soon(observer.pump_decisions)
            for role in ("allocator", "policy"):
                await tg.start(core_process(kafka_settings, options(role)).run)
            try:
                caches.append(await CoreSubprocess.spawn(kafka_settings, tg, "split", *cache_flags))
                await caches[0].until_assigned()
                for event in setup_events():
                    await bus.publish(FEED, P, event)
                await observer.until(lambda: len(observer.of(d.Allocated)) == B_CONTAINERS)
                caches[0].process.send_signal(signal.SIGKILL)
                await caches[0].process.wait()
                caches.append(await CoreSubprocess.spawn(kafka_settings, tg, "split", *cache_flags))
                await caches[1].until_assigned()
                tg.start_soon(observer.play_resource_manager, bus)
                for event in big_ask():
                    await bus.publish(FEED, P, event)
                await observer.until(lambda: any(x.app == "a" for x in observer.of(d.Allocated)))
            finally:
                with anyio.CancelScope(shield=True):
                    for cache in caches:
                        await stop_core(cache.process)
            tg.cancel_scope.cancel()

    assert caches[0].process.returncode == -signal.SIGKILL
    assert {x.epoch for x in observer.of(d.Allocated) if x.app == "b"} == {1}
    assert len({x.allocation for x in observer.of(d.Allocated) if x.app == "b"}) == B_CONTAINERS
    observer.assert_preempted_for_a(epochs={1, 2})
