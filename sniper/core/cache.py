"""The cache's decision logic, sans-IO: the single writer of a partition's state.

Feed events and proposals go in; committed changes (for replicas), decisions (for resource managers)
and proposal outcomes come out, collected until :meth:`Cache.drain`. Every input is validated
against the current state first: a duplicate event changes nothing, an invalid one becomes a
``rejected`` decision (an ask is judged by :func:`sniper.core.admission.refusal`), a stale proposal is
rejected with its reason. Time only moves with ticks.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, Literal

import msgspec

from sniper.core import (
    admission,
    constraints,
    fair_share,
    gang,
    lifecycle,
    node_reservation,
    opportunistic,
    overcommit,
    slo_plan,
    slo_reservations,
)
from sniper.core import resources as res
from sniper.core.config import ConfigError, PartitionConfig, parse_partition, partition_to_raw
from sniper.core.limits import Limits
from sniper.core.resources import Resource
from sniper.core.state import (
    Allocation,
    App,
    Ask,
    AskKey,
    Node,
    PartitionState,
    Queue,
    Reservation,
    StateError,
    allocation_number,
    ask_label,
)
from sniper.core.units import human_resource
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p

SEEN_IDS = 100_000  # how many recent event ids are remembered for de-duplication


@dataclasses.dataclass(slots=True)
class CacheOutput:
    view: p.ViewDelta | None
    decisions: list[d.DecisionMsg]


@dataclasses.dataclass(slots=True)
class CacheStats:
    events: int = 0
    duplicates: int = 0
    rejected_events: int = 0
    proposals: int = 0
    placements_accepted: int = 0
    placements_rejected: int = 0


class Cache:
    def __init__(self, partition: str, config: PartitionConfig | None = None, *, epoch: int = 0) -> None:
        self.partition = partition
        self.epoch = epoch
        self.state = PartitionState(partition, indexed=False)
        self.decision_seq = 0
        self.view_seq = 0
        self.counters = {"alloc": 0, "app": 0, "ask": 0, "reservation": 0, "contract": 0, "node_reservation": 0}
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.flaps: dict[AskKey, tuple[int, float]] = {}  # asks withdrawn holding a reservation: (times, last)
        self.shapes = admission.NodeShapes()  # node capacities seen: what admission judges an ask's fit by
        self.stats = CacheStats()
        self._changes: list[p.ChangeMsg] = []
        self._decisions: list[d.DecisionMsg] = []
        self._outcomes: list[p.ProposalOutcome] = []
        if config is not None:
            self.commit(p.ConfigSet(config=partition_to_raw(config)))

    # ------------------------------------------------------------------ output

    def commit(self, change: p.ChangeMsg) -> None:
        self.state.apply(change)
        self._changes.append(change)

    def decide(self, decision_type: type[d.DecisionMsg], **fields: Any) -> None:
        reason = fields.get("reason")
        if isinstance(reason, str) and len(reason) > d.MAX_REASON:
            fields["reason"] = d.clipped(reason)
        self.decision_seq += 1
        # Into ``fields`` itself: a call with one dictionary of keywords and nothing else copies none.
        fields["partition"] = self.partition
        fields["seq"] = self.decision_seq
        fields["epoch"] = self.epoch
        fields["t"] = self.state.now
        self._decisions.append(decision_type(**fields))

    def _reject(
        self,
        code: d.RejectionCode,
        reason: str,
        *,
        app: str = "",
        ask: str = "",
        event: str = "",
        resource: Resource | None = None,
        bound: Resource | None = None,
    ) -> None:
        """Answer an event with a ``rejected`` decision; ``resource`` and ``bound`` are the figures its
        reason quotes (the ask's resource, the max or capacity it can never fit), as numbers."""
        self.stats.rejected_events += 1
        self.decide(
            d.Rejected,
            reason=reason,
            app=app,
            ask=ask,
            event=event,
            code=code,
            resource=resource or {},
            bound=bound or {},
        )

    def outcome(self, proposal: str, accepted: int, rejected: dict[str, str]) -> None:
        self.stats.placements_accepted += accepted
        self.stats.placements_rejected += len(rejected)
        self._outcomes.append(p.ProposalOutcome(proposal=proposal, accepted=accepted, rejected=rejected))

    def next_id(self, kind: str) -> int:
        self.counters[kind] += 1
        return self.counters[kind]

    def has_output(self) -> bool:
        return bool(self._changes or self._decisions or self._outcomes)

    def drain(self) -> CacheOutput:
        view = None
        if self._changes or self._outcomes:
            self.view_seq += 1
            view = p.ViewDelta(
                partition=self.partition,
                seq=self.view_seq,
                now=self.state.now,
                changes=self._changes,
                outcomes=self._outcomes,
            )
        out = CacheOutput(view=view, decisions=self._decisions)
        self._changes, self._decisions, self._outcomes = [], [], []
        return out

    def full_view(self, changes: list[p.ChangeMsg] | None = None) -> p.ViewDelta:
        """The whole state as one reset delta (for a replica that lost track); ``changes``: the state's
        (:func:`state_changes`), when the caller listed them already."""
        return p.ViewDelta(
            partition=self.partition,
            seq=self.view_seq,
            now=self.state.now,
            changes=state_changes(self.state) if changes is None else changes,
            reset=True,
        )

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> None:
        if now > self.state.now:
            self.commit(p.Clock(now=now))
        if self.state.contracts:
            from sniper.core.preemption.contract import settle  # local: preemption plugs in here

            settle(self)
        if self.state.max_since:
            from sniper.core.preemption.quota_preemption import enforce  # local: preemption plugs in here

            enforce(self)
        self._kill_overdue()
        self._expire_reservations()
        node_reservation.expire(self)
        if self.state.slo_reservations:
            slo_reservations.retire(self)

    def _kill_overdue(self) -> None:
        if not self.state.noticed:
            return
        now = self.state.now
        overdue = [
            alloc
            for alloc in self.state.allocations.values()
            if alloc.preempt_deadline is not None and not alloc.killed and alloc.preempt_deadline <= now
        ]
        if not overdue:
            return
        self.kill(overdue, "grace_expired")

    def kill(
        self, victims: list[Allocation], cause: d.KillCause, reason: str | None = None, missing: Resource | None = None
    ) -> None:
        """Kill ``victims`` (already marked leaving): one ``VictimsKilled`` change, then a ``kill`` each,
        with its ``cause`` and ``reason`` (the decision's default reason when None) and the ``missing``
        figure that reason quotes."""
        if not victims:
            return
        self.commit(p.VictimsKilled(victims=[v.id for v in victims]))
        extra: dict[str, object] = {} if reason is None else {"reason": reason}
        for v in victims:
            self.decide(
                d.Kill,
                allocation=v.id,
                app=v.app,
                queue=v.queue.path,
                node=v.node,
                cause=cause,
                missing=missing or {},
                **extra,
            )

    def _expire_reservations(self) -> None:
        now = self.state.now
        for r in list(self.state.reservations.values()):
            if r.expires <= now:
                self._end_reservation("timeout", r, self._timeout_reason(r))

    def _timeout_reason(self, r: Reservation) -> str:
        """Why ``r`` timed out, in words: its victims were not all gone, or what its room still waited for."""
        staying = sum(1 for vid in r.victims if vid in self.state.allocations)
        if staying:
            return f"reservation timed out before its victims were gone ({staying} of {len(r.victims)} still there)"
        waits = self._waits_for(r)
        node = self.state.nodes.get(r.node)
        if waits == "room" and node is not None:
            free = human_resource(res.clamp_min_zero(node.room_for_reservations()))
            what = f"{human_resource(r.resource)} free on {r.node} (other containers hold it; {free} free)"
        elif waits == "max":
            capped = self._max_reached(r)
            what = f"room under the max of {capped.path if capped is not None else 'its queues'}"
        elif waits == "constraints":
            what = f"its placement constraints to allow {r.node} again"
        elif waits == "earlier":
            what = f"room on {r.node} promised to reservations due before it"
        else:
            what = "its beneficiary to be placed"
        return f"reservation timed out after its victims were gone, waiting for {what}"

    # ------------------------------------------------------------------ feed

    def handle_event(self, event: f.Feed) -> None:
        self.stats.events += 1
        if event.id:
            if event.id in self.seen:
                self.stats.duplicates += 1
                return
            self.seen[event.id] = None
            if len(self.seen) > SEEN_IDS:
                self.seen.popitem(last=False)
        if isinstance(event, f.Sync):  # answered whatever the state, configured or not
            self.decide(d.Synced, event=event.id)
            return
        if self.state.root is None and not isinstance(event, f.PartitionConfigEvent | f.PartitionRemoved):
            what = f"{type(event).__name__}: partition {self.partition} has no configuration yet"
            self._reject("unconfigured", what, event=event.id)
            return
        try:
            self._dispatch(event)
        except (StateError, ConfigError, res.QuantityError, KeyError) as err:
            self._reject("invalid", f"{type(event).__name__}: {err}", event=event.id)

    def _dispatch(self, event: f.Feed) -> None:
        match event:  # (the event types are disjoint: the commonest first)
            case f.AskAdded():
                self._ask_added(event)
            case f.AllocationReleased(allocation=aid):
                alloc = self.state.allocations.get(aid)
                if alloc is not None:
                    self._release(alloc)
            case f.PartitionConfigEvent(config=raw):
                self._configure(raw, event.t)
            case f.PartitionRemoved(reason=reason):
                self._partition_removed(reason)
                self.seen = OrderedDict({event.id: None} if event.id else {})  # ids before it name nothing now
            case f.NodeAdded(node=name, capacity=capacity, labels=labels, schedulable=schedulable):
                self._node_set(name, capacity, schedulable, labels)
            case f.NodeUpdated(node=name, capacity=capacity, schedulable=schedulable):
                node = self.state.nodes.get(name)
                if node is None:
                    self._reject("unknown_node", f"node_updated: unknown node {name}", event=event.id)
                    return
                self._node_set(
                    name,
                    node.capacity if capacity is None else capacity,
                    node.schedulable if schedulable is None else schedulable,
                    node.labels,
                )
            case f.NodeRemoved(node=name):
                self._node_removed(name)
            case f.NodeUtilization():
                why = overcommit.take_report(self, event)
                if why is not None:
                    self._reject("bad_utilization", why, event=event.id)
            case f.AppAdded():
                self._app_added(event)
            case f.AppRemoved(app=name):
                self._app_removed(name)
            case f.AskRemoved(app=app, ask=ask):
                self._ask_removed((app, ask))
            case f.AllocationPromoted(allocation=aid):
                self._promote(aid, event.id)
            case f.AllocationCheckpointed(allocation=aid, t=at):
                self._checkpointed(aid, at)
            case f.ReservationSubmitted():
                slo_reservations.submit(self, event)

    def _partition_removed(self, reason: str) -> None:
        """Retire the partition through the usual changes: its reservations ended, every app removed as by
        ``app_removed`` (its allocations ``released``), the requests left settled, every node removed,
        then the configuration dropped; one ``partition_removed`` decision says what it held."""
        state = self.state
        held = {"apps": len(state.apps), "allocations": len(state.allocations), "nodes": len(state.nodes)}
        for r in list(state.reservations.values()):  # first: room a release frees is given to nobody
            self._end_reservation("partition_removed", r, "the partition was removed")
        for app in sorted(state.apps.values(), key=lambda a: a.submit_seq):
            self._app_removed(app.name)
        if state.contracts:
            from sniper.core.preemption.contract import settle  # local: preemption plugs in here

            settle(self)
        for name in list(state.nodes):
            self._node_removed(name)
        if state.config is not None:
            self.commit(p.PartitionCleared())
        self.flaps, self.shapes = {}, admission.NodeShapes()
        self.decide(d.PartitionRemoved, reason=reason, **held)

    def _configure(self, raw: dict[str, Any], at: float) -> None:
        config = parse_partition(raw, f"partition {self.partition}")
        plans = self.state.slo_reservations
        running = slo_plan.expand(config, plans, self.state.now)
        for app in self.state.apps.values():
            leaf = running.leaf(app.queue.path)
            if leaf is None:
                raise ConfigError(f"queue {app.queue.path} is used by app {app.name} and cannot be removed")
        reservable = {q.path: q for q in config.queues() if q.reservable}
        for plan in plans.values():
            if plan.queue not in reservable:
                raise ConfigError(f"queue {plan.queue} holds SLO reservation {plan.name} and must stay reservable")
        for path in sorted({plan.queue for plan in plans.values()}):
            held = [plan for plan in plans.values() if plan.queue == path]
            why = slo_plan.over_share(held, slo_plan.share_of(reservable[path]), self.state.now)
            if why is not None:
                raise ConfigError(f"queue {path}'s guarantee cannot shrink below its plans: {why}")
        base = self.state.base_config
        if base is not None and partition_to_raw(config) == partition_to_raw(base):
            return
        self.commit(p.ConfigSet(config=partition_to_raw(config), at=at))

    def _node_set(self, name: str, capacity: dict[str, int], schedulable: bool, labels: dict[str, str]) -> None:
        cap = res.normalized(capacity)
        node = self.state.nodes.get(name)
        if node is not None and node.capacity == cap and node.schedulable == schedulable and node.labels == labels:
            return
        if node is not None and node.reservations:
            self.keep_reservations(node, cap, schedulable)
        self._let_go_holds(name)  # the next piece given back there is judged on the node as it is now
        node_reservation.node_changed(self, name, cap, schedulable)
        if node is not None and not res.fits(res.sub(node.allocated, node.overcommitted), cap):
            # The node shrank below what it holds: newest allocations are lost until the rest fits (those
            # placed on over-committed room aside: the node's next utilization report judges them).
            held = (self.state.allocations[a] for a in node.allocations)
            newest_first = sorted(held, key=lambda a: (-a.start, -allocation_number(a.id)))
            for alloc in newest_first:
                if res.fits(res.sub(node.allocated, node.overcommitted), cap):
                    break
                if alloc.overcommit:
                    continue
                self._lose(alloc, f"node {name} shrank")
        self.commit(p.NodeSet(node=name, capacity=cap, schedulable=schedulable, labels=dict(labels)))
        self.shapes.see(cap)

    def notice(self, victim: Allocation, **fields: Any) -> None:
        """Publish ``preempt`` for ``victim``: its own fields filled in, the rest (beneficiary, deadline,
        reservation, policy, reason, ...) given."""
        self.decide(
            d.Preempt,
            allocation=victim.id,
            app=victim.app,
            queue=victim.queue.path,
            node=victim.node,
            resource=victim.resource,
            opportunistic=victim.opportunistic,
            **fields,
        )

    def cancel_notices(self, victims: list[Allocation], reason: str, reservation: str | None = None) -> None:
        """Victims under notice keep running: they leave no reservation's count, each gets ``preempt_cancelled``
        naming ``reservation`` (default: the one it was preempted for)."""
        self.commit(p.VictimsReleased(victims=[v.id for v in victims]))
        for v in victims:
            self.decide(
                d.PreemptCancelled,
                allocation=v.id,
                app=v.app,
                queue=v.queue.path,
                node=v.node,
                reservation=reservation if reservation is not None else v.reservation or "",
                reason=reason,
            )

    def keep_reservations(self, node: Node, cap: Resource, schedulable: bool, reason: str | None = None) -> None:
        """A node changed (or victims on it keep running): its reservations stay while they can still
        be fulfilled, the latest due end first otherwise, each with the true reason (unschedulable,
        shrunk below its need, or ``reason``: victims on it keep running, code ``victims_kept``)."""
        order = self._reservations_by_deadline(node)
        if not schedulable:
            for r in order:
                self._end_reservation("node_unschedulable", r, f"node {node.name} became unschedulable")
            return
        free = node.room_for_reservations(cap)
        while order and not self._promises_hold(free, order, self._room_leaving(node)):
            r = order.pop()
            if reason is None:
                self._end_reservation("node_shrank", r, f"node {node.name} shrank below what reservation {r.id} needs")
            else:
                self._end_reservation("victims_kept", r, reason)

    def _node_removed(self, name: str) -> None:
        node = self.state.nodes.get(name)
        if node is None:
            return
        for rid in sorted(node.reservations):
            self._end_reservation("node_removed", self.state.reservations[rid], f"node {name} was removed")
        self._let_go_holds(name)
        node_reservation.node_changed(self, name, {}, False)
        for aid in sorted(node.allocations):
            self._lose(self.state.allocations[aid], f"node {name} was removed")
        self.commit(p.NodeGone(node=name))

    def _let_go_holds(self, name: str) -> None:
        """Room given back on node ``name`` and held for beneficiaries of other nodes' reservations is
        free again (the node changed or left)."""
        node = self.state.nodes.get(name)
        if node is None or not res.any_positive(node.held):
            return
        from sniper.core.preemption.contract import let_go  # local: preemption plugs in here

        for r in [r for r in self.state.reservations.values() if r.hold is not None and r.hold[0] == name]:
            let_go(self, r)

    def _lose(self, alloc: Allocation, reason: str) -> None:
        self.decide(
            d.AllocationLost,
            allocation=alloc.id,
            app=alloc.app,
            ask=alloc.ask,
            queue=alloc.queue.path,
            node=alloc.node,
            resource=alloc.resource,
        )
        self._drop_allocation(alloc)

    def _app_added(self, e: f.AppAdded) -> None:
        existing = self.state.apps.get(e.app)
        if existing is not None:
            parent = existing.queue.parent
            in_reservable = parent is not None and parent.path == e.queue and parent.config.reservable
            if existing.queue.path != e.queue and not in_reservable:  # (apps of a reservable queue run below it)
                self._reject(
                    "app_elsewhere", f"app {e.app} already runs in {existing.queue.path}", app=e.app, event=e.id
                )
            return
        queue, why = slo_reservations.app_queue(self, e)
        if why is not None:
            self._reject("unknown_reservation", why, app=e.app, event=e.id)
            return
        leaf = self.state.leaf(queue)
        if leaf is None:
            if queue in self.state.queues:
                self._reject(
                    "not_a_leaf",
                    f"app {e.app}: {e.queue} is a parent queue; apps go to leaf queues",
                    app=e.app,
                    event=e.id,
                )
            else:
                self._reject("unknown_queue", f"app {e.app}: {e.queue} is an unknown queue", app=e.app, event=e.id)
            return
        refused = admission.app_refusal(self.state, leaf, e.app)
        if refused is not None:
            self._reject(refused.code, refused.reason, app=e.app, event=e.id)
            return
        self.counters["app"] += 1
        self.commit(
            p.AppSet(
                app=e.app,
                queue=queue,
                user=e.user,
                groups=tuple(e.groups),
                priority=e.priority,
                submit_seq=self.counters["app"],
                submit_time=self.state.now,
                preemption_contract=e.preemption_contract,
                max_disruption=e.max_disruption,
                allow_preemption=e.allow_preemption,
                checkpoint_interval=e.checkpoint_interval,
            )
        )

    def _app_removed(self, name: str) -> None:
        app = self.state.apps.get(name)
        if app is None:
            return
        node_reservation.end_for_app(self, name, "app_removed")
        for ask in list(app.asks):
            self._ask_removed((name, ask))
        for aid in sorted(app.allocations):
            self._release(self.state.allocations[aid])
        self.commit(p.AppGone(app=name))

    def _ask_added(self, e: f.AskAdded) -> None:
        app = self.state.apps.get(e.app)
        if app is not None and e.ask in app.asks:
            return  # asked already
        resource = res.shared(e.resource)
        refused = admission.refusal(self.state, e, resource, self.shapes)
        if refused is not None:
            self._reject(
                refused.code,
                refused.reason,
                app=e.app,
                ask=e.ask,
                event=e.id,
                resource=refused.resource,
                bound=refused.bound,
            )
            return
        self.counters["ask"] += 1
        change = p.AskSet(
            app=e.app,
            ask=e.ask,
            resource=resource,
            count=e.count,
            priority=e.priority,
            am=e.am,
            seq=self.counters["ask"],
            created=self.state.now,
            required_node=e.node,
            node_selector=e.node_selector,
            duration=e.duration,
            retry=e.retry,
        )
        # What most asks leave at its default is set apart: a call of more than 15 keyword arguments
        # builds a dictionary first, which costs several times the call.
        opportunistic = e.execution_type == "opportunistic"
        damped_until = self._damped_until((e.app, e.ask)) if self.flaps else 0.0
        never_preempts = e.preemption_policy == "never"
        if (
            e.gang_min
            or opportunistic
            or damped_until
            or never_preempts
            or e.usage is not None
            or e.tags
            or e.constraints
            or e.topology is not None
        ):
            change = msgspec.structs.replace(
                change,
                gang_min=e.gang_min,
                opportunistic=opportunistic,
                damped_until=damped_until,
                never_preempts=never_preempts,
                usage=None if e.usage is None else res.normalized(e.usage),
                tags=tuple(e.tags),
                constraints=e.constraints,
                topology=e.topology,
            )
        self.commit(change)

    def _damped_until(self, key: AskKey) -> float:
        """Flapping damper: an ask withdrawn while it held a reservation, and asked again, may not
        preempt before ``grace`` seconds after that withdrawal, doubled for each withdrawal that
        followed within the damping (at most 8 times), so a flapping ask preempts ever more rarely."""
        flap = self.flaps.get(key)
        if flap is None or self.state.config is None:
            return 0.0
        count, when = flap
        damping = self._damping(count)
        if self.state.now >= when + 2 * damping:
            del self.flaps[key]  # quiet long enough: forgiven
            return 0.0
        return when + damping

    def _damping(self, count: int) -> float:
        assert self.state.config is not None
        return float(self.state.config.preemption.grace * 2 ** min(count - 1, 3))

    def _ask_removed(self, key: AskKey) -> None:
        ask = self.state.ask(key)
        if ask is None:
            return
        held = [r for r in self.state.reservations.values() if (r.app, r.ask) == key]
        if held:
            now = self.state.now
            count, when = self.flaps.get(key, (0, now))
            again = count > 0 and now < when + 2 * self._damping(count)
            self.flaps[key] = (count + 1 if again else 1, now)
            if len(self.flaps) > SEEN_IDS:  # forget asks whose damping ran out (never asked again)
                self.flaps = {k: (n, t) for k, (n, t) in self.flaps.items() if t + self._damping(n) > now}
        for r in held:
            self._end_reservation("ask_withdrawn", r, f"ask {ask_label(key)} was withdrawn")
        node_reservation.end_for_ask(self, key, "ask_removed")
        self.commit(p.AskGone(app=key[0], ask=key[1]))

    def _promote(self, aid: str, event_id: str) -> None:
        """YARN's PROMOTE_EXECUTION_TYPE: the container keeps running, now counted as guaranteed."""
        alloc = self.state.allocations.get(aid)
        why = None
        if alloc is None:
            why = "is not running"
        elif not alloc.opportunistic:
            why = "is already guaranteed"
        elif alloc.preempting:
            why = "is being killed to make room for a guaranteed ask"
        elif alloc.overcommit:
            why = "runs on over-committed room, where no guaranteed container runs"
        elif not self.state.headroom_allows(alloc.queue, alloc.resource):
            why = f"would take queue {alloc.queue.path} over its max"
        if why is not None:
            app = "" if alloc is None else alloc.app
            self._reject("promotion_refused", f"allocation_promoted: allocation {aid} {why}", app=app, event=event_id)
            return
        assert alloc is not None
        self.commit(p.AllocationPromoted(allocation=aid))
        self.decide(
            d.Promoted, allocation=aid, app=alloc.app, queue=alloc.queue.path, node=alloc.node, resource=alloc.resource
        )

    def _checkpointed(self, aid: str, at: float) -> None:
        """A checkpoint the allocation's app wrote at ``at``; one of an allocation no longer running (it
        crossed the release), or not later than its start and last checkpoint, changes nothing."""
        alloc = self.state.allocations.get(aid)
        if alloc is None or at < alloc.start or (alloc.checkpointed is not None and at <= alloc.checkpointed):
            return
        self.commit(p.AllocationCheckpointed(allocation=aid, at=at))

    def _release(self, alloc: Allocation) -> None:
        self.decide(
            d.Released,
            allocation=alloc.id,
            app=alloc.app,
            queue=alloc.queue.path,
            node=alloc.node,
            resource=alloc.resource,
        )
        # Given back of the app's own accord while a request of its app is open: the room serves that
        # request's beneficiaries before anyone else (core.preemption.contract.serve).
        given_back = bool(self.state.contracts) and not alloc.preempting and not alloc.opportunistic
        self._drop_allocation(alloc, given_back)

    def _drop_allocation(self, alloc: Allocation, given_back: bool = False) -> None:
        node = alloc.node
        capped = [q for q in alloc.queue.lineage() if q.max is not None] if not alloc.opportunistic else []
        self.commit(p.AllocationGone(allocation=alloc.id))
        if given_back:
            from sniper.core.preemption.contract import serve  # local: preemption plugs in here

            serve(self, alloc.app, node, alloc.resource)
        self.fulfil_reservations(node)
        if capped and self.state.reservations:
            self._fulfil_under(capped)

    def _fulfil_under(self, capped: list[Queue]) -> None:
        """Room left a queue with a ``max``: reservations of beneficiaries below it, on any node, that
        waited only for that ``max`` (their node's room already free) are fulfilled now, not at their
        timeout."""
        state = self.state
        nodes = sorted(
            {
                r.node
                for r in state.reservations.values()
                if r.node in state.nodes and any(q in capped for q in state.apps[r.app].queue.lineage())
            }
        )
        for name in nodes:
            self.fulfil_reservations(name)

    # ------------------------------------------------------------------ reservations (preemption)

    def fulfil_reservations(self, node_name: str) -> None:
        """Turn reservations on ``node_name`` into allocations once the room is really free."""
        node = self.state.nodes.get(node_name)
        if node is None or not node.reservations:
            return
        for r in self._reservations_by_deadline(node):
            if r.id in self.state.reservations and self.fulfillable(r):
                self.allocate(r.app, r.ask, node_name, reservation=r)

    def fulfillable(self, r: Reservation) -> bool:
        """Whether ``r``'s room is really free on its node now, within every ``max``, and never at the
        expense of a reservation due earlier that still waits: each must still find its room once the
        victims due by its own deadline are gone."""
        return self._waits_for(r) is None

    def _waits_for(self, r: Reservation) -> Literal["node", "room", "max", "constraints", "earlier"] | None:
        """What keeps :meth:`fulfillable` false for ``r`` now, the first found (``None``: nothing)."""
        node = self.state.nodes.get(r.node)
        if node is None:
            return "node"
        free = node.room_for_reservations()
        if not res.fits(r.resource, free):
            return "room"
        if self._max_reached(r) is not None:
            return "max"
        ask = self.state.ask((r.app, r.ask))
        if ask is not None and ask.constraints and not constraints.allows(self.state, ask, node, own=r):
            return "constraints"  # the scope changed since its victims were chosen: it waits, or expires
        earlier = [e for e in self._reservations_by_deadline(node) if (e.deadline, e.id) < (r.deadline, r.id)]
        if earlier and not self._promises_hold(res.sub(free, r.resource), earlier, self._room_leaving(node)):
            return "earlier"
        return None

    def _max_reached(self, r: Reservation) -> Queue | None:
        """The first queue of the beneficiary's whose ``max`` fulfilling ``r`` now would break (``None``:
        none): its container on top of what they hold, and every reservation below them fulfilled once the
        victims leaving them are gone. When victims must leave to make room under a max, the reservation
        waits for them (it is not fulfilled early on free room, which would cancel victims the max still
        needs gone); the victims of other reservations below the same max, already leaving, do not hold it
        back."""
        for q in self.state.apps[r.app].queue.lineage():
            if q.max is None:
                continue
            now = res.add(q.allocated, r.resource)
            promised = res.sub(res.add(q.allocated, q.reserved), q.preempting)
            for need in (now, promised):
                if not res.fits({k: v for k, v in need.items() if k in q.max}, q.max):
                    return q
        return None

    def _reservations_by_deadline(self, node: Node) -> list[Reservation]:
        held = [self.state.reservations[rid] for rid in node.reservations]
        return sorted(held, key=lambda r: (r.deadline, r.id))

    def _room_leaving(self, node: Node, staying: Collection[str] = ()) -> Callable[[float], Resource]:
        """The room the node's victims under notice free by a deadline (those in ``staying`` excepted).

        Placement may promise one reservation the surplus of another's victims, or the room of victims
        due earlier, so a reservation's room is there once the victims due by its deadline are gone.
        """
        allocations = self.state.allocations
        leaving = [
            (v.preempt_deadline, v.resource)
            for v in (allocations[a] for a in node.allocations)
            if v.preempt_deadline is not None and v.id not in staying
        ]

        def gone_by(deadline: float) -> Resource:
            return res.total(room for due, room in leaving if due <= deadline)

        return gone_by

    @staticmethod
    def _promises_hold(free: Resource, reservations: list[Reservation], gone_by: Callable[[float], Resource]) -> bool:
        """Whether each of ``reservations`` (by deadline) fits in ``free`` plus the room gone by its deadline."""
        need: Resource = {}
        for r in reservations:
            res.add_into(need, r.resource)
            if not res.fits(need, res.add(free, gone_by(r.deadline))):
                return False
        return True

    def _release_victims(self, r: Reservation, reason: str) -> None:
        """Cancel the preemption of ``r``'s victims (``r`` has just ended) that nothing needs any more.

        A victim keeps its notice when another reservation names it, when its kill was sent, or when
        the reservations left on its node count on its room. The rest keep running: a victim is only
        ever killed for room its beneficiary takes.
        """
        state = self.state
        node = state.nodes.get(r.node)
        if node is None:
            return
        remaining = self._reservations_by_deadline(node)
        named = {vid for other in remaining for vid in other.victims}
        free = node.room_for_reservations()
        staying: set[str] = set()
        released: list[Allocation] = []
        for vid in r.victims:
            victim = state.allocations.get(vid)
            if victim is None or not victim.preempting or victim.killed or victim.reservation is not None:
                continue
            if vid in named or not self._promises_hold(free, remaining, self._room_leaving(node, staying | {vid})):
                continue
            staying.add(vid)
            released.append(victim)
        if not released:
            return
        self.cancel_notices(released, reason, r.id)

    def _end_reservation(self, code: d.ReservationEndCode, r: Reservation, reason: str) -> None:
        self.decide(d.ReservationEnded, reservation=r.id, app=r.app, ask=r.ask, node=r.node, reason=reason, code=code)
        self.commit(p.ReservationGone(reservation=r.id))
        self._release_victims(r, f"its reservation ended: {reason}")

    def move_beneficiary(self, r: Reservation, node_name: str, reason: str) -> None:
        """End ``r`` and place its beneficiary on ``node_name`` (whose free room :meth:`check_placement`
        found fit for it) instead: its victims that nothing else needs keep running."""
        self._end_reservation("given_back", r, reason)
        self.allocate(r.app, r.ask, node_name)

    # ------------------------------------------------------------------ proposals

    def handle_proposal(self, proposal: p.AllocationProposal | p.PreemptionProposal) -> None:
        self.stats.proposals += 1
        if isinstance(proposal, p.AllocationProposal):
            self._handle_allocation_proposal(proposal)
        else:
            from sniper.core.preemption.commit import commit_preemption  # local: preemption plugs in here

            commit_preemption(self, proposal)

    def _handle_allocation_proposal(self, proposal: p.AllocationProposal) -> None:
        accepted = 0
        rejected: dict[str, str] = {}
        limits = Limits.of(self.state)  # the allocator's view of the limits may be stale: check again
        items: list[p.Placement | p.Victimized] = [*proposal.placements, *proposal.evictions]
        # A gang's missing members are one unit, placements and evictions alike: all validated, then
        # all committed, or none. Units that evict go last, as the allocator planned them: after the
        # free room it placed guaranteed asks on, on nodes where it placed no opportunistic container.
        # A member beyond gang_min goes with its gang's unit (after it), and is refused once it was.
        units = gang.units(self.state, items)

        def ask_of(unit: tuple[list[int], int]) -> AskKey:
            return items[unit[0][0]].app, items[unit[0][0]].ask

        def evicts(unit: tuple[list[int], int]) -> bool:
            return any(isinstance(items[i], p.Victimized) for i in unit[0])

        if proposal.evictions:  # (without, no unit evicts: the order stands)
            gang_evicts = {ask_of(u): evicts(u) for u in units if u[1] > 1}
            units.sort(key=lambda u: evicts(u) or gang_evicts.get(ask_of(u), False))
        followers = gang.Followers()
        for members, need in units:
            unit = [items[i] for i in members]
            key = (unit[0].app, unit[0].ask)
            trial = limits
            if (why := followers.refusal(key)) is not None:
                pass
            elif need == 1:
                why = self._check_item(unit[0], limits)
            else:
                # Each member is checked with those before it charged to a copy of the limits view.
                trial = None if limits is None else limits.fork()
                evicting: list[p.Victimized] = []

                def check(
                    item: p.Placement | p.Victimized,
                    held: gang.Held,
                    trial: Limits | None = trial,
                    evicting: list[p.Victimized] = evicting,
                ) -> str | None:
                    why = self._check_item(item, trial, evicting, held)
                    if why is None:
                        if trial is not None:
                            trial.charge(self.state.apps[item.app].asks[item.ask])
                        if isinstance(item, p.Victimized):
                            evicting.append(item)
                    return why

                why = gang.check_unit(self.state, unit, need, check)
            followers.judged(key, need, why)
            for item in unit:
                if why is not None:
                    rejected[f"{item.app}/{item.ask}@{item.node}#{len(rejected)}"] = why
                    continue
                accepted += 1
                if isinstance(item, p.Victimized):
                    opportunistic.commit_eviction(self, item)
                    continue
                if self.state.reservations:
                    self._end_reservation_placed_elsewhere(item.app, item.ask, item.node)
                self.allocate(item.app, item.ask, item.node)
                if limits is not None and need == 1:
                    ask = self.state.apps[item.app].asks[item.ask]
                    if not ask.opportunistic:
                        limits.charge(ask)
            if why is None:
                limits = trial
        if proposal.reservations:
            reserved, refused = node_reservation.commit_reservations(self, proposal)
            accepted += reserved
            rejected.update(refused)
        self.outcome(proposal.id, accepted, rejected)

    def _check_item(
        self,
        item: p.Placement | p.Victimized,
        limits: Limits | None,
        evicting: Sequence[p.Victimized] = (),
        held: gang.Held | None = None,
    ) -> str | None:
        """Why one placement or opportunistic eviction of an allocation proposal cannot be committed now
        (``evicting``: the evictions already checked for the same gang, their victims counted leaving;
        ``held``: the members of the same gang checked before it, counted as taken)."""
        if isinstance(item, p.Victimized):
            return opportunistic.check_eviction(self, item, evicting, held)
        return self.check_placement(item.app, item.ask, item.node, item.ask_seq, limits, held)

    def _end_reservation_placed_elsewhere(self, app_name: str, ask_name: str, node_name: str) -> None:
        """A reserved beneficiary placed on free room: when every container it still wants is reserved,
        the reservation due last ends and its victims' notices are cancelled (they need not die)."""
        state = self.state
        ask = state.apps[app_name].asks[ask_name]
        if ask.count - ask.allocated - ask.reserved > 0:
            return
        held = [r for r in state.reservations.values() if (r.app, r.ask) == (app_name, ask_name)]
        last = max(held, key=lambda r: (r.deadline, r.id))
        self._end_reservation("placed_elsewhere", last, f"its beneficiary was placed on free room on {node_name}")

    def check_placement(
        self,
        app_name: str,
        ask_name: str,
        node_name: str,
        ask_seq: int = 0,
        limits: Limits | None = None,
        held: gang.Held | None = None,
    ) -> str | None:
        """Why one container of the ask cannot go to the node now, or ``None`` when it can (``limits``:
        the proposal's view of user and application limits, charged with what it accepted so far;
        ``held``: the members of its gang checked before it, counted as taken; the state is only read)."""
        state = self.state
        app = state.apps.get(app_name)
        if app is None:
            return "app is gone"
        ask = app.asks.get(ask_name)
        if ask is None:
            return "ask is gone"
        if ask_seq and ask.seq != ask_seq:
            return "ask was withdrawn and asked again since (another ask of the same name)"
        if ask.count - ask.allocated <= 0:
            return "ask is already fully allocated"
        # Every container left is reserved: placing one here ends a reservation (its room leaves usage).
        freed = None
        if ask.count - ask.allocated - ask.reserved <= 0:
            freed = {q.path: res.scale(ask.resource, -1) for q in app.queue.lineage()}
        node = state.nodes.get(node_name)
        if node is None:
            return "node is gone"
        if not node.schedulable:
            return "node is not schedulable"
        if ask.required_node is not None and ask.required_node != node_name:
            return f"ask requires node {ask.required_node}"
        if not ask.accepts(node):
            return f"node {node_name} does not match the ask's node selector"
        if ask.constraints:
            broken = constraints.refusal(state, ask, node, arriving=() if held is None else held.placed)
            if broken is not None:
                return broken
        fits = node.can_hold(ask.resource) if held is None else held.can_hold(node, ask.resource)
        if not fits and not (
            ask.opportunistic
            and overcommit.allows(
                overcommit.config_of(state), node, ask.resource, None if held is None else held.on(node)
            )
        ):
            return "does not fit the node's free room"
        reserved_for = node_reservation.refusal(state, ask, node_name)
        if reserved_for is not None:
            return reserved_for
        if held is not None:
            freed = held.with_queues(freed)
        if not ask.opportunistic and not state.headroom_allows(app.queue, ask.resource, freed):
            return "queue max would be exceeded"
        if limits is not None and not ask.opportunistic:
            return limits.refusal(ask)
        return None

    def allocate(self, app_name: str, ask_name: str, node_name: str, reservation: Reservation | None = None) -> None:
        app = self.state.apps[app_name]
        ask = app.asks[ask_name]
        node_reservation.on_allocate(self, ask, node_name, fulfils=reservation is not None)
        node = self.state.nodes[node_name]
        self.counters["alloc"] += 1
        aid = f"alloc-{self.counters['alloc']}"
        rid = None if reservation is None else reservation.id
        self.commit(
            allocation_set(
                self.state,
                aid,
                app_name,
                ask_name,
                ask,
                node,
                ask.resource,
                ask.am,
                ask.opportunistic,
                rid,
                self.state.now,
            )
        )
        self.decide(
            d.Allocated,
            allocation=aid,
            app=app_name,
            ask=ask_name,
            queue=app.queue.path,
            node=node_name,
            resource=ask.resource,
            am=ask.am,
            reservation=rid,
            opportunistic=ask.opportunistic,
        )
        if reservation is not None:
            self._release_victims(reservation, "its beneficiary was placed before its victims were gone")


def allocation_set(
    state: PartitionState,
    allocation: str,
    app: str,
    ask_name: str,
    ask: Ask | None,
    node: Node,
    resource: Resource,
    am: bool,
    opportunistic: bool,
    reservation: str | None,
    start: float,
) -> p.AllocationSet:
    """The change that commits one container of ``ask`` on ``node`` started at ``start``, live
    (:meth:`Cache.allocate`) and on replay (:func:`sniper.core.recovery.apply_logged`, where the ask may be gone):
    its priority, pinning (placed for a required node) and usage follow from the ask, its over-commit from
    the node's room."""
    over = opportunistic and overcommit.beyond_room(overcommit.config_of(state), node, resource)
    return p.AllocationSet(
        allocation=allocation,
        app=app,
        ask=ask_name,
        node=node.name,
        resource=resource,
        start=start,
        am=am,
        reservation=reservation,
        priority=0 if ask is None else ask.priority,
        opportunistic=opportunistic,
        pinned=ask is not None and ask.required_node is not None,
        usage=None if ask is None else ask.usage,
        overcommit=over,
        tags=() if ask is None else ask.tags,
    )


def state_changes(state: PartitionState) -> list[p.ChangeMsg]:
    """Changes that rebuild ``state`` from nothing (replica reset and snapshots): the clock, the
    configuration, nodes, apps with their asks, then every lifecycle object brought to its phase by the
    changes of its table's path from ``absent`` (:mod:`sniper.core.lifecycle`)."""
    return list(iter_state_changes(state))


def iter_state_changes(state: PartitionState) -> Iterator[p.ChangeMsg]:
    """:func:`state_changes` one at a time (keep ``state`` still until the last)."""
    yield p.Clock(now=state.now)
    if state.base_config is not None:
        yield p.ConfigSet(
            config=partition_to_raw(state.base_config),
            max_since=dict(state.max_since),
            fair_usage=fair_share.snapshot(state.fair_usage, state.now),
        )
        yield from slo_reservations.state_changes(state)
    for node in state.nodes.values():
        yield p.NodeSet(node=node.name, capacity=node.capacity, schedulable=node.schedulable, labels=node.labels)
    for app in sorted(state.apps.values(), key=lambda a: a.submit_seq):
        yield from _app_changes(state, app)
    yield from (_allocation_set_of(alloc) for alloc in state.allocations.values())
    for node in state.nodes.values():
        if node.utilization is not None:
            unmeasured = sorted(node.unmeasured_ids, key=allocation_number)
            yield p.NodeUtilizationSet(node=node.name, used=node.utilization, unmeasured=unmeasured)
    yield from _reservation_changes(state)
    yield from node_reservation.state_changes(state)
    yield from _notice_changes(state)
    yield from _contract_changes(state)


def _app_changes(state: PartitionState, app: App) -> list[p.ChangeMsg]:
    """``app`` and its asks, each ask asking for what it still wants plus its live containers (re-added
    after it: finished containers are gone from the state)."""
    live = Counter(state.allocations[a].ask for a in app.allocations)  # live containers per ask
    out: list[p.ChangeMsg] = [
        p.AppSet(
            app=app.name,
            queue=app.queue.path,
            user=app.user,
            groups=app.groups,
            priority=app.priority,
            submit_seq=app.submit_seq,
            submit_time=app.submit_time,
            preemption_contract=app.contract,
            max_disruption=app.max_disruption,
            allow_preemption=app.allow_preemption,
            checkpoint_interval=app.checkpoint_interval,
        )
    ]
    for ask in sorted(app.asks.values(), key=lambda a: a.seq):
        out.append(
            p.AskSet(
                app=app.name,
                ask=ask.name,
                resource=ask.resource,
                count=ask.count - ask.allocated + live[ask.name],
                priority=ask.priority,
                am=ask.am,
                seq=ask.seq,
                created=ask.created,
                required_node=ask.required_node,
                node_selector={k: sorted(v) for k, v in ask.node_selector.items()},
                duration=ask.duration,
                retry=ask.retry,
                gang_min=ask.gang_min,
                opportunistic=ask.opportunistic,
                damped_until=ask.damped_until,
                reserve_after=ask.reserve_after,
                never_preempts=ask.never_preempts,
                usage=ask.usage,
                tags=ask.tags,
                constraints=tuple(c.raw() for c in ask.constraints),
                topology=ask.topology,
            )
        )
    return out


def _allocation_set_of(alloc: Allocation) -> p.AllocationSet:
    """The first step of every allocation's path: committed, running."""
    return p.AllocationSet(
        allocation=alloc.id,
        app=alloc.app,
        ask=alloc.ask,
        node=alloc.node,
        resource=alloc.resource,
        start=alloc.start,
        am=alloc.am,
        priority=alloc.priority,
        opportunistic=alloc.opportunistic,
        pinned=alloc.pinned,
        usage=None if alloc.usage is alloc.resource else alloc.usage,
        overcommit=alloc.overcommit,
        tags=alloc.tags,
        checkpointed=alloc.checkpointed,
    )


def _reservation_changes(state: PartitionState) -> list[p.ChangeMsg]:
    """The preemption reservations held, each marking its victims still there (their ``ReservationSet``
    step)."""
    return [
        p.ReservationSet(
            reservation=r.id,
            app=r.app,
            ask=r.ask,
            node=r.node,
            resource=r.resource,
            victims=[v for v in r.victims if v in state.allocations],
            deadline=r.deadline,
            expires=r.expires,
            policy=r.policy,
        )
        for r in state.reservations.values()
    ]


def _notice_changes(state: PartitionState) -> list[p.ChangeMsg]:
    """The rest of each allocation's path past ``running``: the notices no reservation gave, by deadline,
    then the kills."""
    out: list[p.ChangeMsg] = []
    steps = {alloc.id: _path_from_absent(alloc) for alloc in state.allocations.values() if alloc.preempting}
    marked = [a for a in state.allocations.values() if p.VictimsMarked in steps.get(a.id, ()) and a.reservation is None]
    for deadline in sorted({a.preempt_deadline for a in marked if a.preempt_deadline is not None}):
        out.append(p.VictimsMarked(victims=[a.id for a in marked if a.preempt_deadline == deadline], deadline=deadline))
    killed = [aid for aid, changes in steps.items() if p.VictimsKilled in changes]
    if killed:
        out.append(p.VictimsKilled(victims=killed))
    return out


def _path_from_absent(alloc: Allocation) -> list[type[p.ChangeMsg]]:
    changes = lifecycle.path(lifecycle.ALLOCATION, lifecycle.ABSENT, alloc.phase)
    assert changes is not None  # every phase is reached from absent
    return changes


def _contract_changes(state: PartitionState) -> list[p.ChangeMsg]:
    """The open preemption requests, with what they were given back and what the policy cancelled, then
    the given-back room held for their beneficiaries."""
    out: list[p.ChangeMsg] = [
        p.ContractSet(
            contract=c.id,
            app=c.app,
            resource=c.resource,
            deadline=c.deadline,
            victims=c.victims,
            policy=c.policy,
            released=c.released,
            cancelled=c.cancelled,
            beneficiaries=c.beneficiaries,
        )
        for c in state.contracts.values()
    ]
    out.extend(
        p.GiveBackHeld(reservation=r.id, contract=r.hold_contract, node=r.hold[0], resource=r.hold[1])
        for r in state.reservations.values()
        if r.hold is not None
    )
    return out
