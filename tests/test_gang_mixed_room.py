"""Gangs served partly by free room and partly by victims, and members beyond ``gang_min`` that follow
their gang: the victim placer counts free room and victims together for a gang's unit, the commit takes
the unit whole, and a member beyond the gang is committed only once its gang is held."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core import node_reservation
from sniper.core.config import SchedulerConfig, parse_config
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.simulator.run import SimulationSettings, run_simulation
from tests.core_support import Harness, config_of, invariant_problems, queue
from tests.preemption_support import PreemptHarness, preemption_raw, two_queues

C = f.PlacementConstraint


def gang_ask(app: str, ask: str, memory: int, count: int, gang_min: int, **kw: Any) -> f.AskAdded:
    return f.AskAdded(app=app, ask=ask, resource={"memory": memory}, count=count, gang_min=gang_min, **kw)


def held(h: Harness, app: str, ask: str) -> int:
    a = h.cache.state.ask((app, ask))
    assert a is not None
    return a.allocated + a.reserved


def run_out_the_grace(h: PreemptHarness) -> None:
    h.tick(h.now + 16)
    h.release(*h.kills())
    h.settle()


# ---------------------------------------------------------------------- free room and victims together


def test_a_gang_takes_free_room_for_four_members_and_two_victims_for_the_fifth() -> None:
    # n0..n3 hold c's 60 each (40 free), c at its guarantee; n4 is full of b's 20s, b 40 above its
    # ideal (60): the fifth 40 needs two of n4's 20s, the other four fit free room.
    h = PreemptHarness(
        preemption_raw(
            queue("a", guaranteed={"memory": 200}),
            queue("b", guaranteed={"memory": 20}),
            queue("c", guaranteed={"memory": 240}),
        )
    )
    h.nodes("n0", "n1", "n2", "n3", "n4")
    for n in range(4):
        h.fill(f"c{n}", "root.c", f"n{n}", [60], start=float(n))
    h.fill("b4", "root.b", "n4", [20] * 5, start=10.0)
    h.app("a1", "root.a")
    h.feed(gang_ask("a1", "g", 40, count=5, gang_min=5))
    h.starve()
    assert held(h, "a1", "g") == 0  # normal allocation cannot place the whole gang
    r = h.preempt_round()
    assert r.outcome is not None and r.outcome.accepted == 5, r.outcome
    assert sorted((pl.node, len(pl.victims)) for pl in r.placements) == [
        ("n0", 0),
        ("n1", 0),
        ("n2", 0),
        ("n3", 0),
        ("n4", 2),
    ]
    assert held(h, "a1", "g") == 5
    run_out_the_grace(h)
    assert sorted(x.node for x in h.allocated() if x.app == "a1") == ["n0", "n1", "n2", "n3", "n4"]
    h.model.check(h.now)
    assert not h.model.violations and not invariant_problems(h.cache.state)


def test_a_gang_that_must_spread_takes_four_nodes_free_room_and_one_nodes_small_containers() -> None:
    # n0..n3 each have room for two 25s but the members avoid each other (not_in on their own tag);
    # n4 is full of b's 10s. a's other ask (90s, that fit nowhere) puts b above its ideal.
    h = PreemptHarness(two_queues(250, 250))
    h.nodes("n0", "n1", "n2", "n3", "n4")
    for n in range(4):
        h.fill(f"b{n}", "root.b", f"n{n}", [50], start=float(n))
    h.fill("b4", "root.b", "n4", [10] * 10, start=10.0)
    h.app("a1", "root.a")
    spread = (C(op="not_in", tags=["ml"]),)
    h.feed(gang_ask("a1", "g", 25, count=5, gang_min=5, tags=("ml",), constraints=spread, priority=10))
    h.feed(f.AskAdded(app="a1", ask="wide", resource={"memory": 90}, count=2))
    h.starve()
    assert held(h, "a1", "g") == 0
    r = h.preempt_round()
    assert r.outcome is not None and r.outcome.accepted == 5, r.outcome
    members = sorted((pl.node, len(pl.victims)) for pl in r.placements if pl.ask == "g")
    assert members == [("n0", 0), ("n1", 0), ("n2", 0), ("n3", 0), ("n4", 3)]
    run_out_the_grace(h)
    assert sorted(x.node for x in h.allocated() if x.ask == "g") == ["n0", "n1", "n2", "n3", "n4"]
    h.model.check(h.now)
    assert not h.model.violations and not invariant_problems(h.cache.state)


def test_a_gang_that_free_room_alone_would_serve_is_left_to_normal_allocation() -> None:
    # The gang fits n1 and n2's free room and a round comes before the allocation cycle: the round
    # names no victim and places nothing (free room is the normal allocator's to give).
    h = PreemptHarness(two_queues(250, 250))
    h.nodes("n0", "n1", "n2")
    h.fill("b0", "root.b", "n0", [20] * 5)
    h.app("a1", "root.a")
    h.feed(gang_ask("a1", "g", 50, count=2, gang_min=2))
    h.allocator.missed[("a1", "g")] = 1
    r = h.preempt_round()
    assert not r.placements and not h.preempts()
    h.starve()
    assert held(h, "a1", "g") == 2


@pytest.mark.parametrize(
    ("count", "gang_min", "why"),
    [
        (1, 0, "no victim named: room already free is the normal allocator's to give"),
        (2, 2, "gang of 2 names no victim: room already free is the normal allocator's to give"),
    ],
)
def test_the_commit_refuses_preemption_placements_that_name_no_victim_outside_a_gang_that_preempts(
    count: int, gang_min: int, why: str
) -> None:
    h = PreemptHarness(two_queues(250, 250))
    h.nodes("n0", "n1", "n2")
    h.fill("b0", "root.b", "n0", [20] * 5)
    h.app("a1", "root.a")
    h.feed(gang_ask("a1", "g", 50, count=count, gang_min=gang_min))
    placements = [p.Victimized("a1", "g", f"n{i + 1}", []) for i in range(count)]
    outcome, _ = h.commit(p.PreemptionProposal(id="t/f", view_seq=0, policy="sniper", placements=placements))
    assert outcome.accepted == 0 and set(outcome.rejected.values()) == {why}
    assert held(h, "a1", "g") == 0


# ---------------------------------------------------------------------- members beyond the gang


def blocked_gang_proposal(h: PreemptHarness) -> p.PreemptionProposal:
    """A gang of 2 (of 3) of 60s over n0..n2, three of b's 20s named on each node."""
    by_node: dict[str, list[str]] = {}
    for a in sorted(h.cache.state.allocations.values(), key=lambda a: a.id):
        by_node.setdefault(a.node, []).append(a.id)
    return p.PreemptionProposal(
        id="t/g",
        view_seq=0,
        policy="sniper",
        placements=[p.Victimized("a1", "g", name, by_node[name][:3]) for name in ("n0", "n1", "n2")],
    )


