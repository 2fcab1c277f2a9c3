"""The cache's side of preemption: re-validation of a proposal on the authoritative state, the committed
record (reservation + preempt decisions), kills after grace, the reservation held for the beneficiary
until it is allocated there, withdrawn and expired reservations, and observe-only proposals.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sniper.core import resources as res
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import fingerprint, queue
from tests.preemption_support import GRACE, PreemptHarness, preemption_raw, proposal, two_queues


def packed(*, a_asks: tuple[tuple[str, int, int], ...] = (("big", 50, 1),), **preemption: object) -> PreemptHarness:
    """a (150) and b (50) on n1, n2 (100 each), b holding everything in 50s started at t = 0..3; a asks."""
    h = PreemptHarness(two_queues(150, 50, **preemption))
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=2)
    h.app("a1", "root.a")
    for name, size, count in a_asks:
        h.ask("a1", name, size, count)
    h.starve()
    return h


def on(h: PreemptHarness, node: str) -> list[str]:
    return sorted(h.cache.state.nodes[node].allocations, key=lambda a: int(a.split("-")[1]))


# ---------------------------------------------------------------------- stale and invalid proposals


def _gone(h: PreemptHarness) -> p.PreemptionProposal:
    victim = on(h, "n1")[0]
    h.release(victim)
    return proposal("a1", "big", "n1", [victim])


def _elsewhere(h: PreemptHarness) -> p.PreemptionProposal:
    return proposal("a1", "big", "n1", [on(h, "n2")[0]])


def _already_preempting(h: PreemptHarness) -> p.PreemptionProposal:
    victim = on(h, "n1")[0]
    outcome, _ = h.commit(proposal("a1", "big", "n1", [victim], pid="first"))
    assert outcome.accepted == 1
    return proposal("a1", "small", "n1", [victim])


def _not_minimal(h: PreemptHarness) -> p.PreemptionProposal:
    return proposal("a1", "big", "n1", on(h, "n1"))


def _not_enough(h: PreemptHarness) -> p.PreemptionProposal:
    return proposal("a1", "huge", "n1", on(h, "n1")[:1])


def _beneficiary_not_below_ideal(h: PreemptHarness) -> p.PreemptionProposal:
    h.ask("b1", "more", 50)
    return proposal("b1", "more", "n1", on(h, "n1")[:1])


def _ask_gone(h: PreemptHarness) -> p.PreemptionProposal:
    h.feed(f.AskRemoved(app="a1", ask="big"))
    return proposal("a1", "big", "n1", on(h, "n1")[:1])


def _ask_satisfied(h: PreemptHarness) -> p.PreemptionProposal:
    outcome, _ = h.commit(proposal("a1", "big", "n2", on(h, "n2")[:1], pid="first"))
    assert outcome.accepted == 1
    return proposal("a1", "big", "n1", on(h, "n1")[:1])


def _node_gone(h: PreemptHarness) -> p.PreemptionProposal:
    victim = on(h, "n1")[0]
    h.feed(f.NodeRemoved(node="n1"))
    return proposal("a1", "big", "n1", [victim])


def _named_twice(h: PreemptHarness) -> p.PreemptionProposal:
    victim = on(h, "n1")[0]
    return proposal("a1", "big", "n1", [victim, victim])


def _over_quota(h: PreemptHarness) -> p.PreemptionProposal:
    # a wants 140 (50 + 60 + 30): b may lose 140; "big" takes 50, "huge" 100 more would be too much
    return p.PreemptionProposal(
        id="test/p1",
        view_seq=0,
        policy="sniper",
        placements=[
            p.Victimized(app="a1", ask="big", node="n1", victims=on(h, "n1")[:1]),
            p.Victimized(app="a1", ask="huge", node="n2", victims=on(h, "n2")),
            p.Victimized(app="a1", ask="small", node="n1", victims=on(h, "n1")[1:]),
        ],
    )


def _intra_wrong_victim(h: PreemptHarness) -> p.PreemptionProposal:
    return proposal("a1", "big", "n1", on(h, "n1")[:1], policy="intra_queue")


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_gone, "victim alloc-1 is gone"),
        (_elsewhere, "victim alloc-3 is not on n1"),
        (_already_preempting, "victim alloc-1 is already preempting"),
        (_not_minimal, "is not needed (the victim set is not minimal)"),
        (_not_enough, "victims do not free enough room"),
        (_beneficiary_not_below_ideal, "beneficiary's queue root.b is not below its ideal"),
        (_ask_gone, "beneficiary ask is gone"),
        (_ask_satisfied, "beneficiary ask needs nothing more"),
        (_node_gone, "node is gone or not schedulable"),
        (_named_twice, "a victim is named twice"),
        (_over_quota, "victims would take root.b below its guarantee or ideal"),
        (_intra_wrong_victim, "is not a lower-priority container of another app in root.a"),
    ],
)
def test_stale_or_invalid_proposals_are_rejected_with_the_reason(
    make: Callable[[PreemptHarness], p.PreemptionProposal], reason: str
) -> None:
    h = packed(a_asks=(("big", 50, 1), ("huge", 60, 1), ("small", 30, 1)))
    bad = make(h)
    before = fingerprint(h.cache.state)
    preempts_before = len(h.preempts())
    outcome, decisions = h.commit(bad)
    rejected = list(outcome.rejected.values())
    assert any(reason in why for why in rejected), rejected
    assert outcome.accepted == len(bad.placements) - len(rejected)
    if outcome.accepted == 0:
        assert fingerprint(h.cache.state) == before, "a rejected proposal changes nothing"
        assert not any(isinstance(x, d.Preempt) for x in decisions)
        assert len(h.preempts()) == preempts_before
    assert h.cache.stats.placements_rejected >= 1
    assert h.model.violations == []


# ---------------------------------------------------------------------- an accepted proposal


def test_an_accepted_placement_is_one_record_reservation_and_preempt_decisions() -> None:
    h = packed()
    result = h.preempt_round(10.0)
    assert result.outcome == p.ProposalOutcome(proposal=result.proposal.id if result.proposal else "", accepted=1)
    (pl,) = result.placements
    assert pl.node == "n2"  # its containers ran less
    (victim,) = pl.victims
    state = h.cache.state
    (r,) = state.reservations.values()
    assert (r.app, r.ask, r.node, r.victims) == ("a1", "big", "n2", [victim])
    assert r.resource == {"memory": 50}
    assert r.deadline == 10.0 + GRACE and r.expires == r.deadline + 60.0
    assert state.allocations[victim].preempting and state.allocations[victim].reservation == r.id
    assert state.queues["root.a"].reserved == {"memory": 50} and not res.any_positive(state.queues["root.a"].pending)
    assert state.queues["root.b"].preempting == {"memory": 50}
    (pre,) = result.preempts()
    assert (pre.allocation, pre.queue, pre.node, pre.for_app, pre.for_ask, pre.for_queue) == (
        victim,
        "root.b",
        "n2",
        "a1",
        "big",
        "root.a",
    )
    assert pre.reservation == r.id and pre.deadline == r.deadline and pre.policy == "sniper"
    assert pre.resource == {"memory": 50} and pre.for_resource == {"memory": 50}
    assert pre.victim_queue_ideal == {"memory": 150}
    assert pre.over_ideal == {"memory": 50}  # the figure the reason quotes, as a number
    assert pre.cost == pl.cost == 7.0 + GRACE  # started at t = 3: will have run 22 s when killed at 25
    assert pre.reason == "root.b over its ideal by 50 MiB; a1/big missed 1 cycles; node n2 cost 22.0"
    assert not pre.observe_only
    # the replicas saw the same record
    assert h.allocator.state.reservations.keys() == state.reservations.keys()
    assert h.model.violations == []


def test_victims_are_killed_once_after_grace() -> None:
    h = packed(a_asks=(("big", 100, 1),))
    result = h.preempt_round(10.0)
    victims = result.placements[0].victims
    assert len(victims) == 2
    h.tick(10.0 + GRACE - 0.5)
    assert h.kills() == []
    h.tick(10.0 + GRACE)
    assert sorted(h.kills()) == sorted(victims)
    assert all(h.alloc(v).killed for v in victims)
    h.tick(10.0 + GRACE + 5)
    assert sorted(h.kills()) == sorted(victims), "a kill is decided once"
    # killed is not gone: the room is freed when the resource manager reports the release
    assert h.cache.state.reservations
    h.release(*victims)
    (got,) = [x for x in h.allocated() if x.app == "a1"]
    assert got.node == result.placements[0].node and got.reservation
    assert not h.cache.state.reservations


def test_the_room_is_held_for_the_beneficiary_and_goes_to_it() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 50}),
        queue("c", guaranteed={"memory": 50}),
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    victim = h.run("b1", 60, "n1", at=5.0, queue_path="root.b")
    other = h.run("b1", 40, "n1", at=0.0)
    h.fill("b1", "root.b", "n2", [50, 50])
    h.app("a1", "root.a")
    h.ask("a1", "big", 60)
    h.starve()
    result = h.preempt_round(10.0)
    assert [pl.victims for pl in result.placements] == [[victim]]
    # b's other container on n1 finishes: 40 free, not enough for a; c asks for 30 and must not get it
    h.tick(12.0)
    h.release(other)
    h.app("c1", "root.c")
    h.ask("c1", "small", 30)
    h.settle()
    assert not [x for x in h.allocated() if x.app in ("a1", "c1")]
    assert h.cache.check_placement("c1", "small", "n1") == "does not fit the node's free room"
    # the victim goes: a gets the room at once, with its reservation; c then gets what is left
    h.tick(10.0 + GRACE)
    h.release(victim)
    (a_alloc,) = [x for x in h.allocated() if x.app == "a1"]
    assert a_alloc.node == "n1" and a_alloc.reservation == result.preempts()[0].reservation
    h.settle()
    (c_alloc,) = [x for x in h.allocated() if x.app == "c1"]
    assert c_alloc.node == "n1"
    assert h.model.violations == []


def test_a_withdrawn_beneficiary_ends_its_reservation_and_releases_the_room() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 50}),
        queue("c", guaranteed={"memory": 50}),
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50])
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    result = h.preempt_round(10.0)
    (pl,) = result.placements
    decisions = h.feed(f.AskRemoved(app="a1", ask="big"))
    (ended,) = [x for x in decisions if isinstance(x, d.ReservationEnded)]
    assert ended.reservation == result.preempts()[0].reservation and "withdrawn" in ended.reason
    node = h.cache.state.nodes[pl.node]
    assert not h.cache.state.reservations and not res.any_positive(node.reserved)
    # nothing needs the victims any more: their preemption is cancelled and they keep running
    cancelled = [x for x in decisions if isinstance(x, d.PreemptCancelled)]
    assert sorted(x.allocation for x in cancelled) == sorted(pl.victims)
    assert all(x.reservation == ended.reservation and "withdrawn" in x.reason for x in cancelled)
    assert not any(h.alloc(v).preempting for v in pl.victims)
    assert not res.any_positive(h.cache.state.queues["root.b"].preempting) and not res.any_positive(node.preempting)
    h.tick(10.0 + GRACE + 1)
    assert h.kills() == []
    assert h.allocator.state.allocations[pl.victims[0]].preempt_deadline is None  # the replicas saw it too
    assert h.model.violations == []


def test_a_reservation_expires_after_its_timeout_with_a_reason() -> None:
    h = packed(reservation_timeout=30.0)
    result = h.preempt_round(10.0)
    rid = result.preempts()[0].reservation
    h.tick(10.0 + GRACE)  # killed, but the resource manager never reports the release
    h.tick(10.0 + GRACE + 29.0)
    assert rid in h.cache.state.reservations
    decisions = h.tick(10.0 + GRACE + 30.0)
    (ended,) = [x for x in decisions if isinstance(x, d.ReservationEnded)]
    assert ended.reservation == rid and "timed out" in ended.reason
    state = h.cache.state
    assert not state.reservations and not res.any_positive(state.nodes[ended.node].reserved)
    ask = state.apps["a1"].asks["big"]
    assert ask.reserved == 0 and ask in state.apps["a1"].pending_asks
    assert state.queues["root.a"].pending == {"memory": 50} and not res.any_positive(state.queues["root.a"].reserved)
    assert h.model.violations == []


def test_observe_only_publishes_what_would_be_preempted_and_changes_nothing() -> None:
    h = packed(observe_only=True)
    before = fingerprint(h.cache.state)
    result = h.preempt_round(10.0)
    assert result.proposal is not None and result.proposal.observe_only
    (pre,) = result.preempts()
    assert pre.observe_only and pre.reservation == "" and pre.for_ask == "big"
    after = fingerprint(h.cache.state)
    assert {k: v for k, v in after.items() if k != "now"} == {k: v for k, v in before.items() if k != "now"}
    assert not any(a.preempting for a in h.cache.state.allocations.values())
    h.tick(10.0 + GRACE + 1)
    assert h.kills() == []
    assert h.model.violations == []


def test_observe_only_proportional_marks_nothing() -> None:
    h = packed(observe_only=True, policy="proportional")
    result = h.preempt_round(10.0)
    assert result.proposal is not None and result.proposal.victims and result.proposal.observe_only
    assert result.preempts() and all(x.observe_only and x.for_queue == "" for x in result.preempts())
    assert not any(a.preempting for a in h.cache.state.allocations.values())
    h.tick(40.0)
    assert h.kills() == []


# ---------------------------------------------------------------------- several reservations on a node


def _vcore_node() -> tuple[PreemptHarness, dict[str, str]]:
    raw = preemption_raw(queue("a", guaranteed={"memory": 1000, "vcore": 80}), queue("b", guaranteed={"vcore": 20}))
    h = PreemptHarness(raw)
    h.nodes("n1", memory=1000, vcore=100)
    victims = {
        name: h.run("b1", 10, "n1", vcore=v, queue_path="root.b") for name, v in (("E", 20), ("M", 30), ("L", 10))
    }
    h.run("b1", 10, "n1", vcore=40)
    h.app("a1", "root.a")
    return h, victims


def test_a_reservation_is_fulfilled_once_its_victims_are_gone_even_if_another_counts_on_a_later_victim() -> None:
    """M's victim frees 20 vcores more than M needs; L was promised them. E's own victim leaving must be
    enough for E: L's promise rests on M's victim, not on E's room."""
    h, victims = _vcore_node()
    for name, v in (("E", 20), ("M", 10), ("L", 30)):
        h.ask("a1", name, 10, vcore=v)
    for t, name in ((10.0, "E"), (12.0, "M"), (14.0, "L")):
        h.tick(t)
        outcome, _ = h.commit(proposal("a1", name, "n1", [victims[name]], pid=f"p{name}"))
        assert outcome.accepted == 1, outcome.rejected
    for t, name in ((25.0, "E"), (27.0, "M"), (29.0, "L")):
        h.tick(t)
        h.release(victims[name])
        got = {x.ask: x.t for x in h.allocated() if x.app == "a1"}
        assert got.get(name) == t, f"{name} waited: {got}"
    assert not h.cache.state.reservations
    assert h.model.violations == []


