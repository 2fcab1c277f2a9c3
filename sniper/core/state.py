"""Partition state (nodes, queues, apps, asks, allocations, reservations) and its one mutation path.

The cache owns the authoritative copy; the allocator and the policies own replicas. Every copy changes
only through :meth:`PartitionState.apply` of committed :mod:`sniper.messages.protocol` changes, so a replica
that applied the same changes in the same order is identical to the cache. Derived totals (node
allocated / reserved, queue allocated / pending / preempting / reserved up the hierarchy, ask
allocated counts, the containers still asked for per app and per partition, the node selectors of the
waiting asks) are maintained incrementally by ``apply`` and are never written elsewhere, except the
allocator's ``allocating`` counters, which only the allocator touches (proposals in flight).
Node reservations (YARN's reserved containers, :mod:`sniper.core.node_reservation`) hold no room: at most
one per node and one per app, counted in their queues' ``node_reserved`` total only.
Opportunistic asks and allocations (YARN's execution type) count on their node only: never in a queue's
allocated, pending, preempting or reserved totals, only in its separate ``opportunistic`` total.
An app's ``disrupted`` counts its guaranteed containers under notice (its disruption budget's use);
``guarded`` indexes the apps with a budget or that opted out of preemption.
A node's last utilization report and its over-commit totals (:mod:`sniper.core.overcommit`: the containers
placed since that report, those placed beyond its allocated room) are kept the same way, as are per node
and leaf queue the bounds over its guaranteed containers there (:mod:`sniper.core.container_bounds`).
Allocations, preemption reservations, node reservations and preemption contracts move only as their
transition tables in :mod:`sniper.core.lifecycle` allow: ``apply`` raises :class:`StateError` on any other move.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import msgspec
from sortedcontainers import SortedKeyList

from sniper.core import constraints, container_bounds, fair_share, lifecycle, quota_clock, slo_plan
from sniper.core import resources as res
from sniper.core.ask_order import AskOrder
from sniper.core.config import PartitionConfig, QueueConfig, parse_partition
from sniper.core.node_changes import NodeChanges
from sniper.core.node_index import NodeIndex
from sniper.core.resources import MEMORY, Resource
from sniper.core.selector_demand import SelectorDemand

# The node-selector rule lives beside the demand it counts; Ask.accepts applies it, its users import it here.
from sniper.core.selector_demand import selector_matches as selector_matches
from sniper.messages import protocol as p

AskKey = tuple[str, str]  # (app, ask)
# The node selector of the asks without one: shared, so read-only.
ANYWHERE: Mapping[str, frozenset[str]] = MappingProxyType({})


def ask_label(key: AskKey) -> str:
    return f"{key[0]}/{key[1]}"


def allocation_number(allocation_id: str) -> int:
    """The commit order of an ``alloc-N`` id (ids from elsewhere sort first)."""
    tail = allocation_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


class Node:
    __slots__ = (
        "allocated",
        "allocating",
        "allocations",
        "by_queue",
        "capacity",
        "container_bounds",
        "held",
        "labels",
        "name",
        "opportunistic",
        "overcommitted",
        "preempting",
        "reservations",
        "reserved",
        "schedulable",
        "unmeasured",
        "unmeasured_ids",
        "utilization",
    )

    def __init__(self, name: str, capacity: Resource, schedulable: bool, labels: dict[str, str]) -> None:
        self.name = name
        self.capacity = capacity
        self.schedulable = schedulable
        self.labels = labels
        self.allocated: Resource = {}
        self.reserved: Resource = {}
        # The part of ``reserved`` that is room given back for a beneficiary placed elsewhere
        # (:class:`Reservation` ``hold``), not a reservation on this node.
        self.held: Resource = {}
        self.allocating: Resource = {}
        self.allocations: set[str] = set()
        self.reservations: set[str] = set()
        self.by_queue: dict[str, Resource] = {}  # allocated per leaf queue path
        # Per leaf queue path: bounds over its guaranteed containers here (:mod:`sniper.core.container_bounds`).
        self.container_bounds: dict[str, container_bounds.ContainerBounds] = {}
        self.preempting: Resource = {}  # allocated to victims already preempting
        self.opportunistic: Resource = {}  # allocated to opportunistic containers not yet evicted
        # Over-commit (core.overcommit): the last reported utilization (None: never reported), the
        # resources of the containers placed since that report (not measured yet) and their ids, and
        # what the containers placed beyond the allocated room hold.
        self.utilization: Resource | None = None
        self.unmeasured: Resource = {}
        self.unmeasured_ids: set[str] = set()
        self.overcommitted: Resource = {}

    def free(self) -> Resource:
        """Room nobody holds: capacity minus allocated, reserved and (allocator only) allocating."""
        out = dict(self.capacity)
        res.sub_into(out, self.allocated)
        res.sub_into(out, self.reserved)
        res.sub_into(out, self.allocating)
        return out

    def free_of(self, name: str) -> int:
        return (
            self.capacity.get(name, 0)
            - self.allocated.get(name, 0)
            - self.reserved.get(name, 0)
            - self.allocating.get(name, 0)
        )

    def room_for_reservations(self, capacity: Resource | None = None) -> Resource:
        """What the node's reservations may count on now: its ``capacity`` (default: the node's) less
        what is allocated and the room held there for beneficiaries of other nodes' reservations."""
        out = res.sub(self.capacity if capacity is None else capacity, self.allocated)
        if self.held:
            res.sub_into(out, self.held)
        return out

    def can_hold(self, request: Resource) -> bool:
        cap, alloc, resv, ing = self.capacity, self.allocated, self.reserved, self.allocating
        for k, v in request.items():
            if v > cap.get(k, 0) - alloc.get(k, 0) - resv.get(k, 0) - ing.get(k, 0):
                return False
        return True


