"""Resource-based preemption (YARN-45's preemption contract), the cache's side, sans-IO.

For an app whose ``app_added`` says ``preemption_contract``, a committed preemption (any policy) gives
its victims no notice one by one: the app gets one ``preempt_request`` per round naming what to give
back (the sum of its victims), the deadline (``preemption.grace``), the beneficiary and the containers
the policy chose, and its application master chooses which containers to release. The victims stay
under notice meanwhile, so their room is handled as any preemption's (a sniper reservation holds it).
What the app gives back counts where it serves the request's beneficiaries: a named container's room
is its reservation's; another container it releases counts only when its room serves a beneficiary as
the release is handled (:func:`serve`: the reservation on that node fulfilled, or the beneficiary
placed there instead of on its reservation's node), and then the named containers that reservation
waited for count as given back in its stead. A request without beneficiaries (the proportional
baseline's) counts any release. Every tick each open request is settled (:func:`settle`): withdrawn
when the policy no longer needs any of its victims, closed when the app gave back enough, and at the
deadline what is still missing is killed, the containers it named still under notice first, then the
app's newest, just enough to cover it, never more of them than the app's disruption budget has room
for (the named ones are under notice, counted already). A request that closes leaves alone the
containers a later request to its app names again: their notice and their room are that request's.
Invariants: no container of such an app is killed by preemption before its request's deadline; room
the app gives back goes to the request's beneficiaries before any other ask (the app's re-asks
included), so a request closes given back only once each beneficiary was placed or holds its room.
"""

from __future__ import annotations

from collections.abc import Iterable

from sniper.core import resources as res
from sniper.core.gang import Held
from sniper.core.preemption.rules import disruption_room
from sniper.core.resources import Resource
from sniper.core.state import Allocation, Contract, PartitionState, Reservation, allocation_number
from sniper.core.units import human_resource
from sniper.core.writer import Writer
from sniper.messages import decisions as d
from sniper.messages import protocol as p

KILL_REASON = d.KILL_AT_REQUEST_DEADLINE  # how a kill at a request's deadline's reason begins


class Requests:
    """The requests of one committed proposal: its victims of contract apps, one request per app."""

    def __init__(self, cache: Writer, policy: str, observe_only: bool) -> None:
        self.cache = cache
        self.policy = policy
        self.observe_only = observe_only
        self.by_app: dict[str, list[tuple[Allocation, d.ContractContainer]]] = {}
        self.reasons: dict[str, str] = {}

    def wants(self, victim: Allocation) -> bool:
        """Whether ``victim`` goes into a request rather than getting its own notice (opportunistic
        containers never do: they are killed at once)."""
        app = self.cache.state.apps.get(victim.app)
        return app is not None and app.contract and not victim.opportunistic

    def add(
        self,
        victim: Allocation,
        reason: str,
        *,
        reservation: str = "",
        for_ask: str = "",
        for_app: str = "",
        for_queue: str = "",
        for_resource: Resource | None = None,
    ) -> None:
        container = d.ContractContainer(
            allocation=victim.id,
            node=victim.node,
            resource=victim.resource,
            reservation=reservation,
            for_ask=for_ask,
            for_app=for_app,
            for_queue=for_queue,
            for_resource=dict(for_resource or {}),
        )
        self.by_app.setdefault(victim.app, []).append((victim, container))
        self.reasons.setdefault(victim.app, reason)

    def publish(self, deadline: float) -> None:
        """One ``preempt_request`` per app, and the open request on the state (unless observe-only)."""
        cache = self.cache
        for app, named in self.by_app.items():
            first = named[0][1]
            victims = [v for v, _ in named]
            resource = res.total(v.resource for v in victims)
            rid = f"preq-{cache.next_id('contract')}"
            cache.decide(
                d.PreemptRequest,
                request=rid,
                app=app,
                queue=victims[0].queue.path,
                resource=resource,
                deadline=deadline,
                containers=[c for _, c in named],
                for_ask=first.for_ask,
                for_app=first.for_app,
                for_queue=first.for_queue,
                policy=self.policy,
                reason=self.reasons[app],
                observe_only=self.observe_only,
            )
            if self.observe_only:
                continue
            # A victim whose notice was cancelled in the same commit counts as no longer needed.
            cancelled = res.total(v.resource for v in victims if not v.preempting)
            cache.commit(
                p.ContractSet(
                    contract=rid,
                    app=app,
                    resource=resource,
                    deadline=deadline,
                    victims=[v.id for v in victims],
                    policy=self.policy,
                    cancelled=cancelled,
                    beneficiaries=any(c.for_ask for _, c in named),
                )
            )
        self.by_app.clear()


