"""Apache YuniKorn's own preemption tests, translated into Sniper traces.

Each test names the YuniKorn test it comes from: yunikorn-core ``pkg/scheduler/objects/
preemption_test.go`` and ``required_node_preemptor_test.go``, and the examples of yunikorn-site
``docs/user_guide/preemption.md``. The set-up is YuniKorn's (queues, nodes, the containers already
running where the test put them, the waiting ask), staged as a feed by ``tests/yunikorn/harness.py``
and run through the simulator with a short grace period. The assertions are YuniKorn's outcome: how
many victims and from which queue, which containers are never victims, whether the waiting ask ends
up placed, nothing preempted where YuniKorn preempts nothing. Where Sniper deliberately differs (it
preempts up to the ideal assignment, YuniKorn up to the guarantee; a victim may be any container of
equal use), the test asserts the rule both schedulers share and docs/yunikorn-preemption.md says why.
Every case passes (docs/yunikorn-preemption.md lists where Sniper's outcome deliberately differs).
"""

from __future__ import annotations

import pytest

from tests.yunikorn.harness import Ask, Case, Outcome, Running, q, run

CHILD1 = "root.parent.child1"
CHILD2 = "root.parent.child2"
CHILD3 = "root.parent.child3"


def assert_outcome(
    o: Outcome,
    *,
    victims: dict[str, int],
    placed: dict[str, int],
    never: tuple[str, ...] = (),
) -> None:
    """YuniKorn's outcome: exactly ``victims`` per queue, ``placed`` containers per waiting ask, none of
    ``never`` preempted, and no invariant broken on the way."""
    assert o.violations == 0, o.result.report["violations"]
    assert dict(o.victim_queues) == victims, sorted(o.victims)
    assert {k: o.placed[k] for k in placed} == placed
    assert not o.victims & set(never), sorted(o.victims)


# ---------------------------------------------------------------------- preemption_test.go: siblings


def two_children(child2_guaranteed: int = 5) -> dict[str, object]:
    """root.parent (max first 20, guaranteed 10) -> child1, child2 (max 10; guaranteed 5, child2's given).

    The parent's guarantee grows with child2's: Sniper, like YuniKorn's config check, refuses children
    guaranteed more than their parent (the YuniKorn unit test builds its queues without that check)."""
    return q(
        "root",
        q(
            "parent",
            q("child1", maximum={"first": 10}, guaranteed={"first": 5}),
            q("child2", maximum={"first": 10}, guaranteed={"first": child2_guaranteed}),
            maximum={"first": 20},
            guaranteed={"first": 5 + child2_guaranteed},
        ),
    )


APPS12 = {"app-1": CHILD1, "app-2": CHILD2}


def test_TryPreemption() -> None:
    case = Case(
        root=two_children(),
        nodes={"node-1": {"first": 10, "pods": 5}},
        apps=APPS12,
        running=(
            Running("alloc1", "app-1", {"first": 5, "pods": 1}, "node-1"),
            Running("alloc2", "app-1", {"first": 5, "pods": 1}, "node-1"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 5, "pods": 1}),),
    )
    assert_outcome(run(case), victims={CHILD1: 1}, placed={"alloc3": 1})


def test_TryPreemptionOnNode() -> None:
    case = Case(
        root=two_children(),
        nodes={"node-1": {"first": 5, "pods": 1}, "node-2": {"first": 5, "pods": 1}},
        apps=APPS12,
        running=(
            Running("alloc1", "app-1", {"first": 5, "pods": 1}, "node-1"),
            Running("alloc2", "app-1", {"first": 5, "pods": 1}, "node-2"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 5, "pods": 1}),),
    )
    assert_outcome(run(case), victims={CHILD1: 1}, placed={"alloc3": 1})


def test_TryPreemption_NodeWithCapacityLesserThanAsk() -> None:
    case = Case(
        root=two_children(child2_guaranteed=6),
        nodes={"node-1": {"first": 5, "pods": 1}, "node-2": {"first": 5, "pods": 1}},
        apps=APPS12,
        running=(
            Running("alloc1", "app-1", {"first": 5, "pods": 1}, "node-1"),
            Running("alloc2", "app-1", {"first": 5, "pods": 1}, "node-2"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 6, "pods": 1}),),
    )
    assert_outcome(run(case), victims={}, placed={"alloc3": 0})


