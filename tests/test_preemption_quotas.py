"""Sniper's quotas (``calculate-preemption-quotas``): who may lose what, who benefits, the budget.

From the ideal assignment: a leaf over both its ideal and ``guaranteed * (1 + deadzone)`` may lose what
it holds above its floor (its guarantee on every resource, its ideal on the resource it is most over
relative to the cluster); a leaf below its ideal on every resource, with demand, is a beneficiary; the
round's budget is ``total_preemption_per_round`` of the capacity.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.core import resources as res
from sniper.core.config import parse_partition
from sniper.core.preemption.eligibility import may_take
from sniper.core.preemption.quotas import (
    below_ideal,
    compute_quotas,
    floor_of,
    guarantee_floor,
    net_usage,
    over_deadzone,
    usable_capacity,
)
from sniper.core.resources import Resource
from sniper.core.state import PartitionState, Queue
from tests.core_support import queue
from tests.preemption_support import PreemptHarness, preemption_raw, two_queues


def _queue_with(guaranteed: Resource) -> Queue:
    raw = preemption_raw(queue("a", guaranteed=guaranteed or None), queue("b"))
    return PartitionState("default", parse_partition(raw)).queues["root.a"]


def occupy(h: PreemptHarness, app: str, queue_path: str, total: int, nodes: list[str], piece: int = 10) -> None:
    """``total`` memory of ``app`` in ``piece``-sized containers, filling ``nodes`` (100 each) in order."""
    left = total
    for node in nodes:
        room = 100
        while left > 0 and room > 0:
            size = min(piece, left, room)
            h.run(app, size, node, queue_path=queue_path)
            left -= size
            room -= size


def quotas_of(h: PreemptHarness) -> Any:
    state = h.cache.state
    assert state.config is not None
    return compute_quotas(state, state.config.preemption)


# ---------------------------------------------------------------------- floor, below ideal, deadzone

CAP = {"memory": 100, "vcore": 100}


@pytest.mark.parametrize(
    ("usage", "ideal", "guaranteed", "capacity", "floor"),
    [
        # memory-heavy (item 1): its guarantee's dominant share of memory and its ideal there; vcores go
        ({"memory": 100, "vcore": 25}, {"memory": 50, "vcore": 25}, {"memory": 50, "vcore": 50}, CAP,
         {"memory": 50}),
        # an ideal above the guarantee on the most-over resource wins
        ({"memory": 100, "vcore": 25}, {"memory": 70, "vcore": 25}, {"memory": 50, "vcore": 50}, CAP,
         {"memory": 70}),
        # the ideal's own dominant share (vcores it cannot use) does not hold memory back (large_containers)
        ({"memory": 90, "vcore": 90}, {"memory": 62, "vcore": 90}, {"memory": 50, "vcore": 50}, CAP,
         {"memory": 62}),
        # a guarantee dominant on another resource is kept as that share of the queue's dominant resource
        ({"memory": 90, "vcore": 10}, {"memory": 40, "vcore": 10}, {"memory": 10, "vcore": 60}, CAP,
         {"memory": 60}),
        # most over relative to the cluster: 22 of 40 vcores beats 500 of 1000 MiB
        ({"memory": 600, "vcore": 32}, {"memory": 100, "vcore": 10}, {"memory": 100, "vcore": 10},
         {"memory": 1000, "vcore": 40}, {"vcore": 10}),
        # gpu: a whole number of units, rounded up
        ({"gpu": 8, "memory": 10}, {"gpu": 4, "memory": 10}, {"gpu": 3, "memory": 50}, {"gpu": 8, "memory": 100},
         {"gpu": 4}),
        # a resource the cluster does not have says nothing
        ({"memory": 70, "gpu": 4}, {"memory": 40}, {"memory": 40}, {"memory": 100}, {"memory": 40}),
        ({}, {"memory": 40}, {"memory": 40}, {}, {}),
    ],
)  # fmt: skip
def test_floor_of(usage: Resource, ideal: Resource, guaranteed: Resource, capacity: Resource, floor: Resource) -> None:
    assert floor_of(usage, ideal, guaranteed, capacity) == floor


resource_names = st.sampled_from(["memory", "vcore", "gpu"])
amounts = st.dictionaries(resource_names, st.integers(0, 1000), max_size=3)


@settings(max_examples=200, deadline=None)
@given(usage=amounts, removed=amounts, guaranteed=amounts, ideal=amounts,
       capacity=st.dictionaries(resource_names, st.integers(1, 2000), min_size=1))  # fmt: skip
def test_whatever_a_queue_loses_above_its_floor_keeps_its_guarantee_and_its_ideal_where_most_over(
    usage: Resource, removed: Resource, guaranteed: Resource, ideal: Resource, capacity: Resource
) -> None:
    floor = floor_of(usage, ideal, guaranteed, capacity)
    left = res.clamp_min_zero(res.sub(usage, removed))
    if res.fits(floor, left):
        # not below the guarantee's dominant share, DRF-compared through the same floor
        assert not res.drf_below(left, guarantee_floor(left, guaranteed, capacity), capacity)
        assert res.share_vector(left, capacity)[0] >= res.share_vector(guaranteed, capacity)[0] - 1e-9
        excess = {k: (usage.get(k, 0) - ideal.get(k, 0)) / c for k, c in capacity.items()}
        worst = max(sorted(excess), key=lambda k: excess[k])
        if excess[worst] > 0:
            assert left.get(worst, 0) >= ideal.get(worst, 0)


@pytest.mark.parametrize(
    ("usage", "ideal", "below"),
    [
        ({"memory": 10}, {"memory": 20}, True),
        ({"memory": 20}, {"memory": 20}, False),  # at the ideal is not below it
        ({"memory": 10, "vcore": 30}, {"memory": 20, "vcore": 20}, False),  # dominant share above
        ({"memory": 30, "vcore": 10}, {"memory": 20, "vcore": 20}, False),  # DRF: below on vcore only
        ({"memory": 10, "vcore": 20}, {"memory": 20, "vcore": 20}, True),  # tie, broken by the next share
        ({}, {"memory": 5}, True),
        ({}, {}, False),
        ({"gpu": 1}, {"memory": 5}, True),  # a resource the cluster lacks says nothing
    ],
)
def test_below_ideal(usage: Resource, ideal: Resource, below: bool) -> None:
    assert below_ideal(usage, ideal, CAP) is below


@pytest.mark.parametrize(
    ("usage", "ideal", "deadzone", "over"),
    [
        (108, 100, 0.1, False),  # within guaranteed * 1.1 = 110
        (110, 100, 0.1, False),
        (111, 100, 0.1, True),
        (108, 100, 0.0, True),
        (140, 100, 0.5, False),
        (151, 100, 0.5, True),
        (150, 150, 0.1, False),  # far over its guarantee but not over its ideal
        (151, 150, 0.1, True),
    ],
)
def test_over_deadzone(usage: int, ideal: int, deadzone: float, over: bool) -> None:
    q = _queue_with({"memory": 100})
    held = {"memory": usage}
    assert over_deadzone(q, held, held, {"memory": ideal}, deadzone, {"memory": 1000}) is over


def test_over_deadzone_is_a_drf_question() -> None:
    """Twice its memory guarantee, half its vcore guarantee: above it (item 1 of the issue)."""
    q = _queue_with({"memory": 25, "vcore": 25})

    def over(usage: dict[str, int], ideal: dict[str, int]) -> bool:
        return over_deadzone(q, usage, usage, ideal, 0.1, CAP)

    assert over({"memory": 50, "vcore": 12}, {"memory": 25, "vcore": 25})
    assert not over({"memory": 27, "vcore": 12}, {"memory": 25, "vcore": 25})  # deadzone
    assert not over({"memory": 50, "vcore": 12}, {"memory": 50, "vcore": 25})  # at ideal
    # over its ideal on memory though the ideal's dominant share (vcores) is larger: still over
    assert over({"memory": 80, "vcore": 80}, {"memory": 60, "vcore": 90})


def test_the_deadzone_is_judged_on_what_the_queue_holds_with_its_victims_under_notice() -> None:
    """The deadzone triggers, it is no floor: a queue above the band with its containers under notice,
    whose net usage is already inside it (105 of 100 x 1.1), is still taken towards its ideal (100)."""
    q = _queue_with({"memory": 100})
    cap = {"memory": 1000}
    assert over_deadzone(q, {"memory": 300}, {"memory": 105}, {"memory": 100}, 0.1, cap)
    assert not over_deadzone(q, {"memory": 105}, {"memory": 105}, {"memory": 100}, 0.1, cap)
    assert not over_deadzone(q, {"memory": 300}, {"memory": 100}, {"memory": 100}, 0.1, cap)  # at its ideal


# ---------------------------------------------------------------------- compute_quotas on live states


@pytest.mark.parametrize(
    ("guarantees", "b_used", "a_demand", "deadzone", "b_may_lose"),
    [
        ((100, 100), 108, 100, 0.1, None),  # b over its ideal (100) but within the deadzone (110)
        ((100, 100), 110, 100, 0.1, None),
        ((100, 100), 112, 100, 0.1, 12),  # over the deadzone: everything above the ideal
        ((100, 100), 108, 100, 0.0, 8),
        ((100, 100), 140, 100, 0.5, None),
        ((100, 100), 160, 100, 0.5, 60),
        ((20, 180), 150, 30, 0.1, None),  # far over its guarantee, not over its ideal (a wants little)
        ((180, 20), 150, 100, 0.1, 50),  # a wants 100: b's ideal is 100
        ((100, 100), 200, 40, 0.1, 40),  # a wants 40: b keeps 160
    ],
)
def test_deadzone_and_ideal_decide_who_may_lose(
    guarantees: tuple[int, int], b_used: int, a_demand: int, deadzone: float, b_may_lose: int | None
) -> None:
    h = PreemptHarness(two_queues(*guarantees, max_ignored_over_capacity=deadzone))
    h.nodes("n1", "n2")
    occupy(h, "b1", "root.b", b_used, ["n1", "n2"])
    h.app("a1", "root.a")
    h.ask("a1", "small", 10, count=a_demand // 10)
    quotas = quotas_of(h)
    if b_may_lose is None:
        assert "root.b" not in quotas.may_lose
    else:
        assert quotas.may_lose["root.b"] == {"memory": b_may_lose}
        # the loss takes b exactly to max(ideal, guarantee), never below its guarantee
        assert b_used - b_may_lose == max(quotas.ideal["root.b"]["memory"], guarantees[1])
    assert "root.a" not in quotas.may_lose
    assert quotas.beneficiaries == ("root.a",)


def test_a_disabled_queue_never_gets_a_quota() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 50}),
        queue("c", guaranteed={"memory": 50}, preemption_policy="disabled"),
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    occupy(h, "b1", "root.b", 100, ["n1"])
    occupy(h, "c1", "root.c", 100, ["n2"])
    h.app("a1", "root.a")
    h.ask("a1", "small", 10, count=10)
    quotas = quotas_of(h)
    assert "root.b" in quotas.may_lose
    assert "root.c" not in quotas.may_lose
    assert quotas.beneficiaries == ("root.a",)


def test_a_memory_heavy_queue_may_lose_everything_but_its_dominant_share() -> None:
    """Item 1: b holds 160 of 200 MiB and 40 of 200 vcores (guarantee 100/100): above its guarantee in
    the DRF comparison. It keeps its ideal's (and guarantee's) dominant share of memory; vcores it may
    lose with its containers, though it holds fewer than its guarantee names."""
    g = {"memory": 100, "vcore": 100}
    h = PreemptHarness(preemption_raw(queue("a", guaranteed=g), queue("b", guaranteed=g)))
    h.nodes("n1", "n2", vcore=100)
    for node in ("n1", "n2"):
        for _ in range(2):
            h.run("b1", 40, node, vcore=10, queue_path="root.b")  # memory-heavy: 160 MiB, 40 vcores
    h.app("a1", "root.a")
    h.ask("a1", "x", 10, count=10, vcore=10)
    quotas = quotas_of(h)
    ideal_b = quotas.ideal["root.b"]
    keep = max(ideal_b["memory"], 100)
    assert quotas.may_lose == {"root.b": {"memory": 160 - keep, "vcore": 40}}
    assert keep < 160
    assert quotas.beneficiaries == ("root.a",)


def test_quotas_never_take_a_queue_below_its_guarantee() -> None:
    """Vcore-heavy b over its ideal on vcores: it keeps its dominant share of vcores, may lose memory."""
    g = {"memory": 100, "vcore": 100}
    h = PreemptHarness(preemption_raw(queue("a", guaranteed=g), queue("b", guaranteed=g)))
    h.nodes("n1", "n2", vcore=100)
    for node in ("n1", "n2"):
        for _ in range(4):
            h.run("b1", 5, node, vcore=25, queue_path="root.b")  # 40 MiB, 200 vcores
    h.app("a1", "root.a")
    h.ask("a1", "x", 10, count=10, vcore=10)
    quotas = quotas_of(h)
    lose = quotas.may_lose["root.b"]
    cap = h.cache.state.capacity
    usage = net_usage(h.cache.state.queues["root.b"])
    left = res.sub(usage, lose)
    assert lose["memory"] == 40
    assert res.share_vector(left, cap)[0] >= 0.5 and left["vcore"] >= quotas.ideal["root.b"]["vcore"]
    assert lose["vcore"] == 200 - max(quotas.ideal["root.b"]["vcore"], 100)


def test_beneficiaries_are_leaves_below_their_ideal_with_demand() -> None:
    raw = preemption_raw(
        queue("p", queue("a", guaranteed={"memory": 50}), queue("idle", guaranteed={"memory": 50}),
              guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 50}),
        queue("full", guaranteed={"memory": 50}),
    )  # fmt: skip
    h = PreemptHarness(raw)
    h.nodes("n1", "n2", "n3")
    occupy(h, "b1", "root.b", 200, ["n1", "n2"])
    occupy(h, "f1", "root.full", 50, ["n3"])
    h.app("idle1", "root.p.idle")  # below its guarantee but wants nothing
    h.run("idle1", 10, "n3")
    h.app("f2", "root.full")
    h.ask("f2", "more", 10, count=2)  # has demand, at its guarantee: YARN's ideal gives a leaf no more
    h.app("a1", "root.p.a")
    h.ask("a1", "small", 10, count=5)
    quotas = quotas_of(h)
    assert "root.p.a" in quotas.beneficiaries
    assert "root.p.idle" not in quotas.beneficiaries
    assert "root.p" not in quotas.beneficiaries  # parents never: asks live in leaves
    assert "root.b" not in quotas.beneficiaries
    assert "root.full" not in quotas.beneficiaries
    for path in quotas.beneficiaries:
        q = h.cache.state.queues[path]
        assert res.any_positive(q.pending) and below_ideal(net_usage(q), quotas.ideal[path], h.cache.state.capacity)
    assert set(quotas.may_lose) == {"root.b"}


@pytest.mark.parametrize(
    ("per_round", "capacity", "budget"),
    [
        (0.1, {"memory": 200, "vcore": 100}, {"memory": 20, "vcore": 10}),
        (0.25, {"memory": 200, "vcore": 100}, {"memory": 50, "vcore": 25}),
        (1.0, {"memory": 200, "vcore": 100}, {"memory": 200, "vcore": 100}),
        (0.33, {"memory": 200, "vcore": 100}, {"memory": 66, "vcore": 33}),  # integers, rounded down
    ],
)
def test_budget_is_a_share_of_the_capacity(per_round: float, capacity: Resource, budget: Resource) -> None:
    h = PreemptHarness(two_queues(total_preemption_per_round=per_round))
    h.nodes("n1", "n2", memory=capacity["memory"] // 2, vcore=capacity["vcore"] // 2)
    assert quotas_of(h).budget == budget


def test_victims_already_preempting_no_longer_count_and_reservations_do() -> None:
    """After a commit the victims are leaving (net usage) and the beneficiary holds its reservation."""
    h = PreemptHarness(two_queues(100, 100))
    h.nodes("n1", "n2")
    occupy(h, "b1", "root.b", 200, ["n1", "n2"], piece=50)
    h.app("a1", "root.a")
    h.ask("a1", "big", 50, count=2)
    before = quotas_of(h)
    assert before.may_lose == {"root.b": {"memory": 100}}
    h.starve()
    result = h.preempt_round(5.0, policy=h.policy)
    assert result.outcome is not None and result.outcome.accepted == 2
    after = quotas_of(h)
    b, a = h.cache.state.queues["root.b"], h.cache.state.queues["root.a"]
    assert b.preempting == {"memory": 100} and net_usage(b) == {"memory": 100}
    assert a.reserved == {"memory": 100} and net_usage(a) == {"memory": 100}
    assert "root.b" not in after.may_lose  # back at its guarantee: nothing more to lose
    assert after.beneficiaries == ()  # a holds its room: not below its ideal any more


# ---------------------------------------------------------------------- usable capacity (fragmentation)


@pytest.mark.parametrize(
    ("held", "ask", "usable"),
    [
        # (memory, vcore) held on each 100/100 node; the smallest pending ask; the capacity the ideal sees
        ([(96, 50), (96, 50)], (20, 10), {"memory": 192, "vcore": 200}),  # 4 MiB slivers: useless
        ([(96, 50), (50, 50)], (20, 10), {"memory": 196, "vcore": 200}),  # one sliver
        ([(80, 50), (80, 50)], (20, 10), {"memory": 200, "vcore": 200}),  # room for the ask: all counts
        # full on vcores, memory free: only the vcores are short; the memory stays in the capacity
        ([(40, 100), (40, 100)], (10, 10), {"memory": 200, "vcore": 200}),
        ([(40, 95), (40, 100)], (10, 10), {"memory": 200, "vcore": 195}),
    ],
)
def test_usable_capacity_drops_only_the_room_too_short_for_any_ask(
    held: list[tuple[int, int]], ask: tuple[int, int], usable: Resource
) -> None:
    h = PreemptHarness(preemption_raw(queue("a"), queue("b")))
    h.nodes("n1", "n2", vcore=100)
    for node, (m, v) in zip(("n1", "n2"), held, strict=True):
        h.run("b1", m, node, vcore=v, queue_path="root.b")
    h.app("a1", "root.a")
    h.ask("a1", "x", ask[0], vcore=ask[1])
    assert usable_capacity(h.cache.state) == usable


def test_a_cluster_full_on_one_resource_still_preempts_for_a_starving_queue() -> None:
    """Nodes full on vcores with memory to spare: the spare memory is no reason to see b at its ideal.
    (b's guarantee names vcores only: a guaranteed resource used below its guarantee is never taken.)"""
    h = PreemptHarness(
        preemption_raw(queue("a", guaranteed={"memory": 100, "vcore": 100}), queue("b", guaranteed={"vcore": 100}))
    )
    h.nodes("n1", "n2", vcore=100)
    for node in ("n1", "n2"):
        h.fill("b1", "root.b", node, [10, 10])  # memory only ...
        h.run("b1", 10, node, vcore=50)
        h.run("b1", 10, node, vcore=50)  # ... and two vcore-heavy containers per node
    h.app("a1", "root.a")
    h.ask("a1", "x", 10, vcore=50)
    h.starve()
    quotas = quotas_of(h)
    assert quotas.beneficiaries == ("root.a",) and "root.b" in quotas.may_lose
    result = h.preempt_round(10.0)
    assert result.outcome is not None and result.outcome.accepted == 1
    assert [h.alloc(v).resource for v in result.placements[0].victims] == [{"memory": 10, "vcore": 50}]


# ---------------------------------------------------------------------- whole containers beyond the quota


@pytest.mark.parametrize(
    ("a_demand", "taken", "victim", "allowed"),
    [
        # b holds the whole 200; a wants 40: b's ideal is 160, its quota 40
        (40, 0, 40, True),  # within the quota
        (40, 30, 20, True),  # beyond it by 10, less than one container; b stays at 150 >= its guarantee
        (40, 30, 70, True),  # ends at its guarantee exactly: at it, not below
        (40, 30, 71, False),  # would end below its guarantee
        (40, 41, 5, False),  # nothing left to lose: one whole container beyond the quota at most
        # a wants 100: b's ideal is its guarantee; never a container below it
        (100, 90, 10, True),
        (100, 95, 10, False),
    ],
)
def test_a_whole_victim_beyond_the_quota_is_allowed_while_the_guarantee_holds(
    a_demand: int, taken: int, victim: int, allowed: bool
) -> None:
    h = PreemptHarness(two_queues(100, 100))
    h.nodes("n1", "n2")
    occupy(h, "b1", "root.b", 200, ["n1", "n2"])
    h.app("a1", "root.a")
    h.ask("a1", "small", 10, count=a_demand // 10)
    quotas = quotas_of(h)
    quota = quotas.may_lose["root.b"]
    assert quota == {"memory": 200 - max(quotas.ideal["root.b"]["memory"], 100)}
    b = h.cache.state.queues["root.b"]
    cap = h.cache.state.capacity
    assert may_take(b, {"memory": taken}, {"memory": victim}, quota, cap) is allowed
