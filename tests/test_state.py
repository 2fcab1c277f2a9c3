"""PartitionState: every change goes through ``apply``, which keeps derived totals exact."""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core.cache import state_changes
from sniper.core.config import partition_to_raw
from sniper.core.state import PartitionState, StateError
from sniper.messages import protocol as p
from tests.core_support import config_of, consistency_problems, fingerprint, queue

CONFIG = config_of(
    queue("p", queue("x", maximum={"memory": 8192}), queue("y"), maximum={"memory": 12288}),
    queue("b", guaranteed={"memory": 4096}),
)


def _state(*changes: p.ChangeMsg) -> PartitionState:
    state = PartitionState("default")
    state.apply(p.ConfigSet(config=partition_to_raw(CONFIG)))
    state.apply_all(list(changes))
    return state


BASE: list[p.ChangeMsg] = [
    p.NodeSet(node="n1", capacity={"memory": 8192, "vcore": 8000}),
    p.NodeSet(node="n2", capacity={"memory": 16384, "vcore": 8000}),
    p.AppSet(app="a1", queue="root.p.x", submit_seq=1),
    p.AskSet(app="a1", ask="k", resource={"memory": 1024, "vcore": 100}, count=3, seq=1),
]


def test_apply_keeps_totals_up_the_tree() -> None:
    state = _state(*BASE)
    assert state.capacity == {"memory": 24576, "vcore": 16000}
    for path in ("root.p.x", "root.p", "root"):
        assert state.queues[path].pending == {"memory": 3072, "vcore": 300}
    assert state.queues["root.b"].pending == {}
    state.apply(p.AllocationSet(allocation="x1", app="a1", ask="k", node="n1", resource={"memory": 1024, "vcore": 100}))
    ask = state.ask(("a1", "k"))
    assert ask is not None
    assert (ask.allocated, ask.pending) == (1, 2)
    assert state.nodes["n1"].allocated == {"memory": 1024, "vcore": 100}
    assert state.nodes["n1"].free() == {"memory": 7168, "vcore": 7900}
    for path in ("root.p.x", "root.p", "root"):
        assert state.queues[path].allocated == {"memory": 1024, "vcore": 100}
        assert state.queues[path].pending == {"memory": 2048, "vcore": 200}
    assert list(state.apps["a1"].allocations) == ["x1"]
    assert consistency_problems(state) == []


def test_release_frees_room_but_an_ask_never_gets_its_container_back() -> None:
    state = _state(
        *BASE, p.AllocationSet(allocation="x1", app="a1", ask="k", node="n1", resource={"memory": 1024, "vcore": 100})
    )
    state.apply(p.AllocationGone(allocation="x1"))
    ask = state.ask(("a1", "k"))
    assert ask is not None
    assert ask.allocated == 1  # containers committed ever: a finished one is not wanted again
    assert ask.pending == 2
    assert state.nodes["n1"].allocated == {"memory": 0, "vcore": 0}
    assert state.queues["root"].allocated == {"memory": 0, "vcore": 0}
    assert consistency_problems(state) == []


def test_ask_gone_takes_its_pending_out_of_every_level() -> None:
    state = _state(*BASE)
    state.apply(p.AskGone(app="a1", ask="k"))
    for path in ("root.p.x", "root.p", "root"):
        assert state.queues[path].pending == {"memory": 0, "vcore": 0}
    assert list(state.apps["a1"].pending_asks) == []
    assert consistency_problems(state) == []


def test_pending_asks_are_ordered_by_priority_then_age() -> None:
    state = _state(
        *BASE,
        p.AskSet(app="a1", ask="hi-old", resource={"memory": 1}, count=1, priority=5, seq=2),
        p.AskSet(app="a1", ask="hi-new", resource={"memory": 1}, count=1, priority=5, seq=3),
        p.AskSet(app="a1", ask="low", resource={"memory": 1}, count=1, priority=-1, seq=4),
        p.AskSet(app="a1", ask="none", resource={"memory": 1}, count=0, priority=9, seq=5),
    )
    assert [a.name for a in state.apps["a1"].pending_asks] == ["hi-old", "hi-new", "k", "low"]


