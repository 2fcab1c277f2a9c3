"""Helpers for the preemption tests: a sans-IO cache + allocator replica + policy harness.

:class:`PreemptHarness` extends the core tests' :class:`Harness` (cache, allocator replica and the
independent model, wired by hand) with what a preemption round needs: containers started directly
with ``Cache.allocate`` at chosen times, allocation cycles that make asks starve (missed
opportunities), and one full round ``policy.round -> answer_placement_request -> policy.on_reply ->
cache.handle_proposal``, as ``sniper bench preempt`` runs it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sniper.core.config import parse_partition
from sniper.core.preemption.placement import answer_placement_request
from sniper.core.preemption.policies import Policy, make_policy
from sniper.core.state import Allocation
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import Harness, queue

PARTITION = "default"
GRACE = 15.0  # seconds a victim has between its notice and its kill, unless a test says otherwise


def preemption_raw(*leaves: dict[str, Any], **preemption: Any) -> dict[str, Any]:
    """A raw partition with the given top-level queues and preemption settings (sniper by default,
    every round allowed to preempt the whole cluster unless told otherwise)."""
    settings: dict[str, Any] = {
        "policy": "sniper",
        "interval": 1.0,
        "total_preemption_per_round": 1.0,
        "grace": GRACE,
        "min_missed_opportunities": 1,
        **preemption,
    }
    return {"name": PARTITION, "preemption": settings, "queues": [queue("root", *leaves)]}


def two_queues(
    a: int = 100, b: int = 100, *, a_props: dict[str, Any] | None = None, **preemption: Any
) -> dict[str, Any]:
    """root.a and root.b with memory guarantees ``a`` and ``b``."""
    return preemption_raw(
        queue("a", guaranteed={"memory": a}, **(a_props or {})),
        queue("b", guaranteed={"memory": b}),
        **preemption,
    )


@dataclasses.dataclass
class RoundResult:
    request: p.PlacementRequest | p.PreemptionProposal | None
    reply: p.PlacementReply | None
    proposal: p.PreemptionProposal | None
    outcome: p.ProposalOutcome | None
    decisions: list[d.DecisionMsg]

    @property
    def placements(self) -> list[p.Victimized]:
        return [] if self.reply is None else list(self.reply.placements)

    def preempts(self) -> list[d.Preempt]:
        return [x for x in self.decisions if isinstance(x, d.Preempt)]


class PreemptHarness(Harness):
    """A partition built sans-IO; ``policy`` is made from the partition's preemption config."""

    def __init__(self, raw: dict[str, Any], policy: str | None = None) -> None:
        super().__init__(parse_partition(raw))
        assert self.config is not None
        self.policy: Policy = make_policy(policy or self.config.preemption.policy, PARTITION, self.config.preemption)
        self._asks: dict[tuple[str, str], int] = {}

    def pump(self) -> list[d.DecisionMsg]:
        """As the harness's, and the policy sees every committed change (as its actor's replica would)."""
        seen = len(self.views)
        decisions = super().pump()
        policy = getattr(self, "policy", None)
        if policy is not None:
            for view in self.views[seen:]:
                for change in view.changes:
                    policy.on_change(change)
        return decisions

    # ------------------------------------------------------------------ setup

    def feed(self, *events: f.Feed, allow_rejected: bool = False) -> list[d.DecisionMsg]:
        decisions = super().feed(*events)
        if not allow_rejected:
            rejected = [x.reason for x in decisions if isinstance(x, d.Rejected)]
            assert not rejected, f"set-up event rejected: {rejected}"
        return decisions

    def nodes(self, *names: str, memory: int = 100, vcore: int | None = None) -> None:
        cap = {"memory": memory} if vcore is None else {"memory": memory, "vcore": vcore}
        self.feed(*(f.NodeAdded(node=n, capacity=cap) for n in names))

    def app(self, name: str, queue_path: str, priority: int = 0) -> None:
        self.feed(f.AppAdded(app=name, queue=queue_path, priority=priority))

    def ask(
        self,
        app: str,
        ask: str,
        memory: int,
        count: int = 1,
        *,
        vcore: int | None = None,
        priority: int = 0,
        am: bool = False,
        node: str | None = None,
    ) -> None:
        resource = {"memory": memory} if vcore is None else {"memory": memory, "vcore": vcore}
        self.feed(f.AskAdded(app=app, ask=ask, resource=resource, count=count, priority=priority, am=am, node=node))

    def run(
        self,
        app: str,
        memory: int,
        node: str,
        *,
        at: float | None = None,
        vcore: int | None = None,
        priority: int = 0,
        am: bool = False,
        queue_path: str | None = None,
    ) -> str:
        """Start one container of ``app`` (a fresh one-container ask) on ``node`` at time ``at``."""
        if app not in self.cache.state.apps:
            assert queue_path is not None, f"app {app} needs a queue"
            self.app(app, queue_path)
        n = self._asks.get((app, "run"), 0) + 1
        self._asks[(app, "run")] = n
        name = f"{app}-run{n}"
        self.ask(app, name, memory, vcore=vcore, priority=priority, am=am)
        if at is not None and at > self.cache.state.now:
            self.tick(at)
        self.cache.allocate(app, name, node)
        self.pump()
        return self.allocated()[-1].allocation

    def fill(self, app: str, queue_path: str, node: str, sizes: list[int], *, start: float = 0.0) -> list[str]:
        """Containers of ``sizes`` on ``node``, started one second apart from ``start`` (older = costlier)."""
        return [self.run(app, size, node, at=start + i, queue_path=queue_path) for i, size in enumerate(sizes)]

    def starve(self, cycles: int = 1) -> None:
        """Allocation cycles: pending asks that find no room miss an opportunity each time."""
        for _ in range(cycles):
            proposal = self.allocator.cycle()
            if proposal is not None:
                self.cache.handle_proposal(proposal)
                self.pump()

    # ------------------------------------------------------------------ a preemption round

    def preempt_round(self, now: float | None = None, *, policy: Policy | None = None) -> RoundResult:
        """One round: the policy on the allocator's replica, the allocator's answer, the cache's commit."""
        policy = policy or self.policy
        when = self.cache.state.now if now is None else now
        if when > self.cache.state.now:
            self.tick(when)
        out = policy.round(self.allocator.state, self.allocator.view_seq, when)
        reply: p.PlacementReply | None = None
        proposal: p.PreemptionProposal | None = None
        if isinstance(out, p.PlacementRequest):
            reply = answer_placement_request(self.allocator, out)
            proposal = policy.on_reply(reply, when)
        elif isinstance(out, p.PreemptionProposal):
            proposal = out
        outcome = None
        decisions: list[d.DecisionMsg] = []
        if proposal is not None:
            self.cache.handle_proposal(proposal)
            decisions = self.pump()
            outcome = self.outcomes[proposal.id]
        return RoundResult(out, reply, proposal, outcome, decisions)

    def commit(self, proposal: p.PreemptionProposal) -> tuple[p.ProposalOutcome, list[d.DecisionMsg]]:
        self.cache.handle_proposal(proposal)
        decisions = self.pump()
        return self.outcomes[proposal.id], decisions

    # ------------------------------------------------------------------ inspection

    def alloc(self, aid: str) -> Allocation:
        return self.cache.state.allocations[aid]

    def preempts(self) -> list[d.Preempt]:
        return [x for x in self.decisions if isinstance(x, d.Preempt)]

    def kills(self) -> list[str]:
        return [x.allocation for x in self.decisions if isinstance(x, d.Kill)]

    def release(self, *aids: str) -> list[d.DecisionMsg]:
        return self.feed(*(f.AllocationReleased(allocation=a) for a in aids))


