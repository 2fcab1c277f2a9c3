"""YuniKorn's placement rules (``placementrules`` in ``queues.yaml``): the queue an application's pods run in.

The rules are parsed and checked with the configuration (:class:`sniper.core.config.PlacementRuleConfig`);
here they are applied as YuniKorn's core applies them (``pkg/scheduler/placement``):

- Rules are tried in order; the first that names a queue places the app. ``provided`` takes the queue the
  pod names (annotation ``yunikorn.apache.org/queue``, else the label ``yunikorn.apache.org/queue``,
  else the label ``queue``); ``user`` the user's name; ``fixed`` its ``value``; ``tag`` the value of the
  app's tag ``value``: ``namespace`` (the pod's namespace), ``namespace.parentqueue`` (the namespace's
  annotation ``yunikorn.apache.org/parentqueue``), or any label or annotation of the namespace by its key.
- A name that starts with ``root.`` is the full path; any other is one level (its dots written
  ``_dot_``) under what the ``parent`` rule gives (which must not be a leaf), else under ``root``.
- A rule whose ``filter`` does not let the user in (``allow``: the listed users or groups; ``deny``:
  everyone else; one entry with a regular-expression character is a pattern) does not match.
- A queue the configuration does not have matches only with ``create``, and only under a parent
  (``parent: true`` or with children): the shim then adds it (:func:`with_queues`) with a new
  ``partition_config`` before the app. An existing queue matches when it is a leaf, not declared a parent.
- When no rule matches, ``root.default`` if the configuration has that leaf; else the app is refused
  (:class:`PlacementError`, which the shim says on the pod). A queue name that is not valid is an error.
- Unlike YuniKorn, queues' ``submitacl`` is not checked (Sniper has no access control), and a queue
  created gets no ``childtemplate``.
- No rules at all: YuniKorn's defaults, ``provided`` (existing queues only) then ``tag namespace`` with
  ``create``: an app runs in the queue its pods name, else in ``root.<namespace>``.

Sans-IO and deterministic.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence

from sniper.core.config import (
    QUEUE_NAME,
    ConfigError,
    PartitionConfig,
    PlacementFilter,
    PlacementRuleConfig,
    QueueConfig,
    parse_partition,
    partition_to_raw,
)
from sniper.kubernetes.objects import KubeObject, KubeObjectError, annotations_of, labels_of, name_of, namespace_of

QUEUE_KEYS = ("yunikorn.apache.org/queue", "queue")  # annotation, then labels, naming the pod's queue
USER_INFO = "yunikorn.apache.org/user.info"  # JSON {"user": ..., "groups": [...]}, set by YuniKorn's admission
PARENT_QUEUE = "yunikorn.apache.org/parentqueue"  # a namespace's annotation: the tag namespace.parentqueue
DEFAULT_USER = "nobody"  # YuniKorn's user of a pod that names none
DEFAULT_QUEUE = "root.default"
DEFAULT_RULES = (
    PlacementRuleConfig(name="provided"),
    PlacementRuleConfig(name="tag", value="namespace", create=True),
)
_DOT_REPLACEMENT = "_dot_"
_REGEXP_CHARACTER = re.compile(r"[\^$*+?()\[{}|]")


class PlacementError(ValueError):
    """The application cannot be placed; the message says why."""


@dataclasses.dataclass(frozen=True, slots=True)
class AppFacts:
    """What the rules read of an application: its user and groups, the queue it names, its tags."""

    user: str = DEFAULT_USER
    groups: tuple[str, ...] = ()
    provided: str = ""
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """The app's leaf queue; ``create``: the configuration does not have it yet (see :func:`with_queues`)."""

    queue: str
    create: bool


def app_facts(pod: KubeObject, namespace: KubeObject | None) -> AppFacts:
    """An application's facts from its first pod and the pod's Namespace object (``None``: not known)."""
    annotations, labels = annotations_of(pod), labels_of(pod)
    provided = annotations.get(QUEUE_KEYS[0]) or next((labels[k] for k in QUEUE_KEYS if labels.get(k)), "")
    user, groups = pod_user(pod)
    tags: dict[str, str] = {}
    if namespace is not None:
        tags.update({k.lower(): v for k, v in labels_of(namespace).items()})
        tags.update({k.lower(): v for k, v in annotations_of(namespace).items()})
        parent = annotations_of(namespace).get(PARENT_QUEUE)
        if parent:
            tags["namespace.parentqueue"] = parent
    tags["namespace"] = namespace_of(pod)
    return AppFacts(user=user, groups=groups, provided=provided, tags=tags)


