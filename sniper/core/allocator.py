"""The allocator's sans-IO core: a view replica, proposals in flight, missed opportunities, cycles.

Invariants: view deltas are applied strictly in sequence order (a duplicate is ignored, a gap asks
for a reset); every container proposed stays counted in ``allocating`` until the cache's outcome for
that proposal arrives, so it is never proposed twice; an ask's missed-opportunity count grows by one
per cycle in which it was a candidate (or only an ancestor's ``max`` kept it out) and got nothing,
and drops to zero when it gets a container. A reserved beneficiary still competes for free room.
"""

from __future__ import annotations

import dataclasses

from sniper.core import node_reservation, opportunistic, topology
from sniper.core import resources as res
from sniper.core.allocation import CandidateFilter, FreeRoomPlacer, find_ask_candidates, try_allocate
from sniper.core.limits import has_limits
from sniper.core.placement_memo import RememberingPlacer
from sniper.core.placing import hold_room, release_room
from sniper.core.replica import ViewReplica
from sniper.core.state import Ask, AskKey, Node, PartitionState
from sniper.messages import protocol as p

DEFAULT_BATCH = 4096
# Changes after which a cycle may place something it could not place before.
ENABLING = frozenset({p.AskSet, p.AllocationGone, p.NodeSet, p.ReservationGone, p.NodeReservationGone, p.ConfigSet})


@dataclasses.dataclass(slots=True)
class AllocatorStats:
    cycles: int = 0
    proposed: int = 0
    accepted: int = 0
    rejected: int = 0
    resets: int = 0


