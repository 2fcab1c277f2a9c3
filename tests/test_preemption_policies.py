"""Preemption policies: the registry, the mask (what clears it, its ttl, its hits), one request in flight,
the policy actor's dormant replica, and the YARN proportional baseline on live state (victims marked
without a beneficiary, killed after grace, their room back to the pool).
"""

from __future__ import annotations

import pytest

from sniper.actors.policy import _PolicyReplica
from sniper.core.config import PreemptionConfig, parse_partition, partition_to_raw
from sniper.core.preemption.mask import PreemptionMask
from sniper.core.preemption.model import ContainerSnapshot
from sniper.core.preemption.policies import (
    REGISTRY,
    IntraQueuePolicy,
    ProportionalBaseline,
    SniperPolicy,
    enabled_policies,
    make_policy,
)
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import queue
from tests.preemption_support import PreemptHarness, preemption_raw, two_queues

# ---------------------------------------------------------------------- registry


def test_the_registry_holds_the_three_policies() -> None:
    assert set(REGISTRY) == {"sniper", "intra_queue", "proportional"}
    config = PreemptionConfig()
    assert isinstance(make_policy("sniper", "default", config), SniperPolicy)
    assert isinstance(make_policy("intra_queue", "default", config), IntraQueuePolicy)
    assert isinstance(make_policy("proportional", "default", config), ProportionalBaseline)
    with pytest.raises(ValueError, match="unknown preemption policy 'shotgun'"):
        make_policy("shotgun", "default", config)


@pytest.mark.parametrize(
    ("policy", "intra", "names"),
    [
        ("sniper", False, ["sniper"]),
        ("proportional", False, ["proportional"]),
        ("none", False, []),
        ("none", True, []),  # none switches off every policy, intra-queue included
        ("sniper", True, ["sniper", "intra_queue"]),
    ],
)
def test_enabled_policies(policy: str, intra: bool, names: list[str]) -> None:
    assert enabled_policies(PreemptionConfig(policy=policy, intra_queue=intra)) == names


def test_a_policy_replica_is_dormant_until_its_policy_is_enabled() -> None:
    replica = _PolicyReplica("default", "sniper")
    assert replica.current() is None  # no config at all
    seq = 0

    def configure(**preemption: object) -> None:
        nonlocal seq
        seq += 1
        raw = partition_to_raw(parse_partition(two_queues(**preemption)))
        assert replica.apply_view(p.ViewDelta(seq=seq, changes=[p.ConfigSet(config=raw)]))

    configure(policy="none")
    assert replica.current() is None
    configure(policy="sniper")
    first = replica.current()
    assert isinstance(first, SniperPolicy)
    assert replica.current() is first, "kept while the config is the same"
    configure(policy="sniper", mask_ttl=5.0)
    second = replica.current()
    assert isinstance(second, SniperPolicy) and second is not first and second.config.mask_ttl == 5.0
    configure(policy="proportional")
    assert replica.current() is None


# ---------------------------------------------------------------------- the mask


def test_the_mask_counts_expires_and_clears() -> None:
    mask = PreemptionMask(ttl=30.0)
    mask.add(["a/x", "a/y"], 10.0)
    mask.add(["a/x"], 20.0)  # masked again: a new expiry, not a new entry
    assert mask.masked == 2 and len(mask) == 2 and mask.keys() == ["a/x", "a/y"]
    mask.expire(39.9)
    assert mask.keys() == ["a/x", "a/y"]
    mask.expire(40.0)
    assert mask.keys() == ["a/x"]  # a/y expired at 10 + 30; a/x lives until 50
    mask.clear()
    mask.clear()
    assert len(mask) == 0 and mask.clears == 1, "clearing an empty mask is not counted"


@pytest.mark.parametrize(
    ("change", "clears"),
    [
        (p.NodeSet(node="n9", capacity={"memory": 100}), True),
        (p.AllocationGone(allocation="alloc-1"), True),
        (p.ReservationGone(reservation="resv-1"), True),
        (p.ConfigSet(config={}), True),
        (p.AskSet(app="a1", ask="x", resource={"memory": 1}, count=1), False),
        (p.AllocationSet(allocation="alloc-9", app="a1", ask="x", node="n1", resource={"memory": 1}), False),
        (p.Clock(now=5.0), False),
        (p.AppSet(app="a9", queue="root.a"), False),
    ],
)
def test_room_changes_clear_the_mask(change: p.ChangeMsg, clears: bool) -> None:
    for policy in (SniperPolicy("default", PreemptionConfig()), IntraQueuePolicy("default", PreemptionConfig())):
        assert policy.mask is not None
        policy.mask.add(["a1/big"], 0.0)
        policy.on_change(change)
        assert (len(policy.mask) == 0) is clears


