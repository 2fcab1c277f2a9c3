"""Gangs (all or nothing, ``gang_min``): normal allocation, the cache's atomic commit, sniper preemption
for a whole gang or nobody, the round's budget, user limits on the whole gang, rejection of gangs that
can never fit, the checker."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core import gang
from sniper.core import resources as res
from sniper.core.config import SchedulerConfig, parse_config
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.codec import BadInput, decode_feed_lines
from sniper.simulator.model import ClusterModel
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.core_support import Harness, config_of, fingerprint, invariant_problems, queue, rejected_reasons
from tests.overcommit_support import CAP, full_node, report
from tests.preemption_support import PARTITION, PreemptHarness, preemption_raw, two_queues


def gang_ask(app: str, ask: str, memory: int, count: int, gang_min: int, **kw: Any) -> f.AskAdded:
    return f.AskAdded(app=app, ask=ask, resource={"memory": memory}, count=count, gang_min=gang_min, **kw)


def normal(nodes: int = 3, memory: int = 100, **leaf: Any) -> Harness:
    h = Harness(config_of(queue("a", **leaf)))
    h.feed(
        *(f.NodeAdded(node=f"n{i}", capacity={"memory": memory}) for i in range(nodes)),
        f.AppAdded(app="a1", queue="root.a"),
    )
    return h


def gang_violations(model: ClusterModel) -> list[str]:
    return [v.reason for v in model.violations if v.invariant == 8]


# ---------------------------------------------------------------------- the ask


def test_gang_min_above_count_is_rejected_with_the_reason() -> None:
    h = normal()
    out = h.feed(gang_ask("a1", "g", 10, count=2, gang_min=3))
    assert rejected_reasons(out) == ["ask a1/g: gang_min 3 is more than its count 2"]
    assert h.cache.state.ask(("a1", "g")) is None


def test_gang_larger_than_the_partition_is_rejected_with_the_reason() -> None:
    h = normal(nodes=3, memory=100)  # each node holds one 60-unit container: 3 at most
    out = h.feed(gang_ask("a1", "g", 60, count=4, gang_min=4))
    [reason] = rejected_reasons(out)
    assert "gang of 4 can never fit the partition" in reason and "at most 3" in reason
    assert not rejected_reasons(h.feed(gang_ask("a1", "ok", 60, count=4, gang_min=3)))


def test_gang_larger_than_the_queue_max_is_rejected_with_the_reason() -> None:
    h = normal(maximum={"memory": 150})
    [reason] = rejected_reasons(h.feed(gang_ask("a1", "g", 60, count=3, gang_min=3)))
    assert "gang of 3 can never fit queue root.a's max" in reason
    assert not rejected_reasons(h.feed(gang_ask("a1", "ok", 60, count=3, gang_min=2)))


def test_a_bad_gang_min_on_the_feed_is_reported_with_its_line_not_raised() -> None:
    line = b'{"type":"ask_added","app":"a1","ask":"g","resource":{"memory":1},"count":2,"gang_min":-1}'
    [bad] = list(decode_feed_lines([line], source="feed"))
    assert isinstance(bad, BadInput) and bad.where == "feed:1" and "gang_min" in bad.reason
    [ok] = list(decode_feed_lines([line.replace(b"-1", b"2")], source="feed"))
    assert isinstance(ok, f.AskAdded) and ok.gang_min == 2


# ---------------------------------------------------------------------- normal allocation


def test_gang_is_placed_whole_in_one_proposal() -> None:
    h = normal()
    h.feed(gang_ask("a1", "g", 60, count=3, gang_min=3))
    proposal = h.propose()
    assert proposal is not None and len(proposal.placements) == 3
    assert h.deliver().accepted == 3
    assert sorted(node for _, node in h.placements()) == ["n0", "n1", "n2"]
    h.model.check(h.now)
    assert not h.model.violations and not invariant_problems(h.cache.state)


def test_gang_without_room_for_every_member_places_none_and_holds_nothing() -> None:
    h = normal(nodes=3)
    h.feed(f.AskAdded(app="a1", ask="big", resource={"memory": 50}))
    h.settle()
    [big] = h.allocated()
    h.feed(gang_ask("a1", "g", 60, count=3, gang_min=3), f.AskAdded(app="a1", ask="small", resource={"memory": 30}))
    h.settle()
    assert [ask for ask, _ in h.placements()] == ["big", "small"]  # the gang waits; others are not blocked
    ask = h.allocator.state.ask(("a1", "g"))
    assert ask is not None and ask.allocating == 0 and ask.allocated == 0
    assert not any(res.any_positive(n.allocating) for n in h.allocator.state.nodes.values())
    h.feed(f.AllocationReleased(allocation=big.allocation))
    h.settle()
    assert sum(1 for ask, _ in h.placements() if ask == "g") == 3
    h.model.check(h.now)
    assert not h.model.violations


def test_once_the_gang_is_placed_the_rest_of_the_ask_is_ordinary() -> None:
    h = normal(nodes=4)
    h.feed(gang_ask("a1", "g", 60, count=6, gang_min=3))
    h.settle()
    assert sum(1 for ask, _ in h.placements() if ask == "g") == 4  # 3 together, then 1 more where room is
    h.model.check(h.now)
    assert not gang_violations(h.model)


def test_cache_refuses_a_proposal_with_part_of_a_gang() -> None:
    h = normal()
    h.feed(gang_ask("a1", "g", 60, count=3, gang_min=3))
    seq = h.cache.state.ask(("a1", "g")).seq  # type: ignore[union-attr]
    two = p.AllocationProposal(id="t/1", view_seq=0, placements=[p.Placement("a1", "g", n, seq) for n in ("n0", "n1")])
    h.cache.handle_proposal(two)
    h.pump()
    outcome = h.outcomes["t/1"]
    assert outcome.accepted == 0 and len(outcome.rejected) == 2
    assert all("all or nothing" in why for why in outcome.rejected.values())


def test_cache_commits_a_gang_atomically_when_one_member_does_not_fit() -> None:
    h = normal()
    h.feed(gang_ask("a1", "g", 60, count=3, gang_min=3))
    seq = h.cache.state.ask(("a1", "g")).seq  # type: ignore[union-attr]
    # Two members on n0 cannot both fit: the second fails, so none is committed.
    bad = p.AllocationProposal(
        id="t/2", view_seq=0, placements=[p.Placement("a1", "g", n, seq) for n in ("n1", "n0", "n0")]
    )
    h.cache.handle_proposal(bad)
    h.pump()
    outcome = h.outcomes["t/2"]
    assert outcome.accepted == 0
    assert all("gang member 3 of 3: does not fit" in why for why in outcome.rejected.values())
    assert not h.cache.state.allocations
    assert not any(res.any_positive(n.allocating) for n in h.cache.state.nodes.values())
    h.model.check(h.now)
    assert not h.model.violations


def tagged_gang(nodes: dict[str, str], maximum: int | None = None) -> Harness:
    """Nodes of 100 by rack (``nodes``: name to rack), another app's 30 running in the queue, and a gang
    of three 30s tagged ``g``, at most one per node and two per rack."""
    h = Harness(config_of(queue("a", maximum=None if maximum is None else {"memory": maximum})))
    h.feed(
        *(f.NodeAdded(node=n, capacity={"memory": 100}, labels={"rack": rack}) for n, rack in nodes.items()),
        f.AppAdded(app="a2", queue="root.a"),
        f.AskAdded(app="a2", ask="other", resource={"memory": 30}, count=1),
    )
    h.settle()
    assert len(h.cache.state.allocations) == 1
    h.feed(
        f.AppAdded(app="a1", queue="root.a"),
        gang_ask(
            "a1",
            "g",
            30,
            count=3,
            gang_min=3,
            tags=("g",),
            constraints=(
                f.PlacementConstraint(scope="node", op="cardinality", tags=["g"], max=1),
                f.PlacementConstraint(scope="rack", op="cardinality", tags=["g"], max=2),
            ),
        ),
    )
    return h


def held_state(state: PartitionState) -> object:
    """Everything a gang's hold would write, as stored (a zero left behind counts): every ``allocating``
    counter, the tag index, the node order."""
    return (
        fingerprint(state, allocating=True),
        [(n.name, dict(n.allocating)) for n in state.nodes.values()],
        [(q.path, dict(q.allocating)) for q in state.queues.values()],
        [(k.key, k.allocating) for a in state.apps.values() for k in a.asks.values()],
        {n: dict(c) for n, c in state.tags.by_node.items()},
        {g: dict(c) for g, c in state.tags.by_group.items()},
        state.node_index.ordered() if state.indexed else None,
    )


@pytest.mark.parametrize(
    ("nodes", "why"),
    [
        ({"n0": "r1", "n1": "r2", "n2": "r3"}, None),
        ({"n0": "r1", "n1": "r1", "n2": "r1"}, "gang member 3 of 3: node n2's rack would hold 3 of g"),
    ],
)
def test_checking_a_gang_unit_only_reads_the_state(nodes: dict[str, str], why: str | None) -> None:
    h = tagged_gang(nodes)
    state = h.cache.state
    seq = state.ask(("a1", "g")).seq  # type: ignore[union-attr]
    unit = [p.Placement("a1", "g", n, seq) for n in nodes]
    before = held_state(state)
    seen: list[object] = []

    def check(pl: p.Placement, held: gang.Held) -> str | None:
        seen.append(held_state(state))
        return h.cache.check_placement(pl.app, pl.ask, pl.node, pl.ask_seq, None, held)

    outcome = gang.check_unit(state, unit, 3, check)
    assert outcome is None if why is None else (outcome or "").startswith(why), outcome
    assert seen == [before] * 3  # every member checked (the last refused or not) on the untouched state
    assert held_state(state) == before


@pytest.mark.parametrize(
    ("nodes", "placed", "maximum", "why"),
    [
        ({"n0": "r1", "n1": "r2", "n2": "r3"}, ["n0", "n1", "n2"], None, None),
        ({"n0": "r1", "n1": "r2", "n2": "r3"}, ["n0", "n1", "n0"], None, "gang member 3 of 3: node n0's node would"),
        ({"n0": "r1", "n1": "r1", "n2": "r1"}, ["n0", "n1", "n2"], None, "gang member 3 of 3: node n2's rack would"),
        ({"n0": "r1", "n1": "r2", "n2": "r3"}, ["n0", "n1", "n2"], 119, "gang member 3 of 3: queue max would be"),
        ({"n0": "r1", "n1": "r2", "n2": "r3"}, ["n0", "n1", "n2"], 120, None),
    ],
)
def test_the_cache_counts_a_gangs_earlier_members_in_room_tags_and_max_and_leaves_no_trace(
    nodes: dict[str, str], placed: list[str], maximum: int | None, why: str | None
) -> None:
    # Each member alone fits everywhere: only the members before it, counted, refuse it.
    h = tagged_gang(nodes, maximum)
    state = h.cache.state
    seq = state.ask(("a1", "g")).seq  # type: ignore[union-attr]
    before = held_state(state)
    h.cache.handle_proposal(
        p.AllocationProposal(id="t/g", view_seq=0, placements=[p.Placement("a1", "g", n, seq) for n in placed])
    )
    h.pump()
    outcome = h.outcomes["t/g"]
    if why is None:
        assert outcome.accepted == 3
        assert sorted(a.node for a in state.allocations.values() if a.app == "a1") == sorted(placed)
        return
    assert outcome.accepted == 0 and len(outcome.rejected) == 3
    assert all(reason.startswith(why) for reason in outcome.rejected.values()), outcome.rejected
    assert held_state(state) == before


def limited_user(limit_mib: int) -> Harness:
    """Queue root.a where each user may hold ``limit_mib`` of memory; app a1 belongs to user sue."""
    leaf = queue("a")
    leaf["limits"] = [{"users": ["*"], "maxresources": {"memory": f"{limit_mib}Mi"}}]
    h = Harness(config_of(leaf))
    h.feed(
        *(f.NodeAdded(node=f"n{i}", capacity={"memory": 100}) for i in range(3)),
        f.AppAdded(app="a1", queue="root.a", user="sue"),
    )
    return h


def test_a_gang_beyond_its_users_limit_places_no_member() -> None:
    h = limited_user(100)  # two 40s fit sue's limit, a gang of three does not
    h.feed(gang_ask("a1", "g", 40, count=3, gang_min=3))
    assert h.propose() is None  # the allocator proposes no member: the cache would refuse them all
    h.settle()
    assert not h.placements() and not h.cache.state.allocations
    h.feed(gang_ask("a1", "pair", 40, count=2, gang_min=2))
    h.settle()
    assert [ask for ask, _ in h.placements()] == ["pair", "pair"]
    h.model.check(h.now)
    assert not gang_violations(h.model)


def test_gangs_placed_in_one_cycle_count_against_the_limit_together_with_what_the_cycle_placed_before() -> None:
    h = limited_user(100)  # one pair of 40s fits sue's limit, a second pair or a single and a pair does not
    h.feed(gang_ask("a1", "first", 40, count=2, gang_min=2), gang_ask("a1", "second", 40, count=2, gang_min=2))
    h.settle()
    assert sorted(ask for ask, _ in h.placements()) == ["first", "first"]
    h.feed(f.AppAdded(app="a2", queue="root.a", user="tom"))
    h.feed(
        f.AskAdded(app="a2", ask="single", resource={"memory": 40}, priority=5),
        gang_ask("a2", "pair", 40, count=2, gang_min=2),
    )
    h.settle()
    assert sorted(ask for ask, _ in h.placements() if ask in ("single", "pair")) == ["single"]
    h.model.check(h.now)
    assert not gang_violations(h.model)


def test_cache_refuses_a_whole_gang_whose_members_together_break_a_user_limit() -> None:
    h = limited_user(100)
    h.feed(gang_ask("a1", "g", 40, count=3, gang_min=3))
    h.settle()
    seq = h.cache.state.ask(("a1", "g")).seq  # type: ignore[union-attr]
    three = [p.Placement("a1", "g", n, seq) for n in ("n0", "n1", "n2")]
    h.cache.handle_proposal(p.AllocationProposal(id="t/3", view_seq=0, placements=three))
    h.pump()
    outcome = h.outcomes["t/3"]
    assert outcome.accepted == 0 and len(outcome.rejected) == 3
    assert all("gang member 3 of 3" in why and "maxresources" in why for why in outcome.rejected.values())
    assert not h.cache.state.allocations


# ---------------------------------------------------------------------- sniper preemption


def borrowed(raw: dict[str, Any], nodes: int = 3) -> PreemptHarness:
    """root.b fills ``nodes`` nodes of 100 with 20-unit containers; root.a has an app, a1."""
    h = PreemptHarness(raw)
    names = [f"n{i}" for i in range(nodes)]
    h.nodes(*names)
    for n, name in enumerate(names):
        h.fill(f"b{n}", "root.b", name, [20] * 5, start=float(n * 5))
    h.app("a1", "root.a")
    return h


def test_sniper_preempts_for_every_member_of_a_gang_in_one_commit() -> None:
    h = borrowed(two_queues(150, 150))
    h.feed(gang_ask("a1", "g", 60, count=2, gang_min=2))
    h.starve()
    r = h.preempt_round()
    assert r.outcome is not None and r.outcome.accepted == 2
    assert len({x.node for x in r.preempts()}) == 2 and len(r.preempts()) == 6  # 3 victims per member
    assert len(h.cache.state.reservations) == 2
    ask = h.cache.state.ask(("a1", "g"))
    assert ask is not None and ask.reserved == 2
    h.model.check(h.now)
    assert not h.model.violations


def test_two_members_on_one_node_count_the_room_the_first_members_victims_free() -> None:
    # n0 holds 30+30+30 of b's, 10 free: member 1 (45) needs two victims (room 70), member 2 one more.
    h = PreemptHarness(two_queues(100, 0))
    h.nodes("n0")
    h.fill("b0", "root.b", "n0", [30, 30, 30])
    h.app("a1", "root.a")
    h.feed(gang_ask("a1", "g", 45, count=2, gang_min=2))
    h.starve()
    r = h.preempt_round()
    assert r.outcome is not None and r.outcome.accepted == 2, r.outcome
    assert [len(pl.victims) for pl in r.placements] == [2, 1]
    h.tick(h.now + 16)
    h.release(*h.kills())
    assert sorted(x.ask for x in h.allocated() if x.app == "a1") == ["g", "g"]
    h.model.check(h.now)
    assert not h.model.violations


def test_no_victim_for_a_gang_whose_members_would_take_its_queue_above_its_ideal() -> None:
    # a's ideal is half of 300; a gang of 3 x 60 = 180 would take it above: nobody is preempted.
    h = borrowed(two_queues(150, 150))
    h.feed(gang_ask("a1", "g", 60, count=3, gang_min=3))
    h.starve()
    r = h.preempt_round()
    assert not r.placements and not h.preempts()
    assert r.reply is not None and r.reply.unplaceable == ["a1/g"]


def test_no_victim_for_a_gang_when_one_member_finds_no_victims() -> None:
    # Only n0 and n1 hold victims the quota allows (b's guarantee keeps n2's): 2 of 3 members at most.
    h = PreemptHarness(two_queues(200, 100))
    h.nodes("n0", "n1", "n2")
    h.fill("b0", "root.b", "n0", [20] * 5)
    h.fill("b1", "root.b", "n1", [20] * 5, start=5.0)
    h.fill("b2", "root.b", "n2", [20] * 5, start=10.0)
    h.app("a1", "root.a")
    h.feed(gang_ask("a1", "g", 80, count=3, gang_min=3))
    h.starve()
    r = h.preempt_round()
    assert not r.placements and not h.preempts()
    # The same queue state with a gang of 2 is served.
    h.feed(gang_ask("a1", "g2", 80, count=2, gang_min=2))
    h.starve()
    r = h.preempt_round(now=h.now + 31)  # past the mask
    assert r.outcome is not None and r.outcome.accepted == 2


def test_a_gang_larger_than_the_round_budget_takes_the_round_whole() -> None:
    # The budget (10% of 300 = 30) covers one victim of 20; the gang needs 6: served whole, in one round.
    h = borrowed(two_queues(150, 150, total_preemption_per_round=0.1))
    h.feed(gang_ask("a1", "g", 60, count=2, gang_min=2))
    h.starve()
    r = h.preempt_round()
    assert r.outcome is not None and r.outcome.accepted == 2 and len(r.preempts()) == 6


def test_a_gang_waits_for_the_next_round_once_the_budget_is_spent() -> None:
    h = borrowed(two_queues(150, 150, total_preemption_per_round=0.1))
    h.feed(f.AskAdded(app="a1", ask="one", resource={"memory": 40}, priority=5))  # served first: budget spent
    h.feed(gang_ask("a1", "g", 60, count=2, gang_min=2))
    h.starve()
    r = h.preempt_round()
    assert [pl.ask for pl in r.placements] == ["one"]
    assert h.cache.state.ask(("a1", "g")).reserved == 0  # type: ignore[union-attr]


def test_cache_refuses_a_preemption_proposal_with_part_of_a_gang() -> None:
    h = borrowed(two_queues(150, 150))
    h.feed(gang_ask("a1", "g", 60, count=2, gang_min=2))
    victims = sorted(a.id for a in h.cache.state.allocations.values() if a.node == "n0")[:3]
    half = p.PreemptionProposal(
        id="t/p", view_seq=0, policy="sniper", placements=[p.Victimized("a1", "g", "n0", victims)]
    )
    outcome, decisions = h.commit(half)
    assert outcome.accepted == 0 and not [x for x in decisions if isinstance(x, d.Preempt)]
    assert "all or nothing" in next(iter(outcome.rejected.values()))


def test_cache_refuses_a_gang_whose_members_name_the_same_victims() -> None:
    h = borrowed(two_queues(150, 150))
    h.feed(gang_ask("a1", "g", 60, count=2, gang_min=2))
    victims = sorted(a.id for a in h.cache.state.allocations.values() if a.node == "n0")[:3]
    twice = p.PreemptionProposal(
        id="t/q",
        view_seq=0,
        policy="sniper",
        placements=[p.Victimized("a1", "g", "n0", victims), p.Victimized("a1", "g", "n0", victims)],
    )
    outcome, decisions = h.commit(twice)
    assert outcome.accepted == 0 and not [x for x in decisions if isinstance(x, d.Preempt)]
    assert "gang member 2 of 2: a victim is named for two members" in outcome.rejected.values()


def test_checking_a_gang_that_fails_at_its_last_member_counts_its_victims_beside_the_state() -> None:
    h = borrowed(two_queues(150, 150))
    h.feed(gang_ask("a1", "g", 60, count=2, gang_min=2))
    state = h.cache.state
    victims = sorted(a.id for a in state.allocations.values() if a.node == "n0")[:3]

    def counters() -> list[object]:
        return [
            [(n.name, dict(n.preempting)) for n in state.nodes.values()],
            [(q.path, dict(q.preempting)) for q in state.queues.values()],
            [(a.name, a.disrupted) for a in state.apps.values()],
        ]

    before, held = counters(), held_state(state)
    second = p.Victimized("a1", "g", "n0", ["alloc-does-not-exist"])
    proposal = p.PreemptionProposal(
        id="t/r", view_seq=0, policy="sniper", placements=[p.Victimized("a1", "g", "n0", victims), second]
    )
    outcome, decisions = h.commit(proposal)
    assert outcome.accepted == 0 and not [x for x in decisions if isinstance(x, d.Preempt)]
    assert "gang member 2 of 2: victim alloc-does-not-exist is gone" in outcome.rejected.values()
    assert counters() == before  # not even a zero left behind where a member's victims were counted
    assert held_state(state) == held  # nor where the first member's room was counted taken


# ---------------------------------------------------------------------- the checker


def test_checker_reports_a_partial_gang() -> None:
    model = ClusterModel(PARTITION, config_of(queue("a")))
    model.on_event(f.NodeAdded(node="n0", capacity={"memory": 100}))
    model.on_event(f.AppAdded(app="a1", queue="root.a"))
    model.on_event(gang_ask("a1", "g", 10, count=3, gang_min=3))
    model.on_decision(
        d.Allocated(seq=1, allocation="alloc-1", app="a1", ask="g", queue="root.a", node="n0", resource={"memory": 10})
    )
    model.check(1.0)
    assert gang_violations(model) == ["partial gang a1/g: 1 of 3 members placed or reserved"]


# ---------------------------------------------------------------------- property


@st.composite
def gang_workloads(draw: st.DrawFn) -> tuple[list[int], list[tuple[int, int, int]], int]:
    nodes = draw(st.lists(st.sampled_from([60, 100, 160]), min_size=2, max_size=5))
    gangs = draw(
        st.lists(
            st.tuples(st.sampled_from([20, 30, 50, 70]), st.integers(1, 5), st.integers(1, 5)), min_size=1, max_size=4
        )
    )
    return nodes, gangs, draw(st.sampled_from([10, 20, 30]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gang_workloads())
def test_random_gangs_never_partial_and_no_victim_for_an_incomplete_gang(
    workload: tuple[list[int], list[tuple[int, int, int]], int],
) -> None:
    nodes, gangs, fill = workload
    total = sum(nodes)
    h = PreemptHarness(
        preemption_raw(queue("a", guaranteed={"memory": total // 2}), queue("b", guaranteed={"memory": total // 4}))
    )
    names = [f"n{i}" for i in range(len(nodes))]
    h.feed(*(f.NodeAdded(node=n, capacity={"memory": m}) for n, m in zip(names, nodes, strict=True)))
    h.app("b1", "root.b")
    h.feed(f.AskAdded(app="b1", ask="fill", resource={"memory": fill}, count=total // fill))  # b borrows all
    h.settle()
    h.app("a1", "root.a")
    for i, (size, count, k) in enumerate(gangs):
        h.feed(gang_ask("a1", f"g{i}", size, count=max(count, k), gang_min=k), allow_rejected=True)
    for step in range(4):
        h.settle()
        h.starve()
        h.preempt_round(now=h.now + 1 + step * 31)
        h.model.check(h.now)
        h.tick(h.now + 16)  # grace over: victims killed, their room goes to the reservations
        h.release(*h.kills())
        h.model.check(h.now)
    h.settle()
    h.model.check(h.now)
    assert not h.model.violations, h.model.violations
    assert not invariant_problems(h.cache.state)
    # Every victim was preempted for a gang reserved or placed whole.
    for x in h.preempts():
        ask = h.cache.state.ask((x.for_app, x.for_ask))
        assert ask is not None and ask.allocated + ask.reserved >= ask.gang_min


# ---------------------------------------------------------------------- the bundled scenario


def test_gang_scenario_sniper_preempts_for_whole_gangs_only_and_the_baseline_wastes() -> None:
    sc = scenario("gang")
    sniper = run_simulation(sc.events, sc.config, SimulationSettings(until=350, policy="sniper"))
    beneficiaries = Counter(x.for_ask for x in sniper.decisions if isinstance(x, d.Preempt))
    # 7 victims for each of train-0's 4 workers, none for train-1 (above the ideal), 4 x 4 for train-2's
    # gang and 4 for its fifth worker: batch, above the deadzone with its victims under notice, goes on
    # losing containers towards its ideal.
    assert beneficiaries == {"train-0-workers": 28, "train-2-workers": 20}
    assert sniper.report["wasted_preemptions"] == 0 and sniper.report["invariant_violations"] == 0
    baseline = run_simulation(sc.events, sc.config, SimulationSettings(until=150, policy="proportional"))
    assert baseline.report["wasted_preemptions"] > 0 and baseline.report["invariant_violations"] == 0
    assert not [x for x in baseline.decisions if isinstance(x, d.Allocated) and x.app.startswith("train")]


def test_a_gang_whose_victims_include_opportunistic_containers_is_committed_whole() -> None:
    # Each node: b's two 25s and one opportunistic 50 of b; the gang's 75s need the 50 and one 25 each.
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n0", "n1")
    opportunistic = []
    for n, name in enumerate(["n0", "n1"]):
        h.fill("b1", "root.b", name, [25, 25], start=float(2 * n))
        h.feed(f.AskAdded(app="b1", ask=f"idle{n}", resource={"memory": 50}, execution_type="opportunistic"))
        h.cache.allocate("b1", f"idle{n}", name)
        h.pump()
        opportunistic.append(h.allocated()[-1].allocation)
    h.app("a1", "root.a")
    h.feed(gang_ask("a1", "g", 75, count=2, gang_min=2))
    h.starve(2)
    assert not h.kills()  # evicting the opportunistic containers alone frees 50 of the 75
    r = h.preempt_round()
    assert r.outcome is not None and r.outcome.accepted == 2, r.outcome
    assert all(set(pl.victims) & set(opportunistic) for pl in r.placements)
    assert sorted(h.kills()) == sorted(opportunistic)  # at once, as anyone's
    h.release(*h.kills())
    h.tick(h.now + 16)
    h.release(*h.kills()[2:])
    assert sorted(x.node for x in h.allocated() if x.app == "a1") == ["n0", "n1"]
    h.model.check(h.now)
    assert not h.model.violations and not invariant_problems(h.cache.state)


# ---------------------------------------------------------------------- with opportunistic containers


def two_levels(policy: str, **guarantees: int) -> SchedulerConfig:
    leaves = [queue(name, guaranteed={"memory": g}) for name, g in guarantees.items()]
    raw = preemption_raw(*leaves, policy=policy, total_preemption_per_round=0.2)
    return parse_config({"partitions": [raw]})


def test_opportunistic_eviction_for_a_gang_is_all_members_or_none() -> None:
    # Each 130 node holds b's 70 and 60 of opportunistic 10s: evictions make room for one 60 per node,
    # so a gang of three 60s waits whole for the third node (t=40), under every policy.
    events: list[f.Feed] = [
        f.NodeAdded(t=0, node="n0", capacity={"memory": 130}),
        f.NodeAdded(t=0, node="n1", capacity={"memory": 130}),
        f.AppAdded(t=0, app="b1", queue="root.b"),
        f.AskAdded(t=0, app="b1", ask="svc", resource={"memory": 70}, count=2, duration=500),
        f.AppAdded(t=1, app="o1", queue="root.b"),
        f.AskAdded(
            t=1, app="o1", ask="idle", resource={"memory": 10}, count=12, duration=500, execution_type="opportunistic"
        ),
        f.AppAdded(t=10, app="a1", queue="root.a"),
        gang_ask("a1", "g", 60, count=3, gang_min=3, t=10, duration=100),
        f.NodeAdded(t=40, node="n2", capacity={"memory": 130}),
    ]
    for policy in ("sniper", "proportional", "none"):
        result = run_simulation(events, two_levels(policy, a=180, b=140), SimulationSettings(until=200, policy=policy))
        assert result.report["invariant_violations"] == 0, (policy, result.report["violations"])
        gang = [x for x in result.decisions if isinstance(x, d.Allocated) and x.app == "a1"]
        assert [x.t for x in gang] == [40.0] * 3, policy
        kills = [x for x in result.decisions if isinstance(x, d.Kill)]
        assert kills and all(x.t >= 40.0 and x.reason == "opportunistic" for x in kills), policy


def mixed_workload(seed: int, nodes: int, apps: int, horizon: float) -> list[f.Feed]:
    """Guaranteed work, gangs and opportunistic work in three queues, contract apps among them, and
    nodes lost and back: ``apps`` apps of one ask each arriving over ``horizon`` seconds."""
    rng = random.Random(seed)
    capacity = {"memory": 64, "vcore": 16}
    events: list[f.Feed] = [f.NodeAdded(t=0, node=f"n{i:03d}", capacity=capacity) for i in range(nodes)]
    for k in range(apps):
        t = round(rng.uniform(0, horizon), 1)
        app = f"app{k}"
        queue_path = rng.choice(["root.prod", "root.dev", "root.batch"])
        events.append(f.AppAdded(t=t, app=app, queue=queue_path, preemption_contract=rng.random() < 0.2))
        kind = rng.random()
        if kind < 0.25:
            k_min = rng.randint(2, 4)
            events.append(
                f.AskAdded(
                    t=t,
                    app=app,
                    ask="g",
                    resource={"memory": rng.choice([16, 24, 32]), "vcore": 4},
                    count=k_min + rng.randint(0, 2),
                    gang_min=k_min,
                    duration=rng.uniform(60, 300),
                )
            )
        elif kind < 0.55:
            events.append(
                f.AskAdded(
                    t=t,
                    app=app,
                    ask="o",
                    resource={"memory": rng.choice([4, 8]), "vcore": 1},
                    count=rng.randint(2, 12),
                    duration=rng.uniform(60, 400),
                    execution_type="opportunistic",
                )
            )
        else:
            events.append(
                f.AskAdded(
                    t=t,
                    app=app,
                    ask="w",
                    resource={"memory": rng.choice([4, 8, 16]), "vcore": 2},
                    count=rng.randint(1, 10),
                    duration=rng.uniform(30, 300),
                )
            )
    for _ in range(nodes // 10):
        t = round(rng.uniform(horizon * 0.2, horizon), 1)
        name = f"n{rng.randrange(nodes):03d}"
        events.append(f.NodeRemoved(t=t, node=name))
        events.append(f.NodeAdded(t=t + rng.uniform(10, 60), node=name, capacity=capacity))
    events.sort(key=lambda e: e.t)
    return events


@pytest.mark.parametrize("policy", ["sniper", "proportional", "none"])
def test_a_long_mixed_workload_keeps_every_gang_whole(policy: str) -> None:
    events = mixed_workload(seed=0, nodes=20, apps=120, horizon=400)
    config = two_levels(policy, prod=500, dev=300, batch=100)
    result = run_simulation(events, config, SimulationSettings(until=600, policy=policy))
    assert result.report["invariant_violations"] == 0, result.report["violations"][:5]
    gangs = {x.app for x in result.decisions if isinstance(x, d.Allocated) and x.ask == "g"}
    evicted = [x for x in result.decisions if isinstance(x, d.Kill) and x.reason == "opportunistic"]
    assert len(gangs) > 5 and evicted  # the workload exercises both


def test_a_gang_stays_whole_through_node_loss_beside_opportunistic_work_and_a_contract_app() -> None:
    # b's contract app holds four 35s on two 130 nodes, b's guarantee (140) and no more, so no policy
    # preempts it; opportunistic 10s fill the rest. The gang of three 60s fits once n2 joins (t=40); n2,
    # holding two members, is lost at t=60.
    events: list[f.Feed] = [
        f.NodeAdded(t=0, node="n0", capacity={"memory": 130}),
        f.NodeAdded(t=0, node="n1", capacity={"memory": 130}),
        f.AppAdded(t=0, app="b1", queue="root.b", preemption_contract=True),
        f.AskAdded(t=0, app="b1", ask="svc", resource={"memory": 35}, count=4, duration=500),
        f.AppAdded(t=1, app="o1", queue="root.b"),
        f.AskAdded(
            t=1, app="o1", ask="idle", resource={"memory": 10}, count=12, duration=500, execution_type="opportunistic"
        ),
        f.AppAdded(t=10, app="a1", queue="root.a"),
        gang_ask("a1", "g", 60, count=3, gang_min=3, t=10, duration=100),
        f.NodeAdded(t=40, node="n2", capacity={"memory": 130}),
        f.NodeRemoved(t=60, node="n2"),
    ]
    for policy in ("sniper", "proportional", "none"):
        result = run_simulation(events, two_levels(policy, a=120, b=140), SimulationSettings(until=300, policy=policy))
        assert result.report["invariant_violations"] == 0, (policy, result.report["violations"])
        members = [x for x in result.decisions if isinstance(x, d.Allocated) and (x.app, x.ask) == ("a1", "g")]
        assert [x.t for x in members] == [40.0] * 3, policy
        lost = [x for x in result.decisions if isinstance(x, d.AllocationLost) and x.app == "a1"]
        assert [(x.t, x.ask) for x in lost] == [(60.0, "g"), (60.0, "g")], policy


@pytest.mark.parametrize(("memory", "accepted"), [(1024, 2), (1536, 0)])
def test_an_opportunistic_gang_over_commits_a_node_counting_its_earlier_members(memory: int, accepted: int) -> None:
    # n1 is full and reported at half its capacity (threshold 0.8): one member alone always fits the
    # slack, two of 1536 together reach the threshold.
    h = full_node()
    h.feed(report(CAP / 2))
    h.feed(
        f.AskAdded(app="b1", ask="og", resource={"memory": memory}, count=2, gang_min=2, execution_type="opportunistic")
    )
    state = h.cache.state
    seq = state.ask(("b1", "og")).seq  # type: ignore[union-attr]
    before = held_state(state)
    h.cache.handle_proposal(
        p.AllocationProposal(id="t/o", view_seq=0, placements=[p.Placement("b1", "og", "n1", seq)] * 2)
    )
    h.pump()
    outcome = h.outcomes["t/o"]
    assert outcome.accepted == accepted
    if not accepted:
        assert all(why.startswith("gang member 2 of 2: does not fit") for why in outcome.rejected.values())
        assert held_state(state) == before
