"""core/recovery: snapshots round-trip, and a new owner's replay rebuilds exactly the old owner's state.

The "old owner" is a :class:`DurableCache` driven by hand (feed records with Kafka-like offsets,
allocator proposals, preemption proposals, ticks); its decisions are the log. A snapshot is taken at
some point; a second core restored from it replays the feed records after it interleaved with the
logged decisions, and must end in the same state without re-deciding anything.
"""

from __future__ import annotations

import msgspec
import pytest

from sniper.core.recovery import (
    MAX_LABELS,
    MAX_QUANTITY,
    DurableCache,
    apply_logged,
    feed_problem,
    replay,
    restore,
    take_snapshot,
)
from sniper.core.state import Allocation
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.snapshot import SnapshotError, decode_body, encode_body, snapshot_msgpack
from tests.core_support import PARTITION, partition_raw, queue
from tests.recovery_support import Owner, busy_owner, durable_fingerprint, recover


def test_the_memory_of_flapping_asks_survives_a_snapshot() -> None:
    """A new owner damps a flapping ask as the old one would have: its withdrawals travel in the body."""
    o = busy_owner()
    o.tick(3.0)
    o.core.flaps[("b1", "k")] = (3, 2.0)
    core = restore(snapshot_msgpack.decode(msgspec.msgpack.encode(take_snapshot(o.core))))
    assert core.flaps == {("b1", "k"): (3, 2.0)}
    assert core._damped_until(("b1", "k")) == o.core._damped_until(("b1", "k")) > core.state.now


def test_snapshot_round_trips_through_msgpack() -> None:
    o = busy_owner()
    o.tick(3.0)
    snap = take_snapshot(o.core, kafka_partition=2, wall_time=1.5)
    decoded = snapshot_msgpack.decode(msgspec.msgpack.encode(snap))
    assert decoded == snap
    core = restore(decoded)
    assert durable_fingerprint(core) == durable_fingerprint(o.core)
    assert (core.decision_seq, core.feed_offset, core.counters) == (
        o.core.decision_seq,
        o.core.feed_offset,
        o.core.counters,
    )
    assert list(core.seen) == list(o.core.seen)
    assert core.state.now == o.core.state.now


def test_an_unreadable_snapshot_body_is_a_clear_error() -> None:
    snap = msgspec.structs.replace(take_snapshot(busy_owner().core), body=b"garbage")
    with pytest.raises(SnapshotError, match="unreadable"):
        restore(snap)


def test_replay_from_the_start_rebuilds_the_state_without_deciding_anything() -> None:
    o = busy_owner()
    empty = take_snapshot(DurableCache(PARTITION))
    core, result = recover(o, empty)
    assert durable_fingerprint(core) == durable_fingerprint(o.core)
    assert result.fresh == [] and result.divergences == []
    assert result.decisions_applied == 4  # the four allocations came from proposals
    assert core.decision_seq == o.core.decision_seq
    assert core.counters["alloc"] == o.core.counters["alloc"]


def test_replay_pins_a_container_placed_for_a_required_node_as_the_owner_did() -> None:
    o = busy_owner(
        2, f.AskAdded(partition=PARTITION, id="b1r", app="b1", ask="r", resource={"memory": 4}, count=1, node="n2")
    )
    pinned = {a.id: a.pinned for a in o.core.state.allocations.values()}
    assert sorted(pinned.values()) == [False, False, True]
    core, result = recover(o, take_snapshot(DurableCache(PARTITION)))
    assert result.divergences == [] and result.decisions_applied == 3
    assert {a.id: a.pinned for a in core.state.allocations.values()} == pinned
    assert durable_fingerprint(core) == durable_fingerprint(o.core)


