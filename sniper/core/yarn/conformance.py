"""Loading the YARN proportional-preemption conformance format into snapshots and policy configs.

Owns :func:`load_cases` / :func:`parse_cases` / :func:`parse_case` (one case object, or ``{"cases": [...]}``),
the :class:`ConformanceCase` they return, and the mapping between the format's resource lists and Sniper's
named resources (:func:`resource_from_list`, :func:`resource_to_list`).

Format facts relied on (see ``docs/yarn-baseline.md``): resources are lists in
``config.resource_types`` order, index 0 being memory (named ``memory`` here whatever its name there;
``vcores`` becomes ``vcore``; other names are kept); queues are listed in depth-first pre-order; a parent's
pending is the sum of its children's; app containers come as groups ``{first_id, count, size, priority,
reserved, am}`` with consecutive ids. A ``unit_sort`` case carries ``input_containers`` instead of queues.

Invariants: parsing is pure (no I/O but the file read in :func:`load_cases`); every error is a
:class:`CaseError` naming the case and the field; container ids are ``"<app>/<number>"``, unique per snapshot.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sniper.core.preemption.model import AppSnapshot, ClusterSnapshot, ContainerSnapshot, QueueSnapshot, SnapshotError
from sniper.core.resources import MEMORY, VCORE, Resource, ResourceLike, total
from sniper.core.yarn.proportional import ProportionalConfig

DEFAULT_RESOURCE_TYPES: tuple[str, ...] = ("memory-mb", "vcores")

_CONFIG_KEYS: tuple[str, ...] = (
    "max_wait_before_kill_ms",
    "monitoring_interval_ms",
    "total_preemption_per_round",
    "natural_termination_factor",
    "max_ignored_over_capacity",
    "observe_only",
    "preemption_to_balance_queues_beyond_guaranteed",
    "resource_calculator",
)


class CaseError(ValueError):
    """A conformance case that cannot be read; the message names the case and the field."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConformanceCase:
    """One case of the conformance format.

    ``snapshot`` is ``None`` for a ``unit_sort`` case, whose containers are in ``sort_input`` (each with the
    case's container name as ``id``). ``expected`` is the case's raw expectations. ``clocks`` are the round
    times to run: the listed ``expected.rounds[].clock_ms``, or one round at 0.
    """

    id: str
    description: str
    config: ProportionalConfig
    resource_types: tuple[str, ...]
    resource_names: tuple[str, ...]
    snapshot: ClusterSnapshot | None
    sort_input: tuple[ContainerSnapshot, ...]
    expected: Mapping[str, Any]
    clocks: tuple[int, ...]

    def to_list(self, r: ResourceLike) -> list[int]:
        """A resource as a list in the case's ``resource_types`` order."""
        return resource_to_list(r, self.resource_names)


def resource_names(resource_types: Sequence[str]) -> tuple[str, ...]:
    """Sniper's names for the format's resource types: index 0 is ``memory``, ``vcores`` is ``vcore``."""
    names: list[str] = []
    for i, raw in enumerate(resource_types):
        name = MEMORY if i == 0 else (VCORE if raw in ("vcores", "vcore") else raw)
        if name in names:
            raise ValueError(f"resource type {raw!r} maps to {name!r} twice")
        names.append(name)
    return tuple(names)


def resource_from_list(values: object, names: Sequence[str], where: str = "resource") -> Resource:
    """A list of integers in ``names`` order as a resource."""
    if not isinstance(values, list) or len(values) != len(names):
        raise ValueError(f"{where}: expected a list of {len(names)} integers, got {values!r}")
    out: Resource = {}
    for name, value in zip(names, values, strict=True):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: {value!r} is not an integer")
        out[name] = value
    return out


def resource_to_list(r: ResourceLike, names: Sequence[str]) -> list[int]:
    """A resource as a list of integers in ``names`` order (missing names are 0)."""
    return [int(r.get(name, 0)) for name in names]


