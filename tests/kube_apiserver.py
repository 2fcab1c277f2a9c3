"""A Kubernetes API-server stand-in for the shim's tests: a real HTTP server (aiohttp.web on 127.0.0.1, in
the test's event loop) serving the objects and verbs the shim uses, with the real kube-apiserver's traps.

What it keeps: one global, monotonic ``resourceVersion`` (every write is one watch event in a bounded
history); list items without ``kind``/``apiVersion``; watches resumed from a ``resourceVersion``, with
``BOOKMARK`` events, and a ``200`` whose stream holds one ``ERROR`` event of code ``410`` for a compacted
one; an object leaving a watch's selectors arrives as ``DELETED``; writes with a stale ``resourceVersion``
are ``409``; the main endpoint of a kind with a status subresource ignores ``status`` (and ``/status``
changes nothing else); a pod's spec is immutable but for the image and tolerations; ``pods/binding``
answers a ``Status``, ``409`` when the pod is bound already, and copies the Binding's annotations onto the
pod; ``pods/eviction`` answers ``429`` while the pod's PodDisruptionBudget allows no disruption (counted
from the pods as the disruption controller counts them: Running and Ready, not terminating);
``gracePeriodSeconds`` is an integer (a float is a ``400``); ``preconditions`` are ``409`` on mismatch; a
bound pod deleted with a grace period keeps running with a ``deletionTimestamp`` until the test says its
kubelet finished (:meth:`KubeApiServer.finish_terminations`). Every HTTP request is checked against the
ClusterRole of ``deploy/kubernetes/`` (``403`` otherwise) and the (group, resource, verb) triples used are
recorded, so a test can hold the role to exactly what the shim calls.

Tests change the cluster directly (as a user, a kubelet or another scheduler would) through
:meth:`KubeApiServer.create`, :meth:`~KubeApiServer.modify`, :meth:`~KubeApiServer.remove`, and wait on
it with :meth:`~KubeApiServer.wait_for`, woken by every change and every request served (never polling).
The ``kube_api`` fixture starts one and writes a kubeconfig (``server: http://127.0.0.1:PORT``, no
credentials) at ``kube_api.kubeconfig``.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import re
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import msgspec
import pytest
import yaml
from aiohttp import web
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

Obj = dict[str, Any]

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
TERMINAL_PHASES = ("Succeeded", "Failed")


# ---------------------------------------------------------------------------------------------- kinds
@dataclass(frozen=True)
class Kind:
    """A served resource: where it lives in the API and which field selectors it supports."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False
    fields: frozenset[str] = frozenset()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.schedulerName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)
KINDS: tuple[Kind, ...] = (
    Kind("", "v1", "namespaces", "Namespace", namespaced=False, has_status=True, fields=frozenset({"status.phase"})),
    Kind("", "v1", "nodes", "Node", namespaced=False, has_status=True, fields=frozenset({"spec.unschedulable"})),
    Kind("", "v1", "pods", "Pod", namespaced=True, has_status=True, fields=POD_FIELDS),
    Kind("", "v1", "events", "Event", namespaced=True, fields=EVENT_FIELDS),
    Kind("", "v1", "configmaps", "ConfigMap", namespaced=True),
    Kind("events.k8s.io", "v1", "events", "Event", namespaced=True, fields=frozenset({"reason", "type"})),
    Kind("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
    Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True, has_status=True),
    Kind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
    Kind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", namespaced=True, has_status=True),
)
BY_PATH = {(k.prefix, k.plural): k for k in KINDS}
BY_KIND = {(k.api_version, k.kind): k for k in KINDS}
# By plural ("pods") and by plural.group ("leases.coordination.k8s.io"); a bare plural names the first kind
# with it (core events, not events.k8s.io's).
BY_PLURAL = {k.plural: k for k in reversed(KINDS)} | {f"{k.plural}.{k.group}": k for k in KINDS if k.group}


def kind_of(name: str) -> Kind:
    """A kind by plural (``pods``), by plural.group (``leases.coordination.k8s.io``) or by Kind name."""
    found = BY_PLURAL.get(name) or next((k for k in KINDS if k.kind == name), None)
    if found is None:
        raise KeyError(f"the stand-in does not serve {name!r}")
    return found


