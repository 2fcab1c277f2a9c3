"""Preemption-mode placement (``answer_placement_request`` with the :class:`VictimPlacer` in ``try_allocate``).

Most tests hand the allocator a placement request with chosen quotas and budget, so that placement is
tested apart from the quota computation; the rest run a whole sniper round. Victim cost is running
time unless said otherwise: containers started earlier cost more.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.core import resources as res
from sniper.core.preemption.placement import answer_placement_request
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import queue
from tests.preemption_support import PreemptHarness, preemption_raw, two_queues

BIG = {"memory": 10_000}


def request(
    quotas: dict[str, dict[str, int]] | None = None,
    *,
    beneficiaries: tuple[str, ...] = ("root.a",),
    budget: dict[str, int] | None = None,
    rid: str = "r1",
    **fields: Any,
) -> p.PlacementRequest:
    return p.PlacementRequest(
        id=rid,
        policy="sniper",
        view_seq=0,
        budget=BIG if budget is None else budget,
        quotas={"root.b": BIG} if quotas is None else quotas,
        beneficiaries=list(beneficiaries),
        **fields,
    )


def place(h: PreemptHarness, req: p.PlacementRequest | None = None, *, now: float = 100.0) -> p.PlacementReply:
    if now > h.cache.state.now:
        h.tick(now)
    return answer_placement_request(h.allocator, req or request())


def sizes(h: PreemptHarness, victims: list[str]) -> list[int]:
    return sorted(h.alloc(v).resource["memory"] for v in victims)


def one_node(held: list[int], ask: int, *, free: int = 0) -> PreemptHarness:
    """n1 (``sum(held) + free``) holds b's containers started at t = 0, 1, 2, ... (later = cheaper); a asks."""
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1", memory=sum(held) + free)
    h.fill("b1", "root.b", "n1", held)
    h.app("a1", "root.a")
    h.ask("a1", "big", ask)
    h.starve()
    return h


# ---------------------------------------------------------------------- minimal victim sets


@pytest.mark.parametrize(
    ("held", "free", "ask", "victims"),
    [
        ([50, 50], 0, 50, [50]),
        ([60, 10, 10, 10, 10], 0, 60, [60]),  # the four cheap 10s were tried first and are all dropped again
        ([45, 20, 10, 25], 0, 50, [10, 20, 25]),  # cheapest first: 25, 10, 20 and every one is needed
        ([40, 30, 20, 10], 0, 50, [20, 30]),  # 10, 20, 30 reach 60; the 10 is dropped again
        ([50, 30, 20], 20, 50, [30]),  # free room counts: only 30 is missing
        ([30, 30, 30], 10, 60, [30, 30]),
    ],
)
def test_the_victim_set_is_minimal(held: list[int], free: int, ask: int, victims: list[int]) -> None:
    h = one_node(held, ask, free=free)
    reply = place(h)
    (pl,) = reply.placements
    assert pl.node == "n1"
    assert sizes(h, pl.victims) == victims
    room = free + sum(sizes(h, pl.victims))
    assert room >= ask
    for v in pl.victims:  # no victim can be spared
        assert room - h.alloc(v).resource["memory"] < ask


@pytest.mark.parametrize(
    ("held", "quota", "ask", "victims"),
    [
        # the single 60 fits the quota even though the greedy pass tried the cheap 10s first
        ([60, 10, 10, 10, 10], 60, 60, [60]),
        ([40, 40, 20], 40, 40, [40]),
        # containers are whole (invariant 5a): one victim may overshoot the quota while b (guarantee
        # 50) keeps its guarantee: 100 - 40 = 60
        ([40, 40, 20], 30, 40, [40]),
        ([30, 30, 30], 50, 60, None),  # 30 within the quota, the second 30 would leave b at 30 < 50
        ([60, 30], 20, 60, None),  # the overshoot would leave b at 30, below its guarantee
    ],
)
def test_the_victim_set_stays_within_the_quota(
    held: list[int], quota: int, ask: int, victims: list[int] | None
) -> None:
    h = one_node(held, ask)
    reply = place(h, request({"root.b": {"memory": quota}}))
    if victims is None:
        assert reply.placements == [] and reply.unplaceable == ["a1/big"]
    else:
        (pl,) = reply.placements
        assert sizes(h, pl.victims) == victims


