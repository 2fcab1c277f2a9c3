"""Helpers shared by the scheduling-core tests: config builders, state fingerprints, a sans-IO harness.

The harness wires :class:`Cache` and :class:`Allocator` by hand (drained view deltas go to the
allocator, its proposals go back to the cache) and feeds the independent :class:`ClusterModel` with the
same events and decisions, the way the simulator does, without actors or a bus.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from sniper.core import resources as res
from sniper.core.allocator import Allocator
from sniper.core.cache import Cache
from sniper.core.config import PartitionConfig, parse_partition, partition_to_raw
from sniper.core.node_index import NodeIndex
from sniper.core.resources import Resource
from sniper.core.state import STATIC_APP_ORDER, PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.simulator.model import ClusterModel

PARTITION = "default"


def queue(
    name: str,
    *children: dict[str, Any],
    guaranteed: dict[str, Any] | None = None,
    maximum: dict[str, Any] | None = None,
    **props: Any,
) -> dict[str, Any]:
    """One raw queue; ``props`` use ``_`` for ``.`` (``priority_offset="10"``). Integer amounts in
    ``guaranteed`` and ``maximum`` are Sniper's units (MiB, milli-cores), as in feed events; strings are
    YuniKorn quantities as they are."""
    q: dict[str, Any] = {"name": name}
    resources: dict[str, Any] = {}
    if guaranteed is not None:
        resources["guaranteed"] = quantities(guaranteed)
    if maximum is not None:
        resources["max"] = quantities(maximum)
    if resources:
        q["resources"] = resources
    if props:
        q["properties"] = {k.replace("_", "."): v for k, v in props.items()}
    if children:
        q["queues"] = list(children)
    return q


def quantities(amounts: dict[str, Any]) -> dict[str, Any]:
    """``amounts`` for a queues.yaml: integers in Sniper's units become YuniKorn quantities, strings stay."""
    return {k: res.as_quantities({k: v})[k] if isinstance(v, int) else v for k, v in amounts.items()}


def partition_raw(
    *leaves: dict[str, Any], node_sort: str = "binpacking", policy: str = "none", name: str = PARTITION
) -> dict[str, Any]:
    """A raw partition whose root holds ``leaves``."""
    return {
        "name": name,
        "nodesortpolicy": {"type": node_sort},
        "preemption": {"policy": policy},
        "queues": [queue("root", *leaves)],
    }


def config_of(*leaves: dict[str, Any], node_sort: str = "binpacking") -> PartitionConfig:
    return parse_partition(partition_raw(*leaves, node_sort=node_sort))


def mem(memory: int, vcore: int | None = None) -> Resource:
    out: Resource = {"memory": memory}
    if vcore is not None:
        out["vcore"] = vcore
    return out


# ---------------------------------------------------------------------- state inspection


BIG_NODE = {"memory": 100_000, "vcore": 100_000}  # the capacity of the one node a :class:`Build` adds


def state_of(leaves: list[dict[str, Any]], changes: list[p.ChangeMsg], node_sort: str = "binpacking") -> PartitionState:
    """A state configured with ``leaves`` (top-level queues) and ``changes`` applied."""
    state = PartitionState(PARTITION)
    state.apply(p.ConfigSet(config=partition_to_raw(config_of(*leaves, node_sort=node_sort))))
    state.apply_all(changes)
    return state


class Build:
    """Changes for a state: one app per queue (or more), asks, and committed usage."""

    def __init__(self, *, node_capacity: dict[str, int] | None = None) -> None:
        self.changes: list[p.ChangeMsg] = [p.NodeSet(node="big", capacity=node_capacity or BIG_NODE)]
        self.seq = 0
        self.alloc = 0

    def app(self, name: str, queue_path: str, priority: int = 0) -> Build:
        self.seq += 1
        self.changes.append(p.AppSet(app=name, queue=queue_path, priority=priority, submit_seq=self.seq))
        return self

    def ask(
        self, app: str, ask: str, memory: int, count: int = 1, priority: int = 0, vcore: int = 0, gpu: int = 0
    ) -> Build:
        self.seq += 1
        resource = {"memory": memory, **({"vcore": vcore} if vcore else {}), **({"gpu": gpu} if gpu else {})}
        self.changes.append(p.AskSet(app=app, ask=ask, resource=resource, count=count, priority=priority, seq=self.seq))
        return self

    def used(self, app: str, memory: int, vcore: int = 0, node: str = "big") -> Build:
        """Committed usage for ``app`` (an allocation of an ask that is not pending any more)."""
        self.alloc += 1
        self.changes.append(
            p.AllocationSet(
                allocation=f"u{self.alloc}",
                app=app,
                ask="done",
                node=node,
                resource={"memory": memory, **({"vcore": vcore} if vcore else {})},
            )
        )
        return self