# ---------------------------------------------------------------------------------------------- errors
class ApiError(Exception):
    """An answer other than success: a ``Status`` with its HTTP code and reason."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(kind: Kind, name: str) -> ApiError:
    what = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    return ApiError(
        404, "NotFound", f'{what} "{name}" not found', {"name": name, "group": kind.group, "kind": kind.plural}
    )


def conflict(kind: Kind, name: str, message: str) -> ApiError:
    what = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": {message}',
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def success(code: int = 200) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


# ---------------------------------------------------------------------------------------------- selectors
@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present, value = self.key in labels, labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    """A ``labelSelector`` query: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``."""
    requirements: list[Requirement] = []
    for part in re.split(r",(?![^()]*\))", text):
        part = part.strip()
        if not part:
            continue
        if m := re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", part):
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            requirements.append(Requirement(m.group(1), m.group(2), values))
        elif m := re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)", part):
            requirements.append(Requirement(m.group(1), "=" if m.group(2) != "!=" else "!=", frozenset({m.group(3)})))
        elif m := re.fullmatch(r"!\s*([\w./-]+)", part):
            requirements.append(Requirement(m.group(1), "!"))
        elif re.fullmatch(r"[\w./-]+", part):
            requirements.append(Requirement(part, "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {part!r}")
    return tuple(requirements)


def selector_requirements(selector: Obj | None) -> tuple[Requirement, ...] | None:
    """A ``LabelSelector`` object (matchLabels, matchExpressions); None for a null selector (matches none)."""
    if selector is None:
        return None
    out = [Requirement(k, "=", frozenset({v})) for k, v in (selector.get("matchLabels") or {}).items()]
    operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expression in selector.get("matchExpressions") or []:
        out.append(
            Requirement(expression["key"], operators[expression["operator"]], frozenset(expression.get("values") or ()))
        )
    return tuple(out)


def field_value(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(text: str, kind: Kind) -> tuple[tuple[str, bool, str], ...]:
    """A ``fieldSelector`` query as (field, equal, value) terms; a field the kind does not index is a 400."""
    terms: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([\w.]+)\s*(==|=|!=)\s*(.*)", part)
        if m is None:
            raise bad_request(f"invalid selector: {part!r}; can't understand {part!r}")
        name = m.group(1)
        if name not in ("metadata.name", "metadata.namespace") and name not in kind.fields:
            raise bad_request(f"field label not supported: {name}")
        terms.append((name, m.group(2) != "!=", m.group(3)))
    return tuple(terms)


@dataclass(frozen=True)
class Selection:
    """Which objects a list or watch sees: a namespace (or all), label and field selectors."""

    kind: Kind
    namespace: str | None = None
    labels: tuple[Requirement, ...] = ()
    fields: tuple[tuple[str, bool, str], ...] = ()

    def matches(self, obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        if not all(r.matches(labels) for r in self.labels):
            return False
        return all((field_value(obj, name) == value) == equal for name, equal, value in self.fields)


# ---------------------------------------------------------------------------------------------- patches
MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "ownerReferences": "uid",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "addresses": "type",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: Any, key: str = "") -> Any:
    """Kubernetes' strategic merge patch for the lists the shim touches: lists with a patch merge key
    (``conditions`` by ``type``, ``containers`` by ``name``...) merge item by item (``$patch: delete``
    removes one); ``finalizers`` merge as a set; other lists replace."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: v for k, v in patch.items() if k != "$patch"}
        out = dict(target) if isinstance(target, dict) else {}
        for name, value in patch.items():
            if name.startswith("$"):
                continue
            if value is None:
                out.pop(name, None)
            else:
                out[name] = strategic_merge_patch(out.get(name), value, name)
        return out
    if isinstance(patch, list) and key in MERGE_KEYS and isinstance(target, list):
        merge_key = MERGE_KEYS[key]
        merged = [clone(item) for item in target]
        for item in patch:
            at = next((i for i, old in enumerate(merged) if old.get(merge_key) == item.get(merge_key)), None)
            if item.get("$patch") == "delete":
                if at is not None:
                    merged.pop(at)
            elif at is None:
                merged.append(clone(item))
            else:
                merged[at] = strategic_merge_patch(merged[at], item, "")
        return merged
    if isinstance(patch, list) and key == "finalizers" and isinstance(target, list):
        return list(target) + [f for f in patch if f not in target]
    return clone(patch)


def json_patch(target: Obj, operations: list[Obj]) -> Obj:
    """RFC 6902 JSON patch (add, remove, replace, test); a failed ``test`` or a missing path is a 422."""
    doc: Any = clone(target)

    def walk(path: str) -> tuple[Any, str]:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
        node = doc
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node, parts[-1]

    for op in operations:
        try:
            parent, last = walk(op["path"])
            if op["op"] == "test":
                current = parent[int(last)] if isinstance(parent, list) else parent[last]
                if current != op["value"]:
                    raise ApiError(422, "Invalid", f"the server rejected our request: test failed at {op['path']}")
            elif op["op"] == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif op["op"] in ("add", "replace"):
                if isinstance(parent, list):
                    index = len(parent) if last == "-" else int(last)
                    if op["op"] == "add":
                        parent.insert(index, op["value"])
                    else:
                        parent[index] = op["value"]
                else:
                    if op["op"] == "replace" and last not in parent:
                        raise KeyError(last)
                    parent[last] = op["value"]
            else:
                raise bad_request(f"unsupported JSON patch operation {op['op']!r}")
        except (KeyError, IndexError, ValueError, TypeError) as error:
            raise ApiError(422, "Invalid", f"the server rejected our request: {op.get('path')}: {error}") from None
    if not isinstance(doc, dict):
        raise ApiError(422, "Invalid", "the patched object is not an object")
    return doc


# ---------------------------------------------------------------------------------------------- RBAC
@dataclass(frozen=True)
class Rule:
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str] = frozenset()

    def grants(self, group: str, resource: str, verb: str, name: str | None) -> bool:
        return (
            (group in self.groups or "*" in self.groups)
            and (resource in self.resources or "*" in self.resources)
            and (verb in self.verbs or "*" in self.verbs)
            and (not self.names or name in self.names)
        )


@dataclass(frozen=True)
class ClusterRole:
    """The rules of a ClusterRole, as RBAC reads them."""

    name: str
    rules: tuple[Rule, ...]

    @classmethod
    def parse(cls, obj: Obj) -> ClusterRole:
        rules = tuple(
            Rule(
                frozenset(r.get("apiGroups") or ()),
                frozenset(r.get("resources") or ()),
                frozenset(r.get("verbs") or ()),
                frozenset(r.get("resourceNames") or ()),
            )
            for r in obj.get("rules") or ()
        )
        return cls(obj["metadata"]["name"], rules)

    def grants(self, group: str, resource: str, verb: str, name: str | None = None) -> bool:
        return any(rule.grants(group, resource, verb, name) for rule in self.rules)

    def triples(self) -> set[tuple[str, str, str]]:
        """Every (group, resource, verb) the role names."""
        return {(g, r, v) for rule in self.rules for g in rule.groups for r in rule.resources for v in rule.verbs}


