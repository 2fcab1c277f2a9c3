"""The YuniKorn-style ``queues.yaml``: parsing and validation into immutable config objects.

A config means what it means to Apache YuniKorn 1.4+: the same keys, the same quantities (see
:func:`sniper.core.resources.parse_quantity`), a ``root`` queue inserted when the top level does not
name one. Shapes and ranges are checked by msgspec structs (unknown keys are refused); YuniKorn keys
Sniper does not implement, and queue properties it does not know (free-form in YuniKorn), are accepted
with a warning that names them. A file may be the Kubernetes ConfigMap that carries a ``queues.yaml``.
Invariants of a parsed config: names are unique among siblings and partitions, the root queue is
``root``, every ``max`` is at least its ``guaranteed``, children's guarantees fit in their parent's, no
child's ``max`` exceeds its parent's, no child's ``maxapplications`` exceeds its parent's, a limit's
``maxresources`` stays within its queue's ``max``, and the raw input is a finite tree of bounded depth.
Errors name the offending path and key.
"""

from __future__ import annotations

import dataclasses
import decimal
import difflib
import re
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml
from msgspec import Meta

from sniper.core import resources as res
from sniper.core.resources import Resource
from sniper.core.units import human, named

NODE_SORT_POLICIES: tuple[str, ...] = ("binpacking", "fair")
APP_SORT_POLICIES: tuple[str, ...] = ("fifo", "fair", "priority")
QUEUE_PREEMPTION_POLICIES: tuple[str, ...] = ("default", "fence", "disabled")
POLICIES: tuple[str, ...] = ("sniper", "proportional", "none")
VICTIM_COSTS: tuple[str, ...] = ("running_time", "lost_work", "priority", "priority_then_running_time")

SORT_POLICY_KEY = "application.sort.policy"
PRIORITY_OFFSET_KEY = "priority.offset"
PREEMPTION_POLICY_KEY = "preemption.policy"
PREEMPTION_DELAY_KEY = "preemption.delay"
MIN_RUNTIME_KEY = "preemption.min.runtime"
QUEUE_STATE_KEY = "queue.state"
QUEUE_STATES: tuple[str, ...] = ("running", "stopped")
QUOTA_PREEMPTION_DELAY_KEY = "quota.preemption.delay"
FAIRSHARE_HALFLIFE_KEY = "fairshare.halflife"
KNOWN_PROPERTIES = (
    SORT_POLICY_KEY,
    PRIORITY_OFFSET_KEY,
    PREEMPTION_POLICY_KEY,
    PREEMPTION_DELAY_KEY,
    MIN_RUNTIME_KEY,
    QUEUE_STATE_KEY,
    QUOTA_PREEMPTION_DELAY_KEY,
    FAIRSHARE_HALFLIFE_KEY,
)
# Queue properties YuniKorn documents and Sniper does not implement: accepted, with a warning. Any other
# property is free-form in YuniKorn too: accepted, with a warning that names it.
UNSUPPORTED_PROPERTIES = (
    "application.sort.priority",
    "priority.policy",
    "application.unschedasks.backoff",
    "application.unschedasks.backoff.delay",
)
# YuniKorn's ``preemption.delay`` when its value is not a positive Go duration (configs.DefaultPreemptionDelay).
YUNIKORN_PREEMPTION_DELAY = 30.0
# Go's time.ParseDuration units, in seconds.
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
CONFIG_MAP_KEY = "queues.yaml"  # the ConfigMap data key YuniKorn reads its queue configuration from
# A ``memory`` under this many bytes beside cores, or a byte per core ratio below it, is a pre-1.0 number.
SANE_MEMORY_BYTES = 2**20
# Resource names other schedulers spell differently: accepted as resources of their own, with a hint.
OTHER_SPELLINGS: dict[str, str] = {
    "vcores": res.VCORE,
    "cpu": res.VCORE,
    "cpus": res.VCORE,
    "mem": res.MEMORY,
    "memory-mb": res.MEMORY,
    "memory_mb": res.MEMORY,
}
# YuniKorn's rule for queue names: up to 64 of these characters, so never a dot.
QUEUE_NAME = r"^[a-zA-Z0-9_:#/@-]{1,64}$"
MAX_NESTING = 100  # containers (mappings and lists) inside one partition: about 48 queue levels
MAX_NODES = 200_000  # values inside one config, counting every use of a YAML alias
MAX_CONFIG_CHARS = 4 * 2**20  # a queues.yaml longer than this is refused before it is parsed
SECONDS_MAX = 1e9  # about 31 years: a longer time is a typo

PRIORITY_OFFSET_MAX = 2**31 - 1  # a queue's priority offset is a 32-bit integer, as the feed's priorities
COUNT_MAX = 2**53  # any count a configuration sets (past it a count no longer survives a JSON reader)

Seconds = Annotated[float, Meta(ge=0, le=SECONDS_MAX)]
Share = Annotated[float, Meta(ge=0, le=1)]


class ConfigError(ValueError):
    """An invalid configuration; the message names where and why."""


@dataclasses.dataclass(frozen=True, slots=True)
class PreemptionConfig:
    """A partition's ``preemption`` section; the annotations are the checks its keys get."""

    policy: str = "sniper"  # one of POLICIES
    interval: Annotated[float, Meta(gt=0, le=SECONDS_MAX)] = 3.0  # YARN's monitoring_interval (3000 ms)
    total_preemption_per_round: Share = 0.1
    max_ignored_over_capacity: Annotated[float, Meta(ge=0, le=1000)] = 0.1
    natural_termination_factor: Share = 0.2
    grace: Seconds = 15.0  # YARN's max_wait_before_kill (15000 ms)
    observe_only: bool = False
    mask_ttl: Seconds = 30.0
    min_missed_opportunities: Annotated[int, Meta(ge=0, le=COUNT_MAX)] = 1
    victim_cost: str = "running_time"  # one of VICTIM_COSTS
    intra_queue: bool = False
    required_node: bool = True  # asks that require a node preempt on it (YuniKorn's required-node preemptor)
    # an opt-in cap on nodes costed per placement
    max_candidate_nodes: Annotated[int, Meta(ge=1, le=COUNT_MAX)] | None = None
    reservation_timeout: Seconds = 60.0
    # YuniKorn's quota preemption: a queue above its ``max`` for its ``quota.preemption.delay`` loses containers
    quotapreemptionenabled: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ReservationConfig:
    """A partition's ``reservation`` section: YARN-style node reservations (:mod:`sniper.core.node_reservation`)."""

    enabled: bool = True  # YARN reserves always; YuniKorn's ``disableReservation`` is the opposite switch
    timeout: Seconds = 60.0  # a node reservation not fulfilled by then ends (reason ``timeout``)


