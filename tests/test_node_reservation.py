"""Node reservations (YARN's reserved containers): a large ask overtaken by smaller ones reserves the node
where it fits soonest, nothing else lands there, every reservation ends with its reason, and the
preemption policies de-reserve queues above their ideal before they preempt anything."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core import node_reservation
from sniper.core.cache import Cache, state_changes
from sniper.core.config import parse_partition
from sniper.core.preemption.placement import answer_placement_request
from sniper.core.recovery import DurableCache, apply_logged, restore, take_snapshot
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.simulator.model import ClusterModel
from tests.core_support import queue
from tests.node_reservation_support import churn, crowded, raw, reserved
from tests.preemption_support import PARTITION, PreemptHarness, preemption_raw


def unreserved(h: PreemptHarness) -> list[str]:
    return [x.reason for x in h.decisions if isinstance(x, d.NodeUnreserved)]


def test_a_big_ask_starves_behind_small_ones_without_reservations() -> None:
    h, on_n1, on_n2 = crowded(enabled=False)
    churn(h, on_n1, on_n2, 14)
    assert ("big", "n1") not in h.placements() and ("big", "n2") not in h.placements()
    assert not reserved(h)


def test_a_big_ask_reserves_a_node_and_gets_it() -> None:
    h, on_n1, on_n2 = crowded()
    churn(h, on_n1, on_n2, 14)
    (r,) = reserved(h)
    assert (r.app, r.ask, r.node) == ("a1", "big", "n1")  # most free memory, ties by name
    assert ("big", "n1") in h.placements()
    assert unreserved(h) == ["placed"]
    # While n1 was reserved, b's small asks went to n2 only.
    placed = next(x.seq for x in h.allocated() if x.ask == "big")
    meanwhile = [x.node for x in h.allocated() if x.ask == "more" and r.seq < x.seq < placed]
    assert meanwhile and set(meanwhile) == {"n2"}
    assert not h.model.violations
    assert not h.cache.state.node_reservations


def test_a_reservation_times_out() -> None:
    h, on_n1, on_n2 = crowded(timeout=5.0)
    churn(h, on_n1, on_n2, 1)
    (r,) = reserved(h)
    assert r.expires == r.t + 5.0
    h.tick(r.t + 5.0)
    assert unreserved(h) == ["timeout"]
    assert h.cache.state.ask(("a1", "big")).node_reserved is None  # type: ignore[union-attr]


def test_ask_removed_ends_it() -> None:
    h, on_n1, on_n2 = crowded()
    churn(h, on_n1, on_n2, 1)
    h.feed(f.AskRemoved(app="a1", ask="big"))
    assert unreserved(h) == ["ask_removed"]


def test_app_removed_ends_it() -> None:
    h, on_n1, on_n2 = crowded()
    churn(h, on_n1, on_n2, 1)
    h.feed(f.AppRemoved(app="a1"))
    assert unreserved(h) == ["app_removed"]


def test_node_removed_mid_reservation() -> None:
    h, on_n1, on_n2 = crowded()
    churn(h, on_n1, on_n2, 1)
    h.feed(f.NodeRemoved(node="n1"))
    assert unreserved(h) == ["node_removed"]
    assert not h.cache.state.node_reservations
    h.settle()  # the ask may reserve again elsewhere once overtaken; nothing is left dangling
    assert not h.model.violations


def test_a_node_turning_unschedulable_ends_it() -> None:
    h, on_n1, on_n2 = crowded()
    churn(h, on_n1, on_n2, 1)
    h.feed(f.NodeUpdated(node="n1", schedulable=False))
    assert unreserved(h) == ["node_removed"]


def test_the_cache_refuses_other_asks_on_a_reserved_node() -> None:
    h, on_n1, on_n2 = crowded()
    churn(h, on_n1, on_n2, 1)
    h.tick(h.now + 1)
    h.release(on_n1.pop(0))
    why = h.cache.check_placement("b1", "more", "n1")
    assert why is not None and "reserved for a1/big" in why
    assert h.cache.check_placement("a1", "big", "n1") == "does not fit the node's free room"


def test_a_snapshot_and_a_logged_decision_restore_it() -> None:
    h, on_n1, on_n2 = crowded()
    before = state_changes(h.cache.state)
    churn(h, on_n1, on_n2, 1)
    # Snapshot: the reservation is rebuilt from the state's changes.
    copy = PartitionState(PARTITION)
    copy.apply_all(state_changes(h.cache.state))
    (r,) = copy.node_reservations.values()
    assert (r.node, r.app, r.ask) == ("n1", "a1", "big")
    assert copy.queues["root.a"].node_reserved == {"memory": 60}
    # Replay: a logged node_reserved turns back into the change, and the id counter follows.
    core = Cache(PARTITION)
    core.state.apply_all(before)
    log = [x for x in h.decisions if isinstance(x, d.NodeReserved)]
    apply_logged(core, log, 0)
    assert core.state.node_reservations["n1"].id == log[0].reservation
    assert core.counters["node_reservation"] == 1


def over_ideal(policy: str, holder_over: bool = True) -> PreemptHarness:
    """a holds n2 and 70 of n1 and reserves n1 for a 60; b (guarantee 150) asks for five 20s."""
    h = PreemptHarness(
        raw(queue("a", guaranteed={"memory": 50}), queue("b", guaranteed={"memory": 150}), policy=policy)
    )
    h.nodes("n1", "n2")
    h.fill("a1", "root.a", "n2", [10] * 10)
    h.fill("a1", "root.a", "n1", [10] * 7, start=10)
    holder = "a1" if holder_over else "b2"
    if not holder_over:
        h.app("b2", "root.b")
    h.ask(holder, "big", 60)
    node_reservation.reserve(h.cache, holder, "big", "n1")
    h.pump()
    h.app("b1", "root.b")
    h.ask("b1", "small", 20, count=5)
    h.starve(2)
    return h


def test_sniper_dereserves_a_queue_over_its_ideal_before_preempting() -> None:
    h = over_ideal("sniper")
    first = h.preempt_round(10.0)
    assert first.proposal is not None and first.proposal.dereserve == ["n1"]
    assert not first.preempts()
    (end,) = [x for x in first.decisions if isinstance(x, d.NodeUnreserved)]
    assert (end.reason, end.policy) == ("dereserved", "sniper")
    h.settle()
    assert ("small", "n1") in h.placements()  # the freed node served b without a victim
    later = h.preempt_round(11.0)
    assert later.proposal is None or not later.proposal.dereserve
    assert not h.model.violations


def test_a_reservation_on_a_full_node_is_cancelled_so_that_preemption_can_use_the_node() -> None:
    """a (guarantee 50) fills the only node and reserves it for a 60; b (guarantee 50) asks for a 40 that
    only preemption can place. The reservation keeps preemption off the node, so sniper cancels it
    although no free room holds the 40 yet (YARN drops an over-served queue's reserved containers
    first), then preempts on the node in the next round: b does not wait for the reservation's timeout."""
    h = PreemptHarness(raw(queue("a", guaranteed={"memory": 50}), queue("b", guaranteed={"memory": 50})))
    h.nodes("n1")
    h.fill("a1", "root.a", "n1", [10] * 10)
    h.ask("a1", "big", 60)
    node_reservation.reserve(h.cache, "a1", "big", "n1")
    h.pump()
    h.app("b1", "root.b")
    h.ask("b1", "want", 40)
    h.starve(2)
    first = h.preempt_round(10.0)
    assert first.proposal is not None and first.proposal.dereserve == ["n1"] and not first.preempts()
    h.starve(1)
    second = h.preempt_round(11.0)
    assert {x.node for x in second.preempts()} == {"n1"} and len(second.preempts()) == 4
    h.release(*(x.allocation for x in second.preempts()))  # the AMs let the victims go
    h.settle()
    assert ("want", "n1") in h.placements()
    assert not h.model.violations


