"""Topology-aware placement: the partition's ``topology`` levels, an ask's ``topology`` (``required``:
one domain or nothing; ``preferred``: the smallest domain, else the fewest), domains in the node sort
policy's order, and the independent checker's invariant 16."""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core import topology
from sniper.core.config import ConfigError, parse_partition, partition_to_raw
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.codec import BadInput, decode_feed_lines
from sniper.simulator.model import ClusterModel
from sniper.simulator.rm import StandInRM
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.core_support import Harness, config_of, partition_raw, queue, rejected_reasons
from tests.preemption_support import PreemptHarness, preemption_raw, two_queues

LEVELS = ["rack", "host"]


def topology_config(node_sort: str = "binpacking", levels: list[str] | None = None) -> Any:
    raw = partition_raw(queue("a"), node_sort=node_sort)
    raw["topology"] = {"levels": LEVELS if levels is None else levels}
    return parse_partition(raw)


def rack_node(name: str, rack: str | None, memory: int = 100) -> f.NodeAdded:
    labels = {"host": name} if rack is None else {"rack": rack, "host": name}
    return f.NodeAdded(node=name, capacity={"memory": memory}, labels=labels)


def racks(layout: dict[str, list[str]], node_sort: str = "binpacking", memory: int = 100) -> Harness:
    """A partition whose nodes sit in the given racks, and app ``a1`` in ``root.a``."""
    h = Harness(topology_config(node_sort))
    h.feed(
        *(rack_node(node, rack, memory) for rack, nodes in layout.items() for node in nodes),
        f.AppAdded(app="a1", queue="root.a"),
        f.AppAdded(app="a2", queue="root.a"),
    )
    return h


def ask(
    name: str,
    memory: int,
    count: int,
    gang_min: int = 0,
    mode: f.TopologyMode = "required",
    level: str = "rack",
    app: str = "a1",
) -> f.AskAdded:
    return f.AskAdded(
        app=app,
        ask=name,
        resource={"memory": memory},
        count=count,
        gang_min=gang_min,
        topology=f.AskTopology(level=level, mode=mode),
    )


def plain(name: str, memory: int, count: int = 1, app: str = "a1", node: str | None = None) -> f.AskAdded:
    return f.AskAdded(app=app, ask=name, resource={"memory": memory}, count=count, node=node)


def nodes_of(h: Harness, name: str) -> list[str]:
    return [node for ask_name, node in h.placements() if ask_name == name]


def rack_of(node: str) -> str:
    return {"n0": "r0", "n1": "r0", "n2": "r1", "n3": "r1", "n4": "r2", "n5": "r2"}[node]


def topology_violations(model: ClusterModel) -> list[str]:
    return [v.reason for v in model.violations if v.invariant == 16]


# ---------------------------------------------------------------------- configuration and admission


def test_a_partition_topology_lists_its_levels_outermost_first_and_survives_a_round_trip() -> None:
    cfg = topology_config(levels=["zone", "rack", "kubernetes.io/hostname"])
    assert cfg.topology is not None and cfg.topology.levels == ("zone", "rack", "kubernetes.io/hostname")
    assert parse_partition(partition_to_raw(cfg)) == cfg
    assert config_of(queue("a")).topology is None


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ({"levels": ["rack", "host", "rack"]}, "topology.levels: rack named more than once"),
        ({"levels": []}, "topology.levels"),
        ({"levels": ["rack"], "spread": True}, "spread"),
    ],
)
def test_a_malformed_topology_is_a_config_error_naming_it(topology: dict[str, Any], message: str) -> None:
    raw = partition_raw(queue("a"))
    raw["topology"] = topology
    with pytest.raises(ConfigError, match=message):
        parse_partition(raw)


def test_an_ask_naming_a_level_the_partition_does_not_list_is_rejected_as_bad_topology() -> None:
    h = racks({"r0": ["n0"]})
    out = h.feed(ask("g", 10, count=2, level="zone"))
    [rejected] = [x for x in out if isinstance(x, d.Rejected)]
    assert rejected.code == "bad_topology"
    assert rejected.reason == "ask a1/g: topology level zone is not among the partition's topology levels (rack, host)"
    assert h.cache.state.ask(("a1", "g")) is None
    assert not rejected_reasons(h.feed(ask("ok", 10, count=2, level="host")))


