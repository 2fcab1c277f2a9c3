"""YARN's baseline keeps its apps' snapshots from round to round: a round builds again only the apps a
change touched, and what it reads is always what a snapshot built from scratch reads."""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core.preemption import policies
from sniper.core.preemption.model import AppSnapshot, ClusterSnapshot
from sniper.core.preemption.policies import ProportionalBaseline
from sniper.core.preemption.view import snapshot_from_state
from sniper.core.state import PartitionState
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.preemption_support import PreemptHarness, two_queues


def _apps(snapshot: ClusterSnapshot) -> dict[str, AppSnapshot]:
    return {app.id: app for app in snapshot.apps()}


def _harness() -> tuple[PreemptHarness, ProportionalBaseline]:
    h = PreemptHarness(two_queues(100, 100, policy="proportional", natural_termination_factor=1.0))
    h.nodes("n1", "n2", "n3")
    h.fill("b1", "root.b", "n1", [25] * 4)
    h.fill("b2", "root.b", "n2", [25] * 2)
    h.app("a1", "root.a")
    h.ask("a1", "small", 25, count=4)
    h.starve()
    policy = h.policy
    assert isinstance(policy, ProportionalBaseline)
    return h, policy


def _kept(state: PartitionState, policy: ProportionalBaseline) -> ClusterSnapshot:
    kept = snapshot_from_state(state, with_containers=True, kept=policy.snapshots)
    assert kept == snapshot_from_state(state, with_containers=True)
    return kept


def test_a_round_builds_again_only_the_app_a_change_touched() -> None:
    h, policy = _harness()
    state = h.allocator.state
    first = _apps(_kept(state, policy))
    h.run("b2", 25, "n2")  # one more container of b2
    second = _apps(_kept(state, policy))
    assert second["b1"] is first["b1"]
    assert second["b2"] is not first["b2"]
    assert len(second["b2"].containers) == len(first["b2"].containers) + 1


def test_asks_and_the_clock_leave_every_app_snapshot_as_it_was() -> None:
    h, policy = _harness()
    state = h.allocator.state
    first = _apps(_kept(state, policy))
    h.ask("b1", "more", 25, count=2)
    h.feed(f.AskRemoved(app="a1", ask="small"))
    h.tick(50.0)
    second = _apps(_kept(state, policy))
    assert second.keys() == first.keys()
    assert all(second[name] is first[name] for name in first)


def test_a_notice_on_a_container_builds_its_app_again_with_the_container_killable() -> None:
    h, policy = _harness()
    state = h.allocator.state
    first = _apps(_kept(state, policy))
    victim = first["b1"].containers[0].id
    outcome, _ = h.commit(
        p.PreemptionProposal(
            partition=policy.partition,
            id="notice",
            view_seq=h.allocator.view_seq,
            policy="proportional",
            victims=[victim],
        )
    )
    assert outcome.accepted == 1
    second = _apps(_kept(state, policy))
    assert second["b2"] is first["b2"]
    assert [c.killable for c in second["b1"].containers if c.id == victim] == [True]


def test_a_state_changed_unheard_is_snapshotted_from_scratch() -> None:
    h, policy = _harness()
    state = h.allocator.state
    first = _apps(_kept(state, policy))
    gone = first["b1"].containers[0].id
    state.apply(p.AllocationGone(allocation=gone))  # the policy is not told
    second = _apps(_kept(state, policy))
    assert gone not in {c.id for c in second["b1"].containers}
    assert second["b2"] is not first["b2"]  # nothing kept: every app built again


@pytest.mark.parametrize("name", ["random_mix", "budgets", "opportunistic", "am_heavy", "contract", "min_runtime"])
def test_every_round_of_a_scenario_reads_what_a_snapshot_from_scratch_reads(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds: list[bool] = []  # per round: the kept snapshot equals the one built from scratch
    reused: list[int] = []  # per round: apps whose snapshot is the last round's object
    last: dict[str, AppSnapshot] = {}

    def compared(state: PartitionState, **kwargs: Any) -> ClusterSnapshot:
        kept = snapshot_from_state(state, **kwargs)
        rounds.append(kept == snapshot_from_state(state, with_containers=True))
        apps = _apps(kept)
        reused.append(sum(1 for app_id, app in apps.items() if last.get(app_id) is app))
        last.clear()
        last.update(apps)
        return kept

    monkeypatch.setattr(policies, "snapshot_from_state", compared)
    sc = scenario(name)
    run_simulation(sc.events, sc.config, SimulationSettings(policy="proportional"))
    assert rounds and all(rounds)
    if name != "min_runtime":  # young containers depend on the clock: every round builds every app
        assert sum(reused) > 0
