"""The allocator's remembered placement failures: every scenario that could make a remembered failure stale
(room freed by another queue, a node added, relabelled or back in service, a node reservation ended, a
max's headroom grown, another resource shape, gangs, a required node) runs twice, once with the
remembering placer and once with a placer that searches every time, and both decide the same at every
cycle; the remembering one answers some placements without a search. A cycle looks for candidates
again after a look that placed nothing only when that look held some ask back (a max, a limit, the
batch), and the asks it held back are placed in that cycle. A cycle whose every waiting ask is known to
find no node, where no max or limit applies, lists no candidates and counts the same misses."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sniper.core.allocation import FreeRoomPlacer
from sniper.core.config import PartitionConfig, parse_partition
from sniper.core.placement_memo import RememberingPlacer
from sniper.core.state import Node
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import Harness, config_of, partition_raw, queue
from tests.node_reservation_support import churn, crowded, reserved

CONFIG = config_of(queue("a", maximum={"memory": 12288}), queue("b"))
NODE = f.NodeAdded(node="n1", capacity={"memory": 8192, "vcore": 8000})


class Twins:
    """The same harness twice: the allocator's own placer and one that always searches."""

    def __init__(self, *events: f.Feed, config: PartitionConfig = CONFIG) -> None:
        self.memo = Harness(config)
        self.plain = Harness(config)
        self.plain.allocator.placer = FreeRoomPlacer()
        self.feed(*events)

    def feed(self, *events: f.Feed) -> None:
        assert self.memo.feed(*events) == self.plain.feed(*events)

    def cycle(self) -> list[tuple[str, str]]:
        """One cycle on both, delivered: the ``(ask, node)`` it placed, the same on both."""
        placed = [_placements(h.propose()) for h in (self.memo, self.plain)]
        assert placed[0] == placed[1]
        for h in (self.memo, self.plain):
            while h.in_flight:
                h.deliver()
        assert self.memo.decisions == self.plain.decisions
        assert self.memo.allocator.missed == self.plain.allocator.missed
        return placed[0]

    def allocation(self, ask: str) -> str:
        return next(x.allocation for x in self.memo.allocated() if x.ask == ask)

    @property
    def placer(self) -> RememberingPlacer:
        placer = self.memo.allocator.placer
        assert isinstance(placer, RememberingPlacer)
        return placer


def _placements(proposal: p.AllocationProposal | None) -> list[tuple[str, str]]:
    return [] if proposal is None else [(pl.ask, pl.node) for pl in proposal.placements]


def _waiting(t: Twins, cycles: int = 3) -> None:
    """Cycles that place nothing, the later ones answered from memory (an app arriving before each, so
    that the cycle searches again rather than count a fruitless cycle's misses)."""
    remembered = t.placer.remembered
    for _ in range(cycles):
        t.feed(f.AppAdded(app=f"idle{len(t.memo.cache.state.apps)}", queue="root.b"))
        assert t.cycle() == []
    assert t.placer.remembered > remembered


def test_room_freed_by_a_release_of_another_queue_is_used_at_the_next_cycle() -> None:
    t = Twins(NODE, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 6144}))
    assert t.cycle() == [("first", "n1")]
    t.feed(f.AskAdded(app="b1", ask="wide", resource={"memory": 4096}))
    _waiting(t)
    t.feed(f.AllocationReleased(allocation=t.allocation("first")))
    assert t.cycle() == [("wide", "n1")]


def test_a_node_added_mid_run_takes_the_waiting_ask_at_once() -> None:
    t = Twins(NODE, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 6144}))
    assert t.cycle() == [("first", "n1")]
    t.feed(f.AskAdded(app="b1", ask="wide", resource={"memory": 4096}))
    _waiting(t)
    t.feed(f.NodeAdded(node="n2", capacity={"memory": 4096, "vcore": 8000}))
    assert t.cycle() == [("wide", "n2")]


def test_a_node_relabelled_to_match_a_selector_takes_the_waiting_ask() -> None:
    gpu = f.NodeAdded(node="n1", capacity={"memory": 8192, "vcore": 8000}, labels={"accel": "gpu"})
    plain = f.NodeAdded(node="n2", capacity={"memory": 8192, "vcore": 8000})
    t = Twins(gpu, plain, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 6144}, node_selector={"accel": ["gpu"]}))
    assert t.cycle() == [("first", "n1")]
    t.feed(f.AskAdded(app="b1", ask="gpu", resource={"memory": 4096}, node_selector={"accel": ["gpu"]}))
    _waiting(t)
    t.feed(f.NodeAdded(node="n2", capacity={"memory": 8192, "vcore": 8000}, labels={"accel": "gpu"}))
    assert t.cycle() == [("gpu", "n2")]


