"""The memo of ideal assignments (core.preemption.ideal_memo) and the dominant calculator's share keys.

A memoized ideal must be the computed one whatever came before it: random trees (one or two levels,
two or three resource types, zero guarantees, maxes, priorities, fences, smallest asks), replayed with
repeats and one-figure changes, give exactly what ``compute_ideal`` gives on each snapshot alone.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sniper.core.preemption.calculator import DominantCalculator, make_calculator
from sniper.core.preemption.ideal import IdealAssignment, compute_ideal
from sniper.core.preemption.ideal_memo import IdealMemo
from sniper.core.preemption.model import AppSnapshot, ClusterSnapshot, ContainerSnapshot, QueueSnapshot
from sniper.core.preemption.view import SNIPER_IDEALS, ideal_of
from sniper.core.preemption.view import computed_ideal as sniper_ideal
from sniper.core.resources import Resource

NAMES = ("memory", "vcore", "gpu")


def resources(names: tuple[str, ...], top: int, *, zero: bool = True) -> st.SearchStrategy[Resource]:
    low = 0 if zero else 1
    return st.fixed_dictionaries({n: st.integers(low, top) for n in names})


def apps(queue: str, names: tuple[str, ...]) -> st.SearchStrategy[tuple[AppSnapshot, ...]]:
    """One app of one or two containers, killable or not: the killable ones count in the ideal."""
    container = st.builds(
        ContainerSnapshot,
        id=st.sampled_from(["a", "b"]).map(lambda c: f"{queue}/{c}"),
        app=st.just(f"{queue}/app"),
        resource=resources(names, 60),
        killable=st.booleans(),
    )
    return st.lists(container, min_size=1, max_size=2, unique_by=lambda c: c.id).map(
        lambda cs: (AppSnapshot(id=f"{queue}/app", queue=queue, submit_order=1, containers=tuple(cs)),)
    )


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    names = NAMES[: draw(st.integers(2, 3))]
    capacity = draw(resources(names, 400, zero=False))
    shape = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))  # children of each child of the root

    def queue(path: str, parent: str | None, children: tuple[str, ...], fenced: bool = False) -> QueueSnapshot:
        leaf = not children
        pending = draw(resources(names, 200)) if leaf else {}
        return QueueSnapshot(
            path=path,
            parent=parent,
            children=children,
            is_leaf=leaf,
            guaranteed=draw(st.one_of(st.just({}), resources(names, 200))),
            max=draw(st.one_of(st.just(dict(capacity)), resources(names, 400))),
            used=draw(resources(names, 200)),
            pending=pending,
            pending_considering_reserved=pending,
            reserved={},
            priority=draw(st.integers(0, 2)),
            fenced=fenced,
            smallest_pending_ask=draw(st.one_of(st.none(), resources(names, 50))) if leaf else None,
            apps=draw(st.one_of(st.just(()), apps(path, names))) if leaf else (),
        )

    tops = [f"root.q{i}" for i in range(len(shape))]
    queues = [queue("root", None, tuple(tops))]
    for top, n in zip(tops, shape, strict=True):
        below = tuple(f"{top}.c{j}" for j in range(n))
        queues.append(queue(top, "root", below, fenced=draw(st.booleans()) and bool(below)))
        queues.extend(queue(c, top, ()) for c in below)
    queues[0] = dataclasses.replace(queues[0], guaranteed=dict(capacity), max=dict(capacity))
    return ClusterSnapshot(resource=capacity, queues=tuple(queues), resource_names=names)


def changed(snapshot: ClusterSnapshot, index: int, field: str, by: int) -> ClusterSnapshot:
    """``snapshot`` with one resource of one queue's ``field`` moved by ``by``."""
    queues = list(snapshot.queues)
    q = queues[index % len(queues)]
    figures = dict(getattr(q, field) or {})
    name = snapshot.resource_names[0]
    figures[name] = max(figures.get(name, 0) + by, 0)
    queues[index % len(queues)] = {
        "used": lambda: dataclasses.replace(q, used=figures),
        "pending": lambda: dataclasses.replace(q, pending=figures, pending_considering_reserved=figures),
        "guaranteed": lambda: dataclasses.replace(q, guaranteed=figures),
        "max": lambda: dataclasses.replace(q, max=figures),
        "smallest_pending_ask": lambda: dataclasses.replace(q, smallest_pending_ask=figures),
    }[field]()
    return dataclasses.replace(snapshot, queues=tuple(queues))


