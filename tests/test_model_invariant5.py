"""The independent checker's invariant 5 (architecture: Invariants): 5a across queues judged by dominant
share (DRF), 5b inside one queue by priority, the reservation recorded before the victim is judged, and
the fence in YuniKorn's direction. Fed by hand: feed events, then decisions."""

from __future__ import annotations

import itertools

import pytest

from sniper.core.config import parse_partition
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.model import ClusterModel
from tests.core_support import queue
from tests.preemption_support import preemption_raw

HALF = {"memory": 100, "vcore": 100}
_seq = itertools.count(1)


def model(*queues: dict[str, object]) -> ClusterModel:
    m = ClusterModel("default", parse_partition(preemption_raw(*queues)))
    for n in ("n1", "n2"):
        m.on_event(f.NodeAdded(node=n, capacity={"memory": 100, "vcore": 100}))
    return m


def run(
    m: ClusterModel, app: str, queue_path: str, ask: str, count: int, resource: dict[str, int], priority: int = 0
) -> list[str]:
    m.on_event(f.AppAdded(app=app, queue=queue_path))
    m.on_event(f.AskAdded(app=app, ask=ask, resource=resource, count=count, priority=priority))
    ids = []
    for i in range(count):
        aid = f"{app}-{ask}-{i}"
        node = "n1" if i < count // 2 or count == 1 else "n2"
        m.on_decision(
            d.Allocated(
                allocation=aid, app=app, ask=ask, queue=queue_path, node=node, resource=resource, seq=next(_seq)
            )
        )
        ids.append(aid)
    return ids


def preempt(
    m: ClusterModel, victim: str, for_app: str, for_ask: str, for_queue: str, policy: str = "sniper", **kw: object
) -> list[str]:
    alloc = m.allocations[victim]
    before = len(m.violations)
    m.on_decision(
        d.Preempt(
            allocation=victim, app=alloc.app, queue=alloc.queue, node=alloc.node, resource=alloc.resource,
            for_ask=for_ask, for_app=for_app, for_queue=for_queue, deadline=100.0, reservation=f"r-{victim}",
            policy=policy, for_resource=alloc.resource, seq=next(_seq), **kw,  # type: ignore[arg-type]
        )
    )  # fmt: skip
    return [v.reason for v in m.violations[before:]]


def test_a_memory_heavy_victim_is_judged_by_dominant_share() -> None:
    """b holds 160 of 200 MiB and 40 of 200 vcores (guarantee 100/100): above its guarantee though below it
    on vcores; it may lose a container down to 120 MiB, not one more down to 80."""
    m = model(queue("a", guaranteed=HALF), queue("b", guaranteed=HALF))
    victims = run(m, "b1", "root.b", "t", 4, {"memory": 40, "vcore": 10})
    m.on_event(f.AppAdded(app="a1", queue="root.a"))
    m.on_event(f.AskAdded(app="a1", ask="x", resource={"memory": 40, "vcore": 10}, count=2))
    assert preempt(m, victims[0], "a1", "x", "root.a") == []
    assert any("below its guarantee" in r for r in preempt(m, victims[1], "a1", "x", "root.a"))


@pytest.mark.parametrize(
    ("ideal", "flagged"), [({"memory": 160, "vcore": 40}, True), ({"memory": 110, "vcore": 90}, False)]
)
def test_a_victim_chosen_while_its_queue_was_over_its_ideal_nowhere_is_flagged(
    ideal: dict[str, int], flagged: bool
) -> None:
    m = model(queue("a", guaranteed=HALF), queue("b", guaranteed=HALF))
    victims = run(m, "b1", "root.b", "t", 4, {"memory": 40, "vcore": 10})
    m.on_event(f.AppAdded(app="a1", queue="root.a"))
    m.on_event(f.AskAdded(app="a1", ask="x", resource={"memory": 40, "vcore": 10}, count=1))
    reasons = preempt(m, victims[0], "a1", "x", "root.a", victim_queue_ideal=ideal)
    assert any("over its ideal nowhere" in r for r in reasons) is flagged, reasons


