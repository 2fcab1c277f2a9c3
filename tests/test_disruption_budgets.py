"""Apps' own limits on preemption (architecture: invariant 11): disruption budgets (``max_disruption``),
preemption opt-outs (``allow_preemption: false``) and asks that never preempt (``preemption_policy:
never``), under sniper, intra-queue, the proportional baseline, opportunistic eviction, preemption
contracts and gangs; the cache's refusals; the independent checker's; and the bundled scenario.
"""

from __future__ import annotations

from collections import Counter

import pytest

from sniper.core.cache import state_changes
from sniper.core.preemption.placement import answer_placement_request
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.codec import BadInput, decode_feed_lines
from sniper.simulator.model import ClusterModel
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.core_support import consistency_problems, queue
from tests.preemption_support import PARTITION, PreemptHarness, preemption_raw, proposal, two_queues


def victims_of(h: PreemptHarness, app: str) -> list[str]:
    return [x.allocation for x in h.preempts() if x.app == app and not x.observe_only]


def under_notice(h: PreemptHarness, app: str) -> int:
    state = h.cache.state
    return sum(1 for a in state.apps[app].allocations if state.allocations[a].preempting)


def borrowed(h: PreemptHarness, max_disruption: int | None = None, allow_preemption: bool = True) -> None:
    """b's app svc (with ``limits``) holds n1 in four 25s started late (cheap victims), b's app etl holds
    n2 in four 25s started early (costly victims); a (guarantee 100 of 200) then asks."""
    h.nodes("n1", "n2")
    svc = f.AppAdded(app="svc", queue="root.b", max_disruption=max_disruption, allow_preemption=allow_preemption)
    h.feed(f.AppAdded(app="etl", queue="root.b"), svc)
    h.fill("etl", "root.b", "n2", [25, 25, 25, 25])
    h.fill("svc", "root.b", "n1", [25, 25, 25, 25], start=10)
    h.app("a1", "root.a")


# ---------------------------------------------------------------------- the feed


def test_the_feed_examples_decode_and_bad_values_are_refused_with_the_field() -> None:
    good = [
        '{"t": 0, "type": "app_added", "app": "web", "queue": "root.services", "max_disruption": 1}',
        '{"t": 0, "type": "app_added", "app": "db", "queue": "root.services", "allow_preemption": false}',
        '{"t": 5, "type": "ask_added", "app": "backfill", "ask": "scan", "resource": {"memory": 8192}, '
        '"count": 40, "preemption_policy": "never"}',
    ]
    web, db, scan = decode_feed_lines(good)
    assert isinstance(web, f.AppAdded) and web.max_disruption == 1 and web.allow_preemption
    assert isinstance(db, f.AppAdded) and db.max_disruption is None and not db.allow_preemption
    assert isinstance(scan, f.AskAdded) and scan.preemption_policy == "never"
    bad = [
        '{"type": "app_added", "app": "web", "queue": "root.a", "max_disruption": -1}',
        '{"type": "ask_added", "app": "a", "ask": "k", "resource": {"memory": 1}, "preemption_policy": "sometimes"}',
    ]
    reasons = [x.reason for x in decode_feed_lines(bad) if isinstance(x, BadInput)]
    assert len(reasons) == 2
    assert "max_disruption" in reasons[0] and "preemption_policy" in reasons[1]


# ---------------------------------------------------------------------- disruption budgets, sniper


def test_without_limits_sniper_takes_the_cheapest_set_the_budget_tests_compare_against() -> None:
    h = PreemptHarness(two_queues())
    borrowed(h)
    h.ask("a1", "w", 50)
    h.starve()
    h.preempt_round()
    assert len(victims_of(h, "svc")) == 2 and not victims_of(h, "etl")


def test_a_used_up_budget_makes_sniper_take_other_victims_and_counts_the_refusal() -> None:
    h = PreemptHarness(two_queues())
    borrowed(h, max_disruption=1)
    h.ask("a1", "w", 50)
    h.starve()
    r = h.preempt_round()
    assert not victims_of(h, "svc")
    assert len(victims_of(h, "etl")) == 2
    assert r.reply is not None and r.reply.budget_refusals >= 1
    assert h.policy.budget_refusals == r.reply.budget_refusals
    assert not h.model.violations and not consistency_problems(h.cache.state)


