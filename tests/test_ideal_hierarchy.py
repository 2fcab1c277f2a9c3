"""Sniper's ideal assignment on hierarchies and mixed resources (architecture:
Vocabulary, "Ideal assignment"): absolute guarantees compose as YuniKorn's, a leaf without a guarantee under
a guaranteed parent shares what the parent's guarantee leaves over, a leaf's guarantee counts when its
ancestors have none, and a resource a guarantee or an ask names that the queue or the cluster lacks never
empties an ideal. Also: the ideal never exceeds demand on any resource. YARN's baseline keeps its own
arithmetic (``compose=False``), pinned by tests/test_proportional_conformance.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core.config import parse_partition
from sniper.core.preemption.view import composed_guarantees, ideal_of, snapshot_from_figures
from sniper.core.resources import Resource
from tests.core_support import queue
from tests.preemption_support import preemption_raw

CAP = {"memory": 1000, "vcore": 1000}
HALF = {"memory": 500, "vcore": 500}


def r(memory: int, vcore: int | None = None, **more: int) -> Resource:
    return {"memory": memory, "vcore": memory if vcore is None else vcore} | more


def ideals(
    raw: dict[str, Any],
    used: dict[str, Resource],
    pending: dict[str, Resource],
    capacity: Resource = CAP,
    smallest: dict[str, Resource] | None = None,
) -> dict[str, Resource]:
    snapshot = snapshot_from_figures(parse_partition(raw), capacity, used, pending, smallest_ask=smallest)
    return {q.path: {k: v for k, v in q.ideal_assigned.items() if v} for q in ideal_of(snapshot)}


def test_a_leaf_without_a_guarantee_shares_what_its_parent_leaves_over() -> None:
    """p (500) holds g (300, using 500 and wanting more) and free (no guarantee, wanting 200): free is owed
    the 200 its parent's guarantee leaves over g's, so it is below its ideal (a beneficiary)."""
    raw = preemption_raw(
        queue("p", queue("g", guaranteed=r(300)), queue("free"), guaranteed=HALF), queue("b", guaranteed=HALF)
    )
    used = {"root.p": r(500), "root.p.g": r(500), "root.b": r(500)}
    out = ideals(raw, used, {"root.p.free": r(200), "root.p.g": r(100)})
    assert out["root.p.free"] == r(200)
    assert out["root.p.g"] == r(300)
    assert out["root.b"] == HALF


def test_a_leafs_guarantee_counts_when_its_ancestors_have_none() -> None:
    """p names no guarantee, its leaf x names 500: x is owed it against b (guarantee 500) holding all."""
    raw = preemption_raw(queue("p", queue("x", guaranteed=HALF)), queue("b", guaranteed=HALF))
    out = ideals(raw, {"root.b": r(1000)}, {"root.p.x": r(500)})
    assert out["root.p.x"] == HALF and out["root.p"] == HALF and out["root.b"] == HALF


@pytest.mark.parametrize(
    ("guaranteed", "capacity", "ask", "expected"),
    [
        # a guarantee naming a GPU the queue does not use, with or without GPUs in the cluster
        (r(500, gpu=4), r(1000, gpu=8), r(50), HALF),
        (r(500, gpu=4), CAP, r(50), HALF),
        # an ask using a GPU no guarantee names: nobody's GPUs are shared, and they do not count against
        # its guarantee of the others (a resource no guarantee names is not guaranteed)
        (HALF, r(1000, gpu=8), r(50, gpu=1), r(500, gpu=4)),
        # an ask using a resource no node has (it can never run): the rest of the queue keeps its share
        (HALF, CAP, r(50, gpu=1), HALF),
    ],
)
def test_mixed_resources_never_empty_the_ideal(
    guaranteed: Resource, capacity: Resource, ask: Resource, expected: Resource
) -> None:
    raw = preemption_raw(queue("a", guaranteed=guaranteed), queue("b", guaranteed=guaranteed))
    demand = r(500, **{k: 4 for k in ask if k == "gpu"})
    out = ideals(raw, {"root.b": r(1000)}, {"root.a": demand}, capacity, {"root.a": ask})
    assert out["root.a"] == expected


def test_the_ideal_never_exceeds_demand_on_any_resource() -> None:
    """b runs memory-heavy containers over its guarantee: YARN's dominant arithmetic would protect the vcores
    of its guarantee it does not use and lift its dominant share; Sniper's ideal stays within demand."""
    raw = preemption_raw(queue("a", guaranteed=HALF), queue("b", guaranteed=HALF))
    out = ideals(raw, {"root.b": r(1000, 250)}, {"root.a": r(500, 125), "root.b": r(250, 60)})
    assert out["root.b"]["vcore"] <= 250 + 60
    assert out["root.a"] == r(500, 125)
    assert out["root.b"]["memory"] == 500