def test_TryPreemptionOnNodeWithOGParentAndUGPreemptor() -> None:
    root = q(
        "root",
        q(
            "parent",
            q("child1"),
            q("child2", maximum={"first": 10}, guaranteed={"first": 1}),
            maximum={"first": 20},
            guaranteed={"first": 2},
        ),
    )
    case = Case(
        root=root,
        nodes={"node-1": {"first": 3, "pods": 1}, "node-2": {"first": 3, "pods": 1}},
        apps=APPS12,
        running=tuple(
            Running(f"alloc{i}", "app-1", {"first": 1}, "node-1" if i % 2 == 0 else "node-2") for i in range(1, 7)
        ),
        asks=(Ask("alloc7", "app-2", {"first": 1}),),
    )
    assert_outcome(run(case), victims={CHILD1: 1}, placed={"alloc7": 1})


def test_TryPreemptionOnQueue() -> None:
    root = q(
        "root",
        q(
            "parent",
            q("child1", guaranteed={"first": 5}),
            q("child2", guaranteed={"first": 5}),
            maximum={"first": 10},
        ),
    )
    case = Case(
        root=root,
        nodes={"node-1": {"first": 10, "pods": 2}, "node-2": {"first": 10, "pods": 2}},
        apps=APPS12,
        running=(
            Running("alloc1", "app-1", {"first": 5, "pods": 1}, "node-1"),
            Running("alloc2", "app-1", {"first": 5, "pods": 1}, "node-2"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 5, "pods": 1}),),
    )
    assert_outcome(run(case), victims={CHILD1: 1}, placed={"alloc3": 1})


def test_CheckPreemptionQueueGuarantees_ask_too_large() -> None:
    # The negative half: an ask of first 25 (more than any node, the parent's guarantee and child2's max)
    # can never be guaranteed by preemption; nothing is preempted. (The positive half is TestTryPreemption.)
    case = Case(
        root=two_children(),
        nodes={"node1": {"first": 20}},
        apps=APPS12,
        running=(
            Running("alloc1", "app-1", {"first": 5}, "node1"),
            Running("alloc2", "app-1", {"first": 5}, "node1"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 25}),),
    )
    assert_outcome(run(case), victims={}, placed={"alloc3": 0})


NO_GUARANTEE = {
    "NoGuaranteed": (None, None, False),
    "ParentGuaranteed": ({"first": 10}, None, True),
    "ChildGuaranteed": (None, {"first": 5}, True),
    "BothGuaranteed": ({"first": 10}, {"first": 5}, True),
}


@pytest.mark.parametrize(
    "name",
    [
        "NoGuaranteed",
        "ParentGuaranteed",
        "ChildGuaranteed",
        "BothGuaranteed",
    ],
)
def test_CheckPreemptionQueueGuaranteesWithNoGuaranteedResources(name: str) -> None:
    # YuniKorn's nodes have first 20 each, room the ask would simply use; here they hold first 5 each, so
    # the ask (first 5) can only start by preemption, as in the YuniKorn test's call to the preemptor.
    parent, child2, preempts = NO_GUARANTEE[name]
    root = q(
        "root",
        q("parent", q("child1", guaranteed={"first": 5}), q("child2", guaranteed=child2), guaranteed=parent),
    )
    case = Case(
        root=root,
        nodes={"node1": {"first": 5}, "node2": {"first": 5}},
        apps=APPS12,
        running=(
            Running("alloc1", "app-1", {"first": 5}, "node1"),
            Running("alloc2", "app-1", {"first": 5}, "node2"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 5}),),
    )
    n = 1 if preempts else 0
    assert_outcome(run(case), victims={CHILD1: n} if n else {}, placed={"alloc3": n})


def limited_parent(parent_max: int, *children: dict[str, object]) -> dict[str, object]:
    """root.parent with only a max on first, over the given children."""
    return q("root", q("parent", *children, maximum={"first": parent_max}))


def test_TryPreemption_VictimsAvailable_InsufficientResource() -> None:
    case = Case(
        root=limited_parent(8, q("child1"), q("child2", guaranteed={"first": 5})),
        nodes={"node-1": {"first": 10, "pods": 2}, "node-2": {"first": 10, "pods": 2}},
        apps=APPS12,
        running=(
            Running("alloc1", "app-1", {"first": 2, "pods": 1}, "node-1"),
            Running("alloc2", "app-1", {"first": 2, "pods": 1}, "node-2"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 5}),),
    )
    # YuniKorn preempts nothing (its victims, first 4 in all, are smaller than the ask). Sniper counts the
    # parent's headroom: freeing one container of 2 leaves room for 5 under the max of 8, and child1 has
    # no guarantee to keep. docs/yunikorn-preemption.md: a deliberate difference.
    o = run(case)
    assert_outcome(o, victims={CHILD1: 1}, placed={"alloc3": 1})


