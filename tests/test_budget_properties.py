"""Properties of apps' own limits on preemption (architecture: invariant 11) on random small clusters,
through the real actors in virtual time: disruption budgets, preemption opt-outs and never-preempting
asks mixed with gangs, placement constraints (beside tags the borrowers carry), preemption contracts,
opportunistic containers, priorities and intra-queue preemption, under sniper and the proportional
baseline. The independent checker finds no violation, and a recount from the decisions alone finds no
app over its budget and no never-preempting beneficiary.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core.config import SchedulerConfig, parse_config
from sniper.core.opportunistic import KILL_REASON
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation
from tests.core_support import quantities

GiB = 1024
NODE = {"memory": 64 * GiB, "vcore": 16_000}
UNTIL = 150.0

Trace = tuple[SchedulerConfig, list[f.Feed], dict[str, int], set[tuple[str, str]]]
C = f.PlacementConstraint
# What a job's ask may require of its node, beside the apps that opted out: nothing, to avoid the
# borrowers' tagged containers (which may be the only victims elsewhere), or one replica per node.
CONSTRAINTS: list[tuple[C, ...]] = [
    (),
    (),
    (C(op="not_in", tags=["noisy"]),),
    (C(op="not_in", tags=["db"]),),
    (C(op="cardinality", tags=["job"], max=1, namespace="self"),),
]


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    n_nodes = draw(st.integers(2, 4))
    cap = {k: v * n_nodes for k, v in NODE.items()}
    half = quantities({k: v // 2 for k, v in cap.items()})
    preemption = {
        "policy": "sniper",
        "interval": 1.0,
        "grace": 10.0,
        "total_preemption_per_round": draw(st.sampled_from([0.1, 0.5, 1.0])),
        "mask_ttl": 30.0,
        "reservation_timeout": 30.0,
        "intra_queue": draw(st.booleans()),
    }
    queues = [
        {"name": "batch", "resources": {"guaranteed": half}},
        {"name": "prod", "resources": {"guaranteed": half}},
    ]
    raw = {
        "partitions": [{"name": "default", "preemption": preemption, "queues": [{"name": "root", "queues": queues}]}]
    }
    events: list[f.Feed] = [f.NodeAdded(node=f"n{i}", capacity=NODE) for i in range(n_nodes)]
    budgets: dict[str, int] = {}
    never: set[tuple[str, str]] = set()
    # batch borrows the cluster with apps that limit their own preemption, some of them
    for k in range(draw(st.integers(1, 3))):
        app = f"b{k}"
        budget = draw(st.sampled_from([None, 0, 1, 2, 4]))
        if budget is not None:
            budgets[app] = budget
        events.append(
            f.AppAdded(
                app=app,
                queue="root.batch",
                max_disruption=budget,
                allow_preemption=draw(st.booleans()),
                preemption_contract=draw(st.integers(0, 3)) == 0,
            )
        )
        events.append(
            f.AskAdded(
                app=app,
                ask="task",
                resource={"memory": draw(st.sampled_from([4, 8, 16])) * GiB, "vcore": 500},
                count=n_nodes * draw(st.integers(4, 10)),
                priority=draw(st.sampled_from([0, 0, 3])),
                duration=float(draw(st.integers(60, 300))),
                execution_type="opportunistic" if draw(st.integers(0, 5)) == 0 else "guaranteed",
                tags=draw(st.sampled_from([(), ("noisy",), ("db",)])),
            )
        )
    # then jobs arrive in both queues: gangs, priorities, asks that never preempt
    for j in range(draw(st.integers(2, 5))):
        t = float(draw(st.integers(5, 60)))
        app = f"j{j}"
        events.append(f.AppAdded(t=t, app=app, queue=draw(st.sampled_from(["root.prod", "root.prod", "root.batch"]))))
        count = draw(st.integers(1, 12))
        policy = draw(st.sampled_from(["preempt_lower_priority", "preempt_lower_priority", "never"]))
        if policy == "never":
            never.add((app, "task"))
        events.append(
            f.AskAdded(
                t=t,
                app=app,
                ask="task",
                resource={"memory": draw(st.sampled_from([4, 8, 16, 30])) * GiB, "vcore": 1000},
                count=count,
                priority=draw(st.sampled_from([0, 5])),
                duration=float(draw(st.integers(20, 150))),
                gang_min=draw(st.sampled_from([0, 0, min(count, 2), min(count, 3)])),
                preemption_policy=policy,
                tags=("job",),
                constraints=draw(st.sampled_from(CONSTRAINTS)),
            )
        )
    if draw(st.booleans()):
        node = f"n{draw(st.integers(0, n_nodes - 1))}"
        events.append(f.NodeRemoved(t=float(draw(st.integers(10, 100))), node=node))
    events.sort(key=lambda e: e.t)
    return parse_config(raw), events, budgets, never


def recount(decisions: list[d.DecisionMsg]) -> tuple[Counter[str], list[str]]:
    """From the decisions alone: each app's most guaranteed containers under notice at once (a notice, a
    preemption request naming it or a kill, until it is released, lost or its notice cancelled), and the
    beneficiaries named."""
    now: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    alive: dict[str, str] = {}
    beneficiaries: list[str] = []

    def notice(aid: str, app: str) -> None:
        if aid not in alive:
            alive[aid] = app
            now[app] += 1
            peak[app] = max(peak[app], now[app])

    for x in decisions:
        if isinstance(x, d.Preempt) and not x.observe_only:
            beneficiaries.append(f"{x.for_app}/{x.for_ask}")
            if not x.opportunistic:
                notice(x.allocation, x.app)
        elif isinstance(x, d.PreemptRequest) and not x.observe_only:
            for c in x.containers:
                beneficiaries.append(f"{c.for_app}/{c.for_ask}")
                notice(c.allocation, x.app)
        elif isinstance(x, d.Kill) and x.reason != KILL_REASON:
            notice(x.allocation, x.app)
        elif isinstance(x, d.Released | d.AllocationLost | d.PreemptCancelled) and x.allocation in alive:
            now[alive.pop(x.allocation)] -= 1
    return peak, beneficiaries


def simulate(trace: Trace, policy: str) -> SimulationResult:
    config, events, _, _ = trace
    return run_simulation(events, config, SimulationSettings(until=UNTIL, policy=policy))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=traces())
def test_no_policy_takes_an_app_past_its_budget_or_preempts_for_an_ask_that_never_preempts(trace: Trace) -> None:
    _, _, budgets, never = trace
    for policy in ("sniper", "proportional"):
        result = simulate(trace, policy)
        report: dict[str, Any] = result.report
        assert report["invariant_violations"] == 0, (policy, report["violations"])
        peak, beneficiaries = recount(result.decisions)
        for app, budget in budgets.items():
            assert peak[app] <= budget, (policy, app, peak[app], budget)
        assert not {f"{a}/{k}" for a, k in never} & set(beneficiaries), policy