def test_a_node_back_in_service_takes_the_waiting_ask() -> None:
    down = f.NodeAdded(node="n2", capacity={"memory": 16384, "vcore": 8000}, schedulable=False)
    t = Twins(NODE, down, f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="b1", ask="big", resource={"memory": 16384}))
    _waiting(t)
    t.feed(f.NodeUpdated(node="n2", schedulable=True))
    assert t.cycle() == [("big", "n2")]


def test_headroom_grown_by_a_release_elsewhere_in_the_queue_lets_the_ask_in() -> None:
    two = f.NodeAdded(node="n2", capacity={"memory": 8192, "vcore": 8000})
    t = Twins(NODE, two, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="a2", queue="root.a"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 8192}))
    assert t.cycle() == [("first", "n1")]
    t.feed(f.AskAdded(app="a2", ask="second", resource={"memory": 8192}))  # a's max (12 GiB) keeps it out
    assert t.cycle() == []
    t.feed(f.AskAdded(app="a2", ask="third", resource={"memory": 8192}))
    assert t.cycle() == []
    t.feed(f.AllocationReleased(allocation=t.allocation("first")))
    assert t.cycle() == [("second", "n1")]


def test_another_resource_shape_is_searched_while_a_larger_one_is_remembered_as_failing() -> None:
    t = Twins(NODE, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 1024, "vcore": 6000}))
    assert t.cycle() == [("first", "n1")]
    t.feed(f.AskAdded(app="b1", ask="huge", resource={"memory": 4096, "vcore": 4000}, priority=5))
    _waiting(t)
    t.feed(f.AskAdded(app="b1", ask="small", resource={"memory": 4096, "vcore": 1000}))
    assert t.cycle() == [("small", "n1")]
    t.feed(f.AskAdded(app="b1", ask="same", resource={"memory": 4096, "vcore": 4000}))  # the remembered shape
    searched = t.placer.searched
    assert t.cycle() == []
    assert t.placer.searched == searched  # neither "huge" nor "same" searched the nodes again
    t.feed(f.AllocationReleased(allocation=t.allocation("first")))
    assert t.cycle() == [("huge", "n1")]


def test_a_gang_is_placed_whole_once_a_release_makes_room_for_all_its_members() -> None:
    t = Twins(NODE, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 6144}))
    assert t.cycle() == [("first", "n1")]
    t.feed(f.AskAdded(app="b1", ask="gang", resource={"memory": 2048}, count=3, gang_min=3))
    t.feed(f.AskAdded(app="b1", ask="other", resource={"memory": 4096}))
    _waiting(t)
    t.feed(f.AllocationReleased(allocation=t.allocation("first")))
    assert sorted(t.cycle()) == [("gang", "n1")] * 3


def test_an_ask_for_a_required_node_is_placed_when_that_node_frees_room() -> None:
    two = f.NodeAdded(node="n2", capacity={"memory": 8192, "vcore": 8000})
    t = Twins(NODE, two, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 6144}, node="n1"))
    assert t.cycle() == [("first", "n1")]
    t.feed(f.AskAdded(app="b1", ask="pinned", resource={"memory": 4096}, node="n1"))
    t.feed(f.AskAdded(app="b1", ask="loose", resource={"memory": 8192}))
    assert t.cycle() == [("loose", "n2")]
    t.feed(f.AskAdded(app="b1", ask="more", resource={"memory": 4096}))  # remembered: no node has room
    _waiting(t)
    t.feed(f.AllocationReleased(allocation=t.allocation("first")))
    assert t.cycle() == [("pinned", "n1"), ("more", "n1")]


def test_a_node_reservation_ending_decides_as_a_search_every_time_would() -> None:
    runs: list[list[d.DecisionMsg]] = []
    for placer in (None, FreeRoomPlacer()):
        h, on_n1, on_n2 = crowded()
        if placer is not None:
            h.allocator.placer = placer
        churn(h, on_n1, on_n2, 14)
        assert ("big", "n1") in h.placements() and reserved(h)
        runs.append(h.decisions)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("nodes", [10, 200])
