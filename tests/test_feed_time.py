"""Feed time: a record's ``t`` is finite and bounded, and one stamped too far ahead of the partition's
clock is refused (a ``rejected`` decision and a dead letter) without moving the clock, the same way
live and when a successor replays it."""

from __future__ import annotations

import math

import anyio
import msgspec
import pytest

from sniper.cluster.logread import read_partition
from sniper.cluster.process import CoreProcess
from sniper.core.config import parse_partition
from sniper.core.recovery import CLOCK_REFUSED, DurableCache, refused_for_time, replay, restore, take_snapshot
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.codec import BadInput, decode_feed_lines
from sniper.messages.deadletter import deadletter_msgpack
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.transport.bus import DEADLETTER, DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_process_support import WAIT, Decisions, options, workload
from tests.core_support import partition_raw, queue
from tests.kafka_support import bus
from tests.preemption_support import two_queues

__all__ = ["bus"]  # the fixture, used by name

SKEW = 60.0
EPOCH_T = 1795788460.0  # a feed stamped in epoch seconds


@pytest.mark.parametrize("t", [1e308, math.inf, -math.inf, math.nan, f.MAX_T * 2], ids=str)
def test_a_time_that_is_not_finite_or_beyond_any_clock_is_undecodable(t: float) -> None:
    raw = msgspec.msgpack.encode({"type": "node_removed", "node": "n1", "t": t})
    with pytest.raises(msgspec.ValidationError, match=r"\$\.t"):
        msgspec.msgpack.Decoder(f.Feed).decode(raw)


def _owner() -> DurableCache:
    raw = partition_raw(queue("a"), name="p")
    raw["admission"] = {"max_clock_skew": SKEW}
    core = DurableCache("p", parse_partition(raw))
    _handle(core, 0, f.NodeAdded(t=1000, partition="p", node="n1", capacity={"memory": 64, "vcore": 64}))
    core.tick(1000)
    core.drain()
    return core


def _handle(core: DurableCache, offset: int, event: f.Feed) -> list[d.DecisionMsg]:
    core.feed_offset = offset
    core.handle_event(event)
    return core.drain().decisions


def test_a_time_too_far_ahead_is_refused_without_moving_the_clock() -> None:
    core = _owner()
    far = f.AppAdded(t=1000 + SKEW + 1, partition="p", app="late", queue="root.a")
    (rejected,) = _handle(core, 1, far)
    assert isinstance(rejected, d.Rejected) and rejected.code == "clock_ahead"
    assert rejected.reason.startswith(CLOCK_REFUSED)
    assert "over admission.max_clock_skew (60 s)" in rejected.reason
    assert [(r.offset, r.event) for r in core.take_refused()] == [(1, far)]
    assert core.feed_time == 1000 and "late" not in core.state.apps
    assert _handle(core, 2, msgspec.structs.replace(far, t=1000 + SKEW)) == []  # at the bound: accepted
    assert core.feed_time == 1000 + SKEW and "late" in core.state.apps


def test_the_clock_the_bound_counts_from_is_the_later_of_state_time_and_feed_time() -> None:
    core = _owner()
    core.tick(5000)  # the partition's clock went on without feed records
    assert _handle(core, 1, f.AppAdded(t=5000 + SKEW, partition="p", app="x", queue="root.a")) == []
    assert core.take_refused() == []


def test_the_first_time_a_partition_sees_sets_its_clock_whatever_it_is() -> None:
    core = DurableCache("p", parse_partition(partition_raw(queue("a"), name="p")))
    assert _handle(core, 0, f.NodeAdded(t=1.7e9, partition="p", node="n1", capacity={"memory": 8})) == []
    assert core.feed_time == 1.7e9 and core.state.now == 1.7e9
    (synced,) = _handle(core, 1, f.Sync(t=5, partition="p", id="s"))
    assert synced.t == 1.7e9  # a later event stamped in the past never moves the clock back


