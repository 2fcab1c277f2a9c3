"""Placement constraints (architecture: invariant 13, docs/feed.md#placement-constraints): allocation tags,
``in``, ``not_in`` and ``cardinality`` per node or node-label scope, through normal allocation, gangs,
the cache's checks, preemption's victim sets and reservations, a node lost mid-run, the independent
checker and the bundled ``constraints`` scenario.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from sniper.core import constraints
from sniper.core.cache import state_changes
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.codec import BadInput, decode_feed_lines
from sniper.simulator.model import ClusterModel
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.core_support import Harness, config_of, invariant_problems, queue, rejected_reasons
from tests.preemption_support import PreemptHarness, preemption_raw, two_queues

C = f.PlacementConstraint


def tagged(
    app: str,
    ask: str,
    memory: int,
    count: int = 1,
    *,
    tags: Sequence[str] = (),
    constraints: Sequence[C] = (),
    **kw: Any,
) -> f.AskAdded:
    return f.AskAdded(
        app=app,
        ask=ask,
        resource={"memory": memory},
        count=count,
        tags=tuple(tags),
        constraints=tuple(constraints),
        **kw,
    )


def cluster(*nodes: tuple[str, dict[str, str]], memory: int = 100, apps: tuple[str, ...] = ("a1",)) -> Harness:
    h = Harness(config_of(queue("a")))
    h.feed(*(f.NodeAdded(node=n, capacity={"memory": memory}, labels=labels) for n, labels in nodes))
    h.feed(*(f.AppAdded(app=a, queue="root.a") for a in apps))
    return h


def start(h: Harness, app: str, ask: str, node: str, memory: int = 10, tags: tuple[str, ...] = ()) -> str:
    """Run one container of a fresh tagged ask on ``node`` (committed directly, as a set-up)."""
    h.feed(tagged(app, ask, memory, tags=list(tags)))
    h.cache.allocate(app, ask, node)
    h.pump()
    return h.allocated()[-1].allocation


def nodes_of(h: Harness, ask: str) -> list[str]:
    return [node for a, node in h.placements() if a == ask]


def placement_violations(model: ClusterModel) -> list[str]:
    return [v.reason for v in model.violations if v.invariant == 13]


def recount(state: PartitionState) -> tuple[dict[str, constraints.Counts], dict[tuple[str, str], constraints.Counts]]:
    """The tag index recomputed from the allocations and reservations (nothing in flight)."""
    by_node: dict[str, constraints.Counts] = {}
    by_group: dict[tuple[str, str], constraints.Counts] = {}
    held = [(a.app, a.node, a.tags, False) for a in state.allocations.values()]
    held += [(r.app, r.node, r.tags, True) for r in state.reservations.values()]
    for app, name, tags, promised in held:
        node = state.nodes[name]
        scopes = [by_node.setdefault(name, {})] + [by_group.setdefault(i, {}) for i in node.labels.items()]
        for tag in tags:
            for key in ((constraints.ALL, tag, promised), (app, tag, promised)):
                for counts in scopes:
                    counts[key] = counts.get(key, 0) + 1
    return by_node, by_group


def assert_index_is_the_recount(state: PartitionState) -> None:
    by_node, by_group = recount(state)
    assert {k: v for k, v in state.tags.by_node.items() if v} == {k: v for k, v in by_node.items() if v}
    assert {k: v for k, v in state.tags.by_group.items() if v} == {k: v for k, v in by_group.items() if v}


RACKS = (("n1", {"rack": "r0"}), ("n2", {"rack": "r0"}), ("n3", {"rack": "r1"}), ("n4", {"rack": "r1"}))


# ---------------------------------------------------------------------- the ask: validation


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ([C(op="cardinality", tags=["x"], min=3, max=1)], "min 3 is above max 1"),
        ([C(op="in", tags=[])], "names no tags"),
        ([C(op="not_in", tags=["x"], max=2)], "min and max belong to cardinality only"),
        ([C(op="in", tags=["db"]), C(op="not_in", tags=["db"])], "contradicts an earlier one on db"),
        ([C(op="cardinality", tags=["x"], min=2), C(op="cardinality", tags=["x"], max=1)], "contradicts"),
        ([C(op="cardinality", tags=["w"], max=0)], "max 0 on w, a tag the ask's own containers carry"),
        ([C(op="cardinality", tags=["db", "w"], max=0, namespace="self")], "max 0 on w"),
        ([C(op="not_in", tags=["w"]), C(op="cardinality", tags=["w"], min=2)], "contradicts an earlier one on w"),
        ([C(op="in", tags=["w"]), C(op="cardinality", tags=["w"], max=1)], "contradicts an earlier one on w"),
    ],
)
def test_constraints_no_cluster_can_satisfy_are_rejected_with_the_reason(bad: list[C], why: str) -> None:
    h = cluster(*RACKS)
    out = h.feed(tagged("a1", "w", 10, tags=["w"], constraints=bad))
    [reason] = rejected_reasons(out)
    assert reason.startswith("ask a1/w: constraint") and why in reason
    assert [x.code for x in out if isinstance(x, d.Rejected)] == ["bad_constraint"]
    assert h.cache.state.ask(("a1", "w")) is None


def test_in_and_not_in_on_the_same_tags_in_different_scopes_or_namespaces_are_accepted() -> None:
    h = cluster(*RACKS)
    ok = [C(scope="rack", op="in", tags=["db"]), C(op="not_in", tags=["db"]), C(op="in", tags=["x"], namespace="self")]
    out = h.feed(tagged("a1", "w", 10, constraints=[*ok, C(op="not_in", tags=["x"])]))
    assert not rejected_reasons(out)


@pytest.mark.parametrize(
    "ok",
    [
        [C(op="cardinality", tags=["x"], max=0)],  # a tag the ask does not carry: none of it there
        [C(op="cardinality", tags=["w"], max=1), C(op="not_in", tags=["w"])],  # both: alone with it
        [C(op="cardinality", tags=["w"], min=2), C(op="in", tags=["w"])],  # both: another one there
        [C(op="cardinality", tags=["w"], min=1, max=1)],
    ],
)
def test_bounds_that_meet_once_read_as_the_count_after_placement_are_accepted(ok: list[C]) -> None:
    h = cluster(*RACKS)
    assert not rejected_reasons(h.feed(tagged("a1", "w", 10, tags=["w"], constraints=ok)))


def test_an_opportunistic_ask_with_constraints_is_rejected_but_it_may_carry_tags() -> None:
    h = cluster(*RACKS)
    out = h.feed(tagged("a1", "o", 10, execution_type="opportunistic", constraints=[C(op="not_in", tags=["x"])]))
    assert rejected_reasons(out) == ["ask a1/o: an opportunistic ask takes no placement constraints"]
    assert not rejected_reasons(h.feed(tagged("a1", "o2", 10, execution_type="opportunistic", tags=["x"])))


def test_an_unknown_op_or_namespace_on_the_feed_is_reported_with_its_line_not_raised() -> None:
    line = (
        b'{"type":"ask_added","app":"a1","ask":"w","resource":{"memory":1},"constraints":[{"op":"near","tags":["x"]}]}'
    )
    [bad] = list(decode_feed_lines([line], source="feed"))
    assert isinstance(bad, BadInput) and "op" in bad.reason
    [bad] = list(decode_feed_lines([line.replace(b'"near"', b'"in","namespace":"other"')], source="feed"))
    assert isinstance(bad, BadInput) and "namespace" in bad.reason
    [ok] = list(decode_feed_lines([line.replace(b'"near"', b'"in"')], source="feed"))
    assert isinstance(ok, f.AskAdded) and ok.constraints == (C(op="in", tags=["x"]),)


def test_the_fields_are_optional_and_an_old_ask_decodes_without_them() -> None:
    old = msgspec.json.decode(b'{"type":"ask_added","app":"a","ask":"b","resource":{}}', type=f.Feed)
    assert isinstance(old, f.AskAdded) and old.tags == () and old.constraints == ()
    assert C() == C(scope="node", op="in", tags=[], min=0, max=None, namespace="all")


# ---------------------------------------------------------------------- normal allocation


def test_anti_affinity_spreads_one_cycles_replicas_over_distinct_nodes() -> None:
    h = cluster(*RACKS)
    h.feed(tagged("a1", "web", 10, count=6, tags=["web"], constraints=[C(op="not_in", tags=["web"])]))
    proposal = h.propose()  # one cycle: its own containers in flight count each other
    assert proposal is not None and sorted(pl.node for pl in proposal.placements) == ["n1", "n2", "n3", "n4"]
    h.settle()
    assert sorted(nodes_of(h, "web")) == ["n1", "n2", "n3", "n4"]
    assert h.cache.state.ask(("a1", "web")).pending == 2  # type: ignore[union-attr]
    assert not h.model.violations and not invariant_problems(h.cache.state)
    assert_index_is_the_recount(h.cache.state)


def test_cardinality_max_1_on_the_asks_own_tag_places_one_per_node() -> None:
    h = cluster(("n1", {}), ("n2", {}), ("n3", {}))
    h.feed(tagged("a1", "svc", 10, count=5, tags=["svc"], constraints=[C(op="cardinality", tags=["svc"], max=1)]))
    h.settle()
    assert sorted(nodes_of(h, "svc")) == ["n1", "n2", "n3"]  # the container placed counts: one per node
    assert h.cache.state.ask(("a1", "svc")).pending == 2  # type: ignore[union-attr]
    assert not h.model.violations
    assert_index_is_the_recount(h.cache.state)


def test_cardinality_max_2_on_the_asks_own_tag_places_two_per_node() -> None:
    h = cluster(("n1", {}), ("n2", {}))
    h.feed(tagged("a1", "etl", 10, count=7, tags=["etl"], constraints=[C(op="cardinality", tags=["etl"], max=2)]))
    proposal = h.propose()  # one cycle: its containers in flight count each other and the one placed
    assert proposal is not None and sorted(pl.node for pl in proposal.placements) == ["n1", "n1", "n2", "n2"]
    h.settle()
    assert sorted(nodes_of(h, "etl")) == ["n1", "n1", "n2", "n2"]
    assert not h.model.violations


def test_cardinality_counts_the_tags_other_asks_run_with_the_one_placed() -> None:
    h = cluster(("n1", {}), ("n2", {}), apps=("a1", "a2"))
    start(h, "a2", "other", "n1", tags=("etl",))
    h.feed(tagged("a1", "etl", 10, count=3, tags=["etl"], constraints=[C(op="cardinality", tags=["etl"], max=2)]))
    h.settle()
    assert sorted(nodes_of(h, "etl")) == ["n1", "n2", "n2"]  # n1 already ran a2's etl: room for one more
    mine = [C(op="cardinality", tags=["etl"], max=2, namespace="self")]
    h.feed(tagged("a1", "mine", 10, count=2, tags=["etl"], constraints=mine))
    h.settle()
    assert nodes_of(h, "mine") == ["n1"]  # a1's own: n1 runs one of them, n2 two
    assert not h.model.violations


def test_a_container_without_the_tags_is_placed_where_the_count_is_already_at_max() -> None:
    h = cluster(("n1", {}))
    start(h, "a1", "svc", "n1", tags=("svc",))
    capped = [C(op="cardinality", tags=["svc"], max=1)]
    h.feed(tagged("a1", "sidecar", 10, tags=["side"], constraints=capped))
    h.feed(tagged("a1", "svc2", 10, tags=["svc"], constraints=capped))
    h.settle()
    assert nodes_of(h, "sidecar") == ["n1"]  # it adds no svc: the node stays at one
    assert nodes_of(h, "svc2") == []  # a second svc would make two
    assert not h.model.violations


def test_cardinality_min_counts_the_container_placed() -> None:
    h = cluster(("n1", {}), ("n2", {}))
    start(h, "a1", "seed", "n1", tags=("svc",))
    h.feed(tagged("a1", "one", 10, count=2, tags=["svc"], constraints=[C(op="cardinality", tags=["svc"], min=1)]))
    h.settle()
    assert len(nodes_of(h, "one")) == 2  # min 1 on its own tag: the container placed is the one
    h2 = cluster(("n1", {}), ("n2", {}))
    start(h2, "a1", "seed", "n1", tags=("svc",))
    pair = [C(op="cardinality", tags=["svc"], min=2, max=2)]
    h2.feed(tagged("a1", "pair", 10, count=2, tags=["svc"], constraints=pair))
    h2.settle()
    assert nodes_of(h2, "pair") == ["n1"]  # beside the one there (two with it), never alone on n2, never a third
    h3 = cluster(("n1", {}))
    h3.feed(tagged("a1", "near", 10, constraints=[C(op="cardinality", tags=["svc"], min=1)]))
    h3.settle()
    assert nodes_of(h3, "near") == []  # it carries no svc: the one placed adds nothing, it waits
    assert not h.model.violations and not h2.model.violations


def test_in_and_not_in_on_the_asks_own_tag_count_the_other_containers() -> None:
    h = cluster(("n1", {}), ("n2", {}))
    h.feed(tagged("a1", "alone", 10, count=3, tags=["a"], constraints=[C(op="not_in", tags=["a"])]))
    h.feed(tagged("a1", "follow", 10, count=2, tags=["f"], constraints=[C(op="in", tags=["f"])]))
    h.settle()
    assert sorted(nodes_of(h, "alone")) == ["n1", "n2"]  # not_in its own tag: anti-affinity
    assert nodes_of(h, "follow") == []  # in its own tag: another must be there first, none is
    start(h, "a1", "seed", "n2", tags=("f",))
    h.settle()
    assert nodes_of(h, "follow") == ["n2", "n2"]
    assert not h.model.violations


def test_in_a_rack_waits_for_its_target_and_follows_it() -> None:
    h = cluster(*RACKS, ("n5", {}))
    h.feed(tagged("a1", "web", 10, count=2, tags=["web"], constraints=[C(scope="rack", op="in", tags=["db"])]))
    h.settle()
    assert nodes_of(h, "web") == []  # no db anywhere yet: it waits, never rejected
    start(h, "a1", "db", "n3", tags=("db",))
    h.settle()
    assert len(nodes_of(h, "web")) == 2 and set(nodes_of(h, "web")) <= {"n3", "n4"}  # rack r1 only
    assert not placement_violations(h.model)


def test_a_node_without_the_scope_label_never_satisfies_in_and_always_an_upper_bound() -> None:
    h = cluster(("bare", {}))
    start(h, "a1", "db", "bare", tags=("db",))
    h.feed(tagged("a1", "near", 10, constraints=[C(scope="rack", op="in", tags=["db"])]))
    h.feed(tagged("a1", "capped", 10, constraints=[C(scope="rack", op="cardinality", tags=["db"], max=0)]))
    h.feed(tagged("a1", "own", 10, tags=["db"], constraints=[C(scope="rack", op="cardinality", tags=["db"], max=1)]))
    h.feed(tagged("a1", "least", 10, tags=["db"], constraints=[C(scope="rack", op="cardinality", tags=["db"], min=1)]))
    h.settle()
    assert nodes_of(h, "near") == [] and nodes_of(h, "capped") == ["bare"] and nodes_of(h, "own") == ["bare"]
    assert nodes_of(h, "least") == []  # no rack: even the one placed is in no scope that could hold it


def test_a_scope_label_no_node_has_yet_keeps_the_ask_pending_until_a_node_brings_it() -> None:
    h = cluster(*RACKS)
    out = h.feed(tagged("a1", "w", 10, constraints=[C(scope="zone", op="in", tags=["db"])]))
    assert not rejected_reasons(out)
    h.settle()
    assert nodes_of(h, "w") == []
    h.feed(f.NodeAdded(node="z1", capacity={"memory": 100}, labels={"zone": "east"}))
    start(h, "a1", "db", "z1", tags=("db",))
    h.settle()
    assert nodes_of(h, "w") == ["z1"]


def test_namespace_self_counts_only_the_apps_own_containers() -> None:
    h = cluster(("n1", {}), ("n2", {}), apps=("a1", "a2"))
    start(h, "a2", "other-web", "n1", tags=("web",))
    mine = C(op="not_in", tags=["web"], namespace="self")
    anyones = C(op="not_in", tags=["web"])
    h.feed(tagged("a1", "mine", 10, count=2, tags=["web"], constraints=[mine]))
    h.settle()
    assert sorted(nodes_of(h, "mine")) == ["n1", "n2"]  # a2's web does not count for a1's own namespace
    h.feed(tagged("a1", "anyone", 10, constraints=[anyones]))
    h.settle()
    assert nodes_of(h, "anyone") == []  # every node holds someone's web now


def test_a_higher_priority_ask_its_constraints_hold_back_does_not_block_a_lower_one() -> None:
    h = cluster(("n1", {}), ("n2", {}))
    start(h, "a1", "x1", "n1", tags=("x",))
    start(h, "a1", "x2", "n2", tags=("x",))
    h.feed(tagged("a1", "hi", 10, priority=10, constraints=[C(op="not_in", tags=["x"])]))
    h.feed(tagged("a1", "lo", 10, priority=0))
    h.settle()
    assert nodes_of(h, "hi") == [] and len(nodes_of(h, "lo")) == 1
    assert h.allocator.missed.get(("a1", "hi"), 0) > 0  # it missed its opportunities, counted as such


def test_relabelling_a_node_moves_its_tag_counts_to_its_new_group() -> None:
    h = cluster(*RACKS)
    start(h, "a1", "db", "n1", tags=("db", "primary"))
    h.feed(f.NodeAdded(node="n1", capacity={"memory": 100}, labels={"rack": "r1"}))
    assert_index_is_the_recount(h.cache.state)
    assert_index_is_the_recount(h.allocator.state)
    h.feed(tagged("a1", "web", 10, constraints=[C(scope="rack", op="in", tags=["db"])]))
    h.settle()
    assert nodes_of(h, "web")[0] in ("n1", "n3", "n4")
    h.feed(f.AllocationReleased(allocation="alloc-1"))
    assert_index_is_the_recount(h.cache.state)


# ---------------------------------------------------------------------- the cache's check


def test_the_cache_refuses_a_placement_that_breaks_a_constraint() -> None:
    h = cluster(("n1", {}), ("n2", {}))
    start(h, "a1", "x", "n1", tags=("x",))
    h.feed(tagged("a1", "w", 10, constraints=[C(op="not_in", tags=["x"])]))
    seq = h.cache.state.ask(("a1", "w")).seq  # type: ignore[union-attr]
    proposal = p.AllocationProposal(
        partition="default",
        id="hand/1",
        view_seq=h.allocator.view_seq,
        placements=[p.Placement(app="a1", ask="w", node="n1", ask_seq=seq)],
    )
    h.cache.handle_proposal(proposal)
    h.pump()
    outcome = h.outcomes["hand/1"]
    assert outcome.accepted == 0 and "holds 1 of x" in next(iter(outcome.rejected.values()))


# ---------------------------------------------------------------------- gangs


def test_a_gangs_members_count_each_other() -> None:
    h = cluster(("n1", {}), ("n2", {}), ("n3", {}))
    spread = [C(op="not_in", tags=["ml"], namespace="self")]
    h.feed(tagged("a1", "g", 10, count=3, gang_min=3, tags=["ml"], constraints=spread))
    proposal = h.propose()
    assert proposal is not None and sorted(pl.node for pl in proposal.placements) == ["n1", "n2", "n3"]
    assert h.deliver().accepted == 3
    h.feed(tagged("a1", "g4", 10, count=4, gang_min=4, tags=["ml"], constraints=spread))
    h.settle()  # three nodes, each with an ml member already: no unit of four anywhere, no part of one
    assert nodes_of(h, "g4") == [] and h.allocator.state.ask(("a1", "g4")).allocating == 0  # type: ignore[union-attr]
    assert not h.model.violations


def test_the_cache_refuses_a_gang_whose_members_would_break_anti_affinity_together() -> None:
    h = cluster(("n1", {}), ("n2", {}))
    h.feed(tagged("a1", "g", 10, count=2, gang_min=2, tags=["ml"], constraints=[C(op="not_in", tags=["ml"])]))
    seq = h.cache.state.ask(("a1", "g")).seq  # type: ignore[union-attr]
    both_on_n1 = [p.Placement(app="a1", ask="g", node="n1", ask_seq=seq) for _ in range(2)]
    h.cache.handle_proposal(p.AllocationProposal(partition="default", id="hand/1", view_seq=1, placements=both_on_n1))
    h.pump()
    assert h.outcomes["hand/1"].accepted == 0 and not h.allocated()
    assert "gang member 2 of 2" in next(iter(h.outcomes["hand/1"].rejected.values()))
    assert_index_is_the_recount(h.cache.state)  # the check's holds were undone


# ---------------------------------------------------------------------- a node lost mid-run


def test_a_lost_node_carrying_the_target_evicts_nothing_and_later_replicas_follow_the_target() -> None:
    h = cluster(*RACKS)
    db = start(h, "a1", "db", "n1", tags=("db",))
    near = [C(scope="rack", op="in", tags=["db"])]
    h.feed(tagged("a1", "web", 10, count=1, tags=["web"], constraints=near))
    h.settle()
    [web_node] = nodes_of(h, "web")
    assert web_node in ("n1", "n2")
    h.feed(f.NodeRemoved(node="n1"))
    lost = [x.allocation for x in h.decisions if isinstance(x, d.AllocationLost)]
    assert db in lost
    if web_node == "n2":
        assert len(lost) == 1  # placed before, it stays: constraints are judged at placement only
    h.feed(tagged("a1", "web2", 10, tags=["web"], constraints=near))
    h.settle()
    assert nodes_of(h, "web2") == []  # no db in any rack now
    start(h, "a1", "db2", "n3", tags=("db",))
    h.settle()
    assert nodes_of(h, "web2")[0] in ("n3", "n4")
    assert not h.model.violations
    assert_index_is_the_recount(h.cache.state)


# ---------------------------------------------------------------------- preemption


def _preempt_setup(constrained: bool) -> PreemptHarness:
    """n1: a's web replica (40) and b's work (3 x 20); n2: a's own work (100): b's on n1 are the only victims."""
    h = PreemptHarness(two_queues(150, 30))
    h.feed(*(f.NodeAdded(node=n, capacity={"memory": 100}) for n in ("n1", "n2")))
    h.app("a1", "root.a")
    h.app("b1", "root.b")
    h.feed(tagged("a1", "web", 40, tags=["web"]))
    h.cache.allocate("a1", "web", "n1")
    h.fill("b1", "root.b", "n1", [20, 20, 20])
    h.run("a1", 100, "n2")
    rule = [C(op="not_in", tags=["web"], namespace="self")] if constrained else []
    h.feed(tagged("a1", "web2", 10, tags=["web"], constraints=rule))
    h.starve(2)
    return h


def test_preemption_never_picks_the_only_victim_set_when_it_puts_the_beneficiary_beside_a_forbidden_tag() -> None:
    control = _preempt_setup(constrained=False)
    control.preempt_round(10.0)
    assert control.preempts(), "without the constraint, b's containers on n1 make room"
    h = _preempt_setup(constrained=True)
    result = h.preempt_round(10.0)
    assert not h.preempts() and not result.placements
    assert not placement_violations(h.model)


def test_a_victim_set_that_takes_away_the_target_of_in_is_never_chosen() -> None:
    def setup(rule: list[C]) -> PreemptHarness:
        h = PreemptHarness(two_queues(100, 0))
        h.feed(f.NodeAdded(node="n1", capacity={"memory": 100}))
        h.app("a1", "root.a")
        h.app("b1", "root.b")
        h.feed(tagged("b1", "db", 100, tags=["db"]))
        h.cache.allocate("b1", "db", "n1")
        h.pump()
        h.feed(tagged("a1", "web", 50, constraints=rule))
        h.starve(2)
        return h

    control = setup([])
    control.preempt_round(10.0)
    assert control.preempts()
    h = setup([C(op="in", tags=["db"])])
    h.preempt_round(10.0)
    assert not h.preempts()  # the only victim is the db it must stand beside


def test_a_victim_carrying_a_not_in_tag_counts_gone_when_the_room_needs_it_anyway() -> None:
    h = PreemptHarness(two_queues(100, 0))
    h.feed(f.NodeAdded(node="n1", capacity={"memory": 100}))
    h.app("a1", "root.a")
    h.app("b1", "root.b")
    h.feed(tagged("b1", "noisy", 100, tags=["noisy"]))
    h.cache.allocate("b1", "noisy", "n1")
    h.pump()
    h.feed(tagged("a1", "quiet", 60, constraints=[C(op="not_in", tags=["noisy"])]))
    h.starve(2)
    h.preempt_round(10.0)
    assert [x.allocation for x in h.preempts()] == ["alloc-1"]
    h.tick(40.0)  # the grace ends: the kill; once it is gone the reservation is fulfilled beside nothing noisy
    assert h.kills() == ["alloc-1"]
    h.release("alloc-1")
    assert [x.node for x in h.allocated() if x.app == "a1"] == ["n1"]
    assert not h.model.violations


def test_a_reserved_beneficiary_whose_scope_changed_waits_instead_of_breaking_its_constraint() -> None:
    h = PreemptHarness(two_queues(100, 100))
    h.feed(*(f.NodeAdded(node=n, capacity={"memory": 110}) for n in ("n1", "n2")))
    h.app("a1", "root.a")
    h.app("b1", "root.b")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=5.0)
    h.feed(tagged("a1", "web", 50, constraints=[C(op="not_in", tags=["x"])]))
    h.starve(2)
    h.preempt_round(10.0)
    [victim] = h.preempts()
    reserved_on = h.alloc(victim.allocation).node
    start(h, "b1", "x", reserved_on, memory=10, tags=("x",))  # lands beside the reservation before its victim leaves
    h.tick(40.0)
    assert victim.allocation in h.kills()
    assert not [x for x in h.allocated() if x.app == "a1" and x.node == reserved_on]
    assert h.cache.state.reservations, "the reservation waits (it ends at its expiry), it is not fulfilled"
    assert not placement_violations(h.model)
    assert_index_is_the_recount(h.cache.state)


def _two_replicas(rule: list[C]) -> PreemptHarness:
    """n1 and n2 full of b's work (n2's younger, cheaper); a's two replicas of 50 starve."""
    h = PreemptHarness(two_queues(100, 100))
    h.feed(*(f.NodeAdded(node=n, capacity={"memory": 100}) for n in ("n1", "n2")))
    h.app("a1", "root.a")
    h.app("b1", "root.b")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=10.0)
    h.feed(tagged("a1", "web", 50, count=2, tags=["web"], constraints=rule))
    h.starve(2)
    return h