def test_a_budget_holds_across_rounds_until_the_victim_is_gone() -> None:
    h = PreemptHarness(two_queues(50, 50))
    h.nodes("n1")
    h.feed(f.AppAdded(app="svc", queue="root.b", max_disruption=1))
    h.fill("svc", "root.b", "n1", [25, 25, 25, 25])
    h.app("a1", "root.a")
    h.ask("a1", "w", 25, count=2)
    h.starve()
    h.preempt_round(5.0)
    first = victims_of(h, "svc")
    assert len(first) == 1 and under_notice(h, "svc") == 1
    h.starve()
    h.preempt_round(6.0)
    assert victims_of(h, "svc") == first, "a second victim while the first is still under notice"
    h.release(*first)  # gone: the budget has room again
    h.starve(2)
    h.preempt_round(8.0)
    assert len(victims_of(h, "svc")) == 2 and under_notice(h, "svc") == 1
    assert not h.model.violations and not consistency_problems(h.cache.state)


def test_a_budget_of_zero_lets_nothing_be_preempted() -> None:
    h = PreemptHarness(two_queues(50, 50))
    h.nodes("n1")
    h.feed(f.AppAdded(app="svc", queue="root.b", max_disruption=0))
    h.fill("svc", "root.b", "n1", [25, 25, 25, 25])
    h.app("a1", "root.a")
    h.ask("a1", "w", 25)
    h.starve()
    r = h.preempt_round()
    assert not h.preempts() and r.reply is not None and r.reply.budget_refusals == 4


def test_the_cache_refuses_a_placement_that_breaks_a_budget() -> None:
    h = PreemptHarness(two_queues())
    borrowed(h, max_disruption=1)
    h.ask("a1", "w", 50)
    svc = sorted(h.cache.state.apps["svc"].allocations)[:2]
    outcome, _ = h.commit(proposal("a1", "w", "n1", svc))
    assert outcome.accepted == 0
    (why,) = outcome.rejected.values()
    assert "app svc's disruption budget is used up (max_disruption 1" in why
    assert not h.preempts()


def test_a_gang_that_needs_more_than_a_budget_allows_preempts_nothing() -> None:
    """A budget of one on the app a gang of two would need one victim from on each node."""
    raw = two_queues(100, 100)
    for budget, preempted in ((1, 0), (2, 2)):
        h = PreemptHarness(raw)
        h.nodes("n1", "n2")
        h.feed(f.AppAdded(app="svc", queue="root.b", max_disruption=budget))
        h.fill("svc", "root.b", "n1", [50, 50])
        h.fill("svc", "root.b", "n2", [50, 50], start=2)
        h.app("g", "root.a")
        h.feed(f.AskAdded(app="g", ask="pair", resource={"memory": 50}, count=2, gang_min=2))
        h.starve()
        h.preempt_round()
        assert len(victims_of(h, "svc")) == preempted, budget
        assert not h.model.violations and not consistency_problems(h.cache.state)


def test_a_node_lost_mid_grace_frees_its_victims_budget_and_nothing_goes_over_it() -> None:
    h = PreemptHarness(two_queues(50, 50))
    h.nodes("n1", "n2")
    h.feed(f.AppAdded(app="svc", queue="root.b", max_disruption=1))
    h.fill("svc", "root.b", "n1", [25, 25, 25, 25])
    h.fill("svc", "root.b", "n2", [25, 25, 25, 25], start=4)
    h.app("a1", "root.a")
    h.ask("a1", "w", 25, count=3)
    h.starve()
    h.preempt_round(5.0)
    h.starve()
    h.preempt_round(6.0)
    (first,) = victims_of(h, "svc")
    lost_node = h.alloc(first).node
    h.tick(10.0)  # within the grace
    h.feed(f.NodeRemoved(node=lost_node))
    assert h.cache.state.apps["svc"].disrupted == 0
    h.starve(2)
    h.preempt_round(11.0)
    second = [v for v in victims_of(h, "svc") if v != first]
    assert len(second) == 1 and under_notice(h, "svc") == 1
    assert h.alloc(second[0]).node != lost_node
    assert not h.model.violations and not consistency_problems(h.cache.state)


