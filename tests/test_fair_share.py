"""Fair share with memory (``fairshare.halflife``): inside a queue with a half-life, what competes above the
guarantees is served lowest decayed usage first; without it, by the usual order. Sans-IO on the harness,
and the decayed usage through a snapshot.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from sniper.core.cache import state_changes
from sniper.core.config import parse_partition
from sniper.core.state import PartitionState
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import queue
from tests.preemption_support import PARTITION, PreemptHarness, preemption_raw

HOUR = 3600.0


def _harness(raw: dict[str, Any]) -> PreemptHarness:
    h = PreemptHarness(raw, policy="sniper")
    h.nodes("n1")
    return h


def _heavy_hour(h: PreemptHarness, queue_path: str) -> None:
    """User heavy holds the whole node for an hour, then lets it go."""
    h.feed(f.AppAdded(app="h0", queue=queue_path, user="heavy"))
    aid = h.run("h0", 100, "n1", at=0.0)
    h.tick(HOUR)
    h.release(aid)


def _both_ask(h: PreemptHarness, heavy_queue: str, light_queue: str) -> str:
    """heavy's app (submitted first) and light's ask for the whole node at once; the app served."""
    h.feed(f.AppAdded(app="h1", queue=heavy_queue, user="heavy", t=HOUR))
    h.feed(f.AppAdded(app="l1", queue=light_queue, user="light", t=HOUR))
    h.ask("h1", "t", 100)
    h.ask("l1", "t", 100)
    h.starve()
    return h.allocated()[-1].app


def _leaf(halflife: str | None) -> dict[str, Any]:
    props: dict[str, Any] = {} if halflife is None else {"fairshare_halflife": halflife}
    return preemption_raw(queue("a", **props), policy="none")


@pytest.mark.parametrize(("halflife", "served"), [("30m", "l1"), (None, "h1")])
def test_the_light_user_is_served_first_under_a_half_life_and_by_submission_without(
    halflife: str | None, served: str
) -> None:
    h = _harness(_leaf(halflife))
    _heavy_hour(h, "root.a")
    assert _both_ask(h, "root.a", "root.a") == served


def test_the_heavy_users_history_halves_every_half_life() -> None:
    h = _harness(_leaf("30m"))
    _heavy_hour(h, "root.a")
    usage = h.cache.state.fair_usage["root.a@heavy"]
    at_release = usage.value_at(HOUR)
    assert usage.value_at(HOUR + 1800.0) == pytest.approx(at_release / 2)
    assert at_release == pytest.approx(1800.0 / math.log(2) * 0.75)  # a whole node for two half-lives
    assert h.allocator.state.fair_usage["root.a@heavy"].value_at(HOUR) == pytest.approx(at_release)


def test_among_children_above_their_guarantees_the_one_that_held_less_goes_first() -> None:
    raw = preemption_raw(queue("p", queue("x"), queue("y"), fairshare_halflife="30m"), policy="none")
    h = _harness(raw)
    _heavy_hour(h, "root.p.x")
    assert _both_ask(h, "root.p.x", "root.p.y") == "l1"
    plain = _harness(preemption_raw(queue("p", queue("x"), queue("y")), policy="none"))
    _heavy_hour(plain, "root.p.x")
    assert _both_ask(plain, "root.p.x", "root.p.y") == "h1"  # x and y hold nothing now: by path


def test_a_guarantee_comes_before_history() -> None:
    """x below its guarantee goes first however much it held: history orders only what is above."""
    raw = preemption_raw(
        queue("p", queue("x", guaranteed={"memory": 100}), queue("y"), fairshare_halflife="30m"), policy="none"
    )
    h = _harness(raw)
    _heavy_hour(h, "root.p.x")
    assert _both_ask(h, "root.p.x", "root.p.y") == "h1"


def test_the_decayed_usage_survives_a_snapshot_and_orders_the_same() -> None:
    h = _harness(_leaf("30m"))
    _heavy_hour(h, "root.a")
    h.tick(HOUR + 600.0)
    changes = msgspec.msgpack.decode(msgspec.msgpack.encode(state_changes(h.cache.state)), type=list[p.ChangeMsg])
    restored = PartitionState(PARTITION)
    for change in changes:
        restored.apply(change)
    later = HOUR + 1200.0
    assert restored.fair_usage.keys() == h.cache.state.fair_usage.keys() == {"root.a@heavy"}
    assert restored.fair_usage["root.a@heavy"].value_at(later) == pytest.approx(
        h.cache.state.fair_usage["root.a@heavy"].value_at(later)
    )


def test_a_half_life_that_is_not_a_duration_is_warned_and_off() -> None:
    part = parse_partition(_leaf("soon"))
    leaf = part.leaf("root.a")
    assert leaf is not None and leaf.fairshare_halflife == 0.0
    assert any("fairshare.halflife" in w for w in part.warnings)
    assert parse_partition(_leaf("30m")).leaf("root.a").fairshare_halflife == 1800.0  # type: ignore[union-attr]


def test_the_sort_policy_orders_a_users_apps_and_breaks_ties_between_users() -> None:
    raw = preemption_raw(queue("a", fairshare_halflife="30m", application_sort_policy="priority"), policy="none")
    h = _harness(raw)
    _heavy_hour(h, "root.a")
    for app, user, priority in (("h1", "heavy", 9), ("l1", "light", 1), ("l2", "light", 5), ("n1", "new", 3)):
        h.feed(f.AppAdded(app=app, queue="root.a", user=user, priority=priority, t=HOUR))
        h.ask(app, "t", 25)
    h.starve()
    # light and new have no history (a tie): priority decides among them; heavy, with history, goes last
    assert [x.app for x in h.allocated()[1:]] == ["l2", "n1", "l1", "h1"]