def test_an_ask_with_a_topology_in_a_partition_without_one_is_rejected_as_bad_topology() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(rack_node("n0", "r0"), f.AppAdded(app="a1", queue="root.a"))
    [reason] = rejected_reasons(h.feed(ask("g", 10, count=2)))
    assert reason == "ask a1/g: topology level rack is named, but the partition has no topology"


def test_a_topology_mode_outside_required_and_preferred_is_bad_input_naming_the_field() -> None:
    line = (
        b'{"type":"ask_added","app":"a1","ask":"g","resource":{"memory":1},"count":2,'
        b'"topology":{"level":"rack","mode":"spread"}}'
    )
    [bad] = list(decode_feed_lines([line], source="feed"))
    assert isinstance(bad, BadInput) and "topology.mode" in bad.reason
    [good] = list(decode_feed_lines([line.replace(b',"mode":"spread"', b"")], source="feed"))
    assert isinstance(good, f.AskAdded) and good.topology == f.AskTopology(level="rack", mode="required")


# ---------------------------------------------------------------------- placement


def rack(h: Harness, node: str) -> str | None:
    return h.cache.state.nodes[node].labels.get("rack")


def racks_of(h: Harness, name: str) -> list[str | None]:
    return [rack(h, node) for node in nodes_of(h, name)]


def released(h: Harness, name: str) -> list[f.AllocationReleased]:
    return [f.AllocationReleased(allocation=x.allocation) for x in h.allocated() if x.ask == name]


def test_a_required_gang_waits_while_no_rack_holds_it_whole_though_the_racks_together_do() -> None:
    h = racks({"r0": ["n0", "n1"], "r1": ["n2", "n3"]})
    h.feed(plain("fill0", 50, node="n0"), plain("fill2", 50, node="n2"))
    h.feed(ask("g", 50, count=4, gang_min=4))  # 3 slots in each rack, 6 in all
    h.settle()
    assert nodes_of(h, "g") == []
    h.feed(rack_node("n6", "r0"))
    h.settle()
    assert len(nodes_of(h, "g")) == 4 and set(racks_of(h, "g")) == {"r0"}
    assert topology_violations(h.model) == []


def test_a_required_ask_never_uses_a_node_without_its_level_label() -> None:
    h = racks({"r0": ["n0"]})
    h.feed(rack_node("loose", None, memory=1000))
    h.feed(ask("g", 60, count=2, gang_min=2))
    h.settle()
    assert nodes_of(h, "g") == []
    h.feed(plain("free", 60, count=2))
    h.settle()
    assert sorted(nodes_of(h, "free")) == ["loose", "n0"]  # the room was there, off every rack


@pytest.mark.parametrize(("node_sort", "chosen"), [("binpacking", "r1"), ("fair", "r2")])
def test_domains_are_tried_fullest_first_under_binpacking_and_emptiest_first_under_fair(
    node_sort: str, chosen: str
) -> None:
    h = racks({"r0": ["n0", "n1"], "r1": ["n2", "n3"], "r2": ["n4", "n5"]}, node_sort=node_sort)
    h.feed(plain("fill0", 50, node="n0"), plain("fill2", 20, node="n2"))
    h.settle()
    h.feed(ask("g", 60, count=2, gang_min=2))  # r0, the fullest, holds one; r1 two; r2, the emptiest, two
    h.settle()
    assert racks_of(h, "g") == [chosen, chosen]


def test_the_rest_of_a_required_ask_follows_its_gang_into_its_rack_and_waits_there() -> None:
    h = racks({"r0": ["n0", "n1"], "r1": ["n2", "n3"]})
    h.feed(ask("g", 60, count=4, gang_min=2))
    h.settle()
    assert racks_of(h, "g") == ["r0", "r0"]  # r1, as empty, holds the other two but is another rack
    first = released(h, "g")[0]
    h.feed(first)
    h.settle()
    assert racks_of(h, "g") == ["r0", "r0", "r0"]
    assert topology_violations(h.model) == []


