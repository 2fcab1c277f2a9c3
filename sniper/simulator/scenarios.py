"""Bundled scenarios: traces and queue configs generated deterministically from a seed.

Each scenario is a function of the seed only (``random.Random(seed)``, never global randomness), so a
scenario name and a seed name one exact trace. ``sniper scenario NAME --out DIR`` writes it to files.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import msgspec

from sniper.core import resources as res
from sniper.core.config import SchedulerConfig, parse_config
from sniper.messages import feed as f

GiB = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    queues: dict[str, Any]  # the queues.yaml content
    events: list[f.Feed]
    # The queue property the scenario shows, if it shows one: ``sniper compare NAME`` runs each policy on
    # the same trace without it too (:meth:`without_property`).
    shows: str | None = None

    @property
    def config(self) -> SchedulerConfig:
        return parse_config(self.queues)

    def without_property(self) -> Scenario:
        """The same scenario with the property it shows taken out of every queue, in its queues.yaml and in
        the trace's ``partition_config`` events alike (itself when it shows none)."""
        key = self.shows
        if key is None:
            return self
        events = [
            msgspec.structs.replace(e, config=_without(e.config, key)) if isinstance(e, f.PartitionConfigEvent) else e
            for e in self.events
        ]
        return dataclasses.replace(self, queues=_without(self.queues, key), events=events, shows=None)


def _without(raw: Any, key: str) -> Any:
    """``raw`` (a configuration, or any part of one) with the queue property ``key`` removed everywhere."""
    if isinstance(raw, list):
        return [_without(x, key) for x in raw]
    if not isinstance(raw, dict):
        return raw
    out = {k: _without(v, key) for k, v in raw.items()}
    properties = out.get("properties")
    if isinstance(properties, dict) and key in properties:
        out["properties"] = {k: v for k, v in properties.items() if k != key}
    return out


def _queue(
    name: str, guaranteed: dict[str, int] | None = None, maximum: dict[str, int] | None = None, **props: str
) -> dict[str, Any]:
    q: dict[str, Any] = {"name": name}
    resources: dict[str, Any] = {}
    if guaranteed:
        resources["guaranteed"] = res.as_quantities(guaranteed)
    if maximum:
        resources["max"] = res.as_quantities(maximum)
    if resources:
        q["resources"] = resources
    if props:
        q["properties"] = {k.replace("_", "."): v for k, v in props.items()}
    return q


def _partition(
    queues: list[dict[str, Any]],
    preemption: dict[str, Any],
    node_sort: str = "binpacking",
    overcommit: dict[str, Any] | None = None,
) -> dict[str, Any]:
    partition: dict[str, Any] = {
        "name": "default",
        "nodesortpolicy": {"type": node_sort},
        "preemption": preemption,
        "queues": [{"name": "root", "queues": queues}],
    }
    if overcommit is not None:
        partition["overcommit"] = overcommit
    return {"partitions": [partition]}


def _nodes(count: int, memory: int, vcore: int, t: float = 0.0, prefix: str = "n") -> list[f.Feed]:
    return [
        f.NodeAdded(t=t, node=f"{prefix}{i:03d}", capacity={"memory": memory, "vcore": vcore}) for i in range(count)
    ]


