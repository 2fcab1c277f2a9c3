"""Admission: the one home of "may this ask be admitted?" (:func:`refusal`, its checks in order, each
with its rejection code), of "may this queue take a new app?" (:func:`app_refusal`: not when it or a
queue above it is stopped, YARN's queue states, which :func:`queue_state` names, nor when the partition
holds ``admission.max_apps`` apps already), and of the node shapes it judges an ask's fit by
(:class:`NodeShapes`).

An ask is refused when it could never be placed or would go past the partition's bounds: its app is
unknown, it asks for nothing, an application master asks to run opportunistic, it passes an ``admission``
bound, its placement constraints are malformed, it has a topology while opportunistic or names a level
the partition does not list, its gang is larger than its count, it (or its gang) can never fit a
queue's ``max``, no node matches its node selector, no node (or its required node) can ever hold it,
or no set of nodes can ever hold its gang together. The cache (:mod:`sniper.core.cache`) rejects what
this refuses and commits the rest; nothing here changes the state.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, NamedTuple

from sniper.core import constraints, gang
from sniper.core import resources as res
from sniper.core.config import AdmissionConfig
from sniper.core.resources import Resource
from sniper.core.state import App, PartitionState, Queue, selector_matches
from sniper.core.units import human_resource
from sniper.messages import decisions as d
from sniper.messages import feed as f


class Rejection(NamedTuple):
    """Why an ask is refused: its code, the reason in words, and the figures the reason quotes as numbers
    (the ask's resource, and the ``max`` or capacity it can never fit)."""

    code: d.RejectionCode
    reason: str
    resource: Resource | None = None
    bound: Resource | None = None


@dataclasses.dataclass(slots=True)
class NodeShapes:
    """Node capacities seen in a partition (nodes that left included: they may come back), none covered by
    another (a handful: node types, not nodes), and every resource those shapes name (a dropped shape's
    are kept ones')."""

    shapes: list[Resource] = dataclasses.field(default_factory=list)
    names: set[str] = dataclasses.field(default_factory=set)

    def see(self, capacity: Resource) -> None:
        """Count a node of ``capacity``."""
        if not any(res.fits(capacity, shape) for shape in self.shapes):
            self.shapes = [shape for shape in self.shapes if not res.fits(shape, capacity)] + [capacity]
            self.names.update(capacity)


def refusal(state: PartitionState, e: f.AskAdded, resource: Resource, shapes: NodeShapes) -> Rejection | None:
    """Why ask ``e`` may not be admitted to ``state`` (its code and reason), or ``None`` when it may,
    checked in the order the module lists them; ``resource``: what it asks for, as the state would hold
    it (:func:`sniper.core.resources.normalized`)."""
    app = state.apps.get(e.app)
    if app is None:
        return Rejection("unknown_app", f"ask {e.ask}: unknown app {e.app}")
    if not resource:
        return Rejection("empty_ask", f"ask {e.app}/{e.ask} asks for nothing")
    opportunistic = e.execution_type == "opportunistic"
    if e.am and opportunistic:  # as YARN: an AM always runs guaranteed
        return Rejection("opportunistic_am", f"ask {e.app}/{e.ask}: an application master cannot be opportunistic")
    why = over_admission(state, app, e.count)
    if why is not None:
        return Rejection("over_admission", f"ask {e.app}/{e.ask} (count {e.count}): {why}")
    why = constraints.malformed(e.constraints, e.tags, opportunistic) if e.constraints else None
    if why is not None:
        return Rejection("bad_constraint", f"ask {e.app}/{e.ask}: {why}")
    if e.topology is not None and opportunistic:
        return Rejection("bad_topology", f"ask {e.app}/{e.ask}: an opportunistic ask cannot have a topology")
    levels = () if state.config is None or state.config.topology is None else state.config.topology.levels
    if e.topology is not None and e.topology.level not in levels:
        listed = f"is not among the partition's topology levels ({', '.join(levels)})"
        why = f"topology level {d.clipped(e.topology.level, d.MAX_QUOTE)} " + (
            listed if levels else "is named, but the partition has no topology"
        )
        return Rejection("bad_topology", f"ask {e.app}/{e.ask}: {why}")
    if e.gang_min > e.count:
        why = f"gang_min {e.gang_min} is more than its count {e.count}"
        return Rejection("gang_over_count", f"ask {e.app}/{e.ask}: {why}")
    whole = res.scale(resource, e.gang_min) if e.gang_min > 1 else resource  # a gang's members fit together
    for q in () if opportunistic else app.queue.capped:  # its line's queues with a max (none for those)
        if q.max is not None and not res.fits({k: v for k, v in whole.items() if k in q.max}, q.max):
            what = f": its gang of {e.gang_min}" if e.gang_min > 1 else ""
            reason = (
                f"ask {e.app}/{e.ask} ({human_resource(resource)}){what} can never fit queue {q.path}'s max"
                f" ({human_resource(q.max)})"
            )
            return Rejection("over_queue_max", reason, resource, q.max)
    nodes = state.nodes
    if e.node_selector and nodes and not any(selector_matches(e.node_selector, n.labels) for n in nodes.values()):
        selector = d.clipped(str(e.node_selector), d.MAX_QUOTE)
        return Rejection("no_matching_node", f"ask {e.app}/{e.ask}: no node matches its node selector {selector}")
    why = never_fits(state, resource, e.node, shapes)
    if why is not None:
        required = None if e.node is None else nodes.get(e.node)
        bound = None if required is None else required.capacity
        return Rejection("never_fits", f"ask {e.app}/{e.ask} ({human_resource(resource)}) {why}", resource, bound)
    if e.gang_min > 1 and nodes:
        why = gang.never_fits(state, resource, e.gang_min, e.node, e.node_selector)
        if why:
            reason = f"ask {e.app}/{e.ask} ({human_resource(resource)}): {why}"
            return Rejection("gang_never_fits", reason, resource)
    return None


QueueState = Literal["running", "draining", "stopped"]


def app_refusal(state: PartitionState, queue: Queue, app: str) -> Rejection | None:
    """Why leaf ``queue`` of ``state`` may not take the new app ``app``, or ``None`` when it may: the
    queue is stopped (``queue.state``), or a queue above it is (the reason names the highest one), or
    the partition holds ``admission.max_apps`` apps already (apps count from ``app_added`` to
    ``app_removed``, whatever they hold)."""
    if queue.config.stopped:
        stopped = [q.path for q in queue.lineage() if q.config.stopped][-1]
        why = f"queue {stopped} is stopped" if stopped == queue.path else f"its parent {stopped} is stopped"
        return Rejection("queue_stopped", f"app {app}: {queue.path} admits no new app, {why} (queue.state)")
    limit = (state.config.admission if state.config is not None else AdmissionConfig()).max_apps
    if len(state.apps) >= limit:
        why = f"the partition holds {len(state.apps)} apps, the most admission.max_apps ({limit}) allows"
        return Rejection("over_admission", f"app {app}: {why}")
    return None


def queue_state(queue: Queue) -> QueueState:
    """A queue as the operator sees it: ``running``, or stopped (by its ``queue.state`` or a parent's)
    and ``draining`` while apps still run in it or below it, ``stopped`` once none does."""
    if not queue.config.stopped:
        return "running"
    pending = [queue]
    while pending:
        q = pending.pop()
        if q.apps:
            return "draining"
        pending.extend(q.children)
    return "stopped"


def over_admission(state: PartitionState, app: App, count: int) -> str | None:
    """Why an ask of ``count`` containers goes past the partition's ``admission`` bounds (one ask's
    count; running plus still-asked-for containers of its app, then of the partition), or ``None``."""
    config = state.config
    bounds = config.admission if config is not None else AdmissionConfig()
    if count > bounds.max_pending_per_ask:
        return f"over admission.max_pending_per_ask ({bounds.max_pending_per_ask})"
    held = state.held(app)
    if held + count > bounds.max_containers_per_app:
        limit = bounds.max_containers_per_app
        return f"app {app.name} would hold {held + count}, over admission.max_containers_per_app ({limit})"
    held = state.held()
    if held + count > bounds.max_containers:
        return f"the partition would hold {held + count}, over admission.max_containers ({bounds.max_containers})"
    return None


def never_fits(state: PartitionState, resource: Resource, required_node: str | None, shapes: NodeShapes) -> str | None:
    """Why no node can ever hold ``resource`` (``None`` when one may): it names a resource no node
    has, or is larger than every node shape seen (``shapes``; the nodes there are when it has none, as
    after a restore from a snapshot), or its required node is unknown or too small. Before any node
    registered, nothing is judged."""
    if required_node is not None:
        node = state.nodes.get(required_node)
        if node is None:
            return f"requires node {required_node}, which is unknown"
        if not res.fits(resource, node.capacity):
            return f"can never fit its required node {required_node} ({human_resource(node.capacity)})"
        return None
    seen = shapes.shapes or [n.capacity for n in state.nodes.values()]
    if not seen:
        return None
    known = shapes.names if shapes.shapes else {k for shape in seen for k in shape}
    if not known.issuperset(resource):
        return f"names resources no node has: {', '.join(sorted(k for k in resource if k not in known))}"
    for shape in seen:
        if res.fits(resource, shape):
            return None
    return "is larger than every node in some resource"
