"""The metrics (architecture: Metrics) on hand-fed histories (no actors): DRF time to guarantee,
stranded capacity per resource, wasted and ping-pong victims (reserved ones included), lost work,
samples only on change, the scarcest resource, and the report as one struct."""

from __future__ import annotations

from itertools import count
from pathlib import Path

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from sniper.core import resources as res
from sniper.core.config import parse_partition
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.compare import USER_ROWS_UP_TO, PolicyRun, compare, table_rows
from sniper.simulator.metrics import FirstAllocationWait, Metrics, Sample
from sniper.simulator.model import ClusterModel
from sniper.simulator.plot import scarcest_resource
from sniper.simulator.report import Report
from sniper.simulator.rm import StandInRM
from sniper.simulator.run import SimulationSettings
from tests.core_support import partition_raw, queue
from tests.simulation_support import REPORT_KEYS, gappy_trace

_seq = count(1)
GPU_NODE = {"memory": 100, "vcore": 100, "gpu": 8}


def _gpu_model() -> tuple[ClusterModel, Metrics]:
    config = parse_partition(
        partition_raw(
            queue("a", guaranteed={"memory": 50, "vcore": 50, "gpu": 4}),
            queue("b", guaranteed={"memory": 50, "vcore": 50, "gpu": 4}),
        )
    )
    model = ClusterModel("default", config)
    for e in (
        f.NodeAdded(node="n1", capacity=GPU_NODE),
        f.AppAdded(app="a1", queue="root.a"),
        f.AppAdded(app="b1", queue="root.b"),
    ):
        model.on_event(e)
    return model, Metrics(model)


def _alloc(aid: str, app: str, ask: str, queue_path: str, resource: dict[str, int], t: float, **kw: str) -> d.Allocated:
    return d.Allocated(
        allocation=aid, app=app, ask=ask, queue=queue_path, node="n1", resource=resource, seq=next(_seq), t=t, **kw
    )


def test_time_to_guarantee_uses_the_drf_comparison() -> None:
    model, metrics = _gpu_model()
    # b holds every GPU with little memory; a asks for GPUs: below its guarantee on its dominant resource
    model.on_event(f.AskAdded(app="b1", ask="hog", resource={"memory": 5, "vcore": 5, "gpu": 8}))
    model.on_decision(_alloc("x1", "b1", "hog", "root.b", {"memory": 5, "vcore": 5, "gpu": 8}, 0.0))
    model.on_event(f.AskAdded(app="a1", ask="g", resource={"memory": 5, "vcore": 5, "gpu": 4}))
    metrics.sample(1.0)
    model.on_decision(d.Released(allocation="x1", app="b1", queue="root.b", node="n1", resource={}, seq=next(_seq)))
    model.on_decision(_alloc("x2", "a1", "g", "root.a", {"memory": 5, "vcore": 5, "gpu": 4}, 31.0))
    metrics.sample(31.0)
    ttg = metrics.time_to_guarantee()["root.a"]
    assert (ttg.episodes, ttg.unmet, ttg.max) == (1, 0, 30.0)


amounts = st.dictionaries(st.sampled_from(["memory", "vcore", "gpu"]), st.integers(0, 100))


@given(usage=amounts, guaranteed=amounts, capacity=amounts, released=amounts)
def test_without_demand_a_queues_target_is_never_drf_above_its_usage(
    usage: dict[str, int], guaranteed: dict[str, int], capacity: dict[str, int], released: dict[str, int]
) -> None:
    """What lets a sample call a queue with nothing pending satisfied without comparing."""
    nothing = {k: -v for k, v in released.items()}
    assert not res.drf_below(usage, res.component_min(guaranteed, res.add(usage, nothing)), capacity)


def test_a_queue_below_its_guarantee_with_nothing_waiting_is_not_waiting_for_it() -> None:
    model, metrics = _gpu_model()
    model.on_event(f.AskAdded(app="a1", ask="g", resource={"memory": 5, "vcore": 5, "gpu": 1}))
    model.on_decision(_alloc("x1", "a1", "g", "root.a", {"memory": 5, "vcore": 5, "gpu": 1}, 0.0))
    metrics.sample(0.0)
    model.on_event(f.AskAdded(app="a1", ask="more", resource={"memory": 5, "vcore": 5, "gpu": 2}))
    metrics.sample(10.0)
    model.on_event(f.AskRemoved(app="a1", ask="more"))
    metrics.sample(25.0)
    ttg = metrics.time_to_guarantee()["root.a"]
    assert (ttg.episodes, ttg.unmet, ttg.max) == (1, 0, 15.0)


