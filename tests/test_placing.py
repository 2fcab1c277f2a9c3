"""The allocator's in-flight counters: a proposal's containers released at once leave what one undo each leaves."""

from __future__ import annotations

from sniper.core.placing import hold_room, release_room
from sniper.core.state import Ask, Node, PartitionState
from sniper.messages import protocol as p
from tests.core_support import fingerprint, queue, state_of

CHANGES: list[p.ChangeMsg] = [
    p.NodeSet(node="n1", capacity={"memory": 65536, "vcore": 64000}, labels={"zone": "a"}),
    p.NodeSet(node="n2", capacity={"memory": 65536, "vcore": 64000, "gpu": 8}, labels={"zone": "b"}),
    p.AppSet(app="A", queue="root.p.x", submit_seq=1),
    p.AppSet(app="B", queue="root.p.y", submit_seq=2),
    p.AppSet(app="C", queue="root.z", submit_seq=3),
    p.AskSet(app="A", ask="cpu", resource={"memory": 1024, "vcore": 500}, count=20, seq=1, tags=("web",)),
    p.AskSet(app="B", ask="gpu", resource={"gpu": 1, "memory": 2048}, count=4, seq=2),
    p.AskSet(app="C", ask="spare", resource={"vcore": 250}, count=6, seq=3, opportunistic=True),
]


def _state() -> PartitionState:
    return state_of([queue("p", queue("x"), queue("y")), queue("z")], CHANGES)


def _placements(state: PartitionState) -> list[tuple[Ask, Node]]:
    ask = {name: state.apps[app].asks[name] for app, name in (("A", "cpu"), ("B", "gpu"), ("C", "spare"))}
    n1, n2 = state.nodes["n1"], state.nodes["n2"]
    return [
        (ask["cpu"], n1),
        (ask["gpu"], n2),
        (ask["spare"], n1),
        (ask["cpu"], n2),
        (ask["cpu"], n1),
        (ask["spare"], n2),
        (ask["gpu"], n2),
    ]


def test_releasing_a_proposal_at_once_leaves_the_counters_and_order_one_undo_each_leaves() -> None:
    one_by_one, at_once = _state(), _state()
    before = fingerprint(one_by_one, allocating=True)
    for state in (one_by_one, at_once):
        for ask, node in _placements(state):
            hold_room(state, ask, node, 1)
    held = fingerprint(at_once, allocating=True)
    assert held != before
    for ask, node in _placements(one_by_one):
        hold_room(one_by_one, ask, node, -1)
    release_room(at_once, _placements(at_once))
    assert fingerprint(at_once, allocating=True) == fingerprint(one_by_one, allocating=True)
    assert at_once.tags.by_node == one_by_one.tags.by_node
    assert at_once.tags.by_group == one_by_one.tags.by_group
    assert at_once.node_index.ordered() == one_by_one.node_index.ordered()
    assert [a.allocating for app in at_once.apps.values() for a in app.asks.values()] == [0, 0, 0]
    for mine, theirs in zip(at_once.queues.values(), one_by_one.queues.values(), strict=True):
        assert list(mine.allocating.items()) == list(theirs.allocating.items())
    for mine_node, their_node in zip(at_once.nodes.values(), one_by_one.nodes.values(), strict=True):
        assert list(mine_node.allocating.items()) == list(their_node.allocating.items())
