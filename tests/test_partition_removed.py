"""``partition_removed``: a partition retired through the cache's one mutation path.

Its apps' allocations are ``released``, its reservations end, its nodes and configuration go, one
``partition_removed`` decision says what it held; replicas follow the same changes; a new owner that
restores a snapshot and replays the feed across the removal reaches the same state; and the same trace
fed again after it is taken as a new partition's, without a rejection.
"""

from __future__ import annotations

import math
import signal
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec
import pytest

from sniper.bench.e2e import stop_core
from sniper.core.config import parse_partition, partition_to_raw
from sniper.core.recovery import feed_problem, take_snapshot
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.snapshot import Snapshot
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_support import Harness, consistency_problems, fingerprint, partition_raw, queue, rejected_reasons
from tests.kafka_support import CoreSubprocess, TopicReader
from tests.preemption_support import proposal
from tests.recovery_support import Owner, durable_fingerprint, recover

P = "default"


def trace(queues: tuple[str, ...] = ("a", "b"), *, ids: bool = False) -> list[f.Feed]:
    """A small trace: two nodes, one app per queue asking for more than fits."""
    config = partition_raw(*(queue(q, guaranteed={"memory": 8}) for q in queues), policy="sniper")
    events: list[f.Feed] = [f.PartitionConfigEvent(partition=P, config=config)]
    events += [f.NodeAdded(partition=P, node=n, capacity={"memory": 8}) for n in ("n1", "n2")]
    for q in queues:
        events.append(f.AppAdded(partition=P, app=f"{q}-001", queue=f"root.{q}"))
        events.append(f.AskAdded(partition=P, app=f"{q}-001", ask="k", resource={"memory": 2}, count=6))
    if ids:
        events = [
            type(e)(**{**{k: getattr(e, k) for k in e.__struct_fields__}, "id": f"e{i}"}) for i, e in enumerate(events)
        ]
    return events


def running(h: Harness, events: list[f.Feed]) -> None:
    h.feed(*events)
    h.settle()


def usage(h: Harness) -> dict[str, Any]:
    """What a trace leaves running, by queue and app (allocation ids differ between two runs)."""
    fp = fingerprint(h.cache.state)
    return {
        "queues": {path: q["allocated"] for path, q in fp["queues"].items()},
        "apps": {name: (a["queue"], len(a["allocations"])) for name, a in fp["apps"].items()},
        "nodes": {name: n["allocated"] for name, n in fp["nodes"].items()},
    }


def test_a_removed_partition_releases_everything_and_says_what_it_held() -> None:
    h = Harness(None)
    running(h, trace())
    held = sorted(h.cache.state.allocations)
    assert len(held) == 8  # both nodes full
    decisions = h.feed(f.PartitionRemoved(partition=P, reason="a new trace"))
    released = [x.allocation for x in decisions if isinstance(x, d.Released)]
    assert sorted(released) == held
    assert decisions[-1] == d.PartitionRemoved(
        partition=P,
        seq=h.cache.decision_seq,
        t=h.cache.state.now,
        apps=2,
        allocations=8,
        nodes=2,
        reason="a new trace",
    )
    state = h.cache.state
    assert (state.config, state.nodes, state.apps, state.allocations, state.queues) == (None, {}, {}, {}, {})
    assert fingerprint(h.allocator.state) == {**fingerprint(state), "node_order": []}  # the replica followed
    assert consistency_problems(state) == [] and h.model.violations == []
    assert h.feed(f.AppAdded(partition=P, app="late", queue="root.a")) and rejected_reasons(h.decisions)[-1] == (
        "AppAdded: partition default has no configuration yet"
    )


def test_the_same_trace_again_after_the_removal_runs_as_on_a_fresh_partition() -> None:
    fresh = Harness(None)
    running(fresh, trace(ids=True))
    h = Harness(None)
    running(h, trace(ids=True))
    h.feed(f.PartitionRemoved(partition=P, id="retire"))
    before = len(h.decisions)
    running(h, trace(ids=True))  # the same event ids too: they name nothing after the removal
    assert rejected_reasons(h.decisions[before:]) == []
    assert usage(h) == usage(fresh)
    assert h.model.violations == []