def unplaceable() -> PreemptHarness:
    """a asks for 80 where b's containers can free at most 50 on a node: a second 50 beyond b's quota
    would leave b (150, guarantee 60) below its guarantee; one small ask fits."""
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 60}),
        queue("c", guaranteed={"memory": 50}, preemption_policy="disabled"),
        mask_ttl=30.0,
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50])
    h.fill("c1", "root.c", "n1", [50])
    h.fill("b1", "root.b", "n2", [50, 50])
    h.app("a1", "root.a")
    h.ask("a1", "huge", 80)
    h.starve()
    return h


def test_an_unplaceable_ask_is_masked_and_skipped_until_the_ttl() -> None:
    h = unplaceable()
    policy = h.policy
    assert policy.mask is not None
    first = h.preempt_round(10.0)
    assert first.reply is not None and first.reply.unplaceable == ["a1/huge"]
    assert policy.mask.keys() == ["a1/huge"] and policy.mask.masked == 1
    h.starve()
    second = h.preempt_round(11.0)
    assert isinstance(second.request, p.PlacementRequest) and second.request.mask == ["a1/huge"]
    assert second.reply is not None and second.reply.mask_hits == 1 and second.reply.unplaceable == []
    assert policy.mask.hits == 1
    h.starve()
    third = h.preempt_round(10.0 + 30.0)  # the entry expired: tried again, masked again
    assert isinstance(third.request, p.PlacementRequest) and third.request.mask == []
    assert third.reply is not None and third.reply.unplaceable == ["a1/huge"]


def test_a_node_added_or_an_allocation_released_clears_the_mask() -> None:
    h = unplaceable()
    assert h.policy.mask is not None
    h.preempt_round(10.0)
    assert h.policy.mask.keys() == ["a1/huge"]
    h.nodes("n3")  # room appeared: the huge ask now fits there without preemption
    assert h.policy.mask.keys() == []
    h.preempt_round(11.0)
    h.policy.mask.add(["a1/huge"], 11.0)
    h.release(sorted(h.cache.state.nodes["n2"].allocations)[0])
    assert h.policy.mask.keys() == []


def test_a_quota_change_clears_the_mask() -> None:
    h = unplaceable()
    assert h.policy.mask is not None
    h.preempt_round(10.0)
    h.policy.mask.add(["x/y"], 10.0)
    h.starve()
    h.preempt_round(11.0)
    assert "x/y" in h.policy.mask.entries, "same quotas: kept"
    h.ask("a1", "more", 10, count=5)  # a wants more: its ideal and b's quota change
    h.starve()
    h.preempt_round(12.0)
    assert "x/y" not in h.policy.mask.entries


# ---------------------------------------------------------------------- requests


def test_one_request_at_a_time_and_a_lost_reply_expires() -> None:
    h = unplaceable()
    policy = h.policy
    state, seq = h.allocator.state, h.allocator.view_seq
    first = policy.round(state, seq, 10.0)
    assert isinstance(first, p.PlacementRequest)
    assert policy.round(state, seq, 11.0) is None, "the reply has not come back"
    stray = p.PlacementReply(id="someone-else", unplaceable=["a1/huge"])
    assert policy.on_reply(stray, 11.0) is None
    assert policy.mask is not None and policy.mask.keys() == [], "a reply to another request is ignored"
    again = policy.round(state, seq, 12.0)  # two intervals later: the lost reply expired
    assert isinstance(again, p.PlacementRequest) and again.id != first.id
    assert policy.on_reply(p.PlacementReply(id=first.id), 12.0) is None
    assert policy.waiting == again.id


def test_no_request_without_a_beneficiary_or_a_victim_queue() -> None:
    h = PreemptHarness(two_queues(100, 100))
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    assert h.preempt_round(5.0).request is None  # nobody waits
    h.app("a1", "root.a")
    h.ask("a1", "small", 50)
    h.starve()  # it fits on n2: no preemption needed, and nobody is over its ideal
    assert h.preempt_round(6.0).request is None


def test_the_request_carries_the_quotas_and_the_config() -> None:
    h = unplaceable()
    out = h.policy.round(h.allocator.state, h.allocator.view_seq, 10.0)
    assert isinstance(out, p.PlacementRequest)
    assert out.policy == "sniper" and not out.intra_queue
    assert out.quotas == {"root.b": {"memory": 80}} and "root.c" not in out.quotas
    assert out.beneficiaries == ["root.a"] and out.targets == {"root.a": {"memory": 80}}
    assert out.budget == {"memory": 200} and out.min_missed == 1 and out.victim_cost == "running_time"
    assert out.grace == 15.0, "victims are costed at their kill, the config's grace after the notice"