@dataclasses.dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """A partition's ``admission`` section: what one ask, one app and the whole partition may hold
    (containers pending plus running), and how far ahead of the partition's clock a feed event may be
    stamped. Events over a bound are refused with the reason, so no input grows a partition without end."""

    # Sized to what one core serves with its event loop never held past a heartbeat (docs/benchmarks.md,
    # ``sniper bench bigpartition``): 100,000 single-container apps on two shared vCPUs.
    max_pending_per_ask: Annotated[int, Meta(ge=1, le=COUNT_MAX)] = 100_000  # an ask's count
    # running plus still asked for, per app, then per partition
    max_containers_per_app: Annotated[int, Meta(ge=1, le=COUNT_MAX)] = 100_000
    max_containers: Annotated[int, Meta(ge=1, le=COUNT_MAX)] = 100_000
    max_apps: Annotated[int, Meta(ge=1, le=COUNT_MAX)] = 100_000  # apps in the partition, from added to removed
    max_clock_skew: Seconds = 86_400.0  # a feed event stamped further ahead of the clock is refused


MAX_OVERCOMMIT_FRACTION = 1.0  # YARN-1011's thresholds are fractions of a node's capacity in (0, 1]
Fraction = Annotated[float, Meta(gt=0, le=MAX_OVERCOMMIT_FRACTION)]


@dataclasses.dataclass(frozen=True, slots=True)
class OvercommitConfig:
    """A partition's ``overcommit`` section (YARN-1011, :mod:`sniper.core.overcommit`): per resource, the
    share of a node's capacity its measured utilization must stay below for an opportunistic container
    to be placed beyond its allocated room (T_alloc), and the share above which opportunistic
    containers there are killed (T_preempt). Every resource ``allocate_below`` names has a
    ``preempt_above`` at least as high."""

    allocate_below: dict[str, float]
    preempt_above: dict[str, float]


MAX_TOPOLOGY_LEVELS = 16  # zone, block, rack, host: real hierarchies have a handful


@dataclasses.dataclass(frozen=True, slots=True)
class TopologyConfig:
    """A partition's ``topology`` section (:mod:`sniper.core.topology`): the node labels naming each
    node's domain at each level, outermost first, each named once."""

    levels: tuple[str, ...]


WILDCARD = "*"


@dataclasses.dataclass(frozen=True, slots=True)
class LimitConfig:
    """One entry of a queue's ``limits`` (YuniKorn): who it covers and what they may hold together.

    ``users`` and ``groups`` name whom it covers; ``*`` covers every user (or group) not named by
    another entry of the queue, each one separately. ``None`` leaves that bound unlimited.
    """

    description: str
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    max_resources: Resource | None = None
    max_applications: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class QueueConfig:
    name: str
    path: str
    guaranteed: Resource
    max: Resource | None
    sort_policy: str = "fifo"
    priority_offset: int = 0
    preemption_policy: str = "default"
    preemption_delay: float = 0.0  # seconds an ask waits before it may preempt (YuniKorn's ``preemption.delay``)
    # Seconds a container of the queue runs before it may be a victim (``preemption.min.runtime``; 0: none).
    preemption_min_runtime: float = 0.0
    stopped: bool = False  # ``queue.state: stopped`` here or above: admits no new app, runs the ones it has
    # seconds above ``max`` before the queue's own containers are preempted (``quota.preemption.delay``; 0: never)
    quota_preemption_delay: float = 0.0
    # seconds in which past usage loses half its weight in the order above guarantees (0: no history)
    fairshare_halflife: float = 0.0
    children: tuple[QueueConfig, ...] = ()
    max_applications: int | None = None  # running apps in this queue's subtree
    limits: tuple[LimitConfig, ...] = ()
    # Takes SLO reservations (YARN's reservable PlanQueue, core.slo_plan): a leaf in the configuration,
    # a parent of its dynamic reservation queues in the partition's state.
    reservable: bool = False
    # Written ``parent: true``: a leaf to the core while it has no children, a parent to placement
    # rules, which may add children under it (sniper.kubernetes.placement) and never place an app in it.
    declared_parent: bool = False

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def walk(self) -> list[QueueConfig]:
        """This queue and its descendants, depth-first pre-order."""
        out = [self]
        for child in self.children:
            out.extend(child.walk())
        return out


PLACEMENT_RULES: tuple[str, ...] = ("provided", "user", "fixed", "tag")


@dataclasses.dataclass(frozen=True, slots=True)
class PlacementFilter:
    """A placement rule's ``filter``: the rule applies to the users and groups it lists (``allow``, the
    default) or to everyone else (``deny``). A list of exactly one entry with a regular expression
    character (``^$*+?()[{}|``) is a regular expression, as YuniKorn reads it; no users and no groups:
    everyone."""

    deny: bool = False
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class PlacementRuleConfig:
    """One of YuniKorn's ``placementrules`` (``provided``, ``user``, ``fixed``, ``tag``, names in any case):
    ``value`` is the queue of ``fixed`` and the tag of ``tag``; ``parent`` gives the parent queue of an
    unqualified name; ``create`` lets the rule name a queue the configuration does not have yet. Sniper's
    core never reads them (every ``app_added`` names its queue): the Kubernetes shim applies them
    (:mod:`sniper.kubernetes.placement`)."""

    name: str  # one of PLACEMENT_RULES
    create: bool = False
    value: str = ""
    parent: PlacementRuleConfig | None = None
    filter: PlacementFilter = PlacementFilter()


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionConfig:
    name: str
    root: QueueConfig
    node_sort_policy: str = "binpacking"
    preemption: PreemptionConfig = dataclasses.field(default_factory=PreemptionConfig)
    reservation: ReservationConfig = dataclasses.field(default_factory=ReservationConfig)
    admission: AdmissionConfig = dataclasses.field(default_factory=AdmissionConfig)
    overcommit: OvercommitConfig | None = None  # absent: no over-commit
    topology: TopologyConfig | None = None  # absent: asks may not name a topology level
    placement_rules: tuple[PlacementRuleConfig, ...] = ()  # none: YuniKorn's default rules, in the shim
    # What the source said that Sniper accepted without acting on it; not part of the config's meaning.
    warnings: tuple[str, ...] = dataclasses.field(default=(), compare=False)

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
    # What the file said around the partitions that Sniper does not use (a ConfigMap's other keys).
    notes: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    def partition(self, name: str) -> PartitionConfig:
        for p in self.partitions:
            if p.name == name:
                return p
        raise ConfigError(f"no partition named {name!r}")

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.notes + tuple(w for p in self.partitions for w in p.warnings)


# --- the raw shapes, as msgspec structs: every key YuniKorn documents, unknown keys refused -------------


class _Raw(msgspec.Struct, forbid_unknown_fields=True):
    pass


Quantity = int | float | str
ResourceName = Annotated[str, Meta(min_length=1)]
PropertyValue = str | int | float | bool


class _RawResources(_Raw):
    guaranteed: dict[ResourceName, Quantity] = {}
    max: dict[ResourceName, Quantity] | None = None


