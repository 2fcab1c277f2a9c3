"""A 300-node mixed workload with churn under every policy: gangs (some that must spread, many that fit
partly in free room and partly only with victims), placement constraints, disruption budgets and
opt-outs, node reservations for large containers, and nodes lost and back. Every invariant the
simulator's checker knows holds under sniper, proportional and none."""

from __future__ import annotations

import random

import pytest

from sniper.core.config import SchedulerConfig, parse_config
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.run import SimulationSettings, run_simulation
from tests.core_support import queue
from tests.preemption_support import preemption_raw

NODES = 300
CAPACITY = {"memory": 64, "vcore": 16}
C = f.PlacementConstraint


def config(policy: str) -> SchedulerConfig:
    total = NODES * CAPACITY["memory"]
    leaves = [
        queue("prod", guaranteed={"memory": total * 5 // 10}),
        queue("dev", guaranteed={"memory": total * 3 // 10}),
        queue("batch", guaranteed={"memory": total // 10}),
    ]
    raw = preemption_raw(*leaves, policy=policy, total_preemption_per_round=0.1)
    raw["reservation"] = {"enabled": True, "timeout": 60.0}
    return parse_config({"partitions": [raw]})


def workload(seed: int, apps: int, horizon: float) -> list[f.Feed]:
    """``apps`` apps of one ask each arriving over ``horizon`` seconds on racks of ten nodes."""
    rng = random.Random(seed)
    events: list[f.Feed] = [
        f.NodeAdded(t=0, node=f"n{i:03d}", capacity=CAPACITY, labels={"rack": f"r{i // 10}"}) for i in range(NODES)
    ]
    for k in range(apps):
        t = round(rng.uniform(0, horizon), 1)
        app = f"app{k}"
        queue_path = rng.choice(["root.prod", "root.dev", "root.batch"])
        guard = rng.random()
        limits = {"max_disruption": 1} if guard < 0.1 else {"allow_preemption": False} if guard < 0.15 else {}
        events.append(f.AppAdded(t=t, app=app, queue=queue_path, **limits))
        kind = rng.random()
        duration = rng.uniform(60, 300)
        if kind < 0.3:  # a gang, a third of them spread one member per node
            k_min = rng.randint(2, 6)
            spread = rng.random() < 0.33
            events.append(
                f.AskAdded(
                    t=t,
                    app=app,
                    ask="g",
                    resource={"memory": rng.choice([16, 24, 32, 40]), "vcore": 4},
                    count=k_min + rng.randint(0, 2),
                    gang_min=k_min,
                    duration=duration,
                    tags=("g",) if spread else (),
                    constraints=(C(op="not_in", tags=["g"]),) if spread else (),
                )
            )
        elif kind < 0.4:  # large containers: node reservations when small ones overtake them
            events.append(
                f.AskAdded(t=t, app=app, ask="big", resource={"memory": 56, "vcore": 8}, count=1, duration=duration)
            )
        elif kind < 0.55:  # a replicated service, at most two replicas a rack
            events.append(
                f.AskAdded(
                    t=t,
                    app=app,
                    ask="svc",
                    resource={"memory": 8, "vcore": 2},
                    count=rng.randint(2, 8),
                    duration=duration,
                    tags=("svc",),
                    constraints=(C(scope="rack", op="cardinality", tags=["svc"], max=2),),
                )
            )
        else:
            events.append(
                f.AskAdded(
                    t=t,
                    app=app,
                    ask="w",
                    resource={"memory": rng.choice([4, 8, 16]), "vcore": 2},
                    count=rng.randint(1, 24),
                    duration=duration,
                )
            )
    for _ in range(NODES // 10):
        t = round(rng.uniform(horizon * 0.2, horizon), 1)
        name = f"n{rng.randrange(NODES):03d}"
        events.append(f.NodeRemoved(t=t, node=name))
        rack = f"r{int(name[1:]) // 10}"
        events.append(f.NodeAdded(t=t + rng.uniform(10, 60), node=name, capacity=CAPACITY, labels={"rack": rack}))
    events.sort(key=lambda e: e.t)
    return events


@pytest.mark.parametrize("policy", ["sniper", "proportional", "none"])
def test_a_300_node_mixed_workload_with_churn_keeps_every_invariant(policy: str) -> None:
    events = workload(seed=1, apps=450, horizon=240)
    result = run_simulation(events, config(policy), SimulationSettings(until=320, policy=policy))
    assert result.report["invariant_violations"] == 0, result.report["violations"][:5]
    gangs = {x.app for x in result.decisions if isinstance(x, d.Allocated) and x.ask == "g"}
    reserved = [x for x in result.decisions if isinstance(x, d.NodeReserved)]
    assert len(gangs) > 50 and reserved  # the workload exercises gangs and node reservations
    if policy != "none":
        assert [x for x in result.decisions if isinstance(x, d.Preempt)]
