"""The allocation cycle, sans-IO: ``find_ask_candidates`` ordering and headroom, ``try_allocate`` placement."""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core.allocation import CandidateFilter, FreeRoomPlacer, find_ask_candidates, try_allocate
from sniper.core.config import partition_to_raw
from sniper.core.node_index import NodeIndex
from sniper.core.state import STATIC_APP_ORDER, App, Node, PartitionState
from sniper.messages import protocol as p
from tests.core_support import Build, config_of, consistency_problems, queue, state_of


def _first_queue(state: PartitionState) -> str:
    picked = find_ask_candidates(state, 1)
    assert len(picked) == 1
    return picked[0].app.queue.path


# ---------------------------------------------------------------------- queue order

QUEUE_ORDER: list[tuple[str, list[dict[str, Any]], Build, str]] = [
    (
        "below its guarantee before a higher priority above its own",
        [queue("a", guaranteed={"memory": 1000}, priority_offset="10"), queue("b", guaranteed={"memory": 50_000})],
        Build().app("A", "root.a").app("B", "root.b").used("A", 40_000).ask("A", "x", 100).ask("B", "y", 100),
        "root.b",
    ),
    (
        "priority.offset first among queues above their guarantees, whatever the shares",
        [queue("a", guaranteed={"memory": 1000}, priority_offset="10"), queue("b", guaranteed={"memory": 1000})],
        Build()
        .app("A", "root.a")
        .app("B", "root.b")
        .used("A", 40_000)
        .used("B", 2000)
        .ask("A", "x", 1)
        .ask("B", "y", 1),
        "root.a",
    ),
    (
        "priority.offset first among queues below their guarantees",
        [queue("a", guaranteed={"memory": 10_000}, priority_offset="10"), queue("b", guaranteed={"memory": 10_000})],
        Build().app("A", "root.a").app("B", "root.b").used("A", 9000).ask("A", "x", 1).ask("B", "y", 1),
        "root.a",
    ),
    (
        "a negative offset goes last",
        [queue("a", priority_offset="-1"), queue("b")],
        Build().app("A", "root.a").app("B", "root.b").used("B", 90_000).ask("A", "x", 100).ask("B", "y", 100),
        "root.b",
    ),
    (
        "below its guarantee before a queue without one, whatever the shares",
        [queue("a", guaranteed={"memory": 10_000}), queue("b")],
        Build().app("A", "root.a").app("B", "root.b").used("A", 9_000).ask("A", "x", 100).ask("B", "y", 100),
        "root.a",
    ),
    (
        "below its guarantee before one over it",
        [queue("a", guaranteed={"memory": 10_000}), queue("b", guaranteed={"memory": 1_000})],
        Build()
        .app("A", "root.a")
        .app("B", "root.b")
        .used("A", 9_000)
        .used("B", 1_000)
        .ask("A", "x", 1)
        .ask("B", "y", 1),
        "root.a",
    ),
    (
        "lower dominant share of the guarantee first",
        [queue("a", guaranteed={"memory": 10_000, "vcore": 10_000}), queue("b", guaranteed={"memory": 10_000})],
        # a: memory 10%, vcore 60% -> 0.6; b: memory 50% -> 0.5
        Build()
        .app("A", "root.a")
        .app("B", "root.b")
        .used("A", 1_000, vcore=6_000)
        .used("B", 5_000)
        .ask("A", "x", 1)
        .ask("B", "y", 1),
        "root.b",
    ),
    (
        "lower share of the cluster first among queues without guarantee",
        [queue("a"), queue("b")],
        Build()
        .app("A", "root.a")
        .app("B", "root.b")
        .used("A", 3_000)
        .used("B", 2_000)
        .ask("A", "x", 1)
        .ask("B", "y", 1),
        "root.b",
    ),
    (
        "equal shares: the queue with more pending first",
        [queue("a"), queue("b")],
        Build().app("A", "root.a").app("B", "root.b").ask("A", "x", 100).ask("B", "y", 100, count=5),
        "root.b",
    ),
    (
        "a guarantee naming only memory: other resources do not count against it",
        [queue("a", guaranteed={"memory": 10_000}), queue("b")],
        Build()
        .app("A", "root.a")
        .app("B", "root.b")
        .used("A", 1_000, vcore=5_000)
        .used("B", 2_000)
        .ask("A", "x", 100, vcore=100)
        .ask("B", "y", 100),
        "root.a",
    ),
    (
        "order holds at every level: the parent below its guarantee wins",
        [
            queue("p", queue("p1"), guaranteed={"memory": 50_000}),
            queue("q", queue("q1"), guaranteed={"memory": 10_000}),
        ],
        Build()
        .app("P", "root.p.p1")
        .app("Q", "root.q.q1")
        .used("P", 20_000)
        .used("Q", 10_000)
        .ask("P", "x", 1)
        .ask("Q", "y", 1),
        "root.p.p1",
    ),
]


