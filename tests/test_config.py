"""queues.yaml parsing and validation: defaults, quantities, and errors that name where and why."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from sniper.core import config as config_module
from sniper.core.config import (
    AdmissionConfig,
    ConfigError,
    PreemptionConfig,
    ReservationConfig,
    load_config,
    parse_config,
    parse_partition,
    partition_to_raw,
)
from tests.core_support import partition_raw, queue


def _full() -> dict[str, Any]:
    """The example in architecture: Configuration."""
    return {
        "partitions": [
            {
                "name": "default",
                "nodesortpolicy": {"type": "binpacking"},
                "preemption": {
                    "policy": "sniper",
                    "interval": 1.0,
                    "total_preemption_per_round": 0.1,
                    "max_ignored_over_capacity": 0.1,
                    "natural_termination_factor": 0.2,
                    "grace": 15.0,
                    "observe_only": False,
                    "mask_ttl": 30.0,
                    "min_missed_opportunities": 1,
                    "victim_cost": "running_time",
                },
                "queues": [
                    {
                        "name": "root",
                        "queues": [
                            {
                                "name": "a",
                                "resources": {
                                    "guaranteed": {"memory": "320Gi", "vcore": 80},
                                    "max": {"memory": "640Gi", "vcore": "160000m"},
                                },
                                "properties": {
                                    "application.sort.policy": "fifo",
                                    "priority.offset": "10",
                                    "preemption.policy": "default",
                                },
                            },
                            {"name": "b", "resources": {"guaranteed": {"memory": 343597383680, "vcore": "80000m"}}},
                        ],
                    }
                ],
            }
        ]
    }


def test_the_architecture_example_parses() -> None:
    config = parse_config(_full())
    part = config.partition("default")
    assert part.node_sort_policy == "binpacking"
    assert part.preemption.interval == 1.0
    assert part.preemption.policy == "sniper"
    assert [q.path for q in part.queues()] == ["root", "root.a", "root.b"]
    a = part.leaf("root.a")
    b = part.leaf("root.b")
    assert a is not None and b is not None
    assert a.priority_offset == 10
    assert a.max == {"memory": 655360, "vcore": 160000}
    assert a.guaranteed == {"memory": 320 * 1024, "vcore": 80_000}  # 320 GiB in MiB, 80 cores in milli-cores
    assert b.guaranteed == a.guaranteed  # the same in bytes and milli-cores
    assert b.max is None
    assert part.leaf("root") is None  # not a leaf
    with pytest.raises(ConfigError, match="no partition named 'x'"):
        config.partition("x")


def test_defaults_are_yarns() -> None:
    part = parse_partition({"queues": [{"name": "root", "queues": [{"name": "a"}]}]})
    assert part.name == "default"
    assert part.node_sort_policy == "binpacking"
    assert part.preemption == PreemptionConfig()
    assert part.preemption.interval == 3.0
    assert part.preemption.grace == 15.0
    leaf = part.leaf("root.a")
    assert leaf is not None
    assert (leaf.sort_policy, leaf.priority_offset, leaf.preemption_policy) == ("fifo", 0, "default")
    assert leaf.guaranteed == {} and leaf.max is None


def test_round_trip_through_partition_to_raw() -> None:
    part = parse_config(_full()).partitions[0]
    raw = partition_to_raw(part)
    assert parse_partition(raw) == part
    assert parse_partition(copy.deepcopy(raw)) == parse_partition(raw)


def test_a_zero_in_max_means_none_of_that_resource() -> None:
    """YuniKorn: a resource set to 0 in ``max`` is unavailable to the queue; a missing name is unlimited."""
    part = parse_partition(partition_raw(queue("a", maximum={"memory": "8Gi", "gpu": 0})))
    leaf = part.leaf("root.a")
    assert leaf is not None
    assert leaf.max == {"memory": 8192, "gpu": 0}
    assert parse_partition(partition_to_raw(part)) == part


def _with_leaf(**leaf: Any) -> dict[str, Any]:
    return partition_raw(queue("a", **leaf))


def _err(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_partition(raw)
    return str(info.value)


BAD_PARTITIONS: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown partition key",
        {**partition_raw(queue("a")), "nodesort": "fair"},
        "partition default: unknown key 'nodesort' (did you mean 'nodesortpolicy'?)",
    ),
    (
        "unknown queue key",
        partition_raw({"name": "a", "capacity": 10}),
        "queue root.a: unknown key 'capacity'; allowed: name, parent, queues",
    ),
    (
        "unknown resources key",
        partition_raw({"name": "a", "resources": {"min": {"memory": 1}}}),
        "queue root.a.resources: unknown key 'min'; allowed: guaranteed, max",
    ),
    (
        "unknown preemption key",
        {**partition_raw(queue("a")), "preemption": {"policy": "sniper", "delay": 5}},
        "partition default.preemption: unknown key 'delay'; allowed: policy, interval,",
    ),
    (
        "child guaranteed over parent's",
        partition_raw(queue("p", queue("x", guaranteed={"memory": 200}), guaranteed={"memory": 100})),
        "queue root.p.x: guaranteed memory 200 MiB exceeds parent root.p's guaranteed memory 100 MiB",
    ),
    (
        "children's guarantees add up over parent's",
        partition_raw(
            queue(
                "p",
                queue("x", guaranteed={"memory": 60}),
                queue("y", guaranteed={"memory": 60}),
                guaranteed={"memory": 100},
            )
        ),
        "queue root.p: children's guaranteed memory add up to 120 MiB, more than its own 100 MiB",
    ),
    (
        "max below guaranteed",
        _with_leaf(guaranteed={"memory": "8Gi"}, maximum={"memory": "4Gi"}),
        "queue root.a: max memory 4 GiB is below guaranteed memory 8 GiB",
    ),
    (
        "zero max below guaranteed",
        _with_leaf(guaranteed={"gpu": 1}, maximum={"gpu": 0}),
        "queue root.a: max gpu 0 GPUs is below guaranteed gpu 1 GPU",
    ),
    (
        "child max over parent's",
        partition_raw(queue("p", queue("x", maximum={"vcore": 9000}), maximum={"vcore": 8000})),
        "queue root.p.x: max vcore 9 cores exceeds parent root.p's max vcore 8 cores",
    ),
    (
        "duplicate sibling names",
        partition_raw(queue("a"), queue("a")),
        "queue root: duplicate child queue name 'a'",
    ),
    (
        "dotted queue name",
        partition_raw(queue("a.b")),
        "queue root.queues[0].name: 'a.b' is not a queue name (1 to 64 letters",
    ),
    ("empty queue name", partition_raw({"name": ""}), "'' is not a queue name"),
    ("queue name with markup", partition_raw({"name": "[/]"}), "'[/]' is not a queue name"),
    ("queue name too long", partition_raw({"name": "q" * 65}), "is not a queue name (1 to 64"),
    (
        "a root among other top queues",
        {"name": "default", "queues": [{"name": "root"}, {"name": "other"}]},
        "partition default.queues: a queue named 'root' must be the only queue at the top",
    ),
    ("no queues", {"name": "default", "queues": []}, "partition default.queues: expected `array` of length >= 1"),
    (
        "bad node sort policy",
        partition_raw(queue("a"), node_sort="spread"),
        "partition default.nodesortpolicy.type: 'spread' is not one of binpacking, fair",
    ),
    (
        "bad app sort policy",
        partition_raw(queue("a", application_sort_policy="lifo")),
        "queue root.a.application.sort.policy: 'lifo' is not one of fifo, fair, priority",
    ),
    (
        "bad queue preemption policy",
        partition_raw(queue("a", preemption_policy="never")),
        "queue root.a.preemption.policy: 'never' is not one of default, fence, disabled",
    ),
    (
        "bad partition preemption policy",
        partition_raw(queue("a"), policy="shotgun"),
        "partition default.preemption.policy: 'shotgun' is not one of sniper, proportional, none",
    ),
    (
        "bad victim cost",
        {**partition_raw(queue("a")), "preemption": {"victim_cost": "random"}},
        "partition default.preemption.victim_cost: 'random' is not one of running_time,",
    ),
    (
        "priority offset not an integer",
        partition_raw(queue("a", priority_offset="high")),
        "queue root.a.priority.offset: 'high' is not an integer",
    ),
    (
        "priority offset infinite",
        partition_raw(queue("a", priority_offset=float("inf"))),
        "queue root.a.priority.offset: inf is not an integer",
    ),
    (
        "priority offset past 32 bits",
        partition_raw(queue("a", priority_offset=10**400)),
        "queue root.a.priority.offset: 1000000000000000000000000000000000000000 is outside -2^31..2^31-1",
    ),
    (
        "priority offset below 32 bits",
        partition_raw(queue("a", priority_offset=-(2**31) - 1)),
        "queue root.a.priority.offset: -2147483649 is outside -2^31..2^31-1",
    ),
    (
        "admission bound past 2^53",
        {**partition_raw(queue("a")), "admission": {"max_containers": 10**400}},
        "partition default.admission.max_containers: expected `int` <= 9007199254740992",
    ),
    (
        "priority offset boolean",
        partition_raw(queue("a", priority_offset=True)),
        "queue root.a.priority.offset: True is not an integer",
    ),
    (
        "bad quantity",
        _with_leaf(guaranteed={"memory": "lots"}),
        "queue root.a.guaranteed: memory: cannot parse quantity 'lots'",
    ),
    (
        "negative quantity",
        _with_leaf(maximum={"vcore": -1}),
        "queue root.a.max: vcore: negative quantity '-1m'",
    ),
    (
        "share out of range",
        {**partition_raw(queue("a")), "preemption": {"total_preemption_per_round": 1.5}},
        "partition default.preemption.total_preemption_per_round: expected `float` <= 1.0",
    ),
    (
        "interval zero",
        {**partition_raw(queue("a")), "preemption": {"interval": 0}},
        "partition default.preemption.interval: expected `float` > 0.0",
    ),
    (
        "boolean expected",
        {**partition_raw(queue("a")), "preemption": {"observe_only": "yes"}},
        "partition default.preemption.observe_only: expected `bool`, got `str`",
    ),
    (
        "integer expected",
        {**partition_raw(queue("a")), "preemption": {"min_missed_opportunities": 1.5}},
        "partition default.preemption.min_missed_opportunities: expected `int`, got `float`",
    ),
    (
        "resources not a mapping",
        partition_raw({"name": "a", "resources": [1, 2]}),
        "queue root.a.resources: expected `object | null`, got `array`",
    ),
    (
        "children not a list",
        partition_raw({"name": "a", "queues": {"name": "b"}}),
        "queue root.a.queues: expected `array`, got `object`",
    ),
]


@pytest.mark.parametrize(("raw", "message"), [c[1:] for c in BAD_PARTITIONS], ids=[c[0] for c in BAD_PARTITIONS])
def test_invalid_partitions_are_refused_with_a_clear_reason(raw: dict[str, Any], message: str) -> None:
    assert message in _err(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "config: object missing required field `partitions`"),
        ({"partitions": []}, "config.partitions: expected `array` of length >= 1"),
        ({"partitions": [partition_raw(queue("a"))], "extra": 1}, "config: unknown key 'extra'"),
        (
            {"partitions": [partition_raw(queue("a")), partition_raw(queue("b"))]},
            "duplicate partition name(s) default",
        ),
        ([1, 2], "config: expected a mapping, got list"),
    ],
)
def test_invalid_configs_are_refused(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert message in str(info.value)


def test_hierarchy_rules_hold_only_where_both_sides_name_the_resource() -> None:
    """A max that does not name a resource leaves it unlimited; guarantees of other names are fine."""
    raw = partition_raw(
        queue(
            "p",
            queue("x", guaranteed={"vcore": 4000}, maximum={"memory": 100}),
            guaranteed={"memory": 50},
            maximum={"vcore": 8000},
        )
    )
    part = parse_partition(raw)
    leaf = part.leaf("root.p.x")
    assert leaf is not None
    assert leaf.guaranteed == {"vcore": 4000}


def test_with_policy() -> None:
    part = parse_partition(partition_raw(queue("a")))
    assert part.with_policy("proportional").preemption.policy == "proportional"
    assert part.preemption.policy == "none"  # frozen: the original is unchanged
    with pytest.raises(ConfigError, match="unknown preemption policy 'x'"):
        part.with_policy("x")


def test_load_config_from_yaml(tmp_path: Path) -> None:
    good = tmp_path / "queues.yaml"
    good.write_text(yaml.safe_dump(_full()))
    assert load_config(good).partitions[0].leaf("root.a") is not None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"partitions: [\n", "not valid YAML"),
        (b"\xff\xfe\x00garbage", "not UTF-8 text"),
        (b"- just\n- a list\n", "config: expected a mapping, got list"),
        (b"partitions:\n  - name: default\n    queues: [{name: root, queues: [{name: a, colour: red}]}]\n", "colour"),
    ],
)
def test_load_config_errors_name_the_file_or_the_key(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "queues.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert message in str(info.value)


def _doc_defaults(section: str) -> dict[str, str]:
    """``key -> default`` of the first ``| key | default |`` table under ``## section`` of docs/config.md."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "config.md").read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 2:
            rows[cells[0].strip("`")] = cells[1]
        elif rows:
            break  # the first table only
    assert rows, f"no table of defaults under '## {section}'"
    return rows


