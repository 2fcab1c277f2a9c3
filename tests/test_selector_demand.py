"""Node order for asks free to run anywhere: they stay off the nodes that waiting asks' node selectors require."""

from __future__ import annotations

from sniper.messages import feed as f
from tests.core_support import Harness, config_of, consistency_problems, queue
from tests.preemption_support import PreemptHarness, preemption_raw

T4 = {"gpu_model": "T4"}
G2 = {"gpu_model": "G2"}


def waiting_for_t4(h: Harness) -> None:
    """The T4 node half full; two asks that select T4 and need more than its free room wait."""
    h.feed(
        f.AppAdded(app="x", queue="root.a"),
        f.AskAdded(app="x", ask="t4-running", resource={"memory": 60}, node_selector={"gpu_model": ["T4"]}),
    )
    h.settle()
    h.feed(f.AskAdded(app="x", ask="t4-waiting", resource={"memory": 50}, count=2, node_selector={"gpu_model": ["T4"]}))
    h.settle()
    assert [n for a, n in h.placements() if a.startswith("t4")] == ["t4"]


def place_anywhere(h: Harness, memory: int = 30, **selector: list[str]) -> str:
    h.feed(
        f.AppAdded(app="y", queue="root.a"),
        f.AskAdded(app="y", ask="anywhere", resource={"memory": memory}, node_selector=selector),
    )
    h.settle()
    [node] = [n for a, n in h.placements() if a == "anywhere"]
    assert consistency_problems(h.cache.state) == [] and consistency_problems(h.allocator.state) == []
    return node


def test_an_ask_without_selector_takes_a_node_no_waiting_ask_requires_over_the_fuller_one() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 100}, labels=T4))
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 200}, labels=G2))
    waiting_for_t4(h)
    # Bin packing alone picks t4 (40 free against 200): the waiting T4 asks send it to g2.
    assert place_anywhere(h) == "g2"
    assert h.cache.state.selector_demand.counts() == {(("gpu_model", frozenset({"T4"})),): 1}


def test_with_no_ask_waiting_bin_packing_keeps_its_order() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 100}, labels=T4))
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 200}, labels=G2))
    h.feed(
        f.AppAdded(app="x", queue="root.a"),
        f.AskAdded(app="x", ask="t4-running", resource={"memory": 60}, node_selector={"gpu_model": ["T4"]}),
    )
    h.settle()
    assert not h.allocator.state.selector_demand
    assert place_anywhere(h) == "t4"


def test_the_preference_ends_when_the_waiting_asks_are_withdrawn() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 100}, labels=T4))
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 200}, labels=G2))
    waiting_for_t4(h)
    h.feed(f.AskRemoved(app="x", ask="t4-waiting"))
    assert not h.cache.state.selector_demand and not h.allocator.state.selector_demand
    assert place_anywhere(h) == "t4"


def test_a_required_node_is_still_used_when_no_other_node_fits() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 100}, labels=T4))
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 200}, labels=G2))
    h.feed(
        f.AppAdded(app="z", queue="root.a"),
        f.AskAdded(app="z", ask="g2-running", resource={"memory": 180}, node_selector={"gpu_model": ["G2"]}),
    )
    h.settle()
    waiting_for_t4(h)
    assert place_anywhere(h) == "t4"  # g2 has 20 free: only the required node holds 30


def test_under_fair_order_the_emptiest_node_a_waiting_ask_requires_comes_after_the_others() -> None:
    h = Harness(config_of(queue("a"), node_sort="fair"))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 200}, labels=T4))
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 80}, labels=G2))
    h.feed(
        f.AppAdded(app="x", queue="root.a"),
        f.AskAdded(app="x", ask="t4-running", resource={"memory": 100}, node_selector={"gpu_model": ["T4"]}),
    )
    h.settle()
    h.feed(f.AskAdded(app="x", ask="t4-waiting", resource={"memory": 150}, node_selector={"gpu_model": ["T4"]}))
    h.settle()
    assert place_anywhere(h) == "g2"  # fair order alone picks t4 (100 free against 80)


def test_an_ask_with_its_own_selector_keeps_the_policy_order() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 100}, labels=T4))
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 200}, labels=G2))
    waiting_for_t4(h)
    assert place_anywhere(h, gpu_model=["T4", "G2"]) == "t4"


def test_only_nodes_matching_every_key_of_a_waiting_selector_are_required() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 100}, labels={**T4, "zone": "a"}))
    h.feed(f.NodeAdded(node="t4b", capacity={"memory": 150}, labels={**T4, "zone": "b"}))
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 300}, labels=G2))
    h.feed(
        f.AppAdded(app="x", queue="root.a"),
        f.AskAdded(app="x", ask="t4-running", resource={"memory": 60}, node_selector={"gpu_model": ["T4"]}),
    )
    h.settle()
    # Only zone b's T4 node is wanted (every key of the selector must match): t4, in zone a, is free to use.
    h.feed(
        f.AskAdded(
            app="x", ask="t4-waiting", resource={"memory": 200}, node_selector={"gpu_model": ["T4"], "zone": ["b"]}
        )
    )
    h.settle()
    assert place_anywhere(h) == "t4"


def test_a_node_added_again_under_its_name_with_another_label_is_judged_by_the_new_label() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 100}, labels=T4))
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 110}, labels=G2))
    waiting_for_t4(h)
    h.feed(f.AppAdded(app="w", queue="root.a"), f.AskAdded(app="w", ask="probe", resource={"memory": 10}))
    h.settle()
    assert [n for a, n in h.placements() if a == "probe"] == ["g2"]  # the allocator has judged g2 once
    h.feed(f.NodeRemoved(node="g2"))
    # Now a T4 node too small for the waiting asks: required all the same, and the fullest that fits.
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 45}, labels=T4))
    h.feed(f.NodeAdded(node="bare", capacity={"memory": 300}))
    assert place_anywhere(h) == "bare"


def test_a_selector_ask_holding_a_preemption_reservation_no_longer_counts_as_waiting() -> None:
    h = PreemptHarness(preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100})))
    h.feed(
        f.NodeAdded(node="t4", capacity={"memory": 100}, labels=T4),
        f.NodeAdded(node="g2", capacity={"memory": 100}, labels=G2),
    )
    h.fill("b1", "root.b", "t4", [50, 50], start=0.0)
    h.fill("b1", "root.b", "g2", [50, 50], start=10.0)
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="t", resource={"memory": 50}, node_selector={"gpu_model": ["T4"]}))
    assert h.cache.state.selector_demand.counts() == {(("gpu_model", frozenset({"T4"})),): 1}
    h.starve()
    assert h.preempt_round(now=20.0).preempts(), "a is below its guarantee and may preempt b on t4"
    state = h.cache.state
    assert state.apps["a1"].asks["t"].reserved == 1
    assert not state.selector_demand and not h.allocator.state.selector_demand
    assert consistency_problems(state) == [] and consistency_problems(h.allocator.state) == []


def test_a_gang_free_to_run_anywhere_places_every_member_off_the_required_node() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 100}, labels=T4))
    h.feed(f.NodeAdded(node="g2", capacity={"memory": 200}, labels=G2))
    waiting_for_t4(h)
    h.feed(
        f.AppAdded(app="y", queue="root.a"),
        f.AskAdded(app="y", ask="gang", resource={"memory": 30}, count=2, gang_min=2),
    )
    h.settle()
    # Bin packing alone puts the first member on t4 (40 free) and the second on g2.
    assert [n for a, n in h.placements() if a == "gang"] == ["g2", "g2"]