class Allocator(ViewReplica):
    def __init__(self, partition: str, *, batch: int = DEFAULT_BATCH) -> None:
        super().__init__(partition)
        self.batch = batch
        self.inflight: dict[str, list[tuple[Ask, Node]]] = {}
        self.reserving: dict[str, list[tuple[AskKey, str]]] = {}  # node reservations proposed, not answered
        self.missed: dict[AskKey, int] = {}
        self.last_tried: frozenset[AskKey] = frozenset()  # the asks the last cycle tried
        self.stats = AllocatorStats()
        # Free-room placement, failures remembered until a node changes (any FreeRoomPlacer decides the same).
        self.placer: FreeRoomPlacer = RememberingPlacer()
        self.dirty = False  # something changed since the last cycle that may allow an allocation
        self._next_proposal = 0
        self._rebuilds = 0  # the state's queue rebuilds seen (config changes, SLO plans' boundaries)
        # The state object and version a cycle placed nothing on, while nothing was held or answered since.
        self._fruitless: tuple[PartitionState, int] | None = None

    # ------------------------------------------------------------------ view replica hooks

    def on_reset(self) -> None:
        self._fruitless = None
        self.stats.resets += 1
        self.inflight.clear()  # the reset state already holds whatever the cache committed
        self.reserving.clear()
        self._rebuilds = self.state.rebuilds
        self.dirty = True

    def on_change(self, change: p.ChangeMsg) -> None:
        kind = type(change)
        if kind in ENABLING:
            self.dirty = True
        elif kind is p.AskGone:
            self.missed.pop((change.app, change.ask), None)  # type: ignore[union-attr]

    def on_outcome(self, outcome: p.ProposalOutcome) -> None:
        self.reserving.pop(outcome.proposal, None)
        self._fruitless = None
        placed = self.inflight.pop(outcome.proposal, None)
        if placed is None:
            return
        self.stats.accepted += outcome.accepted
        self.stats.rejected += len(outcome.rejected)
        release_room(self.state, placed)
        if outcome.rejected:
            self.dirty = True

    def after_delta(self, delta: p.ViewDelta) -> None:
        if self.state.rebuilds != self._rebuilds:
            self._rebuilds = self.state.rebuilds
            self.dirty = True
            self._recount_inflight()

    def _recount_inflight(self) -> None:
        """Queues were rebuilt (a config change, an SLO plan accepted, dropped or at a boundary): re-add
        what is still in flight to the new ones."""
        for placed in self.inflight.values():
            for ask, _ in placed:
                if ask.opportunistic:
                    continue
                for q in ask.app.queue.lineage():
                    for k, v in ask.resource.items():
                        q.allocating[k] = q.allocating.get(k, 0) + v

    def hold(self, proposal: str, placed: list[tuple[Ask, Node]]) -> None:
        """Count ``placed`` as in flight until the cache answers ``proposal`` (already held by try_allocate)."""
        self._fruitless = None
        self.inflight[proposal] = placed

    # ------------------------------------------------------------------ the cycle

    def cycle(self, budget: int | None = None) -> p.AllocationProposal | None:
        """One allocation cycle (the cross-queue design): candidates, placement, missed opportunities, one proposal.

        A cycle on the state a cycle placed nothing on (the clock aside: same object, same version, no
        room held or answered since, no reservation whose deadline the clock moves) would try the same
        asks and place nothing again: it only counts their missed opportunity. A cycle where no ask
        waits (no queue has pending demand, no reservation, no opportunistic ask) tries nothing."""
        self.dirty = False
        n_alloc = self.batch if budget is None else budget
        state = self.state
        fruitless = self._fruitless
        if fruitless is not None and fruitless[0] is state and fruitless[1] == state.version and budget is None:
            self.stats.cycles += 1
            missed = self.missed
            for key in self.last_tried:
                missed[key] = missed.get(key, 0) + 1
            return None
        if n_alloc > 0 and _nothing_waits(state):
            self.stats.cycles += 1
            self.last_tried = frozenset()
            if budget is None:
                self._fruitless = (state, state.version)
            return None
        known = _known_fruitless(state, self.placer, n_alloc)
        walk = _place_guaranteed(state, n_alloc, self.placer) if known is None else known
        placed_all = walk.placed
        n_alloc -= len(placed_all)
        reserved = place_reserved(state, n_alloc)  # after the queues in the ideal assignment's order
        placed_all.extend(reserved)
        n_alloc -= len(reserved)
        self.stats.cycles += 1
        plan = opportunistic.OpportunisticPlan()
        if n_alloc <= 0:
            self.dirty = True  # the batch ran out before the candidates did: go on next time
        elif walk.failed or state.opportunistic_asks:
            # Guaranteed asks first: evictions for those the free room could not hold, then the
            # opportunistic asks on the room no guaranteed ask can use now.
            failed = walk.failed
            starving = sorted((a for key in failed if (a := state.ask(key)) is not None), key=lambda a: a.sort_key)
            plan = opportunistic.plan(state, starving, n_alloc)
            placed_all.extend(plan.placed)
            placed_all.extend((ask, node) for ask, node, _ in plan.evictions)
        reserve = self._node_reservations(walk, placed_all)
        self._count_missed(walk, placed_all)
        if not placed_all and not reserve:
            # (A node reservation needs an ask overtaken in the same cycle: none, when nothing was placed.)
            if budget is None and not state.reservations:
                self._fruitless = (state, state.version)
            return None
        return self._propose(placed_all, plan, reserve)

    def _node_reservations(self, walk: _Walk, placed: list[tuple[Ask, Node]]) -> list[tuple[Ask, Node]]:
        """The node reservations this cycle asks for (:func:`sniper.core.node_reservation.choose`): for asks the
        free room could not hold (a ``max`` aside), not already reserving or reserved in flight. None when
        the cycle placed nothing: a node reservation is for an ask another app's smaller container overtook."""
        if not placed:
            return []
        state = self.state
        reserving = [pair for pairs in self.reserving.values() for pair in pairs]
        return node_reservation.choose(
            state,
            (a for key in walk.failed - walk.blocked if (a := state.ask(key)) is not None),
            placed,
            {key for key, _ in reserving},
            {name for _, name in reserving},
        )

    def _count_missed(self, walk: _Walk, placed: list[tuple[Ask, Node]]) -> None:
        """Every ask tried and not placed misses an opportunity; a placed one starts again from none."""
        got = {ask.key for ask, _ in placed}  # an eviction's room is reserved for its ask: it got it
        tried = walk.tried | got | walk.blocked
        self.last_tried = frozenset(tried)
        missed = self.missed
        for key in tried:
            if key in got:
                missed.pop(key, None)
            else:
                missed[key] = missed.get(key, 0) + 1

    def _propose(
        self, placed: list[tuple[Ask, Node]], plan: opportunistic.OpportunisticPlan, reserve: list[tuple[Ask, Node]]
    ) -> p.AllocationProposal:
        """Hold what the cycle placed (evictions last in ``placed``) and say it in one proposal."""
        self._next_proposal += 1
        pid = f"{self.partition}/a{self._next_proposal}"
        self.hold(pid, placed)
        if reserve:
            self.reserving[pid] = [(ask.key, node.name) for ask, node in reserve]
        self.stats.proposed += len(placed)
        evicting = len(plan.evictions)
        placements = placed[: len(placed) - evicting]
        return p.AllocationProposal(
            partition=self.partition,
            id=pid,
            view_seq=self.view_seq,
            placements=[
                p.Placement(app=ask.key[0], ask=ask.key[1], node=node.name, ask_seq=ask.seq) for ask, node in placements
            ],
            evictions=opportunistic.as_victimized(plan.evictions),
            reservations=[p.NodeReserve(app=a.key[0], ask=a.key[1], node=n.name, ask_seq=a.seq) for a, n in reserve],
        )