def test_replay_after_a_snapshot_with_releases_preemption_kill_and_node_loss() -> None:
    o = busy_owner()
    snap = take_snapshot(o.core)
    # After the snapshot: a beneficiary arrives, the sniper preempts for it, a kill, a release, node loss.
    victim = _preempt_on_n1(o)
    assert any(isinstance(x, d.Preempt) for x in o.log), o.log[-3:]
    o.tick(100.0)  # past the grace: kill
    assert any(isinstance(x, d.Kill) for x in o.log)
    o.feed_event(f.AllocationReleased(partition=PARTITION, id="rel", allocation=victim.id))  # fulfils the reservation
    o.settle()
    o.feed_event(f.NodeRemoved(partition=PARTITION, id="gone", node="n2"))
    o.feed_event(f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"))  # a duplicate: no effect
    core, result = recover(o, snap)
    assert result.divergences == []
    assert result.fresh == []
    assert durable_fingerprint(core) == durable_fingerprint(o.core)
    assert core.decision_seq == o.core.decision_seq
    assert core.counters == o.core.counters
    assert {a.id for a in core.state.allocations.values() if a.killed} == {
        a.id for a in o.core.state.allocations.values() if a.killed
    }


def _without_typed_reasons(decision: d.DecisionMsg) -> d.DecisionMsg:
    """``decision`` as a log written before kills had a ``cause`` and reservation ends a ``code``."""
    if not isinstance(decision, d.Kill | d.ReservationEnded):
        return decision
    obj = msgspec.json.decode(msgspec.json.encode(decision))
    obj.pop("cause" if isinstance(decision, d.Kill) else "code")
    old: d.DecisionMsg = msgspec.json.decode(msgspec.json.encode(obj), type=d.DecisionMsg)
    return old


def test_replay_of_a_log_without_kill_causes_and_reservation_end_codes_rebuilds_the_state() -> None:
    o = busy_owner()
    snap = take_snapshot(o.core)
    _preempt_on_n1(o)
    o.tick(100.0)  # past the grace: the kill, and the reservation times out (the victim is not released)
    o.settle()
    assert [x.cause for x in o.log if isinstance(x, d.Kill)] == ["grace_expired"]
    assert [x.code for x in o.log if isinstance(x, d.ReservationEnded)] == ["timeout"]
    old = [_without_typed_reasons(x) for x in o.log]
    assert [x.cause for x in old if isinstance(x, d.Kill)] == [None]
    assert [x.code for x in old if isinstance(x, d.ReservationEnded)] == [None]
    core, result = recover(o, snap, old)
    assert result.divergences == [] and result.fresh == []
    assert durable_fingerprint(core) == durable_fingerprint(o.core)
    assert core.decision_seq == o.core.decision_seq


def test_decisions_never_published_come_back_fresh_and_nothing_is_decided_twice() -> None:
    o = busy_owner()
    snap = take_snapshot(o.core)
    o.feed_event(f.NodeRemoved(partition=PARTITION, id="gone", node="n1"))  # two allocation_lost decisions
    lost = [x for x in o.log if isinstance(x, d.AllocationLost)]
    assert len(lost) == 2
    # The old owner died after publishing only the first of them.
    published = [x for x in o.log if x.seq <= lost[0].seq]
    core, result = recover(o, snap, published)
    assert [(type(x), x.allocation) for x in result.fresh] == [(d.AllocationLost, lost[1].allocation)]
    assert result.fresh[0].seq == lost[1].seq
    assert durable_fingerprint(core) == durable_fingerprint(o.core)


def test_apply_logged_groups_the_victims_of_one_reservation() -> None:
    o = busy_owner()
    snap = take_snapshot(o.core)
    base = {"partition": PARTITION, "app": "b1", "queue": "root.b", "node": "n1", "resource": {"memory": 4}}
    extra = {"for_app": "a1", "for_queue": "root.a", "deadline": 20.0, "for_resource": {"memory": 8}}
    o.feed_event(
        f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"),
        f.AskAdded(partition=PARTITION, id="a1k", app="a1", ask="big", resource={"memory": 8}, count=1),
    )
    core = restore(snap)
    replay(core, [(off, e) for off, e in o.feed if off > snap.feed_offset], [])
    victims = sorted(a.id for a in core.state.allocations.values() if a.node == "n1")
    seq = core.decision_seq
    log: list[d.DecisionMsg] = [
        d.Preempt(seq=seq + 1 + i, allocation=v, for_ask="big", reservation="resv-7", t=5.0, **base, **extra)  # type: ignore[arg-type]
        for i, v in enumerate(victims)
    ]
    nxt, problems = apply_logged(core, log, 0)
    assert (nxt, problems) == (2, [])
    r = core.state.reservations["resv-7"]
    assert sorted(r.victims) == victims and r.resource == {"memory": 8}
    assert core.counters["reservation"] == 7 and core.decision_seq == seq + 2
    assert all(core.state.allocations[v].preempting for v in victims)
    assert core.state.now == 5.0


def test_replay_regenerates_a_preemption_cancelled_when_its_reservation_was_fulfilled_early() -> None:
    o = busy_owner()
    o.feed_event(
        f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"),
        f.AskAdded(partition=PARTITION, id="a1k", app="a1", ask="k", resource={"memory": 4}, count=1),
    )
    victim, other = sorted(a.id for a in o.core.state.allocations.values() if a.node == "n1")
    o.preempt("n1", [victim])
    snap = take_snapshot(o.core)
    assert o.core.state.allocations[victim].preempting
    o.feed_event(f.AllocationReleased(partition=PARTITION, id="rel", allocation=other))  # room before the victim goes
    (cancelled,) = [x for x in o.log if isinstance(x, d.PreemptCancelled)]
    assert cancelled.allocation == victim and not o.core.state.allocations[victim].preempting
    core, result = recover(o, snap)
    assert result.divergences == [] and result.fresh == []
    assert result.decisions_regenerated >= 2  # the allocation and the cancellation, from the release record
    assert durable_fingerprint(core) == durable_fingerprint(o.core)
    # a logged cancellation is applied as the change it recorded
    again = restore(snap)
    nxt, problems = apply_logged(again, [cancelled], 0)
    assert (nxt, problems) == (1, [])
    assert not again.state.allocations[victim].preempting
    assert not again.state.queues["root.b"].preempting.get("memory")


def test_absurd_quantities_are_rejected_with_the_reason() -> None:
    o = busy_owner()
    o.feed_event(f.NodeAdded(partition=PARTITION, id="huge", node="huge", capacity={"memory": MAX_QUANTITY + 1}))
    rejected = [x for x in o.log if isinstance(x, d.Rejected)]
    assert rejected and "sanity cap" in rejected[-1].reason
    assert "huge" not in o.core.state.nodes
    assert rejected[-1].feed_offset == o.offset


def test_feed_problem_refuses_what_would_poison_a_partition_and_nothing_else() -> None:
    raw = partition_raw(queue("a", guaranteed={"memory": "9" * 400 + "Gi"}), name=PARTITION)
    poison = f.PartitionConfigEvent(partition=PARTITION, id="poison", config=raw)
    assert "partition_config" in (feed_problem(poison) or "")
    many = {f"k{i}": "v" for i in range(MAX_LABELS + 1)}
    assert "labels" in (feed_problem(f.NodeAdded(partition=PARTITION, node="n", capacity={}, labels=many)) or "")
    huge = {"zone": "x" * 400_000}
    assert "over 256 characters" in (
        feed_problem(f.NodeAdded(partition=PARTITION, node="n", capacity={}, labels=huge)) or ""
    )
    fine = f.NodeAdded(partition=PARTITION, node="n", capacity={"memory": 1}, labels={"zone": "a"})
    good = f.PartitionConfigEvent(partition=PARTITION, id="ok", config=partition_raw(queue("a"), name=PARTITION))
    assert feed_problem(fine) is None and feed_problem(good) is None


def test_decisions_carry_the_feed_offset_they_were_made_after() -> None:
    o = busy_owner()
    allocated = [x for x in o.log if isinstance(x, d.Allocated)]
    last_feed = o.feed[-1][0]
    assert allocated and all(x.feed_offset == last_feed for x in allocated)


def _preempt_on_n1(o: Owner) -> Allocation:
    """A beneficiary arrives and the sniper preempts one container on n1 for it (returned)."""
    o.feed_event(
        f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"),
        f.AskAdded(partition=PARTITION, id="a1k", app="a1", ask="k", resource={"memory": 4}, count=1),
    )
    o.settle()
    victim = next(a for a in o.core.state.allocations.values() if a.node == "n1")
    o.preempt("n1", [victim.id])
    return victim


def _owner_with_a_killed_victim() -> Owner:
    o = busy_owner()
    victim = _preempt_on_n1(o)
    o.tick(100.0)  # past the grace: kill
    assert [x.allocation for x in o.log if isinstance(x, d.Kill)] == [victim.id]
    return o


def test_a_snapshot_kills_in_its_changes_and_one_that_lists_kills_aside_restores_the_same() -> None:
    o = _owner_with_a_killed_victim()
    killed = {a.id for a in o.core.state.allocations.values() if a.killed}
    snapshot = take_snapshot(o.core)
    body = decode_body(snapshot)
    assert body.killed == [] and [c.victims for c in body.changes if isinstance(c, p.VictimsKilled)] == [sorted(killed)]
    aside = msgspec.structs.replace(
        body, changes=[c for c in body.changes if not isinstance(c, p.VictimsKilled)], killed=sorted(killed)
    )
    codec, raw = encode_body(aside)
    older = msgspec.structs.replace(snapshot, codec=codec, body=raw)
    for restored in (restore(snapshot), restore(older)):
        assert {a.id for a in restored.state.allocations.values() if a.killed} == killed
        assert durable_fingerprint(restored) == durable_fingerprint(o.core)
        restored.tick(200.0)
        assert not [x for x in restored.drain().decisions if isinstance(x, d.Kill)]  # never killed twice