Principal = Annotated[str, Meta(min_length=1)]


class _RawLimit(_Raw):
    limit: str = ""
    users: list[Principal] = []
    groups: list[Principal] = []
    maxresources: dict[ResourceName, Quantity] | None = None
    maxapplications: Annotated[int, Meta(ge=1, le=COUNT_MAX)] | None = None


class _RawQueue(_Raw):
    name: Annotated[str, Meta(pattern=QUEUE_NAME)]
    parent: bool = False
    queues: list[_RawQueue] = []
    resources: _RawResources | None = None
    properties: dict[str, PropertyValue] | None = None
    maxapplications: Annotated[int, Meta(ge=1, le=COUNT_MAX)] | None = None
    limits: list[_RawLimit] | None = None
    submitacl: str | None = None  # warned
    adminacl: str | None = None  # warned
    childtemplate: dict[str, Any] | None = None  # warned: Sniper has no dynamic queues
    reservable: bool = False  # takes SLO reservations (core.slo_plan)


class _RawNodeSort(_Raw):
    type: Literal["binpacking", "fair"] = "binpacking"
    resourceweights: dict[str, float] | None = None  # warned


def _preemption_struct() -> type[msgspec.Struct]:
    """The raw ``preemption`` section: :class:`PreemptionConfig`'s fields with their checks, plus
    YuniKorn's ``enabled``."""
    hints = typing.get_type_hints(PreemptionConfig, include_extras=True)
    choices: dict[str, Any] = {"policy": Literal[POLICIES], "victim_cost": Literal[VICTIM_COSTS]}
    fields: list[tuple[str, Any, Any]] = [
        (f.name, choices.get(f.name, hints[f.name]), f.default) for f in dataclasses.fields(PreemptionConfig)
    ]
    fields += [("enabled", bool, True)]
    return msgspec.defstruct("_RawPreemption", fields, bases=(_Raw,), module=__name__)


_RawPreemption = _preemption_struct()


def _reservation_struct() -> type[msgspec.Struct]:
    """The raw ``reservation`` section: :class:`ReservationConfig`'s fields with their checks."""
    hints = typing.get_type_hints(ReservationConfig, include_extras=True)
    fields = [(f.name, hints[f.name], f.default) for f in dataclasses.fields(ReservationConfig)]
    return msgspec.defstruct("_RawReservation", fields, bases=(_Raw,), module=__name__)


_RawReservation = _reservation_struct()


def _admission_struct() -> type[msgspec.Struct]:
    """The raw ``admission`` section: :class:`AdmissionConfig`'s fields with their checks."""
    hints = typing.get_type_hints(AdmissionConfig, include_extras=True)
    fields = [(f.name, hints[f.name], f.default) for f in dataclasses.fields(AdmissionConfig)]
    return msgspec.defstruct("_RawAdmission", fields, bases=(_Raw,), module=__name__)


_RawAdmission = _admission_struct()


class _RawPlacementFilter(_Raw):
    type: str = ""
    users: list[str] | None = None
    groups: list[str] | None = None


class _RawPlacementRule(_Raw):
    name: Annotated[str, Meta(min_length=1)]
    create: bool = False
    filter: _RawPlacementFilter | None = None
    parent: _RawPlacementRule | None = None
    value: str = ""


class _RawOvercommit(_Raw):
    allocate_below: Annotated[dict[str, Fraction], Meta(min_length=1)]
    preempt_above: Annotated[dict[str, Fraction], Meta(min_length=1)]


class _RawTopology(_Raw):
    levels: Annotated[
        list[Annotated[str, Meta(min_length=1, max_length=256)]], Meta(min_length=1, max_length=MAX_TOPOLOGY_LEVELS)
    ]


class _RawPartition(_Raw):
    queues: Annotated[list[_RawQueue], Meta(min_length=1)]
    name: Annotated[str, Meta(min_length=1)] = "default"
    nodesortpolicy: Literal["binpacking", "fair"] | _RawNodeSort = "binpacking"
    preemption: _RawPreemption | None = None  # type: ignore[valid-type]
    reservation: _RawReservation | None = None  # type: ignore[valid-type]
    admission: _RawAdmission | None = None  # type: ignore[valid-type]
    overcommit: _RawOvercommit | None = None
    topology: _RawTopology | None = None
    placementrules: list[_RawPlacementRule] | None = None  # applied by the Kubernetes shim
    limits: list[_RawLimit] | None = None  # the root queue's (YuniKorn 1.5, YUNIKORN-2260)
    usergroupresolver: dict[str, Any] | None = None  # warned


class _RawConfig(_Raw):
    partitions: Annotated[list[Any], Meta(min_length=1)]


# Which struct a path inside a partition lands in, to list the keys it allows.
_STRUCT_AT: dict[tuple[bool, str], type[msgspec.Struct]] = {
    (False, ".preemption"): _RawPreemption,
    (False, ".reservation"): _RawReservation,
    (False, ".admission"): _RawAdmission,
    (False, ".overcommit"): _RawOvercommit,
    (False, ".topology"): _RawTopology,
    (False, ".nodesortpolicy"): _RawNodeSort,
    (False, ".placementrules[]"): _RawPlacementRule,
    (False, ".placementrules[].filter"): _RawPlacementFilter,
    (True, ""): _RawQueue,
    (True, ".resources"): _RawResources,
    (True, ".limits[]"): _RawLimit,
    (False, ".limits[]"): _RawLimit,
}
_CHOICES_AT: dict[str, tuple[str, ...]] = {
    ".preemption.policy": POLICIES,
    ".preemption.victim_cost": VICTIM_COSTS,
    ".nodesortpolicy": NODE_SORT_POLICIES,
    ".nodesortpolicy.type": NODE_SORT_POLICIES,
}


# --- bounded input: no loops, no unbounded depth ------------------------------------------------------


def _check_bounded(raw: object, label: str) -> None:
    """Refuse input that loops (a YAML anchor inside itself), nests deeper than :data:`MAX_NESTING` or
    holds more than :data:`MAX_NODES` values, before anything walks it without a bound."""
    on_path: set[int] = set()
    seen = 0

    def visit(value: object, depth: int) -> None:
        nonlocal seen
        seen += 1
        if seen > MAX_NODES:
            raise ConfigError(f"{label}: more than {MAX_NODES} values (YAML aliases expanding without end?)")
        if isinstance(value, Mapping):
            children: Iterable[object] = value.values()
        elif isinstance(value, list | tuple):
            children = value
        else:
            return
        if id(value) in on_path:
            raise ConfigError(f"{label}: the config contains itself (a YAML anchor used inside its own value)")
        if depth >= MAX_NESTING:
            raise ConfigError(
                f"{label}: nested more than {MAX_NESTING} levels deep; queue trees that deep are not supported"
            )
        on_path.add(id(value))
        for child in children:
            visit(child, depth + 1)  # the recursion is bounded by MAX_NESTING
        on_path.discard(id(value))

    visit(raw, 0)


