"""Quota preemption (YuniKorn 1.8): a queue kept above a lowered ``max`` for its ``quota.preemption.delay``
loses its own containers, the fewest that bring it back, with the grace; never another queue's.

Sans-IO on the harness (the cache enforces it at its ticks), the state a snapshot rebuilds, the bundled
``quota`` scenario through the real actors, and the independent checker's invariant 15.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from sniper.core.cache import state_changes
from sniper.core.config import parse_partition, partition_to_raw
from sniper.core.preemption import quota_preemption
from sniper.core.recovery import take_snapshot
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.simulator.compare import compare
from sniper.simulator.model import ClusterModel
from sniper.simulator.run import SimulationSettings
from sniper.simulator.scenarios import scenario
from tests.core_support import quantities, queue
from tests.preemption_support import GRACE, PARTITION, PreemptHarness, preemption_raw
from tests.recovery_support import Owner, durable_fingerprint, recover

DELAY = 60.0
LOWERED_AT = 10.0


def quota_raw(a_max: int = 100, *, delay: str | None = "1m", enabled: bool = True, **preemption: Any) -> dict[str, Any]:
    """root.a (max ``a_max``, the quota delay ``delay``) and root.b, quota preemption ``enabled``."""
    props: dict[str, Any] = {} if delay is None else {"quota_preemption_delay": delay}
    return preemption_raw(
        queue("a", maximum={"memory": a_max}, **props),
        queue("b"),
        quotapreemptionenabled=enabled,
        **preemption,
    )


def a_at_its_max(raw: dict[str, Any], sizes: tuple[int, ...] = (25, 25, 25, 25)) -> tuple[PreemptHarness, list[str]]:
    """root.a runs ``sizes`` on n1, started one second apart (the last the youngest); root.b runs on n2."""
    h = PreemptHarness(raw, policy="sniper")  # the harness's own rounds are not used: the cache's ticks enforce
    h.nodes("n1", "n2")
    mine = h.fill("a1", "root.a", "n1", list(sizes))
    h.fill("b1", "root.b", "n2", [50, 50])
    return h, mine


def lower(h: PreemptHarness, raw: dict[str, Any], a_max: int, at: float = LOWERED_AT) -> None:
    changed = copy.deepcopy(raw)
    changed["queues"][0]["queues"][0]["resources"]["max"] = quantities({"memory": a_max})
    h.tick(at)
    h.feed(f.PartitionConfigEvent(config=changed, t=at))


def preempted_at(h: PreemptHarness, now: float) -> list[d.Preempt]:
    """The notices the cache's tick at ``now`` gives."""
    return [x for x in h.tick(now) if isinstance(x, d.Preempt)]


def held(h: PreemptHarness, path: str) -> int:
    """What ``path`` holds once its containers under notice are gone."""
    q = h.cache.state.queues[path]
    return q.allocated.get("memory", 0) - q.preempting.get("memory", 0)


def test_a_queue_above_a_halved_max_loses_its_youngest_containers_once_the_delay_has_run() -> None:
    raw = quota_raw()
    h, mine = a_at_its_max(raw)
    lower(h, raw, 50)
    assert preempted_at(h, LOWERED_AT + DELAY - 1) == []
    victims = preempted_at(h, LOWERED_AT + DELAY)
    assert [v.allocation for v in victims] == [mine[3], mine[2]]  # least running time first
    assert {v.queue for v in victims} == {"root.a"} and all(v.for_ask == "" for v in victims)
    assert all(v.deadline == LOWERED_AT + DELAY + GRACE and v.policy == "quota" for v in victims)
    assert "above its max" in victims[0].reason
    assert held(h, "root.a") == 50
    assert preempted_at(h, LOWERED_AT + DELAY + 1) == []  # the victims under notice already bring it back
    h.tick(LOWERED_AT + DELAY + GRACE)
    assert sorted(h.kills()) == sorted([mine[3], mine[2]])
    h.release(mine[3], mine[2])  # the resource manager confirms the kills
    assert h.cache.state.queues["root.a"].allocated == {"memory": 50}
    assert h.cache.state.queues["root.b"].allocated == {"memory": 100}


