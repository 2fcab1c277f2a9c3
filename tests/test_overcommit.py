"""Over-commit from measured utilization (YARN-1011): ``node_utilization`` reports, the partition's
``overcommit`` block, opportunistic containers on measured slack, kills above ``preempt_above``, the
state through snapshots and replay, the checker's invariant 12, and the bundled scenario."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from sniper.core.cache import state_changes
from sniper.core.config import ConfigError, parse_partition, partition_to_raw
from sniper.core.recovery import restore, take_snapshot
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.model import ClusterModel
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.core_support import Harness, fingerprint, invariant_problems, rejected_reasons
from tests.overcommit_support import CAP, full_node, raw_config, report
from tests.recovery_support import Owner, recover


def opp(ask: str, memory: int, count: int = 1, usage: int | None = None) -> f.AskAdded:
    return f.AskAdded(
        app="b1",
        ask=ask,
        resource={"memory": memory},
        count=count,
        execution_type="opportunistic",
        usage=None if usage is None else {"memory": usage},
    )


def over_committed(h: Harness) -> list[d.Allocated]:
    return [x for x in h.allocated() if x.opportunistic]


def overcommit_kills(h: Harness) -> list[d.Kill]:
    return [x for x in h.decisions if isinstance(x, d.Kill) and x.cause == "overcommit"]


# ---------------------------------------------------------------------- the config block


def test_the_overcommit_block_parses_and_round_trips() -> None:
    config = parse_partition(raw_config())
    assert config.overcommit is not None
    assert config.overcommit.allocate_below == {"memory": 0.8}
    assert parse_partition(partition_to_raw(config)) == config
    assert parse_partition(raw_config(None)).overcommit is None


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ({"allocate_below": {"memory": 0}, "preempt_above": {"memory": 0.9}}, "allocate_below"),
        ({"allocate_below": {"memory": 0.5}, "preempt_above": {"memory": 1.5}}, "preempt_above"),
        ({"allocate_below": {"memory": math.nan}, "preempt_above": {"memory": 0.9}}, "allocate_below"),
        ({"allocate_below": {"memory": 0.95}, "preempt_above": {"memory": 0.9}}, "is above preempt_above.memory"),
        ({"allocate_below": {"vcore": 0.5}, "preempt_above": {"memory": 0.9}}, "names no 'vcore'"),
        ({"allocate_below": {}, "preempt_above": {"memory": 0.9}}, "allocate_below"),
        ({"allocate_below": {"memory": 0.5}}, "preempt_above"),
        ({"allocate_below": {"memory": 0.5}, "preempt_above": {"memory": 0.9}, "ratio": 2}, "unknown key 'ratio'"),
    ],
)
def test_a_bad_overcommit_block_is_refused_naming_the_key(block: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match="overcommit") as err:
        parse_partition(raw_config(block))
    assert says in str(err.value)


# ---------------------------------------------------------------------- reports


@pytest.mark.parametrize(
    ("event", "says"),
    [
        (report(100.0, node="n9"), "unknown node n9"),
        (report(-1.0), "memory=-1.0 is negative"),
        (report(math.nan), "memory=nan is not a finite amount"),
        (report(math.inf), "memory=inf is not a finite amount"),
        (f.NodeUtilization(node="n1", used={"gpu": 1.0}), "the node does not have: gpu"),
    ],
)
def test_a_bad_report_is_rejected_with_the_reason_and_changes_nothing(event: f.NodeUtilization, says: str) -> None:
    h = full_node()
    h.feed(report(4096.0))
    before = fingerprint(h.cache.state)
    h.feed(event)
    assert any(says in reason for reason in rejected_reasons(h.decisions)), rejected_reasons(h.decisions)
    assert h.cache.state.nodes["n1"].utilization == {"memory": 4096}
    assert fingerprint(h.cache.state) == before


def test_a_report_with_a_non_finite_amount_decodes_and_is_rejected_not_dead() -> None:
    raw = msgspec.msgpack.encode({"type": "node_utilization", "node": "n1", "used": {"memory": math.nan}})
    event = msgspec.msgpack.decode(raw, type=f.Feed)
    h = full_node()
    h.feed(event)
    assert any("not a finite amount" in reason for reason in rejected_reasons(h.decisions))


# ---------------------------------------------------------------------- placement on measured slack


def test_opportunistic_containers_take_measured_slack_only_below_allocate_below() -> None:
    h = full_node()
    h.feed(report(4096.0), opp("o", 1024, count=10))
    h.settle()
    # 4096 used + 1024 per container stays below 0.8 * 8192 = 6553.6 for two of them.
    placed = over_committed(h)
    assert len(placed) == 2
    node = h.cache.state.nodes["n1"]
    assert node.overcommitted == {"memory": 2048} and node.unmeasured == {"memory": 2048}
    assert h.model.violations == [] and invariant_problems(h.cache.state) == []
    # A new report measures them (usage as reported): room for one more.
    h.feed(report(5120.0))
    h.settle()
    assert len(over_committed(h)) == 3
    assert h.model.violations == []


def test_without_the_block_a_full_node_takes_no_opportunistic_container() -> None:
    h = full_node(overcommit=None)
    h.feed(report(4096.0), opp("o", 1024, count=10))
    h.settle()
    assert over_committed(h) == []


def test_without_a_report_a_full_node_is_never_over_committed() -> None:
    h = full_node()
    h.feed(opp("o", 1024, count=10))
    h.settle()
    assert over_committed(h) == []


def test_guaranteed_allocation_never_counts_over_committed_room() -> None:
    h = full_node()
    h.feed(report(4096.0), opp("o", 1024, count=2))
    h.settle()
    h.feed(f.AskAdded(app="b1", ask="g", resource={"memory": 1024}))
    h.settle()
    # The node holds 10240 of 8192 and utilization leaves room, yet the guaranteed ask waits.
    assert not any(x.app == "b1" and x.ask == "g" for x in h.allocated())
    assert h.cache.state.apps["b1"].asks["g"].pending == 1
    # One of a's containers ends: the node holds 8192, so the guaranteed ask gets room only once an
    # over-committed container is killed for it (at once, as any opportunistic one).
    h.feed(f.AllocationReleased(allocation=h.allocated()[0].allocation))
    h.settle()
    evicted = [x for x in h.decisions if isinstance(x, d.Kill) and x.cause == "opportunistic"]
    assert len(evicted) == 1
    h.feed(f.AllocationReleased(allocation=evicted[0].allocation))
    h.settle()
    (g,) = [x for x in h.allocated() if x.app == "b1" and x.ask == "g"]
    assert g.reservation is not None
    assert h.model.violations == [] and invariant_problems(h.cache.state) == []


def test_an_over_committed_container_cannot_be_promoted() -> None:
    h = full_node()
    h.feed(report(4096.0), opp("o", 1024))
    h.settle()
    (placed,) = over_committed(h)
    h.feed(f.AllocationPromoted(allocation=placed.allocation))
    assert any("over-committed room" in reason for reason in rejected_reasons(h.decisions))
    assert h.cache.state.allocations[placed.allocation].opportunistic


# ---------------------------------------------------------------------- kills above preempt_above


@pytest.mark.parametrize(("usage", "killed"), [(None, 1), (512, 2)])
def test_a_report_above_preempt_above_kills_the_newest_opportunistic_until_below(
    usage: int | None, killed: int
) -> None:
    h = full_node()
    h.feed(report(3000.0), opp("o", 1024, count=3, usage=usage))
    h.settle()
    placed = [x.allocation for x in over_committed(h)]
    assert len(placed) == 3
    # 8000 is above 0.9 * 8192 = 7372.8: each kill takes off its container's usage (declared, else its size).
    h.feed(report(8000.0))
    kills = overcommit_kills(h)
    assert [k.allocation for k in kills] == placed[::-1][:killed]
    assert all(h.cache.state.allocations[k.allocation].opportunistic for k in kills)
    assert h.model.violations == []


def test_a_spike_with_no_opportunistic_container_kills_nothing() -> None:
    h = full_node()
    h.feed(report(8192.0))
    assert overcommit_kills(h) == [] and not any(isinstance(x, d.Kill) for x in h.decisions)


# ---------------------------------------------------------------------- snapshot and replay


def test_a_snapshot_rebuilds_the_over_commit_state() -> None:
    h = full_node()
    h.feed(report(4096.0), opp("o", 1024, count=2, usage=512))
    h.settle()
    h.feed(report(5000.0), opp("p", 512, count=1))
    h.settle()
    rebuilt = PartitionState("default", indexed=False)
    rebuilt.apply_all(state_changes(h.cache.state))
    for name, node in h.cache.state.nodes.items():
        again = rebuilt.nodes[name]
        assert (again.utilization, again.unmeasured, again.unmeasured_ids, again.overcommitted) == (
            node.utilization,
            node.unmeasured,
            node.unmeasured_ids,
            node.overcommitted,
        )
    for aid, alloc in h.cache.state.allocations.items():
        assert (rebuilt.allocations[aid].usage, rebuilt.allocations[aid].overcommit) == (alloc.usage, alloc.overcommit)
    assert fingerprint(rebuilt) == fingerprint(h.cache.state)


def test_a_new_owner_replays_over_commit_placements_and_kills_as_the_old_one_decided() -> None:
    o = Owner(config=raw_config())
    o.feed_event(
        f.NodeAdded(node="n1", capacity={"memory": CAP}),
        f.AppAdded(app="a1", queue="root.a"),
        f.AppAdded(app="b1", queue="root.b"),
        f.AskAdded(app="a1", ask="g", resource={"memory": 2048}, count=4, usage={"memory": 1024}),
    )
    o.settle()
    snapshot = take_snapshot(o.core)
    o.feed_event(report(3000.0), opp("o", 1024, count=3, usage=512))
    o.settle()
    o.feed_event(report(8000.0))
    assert [x for x in o.log if isinstance(x, d.Kill) and x.reason == "overcommit"]
    core, result = recover(o, snapshot)
    assert result.divergences == [] and result.fresh == []
    old, new = o.core.state, core.state
    assert fingerprint(new) == fingerprint(old) | {"now": new.now}
    assert new.nodes["n1"].overcommitted == old.nodes["n1"].overcommitted
    assert {a.id for a in new.allocations.values() if a.killed} == {a.id for a in old.allocations.values() if a.killed}
    again = restore(take_snapshot(o.core))
    assert again.state.nodes["n1"].utilization == {"memory": 8000}
    assert {a.id for a in again.state.allocations.values() if a.overcommit} == {
        a.id for a in old.allocations.values() if a.overcommit
    }


# ---------------------------------------------------------------------- the checker (invariant 12)


def checker() -> ClusterModel:
    model = ClusterModel("default", parse_partition(raw_config()))
    model.on_event(f.NodeAdded(node="n1", capacity={"memory": CAP}))
    model.on_event(f.AppAdded(app="a1", queue="root.a"))
    model.on_event(f.AskAdded(app="a1", ask="g", resource={"memory": 4096}, count=3))
    model.on_event(opp("o", 2048, count=3))
    return model


def allocated(model: ClusterModel, n: int, ask: str, memory: int, seq: int, opportunistic: bool) -> None:
    model.on_decision(
        d.Allocated(
            seq=seq,
            allocation=f"alloc-{n}",
            app="a1" if ask == "g" else "b1",
            ask=ask,
            queue="root.a" if ask == "g" else "root.b",
            node="n1",
            resource={"memory": memory},
            opportunistic=opportunistic,
        )
    )


def test_the_checker_catches_an_over_committed_placement_at_or_above_allocate_below() -> None:
    model = checker()
    model.on_event(f.AppAdded(app="b1", queue="root.b"))
    allocated(model, 1, "g", 4096, 1, False)
    allocated(model, 2, "g", 4096, 2, False)
    model.on_event(report(4096.0))
    allocated(model, 3, "o", 2048, 3, True)  # 4096 + 2048 < 6553.6: fine
    assert model.violations == []
    allocated(model, 4, "o", 2048, 4, True)  # 4096 + 2048 placed since + 2048 is not below it
    assert [v.invariant for v in model.violations] == [12]


def test_the_checker_catches_a_guaranteed_container_on_over_committed_room() -> None:
    model = checker()
    model.on_event(f.AppAdded(app="b1", queue="root.b"))
    allocated(model, 1, "g", 4096, 1, False)
    allocated(model, 2, "o", 2048, 2, True)
    allocated(model, 3, "o", 2048, 3, True)  # the node is full
    model.on_event(report(1000.0))
    allocated(model, 4, "o", 2048, 4, True)  # over-committed: 1000 + 2048 is below 6553.6
    assert model.violations == []
    allocated(model, 5, "g", 4096, 5, False)
    assert [v.invariant for v in model.violations] == [12]


def test_the_checker_catches_an_over_commit_kill_of_a_guaranteed_container_and_a_node_left_above() -> None:
    model = checker()
    model.on_event(f.AppAdded(app="b1", queue="root.b"))
    allocated(model, 1, "g", 4096, 1, False)
    allocated(model, 2, "o", 2048, 2, True)
    model.on_event(report(8000.0))
    model.on_decision(d.Kill(seq=3, allocation="alloc-1", app="a1", queue="root.a", node="n1", reason="overcommit"))
    assert [v.invariant for v in model.violations] == [12]
    model.check(1.0)  # the opportunistic container still runs on a node above preempt_above
    assert [v.invariant for v in model.violations] == [12, 12]


# ---------------------------------------------------------------------- the bundled scenario


@pytest.mark.parametrize("policy", ["sniper", "proportional", "none"])
def test_the_bundled_scenario_kills_only_opportunistic_containers_for_over_commit(policy: str) -> None:
    sc = scenario("overcommit")
    result = run_simulation(sc.events, sc.config, SimulationSettings(policy=policy))
    assert result.violations == 0
    opportunistic = {x.allocation for x in result.decisions if isinstance(x, d.Allocated) and x.opportunistic}
    kills = [x for x in result.decisions if isinstance(x, d.Kill) and x.reason == "overcommit"]
    assert kills and {k.allocation for k in kills} <= opportunistic
    figures = result.summary.opportunistic
    assert figures.overcommit_kills == len(kills)
    assert figures.overcommit_utilization.get("memory", 0) > 0
    # The trace reports only n000-n003's spike: the simulator reported every node from declared usage.
    core = result.runtimes["default"].cache_core
    assert core is not None and all(node.utilization is not None for node in core.state.nodes.values())


def test_the_spike_lands_mid_grace_of_a_sniper_preemption() -> None:
    sc = scenario("overcommit")
    result = run_simulation(sc.events, sc.config, SimulationSettings(policy="sniper"))
    notices = [x for x in result.decisions if isinstance(x, d.Preempt) and not x.opportunistic]
    kills = [x for x in result.decisions if isinstance(x, d.Kill) and x.reason == "overcommit"]
    assert any(n.t < k.t < n.deadline for n in notices for k in kills)
    assert result.violations == 0


def _with(events: list[f.Feed], *more: f.Feed) -> list[f.Feed]:
    return sorted([*events, *more], key=lambda e: e.t)


def test_a_node_lost_with_over_committed_containers_on_it() -> None:
    sc = scenario("overcommit")
    events = _with(sc.events, f.NodeRemoved(t=40, node="n005"))
    result = run_simulation(events, sc.config, SimulationSettings(policy="sniper"))
    assert result.violations == 0
    model = result.models["default"]
    assert not any(a.node == "n005" for a in model.allocations.values())
    lost = [x for x in result.decisions if isinstance(x, d.AllocationLost) and x.node == "n005"]
    over = {x.allocation for x in lost} & {
        x.allocation for x in result.decisions if isinstance(x, d.Allocated) and x.opportunistic and x.node == "n005"
    }
    assert over  # over-committed containers were on it and were reported lost
    core = result.runtimes["default"].cache_core
    assert core is not None and "n005" not in core.state.nodes


def test_a_report_for_a_node_that_just_left_is_rejected() -> None:
    sc = scenario("overcommit")
    late = f.NodeUtilization(t=40.5, node="n006", used={"memory": 60 * 1024.0})
    events = _with(sc.events, f.NodeRemoved(t=40, node="n006"), late)
    result = run_simulation(events, sc.config, SimulationSettings(policy="sniper"))
    assert result.violations == 0
    reasons = [x.reason for x in result.decisions if isinstance(x, d.Rejected)]
    assert any("unknown node n006" in r for r in reasons)
