"""The victim search over every node, costing only the nodes whose bounds could beat the best set.

The state keeps per node and leaf queue bounds over the guaranteed containers there
(:mod:`sniper.core.container_bounds`); the search lists a node's candidates only when it costs a set
there. These tests hold the bounds to the containers they bound, the search to the answer of the search
that lists every node first (the same placements, victims and costs), and the work to the nodes that
could win: it does not grow with nodes that cannot.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core.preemption import costs
from sniper.core.preemption.placement import VictimPlacer, answer_placement_request
from sniper.core.state import PartitionState
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import queue
from tests.preemption_support import PreemptHarness, preemption_raw

PLENTY = {"memory": 10**6, "vcore": 10**6}


def three_queues() -> dict[str, Any]:
    """a (the beneficiary), b (over its share: the victims), c (holds its share: never a victim here)."""
    return preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 100}),
        queue("c", guaranteed={"memory": 100}),
    )


def request(**fields: Any) -> p.PlacementRequest:
    return p.PlacementRequest(
        id="r1",
        policy="sniper",
        view_seq=0,
        budget=PLENTY,
        quotas={"root.b": PLENTY},
        beneficiaries=["root.a"],
        **fields,
    )


def assert_bounds_hold(state: PartitionState) -> None:
    for node in state.nodes.values():
        running: dict[str, list[tuple[dict[str, int], float]]] = {}
        for aid in node.allocations:
            alloc = state.allocations[aid]
            if not alloc.opportunistic:
                running.setdefault(alloc.queue.path, []).append((alloc.resource, alloc.start))
        assert set(node.container_bounds) == set(running), "an entry exactly for each queue running there"
        for path, containers in running.items():
            bounds = node.container_bounds[path]
            assert bounds.count == len(containers)
            assert bounds.latest_start == max(start for _, start in containers)
            for resource, _ in containers:
                assert all(v <= bounds.largest.get(k, 0) for k, v in resource.items())


# One step: a container of b or c started (node, memory, vcore) one second after the last, or the
# running container at an index (modulo how many run) released.
STEPS = st.lists(
    st.tuples(st.sampled_from(["b", "c", "release"]), st.integers(0, 50), st.integers(1, 40), st.integers(0, 3)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_container_bounds_follow_every_start_and_release_on_cache_and_replica(
    steps: list[tuple[str, int, int, int]],
) -> None:
    h = PreemptHarness(three_queues())
    h.nodes("n1", "n2", memory=1000, vcore=100)
    running: list[str] = []
    t = 0.0
    for kind, index, memory, vcore in steps:
        if kind != "release":
            t += 1.0
            node = f"n{index % 2 + 1}"
            running.append(h.run(f"{kind}1", memory, node, at=t, vcore=vcore or None, queue_path=f"root.{kind}"))
        elif running:
            h.release(running.pop(index % len(running)))
        assert_bounds_hold(h.cache.state)
        assert_bounds_hold(h.allocator.state)


def test_the_newest_container_leaving_brings_the_bounds_back_to_those_still_running() -> None:
    h = PreemptHarness(three_queues())
    h.nodes("n1", memory=1000)
    old = h.run("b1", 10, "n1", at=1.0, queue_path="root.b")
    big = h.run("b1", 60, "n1", at=2.0, queue_path="root.b")
    newest = h.run("b1", 20, "n1", at=3.0, queue_path="root.b")
    bounds = h.allocator.state.nodes["n1"].container_bounds["root.b"]
    assert (bounds.count, bounds.largest, bounds.latest_start) == (3, {"memory": 60}, 3.0)
    h.release(big)  # not the newest: the largest stays a bound, the rest exact
    bounds = h.allocator.state.nodes["n1"].container_bounds["root.b"]
    assert (bounds.count, bounds.largest, bounds.latest_start) == (2, {"memory": 60}, 3.0)
    h.release(newest)  # the newest: counted anew from the one still there
    bounds = h.allocator.state.nodes["n1"].container_bounds["root.b"]
    assert (bounds.count, bounds.largest, bounds.latest_start) == (1, {"memory": 10}, 1.0)
    h.release(old)
    assert "root.b" not in h.allocator.state.nodes["n1"].container_bounds


def test_containers_of_one_ask_and_a_larger_one_after_them_are_all_bounded() -> None:
    h = PreemptHarness(three_queues())
    h.nodes("n1", memory=1000, vcore=100)
    h.app("b1", "root.b")
    h.feed(f.AskAdded(app="b1", ask="many", resource={"memory": 10, "vcore": 2}, count=3))
    for _ in range(3):
        h.cache.allocate("b1", "many", "n1")
    h.pump()
    bounds = h.allocator.state.nodes["n1"].container_bounds["root.b"]
    assert (bounds.count, bounds.largest) == (3, {"memory": 10, "vcore": 2})
    h.tick(5.0)
    big = h.run("b1", 30, "n1", vcore=1)
    assert (bounds.count, bounds.largest, bounds.latest_start) == (4, {"memory": 30, "vcore": 2}, 5.0)
    h.release(big)
    bounds = h.allocator.state.nodes["n1"].container_bounds["root.b"]
    assert (bounds.count, bounds.largest, bounds.latest_start) == (3, {"memory": 10, "vcore": 2}, 0.0)
    assert_bounds_hold(h.cache.state)


# ---------------------------------------------------------------------- the same answer as listing every node

NODE_CONTENTS = st.lists(  # per node: (queue, memory, vcore, start) of each container, at most ~100 memory
    st.lists(
        st.tuples(
            st.sampled_from(["root.b", "root.b", "root.c"]),
            st.sampled_from([10, 20, 25, 40, 50]),
            st.integers(0, 4),
            st.integers(0, 90),
        ),
        max_size=5,
    ),
    min_size=1,
    max_size=8,
)


def scenario(
    nodes: list[list[tuple[str, int, int, int]]], releases: list[int], asks: list[tuple[int, int]], opportunistic: bool
) -> PreemptHarness:
    h = PreemptHarness(three_queues())
    names = [f"n{i}" for i in range(len(nodes))]
    h.nodes(*names, memory=100, vcore=8)
    runs = sorted(
        (start, name, path, memory, vcore)
        for name, contents in zip(names, nodes, strict=True)
        for path, memory, vcore, start in contents
    )
    started: list[str] = []
    for start, name, path, memory, vcore in runs:
        node = h.cache.state.nodes[name]
        if node.allocated.get("memory", 0) + memory > 100 or node.allocated.get("vcore", 0) + vcore > 8:
            continue
        app = f"{path.rsplit('.', 1)[-1]}1"
        started.append(h.run(app, memory, name, at=float(start), vcore=vcore or None, queue_path=path))
    for i in releases:
        if started:
            h.release(started.pop(i % len(started)))
    if opportunistic:  # a free container, first on its node, on the first node with room for it
        h.app("o1", "root.c")
        h.feed(f.AskAdded(app="o1", ask="spare", resource={"memory": 5}, execution_type="opportunistic"))
        room = [n for n in names if h.cache.state.nodes[n].allocated.get("memory", 0) <= 95]
        if room:
            h.tick(95.0)
            h.cache.allocate("o1", "spare", room[0])
            h.pump()
    h.app("a1", "root.a")
    for i, (memory, vcore) in enumerate(asks):
        h.ask("a1", f"ask{i}", memory, vcore=vcore or None)
    h.starve()
    h.tick(100.0)
    return h


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=NODE_CONTENTS,
    releases=st.lists(st.integers(0, 40), max_size=4),
    asks=st.lists(st.tuples(st.sampled_from([10, 30, 50, 70, 100]), st.integers(0, 6)), min_size=1, max_size=3),
    opportunistic=st.booleans(),
    grace=st.sampled_from([0.0, 15.0]),
)
def test_the_search_that_lists_nodes_on_first_use_answers_as_the_one_that_lists_every_node(
    nodes: list[list[tuple[str, int, int, int]]],
    releases: list[int],
    asks: list[tuple[int, int]],
    opportunistic: bool,
    grace: float,
) -> None:
    lazy = answer_placement_request(scenario(nodes, releases, asks, opportunistic).allocator, request(grace=grace))
    with patch.dict(costs.VICTIM_COST_FLOORS, clear=True):  # no floor: every node listed up front
        eager_h = scenario(nodes, releases, asks, opportunistic)
        eager = answer_placement_request(eager_h.allocator, request(grace=grace))
    assert [(x.app, x.ask, x.node, x.victims, x.cost) for x in lazy.placements] == [
        (x.app, x.ask, x.node, x.victims, x.cost) for x in eager.placements
    ]
    assert lazy.unplaceable == eager.unplaceable


# ---------------------------------------------------------------------- work per ask


def full_nodes(count: int, *, c_nodes: int = 0) -> PreemptHarness:
    """``count`` nodes full of b's containers, all started at 1 (equal costs), then ``c_nodes`` nodes full
    of c's, started later (cheaper, but c is no victim queue); a asks for one node's worth of two."""
    h = PreemptHarness(three_queues())
    names = [f"n{i:04d}" for i in range(count)]
    c_names = [f"m{i:04d}" for i in range(c_nodes)]
    h.nodes(*names, *c_names, memory=100)
    h.tick(1.0)
    for name in names:
        h.run("b1", 50, name, queue_path="root.b")
        h.run("b1", 50, name)
    h.tick(50.0)
    for name in c_names:
        h.run("c1", 50, name, queue_path="root.c")
        h.run("c1", 50, name)
    h.app("a1", "root.a")
    h.ask("a1", "big", 100)
    h.starve()
    h.tick(100.0)
    return h


def listed_for_one_ask(h: PreemptHarness, **fields: Any) -> tuple[str | None, int]:
    state = h.allocator.state
    placer = VictimPlacer(state, request(**fields))
    node = placer.place(state, state.apps["a1"].asks["big"])
    return (None if node is None else node.name), len(placer.by_node)


@pytest.mark.parametrize("count", [4, 40, 400])
def test_the_nodes_listed_for_an_ask_do_not_grow_with_nodes_no_cheaper_set_is_on(count: int) -> None:
    assert listed_for_one_ask(full_nodes(count)) == ("n0000", 1)  # equal sets everywhere: the first by name


def test_nodes_holding_no_candidate_are_never_listed_though_their_containers_are_cheaper() -> None:
    assert listed_for_one_ask(full_nodes(5, c_nodes=200)) == ("n0000", 1)


def test_a_cheaper_node_is_found_behind_every_node_of_equal_bounds() -> None:
    h = full_nodes(300)
    name = "n9999"
    h.nodes(name, memory=100)
    h.fill("b1", "root.b", name, [50, 50], start=99.0)  # the cheapest, last by name
    assert listed_for_one_ask(h) == (name, 1)


@pytest.mark.parametrize(("change", "winner"), [("cordoned", "n0000"), ("shrunk", "n0000"), ("grown", "n9999")])
def test_the_cheapest_node_cordoned_or_resized_after_its_containers_started_is_bounded_as_it_is_now(
    change: str, winner: str
) -> None:
    h = full_nodes(30)
    name = "n9999"
    h.nodes(name, memory=100)
    h.run("b1", 50, name)
    h.run("b1", 50, name)  # the cheapest node: started at 50, not at 1
    if change == "cordoned":
        h.feed(f.NodeUpdated(node=name, schedulable=False))
    elif change == "shrunk":  # its containers hold more than it has: still no room for more
        h.feed(f.NodeUpdated(node=name, capacity={"memory": 60}), allow_rejected=True)
    else:  # room for the ask with one victim gone
        h.feed(f.NodeUpdated(node=name, capacity={"memory": 150}))
    node, _ = listed_for_one_ask(h)
    assert node == winner
    with patch.dict(costs.VICTIM_COST_FLOORS, clear=True):
        assert listed_for_one_ask(h)[0] == winner  # every schedulable node listed first: the same answer


@pytest.mark.parametrize("fields", [{"max_candidate_nodes": 3}, {"victim_cost": "priority"}])
def test_a_cap_or_a_cost_without_a_floor_lists_every_node_up_front(fields: dict[str, Any]) -> None:
    node, listed = listed_for_one_ask(full_nodes(40), **fields)
    assert node == "n0000" and listed == 40
