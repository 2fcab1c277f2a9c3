"""Preemption-mode placement (seed 002 ``tryAllocate(..., preemption=true)``), run by the allocator.

:class:`VictimPlacer` plugs into the same :func:`sniper.core.allocation.try_allocate` loop as normal
allocation; a node's usable room is its free room plus the victims the round allows there. Nodes are
indexed by that potential room (free memory plus candidate victims' memory), so an ask only looks at
nodes that could possibly hold it, and at most ``max_candidate_nodes`` feasible ones. On each node the
victim set is minimal: cheapest victims first (AM containers last), then every victim whose removal
still leaves room is dropped again. Among nodes the cheapest set wins (AM-free sets first).
Opportunistic containers come before every guaranteed victim, free of quota and budget (they count
in no queue), and are killed at once by the commit (:mod:`sniper.core.opportunistic`).
Invariants: a victim is taken at most once per round; no queue loses more than its quota in any
resource; the round stops once the preempted total reaches its budget.
"""

from __future__ import annotations

import dataclasses

from sortedcontainers import SortedList

from sniper.core import resources as res
from sniper.core.allocation import CandidateFilter, find_ask_candidates, try_allocate, usage_key
from sniper.core.allocator import AllocatorCore
from sniper.core.preemption.costs import victim_cost
from sniper.core.preemption.quotas import below_ideal
from sniper.core.preemption.rules import may_preempt_for, preemption_disabled
from sniper.core.resources import MEMORY, Resource
from sniper.core.state import Allocation, Ask, AskKey, Node, PartitionState, Queue, ask_label
from sniper.messages import protocol as p


@dataclasses.dataclass(slots=True)
class VictimSet:
    node: Node
    victims: list[Allocation]
    cost: float
    has_am: bool


