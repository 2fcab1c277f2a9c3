"""The proportional policy's behaviour across rounds and its selection rules, on snapshots built by code."""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core.config import PreemptionConfig
from sniper.core.preemption.model import AppSnapshot, ClusterSnapshot, ContainerSnapshot, QueueSnapshot
from sniper.core.resources import Resource
from sniper.core.yarn.conformance import parse_case
from sniper.core.yarn.proportional import (
    ProportionalConfig,
    ProportionalPolicy,
    app_order,
    preemption_order,
)
from sniper.preview import preview_case


def _mem(n: int) -> Resource:
    return {"memory": n}


def _containers(app: str, sizes: list[int], *, reserved: int = 0, am: bool = False) -> tuple[ContainerSnapshot, ...]:
    out: list[ContainerSnapshot] = []
    for i, size in enumerate(sizes):
        out.append(
            ContainerSnapshot(
                id=f"{app}/{i}",
                app=app,
                resource=_mem(size),
                priority=0 if (am and i == 0) else 1,
                reserved=i < reserved,
                am=am and i == 0,
                seq=i,
            )
        )
    return tuple(out)


def snapshot(
    a_sizes: list[int], b_used: int = 0, b_pending: int = 40, *, reserved: int = 0, a_pct: float = 0.0
) -> ClusterSnapshot:
    """root (100) -> a (guarantee 50, one app with ``a_sizes`` containers) and b (guarantee 50, demand)."""
    a_used = sum(a_sizes[reserved:])
    app = AppSnapshot("app-a", "root.a", 0, containers=_containers("app-a", a_sizes, reserved=reserved))

    def queue(path: str, used: int, pending: int, apps: tuple[AppSnapshot, ...] = ()) -> QueueSnapshot:
        return QueueSnapshot(
            path=path,
            parent="root",
            children=(),
            is_leaf=True,
            guaranteed=_mem(50),
            max=_mem(100),
            used=_mem(used),
            pending=_mem(pending),
            pending_considering_reserved=_mem(pending),
            reserved={},
            apps=apps,
            max_am_resource_percent=a_pct,
        )

    root = QueueSnapshot(
        "root", None, ("root.a", "root.b"), False, _mem(100), _mem(100), _mem(a_used + b_used), {}, {}, {}
    )
    return ClusterSnapshot(_mem(100), (root, queue("root.a", a_used, 0, (app,)), queue("root.b", b_used, b_pending)))


FULL = ProportionalConfig(
    max_wait_before_kill_ms=10_000, total_preemption_per_round=1.0, natural_termination_factor=1.0
)


def test_mark_then_kill_then_forget() -> None:
    policy = ProportionalPolicy(FULL)
    busy = snapshot([1] * 90, b_used=10)  # a must give back 40
    first = policy.round(busy, 0)
    assert len(first.marked) == 40 and not first.killable
    assert all(c.app == "app-a" for c in first.marked)
    again = policy.round(busy, 9_999)
    assert not again.marked and not again.killable, "already marked, wait not over"
    assert len(again.candidates) == 40
    expired = policy.round(busy, 10_000)
    assert len(expired.killable) == 40 and not expired.marked, "first_marked + wait <= now"
    assert policy.first_marked == {}


def test_entries_older_than_twice_the_wait_are_forgotten() -> None:
    policy = ProportionalPolicy(FULL)
    busy = snapshot([1] * 90, b_used=10)
    quiet = snapshot([1] * 90, b_used=10, b_pending=0)  # nobody needs a's extra any more
    assert len(policy.round(busy, 0).marked) == 40
    assert not policy.round(quiet, 20_000).candidates
    assert len(policy.first_marked) == 40, "20000 is not older than 2 * 10000"
    policy.round(quiet, 20_001)
    assert policy.first_marked == {}
    back = policy.round(busy, 20_002)
    assert len(back.marked) == 40 and not back.killable, "forgotten containers are marked afresh"


def test_observe_only_selects_but_sends_and_remembers_nothing() -> None:
    policy = ProportionalPolicy(ProportionalConfig(total_preemption_per_round=1.0, observe_only=True))
    result = policy.round(snapshot([1] * 90, b_used=10), 0)
    assert result.candidates and not result.marked and not result.killable and not result.unreserved
    assert result.event_count == 0
    assert policy.first_marked == {}


def test_natural_termination_and_deadzone() -> None:
    cfg = ProportionalConfig(total_preemption_per_round=1.0, natural_termination_factor=0.25)
    result = ProportionalPolicy(cfg).round(snapshot([1] * 90, b_used=10), 0)
    assert result.queues["root.a"].to_be_preempted == {"memory": 40}
    assert result.queues["root.a"].to_obtain == {"memory": 10}
    assert len(result.marked) == 10
    # used 55 is not above trunc(50 * 1.1) = 55: the deadzone leaves a alone
    calm = ProportionalPolicy(FULL).round(snapshot([1] * 55, b_used=0, b_pending=50), 0)
    assert calm.queues["root.a"].to_be_preempted == {"memory": 5}
    assert not calm.candidates


