"""Pods onto Sniper's applications and asks: YuniKorn's labels and annotations, gangs, opt-outs, budgets,
and what Sniper cannot express, said rather than dropped.

- **Application**: the annotation or label ``yunikorn.apache.org/app-id``, else the label
  ``applicationId``, else the label ``spark-app-selector`` (as YuniKorn reads them), else the pod's
  controlling owner as ``KIND/NAMESPACE/NAME`` (``Job/ml/train-7``, ``ReplicaSet/web/front-5d8f``), else
  the pod itself as ``Pod/NAMESPACE/NAME``. Its queue comes from the placement rules
  (:mod:`sniper.kubernetes.placement`), its user and groups from ``yunikorn.apache.org/user.info``.
- **Ask**: one per pod, keyed ``NAMESPACE/NAME``, count 1; the request is Kubernetes' own
  (:func:`sniper.kubernetes.objects.pod_request`); ``spec.priority`` is the priority and
  ``preemptionPolicy: Never`` is ``preemption_policy: never``.
- **Where**: ``nodeSelector`` and a required node affinity of one term whose expressions are ``In``
  become ``node_selector`` (values of one key intersected), also on ``kubernetes.io/hostname``: node
  names need not be hostnames, and nodes publish their labels, so the selector says exactly what the
  pod says; several terms that are each one ``In`` on the same key are their values' union. A term's
  ``matchFields`` ``metadata.name In [n]`` is ``node: n``. Required pod anti-affinity whose selector
  selects the pod itself (the same workload's replicas) becomes a ``not_in`` placement constraint in the
  term's topology (``node`` for the hostname, else the label key) on a tag every such pod carries; pods
  the selector matches that do not carry the same term are not counted.
- **Not expressible**, each an :class:`Unexpressed` the shim posts as an Event on the pod: required
  ones (other node-affinity operators or terms, required pod affinity, anti-affinity on other pods,
  ``topologySpreadConstraints`` with ``DoNotSchedule``) mean the pod must not be asked for (it could be
  bound where the kubelet refuses it); preferred ones (preferred affinities, ``ScheduleAnyway`` spreads,
  tolerated ``NoSchedule``/``NoExecute`` taints, since a tainted node is unschedulable for every pod, and
  host ports, whose conflicts are not checked) are said and the pod is asked for anyway.
- **Gangs**: a YuniKorn task group (``yunikorn.apache.org/task-group-name``, its ``minMember`` from the
  ``yunikorn.apache.org/task-groups`` JSON on the pod or on another pod of the app) or a
  scheduler-plugins PodGroup (label ``scheduling.x-k8s.io/pod-group``, the PodGroup's
  ``spec.minMember``). The feed holds a gang as ``gang_min`` on one ask, and an ask's count is fixed when
  it is added, so the shim holds a gang's pods until ``min_member`` of them wait, then publishes them as
  one ask (:func:`gang_ask`, keyed ``NAMESPACE/task-group:NAME`` or ``NAMESPACE/pod-group:NAME``) with
  ``count`` the pods held and ``gang_min`` the minimum: placed together or not at all. Each ``allocated``
  of that ask binds one of its pods still waiting (:func:`gang_members` orders them). Pods that come
  after are ordinary one-pod asks, as the feed's gangs are ordinary once held.
- **App flags**: a PriorityClass annotated ``yunikorn.apache.org/allow-preemption: "false"`` makes the
  apps whose pods use it ``allow_preemption: false``; PodDisruptionBudgets give ``max_disruption``, the
  smallest of those selecting the app's pods: ``maxUnavailable`` (a percentage of the selected pods,
  rounded up), or the selected pods less ``minAvailable`` (a percentage rounded up, as Kubernetes does).
  Both are read when the app is added (the feed has no app update).

Sans-IO and deterministic; a malformed object raises :class:`~sniper.kubernetes.objects.KubeObjectError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from sniper.core import resources as res
from sniper.core.resources import Resource
from sniper.kubernetes.objects import (
    HOSTNAME_LABEL,
    KubeObject,
    KubeObjectError,
    annotations_of,
    labels_of,
    metadata,
    name_of,
    namespace_of,
    pod_key,
    pod_request,
    selects,
    spec,
    taint_text,
)
from sniper.kubernetes.placement import pod_user
from sniper.messages import feed as f

APP_ID_KEYS = ("yunikorn.apache.org/app-id", "applicationId", "spark-app-selector")  # labels (app-id: also annotation)
TASK_GROUP_NAME = "yunikorn.apache.org/task-group-name"
TASK_GROUPS = "yunikorn.apache.org/task-groups"
POD_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
ALLOW_PREEMPTION = "yunikorn.apache.org/allow-preemption"
# Tolerations the API server gives every pod (DefaultTolerationSeconds): they say nothing about placement.
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_MAX_TAG = 256


@dataclasses.dataclass(frozen=True, slots=True)
class Unexpressed:
    """Something on a pod Sniper cannot express, in words for an Event. ``required``: a hard rule of
    the pod's, so the pod must not be asked for; else the pod is asked for without it."""

    message: str
    required: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Gang:
    """The gang a pod belongs to: the ask key its members share and its minimum members."""

    ask: str
    min_member: int