def test_TryPreemption_VictimsOnDifferentNodes_InsufficientResource() -> None:
    case = Case(
        root=limited_parent(6, q("child1"), q("child2", guaranteed={"first": 5})),
        nodes={"node-1": {"first": 5, "pods": 1}, "node-2": {"first": 5, "pods": 1}},
        apps=APPS12,
        running=(
            Running("alloc1", "app-1", {"first": 2, "pods": 1}, "node-1"),
            Running("alloc2", "app-1", {"first": 2, "pods": 1}, "node-2"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 5}),),
    )
    assert_outcome(run(case), victims={}, placed={"alloc3": 0})


def test_TryPreemption_VictimsAvailableOnDifferentNodes() -> None:
    case = Case(
        root=limited_parent(6, q("child1"), q("child2", guaranteed={"first": 5})),
        nodes={"node-1": {"first": 5, "pods": 1}, "node-2": {"first": 4, "pods": 1}},
        apps=APPS12,
        running=(
            Running("alloc1", "app-1", {"first": 4, "pods": 1}, "node-1"),
            Running("alloc2", "app-1", {"first": 2, "pods": 1}, "node-2"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 5}),),
    )
    assert_outcome(run(case), victims={}, placed={"alloc3": 0})


def three_children() -> dict[str, object]:
    return limited_parent(18, q("child1"), q("child2", guaranteed={"first": 15}), q("child3"))


def test_TryPreemption_OnQueue_VictimsOnDifferentNodes() -> None:
    case = Case(
        root=three_children(),
        nodes={"node-1": {"first": 30}, "node-2": {"first": 30}},
        apps={**APPS12, "app-3": CHILD3},
        running=(
            Running("alloc1", "app-1", {"first": 5}, "node-1"),
            Running("alloc2", "app-1", {"first": 5}, "node-2"),
            Running("alloc4", "app-3", {"first": 5}, "node-2"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 10}),),
    )
    # YuniKorn takes alloc2 and alloc4; any two of the three free the parent's max for the ask.
    o = run(case)
    assert o.violations == 0 and len(o.victims) == 2
    assert o.placed["alloc3"] == 1


def test_TryPreemption_OnQueue_VictimsAvailable_LowerPriority() -> None:
    case = Case(
        root=three_children(),
        nodes={"node-1": {"first": 30}, "node-2": {"first": 30}},
        apps={**APPS12, "app-3": CHILD3},
        running=(
            Running("alloc1", "app-1", {"first": 5}, "node-1"),
            Running("alloc2", "app-1", {"first": 5}, "node-1"),
            Running("alloc4", "app-3", {"first": 5}, "node-2", priority=1000),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 10}),),
    )
    assert_outcome(run(case), victims={CHILD1: 2}, placed={"alloc3": 1}, never=("alloc4",))


# ---------------------------------------------------------------------- resource types, two levels

P1C1 = "root.parent.parent1.child1"
P2C2 = "root.parent.parent2.child2"


def nested(
    *,
    parent_max: dict[str, int] | None = None,
    parent1: dict[str, int] | None = None,
    parent2: dict[str, int] | None = None,
    child1: dict[str, int] | None = None,
    child2: dict[str, int] | None = None,
) -> dict[str, object]:
    """root.parent -> parent1 -> child1; parent2 -> child2, child3 (guarantees as given)."""
    return q(
        "root",
        q(
            "parent",
            q("parent1", q("child1", guaranteed=child1), guaranteed=parent1),
            q("parent2", q("child2", guaranteed=child2), q("child3"), guaranteed=parent2),
            maximum=parent_max,
        ),
    )


def different_types(node: dict[str, int]) -> Case:
    """Two {vcores 1, mem 200} in child2; child1 (parent1 guaranteed vcores 1) asks vcores 1."""
    return Case(
        root=nested(parent_max={"vcores": 2}, parent1={"vcores": 1}),
        nodes={"node-1": node},
        apps={"app-1": P2C2, "app-2": P1C1},
        running=(
            Running("alloc1", "app-1", {"vcores": 1, "mem": 200}, "node-1"),
            Running("alloc2", "app-1", {"vcores": 1, "mem": 200}, "node-1"),
        ),
        asks=(Ask("alloc3", "app-2", {"vcores": 1}),),
    )


