"""A YuniKorn config means the same in Sniper: its documented examples load with the quantities YuniKorn
reads, keys Sniper does not implement are named in warnings, and hostile input is a clear error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sniper.core.config import (
    MAX_NESTING,
    ConfigError,
    PlacementFilter,
    PlacementRuleConfig,
    load_config,
    parse_config,
    parse_partition,
    partition_to_raw,
)
from sniper.messages.codec import BadInput, decode_feed_lines
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
    assert config.partition("default").placement_rules == (PlacementRuleConfig(name="provided", create=True),)
    assert config.warnings == (
        "queue root: submitacl, childtemplate not implemented by Sniper yet; accepted and ignored",
        "queue root.parent: childtemplate not implemented by Sniper yet; accepted and ignored",
        "queue root.parent: parent: true without child queues; Sniper creates no dynamic queues, so it is a leaf",
        "queue root.notemplate: parent: true without child queues; Sniper creates no dynamic queues, so it is a leaf",
    )


def test_the_parent_queue_mapping_example_loads() -> None:
    config = load_config(DATA / "resource_quota_mgmt_parent.yaml")
    assert [q.path for q in config.partition("default").queues()] == ["root", "root.production", "root.development"]
    assert config.partition("default").placement_rules == (
        PlacementRuleConfig(
            name="tag",
            create=True,
            value="namespace",
            parent=PlacementRuleConfig(name="tag", value="namespace.parentqueue"),
        ),
    )
    assert not [w for w in config.warnings if "placementrules" in w]


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
    assert part.preemption.quotapreemptionenabled
    assert part.warnings == (
        "partition default: usergroupresolver not implemented by Sniper yet; accepted and ignored",
        "queue root.a: adminacl not implemented by Sniper yet; accepted and ignored",
        "queue root.a.properties: priority.policy not implemented by Sniper; ignored",
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


def test_yunikorn_cores_own_example_loads_and_flags_its_pre_1_0_numbers() -> None:
    """yunikorn-core's config/queues.yaml: a free-form property, ACLs and placement rules are named in
    warnings, and memory written in pre-1.0 units (500000 next to 50000 cores) gets a sanity warning."""
    config = load_config(DATA / "core_queues.yaml")
    assert [p.name for p in config.partitions] == ["default", "gpu"]
    gpu = config.partition("gpu")
    assert {q.path: q.max_applications for q in gpu.queues()}["root.production"] == 10
    test = gpu.leaf("root.test")
    assert test is not None and test.limits[0].max_resources == {"memory": 1, "vcore": 10_000, "gpu": 50}
    warnings = config.warnings
    assert "queue root.test.properties: 'x' not used by Sniper; ignored" in warnings
    user_rule, provided_rule = config.partition("default").placement_rules
    assert user_rule == PlacementRuleConfig(
        name="user",
        create=True,
        parent=PlacementRuleConfig(name="provided"),
        filter=PlacementFilter(groups=("sandbox",)),
    )
    assert provided_rule == PlacementRuleConfig(name="provided", create=True)
    assert not [w for w in warnings if "placementrules" in w]
    sanity = [w for w in warnings if "pre-1.0 YuniKorn number" in w]
    assert [w.split(":")[0] for w in sanity] == [
        "queue root.limits[0].maxresources",
        "queue root.advertisement.guaranteed",
        "queue root.advertisement.max",
        "queue root.search.guaranteed",
        "queue root.search.max",
        "queue root.sandbox.guaranteed",
        "queue root.sandbox.max",
        "queue root.test.limits[0].maxresources",
    ]
    assert "memory 500000 is 500,000 bytes beside 50,000 cores" in sanity[1]
    assert "e.g. memory: 500000M, vcore: 50000m" in sanity[1]


@pytest.mark.parametrize(
    ("resources", "flagged"),
    [
        ({"memory": 500_000, "vcore": 50_000}, True),  # 0.5 MB beside 50,000 cores
        ({"memory": "1000", "vcore": "1"}, True),  # under a MiB on its own
        ({"memory": 64 * 2**30, "vcore": 16}, False),  # 64 GiB in bytes beside 16 cores
        ({"memory": "500000M", "vcore": "50000m"}, False),  # units written: no guess
        ({"memory": 2 * 2**20, "vcore": 8}, True),  # 2 MiB for 8 cores: under a MiB a core
    ],
)
def test_memory_that_reads_as_a_pre_1_0_number_gets_a_sanity_warning(resources: dict[str, Any], flagged: bool) -> None:
    part = parse_partition({"queues": [{"name": "a", "resources": {"guaranteed": resources}}]})
    assert any("pre-1.0 YuniKorn number" in w for w in part.warnings) is flagged


def test_unknown_properties_are_accepted_with_a_warning_that_names_them() -> None:
    """YuniKorn's queue properties are free-form: an unknown one loads, named, with a hint when it is close."""
    part = parse_partition(
        {"queues": [{"name": "a", "properties": {"application.sortpolicy": "fifo", "team.owner": "sue"}}]}
    )
    assert part.warnings == (
        "queue root.a.properties: 'application.sortpolicy', 'team.owner' not used by Sniper; ignored "
        "(did you mean 'application.sort.policy'?)",
    )
    assert part.leaf("root.a") is not None