@pytest.mark.parametrize(("leaves", "build", "expected"), [c[1:] for c in QUEUE_ORDER], ids=[c[0] for c in QUEUE_ORDER])
def test_queue_order(leaves: list[dict[str, Any]], build: Build, expected: str) -> None:
    assert _first_queue(state_of(leaves, build.changes)) == expected


def test_picks_are_charged_so_queues_take_turns() -> None:
    """Within one call every pick counts as usage: two equal queues alternate."""
    state = state_of(
        [queue("a"), queue("b")],
        Build().app("A", "root.a").app("B", "root.b").ask("A", "x", 1000, count=3).ask("B", "y", 1000, count=3).changes,
    )
    picked = [ask.name for ask in find_ask_candidates(state, 6)]
    assert sorted(picked) == ["x", "x", "x", "y", "y", "y"]
    assert all(picked[i] != picked[i + 1] for i in range(5)), picked


# ---------------------------------------------------------------------- apps and asks inside a queue


@pytest.mark.parametrize(
    ("policy", "build", "expected"),
    [
        (
            "fifo",
            Build().app("A1", "root.a").app("A2", "root.a", priority=9).ask("A2", "y", 10, 2).ask("A1", "x", 10, 2),
            ["x", "x", "y", "y"],  # by submission, app priority ignored
        ),
        (
            "priority",
            Build().app("A1", "root.a").app("A2", "root.a", priority=9).ask("A1", "x", 10, 2).ask("A2", "y", 10, 2),
            ["y", "y", "x", "x"],
        ),
        (
            "priority",  # equal priorities fall back to submission order
            Build()
            .app("A1", "root.a", priority=3)
            .app("A2", "root.a", priority=3)
            .ask("A2", "y", 10)
            .ask("A1", "x", 10),
            ["x", "y"],
        ),
        (
            "fair",
            Build().app("A1", "root.a").app("A2", "root.a").ask("A1", "x", 10, 3).ask("A2", "y", 10, 3),
            ["x", "y", "x", "y", "x", "y"],  # picks count as usage: apps alternate
        ),
        (
            "fair",
            Build()
            .app("A1", "root.a")
            .app("A2", "root.a")
            .used("A1", 5_000)
            .ask("A1", "x", 1000, 2)
            .ask("A2", "y", 1000, 3),
            ["y", "y", "y", "x", "x"],  # A1 already holds more than A2 will get
        ),
    ],
)
def test_app_sort_policies(policy: str, build: Build, expected: list[str]) -> None:
    state = state_of([queue("a", application_sort_policy=policy)], build.changes)
    assert [ask.name for ask in find_ask_candidates(state, 10)] == expected


