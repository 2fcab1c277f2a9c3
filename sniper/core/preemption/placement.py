"""Preemption-mode placement (the cross-queue design's ``tryAllocate(..., preemption=true)``), run by the allocator.

:class:`VictimPlacer` plugs into the same :func:`sniper.core.allocation.try_allocate` loop as normal
allocation; a node's usable room is its free room plus the victims the round allows there, in every
resource. On each node the victim set is minimal: cheapest victims first (AM containers last) until
the room and every ancestor ``max`` the ask would break are covered, then every victim no need
requires is dropped again (victims are costed as they will be at their kill, the request's grace after
the round: :mod:`sniper.core.preemption.costs`). Among nodes the cheapest set wins (AM-free sets first, ties by
node name), exactly: a best-first search over per-node lower bounds (victims needed times the cheapest victim)
costs only the nodes that could beat the best set; ``max_candidate_nodes`` optionally caps that.
Invariants: a victim is taken at most once per round; containers placed for a required node are never
victims; a queue loses at most its quota plus one whole container, never going below its guarantee
(:func:`sniper.core.preemption.eligibility.may_take`); the round stops once the preempted total reaches its
budget. A gang's members are one unit (:mod:`sniper.core.gang`): the budget is checked when a unit starts, not
between its members; its search counts free room and victims together (a member may take room free now,
an empty set at no cost, on any node); a unit that fails, names no victim at all, or would take its queue
above its ideal, leaves the round as it found it; a unit weighed (:meth:`VictimPlacer.weigh`: a topology
domain tried for its cost) always does. Opportunistic containers come before every guaranteed
victim on a node, free of quota, budget and ``max`` (they count in no queue), and are killed at once by
the commit (:mod:`sniper.core.opportunistic`).
Apps' own limits (:mod:`sniper.core.preemption.rules`): a container of an app that opted out of preemption
ranks with application masters, last, and is spared while other queues' tasks could give the room down to
their guarantees, by every placement rule (:mod:`sniper.core.preemption.soft_opt_out`); no set takes an app
past its disruption budget, counting the victims taken this round; an ask with ``preemption_policy: never``
is never a candidate.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
from collections.abc import Callable

from sniper.core import constraints, node_reservation
from sniper.core import resources as res
from sniper.core.allocation import CandidateFilter, find_ask_candidates, try_allocate, usage_key
from sniper.core.allocator import Allocator
from sniper.core.limits import Limits
from sniper.core.preemption.costs import VICTIM_COST_FLOORS, victim_cost
from sniper.core.preemption.eligibility import (
    may_take,
    queue_refusal,
    quota_allows,
    refusal,
    required_node_order,
    spend,
    standing,
)
from sniper.core.preemption.min_runtime import aging, of_age_at, young
from sniper.core.preemption.quotas import below_ideal, within_share
from sniper.core.preemption.rules import (
    disruption_room,
    last_resort,
    may_preempt,
    required_node_leaves,
)
from sniper.core.preemption.soft_opt_out import below_guarantee, keep_guarantees
from sniper.core.resources import Resource
from sniper.core.state import Allocation, App, Ask, AskKey, Node, PartitionState, Queue, ask_label
from sniper.core.topology import UnitCost
from sniper.messages import protocol as p


@dataclasses.dataclass(slots=True)
class VictimSet:
    node: Node
    victims: list[Allocation]
    cost: float
    has_am: bool  # holds a victim of last resort (an application master, or of an app that opted out)


@dataclasses.dataclass(slots=True)
class _RoundMark:
    """A victim placer's round state, kept while a gang unit is open so that a failed unit leaves none."""

    quota_left: dict[str, Resource]
    budget_left: Resource
    sets: int
    taken: set[str]
    freed: dict[str, Resource]
    leaving: dict[str, Resource]
    room: dict[str, Resource]
    limits: Limits | None
    by_node: dict[str, list[tuple[bool, float, str, Allocation]]]
    held: dict[str, Resource]
    largest: dict[str, Resource]
    cheapest: dict[str, float]
    epoch: int
    version: dict[str, int]
    heaps: dict[tuple[object, ...], tuple[Ask, list[_Entry]]]
    disrupting: dict[str, int]


# (has AM, cost or its lower bound, node, node version, epoch when exact or -1, tie-breaker, the set)
_Entry = tuple[bool, float, str, int, int, int, VictimSet | None]


