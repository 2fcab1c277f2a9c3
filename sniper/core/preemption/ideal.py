"""The ideal assignment: the share of its parent's resources each queue deserves now (YARN's fix-point).

Owns :func:`compute_ideal`, a faithful re-implementation of YARN's ``computeIdealResourceDistribution`` /
``computeFixpointAllocation`` / ``TempQueuePerPartition.offer`` / ``assignPreemption`` /
``updatePreemptableExtras`` (CapacityScheduler proportional preemption), plus two options Sniper uses for
itself (both off for the YARN baseline):

- ``priority_layers``: siblings are served by business priority, highest layer first. The spare
  pool still holds every queue's usage above its protected part (its initial ideal), so a higher
  layer may take from a lower one; a lower layer only gets what is left once the higher layers are satisfied
  (their own usage included), so it never takes from a higher one.
- ``avoid_ineffective``: a queue whose increment over its usage cannot start even its smallest pending ask
  gets no increment at all; the level is recomputed without its demand, so its share goes to the others
 . One queue (the one with the largest useless increment) is dropped per recomputation. A
  parent's increment is judged with what its other children hold above their guarantees, resource by
  resource and never below zero: a parent at its max still serves a child's ask by preemption inside its
  own subtree.
- ``cap_by_demand``: an ideal never exceeds ``used + pending`` on any resource (architecture: Vocabulary).
  YARN's dominant calculator takes the DRF-smaller of two vectors whole, so an offer or a protected
  guarantee can hand a memory-heavy queue vcores it neither holds nor asks for, lifting its dominant share
  (a queue at twice its memory guarantee would look "below its ideal"); Sniper clamps each resource to
  the demand, a leaf without a guarantee of its own is not capped at its usage (it shares, by demand,
  what its parent's guarantee leaves over its siblings'), and a resource no needy sibling's guarantee
  names is offered evenly instead of not at all, and never capped by the leaf cap of a guarantee that does
  not name it; the order of needy queues compares dominant shares of the partition's capacity on the
  resources each guarantee names (an unnamed one scarce in the parent, such as pods, would dominate it
  and end a queue's share of its guaranteed resources early). Below a ``fence``
  queue the children share what the subtree holds, at most its ideal: asks inside a fence preempt only
  inside it.

The computation, level by level from the root (whose ideal is its guarantee):

1. Initial ideal: ``used`` when ``used <= guaranteed``, else ``guaranteed + untouchable_extra``
   (``cap_by_demand``: resource by resource, so usage above the guarantee on one resource is never
   protected by a shortfall on another);
   ``unassigned = parent ideal - sum(initial)``. A queue is needy while ``ideal < used + pending``.
2. Fix-point: every round serves the group tied for the smallest ``ideal / guaranteed`` (queue priorities
   break ties as in YARN's ``PriorityUtilizationQueueOrderingPolicy``), weights are ``guaranteed / sum of
   guaranteed of the needy queues`` (Java ``float``), each queue of the group is offered
   ``unassigned at the round's start * weight`` rounded by the calculator (default: ``(long)(x + 0.5)``;
   dominant: ``ceil``, as YARN's ``DominantResourceCalculator``), capped at what is unassigned, and accepts
   ``min(offer, max - ideal, used + pending_considering_reserved - ideal)`` and, for leaves unless
   ``preempt_to_balance``, ``<= max(used, guaranteed) - ideal``. A queue stays needy only if it accepted more
   than nothing. Zero-guarantee queues get a second pass with equal weights if something is left.
3. ``to_be_preempted = trunc((used - killable - max(min(used + pending, guaranteed), ideal)) * scaling)``,
   where ``scaling = allowance / total over-ideal`` of the level when the latter exceeds the allowance.

Invariants: the snapshot is never mutated; the result is a pure function of (snapshot, calculator, options);
queue order (the snapshot's pre-order) breaks every tie, so results are deterministic; a parent's pending is
the sum of its children's (the snapshot's value for parents is ignored); ``ideal_assigned`` never exceeds a
queue's ``max`` through an offer; all arithmetic is integer except YARN's float weights and ratios.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from sniper.core.preemption.calculator import (
    Order,
    ResourceCalculator,
    double_compare,
    java_float_div,
    multiply_trunc,
)
from sniper.core.preemption.model import ClusterSnapshot, QueueSnapshot
from sniper.core.resources import (
    Resource,
    ResourceLike,
    add,
    any_positive,
    clamp_min_zero,
    component_max,
    component_min,
    sub,
    total,
)

T = TypeVar("T")

_ZERO_GUARANTEE_RATIO = float(2**31 - 1)  # YARN: Integer.MAX_VALUE for queues without a guarantee


@dataclasses.dataclass(frozen=True, slots=True)
class QueueIdeal:
    """The figures of one queue after the ideal assignment.

    ``pending`` is the demand the computation used (a parent's is the sum of its children's; zero for a
    queue whose demand was dropped as ineffective). ``ineffective`` tells that this happened.
    """

    path: str
    ideal_assigned: Resource
    to_be_preempted: Resource
    preemptable_extra: Resource
    untouchable_extra: Resource
    pending: Resource
    ineffective: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class IdealAssignment:
    """The result of :func:`compute_ideal`: one :class:`QueueIdeal` per queue, in the snapshot's pre-order."""

    queues: Mapping[str, QueueIdeal]

    def __getitem__(self, path: str) -> QueueIdeal:
        return self.queues[path]

    def __iter__(self) -> Iterator[QueueIdeal]:
        return iter(self.queues.values())


