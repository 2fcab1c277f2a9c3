"""The actors on the memory bus: a partition runtime end to end, failure handling and supervision.

Synchronisation is by quiescence only: ``await bus.wait_idle()`` returns once every delivered message
has been handled (and everything it caused published). ``fail_after`` guards turn a hang into a
failure; they never measure anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from sniper.actors.base import Actor, MergedInbox, supervise
from sniper.actors.partition import PartitionRuntime
from sniper.actors.router import Router
from sniper.core.cache import Cache
from sniper.core.config import PartitionConfig
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.transport.bus import DECISIONS, FEED, VIEW, Subscription
from sniper.transport.memory import MemoryBus
from tests.core_support import config_of, fingerprint, queue

GUARD = 30.0  # seconds before a hang becomes a failure
CONFIG = config_of(queue("a", maximum={"memory": 16384}), queue("b"))
PARTITION = "default"


@dataclasses.dataclass
class Running:
    bus: MemoryBus
    runtime: PartitionRuntime
    decisions: list[d.DecisionMsg]
    views: list[p.ViewDelta]

    def actor(self, kind: str) -> Any:
        (actor,) = [a for a in self.runtime.actors if a.kind == kind]
        return actor

    @property
    def cache(self) -> Cache:
        assert self.runtime.cache_core is not None
        return self.runtime.cache_core

    async def feed(self, *events: f.Feed) -> list[d.DecisionMsg]:
        """Publish events, wait until everything they caused is done; the new decisions."""
        seen = len(self.decisions)
        for event in events:
            await self.bus.publish(FEED, PARTITION, event)
        await self.idle()
        return self.decisions[seen:]

    async def idle(self) -> None:
        with anyio.fail_after(GUARD):
            await self.bus.wait_idle()


async def _collect(sub: Subscription, into: list[Any]) -> None:
    while True:
        try:
            message = await sub.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return
        into.append(message)
        sub.ack()


@contextlib.asynccontextmanager
async def running(config: PartitionConfig | None = CONFIG) -> AsyncIterator[Running]:
    bus = MemoryBus()
    runtime = PartitionRuntime(PARTITION, Router(bus), config=config)
    decisions: list[d.DecisionMsg] = []
    views: list[p.ViewDelta] = []
    decision_sub = bus.subscribe(DECISIONS, group="test-rm", key=PARTITION)
    view_sub = bus.subscribe(VIEW, group="test-observer", key=PARTITION)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_collect, decision_sub, decisions)
        tg.start_soon(_collect, view_sub, views)
        with anyio.fail_after(GUARD):
            await tg.start(runtime.run)
        env = Running(bus, runtime, decisions, views)
        await env.idle()
        yield env
        tg.cancel_scope.cancel()
    await bus.aclose()


NODES = [
    f.NodeAdded(node="n1", capacity={"memory": 8192, "vcore": 8000}),
    f.NodeAdded(node="n2", capacity={"memory": 16384, "vcore": 8000}),
]


async def test_events_in_decisions_out() -> None:
    async with running() as env:
        out = await env.feed(
            *NODES,
            f.AppAdded(app="a1", queue="root.a"),
            f.AskAdded(app="a1", ask="k", resource={"memory": 4096, "vcore": 1000}, count=3),
        )
        assert [(type(x).__name__, x.allocation, x.node) for x in out if isinstance(x, d.Allocated)] == [
            ("Allocated", "alloc-1", "n1"),
            ("Allocated", "alloc-2", "n1"),
            ("Allocated", "alloc-3", "n2"),
        ]
        assert [x.seq for x in env.decisions] == [1, 2, 3]
        allocator = env.actor("allocator")
        assert allocator.core.view_seq == env.cache.view_seq
        assert fingerprint(allocator.core.state, allocating=True) == fingerprint(env.cache.state, allocating=True)
        assert env.bus.in_flight == 0
        # the view stream: resets are addressed to one reader, ordinary deltas are numbered 1, 2, 3, ...
        ordinary = [v.seq for v in env.views if isinstance(v, p.ViewDelta) and not v.reset]
        assert ordinary == list(range(1, len(ordinary) + 1))
        resets = [v.to for v in env.views if isinstance(v, p.ViewDelta) and v.reset]
        assert "allocator" in resets and "" not in resets


async def test_work_arriving_later_is_placed_on_freed_room() -> None:
    async with running() as env:
        await env.feed(*NODES, f.AppAdded(app="a1", queue="root.a"))
        out = await env.feed(f.AskAdded(app="a1", ask="k", resource={"memory": 8192}, count=3))
        assert [x.node for x in out if isinstance(x, d.Allocated)] == ["n1", "n2"]  # root.a max: 16384
        out = await env.feed(f.AllocationReleased(allocation="alloc-1"))
        assert [type(x).__name__ for x in out] == ["Released", "Allocated"]
        assert out[1].node == "n1"  # type: ignore[union-attr]
        out = await env.feed(f.NodeRemoved(node="n2"))
        assert [(type(x).__name__, x.allocation) for x in out] == [("AllocationLost", "alloc-2")]  # type: ignore[union-attr]


async def test_bad_events_are_rejected_and_the_runtime_goes_on() -> None:
    async with running() as env:
        out = await env.feed(
            f.AppAdded(app="x", queue="root", id="bad-1"),
            f.AskAdded(app="ghost", ask="k", resource={"memory": 1}, id="bad-2"),
            f.AppAdded(app="a1", queue="root.a"),
            f.AskAdded(app="a1", ask="huge", resource={"memory": 20000}, id="bad-3"),
        )
        rejected = [x for x in out if isinstance(x, d.Rejected)]
        assert [x.event for x in rejected] == ["bad-1", "bad-2", "bad-3"]
        out = await env.feed(*NODES, f.AskAdded(app="a1", ask="k", resource={"memory": 1024}))
        assert [type(x).__name__ for x in out] == ["Allocated"]
        assert env.actor("cache").errors == 0


async def test_a_duplicate_feed_changes_nothing() -> None:
    async with running() as env:
        events = [
            *NODES,
            f.AppAdded(app="a1", queue="root.a", id="e3"),
            f.AskAdded(app="a1", ask="k", resource={"memory": 1024}, count=2, id="e4"),
        ]
        first = await env.feed(*events)
        state = fingerprint(env.cache.state)
        again = await env.feed(*events)
        assert len(first) == 2 and again == []
        assert fingerprint(env.cache.state) == state


async def test_a_handler_exception_is_logged_and_the_actor_goes_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running() as env:
        core = env.cache
        original = core.handle_event

        def handle_event(event: f.Feed) -> None:
            if isinstance(event, f.NodeAdded) and event.node == "poison":
                raise RuntimeError("poisoned event")
            original(event)

        monkeypatch.setattr(core, "handle_event", handle_event)
        with caplog.at_level(logging.ERROR, logger="sniper.actors"):
            out = await env.feed(
                f.NodeAdded(node="poison", capacity={"memory": 1}),
                *NODES,
                f.AppAdded(app="a1", queue="root.a"),
                f.AskAdded(app="a1", ask="k", resource={"memory": 1024}),
            )
        assert [type(x).__name__ for x in out] == ["Allocated"]
        cache_actor = env.actor("cache")
        assert cache_actor.errors == 1
        records = [r for r in caplog.records if "failed to handle NodeAdded" in r.getMessage()]
        assert len(records) == 1
        assert records[0].exc_info is not None and "poisoned event" in str(records[0].exc_info[1])
        assert "poison" not in env.cache.state.nodes


async def test_an_allocator_gap_in_view_seq_asks_for_a_reset(caplog: pytest.LogCaptureFixture) -> None:
    async with running() as env:
        await env.feed(*NODES, f.AppAdded(app="a1", queue="root.a"))
        allocator = env.actor("allocator")
        assert allocator.core.stats.resets == 1  # the reset it asked for at start
        seq = env.cache.view_seq
        ghost = p.ViewDelta(
            partition=PARTITION, seq=seq + 5, changes=[p.NodeSet(node="ghost", capacity={"memory": 10**6})]
        )
        with caplog.at_level(logging.WARNING, logger="sniper.actors"):
            await env.bus.publish(VIEW, PARTITION, ghost)
            await env.idle()
        assert any("view gap" in r.getMessage() for r in caplog.records)
        assert allocator.core.stats.resets == 2
        assert "ghost" not in allocator.core.state.nodes
        assert allocator.core.view_seq == env.cache.view_seq
        assert fingerprint(allocator.core.state) == fingerprint(env.cache.state)
        # ... and it goes on allocating from the fresh replica
        out = await env.feed(f.AskAdded(app="a1", ask="k", resource={"memory": 10240}))
        assert [(type(x).__name__, x.node) for x in out] == [("Allocated", "n2")]  # type: ignore[union-attr]


async def test_events_before_the_config_and_a_config_on_the_feed() -> None:
    async with running(config=None) as env:
        out = await env.feed(NODES[0])
        assert [type(x).__name__ for x in out] == ["Rejected"]
        raw = {
            "name": PARTITION,
            "preemption": {"policy": "none"},
            "queues": [{"name": "root", "queues": [{"name": "a"}]}],
        }
        out = await env.feed(
            f.PartitionConfigEvent(config=raw),
            *NODES,
            f.AppAdded(app="a1", queue="root.a"),
            f.AskAdded(app="a1", ask="k", resource={"memory": 1024}),
        )
        assert [type(x).__name__ for x in out] == ["Allocated"]


# ---------------------------------------------------------------------- actors and supervision


class Echo(Actor):
    """A test actor: records what it handles; the message "raise" makes its handler fail."""

    kind = "echo"

    def __init__(self, inbox: Subscription, *, fail_start: bool = False) -> None:
        super().__init__(PARTITION, inbox)
        self.seen: list[Any] = []
        self.idles = 0
        self.fail_start = fail_start

    async def on_start(self) -> None:
        if self.fail_start:
            raise RuntimeError("cannot start")

    async def handle(self, message: Any) -> None:
        if message == "raise":
            raise ValueError("bad message")
        self.seen.append(message)

    async def on_idle(self) -> None:
        self.idles += 1
        if "raise-idle" in self.seen:
            self.seen.remove("raise-idle")
            raise ValueError("bad idle")


class Poisoned(Subscription):
    """An inbox whose transport fails on the message "poison" (the loop itself crashes)."""

    def __init__(self, inner: Subscription) -> None:
        self.inner = inner

    async def receive(self) -> Any:
        message = await self.inner.receive()
        if message == "poison":
            raise RuntimeError("inbox broke")
        return message

    def receive_nowait(self) -> Any:
        message = self.inner.receive_nowait()
        if message == "poison":
            raise RuntimeError("inbox broke")
        return message

    def ack(self) -> None:
        self.inner.ack()

    def depth(self) -> int:
        return self.inner.depth()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_handler_and_idle_exceptions_are_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    bus = MemoryBus()
    actor = Echo(bus.subscribe("t", group="g"))
    async with anyio.create_task_group() as tg:
        await tg.start(actor.run)
        with caplog.at_level(logging.ERROR, logger="sniper.actors"):
            for message in ("a", "raise", "b", "raise-idle"):
                await bus.publish("t", PARTITION, message)
            with anyio.fail_after(GUARD):
                await bus.wait_idle()
            await bus.publish("t", PARTITION, "c")
            with anyio.fail_after(GUARD):
                await bus.wait_idle()
        tg.cancel_scope.cancel()
    await bus.aclose()
    assert actor.seen == ["a", "b", "c"]
    assert actor.handled == 5
    assert actor.errors == 2
    messages = [r.getMessage() for r in caplog.records]
    assert any("echo[default] failed to handle str" in m for m in messages)
    assert any("failed in its idle step" in m for m in messages)


@pytest.mark.parametrize("merged", [True, False], ids=["pumped-merged-inbox", "one-memory-stream"])
async def test_a_merged_inbox_keeps_each_source_in_order(merged: bool) -> None:
    bus = MemoryBus()
    router = Router(bus)
    inbox: Subscription
    if merged:  # what the router builds when the sources live on different buses
        inbox = MergedInbox([bus.subscribe("x", group="g", key=PARTITION), bus.subscribe("y", group="g")])
    else:  # all on the memory bus: one stream, no pump
        inbox = router.inbox([("x", PARTITION), ("y", None)], group="g")
        assert not isinstance(inbox, MergedInbox)
    actor = Echo(inbox)
    async with anyio.create_task_group() as tg:
        await tg.start(actor.run)
        for i in range(20):
            await bus.publish("x", PARTITION, f"x{i}")
            await bus.publish("y", "other-key", f"y{i}")
        await bus.publish("x", "other-key", "not for this inbox")
        with anyio.fail_after(GUARD):
            await bus.wait_idle()
        tg.cancel_scope.cancel()
    await bus.aclose()
    assert [m for m in actor.seen if m.startswith("x")] == [f"x{i}" for i in range(20)]
    assert [m for m in actor.seen if m.startswith("y")] == [f"y{i}" for i in range(20)]
    assert "not for this inbox" not in actor.seen


async def test_supervise_restarts_a_restartable_actor_whose_loop_crashed(caplog: pytest.LogCaptureFixture) -> None:
    bus = MemoryBus()
    built: list[Echo] = []

    def factory() -> Actor:
        actor = Echo(Poisoned(bus.subscribe("t", group="g")))
        built.append(actor)
        return actor

    async with anyio.create_task_group() as tg:
        with anyio.fail_after(GUARD):
            await tg.start(supervise, "test", [(factory, True)])
        with caplog.at_level(logging.WARNING, logger="sniper.actors"):
            await bus.publish("t", PARTITION, "before")
            await bus.publish("t", PARTITION, "poison")
            with anyio.fail_after(GUARD):
                await bus.wait_idle()  # the crashed actor's inbox is released, not left unacknowledged
            await bus.publish("t", PARTITION, "after")
            with anyio.fail_after(GUARD):
                await bus.wait_idle()
        tg.cancel_scope.cancel()
    await bus.aclose()
    assert len(built) == 2
    assert built[0].seen == ["before"]
    assert built[1].seen == ["after"]
    assert any("restarting echo[default] (1/3)" in r.getMessage() for r in caplog.records)


async def test_supervise_restarts_an_actor_that_fails_to_start() -> None:
    bus = MemoryBus()
    built: list[Echo] = []

    def factory() -> Actor:
        actor = Echo(bus.subscribe("t", group="g"), fail_start=not built)
        built.append(actor)
        return actor

    async with anyio.create_task_group() as tg:
        with anyio.fail_after(GUARD):
            await tg.start(supervise, "test", [(factory, True)])  # started once the second one is
        await bus.publish("t", PARTITION, "hello")
        with anyio.fail_after(GUARD):
            await bus.wait_idle()
        tg.cancel_scope.cancel()
    await bus.aclose()
    assert len(built) == 2
    assert built[1].seen == ["hello"]


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


async def test_supervise_stops_cleanly_when_a_crash_is_not_restartable() -> None:
    bus = MemoryBus()
    gave_up: list[tuple[str, BaseException]] = []
    sibling: list[Echo] = []

    async def on_give_up(name: str, error: BaseException) -> None:
        gave_up.append((name, error))

    def crashing() -> Actor:
        return Echo(bus.subscribe("t", group="g"), fail_start=True)

    def healthy() -> Actor:
        actor = Echo(bus.subscribe("u", group="g"))
        actor.kind = "sibling"
        sibling.append(actor)
        return actor

    with pytest.raises(BaseExceptionGroup) as info:
        with anyio.fail_after(GUARD):
            await supervise("test", [(healthy, True), (crashing, False)], on_give_up=on_give_up)
    assert [str(e) for e in _leaves(info.value)] == ["cannot start"]
    assert [name for name, _ in gave_up] == ["echo[default]"]
    assert len(sibling) == 1  # the healthy actor was stopped with the group, not restarted
    await bus.aclose()


async def test_supervise_gives_up_after_max_restarts() -> None:
    bus = MemoryBus()
    built: list[Echo] = []
    gave_up: list[str] = []

    async def on_give_up(name: str, error: BaseException) -> None:
        gave_up.append(name)

    def factory() -> Actor:
        actor = Echo(bus.subscribe("t", group="g"), fail_start=True)
        built.append(actor)
        return actor

    with pytest.raises(BaseExceptionGroup) as info:
        with anyio.fail_after(GUARD):
            await supervise("test", [(factory, True)], max_restarts=2, on_give_up=on_give_up)
    assert {str(e) for e in _leaves(info.value)} == {"cannot start"}
    assert len(built) == 3  # the first run and two restarts
    assert gave_up == ["echo[default]"]
    assert bus.in_flight == 0
    await bus.aclose()


async def test_publishers_waiting_on_a_full_inbox_return_quietly_when_the_bus_closes() -> None:
    bus = MemoryBus()
    bus.subscribe("t", group="g", capacity=1)
    await bus.publish("t", PARTITION, "fills the inbox")
    errors: list[BaseException] = []

    async def publish(message: str) -> None:
        try:
            await bus.publish("t", PARTITION, message)
        except Exception as err:  # a publisher must never see the bus's own bookkeeping fail
            errors.append(err)

    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:
            tg.start_soon(publish, "waits")
            tg.start_soon(publish, "waits too")
            await anyio.wait_all_tasks_blocked()
            await bus.aclose()
    assert errors == []