def test_two_gangs_wanting_the_only_rack_that_holds_them_take_it_in_turn_never_split() -> None:
    h = racks({"r0": ["n0", "n1"], "r1": ["n2", "n3"], "r2": ["n4", "n5"]})
    h.feed(plain("fill3", 100, node="n3"), plain("fill5", 100, node="n5"))
    h.feed(ask("first", 100, count=2, gang_min=2), ask("second", 100, count=2, gang_min=2, app="a2"))
    h.settle()
    assert racks_of(h, "first") == ["r0", "r0"]
    assert nodes_of(h, "second") == []  # n2 and n4 hold it, in two racks
    h.feed(*released(h, "first"))
    h.settle()
    assert racks_of(h, "second") == ["r0", "r0"]
    assert topology_violations(h.model) == []


def test_a_preferred_gang_takes_the_smallest_domain_that_holds_it() -> None:
    h = racks({"r0": ["n0", "n1"], "r1": ["n2"]}, node_sort="fair")
    h.feed(ask("g", 40, count=2, gang_min=2, mode="preferred"))
    h.settle()
    [one, two] = nodes_of(h, "g")
    assert one == two  # one host, though fair spreads plain containers
    h.feed(plain("spread", 40, count=2))
    h.settle()
    assert len(set(nodes_of(h, "spread"))) == 2


def test_a_preferred_gang_no_rack_holds_falls_back_to_the_fewest_racks() -> None:
    h = racks({"r1": ["n0"], "r2": ["n1"], "r0": ["n4", "n5"]})
    h.feed(ask("g", 100, count=3, gang_min=3, mode="preferred"))
    h.settle()
    assert len(nodes_of(h, "g")) == 3
    assert sorted(map(str, racks_of(h, "g"))).count("r0") == 2  # r0 whole, and one more rack
    h.feed(ask("strict", 100, count=3, gang_min=3, app="a2"))
    h.settle()
    assert nodes_of(h, "strict") == []


def test_a_required_ask_stays_in_a_rack_that_loses_a_node_and_chooses_anew_once_it_holds_nothing() -> None:
    h = racks({"r0": ["n0", "n1"], "r1": ["n2", "n3"]})
    h.feed(ask("g", 60, count=4))
    h.settle()
    assert nodes_of(h, "g") == ["n0", "n1"]  # r1 would hold the rest
    h.feed(f.NodeRemoved(node="n0"))
    h.settle()
    assert nodes_of(h, "g") == ["n0", "n1"]  # still pinned to r0 by the container on n1
    h.feed(rack_node("n6", "r0"))
    h.settle()
    assert nodes_of(h, "g") == ["n0", "n1", "n6"]
    h.feed(f.NodeRemoved(node="n1"), f.NodeRemoved(node="n6"))
    h.settle()
    assert [rack(h, node) for node in nodes_of(h, "g")[3:]] == ["r1"]  # holding nothing, it starts anew
    assert topology_violations(h.model) == []


# ---------------------------------------------------------------------- the independent checker


def test_the_checker_flags_a_required_ask_placed_in_a_second_rack_or_off_every_rack() -> None:
    model = ClusterModel("default", topology_config())
    for event in (
        rack_node("n0", "r0"),
        rack_node("n2", "r1"),
        rack_node("loose", None),
        f.AppAdded(app="a1", queue="root.a"),
        ask("g", 10, count=5),
    ):
        model.on_event(event)
    for n, node in enumerate(("n0", "n0", "n2", "loose"), 1):
        model.on_decision(
            d.Allocated(
                seq=n, allocation=f"c{n}", app="a1", ask="g", queue="root.a", node=node, resource={"memory": 10}
            )
        )
    assert topology_violations(model) == [
        "required topology broken: c3 of a1/g in rack r1, its other containers in r0",
        "required topology broken: c4 of a1/g on loose, which has no rack label",
    ]
    assert model.topology.kept == 2


