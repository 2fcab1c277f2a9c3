"""A queue's ``preemption.min.runtime``: a guaranteed container of the queue that has run less than it is
never a victim, under the sniper, intra-queue and proportional policies alike, and an ask only such
containers could serve waits and is tried again when the first of them comes of age.

Sans-IO rounds on the harness, whose independent checker holds every notice to the minimum; the rule
written to break it: cheaper young victims beside dearer old ones, a node lost mid-grace, a gang only
half of whose room is of age, a config raised between a round and its commit, and a snapshot restored
by a new owner. A required-node ask takes young containers (as YuniKorn's required-node preemptor takes
any), and opportunistic containers go at any age.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from sniper.core.config import ConfigError, parse_partition, partition_to_raw
from sniper.core.preemption.placement import answer_placement_request
from sniper.core.preemption.policies import ProportionalBaseline
from sniper.core.recovery import restore, take_snapshot
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.snapshot import snapshot_msgpack
from sniper.simulator.model import ClusterModel
from tests.core_support import PARTITION, consistency_problems, partition_raw, queue
from tests.preemption_support import PreemptHarness, preemption_raw
from tests.recovery_support import Owner, durable_fingerprint, recover

MINIMUM = 60.0


def b_holds_both_nodes(minimum: str | None, *, n2_start: float = 2.0, **preemption: Any) -> PreemptHarness:
    """root.a and root.b (guarantee 100 each; b's containers must run ``minimum`` before they may go) on
    n1 and n2 (100 each); b1 holds n1 with 50s started at 0 and 1, n2 with 50s started at ``n2_start``
    and one second later; a1 is there, asking for nothing yet. The mask outlives every test (a wake-up,
    not its expiry, brings an ask back)."""
    b_props: dict[str, Any] = {} if minimum is None else {"preemption_min_runtime": minimum}
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 100}, **b_props),
        **{"mask_ttl": 10_000.0, **preemption},
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=n2_start)
    h.app("a1", "root.a")
    return h


def victims_of_age(h: PreemptHarness) -> bool:
    """Whether every notice so far went to a container that had run its queue's minimum (recounted here
    from the decisions, beside the harness's own checker)."""
    assert not h.model.violations, h.model.violations
    started = {x.allocation: x.t for x in h.decisions if isinstance(x, d.Allocated)}
    return all(x.t - started[x.allocation] >= MINIMUM for x in h.preempts())


def test_a_young_container_is_never_a_victim_and_the_ask_is_served_when_the_first_comes_of_age() -> None:
    h = b_holds_both_nodes(f"{MINIMUM:g}s")
    h.ask("a1", "big", 50)
    h.starve()
    waiting = h.preempt_round(30.0)
    assert waiting.placements == [] and h.preempts() == []
    assert waiting.reply is not None and waiting.reply.wake_at == MINIMUM  # b1's first started at 0
    assert h.policy.mask is not None and h.policy.mask.entries == {"a1/big": MINIMUM}
    assert h.policy.wake_at == MINIMUM  # what sniper_preemption_wake_at_seconds shows
    h.starve()
    assert h.preempt_round(MINIMUM - 1).placements == []  # still masked, and still young
    h.starve()
    served = h.preempt_round(MINIMUM)
    (placement,) = served.placements
    assert h.policy.wake_at is None
    assert [h.alloc(v).start for v in placement.victims] == [0.0]
    assert victims_of_age(h)


def test_without_a_minimum_the_same_ask_preempts_at_once() -> None:
    """The control: what holds the ask back is the minimum runtime, nothing else in the set-up."""
    h = b_holds_both_nodes(None)
    h.ask("a1", "big", 50)
    h.starve()
    result = h.preempt_round(30.0)
    assert len(result.placements) == 1 and result.reply is not None and result.reply.wake_at is None


def test_old_victims_go_though_young_ones_would_cost_less() -> None:
    """By running time the youngest victim is the cheapest: n2's, started at 50. Young, it stays."""
    h = b_holds_both_nodes(f"{MINIMUM:g}s", n2_start=50.0)
    h.ask("a1", "big", 50)
    h.starve()
    (placement,) = h.preempt_round(70.0).placements
    assert placement.node == "n1" and victims_of_age(h)
    control = b_holds_both_nodes(None, n2_start=50.0)
    control.ask("a1", "big", 50)
    control.starve()
    assert control.preempt_round(70.0).placements[0].node == "n2"


def test_a_parents_minimum_holds_its_childrens_containers() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("p", queue("b", guaranteed={"memory": 100}), guaranteed={"memory": 100}, preemption_min_runtime="1m"),
        mask_ttl=10_000.0,
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.p.b", "n1", [50, 50])
    h.fill("b1", "root.p.b", "n2", [50, 50], start=2)
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    waiting = h.preempt_round(59.0)
    assert waiting.placements == [] and waiting.reply is not None and waiting.reply.wake_at == 60.0
    h.starve()
    assert len(h.preempt_round(60.0).placements) == 1 and victims_of_age(h)


def test_within_a_queue_a_young_lower_priority_task_stays_until_it_comes_of_age() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 200}, preemption_min_runtime=f"{MINIMUM:g}s"),
        intra_queue=True,
        mask_ttl=10_000.0,
    )
    h = PreemptHarness(raw, policy="intra_queue")
    h.nodes("n1")
    h.fill("low", "root.a", "n1", [50, 50], start=10.0)
    h.app("high", "root.a", priority=5)
    h.ask("high", "urgent", 50, priority=5)
    h.starve()
    waiting = h.preempt_round(30.0)
    assert waiting.placements == [] and waiting.reply is not None and waiting.reply.wake_at == 10.0 + MINIMUM
    h.starve()
    (placement,) = h.preempt_round(10.0 + MINIMUM).placements
    assert [h.alloc(v).start for v in placement.victims] == [10.0] and victims_of_age(h)


