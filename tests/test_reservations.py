"""The reservation lifecycle: a reservation stays while it can still be fulfilled, ends with its true
reason when it cannot (node shrank below need, unschedulable, removed), and its beneficiary keeps
competing for free room elsewhere (placed there, its victims get ``preempt_cancelled``). Also what
never gets one: asks no node can ever hold (rejected), containers placed for a required node (never
victims), and a flapping ask (damped)."""

from __future__ import annotations

from sniper.messages import decisions as d
from sniper.messages import feed as f
from tests.core_support import queue
from tests.preemption_support import GRACE, PreemptHarness, b_in_fifties, one_reservation, preemption_raw, proposal


def ended(decisions: list[d.DecisionMsg]) -> list[str]:
    return [x.reason for x in decisions if isinstance(x, d.ReservationEnded)]


def cancelled(decisions: list[d.DecisionMsg]) -> list[str]:
    return [x.allocation for x in decisions if isinstance(x, d.PreemptCancelled)]


def test_a_node_that_grows_keeps_its_reservation() -> None:
    h, node, victims = one_reservation()
    decisions = h.feed(f.NodeUpdated(node=node, capacity={"memory": 120}))
    assert ended(decisions) == [] and cancelled(decisions) == []
    assert len(h.cache.state.reservations) == 1 and all(h.alloc(v).preempting for v in victims)
    h.tick(10.0 + GRACE)
    h.release(*victims)
    assert [x.app for x in h.allocated()][-1] == "a1"
    assert h.model.violations == []


def test_a_node_that_shrinks_but_still_holds_the_need_keeps_its_reservation() -> None:
    h, node, _ = one_reservation()
    decisions = h.feed(f.NodeUpdated(node=node, capacity={"memory": 100}, schedulable=True))
    assert ended(decisions) == []
    assert len(h.cache.state.reservations) == 1


def test_a_node_that_shrinks_below_the_need_ends_it_with_that_reason() -> None:
    h, node, _ = one_reservation()
    decisions = h.feed(f.NodeUpdated(node=node, capacity={"memory": 90}))
    (reason,) = ended(decisions)
    assert "shrank below" in reason
    assert not h.cache.state.reservations
    assert h.model.violations == []


def test_an_unschedulable_node_ends_it_with_that_reason() -> None:
    h, node, victims = one_reservation()
    decisions = h.feed(f.NodeUpdated(node=node, schedulable=False))
    (reason,) = ended(decisions)
    assert "unschedulable" in reason
    assert sorted(cancelled(decisions)) == sorted(victims)


def test_a_removed_node_ends_it_with_that_reason() -> None:
    h, node, _ = one_reservation()
    decisions = h.feed(f.NodeRemoved(node=node))
    (reason,) = ended(decisions)
    assert "removed" in reason


def test_a_node_joining_during_the_grace_takes_the_beneficiary_and_its_victims_live() -> None:
    h, _, victims = one_reservation()
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


# ---------------------------------------------------------------------- asks no node can ever hold


def rejections(decisions: list[d.DecisionMsg]) -> list[str]:
    return [x.reason for x in decisions if isinstance(x, d.Rejected)]


def test_asks_no_node_can_ever_hold_are_rejected_with_the_reason() -> None:
    raw = preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100}))
    h = PreemptHarness(raw)
    h.feed(
        f.NodeAdded(node="n1", capacity={"memory": 100, "vcore": 8}),
        f.NodeAdded(node="n2", capacity={"memory": 50, "vcore": 16}),
    )
    h.app("a1", "root.a")
    cases = {
        "gpu": {"memory": 10, "gpu": 1},
        "wide": {"memory": 60, "vcore": 10},  # each resource fits some node, no node fits both
        "pinned-ghost": {"memory": 10},
        "pinned-small": {"memory": 60},
    }
    pins = {"pinned-ghost": "ghost", "pinned-small": "n2"}
    reasons = {}
    for name, resource in cases.items():
        event = f.AskAdded(app="a1", ask=name, resource=resource, count=1, node=pins.get(name))
        (reasons[name],) = rejections(h.feed(event, allow_rejected=True))
    assert "no node has: gpu" in reasons["gpu"]
    assert "larger than every node" in reasons["wide"]
    assert "node ghost, which is unknown" in reasons["pinned-ghost"]
    assert "required node n2" in reasons["pinned-small"]
    assert h.cache.state.apps["a1"].asks == {}
    # a node that left may come back: an ask only it could hold is kept
    h.feed(f.NodeRemoved(node="n1"))
    h.feed(f.AskAdded(app="a1", ask="big", resource={"memory": 100}, count=1))
    assert "big" in h.cache.state.apps["a1"].asks