def test_the_first_decision_of_an_epoch_stamped_partition_carries_the_feeds_time_live_and_on_replay() -> None:
    owner = DurableCache("p", parse_partition(partition_raw(queue("a"), name="p")))
    feed: list[tuple[int, f.Feed]] = [(0, f.Sync(t=EPOCH_T, partition="p", id="hello"))]
    (synced,) = _handle(owner, *feed[0])
    assert isinstance(synced, d.Synced) and synced.t == EPOCH_T
    successor = DurableCache("p", parse_partition(partition_raw(queue("a"), name="p")), epoch=2)
    (again,) = replay(successor, feed, []).fresh
    assert again.t == EPOCH_T and successor.state.now == EPOCH_T


def test_a_successor_judges_each_time_as_the_owner_logged_it() -> None:
    owner = _owner()
    snapshot = take_snapshot(owner)
    owner.tick(1500)  # live, the owner's clock ran on; the snapshot's did not
    feed: list[tuple[int, f.Feed]] = [
        (1, f.AppAdded(t=1400, partition="p", app="app", queue="root.a")),  # accepted by the owner's clock
        (2, f.AskAdded(t=1400, partition="p", app="app", ask="k", resource={"memory": 4, "vcore": 1})),
        (3, f.NodeRemoved(t=1e9, partition="p", node="n1")),  # refused
    ]
    log: list[d.DecisionMsg] = []
    for offset, event in feed:
        log += _handle(owner, offset, event)
    owner.allocate("app", "k", "n1")
    log += owner.drain().decisions
    assert [type(x).__name__ for x in log] == ["Rejected", "Allocated"]
    successor = restore(snapshot, epoch=2)
    assert successor.clock_problem(feed[0][1]) is not None  # on its own clock it would refuse the app
    result = replay(successor, feed, log)
    assert result.divergences == [] and result.fresh == []
    assert sorted(successor.state.allocations) == sorted(owner.state.allocations)
    assert "n1" in successor.state.nodes and successor.feed_time == owner.feed_time == 1400
    assert [(r.offset, r.event) for r in result.refused] == [(3, feed[2][1])]


def test_a_log_written_without_rejection_codes_is_judged_by_the_reason() -> None:
    owner = _owner()
    snapshot = take_snapshot(owner)
    owner.tick(1500)
    feed: list[tuple[int, f.Feed]] = [(1, f.NodeRemoved(t=1e9, partition="p", node="n1"))]
    log = [msgspec.structs.replace(x, code=None) for x in _handle(owner, *feed[0])]
    assert isinstance(log[0], d.Rejected) and refused_for_time(log[0])
    assert not refused_for_time(d.Rejected(reason=f"{CLOCK_REFUSED}...", code="invalid"))
    result = replay(restore(snapshot, epoch=2), feed, log)
    assert result.divergences == [] and [r.offset for r in result.refused] == [1]


def test_past_the_log_a_successor_judges_on_its_own_clock() -> None:
    successor = restore(take_snapshot(_owner()), epoch=2)
    result = replay(successor, [(1, f.NodeRemoved(t=1e9, partition="p", node="n1"))], [])
    assert [r.offset for r in result.refused] == [1] and "n1" in successor.state.nodes
    assert isinstance(result.fresh[0], d.Rejected) and result.fresh[0].reason.startswith(CLOCK_REFUSED)