def test_TryPreemption_AskResTypesDifferent_GuaranteedSetOnPreemptorSide() -> None:
    o = run(different_types({"vcores": 3, "mem": 400}))
    assert_outcome(o, victims={P2C2: 1}, placed={"alloc3": 1})


def test_TryPreemption_OnNode_AskResTypesDifferent_GuaranteedSetOnPreemptorSide() -> None:
    o = run(different_types({"vcores": 2, "mem": 400}))
    assert_outcome(o, victims={P2C2: 1}, placed={"alloc3": 1})


def mixed_victims(
    node: dict[str, int], other: dict[str, int], ask: dict[str, int], **guarantees: dict[str, int]
) -> Case:
    """child2 runs alloc1 (app-1), alloc2 and alloc3 (app-2), each ``{vcores 1} | other``, and alloc5..7
    (app-1) of ``other`` alone; app-4 in child1 asks ``ask``."""
    vcore = {"vcores": 1, **({"mem": 100} if "mem" in other else {})}
    running = (
        Running("alloc1", "app-1", vcore, "node-1"),
        Running("alloc2", "app-2", vcore, "node-1"),
        Running("alloc3", "app-2", vcore, "node-1"),
        *(Running(f"alloc{i}", "app-1", other, "node-1") for i in range(5, 8)),
    )
    return Case(
        root=nested(**guarantees),
        nodes={"node-1": node},
        apps={"app-1": P2C2, "app-2": P2C2, "app-4": P1C1},
        running=running,
        asks=(Ask("alloc4", "app-4", ask),),
    )


OTHER_ONLY = ("alloc5", "alloc6", "alloc7")  # hold no resource the ask needs: never victims


def test_TryPreemption_AskResTypesDifferent_GuaranteedSetOnVictimAndPreemptorSides() -> None:
    case = mixed_victims(
        {"vcores": 5, "mem": 700},
        {"mem": 100},
        {"vcores": 2},
        parent_max={"vcores": 3},
        child1={"vcores": 2},
        child2={"vcores": 1},
    )
    assert_outcome(run(case), victims={P2C2: 2}, placed={"alloc4": 1}, never=OTHER_ONLY)


def test_TryPreemption_OnNode_AskResTypesDifferent_GuaranteedSetOnVictimAndPreemptorSides() -> None:
    case = mixed_victims(
        {"vcores": 3, "mem": 600},
        {"mem": 100},
        {"vcores": 2},
        parent_max={"vcores": 3},
        child1={"vcores": 2},
        child2={"vcores": 1},
    )
    assert_outcome(run(case), victims={P2C2: 2}, placed={"alloc4": 1}, never=OTHER_ONLY)


def test_TryPreemption_OnNode_AskResTypesSame_GuaranteedSetOnPreemptorSide() -> None:
    case = mixed_victims(
        {"vcores": 3, "gpu": 300, "mem": 200}, {"gpu": 100}, {"vcores": 2, "mem": 200}, child1={"vcores": 2}
    )
    assert_outcome(run(case), victims={P2C2: 2}, placed={"alloc4": 1}, never=OTHER_ONLY)


def test_TryPreemption_OnNode_AskResTypesSame_GuaranteedSetOnVictimAndPreemptorSides() -> None:
    case = mixed_victims(
        {"vcores": 3, "gpu": 700, "mem": 200},
        {"gpu": 100},
        {"vcores": 2, "mem": 200},
        child1={"vcores": 2},
        child2={"vcores": 1},
    )
    assert_outcome(run(case), victims={P2C2: 2}, placed={"alloc4": 1}, never=OTHER_ONLY)


# ---------------------------------------------------------------------- under-guaranteed parent, siblings

SIB1 = "root.parent.parent1.child1"
SIB2 = "root.parent.parent1.child2"


def siblings(child1: dict[str, int] | None, child2: dict[str, int] | None) -> Case:
    """parent1 (guaranteed vcores 10) -> child1 running two vcore-1 containers of two apps, child2
    asking vcores 1; on one node of 2 vcores."""
    root = q(
        "root",
        q(
            "parent",
            q("parent1", q("child1", guaranteed=child1), q("child2", guaranteed=child2), guaranteed={"vcores": 10}),
            q("parent2", q("child3")),
            maximum={"vcores": 20},
        ),
    )
    return Case(
        root=root,
        nodes={"node-1": {"vcores": 2}},
        apps={"app-1": SIB1, "app-2": SIB1, "app-3": SIB2},
        running=(
            Running("alloc1", "app-1", {"vcores": 1}, "node-1"),
            Running("alloc2", "app-2", {"vcores": 1}, "node-1"),
        ),
        asks=(Ask("alloc3", "app-3", {"vcores": 1}),),
    )


