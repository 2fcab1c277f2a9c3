"""The cache's side of preemption: re-validate a proposal on the authoritative state and commit it.

A sniper (or intra-queue) placement is committed as one record that ties the victims, the beneficiary ask, the
node and a reservation together (YuniKorn's lesson YUNIKORN-2270/1988): victims are marked preempting with a
grace deadline, the room on that node is held for the beneficiary until they are gone (or the reservation
times out), and the beneficiary is allocated there the moment it fits. The checks repeat invariant 5 on the
cache's own figures: the victim's queue is above its ideal plus the deadzone and loses at most its quota plus
one whole container, never going below its guarantee (beyond its quota, down to its guarantee, only to spare an
app that opted out: :mod:`sniper.core.preemption.soft_opt_out`); the beneficiary's queue is below its ideal and within
every ``max`` once the victims of its subtree are gone; no priority inversion, no fence crossed, no disabled
queue, no container placed for a required node; the victim set is minimal (for the room and for those
``max``). An ask that requires a node is judged by the required-node rule instead of the queue relations and
quotas (:func:`sniper.core.preemption.eligibility.refusal`, the placer's rule too). The beneficiary stays
within its user, group and application limits (an intra-queue victim of the same priority or more belongs to a
user above its limit); no app goes past its disruption budget and no beneficiary says ``preemption_policy:
never`` (:mod:`sniper.core.preemption.rules`). A gang's missing members are one unit
(:mod:`sniper.core.gang`): all validated, each counting the members before it, then all committed in the same
view delta, or none (a member named no victim takes room free now and is allocated at once); never one
whose whole gang would take its queue above its ideal, nor one that names no victim at all. A placement
beyond ``gang_min`` follows its gang, refused when the gang was. Observe-only proposals
publish what would be preempted and change nothing. Opportunistic victims stand outside those queue rules,
quotas and ``max`` (they count in no queue) and are killed at once. A placement is committed as
:func:`sniper.core.preemption_reservation.preempt` commits every preemption for an ask (notices, reservation,
kills, fulfilment); YARN's baseline marks its victims and kills the opportunistic ones
(:func:`sniper.core.preemption_reservation.evict`).
Victims of apps with a preemption contract get no notice of their own: their app gets one request per commit
(:mod:`sniper.core.preemption.contract`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from sniper.core import constraints, gang, node_reservation
from sniper.core import resources as res
from sniper.core.limits import Limits
from sniper.core.preemption.contract import Requests
from sniper.core.preemption.eligibility import explain, quota_allows, refusal, spend
from sniper.core.preemption.quotas import Quotas, compute_quotas, net_usage, within_share
from sniper.core.preemption.rules import budget_refusal, may_preempt, may_preempt_for, over_budget
from sniper.core.preemption.soft_opt_out import may_spare
from sniper.core.preemption_reservation import evict, preempt
from sniper.core.resources import Resource
from sniper.core.state import Allocation, Ask, Node, PartitionState, Queue
from sniper.core.units import human_resource
from sniper.core.writer import Writer
from sniper.messages import decisions as d
from sniper.messages import protocol as p


def commit_preemption(cache: Writer, proposal: p.PreemptionProposal) -> None:
    if proposal.dereserve and not proposal.observe_only:  # YARN's cheapest action (de-reservation) goes first
        node_reservation.dereserve(cache, proposal.dereserve, proposal.policy)
    if proposal.placements:
        _commit_placements(cache, proposal)
    else:
        _commit_shotgun(cache, proposal)


def _commit_shotgun(cache: Writer, proposal: p.PreemptionProposal) -> None:
    """YARN's proportional baseline: victims without a beneficiary; the room goes back to the pool."""
    state = cache.state
    config = state.config
    assert config is not None
    grace = config.preemption.grace
    accepted: list[Allocation] = []
    taking: dict[str, list[Allocation]] = {}  # accepted victims of apps with a budget or opted out
    rejected: dict[str, str] = {}
    for vid in proposal.victims:
        alloc = state.allocations.get(vid)
        if alloc is None:
            rejected[vid] = "victim is gone"
        elif (why := refusal(alloc, None, now=state.now)) is not None:
            rejected[vid] = explain(why, alloc, None)
        elif alloc.app in state.guarded and (app := over_budget([*taking.get(alloc.app, []), alloc], state.guarded)):
            rejected[vid] = budget_refusal(app)
        else:
            accepted.append(alloc)
            taking.setdefault(alloc.app, []).append(alloc)
    deadline = state.now + grace
    reason = "proportional: queue over its ideal assignment (no beneficiary)"
    requests = Requests(cache, proposal.policy, proposal.observe_only)
    for alloc in accepted:
        if requests.wants(alloc):
            requests.add(alloc, reason)
            continue
        cache.notice(
            alloc,
            for_ask="",
            for_app="",
            for_queue="",
            deadline=deadline,
            reservation="",
            policy=proposal.policy,
            reason=reason,
            observe_only=proposal.observe_only,
        )
    if accepted and not proposal.observe_only:
        cache.commit(p.VictimsMarked(victims=[a.id for a in accepted], deadline=deadline, policy=proposal.policy))
        evict(cache, accepted)
    requests.publish(deadline)
    cache.outcome(proposal.id, len(accepted), rejected)


