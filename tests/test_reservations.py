"""The reservation lifecycle: a reservation stays while it can still be fulfilled, ends with its true
reason when it cannot (node shrank below need, unschedulable, removed), and its beneficiary keeps
competing for free room elsewhere (placed there, its victims get ``preempt_cancelled``)."""

from __future__ import annotations

from sniper.messages import decisions as d
from sniper.messages import feed as f
from tests.core_support import queue
from tests.preemption_support import PreemptHarness, preemption_raw

GRACE = 15.0


def reserved() -> tuple[PreemptHarness, str, list[str]]:
    """b holds n1 and n2 (100 each, in 50s); a (guarantee 100) asks for 50 and gets a reservation."""
    raw = preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100}))
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=2)
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    result = h.preempt_round(10.0)
    (pl,) = result.placements
    return h, pl.node, list(pl.victims)


def ended(decisions: list[d.DecisionMsg]) -> list[str]:
    return [x.reason for x in decisions if isinstance(x, d.ReservationEnded)]


def cancelled(decisions: list[d.DecisionMsg]) -> list[str]:
    return [x.allocation for x in decisions if isinstance(x, d.PreemptCancelled)]


def test_a_node_that_grows_keeps_its_reservation() -> None:
    h, node, victims = reserved()
    decisions = h.feed(f.NodeUpdated(node=node, capacity={"memory": 120}))
    assert ended(decisions) == [] and cancelled(decisions) == []
    assert len(h.cache.state.reservations) == 1 and all(h.alloc(v).preempting for v in victims)
    h.tick(10.0 + GRACE)
    h.release(*victims)
    assert [x.app for x in h.allocated()][-1] == "a1"
    assert h.model.violations == []


def test_a_node_that_shrinks_but_still_holds_the_need_keeps_its_reservation() -> None:
    h, node, _ = reserved()
    decisions = h.feed(f.NodeUpdated(node=node, capacity={"memory": 100}, schedulable=True))
    assert ended(decisions) == []
    assert len(h.cache.state.reservations) == 1


def test_a_node_that_shrinks_below_the_need_ends_it_with_that_reason() -> None:
    h, node, _ = reserved()
    decisions = h.feed(f.NodeUpdated(node=node, capacity={"memory": 90}))
    (reason,) = ended(decisions)
    assert "shrank below" in reason
    assert not h.cache.state.reservations
    assert h.model.violations == []


def test_an_unschedulable_node_ends_it_with_that_reason() -> None:
    h, node, victims = reserved()
    decisions = h.feed(f.NodeUpdated(node=node, schedulable=False))
    (reason,) = ended(decisions)
    assert "unschedulable" in reason
    assert sorted(cancelled(decisions)) == sorted(victims)


def test_a_removed_node_ends_it_with_that_reason() -> None:
    h, node, _ = reserved()
    decisions = h.feed(f.NodeRemoved(node=node))
    (reason,) = ended(decisions)
    assert "removed" in reason


def test_a_node_joining_during_the_grace_takes_the_beneficiary_and_its_victims_live() -> None:
    h, _, victims = reserved()
    (rid,) = h.cache.state.reservations
    h.tick(12.0)
    h.nodes("n3")
    h.settle()
    placed = [x for x in h.allocated() if x.app == "a1"]
    assert [(x.node, x.reservation) for x in placed] == [("n3", None)]
    reasons = [x for x in h.decisions if isinstance(x, d.ReservationEnded)]
    assert [(x.reservation, "placed on free room on n3" in x.reason) for x in reasons] == [(rid, True)]
    assert sorted(cancelled(h.decisions)) == sorted(victims)
    assert not any(h.alloc(v).preempting for v in victims)
    h.tick(10.0 + GRACE + 1)
    assert h.kills() == []
    assert not h.cache.state.reservations and h.model.violations == []