# ---------------------------------------------------------------------- the proportional baseline


def proportional(**preemption: object) -> PreemptHarness:
    h = PreemptHarness(two_queues(100, 100, policy="proportional", natural_termination_factor=1.0, **preemption))
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [25] * 4)
    h.fill("b1", "root.b", "n2", [25] * 4, start=4)
    h.app("a1", "root.a")
    h.ask("a1", "small", 25, count=4)
    h.starve()
    return h


def test_the_proportional_baseline_marks_victims_without_a_beneficiary() -> None:
    h = proportional()
    result = h.preempt_round(10.0)
    assert isinstance(result.request, p.PreemptionProposal) and result.reply is None
    victims = result.request.victims
    assert result.request.placements == [] and len(victims) == 4  # b is 100 over its ideal
    assert result.outcome is not None and result.outcome.accepted == 4
    preempts = result.preempts()
    assert sorted(x.allocation for x in preempts) == sorted(victims)
    for x in preempts:
        assert (x.for_queue, x.for_ask, x.reservation, x.policy) == ("", "", "", "proportional")
        assert x.queue == "root.b" and x.deadline == 10.0 + 15.0 and x.reason.startswith("proportional")
    state = h.cache.state
    assert not state.reservations
    assert all(state.allocations[v].preempting and state.allocations[v].reservation is None for v in victims)
    # a second round does not mark them again
    again = h.preempt_round(11.0)
    assert not (set(again.request.victims if isinstance(again.request, p.PreemptionProposal) else []) & set(victims))
    assert len(h.preempts()) == 4
    # killed after grace; their room goes back to the pool, where the allocator gives it to whoever is first
    h.tick(25.0)
    assert sorted(h.kills()) == sorted(victims)
    h.release(*victims)
    h.settle()
    assert len([x for x in h.allocated() if x.app == "a1"]) == 4
    assert h.model.violations == []


@pytest.mark.parametrize(
    ("victim_state", "reason"),
    [("gone", "victim is gone"), ("preempting", "victim is already preempting")],
)
def test_the_shotgun_commit_rejects_stale_victims(victim_state: str, reason: str) -> None:
    h = proportional()
    victim = sorted(h.cache.state.nodes["n1"].allocations)[0]
    if victim_state == "gone":
        h.release(victim)
    else:
        h.cache.commit(p.VictimsMarked(victims=[victim], deadline=30.0))
        h.pump()
    bad = p.PreemptionProposal(id="test/shotgun", view_seq=0, policy="proportional", victims=[victim])
    outcome, decisions = h.commit(bad)
    assert outcome.accepted == 0 and outcome.rejected == {victim: reason}
    assert not any(isinstance(x, d.Preempt) for x in decisions)


def test_the_shotgun_commit_never_takes_from_a_disabled_queue() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 100}, preemption_policy="disabled"),
        policy="proportional",
    )
    h = PreemptHarness(raw)
    h.nodes("n1")
    victim = h.run("b1", 50, "n1", queue_path="root.b")
    outcome, _ = h.commit(p.PreemptionProposal(id="x", view_seq=0, policy="proportional", victims=[victim]))
    assert outcome.rejected == {victim: "victim's queue has preemption disabled"}
    assert not h.alloc(victim).preempting


def test_the_proportional_baseline_is_silent_when_nothing_is_over() -> None:
    h = proportional()
    h.feed(f.AskRemoved(app="a1", ask="small"))
    assert h.preempt_round(10.0).request is None


# ---------------------------------------------------------------------- rounds on an unchanged view


def test_sniper_reuses_its_quotas_while_only_the_clock_moved_and_recomputes_after_any_other_change() -> None:
    h = unplaceable()
    policy = h.policy
    assert isinstance(policy, SniperPolicy)
    state = h.allocator.state
    policy.round(state, h.allocator.view_seq, 10.0)
    first = policy.last_quotas
    state.apply(p.Clock(now=11.0))  # a tick: the view's sequence moves, its contents do not
    policy.round(state, h.allocator.view_seq + 1, 11.0)
    assert policy.last_quotas is first
    assert (policy.rounds_computed, policy.rounds_reused, policy.rounds_skipped) == (1, 1, 0)
    h.ask("a1", "more", 10, count=5)  # through the cache and the replica: a's demand and b's quota change
    policy.round(h.allocator.state, h.allocator.view_seq, 12.0)
    assert policy.last_quotas is not first and policy.last_quotas is not None
    assert (policy.rounds_computed, policy.rounds_reused) == (2, 1)
    assert policy.last_quotas.may_lose != first.may_lose  # type: ignore[union-attr]