def test_asks_by_priority_then_age() -> None:
    build = (
        Build()
        .app("A", "root.a")
        .ask("A", "old-low", 10, priority=0)
        .ask("A", "old-high", 10, priority=5)
        .ask("A", "new-high", 10, priority=5, count=2)
        .ask("A", "negative", 10, priority=-3)
    )
    state = state_of([queue("a")], build.changes)
    assert [ask.name for ask in find_ask_candidates(state, 10)] == [
        "old-high",
        "new-high",
        "new-high",
        "old-low",
        "negative",
    ]


def test_one_entry_per_container_and_at_most_n() -> None:
    state = state_of([queue("a")], Build().app("A", "root.a").ask("A", "x", 10, count=5).changes)
    assert [a.name for a in find_ask_candidates(state, 3)] == ["x"] * 3
    assert len(find_ask_candidates(state, 100)) == 5
    assert find_ask_candidates(state, 0) == []
    assert find_ask_candidates(PartitionState("default"), 5) == []  # no config yet


def test_filters_skip_asks_apps_and_queues() -> None:
    build = Build().app("A", "root.a").app("B", "root.b").ask("A", "x", 10).ask("A", "z", 10).ask("B", "y", 10)
    state = state_of([queue("a"), queue("b")], build.changes)

    def names(flt: CandidateFilter) -> list[str]:
        return sorted(a.name for a in find_ask_candidates(state, 10, filters=flt))

    assert names(CandidateFilter(skip={("A", "x")})) == ["y", "z"]
    assert names(CandidateFilter(queue=lambda q: q.path != "root.b")) == ["x", "z"]
    assert names(CandidateFilter(app=lambda a: a.name == "B")) == ["y"]
    assert names(CandidateFilter(ask=lambda a: a.name != "z")) == ["x", "y"]


# ---------------------------------------------------------------------- headroom


@pytest.mark.parametrize(
    ("leaves", "build", "expected"),
    [
        (
            [queue("a", maximum={"memory": 3000})],
            Build().app("A", "root.a").ask("A", "x", 1000, count=5),
            ["x", "x", "x"],
        ),
        (
            [queue("a", maximum={"memory": 3000})],
            Build().app("A", "root.a").used("A", 2500).ask("A", "x", 1000, count=5),
            [],
        ),
        (
            [queue("a", maximum={"memory": 3000})],  # a big ask blocked by max does not block a small one
            Build().app("A", "root.a").ask("A", "big", 5000, priority=9).ask("A", "small", 1000, count=2),
            ["small", "small"],
        ),
        (
            # the parent's max binds its children together
            [queue("p", queue("x", maximum={"memory": 3000}), queue("y"), maximum={"memory": 4000})],
            Build().app("X", "root.p.x").app("Y", "root.p.y").ask("X", "x", 1000, count=5).ask("Y", "y", 1000, count=5),
            ["x", "x", "y", "y"],
        ),
        (
            [queue("a", maximum={"memory": 100_000, "gpu": 0})],  # a zero max forbids that resource
            Build().app("A", "root.a").ask("A", "x", 10).ask("A", "g", 10, gpu=1),
            ["x"],
        ),
    ],
)
def test_headroom_limits_candidates(leaves: list[dict[str, Any]], build: Build, expected: list[str]) -> None:
    state = state_of(leaves, build.changes)
    assert sorted(a.name for a in find_ask_candidates(state, 10)) == sorted(expected)


# ---------------------------------------------------------------------- placement


def _nodes(*caps: tuple[str, int, int], schedulable: tuple[str, ...] = ()) -> list[p.ChangeMsg]:
    return [
        p.NodeSet(node=name, capacity={"memory": memory, "vcore": vcore}, schedulable=name not in schedulable)
        for name, memory, vcore in caps
    ]


NODES = [("n1", 8192, 8000), ("n2", 4096, 8000), ("n3", 16384, 8000), ("n4", 6144, 100)]


def _placement_state(node_sort: str, asks: list[p.AskSet], unschedulable: tuple[str, ...] = ()) -> PartitionState:
    return state_of(
        [queue("a")],
        [*_nodes(*NODES, schedulable=unschedulable), p.AppSet(app="A", queue="root.a", submit_seq=1), *asks],
        node_sort=node_sort,
    )


