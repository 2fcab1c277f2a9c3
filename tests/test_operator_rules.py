"""Rules operators expect, each on a scenario written to break it, run by the simulator in virtual time
through the real actors (the independent model checks every invariant on the way):

- the deadzone is YARN's trigger, not a floor: a queue that borrowed everything is taken to its ideal,
  never left inside the band while its siblings wait below their guarantees;
- a gang that fills its queue's guarantee exactly, on any resource, is served; one unit beyond it on any
  resource is not (it would take the victims' queue below its own guarantee);
- ``time_to_guarantee`` counts whole containers: a queue whose every pending container would take it
  beyond its guarantee is at it;
- an ask that requires a node (a daemon set) preempts on that node as YuniKorn's required-node preemptor
  does: lower priority first, never a higher priority, never another required-node container, whichever
  queue the victims are in, with or without ``intra_queue``; ``preemption.required_node: false`` turns it off.

The exit codes of a run that decides nothing and the pending bound of one ask are checked through the
command line in ``test_cli_errors.py`` and ``test_admission.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core.config import parse_config
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation
from tests.core_support import queue
from tests.preemption_support import PreemptHarness, preemption_raw, proposal

GiB = 1024
CORE = 1000
PARTITION = "default"


def config(queues: list[dict[str, Any]], **preemption: Any) -> Any:
    """A one-partition ``queues.yaml`` with sniper preemption and the given top-level queues."""
    return parse_config(
        {
            "partitions": [
                {
                    "name": PARTITION,
                    "preemption": {"policy": "sniper", **preemption},
                    "queues": [{"name": "root", "queues": queues}],
                }
            ]
        }
    )


def guaranteed(name: str, **resources: str) -> dict[str, Any]:
    return {"name": name, "resources": {"guaranteed": resources}}


def nodes(count: int, memory: int, vcore: int) -> list[f.Feed]:
    return [f.NodeAdded(t=0.0, node=f"n{i:02d}", capacity={"memory": memory, "vcore": vcore}) for i in range(count)]


def usage(result: SimulationResult, queue: str, resource: str) -> int:
    return result.models[PARTITION].usage.get(queue, {}).get(resource, 0)


def simulate(events: list[f.Feed], cfg: Any, policy: str, until: float = 400.0) -> SimulationResult:
    result = run_simulation(events, cfg, SimulationSettings(until=until, policy=policy))
    assert result.violations == 0, result.report["violations"]
    return result


# ---------------------------------------------------------------------- the deadzone triggers


def borrowed_everything(dominant: str, budget: float) -> tuple[list[f.Feed], Any]:
    """Guarantees of 192 / 192 / 256 (GiB or cores, ``dominant``) on a full 640 cluster: ``c`` holds it
    all in containers of 8, then ``a`` and ``b`` ask for containers of 8 each; each round may preempt
    ``budget`` of the cluster, so ``c`` enters the band (256 x 1.1) one round before its ideal."""
    unit = GiB if dominant == "memory" else CORE
    other = "vcore" if dominant == "memory" else "memory"
    small = {other: 1 * (CORE if other == "vcore" else GiB)}
    size = {dominant: 8 * unit, **small}
    q = {"a": 192, "b": 192, "c": 256}
    suffix = "Gi" if dominant == "memory" else ""
    cfg = config(
        [guaranteed(name, **{dominant: f"{g}{suffix}"}) for name, g in q.items()],
        total_preemption_per_round=budget,
        max_ignored_over_capacity=0.1,
    )
    events = nodes(
        10, 64 * (GiB if dominant == "memory" else 8 * GiB), 64 * (CORE if dominant == "vcore" else 8 * CORE)
    )
    events += [
        f.AppAdded(t=0.0, app="c1", queue="root.c"),
        f.AskAdded(t=0.0, app="c1", ask="t", resource=size, count=80),
    ]
    for name in ("a", "b"):
        events += [
            f.AppAdded(t=10.0, app=f"{name}1", queue=f"root.{name}"),
            f.AskAdded(t=10.0, app=f"{name}1", ask="t", resource=size, count=40),
        ]
    return events, cfg


@pytest.mark.parametrize("dominant", ["memory", "vcore"])
@pytest.mark.parametrize("budget", [0.06, 0.11])
def test_a_queue_above_the_deadzone_is_taken_to_its_ideal_not_to_the_band(dominant: str, budget: float) -> None:
    events, cfg = borrowed_everything(dominant, budget)
    sniper = simulate(events, cfg, "sniper")
    unit = GiB if dominant == "memory" else CORE
    assert [usage(sniper, f"root.{q}", dominant) // unit for q in "abc"] == [192, 192, 256]
    ttg = sniper.report["time_to_guarantee"]
    assert ttg["root.a"]["unmet"] == 0 and ttg["root.b"]["unmet"] == 0
    # Never slower to the guarantees than YARN's proportional baseline on the same trace.
    baseline = simulate(events, cfg, "proportional").report["time_to_guarantee"]
    for q in ("root.a", "root.b"):
        assert baseline[q]["unmet"] == 0
        assert ttg[q]["max"] <= baseline[q]["max"]


# ---------------------------------------------------------------------- a gang that fits its guarantee exactly


def gang_for_a_full_guarantee(members: int, memory: int, vcore: int, deadzone: float) -> tuple[list[f.Feed], Any]:
    """Queues a and b guaranteed 32 GiB / 32 cores each on four 16 GiB / 16-core nodes; b holds everything
    in 1 GiB / 1-core containers; a asks for a gang of ``members`` x (``memory`` MiB, ``vcore`` milli-cores)."""
    cfg = config(
        [guaranteed(name, memory="32Gi", vcore="32") for name in ("a", "b")],
        total_preemption_per_round=1.0,
        max_ignored_over_capacity=deadzone,
    )
    events = nodes(4, 16 * GiB, 16 * CORE)
    events += [
        f.AppAdded(t=0.0, app="b1", queue="root.b"),
        f.AskAdded(t=0.0, app="b1", ask="t", resource={"memory": GiB, "vcore": CORE}, count=64),
        f.AppAdded(t=10.0, app="a1", queue="root.a"),
        f.AskAdded(
            t=10.0, app="a1", ask="g", resource={"memory": memory, "vcore": vcore}, count=members, gang_min=members
        ),
    ]
    return events, cfg


@pytest.mark.parametrize("deadzone", [0.0, 0.1])
@pytest.mark.parametrize(
    ("members", "memory", "vcore", "victims"),
    [
        (4, 8 * GiB, 8 * CORE, 32),  # exactly the guarantee on both resources
        (4, 8 * GiB, 4 * CORE, 32),  # exactly on memory
        (4, 4 * GiB, 8 * CORE, 32),  # exactly on vcores
        (2, 16 * GiB, 16 * CORE, 32),  # two whole nodes
    ],
)
def test_a_gang_that_fills_its_queues_guarantee_exactly_is_served(
    members: int, memory: int, vcore: int, victims: int, deadzone: float
) -> None:
    events, cfg = gang_for_a_full_guarantee(members, memory, vcore, deadzone)
    result = simulate(events, cfg, "sniper", until=200.0)
    assert result.report["preemptions"]["victims"] == victims
    assert usage(result, "root.a", "memory") == members * memory
    assert usage(result, "root.a", "vcore") == members * vcore
    assert result.report["time_to_guarantee"]["root.a"]["unmet"] == 0


@pytest.mark.parametrize(("memory", "vcore"), [(8 * GiB + 1, 8 * CORE), (8 * GiB, 8 * CORE + 1)])
def test_a_gang_one_unit_beyond_its_queues_guarantee_preempts_nothing(memory: int, vcore: int) -> None:
    events, cfg = gang_for_a_full_guarantee(4, memory, vcore, 0.1)
    result = simulate(events, cfg, "sniper", until=200.0)
    assert result.report["preemptions"]["victims"] == 0
    assert usage(result, "root.b", "memory") == 64 * GiB


# ---------------------------------------------------------------------- whole containers in time_to_guarantee


@pytest.mark.parametrize("dominant", ["memory", "vcore"])
@pytest.mark.parametrize(("sizes", "short"), [([30], False), ([30, 12], True), ([12], True)])
def test_a_queue_is_at_its_guarantee_when_its_next_container_would_take_it_beyond(
    dominant: str, sizes: list[int], short: bool
) -> None:
    """a (guaranteed 192) runs six containers of 30 on a full cluster, b the rest; then a asks for more
    containers of ``sizes``. Nothing is preempted (policy none): a stays at 180. With only containers of
    30 pending it can never get another without passing its guarantee, so it is at it; a pending 12 would
    fit, so with one it is short of its guarantee for good."""
    unit = GiB if dominant == "memory" else CORE
    other = {"vcore": CORE} if dominant == "memory" else {"memory": GiB}
    suffix = "Gi" if dominant == "memory" else ""
    cfg = config(
        [guaranteed("a", **{dominant: f"192{suffix}"}), guaranteed("b", **{dominant: f"448{suffix}"})], policy="none"
    )
    big = 1024 * (GiB if dominant == "vcore" else CORE)
    events = nodes(6, 120 * unit if dominant == "memory" else big, 120 * unit if dominant == "vcore" else big)
    events += [
        f.AppAdded(t=0.0, app="a1", queue="root.a"),
        f.AskAdded(t=0.0, app="a1", ask="run", resource={dominant: 30 * unit, **other}, count=6),
        f.AppAdded(t=1.0, app="b1", queue="root.b"),
        f.AskAdded(t=1.0, app="b1", ask="run", resource={dominant: 20 * unit, **other}, count=27),
        f.AppAdded(t=2.0, app="a2", queue="root.a"),
    ]
    events += [
        f.AskAdded(t=2.0, app="a2", ask=f"more{size}", resource={dominant: size * unit, **other}, count=3)
        for size in sizes
    ]
    result = simulate(events, cfg, "none", until=100.0)
    assert usage(result, "root.a", dominant) == 180 * unit
    assert usage(result, "root.b", dominant) == 540 * unit
    ttg = result.report["time_to_guarantee"]
    assert (ttg.get("root.a", {}).get("unmet", 0) == 1) is short


# ---------------------------------------------------------------------- required-node asks


def daemon_set(
    running: list[tuple[str, str, int]],
    *,
    ask_priority: int = 0,
    intra_queue: bool = False,
    required_node: bool = True,
    extra: list[f.Feed] | None = None,
) -> SimulationResult:
    """Queues a and b (16 GiB / 16 cores guaranteed each) on nodes n00 and n01 of 16 GiB / 16 cores. Each
    ``(app, queue, priority)`` of ``running`` starts one 4 GiB / 1-core container (on n00 first, binpacking
    the rest), every node full in the end; at t=10 an ask of app ``ds`` in root.a requires n01 for 2 GiB.
    A required-node container is given as queue ``pinned:<queue>`` (its ask requires n01 too)."""
    cfg = config(
        [guaranteed(name, memory="16Gi", vcore="16") for name in ("a", "b")],
        intra_queue=intra_queue,
        required_node=required_node,
        total_preemption_per_round=1.0,
    )
    events = nodes(2, 16 * GiB, 16 * CORE)
    apps: set[str] = set()
    for i, (app, queue_name, priority) in enumerate(running):
        pinned = queue_name.startswith("pinned:")
        queue_path = f"root.{queue_name.removeprefix('pinned:')}"
        if app not in apps:
            apps.add(app)
            events.append(f.AppAdded(t=0.0, app=app, queue=queue_path))
        events.append(
            f.AskAdded(
                t=i * 0.01,
                app=app,
                ask=f"c{i}",
                resource={"memory": 4 * GiB, "vcore": CORE},
                priority=priority,
                node="n01" if pinned else None,
            )
        )
    events += [
        f.AppAdded(t=10.0, app="ds", queue="root.a"),
        f.AskAdded(
            t=10.0, app="ds", ask="d", resource={"memory": 2 * GiB, "vcore": 500}, priority=ask_priority, node="n01"
        ),
    ]
    return simulate(sorted([*events, *(extra or [])], key=lambda e: e.t), cfg, "sniper", until=120.0)


def victims(result: SimulationResult) -> list[tuple[str, str]]:
    """(victim app, its ask) of every notice, in order."""
    apps = {x.allocation: (x.app, x.ask) for x in result.decisions if isinstance(x, d.Allocated)}
    return [apps[x.allocation] for x in result.decisions if isinstance(x, d.Preempt)]


def daemon_ran(result: SimulationResult) -> bool:
    return any(isinstance(x, d.Allocated) and x.app == "ds" and x.node == "n01" for x in result.decisions)


EIGHT_OF_A = [("a1", "a", 0)] * 8  # root.a at its guarantee, both nodes full


@pytest.mark.parametrize("intra_queue", [False, True])
def test_a_required_node_ask_preempts_on_its_node_in_its_own_full_queue(intra_queue: bool) -> None:
    result = daemon_set(EIGHT_OF_A, intra_queue=intra_queue)
    assert victims(result) == [("a1", "c7")]  # one container of n01 (the youngest), enough for 2 GiB
    assert daemon_ran(result)


def test_required_node_preemption_can_be_switched_off() -> None:
    result = daemon_set(EIGHT_OF_A, required_node=False)
    assert victims(result) == [] and not daemon_ran(result)


def test_a_required_node_ask_preempts_whichever_queue_holds_its_node() -> None:
    # b is far below its guarantee: no quota lets anyone take from it, the required-node rule does
    result = daemon_set([("a1", "a", 0)] * 4 + [("b1", "b", 0)] * 4)
    assert [app for app, _ in victims(result)] == ["b1"]
    assert daemon_ran(result)


def test_lower_priority_goes_first_and_a_higher_priority_never() -> None:
    on_n01 = [("b1", "b", 5), ("b2", "b", 1), ("b3", "b", 5), ("b4", "b", 3)]
    result = daemon_set([("a1", "a", 0)] * 4 + on_n01, ask_priority=3)
    assert victims(result) == [("b2", "c5")]
    result = daemon_set([("a1", "a", 0)] * 4 + [("b1", "b", 5)] * 4, ask_priority=3)
    assert victims(result) == [] and not daemon_ran(result)


def test_a_required_node_container_is_never_a_victim_of_another() -> None:
    result = daemon_set([("a1", "a", 0)] * 4 + [("ds0", "pinned:b", 0)] * 4)
    assert victims(result) == [] and not daemon_ran(result)


def test_a_node_removed_mid_grace_ends_the_reservation_and_preempts_nothing_more() -> None:
    result = daemon_set(EIGHT_OF_A, extra=[f.NodeRemoved(t=15.0, node="n01")])
    assert victims(result) == [("a1", "c7")]
    ended = [x.reason for x in result.decisions if isinstance(x, d.ReservationEnded)]
    assert len(ended) == 1 and "n01" in ended[0]
    assert not daemon_ran(result)


@pytest.mark.parametrize(
    ("victim_priority", "why"),
    [(1, None), (3, None), (5, "higher priority (5) than the required-node ask (3)")],
)
def test_the_commit_check_holds_a_required_node_placement_to_the_same_rule(
    victim_priority: int, why: str | None
) -> None:
    """The cache re-checks a hand-made proposal: a victim of b (below its guarantee: no quota) on the
    required node is accepted when its priority is at most the ask's."""
    h = PreemptHarness(preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100})))
    h.nodes("n1", memory=100)
    victim = h.run("b1", 100, "n1", priority=victim_priority, queue_path="root.b")
    h.app("ds", "root.a")
    h.ask("ds", "d", 10, priority=3, node="n1")
    outcome, _ = h.commit(proposal("ds", "d", "n1", [victim]))
    assert outcome.accepted == (1 if why is None else 0)
    assert list(outcome.rejected.values()) == ([] if why is None else [f"victim {victim} has a {why}"])
