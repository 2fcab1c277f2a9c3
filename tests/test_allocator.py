"""Allocator: the view replica, proposals in flight, missed opportunities and the cycle."""

from __future__ import annotations

import pytest

from sniper.core.allocator import Allocator
from sniper.core.config import partition_to_raw
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import Harness, config_of, fingerprint, invariant_problems, queue

CONFIG = config_of(queue("a", maximum={"memory": 32768}), queue("b"))


def _harness(*events: f.Feed) -> Harness:
    h = Harness(CONFIG)
    h.feed(*events)
    return h


def _idle(h: Harness) -> None:
    """No container is held in flight anywhere in the allocator's replica."""
    state = h.allocator.state
    assert h.allocator.inflight == {}
    for node in state.nodes.values():
        assert not any(node.allocating.values()), node.name
    for q in state.queues.values():
        assert not any(q.allocating.values()), q.path
    for app in state.apps.values():
        for ask in app.asks.values():
            assert ask.allocating == 0, ask.key


NODE = f.NodeAdded(node="n1", capacity={"memory": 8192, "vcore": 8000})
# A large node out of service: asks only it could hold are kept waiting (not rejected as never fitting).
DOWN = f.NodeAdded(node="down", capacity={"memory": 65536, "vcore": 8000}, schedulable=False)
APP = f.AppAdded(app="a1", queue="root.a")


# ---------------------------------------------------------------------- missed opportunities


def test_missed_opportunities_grow_per_cycle_and_reset_on_allocation() -> None:
    # asked before any node registered: not judged, it waits (a larger node comes below)
    h = _harness(APP, f.AskAdded(app="a1", ask="big", resource={"memory": 16384}), NODE)
    key = ("a1", "big")
    for cycle in range(1, 4):
        assert h.propose() is None
        assert h.allocator.missed[key] == cycle
    h.feed(f.NodeAdded(node="n2", capacity={"memory": 16384, "vcore": 8000}))
    proposal = h.propose()
    assert proposal is not None
    assert [(pl.ask, pl.node) for pl in proposal.placements] == [("big", "n2")]
    assert key not in h.allocator.missed  # reset once it got a container
    h.deliver()
    assert h.placements() == [("big", "n2")]


