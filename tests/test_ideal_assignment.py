"""Unit tests of the ideal assignment (core.preemption.ideal) on small hand-computed trees.

Each table row is a tree, the options, and the figures worked out by hand with YARN's rules (the comments
show the rounds). Memory-only rows use the default calculator; the DRF rows use two resource types.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sniper.core.preemption.calculator import (
    DefaultCalculator,
    DominantCalculator,
    double_compare,
    java_float,
    java_float_div,
    make_calculator,
)
from sniper.core.preemption.ideal import IdealAssignment, compute_ideal, priority_utilization_compare
from sniper.core.preemption.model import ClusterSnapshot, QueueSnapshot, SnapshotError
from sniper.core.resources import Resource

MEM = ("memory",)
MV = ("memory", "vcore")


def _res(value: int | tuple[int, int]) -> Resource:
    if isinstance(value, tuple):
        return {"memory": value[0], "vcore": value[1]}
    return {"memory": value}


@dataclasses.dataclass
class Q:
    """A queue of a test tree; ``path`` like ``root.a``; resources as ints (memory) or (memory, vcore)."""

    path: str
    g: int | tuple[int, int]
    used: int | tuple[int, int] = 0
    pending: int | tuple[int, int] = 0
    max: int | tuple[int, int] | None = None
    priority: int = 0
    disabled: bool = False
    ask: int | tuple[int, int] | None = None


def tree(cluster: int | tuple[int, int], *queues: Q) -> ClusterSnapshot:
    """A snapshot from a pre-order list of queues (root first); ``max`` defaults to the cluster."""
    paths = [q.path for q in queues]
    out: list[QueueSnapshot] = []
    for q in queues:
        parent = q.path.rsplit(".", 1)[0] if "." in q.path else None
        children = tuple(p for p in paths if p.rsplit(".", 1)[0] == q.path and p != q.path and "." in p)
        out.append(
            QueueSnapshot(
                path=q.path,
                parent=parent,
                children=children,
                is_leaf=not children,
                guaranteed=_res(q.g),
                max=_res(q.max if q.max is not None else cluster),
                used=_res(q.used),
                pending=_res(q.pending),
                pending_considering_reserved=_res(q.pending),
                reserved={},
                priority=q.priority,
                preemption_disabled=q.disabled,
                smallest_pending_ask=None if q.ask is None else _res(q.ask),
            )
        )
    names = MV if isinstance(cluster, tuple) else MEM
    return ClusterSnapshot(resource=_res(cluster), queues=tuple(out), resource_names=names)


def run(snapshot: ClusterSnapshot, calculator: str = "default", **options: Any) -> IdealAssignment:
    return compute_ideal(snapshot, make_calculator(calculator, snapshot.resource_names), **options)


def mem(result: IdealAssignment, field: str) -> dict[str, int]:
    """One field's memory per queue, zeros left out."""
    out: dict[str, int] = {}
    for q in result:
        value = getattr(q, field).get("memory", 0)
        if value:
            out[q.path] = value
    return out


# --- the fix-point, memory only ---------------------------------------------------------------------------

