"""Properties of preemption on random small clusters, through the real actors in virtual time.

Random queue trees (guarantees, business priorities, fences, disabled queues, two levels), a few nodes,
a queue that borrows the whole cluster first, jobs of random sizes arriving later (AMs, priorities,
apps withdrawn), and node churn. Under sniper and under the proportional baseline, the simulator's
independent checker (invariants 1-6) never finds a violation; sniper wastes a preemption only when its
node or its beneficiary went away, and the same trace gives the same decisions.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core.config import SchedulerConfig, parse_config
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation
from tests.core_support import quantities

GiB = 1024
NODE = {"memory": 64 * GiB, "vcore": 16_000}
UNTIL = 150.0

Trace = tuple[SchedulerConfig, list[f.Feed]]


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    n_nodes = draw(st.integers(2, 4))
    cap = {k: v * n_nodes for k, v in NODE.items()}
    weights = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    queues: list[dict[str, Any]] = []
    leaves: list[str] = []
    for i, w in enumerate(weights):
        g = {k: v * w // sum(weights) for k, v in cap.items()}
        q: dict[str, Any] = {
            "name": f"q{i}",
            "resources": {"guaranteed": quantities(g)},
            "properties": {
                "priority.offset": str(draw(st.sampled_from([0, 0, 5]))),
                "preemption.policy": draw(st.sampled_from(["default", "default", "fence", "disabled"])),
            },
        }
        if draw(st.booleans()):
            half = {k: v // 2 for k, v in g.items()}
            q["queues"] = [
                {
                    "name": "x",
                    "resources": {"guaranteed": quantities(half)},
                    "properties": {"priority.offset": str(draw(st.sampled_from([0, 3])))},
                },
                {"name": "y", "resources": {"guaranteed": quantities(half)}},
            ]
            leaves += [f"root.q{i}.x", f"root.q{i}.y"]
        else:
            leaves.append(f"root.q{i}")
        queues.append(q)
    preemption = {
        "policy": "sniper",
        "interval": 1.0,
        "grace": 10.0,
        "total_preemption_per_round": draw(st.sampled_from([0.1, 0.5, 1.0])),
        "mask_ttl": 30.0,
        "reservation_timeout": 30.0,
    }
    raw = {
        "partitions": [{"name": "default", "preemption": preemption, "queues": [{"name": "root", "queues": queues}]}]
    }
    events: list[f.Feed] = [f.NodeAdded(node=f"n{i}", capacity=NODE) for i in range(n_nodes)]
    # one queue borrows the whole cluster first
    hog = draw(st.sampled_from(leaves))
    events.append(f.AppAdded(app="hog", queue=hog))
    events.append(
        f.AskAdded(
            app="hog",
            ask="task",
            resource={"memory": draw(st.sampled_from([4, 8])) * GiB, "vcore": 500},
            count=n_nodes * 24,
            duration=float(draw(st.integers(100, 300))),
        )
    )
    others = [x for x in leaves if x != hog] or leaves
    for j in range(draw(st.integers(2, 6))):
        t = float(draw(st.integers(5, 60)))
        app = f"j{j}"
        events.append(
            f.AppAdded(t=t, app=app, queue=draw(st.sampled_from(others)), priority=draw(st.sampled_from([0, 5])))
        )
        if draw(st.booleans()):
            events.append(
                f.AskAdded(
                    t=t,
                    app=app,
                    ask="am",
                    resource={"memory": 2 * GiB, "vcore": 1000},
                    am=True,
                    duration=float(draw(st.integers(40, 150))),
                )
            )
        events.append(
            f.AskAdded(
                t=t,
                app=app,
                ask="task",
                resource={
                    "memory": draw(st.sampled_from([2, 4, 8, 16, 30, 48])) * GiB,
                    "vcore": draw(st.sampled_from([500, 1000, 2000])),
                },
                count=draw(st.integers(1, 24)),
                priority=draw(st.sampled_from([0, 0, 5])),
                duration=float(draw(st.integers(20, 150))),
            )
        )
        if draw(st.integers(0, 5)) == 0:
            events.append(f.AppRemoved(t=t + draw(st.integers(10, 80)), app=app))
    if draw(st.booleans()):
        node = f"n{draw(st.integers(0, n_nodes - 1))}"
        t = float(draw(st.integers(10, 100)))
        events.append(f.NodeRemoved(t=t, node=node))
        if draw(st.booleans()):
            events.append(f.NodeAdded(t=t + draw(st.integers(5, 40)), node=node, capacity=NODE))
    events.sort(key=lambda e: e.t)
    return parse_config(raw), events


def simulate(trace: Trace, policy: str) -> SimulationResult:
    config, events = trace
    return run_simulation(events, config, SimulationSettings(until=UNTIL, policy=policy))


def excused(result: SimulationResult) -> int:
    """Victims whose room could not go to their beneficiary for a reason outside sniper: the node was
    lost, or the reservation ended because its ask or node went away (not because it timed out)."""
    ended = {
        x.reservation for x in result.decisions if isinstance(x, d.ReservationEnded) and "timed out" not in x.reason
    }
    lost = {x.allocation for x in result.decisions if isinstance(x, d.AllocationLost)}
    return sum(
        1
        for x in result.decisions
        if isinstance(x, d.Preempt) and not x.observe_only and (x.reservation in ended or x.allocation in lost)
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=traces())
def test_no_policy_breaks_an_invariant_and_sniper_wastes_nothing_it_could_keep(trace: Trace) -> None:
    sniper = simulate(trace, "sniper")
    proportional = simulate(trace, "proportional")
    for name, result in (("sniper", sniper), ("proportional", proportional)):
        report = result.report
        assert report["invariant_violations"] == 0, (name, report["violations"])
        assert result.violations == 0
    report = sniper.report
    assert report["wasted_preemptions"] <= excused(sniper), report["preemption_log"][:5]
    assert report["ping_pong"] == 0
    # every sniper victim names its beneficiary and a reservation on its own node
    for x in sniper.decisions:
        if isinstance(x, d.Preempt):
            assert x.policy == "sniper" and x.for_queue and x.reservation
            assert x.for_queue != x.queue


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=traces())
def test_the_same_trace_gives_the_same_decisions(trace: Trace) -> None:
    def fingerprint(result: SimulationResult) -> list[tuple[Any, ...]]:
        return [(type(x).__name__, x.t, getattr(x, "allocation", ""), getattr(x, "node", "")) for x in result.decisions]

    assert fingerprint(simulate(trace, "sniper")) == fingerprint(simulate(trace, "sniper"))