def test_a_reservation_never_takes_room_an_earlier_one_is_waiting_for() -> None:
    """E (due at 25) waits for two victims; L (due at 29) for one. When the first of E's victims finishes
    early, L must not take that room: E would then wait for L's victim."""
    raw = preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b"))
    h = PreemptHarness(raw)
    h.nodes("n1")
    e1 = h.run("b1", 15, "n1", queue_path="root.b")
    e2 = h.run("b1", 15, "n1")
    l1 = h.run("b1", 10, "n1")
    h.run("b1", 60, "n1")
    h.app("a1", "root.a")
    h.ask("a1", "E", 30)
    h.ask("a1", "L", 10)
    h.tick(10.0)
    assert h.commit(proposal("a1", "E", "n1", [e1, e2], pid="pE"))[0].accepted == 1
    h.tick(14.0)
    assert h.commit(proposal("a1", "L", "n1", [l1], pid="pL"))[0].accepted == 1
    h.tick(20.0)
    h.release(e1)  # finished on its own before its kill
    assert [x for x in h.allocated() if x.app == "a1"] == []
    h.tick(25.0)
    h.release(e2)
    assert [(x.ask, x.t) for x in h.allocated() if x.app == "a1"] == [("E", 25.0)]
    h.tick(29.0)
    h.release(l1)
    assert [(x.ask, x.t) for x in h.allocated() if x.app == "a1"] == [("E", 25.0), ("L", 29.0)]
    assert h.model.violations == []


