"""Soft opt-outs (``app_added.allow_preemption: false``, YuniKorn's ``allow-preemption: false``): an app
that opted out is a victim only when no set without it exists, judged by every rule a real placement
checks (room, constraints, node selectors, reservations, budgets) and by how far the other queues may
still give: down to their guarantees, not only to their ideal share. Under sniper, the proportional
baseline and intra-queue preemption.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import consistency_problems, queue
from tests.preemption_support import PreemptHarness, preemption_raw, proposal, two_queues
from tests.yunikorn.harness import Ask, Case, Outcome, Running, YkResource, q, run

Q1, Q2, Q3 = "root.rt.queue-1", "root.rt.queue-2", "root.rt.queue-3"

# One pod of each shape: a single resource, memory with cores, and GPUs with memory and cores.
SHAPES: dict[str, YkResource] = {
    "one_resource": {"first": 1},
    "memory_and_vcore": {"first": 2, "vcores": 1},
    "gpu": {"first": 4, "vcores": 2, "gpu": 1},
}


def times(pod: YkResource, n: int) -> YkResource:
    return {k: v * n for k, v in pod.items()}


def guide_case(
    pod: YkResource,
    policy: str = "sniper",
    opted_out: frozenset[str] = frozenset({"app-2"}),
    q1_offset: str = "0",
) -> Case:
    """YuniKorn's user guide, PriorityClass section: ``rt`` (max 16 pods) holds queue-1 and queue-2 with
    8 pods each (queue-2's opted out); queue-3 (guarantee 3) asks for 8. Every queue: max 8, guarantee 3;
    queue-1's ``priority.offset`` is ``q1_offset``."""
    leaves = (
        q(
            name,
            maximum=times(pod, 8),
            guaranteed=times(pod, 3),
            priority_offset=q1_offset if name == "queue-1" else "0",
        )
        for name in ("queue-1", "queue-2", "queue-3")
    )
    root = q("root", q("rt", *leaves, maximum=times(pod, 16)))
    running = tuple(Running(f"{app}-{i}", app, pod, "node-1") for app in ("app-1", "app-2") for i in range(8))
    return Case(
        root=root,
        nodes={"node-1": times(pod, 20)},
        apps={"app-1": Q1, "app-2": Q2, "app-3": Q3},
        running=running,
        asks=(Ask("app-3-pods", "app-3", pod, count=8),),
        opted_out=opted_out,
        policy=policy,
    )


def assert_guide_outcome(o: Outcome) -> None:
    assert o.violations == 0, o.result.report["violations"]
    assert dict(o.victim_queues) == {Q1: 3}, sorted(o.victims)
    assert o.placed["app-3-pods"] == 3
    assert o.running == {Q1: 5, Q2: 8, Q3: 3}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("policy", ["sniper", "proportional"])
def test_an_opted_out_queue_keeps_its_pods_while_its_sibling_can_give_down_to_its_guarantee(
    shape: str, policy: str
) -> None:
    assert_guide_outcome(run(guide_case(SHAPES[shape], policy)))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_opted_out_queue_gives_when_its_sibling_outranks_the_beneficiary(shape: str) -> None:
    o = run(guide_case(SHAPES[shape], q1_offset="10"))
    assert o.violations == 0, o.result.report["violations"]
    assert Q1 not in o.victim_queues and o.victim_queues[Q2] > 0, sorted(o.victims)
    assert o.running[Q1] == 8 and o.running[Q3] >= 3


# ---------------------------------------------------------------------- every placement rule judges "could serve"


def quiet_beside_noisy(rule: Sequence[f.PlacementConstraint], etl_budget: int | None = None) -> PreemptHarness:
    """n1: b's database (opted out) fills it; n2: a's own noisy container beside b's etl tasks (with
    ``etl_budget`` as its disruption budget). a then asks for 50 with ``rule``: with ``not_in noisy`` only
    n1 can hold it."""
    h = PreemptHarness(two_queues(100, 50))
    h.nodes("n1", "n2")
    db = f.AppAdded(app="db", queue="root.b", allow_preemption=False)
    h.feed(db, f.AppAdded(app="etl", queue="root.b", max_disruption=etl_budget))
    h.fill("db", "root.b", "n1", [25, 25, 25, 25])
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="noisy", resource={"memory": 25}, tags=("noisy",)))
    h.cache.allocate("a1", "noisy", "n2")
    h.pump()
    h.fill("etl", "root.b", "n2", [25, 25, 25])
    h.feed(f.AskAdded(app="a1", ask="quiet", resource={"memory": 50}, constraints=tuple(rule)))
    h.starve(2)
    return h