def test_TryPreemption_OnNode_UGParent_With_UGPreemptorChild_GNotSetOnVictimChild_As_Siblings() -> None:
    assert_outcome(run(siblings(None, {"vcores": 1})), victims={SIB1: 1}, placed={"alloc3": 1})


def test_TryPreemption_OnNode_UGParent_With_GNotSetOnBothChilds() -> None:
    # YuniKorn preempts nothing, to avoid a storm between siblings that both inherit the parent's
    # "under guaranteed". Sniper may give child2 an even share of the parent's guarantee (one vcore);
    # either way there is no storm: at most one victim, none from child2, nothing taken back.
    o = run(siblings(None, None))
    assert o.violations == 0
    assert len(o.victims) <= 1 and not o.victim_queues[SIB2]
    assert o.result.report["ping_pong"] == 0


def test_TryPreemption_OnNode_UGParent_With_UGPreemptorChild_OGVictimChild_As_Siblings() -> None:
    assert_outcome(run(siblings({"vcores": 1}, {"vcores": 1})), victims={SIB1: 1}, placed={"alloc3": 1})


# ---------------------------------------------------------------------- guarantees naming unused types

TWO_NODES_FS = {"node-1": {"first": 10, "second": 2}, "node-2": {"first": 10, "second": 2}}


def victim_side(root: dict[str, object], victim: str, asker: str) -> Case:
    """``victim`` runs first 10 on each node; ``asker`` asks first 5."""
    return Case(
        root=root,
        nodes=TWO_NODES_FS,
        apps={"app-1": victim, "app-2": asker},
        running=(
            Running("alloc1", "app-1", {"first": 10}, "node-1"),
            Running("alloc2", "app-1", {"first": 10}, "node-2"),
        ),
        asks=(Ask("alloc3", "app-2", {"first": 5}),),
    )


def test_TryPreemption_VictimQueue_With_OG_And_UG_ResTypes() -> None:
    root = q(
        "root",
        q(
            "parent",
            q("child1", guaranteed={"first": 10, "second": 2}),
            q("child2", guaranteed={"first": 10}),
            maximum={"first": 20, "second": 4},
        ),
    )
    o = run(victim_side(root, CHILD1, CHILD2))
    assert_outcome(o, victims={CHILD1: 1}, placed={"alloc3": 1})


DIFF_PARENTS = {
    "victim queue under parent different from ask queue with some OG res types": (
        {"first": 10, "second": 2},
        {"first": 10},
        None,
        None,
    ),
    "victim queue with some OG res types under parent different from ask queue": (
        None,
        None,
        {"first": 10, "second": 2},
        {"first": 10},
    ),
}


def diff_parents(guarantees: tuple[dict[str, int] | None, ...], parent_max: dict[str, int]) -> dict[str, object]:
    victim_parent, ask_parent, victim_child, ask_child = guarantees
    return q(
        "root",
        q(
            "parent",
            q("parent1", q("child1", guaranteed=victim_child), guaranteed=victim_parent),
            q("parent2", q("child2", guaranteed=ask_child), guaranteed=ask_parent),
            maximum=parent_max,
        ),
    )


@pytest.mark.parametrize(
    "name",
    [
        "victim queue under parent different from ask queue with some OG res types",
        "victim queue with some OG res types under parent different from ask queue",
    ],
)
def test_TryPreemption_VictimQueue_Under_Diff_Parent_With_OG_And_UG_ResTypes(name: str) -> None:
    o = run(
        victim_side(diff_parents(DIFF_PARENTS[name], {"first": 20, "second": 4}), P1C1, "root.parent.parent2.child2")
    )
    assert_outcome(o, victims={P1C1: 1}, placed={"alloc3": 1})


def ask_side(root: dict[str, object], victim: str, asker: str) -> Case:
    """``victim`` runs first 10 on node-1 and first 5 on node-2; ``asker`` runs {first 5, second 3} on
    node-2 and asks {first 5, third 10}."""
    return Case(
        root=root,
        nodes={n: {"first": 10, "second": 3, "third": 10} for n in ("node-1", "node-2")},
        apps={"app-1": victim, "app-2": asker, "app-3": asker},
        running=(
            Running("alloc1", "app-1", {"first": 10}, "node-1"),
            Running("alloc2", "app-1", {"first": 5}, "node-2"),
            Running("alloc3", "app-2", {"first": 5, "second": 3}, "node-2"),
        ),
        asks=(Ask("alloc4", "app-3", {"first": 5, "third": 10}),),
    )