@pytest.mark.parametrize(("victim_priority", "ask_priority", "ok"), [(0, 10, True), (10, 10, False), (10, 0, False)])
def test_intra_queue_victims_are_judged_by_priority_not_by_the_guarantee(
    victim_priority: int, ask_priority: int, ok: bool
) -> None:
    """Inside one queue (5b) a swap leaves the queue's usage as it was: no guarantee check, even for a
    queue below its guarantee; the victim must have a lower priority than the ask."""
    m = model(queue("a", guaranteed={"memory": 200, "vcore": 200}), queue("b"))
    (victim,) = run(m, "low", "root.a", "t", 1, {"memory": 40, "vcore": 10}, priority=victim_priority)
    m.on_event(f.AppAdded(app="urgent", queue="root.a"))
    m.on_event(f.AskAdded(app="urgent", ask="u", resource={"memory": 40, "vcore": 10}, priority=ask_priority))
    reasons = preempt(m, victim, "urgent", "u", "root.a", policy="intra_queue")
    assert (reasons == []) is ok, reasons
    if not ok:
        assert "priority" in reasons[0]


@pytest.mark.parametrize(
    ("victim_queue", "for_queue", "crosses"),
    [("root.team.x", "root.other", False), ("root.other", "root.team.y", True), ("root.team.x", "root.team.y", False)],
)
def test_the_fence_stops_asks_inside_it_from_preempting_outside(
    victim_queue: str, for_queue: str, crosses: bool
) -> None:
    team = queue(
        "team", queue("x", guaranteed={"memory": 10}), queue("y", guaranteed={"memory": 10}), preemption_policy="fence"
    )
    m = model(team, queue("other", guaranteed={"memory": 10}))
    victims = run(m, "v", victim_queue, "t", 4, {"memory": 40})
    m.on_event(f.AppAdded(app="w", queue=for_queue))
    m.on_event(f.AskAdded(app="w", ask="k", resource={"memory": 40}))
    reasons = preempt(m, victims[0], "w", "k", for_queue)
    assert any("outside the fence" in r for r in reasons) is crosses, reasons


@pytest.mark.parametrize(
    ("db_opted_out", "a_holds", "flagged"),
    [(True, 0, False), (False, 0, True), (True, 1, True)],
)
def test_a_victim_over_its_ideal_nowhere_passes_only_to_spare_an_opted_out_app_for_a_queue_below_its_guarantee(
    db_opted_out: bool, a_holds: int, flagged: bool
) -> None:
    """b is over its ideal nowhere; c's db opted out (or not). Taking b's task for a, below its guarantee,
    spares db (5a's soft opt-out clause); for a at its guarantee, or with no opted-out app, it is flagged."""
    m = model(queue("a", guaranteed={"memory": 20, "vcore": 20}), queue("b"), queue("c"))
    victims = run(m, "b1", "root.b", "t", 4, {"memory": 40, "vcore": 10})
    m.on_event(f.AppAdded(app="db", queue="root.c", allow_preemption=not db_opted_out))
    m.on_event(f.AskAdded(app="db", ask="d", resource={"memory": 20, "vcore": 5}))
    db = {"memory": 20, "vcore": 5}
    placed = d.Allocated(allocation="db-0", app="db", ask="d", queue="root.c", node="n2", resource=db, seq=next(_seq))
    m.on_decision(placed)
    if a_holds:
        run(m, "a0", "root.a", "held", a_holds, {"memory": 20, "vcore": 5})
    m.on_event(f.AppAdded(app="a1", queue="root.a"))
    m.on_event(f.AskAdded(app="a1", ask="x", resource={"memory": 40, "vcore": 10}))
    reasons = preempt(m, victims[0], "a1", "x", "root.a", victim_queue_ideal={"memory": 160, "vcore": 40})
    assert any("over its ideal nowhere" in r for r in reasons) is flagged, reasons