def test_the_proportional_baseline_leaves_young_containers_and_wakes_when_they_come_of_age() -> None:
    """Nothing but the clock changes between the two rounds: the baseline, settled on a view where every
    container was young, selects again once the first comes of age."""
    h = b_holds_both_nodes(f"{MINIMUM:g}s", policy="proportional", natural_termination_factor=1.0)
    h.ask("a1", "big", 100)
    h.starve()
    young = h.preempt_round(30.0)
    assert young.proposal is None and h.preempts() == []
    assert isinstance(h.policy, ProportionalBaseline) and h.policy.wake_at == MINIMUM
    version = h.allocator.state.version
    h.tick(MINIMUM - 1)
    assert h.policy.settled(h.allocator.state)  # a round now would choose none again: skipped
    h.tick(MINIMUM + 1)
    assert h.allocator.state.version == version and not h.policy.settled(h.allocator.state)
    of_age = h.preempt_round(MINIMUM + 1)
    assert of_age.outcome is not None and of_age.outcome.accepted > 0
    assert victims_of_age(h)
    control = b_holds_both_nodes(None, policy="proportional", natural_termination_factor=1.0)
    control.ask("a1", "big", 100)
    control.starve()
    at_once = control.preempt_round(30.0)
    assert at_once.outcome is not None and at_once.outcome.accepted > 0


def test_the_proportional_commit_refuses_a_young_victim() -> None:
    h = b_holds_both_nodes(f"{MINIMUM:g}s", policy="proportional")
    h.tick(30.0)
    victim = sorted(h.cache.state.apps["b1"].allocations)[0]
    out = p.PreemptionProposal(
        partition=PARTITION, id="test/shotgun", view_seq=0, policy="proportional", victims=[victim]
    )
    outcome, _ = h.commit(out)
    assert outcome.accepted == 0
    assert outcome.rejected == {victim: f"victim has run less than its queue's preemption.min.runtime ({MINIMUM:g} s)"}


def test_a_required_node_ask_takes_a_young_container_on_its_node() -> None:
    h = b_holds_both_nodes(f"{MINIMUM:g}s")
    h.ask("a1", "daemon", 50, node="n2")
    h.starve()
    (placement,) = h.preempt_round(30.0).placements
    assert placement.node == "n2"
    assert all(30.0 - h.alloc(v).start < MINIMUM for v in placement.victims)
    assert not h.model.violations  # the checker knows the required-node rule stands aside


def test_a_minimum_raised_between_a_round_and_its_commit_refuses_the_victim() -> None:
    h = b_holds_both_nodes(f"{MINIMUM:g}s")
    h.ask("a1", "big", 50)
    h.starve()
    h.tick(100.0)
    request = h.policy.round(h.allocator.state, h.allocator.view_seq, 100.0)
    assert isinstance(request, p.PlacementRequest)
    planned = h.policy.on_reply(answer_placement_request(h.allocator, request), 100.0)
    assert planned is not None and len(planned.placements) == 1  # of age under the minute
    raised = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 100}, preemption_min_runtime="1h"),
    )
    h.feed(f.PartitionConfigEvent(config=raised))
    outcome, _ = h.commit(planned)
    assert outcome.accepted == 0
    (why,) = outcome.rejected.values()
    assert why.endswith("has run less than its queue's preemption.min.runtime (3600 s)")
    assert h.preempts() == []