def test_a_rebuilt_state_keeps_every_apps_limits_and_its_containers_under_notice() -> None:
    h = PreemptHarness(two_queues(50, 50))
    h.nodes("n1")
    h.feed(f.AppAdded(app="svc", queue="root.b", max_disruption=2, allow_preemption=False))
    h.fill("svc", "root.b", "n1", [25, 25, 25, 25])
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="w", resource={"memory": 25}, preemption_policy="never"))
    h.ask("a1", "v", 25)
    h.starve()
    h.preempt_round()
    state = h.cache.state
    copy = PartitionState(state.name, state.config)
    copy.apply_all(state_changes(state))
    app = copy.apps["svc"]
    assert (app.max_disruption, app.allow_preemption, app.disrupted) == (2, False, 1)
    assert set(copy.guarded) == {"svc"}
    assert copy.apps["a1"].asks["w"].never_preempts and not copy.apps["a1"].asks["v"].never_preempts
    assert not consistency_problems(copy)


# ---------------------------------------------------------------------- opt-outs, sniper


def test_an_opted_out_app_is_passed_over_while_another_victim_set_exists() -> None:
    h = PreemptHarness(two_queues())
    borrowed(h, allow_preemption=False)
    h.ask("a1", "w", 50)
    h.starve()
    h.preempt_round()
    assert not victims_of(h, "svc") and len(victims_of(h, "etl")) == 2


def test_an_opted_out_app_is_preempted_when_it_is_the_only_victim_set() -> None:
    h = PreemptHarness(two_queues(50, 50))
    h.nodes("n1")
    h.feed(f.AppAdded(app="svc", queue="root.b", allow_preemption=False))
    h.fill("svc", "root.b", "n1", [25, 25, 25, 25])
    h.app("a1", "root.a")
    h.ask("a1", "w", 50)
    h.starve()
    h.preempt_round()
    assert len(victims_of(h, "svc")) == 2


def test_opted_out_tasks_go_before_application_masters() -> None:
    h = PreemptHarness(two_queues(50, 50))
    h.nodes("n1")
    h.feed(f.AppAdded(app="svc", queue="root.b", allow_preemption=False), f.AppAdded(app="job", queue="root.b"))
    h.run("job", 50, "n1", at=1.0, am=True)
    h.run("svc", 50, "n1", at=0.0)
    h.app("a1", "root.a")
    h.ask("a1", "w", 50)
    h.starve()
    h.preempt_round()
    assert victims_of(h, "svc") and not victims_of(h, "job")


# ---------------------------------------------------------------------- asks that never preempt


def test_an_ask_that_never_preempts_waits_for_free_room() -> None:
    for policy in ("sniper", "proportional"):
        h = PreemptHarness(two_queues(50, 50, policy=policy))
        h.nodes("n1")
        h.fill("b1", "root.b", "n1", [25, 25, 25, 25])
        h.app("a1", "root.a")
        h.feed(f.AskAdded(app="a1", ask="w", resource={"memory": 25}, preemption_policy="never"))
        h.starve()
        for t in (5.0, 6.0, 30.0):
            h.preempt_round(t)
        assert not h.preempts(), policy
        h.release(sorted(h.cache.state.apps["b1"].allocations)[0])
        h.settle()
        assert ("w", "n1") in h.placements(), policy


def test_the_cache_refuses_a_never_preempting_beneficiary() -> None:
    h = PreemptHarness(two_queues(50, 50))
    h.nodes("n1")
    b = h.fill("b1", "root.b", "n1", [25, 25, 25, 25])
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="w", resource={"memory": 25}, preemption_policy="never"))
    outcome, _ = h.commit(proposal("a1", "w", "n1", b[:1]))
    assert outcome.accepted == 0
    assert list(outcome.rejected.values()) == ["beneficiary ask never preempts (preemption_policy never)"]


def test_an_ask_that_never_preempts_evicts_no_opportunistic_container() -> None:
    h = PreemptHarness(two_queues(50, 50))
    h.nodes("n1")
    h.app("o", "root.b")
    h.feed(f.AskAdded(app="o", ask="spare", resource={"memory": 100}, execution_type="opportunistic"))
    h.settle()
    assert h.cache.state.nodes["n1"].opportunistic
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="w", resource={"memory": 50}, preemption_policy="never"))
    h.settle()
    assert not [x for x in h.decisions if isinstance(x, d.Kill)]
    h.feed(f.AskAdded(app="a1", ask="v", resource={"memory": 50}))
    h.settle()
    assert [x.reason for x in h.decisions if isinstance(x, d.Kill)] == ["opportunistic"]


# ---------------------------------------------------------------------- intra-queue, proportional, contracts


