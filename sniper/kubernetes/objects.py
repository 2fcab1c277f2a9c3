"""Kubernetes objects in Sniper's units: quantities, label selectors, a node's capacity and schedulability,
a pod's request and its role for the shim.

Works on plain JSON dicts as the API server serves them (camelCase keys, list items without ``kind``).
Quantities go through the product's one quantity grammar
(:func:`sniper.messages.quantity.parse_kubernetes_quantity`): ``cpu`` is ``vcore`` in milli-cores,
``memory`` MiB, every other resource (``nvidia.com/gpu``, ``ephemeral-storage`` and ``hugepages-*`` in
bytes, ``pods``) a count, as a ``queues.yaml`` counts it. A request is rounded up (a pod never gets less
than it asked for) and a capacity down (a node is never promised more than it has). Every pod asks for
one ``pods`` and a node offers its allocatable ``pods``, so the kubelet's pod limit holds. A node is
schedulable unless it is cordoned, its ``Ready`` condition is ``False`` or ``Unknown``, or it carries a
``NoSchedule`` or ``NoExecute`` taint: the feed's flag is one for all pods, so a pod that tolerates a
taint is still not placed on a tainted node (:mod:`sniper.kubernetes.mapping` says so on the pod). Pods
bound by anyone but Sniper (other schedulers, DaemonSets, static pods, or bound without Sniper's
allocation annotation) are foreign: their requests come off their node's published capacity
(YuniKorn's occupied resources), so their room is never handed out and they are never victims. Pure
functions; malformed objects raise :class:`KubeObjectError` naming the object and field.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any

from sniper.core import resources as res
from sniper.core.resources import QuantityError, Resource

KubeObject = Mapping[str, Any]
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The Binding's annotation the API server copies onto the pod: the allocation id of Sniper's ``allocated``.
ALLOCATION_ANNOTATION = "sniper.apache.org/allocation"
PODS = "pods"  # the kubelet's pod count: every pod asks for one
_NAMES = {"cpu": res.VCORE, "memory": res.MEMORY}
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_DONE_PHASES = ("Succeeded", "Failed")


class KubeObjectError(ValueError):
    """An object Sniper cannot read: the message names the object and the field."""


def sniper_resource_name(name: str) -> str:
    """The feed's name for a Kubernetes resource: ``cpu`` is ``vcore``, the others keep their names."""
    return _NAMES.get(name, name)


def quantity(name: str, value: object, *, round_up: bool) -> int:
    """A Kubernetes quantity of the Kubernetes resource ``name`` (``cpu``, ``memory``, ...) in Sniper's
    unit for it, rounded up or down."""
    try:
        return res.parse_kubernetes_quantity(sniper_resource_name(name), value, round_up=round_up)
    except QuantityError as err:
        raise KubeObjectError(str(err)) from None


def resources(raw: object, where: str, *, round_up: bool) -> Resource:
    """A Kubernetes resource list (``requests``, ``allocatable``, ``overhead``) in Sniper's units, zeros
    dropped; ``where`` names it in errors."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise KubeObjectError(f"{where}: expected a resource list, got {type(raw).__name__}")
    out: Resource = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise KubeObjectError(f"{where}: resource names must be non-empty strings, got {name!r}")
        try:
            amount = quantity(name, value, round_up=round_up)
        except KubeObjectError as err:
            raise KubeObjectError(f"{where}.{name}: {err}") from None
        if amount:
            out[sniper_resource_name(name)] = amount
    return out


def _mapping(obj: KubeObject, key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise KubeObjectError(f"{key}: expected an object, got {type(value).__name__}")
    return value


def _list(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise KubeObjectError(f"{where}.{key}: expected a list, got {type(value).__name__}")
    return value


def metadata(obj: KubeObject) -> Mapping[str, Any]:
    return _mapping(obj, "metadata")


def spec(obj: KubeObject) -> Mapping[str, Any]:
    return _mapping(obj, "spec")


def status(obj: KubeObject) -> Mapping[str, Any]:
    return _mapping(obj, "status")


def name_of(obj: KubeObject) -> str:
    """The object's ``metadata.name``."""
    name = metadata(obj).get("name")
    if not isinstance(name, str) or not name:
        raise KubeObjectError("metadata.name: missing")
    return name