def test_idle_gpus_while_gpu_asks_wait_are_stranded_per_resource() -> None:
    model, metrics = _gpu_model()
    model.on_event(f.AskAdded(app="a1", ask="run", resource={"memory": 90, "vcore": 10, "gpu": 2}))
    model.on_decision(_alloc("x1", "a1", "run", "root.a", {"memory": 90, "vcore": 10, "gpu": 2}, 0.0))
    # a waiting pod needs 3 GPUs (6 are idle) but 20 memory (10 left): the GPUs sit idle
    model.on_event(f.AskAdded(app="b1", ask="wait", resource={"memory": 20, "vcore": 10, "gpu": 3}))
    metrics.sample(0.0)
    metrics.finish(10.0)
    stranded = metrics.stranded()
    assert stranded["gpu"] == round(3 / 8, 4)  # idle, wanted: min(6 idle, 3 waiting) of 8
    assert stranded["memory"] == round(10 / 100, 4)
    assert metrics.utilization()["gpu"] == 0.25
    assert scarcest_resource(metrics) == "memory"  # demand 110 of 100 beats 5 of 8 GPUs


def test_samples_are_taken_only_when_the_model_changed() -> None:
    model, metrics = _gpu_model()
    assert metrics.sample(1.0)
    assert not metrics.sample(2.0)
    model.on_event(f.AskAdded(app="a1", ask="k", resource={"memory": 1}))
    assert metrics.sample(3.0)
    assert [s.t for s in metrics.samples] == [1.0, 3.0]


def _preempt(aid: str, t: float, reservation: str, for_ask: str = "want") -> d.Preempt:
    return d.Preempt(
        allocation=aid,
        app="b1",
        queue="root.b",
        node="n1",
        resource={"memory": 50},
        for_ask=for_ask,
        for_app="a1",
        for_queue="root.a",
        deadline=t + 15,
        reservation=reservation,
        policy="sniper",
        cost=1.0,
        reason="test",
        seq=next(_seq),
        t=t,
    )


def _kill(aid: str, t: float) -> d.Kill:
    return d.Kill(allocation=aid, app="b1", queue="root.b", node="n1", seq=next(_seq), t=t)


def test_a_reserved_victim_whose_room_went_back_to_its_queue_is_wasted_and_ping_pongs() -> None:
    metrics = Metrics(ClusterModel("default"))
    for x in (
        _alloc("v1", "b1", "task", "root.b", {"memory": 50}, 0.0),
        _preempt("v1", 10.0, "r1"),
        _kill("v1", 25.0),
        d.ReservationEnded(reservation="r1", app="a1", ask="want", node="n1", reason="gone", seq=next(_seq), t=25.0),
        _alloc("v2", "b1", "task", "root.b", {"memory": 50}, 25.5),
    ):
        metrics.record(x)
    metrics.samples.append(_blank(100.0))
    assert metrics.preemption_outcomes(grace=15.0, cycle=1.0) == (1, 1, 0)


def test_a_victim_killed_after_its_beneficiary_was_placed_elsewhere_is_wasted() -> None:
    metrics = Metrics(ClusterModel("default"))
    for x in (
        _alloc("v1", "b1", "task", "root.b", {"memory": 50}, 0.0),
        _preempt("v1", 10.0, "r1"),
        _alloc("w1", "a1", "want", "root.a", {"memory": 50}, 12.0),  # on other room, not the reservation
        _kill("v1", 25.0),
    ):
        metrics.record(x)
    metrics.samples.append(_blank(100.0))
    assert metrics.preemption_outcomes(grace=15.0, cycle=1.0) == (1, 0, 0)


def test_a_victim_whose_beneficiary_took_its_room_is_useful() -> None:
    metrics = Metrics(ClusterModel("default"))
    for x in (
        _alloc("v1", "b1", "task", "root.b", {"memory": 50}, 0.0),
        _preempt("v1", 10.0, "r1"),
        _kill("v1", 25.0),
        _alloc("w1", "a1", "want", "root.a", {"memory": 50}, 25.0, reservation="r1"),
    ):
        metrics.record(x)
    metrics.samples.append(_blank(100.0))
    assert metrics.preemption_outcomes(grace=15.0, cycle=1.0) == (0, 0, 0)


def _blank(t: float) -> Sample:
    """A sample that only says when the run ended."""
    return Sample(t, {}, {}, {"memory": 100}, None)