@settings(max_examples=60, deadline=None)
@given(
    held=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 10)), min_size=1, max_size=7),
    free=st.integers(0, 30),
    ask=st.tuples(st.integers(1, 120), st.integers(0, 10)),
    quota=st.integers(10, 200),
)
def test_victim_sets_free_enough_never_drop_a_needed_victim_and_keep_the_quota(
    held: list[tuple[int, int]], free: int, ask: tuple[int, int], quota: int
) -> None:
    """YUNIKORN-3442 and YUNIKORN-2699: the set frees the room, none of its victims is unnecessary, and
    it takes no more than the quota but for one whole container; two resources, so trimming has to
    respect both."""
    cap = {"memory": sum(m for m, _ in held) + free, "vcore": sum(v for _, v in held) + 5}
    h = PreemptHarness(preemption_raw(queue("a"), queue("b")))
    h.feed(f.NodeAdded(node="n1", capacity=cap))
    h.feed(f.NodeAdded(node="down", capacity={"memory": 1000, "vcore": 1000}, schedulable=False))  # asks stay
    for i, (m, v) in enumerate(held):
        h.run("b1", m, "n1", at=float(i), vcore=v or None, queue_path="root.b")
    h.app("a1", "root.a")
    want = {"memory": ask[0], "vcore": ask[1]} if ask[1] else {"memory": ask[0]}
    h.ask("a1", "big", ask[0], vcore=ask[1] or None)
    h.starve()
    node = h.cache.state.nodes["n1"]
    base = res.sub(node.capacity, node.allocated)
    reply = place(h, request({"root.b": {"memory": quota, "vcore": 1000}}))
    if res.fits(want, base):
        assert reply.placements == []  # free room is the normal allocator's, not preemption's
        return
    if not reply.placements:
        # nothing at all fits within the quota, or the whole node cannot hold the ask
        return
    (pl,) = reply.placements
    freed = res.total(h.alloc(v).resource for v in pl.victims)
    room = res.add(base, freed)
    assert res.fits(want, room)
    # whole containers: at most one victim beyond the quota (b has no guarantee to keep)
    assert any(freed.get("memory", 0) - h.alloc(v).resource["memory"] <= quota for v in pl.victims)
    for v in pl.victims:
        assert not res.fits(want, res.sub(room, h.alloc(v).resource)), f"{v} is not needed"
    assert len(set(pl.victims)) == len(pl.victims)


def test_a_single_victim_that_fits_the_quota_is_always_found() -> None:
    """Exhaustively over small nodes: when one container alone makes room within the quota, a set is found."""
    misses = []
    for held in itertools.product([10, 20, 40, 60], repeat=3):
        for quota in (20, 40, 60):
            ask = 40
            if not any(x >= ask and x <= quota for x in held):
                continue
            h = one_node(list(held), ask)
            reply = place(h, request({"root.b": {"memory": quota}}))
            if not reply.placements:
                misses.append((held, quota))
    assert misses == []


# ---------------------------------------------------------------------- choosing the node