def _fresh_index(state: PartitionState) -> NodeIndex:
    index = NodeIndex(state.config.node_sort_policy if state.config else "binpacking")
    for node in state.nodes.values():
        if node.schedulable:
            index.update(node.name, node.free_of("memory"))
    return index


def fingerprint(state: PartitionState, *, allocating: bool = False) -> dict[str, Any]:
    """A canonical, comparable description of a state (derived totals included).

    ``allocating`` adds the allocator's in-flight counters (zero everywhere on the cache).
    """

    def r(x: Resource) -> dict[str, int]:
        return dict(sorted(res.normalized(x).items()))

    nodes = {
        n.name: {
            "capacity": r(n.capacity),
            "schedulable": n.schedulable,
            "labels": dict(n.labels),
            "allocated": r(n.allocated),
            "reserved": r(n.reserved),
            "held": r(n.held),
            "preempting": r(n.preempting),
            "opportunistic": r(n.opportunistic),
            "allocations": sorted(n.allocations),
            "reservations": sorted(n.reservations),
            **({"allocating": r(n.allocating)} if allocating else {}),
        }
        for n in state.nodes.values()
    }
    queues = {
        q.path: {
            "allocated": r(q.allocated),
            "pending": r(q.pending),
            "reserved": r(q.reserved),
            "preempting": r(q.preempting),
            "opportunistic": r(q.opportunistic),
            "apps": sorted(q.apps),
            **({"allocating": r(q.allocating)} if allocating else {}),
        }
        for q in state.queues.values()
    }
    apps = {
        a.name: {
            "queue": a.queue.path,
            "priority": a.priority,
            "submit_seq": a.submit_seq,
            "checkpoint_interval": a.checkpoint_interval,
            "allocated": r(a.allocated),
            "allocations": sorted(a.allocations),
            "asked": a.asked,
            "pending_asks": [k.name for k in a.pending_asks],
            "asks": {
                k.name: {
                    "resource": r(k.resource),
                    "count": k.count,
                    "allocated": k.allocated,
                    "reserved": k.reserved,
                    "priority": k.priority,
                    "seq": k.seq,
                    "required_node": k.required_node,
                    **({"allocating": k.allocating} if allocating else {}),
                }
                for k in a.asks.values()
            },
        }
        for a in state.apps.values()
    }
    allocations = {
        a.id: {
            "app": a.app,
            "ask": a.ask,
            "node": a.node,
            "resource": r(a.resource),
            "queue": a.queue.path,
            "preempt_deadline": a.preempt_deadline,
            "reservation": a.reservation,
            "opportunistic": a.opportunistic,
            "checkpoint_interval": a.checkpoint_interval,
            "checkpointed": a.checkpointed,
        }
        for a in state.allocations.values()
    }
    return {
        "now": state.now,
        "config": None if state.config is None else state.config.root,
        "capacity": r(state.capacity),
        "nodes": nodes,
        "queues": queues,
        "apps": apps,
        "allocations": allocations,
        "asked": state.asked,
        "reservations": sorted(state.reservations),
        "holds": {
            x.id: (x.hold[0], r(x.hold[1]), x.hold_contract) for x in state.reservations.values() if x.hold is not None
        },
        # The cache keeps no node order (it never searches for a node): compare with a fresh sort.
        "node_order": None if allocating else (state.node_index if state.indexed else _fresh_index(state)).ordered(),
    }


