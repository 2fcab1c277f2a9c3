"""The simulator's invariant check at quiescence looks only at the nodes a step touched (and those that
failed before) and still records exactly what the check of every allocation records: step by step on
every bundled scenario with violations injected into the model, and on random sequences of node changes
and placements."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator import run as simulator_run
from sniper.simulator.model import ClusterModel, Violation
from sniper.simulator.model_allocation import ModelAllocation
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import SCENARIOS, scenario


def _seen(violations: list[Violation]) -> list[tuple[float, int, str]]:
    return [(v.t, v.invariant, v.reason) for v in violations]


class _Misinformed(ClusterModel):
    """A model told of a node smaller than the scheduler knows and of a removal the scheduler never hears
    of: violations its checks must find."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events = 0

    def on_event(self, event: f.Feed) -> None:
        if isinstance(event, f.NodeAdded) and not self.nodes:  # the first node: half its size to the model
            event = f.NodeAdded(t=event.t, node=event.node, capacity={k: v // 2 for k, v in event.capacity.items()})
        super().on_event(event)
        self.events += 1
        if self.events == 3 * len(self.nodes) and len(self.nodes) > 2:  # a busy node vanishes, for the model only
            busiest = max(sorted(self.nodes), key=lambda n: len(self.on_node.get(n, ())))
            super().on_event(f.NodeRemoved(t=event.t, node=busiest))


class _BothChecks(_Misinformed):
    """Every room check done both ways, compared, and kept once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mismatches: list[tuple[float, list[tuple[float, int, str]], list[tuple[float, int, str]]]] = []
        self.compared = 0

    def _check_room(self, t: float, held: dict[str, list[ModelAllocation]]) -> set[str]:
        start = len(self.violations)
        failing = super()._check_room(t, held)
        touched = self.violations[start:]
        del self.violations[start:]
        everything = super()._check_room(t, self._rooms(full=True))
        self.compared += 1
        if everything != failing or _seen(self.violations[start:]) != _seen(touched):
            self.mismatches.append((t, _seen(touched), _seen(self.violations[start:])))
        return failing


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_checking_what_each_step_touched_finds_the_violations_checking_everything_finds(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(simulator_run, "ClusterModel", _BothChecks)
    sc = scenario(name)
    result = run_simulation(sc.events, sc.config, SimulationSettings(until=900.0))
    models = [m for m in result.models.values() if isinstance(m, _BothChecks)]
    assert models and all(m.compared > 0 for m in models)
    assert [m.mismatches for m in models] == [[] for _ in models]
    found = {v.invariant for m in models for v in m.violations}
    assert 1 in found or 4 in found, "the injected violations were found"


def test_the_full_check_behind_its_flag_reports_what_the_touched_check_reports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(simulator_run, "ClusterModel", _Misinformed)
    sc = scenario("demo")
    touched = run_simulation(sc.events, sc.config, SimulationSettings(until=300.0))
    everything = run_simulation(sc.events, sc.config, SimulationSettings(until=300.0, full_check=True))
    assert touched.decisions == everything.decisions
    assert touched.summary.invariant_violations == everything.summary.invariant_violations > 0
    assert touched.summary.partitions == everything.summary.partitions


def test_a_node_left_over_capacity_is_reported_at_every_check_until_a_release_brings_it_back() -> None:
    model = ClusterModel("default")
    model.on_event(f.AppAdded(app="a", queue="root.a"))
    model.on_event(f.AskAdded(app="a", ask="x", resource={"memory": 1}, count=10))
    model.on_event(f.NodeAdded(node="n1", capacity={"memory": 10}))
    model.on_event(f.NodeAdded(node="n2", capacity={"memory": 10}))
    for i, node in enumerate(["n1", "n1", "n2"]):
        model.on_decision(
            d.Allocated(allocation=f"c{i}", app="a", ask="x", queue="root.a", node=node, resource={"memory": 6})
        )
    model.check(1.0)
    model.check(2.0)  # nothing changed: n1 is still over, and said again, as the full check says it
    model.on_event(f.NodeRemoved(t=2.5, node="n2"))
    model.check(3.0)
    model.on_decision(d.Released(allocation="c0", app="a", queue="root.a", node="n1", resource={"memory": 6}))
    model.on_decision(d.Released(allocation="c2", app="a", queue="root.a", node="n2", resource={"memory": 6}))
    model.check(4.0)
    assert [(v.t, v.invariant) for v in model.violations] == [(1.0, 1), (2.0, 1), (3.0, 1), (3.0, 4)]
    assert model.failing == set()


NODES = ["n1", "n2", "n3"]
_op = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(NODES), st.integers(0, 12)),
    st.tuples(st.just("resize"), st.sampled_from(NODES), st.integers(0, 12)),
    st.tuples(st.just("remove"), st.sampled_from(NODES), st.just(0)),
    st.tuples(st.just("place"), st.sampled_from(NODES), st.integers(1, 6)),
    st.tuples(st.just("release"), st.sampled_from(NODES), st.integers(0, 5)),
    st.tuples(st.just("check"), st.sampled_from(NODES), st.just(0)),
)


@given(st.lists(_op, max_size=40))
@settings(max_examples=200, deadline=None)
def test_random_node_changes_and_placements_are_checked_alike_both_ways(ops: list[tuple[str, str, int]]) -> None:
    touched, everything = ClusterModel("default"), ClusterModel("default")
    models = (touched, everything)
    for m in models:
        m.on_event(f.AppAdded(app="a", queue="root.a"))
        m.on_event(f.AskAdded(app="a", ask="x", resource={"memory": 1}, count=10**6))
    placed = 0
    for t, (op, node, amount) in enumerate(ops):
        for m in models:
            if op == "add":
                m.on_event(f.NodeAdded(t=t, node=node, capacity={"memory": amount}))
            elif op == "resize":
                m.on_event(f.NodeUpdated(t=t, node=node, capacity={"memory": amount}))
            elif op == "remove":
                m.on_event(f.NodeRemoved(t=t, node=node))
            elif op == "place":
                m.on_decision(
                    d.Allocated(
                        t=t,
                        allocation=f"c{placed}",
                        app="a",
                        ask="x",
                        queue="root.a",
                        node=node,
                        resource={"memory": amount},
                    )
                )
            elif op == "release" and (held := sorted(m.on_node.get(node, ()))):
                gone = held[amount % len(held)]
                m.on_decision(d.Released(t=t, allocation=gone, app="a", queue="root.a", node=node, resource={}))
        placed += op == "place"
        if op == "check":
            touched.check(float(t))
            everything.check(float(t), full=True)
            assert _seen(touched.violations) == _seen(everything.violations)
    touched.check(1e6)
    everything.check(1e6, full=True)
    assert _seen(touched.violations) == _seen(everything.violations)
