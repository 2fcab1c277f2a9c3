"""Issue 9's quota-side defects as scenarios through the real actors in virtual time: DRF shapes (items 1
and 14), the allocator's order (item 2), intra-queue preemption (item 6), the fence (item 17).

Each scenario is the trace that broke the rule; the assertions are the corrected outcome, compared with the
YARN proportional baseline where the issue asks for it (time to guarantee no worse).
"""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core.config import parse_config
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.compare import compare
from sniper.simulator.run import SimulationResult, SimulationSettings
from sniper.simulator.scenarios import PREEMPTION, GiB, _job, _partition, _queue, scenario

UNTIL = 300.0


def nodes(count: int, memory: int, vcore: int, gpu: int = 0) -> list[f.Feed]:
    cap = {"memory": memory, "vcore": vcore} | ({"gpu": gpu} if gpu else {})
    return [f.NodeAdded(t=0.0, node=f"n{i:03d}", capacity=dict(cap)) for i in range(count)]


def gpu_job(events: list[f.Feed], t: float, app: str, queue: str, count: int, duration: float) -> None:
    events.append(f.AppAdded(t=t, app=app, queue=queue))
    events.append(
        f.AskAdded(
            t=t,
            app=app,
            ask=f"{app}-task",
            resource={"memory": 4 * GiB, "vcore": 1000, "gpu": 1},
            count=count,
            duration=duration,
        )
    )


def simulate(queues: list[dict[str, Any]], events: list[f.Feed], policies: list[str], **pre: Any) -> dict[str, Any]:
    raw = _partition(queues, dict(PREEMPTION) | pre)
    events = sorted(events, key=lambda e: e.t)
    return compare(events, parse_config(raw), policies, SimulationSettings(until=UNTIL))


def ttg(result: SimulationResult, queue: str) -> dict[str, Any]:
    entry: dict[str, Any] = result.report["time_to_guarantee"][queue]
    return entry


def preempts(result: SimulationResult) -> list[d.Preempt]:
    return [x for x in result.decisions if isinstance(x, d.Preempt) and not x.observe_only]


def no_violations(runs: dict[str, SimulationResult]) -> None:
    for policy, result in runs.items():
        assert result.report["invariant_violations"] == 0, (policy, result.report["violations"][:5])


def meets_guarantee_no_later_than_proportional(runs: dict[str, SimulationResult], queue: str) -> None:
    mine, yarn = ttg(runs["sniper"], queue), ttg(runs["proportional"], queue)
    assert mine["unmet"] == 0 and mine["max"] is not None, mine
    if yarn["max"] is not None:
        assert mine["max"] <= yarn["max"], (mine, yarn)


# ---------------------------------------------------------------------- item 1: DRF shapes