def victims_of(h: PreemptHarness, app: str) -> list[str]:
    return [x.allocation for x in h.preempts() if x.app == app and not x.observe_only]


def test_an_opted_out_app_is_taken_when_the_asks_constraint_rules_out_every_other_victim() -> None:
    control = quiet_beside_noisy([])
    control.preempt_round(10.0)
    assert len(victims_of(control, "etl")) == 2 and not victims_of(control, "db"), "etl serves without the rule"
    h = quiet_beside_noisy([f.PlacementConstraint(op="not_in", tags=["noisy"])])
    h.preempt_round(10.0)
    assert not victims_of(h, "etl")
    assert len(victims_of(h, "db")) == 2
    assert {x.node for x in h.preempts()} == {"n1"}
    assert not h.model.violations and not consistency_problems(h.cache.state)


def test_an_opted_out_app_is_taken_when_the_other_victims_budget_is_used_up() -> None:
    h = quiet_beside_noisy([], etl_budget=0)
    h.preempt_round(10.0)
    assert not victims_of(h, "etl")
    assert len(victims_of(h, "db")) == 2
    assert not h.model.violations and not consistency_problems(h.cache.state)


def shared_case(policy: str, *, q1_pods: int, q2_pods: int, opted_out: frozenset[str]) -> Case:
    """``rt`` (max 16 pods): queue-1 and queue-2 without guarantees hold ``q1_pods`` and ``q2_pods``;
    queue-3 (guarantee 3) asks for 8, so its ideal share is above its guarantee."""
    pod: YkResource = {"first": 1}
    root = q(
        "root",
        q(
            "rt",
            q("queue-1"),
            q("queue-2"),
            q("queue-3", guaranteed=times(pod, 3)),
            maximum=times(pod, 16),
        ),
    )
    running = (
        *(Running(f"app-1-{i}", "app-1", pod, "node-1") for i in range(q1_pods)),
        *(Running(f"app-2-{i}", "app-2", pod, "node-1") for i in range(q2_pods)),
    )
    return Case(
        root=root,
        nodes={"node-1": times(pod, 16)},
        apps={"app-1": Q1, "app-2": Q2, "app-3": Q3},
        running=running,
        asks=(Ask("app-3-pods", "app-3", pod, count=8),),
        opted_out=opted_out,
        policy=policy,
    )


@pytest.mark.parametrize("policy", ["sniper", "proportional"])
def test_a_beneficiary_at_its_guarantee_waits_while_another_queue_could_still_give(policy: str) -> None:
    control = run(shared_case(policy, q1_pods=8, q2_pods=8, opted_out=frozenset()))
    assert control.violations == 0
    assert control.victim_queues[Q2] > 0, "without the opt-out queue-2 gives towards queue-3's ideal share"
    o = run(shared_case(policy, q1_pods=8, q2_pods=8, opted_out=frozenset({"app-2"})))
    assert o.violations == 0, o.result.report["violations"]
    assert Q2 not in o.victim_queues, sorted(o.victims)
    assert o.running[Q2] == 8 and o.running[Q3] >= 3