def _commit_placements(cache: Writer, proposal: p.PreemptionProposal) -> None:
    state = cache.state
    config = state.config
    assert config is not None
    pre = config.preemption
    intra = proposal.policy == "intra_queue"
    quotas = None if intra else compute_quotas(state, pre)
    lose_left: dict[str, Resource] = {} if quotas is None else {k: dict(v) for k, v in quotas.may_lose.items()}
    limits = Limits.of(state)
    accepted = 0
    rejected: dict[str, str] = {}
    placements = proposal.placements
    requests = Requests(cache, proposal.policy, proposal.observe_only)
    waiting: list[str] = []  # nodes of placements with contract victims: fulfilled once the requests are open
    followers = gang.Followers()
    # The queue relations, judged once per pair of queues: nothing in a commit changes the configuration.
    related = functools.cache(may_preempt_for)
    for members, need in gang.units(state, placements):
        unit = [placements[n] for n in members]
        key = (unit[0].app, unit[0].ask)
        trial = limits
        if (why := followers.refusal(key)) is not None:
            pass
        elif need == 1:
            why = _check(cache, unit[0], quotas, lose_left, intra, limits, related=related)
        else:
            trial = None if limits is None else limits.fork()
            why = _check_gang(cache, unit, need, quotas, lose_left, intra, trial, related)
        followers.judged(key, need, why)
        for n, pl in zip(members, unit, strict=True):
            if why is not None:
                rejected[f"{pl.app}/{pl.ask}@{pl.node}#{n}"] = why
                continue
            accepted += 1
            if limits is not None and need == 1:  # before the commit: it may allocate at once
                limits.charge(state.apps[pl.app].asks[pl.ask])
                for vid in pl.victims:
                    limits.take(state.allocations[vid])
            _commit_one(cache, pl, quotas, lose_left, proposal, requests, waiting)
        if why is None:
            limits = trial  # a gang's members were charged to the trial view as they were checked
    if requests.by_app:
        requests.publish(state.now + pre.grace)
        for node in waiting:
            cache.fulfil_reservations(node)
    cache.outcome(proposal.id, accepted, rejected)


@dataclasses.dataclass(slots=True)
class Taken:
    """What the members of a gang checked so far take, tallied beside the state (which a check never
    touches): their victims as leaving on their node (``nodes``, by name) and up their queue tree
    (``queues``, by path), and as under notice in their app's disruption budget (``disrupted``)."""

    nodes: dict[str, Resource] = dataclasses.field(default_factory=dict)
    queues: dict[str, Resource] = dataclasses.field(default_factory=dict)
    disrupted: dict[str, int] = dataclasses.field(default_factory=dict)

    def take(self, state: PartitionState, node: str, victim: Allocation) -> None:
        """Count ``victim`` (on ``node``) as leaving."""
        res.add_into(self.nodes.setdefault(node, {}), victim.resource)
        if victim.opportunistic:  # an opportunistic victim counts in no queue and in no budget
            return
        for q in victim.queue.lineage():
            res.add_into(self.queues.setdefault(q.path, {}), victim.resource)
        if victim.app in state.guarded:
            self.disrupted[victim.app] = self.disrupted.get(victim.app, 0) + 1