FIXPOINT_CASES = [
    pytest.param(
        # no demand anywhere: the over-guarantee queue gets its usage back from the pool, nothing to preempt
        tree(100, Q("root", 100, 100), Q("root.a", 50, 70), Q("root.b", 50, 30)),
        {},
        {"root": 100, "root.a": 70, "root.b": 30},
        {},
        id="no-demand-keeps-usage",
    ),
    pytest.param(
        # init a=50 b=20, pool 30; b alone is most under-served: offers 15, 8, 4, 2, 1 (round half up of
        # pool*0.5) reach its guarantee; a falls back to 50 and must give 30
        tree(100, Q("root", 100, 100), Q("root.a", 50, 80), Q("root.b", 50, 20, pending=30)),
        {},
        {"root": 100, "root.a": 50, "root.b": 50},
        {"root.a": 30},
        id="reclaim-guarantee",
    ),
    pytest.param(
        # a and b tie at ratio 0 and share the pool 1:3; the leaf cap max(used, guaranteed) stops both at their
        # guarantees, so 20 stays unassigned
        tree(100, Q("root", 100), Q("root.a", 20, pending=100), Q("root.b", 60, pending=100), Q("root.c", 20)),
        {},
        {"root": 100, "root.a": 20, "root.b": 60},
        {},
        id="weights-by-guarantee-leaf-cap",
    ),
    pytest.param(
        # same tree, preempt-to-balance lifts the leaf cap: offers 25 and 75 are taken whole
        tree(100, Q("root", 100), Q("root.a", 20, pending=100), Q("root.b", 60, pending=100), Q("root.c", 20)),
        {"preempt_to_balance": True},
        {"root": 100, "root.a": 25, "root.b": 75},
        {},
        id="weights-by-guarantee-balance",
    ),
    pytest.param(
        # max caps the offer only in balance mode here: the leaf cap (50) is tighter than max (60)
        tree(100, Q("root", 100), Q("root.a", 50, pending=100, max=60), Q("root.b", 50)),
        {},
        {"root": 100, "root.a": 50},
        {},
        id="leaf-cap-before-max",
    ),
    pytest.param(
        tree(100, Q("root", 100), Q("root.a", 50, pending=100, max=60), Q("root.b", 50)),
        {"preempt_to_balance": True},
        {"root": 100, "root.a": 60},
        {},
        id="max-caps-in-balance-mode",
    ),
    pytest.param(
        # a's extra 30 is untouchable (preemption disabled): its initial ideal is 80, the pool is empty
        tree(100, Q("root", 100, 100), Q("root.a", 50, 80, disabled=True), Q("root.b", 50, 20, pending=30)),
        {},
        {"root": 100, "root.a": 80, "root.b": 20},
        {},
        id="untouchable-extra",
    ),
    pytest.param(
        # b takes 40 back from a (offers 20, 10, 5, 3, 1, 1); a must give 40 but the allowance is 10:
        # scaling 10/40 = 0.25
        tree(100, Q("root", 100, 100), Q("root.a", 50, 90), Q("root.b", 50, 10, pending=40)),
        {"total_preemption_allowed": {"memory": 10}},
        {"root": 100, "root.a": 50, "root.b": 50},
        {"root.a": 10},
        id="scaled-by-allowance",
    ),
    pytest.param(
        # zero-guarantee z gets the second pass (a is satisfied), but the leaf cap max(used, 0) - 0 keeps it at 0
        tree(100, Q("root", 100, 50), Q("root.a", 100, 50), Q("root.z", 0, pending=30)),
        {},
        {"root": 100, "root.a": 50},
        {},
        id="zero-guarantee-leaf-cap",
    ),
    pytest.param(
        tree(100, Q("root", 100, 50), Q("root.a", 100, 50), Q("root.z", 0, pending=30)),
        {"preempt_to_balance": True},
        {"root": 100, "root.a": 50, "root.z": 30},
        {},
        id="zero-guarantee-second-pass",
    ),
    pytest.param(
        # root: init p=60 q=20, pool 20; q (ratio .5) is served 8, 5, 3, 2, 1 then offered 0 and leaves;
        # p takes the last 1 -> p=61, q=39. Level p: a and b tie at 1.0 and are offered 1 each; a (first in the
        # heap) takes it and nothing is left for b.
        tree(
            100,
            Q("root", 100, 100),
            Q("root.p", 60, 80),
            Q("root.p.a", 30, 50),
            Q("root.p.b", 30, 30, pending=20),
            Q("root.q", 40, 20, pending=20),
        ),
        {},
        {"root": 100, "root.p": 61, "root.p.a": 31, "root.p.b": 30, "root.q": 39},
        {"root.p": 19, "root.p.a": 19},
        id="hierarchy-level-by-level",
    ),
]


@pytest.mark.parametrize(("snapshot", "options", "ideal", "to_be_preempted"), FIXPOINT_CASES)
def test_fixpoint(
    snapshot: ClusterSnapshot, options: dict[str, Any], ideal: dict[str, int], to_be_preempted: dict[str, int]
) -> None:
    result = run(snapshot, **options)
    assert mem(result, "ideal_assigned") == ideal
    assert mem(result, "to_be_preempted") == to_be_preempted