def test_a_trace_whose_queues_differ_is_refused_on_a_running_partition_and_taken_after_the_removal() -> None:
    h = Harness(None)
    running(h, trace(("a", "b")))
    before = len(h.decisions)
    h.feed(*trace(("c",)))
    assert "PartitionConfigEvent: queue root.a is used by app a-001 and cannot be removed" in rejected_reasons(
        h.decisions[before:]
    )
    h.feed(f.PartitionRemoved(partition=P))
    before = len(h.decisions)
    running(h, trace(("c",)))
    assert rejected_reasons(h.decisions[before:]) == []
    assert set(h.cache.state.queues) == {"root", "root.c"} and len(h.cache.state.allocations) == 6


def test_removing_a_partition_with_nothing_in_it_only_says_so() -> None:
    h = Harness(None)
    decisions = h.feed(f.PartitionRemoved(partition=P))
    assert [type(x) for x in decisions] == [d.PartitionRemoved]
    assert (decisions[0].apps, decisions[0].allocations, decisions[0].nodes) == (0, 0, 0)


def test_a_preemption_in_flight_ends_with_the_partition() -> None:
    """A reservation whose victim is under notice: the reservation ends, the victim is released with its
    app, and nothing is left that a later tick could kill."""
    h = Harness(
        parse_partition(partition_raw(queue("a", guaranteed={"memory": 8}), queue("b", guaranteed={"memory": 8})))
    )
    h.feed(*(f.NodeAdded(partition=P, node=n, capacity={"memory": 8}) for n in ("n1", "n2")))
    h.feed(f.AppAdded(partition=P, app="b1", queue="root.b"))
    h.feed(f.AskAdded(partition=P, app="b1", ask="k", resource={"memory": 2}, count=8))
    h.settle()
    h.feed(f.AppAdded(partition=P, app="a1", queue="root.a"))
    h.feed(f.AskAdded(partition=P, app="a1", ask="k", resource={"memory": 2}))
    victim = sorted(h.cache.state.nodes["n1"].allocations)[0]
    h.cache.handle_proposal(proposal("a1", "k", "n1", [victim]))
    h.pump()
    assert h.cache.state.reservations and h.cache.state.allocations[victim].preempting
    decisions = h.feed(f.PartitionRemoved(partition=P))
    assert [type(x) for x in decisions].count(d.ReservationEnded) == 1
    assert victim in {x.allocation for x in decisions if isinstance(x, d.Released)}
    assert h.cache.state.reservations == {} and h.tick(h.now + 100) == []
    assert h.model.violations == []


# --- a new owner: snapshot, restore, replay across the removal -------------------------------------------


def snapshots_along(owner: Owner, events: list[f.Feed]) -> dict[int, Snapshot]:
    """Feeds ``events`` to ``owner`` one at a time, the allocator settling after each: its snapshot
    before the first and after each, by how many it had taken."""
    snapshots = {0: take_snapshot(owner.core)}
    for taken, event in enumerate(events, 1):
        owner.feed_event(event)
        owner.settle()
        snapshots[taken] = take_snapshot(owner.core)
    return snapshots


def test_a_successor_replaying_the_feed_across_the_removal_reaches_the_same_state() -> None:
    events = [*trace(ids=True), f.PartitionRemoved(partition=P, id="retire"), *trace(ids=True)]
    old = Owner()
    snapshots = snapshots_along(old, events)
    removal = len(trace()) + 1
    assert [x for x in old.log if isinstance(x, d.Rejected)] == []
    for at in (0, removal - 1, removal, removal + 3, len(events)):
        core, result = recover(old, snapshots[at])
        assert result.divergences == [] and result.fresh == [], at
        assert durable_fingerprint(core) == durable_fingerprint(old.core), at
        assert (core.decision_seq, core.counters, list(core.seen)) == (
            old.core.decision_seq,
            old.core.counters,
            list(old.core.seen),
        ), at


# --- end to end on Kafka: sniper core subprocesses, the broker, an independent reader --------------------


@pytest.fixture
async def bus(kafka_settings: KafkaSettings) -> AsyncIterator[KafkaBus]:
    async with KafkaBus(kafka_settings, validators={FEED: feed_problem}) as b:
        yield b


def _keyed(events: list[f.Feed]) -> list[tuple[str, f.Feed]]:
    return [(e.partition, e) for e in events]