@pytest.mark.parametrize(
    ("cost", "n1", "n2", "node"),
    [
        # (size, start, priority) of b's containers on each node
        ("running_time", [(50, 0, 0), (50, 0, 0)], [(50, 5, 0), (50, 5, 0)], "n2"),  # n2's ran less
        ("running_time", [(50, 5, 0), (50, 5, 0)], [(50, 0, 0), (50, 0, 0)], "n1"),
        ("running_time", [(30, 9, 0), (30, 9, 0), (40, 0, 0)], [(50, 3, 0), (50, 3, 0)], "n1"),  # 1 + 1 < 7
        ("priority", [(50, 5, 3), (50, 5, 3)], [(50, 0, 1), (50, 0, 1)], "n2"),  # lower priority first
        ("priority", [(50, 0, 0), (50, 0, 0)], [(50, 5, 1), (50, 5, 1)], "n1"),
    ],
)
def test_the_cheapest_feasible_node_wins(
    cost: str, n1: list[tuple[int, int, int]], n2: list[tuple[int, int, int]], node: str
) -> None:
    h = PreemptHarness(two_queues(150, 50, victim_cost=cost))
    h.nodes("n1", "n2")
    runs = sorted([(start, "n1", size, prio) for size, start, prio in n1] + [(s, "n2", z, pr) for z, s, pr in n2])
    for start, name, size, prio in runs:
        h.run("b1", size, name, at=float(start), priority=prio, queue_path="root.b")
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    reply = place(h, request(victim_cost=cost), now=10.0)
    (pl,) = reply.placements
    assert pl.node == node
    assert all(h.alloc(v).node == node for v in pl.victims)


# ---------------------------------------------------------------------- least work lost

# One node's worth of each shape: memory only, GPUs with memory and vcore beside them, vcore-heavy.
SHAPES = {
    "memory": {"memory": 60},
    "gpu": {"memory": 40, "vcore": 4000, "gpu": 2},
    "vcore": {"memory": 10, "vcore": 8000},
}
PLENTY = {"memory": 10**6, "vcore": 10**6, "gpu": 10**6}