def _ask(name: str, memory: int, count: int = 1, vcore: int = 1000, node: str | None = None) -> p.AskSet:
    return p.AskSet(
        app="A", ask=name, resource={"memory": memory, "vcore": vcore}, count=count, seq=1, required_node=node
    )


@pytest.mark.parametrize(
    ("node_sort", "asks", "unschedulable", "expected"),
    [
        # binpacking: best fit by free memory (the least free room that holds the ask)
        ("binpacking", [_ask("x", 4096)], (), ["n2"]),
        ("binpacking", [_ask("x", 5000)], (), ["n1"]),  # n4 has the memory but not the vcore
        ("binpacking", [_ask("x", 5000, vcore=50)], (), ["n4"]),
        ("binpacking", [_ask("x", 4096, count=4)], (), ["n2", "n1", "n1", "n3"]),
        ("binpacking", [_ask("x", 4096)], ("n2",), ["n1"]),  # unschedulable nodes are skipped
        ("binpacking", [_ask("x", 20000)], (), []),
        # fair: the most free room first
        ("fair", [_ask("x", 4096)], (), ["n3"]),
        ("fair", [_ask("x", 4096, count=4)], (), ["n3", "n3", "n1", "n3"]),
        ("fair", [_ask("x", 4096)], ("n3",), ["n1"]),
        # a required node, whatever the policy
        ("binpacking", [_ask("x", 4096, node="n3")], (), ["n3"]),
        ("fair", [_ask("x", 4096, count=3, node="n2")], (), ["n2"]),  # it fills up, no spill elsewhere
        ("binpacking", [_ask("x", 4096, node="gone")], (), []),
        ("binpacking", [_ask("x", 4096, node="n3")], ("n3",), []),
    ],
)
def test_placement(node_sort: str, asks: list[p.AskSet], unschedulable: tuple[str, ...], expected: list[str]) -> None:
    state = _placement_state(node_sort, asks, unschedulable)
    result = try_allocate(state, find_ask_candidates(state, 10))
    assert [node.name for _, node in result.placed] == expected
    assert bool(result.failed) == (len(expected) < sum(a.count for a in asks))


def test_try_allocate_holds_the_room_it_places() -> None:
    state = _placement_state("binpacking", [_ask("x", 4096, count=2)])
    result = try_allocate(state, find_ask_candidates(state, 10))
    assert len(result.placed) == 2
    ask = state.ask(("A", "x"))
    assert ask is not None
    assert (ask.allocating, ask.pending) == (2, 0)
    assert state.queues["root.a"].allocating == {"memory": 8192, "vcore": 2000}
    assert state.queues["root"].allocating == {"memory": 8192, "vcore": 2000}
    held = {node.name: node.allocating for _, node in result.placed}
    assert held == {"n2": {"memory": 4096, "vcore": 1000}, "n1": {"memory": 4096, "vcore": 1000}}
    # nothing committed, and nothing more to propose for this ask
    assert state.allocations == {}
    assert find_ask_candidates(state, 10) == []
    assert consistency_problems(state) == []


def test_try_allocate_without_hold_leaves_counters_alone() -> None:
    state = _placement_state("binpacking", [_ask("x", 4096, count=2)])
    result = try_allocate(state, find_ask_candidates(state, 10), hold=False)
    assert [n.name for _, n in result.placed] == ["n2", "n2"]  # the same best fit, twice: nothing held
    assert all(not any(n.allocating.values()) for n in state.nodes.values())


def test_an_ask_that_fails_once_is_not_tried_again_in_the_call() -> None:
    state = _placement_state("binpacking", [_ask("x", 20000, count=3)])
    result = try_allocate(state, find_ask_candidates(state, 10))
    assert result.placed == []
    assert result.failed == {("A", "x")}


