"""YARN's round on a view where every leaf is within its deadzone (core.yarn.idle_view) skips the snapshot
and the fix-point and leaves everything as the full round does.

Random partitions (nested queues, guarantees on some resources or none, preemption disabled or fenced on
some, nodes without some resource, usage around the deadzones, pending asks or none, a node reservation
or none, tracked marks old and young, observe-only or not): the guarded :class:`ProportionalBaseline` and
one that always runs the round answer the same, leave the same marks, idle view, wake-up and budget
refusals, and their next round on a changed view agrees too; whenever the guard answers, the full round
chose no container. A node reservation to cancel keeps the round computing.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, reject, settings
from hypothesis import strategies as st

from sniper.core.config import ConfigError, PartitionConfig, parse_partition, partition_to_raw
from sniper.core.preemption.policies import ProportionalBaseline
from sniper.core.preemption.view import snapshot_from_state
from sniper.core.resources import Resource
from sniper.core.state import PartitionState
from sniper.core.yarn.idle_view import chooses_nothing, leaf_deadzones
from sniper.core.yarn.proportional import ProportionalConfig, ProportionalPolicy
from sniper.messages import protocol as p
from tests.core_support import PARTITION, queue
from tests.preemption_support import preemption_raw

NAMES = ("memory", "vcore", "nvidia.com/gpu")
NOW = 1_000.0


class FullRound(ProportionalBaseline):
    """The baseline that never skips a round on a view it could read off."""

    def chooses_nothing(self, state: PartitionState) -> bool:
        return False


def configured(config: PartitionConfig) -> PartitionState:
    """An empty state under ``config``."""
    state = PartitionState(PARTITION)
    state.apply(p.ConfigSet(config=partition_to_raw(config)))
    return state


@st.composite
def views(draw: st.DrawFn) -> tuple[PartitionConfig, PartitionState, dict[str, int]]:
    """A partition's config, a state of it, and marks tracked since (container id to ms)."""
    leaves: list[tuple[str, Resource]] = []

    def resources(top: int) -> Resource:
        chosen = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
        return {n: draw(st.integers(0, top)) for n in chosen}

    def tree(name: str, path: str, depth: int) -> dict[str, Any]:
        guaranteed = resources(100)
        props: dict[str, Any] = {}
        policy = draw(st.sampled_from(["default", "default", "default", "fence", "disabled"]))
        if policy != "default":
            props["preemption_policy"] = policy
        children = []
        if depth < 2 and draw(st.integers(0, 2)) == 0:
            children = [tree(f"{name}{i}", f"{path}.{name}", depth + 1) for i in range(draw(st.integers(1, 2)))]
        else:
            leaves.append((f"{path}.{name}", guaranteed))
        return queue(name, *children, guaranteed=guaranteed or None, **props)

    tops = [tree(f"q{i}", "root", 1) for i in range(draw(st.integers(1, 3)))]
    raw = preemption_raw(
        *tops,
        policy="proportional",
        observe_only=draw(st.booleans()),
        max_ignored_over_capacity=draw(st.sampled_from([0.0, 0.1, 0.5])),
    )
    try:
        config = parse_partition(raw)
    except ConfigError:
        reject()  # children guaranteed more than their parent
    state = configured(config)
    capacity = {n: draw(st.sampled_from([0, 50, 400, 1000])) for n in NAMES}
    capacity["memory"] = max(capacity["memory"], 1)
    changes: list[p.ChangeMsg] = [p.NodeSet(node="n1", capacity=capacity)]
    seq = 0
    reserving = False
    for path, guaranteed in leaves:
        app = f"app-{path}"
        seq += 1
        changes.append(p.AppSet(app=app, queue=path, priority=0, submit_seq=seq))
        # Around the deadzone: mostly a share of the guarantee, sometimes just above it, sometimes anything.
        for i in range(draw(st.integers(0, 3))):
            if guaranteed and draw(st.integers(0, 3)) > 0:
                scale = draw(st.sampled_from([0.2, 0.3, 0.5, 0.6]))
                used = {n: int(v * scale) for n, v in guaranteed.items() if draw(st.integers(0, 3))}
            else:
                used = resources(80)
            if not any(used.values()):
                continue
            changes.append(
                p.AllocationSet(allocation=f"{app}-c{i}", app=app, ask="done", node="n1", resource=used, start=0.0)
            )
        if draw(st.booleans()):
            seq += 1
            ask = resources(40) or {"memory": 1}
            changes.append(p.AskSet(app=app, ask="more", resource=ask, count=draw(st.integers(1, 3)), seq=seq))
            if not reserving and draw(st.booleans()):
                # A node reservation a leaf below its ideal may have cancelled: the round reads the ideal.
                reserving = True
                changes.append(
                    p.NodeReservationSet(
                        reservation="held", app=app, ask="more", node="n1", resource=ask, expires=NOW + 100.0
                    )
                )
    changes.append(p.Clock(now=NOW))
    state.apply_all(changes)
    ids = [a for a in state.allocations]
    marks = {cid: draw(st.sampled_from([0, 900_000, 990_000])) for cid in ids if draw(st.integers(0, 2)) == 0}
    return config, state, marks


def _pair(config: PartitionConfig, marks: dict[str, int]) -> tuple[ProportionalBaseline, ProportionalBaseline]:
    guarded = ProportionalBaseline(PARTITION, config.preemption)
    full = FullRound(PARTITION, config.preemption)
    for policy in (guarded, full):
        if not config.preemption.observe_only:
            policy.policy._first_marked.update(marks)
    return guarded, full


