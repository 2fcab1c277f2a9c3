"""Admission bounds: what one ask, one app and one partition may hold (``admission`` in queues.yaml).

An ask over a bound is refused with the reason and changes nothing; the bounds count running
containers plus those still asked for, whatever their shape (memory-heavy, vcore-heavy, GPU).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from sniper.cluster.process import CoreProcess
from sniper.core.cache import Cache
from sniper.core.config import AdmissionConfig, ConfigError, parse_partition
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.run import run_simulation
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_support import consistency_problems, partition_raw, queue
from tests.test_core_process import WAIT, Decisions, bus, options

__all__ = ["bus"]  # the fixture, used by name

TIB = 2**40


def _cache(**admission: Any) -> Cache:
    raw = partition_raw(queue("a"), queue("b"))
    if admission:
        raw["admission"] = admission
    cache = Cache("default", parse_partition(raw))
    cache.handle_event(f.NodeAdded(node="big", capacity={"memory": TIB, "vcore": TIB, "gpu": 1024}))
    cache.handle_event(f.AppAdded(app="a1", queue="root.a"))
    cache.handle_event(f.AppAdded(app="b1", queue="root.b"))
    cache.drain()
    return cache


def _ask(cache: Cache, app: str, ask: str, count: int, resource: dict[str, int] | None = None) -> list[str]:
    cache.handle_event(f.AskAdded(app=app, ask=ask, resource=resource or {"memory": 1024}, count=count))
    return [x.reason for x in cache.drain().decisions if isinstance(x, d.Rejected)]


def test_the_defaults_bound_an_ask_an_app_and_a_partition() -> None:
    bounds = parse_partition(partition_raw(queue("a"))).admission
    assert bounds == AdmissionConfig()
    assert bounds.max_pending_per_ask <= bounds.max_containers_per_app <= bounds.max_containers


@pytest.mark.parametrize(
    "resource",
    [{"memory": 1}, {"vcore": 1}, {"memory": 1, "vcore": 1, "gpu": 1}],
    ids=["memory", "vcore", "gpu"],
)
def test_an_ask_of_ten_million_is_refused_with_the_reason_whatever_its_shape(resource: dict[str, int]) -> None:
    cache = _cache()
    reasons = _ask(cache, "a1", "huge", 10_000_000, resource)
    assert reasons == ["ask a1/huge (count 10000000): over admission.max_pending_per_ask (20000)"]
    assert "huge" not in cache.state.apps["a1"].asks


def test_an_ask_at_the_bound_is_admitted_and_one_more_is_not() -> None:
    cache = _cache(max_pending_per_ask=5)
    assert _ask(cache, "a1", "five", 5) == []
    assert _ask(cache, "a1", "six", 6) == ["ask a1/six (count 6): over admission.max_pending_per_ask (5)"]


def test_an_app_counts_its_running_and_its_pending_containers() -> None:
    cache = _cache(max_containers_per_app=10)
    assert _ask(cache, "a1", "first", 6) == []
    cache.allocate("a1", "first", "big")  # one runs, five still asked for: six held
    cache.drain()
    reasons = _ask(cache, "a1", "second", 5)
    assert reasons == ["ask a1/second (count 5): app a1 would hold 11, over admission.max_containers_per_app (10)"]
    assert _ask(cache, "a1", "third", 4) == []  # exactly ten
    assert _ask(cache, "b1", "other", 4) == []  # another app's bound is its own


def test_a_partition_counts_every_app() -> None:
    cache = _cache(max_containers=8)
    assert _ask(cache, "a1", "x", 5) == []
    reasons = _ask(cache, "b1", "y", 4)
    assert reasons == ["ask b1/y (count 4): the partition would hold 9, over admission.max_containers (8)"]
    assert _ask(cache, "b1", "y", 3) == []


def test_a_withdrawn_ask_frees_its_share_of_the_bound() -> None:
    cache = _cache(max_containers_per_app=4)
    assert _ask(cache, "a1", "x", 4) == []
    cache.handle_event(f.AskRemoved(app="a1", ask="x"))
    assert _ask(cache, "a1", "y", 4) == []


def test_the_partition_bound_follows_containers_placed_released_withdrawn_and_gone_with_their_app() -> None:
    cache = _cache(max_containers=10)

    def held() -> int:
        state = cache.state
        assert consistency_problems(state) == []
        return state.held()

    assert _ask(cache, "a1", "x", 6) == []
    cache.allocate("a1", "x", "big")
    cache.allocate("a1", "x", "big")
    first = sorted(cache.state.apps["a1"].allocations)[0]
    cache.drain()
    assert held() == 6  # two running, four still asked for
    assert _ask(cache, "b1", "y", 5) == [
        "ask b1/y (count 5): the partition would hold 11, over admission.max_containers (10)"
    ]
    cache.handle_event(f.AllocationReleased(allocation=first))
    assert held() == 5
    assert _ask(cache, "b1", "y", 5) == []
    assert held() == 10
    cache.handle_event(f.AskAdded(app="b1", ask="idle", resource={"memory": 1024}, execution_type="opportunistic"))
    reasons = [x.reason for x in cache.drain().decisions if isinstance(x, d.Rejected)]
    assert reasons == ["ask b1/idle (count 1): the partition would hold 11, over admission.max_containers (10)"]
    cache.handle_event(f.AskRemoved(app="b1", ask="y"))
    assert held() == 5
    cache.handle_event(f.AppRemoved(app="a1"))
    assert held() == 0
    assert _ask(cache, "b1", "z", 10) == []
    assert cache.state.held(cache.state.apps["b1"]) == held() == 10


def test_bad_bounds_are_refused_with_where_they_are() -> None:
    raw = partition_raw(queue("a"))
    raw["admission"] = {"max_pending_per_ask": 0}
    with pytest.raises(ConfigError, match="admission"):
        parse_partition(raw)
    raw["admission"] = {"max_pending": 5}
    with pytest.raises(ConfigError, match="max_pending"):
        parse_partition(raw)


def test_simulate_refuses_the_ten_million_ask_at_once_and_goes_on() -> None:
    events: list[f.Feed] = [
        f.PartitionConfigEvent(config=partition_raw(queue("a"))),
        f.NodeAdded(node="big", capacity={"memory": TIB, "vcore": TIB}),
        f.AppAdded(t=1, app="a1", queue="root.a"),
        f.AskAdded(t=1, app="a1", ask="huge", resource={"memory": 1, "vcore": 1}, count=10_000_000),
        f.AskAdded(t=2, app="a1", ask="small", resource={"memory": 1, "vcore": 1}, count=3, duration=5),
    ]
    result = run_simulation(events)
    rejected = [x for x in result.decisions if isinstance(x, d.Rejected)]
    assert [(x.ask, x.reason) for x in rejected] == [
        ("huge", "ask a1/huge (count 10000000): over admission.max_pending_per_ask (20000)")
    ]
    assert sum(isinstance(x, d.Allocated) and x.ask == "small" for x in result.decisions) == 3


async def test_on_kafka_the_ten_million_ask_is_refused_with_the_reason_and_the_partition_answers_on(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    events: list[f.Feed] = [
        f.PartitionConfigEvent(partition="p1", config=partition_raw(queue("a"), name="p1")),
        f.NodeAdded(partition="p1", node="big", capacity={"memory": TIB, "vcore": TIB}),
        f.AppAdded(partition="p1", app="a1", queue="root.a"),
        f.AskAdded(partition="p1", app="a1", ask="huge", resource={"memory": 1}, count=10_000_000),
        f.AskAdded(partition="p1", app="a1", ask="small", resource={"memory": 1}, count=2),
    ]
    with anyio.fail_after(WAIT):
        reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            await tg.start(CoreProcess(kafka_settings, options()).run)
            await bus.publish_many(FEED, [(e.partition, e) for e in events])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 2)
            tg.cancel_scope.cancel()
    assert [(x.ask, x.reason) for x in reader.of(d.Rejected)] == [
        ("huge", "ask a1/huge (count 10000000): over admission.max_pending_per_ask (20000)")
    ]
    assert {x.ask for x in reader.of(d.Allocated)} == {"small"}