def _check_gang(
    cache: Writer,
    unit: list[p.Victimized],
    need: int,
    quotas: Quotas | None,
    lose_left: dict[str, Resource],
    intra: bool,
    limits: Limits | None,
    related: Callable[[Queue, Queue], bool] = may_preempt_for,
) -> str | None:
    """:func:`_check` for every member of a gang, each seeing the room, victims, quotas and limits the
    members before it took (tallied in a :class:`Taken`, a :class:`sniper.core.gang.Held` and a copy of the
    quotas left, never on the state; ``limits`` is a trial view the caller keeps only when the unit
    passes): the whole unit or nothing."""
    state = cache.state
    ask = state.ask((unit[0].app, unit[0].ask))
    if ask is None:
        return "beneficiary ask is gone"
    queue = ask.app.queue
    ideal = None if quotas is None else quotas.ideal.get(queue.path)
    whole = res.add(queue.usage(), res.scale(ask.resource, need))
    if ideal is not None and not within_share(queue, whole, ideal, state.capacity):
        return f"gang of {need} would take {queue.path} above its ideal ({human_resource(ideal)}) and its guarantee"
    if not any(pl.victims for pl in unit):
        return f"gang of {need} names no victim: room already free is the normal allocator's to give"
    lose = {k: dict(v) for k, v in lose_left.items()}
    claimed: set[str] = set()
    taken = Taken()

    def check(pl: p.Victimized, held: gang.Held) -> str | None:
        if claimed.intersection(pl.victims):
            return "a victim is named for two members"
        why = _check(cache, pl, quotas, lose, intra, limits, taken, held, related=related)
        if why is not None:
            return why
        claimed.update(pl.victims)
        if limits is not None:
            limits.charge(ask)
        for vid in pl.victims:
            v = state.allocations[vid]
            if not intra and not v.opportunistic and v.queue.path in lose:  # an opportunistic victim counts in no
                # queue, and a required-node victim may come from a queue that loses nothing else
                res.sub_into(lose[v.queue.path], v.resource)
            if limits is not None:
                limits.take(v)
            taken.take(state, pl.node, v)
        return None

    return gang.check_unit(state, unit, need, check)