class Queue:
    __slots__ = (
        "allocated",
        "allocating",
        "apps",
        "capped",
        "children",
        "config",
        "guaranteed",
        "holding",
        "line",
        "max",
        "name",
        "node_reserved",
        "opportunistic",
        "parent",
        "path",
        "pending",
        "preempting",
        "priority",
        "reserved",
        "waiting",
        "waiting_order",
    )

    def __init__(self, config: QueueConfig, parent: Queue | None) -> None:
        self.config = config
        self.name = config.name
        self.path = config.path
        self.parent = parent
        self.line: tuple[Queue, ...] = (self,) if parent is None else (self, *parent.line)
        self.max: Resource | None = None if config.max is None else dict(config.max)
        self.capped = tuple(q for q in self.line if q.max is not None)  # the queues of its line with a max
        self.children: list[Queue] = []
        self.guaranteed: Resource = dict(config.guaranteed)
        self.priority = config.priority_offset
        self.allocated: Resource = {}
        self.pending: Resource = {}
        self.preempting: Resource = {}
        self.reserved: Resource = {}
        self.allocating: Resource = {}
        self.node_reserved: Resource = {}  # node reservations of its subtree (checked against max on reserving)
        self.opportunistic: Resource = {}  # running opportunistic containers: reported, never accounted
        self.apps: dict[str, App] = {}
        # The apps with pending asks, and those holding containers (a leaf's apps may be many, most of
        # them done): indexes kept by the state.
        self.waiting: dict[str, App] = {}
        self.holding: dict[str, App] = {}
        # The waiting apps in the leaf's app order when that order is fixed for an app's life (``fifo``,
        # ``priority``), kept on every change, so a cycle reads its first apps without sorting them all.
        self.waiting_order: SortedKeyList | None = (
            None if config.sort_policy == "fair" else SortedKeyList(key=STATIC_APP_ORDER[config.sort_policy])
        )

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def waiting_apps(self) -> list[App]:
        """The apps with pending asks, in the order of :attr:`apps` (submission order)."""
        return sorted(self.waiting.values(), key=lambda a: a.submit_seq)

    def holding_apps(self) -> list[App]:
        """The apps holding containers, in the order of :attr:`apps` (submission order)."""
        return sorted(self.holding.values(), key=lambda a: a.submit_seq)

    def lineage(self) -> tuple[Queue, ...]:
        """This queue and its ancestors up to the root."""
        return self.line

    def is_within(self, other: Queue) -> bool:
        """True when this queue is ``other`` or one of its descendants."""
        return self.path == other.path or self.path.startswith(other.path + ".")

    def usage(self) -> Resource:
        """Committed usage plus held reservations plus the allocator's in-flight proposals."""
        out = dict(self.allocated)
        if self.reserved:
            res.add_into(out, self.reserved)
        if self.allocating:
            res.add_into(out, self.allocating)
        return out


class Ask:
    __slots__ = (
        "allocated",
        "allocating",
        "am",
        "app",
        "constraints",
        "count",
        "created",
        "damped_until",
        "domain",
        "duration",
        "gang_min",
        "key",
        "name",
        "never_preempts",
        "node_reserved",
        "node_selector",
        "opportunistic",
        "priority",
        "required_node",
        "reserve_after",
        "reserved",
        "resource",
        "retry",
        "seq",
        "sort_key",
        "tags",
        "topology",
        "usage",
    )

    def __init__(self, app: App, change: p.AskSet) -> None:
        self.app = app
        self.name = change.ask
        self.key: AskKey = (change.app, change.ask)
        self.resource: Resource = res.shared(change.resource)  # the change's own (the cache sends it normalized)
        self.count = change.count
        self.priority = change.priority
        self.am = change.am
        self.seq = change.seq
        self.created = change.created
        self.required_node = change.required_node
        selector = change.node_selector
        self.node_selector: Mapping[str, frozenset[str]] = (
            {k: frozenset(v) for k, v in selector.items()} if selector else ANYWHERE
        )
        self.duration = change.duration
        self.retry = change.retry
        self.opportunistic = change.opportunistic
        self.damped_until = change.damped_until
        self.gang_min = change.gang_min  # all or nothing for the first gang_min containers (0: no gang)
        self.never_preempts = change.never_preempts  # preemption_policy "never": never a beneficiary
        self.allocated = 0  # containers committed for this ask, ever
        self.reserved = 0  # preemption reservations held for it
        self.node_reserved: str | None = None  # the node its node reservation holds, if any
        self.reserve_after = change.reserve_after  # no node reservation before then (it was de-reserved)
        self.allocating = 0  # allocator only: proposed, result not back yet
        self.sort_key = (-change.priority, change.seq)
        self.usage = change.usage  # what each container really uses (None: its resource)
        self.tags = change.tags  # allocation tags of its containers
        self.constraints = constraints.parse(change.constraints, change.tags) if change.constraints else ()
        self.topology = change.topology  # the domain its containers share (core.topology; None: anywhere)
        self.domain: str | None = None  # allocator only: the domain its members in flight went to

    def accepts(self, node: Node) -> bool:
        """Whether the ask may run on ``node`` at all (its required node, its node selector), room aside:
        the one rule normal allocation, preemption placement and the cache's checks all use."""
        if self.required_node is not None and self.required_node != node.name:
            return False
        return not self.node_selector or selector_matches(self.node_selector, node.labels)

    @property
    def pending(self) -> int:
        """Containers still wanted that nobody holds or proposed."""
        return self.count - self.allocated - self.reserved - self.allocating


class App:
    __slots__ = (
        "allocated",
        "allocations",
        "allow_preemption",
        "asked",
        "asks",
        "checkpoint_interval",
        "contract",
        "disrupted",
        "groups",
        "max_disruption",
        "name",
        "pending_asks",
        "priority",
        "queue",
        "submit_seq",
        "submit_time",
        "user",
    )

    def __init__(self, change: p.AppSet, queue: Queue) -> None:
        self.name = change.app
        self.queue = queue
        self.user = change.user
        self.groups = change.groups
        self.priority = change.priority
        self.submit_seq = change.submit_seq
        self.submit_time = change.submit_time
        self.contract = change.preemption_contract  # YARN-45: asked to give back before any kill
        self.max_disruption = change.max_disruption  # disruption budget (None: none)
        self.allow_preemption = change.allow_preemption  # false: victims of last resort
        self.checkpoint_interval = change.checkpoint_interval  # its containers checkpoint that often (None: never)
        self.disrupted = 0  # guaranteed containers under notice (preempting), kept by the state
        self.asks: dict[str, Ask] = {}
        self.allocated: Resource = {}
        # The ids of its containers, in commit order: a dict of ids is not tracked by the collector (a set is).
        self.allocations: dict[str, None] = {}
        self.asked = 0  # containers its asks still ask for: count minus allocated, summed over them
        # Asks with pending containers in scheduling order: priority high first, then oldest.
        self.pending_asks: AskOrder[Ask] = AskOrder()


def _priority_order(app: App) -> tuple[object, ...]:
    return (-app.priority, app.submit_seq)


def _submission_order(app: App) -> tuple[object, ...]:
    return (app.submit_seq,)


# A leaf's app order for the sort policies that fix it for an app's life: ``priority`` (high first, then
# the earliest submitted) and ``fifo`` (submission order). ``fair`` orders by usage, which changes.
STATIC_APP_ORDER: dict[str, Callable[[App], tuple[object, ...]]] = {
    "priority": _priority_order,
    "fifo": _submission_order,
}