def test_round_allowance_skips_containers_that_do_not_fit() -> None:
    # allowance trunc(100 * 0.05) = 5: the 4 fits, the 3 after it no longer does, the 1 still does
    cfg = ProportionalConfig(total_preemption_per_round=0.05, natural_termination_factor=1.0)
    sizes = [30, 25, 20, 1, 3, 4]  # visited by larger seq first: 4, 3, 1, 20, 25, 30
    result = ProportionalPolicy(cfg).round(snapshot(sizes, b_used=17), 0)
    assert [c.container.id for c in result.marked] == ["app-a/5", "app-a/3"]


def test_reservations_go_first_and_are_dropped() -> None:
    # two reserved containers of 5 (not part of used), then running ones; a must give 10
    sizes = [5, 5] + [1] * 60
    result = ProportionalPolicy(FULL).round(snapshot(sizes, b_used=40, b_pending=10, reserved=2), 0)
    assert [c.container.id for c in result.marked] == ["app-a/0", "app-a/1"]
    assert [c.container.id for c in result.unreserved] == ["app-a/0", "app-a/1"]


def _am_snapshot(am_percent: float) -> ClusterSnapshot:
    """a (guarantee 10) runs 4 apps, each an AM of 5 and one container of 5; b (guarantee 90) waits for 90."""
    apps = tuple(
        AppSnapshot(f"app{i}", "root.a", i, containers=_containers(f"app{i}", [5, 5], am=True)) for i in range(4)
    )

    def leaf(path: str, g: int, used: int, pending: int, apps: tuple[AppSnapshot, ...] = ()) -> QueueSnapshot:
        return QueueSnapshot(
            path=path,
            parent="root",
            children=(),
            is_leaf=True,
            guaranteed=_mem(g),
            max=_mem(100),
            used=_mem(used),
            pending=_mem(pending),
            pending_considering_reserved=_mem(pending),
            reserved={},
            apps=apps,
            max_am_resource_percent=am_percent,
        )

    root = QueueSnapshot("root", None, ("root.a", "root.b"), False, _mem(100), _mem(100), _mem(40), {}, {}, {})
    return ClusterSnapshot(_mem(100), (root, leaf("root.a", 10, 40, 0, apps), leaf("root.b", 90, 0, 90)))


def test_am_containers_are_taken_last_and_only_above_the_am_limit() -> None:
    # a must give 30: the 4 non-AM containers (20), then AMs of the last-submitted apps while the skipped AM
    # total (20) exceeds trunc(10 * max_am_resource_percent)
    loose = ProportionalPolicy(FULL).round(_am_snapshot(0.5), 0)
    assert loose.queues["root.a"].to_obtain == {"memory": 30}
    assert loose.marked_per_app() == {"app3": 2, "app2": 2, "app1": 1, "app0": 1}
    strict = ProportionalPolicy(FULL).round(_am_snapshot(1.5), 0)  # limit 15: one AM (20 -> 15) and stop
    assert strict.marked_per_app() == {"app3": 2, "app2": 1, "app1": 1, "app0": 1}
    assert [c.container.id for c in strict.marked if c.container.am] == ["app3/0"]


def test_preemption_and_app_order() -> None:
    cs = [
        ContainerSnapshot("r", "x", {}, priority=1, reserved=True, seq=0),
        ContainerSnapshot("low-old", "x", {}, priority=5, seq=1),
        ContainerSnapshot("low-new", "x", {}, priority=5, seq=9),
        ContainerSnapshot("high", "x", {}, priority=1, seq=10),
    ]
    assert [c.id for c in preemption_order(cs)] == ["r", "low-new", "low-old", "high"]
    apps = [AppSnapshot("first", "q", 0), AppSnapshot("last", "q", 7), AppSnapshot("mid", "q", 3)]
    assert [a.id for a in app_order(apps)] == ["last", "mid", "first"]


def test_config_from_queues_yaml_section() -> None:
    cfg = ProportionalConfig.from_preemption_config(PreemptionConfig(interval=1.5, grace=15.0, observe_only=True))
    assert cfg.monitoring_interval_ms == 1500
    assert cfg.max_wait_before_kill_ms == 15_000
    assert cfg.observe_only
    assert cfg.resource_calculator == "dominant"


# --- more of YARN's own expectations (tests beyond cases.json, translated by hand) -----------------------------