def test_extras_roll_up_from_leaves() -> None:
    snapshot = tree(
        100,
        Q("root", 100, 100),
        Q("root.p", 50, 70),
        Q("root.p.a", 20, 40),  # extra 20, preemptable
        Q("root.p.b", 30, 30, disabled=True),  # no extra
        Q("root.q", 50, 30, pending=10),
    )
    result = run(snapshot)
    assert mem(result, "preemptable_extra") == {"root.p.a": 20, "root.p": 20}
    assert mem(result, "untouchable_extra") == {}
    disabled = tree(
        100,
        Q("root", 100, 100),
        Q("root.p", 50, 70),
        Q("root.p.a", 20, 40, disabled=True),  # extra 20, untouchable
        Q("root.p.b", 30, 30),
        Q("root.q", 50, 30, pending=10),
    )
    result = run(disabled)
    assert mem(result, "untouchable_extra") == {"root.p.a": 20, "root.p": 20}
    assert mem(result, "preemptable_extra") == {}
    # p keeps 70 (50 + untouchable 20): q's demand cannot be met from it
    assert mem(result, "ideal_assigned")["root.p"] == 70
    assert mem(result, "to_be_preempted") == {}


def test_parent_pending_is_sum_of_children() -> None:
    snapshot = tree(100, Q("root", 100), Q("root.p", 50, pending=999), Q("root.p.a", 50, pending=7))
    result = run(snapshot)
    assert result["root.p"].pending == {"memory": 7}
    assert result["root"].pending == {"memory": 7}


def test_input_is_not_mutated_and_result_is_deterministic() -> None:
    snapshot = tree(100, Q("root", 100, 100), Q("root.a", 50, 80), Q("root.b", 50, 20, pending=30))
    before = repr(snapshot)
    first = run(snapshot)
    assert repr(snapshot) == before
    assert run(snapshot) == first


# --- queue priorities (YARN rule 4) --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("r1", "r2", "p1", "p2", "expected"),
    [
        (0.2, 0.5, 0, 0, -1),  # same priority: smaller ratio first
        (0.5, 0.2, 0, 0, 1),
        (0.5, 0.5, 3, 3, 0),
        (0.9, 0.1, 2, 1, -1),  # both under-served: higher priority first
        (1.5, 1.1, 2, 1, -1),  # both at or over 1.0: higher priority first
        (1.0, 3.0, 1, 2, 1),
        (1.0, 0.1, 2, 1, 1),  # one under-served: it goes first whatever the priorities
        (0.99, 1.0, 1, 2, -1),
        (float(2**31 - 1), 0.5, 5, 0, 1),  # zero guarantee counts as an infinite ratio
    ],
)
def test_priority_utilization_compare(r1: float, r2: float, p1: int, p2: int, expected: int) -> None:
    assert priority_utilization_compare(r1, r2, p1, p2) == expected


def test_queue_priority_serves_higher_priority_first_when_both_underserved() -> None:
    # Both ratios are 0 (< 1): h is served first although both are equally under-served. h is offered 70 (its
    # weight .7 of 100) and takes it; then l (ratio 0 < h's 1.0) is offered 9, 6, 5, 3, 2, 2, 1, 1 and 0 of
    # what is left (weight .3, round half up), so 1 stays unassigned.
    snapshot = tree(
        100,
        Q("root", 100, 0),
        Q("root.l", 30, pending=100, priority=0),
        Q("root.h", 70, pending=100, priority=1),
    )
    result = run(snapshot)
    assert mem(result, "ideal_assigned") == {"root": 100, "root.h": 70, "root.l": 29}


# --- Sniper: priority layers ---------------------------------------------------------------------------------

LAYER_CASES = [
    pytest.param(
        # YARN: l (ratio 0) is the under-served one and wins back 29 of its 30 over 8 rounds (offers 9, 6, 5,
        # 3, 2, 2, 1, 1 then 0); h gets the last 1. Layers: h is served first and keeps all its usage; l,
        # a lower layer, never takes from it.
        tree(100, Q("root", 100, 100), Q("root.h", 70, 100, priority=1), Q("root.l", 30, 0, pending=50)),
        {"root": 100, "root.h": 71, "root.l": 29},
        {"root.h": 29},
        {"root": 100, "root.h": 100},
        {},
        id="lower-never-takes-from-higher",
    ),
    pytest.param(
        # YARN: h (ratio 0) reclaims 29 in the same 8 rounds, l keeps 71. Layers: h takes its whole
        # guarantee (30) from l's usage above l's own guarantee at once.
        tree(100, Q("root", 100, 100), Q("root.h", 30, 0, pending=80, priority=1), Q("root.l", 70, 100)),
        {"root": 100, "root.h": 29, "root.l": 71},
        {"root.l": 29},
        {"root": 100, "root.h": 30, "root.l": 70},
        {"root.l": 30},
        id="higher-takes-from-lower",
    ),
    pytest.param(
        # l's protected part is min(used, guaranteed) = 50: h (guarantee 50) can take only l's extra above it
        tree(100, Q("root", 100, 100), Q("root.h", 50, 0, pending=100, priority=1), Q("root.l", 50, 100)),
        None,
        None,
        {"root": 100, "root.h": 50, "root.l": 50},
        {"root.l": 50},
        id="lower-keeps-its-guarantee",
    ),
]