def shaped(shape: dict[str, int], nodes: dict[str, list[tuple[str, float, int]]], cost: str) -> PreemptHarness:
    """Nodes holding one ``shape`` each, full of b's containers: per node (``whole`` or ``half`` of the
    shape, start, priority); a asks for a whole ``shape`` and has missed a cycle."""
    h = PreemptHarness(two_queues(150, 50, victim_cost=cost))
    h.feed(*(f.NodeAdded(node=name, capacity=shape) for name in nodes))
    h.app("b1", "root.b")
    runs = sorted((start, name, part, prio) for name, held in nodes.items() for part, start, prio in held)
    for i, (start, name, part, prio) in enumerate(runs):
        resource = shape if part == "whole" else {k: v // 2 for k, v in shape.items()}
        h.feed(f.AskAdded(app="b1", ask=f"b-{i}", resource=resource, priority=prio))
        h.tick(start)
        h.cache.allocate("b1", f"b-{i}", name)
        h.pump()
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="big", resource=shape))
    h.starve()
    return h


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize(
    ("cost", "grace", "n1", "n2", "node"),
    [
        # Sets of one victim each: the one that ran 10 s, not the one that ran 500 s.
        ("running_time", 15.0, [("whole", 490, 0)], [("whole", 0, 0)], "n1"),
        ("running_time", 15.0, [("whole", 0, 0)], [("whole", 490, 0)], "n2"),
        # Priority dominates under a priority cost: the old low-priority container goes, then the young.
        ("priority_then_running_time", 15.0, [("whole", 490, 5)], [("whole", 0, 1)], "n2"),
        ("priority_then_running_time", 15.0, [("whole", 490, 1)], [("whole", 0, 1)], "n1"),
        # Two young victims (5 s each) against one older (20 s): each victim runs on through its grace, so
        # the pair loses 2 x (5 + 15) = 40 s against 20 + 15 = 35 s; with no grace the pair loses less.
        ("running_time", 15.0, [("half", 495, 0), ("half", 495, 0)], [("whole", 480, 0)], "n2"),
        ("running_time", 0.0, [("half", 495, 0), ("half", 495, 0)], [("whole", 480, 0)], "n1"),
    ],
)
def test_the_victim_set_that_loses_least_work_at_its_kill_wins(
    shape: str, cost: str, grace: float, n1: list[tuple[str, float, int]], n2: list[tuple[str, float, int]], node: str
) -> None:
    h = shaped(SHAPES[shape], {"n1": n1, "n2": n2}, cost)
    reply = place(h, request({"root.b": PLENTY}, budget=PLENTY, victim_cost=cost, grace=grace), now=500.0)
    (pl,) = reply.placements
    assert pl.node == node
    assert all(h.alloc(v).node == node for v in pl.victims)
    if cost == "running_time":
        lost = sum(500.0 + grace - h.alloc(v).start for v in pl.victims)
        assert pl.cost == pytest.approx(lost), "the set's cost is the work its kills throw away"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_on_one_node_the_younger_of_two_equal_victims_goes(shape: str) -> None:
    h = shaped(SHAPES[shape], {"n1": [("half", 0, 0), ("half", 480, 0)]}, "running_time")
    h.feed(f.AskRemoved(app="a1", ask="big"))
    h.feed(f.AskAdded(app="a1", ask="half", resource={k: v // 2 for k, v in SHAPES[shape].items()}))
    h.starve()
    reply = place(h, request({"root.b": PLENTY}, budget=PLENTY, grace=15.0), now=500.0)
    (pl,) = reply.placements
    assert [h.alloc(v).start for v in pl.victims] == [480.0]


def test_a_required_node_is_the_only_candidate() -> None:
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50], start=0)
    h.fill("b1", "root.b", "n2", [50, 50], start=5)  # cheaper, but not the one asked for
    h.app("a1", "root.a")
    h.ask("a1", "pinned", 50, node="n1")
    h.starve()
    (pl,) = place(h).placements
    assert pl.node == "n1"


# ---------------------------------------------------------------------- AM containers: last resort


def test_am_containers_are_victims_only_as_a_last_resort() -> None:
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1", "n2")
    h.run("b1", 50, "n1", at=0.0, queue_path="root.b")  # old task: costly
    am_n1 = h.run("b1", 50, "n1", at=9.0, am=True)  # new AM: cheapest of all by running time
    am_n2 = h.run("b2", 50, "n2", at=9.0, am=True, queue_path="root.b")
    h.run("b2", 50, "n2", at=9.0)
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    (pl,) = place(h, now=10.0).placements
    assert am_n1 not in pl.victims and am_n2 not in pl.victims
    assert not any(h.alloc(v).am for v in pl.victims)


def test_an_am_free_node_wins_over_a_cheaper_node_that_needs_an_am() -> None:
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1", "n2")
    h.run("b1", 50, "n1", at=0.0, queue_path="root.b")
    h.run("b1", 50, "n1", at=0.0)  # n1: two old tasks
    h.run("b2", 50, "n2", at=9.0, am=True, queue_path="root.b")
    h.run("c1", 50, "n2", at=9.0, queue_path="root.a")  # n2: a fresh AM, and a's own container
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    (pl,) = place(h, now=10.0).placements
    assert pl.node == "n1"
    assert not any(h.alloc(v).am for v in pl.victims)


def test_an_am_is_taken_when_nothing_else_makes_room() -> None:
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1")
    am = h.run("b1", 50, "n1", at=0.0, am=True, queue_path="root.b")
    h.run("c1", 50, "n1", at=9.0, queue_path="root.a")
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    (pl,) = place(h, now=10.0).placements
    assert pl.victims == [am]


@pytest.mark.parametrize(("quota", "victims"), [(60, [30, 30]), (40, None), (100, [30, 30])])
def test_an_am_is_not_taken_because_the_quota_is_too_short_for_tasks(quota: int, victims: list[int] | None) -> None:
    """Tasks could make the room, only the quota forbids it now: the ask waits rather than kill an AM."""
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1")
    h.fill("b1", "root.b", "n1", [30, 30, 30])
    am = h.run("b1", 10, "n1", at=9.0, am=True)  # the cheapest container by far
    h.app("a1", "root.a")
    h.ask("a1", "big", 40)
    h.starve()
    reply = place(h, request({"root.b": {"memory": quota}}), now=10.0)
    if victims is None:
        assert reply.placements == [] and reply.unplaceable == ["a1/big"]
    else:
        (pl,) = reply.placements
        assert am not in pl.victims and sizes(h, pl.victims) == victims


# ---------------------------------------------------------------------- victims, quotas and budget


def test_victims_already_preempting_are_not_taken_again() -> None:
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50], start=0)
    h.fill("b1", "root.b", "n2", [50, 50], start=0)
    h.app("a1", "root.a")
    h.ask("a1", "one", 50)
    h.starve()
    first = h.preempt_round(10.0)
    assert first.outcome is not None and first.outcome.accepted == 1
    (taken,) = first.placements[0].victims
    assert h.alloc(taken).preempting
    h.ask("a1", "two", 50)
    h.starve()
    second = h.preempt_round(11.0)
    assert second.outcome is not None and second.outcome.accepted == 1
    assert taken not in second.placements[0].victims
    assert len({*first.placements[0].victims, *second.placements[0].victims}) == 2
    assert h.model.violations == []


