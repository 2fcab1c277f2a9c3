"""Typed reasons of decisions (docs/feed.md): every way a preemption reservation ends says so in its
``reservation_ended`` ``code``, every kill says what made it in its ``cause``, and a log written
without either still replays (tests/test_recovery.py) and still counts (tests/test_metrics.py). The
kills of opportunistic containers select by their cause in tests/test_overcommit.py (``opportunistic``
for a guaranteed ask, ``overcommit`` above ``preempt_above``)."""

from __future__ import annotations

from sniper.messages import decisions as d
from sniper.messages import feed as f
from tests.contract_support import gives_back, on_node, reserved_for_a1
from tests.core_support import queue
from tests.preemption_support import GRACE, PreemptHarness, one_reservation, preemption_raw


def codes(decisions: list[d.DecisionMsg]) -> list[d.ReservationEndCode | None]:
    return [x.code for x in decisions if isinstance(x, d.ReservationEnded)]


def kill_causes(decisions: list[d.DecisionMsg]) -> list[d.KillCause | None]:
    return [x.cause for x in decisions if isinstance(x, d.Kill)]


# ---------------------------------------------------------------------- reservation_ended codes


def test_a_reservation_whose_victims_outlive_it_ends_coded_timeout() -> None:
    h, _, _ = one_reservation()
    (r,) = h.cache.state.reservations.values()
    assert codes(h.tick(r.expires)) == ["timeout"]


def test_a_removed_partition_ends_its_reservation_coded_partition_removed() -> None:
    h, _, _ = one_reservation()
    assert codes(h.feed(f.PartitionRemoved())) == ["partition_removed"]


def test_an_unschedulable_node_ends_its_reservation_coded_node_unschedulable() -> None:
    h, node, _ = one_reservation()
    assert codes(h.feed(f.NodeUpdated(node=node, schedulable=False))) == ["node_unschedulable"]


def test_a_node_shrunk_below_the_need_ends_its_reservation_coded_node_shrank() -> None:
    h, node, _ = one_reservation()
    assert codes(h.feed(f.NodeUpdated(node=node, capacity={"memory": 90}))) == ["node_shrank"]


def test_a_node_that_shrinks_but_still_holds_the_need_ends_nothing() -> None:
    h, node, _ = one_reservation()
    assert codes(h.feed(f.NodeUpdated(node=node, capacity={"memory": 100}))) == []


def test_a_removed_node_ends_its_reservation_coded_node_removed() -> None:
    h, node, _ = one_reservation()
    assert codes(h.feed(f.NodeRemoved(node=node))) == ["node_removed"]


def test_a_withdrawn_ask_ends_its_reservation_coded_ask_withdrawn() -> None:
    h, _, _ = one_reservation()
    assert codes(h.feed(f.AskRemoved(app="a1", ask="big"))) == ["ask_withdrawn"]


def test_a_removed_app_ends_its_reservation_coded_ask_withdrawn() -> None:
    h, _, _ = one_reservation()
    assert codes(h.feed(f.AppRemoved(app="a1"))) == ["ask_withdrawn"]


def test_a_beneficiary_placed_on_free_room_ends_its_reservation_coded_placed_elsewhere() -> None:
    h, _, _ = one_reservation()
    h.tick(12.0)
    h.nodes("n3")
    h.settle()
    assert codes(h.decisions) == ["placed_elsewhere"]


def test_a_beneficiary_moved_to_room_given_back_ends_its_reservation_coded_given_back() -> None:
    h, _req, _node, other = reserved_for_a1()
    h.tick(12.0)
    gives_back(h, *on_node(h, "b1", other)[:2])
    assert codes(h.decisions) == ["given_back"]


def test_victims_that_keep_running_end_a_reservation_that_counted_on_them_coded_victims_kept() -> None:
    """The reservation's node keeps its capacity, but its victims keep running (what a settled preemption
    request does to the containers it named): the room it counted on cannot be promised."""
    h, node, victims = one_reservation()
    n = h.cache.state.nodes[node]
    h.cache.cancel_notices([h.alloc(v) for v in victims], "preemption request preq-1: covered")
    h.cache.keep_reservations(
        n, n.capacity, n.schedulable, "preemption request preq-1: covered; its victims keep running"
    )
    out = h.cache.drain().decisions
    ended = [x for x in out if isinstance(x, d.ReservationEnded)]
    assert [(x.code, x.reason) for x in ended] == [
        ("victims_kept", "preemption request preq-1: covered; its victims keep running")
    ]


# ---------------------------------------------------------------------- kill causes


def test_a_victim_that_outlives_its_grace_is_killed_with_cause_grace_expired() -> None:
    h, _, victims = one_reservation()
    decisions = h.tick(10.0 + GRACE)
    assert sorted(x.allocation for x in decisions if isinstance(x, d.Kill)) == sorted(victims)
    assert kill_causes(decisions) == ["grace_expired"] * len(victims)


def test_a_contract_container_killed_at_its_request_deadline_has_cause_request_deadline() -> None:
    h, req, _node, _other = reserved_for_a1()
    decisions = h.tick(req.deadline)
    assert kill_causes(decisions) and set(kill_causes(decisions)) == {"request_deadline"}
    assert all(d.kill_cause(x.reason) == "request_deadline" for x in decisions if isinstance(x, d.Kill))


def test_a_reservation_timing_out_with_its_victims_still_there_says_so() -> None:
    h, _, victims = one_reservation()
    (r,) = h.cache.state.reservations.values()
    (ended,) = [x for x in h.tick(r.expires) if isinstance(x, d.ReservationEnded)]
    assert (
        ended.reason
        == f"reservation timed out before its victims were gone ({len(victims)} of {len(victims)} still there)"
    )


def test_a_reservation_timing_out_after_its_victims_left_says_what_it_still_waited_for() -> None:
    """a (max 100) is reserved 50 on a node for a1; mid-grace a node joins and a2, also in a, takes 60 of
    it. The victims leave, but a1's container would now take a over its max: at the timeout the reason
    says the victims were gone and names the max it waited under, not that they were still there."""
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}, maximum={"memory": 100}), queue("b", guaranteed={"memory": 100})
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=2)
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    (placement,) = h.preempt_round(10.0).placements
    (r,) = h.cache.state.reservations.values()
    h.nodes("n3")
    h.run("a2", 60, "n3", at=12.0, queue_path="root.a")
    h.release(*placement.victims)
    assert r.id in h.cache.state.reservations and not any(v in h.cache.state.allocations for v in placement.victims)
    (ended,) = [x for x in h.tick(r.expires) if isinstance(x, d.ReservationEnded)]
    assert ended.code == "timeout"
    assert ended.reason == "reservation timed out after its victims were gone, waiting for room under the max of root.a"