def proposal(
    app: str, ask: str, node: str, victims: list[str], *, policy: str = "sniper", pid: str = "test/p1"
) -> p.PreemptionProposal:
    """A hand-made preemption proposal of one placement (for the cache's validation)."""
    return p.PreemptionProposal(
        partition=PARTITION,
        id=pid,
        view_seq=0,
        policy=policy,
        placements=[p.Victimized(app=app, ask=ask, node=node, victims=victims, cost=1.0, reason=f"{app}/{ask} test")],
    )


def b_in_fifties() -> PreemptHarness:
    """a and b (guarantee 100 each) on n1 and n2 (100 each); b's app b1 holds both nodes in 50s (n1's
    started at 0 and 1, n2's at 2 and 3); a's app a1 asks for nothing yet."""
    h = PreemptHarness(preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100})))
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=2)
    h.app("a1", "root.a")
    return h


def one_reservation() -> tuple[PreemptHarness, str, list[str]]:
    """:func:`b_in_fifties`, a1 asks for 50 and starves, and a round at 10 s reserves it a node: the
    harness, the reservation's node and its victims."""
    h = b_in_fifties()
    h.ask("a1", "big", 50)
    h.starve()
    result = h.preempt_round(10.0)
    (pl,) = result.placements
    return h, pl.node, list(pl.victims)