def test_the_room_of_proportional_victims_counts_and_they_are_not_taken_again() -> None:
    h = one_node([30, 40, 30], 50)
    marked = sorted(h.cache.state.allocations)[0]  # the 30 started first
    h.cache.commit(p.VictimsMarked(victims=[marked], deadline=50.0))
    h.pump()
    (pl,) = place(h).placements
    assert marked not in pl.victims
    assert sizes(h, pl.victims) == [30]  # 30 of the 50 are already leaving: one more 30 is enough


def test_each_victim_queue_keeps_within_its_quota() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 200}),
        queue("b", guaranteed={"memory": 50}),
        queue("c", guaranteed={"memory": 50}),
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2", "n3")
    for node in ("n1", "n2"):
        h.fill("b1", "root.b", node, [20] * 5)
    h.fill("c1", "root.c", "n3", [20] * 5)
    h.app("a1", "root.a")
    h.ask("a1", "small", 20, count=15)
    h.starve()
    quotas = {"root.b": {"memory": 60}, "root.c": {"memory": 40}}
    reply = place(h, request(quotas))
    taken: dict[str, int] = {}
    for pl in reply.placements:
        for v in pl.victims:
            alloc = h.alloc(v)
            taken[alloc.queue.path] = taken.get(alloc.queue.path, 0) + alloc.resource["memory"]
    assert taken == {"root.b": 60, "root.c": 40}  # both quotas used up exactly, never more
    assert len(reply.placements) == 5
    assert reply.unplaceable == ["a1/small"]


@pytest.mark.parametrize(
    ("per_round", "placed"),
    [
        (0.0, 0),  # a round that may preempt nothing preempts nothing
        (0.1, 1),  # 20 MiB: the first 40 MiB victim exhausts it
        (0.25, 2),  # 50 MiB: reached by the second
        (0.5, 3),
        (1.0, 3),  # then only the asks limit it
    ],
)
def test_the_round_budget_stops_the_round(per_round: float, placed: int) -> None:
    h = PreemptHarness(two_queues(120, 80, total_preemption_per_round=per_round))
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [40, 40, 20])
    h.fill("b1", "root.b", "n2", [40, 40, 20], start=5)
    h.app("a1", "root.a")
    h.ask("a1", "big", 40, count=3)
    h.starve()
    result = h.preempt_round(20.0)
    assert len(result.placements) == placed
    budget = int(200 * per_round)
    freed = sum(sizes(h, [v for pl in result.placements for v in pl.victims]))
    # the round stops once its budget is reached: at most one placement beyond it
    assert freed - 40 < budget or placed == 0
    assert h.model.violations == []


# ---------------------------------------------------------------------- which asks are tried


def test_masked_asks_are_skipped_and_counted() -> None:
    h = one_node([50, 50, 50, 50], 50)
    h.ask("a1", "other", 50)
    h.starve()
    reply = place(h, request(mask=["a1/big"]))
    assert [(pl.app, pl.ask) for pl in reply.placements] == [("a1", "other")]
    assert reply.mask_hits >= 1
    assert "a1/big" not in reply.unplaceable
    fresh = one_node([50, 50, 50, 50], 50)
    fresh.ask("a1", "other", 50)
    fresh.starve()
    everything = place(fresh, request(mask=["a1/big", "a1/other"]))
    assert everything.placements == [] and everything.unplaceable == []
    assert everything.mask_hits == 2