def test_clock_never_goes_backwards() -> None:
    state = _state(p.Clock(now=5.0), p.Clock(now=3.0))
    assert state.now == 5.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ([p.NodeGone(node="ghost")], "node ghost is not known"),
        ([p.AppSet(app="a1", queue="root.p.x")], "app a1 already exists"),
        ([p.AppSet(app="a2", queue="root.p")], "root.p is not a leaf queue"),
        ([p.AppSet(app="a2", queue="root.nope")], "root.nope is not a leaf queue"),
        ([p.AppGone(app="ghost")], "app ghost is not known"),
        ([p.AskSet(app="ghost", ask="k", resource={}, count=1)], "app ghost is not known"),
        ([p.AskSet(app="a1", ask="k", resource={}, count=1)], "ask a1/k already exists"),
        ([p.AskGone(app="a1", ask="ghost")], "ask a1/ghost is not known"),
        ([p.AllocationGone(allocation="ghost")], "allocation ghost is not known"),
        ([p.AllocationSet(allocation="z", app="a1", ask="k", node="ghost", resource={})], "unknown app a1 or node"),
        (
            [
                p.AllocationSet(allocation="z", app="a1", ask="k", node="n1", resource={"memory": 1}),
                p.AllocationSet(allocation="z", app="a1", ask="k", node="n1", resource={"memory": 1}),
            ],
            "allocation z committed twice",
        ),
        (
            [
                p.AllocationSet(allocation="z", app="a1", ask="k", node="n1", resource={"memory": 1}),
                p.NodeGone(node="n1"),
            ],
            "node n1 still holds allocations",
        ),
        (
            [
                p.AllocationSet(allocation="z", app="a1", ask="k", node="n1", resource={"memory": 1}),
                p.AppGone(app="a1"),
            ],
            "app a1 still holds allocations",
        ),
    ],
)
def test_contradicting_changes_raise_state_errors(changes: list[p.ChangeMsg], message: str) -> None:
    state = _state(*BASE)
    with pytest.raises(StateError, match=message):
        state.apply_all(changes)


def test_a_config_change_keeps_apps_and_recomputes_totals() -> None:
    state = _state(
        *BASE, p.AllocationSet(allocation="x1", app="a1", ask="k", node="n1", resource={"memory": 1024, "vcore": 100})
    )
    before = fingerprint(state)
    bigger = config_of(
        queue("p", queue("x", maximum={"memory": 16384}), queue("y"), maximum={"memory": 16384}),
        queue("b", guaranteed={"memory": 4096}),
        queue("c"),
        node_sort="fair",
    )
    state.apply(p.ConfigSet(config=partition_to_raw(bigger)))
    after = fingerprint(state)
    assert state.queues["root.p.x"].max == {"memory": 16384}
    assert state.node_index.policy == "fair"
    assert state.node_index.ordered() == ["n2", "n1"]  # most free room first now
    for path in ("root", "root.p", "root.p.x", "root.b"):
        assert after["queues"][path] == before["queues"][path]
    assert after["apps"] == before["apps"]
    assert state.apps["a1"].queue is state.queues["root.p.x"]
    assert consistency_problems(state) == []
    dropping = config_of(queue("b"))
    with pytest.raises(StateError, match=r"config drops queue root\.p\.x that app a1 still uses"):
        state.apply(p.ConfigSet(config=partition_to_raw(dropping)))


@pytest.mark.parametrize(
    ("path", "request_", "extra", "allowed"),
    [
        ("root.p.x", {"memory": 7168}, None, True),  # x max 8192, 1024 used
        ("root.p.x", {"memory": 7169}, None, False),
        ("root.p.x", {"vcore": 10**6}, None, True),  # no max on vcore anywhere
        ("root.p.y", {"memory": 11264}, None, True),  # y has no max; parent p max 12288, 1024 used
        ("root.p.y", {"memory": 11265}, None, False),  # the parent's max binds
        ("root.p.y", {"memory": 8192}, {"root.p": {"memory": 4096}}, False),  # caller-held usage counts
        ("root.b", {"memory": 10**9}, None, True),  # no max at all
    ],
)
def test_headroom_up_the_hierarchy(
    path: str, request_: dict[str, int], extra: dict[str, Any] | None, allowed: bool
) -> None:
    state = _state(
        *BASE, p.AllocationSet(allocation="x1", app="a1", ask="k", node="n1", resource={"memory": 1024, "vcore": 100})
    )
    assert state.headroom_allows(state.queues[path], request_, extra) is allowed


def test_headroom_counts_reserved_and_in_flight_usage() -> None:
    state = _state(*BASE)
    x = state.queues["root.p.x"]
    assert state.headroom_allows(x, {"memory": 8192})
    x.allocating["memory"] = 4096
    assert not state.headroom_allows(x, {"memory": 8192})
    assert state.headroom_allows(x, {"memory": 4096})


def test_a_zero_max_forbids_that_resource() -> None:
    state = PartitionState("default", config_of(queue("a", maximum={"memory": 4096, "gpu": 0})))
    leaf = state.queues["root.a"]
    assert state.headroom_allows(leaf, {"memory": 4096})
    assert not state.headroom_allows(leaf, {"memory": 1, "gpu": 1})