def test_waiting_asks_search_the_nodes_once_per_change_not_once_per_cycle(
    nodes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    holds: list[int] = []
    can_hold: Callable[[Node, dict[str, int]], bool] = Node.can_hold

    def counted(node: Node, request: dict[str, int]) -> bool:
        holds.append(1)
        return can_hold(node, request)

    monkeypatch.setattr(Node, "can_hold", counted)
    wide = {"memory": 1024, "vcore": 1000}  # every node has the memory, none the cores left
    counts = []
    for placer in (None, FreeRoomPlacer()):
        h = Harness(CONFIG)
        if placer is not None:
            h.allocator.placer = placer
        h.feed(*(f.NodeAdded(node=f"n{i:03}", capacity={"memory": 16384, "vcore": 2000}) for i in range(nodes)))
        h.feed(f.AppAdded(app="b1", queue="root.b"))
        h.feed(f.AskAdded(app="b1", ask="busy", resource={"memory": 1024, "vcore": 1500}, count=nodes))
        h.settle()  # every node keeps 15 GiB and half a core free
        h.feed(*(f.AskAdded(app="b1", ask=f"wide{i}", resource=wide) for i in range(20)))
        holds.clear()
        for now in range(1, 11):
            h.tick(float(now))
            h.feed(f.AskAdded(app="b1", ask=f"late{now}", resource=wide))  # a new ask: every cycle runs
            assert h.propose() is None
        assert all(h.allocator.missed[("b1", f"wide{i}")] == 10 for i in range(20))
        counts.append(len(holds))
    remembered, searched = counts
    assert searched == sum(20 + now for now in range(1, 11)) * nodes  # every waiting ask on every node
    assert remembered == nodes  # one search: no node changed since, every later placement is remembered


def test_a_node_reservation_timing_out_frees_its_node_for_the_asks_it_kept_off() -> None:
    runs: list[list[d.DecisionMsg]] = []
    for placer in (None, FreeRoomPlacer()):
        h, on_n1, on_n2 = crowded(timeout=5.0)
        if placer is not None:
            h.allocator.placer = placer
        churn(h, on_n1, on_n2, 1)  # b takes the room freed on n1, then n1 is reserved for a's big ask
        (r,) = reserved(h)
        h.release(on_n1.pop(0))
        h.settle()  # n1 has room for one of b's 10s, reserved for another ask: b waits
        assert h.cache.state.nodes["n1"].free() == {"memory": 10}
        h.tick(r.t + 5.0)
        h.settle()
        after = [x.node for x in h.allocated() if x.ask == "more" and x.seq > r.seq]
        assert after == ["n1"]  # the room the reservation held goes to b at once
        runs.append(h.decisions)
    assert runs[0] == runs[1]


def test_an_ask_a_max_held_back_behind_a_failing_one_is_placed_in_the_same_cycle() -> None:
    t = Twins(NODE, f.AppAdded(app="a1", queue="root.a"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 2048}))
    assert t.cycle() == [("first", "n1")]
    # "big" comes first and finds no room; counted against a's max (12 GiB) it keeps "small" out of the
    # first look, and the next look (without the failed "big") places "small".
    t.feed(f.AskAdded(app="a1", ask="big", resource={"memory": 8192}, priority=5))
    t.feed(f.AskAdded(app="a1", ask="small", resource={"memory": 4096}))
    assert t.cycle() == [("small", "n1")]


def test_a_cycle_where_every_ask_fails_looks_for_candidates_once(looks: list[int]) -> None:
    t = Twins(NODE, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 6144}))
    assert t.cycle() == [("first", "n1")]
    t.feed(*(f.AskAdded(app="b1", ask=f"wide{i}", resource={"memory": 4096}) for i in range(5)))
    looks.clear()
    assert t.memo.propose() is None
    assert len(looks) == 1  # every ask listed failed, none was held back: a second look would list nothing
    assert t.memo.allocator.missed == {("b1", f"wide{i}"): 1 for i in range(5)}


def test_an_ask_a_user_limit_held_back_behind_a_failing_one_is_placed_in_the_same_cycle() -> None:
    limited = queue("a")
    limited["limits"] = [{"users": ["*"], "maxresources": {"memory": "80Mi"}}]
    node = f.NodeAdded(node="n1", capacity={"memory": 60})
    t = Twins(node, f.AppAdded(app="a1", queue="root.a", user="hank"), config=parse_partition(partition_raw(limited)))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 10}))
    assert t.cycle() == [("first", "n1")]
    # "big" (60) finds no room; charged to hank's limit (10 + 60 of 80) it keeps "small" (20) out of the
    # first look, and the next look places "small".
    t.feed(f.AskAdded(app="a1", ask="big", resource={"memory": 60}, priority=5))
    t.feed(f.AskAdded(app="a1", ask="small", resource={"memory": 20}))
    assert t.cycle() == [("small", "n1")]