def test_asks_no_victim_set_can_help_are_reported_unplaceable() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 50}),
        queue("c", guaranteed={"memory": 50}, preemption_policy="disabled"),
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50])
    h.fill("c1", "root.c", "n1", [50])
    h.fill("c1", "root.c", "n2", [100])
    h.app("a1", "root.a")
    h.ask("a1", "huge", 80)  # b's 50 is all a node could offer
    h.ask("a1", "fits", 50)
    h.starve()
    reply = place(h, request({"root.b": BIG}))
    assert [pl.ask for pl in reply.placements] == ["fits"]
    assert reply.unplaceable == ["a1/huge"]


@pytest.mark.parametrize(
    ("cycles", "min_missed", "placed"),
    [(0, 1, False), (1, 1, True), (1, 2, False), (2, 2, True), (0, 0, True), (3, 5, False)],
)
def test_only_asks_that_missed_enough_cycles_are_tried(cycles: int, min_missed: int, placed: bool) -> None:
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve(cycles)
    assert h.allocator.missed.get(("a1", "big"), 0) == cycles
    reply = place(h, request(min_missed=min_missed))
    assert bool(reply.placements) is placed
    assert reply.unplaceable == []  # not tried is not unplaceable
    if placed:
        assert reply.placements[0].reason == f"a1/big missed {cycles} cycles"
        assert ("a1", "big") not in h.allocator.missed  # it got its container: the count starts over


def test_placements_are_held_until_the_cache_answers() -> None:
    h = one_node([50, 50], 50)
    reply = place(h)
    assert len(reply.placements) == 1
    ask = h.allocator.state.apps["a1"].asks["big"]
    assert ask.allocating == 1 and "r1" in h.allocator.inflight
    again = place(h, request(rid="r2"))
    assert again.placements == []  # the one container is already proposed
    h.allocator.apply_view(
        p.ViewDelta(seq=h.allocator.view_seq + 1, outcomes=[p.ProposalOutcome(proposal="r1", accepted=0)])
    )
    assert ask.allocating == 0 and "r1" not in h.allocator.inflight


def test_asks_of_queues_that_are_not_beneficiaries_are_not_tried() -> None:
    h = one_node([50, 50], 50)
    assert place(h, request(beneficiaries=())).placements == []
    assert place(h, request(beneficiaries=("root.b",), rid="r2")).placements == []
    # a target the queue already reached stops it too
    assert place(h, request(targets={"root.a": {"memory": 0}}, rid="r3")).placements == []
    assert len(place(h, request(targets={"root.a": {"memory": 50}}, rid="r4")).placements) == 1


# ---------------------------------------------------------------------- intra-queue mode


def test_intra_queue_only_takes_lower_priority_containers_of_other_apps_in_the_same_leaf() -> None:
    h = PreemptHarness(two_queues(100, 100, intra_queue=True, policy="none"), policy="intra_queue")
    h.nodes("n1", "n2", "n3")
    low_am = h.run("low", 20, "n1", at=9.0, am=True, queue_path="root.a")  # cheapest, but an AM
    low = [h.run("low", 20, "n1", at=float(i)) for i in range(4)]  # priority 0, other app
    mine = h.run("high", 50, "n2", at=9.0, queue_path="root.a")  # the asking app's own, priority 0
    h.run("mid", 50, "n2", at=9.0, priority=7, queue_path="root.a")  # same leaf, not lower
    h.fill("b1", "root.b", "n3", [50, 50], start=9)  # another leaf: never
    h.ask("high", "urgent", 40, priority=5)
    h.starve()
    result = h.preempt_round(10.0)
    assert isinstance(result.request, p.PlacementRequest) and result.request.intra_queue
    (pl,) = result.placements
    assert pl.node == "n1"
    assert set(pl.victims) <= set(low) and len(pl.victims) == 2
    assert low_am not in pl.victims and mine not in pl.victims
    assert result.outcome is not None and result.outcome.accepted == 1
    preempts = result.preempts()
    assert {x.queue for x in preempts} == {"root.a"} and {x.for_queue for x in preempts} == {"root.a"}
    assert all("priority 0 below the ask's 5" in x.reason for x in preempts)
    assert h.model.violations == []