def test_sniper_skips_a_round_without_pending_demand_and_computes_once_an_ask_arrives() -> None:
    h = unplaceable()
    policy = h.policy
    assert isinstance(policy, SniperPolicy)
    h.feed(f.AskRemoved(app="a1", ask="huge"))  # nobody waits for anything
    assert policy.round(h.allocator.state, h.allocator.view_seq, 10.0) is None
    assert (policy.rounds_skipped, policy.rounds_computed) == (1, 0)
    assert policy.last_quotas is not None and policy.last_quotas.beneficiaries == ()
    h.ask("a1", "more", 60, count=2)  # demand again: a is below its ideal and b above its own
    h.starve()
    out = policy.round(h.allocator.state, h.allocator.view_seq, 11.0)
    assert isinstance(out, p.PlacementRequest) and out.beneficiaries == ["root.a"]
    assert (policy.rounds_skipped, policy.rounds_computed) == (1, 1)


def test_sniper_computes_a_demand_free_round_while_a_request_is_in_flight_or_the_mask_holds_an_ask() -> None:
    h = unplaceable()
    policy = h.policy
    assert isinstance(policy, SniperPolicy) and policy.mask is not None
    request = policy.round(h.allocator.state, h.allocator.view_seq, 10.0)
    assert isinstance(request, p.PlacementRequest)
    h.feed(f.AskRemoved(app="a1", ask="huge"))
    assert policy.round(h.allocator.state, h.allocator.view_seq, 11.0) is None  # its reply may fill the mask
    assert policy.on_reply(p.PlacementReply(id=request.id, unplaceable=["a1/huge"]), 11.0) is None
    assert policy.mask.keys() == ["a1/huge"]
    h.feed(f.AppRemoved(app="a1"))  # a change of view, and still no demand, but a mask a clear would count
    assert policy.round(h.allocator.state, h.allocator.view_seq, 12.0) is None
    assert (policy.rounds_skipped, policy.rounds_computed) == (0, 3)


def test_the_proportional_baseline_skips_a_round_that_would_choose_nothing_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = proportional()
    h.feed(f.AskRemoved(app="a1", ask="small"))  # nothing is over: a round chooses nobody
    policy = h.policy
    assert isinstance(policy, ProportionalBaseline)
    rounds: list[int] = []
    inner = type(policy.policy).round

    def counted(self: object, snapshot: object, now_ms: int) -> object:
        rounds.append(now_ms)
        return inner(self, snapshot, now_ms)  # type: ignore[arg-type]

    monkeypatch.setattr(type(policy.policy), "round", counted)
    state = h.allocator.state
    assert policy.round(state, 1, 10.0) is None
    state.apply(p.Clock(now=11.0))
    assert policy.round(state, 2, 11.0) is None
    assert rounds == [10_000], "same contents, nothing tracked: the round is skipped"
    policy.policy._first_marked["gone"] = 0  # a mark the horizon drops at this round: it must run
    assert policy.round(state, 2, 40.0) is None
    assert rounds == [10_000, 40_000] and "gone" not in policy.policy.first_marked
    h.ask("a1", "again", 25, count=4)  # b is over again: the view changed, the round runs and marks
    h.starve()
    out = policy.round(h.allocator.state, h.allocator.view_seq, 41.0)
    assert rounds[-1] == 41_000 and isinstance(out, p.PreemptionProposal) and out.victims


def test_the_state_version_counts_every_change_but_the_clock() -> None:
    h = unplaceable()
    for state in (h.cache.state, h.allocator.state):  # the cache's and the allocator replica's
        before = state.version
        state.apply(p.Clock(now=state.now + 1.0))
        assert state.version == before
    before = (h.cache.state.version, h.allocator.state.version)
    h.ask("a1", "more", 10)
    assert h.cache.state.version > before[0] and h.allocator.state.version > before[1]


def test_the_baseline_snapshot_reuses_unchanged_containers_and_renews_changed_ones() -> None:
    from sniper.core.preemption.app_snapshots import AppSnapshots
    from sniper.core.preemption.view import snapshot_from_state

    h = proportional()
    state = h.cache.state
    kept = AppSnapshots()  # told of no change: every round builds every app, from the containers kept

    def containers() -> dict[str, ContainerSnapshot]:
        snapshot = snapshot_from_state(state, with_containers=True, kept=kept)
        return {c.id: c for app in snapshot.apps() for c in app.containers}

    first = containers()
    assert len(first) == 8
    victim, gone, *_ = sorted(first)
    h.cache.commit(p.VictimsMarked(victims=[victim], deadline=30.0))
    h.pump()
    h.release(gone)
    second = containers()
    assert second[victim].killable and not first[victim].killable  # renewed: its allocation is preempting
    assert gone not in second  # released: forgotten
    assert all(second[c] is first[c] for c in second if c != victim)  # the rest reused as they were