def test_lost_work_counts_every_killed_or_lost_container_retried_or_not() -> None:
    rm = StandInRM()
    rm.observe(f.AppAdded(app="a1", queue="root.a"))
    rm.observe(f.AskAdded(app="a1", ask="k", resource={"memory": 1}, count=2, retry=False))
    rm.on_decision(_alloc("x1", "a1", "k", "root.a", {"memory": 1}, 0.0), 5.0)
    rm.on_decision(_alloc("x2", "a1", "k", "root.a", {"memory": 1}, 0.0), 6.0)
    assert rm.on_decision(d.Kill(allocation="x1", app="a1", queue="root.a", node="n1", seq=1), 9.0)[1:] == []
    lost = d.AllocationLost(allocation="x2", app="a1", ask="k", queue="root.a", node="n1", resource={}, seq=2)
    rm.on_decision(lost, 10.0)
    assert rm.lost_work == {"default": 4.0 + 4.0}


def _notice(aid: str, policy: str, seq: int) -> d.Preempt:
    return d.Preempt(
        allocation=aid,
        app="a1",
        queue="root.a",
        node="n1",
        resource={"memory": 1},
        for_ask="big",
        for_app="b1",
        for_queue="root.b",
        deadline=0.0,
        reservation="",
        policy=policy,
        seq=seq,
    )


def test_lost_work_by_cause_names_what_ended_each_container_and_adds_up_to_the_total() -> None:
    rm = StandInRM()
    rm.observe(f.AppAdded(app="a1", queue="root.a"))
    rm.observe(f.AskAdded(app="a1", ask="k", resource={"memory": 1}, count=9, retry=False))
    for i in range(1, 10):
        rm.on_decision(_alloc(f"x{i}", "a1", "k", "root.a", {"memory": 1}, 0.0), float(i))

    def kill(aid: str, reason: str, seq: int) -> d.Kill:
        return d.Kill(allocation=aid, app="a1", queue="root.a", node="n1", reason=reason, seq=seq)

    # A notice's kill is the noticing policy's; a cancelled notice is forgotten (x3's later kill has none).
    rm.on_decision(_notice("x1", "sniper", 100), 10.0)
    rm.on_decision(kill("x1", "grace period expired", 101), 20.0)  # 19 s
    rm.on_decision(_notice("x2", "proportional", 102), 10.0)
    rm.on_decision(kill("x2", "grace period expired", 103), 20.0)  # 18 s
    rm.on_decision(_notice("x3", "intra_queue", 104), 10.0)
    rm.on_decision(
        d.PreemptCancelled(allocation="x3", app="a1", queue="root.a", node="n1", reservation="r", reason="", seq=105),
        11.0,
    )
    rm.on_decision(kill("x3", "grace period expired", 106), 20.0)  # 17 s, no notice standing
    rm.on_decision(kill("x4", f"{d.KILL_OPPORTUNISTIC}: first to go", 107), 20.0)  # 16 s
    rm.on_decision(kill("x5", d.KILL_OVERCOMMIT, 108), 20.0)  # 15 s
    rm.on_decision(kill("x6", f"{d.KILL_AT_REQUEST_DEADLINE} pr-1: deadline passed", 109), 20.0)  # 14 s
    lost = d.AllocationLost(allocation="x7", app="a1", ask="k", queue="root.a", node="n1", resource={}, seq=110)
    rm.on_decision(lost, 20.0)  # 13 s
    rm.on_decision(d.Released(allocation="x8", app="a1", queue="root.a", node="n1", resource={}, seq=111), 20.0)
    assert rm.lost_work_by_cause == {
        "default": {
            "sniper": 19.0,
            "proportional": 18.0,
            "unknown": 17.0,
            "opportunistic": 16.0,
            "overcommit": 15.0,
            "preempt_request_killed": 14.0,
            "node_lost": 13.0,
        }
    }
    assert sum(rm.lost_work_by_cause["default"].values()) == rm.lost_work["default"]


def test_compare_shows_one_lost_work_row_per_cause_any_run_lost_work_to() -> None:
    runs = {
        "sniper": PolicyRun(Report(lost_work_by_cause={"sniper": 12.4, "node_lost": 3.0}), {}, []),
        "proportional": PolicyRun(Report(lost_work_by_cause={"proportional": 99.6}), {}, []),
    }
    rows = {row[0]: row[1:] for row in table_rows(runs)}
    assert rows["lost work sniper (container-s)"] == ["12", "0"]
    assert rows["lost work proportional (container-s)"] == ["0", "100"]
    assert rows["lost work node_lost (container-s)"] == ["3", "0"]
    assert "lost work opportunistic (container-s)" not in rows


