"""May this container be a victim? One table, one row per situation: the container, the ask it would go
for, the policy's mode, and the refusal :func:`sniper.core.preemption.eligibility.refusal` gives (``None``:
it may go). Every refusal has a row, and rows where a prefilter that restated the first checks in another
order would answer otherwise (an opportunistic container that is pinned or already leaving, a
required-node ask in a disabled queue, a young container for a required-node ask). The placer's
candidate index and the cache's commit ask the same function: the last tests hold them to it.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

import pytest

from sniper.core.cache import Cache
from sniper.core.config import parse_partition
from sniper.core.preemption.eligibility import Refusal, explain, queue_refusal, refusal, standing
from sniper.core.preemption.min_runtime import young
from sniper.core.preemption.placement import VictimPlacer
from sniper.core.state import Allocation, Ask
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import queue
from tests.preemption_support import PreemptHarness, preemption_raw, proposal

Mode = Literal["across", "intra", "required", "baseline"]

# Containers of the world below, by name: (app, ask, priority, am, opportunistic, required node).
CONTAINERS: dict[str, tuple[str, int, bool, bool, str | None]] = {
    "b_task": ("b1", 0, False, False, None),
    "b_pinned": ("b1", 0, False, False, "n1"),
    "b_opportunistic_pinned": ("b1", 0, False, True, "n1"),
    "b_noticed": ("b1", 0, False, False, None),
    "b_opportunistic_noticed": ("b1", 0, False, True, None),
    "b_high": ("b1", 9, False, False, None),
    "c_task": ("c1", 0, False, False, None),
    "c_other_app": ("c2", 0, False, False, None),
    "c_opportunistic": ("c1", 0, False, True, None),
    "a_other_app": ("a2", 0, False, False, None),
    "a_other_am": ("a2", 0, True, False, None),
    "a_other_high": ("a2", 9, False, False, None),
    "a_same_app": ("a1", 0, False, False, None),
    "p_task": ("p1", 0, False, False, None),
    "y_task": ("y1", 0, False, False, None),
    "y_opportunistic": ("y1", 0, False, True, None),
}
NOTICED = ("b_noticed", "b_opportunistic_noticed")
# Beneficiary asks, by name: (app, priority, required node).
ASKS: dict[str, tuple[str, int, str | None]] = {
    "a_want": ("a1", 5, None),
    "a_required": ("a1", 5, "n1"),
    "c_want": ("c1", 5, None),
    "y_want": ("y2", 5, None),
}


def _world() -> tuple[Cache, dict[str, Allocation], dict[str, Ask]]:
    """root.a and root.b; root.c with preemption disabled; root.p of a higher business priority; root.y,
    whose containers must run ten minutes before they may go (every container here has just started).
    One node holds every container named in :data:`CONTAINERS`; the asks of :data:`ASKS` wait."""
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}),
        queue("b", guaranteed={"memory": 100}),
        queue("c", guaranteed={"memory": 100}, preemption_policy="disabled"),
        queue("p", guaranteed={"memory": 100}, priority_offset="5"),
        queue("y", guaranteed={"memory": 100}, preemption_min_runtime="10m"),
    )
    cache = Cache("default", parse_partition(raw))
    cache.handle_event(f.NodeAdded(node="n1", capacity={"memory": 10_000, "vcore": 10_000}))
    for app in ("a1", "a2", "b1", "c1", "c2", "p1", "y1", "y2"):
        cache.handle_event(f.AppAdded(app=app, queue=f"root.{app[0]}"))
    allocations: dict[str, Allocation] = {}
    for name, (app, priority, am, opportunistic, node) in CONTAINERS.items():
        cache.handle_event(
            f.AskAdded(
                app=app,
                ask=name,
                resource={"memory": 10},
                priority=priority,
                am=am,
                node=node,
                execution_type="opportunistic" if opportunistic else "guaranteed",
            )
        )
        cache.allocate(app, name, "n1")
        (aid,) = [a for a in cache.state.apps[app].allocations if cache.state.allocations[a].ask == name]
        allocations[name] = cache.state.allocations[aid]
    cache.commit(p.VictimsMarked(victims=[allocations[n].id for n in NOTICED], deadline=15.0, policy="sniper"))
    asks: dict[str, Ask] = {}
    for name, (app, priority, node) in ASKS.items():
        cache.handle_event(f.AskAdded(app=app, ask=name, resource={"memory": 10}, priority=priority, node=node))
        asks[name] = cache.state.apps[app].asks[name]
    assert not [x for x in cache.drain().decisions if isinstance(x, d.Rejected)]
    return cache, allocations, asks


@dataclasses.dataclass(frozen=True)
class Row:
    situation: str
    victim: str
    ask: str | None
    mode: Mode
    expected: Refusal | None


TABLE = [
    Row("a task of another queue may go across queues", "b_task", "a_want", "across", None),
    Row("a container placed for a required node never goes", "b_pinned", "a_want", "across", "pinned"),
    Row("nor for a required-node ask", "b_pinned", "a_required", "required", "pinned"),
    Row(
        "an opportunistic container placed for a required node", "b_opportunistic_pinned", "a_want", "across", "pinned"
    ),
    Row("a container under notice is leaving", "b_noticed", "a_want", "across", "preempting"),
    Row("an opportunistic one under notice too", "b_opportunistic_noticed", "a_want", "across", "preempting"),
    Row("under notice, for a required-node ask", "b_noticed", "a_required", "required", "preempting"),
    Row(
        "an opportunistic container of a disabled queue goes across queues", "c_opportunistic", "a_want", "across", None
    ),
    Row("and within the ask's queue", "c_opportunistic", "c_want", "intra", None),
    Row("a disabled queue's task: the queue relations refuse it", "c_task", "a_want", "across", "queue_relation"),
    Row("a required-node ask takes a disabled queue's task", "c_task", "a_required", "required", None),
    Row("a required-node ask takes a lower priority in another queue", "b_task", "a_required", "required", None),
    Row("a required-node ask takes a task in its own queue", "a_other_app", "a_required", "required", None),
    Row("a required-node ask never takes a higher priority", "b_high", "a_required", "required", "higher_priority"),
    Row("within a queue: a lower-priority task of another app", "a_other_app", "a_want", "intra", None),
    Row("within a disabled queue: none", "c_other_app", "c_want", "intra", "disabled"),
    Row("within a queue: not the ask's own app", "a_same_app", "a_want", "intra", "not_lower_in_queue"),
    Row("within a queue: not an application master", "a_other_am", "a_want", "intra", "not_lower_in_queue"),
    Row("within a queue: not a higher priority", "a_other_high", "a_want", "intra", "not_lower_in_queue"),
    Row("within a queue: not another queue's task", "b_task", "a_want", "intra", "not_lower_in_queue"),
    Row("across queues: not the ask's own queue", "a_other_app", "a_want", "across", "queue_relation"),
    Row("across queues: not a queue of higher business priority", "p_task", "a_want", "across", "queue_relation"),
    Row("for no ask: a task of a queue that allows preemption", "b_task", None, "baseline", None),
    Row("for no ask: a container under notice", "b_noticed", None, "baseline", "preempting"),
    Row("for no ask: a disabled queue's task", "c_task", None, "baseline", "disabled"),
    Row("for no ask: a disabled queue's opportunistic container", "c_opportunistic", None, "baseline", None),
    Row("for no ask, which names no node: a container placed for a required node", "b_pinned", None, "baseline", None),
    Row("a task younger than its queue's minimum runtime stays", "y_task", "a_want", "across", "young"),
    Row("within its own queue too", "y_task", "y_want", "intra", "young"),
    Row("for no ask too", "y_task", None, "baseline", "young"),
    Row("a required-node ask takes a young task", "y_task", "a_required", "required", None),
    Row("an opportunistic container of that queue goes at any age", "y_opportunistic", "a_want", "across", None),
    Row("and to the baseline", "y_opportunistic", None, "baseline", None),
]


@pytest.fixture(scope="module")
def world() -> tuple[Cache, dict[str, Allocation], dict[str, Ask]]:
    return _world()


@pytest.mark.parametrize("row", TABLE, ids=[row.situation for row in TABLE])
def test_each_situation_gets_its_refusal(row: Row, world: tuple[Cache, dict[str, Allocation], dict[str, Ask]]) -> None:
    cache, allocations, asks = world
    alloc = allocations[row.victim]
    ask = None if row.ask is None else asks[row.ask]
    now = cache.state.now
    why = refusal(alloc, ask, now=now, intra=row.mode == "intra", required_node=row.mode == "required")
    assert why == row.expected
    if why is not None:
        assert explain(why, alloc, ask)


def test_the_table_covers_every_refusal_in_every_mode_it_can_arise_in() -> None:
    assert {row.expected for row in TABLE} - {None} == set(get_args(Refusal))
    assert {row.mode for row in TABLE} == set(get_args(Mode))


def test_the_placers_candidates_are_what_the_rule_does_not_refuse_whatever_the_ask(
    world: tuple[Cache, dict[str, Allocation], dict[str, Ask]],
) -> None:
    """The placer indexes a node's candidates by the parts of the rule that read the container and its
    queue alone: within a queue, everything but the pinned, the leaving, a disabled queue's tasks and
    young tasks."""
    cache, allocations, _ = world
    request = p.PlacementRequest(
        id="r",
        policy="intra_queue",
        view_seq=0,
        budget={"memory": 10_000},
        quotas={},
        beneficiaries=[],
        intra_queue=True,
    )
    placer = VictimPlacer(cache.state, request)
    candidates = {entry[3].id for entry in placer.by_node["n1"]}
    expected = {
        alloc.id
        for alloc in allocations.values()
        if standing(alloc) is None
        and (alloc.opportunistic or (queue_refusal(alloc.queue) is None and not young(alloc, cache.state.now)))
    }
    assert candidates == expected
    names = {name for name, alloc in allocations.items() if alloc.id in candidates}
    left_out = {"b_pinned", "b_opportunistic_pinned", *NOTICED, "c_task", "c_other_app", "y_task"}
    assert names == set(CONTAINERS) - left_out


def test_an_intra_queue_commit_refuses_a_victim_whose_queue_has_preemption_disabled() -> None:
    """A queue disabled after the round placed its victims: the commit asks the rule the placer asked."""
    raw = preemption_raw(queue("a", guaranteed={"memory": 200}), intra_queue=True)
    h = PreemptHarness(raw)
    h.nodes("n1")
    (victim,) = h.fill("low", "root.a", "n1", [100])
    h.app("high", "root.a", priority=5)
    h.ask("high", "big", 100)
    h.feed(f.PartitionConfigEvent(config=preemption_raw(queue("a", preemption_policy="disabled"), intra_queue=True)))
    outcome, _ = h.commit(proposal("high", "big", "n1", [victim], policy="intra_queue"))
    assert outcome.accepted == 0
    assert list(outcome.rejected.values()) == [f"victim {victim}'s queue has preemption disabled"]