@pytest.mark.parametrize(("snapshot", "yarn_ideal", "yarn_tbp", "layered_ideal", "layered_tbp"), LAYER_CASES)
def test_priority_layers(
    snapshot: ClusterSnapshot,
    yarn_ideal: dict[str, int] | None,
    yarn_tbp: dict[str, int] | None,
    layered_ideal: dict[str, int],
    layered_tbp: dict[str, int],
) -> None:
    if yarn_ideal is not None:
        baseline = run(snapshot)
        assert mem(baseline, "ideal_assigned") == yarn_ideal
        assert mem(baseline, "to_be_preempted") == yarn_tbp
    layered = run(snapshot, priority_layers=True)
    assert mem(layered, "ideal_assigned") == layered_ideal
    assert mem(layered, "to_be_preempted") == layered_tbp


def test_priority_layers_share_a_layer_by_guarantee() -> None:
    # Two queues in the top layer split the pool by guarantee (1:3) before the lower layer sees anything.
    snapshot = tree(
        100,
        Q("root", 100, 100),
        Q("root.a", 10, pending=100, priority=1),
        Q("root.b", 30, pending=100, priority=1),
        Q("root.l", 60, 100),
    )
    result = run(snapshot, priority_layers=True, preempt_to_balance=True)
    ideal = mem(result, "ideal_assigned")
    assert ideal["root.a"] + ideal["root.b"] == 40  # l keeps its guarantee
    assert ideal["root.b"] == 3 * ideal["root.a"]
    assert ideal["root.l"] == 60


# --- Sniper: ineffective preemption avoidance ----------------------------------------------------------------

INEFFECTIVE_CASES = [
    pytest.param(
        # YARN: a and b (tied) each reach 25 (offers 13, 6, 3, 2, 1); x falls to 50. a's increment 25 cannot
        # start its smallest ask (30): with avoidance a gets nothing, b still reaches 25 and x keeps 75.
        30,
        {"root": 100, "root.x": 50, "root.a": 25, "root.b": 25},
        {"root.x": 50},
        {"root": 100, "root.x": 75, "root.b": 25},
        {"root.x": 25},
        {"root.a"},
        id="ask-too-large-share-goes-back",
    ),
    pytest.param(
        # the increment 25 fits an ask of 20: nothing changes
        20,
        {"root": 100, "root.x": 50, "root.a": 25, "root.b": 25},
        {"root.x": 50},
        {"root": 100, "root.x": 50, "root.a": 25, "root.b": 25},
        {"root.x": 50},
        set(),
        id="ask-fits-no-change",
    ),
]


@pytest.mark.parametrize(
    ("ask", "yarn_ideal", "yarn_tbp", "ideal", "tbp", "ineffective"),
    INEFFECTIVE_CASES,
)
def test_avoid_ineffective(
    ask: int,
    yarn_ideal: dict[str, int],
    yarn_tbp: dict[str, int],
    ideal: dict[str, int],
    tbp: dict[str, int],
    ineffective: set[str],
) -> None:
    snapshot = tree(
        100,
        Q("root", 100, 100),
        Q("root.x", 50, 100),
        Q("root.a", 25, 0, pending=40, ask=ask),
        Q("root.b", 25, 0, pending=40, ask=5),
    )
    baseline = run(snapshot)
    assert mem(baseline, "ideal_assigned") == yarn_ideal
    assert mem(baseline, "to_be_preempted") == yarn_tbp
    result = run(snapshot, avoid_ineffective=True)
    assert mem(result, "ideal_assigned") == ideal
    assert mem(result, "to_be_preempted") == tbp
    assert {q.path for q in result if q.ineffective} == ineffective


def test_avoid_ineffective_without_known_asks_changes_nothing() -> None:
    snapshot = tree(100, Q("root", 100, 100), Q("root.x", 50, 100), Q("root.a", 50, 0, pending=40))
    assert run(snapshot, avoid_ineffective=True) == run(snapshot)