def demo(seed: int = 0) -> Scenario:
    """Three teams on 32 nodes over ten minutes: waves of jobs, a bursty batch queue borrowing idle
    capacity, a production queue with priority-sorted apps, and two nodes lost and one added mid-run."""
    rng = random.Random(seed)
    cluster_mem, cluster_cpu = 32 * 64 * GiB, 32 * 16_000
    queues = [
        _queue(
            "prod",
            {"memory": cluster_mem // 2, "vcore": cluster_cpu // 2},
            None,
            application_sort_policy="priority",
            priority_offset="10",
        ),
        _queue(
            "dev",
            {"memory": cluster_mem // 4, "vcore": cluster_cpu // 4},
            {"memory": cluster_mem // 2, "vcore": cluster_cpu // 2},
            application_sort_policy="fair",
        ),
        _queue("batch", {"memory": cluster_mem // 4, "vcore": cluster_cpu // 4}, None, application_sort_policy="fifo"),
    ]
    raw = _partition(queues, dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(32, 64 * GiB, 16_000))
    app_no = 0

    def job(t: float, queue: str, containers: int, mem: int, cpu: int, duration: float, priority: int = 0) -> None:
        nonlocal app_no
        app_no += 1
        app = f"{queue.rsplit('.', 1)[-1]}-{app_no:03d}"
        _job(events, t, app, queue, containers, mem, cpu, duration, am=True, priority=priority)

    # Batch borrows the whole idle cluster early on.
    for k in range(6):
        job(5 + k * 2, "root.batch", rng.randint(80, 140), 4 * GiB, 1000, rng.uniform(60, 140))
    # Production arrives in waves with mixed priorities.
    for wave in range(4):
        for _ in range(rng.randint(2, 4)):
            job(
                60 + wave * 120 + rng.uniform(0, 20),
                "root.prod",
                rng.randint(20, 60),
                8 * GiB,
                2000,
                rng.uniform(40, 90),
                priority=rng.choice([0, 5, 10]),
            )
    # Dev runs many small jobs, capped at its max.
    for k in range(25):
        job(20 + k * 20 + rng.uniform(0, 5), "root.dev", rng.randint(5, 30), 2 * GiB, 500, rng.uniform(20, 60))
    # Node churn: two nodes fail, one new node joins.
    events.append(f.NodeRemoved(t=200, node="n007"))
    events.append(f.NodeRemoved(t=320, node="n019"))
    events.append(f.NodeAdded(t=400, node="n100", capacity={"memory": 128 * GiB, "vcore": 32_000}))
    events.sort(key=lambda e: e.t)
    return Scenario("demo", demo.__doc__ or "", raw, events)


PREEMPTION = {
    "policy": "sniper",
    "interval": 1.0,
    "total_preemption_per_round": 0.1,
    "max_ignored_over_capacity": 0.1,
    "natural_termination_factor": 0.2,
    "grace": 15.0,
    "mask_ttl": 30.0,
    "min_missed_opportunities": 1,
}


def large_containers(seed: int = 0) -> Scenario:
    """The large-container loop (YARN's shotgun fails): on 10 nodes of 64 GiB, queue b borrowed everything with small
    2 GiB containers and keeps asking for more; then queue a (guarantee: half the cluster) asks for four
    60 GiB containers, almost a whole node each. Freed room scattered over nodes never fits them."""
    rng = random.Random(seed)
    nodes = 10
    half = {"memory": nodes * 64 * GiB // 2, "vcore": nodes * 16_000 // 2}
    queues = [_queue("a", half), _queue("b", half)]
    raw = _partition(queues, dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    for k in range(4):
        app = f"b-{k}"
        events.append(f.AppAdded(t=1 + k, app=app, queue="root.b"))
        events.append(
            f.AskAdded(
                t=1 + k,
                app=app,
                ask=f"{app}-task",
                resource={"memory": 2 * GiB, "vcore": 500},
                count=120,
                duration=rng.uniform(400, 600),
            )
        )
    events.append(f.AppAdded(t=60, app="a-big", queue="root.a"))
    events.append(
        f.AskAdded(
            t=60, app="a-big", ask="a-big-task", resource={"memory": 60 * GiB, "vcore": 4000}, count=4, duration=120
        )
    )
    return Scenario("large_containers", large_containers.__doc__ or "", raw, events)


def _job(
    events: list[f.Feed],
    t: float,
    app: str,
    queue: str,
    count: int,
    memory: int,
    vcore: int,
    duration: float,
    *,
    am: bool = False,
    priority: int = 0,
    user: str = "",
) -> None:
    events.append(f.AppAdded(t=t, app=app, queue=queue, priority=priority, user=user))
    if am:
        events.append(
            f.AskAdded(
                t=t,
                app=app,
                ask=f"{app}-am",
                resource={"memory": 2 * GiB, "vcore": 1000},
                am=True,
                duration=duration + 20,
            )
        )
    events.append(
        f.AskAdded(
            t=t,
            app=app,
            ask=f"{app}-task",
            resource={"memory": memory, "vcore": vcore},
            count=count,
            duration=duration,
            priority=priority,
        )
    )


def priority_queues(seed: int = 0) -> Scenario:
    """Business priority: root.low (priority 0) borrows the whole cluster; then root.high
    (priority 10) and root.mid (priority 5) ask for their guarantees. Higher may preempt lower, never the
    reverse: low's later demand never takes anything back from high or mid."""
    rng = random.Random(seed)
    nodes = 16
    cap = {"memory": nodes * 64 * GiB, "vcore": nodes * 16_000}
    share = {k: v * 3 // 10 for k, v in cap.items()}
    mid_share = {k: v * 4 // 10 for k, v in cap.items()}
    queues = [
        _queue("high", share, None, priority_offset="10"),
        _queue("mid", mid_share, None, priority_offset="5"),
        _queue("low", share, None, priority_offset="0"),
    ]
    raw = _partition(queues, dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    for k in range(3):
        _job(events, 1 + k, f"low-{k}", "root.low", 200, 4 * GiB, 1000, rng.uniform(300, 500))
    _job(events, 40, "high-0", "root.high", 70, 4 * GiB, 1000, 200)
    _job(events, 60, "mid-0", "root.mid", 90, 4 * GiB, 1000, 200)
    _job(events, 90, "low-late", "root.low", 100, 4 * GiB, 1000, 100)
    return Scenario("priority_queues", priority_queues.__doc__ or "", raw, events)


def fence(seed: int = 0) -> Scenario:
    """A fenced subtree (YuniKorn's semantics): root.team (fence, half the cluster) holds team.x and
    team.y; root.other and root.ext (a quarter each) are outside. other and team.x each borrowed a quarter
    beyond their guarantees; then team.y asks for its own: it may preempt team.x (inside the fence) but
    never other, an ask inside a fence never preempting outside it. Later ext asks: asks from outside may
    preempt inside a fence by the usual rules, and other is the queue over its ideal."""
    rng = random.Random(seed)
    nodes = 12
    cap = {"memory": nodes * 64 * GiB, "vcore": nodes * 16_000}
    half = {k: v // 2 for k, v in cap.items()}
    quarter = {k: v // 4 for k, v in cap.items()}
    team = {
        "name": "team",
        "resources": {"guaranteed": res.as_quantities(half)},
        "properties": {"preemption.policy": "fence"},
        "queues": [_queue("x", quarter), _queue("y", quarter)],
    }
    raw = _partition([team, _queue("other", quarter), _queue("ext", quarter)], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    _job(events, 1, "other-0", "root.other", 96, 4 * GiB, 1000, rng.uniform(300, 400))
    _job(events, 2, "x-0", "root.team.x", 96, 4 * GiB, 1000, rng.uniform(300, 400))
    _job(events, 50, "y-0", "root.team.y", 40, 4 * GiB, 1000, 120)
    _job(events, 100, "ext-0", "root.ext", 40, 4 * GiB, 1000, 120)
    return Scenario("fence", fence.__doc__ or "", raw, events)


def am_heavy(seed: int = 0) -> Scenario:
    """AM-heavy queues: root.b runs many small apps, each an application master plus two tasks, across the
    whole cluster; root.a then asks for its guarantee in 16 GiB containers. Preempting an AM kills its whole
    app, so AM containers are victims only as a last resort: victims should be tasks."""
    rng = random.Random(seed)
    nodes = 8
    cap = {"memory": nodes * 64 * GiB, "vcore": nodes * 16_000}
    half = {k: v // 2 for k, v in cap.items()}
    raw = _partition([_queue("a", half), _queue("b", half)], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    for k in range(60):
        _job(events, 1 + k * 0.2, f"b-{k:02d}", "root.b", 2, 6 * GiB, 1000, rng.uniform(300, 500), am=True)
    _job(events, 40, "a-0", "root.a", 14, 16 * GiB, 2000, 150, am=True)
    return Scenario("am_heavy", am_heavy.__doc__ or "", raw, events)


def random_mix(seed: int = 0) -> Scenario:
    """Many queues, random work: 3 parents with 4 leaves each, random guarantees, 60 jobs of random sizes
    (some near half a node) arriving over 10 minutes, app priorities, and random node churn."""
    rng = random.Random(seed)
    nodes = 40
    cap = {"memory": nodes * 64 * GiB, "vcore": nodes * 16_000}
    weights = [rng.randint(1, 4) for _ in range(12)]
    total_w = sum(weights)
    parents = []
    leaves: list[str] = []
    for i in range(3):
        kids = []
        parent_g = {k: 0 for k in cap}
        for j in range(4):
            w = weights[i * 4 + j]
            g = {k: v * w // total_w for k, v in cap.items()}
            for k in cap:
                parent_g[k] += g[k]
            kids.append(_queue(f"l{j}", g, None, application_sort_policy=rng.choice(["fifo", "fair", "priority"])))
            leaves.append(f"root.p{i}.l{j}")
        parents.append({"name": f"p{i}", "resources": {"guaranteed": res.as_quantities(parent_g)}, "queues": kids})
    raw = _partition(parents, dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    for n in range(60):
        t = rng.uniform(0, 600)
        big = rng.random() < 0.15
        _job(
            events,
            t,
            f"job-{n:02d}",
            rng.choice(leaves),
            rng.randint(2, 8) if big else rng.randint(10, 120),
            rng.choice([24, 32]) * GiB if big else rng.choice([1, 2, 4, 8]) * GiB,
            rng.choice([2000, 4000]) if big else rng.choice([500, 1000, 2000]),
            rng.uniform(30, 240),
            am=rng.random() < 0.5,
            priority=rng.choice([0, 0, 5]),
        )
    for _ in range(4):
        victim = f"n{rng.randrange(nodes):03d}"
        t = rng.uniform(60, 500)
        events.append(f.NodeRemoved(t=t, node=victim))
        events.append(
            f.NodeAdded(t=t + rng.uniform(20, 90), node=victim, capacity={"memory": 64 * GiB, "vcore": 16_000})
        )
    events.sort(key=lambda e: e.t)
    return Scenario("random_mix", random_mix.__doc__ or "", raw, events)


def fragmented(seed: int = 0) -> Scenario:
    """Fragmentation: queue b runs 6 GiB containers, ten on each 64 GiB node, leaving 4 GiB free on
    every node (a tenth of the cluster, more than queue a asks for in total); then queue a (guarantee:
    half the cluster) asks for 16 GiB containers. The aggregate ideal sees room that no node has."""
    rng = random.Random(seed)
    nodes = 16
    half = {"memory": nodes * 64 * GiB // 2, "vcore": nodes * 16_000 // 2}
    raw = _partition([_queue("a", half), _queue("b", half)], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    _job(events, 1, "b-0", "root.b", nodes * 10, 6 * GiB, 1000, rng.uniform(500, 700))
    _job(events, 30, "a-0", "root.a", 4, 16 * GiB, 2000, 120)
    return Scenario("fragmented", fragmented.__doc__ or "", raw, events)


def user_limits(seed: int = 0) -> Scenario:
    """User limits (YARN's user_limit_factor, YuniKorn's ``limits``): root.shared is one team's queue
    where a heavy user submits far more work than the queue holds and three light users come and go;
    every user may hold at most a quarter of the queue's guarantee and run two apps at a time (a third
    waits, first come first served). root.batch borrowed the idle cluster first. Preemption frees room
    only an ask within its user's limit can take; the heavy user's blocked asks are no demand of the
    queue."""
    rng = random.Random(seed)
    nodes = 16
    half = {"memory": nodes * 64 * GiB // 2, "vcore": nodes * 16_000 // 2}
    shared = _queue("shared", half)
    shared["limits"] = [
        {
            "limit": "a quarter of the queue per user",
            "users": ["*"],
            "maxresources": res.as_quantities({"memory": half["memory"] // 4, "vcore": half["vcore"] // 4}),
            "maxapplications": 2,
        }
    ]
    shared["maxapplications"] = 8
    raw = _partition([shared, _queue("batch", half)], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))

    def job(t: float, app: str, queue: str, user: str, count: int, duration: float) -> None:
        events.append(f.AppAdded(t=t, app=app, queue=queue, user=user))
        events.append(
            f.AskAdded(
                t=t,
                app=app,
                ask=f"{app}-task",
                resource={"memory": 4 * GiB, "vcore": 1000},
                count=count,
                duration=duration,
            )
        )

    for k in range(2):
        job(1 + k, f"batch-{k}", "root.batch", "etl", nodes * 16, rng.uniform(400, 600))
    for k in range(3):  # the heavy user: three big apps, each alone more than the whole queue
        job(20 + k, f"heavy-{k}", "root.shared", "hank", 160, rng.uniform(150, 250))
    for user in ("lou", "liz", "leo"):
        t = rng.uniform(40, 80)
        for k in range(4):
            job(t, f"{user}-{k}", "root.shared", user, rng.randint(10, 24), rng.uniform(60, 120))
            t += rng.uniform(60, 120)
    events.sort(key=lambda e: e.t)
    return Scenario("user_limits", user_limits.__doc__ or "", raw, events)


def gang(seed: int = 0) -> Scenario:
    """Distributed training, all or nothing: on 8 nodes of 64 GiB, queue batch borrowed everything with
    4 GiB containers and keeps asking; queue train (guarantee: 40% of the cluster) runs jobs of four
    28 GiB workers that only start together (``gang_min`` 4). The second job arrives while the first
    runs: both together would take train above its ideal, so room freed for part of it is wasted. A
    third job of six 16 GiB workers needs four of them together, the other two are ordinary."""
    rng = random.Random(seed)
    nodes = 8
    share = {"memory": nodes * 64 * GiB * 2 // 5, "vcore": nodes * 16_000 * 2 // 5}
    rest = {"memory": nodes * 64 * GiB * 3 // 5, "vcore": nodes * 16_000 * 3 // 5}
    raw = _partition([_queue("train", share), _queue("batch", rest)], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    for k in range(4):
        _job(events, 1 + k, f"batch-{k}", "root.batch", 40, 4 * GiB, 1000, rng.uniform(400, 600))
    jobs = [(60.0, 4, 4, 28 * GiB), (90.0, 4, 4, 28 * GiB), (300.0 + rng.uniform(0, 20), 6, 4, 16 * GiB)]
    for n, (t, count, gang_min, memory) in enumerate(jobs):
        app = f"train-{n}"
        events.append(f.AppAdded(t=t, app=app, queue="root.train"))
        events.append(
            f.AskAdded(
                t=t,
                app=app,
                ask=f"{app}-workers",
                resource={"memory": memory, "vcore": 4000},
                count=count,
                gang_min=gang_min,
                duration=rng.uniform(100, 140),
            )
        )
    return Scenario("gang", gang.__doc__ or "", raw, events)


ScenarioFn = Callable[[int], Scenario]


def opportunistic(seed: int = 0) -> Scenario:
    """YARN's opportunistic containers: on 16 nodes of 64 GiB, dev borrows beyond its guarantee with
    guaranteed work and fills the idle rest with opportunistic 4 GiB containers; prod's guaranteed jobs
    then arrive (8 GiB services, later four 48 GiB trainers): opportunistic containers go first, at
    once, and only then dev's borrowed guaranteed ones. Killed opportunistic work is asked for again."""
    rng = random.Random(seed)
    nodes = 16
    half = {"memory": nodes * 64 * GiB // 2, "vcore": nodes * 16_000 // 2}
    raw = _partition([_queue("prod", half), _queue("dev", half)], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    _job(events, 1, "dev-batch", "root.dev", 300, 2 * GiB, 500, rng.uniform(400, 500))
    waves = [(2, "dev-spark", "root.dev", 200, 4 * GiB), (200, "prod-opp", "root.prod", 100, 2 * GiB)]
    for t, app, queue, count, memory in waves:
        events.append(f.AppAdded(t=t, app=app, queue=queue))
        events.append(
            f.AskAdded(
                t=t,
                app=app,
                ask=f"{app}-task",
                resource={"memory": memory, "vcore": 1000},
                count=count,
                duration=rng.uniform(150, 250),
                execution_type="opportunistic",
            )
        )
    _job(events, 30, "prod-web", "root.prod", 40, 8 * GiB, 2000, rng.uniform(250, 350))
    _job(events, 120, "prod-ml", "root.prod", 4, 48 * GiB, 4000, rng.uniform(150, 250))
    _job(events, 250, "dev-etl", "root.dev", 50, 4 * GiB, 1000, rng.uniform(100, 200))
    return Scenario("opportunistic", opportunistic.__doc__ or "", raw, events)


def contract(seed: int = 0) -> Scenario:
    """Preemption contracts (YARN-45, the capacity monitor's resource-based preemption): on 16 nodes of 64 GiB,
    queue batch borrowed the idle cluster with four apps of 4 GiB containers, two of them with
    application masters that honour preemption requests (``preemption_contract``). prod (guarantee:
    half the cluster) then asks for 8 GiB services and later 16 GiB trainers. Contract apps get a
    ``preempt_request`` and give back their newest containers within the grace; the others are
    preempted container by container; what a contract app still misses at the deadline is killed."""
    rng = random.Random(seed)
    nodes = 16
    half = {"memory": nodes * 64 * GiB // 2, "vcore": nodes * 16_000 // 2}
    raw = _partition([_queue("prod", half), _queue("batch", half)], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    for k in range(4):
        app = f"batch-{k}"
        events.append(f.AppAdded(t=1 + k, app=app, queue="root.batch", preemption_contract=k % 2 == 0))
        events.append(
            f.AskAdded(
                t=1 + k,
                app=app,
                ask=f"{app}-task",
                resource={"memory": 4 * GiB, "vcore": 1000},
                count=70,
                duration=rng.uniform(400, 600),
            )
        )
    _job(events, 60, "prod-web", "root.prod", 40, 8 * GiB, 2000, rng.uniform(250, 350))
    _job(events, 200, "prod-ml", "root.prod", 8, 16 * GiB, 4000, rng.uniform(150, 250))
    return Scenario("contract", contract.__doc__ or "", raw, events)


def budgets(seed: int = 0) -> Scenario:
    """Disruption budgets and preemption opt-outs: on 12 nodes of 64 GiB, queue batch borrowed the idle
    cluster with a service of 8 GiB replicas that may lose at most two at once (``max_disruption: 2``),
    a database that opted out of preemption (``allow_preemption: false``) and an ETL job of 4 GiB
    containers. prod (guarantee: half the cluster) then asks for 8 GiB workers, later 16 GiB trainers,
    and a backfill of 4 GiB containers that never preempts (``preemption_policy: never``). The service
    never has more than two replicas under notice, the database goes last, the backfill waits for
    free room."""
    rng = random.Random(seed)
    nodes = 12
    half = {"memory": nodes * 64 * GiB // 2, "vcore": nodes * 16_000 // 2}
    raw = _partition([_queue("prod", half), _queue("batch", half)], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    batch: list[tuple[str, dict[str, Any], int, int]] = [
        ("batch-etl", {}, 4 * GiB, 60),
        ("batch-db", {"allow_preemption": False}, 16 * GiB, 8),
        ("batch-svc", {"max_disruption": 2}, 8 * GiB, 36),
    ]
    for k, (app, limits, memory, count) in enumerate(batch):
        events.append(f.AppAdded(t=1 + k, app=app, queue="root.batch", **limits))
        events.append(
            f.AskAdded(
                t=1 + k,
                app=app,
                ask=f"{app}-task",
                resource={"memory": memory, "vcore": 1000},
                count=count,
                duration=rng.uniform(500, 700),
            )
        )
    _job(events, 60, "prod-web", "root.prod", 40, 8 * GiB, 2000, rng.uniform(250, 350))
    _job(events, 150, "prod-ml", "root.prod", 12, 16 * GiB, 4000, rng.uniform(150, 250))
    events.append(f.AppAdded(t=90, app="prod-backfill", queue="root.prod"))
    events.append(
        f.AskAdded(
            t=90,
            app="prod-backfill",
            ask="prod-backfill-scan",
            resource={"memory": 4 * GiB, "vcore": 1000},
            count=30,
            duration=rng.uniform(60, 120),
            preemption_policy="never",
        )
    )
    events.sort(key=lambda e: e.t)
    return Scenario("budgets", budgets.__doc__ or "", raw, events)


def overcommit(seed: int = 0) -> Scenario:
    """Over-commit from measured utilization (YARN-1011): on 8 nodes of 64 GiB and 16 cores, queue batch
    fills every node with guaranteed 8 GiB containers that use half of what they ask; its opportunistic
    4 GiB containers then take the measured slack (nodes over-committed below 80%). prod (guarantee:
    half the cluster) asks for 8 GiB services, and while that preemption's grace runs, four nodes report
    a utilization spike above 90% of their memory: their newest opportunistic containers are killed at
    once (reason ``overcommit``), no guaranteed one. Killed opportunistic work is asked for again."""
    rng = random.Random(seed)
    nodes = 8
    half = {"memory": nodes * 64 * GiB // 2, "vcore": nodes * 16_000 // 2}
    thresholds = {"allocate_below": {"memory": 0.8, "vcore": 0.8}, "preempt_above": {"memory": 0.9, "vcore": 0.95}}
    raw = _partition([_queue("prod", half), _queue("batch", half)], dict(PREEMPTION), overcommit=thresholds)
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    events.append(f.AppAdded(t=1, app="batch-svc", queue="root.batch"))
    events.append(
        f.AskAdded(
            t=1,
            app="batch-svc",
            ask="batch-svc-task",
            resource={"memory": 8 * GiB, "vcore": 2000},
            usage={"memory": 4 * GiB, "vcore": 1000},
            count=nodes * 8,
            duration=rng.uniform(500, 600),
        )
    )
    events.append(f.AppAdded(t=10, app="batch-fill", queue="root.batch"))
    events.append(
        f.AskAdded(
            t=10,
            app="batch-fill",
            ask="batch-fill-task",
            resource={"memory": 4 * GiB, "vcore": 1000},
            usage={"memory": 4 * GiB, "vcore": 1000},
            count=nodes * 5,
            duration=rng.uniform(250, 350),
            execution_type="opportunistic",
        )
    )
    _job(events, 60, "prod-web", "root.prod", 8, 8 * GiB, 2000, rng.uniform(150, 250))
    for i in range(4):  # mid-grace: a spike on four nodes, as their NodeManagers measure it
        events.append(f.NodeUtilization(t=66, node=f"n{i:03d}", used={"memory": 63 * GiB, "vcore": 12_000}))
    return Scenario("overcommit", overcommit.__doc__ or "", raw, events)


def constraints(seed: int = 0) -> Scenario:
    """Placement constraints (YARN-6592): 12 nodes of 64 GiB in three racks (node label ``rack``). prod
    runs a database in racks r0 and r1 (one per rack: ``not_in`` rack of its tag ``db``), then a
    replicated service of six 8 GiB replicas (tag ``web``, priority 10): at most one per node
    (``cardinality`` max 1 of its own ``web`` containers per node, its app's only) and only in a rack
    that runs the database (``in`` rack ``db``). batch fills the idle cluster first with 4 GiB tasks at
    most four per node (``cardinality`` max 4 of ``etl`` per node) and a gang of four 8 GiB trainers
    that never share a node (``not_in`` node ``ml``, the gang's members counting each other). The
    service's replicas preempt batch work only where a replica may stand. At 200 s the node holding
    rack r0's database is lost: the database and the replicas on it are asked again, and a replica
    lands only where a database runs."""
    rng = random.Random(seed)
    nodes, per_rack = 12, 4
    half = {"memory": nodes * 64 * GiB // 2, "vcore": nodes * 16_000 // 2}
    raw = _partition([_queue("prod", half), _queue("batch", half)], dict(PREEMPTION))
    events: list[f.Feed] = [
        f.NodeAdded(
            node=f"n{i:03d}", capacity={"memory": 64 * GiB, "vcore": 16_000}, labels={"rack": f"r{i // per_rack}"}
        )
        for i in range(nodes)
    ]
    one_per_rack = (f.PlacementConstraint(scope="rack", op="not_in", tags=["db"]),)
    events.append(f.AppAdded(t=0.5, app="prod-db", queue="root.prod", priority=10))
    for rack in ("r0", "r1"):
        events.append(
            f.AskAdded(
                t=0.5,
                app="prod-db",
                ask=f"prod-db-{rack}",
                resource={"memory": 16 * GiB, "vcore": 4000},
                duration=2000.0,
                node_selector={"rack": [rack]},
                tags=("db",),
                constraints=one_per_rack,
            )
        )
    etl_cap = (f.PlacementConstraint(scope="node", op="cardinality", tags=["etl"], max=4),)
    events.append(f.AppAdded(t=1, app="batch-etl", queue="root.batch"))
    events.append(
        f.AskAdded(
            t=1,
            app="batch-etl",
            ask="batch-etl-task",
            resource={"memory": 4 * GiB, "vcore": 1000},
            count=nodes * 4,
            duration=rng.uniform(500, 700),
            tags=("etl",),
            constraints=etl_cap,
        )
    )
    events.append(f.AppAdded(t=2, app="batch-ml", queue="root.batch"))
    events.append(
        f.AskAdded(
            t=2,
            app="batch-ml",
            ask="batch-ml-train",
            resource={"memory": 8 * GiB, "vcore": 2000},
            count=4,
            gang_min=4,
            duration=rng.uniform(500, 700),
            tags=("ml",),
            constraints=(f.PlacementConstraint(scope="node", op="not_in", tags=["ml"], namespace="self"),),
        )
    )
    _job(events, 3, "batch-fill", "root.batch", 200, 8 * GiB, 2000, rng.uniform(500, 700))
    replicas = (
        f.PlacementConstraint(scope="node", op="cardinality", tags=["web"], max=1, namespace="self"),
        f.PlacementConstraint(scope="rack", op="in", tags=["db"]),
    )
    events.append(f.AppAdded(t=60, app="prod-web", queue="root.prod", priority=10))
    events.append(
        f.AskAdded(
            t=60,
            app="prod-web",
            ask="prod-web-replica",
            resource={"memory": 8 * GiB, "vcore": 2000},
            count=6,
            priority=10,
            duration=1500.0,
            tags=("web",),
            constraints=replicas,
        )
    )
    _job(events, 120, "prod-report", "root.prod", 30, 8 * GiB, 2000, rng.uniform(100, 200))
    events.append(f.NodeRemoved(t=200, node="n000"))
    events.sort(key=lambda e: e.t)
    return Scenario("constraints", constraints.__doc__ or "", raw, events)


def topology(seed: int = 0) -> Scenario:
    """Topology-aware training: 16 nodes of 64 GiB in four racks (node label ``rack``, with the host
    as the inner level). Queue batch borrowed the idle cluster with 8 GiB tasks, spread over every
    rack; queue train (guarantee: 40% of the cluster) runs a gang of four 56 GiB workers that must
    share one rack (``topology`` ``required``), then a gang of four 24 GiB workers that prefers one.
    At 300 s node n000 (rack r0) is lost, and what ran there is asked again."""
    rng = random.Random(seed)
    nodes, per_rack = 16, 4
    share = {"memory": nodes * 64 * GiB * 2 // 5, "vcore": nodes * 16_000 * 2 // 5}
    rest = {"memory": nodes * 64 * GiB * 3 // 5, "vcore": nodes * 16_000 * 3 // 5}
    raw = _partition([_queue("train", share), _queue("batch", rest)], dict(PREEMPTION))
    raw["partitions"][0]["topology"] = {"levels": ["rack", "host"]}
    events: list[f.Feed] = [
        f.NodeAdded(
            node=f"n{i:03d}",
            capacity={"memory": 64 * GiB, "vcore": 16_000},
            labels={"rack": f"r{i // per_rack}", "host": f"n{i:03d}"},
        )
        for i in range(nodes)
    ]
    for k in range(4):
        _job(events, 1 + k, f"batch-{k}", "root.batch", 40, 8 * GiB, 2000, rng.uniform(500, 700))
    gangs: list[tuple[float, int, f.TopologyMode]] = [(60.0, 56 * GiB, "required"), (120.0, 24 * GiB, "preferred")]
    for n, (t, memory, mode) in enumerate(gangs):
        app = f"train-{n}"
        events.append(f.AppAdded(t=t, app=app, queue="root.train"))
        events.append(
            f.AskAdded(
                t=t,
                app=app,
                ask=f"{app}-workers",
                resource={"memory": memory, "vcore": 4000},
                count=4,
                gang_min=4,
                duration=rng.uniform(400, 500),
                topology=f.AskTopology(level="rack", mode=mode),
            )
        )
    events.append(f.NodeRemoved(t=300, node="n000"))
    events.sort(key=lambda e: e.t)
    return Scenario("topology", topology.__doc__ or "", raw, events)


def slo(seed: int = 0) -> Scenario:
    """SLO reservations (YARN's ReservationSystem) beside ad-hoc batch: on 10 nodes of 64 GiB and 16 cores,
    queue prod (guarantee: 60%) is reservable. At t=0 it takes an ETL reservation that recurs every 30
    minutes (16 containers of 8 GiB in gangs of 4, 5 minutes each, within minutes 10 to 25 of every
    half hour) and a report of two stages (8 containers of 16 GiB for 5 minutes, then 4 for 3 minutes)
    due by t=2000; a backfill reservation that would take more than prod's share beside them and one for
    queue batch (not reservable) are rejected. Batch borrows the idle cluster with waves of 4 GiB
    containers, prod's ad-hoc work runs in prod's ``default`` queue; each ETL run and the report are
    submitted against their reservation when their window opens, win their room back from batch by
    preemption (prod is below its guarantee), and hold their plan as a guarantee inside prod during their
    planned intervals."""
    rng = random.Random(seed)
    nodes = 10
    share = {"memory": nodes * 64 * GiB * 6 // 10, "vcore": nodes * 16_000 * 6 // 10}
    rest = {"memory": nodes * 64 * GiB * 4 // 10, "vcore": nodes * 16_000 * 4 // 10}
    prod = {**_queue("prod", share), "reservable": True}
    raw = _partition([prod, _queue("batch", rest)], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    etl = f.ReservationStage(resource={"memory": 8 * GiB, "vcore": 2000}, count=16, gang_min=4, duration=300)
    big = f.ReservationStage(resource={"memory": 16 * GiB, "vcore": 2000}, count=8, duration=300)
    small = f.ReservationStage(resource={"memory": 16 * GiB, "vcore": 2000}, count=4, duration=180)
    backfill = f.ReservationStage(resource={"memory": 8 * GiB, "vcore": 1000}, count=60, duration=900)
    events += [
        f.ReservationSubmitted(
            reservation="etl", queue="root.prod", arrival=600, deadline=1500, stages=[etl], recurrence=1800
        ),
        f.ReservationSubmitted(
            reservation="report", queue="root.prod", arrival=200, deadline=2000, stages=[big, small]
        ),
        f.ReservationSubmitted(reservation="backfill", queue="root.prod", arrival=0, deadline=1500, stages=[backfill]),
        f.ReservationSubmitted(reservation="adhoc", queue="root.batch", arrival=0, deadline=1000, stages=[small]),
    ]
    for wave in range(4):
        t = 1 + wave * 600
        _job(events, t, f"batch-{wave}", "root.batch", 150, 4 * GiB, 1000, rng.uniform(1500, 2400))
    for run in range(3):
        t = 600 + run * 1800
        app = f"etl-{run}"
        events.append(f.AppAdded(t=t, app=app, queue="root.prod", reservation="etl"))
        events.append(
            f.AskAdded(t=t, app=app, ask=f"{app}-task", resource=dict(etl.resource), count=16, gang_min=4, duration=300)
        )
    events.append(f.AppAdded(t=200, app="report-1", queue="root.prod", reservation="report"))
    for stage, (t, spec) in enumerate(((200, big), (1100, small))):
        ask = f"report-1-stage{stage}"
        events.append(
            f.AskAdded(
                t=t, app="report-1", ask=ask, resource=dict(spec.resource), count=spec.count, duration=spec.duration
            )
        )
    _job(events, 100, "prod-adhoc", "root.prod", 30, 4 * GiB, 1000, rng.uniform(1500, 2400))
    events.sort(key=lambda e: e.t)
    return Scenario("slo", slo.__doc__ or "", raw, events)


def min_runtime(seed: int = 0) -> Scenario:
    """Minimum runtime before preemption (``preemption.min.runtime``, Slurm's ``PreemptExemptTime``): on 12
    nodes of 64 GiB, batch (guarantee: half the cluster) borrows the idle half with a steady stream of
    jobs of 8 GiB containers, a new one every 15 s; prod (the other half) asks back in three waves of
    8 GiB workers. The cheapest victims by running time are batch's newest containers, started seconds
    before; ``preemption.min.runtime: 2m`` on batch spares them, so every victim has run two minutes and
    prod waits for such victims. ``sniper compare min_runtime`` runs the same trace without the
    property beside it."""
    rng = random.Random(seed)
    nodes = 12
    half = {"memory": nodes * 64 * GiB // 2, "vcore": nodes * 16_000 // 2}
    queues = [_queue("prod", half), _queue("batch", half, preemption_min_runtime="2m")]
    raw = _partition(queues, dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    for k in range(36):
        _job(
            events, 1 + 15 * k, f"batch-{k:03d}", "root.batch", rng.randint(6, 12), 8 * GiB, 1000, rng.uniform(200, 400)
        )
    for wave in range(3):
        t = 150 + 150 * wave + rng.uniform(0, 10)
        _job(events, t, f"prod-{wave}", "root.prod", rng.randint(30, 40), 8 * GiB, 2000, rng.uniform(80, 120))
    events.sort(key=lambda e: e.t)
    return Scenario("min_runtime", min_runtime.__doc__ or "", raw, events, shows="preemption.min.runtime")


def stopped_queue(seed: int = 0) -> Scenario:
    """A queue retired without killing its work (``queue.state: stopped``, YARN's queue states): on 12 nodes
        of 64 GiB, prod, batch and legacy (a third of the cluster each) run jobs; at 200 s the operator stops
        legacy. Its running jobs keep their containers and are served to the end, one asking for more at
    260 s (it drains), while every
        app submitted to it afterwards is rejected with ``queue_stopped``; prod and batch then take the room
        it gives back. ``sniper compare stopped_queue`` runs the same trace without the property beside it."""
    rng = random.Random(seed)
    nodes = 12
    third = {"memory": nodes * 64 * GiB // 3, "vcore": nodes * 16_000 // 3}
    queues = [_queue("prod", third), _queue("batch", third), _queue("legacy", third)]
    raw = _partition(queues, dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    stopped = _partition(
        [_queue("prod", third), _queue("batch", third), _queue("legacy", third, queue_state="stopped")],
        dict(PREEMPTION),
    )
    events.append(f.PartitionConfigEvent(t=200, config=stopped["partitions"][0]))
    for k in range(16):
        queue = ("root.prod", "root.batch", "root.legacy")[k % 3]
        _job(
            events, 5 + 35 * k, f"{queue[5:]}-{k:03d}", queue, rng.randint(10, 24), 8 * GiB, 1000, rng.uniform(150, 250)
        )
    # An app legacy still runs asks for more after the stop: it is served.
    more = {"memory": 8 * GiB, "vcore": 1000}
    events.append(f.AskAdded(t=260, app="legacy-005", ask="legacy-005-more", resource=more, count=6, duration=120))
    events.sort(key=lambda e: e.t)
    return Scenario("stopped_queue", stopped_queue.__doc__ or "", raw, events, shows="queue.state")


def quota(seed: int = 0) -> Scenario:
    """Quota preemption: on 16 nodes of 64 GiB, queue services (max three quarters of the cluster,
    ``quota.preemption.delay: 2m``) runs long-lived replicas of 8 GiB on 70% of it; batch jobs of 4 GiB
    keep arriving. At 300 s the administrator halves services' max; two minutes later the youngest
    replicas get their notices until services is at or under its new max, and batch runs on the room.
    With ``policy: none`` (or without ``quotapreemptionenabled``) services keeps it until its replicas end."""
    rng = random.Random(seed)
    nodes = 16
    cluster = {"memory": nodes * 64 * GiB, "vcore": nodes * 16_000}
    quarter = {k: v // 4 for k, v in cluster.items()}

    def partition(services_max: dict[str, int]) -> dict[str, Any]:
        queues = [
            _queue("services", quarter, services_max, quota_preemption_delay="2m"),
            _queue("batch", quarter),
        ]
        return _partition(queues, {**PREEMPTION, "quotapreemptionenabled": True})

    raw = partition({k: v * 3 for k, v in quarter.items()})
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    for k in range(3):
        _job(events, 1 + k, f"services-{k}", "root.services", 30, 8 * GiB, 2000, rng.uniform(2400, 3000), am=True)
    for k in range(24):
        t = 10 + k * 40 + rng.uniform(0, 10)
        _job(events, t, f"batch-{k:02d}", "root.batch", rng.randint(20, 40), 4 * GiB, 1000, rng.uniform(120, 240))
    halved = partition({k: v * 3 // 2 for k, v in quarter.items()})["partitions"][0]
    events.append(f.PartitionConfigEvent(t=300, config=halved))
    events.sort(key=lambda e: e.t)
    return Scenario("quota", quota.__doc__ or "", raw, events, shows="quota.preemption.delay")


def fair_share(seed: int = 0) -> Scenario:
    """Fair share with memory (``fairshare.halflife: 30m`` on root.team, Slurm's decayed usage): on 8 nodes
    of 64 GiB, hank runs a night job on almost the whole team queue for an hour while lou runs one short
    job. Soon after hank's hour both submit at once, hank first, each asking for more than the cluster.
    Under the half-life lou, who held little, is served first and hank waits for lou's containers to
    end; without it the queue serves in submission order, hank first, and lou waits for the user who
    held the queue all hour. ``sniper compare fair_share`` runs the same trace without the property beside
    it."""
    rng = random.Random(seed)
    nodes = 8
    cluster = {"memory": nodes * 64 * GiB, "vcore": nodes * 16_000}
    raw = _partition([_queue("team", cluster, fairshare_halflife="30m")], dict(PREEMPTION))
    events: list[f.Feed] = list(_nodes(nodes, 64 * GiB, 16_000))
    slots = nodes * 64 // 8  # 8 GiB containers the cluster holds
    _job(events, 1, "hank-night", "root.team", slots - 8, 8 * GiB, 1000, 3600, user="hank")
    _job(events, 2, "lou-check", "root.team", 8, 8 * GiB, 1000, rng.uniform(200, 400), user="lou")
    for user in ("hank", "lou"):
        _job(events, 3700, f"{user}-day", "root.team", slots + 16, 8 * GiB, 1000, rng.uniform(500, 700), user=user)
    events.sort(key=lambda e: e.t)
    return Scenario("fair_share", fair_share.__doc__ or "", raw, events, shows="fairshare.halflife")


SCENARIOS: dict[str, ScenarioFn] = {
    "demo": demo,
    "large_containers": large_containers,
    "priority_queues": priority_queues,
    "fence": fence,
    "am_heavy": am_heavy,
    "random_mix": random_mix,
    "fragmented": fragmented,
    "opportunistic": opportunistic,
    "user_limits": user_limits,
    "gang": gang,
    "contract": contract,
    "budgets": budgets,
    "overcommit": overcommit,
    "constraints": constraints,
    "slo": slo,
    "min_runtime": min_runtime,
    "stopped_queue": stopped_queue,
    "quota": quota,
    "fair_share": fair_share,
    "topology": topology,
}


def scenario(name: str, seed: int = 0) -> Scenario:
    try:
        return SCENARIOS[name](seed)
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; bundled: {', '.join(sorted(SCENARIOS))}") from None
