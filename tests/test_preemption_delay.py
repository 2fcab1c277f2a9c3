"""A queue's ``preemption.delay`` (YuniKorn): an ask of the queue may preempt only once it is that old.

Sans-IO rounds on the harness, then one scenario through the real actors in virtual time. The sniper
and intra-queue policies honour the delay; YARN's proportional baseline does not read it.
"""

from __future__ import annotations

from typing import Any

import pytest

from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.compare import compare
from sniper.simulator.run import SimulationSettings
from tests.core_support import partition_raw, queue
from tests.preemption_support import PreemptHarness, preemption_raw, two_queues

ASKED_AT = 10.0
DELAY = 30.0


def starving(raw: dict[str, Any], leaf: str = "root.a") -> PreemptHarness:
    """root.b holds both nodes; the app of ``leaf`` asks for room at ``ASKED_AT``."""
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [25] * 4)
    h.fill("b1", "root.b", "n2", [25] * 4, start=4)
    h.tick(ASKED_AT)
    h.app("a1", leaf)
    h.ask("a1", "small", 25, count=2)
    h.starve()
    return h


def delayed(delay: str | None, policy: str = "sniper") -> dict[str, Any]:
    props = {} if delay is None else {"preemption_delay": delay}
    return two_queues(100, 100, a_props=props, policy=policy, natural_termination_factor=1.0)


def test_an_ask_younger_than_its_queues_delay_does_not_preempt_and_an_older_one_does() -> None:
    h = starving(delayed(f"{DELAY:g}s"))
    young = h.preempt_round(ASKED_AT + DELAY - 1)
    assert young.placements == [] and young.preempts() == []
    h.starve()
    old = h.preempt_round(ASKED_AT + DELAY)
    assert len(old.placements) == 2 and {x.for_app for x in old.preempts()} == {"a1"}


def test_without_a_delay_the_same_ask_preempts_at_once() -> None:
    """The control: what holds the young ask back is the delay, nothing else in the set-up."""
    h = starving(delayed(None))
    assert len(h.preempt_round(ASKED_AT + 1).placements) == 2


def test_a_parents_delay_holds_its_childrens_asks() -> None:
    raw = preemption_raw(
        queue("p", queue("a", guaranteed={"memory": 100}), guaranteed={"memory": 100}, preemption_delay="1m"),
        queue("b", guaranteed={"memory": 100}),
    )
    h = starving(raw, "root.p.a")
    assert h.preempt_round(ASKED_AT + 59).placements == []
    h.starve()
    assert len(h.preempt_round(ASKED_AT + 60).placements) == 2


def test_the_proportional_baseline_does_not_read_the_delay() -> None:
    """YARN's ProportionalCapacityPreemptionPolicy has no per-ask delay: it frees room for the young ask."""
    h = starving(delayed(f"{DELAY:g}s", policy="proportional"))
    result = h.preempt_round(ASKED_AT + 1)
    assert result.outcome is not None and result.outcome.accepted > 0


def _scenario(policy: str) -> list[d.DecisionMsg]:
    config = partition_raw(
        queue("a", guaranteed={"memory": "200Gi"}, preemption_delay=f"{DELAY:g}s"),
        queue("b", guaranteed={"memory": "200Gi"}),
    )
    config["preemption"] = {"policy": policy, "interval": 1.0, "total_preemption_per_round": 1.0}
    events: list[Any] = [f.PartitionConfigEvent(config=config)]
    events += [f.NodeAdded(node=f"n{i}", capacity={"memory": 100 * 1024, "vcore": 32_000}) for i in range(4)]
    events += [f.AppAdded(app="b1", queue="root.b"), f.AppAdded(app="a1", queue="root.a", t=ASKED_AT)]
    events.append(f.AskAdded(app="b1", ask="t", resource={"memory": 10 * 1024, "vcore": 1000}, count=40, duration=500))
    events.append(
        f.AskAdded(app="a1", ask="t", resource={"memory": 10 * 1024, "vcore": 1000}, count=10, duration=500, t=ASKED_AT)
    )
    return compare(events, None, [policy], SimulationSettings(until=120.0))[policy].decisions


@pytest.mark.parametrize(("policy", "first_at_least"), [("sniper", ASKED_AT + DELAY), ("proportional", 0.0)])
def test_in_a_simulated_cluster_sniper_preempts_for_the_ask_only_after_the_delay(
    policy: str, first_at_least: float
) -> None:
    preempts = [x for x in _scenario(policy) if isinstance(x, d.Preempt)]
    assert preempts, f"{policy} preempted nothing"
    first = min(x.t for x in preempts)
    assert first >= first_at_least
    if policy == "proportional":
        assert first < ASKED_AT + DELAY  # it does not wait