def test_a_member_beyond_gang_min_is_not_committed_when_its_gang_is_refused() -> None:
    # A node reservation made on n0 just before the commit refuses the gang's unit (n0, n1); the third
    # placement, on n2, is beyond gang_min and must follow its gang.
    h = PreemptHarness(two_queues(150, 150))
    h.nodes("n0", "n1", "n2")
    for n in range(3):
        h.fill(f"b{n}", "root.b", f"n{n}", [20] * 5, start=float(n * 5))
    h.app("a1", "root.a")
    h.feed(gang_ask("a1", "g", 60, count=3, gang_min=2))
    h.ask("b0", "wide", 90)
    node_reservation.reserve(h.cache, "b0", "wide", "n0")
    h.pump()
    outcome, decisions = h.commit(blocked_gang_proposal(h))
    assert outcome.accepted == 0, outcome
    assert not [x for x in decisions if isinstance(x, d.Preempt)]
    assert held(h, "a1", "g") == 0
    assert any("its gang was not placed" in why for why in outcome.rejected.values()), outcome.rejected
    h.model.check(h.now)
    assert not h.model.violations


@pytest.mark.parametrize("evicts", [False, True])
def test_a_member_beyond_gang_min_is_not_allocated_when_its_gang_is_refused(evicts: bool) -> None:
    # gang of 2 (of 3) 60s; n0 is reserved for another ask before the proposal lands. With ``evicts``
    # the gang's member on n1 makes its room by evicting an opportunistic container (such units are
    # committed last): the third member, on n2, still follows its gang.
    h = Harness(config_of(queue("a"), queue("b")))
    h.feed(
        *(f.NodeAdded(node=f"n{i}", capacity={"memory": 100}) for i in range(3)),
        f.AppAdded(app="a1", queue="root.a"),
        f.AppAdded(app="b1", queue="root.b"),
        gang_ask("a1", "g", 60, count=3, gang_min=2),
        f.AskAdded(app="b1", ask="wide", resource={"memory": 90}),
    )
    evictions: list[p.Victimized] = []
    if evicts:
        h.feed(f.AskAdded(app="b1", ask="idle", resource={"memory": 50}, execution_type="opportunistic"))
        h.cache.allocate("b1", "idle", "n1")
        h.pump()
        evictions = [p.Victimized("a1", "g", "n1", [h.allocated()[-1].allocation])]
    node_reservation.reserve(h.cache, "b1", "wide", "n0")
    h.pump()
    placements = [p.Placement("a1", "g", "n0"), p.Placement("a1", "g", "n2")]
    if not evicts:
        placements.insert(1, p.Placement("a1", "g", "n1"))
    h.cache.handle_proposal(p.AllocationProposal(id="t/a", view_seq=0, placements=placements, evictions=evictions))
    h.pump()
    outcome = h.outcomes["t/a"]
    assert outcome.accepted == 0, outcome
    assert held(h, "a1", "g") == 0
    assert not [x for x in h.decisions if isinstance(x, d.Kill)]
    h.model.check(h.now)
    assert not h.model.violations


