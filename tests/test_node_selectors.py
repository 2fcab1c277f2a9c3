"""Node selectors: an ask with ``node_selector`` runs, and preempts, only on nodes whose labels match."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core.cache import state_changes
from sniper.core.state import PartitionState, selector_matches
from sniper.messages import decisions as d
from sniper.messages import feed as f
from tests.core_support import PARTITION, Harness, config_of, consistency_problems, queue
from tests.preemption_support import PreemptHarness, preemption_raw

MODELS = ["T4", "P100", "V100M16", "V100M32"]


def test_the_rule_is_every_key_with_one_of_its_values() -> None:
    labels = {"gpu_model": "V100M32", "zone": "a"}
    assert selector_matches({}, labels)
    assert selector_matches({"gpu_model": ["V100M16", "V100M32"]}, labels)
    assert selector_matches({"gpu_model": ["V100M32"], "zone": ["a", "b"]}, labels)
    assert not selector_matches({"gpu_model": ["T4"]}, labels)
    assert not selector_matches({"gpu_model": ["V100M32"], "zone": ["b"]}, labels)
    assert not selector_matches({"rack": ["r1"]}, labels)  # a key the node lacks never matches
    assert not selector_matches({"gpu_model": []}, labels)


def test_allocation_skips_nodes_the_selector_does_not_match() -> None:
    h = Harness(config_of(queue("a")))
    # Binpacking prefers the fuller node: t4 has the least free room, yet the ask only accepts V100s.
    h.feed(
        f.NodeAdded(node="t4", capacity={"memory": 50}, labels={"gpu_model": "T4"}),
        f.NodeAdded(node="v100", capacity={"memory": 100}, labels={"gpu_model": "V100M32"}),
        f.NodeAdded(node="bare", capacity={"memory": 60}),
        f.AppAdded(app="x", queue="root.a"),
        f.AskAdded(app="x", ask="gpu", resource={"memory": 10}, count=3, node_selector={"gpu_model": ["V100M32"]}),
        f.AskAdded(app="x", ask="any", resource={"memory": 10}, count=1),
    )
    h.settle()
    placed = h.placements()
    assert sorted(n for a, n in placed if a == "gpu") == ["v100"] * 3
    assert [n for a, n in placed if a == "any"] == ["t4"]


def test_an_ask_no_node_can_match_is_rejected_with_the_reason() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 50}, labels={"gpu_model": "T4"}))
    out = h.feed(
        f.AppAdded(app="x", queue="root.a"),
        f.AskAdded(app="x", ask="a100", resource={"memory": 10}, node_selector={"gpu_model": ["A100"]}),
    )
    reasons = [x.reason for x in out if isinstance(x, d.Rejected)]
    assert len(reasons) == 1 and "no node matches its node selector" in reasons[0] and "A100" in reasons[0]
    assert "a100" not in h.cache.state.apps["x"].asks


def test_a_rejection_quotes_a_huge_selector_cut_short_with_what_it_left_out() -> None:
    selector = {f"key{k}": [f"value{v:05d}" for v in range(1000)] for k in range(64)}
    h = Harness(config_of(queue("a")))
    h.feed(f.NodeAdded(node="t4", capacity={"memory": 50}, labels={"gpu_model": "T4"}))
    out = h.feed(
        f.AppAdded(app="x", queue="root.a"),
        f.AskAdded(app="x", ask="many", resource={"memory": 10}, node_selector=selector),
    )
    [reason] = [x.reason for x in out if isinstance(x, d.Rejected)]
    left_out = len(str(selector)) - (d.MAX_QUOTE - 40)
    assert reason.startswith("ask x/many: no node matches its node selector {'key0': ['value00000', ")
    assert reason.endswith(f"… ({left_out} characters left out)") and len(reason) < 2 * d.MAX_QUOTE


def test_every_decided_reason_is_cut_to_its_bound_and_a_short_one_is_kept_whole() -> None:
    h = Harness(config_of(queue("a")))
    long = "x" * (d.MAX_REASON * 3)
    h.cache.decide(d.Rejected, reason=long, code="invalid")
    h.cache.decide(d.Rejected, reason="short", code="invalid")
    cut, short = (x.reason for x in h.pump() if isinstance(x, d.Rejected))
    assert len(cut) <= d.MAX_REASON and cut.endswith(f"… ({len(long) - d.MAX_REASON + 40} characters left out)")
    assert short == "short"


def test_preemption_takes_victims_only_where_the_beneficiary_may_run() -> None:
    h = PreemptHarness(preemption_raw(queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100})))
    h.feed(
        f.NodeAdded(node="t4", capacity={"memory": 100}, labels={"gpu_model": "T4"}),
        f.NodeAdded(node="v100", capacity={"memory": 100}, labels={"gpu_model": "V100M16"}),
    )
    # b borrowed everything; its cheapest (youngest) containers are on t4.
    h.fill("b1", "root.b", "v100", [50, 50], start=0.0)
    h.fill("b1", "root.b", "t4", [50, 50], start=10.0)
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="v", resource={"memory": 50}, count=1, node_selector={"gpu_model": ["V100M16"]}))
    h.starve()
    result = h.preempt_round(now=20.0)
    preempts = result.preempts()
    assert preempts, "a is below its guarantee and may preempt b"
    assert {p.node for p in preempts} == {"v100"}
    assert all(p.for_ask == "v" for p in preempts)


node_labels = st.fixed_dictionaries({}, optional={"gpu_model": st.sampled_from(MODELS), "zone": st.sampled_from("ab")})
selectors = st.dictionaries(
    st.sampled_from(["gpu_model", "zone"]),
    st.lists(st.sampled_from([*MODELS, "a", "b"]), min_size=1, max_size=3, unique=True),
    max_size=2,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    labels=st.lists(node_labels, min_size=1, max_size=6),
    asks=st.lists(st.tuples(selectors, st.integers(1, 60), st.integers(1, 4)), min_size=1, max_size=8),
)
def test_nothing_ever_lands_on_a_non_matching_node(
    labels: list[dict[str, str]], asks: list[tuple[dict[str, list[str]], int, int]]
) -> None:
    h = PreemptHarness(preemption_raw(queue("a", guaranteed={"memory": 300}), queue("b", guaranteed={"memory": 300})))
    node_labels_of = {f"n{i}": lab for i, lab in enumerate(labels)}
    h.feed(*(f.NodeAdded(node=n, capacity={"memory": 100}, labels=lab) for n, lab in node_labels_of.items()))
    # b takes three quarters of every node first: a's small asks fit beside it, larger ones need preemption.
    h.app("b1", "root.b")
    h.feed(f.AskAdded(app="b1", ask="fill", resource={"memory": 25}, count=3 * len(labels)))
    h.settle()
    h.app("a1", "root.a")
    selector_of: dict[str, dict[str, list[str]]] = {"fill": {}}
    for i, (selector, memory, count) in enumerate(asks):
        name = f"s{i}"
        selector_of[name] = selector
        h.feed(
            f.AskAdded(app="a1", ask=name, resource={"memory": memory}, count=count, node_selector=selector),
            allow_rejected=True,
        )
    for second in range(1, 40):
        h.starve()
        h.preempt_round(now=float(second))
        h.release(*h.kills())  # the resource manager confirms the kills
        h.settle()
    assert consistency_problems(h.cache.state) == []  # the waiting selectors' count among them
    for x in h.decisions:
        if isinstance(x, d.Allocated):
            assert selector_matches(selector_of[x.ask], node_labels_of[x.node]), (x.ask, x.node)
        elif isinstance(x, d.Preempt):
            assert selector_matches(selector_of[x.for_ask], node_labels_of[x.node]), (x.for_ask, x.node)
        elif isinstance(x, d.Rejected) and x.ask:
            assert not any(selector_matches(selector_of[x.ask], lab) for lab in labels), x.reason


def test_a_replica_rebuilt_from_the_state_keeps_the_selector() -> None:
    h = Harness(config_of(queue("a")))
    h.feed(
        f.NodeAdded(node="v100", capacity={"memory": 100}, labels={"gpu_model": "V100M32"}),
        f.AppAdded(app="x", queue="root.a"),
        f.AskAdded(app="x", ask="gpu", resource={"memory": 10}, node_selector={"gpu_model": ["V100M32", "V100M16"]}),
    )
    replica = PartitionState(PARTITION)
    replica.apply_all(state_changes(h.cache.state))
    ask = replica.apps["x"].asks["gpu"]
    assert ask.node_selector == {"gpu_model": frozenset({"V100M16", "V100M32"})}
    assert ask.accepts(replica.nodes["v100"])