def test_TryPreemption_AskQueue_With_OG_And_UG_ResTypes() -> None:
    root = q(
        "root",
        q(
            "parent",
            q("child1", guaranteed={"first": 10}),
            q("child2", guaranteed={"first": 10, "second": 2}),
            maximum={"first": 20, "second": 6},
        ),
    )
    o = run(ask_side(root, CHILD1, CHILD2))
    # YuniKorn: alloc1 or alloc2. Only alloc2 keeps child1 at its guarantee (first 10).
    assert_outcome(o, victims={CHILD1: 1}, placed={"alloc4": 1}, never=("alloc3",))


ASK_DIFF_PARENTS = {
    "ask queue under parent different from victim queue with some OG res types": (
        {"first": 10},
        {"first": 10, "second": 2},
        None,
        None,
    ),
    "ask queue with some OG res types under parent different from victim queue": (
        None,
        None,
        {"first": 10},
        {"first": 10, "second": 2},
    ),
}


@pytest.mark.parametrize(
    "name",
    [
        "ask queue under parent different from victim queue with some OG res types",
        "ask queue with some OG res types under parent different from victim queue",
    ],
)
def test_TryPreemption_AskQueue_Under_DiffParent_With_OG_And_UG_ResTypes(name: str) -> None:
    root = diff_parents(ASK_DIFF_PARENTS[name], {"first": 20, "second": 6})
    o = run(ask_side(root, P1C1, "root.parent.parent2.child2"))
    assert_outcome(o, victims={P1C1: 1}, placed={"alloc4": 1}, never=("alloc3",))


# ---------------------------------------------------------------------- required_node_preemptor_test.go

DS_NODE = "node"
DS_APPS = {"app1": "root.default", "app-ds": "root.default"}

# prepareAllocationAsks: (key, first, priority, originator); the node is full (YuniKorn's has 24 free,
# which its victim search ignores). allow-preemption has no Sniper counterpart; originators are AMs.
DS_RUNNING = (
    ("ask1", 10, 10, False),
    ("ask2", 8, 10, False),
    ("ask3", 10, 15, False),
    ("ask4", 5, 10, False),
    ("ask5", 5, 5, False),
    ("ask6", 10, 10, False),
    ("ask7", 8, 10, False),
    ("ask8", 10, 15, False),
    ("ask9", 5, 10, True),
    ("ask10", 5, 5, True),
)
ORIGINATORS = ("ask9", "ask10")


def daemon_set(ask_priority: int, pinned: str = "") -> Case:
    """app1's containers fill the node; app-ds asks first 5 on that node at ``ask_priority``; the
    container ``pinned`` (if any) was itself placed for a required-node ask. Both apps share one queue:
    YuniKorn's required-node preemption is Sniper's intra-queue policy (invariant 5b: only containers
    of lower priority than the ask), which a partition switches on (docs/yunikorn-preemption.md)."""
    return Case(
        root=q("root", q("default")),
        nodes={DS_NODE: {"first": sum(n for _, n, _, _ in DS_RUNNING)}},
        apps=DS_APPS,
        running=tuple(
            Running(k, "app1", {"first": n}, DS_NODE, priority=p, am=am, pinned=k == pinned)
            for k, n, p, am in DS_RUNNING
        ),
        asks=(Ask("ask13", "app-ds", {"first": 5}, priority=ask_priority, node=DS_NODE),),
        app_priority={"app1": 5, "app-ds": ask_priority},
        intra_queue=True,
    )


def test_GetVictims_required_node_ask_preempts_one_lower_priority_container() -> None:
    # TestGetVictims case 2: a daemon-set ask of first 5 at priority 20 on a full node: one victim
    # (YuniKorn's is ask5: lowest priority, not an originator).
    o = run(daemon_set(20))
    assert o.violations == 0 and len(o.victims) == 1 and not o.victims & set(ORIGINATORS)
    assert o.placed["ask13"] == 1


def test_FilterAllocations_required_node_container_is_never_a_victim() -> None:
    # TestFilterAllocations case 5: ask9 was itself placed for a required-node ask; it is filtered out,
    # and the new daemon-set ask takes one other container.
    o = run(daemon_set(20, pinned="ask9"))
    assert o.violations == 0 and len(o.victims) == 1 and "ask9" not in o.victims
    assert o.placed["ask13"] == 1