@pytest.mark.kafka
async def test_on_kafka_a_trace_then_partition_removed_then_the_same_trace_runs_without_a_rejection(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    """A running core, a trace, ``partition_removed``, the same trace (ids and all) again: every event is
    taken; then the owner is killed and its successor, restoring and replaying across the removal, goes on
    deciding for the second trace's apps."""
    events = trace(ids=True)
    reader = TopicReader(
        await bus.subscribe_ready(FEED, group=kafka_settings.prefix + "watch-feed", capacity=1 << 15, bad="skip"),
        await bus.subscribe_ready(DECISIONS, group=kafka_settings.prefix + "watch-decisions", capacity=1 << 15),
    )

    def count(kind: type[d.DecisionMsg]) -> int:
        return sum(isinstance(x, kind) for x in reader.items)

    cores: list[CoreSubprocess] = []
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump_feed)
            tg.start_soon(reader.pump_decisions)
            try:
                cores.append(await CoreSubprocess.spawn(kafka_settings, tg, "retire", "--tick", "0.1"))
                await cores[0].until_assigned()
                await bus.publish_many(FEED, _keyed(events))
                await reader.until(lambda: count(d.Allocated) == 8)
                await bus.publish_many(FEED, _keyed([f.PartitionRemoved(partition=P, id="retire", reason="again")]))
                await reader.until(lambda: count(d.PartitionRemoved) == 1)
                await bus.publish_many(FEED, _keyed(events))
                await reader.until(lambda: count(d.Allocated) == 16)
                cores[0].process.send_signal(signal.SIGKILL)
                await cores[0].process.wait()
                cores.append(await CoreSubprocess.spawn(kafka_settings, tg, "retire", "--tick", "0.1"))
                await cores[1].until_assigned()
                # The apps still want containers: a new node's room goes to them, decided by the successor.
                await bus.publish_many(
                    FEED, _keyed([f.NodeAdded(partition=P, id="n3", node="n3", capacity={"memory": 8})])
                )
                await reader.until(
                    lambda: sum(isinstance(x, d.Allocated) and x.node == "n3" for x in reader.items) == 4
                )
            finally:
                with anyio.CancelScope(shield=True):
                    for core in cores:
                        await stop_core(core.process)
            tg.cancel_scope.cancel()
    removed = next(x for x in reader.items if isinstance(x, d.PartitionRemoved))
    assert (removed.apps, removed.allocations, removed.nodes, removed.reason) == (2, 8, 2, "again")
    assert [x.reason for x in reader.items if isinstance(x, d.Rejected)] == []
    assert {x.epoch for x in reader.items} == {1, 2}  # the successor restored the partition and decides
    assert [v for part in reader.checker.parts.values() for v in part.model.violations] == []


def test_a_removal_whose_reason_is_too_long_is_bad_input_naming_the_field() -> None:
    line = msgspec.json.encode({"type": "partition_removed", "reason": "x" * 1001})
    with pytest.raises(msgspec.ValidationError, match=r"length <= 1000 - at `\$.reason`"):
        msgspec.json.decode(line, type=f.Feed)


def test_in_the_simulator_the_demo_after_a_removal_decides_as_the_demo_alone() -> None:
    """The bundled demo, ``partition_removed``, the demo again (later in time): the second run's decisions
    are the first's, kind for kind, with no rejection and no invariant violated."""
    sc = scenario("demo")
    assert sc.config is not None
    demo = [f.PartitionConfigEvent(config=partition_to_raw(sc.config.partitions[0])), *sc.events]
    end = math.ceil(max(e.t for e in demo)) + 100.0  # whole seconds: the policies' rounds keep their phase
    again = [msgspec.structs.replace(e, t=e.t + end + 50.0) for e in demo]
    events = [*demo, f.PartitionRemoved(t=end, reason="again"), *again]
    alone = run_simulation(demo, None, SimulationSettings()).decisions
    twice = run_simulation(events, None, SimulationSettings())
    cut = next(i for i, x in enumerate(twice.decisions) if isinstance(x, d.PartitionRemoved))
    first, second = twice.decisions[:cut], twice.decisions[cut + 1 :]

    def kinds(decisions: list[d.DecisionMsg]) -> Counter[str]:
        return Counter(type(x).__name__ for x in decisions)

    assert kinds(second) == kinds(alone) and kinds(alone)["Preempt"] > 0
    assert kinds(first) == kinds(alone) + Counter(Released=kinds(first)["Released"] - kinds(alone)["Released"])
    assert twice.report["rejected"] == 0 and twice.report["invariant_violations"] == 0