def test_a_reservations_promised_container_counts_toward_cardinality_with_the_one_placed() -> None:
    control = _two_replicas([])
    control.preempt_round(20.0)
    assert {control.alloc(x.allocation).node for x in control.preempts()} == {"n2"}  # the cheapest pair
    h = _two_replicas([C(op="cardinality", tags=["web"], max=1, namespace="self")])
    h.preempt_round(20.0)
    victims = h.preempts()
    assert sorted(h.alloc(x.allocation).node for x in victims) == ["n1", "n2"]  # one replica per node
    assert sorted(r.node for r in h.cache.state.reservations.values()) == ["n1", "n2"]
    assert_index_is_the_recount(h.cache.state)
    h.tick(60.0)
    h.release(*h.kills())
    assert sorted(x.node for x in h.allocated() if x.app == "a1") == ["n1", "n2"]  # each fulfils its own
    assert not h.cache.state.reservations and not h.model.violations
    assert_index_is_the_recount(h.cache.state)


# ---------------------------------------------------------------------- the independent checker


def test_the_checker_flags_a_placement_beside_a_forbidden_tag_on_its_own_count() -> None:
    model = ClusterModel("default", config_of(queue("a")))
    for event in (
        f.NodeAdded(node="n1", capacity={"memory": 100}, labels={"rack": "r0"}),
        f.NodeAdded(node="n2", capacity={"memory": 100}, labels={"rack": "r0"}),
        f.AppAdded(app="a1", queue="root.a"),
        tagged(
            "a1", "web", 10, count=3, tags=["web"], constraints=[C(scope="rack", op="cardinality", tags=["web"], max=2)]
        ),
    ):
        model.on_event(event)
    for n, node in enumerate(("n1", "n2", "n2"), 1):
        model.on_decision(
            d.Allocated(
                seq=n, allocation=f"alloc-{n}", app="a1", ask="web", queue="root.a", node=node, resource={"memory": 10}
            )
        )
    [problem] = placement_violations(model)
    assert "alloc-3 on n2: its rack holds 3 of web with it" in problem  # the state after the placement
    assert model.placement.satisfied == 2