def _left(policy: ProportionalBaseline) -> tuple[Any, ...]:
    idle = policy.idle_view
    return (
        None if idle is None else (id(idle[0]), idle[1]),
        policy.wake_at,
        policy.budget_refusals,
        policy.rounds,
        sorted(policy.covered),
        policy.policy.first_marked,
    )


@settings(max_examples=300, deadline=None)
@given(views())
def test_a_round_within_every_deadzone_outputs_and_leaves_what_the_full_round_does(
    drawn: tuple[PartitionConfig, PartitionState, dict[str, int]],
) -> None:
    config, state, marks = drawn
    guarded, full = _pair(config, marks)
    skipped = guarded.chooses_nothing(state)
    event(f"guard answers: {skipped}")
    assert guarded.round(state, 1, NOW) == full.round(state, 1, NOW)
    assert _left(guarded) == _left(full)
    # The apps' snapshots kept stay those of the state for a later round, after a change both hear.
    change = p.AllocationSet(
        allocation="late", app=next(iter(state.apps)), ask="done", node="n1", resource={"memory": 1}, start=NOW
    )
    state.apply(change)
    for policy in (guarded, full):
        policy.on_change(change)
    later = NOW + 40.0
    assert guarded.round(state, 2, later) == full.round(state, 2, later)
    assert _left(guarded) == _left(full)
    assert snapshot_from_state(state, with_containers=True, kept=guarded.snapshots) == snapshot_from_state(
        state, with_containers=True
    )


@settings(max_examples=200, deadline=None)
@given(views(), st.booleans())
def test_a_view_the_guard_reads_off_gets_no_container_from_either_pass(
    drawn: tuple[PartitionConfig, PartitionState, dict[str, int]], balance: bool
) -> None:
    config, state, _ = drawn
    cfg = ProportionalConfig.from_preemption_config(config.preemption)
    if balance:
        cfg = ProportionalConfig(
            max_ignored_over_capacity=cfg.max_ignored_over_capacity,
            total_preemption_per_round=1.0,
            preemption_to_balance_queues_beyond_guaranteed=True,
            resource_calculator="dominant",
        )
    skipped = chooses_nothing(state, leaf_deadzones(config, cfg))
    event(f"guard answers: {skipped}")
    result = ProportionalPolicy(cfg).round(snapshot_from_state(state, with_containers=True), round(NOW * 1000))
    if skipped:
        assert result.candidates == () and result.unreserved == () and not result.budget_refused


def test_a_leaf_one_unit_beyond_its_deadzone_on_one_resource_is_not_read_off() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100, "vcore": 100}),
        queue("b", guaranteed={"memory": 100}),
        policy="proportional",
    )
    config = parse_partition(raw)
    state = configured(config)
    state.apply_all(
        [
            p.NodeSet(node="n1", capacity={"memory": 400, "vcore": 400}),
            p.AppSet(app="x", queue="root.a", priority=0, submit_seq=1),
            p.AllocationSet(allocation="x1", app="x", ask="done", node="n1", resource={"memory": 110, "vcore": 10}),
        ]
    )
    policy = ProportionalBaseline(PARTITION, config.preemption)
    assert policy.chooses_nothing(state)  # 110 is trunc(100 * 1.1): at the deadzone, not beyond
    state.apply(p.AllocationSet(allocation="x2", app="x", ask="done", node="n1", resource={"memory": 1}))
    assert not policy.chooses_nothing(state)
    state.apply(p.AllocationSet(allocation="x3", app="x", ask="done", node="n1", resource={"vcore": 1}))
    state.apply(p.AllocationGone(allocation="x2"))
    assert policy.chooses_nothing(state)  # vcore 11 of a deadzone of 110


def test_a_node_reservation_is_cancelled_for_a_leaf_below_its_ideal_though_every_leaf_is_within_its_deadzone() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 50}),
        queue("b", guaranteed={"memory": 150}),
        policy="proportional",
    )
    config = parse_partition(raw)
    state = configured(config)
    state.apply_all(
        [
            p.NodeSet(node="n1", capacity={"memory": 200}),
            p.AppSet(app="x", queue="root.a", priority=0, submit_seq=1),
            p.AppSet(app="y", queue="root.b", priority=0, submit_seq=2),
            p.AllocationSet(allocation="x1", app="x", ask="done", node="n1", resource={"memory": 55}),
            p.AllocationSet(allocation="y1", app="y", ask="done", node="n1", resource={"memory": 145}),
            p.AskSet(app="x", ask="more", resource={"memory": 10}, count=1, seq=3),
            p.AskSet(app="y", ask="more", resource={"memory": 10}, count=1, seq=4),
            p.NodeReservationSet(
                reservation="held", app="x", ask="more", node="n1", resource={"memory": 10}, expires=NOW
            ),
        ]
    )
    # root.a holds 55 (its deadzone) above its ideal of 50; root.b is below its ideal with an ask n1 accepts.
    guarded, full = _pair(config, {})
    assert chooses_nothing(state, leaf_deadzones(config, guarded.policy.config))
    assert not guarded.chooses_nothing(state)
    proposal = guarded.round(state, 1, 1.0)
    assert proposal == full.round(state, 1, 1.0)
    assert isinstance(proposal, p.PreemptionProposal) and proposal.dereserve == ["n1"]