# --- errors that name the queue path and key ---------------------------------------------------------


_PATH_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


def _explain(err: msgspec.ValidationError, raw: object, label: str, top: type[msgspec.Struct]) -> ConfigError:
    """msgspec's ``... - at `$.queues[0].queues[1].resources``` as ``queue root.a.resources: ...``."""
    message, _, at = str(err).partition(" - at `")
    tokens = _PATH_TOKEN.findall(at.rstrip("`")[1:])
    node: object = raw
    queue_path: str | None = None
    rest = ""
    i = 0
    while i < len(tokens):
        key, index = tokens[i]
        if key == "queues" and i + 1 < len(tokens) and tokens[i + 1][1].isdigit() and isinstance(node, Mapping):
            siblings = node.get("queues")
            child = siblings[int(tokens[i + 1][1])] if isinstance(siblings, list) else None
            name = child.get("name") if isinstance(child, Mapping) else None
            if isinstance(name, str) and re.match(QUEUE_NAME, name) and isinstance(siblings, list):
                if queue_path is None:
                    queue_path = "root" if _names_root(siblings) else f"root.{name}"
                else:
                    queue_path = f"{queue_path}.{name}"
                node, rest, i = child, "", i + 2
                continue
        rest += f".{key}" if key else f"[{index}]"
        if isinstance(node, Mapping) and key:
            node = node.get(key)
        elif isinstance(node, list) and index.isdigit() and int(index) < len(node):
            node = node[int(index)]
        else:
            node = None
        i += 1
    where = f"queue {queue_path}{rest}" if queue_path is not None else f"{label}{rest}"
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", message)
    if unknown is not None:
        at_struct = re.sub(r"\[\d+\]", "[]", rest)
        struct = top if queue_path is None and not rest else _STRUCT_AT.get((queue_path is not None, at_struct))
        allowed = struct.__struct_fields__ if struct is not None else ()
        hint = difflib.get_close_matches(unknown.group(1), allowed, n=1)
        text = f"unknown key {unknown.group(1)!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        if allowed:
            text += f"; allowed: {', '.join(allowed)}"
    else:
        text = message[:1].lower() + message[1:]
        choices = _CHOICES_AT.get(rest) if queue_path is None else None
        if choices and message.startswith("Invalid enum value "):
            text = f"{message.removeprefix('Invalid enum value ')} is not one of {', '.join(choices)}"
        if message.startswith("Expected `str` matching regex"):
            text = f"{node!r} is not a queue name (1 to 64 letters, digits or _:#/@-; never a dot)"
    return ConfigError(f"{where}: {text}")


def _names_root(top: list[Any]) -> bool:
    """YuniKorn inserts a ``root`` unless the top level is exactly one queue named ``root``."""
    return len(top) == 1 and isinstance(top[0], Mapping) and top[0].get("name") == "root"


# --- from raw structs to config objects ---------------------------------------------------------------