@dataclasses.dataclass(frozen=True, slots=True)
class PodAsk:
    """What one pod, or one gang of pods, asks Sniper for."""

    app: str
    ask: str
    resource: Resource
    priority: int = 0
    preemption_policy: Literal["preempt_lower_priority", "never"] = "preempt_lower_priority"
    node: str | None = None
    node_selector: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    tags: tuple[str, ...] = ()
    constraints: tuple[f.PlacementConstraint, ...] = ()
    count: int = 1
    gang_min: int = 0
    gang: Gang | None = None
    unexpressed: tuple[Unexpressed, ...] = ()

    @property
    def refused(self) -> bool:
        """A required rule of the pod's cannot be expressed: it must not be asked for."""
        return any(u.required for u in self.unexpressed)

    def feed_event(self, *, partition: str, t: float, event_id: str) -> f.AskAdded:
        return f.AskAdded(
            t=t,
            partition=partition,
            id=event_id,
            app=self.app,
            ask=self.ask,
            resource=self.resource,
            count=self.count,
            priority=self.priority,
            node=self.node,
            node_selector=self.node_selector,
            gang_min=self.gang_min,
            preemption_policy=self.preemption_policy,
            tags=self.tags,
            constraints=self.constraints,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class AppSpec:
    """An application as ``app_added`` says it."""

    app: str
    queue: str
    user: str = ""
    groups: tuple[str, ...] = ()
    priority: int = 0
    allow_preemption: bool = True
    max_disruption: int | None = None

    def feed_event(self, *, partition: str, t: float, event_id: str) -> f.AppAdded:
        return f.AppAdded(
            t=t,
            partition=partition,
            id=event_id,
            app=self.app,
            queue=self.queue,
            user=self.user,
            groups=list(self.groups),
            priority=self.priority,
            allow_preemption=self.allow_preemption,
            max_disruption=self.max_disruption,
        )


def app_id(pod: KubeObject) -> str:
    """The application the pod belongs to (see the module's docstring)."""
    labels, annotations = labels_of(pod), annotations_of(pod)
    declared = annotations.get(APP_ID_KEYS[0]) or next((labels[k] for k in APP_ID_KEYS if labels.get(k)), None)
    if declared:
        return declared
    namespace = namespace_of(pod)
    for i, owner in enumerate(metadata(pod).get("ownerReferences") or ()):
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            kind, name = owner.get("kind"), owner.get("name")
            if not isinstance(kind, str) or not kind or not isinstance(name, str) or not name:
                raise KubeObjectError(f"pod {pod_key(pod)}: metadata.ownerReferences[{i}] has no kind or name")
            return f"{kind}/{namespace}/{name}"
    return f"Pod/{namespace}/{name_of(pod)}"


def map_pod(
    pod: KubeObject, *, pod_group: KubeObject | None = None, task_groups: Mapping[str, int] | None = None
) -> PodAsk:
    """The pod's own ask (count 1), with its gang if it has one (:func:`gang_of`: ``pod_group`` is the
    PodGroup its label names, ``task_groups`` the app's task groups another pod declared) and what it
    says that Sniper cannot."""
    key = pod_key(pod)
    try:
        pod_spec = spec(pod)
        priority = pod_spec.get("priority") or 0
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise KubeObjectError(f"spec.priority: {priority!r} is not an integer")
        notes: list[Unexpressed] = []
        node, selector = _node_rules(pod_spec, notes)
        tags, constraints = _pod_anti_affinity(pod, pod_spec, notes)
        _pod_affinity(pod_spec, notes)
        _spread_and_tolerations(pod_spec, notes)
        declared = _gang_declaration(pod, task_groups, pod_group)
        gang = None
        if declared is not None and declared[1] is None:
            notes.append(Unexpressed(f"gang {declared[0]}: its minimum is declared nowhere; placed alone", False))
        elif declared is not None and declared[1] is not None:
            gang = Gang(ask=declared[0], min_member=declared[1])
        return PodAsk(
            app=app_id(pod),
            ask=key,
            resource=pod_request(pod),
            priority=priority,
            preemption_policy="never" if pod_spec.get("preemptionPolicy") == "Never" else "preempt_lower_priority",
            node=node,
            node_selector=selector,
            tags=tags,
            constraints=constraints,
            gang=gang,
            unexpressed=tuple(notes),
        )
    except KubeObjectError as err:
        raise KubeObjectError(f"pod {key}: {err}") from None
    except (AttributeError, TypeError) as err:  # a field of another shape than the API server's
        raise KubeObjectError(f"pod {key}: spec is not shaped as a pod's ({err})") from None


def _node_rules(pod_spec: Mapping[str, Any], notes: list[Unexpressed]) -> tuple[str | None, dict[str, list[str]]]:
    """``node`` and ``node_selector`` from ``nodeSelector`` and the node affinity."""
    raw_selector = pod_spec.get("nodeSelector") or {}
    if not isinstance(raw_selector, Mapping):
        raise KubeObjectError("spec.nodeSelector: expected a map of strings")
    selector: dict[str, list[str]] = {str(k): [str(v)] for k, v in sorted(raw_selector.items())}
    node: str | None = None
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    if affinity.get("preferredDuringSchedulingIgnoredDuringExecution"):
        notes.append(Unexpressed("preferred node affinity is not expressible in Sniper; ignored", required=False))
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return node, selector
    terms = required.get("nodeSelectorTerms") or []
    if len(terms) == 1:
        node = _one_term(terms[0], selector, notes)
    elif _one_key_in_each(terms):
        key = terms[0]["matchExpressions"][0]["key"]
        union = sorted({v for term in terms for v in term["matchExpressions"][0].get("values") or ()})
        _narrow(selector, key, union)
    else:
        what = "no terms" if not terms else f"{len(terms)} node selector terms (any of them)"
        notes.append(Unexpressed(f"required node affinity with {what} is not expressible in Sniper", required=True))
    return node, selector


def _one_key_in_each(terms: list[Any]) -> bool:
    """Terms that each hold one ``In`` on the same key and nothing else: their union is one selector."""
    keys = set()
    for term in terms:
        expressions = term.get("matchExpressions") or [] if isinstance(term, Mapping) else []
        if len(expressions) != 1 or term.get("matchFields") or expressions[0].get("operator") != "In":
            return False
        keys.add(expressions[0].get("key"))
    return len(keys) == 1


def _one_term(term: Mapping[str, Any], selector: dict[str, list[str]], notes: list[Unexpressed]) -> str | None:
    node = None
    for expression in term.get("matchExpressions") or ():
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and isinstance(key, str):
            _narrow(selector, key, [str(v) for v in values])
        else:
            notes.append(
                Unexpressed(f"required node affinity {key} {operator} is not expressible in Sniper", required=True)
            )
    for field in term.get("matchFields") or ():
        values = field.get("values") or []
        if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(values) == 1:
            node = str(values[0])
        else:
            notes.append(
                Unexpressed(
                    f"required node affinity on field {field.get('key')} {field.get('operator')} {values} "
                    "is not expressible in Sniper",
                    required=True,
                )
            )
    return node


def _narrow(selector: dict[str, list[str]], key: str, values: list[str]) -> None:
    """Both must hold: a key already selected keeps only the values in both lists."""
    selector[key] = sorted(set(values) & set(selector[key])) if key in selector else sorted(set(values))


def _pod_anti_affinity(
    pod: KubeObject, pod_spec: Mapping[str, Any], notes: list[Unexpressed]
) -> tuple[tuple[str, ...], tuple[f.PlacementConstraint, ...]]:
    anti = (pod_spec.get("affinity") or {}).get("podAntiAffinity") or {}
    if anti.get("preferredDuringSchedulingIgnoredDuringExecution"):
        notes.append(Unexpressed("preferred pod anti-affinity is not expressible in Sniper; ignored", required=False))
    tags: list[str] = []
    constraints: list[f.PlacementConstraint] = []
    namespace, labels = namespace_of(pod), labels_of(pod)
    for i, term in enumerate(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ()):
        at = f"spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
        selector, topology = term.get("labelSelector"), term.get("topologyKey")
        other_namespaces = [n for n in term.get("namespaces") or () if n != namespace] or term.get("namespaceSelector")
        if not isinstance(topology, str) or not topology:
            raise KubeObjectError(f"{at}.topologyKey: missing")
        if other_namespaces or not selects(selector, labels, f"{at}.labelSelector"):
            notes.append(
                Unexpressed(
                    f"required pod anti-affinity on pods other than its own kind ({at}) is not expressible in Sniper",
                    required=True,
                )
            )
            continue
        tag = _selector_tag(namespace, selector)
        tags.append(tag)
        scope = "node" if topology == HOSTNAME_LABEL else topology
        constraints.append(f.PlacementConstraint(scope=scope, op="not_in", tags=[tag]))
    return tuple(dict.fromkeys(tags)), tuple(constraints)


def _selector_tag(namespace: str, selector: object) -> str:
    """The allocation tag of the pods a self-selecting anti-affinity selector keeps apart: the namespace
    and the selector written canonically (a digest when that is longer than a tag may be)."""
    text = f"anti-affinity:{namespace}/{json.dumps(selector, sort_keys=True, separators=(',', ':'))}"
    if len(text) <= _MAX_TAG:
        return text
    return f"anti-affinity:{namespace}/sha256:{hashlib.sha256(text.encode()).hexdigest()}"[:_MAX_TAG]


def _pod_affinity(pod_spec: Mapping[str, Any], notes: list[Unexpressed]) -> None:
    affinity = (pod_spec.get("affinity") or {}).get("podAffinity") or {}
    if affinity.get("requiredDuringSchedulingIgnoredDuringExecution"):
        notes.append(Unexpressed("required pod affinity is not expressible in Sniper", required=True))
    if affinity.get("preferredDuringSchedulingIgnoredDuringExecution"):
        notes.append(Unexpressed("preferred pod affinity is not expressible in Sniper; ignored", required=False))


def _spread_and_tolerations(pod_spec: Mapping[str, Any], notes: list[Unexpressed]) -> None:
    for spread in pod_spec.get("topologySpreadConstraints") or ():
        hard = spread.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        notes.append(
            Unexpressed(
                f"topology spread constraint on {spread.get('topologyKey')} (maxSkew {spread.get('maxSkew')}) "
                f"is not expressible in Sniper{'' if hard else '; ignored'}",
                required=hard,
            )
        )
    for toleration in pod_spec.get("tolerations") or ():
        if toleration.get("key") in _DEFAULT_TOLERATIONS or toleration.get("effect") == "PreferNoSchedule":
            continue
        taint = taint_text(
            {
                "key": toleration.get("key") or "*",
                "value": toleration.get("value"),
                "effect": toleration.get("effect") or "*",
            }
        )
        notes.append(
            Unexpressed(
                f"tolerates {taint}, but Sniper places no pod on a node with a NoSchedule or NoExecute taint; "
                "such nodes stay out of its reach",
                required=False,
            )
        )
    ports = [
        p.get("hostPort") for c in pod_spec.get("containers") or () for p in c.get("ports") or () if p.get("hostPort")
    ]
    if ports:
        notes.append(
            Unexpressed(f"host ports {sorted(ports)}: Sniper does not check them for conflicts", required=False)
        )


def gang_of(
    pod: KubeObject, *, task_groups: Mapping[str, int] | None = None, pod_group: KubeObject | None = None
) -> Gang | None:
    """The pod's gang when its minimum is known: its task group (minimum from the pod's ``task-groups``
    annotation, else from ``task_groups``, the app's as another pod declared them), or its PodGroup
    (``pod_group``'s ``spec.minMember``); ``None`` otherwise."""
    declared = _gang_declaration(pod, task_groups, pod_group)
    if declared is None or declared[1] is None:
        return None
    return Gang(ask=declared[0], min_member=declared[1])


def _gang_declaration(
    pod: KubeObject, task_groups: Mapping[str, int] | None, pod_group: KubeObject | None
) -> tuple[str, int | None] | None:
    """The gang's ask key and minimum (``None``: not declared where Sniper can read it), or ``None``."""
    namespace, annotations, labels = namespace_of(pod), annotations_of(pod), labels_of(pod)
    group = annotations.get(TASK_GROUP_NAME)
    if group:
        declared = {**(task_groups or {}), **declared_task_groups(pod)}
        return f"{namespace}/task-group:{group}", declared.get(group)
    name = next((labels[k] for k in POD_GROUP_LABELS if labels.get(k)), None)
    if name is None:
        return None
    if pod_group is None:
        return f"{namespace}/pod-group:{name}", None
    minimum = spec(pod_group).get("minMember")
    if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 0:
        raise KubeObjectError(f"PodGroup {namespace}/{name}: spec.minMember {minimum!r} is not a count")
    return f"{namespace}/pod-group:{name}", minimum


def declared_task_groups(pod: KubeObject) -> dict[str, int]:
    """The task groups a pod's ``yunikorn.apache.org/task-groups`` annotation declares: name to minMember."""
    text = annotations_of(pod).get(TASK_GROUPS)
    if text is None:
        return {}
    try:
        groups = json.loads(text)
    except json.JSONDecodeError as err:
        raise KubeObjectError(f"annotation {TASK_GROUPS}: not JSON ({err.msg})") from None
    out: dict[str, int] = {}
    for i, group in enumerate(groups if isinstance(groups, list) else [None]):
        name = group.get("name") if isinstance(group, Mapping) else None
        minimum = group.get("minMember") if isinstance(group, Mapping) else None
        if not isinstance(name, str) or not name or not isinstance(minimum, int) or isinstance(minimum, bool):
            raise KubeObjectError(f"annotation {TASK_GROUPS}[{i}]: needs a name and an integer minMember")
        if minimum < 0:
            raise KubeObjectError(f"annotation {TASK_GROUPS}[{i}]: minMember {minimum} is negative")
        out[name] = minimum
    return out


def gang_members(pods: Iterable[KubeObject]) -> list[KubeObject]:
    """A gang's pods in the order the shim holds and binds them: oldest first, then by name."""
    return sorted(pods, key=lambda p: (str(metadata(p).get("creationTimestamp") or ""), pod_key(p)))


def gang_ask(members: Sequence[PodAsk]) -> PodAsk:
    """One ask for a gang's waiting pods (their own asks, in :func:`gang_members` order): ``count`` the
    pods, ``gang_min`` the gang's minimum, each resource the largest any member asks (so any allocation
    suits any member), the highest priority, and the first member's placement rules; members that
    differ in those rules cannot be one ask, and say so."""
    if not members:
        raise ValueError("a gang ask needs members")
    first = members[0]
    gang = first.gang
    if gang is None:
        raise ValueError(f"{first.ask}: not the member of a gang with a known minimum")
    resource: Resource = {}
    for member in members:
        resource = res.component_max(resource, member.resource)
    notes = list(dict.fromkeys(u for m in members for u in m.unexpressed))
    rules = (first.node, first.node_selector, first.tags, first.constraints, first.preemption_policy)
    differing = [
        m.ask for m in members if (m.node, m.node_selector, m.tags, m.constraints, m.preemption_policy) != rules
    ]
    if differing:
        notes.append(
            Unexpressed(f"gang {gang.ask}: {', '.join(differing)} differ from {first.ask} in where they may run", True)
        )
    return dataclasses.replace(
        first,
        ask=gang.ask,
        resource=resource,
        priority=max(m.priority for m in members),
        count=len(members),
        gang_min=min(gang.min_member, len(members)),
        unexpressed=tuple(notes),
    )


def allow_preemption(priority_class: KubeObject | None) -> bool:
    """``False`` for a PriorityClass annotated ``yunikorn.apache.org/allow-preemption: "false"``."""
    if priority_class is None:
        return True
    return annotations_of(priority_class).get(ALLOW_PREEMPTION, "true").strip().lower() != "false"


def pdb_selects(pdb: KubeObject, pod: KubeObject) -> bool:
    """Whether a PodDisruptionBudget covers the pod: same namespace, and its selector (``{}``: every pod
    of the namespace, none: no pod) matches the pod's labels."""
    if namespace_of(pdb) != namespace_of(pod):
        return False
    return selects(spec(pdb).get("selector"), labels_of(pod), f"PodDisruptionBudget {name_of(pdb)}: spec.selector")


def disruptions_allowed(pdb: KubeObject, selected: int) -> int | None:
    """How many of ``selected`` pods a PodDisruptionBudget lets be disrupted at once (``None``: it sets
    neither field)."""
    pdb_spec = spec(pdb)
    where = f"PodDisruptionBudget {namespace_of(pdb)}/{name_of(pdb)}"
    if pdb_spec.get("maxUnavailable") is not None:
        return _scaled(pdb_spec["maxUnavailable"], selected, f"{where}: spec.maxUnavailable")
    if pdb_spec.get("minAvailable") is not None:
        return max(0, selected - _scaled(pdb_spec["minAvailable"], selected, f"{where}: spec.minAvailable"))
    return None


def _scaled(value: object, total: int, where: str) -> int:
    """An int-or-percent of ``total``, a percentage rounded up, as Kubernetes scales PDB fields."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(int(value[:-1]) * total / 100)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise KubeObjectError(f"{where}: {value!r} is neither a count nor a percentage")


def max_disruption(pdbs: Iterable[KubeObject], pods: Sequence[KubeObject]) -> int | None:
    """An app's ``max_disruption``: the least any PodDisruptionBudget covering some of its ``pods``
    allows, counted against the pods it covers; ``None`` when none covers them."""
    allowed: list[int] = []
    for pdb in pdbs:
        covered = sum(1 for pod in pods if pdb_selects(pdb, pod))
        if covered:
            limit = disruptions_allowed(pdb, covered)
            if limit is not None:
                allowed.append(min(limit, 10**7))
    return min(allowed) if allowed else None


def map_app(
    pod: KubeObject,
    *,
    queue: str,
    priority_class: KubeObject | None = None,
    pdbs: Iterable[KubeObject] = (),
    app_pods: Sequence[KubeObject] = (),
) -> AppSpec:
    """The ``app_added`` of the application ``pod`` opens: ``queue`` (from the placement rules), the
    submitting user and groups (:func:`~sniper.kubernetes.placement.pod_user`), the pod's priority, the
    flag of its PriorityClass, and the budget of the PodDisruptionBudgets over ``app_pods`` (the app's
    pods known so far, ``pod`` among them)."""
    priority = spec(pod).get("priority") or 0
    user, groups = pod_user(pod)
    return AppSpec(
        app=app_id(pod),
        queue=queue,
        user=user,
        groups=groups,
        priority=priority if isinstance(priority, int) else 0,
        allow_preemption=allow_preemption(priority_class),
        max_disruption=max_disruption(pdbs, app_pods or [pod]),
    )