# ---------------------------------------------------------------------- sniper preemption


def preempting(topology: f.AskTopology | None) -> tuple[PreemptHarness, list[str]]:
    """Racks r0 (n0, n1) and r1 (n2, n3) full of root.b's containers, the youngest on n1 and n2 (two
    racks), after one sniper round for a1's gang of two 100s in root.a; the racks of the victims."""
    raw = two_queues(200, 200)
    raw["topology"] = {"levels": LEVELS}
    h = PreemptHarness(raw)
    h.feed(
        *(rack_node(node, rack) for rack, nodes in {"r0": ["n0", "n1"], "r1": ["n2", "n3"]}.items() for node in nodes)
    )
    for start, node in enumerate(("n0", "n3", "n1", "n2")):
        h.run(f"b{node}", 100, node, at=float(start), queue_path="root.b")
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="g", resource={"memory": 100}, count=2, gang_min=2, topology=topology))
    h.starve()
    h.preempt_round(now=10.0)
    return h, sorted(str(rack(h, x.node)) for x in h.preempts())


def test_sniper_preemption_frees_one_rack_for_a_required_gang() -> None:
    _, spread = preempting(None)
    assert spread == ["r0", "r1"]  # the cheapest victims, one in each rack
    h, victims = preempting(f.AskTopology(level="rack"))
    assert len(victims) == 2 and len(set(victims)) == 1
    h.tick(h.now + 16)
    h.release(*h.kills())
    h.settle()
    assert racks_of(h, "g") == victims
    h.model.check(h.now)
    assert h.model.violations == []


def racks_of_victims(
    running: list[tuple[str, int, float]],
    topology: f.AskTopology,
    *,
    raw: dict[str, Any] | None = None,
    queue_of: dict[str, str] | None = None,
    priority_of: dict[str, int] | None = None,
) -> PreemptHarness:
    """Racks r0 (n0, n1) and r1 (n2, n3) of 100 each, containers ``(node, memory, start)`` in them (in
    root.b unless ``queue_of`` names another queue for the node; of priority 0 unless ``priority_of``
    says otherwise; r0 first in the binpacking order: as full as r1, first by name), after one sniper
    round for a1's gang of two 100s in root.a (``raw``: the partition, by default ``two_queues(200, 200)``)."""
    raw = two_queues(200, 200) if raw is None else raw
    raw["topology"] = {"levels": LEVELS}
    h = PreemptHarness(raw)
    h.feed(*(rack_node(node, r) for r, nodes in {"r0": ["n0", "n1"], "r1": ["n2", "n3"]}.items() for node in nodes))
    for n, (node, memory, start) in enumerate(sorted(running, key=lambda x: x[2])):
        queue_path = (queue_of or {}).get(node, "root.b")
        priority = (priority_of or {}).get(node, 0)
        h.run(f"b{n}", memory, node, at=start, priority=priority, queue_path=queue_path)
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="g", resource={"memory": 100}, count=2, gang_min=2, topology=topology))
    h.starve()
    h.preempt_round(now=10.0)
    return h


OLDER_IN_R0 = [("n0", 100, 0.0), ("n1", 100, 1.0), ("n2", 100, 4.0), ("n3", 100, 5.0)]
MORE_IN_R0 = [("n0", 50, 5.0), ("n0", 50, 5.0), ("n1", 50, 5.0), ("n1", 50, 5.0), ("n2", 100, 4.0), ("n3", 100, 4.0)]


@pytest.mark.parametrize("mode", ["required", "preferred"])
@pytest.mark.parametrize("running", [OLDER_IN_R0, MORE_IN_R0], ids=["older", "more"])
def test_sniper_preemption_frees_the_rack_whose_victims_cost_least_not_the_first_in_order(
    running: list[tuple[str, int, float]], mode: f.TopologyMode
) -> None:
    h = racks_of_victims(running, f.AskTopology(level="rack", mode=mode))
    assert sorted(x.node for x in h.preempts()) == ["n2", "n3"]
    h.tick(h.now + 16)
    h.release(*h.kills())
    h.settle()
    assert sorted(nodes_of(h, "g")) == ["n2", "n3"]
    h.model.check(h.now)
    assert h.model.violations == []