def deployed_objects(folder: Path = DEPLOY) -> list[Obj]:
    """Every object of the manifests in ``folder``."""
    objects: list[Obj] = []
    for path in sorted(folder.glob("*.yaml")):
        objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return objects


def deployed_cluster_role(folder: Path = DEPLOY) -> ClusterRole:
    """The shim's ClusterRole from the manifests (the one the ClusterRoleBinding names)."""
    roles = [ClusterRole.parse(o) for o in deployed_objects(folder) if o.get("kind") == "ClusterRole"]
    if len(roles) != 1:
        raise LookupError(f"expected one ClusterRole in {folder}, found {len(roles)}")
    return roles[0]


# ---------------------------------------------------------------------------------------------- builders
def node(
    name: str,
    cpu: str = "8",
    memory: str = "16Gi",
    *,
    labels: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    taints: Iterable[Obj] = (),
) -> Obj:
    """A Node object as a kubelet registers it: allocatable cpu/memory (and extended resources), Ready."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", **(extra or {})}
    spec: Obj = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = list(taints)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    namespace: str = "default",
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    *,
    scheduler: str = "sniper",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_name: str | None = None,
    priority: int | None = None,
    spec: Mapping[str, Any] | None = None,
) -> Obj:
    """A Pod with one container requesting ``cpu``/``memory``; ``spec`` entries are laid over the spec."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    body: Obj = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}],
        **(spec or {}),
    }
    if node_name is not None:
        body["nodeName"] = node_name
    if priority is not None:
        body["priority"] = priority
    meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": {"phase": "Pending"}}


# ---------------------------------------------------------------------------------------------- the server
@dataclass(frozen=True)
class Change:
    """One write: the history entry every watch is fed from. ``obj`` and ``old`` are stored objects (never
    changed in place: a write stores a new one); ``encoded`` is ``obj`` as served, with kind and apiVersion."""

    rv: int
    kind: Kind
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None
    encoded: bytes

    def line(self, event_type: str) -> bytes:
        return event_line(event_type, self.encoded)


@dataclass(eq=False)
class Watch:
    selection: Selection
    bookmarks: bool
    send: MemoryObjectSendStream[bytes]
    receive: MemoryObjectReceiveStream[bytes]
    timeout: float  # seconds (``timeoutSeconds``), inf if none
    since: int  # the resourceVersion it is current to: an older change is not sent again

    def offer(self, change: Change) -> None:
        if change.kind is not self.selection.kind or change.rv <= self.since:
            return
        self.since = change.rv
        now = change.type != "DELETED" and self.selection.matches(change.obj)
        before = change.old is not None and self.selection.matches(change.old)
        if change.type == "DELETED":
            event = "DELETED" if self.selection.matches(change.obj) else None
        elif now and before:
            event = "MODIFIED"
        elif now:
            event = "ADDED"
        elif before:
            event = "DELETED"  # it left the selectors: the watcher must forget it
        else:
            event = None
        if event is not None:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                self.send.send_nowait(change.line(event))


@dataclass(frozen=True)
class Served:
    """One HTTP request as RBAC saw it, and the code it was answered with."""

    method: str
    path: str
    query: Mapping[str, str]
    verb: str
    group: str
    resource: str  # plural, or plural/subresource
    namespace: str | None
    name: str | None
    code: int
    body: Any = None  # the request's JSON body, if any