def test_avoid_ineffective_uses_descendant_asks_for_parents() -> None:
    # p's increment (up to 30) cannot start its only child's ask (35): p gets nothing, x keeps its usage
    snapshot = tree(
        100,
        Q("root", 100, 100),
        Q("root.x", 70, 100),
        Q("root.p", 30, 0),
        Q("root.p.a", 30, 0, pending=50, ask=35),
    )
    result = run(snapshot, avoid_ineffective=True)
    assert result["root.p"].ineffective
    assert mem(result, "ideal_assigned") == {"root": 100, "root.x": 100}
    assert mem(result, "to_be_preempted") == {}


def test_avoid_ineffective_counts_room_a_parent_at_its_max_frees_inside() -> None:
    # p (max 60) is at 40, its increment (20) cannot start c2's ask (50) alone; c1 holds 40 above its
    # (empty) guarantee inside p, so the ask is served by preemption inside p's subtree (YuniKorn's
    # TestTryPreemption_VictimsAvailable_InsufficientResource): p is not ineffective, c2 is owed its ask.
    snapshot = tree(
        100,
        Q("root", 100, 100),
        Q("root.x", 50, 40),
        Q("root.p", 50, 40, max=60),
        Q("root.p.c1", 0, 40),
        Q("root.p.c2", 50, 0, pending=50, ask=50),
    )
    result = run(snapshot, avoid_ineffective=True)
    assert not result["root.p"].ineffective and not result["root.p.c2"].ineffective
    assert mem(result, "ideal_assigned")["root.p.c2"] == 50


# --- DRF -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "default", "dominant"),
    [
        ((50, 1), (20, 60), 1, -1),  # memory says a > b; dominant shares .5 < .6
        ((50, 50), (50, 50), 0, 0),
        ((30, 60), (60, 30), -1, 0),  # same shares, permuted
        ((40, 40), (40, 10), 0, 1),  # tie on the dominant share, the next share decides
        ((0, 0), (0, 0), 0, 0),
    ],
)
def test_calculator_compare(a: tuple[int, int], b: tuple[int, int], default: int, dominant: int) -> None:
    cluster = _res((100, 100))
    assert DefaultCalculator(MV).compare(cluster, _res(a), _res(b)) == default
    assert DominantCalculator(MV).compare(cluster, _res(a), _res(b)) == dominant


def test_dominant_compare_with_a_zero_total_is_componentwise() -> None:
    calc = DominantCalculator(MV)
    cluster = {"memory": 100, "vcore": 0}
    assert calc.compare(cluster, _res((2, 2)), _res((1, 1))) == 1
    assert calc.compare(cluster, _res((2, 1)), _res((1, 2))) == 0
    assert calc.compare(cluster, _res((1, 1)), _res((1, 2))) == -1


def test_calculator_divide_fits_and_rounding() -> None:
    cluster = _res((100, 10))
    drf = DominantCalculator(MV)
    assert drf.divide(cluster, _res((20, 5)), _res((50, 2))) == pytest.approx(1.0)  # .5 / .5
    assert DefaultCalculator(MV).divide(cluster, _res((20, 5)), _res((50, 2))) == java_float(0.4)
    assert drf.fits_in(_res((10, 2)), _res((10, 2)))
    assert not drf.fits_in(_res((10, 3)), _res((90, 2)))
    assert DefaultCalculator(MV).fits_in(_res((10, 3)), _res((90, 2)))
    # default: (long)(x + 0.5) per component; dominant: (long) ceil((float) x); float weights as in Java
    weight = java_float_div(1, 3)
    by = {"memory": weight, "vcore": weight}
    assert DefaultCalculator(MV).multiply_round(_res((30, 7)), by) == {"memory": 10, "vcore": 2}
    assert drf.multiply_round(_res((30, 7)), by) == {"memory": 10, "vcore": 3}  # 30 * 0.33333334f is 10.0f
    assert DefaultCalculator(MV).multiply_round_scalar(_res((-48, 1)), java_float(0.2)) == {"memory": -9, "vcore": 0}
    assert drf.multiply_round_scalar(_res((-48, 1)), java_float(0.2)) == {"memory": -9, "vcore": 1}
    assert java_float(0.7) * 100 < 70  # why config fractions go through java_float
    assert double_compare(float("nan"), 1.0) == 1
    with pytest.raises(ValueError, match="calculator"):
        make_calculator("fair", MV)