def test_intra_queue_preemption_keeps_the_budget() -> None:
    raw = preemption_raw(queue("a", guaranteed={"memory": 100}), intra_queue=True)
    h = PreemptHarness(raw, policy="intra_queue")
    h.nodes("n1")
    h.feed(f.AppAdded(app="low", queue="root.a", max_disruption=1))
    h.fill("low", "root.a", "n1", [25, 25, 25, 25])
    h.feed(f.AppAdded(app="high", queue="root.a"))
    h.feed(f.AskAdded(app="high", ask="w", resource={"memory": 25}, count=3, priority=10))
    h.starve()
    h.preempt_round(5.0)
    h.starve()
    h.preempt_round(6.0)
    assert len(victims_of(h, "low")) == 1 and h.policy.budget_refusals >= 1
    assert not h.model.violations and not consistency_problems(h.cache.state)


def proportional_borrowed(max_disruption: int | None = None, allow_preemption: bool = True) -> PreemptHarness:
    """b holds all of n1..n4 with etl (submitted first) and svc (submitted last, so YARN's selection
    visits it first); a, guaranteed half, asks for half."""
    h = PreemptHarness(two_queues(200, 200, policy="proportional", natural_termination_factor=1.0))
    h.nodes("n1", "n2", "n3", "n4")
    svc = f.AppAdded(app="svc", queue="root.b", max_disruption=max_disruption, allow_preemption=allow_preemption)
    h.feed(f.AppAdded(app="etl", queue="root.b"), svc)
    for i, node in enumerate(("n1", "n2")):
        h.fill("etl", "root.b", node, [25, 25, 25, 25], start=4 * i)
    for i, node in enumerate(("n3", "n4")):
        h.fill("svc", "root.b", node, [25, 25, 25, 25], start=10 + 4 * i)
    h.app("a1", "root.a")
    h.ask("a1", "w", 25, count=8)
    return h


def test_the_proportional_baseline_skips_containers_past_their_apps_budget() -> None:
    free = proportional_borrowed()
    free.preempt_round(5.0)
    assert len(victims_of(free, "svc")) > 2, "the budget test needs svc to be chosen first"
    h = proportional_borrowed(max_disruption=2)
    h.preempt_round(5.0)
    assert len(victims_of(h, "svc")) == 2
    assert len(victims_of(h, "etl")) == len(victims_of(free, "svc")) + len(victims_of(free, "etl")) - 2
    assert h.policy.budget_refusals > 0
    assert not h.model.violations and not consistency_problems(h.cache.state)


def test_the_proportional_baseline_takes_opted_out_containers_last() -> None:
    h = proportional_borrowed(allow_preemption=False)
    h.preempt_round(5.0)
    assert not victims_of(h, "svc") and victims_of(h, "etl")


def test_the_cache_refuses_proportional_victims_past_a_budget() -> None:
    h = proportional_borrowed(max_disruption=1)
    svc = sorted(h.cache.state.apps["svc"].allocations)[:2]
    out = p.PreemptionProposal(partition=PARTITION, id="test/shotgun", view_seq=0, policy="proportional", victims=svc)
    outcome, _ = h.commit(out)
    assert outcome.accepted == 1
    assert "disruption budget is used up" in outcome.rejected[svc[1]]


def test_a_preemption_request_names_no_more_containers_than_the_budget_allows() -> None:
    h = PreemptHarness(two_queues(50, 50, grace=10.0))
    h.nodes("n1")
    h.feed(f.AppAdded(app="svc", queue="root.b", max_disruption=1, preemption_contract=True))
    h.fill("svc", "root.b", "n1", [25, 25, 25, 25])
    h.app("a1", "root.a")
    h.ask("a1", "w", 50)
    h.starve()
    h.preempt_round(5.0)
    assert not [x for x in h.decisions if isinstance(x, d.PreemptRequest)]
    h.ask("a1", "v", 25)
    h.starve()
    h.preempt_round(6.0)
    (request,) = [x for x in h.decisions if isinstance(x, d.PreemptRequest)]
    assert len(request.containers) == 1
    h.tick(20.0)  # the deadline passes: what is missing is killed, within the budget
    assert under_notice(h, "svc") <= 1
    assert not h.model.violations and not consistency_problems(h.cache.state)


# ---------------------------------------------------------------------- the independent checker


