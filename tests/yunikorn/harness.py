"""Turns a YuniKorn preemption test's set-up into a Sniper feed, runs it, and reads the outcome.

A YuniKorn unit test builds its state by hand: queues, nodes, allocations already on chosen nodes, and
one waiting ask handed to the preemptor. A feed cannot place a container by hand, so :func:`feed`
stages it: every node joins unschedulable, each node in turn is the only schedulable one while the
containers meant for it are asked for (so they land there whatever the node sort policy), then every
node is opened and the waiting asks arrive. Running containers never finish (no ``duration``) and,
unless the case says otherwise, are not asked for again when preempted (``retry: false``), so the
outcome is the preemption's alone. A set-up that does not land where the YuniKorn test puts it (a
config Sniper refuses, a container over a max) is an error, never a silently different case.

Quantities are written in YuniKorn's test units and converted once here: ``first`` is memory in GiB,
``mem`` memory in MiB, ``vcores`` cores; any other name (``pods``, ``gpu``, ``second``, ``third``) is a
count. In the queue config memory carries a suffix and vcore is written in milli-cores, so the config
means the same under either reading of bare numbers.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation

PARTITION = "default"
GRACE = 1.0  # YuniKorn has no grace period: the victims' release is immediate there
SETTLE = 60.0  # seconds after the waiting asks arrive: many preemption rounds and grace periods

YkResource = dict[str, int]


def feed_resource(yk: YkResource) -> dict[str, int]:
    """A YuniKorn test quantity as a feed resource (memory MiB, vcore milli-cores)."""
    out: dict[str, int] = {}
    for name, n in yk.items():
        if name == "first":
            out["memory"] = out.get("memory", 0) + n * 1024
        elif name == "mem":
            out["memory"] = out.get("memory", 0) + n
        elif name == "vcores":
            out["vcore"] = n * 1000
        else:
            out[name] = n
    return out


def config_resource(yk: YkResource) -> dict[str, str | int]:
    """The same quantity for a queue config, with explicit units (``"5120Mi"``, ``"2000m"``)."""
    return {
        name: f"{n}Mi" if name == "memory" else f"{n}m" if name == "vcore" else n
        for name, n in feed_resource(yk).items()
    }


def q(
    name: str,
    *children: dict[str, Any],
    guaranteed: YkResource | None = None,
    maximum: YkResource | None = None,
    **props: str,
) -> dict[str, Any]:
    """One raw queue in YuniKorn's shape; ``props`` use ``_`` for ``.`` (``preemption_policy="fence"``)."""
    raw: dict[str, Any] = {"name": name}
    resources: dict[str, Any] = {}
    if guaranteed is not None:
        resources["guaranteed"] = config_resource(guaranteed)
    if maximum is not None:
        resources["max"] = config_resource(maximum)
    if resources:
        raw["resources"] = resources
    if props:
        raw["properties"] = {k.replace("_", "."): v for k, v in props.items()}
    if children:
        raw["queues"] = list(children)
    return raw


@dataclasses.dataclass(frozen=True, slots=True)
class Running:
    """A container running before the preemptor asks: YuniKorn's allocation key, app, size and node;
    ``am`` for an application originator, ``pinned`` for one placed for a required-node ask."""

    key: str
    app: str
    resource: YkResource
    node: str
    priority: int = 0
    am: bool = False
    pinned: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Ask:
    """A waiting ask: key, app, size, how many, and an optional required node (daemon-set style)."""

    key: str
    app: str
    resource: YkResource
    count: int = 1
    priority: int = 0
    node: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    root: dict[str, Any]  # the root queue, built with :func:`q`
    nodes: dict[str, YkResource]
    apps: dict[str, str]  # app -> leaf queue path
    running: tuple[Running, ...]
    asks: tuple[Ask, ...]
    app_priority: dict[str, int] = dataclasses.field(default_factory=dict)
    retry: bool = False  # are preempted containers asked for again (a ReplicaSet)?
    intra_queue: bool = False  # Sniper's switch for preemption inside one leaf queue (YuniKorn's is always on)
    opted_out: frozenset[str] = frozenset()  # apps whose pods carry YuniKorn's ``allow-preemption: false``
    policy: str = "sniper"  # Sniper's preemption policy (``proportional``: YARN's baseline)


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    victims: frozenset[str]  # keys of the running containers preempted (notices not cancelled)
    victim_queues: Counter[str]  # victims per queue
    placed: Counter[str]  # waiting ask key -> containers started
    running: Counter[str]  # leaf queue -> containers running at the end
    violations: int
    result: SimulationResult = dataclasses.field(repr=False)


