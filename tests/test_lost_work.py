"""Lost work: what a kill throws away since the victim's last checkpoint (``checkpoint_interval``,
``allocation_checkpointed``), the ``lost_work`` victim cost that chooses by it, the checkpoint times a
snapshot, a replay and a replica keep, the stand-in resource manager's count of it, and bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from sniper.cli import app as cli
from sniper.core import checkpoints
from sniper.core.cache import state_changes
from sniper.core.recovery import restore, take_snapshot
from sniper.core.state import PartitionState
from sniper.importers.common import AskSpec, ImportError_, ImportOptions, JobSpec, NodeSpec, Workload, build_trace
from sniper.messages import codec
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.snapshot import snapshot_msgpack
from sniper.simulator.rm import StandInRM
from tests.core_support import PARTITION, fingerprint, partition_raw, queue
from tests.preemption_support import PreemptHarness, preemption_raw
from tests.recovery_support import Owner, durable_fingerprint, recover

DATA = Path(__file__).parent / "data"

# ---------------------------------------------------------------------- the definition


@pytest.mark.parametrize(
    ("start", "at", "interval", "checkpointed", "lost"),
    [
        (100.0, 400.0, None, None, 300.0),  # no checkpoint information: its running time
        (100.0, 400.0, 120.0, None, 60.0),  # checkpoints at 220 and 340
        (100.0, 400.0, None, 390.0, 10.0),  # the one its app reported
        (100.0, 400.0, 120.0, 360.0, 40.0),  # the later of the reported and the implied
        (100.0, 400.0, 120.0, 300.0, 60.0),
        (100.0, 400.0, None, 450.0, 300.0),  # a checkpoint after the kill saves nothing then
        (100.0, 400.0, None, 50.0, 300.0),  # one before its start is no checkpoint of it
        (100.0, 400.0, 300.0, None, 0.0),  # killed as it checkpoints
        (100.0, 90.0, 10.0, None, 0.0),  # never negative
    ],
)
def test_lost_work_is_the_time_since_the_last_checkpoint_known_or_implied(
    start: float, at: float, interval: float | None, checkpointed: float | None, lost: float
) -> None:
    assert checkpoints.lost_work(start, at, interval, checkpointed) == pytest.approx(lost)
    assert checkpoints.lost_work(start, at, interval, checkpointed) <= max(0.0, at - start)


# ---------------------------------------------------------------------- choosing victims by it

# One node's worth of each shape: memory only, GPUs with memory and vcore beside them.
SHAPES = {"memory": {"memory": 60}, "gpu": {"memory": 40, "vcore": 4000, "gpu": 2}}


def trainer_and_young(
    shape: dict[str, int], cost: str, *, interval: float | None = None
) -> tuple[PreemptHarness, str, str]:
    """n1 holds the trainer's container, started at 0 (its app checkpoints every ``interval``); n2 a
    container of another app started at 400 that never checkpoints; both fill their node, root.b's
    (guaranteed half a node of every resource, a one and a half nodes). a asks for a node's worth and
    has missed a cycle. Returns the harness and the two containers."""
    a = queue("a", guaranteed={k: v * 3 // 2 for k, v in shape.items()})
    b = queue("b", guaranteed={k: v // 2 for k, v in shape.items()})
    h = PreemptHarness(preemption_raw(a, b, victim_cost=cost))
    h.feed(*(f.NodeAdded(node=n, capacity=shape) for n in ("n1", "n2")))
    trainer = f.AppAdded(app="trainer", queue="root.b", checkpoint_interval=interval)
    h.feed(trainer, f.AppAdded(app="young", queue="root.b"))
    h.feed(f.AskAdded(app="trainer", ask="t", resource=shape))
    h.cache.allocate("trainer", "t", "n1")
    h.pump()
    old = h.allocated()[-1].allocation
    h.tick(400.0)
    h.feed(f.AskAdded(app="young", ask="y", resource=shape))
    h.cache.allocate("young", "y", "n2")
    h.pump()
    young = h.allocated()[-1].allocation
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="big", resource=shape))
    h.starve()
    return h, old, young


def victims_of_a_round(h: PreemptHarness, now: float) -> tuple[list[str], float]:
    result = h.preempt_round(now)
    (placement,) = result.placements
    assert result.preempts(), "the round committed its victims"
    return sorted(placement.victims), placement.cost


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_oldest_container_that_checkpointed_a_minute_ago_goes_before_a_young_one_that_never_did(
    shape: str,
) -> None:
    h, old, young = trainer_and_young(SHAPES[shape], "lost_work")
    h.tick(440.0)
    h.feed(f.AllocationCheckpointed(t=440.0, allocation=old))
    assert h.alloc(old).checkpointed == 440.0
    victims, cost = victims_of_a_round(h, 500.0)
    assert victims == [old]
    assert cost == pytest.approx(500.0 + 15.0 - 440.0), "a minute and its grace since the checkpoint"
    assert young not in h.kills() and h.alloc(young).preempt_deadline is None


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_running_time_takes_the_young_container_where_lost_work_takes_the_checkpointed_old_one(shape: str) -> None:
    h, old, young = trainer_and_young(SHAPES[shape], "running_time")
    h.tick(440.0)
    h.feed(f.AllocationCheckpointed(t=440.0, allocation=old))
    victims, cost = victims_of_a_round(h, 500.0)
    assert victims == [young]
    assert cost == pytest.approx(500.0 + 15.0 - 400.0)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_checkpoint_interval_alone_makes_the_old_container_the_cheaper_victim(shape: str) -> None:
    h, old, _ = trainer_and_young(SHAPES[shape], "lost_work", interval=120.0)
    victims, cost = victims_of_a_round(h, 500.0)
    assert victims == [old]
    assert cost == pytest.approx(515.0 - 480.0), "killed at 515, its last checkpoint at 480"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_without_checkpoint_information_lost_work_chooses_and_costs_as_running_time(shape: str) -> None:
    chosen = []
    for cost in ("running_time", "lost_work"):
        h, _, young = trainer_and_young(SHAPES[shape], cost)
        victims, paid = victims_of_a_round(h, 500.0)
        assert victims == [young]
        chosen.append(paid)
    assert chosen[0] == chosen[1] == pytest.approx(115.0)


def test_a_checkpoint_long_ago_leaves_the_old_container_the_costlier_victim() -> None:
    h, old, young = trainer_and_young(SHAPES["memory"], "lost_work")
    h.tick(300.0)
    h.feed(f.AllocationCheckpointed(t=300.0, allocation=old))
    victims, cost = victims_of_a_round(h, 500.0)
    assert victims == [young], "215 s since the old one's checkpoint against the young one's 115 s"
    assert cost == pytest.approx(115.0)


# ---------------------------------------------------------------------- the cache's rules


def test_a_checkpoint_of_an_allocation_not_running_or_not_after_the_last_changes_nothing() -> None:
    h, old, _ = trainer_and_young(SHAPES["memory"], "lost_work")
    h.tick(450.0)
    h.feed(f.AllocationCheckpointed(t=450.0, allocation=old))
    version = h.cache.state.version
    out = h.feed(
        f.AllocationCheckpointed(t=450.0, allocation="alloc-404"),  # released already, or never ran
        f.AllocationCheckpointed(t=420.0, allocation=old),  # older than the last one
        f.AllocationCheckpointed(t=450.0, allocation=old),  # the same one again
    )
    assert out == [], "no decision, no rejection: a checkpoint may cross its container's release"
    assert h.cache.state.version == version
    assert h.alloc(old).checkpointed == 450.0
    assert h.allocator.state.allocations[old].checkpointed == 450.0, "the allocator's replica follows"


def test_a_checkpoint_before_the_container_started_is_not_its_checkpoint() -> None:
    h, _, young = trainer_and_young(SHAPES["memory"], "lost_work")
    h.feed(f.AllocationCheckpointed(t=399.0, allocation=young))
    assert h.alloc(young).checkpointed is None


# ---------------------------------------------------------------------- snapshot, replay, replica


def checkpointing_owner() -> Owner:
    """b1 checkpoints every 600 s and holds four containers of 4 on two nodes of 8."""
    o = Owner()
    o.feed_event(
        f.NodeAdded(partition=PARTITION, node="n1", capacity={"memory": 8}),
        f.NodeAdded(partition=PARTITION, node="n2", capacity={"memory": 8}),
        f.AppAdded(partition=PARTITION, app="b1", queue="root.b", checkpoint_interval=600.0),
        f.AskAdded(partition=PARTITION, app="b1", ask="k", resource={"memory": 4}, count=4),
    )
    o.settle()
    return o


def checkpoint_two(o: Owner) -> dict[str, float | None]:
    first, second, *_ = sorted(o.core.state.allocations)
    o.tick(30.0)
    o.feed_event(f.AllocationCheckpointed(partition=PARTITION, t=30.0, allocation=first))
    o.tick(45.0)
    o.feed_event(f.AllocationCheckpointed(partition=PARTITION, t=45.0, allocation=second))
    return {a.id: a.checkpointed for a in o.core.state.allocations.values()}


def test_a_snapshot_keeps_the_checkpoint_times_and_intervals() -> None:
    o = checkpointing_owner()
    times = checkpoint_two(o)
    assert sorted(t for t in times.values() if t is not None) == [30.0, 45.0]
    wire = msgspec.msgpack.encode(take_snapshot(o.core))
    restored = restore(snapshot_msgpack.decode(wire))
    assert {a.id: a.checkpointed for a in restored.state.allocations.values()} == times
    assert {a.checkpoint_interval for a in restored.state.allocations.values()} == {600.0}
    assert restored.state.apps["b1"].checkpoint_interval == 600.0
    assert durable_fingerprint(restored) == durable_fingerprint(o.core)


def test_a_replay_after_the_snapshot_brings_the_checkpoint_times_back() -> None:
    o = checkpointing_owner()
    snap = take_snapshot(o.core)
    times = checkpoint_two(o)
    core, result = recover(o, snap)
    assert result.fresh == []
    assert {a.id: a.checkpointed for a in core.state.allocations.values()} == times
    assert durable_fingerprint(core) == durable_fingerprint(o.core)


def test_a_replica_rebuilt_from_the_state_keeps_the_checkpoint_times() -> None:
    o = checkpointing_owner()
    checkpoint_two(o)
    copy = PartitionState(PARTITION)
    copy.apply_all(state_changes(o.core.state))
    assert fingerprint(copy) == fingerprint(o.core.state)
    assert fingerprint(o.allocator.state, allocating=False)["allocations"] == fingerprint(copy)["allocations"]


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "line",
    [
        '{"type":"app_added","app":"a","queue":"root.a","checkpoint_interval":0}',
        '{"type":"app_added","app":"a","queue":"root.a","checkpoint_interval":-60}',
        '{"type":"app_added","app":"a","queue":"root.a","checkpoint_interval":"hourly"}',
        '{"type":"app_added","app":"a","queue":"root.a","checkpoint_interval":1e300}',
        '{"type":"allocation_checkpointed","t":5}',
        '{"type":"allocation_checkpointed","allocation":"","t":5}',
        '{"type":"allocation_checkpointed","allocation":"alloc-1","t":-1}',
    ],
)
def test_a_bad_checkpoint_interval_or_checkpoint_is_refused_at_decoding_naming_its_field(line: str) -> None:
    (bad,) = codec.decode_feed_lines([line])
    assert isinstance(bad, codec.BadInput)
    assert any(word in bad.reason for word in ("checkpoint_interval", "allocation", "$.t")), bad.reason


def test_a_good_checkpoint_interval_and_checkpoint_decode() -> None:
    app, checkpoint = codec.decode_feed_lines(
        [
            '{"type":"app_added","app":"a","queue":"root.a","checkpoint_interval":1800}',
            '{"type":"allocation_checkpointed","allocation":"alloc-1","t":5}',
        ]
    )
    assert app == f.AppAdded(app="a", queue="root.a", checkpoint_interval=1800.0)
    assert checkpoint == f.AllocationCheckpointed(allocation="alloc-1", t=5.0)


def test_a_partition_rejects_an_unknown_victim_cost_and_accepts_lost_work() -> None:
    from sniper.core.config import ConfigError, parse_partition

    raw: dict[str, Any] = {**partition_raw(queue("a")), "preemption": {"victim_cost": "lost_work"}}
    assert parse_partition(raw).preemption.victim_cost == "lost_work"
    with pytest.raises(ConfigError, match="lost_work"):
        parse_partition({**raw, "preemption": {"victim_cost": "lost-work"}})


# ---------------------------------------------------------------------- importer and simulator


def one_job_workload() -> Workload:
    return Workload(
        nodes=[NodeSpec("n1", {"memory": 100})],
        jobs=[JobSpec("j1", "a", 0.0, (AskSpec("k", 0.0, {"memory": 10}, duration=3600.0),))],
    )


def test_the_importer_gives_every_app_the_checkpoint_interval_scaled_like_durations() -> None:
    events = build_trace(one_job_workload(), ImportOptions(time_scale=100, checkpoint_interval=1800)).events
    (added,) = [e for e in events if isinstance(e, f.AppAdded)]
    assert added.checkpoint_interval == 18.0
    (plain,) = [e for e in build_trace(one_job_workload(), ImportOptions()).events if isinstance(e, f.AppAdded)]
    assert plain.checkpoint_interval is None


@pytest.mark.parametrize("interval", [0.0, -5.0, float("nan"), float("inf")])
def test_the_importer_refuses_a_checkpoint_interval_that_is_not_a_positive_number(interval: float) -> None:
    with pytest.raises(ImportError_, match="--checkpoint-interval"):
        build_trace(one_job_workload(), ImportOptions(checkpoint_interval=interval))


def test_the_import_command_refuses_a_zero_checkpoint_interval_with_exit_2(tmp_path: Path) -> None:
    pods, nodes = DATA / "gpu_v2023" / "pods.csv", DATA / "gpu_v2023" / "nodes.csv"
    args = ["import", "pods-csv", "--pods", str(pods), "--nodes", str(nodes), "--out", str(tmp_path / "t.jsonl")]
    result = CliRunner().invoke(cli, [*args, "--checkpoint-interval", "0"])
    assert result.exit_code == 2 and "--checkpoint-interval" in result.output
    assert "Traceback" not in result.output
    assert CliRunner().invoke(cli, [*args, "--checkpoint-interval", "60"]).exit_code == 0


def _allocated(aid: str, app: str) -> d.Allocated:
    return d.Allocated(allocation=aid, app=app, ask="k", queue="root.a", node="n1", resource={"memory": 1})


def test_the_stand_in_apps_checkpoint_on_their_interval_and_lose_only_the_work_since() -> None:
    rm = StandInRM()
    rm.observe(f.AppAdded(app="saver", queue="root.a", checkpoint_interval=10.0))
    rm.observe(f.AppAdded(app="plain", queue="root.a"))
    for app in ("saver", "plain"):
        rm.observe(f.AskAdded(app=app, ask="k", resource={"memory": 1}, duration=100.0))
    rm.on_decision(_allocated("x1", "saver"), now=5.0)
    rm.on_decision(_allocated("x2", "plain"), now=5.0)
    rm.on_decision(d.Kill(allocation="x1", app="saver", queue="root.a", node="n1"), now=28.0)
    assert rm.lost_work == {"default": 3.0}, "its last checkpoint was at 25"
    assert rm.running_time_lost == {"default": 23.0}
    lost = d.AllocationLost(allocation="x2", app="plain", ask="k", queue="root.a", node="n1", resource={})
    rm.on_decision(lost, now=28.0)
    assert rm.lost_work == {"default": 26.0}, "an app that never checkpoints loses all it ran"
    assert rm.running_time_lost == {"default": 46.0}
    assert sum(rm.lost_work_by_cause["default"].values()) == pytest.approx(rm.lost_work["default"])


def test_the_stand_in_rm_counts_a_checkpoint_the_trace_reports() -> None:
    rm = StandInRM()
    rm.observe(f.AppAdded(app="plain", queue="root.a"))
    rm.observe(f.AskAdded(app="plain", ask="k", resource={"memory": 1}, duration=100.0))
    rm.on_decision(_allocated("x1", "plain"), now=5.0)
    rm.observe(f.AllocationCheckpointed(t=20.0, allocation="x1"))
    rm.observe(f.AllocationCheckpointed(t=12.0, allocation="x1"))  # older: the later one stands
    rm.observe(f.AllocationCheckpointed(t=20.0, allocation="x9"))  # not running: nothing to count
    rm.on_decision(d.Kill(allocation="x1", app="plain", queue="root.a", node="n1"), now=26.0)
    assert rm.lost_work == {"default": 6.0}
    assert rm.running_time_lost == {"default": 21.0}
    assert rm.checkpointed == {}


def checkpointing_trace(cost: str) -> list[f.Feed]:
    """b's app (checkpoints every 30 s) fills the one node at t = 1 with long containers; a, guaranteed
    half the node, asks for its half at t = 200: sniper preempts b's under ``cost``."""
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 4096}), queue("b", guaranteed={"memory": 4096}), victim_cost=cost
    )
    return [
        f.PartitionConfigEvent(config=raw),
        f.NodeAdded(node="n1", capacity={"memory": 8192}),
        f.AppAdded(t=1.0, app="b1", queue="root.b", checkpoint_interval=30.0),
        f.AskAdded(t=1.0, app="b1", ask="k", resource={"memory": 2048}, count=4, duration=5000.0),
        f.AppAdded(t=200.0, app="a1", queue="root.a"),
        f.AskAdded(t=200.0, app="a1", ask="k", resource={"memory": 2048}, count=2, duration=50.0),
    ]


@pytest.mark.parametrize("cost", ["running_time", "lost_work"])
def test_a_simulated_kill_of_a_checkpointing_app_loses_only_the_work_since_its_checkpoint(cost: str) -> None:
    from sniper.simulator.run import run_simulation

    report = run_simulation(checkpointing_trace(cost)).summary
    assert report.invariant_violations == 0
    assert report.preemptions.victims == 2
    assert report.running_time_lost_seconds > 200.0, "the victims had run since t = 1"
    assert 0.0 < report.lost_work_seconds <= 2 * 30.0
    assert sum(report.lost_work_by_cause.values()) == pytest.approx(report.lost_work_seconds)
