"""Preemption-policy actors: one per policy the partition enables, each a shell around a sans-IO
policy from :mod:`sniper.core.preemption.policies` (looked up by name in its registry).

Every ``interval`` the actor runs a round on its replica: a placement request goes to the allocator
(on the view topic), a preemption proposal to the cache; the allocator's reply becomes a proposal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sniper.actors.base import Actor, ActorFactory
from sniper.actors.replica import ReplicaActor
from sniper.actors.router import Router
from sniper.core.cache import Cache
from sniper.core.preemption.policies import REGISTRY, Policy, enabled_policies, make_policy
from sniper.core.replica import ViewReplica
from sniper.messages import protocol as p
from sniper.transport.bus import PROPOSALS, VIEW


class _PolicyReplica(ViewReplica):
    def __init__(self, partition: str, name: str) -> None:
        super().__init__(partition)
        self.name = name
        self.policy: Policy | None = None

    def on_change(self, change: p.ChangeMsg) -> None:
        if self.policy is not None:
            self.policy.on_change(change)

    def current(self) -> Policy | None:
        """The policy object for the replica's current config, rebuilt when that config changes."""
        config = self.state.config
        if config is None or self.name not in enabled_policies(config.preemption):
            self.policy = None
        elif self.policy is None or self.policy.config != config.preemption:
            self.policy = make_policy(self.name, self.partition, config.preemption)
        return self.policy


class PolicyActor(ReplicaActor):
    """One policy's actor. Dormant (no replica kept) until the partition's config enables its policy.

    While dormant it asks not to be woken for view deltas that carry no config (``accept`` of its inbox).
    """

    kind = "policy"

    def __init__(self, partition: str, router: Router, name: str) -> None:
        self.reader = f"policy:{name}"
        self.kind = f"policy:{name}"
        self.replica_of: _PolicyReplica = _PolicyReplica(partition, name)
        self.active = False
        super().__init__(self.replica_of, router, accept=self._wants)
        self.next_round = 0.0
        self._round_due = False
        self._round_began: float | None = None  # a round waiting for the allocator's placement reply
        self._proposals: list[p.PreemptionProposal] = []

    async def handle(self, message: Any) -> None:
        if not self.active and isinstance(message, p.ViewDelta) and not message.to:
            if any(isinstance(c, p.ConfigSet) and self._enables(c) for c in message.changes):
                self.active = True
                await self.resync()
            return
        await super().handle(message)

    def _wants(self, message: Any) -> bool:
        """Whether to deliver ``message``: a dormant actor is not woken for deltas without a config."""
        return (
            self.active
            or not isinstance(message, p.ViewDelta)
            or bool(message.to)
            or p.ConfigSet in map(type, message.changes)
        )

    def _enables(self, change: p.ConfigSet) -> bool:
        raw = change.config.get("preemption") or {}
        name = self.replica_of.name
        return name in (raw.get("policy"), "intra_queue" if raw.get("intra_queue") else None)

    def on_tick(self, now: float) -> None:
        if self.active and now >= self.next_round:
            self._round_due = True

    async def handle_other(self, message: Any) -> None:
        policy = self.replica_of.policy
        if isinstance(message, p.PlacementReply) and policy is not None:
            proposal = policy.on_reply(message, self.now)
            if proposal is not None:
                self._proposals.append(proposal)
            if self._round_began is not None:
                self.timed("preemption_round", self._round_began)
                self._round_began = None

    async def on_idle(self) -> None:
        if self._round_due and not self.awaiting_reset:
            self._round_due = False
            policy = self.replica_of.current()
            if policy is None:
                self.active = False  # the config no longer enables it: dormant again
            else:
                self.next_round = self.now + policy.config.interval
                began = time.perf_counter()
                out = policy.round(self.replica.state, self.replica.view_seq, self.now)
                if isinstance(out, p.PlacementRequest):
                    self._round_began = began  # the round ends with the reply
                    await self.router.publish(VIEW, self.partition, out)
                else:
                    if isinstance(out, p.PreemptionProposal):
                        self._proposals.append(out)
                    self.timed("preemption_round", began)
        for proposal in self._proposals:
            await self.router.publish(PROPOSALS, self.partition, proposal)
        self._proposals.clear()


def policy_factories(
    partition: str, router: Router, track: Callable[[Actor], Actor], cache: Cache
) -> list[tuple[ActorFactory, bool]]:
    """One restartable actor per registered policy; each wakes when the config enables it."""
    out: list[tuple[ActorFactory, bool]] = []
    for name in sorted(REGISTRY):

        def factory(name: str = name) -> Actor:
            actor = PolicyActor(partition, router, name)
            config = cache.state.config
            actor.active = config is not None and name in enabled_policies(config.preemption)
            return track(actor)

        out.append((factory, True))
    return out