def test_a_rejected_ask_does_not_stop_preemption_for_the_rest_of_its_queue() -> None:
    h = b_in_fifties()
    h.feed(f.AskAdded(app="a1", ask="odd", resource={"memory": 10, "fpga": 1}, count=1), allow_rejected=True)
    h.ask("a1", "big", 50, count=2)
    h.starve()
    result = h.preempt_round(10.0)
    assert len(result.placements) == 2
    assert h.model.violations == []


def test_an_ask_pinned_to_a_full_node_is_served_by_preemption_there_and_its_container_is_no_victim() -> None:
    raw = preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100}))
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50], start=5)  # the cheaper victims are on n1
    h.fill("b1", "root.b", "n2", [50, 50])
    h.app("a1", "root.a")
    h.ask("a1", "daemon", 50, node="n2")
    h.starve()
    result = h.preempt_round(10.0)
    (pl,) = result.placements
    assert pl.node == "n2" and len(pl.victims) == 1
    h.tick(10.0 + GRACE)
    h.release(*pl.victims)
    (placed,) = [x for x in h.allocated() if x.app == "a1"]
    assert placed.node == "n2" and h.alloc(placed.allocation).pinned
    assert h.model.violations == []


def test_containers_placed_for_a_required_node_are_never_victims() -> None:
    raw = preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100}))
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50], start=0)
    h.fill("b1", "root.b", "n2", [50, 50])
    h.tick(8.0)
    h.ask("b1", "daemon", 50, node="n1")  # the newest, so the cheapest victim there were it allowed
    h.settle()
    (pinned,) = [x.allocation for x in h.allocated() if x.ask == "daemon"]
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    result = h.preempt_round(10.0)
    (pl,) = result.placements
    assert pinned not in pl.victims and len(pl.victims) == 1
    assert h.model.violations == []


# ---------------------------------------------------------------------- flapping


def test_an_ask_withdrawn_and_asked_again_every_few_seconds_is_damped() -> None:
    """Withdrawn every 4 s and asked again 2 s later, for ten minutes: each withdrawal that ends a
    reservation doubles the wait before the ask may preempt again (grace, 2x, 4x, then 8x at most)."""
    h = b_in_fifties()
    h.ask("a1", "big", 50)
    for t in range(10, 610):
        h.tick(float(t))
        if t % 4 == 0:
            h.feed(f.AskRemoved(app="a1", ask="big"))
        elif t % 4 == 2:
            h.ask("a1", "big", 50)
        h.starve()
        h.preempt_round(float(t))
    preempted = len(h.preempts())
    cancelled_notices = len(cancelled(h.decisions))
    # undamped: one preempt/cancel pair every 4 s (150); damped: 15, 30, 60, then every 120 s
    assert 1 <= preempted <= 9 and cancelled_notices <= preempted
    assert h.kills() == [] and h.model.violations == []


def test_the_cache_rejects_a_proposal_naming_a_container_placed_for_a_required_node() -> None:
    raw = preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100}))
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n2", [50, 50])
    h.fill("b1", "root.b", "n1", [50])
    h.ask("b1", "daemon", 50, node="n1")
    h.settle()
    (pinned,) = [x.allocation for x in h.allocated() if x.ask == "daemon"]
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    outcome, _ = h.commit(proposal("a1", "big", "n1", [pinned]))
    assert outcome.accepted == 0 and "required-node" in " ".join(outcome.rejected.values())