def settle(cache: Writer) -> None:
    """Close what can be closed among the open requests (called every tick, before overdue kills)."""
    state = cache.state
    for contract in list(state.contracts.values()):
        if contract.app not in state.apps:
            _end(cache, contract, "withdrawn", {}, "the application finished")
        elif not res.any_positive(contract.need()) and not res.fits(contract.resource, contract.released):
            _end(cache, contract, "withdrawn", {}, "the policy no longer needs any container it named")
        elif not res.any_positive(contract.missing()):
            _cancel_named(cache, contract, f"preemption request {contract.id}: the application master gave back enough")
            _end(cache, contract, "given_back", {}, "the application master gave back enough")
        elif contract.deadline <= state.now:
            killed = _enforce(cache, contract)
            _cancel_named(cache, contract, f"preemption request {contract.id}: covered by the containers killed")
            _end(cache, contract, "enforced", killed, "deadline passed: the newest containers covered what was missing")


def _enforce(cache: Writer, contract: Contract) -> Resource:
    """Container-based preemption of what is still missing, killed now: the containers the request
    named that still run, newest first, then the app's other containers, newest first (never its
    application master unless the policy named it, as YARN's), just enough to cover it. The named
    ones go first because the room the policy chose (a sniper reservation's node) is theirs."""
    state = cache.state
    missing = contract.missing()
    named_elsewhere = {v for c in state.contracts.values() if c is not contract for v in c.victims}
    app = state.apps[contract.app]
    named = set(contract.victims)
    candidates = [
        (a.id, a.start, a.resource)
        for a in (state.allocations[aid] for aid in app.allocations)
        if (not a.am or a.id in named) and not a.opportunistic and not a.killed and a.id not in named_elsewhere
    ]
    noticed = [c for c in candidates if c[0] in named and state.allocations[c[0]].preempting]
    picked = newest_covering(noticed, missing)
    rest = res.clamp_min_zero(res.sub(missing, res.total(state.allocations[aid].resource for aid in picked)))
    if res.any_positive(rest):
        others = newest_covering([c for c in candidates if c[0] not in named], rest)
        room = disruption_room(app)
        picked += others if room is None else others[:room]
    chosen = [state.allocations[aid] for aid in picked]
    covered = res.total(a.resource for a in chosen)
    fresh = [a.id for a in chosen if not a.preempting]
    if fresh:
        cache.commit(p.VictimsMarked(victims=fresh, deadline=state.now, policy=contract.policy))
    reason = f"{KILL_REASON} {contract.id}: deadline passed, {human_resource(missing)} still missing"
    cache.kill(chosen, "request_deadline", reason, missing)
    return covered


def serve(cache: Writer, app_name: str, node_name: str, room: Resource) -> None:
    """``app_name`` released a container of ``room`` on ``node_name`` of its own accord: that room goes to
    the beneficiaries of the app's open requests, oldest request first, each beneficiary's reservation by
    deadline, while the request still misses something. A reservation on that node whose room is now
    free is fulfilled; one elsewhere ends and its beneficiary is placed here when it fits the room no one
    else holds (the node's free room, within every ``max``, node selector and node reservation). Either
    way the named containers that reservation was waiting for keep running and count as given back
    (:class:`p.ContractServed`): the app gave their room. A beneficiary that does not fit here yet but
    will once more of the app's containers here are released gathers the room (:func:`_gather`): it is
    held for it until it fits, its reservation ends or the request closes. Room no beneficiary can use
    counts for nothing; the request's deadline still kills what is missing, the named containers first."""
    state = cache.state
    for contract in [c for c in state.contracts.values() if c.app == app_name and c.beneficiaries]:
        for r in _waiting(state, contract):
            if contract.id not in state.contracts or not res.any_positive(contract.missing()):
                break
            if r.id not in state.reservations:
                continue
            if r.node == node_name:
                if not cache.fulfillable(r):
                    continue
                here = [x for x in _waiting(state, contract) if x.node == node_name]
                cache.fulfil_reservations(node_name)  # r, and any other the room now holds
                served = [x for x in here if x.id not in state.reservations]
            else:
                gathered = let_go(cache, r) if r.hold is not None and r.hold[0] == node_name else {}
                if cache.check_placement(r.app, r.ask, node_name) is None:
                    why = f"its beneficiary was placed on room {app_name} gave back on {node_name} ({contract.id})"
                    cache.move_beneficiary(r, node_name, why)
                    served = [r]
                elif _gather(cache, contract, r, node_name, res.add(gathered, room)):
                    return  # the room is held for r
                else:
                    continue
            kept = [
                v
                for x in served
                for v in x.victims
                if v in contract.victims and v in state.allocations and not state.allocations[v].preempting
            ]
            if kept:
                cache.commit(p.ContractServed(contract=contract.id, victims=kept))