# ---------------------------------------------------------------------- property


@st.composite
def mixed_gangs(draw: st.DrawFn) -> tuple[list[int], list[int], list[tuple[int, int, int, bool]]]:
    """Nodes of 100, each with b's room taken (the rest free), b's container size per node, and gangs
    (member size, count, gang_min, whether members avoid each other)."""
    taken = draw(st.lists(st.sampled_from([0, 20, 40, 60, 80, 100]), min_size=2, max_size=6))
    sizes = draw(st.lists(st.sampled_from([10, 20]), min_size=len(taken), max_size=len(taken)))
    gangs = draw(
        st.lists(
            st.tuples(st.sampled_from([20, 30, 40, 60]), st.integers(1, 5), st.integers(2, 5), st.booleans()),
            min_size=1,
            max_size=3,
        )
    )
    return taken, sizes, gangs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_gangs())
def test_random_gangs_over_free_room_and_victims_are_whole_and_preempt_only_for_whole_gangs(
    workload: tuple[list[int], list[int], list[tuple[int, int, int, bool]]],
) -> None:
    taken, sizes, gangs = workload
    total = 100 * len(taken)
    h = PreemptHarness(
        preemption_raw(queue("a", guaranteed={"memory": total // 2}), queue("b", guaranteed={"memory": total // 4}))
    )
    names = [f"n{i}" for i in range(len(taken))]
    h.nodes(*names)
    for n, (used, size) in enumerate(zip(taken, sizes, strict=True)):
        if used:
            h.fill(f"b{n}", "root.b", names[n], [size] * (used // size), start=float(n))
    h.app("a1", "root.a")
    for i, (size, count, k, spread) in enumerate(gangs):
        extra: dict[str, Any] = {"tags": ("g",), "constraints": (C(op="not_in", tags=["g"]),)} if spread else {}
        h.feed(gang_ask("a1", f"g{i}", size, count=max(count, k), gang_min=k, **extra), allow_rejected=True)
    for step in range(4):
        h.settle()
        h.starve()
        h.preempt_round(now=h.now + 1 + step * 31)
        h.model.check(h.now)
        h.tick(h.now + 16)
        h.release(*h.kills())
        h.model.check(h.now)
    h.settle()
    h.model.check(h.now)
    assert not h.model.violations, h.model.violations
    assert not invariant_problems(h.cache.state)
    for x in h.preempts():
        ask = h.cache.state.ask((x.for_app, x.for_ask))
        assert ask is not None and ask.allocated + ask.reserved >= ask.gang_min


@st.composite
def mixed_traces(draw: st.DrawFn) -> tuple[SchedulerConfig, list[f.Feed]]:
    """A small cluster that batch part-fills (free room left on some nodes, none on others), then gangs
    in prod, some spread one member per node, beside large asks that reserve nodes and a node lost."""
    n_nodes = draw(st.integers(3, 6))
    leaves = [queue("prod", guaranteed={"memory": 60 * n_nodes}), queue("batch", guaranteed={"memory": 20 * n_nodes})]
    raw = preemption_raw(*leaves, policy="sniper", total_preemption_per_round=draw(st.sampled_from([0.2, 1.0])))
    raw["reservation"] = {"enabled": True, "timeout": 30.0}
    events: list[f.Feed] = [
        f.NodeAdded(node=f"n{i}", capacity={"memory": 100}, labels={"slot": f"s{i}"}) for i in range(n_nodes)
    ]
    for i in range(n_nodes):
        used = draw(st.sampled_from([0, 40, 60, 100]))
        size = draw(st.sampled_from([10, 20]))
        if used:
            app = f"b{i}"
            budget = draw(st.sampled_from([None, None, 1]))
            events.append(f.AppAdded(app=app, queue="root.batch", max_disruption=budget))
            events.append(
                f.AskAdded(
                    app=app,
                    ask="t",
                    resource={"memory": size},
                    count=used // size,
                    node_selector={"slot": [f"s{i}"]},
                    duration=400.0,
                )
            )
    for j in range(draw(st.integers(1, 3))):
        t = float(draw(st.integers(5, 40)))
        app = f"g{j}"
        k = draw(st.integers(2, 5))
        spread = draw(st.booleans())
        events.append(f.AppAdded(t=t, app=app, queue="root.prod"))
        events.append(
            f.AskAdded(
                t=t,
                app=app,
                ask="g",
                resource={"memory": draw(st.sampled_from([20, 30, 40, 60]))},
                count=k + draw(st.integers(0, 2)),
                gang_min=k,
                duration=float(draw(st.integers(30, 120))),
                tags=("g",) if spread else (),
                constraints=(C(op="not_in", tags=["g"]),) if spread else (),
            )
        )
    if draw(st.booleans()):
        events.append(f.AppAdded(t=3.0, app="big", queue="root.batch"))
        events.append(f.AskAdded(t=3.0, app="big", ask="b", resource={"memory": 90}, count=2, duration=60.0))
    if draw(st.booleans()):
        events.append(f.NodeRemoved(t=float(draw(st.integers(20, 80))), node=f"n{draw(st.integers(0, n_nodes - 1))}"))
    events.sort(key=lambda e: e.t)
    return parse_config({"partitions": [raw]}), events


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=mixed_traces())
def test_random_mixes_of_gangs_free_room_victims_and_node_reservations_keep_every_invariant(
    trace: tuple[SchedulerConfig, list[f.Feed]],
) -> None:
    config, events = trace
    for policy in ("sniper", "proportional", "none"):
        result = run_simulation(events, config, SimulationSettings(until=200, policy=policy))
        assert result.report["invariant_violations"] == 0, (policy, result.report["violations"][:3])