def _yarn_case(
    cluster: list[int], queues: list[tuple[Any, ...]], *, calculator: str = "default", **config: Any
) -> dict[str, Any]:
    """A conformance-format case from YARN's mock-framework notation.

    ``queues``: pre-order ``(path, guaranteed, max, used, pending, priority, disabled, app)`` where ``app`` is
    ``(containers, size)`` or ``None``; each app's first container is its AM, as in YARN's mock framework.
    """
    types = ["memory-mb", "vcores", "res1"][: len(cluster)]
    paths = [q[0] for q in queues]
    out: list[dict[str, Any]] = []
    n_apps = 0
    for path, g, mx, used, pending, priority, disabled, app in queues:
        kids = [p for p in paths if p != path and p.rsplit(".", 1)[0] == path]
        q: dict[str, Any] = {
            "path": path,
            "parent": path.rsplit(".", 1)[0] if "." in path else None,
            "children": kids,
            "is_leaf": not kids,
            "guaranteed": g,
            "max": mx,
            "used": used,
            "reserved": [0] * len(cluster),
            "priority": priority,
            "preemption_disabled": disabled,
        }
        if not kids:
            apps = []
            if app is not None:
                n_apps += 1
                count, size = app
                groups = [{"first_id": 1, "count": 1, "size": size, "priority": 1, "reserved": False, "am": True}]
                groups.append(
                    {"first_id": 2, "count": count - 1, "size": size, "priority": 1, "reserved": False, "am": False}
                )
                apps.append({"id": f"app{n_apps}", "submit_order": n_apps, "priority": 1, "containers": groups})
            q.update(pending=pending, pending_considering_reserved=pending, max_am_resource_percent=0.0, apps=apps)
        out.append(q)
    cfg = {
        "max_wait_before_kill_ms": 10000,
        "total_preemption_per_round": 1.0,
        "natural_termination_factor": 1.0,
        "max_ignored_over_capacity": 0.1,
        "resource_calculator": calculator,
        "resource_types": types,
        **config,
    }
    return {"id": "yarn", "config": cfg, "cluster": {"resource": cluster}, "queues": out}


def _r(*v: int) -> list[int]:
    return list(v)