def test_the_fewest_containers_that_bring_it_back_go_and_never_one_more() -> None:
    """Over by 25: the youngest (10) alone is not enough, so 10 then 40 are taken; the 40 alone covers the
    25, so the 10 is not needed and stays."""
    raw = quota_raw(a_max=200)
    h, mine = a_at_its_max(raw, sizes=(30, 45, 40, 10))
    lower(h, raw, 100)
    victims = [v.allocation for v in preempted_at(h, LOWERED_AT + DELAY)]
    assert victims == [mine[2]]
    assert held(h, "root.a") == 85


def test_without_the_partition_flag_the_queue_delay_or_preemption_nothing_is_quota_preempted() -> None:
    for raw in (quota_raw(enabled=False), quota_raw(delay=None), quota_raw(delay="0"), quota_raw(policy="none")):
        h, _ = a_at_its_max(raw)
        lower(h, raw, 50)
        assert h.cache.state.max_since == {}
        assert preempted_at(h, LOWERED_AT + 10 * DELAY) == [] and held(h, "root.a") == 100


def test_a_parent_above_its_max_loses_containers_of_its_children_and_none_outside() -> None:
    raw = preemption_raw(
        queue(
            "p",
            queue("x"),
            queue("y"),
            maximum={"memory": 100},
            quota_preemption_delay="1m",
        ),
        queue("b"),
        quotapreemptionenabled=True,
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    xs = h.fill("x1", "root.p.x", "n1", [30, 20])
    ys = h.fill("y1", "root.p.y", "n1", [30, 20], start=5)
    h.fill("b1", "root.b", "n2", [100])
    changed = copy.deepcopy(raw)
    changed["queues"][0]["queues"][0]["resources"]["max"] = quantities({"memory": 60})
    h.tick(LOWERED_AT)
    h.feed(f.PartitionConfigEvent(config=changed, t=LOWERED_AT))
    victims = preempted_at(h, LOWERED_AT + DELAY)
    taken = {v.allocation for v in victims}
    assert taken <= set(xs) | set(ys) and {v.queue for v in victims} <= {"root.p.x", "root.p.y"}
    assert held(h, "root.p") <= 60
    for v in victims:  # each is needed: without it the parent would stay above 60
        assert held(h, "root.p") + v.resource["memory"] > 60


def test_a_gang_is_taken_whole_though_one_member_would_do() -> None:
    """Over by 20: the application master goes last, so the gang of three 20s goes, all of it."""
    raw = quota_raw()
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    master = h.run("a1", 40, "n1", at=0, am=True, queue_path="root.a")
    h.tick(5)
    h.app("g", "root.a")
    h.feed(f.AskAdded(app="g", ask="gang", resource={"memory": 20}, count=3, gang_min=3, t=5))
    h.starve()
    gang = [x.allocation for x in h.allocated() if x.app == "g"]
    assert len(gang) == 3
    lower(h, raw, 80)
    victims = {v.allocation for v in preempted_at(h, LOWERED_AT + DELAY)}
    assert victims == set(gang) and master not in victims
    assert held(h, "root.a") == 40


def test_without_a_gang_one_container_would_do() -> None:
    """The control: the same shapes as single containers lose one."""
    raw = quota_raw()
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.run("a1", 40, "n1", at=0, am=True, queue_path="root.a")
    h.fill("a1", "root.a", "n1", [20, 20, 20], start=5)
    lower(h, raw, 80)
    assert len(preempted_at(h, LOWERED_AT + DELAY)) == 1


def test_victims_lost_with_their_node_mid_grace_take_no_other_container() -> None:
    raw = quota_raw()
    h = PreemptHarness(raw)
    h.nodes("n1", "n2", "n3")
    older = h.fill("a1", "root.a", "n1", [25, 25])
    younger = h.fill("a1", "root.a", "n3", [25, 25], start=2)
    lower(h, raw, 50)
    victims = [v.allocation for v in preempted_at(h, LOWERED_AT + DELAY)]
    assert sorted(victims) == sorted(younger)
    h.feed(f.NodeRemoved(node="n3", t=LOWERED_AT + DELAY + 1))
    assert preempted_at(h, LOWERED_AT + DELAY + 2) == []
    h.tick(LOWERED_AT + DELAY + GRACE)
    assert h.kills() == [] and sorted(h.cache.state.allocations) == sorted(older)
    assert h.cache.state.queues["root.a"].allocated == {"memory": 50}


def test_a_max_raised_back_mid_grace_takes_no_further_container() -> None:
    raw = quota_raw()
    h, _ = a_at_its_max(raw)
    lower(h, raw, 50)
    first = [v.allocation for v in preempted_at(h, LOWERED_AT + DELAY)]
    assert len(first) == 2
    lower(h, raw, 100, at=LOWERED_AT + DELAY + 1)
    assert h.cache.state.max_since["root.a"] == LOWERED_AT + DELAY + 1  # the new max restarts the clock
    assert preempted_at(h, LOWERED_AT + 3 * DELAY) == []


def test_a_max_lowered_again_mid_delay_restarts_the_delay() -> None:
    raw = quota_raw()
    h, _ = a_at_its_max(raw)
    lower(h, raw, 75)
    lower(h, raw, 50, at=LOWERED_AT + 30)
    assert preempted_at(h, LOWERED_AT + DELAY) == []
    assert len(preempted_at(h, LOWERED_AT + 30 + DELAY)) == 2


def test_the_max_clock_survives_a_snapshot_and_the_restored_state_takes_the_same_victims() -> None:
    raw = quota_raw()
    h, _ = a_at_its_max(raw)
    lower(h, raw, 50)
    h.tick(LOWERED_AT + 20)
    changes = msgspec.msgpack.decode(msgspec.msgpack.encode(state_changes(h.cache.state)), type=list[p.ChangeMsg])
    restored = PartitionState(PARTITION)
    for change in changes:
        restored.apply(change)
    assert restored.max_since == h.cache.state.max_since == {"root.a": LOWERED_AT}
    for state in (restored, h.cache.state):
        state.apply(p.Clock(now=LOWERED_AT + DELAY))
    assert [v.alloc.id for v in quota_preemption.select(restored)] == [
        v.alloc.id for v in quota_preemption.select(h.cache.state)
    ]
    assert quota_preemption.select(restored)


def test_a_snapshot_without_quota_preemption_encodes_its_config_as_before() -> None:
    """No cost when unused: the config change carries no clock, and the preemption section no flag."""
    h, _ = a_at_its_max(quota_raw(enabled=False))
    config = next(c for c in state_changes(h.cache.state) if isinstance(c, p.ConfigSet))
    assert b"max_since" not in msgspec.json.encode(config)
    assert "quotapreemptionenabled" not in config.config["preemption"]


# ---------------------------------------------------------------- through the real actors, and the checker


def _services_memory_at(decisions: list[d.DecisionMsg], t: float) -> int:
    """What root.services holds at ``t``, from the decisions alone."""
    held: dict[str, int] = {}
    for x in decisions:
        if x.t > t:
            break
        if isinstance(x, d.Allocated) and x.queue == "root.services":
            held[x.allocation] = x.resource["memory"]
        elif isinstance(x, d.Kill | d.Released | d.AllocationLost):
            held.pop(x.allocation, None)
    return sum(held.values())


def test_the_bundled_scenario_brings_services_under_its_halved_max_within_delay_grace_and_a_round() -> None:
    sc = scenario("quota")
    runs = compare(sc.events, sc.config, ["sniper", "none"], SimulationSettings(until=600.0))
    with_quota, without = runs["sniper"], runs["none"]
    assert with_quota.violations == 0 and without.violations == 0
    notices = [x for x in with_quota.decisions if isinstance(x, d.Preempt)]
    assert notices and {x.policy for x in notices} == {"quota"} and {x.queue for x in notices} == {"root.services"}
    halved = [e for e in sc.events if isinstance(e, f.PartitionConfigEvent)]
    assert [e.t for e in halved] == [300.0]
    services = parse_partition(halved[0].config).leaf("root.services")
    assert services is not None and services.max is not None
    new_max = services.max
    assert min(x.t for x in notices) >= 300.0 + 120.0
    interval = sc.config.partitions[0].preemption.interval
    assert _services_memory_at(with_quota.decisions, 300.0 + 120.0 + 15.0 + interval) <= new_max["memory"]
    assert _services_memory_at(without.decisions, 600.0) > new_max["memory"]
    assert not [x for x in without.decisions if isinstance(x, d.Preempt)]


def _checked_model(decisions: list[d.DecisionMsg]) -> ClusterModel:
    raw = quota_raw()
    model = ClusterModel(PARTITION, parse_partition(raw))
    model.on_event(f.NodeAdded(node="n1", capacity={"memory": 200}))
    for i, queue_path in enumerate(("root.a", "root.a", "root.b")):
        app = f"{queue_path[-1]}1"
        model.on_event(f.AppAdded(app=app, queue=queue_path))
        model.on_event(f.AskAdded(app=app, ask=f"t{i}", resource={"memory": 50}))
        model.on_decision(
            d.Allocated(
                allocation=f"alloc-{i + 1}",
                app=app,
                ask=f"t{i}",
                queue=queue_path,
                node="n1",
                resource={"memory": 50},
                seq=i + 1,
            )
        )
    changed = copy.deepcopy(raw)
    changed["queues"][0]["queues"][0]["resources"]["max"] = quantities({"memory": 50})
    model.on_event(f.PartitionConfigEvent(config=changed, t=LOWERED_AT))
    for x in decisions:
        model.on_decision(x)
    return model


def _quota_notice(aid: str, app: str, queue_path: str, seq: int) -> d.Preempt:
    return d.Preempt(
        allocation=aid,
        app=app,
        queue=queue_path,
        node="n1",
        resource={"memory": 50},
        for_ask="",
        for_app="",
        for_queue="",
        deadline=LOWERED_AT + DELAY + GRACE,
        reservation="",
        policy="quota",
        seq=seq,
        t=LOWERED_AT + DELAY,
    )


def test_the_checker_flags_a_quota_victim_outside_the_queue_and_one_more_than_needed() -> None:
    right = _checked_model([_quota_notice("alloc-2", "a1", "root.a", 10)])
    assert right.violations == []
    outside = _checked_model([_quota_notice("alloc-3", "b1", "root.b", 10)])
    assert [v.invariant for v in outside.violations] == [15]
    one_more = _checked_model(
        [_quota_notice("alloc-2", "a1", "root.a", 10), _quota_notice("alloc-1", "a1", "root.a", 11)]
    )
    assert [v.invariant for v in one_more.violations] == [15]


def test_the_checker_flags_a_queue_still_above_its_lowered_max_past_delay_grace_and_a_round() -> None:
    model = _checked_model([])
    model.check(LOWERED_AT + DELAY + GRACE + 1.0)  # the round (interval 1 s) may still be running
    assert model.violations == []
    model.check(LOWERED_AT + DELAY + GRACE + 1.5)
    assert [v.invariant for v in model.violations] == [15]


def test_the_quota_delay_is_a_go_duration_of_the_queue_alone_and_survives_the_round_trip() -> None:
    raw = preemption_raw(
        queue("p", queue("a"), maximum={"memory": 100}, quota_preemption_delay="1m30s"),
        queue("bad", quota_preemption_delay="soon"),
        quotapreemptionenabled=True,
    )
    part = parse_partition(raw)
    delays = {q.path: q.quota_preemption_delay for q in part.queues()}
    assert delays == {"root": 0.0, "root.p": 90.0, "root.p.a": 0.0, "root.bad": 0.0}  # not inherited
    assert any("quota.preemption.delay" in w and "never quota preempted" in w for w in part.warnings)
    again = parse_partition(partition_to_raw(part))
    assert again == part and again.preemption.quotapreemptionenabled


def _quota_owner() -> Owner:
    """An old owner: root.a (max 16, quota delay 1m) holds four 4s on n1 and n2."""
    o = Owner(config=quota_raw(a_max=16))
    o.feed_event(
        f.NodeAdded(partition=PARTITION, id="n1", node="n1", capacity={"memory": 8}),
        f.NodeAdded(partition=PARTITION, id="n2", node="n2", capacity={"memory": 8}),
        f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"),
        f.AskAdded(partition=PARTITION, id="a1k", app="a1", ask="k", resource={"memory": 4}, count=4),
    )
    o.settle()
    return o


def _lower_on(o: Owner) -> None:
    changed = quota_raw(a_max=8)
    o.tick(LOWERED_AT)
    o.feed_event(f.PartitionConfigEvent(partition=PARTITION, id="halved", config=changed, t=LOWERED_AT))


def test_a_new_owner_replaying_the_log_keeps_the_quota_notices_and_the_clock() -> None:
    for snapshot_after_lowering in (False, True):
        o = _quota_owner()
        if snapshot_after_lowering:
            _lower_on(o)
            snapshot = take_snapshot(o.core)
        else:
            snapshot = take_snapshot(o.core)
            _lower_on(o)
        o.tick(LOWERED_AT + DELAY)
        victims = sorted(x.allocation for x in o.log if isinstance(x, d.Preempt))
        assert len(victims) == 2
        core, result = recover(o, snapshot)
        assert result.divergences == [] and result.fresh == []
        assert core.state.max_since == o.core.state.max_since == {"root.a": LOWERED_AT}
        assert sorted(a.id for a in core.state.allocations.values() if a.preempting) == victims
        assert durable_fingerprint(core) == durable_fingerprint(o.core)


def test_an_app_with_a_preemption_contract_is_asked_to_give_back_rather_than_noticed() -> None:
    raw = quota_raw()
    h = PreemptHarness(raw, policy="sniper")
    h.nodes("n1", "n2")
    h.feed(f.AppAdded(app="c1", queue="root.a", preemption_contract=True))
    mine = h.fill("c1", "root.a", "n1", [25, 25, 25, 25])
    lower(h, raw, 50)
    decisions = h.tick(LOWERED_AT + DELAY)
    requests = [x for x in decisions if isinstance(x, d.PreemptRequest)]
    assert [x for x in decisions if isinstance(x, d.Preempt)] == []
    assert len(requests) == 1 and requests[0].policy == "quota" and requests[0].for_queue == ""
    assert sorted(c.allocation for c in requests[0].containers) == sorted([mine[3], mine[2]])
    assert held(h, "root.a") == 50


def test_a_child_above_its_own_max_is_settled_first_and_counts_for_its_parent() -> None:
    """x (max lowered to 20) loses two 20s; that already brings p (max 60) from 100 to 60."""
    raw = preemption_raw(
        queue(
            "p",
            queue("x", maximum={"memory": 100}, quota_preemption_delay="1m"),
            queue("y"),
            maximum={"memory": 100},
            quota_preemption_delay="1m",
        ),
        queue("b"),
        quotapreemptionenabled=True,
    )
    h = PreemptHarness(raw, policy="sniper")
    h.nodes("n1", "n2")
    xs = h.fill("x1", "root.p.x", "n1", [20, 20, 20])
    ys = h.fill("y1", "root.p.y", "n1", [20, 20], start=5)
    changed = copy.deepcopy(raw)
    p_queue = changed["queues"][0]["queues"][0]
    p_queue["resources"]["max"] = quantities({"memory": 60})
    p_queue["queues"][0]["resources"]["max"] = quantities({"memory": 20})
    h.tick(LOWERED_AT)
    h.feed(f.PartitionConfigEvent(config=changed, t=LOWERED_AT))
    victims = preempted_at(h, LOWERED_AT + DELAY)
    assert sorted(v.allocation for v in victims) == sorted(xs[1:])
    assert not {v.allocation for v in victims} & set(ys)
    assert (held(h, "root.p.x"), held(h, "root.p")) == (20, 60)


def test_a_queue_above_its_max_with_nothing_it_may_lose_leaves_no_work_pending() -> None:
    """Its only containers are in a preemption-disabled queue: nothing to take, so nothing keeps time moving."""
    raw = preemption_raw(
        queue("a", maximum={"memory": 100}, quota_preemption_delay="1m", preemption_policy="disabled"),
        quotapreemptionenabled=True,
    )
    h = PreemptHarness(raw, policy="sniper")
    h.nodes("n1")
    h.fill("a1", "root.a", "n1", [50, 50])
    lower(h, raw, 50)
    assert quota_preemption.pending(h.cache.state)  # the delay is still running
    assert preempted_at(h, LOWERED_AT + DELAY) == []
    assert not quota_preemption.pending(h.cache.state) and held(h, "root.a") == 100
