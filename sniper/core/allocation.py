"""The allocation cycle of the cross-queue design: ``find_ask_candidates`` and ``try_allocate``, sans-IO.

``find_ask_candidates`` walks the queue tree most-under-served first (below guarantee in the DRF
comparison, then business priority, then dominant share of usage against guarantee, then more pending),
apps by their queue's sort policy, asks by priority then age, within every ``max`` up the tree and every
user, group and application limit (:mod:`sniper.core.limits`). It keeps one heap per
parent queue and re-keys only the path it just served, so a cycle of n picks costs O(n log q).
``try_allocate`` places candidates one container at a time through a :class:`Placer`: the node
index in normal mode, a victim index in preemption mode (same loop, same accounting).
Nothing here mutates committed state; placements only add to the allocator's ``allocating`` counters.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from sniper.core import constraints, fair_share, gang, node_reservation, topology
from sniper.core import resources as res
from sniper.core.limits import Limits
from sniper.core.placing import Placer, hold_room
from sniper.core.resources import Resource
from sniper.core.state import STATIC_APP_ORDER, App, Ask, AskKey, Node, PartitionState, Queue

QueueKey = Callable[[Queue, Resource], tuple[object, ...]]


def usage_key(
    queue: Queue,
    usage: Resource,
    capacity: Resource,
    pending_share: float | None = None,
) -> tuple[object, ...]:
    """Normal-mode queue order, the ideal assignment's: queues below their guarantee (DRF) first,
    so each keeps its elastic minimum min(used + pending, guaranteed) whatever its business priority; then
    higher priority, lower share (of the guarantee, or of the cluster without one), more pending.
    ``pending_share`` is what a caller keying the same queue many times computes once (as
    :class:`QueueRank` keeps it)."""
    return QueueRank(queue, capacity, pending_share).key(usage)


class QueueRank:
    """:func:`usage_key` of one queue for any usage, with what does not depend on the usage computed once:
    the capacity's and the guarantee's resources, the guarantee's share vector, the pending share."""

    __slots__ = ("capacity", "guaranteed", "guaranteed_vector", "priority", "queue", "scaled", "tail")

    def __init__(self, queue: Queue, capacity: Resource, pending_share: float | None = None) -> None:
        self.queue = queue
        self.capacity = capacity
        self.priority = -queue.priority
        # The capacity's resources with their amounts (the share vector's), and the guarantee's, when it has one.
        self.scaled = [(k, c) for k, c in capacity.items() if c > 0]
        guaranteed = queue.guaranteed
        self.guaranteed = list(guaranteed.items()) if res.any_positive(guaranteed) else None
        self.guaranteed_vector = res.share_vector(guaranteed, capacity) if capacity else None
        if pending_share is None:
            pending_share = res.dominant_share(queue.pending, capacity) if capacity else 0.0
        self.tail = (-pending_share, queue.path)

    def key(self, usage: Resource) -> tuple[object, ...]:
        get = usage.get
        if self.guaranteed_vector is None:
            below = 1
        else:  # the share vector's comparison with the guarantee's (DRF), as res.share_vector computes it
            shares = [get(k, 0) / c for k, c in self.scaled]
            shares.sort(reverse=True)
            below = 0 if tuple(shares) < self.guaranteed_vector else 1
        if self.guaranteed is not None:  # the dominant share of the guaranteed resources, as res.dominant_share
            share = 0.0
            for k, base in self.guaranteed:
                v = get(k, 0)
                if v <= 0:
                    continue
                if base <= 0:
                    share = math.inf
                    break
                ratio = v / base
                if ratio > share:
                    share = ratio
        elif self.capacity:
            share = res.dominant_share(usage, self.capacity)
        else:
            share = math.inf if res.any_positive(usage) else 0.0
        return (below, self.priority, share, *self.tail)


def app_key(policy: str, app: App, selected: Resource | None, capacity: Resource) -> tuple[object, ...]:
    if policy == "fair":
        used = app.allocated if not selected else res.add(app.allocated, selected)
        return (res.dominant_share(used, capacity) if capacity else 0.0, app.submit_seq)
    return STATIC_APP_ORDER[policy](app)


class _AppCursor:
    """Walks one app's pending asks lazily (the sorted list does not change during a call)."""

    __slots__ = ("app", "current", "rest", "selected")

    def __init__(self, app: App) -> None:
        self.app = app
        self.rest: Iterator[Ask] = iter(app.pending_asks)
        self.current: Ask | None = next(self.rest, None)
        self.selected: Resource = {}