def test_FilterAllocations_required_node_ask_never_preempts_higher_priority() -> None:
    # TestFilterAllocations case 2: the daemon-set ask has priority 1, every container 5 or more: none
    # is a victim, and the ask waits.
    o = run(daemon_set(1))
    assert_outcome(o, victims={}, placed={"ask13": 0})


# ---------------------------------------------------------------------- yunikorn-site user guide


def pods(app: str, n: int, size: int = 1) -> tuple[Running, ...]:
    """``n`` pods of ``app``, each of first ``size``, on node-1."""
    return tuple(Running(f"{app}-{i}", app, {"first": size}, "node-1") for i in range(1, n + 1))


NORMAL1, NORMAL2 = "root.normal.queue-1", "root.normal.queue-2"


def test_user_guide_general_preemption_case() -> None:
    # normal (max 12) -> queue-1, queue-2 (max 10, guaranteed 5). queue-1 runs 10 pods, queue-2 2 and
    # asks for 8 more. YuniKorn preempts 3: queue-1 10 -> 7, queue-2 2 -> 5. Sniper preempts to the ideal
    # assignment, which splits the 2 spare evenly (6 / 6), so 3 or 4 victims; never below a guarantee.
    root = q(
        "root",
        q(
            "normal",
            q("queue-1", maximum={"first": 10}, guaranteed={"first": 5}),
            q("queue-2", maximum={"first": 10}, guaranteed={"first": 5}),
            maximum={"first": 12},
        ),
    )
    case = Case(
        root=root,
        nodes={"node-1": {"first": 20}},
        apps={"app-1": NORMAL1, "app-2": NORMAL2},
        running=(*pods("app-1", 10), *pods("app-2", 2)),
        asks=(Ask("app-2-more", "app-2", {"first": 1}, count=8),),
    )
    o = run(case)
    assert o.violations == 0
    assert set(o.victim_queues) == {NORMAL1} and 3 <= len(o.victims) <= 4
    assert o.running[NORMAL2] >= 5 and o.running[NORMAL1] >= 5
    assert o.running[NORMAL1] + o.running[NORMAL2] == 12


def test_user_guide_priority_queue() -> None:
    # high-pri (offset 100), norm-pri, low-pri (offset -100), each guaranteed 6; norm-pri holds all 18
    # in pods of 3, then high-pri and low-pri ask for five pods each. YuniKorn: high-pri 0 -> 6, norm-pri
    # 18 -> 12, low-pri stays 0 (it may not preempt a higher-priority queue).
    root = q(
        "root",
        q("high-pri", maximum={"first": 10}, guaranteed={"first": 6}, priority_offset="100"),
        q("norm-pri", maximum={"first": 18}, guaranteed={"first": 6}),
        q("low-pri", maximum={"first": 10}, guaranteed={"first": 6}, priority_offset="-100"),
    )
    case = Case(
        root=root,
        nodes={"node-1": {"first": 18}},
        apps={"high": "root.high-pri", "norm": "root.norm-pri", "low": "root.low-pri"},
        running=pods("norm", 6, size=3),
        asks=(Ask("high-pods", "high", {"first": 3}, count=5), Ask("low-pods", "low", {"first": 3}, count=5)),
    )
    o = run(case)
    assert_outcome(o, victims={"root.norm-pri": 2}, placed={"high-pods": 2, "low-pods": 0})
    assert o.running == {"root.high-pri": 2, "root.norm-pri": 4}


def test_user_guide_priority_class_allow_preemption_false() -> None:
    # rt (max 16) -> queue-1, queue-2, queue-3 (max 8, guaranteed 3); queue-1 and queue-2 hold 8 pods
    # each, queue-2's with allow-preemption false (the app's allow_preemption: false); queue-3 asks for
    # 8. YuniKorn: queue-1 8 -> 5, queue-2 keeps 8, queue-3 0 -> 3.
    root = q(
        "root",
        q(
            "rt",
            q("queue-1", maximum={"first": 8}, guaranteed={"first": 3}),
            q("queue-2", maximum={"first": 8}, guaranteed={"first": 3}),
            q("queue-3", maximum={"first": 8}, guaranteed={"first": 3}),
            maximum={"first": 16},
        ),
    )
    case = Case(
        root=root,
        nodes={"node-1": {"first": 20}},
        apps={"app-1": "root.rt.queue-1", "app-2": "root.rt.queue-2", "app-3": "root.rt.queue-3"},
        running=(*pods("app-1", 8), *pods("app-2", 8)),
        asks=(Ask("app-3-pods", "app-3", {"first": 1}, count=8),),
        opted_out=frozenset({"app-2"}),
    )
    o = run(case)
    assert_outcome(o, victims={"root.rt.queue-1": 3}, placed={"app-3-pods": 3})
    assert o.running == {"root.rt.queue-1": 5, "root.rt.queue-2": 8, "root.rt.queue-3": 3}