def test_a_rack_of_cheap_application_masters_loses_to_a_rack_of_costlier_tasks() -> None:
    raw = two_queues(200, 200)
    raw["topology"] = {"levels": LEVELS}
    h = PreemptHarness(raw)
    h.feed(*(rack_node(node, r) for r, nodes in {"r0": ["n0", "n1"], "r1": ["n2", "n3"]}.items() for node in nodes))
    for start, node in enumerate(("n0", "n1", "n2", "n3")):  # r1's masters are the youngest
        h.run(f"b{node}", 100, node, at=float(start), am=node in ("n2", "n3"), queue_path="root.b")
    h.app("a1", "root.a")
    h.feed(ask("g", 100, count=2, gang_min=2))
    h.starve()
    h.preempt_round(now=10.0)
    assert sorted(x.node for x in h.preempts()) == ["n0", "n1"]


@pytest.mark.parametrize(("victim_cost", "freed"), [("running_time", ["n2", "n3"]), ("priority", ["n0", "n1"])])
def test_racks_are_weighed_by_the_partitions_victim_cost(victim_cost: str, freed: list[str]) -> None:
    # r0's containers are older, r1's of a higher priority: each cost function finds the other rack cheaper.
    h = racks_of_victims(
        OLDER_IN_R0,
        f.AskTopology(level="rack"),
        raw=two_queues(200, 200, victim_cost=victim_cost),
        priority_of={"n2": 5, "n3": 5},
    )
    assert sorted(x.node for x in h.preempts()) == freed


def test_a_cheaper_rack_whose_victims_their_queues_guarantee_protects_is_passed_over() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 200}), queue("b", guaranteed={}), queue("c", guaranteed={"memory": 200})
    )
    h = racks_of_victims(OLDER_IN_R0, f.AskTopology(level="rack"), raw=raw, queue_of={"n2": "root.c", "n3": "root.c"})
    assert sorted(x.node for x in h.preempts()) == ["n0", "n1"]  # root.c holds no more than its guarantee


def test_a_cheaper_rack_whose_app_disruption_budget_allows_one_victim_is_passed_over_and_counted() -> None:
    raw = two_queues(200, 200)
    raw["topology"] = {"levels": LEVELS}
    h = PreemptHarness(raw)
    h.feed(*(rack_node(node, r) for r, nodes in {"r0": ["n0", "n1"], "r1": ["n2", "n3"]}.items() for node in nodes))
    h.feed(f.AppAdded(app="svc", queue="root.b", max_disruption=1))
    for start, node in enumerate(("n0", "n1", "n2", "n3")):  # r1, the younger rack, runs svc alone
        h.run("svc" if node in ("n2", "n3") else f"b{node}", 100, node, at=float(start), queue_path="root.b")
    h.app("a1", "root.a")
    h.feed(ask("g", 100, count=2, gang_min=2))
    h.starve()
    r = h.preempt_round(now=10.0)
    assert sorted(x.node for x in h.preempts()) == ["n0", "n1"]
    assert r.reply is not None and r.reply.budget_refusals == 1  # svc's second container, once


def test_racks_whose_victims_cost_the_same_are_freed_in_the_node_sort_order() -> None:
    same = [("n0", 100, 1.0), ("n1", 100, 1.0), ("n2", 100, 1.0), ("n3", 100, 1.0)]
    h = racks_of_victims(same, f.AskTopology(level="rack"))
    assert sorted(x.node for x in h.preempts()) == ["n0", "n1"]