def test_a_notice_given_before_the_minimum_was_raised_still_kills_at_its_deadline() -> None:
    h = b_holds_both_nodes(f"{MINIMUM:g}s")
    h.ask("a1", "big", 50)
    h.starve()
    (placement,) = h.preempt_round(100.0).placements
    raised = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 100}, preemption_min_runtime="1h"),
    )
    h.feed(f.PartitionConfigEvent(config=raised))
    h.tick(120.0)  # past the grace
    assert set(placement.victims) <= set(h.kills())
    assert victims_of_age(h) and not consistency_problems(h.cache.state)


def test_a_node_lost_mid_grace_leaves_the_ask_waiting_for_the_young_containers_elsewhere() -> None:
    """n1's containers are of age, n2's and n3's started at 90 and later: the first round takes one of
    n1's; n1 is lost within the grace; the ask waits until n2's first container comes of age, then
    takes it."""
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 100}, preemption_min_runtime=f"{MINIMUM:g}s"),
        mask_ttl=10_000.0,
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2", "n3")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=90.0)
    h.fill("b1", "root.b", "n3", [50, 50], start=92.0)
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    (first,) = h.preempt_round(100.0).placements
    assert first.node == "n1"
    h.tick(105.0)
    h.feed(f.NodeRemoved(node="n1"))
    h.starve()
    waiting = h.preempt_round(106.0)
    assert waiting.placements == [] and waiting.reply is not None and waiting.reply.wake_at == 90.0 + MINIMUM
    h.starve()
    (second,) = h.preempt_round(90.0 + MINIMUM).placements
    assert second.node == "n2" and [h.alloc(v).start for v in second.victims] == [90.0]
    assert victims_of_age(h) and not consistency_problems(h.cache.state)


def gang(h: PreemptHarness, members: int) -> None:
    h.feed(f.AskAdded(app="a1", ask="gang", resource={"memory": 50}, count=members, gang_min=members))
    h.starve()


def test_a_gang_only_half_of_whose_room_is_of_age_takes_no_victim_until_all_of_it_is() -> None:
    """At 60.5 only b1's container started at 0 has run a minute: one member's room, not two."""
    h = b_holds_both_nodes(f"{MINIMUM:g}s")
    gang(h, 2)
    assert h.preempt_round(MINIMUM + 0.5).placements == [] and h.preempts() == []
    h.starve()
    assert len(h.preempt_round(MINIMUM + 1).placements) == 2
    assert victims_of_age(h)
    control = b_holds_both_nodes(f"{MINIMUM:g}s")
    control.ask("a1", "two", 50, count=2)
    control.starve()
    assert len(control.preempt_round(MINIMUM + 0.5).placements) == 1  # one ask, not a gang: what is of age


def test_a_new_owner_restored_from_a_snapshot_keeps_the_minimum_and_the_containers_ages() -> None:
    raw = partition_raw(
        queue("a", guaranteed={"memory": 8}),
        queue("b", guaranteed={"memory": 8}, preemption_min_runtime="1m"),
        policy="sniper",
    )
    o = Owner(config=raw)
    o.feed_event(
        f.NodeAdded(partition=PARTITION, id="n1", node="n1", capacity={"memory": 8}),
        f.NodeAdded(partition=PARTITION, id="n2", node="n2", capacity={"memory": 8}),
        f.AppAdded(partition=PARTITION, id="b1", app="b1", queue="root.b"),
        f.AskAdded(partition=PARTITION, id="b1k", app="b1", ask="k", resource={"memory": 4}, count=4),
        f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"),
    )
    o.settle()
    o.tick(10.0)
    snap = snapshot_msgpack.decode(msgspec.msgpack.encode(take_snapshot(o.core)))
    core = restore(snap, epoch=snap.epoch + 1)
    assert core.state.queues["root.b"].config.preemption_min_runtime == 60.0
    core.handle_event(f.AskAdded(partition=PARTITION, id="a1k", app="a1", ask="k", resource={"memory": 4}))
    victim = sorted(a for a in core.state.apps["b1"].allocations if core.state.allocations[a].node == "n1")[0]

    def offer(at: float, pid: str) -> p.ProposalOutcome:
        core.tick(at)
        placement = p.Victimized(app="a1", ask="k", node="n1", victims=[victim])
        pp = p.PreemptionProposal(partition=PARTITION, id=pid, view_seq=0, policy="sniper", placements=[placement])
        core.handle_proposal(pp)
        view = core.drain().view
        assert view is not None
        (outcome,) = [x for x in view.outcomes if x.proposal == pid]
        return outcome

    young = offer(30.0, "pp/young")
    assert young.accepted == 0
    assert list(young.rejected.values()) == [
        f"victim {victim} has run less than its queue's preemption.min.runtime (60 s)"
    ]
    assert offer(60.0, "pp/of-age").accepted == 1