def test_intra_queue_finds_nothing_when_no_container_has_a_lower_priority() -> None:
    h = PreemptHarness(two_queues(100, 100, intra_queue=True, policy="none"), policy="intra_queue")
    h.nodes("n1")
    h.run("other", 50, "n1", priority=5, queue_path="root.a")
    h.run("other", 50, "n1", priority=5)
    h.app("high", "root.a")
    h.ask("high", "urgent", 40, priority=5)
    h.starve()
    result = h.preempt_round(10.0)
    assert result.request is None  # no lower-priority container: the leaf is no beneficiary
    assert h.preempts() == []


def test_a_failed_attempt_misses_an_opportunity_and_only_searched_asks_are_masked() -> None:
    # budget for one 50 victim: "first" takes it, "second" is stopped by the budget, "huge" has no set
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1", "n2")
    h.feed(f.NodeAdded(node="down", capacity={"memory": 200}, schedulable=False))  # "huge" may fit one day
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=2)
    h.app("a1", "root.a")
    h.ask("a1", "first", 50, priority=2)
    h.ask("a1", "huge", 150, priority=3)
    h.ask("a1", "second", 50)
    h.starve()
    before = dict(h.allocator.missed)
    reply = place(h, request(budget={"memory": 50}))
    assert [pl.ask for pl in reply.placements] == ["first"]
    assert reply.unplaceable == ["a1/huge"]  # "second" was never searched: not masked
    assert h.allocator.missed[("a1", "huge")] == before[("a1", "huge")] + 1
    assert h.allocator.missed[("a1", "second")] == before[("a1", "second")]


def test_the_cheapest_set_is_found_over_every_node_not_the_first_sixteen() -> None:
    h = PreemptHarness(two_queues(2000, 2000))
    names = [f"n{i:02d}" for i in range(40)]
    h.nodes(*names)
    for name in names[:-1]:
        h.fill("b1", "root.b", name, [50, 50])  # started at t = 0, 1: cost 99-100 each at t = 100
    h.fill("b1", "root.b", names[-1], [50, 50], start=90.0)  # the cheap ones, last in every node order
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    reply = place(h)
    (pl,) = reply.placements
    assert pl.node == names[-1] and pl.cost == 9.0
    capped = place(h, request(rid="r2", max_candidate_nodes=1))
    assert [x.node for x in capped.placements] != [names[-1]]  # the opt-in cap still trades cost for time


@pytest.mark.parametrize("kind", ["vcore", "gpu"])
def test_victims_holding_no_memory_are_found(kind: str) -> None:
    h = PreemptHarness(preemption_raw(queue("a", guaranteed={kind: 8}), queue("b", guaranteed={kind: 8})))
    h.feed(*(f.NodeAdded(node=n, capacity={"memory": 100, kind: 8}) for n in ("n1", "n2")))
    h.app("b1", "root.b")
    h.feed(f.AskAdded(app="b1", ask="t", resource={kind: 4}, count=4))
    h.settle()
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="need", resource={kind: 4}, count=1))
    h.starve()
    reply = place(h, request({"root.b": {kind: 8}}))
    (pl,) = reply.placements
    assert len(pl.victims) == 1 and h.alloc(pl.victims[0]).resource == {kind: 4}