def test_proportional_dereserves_before_preempting() -> None:
    h = over_ideal("proportional")
    first = h.preempt_round(10.0)
    assert first.proposal is not None and first.proposal.dereserve == ["n1"]
    assert not first.preempts()
    assert unreserved(h) == ["dereserved"]
    h.settle()
    assert ("small", "n1") in h.placements()


def test_a_queue_below_its_ideal_keeps_its_reservation() -> None:
    h = over_ideal("sniper", holder_over=False)
    for t in (10.0, 11.0, 12.0):
        out = h.preempt_round(t)
        assert out.proposal is None or not out.proposal.dereserve
    assert "dereserved" not in unreserved(h)
    assert h.cache.state.node_reservations["n1"].app == "b2"


SHAPES = st.sampled_from(
    [
        {"memory": 10, "vcore": 1},
        {"memory": 60, "vcore": 1},
        {"memory": 10, "vcore": 6},
        {"memory": 30, "vcore": 2, "gpu": 1},
    ]
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    asks=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), SHAPES, st.integers(1, 6)), min_size=1, max_size=8),
    releases=st.lists(st.integers(0, 1000), max_size=25),
)
def test_property_one_reservation_per_node_nothing_else_lands_and_every_one_ends(
    asks: list[tuple[str, dict[str, int], int]], releases: list[int]
) -> None:
    h = PreemptHarness(
        raw(
            queue("a", guaranteed={"memory": 100}),
            queue("b", guaranteed={"memory": 100}),
            queue("c", guaranteed={"memory": 100}),
            timeout=5.0,
        )
    )
    cap = {"memory": 100, "vcore": 8, "gpu": 2}
    h.feed(*(f.NodeAdded(node=n, capacity=cap) for n in ("n1", "n2", "n3")))
    for q in "abc":
        h.app(f"{q}1", f"root.{q}")
    for i, (q, shape, count) in enumerate(asks):
        h.feed(f.AskAdded(app=f"{q}1", ask=f"k{i}", resource=shape, count=count))
    h.settle()
    for i, pick in enumerate(releases):
        running = sorted(h.cache.state.allocations)
        if running:
            h.release(running[pick % len(running)])
        h.tick(float(i + 1))
        h.settle()
        nodes = [r.node for r in h.cache.state.node_reservations.values()]
        assert len(nodes) == len(set(nodes))
        assert {a.node_reserved for app in h.cache.state.apps.values() for a in app.asks.values()} - {None} == set(
            nodes
        )
    for q in "abc":
        h.feed(f.AppRemoved(app=f"{q}1"))
    assert not h.cache.state.node_reservations
    made = {x.reservation for x in h.decisions if isinstance(x, d.NodeReserved)}
    ended = [x.reservation for x in h.decisions if isinstance(x, d.NodeUnreserved)]
    assert sorted(ended) == sorted(made)
    assert {x.reason for x in h.decisions if isinstance(x, d.NodeUnreserved)} <= set(node_reservation.REASONS)
    assert not h.model.violations, h.model.violations[:3]