def test_the_checker_finds_an_app_over_its_budget_and_a_never_preempting_beneficiary() -> None:
    model = ClusterModel(PARTITION)
    model.on_event(f.NodeAdded(node="n1", capacity={"memory": 100}))
    model.on_event(f.AppAdded(app="svc", queue="root.b", max_disruption=1))
    model.on_event(f.AppAdded(app="a1", queue="root.a"))
    model.on_event(f.AskAdded(app="a1", ask="w", resource={"memory": 50}, preemption_policy="never"))
    seq = 0
    for aid in ("alloc-1", "alloc-2"):
        seq += 1
        model.on_decision(
            d.Allocated(seq=seq, allocation=aid, app="svc", ask="t", queue="root.b", node="n1", resource={"memory": 25})
        )
    for aid in ("alloc-1", "alloc-2"):
        seq += 1
        model.on_decision(
            d.Preempt(
                seq=seq,
                allocation=aid,
                app="svc",
                queue="root.b",
                node="n1",
                resource={"memory": 25},
                for_ask="w",
                for_app="a1",
                for_queue="root.a",
                deadline=15.0,
                reservation="",
                policy="sniper",
            )
        )
    reasons = [v.reason for v in model.violations if v.invariant == 11]
    assert any("over its budget 1" in r for r in reasons)
    assert any("which never preempts" in r for r in reasons)


# ---------------------------------------------------------------------- the bundled scenario


def peak_under_notice(decisions: list[d.DecisionMsg]) -> Counter[str]:
    """Each app's most containers under notice at once, recounted from the decisions alone."""
    now: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    alive: dict[str, str] = {}
    for x in decisions:
        if isinstance(x, d.Preempt) and not x.observe_only and not x.opportunistic and x.allocation not in alive:
            alive[x.allocation] = x.app
            now[x.app] += 1
            peak[x.app] = max(peak[x.app], now[x.app])
        elif isinstance(x, d.Released | d.AllocationLost | d.PreemptCancelled) and x.allocation in alive:
            now[alive.pop(x.allocation)] -= 1
    return peak


@pytest.mark.parametrize("policy", ["sniper", "proportional", "none"])
def test_the_budgets_scenario_keeps_every_apps_limits(policy: str) -> None:
    sc = scenario("budgets")
    result = run_simulation(sc.events, sc.config, SimulationSettings(policy=policy))
    assert result.report["invariant_violations"] == 0, result.report["violations"]
    preempts = [x for x in result.decisions if isinstance(x, d.Preempt) and not x.observe_only]
    victims = Counter(x.app for x in preempts)
    assert peak_under_notice(result.decisions)["batch-svc"] <= 2
    assert victims["batch-db"] == 0  # opted out, and other victims were always there
    assert not [x for x in preempts if x.for_app == "prod-backfill"]
    if policy == "none":
        assert not preempts and result.report["budget_refusals"] == 0
    else:
        assert victims["batch-svc"] > 0 and result.report["budget_refusals"] > 0


def test_an_answer_names_the_asks_it_could_not_help_but_never_a_never_preempting_one() -> None:
    h = PreemptHarness(two_queues(50, 50))
    h.nodes("n1")
    h.fill("b1", "root.b", "n1", [25, 25, 25, 25])
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="w", resource={"memory": 25}, preemption_policy="never"))
    h.starve(3)
    request = h.policy.round(h.allocator.state, h.allocator.view_seq, 5.0)
    assert request is None or (
        isinstance(request, p.PlacementRequest) and not answer_placement_request(h.allocator, request).placements
    )


def test_the_cache_counts_a_gangs_earlier_members_against_a_budget_without_touching_the_app() -> None:
    """Two members, one victim each from an app with a budget of one: the second breaks it."""
    h = PreemptHarness(two_queues(100, 100))
    h.nodes("n1", "n2")
    h.feed(f.AppAdded(app="svc", queue="root.b", max_disruption=1))
    first = h.fill("svc", "root.b", "n1", [50, 50])
    second = h.fill("svc", "root.b", "n2", [50, 50], start=2)
    h.app("g", "root.a")
    h.feed(f.AskAdded(app="g", ask="pair", resource={"memory": 50}, count=2, gang_min=2))
    pair = [p.Victimized("g", "pair", "n1", first[:1]), p.Victimized("g", "pair", "n2", second[:1])]
    outcome, decisions = h.commit(p.PreemptionProposal(id="t/b", view_seq=0, policy="sniper", placements=pair))
    assert outcome.accepted == 0 and not [x for x in decisions if isinstance(x, d.Preempt)]
    assert (
        list(outcome.rejected.values())
        == ["gang member 2 of 2: app svc's disruption budget is used up (max_disruption 1, 1 under notice)"] * 2
    )
    assert h.cache.state.apps["svc"].disrupted == 0