# The option sets the callers use: Sniper's (with and without dropping ineffective demand) and YARN's round
# on either calculator, with an allowance, with and without preemption to balance.
OPTIONS: dict[str, Callable[[ClusterSnapshot], IdealAssignment]] = {
    "sniper": sniper_ideal,
    "sniper-keeping-ineffective": functools.partial(sniper_ideal, avoid_ineffective=False),
    "yarn-default": lambda snap: compute_ideal(
        snap, make_calculator("default", snap.resource_names), total_preemption_allowed={"memory": 40}
    ),
    "yarn-dominant-balance": lambda snap: compute_ideal(
        snap,
        make_calculator("dominant", snap.resource_names),
        total_preemption_allowed={"memory": 60, "vcore": 60},
        preempt_to_balance=True,
    ),
}


@given(
    base=snapshots(),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["used", "pending", "guaranteed", "max", "smallest_pending_ask", "same"]),
            st.integers(0, 7),
            st.integers(-30, 30),
            st.sampled_from(sorted(OPTIONS)),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_a_memoized_ideal_equals_the_computed_one_over_repeats_and_single_changes(
    base: ClusterSnapshot, steps: list[tuple[str, int, int, str]]
) -> None:
    memo = IdealMemo(4)
    seen = [base]
    for field, index, by, options in steps:
        # Back to an earlier snapshot, or one figure changed from the last.
        snapshot = seen[index % len(seen)] if field == "same" else changed(seen[-1], index, field, by)
        seen.append(snapshot)
        got = memo.get(snapshot, options, OPTIONS[options])
        assert got == OPTIONS[options](snapshot)
    assert memo.hits + memo.misses == len(steps)


def two_queues(used_a: int = 30) -> ClusterSnapshot:
    cap = {"memory": 100, "vcore": 100}

    def leaf(path: str, used: int, pending: int) -> QueueSnapshot:
        figures = {"memory": pending, "vcore": pending}
        return QueueSnapshot(
            path=path,
            parent="root",
            children=(),
            is_leaf=True,
            guaranteed={"memory": 50, "vcore": 50},
            max=dict(cap),
            used={"memory": used, "vcore": used},
            pending=figures,
            pending_considering_reserved=figures,
            reserved={},
        )

    root = QueueSnapshot(
        path="root",
        parent=None,
        children=("root.a", "root.b"),
        is_leaf=False,
        guaranteed=dict(cap),
        max=dict(cap),
        used={"memory": 100, "vcore": 100},
        pending={},
        pending_considering_reserved={},
        reserved={},
    )
    return ClusterSnapshot(
        resource=cap,
        queues=(root, leaf("root.a", used_a, 40), leaf("root.b", 100 - used_a, 0)),
        resource_names=("memory", "vcore"),
    )


def counting(calls: list[ClusterSnapshot]) -> Callable[[ClusterSnapshot], IdealAssignment]:
    def compute(snapshot: ClusterSnapshot) -> IdealAssignment:
        calls.append(snapshot)
        return sniper_ideal(snapshot)

    return compute


def test_equal_figures_are_computed_once_and_each_caller_gets_its_own_copy() -> None:
    memo, calls = IdealMemo(8), list[ClusterSnapshot]()
    first = memo.get(two_queues(), True, counting(calls))
    first["root.a"].ideal_assigned["memory"] = 10**9  # a caller changing its answer
    second = memo.get(two_queues(), True, counting(calls))
    assert len(calls) == 1 and (memo.hits, memo.misses) == (1, 1)
    assert second == sniper_ideal(two_queues())
    assert second["root.a"].ideal_assigned["memory"] != 10**9


def test_other_options_or_one_other_figure_are_computed_again() -> None:
    memo, calls = IdealMemo(8), list[ClusterSnapshot]()
    memo.get(two_queues(), True, counting(calls))
    memo.get(two_queues(), False, counting(calls))
    other = memo.get(two_queues(used_a=31), True, counting(calls))
    assert len(calls) == 3
    assert other == sniper_ideal(two_queues(used_a=31))


def holding(snapshot: ClusterSnapshot, *containers: ContainerSnapshot) -> ClusterSnapshot:
    """``snapshot`` with ``root.b`` holding one app of ``containers``."""
    app = AppSnapshot(id="app1", queue="root.b", submit_order=1, containers=containers)
    queues = (*snapshot.queues[:2], dataclasses.replace(snapshot.queues[2], apps=(app,)))
    return dataclasses.replace(snapshot, queues=queues)