def consistency_problems(state: PartitionState) -> list[str]:
    """Recompute every derived total from the objects that carry it; list where ``apply`` drifted."""
    problems: list[str] = []
    for node in state.nodes.values():
        used = res.total(state.allocations[a].resource for a in node.allocations)
        if res.normalized(used) != res.normalized(node.allocated):
            problems.append(f"node {node.name}: allocated {node.allocated} != sum {used}")
        for aid in node.allocations:
            if state.allocations[aid].node != node.name:
                problems.append(f"node {node.name} lists {aid} placed elsewhere")
        over = res.total(state.allocations[a].resource for a in node.allocations if state.allocations[a].overcommit)
        unmeasured = res.total(state.allocations[a].resource for a in node.unmeasured_ids)
        if res.normalized(over) != res.normalized(node.overcommitted) or not node.unmeasured_ids <= node.allocations:
            problems.append(f"node {node.name}: over-committed {node.overcommitted} != sum {over}")
        if res.normalized(unmeasured) != res.normalized(node.unmeasured):
            problems.append(f"node {node.name}: unmeasured {node.unmeasured} != sum {unmeasured}")
        holds = [x for x in state.reservations.values() if x.hold is not None and x.hold[0] == node.name]
        held = res.total(x.hold[1] for x in holds if x.hold is not None)
        promised = res.add(res.total(state.reservations[x].resource for x in node.reservations), held)
        if res.normalized(held) != res.normalized(node.held):
            problems.append(f"node {node.name}: held {node.held} != sum of holds {held}")
        if res.normalized(promised) != res.normalized(node.reserved):
            problems.append(f"node {node.name}: reserved {node.reserved} != reservations and holds {promised}")
        if any(x.hold_contract not in state.contracts for x in holds):
            problems.append(f"node {node.name}: room held for a closed preemption request")
    noticed = sum(1 for alloc in state.allocations.values() if alloc.preempting)
    if noticed != state.noticed:
        problems.append(f"{state.noticed} allocations counted under notice, {noticed} are")
    for alloc in state.allocations.values():
        if alloc.id not in state.nodes[alloc.node].allocations:
            problems.append(f"allocation {alloc.id} missing from node {alloc.node}")
    for app in state.apps.values():
        noticed = sum(
            1 for a in app.allocations if state.allocations[a].preempting and not state.allocations[a].opportunistic
        )
        if app.disrupted != noticed:
            problems.append(f"app {app.name}: disrupted {app.disrupted} != {noticed} containers under notice")
        if (app.name in state.guarded) != (app.max_disruption is not None or not app.allow_preemption):
            problems.append(f"app {app.name}: guarded index wrong")
    usage: dict[str, Resource] = {path: {} for path in state.queues}
    pending: dict[str, Resource] = {path: {} for path in state.queues}
    opportunistic: dict[str, Resource] = {path: {} for path in state.queues}
    for alloc in state.allocations.values():
        for q in alloc.queue.lineage():
            res.add_into(opportunistic[q.path] if alloc.opportunistic else usage[q.path], alloc.resource)
    for app in state.apps.values():
        asked = sum(ask.count - ask.allocated for ask in app.asks.values())
        if asked != app.asked:
            problems.append(f"app {app.name}: asked {app.asked} != sum {asked}")
        for ask in app.asks.values():
            left = ask.count - ask.allocated - ask.reserved
            if left < 0:
                problems.append(f"ask {app.name}/{ask.name} allocated {ask.allocated} over count {ask.count}")
            if ask.opportunistic:  # no queue pending: listed apart while it wants containers
                if (left > 0) != (ask.key in state.opportunistic_asks) or ask in app.pending_asks:
                    problems.append(f"opportunistic ask {app.name}/{ask.name}: left {left}, listed wrongly")
                continue
            for q in app.queue.lineage():
                res.add_into(pending[q.path], ask.resource, max(left, 0))
            in_pending = ask in app.pending_asks
            if (left > 0) != in_pending:
                problems.append(f"ask {app.name}/{ask.name}: left {left} but in pending_asks={in_pending}")
    for path, q in state.queues.items():
        waiting = {name for name, app in q.apps.items() if app.pending_asks}
        if set(q.waiting) != waiting or any(q.apps.get(name) is not app for name, app in q.waiting.items()):
            problems.append(f"queue {path}: waiting {sorted(q.waiting)} != apps with pending asks {sorted(waiting)}")
        if q.waiting_order is not None:
            in_order = [app.name for app in q.waiting_order]
            expected = [app.name for app in sorted(q.waiting.values(), key=STATIC_APP_ORDER[q.config.sort_policy])]
            if in_order != expected:
                problems.append(f"queue {path}: waiting order {in_order} != {expected}")
        holding = {name for name, app in q.apps.items() if app.allocations}
        if set(q.holding) != holding or any(q.apps.get(name) is not app for name, app in q.holding.items()):
            problems.append(f"queue {path}: holding {sorted(q.holding)} != apps with containers {sorted(holding)}")
        if res.normalized(usage[path]) != res.normalized(q.allocated):
            problems.append(f"queue {path}: allocated {q.allocated} != sum {usage[path]}")
        if res.normalized(pending[path]) != res.normalized(q.pending):
            problems.append(f"queue {path}: pending {q.pending} != sum {pending[path]}")
        if res.normalized(opportunistic[path]) != res.normalized(q.opportunistic):
            problems.append(f"queue {path}: opportunistic {q.opportunistic} != sum {opportunistic[path]}")
    waiting_selectors = Counter(
        tuple(sorted(ask.node_selector.items(), key=lambda item: item[0]))
        for app in state.apps.values()
        for ask in app.pending_asks
        if ask.node_selector
    )
    if dict(waiting_selectors) != state.selector_demand.counts():
        problems.append(f"selector demand {state.selector_demand.counts()} != waiting asks' {dict(waiting_selectors)}")
    asked = sum(app.asked for app in state.apps.values())
    if asked != state.asked:
        problems.append(f"partition: asked {state.asked} != sum over apps {asked}")
    schedulable = res.total(n.capacity for n in state.nodes.values() if n.schedulable)
    if res.normalized(schedulable) != res.normalized(state.capacity):
        problems.append(f"capacity {state.capacity} != schedulable sum {schedulable}")
    return problems