@pytest.mark.parametrize(
    ("leaves", "demand", "expected"),
    [
        # named guarantees are kept; unnamed leaves share the rest by demand, never over their demand
        (
            [queue("a", guaranteed=r(600)), queue("x"), queue("y")],
            {"root.x": r(300), "root.y": r(100)},
            {"root.a": r(600), "root.x": r(300), "root.y": r(100)},
        ),
        (
            [queue("a", guaranteed=r(600)), queue("x"), queue("y")],
            {"root.x": r(600), "root.y": r(200)},
            {"root.a": r(600), "root.x": r(300), "root.y": r(100)},
        ),
        # a parent without a guarantee guarantees its children's sum
        (
            [queue("p", queue("x", guaranteed=r(100)), queue("y", guaranteed=r(200))), queue("z")],
            {"root.z": r(900)},
            {"root.p": r(300), "root.p.x": r(100), "root.p.y": r(200), "root.z": r(700)},
        ),
        # an unguaranteed subtree under an unguaranteed parent with guaranteed siblings: nothing left
        (
            [queue("p", queue("x", guaranteed=r(100)), queue("y")), queue("z", guaranteed=r(900))],
            {"root.p.y": r(500)},
            {"root.p": r(100), "root.p.x": r(100), "root.p.y": {}, "root.z": r(900)},
        ),
        # a parent guaranteed more than the cluster leaves its unnamed leaf only what the cluster has over
        # the named ones (YuniKorn's GNotSetOnVictimChild_As_Siblings: x must not be guaranteed all it holds)
        (
            [queue("p", queue("x"), queue("y", guaranteed=r(500)), guaranteed=r(5000))],
            {"root.p.x": r(1000)},
            {"root.p": r(5000), "root.p.x": r(500), "root.p.y": r(500)},
        ),
    ],
)
def test_composed_guarantees(
    leaves: list[dict[str, Any]], demand: dict[str, Resource], expected: dict[str, Resource]
) -> None:
    config = parse_partition(preemption_raw(*leaves))
    out = composed_guarantees(config, CAP, {}, demand)
    assert {k: v for k, v in out.items() if k != "root"} == expected


def test_below_a_fence_the_children_share_what_the_subtree_holds() -> None:
    """team (fence, 500) holds 400, all x's; other holds 600. y's asks may not preempt other, so what y
    is owed comes out of x's 400, not out of team's 500 (which would leave x at its ideal and y waiting)."""
    team = queue("team", queue("x", guaranteed=r(250)), queue("y", guaranteed=r(250)), guaranteed=HALF)
    used = {"root.team": r(400), "root.team.x": r(400), "root.other": r(600)}
    pending = {"root.team.y": r(150), "root.team.x": r(100)}
    fenced = ideals(
        preemption_raw({**team, "properties": {"preemption.policy": "fence"}}, queue("other")), used, pending
    )
    assert fenced["root.team.y"] == r(150) and fenced["root.team.x"] == r(250)
    assert fenced["root.team"] == HALF  # the fence changes what its children share, not its own ideal
    plain = ideals(preemption_raw(team, queue("other")), used, pending)
    assert plain["root.team.y"] == r(150) and plain["root.team.x"] == r(350)


def test_an_unguaranteed_resource_scarce_in_the_parent_never_cuts_a_childs_guaranteed_share() -> None:
    """YuniKorn's TestTryPreemption in ideal terms: p (guaranteed memory 1000) -> c1 (500) holding all the
    memory and 2 pods, c2 (500) asking 500 memory and 1 pod; pods, named by no guarantee, are 5 in the
    cluster. c2 is owed its 500 memory and the pod its ask needs: its pod share of p's 2 pods must not
    rank it at its guarantee (ratios are dominant shares of the partition's capacity), nor may the
    leaf cap (what its guarantee names) offer it no pod, which would make its increment ineffective."""
    raw = preemption_raw(queue("p", queue("c1", guaranteed=r(500)), queue("c2", guaranteed=r(500)), guaranteed=CAP))
    used = {"root.p": r(1000, pods=2), "root.p.c1": r(1000, pods=2)}
    pending = {"root.p.c2": r(500, pods=1)}
    cap = r(1000, pods=5)
    out = ideals(raw, used, pending, cap, {"root.p.c2": r(500, pods=1)})
    assert out["root.p.c2"] == r(500, pods=1)
    assert out["root.p.c1"]["memory"] == 500


def test_a_guaranteed_resource_nobody_uses_never_protects_all_a_queue_holds() -> None:
    """YuniKorn's TestTryPreemption_VictimQueue_With_OG_And_UG_ResTypes in ideal terms: c1's guarantee names
    GPUs nobody uses (so p's ideal has none); it must not look infinite and protect all c1 holds: c2 is
    owed what it asks out of c1's share above its guarantee."""
    raw = preemption_raw(
        queue("p", queue("c1", guaranteed=r(500, gpu=2)), queue("c2", guaranteed=r(500)), guaranteed=CAP)
    )
    used = {"root.p": r(1000), "root.p.c1": r(1000)}
    out = ideals(raw, used, {"root.p.c2": r(250)}, r(1000, gpu=4), {"root.p.c2": r(250)})
    assert out["root.p.c2"] == r(250)
    assert out["root.p.c1"] == r(750)