def pod_user(pod: KubeObject) -> tuple[str, tuple[str, ...]]:
    """The user who submitted the pod and their groups, from ``yunikorn.apache.org/user.info`` (as
    YuniKorn's admission controller writes it); :data:`DEFAULT_USER` without it."""
    text = annotations_of(pod).get(USER_INFO)
    if text is None:
        return DEFAULT_USER, ()
    where = f"pod {namespace_of(pod)}/{name_of(pod)}: annotation {USER_INFO}"
    try:
        info = json.loads(text)
    except json.JSONDecodeError as err:
        raise KubeObjectError(f"{where}: not JSON ({err.msg})") from None
    user = info.get("user") if isinstance(info, dict) else None
    groups = info.get("groups", []) if isinstance(info, dict) else None
    if not isinstance(user, str) or not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise KubeObjectError(f'{where}: expected {{"user": "NAME", "groups": ["GROUP", ...]}}')
    return user or DEFAULT_USER, tuple(groups)


def place(rules: Sequence[PlacementRuleConfig], facts: AppFacts, config: PartitionConfig) -> Placement:
    """The app's queue by ``rules`` (none: :data:`DEFAULT_RULES`) in the partition ``config``."""
    queues = {q.path: q for q in config.queues()}
    for rule in rules or DEFAULT_RULES:
        queue = _apply(rule, facts, queues)
        if queue is None:
            continue
        existing = queues.get(queue)
        if existing is not None:
            if existing.is_leaf and not existing.declared_parent:
                return Placement(queue=queue, create=False)
            continue  # a parent queue: the next rule
        if _creatable(queue, queues):
            return Placement(queue=queue, create=True)
    default = queues.get(DEFAULT_QUEUE)
    if default is not None and default.is_leaf and not default.declared_parent:
        return Placement(queue=DEFAULT_QUEUE, create=False)
    raise PlacementError(
        f"no placement rule placed the application of user {facts.user!r} "
        f"(queue named: {facts.provided or 'none'}; namespace {facts.tags.get('namespace', '?')})"
    )


def _apply(rule: PlacementRuleConfig, facts: AppFacts, queues: Mapping[str, QueueConfig]) -> str | None:
    """The full queue path ``rule`` names for the app, or ``None`` when it does not match."""
    if rule.name == "provided":
        name = facts.provided
    elif rule.name == "tag":
        name = facts.tags.get(rule.value.lower(), "")
    elif rule.name == "user":
        name = facts.user
    else:
        name = rule.value
    if not name or not _allows(rule.filter, facts):
        return None
    if name.startswith("root."):
        bad = [part for part in name.split(".") if not re.match(QUEUE_NAME, part)]
        if bad:
            raise PlacementError(f"{rule.name} rule: {name!r} is not a valid queue path ({bad[0]!r})")
        path = name
    else:
        child = name.replace(".", _DOT_REPLACEMENT)
        if not re.match(QUEUE_NAME, child):
            raise PlacementError(f"{rule.name} rule: {child!r} is not a valid queue name")
        parent = "root"
        if rule.parent is not None:
            found = _apply(rule.parent, facts, queues)
            if found is None:
                return None
            parent = found if found == "root" or found.startswith("root.") else f"root.{found}"
            existing = queues.get(parent)
            if existing is not None and existing.is_leaf and not existing.declared_parent:
                raise PlacementError(f"{rule.name} rule: its parent rule gave the leaf queue {parent}")
        path = f"{parent}.{child}"
    if not rule.create and path not in queues:
        return None
    return path


def _allows(rule_filter: PlacementFilter, facts: AppFacts) -> bool:
    """YuniKorn's filter: the user, then each group, against the lists or patterns; no lists: everyone."""
    if not rule_filter.users and not rule_filter.groups:
        return True
    listed = _listed(rule_filter.users, facts.user) or any(_listed(rule_filter.groups, g) for g in facts.groups)
    return listed != rule_filter.deny


def _listed(entries: tuple[str, ...], name: str) -> bool:
    if len(entries) == 1 and _REGEXP_CHARACTER.search(entries[0]):
        return re.search(entries[0], name) is not None
    return name in entries


def _creatable(path: str, queues: Mapping[str, QueueConfig]) -> bool:
    """A queue can be added when its nearest existing ancestor is a parent (with children, or declared)."""
    ancestor = path
    while ancestor not in queues:
        if "." not in ancestor:
            return False
        ancestor = ancestor.rsplit(".", 1)[0]
    queue = queues[ancestor]
    return not queue.is_leaf or queue.declared_parent


def with_queues(config: PartitionConfig, paths: Sequence[str]) -> PartitionConfig:
    """The partition's configuration with the leaf queues ``paths`` added (and the parents they need,
    declared ``parent: true``), as the configuration parser reads it; ``partition_to_raw`` of it is the
    ``partition_config`` to publish."""
    raw = partition_to_raw(config)
    root = raw["queues"][0]
    for path in paths:
        node = root
        parts = path.split(".")
        if parts[0] != "root":
            raise PlacementError(f"cannot add queue {path!r}: not under root")
        for depth, part in enumerate(parts[1:], start=2):
            children = node.setdefault("queues", [])
            child = next((c for c in children if c["name"] == part), None)
            if child is None:
                child = {"name": part}
                if depth < len(parts):
                    child["parent"] = True
                children.append(child)
            node = child
    try:
        return parse_partition(raw, f"partition {config.name}")
    except ConfigError as err:
        raise PlacementError(f"cannot add queues {', '.join(paths)}: {err}") from None
