"""A YuniKorn config means the same in Sniper: its documented examples load with the quantities YuniKorn
reads, keys Sniper does not implement are named in warnings, and hostile input is a clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.config import MAX_NESTING, ConfigError, load_config, parse_config, parse_partition
from messages.codec import BadInput, decode_feed_lines
from tests.core_support import partition_raw, queue

DATA = Path(__file__).parent / "data" / "yunikorn"


def _resources(path: str) -> dict[str, tuple[dict[str, int], dict[str, int] | None]]:
    config = load_config(DATA / path)
    return {q.path: (q.guaranteed, q.max) for q in config.partition("default").queues()}


def test_the_namespaces_example_loads_without_a_root_wrapper() -> None:
    """queue_config.md: 1G is 10**9 bytes (954 MiB rounded up), vcore 10 is 10 cores."""
    assert _resources("queue_config_namespaces.yaml") == {
        "root": ({}, None),
        "root.namespaces": ({"memory": 954, "vcore": 10_000}, {"memory": 9537, "vcore": 100_000}),
        "root.namespaces.level1": ({"memory": 477, "vcore": 5000}, {"memory": 4769, "vcore": 50_000}),
    }
    config = load_config(DATA / "queue_config_namespaces.yaml")
    assert config.warnings == ()  # maxapplications is implemented
    assert {q.path: q.max_applications for q in config.partition("default").queues()}.get("root.namespaces") is not None


def test_the_resource_quota_example_loads_with_yunikorns_quantities() -> None:
    """resource_quota_mgmt.md: 500G of memory is 5 * 10**11 bytes = 476,837.16 MiB, vcore 50 is 50 cores."""
    assert _resources("resource_quota_mgmt.yaml") == {
        "root": ({}, None),
        "root.advertisement": ({"memory": 476_838, "vcore": 50_000}, {"memory": 762_940, "vcore": 80_000}),
        "root.search": ({"memory": 381_470, "vcore": 40_000}, {"memory": 572_205, "vcore": 60_000}),
        "root.sandbox": ({"memory": 95_368, "vcore": 10_000}, {"memory": 95_368, "vcore": 10_000}),
    }
    assert load_config(DATA / "resource_quota_mgmt.yaml").warnings == (
        "queue root: submitacl not implemented by Sniper yet; accepted and ignored",
    )


def test_the_child_template_example_loads_and_names_what_is_ignored() -> None:
    config = load_config(DATA / "queue_config_childtemplate.yaml")
    assert [q.path for q in config.partition("default").queues()] == ["root", "root.parent", "root.notemplate"]
    assert config.warnings == (
        "partition default: placementrules not implemented by Sniper yet; accepted and ignored",
        "queue root: submitacl, childtemplate not implemented by Sniper yet; accepted and ignored",
        "queue root.parent: childtemplate not implemented by Sniper yet; accepted and ignored",
        "queue root.parent: parent: true without child queues; Sniper creates no dynamic queues, so it is a leaf",
        "queue root.notemplate: parent: true without child queues; Sniper creates no dynamic queues, so it is a leaf",
    )


def test_the_parent_queue_mapping_example_loads() -> None:
    config = load_config(DATA / "resource_quota_mgmt_parent.yaml")
    assert [q.path for q in config.partition("default").queues()] == ["root", "root.production", "root.development"]
    assert "partition default: placementrules not implemented by Sniper yet; accepted and ignored" in config.warnings


def test_integers_and_strings_mean_the_same_in_a_config() -> None:
    as_int = parse_partition({"queues": [{"name": "a", "resources": {"guaranteed": {"memory": 2**30, "vcore": 10}}}]})
    as_str = parse_partition(
        {"queues": [{"name": "a", "resources": {"guaranteed": {"memory": "1073741824", "vcore": "10"}}}]}
    )
    assert as_int == as_str
    leaf = as_int.leaf("root.a")
    assert leaf is not None and leaf.guaranteed == {"memory": 1024, "vcore": 10_000}


def test_several_top_queues_get_a_root() -> None:
    part = parse_partition({"queues": [{"name": "a"}, {"name": "b", "queues": [{"name": "c"}]}]})
    assert [q.path for q in part.queues()] == ["root", "root.a", "root.b", "root.b.c"]


@pytest.mark.parametrize(
    ("resource", "warning"),
    [
        ("vcores", "queue root.a.guaranteed: resource 'vcores' is not 'vcore' (did you mean 'vcore'?)"),
        ("mem", "queue root.a.guaranteed: resource 'mem' is not 'memory' (did you mean 'memory'?)"),
        ("memory-mb", "queue root.a.guaranteed: resource 'memory-mb' is not 'memory' (did you mean 'memory'?)"),
        ("Memory", "queue root.a.guaranteed: resource 'Memory' is not 'memory' (did you mean 'memory'?)"),
    ],
)
def test_other_spellings_of_resources_get_a_did_you_mean(resource: str, warning: str) -> None:
    part = parse_partition(partition_raw(queue("a", guaranteed={resource: "4"})))
    assert len(part.warnings) == 1 and part.warnings[0].startswith(warning)
    leaf = part.leaf("root.a")
    assert leaf is not None and leaf.guaranteed == {resource: 4}  # kept as a resource of its own


def test_yunikorn_partition_keys() -> None:
    raw: dict[str, Any] = {
        "name": "default",
        "nodesortpolicy": "fair",
        "preemption": {"enabled": False, "quotapreemptionenabled": True},
        "usergroupresolver": {"type": "ldap"},
        "limits": [{"limit": "one", "users": ["sue"], "maxapplications": 10}],
        "queues": [
            {
                "name": "a",
                "adminacl": "admins",
                "limits": [{"limit": "x", "groups": ["*"], "maxresources": {"memory": "1Gi"}}],
                "properties": {"preemption.delay": "30s", "priority.policy": "fence"},
            }
        ],
    }
    part = parse_partition(raw)
    assert part.node_sort_policy == "fair"
    assert part.preemption.policy == "none"  # YuniKorn's enabled: false
    assert part.warnings == (
        "partition default: usergroupresolver not implemented by Sniper yet; accepted and ignored",
        "partition default.preemption: quotapreemptionenabled not implemented by Sniper; ignored",
        "queue root.a: adminacl not implemented by Sniper yet; accepted and ignored",
        "queue root.a.properties: priority.policy, preemption.delay not implemented by Sniper; ignored",
    )
    with pytest.raises(ConfigError, match="enabled is false but policy is 'sniper'"):
        parse_partition({**raw, "preemption": {"enabled": False, "policy": "sniper"}})
    weights = parse_partition({**raw, "nodesortpolicy": {"type": "binpacking", "resourceweights": {"memory": 2.0}}})
    assert weights.node_sort_policy == "binpacking"
    assert "partition default.nodesortpolicy: resourceweights not implemented by Sniper; ignored" in weights.warnings


def test_partition_limits_are_the_root_queues() -> None:
    """YuniKorn 1.5 (YUNIKORN-2260): limits on the partition work as the root queue's; both given and
    different is a config error."""
    limits = [{"limit": "one", "users": ["sue"], "maxapplications": 10}]
    part = parse_partition({"limits": limits, "queues": [{"name": "a"}]})
    ((lim,),) = [part.root.limits]
    assert (lim.users, lim.max_applications) == (("sue",), 10)
    assert part.root.children[0].limits == ()
    same = parse_partition(
        {"limits": limits, "queues": [{"name": "root", "limits": limits, "queues": [{"name": "a"}]}]}
    )
    assert same.root.limits == part.root.limits
    with pytest.raises(ConfigError, match=r"partition default\.limits: differ from queue root's limits"):
        parse_partition(
            {"limits": limits, "queues": [{"name": "root", "limits": [{"users": ["*"], "maxapplications": 2}]}]}
        )
    with pytest.raises(ConfigError, match=r"partition default\.limits\[0\]"):
        parse_partition({"limits": [{"users": ["sue"], "maxapps": 1}], "queues": [{"name": "a"}]})


def test_maxapplications_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"queue root\.a\.maxapplications: expected `int` >= 1"):
        parse_partition({"queues": [{"name": "a", "maxapplications": 0}]})


def _deep(levels: int) -> dict[str, Any]:
    q: dict[str, Any] = {"name": "leaf"}
    for i in range(levels):
        q = {"name": f"q{i}", "queues": [q]}
    return {"queues": [q]}


def test_a_thousand_levels_deep_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=f"nested more than {MAX_NESTING} levels deep"):
        parse_partition(_deep(1000))
    assert parse_partition(_deep(40)).leaf("root." + ".".join(f"q{i}" for i in reversed(range(40))) + ".leaf")


def test_a_thousand_levels_deep_in_yaml_is_a_clear_error(tmp_path: Path) -> None:
    lines = ["partitions:", "  - name: default", "    queues:"]
    for depth in range(1000):
        pad = "  " * (depth * 2 + 3)
        lines += [f"{pad}- name: q{depth}", f"{pad}  queues:"]
    lines.append("  " * 2003 + "- name: leaf")
    path = tmp_path / "deep.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="nested"):
        load_config(path)


def test_a_yaml_anchor_that_loops_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("partitions:\n  - name: default\n    queues: &q\n      - name: a\n        queues: *q\n")
    with pytest.raises(ConfigError, match="contains itself"):
        load_config(path)


def test_yaml_aliases_that_explode_are_a_clear_error(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    lines += ["partitions: [{name: default, queues: [{name: a, limits: *a7}]}]"]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="more than"):
        load_config(path)


def test_an_overflowing_quantity_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"queue root\.a\.guaranteed: memory: quantity .* is too large"):
        parse_partition(partition_raw(queue("a", guaranteed={"memory": "9" * 400 + "Gi"})))


def test_a_shared_anchor_is_no_loop(tmp_path: Path) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text(
        "partitions:\n  - name: default\n    queues:\n"
        "      - {name: a, resources: {guaranteed: &g {memory: 1Gi, vcore: 1}}}\n"
        "      - {name: b, resources: {guaranteed: *g}}\n"
    )
    part = load_config(path).partition("default")
    assert part.leaf("root.a") == part.leaf("root.a") and part.leaf("root.b") is not None
    assert parse_config({"partitions": [partition_raw(queue("a"))]}).warnings == ()


def test_a_partition_config_a_thousand_levels_deep_in_a_trace_is_a_bad_line() -> None:
    line = '{"type": "partition_config", "config": {"queues": [' + '{"name": "q", "queues": [' * 1000
    line += '{"name": "leaf"}' + "]}" * 1000 + "]}}"
    (item,) = decode_feed_lines([line], "trace.jsonl")
    assert isinstance(item, BadInput) and str(item) == "trace.jsonl:1: nested too deeply to decode"