def test_a_new_owner_replaying_the_log_after_a_snapshot_refuses_and_takes_what_the_old_one_did() -> None:
    """After the snapshot the old owner refuses a young victim at 30 s, takes it once of age and kills it at
    the grace's end; the new owner replays its feed and log to the same state, deciding nothing anew."""
    raw = partition_raw(
        queue("a", guaranteed={"memory": 8}),
        queue("b", guaranteed={"memory": 8}, preemption_min_runtime="1m"),
        policy="sniper",
    )
    o = Owner(config=raw)
    o.feed_event(
        f.NodeAdded(partition=PARTITION, id="n1", node="n1", capacity={"memory": 8}),
        f.NodeAdded(partition=PARTITION, id="n2", node="n2", capacity={"memory": 8}),
        f.AppAdded(partition=PARTITION, id="b1", app="b1", queue="root.b"),
        f.AskAdded(partition=PARTITION, id="b1k", app="b1", ask="k", resource={"memory": 4}, count=4),
    )
    o.settle()
    o.tick(10.0)
    snap = take_snapshot(o.core)
    o.feed_event(
        f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"),
        f.AskAdded(partition=PARTITION, id="a1k", app="a1", ask="k", resource={"memory": 4}),
    )
    victim = sorted(a.id for a in o.core.state.allocations.values() if a.node == "n1")[0]
    o.tick(30.0)
    o.preempt("n1", [victim])
    assert not any(isinstance(x, d.Preempt) for x in o.log)
    o.tick(60.0)
    o.preempt("n1", [victim])
    (notice,) = [x for x in o.log if isinstance(x, d.Preempt)]
    assert notice.allocation == victim
    o.tick(100.0)
    assert any(isinstance(x, d.Kill) for x in o.log)
    core, result = recover(o, snap)
    assert result.divergences == [] and result.fresh == []
    assert durable_fingerprint(core) == durable_fingerprint(o.core)


# ---------------------------------------------------------------------- the configuration


def test_the_minimum_is_a_go_duration_inherited_by_children_and_zero_means_none() -> None:
    raw = partition_raw(
        queue("p", queue("x"), queue("y", preemption_min_runtime="0"), preemption_min_runtime="1m30s"),
        queue("z"),
    )
    cfg = parse_partition(raw)
    minimum = {q.path: q.preemption_min_runtime for q in cfg.queues()}
    assert minimum == {"root": 0.0, "root.p": 90.0, "root.p.x": 90.0, "root.p.y": 0.0, "root.z": 0.0}
    again = parse_partition(partition_to_raw(cfg))
    assert {q.path: q.preemption_min_runtime for q in again.queues()} == minimum
    assert not [w for w in cfg.warnings if "min.runtime" in w]


@pytest.mark.parametrize("value", ["10", "ten minutes", "-1m", True])
def test_a_minimum_that_is_not_a_duration_is_refused_naming_the_property(value: object) -> None:
    with pytest.raises(ConfigError, match=r"queue root\.a\.preemption\.min\.runtime: .* is not a duration"):
        parse_partition(partition_raw(queue("a", preemption_min_runtime=value)))


# ---------------------------------------------------------------------- the independent checker


def test_the_checker_finds_a_victim_younger_than_its_queues_minimum() -> None:
    model = ClusterModel(PARTITION, parse_partition(two_queues_with_minimum()))
    model.on_event(f.NodeAdded(node="n1", capacity={"memory": 100}))
    model.on_event(f.AppAdded(app="b1", queue="root.b"))
    model.on_event(f.AppAdded(app="a1", queue="root.a"))
    model.on_event(f.AskAdded(app="a1", ask="w", resource={"memory": 50}))
    model.on_decision(
        d.Allocated(
            seq=1, t=5.0, allocation="alloc-1", app="b1", ask="t", queue="root.b", node="n1", resource={"memory": 100}
        )
    )
    model.on_decision(
        d.Preempt(
            seq=2,
            t=20.0,
            allocation="alloc-1",
            app="b1",
            queue="root.b",
            node="n1",
            resource={"memory": 100},
            for_ask="w",
            for_app="a1",
            for_queue="root.a",
            deadline=35.0,
            reservation="",
            policy="sniper",
        )
    )
    (violation,) = [v for v in model.violations if "minimum" in v.reason]
    assert violation.invariant == 5 and "ran 15 s, less than root.b's minimum 60 s" in violation.reason


def two_queues_with_minimum() -> dict[str, Any]:
    return preemption_raw(
        queue("a", guaranteed={"memory": 50}),
        queue("b", guaranteed={"memory": 50}, preemption_min_runtime=f"{MINIMUM:g}s"),
    )