def test_a_dereserved_ask_does_not_reserve_again_before_the_timeout() -> None:
    h = over_ideal("sniper")
    h.preempt_round(20.0)
    ask = h.cache.state.ask(("a1", "big"))
    assert ask is not None and ask.reserve_after == 20.0 + 60.0
    why = node_reservation._check(h.cache.state, p.NodeReserve(app="a1", ask="big", node="n2"))
    assert why is not None and "de-reserved" in why
    # The hold-off survives a snapshot (it travels on the ask).
    copy = PartitionState(PARTITION)
    copy.apply_all(state_changes(h.cache.state))
    assert copy.ask(("a1", "big")).reserve_after == 80.0  # type: ignore[union-attr]


def test_a_durable_cache_snapshot_restores_it_and_the_restored_cache_ends_it() -> None:
    """Through messages/snapshot.py: take_snapshot, restore, and the restored cache times it out."""
    h, on_n1, on_n2 = crowded(timeout=30.0)
    churn(h, on_n1, on_n2, 1)
    (r,) = reserved(h)
    durable = restore_from(h.cache)
    snap = take_snapshot(durable)
    back = restore(snap)
    held = back.state.node_reservations["n1"]
    assert (held.id, held.app, held.ask, held.expires) == (r.reservation, "a1", "big", r.expires)
    assert back.counters["node_reservation"] == 1
    back.tick(r.expires)
    (end,) = [x for x in back.drain().decisions if isinstance(x, d.NodeUnreserved)]
    assert (end.reservation, end.reason) == (r.reservation, "timeout")