def test_racks_weighed_for_a_gang_leave_no_trace_the_next_gang_of_the_round_frees_the_other_rack() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 200}), queue("c", guaranteed={"memory": 200}), queue("b", guaranteed={})
    )
    raw["topology"] = {"levels": LEVELS}
    h = PreemptHarness(raw)
    h.feed(*(rack_node(node, r) for r, nodes in {"r0": ["n0", "n1"], "r1": ["n2", "n3"]}.items() for node in nodes))
    for n, (node, memory, start) in enumerate(OLDER_IN_R0):
        h.run(f"b{n}", memory, node, at=start, queue_path="root.b")
    h.app("a1", "root.a")
    h.app("c1", "root.c")
    for app in ("a1", "c1"):
        h.feed(
            f.AskAdded(
                app=app, ask="g", resource={"memory": 100}, count=2, gang_min=2, topology=f.AskTopology(level="rack")
            )
        )
    h.starve()
    round_ = h.preempt_round(now=10.0)
    by_app = {app: sorted(x.node for x in round_.placements if x.app == app) for app in ("a1", "c1")}
    assert sorted(by_app.values()) == [["n0", "n1"], ["n2", "n3"]]
    assert len({v for x in round_.placements for v in x.victims}) == 4  # each victim taken once
    assert sorted(x.node for x in h.preempts()) == ["n0", "n1", "n2", "n3"]


# ---------------------------------------------------------------------- the simulator


def test_the_stand_in_rm_asks_again_for_a_lost_container_with_its_topology() -> None:
    rm = StandInRM()
    rm.observe(f.AppAdded(app="a1", queue="root.a"))
    rm.observe(ask("g", 10, count=2, gang_min=2, mode="preferred"))
    rm.on_decision(
        d.Allocated(allocation="x1", app="a1", ask="g", queue="root.a", node="n0", resource={"memory": 10}), now=1.0
    )
    lost = d.AllocationLost(allocation="x1", app="a1", ask="g", queue="root.a", node="n0", resource={})
    (again,) = rm.on_decision(lost, now=2.0)
    assert isinstance(again, f.AskAdded) and again.topology == f.AskTopology(level="rack", mode="preferred")


def test_a_simulated_rack_that_loses_a_node_under_a_training_gang_breaks_no_invariant() -> None:
    raw = partition_raw(queue("a"), queue("b"))
    raw["topology"] = {"levels": LEVELS}
    layout = {"r0": ["n0", "n1"], "r1": ["n2", "n3"]}
    events: list[f.Feed] = [
        f.PartitionConfigEvent(config=raw),
        *(rack_node(node, r) for r, nodes in layout.items() for node in nodes),
        f.AppAdded(t=1, app="batch", queue="root.b"),
        f.AskAdded(t=1, app="batch", ask="w", resource={"memory": 50}, count=4, duration=100),
        f.AppAdded(t=2, app="train", queue="root.a"),
        f.AskAdded(
            t=2,
            app="train",
            ask="g",
            resource={"memory": 50},
            count=4,
            gang_min=4,
            duration=50,
            topology=f.AskTopology(level="rack"),
        ),
        f.NodeRemoved(t=20, node="n2"),
    ]
    result = run_simulation(events)
    assert result.violations == 0
    placed = [x.node for x in result.decisions if isinstance(x, d.Allocated) and x.ask == "g"]
    assert sorted(placed) == ["n2", "n2", "n3", "n3"]  # r0 is full of batch work
    retried = [x.node for x in result.decisions if isinstance(x, d.Allocated) and x.ask.startswith("g~")]
    assert len(retried) == 2 and set(retried) <= {"n0", "n1", "n3"}
    assert result.models["default"].topology.kept == 6


