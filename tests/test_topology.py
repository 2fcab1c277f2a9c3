"""Topology-aware placement: the partition's ``topology`` levels, an ask's ``topology`` (``required``:
one domain or nothing; ``preferred``: the smallest domain, else the fewest), domains in the node sort
policy's order, and the independent checker's invariant 15."""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core.config import ConfigError, parse_partition, partition_to_raw
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.codec import BadInput, decode_feed_lines
from sniper.simulator.model import ClusterModel
from tests.core_support import Harness, config_of, partition_raw, queue, rejected_reasons

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
    name: str, memory: int, count: int, gang_min: int = 0, mode: str = "required", level: str = "rack", app: str = "a1"
) -> f.AskAdded:
    return f.AskAdded(
        app=app,
        ask=name,
        resource={"memory": memory},
        count=count,
        gang_min=gang_min,
        topology=f.AskTopology(level=level, mode=mode),  # type: ignore[arg-type]
    )


def plain(name: str, memory: int, count: int = 1, app: str = "a1", node: str | None = None) -> f.AskAdded:
    return f.AskAdded(app=app, ask=name, resource={"memory": memory}, count=count, node=node)


def nodes_of(h: Harness, name: str) -> list[str]:
    return [node for ask_name, node in h.placements() if ask_name == name]


def rack_of(node: str) -> str:
    return {"n0": "r0", "n1": "r0", "n2": "r1", "n3": "r1", "n4": "r2", "n5": "r2"}[node]


def topology_violations(model: ClusterModel) -> list[str]:
    return [v.reason for v in model.violations if v.invariant == 15]


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