@pytest.mark.parametrize(
    ("written", "seconds", "warned"),
    [
        ("10s", 10.0, False),
        ("1m30s", 90.0, False),
        ("1.5h", 5400.0, False),
        ("250ms", 0.25, False),
        ("30", 30.0, True),  # no unit: not a Go duration, YuniKorn's default applies
        (45, 30.0, True),
        ("-1s", 30.0, True),  # not positive: YuniKorn's default
        ("0s", 30.0, True),
        ("soon", 30.0, True),
    ],
)
def test_preemption_delay_is_read_as_yunikorn_reads_it(written: object, seconds: float, warned: bool) -> None:
    part = parse_partition({"queues": [{"name": "a", "properties": {"preemption.delay": written}}]})
    leaf = part.leaf("root.a")
    assert leaf is not None and leaf.preemption_delay == seconds
    assert any("preemption.delay" in w and "YuniKorn's default 30s applies" in w for w in part.warnings) is warned


def test_preemption_delay_is_inherited_and_survives_a_round_trip() -> None:
    """As YuniKorn's properties, a parent's delay is its children's unless they set their own; none set means none."""
    raw = {
        "queues": [
            {"name": "p", "properties": {"preemption.delay": "20s"}, "queues": [{"name": "x"}, {"name": "y"}]},
            {"name": "q"},
        ]
    }
    raw["queues"][0]["queues"][1]["properties"] = {"preemption.delay": "250ms"}  # type: ignore[index]
    part = parse_partition(raw)
    delays = {q.path: q.preemption_delay for q in part.queues()}
    assert delays == {"root": 0.0, "root.p": 20.0, "root.p.x": 20.0, "root.p.y": 0.25, "root.q": 0.0}
    assert parse_partition(partition_to_raw(part)) == part


def _config_map(queues_yaml: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "yunikorn-configs", "namespace": "yunikorn"},
        "data": {"queues.yaml": queues_yaml, **data},
    }


def test_a_kubernetes_config_map_loads_as_its_queues_yaml(tmp_path: Path) -> None:
    """YuniKorn is configured by the ConfigMap yunikorn-configs; its queues.yaml is the config, its other
    keys are scheduler settings Sniper names in a warning."""
    text = (DATA / "core_queues.yaml").read_text()
    path = tmp_path / "yunikorn-configs.yaml"
    path.write_text(yaml.safe_dump(_config_map(text, **{"service.schedulingInterval": "1s", "log.level": "INFO"})))
    config = load_config(path)
    assert config == load_config(DATA / "core_queues.yaml")
    assert config.warnings[0] == (
        f"{path}: ConfigMap yunikorn-configs: data log.level, service.schedulingInterval not used by Sniper; ignored"
    )


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"apiVersion": "v1", "kind": "ConfigMap", "data": {"log.level": "INFO"}}, "no data key 'queues.yaml'"),
        ({**_config_map("partitions: ["), "apiVersion": "v1"}, "data.queues.yaml: not valid YAML"),
        ({**_config_map("x"), "apiVersion": "apps/v1"}, "apiVersion 'apps/v1' is not v1"),
        ({"apiVersion": "v1", "kind": "ConfigMap", "data": {"queues.yaml": 7}}, "data.queues.yaml is not text"),
    ],
)
def test_a_config_map_without_a_usable_queues_yaml_is_a_clear_error(
    tmp_path: Path, doc: dict[str, Any], message: str
) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    """YAML keys are unique: a second ``guaranteed`` of a nested queue is an error naming both lines,
    never silently the one that counts."""
    path = tmp_path / "twice.yaml"
    path.write_text(
        "partitions:\n"
        "  - name: default\n"
        "    queues:\n"
        "      - name: a\n"
        "        resources:\n"
        "          guaranteed: {memory: 1Gi}\n"
        "          guaranteed: {memory: 2Gi}\n"
    )
    with pytest.raises(ConfigError, match=r"twice.yaml: key 'guaranteed' is given twice \(lines 6 and 7\)"):
        load_config(path)


def test_a_config_too_large_to_support_is_refused_before_it_is_built_and_says_why(tmp_path: Path) -> None:
    """Over 4 MiB of text, or 200,000 values as written without an alias, is refused for its size, not
    blamed on aliases."""
    big = tmp_path / "big.yaml"
    queues = "".join(f"      - {{name: q{i}, resources: {{guaranteed: {{memory: 1Gi}}}}}}\n" for i in range(90_000))
    big.write_text("partitions:\n  - name: default\n    queues:\n" + queues)
    with pytest.raises(ConfigError, match=r"characters; a queue configuration of more than 4,194,304") as info:
        load_config(big)
    many = tmp_path / "many.yaml"
    many.write_text(
        "partitions:\n  - name: default\n    queues:\n      - name: a\n        properties: {x: ["
        + "1," * 210_000
        + "1]}\n"
    )
    with pytest.raises(ConfigError, match="more than 200000 values as written") as many_info:
        load_config(many)
    assert "alias" not in str(info.value) + str(many_info.value)