def test_topology_scenario_sniper_frees_one_rack_for_the_required_gang_and_the_baseline_wastes() -> None:
    sc = scenario("topology")
    sniper = run_simulation(sc.events, sc.config, SimulationSettings(policy="sniper"))
    assert sniper.report["invariant_violations"] == 0 and sniper.report["wasted_preemptions"] == 0
    rack_of_node = {e.node: e.labels["rack"] for e in sc.events if isinstance(e, f.NodeAdded)}
    gang = [x for x in sniper.decisions if isinstance(x, d.Allocated) and x.ask == "train-0-workers"]
    victims = [x for x in sniper.decisions if isinstance(x, d.Preempt) and x.for_ask == "train-0-workers"]
    assert len(gang) == 4 and len({rack_of_node[x.node] for x in gang}) == 1
    assert victims and {rack_of_node[x.node] for x in victims} == {rack_of_node[gang[0].node]}
    assert max(x.t for x in gang) < 120.0
    baseline = run_simulation(sc.events, sc.config, SimulationSettings(until=200, policy="proportional"))
    assert baseline.report["wasted_preemptions"] > 0 and baseline.report["invariant_violations"] == 0
    assert not [x for x in baseline.decisions if isinstance(x, d.Allocated) and x.ask == "train-0-workers"]


def test_the_checker_flags_victims_of_a_required_ask_outside_its_domain_or_split_in_one_round() -> None:
    model = ClusterModel("default", topology_config())
    for event in (
        rack_node("n0", "r0"),
        rack_node("n1", "r0"),
        rack_node("n2", "r1"),
        f.AppAdded(app="b1", queue="root.a"),
        plain("w", 10, count=3, app="b1"),
        f.AppAdded(app="a1", queue="root.a"),
        ask("g", 100, count=2, gang_min=2),
    ):
        model.on_event(event)
    for n, node in enumerate(("n0", "n1", "n2"), 1):
        model.on_decision(
            d.Allocated(
                seq=n, allocation=f"w{n}", app="b1", ask="w", queue="root.a", node=node, resource={"memory": 10}
            )
        )
    for seq, (victim, node) in enumerate((("w1", "n0"), ("w3", "n2")), 4):
        model.on_decision(
            d.Preempt(
                seq=seq,
                t=5.0,
                allocation=victim,
                app="b1",
                queue="root.a",
                node=node,
                resource={"memory": 10},
                for_ask="g",
                for_app="a1",
                for_queue="root.a",
                deadline=20.0,
                reservation=f"r{seq}",
            )
        )
    assert [r for r in topology_violations(model) if "preemption" in r] == [
        "topology preemption outside its domain: victim w3 for a1/g in rack r1, another victim of the round in r0"
    ]


def test_an_ask_with_a_topology_overtaken_by_small_asks_reserves_no_node() -> None:
    raw = two_queues(100, 100)
    raw["topology"] = {"levels": LEVELS}
    h = PreemptHarness(raw)
    h.feed(rack_node("n1", "r0"), rack_node("n2", "r1"))
    on_node = {
        node: h.fill("b1", "root.b", node, [10] * 10, start=start) for node, start in (("n1", 0.0), ("n2", 10.0))
    }
    h.ask("b1", "more", 10, count=100)
    h.app("a1", "root.a")
    h.feed(ask("big", 60, count=1))
    h.settle()
    for i in range(6):  # containers finish on both nodes in turn; small asks take the room each time
        h.tick(h.now + 1)
        h.release(on_node["n1" if i % 2 == 0 else "n2"].pop(0))
        h.settle()
    assert not [x for x in h.decisions if isinstance(x, d.NodeReserved)]
    h.feed(plain("plain-big", 60))
    for i in range(6, 12):
        h.tick(h.now + 1)
        h.release(on_node["n1" if i % 2 == 0 else "n2"].pop(0))
        h.settle()
    assert [x.ask for x in h.decisions if isinstance(x, d.NodeReserved)] == ["plain-big"]


# ---------------------------------------------------------------------- opportunistic containers


def test_an_opportunistic_ask_with_a_topology_is_rejected_as_bad_topology() -> None:
    h = racks({"r0": ["n0"]})
    event = f.AskAdded(
        app="a1", ask="o", resource={"memory": 10}, execution_type="opportunistic", topology=f.AskTopology(level="rack")
    )
    [rejected] = [x for x in h.feed(event) if isinstance(x, d.Rejected)]
    assert rejected.code == "bad_topology"
    assert rejected.reason == "ask a1/o: an opportunistic ask cannot have a topology"


