"""The YuniKorn-style ``queues.yaml``: parsing and validation into immutable config objects.

Invariants of a parsed config: names are unique among siblings and partitions, the root queue is
``root``, every ``max`` is at least its ``guaranteed``, children's guarantees fit in their parent's,
and no child's ``max`` exceeds its parent's. Errors name the offending path and key.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sniper.core import resources as res
from sniper.core.resources import Resource

NODE_SORT_POLICIES: tuple[str, ...] = ("binpacking", "fair")
APP_SORT_POLICIES: tuple[str, ...] = ("fifo", "fair", "priority")
QUEUE_PREEMPTION_POLICIES: tuple[str, ...] = ("default", "fence", "disabled")
POLICIES: tuple[str, ...] = ("sniper", "proportional", "none")
VICTIM_COSTS: tuple[str, ...] = ("running_time", "priority", "priority_then_running_time")

SORT_POLICY_KEY = "application.sort.policy"
PRIORITY_OFFSET_KEY = "priority.offset"
PREEMPTION_POLICY_KEY = "preemption.policy"
KNOWN_PROPERTIES = (SORT_POLICY_KEY, PRIORITY_OFFSET_KEY, PREEMPTION_POLICY_KEY)


class ConfigError(ValueError):
    """An invalid configuration; the message names where and why."""


@dataclasses.dataclass(frozen=True, slots=True)
class PreemptionConfig:
    policy: str = "sniper"
    interval: float = 3.0  # YARN's monitoring_interval (3000 ms)
    total_preemption_per_round: float = 0.1
    max_ignored_over_capacity: float = 0.1
    natural_termination_factor: float = 0.2
    grace: float = 15.0  # YARN's max_wait_before_kill (15000 ms)
    observe_only: bool = False
    mask_ttl: float = 30.0
    min_missed_opportunities: int = 1
    victim_cost: str = "running_time"
    intra_queue: bool = False
    max_candidate_nodes: int | None = None  # opt-in cap on nodes whose set is costed (default: every node)
    reservation_timeout: float = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class QueueConfig:
    name: str
    path: str
    guaranteed: Resource
    max: Resource | None
    sort_policy: str = "fifo"
    priority_offset: int = 0
    preemption_policy: str = "default"
    children: tuple[QueueConfig, ...] = ()

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def walk(self) -> list[QueueConfig]:
        """This queue and its descendants, depth-first pre-order."""
        out = [self]
        for child in self.children:
            out.extend(child.walk())
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionConfig:
    name: str
    root: QueueConfig
    node_sort_policy: str = "binpacking"
    preemption: PreemptionConfig = dataclasses.field(default_factory=PreemptionConfig)

    def queues(self) -> list[QueueConfig]:
        return self.root.walk()

    def leaf(self, path: str) -> QueueConfig | None:
        for q in self.root.walk():
            if q.path == path and q.is_leaf:
                return q
        return None

    def with_policy(self, policy: str) -> PartitionConfig:
        if policy not in POLICIES:
            raise ConfigError(f"unknown preemption policy {policy!r}; expected one of {', '.join(POLICIES)}")
        return dataclasses.replace(self, preemption=dataclasses.replace(self.preemption, policy=policy))


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulerConfig:
    partitions: tuple[PartitionConfig, ...]

    def partition(self, name: str) -> PartitionConfig:
        for p in self.partitions:
            if p.name == name:
                return p
        raise ConfigError(f"no partition named {name!r}")


def _check_keys(raw: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}")


def _mapping(raw: object, where: str) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    return raw


def _choice(value: object, choices: tuple[str, ...], where: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


def _number(value: object, where: str, *, low: float = 0.0, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: {value!r} is not a number")
    number = float(value)
    if not (low <= number <= high) or not math.isfinite(number):
        raise ConfigError(f"{where}: {value!r} is outside [{low}, {high}]")
    return number


def _parse_preemption(raw: object, where: str) -> PreemptionConfig:
    data = _mapping(raw, where)
    fields = {f.name: f for f in dataclasses.fields(PreemptionConfig)}
    _check_keys(data, tuple(fields), where)
    values: dict[str, Any] = {}
    for key, value in data.items():
        at = f"{where}.{key}"
        default = fields[key].default
        if key == "policy":
            values[key] = _choice(value, POLICIES, at)
        elif key == "victim_cost":
            values[key] = _choice(value, VICTIM_COSTS, at)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{at}: {value!r} is not a boolean")
            values[key] = value
        elif key == "max_candidate_nodes":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{at}: must be at least 1 (or null: no cap)")
            values[key] = value
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{at}: {value!r} is not a non-negative integer")
            values[key] = value
        elif key in ("total_preemption_per_round", "natural_termination_factor"):
            values[key] = _number(value, at, low=0.0, high=1.0)
        else:
            values[key] = _number(value, at)
    cfg = PreemptionConfig(**values)
    if cfg.interval <= 0:
        raise ConfigError(f"{where}.interval: must be positive")
    return cfg


def _parse_queue(raw: object, parent_path: str | None, where: str) -> QueueConfig:
    data = _mapping(raw, where)
    _check_keys(data, ("name", "queues", "resources", "properties", "parent"), where)
    name = data.get("name")
    if not isinstance(name, str) or not name or "." in name:
        raise ConfigError(f"{where}: queue name must be a non-empty string without dots, got {name!r}")
    path = name if parent_path is None else f"{parent_path}.{name}"
    at = f"queue {path}"
    resources = _mapping(data.get("resources"), f"{at}.resources")
    _check_keys(resources, ("guaranteed", "max"), f"{at}.resources")
    try:
        guaranteed = res.parse_resource(_mapping(resources.get("guaranteed"), f"{at}.guaranteed"), f"{at}.guaranteed")
        max_raw = resources.get("max")
        # A zero in a max is kept: it means none of that resource (YuniKorn), unlike a missing name (no limit).
        maximum = (
            None if max_raw is None else res.parse_resource(_mapping(max_raw, f"{at}.max"), f"{at}.max", keep_zero=True)
        )
    except res.QuantityError as err:
        raise ConfigError(str(err)) from None
    props = _mapping(data.get("properties"), f"{at}.properties")
    _check_keys(props, KNOWN_PROPERTIES, f"{at}.properties")
    sort_policy = _choice(props.get(SORT_POLICY_KEY, "fifo"), APP_SORT_POLICIES, f"{at}.{SORT_POLICY_KEY}")
    preemption_policy = _choice(
        props.get(PREEMPTION_POLICY_KEY, "default"), QUEUE_PREEMPTION_POLICIES, f"{at}.{PREEMPTION_POLICY_KEY}"
    )
    offset_raw = props.get(PRIORITY_OFFSET_KEY, 0)
    try:
        if isinstance(offset_raw, bool):
            raise ValueError
        priority_offset = int(offset_raw)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{at}.{PRIORITY_OFFSET_KEY}: {offset_raw!r} is not an integer") from None
    children_raw = data.get("queues") or []
    if not isinstance(children_raw, list):
        raise ConfigError(f"{at}.queues: expected a list")
    children = tuple(_parse_queue(c, path, f"{at}.queues[{i}]") for i, c in enumerate(children_raw))
    seen: set[str] = set()
    for child in children:
        if child.name in seen:
            raise ConfigError(f"{at}: duplicate child queue name {child.name!r}")
        seen.add(child.name)
    queue = QueueConfig(
        name=name,
        path=path,
        guaranteed=guaranteed,
        max=maximum,
        sort_policy=sort_policy,
        priority_offset=priority_offset,
        preemption_policy=preemption_policy,
        children=children,
    )
    _validate_queue_resources(queue)
    return queue


def _validate_queue_resources(queue: QueueConfig) -> None:
    at = f"queue {queue.path}"
    if queue.max is not None:
        for k, g in queue.guaranteed.items():
            if k in queue.max and queue.max[k] < g:
                raise ConfigError(f"{at}: max {k}={queue.max[k]} is below guaranteed {k}={g}")
            if k not in queue.max and queue.max:
                # A max that names other resources but not this one leaves it unlimited: fine.
                continue
    children_guaranteed = res.total(c.guaranteed for c in queue.children)
    for child in queue.children:
        for k, g in child.guaranteed.items():
            if k in queue.guaranteed and g > queue.guaranteed[k]:
                raise ConfigError(
                    f"queue {child.path}: guaranteed {k}={g} exceeds parent {queue.path}'s guaranteed "
                    f"{k}={queue.guaranteed[k]}"
                )
        if queue.max is not None and child.max is not None:
            for k, m in child.max.items():
                if k in queue.max and m > queue.max[k]:
                    raise ConfigError(
                        f"queue {child.path}: max {k}={m} exceeds parent {queue.path}'s max {k}={queue.max[k]}"
                    )
    if queue.guaranteed:
        for k, g in children_guaranteed.items():
            if k in queue.guaranteed and g > queue.guaranteed[k]:
                raise ConfigError(
                    f"queue {queue.path}: children's guaranteed {k} add up to {g}, "
                    f"more than its own {queue.guaranteed[k]}"
                )


def parse_partition(raw: object, where: str = "partition") -> PartitionConfig:
    data = _mapping(raw, where)
    _check_keys(data, ("name", "queues", "nodesortpolicy", "preemption"), where)
    name = data.get("name", "default")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: partition name must be a non-empty string")
    at = f"partition {name}"
    node_sort = _mapping(data.get("nodesortpolicy"), f"{at}.nodesortpolicy")
    _check_keys(node_sort, ("type",), f"{at}.nodesortpolicy")
    node_sort_policy = _choice(node_sort.get("type", "binpacking"), NODE_SORT_POLICIES, f"{at}.nodesortpolicy.type")
    preemption = _parse_preemption(data.get("preemption"), f"{at}.preemption")
    queues_raw = data.get("queues")
    if not isinstance(queues_raw, list) or len(queues_raw) != 1:
        raise ConfigError(f"{at}.queues: expected a list holding exactly one queue, the root")
    root = _parse_queue(queues_raw[0], None, f"{at}.queues[0]")
    if root.name != "root":
        raise ConfigError(f"{at}: the top queue must be named 'root', got {root.name!r}")
    return PartitionConfig(name=name, root=root, node_sort_policy=node_sort_policy, preemption=preemption)


def parse_config(raw: object) -> SchedulerConfig:
    data = _mapping(raw, "config")
    _check_keys(data, ("partitions",), "config")
    parts_raw = data.get("partitions")
    if not isinstance(parts_raw, list) or not parts_raw:
        raise ConfigError("config.partitions: expected a non-empty list")
    partitions = tuple(parse_partition(p, f"partitions[{i}]") for i, p in enumerate(parts_raw))
    names = [p.name for p in partitions]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"config.partitions: duplicate partition name(s) {', '.join(dupes)}")
    return SchedulerConfig(partitions=partitions)


def load_config(path: str | Path) -> SchedulerConfig:
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text: {err}") from None
    return parse_config(raw)


def partition_to_raw(cfg: PartitionConfig) -> dict[str, Any]:
    """The inverse of :func:`parse_partition`: a JSON/YAML-ready mapping (for ``partition_config``)."""

    def queue(q: QueueConfig) -> dict[str, Any]:
        out: dict[str, Any] = {"name": q.name}
        resources: dict[str, Any] = {}
        if q.guaranteed:
            resources["guaranteed"] = dict(q.guaranteed)
        if q.max is not None:
            resources["max"] = dict(q.max)
        if resources:
            out["resources"] = resources
        out["properties"] = {
            SORT_POLICY_KEY: q.sort_policy,
            PRIORITY_OFFSET_KEY: str(q.priority_offset),
            PREEMPTION_POLICY_KEY: q.preemption_policy,
        }
        if q.children:
            out["queues"] = [queue(c) for c in q.children]
        return out

    return {
        "name": cfg.name,
        "nodesortpolicy": {"type": cfg.node_sort_policy},
        "preemption": dataclasses.asdict(cfg.preemption),
        "queues": [queue(cfg.root)],
    }