def _check(
    cache: Writer,
    pl: p.Victimized,
    quotas: Quotas | None,
    lose_left: dict[str, Resource],
    intra: bool,
    limits: Limits | None,
    taken: Taken | None = None,
    held: gang.Held | None = None,
    *,
    related: Callable[[Queue, Queue], bool] = may_preempt_for,
) -> str | None:
    """Why placement ``pl`` cannot be committed (``None``: it can), with what earlier members of its gang
    take (``taken``) counted as leaving and what they hold (``held``) counted as taken; ``related``: the
    queue relations (:func:`sniper.core.preemption.rules.may_preempt_for`)."""
    state = cache.state
    app = state.apps.get(pl.app)
    ask: Ask | None = None if app is None else app.asks.get(pl.ask)
    if app is None or ask is None:
        return "beneficiary ask is gone"
    if ask.count - ask.allocated - ask.reserved <= 0:
        return "beneficiary ask needs nothing more"
    if not may_preempt(ask):
        return "beneficiary ask never preempts (preemption_policy never)"
    node = state.nodes.get(pl.node)
    if node is None or not node.schedulable:
        return "node is gone or not schedulable"
    if not ask.accepts(node):
        return f"node {pl.node} does not match the ask's required node or node selector"
    reserved_for = node_reservation.refusal(state, ask, pl.node)  # reserved since the placement was made
    if reserved_for is not None:
        return reserved_for
    over_limit = None if limits is None else limits.refusal(ask)
    if over_limit is not None:
        return f"beneficiary: {over_limit}"
    victims: list[Allocation] = []
    for vid in pl.victims:
        v = state.allocations.get(vid)
        if v is None:
            return f"victim {vid} is gone"
        if v.node != pl.node:
            return f"victim {vid} is not on {pl.node}"
        victims.append(v)
    if len({v.id for v in victims}) != len(victims):
        return "a victim is named twice"
    disrupted = None if taken is None else taken.disrupted
    over = over_budget(victims, state.guarded, disrupted) if state.guarded else None
    if over is not None:
        return budget_refusal(over, disrupted)
    arriving = () if held is None else held.placed
    broken = constraints.refusal(state, ask, node, victims, arriving=arriving) if ask.constraints else None
    if broken is not None:
        return f"beneficiary's placement constraint, with its victims gone: {broken}"
    # Counted gone for every max: these victims and those already under notice (as placement does).
    if taken is None:
        leaving = {q.path: res.scale(q.preempting, -1) for q in app.queue.lineage()}
    else:
        leaving = {
            q.path: res.scale(res.add(q.preempting, taken.queues.get(q.path, {})), -1) for q in app.queue.lineage()
        }
    guaranteed = [v for v in victims if not v.opportunistic]  # opportunistic ones count in no queue
    for v in guaranteed:
        for q in v.queue.lineage():
            res.sub_into(leaving.setdefault(q.path, {}), v.resource)
    if held is not None:
        leaving = held.with_queues(leaving) or {}
    if not state.headroom_allows(app.queue, ask.resource, leaving):
        return "beneficiary's queue max would be exceeded, even with the victims gone"
    required = required_node_rule(state, ask, pl.node, intra)
    if not required and quotas is not None and app.queue.path not in quotas.beneficiaries:
        return f"beneficiary's queue {app.queue.path} is not below its ideal"
    taking_from: list[Allocation] = []  # victims checked so far
    for v in victims:
        why = refusal(
            v,
            ask,
            now=state.now,
            intra=intra,
            required_node=required,
            limits=limits,
            chosen=taking_from,
            related=related,
        )
        if why is not None:
            return explain(why, v, ask)
        if not v.opportunistic:
            taking_from.append(v)
    if not required and not intra:
        gone = None if taken is None else taken.queues
        path = quota_allows(guaranteed, lose_left, state.capacity, gone)
        if path is not None and not may_spare(state, app.queue, guaranteed, gone):
            return f"victims would take {path} below its guarantee or ideal, or it is within the deadzone"
    if not victims:  # a gang's member on room free now, beside members that preempt
        if held is None:
            return "no victim named: room already free is the normal allocator's to give"
        return None if held.can_hold(node, ask.resource) else "no victim named and the room is not free now"
    also = None if taken is None else taken.nodes.get(node.name)
    if held is not None and held.on(node):
        also = res.sub(also or {}, held.on(node))
    return _frees_room_minimally(state, app.queue, ask, node, victims, leaving, also)


def required_node_rule(state: PartitionState, ask: Ask, node: str, intra: bool) -> bool:
    """Whether a placement of ``ask`` on ``node`` is judged by the required-node rule (the inter-queue
    policies', when the partition's ``preemption.required_node`` is on) instead of the queue relations."""
    config = state.config
    on = config is not None and config.preemption.required_node
    return on and not intra and ask.required_node == node


def _frees_room_minimally(
    state: PartitionState,
    queue: Queue,
    ask: Ask,
    node: Node,
    victims: list[Allocation],
    leaving: dict[str, Resource],
    also_leaving: Resource | None = None,
) -> str | None:
    """Why the victims do not free the ask's room on ``node`` with none to spare (``None``: they do);
    ``also_leaving``: what other victims on the node, not under notice yet, free."""
    free = state.room_once_victims_leave(node)
    if also_leaving:
        res.add_into(free, also_leaving)
    room = res.add(free, res.total(v.resource for v in victims))
    if not res.fits(ask.resource, room):
        return "victims do not free enough room"
    for v in victims:
        if res.fits(ask.resource, res.sub(room, v.resource)) and (
            v.opportunistic or _headroom_without(state, queue, ask, leaving, v)
        ):
            return f"victim {v.id} is not needed (the victim set is not minimal)"
    return None