# Sniper's preemption settings for these cases: every round may preempt what it needs, short grace.
PREEMPTION: dict[str, Any] = {
    "policy": "sniper",
    "interval": 1.0,
    "total_preemption_per_round": 1.0,
    "grace": GRACE,
    "min_missed_opportunities": 1,
}


def feed(case: Case) -> list[f.Feed]:
    """The staged feed of ``case`` (module docstring)."""
    preemption = {**PREEMPTION, "policy": case.policy, **({"intra_queue": True} if case.intra_queue else {})}
    config = {"name": PARTITION, "preemption": preemption, "queues": [case.root]}
    events: list[f.Feed] = [f.PartitionConfigEvent(t=0, partition=PARTITION, config=config)]
    names = list(case.nodes)
    for name in names:
        events.append(
            f.NodeAdded(
                t=0, partition=PARTITION, node=name, capacity=feed_resource(case.nodes[name]), schedulable=False
            )
        )
    for app, path in case.apps.items():
        events.append(
            f.AppAdded(
                t=0,
                partition=PARTITION,
                app=app,
                queue=path,
                priority=case.app_priority.get(app, 0),
                allow_preemption=app not in case.opted_out,
            )
        )
    t = 0.0
    for name in names:
        mine = [r for r in case.running if r.node == name]
        if not mine:
            continue
        t += 1
        events.append(f.NodeUpdated(t=t, partition=PARTITION, node=name, schedulable=True))
        events.extend(
            f.AskAdded(
                t=t,
                partition=PARTITION,
                app=r.app,
                ask=r.key,
                resource=feed_resource(r.resource),
                priority=r.priority,
                am=r.am,
                node=r.node if r.pinned else None,
                retry=case.retry,
            )
            for r in mine
        )
        t += 1
        events.append(f.NodeUpdated(t=t, partition=PARTITION, node=name, schedulable=False))
    t += 1
    events.extend(f.NodeUpdated(t=t, partition=PARTITION, node=name, schedulable=True) for name in names)
    t += 1
    events.extend(
        f.AskAdded(
            t=t,
            partition=PARTITION,
            app=a.app,
            ask=a.key,
            resource=feed_resource(a.resource),
            count=a.count,
            priority=a.priority,
            node=a.node,
            retry=case.retry,
        )
        for a in case.asks
    )
    return events


def _check_staging(case: Case, decisions: list[d.DecisionMsg]) -> None:
    """Every running container started on its node before the waiting asks came, or the case is wrong."""
    where = {x.ask: x.node for x in decisions if isinstance(x, d.Allocated)}
    wrong = [r.key for r in case.running if where.get(r.key) != r.node]
    if wrong:
        raise ValueError(f"set-up: {', '.join(wrong)} not started where the YuniKorn test puts them")


def run(case: Case) -> Outcome:
    """Runs ``case`` through the simulator and reads what YuniKorn's tests assert on."""
    events = feed(case)
    until = events[-1].t + SETTLE
    result = run_simulation(events, settings=SimulationSettings(until=until))
    keys: dict[str, str] = {}
    queues: dict[str, str] = {}
    noticed: dict[str, str] = {}
    cancelled: set[str] = set()
    placed: Counter[str] = Counter()
    live: set[str] = set()
    waiting = {a.key for a in case.asks}
    for x in result.decisions:
        if isinstance(x, d.Allocated):
            keys[x.allocation], queues[x.allocation] = x.ask, x.queue
            live.add(x.allocation)
            if x.ask in waiting:
                placed[x.ask] += 1
        elif isinstance(x, d.Preempt) and not x.observe_only:
            noticed[x.allocation] = x.queue
        elif isinstance(x, d.PreemptCancelled):
            cancelled.add(x.allocation)
        elif isinstance(x, d.Released | d.AllocationLost):
            live.discard(x.allocation)
    _check_staging(case, result.decisions)
    victims = {a: queue for a, queue in noticed.items() if a not in cancelled}
    return Outcome(
        victims=frozenset(keys[a] for a in victims),
        victim_queues=Counter(victims.values()),
        placed=placed,
        running=Counter(queues[a] for a in live),
        violations=result.violations,
        result=result,
    )
