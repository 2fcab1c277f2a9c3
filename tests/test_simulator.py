"""The simulator: a hand-written trace replayed in virtual time, checked allocation by allocation;
determinism (architecture: invariant 7); malformed traces; the independent model and the stand-in RM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from sniper.core.config import parse_partition
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.codec import read_trace
from sniper.simulator.model import ClusterModel
from sniper.simulator.rm import StandInRM
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation, simulate
from sniper.simulator.scenarios import scenario
from tests.core_support import partition_raw, queue
from tests.simulation_support import REPORT_KEYS

QUEUES: dict[str, Any] = {
    "name": "default",
    "preemption": {"policy": "none"},
    "queues": [
        {
            "name": "root",
            "queues": [
                {"name": "a", "resources": {"guaranteed": {"memory": "8Gi"}}},
                {"name": "b", "resources": {"max": {"memory": "8Gi"}}},
            ],
        }
    ],
}

TRACE_LINES = [
    msgspec.json.encode({"t": 0, "type": "partition_config", "partition": "default", "config": QUEUES}).decode(),
    '{"t":0,"type":"node_added","node":"n1","capacity":{"memory":8192,"vcore":8000}}',
    '{"t":0,"type":"node_added","node":"n2","capacity":{"memory":16384,"vcore":8000}}',
    '{"t":1,"type":"app_added","app":"a1","queue":"root.a"}',
    '{"t":1,"type":"ask_added","app":"a1","ask":"a1-x","resource":{"memory":4096,"vcore":1000},"count":2,'
    '"duration":10}',
    '{"t":2,"type":"app_added","app":"b1","queue":"root.b"}',
    '{"t":2,"type":"ask_added","app":"b1","ask":"b1-y","resource":{"memory":8192,"vcore":1000},"duration":5}',
    '{"t":2,"type":"app_added","app":"bad","queue":"root"}',
    '{"t":3,"type":"node_added","node":"n3","capacity":{"memory":8192,"vcore":8000}}',
    '{"t":3,"type":"ask_added","app":"a1","ask":"a1-z","resource":{"memory":8192,"vcore":1000},"count":2,"duration":4}',
    '{"t":4,"type":"ask_added","app":"b1","ask":"b1-big","resource":{"memory":16384}}',
    '{"t":5,"type":"node_removed","node":"n3"}',
    '{"t":20,"type":"app_removed","app":"a1"}',
]

# (decision, t, allocation, node, ask): binpacking puts a1-x on the fullest node that fits (n1), b1-y
# where it fits (n2), a1-z on n2 and n3 (equal free room: by name); losing n3 loses alloc-5 and the
# stand-in RM asks for it again (a1-z~1), which waits until n2 frees room at t=7.
EXPECTED: list[tuple[str, float, str, str, str]] = [
    ("Allocated", 1.0, "alloc-1", "n1", "a1-x"),
    ("Allocated", 1.0, "alloc-2", "n1", "a1-x"),
    ("Rejected", 2.0, "", "", ""),  # app "bad" in a parent queue
    ("Allocated", 2.0, "alloc-3", "n2", "b1-y"),
    ("Allocated", 3.0, "alloc-4", "n2", "a1-z"),
    ("Allocated", 3.0, "alloc-5", "n3", "a1-z"),
    ("Rejected", 4.0, "", "", "b1-big"),  # over root.b's max
    ("AllocationLost", 5.0, "alloc-5", "n3", "a1-z"),
    ("Released", 7.0, "alloc-3", "n2", ""),
    ("Released", 7.0, "alloc-4", "n2", ""),
    ("Allocated", 7.0, "alloc-6", "n2", "a1-z~1"),
    ("Released", 11.0, "alloc-1", "n1", ""),
    ("Released", 11.0, "alloc-2", "n1", ""),
    ("Released", 11.0, "alloc-6", "n2", ""),
]


def _trace(tmp_path: Path, lines: list[str], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _events(tmp_path: Path) -> list[f.Feed]:
    events, bad = read_trace(_trace(tmp_path, TRACE_LINES))
    assert bad == []
    return events


def _summary(decisions: list[d.DecisionMsg]) -> list[tuple[str, float, str, str, str]]:
    return [
        (
            type(x).__name__,
            x.t,
            getattr(x, "allocation", ""),
            getattr(x, "node", ""),
            getattr(x, "ask", "") or "",
        )
        for x in decisions
    ]


def _encoded(result: SimulationResult) -> list[bytes]:
    return [msgspec.json.encode(x) for x in result.decisions]


async def test_hand_written_trace_allocation_by_allocation(tmp_path: Path) -> None:
    result = await simulate(_events(tmp_path))
    assert _summary(result.decisions) == EXPECTED
    assert [x.seq for x in result.decisions] == list(range(1, len(EXPECTED) + 1))
    rejected = [x for x in result.decisions if isinstance(x, d.Rejected)]
    assert "root is a parent queue" in rejected[0].reason
    assert "can never fit queue root.b's max" in rejected[1].reason
    allocated = {x.allocation: x for x in result.decisions if isinstance(x, d.Allocated)}
    assert allocated["alloc-6"].resource == {"memory": 8192, "vcore": 1000}
    assert allocated["alloc-3"].queue == "root.b"
    report = result.report
    assert result.violations == 0
    assert report["invariant_violations"] == 0
    assert set(report) >= REPORT_KEYS
    assert report["allocations"] == 6
    assert report["rejected"] == 2
    assert report["pending_at_end"] == 0
    assert report["proposals_rejected"] == 0
    assert report["sim_seconds"] == 20.0
    assert report["retries"] == 1
    assert report["preemptions"] == {"victims": 0, "resources": {}, "cancelled": 0}
    # time-averaged allocated over capacity, sampled each simulated second (worked out by hand)
    assert report["utilization"] == {"memory": round(204800 / 507904, 4), "vcore": round(35000 / 336000, 4)}
    # the end state: everything released, nothing on the removed node
    core = result.runtimes["default"].cache_core
    assert core is not None
    assert core.state.allocations == {}
    assert sorted(core.state.nodes) == ["n1", "n2"]


def test_the_same_trace_twice_gives_the_same_decisions(tmp_path: Path) -> None:
    events = _events(tmp_path)
    first, second = run_simulation(events), run_simulation(events)
    assert _encoded(first) == _encoded(second)
    assert _summary(first.decisions) == EXPECTED


def test_a_bundled_scenario_is_deterministic() -> None:
    sc = scenario("demo", seed=3)
    again = scenario("demo", seed=3)
    assert [msgspec.json.encode(e) for e in sc.events] == [msgspec.json.encode(e) for e in again.events]
    assert sc.events != scenario("demo", seed=4).events
    settings = SimulationSettings(until=60.0)
    first = run_simulation(sc.events, sc.config, settings)
    second = run_simulation(sc.events, sc.config, settings)
    assert len(first.decisions) > 50
    assert _encoded(first) == _encoded(second)
    assert first.violations == 0
    assert first.report["sim_seconds"] <= 60.0


def test_a_malformed_trace_is_read_with_bad_lines_reported_and_skipped(tmp_path: Path) -> None:
    lines = list(TRACE_LINES)
    lines.insert(3, '{"t":1,"type":"app_added","app":"zz"}')  # line 4: no queue
    lines.insert(6, "this is not json")  # line 7
    lines.insert(9, '{"t":2,"type":"ask_added","app":"b1","ask":"q","resource":{"memory":-5}}')  # line 10
    lines.append('{"t":30,"type":"teleport","node":"n1"}')  # line 17
    events, bad = read_trace(_trace(tmp_path, lines, "broken.jsonl"))
    assert [b.where.rsplit(":", 1)[1] for b in bad] == ["4", "7", "10", "17"]
    assert "missing required field `queue`" in bad[0].reason
    assert "malformed" in bad[1].reason
    assert "resource: memory: -5 is outside 0 to 2**53" in bad[2].reason
    assert "teleport" in bad[3].reason
    assert len(events) == len(TRACE_LINES)
    assert _summary(run_simulation(events).decisions) == EXPECTED


def test_until_stops_the_clock(tmp_path: Path) -> None:
    result = run_simulation(_events(tmp_path), settings=SimulationSettings(until=4.0))
    assert result.report["sim_seconds"] == 4.0
    assert all(x.t <= 4.0 for x in result.decisions)
    assert _summary(result.decisions) == EXPECTED[:7]


def test_a_config_given_apart_from_the_trace_is_used(tmp_path: Path) -> None:
    events = [e for e in _events(tmp_path) if not isinstance(e, f.PartitionConfigEvent)]
    fair = parse_partition({**QUEUES, "nodesortpolicy": {"type": "fair"}})
    from sniper.core.config import SchedulerConfig

    result = run_simulation(events, SchedulerConfig(partitions=(fair,)))
    first = next(x for x in result.decisions if isinstance(x, d.Allocated))
    assert first.node == "n2"  # fair: the most free room first
    assert result.violations == 0


# ---------------------------------------------------------------------- the independent model


def _model() -> ClusterModel:
    model = ClusterModel("default", parse_partition(partition_raw(queue("a", maximum={"memory": 8192}), queue("b"))))
    for e in (
        f.NodeAdded(node="n1", capacity={"memory": 8192}),
        f.AppAdded(app="a1", queue="root.a"),
        f.AskAdded(app="a1", ask="k", resource={"memory": 4096}, count=2),
        f.AppAdded(app="b1", queue="root.b"),
        f.AskAdded(app="b1", ask="m", resource={"memory": 8192}, count=1),
    ):
        model.on_event(e)
    return model


_seq = iter(range(1, 10**6))


def _alloc(
    aid: str, app: str, ask: str, node: str = "n1", memory: int = 4096, queue_path: str = "root.a"
) -> d.Allocated:
    return d.Allocated(
        allocation=aid, app=app, ask=ask, queue=queue_path, node=node, resource={"memory": memory}, seq=next(_seq)
    )


@pytest.mark.parametrize(
    ("decisions", "invariant", "fragment"),
    [
        ([_alloc("x1", "a1", "k"), _alloc("x2", "b1", "m", memory=8192, queue_path="root.b")], 1, "over capacity"),
        ([_alloc("x1", "a1", "k"), _alloc("x1", "a1", "k")], 3, "committed twice"),
        (
            [_alloc("x1", "a1", "k", memory=1), _alloc("x2", "a1", "k", memory=1), _alloc("x3", "a1", "k", memory=1)],
            3,
            "allocated 3 times, count 2",
        ),
        ([_alloc("x1", "a1", "k", memory=4096), _alloc("x2", "a1", "k", memory=8192)], 2, "over max 8 GiB"),
        ([_alloc("x1", "a1", "k", node="ghost")], 4, "on missing node ghost"),
        ([_alloc("x1", "a1", "nope")], 3, "unknown ask a1/nope"),
        (
            [
                _alloc("x1", "a1", "k"),
                d.PreemptCancelled(
                    allocation="x1", app="a1", queue="root.a", node="n1", reservation="r", reason="", seq=next(_seq)
                ),
            ],
            5,
            "cancelled, but it was not under notice",
        ),
    ],
)
def test_the_model_reports_each_broken_invariant(decisions: list[d.DecisionMsg], invariant: int, fragment: str) -> None:
    model = _model()
    for x in decisions:
        model.on_decision(x)
    model.check(1.0)
    assert any(v.invariant == invariant and fragment in v.reason for v in model.violations), model.violations


def test_the_model_sees_no_violation_in_a_correct_history() -> None:
    model = _model()
    first = _alloc("x1", "a1", "k")
    model.on_decision(first)
    model.on_decision(first)  # a duplicate delivery of the commit log
    model.on_decision(_alloc("x2", "a1", "k"))
    model.on_decision(d.Released(allocation="x1", app="a1", queue="root.a", node="n1", resource={}, seq=next(_seq)))
    model.on_event(f.NodeRemoved(node="n1"))
    model.on_decision(
        d.AllocationLost(allocation="x2", app="a1", ask="k", queue="root.a", node="n1", resource={}, seq=next(_seq))
    )
    model.check(2.0)
    assert model.violations == []
    assert model.pending_containers() == 1  # b1/m


def test_the_model_flags_allocations_left_on_a_removed_node() -> None:
    model = _model()
    model.on_decision(_alloc("x1", "a1", "k"))
    model.on_event(f.NodeRemoved(node="n1"))
    model.check(3.0)
    assert [(v.invariant, v.t) for v in model.violations] == [(4, 3.0)]


def test_the_model_ignores_a_replayed_event_like_the_cache() -> None:
    model = _model()
    removed = f.NodeRemoved(node="n1", id="e1")
    model.on_event(removed)
    model.on_event(f.NodeAdded(node="n1", capacity={"memory": 8192}, id="e2"))
    model.on_event(removed)  # at-least-once: delivered again after the node came back
    model.on_decision(_alloc("x1", "a1", "k"))
    model.check(1.0)
    assert model.violations == []
    assert model.capacity() == {"memory": 8192}


# ---------------------------------------------------------------------- the stand-in resource manager


def test_the_stand_in_rm_releases_after_duration_and_asks_again_for_lost_work() -> None:
    rm = StandInRM()
    rm.observe(f.AppAdded(app="a1", queue="root.a"))
    rm.observe(f.AskAdded(app="a1", ask="k", resource={"memory": 1}, count=3, duration=10.0, priority=2))
    rm.observe(f.AskAdded(app="a1", ask="once", resource={"memory": 1}, duration=10.0, retry=False))
    assert rm.on_decision(_alloc("x1", "a1", "k"), now=5.0) == []
    assert rm.on_decision(_alloc("x2", "a1", "k"), now=6.0) == []
    assert rm.on_decision(_alloc("x3", "a1", "once"), now=6.0) == []
    assert rm.next_time() == 15.0
    assert rm.due(14.9) == []
    assert rm.due(15.0) == [f.AllocationReleased(t=15.0, allocation="x1")]
    lost = d.AllocationLost(allocation="x2", app="a1", ask="k", queue="root.a", node="n1", resource={})
    (again,) = rm.on_decision(lost, now=8.0)
    assert isinstance(again, f.AskAdded)
    assert (again.ask, again.count, again.resource, again.priority, again.duration) == (
        "k~1",
        1,
        {"memory": 1},
        2,
        10.0,
    )
    assert rm.lost_work == {"default": 2.0}  # started at 6, lost at 8
    killed = rm.on_decision(d.Kill(allocation="x3", app="a1", queue="root.a", node="n1"), now=9.0)
    assert killed == [f.AllocationReleased(t=9.0, allocation="x3")]  # retry: false, so no new ask
    rm.observe(f.AppRemoved(app="a1"))
    lost2 = d.AllocationLost(allocation="x9", app="a1", ask="k~1", queue="root.a", node="n1", resource={})
    assert rm.on_decision(lost2, now=10.0) == []  # the app is gone: nobody asks again
    assert rm.retries == 1


def test_an_ask_withdrawn_and_asked_again_under_its_name_is_a_new_ask(tmp_path: Path) -> None:
    """The cache treats a re-added ask as new (its count starts over); so must the model."""
    lines = [
        *TRACE_LINES[:4],
        '{"t":1,"type":"ask_added","app":"a1","ask":"k","resource":{"memory":1024},"count":1,"duration":2}',
        '{"t":4,"type":"ask_removed","app":"a1","ask":"k"}',
        '{"t":5,"type":"ask_added","app":"a1","ask":"k","resource":{"memory":2048},"count":2,"duration":2}',
        '{"t":6,"type":"app_removed","app":"a1"}',
        '{"t":7,"type":"app_added","app":"a1","queue":"root.a"}',
        '{"t":7,"type":"ask_added","app":"a1","ask":"k","resource":{"memory":1024},"count":1,"duration":2}',
    ]
    events, bad = read_trace(_trace(tmp_path, lines))
    assert bad == []
    result = run_simulation(events)
    allocated = [(x.t, x.ask, x.resource["memory"]) for x in result.decisions if isinstance(x, d.Allocated)]
    assert allocated == [(1.0, "k", 1024), (5.0, "k", 2048), (5.0, "k", 2048), (7.0, "k", 1024)]
    assert result.violations == 0, result.report["violations"]
    assert result.report["pending_at_end"] == 0


def test_the_model_takes_an_ask_refused_before_as_new_when_it_comes_again() -> None:
    model = _model()
    model.on_event(f.AskAdded(app="late", ask="k", resource={"memory": 1}, count=0))
    model.on_decision(d.Rejected(reason="ask k: unknown app late", app="late", ask="k", seq=next(_seq)))
    model.on_event(f.AppAdded(app="late", queue="root.b"))
    model.on_event(f.AskAdded(app="late", ask="k", resource={"memory": 1}, count=1))
    model.on_decision(_alloc("x1", "late", "k", memory=1, queue_path="root.b"))
    model.check(1.0)
    assert model.violations == []
    assert model.pending_containers() == 3  # a1/k twice and b1/m; late/k got its container