async def test_on_kafka_a_far_time_is_dead_lettered_once_and_moves_no_clock_live_or_after_failover(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    far = f.AppAdded(partition="p1", id="far", app="far", queue="root.a", t=1e9)
    with anyio.fail_after(WAIT):
        reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            first = CoreProcess(kafka_settings, options())
            async with anyio.create_task_group() as first_group:
                first_group.start_soon(first.run)
                await first.ready.wait()
                for event in [*workload("p1", 2), far, *workload("p1", 1, tag="b")[-1:]]:
                    await bus.publish(FEED, "p1", event)
                await reader.until(lambda _: len(reader.of(d.Allocated)) == 3)
                (rejected,) = reader.of(d.Rejected)
                assert rejected.reason.startswith(CLOCK_REFUSED)
                host = first.hosts["p1"]
                now = host.time.now()
                assert now is not None and now < 1e6 and host.core.state.now < 1e6
                first_group.cancel_scope.cancel()
            second = CoreProcess(kafka_settings, options())
            await tg.start(second.run)
            restored = await second.wait_hosting("p1")
            now = restored.time.now()
            assert now is not None and now < 1e6 and "far" not in restored.core.state.apps
            await bus.publish(FEED, "p1", workload("p1", 1, tag="c")[-1])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 4)
            tg.cancel_scope.cancel()
    records = await read_partition(kafka_settings, DEADLETTER, bus.partition_for("p1"))
    letters = [deadletter_msgpack.decode(r.value or b"") for r in records]
    assert [x.reason for x in letters] == [rejected.reason]
    assert msgspec.msgpack.decode(letters[0].payload, type=f.Feed) == far


def test_a_trace_line_stamped_beyond_any_clock_is_bad_input_named_with_its_line() -> None:
    lines = ['{"type": "node_removed", "node": "n1", "t": 1e308}', '{"type": "node_removed", "node": "n1", "t": 5}']
    first, second = decode_feed_lines(lines, "trace.jsonl")
    assert isinstance(first, BadInput) and first.where == "trace.jsonl:1" and "$.t" in first.reason
    assert isinstance(second, f.NodeRemoved)


async def test_on_kafka_an_infinite_or_1e308_time_is_dead_lettered_once_live_and_on_replay(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    bad = [
        msgspec.msgpack.encode({"type": "node_removed", "partition": "p1", "id": f"t{i}", "node": "n1", "t": t})
        for i, t in enumerate([math.inf, 1e308])
    ]
    quiet = options(snapshot_interval=3600.0, snapshot_every=1_000_000)  # the successor replays every record
    with anyio.fail_after(WAIT):
        reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            first = CoreProcess(kafka_settings, quiet)
            async with anyio.create_task_group() as first_group:
                first_group.start_soon(first.run)
                await first.ready.wait()
                await bus.publish_many(FEED, [("p1", e) for e in workload("p1", 1)])
                await reader.until(lambda _: len(reader.of(d.Allocated)) == 1)  # p1 runs: the rest come live
                for raw in bad:
                    await bus.publish_raw(FEED, "p1", raw)
                await bus.publish(FEED, "p1", workload("p1", 1, tag="b")[-1])
                await reader.until(lambda _: len(reader.of(d.Allocated)) == 2)
                crashed = first.hosts.pop("p1")  # the owner dies without a final snapshot
                await crashed.stop(final_snapshot=False)
                first_group.cancel_scope.cancel()
            second = CoreProcess(kafka_settings, quiet)
            await tg.start(second.run)
            await bus.publish(FEED, "p1", workload("p1", 1, tag="c")[-1])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 3)
            nodes = set((await second.wait_hosting("p1")).core.state.nodes)
            replayed = second.counters_for("p1").recovered_feed
            tg.cancel_scope.cancel()
    records = await read_partition(kafka_settings, DEADLETTER, bus.partition_for("p1"))
    letters = [deadletter_msgpack.decode(r.value or b"") for r in records]
    assert sorted(x.payload for x in letters) == sorted(bad)  # one each, live; none again on replay
    assert all("$.t" in x.reason for x in letters)
    assert replayed >= 1  # the successor replayed the ask published after the bad records
    assert "n1" in nodes  # the node was never removed
    assert reader.of(d.Rejected) == []


LATER = 30.0  # seconds after the start that the beneficiary asks