def invariant_problems(state: PartitionState) -> list[str]:
    """Invariants 1-4 (architecture: Invariants) on a committed state (queue max: for a static config)."""
    problems: list[str] = []
    for node in state.nodes.values():  # 1
        held = res.sub(res.add(node.allocated, node.reserved), node.overcommitted)  # over-commit aside
        if not res.fits(held, node.capacity):
            problems.append(f"inv1: node {node.name} holds {held} over capacity {node.capacity}")
    for q in state.queues.values():  # 2
        if q.max is not None:
            over = {k: v for k, v in q.allocated.items() if k in q.max and v > q.max[k]}
            if over:
                problems.append(f"inv2: queue {q.path} over max {q.max}: {over}")
    for app in state.apps.values():  # 3
        for ask in app.asks.values():
            if ask.allocated > ask.count:
                problems.append(f"inv3: ask {app.name}/{ask.name} allocated {ask.allocated} of {ask.count}")
    for alloc in state.allocations.values():  # 4
        if alloc.node not in state.nodes:
            problems.append(f"inv4: allocation {alloc.id} on missing node {alloc.node}")
    return problems + consistency_problems(state)


# ---------------------------------------------------------------------- the sans-IO harness


@dataclasses.dataclass
class Harness:
    """Cache + allocator + independent model, wired by hand."""

    config: PartitionConfig | None
    cache: Cache = dataclasses.field(init=False)
    allocator: Allocator = dataclasses.field(init=False)
    model: ClusterModel = dataclasses.field(init=False)
    decisions: list[d.DecisionMsg] = dataclasses.field(default_factory=list)
    views: list[p.ViewDelta] = dataclasses.field(default_factory=list)
    outcomes: dict[str, p.ProposalOutcome] = dataclasses.field(default_factory=dict)
    in_flight: list[p.AllocationProposal] = dataclasses.field(default_factory=list)
    now: float = 0.0

    def __post_init__(self) -> None:
        self.cache = Cache(PARTITION, self.config)
        self.allocator = Allocator(PARTITION)
        self.model = ClusterModel(PARTITION, self.config)
        self.pump()

    def pump(self) -> list[d.DecisionMsg]:
        """Drain the cache: the view delta to the allocator, the decisions to the model."""
        out = self.cache.drain()
        if out.view is not None:
            self.views.append(out.view)
            assert self.allocator.apply_view(out.view), f"gap at view seq {out.view.seq}"
            for outcome in out.view.outcomes:
                self.outcomes[outcome.proposal] = outcome
        for dec in out.decisions:
            self.model.on_decision(dec)
        self.decisions.extend(out.decisions)
        return out.decisions

    def feed(self, *events: f.Feed) -> list[d.DecisionMsg]:
        for event in events:
            self.model.on_event(event)
            self.cache.handle_event(event)
        return self.pump()

    def tick(self, now: float) -> list[d.DecisionMsg]:
        self.now = now
        self.cache.tick(now)
        return self.pump()

    def propose(self) -> p.AllocationProposal | None:
        """One allocator cycle; the proposal is held until :meth:`deliver`."""
        proposal = self.allocator.cycle()
        if proposal is not None:
            self.in_flight.append(proposal)
        return proposal

    def deliver(self, index: int = 0) -> p.ProposalOutcome:
        proposal = self.in_flight.pop(index)
        self.cache.handle_proposal(proposal)
        self.pump()
        return self.outcomes[proposal.id]

    def settle(self, max_rounds: int = 100) -> None:
        """Deliver everything in flight and run cycles until the allocator has nothing to propose."""
        for _ in range(max_rounds):
            while self.in_flight:
                self.deliver()
            if self.propose() is None:
                return
        raise AssertionError("the allocator never settled")

    def allocated(self) -> list[d.Allocated]:
        return [x for x in self.decisions if isinstance(x, d.Allocated)]

    def placements(self) -> list[tuple[str, str]]:
        """``(ask, node)`` of every committed allocation, in commit order."""
        return [(x.ask, x.node) for x in self.allocated()]


def decision_counts(decisions: list[d.DecisionMsg]) -> Counter[str]:
    return Counter(type(x).__name__ for x in decisions)


def rejected_reasons(decisions: list[d.DecisionMsg]) -> list[str]:
    return [x.reason for x in decisions if isinstance(x, d.Rejected)]