def test_state_changes_rebuild_an_equivalent_state() -> None:
    """A replica reset replays ``state_changes``: same nodes, allocations, queue totals and pending."""
    state = _state(
        *BASE,
        p.AppSet(app="b1", queue="root.b", submit_seq=2),
        p.AskSet(app="b1", ask="m", resource={"memory": 2048}, count=2, seq=2),
        p.AllocationSet(allocation="x1", app="a1", ask="k", node="n1", resource={"memory": 1024, "vcore": 100}),
        p.AllocationSet(allocation="x2", app="a1", ask="k", node="n2", resource={"memory": 1024, "vcore": 100}),
        p.AllocationSet(allocation="x3", app="b1", ask="m", node="n2", resource={"memory": 2048}),
        p.AllocationGone(allocation="x1"),
        p.NodeSet(node="n3", capacity={"memory": 1}, schedulable=False),
        p.Clock(now=12.5),
    )
    rebuilt = PartitionState("default")
    rebuilt.apply_all(state_changes(state))
    a, b = fingerprint(state), fingerprint(rebuilt)
    for key in ("now", "config", "capacity", "nodes", "queues", "allocations", "node_order"):
        assert a[key] == b[key], key
    for app in ("a1", "b1"):
        for name, ask in state.apps[app].asks.items():
            copy = rebuilt.apps[app].asks[name]
            assert copy.pending == ask.pending
            assert copy.resource == ask.resource
    assert consistency_problems(rebuilt) == []


def test_a_queue_lists_exactly_its_apps_with_pending_asks_through_every_change() -> None:
    """``Queue.waiting`` is an index the allocation walk, the ideal's snapshot and the quotas read instead
    of every app of a leaf: it must follow each change that moves an ask in or out of pending."""
    r = {"memory": 1024, "vcore": 100}
    state = _state(*BASE, p.AppSet(app="a2", queue="root.p.x", submit_seq=2))
    leaf = state.queues["root.p.x"]

    def waiting() -> list[str]:
        assert consistency_problems(state) == []
        return [app.name for app in leaf.waiting_apps()]

    assert waiting() == ["a1"]  # a2 asks for nothing yet
    state.apply(p.AskSet(app="a2", ask="k", resource=r, count=1, seq=2))
    assert waiting() == ["a1", "a2"]
    state.apply(p.AllocationSet(allocation="x1", app="a2", ask="k", node="n1", resource=r))
    assert waiting() == ["a1"]  # fully allocated
    state.apply(p.AskSet(app="a2", ask="j", resource=r, count=1, seq=3))
    state.apply(
        p.ReservationSet(
            reservation="r1", app="a2", ask="j", node="n1", resource=r, victims=[], deadline=5.0, expires=9.0
        )
    )
    assert waiting() == ["a1"]  # its last container reserved
    state.apply(p.ReservationGone(reservation="r1"))
    assert waiting() == ["a1", "a2"]  # wanted again
    state.apply(p.AskGone(app="a1", ask="k"))
    assert waiting() == ["a2"]
    state.apply(p.ConfigSet(config=partition_to_raw(CONFIG)))  # queues rebuilt: the index with them
    leaf = state.queues["root.p.x"]
    assert waiting() == ["a2"]
    state.apply(p.AskGone(app="a2", ask="j"))
    state.apply(p.AllocationGone(allocation="x1"))
    state.apply(p.AppGone(app="a2"))
    assert waiting() == [] and leaf.waiting == {}


def test_a_queue_lists_exactly_its_apps_holding_containers() -> None:
    r = {"memory": 1024, "vcore": 100}
    state = _state(*BASE)
    leaf = state.queues["root.p.x"]

    def holding() -> list[str]:
        assert consistency_problems(state) == []
        return [app.name for app in leaf.holding_apps()]

    assert holding() == []
    state.apply(p.AllocationSet(allocation="x1", app="a1", ask="k", node="n1", resource=r))
    state.apply(p.AllocationSet(allocation="x2", app="a1", ask="k", node="n1", resource=r))
    assert holding() == ["a1"]
    state.apply(p.AllocationGone(allocation="x1"))
    assert holding() == ["a1"]  # one left
    state.apply(p.ConfigSet(config=partition_to_raw(CONFIG)))  # queues rebuilt: the index with them
    leaf = state.queues["root.p.x"]
    assert holding() == ["a1"]
    state.apply(p.AllocationGone(allocation="x2"))
    assert holding() == []