def test_preemption_mode_needs_a_victim_placer() -> None:
    state = _placement_state("binpacking", [_ask("x", 1)])
    with pytest.raises(ValueError, match="placer"):
        try_allocate(state, find_ask_candidates(state, 1), preemption=True)
    result = try_allocate(state, find_ask_candidates(state, 1), preemption=True, placer=FreeRoomPlacer())
    assert len(result.placed) == 1


# ---------------------------------------------------------------------- the node index


@pytest.mark.parametrize(
    ("policy", "need", "expected"),
    [
        ("binpacking", 0, ["c", "a", "b", "d"]),
        ("binpacking", 300, ["b", "d"]),
        ("binpacking", 1000, ["d"]),
        ("binpacking", 1001, []),
        ("fair", 0, ["d", "b", "a", "c"]),
        ("fair", 300, ["d", "b"]),
        ("fair", 1001, []),
    ],
)
def test_node_index_order(policy: str, need: int, expected: list[str]) -> None:
    index = NodeIndex(policy)
    for name, free in (("a", 200), ("b", 500), ("c", 100), ("d", 1000)):
        index.update(name, free)
    assert list(index.candidates({"memory": need})) == expected


def test_node_index_moves_and_discards() -> None:
    index = NodeIndex("binpacking")
    index.update("a", 10)
    index.update("b", 20)
    index.update("a", 30)
    assert index.ordered() == ["b", "a"]
    index.discard("b")
    index.discard("ghost")
    assert index.ordered() == ["a"] and len(index) == 1 and "a" in index and "b" not in index
    assert list(index.candidates({"memory": 40})) == []  # binpacking: nothing holds 40
    with pytest.raises(ValueError, match="unknown node sort policy"):
        NodeIndex("random")


# ---------------------------------------------------------------------- many waiting apps


@pytest.mark.parametrize("policy", ["fifo", "priority"])
@pytest.mark.parametrize("waiting", [50, 2_000])
def test_a_call_reads_only_the_apps_it_reaches_however_many_wait(policy: str, waiting: int) -> None:
    """With a fixed app order a call touches the apps it picks from, not every waiting one: the
    filter sees five apps for five picks whether 50 or 2,000 wait."""
    build = Build()
    for i in range(waiting):
        build.app(f"A{i}", "root.a", priority=i % 3).ask(f"A{i}", "x", 10)
    state = state_of([queue("a", application_sort_policy=policy)], build.changes)
    seen: list[str] = []

    def eligible(app: App) -> bool:
        seen.append(app.name)
        return True

    picked = find_ask_candidates(state, 5, filters=CandidateFilter(app=eligible))
    first = sorted(state.queues["root.a"].waiting.values(), key=STATIC_APP_ORDER[policy])[:5]
    assert [a.app.name for a in picked] == [app.name for app in first]
    assert seen == [app.name for app in first]


def test_the_waiting_order_follows_asks_apps_and_a_new_sort_policy() -> None:
    """Apps enter the order with their first pending ask and leave with their last (placed or gone),
    or with the app; a configuration that changes the sort policy orders them its own way."""
    build = Build()
    for i, prio in enumerate([0, 5, 1, 5]):
        build.app(f"A{i}", "root.a", priority=prio).ask(f"A{i}", "x", 10)
    build.app("idle", "root.a", priority=9)
    state = state_of([queue("a", application_sort_policy="priority")], build.changes)
    leaf = state.queues["root.a"]
    assert leaf.waiting_order is not None
    assert [app.name for app in leaf.waiting_order] == ["A1", "A3", "A2", "A0"]
    state.apply_all(
        [
            p.AskGone(app="A3", ask="x"),
            p.AllocationSet(allocation="c1", app="A1", ask="x", node="big", resource={"memory": 10}),
            p.AskSet(app="idle", ask="y", resource={"memory": 10}, count=1, seq=100),
            p.AppGone(app="A0"),
        ]
    )
    assert [app.name for app in leaf.waiting_order] == ["idle", "A2"]
    assert consistency_problems(state) == []
    fifo = config_of(queue("a", application_sort_policy="fifo"))
    state.apply(p.ConfigSet(config=partition_to_raw(fifo)))
    leaf = state.queues["root.a"]
    assert leaf.waiting_order is not None
    assert [app.name for app in leaf.waiting_order] == ["A2", "idle"]
    fair = config_of(queue("a", application_sort_policy="fair"))
    state.apply(p.ConfigSet(config=partition_to_raw(fair)))
    assert state.queues["root.a"].waiting_order is None
    assert [a.app.name for a in find_ask_candidates(state, 5)] == ["A2", "idle"]


