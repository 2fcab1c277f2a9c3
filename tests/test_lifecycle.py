"""Lifecycles as transition tables (:mod:`sniper.core.lifecycle`): the state refuses a change its table has no
move for, a state rebuilt from :func:`sniper.core.cache.state_changes` puts every allocation back in its phase
(a killed one stays killed), and replay turns a logged decision into the table's path from the phase the
object is in, so a duplicate changes nothing. docs/architecture.md draws the tables as they are."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from sniper.core import lifecycle
from sniper.core.cache import Cache, state_changes
from sniper.core.config import partition_to_raw
from sniper.core.recovery import apply_logged
from sniper.core.state import PartitionState, StateError
from sniper.messages import decisions as d
from sniper.messages import protocol as p
from tests.core_support import config_of, fingerprint, queue

ROOT = Path(__file__).resolve().parent.parent
CONFIG = config_of(queue("a"), queue("b"))
A = p.AllocationSet(allocation="alloc-1", app="a1", ask="k", node="n1", resource={"memory": 10})
BASE: list[p.ChangeMsg] = [
    p.ConfigSet(config=partition_to_raw(CONFIG)),
    p.NodeSet(node="n1", capacity={"memory": 100}),
    p.AppSet(app="a1", queue="root.a", submit_seq=1),
    p.AskSet(app="a1", ask="k", resource={"memory": 10}, count=2, seq=1),
    A,
]
MARK = p.VictimsMarked(victims=["alloc-1"], deadline=30.0)
KILL = p.VictimsKilled(victims=["alloc-1"])
CANCEL = p.VictimsReleased(victims=["alloc-1"])
GONE = p.AllocationGone(allocation="alloc-1")


def _state(*changes: p.ChangeMsg) -> PartitionState:
    state = PartitionState("default")
    state.apply_all([*BASE, *changes])
    return state


def test_every_phase_is_reached_from_absent_and_can_end() -> None:
    for table in (lifecycle.ALLOCATION, lifecycle.PREEMPTION_RESERVATION, lifecycle.NODE_RESERVATION):
        for phase in table:
            assert lifecycle.path(table, lifecycle.ABSENT, phase) is not None, phase
            assert lifecycle.path(table, phase, lifecycle.ABSENT) is not None, phase
    assert lifecycle.path(lifecycle.CONTRACT, lifecycle.ABSENT, "open") == [p.ContractSet]


def test_paths_take_the_cheapest_moves_and_replay_only_what_a_decision_carries() -> None:
    table = lifecycle.ALLOCATION
    assert lifecycle.path(table, "absent", "killed") == [p.AllocationSet, p.VictimsMarked, p.VictimsKilled]
    assert lifecycle.path(table, "running", "killed", lifecycle.REPLAYABLE) == [p.VictimsMarked, p.VictimsKilled]
    assert lifecycle.path(table, "preempting", "running", lifecycle.REPLAYABLE) == [p.VictimsReleased]
    assert lifecycle.path(table, "killed", "running", lifecycle.REPLAYABLE) is None  # a kill is never undone
    assert lifecycle.path(table, "absent", "killed", lifecycle.REPLAYABLE) is None  # nothing to kill
    assert lifecycle.path(table, "killed", "killed") == []


@pytest.mark.parametrize(
    ("changes", "phase"),
    [([], "running"), ([MARK], "preempting"), ([MARK, CANCEL], "running"), ([MARK, KILL], "killed")],
)
def test_an_allocation_moves_through_its_phases(changes: list[p.ChangeMsg], phase: str) -> None:
    assert _state(*changes).allocations["alloc-1"].phase == phase


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ([KILL], "allocation alloc-1 is running: VictimsKilled does not apply to it"),
        ([CANCEL], "allocation alloc-1 is running: VictimsReleased does not apply to it"),
        ([MARK, KILL, CANCEL], "allocation alloc-1 is killed: VictimsReleased does not apply to it"),
        ([MARK, KILL, MARK], "allocation alloc-1 is killed: VictimsMarked does not apply to it"),
        ([MARK, KILL, KILL], "allocation alloc-1 is killed: VictimsKilled does not apply to it"),
        ([GONE, KILL], "allocation alloc-1 is absent: VictimsKilled does not apply to it"),
        ([GONE, GONE], "allocation alloc-1 is not known"),
        ([A], "allocation alloc-1 committed twice"),
        ([p.ContractGone(contract="preq-1")], "preemption request preq-1 is not open"),
        ([p.ReservationGone(reservation="resv-1")], "reservation resv-1 is not known"),
        ([p.NodeReservationGone(node="n1")], "node n1 holds no node reservation"),
        (
            [p.AllocationSet(allocation="alloc-2", app="a1", ask="k", node="n1", resource={}, reservation="resv-9")],
            "allocation alloc-2: no resv-9 held",
        ),
    ],
)
def test_a_change_the_table_has_no_move_for_is_a_state_error(changes: list[p.ChangeMsg], message: str) -> None:
    with pytest.raises(StateError, match=message):
        _state(*changes)


def test_a_rebuilt_state_keeps_every_allocation_in_its_phase() -> None:
    state = _state(
        p.AllocationSet(allocation="alloc-2", app="a1", ask="k", node="n1", resource={"memory": 10}), MARK, KILL
    )
    replica = PartitionState("default")
    replica.apply_all(state_changes(state))
    assert {a.id: a.phase for a in replica.allocations.values()} == {"alloc-1": "killed", "alloc-2": "running"}
    assert fingerprint(replica) == fingerprint(state)


def _cache_with_one_container() -> Cache:
    cache = Cache("default")
    for change in BASE:
        cache.commit(change)
    cache.drain()
    return cache


@pytest.mark.parametrize(
    ("decision", "phase", "changes"),
    [
        (d.Kill(allocation="alloc-1", app="a1", queue="root.a", node="n1", t=5.0), "killed", 2),
        (d.Released(allocation="alloc-1", app="a1", queue="root.a", node="n1", resource={}), "absent", 1),
        (
            d.PreemptCancelled(allocation="alloc-1", app="a1", queue="root.a", node="n1", reservation="", reason=""),
            "running",
            0,
        ),
    ],
)
def test_replay_follows_the_table_from_the_phase_the_allocation_is_in(
    decision: d.DecisionMsg, phase: str, changes: int
) -> None:
    cache = _cache_with_one_container()
    before = cache.state.version
    apply_logged(cache, [decision], 0)
    alloc = cache.state.allocations.get("alloc-1")
    assert (lifecycle.ABSENT if alloc is None else alloc.phase) == phase
    assert cache.state.version - before == changes
    again = cache.state.version
    apply_logged(cache, [decision], 0)  # a duplicate in the log changes nothing
    assert cache.state.version == again


def _diagrams() -> ModuleType:
    """docs/lifecycle_diagrams.py, the script that draws the tables into docs/architecture.md."""
    spec = importlib.util.spec_from_file_location("lifecycle_diagrams", ROOT / "docs" / "lifecycle_diagrams.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_architecture_page_draws_every_lifecycle_table_as_it_is() -> None:
    diagrams = _diagrams()
    page = diagrams.PAGE.read_text(encoding="utf-8")
    assert set(diagrams.tables()) == {"ALLOCATION", "PREEMPTION_RESERVATION", "NODE_RESERVATION", "CONTRACT"}
    assert diagrams.refreshed(page, diagrams.tables()) == page, f"stale lifecycle diagrams: run {diagrams.COMMAND}"


def test_a_move_added_to_a_table_is_a_new_arrow_and_makes_the_drawing_stale() -> None:
    diagrams = _diagrams()
    page = diagrams.PAGE.read_text(encoding="utf-8")
    changed = {**lifecycle.ALLOCATION, "killed": {**lifecycle.ALLOCATION["killed"], p.VictimsReleased: "running"}}
    redrawn = diagrams.refreshed(page, {**diagrams.tables(), "ALLOCATION": changed})
    assert redrawn != page
    assert "    killed --> running: VictimsReleased\n" in redrawn
    assert "    [*] --> running: AllocationSet\n" in page and "    killed --> [*]: AllocationGone\n" in page