def test_killable_containers_are_figures_of_the_key_and_other_containers_are_not() -> None:
    def container(cid: str, killable: bool, reserved: bool = False) -> ContainerSnapshot:
        return ContainerSnapshot(
            id=cid, app="app1", resource={"memory": 5, "vcore": 5}, killable=killable, reserved=reserved
        )

    killable = holding(two_queues(), container("c1", True))
    running = holding(two_queues(), container("c1", False))
    other_running = holding(two_queues(), container("c2", False), container("c3", True, reserved=True))
    memo, calls = IdealMemo(8), list[ClusterSnapshot]()
    for snapshot in (killable, running, other_running, killable):
        assert memo.get(snapshot, True, counting(calls)) == sniper_ideal(snapshot)
    # A killable container changes the ideal's usage; running ones and killable reservations do not.
    assert calls == [killable, running]
    assert sniper_ideal(killable) != sniper_ideal(running)


def test_the_least_recently_used_answer_is_dropped_first() -> None:
    memo, calls = IdealMemo(2), list[ClusterSnapshot]()
    a, b, c = two_queues(30), two_queues(31), two_queues(32)
    for snapshot in (a, b, a, c, a, b):  # c drops b (a was used after it), then b drops c
        memo.get(snapshot, True, counting(calls))
    assert calls == [a, b, c, b]


def test_a_memo_without_room_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        IdealMemo(0)


def test_sniper_ideal_of_goes_through_the_shared_memo() -> None:
    snapshot = two_queues(used_a=17)
    before = SNIPER_IDEALS.hits
    assert ideal_of(snapshot) == sniper_ideal(snapshot)
    assert ideal_of(snapshot) == sniper_ideal(snapshot)
    assert SNIPER_IDEALS.hits == before + 1


# --- the dominant calculator's share keys -------------------------------------------------------------------

signed = st.fixed_dictionaries({n: st.integers(-50, 200) for n in NAMES})
totals = st.fixed_dictionaries({n: st.integers(0, 300) for n in NAMES})


@given(total=totals, a=signed, b=signed)
def test_a_dominant_order_agrees_with_compare_and_its_share_keys(total: Resource, a: Resource, b: Resource) -> None:
    calc = DominantCalculator(NAMES)
    order = calc.against(total)
    assert order.compare(a, b) == calc.compare(total, a, b) == -calc.compare(total, b, a)
    assert order.positive(a) == (order.compare(a, {}) > 0)
    assert order.rmin(a, b) == (a if order.compare(a, b) <= 0 else b)
    assert order.rmax(a, b) == (a if order.compare(a, b) >= 0 else b)
    assert (order.key is None) == any(total[n] == 0 for n in NAMES)
    if order.key is not None:
        ka, kb = order.key(a), order.key(b)
        assert order.compare(a, b) == (ka > kb) - (ka < kb)
        # The largest share first: what YARN's comparator reads before the next one.
        assert ka[0] == max(a[n] / total[n] for n in NAMES)


def test_dominant_compare_ignores_types_it_does_not_know() -> None:
    calc = DominantCalculator(("memory", "vcore"))
    total = {"memory": 100, "vcore": 100}
    assert calc.compare(total, {"memory": 5, "vcore": 5, "pods": 9}, {"memory": 5, "vcore": 5}) == 0
    assert not calc.positive(total, {"pods": 3})
    assert calc.positive({"memory": 100, "vcore": 0}, {"memory": 1})
    assert not calc.positive({"memory": 100, "vcore": 0}, {"memory": 1, "vcore": -1})


def test_a_smallest_ask_that_makes_an_increment_ineffective_is_a_figure_of_the_key() -> None:
    def asking(size: int) -> ClusterSnapshot:
        snapshot = two_queues()
        a = dataclasses.replace(snapshot.queues[1], smallest_pending_ask={"memory": size, "vcore": size})
        return dataclasses.replace(snapshot, queues=(snapshot.queues[0], a, snapshot.queues[2]))

    memo, calls = IdealMemo(8), list[ClusterSnapshot]()
    fits, too_large = memo.get(asking(10), True, counting(calls)), memo.get(asking(25), True, counting(calls))
    assert len(calls) == 2
    assert fits["root.a"].ideal_assigned == {"memory": 50, "vcore": 50}  # its increment of 20 starts an ask of 10
    assert too_large["root.a"].ineffective and too_large == sniper_ideal(asking(25))
