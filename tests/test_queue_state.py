"""A queue's ``queue.state`` (YARN's queue states): a stopped queue, or any queue under a stopped parent,
refuses new apps with the code ``queue_stopped``; the apps it runs keep running, their asks are still
served, and its guarantee still counts (they still preempt for it). Operators see it ``draining`` while
apps still run in it and ``stopped`` once none does; the state survives a snapshot and its restore.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from sniper.core.admission import queue_state
from sniper.core.config import ConfigError, parse_partition, partition_to_raw
from sniper.core.recovery import restore, take_snapshot
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.snapshot import snapshot_msgpack
from tests.core_support import PARTITION, partition_raw, queue
from tests.preemption_support import PreemptHarness, preemption_raw
from tests.recovery_support import Owner, durable_fingerprint, recover


def two_teams(a_state: str = "running", *, parent_state: str | None = None) -> dict[str, Any]:
    """root.team.a (guarantee 100, its state ``a_state``) under root.team (``parent_state``, when set),
    and root.b (guarantee 100)."""
    team_props: dict[str, Any] = {} if parent_state is None else {"queue_state": parent_state}
    return preemption_raw(
        queue("team", queue("a", guaranteed={"memory": 100}, queue_state=a_state), **team_props),
        queue("b", guaranteed={"memory": 100}),
    )


def rejections(decisions: list[d.DecisionMsg]) -> list[tuple[str | None, str]]:
    return [(x.code, x.reason) for x in decisions if isinstance(x, d.Rejected)]


def test_a_stopped_queue_refuses_a_new_app_with_its_code_and_reason() -> None:
    h = PreemptHarness(two_teams("stopped"))
    out = h.feed(f.AppAdded(app="late", queue="root.team.a"), allow_rejected=True)
    assert rejections(out) == [
        ("queue_stopped", "app late: root.team.a admits no new app, queue root.team.a is stopped (queue.state)")
    ]
    assert "late" not in h.cache.state.apps
    h.app("b1", "root.b")  # the other queue admits as before


def test_a_stopped_parent_stops_its_children_whatever_they_say() -> None:
    h = PreemptHarness(two_teams("running", parent_state="stopped"))
    out = h.feed(f.AppAdded(app="late", queue="root.team.a"), allow_rejected=True)
    assert rejections(out) == [
        ("queue_stopped", "app late: root.team.a admits no new app, its parent root.team is stopped (queue.state)")
    ]


def test_stopping_a_queue_keeps_its_apps_running_serves_their_asks_and_drains_then_stops() -> None:
    h = PreemptHarness(two_teams())
    h.nodes("n1", "n2")
    h.app("a1", "root.team.a")
    h.ask("a1", "first", 20)
    h.settle()
    h.feed(f.PartitionConfigEvent(config=two_teams("stopped")))
    a = h.cache.state.queues["root.team.a"]
    assert queue_state(a) == "draining" and queue_state(h.cache.state.queues["root.team"]) == "running"
    h.ask("a1", "second", 30)  # an app it runs still asks, and is served
    h.settle()
    assert sorted(x.ask for x in h.allocated()) == ["first", "second"]
    assert rejections(h.feed(f.AppAdded(app="a2", queue="root.team.a"), allow_rejected=True))[0][0] == "queue_stopped"
    h.feed(f.AppAdded(app="a1", queue="root.team.a"))  # the app it runs, added again: the same app, not refused
    h.feed(f.AppRemoved(app="a1"))
    assert queue_state(a) == "stopped"
    h.feed(f.PartitionConfigEvent(config=two_teams("running")))  # started again: admits apps again
    h.app("a3", "root.team.a")
    assert queue_state(h.cache.state.queues["root.team.a"]) == "running"


def test_a_stopped_queues_guarantee_still_counts_for_the_apps_it_runs() -> None:
    """root.b borrowed the whole cluster; root.team.a, stopped after its app came, still preempts back
    to its guarantee for that app."""
    h = PreemptHarness(two_teams())
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50], start=2)
    h.app("a1", "root.team.a")
    h.feed(f.PartitionConfigEvent(config=two_teams("stopped")))
    h.ask("a1", "big", 50, count=2)
    h.starve()
    result = h.preempt_round(10.0)
    assert len(result.placements) == 2 and {x.for_queue for x in result.preempts()} == {"root.team.a"}
    assert not h.model.violations


def test_a_stopped_parent_drains_while_a_child_runs_apps_then_stops() -> None:
    h = PreemptHarness(two_teams())
    h.app("a1", "root.team.a")
    h.feed(f.PartitionConfigEvent(config=two_teams(parent_state="stopped")))
    team, b = h.cache.state.queues["root.team"], h.cache.state.queues["root.b"]
    assert (queue_state(team), queue_state(b)) == ("draining", "running")
    h.feed(f.AppRemoved(app="a1"))
    assert (queue_state(team), queue_state(h.cache.state.queues["root.team.a"])) == ("stopped", "stopped")


def test_the_state_is_running_or_stopped_and_anything_else_is_refused_naming_the_property() -> None:
    with pytest.raises(ConfigError, match=r"queue root\.a\.queue\.state: 'draining' is not one of running, stopped"):
        parse_partition(partition_raw(queue("a", queue_state="draining")))
    cfg = parse_partition(two_teams("running", parent_state="stopped"))
    stopped = {q.path: q.stopped for q in cfg.queues()}
    assert stopped == {"root": False, "root.team": True, "root.team.a": True, "root.b": False}
    assert {q.path: q.stopped for q in parse_partition(partition_to_raw(cfg)).queues()} == stopped


def test_a_new_owner_restored_from_a_snapshot_still_refuses_new_apps_to_a_stopped_queue() -> None:
    raw = partition_raw(queue("a", guaranteed={"memory": 8}, queue_state="stopped"), queue("b"))
    o = Owner(config=raw)
    snap = snapshot_msgpack.decode(msgspec.msgpack.encode(take_snapshot(o.core)))
    core = restore(snap, epoch=snap.epoch + 1)
    core.handle_event(f.AppAdded(partition=PARTITION, id="late", app="late", queue="root.a"))
    assert [x.code for x in core.drain().decisions if isinstance(x, d.Rejected)] == ["queue_stopped"]


def test_a_new_owner_replaying_the_log_after_a_snapshot_refuses_what_the_old_one_refused() -> None:
    """The old owner stops root.a after the snapshot and refuses an app there; the new owner replays the
    feed and the log to the same state, with the same rejection and nothing decided anew."""
    running = partition_raw(queue("a", guaranteed={"memory": 8}), queue("b"))
    o = Owner(config=running)
    o.feed_event(f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"))
    snap = take_snapshot(o.core)
    stopped = partition_raw(queue("a", guaranteed={"memory": 8}, queue_state="stopped"), queue("b"))
    o.feed_event(
        f.PartitionConfigEvent(partition=PARTITION, id="stop", config=stopped),
        f.AppAdded(partition=PARTITION, id="late", app="late", queue="root.a"),
    )
    assert [x.code for x in o.log if isinstance(x, d.Rejected)] == ["queue_stopped"]
    core, result = recover(o, snap)
    assert result.divergences == [] and result.fresh == []
    assert durable_fingerprint(core) == durable_fingerprint(o.core)
    assert set(core.state.apps) == {"a1"} and queue_state(core.state.queues["root.a"]) == "draining"
