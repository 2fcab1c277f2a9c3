"""An independent model of the cluster built only from the feed and the decisions, and the invariant
checks over it (architecture: Invariants).

It shares no code with the cache's state on purpose: it is the outside observer the simulator, the
chaos tests and ``sniper feed --report`` trust. Violations are recorded with the time and the reason;
checking never raises. ``version`` grows with every input that may change the model, so views derived
from it (usage, pending demand, notices) are computed once per change and readers can skip unchanged
states; asks with nothing left to place leave the ``open`` set, so those views cost what is running
and waiting, not the whole history. Opportunistic allocations and asks stay out of every queue's usage,
demand, ``max`` and guarantee check (they are totalled apart). Node reservations (invariant 6): at most
one per node, and while a node is reserved nothing but the reserving ask is placed on it (a preemption
reservation that was there first excepted). Preemption requests (invariant 9): no container of a
contract app is killed before a request's deadline, and a request closes given back only once each
beneficiary it named was placed or still holds its reservation. Apps' own limits (invariant 11): no
app ever has more guaranteed containers under notice than its ``max_disruption``, and no ask with
``preemption_policy: never`` is ever named a beneficiary.
Over-commit (invariant 12) is judged by :mod:`sniper.simulator.overcommit_check`, quota preemption
(invariant 15) by :mod:`sniper.simulator.quota_check`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import defaultdict

from sniper.core import resources as res
from sniper.core.config import PartitionConfig, QueueConfig, parse_partition
from sniper.core.resources import Resource
from sniper.core.units import human, human_resource, named
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.constraint_check import ConstraintChecker
from sniper.simulator.model_allocation import ModelAllocation
from sniper.simulator.overcommit_check import OvercommitChecker
from sniper.simulator.quota_check import QuotaChecker
from sniper.simulator.slo_check import SloTracker
from sniper.simulator.topology_check import TopologyChecker


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


@dataclasses.dataclass(frozen=True, slots=True)
class Derived:
    """What the metrics and the driver read from the model, computed once per version."""

    usage: dict[str, Resource]  # committed, per queue path, parents included
    pending: dict[str, Resource]  # outstanding demand, per queue path, parents included
    demand: dict[str, Resource]  # the part of ``pending`` the user, group and app limits let run
    pending_containers: int
    notices: int  # allocations under a preemption notice
    capacity: Resource
    opportunistic: Resource  # held by running opportunistic containers (in no queue's usage)
    shapes: dict[str, list[Resource]]  # per leaf queue, its pending guaranteed containers' distinct sizes
    overcommitted: Resource  # held by the containers placed on over-committed room (part of ``opportunistic``)


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
        self.ask_usage: dict[tuple[str, str], Resource] = {}  # what each container really uses, when declared
        self.ask_priority: dict[tuple[str, str], int] = {}
        self.required_nodes: dict[tuple[str, str], str] = {}  # asks that require a node -> that node
        self.app_user: dict[str, str] = {}
        self.app_submitted: dict[str, float] = {}  # each app's first app_added time
        self.app_groups: dict[str, tuple[str, ...]] = {}
        self.ask_allocated: dict[tuple[str, str], int] = defaultdict(int)
        self.withdrawn: set[tuple[str, str]] = set()
        self.opportunistic_asks: set[tuple[str, str]] = set()
        self.allocations: dict[str, ModelAllocation] = {}
        self.on_node: dict[str, set[str]] = defaultdict(set)  # node -> the allocations on it
        # Nodes whose allocations or capacity changed since the last check, and those that failed it:
        # the only ones whose room a check must look at again (every other one passed and is unchanged).
        self.touched: set[str] = set()
        self.failing: set[str] = set()
        self.overcommit = OvercommitChecker(self)
        self.placement = ConstraintChecker()  # invariant 13: placement constraints
        self.topology = TopologyChecker(self.placement.labels)  # invariant 16: required topology domains
        self.slo = SloTracker(self)  # SLO reservations: their plans (invariant 14) and deadlines
        self.quota = QuotaChecker(self)  # invariant 15: quota preemption
        self.seen_allocations: set[str] = set()
        self.reservations: dict[str, ModelReservation] = {}
        # node -> (node reservation id, app, ask, preemption reservations already on the node)
        self.node_reservations: dict[str, tuple[str, str, str, frozenset[str]]] = {}
        self.violations: list[Violation] = []
        self.decisions = 0
        self.last_seq = 0
        self.rejected_asks: set[tuple[str, str]] = set()
        self.seen_events: set[str] = set()
        self.contract_apps: set[str] = set()  # apps whose application master honours preemption requests
        self.budgets: dict[str, int] = {}  # app -> max_disruption
        self.opted_out: set[str] = set()  # apps with allow_preemption false
        self.app_notices: dict[str, int] = defaultdict(int)  # app -> guaranteed containers under notice
        self.never_asks: set[tuple[str, str]] = set()  # asks with preemption_policy never
        self.requests: dict[str, tuple[str, float]] = {}  # open preemption request -> (app, deadline)
        # Invariant 9's second half: an open request's reservations -> (request, beneficiary app, ask);
        # those that ended with their beneficiary not placed since; those whose node changed meanwhile.
        self.requested: dict[str, tuple[str, str, str]] = {}
        self.unserved: set[str] = set()
        self.node_changed: set[str] = set()
        self.gangs: dict[tuple[str, str], int] = {}  # ask -> gang_min, for gangs of two or more
        self.gang_held: dict[tuple[str, str], int] = {}  # ask -> containers held at the last check
        self.open: dict[tuple[str, str], None] = {}  # asks that may still have containers to place
        self.usage: dict[str, Resource] = defaultdict(dict)  # committed, per queue path, parents included
        self.opportunistic: Resource = {}  # held by running opportunistic containers, in no queue
        self.overcommitted: Resource = {}  # held by those placed on over-committed room
        self.notices = 0  # allocations under a preemption notice
        self._capacity: Resource | None = None  # the nodes' total, until a node changes
        self.version = 0
        self._derived: Derived | None = None
        self._derived_version = -1
        if config is not None:
            self.configure(config)

    # ------------------------------------------------------------------ inputs

    def configure(self, config: PartitionConfig, t: float = 0.0) -> None:
        self.config = config
        self.queue_cfg = {q.path: q for q in config.queues()}
        self.quota.configure(config, t)

    def on_event(self, event: f.Feed) -> None:
        self._on_event(event)
        self.version += 1

    def _on_event(self, event: f.Feed) -> None:
        if event.id:
            if event.id in self.seen_events:
                return  # a replayed event (at-least-once delivery) changes nothing, as for the cache
            self.seen_events.add(event.id)
        self.slo.on_event(event)
        match event:
            case f.PartitionConfigEvent(config=raw):
                with contextlib.suppress(ValueError):  # the cache rejects it too
                    self.configure(parse_partition(raw, f"partition {self.partition}"), event.t)
            case f.NodeAdded(node=n, capacity=cap):
                self._capacity = None
                self.touched.add(n)
                self.nodes[n] = res.normalized(cap)
                self.removed_nodes.discard(n)
                self.placement.node_added(n, event.labels)
            case f.NodeUpdated(node=n, capacity=cap):
                self._requested_node_changed(n)
                if cap is not None and n in self.nodes:
                    self._capacity = None
                    self.nodes[n] = res.normalized(cap)
                    self.touched.add(n)
            case f.NodeRemoved(node=n):
                self._requested_node_changed(n)
                if n in self.nodes:
                    self._capacity = None
                    del self.nodes[n]
                    self.removed_nodes.add(n)
                    self.touched.add(n)
                    self.placement.node_removed(n)
                    self.overcommit.node_gone(n)
            case f.NodeUtilization():
                self.overcommit.report(event)
            case f.AppAdded(app=a, queue=q, user=u, groups=g):
                if event.preemption_contract and a not in self.apps:
                    self.contract_apps.add(a)
                if event.max_disruption is not None and a not in self.apps:
                    self.budgets[a] = event.max_disruption
                if not event.allow_preemption and a not in self.apps:
                    self.opted_out.add(a)
                self.apps.setdefault(a, q)
                self.app_user.setdefault(a, u)
                self.app_submitted.setdefault(a, event.t)
                self.app_groups.setdefault(a, tuple(g))
            case f.AppRemoved(app=a):
                self.apps.pop(a, None)
                self.budgets.pop(a, None)
                self.opted_out.discard(a)
                self.withdrawn.update(k for k in self.asks if k[0] == a)
                for k in [k for k in self.open if k[0] == a]:
                    del self.open[k]
            case f.AskAdded(app=a, ask=k, resource=r, count=c, priority=prio, gang_min=g):
                if (a, k) in self.withdrawn or (a, k) in self.rejected_asks:
                    # Asked again under a withdrawn or refused name: a new ask for the cache, its count
                    # starts over.
                    self.withdrawn.discard((a, k))
                    self.rejected_asks.discard((a, k))
                    self.asks.pop((a, k), None)
                    self.ask_usage.pop((a, k), None)
                    self.ask_allocated.pop((a, k), None)
                    self.gangs.pop((a, k), None)
                    self.gang_held.pop((a, k), None)
                if (a, k) not in self.asks and g > 1:
                    self.gangs[(a, k)] = g
                if (a, k) not in self.asks:
                    self.placement.ask_added(event)
                    self.topology.ask_added(event)
                if (a, k) not in self.asks and event.usage is not None:
                    self.ask_usage[(a, k)] = res.normalized(event.usage)
                self.asks.setdefault((a, k), (res.normalized(r), c))
                self.ask_priority.setdefault((a, k), prio)
                if event.node is not None:
                    self.required_nodes.setdefault((a, k), event.node)
                if event.execution_type == "opportunistic":
                    self.opportunistic_asks.add((a, k))
                else:
                    self.opportunistic_asks.discard((a, k))
                if event.preemption_policy == "never":
                    self.never_asks.add((a, k))
                else:
                    self.never_asks.discard((a, k))
                self.open[(a, k)] = None
            case f.AskRemoved(app=a, ask=k):
                self.withdrawn.add((a, k))
                self.open.pop((a, k), None)
            case f.PartitionRemoved():
                # Every app, ask, node and the configuration go; the allocations leave with the cache's
                # ``released`` decisions that follow.
                self.config, self.queue_cfg, self._capacity = None, {}, None
                self.removed_nodes.update(self.nodes)
                self.touched.update(self.nodes)
                for n in self.nodes:
                    self.placement.node_removed(n)
                self.nodes.clear()
                self.apps.clear()
                self.contract_apps.clear()
                self.budgets.clear()
                self.withdrawn.update(self.asks)
                self.open.clear()
                self.overcommit.clear()
                self.seen_events = {event.id} if event.id else set()  # as the cache: earlier ids name nothing now
            case _:
                pass

    def _violate(self, t: float, invariant: int, reason: str) -> None:
        self.violations.append(Violation(t, invariant, reason))

    def on_decision(self, dec: d.DecisionMsg) -> None:
        self._on_decision(dec)
        self.version += 1

    def _on_decision(self, dec: d.DecisionMsg) -> None:
        self.decisions += 1
        if dec.seq and dec.seq <= self.last_seq:
            return  # a duplicate delivery of the commit log
        self.last_seq = max(self.last_seq, dec.seq)
        self.slo.on_decision(dec)
        match dec:
            case d.Allocated():
                self._allocated(dec)
            case d.Kill(allocation=aid):
                self._check_contract_kill(dec)
                killed = self.allocations.get(aid)
                if killed is not None:
                    self.overcommit.killed(dec, killed)
                self._gone(aid)
            case d.Released(allocation=aid):
                self._gone(aid)
            case d.AllocationLost(allocation=aid):
                self._gone(aid)
            case d.Promoted():
                self._promoted(dec)
            case d.Preempt():
                self._notice(dec)
                if not dec.observe_only:
                    for problem in self.topology.victim(dec.t, dec.allocation, dec.for_app, dec.for_ask, dec.node):
                        self._violate(dec.t, 16, f"topology preemption outside its domain: {problem}")
            case d.PreemptRequest():
                self._preempt_request(dec)
            case d.PreemptRequestEnded(request=rid):
                self._request_ended(dec)
                self.requests.pop(rid, None)
            case d.PreemptCancelled(allocation=aid):
                alloc = self.allocations.get(aid)
                if alloc is None or alloc.preempted_at is None:
                    self._violate(dec.t, 5, f"preemption of {aid} cancelled, but it was not under notice")
                else:
                    self._notice_ends(alloc)
            case d.ReservationEnded(reservation=rid):
                self.reservations.pop(rid, None)
                if rid in self.requested:
                    self.unserved.add(rid)
            case d.NodeReserved(reservation=rid, node=node):
                if node in self.node_reservations:
                    other = self.node_reservations[node][0]
                    self._violate(dec.t, 6, f"node reservation {rid} on {node}, already reserved by {other}")
                before = frozenset(r.id for r in self.reservations.values() if r.node == node)
                self.node_reservations[node] = (rid, dec.app, dec.ask, before)
            case d.NodeUnreserved(reservation=rid, node=node):
                held = self.node_reservations.get(node)
                if held is None or held[0] != rid:
                    self._violate(dec.t, 6, f"node reservation {rid} on {node} ended, but it was not held")
                else:
                    del self.node_reservations[node]
            case d.Rejected(app=a, ask=k):
                if k:
                    self.rejected_asks.add((a, k))
                    self.open.pop((a, k), None)
            case _:
                pass

    def _notice(self, dec: d.Preempt) -> None:
        alloc = self.allocations.get(dec.allocation)
        if alloc is None:
            self._violate(dec.t, 5, f"preempt of unknown allocation {dec.allocation}")
            return
        if dec.observe_only:
            return
        # The reservation is recorded before the victim is judged: the room it holds is committed
        # to the beneficiary's queue (for intra-queue preemption, the victim's own).
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
                self._violate(dec.t, 6, f"victim {alloc.id} is on {alloc.node}, not the reserved node {dec.node}")
        self._check_preemption(dec, alloc)
        self.quota.notice(dec, alloc)
        if dec.for_ask and (dec.for_app, dec.for_ask) in self.never_asks:
            self._violate(dec.t, 11, f"{alloc.id} preempted for {dec.for_app}/{dec.for_ask}, which never preempts")
        if alloc.preempted_at is None:
            alloc.preempted_at = dec.t
            self.notices += 1
            if not alloc.opportunistic:
                self.app_notices[alloc.app] += 1
                budget = self.budgets.get(alloc.app)
                if budget is not None and self.app_notices[alloc.app] > budget:
                    held = self.app_notices[alloc.app]
                    self._violate(
                        dec.t, 11, f"app {alloc.app} has {held} containers under notice, over its budget {budget}"
                    )

    def _notice_ends(self, alloc: ModelAllocation) -> None:
        alloc.preempted_at = None
        self.notices -= 1
        if not alloc.opportunistic:
            self.app_notices[alloc.app] -= 1

    def _preempt_request(self, dec: d.PreemptRequest) -> None:
        """A preemption request's containers are judged as the notices they replace (invariant 5) and
        are under notice until it ends; the reservations it names hold their room (invariant 6)."""
        if dec.observe_only:
            return
        self.requests[dec.request] = (dec.app, dec.deadline)
        for c in dec.containers:
            if c.reservation and c.reservation not in self.requested:
                self.requested[c.reservation] = (dec.request, c.for_app, c.for_ask)
        for c in dec.containers:
            as_notice = d.Preempt(
                t=dec.t,
                allocation=c.allocation,
                app=dec.app,
                queue=dec.queue,
                node=c.node,
                resource=c.resource,
                for_ask=c.for_ask,
                for_app=c.for_app,
                for_queue=c.for_queue,
                deadline=dec.deadline,
                reservation=c.reservation,
                policy=dec.policy,
                for_resource=c.for_resource,
            )
            self._notice(as_notice)

    def _requested_node_changed(self, node: str) -> None:
        """A node changed or left: a requested reservation on it may end for that, not for its request."""
        for rid in self.requested:
            r = self.reservations.get(rid)
            if r is not None and r.node == node:
                self.node_changed.add(rid)

    def _beneficiary_placed(self, app: str, ask: str) -> None:
        """One container of ``app``/``ask`` was placed: one of its requested reservations that ended is
        served (on free room, or on room the request's app gave back elsewhere)."""
        for rid in sorted(self.unserved):
            if self.requested[rid][1:] == (app, ask):
                self.unserved.discard(rid)
                return

    def _request_ended(self, dec: d.PreemptRequestEnded) -> None:
        """Invariant 9: a request closes given back only once every beneficiary it named was served, or
        still holds its room: none of its reservations ended with its beneficiary left waiting (unless
        the beneficiary's ask was withdrawn or its node changed)."""
        mine = [rid for rid, (request, _, _) in self.requested.items() if request == dec.request]
        if dec.outcome == "given_back":
            for rid in mine:
                _, app, ask = self.requested[rid]
                if rid in self.unserved and rid not in self.node_changed and (app, ask) not in self.withdrawn:
                    self._violate(
                        dec.t,
                        9,
                        f"request {dec.request} closed given back, but {app}/{ask} of its reservation {rid} waits",
                    )
        for rid in mine:
            del self.requested[rid]
            self.unserved.discard(rid)
            self.node_changed.discard(rid)

    def _check_contract_kill(self, dec: d.Kill) -> None:
        """Invariant 9: a container of an app with a preemption contract is killed (opportunistic ones
        aside) only once a request of that app has reached its deadline."""
        alloc = self.allocations.get(dec.allocation)
        if alloc is None or alloc.opportunistic or alloc.app not in self.contract_apps:
            return
        due = [deadline for app, deadline in self.requests.values() if app == alloc.app]
        if not any(deadline <= dec.t + 1e-9 for deadline in due):
            self._violate(dec.t, 9, f"{alloc.id} of contract app {alloc.app} killed before its request's deadline")

    def _check_preemption(self, dec: d.Preempt, victim: ModelAllocation) -> None:
        """Invariant 5 as far as an outside observer can check it: queue relations from the config;
        inside one queue (5b) a lower-priority victim for a higher-priority ask; across queues (5a) the
        victim's queue over its ideal on some resource when chosen (YARN's positive excess), or the task
        spares an opted-out app (:meth:`_spares_opted_out`), and, without it, at or above its guarantee by
        dominant share against the cluster (the DRF comparison), counting the room reservations already hold
        for it (committed to that queue). No victim has run less than its queue's ``preemption.min.runtime``
        (the required-node rule aside)."""
        t = dec.t
        if victim.opportunistic:
            return  # outside every queue: any guaranteed ask may have it killed (YARN's NodeManager)
        chain = _lineage(victim.queue)
        if any(self.queue_cfg[q].preemption_policy == "disabled" for q in chain if q in self.queue_cfg):
            self._violate(t, 5, f"victim {victim.id} is in a preemption-disabled queue {victim.queue}")
        if (victim.app, victim.ask) in self.required_nodes:
            self._violate(t, 5, f"victim {victim.id} was placed for a required-node ask")
        cfg = self.queue_cfg.get(victim.queue)
        minimum = 0.0 if cfg is None else cfg.preemption_min_runtime
        required = bool(dec.for_queue) and dec.policy != "intra_queue" and self._required_node_preemption(dec)
        if minimum and t - victim.start < minimum and not required:
            ran = f"{t - victim.start:g} s"
            self._violate(t, 5, f"victim {victim.id} ran {ran}, less than {victim.queue}'s minimum {minimum:g} s")
        if not dec.for_queue:
            return  # the proportional baseline targets nobody
        beneficiary = dec.for_queue
        if dec.policy != "intra_queue" and self._required_node_preemption(dec):
            mine = self.ask_priority.get((victim.app, victim.ask), 0)
            theirs = self.ask_priority.get((dec.for_app, dec.for_ask), 0)
            if mine > theirs:
                self._violate(t, 5, f"victim {victim.id} (priority {mine}) for a required-node ask, priority {theirs}")
            return  # the required-node rule: any queue, any standing
        if dec.policy == "intra_queue":
            if beneficiary != victim.queue:
                self._violate(t, 5, f"intra-queue victim {victim.id} of {victim.queue} for {beneficiary}")
            mine = self.ask_priority.get((victim.app, victim.ask), 0)
            theirs = self.ask_priority.get((dec.for_app, dec.for_ask), 0)
            if mine >= theirs and not self._user_limit_swap(victim, dec):
                self._violate(t, 5, f"intra-queue victim {victim.id} (priority {mine}) for an ask of priority {theirs}")
            return  # 5b: a swap inside one queue leaves its usage as it was
        if beneficiary == victim.queue:
            self._violate(t, 5, f"inter-queue victim {victim.id} preempted for its own queue")
        for q in _lineage(beneficiary):
            cfg = self.queue_cfg.get(q)
            if cfg is not None and cfg.preemption_policy == "fence" and not _within(victim.queue, q):
                self._violate(t, 5, f"{beneficiary}, fenced in {q}, preempted {victim.id} outside the fence")
        parted = _parting(victim.queue, beneficiary)
        if parted is not None:
            v_side, b_side = (self.queue_cfg.get(x) for x in parted)
            if v_side is not None and b_side is not None and v_side.priority_offset > b_side.priority_offset:
                self._violate(t, 5, f"{victim.queue} preempted for lower-priority {beneficiary}")
        cfg = self.queue_cfg.get(victim.queue)
        guaranteed = cfg.guaranteed if cfg is not None else self.slo.guarantee(victim.queue, t)
        if guaranteed is None:
            return
        held = res.total(r.resource for r in self.reservations.values() if r.queue == victim.queue)
        before: Resource = dict(held)
        for a in self.allocations.values():
            if a.queue == victim.queue and not a.opportunistic and (a.preempted_at is None or a.id == victim.id):
                res.add_into(before, a.resource)
        after = res.sub(before, victim.resource)
        capacity = self.capacity()
        if _dominant_level(after, capacity) < _dominant_level(guaranteed, capacity):
            self._violate(t, 5, f"victim {victim.id} takes {victim.queue} below its guarantee")
        ideal = dec.victim_queue_ideal
        # The victims of one placement are chosen together: the queue is judged as it was before the set.
        r = self.reservations.get(dec.reservation) if dec.reservation else None
        chosen = dict(before)
        for vid in r.victims if r is not None else ():
            other = self.allocations.get(vid)
            if (
                other is not None
                and other.queue == victim.queue
                and other.id != victim.id
                and other.preempted_at is not None
            ):
                res.add_into(chosen, other.resource)
        over = any(chosen.get(k, 0) > ideal.get(k, 0) for k, c in capacity.items() if c > 0)
        if ideal and not over and not self._spares_opted_out(victim, dec, capacity):
            self._violate(t, 5, f"victim {victim.id} chosen while {victim.queue} was over its ideal nowhere")

    def _spares_opted_out(self, victim: ModelAllocation, dec: d.Preempt, capacity: Resource) -> bool:
        """5a's soft opt-out clause: a task (no application master, no container of an app that opted out)
        may be taken from a queue over its ideal nowhere, down to its guarantee, while the beneficiary's
        queue is below its guarantee (before the room this notice is for) and an app that opted out,
        outside it, runs a container not under notice (the one spared)."""
        beneficiary = dec.for_queue
        if victim.am or victim.app in self.opted_out:
            return False
        cfg = self.queue_cfg.get(beneficiary)
        if cfg is None or cfg.guaranteed is None:
            return False
        held = res.total(
            r.resource for rid, r in self.reservations.items() if r.queue == beneficiary and rid != dec.reservation
        )
        for a in self.allocations.values():
            if a.queue == beneficiary and not a.opportunistic and a.preempted_at is None:
                res.add_into(held, a.resource)
        if _dominant_level(held, capacity) >= _dominant_level(cfg.guaranteed, capacity):
            return False
        return any(
            a.app in self.opted_out and a.queue != beneficiary and not a.opportunistic and a.preempted_at is None
            for a in self.allocations.values()
        )

    def _required_node_preemption(self, dec: d.Preempt) -> bool:
        """Whether the partition lets the notice's beneficiary preempt on its node by the required-node rule
        (``preemption.required_node``): the ask requires the victim's node."""
        on = self.config is not None and self.config.preemption.required_node
        return on and self.required_nodes.get((dec.for_app, dec.for_ask)) == dec.node

    def _user_limit_swap(self, victim: ModelAllocation, dec: d.Preempt) -> bool:
        """5b's user clause as an outside observer sees it: the queue or an ancestor has user or group
        ``limits`` and the victim's application belongs to another user than the beneficiary's."""
        limited = any(self.queue_cfg[q].limits for q in _lineage(victim.queue) if q in self.queue_cfg)
        return limited and self.app_user.get(victim.app, "") != self.app_user.get(dec.for_app, "")

    def _allocated(self, dec: d.Allocated) -> None:
        t = dec.t
        if dec.allocation in self.seen_allocations:
            self._violate(t, 3, f"allocation {dec.allocation} committed twice")
            return
        self.seen_allocations.add(dec.allocation)
        key = (dec.app, dec.ask)
        if self.unserved and not dec.reservation:
            self._beneficiary_placed(dec.app, dec.ask)
        ask = self.asks.get(key)
        if ask is None:
            self._violate(t, 3, f"allocation {dec.allocation} for unknown ask {dec.app}/{dec.ask}")
        else:
            self.ask_allocated[key] += 1
            if self.ask_allocated[key] >= ask[1]:
                self.open.pop(key, None)
            if self.ask_allocated[key] > ask[1]:
                self._violate(
                    t, 3, f"ask {dec.app}/{dec.ask} allocated {self.ask_allocated[key]} times, count {ask[1]}"
                )
        if dec.node not in self.nodes:
            self._violate(t, 4, f"allocation {dec.allocation} on missing node {dec.node}")
        queue = self.apps.get(dec.app, dec.queue)
        if dec.queue.startswith(queue + "."):
            queue = dec.queue  # a reservable queue's app runs in one of its dynamic leaves (SLO reservations)
        resource = res.normalized(dec.resource)
        # Invariant 2: a new allocation never takes a queue over its max (opportunistic ones are outside it).
        if not dec.reservation and not dec.opportunistic:
            self._check_max(t, dec.allocation, queue, resource)
        nr = self.node_reservations.get(dec.node)
        if nr is not None and (nr[1], nr[2]) != key and dec.reservation not in nr[3]:
            self._violate(t, 6, f"allocation {dec.allocation} on {dec.node}, reserved for {nr[1]}/{nr[2]} ({nr[0]})")
        if dec.reservation:
            r = self.reservations.pop(dec.reservation, None)
            if r is None or (r.app, r.ask) != (dec.app, dec.ask) or r.node != dec.node:
                self._violate(t, 6, f"allocation {dec.allocation} claims reservation {dec.reservation} it does not own")
        else:
            # Invariant 6: nobody else takes room reserved for a beneficiary on this node: once the
            # reservations' victims have left, what stays, the reserved room and the newcomer fit.
            here = [r for r in self.reservations.values() if r.node == dec.node and r.resource]
            held = res.total(r.resource for r in here)
            if held:
                leaving = {v for r in here for v in r.victims}
                used = res.total(
                    a.resource for a in self.allocations.values() if a.node == dec.node and a.id not in leaving
                )
                cap = self.nodes.get(dec.node, {})
                if not res.fits(res.add(res.add(used, held), resource), cap):
                    self._violate(
                        t, 6, f"allocation {dec.allocation} on {dec.node} takes room reserved for a beneficiary"
                    )
        for problem in self.placement.allocated(dec.allocation, dec.app, dec.ask, dec.node):
            self._violate(t, 13, f"placement constraint broken: {problem}")
        for problem in self.topology.allocated(dec.allocation, dec.app, dec.ask, dec.node):
            self._violate(t, 16, f"required topology broken: {problem}")
        overcommitted = self.overcommit.allocated(dec, resource)
        self.allocations[dec.allocation] = ModelAllocation(
            dec.allocation,
            dec.app,
            dec.ask,
            queue,
            dec.node,
            resource,
            t,
            dec.am,
            opportunistic=dec.opportunistic,
            usage=self.ask_usage.get(key, resource),
            overcommit=overcommitted,
        )
        self.on_node[dec.node].add(dec.allocation)
        self.touched.add(dec.node)
        if overcommitted:
            res.add_into(self.overcommitted, resource)
        if dec.opportunistic:
            res.add_into(self.opportunistic, resource)
        else:
            for path in _lineage(queue):
                res.add_into(self.usage[path], resource)

    def _check_max(self, t: float, aid: str, queue: str, resource: Resource) -> None:
        usage = self.usage
        for path in _lineage(queue):
            cfg = self.queue_cfg.get(path)
            if cfg is None or cfg.max is None:
                continue
            after = res.add(usage.get(path, {}), resource)
            for k, m in cfg.max.items():
                if after.get(k, 0) > m:
                    self._violate(t, 2, f"allocation {aid} takes {path} to {named(k, after[k])} over max {human(k, m)}")

    def _promoted(self, dec: d.Promoted) -> None:
        alloc = self.allocations.get(dec.allocation)
        if alloc is None or not alloc.opportunistic:
            self._violate(dec.t, 3, f"promotion of {dec.allocation}, not a running opportunistic allocation")
            return
        if alloc.overcommit:
            self._violate(dec.t, 11, f"promotion of {dec.allocation}, which runs on over-committed room")
        self._check_max(dec.t, alloc.id, alloc.queue, alloc.resource)
        alloc.opportunistic = False
        res.sub_into(self.opportunistic, alloc.resource)
        for path in _lineage(alloc.queue):
            res.add_into(self.usage[path], alloc.resource)

    def _gone(self, aid: str) -> None:
        alloc = self.allocations.pop(aid, None)
        self.placement.gone(aid)
        self.topology.gone(aid)
        if alloc is not None:
            self.on_node[alloc.node].discard(aid)
            self.touched.add(alloc.node)
            if alloc.overcommit:
                res.sub_into(self.overcommitted, alloc.resource)
            if alloc.preempted_at is not None:
                self._notice_ends(alloc)
            if alloc.opportunistic:
                res.sub_into(self.opportunistic, alloc.resource)
            else:
                for path in _lineage(alloc.queue):
                    res.sub_into(self.usage[path], alloc.resource)

    # ------------------------------------------------------------------ checks at quiescence

    def check(self, t: float, *, full: bool = False) -> None:
        """Invariants that hold whenever the scheduler has handled everything it was given.

        The room of nodes (invariants 1 and 4) is checked where a step could have changed it: on the nodes
        whose allocations or capacity changed since the last check, and on those that failed it. ``full``
        checks every allocation instead (the reference); both record the same violations in the same order.
        """
        self.failing = self._check_room(t, self._rooms(full))
        self.touched.clear()
        self._check_gangs(t)
        self.overcommit.check(t)
        self.quota.check(t)

    def _rooms(self, full: bool) -> dict[str, list[ModelAllocation]]:
        """The nodes a check looks at, each with the allocations on it: every node holding one (``full``,
        from the allocations themselves), else those touched since the last check or failing it."""
        held: dict[str, list[ModelAllocation]] = defaultdict(list)
        if full:
            for a in self.allocations.values():
                held[a.node].append(a)
        else:
            for node in self.touched | self.failing:
                held[node] = [self.allocations[x] for x in self.on_node.get(node, ())]
        return held

    def _check_room(self, t: float, held: dict[str, list[ModelAllocation]]) -> set[str]:
        """Invariants 1 and 4 on the nodes of ``held`` (node -> the allocations on it), node by node in
        name order; the nodes that failed."""
        failing: set[str] = set()
        for node in sorted(held):
            allocations = sorted(held[node], key=lambda a: a.id)
            if allocations and node in self.removed_nodes:
                failing.add(node)
                for a in allocations:
                    self._violate(t, 4, f"allocation {a.id} still on removed node {node}")
            cap = self.nodes.get(node)
            used = res.total(a.resource for a in allocations if not a.overcommit)  # over-commit: invariant 11
            if cap is not None and not res.fits(used, cap):
                failing.add(node)
                self._violate(t, 1, f"node {node} over capacity: {human_resource(used)} > {human_resource(cap)}")
        return failing

    def _check_gangs(self, t: float) -> None:
        """Invariant 8: a gang is placed whole. The containers a gang ask holds (allocated ever, plus
        reservations naming it) never grow to a count between none and its ``gang_min``: the gang's
        members are allocated or reserved in the same step, or not at all."""
        if not self.gangs:
            return
        reserved: dict[tuple[str, str], int] = defaultdict(int)
        for r in self.reservations.values():
            reserved[(r.app, r.ask)] += 1
        for key, k in self.gangs.items():
            held = self.ask_allocated.get(key, 0) + reserved.get(key, 0)
            before = self.gang_held.get(key, 0)
            if before < held < k and key not in self.rejected_asks:
                self._violate(t, 8, f"partial gang {key[0]}/{key[1]}: {held} of {k} members placed or reserved")
            self.gang_held[key] = held

    # ------------------------------------------------------------------ views for metrics

    def derived(self) -> Derived:
        """Usage, pending demand, notices and capacity as of now (recomputed only after a change)."""
        if self._derived is not None and self._derived_version == self.version:
            return self._derived
        usage = {path: res.normalized(r) for path, r in self.usage.items()}
        pending: dict[str, Resource] = defaultdict(dict)
        waiting: dict[tuple[str, str], int] = {}  # open guaranteed asks -> containers left
        shapes: dict[str, list[Resource]] = defaultdict(list)
        containers = 0
        for key in self.open:
            resource, count = self.asks[key]
            left = count - self.ask_allocated.get(key, 0)  # reserved containers still wait: demand
            queue = self.apps.get(key[0])
            if left <= 0 or queue is None:
                continue
            containers += left
            if key in self.opportunistic_asks:
                continue  # waits for idle room: no queue's demand
            waiting[key] = left
            if resource not in shapes[queue]:
                shapes[queue].append(resource)
            for path in _lineage(queue):
                res.add_into(pending[path], resource, left)
        demand = self._limited_demand(waiting) if self._has_limits() else pending
        if self._capacity is None:
            self._capacity = res.total(self.nodes.values())
        opportunistic = res.normalized(self.opportunistic)
        overcommitted = res.normalized(self.overcommitted)
        self._derived = Derived(
            usage, pending, demand, containers, self.notices, self._capacity, opportunistic, dict(shapes), overcommitted
        )
        self._derived_version = self.version
        return self._derived

    def _has_limits(self) -> bool:
        return any(c.limits or c.max_applications is not None for c in self.queue_cfg.values())

    def _limits_of(self, app: str) -> list[tuple[Scope, Resource | None, int | None]]:
        """Every limit covering ``app`` as YuniKorn reads the config: ``(scope, maxresources,
        maxapplications)`` for each queue's ``maxapplications``, the entry naming its user (else the
        wildcard one) and the entry naming its tracked group (the first of its groups a group entry names,
        leaf queue up; else its first group if a wildcard group entry exists), from its queue up."""
        user, groups = self.app_user.get(app, ""), self.app_groups.get(app, ())
        cfgs = [self.queue_cfg[q] for q in _lineage(self.apps[app]) if q in self.queue_cfg]
        named = [g for c in cfgs for lim in c.limits for g in lim.groups if g in groups]
        wildcard = any("*" in lim.groups for c in cfgs for lim in c.limits)
        group = named[0] if named else (groups[0] if groups and wildcard else "")
        out: list[tuple[Scope, Resource | None, int | None]] = []
        for c in cfgs:
            if c.max_applications is not None:
                out.append(((c.path, "queue", ""), None, c.max_applications))
            for kind, name in (("user", user), ("group", group)):
                covers = [lim.users if kind == "user" else lim.groups for lim in c.limits]
                entries = [lim for lim, who in zip(c.limits, covers, strict=True) if name in who]
                entries = entries[:1] or [lim for lim, who in zip(c.limits, covers, strict=True) if "*" in who][-1:]
                if name and entries:
                    out.append(((c.path, kind, name), entries[0].max_resources, entries[0].max_applications))
        return out

    def _limited_demand(self, waiting: dict[tuple[str, str], int]) -> dict[str, Resource]:
        """Pending demand the limits let run: an app that holds nothing waits while the apps running plus
        those waiting since earlier fill a ``maxapplications`` covering it, and contributes nothing; the
        others, in submission order, contribute the whole containers their user's and group's
        ``maxresources`` still leave room for (committed guaranteed containers count against it)."""
        limits = {a: self._limits_of(a) for a in self.apps}
        running = {a.app for a in self.allocations.values()} | {r.app for r in self.reservations.values()}
        usage: dict[Scope, Resource] = defaultdict(dict)
        apps: dict[Scope, int] = defaultdict(int)
        for alloc in self.allocations.values():
            if not alloc.opportunistic and alloc.app in limits:
                for scope, _, _ in limits[alloc.app]:
                    res.add_into(usage[scope], alloc.resource)
        for app in running & limits.keys():
            for scope, _, _ in limits[app]:
                apps[scope] += 1
        asks: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for key in sorted(waiting, key=lambda k: -self.ask_priority.get(k, 0)):  # stable: oldest first
            asks[key[0]].append(key)
        demand: dict[str, Resource] = defaultdict(dict)
        for app, bounds in limits.items():  # submission order
            if app not in asks:
                continue
            if app not in running:
                full = any(m is not None and apps[scope] >= m for scope, _, m in bounds)
                for scope, _, _ in bounds:
                    apps[scope] += 1  # it waits, or starts: either way later apps wait behind it
                if full:
                    continue
            for key in asks[app]:
                resource = self.asks[key][0]
                n = waiting[key]
                for scope, cap, _ in bounds:
                    for k, v in (cap or {}).items():
                        if resource.get(k, 0) > 0:
                            n = min(n, max(0, v - usage[scope].get(k, 0)) // resource[k])
                if n <= 0:
                    continue
                for scope, _, _ in bounds:
                    res.add_into(usage[scope], resource, n)
                for path in _lineage(self.apps[app]):
                    res.add_into(demand[path], resource, n)
        return demand

    def queue_usage(self) -> dict[str, Resource]:
        """Committed usage per queue path, parents included (a snapshot: later changes leave it be)."""
        return self.derived().usage

    def opportunistic_usage(self) -> Resource:
        """What running opportunistic containers hold (on nodes only, in no queue's usage)."""
        return self.derived().opportunistic

    def queue_pending(self) -> dict[str, Resource]:
        """Outstanding demand per queue path, parents included (withdrawn and rejected asks excluded)."""
        return self.derived().pending

    def queue_demand(self) -> dict[str, Resource]:
        """The part of :meth:`queue_pending` the user, group and application limits let run."""
        return self.derived().demand

    def pending_containers(self) -> int:
        return self.derived().pending_containers

    def constrained_pending(self) -> int:
        """Containers still asked for by asks with placement constraints (waiting for room or their rule)."""
        wanted = self.placement.constraints
        keys = [k for k in self.open if k in wanted and k[0] in self.apps]
        return sum(max(0, self.asks[k][1] - self.ask_allocated.get(k, 0)) for k in keys)

    def capacity(self) -> Resource:
        return self.derived().capacity


Scope = tuple[str, str, str]  # (queue path, "queue" | "user" | "group", name): whom one limit covers


def _dominant_level(r: Resource, capacity: Resource) -> float:
    """The largest share of the cluster ``r`` holds (resources no node has say nothing), rounded to 12
    places so that a container-exact level is not lost to float error."""
    return round(max((r.get(k, 0) / c for k, c in capacity.items() if c > 0), default=0.0), 12)


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