def _choice(value: object, choices: tuple[str, ...], where: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


def _resource(raw: Mapping[str, Quantity], where: str, warnings: list[str], *, keep_zero: bool = False) -> Resource:
    for name in raw:
        if name in (res.MEMORY, res.VCORE):
            continue
        known = OTHER_SPELLINGS.get(name) or (name.lower() if name.lower() in (res.MEMORY, res.VCORE) else None)
        if known is not None:
            warnings.append(
                f"{where}: resource {name!r} is not {known!r} (did you mean {known!r}?); "
                "it is kept as a resource of its own that no node may have"
            )
    try:
        parsed = res.parse_resource(raw, where, keep_zero=keep_zero)
    except res.QuantityError as err:
        raise ConfigError(str(err)) from None
    memory = raw.get(res.MEMORY)
    if _bare_number(memory) and parsed.get(res.MEMORY):
        # Memory in MiB against the cores beside it: under 1 MiB a core (or under 1 MiB at all) is a
        # pre-1.0 YuniKorn number, written when a bare memory meant MB and a bare vcore milli-cores.
        cores = parsed.get(res.VCORE, 0) / 1000
        if float(str(memory)) < SANE_MEMORY_BYTES or parsed[res.MEMORY] < cores:
            beside = f" beside {cores:,.0f} cores" if cores else ""
            vcore = raw.get(res.VCORE)
            warnings.append(
                f"{where}: memory {memory!r} is {float(str(memory)):,.0f} bytes{beside}, a pre-1.0 YuniKorn number? "
                "(since 1.0 a bare memory is bytes and a bare vcore cores; before, MB and milli-cores): write "
                f"units, e.g. memory: {memory}M" + (f", vcore: {vcore}m" if _bare_number(vcore) else "")
            )
    return parsed


def _bare_number(value: object) -> bool:
    """A quantity written without a unit (``500000``, ``"500000"``, ``1.5``)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or (
        isinstance(value, str) and re.fullmatch(r"\d+(\.\d*)?", value) is not None
    )


def go_duration(value: PropertyValue) -> float | None:
    """Seconds of a Go duration (``30s``, ``1m30s``, ``1.5h``, ``250ms``) as YuniKorn reads
    ``preemption.delay``; ``None`` when it is not one (a bare number has no unit, as in Go)."""
    text = str(value).strip() if not isinstance(value, bool) else ""
    if not text or len(text) > 64:
        return None
    sign = -1.0 if text[0] == "-" else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    seconds, at = 0.0, 0
    for match in _DURATION_PART.finditer(body):
        if match.start() != at:
            return None
        seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        at = match.end()
    return sign * seconds if at == len(body) and at > 0 else None


@dataclasses.dataclass(frozen=True, slots=True)
class _Properties:
    sort_policy: str
    priority_offset: int
    preemption_policy: str
    preemption_delay: float


def _properties(raw: Mapping[str, PropertyValue], at: str, inherited_delay: float, warnings: list[str]) -> _Properties:
    """A queue's sort policy, priority offset, preemption policy and preemption delay, from its
    ``properties``; the delay is inherited from the parent, as YuniKorn's properties are."""
    unknown = sorted(set(raw) - set(KNOWN_PROPERTIES) - set(UNSUPPORTED_PROPERTIES))
    if unknown:  # YuniKorn's properties are free-form: an unknown one is kept out, not refused
        hints = [m for k in unknown for m in difflib.get_close_matches(k, KNOWN_PROPERTIES, n=1)]
        warnings.append(
            f"{at}.properties: {', '.join(map(repr, unknown))} not used by Sniper; ignored"
            + (f" (did you mean {', '.join(map(repr, hints))}?)" if hints else "")
        )
    ignored = [k for k in UNSUPPORTED_PROPERTIES if k in raw]
    if ignored:
        warnings.append(f"{at}.properties: {', '.join(ignored)} not implemented by Sniper; ignored")
    sort_policy = _choice(raw.get(SORT_POLICY_KEY, "fifo"), APP_SORT_POLICIES, f"{at}.{SORT_POLICY_KEY}")
    preemption_policy = _choice(
        raw.get(PREEMPTION_POLICY_KEY, "default"), QUEUE_PREEMPTION_POLICIES, f"{at}.{PREEMPTION_POLICY_KEY}"
    )
    offset_raw = raw.get(PRIORITY_OFFSET_KEY, 0)
    try:
        if isinstance(offset_raw, bool) or (isinstance(offset_raw, str) and len(offset_raw) > 20):
            raise ValueError
        priority_offset = int(offset_raw)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{at}.{PRIORITY_OFFSET_KEY}: {offset_raw!r:.40} is not an integer") from None
    if not -PRIORITY_OFFSET_MAX - 1 <= priority_offset <= PRIORITY_OFFSET_MAX:
        raise ConfigError(
            f"{at}.{PRIORITY_OFFSET_KEY}: {str(priority_offset)[:40]} is outside -2^31..2^31-1 (a 32-bit integer)"
        )
    delay = inherited_delay
    if PREEMPTION_DELAY_KEY in raw:
        delay_raw = raw[PREEMPTION_DELAY_KEY]
        parsed = go_duration(delay_raw)
        if parsed is None or not 0 < parsed <= SECONDS_MAX:
            warnings.append(
                f"{at}.{PREEMPTION_DELAY_KEY}: {delay_raw!r} is not a positive duration such as 30s or 1m30s; "
                f"YuniKorn's default {YUNIKORN_PREEMPTION_DELAY:g}s applies"
            )
            parsed = YUNIKORN_PREEMPTION_DELAY
        delay = parsed
    return _Properties(sort_policy, priority_offset, preemption_policy, delay)


def _min_runtime(raw: Mapping[str, PropertyValue], at: str, inherited: float) -> float:
    """A queue's ``preemption.min.runtime`` in seconds: a Go duration, ``0`` for none; inherited from the
    parent when the queue does not set it. Anything else is refused: a minimum misread would let young
    work be preempted."""
    if MIN_RUNTIME_KEY not in raw:
        return inherited
    value = raw[MIN_RUNTIME_KEY]
    parsed = go_duration(value)
    if parsed is None or not 0 <= parsed <= SECONDS_MAX:
        raise ConfigError(f"{at}.{MIN_RUNTIME_KEY}: {value!r:.40} is not a duration such as 10m or 1h30m (0: none)")
    return parsed


def _stopped(raw: Mapping[str, PropertyValue], at: str, parent_stopped: bool) -> bool:
    """Whether a queue is stopped: its ``queue.state`` is ``stopped``, or its parent is (a stopped parent
    stops its whole subtree, whatever the children say)."""
    state = _choice(raw.get(QUEUE_STATE_KEY, "running"), QUEUE_STATES, f"{at}.{QUEUE_STATE_KEY}")
    return parent_stopped or state == "stopped"


def quota_preemption_delay(raw: Mapping[str, PropertyValue], at: str, warnings: list[str]) -> float:
    """A queue's own ``quota.preemption.delay`` in seconds (not inherited, as in YuniKorn); 0, never quota
    preempted, when absent, ``0`` or not a positive Go duration (with a warning)."""
    if QUOTA_PREEMPTION_DELAY_KEY not in raw:
        return 0.0
    value = raw[QUOTA_PREEMPTION_DELAY_KEY]
    parsed = go_duration(value)
    if parsed is None or not 0 <= parsed <= SECONDS_MAX:
        warnings.append(
            f"{at}.{QUOTA_PREEMPTION_DELAY_KEY}: {value!r:.40} is not a duration such as 5m or 1h30m; "
            "the queue is never quota preempted"
        )
        return 0.0
    return parsed


def fairshare_halflife(raw: Mapping[str, PropertyValue], at: str, warnings: list[str]) -> float:
    """A queue's own ``fairshare.halflife`` in seconds; 0, no history, when absent or not a positive Go
    duration (with a warning)."""
    if FAIRSHARE_HALFLIFE_KEY not in raw:
        return 0.0
    value = raw[FAIRSHARE_HALFLIFE_KEY]
    parsed = go_duration(value)
    if parsed is None or not 0 < parsed <= SECONDS_MAX:
        warnings.append(
            f"{at}.{FAIRSHARE_HALFLIFE_KEY}: {value!r:.40} is not a positive duration such as 30m or 8h; "
            "the queue orders by current usage"
        )
        return 0.0
    return parsed


def _queue(raw: _RawQueue, parent: QueueConfig | None, warnings: list[str]) -> QueueConfig:
    path = raw.name if parent is None else f"{parent.path}.{raw.name}"
    at = f"queue {path}"
    not_implemented = [key for key in ("submitacl", "adminacl", "childtemplate") if getattr(raw, key) is not None]
    if not_implemented:
        warnings.append(f"{at}: {', '.join(not_implemented)} not implemented by Sniper yet; accepted and ignored")
    if raw.parent and not raw.queues:
        warnings.append(f"{at}: parent: true without child queues; Sniper creates no dynamic queues, so it is a leaf")
    resources = raw.resources or _RawResources()
    guaranteed = _resource(resources.guaranteed, f"{at}.guaranteed", warnings)
    # A zero in a max is kept: it means none of that resource (YuniKorn), unlike a missing name (no limit).
    maximum = None if resources.max is None else _resource(resources.max, f"{at}.max", warnings, keep_zero=True)
    props = _properties(raw.properties or {}, at, 0.0 if parent is None else parent.preemption_delay, warnings)
    min_runtime = _min_runtime(raw.properties or {}, at, 0.0 if parent is None else parent.preemption_min_runtime)
    stopped = _stopped(raw.properties or {}, at, parent is not None and parent.stopped)
    limits = tuple(_limit(lim, f"{at}.limits[{i}]", warnings) for i, lim in enumerate(raw.limits or ()))
    queue = QueueConfig(
        name=raw.name,
        path=path,
        guaranteed=guaranteed,
        max=maximum,
        sort_policy=props.sort_policy,
        priority_offset=props.priority_offset,
        preemption_policy=props.preemption_policy,
        preemption_delay=props.preemption_delay,
        preemption_min_runtime=min_runtime,
        stopped=stopped,
        quota_preemption_delay=quota_preemption_delay(raw.properties or {}, at, warnings),
        fairshare_halflife=fairshare_halflife(raw.properties or {}, at, warnings),
        max_applications=raw.maxapplications,
        limits=limits,
        reservable=raw.reservable,
        declared_parent=raw.parent,
    )
    if raw.reservable and (parent is None or raw.queues or not guaranteed):
        why = "the root" if parent is None else "a parent" if raw.queues else "without a guarantee"
        raise ConfigError(
            f"{at}: reservable on {why}; a reservable queue is a leaf whose guarantee its SLO reservations share"
        )
    children = tuple(_queue(c, queue, warnings) for c in raw.queues)
    seen: set[str] = set()
    for child in children:
        if child.name in seen:
            raise ConfigError(f"{at}: duplicate child queue name {child.name!r}")
        seen.add(child.name)
    queue = dataclasses.replace(queue, children=children)
    _validate_queue_resources(queue)
    _validate_queue_limits(queue)
    return queue


def _limit(raw: _RawLimit, at: str, warnings: list[str]) -> LimitConfig:
    """One ``limits`` entry: it names users, groups or both, and bounds something."""
    if not raw.users and not raw.groups:
        raise ConfigError(f"{at}: a limit names the users or groups it covers")
    if raw.maxresources is None and raw.maxapplications is None:
        raise ConfigError(f"{at}: a limit sets maxresources, maxapplications or both")
    for names, kind in ((raw.users, "users"), (raw.groups, "groups")):
        if WILDCARD in names and len(names) > 1:
            raise ConfigError(f"{at}.{kind}: the wildcard '*' stands alone in its limit")
        if len(set(names)) != len(names):
            raise ConfigError(f"{at}.{kind}: a name is listed twice")
    maximum = None
    if raw.maxresources is not None:
        maximum = _resource(raw.maxresources, f"{at}.maxresources", warnings, keep_zero=True)
    return LimitConfig(
        description=raw.limit,
        users=tuple(raw.users),
        groups=tuple(raw.groups),
        max_resources=maximum,
        max_applications=raw.maxapplications,
    )


def _validate_queue_limits(queue: QueueConfig) -> None:
    """YuniKorn's checks: each user and group in one limit of a queue at most, the wildcard entry last
    of its kind, a limit within its queue's ``max`` and ``maxapplications``, a child's
    ``maxapplications`` within its parent's."""
    at = f"queue {queue.path}"
    for kind in ("users", "groups"):
        seen: set[str] = set()
        for i, lim in enumerate(queue.limits):
            names: tuple[str, ...] = getattr(lim, kind)
            if names and WILDCARD in seen:
                raise ConfigError(f"{at}.limits[{i}]: the wildcard {kind} limit must be the last {kind} limit")
            for name in names:
                if name in seen:
                    raise ConfigError(f"{at}.limits[{i}].{kind}: {name!r} is already covered by an earlier limit")
                seen.add(name)
    for i, lim in enumerate(queue.limits):
        if lim.max_resources is not None and queue.max is not None:
            for k, v in lim.max_resources.items():
                if k in queue.max and v > queue.max[k]:
                    raise ConfigError(
                        f"{at}.limits[{i}]: maxresources {named(k, v)} exceeds the queue's max {named(k, queue.max[k])}"
                    )
        if (
            lim.max_applications is not None
            and queue.max_applications is not None
            and lim.max_applications > queue.max_applications
        ):
            raise ConfigError(
                f"{at}.limits[{i}]: maxapplications {lim.max_applications} exceeds the queue's "
                f"maxapplications {queue.max_applications}"
            )
    if queue.max_applications is not None:
        for child in queue.children:
            if child.max_applications is not None and child.max_applications > queue.max_applications:
                raise ConfigError(
                    f"queue {child.path}: maxapplications {child.max_applications} exceeds parent "
                    f"{queue.path}'s maxapplications {queue.max_applications}"
                )


def _validate_queue_resources(queue: QueueConfig) -> None:
    at = f"queue {queue.path}"
    if queue.max is not None:
        for k, g in queue.guaranteed.items():
            # A max that does not name a resource leaves it unlimited.
            if k in queue.max and queue.max[k] < g:
                raise ConfigError(f"{at}: max {named(k, queue.max[k])} is below guaranteed {named(k, g)}")
    children_guaranteed = res.total(c.guaranteed for c in queue.children)
    for child in queue.children:
        for k, g in child.guaranteed.items():
            if k in queue.guaranteed and g > queue.guaranteed[k]:
                raise ConfigError(
                    f"queue {child.path}: guaranteed {named(k, g)} exceeds parent {queue.path}'s guaranteed "
                    f"{named(k, queue.guaranteed[k])}"
                )
        if queue.max is not None and child.max is not None:
            for k, m in child.max.items():
                if k in queue.max and m > queue.max[k]:
                    raise ConfigError(
                        f"queue {child.path}: max {named(k, m)} exceeds parent {queue.path}'s max "
                        f"{named(k, queue.max[k])}"
                    )
    if queue.guaranteed:
        for k, g in children_guaranteed.items():
            if k in queue.guaranteed and g > queue.guaranteed[k]:
                raise ConfigError(
                    f"queue {queue.path}: children's guaranteed {k} add up to {human(k, g)}, "
                    f"more than its own {human(k, queue.guaranteed[k])}"
                )


def _preemption(raw: Any, explicit: Mapping[str, Any], at: str, warnings: list[str]) -> PreemptionConfig:
    values = {f.name: getattr(raw, f.name) for f in dataclasses.fields(PreemptionConfig)}
    if not raw.enabled:  # YuniKorn's switch for all preemption in the partition
        if explicit.get("policy", "none") != "none":
            raise ConfigError(f"{at}: enabled is false but policy is {explicit['policy']!r}; say one of them")
        values["policy"] = "none"
    return PreemptionConfig(**values)


def parse_partition(raw: object, where: str = "partition") -> PartitionConfig:
    """One entry of ``partitions`` (also a ``partition_config`` event's ``config``)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    name = raw.get("name", "default")
    label = f"partition {name}" if isinstance(name, str) and name else where
    _check_bounded(raw, label)
    try:
        parsed = msgspec.convert(raw, _RawPartition)
    except msgspec.ValidationError as err:
        raise _explain(err, raw, label, _RawPartition) from None
    warnings: list[str] = []
    if parsed.usergroupresolver is not None:
        warnings.append(f"{label}: usergroupresolver not implemented by Sniper yet; accepted and ignored")
    rules = tuple(
        _placement_rule(rule, f"{label}.placementrules[{i}]") for i, rule in enumerate(parsed.placementrules or ())
    )
    node_sort = parsed.nodesortpolicy
    if isinstance(node_sort, _RawNodeSort):
        if node_sort.resourceweights is not None:
            warnings.append(f"{label}.nodesortpolicy: resourceweights not implemented by Sniper; ignored")
        node_sort_policy: str = node_sort.type
    else:
        node_sort_policy = node_sort
    explicit = raw.get("preemption") or {}
    preemption = _preemption(parsed.preemption or _RawPreemption(), explicit, f"{label}.preemption", warnings)
    raw_reservation = parsed.reservation or _RawReservation()
    reservation = ReservationConfig(
        **{f.name: getattr(raw_reservation, f.name) for f in dataclasses.fields(ReservationConfig)}
    )
    raw_admission = parsed.admission or _RawAdmission()
    admission = AdmissionConfig(**{f.name: getattr(raw_admission, f.name) for f in dataclasses.fields(AdmissionConfig)})
    overcommit = None if parsed.overcommit is None else _overcommit(parsed.overcommit, f"{label}.overcommit")
    topology = None if parsed.topology is None else _topology(parsed.topology, f"{label}.topology")
    top = parsed.queues
    if len(top) == 1 and top[0].name == "root":
        raw_root = top[0]
    elif any(q.name == "root" for q in top):
        raise ConfigError(f"{label}.queues: a queue named 'root' must be the only queue at the top")
    else:  # YuniKorn inserts the root queue
        raw_root = _RawQueue(name="root", queues=top)
    if parsed.limits is not None:  # YuniKorn 1.5: the partition's limits are the root queue's
        if raw_root.limits is not None and raw_root.limits != parsed.limits:
            raise ConfigError(
                f"{label}.limits: differ from queue root's limits; they are the same limits, give them once"
            )
        raw_root = msgspec.structs.replace(raw_root, limits=parsed.limits)
    root = _queue(raw_root, None, warnings)
    return PartitionConfig(
        name=parsed.name,
        root=root,
        node_sort_policy=node_sort_policy,
        preemption=preemption,
        reservation=reservation,
        admission=admission,
        overcommit=overcommit,
        topology=topology,
        placement_rules=rules,
        warnings=tuple(warnings),
    )


_REGEXP_CHARACTER = re.compile(r"[\^$*+?()\[{}|]")  # YuniKorn's SpecialRegExp: a filter entry that is a pattern
_USER_NAME = re.compile(r"^[_a-zA-Z][a-zA-Z0-9:#/_.@-]*[$]?$")  # YuniKorn's UserRegExp
_GROUP_NAME = re.compile(r"^[_a-zA-Z][a-zA-Z0-9:_.-]*$")  # YuniKorn's GroupRegExp


def _placement_rule(raw: _RawPlacementRule, where: str) -> PlacementRuleConfig:
    """One placement rule, checked as YuniKorn checks it: a known name, the value ``fixed`` and ``tag``
    need, a ``fixed`` queue of valid names, a filter of type allow or deny whose single entry is a name
    or a regular expression."""
    name = raw.name.lower()
    if name not in PLACEMENT_RULES:
        raise ConfigError(f"{where}.name: {raw.name!r} is not one of {', '.join(PLACEMENT_RULES)}")
    if name in ("fixed", "tag") and not raw.value:
        raise ConfigError(f"{where}.value: a {name} rule needs a value (the {'queue' if name == 'fixed' else 'tag'})")
    if name == "fixed":
        parts = raw.value.split(".")
        if any(not re.match(QUEUE_NAME, part) for part in parts):
            raise ConfigError(f"{where}.value: {raw.value!r} is not a queue (names of 1 to 64 of a-z A-Z 0-9 _:#/@-)")
    raw_filter = raw.filter or _RawPlacementFilter()
    kind = raw_filter.type.lower()
    if kind not in ("", "allow", "deny"):
        raise ConfigError(f"{where}.filter.type: {raw_filter.type!r} is not one of allow, deny")
    users = tuple(raw_filter.users or ())
    groups = tuple(raw_filter.groups or ())
    for key, entries, valid in (("users", users, _USER_NAME), ("groups", groups, _GROUP_NAME)):
        if len(entries) == 1 and not valid.match(entries[0]):
            try:
                re.compile(entries[0])
            except re.error as err:
                raise ConfigError(
                    f"{where}.filter.{key}: {entries[0]!r} is no name and no regular expression: {err}"
                ) from None
            if not _REGEXP_CHARACTER.search(entries[0]):
                raise ConfigError(f"{where}.filter.{key}: {entries[0]!r} is no name and no regular expression")
    parent = None if raw.parent is None else _placement_rule(raw.parent, f"{where}.parent")
    return PlacementRuleConfig(
        name=name,
        create=raw.create,
        value=raw.value,
        parent=parent,
        filter=PlacementFilter(deny=kind == "deny", users=users, groups=groups),
    )


def placement_rule_to_raw(rule: PlacementRuleConfig) -> dict[str, Any]:
    """A placement rule as ``queues.yaml`` writes it (the inverse of its parsing)."""
    out: dict[str, Any] = {"name": rule.name, "create": rule.create}
    if rule.value:
        out["value"] = rule.value
    if rule.parent is not None:
        out["parent"] = placement_rule_to_raw(rule.parent)
    if rule.filter != PlacementFilter():
        filter_out: dict[str, Any] = {"type": "deny" if rule.filter.deny else "allow"}
        if rule.filter.users:
            filter_out["users"] = list(rule.filter.users)
        if rule.filter.groups:
            filter_out["groups"] = list(rule.filter.groups)
        out["filter"] = filter_out
    return out


def _topology(raw: _RawTopology, where: str) -> TopologyConfig:
    """The ``topology`` section: each level's label named once."""
    repeated = sorted({level for level in raw.levels if raw.levels.count(level) > 1})
    if repeated:
        raise ConfigError(f"{where}.levels: {', '.join(repeated)} named more than once; name each level once")
    return TopologyConfig(levels=tuple(raw.levels))


def _overcommit(raw: _RawOvercommit, where: str) -> OvercommitConfig:
    """The ``overcommit`` section: every resource over-committed has a kill threshold at least as high."""
    for name, fraction in raw.allocate_below.items():
        above = raw.preempt_above.get(name)
        if above is None:
            raise ConfigError(f"{where}.preempt_above: names no {name!r}, which allocate_below over-commits")
        if fraction > above:
            raise ConfigError(
                f"{where}: allocate_below.{name} ({fraction}) is above preempt_above.{name} ({above}); "
                "over-commit would place containers it then kills"
            )
    return OvercommitConfig(allocate_below=dict(raw.allocate_below), preempt_above=dict(raw.preempt_above))


def parse_config(raw: object) -> SchedulerConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config: expected a mapping, got {type(raw).__name__}")
    _check_bounded(raw, "config")
    try:
        parsed = msgspec.convert(raw, _RawConfig)
    except msgspec.ValidationError as err:
        raise _explain(err, raw, "config", _RawConfig) from None
    partitions = tuple(parse_partition(p, f"partitions[{i}]") for i, p in enumerate(parsed.partitions))
    names = [p.name for p in partitions]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"config.partitions: duplicate partition name(s) {', '.join(dupes)}")
    return SchedulerConfig(partitions=partitions)