class _LeafCursor:
    """Per-call iteration over one leaf queue's pending asks in app-policy order (after the users' decayed
    usage where the leaf has a ``fairshare.halflife``: ``history``).

    A ``fair`` leaf, or one ordered by history, keys its waiting apps into a heap (re-keyed as the call
    picks); any other leaf reads its apps lazily from :attr:`Queue.waiting_order`, so a call touches only
    the apps it reaches, however many are waiting (the state does not change during a call)."""

    __slots__ = ("apps", "history", "ordered", "policy")

    def __init__(
        self,
        leaf: Queue,
        capacity: Resource,
        eligible: Callable[[App], bool] | None,
        history: Callable[[str], float] | None = None,
    ) -> None:
        self.policy = leaf.config.sort_policy
        self.history = history
        heap: list[tuple[tuple[object, ...], int, _AppCursor]] = []
        self.ordered: Iterator[App] | None = None
        if leaf.waiting_order is None or history is not None:
            for app in leaf.waiting.values():
                if eligible is None or eligible(app):
                    heap.append((self.key(app, None, capacity), app.submit_seq, _AppCursor(app)))
            heapq.heapify(heap)
        else:
            apps: Iterator[App] = iter(leaf.waiting_order)
            self.ordered = apps if eligible is None else filter(eligible, apps)
        self.apps = heap
        self._refill()

    def _refill(self) -> None:
        """With a fixed order, keep the next app (if any) as the only entry of :attr:`apps`."""
        if self.ordered is not None and not self.apps:
            app = next(self.ordered, None)
            if app is not None:
                self.apps.append(((), app.submit_seq, _AppCursor(app)))

    def head(self) -> _AppCursor | None:
        return self.apps[0][2] if self.apps else None

    def drop_head(self) -> None:
        """The first app has nothing more to give in this call."""
        heapq.heappop(self.apps)
        self._refill()

    def key(self, app: App, selected: Resource | None, capacity: Resource) -> tuple[object, ...]:
        own = app_key(self.policy, app, selected, capacity)
        return own if self.history is None else (self.history(app.user), *own)


@dataclass(slots=True)
class CandidateFilter:
    """Which asks are eligible in one call (preemption mode narrows it); ``None`` admits everything."""

    skip: set[AskKey] = field(default_factory=set)
    blocked: set[AskKey] | None = None  # when set, collects the asks an ancestor's ``max`` kept out
    held_back: set[AskKey] | None = None  # when set, collects the asks any ``max`` or a limit passed over
    queue: Callable[[Queue], bool] | None = None
    app: Callable[[App], bool] | None = None
    ask: Callable[[Ask], bool] | None = None


def find_ask_candidates(
    state: PartitionState,
    n: int,
    *,
    preemption: bool = False,
    filters: CandidateFilter | None = None,
    queue_key: QueueKey | None = None,
    headroom_extra: dict[str, Resource] | None = None,
    limits: Limits | None = None,
) -> list[Ask]:
    """Up to ``n`` containers to try, one list entry per container, most deserving first.

    ``preemption`` marks the mode: preemption narrows ``filters`` (starving asks of queues below their
    ideal, not masked) and orders queues with ``queue_key``; the walk is the same, but ``max`` is left to
    the placer, which counts the victims leaving the same subtree.
    ``headroom_extra`` adds per-queue usage that the caller holds but the state does not show yet;
    ``limits`` is the caller's view of user and application limits (a fresh one when not given), charged
    with every pick.
    Outside preemption an ask is listed at most as many times as its container fits in the free room
    of all schedulable nodes (at least once, so a miss is still tried and counted): a pending count
    of millions costs no more than the room it could take.
    """
    root = state.root
    if root is None or n <= 0:
        return []
    walk = _CandidateWalk(state, preemption, filters or CandidateFilter(), queue_key, headroom_extra, limits)
    out: list[Ask] = []
    picked = walk.picked
    extra = walk.extra
    while len(out) < n:
        ask = walk.pick(root)
        if ask is None:
            break
        if root.max is not None:
            res.add_into(extra.setdefault(root.path, {}), ask.resource)
        picked[ask.key] = picked.get(ask.key, 0) + 1
        out.append(ask)
    return out


