"""An independent model of the cluster built only from the feed and the decisions, and the invariant
checks of ARCHITECTURE section 6 over it.

It shares no code with the cache's state on purpose: it is the outside observer the simulator, the
chaos tests and ``sniper feed --report`` trust. Violations are recorded with the time and the reason;
checking never raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import defaultdict

from sniper.core import resources as res
from sniper.core.config import PartitionConfig, QueueConfig, parse_partition
from sniper.core.resources import Resource
from sniper.messages import decisions as d
from sniper.messages import feed as f


@dataclasses.dataclass(slots=True)
class ModelAllocation:
    id: str
    app: str
    ask: str
    queue: str
    node: str
    resource: Resource
    start: float
    am: bool
    preempted_at: float | None = None
    opportunistic: bool = False  # on its node only: in no queue's usage, not bound by max


@dataclasses.dataclass(slots=True)
class ModelReservation:
    id: str
    app: str
    ask: str
    queue: str
    node: str
    resource: Resource
    victims: set[str]
    created: float


@dataclasses.dataclass(slots=True)
class Violation:
    t: float
    invariant: int
    reason: str


class ClusterModel:
    """One partition as seen from outside."""

    def __init__(self, partition: str, config: PartitionConfig | None = None) -> None:
        self.partition = partition
        self.config: PartitionConfig | None = None
        self.queue_cfg: dict[str, QueueConfig] = {}
        self.nodes: dict[str, Resource] = {}
        self.removed_nodes: set[str] = set()
        self.apps: dict[str, str] = {}  # app -> queue
        self.asks: dict[tuple[str, str], tuple[Resource, int]] = {}  # -> (resource, count)
        self.ask_allocated: dict[tuple[str, str], int] = defaultdict(int)
        self.withdrawn: set[tuple[str, str]] = set()
        self.opportunistic_asks: set[tuple[str, str]] = set()
        self.allocations: dict[str, ModelAllocation] = {}
        self.seen_allocations: set[str] = set()
        self.reservations: dict[str, ModelReservation] = {}
        self.violations: list[Violation] = []
        self.decisions = 0
        self.last_seq = 0
        self.rejected_asks: set[tuple[str, str]] = set()
        self.seen_events: set[str] = set()
        if config is not None:
            self.configure(config)

    # ------------------------------------------------------------------ inputs

    def configure(self, config: PartitionConfig) -> None:
        self.config = config
        self.queue_cfg = {q.path: q for q in config.queues()}

    def on_event(self, event: f.Feed) -> None:
        if event.id:
            if event.id in self.seen_events:
                return  # a replayed event (at-least-once delivery) changes nothing, as for the cache
            self.seen_events.add(event.id)
        match event:
            case f.PartitionConfigEvent(config=raw):
                with contextlib.suppress(ValueError):  # the cache rejects it too
                    self.configure(parse_partition(raw, f"partition {self.partition}"))
            case f.NodeAdded(node=n, capacity=cap):
                self.nodes[n] = res.normalized(cap)
                self.removed_nodes.discard(n)
            case f.NodeUpdated(node=n, capacity=cap):
                if cap is not None and n in self.nodes:
                    self.nodes[n] = res.normalized(cap)
            case f.NodeRemoved(node=n):
                if n in self.nodes:
                    del self.nodes[n]
                    self.removed_nodes.add(n)
            case f.AppAdded(app=a, queue=q):
                self.apps.setdefault(a, q)
            case f.AppRemoved(app=a):
                self.apps.pop(a, None)
                self.withdrawn.update(k for k in self.asks if k[0] == a)
            case f.AskAdded(app=a, ask=k, resource=r, count=c):
                if (a, k) in self.withdrawn or (a, k) in self.rejected_asks:
                    # Asked again under a withdrawn or refused name: a new ask for the cache, its count
                    # starts over.
                    self.withdrawn.discard((a, k))
                    self.rejected_asks.discard((a, k))
                    self.asks.pop((a, k), None)
                    self.ask_allocated.pop((a, k), None)
                self.asks.setdefault((a, k), (res.normalized(r), c))
                if event.execution_type == "opportunistic":
                    self.opportunistic_asks.add((a, k))
                else:
                    self.opportunistic_asks.discard((a, k))
            case f.AskRemoved(app=a, ask=k):
                self.withdrawn.add((a, k))
            case _:
                pass

    def _violate(self, t: float, invariant: int, reason: str) -> None:
        self.violations.append(Violation(t, invariant, reason))

    def on_decision(self, dec: d.DecisionMsg) -> None:
        self.decisions += 1
        if dec.seq and dec.seq <= self.last_seq:
            return  # a duplicate delivery of the commit log
        self.last_seq = max(self.last_seq, dec.seq)
        match dec:
            case d.Allocated():
                self._allocated(dec)
            case d.Released(allocation=aid) | d.Kill(allocation=aid):
                self._gone(aid)
            case d.AllocationLost(allocation=aid):
                self._gone(aid)
            case d.Promoted():
                self._promoted(dec)
            case d.Preempt():
                alloc = self.allocations.get(dec.allocation)
                if alloc is None:
                    self._violate(dec.t, 5, f"preempt of unknown allocation {dec.allocation}")
                    return
                if dec.observe_only:
                    return
                self._check_preemption(dec, alloc)
                alloc.preempted_at = dec.t if alloc.preempted_at is None else alloc.preempted_at
                if dec.reservation:
                    r = self.reservations.get(dec.reservation)
                    if r is None:
                        r = ModelReservation(
                            dec.reservation,
                            dec.for_app,
                            dec.for_ask,
                            dec.for_queue,
                            dec.node,
                            res.normalized(dec.for_resource),
                            set(),
                            dec.t,
                        )
                        self.reservations[dec.reservation] = r
                    r.victims.add(dec.allocation)
                    if dec.node != alloc.node:
                        self._violate(
                            dec.t, 6, f"victim {alloc.id} is on {alloc.node}, not the reserved node {dec.node}"
                        )
            case d.PreemptCancelled(allocation=aid):
                alloc = self.allocations.get(aid)
                if alloc is None or alloc.preempted_at is None:
                    self._violate(dec.t, 5, f"preemption of {aid} cancelled, but it was not under notice")
                else:
                    alloc.preempted_at = None
            case d.ReservationEnded(reservation=rid):
                self.reservations.pop(rid, None)
            case d.Rejected(app=a, ask=k):
                if k:
                    self.rejected_asks.add((a, k))
            case _:
                pass

    def _check_preemption(self, dec: d.Preempt, victim: ModelAllocation) -> None:
        """Invariant 5 as far as an outside observer can check it: queue relations from the config,
        and (targeted policies) the victim's queue never taken below its guarantee, counting the room
        reservations already hold for it (committed to that queue)."""
        t = dec.t
        if victim.opportunistic:
            return  # outside every queue: any guaranteed ask may have it killed (YARN's NodeManager)
        chain = _lineage(victim.queue)
        if any(self.queue_cfg[q].preemption_policy == "disabled" for q in chain if q in self.queue_cfg):
            self._violate(t, 5, f"victim {victim.id} is in a preemption-disabled queue {victim.queue}")
        if not dec.for_queue:
            return  # the proportional baseline targets nobody
        beneficiary = dec.for_queue
        if dec.policy == "intra_queue":
            if beneficiary != victim.queue:
                self._violate(t, 5, f"intra-queue victim {victim.id} of {victim.queue} for {beneficiary}")
        else:
            if beneficiary == victim.queue:
                self._violate(t, 5, f"inter-queue victim {victim.id} preempted for its own queue")
            for q in chain:
                cfg = self.queue_cfg.get(q)
                if cfg is not None and cfg.preemption_policy == "fence" and not _within(beneficiary, q):
                    self._violate(t, 5, f"victim {victim.id} preempted across the fence of {q} for {beneficiary}")
            parted = _parting(victim.queue, beneficiary)
            if parted is not None:
                v_side, b_side = (self.queue_cfg.get(x) for x in parted)
                if v_side is not None and b_side is not None and v_side.priority_offset > b_side.priority_offset:
                    self._violate(t, 5, f"{victim.queue} preempted for lower-priority {beneficiary}")
        cfg = self.queue_cfg.get(victim.queue)
        if cfg is None:
            return
        held = res.total(r.resource for r in self.reservations.values() if r.queue == victim.queue)
        before: Resource = dict(held)
        after: Resource = dict(held)
        for a in self.allocations.values():
            if a.queue != victim.queue or (a.preempted_at is not None and a.id != victim.id):
                continue
            res.add_into(before, a.resource)
            if a.id != victim.id:
                res.add_into(after, a.resource)
        for k, g in cfg.guaranteed.items():
            if after.get(k, 0) < min(g, before.get(k, 0)):
                self._violate(t, 5, f"victim {victim.id} takes {victim.queue} below its guarantee {k}={g}")

    def _allocated(self, dec: d.Allocated) -> None:
        t = dec.t
        if dec.allocation in self.seen_allocations:
            self._violate(t, 3, f"allocation {dec.allocation} committed twice")
            return
        self.seen_allocations.add(dec.allocation)
        key = (dec.app, dec.ask)
        ask = self.asks.get(key)
        if ask is None:
            self._violate(t, 3, f"allocation {dec.allocation} for unknown ask {dec.app}/{dec.ask}")
        else:
            self.ask_allocated[key] += 1
            if self.ask_allocated[key] > ask[1]:
                self._violate(
                    t, 3, f"ask {dec.app}/{dec.ask} allocated {self.ask_allocated[key]} times, count {ask[1]}"
                )
        if dec.node not in self.nodes:
            self._violate(t, 4, f"allocation {dec.allocation} on missing node {dec.node}")
        queue = self.apps.get(dec.app, dec.queue)
        resource = res.normalized(dec.resource)
        # Invariant 2: a new allocation never takes a queue over its max (opportunistic ones are outside it).
        if not dec.reservation and not dec.opportunistic:
            self._check_max(t, dec.allocation, queue, resource)
        if dec.reservation:
            r = self.reservations.pop(dec.reservation, None)
            if r is None or (r.app, r.ask) != (dec.app, dec.ask) or r.node != dec.node:
                self._violate(t, 6, f"allocation {dec.allocation} claims reservation {dec.reservation} it does not own")
        else:
            # Invariant 6: nobody else takes room reserved for a beneficiary on this node.
            held = res.total(r.resource for r in self.reservations.values() if r.node == dec.node and r.resource)
            if held:
                used = res.total(a.resource for a in self.allocations.values() if a.node == dec.node)
                cap = self.nodes.get(dec.node, {})
                if not res.fits(res.add(res.add(used, held), resource), cap):
                    self._violate(
                        t, 6, f"allocation {dec.allocation} on {dec.node} takes room reserved for a beneficiary"
                    )
        self.allocations[dec.allocation] = ModelAllocation(
            dec.allocation, dec.app, dec.ask, queue, dec.node, resource, t, dec.am, opportunistic=dec.opportunistic
        )

    def _check_max(self, t: float, aid: str, queue: str, resource: Resource) -> None:
        usage = self.queue_usage()
        for path in _lineage(queue):
            cfg = self.queue_cfg.get(path)
            if cfg is None or cfg.max is None:
                continue
            after = res.add(usage.get(path, {}), resource)
            for k, m in cfg.max.items():
                if after.get(k, 0) > m:
                    self._violate(t, 2, f"allocation {aid} takes {path} to {k}={after[k]} over max {m}")

    def _promoted(self, dec: d.Promoted) -> None:
        alloc = self.allocations.get(dec.allocation)
        if alloc is None or not alloc.opportunistic:
            self._violate(dec.t, 3, f"promotion of {dec.allocation}, not a running opportunistic allocation")
            return
        self._check_max(dec.t, alloc.id, alloc.queue, alloc.resource)
        alloc.opportunistic = False

    def _gone(self, aid: str) -> None:
        self.allocations.pop(aid, None)

    # ------------------------------------------------------------------ checks at quiescence

    def check(self, t: float) -> None:
        """Invariants that hold whenever the scheduler has handled everything it was given."""
        per_node: dict[str, Resource] = defaultdict(dict)
        for a in self.allocations.values():
            res.add_into(per_node[a.node], a.resource)
            if a.node in self.removed_nodes:
                self._violate(t, 4, f"allocation {a.id} still on removed node {a.node}")
        for node, used in per_node.items():
            cap = self.nodes.get(node)
            if cap is not None and not res.fits(used, cap):
                self._violate(t, 1, f"node {node} over capacity: {res.fmt(used)} > {res.fmt(cap)}")

    # ------------------------------------------------------------------ views for metrics

    def queue_usage(self) -> dict[str, Resource]:
        """Committed usage per queue path, parents included."""
        out: dict[str, Resource] = defaultdict(dict)
        for a in self.allocations.values():
            if a.opportunistic:
                continue
            for path in _lineage(a.queue):
                res.add_into(out[path], a.resource)
        return out

    def opportunistic_usage(self) -> Resource:
        """What running opportunistic containers hold (on nodes only, in no queue's usage)."""
        return res.total(a.resource for a in self.allocations.values() if a.opportunistic)

    def queue_pending(self) -> dict[str, Resource]:
        """Outstanding demand per queue path, parents included (withdrawn and rejected asks excluded)."""
        out: dict[str, Resource] = defaultdict(dict)
        for key, (resource, count) in self.asks.items():
            if key in self.withdrawn or key in self.rejected_asks or key in self.opportunistic_asks:
                continue
            left = count - self.ask_allocated.get(key, 0)  # reserved containers still wait: demand
            if left <= 0:
                continue
            queue = self.apps.get(key[0])
            if queue is None:
                continue
            for path in _lineage(queue):
                res.add_into(out[path], resource, left)
        return out

    def pending_containers(self) -> int:
        total = 0
        for key, (_, count) in self.asks.items():
            if key in self.withdrawn or key in self.rejected_asks or key[0] not in self.apps:
                continue
            total += max(0, count - self.ask_allocated.get(key, 0))
        return total

    def capacity(self) -> Resource:
        return res.total(self.nodes.values())


def _within(path: str, ancestor: str) -> bool:
    return path == ancestor or path.startswith(ancestor + ".")


def _parting(a: str, b: str) -> tuple[str, str] | None:
    """The children of the lowest common ancestor on the way to ``a`` and ``b`` (None if nested)."""
    pa, pb = a.split("."), b.split(".")
    for i, (x, y) in enumerate(zip(pa, pb, strict=False)):
        if x != y:
            return ".".join(pa[: i + 1]), ".".join(pb[: i + 1])
    return None


def _lineage(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts) - 1, -1, -1)]