def test_compare_shows_each_users_longest_first_allocation_wait_only_for_a_few_users() -> None:
    def waits(users: dict[str, float]) -> dict[str, FirstAllocationWait]:
        return {u: FirstAllocationWait(apps=1, p50=w, max=w) for u, w in users.items()}

    runs = {
        "sniper": PolicyRun(Report(first_allocation_wait=waits({"hank": 584.1, "lou": 0.0})), {}, []),
        "none": PolicyRun(Report(first_allocation_wait=waits({"hank": 0.0})), {}, []),
    }
    rows = {row[0]: row[1:] for row in table_rows(runs)}
    assert rows["first allocation wait max hank (s)"] == ["584.1", "0"]
    assert rows["first allocation wait max lou (s)"] == ["0", "-"]
    many = {f"user{i}": float(i) for i in range(USER_ROWS_UP_TO + 1)}
    crowded = {"sniper": PolicyRun(Report(first_allocation_wait=waits(many)), {}, [])}
    assert not [row for row in table_rows(crowded) if row[0].startswith("first allocation wait")]


def test_compare_runs_policies_in_parallel_processes_with_the_same_reports(tmp_path: Path) -> None:
    events = gappy_trace("sniper")
    settings = SimulationSettings(until=600.0)
    serial = compare(events, None, ["proportional", "none"], settings)
    parallel = compare(events, None, ["proportional", "none"], settings, jobs=2)
    assert list(parallel) == ["proportional", "none"]
    for policy in serial:
        a, b = serial[policy].summary, parallel[policy].summary
        assert msgspec.structs.replace(a, wall_seconds=0.0, allocations_per_s=None) == msgspec.structs.replace(
            b, wall_seconds=0.0, allocations_per_s=None
        )
    labels = [row[0] for row in table_rows(parallel)]
    assert {"utilization gpu-milli", "fairness gap gpu-milli", "stranded gpu-milli", "utilization memory"} <= set(
        labels
    )


def test_the_report_is_one_struct_that_encodes_to_every_documented_key() -> None:
    report = Report(policy="sniper", sim_seconds=1.0)
    decoded = msgspec.json.decode(msgspec.json.encode(report), type=Report)
    assert decoded == report
    keys = set(report.to_dict())
    assert keys >= REPORT_KEYS


def test_a_sample_with_the_last_samples_figures_reuses_its_ideal_and_a_change_recomputes_it() -> None:
    model, _ = _gpu_model()
    calls: list[int] = []

    def ideal(m: ClusterModel) -> dict[str, dict[str, int]]:
        calls.append(m.version)
        return {"root.a": dict(m.queue_usage().get("root.a", {}))}

    metrics = Metrics(model, ideal)
    assert metrics.sample(0.0)
    model.on_event(f.AppAdded(app="a2", queue="root.a"))  # a new version, the same figures
    assert metrics.sample(1.0)
    assert len(calls) == 1 and metrics.samples[-1].ideal is metrics.samples[0].ideal
    model.on_decision(_alloc("x1", "a1", "k", "root.a", {"memory": 10, "gpu": 1}, 2.0))  # usage changes
    assert metrics.sample(2.0)
    assert len(calls) == 2 and metrics.samples[-1].ideal == {"root.a": {"memory": 10, "gpu": 1}}


def test_a_kill_is_classified_by_its_cause_not_by_how_its_reason_reads_elsewhere() -> None:
    assert d.kill_cause(d.KILL_OPPORTUNISTIC) == "opportunistic"
    assert d.kill_cause(d.KILL_OVERCOMMIT) == "overcommit"
    assert d.kill_cause(f"{d.KILL_AT_REQUEST_DEADLINE} preq-3: deadline passed") == "request_deadline"
    assert d.kill_cause(d.Kill(allocation="a", app="x", queue="root.a", node="n").reason) == "grace_expired"


def test_metrics_count_kills_by_their_cause_and_by_their_reason_in_a_log_without_causes() -> None:
    """A kill's ``cause`` decides what it counts as, whatever its reason reads; a kill logged without a
    cause is classified by its reason."""
    base = d.Kill(allocation="a", app="x", queue="root.a", node="n")
    metrics = Metrics(ClusterModel("default"))
    for kill in (
        msgspec.structs.replace(base, reason="its node ran hot", cause="overcommit"),
        msgspec.structs.replace(base, reason=d.KILL_OVERCOMMIT, cause="grace_expired"),
        msgspec.structs.replace(base, reason=d.KILL_OPPORTUNISTIC),
        base,
    ):
        metrics.record(kill)
    assert (metrics.opportunistic().evictions, metrics.opportunistic().overcommit_kills) == (1, 1)
    assert metrics.actions()["kill"] == 2  # the grace kill read from its cause and the one without a cause
    assert [d.cause_of(x) for x in metrics.decisions if isinstance(x, d.Kill)] == [
        "overcommit",
        "grace_expired",
        "opportunistic",
        "grace_expired",
    ]