class VictimPlacer:
    """Finds, for one ask at a time, the cheapest node where a minimal victim set makes room."""

    def __init__(self, state: PartitionState, request: p.PlacementRequest) -> None:
        self.state = state
        self.request = request
        self.now = state.now
        self.kill_at = state.now + request.grace  # victims are costed as they will be at their kill
        self.cost_of = victim_cost(request.victim_cost)
        self.quota_left: dict[str, Resource] = {k: dict(v) for k, v in request.quotas.items()}
        self.budget_left: Resource = dict(request.budget)
        self.sets: list[VictimSet] = []
        self.taken: set[str] = set()
        self.budget_stopped: set[AskKey] = set()  # asks not searched: the round's budget ran out
        self.freed: dict[str, Resource] = {}  # node -> victims taken there this round
        self.leaving: dict[str, Resource] = {}  # queue path (every level) -> victims taken this round
        self._relations: dict[tuple[str, str], bool] = {}  # (victim queue, beneficiary queue) -> allowed
        self._room: dict[str, Resource] = {}
        # A budget of nothing (``total_preemption_per_round: 0``) allows nothing, not everything.
        self.exhausted = not any(v > 0 for v in self.budget_left.values())
        self.intra = request.intra_queue
        self.guarded = state.guarded  # apps with a disruption budget or opted out (usually none)
        self.disrupting: dict[str, int] = {}  # guarded app -> its victims taken this round
        self.budget_refused: set[str] = set()  # containers passed over for their app's budget
        # Containers younger than their queue's ``preemption.min.runtime`` are no candidates this round;
        # the first of them to come of age is when an ask they alone could serve is worth trying again.
        self.aging = aging(state)
        self.wake_at: float | None = None
        # Intra-queue mode may also take from a user above its limit for one within it.
        self.limits = Limits.of(state) if self.intra else None
        # Candidate victims per node, cheapest first and AM containers last (cost is fixed for the
        # round), with per-node aggregates for the lower bound: every resource they hold, the largest
        # single victim per resource and the cheapest victim's cost. Built for a node when the search
        # first costs a set there, bounded before from its container bounds (:meth:`_coarse`), when the
        # cost has a floor; else, or when which nodes are costed shows (the candidate cap, the apps'
        # budget refusals, the wake-up of young candidates), for every node now.
        self.floor = VICTIM_COST_FLOORS.get(request.victim_cost)
        if request.max_candidate_nodes is not None or self.aging or self.guarded:
            self.floor = None
        self.by_node: dict[str, list[tuple[bool, float, str, Allocation]]] = {}
        self.held: dict[str, Resource] = {}
        self.largest: dict[str, Resource] = {}
        self.cheapest: dict[str, float] = {}
        # Leaf queues whose containers may be victims: with a quota, or (intra-queue) those whose containers
        # the eligibility rule does not refuse for their queue alone.
        self.victim_paths = {
            path
            for path, q in state.queues.items()
            if q.is_leaf and (queue_refusal(q) is None if self.intra else path in self.quota_left)
        }
        if self.floor is None:
            for name, node in state.nodes.items():
                if node.schedulable:
                    self._victims_on(name)
        # Lazy best-first search per ask shape: heap entries are lower bounds of a node's cheapest set
        # (exact when computed at the current ``epoch`` and the node's current ``version``).
        self.epoch = 0  # bumped whenever quotas or budget shrink (every other node's cost may rise)
        self.version: dict[str, int] = {}  # bumped when a node's own room or victims change
        self.entries = 0
        self.deficits: list[tuple[Queue, dict[str, int]]] = []  # the current ask's max deficits
        self.heaps: dict[tuple[object, ...], tuple[Ask, list[_Entry]]] = {}  # shape -> (an ask of it, heap)
        self._own_shapes: dict[AskKey, tuple[object, ...]] = {}  # per ask: its part of its shape
        self._unit: _RoundMark | None = None  # the round as it was when the open gang unit started
        self._weighing = False  # units are tried, never kept (:meth:`weigh`)
        self._weighed: UnitCost | None = None  # the cost of the last unit weighed

    def _victims_on(self, name: str) -> list[tuple[bool, float, str, Allocation]]:
        entries = self.by_node.get(name)
        if entries is None:
            node = self.state.nodes[name]
            ok = self.victim_paths
            entries = []
            if any(node.opportunistic.values()) or any(path in ok for path in node.by_queue):
                allocations = self.state.allocations
                cost_of, now, guarded, refused = self.cost_of, self.kill_at, self.guarded, standing
                free = False  # an opportunistic container is among them
                for aid in node.allocations:
                    alloc = allocations[aid]
                    if refused(alloc) is not None:
                        continue  # refused whatever the ask
                    if alloc.opportunistic:
                        entries.append((False, 0.0, aid, alloc))  # free: no queue loses anything
                        free = True
                    elif self.aging and young(alloc, self.now):
                        if alloc.queue.path in ok:
                            self._wait_for(alloc)  # refused whatever the ask (the required-node preemptor's aside)
                    elif alloc.queue.path in ok:
                        last = last_resort(alloc, guarded.get(alloc.app)) if guarded else alloc.am
                        entries.append((last, cost_of(alloc, now), aid, alloc))
                # Opportunistic containers first, newest first (YARN's NodeManager kills them LIFO),
                # then (last resort last, AM after opted-out apps' tasks, cost, id): ids are unique,
                # the allocation is never compared. Without opportunistic containers or guarded apps the
                # last resort is the AM flag: the entries' own order (last resort, cost, id) is that order.
                if guarded or free:
                    entries.sort(
                        key=lambda e: (
                            not e[3].opportunistic,
                            e[0],
                            e[3].am,
                            -e[3].start if e[3].opportunistic else e[1],
                            e[2],
                        )
                    )
                else:
                    entries.sort()
            self.by_node[name] = entries
            self._aggregate(name)
        return entries

    def _wait_for(self, alloc: Allocation) -> None:
        """Note a candidate passed over for its age: the round's wake-up is when the first comes of age."""
        at = of_age_at(alloc)
        if self.wake_at is None or at < self.wake_at:
            self.wake_at = at

    def _aggregate(self, name: str) -> None:
        entries = self.by_node[name]
        if not entries:
            self.held.pop(name, None)
            return
        held: Resource = {}
        largest: Resource = {}
        cheapest = entries[0][1]
        for _, cost, _, alloc in entries:
            if cost < cheapest:
                cheapest = cost  # an AM container may cost less than the tasks sorted before it
            for k, v in alloc.resource.items():
                held[k] = held.get(k, 0) + v
                if v > largest.get(k, 0):
                    largest[k] = v
        self.held[name] = held
        self.largest[name] = largest
        self.cheapest[name] = cheapest

    def _allowed(self, alloc: Allocation, ask: Ask, chosen: list[Allocation] | None = None) -> bool:
        """Victims taken this round are already gone from ``by_node``; preempting ones never entered.
        ``chosen``: victims already in the set being built (a user above its limit gives no more than
        takes it back to its limit)."""
        if alloc.opportunistic:
            return True
        if self.intra:
            why = refusal(
                alloc, ask, now=self.now, intra=True, required_node=False, limits=self.limits, chosen=chosen or ()
            )
            return why is None
        # Across queues the answer for a candidate here (not pinned, not leaving: ``by_node`` holds none)
        # depends on the two queues only: remembered per pair for the round.
        pair = (alloc.queue.path, ask.app.queue.path)
        allowed = self._relations.get(pair)
        if allowed is None:
            allowed = self._relations[pair] = refusal(alloc, ask, now=self.now) is None
        return allowed

    def _lower_bound(self, node: Node, ask: Ask, free_room: bool) -> float | None:
        """A lower bound of the cheapest victim set's cost on ``node`` (``None``: no set can exist).

        Any set covering the shortfall has at least ``k`` victims, ``k`` the most, over resources, of
        shortfall over the largest single victim; each costs at least the node's cheapest victim.
        ``free_room``: a gang's member may take room already free (the empty set, at no cost).
        On a node whose candidates are not listed yet the same bound is taken over what bounds them
        (:meth:`_coarse`): they hold at most what their queues hold there, no one of them more than the
        largest container there, and none costs less than the floor, so no set of them covers the
        shortfall with fewer victims or costs less, and where those queues cannot cover it no set can."""
        name = node.name
        held: Resource | None
        if self.floor is not None and name not in self.by_node:
            coarse = self._coarse(node)
            held, largest, cheapest = (None, {}, 0.0) if coarse is None else coarse
        else:
            held = self.held.get(name)
            largest, cheapest = ({}, 0.0) if held is None else (self.largest[name], self.cheapest[name])
        if held is None and not free_room:
            return None
        shortfall = self._shortfall(node, ask)
        if not shortfall and not self.deficits:
            # Room already free there is the normal allocator's to give, not preemption's, but for a gang's unit.
            return 0.0 if free_room else None
        if held is None:
            return None
        k = 1
        for r, v in shortfall.items():
            if v > held.get(r, 0):
                return None
            k = max(k, -(-v // largest[r]))
        return k * cheapest if cheapest >= 0 else -math.inf

    def _coarse(self, node: Node) -> tuple[Resource, Resource, float] | None:
        """What bounds the candidates on a node not listed yet, from its container bounds alone: every
        resource its candidate queues' containers and its opportunistic containers hold (taken, pinned,
        young and leaving ones included), the most of each one of them holds, and the cost floor
        (an opportunistic container costs nothing); ``None``: the node holds no candidate."""
        ok = self.victim_paths
        held: Resource | None = None
        largest: Resource = {}
        latest = -math.inf
        for path, bounds in node.container_bounds.items():
            if path not in ok:
                continue
            if held is None:  # the state's own figures, read, never written
                held, largest, latest = node.by_queue[path], bounds.largest, bounds.latest_start
                continue
            held, largest = res.add(held, node.by_queue[path]), res.component_max(largest, bounds.largest)
            latest = max(latest, bounds.latest_start)
        opportunistic = node.opportunistic
        if any(opportunistic.values()):
            return res.add(held or {}, opportunistic), res.component_max(largest, opportunistic), 0.0
        if held is None:
            return None
        assert self.floor is not None
        return held, largest, self.floor(latest, self.kill_at)

    # ------------------------------------------------------------------ Placer

    def place(self, state: PartitionState, ask: Ask) -> Node | None:
        if self.exhausted and self._unit is None:
            self.budget_stopped.add(ask.key)
            return None
        self.deficits = self._headroom_deficits(ask)
        pinned = ask.required_node is not None and self.request.required_node
        if ask.required_node is not None:
            node = state.nodes.get(ask.required_node)
            usable = node is not None and node.schedulable and ask.accepts(node)
            if node is None or not usable:
                best = None
            else:
                best = self._required_node_set(node, ask) if pinned else self._minimal_set(node, ask)
        else:
            best = self._search(state, ask)
        if best is None:
            return None
        if best.has_am and not self.intra and not pinned:
            if any(v.am for v in best.victims):
                if self._tasks_could_make_room(state, ask):
                    # AM containers are the last resort: tasks could make this room, only the quota stops
                    # them now. Wait for completions or later rounds rather than kill an application.
                    return None
            else:
                spare = self._sparing_set(state, ask)
                if spare is not None:
                    # An app that opted out is spared while other queues can give down to their
                    # guarantees: they give now to a beneficiary below its guarantee, else it waits.
                    if not below_guarantee(ask.app.queue, state.capacity):
                        return None
                    best = spare
        self._take(best, ask)
        return best.node

    # ------------------------------------------------------------------ gang units (gang.UnitPlacer)

    def open_unit(self, state: PartitionState, ask: Ask, members: int) -> bool:
        """Start a gang of ``members``: refused once the budget is spent, or when the whole gang would
        take its queue beyond its share (:func:`within_share`: no victim for a gang that cannot be completed)."""
        if self.exhausted:
            self.budget_stopped.add(ask.key)
            return False
        target = self.request.targets.get(ask.app.queue.path)
        if target is not None and not self.intra:
            after = res.add(ask.app.queue.usage(), res.scale(ask.resource, members))
            if not within_share(ask.app.queue, after, target, state.capacity):
                return False
        self._unit = _RoundMark(
            {k: dict(v) for k, v in self.quota_left.items()},
            dict(self.budget_left),
            len(self.sets),
            set(self.taken),
            {k: dict(v) for k, v in self.freed.items()},
            {k: dict(v) for k, v in self.leaving.items()},
            {k: dict(v) for k, v in self._room.items()},
            None if self.limits is None else self.limits.fork(),
            dict(self.by_node),
            dict(self.held),
            dict(self.largest),
            dict(self.cheapest),
            self.epoch,
            dict(self.version),
            {shape: (a, list(heap)) for shape, (a, heap) in self.heaps.items()},
            dict(self.disrupting),
        )
        return True

    def close_unit(self, keep: bool) -> bool:
        """End the open unit; without ``keep``, or when it took no victim at all (free room alone is the
        normal allocator's to give), every victim and room it took is given back to the round."""
        mark, self._unit = self._unit, None
        if mark is None:
            return keep
        found = self.sets[mark.sets :]
        if keep and any(chosen.victims for chosen in found):
            if not self._weighing:
                return True
            self._weighed = (any(chosen.has_am for chosen in found), sum(chosen.cost for chosen in found))
        self.quota_left, self.budget_left, self.taken = mark.quota_left, mark.budget_left, mark.taken
        self.freed, self.leaving, self._room, self.limits = mark.freed, mark.leaving, mark.room, mark.limits
        self.by_node, self.held, self.largest, self.cheapest = mark.by_node, mark.held, mark.largest, mark.cheapest
        self.epoch, self.version, self.heaps = mark.epoch, mark.version, mark.heaps
        self.disrupting = mark.disrupting
        del self.sets[mark.sets :]
        self.exhausted = False  # a unit opens only when the round was not exhausted
        return False

    def weigh(self, place: Callable[[], object]) -> UnitCost | None:
        """Run ``place`` (one gang unit placed through this placer) as a trial: the unit gives back all it
        took (:meth:`close_unit` keeps nothing). What the victim sets of the unit it would have kept cost,
        as ``(holds a victim of last resort, total cost)``, or ``None`` (no unit, or one taking no victim).
        The budget refusals of a unit that fails stay counted, as any failed unit's do; one that would be
        kept gives them back (placed for real, it counts them again)."""
        refused = set(self.budget_refused)
        self._weighing, self._weighed = True, None
        try:
            place()
        finally:
            self._weighing = False
        if self._weighed is not None:
            self.budget_refused = refused
        return self._weighed

    def _shape(self, ask: Ask) -> tuple[object, ...]:
        """Asks of one shape have the same candidate sets on every node (one search heap)."""
        own = self._own_shapes.get(ask.key)
        if own is None:  # what the ask itself says, which a round does not change
            who = (ask.app.name, ask.priority) if self.intra else ()
            selector = tuple(sorted((k, tuple(sorted(v))) for k, v in ask.node_selector.items()))
            if ask.constraints:  # its own rule per node (and, for namespace self, per app)
                who = (*who, ask.app.name, ask.constraints)
            own = self._own_shapes[ask.key] = (tuple(sorted(ask.resource.items())), ask.app.queue.path, selector, *who)
        # First: whether free room counts (a gang's unit searches every node, not only those with victims).
        return (self._unit is not None, own[0], own[1], bool(self.deficits), *own[2:])

    def _search(self, state: PartitionState, ask: Ask) -> VictimSet | None:
        """Best-first over lower bounds: the first entry popped that is exact and current is the
        cheapest set over every node (ties by node name); ``max_candidate_nodes`` caps the exact
        evaluations when set."""
        shape = self._shape(ask)
        search = self.heaps.get(shape)
        if search is None:
            free_room = self._unit is not None
            if self.floor is not None and not free_room:
                heap = self._first_bounds(state, ask)
            else:
                nodes = (
                    (node for node in state.nodes.values() if node.schedulable)
                    if free_room or self.floor is not None
                    else (state.nodes[name] for name in self.held)
                )
                entries = (self._bound_entry(node, ask, free_room) for node in nodes if ask.accepts(node))
                heap = [e for e in entries if e is not None]
            heapq.heapify(heap)
            search = self.heaps[shape] = (ask, heap)
        heap = search[1]
        cap = self.request.max_candidate_nodes
        evaluated: list[VictimSet] = []
        pushed_back: list[_Entry] = []
        best: VictimSet | None = None
        while heap:
            entry = heapq.heappop(heap)
            _, _, name, version, epoch, _, found = entry
            if version != self.version.get(name, 0):
                continue  # superseded by a fresher entry for that node
            node = state.nodes[name]
            if found is not None and epoch == self.epoch:
                best = found
                pushed_back.append(entry)
                break
            found = self._minimal_set(node, ask)
            if found is None:
                continue  # no set there now, nor later this round (costs only rise)
            heapq.heappush(heap, (found.has_am, found.cost, name, version, self.epoch, self._next(), found))
            if cap is not None:
                evaluated.append(found)
                if len(evaluated) >= cap:
                    best = min(evaluated, key=lambda v: (v.has_am, v.cost, v.node.name))
                    break
        for entry in pushed_back:
            heapq.heappush(heap, entry)
        return best

    def _first_bounds(self, state: PartitionState, ask: Ask) -> list[_Entry]:
        """:meth:`_bound_entry` of every schedulable node ``ask`` accepts, where nodes are listed on first
        use and free room does not count: the same entries, with :meth:`_lower_bound`'s arithmetic
        written out for the nodes not listed and with no set taken there (the state's room, no room
        freed, :meth:`_coarse`'s figures): the one loop of the round over every node."""
        at_floor = self.floor
        assert at_floor is not None
        listed, rooms, versions = self.by_node, self._room, self.version
        need = list(ask.resource.items())
        anywhere = ask.required_node is None and not ask.node_selector
        deficits = bool(self.deficits)
        out: list[_Entry] = []
        for name, node in state.nodes.items():
            if not node.schedulable or not (anywhere or ask.accepts(node)):
                continue
            if name in listed or name in rooms:
                entry = self._bound_entry(node, ask, False)
                if entry is not None:
                    out.append(entry)
                continue
            coarse = self._coarse(node)
            if coarse is None:
                continue
            held, largest, cheapest = coarse
            cap, used, reserved, holding, leaving = (
                node.capacity,
                node.allocated,
                node.reserved,
                node.allocating,
                node.preempting,
            )
            k, short = 1, False
            for r, v in need:
                gap = v - cap.get(r, 0) + used.get(r, 0)
                if reserved:
                    gap += reserved.get(r, 0)
                if holding:
                    gap += holding.get(r, 0)
                if leaving:
                    gap -= leaving.get(r, 0)
                if gap > 0:
                    if gap > held.get(r, 0):
                        break
                    short = True
                    k = max(k, -(-gap // largest[r]))
            else:
                if short or deficits:
                    self.entries += 1
                    bound = k * cheapest if cheapest >= 0 else -math.inf
                    out.append((False, bound, name, versions.get(name, 0), -1, self.entries, None))
        return out

    def _bound_entry(self, node: Node, ask: Ask, free_room: bool) -> _Entry | None:
        bound = self._lower_bound(node, ask, free_room)
        if bound is None:
            return None
        return (False, bound, node.name, self.version.get(node.name, 0), -1, self._next(), None)

    def _next(self) -> int:
        self.entries += 1
        return self.entries

    def _tasks_could_make_room(self, state: PartitionState, ask: Ask) -> bool:
        """Whether some node holds a victim set without victims of last resort that every placement rule
        allows (:meth:`_task_set`), the quota aside, among the victims the queue relations allow."""
        if ask.required_node is not None:
            names = [ask.required_node]
        else:
            names = (
                list(self.held) if self.floor is None else [n for n, node in state.nodes.items() if node.schedulable]
            )
        for name in names:
            node = state.nodes.get(name)
            if node is not None and node.schedulable and self.floor is not None:
                self._victims_on(name)  # listed on first use
            if node is None or name not in self.held:
                continue
            if self._task_set(state, node, ask, functools.partial(self._allowed_tasks, node, ask)) is not None:
                return True
        return False

    def _allowed_tasks(self, node: Node, ask: Ask) -> list[tuple[bool, float, str, Allocation]]:
        """The node's candidate victims of no last resort that the queue relations allow for ``ask``."""
        return [e for e in self._victims_on(node.name) if not e[0] and self._allowed(e[3], ask)]

    def _sparing_set(self, state: PartitionState, ask: Ask) -> VictimSet | None:
        """The cheapest victim set (ties by node name) without victims of last resort that every placement
        rule allows (:meth:`_task_set`), among every container the queue relations allow whatever its
        queue's quota, each queue kept at or above its guarantee
        (:func:`sniper.core.preemption.soft_opt_out.keep_guarantees`), or ``None``."""
        best: VictimSet | None = None
        names = [ask.required_node] if ask.required_node is not None else sorted(state.nodes)
        for name in names:
            node = state.nodes.get(name)
            if node is None:
                continue
            chosen = self._task_set(state, node, ask, functools.partial(self._any_queue_tasks, node, ask))
            if not chosen:
                continue  # none there, or the room is free (the normal allocator's to give)
            victims = [e[3] for e in chosen]
            if not keep_guarantees(state, [v for v in victims if not v.opportunistic], self.leaving):
                continue
            cost = sum(max(e[1], 0.0) for e in chosen)
            if best is None or cost < best.cost:
                best = VictimSet(node, victims, cost, False)
        return best

    def _any_queue_tasks(self, node: Node, ask: Ask) -> list[tuple[bool, float, str, Allocation]]:
        """Every container on ``node`` the queue relations allow for ``ask``, whatever its queue's quota,
        except victims of last resort and those leaving: opportunistic ones first (free), then cheapest first."""
        guarded = self.guarded
        out: list[tuple[bool, float, str, Allocation]] = []
        for aid in node.allocations:
            alloc = self.state.allocations[aid]
            if aid in self.taken or standing(alloc) is not None or not self._allowed(alloc, ask):
                continue
            if alloc.opportunistic:
                out.append((False, -1.0, aid, alloc))
            elif alloc.queue.is_leaf and not last_resort(alloc, guarded.get(alloc.app)):
                out.append((False, self.cost_of(alloc, self.kill_at), aid, alloc))
        out.sort(key=lambda e: (e[1], e[2]))
        return out

    def _task_set(
        self,
        state: PartitionState,
        node: Node,
        ask: Ask,
        tasks: Callable[[], list[tuple[bool, float, str, Allocation]]],
    ) -> list[tuple[bool, float, str, Allocation]] | None:
        """A minimal set of ``tasks`` (candidates in order, built only for a node that may serve) that every
        placement rule allows on ``node``: the ask accepts the node and no reservation blocks it there, the
        set covers its room and every ``max`` deficit within the apps' budgets, and the ask's constraints
        hold once it is gone (empty: the room is free already; ``None``: no such set). A set looked for,
        not taken, passes nobody over (no budget refusal is counted)."""
        if not node.schedulable or not ask.accepts(node) or node_reservation.blocks(state, ask, node.name):
            return None
        shortfall = self._shortfall(node, ask)
        needs: list[tuple[Queue | None, dict[str, int]]] = [(None, shortfall)] if shortfall else []
        needs.extend(self.deficits)
        refused = set(self.budget_refused)
        chosen = self._pick(node, ask, needs, within_quota=False, candidates=tasks()) if needs else []
        self.budget_refused = refused
        if chosen is None:
            return None
        if ask.constraints and not constraints.allows(state, ask, node, [e[3] for e in chosen]):
            return None
        return chosen

    def _shortfall(self, node: Node, ask: Ask) -> dict[str, int]:
        freed_here = self.freed.get(node.name) or {}
        shortfall: dict[str, int] = {}
        base = self._room.get(node.name)
        if base is None:
            # No set taken there this round (:meth:`_take` caches the room first): the state's room is
            # what :meth:`_base_room` would cache, read without building it.
            cap, used, held, holding = node.capacity, node.allocated, node.reserved, node.allocating
            leaving = node.preempting
            for k, v in ask.resource.items():
                have = cap.get(k, 0) - used.get(k, 0) - held.get(k, 0) - holding.get(k, 0) + leaving.get(k, 0)
                have += freed_here.get(k, 0)
                if v > have:
                    shortfall[k] = v - have
            return shortfall
        for k, v in ask.resource.items():
            have = base.get(k, 0) + freed_here.get(k, 0)
            if v > have:
                shortfall[k] = v - have
        return shortfall

    def _base_room(self, node: Node) -> Resource:
        """Room once committed victims leave, minus what this round promised there (cached per round)."""
        room = self._room.get(node.name)
        if room is None:
            room = self._room[node.name] = self.state.room_once_victims_leave(node)
        return room

    def _headroom_deficits(self, ask: Ask) -> list[tuple[Queue, dict[str, int]]]:
        """Per ancestor with a ``max`` the ask would break: by how much (victims leaving that subtree
        can make up for it, YuniKorn's first user-guide example). Victims under notice, and those taken
        this round, are counted gone."""
        out: list[tuple[Queue, dict[str, int]]] = []
        for q in ask.app.queue.lineage():
            if q.max is None:
                continue
            deficit: dict[str, int] = {}
            for k, v in ask.resource.items():
                if k in q.max:
                    used = q.allocated.get(k, 0) + q.reserved.get(k, 0) + q.allocating.get(k, 0)
                    gone = q.preempting.get(k, 0) + self.leaving.get(q.path, {}).get(k, 0)
                    over = used - gone + v - q.max[k]
                    if over > 0:
                        deficit[k] = over
            if deficit:
                out.append((q, deficit))
        return out

    def _minimal_set(self, node: Node, ask: Ask) -> VictimSet | None:
        """The node's room shortfall and every ``max`` deficit covered by one minimal victim set."""
        if node_reservation.blocks(self.state, ask, node.name):
            return None  # reserved for another ask: de-reservation, not preemption, opens it
        shortfall = self._shortfall(node, ask)
        needs: list[tuple[Queue | None, dict[str, int]]] = [(None, shortfall)] if shortfall else []
        needs.extend(self.deficits)
        if not needs:
            return self._free_room_set(node, ask)
        chosen = self._pick(node, ask, needs, within_quota=True)
        if chosen is None and not self.intra:
            # The quota also counted cheap victims the trim drops again (a larger victim within the
            # quota was skipped for them): pick counting each victim alone, trim, then check the set.
            chosen = self._pick(node, ask, needs, within_quota=False)
            if chosen is not None and not self._within_quota(chosen):
                chosen = None
        if chosen is None:
            return None
        victims = [e[3] for e in chosen]
        if ask.constraints and not constraints.allows(self.state, ask, node, victims):
            return None  # the ask's constraints would not hold there once these victims are gone
        return VictimSet(node, victims, sum(e[1] for e in chosen), any(e[0] for e in chosen))

    def _free_room_set(self, node: Node, ask: Ask) -> VictimSet | None:
        """The empty set where the ask fits room free now (not room victims will free: the member is
        allocated at the commit, beside its gang's reservations): a gang's member only (outside a unit
        that room is the normal allocator's to give, not preemption's), and only where its constraints hold."""
        if self._unit is None or not node.can_hold(ask.resource):
            return None
        if ask.constraints and not constraints.allows(self.state, ask, node, []):
            return None
        return VictimSet(node, [], 0.0, False)

    def _required_node_set(self, node: Node, ask: Ask) -> VictimSet | None:
        """YuniKorn's required-node preemptor on the ask's node, whichever queue the victims are in and
        whatever the quotas: containers of the ask's priority or lower (``eligibility.required_node_order``), never one
        placed for a required-node ask nor one already leaving; taken in that order until the room and every
        ``max`` deficit are covered, then trimmed to a minimal set."""
        if node_reservation.blocks(self.state, ask, node.name):
            return None
        shortfall = self._shortfall(node, ask)
        needs: list[tuple[Queue | None, dict[str, int]]] = [(None, shortfall)] if shortfall else []
        needs.extend(self.deficits)
        if not needs:
            return self._free_room_set(node, ask)
        allocations = self.state.allocations
        eligible = [
            alloc
            for alloc in (allocations[aid] for aid in node.allocations)
            if alloc.id not in self.taken and refusal(alloc, ask, now=self.now, required_node=True) is None
        ]
        eligible.sort(key=required_node_order)
        cost_of, now = self.cost_of, self.kill_at
        ranked = [(a.am and not a.opportunistic, float(i), a.id, a) for i, a in enumerate(eligible)]
        chosen = self._pick(node, ask, needs, within_quota=False, candidates=ranked)
        if chosen is None:
            return None
        victims = [e[3] for e in chosen]
        if ask.constraints and not constraints.allows(self.state, ask, node, victims):
            return None
        cost = sum(0.0 if v.opportunistic else cost_of(v, now) for v in victims)
        return VictimSet(node, victims, cost, any(e[0] for e in chosen))

    def _pick(
        self,
        node: Node,
        ask: Ask,
        needs: list[tuple[Queue | None, dict[str, int]]],
        *,
        within_quota: bool,
        candidates: list[tuple[bool, float, str, Allocation]] | None = None,
    ) -> list[tuple[bool, float, str, Allocation]] | None:
        """Cheapest victims first until every need is covered, then trimmed to a minimal set. A need
        scoped to a queue counts only victims inside its subtree (``None``: the node's room).
        ``candidates``: victims already chosen by a rule of their own (the required-node preemptor, or the
        tasks that could serve instead of victims of last resort), in order, taken as they come (no queue
        relation, no quota)."""
        ruled = candidates is not None
        chosen: list[tuple[bool, float, str, Allocation]] = []
        got = [dict.fromkeys(need, 0) for _, need in needs]
        lose: dict[str, Resource] = {}

        def counts(scope: Queue | None, alloc: Allocation) -> bool:
            return scope is None or (not alloc.opportunistic and alloc.queue.is_within(scope))

        def covered() -> bool:
            return all(g[k] >= need[k] for g, (_, need) in zip(got, needs, strict=True) for k in g)

        guarded = self.guarded
        for entry in candidates if candidates is not None else self._victims_on(node.name):
            alloc = entry[3]
            if not ruled and not self._allowed(alloc, ask, [e[3] for e in chosen] if self.intra else None):
                continue
            if guarded and not alloc.opportunistic:
                app = guarded.get(alloc.app)
                if app is not None and not self._within_budget(app, chosen):
                    self.budget_refused.add(alloc.id)
                    continue
            useful = [i for i, (scope, need) in enumerate(needs) if counts(scope, alloc)]
            if not useful:
                continue
            if not ruled and not self.intra and not alloc.opportunistic:
                path = alloc.queue.path
                left = self.quota_left[path]
                if not within_quota:
                    if not may_take(alloc.queue, {}, alloc.resource, left, self.state.capacity, self.leaving.get(path)):
                        continue  # over the quota on its own: in no set the quota allows
                else:
                    taken = lose.get(path)
                    if taken is None:
                        taken = lose[path] = {}
                    capacity, gone = self.state.capacity, self.leaving.get(path)
                    if not all(taken.get(k, 0) + v <= left.get(k, 0) for k, v in alloc.resource.items()) and (
                        not may_take(alloc.queue, taken, alloc.resource, left, capacity, gone)
                    ):
                        continue
                    for k, v in alloc.resource.items():
                        taken[k] = taken.get(k, 0) + v
            chosen.append(entry)
            for i in useful:
                g = got[i]
                for k in g:
                    g[k] += alloc.resource.get(k, 0)
            if covered():
                break
        else:
            return None
        # Trim: drop, most expensive first, every victim no need requires (never one a need requires).
        if len(chosen) > 1:
            for entry in sorted(chosen, key=lambda e: (e[0], e[1]), reverse=True):
                alloc = entry[3]
                r = alloc.resource
                hit = [i for i, (scope, _) in enumerate(needs) if counts(scope, alloc)]
                if all(got[i][k] - r.get(k, 0) >= needs[i][1][k] for i in hit for k in got[i]):
                    chosen.remove(entry)
                    for i in hit:
                        for k in got[i]:
                            got[i][k] -= r.get(k, 0)
        return chosen

    def _within_budget(self, app: App, chosen: list[tuple[bool, float, str, Allocation]]) -> bool:
        """Whether one more victim of ``app`` keeps it within its disruption budget, counting its victims
        under notice, those taken this round and those already in the set being built."""
        room = disruption_room(app)
        if room is None:
            return True
        in_set = sum(1 for e in chosen if e[3].app == app.name and not e[3].opportunistic)
        return self.disrupting.get(app.name, 0) + in_set < room

    def _within_quota(self, chosen: list[tuple[bool, float, str, Allocation]]) -> bool:
        victims = [e[3] for e in chosen if not e[3].opportunistic]
        return quota_allows(victims, self.quota_left, self.state.capacity, self.leaving) is None

    def _take(self, chosen: VictimSet, ask: Ask) -> None:
        self.sets.append(chosen)
        name = chosen.node.name
        # The ask will hold its room on the node (try_allocate adds it to the node's allocating).
        res.sub_into(self._base_room(chosen.node), ask.resource)
        if self.limits is not None:
            self.limits.charge(ask)
        for alloc in chosen.victims:
            self.taken.add(alloc.id)
            res.add_into(self.freed.setdefault(name, {}), alloc.resource)
            if alloc.opportunistic:
                continue  # in no queue's quota, max or user limit, nor in the round's preemption budget
            if alloc.app in self.guarded:
                self.disrupting[alloc.app] = self.disrupting.get(alloc.app, 0) + 1
            if self.limits is not None:
                self.limits.take(alloc)
            left = None if self.intra else self.quota_left.get(alloc.queue.path)
            if left is not None:  # a required-node victim may come from a queue without a quota
                spend(left, self.request.quotas.get(alloc.queue.path, {}), alloc.resource)
            res.sub_into(self.budget_left, alloc.resource)
            for q in alloc.queue.lineage():
                res.add_into(self.leaving.setdefault(q.path, {}), alloc.resource)
        self.by_node[name] = [e for e in self._victims_on(name) if e[3].id not in self.taken]
        self._aggregate(name)
        # Quotas and budget shrank: every cached cost is now a lower bound. This node changed itself
        # (its freed surplus may make the next set cheaper): fresh bounds for it in every heap.
        self.epoch += 1
        self.version[name] = self.version.get(name, 0) + 1
        for shape, (shape_ask, heap) in self.heaps.items():
            accepts = shape_ask.accepts(chosen.node)
            entry = self._bound_entry(chosen.node, shape_ask, bool(shape[0])) if accepts else None
            if entry is not None:
                heapq.heappush(heap, entry)
        if any(v <= 0 for k, v in self.budget_left.items() if k in self.request.budget and self.request.budget[k] > 0):
            self.exhausted = True


def _net_usage_key(capacity: Resource) -> object:
    def key(q: Queue, usage: Resource) -> tuple[object, ...]:
        return usage_key(q, res.clamp_min_zero(res.sub(usage, q.preempting)), capacity)

    return key


def answer_placement_request(core: Allocator, request: p.PlacementRequest) -> p.PlacementReply:
    """One preemption round on the allocator's replica (the cross-queue design's inter-queue loop, rate-capped)."""
    state = core.state
    missed = core.missed
    mask = set(request.mask)
    mask_hits = 0
    targets = request.targets
    beneficiaries = set(request.beneficiaries)
    # Leaves with a pending required-node ask: it preempts on its node whatever its queue's standing.
    pinned = required_node_leaves(state) if request.required_node else set()
    eligible = beneficiaries | pinned

    served: dict[str, bool] = {}  # per queue, while the state stands still (one search for candidates)

    def serves(q: Queue) -> bool:
        known = served.get(q.path)
        if known is None:
            target = targets.get(q.path)
            known = q.path in beneficiaries and (target is None or below_ideal(q.usage(), target, state.capacity))
            served[q.path] = known
        return known

    def queue_ok(q: Queue) -> bool:
        if q.is_leaf:
            return q.path in pinned or serves(q)
        return any(b.startswith(q.path + ".") for b in eligible)

    def ask_ok(ask: Ask) -> bool:
        nonlocal mask_hits
        if missed.get(ask.key, 0) < request.min_missed or ask.damped_until > state.now:
            return False
        if state.now - ask.created < ask.app.queue.config.preemption_delay:
            return False  # younger than its queue's preemption.delay (YuniKorn's ask age check)
        if not (ask.required_node is not None and request.required_node) and not serves(ask.app.queue):
            return False
        if mask and ask_label(ask.key) in mask:
            mask_hits += 1
            return False
        return may_preempt(ask)

    placer = VictimPlacer(state, request)
    failed: set[AskKey] = set()
    placed: list[tuple[Ask, Node]] = []
    while not placer.exhausted:
        served.clear()  # the last placements changed the queues' usage
        candidates = find_ask_candidates(
            state,
            max(1, len(eligible)),
            preemption=True,
            filters=CandidateFilter(skip=failed, queue=queue_ok, ask=ask_ok),
            queue_key=_net_usage_key(state.capacity),  # type: ignore[arg-type]
        )
        if not candidates:
            break
        result = try_allocate(state, candidates, preemption=True, placer=placer)
        # Asks that failed no longer hide the ones behind them: go on while something new was tried.
        progress = bool(result.placed) or not result.failed <= failed
        failed |= result.failed
        placed.extend(result.placed)
        if not progress:
            break
    # Asks searched in vain missed an opportunity and go into the mask; those the budget stopped did not.
    unplaceable = failed - placer.budget_stopped
    for key in unplaceable:
        missed[key] = missed.get(key, 0) + 1
    placements: list[p.Victimized] = []
    waits: dict[AskKey, int] = {}
    for (ask, node), chosen in zip(placed, placer.sets, strict=True):
        # The ask got its container (update-missed-opportunity); a gang's members share its wait.
        waited = waits.setdefault(ask.key, missed.pop(ask.key, 0))
        reason = f"{ask_label(ask.key)} missed {waited} cycles"
        placements.append(
            p.Victimized(
                app=ask.key[0],
                ask=ask.key[1],
                node=node.name,
                victims=[v.id for v in chosen.victims],
                cost=round(chosen.cost, 3),
                reason=reason,
            )
        )
    if placed:
        core.hold(request.id, placed)
    return p.PlacementReply(
        partition=core.partition,
        id=request.id,
        placements=placements,
        unplaceable=sorted(ask_label(k) for k in unplaceable),
        mask_hits=mask_hits,
        view_seq=core.view_seq,
        budget_refusals=len(placer.budget_refused),
        wake_at=placer.wake_at if unplaceable else None,
    )