def test_a_reservation_is_fulfilled_early_when_other_room_frees_up() -> None:
    h = packed()
    result = h.preempt_round(10.0)
    (pl,) = result.placements
    other = [a for a in on(h, pl.node) if a not in pl.victims]
    h.tick(11.0)
    h.release(*other)  # a non-victim finishes: the room is there before the victim goes
    (got,) = [x for x in h.allocated() if x.app == "a1"]
    assert got.node == pl.node and got.t == 11.0 and got.reservation == result.preempts()[0].reservation
    # the victim is not needed any more: its preemption is cancelled at once, and it is never killed
    (cancelled,) = [x for x in h.decisions if isinstance(x, d.PreemptCancelled)]
    assert (cancelled.allocation, cancelled.reservation, cancelled.t) == (pl.victims[0], got.reservation, 11.0)
    assert "placed before its victims were gone" in cancelled.reason
    assert not h.alloc(pl.victims[0]).preempting
    h.tick(10.0 + GRACE)
    assert h.kills() == []
    assert h.model.violations == []


def test_a_victim_another_reservation_counts_on_is_kept_and_the_others_are_released() -> None:
    """E, M and L reserve on one node; L's room rests on M's victim's surplus. Room frees early: E and
    M are placed at once. E's victim is released; M's stays (L counts on it) and is killed at its
    deadline; when it goes, L is placed and L's own victim, no longer needed, is released."""
    h, victims = _vcore_node()
    other = next(a for a in on(h, "n1") if a not in victims.values())
    for name, v in (("E", 20), ("M", 10), ("L", 30)):
        h.ask("a1", name, 10, vcore=v)
    for t, name in ((10.0, "E"), (12.0, "M"), (14.0, "L")):
        h.tick(t)
        outcome, _ = h.commit(proposal("a1", name, "n1", [victims[name]], pid=f"p{name}"))
        assert outcome.accepted == 1, outcome.rejected
    h.tick(15.0)
    h.release(other)  # 40 vcores free long before any deadline
    assert sorted(x.ask for x in h.allocated() if x.app == "a1") == ["E", "M"]
    assert [x.allocation for x in h.decisions if isinstance(x, d.PreemptCancelled)] == [victims["E"]]
    assert h.alloc(victims["M"]).preempting and h.alloc(victims["L"]).preempting
    h.tick(27.0)
    assert h.kills() == [victims["M"]]
    h.release(victims["M"])
    assert [(x.ask, x.t) for x in h.allocated() if x.ask == "L"] == [("L", 27.0)]
    assert [x.allocation for x in h.decisions if isinstance(x, d.PreemptCancelled)] == [
        victims["E"],
        victims["L"],
    ]
    h.tick(40.0)
    assert h.kills() == [victims["M"]]
    assert not h.cache.state.reservations and not any(a.preempting for a in h.cache.state.allocations.values())
    assert h.model.violations == []