def test_the_checker_counts_the_others_for_not_in_and_in_on_the_asks_own_tag() -> None:
    model = ClusterModel("default", config_of(queue("a")))
    for event in (
        f.NodeAdded(node="n1", capacity={"memory": 100}),
        f.AppAdded(app="a1", queue="root.a"),
        tagged("a1", "alone", 10, count=2, tags=["a"], constraints=[C(op="not_in", tags=["a"])]),
        tagged("a1", "follow", 10, count=2, tags=["f"], constraints=[C(op="in", tags=["f"])]),
    ):
        model.on_event(event)
    placed = [("alone", "alloc-1"), ("follow", "alloc-2"), ("alone", "alloc-3")]
    for n, (ask, aid) in enumerate(placed, 1):
        model.on_decision(
            d.Allocated(seq=n, allocation=aid, app="a1", ask=ask, queue="root.a", node="n1", resource={"memory": 10})
        )
    problems = placement_violations(model)
    assert len(problems) == 2
    assert "alloc-2 on n1: its node holds 0 of f besides it" in problems[0]  # no other f: in breaks
    assert "alloc-3 on n1: its node holds 1 of a besides it" in problems[1]
    assert model.placement.satisfied == 1  # alloc-1 alone, its own a not counted


# ---------------------------------------------------------------------- the bundled scenario


