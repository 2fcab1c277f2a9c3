"""The shim's view of the cluster and what Sniper has been told of it: watch changes in, feed events out.

What it owns: the objects the informers keep (nodes, pods, namespaces, PriorityClasses, PDBs, PodGroups),
which of them Sniper knows (the apps and asks published, each node's published capacity and
schedulability), and which pod carries which allocation. Sans-IO and deterministic: every method takes
the feed's time ``t`` and returns the feed events to publish (and the pods to tell something to); the
translation of one object is :mod:`sniper.kubernetes.objects`, :mod:`~sniper.kubernetes.mapping` and
:mod:`~sniper.kubernetes.placement`'s. Invariants: every event id derives from the objects (UID and
resourceVersion), so a fresh view of the same cluster publishes the same ids and Sniper, which
remembers ids, changes nothing it already knows; a pod is asked for once per view; a node's capacity on
the feed is its allocatable less the requests of the foreign pods bound to it (never handed out); a pod
Sniper bound that finishes or goes is released with the allocation id it carries.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterable
from typing import Any

import msgspec
import yaml

from sniper.core.config import (
    CONFIG_MAP_KEY,
    ConfigError,
    PartitionConfig,
    parse_config,
    parse_partition,
    partition_to_raw,
)
from sniper.core.resources import Resource
from sniper.kubernetes import mapping, placement
from sniper.kubernetes.informer import object_key
from sniper.kubernetes.objects import (
    KubeObject,
    KubeObjectError,
    PodRole,
    allocation_of,
    event_id,
    node_view,
    pod_key,
    pod_request,
    pod_role,
    published_capacity,
)
from sniper.messages import feed as f

log = logging.getLogger("sniper.k8s")


@dataclasses.dataclass(frozen=True, slots=True)
class Notice:
    """Something to say on a pod (an Event): Sniper cannot express what it asks, or cannot read it."""

    pod: KubeObject
    reason: str
    message: str
    name: str  # the Event's name: derived from the pod and what is said, so saying it again is a no-op


@dataclasses.dataclass(slots=True)
class Out:
    """What one change asks the shim to do: publish ``events`` in order, then post ``notices``."""

    events: list[f.Feed] = dataclasses.field(default_factory=list)
    notices: list[Notice] = dataclasses.field(default_factory=list)

    def extend(self, other: Out) -> None:
        self.events.extend(other.events)
        self.notices.extend(other.notices)


@dataclasses.dataclass(slots=True)
class _Node:
    uid: str
    allocatable: Resource
    labels: dict[str, str]
    schedulable: bool
    published: tuple[Resource, bool] | None = None  # (capacity, schedulable) as Sniper knows it


def _digest(value: object) -> str:
    return hashlib.sha256(msgspec.json.encode(value, order="sorted")).hexdigest()[:12]


def default_partition(name: str) -> PartitionConfig:
    """The configuration without a queues file: a root whose ``root.<namespace>`` queues the default
    placement creates."""
    return parse_partition({"name": name, "queues": [{"name": "root", "parent": True, "submitacl": "*"}]})


def config_map_partition(config_map: KubeObject, partition: str) -> PartitionConfig:
    """The partition ``partition`` of the ``queues.yaml`` a ConfigMap carries (YuniKorn's format)."""
    meta = config_map.get("metadata") or {}
    where = f"ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')}"
    text = (config_map.get("data") or {}).get(CONFIG_MAP_KEY)
    if not isinstance(text, str):
        raise ConfigError(f"{where}: no data key {CONFIG_MAP_KEY!r}")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: {CONFIG_MAP_KEY} is not valid YAML: {e}") from None
    return parse_config(raw).partition(partition)


class ClusterView:
    """One partition's view: ``on_*`` take a watch change and return what to publish."""

    def __init__(self, partition: str, scheduler: str, config: PartitionConfig) -> None:
        self.partition = partition
        self.scheduler = scheduler
        self.config = config
        self.config_published: str | None = None  # digest of the configuration Sniper has
        self.nodes: dict[str, _Node] = {}
        self.node_tokens: dict[str, str] = {}  # node -> the resourceVersion of its last published change
        self.pods: dict[str, dict[str, Any]] = {}  # NAMESPACE/NAME -> pod
        self.roles: dict[str, PodRole] = {}
        self.occupied: dict[str, dict[str, Resource]] = {}  # node -> foreign pod -> its request
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.priority_classes: dict[str, dict[str, Any]] = {}
        self.pdbs: dict[str, dict[str, Any]] = {}
        self.pod_groups: dict[str, dict[str, Any]] = {}
        self.apps: dict[str, set[str]] = {}  # app -> its pods (keys)
        self.app_of: dict[str, str] = {}  # pod -> app
        self.asked: dict[str, str] = {}  # pod -> the ask it was published in (its own key, or its gang's)
        self.gang_members: dict[tuple[str, str], set[str]] = {}  # (app, gang ask) -> pending member pods
        self.gangs_asked: set[tuple[str, str]] = set()  # (app, gang ask) published as one ask
        self.task_groups: dict[str, dict[str, int]] = {}  # app -> its task groups' minMember, as declared
        self.allocations: dict[str, str] = {}  # allocation id -> pod
        self.allocation_of_pod: dict[str, str] = {}  # pod -> allocation id
        self.gone: set[str] = set()  # allocations whose pod went, released until Sniper confirms it
        self.holding = False  # the first list of pods is being read: waiting pods are asked for after it
        self.held: list[str] = []

    # --- configuration ---------------------------------------------------------------------------------

    def on_config(self, config: PartitionConfig, t: float, source_id: str) -> Out:
        """A new queue configuration (the file at start, a ConfigMap change)."""
        self.config = config
        return self._publish_config(t, source_id)

    def _publish_config(self, t: float, source_id: str) -> Out:
        raw = partition_to_raw(self.config)
        digest = _digest(raw)
        if digest == self.config_published:
            return Out()
        self.config_published = digest
        return Out([f.PartitionConfigEvent(t=t, partition=self.partition, id=f"{source_id}/{digest}", config=raw)])

    # --- nodes -----------------------------------------------------------------------------------------

    def on_node(self, change: str, node: KubeObject, t: float) -> Out:
        name = object_key(node)
        meta = node.get("metadata") or {}
        if change == "DELETED":
            known = self.nodes.pop(name, None)
            self.node_tokens.pop(name, None)
            if known is None or known.published is None:
                return Out()
            return Out([f.NodeRemoved(t=t, partition=self.partition, id=event_id("node-removed", node), node=name)])
        try:
            view = node_view(node)
        except KubeObjectError:
            return Out()  # a node Sniper cannot read is not offered; the API server would refuse it anyway
        state = self.nodes.get(name)
        if state is None or state.uid != str(meta.get("uid", "")):
            state = _Node(str(meta.get("uid", "")), view.allocatable, view.labels, view.schedulable)
            self.nodes[name] = state
        else:
            state.allocatable, state.labels, state.schedulable = view.allocatable, view.labels, view.schedulable
        self._advance(name, str(meta.get("resourceVersion", "")))
        return self._publish_node(name, t)

    def _advance(self, node: str, version: str) -> None:
        """The node's change token moves to ``version`` if it is later (resourceVersions are etcd's
        revision: integers in practice, compared as such when they are)."""
        before = self.node_tokens.get(node, "")
        if (
            not before
            or (version.isdigit() and before.isdigit() and int(version) > int(before))
            or not (version.isdigit() and before.isdigit())
        ):
            self.node_tokens[node] = version

    def _publish_node(self, name: str, t: float) -> Out:
        state = self.nodes.get(name)
        if state is None:
            return Out()
        capacity = published_capacity(state.allocatable, self.occupied.get(name, {}).values())
        now = (capacity, state.schedulable)
        if state.published == now:
            return Out()
        first = state.published is None
        state.published = now
        token = self.node_tokens.get(name, "")
        events: list[f.Feed] = []
        if first:
            events.append(
                f.NodeAdded(
                    t=t,
                    partition=self.partition,
                    id=f"node/{state.uid}",
                    node=name,
                    capacity=capacity,
                    labels=state.labels,
                    schedulable=state.schedulable,
                )
            )
        # Also after the node_added: a restarted view's node_added is a duplicate Sniper ignores, and this
        # update (named by the node's latest change) brings Sniper's copy up to date if it changed meanwhile.
        events.append(
            f.NodeUpdated(
                t=t,
                partition=self.partition,
                id=f"node/{state.uid}/{token}/{_digest(now)}",
                node=name,
                capacity=capacity,
                schedulable=state.schedulable,
            )
        )
        return Out(events)

    # --- the objects pods refer to ---------------------------------------------------------------------

    def on_namespace(self, change: str, obj: KubeObject) -> None:
        self._keep(self.namespaces, change, obj)

    def on_priority_class(self, change: str, obj: KubeObject) -> None:
        self._keep(self.priority_classes, change, obj)

    def on_pdb(self, change: str, obj: KubeObject) -> None:
        self._keep(self.pdbs, change, obj)

    def on_pod_group(self, change: str, obj: KubeObject, t: float) -> Out:
        self._keep(self.pod_groups, change, obj)
        out = Out()
        for key in sorted(self.pods):  # pods waiting for their group's minMember to be known
            if self.roles.get(key) is PodRole.ASK and key not in self.asked:
                out.extend(self._ask(self.pods[key], t))
        return out

    @staticmethod
    def _keep(store: dict[str, dict[str, Any]], change: str, obj: KubeObject) -> None:
        if change == "DELETED":
            store.pop(object_key(obj), None)
        else:
            store[object_key(obj)] = dict(obj)

    # --- pods ------------------------------------------------------------------------------------------

    def on_pod(self, change: str, pod: KubeObject, t: float) -> Out:
        key = pod_key(pod)
        before = self.roles.get(key)
        if change == "DELETED":
            role = PodRole.FINISHED
        else:
            try:
                role = pod_role(pod, self.scheduler)
            except KubeObjectError as e:  # the API server would not serve it; nothing to do with it
                log.warning("pod %s ignored: %s", key, e)
                return Out()
            self.pods[key] = dict(pod)
        out = Out()
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if before is PodRole.FOREIGN and role is not PodRole.FOREIGN:
            out.extend(self._unoccupy(key, pod, t))
        if role is PodRole.FOREIGN:
            if before is not PodRole.FOREIGN or self.occupied.get(node, {}).get(key) != self._request(pod):
                out.extend(self._occupy(key, node, pod, t))
        elif role is PodRole.ASK:
            if self.holding:
                self.held.append(key)
            elif key not in self.asked:
                out.extend(self._ask(pod, t))
        elif role is PodRole.PLACED:
            self._pending_gone(key)
            allocation = allocation_of(pod) or self.allocation_of_pod.get(key)
            if allocation:
                self.allocations[allocation] = key
                self.allocation_of_pod[key] = allocation
            if key not in self.app_of:  # a view that starts with it bound: its app's queue is in use
                out.extend(self._running_app(pod, t))
        elif role is PodRole.FINISHED:
            out.extend(self._finished(key, pod, before, t))
        if change == "DELETED" or role is PodRole.FINISHED:
            out.extend(self._forget(key, pod, t))
        else:
            self.roles[key] = role
        return out

    @staticmethod
    def _request(pod: KubeObject) -> Resource:
        try:
            return pod_request(pod)
        except KubeObjectError:
            return {}

    def _occupy(self, key: str, node: str, pod: KubeObject, t: float) -> Out:
        self.occupied.setdefault(node, {})[key] = self._request(pod)
        self._advance(node, str((pod.get("metadata") or {}).get("resourceVersion", "")))
        return self._publish_node(node, t)

    def _unoccupy(self, key: str, pod: KubeObject, t: float) -> Out:
        out = Out()
        for node, pods in self.occupied.items():
            if pods.pop(key, None) is not None:
                self._advance(node, str((pod.get("metadata") or {}).get("resourceVersion", "")))
                out.extend(self._publish_node(node, t))
        return out

    def _app_for(self, pod: KubeObject, t: float) -> tuple[str | None, Out]:
        """The pod's app, published first if Sniper does not know it yet (None: it cannot be placed; the
        next pod of the app tries again)."""
        app = mapping.app_id(pod)
        key = pod_key(pod)
        members = self.apps.get(app)
        if members:
            members.add(key)
            self.app_of[key] = app
            return app, Out()
        out = Out()
        namespace = self.namespaces.get(str((pod.get("metadata") or {}).get("namespace", "")))
        try:
            where = placement.place(self.config.placement_rules, placement.app_facts(pod, namespace), self.config)
        except placement.PlacementError as e:
            out.notices.append(self._notice(pod, "FailedScheduling", str(e)))
            return None, out
        class_name = (pod.get("spec") or {}).get("priorityClassName")
        spec = mapping.map_app(
            pod,
            queue=where.queue,
            priority_class=self.priority_classes.get(str(class_name)) if class_name else None,
            pdbs=[p for p in self.pdbs.values() if mapping.pdb_selects(p, pod)],
            app_pods=[pod],
        )
        if where.create:
            self.config = placement.with_queues(self.config, [where.queue])
            out.extend(self._publish_config(t, "placement"))
        self.apps[app] = {key}
        self.app_of[key] = app
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        out.events.append(spec.feed_event(partition=self.partition, t=t, event_id=f"app/{app}/{uid}"))
        return app, out

    def hold_asks(self) -> None:
        """Until :meth:`release_asks`, waiting pods are held: a restarted view places the apps of the pods it
        finds bound first, so a queue created for a new app is published with every queue in use."""
        self.holding = True

    def release_asks(self, t: float) -> Out:
        """Ask for the pods held, in the order they came."""
        self.holding = False
        held, self.held = self.held, []
        out = Out()
        for key in held:
            if self.roles.get(key) is PodRole.ASK and key not in self.asked:
                out.extend(self._ask(self.pods[key], t))
        return out

    def _running_app(self, pod: KubeObject, t: float) -> Out:
        """The app of a pod found bound (a restarted view): placed again, so that a queue the placement
        created is in every configuration published from now on (Sniper refuses one that drops a queue
        in use); its ``app_added`` changes nothing Sniper knows."""
        try:
            return self._app_for(pod, t)[1]
        except KubeObjectError as e:
            log.warning("pod %s: its app cannot be read: %s", pod_key(pod), e)
            return Out()

    def _map(self, pod: KubeObject) -> mapping.PodAsk:
        app = mapping.app_id(pod)
        groups = self.task_groups.setdefault(app, {})
        groups.update(mapping.declared_task_groups(pod))
        return mapping.map_pod(pod, pod_group=self._pod_group(pod), task_groups=groups)

    def ask_again(self, key: str, t: float, why: str) -> Out:
        """The waiting pod ``key`` asked for once more (Sniper dropped an ask of its name): the event is named
        by ``why`` too, since Sniper ignores an id it has seen."""
        pod = self.pods.get(key)
        if pod is None or self.roles.get(key) is not PodRole.ASK:
            return Out()
        self.asked.pop(key, None)
        return self._ask(pod, t, again=f"/{why}")

    def _ask(self, pod: KubeObject, t: float, again: str = "") -> Out:
        key = pod_key(pod)
        try:
            ask = self._map(pod)
        except KubeObjectError as e:
            self.asked[key] = key  # said once; asked again only if the pod changes into something readable
            return Out(notices=[self._notice(pod, "FailedScheduling", str(e))])
        out = Out(notices=[self._notice(pod, "Unexpressed", u.message) for u in ask.unexpressed])
        if ask.refused:
            self.asked[key] = key
            return out
        try:
            app, placed = self._app_for(pod, t)
        except KubeObjectError as e:
            self.asked[key] = key
            out.notices.append(self._notice(pod, "FailedScheduling", str(e)))
            return out
        out.extend(placed)
        if app is None:
            self.asked[key] = key
            return out
        gang = ask.gang
        if gang is None or (app, gang.ask) in self.gangs_asked:
            self.asked[key] = key  # alone, or after its gang was asked for: an ordinary one-pod ask
            out.events.append(ask.feed_event(partition=self.partition, t=t, event_id=event_id("pod", pod) + again))
            return out
        members = self.gang_members.setdefault((app, gang.ask), set())
        members.add(key)
        if len(members) < max(1, gang.min_member):
            return out  # a gang is asked for once its minimum waits, all together
        pending = mapping.gang_members([self.pods[k] for k in members])
        whole = mapping.gang_ask([self._map(p) for p in pending])
        if whole.refused:
            for member in pending:
                self.asked[pod_key(member)] = gang.ask
            out.notices.extend(self._notice(p, "Unexpressed", u.message) for p in pending for u in whole.unexpressed)
            return out
        self.gangs_asked.add((app, gang.ask))
        for member in pending:
            self.asked[pod_key(member)] = gang.ask
        ids = ",".join(event_id("pod", p) for p in pending)
        out.events.append(whole.feed_event(partition=self.partition, t=t, event_id=f"gang/{app}/{_digest(ids)}"))
        return out

    def _pod_group(self, pod: KubeObject) -> KubeObject | None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        name = next((labels[k] for k in mapping.POD_GROUP_LABELS if labels.get(k)), None)
        if not name:
            return None
        return self.pod_groups.get(f"{(pod.get('metadata') or {}).get('namespace', '')}/{name}")

    def _pending_gone(self, key: str) -> None:
        """The pod is no longer pending (bound, or gone): out of its gang's pending members."""
        for members in self.gang_members.values():
            members.discard(key)

    def _finished(self, key: str, pod: KubeObject, before: PodRole | None, t: float) -> Out:
        allocation = self.allocation_of_pod.get(key) or allocation_of(pod)
        if allocation:
            self.gone.add(allocation)
            release = f.AllocationReleased(
                t=t, partition=self.partition, id=f"pod/{self._uid(pod)}/released", allocation=allocation
            )
            app = self.app_of.get(key)
            if app is None or self.asked.get(key, key) != key:
                return Out([release])
            # Sniper keeps a fully allocated ask: it goes too, so a pod created again under the name (a
            # StatefulSet's) is a new ask.
            ask_gone = f.AskRemoved(t=t, partition=self.partition, id=f"pod/{self._uid(pod)}/ask", app=app, ask=key)
            return Out([release, ask_gone])
        if before is PodRole.ASK and key in self.asked and key in self.app_of:
            ask = self.asked[key]
            if ask != key:
                return Out()  # a gang member: the gang's ask stays for the others
            removed = f.AskRemoved(
                t=t, partition=self.partition, id=f"pod/{self._uid(pod)}/removed", app=self.app_of[key], ask=key
            )
            return Out([removed])
        return Out()

    def _forget(self, key: str, pod: KubeObject, t: float) -> Out:
        self._pending_gone(key)
        self.roles.pop(key, None)
        self.pods.pop(key, None)
        self.asked.pop(key, None)
        allocation = self.allocation_of_pod.pop(key, None)
        if allocation is not None:
            self.allocations.pop(allocation, None)
        app = self.app_of.pop(key, None)
        if app is None:
            return Out()
        members = self.apps.get(app)
        if members is not None:
            members.discard(key)
            if not members:
                del self.apps[app]
                return Out(
                    [f.AppRemoved(t=t, partition=self.partition, id=f"app/{app}/{self._uid(pod)}/removed", app=app)]
                )
        return Out()

    @staticmethod
    def _uid(pod: KubeObject) -> str:
        return str((pod.get("metadata") or {}).get("uid", ""))

    def _notice(self, pod: KubeObject, reason: str, message: str) -> Notice:
        meta = pod.get("metadata") or {}
        return Notice(pod, reason, message, f"{meta.get('name', '')}.sniper-{_digest([self._uid(pod), message])}")

    # --- decisions ---------------------------------------------------------------------------------------

    def pod_for(self, app: str, ask: str) -> dict[str, Any] | None:
        """The pending pod an ``allocated`` of ``ask`` binds: the pod itself, or a gang member not yet bound
        nor promised to another allocation."""
        pod = self.pods.get(ask)
        if pod is not None:
            return pod
        promised = set(self.allocation_of_pod)
        waiting = [self.pods[k] for k in self.gang_members.get((app, ask), ()) if k in self.pods]
        for member in mapping.gang_members(waiting):
            if pod_key(member) not in promised and self.roles.get(pod_key(member)) is PodRole.ASK:
                return self.pods[pod_key(member)]
        return None

    def promise(self, allocation: str, pod: KubeObject) -> None:
        """``allocation`` is the pod's (its Binding is on the way)."""
        key = pod_key(pod)
        self.allocations[allocation] = key
        self.allocation_of_pod[key] = allocation

    def victim(self, allocation: str) -> dict[str, Any] | None:
        key = self.allocations.get(allocation)
        return self.pods.get(key) if key is not None else None

    def released(self, allocation: str) -> None:
        """Sniper confirmed the allocation ended: forget it."""
        self.gone.discard(allocation)
        key = self.allocations.pop(allocation, None)
        if key is not None and self.allocation_of_pod.get(key) == allocation:
            del self.allocation_of_pod[key]

    def pods_of(self, app: str, ask: str) -> Iterable[dict[str, Any]]:
        """The pods an ask (a pod's own, or a gang's) stands for; without an ask, all the app's pods."""
        if not ask:
            return [self.pods[k] for k in sorted(self.apps.get(app, ())) if k in self.pods]
        if ask in self.pods:
            return [self.pods[ask]]
        return [self.pods[k] for k in sorted(self.gang_members.get((app, ask), ())) if k in self.pods]