class _CandidateWalk:
    """One :func:`find_ask_candidates` call's walk down the queue tree: a heap of children per parent
    queue keyed on their usage plus what this call picked, a cursor per leaf over its apps' asks, and
    the tallies of the call (usage picked per queue, containers picked per ask)."""

    __slots__ = (
        "capacity",
        "cursors",
        "extra",
        "filters",
        "heaps",
        "key_of",
        "limits",
        "picked",
        "preemption",
        "ranks",
        "room",
        "state",
        "used",
    )

    def __init__(
        self,
        state: PartitionState,
        preemption: bool,
        filters: CandidateFilter,
        queue_key: QueueKey | None,
        headroom_extra: dict[str, Resource] | None,
        limits: Limits | None,
    ) -> None:
        self.state = state
        self.preemption = preemption
        self.filters = filters
        self.capacity = state.capacity
        self.ranks: dict[str, QueueRank] = {}  # per queue, what its key needs that does not change during a call
        self.key_of: QueueKey = queue_key or self.default_key
        self.limits = Limits.of(state) if limits is None else limits
        # Usage picked in this call (plus what the caller holds), per path of a queue with a max.
        self.extra: dict[str, Resource] = {k: dict(v) for k, v in headroom_extra.items()} if headroom_extra else {}
        self.picked: dict[AskKey, int] = {}
        self.heaps: dict[str, list[tuple[tuple[object, ...], Queue]]] = {}
        # The usage of each queue in a heap: its own plus what this call picked below it (``extra``).
        self.used: dict[str, Resource] = {}
        self.cursors: dict[str, _LeafCursor] = {}
        self.room: list[Resource] = []  # free room of the schedulable nodes, summed once when first needed

    def default_key(self, q: Queue, u: Resource) -> tuple[object, ...]:
        """:func:`usage_key` with the queue's constants computed once per call."""
        rank = self.ranks.get(q.path)
        if rank is None:
            rank = self.ranks[q.path] = QueueRank(q, self.capacity)
        key = rank.key(u)
        state = self.state
        if state.fair_halflives and q.parent is not None:
            return fair_share.ranked(key, state.fair_halflives, state.fair_usage, q.parent.path, q.path, state.now)
        return key

    def fits_again(self, ask: Ask, times: int) -> bool:
        """Whether the free room holds ``times + 1`` containers of ``ask`` (``times`` already picked)."""
        room = self.room
        if not room:
            room.append(_free_room(self.state))
        free = room[0]
        return all(free.get(name, 0) >= (times + 1) * amount for name, amount in ask.resource.items() if amount > 0)

    def heap_of(self, parent: Queue) -> list[tuple[tuple[object, ...], Queue]]:
        """The heap of ``parent``'s children with pending asks (that the filter admits), made on first use,
        each child's usage (plus what the caller holds) kept in :attr:`used` from then on. A lone child
        is not keyed: nothing is ordered against it (:meth:`pick` keys children only while several are left)."""
        h = self.heaps.get(parent.path)
        if h is None:
            queue_filter, extra, used = self.filters.queue, self.extra, self.used
            children = []
            for c in parent.children:
                if res.any_positive(c.pending) and (queue_filter is None or queue_filter(c)):
                    u = used[c.path] = c.usage()
                    more = extra.get(c.path)
                    if more:
                        res.add_into(u, more)
                    children.append(c)
            if len(children) == 1:
                h = [((), children[0])]
            else:
                h = [(self.key_of(c, used[c.path]), c) for c in children]
                heapq.heapify(h)
            self.heaps[parent.path] = h
        return h

    def next_from_leaf(self, leaf: Queue) -> Ask | None:
        """The next container to try in ``leaf``: its apps in the leaf's sort order, each app's asks by
        priority then age, past the asks the filters, the picks so far, the free room, every ``max`` (outside
        preemption) or a limit rule out; ``None`` when none is left."""
        state, filters, limits, preemption, picked = self.state, self.filters, self.limits, self.preemption, self.picked
        cur = self.cursors.get(leaf.path)
        if cur is None:
            history = fair_share.app_history(state.fair_halflives, state.fair_usage, leaf.path, state.now)
            cur = self.cursors[leaf.path] = _LeafCursor(leaf, self.capacity, filters.app, history)
        extra = self.extra
        while (app_cur := cur.head()) is not None:
            while (ask := app_cur.current) is not None:
                if (
                    ask.key in filters.skip
                    or (filters.ask is not None and not filters.ask(ask))
                    or ask.pending - (times := picked.get(ask.key, 0)) <= 0
                    or (times and not preemption and not self.fits_again(ask, times))
                ):
                    app_cur.current = next(app_cur.rest, None)
                    continue
                if limits is not None and not limits.allows(ask):
                    if filters.held_back is not None:
                        filters.held_back.add(ask.key)
                    app_cur.current = next(app_cur.rest, None)
                    continue
                if not preemption and not state.headroom_allows(leaf, ask.resource, extra):
                    # Only an ancestor's max makes it a miss: victims leaving that subtree free it.
                    blocked = filters.blocked
                    if blocked is not None and state.headroom_allows(leaf, ask.resource, extra, ancestors=False):
                        blocked.add(ask.key)
                    if filters.held_back is not None:
                        filters.held_back.add(ask.key)
                    app_cur.current = next(app_cur.rest, None)
                    continue
                if limits is not None:
                    limits.charge(ask)
                if cur.policy == "fair":
                    res.add_into(app_cur.selected, ask.resource)
                    new_key = cur.key(app_cur.app, app_cur.selected, self.capacity)
                    heapq.heapreplace(cur.apps, (new_key, app_cur.app.submit_seq, app_cur))
                return ask
            cur.drop_head()
        return None

    def pick(self, parent: Queue) -> Ask | None:
        """The next container below ``parent``: from its most under-served child, which is charged with it
        and re-keyed in ``parent``'s heap."""
        h = self.heap_of(parent)
        while h:
            _, child = h[0]
            ask = self.next_from_leaf(child) if child.is_leaf else self.pick(child)
            if ask is None:
                heapq.heappop(h)
                continue
            if child.max is not None:  # (only a max reads what the call picked below it)
                res.add_into(self.extra.setdefault(child.path, {}), ask.resource)
            used = self.used[child.path]
            res.add_into(used, ask.resource)
            if len(h) > 1:
                heapq.heapreplace(h, (self.key_of(child, used), child))
            return ask
        return None