def compute_ideal(
    snapshot: ClusterSnapshot,
    calculator: ResourceCalculator,
    *,
    total_preemption_allowed: ResourceLike | None = None,
    preempt_to_balance: bool = False,
    priority_layers: bool = False,
    avoid_ineffective: bool = False,
    cap_by_demand: bool = False,
) -> IdealAssignment:
    """Compute every queue's ideal assignment, preemption target and extras.

    ``total_preemption_allowed`` is the round's allowance (YARN: ``cluster * total_preemption_per_round``);
    ``None`` means no scaling. ``preempt_to_balance`` lifts the leaf cap ``max(used, guaranteed)`` (YARN's
    preemption to balance queues beyond their guarantee). ``priority_layers`` and ``avoid_ineffective`` are
    Sniper's options described in the module docstring.
    """
    solver = _Solver(
        calculator,
        dict(snapshot.resource),
        None if total_preemption_allowed is None else dict(total_preemption_allowed),
        balance=preempt_to_balance,
        layers=priority_layers,
        avoid_ineffective=avoid_ineffective,
        cap_by_demand=cap_by_demand,
    )
    work = _build(snapshot)
    root = work[snapshot.root.path]
    solver.solve(root)
    return IdealAssignment(
        {
            path: QueueIdeal(
                path=path,
                ideal_assigned=dict(q.ideal),
                to_be_preempted=dict(q.to_be_preempted),
                preemptable_extra=dict(q.preemptable),
                untouchable_extra=dict(q.untouchable),
                pending=dict(q.pending_eff),
                ineffective=q.excluded,
            )
            for path, q in work.items()
        }
    )


@dataclasses.dataclass(slots=True, eq=False)
class _Q:
    """Mutable working state of one queue during one computation."""

    snap: QueueSnapshot
    children: list[_Q]
    pending: Resource
    pcr: Resource
    killable: Resource
    ideal: Resource = dataclasses.field(default_factory=dict)
    untouchable: Resource = dataclasses.field(default_factory=dict)
    preemptable: Resource = dataclasses.field(default_factory=dict)
    to_be_preempted: Resource = dataclasses.field(default_factory=dict)
    weight: dict[str, float] = dataclasses.field(default_factory=dict)
    excluded: bool = False
    # The ideal its ordering ratio was last computed for, and that ratio: the ratio is a function of the
    # ideal alone within a level (the level's total, the guarantee and the capacity are fixed), and an ideal
    # is replaced, never changed in place.
    ratio_of: tuple[Resource, float] | None = None

    @property
    def guaranteed(self) -> Resource:
        return self.snap.guaranteed

    @property
    def used(self) -> Resource:
        return self.snap.used

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def pending_eff(self) -> Resource:
        return {} if self.excluded else self.pending

    @property
    def pcr_eff(self) -> Resource:
        return {} if self.excluded else self.pcr