@dataclasses.dataclass(slots=True)
class _Walk:
    """What one cycle's walk over the queues did: the containers it placed on free room, the asks it
    tried, those that found no room, and those a ``max`` kept out (they miss too: preemption may free it)."""

    placed: list[tuple[Ask, Node]] = dataclasses.field(default_factory=list)
    tried: set[AskKey] = dataclasses.field(default_factory=set)
    failed: set[AskKey] = dataclasses.field(default_factory=set)
    blocked: set[AskKey] = dataclasses.field(default_factory=set)


def _place_guaranteed(state: PartitionState, budget: int, placer: FreeRoomPlacer) -> _Walk:
    """Up to ``budget`` containers on free room, in the ideal assignment's order (each held as placed);
    asks that failed no longer hide the ones behind them (batch, headroom), so it looks again until a
    look places nothing new and fails no new ask.

    A look that ended before the budget and passed over no ask for a ``max`` or a limit is the last when
    every ask it listed failed or has no container left to place: the next would list only asks the
    look listed (holding room only shrinks what an ask or a queue still wants, and the free room), so
    it would list nothing."""
    walk = _Walk()
    failed = walk.failed
    while budget > 0:
        held_back: set[AskKey] = set()
        filters = CandidateFilter(skip=failed, blocked=walk.blocked, held_back=held_back)
        candidates = find_ask_candidates(state, budget, preemption=False, filters=filters)
        if not candidates:
            break
        result = try_allocate(state, candidates, preemption=False, placer=placer)
        for ask in candidates:
            walk.tried.add(ask.key)
        walk.placed.extend(result.placed)
        progress = bool(result.placed) or not result.failed <= failed
        failed |= result.failed
        if not progress or (
            not held_back and len(candidates) < budget and all(a.key in failed or a.pending <= 0 for a in candidates)
        ):
            break
        budget -= len(result.placed)
    return walk


def _nothing_waits(state: PartitionState) -> bool:
    """Whether no ask waits for a container: no pending demand (the root's totals every leaf's), no
    reservation, no opportunistic ask. Then a cycle lists no candidate, places nothing and misses nothing."""
    root = state.root
    return (
        (root is None or not res.any_positive(root.pending)) and not state.reservations and not state.opportunistic_asks
    )


def _known_fruitless(state: PartitionState, placer: FreeRoomPlacer, budget: int) -> _Walk | None:
    """What :func:`_place_guaranteed` would do when it is known without a walk: no ``max`` or limit can
    hold an ask back, and every ask a look would list (each waiting ask with a container to place, in a
    leaf with pending demand) is known to find no node. Then the looks list them all (a batch at a time)
    and place nothing (no look at all without a ``budget``). ``None`` when that is not known."""
    if budget <= 0 or not isinstance(placer, RememberingPlacer) or has_limits(state):
        return None
    listed: set[AskKey] = set()
    for leaf in state.queues.values():
        if not leaf.is_leaf or not res.any_positive(leaf.pending):
            continue
        if leaf.capped:
            return None
        for app in leaf.waiting.values():
            for ask in app.pending_asks:
                if ask.pending > 0:
                    if not placer.known_to_fail(state, ask):
                        return None
                    listed.add(ask.key)
    return _Walk(tried=listed, failed=set(listed))


def place_reserved(state: PartitionState, budget: int) -> list[tuple[Ask, Node]]:
    """Reserved beneficiaries keep competing for free room (architecture: Actors): one container per
    reservation whose ask still wants one, on free room anywhere (an ask with a topology, in its
    domain: :func:`sniper.core.topology.place_beside`), until its victims are killed; the cache then
    ends that reservation and cancels its victims' notices. Served after the other asks, so the ideal
    assignment's order stands (serving them first cost random_mix 16 s of time to guarantee)."""
    placer = FreeRoomPlacer()
    placed: list[tuple[Ask, Node]] = []
    for rid in sorted(state.reservations):
        if len(placed) >= budget:
            break
        r = state.reservations[rid]
        if r.deadline <= state.now:
            continue  # its victims were killed: their room is coming, moving would waste the kills
        ask = state.ask((r.app, r.ask))
        if ask is None or ask.count - ask.allocated - ask.allocating <= 0:
            continue
        # The reservation ends when the container is placed, so its room leaves the queue's usage.
        freed = {q.path: res.scale(ask.resource, -1) for q in ask.app.queue.lineage()}
        if not state.headroom_allows(ask.app.queue, ask.resource, freed):
            continue
        node = placer.place(state, ask) if ask.topology is None else topology.place_beside(state, ask, placer)
        if node is not None:
            placed.append((ask, node))
            hold_room(state, ask, node, 1)
    return placed