def test_a_fruitless_cycle_is_only_counted_until_something_but_the_clock_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sniper.core import allocator

    searches: list[int] = []
    find = allocator.find_ask_candidates

    def counted(*args: object, **kwargs: object) -> object:
        searches.append(1)
        return find(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(allocator, "find_ask_candidates", counted)
    h = _harness(APP, f.AskAdded(app="a1", ask="big", resource={"memory": 16384}), NODE)
    key = ("a1", "big")
    assert h.propose() is None
    looked = len(searches)
    h.tick(5.0)  # only the clock moves: the same asks would be tried and placed nowhere
    assert h.propose() is None and h.propose() is None
    assert h.allocator.missed[key] == 3 and h.allocator.stats.cycles == 3
    assert len(searches) == looked
    h.feed(f.AskAdded(app="a1", ask="small", resource={"memory": 1024}))  # a change: look again
    proposal = h.propose()
    assert proposal is not None and [pl.ask for pl in proposal.placements] == ["small"]
    assert h.allocator.missed[key] == 4 and len(searches) > looked


def test_missed_counts_only_asks_that_were_candidates() -> None:
    h = _harness(
        NODE,
        DOWN,
        APP,
        f.AskAdded(app="a1", ask="fits", resource={"memory": 1024}),
        f.AskAdded(app="a1", ask="never", resource={"memory": 9000}),
    )
    h.propose()
    assert h.allocator.missed == {("a1", "never"): 1}  # "fits" got its container
    h.deliver()
    assert h.propose() is None
    assert h.allocator.missed == {("a1", "never"): 2}
    h.feed(f.AskRemoved(app="a1", ask="never"))
    assert h.allocator.missed == {}  # a withdrawn ask is forgotten


def test_an_ask_blocked_by_its_queue_max_is_not_a_missed_opportunity() -> None:
    h = _harness(
        f.NodeAdded(node="n1", capacity={"memory": 65536, "vcore": 64000}),
        APP,
        f.AskAdded(app="a1", ask="k", resource={"memory": 16384}, count=3),
    )
    h.settle()
    assert len(h.placements()) == 2  # root.a max is 32768
    h.allocator.cycle()
    assert h.allocator.missed == {}


# ---------------------------------------------------------------------- in-flight accounting


def test_a_container_in_flight_is_never_proposed_twice() -> None:
    h = _harness(NODE, APP, f.AskAdded(app="a1", ask="k", resource={"memory": 1024}, count=3))
    first = h.propose()
    assert first is not None and len(first.placements) == 3
    assert h.allocator.dirty is False
    for _ in range(3):  # cycles before the outcome arrives propose nothing more
        assert h.allocator.cycle() is None
    ask = h.allocator.state.ask(("a1", "k"))
    assert ask is not None and (ask.allocating, ask.pending) == (3, 0)
    assert h.allocator.state.nodes["n1"].allocating == {"memory": 3072}
    assert h.allocator.state.queues["root"].allocating == {"memory": 3072}
    outcome = h.deliver()
    assert (outcome.accepted, outcome.rejected) == (3, {})
    _idle(h)
    assert h.allocator.cycle() is None
    assert h.allocator.stats.accepted == 3


def test_room_in_flight_is_not_offered_to_another_ask() -> None:
    h = _harness(NODE, APP, f.AskAdded(app="a1", ask="k", resource={"memory": 6144}))
    assert h.propose() is not None
    h.feed(f.AskAdded(app="a1", ask="k2", resource={"memory": 4096}))
    assert h.allocator.dirty
    assert h.propose() is None  # only 2048 left on n1 once k's room is held
    assert h.allocator.missed == {("a1", "k2"): 1}
    h.settle()
    assert h.cache.stats.placements_rejected == 0
    assert h.placements() == [("k", "n1")]


def test_a_rejected_outcome_frees_the_container_for_the_next_cycle() -> None:
    h = _harness(NODE, APP, f.AskAdded(app="a1", ask="k", resource={"memory": 1024}, count=2))
    proposal = h.propose()
    assert proposal is not None and len(proposal.placements) == 2
    # The cache learns that n1 is cordoned before the proposal arrives: both placements are stale.
    h.cache.handle_event(f.NodeUpdated(node="n1", schedulable=False))
    outcome = h.deliver()
    assert outcome.accepted == 0
    assert list(outcome.rejected.values()) == ["node is not schedulable"] * 2
    _idle(h)
    assert h.allocator.stats.rejected == 2
    assert h.allocator.dirty  # a rejection may have freed room: try again
    assert h.propose() is None  # nowhere to go while n1 is cordoned
    h.feed(f.NodeUpdated(node="n1", schedulable=True))
    again = h.propose()
    assert again is not None and [pl.node for pl in again.placements] == ["n1", "n1"]
    h.deliver()
    assert len(h.placements()) == 2


def test_a_hand_made_rejection_releases_exactly_what_was_held() -> None:
    allocator = Allocator("default")
    setup = [
        p.ConfigSet(config=partition_to_raw(CONFIG)),
        p.NodeSet(node="n1", capacity={"memory": 4096}),
        p.AppSet(app="a1", queue="root.a", submit_seq=1),
        p.AskSet(app="a1", ask="k", resource={"memory": 4096}, count=1, seq=1),
    ]
    assert allocator.apply_view(p.ViewDelta(seq=1, changes=setup))
    proposal = allocator.cycle()
    assert proposal is not None and proposal.view_seq == 1
    assert allocator.cycle() is None
    outcome = p.ProposalOutcome(proposal=proposal.id, accepted=0, rejected={"a1/k@n1#0": "does not fit"})
    assert allocator.apply_view(p.ViewDelta(seq=2, outcomes=[outcome]))
    again = allocator.cycle()
    assert again is not None and again.id != proposal.id
    assert [(pl.app, pl.ask, pl.node) for pl in again.placements] == [("a1", "k", "n1")]


def test_an_outcome_for_an_unknown_proposal_is_ignored() -> None:
    h = _harness(NODE, APP, f.AskAdded(app="a1", ask="k", resource={"memory": 1024}))
    assert h.propose() is not None
    stray = p.ProposalOutcome(proposal="someone-else", accepted=0, rejected={"x": "y"})
    assert h.allocator.apply_view(p.ViewDelta(seq=h.allocator.view_seq + 1, outcomes=[stray]))
    h.cache.view_seq += 1  # keep the cache's numbering in step with the hand-made delta
    ask = h.allocator.state.ask(("a1", "k"))
    assert ask is not None and ask.allocating == 1
    h.deliver()
    _idle(h)


def test_in_flight_room_survives_a_config_change() -> None:
    h = _harness(NODE, APP, f.AskAdded(app="a1", ask="k", resource={"memory": 1024}, count=2))
    assert h.propose() is not None
    h.feed(f.PartitionConfigEvent(config=partition_to_raw(config_of(queue("a"), queue("b"), queue("c")))))
    state = h.allocator.state
    assert state.queues["root.a"].allocating == {"memory": 2048}  # re-added to the rebuilt queues
    assert state.queues["root"].allocating == {"memory": 2048}
    h.deliver()
    _idle(h)


def test_in_flight_on_a_removed_node_does_not_leak() -> None:
    h = _harness(NODE, APP, f.AskAdded(app="a1", ask="k", resource={"memory": 1024}))
    assert h.propose() is not None
    h.feed(f.NodeRemoved(node="n1"), f.NodeAdded(node="n1", capacity={"memory": 8192, "vcore": 8000}))
    # The room was held on the old n1; the cache judges the placement against the new one (it fits).
    outcome = h.deliver()
    assert (outcome.accepted, outcome.rejected) == (1, {})
    _idle(h)
    assert h.allocator.state.nodes["n1"].allocated == {"memory": 1024}
    h.settle()
    assert h.placements() == [("k", "n1")]
    assert fingerprint(h.allocator.state) == fingerprint(h.cache.state)


# ---------------------------------------------------------------------- the cycle


def test_the_batch_bounds_a_cycle_and_the_rest_waits_for_the_next() -> None:
    h = _harness(
        f.NodeAdded(node="n1", capacity={"memory": 65536, "vcore": 64000}),
        APP,
        f.AskAdded(app="a1", ask="k", resource={"memory": 1024}, count=10),
    )
    h.allocator.batch = 4
    sizes = []
    while True:
        proposal = h.propose()
        if proposal is None:
            break
        sizes.append(len(proposal.placements))
    assert sizes == [4, 4, 2]  # all in flight together, never over the count
    assert h.allocator.dirty is False
    h.settle()
    assert len(h.placements()) == 10
    assert h.cache.stats.placements_rejected == 0
    assert invariant_problems(h.cache.state) == []


@pytest.mark.parametrize(
    ("event", "dirty"),
    [
        (f.AskAdded(app="a1", ask="k2", resource={"memory": 1}), True),
        (f.NodeAdded(node="n2", capacity={"memory": 1}), True),
        (f.AllocationReleased(allocation="alloc-1"), True),
        (f.AppAdded(app="a2", queue="root.b"), False),
        (f.AskRemoved(app="a1", ask="k"), False),
    ],
)
def test_dirty_marks_changes_that_may_allow_an_allocation(event: f.Feed, dirty: bool) -> None:
    h = _harness(NODE, APP, f.AskAdded(app="a1", ask="k", resource={"memory": 1024}, count=2))
    h.settle()
    assert h.allocator.dirty is False
    h.feed(event)
    assert h.allocator.dirty is dirty


def test_proposals_name_their_view_and_number_themselves() -> None:
    h = _harness(NODE, APP, f.AskAdded(app="a1", ask="k", resource={"memory": 1024}))
    proposal = h.propose()
    assert proposal is not None
    assert proposal.view_seq == h.cache.view_seq == h.allocator.view_seq
    assert proposal.id == "default/a1"
    h.deliver()
    h.feed(f.AskAdded(app="a1", ask="k2", resource={"memory": 1024}))
    second = h.propose()
    assert second is not None and second.id == "default/a2"


# ---------------------------------------------------------------------- the view replica


def test_view_deltas_apply_in_order_only() -> None:
    h = _harness(NODE, APP)
    allocator = h.allocator
    seq = allocator.view_seq
    assert allocator.apply_view(h.views[-1])  # a replayed delta is ignored
    assert allocator.view_seq == seq
    gap = p.ViewDelta(seq=seq + 2, changes=[p.NodeSet(node="ghost", capacity={"memory": 1})])
    assert allocator.apply_view(gap) is False
    assert "ghost" not in allocator.state.nodes and allocator.view_seq == seq
    reset = h.cache.full_view()
    assert allocator.apply_view(reset)
    assert allocator.stats.resets == 1
    assert allocator.view_seq == h.cache.view_seq
    assert fingerprint(allocator.state) == fingerprint(h.cache.state)


def test_a_reset_forgets_what_was_in_flight() -> None:
    h = _harness(NODE, APP, f.AskAdded(app="a1", ask="k", resource={"memory": 1024}))
    proposal = h.propose()
    assert proposal is not None
    assert h.allocator.apply_view(h.cache.full_view())
    _idle(h)
    assert h.allocator.dirty
    # The forgotten proposal may still reach the cache; whatever the allocator proposes again is
    # validated there, so the ask is never allocated over its count.
    again = h.propose()
    assert again is not None
    h.deliver(0)
    outcome = h.deliver(0)
    assert list(outcome.rejected.values()) == ["ask is already fully allocated"]
    assert len(h.placements()) == 1


def test_replica_matches_the_cache_after_a_busy_sequence() -> None:
    h = _harness(
        NODE,
        f.NodeAdded(node="n2", capacity={"memory": 4096, "vcore": 8000}),
        APP,
        f.AppAdded(app="b1", queue="root.b"),
        f.AskAdded(app="a1", ask="k", resource={"memory": 2048}, count=5),
        f.AskAdded(app="b1", ask="m", resource={"memory": 1024}, count=3),
    )
    h.settle()
    h.feed(f.AllocationReleased(allocation="alloc-1"), f.NodeRemoved(node="n2"))
    h.settle()
    h.tick(5.0)
    assert fingerprint(h.allocator.state, allocating=True) == fingerprint(h.cache.state, allocating=True)
    assert fingerprint(h.allocator.state) == fingerprint(h.cache.state)
    assert h.model.violations == []


def test_an_unplaceable_ask_filling_the_batch_does_not_starve_the_others() -> None:
    """Candidates that all fail are skipped and the cycle asks for the next ones."""
    h = _harness(
        NODE,
        DOWN,
        f.AppAdded(app="b1", queue="root.b"),  # no max: only the batch bounds the candidates
        f.AskAdded(app="b1", ask="huge", resource={"memory": 65536}, count=10, priority=9),
        f.AskAdded(app="b1", ask="small", resource={"memory": 1024}),
    )
    h.allocator.batch = 4
    proposal = h.propose()
    assert proposal is not None
    assert [(pl.ask, pl.node) for pl in proposal.placements] == [("small", "n1")]
    assert h.allocator.missed == {("b1", "huge"): 1}


def test_an_unplaceable_ask_does_not_hold_headroom_from_the_next_ones() -> None:
    """A pinned ask that cannot fit its node takes no room under the queue max from the others."""
    h = _harness(
        f.NodeAdded(node="small", capacity={"memory": 2048, "vcore": 8000}),
        f.NodeAdded(node="big", capacity={"memory": 65536, "vcore": 64000}),
        APP,
        f.AskAdded(app="a1", ask="pinned", resource={"memory": 16384}, count=2, node="small"),
        f.AskAdded(app="a1", ask="free", resource={"memory": 16384}),
    )
    h.settle()
    assert h.placements() == [("free", "big")]  # root.a max 32768 holds "free" once "pinned" is out