class VictimPlacer:
    """Finds, for one ask at a time, the cheapest node where a minimal victim set makes room."""

    def __init__(self, state: PartitionState, request: p.PlacementRequest) -> None:
        self.state = state
        self.request = request
        self.now = state.now
        self.cost_of = victim_cost(request.victim_cost)
        self.quota_left: dict[str, Resource] = {k: dict(v) for k, v in request.quotas.items()}
        self.budget_left: Resource = dict(request.budget)
        self.sets: list[VictimSet] = []
        self.taken: set[str] = set()
        self.freed: dict[str, Resource] = {}  # node -> victims taken there this round
        self._relations: dict[tuple[str, str], bool] = {}  # (victim queue, beneficiary queue) -> allowed
        self._room: dict[str, Resource] = {}
        # A budget of nothing (``total_preemption_per_round: 0``) allows nothing, not everything.
        self.exhausted = not any(v > 0 for v in self.budget_left.values())
        self.intra = request.intra_queue
        # Candidate victims per node, cheapest first and AM containers last, built on a node's first
        # evaluation (cost is fixed for the round). The index key is an upper bound of the memory a
        # placement could get there, from per-node aggregates: O(nodes) to build, not O(containers).
        self.by_node: dict[str, list[tuple[bool, float, str, Allocation]]] = {}
        self.victim_queues = [q.path for q in state.queues.values() if q.is_leaf and self._victim_queue_ok(q)]
        self.index: SortedList = SortedList()
        self.potential: dict[str, int] = {}
        self.max_slack = 0  # the most memory any node offers without new victims (an upper bound)
        self.slack: dict[str, int] = {}  # memory a node offers without new victims
        self.slack_index: SortedList = SortedList()
        for name, node in state.nodes.items():
            if not node.schedulable:
                continue
            held = sum(node.by_queue.get(q, {}).get(MEMORY, 0) for q in self.victim_queues)
            idle = node.opportunistic.get(MEMORY, 0)  # opportunistic room: no guaranteed victim needed
            if held <= 0 and idle <= 0:
                continue
            base = state.room_once_victims_leave(node).get(MEMORY, 0) + idle
            self.max_slack = max(self.max_slack, base)
            self.potential[name] = base + held
            self.index.add((base + held, name))
            self.slack[name] = base
            self.slack_index.add((base, name))

    def _victims_on(self, name: str) -> list[tuple[bool, float, str, Allocation]]:
        entries = self.by_node.get(name)
        if entries is None:
            allocations = self.state.allocations
            entries = []
            for aid in self.state.nodes[name].allocations:
                alloc = allocations[aid]
                if alloc.preempting:
                    continue
                if alloc.opportunistic:
                    entries.append((False, 0.0, alloc.id, alloc))
                elif self._victim_queue_ok(alloc.queue):
                    entries.append((alloc.am, self.cost_of(alloc, self.now), alloc.id, alloc))
            # Opportunistic containers first, newest first (YARN's NodeManager kills them LIFO).
            entries.sort(
                key=lambda e: (not e[3].opportunistic, e[0], -e[3].start if e[3].opportunistic else e[1], e[2])
            )
            self.by_node[name] = entries
        return entries

    def _victim_queue_ok(self, queue: Queue) -> bool:
        if self.intra:
            return not preemption_disabled(queue)
        return queue.path in self.quota_left

    def _allowed(self, alloc: Allocation, ask: Ask) -> bool:
        """Victims taken this round are already gone from ``by_node``; preempting ones never entered."""
        if alloc.opportunistic:
            return True
        if self.intra:
            return (
                alloc.queue is ask.app.queue
                and alloc.app != ask.app.name
                and alloc.priority < ask.priority
                and not alloc.am
            )
        pair = (alloc.queue.path, ask.app.queue.path)
        allowed = self._relations.get(pair)
        if allowed is None:
            allowed = self._relations[pair] = may_preempt_for(alloc.queue, ask.app.queue)
        return allowed

    # ------------------------------------------------------------------ Placer

    def place(self, state: PartitionState, ask: Ask) -> Node | None:
        if self.exhausted:
            return None
        need = ask.resource
        need_mem = need.get(MEMORY, 0)
        nodes = (name for _, name in self.index.islice(self.index.bisect_left((need_mem, ""))))
        if not self.intra:
            quota = sum(q.get(MEMORY, 0) for q in self.quota_left.values())
            if need_mem > self.max_slack + quota:
                return None  # exact: no node's slack plus every victim queue's remaining quota covers it
            if need_mem > quota:
                # Exact: victims can free at most ``quota``, so only nodes with that much slack can help.
                start = self.slack_index.bisect_left((need_mem - quota, ""))
                nodes = (name for _, name in self.slack_index.islice(start) if self.potential[name] >= need_mem)
        best: VictimSet | None = None
        feasible = 0
        for name in nodes:
            node = state.nodes[name]
            if not ask.accepts(node):
                continue
            found = self._minimal_set(node, ask)
            if found is None:
                continue
            feasible += 1
            if best is None or (found.has_am, found.cost, found.node.name) < (best.has_am, best.cost, best.node.name):
                best = found
            if feasible >= self.request.max_candidate_nodes:
                break
        if best is None:
            return None
        if best.has_am and not self.intra and self._tasks_could_make_room(state, ask):
            # AM containers are the last resort: tasks could make this room, only the quota stops
            # them now. Wait for completions or later rounds rather than kill an application.
            return None
        self._take(best, ask)
        return best.node

    def _tasks_could_make_room(self, state: PartitionState, ask: Ask) -> bool:
        """Whether some node's non-AM victims the rules allow, quota aside, cover the ask's shortfall."""
        start = self.index.bisect_left((ask.resource.get(MEMORY, 0), ""))
        for _, name in self.index.islice(start):
            node = state.nodes[name]
            if not ask.accepts(node):
                continue
            shortfall = self._shortfall(node, ask)
            got: Resource = {}
            for am, _, _, alloc in self._victims_on(name):
                if not am and self._allowed(alloc, ask):
                    res.add_into(got, alloc.resource)
            if res.fits(shortfall, got):
                return True
        return False

    def _shortfall(self, node: Node, ask: Ask) -> dict[str, int]:
        base = self._base_room(node)
        freed_here = self.freed.get(node.name) or {}
        shortfall: dict[str, int] = {}
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

    def _minimal_set(self, node: Node, ask: Ask) -> VictimSet | None:
        shortfall = self._shortfall(node, ask)
        if not shortfall:
            return None  # room already free there is the normal allocator's to give, not preemption's
        chosen = self._pick(node, ask, shortfall, within_quota=True)
        if chosen is None and not self.intra:
            # The quota also counted cheap victims the trim drops again (a larger victim within the
            # quota was skipped for them): pick counting each victim alone, trim, then check the set.
            chosen = self._pick(node, ask, shortfall, within_quota=False)
            if chosen is not None and not self._within_quota(chosen):
                chosen = None
        if chosen is None:
            return None
        return VictimSet(node, [e[3] for e in chosen], sum(e[1] for e in chosen), any(e[0] for e in chosen))

    def _pick(
        self, node: Node, ask: Ask, shortfall: dict[str, int], *, within_quota: bool
    ) -> list[tuple[bool, float, str, Allocation]] | None:
        """Cheapest victims first until the shortfall is covered, then trimmed to a minimal set."""
        chosen: list[tuple[bool, float, str, Allocation]] = []
        got = dict.fromkeys(shortfall, 0)
        lose: dict[str, Resource] = {}
        for entry in self._victims_on(node.name):
            alloc = entry[3]
            if not self._allowed(alloc, ask):
                continue
            if not self.intra and not alloc.opportunistic:
                path = alloc.queue.path
                left = self.quota_left[path]
                if not within_quota:
                    if not res.fits(alloc.resource, left):
                        continue  # over the quota on its own: in no set the quota allows
                else:
                    taken = lose.get(path)
                    if taken is None:
                        taken = lose[path] = {}
                    if not all(taken.get(k, 0) + v <= left.get(k, 0) for k, v in alloc.resource.items()):
                        continue
                    for k, v in alloc.resource.items():
                        taken[k] = taken.get(k, 0) + v
            chosen.append(entry)
            for k in got:
                got[k] += alloc.resource.get(k, 0)
            if all(got[k] >= shortfall[k] for k in got):
                break
        else:
            return None
        # Trim: drop, most expensive first, every victim the room does not need (never one it needs).
        if len(chosen) > 1:
            for entry in sorted(chosen, key=lambda e: (e[0], e[1]), reverse=True):
                r = entry[3].resource
                if all(got[k] - r.get(k, 0) >= shortfall[k] for k in got):
                    chosen.remove(entry)
                    for k in got:
                        got[k] -= r.get(k, 0)
        return chosen

    def _within_quota(self, chosen: list[tuple[bool, float, str, Allocation]]) -> bool:
        lose: dict[str, Resource] = {}
        for entry in chosen:
            if not entry[3].opportunistic:
                res.add_into(lose.setdefault(entry[3].queue.path, {}), entry[3].resource)
        return all(res.fits(amount, self.quota_left[path]) for path, amount in lose.items())

    def _take(self, chosen: VictimSet, ask: Ask) -> None:
        self.sets.append(chosen)
        name = chosen.node.name
        # The ask will hold its room on the node (try_allocate adds it to the node's allocating).
        res.sub_into(self._base_room(chosen.node), ask.resource)
        for alloc in chosen.victims:
            self.taken.add(alloc.id)
            res.add_into(self.freed.setdefault(name, {}), alloc.resource)
            if alloc.opportunistic:
                continue  # in no queue's quota, nor in the round's preemption budget
            if not self.intra:
                res.sub_into(self.quota_left[alloc.queue.path], alloc.resource)
            res.sub_into(self.budget_left, alloc.resource)
        idle = sum(
            e[3].resource.get(MEMORY, 0)
            for e in self._victims_on(name)
            if e[3].opportunistic and e[3].id not in self.taken
        )
        slack = self._base_room(chosen.node).get(MEMORY, 0) + self.freed[name].get(MEMORY, 0) + idle
        self.max_slack = max(self.max_slack, slack)
        old_slack = self.slack.get(name)
        if old_slack is not None:
            self.slack_index.remove((old_slack, name))
            self.slack[name] = slack
            self.slack_index.add((slack, name))
        self.by_node[name] = [e for e in self._victims_on(name) if e[3].id not in self.taken]
        old = self.potential.get(name)
        if old is not None:
            # Victims moved from candidates to freed (no change); the ask's room is now promised.
            room = old - ask.resource.get(MEMORY, 0)
            self.index.remove((old, name))
            self.potential[name] = room
            self.index.add((room, name))
        if any(v <= 0 for k, v in self.budget_left.items() if k in self.request.budget and self.request.budget[k] > 0):
            self.exhausted = True