def test_drf_fixpoint_follows_the_dominant_resource() -> None:
    # a uses (10, 40), wants 20 more memory and no vcores; b uses (80, 20), over its guarantee (dominant .8).
    # DRF: init a=(10,40) (under its guarantee), b=guaranteed=(50,50), pool (40,10). a (ratio .8) is offered
    # (20,5) and takes the smaller of offer and want as a whole: (20,0); then it wants nothing more. b is
    # offered the rest (20,10) and its want (30,-30) is larger (dominant .3 > .2): b=(70,60). Only the
    # dominant comparison matters, so b's to-be-preempted is (80,20)-(70,60) = (10,-40) as in YARN.
    snapshot = tree(
        (100, 100),
        Q("root", (100, 100), (90, 60)),
        Q("root.a", (50, 50), (10, 40), pending=(20, 0)),
        Q("root.b", (50, 50), (80, 20)),
    )
    drf = run(snapshot, "dominant")
    assert drf["root.a"].ideal_assigned == {"memory": 30, "vcore": 40}
    assert drf["root.b"].ideal_assigned == {"memory": 70, "vcore": 60}
    assert drf["root.b"].to_be_preempted == {"memory": 10, "vcore": -40}
    # the default calculator reaches the same memory figures (only memory is meaningful there)
    default = run(snapshot, "default")
    assert mem(default, "ideal_assigned") == {"root": 100, "root.a": 30, "root.b": 70}
    assert mem(default, "to_be_preempted") == {"root.b": 10}


def test_drf_yarn_vcore_case() -> None:
    # YARN's testPreemptionWithVCoreResource: a uses (10,100) of its (50,50), b wants (10,100). a's initial
    # ideal is its guarantee; b is served up to its guarantee (offers 25,13,6,3,2,1 per resource); a keeps
    # (50,50) and must give (-40,50): five of its (1,10) containers free the 50 vcores.
    snapshot = tree(
        (100, 100),
        Q("root", (100, 100), (10, 100)),
        Q("root.a", (50, 50), (10, 100), pending=(70, 20)),
        Q("root.b", (50, 50), (0, 0), pending=(10, 100)),
    )
    result = run(snapshot, "dominant")
    assert result["root.a"].ideal_assigned == {"memory": 50, "vcore": 50}
    assert result["root.b"].ideal_assigned == {"memory": 50, "vcore": 50}
    assert result["root.a"].to_be_preempted == {"memory": -40, "vcore": 50}


def test_drf_sees_vcore_contention_that_memory_misses() -> None:
    # a waits for vcores only; b holds all vcores (over its guarantee in vcores, under it in memory).
    snapshot = tree(
        (100, 100),
        Q("root", (100, 100), (20, 100)),
        Q("root.a", (50, 50), (0, 0), pending=(0, 60)),
        Q("root.b", (50, 50), (20, 100)),
    )
    default = run(snapshot, "default")
    assert mem(default, "to_be_preempted") == {}  # memory-only: a has no demand, b is under its guarantee
    drf = run(snapshot, "dominant")
    assert drf["root.b"].to_be_preempted.get("vcore", 0) > 0


# --- snapshot validation -------------------------------------------------------------------------------------


def test_snapshot_rejects_inconsistent_trees() -> None:
    root = QueueSnapshot("root", None, ("root.a", "root.b"), False, {}, {}, {}, {}, {}, {})
    leaf = QueueSnapshot("root.a", "root", (), True, {}, {}, {}, {}, {}, {})
    other = dataclasses.replace(leaf, path="root.b")
    ClusterSnapshot({"memory": 1}, (root, leaf, other))
    with pytest.raises(SnapshotError, match="pre-order"):
        ClusterSnapshot({"memory": 1}, (root, other, leaf))
    with pytest.raises(SnapshotError, match="unknown child"):
        ClusterSnapshot({"memory": 1}, (root, leaf))
    with pytest.raises(SnapshotError, match="root"):
        ClusterSnapshot({"memory": 1}, (leaf, root, other))
    with pytest.raises(SnapshotError, match="is_leaf"):
        ClusterSnapshot({"memory": 1}, (root, dataclasses.replace(leaf, is_leaf=False), other))