@pytest.mark.parametrize("policy", ["sniper", "proportional", "none"])
def test_the_constraints_scenario_honours_every_constraint(policy: str) -> None:
    sc = scenario("constraints")
    result = run_simulation(sc.events, sc.config, SimulationSettings(policy=policy))
    assert result.report["invariant_violations"] == 0, result.report["violations"]
    placed = [x for x in result.decisions if isinstance(x, d.Allocated)]
    db = [x for x in placed if x.app == "prod-db"]
    assert db[0].node == "n000"  # the node lost at 200 s carried rack r0's database
    assert any(x.allocation == db[0].allocation for x in result.decisions if isinstance(x, d.AllocationLost))
    web = [x for x in placed if x.app == "prod-web"]
    assert len(web) >= 6
    assert result.report["constraint_satisfied_placements"] == sum(
        1 for x in placed if x.app in ("prod-db", "prod-web", "batch-etl", "batch-ml")
    )
    if policy == "sniper":  # its victim sets are chosen where a replica may stand
        assert any(isinstance(x, d.Preempt) and x.for_app == "prod-web" for x in result.decisions)


# ---------------------------------------------------------------------- opportunistic evictions, snapshots


def test_a_guaranteed_ask_evicts_opportunistic_containers_only_where_its_constraints_hold() -> None:
    h = cluster(("n1", {}), ("n2", {}))
    h.feed(
        tagged("a1", "noisy", 50, execution_type="opportunistic", tags=["x"]),
        tagged("a1", "plain", 50, count=3, execution_type="opportunistic"),
    )
    h.settle()
    [noisy_node] = nodes_of(h, "noisy")
    assert noisy_node == "n1"  # the node the eviction would prefer (fewest victims, then name)
    h.tick(5.0)
    h.feed(tagged("a1", "g", 50, constraints=[C(op="not_in", tags=["x"])]))
    for _ in range(5):
        h.settle()
        killed = [a.id for a in h.cache.state.allocations.values() if a.killed]
        h.feed(*(f.AllocationReleased(allocation=x) for x in killed))
    evicted_on = {x.node for x in h.decisions if isinstance(x, d.Kill)}
    assert evicted_on and noisy_node not in evicted_on
    assert nodes_of(h, "g") and noisy_node not in nodes_of(h, "g")
    assert not h.model.violations