@pytest.mark.parametrize("policy", ["sniper", "proportional"])
def test_an_opted_out_app_gives_when_no_other_queue_holds_anything_above_its_guarantee(policy: str) -> None:
    o = run(shared_case(policy, q1_pods=0, q2_pods=16, opted_out=frozenset({"app-2"})))
    assert o.violations == 0, o.result.report["violations"]
    assert set(o.victim_queues) == {Q2}
    assert o.running[Q3] >= 3


def intra_case(with_tasks: bool) -> PreemptHarness:
    """One queue: a low-priority app that opted out fills n1 and, ``with_tasks``, another low-priority app
    fills n2 (else there is no n2); a high-priority app asks for room."""
    raw = preemption_raw(queue("a", guaranteed={"memory": 200}), intra_queue=True)
    h = PreemptHarness(raw, policy="intra_queue")
    h.nodes("n1", *(["n2"] if with_tasks else []))
    h.feed(f.AppAdded(app="db", queue="root.a", allow_preemption=False))
    h.fill("db", "root.a", "n1", [25, 25, 25, 25], start=10)
    if with_tasks:
        h.feed(f.AppAdded(app="etl", queue="root.a"))
        h.fill("etl", "root.a", "n2", [25, 25, 25, 25])
    h.feed(f.AppAdded(app="high", queue="root.a"))
    h.feed(f.AskAdded(app="high", ask="w", resource={"memory": 50}, priority=10))
    h.starve(2)
    return h


@pytest.mark.parametrize("with_tasks", [True, False])
def test_intra_queue_preemption_takes_an_opted_out_app_only_when_no_other_app_can_give(with_tasks: bool) -> None:
    h = intra_case(with_tasks)
    h.preempt_round(5.0)
    if with_tasks:
        assert len(victims_of(h, "etl")) == 2 and not victims_of(h, "db")
    else:
        assert victims_of(h, "db")
    assert not h.model.violations and not consistency_problems(h.cache.state)


# ---------------------------------------------------------------------- the cache's commit check


def beyond_b_quota(db_opted_out: bool) -> tuple[PreemptHarness, p.PreemptionProposal]:
    """a (guarantee 50), b (guarantee 50) holding n1 in four 25s, c (guarantee 100) holding n2 with its db
    (opted out or not) and n3 with other work; a asks for two 50s. b may lose one 25 by its quota: a
    set of two of b's goes beyond it and leaves b above its guarantee."""
    h = PreemptHarness(
        preemption_raw(
            queue("a", guaranteed={"memory": 50}),
            queue("b", guaranteed={"memory": 50}),
            queue("c", guaranteed={"memory": 100}),
        )
    )
    h.nodes("n1", "n2", "n3")
    b = h.fill("b1", "root.b", "n1", [25, 25, 25, 25])
    h.feed(f.AppAdded(app="db", queue="root.c", allow_preemption=not db_opted_out))
    h.fill("db", "root.c", "n2", [25, 25, 25, 25])
    h.fill("c1", "root.c", "n3", [100])
    h.app("a1", "root.a")
    h.ask("a1", "w", 50, count=2)
    return h, proposal("a1", "w", "n1", b[:2])


@pytest.mark.parametrize("db_opted_out", [True, False])
def test_the_cache_takes_victims_beyond_a_quota_only_to_spare_an_opted_out_app(db_opted_out: bool) -> None:
    h, out = beyond_b_quota(db_opted_out)
    outcome, decisions = h.commit(out)
    assert outcome.accepted == (1 if db_opted_out else 0), outcome.rejected
    if db_opted_out:
        spared = [x for x in decisions if isinstance(x, d.Preempt) and "sparing an app that opted out" in x.reason]
        assert len(spared) == 1 and spared[0].over_ideal == {}, spared
    else:
        assert "below its guarantee or ideal" in next(iter(outcome.rejected.values()))
    assert not h.model.violations and not consistency_problems(h.cache.state)