def _net_usage_key(capacity: Resource) -> object:
    def key(q: Queue, usage: Resource) -> tuple[object, ...]:
        return usage_key(q, res.clamp_min_zero(res.sub(usage, q.preempting)), capacity)

    return key


def answer_placement_request(core: AllocatorCore, request: p.PlacementRequest) -> p.PlacementReply:
    """One preemption round on the allocator's replica (seed 002's inter-queue loop, rate-capped)."""
    state = core.state
    missed = core.missed
    mask = set(request.mask)
    mask_hits = 0
    targets = request.targets
    beneficiaries = set(request.beneficiaries)

    def queue_ok(q: Queue) -> bool:
        if q.is_leaf:
            if q.path not in beneficiaries:
                return False
            target = targets.get(q.path)
            return target is None or below_ideal(q.usage(), target)
        return any(b.startswith(q.path + ".") for b in beneficiaries)

    def ask_ok(ask: Ask) -> bool:
        nonlocal mask_hits
        if missed.get(ask.key, 0) < request.min_missed:
            return False
        if ask_label(ask.key) in mask:
            mask_hits += 1
            return False
        return True

    placer = VictimPlacer(state, request)
    failed: set[AskKey] = set()
    placed: list[tuple[Ask, Node]] = []
    while not placer.exhausted:
        candidates = find_ask_candidates(
            state,
            max(1, len(beneficiaries)),
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
    placements: list[p.Victimized] = []
    for (ask, node), chosen in zip(placed, placer.sets, strict=True):
        waited = missed.pop(ask.key, 0)  # the ask got its container (update-missed-opportunity)
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
        unplaceable=sorted(ask_label(k) for k in failed),
        mask_hits=mask_hits,
        view_seq=core.view_seq,
    )