HALF = {"memory": 10 * 64 * GiB // 2, "vcore": 10 * 16_000 // 2}


@pytest.fixture(scope="module")
def memory_heavy() -> dict[str, SimulationResult]:
    """b runs 16 GiB / 1-core containers over the whole cluster: twice its memory guarantee, half its
    vcore guarantee. a (same guarantee) then asks for its guarantee in the same shape."""
    events = nodes(10, 64 * GiB, 16_000)
    _job(events, 1, "b-0", "root.b", 40, 16 * GiB, 1000, 1000)
    _job(events, 30, "a-0", "root.a", 20, 16 * GiB, 1000, 1000)
    return simulate([_queue("a", HALF), _queue("b", HALF)], events, ["sniper", "proportional"])


def test_a_memory_heavy_queue_above_its_guarantee_is_preempted(memory_heavy: dict[str, Any]) -> None:
    no_violations(memory_heavy)
    victims = preempts(memory_heavy["sniper"])
    assert victims and {x.queue for x in victims} == {"root.b"}
    assert len(victims) == 20  # b keeps exactly its guarantee's dominant share of memory
    meets_guarantee_no_later_than_proportional(memory_heavy, "root.a")


@pytest.fixture(scope="module")
def gpu_hog() -> dict[str, SimulationResult]:
    """b holds every GPU (1 GPU, 4 GiB, 1 core each); a, with the same guarantee, asks for half. A round
    may preempt a quarter of the cluster (8 GPUs): with a tenth (3 GPUs) b would stop at 17, inside the
    deadzone over its guarantee of 16 (a queue within it keeps what it holds, as in YARN)."""
    events = nodes(8, 64 * GiB, 16_000, gpu=4)
    g = {"memory": 8 * 64 * GiB // 2, "vcore": 8 * 16_000 // 2, "gpu": 16}
    gpu_job(events, 1, "b-0", "root.b", 32, 1000)
    gpu_job(events, 30, "a-0", "root.a", 16, 1000)
    return simulate(
        [_queue("a", g), _queue("b", g)], events, ["sniper", "proportional"], total_preemption_per_round=0.25
    )


def test_a_gpu_hog_gives_its_siblings_their_gpus(gpu_hog: dict[str, Any]) -> None:
    no_violations(gpu_hog)
    victims = preempts(gpu_hog["sniper"])
    assert len(victims) == 16 and {x.queue for x in victims} == {"root.b"}
    meets_guarantee_no_later_than_proportional(gpu_hog, "root.a")


@pytest.fixture(scope="module")
def third_on_memory() -> dict[str, SimulationResult]:
    """Two queues under their guarantee, a third far above it on memory only."""
    third = {"memory": 12 * 64 * GiB // 3, "vcore": 12 * 16_000 // 3}
    events = nodes(12, 64 * GiB, 16_000)
    _job(events, 1, "c-0", "root.c", 48, 16 * GiB, 1000, 1000)
    _job(events, 30, "a-0", "root.a", 8, 16 * GiB, 1000, 1000)
    _job(events, 30, "b-0", "root.b", 6, 16 * GiB, 2000, 1000)
    queues = [_queue("a", third), _queue("b", third), _queue("c", third)]
    return simulate(queues, events, ["sniper", "proportional"])


def test_two_queues_under_guarantee_take_back_from_a_third_above_it_on_memory(
    third_on_memory: dict[str, Any],
) -> None:
    no_violations(third_on_memory)
    victims = preempts(third_on_memory["sniper"])
    assert victims and {x.queue for x in victims} == {"root.c"}
    assert {x.for_queue for x in victims} == {"root.a", "root.b"}
    for queue in ("root.a", "root.b"):
        meets_guarantee_no_later_than_proportional(third_on_memory, queue)


# ---------------------------------------------------------------------- item 2: the allocator's order


@pytest.fixture(scope="module")
def low_priority_below_guarantee() -> dict[str, SimulationResult]:
    """high (priority 10) borrows the cluster with short containers and always wants more; low (priority
    0, same guarantee) holds a quarter of its guarantee and asks for the rest. One-way priority forbids
    low to preempt high, so only the allocator's order can give low its guarantee back."""
    half = {"memory": 8 * 64 * GiB // 2, "vcore": 8 * 16_000 // 2}
    events = nodes(8, 64 * GiB, 16_000)
    _job(events, 0, "low-0", "root.low", 8, 8 * GiB, 2000, 1000)
    _job(events, 1, "high-0", "root.high", 400, 8 * GiB, 2000, 30)
    _job(events, 5, "low-1", "root.low", 24, 8 * GiB, 2000, 1000)
    queues = [_queue("high", half, None, priority_offset="10"), _queue("low", half, None, priority_offset="0")]
    return simulate(queues, events, ["sniper", "proportional", "none"])


def test_a_low_priority_queue_below_its_guarantee_recovers_it_under_every_policy(
    low_priority_below_guarantee: dict[str, Any],
) -> None:
    no_violations(low_priority_below_guarantee)
    for policy, result in low_priority_below_guarantee.items():
        low = ttg(result, "root.low")
        assert low["unmet"] == 0 and low["max"] is not None and low["max"] <= 60, (policy, low)
    # sniper keeps one-way priority: nothing of high's is preempted for low (YARN's baseline does preempt)
    assert not [x for x in preempts(low_priority_below_guarantee["sniper"]) if x.queue == "root.high"]


# ---------------------------------------------------------------------- item 6: intra-queue preemption


@pytest.fixture(scope="module")
def intra_queue() -> dict[str, SimulationResult]:
    """One queue: a priority-0 app fills the cluster; then an app of the same queue asks at priority 10."""
    whole = {"memory": 4 * 64 * GiB, "vcore": 4 * 16_000}
    events = nodes(4, 64 * GiB, 16_000)
    _job(events, 1, "batch", "root.a", 32, 8 * GiB, 1000, 1000, priority=0)
    _job(events, 30, "urgent", "root.a", 8, 8 * GiB, 1000, 100, priority=10)
    queues = [_queue("a", whole, None, application_sort_policy="priority"), _queue("b")]
    return simulate(queues, events, ["sniper", "none"], intra_queue=True)


def test_intra_queue_preemption_keeps_invariant_5b(intra_queue: dict[str, Any]) -> None:
    no_violations(intra_queue)
    victims = preempts(intra_queue["sniper"])
    assert len(victims) == 8
    assert {(x.policy, x.queue, x.app, x.for_app) for x in victims} == {("intra_queue", "root.a", "batch", "urgent")}


def test_policy_none_switches_off_intra_queue_preemption_too(intra_queue: dict[str, Any]) -> None:
    assert preempts(intra_queue["none"]) == []


# ---------------------------------------------------------------------- item 17: the fence


@pytest.fixture(scope="module")
def fence() -> dict[str, SimulationResult]:
    sc = scenario("fence")
    return compare(sc.events, sc.config, ["sniper", "proportional"], SimulationSettings(until=UNTIL))


def test_an_ask_inside_a_fence_never_preempts_outside_it(fence: dict[str, Any]) -> None:
    no_violations(fence)
    victims = preempts(fence["sniper"])
    for_y = {x.queue for x in victims if x.for_queue == "root.team.y"}
    assert for_y == {"root.team.x"}  # other is over its guarantee too, but outside team's fence
    assert {x.queue for x in victims if x.for_queue == "root.ext"} <= {"root.other", "root.team.x"}
    for queue in ("root.team.y", "root.ext"):
        meets_guarantee_no_later_than_proportional(fence, queue)