class Allocation(msgspec.Struct, gc=False, eq=False, kw_only=True):
    """A committed container. Never tracked by the garbage collector (``gc=False``): nothing an
    allocation refers to (its queue, its resources, its tags) refers back to an allocation (indexes
    hold allocation ids), so it is never in a reference cycle and its reference count frees it; a
    partition holds one per container in each replica, which the collector then never scans."""

    id: str
    app: str
    ask: str
    node: str
    resource: Resource  # normalised once, when the ask was created
    start: float
    am: bool
    queue: Queue
    priority: int
    opportunistic: bool
    pinned: bool
    usage: Resource
    overcommit: bool
    tags: tuple[str, ...]  # counted per scope by the state's tag index
    reservation: str | None = None  # set while it is a victim held for this reservation
    preempt_deadline: float | None = None  # set while it is a victim
    killed: bool = False
    # Its app's checkpoints (core.checkpoints): every interval from its start, and the last reported.
    checkpoint_interval: float | None = None
    checkpointed: float | None = None

    @classmethod
    def committed(cls, change: p.AllocationSet, queue: Queue, checkpoint_interval: float | None = None) -> Allocation:
        """The allocation ``change`` commits, in leaf ``queue``. (Its checkpoints are set apart: a call of
        more than 15 keyword arguments builds a dictionary first, which costs several times the call.)"""
        alloc = cls(
            id=change.allocation,
            app=change.app,
            ask=change.ask,
            node=change.node,
            resource=change.resource,
            start=change.start,
            am=change.am,
            queue=queue,
            priority=change.priority,
            opportunistic=change.opportunistic,
            pinned=change.pinned,
            usage=change.resource if change.usage is None else change.usage,
            overcommit=change.overcommit,
            tags=change.tags,
        )
        if checkpoint_interval is not None or change.checkpointed is not None:
            alloc.checkpoint_interval = checkpoint_interval
            alloc.checkpointed = change.checkpointed
        return alloc

    @property
    def preempting(self) -> bool:
        return self.preempt_deadline is not None

    @property
    def phase(self) -> lifecycle.AllocationPhase:
        """Where it is in its lifecycle (:data:`sniper.core.lifecycle.ALLOCATION`)."""
        if self.killed:
            return "killed"
        return "running" if self.preempt_deadline is None else "preempting"


class Reservation:
    """A preemption reservation: ``resource`` on ``node`` promised to one container of ``ask`` once its
    ``victims`` are gone. ``hold`` is room given back on another node by the app of an open preemption
    request (``hold_contract``) held for the same beneficiary while it waits for more of it
    (:func:`sniper.core.preemption.contract.serve`): ``(node, resource)``, or ``None``."""

    __slots__ = (
        "app",
        "ask",
        "deadline",
        "expires",
        "hold",
        "hold_contract",
        "id",
        "node",
        "policy",
        "resource",
        "tags",
        "victims",
    )

    def __init__(self, change: p.ReservationSet, tags: tuple[str, ...] = ()) -> None:
        self.id = change.reservation
        self.app = change.app
        self.ask = change.ask
        self.node = change.node
        resource = change.resource  # the cache sends it normalized; a copy then costs less than a filter
        self.resource: Resource = dict(resource) if 0 not in resource.values() else res.normalized(resource)
        self.victims = list(change.victims)
        self.deadline = change.deadline
        self.expires = change.expires
        self.policy = change.policy
        self.tags = tags  # its ask's allocation tags: the promised container counts in its scopes
        self.hold: tuple[str, Resource] | None = None
        self.hold_contract = ""


class Contract:
    """An open preemption request (:mod:`sniper.core.preemption.contract`). ``released`` grows with what
    the app gives back while it is open (:meth:`PartitionState._contract_credit`, and the named
    containers whose beneficiary room the app gave back elsewhere served, which leave ``victims``);
    ``cancelled`` with every named victim whose notice the policy cancelled. With ``beneficiaries``
    only named containers and served room count as given back; without (the proportional baseline),
    any container the app releases does."""

    __slots__ = ("app", "beneficiaries", "cancelled", "deadline", "id", "policy", "released", "resource", "victims")

    def __init__(self, change: p.ContractSet) -> None:
        self.id = change.contract
        self.app = change.app
        self.resource: Resource = res.normalized(change.resource)
        self.deadline = change.deadline
        self.victims = list(change.victims)
        self.policy = change.policy
        self.released: Resource = dict(change.released)
        self.cancelled: Resource = dict(change.cancelled)
        self.beneficiaries = change.beneficiaries

    def need(self) -> Resource:
        """What the policy still wants back: the request less the victims it no longer needs."""
        return res.clamp_min_zero(res.sub(self.resource, self.cancelled))

    def missing(self) -> Resource:
        return res.clamp_min_zero(res.sub(self.need(), self.released))


class NodeReservation:
    """A YARN-style node reservation: only its ask may be placed on ``node`` while it lasts."""

    __slots__ = ("app", "ask", "expires", "id", "node", "resource")

    def __init__(self, change: p.NodeReservationSet) -> None:
        self.id = change.reservation
        self.app = change.app
        self.ask = change.ask
        self.node = change.node
        self.resource: Resource = res.normalized(change.resource)
        self.expires = change.expires

    @property
    def key(self) -> AskKey:
        return (self.app, self.ask)


class StateError(RuntimeError):
    """A change that contradicts the state (a bug in the cache: changes are validated before apply)."""


def _require(table: lifecycle.Table, phase: str, change: p.ChangeMsg, refusal: str) -> None:
    """Raise :class:`StateError` with ``refusal`` unless ``table`` moves an object in ``phase`` on ``change``."""
    if lifecycle.step(table, phase, type(change)) is None:
        raise StateError(refusal)


def _allocation_moves(alloc: Allocation | None, change: p.ChangeMsg, label: str) -> Allocation:
    """``alloc`` (named ``label``), once :data:`sniper.core.lifecycle.ALLOCATION` allows ``change`` on it."""
    phase = lifecycle.ABSENT if alloc is None else alloc.phase
    if lifecycle.step(lifecycle.ALLOCATION, phase, type(change)) is None:
        raise StateError(f"allocation {label} is {phase}: {type(change).__name__} does not apply to it")
    assert alloc is not None
    return alloc