def _free_room(state: PartitionState) -> Resource:
    """Free room summed over the schedulable nodes: no ask places more containers than fit in it."""
    total: Resource = {}
    for node in state.nodes.values():
        if node.schedulable:
            for name, amount in node.free().items():
                if amount > 0:
                    total[name] = total.get(name, 0) + amount
    return total


# ---------------------------------------------------------------------- placement


class FreeRoomPlacer:
    """Normal mode: the first node in the partition's node order with free room for the ask, never a
    node reserved for another ask (:mod:`sniper.core.node_reservation`). An ask free to run anywhere (no
    node selector, no required node) takes the first such node that no waiting ask's node selector
    requires (:mod:`sniper.core.selector_demand`), and a required one only when no other fits."""

    def __init__(self, exclude: Collection[str] = ()) -> None:
        self.exclude = exclude  # nodes not to use (opportunistic placement skips nodes it evicts on)

    def place(self, state: PartitionState, ask: Ask) -> Node | None:
        nodes = state.nodes
        request = ask.resource
        if ask.required_node is not None:
            node = nodes.get(ask.required_node)
            if node is None or not node.schedulable or not ask.accepts(node) or node.name in self.exclude:
                return None
            if not node.can_hold(request) or node_reservation.blocks(state, ask, node.name):
                return None
            return node if constraints.allows(state, ask, node) else None
        reserved = state.node_reservations
        constrained = bool(ask.constraints)
        demand = state.selector_demand if state.selector_demand and not ask.node_selector else None
        required: Node | None = None  # the first fitting node a waiting ask requires
        for name in state.node_index.candidates(request):
            node = nodes[name]
            if (
                node.can_hold(request)
                and ask.accepts(node)
                and name not in self.exclude
                and (not reserved or not node_reservation.blocks(state, ask, name))
                and (not constrained or constraints.refusal(state, ask, node) is None)
            ):
                if demand is None or not demand.requires(node):
                    return node
                if required is None:
                    required = node
        return required


@dataclass(slots=True)
class TryResult:
    placed: list[tuple[Ask, Node]] = field(default_factory=list)
    failed: set[AskKey] = field(default_factory=set)


def try_allocate(
    state: PartitionState,
    candidates: list[Ask],
    *,
    preemption: bool = False,
    placer: Placer | None = None,
    hold: bool = True,
) -> TryResult:
    """Place each candidate container; an ask that fails once is not tried again in this call.

    With ``hold`` the placed room is added to the allocator's ``allocating`` counters (node, queue,
    ask) so it is never proposed twice before the cache answers. ``preemption=True`` requires a
    ``placer`` that counts victims' room and checks every ``max`` with the victims gone (see
    :mod:`sniper.core.preemption.placement`). A gang that still misses members is placed as one unit
    of them all, or not at all (:mod:`sniper.core.gang`); an ask with a ``topology`` places each unit in
    the domains it allows (:mod:`sniper.core.topology`).
    """
    if preemption and placer is None:
        raise ValueError("preemption mode needs a placer that knows the victims")
    placer = placer or FreeRoomPlacer()
    result = TryResult()
    limits = gang.UnitLimits(state)
    for ask in candidates:
        if ask.key in result.failed:
            continue
        members = gang.unit_size(ask) if ask.gang_min > 1 else 1
        if members > 1 or ask.topology is not None:
            place_unit = gang.place_unit if ask.topology is None else topology.place_unit
            unit = place_unit(state, ask, placer, members, preemption=preemption, limits=limits.view)
            if unit is None:
                result.failed.add(ask.key)
                continue
            result.placed.extend((ask, member) for member in unit)
            if hold:
                limits.held(ask, members)
            else:
                for member in unit:
                    hold_room(state, ask, member, -1)
            continue
        if ask.pending <= 0 or (not preemption and not state.headroom_allows(ask.app.queue, ask.resource)):
            result.failed.add(ask.key)
            continue
        node = placer.place(state, ask)
        if node is None:
            result.failed.add(ask.key)
            continue
        result.placed.append((ask, node))
        if hold:
            hold_room(state, ask, node, 1)
            limits.held(ask)
    return result
