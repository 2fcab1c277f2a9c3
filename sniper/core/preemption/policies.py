"""Preemption policies as sans-IO classes registered by name; each runs in its own actor.

A policy sees the partition through a view replica. ``round`` (every ``interval``) returns either a
placement request for the allocator (sniper and intra-queue: the allocator places starving asks in
preemption mode with the same placement code) or a preemption proposal for the cache (the YARN
proportional baseline, which frees resources without a beneficiary). ``on_reply`` turns the
allocator's placements into a proposal. No clock, no I/O: ``now`` is an argument.
Before preempting anything, the inter-queue policies cancel node reservations held by queues above
their ideal that block a queue below it (:func:`sniper.core.node_reservation.to_dereserve`): such a
round proposes only those de-reservations, and later rounds preempt for what they did not solve.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sniper.core import node_reservation
from sniper.core import resources as res
from sniper.core.config import PartitionConfig, PreemptionConfig
from sniper.core.limits import Limits
from sniper.core.opportunistic import first_victims
from sniper.core.preemption.app_snapshots import AppSnapshots
from sniper.core.preemption.idle_round import no_pending_demand
from sniper.core.preemption.mask import PreemptionMask
from sniper.core.preemption.min_runtime import next_of_age
from sniper.core.preemption.quotas import Quotas, compute_quotas, net_usage
from sniper.core.preemption.rules import required_node_leaves
from sniper.core.preemption.view import snapshot_from_state
from sniper.core.state import PartitionState
from sniper.core.yarn.idle_view import LeafDeadzones, chooses_nothing, leaf_deadzones
from sniper.core.yarn.proportional import ProportionalConfig, ProportionalPolicy
from sniper.messages import protocol as p

Output = p.PlacementRequest | p.PreemptionProposal | None

# Changes after which a masked ask may have become placeable: room appeared somewhere.
ROOM_CHANGES = frozenset({p.NodeSet, p.AllocationGone, p.ReservationGone, p.NodeReservationGone, p.ConfigSet})


class Policy(Protocol):
    name: str
    config: PreemptionConfig
    mask: PreemptionMask | None
    budget_refusals: int  # containers passed over for their app's disruption budget, summed over rounds
    # When the last round's first candidate too young to take (``preemption.min.runtime``) comes of age,
    # if that round was held back by one; the policy tries again then.
    wake_at: float | None

    def round(self, state: PartitionState, view_seq: int, now: float) -> Output: ...

    def on_reply(self, reply: p.PlacementReply, now: float) -> p.PreemptionProposal | None: ...

    def on_change(self, change: p.ChangeMsg) -> None: ...


PolicyType = Callable[[str, PreemptionConfig], Policy]
REGISTRY: dict[str, PolicyType] = {}


def register_policy(name: str) -> Callable[[PolicyType], PolicyType]:
    def wrap(cls: PolicyType) -> PolicyType:
        REGISTRY[name] = cls
        return cls

    return wrap


def make_policy(name: str, partition: str, config: PreemptionConfig) -> Policy:
    try:
        return REGISTRY[name](partition, config)
    except KeyError:
        raise ValueError(f"unknown preemption policy {name!r}; registered: {', '.join(sorted(REGISTRY))}") from None


def enabled_policies(config: PreemptionConfig) -> list[str]:
    """The policies a partition's ``preemption`` section turns on; ``policy: none`` turns every one off,
    intra-queue preemption included."""
    if config.policy == "none":
        return []
    return [config.policy, "intra_queue"] if config.intra_queue else [config.policy]


class _Placing:
    """Shared by the policies that ask the allocator to place in preemption mode."""

    name = "placing"
    intra = False

    def __init__(self, partition: str, config: PreemptionConfig) -> None:
        self.partition = partition
        self.config = config
        self.mask: PreemptionMask | None = PreemptionMask(config.mask_ttl)
        self.rounds = 0
        self.waiting: str | None = None  # the request whose reply has not come back
        self.waiting_since = 0.0
        self.budget_refusals = 0  # containers the rounds passed over for their app's disruption budget
        self.wake_at: float | None = None

    def on_change(self, change: p.ChangeMsg) -> None:
        if type(change) in ROOM_CHANGES and self.mask is not None:
            self.mask.clear()

    def _request(self, state: PartitionState, view_seq: int, now: float, quotas: Quotas) -> p.PlacementRequest | None:
        mask = self.mask
        assert mask is not None
        mask.expire(now)
        if self.waiting is not None and now - self.waiting_since < 2 * self.config.interval:
            return None  # one request in flight at a time (a lost reply expires)
        required_node = self.config.required_node and not self.intra  # the inter-queue policy's to serve
        if (not quotas.beneficiaries or (not self.intra and not quotas.may_lose)) and not (
            required_node and required_node_leaves(state)
        ):
            return None
        self.rounds += 1
        self.waiting = f"{self.partition}/{self.name}-{self.rounds}"
        self.waiting_since = now
        return p.PlacementRequest(
            partition=self.partition,
            id=self.waiting,
            policy=self.name,
            view_seq=view_seq,
            budget=quotas.budget,
            quotas=quotas.may_lose,
            beneficiaries=list(quotas.beneficiaries),
            targets={b: quotas.ideal[b] for b in quotas.beneficiaries if b in quotas.ideal},
            mask=mask.keys(),
            min_missed=self.config.min_missed_opportunities,
            victim_cost=self.config.victim_cost,
            grace=self.config.grace,
            max_candidate_nodes=self.config.max_candidate_nodes,
            intra_queue=self.intra,
            required_node=required_node,
        )

    def on_reply(self, reply: p.PlacementReply, now: float) -> p.PreemptionProposal | None:
        if reply.id != self.waiting:
            return None
        self.waiting = None
        self.wake_at = reply.wake_at
        if self.mask is not None:
            self.mask.add(reply.unplaceable, now, reply.wake_at)
            self.mask.hits += reply.mask_hits
        self.budget_refusals += reply.budget_refusals
        if not reply.placements:
            return None
        return p.PreemptionProposal(
            partition=self.partition,
            id=reply.id,
            view_seq=reply.view_seq,
            policy=self.name,
            placements=reply.placements,
            observe_only=self.config.observe_only,
        )


@register_policy("sniper")
class SniperPolicy(_Placing):
    """Inter-queue sniper preemption: quotas from the ideal, targeted placement by the allocator."""

    name = "sniper"

    def __init__(self, partition: str, config: PreemptionConfig) -> None:
        super().__init__(partition, config)
        self.last_quotas: Quotas | None = None
        self.last_view: tuple[PartitionState, int] | None = None  # state and version ``last_quotas`` came from
        self.rounds_computed = 0  # rounds that computed the ideal assignment and quotas
        self.rounds_reused = 0  # rounds on an unchanged view, which reused the last quotas
        self.rounds_skipped = 0  # rounds that could change nothing (:mod:`sniper.core.preemption.idle_round`)

    def round(self, state: PartitionState, view_seq: int, now: float) -> Output:
        if self.waiting is None and self.mask is not None and not self.mask and no_pending_demand(state):
            # No beneficiary, nothing to de-reserve, no required node: the round would output nothing.
            # Its quotas would have no beneficiary, which is all the driver reads of them.
            self.rounds_skipped += 1
            self.last_quotas = Quotas({}, {}, (), {})
            self.last_view = None
            return None
        # Quotas are a function of the view alone, the clock aside: on the same state object at the same
        # version (no change but the clock's applied, no reset) the last round's are reused.
        last = self.last_view
        if last is not None and last[0] is state and last[1] == state.version and self.last_quotas is not None:
            quotas = self.last_quotas
            self.rounds_reused += 1
        else:
            quotas = compute_quotas(state, self.config)
            self.last_view = (state, state.version)
            self.rounds_computed += 1
        if not quotas.same_as(self.last_quotas) and self.mask is not None:
            self.mask.clear()
        self.last_quotas = quotas
        usage = {path: net_usage(q) for path, q in state.queues.items()}
        nodes = node_reservation.to_dereserve(state, usage, quotas.ideal)
        if nodes and not self.config.observe_only:
            return dereservation(self.partition, self.name, nodes, view_seq, now)
        return self._request(state, view_seq, now, quotas)


@register_policy("intra_queue")
class IntraQueuePolicy(_Placing):
    """Inside one leaf queue, asks of higher priority preempt lower-priority containers of other apps, and
    users within their limits preempt users above theirs (:mod:`sniper.core.limits`)."""

    name = "intra_queue"
    intra = True

    def round(self, state: PartitionState, view_seq: int, now: float) -> Output:
        beneficiaries: list[str] = []
        for path, queue in state.queues.items():
            if not queue.is_leaf or not res.any_positive(queue.pending):
                continue
            running = [state.allocations[a] for app in queue.apps.values() for a in app.allocations]
            lowest = min((a.priority for a in running if not a.am and not a.preempting), default=None)
            if lowest is None:
                continue
            top = max((ask.priority for app in queue.waiting.values() for ask in app.pending_asks), default=None)
            if top is not None and top > lowest:
                beneficiaries.append(path)
        limits = Limits.of(state)
        if limits is not None:
            beneficiaries += [q.path for q in limits.over_limit_queues() if q.path not in beneficiaries]
        budget = {k: int(v * self.config.total_preemption_per_round) for k, v in state.capacity.items()}
        quotas = Quotas({}, {}, tuple(beneficiaries), budget)
        return self._request(state, view_seq, now, quotas)


@register_policy("proportional")
class ProportionalBaseline:
    """YARN's ProportionalCapacityPreemptionPolicy (YARN-569): frees resources, targets nobody."""

    name = "proportional"

    def __init__(self, partition: str, config: PreemptionConfig) -> None:
        self.partition = partition
        self.config = config
        self.mask: PreemptionMask | None = None
        self.policy = ProportionalPolicy(
            ProportionalConfig.from_preemption_config(config, resource_calculator="dominant")
        )
        self.rounds = 0
        self.idle_view: tuple[PartitionState, int] | None = None  # state and version of a round that chose none
        self.wake_at: float | None = None  # when that round's first young container comes of age
        self.snapshots = AppSnapshots()  # the apps' snapshots of the last round, rebuilt when changed
        self.budget_refusals = 0
        # The config the last guard read and its leaves' deadzones (a function of the config alone).
        self.deadzones: tuple[PartitionConfig, LeafDeadzones] | None = None
        # Guaranteed containers YARN's selection chose whose room opportunistic containers covered once:
        # chosen again, they go themselves (the opportunistic room did not bring their queue down to its
        # ideal, and opportunistic work re-placed there would be covered round after round).
        self.covered: set[str] = set()

    def on_change(self, change: p.ChangeMsg) -> None:
        self.snapshots.on_change(change)
        if isinstance(change, p.AllocationGone):
            self.covered.discard(change.allocation)

    def on_reply(self, reply: p.PlacementReply, now: float) -> p.PreemptionProposal | None:
        return None

    def settled(self, state: PartitionState) -> bool:
        """Whether the last round ran on ``state`` as it is (the clock aside) and chose no container, and no
        container too young to take then has come of age since (:attr:`wake_at`)."""
        idle = self.idle_view
        young = self.wake_at is not None and state.now >= self.wake_at
        return idle is not None and idle[0] is state and idle[1] == state.version and not young

    def chooses_nothing(self, state: PartitionState) -> bool:
        """Whether a round on ``state`` provably outputs nothing, read off the view: every leaf within its
        deadzone, and no node reservation to cancel (none, or no leaf with pending demand to cancel it for)."""
        no_dereservation = not state.node_reservations or not any(
            q.is_leaf and res.any_positive(q.pending) for q in state.queues.values()
        )
        if not no_dereservation or state.config is None:
            return False
        if self.deadzones is None or self.deadzones[0] is not state.config:
            self.deadzones = (state.config, leaf_deadzones(state.config, self.policy.config))
        return chooses_nothing(state, self.deadzones[1])

    def round(self, state: PartitionState, view_seq: int, now: float) -> Output:
        if state.config is None or not state.capacity:
            return None
        now_ms = round(now * 1000)
        # A round selects from the view alone but for the marks it tracks and the containers too young to
        # take: on the view of a round that chose no container, with no tracked mark to expire and no young
        # container come of age now, it would choose none again (nor de-reserve: that reads the view alone).
        if self.settled(state) and not self.policy.forgets_at(now_ms):
            return None
        if self.chooses_nothing(state):
            # The round would choose no container, cancel no reservation and change nothing but the marks'
            # expiry (:mod:`sniper.core.yarn.idle_view`): no snapshot, no fix-point.
            if not self.config.observe_only:
                self.policy.expire(now_ms)
            self.idle_view = (state, state.version)
            self.wake_at = next_of_age(state, state.now)
            return None
        snapshot = snapshot_from_state(state, with_containers=True, kept=self.snapshots)
        result = self.policy.round(snapshot, now_ms)
        self.budget_refusals += len(result.budget_refused)
        self.idle_view = None if result.candidates else (state, state.version)
        self.wake_at = None if result.candidates else next_of_age(state, state.now)
        usage = {path: res.add(q.allocated, q.reserved) for path, q in state.queues.items()}
        nodes = node_reservation.to_dereserve(
            state, usage, {path: figures.ideal_assigned for path, figures in result.queues.items()}
        )
        if nodes and not self.config.observe_only:
            # YARN's preemptFrom drops reservations first; the running containers wait a round.
            self.policy.forget(c.container.id for c in result.marked)
            return dereservation(self.partition, self.name, nodes, view_seq, now)
        # Observe-only: YARN's policy marks nothing; publish what it selected (flagged by the cache).
        chosen = result.candidates if self.config.observe_only else result.marked
        victims = [c.container.id for c in chosen]
        if not self.config.observe_only and victims:
            # Opportunistic containers go first: they cover what YARN's selection frees before any of it,
            # once per chosen container (one chosen again after that goes itself).
            selected = [state.allocations[v] for v in victims if v in state.allocations]
            again = [a for a in selected if a.id in self.covered]
            fresh = [a for a in selected if a.id not in self.covered]
            kept = first_victims(state, fresh)
            victims = [a.id for a in kept] + [a.id for a in again]
            spared = {a.id for a in fresh} - set(victims)
            self.covered |= spared
            self.policy.forget(spared)
        if not victims:
            return None
        self.rounds += 1
        return p.PreemptionProposal(
            partition=self.partition,
            id=f"{self.partition}/proportional-{self.rounds}",
            view_seq=view_seq,
            policy=self.name,
            victims=victims,
            observe_only=self.config.observe_only,
        )


def dereservation(partition: str, policy: str, nodes: list[str], view_seq: int, now: float) -> p.PreemptionProposal:
    """A round that only cancels node reservations (YARN capacity monitor's cheapest action)."""
    return p.PreemptionProposal(
        partition=partition,
        id=f"{partition}/{policy}-dereserve-{round(now * 1000)}",
        view_seq=view_seq,
        policy=policy,
        dereserve=nodes,
    )