def restore_from(cache: Cache) -> DurableCache:
    """A durable cache holding ``cache``'s state (as a new owner would after replay)."""
    durable = DurableCache(PARTITION)
    durable.state.apply_all(state_changes(cache.state))
    durable.counters.update(cache.counters)
    durable.drain()
    return durable


def test_the_checker_flags_a_second_reservation_and_another_ask_on_a_reserved_node() -> None:
    model = ClusterModel(PARTITION, parse_partition(raw(queue("a"), queue("b"))))
    model.on_event(f.NodeAdded(node="n1", capacity={"memory": 100}))
    for app, q in (("a1", "root.a"), ("b1", "root.b")):
        model.on_event(f.AppAdded(app=app, queue=q))
        model.on_event(f.AskAdded(app=app, ask="k", resource={"memory": 10}, count=5))
    common: dict[str, Any] = {"queue": "root.a", "node": "n1", "resource": {"memory": 10}}
    model.on_decision(d.NodeReserved(seq=1, reservation="nresv-1", app="a1", ask="k", expires=60.0, **common))
    assert not model.violations
    model.on_decision(d.Allocated(seq=3, allocation="alloc-1", app="b1", ask="k", **{**common, "queue": "root.b"}))
    model.on_decision(d.Allocated(seq=4, allocation="alloc-2", app="a1", ask="k", **common))
    model.on_decision(d.NodeReserved(seq=5, reservation="nresv-2", app="b1", ask="k", expires=60.0, **common))
    reasons = [v.reason for v in model.violations]
    assert len(reasons) == 2 and "alloc-1 on n1, reserved for a1/k" in reasons[0]
    assert "already reserved by nresv-1" in reasons[1]


def test_a_preemption_placement_on_a_node_reserved_since_is_refused() -> None:
    """The allocator placed victims on a replica that did not know the node reservation yet."""
    h = PreemptHarness(preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100})))
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=2)
    h.ask("b1", "more", 60)
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    request = h.policy.round(h.allocator.state, h.allocator.view_seq, 10.0)
    assert isinstance(request, p.PlacementRequest)
    proposal = h.policy.on_reply(answer_placement_request(h.allocator, request), 10.0)
    assert proposal is not None
    (pl,) = proposal.placements
    node_reservation.reserve(h.cache, "b1", "more", pl.node)
    h.pump()
    outcome, decisions = h.commit(proposal)
    assert outcome.accepted == 0 and any("reserved for b1/more" in why for why in outcome.rejected.values())
    assert not [x for x in decisions if isinstance(x, d.Preempt)]
    assert not h.model.violations


def test_an_app_holds_one_node_reservation_at_a_time() -> None:
    h, on_n1, on_n2 = crowded()
    h.ask("a1", "big2", 60)
    churn(h, on_n1, on_n2, 2)
    assert [(r.ask, r.node) for r in reserved(h)] == [("big", "n1")]
    why = node_reservation._check(h.cache.state, p.NodeReserve(app="a1", ask="big2", node="n2"))
    assert why == "app a1 already holds a node reservation"