def test_user_guide_preemption_storm_between_unguaranteed_siblings() -> None:
    # region1 (guaranteed vcores 10) -> country1 -> state1, state2 without guarantees; each state's
    # ReplicaSet runs 4 of 9 one-vcore replicas, the cluster (8 vcores) is full. The guide shows how
    # YuniKorn can loop here (each state inherits "under guaranteed" from region1 and preempts the
    # other). Sniper preempts between them only towards the ideal assignment, which here is what they
    # hold: no victim, no loop, even with preempted replicas asked for again.
    root = q(
        "root",
        q("region1", q("country1", q("state1"), q("state2")), guaranteed={"vcores": 10}),
        q("region2", q("country2")),
    )
    s1, s2 = "root.region1.country1.state1", "root.region1.country1.state2"
    case = Case(
        root=root,
        nodes={"node-1": {"vcores": 4}, "node-2": {"vcores": 4}},
        apps={"repl-1": s1, "repl-2": s2},
        running=(
            *(Running(f"repl-1-{i}", "repl-1", {"vcores": 1}, "node-1") for i in range(4)),
            *(Running(f"repl-2-{i}", "repl-2", {"vcores": 1}, "node-2") for i in range(4)),
        ),
        asks=(
            Ask("repl-1-more", "repl-1", {"vcores": 1}, count=5),
            Ask("repl-2-more", "repl-2", {"vcores": 1}, count=5),
        ),
        retry=True,
    )
    o = run(case)
    assert_outcome(o, victims={}, placed={"repl-1-more": 0, "repl-2-more": 0})
    assert o.result.report["ping_pong"] == 0


def fence_case() -> Case:
    """The user guide's fence hierarchy: rt -> ten-a (fence) -> queue-1, queue-2 (fence); ten-b (fence) ->
    queue-3; sys. queue-1 and queue-3 hold 15 pods each (the whole cluster); queue-2 and sys ask 15.
    The guide gives rt a max of 3, which cannot be (its children hold 30): left out."""
    root = q(
        "root",
        q(
            "ten-a",
            q("queue-1", maximum={"first": 15}, guaranteed={"first": 2}),
            q("queue-2", maximum={"first": 15}, guaranteed={"first": 2}, preemption_policy="fence"),
            maximum={"first": 15},
            guaranteed={"first": 5},
            preemption_policy="fence",
        ),
        q(
            "ten-b",
            q("queue-3", maximum={"first": 15}, guaranteed={"first": 10}),
            maximum={"first": 15},
            guaranteed={"first": 10},
            preemption_policy="fence",
        ),
        q("sys", maximum={"first": 15}, guaranteed={"first": 10}),
        preemption_policy="fence",
    )
    return Case(
        root=root,
        nodes={"node-1": {"first": 30}},
        apps={"a1": "root.ten-a.queue-1", "a2": "root.ten-a.queue-2", "b3": "root.ten-b.queue-3", "sys": "root.sys"},
        running=(*pods("a1", 15), *pods("b3", 15)),
        asks=(Ask("a2-pods", "a2", {"first": 1}, count=15), Ask("sys-pods", "sys", {"first": 1}, count=15)),
    )


@pytest.fixture(scope="module")
def fence() -> Outcome:
    return run(fence_case())


def test_user_guide_fence_case_1_fenced_queue_2_gets_nothing_from_queue_1(fence: Outcome) -> None:
    assert fence.violations == 0
    assert not [x for x in fence.result.report["preemption_log"] if x["beneficiary_queue"] == "root.ten-a.queue-2"]
    assert fence.placed["a2-pods"] == 0


def test_user_guide_fence_case_2_sys_preempts_in_both_tenants(fence: Outcome) -> None:
    # YuniKorn: ten-a 15 -> 10, ten-b 15 -> 10, sys 0 -> 10. Sniper preempts towards the ideal
    # assignment (sys and ten-b 12, ten-a 6); both keep every guarantee.
    assert fence.violations == 0
    assert set(fence.victim_queues) == {"root.ten-a.queue-1", "root.ten-b.queue-3"}
    assert fence.running["root.sys"] >= 10
    assert fence.running["root.ten-a.queue-1"] >= 5 and fence.running["root.ten-b.queue-3"] >= 10