def namespace_of(obj: KubeObject) -> str:
    """The object's ``metadata.namespace`` (``default`` when absent, as the API server fills it in)."""
    namespace = metadata(obj).get("namespace") or "default"
    if not isinstance(namespace, str):
        raise KubeObjectError("metadata.namespace: not a string")
    return namespace


def labels_of(obj: KubeObject) -> dict[str, str]:
    return _strings(metadata(obj).get("labels"), "metadata.labels")


def annotations_of(obj: KubeObject) -> dict[str, str]:
    return _strings(metadata(obj).get("annotations"), "metadata.annotations")


def _strings(raw: object, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise KubeObjectError(f"{where}: expected a map of strings")
    return dict(raw)


def pod_key(pod: KubeObject) -> str:
    """``NAMESPACE/NAME``: the pod's ask key (pod names never hold a ``/`` or a ``:``)."""
    return f"{namespace_of(pod)}/{name_of(pod)}"


def event_id(kind: str, obj: KubeObject) -> str:
    """A feed event id that derives from the object, ``kind/UID/resourceVersion``: a restarted shim that
    publishes the same view again publishes the same ids, and changes nothing."""
    meta = metadata(obj)
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if not isinstance(uid, str) or not uid or not isinstance(version, str) or not version:
        raise KubeObjectError(f"{kind} {meta.get('name')!r}: metadata.uid and metadata.resourceVersion are needed")
    return f"{kind}/{uid}/{version}"


def selects(selector: object, labels: Mapping[str, str], where: str = "selector") -> bool:
    """Whether a Kubernetes ``LabelSelector`` (``matchLabels`` and ``matchExpressions`` with ``In``,
    ``NotIn``, ``Exists``, ``DoesNotExist``) matches ``labels``; an empty selector matches everything."""
    if selector is None:
        return False
    if not isinstance(selector, Mapping):
        raise KubeObjectError(f"{where}: expected a label selector")
    match_labels = _strings(selector.get("matchLabels"), f"{where}.matchLabels")
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for i, expression in enumerate(_list(selector, "matchExpressions", where)):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(expression, Mapping):
            raise KubeObjectError(f"{at}: expected an expression")
        key, operator = expression.get("key"), expression.get("operator")
        values = _list(expression, "values", at)
        if operator == "In" and labels.get(str(key)) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[str(key)] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise KubeObjectError(f"{at}.operator: {operator!r} is not In, NotIn, Exists or DoesNotExist")
    return True


def _containers(pod_spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    containers = _list(pod_spec, key, "spec")
    if not all(isinstance(c, Mapping) for c in containers):
        raise KubeObjectError(f"spec.{key}: expected a list of containers")
    return containers


def _container_request(container: Mapping[str, Any], where: str) -> Resource:
    """A container's requests, each resource with a limit and no request counted at its limit, as the
    API server defaults it."""
    raw = container.get("resources") or {}
    if not isinstance(raw, Mapping):
        raise KubeObjectError(f"{where}.resources: expected an object")
    limits = resources(raw.get("limits"), f"{where}.resources.limits", round_up=True)
    requests = resources(raw.get("requests"), f"{where}.resources.requests", round_up=True)
    return {**limits, **requests}


def pod_request(pod: KubeObject) -> Resource:
    """What the pod asks for, as Kubernetes counts it (1.29+): the sum of its containers' requests and
    of its sidecars' (init containers with ``restartPolicy: Always``), at least what each other init
    container needs beside the sidecars started before it, plus ``spec.overhead``, plus one ``pods``.
    Each container's amounts are rounded up to Sniper's units before they are added."""
    pod_spec = spec(pod)
    running: Resource = {}
    for i, container in enumerate(_containers(pod_spec, "containers")):
        res.add_into(running, _container_request(container, f"spec.containers[{i}]"))
    sidecars: Resource = {}
    init_peak: Resource = {}
    for i, container in enumerate(_containers(pod_spec, "initContainers")):
        request = _container_request(container, f"spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            res.add_into(sidecars, request)
        else:
            init_peak = res.component_max(init_peak, res.add(sidecars, request))
    total = res.component_max(res.add(running, sidecars), init_peak)
    res.add_into(total, resources(pod_spec.get("overhead"), "spec.overhead", round_up=True))
    total[PODS] = total.get(PODS, 0) + 1
    return total


@dataclasses.dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the feed sees it: ``allocatable`` in Sniper's units (rounded down), its labels, and
    whether anything may be placed on it, with the reasons it may not."""

    name: str
    allocatable: Resource
    labels: dict[str, str]
    schedulable: bool
    why_unschedulable: tuple[str, ...] = ()


def node_view(node: KubeObject) -> NodeView:
    """A node's ``status.allocatable``, labels and schedulability (see the module's docstring)."""
    name = name_of(node)
    try:
        allocatable = resources(status(node).get("allocatable"), "status.allocatable", round_up=False)
        why: list[str] = []
        if spec(node).get("unschedulable") is True:
            why.append("cordoned (spec.unschedulable)")
        for condition in _list(status(node), "conditions", "status"):
            ready = isinstance(condition, Mapping) and condition.get("type") == "Ready"
            if ready and condition.get("status") in ("False", "Unknown"):
                why.append(f"condition Ready={condition.get('status')}")
        for taint in _list(spec(node), "taints", "spec"):
            if isinstance(taint, Mapping) and taint.get("effect") in _BLOCKING_EFFECTS:
                why.append(f"taint {taint_text(taint)}")
        return NodeView(
            name=name,
            allocatable=allocatable,
            labels=labels_of(node),
            schedulable=not why,
            why_unschedulable=tuple(why),
        )
    except KubeObjectError as err:
        raise KubeObjectError(f"node {name}: {err}") from None


def taint_text(taint: Mapping[str, Any]) -> str:
    """A taint as kubectl writes it: ``key=value:Effect`` (``key:Effect`` without a value)."""
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def published_capacity(allocatable: Resource, occupied: Iterable[Resource]) -> Resource:
    """A node's capacity on the feed: its allocatable less what the foreign pods on it request
    (YuniKorn's occupied resources), never below zero; a resource the node does not have stays out."""
    capacity = dict(allocatable)
    for request in occupied:
        for name, amount in request.items():
            if name in capacity:
                capacity[name] = max(0, capacity[name] - amount)
    return capacity


class PodRole(enum.Enum):
    """What a pod is to the shim."""

    ASK = "ask"  # ours, waiting for a node: an ask
    PLACED = "placed"  # bound by Sniper: it carries its allocation id
    FOREIGN = "foreign"  # bound by anyone else: takes room on its node, never a victim
    GATED = "gated"  # ours, but held by scheduling gates: not an ask yet
    NOT_OURS = "not_ours"  # waiting for another scheduler: nothing to Sniper
    FINISHED = "finished"  # succeeded, failed, or deleted before it was bound: takes no room


def pod_role(pod: KubeObject, scheduler_name: str) -> PodRole:
    """The pod's :class:`PodRole` for a shim running as ``scheduler_name``."""
    pod_spec = spec(pod)
    if status(pod).get("phase") in _DONE_PHASES:
        return PodRole.FINISHED
    ours = (pod_spec.get("schedulerName") or "default-scheduler") == scheduler_name
    if pod_spec.get("nodeName"):
        return PodRole.PLACED if ours and allocation_of(pod) is not None else PodRole.FOREIGN
    if not ours:
        return PodRole.NOT_OURS
    if metadata(pod).get("deletionTimestamp"):
        return PodRole.FINISHED
    if pod_spec.get("schedulingGates"):
        return PodRole.GATED
    return PodRole.ASK


def allocation_of(pod: KubeObject) -> str | None:
    """The allocation id Sniper gave a pod it bound (the annotation its Binding carried), if any."""
    return annotations_of(pod).get(ALLOCATION_ANNOTATION) or None