def parent_at_max() -> PreemptHarness:
    """YuniKorn's user guide, first example: under a parent with max 12, q1 holds 10 (guarantee 5),
    q2 holds 2 (guarantee 5) and asks for 3 more; the cluster has room the parent may not use."""
    raw = preemption_raw(
        queue(
            "p",
            queue("q1", guaranteed={"memory": 5}),
            queue("q2", guaranteed={"memory": 5}),
            maximum={"memory": 12},
        ),
        queue("other"),
    )
    h = PreemptHarness(raw)
    h.nodes("n1", memory=20)
    h.fill("b1", "root.p.q1", "n1", [1] * 10)
    h.fill("c1", "root.p.q2", "n1", [1, 1], start=10)
    h.ask("c1", "more", 1, count=3)
    h.starve()
    return h


def test_a_parent_at_its_max_does_not_block_preemption_for_its_own_children() -> None:
    h = parent_at_max()
    assert h.cache.state.nodes["n1"].free() == {"memory": 8}  # free room, but p is at its max
    reply = place(h, request({"root.p.q1": {"memory": 3}}, beneficiaries=("root.p.q2",)))
    assert len(reply.placements) == 3
    assert all(len(pl.victims) == 1 and h.alloc(pl.victims[0]).queue.path == "root.p.q1" for pl in reply.placements)


def test_the_user_guide_example_preempts_three_in_a_full_round() -> None:
    h = parent_at_max()
    result = h.preempt_round(30.0)
    assert len(result.preempts()) == 3
    assert {x.queue for x in result.preempts()} == {"root.p.q1"}
    assert h.model.violations == []


def test_whole_victims_of_several_queues_combine_on_one_node() -> None:
    """b and c may each lose 30, less than one of their 50 containers; each keeps its guarantee
    (100) without one: a's 100 is made on n1 from one container of each (invariant 5a)."""
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 100}),
        queue("c", guaranteed={"memory": 100}),
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2", "n3")
    h.fill("b1", "root.b", "n1", [50])
    h.fill("c1", "root.c", "n1", [50], start=1)
    h.fill("b1", "root.b", "n2", [50, 50], start=2)
    h.fill("c1", "root.c", "n3", [50, 50], start=4)
    h.app("a1", "root.a")
    h.ask("a1", "big", 100)
    h.starve()
    reply = place(h, request({"root.b": {"memory": 30}, "root.c": {"memory": 30}}))
    (pl,) = reply.placements
    assert pl.node == "n1"
    assert sorted(h.alloc(v).queue.path for v in pl.victims) == ["root.b", "root.c"]
    outcome, _ = h.commit(
        p.PreemptionProposal(partition="default", id="x", view_seq=0, policy="sniper", placements=[pl])
    )
    assert outcome.accepted == 1, outcome.rejected


def test_a_queue_overshoots_its_quota_by_one_container_per_round_at_most() -> None:
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1", "n2", memory=80)
    h.fill("b1", "root.b", "n1", [40, 40])
    h.fill("b1", "root.b", "n2", [40, 40], start=2)
    h.app("a1", "root.a")
    h.ask("a1", "big", 40, count=2)
    h.starve()
    reply = place(h, request({"root.b": {"memory": 30}}))
    (pl,) = reply.placements  # 40 beyond a quota of 30 once; a second 40 would overdraw it again
    assert sizes(h, pl.victims) == [40]


def test_the_overshoot_ignores_a_guaranteed_resource_the_victim_queue_never_used() -> None:
    """b's guarantee names vcores it never used (YuniKorn's victim queue "with some OG res types"): losing
    one whole container beyond its quota leaves it at its memory guarantee, which is its guarantee's
    dominant level (invariant 5a): the victim is allowed, as the quotas' own check allows it."""
    raw = preemption_raw(queue("a", guaranteed={"memory": 50}), queue("b", guaranteed={"memory": 50, "vcore": 50}))
    h = PreemptHarness(raw)
    h.nodes("n1", memory=100, vcore=100)
    h.fill("b1", "root.b", "n1", [50, 50])
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    reply = place(h, request({"root.b": {"memory": 40}}))
    assert [sizes(h, pl.victims) for pl in reply.placements] == [[50]]