def killable_of(snap: QueueSnapshot) -> Resource:
    """What a leaf's containers the scheduler already holds as killable (not reservations) add up to: all the
    ideal reads of its applications (a parent's is empty)."""
    if not snap.is_leaf:
        return {}
    return total(c.resource for app in snap.apps for c in app.containers if c.killable and not c.reserved)


def _build(snapshot: ClusterSnapshot) -> dict[str, _Q]:
    """Working queues in pre-order, parents' pending aggregated from their children (as YARN's ``addChild``)."""
    work: dict[str, _Q] = {}
    for snap in snapshot.queues:
        work[snap.path] = _Q(
            snap=snap,
            children=[],
            pending=snap.pending if snap.is_leaf else {},
            pcr=snap.pending_considering_reserved if snap.is_leaf else {},
            killable=killable_of(snap),
        )
    for snap in snapshot.queues:
        if snap.parent is not None:
            work[snap.parent].children.append(work[snap.path])
    for snap in reversed(snapshot.queues):
        q = work[snap.path]
        if q.children:
            q.pending = total(c.pending for c in q.children)
            q.pcr = total(c.pcr for c in q.children)
    return work


class _JavaPriorityQueue(Generic[T]):
    """``java.util.PriorityQueue`` with a comparator: same binary heap, same sift order, same tie behaviour.

    YARN orders needy queues with a comparator that is not a total order when queue priorities differ;
    reproducing the heap keeps the served groups identical to YARN's for the same insertion order.
    """

    def __init__(self, cmp: Callable[[T, T], int]) -> None:
        self._cmp = cmp
        self._heap: list[T] = []

    def __len__(self) -> int:
        return len(self._heap)

    def items(self) -> list[T]:
        return list(self._heap)

    def add(self, item: T) -> None:
        heap = self._heap
        heap.append(item)
        k = len(heap) - 1
        while k > 0:
            parent = (k - 1) >> 1
            above = heap[parent]
            if self._cmp(item, above) >= 0:
                break
            heap[k] = above
            k = parent
        heap[k] = item

    def peek(self) -> T | None:
        return self._heap[0] if self._heap else None

    def poll(self) -> T:
        heap = self._heap
        result = heap[0]
        last = heap.pop()
        if heap:
            n = len(heap)
            half = n >> 1
            k = 0
            while k < half:
                child = 2 * k + 1
                c = heap[child]
                right = child + 1
                if right < n and self._cmp(c, heap[right]) > 0:
                    child = right
                    c = heap[child]
                if self._cmp(last, c) <= 0:
                    break
                heap[k] = c
                k = child
            heap[k] = last
        return result


def priority_utilization_compare(ratio1: float, ratio2: float, priority1: int, priority2: int) -> int:
    """YARN's ``PriorityUtilizationQueueOrderingPolicy.compare``: negative when queue 1 goes first.

    Same priority: the smaller ratio first. Different priorities with both ratios below 1.0 or both at least
    1.0: the higher priority first. Otherwise the under-served queue (ratio below 1.0) first.
    """
    if priority1 == priority2:
        return double_compare(ratio1, ratio2)
    if (ratio1 < 1.0 and ratio2 < 1.0) or (ratio1 >= 1.0 and ratio2 >= 1.0):
        return (priority2 > priority1) - (priority2 < priority1)
    return double_compare(ratio1, ratio2)