def _doc_value(cell: str) -> object:
    """A documented default as the code would hold it: ``none`` is None, a backticked literal is YAML."""
    if cell.startswith("none"):
        return None
    assert cell.startswith("`") and cell.endswith("`"), cell
    return yaml.safe_load(cell.strip("`"))


@pytest.mark.parametrize(
    ("section", "settings", "extra"),
    [
        ("Preemption settings", PreemptionConfig(), {"enabled": True}),
        ("Node reservations", ReservationConfig(), {}),
        ("Admission bounds", AdmissionConfig(), {}),
    ],
)
def test_every_default_docs_config_md_states_is_the_codes(
    section: str, settings: object, extra: dict[str, object]
) -> None:
    documented = {key: _doc_value(cell) for key, cell in _doc_defaults(section).items()}
    code = {**{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}, **extra}  # type: ignore[arg-type]
    assert documented == code


def test_the_documented_queue_and_partition_defaults_are_the_parsers() -> None:
    part = parse_partition({"queues": [{"name": "a"}]})
    leaf = part.leaf("root.a")
    assert leaf is not None
    properties = {key: _doc_value(cell) for key, cell in _doc_defaults("Queue properties").items()}
    assert properties == {
        "application.sort.policy": leaf.sort_policy,
        "priority.offset": leaf.priority_offset,
        "preemption.policy": leaf.preemption_policy,
        "preemption.delay": leaf.preemption_delay or None,  # none: no delay
        "quota.preemption.delay": leaf.quota_preemption_delay or None,  # none: never quota preempted
        "fairshare.halflife": leaf.fairshare_halflife or None,  # none: no history
        "preemption.min.runtime": leaf.preemption_min_runtime or None,  # none: any age may go
        "queue.state": "stopped" if leaf.stopped else "running",
    }
    partition = _doc_defaults("Partitions")
    assert (_doc_value(partition["name"]), _doc_value(partition["nodesortpolicy"])) == (
        part.name,
        part.node_sort_policy,
    )


def test_the_documented_defaults_of_a_limits_entry_are_the_parsers() -> None:
    documented = {key: _doc_value(cell) for key, cell in _doc_defaults("User, group and application limits").items()}
    raw = config_module._RawLimit()
    assert documented == {key: getattr(raw, key) for key in raw.__struct_fields__}