def load_config(path: str | Path) -> SchedulerConfig:
    """A ``queues.yaml``, or the Kubernetes ConfigMap that carries one (as YuniKorn is configured)."""
    try:
        raw = _read_yaml(Path(path).read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text: {err}") from None
    notes: tuple[str, ...] = ()
    if isinstance(raw, Mapping) and raw.get("kind") == "ConfigMap":
        raw, notes = _from_config_map(raw, str(path))
    return dataclasses.replace(parse_config(raw), notes=notes)


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping that gives one key twice (YAML says keys are unique; PyYAML would keep the last)."""


class _StrictLoader(yaml.CSafeLoader):
    """PyYAML's safe loader (libyaml's parser) refusing a key given twice in one mapping, with both lines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[object, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # a complex key: the safe constructor refuses what it cannot hash
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in first:
                raise _DuplicateKey(
                    None, None, f"key {key!r} is given twice (lines {first[key]} and {line}): give it once", None
                )
            first[key] = line
        return super().construct_mapping(node, deep=deep)


def _composed_nodes(root: yaml.Node, where: str) -> None:
    """Refuse a document of more than :data:`MAX_NODES` values as written (aliases counted once) before
    any Python object is built from it: a config that large is refused in a moment, not after minutes."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            raise ConfigError(
                f"{where}: more than {MAX_NODES} values as written; a queue configuration that large (tens of "
                "thousands of queues) is not supported: refused before it is built"
            )
        if isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in node.value for n in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def _read_yaml(text: str, where: str) -> object:
    """The YAML document in ``text``: bounded in size, count of values and depth, keys given once."""
    if len(text) > MAX_CONFIG_CHARS:
        raise ConfigError(
            f"{where}: {len(text):,} characters; a queue configuration of more than {MAX_CONFIG_CHARS:,} "
            "(tens of thousands of queues) is not supported: refused before it is read"
        )
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _composed_nodes(node, where)
        return loader.construct_document(node)
    except _DuplicateKey as err:
        raise ConfigError(f"{where}: {err.problem}") from None
    except (yaml.YAMLError, RecursionError) as err:  # libyaml bounds depth itself, past ours
        if isinstance(err, yaml.YAMLError) and "maximum nesting depth" not in str(err):
            raise ConfigError(f"{where}: not valid YAML: {err}") from None
        raise ConfigError(f"{where}: nested too deeply to read (more than {MAX_NESTING} levels are refused)") from None
    finally:
        loader.dispose()


def _from_config_map(raw: Mapping[str, Any], path: str) -> tuple[object, tuple[str, ...]]:
    """The ``queues.yaml`` inside a ConfigMap (``apiVersion: v1, kind: ConfigMap, data: {queues.yaml: ...}``),
    and a note naming the ConfigMap's other keys (YuniKorn's scheduler settings), which Sniper does not use."""
    metadata = raw.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    where = f"{path}: ConfigMap {name}" if isinstance(name, str) and name else f"{path}: ConfigMap"
    if raw.get("apiVersion") != "v1":
        raise ConfigError(f"{where}: apiVersion {raw.get('apiVersion')!r} is not v1")
    data = raw.get("data")
    if not isinstance(data, Mapping) or CONFIG_MAP_KEY not in data:
        raise ConfigError(f"{where}: no data key {CONFIG_MAP_KEY!r} (the queue configuration YuniKorn reads)")
    text = data[CONFIG_MAP_KEY]
    if not isinstance(text, str):
        raise ConfigError(f"{where}: data.{CONFIG_MAP_KEY} is not text (a YAML document as a string)")
    others = sorted(str(k) for k in data if k != CONFIG_MAP_KEY)
    notes = (f"{where}: data {', '.join(others)} not used by Sniper; ignored",) if others else ()
    return _read_yaml(text, f"{where}, data.{CONFIG_MAP_KEY}"), notes


def _preemption_to_raw(preemption: PreemptionConfig) -> dict[str, Any]:
    """A ``preemption`` section; quota preemption is named only when it is on."""
    out = dataclasses.asdict(preemption)
    if not preemption.quotapreemptionenabled:
        del out["quotapreemptionenabled"]
    return out


def partition_to_raw(cfg: PartitionConfig) -> dict[str, Any]:
    """The inverse of :func:`parse_partition`: a JSON/YAML-ready mapping (for ``partition_config``)."""

    def queue(q: QueueConfig, inherited_min_runtime: float = 0.0) -> dict[str, Any]:
        out: dict[str, Any] = {"name": q.name}
        resources: dict[str, Any] = {}
        if q.guaranteed:
            resources["guaranteed"] = res.as_quantities(q.guaranteed)
        if q.max is not None:
            resources["max"] = res.as_quantities(q.max)
        if resources:
            out["resources"] = resources
        out["properties"] = {
            SORT_POLICY_KEY: q.sort_policy,
            PRIORITY_OFFSET_KEY: str(q.priority_offset),
            PREEMPTION_POLICY_KEY: q.preemption_policy,
        }
        if q.preemption_delay:
            out["properties"][PREEMPTION_DELAY_KEY] = f"{decimal.Decimal(repr(q.preemption_delay)):f}s"
        if q.preemption_min_runtime != inherited_min_runtime:  # a child may set none below a parent's
            out["properties"][MIN_RUNTIME_KEY] = f"{decimal.Decimal(repr(q.preemption_min_runtime)):f}s"
        if q.stopped:
            out["properties"][QUEUE_STATE_KEY] = "stopped"
        if q.fairshare_halflife:
            out["properties"][FAIRSHARE_HALFLIFE_KEY] = f"{decimal.Decimal(repr(q.fairshare_halflife)):f}s"
        if q.quota_preemption_delay:
            out["properties"][QUOTA_PREEMPTION_DELAY_KEY] = f"{decimal.Decimal(repr(q.quota_preemption_delay)):f}s"
        if q.max_applications is not None:
            out["maxapplications"] = q.max_applications
        if q.reservable:
            out["reservable"] = True
        if q.declared_parent:
            out["parent"] = True
        if q.limits:
            out["limits"] = [limit(lim) for lim in q.limits]
        if q.children:
            out["queues"] = [queue(c, q.preemption_min_runtime) for c in q.children]
        return out

    def limit(lim: LimitConfig) -> dict[str, Any]:
        out: dict[str, Any] = {"limit": lim.description}
        if lim.users:
            out["users"] = list(lim.users)
        if lim.groups:
            out["groups"] = list(lim.groups)
        if lim.max_resources is not None:
            out["maxresources"] = res.as_quantities(lim.max_resources)
        if lim.max_applications is not None:
            out["maxapplications"] = lim.max_applications
        return out

    out: dict[str, Any] = {
        "name": cfg.name,
        "nodesortpolicy": {"type": cfg.node_sort_policy},
        "preemption": _preemption_to_raw(cfg.preemption),
        "reservation": dataclasses.asdict(cfg.reservation),
        "admission": dataclasses.asdict(cfg.admission),
        "queues": [queue(cfg.root)],
    }
    if cfg.overcommit is not None:
        out["overcommit"] = dataclasses.asdict(cfg.overcommit)
    if cfg.topology is not None:
        out["topology"] = {"levels": list(cfg.topology.levels)}
    if cfg.placement_rules:
        out["placementrules"] = [placement_rule_to_raw(rule) for rule in cfg.placement_rules]
    return out