def _epoch_trace(name: str) -> tuple[list[f.Feed], list[f.Feed]]:
    """A feed in epoch seconds: b fills both nodes at the start, a asks for most of a node later."""
    raw = {**two_queues(64, 64, interval=0.2, max_ignored_over_capacity=0.0), "name": name}
    setup: list[f.Feed] = [
        f.Sync(partition=name, id="hello", t=EPOCH_T),
        f.PartitionConfigEvent(partition=name, id="config", config=raw, t=EPOCH_T),
        *(f.NodeAdded(partition=name, id=n, node=n, capacity={"memory": 64}, t=EPOCH_T) for n in ("n1", "n2")),
        f.AppAdded(partition=name, id="app-b", app="b", queue="root.b", t=EPOCH_T),
        f.AskAdded(partition=name, id="ask-b", app="b", ask="b", resource={"memory": 8}, count=16, t=EPOCH_T),
    ]
    big: list[f.Feed] = [
        f.AppAdded(partition=name, id="app-a", app="a", queue="root.a", t=EPOCH_T + LATER),
        f.AskAdded(partition=name, id="ask-a", app="a", ask="a", resource={"memory": 56}, t=EPOCH_T + LATER),
    ]
    return setup, big


def _victim_costs(decisions: list[d.DecisionMsg]) -> list[tuple[float, list[float]]]:
    """Per victim set: its cost, and each victim's running time from its start to its kill (deadline)."""
    started = {x.allocation: x.t for x in decisions if isinstance(x, d.Allocated)}
    preempts = [x for x in decisions if isinstance(x, d.Preempt) and not x.observe_only]
    out = []
    for reservation in sorted({x.reservation for x in preempts}):
        victims = [x for x in preempts if x.reservation == reservation]
        (cost,) = {x.cost for x in victims}
        assert all(x.reason.endswith(f"cost {cost}") for x in victims)
        out.append((cost, [x.deadline - started[x.allocation] for x in victims]))
    assert out
    return out


def test_in_the_simulator_an_epoch_stamped_trace_keeps_its_time_and_decides_as_from_zero() -> None:
    setup, big = _epoch_trace("epoch")
    trace = [*setup, *big]
    settings = SimulationSettings(until=LATER + 60)
    in_epoch = run_simulation(trace, None, settings).decisions
    from_zero = run_simulation([msgspec.structs.replace(e, t=e.t - EPOCH_T) for e in trace], None, settings).decisions
    first = in_epoch[0]
    assert isinstance(first, d.Synced) and first.t == EPOCH_T
    assert [type(x) for x in in_epoch] == [type(x) for x in from_zero]
    assert all(abs((x.t - EPOCH_T) - y.t) < 1e-6 for x, y in zip(in_epoch, from_zero, strict=True))
    for cost, running in _victim_costs(in_epoch):
        assert all(LATER + 15.0 <= r <= LATER + 17.0 for r in running)  # the grace is 15 s
        # The policy costs a set as its round saw the clock, up to a tick before the cache committed it.
        assert sum(running) - len(running) * settings.tick <= cost <= sum(running)
    assert [c for c, _ in _victim_costs(in_epoch)] == [c for c, _ in _victim_costs(from_zero)]


async def test_on_kafka_an_epoch_stamped_feed_starts_the_clock_and_costs_victims_by_their_running_time(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    """The partition's clock starts at the feed's first ``t`` (epoch seconds): decisions carry the feed's
    time, and a victim's cost is its running time until its kill, in seconds, never its age since 1970."""
    name = "epoch"
    setup, big = _epoch_trace(name)
    with anyio.fail_after(WAIT):
        reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            await tg.start(CoreProcess(kafka_settings, options()).run)
            for event in setup:
                await bus.publish(FEED, name, event)
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 16)
            for event in big:
                await bus.publish(FEED, name, event)
            await reader.until(lambda _: any(not x.observe_only for x in reader.of(d.Preempt)))
            tg.cancel_scope.cancel()
    first = reader.items[0]
    assert isinstance(first, d.Synced) and first.t == EPOCH_T
    assert all(EPOCH_T <= x.t < EPOCH_T + WAIT for x in reader.of(d.Allocated))
    for cost, running in _victim_costs(reader.items):
        assert all(LATER + 15.0 <= r < LATER + 15.0 + WAIT for r in running)  # each one's run until its kill
        # The policy costs a set as its round saw the clock, a moment before the cache committed it.
        assert sum(running) - len(running) * WAIT < cost <= sum(running) + 0.001  # the cost in ms