class _CountedNodes(dict[str, Node]):
    """The state's nodes, counting every lookup by name (what a placement examines)."""

    looked = 0

    def __getitem__(self, name: str) -> Node:
        _CountedNodes.looked += 1
        return super().__getitem__(name)


@pytest.mark.parametrize("policy", ["binpacking", "fair"])
@pytest.mark.parametrize("full", [20, 3_000])
def test_a_placement_examines_the_nodes_with_room_not_the_full_ones(policy: str, full: int) -> None:
    """Nodes with too little free memory are never looked at: placing on the three nodes with room costs
    the same lookups whether 20 or 3,000 nodes are full."""
    changes: list[p.ChangeMsg] = [p.AppSet(app="A", queue="root.a", submit_seq=1), p.AppSet(app="B", queue="root.a")]
    for i in range(full):
        changes.append(p.NodeSet(node=f"full{i:05d}", capacity={"memory": 8192, "vcore": 8000}))
    for i in range(full):
        used = {"memory": 8192 - 512, "vcore": 1000}  # a little memory left, less than an ask
        changes.append(p.AskSet(app="B", ask=f"b{i}", resource=used, count=1, seq=i + 1))
        changes.append(p.AllocationSet(allocation=f"b{i}", app="B", ask=f"b{i}", node=f"full{i:05d}", resource=used))
    for i in range(3):
        changes.append(p.NodeSet(node=f"room{i}", capacity={"memory": 8192, "vcore": 8000}))
    changes.append(p.AskSet(app="A", ask="x", resource={"memory": 4096, "vcore": 1000}, count=6, seq=full + 1))
    state = state_of([queue("a")], changes, node_sort=policy)
    state.nodes = _CountedNodes(state.nodes)
    _CountedNodes.looked = 0
    result = try_allocate(state, find_ask_candidates(state, 6))
    assert sorted(node.name for _, node in result.placed) == ["room0", "room0", "room1", "room1", "room2", "room2"]
    assert _CountedNodes.looked <= 6 * 4  # each placement looks at the nodes with room only


def test_queues_are_keyed_only_where_several_with_pending_asks_compete() -> None:
    leaves = [queue("a", queue("x"), queue("y")), queue("b")]
    build = Build().app("X", "root.a.x").app("Y", "root.a.y").app("B", "root.b")
    state = state_of(leaves, build.ask("X", "x", 100, count=3).changes)
    keyed: list[str] = []

    def counting(q: Any, usage: Any) -> tuple[object, ...]:
        keyed.append(q.path)
        return (q.path,)

    # Only a.x waits: each level has one child with pending asks, so nothing is ordered.
    assert [ask.name for ask in find_ask_candidates(state, 3, queue_key=counting)] == ["x"] * 3
    assert keyed == []
    # a.x and a.y wait under a: a's two children are keyed as they are built and as each is picked;
    # the root's only child (a) still is not.
    state = state_of(leaves, build.ask("Y", "y", 100, count=2).changes)
    picked = find_ask_candidates(state, 5, queue_key=counting)
    assert sorted(ask.name for ask in picked) == ["x", "x", "x", "y", "y"]
    assert "root.a" not in keyed and "root.b" not in keyed
    assert len(keyed) == 2 + 3  # built, then re-keyed after each pick while both still wait