def test_a_required_gang_evicts_opportunistic_containers_in_one_rack_only() -> None:
    h = racks({"r0": ["n0", "n1"], "r1": ["n2", "n3"]})
    # One opportunistic container on each node: the cheapest to evict, the 60s, are in two racks.
    for node, size in (("n0", 60), ("n1", 90), ("n2", 60), ("n3", 90)):
        h.feed(f.AskAdded(app="a2", ask=f"o-{node}", resource={"memory": size}, execution_type="opportunistic"))
        h.cache.allocate("a2", f"o-{node}", node)
        h.pump()
    h.feed(ask("g", 60, count=2, gang_min=2))
    for _ in range(10):
        h.settle()
        killed = [a.id for a in h.cache.state.allocations.values() if a.killed]
        if not killed:
            break
        h.feed(*(f.AllocationReleased(allocation=x) for x in killed))
    evicted = {x.node for x in h.decisions if isinstance(x, d.Kill)}
    assert len(nodes_of(h, "g")) == 2 and len(set(racks_of(h, "g"))) == 1
    assert {rack(h, node) for node in evicted} == set(racks_of(h, "g"))
    assert topology_violations(h.model) == []


def test_a_required_ask_holding_only_preemption_reservations_is_pinned_to_their_rack() -> None:
    h, victims = preempting(f.AskTopology(level="rack"))
    state = h.allocator.state
    reserved = state.ask(("a1", "g"))
    assert reserved is not None and reserved.reserved == 2 and reserved.allocated == 0
    reserved.domain = None  # a replica that never placed it (rebuilt from a snapshot) knows only the state
    assert topology.pinned(state, reserved, "rack") == victims[0]


def test_a_rack_losing_a_node_mid_grace_never_splits_the_required_gang_it_was_freed_for() -> None:
    h, victims = preempting(f.AskTopology(level="rack"))
    h.model.check(h.now)  # after every step, as the simulator checks
    chosen = victims[0]
    lost = sorted(x.node for x in h.preempts())[0]
    h.tick(h.now + 5)  # mid-grace
    h.feed(f.NodeRemoved(node=lost))
    h.model.check(h.now)
    h.feed(rack_node("n9", "r1" if chosen == "r0" else "r0"))  # free room, in the other rack
    h.settle()
    h.model.check(h.now)
    for _ in range(4):
        h.tick(h.now + 16)
        h.release(*[x for x in h.kills() if x in h.cache.state.allocations])
        h.starve()
        h.preempt_round()
        h.settle()
        h.model.check(h.now)
    assert racks_of(h, "g") == [chosen]  # the member still reserved, in its rack; none on n9
    assert h.model.violations == []


@pytest.mark.parametrize("protected", ["opt_out", "required_node"])
def test_a_rack_whose_only_victims_are_protected_is_passed_over_for_one_that_has_others(protected: str) -> None:
    raw = two_queues(200, 200)
    raw["topology"] = {"levels": LEVELS}
    h = PreemptHarness(raw)
    h.feed(*(rack_node(node, r) for r, nodes in {"r0": ["n0", "n1"], "r1": ["n2", "n3"]}.items() for node in nodes))
    for start, node in enumerate(("n0", "n1", "n2", "n3")):
        app = f"b{node}"
        if node in ("n0", "n1"):  # r0, first in the binpacking order (ties by name), is protected
            h.feed(f.AppAdded(app=app, queue="root.b", allow_preemption=protected != "opt_out"))
            h.feed(plain("run", 100, app=app, node=node if protected == "required_node" else None))
            h.tick(float(start))
            h.cache.allocate(app, "run", node)
            h.pump()
        else:
            h.run(app, 100, node, at=float(start), queue_path="root.b")
    h.app("a1", "root.a")
    h.feed(ask("g", 100, count=2, gang_min=2))
    h.starve()
    h.preempt_round(now=10.0)
    assert sorted(x.node for x in h.preempts()) == ["n2", "n3"]