class PartitionState:
    """One partition's state. ``apply`` is the only way to change it."""

    def __init__(self, name: str, config: PartitionConfig | None = None, *, indexed: bool = True) -> None:
        """``indexed=False`` keeps no node order (the cache validates placements, it never searches)."""
        self.name = name
        self.indexed = indexed
        self._deferred: set[Node] | None = None  # nodes to re-key at the end of a batch
        # ``config`` is what the state runs: ``base_config`` (the partition's configuration) with its
        # reservable queues expanded by the accepted SLO reservations' plans at ``now`` (core.slo_plan).
        self.config: PartitionConfig | None = None
        self.base_config: PartitionConfig | None = None
        self.slo_reservations: dict[str, slo_plan.SloReservation] = {}
        self.slo_next_change = float("inf")  # when a plan's load changes next: the guarantees follow it
        self.rebuilds = 0  # times the queue objects were built anew (the allocator re-counts what is in flight)
        self.max_since: dict[str, float] = {}  # when each quota-preempted queue's max took effect (core.quota_clock)
        self.fair_halflives: dict[str, float] = {}  # queues with a fairshare.halflife (core.fair_share)
        self.fair_usage: dict[str, fair_share.Decayed] = {}  # the decayed usages they track
        self.root: Queue | None = None
        self.queues: dict[str, Queue] = {}
        self.nodes: dict[str, Node] = {}
        self.apps: dict[str, App] = {}
        self.allocations: dict[str, Allocation] = {}
        self.noticed = 0  # allocations under a preemption notice, killed or not
        self.asked = 0  # containers every app's asks still ask for (the sum of :attr:`App.asked`)
        self.reservations: dict[str, Reservation] = {}
        self.contracts: dict[str, Contract] = {}  # open preemption requests, oldest first
        # Apps that limit their own preemption (a disruption budget, or preemption opted out): the
        # victim searches look an allocation's app up only while this is not empty.
        self.guarded: dict[str, App] = {}

        self.node_reservations: dict[str, NodeReservation] = {}  # by node name
        # Opportunistic asks that still want containers, oldest first (they have no queue pending).
        self.opportunistic_asks: dict[AskKey, Ask] = {}
        self.capacity: Resource = {}  # all schedulable nodes
        self.now = 0.0
        # Counts every change applied but the clock's: equal versions of one state object mean equal
        # contents except ``now`` (what a policy round may reuse its last result on).
        self.version = 0
        self.node_index = NodeIndex(config.node_sort_policy if config else "binpacking")
        self.node_changes = NodeChanges()  # (kept only where nodes are indexed: the allocator's)
        self.tags = constraints.TagIndex()  # allocation tags per scope (core.constraints)
        self.selector_demand = SelectorDemand()  # node selectors of the waiting asks (core.selector_demand)
        self.on_allocation_gone: Callable[[Allocation], None] | None = None
        self._handlers: dict[type, Callable[[Any], None]] = {
            p.ConfigSet: self._config,
            p.NodeSet: self._node,
            p.NodeGone: self._node_gone,
            p.NodeUtilizationSet: self._utilization,
            p.AppSet: self._app,
            p.AppGone: self._app_gone,
            p.AskSet: self._ask,
            p.AskGone: self._ask_gone,
            p.AllocationSet: self._alloc,
            p.AllocationGone: self._alloc_gone,
            p.AllocationPromoted: self._promote,
            p.AllocationCheckpointed: self._checkpointed,
            p.ReservationSet: self._reservation,
            p.ReservationGone: self._reservation_gone,
            p.NodeReservationSet: self._node_reservation,
            p.NodeReservationGone: self._node_reservation_gone,
            p.VictimsMarked: self._victims,
            p.VictimsReleased: self._victims_released,
            p.VictimsKilled: self._victims_killed,
            p.ContractSet: self._contract,
            p.ContractGone: self._contract_gone,
            p.ContractServed: self._contract_served,
            p.GiveBackHeld: self._give_back_held,
            p.PartitionCleared: self._cleared,
            p.SloReservationSet: self._slo_reservation,
            p.SloReservationGone: self._slo_reservation_gone,
            p.Clock: self._clock,
        }
        if config is not None:
            self.base_config = config
            self._install_plans()

    # ------------------------------------------------------------------ queries

    def leaf(self, path: str) -> Queue | None:
        q = self.queues.get(path)
        return q if q is not None and q.is_leaf else None

    def ask(self, key: AskKey) -> Ask | None:
        app = self.apps.get(key[0])
        return None if app is None else app.asks.get(key[1])

    def held(self, app: App | None = None) -> int:
        """Containers running plus still asked for, of ``app`` or of the whole partition (what the
        admission bounds count), in constant time."""
        if app is None:
            return len(self.allocations) + self.asked
        return len(app.allocations) + app.asked

    def dispose(self) -> None:
        """Empty a state nobody uses any more (a replica's state replaced by a reset, a stopped
        partition's), breaking the reference cycles among its records (queue and parent, queue and app,
        app and ask, the state and its handlers): reference counting frees them at once, with no full
        collection, even those the collector froze (:mod:`sniper.collector`). Disposing twice does nothing."""
        if not vars(self):
            return
        for app in self.apps.values():
            app.asks.clear()
            app.pending_asks.clear()
        for queue in self.queues.values():
            queue.parent = None
            queue.children.clear()
            queue.apps.clear()
            queue.waiting.clear()
            queue.holding.clear()
            queue.waiting_order = None
        self.__dict__.clear()

    def headroom_allows(
        self, queue: Queue, request: Resource, extra: dict[str, Resource] | None = None, *, ancestors: bool = True
    ) -> bool:
        """True when ``request`` on top of each queue's usage stays within every ``max`` up the tree
        (``ancestors=False``: the queue's own only)."""
        for q in queue.capped if ancestors else (queue,):
            if q.max is None:
                continue
            add = extra.get(q.path) if extra else None
            for k, v in request.items():
                if k not in q.max:
                    continue
                used = q.allocated.get(k, 0) + q.reserved.get(k, 0) + q.allocating.get(k, 0)
                if add:
                    used += add.get(k, 0)
                if used + v > q.max[k]:
                    return False
        return True

    def room_once_victims_leave(self, node: Node) -> Resource:
        """Free room plus what victims already preempting on the node will free (it is promised to
        their reservations, which ``node.reserved`` already holds)."""
        room = node.free()
        res.add_into(room, node.preempting)
        return room

    def leaves(self) -> list[Queue]:
        return [q for q in self.queues.values() if q.is_leaf]

    # ------------------------------------------------------------------ the one mutation path

    def apply(self, change: p.ChangeMsg) -> None:
        kind = type(change)
        self._handlers[kind](change)
        if kind is not p.Clock:
            self.version += 1

    def apply_all(self, changes: list[p.ChangeMsg]) -> None:
        handlers = self._handlers
        for change in changes:
            kind = type(change)
            handlers[kind](change)
            if kind is not p.Clock:
                self.version += 1

    # ------------------------------------------------------------------ handlers

    def _clock(self, c: p.Clock) -> None:
        if c.now > self.now:
            self.now = c.now
            if self.now >= self.slo_next_change:
                self._install_plans()
                self.version += 1  # guarantees changed: not the same contents any more

    def _config(self, c: p.ConfigSet) -> None:
        self.base_config = parse_partition(c.config, f"partition {self.name}")
        self._install_plans(max(self.now, c.at))
        for path, since in c.max_since.items():
            if path in self.max_since:
                self.max_since[path] = since
        for key, (value, at, halflife) in c.fair_usage.items():
            d = self.fair_usage.setdefault(key, fair_share.Decayed(halflife))
            d.value, d.at = value, at

    def _install_plans(self, at: float | None = None) -> None:
        """Run the base configuration expanded by the SLO reservations' plans at ``now`` (``at``: the feed
        time of a new configuration, when later than ``now``)."""
        if self.base_config is None:
            return
        self._install_config(slo_plan.expand(self.base_config, self.slo_reservations, self.now), at)
        self.slo_next_change = slo_plan.next_change(self.slo_reservations.values(), self.now)

    def _slo_reservation(self, c: p.SloReservationSet) -> None:
        if c.reservation in self.slo_reservations:
            raise StateError(f"SLO reservation {c.reservation} accepted twice")
        queue = self.queues.get(c.queue)
        if queue is None or not queue.config.reservable:
            raise StateError(f"SLO reservation {c.reservation}: {c.queue} is not a reservable queue")
        intervals = tuple(slo_plan.Interval(s, e, res.normalized(r)) for s, e, r in c.intervals)
        self.slo_reservations[c.reservation] = slo_plan.SloReservation(
            c.reservation, c.queue, c.arrival, c.deadline, intervals, c.period
        )
        self._install_plans()

    def _slo_reservation_gone(self, c: p.SloReservationGone) -> None:
        plan = self.slo_reservations.get(c.reservation)
        if plan is None:
            raise StateError(f"SLO reservation {c.reservation} is not known")
        leaf = self.queues.get(slo_plan.reservation_queue(plan.queue, plan.name))
        if leaf is not None and leaf.apps:
            raise StateError(f"SLO reservation {c.reservation} still has apps")
        del self.slo_reservations[c.reservation]
        self._install_plans()

    def _cleared(self, c: p.PartitionCleared) -> None:
        """The partition retired: everything in it is already gone; its configuration goes too (the
        clock stays, so time never runs backwards)."""
        if self.nodes or self.apps or self.contracts:
            raise StateError(f"partition {self.name} still holds nodes, apps or preemption requests")
        self.config = None
        self.base_config = None
        self.max_since = {}
        self.fair_halflives, self.fair_usage = {}, {}
        self.slo_reservations = {}
        self.slo_next_change = float("inf")
        self.root = None
        self.queues = {}
        self.capacity = {}
        self.node_index = NodeIndex("binpacking")
        self.tags = constraints.TagIndex()

    def _install_config(self, config: PartitionConfig, at: float | None = None) -> None:
        self.config = config
        if self.node_index.policy != config.node_sort_policy:
            self.node_index = NodeIndex(config.node_sort_policy)
            for node in self.nodes.values():
                self._index(node)
        old_max = {path: q.max for path, q in self.queues.items()}
        self.max_since = quota_clock.max_since(config, old_max, self.max_since, self.now if at is None else at)
        queues: dict[str, Queue] = {}
        self.rebuilds += 1

        def build(qc: QueueConfig, parent: Queue | None) -> Queue:
            q = Queue(qc, parent)
            queues[q.path] = q
            q.children = [build(c, q) for c in qc.children]
            return q

        self.root = build(config.root, None)
        self.queues = queues
        # Re-attach apps and recompute every queue total from the objects that carry them.
        for app in self.apps.values():
            leaf = queues.get(app.queue.path)
            if leaf is None or not leaf.is_leaf:
                raise StateError(f"config drops queue {app.queue.path} that app {app.name} still uses")
            app.queue = leaf
            leaf.apps[app.name] = app
            self._sync_app(app)
            for ask in app.asks.values():
                if not ask.opportunistic:
                    self._add_pending(leaf, ask.resource, ask.count - ask.allocated - ask.reserved)
        for alloc in self.allocations.values():
            alloc.queue = queues[alloc.queue.path]
            if alloc.opportunistic:
                self._add_usage(alloc.queue, "opportunistic", alloc.resource, 1)
                continue
            self._add_usage(alloc.queue, "allocated", alloc.resource, 1)
            if alloc.preempting:
                self._add_usage(alloc.queue, "preempting", alloc.resource, 1)
        for r in self.reservations.values():
            self._add_usage(self.apps[r.app].queue, "reserved", r.resource, 1)
        for nr in self.node_reservations.values():
            self._add_usage(self.apps[nr.app].queue, "node_reserved", nr.resource, 1)
        self._fair_tracking(config)

    def _fair_tracking(self, config: PartitionConfig) -> None:
        """Track the decayed usages ``config``'s half-lives name, each charged with what runs now."""
        halflives = fair_share.tracked(config)
        if not halflives and not self.fair_usage:
            self.fair_halflives = halflives
            return
        old = self.fair_usage
        self.fair_halflives = halflives
        self.fair_usage = {}
        for alloc in self.allocations.values():
            if not alloc.opportunistic:
                self._fair_charge(alloc, 1)
        for key, d in old.items():  # the history of what is still tracked, at its old half-life's value
            halflife = halflives.get(fair_share.owner(key))
            if halflife is not None:
                mine = self.fair_usage.setdefault(key, fair_share.Decayed(halflife))
                mine.value, mine.at = d.value_at(self.now), self.now

    def _fair_charge(self, alloc: Allocation, sign: int) -> None:
        user = self.apps[alloc.app].user
        for key, halflife in fair_share.keys_of(self.fair_halflives, alloc.queue.path, user):
            d = self.fair_usage.get(key)
            if d is None:
                d = self.fair_usage[key] = fair_share.Decayed(halflife, at=self.now)
            d.change(self.now, alloc.resource, sign, self.capacity)

    def _index(self, node: Node) -> None:
        if not self.indexed:
            return
        if self._deferred is not None:
            self._deferred.add(node)
            return
        self.node_changes.touch(node.name)
        if node.schedulable:
            self.node_index.update(node.name, node.free_of(MEMORY))
        else:
            self.node_index.discard(node.name)

    def begin_batch(self) -> None:
        """Defer node re-keying until :meth:`end_batch` (a delta moves a node several times)."""
        if self._deferred is None:
            self._deferred = set()

    def end_batch(self) -> None:
        deferred, self._deferred = self._deferred, None
        for node in deferred or ():
            if self.nodes.get(node.name) is node:
                self._index(node)

    def reindex(self, node: Node) -> None:
        """Re-key a node whose free room changed (also used by the allocator for in-flight room)."""
        self._index(node)

    def _count_capacity(self, node: Node, times: int) -> None:
        """Keep ``capacity`` the sum of schedulable nodes' capacity, incrementally."""
        if node.schedulable:
            res.add_into(self.capacity, node.capacity, times)
            self.capacity = res.normalized(self.capacity)

    def _node(self, c: p.NodeSet) -> None:
        node = self.nodes.get(c.node)
        if node is None:
            node = Node(c.node, res.normalized(c.capacity), c.schedulable, dict(c.labels))
            self.nodes[c.node] = node
        else:
            self._count_capacity(node, -1)
            node.capacity = res.normalized(c.capacity)
            node.schedulable = c.schedulable
            if node.labels != c.labels:
                self.tags.relabel(node, node.labels, c.labels)
            node.labels = dict(c.labels)
        self._count_capacity(node, 1)
        self._index(node)

    def _node_gone(self, c: p.NodeGone) -> None:
        node = self.nodes.get(c.node)
        if node is None:
            raise StateError(f"node {c.node} is not known")
        if node.allocations or node.reservations or c.node in self.node_reservations or res.any_positive(node.held):
            raise StateError(f"node {c.node} still holds allocations or reservations")
        del self.nodes[c.node]
        self.node_index.discard(c.node)
        self.node_changes.forget(c.node)
        self.tags.forget(c.node)
        self._count_capacity(node, -1)

    def _utilization(self, c: p.NodeUtilizationSet) -> None:
        node = self.nodes.get(c.node)
        if node is None:
            raise StateError(f"node {c.node} is not known")
        node.utilization = res.normalized(c.used)
        node.unmeasured = res.total(self.allocations[a].resource for a in c.unmeasured)
        node.unmeasured_ids = set(c.unmeasured)

    @staticmethod
    def _measure(node: Node, alloc: Allocation, times: int) -> None:
        """Keep the node's over-commit totals: containers placed since its last report, and those
        placed beyond its allocated room."""
        if times > 0:
            if node.utilization is not None:
                node.unmeasured_ids.add(alloc.id)
                res.add_into(node.unmeasured, alloc.resource)
        elif alloc.id in node.unmeasured_ids:
            node.unmeasured_ids.discard(alloc.id)
            res.sub_into(node.unmeasured, alloc.resource)
        if alloc.overcommit:
            res.add_into(node.overcommitted, alloc.resource, times)

    def _app(self, c: p.AppSet) -> None:
        if c.app in self.apps:
            raise StateError(f"app {c.app} already exists")
        leaf = self.leaf(c.queue)
        if leaf is None:
            raise StateError(f"app {c.app}: {c.queue} is not a leaf queue")
        app = App(c, leaf)
        self.apps[c.app] = app
        leaf.apps[c.app] = app
        if app.max_disruption is not None or not app.allow_preemption:
            self.guarded[c.app] = app

    def _app_gone(self, c: p.AppGone) -> None:
        app = self.apps.get(c.app)
        if app is None:
            raise StateError(f"app {c.app} is not known")
        if app.allocations:
            raise StateError(f"app {c.app} still holds allocations")
        for name in list(app.asks):
            self._ask_gone(p.AskGone(app=c.app, ask=name))
        del self.apps[c.app]
        self.guarded.pop(c.app, None)
        del app.queue.apps[c.app]
        app.queue.holding.pop(c.app, None)
        self._sync_app(app)  # no pending ask is left: it leaves the waiting apps

    def _ask(self, c: p.AskSet) -> None:
        app = self.apps.get(c.app)
        if app is None:
            raise StateError(f"ask {c.ask}: app {c.app} is not known")
        if c.ask in app.asks:
            raise StateError(f"ask {c.app}/{c.ask} already exists")
        ask = Ask(app, c)
        app.asks[c.ask] = ask
        app.asked += ask.count
        self.asked += ask.count
        if ask.opportunistic:
            if ask.count > 0:
                self.opportunistic_asks[ask.key] = ask
            return
        if ask.count > 0:
            self._add_pending(app.queue, ask.resource, ask.count)
            self._start_waiting(app, ask)
            if app.name not in app.queue.waiting:  # (its holding is as it was)
                self._sync_app(app)

    def _ask_gone(self, c: p.AskGone) -> None:
        app = self.apps.get(c.app)
        ask = None if app is None else app.asks.get(c.ask)
        if app is None or ask is None:
            raise StateError(f"ask {c.app}/{c.ask} is not known")
        if ask.reserved or ask.node_reserved is not None:
            raise StateError(f"ask {c.app}/{c.ask} still holds reservations")
        remaining = ask.count - ask.allocated
        if ask.opportunistic:
            self.opportunistic_asks.pop(ask.key, None)
        elif remaining > 0:
            self._add_pending(app.queue, ask.resource, -remaining)
            self._stop_waiting(app, ask)
            self._sync_app(app)
        del app.asks[c.ask]
        app.asked -= remaining
        self.asked -= remaining

    def _alloc(self, c: p.AllocationSet) -> None:
        existing = self.allocations.get(c.allocation)
        if existing is not None:  # (an absent allocation may always be set)
            _require(lifecycle.ALLOCATION, existing.phase, c, f"allocation {c.allocation} committed twice")
        if c.reservation is not None:  # it fulfils a held reservation
            phase = "held" if c.reservation in self.reservations else lifecycle.ABSENT
            _require(lifecycle.PREEMPTION_RESERVATION, phase, c, f"allocation {c.allocation}: no {c.reservation} held")
        app = self.apps.get(c.app)
        node = self.nodes.get(c.node)
        if app is None or node is None:
            raise StateError(f"allocation {c.allocation}: unknown app {c.app} or node {c.node}")
        queue = app.queue
        alloc = Allocation.committed(c, queue, app.checkpoint_interval)
        self.allocations[alloc.id] = alloc
        node.allocations.add(alloc.id)
        resource = alloc.resource
        if node.utilization is not None or alloc.overcommit:
            self._measure(node, alloc, 1)
        if alloc.tags:
            self.tags.add(node, alloc.app, alloc.tags, 1)
        on_node = node.allocated
        if alloc.opportunistic:
            res.add_into(on_node, resource)
            self._alloc_opportunistic(alloc, app, node)
            return
        path = queue.path
        of_queue = node.by_queue.get(path)
        if of_queue is None:
            of_queue = node.by_queue[path] = {}
        of_app = app.allocated
        for k, v in resource.items():  # the node's, its queue's there and the app's, in one pass
            on_node[k] = on_node.get(k, 0) + v
            of_queue[k] = of_queue.get(k, 0) + v
            of_app[k] = of_app.get(k, 0) + v
        container_bounds.placed(node.container_bounds, path, resource, alloc.start)
        if self.fair_halflives:
            self._fair_charge(alloc, 1)
        app.allocations[alloc.id] = None
        queue.holding[app.name] = app
        ask = app.asks.get(c.ask)
        if c.reservation is not None:
            # The reserved container was already taken out of pending when it was reserved.
            self._add_usage(app.queue, "allocated", alloc.resource, 1)
            self._end_reservation(c.reservation)
            if ask is not None:
                self._filled(ask)
        elif ask is not None and not ask.opportunistic:
            self._filled(ask)
            for q in queue.line:  # usage up, pending down, in one walk
                used, pending = q.allocated, q.pending
                for k, v in resource.items():
                    used[k] = used.get(k, 0) + v
                    pending[k] = pending.get(k, 0) - v
            if ask.count - ask.allocated - ask.reserved <= 0:
                self._stop_waiting(app, ask)
                if not app.pending_asks:  # (it holds a container, as above)
                    self._sync_app(app)
        else:
            if ask is not None:  # a promoted container of an opportunistic ask (from a snapshot)
                self._filled(ask)
                if ask.count - ask.allocated <= 0:
                    self.opportunistic_asks.pop(ask.key, None)
            self._add_usage(app.queue, "allocated", alloc.resource, 1)
        self._index(node)

    def _filled(self, ask: Ask) -> None:
        """One more container of ``ask`` committed: its app and the partition ask for one less."""
        ask.allocated += 1
        ask.app.asked -= 1
        self.asked -= 1

    def _alloc_gone(self, c: p.AllocationGone) -> None:
        alloc = self.allocations.pop(c.allocation, None)
        _require(
            lifecycle.ALLOCATION,
            lifecycle.ABSENT if alloc is None else alloc.phase,
            c,
            f"allocation {c.allocation} is not known",
        )
        assert alloc is not None
        if alloc.preempting:
            self.noticed -= 1
        node = self.nodes[alloc.node]
        node.allocations.discard(alloc.id)
        res.sub_into(node.allocated, alloc.resource)
        if node.unmeasured_ids or alloc.overcommit:
            self._measure(node, alloc, -1)
        if alloc.tags:
            self.tags.add(node, alloc.app, alloc.tags, -1)
        if alloc.opportunistic:
            self._opportunistic_gone(alloc, node)
            return
        path = alloc.queue.path
        res.sub_into(node.by_queue[path], alloc.resource)
        allocations = self.allocations
        remaining = (allocations[aid] for aid in node.allocations)
        container_bounds.released(
            node.container_bounds,
            path,
            alloc.start,
            ((a.resource, a.start) for a in remaining if not a.opportunistic and a.queue.path == path),
        )
        if alloc.preempting:
            res.sub_into(node.preempting, alloc.resource)
        if self.fair_halflives:
            self._fair_charge(alloc, -1)
        app = self.apps.get(alloc.app)
        if app is not None:
            app.allocations.pop(alloc.id, None)
            self._sync_app(app)
            res.sub_into(app.allocated, alloc.resource)
            if alloc.preempting:
                app.disrupted -= 1
        self._add_usage(alloc.queue, "allocated", alloc.resource, -1)
        if alloc.preempting:
            self._add_usage(alloc.queue, "preempting", alloc.resource, -1)
        if self.contracts:
            self._contract_credit(alloc)
        self._index(node)
        if self.on_allocation_gone is not None:
            self.on_allocation_gone(alloc)

    def _alloc_opportunistic(self, alloc: Allocation, app: App, node: Node) -> None:
        """Counted on its node, in its queue's separate total, never in the queue's accounting."""
        res.add_into(node.opportunistic, alloc.resource)
        app.allocations[alloc.id] = None
        app.queue.holding[app.name] = app
        self._add_usage(alloc.queue, "opportunistic", alloc.resource, 1)
        ask = app.asks.get(alloc.ask)
        if ask is not None:
            self._filled(ask)
            if ask.count - ask.allocated <= 0:
                self.opportunistic_asks.pop(ask.key, None)
        self._index(node)

    def _opportunistic_gone(self, alloc: Allocation, node: Node) -> None:
        res.sub_into(node.preempting if alloc.preempting else node.opportunistic, alloc.resource)
        app = self.apps.get(alloc.app)
        if app is not None:
            app.allocations.pop(alloc.id, None)
            self._sync_app(app)
        self._add_usage(alloc.queue, "opportunistic", alloc.resource, -1)
        self._index(node)
        if self.on_allocation_gone is not None:
            self.on_allocation_gone(alloc)

    def _promote(self, c: p.AllocationPromoted) -> None:
        alloc = self.allocations.get(c.allocation)
        if (
            alloc is None
            or not alloc.opportunistic
            or lifecycle.step(lifecycle.ALLOCATION, alloc.phase, type(c)) is None
        ):
            raise StateError(f"allocation {c.allocation} is not a running opportunistic allocation")
        alloc.opportunistic = False
        node = self.nodes[alloc.node]
        res.sub_into(node.opportunistic, alloc.resource)
        res.add_into(node.by_queue.setdefault(alloc.queue.path, {}), alloc.resource)
        container_bounds.placed(node.container_bounds, alloc.queue.path, alloc.resource, alloc.start)
        app = self.apps.get(alloc.app)
        if app is not None:
            res.add_into(app.allocated, alloc.resource)
        self._add_usage(alloc.queue, "opportunistic", alloc.resource, -1)
        self._add_usage(alloc.queue, "allocated", alloc.resource, 1)
        if self.fair_halflives:
            self._fair_charge(alloc, 1)

    def _checkpointed(self, c: p.AllocationCheckpointed) -> None:
        alloc = self.allocations.get(c.allocation)
        if alloc is None:
            raise StateError(f"allocation {c.allocation} is not running")
        if c.at < alloc.start or (alloc.checkpointed is not None and c.at <= alloc.checkpointed):
            raise StateError(f"allocation {c.allocation}: checkpoint at {c.at} is not after its start and last one")
        alloc.checkpointed = c.at

    def _reservation(self, c: p.ReservationSet) -> None:
        phase = "held" if c.reservation in self.reservations else lifecycle.ABSENT
        _require(lifecycle.PREEMPTION_RESERVATION, phase, c, f"reservation {c.reservation} committed twice")
        app = self.apps[c.app]
        ask = app.asks[c.ask]
        r = Reservation(c, ask.tags)
        self.reservations[r.id] = r
        node = self.nodes[c.node]
        if r.tags:
            self.tags.add(node, r.app, r.tags, 1, promised=True)
        node.reservations.add(r.id)
        res.add_into(node.reserved, r.resource)
        ask.reserved += 1
        self._add_pending(app.queue, ask.resource, -1)
        self._add_usage(app.queue, "reserved", r.resource, 1)
        if ask.count - ask.allocated - ask.reserved <= 0:
            self._stop_waiting(app, ask)
            self._sync_app(app)
        self._mark_victims(r.victims, c.deadline, r.id, c)
        self._index(node)

    def _node_reservation(self, c: p.NodeReservationSet) -> None:
        ask = self.ask((c.app, c.ask))
        if ask is None or c.node not in self.nodes:
            raise StateError(f"node reservation {c.reservation}: unknown ask {c.app}/{c.ask} or node {c.node}")
        held = c.node in self.node_reservations or ask.node_reserved is not None
        what = f"node {c.node} or ask {c.app}/{c.ask}"
        refusal = f"node reservation {c.reservation}: {what} already holds one"
        _require(lifecycle.NODE_RESERVATION, "held" if held else lifecycle.ABSENT, c, refusal)
        r = NodeReservation(c)
        self.node_reservations[c.node] = r
        ask.node_reserved = c.node
        self._add_usage(ask.app.queue, "node_reserved", r.resource, 1)

    def _node_reservation_gone(self, c: p.NodeReservationGone) -> None:
        r = self.node_reservations.pop(c.node, None)
        phase = lifecycle.ABSENT if r is None else "held"
        _require(lifecycle.NODE_RESERVATION, phase, c, f"node {c.node} holds no node reservation")
        assert r is not None
        self.node_changes.touch(c.node)  # other asks may use the node again
        app = self.apps[r.app]
        ask = app.asks.get(r.ask)
        if ask is not None:
            ask.node_reserved = None
            ask.reserve_after = max(ask.reserve_after, c.no_reserve_before)
        self._add_usage(app.queue, "node_reserved", r.resource, -1)

    def _mark_victims(self, victims: list[str], deadline: float, reservation: str | None, change: p.ChangeMsg) -> None:
        for vid in victims:
            victim = _allocation_moves(self.allocations.get(vid), change, vid)
            if not victim.preempting:
                self.noticed += 1
                node = self.nodes[victim.node]
                res.add_into(node.preempting, victim.resource)
                if victim.opportunistic:
                    res.sub_into(node.opportunistic, victim.resource)
                else:
                    self._add_usage(victim.queue, "preempting", victim.resource, 1)
                    self._disrupt(victim, 1)
            victim.preempt_deadline = deadline
            victim.reservation = reservation

    def _victims(self, c: p.VictimsMarked) -> None:
        self._mark_victims(c.victims, c.deadline, None, c)

    def _victims_killed(self, c: p.VictimsKilled) -> None:
        for vid in c.victims:
            victim = _allocation_moves(self.allocations.get(vid), c, vid)  # only a victim under notice
            victim.killed = True

    def _victims_released(self, c: p.VictimsReleased) -> None:
        for vid in c.victims:
            victim = _allocation_moves(self.allocations.get(vid), c, vid)  # under notice, not killed yet
            self.noticed -= 1
            node = self.nodes[victim.node]
            if victim.opportunistic:
                res.add_into(node.opportunistic, victim.resource)
            else:
                self._add_usage(victim.queue, "preempting", victim.resource, -1)
                self._disrupt(victim, -1)
            res.sub_into(node.preempting, victim.resource)
            victim.preempt_deadline = None
            victim.reservation = None
            self._index(node)
            for contract in self.contracts.values():
                if vid in contract.victims:
                    res.add_into(contract.cancelled, victim.resource)

    def _disrupt(self, victim: Allocation, times: int) -> None:
        """Count a guaranteed victim under notice in its app's ``disrupted`` (its disruption budget)."""
        app = self.apps.get(victim.app)
        if app is not None:
            app.disrupted += times

    def _contract(self, c: p.ContractSet) -> None:
        phase = "open" if c.contract in self.contracts else lifecycle.ABSENT
        _require(lifecycle.CONTRACT, phase, c, f"preemption request {c.contract} opened twice")
        self.contracts[c.contract] = Contract(c)

    def _contract_gone(self, c: p.ContractGone) -> None:
        phase = "open" if self.contracts.pop(c.contract, None) is not None else lifecycle.ABSENT
        _require(lifecycle.CONTRACT, phase, c, f"preemption request {c.contract} is not open")
        for r in self.reservations.values():
            if r.hold is not None and r.hold_contract == c.contract:
                self._let_go(r)

    def _give_back_held(self, c: p.GiveBackHeld) -> None:
        r = self.reservations.get(c.reservation)
        _require(
            lifecycle.PREEMPTION_RESERVATION,
            lifecycle.ABSENT if r is None else "held",
            c,
            f"reservation {c.reservation} is not known",
        )
        assert r is not None
        resource = res.normalized(c.resource)
        if resource and (c.node not in self.nodes or c.contract not in self.contracts):
            raise StateError(
                f"reservation {r.id}: room held on unknown node {c.node} or for closed request {c.contract}"
            )
        self._let_go(r)
        if resource:
            node = self.nodes[c.node]
            r.hold, r.hold_contract = (c.node, resource), c.contract
            res.add_into(node.held, resource)
            res.add_into(node.reserved, resource)
            self._index(node)

    def _let_go(self, r: Reservation) -> None:
        """``r``'s hold of given-back room (if any) is let go: the room is free again."""
        if r.hold is None:
            return
        name, resource = r.hold
        r.hold, r.hold_contract = None, ""
        node = self.nodes[name]
        res.sub_into(node.held, resource)
        res.sub_into(node.reserved, resource)
        self._index(node)

    def _contract_served(self, c: p.ContractServed) -> None:
        contract = self.contracts.get(c.contract)
        if contract is None:
            raise StateError(f"preemption request {c.contract} is not open")
        served = set(c.victims)
        if not served <= set(contract.victims):
            raise StateError(f"preemption request {c.contract} did not name all of {sorted(served)}")
        if any(v not in self.allocations or self.allocations[v].preempting for v in served):
            raise StateError(f"preemption request {c.contract}: {sorted(served)} are not all running, notice cancelled")
        # Their notices were cancelled because the app's room served their beneficiary: that does not
        # lessen what the request needs, it is what the app gave back.
        given = res.total(self.allocations[v].resource for v in c.victims)
        contract.cancelled = res.clamp_min_zero(res.sub(contract.cancelled, given))
        res.add_into(contract.released, res.component_min(contract.missing(), given))
        contract.victims = [v for v in contract.victims if v not in served]

    def _contract_credit(self, alloc: Allocation) -> None:
        """A container of an app under a preemption request left: it counts as given back to the
        app's oldest open request that still misses something when it is one that request named and
        still under its notice, or, for a request without beneficiaries, when the application master
        released it of its own accord (it was under no notice). For a request with beneficiaries, room
        the app frees elsewhere counts only once it serves one (:class:`p.ContractServed`)."""
        left = dict(alloc.resource)
        for contract in self.contracts.values():
            if contract.app != alloc.app:
                continue
            named = alloc.preempting and alloc.id in contract.victims
            if not named and (alloc.preempting or contract.beneficiaries):
                continue
            take = res.component_min(contract.missing(), left)
            res.add_into(contract.released, take)
            res.sub_into(left, take)
            if not res.any_positive(left):
                return

    def _reservation_gone(self, c: p.ReservationGone) -> None:
        r = self.reservations.get(c.reservation)
        phase = lifecycle.ABSENT if r is None else "held"
        _require(lifecycle.PREEMPTION_RESERVATION, phase, c, f"reservation {c.reservation} is not known")
        assert r is not None
        app = self.apps[r.app]
        ask = app.asks.get(r.ask)
        self._end_reservation(r.id)
        if ask is not None and ask.count - ask.allocated - ask.reserved > 0:
            # The reserved container is wanted again: back to pending.
            self._add_pending(app.queue, ask.resource, 1)
            if ask not in app.pending_asks:
                self._start_waiting(app, ask)
                self._sync_app(app)

    def _end_reservation(self, rid: str) -> None:
        r = self.reservations.pop(rid)
        self._let_go(r)
        node = self.nodes[r.node]
        if r.tags:
            self.tags.add(node, r.app, r.tags, -1, promised=True)
        node.reservations.discard(rid)
        res.sub_into(node.reserved, r.resource)
        app = self.apps[r.app]
        self._add_usage(app.queue, "reserved", r.resource, -1)
        ask = app.asks.get(r.ask)
        if ask is not None:
            ask.reserved -= 1
        for vid in r.victims:
            victim = self.allocations.get(vid)
            if victim is not None and victim.reservation == rid:
                victim.reservation = None
        self._index(node)

    # ------------------------------------------------------------------ totals up the tree

    @staticmethod
    def _add_usage(queue: Queue, attr: str, amount: Resource, times: int) -> None:
        for q in queue.lineage():
            res.add_into(getattr(q, attr), amount, times)

    def _start_waiting(self, app: App, ask: Ask) -> None:
        """``ask`` (not among its app's pending asks) wants containers again: list it, count its selector."""
        app.pending_asks.add(ask)
        if ask.node_selector:
            self.selector_demand.add(ask.node_selector, 1)

    def _stop_waiting(self, app: App, ask: Ask) -> None:
        """``ask`` wants no more containers (or is gone): unlist it and uncount its selector."""
        if ask.node_selector and ask in app.pending_asks:
            self.selector_demand.add(ask.node_selector, -1)
        app.pending_asks.discard(ask)

    @staticmethod
    def _sync_app(app: App) -> None:
        """Keep the app in its queue's :attr:`Queue.waiting` exactly while it has pending asks, and in
        :attr:`Queue.holding` exactly while it holds a container."""
        queue = app.queue
        if app.pending_asks:
            if app.name not in queue.waiting:
                queue.waiting[app.name] = app
                if queue.waiting_order is not None:
                    queue.waiting_order.add(app)
        elif queue.waiting.pop(app.name, None) is not None and queue.waiting_order is not None:
            queue.waiting_order.remove(app)
        if app.allocations:
            queue.holding[app.name] = app
        else:
            queue.holding.pop(app.name, None)

    @staticmethod
    def _add_pending(queue: Queue, amount: Resource, times: int) -> None:
        for q in queue.line:
            pending = q.pending
            for k, v in amount.items():
                pending[k] = pending.get(k, 0) + v * times