def load_cases(path: str | Path) -> list[ConformanceCase]:
    """Read a file holding one case or ``{"cases": [...]}``."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CaseError(f"{path}: not valid JSON: {err}") from None
    return parse_cases(raw)


def parse_cases(raw: object) -> list[ConformanceCase]:
    """Parse one case object or ``{"cases": [...]}``."""
    if isinstance(raw, Mapping) and "cases" in raw:
        cases = raw["cases"]
        if not isinstance(cases, list):
            raise CaseError("'cases' must be a list")
        return [parse_case(c, f"cases[{i}]") for i, c in enumerate(cases)]
    return [parse_case(raw)]


def _get(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise CaseError(f"{where}: missing {key!r}")
    return data[key]


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CaseError(f"{where}: expected an object")
    return value


def parse_case(raw: object, where: str = "case") -> ConformanceCase:
    """Parse one case object of the conformance format."""
    data = _mapping(raw, where)
    case_id = str(data.get("id", where))
    at = f"case {case_id}"
    cfg_raw = _mapping(data.get("config", {}), f"{at}: config")
    types = cfg_raw.get("resource_types", list(DEFAULT_RESOURCE_TYPES))
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise CaseError(f"{at}: config.resource_types must be a non-empty list of names")
    try:
        names = resource_names(types)
        config = _parse_config(cfg_raw)
    except (ValueError, TypeError) as err:
        raise CaseError(f"{at}: config: {err}") from None
    expected = _mapping(data.get("expected", {}), f"{at}: expected")
    clocks = _clocks(expected, at)
    description = str(data.get("description", ""))
    try:
        if data.get("framework") == "unit_sort" or "input_containers" in data:
            sort_input = _sort_input(_get(data, "input_containers", at), at)
            return ConformanceCase(
                case_id, description, config, tuple(types), names, None, sort_input, expected, clocks
            )
        snapshot = _parse_snapshot(data, names, at)
    except SnapshotError as err:
        raise CaseError(f"{at}: {err}") from None
    except (ValueError, TypeError, KeyError) as err:
        raise CaseError(f"{at}: {err}") from None
    return ConformanceCase(case_id, description, config, tuple(types), names, snapshot, (), expected, clocks)


def _parse_config(raw: Mapping[str, Any]) -> ProportionalConfig:
    values: dict[str, Any] = {}
    defaults = ProportionalConfig()
    for key in _CONFIG_KEYS:
        if key not in raw:
            continue
        value = raw[key]
        default = getattr(defaults, key)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"{key}: {value!r} is not a boolean")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{key}: {value!r} is not an integer")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{key}: {value!r} is not a number")
            value = float(value)
        elif not isinstance(value, str):
            raise ValueError(f"{key}: {value!r} is not a string")
        values[key] = value
    return ProportionalConfig(**values)


def _clocks(expected: Mapping[str, Any], at: str) -> tuple[int, ...]:
    rounds = expected.get("rounds")
    if rounds is None:
        return (0,)
    if not isinstance(rounds, list) or not rounds:
        raise CaseError(f"{at}: expected.rounds must be a non-empty list")
    clocks: list[int] = []
    for i, r in enumerate(rounds):
        clock = _mapping(r, f"{at}: expected.rounds[{i}]").get("clock_ms")
        if isinstance(clock, bool) or not isinstance(clock, int):
            raise CaseError(f"{at}: expected.rounds[{i}].clock_ms must be an integer")
        clocks.append(clock)
    return tuple(clocks)


def _sort_input(raw: object, at: str) -> tuple[ContainerSnapshot, ...]:
    if not isinstance(raw, list):
        raise CaseError(f"{at}: input_containers must be a list")
    out: list[ContainerSnapshot] = []
    for i, item in enumerate(raw):
        c = _mapping(item, f"{at}: input_containers[{i}]")
        out.append(
            ContainerSnapshot(
                id=str(_get(c, "name", at)),
                app=str(c.get("app", "")),
                resource={},
                priority=int(c.get("priority", 0)),
                reserved=bool(c.get("reserved", False)),
                am=bool(c.get("am", False)),
                seq=int(_get(c, "container_id", at)),
            )
        )
    return tuple(out)


def _parse_snapshot(data: Mapping[str, Any], names: tuple[str, ...], at: str) -> ClusterSnapshot:
    cluster = _mapping(_get(data, "cluster", at), f"{at}: cluster")
    cluster_resource = resource_from_list(_get(cluster, "resource", at), names, f"{at}: cluster.resource")
    queues_raw = _get(data, "queues", at)
    if not isinstance(queues_raw, list) or not queues_raw:
        raise CaseError(f"{at}: queues must be a non-empty list")
    raw_by_path: dict[str, Mapping[str, Any]] = {}
    for i, q in enumerate(queues_raw):
        qm = _mapping(q, f"{at}: queues[{i}]")
        raw_by_path[str(_get(qm, "path", f"{at}: queues[{i}]"))] = qm
    # Parents' pending is the sum of their children's: aggregate bottom-up over the pre-order list.
    pending: dict[str, Resource] = {}
    pending_cr: dict[str, Resource] = {}
    for path in reversed(list(raw_by_path)):
        qm = raw_by_path[path]
        kids = [str(c) for c in qm.get("children", []) or []]
        qat = f"{at}: queue {path}"
        if kids:
            pending[path] = total(pending[c] for c in kids if c in pending)
            pending_cr[path] = total(pending_cr[c] for c in kids if c in pending_cr)
        else:
            pending[path] = resource_from_list(qm.get("pending", [0] * len(names)), names, f"{qat}.pending")
            pending_cr[path] = resource_from_list(
                qm.get("pending_considering_reserved", qm.get("pending", [0] * len(names))),
                names,
                f"{qat}.pending_considering_reserved",
            )
    queues: list[QueueSnapshot] = []
    for path, qm in raw_by_path.items():
        qat = f"{at}: queue {path}"
        children = tuple(str(c) for c in qm.get("children", []) or [])
        is_leaf = bool(qm.get("is_leaf", not children))
        parent = qm.get("parent")
        apps = tuple(_parse_app(a, path, names, f"{qat}.apps[{i}]") for i, a in enumerate(qm.get("apps", []) or []))
        queues.append(
            QueueSnapshot(
                path=path,
                parent=None if parent is None else str(parent),
                children=children,
                is_leaf=is_leaf,
                guaranteed=resource_from_list(_get(qm, "guaranteed", qat), names, f"{qat}.guaranteed"),
                max=resource_from_list(_get(qm, "max", qat), names, f"{qat}.max"),
                used=resource_from_list(_get(qm, "used", qat), names, f"{qat}.used"),
                pending=pending[path],
                pending_considering_reserved=pending_cr[path],
                reserved=resource_from_list(qm.get("reserved", [0] * len(names)), names, f"{qat}.reserved"),
                priority=int(qm.get("priority", 0)),
                preemption_disabled=bool(qm.get("preemption_disabled", False)),
                apps=apps,
                max_am_resource_percent=float(qm.get("max_am_resource_percent", 0.0) or 0.0),
                smallest_pending_ask=(
                    None
                    if qm.get("smallest_pending_ask") is None
                    else resource_from_list(qm["smallest_pending_ask"], names, f"{qat}.smallest_pending_ask")
                ),
            )
        )
    return ClusterSnapshot(resource=cluster_resource, queues=tuple(queues), resource_names=names)


def _parse_app(raw: object, queue: str, names: tuple[str, ...], at: str) -> AppSnapshot:
    app = _mapping(raw, at)
    app_id = str(_get(app, "id", at))
    containers: list[ContainerSnapshot] = []
    for gi, group_raw in enumerate(app.get("containers", []) or []):
        group = _mapping(group_raw, f"{at}.containers[{gi}]")
        gat = f"{at}.containers[{gi}]"
        first = int(_get(group, "first_id", gat))
        count = int(_get(group, "count", gat))
        if count < 0:
            raise CaseError(f"{gat}: negative count")
        size = resource_from_list(_get(group, "size", gat), names, f"{gat}.size")
        for k in range(count):
            number = first + k
            containers.append(
                ContainerSnapshot(
                    id=f"{app_id}/{number}",
                    app=app_id,
                    resource=dict(size),
                    priority=int(group.get("priority", 0)),
                    reserved=bool(group.get("reserved", False)),
                    am=bool(group.get("am", False)),
                    seq=number,
                )
            )
    return AppSnapshot(
        id=app_id,
        queue=queue,
        submit_order=int(app.get("submit_order", 0)),
        priority=int(app.get("priority", 0)),
        containers=tuple(containers),
    )
