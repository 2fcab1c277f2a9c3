"""The core process's garbage collection: full passes scan only new survivors, frozen garbage is freed in time."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from sniper import collector
from sniper.actors.allocator import AllocatorActor
from sniper.actors.router import Router
from sniper.core.allocator import Allocator
from sniper.core.cache import Cache
from sniper.core.config import partition_to_raw
from sniper.core.state import App, PartitionState
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.transport.memory import MemoryBus
from tests.core_support import config_of, queue


class Node:
    """A container object that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def policy() -> Iterator[collector.FreezeSurvivors]:
    """A :class:`collector.FreezeSurvivors` installed for one test; the collector's state is put back after."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.unfreeze()
    installed = collector.FreezeSurvivors(thaw_factor=2.0)
    gc.callbacks.append(installed)
    try:
        yield installed
    finally:
        gc.callbacks.remove(installed)
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_the_survivors_of_a_full_collection_are_frozen_so_the_next_scans_only_newer_objects(
    policy: collector.FreezeSurvivors,
) -> None:
    kept = [Node() for _ in range(1_000)]
    before = gc.get_freeze_count()
    gc.collect()
    assert gc.get_freeze_count() >= before + len(kept)
    assert not any(obj is kept[0] for obj in gc.get_objects(2))
    newer = Node()
    assert any(obj is newer for obj in gc.get_objects())  # tracked by the collector, not frozen
    assert policy.thawed == 0


def test_a_garbage_cycle_frozen_alive_is_freed_once_the_frozen_set_outgrows_the_factor(
    policy: collector.FreezeSurvivors,
) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    probe = weakref.ref(a)
    gc.collect()  # the cycle is alive: frozen with the rest
    del a, b
    gc.collect()
    assert probe() is not None  # garbage now, but frozen: a full pass does not see it
    growth = [Node() for _ in range(2 * gc.get_freeze_count())]
    gc.collect()  # the frozen set more than doubled since the start: thawed
    assert policy.thawed == 1
    gc.collect()
    assert probe() is None
    assert len(growth) > 0


def test_a_thaw_factor_must_let_the_frozen_set_grow() -> None:
    with pytest.raises(ValueError, match="above 1"):
        collector.FreezeSurvivors(thaw_factor=1.0)


def test_tuning_twice_installs_one_policy() -> None:
    thresholds = gc.get_threshold()
    existing = [cb for cb in gc.callbacks if isinstance(cb, collector.FreezeSurvivors)]
    try:
        first = collector.tune()
        assert collector.tune() is first
        assert sum(isinstance(cb, collector.FreezeSurvivors) for cb in gc.callbacks) == 1
        assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, collector.MIDDLE_THRESHOLD, collector.FULL_THRESHOLD)
    finally:
        if not existing:
            gc.callbacks[:] = [cb for cb in gc.callbacks if not isinstance(cb, collector.FreezeSurvivors)]
            gc.unfreeze()
        gc.set_threshold(*thresholds)


def _apps_named(name: str) -> list[App]:
    """The apps called ``name`` anywhere in the process, frozen or not (the frozen set is thawed)."""
    gc.unfreeze()
    return [obj for obj in gc.get_objects() if isinstance(obj, App) and obj.name == name]


@pytest.fixture
def no_collection() -> Iterator[None]:
    """No automatic collection while the test runs: only reference counting frees anything."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_a_replica_reset_frees_the_state_it_replaced_with_no_collection(
    policy: collector.FreezeSurvivors, no_collection: None
) -> None:
    bus = MemoryBus()
    actor = AllocatorActor(Allocator("default"), Router(bus))
    config = p.ConfigSet(config=partition_to_raw(config_of(queue("a"))))
    app = p.AppSet(app="A", queue="root.a", submit_seq=1)
    ask = p.AskSet(app="A", ask="x", resource={"memory": 10}, count=1, seq=2)
    try:
        await actor.handle(p.ViewDelta(seq=1, changes=[config, app, ask], reset=True))
        gc.freeze()  # the state is alive: frozen (an app and its asks refer to each other: a cycle)
        assert len(_apps_named("A")) == 1
        gc.freeze()
        await actor.handle(p.ViewDelta(seq=2, changes=[config], reset=True))
    finally:
        await actor.inbox.aclose()
        await bus.aclose()
    assert _apps_named("A") == []  # no full collection ran, no thaw: the dropped state is gone


def test_a_disposed_state_is_freed_by_reference_counting_even_frozen(no_collection: None) -> None:
    cache = Cache("default", config_of(queue("a", queue("b"))))  # a parent and its leaf: a cycle too
    cache.handle_event(f.NodeAdded(node="n", capacity={"memory": 100}))
    cache.handle_event(f.AppAdded(app="A", queue="root.a.b"))
    cache.handle_event(f.AskAdded(app="A", ask="x", resource={"memory": 10}, count=2))
    cache.allocate("A", "x", "n")
    cache.drain()
    state = cache.state
    gc.freeze()
    state.dispose()
    del state, cache
    assert _apps_named("A") == []
    disposed = PartitionState("default")
    disposed.dispose()
    disposed.dispose()  # a partition stopped after it failed: nothing more to do
    with pytest.raises(AttributeError):  # a disposed state fails loudly, never serves an empty partition
        disposed.held()


def _tracked_per_app(apps: int) -> float:
    """Objects the collector tracks per app in a cache's state of ``apps`` apps with one ask each, every
    ask placed (one running container per app)."""
    cache = Cache("default", config_of(queue("a")))
    cache.handle_event(f.NodeAdded(node="n", capacity={"memory": 10 * apps}))
    cache.drain()
    gc.collect()
    before = len(gc.get_objects())
    for i in range(apps):
        cache.handle_event(f.AppAdded(app=f"app{i}", queue="root.a"))
        cache.handle_event(f.AskAdded(app=f"app{i}", ask="k", resource={"memory": 10}))
        cache.allocate(f"app{i}", "k", "n")
    cache.drain()
    gc.collect()
    assert len(cache.state.allocations) == apps
    return (len(gc.get_objects()) - before) / apps


def test_a_partition_gives_the_collector_few_objects_to_scan_per_app_and_container() -> None:
    # An app, its asks dict, its pending-ask order and its ask: a full collection's cost grows with
    # these, in every replica. A running container (and the app's index of them) adds none.
    assert _tracked_per_app(2_000) <= 4.05