class _Solver:
    def __init__(
        self,
        calc: ResourceCalculator,
        cluster: Resource,
        allowance: Resource | None,
        *,
        balance: bool,
        layers: bool,
        avoid_ineffective: bool,
        cap_by_demand: bool = False,
    ) -> None:
        self.calc = calc
        self.cluster = cluster
        self.allowance = allowance
        self.balance = balance
        self.layers = layers
        self.avoid_ineffective = avoid_ineffective
        self.cap_by_demand = cap_by_demand
        self.weights: dict[tuple[bool, frozenset[str]], dict[str, dict[str, float]]] = {}
        self.orders: dict[int, tuple[Resource, Order]] = {}

    def _at(self, tot: Resource) -> Order:
        """The calculator's comparison against ``tot``, worked out once per total (by identity: a level's total
        and the capacity are never changed in place; the entry holds the total, so its id is not reused)."""
        known = self.orders.get(id(tot))
        if known is None or known[0] is not tot:
            known = self.orders[id(tot)] = (tot, self.calc.against(tot))
        return known[1]

    def solve(self, root: _Q) -> None:
        self._update_extras(root)
        root.ideal = dict(root.guaranteed)
        self._recurse(root)

    def _recurse(self, q: _Q) -> None:
        if q.children:
            tot = q.ideal
            if self.cap_by_demand and q.snap.fenced:
                # Asks inside a fence never preempt outside it: what its children can be owed through
                # preemption is what the subtree holds (free room reaches them by normal allocation).
                tot = component_min(q.ideal, q.used)
            self._distribute(q.children, tot)
            for child in q.children:
                self._recurse(child)

    # --- extras --------------------------------------------------------------------------------------------

    def _update_extras(self, q: _Q) -> None:
        for child in q.children:
            self._update_extras(child)
        order = self._at(self.cluster)
        extra = sub(q.used, q.guaranteed)
        if order.lt(extra, {}):
            extra = {}
        if q.is_leaf:
            if q.snap.preemption_disabled:
                q.untouchable, q.preemptable = extra, {}
            else:
                q.untouchable, q.preemptable = {}, extra
            return
        children_preemptable = total(c.preemptable for c in q.children)
        q.untouchable = {} if order.ge(children_preemptable, extra) else sub(extra, children_preemptable)
        q.preemptable = order.rmin(children_preemptable, extra)

    # --- one level ---------------------------------------------------------------------------------------

    def _distribute(self, queues: list[_Q], tot: Resource) -> None:
        while True:
            self._distribute_once(queues, tot)
            if not self.avoid_ineffective:
                break
            culprit = self._ineffective(queues, tot)
            if culprit is None:
                break
            culprit.excluded = True
        self._assign_preemption(queues, tot)

    def _distribute_once(self, queues: list[_Q], tot: Resource) -> None:
        order = self._at(tot)
        for q in queues:
            q.ideal = {}
        unassigned: Resource = dict(tot)
        if not self.layers:
            nonzero = [q for q in queues if order.positive(q.guaranteed)]
            zero = [q for q in queues if not order.positive(q.guaranteed)]
            unassigned = self._fixpoint(tot, nonzero, unassigned, ignore_guarantee=False, initialize=True)
            if zero and order.positive(unassigned):
                unassigned = self._fixpoint(tot, zero, unassigned, ignore_guarantee=True, initialize=True)
            return
        for q in queues:
            q.ideal = self._initial(order, tot, q)
            unassigned = sub(unassigned, q.ideal)
        for layer in _priority_layers(queues):
            nonzero = [q for q in layer if order.positive(q.guaranteed)]
            zero = [q for q in layer if not order.positive(q.guaranteed)]
            unassigned = self._fixpoint(tot, nonzero, unassigned, ignore_guarantee=False, initialize=False)
            if zero and order.positive(unassigned):
                unassigned = self._fixpoint(tot, zero, unassigned, ignore_guarantee=True, initialize=False)

    def _initial(self, order: Order, tot: Resource, q: _Q) -> Resource:
        guaranteed = q.guaranteed
        if self.cap_by_demand:
            # A guaranteed resource the parent's ideal has none of (nobody uses it) would make the
            # guarantee look infinite there and protect all the queue holds: it is left out.
            guaranteed = {n: v for n, v in guaranteed.items() if tot.get(n, 0)}
        if order.gt(q.used, guaranteed):
            protected = add(q.guaranteed, q.untouchable)
            return component_min(protected, add(q.used, q.pending_eff)) if self.cap_by_demand else protected
        if self.cap_by_demand:
            # Below its guarantee as a whole, a queue may still hold more than guaranteed of one resource
            # (more memory, fewer cores): that surplus is spare like any other, not protected.
            protected = add(q.guaranteed, clamp_min_zero(q.untouchable))
            return {n: min(v, protected[n]) if n in guaranteed else v for n, v in q.used.items()}
        return dict(q.used)

    def _fixpoint(
        self, tot: Resource, queues: list[_Q], unassigned: Resource, *, ignore_guarantee: bool, initialize: bool
    ) -> Resource:
        calc, order = self.calc, self._at(tot)
        heap: _JavaPriorityQueue[_Q] = _JavaPriorityQueue(lambda a, b: self._order(tot, a, b))
        for q in queues:
            if initialize:
                q.ideal = self._initial(order, tot, q)
                unassigned = sub(unassigned, q.ideal)
            if order.lt(q.ideal, add(q.used, q.pending_eff)):
                heap.add(q)
        while len(heap) and order.positive(unassigned):
            self._reset_weights(heap.items(), ignore_guarantee)
            underserved = self._most_underserved(tot, heap)
            at_start = dict(unassigned)
            for q in underserved:
                if not calc.any_major_above_zero(unassigned):
                    break
                offer = component_min(calc.multiply_round(at_start, q.weight), unassigned)
                accepted = self._offer(order, q, offer)
                if order.positive(accepted):
                    heap.add(q)
                unassigned = _sub_at_least_zero(unassigned, accepted)
        return unassigned

    def _ratio(self, tot: Resource, q: _Q) -> float:
        known = q.ratio_of
        if known is not None and known[0] is q.ideal:
            return known[1]
        ratio = self._fresh_ratio(tot, q)
        q.ratio_of = (q.ideal, ratio)
        return ratio

    def _fresh_ratio(self, tot: Resource, q: _Q) -> float:
        if not self._at(tot).positive(q.guaranteed):
            return _ZERO_GUARANTEE_RATIO
        if self.cap_by_demand:
            # How far a queue is towards its guarantee: dominant shares of the partition's capacity, of the
            # resources its guarantee names only (the others are not guaranteed, architecture: Vocabulary).
            # An unnamed one scarce in the cluster or the parent (pods) would otherwise rank the queue at its
            # guarantee long before it holds its share of the resources it is guaranteed.
            named = {n: v for n, v in q.ideal.items() if q.guaranteed.get(n, 0)}
            return self.calc.divide(self.cluster, named, q.guaranteed)
        return self.calc.divide(tot, q.ideal, q.guaranteed)

    def _order(self, tot: Resource, a: _Q, b: _Q) -> int:
        return priority_utilization_compare(self._ratio(tot, a), self._ratio(tot, b), a.snap.priority, b.snap.priority)

    def _most_underserved(self, tot: Resource, heap: _JavaPriorityQueue[_Q]) -> list[_Q]:
        group: list[_Q] = []
        while len(heap):
            first = heap.poll()
            group.append(first)
            nxt = heap.peek()
            if nxt is None or self._order(tot, first, nxt) < 0:
                break
        return group

    def _reset_weights(self, queues: list[_Q], ignore_guarantee: bool) -> None:
        # The weights are a function of which queues are needy (and of the pass): a set seen before in this
        # computation gets the same weight dicts again (they are read, never changed).
        key = (ignore_guarantee, frozenset(q.snap.path for q in queues))
        known = self.weights.get(key)
        if known is None:
            known = self.weights[key] = self._fresh_weights(queues, ignore_guarantee)
        for q in queues:
            q.weight = known[q.snap.path]

    def _fresh_weights(self, queues: list[_Q], ignore_guarantee: bool) -> dict[str, dict[str, float]]:
        names = self.calc.names
        if ignore_guarantee:
            share = java_float_div(1, len(queues))
            return {q.snap.path: {n: share for n in names} for q in queues}
        active = total(q.guaranteed for q in queues)
        # A resource no needy queue's guarantee names is nobody's: YARN offers none of it; Sniper
        # (``cap_by_demand``) shares it evenly, so an ask using it is not starved of it by the weights.
        unnamed = java_float_div(1, len(queues)) if self.cap_by_demand else 0.0
        return {
            q.snap.path: {
                n: java_float_div(q.guaranteed.get(n, 0), active.get(n, 0)) if active.get(n, 0) != 0 else unnamed
                for n in names
            }
            for q in queues
        }

    def _offer(self, order: Order, q: _Q, avail: Resource) -> Resource:
        """``TempQueuePerPartition.offer``: what ``q`` accepts of ``avail``; its ideal grows by that much."""
        room_to_max = _sub_at_least_zero(q.snap.max, q.ideal)
        wanted = sub(add(q.used, q.pcr_eff), q.ideal)
        # YARN's ``Resources.min`` of the two, whole; read only here, so not copied.
        accepted = component_min(room_to_max, avail if order.compare(avail, wanted) <= 0 else wanted)
        if self.cap_by_demand:
            accepted = component_min(accepted, _at_least_zero(wanted))
        if q.is_leaf and not self.balance and not (self.cap_by_demand and not any_positive(q.guaranteed)):
            if self.cap_by_demand:
                # Resource by resource: up to ``max(used, guaranteed)`` on what the guarantee names; a
                # resource it does not name is capped by the demand only (else an ask using one, pods, is
                # offered none of it and the increment is ineffective). YARN's whole-vector DRF choice
                # against the parent's ideal lets a resource scarce there (pods) cut the guaranteed ones.
                ceiling = component_max(q.used, q.guaranteed)
                accepted = {
                    n: min(v, max(ceiling.get(n, 0) - q.ideal.get(n, 0), 0)) if q.guaranteed.get(n, 0) else v
                    for n, v in accepted.items()
                }
            else:
                cap = order.rmax(sub(order.rmax(q.used, q.guaranteed), q.ideal), {})
                accepted = order.rmin(accepted, cap)
        accepted = component_min(_at_least_zero(accepted), avail)
        q.ideal = add(q.ideal, accepted)
        return accepted

    # --- Sniper: ineffective preemption --------------------------------------------------------------------

    def _asks(self, q: _Q) -> list[tuple[Resource, Resource]]:
        """The smallest pending ask of every leaf below ``q`` with demand, each with the room inside ``q`` it
        may also use: what the other children on its path hold above their guarantees, resource by resource
        (their preemptable extras without the resources they hold less of than guaranteed: spare room is
        never negative; a parent at its max still serves a child by preemption inside its subtree)."""
        if q.snap.smallest_pending_ask is not None:
            return [(q.snap.smallest_pending_ask, {})]
        asks: list[tuple[Resource, Resource]] = []
        for child in q.children:
            if any_positive(child.pending):
                others = total(clamp_min_zero(c.preemptable) for c in q.children if c is not child)
                asks.extend((ask, add(room, others)) for ask, room in self._asks(child))
        return asks

    def _ineffective(self, queues: list[_Q], tot: Resource) -> _Q | None:
        """The queue with the largest increment over its usage that cannot start any of its pending asks."""
        calc = self.calc
        worst: _Q | None = None
        worst_increment: Resource = {}
        for q in queues:
            if q.excluded:
                continue
            increment = _sub_at_least_zero(q.ideal, q.used)
            if not self._at(tot).positive(increment):
                continue
            asks = self._asks(q)
            if not asks or any(calc.fits_in(ask, add(increment, room)) for ask, room in asks):
                continue
            if worst is None or self._at(tot).gt(increment, worst_increment):
                worst, worst_increment = q, increment
        return worst

    # --- preemption targets --------------------------------------------------------------------------------

    def _assign_preemption(self, queues: list[_Q], tot: Resource) -> None:
        calc, order = self.calc, self._at(tot)
        needed: Resource = {}
        for q in queues:
            if order.gt(q.used, q.ideal):
                needed = add(needed, sub(q.used, q.ideal))
        scaling = 1.0
        if self.allowance is not None and order.gt(needed, self.allowance):
            scaling = calc.divide(tot, self.allowance, needed)
        for q in queues:
            used = sub(q.used, q.killable)
            minimum = order.rmax(order.rmin(add(q.used, q.pending_eff), q.guaranteed), q.ideal)
            q.to_be_preempted = multiply_trunc(sub(used, minimum), scaling) if order.gt(used, minimum) else {}


def _priority_layers(queues: list[_Q]) -> list[list[_Q]]:
    """Siblings grouped by priority, highest first; each group keeps the snapshot order."""
    priorities = sorted({q.snap.priority for q in queues}, reverse=True)
    return [[q for q in queues if q.snap.priority == p] for p in priorities]


def _at_least_zero(a: Resource) -> Resource:
    """``max(a, 0)`` component-wise, same names."""
    return {k: v if v > 0 else 0 for k, v in a.items()}


def _sub_at_least_zero(a: Resource, b: Resource) -> Resource:
    """``max(a - b, 0)`` component-wise, with the names of ``a`` then those only ``b`` has, in one pass."""
    a_get, b_get = a.get, b.get
    out = {k: v - b_get(k, 0) if v > b_get(k, 0) else 0 for k, v in a.items()}
    for k, v in b.items():
        if a_get(k) is None:
            out[k] = 0 if v >= 0 else -v
    return out