class KubeApiServer:
    """The stand-in: state, the Python API tests drive it with, and the HTTP server the shim talks to."""

    def __init__(
        self,
        *,
        role: ClusterRole | Literal["deployed"] | None = "deployed",
        history: int = 10_000,
        run_bound_pods: bool = True,
        user: str = "system:serviceaccount:sniper:sniper",
    ) -> None:
        """``role``: the ClusterRole enforced ("deployed": the one in deploy/kubernetes/; None: none).
        ``history``: how many changes a watch can resume across. ``run_bound_pods``: a bound pod's kubelet
        starts it at once (a second write puts it in phase Running, Ready)."""
        self.role = deployed_cluster_role() if isinstance(role, str) else role
        self.user = user
        self.run_bound_pods = run_bound_pods
        self.objects: dict[Kind, dict[tuple[str, str], Obj]] = {k: {} for k in KINDS}
        self.rv = 0
        self.floor = 0  # watches may resume from any resourceVersion >= floor
        self.history: deque[Change] = deque()
        self.history_limit = history
        self.requests: list[Served] = []
        self.rbac_used: set[tuple[str, str, str]] = set()
        self.rbac_denied: list[tuple[str, str, str]] = []
        self.watches: set[Watch] = set()
        self.lagging: dict[Kind, list[Change]] = {}  # kind -> changes its open watches have not been sent yet
        self.kubeconfig: Path | None = None
        self.url = ""
        self._changed = anyio.Event()

    # ---- the Python API: what tests (kubelets, users, other schedulers) do directly
    def create(self, obj: Obj) -> Obj:
        """Add an object (its ``apiVersion``/``kind`` say which); returns it as stored."""
        kind = BY_KIND[(obj["apiVersion"], obj["kind"])]
        return self._create(kind, clone(obj), (obj.get("metadata") or {}).get("namespace"))

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """An object as stored (a copy), or None."""
        k = kind_of(kind)
        found = self.objects[k].get((scope(k, namespace), name))
        return self._served(k, found) if found is not None else None

    def list_of(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """Every object of a kind (in ``namespace`` if given), as stored."""
        k = kind_of(kind)
        return [
            self._served(k, o) for (ns, _), o in sorted(self.objects[k].items()) if namespace is None or ns == namespace
        ]

    def modify(self, kind: str, name: str, change: Callable[[Obj], None] | Obj, namespace: str | None = None) -> Obj:
        """Change an object in place (a function given a copy) or by a strategic merge patch, status and all."""
        k = kind_of(kind)
        old = self._stored(k, scope(k, namespace), name)
        new = clone(old)
        if callable(change):
            change(new)
        else:
            new = strategic_merge_patch(new, change)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self._write(k, new, old)

    def remove(self, kind: str, name: str, namespace: str | None = None, *, grace: int | None = None) -> Obj:
        """Delete an object as a user would (a bound pod terminates gracefully unless ``grace`` is 0)."""
        k = kind_of(kind)
        return self._delete(k, scope(k, namespace), name, grace, {})

    def set_phase(self, name: str, namespace: str, phase: str) -> Obj:
        """A pod's kubelet reports its phase (``Succeeded``, ``Failed``, ``Running``)."""
        return self.modify("pods", name, {"status": {"phase": phase}}, namespace)

    def finish_terminations(self, names: Iterable[str] | None = None, namespace: str | None = None) -> list[str]:
        """The kubelets of terminating pods (all, or those named) report them stopped: they are removed."""
        wanted = set(names) if names is not None else None
        done: list[str] = []
        for (ns, name), obj in sorted(self.objects[kind_of("pods")].items()):
            if "deletionTimestamp" not in obj["metadata"]:
                continue
            if (wanted is not None and name not in wanted) or (namespace is not None and ns != namespace):
                continue
            self._commit(kind_of("pods"), "DELETED", clone(obj), obj)
            done.append(f"{ns}/{name}")
        return done

    def terminating(self) -> list[str]:
        """``namespace/name`` of the pods with a ``deletionTimestamp``."""
        return [
            f"{ns}/{n}"
            for (ns, n), o in sorted(self.objects[kind_of("pods")].items())
            if "deletionTimestamp" in o["metadata"]
        ]

    def bound(self) -> dict[str, str]:
        """``namespace/name`` -> node of every pod with a ``spec.nodeName``."""
        return {
            f"{ns}/{n}": o["spec"]["nodeName"]
            for (ns, n), o in sorted(self.objects[kind_of("pods")].items())
            if o["spec"].get("nodeName")
        }

    @contextlib.contextmanager
    def lag(self, kind: str) -> Iterator[None]:
        """Hold back the changes of a kind from its open watches until the block ends (a watch cache that
        lags behind storage): a client acts meanwhile on what it saw before, as it can in a real cluster."""
        k = kind_of(kind)
        self.lagging[k] = []
        try:
            yield
        finally:
            for change in self.lagging.pop(k):
                for watch in list(self.watches):
                    watch.offer(change)

    @property
    def changed(self) -> anyio.Event:
        """Set at the next change or request served (a new event each time): to wait on it among others."""
        return self._changed

    def drop_watches(self) -> int:
        """Close every open watch stream (as an API server restarting or a load balancer would)."""
        watches, self.watches = list(self.watches), set()
        for watch in watches:
            watch.send.close()
        return len(watches)

    def compact(self) -> None:
        """Forget the history: a watch resumed from any older resourceVersion gets the ``410`` ERROR event."""
        self.history.clear()
        self.floor = self.rv

    def bookmark(self) -> None:
        """Send a BOOKMARK (the current resourceVersion) on every watch that allowed them (not lagging)."""
        for watch in list(self.watches):
            if watch.bookmarks and watch.selection.kind not in self.lagging:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    watch.send.send_nowait(self._bookmark_line(watch.selection.kind))

    async def wait_for(self, condition: Callable[[KubeApiServer], Any], timeout: float = 30.0) -> Any:  # noqa: ASYNC109
        """Wait until ``condition(self)`` is truthy (re-checked on every change and every request served);
        returns its value; ``TimeoutError`` after ``timeout`` seconds."""
        with anyio.fail_after(timeout):
            while True:
                changed = self._changed
                value = condition(self)
                if value:
                    return value
                await changed.wait()

    def unused_grants(self) -> set[tuple[str, str, str]]:
        """The (group, resource, verb) triples the role grants that no request used: a role holding only what
        the shim calls leaves none once every path has run."""
        return self.role.triples() - self.rbac_used if self.role is not None else set()

    def served(self, verb: str | None = None, resource: str | None = None, code: int | None = None) -> list[Served]:
        """The requests served, those of a verb/resource/answer code if given."""
        return [
            s
            for s in self.requests
            if (verb is None or s.verb == verb)
            and (resource is None or s.resource == resource)
            and (code is None or s.code == code)
        ]

    # ---- the store
    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _served(self, kind: Kind, obj: Obj) -> Obj:
        return {"kind": kind.kind, "apiVersion": kind.api_version, **clone(obj)}

    def _stored(self, kind: Kind, namespace: str, name: str) -> Obj:
        found = self.objects[kind].get((namespace, name))
        if found is None:
            raise not_found(kind, name)
        return found

    def _commit(self, kind: Kind, event: str, obj: Obj, old: Obj | None) -> Obj:
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        key = (meta.get("namespace", ""), meta["name"])
        if event == "DELETED":
            self.objects[kind].pop(key, None)
        else:
            self.objects[kind][key] = obj
        served = self._served(kind, obj)
        change = Change(self.rv, kind, event, obj, old, ENCODE(served))
        self.history.append(change)
        while len(self.history) > self.history_limit:
            self.floor = self.history.popleft().rv
        if kind in self.lagging:
            self.lagging[kind].append(change)
        else:
            for watch in list(self.watches):
                watch.offer(change)
        self._notify()
        return served

    def _create(self, kind: Kind, obj: Obj, namespace: str | None) -> Obj:
        meta = obj.setdefault("metadata", {})
        if kind.namespaced:
            namespace = namespace or meta.get("namespace") or "default"
            if meta.get("namespace") not in (None, "", namespace):
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(
                    422,
                    "Invalid",
                    f"{kind.kind} is invalid: metadata.name: Required value: name or generateName is required",
                )
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key = (meta.get("namespace", ""), meta["name"])
        if key in self.objects[kind]:
            what = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
            raise ApiError(
                409,
                "AlreadyExists",
                f'{what} "{meta["name"]}" already exists',
                {"name": meta["name"], "group": kind.group, "kind": kind.plural},
            )
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = timestamp()
        meta["generation"] = 1
        meta.pop("resourceVersion", None)
        meta.pop("deletionTimestamp", None)
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
        if kind.kind == "Pod":
            obj.setdefault("status", {}).setdefault("phase", "Pending")
            obj["spec"].setdefault("schedulerName", "default-scheduler")
            obj["spec"].setdefault("terminationGracePeriodSeconds", 30)
        if kind.kind == "Namespace":
            obj.setdefault("status", {"phase": "Active"})
        return self._commit(kind, "ADDED", obj, None)

    def _write(self, kind: Kind, new: Obj, old: Obj) -> Obj:
        """Store ``new`` over ``old``: a stale resourceVersion in ``new`` is a 409."""
        name = old["metadata"]["name"]
        sent = new["metadata"].get("resourceVersion")
        if sent not in (None, "") and sent != old["metadata"]["resourceVersion"]:
            raise conflict(
                kind,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        for immutable in (
            "uid",
            "creationTimestamp",
            "namespace",
            "name",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if immutable in old["metadata"]:
                new["metadata"][immutable] = old["metadata"][immutable]
            else:
                new["metadata"].pop(immutable, None)
        new.pop("apiVersion", None)
        new.pop("kind", None)
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        if without_version(new) == without_version(old):
            return self._served(kind, old)  # a no-op write changes nothing, not even the resourceVersion
        return self._commit(kind, "MODIFIED", new, old)

    def _delete(self, kind: Kind, namespace: str, name: str, grace: int | None, preconditions: Obj) -> Obj:
        old = self._stored(kind, namespace, name)
        if preconditions.get("uid") not in (None, old["metadata"]["uid"]):
            raise conflict(
                kind,
                name,
                f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in "
                f"object meta: {old['metadata']['uid']}",
            )
        if preconditions.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
            raise conflict(
                kind,
                name,
                "Precondition failed: ResourceVersion in precondition: "
                f"{preconditions['resourceVersion']}, ResourceVersion in object meta: "
                f"{old['metadata']['resourceVersion']}",
            )
        if kind.kind != "Pod":
            return self._commit(kind, "DELETED", clone(old), old)
        if grace is None:
            grace = int(old["spec"].get("terminationGracePeriodSeconds", 30))
        unstarted = not old["spec"].get("nodeName") or old["status"].get("phase") in TERMINAL_PHASES
        if grace <= 0 or unstarted:
            return self._commit(kind, "DELETED", clone(old), old)
        current = old["metadata"].get("deletionGracePeriodSeconds")
        if current is not None and current <= grace:
            return self._served(kind, old)  # already terminating at least as fast
        new = clone(old)
        new["metadata"]["deletionTimestamp"] = timestamp(grace)
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        return self._commit(kind, "MODIFIED", new, old)

    def _bookmark_line(self, kind: Kind) -> bytes:
        body = {
            "type": "BOOKMARK",
            "object": {
                "kind": kind.kind,
                "apiVersion": kind.api_version,
                "metadata": {"resourceVersion": str(self.rv)},
            },
        }
        return ENCODE(body) + b"\n"

    # ---- pods' subresources
    def _bind(self, namespace: str, name: str, binding: Obj) -> Obj:
        pods = kind_of("pods")
        old = self._stored(pods, namespace, name)
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise ApiError(422, "Invalid", "Binding is invalid: target.name: Required value")
        uid = (binding.get("metadata") or {}).get("uid")
        if uid not in (None, old["metadata"]["uid"]):
            raise conflict(
                pods,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old['metadata']['uid']}",
            )
        if "deletionTimestamp" in old["metadata"]:
            raise conflict(pods, name, f"pod {name} is being deleted, cannot be assigned to a host")
        if old["spec"].get("nodeName"):
            raise conflict(pods, name, f'pod {name} is already assigned to node "{old["spec"]["nodeName"]}"')
        new = clone(old)
        new["spec"]["nodeName"] = target
        annotations = (binding.get("metadata") or {}).get("annotations") or {}
        if annotations:
            new["metadata"].setdefault("annotations", {}).update(annotations)
        conditions = [c for c in new["status"].get("conditions") or [] if c.get("type") != "PodScheduled"]
        new["status"]["conditions"] = [
            *conditions,
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": timestamp()},
        ]
        self._commit(pods, "MODIFIED", new, old)
        if self.run_bound_pods:
            self.modify(
                "pods",
                name,
                {
                    "status": {
                        "phase": "Running",
                        "conditions": [
                            {"type": "Ready", "status": "True"},
                            {"type": "ContainersReady", "status": "True"},
                        ],
                    }
                },
                namespace,
            )
        return success(201)

    def _evict(self, namespace: str, name: str, eviction: Obj) -> Obj:
        pods = kind_of("pods")
        target = self._stored(pods, namespace, name)
        options = eviction.get("deleteOptions") or {}
        grace = grace_period(options.get("gracePeriodSeconds"))
        preconditions = options.get("preconditions") or {}
        ignore_budget = "deletionTimestamp" in target["metadata"] or target["status"].get("phase") in (
            *TERMINAL_PHASES,
            "Pending",
        )
        if not ignore_budget:
            budgets = [
                b
                for b in self.objects[kind_of("poddisruptionbudgets")].values()
                if b["metadata"]["namespace"] == namespace and selects(b, target)
            ]
            if len(budgets) > 1:
                raise ApiError(
                    500,
                    "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                )
            if budgets:
                allowed, healthy, desired = self.disruptions_allowed(budgets[0])
                if allowed <= 0 and (healthy_pod(target) or healthy < desired):
                    budget = budgets[0]["metadata"]["name"]
                    raise ApiError(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        {
                            "causes": [
                                {
                                    "reason": "DisruptionBudget",
                                    "message": (
                                        f"The disruption budget {budget} needs {desired} healthy pods and has "
                                        f"{healthy} currently"
                                    ),
                                }
                            ]
                        },
                    )
        self._delete(pods, namespace, name, grace, preconditions)
        return success(201)

    def disruptions_allowed(self, budget: Obj) -> tuple[int, int, int]:
        """A PodDisruptionBudget's (disruptionsAllowed, currentHealthy, desiredHealthy), counted now from its
        pods as the disruption controller would (terminating pods are not healthy)."""
        namespace = budget["metadata"]["namespace"]
        matching = [
            p
            for p in self.objects[kind_of("pods")].values()
            if p["metadata"]["namespace"] == namespace
            and selects(budget, p)
            and p["status"].get("phase") not in TERMINAL_PHASES
        ]
        expected = len(matching)
        healthy = sum(1 for p in matching if healthy_pod(p))
        spec = budget.get("spec") or {}
        if spec.get("minAvailable") is not None:
            desired = scaled(spec["minAvailable"], expected)
        elif spec.get("maxUnavailable") is not None:
            desired = max(0, expected - scaled(spec["maxUnavailable"], expected))
        else:
            desired = expected
        return max(0, healthy - desired), healthy, desired

    # ---- HTTP
    @contextlib.asynccontextmanager
    async def serving(self, kubeconfig: Path | None = None) -> AsyncIterator[KubeApiServer]:
        """Serve on 127.0.0.1 (a free port) for the duration; write a kubeconfig at ``kubeconfig`` if given."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        if kubeconfig is not None:
            await anyio.Path(kubeconfig).write_text(kubeconfig_text(self.url))
            self.kubeconfig = kubeconfig
        try:
            yield self
        finally:
            self.drop_watches()
            await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path in DISCOVERY:
            return respond(DISCOVERY[request.path], 200)
        body: Any = None
        verb, group, resource, namespace, name = "", "", "", None, None

        def record(code: int) -> None:
            self.requests.append(
                Served(
                    request.method,
                    request.path,
                    dict(request.query),
                    verb,
                    group,
                    resource,
                    namespace,
                    name,
                    code,
                    body,
                )
            )
            self._notify()

        try:
            kind, namespace, name, sub = route(request.path)
            verb = http_verb(request.method, name, request.query)
            group, resource = kind.group, f"{kind.plural}/{sub}" if sub else kind.plural
            self._authorize(group, resource, verb, namespace, name)
            if request.method in ("POST", "PUT", "PATCH") or (request.method == "DELETE" and request.can_read_body):
                raw = await request.read()
                body = decode_body(raw) if raw else None
            if verb == "watch":
                watch = self._open_watch(kind, namespace, request.query)
                record(200)
                return await self._stream(request, watch)
            answer, code = self._dispatch(request, kind, namespace, name, sub, verb, body)
        except ApiError as error:
            answer, code = error.status(), error.code
        except Exception:
            record(500)  # a fault of the stand-in itself: aiohttp logs it and answers 500
            raise
        record(code)
        return respond(answer, code)

    def _authorize(self, group: str, resource: str, verb: str, namespace: str | None, name: str | None) -> None:
        self.rbac_used.add((group, resource, verb))
        if self.role is None or self.role.grants(group, resource, verb, name):
            return
        self.rbac_denied.append((group, resource, verb))
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        what = f'{resource.split("/")[0]} "{name}"' if name else resource.split("/")[0]
        raise ApiError(
            403,
            "Forbidden",
            f'{what} is forbidden: User "{self.user}" cannot {verb} resource '
            f'"{resource}" in API group "{group}"{where}',
            {"name": name or "", "group": group, "kind": resource.split("/")[0]},
        )

    def _dispatch(
        self,
        request: web.Request,
        kind: Kind,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        verb: str,
        body: Any,
    ) -> tuple[Obj, int]:
        ns = namespace or ""
        if sub is not None and name is not None:
            return self._subresource(request, kind, ns, name, sub, verb, body)
        if verb == "list":
            return self._list(kind, namespace, request.query), 200
        if verb == "get" and name is not None:
            return self._served(kind, self._stored(kind, ns, name)), 200
        if verb == "create" and name is None:
            if not isinstance(body, dict):
                raise bad_request("the body of the request was in an unknown format")
            meta = body.get("metadata") or {}
            if kind.namespaced and meta.get("namespace") not in (None, "", namespace):
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            obj = clone(body)
            if kind.has_status and kind.kind != "Node":
                obj.pop("status", None)  # a new object's status is the API server's (a pod starts Pending)
            return self._create(kind, obj, namespace), 201
        if verb == "update" and name is not None:
            return self._update(kind, ns, name, body, status_only=False), 200
        if verb == "patch" and name is not None:
            return self._patch(request, kind, ns, name, body, status_only=False), 200
        if verb == "delete" and name is not None:
            options = body if isinstance(body, dict) else {}
            grace = grace_period(options.get("gracePeriodSeconds", request.query.get("gracePeriodSeconds")))
            preconditions = options.get("preconditions") or {}
            return self._delete(kind, ns, name, grace, preconditions), 200
        raise ApiError(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({request.method} {request.path})",
        )

    def _subresource(
        self, request: web.Request, kind: Kind, namespace: str, name: str, sub: str, verb: str, body: Any
    ) -> tuple[Obj, int]:
        if sub == "status" and kind.has_status:
            if verb == "get":
                return self._served(kind, self._stored(kind, namespace, name)), 200
            if verb == "update":
                return self._update(kind, namespace, name, body, status_only=True), 200
            if verb == "patch":
                return self._patch(request, kind, namespace, name, body, status_only=True), 200
        if kind.kind == "Pod" and sub == "binding" and verb == "create":
            if not isinstance(body, dict) or body.get("kind") not in (None, "Binding"):
                raise bad_request("the body of the request is not a Binding")
            if (body.get("metadata") or {}).get("name") not in (None, name):
                raise bad_request("name in URL does not match name in Binding object")
            return self._bind(namespace, name, body), 201
        if kind.kind == "Pod" and sub == "eviction" and verb == "create":
            if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
                raise bad_request("the body of the request is not an Eviction")
            if (body.get("metadata") or {}).get("name") not in (None, name):
                raise bad_request("name in URL does not match name in Eviction object")
            return self._evict(namespace, name, body), 201
        raise not_found(kind, f"{name}/{sub}")

    def _list(self, kind: Kind, namespace: str | None, query: Mapping[str, str]) -> Obj:
        selection = selection_of(kind, namespace, query)
        items = [o for _, o in sorted(self.objects[kind].items()) if selection.matches(o)]  # encoded at once
        limit = int(query.get("limit") or 0)
        meta: Obj = {"resourceVersion": str(self.rv)}
        start = int(query.get("continue") or 0)
        if limit > 0:
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
                meta["remainingItemCount"] = len(items) - start - limit
            items = items[start : start + limit]
        return {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": meta, "items": items}

    def _update(self, kind: Kind, namespace: str, name: str, body: Any, *, status_only: bool) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        if (body.get("metadata") or {}).get("name") not in (None, name):
            raise bad_request("the name of the object does not match the name on the URL")
        old = self._stored(kind, namespace, name)
        new = self._confine(kind, old, clone(body), status_only)
        return self._write(kind, new, old)

    def _patch(
        self, request: web.Request, kind: Kind, namespace: str, name: str, body: Any, *, status_only: bool
    ) -> Obj:
        old = self._stored(kind, namespace, name)
        content = request.content_type
        current = self._served(kind, old)
        if content == "application/json-patch+json" and isinstance(body, list):
            new = json_patch(current, body)
        elif content == "application/merge-patch+json" and isinstance(body, dict):
            new = merge_patch(current, body)
        elif content == "application/strategic-merge-patch+json" and isinstance(body, dict):
            if kind.group not in ("", "policy", "coordination.k8s.io", "scheduling.k8s.io", "events.k8s.io"):
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - "
                    "accepted media types include: application/json-patch+"
                    "json, application/merge-patch+json",
                )
            new = strategic_merge_patch(current, body)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"the server does not take a {content!r} patch here")
        if "resourceVersion" not in ((body.get("metadata") or {}) if isinstance(body, dict) else {}):
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]  # no precondition sent
        return self._write(kind, self._confine(kind, old, new, status_only), old)

    def _confine(self, kind: Kind, old: Obj, new: Obj, status_only: bool) -> Obj:
        """What an endpoint may change: ``/status`` only the status, the main endpoint all but the status
        (of a kind with a status subresource); a pod's spec only in its images and tolerations."""
        if status_only:
            merged: Obj = clone(old)
            merged["status"] = new.get("status") or {}
            merged["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get("resourceVersion")
            return merged
        if kind.has_status:
            new["status"] = clone(old.get("status") or {})
        if kind.kind == "Pod":
            mutable = ("containers", "initContainers", "tolerations", "activeDeadlineSeconds")
            before = {k: v for k, v in old["spec"].items() if k not in mutable}
            after = {k: v for k, v in (new.get("spec") or {}).items() if k not in mutable}
            shapes = [
                [{k: v for k, v in c.items() if k != "image"} for c in (s.get(key) or [])]
                for s in (old["spec"], new.get("spec") or {})
                for key in ("containers", "initContainers")
            ]
            if before != after or shapes[:2] != shapes[2:]:
                raise ApiError(
                    422,
                    "Invalid",
                    f'Pod "{old["metadata"]["name"]}" is invalid: spec: Forbidden: pod '
                    "updates may not change fields other than `spec.containers[*].image`, "
                    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                    "`spec.tolerations` (only additions to existing tolerations)",
                )
        return new

    def _open_watch(self, kind: Kind, namespace: str | None, query: Mapping[str, str]) -> Watch:
        """A watch fed, from now on, with every change it selects; what it must see first is queued already:
        every selected object (no ``resourceVersion`` or "0"), the changes since a ``resourceVersion``, or one
        ``ERROR`` event of code 410 (a compacted one) after which the stream ends."""
        selection = selection_of(kind, namespace, query)
        since = query.get("resourceVersion") or "0"
        try:
            start = int(since)
        except ValueError:
            raise bad_request(f'invalid resource version "{since}"') from None
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)
        watch = Watch(
            selection,
            query.get("allowWatchBookmarks") in ("1", "true"),
            send,
            receive,
            float(query.get("timeoutSeconds") or 0) or math.inf,
            self.rv if start == 0 else start,
        )
        if start == 0:
            for _, obj in sorted(self.objects[kind].items()):
                if selection.matches(obj):
                    send.send_nowait(event_line("ADDED", ENCODE(self._served(kind, obj))))
        elif start < self.floor:
            expired = ApiError(410, "Expired", f"too old resource version: {start} ({self.floor})")
            send.send_nowait(event_line("ERROR", ENCODE(expired.status())))
            send.close()
            return watch
        else:
            for change in self.history:
                if change.rv > start:
                    watch.offer(change)
        self.watches.add(watch)
        return watch

    async def _stream(self, request: web.Request, watch: Watch) -> web.StreamResponse:
        """Write a watch's events as they come, until it is dropped, times out or its client goes away."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            with anyio.move_on_after(watch.timeout) as scope:
                async for line in watch.receive:
                    await response.write(line)
            if scope.cancelled_caught and watch.bookmarks:
                await response.write(self._bookmark_line(watch.selection.kind))  # as a watch times out
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away
        finally:
            self.watches.discard(watch)
            watch.send.close()
            watch.receive.close()
        return response


# ---------------------------------------------------------------------------------------------- helpers
DISCOVERY: dict[str, Obj] = {
    "/version": {"major": "1", "minor": "31", "gitVersion": "v1.31.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/healthz": {},
    "/readyz": {},
    "/livez": {},
}


NAMESPACE_SUBRESOURCES = ("status", "finalize")
SUBRESOURCES = {"Pod": ("status", "binding", "eviction")}


ENCODE = msgspec.json.Encoder().encode
DECODE = msgspec.json.Decoder().decode


def clone(obj: Any) -> Any:
    """A deep copy of a JSON value (through msgspec: an order of magnitude faster than copy.deepcopy)."""
    return DECODE(ENCODE(obj))


def event_line(event_type: str, encoded: bytes) -> bytes:
    """One watch event as the API server streams it: a JSON object on a line."""
    return b'{"type":"' + event_type.encode() + b'","object":' + encoded + b"}\n"


def respond(body: Obj, status: int) -> web.Response:
    return web.Response(body=ENCODE(body), status=status, content_type="application/json")


def scope(kind: Kind, namespace: str | None) -> str:
    """The namespace part of an object's key: "" for a cluster-scoped kind, else the namespace or "default"."""
    return (namespace or "default") if kind.namespaced else ""


def timestamp(after_seconds: float = 0.0) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=after_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def without_version(obj: Obj) -> Obj:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}}


def grace_period(value: Any) -> int | None:
    """``gracePeriodSeconds`` as the API server takes it: an integer (JSON number or query string); a float
    or anything else is a 400."""
    if value is None or value == "":
        return None
    if isinstance(value, bool | float):
        raise bad_request(
            f"json: cannot unmarshal number {value} into Go struct field DeleteOptions.gracePeriodSeconds of type int64"
        )
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        return int(value)
    raise bad_request(f"gracePeriodSeconds: invalid value {value!r}: an integer is required")


def scaled(value: int | str, total: int) -> int:
    """An IntOrString of a budget: an integer, or a percentage of ``total`` rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def selects(budget: Obj, target: Obj) -> bool:
    """Whether a PodDisruptionBudget's selector selects a pod (policy/v1: an empty selector selects all)."""
    requirements = selector_requirements((budget.get("spec") or {}).get("selector"))
    if requirements is None:
        return False
    labels = target["metadata"].get("labels") or {}
    return all(r.matches(labels) for r in requirements)


def healthy_pod(target: Obj) -> bool:
    conditions = target["status"].get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return "deletionTimestamp" not in target["metadata"] and target["status"].get("phase") == "Running" and ready


def selection_of(kind: Kind, namespace: str | None, query: Mapping[str, str]) -> Selection:
    return Selection(
        kind,
        namespace,
        parse_label_selector(query.get("labelSelector", "")),
        parse_field_selector(query.get("fieldSelector", ""), kind),
    )


def route(path: str) -> tuple[Kind, str | None, str | None, str | None]:
    """(kind, namespace, name, subresource) of an API path; a path the stand-in does not serve is a 404."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        prefix, rest = f"/api/{parts[1]}", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        prefix, rest = f"/apis/{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    unknown = ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in NAMESPACE_SUBRESOURCES:
        namespace, rest = rest[1], rest[2:]
    if not rest or (prefix, rest[0]) not in BY_PATH or len(rest) > 3:
        raise unknown
    kind = BY_PATH[(prefix, rest[0])]
    if kind.namespaced is False and namespace is not None:
        raise unknown
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub not in SUBRESOURCES.get(kind.kind, ("status",) if kind.has_status else ()):
        raise unknown
    return kind, namespace, rest[1] if len(rest) > 1 else None, sub


def http_verb(method: str, name: str | None, query: Mapping[str, str]) -> str:
    """The RBAC verb of a request."""
    if method == "GET":
        if query.get("watch") in ("1", "true"):
            return "watch"
        return "get" if name is not None else "list"
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch"}
    if method in verbs:
        return verbs[method]
    if method == "DELETE":
        return "delete" if name is not None else "deletecollection"
    raise ApiError(405, "MethodNotAllowed", f"the server does not allow the method {method}")


def decode_body(raw: bytes) -> Any:
    try:
        return DECODE(raw)
    except msgspec.DecodeError as error:
        raise bad_request(f"the body of the request was in an unknown format: {error}") from None


def kubeconfig_text(url: str, namespace: str = "sniper") -> str:
    """A kubeconfig pointing at ``url`` with no credentials (as kubectl and client libraries read it)."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": "stand-in", "cluster": {"server": url}}],
            "users": [{"name": "stand-in", "user": {}}],
            "contexts": [
                {"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in", "namespace": namespace}}
            ],
            "current-context": "stand-in",
        }
    )


@pytest.fixture
async def kube_api(tmp_path: Path) -> AsyncIterator[KubeApiServer]:
    """A served stand-in enforcing the deployed ClusterRole; its kubeconfig is ``kube_api.kubeconfig``."""
    async with KubeApiServer().serving(tmp_path / "kubeconfig") as api:
        yield api