def test_a_snapshot_carries_tags_and_constraints_and_rebuilds_the_same_index() -> None:
    h = cluster(*RACKS)
    start(h, "a1", "db", "n1", tags=("db",))
    rule = [C(scope="rack", op="in", tags=["db"]), C(op="cardinality", tags=["web"], max=1, namespace="self")]
    h.feed(tagged("a1", "web", 10, count=3, tags=["web"], constraints=rule))
    h.settle()
    copy = PartitionState("default", h.cache.state.config)
    copy.apply_all(state_changes(h.cache.state))
    assert copy.tags.by_node == h.cache.state.tags.by_node and copy.tags.by_group == h.cache.state.tags.by_group
    ask = copy.ask(("a1", "web"))
    assert ask is not None and ask.tags == ("web",) and ask.constraints == h.cache.state.ask(("a1", "web")).constraints  # type: ignore[union-attr]
    assert [c.raw() for c in ask.constraints] == rule


# ---------------------------------------------------------------------- node reservations


def test_a_node_reservation_is_made_only_on_a_node_where_the_constraints_hold() -> None:
    raw = preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100}))
    raw["reservation"] = {"enabled": True, "timeout": 60.0}
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.app("b1", "root.b")
    h.feed(tagged("b1", "x", 10, tags=["x"]))
    h.cache.allocate("b1", "x", "n1")
    h.pump()
    on_n1 = h.fill("b1", "root.b", "n1", [10] * 9)
    on_n2 = h.fill("b1", "root.b", "n2", [10] * 10, start=10)
    h.ask("b1", "more", 10, count=100)
    h.app("a1", "root.a")
    h.feed(tagged("a1", "big", 60, constraints=[C(op="not_in", tags=["x"])]))
    h.settle()
    for i in range(14):  # containers finish on both nodes in turn; n1 frees first, but holds x
        h.tick(h.now + 1)
        h.release((on_n1 if i % 2 == 0 else on_n2).pop(0))
        h.settle()
    reserved = [x for x in h.decisions if isinstance(x, d.NodeReserved)]
    assert [(r.ask, r.node) for r in reserved] == [("big", "n2")]
    assert nodes_of(h, "big") == ["n2"]
    assert not h.model.violations
