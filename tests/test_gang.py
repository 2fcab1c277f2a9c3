"""Gangs (all or nothing, ``gang_min``): normal allocation, the cache's atomic commit, sniper preemption
for a whole gang or nobody, the round's budget, user limits on the whole gang, rejection of gangs that
can never fit, the checker."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import resources as res
from messages import decisions as d
from messages import feed as f
from messages import protocol as p
from messages.codec import BadInput, decode_feed_lines
from simulator.model import ClusterModel
from simulator.run import SimulationSettings, run_simulation
from simulator.scenarios import scenario
from tests.core_support import Harness, config_of, invariant_problems, queue, rejected_reasons
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