YARN_EXTRA = [
    pytest.param(
        _yarn_case(
            _r(100, 100),
            [
                ("root", _r(100, 100), _r(100, 100), _r(10, 100), _r(80, 120), 0, False, None),
                ("root.a", _r(50, 50), _r(100, 100), _r(10, 100), _r(70, 20), 0, False, (10, _r(1, 10))),
                ("root.b", _r(50, 50), _r(100, 100), _r(0, 0), _r(10, 100), 0, False, None),
            ],
            calculator="dominant",
        ),
        {"app1": 5},
        {},
        id="TestProportionalCapacityPreemptionPolicy/testPreemptionWithVCoreResource",
    ),
    pytest.param(
        _yarn_case(
            _r(100, 50),
            [
                ("root", _r(100, 50), _r(100, 50), _r(50, 50), _r(0, 0), 0, False, None),
                ("root.a", _r(50, 25), _r(100, 50), _r(50, 50), _r(0, 0), 0, False, (50, _r(2, 1))),
                ("root.b", _r(50, 25), _r(50, 25), _r(0, 0), _r(2, 1), 0, False, None),
            ],
            calculator="dominant",
            natural_termination_factor=0.2,
        ),
        {"app1": 1},  # the DRF calculator rounds the natural termination up: (-48, 1) * 0.2 -> (-9, 1)
        {},
        id="TestProportionalCapacityPreemptionPolicyInterQueueWithDRF/testInterQueuePreemptionWithNaturalTerminationFactor",
    ),
    pytest.param(
        _yarn_case(
            _r(100, 100),
            [
                ("root", _r(100, 100), _r(100, 100), _r(100, 100), _r(120, 140), 0, False, None),
                ("root.a", _r(60, 60), _r(100, 100), _r(40, 40), _r(70, 40), 0, False, (40, _r(1, 1))),
                ("root.b", _r(40, 40), _r(100, 100), _r(60, 60), _r(50, 100), 0, False, (60, _r(1, 1))),
            ],
            calculator="dominant",
            preemption_to_balance_queues_beyond_guaranteed=True,
        ),
        {"app1": 0, "app2": 21},
        {"root.a": [60, 60], "root.b": [40, 40]},
        id="TestProportionalCapacityPreemptionPolicyPreemptToBalance/testPreemptionToBalanceWithVcoreResource",
    ),
    pytest.param(
        _yarn_case(
            _r(100, 1),
            [
                ("root", _r(100, 1), _r(100, 1), _r(100, 1), _r(100, 1), 0, False, None),
                ("root.a", _r(30, 1), _r(100, 1), _r(10, 1), _r(30, 1), 0, False, (10, _r(1, 1))),
                ("root.b", _r(30, 1), _r(100, 1), _r(40, 1), _r(30, 1), 0, False, (40, _r(1, 1))),
                ("root.c", _r(30, 1), _r(100, 1), _r(50, 1), _r(30, 1), 0, False, (50, _r(1, 1))),
                ("root.d", _r(10, 1), _r(100, 1), _r(0, 0), _r(0, 0), 0, False, None),
            ],
            preemption_to_balance_queues_beyond_guaranteed=True,
        ),
        {"app2": 7, "app3": 17},
        {"root.a": 33, "root.b": 33, "root.c": 33},  # memory: the default calculator looks at nothing else
        id="TestProportionalCapacityPreemptionPolicyPreemptToBalance/testPreemptionToBalanceEnabled",
    ),
    pytest.param(
        _yarn_case(
            _r(100, 0),
            [
                ("root", _r(100, 0), _r(100, 0), _r(100, 0), _r(100, 0), 0, False, None),
                ("root.a", _r(10, 0), _r(100, 0), _r(35, 0), _r(50, 0), 1, True, (35, _r(1, 0))),
                ("root.b", _r(15, 0), _r(100, 0), _r(25, 0), _r(50, 0), 1, False, (25, _r(1, 0))),
                ("root.c", _r(20, 0), _r(100, 0), _r(39, 0), _r(50, 0), 2, False, (39, _r(1, 0))),
                ("root.d", _r(25, 0), _r(100, 0), _r(0, 0), _r(0, 0), 2, False, None),
                ("root.e", _r(30, 0), _r(100, 0), _r(1, 0), _r(99, 0), 2, False, (1, _r(1, 0))),
            ],
        ),
        {"app1": 0, "app2": 9, "app3": 19, "app4": 0},
        {},
        id="TestPreemptionForQueueWithPriorities/testPreemptionForPriorityAndDisablePreemption",
    ),
    pytest.param(
        _yarn_case(
            _r(100, 200),
            [
                ("root", _r(100, 200), _r(100, 200), _r(100, 200), _r(100, 200), 0, False, None),
                ("root.a", _r(50, 100), _r(100, 200), _r(20, 40), _r(60, 100), 1, False, None),
                ("root.a.a1", _r(10, 20), _r(100, 200), _r(10, 30), _r(30, 20), 1, False, (10, _r(1, 4))),
                ("root.a.a2", _r(40, 80), _r(100, 200), _r(10, 10), _r(30, 80), 1, False, (10, _r(1, 1))),
                ("root.b", _r(50, 100), _r(100, 200), _r(80, 160), _r(40, 100), 1, False, None),
                ("root.b.b1", _r(20, 40), _r(100, 200), _r(20, 40), _r(20, 70), 2, False, (10, _r(3, 4))),
                ("root.b.b2", _r(30, 60), _r(100, 200), _r(60, 120), _r(20, 30), 1, False, (3, _r(20, 40))),
            ],
            calculator="dominant",
        ),
        {"app1": 3, "app2": 0, "app3": 0, "app4": 2},
        {},
        id="TestPreemptionForQueueWithPriorities/testPriorityPreemptionWithMandatoryResourceForHierarchicalOfQueues",
    ),
    pytest.param(
        _yarn_case(
            _r(30, 18, 6),
            [
                ("root", _r(30, 18, 6), _r(30, 18, 6), _r(12, 12, 6), _r(1, 1, 1), 0, False, None),
                ("root.a", _r(10, 7, 2), _r(10, 6, 3), _r(6, 6, 3), _r(0, 0, 0), 0, False, (3, _r(2, 2, 1))),
                ("root.b", _r(10, 6, 2), _r(10, 6, 3), _r(6, 6, 3), _r(0, 0, 0), 0, False, (3, _r(2, 2, 1))),
                ("root.c", _r(10, 5, 2), _r(10, 6, 2), _r(0, 0, 0), _r(1, 1, 1), 0, False, None),
            ],
            calculator="dominant",
        ),
        {"app1": 0, "app2": 1},
        {},
        id="TestProportionalCapacityPreemptionPolicyInterQueueWithDRF/test3ResourceTypesInterQueuePreemption",
    ),
]


@pytest.mark.parametrize(("raw", "marked", "ideal"), YARN_EXTRA)
def test_more_yarn_expectations(raw: dict[str, Any], marked: dict[str, int], ideal: dict[str, int | list[int]]) -> None:
    case = parse_case(raw)
    result = preview_case(case)
    (rnd,) = result["rounds"]
    for app, count in marked.items():
        assert rnd["marked"][app] == count, app
    for path, values in ideal.items():
        got = rnd["queues"][path]["ideal_assigned"]
        assert (got if isinstance(values, list) else got[0]) == values, path