def test_asks_behind_a_batch_of_failing_ones_are_looked_at_in_the_same_cycle() -> None:
    t = Twins(NODE, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    for h in (t.memo, t.plain):
        h.allocator.batch = 2
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 6144}))
    assert t.cycle() == [("first", "n1")]
    t.feed(*(f.AskAdded(app="b1", ask=f"wide{i}", resource={"memory": 4096}, priority=5) for i in range(2)))
    t.feed(f.AskAdded(app="b1", ask="small", resource={"memory": 1024}))
    assert t.cycle() == [("small", "n1")]  # the first look's batch held only the two that fail


def test_a_cycle_where_every_waiting_ask_is_known_to_fail_lists_no_candidates(looks: list[int]) -> None:
    t = Twins(NODE, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    for h in (t.memo, t.plain):
        h.allocator.batch = 2  # the looks list two at a time
    t.feed(f.AskAdded(app="b1", ask="first", resource={"memory": 6144}))
    assert t.cycle() == [("first", "n1")]
    t.feed(*(f.AskAdded(app="b1", ask=f"wide{i}", resource={"memory": 4096}, count=2) for i in range(3)))
    assert t.cycle() == []
    _waiting(t)
    t.feed(f.AppAdded(app="idle", queue="root.b"))
    looks.clear()
    assert t.memo.propose() is None
    assert looks == []  # every waiting ask known to find no node: no look
    assert t.plain.propose() is None
    assert len(looks) == 2  # the batch of two, then the one left
    assert t.memo.allocator.missed == t.plain.allocator.missed
    t.feed(f.AskAdded(app="a1", ask="small", resource={"memory": 2048}))  # not known: the cycle looks
    assert t.cycle() == [("small", "n1")]
    assert t.memo.allocator.missed == {("b1", f"wide{i}"): 6 for i in range(3)}


def test_an_app_its_queue_may_not_start_yet_misses_nothing_in_a_cycle_known_to_fail() -> None:
    capped = queue("b")
    capped["maxapplications"] = 1
    t = Twins(NODE, f.AppAdded(app="b1", queue="root.b"), config=config_of(queue("a"), capped))
    t.feed(f.AskAdded(app="b1", ask="first", resource={"memory": 6144}))
    assert t.cycle() == [("first", "n1")]
    t.feed(f.AskAdded(app="b1", ask="wide", resource={"memory": 4096}))
    t.feed(f.AppAdded(app="b2", queue="root.b"), f.AskAdded(app="b2", ask="late", resource={"memory": 4096}))
    _waiting(t)
    assert ("b2", "late") not in t.memo.allocator.missed  # b2 may not start while b1 runs: never tried
    t.feed(f.AllocationReleased(allocation=t.allocation("first")))
    assert t.cycle() == [("wide", "n1")]


def test_an_ask_its_queues_max_keeps_out_is_never_tried_though_its_shape_is_known_to_fail() -> None:
    two = f.NodeAdded(node="n2", capacity={"memory": 8192, "vcore": 8000})
    t = Twins(NODE, two, f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="a1", ask="first", resource={"memory": 8192}))
    t.feed(f.AskAdded(app="b1", ask="wide", resource={"memory": 8192}))
    assert sorted(t.cycle()) == [("first", "n1"), ("wide", "n2")]
    t.feed(f.AskAdded(app="b1", ask="more", resource={"memory": 8192}))
    t.feed(f.AskAdded(app="a1", ask="over", resource={"memory": 8192}))  # 16 GiB: over a's max of 12 GiB
    _waiting(t)
    assert ("b1", "more") in t.memo.allocator.missed
    assert ("a1", "over") not in t.memo.allocator.missed  # its own queue's max: no opportunity to miss


def test_an_allocator_with_no_batch_tries_nothing_though_every_ask_is_known_to_fail() -> None:
    t = Twins(NODE, f.AppAdded(app="b1", queue="root.b"))
    t.feed(f.AskAdded(app="b1", ask="first", resource={"memory": 6144}))
    assert t.cycle() == [("first", "n1")]
    t.feed(f.AskAdded(app="b1", ask="wide", resource={"memory": 4096}))
    _waiting(t)
    for h in (t.memo, t.plain):
        h.allocator.batch = 0
    t.feed(f.AppAdded(app="idle", queue="root.b"))
    assert t.cycle() == []
    assert t.memo.allocator.missed == {("b1", "wide"): 3}  # no look: no opportunity missed