def let_go(cache: Writer, r: Reservation) -> Resource:
    """Let go the given-back room ``r`` holds (free again: for a placement check on its node, or because
    the node changed); what it held."""
    if r.hold is None:
        return {}
    node_name, held = r.hold
    cache.commit(p.GiveBackHeld(reservation=r.id, contract=r.hold_contract, node=node_name, resource={}))
    return held


def _gather(cache: Writer, contract: Contract, r: Reservation, node_name: str, room: Resource) -> bool:
    """Hold ``room`` (given back on ``node_name``, as much of it as is free and ``r`` asks for) for ``r``'s
    beneficiary when it would fit there once the app's other containers there are released too (its
    application master's choice: none is put under notice), every placement rule but the room kept.
    A reservation gathers on one node at a time: the first one where it can."""
    state = cache.state
    node = state.nodes.get(node_name)
    ask = state.ask((r.app, r.ask))
    if node is None or ask is None or (r.hold is not None and r.hold[0] != node_name):
        return False
    app = state.apps[contract.app]
    theirs = res.total(
        a.resource
        for a in (state.allocations[aid] for aid in app.allocations)
        if a.node == node_name and not a.am and not a.opportunistic and not a.preempting
    )
    if not res.any_positive(theirs):
        return False
    if cache.check_placement(r.app, r.ask, node_name, held=Held.freeing(ask, node, theirs)) is not None:
        return False
    amount = res.component_min(res.component_min(room, r.resource), res.clamp_min_zero(node.free()))
    if not res.any_positive(amount):
        return False
    cache.commit(p.GiveBackHeld(reservation=r.id, contract=contract.id, node=node_name, resource=amount))
    return True


def _named_again(state: PartitionState, contract: Contract) -> set[str]:
    """The containers a request opened after ``contract`` names too: their notice is that request's (a
    container under notice is never a victim, so it is named again only once its notice was cancelled),
    and so is the room its reservation counts on."""
    later = list(state.contracts)[list(state.contracts).index(contract.id) + 1 :]
    return {v for cid in later for v in state.contracts[cid].victims}


def _waiting(state: PartitionState, contract: Contract) -> list[Reservation]:
    """The reservations holding room for the beneficiaries of ``contract``'s named containers still under
    notice, by deadline."""
    rids = {
        a.reservation
        for a in (state.allocations.get(v) for v in contract.victims)
        if a is not None and a.preempting and not a.killed and a.reservation is not None
    }
    held = [state.reservations[rid] for rid in rids if rid in state.reservations]
    return sorted(held, key=lambda r: (r.deadline, r.id))


def newest_covering(candidates: Iterable[tuple[str, float, Resource]], need: Resource) -> list[str]:
    """Ids of the newest ``(id, start, resource)`` candidates (latest start first, ties by the later
    id) until they cover ``need``, skipping any that frees nothing still missing: what the deadline
    kills, and what the simulator's application master gives back."""
    chosen: list[str] = []
    covered: Resource = {}
    for aid, _, resource in sorted(candidates, key=lambda c: (-c[1], -allocation_number(c[0]))):
        missing = res.clamp_min_zero(res.sub(need, covered))
        if not res.any_positive(missing):
            break
        if any(resource.get(k, 0) > 0 for k, v in missing.items() if v > 0):
            chosen.append(aid)
            res.add_into(covered, resource)
    return chosen


def _cancel_named(cache: Writer, contract: Contract, reason: str) -> None:
    """The named victims still under notice and not killed keep running (those a later request names
    again aside: their notice and their room are that request's); reservations that counted on their
    room end when it can no longer be promised."""
    state = cache.state
    named_again = _named_again(state, contract)
    keep = [
        a
        for a in (state.allocations.get(v) for v in contract.victims)
        if a is not None and a.preempting and not a.killed and a.id not in named_again
    ]
    if not keep:
        return
    cache.cancel_notices(keep, reason)
    for name in sorted({a.node for a in keep}):
        node = state.nodes.get(name)
        if node is not None and node.reservations:
            cache.keep_reservations(node, node.capacity, node.schedulable, f"{reason}; its victims keep running")


def _end(cache: Writer, contract: Contract, outcome: str, killed: Resource, reason: str) -> None:
    app = cache.state.apps.get(contract.app)
    cache.decide(
        d.PreemptRequestEnded,
        request=contract.id,
        app=contract.app,
        queue="" if app is None else app.queue.path,
        outcome=outcome,
        released=dict(contract.released),
        killed=killed,
        reason=reason,
    )
    cache.commit(p.ContractGone(contract=contract.id))