def _headroom_without(
    state: PartitionState, queue: Queue, ask: Ask, leaving: dict[str, Resource], victim: Allocation
) -> bool:
    """Whether every ``max`` would still allow the ask if ``victim`` stayed."""
    staying = {path: dict(amount) for path, amount in leaving.items()}
    for q in victim.queue.lineage():
        res.add_into(staying.setdefault(q.path, {}), victim.resource)
    return state.headroom_allows(queue, ask.resource, staying)


def _commit_one(
    cache: Writer,
    pl: p.Victimized,
    quotas: Quotas | None,
    lose_left: dict[str, Resource],
    proposal: p.PreemptionProposal,
    requests: Requests,
    waiting: list[str],
) -> None:
    state = cache.state
    config = state.config
    assert config is not None
    app = state.apps[pl.app]
    ask = app.asks[pl.ask]
    if not pl.victims:  # a gang's member on room free now: allocated in the same step as its gang's reservations
        if not proposal.observe_only:
            cache.allocate(pl.app, pl.ask, pl.node)
        return
    victims = [state.allocations[v] for v in pl.victims]
    # Per victim queue: what its net usage holds above its ideal, and as people read it. Noticing changes
    # no state (the reservation marks the victims after all are noticed): the same for every victim here.
    excess: dict[str, tuple[Resource, str]] = {}
    required = required_node_rule(state, ask, pl.node, quotas is None)  # the same for every victim here

    def over_its_ideal(queue: Queue, ideal: Resource) -> tuple[Resource, str]:
        known = excess.get(queue.path)
        if known is None:
            over = res.clamp_min_zero(res.sub(net_usage(queue), ideal))
            known = excess[queue.path] = (over, human_resource(over))
        return known

    def notice(v: Allocation, reservation: str) -> dict[str, Any] | None:
        ideal = quotas.ideal.get(v.queue.path, {}) if quotas is not None else {}
        over_ideal: Resource = {}
        if v.opportunistic:
            why = f"{d.KILL_OPPORTUNISTIC}: first to go"
        elif required:
            why = f"{v.queue.path}: priority {v.priority} on {pl.node}, required by an ask of priority {ask.priority}"
            if quotas is not None and v.queue.path in lose_left:
                spend(lose_left[v.queue.path], quotas.may_lose.get(v.queue.path, {}), v.resource)
        elif quotas is not None:
            left = lose_left.get(v.queue.path)
            if left is not None and res.any_positive(left):
                shared, text = over_its_ideal(v.queue, ideal)
                over_ideal = dict(shared)  # each decision its own
                why = f"{v.queue.path} over its ideal by {text}"
            else:
                why = f"{v.queue.path} down to its guarantee at most, sparing an app that opted out of preemption"
            if left is not None:
                spend(left, quotas.may_lose.get(v.queue.path, {}), v.resource)
        elif v.priority < ask.priority:
            why = f"{v.queue.path}: priority {v.priority} below the ask's {ask.priority}"
        else:
            owner = state.apps[v.app].user
            why = f"{v.queue.path}: user {owner!r} above its limit, for user {app.user!r} within theirs"
        if requests.wants(v):
            requests.add(
                v,
                f"{why}; {pl.reason}",
                reservation=reservation,
                for_ask=pl.ask,
                for_app=pl.app,
                for_queue=app.queue.path,
                for_resource=ask.resource,
            )
            return None
        return {
            "cost": pl.cost,
            "reason": f"{why}; {pl.reason}; node {pl.node} cost {pl.cost}",
            "victim_queue_ideal": ideal,
            "over_ideal": over_ideal,
        }

    fulfilled = preempt(
        cache,
        ask,
        pl.node,
        victims,
        deadline=state.now + config.preemption.grace,
        policy=proposal.policy,
        notice=notice,
        observe_only=proposal.observe_only,
    )
    if not fulfilled and not proposal.observe_only:
        waiting.append(pl.node)  # a victim waits on its app's request: fulfilled once the requests are open
