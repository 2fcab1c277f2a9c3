"""How many looks for candidates a cycle makes: a look that ended before the batch, held no ask back for a
``max`` or a limit, and whose every listed ask either failed or has no container left to place is the
cycle's last (a further look would list nothing). A look after which some ask still has containers to
place (the free room held fewer of them than it wants), or that held an ask back, is followed by another.

A cycle where no ask waits (no queue has pending demand, no reservation, no opportunistic ask) does not
look at all, and misses nothing; an ask that waits alone still misses at every cycle.

Every cycle decides as a cycle that looks until a look lists nothing or changes nothing, whether or not an
ask waits: the same walk, proposals, decisions and missed-opportunity counts, on runs of asks of several
shapes, priorities and node selectors, gangs, opportunistic asks, a parent's ``max``, a user limit,
releases, withdrawals and nodes changing between cycles and with proposals in flight."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core import allocator
from sniper.core.allocation import CandidateFilter, FreeRoomPlacer, find_ask_candidates, try_allocate
from sniper.core.config import parse_partition
from sniper.core.state import PartitionState
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import Harness, config_of, partition_raw, queue

Walker = Callable[[PartitionState, int, FreeRoomPlacer], allocator._Walk]
NODE = f.NodeAdded(node="n1", capacity={"memory": 8192, "vcore": 8000})


def every_look(state: PartitionState, budget: int, placer: FreeRoomPlacer) -> allocator._Walk:
    """The guaranteed walk without an early end: it looks until a look lists nothing or places nothing
    new and fails no new ask."""
    walk = allocator._Walk()
    while budget > 0:
        filters = CandidateFilter(skip=walk.failed, blocked=walk.blocked, held_back=set())
        candidates = find_ask_candidates(state, budget, preemption=False, filters=filters)
        if not candidates:
            break
        result = try_allocate(state, candidates, preemption=False, placer=placer)
        walk.tried.update(ask.key for ask in candidates)
        walk.placed.extend(result.placed)
        progress = bool(result.placed) or not result.failed <= walk.failed
        walk.failed |= result.failed
        if not progress:
            break
        budget -= len(result.placed)
    return walk


def test_a_cycle_that_places_every_container_it_listed_looks_once(looks: list[int]) -> None:
    h = Harness(config_of(queue("a"), queue("b")))
    two = f.NodeAdded(node="n2", capacity={"memory": 8192, "vcore": 8000})
    h.feed(NODE, two, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    h.feed(
        f.AskAdded(app="a1", ask="wide", resource={"memory": 4096, "vcore": 1000}, count=2, priority=3),
        f.AskAdded(app="b1", ask="gang", resource={"memory": 1024}, count=3, gang_min=3),
        f.AskAdded(app="b1", ask="thin", resource={"memory": 512, "vcore": 4000}),
    )
    looks.clear()
    proposal = h.propose()
    assert proposal is not None and len(proposal.placements) == 6
    assert len(looks) == 1
    assert h.allocator.missed == {}


def test_an_ask_whose_next_container_no_longer_fits_brings_a_second_look(looks: list[int]) -> None:
    h = Harness(config_of(queue("a"), queue("b")))
    h.feed(NODE, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    # The free room (8 GiB) holds two of "three"'s containers: the first look lists two, both are placed,
    # and the one left is listed by a second look, which finds no node for it.
    h.feed(f.AskAdded(app="a1", ask="three", resource={"memory": 3072}, count=3))
    h.feed(f.AskAdded(app="b1", ask="small", resource={"memory": 1024}))
    looks.clear()
    proposal = h.propose()
    assert proposal is not None
    assert sorted(pl.ask for pl in proposal.placements) == ["small", "three", "three"]
    assert looks == [3, 1]
    assert h.allocator.missed == {}  # "three" got containers in this cycle: it starts again from none
    h.settle()
    assert h.allocator.missed == {("a1", "three"): 1}  # the next cycle tries the one left and misses


def test_an_ask_a_max_held_back_is_placed_by_the_second_look_and_no_third_is_made(looks: list[int]) -> None:
    h = Harness(config_of(queue("a", maximum={"memory": 12288})))
    h.feed(NODE, f.AppAdded(app="a1", queue="root.a"))
    h.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 2048}))
    h.settle()
    # "big" finds no room; counted against a's max it keeps "small" out of the first look.
    h.feed(f.AskAdded(app="a1", ask="big", resource={"memory": 8192}, priority=5))
    h.feed(f.AskAdded(app="a1", ask="small", resource={"memory": 4096}))
    looks.clear()
    proposal = h.propose()
    assert proposal is not None and [pl.ask for pl in proposal.placements] == ["small"]
    assert len(looks) == 2
    assert h.allocator.missed == {("a1", "big"): 1}


def test_a_cycle_that_fills_its_batch_leaves_the_rest_to_the_next_cycle(looks: list[int]) -> None:
    h = Harness(config_of(queue("a")))
    h.allocator.batch = 2
    h.feed(NODE, f.AppAdded(app="a1", queue="root.a"))
    h.feed(*(f.AskAdded(app="a1", ask=f"k{i}", resource={"memory": 1024}) for i in range(3)))
    looks.clear()
    first = h.propose()
    assert first is not None and [pl.ask for pl in first.placements] == ["k0", "k1"]
    assert len(looks) == 1 and h.allocator.dirty
    second = h.propose()
    assert second is not None and [pl.ask for pl in second.placements] == ["k2"]


def test_a_cycle_where_no_ask_waits_looks_for_nothing_and_misses_nothing(looks: list[int]) -> None:
    h = Harness(config_of(queue("a")))
    h.feed(NODE, f.AppAdded(app="a1", queue="root.a"))
    h.feed(f.AskAdded(app="a1", ask="one", resource={"memory": 2048}, count=2))
    h.settle()
    h.feed(f.AllocationReleased(allocation=h.allocated()[0].allocation))
    looks.clear()
    cycles = h.allocator.stats.cycles
    assert h.propose() is None
    assert looks == [] and h.allocator.missed == {} and h.allocator.last_tried == frozenset()
    assert h.allocator.stats.cycles == cycles + 1


def test_an_ask_that_does_not_fit_misses_at_every_cycle_though_nothing_else_waits() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(NODE, f.AppAdded(app="a1", queue="root.a"))
    h.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 4096}))
    h.settle()
    h.feed(f.AskAdded(app="a1", ask="wide", resource={"memory": 6144}))
    for cycle in range(1, 4):
        h.feed(f.AppAdded(app=f"idle{cycle}", queue="root.a"))  # a change: the cycle is not a repeat
        assert h.propose() is None
        assert h.allocator.missed == {("a1", "wide"): cycle}


def test_an_opportunistic_ask_is_placed_though_no_queue_has_pending_demand() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(NODE, f.AppAdded(app="a1", queue="root.a"))
    h.feed(f.AskAdded(app="a1", ask="spare", resource={"memory": 2048}, execution_type="opportunistic"))
    assert h.cache.state.root is not None and not any(h.cache.state.root.pending.values())
    proposal = h.propose()
    assert proposal is not None and [(pl.ask, pl.node) for pl in proposal.placements] == [("spare", "n1")]


# ---------------------------------------------------------------------- every cycle decides alike

NODES = ("n1", "n2", "n3")
APPS = {"a1": "root.prod.a", "a2": "root.prod.a", "b1": "root.prod.b", "c1": "root.dev.c"}


def nested() -> dict[str, Any]:
    dev = queue("dev", queue("c"))
    dev["queues"][0]["limits"] = [{"users": ["*"], "maxresources": {"memory": "6Gi"}}]
    return partition_raw(queue("prod", queue("a"), queue("b"), maximum={"memory": 16384}), dev)


def _recorded(walk: Walker, into: list[tuple[object, ...]]) -> Walker:
    """``walk``, appending what each call placed, tried, failed and found blocked to ``into``."""

    def recording(state: PartitionState, budget: int, placer: FreeRoomPlacer) -> allocator._Walk:
        done = walk(state, budget, placer)
        placed = [(ask.key, node.name) for ask, node in done.placed]
        into.append((placed, sorted(done.tried), sorted(done.failed), sorted(done.blocked)))
        return done

    return recording


class Twins:
    """The same feed to two harnesses; one's cycles look until a look lists nothing (:func:`every_look`).
    Every cycle, answer and decision of the two is compared."""

    def __init__(self) -> None:
        config = parse_partition(nested())
        self.early, self.every = Harness(config), Harness(config)
        self.feed(
            *(f.NodeAdded(node=n, capacity={"memory": 8192, "vcore": 8000}, labels={"zone": n}) for n in NODES),
            *(f.AppAdded(app=app, queue=path, user=app) for app, path in APPS.items()),
        )

    def feed(self, *events: f.Feed) -> None:
        assert self.early.feed(*events) == self.every.feed(*events)

    def propose(self) -> p.AllocationProposal | None:
        walks: list[tuple[object, ...]] = []
        proposals = []
        for harness, walk in ((self.early, allocator._place_guaranteed), (self.every, every_look)):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(allocator, "_place_guaranteed", _recorded(walk, walks))
                if harness is self.every:  # every cycle that is not a repeat walks, whether or not an ask waits
                    patch.setattr(allocator, "_nothing_waits", lambda state: False)
                proposals.append(harness.propose())
        if len(walks) == 1:  # one cycle skipped its walk: no ask waited, and the other's walk found none
            assert walks == [([], [], [], [])]
        else:
            assert walks[1:] == walks[:1]
        assert proposals[0] == proposals[1]
        assert self.early.allocator.missed == self.every.allocator.missed
        return proposals[0]

    def deliver(self) -> None:
        if self.early.in_flight:
            assert self.early.deliver() == self.every.deliver()
            assert self.early.decisions == self.every.decisions

    def settle(self) -> None:
        for _ in range(100):
            while self.early.in_flight:
                self.deliver()
            if self.propose() is None:
                return
        raise AssertionError("the allocator never settled")


# One step: (what, which, memory, count, priority).
STEP = st.tuples(
    st.sampled_from(
        ["ask", "gang", "selector", "spare", "cycle", "deliver", "settle", "release", "withdraw", "resize", "lose"]
    ),
    st.integers(0, 30),
    st.sampled_from([512, 1024, 2048, 3072, 4096, 6144, 8192]),
    st.integers(1, 4),
    st.integers(0, 2),
)


def play(t: Twins, steps: list[tuple[str, int, int, int, int]]) -> None:
    for i, (what, which, memory, count, priority) in enumerate(steps):
        state = t.early.cache.state
        if what in ("ask", "gang", "selector", "spare"):
            app = sorted(APPS)[which % len(APPS)]
            t.feed(
                f.AskAdded(
                    app=app,
                    ask=f"k{i}",
                    resource={"memory": memory, "vcore": 500 * count},
                    count=count,
                    priority=priority,
                    gang_min=count if what == "gang" else 0,
                    node_selector={"zone": [NODES[which % 3]]} if what == "selector" else {},
                    execution_type="opportunistic" if what == "spare" else "guaranteed",
                )
            )
        elif what == "cycle":
            t.propose()
        elif what == "deliver":
            t.deliver()
        elif what == "settle":
            t.settle()
        elif what == "release" and state.allocations:
            t.feed(f.AllocationReleased(allocation=sorted(state.allocations)[which % len(state.allocations)]))
        elif what == "withdraw":
            held = sorted((a.name, k) for a in state.apps.values() for k in a.asks)
            if held:
                app, ask = held[which % len(held)]
                t.feed(f.AskRemoved(app=app, ask=ask))
        elif what == "resize":
            node = NODES[which % 3]
            if node in state.nodes:
                t.feed(f.NodeUpdated(node=node, capacity={"memory": 2 * memory, "vcore": 8000}))
            else:
                t.feed(f.NodeAdded(node=node, capacity={"memory": 2 * memory, "vcore": 8000}, labels={"zone": node}))
        elif what == "lose":
            t.feed(f.NodeRemoved(node=NODES[which % 3]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=6, max_size=40))
def test_every_cycle_decides_and_counts_misses_as_one_that_looks_until_nothing_is_listed(
    steps: list[tuple[str, int, int, int, int]],
) -> None:
    t = Twins()
    play(t, steps)
    t.settle()
    assert t.early.decisions == t.every.decisions
